"""Benchmark: G1 at N=4096, R=16 (binary codes) — build + exhaustive check of all 65,536 queries, in float64
and in integer mode; and the checker's logits product against a plain NumPy matmul of the same shape.

Run by hand:  /usr/bin/time -v python benchmarks/bench_check.py   (peak memory: "Maximum resident set size")
Targets (issue 2): build + check <= 5 s wall on 2 cores, peak memory <= 1 GiB; logits product >= 50% of the
plain matmul's GFLOP/s.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from georecall.constructions.model import _read_columns, chunk_size, forward
from georecall.constructions.single_hop import build_g1, single_hop_queries
from georecall.theory.tasks import random_task
from georecall.verify.check import check_queries


def best_of(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    for integer in (False, True):
        start = time.perf_counter()
        task = random_task(args.N, args.R, args.seed)
        built = build_g1(task, "binary", integer=integer)
        tokens, answers = single_hop_queries(task)
        built_at = time.perf_counter()
        result = check_queries(built.model, tokens, answers, integer=integer)
        total = time.perf_counter() - start
        print(f"G1 N={args.N} R={args.R} {'integer' if integer else 'float64'}: build {built_at - start:.2f} s, "
              f"check {result.seconds:.2f} s, total {total:.2f} s; exact={result.exact}, "
              f"min margin {result.min_margin:.4g}")

    # The logits product as the checker runs it: residual columns U reads, one chunk of queries.
    model = built.model
    chunk = chunk_size(model, 2)
    _, trace = forward(model, tokens[:chunk], trace=True)
    x = trace.residual[-1][:, -1]
    read = _read_columns(model)
    cols = np.arange(model.d) if read is None else read
    U = model.unembedding
    flops = 2.0 * chunk * cols.size * U.shape[0]
    ours = best_of(lambda: x[:, cols] @ U[:, cols].T, 5)
    xr, Ur = np.ascontiguousarray(x[:, cols]), np.ascontiguousarray(U[:, cols].T)
    plain = best_of(lambda: np.matmul(xr, Ur), 5)
    print(f"logits product ({chunk} x {cols.size}) @ ({cols.size} x {U.shape[0]}): checker {flops / ours / 1e9:.1f} "
          f"GFLOP/s, plain matmul {flops / plain / 1e9:.1f} GFLOP/s, ratio {plain / ours:.2f}")
    full = best_of(lambda: x @ U.T, 3)
    print(f"for reference, the full-width product ({chunk} x {model.d}) @ ({model.d} x {U.shape[0]}): "
          f"{2.0 * chunk * model.d * U.shape[0] / full / 1e9:.1f} GFLOP/s, {full * 1e3:.1f} ms per chunk "
          f"vs {ours * 1e3:.1f} ms on the {cols.size} columns U reads")


if __name__ == "__main__":
    main()
