"""Benchmark: one training step (forward + backward + Adam) of the NumPy trainer against PyTorch on the CPU with
the same shapes and thread count, and against the GEMM floor (the same matrix products timed alone).

Shapes (issue 6): N=4096, R=16, d=256, m=1024, batch 4096, float32, one layer, uniform attention.
Targets (issue 6): time(numpy) / time(torch) <= 0.7 and time(numpy) <= 1.2 x the GEMM floor.

PyTorch is not a dependency: install it for this benchmark only (`pip install torch==2.13.0`); without it the
torch column is skipped. Run by hand: python benchmarks/bench_train.py [--steps 10]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from georecall.constructions.single_hop import single_hop_queries
from georecall.theory.tasks import random_task
from georecall.verify.train import init_model, train


def numpy_step_times(model, tokens, answers, steps: int, batch: int) -> list[float]:
    stamps = []
    train(model, tokens, answers, steps=steps + 1, lr=1e-3, batch_size=batch, rng=0, stop_at_accuracy=None,
          callback=lambda params, step, grads: stamps.append(time.perf_counter()) and False)
    return list(np.diff(stamps))


def gemm_floor(B: int, N: int, d: int, m: int, repeats: int = 5) -> tuple[float, float]:
    """Seconds and FLOPs of the step's matrix products alone (forward, backward, attention)."""
    rng = np.random.default_rng(0)
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    x, W, Wv, W1, W2, U = f32(B, d), f32(d, d), f32(d, d), f32(d, m), f32(m, d), f32(N, d)
    h, dz, xT = f32(B, m), f32(B, N), f32(d, B)
    products = [  # the products the NumPy step performs
        (x, W), (W, Wv),  # attention: x·(W_V W_O), and W_V·W_O itself
        (x, W1), (h, W2), (x, U.T),  # forward MLP and logits
        (dz, U), (dz.T, x),  # logits backward
        (h.T, x), (x, W2.T), (xT, h), (h, W1.T),  # MLP backward
        (x, W.T), (xT, x), (W, Wv.T), (Wv.T, W),  # attention backward: dS, G = S^T g, dW_V, dW_O
    ]
    flops = sum(2.0 * a.shape[0] * a.shape[1] * b.shape[1] for a, b in products)
    contiguous = [(np.ascontiguousarray(a), np.ascontiguousarray(b)) for a, b in products]
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for a, b in contiguous:
            a @ b
        best = min(best, time.perf_counter() - start)
    return best, flops


def torch_step_time(N, R, d, m, B, steps: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    p = {name: (torch.randn(*shape, generator=gen) / shape[0] ** 0.5).requires_grad_()
         for name, shape in {"E": (N, d), "Q": (R, d), "WV": (d, d), "WO": (d, d), "W1": (d, m), "W2": (m, d),
                             "U": (N, d)}.items()}
    p["b1"] = torch.zeros(m, requires_grad=True)
    p["b2"] = torch.zeros(d, requires_grad=True)
    opt = torch.optim.Adam(p.values(), lr=1e-3)
    r = torch.randint(0, R, (B,), generator=gen)
    s = torch.randint(0, N, (B,), generator=gen)
    y = torch.randint(0, N, (B,), generator=gen)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        xr, xs = p["Q"][r], p["E"][s]
        x = xs + ((xr + xs) / 2) @ p["WV"] @ p["WO"]
        x = x + torch.relu(x @ p["W1"] + p["b1"]) @ p["W2"] + p["b2"]
        loss = torch.nn.functional.cross_entropy(x @ p["U"].T, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return float(np.median(times[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description="time one training step: NumPy vs PyTorch vs GEMM floor")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=4096)
    args = parser.parse_args()
    task = random_task(args.N, args.R, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(args.N, args.R, args.d, args.m, rng=0)
    ours = float(np.median(numpy_step_times(model, tokens, answers, args.steps, args.batch)))
    floor, flops = gemm_floor(args.batch, args.N, args.d, args.m)
    reference = torch_step_time(args.N, args.R, args.d, args.m, args.batch, args.steps)
    print(f"shapes N={args.N} R={args.R} d={args.d} m={args.m} batch={args.batch} float32, 2 threads")
    print(f"numpy step   {ours * 1e3:8.1f} ms   {flops / ours / 1e9:6.1f} GFLOP/s (matrix products only)")
    print(f"GEMM floor   {floor * 1e3:8.1f} ms   {flops / floor / 1e9:6.1f} GFLOP/s   numpy / floor = "
          f"{ours / floor:.2f}")
    if reference is None:
        print("torch        not installed (pip install torch==2.13.0 for this comparison)")
    else:
        print(f"torch step   {reference * 1e3:8.1f} ms   {flops / reference / 1e9:6.1f} GFLOP/s   numpy / torch = "
              f"{ours / reference:.2f}")


if __name__ == "__main__":
    main()
