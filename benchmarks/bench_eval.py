"""Benchmark: ``georecall eval`` of a float32 model against the same weights stored in float64 (issue 32).

The target: eval of a float32 model at N = 4096, R = 16 takes at most 2× the eval of its float64 copy. Both
evaluate the same function (the stored weights in exact arithmetic): the float32 file is cast to float64
(exact) and then checked exactly as the float64 file is, so the only extra work is the cast (and any query
re-decided exactly, reported as ``n_redecided``).

Models: a one-layer softmax model (the trainer's initialization at d = 64, m = 256, 2 heads), trained for a
few steps so that its margins are those of a real model in the making, written once as float32 and once as
its float64 copy; and G1 (binary codes) in both formats. Each eval runs the command in-process
(``georecall eval FILE --json``), interleaved over ``--repeats`` rounds; minima and the ratio.

Run by hand:
    python benchmarks/bench_eval.py                 # N = 4096, R = 16
    python benchmarks/bench_eval.py --N 512 --R 4   # the issue's model size
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import tempfile
import time

import numpy as np

from georecall.cli import main
from georecall.constructions import registry
from georecall.constructions.storage import save_model
from georecall.theory.tasks import task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import train, training_data


def eval_seconds(path: str) -> tuple[float, dict]:
    out = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["eval", path, "--json", "--quiet"])
    seconds = time.perf_counter() - start
    assert code == 0, code
    return seconds, json.loads(out.getvalue())


def models(N: int, R: int, steps: int):
    task = task_for_seed(N, R, 0)
    tokens, answers, _, _ = training_data(task, 1, False)
    start = init_model(N, R, 64, 256, attention="softmax", heads=2, rng=np.random.default_rng(0),
                       dtype=np.dtype(np.float32))
    trained = start if steps == 0 else train(start, tokens, answers, steps=steps, lr=1e-2,
                                             rng=np.random.default_rng(1), dtype=np.dtype(np.float32)).model
    yield f"softmax (d = 64, m = 256, H = 2) after {steps} training steps", trained, task
    yield "G1 (binary codes)", registry.get("geometric").build(task).model.astype(np.float32), task


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--steps", type=int, default=20,
                        help="training steps of the softmax model (0: its initialization)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for name, model, task in models(args.N, args.R, args.steps):
            paths = {}
            for dtype in ("float32", "float64"):
                paths[dtype] = os.path.join(folder, f"{dtype}.npz")
                save_model(model.astype(dtype), paths[dtype], extra_arrays={"task_table": task.table})
            best = {dtype: np.inf for dtype in paths}
            docs = {}
            for _ in range(args.repeats):  # interleaved
                for dtype, path in paths.items():
                    seconds, docs[dtype] = eval_seconds(path)
                    best[dtype] = min(best[dtype], seconds)
            assert docs["float32"]["accuracy"] == docs["float64"]["accuracy"]
            ratio = best["float32"] / best["float64"]
            print(f"{name}, N = {args.N}, R = {args.R} ({args.N * args.R:,} queries): float32 file "
                  f"{best['float32']:.2f} s, float64 copy {best['float64']:.2f} s, ratio {ratio:.2f} "
                  f"(target <= 2); accuracy {100 * docs['float32']['accuracy']:.2f}% both, "
                  f"{docs['float32']['n_redecided']} re-decided exactly")


if __name__ == "__main__":
    main_()
