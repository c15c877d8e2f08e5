"""Benchmark: ``georecall certify`` (every task at once) beside ``georecall check`` (the seeded task).

Runs each command line in a child process (``child.run_georecall``: its own peak resident memory, VmHWM,
never ``ru_maxrss``, which carries the parent's peak across exec) and reports wall time, peak memory and the
verdict / margin it printed. Default cases: G1 at
N = 4096, R = 16, at N = 2^20, R = 16 and at N = 2^24, R = 16 (integer mode; the last under --max-gib 2),
G2 and C1 at their verify sizes. Targets for G1 integer, R = 16: N = 2^20 in ≤ 30 s and N = 2^24 in ≤ 120 s,
both ≤ 2 GiB (a structural certificate builds no task). A case refused by its memory estimate is reported
as refused, with the estimate's message. Prints the machine's load average before and after: on a
shared machine the times move with it.

Measured on 2026-12-02 (2 cores shared by five sessions; ``--no-check``; wall s, peak RSS GiB, estimate GiB,
load average before -> after): g1-4096 2.60 s 0.06 (0.20) 5.0 -> 5.0; big (2^20) 7.48 s 0.23 (0.28)
5.0 -> 5.4; big-float 10.41 s 0.68 (0.71) 5.4 -> 5.4; huge (2^24, --max-gib 2) 63.59 s 1.20 (1.48)
5.4 -> 4.9; g2 1.91 s 0.07; c1 1.56 s 0.05; a2b 2.61 s 0.07 (load 4.9 -> 4.8). All CERTIFIED. ``check`` was
not rerun (2^20 needs 6.6 GiB); its earlier numbers are in the README.

Issue 40 (canonical family, falsification first; falsification is skipped above 2^18 queries per task, so
the 2^20 and 2^24 cases do the same work as before plus the canonical check of the family's arrays, which
are taken without a copy). Measured on 2026-12-06 (``--no-check``): big (2^20) 5.73 s 0.23 GiB (0.28),
CERTIFIED, margin 4, beside the code before issue 40 at 5.45 s 0.23 GiB, run one after the other at load 6.2;
g1-4096 3.12 s 0.08 GiB (load 11.5); refute-4096 (a construction whose seeded task fails, REFUTED by the
checker before any relaxation) 3.2-4.1 s 0.09 GiB, where the code before said UNKNOWN in 2.7-3.0 s (load 11).
huge (2^24, --max-gib 2), the code at the session's start (old) and today's (new) interleaved with
/usr/bin/time at load 5-7 while CI ran beside them: wall old 203.5 s, new 64.3 s, old 105.4 s, new 131.6 s
(the wall follows the load: minima old 105.4, new 64.3); user CPU old 14.86 / 14.98 s, new 15.59 / 15.75 s
(+5 %); peak 1.20 GiB both; CERTIFIED, margin 4, all four. Script: the two installs' ``georecall certify
single-hop --construction geometric --N 16777216 --R 16 --integer --max-gib 2 --json``, alternately.

Run by hand (nice it on a shared machine):
    nice -n 10 python benchmarks/bench_certify.py
    nice -n 10 python benchmarks/bench_certify.py --only big
"""

from __future__ import annotations

import argparse
import json
import os

from child import run_georecall

CASES = {
    "g1-4096": ["single-hop", "--construction", "geometric", "--N", "4096", "--R", "16", "--integer"],
    "big": ["single-hop", "--construction", "geometric", "--N", str(2**20), "--R", "16", "--integer"],
    "huge": ["single-hop", "--construction", "geometric", "--N", str(2**24), "--R", "16", "--integer",
             "--max-gib", "2"],
    "big-float": ["single-hop", "--construction", "geometric", "--N", str(2**20), "--R", "16", "--float"],
    "g2": ["multi-hop", "--construction", "path-blocks", "--N", "1024", "--R", "3", "--k", "3"],
    "c1": ["multi-hop", "--construction", "cot", "--N", "1024", "--R", "4", "--k", "3"],
    "a2b": ["multi-hop", "--construction", "associative-depth", "--N", "256", "--R", "3", "--k", "3"],
    # G1 with every gate ajar: its seeded task fails (86 % of queries), REFUTED before any relaxation
    "refute-4096": ["single-hop", "--construction", f"{os.path.dirname(os.path.abspath(__file__))}"
                    "/broken_gates.py:SPEC", "--N", "4096", "--R", "16", "--integer"],
}


def _peak_of_child(argv: list[str]) -> tuple[float, float, dict]:
    """Wall seconds, the child's own peak RSS (GiB) and the JSON document of ``georecall ARGV --json``."""
    run = run_georecall([*argv, "--json"])
    peak = run.peak_gib if run.peak_gib is not None else float("nan")
    if run.returncode == 2:
        return run.wall, peak, {"refused": run.stderr.strip()[-400:]}
    if run.returncode not in (0, 1, 4):  # CERTIFIED, REFUTED, UNKNOWN (certify.UNKNOWN_STATUS)
        raise SystemExit(f"{' '.join(argv)} failed ({run.returncode}): {run.stderr[-400:]}")
    return run.wall, peak, json.loads(run.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(CASES), default=None)
    parser.add_argument("--no-check", action="store_true", help="certify only (skip check beside it)")
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    for name in args.only or list(CASES):
        argv = CASES[name]
        load = os.getloadavg()[0]
        seconds, peak, doc = _peak_of_child(["certify", *argv])
        load = f"load {load:.1f} -> {os.getloadavg()[0]:.1f}"
        if "refused" in doc:
            print(f"certify {name:10s} {seconds:7.2f} s  {peak:5.2f} GiB  refused ({load}): {doc['refused']}")
            continue
        margin = doc.get("min_margin_exact") or doc.get("min_margin")
        estimate = doc.get("memory", {}).get("total_gib")
        print(f"certify {name:10s} {seconds:7.2f} s  {peak:5.2f} GiB (estimate {estimate} GiB)  "
              f"{doc['verdict']}  min margin {margin}  (promise {doc['promise']['margin']:.6g}; "
              f"{doc['points']:,} points, {doc['query_types']:,} query types; {load})")
        if not args.no_check:
            load = os.getloadavg()[0]
            seconds, peak, doc = _peak_of_child(["check", *argv])
            load = f"load {load:.1f} -> {os.getloadavg()[0]:.1f}"
            if "refused" in doc:
                print(f"check   {name:10s} {seconds:7.2f} s  {peak:5.2f} GiB  refused ({load}): "
                      f"{doc['refused']}")
                continue
            verdict = "PASS" if doc["passed"] else "FAIL"
            print(f"check   {name:10s} {seconds:7.2f} s  {peak:5.2f} GiB  {verdict}"
                  f"  min margin {doc['check']['min_margin']:.6g} (the seeded task only; {load})")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
