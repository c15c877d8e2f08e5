"""Negative controls for the ``lower bounds and counting`` section of ``georecall verify``.

For each of its five rows, a deliberately broken input — a wrong count, a bound made too strong, a broken
gadget graph, a broken quantization — makes exactly that row FAIL, and the other rows still pass. The
unbroken section passes. (The section runs in about 5 s; the enumeration cases are trimmed to the fast ones in
the controls that do not concern counting.)
"""

from __future__ import annotations

import dataclasses

import pytest

from georecall.bounds import counting, graphs, lower
from georecall.verify.checking import precision
from georecall.verify.sections import bounds_checks
from georecall.verify.sections.bounds_checks import section_bounds

ROWS = ["counts = independent golden values", "count bounds <= exact counts", "gadget family valid",
        "bits needed: smallest exact b, b-1 fails", "lower bounds <= verified constructions"]


def failing_rows(reports) -> list[str]:
    assert [r.name for r in reports] == ROWS
    return [r.name for r in reports if not r.passed]


@pytest.fixture
def fast(monkeypatch):
    """Smaller cases of every row (the smallest exact b is the same there: ``georecall precision``)."""
    monkeypatch.setattr(bounds_checks, "COUNT_CASES", [(3, 1, 3), (3, 2, 3), (4, 2, 3)])
    monkeypatch.setattr(bounds_checks, "GOLDEN_TREES", {7: bounds_checks.GOLDEN_TREES[7]})
    smaller = {"single": (256, 4, 1), "multi": (64, 2, 2)}  # by kind: every registered construction has one
    cases = [(spec, dataclasses.replace(claim, **dict(zip("NRk", smaller[spec.hops]))))
             for spec, claim in bounds_checks.precision_cases()]
    monkeypatch.setattr(bounds_checks, "precision_cases", lambda: cases)


def test_the_section_passes(fast):
    assert failing_rows(section_bounds(0)) == []


def test_a_wrong_count_fails_the_counting_row(monkeypatch, fast):
    real = counting.enumerate_counts

    def off_by_one(N, R, k_max, **kwargs):
        counts = real(N, R, k_max, **kwargs)
        return dataclasses.replace(counts, F={**counts.F, 2: counts.F[2] + 1})

    monkeypatch.setattr(counting, "enumerate_counts", off_by_one)
    assert failing_rows(section_bounds(0)) == [ROWS[0]]


def test_a_wrong_tree_search_fails_the_counting_row(monkeypatch, fast):
    monkeypatch.setattr(counting, "count_trees", lambda N, R, k: N**4)  # the upper side, not the count
    assert failing_rows(section_bounds(0)) == [ROWS[0]]


def test_a_sandwich_made_too_strong_fails_the_count_bound_row(monkeypatch, fast):
    real = counting.closed_forms

    def too_strong(N, R, k):  # the upper side N^(R^k) claimed as the lower side
        closed = real(N, R, k)
        return dataclasses.replace(closed, trees_lower=None if closed.trees_lower is None else N ** (R**k))

    monkeypatch.setattr(counting, "closed_forms", too_strong)
    assert failing_rows(section_bounds(0)) == [ROWS[1]]


def test_an_F_lower_bound_made_too_strong_fails_the_count_bound_row(monkeypatch, fast):
    monkeypatch.setattr(counting, "F_lower", lambda N, R, k: ((N, N, R),))  # (N!)^R: only true at k = 1
    assert failing_rows(section_bounds(0)) == [ROWS[1]]


def test_a_broken_gadget_graph_fails_the_gadget_row(monkeypatch, fast):
    real = graphs.gadget_task

    def swapped(N, R, k, M, leaves=None, rng=None):
        task, roots, assigned = real(N, R, k, M, leaves, rng)
        broken = assigned.copy()
        broken[0, [0, -1]] = broken[0, [-1, 0]] if broken.shape[1] > 1 else broken[1, [0]]
        return task, roots, broken

    monkeypatch.setattr(graphs, "gadget_task", swapped)
    assert failing_rows(section_bounds(0)) == [ROWS[2]]


def test_an_invalid_gadget_graph_fails_the_gadget_row(monkeypatch, fast):
    real = graphs.to_graph

    def dropped_edge(task):
        graph = real(task)
        graph.remove_edge(*next(iter(graph.edges(keys=True))))
        return graph

    monkeypatch.setattr(graphs, "to_graph", dropped_edge)
    assert failing_rows(section_bounds(0)) == [ROWS[2]]


def test_a_quantizer_that_changes_nothing_fails_the_precision_row(monkeypatch, fast):
    monkeypatch.setattr(precision, "quantize_array", lambda array, bits: array)
    assert failing_rows(section_bounds(0)) == [ROWS[3]]


def test_a_quantizer_keeping_zero_at_one_bit_fails_the_precision_row(monkeypatch, fast):
    real = precision.quantize_array

    def ternary_at_one_bit(array, bits):  # {-s, 0, s} is log2 3 bits, not 1
        return real(array, 2 if bits == 1 else bits)

    monkeypatch.setattr(precision, "quantize_array", ternary_at_one_bit)
    assert failing_rows(section_bounds(0)) == [ROWS[3]]


@pytest.mark.parametrize("bound_name", ["total_information", "per_entity", "chain_of_thought"])
def test_a_bound_made_too_strong_fails_the_gap_row(monkeypatch, fast, bound_name):
    """Each bound a verified construction is checked against (total information for every model, per entity
    for the one-pass G1 and G2, chain of thought for C1), tripled, exceeds some construction's d."""
    real = getattr(lower, bound_name)

    def tripled(N, R, k=1, b=1, P0=0):
        bound = real(N, R, k, b, P0)
        return dataclasses.replace(bound, d_min=3 * bound.d_min)

    monkeypatch.setattr(lower, bound_name, tripled)
    assert failing_rows(section_bounds(0)) == [ROWS[4]]


# ------------------------------------------------------------------ rows that check nothing, and their sizes


def test_a_construction_without_a_bits_claim_leaves_both_rows_not_covered():
    """A planted construction that makes no bits claim: its bits and bounds rows check nothing, so they are
    not covered (the reason said), never a PASS and never a failure; the same construction with its claim is
    the control (covered, passed)."""
    from georecall.constructions import registry

    g1 = registry.get("G1")
    bare = dataclasses.replace(g1, id="NOCLAIM", name="no-claim", bits=None)
    rows = bounds_checks.bits_and_bound_reports(0, specs=[bare])
    assert [r.name for r in rows] == ROWS[3:]
    for row in rows:
        doc = row.as_dict()
        assert row.not_covered == "NOCLAIM makes no bits claim" and doc["not_covered"] == row.not_covered
        assert not row.passed and not doc["passed"] and row.result.n_queries == 0
        assert not [name for name, ok in row.extra_checks.items() if not ok]  # nothing failed either
    control = bounds_checks.bits_and_bound_reports(0, specs=[g1])
    assert all(r.not_covered is None and r.passed and r.result.n_queries > 0 for r in control)


def test_a_gap_row_whose_every_bound_is_vacuous_is_not_covered(monkeypatch):
    """A governing bound planted vacuous (d_min = 0) gives the gap row nothing to check: not covered."""
    from georecall.constructions import registry

    for name in ("total_information", "per_entity"):  # both bounds that hold for G1
        real = getattr(lower, name)
        monkeypatch.setattr(lower, name, lambda N, R, k=1, b=1, P0=0, real=real:
                            dataclasses.replace(real(N, R, k, b, P0), d_min=0))
    bits, gaps = bounds_checks.bits_and_bound_reports(0, specs=[registry.get("G1")])
    assert bits.passed and bits.not_covered is None
    assert not gaps.passed and gaps.not_covered is not None and "vacuous" in gaps.not_covered


def test_the_bits_and_gap_rows_name_the_sizes_they_measured(fast):
    """Each construction's N and R (and k above 1) in the rows' words; with one set of sizes, in the rows'
    parameters too (the table's N, R, k columns)."""
    from georecall.constructions import registry

    def words(N, R, k):
        return f"N = {N}, R = {R}" + (f", k = {k}" if k > 1 else "")

    bits, gaps = bounds_checks.bits_and_bound_reports(0)
    sizes = {spec.id: (claim.N, claim.R, claim.k) for spec, claim in bounds_checks.precision_cases()}
    assert len(set(sizes.values())) > 1  # two sets of sizes: the columns cannot hold them, the words do
    assert not {"N", "R", "k"} & (set(bits.params) | set(gaps.params))
    for name, (N, R, k) in sizes.items():
        b = bits.extra["records"][name]["smallest_exact_bits"]
        assert f"{name} {b} at {words(N, R, k)}" in bits.extra["detail"], bits.extra["detail"]
        assert f"{name} at {words(N, R, k)}: " in gaps.extra["detail"], gaps.extra["detail"]
    g1 = registry.get("G1")
    assert g1.bits is not None
    for row in bounds_checks.bits_and_bound_reports(0, specs=[g1]):
        assert (row.params["N"], row.params["R"], row.params["k"]) == (g1.bits.N, g1.bits.R, g1.bits.k)
        assert f"at {words(g1.bits.N, g1.bits.R, 1)}" in row.extra["detail"]
