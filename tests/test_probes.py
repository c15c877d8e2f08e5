"""Probes: exact on G1 (R² = 1, interventions and transfer 100%), and able to fail on an untrained model."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.model import Model
from georecall.constructions.single_hop import build_a1, build_g1
from georecall.experiments import probes, probes_hidden, probes_mechanism
from georecall.testing import tables
from georecall.theory.tasks import random_task
from georecall.training.parameters import init_model


@pytest.fixture(scope="module")
def g1_case():
    task = random_task(256, 3, 7)
    return build_g1(task, "binary").model, task


@pytest.mark.parametrize("codes", ["binary", pytest.param("sign", marks=pytest.mark.slow)])  # sign: long
def test_every_probe_is_exact_on_g1(codes):
    task = random_task(256, 3, 1)
    model = build_g1(task, codes, D=None if codes == "binary" else 24, rng=0).model
    result = probes.probe_all(model, task, rng=0, transfer_steps=5)
    readout = result["readout"]
    assert readout["encoding_r2"] == pytest.approx(1.0, abs=1e-9)
    fit = readout["encoding_fit"]  # sign codes, D = 24: p = 3·99 = 297 features for 192 fit subjects
    assert fit["p"] == 3 * model.d and fit["n"] == 192
    assert readout["underdetermined"] == (fit["rank"] >= fit["n"] - 1)
    assert result["accuracy"]["accuracy"] == 1.0 and result["warnings"] == []
    assert all(p["r2"] == pytest.approx(1.0, abs=1e-9) for p in readout["per_relation"])
    assert readout["probe_accuracy_mean"] == 1.0
    assert result["intervention"]["follows"] == 1.0 and result["intervention"]["others_unchanged"] == 1.0
    assert result["selectivity"]["selective_fraction"] == 1.0
    assert result["selectivity"]["active_units"] == result["selectivity"]["units"]
    assert result["transfer"]["closed_form_accuracy"] == 1.0


def test_probes_fail_on_an_untrained_model():
    task = random_task(512, 3, 2)
    model = init_model(512, 3, 16, 64, rng=3)
    result = probes.probe_all(model, task, rng=0, transfer_steps=5)
    assert result["readout"]["encoding_r2"] < 0.5
    assert result["readout"]["probe_accuracy_mean"] < 0.05
    assert result["intervention"]["follows"] < 0.05
    assert result["selectivity"]["selective_fraction"] < 0.5
    assert result["transfer"]["closed_form_accuracy"] < 0.05  # chance is 1/512


def test_intervention_moves_only_the_asked_relation(g1_case):
    model, task = g1_case
    maps = probes.superposition_readout(model, task, holdout=0.0, rng=0)["encoding_maps"]
    result = probes.causal_intervention(model, task, maps, subjects=None, rng=1)
    assert result["interventions"] == task.N * task.R and result["follows"] == 1.0


def test_readout_flags_an_underdetermined_fit_and_warns():
    task = random_task(64, 4, 0)
    model = init_model(64, 4, 32, 8, rng=0)
    assert probes.superposition_readout(model, task, rng=0)["underdetermined"]
    result = probes.probe_all(model, task, rng=0, transfer_steps=None)
    assert any("underdetermined" in w for w in result["warnings"])
    assert any("of its 256 facts" in w for w in result["warnings"])  # an untrained model: near chance


def test_model_task_mismatch_is_refused(g1_case):
    model, _ = g1_case
    with pytest.raises(ValueError, match="does not fit the task"):
        probes.probe_all(model, random_task(256, 2, 0))


def test_two_extra_entity_rows_are_refused_naming_the_shapes(g1_case):
    """A model exported with one token table (entities, then relations) has more E rows than the task's N:
    relation tokens would land on entity rows. Refused, never misread."""
    model, task = g1_case
    E = np.asarray(model.entity_embedding)
    wider = model.replace(entity_embedding=np.vstack([E, E[:2]]))
    message = r"entity table has 258 rows \(E: 258 × \d+\) but the task has N = 256"
    with pytest.raises(ValueError, match=message):
        probes.probe_all(wider, task)
    with pytest.raises(ValueError, match="read-out has 255 rows"):
        probes.check_model_shapes(model.with_dense_readout().replace(
            unembedding=np.asarray(model.full_unembedding())[:-1]), task)


def test_a_random_model_is_reported_near_chance():
    task = random_task(512, 3, 2)
    accuracy = probes.task_accuracy(init_model(512, 3, 16, 64, rng=3), task)
    assert accuracy["queries"] == 1536 and accuracy["chance"] == 1 / 512
    assert accuracy["accuracy"] < 5 / 512  # about 1/N of its facts


# ----------------------------------------------------------------------------------- hidden states of LMs


def planted_states(rng, n=600, R=3, attributes=12, width=40, noise=0.05):
    labels = rng.integers(0, attributes, size=(n, R))
    vectors = rng.standard_normal((R, attributes, width))
    states = sum(vectors[r][labels[:, r]] for r in range(R)) + noise * rng.standard_normal((n, width))
    return states, labels


def test_linear_relational_encoding_finds_a_planted_structure():
    rng = np.random.default_rng(0)
    states, labels = planted_states(rng)
    result = probes_hidden.linear_relational_encoding(states, labels, rng=1)
    assert result["probe_accuracy_mean"] > 0.95 and result["superposition_r2"] > 0.95
    noise = rng.standard_normal(states.shape)
    null = probes_hidden.linear_relational_encoding(noise, labels, rng=1)
    assert null["probe_accuracy_mean"] < 0.3 and null["superposition_r2"] < 0.2


@pytest.mark.parametrize("n, width, noise", [
    (40, 120, 0.5),  # the default run's shorter case of the same behaviour
    pytest.param(120, 600, 2.0, marks=pytest.mark.slow),  # long (CONTRIBUTING, CI times)
])
def test_hidden_state_probes_state_p_n_and_strength_and_flag_a_wide_state(n, width, noise):
    """A real LM's state is wider than the rows: every fit says p, n, its chosen strength, and that plain
    least squares would interpolate; the planted structure is still found on held-out rows."""
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 4, (n, 3))
    vectors = rng.standard_normal((3, 4, width))
    states = sum(vectors[r][labels[:, r]] for r in range(3)) + noise * rng.standard_normal((n, width))
    result = probes_hidden.linear_relational_encoding(states, labels, rng=1)
    for entry in result["per_relation"]:
        fit = entry["fit"]
        assert (fit["p"], fit["n"]) == (width, n - n // 4) and fit["folds"] == 5 and fit["alpha"] > 0
        assert fit["underdetermined_without_penalty"] is True
    assert result["superposition_fit"]["p"] == 12 and not result["superposition_fit"][
        "underdetermined_without_penalty"]
    assert result["probe_accuracy_mean"] > 0.9
    with pytest.raises(ValueError, match="at least two fit rows"):
        probes_hidden.linear_relational_encoding(states[:2], labels[:2], holdout=0.5, rng=1)


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"states": np.zeros((4, 3))}, "missing \\['attributes'\\]"),
        ({"states": np.zeros(4), "attributes": np.zeros((4, 1), int)}, "2-D float array"),
        ({"states": np.zeros((4, 3)), "attributes": np.zeros((4, 1))}, "integer array"),
        ({"states": np.zeros((4, 3)), "attributes": np.zeros((5, 1), int)}, "4 rows but 'attributes' has 5"),
        ({"states": np.full((4, 3), np.nan), "attributes": np.zeros((4, 1), int)}, "non-finite"),
        ({"states": np.zeros((4, 3)), "attributes": -np.ones((4, 1), int)}, "non-negative"),
        ({"states": np.zeros((0, 3)), "attributes": np.zeros((0, 1), int)}, "at least two"),
    ],
)
def test_hidden_state_files_are_validated(tmp_path, arrays, message):
    path = tmp_path / "states.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=message):
        probes_hidden.load_hidden_states(str(path))


def test_pickled_hidden_states_are_refused(tmp_path):
    path = tmp_path / "states.npz"
    np.savez(path, states=np.array([{"a": 1}], dtype=object), attributes=np.zeros((1, 1), int))
    with pytest.raises(ValueError, match="without pickled objects"):
        probes_hidden.load_hidden_states(str(path))


# ------------------------------------------------------------------------ probes that discriminate (issue 12)


def open_all_gates(model):
    """G1 with every relation embedding opening every gate: no relation conditioning left."""
    Q = np.asarray(model.relation_embedding)
    return model.replace(relation_embedding=np.tile(Q.sum(axis=0), (Q.shape[0], 1)))


def test_g1_forward_and_reverse_fits_are_exact_and_the_null_fit_is_not(g1_case):
    model, task = g1_case
    fits = probes_mechanism.attribute_fits(model, task, rng=0)
    assert fits["forward_r2"] == pytest.approx(1.0, abs=1e-9)
    assert fits["reverse_r2"] == pytest.approx(1.0, abs=1e-9)  # G1 is symmetric: see the module docstring
    assert fits["forward_minus_reverse"] == pytest.approx(0.0, abs=1e-9)
    assert fits["superposition_r2"] == pytest.approx(1.0, abs=1e-9)
    assert fits["null_forward_r2"] < 0.05  # fitting alone: about −p/(n − p)
    assert fits["displacement_forward_r2"] is None and "no initial model given" in fits["displacement_notes"]


@pytest.mark.slow  # long (CONTRIBUTING, CI times); a shorter case of the behaviour stays in the default run
def test_fits_fail_when_embeddings_or_readout_rows_are_shuffled(g1_case):
    model, task = g1_case
    perm = np.random.default_rng(0).permutation(task.N)
    shuffled_E = model.replace(entity_embedding=np.asarray(model.entity_embedding)[perm])
    assert probes_mechanism.attribute_fits(shuffled_E, task, rng=0)["forward_r2"] < 0.1
    shuffled_U = model.replace(unembedding=np.asarray(model.unembedding)[perm])
    assert probes_mechanism.attribute_fits(shuffled_U, task, rng=0)["reverse_r2"] < 0.1


@pytest.mark.slow  # long (CONTRIBUTING, CI times); a shorter case of the behaviour stays in the default run
def test_displacement_fit_sees_an_initialisation_left_in_place(g1_case):
    model, task = g1_case
    E0 = np.random.default_rng(1).standard_normal(model.entity_embedding.shape) / np.sqrt(model.d)
    start = model.replace(entity_embedding=E0)
    fits = probes_mechanism.attribute_fits(model, task, initial=start, rng=0)
    # what "training" wrote (G1's E − E0) is the superposition minus noise: no longer an exact fit
    assert fits["forward_r2"] == pytest.approx(1.0, abs=1e-9) and fits["displacement_forward_r2"] < 0.9
    assert fits["displacement_reverse_r2"] is None  # U did not move
    assert any("U did not move" in note for note in fits["displacement_notes"])
    # a planted superposition on top of E0 is recovered by the displacement fit, not by the fit of E
    planted = model.replace(entity_embedding=E0 + 0.3 * np.asarray(model.entity_embedding))
    fits = probes_mechanism.attribute_fits(planted, task, initial=start, rng=0)
    assert fits["displacement_forward_r2"] == pytest.approx(1.0, abs=1e-9) and fits["forward_r2"] < 0.9
    unmoved = probes_mechanism.attribute_fits(model, task, initial=model, rng=0)
    assert unmoved["displacement_forward_r2"] is None


def test_displacement_needs_matching_shapes(g1_case):
    model, task = g1_case
    other = init_model(task.N, task.R, model.d + 1, 4, rng=0)
    with pytest.raises(ValueError, match="initial E has shape"):
        probes_mechanism.attribute_fits(model, task, initial=other, rng=0)


def test_g1_selector_is_selective_gated_and_broad_and_a1_is_narrow(g1_case):
    model, task = g1_case
    g1 = probes.unit_selectivity(model, task)
    assert g1["selective_fraction"] == 1.0 and g1["gated_mass"] == pytest.approx(1.0, abs=1e-12)
    assert g1["breadth_median"] == 0.5 and g1["threshold"] == probes.SELECTIVITY_THRESHOLD
    a1 = probes.unit_selectivity(build_a1(task, "binary").model, task)
    # a per-fact memory is relation-selective too; breadth 1/N is what tells it from a selector
    assert a1["selective_fraction"] == 1.0 and a1["breadth_median"] == pytest.approx(1 / task.N)


def test_selectivity_fails_when_every_gate_is_open(g1_case):
    model, task = g1_case
    broken = probes.unit_selectivity(open_all_gates(model), task)
    assert broken["selective_fraction"] == 0.0
    assert broken["gated_mass"] == pytest.approx(1 / task.R)


def test_selectivity_threshold_is_validated(g1_case):
    model, task = g1_case
    with pytest.raises(ValueError, match="threshold"):
        probes.unit_selectivity(model, task, threshold=0.0)


def test_functional_transfer_is_exact_on_g1_and_fails_without_relation_gating(g1_case):
    model, task = g1_case
    new = random_task(task.N, task.R, 11)
    maps = probes.superposition_readout(model, task, holdout=0.0, rng=0)["encoding_maps"]
    exact = probes_mechanism.functional_transfer(model, task, new, maps, steps=20)
    assert exact == {"start_accuracy_A": 1.0, "accuracy_A": 1.0, "zero_shot_B": 1.0, "steps": 0,
                     "chance": 1 / task.N}
    broken = probes_mechanism.functional_transfer(open_all_gates(model), task, new, maps, steps=20)
    assert broken["accuracy_A"] < 0.3 and broken["zero_shot_B"] < 0.3 and broken["steps"] > 0


def test_functional_transfer_guards(g1_case):
    model, task = g1_case
    maps = probes.superposition_readout(model, task, holdout=0.0, rng=0)["encoding_maps"]
    with pytest.raises(ValueError, match="task A's sizes"):
        probes_mechanism.functional_transfer(model, task, random_task(task.N, task.R + 1, 0), maps)
    with pytest.raises(ValueError, match="encoding maps must have shape"):
        probes_mechanism.functional_transfer(model, task, random_task(task.N, task.R, 0), maps[:-1])


def test_mechanism_probes_exact_on_g1_and_failing_on_an_untrained_model():
    task = random_task(256, 3, 5)
    g1 = probes_mechanism.mechanism_probes(build_g1(task, "binary").model, task, seed=0, transfer_steps=None,
                                           encoder_steps=20)["summary"]
    assert set(g1) == set(probes_mechanism.SUMMARY_FIELDS)
    for key in ("forward_r2", "reverse_r2", "superposition_r2", "probe_accuracy", "follows",
                "others_unchanged", "selective_fraction", "gated_mass", "active_fraction",
                "closed_form_transfer", "encoder_accuracy_A", "functional_zero_shot"):
        assert g1[key] == pytest.approx(1.0, abs=1e-9), key
    assert g1["fitted_transfer"] is None  # skipped: transfer_steps=None
    start = init_model(256, 3, 16, 64, rng=3)
    untrained = probes_mechanism.mechanism_probes(start, task, seed=0, transfer_steps=None,
                                                  encoder_steps=20)["summary"]
    assert untrained["superposition_r2"] < 0.5 and untrained["reverse_r2"] < 0.5
    assert untrained["follows"] < 0.05 and untrained["selective_fraction"] < 0.5
    assert untrained["gated_mass"] < 0.6 and untrained["closed_form_transfer"] < 0.05
    assert untrained["functional_zero_shot"] < 0.5


@pytest.mark.slow  # long (CONTRIBUTING, CI times); a shorter case of the behaviour stays in the default run
def test_mechanism_probes_share_splits_and_task_b_across_models_of_one_seed(g1_case):
    model, task = g1_case
    a = probes_mechanism.mechanism_probes(model, task, seed=4, transfer_steps=None, encoder_steps=None)
    b = probes_mechanism.mechanism_probes(model, task, seed=4, transfer_steps=None, encoder_steps=None)
    assert a["summary"] == b["summary"] and a["functional"] is None
    assert a["summary"]["encoder_accuracy_A"] is None and a["summary"]["functional_zero_shot"] is None


@given(tables(min_N=2, max_N=40, max_R=4))
def test_inverse_table_inverts_every_relation(table):
    inv = probes_mechanism.inverse_table(table)
    rows = np.arange(table.shape[0])[:, None]
    assert np.array_equal(inv[rows, table], np.tile(np.arange(table.shape[1]), (table.shape[0], 1)))
    assert np.array_equal(table[rows, inv], np.tile(np.arange(table.shape[1]), (table.shape[0], 1)))


@given(st.integers(0, 2**31 - 1), st.integers(1, 3), st.integers(2, 6))
def test_a_planted_superposition_is_recovered_exactly_held_out(seed, R, d):
    """E = c + Σ_r U[π_r] A_r, random A_r and U: the forward held-out R² is 1 whatever the draw."""
    rng = np.random.default_rng(seed)
    N = 24 * R * d
    task = random_task(N, R, rng)
    U = rng.standard_normal((N, d))
    E = rng.standard_normal(d) + sum(U[task.table[r]] @ rng.standard_normal((d, d)) for r in range(R))
    model = Model(E, rng.standard_normal((R, d)), U)
    assert probes_mechanism.attribute_fits(model, task, rng=rng)["forward_r2"] == pytest.approx(1.0, abs=1e-8)


# ------------------------------------------------------------------ issue 21: honest at any width


@pytest.mark.slow  # long (CONTRIBUTING, CI times); a shorter case of the behaviour stays in the default run
@pytest.mark.parametrize("d", [128, 256])
def test_g1_embedded_wider_has_the_same_logits_and_meets_every_claim(d):
    """G1 padded to d and rotated by a random orthogonal matrix: the same function, no meaningful
    coordinate, p = R·d features far above the 192 fit subjects — and every criterion is still met."""
    from georecall.constructions.forward import forward
    from georecall.constructions.single_hop import single_hop_queries
    from georecall.experiments.study_design import claims_met

    task = random_task(256, 4, 3)
    g1 = build_g1(task, "binary").model
    wide = probes_mechanism.embed_wider(g1, d, rng=5)
    tokens, _ = single_hop_queries(task)
    np.testing.assert_allclose(forward(wide, tokens), forward(g1, tokens), atol=1e-9)
    assert wide.d == d and np.linalg.matrix_rank(wide.entity_embedding) == np.linalg.matrix_rank(
        g1.entity_embedding)
    assert np.count_nonzero(np.abs(wide.entity_embedding) > 1e-12) > 0.9 * wide.entity_embedding.size
    out = probes_mechanism.mechanism_probes(wide, task, seed=0, transfer_steps=None, encoder_steps=20)
    assert out["fits"]["fits"]["forward"]["p"] == 4 * d
    assert all(claims_met(out["summary"]).values()), out["summary"]
    assert out["summary"]["forward_ceiling"] == pytest.approx(1.0, abs=1e-6)


def test_embed_wider_refuses_a_narrower_residual(g1_case):
    model, _ = g1_case
    with pytest.raises(ValueError, match="d >= the model's d"):
        probes_mechanism.embed_wider(model, model.d - 1)


def test_interventions_use_only_subjects_held_out_of_the_maps_fit(g1_case):
    model, task = g1_case
    readout = probes.superposition_readout(model, task, rng=0)
    held_out = readout["test_index"]
    result = probes.causal_intervention(model, task, readout["encoding_maps"], subjects=None, rng=1,
                                        candidates=held_out)
    assert result["interventions"] == held_out.size * task.R and result["follows"] == 1.0
    with pytest.raises(ValueError, match="no subjects"):
        probes.causal_intervention(model, task, readout["encoding_maps"], rng=1, candidates=np.array([], int))


def test_displacement_removes_the_share_of_the_init_that_weight_decay_left(g1_case):
    """E = keep·E⁰ + (a superposition): the decay-aware displacement (retained = keep) is exact; the plain
    E − E⁰ (retained = 1) adds (1 − keep)·E⁰ of noise back and fails."""
    model, task = g1_case
    E0 = np.random.default_rng(1).standard_normal(model.entity_embedding.shape)
    keep = 0.01
    trained = model.replace(entity_embedding=keep * E0 + 0.1 * np.asarray(model.entity_embedding))
    start = model.replace(entity_embedding=E0)
    aware = probes_mechanism.attribute_fits(trained, task, initial=start, rng=0, retained={"E": keep})
    naive = probes_mechanism.attribute_fits(trained, task, initial=start, rng=0)
    assert aware["displacement_forward_r2"] == pytest.approx(1.0, abs=1e-8)
    assert naive["displacement_forward_r2"] < 0.5
    assert any("weight decay" in note for note in aware["displacement_notes"])
    with pytest.raises(ValueError, match="retained share"):
        probes_mechanism.attribute_fits(trained, task, initial=start, rng=0, retained={"E": 1.5})


@pytest.mark.slow  # long (CONTRIBUTING, CI times); a shorter case of the behaviour stays in the default run
def test_every_fit_reports_p_n_and_its_chosen_strength(g1_case):
    model, task = g1_case
    fits = probes_mechanism.attribute_fits(model, task, rng=0)["fits"]
    for name in ("forward", "reverse", "null_forward", "ceiling"):
        assert {"p", "n", "rank", "alpha", "relative_alpha", "folds"} <= set(fits[name]), name
        assert fits[name]["n"] == 192 and fits[name]["folds"] == 5


# ------------------------------------------------------------------------- the probe / transfer commands


def _trained_file(tmp_path, steps="3"):
    from georecall.cli import main

    path = str(tmp_path / "m.npz")
    assert main(["train", "--N", "32", "--R", "2", "--d", "8", "--steps", steps, "--out", path,
                 "--quiet"]) in (0, 1)
    return path


@pytest.mark.parametrize("command", [["probe"], ["transfer", "--steps", "2"]])
def test_the_reproducer_with_two_extra_entity_rows_exits_2(command, tmp_path, capsys):
    from georecall.cli import main
    from georecall.constructions.storage import load_model, save_model

    model, header = load_model(_trained_file(tmp_path))
    E = np.asarray(model.entity_embedding)
    wider = model.replace(entity_embedding=np.vstack([E, E[:2]]))
    path = save_model(wider, str(tmp_path / "wider.npz"),
                      extra_arrays={"task_table": np.asarray(header["extra_arrays"]["task_table"])})
    capsys.readouterr()
    code = main(command[:1] + [path] + command[1:])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "entity table has 34 rows (E: 34 × 8) but the task has N = 32" in err


def test_a_random_models_probe_report_says_it_answers_about_1_over_n(tmp_path, capsys):
    import json

    from georecall.cli import main

    path = _trained_file(tmp_path, steps="1")
    capsys.readouterr()
    assert main(["probe", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["accuracy"]["queries"] == 64 and doc["accuracy"]["accuracy"] < 0.2  # chance 1/32
    assert doc["warnings"] and "of its 64 facts" in doc["warnings"][0]
    assert main(["probe", path]) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[0].startswith("the model answers") and "of its 64 facts" in text[0]
    assert text[1].startswith("WARNING: the model answers")
    assert "ridge, p = 16" in "\n".join(text)  # the fit's p, n and strength are printed
    # the summary's mean is not the relation lines' numbers (those fit again): the text says so
    assert any("(mean; the lines below fit again, with folds of their own)" in line for line in text)


@pytest.mark.slow  # long (CONTRIBUTING, CI times); a shorter case of the behaviour stays in the default run
def test_the_forward_probe_meets_the_threshold_at_d_256_where_ols_would_fail(monkeypatch):
    """The study's (N, R, d) = (1024, 4, 256): a model whose embeddings are an exact superposition of its
    attribute vectors (spanning d_G1 = 54 directions, +1% bulk) plus 2% other variance. The probe's forward
    R² meets 0.95; the same probe with plain least squares (the issue-12 estimator) does not."""
    from georecall.experiments import ridge

    rng = np.random.default_rng(0)
    N, R, d = 1024, 4, 256
    task = random_task(N, R, 0)
    basis = np.linalg.qr(rng.standard_normal((d, d)))[0][:54]
    U = rng.standard_normal((N, 54)) @ basis + 0.01 * rng.standard_normal((N, d))
    signal = U[task.table.T].reshape(N, -1) @ (rng.standard_normal((R * d, d)) / np.sqrt(R * d))
    noise = rng.standard_normal(signal.shape)
    noise *= np.sqrt(0.02 / 0.98 * np.sum(signal.var(0)) / np.sum(noise.var(0)))
    model = Model(signal + noise, rng.standard_normal((R, d)), U)
    assert probes_mechanism.attribute_fits(model, task, rng=0)["forward_r2"] >= 0.95
    real = ridge.fit_ridge_cv_many
    monkeypatch.setattr(probes_mechanism, "fit_ridge_cv_many",
                        lambda X, Ys, *, rng, alphas=None, folds=5: real(X, Ys, rng=rng, alphas=(0.0,)))
    assert probes_mechanism.attribute_fits(model, task, rng=0)["forward_r2"] < 0.95


# ----------------------------------------------------------------------------- power and "cannot tell"

from georecall.experiments import power  # noqa: E402


def _shape(rng, n=120, R=2, C=30, q=12):
    """Labels covering every candidate several times (held-out answers are seen), low-dimensional vectors."""
    labels = [rng.permutation(np.arange(n) % C) for _ in range(R)]
    vectors = [rng.standard_normal((C, q)) for _ in range(R)]
    return labels, vectors, np.ones((n, R), dtype=bool)


def test_planted_mechanism_is_detected_and_its_shuffled_control_is_not():
    rng = np.random.default_rng(0)
    labels, vectors, present = _shape(rng)
    groups = [probes_folds(120, 5, rng)] * 2
    result = power.decode_power(labels, vectors, present, 40, groups, rng=rng, snrs=(0.01, 10.0), draws=5,
                                negative_snr=10.0)
    for entry in result:
        assert entry["positive"][1] >= 0.9  # planted at SNR 10: found
        assert entry["negative"][1] <= 0.2  # the same states, labels shuffled: not found
        assert entry["positive"][0] <= 0.2  # planted at SNR 0.01: drowned
        assert entry["negative"][0] is None  # the negative control ran at the SNR asked only


def probes_folds(n, k, rng):
    from georecall.lm.probes import folds_of
    return folds_of(n, k, rng)


def test_decode_vectors_counts_seen_and_unseen_answers_like_a_naive_loop():
    rng = np.random.default_rng(1)
    n, C = 40, 25
    labels = rng.integers(0, C, n)
    V = rng.standard_normal((C, 6))
    H = V[labels] @ rng.standard_normal((6, 10)) + 0.01 * rng.standard_normal((n, 10))
    groups = probes_folds(n, 4, rng)
    res = power.decode_vectors(H, labels, V, groups, rng=rng)
    unseen = sum(int(labels[i] not in set(labels[np.setdiff1d(np.arange(n), g)])) for g in groups for i in g)
    assert res["unseen"] == unseen and res["n"] == n
    ok = res["correct"]
    seen_mask = np.concatenate([np.isin(labels[g], labels[np.setdiff1d(np.arange(n), g)]) for g in groups])
    assert res["accuracy_seen"] == pytest.approx(ok[seen_mask].mean())
    # a linear code of 6 dimensions, 30 fit rows: unseen answers are reachable
    assert res["accuracy_unseen"] is not None and res["accuracy_unseen"] > 0.9


def test_verdict_word_each_guard():
    pw = {"snrs": [1.0], "positive": [0.95], "negative": [0.0], "draws": 10}
    assert power.verdict_word(True, pw, unseen=0, n=10)[0] == "decodable"
    assert power.verdict_word(False, pw, unseen=0, n=10)[0] == "not decodable"
    weak = dict(pw, positive=[0.8])  # broken: the control is not detected often enough
    word, why = power.verdict_word(False, weak, unseen=7, n=10)
    assert word == "cannot tell" and "0.80" in why and "7 of 10 held-out answers" in why


def test_ids_only_with_every_held_out_answer_unseen_cannot_tell():
    rng = np.random.default_rng(2)
    n = 40
    labels = [rng.permutation(n)]  # a bijection: every held-out answer is unseen
    onehot = [np.eye(n)]
    H = np.eye(n)[labels[0]] @ rng.standard_normal((n, 30))  # the answer is perfectly linear in the state
    groups = [[np.arange(30, 40)]]
    pw = power.decode_power(labels, onehot, np.ones((n, 1), dtype=bool), 30, groups, rng=rng, snrs=(1.0,),
                            draws=3)
    assert pw[0]["positive"] == [0.0]  # a decoder onto ids cannot reach an id it never fitted
    res = power.decode_vectors(H, labels[0], onehot[0], groups[0], rng=rng)
    assert res["unseen"] == 10 and res["accuracy"] == 0.0
    assert power.verdict_word(power.detected(res), pw[0], unseen=10, n=10)[0] == "cannot tell"


def test_planted_states_have_the_stated_strength():
    rng = np.random.default_rng(3)
    labels, vectors, present = _shape(rng, n=600, R=1)
    clean = power.planted_states(labels, vectors, present, 50, 1e12, rng)
    assert np.mean(np.sum(clean ** 2, axis=1)) == pytest.approx(1.0, rel=1e-6)
    noisy = power.planted_states(labels, vectors, present, 50, 0.25, np.random.default_rng(4))
    assert np.mean(np.sum(noisy ** 2, axis=1)) == pytest.approx(5.0, rel=0.1)  # 1 + 1/0.25


@pytest.fixture(scope="module")
def g1_vectors():
    task = random_task(64, 3, 0)
    model = build_g1(task, "binary").model
    E = np.asarray(model.entity_embedding[: task.N], dtype=np.float64)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    return E, U, task


def test_probe_hidden_decodes_g1_into_its_unembedding_rows(g1_vectors):
    E, U, task = g1_vectors
    res = probes_hidden.linear_relational_encoding(E, task.table.T, rng=0, attribute_vectors=U)
    for entry in res["per_relation"]:
        assert entry["probe_accuracy"] >= 0.9 and entry["verdict"] == "decodable"
        assert entry["unseen"] == entry["held_out"] == 16  # a bijection: every held-out answer is unseen
    noise = np.random.default_rng(1).standard_normal(E.shape)
    null = probes_hidden.linear_relational_encoding(noise, task.table.T, rng=0, attribute_vectors=U)
    assert all(entry["probe_accuracy"] < 0.2 and entry["verdict"] != "decodable"
               for entry in null["per_relation"])


def test_probe_hidden_with_ids_only_says_cannot_tell_and_why(g1_vectors):
    E, _, task = g1_vectors
    res = probes_hidden.linear_relational_encoding(E, task.table.T, rng=0)
    for entry in res["per_relation"]:
        assert entry["verdict"] == "cannot tell"
        assert "16 of 16 held-out answers" in entry["reason"] and "ids only" in entry["reason"]


def test_probe_hidden_command_with_attribute_vectors(g1_vectors, tmp_path, capsys):
    import json

    from georecall.cli import main
    E, U, task = g1_vectors
    np.savez(tmp_path / "g1.npz", states=E, attributes=task.table.T, attribute_vectors=U)
    assert main(["probe-hidden", str(tmp_path / "g1.npz"), "--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and doc["decoder"] == "attribute vectors"
    assert min(p["probe_accuracy"] for p in doc["per_relation"]) >= 0.9
    np.savez(tmp_path / "ids.npz", states=E, attributes=task.table.T)
    assert main(["probe-hidden", str(tmp_path / "ids.npz")]) == 0
    assert capsys.readouterr().out.count("cannot tell") == 3


def test_probe_hidden_text_states_the_folds_its_fits_used(tmp_path, capsys):
    """The text says the cross-validation the fits recorded (the JSON's ``folds``), not a fixed 5: three
    states leave two fit rows, hence fewer folds; the control, 64 states, five."""
    import json

    from georecall.cli import main
    rng = np.random.default_rng(0)
    for rows in (3, 64):
        np.savez(tmp_path / "h.npz", states=rng.normal(size=(rows, 24)),
                 attributes=rng.integers(0, 4, size=(rows, 2)))
        assert main(["probe-hidden", str(tmp_path / "h.npz"), "--json"]) == 0
        folds = {entry["fit"]["folds"] for entry in json.loads(capsys.readouterr().out)["per_relation"]}
        assert len(folds) == 1
        assert main(["probe-hidden", str(tmp_path / "h.npz")]) == 0
        assert f"({folds.pop()}-fold CV on the fit rows)" in capsys.readouterr().out


@pytest.mark.parametrize("vectors, message", [
    (np.zeros((10, 4)), "only 10 rows"),
    (np.zeros(64), "2-D float"),
    (np.full((64, 4), np.nan), "non-finite"),
    (np.zeros((64, 4), dtype=np.int64), "2-D float"),
])
def test_probe_hidden_refuses_broken_attribute_vectors(g1_vectors, tmp_path, vectors, message):
    from georecall.errors import InputError
    E, _, task = g1_vectors
    path = tmp_path / "bad.npz"
    np.savez(path, states=E, attributes=task.table.T, attribute_vectors=vectors)
    with pytest.raises(InputError, match=message):
        probes_hidden.load_hidden_states(str(path))


def test_toy_probe_reports_power_and_refuses_a_negative_without_it(g1_case):
    model, task = g1_case
    readout = probes.superposition_readout(model, task, rng=0, power_draws=5)
    for entry in readout["per_relation"]:
        assert entry["verdict"] == "decodable" and entry["unseen"] == entry["held_out"]
        assert entry["power"]["snrs"] == [power.NAMED_SNR]
    untrained = init_model(task.N, task.R, model.d, 16, rng=0)
    null = probes.superposition_readout(untrained, task, rng=0, power_draws=5)
    for entry in null["per_relation"]:
        assert entry["verdict"] in ("not decodable", "cannot tell")
        rate = entry["power"]["positive"][0]
        assert (entry["verdict"] == "not decodable") == (rate >= power.POWER_REQUIRED)
