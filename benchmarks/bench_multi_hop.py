"""Benchmark: exhaustive multi-hop checks (issue 3 targets: each <= 30 s wall on 2 cores, memory <= 2 GiB).

- G2 (path blocks) at N=1024, R=3, k=3: all 27,648 queries;
- C1 (chain-of-thought) at N=1024, R=4, k=3: greedy decoding of all 65,536 chains, plus teacher forcing;
- A2(b) (k layers) at N=1024, R=3, k=3, for reference.

Run by hand, one construction per process so that peak memory is attributable:
    /usr/bin/time -v python benchmarks/bench_multi_hop.py --construction path-blocks
    /usr/bin/time -v python benchmarks/bench_multi_hop.py --construction cot
"""

from __future__ import annotations

import argparse
import time

from georecall.verify.suite import check_multi_hop

CASES = {"path-blocks": (1024, 3, 3), "cot": (1024, 4, 3), "layered": (1024, 3, 3), "associative": (256, 3, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description="time exhaustive multi-hop checks")
    parser.add_argument("--construction", choices=sorted(CASES), nargs="*", default=["path-blocks", "cot"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for construction in args.construction:
        N, R, k = CASES[construction]
        start = time.perf_counter()
        report = check_multi_hop(N, R, k, construction=construction, seed=args.seed)
        wall = time.perf_counter() - start
        print(f"{report.name} N={N} R={R} k={k}: {report.result.n_queries:,} queries, build + check {wall:.2f} s "
              f"(check {report.result.seconds:.2f} s), passed={report.passed}, min margin "
              f"{report.result.min_margin:.4g} (promised {report.promise.margin:.4g})")


if __name__ == "__main__":
    main()
