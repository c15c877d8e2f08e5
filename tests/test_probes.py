"""Probes: exact on G1 (R² = 1, interventions and transfer 100%), and able to fail on an untrained model."""

import numpy as np
import pytest

from georecall.constructions.single_hop import build_g1
from georecall.theory.tasks import random_task
from georecall.verify import probes
from georecall.verify.train import init_model


@pytest.fixture(scope="module")
def g1_case():
    task = random_task(256, 3, 7)
    return build_g1(task, "binary").model, task


@pytest.mark.parametrize("codes", ["binary", "sign"])
def test_every_probe_is_exact_on_g1(codes):
    task = random_task(256, 3, 1)
    model = build_g1(task, codes, D=None if codes == "binary" else 24, rng=0).model
    result = probes.probe_all(model, task, rng=0, transfer_steps=5)
    readout = result["readout"]
    assert readout["encoding_r2"] == pytest.approx(1.0, abs=1e-9) and not readout["underdetermined"]
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


def test_readout_flags_an_underdetermined_fit():
    task = random_task(64, 4, 0)
    model = init_model(64, 4, 32, 8, rng=0)
    assert probes.superposition_readout(model, task, rng=0)["underdetermined"]


def test_model_task_mismatch_is_refused(g1_case):
    model, _ = g1_case
    with pytest.raises(ValueError, match="does not fit the task"):
        probes.probe_all(model, random_task(256, 2, 0))


# ----------------------------------------------------------------------------------- hidden states of LMs


def planted_states(rng, n=600, R=3, attributes=12, width=40, noise=0.05):
    labels = rng.integers(0, attributes, size=(n, R))
    vectors = rng.standard_normal((R, attributes, width))
    states = sum(vectors[r][labels[:, r]] for r in range(R)) + noise * rng.standard_normal((n, width))
    return states, labels


def test_linear_relational_encoding_finds_a_planted_structure():
    rng = np.random.default_rng(0)
    states, labels = planted_states(rng)
    result = probes.linear_relational_encoding(states, labels, rng=1)
    assert result["probe_accuracy_mean"] > 0.95 and result["superposition_r2"] > 0.95
    noise = rng.standard_normal(states.shape)
    null = probes.linear_relational_encoding(noise, labels, rng=1)
    assert null["probe_accuracy_mean"] < 0.3 and null["superposition_r2"] < 0.2


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"states": np.zeros((4, 3))}, "missing \\['attributes'\\]"),
        ({"states": np.zeros(4), "attributes": np.zeros((4, 1), int)}, "2-D float array"),
        ({"states": np.zeros((4, 3)), "attributes": np.zeros((4, 1))}, "integer array"),
        ({"states": np.zeros((4, 3)), "attributes": np.zeros((5, 1), int)}, "4 rows but 'attributes' has 5"),
        ({"states": np.full((4, 3), np.nan), "attributes": np.zeros((4, 1), int)}, "non-finite"),
        ({"states": np.zeros((4, 3)), "attributes": -np.ones((4, 1), int)}, "non-negative"),
    ],
)
def test_hidden_state_files_are_validated(tmp_path, arrays, message):
    path = tmp_path / "states.npz"
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=message):
        probes.load_hidden_states(str(path))


def test_pickled_hidden_states_are_refused(tmp_path):
    path = tmp_path / "states.npz"
    np.savez(path, states=np.array([{"a": 1}], dtype=object), attributes=np.zeros((1, 1), int))
    with pytest.raises(ValueError, match="without pickled objects"):
        probes.load_hidden_states(str(path))
