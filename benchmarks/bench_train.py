"""Benchmark: one training step (forward + backward + Adam) of the NumPy trainer, structure-aware and dense
paths, against PyTorch on the CPU with the same shapes and thread count, and against the dense GEMM floor (the
dense step's matrix products timed alone).

Shapes (issue 14): N=4096, R=16, d=256, m=1024, batch 4096, float32, one layer, uniform attention; then
full-batch steps (all N·R = 65536 queries). Targets (issue 14): structured ≤ 1.0 × the dense GEMM floor and
≤ 0.55 × PyTorch.

Every variant is timed in the same run with interleaved repetitions (structured, dense, torch, floor, then
again), and the minimum over repetitions is reported, so that load from other processes inflates no variant
more than another. A step is timed between two consecutive optimizer callbacks of ``train`` (so it includes
the batch gather, rebuilding the Model from the flat arrays, the gradients and the Adam update).

PyTorch is not a dependency: install it for this benchmark only (``pip install torch==2.13.0``); without it
the torch column is skipped. Run by hand: ``python benchmarks/bench_train.py [--reps 5] [--full-reps 2]``.
``--profile`` adds the time per phase of the structured step (forward tables, MLP, read-out, backward, Adam).
``--grid-profile`` instead profiles one full-batch step of the capacity grid (issue 33), e.g. ``python
benchmarks/bench_train.py --grid-profile --R 16 --d 60 --m 240 --reps 2``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from georecall.constructions.single_hop import single_hop_queries
from georecall.theory.tasks import random_task
from georecall.training.parameters import init_model
from georecall.training.train import train


def numpy_step_times(model, tokens, answers, steps: int, batch: int | None, path: str) -> list[float]:
    """Seconds of ``steps`` consecutive training steps (after one warm-up step)."""
    stamps = []
    result = train(model, tokens, answers, steps=steps + 1, lr=1e-3, batch_size=batch, rng=0,
                   stop_at_accuracy=None, path=path,
                   callback=lambda params, step, grads: stamps.append(time.perf_counter()) and False)
    assert result.path == path
    return list(np.diff(stamps))


def dense_products(B: int, N: int, d: int, m: int):
    """The matrix products of the dense step (forward, backward, attention), as shape triples (a, k, b)."""
    return [
        (B, d, d), (d, d, d),  # attention: x·(W_V W_O), and W_V·W_O itself
        (B, d, m), (B, m, d), (B, d, N),  # forward MLP and logits
        (B, N, d), (N, B, d),  # logits backward: dz·U, dz^T·x
        (m, B, d), (B, d, m), (d, B, m), (B, m, d),  # MLP backward: dW2, dh, dW1, dx
        (B, d, d), (d, B, d), (d, d, d), (d, d, d),  # attention backward: dS, G = S^T g, dW_V, dW_O
    ]


def structured_products(B: int, U_s: int, N: int, R: int, d: int, m: int):
    """The matrix products of the structured step (U_s distinct subjects in the batch)."""
    return [
        (d, d, d), (U_s, d, d), (R, d, d), (U_s, d, m), (R, d, m),  # tables A^E, A^Q, P^E, P^Q
        (B, m, d), (B, d, N), (B, N, d), (N, B, d),  # h·W2, logits, dz·U, dz^T·y
        (m, B, d), (B, d, m),  # dW2 = h^T g, δ = g W2^T
        (d, U_s, m), (d, R, m), (U_s, m, d), (R, m, d),  # dW1, dA^E, dA^Q
        (U_s, d, d), (R, d, d), (d, U_s, d), (d, R, d),  # dE, dQ, dM
    ]


def flops(products) -> float:
    return sum(2.0 * a * k * b for a, k, b in products)


def gemm_time(products, rng) -> float:
    """Seconds for the products alone (float32, contiguous operands allocated beforehand)."""
    f32 = lambda *shape: rng.standard_normal(shape).astype(np.float32)  # noqa: E731
    operands = [(f32(a, k), f32(k, b)) for a, k, b in products]
    start = time.perf_counter()
    for x, y in operands:
        x @ y
    return time.perf_counter() - start


def torch_step_times(N, R, d, m, B, steps: int) -> list[float] | None:
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
    return times[1:]


def profile_structured(model, tokens, answers, batch: int, reps: int) -> dict[str, float]:
    """Minimum seconds per phase of the structured step, timed by wrapping its building blocks."""
    import georecall.training.train_structured as ts
    from georecall.training.parameters import params_of, with_params
    from georecall.training.train import adam

    rng = np.random.default_rng(0)
    params = params_of(model)
    best: dict[str, float] = {}
    original = ts.readout_cross_entropy
    spent = {}

    def timed_readout(*args, **kwargs):
        start = time.perf_counter()
        out = original(*args, **kwargs)
        spent["read-out + cross-entropy (3 B×d×N products)"] = time.perf_counter() - start
        return out

    ts.readout_cross_entropy = timed_readout
    try:
        for _ in range(reps):
            idx = rng.permutation(tokens.shape[0])[:batch]
            start = time.perf_counter()
            current = with_params(model, params)
            spent["rebuild Model (unflatten)"] = time.perf_counter() - start
            start = time.perf_counter()
            _, grads, _ = ts.loss_and_grads_structured(current, tokens[idx], answers[idx])
            total = time.perf_counter() - start
            spent["gradients except read-out (tables, MLP, backward)"] = (
                total - spent["read-out + cross-entropy (3 B×d×N products)"])
            stamps = []
            adam(lambda p, s: grads, params, 3, callback=lambda p, s, g: stamps.append(time.perf_counter()))
            spent["Adam update"] = float(np.min(np.diff(stamps)))
            for key, value in spent.items():
                best[key] = min(best.get(key, np.inf), value)
    finally:
        ts.readout_cross_entropy = original
    return best


def run(args, B: int, reps: int, steps: int, label: str) -> None:
    N, R, d, m = args.N, args.R, args.d, args.m
    task = random_task(N, R, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(N, R, d, m, rng=0)
    batch = None if B >= N * R else B
    rng = np.random.default_rng(0)
    U_s = N if batch is None else int(round(N * (1 - (1 - 1 / N) ** B)))  # expected distinct subjects
    dense_p, struct_p = dense_products(B, N, d, m), structured_products(B, U_s, N, R, d, m)
    best = dict.fromkeys(("structured", "dense", "torch", "floor", "structured floor"), np.inf)
    have_torch = True
    for _ in range(reps):  # interleaved: every variant once per repetition
        best["structured"] = min(best["structured"], *numpy_step_times(model, tokens, answers, steps, batch,
                                                                       "structured"))
        best["dense"] = min(best["dense"], *numpy_step_times(model, tokens, answers, steps, batch, "dense"))
        if have_torch:
            times = torch_step_times(N, R, d, m, B, steps)
            have_torch = times is not None
            if have_torch:
                best["torch"] = min(best["torch"], *times)
        best["floor"] = min(best["floor"], gemm_time(dense_p, rng))
        best["structured floor"] = min(best["structured floor"], gemm_time(struct_p, rng))
    floor = best["floor"]
    print(f"\n{label}: N={N} R={R} d={d} m={m} batch={B} float32, 2 threads, min over {reps} interleaved "
          f"repetitions of {steps} steps")
    print(f"  {'':24s} {'ms':>9s} {'/ floor':>8s} {'/ torch':>8s}  GFLOP/s (dense products)")
    for name in ("structured", "dense", "torch", "floor", "structured floor"):
        t = best[name]
        if not np.isfinite(t):
            print(f"  {name:24s} not installed (pip install torch==2.13.0 for this comparison)")
            continue
        vs_torch = f"{t / best['torch']:8.2f}" if np.isfinite(best["torch"]) else f"{'-':>8s}"
        print(f"  {name:24s} {t * 1e3:9.1f} {t / floor:8.2f} {vs_torch}  {flops(dense_p) / t / 1e9:7.1f}")
    print(f"  dense floor {flops(dense_p) / 1e9:.1f} GFLOP; structured step's products "
          f"{flops(struct_p) / 1e9:.1f} GFLOP (U_s ≈ {U_s} distinct subjects per batch)")
    if args.profile:
        phases = profile_structured(model.astype(np.float32), tokens, answers, B, max(3, reps))
        print("  structured step by phase (min ms): " +
              "; ".join(f"{k} {v * 1e3:.1f}" for k, v in phases.items()))


def grid_profile(N: int, R: int, d: int, m: int, reps: int) -> None:
    """Where a full-batch step of the capacity grid's largest searches goes (issue 33: N = 4096, R = 16,
    d ≈ 60, m = 4d, all 65,536 queries): the structured step's gradients, its read-out alone, and inside the
    read-out the three B×d×N products alone (same shapes, same chunks) against the element-wise softmax.

    Times are CPU seconds of this process (``time.process_time``, all its threads), the minimum over ``reps``
    interleaved repetitions: on a machine shared with other jobs, wall time measures the neighbours, CPU
    time what the step itself spends.
    """
    import georecall.training.train_structured as ts

    task = random_task(N, R, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(N, R, d, m, rng=0).astype(np.float32)
    rng = np.random.default_rng(0)
    y = rng.standard_normal((N * R, d)).astype(np.float32)
    U = model.unembedding.astype(np.float32)
    rows = max(256, ts.READOUT_CHUNK_BYTES // (4 * N))
    block = np.empty((rows, N), dtype=np.float32)
    dy = np.empty_like(y)
    dU, partial = np.empty_like(U), np.empty_like(U)
    best = dict.fromkeys(("step (gradients)", "read-out", "read-out products alone"), np.inf)
    for _ in range(reps):
        start = time.process_time()
        ts.loss_and_grads_structured(model, tokens, answers)
        best["step (gradients)"] = min(best["step (gradients)"], time.process_time() - start)
        start = time.process_time()
        ts.readout_cross_entropy(y, U, answers, True)
        best["read-out"] = min(best["read-out"], time.process_time() - start)
        start = time.process_time()
        for a in range(0, N * R, rows):
            b = min(N * R, a + rows)
            z = block[: b - a]
            np.matmul(y[a:b], U.T, out=z)
            np.matmul(z, U, out=dy[a:b])
            np.matmul(z.T, y[a:b], out=dU if a == 0 else partial)
        best["read-out products alone"] = min(best["read-out products alone"], time.process_time() - start)
    step, readout, products = best["step (gradients)"], best["read-out"], best["read-out products alone"]
    gflop = 3 * 2.0 * N * R * N * d / 1e9
    print(f"\ngrid step profile: N={N} R={R} d={d} m={m}, full batch {N * R} queries, float32, CPU seconds "
          f"(min of {reps})")
    print(f"  step (loss and gradients)   {step:7.2f} s")
    print(f"  read-out + cross-entropy    {readout:7.2f} s  ({readout / step:.0%} of the step)")
    print(f"    its 3 products alone      {products:7.2f} s  ({gflop:.0f} GFLOP, "
          f"{gflop / products:.0f} GFLOP/s)")
    print(f"    element-wise softmax etc. {readout - products:7.2f} s  ({(readout - products) / step:.0%} of "
          f"the step)")
    print(f"  everything else             {step - readout:7.2f} s  ({(step - readout) / step:.0%})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description="time one training step: structured and dense NumPy paths, PyTorch, the dense GEMM floor")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions (minibatch)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per repetition and variant")
    parser.add_argument("--full-reps", type=int, default=2, help="repetitions of full-batch steps (0: skip)")
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--d", type=int, default=256)
    parser.add_argument("--m", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--profile", action="store_true", help="time the structured step's phases")
    parser.add_argument("--grid-profile", action="store_true",
                        help="only: where the capacity grid's full-batch step goes (--N, --R, --d, --m; "
                             "e.g. --R 16 --d 60 --m 240), in CPU seconds")
    args = parser.parse_args()
    if args.grid_profile:
        grid_profile(args.N, args.R, args.d, args.m, max(1, args.reps))
        return
    run(args, args.batch, args.reps, args.steps, "minibatch")
    if args.full_reps:
        run(args, args.N * args.R, args.full_reps, 1, "full batch (all N·R queries)")


if __name__ == "__main__":
    main()
