"""Benchmark: the lecture (issue 31). Targets: the notebook docs/notebooks/lecture.md executes end to end in
at most 2 minutes on 2 cores (its kernel's start included), and each figure it or ``georecall figures`` draws
takes at most 10 s (built and saved as PNG and SVG).

The notebook is executed ``--reps`` times through :func:`georecall.experiments.lecture.build_lecture`
(the same path as ``georecall lecture``), each figure is drawn ``--reps`` times, interleaved with the others,
and the minimum over repetitions is reported, so that load from other processes inflates no figure more than
another. Needs the teach extra (``pip install '.[teach]'``). Run by hand from the checkout:
``python benchmarks/bench_notebook.py [--reps 2] [--skip-notebook]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

NOTEBOOK_TARGET = 120.0
FIGURE_TARGET = 10.0


def figure_builders() -> dict:
    """Every figure the lecture or ``georecall figures`` computes (those from records excepted)."""
    from georecall.experiments import figures as F
    from georecall.experiments.demo import relation_names

    names = relation_names(2)
    builders = {
        "construction": lambda: F.construction_figure(8, 2, 0, relation_names=names),
        "construction N=64 R=8": lambda: F.construction_figure(64, 8, 0, relation_names=relation_names(8)),
        "tradeoff": lambda: F.tradeoff_figure(4096, 4, 4),
        "margins": lambda: F.margins_figure(0),
        "trained_vs_g1 (training included)": lambda: F._trained_vs_g1(64, 2, 0),
    }
    for matrix in F.WEIGHTS:
        builders[f"{matrix} N=8 R=2"] = (lambda matrix=matrix: F.weights_figures(
            8, 2, 0, relation_names=names, which=(matrix,)).popitem()[1])
        builders[f"{matrix} N=16 R=8"] = (lambda matrix=matrix: F.weights_figures(
            16, 8, 0, relation_names=relation_names(8), which=(matrix,)).popitem()[1])
    return builders


def time_figures(reps: int, folder: str) -> dict[str, float]:
    from georecall.experiments.figures import save_figure

    best: dict[str, float] = {}
    builders = figure_builders()
    for _ in range(reps):
        for name, build in builders.items():
            start = time.perf_counter()
            save_figure(build(), folder, "f", formats=("png", "svg"))
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - start)
    return best


def time_notebook(reps: int, folder: str) -> float:
    from georecall.experiments import lecture

    source = lecture.default_notebook()
    if source is None:
        raise SystemExit("run from the repository checkout (docs/notebooks/lecture.md)")
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        lecture.build_lecture(source, folder)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--skip-notebook", action="store_true")
    args = parser.parse_args()
    print(f"cores available: {len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as folder:
        for name, seconds in time_figures(args.reps, folder).items():
            verdict = "ok" if seconds <= FIGURE_TARGET else "OVER"
            print(f"figure {name:<36} {seconds:6.2f} s  (target <= {FIGURE_TARGET:g} s: {verdict})")
        if not args.skip_notebook:
            seconds = time_notebook(args.reps, folder)
            verdict = "ok" if seconds <= NOTEBOOK_TARGET else "OVER"
            print(f"notebook executed and rendered  {seconds:6.1f} s  (target <= {NOTEBOOK_TARGET:g} s: "
                  f"{verdict})")


if __name__ == "__main__":
    main()
