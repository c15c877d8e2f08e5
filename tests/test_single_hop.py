"""G1 and A1 are exact on every query of arbitrary bijections, with at least their promised margins."""

import numpy as np
import pytest
from conftest import tables
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.codes import make_codes
from georecall.constructions.g1 import g1_promise
from georecall.constructions.single_hop import build_a1, build_g1, single_hop_queries
from georecall.theory.statements import binary_coherence
from georecall.theory.tasks import Task, random_task
from georecall.verify.checking.check import check_queries
from georecall.verify.checking.report import check_construction

CODE_KINDS = st.sampled_from(["binary", "sign", "gaussian"])


def exhaustive(built, task, integer=False):
    tokens, answers = single_hop_queries(task)
    return check_construction("t", {}, built, tokens, answers, integer=integer, keep=True)


@given(table=tables(min_N=2, max_N=64, max_R=6), kind=CODE_KINDS, seed=st.integers(0, 2**31))
def test_g1_exact_with_promised_margin(table, kind, seed):
    task = Task.from_table(table)
    D = None if kind == "binary" else 32
    built = build_g1(task, kind, D=D, rng=seed)
    report = exhaustive(built, task)
    assert report.result.exact, report.result.failures
    assert report.result.min_margin >= built.promise.margin * (1 - 1e-12) - report.result.rounding_bound
    assert report.passed
    assert (built.model.d, built.model.mlp_width) == (built.promise.d, built.promise.m)


@given(table=tables(min_N=2, max_N=64, max_R=6), kind=CODE_KINDS, seed=st.integers(0, 2**31))
def test_a1_exact_with_promised_margin(table, kind, seed):
    task = Task.from_table(table)
    built = build_a1(task, kind, D=None if kind == "binary" else 32, rng=seed)
    report = exhaustive(built, task)
    assert report.passed, report.result.failures
    assert built.model.mlp_width == task.N * task.R


@given(table=tables(min_N=2, max_N=64, max_R=6), kind=st.sampled_from(["binary", "sign"]),
       construction=st.sampled_from([build_g1, build_a1]), seed=st.integers(0, 2**31))
def test_integer_and_float_modes_agree_and_integer_margins_are_integers(table, kind, construction, seed):
    task = Task.from_table(table)
    D = None if kind == "binary" else 32
    as_float = exhaustive(construction(task, kind, D=D, rng=seed), task)
    as_int = exhaustive(construction(task, kind, D=D, rng=seed, integer=True), task, integer=True)
    assert np.array_equal(as_float.result.predictions, as_int.result.predictions)
    margins = as_int.result.margins
    assert np.array_equal(margins, np.rint(margins)) and as_int.passed


def test_g1_margin_formula_for_binary_codes():
    # binary codes: λ·c1·|a|²(1 − μ) = λ·c1·2 for ±1 codes (|a|² = D, μ = 1 − 2/D): 4 with c1 = 2, λ = 1
    task = random_task(300, 3, 1)
    built = build_g1(task, "binary", integer=True)
    assert built.codes.mu == pytest.approx(binary_coherence(built.codes.D))
    report = exhaustive(built, task, integer=True)
    assert report.result.min_margin == 4.0 == built.promise.margin


def test_g1_full_size_integer_check():
    """The default size of `georecall verify`: N = 4096, R = 16, binary codes, all 65,536 queries."""
    task = random_task(4096, 16, np.random.default_rng(2026))
    built = build_g1(task, "binary", integer=True)
    report = exhaustive(built, task, integer=True)
    assert report.passed and report.result.n_queries == 65_536
    assert report.achieved["d"] == 16 * 12 + 16 + 12


def test_checker_catches_a_wrong_fact():
    """Corrupt one subject's block: exactly the queries that read it fail, and the checker says which."""
    task = random_task(32, 3, 5)
    built = build_g1(task, "binary", integer=True)
    E = np.array(built.model.entity_embedding)
    D = built.codes.D
    E[7, D : 2 * D] = built.codes.vectors[(task.table[1, 7] + 1) % 32]  # relation 1 of subject 7 now wrong
    from dataclasses import replace
    broken = replace(built.model, entity_embedding=E)
    tokens, answers = single_hop_queries(task)
    result = check_queries(broken, tokens, answers, integer=True)
    assert result.n_correct == result.n_queries - 1
    assert result.failures[0]["query"] == 1 * 32 + 7
    assert result.failures[0]["predicted"] == (task.table[1, 7] + 1) % 32
    assert result.min_margin < 0


def test_a_tie_is_a_failure():
    task = random_task(8, 2, 0)
    built = build_g1(task, "binary", integer=True)
    from dataclasses import replace
    tied = replace(built.model, unembedding=np.zeros_like(built.model.unembedding))
    tokens, answers = single_hop_queries(task)
    result = check_queries(tied, tokens, answers)
    assert result.n_correct == 0 and result.min_margin == 0.0


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda t: build_g1(t, "binary", D=3), r"2\^D >= N; got 2\^3 = 8 < N = 16"),
        (lambda t: build_g1(t, "binary", gate=1.0), r"gate: c2·G > c1·max\|a\|.*need 1 > 1"),
        (lambda t: build_g1(t, "binary", gate=0.5), "gate"),
        (lambda t: build_g1(t, "binary", integer=True, gate=2.0), r"need 2 > 2"),
        (lambda t: build_g1(t, "binary", lam=0.0), r"λ > 0"),
        (lambda t: build_g1(t, "binary", gain=0.0), r"g > 0"),
        (lambda t: build_g1(t, "sign", D=1, rng=0), r"distinct codes: .*need 1 > 1"),
        (lambda t: build_a1(t, "sign", D=1, rng=0), r"distinct codes: .*need 1 > 1"),
        (lambda t: build_g1(t, "gaussian", D=4, integer=True, rng=0), "no integer scale"),
        (lambda t: build_g1(t, "binary", integer=True, gate=4.5), "integer mode needs"),
        (lambda t: build_g1(t, make_codes("binary", 8), rng=0), "fewer than N = 16"),
    ],
)
def test_builders_refuse_outside_their_theorem(call, message):
    with pytest.raises(ValueError, match=message):
        call(random_task(16, 3, 0))


def test_promise_is_independent_of_any_model():
    # ±1 binary codes of length 12 at integer scale: |a|² = 12, max inner product 10, gap 2, all integers.
    p = g1_promise(4096, 16, 12, gap=2, distinct=(12, 10), max_abs=1, gate=4)
    assert (p.d, p.m, p.margin, p.fact_params) == (220, 384, 4, 4096 * 16 * 12)
    assert isinstance(p.margin, int)
    assert p.violations() == []


@given(table=tables(min_N=2, max_N=40, max_R=4), construction=st.sampled_from([build_g1, build_a1]),
       kind=st.sampled_from(["binary", "sign"]), integer=st.booleans(), seed=st.integers(0, 2**31))
def test_disjoint_attributes_keep_the_margin(table, construction, kind, integer, seed):
    task = Task.from_table(table, attributes="disjoint")
    built = construction(task, kind, D=None if kind == "binary" else 32, integer=integer, rng=seed)
    assert built.model.n_out == task.N * task.R
    report = exhaustive(built, task, integer=integer)
    assert report.passed, report.result.failures


@pytest.mark.parametrize("construction", [build_g1, build_a1])
def test_symmetric_relations(construction):
    task = random_task(64, 3, 4, symmetric=True)
    assert exhaustive(construction(task, "binary", integer=True), task, integer=True).passed


@pytest.mark.parametrize("construction", [build_g1, build_a1])
@pytest.mark.parametrize("integer", [False, True])
def test_a_single_entity(construction, integer):
    task = random_task(1, 3, 0)
    report = exhaustive(construction(task, "binary", integer=integer), task, integer=integer)
    assert report.passed and report.result.min_margin == np.inf
