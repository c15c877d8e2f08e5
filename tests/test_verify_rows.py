"""Negative controls: every row of `georecall verify` fails on a deliberately broken input.

(The bounds and counting rows have theirs in tests/test_bounds_checks.py; the mechanism row at the study's
R = 4 in tests/test_study.py, at verify's R = 2 here.)"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from georecall.constructions import registry
from georecall.constructions.registry import ConstructionSpec
from georecall.verify.sections import suite


def _broken(spec: ConstructionSpec, how: str) -> ConstructionSpec:
    """The same construction with one thing broken after it is built."""
    def build(task, k=1, **options):
        built = spec.build(task, k, **options)
        if how == "promise d":  # a promise the built sizes do not meet
            promise = dataclasses.replace(built.promise, d=built.promise.d + 1)
            return dataclasses.replace(built, promise=promise)
        if how == "promise margin":  # a margin larger than any the weights give
            promise = dataclasses.replace(built.promise, margin=2 * built.promise.margin + 1)
            return dataclasses.replace(built, promise=promise)
        U = np.array(built.model.unembedding)
        U[[0, 1]] = U[[1, 0]]  # two answers' read-out rows swapped: their queries answer each other
        return dataclasses.replace(built, model=built.model.replace(unembedding=U))
    return dataclasses.replace(spec, id=spec.id + "-broken", name=spec.name + "-broken", build=build)


@pytest.mark.parametrize("spec_id", sorted(registry.BUILTIN_IDS))
@pytest.mark.parametrize("how", ["weights", "promise d", "promise margin"])
def test_every_construction_row_fails_when_broken(spec_id, how):
    spec = registry.get(spec_id)
    case = dict(spec.verify_cases[-1])
    case.update(N=min(case["N"], 64), R=min(case["R"], 3), k=min(case.get("k", 1), 2))
    case.pop("compare_integer", None)
    good = suite._case_report(spec, dict(case), 0, False)
    bad = suite._case_report(_broken(spec, how), dict(case), 0, False)
    assert all(r.passed for r in good) and not any(r.passed for r in bad)


def test_float_and_integer_disagreement_fails_the_g1_row(monkeypatch):
    """The G1 row that compares float and integer mode: a float run that predicts otherwise fails it."""
    real = suite.run_check

    def skewed(spec, N, R, k=1, **kwargs):
        report = real(spec, N, R, k, **kwargs)
        if not kwargs.get("options", {}).get("integer") and report.result.predictions is not None:
            report.result.predictions[0] += 1
        return report

    monkeypatch.setattr(suite, "run_check", skewed)
    reports = suite._case_report(registry.get("G1"), {"N": 64, "R": 3, "compare_integer": True}, 0, False)
    assert reports[0].passed and not reports[1].passed


@pytest.mark.parametrize("spec_id, integer", [("G1", True), ("G1", False), ("A1", True), ("C1", False)])
def test_a_dense_storage_that_computes_otherwise_fails_the_row(monkeypatch, spec_id, integer):
    """Every construction row also checks the model with its read-out stored densely: a dense storage whose
    read-out differs (two answers' rows swapped) fails the row, though the compact model itself is exact."""
    from georecall.constructions.model import Model

    real = Model.with_dense_readout

    def swapped(self):
        dense = real(self)
        U = np.array(dense.unembedding)
        U[[0, 1]] = U[[1, 0]]
        return dense.replace(unembedding=U)

    spec = registry.get(spec_id)
    case = {"N": 64, "R": 3, **({"k": 2} if spec.hops == "multi" else {})}
    case.update({"integer": True} if integer else {})
    assert suite._case_report(spec, dict(case), 0, False)[0].passed
    monkeypatch.setattr(Model, "with_dense_readout", swapped)
    (report,) = suite._case_report(spec, dict(case), 0, False)
    assert report.result.exact and not report.extra_checks["compact and dense read-out storage agree"]
    assert not report.passed


def test_a_wrong_gradient_fails_the_gradient_row(monkeypatch):
    from georecall.training import backward

    real = backward.loss_and_grads

    def off(*args, **kwargs):
        loss, grads, predictions = real(*args, **kwargs)
        return loss, {key: 1.01 * g for key, g in grads.items()}, predictions

    assert suite.gradient_row(0).passed
    monkeypatch.setattr(backward, "loss_and_grads", off)
    assert not suite.gradient_row(0).passed


def test_a_trainer_that_does_not_learn_fails_the_gd_row(monkeypatch):
    from georecall.training import train

    real = train.train
    monkeypatch.setattr(train, "train", lambda *a, **k: real(*a, **{**k, "steps": 1}))  # a budget of one step
    assert not suite.gd_row(0).passed


@pytest.mark.parametrize("frozen", [False, True])  # verify's row, and verify --full's
def test_a_threshold_above_g1_fails_the_threshold_row(frozen):
    report = suite.threshold_row(0, steps=1, frozen=frozen)  # one Adam step never reaches 100%: no d* at all
    assert not report.passed
    assert ("frozen" in report.extra) == frozen and "learned embeddings d* = none" in report.extra["detail"]


def test_the_mechanism_row_at_verify_size_fails_when_the_wider_control_is_broken(monkeypatch):
    """verify runs the mechanism row at R = 2 (suite.MECHANISM_R): its positive control can still fail there.
    (tests/test_study.py breaks it at the study's R = 4, verify --full's size, as a slow test.)"""
    from georecall.experiments import probes_mechanism

    real = probes_mechanism.embed_wider

    def broken(model, d, rng=None):  # relation embeddings that open every gate: no selectivity
        wide = real(model, d, rng)
        Q = np.asarray(wide.relation_embedding)
        return wide.replace(relation_embedding=np.tile(Q.sum(axis=0), (Q.shape[0], 1)))

    monkeypatch.setattr(probes_mechanism, "embed_wider", broken)
    (report,) = suite._section_mechanism(0, full=False)
    assert report.params["R"] == suite.MECHANISM_R and not report.passed
    failed = [name for name, ok in report.extra_checks.items() if not ok]
    assert failed == [name for name in report.extra_checks if "embedded" in name]


def test_an_imperfect_g1_fails_the_probe_row(monkeypatch):
    from georecall.experiments import probes

    real = probes.probe_all

    def noisy(model, task, **kwargs):
        if model.meta.get("construction") == "G1":  # a perturbed subject table: no exact superposition
            noise = np.random.default_rng(0).normal(0, 0.3, model.entity_embedding.shape)
            model = model.replace(entity_embedding=model.entity_embedding + noise)
        return real(model, task, **kwargs)

    monkeypatch.setattr(probes, "probe_all", noisy)
    assert not suite.section_probes(0)[0].passed


# ------------------------------------------------------------- the "certified for every task" rows (certify)


@pytest.mark.parametrize("spec_id, family, N", [("A2a", "_a2a_foreign_family", 16),
                                                ("A2b", "_a2b_leaky_family", 64)])
def test_a_broken_a2_family_fails_its_certified_row(spec_id, family, N):
    """A2(a) with a unit firing on a foreign query, A2(b) with a pair leaking onto other states: the row's
    CERTIFIED check fails (certify REFUTES them, with a witness the ordinary checker fails)."""
    from georecall.verify.checking import planted
    from georecall.verify.sections import certified

    base = registry.get(spec_id)
    broken = dataclasses.replace(base, id=f"{spec_id}-broken", name=f"{base.name}-broken", build=None,
                                 family=getattr(planted, family), verify_cases=({"N": N, "R": 2, "k": 2},))
    row = certified.certified_row(broken)
    assert not row.passed
    (name, passed), = row.extra_checks.items()
    assert "CERTIFIED for every task" in name and not passed
    case = row.extra["cases"][0]
    assert case["verdict"] == "REFUTED" and case["confirmation"]["check_passed"] is False


@pytest.mark.parametrize("spec_id", ["A2a", "A2b"])
def test_an_a2_row_whose_control_is_not_a_counterexample_fails(monkeypatch, spec_id):
    """The control replaced by the correct construction itself: certify does not REFUTE it, the row fails."""
    from georecall.verify.sections import certified

    _, N, R, k, options = certified.CONTROLS[spec_id]
    monkeypatch.setitem(certified.CONTROLS, spec_id, (registry.get(spec_id), N, R, k, options))
    row = certified.certified_row(dataclasses.replace(registry.get(spec_id),
                                                      verify_cases=({"N": 16, "R": 2, "k": 2},)))
    assert not row.passed and not row.extra_checks[f"control {spec_id}: certify REFUTES it"]
    assert row.extra_checks[f"control {spec_id}: its witness task fails check"] is False
