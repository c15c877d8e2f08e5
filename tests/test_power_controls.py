"""The planted controls of probe-lm's probes of the model's own answer (georecall.lm.controls; no torch).

Each estimator is checked against an independent reference (a linear forward has an exact Jacobian; the
patching and intervention rules by hand), then each control on planted structure: the positive control is
detected (>= 0.9) and its negative control is not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.lm import controls

BETAS = (0.0, 0.5, 1.0, 2.0, 4.0)


def _states(rng, n, p=64):
    return rng.standard_normal((n, p)) + 3 * rng.standard_normal(p)


@given(st.integers(0, 2**31 - 1), st.integers(6, 12), st.integers(2, 5))
def test_lre_outputs_recover_an_exactly_linear_forward(seed, n, n_train):
    """F(h) = h M + c: the mean Jacobian is M, the bias c, so β·W h + b = β·h M + c (closed form)."""
    rng = np.random.default_rng(seed)
    H = _states(rng, n, 16)
    M = rng.standard_normal((16, 7))
    c = rng.standard_normal(7)
    facts = rng.permutation(n)
    train = facts[:n_train]
    out = controls.lre_outputs(lambda rows, d: (H[rows] + d) @ M + c, H, H @ M + c, facts, train, BETAS, 1e-3)
    for k, beta in enumerate(BETAS):
        np.testing.assert_allclose(out[k], beta * H[facts] @ M + c, rtol=1e-6,
                                   atol=1e-6 * np.abs(H @ M).max())


def test_lre_scores_choose_beta_on_the_training_facts_only():
    truth = np.array([1, 1, 2, 2, 3])
    is_train = np.array([True, True, False, False, False])
    pred = np.array([[0, 0, 2, 2, 3],  # β = 0: wrong on the training facts, right on the held-out ones
                     [1, 0, 0, 0, 0],
                     [1, 1, 2, 0, 0],  # the first β > 0 with the best training accuracy
                     [1, 1, 2, 2, 3],  # as good on training, better held out: not chosen (ties: the first)
                     [0, 0, 0, 0, 0]])
    sc = controls.lre_scores(pred, pred, truth, is_train, BETAS)
    assert sc["beta"] == 1.0 and sc["faithful"] == pytest.approx(1 / 3) and sc["bias_only"] == 1.0
    assert sc["sweep"] == [1.0, 0.0, pytest.approx(1 / 3), 1.0, 0.0]
    assert not controls.lre_rule(sc, 0.5, 0.2) and controls.lre_rule(dict(sc, faithful=0.9, bias_only=0.1),
                                                                     0.5, 0.2)


def test_planted_readout_interpolates_and_its_lookup_has_no_jacobian():
    rng = np.random.default_rng(0)
    H = _states(rng, 12)
    labels = rng.integers(5, size=12)
    lin = controls.PlantedReadout(H, labels, 5, 1.0)
    np.testing.assert_allclose(lin(H), np.eye(5)[labels], atol=1e-8)  # exact affine interpolation
    look = controls.PlantedReadout(H, labels, 5, 0.0)
    assert (look.answers == labels).all()
    d = 1e-3 * rng.standard_normal(H.shape)
    assert np.abs(look(H + d) - look(H)).max() < 1e-6  # saturated: a Jacobian sees nothing
    assert np.abs(lin(H + d) - lin(H)).max() > 1e-4


def _lre_rule(sc):
    return controls.lre_rule(sc, 0.5, 0.2, candidates=True)


def test_lre_power_detects_a_linear_readout_and_not_a_lookup_table():
    rng = np.random.default_rng(1)
    H = _states(rng, 15)
    labels = rng.permutation(24)[:15]  # distinct answers, as capital city
    pw = controls.lre_power(H, labels, 24, 5, BETAS, 1e-3, _lre_rule, rng=rng, strengths=(0.0, 0.5, 1.0),
                            draws=10)
    assert pw["rate"][1] >= 0.9 and pw["rate"][2] >= 0.9  # positive: half or all of the logits linear
    assert pw["rate"][0] <= 0.1  # negative: an associative lookup of the same answers


def test_lre_power_is_low_where_the_relation_has_one_answer_class_per_fact_seen():
    """A broken shape: every fact has the same class, so the bias alone is as faithful (gain < 0.2)."""
    rng = np.random.default_rng(2)
    H = _states(rng, 10)
    pw = controls.lre_power(H, np.zeros(10, dtype=np.int64), 3, 5, BETAS, 1e-3, _lre_rule, rng=rng,
                            strengths=(1.0,), draws=5)
    assert pw["rate"] == [0.0]


def _pairs(rng, sizes, classes):
    rel = np.concatenate([np.full(s, r) for r, s in enumerate(sizes)])
    lab = np.concatenate([rng.integers(c, size=s) for s, c in zip(sizes, classes)])
    src, dst = [], []
    start = 0
    for s in sizes:
        idx = np.arange(start, start + s)
        for a, b in zip(idx, np.roll(idx, 1)):
            if lab[a] != lab[b]:
                src.append(a)
                dst.append(b)
        start += s
    return rel, lab, np.array(src), np.array(dst)


def test_patch_answers_apply_the_partners_state():
    H = np.arange(12.0).reshape(4, 3)
    seen = {}

    def forward(rows, deltas):
        seen["x"] = H[rows] + deltas
        return rows

    assert controls.patch_answers(forward, H, np.array([0, 2]), np.array([3, 1])).tolist() == [0, 2]
    np.testing.assert_array_equal(seen["x"], H[[3, 1]])


def test_patch_power_detects_a_readout_at_the_patched_position_and_not_one_elsewhere():
    rng = np.random.default_rng(3)
    rel, lab, src, dst = _pairs(rng, [15, 10], [20, 5])
    H = _states(rng, rel.size)
    pw = controls.patch_power(H, lab, rel, [20, 5], src, dst, 0.5, rng=rng, strengths=(0.0, 0.75, 1.0),
                              draws=10)
    assert pw["rate"][1] >= 0.9 and pw["rate"][2] >= 0.9
    assert pw["rate"][0] == 0.0 and pw["moved"][0] <= 0.1


def test_patch_power_is_zero_where_the_patched_states_coincide():
    """A broken shape: every fact has the same state at the patched position, so no readout of it can tell
    the partners apart."""
    rng = np.random.default_rng(4)
    rel, lab, src, dst = _pairs(rng, [12], [6])
    H = np.tile(rng.standard_normal(32), (rel.size, 1))
    pw = controls.patch_power(H, lab, rel, [6], src, dst, 0.5, rng=rng, strengths=(1.0,), draws=5)
    assert pw["rate"] == [0.0]


def test_intervention_edits_follow_the_held_out_map():
    rng = np.random.default_rng(5)
    n, q, p = 6, 3, 4
    Us = [rng.standard_normal((4, q)), rng.standard_normal((1, q))]
    label = np.array([rng.integers(4, size=n), np.zeros(n, dtype=np.int64)])
    maps = [(np.arange(3), [rng.standard_normal((q, p)), rng.standard_normal((q, p))]),
            (np.arange(3, 6), [rng.standard_normal((q, p)), rng.standard_normal((q, p))])]
    facts = [(k, 0, k) for k in range(n)] + [(n + k, 1, k) for k in range(n)]  # relation 1: one class
    others = [[n + k] for k in range(n)] + [[k] for k in range(n)]
    h_norm = rng.uniform(1, 2, size=2 * n)
    ed = controls.intervention_edits(maps, Us, label, facts, h_norm, others, np.random.default_rng(9))
    assert ed["own"].tolist() == list(range(n))  # one-class facts are skipped
    draws = np.random.default_rng(9)
    for q_, k in enumerate(ed["own"]):
        a = label[0, k]
        j = int(draws.integers(3))
        j += j >= a
        assert ed["target"][q_] == j != a
        d = (Us[0][j] - Us[0][a]) @ maps[k // 3][1][0]
        np.testing.assert_allclose(ed["dirs"][q_], d / np.linalg.norm(d) * h_norm[k])
        assert ed["ratio"][q_] == pytest.approx(np.linalg.norm(d) / h_norm[k])
    assert ed["others"].tolist() == [n + k for k in range(n)] and ed["owner"].tolist() == list(range(n))
    rows, deltas = controls.intervention_deltas(ed, 2.0)
    assert rows.tolist() == list(range(n)) + [n + k for k in range(n)]
    np.testing.assert_allclose(deltas[n:], deltas[:n])
    np.testing.assert_allclose(np.linalg.norm(deltas, axis=1), 2 * np.concatenate([h_norm[:n]] * 2))


def test_intervention_scores_and_rule():
    sc = controls.intervention_scores(np.array([1, 2, 3, 3]), np.array([5, 5]), np.array([1, 2, 3, 0]),
                                      np.array([0, 2, 0, 0]), np.array([5, 6]))
    assert sc == {"success": 0.75, "changed": 0.75, "stay": 0.5}
    assert not controls.selective(sc, 0.0, 0.5, 0.4, 0.8)  # the other answers moved
    assert controls.selective(dict(sc, stay=0.9), 0.0, 0.5, 0.4, 0.8)
    assert not controls.selective(dict(sc, stay=0.9), 0.5, 0.5, 0.4, 0.8)  # already j half the time
    assert controls.intervention_scores(np.array([1]), np.array([], dtype=int), np.array([1]), np.array([0]),
                                        np.array([], dtype=int))["stay"] is None


def test_intervention_power_detects_a_planted_superposition_and_not_shuffled_facts():
    rng = np.random.default_rng(6)
    n, R, C, q, p = 100, 2, 6, 8, 40
    Us = [rng.standard_normal((C, q)) for _ in range(R)]
    labels = [rng.integers(C, size=n) for _ in range(R)]
    present = np.ones((n, R), dtype=bool)
    fact_rel, fact_subj = np.repeat(np.arange(R), n), np.tile(np.arange(n), R)
    facts = [(k, int(fact_rel[k]), int(fact_subj[k])) for k in range(n * R)]
    others = [[int(x) for x in np.flatnonzero(fact_subj == i) if x != k] for k, _r, i in facts]

    def rule(sc, already):
        return controls.selective(sc, already, 0.5, 0.4, 0.8)

    def sup_rule(fit):
        return fit["r2"] >= 0.5 and fit["r2"] >= fit["presence_r2"] + 0.1

    pw = controls.intervention_power(labels, Us, present, p, facts, others, fact_rel, fact_subj, 5, [1.0],
                                     rule, rng=rng, superposition_rule=sup_rule, snrs=(10.0,),
                                     negative_snr=10.0, draws=3)
    assert pw["rate"] == [[1.0]] and pw["negative"] == [0.0] and pw["edited"][0] > 0
    assert pw["superposition"] == [1.0] and pw["superposition_negative"] == 0.0


def test_superposition_maps_in_dual_form_equal_the_primal_blocks():
    """BlockMaps applies v @ A_r without forming A_r: against the primal coefficients of the same fit."""
    from georecall.experiments.ridge import cross_fit
    from georecall.lm import probes as lmprobes

    rng = np.random.default_rng(7)
    n, R, q, p = 40, 3, 5, 6
    blocks = [rng.standard_normal((n, q)) for _ in range(R)]
    present = rng.random((n, R)) < 0.8
    H = rng.standard_normal((n, p))
    fit = lmprobes.superposition_fit(H, blocks, present, folds=4, rng=np.random.default_rng(1))
    X = lmprobes.block_design(blocks, present)
    same = np.random.default_rng(1)  # the groups, then the inner folds, from one stream as in the fit
    W = cross_fit(X, H, lmprobes.folds_of(n, 4, same), rng=same, keep_W=True)["W"]
    for (_test, A), Wg in zip(fit["maps"], W):
        for r in range(R):
            v = rng.standard_normal(q)
            np.testing.assert_allclose(A[r], Wg[r * q : (r + 1) * q], rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(A.apply(r, v), v @ Wg[r * q : (r + 1) * q], rtol=1e-10, atol=1e-12)


def test_decoding_several_labelings_at_once_equals_one_at_a_time():
    """decode_vectors_many (shared factorisations) gives each labeling what decode_vectors gives it alone with
    a generator in the same state: bit for bit, since the same operations run."""
    from georecall.experiments import power
    from georecall.lm.probes import folds_of

    rng = np.random.default_rng(8)
    n, p, C = 30, 12, 7
    H, V = rng.standard_normal((n, p)), rng.standard_normal((C, 5))
    labs = [rng.integers(C, size=n), rng.integers(C, size=n)]
    groups = folds_of(n, 5, rng)
    many = power.decode_vectors_many(H, labs, V, groups, rng=np.random.default_rng(3))
    for lab, got in zip(labs, many):
        alone = power.decode_vectors(H, lab, V, groups, rng=np.random.default_rng(3))
        assert got["accuracy"] == alone["accuracy"] and (got["correct"] == alone["correct"]).all()
    from georecall.experiments.ridge import cross_fit, cross_fit_many

    Ys = [V[lab] for lab in labs] + [rng.standard_normal(n)]
    shared = cross_fit_many(H, Ys, groups, rng=np.random.default_rng(4), keep_W=True)
    for Y, got in zip(Ys, shared):
        alone = cross_fit(H, Y, groups, rng=np.random.default_rng(4), keep_W=True)
        assert np.array_equal(got["predictions"], alone["predictions"]) and got["alphas"] == alone["alphas"]
        assert all(np.array_equal(a, b) for a, b in zip(got["W"], alone["W"]))
