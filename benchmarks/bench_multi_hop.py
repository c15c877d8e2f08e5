"""Benchmark: exhaustive multi-hop checks (issue 3: each <= 30 s wall on 2 cores, <= 2 GiB; issue 14: C1
greedy decoding of all chains at N = 2^16, R = 4, k = 3 in <= 60 s).

- ``path-blocks`` (G2) at N=1024, R=3, k=3: all 27,648 queries; ``cot`` (C1) at N=1024, R=4, k=3: greedy
  decoding of all 65,536 chains plus teacher forcing; ``associative-depth`` (A2(b)) and ``associative-width``
  (A2(a)) for reference. These go through ``verify.checking.run.check_multi_hop`` (build + both checks).
- ``cot-large``: C1 at N = 2^16, R = 4, k = 3 (4.2 M chains), timed on the checker alone: greedy decoding and
  teacher forcing with the default fast paths (token-additive tables + hypercube decoder), and, on the first
  ``--subset`` chains, every forward/decoder pair interleaved over ``--repeats`` rounds (minima), as ratios to
  THE forward pass with dense logits.

Run by hand, one construction per process so that peak memory is attributable:
    /usr/bin/time -v python benchmarks/bench_multi_hop.py --construction path-blocks
    /usr/bin/time -v python benchmarks/bench_multi_hop.py --construction cot-large
"""

from __future__ import annotations

import argparse
import time

import numpy as np

CASES = {"path-blocks": (1024, 3, 3), "cot": (1024, 4, 3), "associative-depth": (1024, 3, 3),
         "associative-width": (256, 3, 3), "cot-large": (2**16, 4, 3)}
PATHS = (("dense", "dense"), ("dense", "hypercube"), ("tables", "hypercube"))


def suite_case(construction: str, seed: int) -> None:
    from georecall.verify.checking.run import check_multi_hop
    N, R, k = CASES[construction]
    start = time.perf_counter()
    report = check_multi_hop(N, R, k, construction=construction, seed=seed)
    wall = time.perf_counter() - start
    print(f"{report.name} N={N} R={R} k={k}: {report.result.n_queries:,} queries, build + check {wall:.2f} s "
          f"(check {report.result.seconds:.2f} s, forward={report.result.forward}, "
          f"decoder={report.result.decoder}), passed={report.passed}, min margin "
          f"{report.result.min_margin:.4g} (promised {report.promise.margin:.4g})")


def cot_large(seed: int, subset: int, repeats: int) -> None:
    from georecall.constructions.multi_hop import build_c1
    from georecall.theory.tasks import random_task
    from georecall.theory.tokens import chains, multi_hop_queries
    from georecall.verify.checking.check import check_decoding, check_queries
    N, R, k = CASES["cot-large"]
    start = time.perf_counter()
    task = random_task(N, R, seed)
    built = build_c1(task, k)
    prompts, _ = multi_hop_queries(task, k)
    targets = chains(task, k)
    print(f"C1 N={N} R={R} k={k}: {len(prompts):,} chains; build {time.perf_counter() - start:.1f} s")
    greedy = check_decoding(built.model, prompts, targets)
    print(f"  greedy decoding, all chains: {greedy.seconds:.1f} s, exact={greedy.exact}, min margin "
          f"{greedy.min_margin:.6g} (promised {built.promise.margin:.6g}), forward={greedy.forward}, "
          f"decoder={greedy.decoder}")
    forced = check_queries(built.model, np.concatenate([prompts, targets[:, :-1]], axis=1), targets,
                           positions=np.arange(k, 2 * k))
    print(f"  teacher forcing, all chains x {k} steps: {forced.seconds:.1f} s, exact={forced.exact}, "
          f"min margin {forced.min_margin:.6g}, forward={forced.forward}, decoder={forced.decoder}")
    best = {path: np.inf for path in PATHS}
    margins = {}
    for _ in range(repeats):
        for forward, decoder in PATHS:
            r = check_decoding(built.model, prompts[:subset], targets[:subset], forward=forward,
                               decoder=decoder)
            best[(forward, decoder)] = min(best[(forward, decoder)], r.seconds)
            margins[(forward, decoder)] = r.min_margin
    print(f"  greedy decoding of the first {subset:,} chains, min of {repeats} interleaved rounds:")
    for path in PATHS:
        print(f"    forward={path[0]:6s} decoder={path[1]:9s} {best[path]:8.3f} s  ratio "
              f"{best[path] / best[PATHS[0]]:6.3f}  min margin {margins[path]:.17g}")


def main() -> None:
    parser = argparse.ArgumentParser(description="time exhaustive multi-hop checks")
    parser.add_argument("--construction", choices=sorted(CASES), nargs="*", default=["path-blocks", "cot"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--subset", type=int, default=2**11, help="chains in the cot-large ratio runs")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for construction in args.construction:
        if construction == "cot-large":
            cot_large(args.seed, args.subset, args.repeats)
        else:
            suite_case(construction, args.seed)


if __name__ == "__main__":
    main()
