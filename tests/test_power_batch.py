"""The batched fits of probe-lm's analysis against the one-at-a-time code they replace (no torch).

``ridge.cross_fit_batch`` fits many problems at once, in kernel form in the targets too; the decoding power,
the per-layer decoding and superposition fits and the intervention control draw every random number first,
in the order the one-at-a-time loop draws them, and then fit together. Each is checked here against the
slow reference: the previous implementation of ``cross_fit_many`` (targets in primal form), kept as
``ridge._cross_fit_many_reference``, and the plain loops of ``decode_vectors`` / ``superposition_fit`` /
``intervention_edits`` written out in the tests."""

from __future__ import annotations

import numpy as np
import pytest

from georecall.errors import InputError
from georecall.experiments import power, ridge
from georecall.lm import controls
from georecall.lm import probes as lmprobes


def _close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("n, p, q", [(36, 90, 20), (60, 7, 3), (23, 40, 1)])
def test_batch_equals_the_previous_implementation_problem_by_problem(n, p, q):
    rng = np.random.default_rng(n)
    B = 4
    X = rng.standard_normal((B, n, p))
    Ys = [rng.standard_normal((n, q)), rng.standard_normal((B, n, q + 2))]
    groups = lmprobes.folds_of(n, 5, np.random.default_rng(1))
    inner = ridge.inner_parts(n, groups, rng=np.random.default_rng(2))
    got = ridge.cross_fit_batch(X, Ys, [groups] * B, [inner] * B)
    for b in range(B):
        ref = ridge._cross_fit_many_reference(X[b], [Ys[0], Ys[1][b]], groups, rng=np.random.default_rng(2))
        for t in range(2):
            assert got[b][t]["alphas"] == ref[t]["alphas"]
            _close(got[b][t]["predictions"], ref[t]["predictions"])
        # and what cross_fit_many (one problem through the same code) gives (2-D products may round
        # differently from stacked ones: X Xᵀ of one matrix is a symmetric rank-k update)
        one = ridge.cross_fit_many(X[b], [Ys[0], Ys[1][b]], groups, rng=np.random.default_rng(2))
        for t in range(2):
            assert got[b][t]["alphas"] == one[t]["alphas"]
            _close(got[b][t]["predictions"], one[t]["predictions"])


def test_batch_with_shared_features_and_own_splits_and_coefficients():
    """Shared X (one Gram matrix), per-problem targets, held-out groups and inner folds: each problem as
    cross_fit gives it alone, its dual coefficients included."""
    rng = np.random.default_rng(3)
    n, p, q, B = 41, 120, 9, 5
    X = rng.standard_normal((n, p))
    Y = rng.standard_normal((B, n, q))
    streams = [np.random.default_rng(10 + b) for b in range(B)]
    groups = [lmprobes.folds_of(n, 5, s) for s in streams]
    inner = [ridge.inner_parts(n, g, rng=s) for g, s in zip(groups, streams)]
    got = ridge.cross_fit_batch(X, [Y], groups, inner, keep_coef=True)
    for b in range(B):
        same = np.random.default_rng(10 + b)
        g = lmprobes.folds_of(n, 5, same)
        ref = ridge.cross_fit(X, Y[b], g, rng=same, keep_dual=True)
        assert got[b][0]["alphas"] == ref["alphas"]
        assert np.array_equal(got[b][0]["predictions"], ref["predictions"])
        for (fit, C), (Xc, C_ref) in zip(got[b][0]["coef"], ref["dual"]):
            assert np.array_equal(C, C_ref) and np.array_equal(X[fit] - X[fit].mean(axis=0), Xc)
        assert same.integers(1 << 30) == streams[b].integers(1 << 30)  # the generator left alike


def test_batch_refuses_problems_of_different_shapes():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((2, 12, 5))
    g1 = [np.arange(0, 3), np.arange(3, 12)]
    g2 = [np.arange(0, 4), np.arange(4, 12)]
    inner = [ridge.inner_parts(12, g, rng=np.random.default_rng(0)) for g in (g1, g2)]
    with pytest.raises(InputError, match="differs in size"):
        ridge.cross_fit_batch(X, [rng.standard_normal((12, 2))], [g1, g2], inner)
    with pytest.raises(InputError, match="targets of shape"):
        ridge.cross_fit_batch(X, [rng.standard_normal((11, 2))], [g1, g1], [inner[0]] * 2)
    with pytest.raises(InputError, match="at least two rows"):
        ridge.inner_parts(3, [np.arange(2)], rng=np.random.default_rng(0))


def test_best_rows_is_best_and_survives_a_negative_rounding_minimum():
    rng = np.random.default_rng(5)
    grid = np.sort(rng.random(9))
    errors = rng.random((20, 9))
    errors[3, 5] = errors[3].min()  # an exact tie: the larger strength
    assert [ridge._best(e, grid) for e in errors] == ridge._best_rows(errors, np.tile(grid, (20, 1))).tolist()
    tiny = np.array([[-1e-30, 1e-31, -1e-30 * (1 + 1e-14)]])  # rounding around an exact zero error
    assert ridge._best_rows(tiny, np.array([[1.0, 2.0, 3.0]])).tolist() == [2]


def _shape(rng, n=60, R=3):
    present = rng.random((n, R)) < 0.8
    present[:, 0] = True
    labels = [rng.integers(0, 6, n) for _ in range(R)]
    vectors = [rng.standard_normal((6, 16)) for _ in range(R)]
    return labels, vectors, present


def test_decode_power_equals_the_loop_it_replaces():
    """The planned path (draws first, fits together) against decode_power's previous loop, written out."""
    rng = np.random.default_rng(6)
    labels, vectors, present = _shape(rng)
    p = 30
    groups_of = [lmprobes.folds_of(int(present[:, r].sum()), 5, rng) for r in range(3)]
    snrs, draws = (0.3, 3.0), 3
    got = power.decode_power(labels, vectors, present, p, groups_of, rng=np.random.default_rng(7), snrs=snrs,
                             draws=draws, negative_snr=3.0)
    ref_rng = np.random.default_rng(7)
    pos, neg = np.zeros((3, 2)), np.zeros((3, 2))
    uns: list = [[[] for _ in snrs] for _ in range(3)]
    for k, snr in enumerate(snrs):
        for _ in range(draws):
            H = power.planted_states(labels, vectors, present, p, snr, ref_rng)
            for r in range(3):
                rows = np.flatnonzero(present[:, r])
                lab = labels[r][rows]
                res = power.decode_vectors(H[rows], lab, vectors[r], groups_of[r], rng=ref_rng)
                pos[r, k] += power.detected(res)
                if res["accuracy_unseen"] is not None:
                    uns[r][k].append(res["accuracy_unseen"])
                if snr == 3.0:
                    sh = power.decode_vectors(H[rows], lab[ref_rng.permutation(lab.size)], vectors[r],
                                              groups_of[r], rng=ref_rng)
                    neg[r, k] += power.detected(sh)
    for r in range(3):
        assert got[r]["positive"] == (pos[r] / draws).tolist()
        assert got[r]["negative"] == [None, neg[r, 1] / draws]
        assert got[r]["accuracy_unseen"] == [float(np.mean(u)) if u else None for u in uns[r]]


def test_decoding_a_stack_of_layers_equals_each_layer_alone():
    rng = np.random.default_rng(8)
    n, p, C, B = 33, 20, 5, 3
    V = rng.standard_normal((C, 8))
    labs = [rng.integers(C, size=n), rng.integers(C, size=n)]
    Hs = rng.standard_normal((B, n, p))
    groups = lmprobes.folds_of(n, 5, rng)
    got = power.decode_vectors_stack(Hs, labs, V, groups, rng=np.random.default_rng(9))
    for b in range(B):
        alone = power.decode_vectors_many(Hs[b], labs, V, groups, rng=np.random.default_rng(9))
        for x, y in zip(got[b], alone):
            strip = ("correct",)
            assert ({k: v for k, v in x.items() if k not in strip}
                    == {k: v for k, v in y.items() if k not in strip})
            assert np.array_equal(x["correct"], y["correct"])


def test_superposition_of_many_states_equals_each_alone():
    rng = np.random.default_rng(10)
    n, R, q, p = 45, 3, 6, 10
    blocks = [rng.standard_normal((n, q)) for _ in range(R)]
    present = rng.random((n, R)) < 0.7
    Hs = [rng.standard_normal((n, p)) for _ in range(4)]
    got = lmprobes.superposition_fit_many(Hs, blocks, present, folds=5, rng=np.random.default_rng(11))
    for H, x in zip(Hs, got):
        alone = lmprobes.superposition_fit(H, blocks, present, folds=5, rng=np.random.default_rng(11),
                                           keep_maps=False)
        assert x["r2"] == alone["r2"] and x["presence_r2"] == alone["presence_r2"]
        assert x["alphas"] == alone["alphas"]


def test_intervention_edits_with_drawn_targets_equal_drawing_inside():
    rng = np.random.default_rng(12)
    n, R, q, p = 30, 2, 4, 5
    Us = [rng.standard_normal((3, q)), rng.standard_normal((1, q))]  # the second: one class, no draw
    label = np.stack([rng.integers(3, size=n), np.zeros(n, dtype=np.int64)])
    present = np.ones((n, R), dtype=bool)
    blocks = [Us[r][label[r]] for r in range(R)]
    fit = lmprobes.superposition_fit(rng.standard_normal((n, p)), blocks, present, folds=3, rng=rng)
    facts = [(k, k % 2, k // 2) for k in range(2 * n)]
    others = [[k + 1] if k % 2 == 0 else [] for k in range(2 * n)]
    h_norm = rng.random(2 * n) + 0.5
    a = controls.intervention_edits(fit["maps"], Us, label, facts, h_norm, others, np.random.default_rng(13))
    targets = controls.draw_targets(Us, label, facts, np.random.default_rng(13))
    b = controls.intervention_edits(fit["maps"], Us, label, facts, h_norm, others, targets=targets)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert targets[1] is None and targets[0] is not None and targets[0] != label[0, 0]


def _intervention_power_loop(labels, Us, present, p, facts, others, fact_rel, fact_subj, folds, doses, rule,
                             rng, sup_rule, snrs, negative_snr, draws):
    """controls.intervention_power as it was written before its fits were batched (the reference)."""
    R = present.shape[1]
    rate, neg = np.zeros((len(snrs), len(doses))), np.zeros(len(doses))
    edited, sup_rate, sup_neg = np.zeros(len(snrs)), np.zeros(len(snrs)), 0.0
    truth = np.array([labels[r][i] for r, i in zip(fact_rel, fact_subj)])
    for k, snr in enumerate(snrs):
        for _ in range(draws):
            H, maps = power.planted_states(labels, Us, present, p, snr, rng, return_maps=True)
            readers = [(Us[r] - Us[r].mean(axis=0)) @ maps[r] for r in range(R)]
            answer = controls._read(readers, fact_rel, H[fact_subj])
            ok = answer == truth
            fs = [f for f in facts if ok[f[0]]]
            oth = [[x for x in xs if ok[x]] for f, xs in zip(facts, others) if ok[f[0]]]
            runs = [(list(labels), False)]
            if snr == negative_snr:
                runs.append((lmprobes.shuffled(list(labels), present, rng), True))
            for labs, is_neg in runs:
                sup = lmprobes.superposition_fit(H, [Us[r][labs[r]] for r in range(R)], present, folds=folds,
                                                 rng=rng, keep_maps=True)
                if is_neg:
                    sup_neg += sup_rule(sup) / draws
                else:
                    sup_rate[k] += sup_rule(sup) / draws
                ed = controls.intervention_edits(sup["maps"], Us, np.array(labs), fs,
                                                 np.linalg.norm(H[fact_subj], axis=1), oth, rng)
                if not is_neg:
                    edited[k] += ed["own"].size / draws
                if ed["own"].size == 0:
                    continue
                n_own = ed["own"].size
                already = float(np.mean(answer[ed["own"]] == ed["target"]))
                for q, dose in enumerate(doses):
                    rows, deltas = controls.intervention_deltas(ed, dose)
                    ans = controls._read(readers, fact_rel[rows], H[fact_subj[rows]] + deltas)
                    sc = controls.intervention_scores(ans[:n_own], ans[n_own:], ed["target"],
                                                      answer[ed["own"]], answer[ed["others"]])
                    if is_neg:
                        neg[q] += rule(sc, already) / draws
                    else:
                        rate[k, q] += rule(sc, already) / draws
    return rate, neg, edited, sup_rate, sup_neg


def test_intervention_power_equals_the_loop_it_replaces():
    rng = np.random.default_rng(14)
    n, R, p = 40, 3, 24
    present = rng.random((n, R)) < 0.8
    labels = [rng.integers(0, 4, n) for _ in range(R)]
    Us = [rng.standard_normal((4, 12)) for _ in range(R)]
    facts, fact_rel, fact_subj = [], [], []
    for i in range(n):
        for r in range(R):
            if present[i, r]:
                facts.append((len(fact_rel), r, i))
                fact_rel.append(r)
                fact_subj.append(i)
    fact_rel, fact_subj = np.array(fact_rel), np.array(fact_subj)
    others = [[k2 for k2, r2, i2 in facts if i2 == i and k2 != k] for k, r, i in facts]
    doses = [0.25, 1.0, "fitted"]

    def rule(sc, already):
        return controls.selective(sc, already, 0.5, 0.4, 0.8)

    def sup_rule(fit):
        return bool(fit["r2"] >= 0.5 and fit["r2"] >= fit["presence_r2"] + 0.1)

    snrs = (0.3, 3.0)
    got = controls.intervention_power(labels, Us, present, p, facts, others, fact_rel, fact_subj, 4, doses,
                                      rule, rng=np.random.default_rng(15), superposition_rule=sup_rule,
                                      snrs=snrs, negative_snr=3.0, draws=3)
    rate, neg, edited, sup_rate, sup_neg = _intervention_power_loop(
        labels, Us, present, p, facts, others, fact_rel, fact_subj, 4, doses, rule, np.random.default_rng(15),
        sup_rule, snrs, 3.0, 3)
    assert got["rate"] == rate.tolist() and got["negative"] == neg.tolist()
    assert got["edited"] == edited.tolist()
    assert got["superposition"] == sup_rate.tolist() and got["superposition_negative"] == sup_neg
    assert max(got["superposition"]) > 0  # the comparison saw a detection, not only zeros
