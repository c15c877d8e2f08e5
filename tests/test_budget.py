"""The one memory budget (``georecall.memory.Budget``): made once from ``--max-gib``, refused when it is not a
positive finite size, compared with the one estimator's totals, and used by the checker for its chunk size
(a small budget gives smaller chunks and the very same verdict, predictions and margins)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall import estimates, memory
from georecall.constructions import registry
from georecall.constructions.decoding import chunk_size
from georecall.errors import InputError
from georecall.memory import Budget, as_budget
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries, teacher_forcing
from georecall.verify.checking import check, run
from georecall.verify.sections import suite

MIB = 2**20
TINY = Budget(60 * MIB)  # chunk_bytes() = 1 MiB, the floor: a quarter MiB per array of a checker chunk


# ------------------------------------------------------------------------------------------ the object


@pytest.mark.parametrize("bad", [0, 0.0, -1, -0.5, math.nan, math.inf, -math.inf, True, False, "2", "nan",
                                 [1]])
def test_from_gib_refuses_what_is_not_a_positive_finite_size(bad):
    with pytest.raises(InputError):  # InputError: exit 2 on the command line
        Budget.from_gib(bad)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1024", None])
def test_a_budget_of_bytes_must_be_a_whole_positive_number(bad):
    with pytest.raises(InputError, match="positive number of bytes"):
        Budget(bad)


def test_from_gib_is_gib_and_none_is_half_the_available_memory(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 6 * memory.GIB)
    assert Budget.from_gib(None) == Budget.default() == Budget(3 * memory.GIB)
    assert Budget.from_gib(2).max_bytes == 2 * 2**30 and Budget.from_gib(0.5).gib == 0.5
    assert as_budget(None) == Budget(3 * memory.GIB)
    assert as_budget(Budget(7)) == Budget(7)
    for bad in (12345, 1.5, "1", True):  # one budget type: a number of bytes is made a Budget where it arises
        with pytest.raises(InputError, match="Budget"):
            as_budget(bad)  # type: ignore[arg-type]


@given(st.integers(min_value=1, max_value=2**50), st.integers(min_value=1, max_value=16))
def test_chunk_bytes_stays_between_one_mib_and_the_checker_chunk(max_bytes, copies):
    budget = Budget(max_bytes)
    got = budget.chunk_bytes(copies)
    assert MIB <= got <= memory.CHUNK_BYTES
    if got > MIB:  # above the floor, `copies` such chunks fit in a tenth of the budget
        assert copies * got * 10 <= max_bytes
    if max_bytes >= 10 * copies * memory.CHUNK_BYTES:
        assert got == memory.CHUNK_BYTES
    assert Budget(2 * max_bytes).chunk_bytes(copies) >= got  # a larger budget never gives smaller chunks


def test_chunk_bytes_at_named_budgets():
    assert Budget.from_gib(4).chunk_bytes() == memory.CHUNK_BYTES  # 4 GiB / 60 > 64 MiB
    assert Budget.from_gib(1).chunk_bytes() == 2**30 // 60  # 17.07 MiB: a tenth of 1 GiB over 6 copies
    assert TINY.chunk_bytes() == MIB and Budget(1).chunk_bytes() == MIB


@given(st.lists(st.integers(min_value=0, max_value=2**40), max_size=4),
       st.integers(min_value=1, max_value=2**42))
def test_require_compares_the_total_with_the_budget_and_refuses_bare_bytes(sizes, max_bytes):
    est = memory.Estimate("job")
    for i, nbytes in enumerate(sizes):
        est.add(f"part {i}", nbytes, f"knob {i}")
    try:
        outcome = ("fits", est.require(Budget(max_bytes)) is est)
    except InputError as exc:
        outcome = ("refused", str(exc))
    assert outcome[0] == ("fits" if est.total <= max_bytes else "refused")  # the total, independently
    assert outcome[0] == "refused" or outcome[1] is True
    with pytest.raises(InputError, match="a memory budget is a georecall.memory.Budget"):
        est.require(max_bytes)  # type: ignore[arg-type]  # one budget type: bytes are not a Budget


# ---------------------------------------------------------------------------- the checker's chunks


def _counting(monkeypatch):
    """Count THE forward pass's calls from the checker (one per chunk and step) and the tables' blocks."""
    counts = {"forward": 0, "blocks": 0, "block_bytes": set()}
    real_forward, real_additive = check.forward_pass, check.run_additive

    def forward_pass(*args, **kwargs):
        counts["forward"] += 1
        return real_forward(*args, **kwargs)

    def run_additive(*args, **kwargs):
        counts["block_bytes"].add(kwargs["block_bytes"])
        stats = real_additive(*args, **kwargs)
        counts["blocks"] += stats["blocks"]
        return stats

    monkeypatch.setattr(check, "forward_pass", forward_pass)
    monkeypatch.setattr(check, "run_additive", run_additive)
    return counts


def _same(a: check.CheckResult, b: check.CheckResult) -> None:
    """Bitwise the same outcome: verdict, counts, minimum and its query, failures, and every prediction and
    certified margin (compared as bytes: -0.0 is not 0.0)."""
    assert (a.exact, a.n_correct, a.n_undecided, a.argmin_query, a.forward, a.decoder) == (
        b.exact, b.n_correct, b.n_undecided, b.argmin_query, b.forward, b.decoder)
    assert np.float64(a.min_margin).tobytes() == np.float64(b.min_margin).tobytes()
    assert np.float64(a.rounding_bound).tobytes() == np.float64(b.rounding_bound).tobytes()
    assert a.failures == b.failures and a.per_position == b.per_position
    assert a.predictions is not None and b.predictions is not None
    assert a.margins is not None and b.margins is not None
    assert a.predictions.tobytes() == b.predictions.tobytes()
    assert a.margins.tobytes() == b.margins.tobytes()


CASES = [  # (construction, N, R, k, integer, forward)
    ("G1", 256, 4, 1, True, "dense"),
    ("G1", 256, 4, 1, False, "dense"),
    ("G2", 64, 3, 2, False, "dense"),
    ("G1", 2048, 2, 1, False, "tables"),
    ("G1", 2048, 2, 1, True, "tables"),
]


@pytest.mark.parametrize("name, N, R, k, integer, forward", CASES,
                         ids=[f"{c[0]}-{'int' if c[4] else 'float'}-{c[5]}" for c in CASES])
def test_a_small_budget_uses_smaller_chunks_and_gives_the_same_result(monkeypatch, name, N, R, k, integer,
                                                                     forward):
    task = task_for_seed(N, R, 0)
    model = registry.get(name).build(task, k, integer=True) if integer else registry.get(name).build(task, k)
    model = model.model
    tokens, answers = queries(task, k)
    counts = _counting(monkeypatch)
    runs = {}
    for label, budget in (("default", Budget.from_gib(8)), ("tiny", TINY)):
        counts.update(forward=0, blocks=0, block_bytes=set())
        runs[label] = check.check_queries(model, tokens, answers, integer=integer, keep=True, forward=forward,
                                          budget=budget)
        runs[label + " counts"] = (counts["forward"], counts["blocks"], set(counts["block_bytes"]))
    default, tiny = runs["default counts"], runs["tiny counts"]
    if forward == "dense":  # the chunk: queries per call of THE forward pass
        T = tokens.shape[1]
        small, large = memory.array_bytes(TINY), memory.array_bytes(Budget(2**33))
        assert chunk_size(model, T, small) < chunk_size(model, T, large)
        assert default[0] == 1 and tiny[0] == -(-tokens.shape[0] // chunk_size(model, T, MIB // 4)) > 1
    else:  # the tables' token blocks
        assert default[2] == {16 * MIB} and tiny[2] == {MIB // 4}
        assert tiny[1] > default[1] >= 1
    _same(runs["default"], runs["tiny"])
    assert runs["tiny"].exact  # and both are right, against the task itself (not only one another)
    assert np.array_equal(runs["tiny"].predictions, answers)


def test_a_small_budget_gives_the_same_greedy_decoding(monkeypatch):
    task = task_for_seed(128, 2, 0)
    model = registry.get("C1").build(task, 3).model
    tokens, _ = queries(task, 3)
    targets = teacher_forcing(task, 3)[1]
    counts = _counting(monkeypatch)
    default = check.check_decoding(model, tokens, targets, keep=True, forward="dense",
                                   budget=Budget.from_gib(8))
    calls_default = counts["forward"]
    counts["forward"] = 0
    tiny = check.check_decoding(model, tokens, targets, keep=True, forward="dense", budget=TINY)
    assert calls_default == 3 and counts["forward"] > 3 and counts["forward"] % 3 == 0  # k steps per chunk
    _same(default, tiny)
    assert tiny.exact and np.array_equal(tiny.predictions, targets)


def test_the_estimate_counts_the_chunks_the_checker_uses():
    spec = registry.get("G2")
    for N, R, k in ((256, 3, 2), (16, 2, 1)):  # many chunks; one chunk of every query
        model = spec.build(task_for_seed(N, R, 0), k).model
        T, Q = k + 1, N * R**k
        widest = max(model.d, model.mlp_width, model.n_out) * T * 8  # bytes of one query's widest array
        for budget in (Budget.from_gib(8), Budget.from_gib(0.5), TINY):
            (chunks,) = [b for label, b, _ in estimates.check_estimate(spec, N, R, k, budget=budget).parts
                         if label == "checker chunks"]
            per_chunk = min(chunk_size(model, T, memory.array_bytes(budget)), Q)  # queries the checker takes
            # CHUNK_COPIES intermediates alive, each of BOUNDED_ARRAYS arrays of per_chunk queries
            assert chunks == memory.CHUNK_COPIES * memory.BOUNDED_ARRAYS * per_chunk * widest
    small = estimates.check_estimate(spec, 4096, 16, 1, budget=TINY).parts
    large = estimates.check_estimate(spec, 4096, 16, 1, budget=Budget.from_gib(8)).parts
    assert dict((lb, b) for lb, b, _ in small)["checker chunks"] < dict((lb, b) for lb, b, _ in large)[
        "checker chunks"]


# --------------------------------------------------------------------------- the library's entry points


def test_run_check_refuses_over_budget_before_building():
    with pytest.raises(InputError, match=r"checking G1 \(geometric\) needs about .* of 0.01 GiB: lower"):
        run.run_check("G1", 4096, 16, budget=Budget(2**30 // 100))
    with pytest.raises(TypeError):
        run.run_check("G1", 16, 2, max_bytes=2**30)  # one spelling of the budget
    assert run.run_check("G1", 16, 2, budget=Budget.from_gib(1)).passed
    assert run.run_check("G1", 16, 2, budget=Budget(2**30)).passed  # bytes, as a Budget
    with pytest.raises(InputError, match="Budget"):
        run.run_check("G1", 16, 2, budget=2**30)  # type: ignore[arg-type]  # one budget type


def test_sections_and_precision_refuse_under_a_budget_too_small_for_them():
    tiny = Budget(MIB)
    with pytest.raises(InputError, match="budget of 1 MiB"):
        suite.section_single_hop(budget=tiny)
    with pytest.raises(InputError, match="precision needs about"):
        run.precision_scan("G1", 1024, 8, budget=tiny)
    with pytest.raises(InputError, match="bits needed by"):
        suite.section_bounds(budget=tiny)
    with pytest.raises(InputError, match="certify single-hop needs about"):
        from georecall.verify.checking.certify import certify

        certify("G1", 256, 2, budget=tiny)
