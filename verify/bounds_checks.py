"""The ``lower bounds and counting`` section of ``georecall verify``: counts against closed forms and independent
references, gadget graphs, construction sizes beside the lower bounds, bits per parameter."""

from __future__ import annotations

import math
import sys

import numpy as np

from georecall.constructions.single_hop import build_g1, single_hop_queries
from georecall.theory.tasks import random_task
from georecall.verify.check import Report, check_queries, claim_report
from georecall.verify.precision import smallest_exact_bits

__all__ = ["COUNT_CASES", "section_bounds"]


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


COUNT_CASES = [(3, 1, 3), (3, 2, 3), (4, 2, 3), (4, 3, 2), (5, 2, 3), (6, 2, 2), (5, 3, 2)]


def section_bounds(seed: int = 0, progress: bool = False) -> list[Report]:
    """Counting against closed forms, gadget graphs validated by networkx, every construction above its lower
    bound, G1's fact bits within 1 + O(1/log N) of the total-information bound, bits per parameter."""
    import time

    from georecall.bounds import graphs
    from georecall.bounds.counting import closed_forms, enumerate_counts
    from georecall.bounds.tables import bound_rows
    reports = []
    start = time.perf_counter()
    checks = {}
    for N, R, k_max in COUNT_CASES:
        _log(progress, f"bounds: enumerating all (N!)^R tasks, N={N}, R={R}, k<={k_max}")
        counts = enumerate_counts(N, R, k_max)
        for k in range(1, k_max + 1):
            closed = closed_forms(N, R, k)
            tag = f"N={N} R={R} k={k}"
            checks[f"{tag}: tasks = (N!)^R"] = counts.tasks == closed.tasks
            checks[f"{tag}: |F_k| <= (N!)^R"] = counts.F[k] <= closed.F_upper
            checks[f"{tag}: |Trees_k| <= N^(R^k)"] = counts.trees[k] <= closed.trees_upper
            if closed.trees_lower is not None:
                checks[f"{tag}: (N-1)_(R^k) <= |Trees_k|"] = closed.trees_lower <= counts.trees[k]
            if k == 1:
                checks[f"{tag}: |F_1| = (N!)^R"] = counts.F[1] == closed.F1
                checks[f"{tag}: |Trees_1| = N^R"] = counts.trees[1] == closed.trees1
    reports.append(claim_report("count = closed forms", {"cases": COUNT_CASES}, checks,
                                time.perf_counter() - start, {"d": "", "m": ""}))

    start = time.perf_counter()
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    checks = {}
    for N, R, k, M in [(40, 2, 2, 5), (200, 3, 3, 5), (64, 1, 4, 12), (100, 4, 1, 20)]:
        task, roots, leaves = graphs.gadget_task(N, R, k, M, rng=rng)
        graphs.validate_graph(graphs.to_graph(task))  # raises if not R-regular edge-coloured
        checks[f"gadget N={N} R={R} k={k} M={M}: valid, leaves as assigned"] = bool(
            np.array_equal(graphs.gadget_leaves(task, roots, k), leaves))
    reports.append(claim_report("gadget family valid", {"seed": seed}, checks, time.perf_counter() - start,
                                {"d": "", "m": ""}))

    start = time.perf_counter()
    rows = bound_rows([2**10, 2**12, 2**16, 2**20], [1, 2, 4, 8, 16], [1, 2, 3], [1])
    checks = {f"{r['construction']} N={r['N']} R={r['R']} k={r['k']}: d >= d_min": r["d"] >= r["d_min"]
              for r in rows}
    for r in rows:
        if r["construction"] == "G1":
            L = math.log2(r["N"])
            ratio = r["fact_bits_per_subject"] / r["bound_bits_per_subject"]
            checks[f"G1 N={r['N']} R={r['R']}: fact bits <= (1 + 2.45/(log2 N - 1.45))·bound"] = (
                ratio <= 1 + 2.45 / (L - 1.45))
    g1 = next(r for r in rows if r["construction"] == "G1" and r["N"] == 4096 and r["R"] == 16)
    reports.append(claim_report("constructions >= bounds", {"rows": len(rows), "b": 1}, checks,
                                time.perf_counter() - start,
                                {"d": f"{g1['d_min']}<={g1['d']}", "m": ""},
                                {"G1 N=4096 R=16": g1}))

    start = time.perf_counter()
    _log(progress, "bounds: smallest bits per parameter keeping G1 exact (N=1024, R=8)")
    task = random_task(1024, 8, np.random.default_rng(seed))
    built = build_g1(task, "binary")
    tokens, answers = single_hop_queries(task)
    bits, records = smallest_exact_bits(built.model, lambda m: check_queries(m, tokens, answers), max_bits=8)
    reports.append(claim_report("G1 exact at 2 bits/param", {"N": 1024, "R": 8, "codes": "binary"},
                                {"smallest exact b = 2": bits == 2}, time.perf_counter() - start,
                                {"d": built.model.d, "m": built.model.mlp_width}, {"records": records}))
    return reports
