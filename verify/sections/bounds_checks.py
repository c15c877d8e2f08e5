"""The ``lower bounds and counting`` section of ``georecall verify``.

Every row is a claim that a broken input makes FAIL (``tests/test_bounds_checks.py`` shows one per row):

1. **counts = independent golden values** — the vectorized enumerator (``bounds.counting.enumerate_counts``)
   and the partial-injection search (``count_trees``) against integers pinned below, which were produced by
   the loop-based reference counters of ``tests/test_counting_reference.py`` (no shared code; the tests
   re-derive them); at k = 1 against the closed forms ``|F_1| = (N!)^R``, ``|Trees_1| = N^R``.
2. **count bounds <= exact counts** — the lower sides the bounds use, against the golden counts: the sandwich
   ``(N − 1)_{R^k} <= |Trees_k|`` where it is not trivial (N = 7..9, R = 2, k = 2) and
   ``(L − 1)!·(N!)^{R−1} <= |F_k|`` (``counting.F_lower``).
3. **gadget family valid** — gadget graphs validated by networkx, leaves as assigned.
4. **bits needed: smallest exact b, b−1 fails** — each registered construction with a bits claim
   (``ConstructionSpec.bits``, a :class:`~georecall.constructions.registry.BitsClaim`) quantized per tensor
   (``checking.precision``) at the smallest exact b, and at b − 1, which must fail; the smallest b must be the
   claimed ``needed``; constructions without a claim are listed as not covered (a row with no claim to check
   is not covered, ``Report.not_covered``: never a PASS, never a failure); at least one construction's
   quantization at its b must change the model (else the row would only re-run the unquantized checks);
   embeddings claimed to fit ``per_parameter``-bit per-coordinate codebooks (G1, G2, C1: 1 bit) must.
5. **lower bounds <= verified constructions** — for each construction just verified exact at b bits, the
   governing lower bound at that b (and at the per-parameter b = 1 where measured) must not exceed its d. The
   gaps ``d / d_min`` are reported (the gap table), not checked: any gap >= 1 is consistent.
"""

from __future__ import annotations

import math
import sys
import time

import numpy as np

from georecall import estimates
from georecall.bounds import counting, graphs
from georecall.bounds.tables import governing_bound
from georecall.constructions.registry import ConstructionSpec
from georecall.memory import Budget, as_budget
from georecall.theory.seeds import rng
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries, teacher_forcing
from georecall.verify.checking.check import check_decoding, check_queries
from georecall.verify.checking.precision import changed_arrays, quantize, smallest_exact_bits
from georecall.verify.checking.report import Report, claim_report
from georecall.verify.checking.run import not_covered, precision_cases

__all__ = ["COUNT_CASES", "GOLDEN_COUNTS", "GOLDEN_TREES", "bits_and_bound_reports", "counting_reports",
           "section_bounds"]


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


# (N, R, k_max) enumerated by ``enumerate_counts`` in the counting row.
COUNT_CASES = [(3, 1, 3), (5, 1, 3), (3, 2, 3), (4, 2, 3), (4, 3, 2), (5, 2, 3), (6, 2, 2), (5, 3, 2)]

# (N, R, k) -> (|F_k|, |Trees_k|), produced once by ``reference_counts`` (tests/test_counting_reference.py:
# plain loops over all (N!)^R tasks) and re-derived by those tests ((6, 2, 2) and (5, 3, 2): slow tests).
GOLDEN_COUNTS = {
    (3, 1, 2): (3, 3), (3, 1, 3): (4, 3), (5, 1, 2): (60, 5), (5, 1, 3): (80, 5),
    (3, 2, 2): (26, 25), (3, 2, 3): (30, 27), (4, 2, 2): (458, 148), (4, 2, 3): (534, 430),
    (4, 3, 2): (12956, 7408), (5, 2, 2): (13234, 425), (5, 2, 3): (14070, 7861),
    (6, 2, 2): (482844, 936), (5, 3, 2): (1715084, 205325),
}

# N -> |Trees_2(N, R = 2)|, beyond task enumeration ((7!)^2 = 25,401,600 tasks at N = 7), produced once by
# ``reference_trees_by_labels`` (every labelling of the depth-2 tree, kept if each colour is a partial
# injection) and re-derived by the tests. Here (N − 1)_4 = 360, 840, 1680 is not trivial.
GOLDEN_TREES = {7: 1813, 8: 3200, 9: 5265}

# The bits claims live in the registry (``ConstructionSpec.bits``): the smallest b of each built-in was
# measured by ``georecall precision`` (seed 0). G1, G2 and C1 need b = 2 at every N: with binary codes every
# tensor already lies in {−t, 0, t} (quantization at b = 2 changes nothing) and sign quantization (b = 1)
# fails. A1 and A2 need more, growing with N for A2b (8 at N = 256, R = 3, k = 3). Every embedding entry of
# G1, G2, C1 is ±|a_i| in its block or a task-independent 0: 1 bit per fact-specific parameter.


def _build(spec: ConstructionSpec, N: int, R: int, hops: int, seed: int, task_seed: int | None = None,
           budget: Budget | None = None):
    """``spec``'s construction on the task of ``task_seed`` (default ``seed``), with its exhaustive check
    (greedy decoding for chain-of-thought constructions) under ``budget``: the estimate of a quantized build
    and check is required against it first."""
    budget = as_budget(budget)
    estimates.check_estimate(spec, N, R, hops, bits=1, what=f"verify: bits needed by {spec.id}",
                             budget=budget).require(budget)
    task = task_for_seed(N, R, seed if task_seed is None else task_seed)
    codes = {} if spec.codes is None else {"codes": "binary"}  # the claims are at binary codes; or its own
    built = spec.builder(task, hops, **codes, rng=rng(seed, "codes"))
    tokens, answers = queries(task, hops)
    if spec.decoding == "greedy":
        targets = teacher_forcing(task, hops)[1]
        return built, lambda m: check_decoding(m, tokens, targets, budget=budget)
    return built, lambda m: check_queries(m, tokens, answers, budget=budget)


def count_checks() -> dict[str, bool]:
    """Row 1: enumeration and the tree search against the golden integers and the k = 1 closed forms."""
    checks = {}
    for N, R, k_max in COUNT_CASES:
        counts = counting.enumerate_counts(N, R, k_max)
        checks[f"N={N} R={R}: |F_1| = (N!)^R"] = counts.F[1] == math.factorial(N) ** R
        checks[f"N={N} R={R}: |Trees_1| = N^R"] = counts.trees[1] == N**R
        for k in range(2, k_max + 1):
            checks[f"N={N} R={R} k={k}: (|F_k|, |Trees_k|) = {GOLDEN_COUNTS[(N, R, k)]}"] = (
                (counts.F[k], counts.trees[k]) == GOLDEN_COUNTS[(N, R, k)])
    for N, value in GOLDEN_TREES.items():
        checks[f"N={N} R=2 k=2: tree search |Trees_2| = {value}"] = counting.count_trees(N, 2, 2) == value
    return checks


def count_bound_checks() -> tuple[dict[str, bool], dict]:
    """Row 2: the lower sides of the counts used by the bounds, against the golden counts; with tightness."""
    checks, tightness = {}, {}
    for N, value in GOLDEN_TREES.items():
        lower = counting.closed_forms(N, 2, 2).trees_lower
        checks[f"N={N} R=2 k=2: (N-1)_(R^k) = {lower} <= |Trees_2| = {value}"] = (
            lower is not None and lower <= value)
        tightness[f"trees N={N}"] = None if lower is None else round(value / lower, 3)
    for (N, R, k), (F, trees) in GOLDEN_COUNTS.items():
        lower = counting.closed_forms(N, R, k).trees_lower
        if lower is not None:
            checks[f"N={N} R={R} k={k}: (N-1)_(R^k) <= |Trees_k|"] = lower <= trees
        f_lower = counting.product_value(counting.F_lower(N, R, k))
        checks[f"N={N} R={R} k={k}: F_lower = {f_lower} <= |F_k| = {F}"] = f_lower <= F
        tightness[f"F N={N} R={R} k={k}"] = round(F / f_lower, 3)
    return checks, tightness


def gadget_checks(seed: int) -> dict[str, bool]:
    """Row 3: gadget graphs are R-regular edge-coloured digraphs with the assigned leaves."""
    checks = {}
    for i, (N, R, k, M) in enumerate([(40, 2, 2, 5), (200, 3, 3, 5), (64, 1, 4, 12), (100, 4, 1, 20)]):
        name = f"gadget N={N} R={R} k={k} M={M}: valid, leaves as assigned"
        task, roots, leaves = graphs.gadget_task(N, R, k, M, rng=rng(seed, "gadgets", i))
        try:
            graphs.validate_graph(graphs.to_graph(task))
        except ValueError:
            checks[name] = False
            continue
        checks[name] = bool(np.array_equal(graphs.gadget_leaves(task, roots, k), leaves))
    return checks


def _per_coordinate_bits(embeddings: list[np.ndarray]) -> int:
    """Bits of the largest per-coordinate codebook: ``⌈log2 max_j #{values of column j over all rows and all
    given embedding tables}⌉`` (tables of different tasks, so the codebook is checked to be
    task-independent)."""
    stacked = np.concatenate(embeddings, axis=0)
    largest = max(np.unique(stacked[:, j]).size for j in range(stacked.shape[1]))
    return (largest - 1).bit_length()


def precision_checks(seed: int, progress: bool = False, budget: Budget | None = None,
                     specs: list[ConstructionSpec] | None = None) -> tuple[dict[str, bool], dict, dict]:
    """Row 4: per construction, smallest exact b (= the claim's ``needed``), b − 1 fails; the built
    instances for row 5.

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The memory budget each build's estimate is required against, and the checker's chunks sized from.
    specs : list of ConstructionSpec, optional
        Only these constructions (``verify --construction``; default every registered one with a claim).
        The guard "quantization at the smallest b changes at least one construction" is the whole
        registry's; a restricted run's power is each construction's own b − 1 check.

    Returns
    -------
    (checks, records, instances)
        Named checks, the scan per construction, and ``id -> (built, bits, N, R, k, per_parameter)``.

    Raises
    ------
    InputError
        An instance's estimate exceeds the budget.
    """
    checks, records, instances = {}, {}, {}
    changed_any = False
    cases = precision_cases() if specs is None else [(s, s.bits) for s in specs if s.bits is not None]
    for spec, claim in cases:
        name, N, R, k = spec.id, claim.N, claim.R, claim.k
        _log(progress, f"bounds: smallest bits per parameter keeping {name} exact (N={N}, R={R}, k={k})")
        built, check = _build(spec, N, R, k, seed, budget=budget)
        bits, scan = smallest_exact_bits(built.model, check, max_bits=16)
        tag = f"{name} N={N} R={R} k={k}"
        below = None if bits is None else check(quantize(built.model, bits - 1))
        changed = [] if bits is None else changed_arrays(built.model, bits)
        changed_any = changed_any or bool(changed)
        checks[f"{tag}: smallest exact b = {claim.needed}"] = bits == claim.needed  # the claim, re-measured
        checks[f"{tag}: b - 1 = {None if bits is None else bits - 1} fails"] = (
            below is not None and not below.exact)
        if claim.per_parameter is not None:
            other, _ = _build(spec, N, R, k, seed, task_seed=seed + 1, budget=budget)
            b1 = _per_coordinate_bits([built.model.entity_embedding, other.model.entity_embedding])
            checks[f"{tag}: embeddings fit {claim.per_parameter}-bit per-coordinate codebooks"] = (
                b1 <= claim.per_parameter)
        records[name] = {"N": N, "R": R, "k": k, "smallest_exact_bits": bits, "scan": scan,
                         "accuracy_at_b_minus_1": None if below is None else below.accuracy,
                         "arrays_changed_at_b": changed}
        instances[name] = (built, bits, N, R, k, claim.per_parameter)
    if specs is None:
        checks["quantization at the smallest b changes at least one construction"] = changed_any
    return checks, records, instances


def gap_checks(instances: dict) -> tuple[dict[str, bool], list[dict]]:
    """Row 5: the governing lower bound at the b each verified instance holds must not exceed its d."""
    checks, table = {}, []
    for name, (built, bits, N, R, k, per_parameter) in instances.items():
        if bits is None:
            continue
        fn, P0 = governing_bound(name, built.promise)
        d = built.model.d  # measured from the built arrays
        row = {"construction": name, "N": N, "R": R, "k": k, "d": d, "P0": P0}
        for label, b in (("needed", bits), ("per_parameter", per_parameter)):
            if b is None:
                continue
            bound = fn(N, R, k, b, P0)
            row.update({f"{label}_b": b, f"{label}_d_min": bound.d_min, "bound": bound.id,
                        f"{label}_gap": round(d / bound.d_min, 4) if bound.d_min else None})
            if bound.d_min > 0:  # a vacuous bound (d_min = 0) cannot fail: reported, not checked
                claim = (f"{name} N={N} R={R} k={k} at b={b} ({label}): {bound.id} d_min = {bound.d_min} "
                         f"<= d = {d}")
                checks[claim] = bound.d_min <= d
        table.append(row)
    return checks, table


def section_bounds(seed: int = 0, progress: bool = False, budget: Budget | None = None
                   ) -> list[Report]:
    """The five rows of the module docstring.

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget (the "bits needed" row builds and checks constructions under it; the counts
        and gadgets are fixed small sizes).

    Returns
    -------
    list of Report
    """
    _log(progress, "bounds: enumerating all (N!)^R tasks and searching trees, against golden counts")
    return counting_reports(seed) + bits_and_bound_reports(seed, progress, as_budget(budget))


def counting_reports(seed: int = 0) -> list[Report]:
    """Rows 1–3 (module docstring): counts against golden values, count bounds against counts, gadgets.

    Parameters
    ----------
    seed : int
        The run seed (the gadgets' stream).

    Returns
    -------
    list of Report
        The three rows (fixed small sizes: nothing grows with an input).
    """
    reports = []
    start = time.perf_counter()
    reports.append(claim_report("counts = independent golden values", {"cases": COUNT_CASES,
                                                                        "trees": sorted(GOLDEN_TREES)},
                                count_checks(), time.perf_counter() - start, {"d": "", "m": ""}))

    start = time.perf_counter()
    checks, tightness = count_bound_checks()
    reports.append(claim_report("count bounds <= exact counts",
                                {"golden": len(GOLDEN_COUNTS) + len(GOLDEN_TREES)},
                                checks, time.perf_counter() - start, {"d": "", "m": ""},
                                {"count / lower bound": tightness}))

    start = time.perf_counter()
    reports.append(claim_report("gadget family valid", {"seed": seed}, gadget_checks(seed),
                                time.perf_counter() - start, {"d": "", "m": ""}))
    return reports


def bits_and_bound_reports(seed: int = 0, progress: bool = False, budget: Budget | None = None,
                           specs: list[ConstructionSpec] | None = None) -> list[Report]:
    """Rows 4 and 5 (module docstring): "bits needed" and "lower bounds <= verified constructions", over
    every registered construction or only ``specs`` (``verify --construction``).

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget.
    specs : list of ConstructionSpec, optional
        Only these constructions (their rows' parameters name them); default every registered one.

    Returns
    -------
    list of Report
        The two rows, each naming the sizes it measured (N, R, k per construction in its detail; in its
        parameters too when every construction was measured at the same sizes); a construction without a bits
        claim is named in both as not covered, and a row that checks nothing is not covered
        (``Report.not_covered``), never a PASS.
    """
    budget = as_budget(budget)
    reports = []
    chosen = {} if specs is None else {"constructions": [s.id for s in specs]}
    start = time.perf_counter()
    checks, records, instances = precision_checks(seed, progress, budget, specs)
    summary = " ".join(f"{n}:{r['smallest_exact_bits']}" for n, r in records.items())
    uncovered = not_covered() if specs is None else [s.id for s in specs if s.bits is None]
    # a row that checks nothing (no construction here claims anything) is not covered, and says why
    no_claim = (f"{', '.join(uncovered)} makes no bits claim" if uncovered
                else "no construction makes a bits claim")
    # the claims are at binary codes; a construction without a codes option at its own (never called binary)
    kinds = {s.id: "binary" if s.codes is not None else "its own"
             for s in (specs if specs is not None else [s for s, _ in precision_cases()]) if s.id in records}
    codes = "binary" if set(kinds.values()) <= {"binary"} else kinds
    said = "; ".join(f"{n} {r['smallest_exact_bits']} at {_sizes(r)}" for n, r in records.items())
    # (a row without records is not covered: its reason, not its detail, says why)
    detail = (f"smallest bits per parameter keeping every query exact: {said}" + (
        f"; not covered (no bits claim): {', '.join(uncovered)}" if uncovered else "")) if records else ""
    reports.append(claim_report("bits needed: smallest exact b, b-1 fails",
                                {"seed": seed, "codes": codes, **chosen, **_shared_sizes(records.values())},
                                checks, time.perf_counter() - start, {"d": summary, "m": ""},
                                {"records": records, "not covered (no bits claim)": uncovered,
                                 "detail": detail}, not_covered=no_claim))

    start = time.perf_counter()
    checks, table = gap_checks(instances)
    first = next((r for r in table if r["construction"] == "G1"), table[0] if table else {})
    shown = [label for label in ("needed", "per_parameter") if f"{label}_b" in first]  # (d_min = 0: vacuous)
    gap = " ".join([f"{first['construction']} gap"] + [
        f"{first[f'{label}_gap'] or 'vacuous'}@b={first[f'{label}_b']}" for label in shown]) if first else ""
    gaps = "; ".join(
        f"{r['construction']} at {_sizes(r)}: " + ", ".join(
            (f"{r[f'{label}_gap']:.3g}" if r[f"{label}_gap"] else "vacuous") + f" at b = {r[f'{label}_b']}"
            for label in ("needed", "per_parameter") if f"{label}_b" in r)
        for r in table)
    detail = f"gap d / d_min of the governing bound (reported, not checked): {gaps}" if gaps else ""
    why = (no_claim if not records else "no verified instance to compare" if not table
           else "every governing lower bound is vacuous here (d_min = 0)")
    reports.append(claim_report("lower bounds <= verified constructions",
                                {"seed": seed, **chosen, **_shared_sizes(table)},
                                checks, time.perf_counter() - start, {"d": gap, "m": ""},
                                {"gap table": table, "not covered (no bits claim)": uncovered,
                                 "detail": detail}, not_covered=why))
    return reports


def _sizes(row: dict) -> str:
    """The sizes a bits record or a gap row measured, in words (k only when above 1)."""
    return f"N = {row['N']}, R = {row['R']}" + (f", k = {row['k']}" if row["k"] != 1 else "")


def _shared_sizes(rows) -> dict:
    """``{"N", "R", "k"}`` of the rows when they all measured the same sizes (the table's columns show
    them), else ``{}`` (each row's sizes are named in its detail)."""
    sizes = {(row["N"], row["R"], row["k"]) for row in rows}
    if len(sizes) != 1:
        return {}
    (N, R, k), = sizes
    return {"N": N, "R": R, "k": k}
