"""The components-vs-key probe (issue 41): calibrated on G1 (components), A1 (a key per subject) and planted
mixtures of the two readings."""

import math

import numpy as np
import pytest

from georecall.errors import InputError
from georecall.experiments import probes, probes_components
from georecall.experiments.probes_components import (
    components_or_key,
    mixture_power,
    planted_mixture,
    read_moves,
    reading,
    wilson,
)
from georecall.theory.tasks import task_for_seed


@pytest.fixture(scope="module")
def setting():
    task = task_for_seed(64, 4, 0)
    return task, probes.reference_models(task)


def test_g1_reads_as_components(setting):
    task, models = setting
    result = components_or_key(models["G1"], task, seed=0, subjects=None)
    assert result["reading"] == "components"
    assert result["component_share"] == 1.0 and result["follows"] == 1.0 and result["others_kept"] == 1.0
    assert result["rebuilt_accuracy"] == 1.0 and result["scale_median"] == 1.0
    assert result["moved"] == result["interventions"] == 16 * 4  # 25 % of 64 subjects, every relation


def test_a1_reads_as_a_key(setting):
    task, models = setting
    result = components_or_key(models["A1"], task, seed=0, subjects=None)
    assert result["reading"] == "key"
    assert result["component_share"] <= 0.1 and result["moved"] >= probes_components.MIN_MOVED
    lo, hi = result["component_interval"]
    assert lo <= result["component_share"] <= hi


def test_planted_mixtures_read_as_planted(setting):
    task, models = setting
    g1 = models["G1"]
    assert planted_mixture(g1, task, 0.0)["reading"] == "components"
    assert planted_mixture(g1, task, 1.0)["reading"] == "key"
    half = planted_mixture(g1, task, 0.5, draw=3)
    assert half["reading"] == "mixed"
    planted = 1 - half["key_moves"] / half["interventions"]
    assert half["component_share"] == pytest.approx(planted)  # on G1 every replaced move is a key move
    lo, hi = half["component_interval"]
    assert lo <= planted <= hi
    power = mixture_power(g1, task, draws=3)
    assert {q: v["power"] for q, v in power.items()} == {"0": 1.0, "0.5": 1.0, "1": 1.0}
    assert all(v["coverage"] == 1.0 for v in power.values())


def test_a_probe_that_moves_nothing_cannot_tell(setting):
    task, models = setting
    S = np.arange(30)
    Rr = np.zeros(30, dtype=int)
    outcome = read_moves(models["G1"], task, S, Rr, np.zeros((30, models["G1"].d)))
    assert not outcome["moved"].any()
    summary = probes_components.summarize_moves(outcome, Rr, task.table[0, S])
    assert summary["reading"] == "cannot tell" and summary["component_share"] is None


def test_reading_and_interval_rules():
    assert reading(0.95, 100) == "components" and reading(0.05, 100) == "key"
    assert reading(0.5, 100) == "mixed" and reading(1.0, 5) == "cannot tell"
    assert reading(None, 0) == "cannot tell"
    lo, hi = wilson(5, 10)
    # by hand: centre (0.5 + z²/20)/(1 + z²/10) = 0.5, half-width z·sqrt(0.025 + z²/400)/(1 + z²/10)
    z = 1.96
    half = z * math.sqrt(0.025 + z * z / 400) / (1 + z * z / 10)
    assert (lo, hi) == pytest.approx((0.5 - half, 0.5 + half))
    assert wilson(0, 0) is None and wilson(10, 10)[1] == 1.0


def test_bad_arguments_are_refused(setting):
    task, models = setting
    with pytest.raises(InputError):
        planted_mixture(models["G1"], task, 1.5)
    with pytest.raises(InputError):
        components_or_key(models["G1"], task, holdout=0.0)
    with pytest.raises(InputError):
        read_moves(models["G1"], task, np.arange(2), np.zeros(2, dtype=int), np.zeros((2, models["G1"].d)),
                   reach=-1.0)
    with pytest.raises(InputError):
        read_moves(models["G1"], task, np.arange(2), np.zeros(3, dtype=int), np.zeros((2, models["G1"].d)))
