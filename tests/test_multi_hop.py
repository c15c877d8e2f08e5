"""G2, A2(a), A2(b) and C1 answer every k-hop query of arbitrary bijections, with their promised margins."""

import dataclasses

import numpy as np
import pytest
from conftest import tables
from hypothesis import given
from hypothesis import strategies as st

from georecall import estimates
from georecall.constructions import registry
from georecall.constructions.multi_hop import (
    build_a2_depth,
    build_a2_width,
    build_c1,
    build_g2,
    chains,
    multi_hop_queries,
)
from georecall.experiments.tradeoff import tradeoff_rows
from georecall.memory import Budget
from georecall.theory.statements import softmax_leakage
from georecall.theory.tasks import Task, random_task
from georecall.verify.checking.check import check_decoding, check_queries
from georecall.verify.checking.run import check_multi_hop

NO_COT = [build_g2, build_a2_width, build_a2_depth]


def tol(margin):
    return 1e3 * np.finfo(float).eps * max(1.0, abs(margin))


def assert_exact_no_cot(built, task, k):
    tokens, answers = multi_hop_queries(task, k)
    result = check_queries(built.model, tokens, answers)
    assert result.exact, result.failures
    assert result.min_margin >= built.promise.margin - result.rounding_bound - tol(built.promise.margin)
    assert (built.model.d, built.model.mlp_width) == (built.promise.d, built.promise.m)
    assert built.model.parameter_count() == built.promise.params


def assert_exact_cot(built, task, k):
    tokens, _ = multi_hop_queries(task, k)
    targets = chains(task, k)
    greedy = check_decoding(built.model, tokens, targets, keep=True)
    assert greedy.exact and greedy.final_accuracy == 1.0
    assert np.array_equal(greedy.predictions, targets)  # the decoded chain is the composition, step by step
    assert greedy.min_margin >= built.promise.margin - greedy.rounding_bound - tol(built.promise.margin)
    forced = check_queries(built.model, np.concatenate([tokens, targets[:, :-1]], axis=1), targets,
                           positions=np.arange(k, 2 * k))
    assert forced.exact and forced.per_position == [1.0] * k
    assert (built.model.d, built.model.mlp_width, built.model.parameter_count()) == (
        built.promise.d, built.promise.m, built.promise.params)


@given(table=tables(min_N=2, max_N=32, max_R=3), k=st.integers(1, 3),
       builder=st.sampled_from(NO_COT + [build_c1]), attention=st.sampled_from(["softmax", "hard"]),
       kind=st.sampled_from(["binary", "sign", "gaussian"]), seed=st.integers(0, 2**31))
def test_every_construction_answers_every_query(table, k, builder, attention, kind, seed):
    task = Task.from_table(table)
    built = builder(task, k, kind, D=None if kind == "binary" else 32, attention=attention, rng=seed)
    if builder is build_c1:
        assert_exact_cot(built, task, k)
    else:
        assert_exact_no_cot(built, task, k)


@pytest.mark.parametrize("builder", NO_COT + [build_c1])
@pytest.mark.parametrize("N, R, k", [(16, 1, 3), (8, 1, 1), (30, 2, 3), (20, 3, 2)])
def test_repeated_relations_and_a_single_relation(builder, N, R, k):
    """R = 1 makes every query r_1 = r_2 = ... = r_k: a head leaking onto its neighbours then reads the same
    relation. Paths with repeats are part of every exhaustive check; here they are also checked on their
    own."""
    task = random_task(N, R, 11)
    built = builder(task, k)
    tokens, answers = multi_hop_queries(task, k)
    repeated = (tokens[:, :k] == tokens[:, :1]).all(axis=1)
    assert repeated.sum() == N * R
    if builder is build_c1:
        result = check_decoding(built.model, tokens[repeated], chains(task, k)[repeated])
    else:
        result = check_queries(built.model, tokens[repeated], answers[repeated])
    assert result.exact
    assert_exact_cot(built, task, k) if builder is build_c1 else assert_exact_no_cot(built, task, k)


def test_softmax_leakage_matches_the_forward_pass():
    """The ε in the promises is the weight the forward pass actually puts off target."""
    from georecall.constructions.forward import forward
    task = random_task(8, 2, 0)
    built = build_g2(task, 3)
    tokens, _ = multi_hop_queries(task, 3)
    _, trace = forward(built.model, tokens[:5], trace=True)
    weights = trace.attention_weights[0]  # (heads, B, 1, T)
    for j in range(3):
        on_target = weights[j, :, 0, 3 - (j + 1)]
        np.testing.assert_allclose(1 - on_target, softmax_leakage(built.constants["beta"], 3), rtol=1e-12)


@pytest.mark.parametrize("builder", [build_g2, build_c1])
def test_temperature_below_the_leakage_bound_is_refused(builder):
    with pytest.raises(ValueError, match="leakage"):
        builder(random_task(64, 2, 0), 2, beta=0.5)


def test_a2_depth_refuses_too_much_leakage():
    with pytest.raises(ValueError, match=r"clip vs leakage: 3/16 >= ε"):
        build_a2_depth(random_task(16, 2, 0), 3, beta=1.0)


def test_gate_below_the_code_bound_is_refused():
    with pytest.raises(ValueError, match=r"G\(1 − ε\) > max\|a\|"):
        build_g2(random_task(16, 2, 0), 2, gate=0.1)


def test_memory_estimate_refuses_before_allocating():
    g2 = registry.get("G2")
    # G2 at k = 3: d = R^k·D + k·R + D + T, m = 2·R^k·D; float64 E (N + T positions) x d, the compact read-out
    # N x D, W1 and W2 (2·d·m) and the attention (4·d·T), written out here independently of the estimator
    N, R, k, D = 4096, 16, 3, 12
    T = k + 1
    d, m = R**k * D + k * R + D + T, 2 * R**k * D
    expected = 8 * ((N + T) * d + N * D + 2 * d * m + 4 * d * T)
    est = estimates.check_estimate(g2, N, R, k)
    (weights,) = [b for label, b, _ in est.parts if label.startswith("weights")]
    assert expected <= weights <= 1.01 * expected  # the one estimator counts them (and the biases)
    dense = estimates.check_estimate(dataclasses.replace(g2, readout="dense"), N, R, k)
    assert max(b for label, b, _ in dense.parts if label.startswith("weights")) > 75 * 2**30  # dense read-out
    calls = []
    watched = dataclasses.replace(g2, build=lambda *a, **kw: calls.append(a) or g2.build(*a, **kw))
    with pytest.raises(ValueError, match=r"needs about .* GiB of memory .* 4.00 GiB: lower N, R, k or D"):
        check_multi_hop(N, R, k, construction=watched, budget=Budget.from_gib(4))
    with pytest.raises(ValueError, match=r"needs about .* GiB of memory .*, more than the budget of 0.01"):
        check_multi_hop(4096, 16, 2, construction=watched, budget=Budget(2**30 // 100))
    assert calls == []  # refused before the builder allocated anything
    assert check_multi_hop(16, 2, 2, construction=watched, budget=Budget.from_gib(1)).passed
    assert len(calls) == 1


@pytest.mark.parametrize("k", [0, -1, 2.5])
def test_invalid_k(k):
    with pytest.raises(ValueError, match="k must be"):
        build_c1(random_task(8, 2, 0), k)


def test_hard_attention_is_labelled_as_an_idealization():
    report = check_multi_hop(32, 2, 2, attention="hard")
    assert "idealized" in report.name and report.passed


def test_tradeoff_rows_show_the_exponential_and_the_linear_side():
    rows = {(r["k"], r["construction"]): r for r in tradeoff_rows(1024, 4, 3)}
    assert rows[(3, "G2")]["d"] == 4**3 * 10 + 3 * 4 + 10 + 4
    assert rows[(3, "A2a")]["m"] == 1024 * 4**3
    assert rows[(3, "C1")]["d"] - rows[(1, "C1")]["d"] == 4  # additive in k
    assert rows[(3, "A2b")]["d"] == 10 + 8 + 4


@pytest.mark.parametrize("construction", ["path-blocks", "associative-width", "associative-depth", "cot"])
@pytest.mark.parametrize("N", [1, 2])
def test_smallest_entity_sets(construction, N):
    """N = 1 has no wrong answer (margin +inf, promise finite); N = 2 has codes of length 1."""
    report = check_multi_hop(N, 2, 2, construction=construction)
    assert report.passed and report.result.min_margin > 0  # passed: the promise met (up to rounding)


# The k-hop families' shared docstring sections (constructions.hops.hop_family_docstring)

def test_each_k_hop_family_documents_exactly_its_own_parameters():
    import inspect

    from georecall.constructions import hops
    from georecall.constructions.a2_depth import a2_depth_family
    from georecall.constructions.a2_width import a2_width_family
    from georecall.constructions.c1 import c1_family
    from georecall.constructions.g2 import g2_family

    for family in (g2_family, c1_family, a2_width_family, a2_depth_family):
        doc = family.__doc__
        assert "{hop family" not in doc and "ConditionError" in doc, family.__name__
        documented = {name for name, text in hops.HOP_FAMILY_PARAMETERS.items()
                      if f"\n    {text.splitlines()[0]}\n" in doc}
        assert documented == set(hops.HOP_FAMILY_PARAMETERS) & set(inspect.signature(family).parameters)
    assert "gate : float" not in a2_depth_family.__doc__  # A2(b) has no gate: its entry is left out


def test_a_family_docstring_without_the_placeholders_is_refused():
    from georecall.constructions.hops import hop_family_docstring

    def family(N, R, k, *, D=None):
        """A family.

        Parameters
        ----------
        k : int
            Hops.
        """

    with pytest.raises(ValueError, match="hop family parameters"):
        hop_family_docstring(family)

    def documented(N, R, k, *, D=None):
        """A family.

        Parameters
        ----------
        {hop family parameters}

        {hop family raises}
        """

    doc = hop_family_docstring(documented).__doc__
    assert "    k : int\n            Hops, >= 1.\n" in doc and "    D : int, optional\n" in doc
    assert "gate :" not in doc and "        InputError\n" in doc
