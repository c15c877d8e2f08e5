"""Benchmark: ``georecall verify``, the main job, as a newcomer runs it: wall and CPU seconds (median of
``--runs``), peak memory, and which row costs what.

Each run is ``georecall verify --json --quiet`` in a child process (``child.run_georecall``: wall from the
clock, CPU = user + system from ``os.wait4``, the child's own peak RSS). The runs alternate (interleave) two
environments, so that the machine's load moves both alike: as installed (OpenBLAS at its own thread count;
``verify`` limits it to one thread itself) and with ``OPENBLAS_NUM_THREADS=1`` set before NumPy loads. Equal
figures show that ``verify`` no longer depends on the variable. ``--env-runs 0`` skips the second one.

Which row costs what: the rows' own seconds (``reports[].check.seconds``, wall) from the runs, median per
row; ``--steps`` adds one in-process pass over ``suite.verify_steps`` with the CPU seconds of each step
(``time.process_time``), the figures the progress line's estimate is weighted by (``Step.cost``).

Target (issue 44): at most 30 s wall on a quiet 2-core machine and 40 CPU seconds. CPU seconds are what load
inflates least; the load average is printed before and after. Run by hand: ``python
benchmarks/bench_verify.py [--runs 3] [--env-runs 3] [--steps] [--full] [--keep doc.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from child import run_georecall  # noqa: E402  (benchmarks/child.py)


def _load() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def _run(full: bool, env: dict[str, str] | None) -> tuple[float, float, float | None, dict]:
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        run = run_georecall(["verify", "--json", "--quiet", *(["--full"] if full else [])])
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    if run.returncode != 0:
        raise SystemExit(f"georecall verify exited {run.returncode}: {run.stderr[-2000:]}")
    return run.wall, run.cpu, run.peak_gib, json.loads(run.stdout)


def step_costs(full: bool) -> list[tuple[str, float, float]]:
    """``(step name, CPU seconds, wall seconds)`` of each step of ``verify``, in this process."""
    from georecall.experiments import blas
    from georecall.verify.sections import suite

    out = []
    with blas.limited_threads(1):
        for step in suite.verify_steps(0, full=full):
            cpu, wall = time.process_time(), time.perf_counter()
            step.run()
            out.append((step.name, time.process_time() - cpu, time.perf_counter() - wall))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs as installed (default 3)")
    parser.add_argument("--env-runs", type=int, default=None,
                        help="runs with OPENBLAS_NUM_THREADS=1, interleaved (default: as many as --runs)")
    parser.add_argument("--steps", action="store_true", help="also each step's CPU seconds, in this process")
    parser.add_argument("--full", action="store_true", help="measure verify --full instead")
    parser.add_argument("--keep", metavar="PATH", help="write the first run's JSON document to PATH")
    args = parser.parse_args()
    env_runs = args.runs if args.env_runs is None else args.env_runs
    print(f"georecall verify{' --full' if args.full else ''}: load average before {_load()}", flush=True)
    results: dict[str, list] = {"as installed": [], "OPENBLAS_NUM_THREADS=1": []}
    for i in range(max(args.runs, env_runs)):
        if i < args.runs:
            results["as installed"].append(_run(args.full, None))
        if i < env_runs:
            results["OPENBLAS_NUM_THREADS=1"].append(_run(args.full, {"OPENBLAS_NUM_THREADS": "1"}))
    if args.keep:
        first = next(runs[0][3] for runs in results.values() if runs)
        with open(args.keep, "w", encoding="utf-8") as out:
            json.dump(first, out)
    for name, runs in results.items():
        if not runs:
            continue
        walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
        peaks = [r[2] for r in runs if r[2] is not None]
        rows = runs[0][3]["reports"]
        listed = ", ".join(f"{w:.1f}" for w in walls)
        print(f"{name}: wall median {statistics.median(walls):.1f} s (runs {listed}),"
              f" CPU median {statistics.median(cpus):.1f} s (runs {', '.join(f'{c:.1f}' for c in cpus)}), "
              f"peak {max(peaks) if peaks else float('nan'):.2f} GiB, {len(rows)} rows, "
              f"{'PASS' if all(r[3]['passed'] for r in runs) else 'FAIL'}")
    every = [r for runs in results.values() for r in runs]
    by_row: dict[str, list[float]] = {}
    for _, _, _, doc in every:
        for rep in doc["reports"]:
            by_row.setdefault(rep["name"], []).append(rep["check"]["seconds"])
    total = sum(statistics.median(v) for v in by_row.values())
    print(f"\nwall seconds per row (median of {len(every)} runs; rows sum to {total:.1f} s):")
    for name, seconds in sorted(by_row.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {statistics.median(seconds):7.2f}  {name}")
    if args.steps:
        costs = step_costs(args.full)
        print(f"\nCPU seconds per step, in this process (sum {sum(c for _, c, _ in costs):.1f} s CPU, "
              f"{sum(w for _, _, w in costs):.1f} s wall):")
        for name, cpu, wall in costs:
            print(f"  {cpu:6.2f} CPU  {wall:6.2f} wall  {name}")
    print(f"\nload average after {_load()}")


if __name__ == "__main__":
    main()
