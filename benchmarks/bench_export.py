"""Benchmark: ``georecall export`` plus the check in the target, G1 at N = 4096, R = 16 (issue 34's target:
60 s and 4 GiB on 2 cores).

Each target runs as a user meets it: ``georecall export --construction geometric --N 4096 --R 16 --to TARGET
OUT --json`` in a child process (task, build, writing the folder, loading it with the target's own library,
all 65,536 queries run there, logits compared with georecall's and the rounding bound computed, the folder
renamed). Reported per target: the child's wall time (import of the target's library included), its peak
resident memory (its own VmHWM, through ``child.run_georecall``), its CPU seconds (user + system: what the
machine's load does not inflate) and the check's own seconds (from its report). Targets are interleaved over
``--repeats`` rounds and the minimum wall time is kept.

Measured on this project's machine (2 cores shared by 8 sessions, load average 13-16 during the run: wall
times are inflated several-fold; CPU seconds are what the work costs), 2026-12-01, ``python
benchmarks/bench_export.py`` (one round):

    target             wall s   cpu s   check s   peak GiB   estimate GiB   verdict
    torch                88.6    29.5      76.4       0.59           1.35   PASS, |Δ| 2.4e-07 <= 0.0077
    transformer-lens    136.3    42.2     106.4       0.76           1.35   PASS, |Δ| 2.4e-07 <= 0.0078
    onnx                 74.4    21.6      66.3       0.46           1.35   PASS, |Δ| 2.4e-07 <= 0.0077

4 GiB: met by every target. 60 s: missed in wall time on the loaded machine by all three; their CPU time (22
to 42 s, TransformerLens's import alone about 6 s of it) is under 60 s, which suggests an idle 2-core machine
meets it — not measured here.

Run by hand:
    python benchmarks/bench_export.py                  # every target whose library is installed
    python benchmarks/bench_export.py --targets onnx --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile

from child import run_georecall

TARGETS = ("torch", "transformer-lens", "onnx")


def run_once(target: str, N: int, R: int, folder: str) -> dict:
    """One ``georecall export`` in a child process: wall seconds, peak RSS, the check's report."""
    out = os.path.join(folder, f"out-{target}")
    shutil.rmtree(out, ignore_errors=True)
    run = run_georecall(["export", "--construction", "geometric", "--N", str(N), "--R", str(R), "--to",
                         target, out, "--json"])
    if run.returncode != 0:
        return {"target": target, "error": (run.stderr or run.stdout).strip().splitlines()[-1:],
                "wall": run.wall}
    doc = json.loads(run.stdout)
    shutil.rmtree(out, ignore_errors=True)
    return {"target": target, "wall": run.wall, "cpu": run.cpu, "peak_gib": run.peak_gib,
            "check_seconds": doc["check"]["seconds"], "passed": doc["passed"],
            "queries": doc["check"]["queries"], "max_difference": doc["check"]["max_logit_difference"],
            "max_allowed": doc["check"]["max_allowed"], "estimate_gib": doc["memory"]["total_gib"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()
    print(f"load average: {os.getloadavg()}, cores: {os.cpu_count()}")
    best: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for target in args.targets:  # interleaved: a slow spell of the machine hits every target
                result = run_once(target, args.N, args.R, folder)
                if target not in best or result.get("wall", 1e9) < best[target].get("wall", 1e9):
                    best[target] = result
    print(f"{'target':<18} {'wall s':>7} {'cpu s':>6} {'check s':>8} {'peak GiB':>9} {'estimate':>9}  "
          "verdict")
    for target in args.targets:
        r = best[target]
        if "error" in r:
            print(f"{target:<18} refused: {r['error']}")
            continue
        verdict = "PASS" if r["passed"] else "FAIL"
        print(f"{target:<18} {r['wall']:7.1f} {r['cpu']:6.1f} {r['check_seconds']:8.1f} {r['peak_gib']:9.2f} "
              f"{r['estimate_gib']:9.2f}  {verdict} ({r['queries']:,} queries; max |Δlogit| "
              f"{r['max_difference']:.2g} <= {r['max_allowed']:.2g}); targets 60 s, 4 GiB: "
              f"{'met' if r['wall'] <= 60 and r['peak_gib'] <= 4 else 'MISSED'}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
