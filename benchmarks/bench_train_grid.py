"""Benchmark: one full-batch training step of the capacity grid (issue 33) with OpenBLAS on 2 threads (the
default on a 2-core machine: before) and on 1 thread (after: how the grid runs, one trial at a time on a
machine shared with other jobs).

Shapes: N = 4096, all N·R queries per step, float32, one layer, uniform attention, MLP width m = 4d, the
structured step (``train(path="auto")``), the frozen mode (entity and relation embeddings frozen; the
read-out, which dominates, is trained in both modes): (R, d) = (8, 72) and (16, 64), the widths of the
grid's searches at R = 8 (frozen) and R = 16 (learned).

Each (shape, threads) variant runs in a subprocess of its own (OpenBLAS reads its thread count when NumPy is
imported) that trains ``--steps`` steps and reports, per step, the wall and CPU seconds between two
consecutive optimizer callbacks of ``train`` (gradients, batch accuracy and the Adam update). The variants
are interleaved (shape A 2 threads, shape A 1 thread, shape B 2 threads, ..., then again), and for each the
minimum and the median over every step of every repetition are reported, with the load average when it ran:
the minimum is what the step costs when the neighbours leave the cores free, the median what the grid sees on
a shared machine. CPU seconds count every thread of the process (BLAS threads and the read-out's two
element-wise threads). The two thread counts round differently (sweep records carry ``blas``, see
``src/georecall/experiments/blas.py``), so their trials are different runs: this benchmark measures time only.

Run by hand: ``python benchmarks/bench_train_grid.py [--reps 2] [--steps 3] [--shapes 8x72 16x64]``.
``--profile`` adds, per shape and thread count, where a step's CPU time goes (``bench_train.py
--grid-profile``: the read-out's three products against the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, os, sys, time
import numpy as np
from georecall.theory.tasks import task_for_seed
from georecall.experiments.blas import blas_description
from georecall.training.train import init_model, train, training_data
N, R, d, steps = (int(v) for v in sys.argv[1:5])
tokens, answers, _, _ = training_data(task_for_seed(N, R, 0))
model = init_model(N, R, d, 4 * d, rng=0)
stamps = []
train(model, tokens, answers, steps=steps + 1, lr=1e-2, frozen=("entity_embedding", "relation_embedding"),
      rng=0, stop_at_accuracy=None,
      callback=lambda p, s, g: stamps.append((time.perf_counter(), time.process_time())) and False)
stamps = np.array(stamps)
print(json.dumps({"wall": np.diff(stamps[:, 0]).tolist(), "cpu": np.diff(stamps[:, 1]).tolist(),
                  "blas": blas_description(), "load": os.getloadavg()[0]}))
"""


def step_times(N: int, R: int, d: int, steps: int, threads: int) -> dict:
    """Per-step wall and CPU seconds of ``steps`` full-batch steps in a subprocess with ``threads`` BLAS
    threads."""
    env = {**os.environ, "OPENBLAS_NUM_THREADS": str(threads), "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(N), str(R), str(d), str(steps)], env=env,
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description="full-batch grid step: OpenBLAS 2 threads against 1")
    parser.add_argument("--reps", type=int, default=2, help="interleaved repetitions")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per repetition and variant")
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--shapes", nargs="+", default=["8x72", "16x64"], help="RxD pairs")
    parser.add_argument("--profile", action="store_true", help="also bench_train.py --grid-profile")
    args = parser.parse_args()
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes]
    variants = [(R, d, t) for R, d in shapes for t in (2, 1)]
    seen: dict[tuple, dict] = {v: {"wall": [], "cpu": [], "load": [], "blas": None} for v in variants}
    for _ in range(max(1, args.reps)):
        for R, d, t in variants:
            got = step_times(args.N, R, d, args.steps, t)
            row = seen[(R, d, t)]
            row["wall"] += got["wall"]
            row["cpu"] += got["cpu"]
            row["load"].append(got["load"])
            row["blas"] = got["blas"]
    print(f"full-batch training step at N = {args.N} (frozen mode, m = 4d, float32), seconds per step over "
          f"{args.reps} interleaved repetitions × {args.steps} steps; load = 1-minute load average of the "
          f"machine (nproc {os.cpu_count()})")
    print(f"{'R':>3} {'d':>4} {'BLAS':<40} {'wall min':>9} {'wall med':>9} {'cpu min':>8} {'cpu med':>8} "
          f"{'load':>10}")
    for (R, d, t), row in seen.items():
        wall, cpu = sorted(row["wall"]), sorted(row["cpu"])
        med = lambda v: v[len(v) // 2]  # noqa: E731
        load = f"{min(row['load']):.1f}-{max(row['load']):.1f}"
        print(f"{R:>3} {d:>4} {row['blas']:<40} {wall[0]:9.3f} {med(wall):9.3f} {cpu[0]:8.3f} "
              f"{med(cpu):8.3f} {load:>10}")
    if args.profile:
        here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bench_train.py")
        for R, d, t in variants:
            env = {**os.environ, "OPENBLAS_NUM_THREADS": str(t), "OMP_NUM_THREADS": str(t)}
            print(f"\nOPENBLAS_NUM_THREADS={t}:", flush=True)
            subprocess.run([sys.executable, here, "--grid-profile", "--N", str(args.N), "--R", str(R), "--d",
                            str(d), "--m", str(4 * d), "--reps", "2"], env=env, check=True)


if __name__ == "__main__":
    main()
