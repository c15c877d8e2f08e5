"""``verify/checking/run.py``, the one home of "check a model": one memory guard per check, whoever
calls it."""

from __future__ import annotations

import pytest

from georecall import estimates, memory
from georecall.cli import main
from georecall.errors import InputError
from georecall.memory import Budget
from georecall.verify.checking import run


@pytest.fixture
def check_estimates(monkeypatch):
    """Every call of :func:`georecall.estimates.check_estimate` during the test, by its ``what``."""
    calls: list[str] = []
    real = estimates.check_estimate

    def counted(*args, **kwargs):
        calls.append(kwargs.get("what", "check"))
        return real(*args, **kwargs)

    monkeypatch.setattr(estimates, "check_estimate", counted)
    return calls


@pytest.mark.parametrize("argv", [
    ["check", "single-hop", "--N", "16", "--R", "2", "--json"],
    ["check", "multi-hop", "--N", "16", "--R", "2", "--k", "2", "--json"],
    ["precision", "--construction", "G1", "--N", "16", "--R", "2", "--json"],
])
def test_a_command_estimates_its_check_once(argv, check_estimates, capsys):
    assert main(argv) == 0
    capsys.readouterr()
    assert len(check_estimates) == 1, check_estimates


def test_run_check_estimates_once_unless_given_the_estimate(check_estimates):
    assert run.run_check("G1", 16, 2).passed and len(check_estimates) == 1
    given = run.check_estimate(run.registry.get("G1"), 16, 2, 1, None, what="mine")
    check_estimates.clear()
    assert run.run_check("G1", 16, 2, estimate=given).passed and check_estimates == []


def test_the_guard_refuses_over_the_budget_before_building():
    with pytest.raises(InputError, match="memory"):
        run.run_check("G1", 4096, 16, budget=Budget(2**30 // 100))
    with pytest.raises(InputError, match="memory"):
        run.precision_scan("G1", 4096, 16, budget=Budget(2**30 // 100))


def test_codes_left_to_the_builder_are_not_named_binary(monkeypatch):
    """``codes=None`` reaches the estimate as its own default, never as a kind chosen here."""
    seen = []
    monkeypatch.setattr(estimates, "check_estimate", lambda *a, **k: seen.append(k) or memory.Estimate("x"))
    run.check_estimate(run.registry.get("G1"), 16, 2, 1, None, D=4)
    run.check_estimate(run.registry.get("G1"), 16, 2, 1, "sign", D=4)
    assert "codes" not in seen[0] and seen[1]["codes"] == "sign"


@pytest.mark.parametrize("name, N, R, k", [("G1", 32, 3, 1), ("A1", 16, 2, 1), ("G2", 8, 2, 2),
                                          ("C1", 8, 2, 2)])
def test_the_logit_bound_bounds_every_logit_the_model_computes(name, N, R, k):
    """arithmetic.logit_bound (the magnitude float mode's allowance is relative to) against the logits of
    every query, computed by THE forward pass."""
    import numpy as np

    from georecall.constructions.arithmetic import logit_bound
    from georecall.constructions.forward import forward
    from georecall.constructions.registry import get
    from georecall.theory.tasks import task_for_seed
    from georecall.theory.tokens import queries

    task = task_for_seed(N, R, 0)
    model = get(name).builder(task, k).model
    tokens, _ = queries(task, k)
    logits = forward(model, tokens)
    assert 0 < float(np.abs(logits).max()) <= logit_bound(model)


def test_a_promise_cannot_widen_its_own_float_allowance():
    """Float mode compares a margin with its promise allowing rounding relative to the logits' magnitude from
    the stored weights. The broken input: an honest G1 (margin about 2/3) whose promise says 1000 and
    declares logit scale 1e20 (which used to make the allowance 2e7): it fails. Control: its own promise
    passes, and the declared scale changes nothing."""
    import dataclasses

    from georecall.constructions.registry import get
    from georecall.theory.tasks import task_for_seed
    from georecall.theory.tokens import queries
    from georecall.verify.checking.report import check_construction

    task = task_for_seed(64, 3, 0)
    built = get("G1").builder(task, 1)
    tokens, answers = queries(task, 1)
    honest = check_construction("G1", {}, built, tokens, answers)
    assert honest.passed and 0 < honest.result.min_margin < 1000
    inflated = dataclasses.replace(built, promise=dataclasses.replace(built.promise, margin=1000.0,
                                                                     logit_scale=1e20))
    assert not check_construction("G1", {}, inflated, tokens, answers).passed
    declared = dataclasses.replace(built, promise=dataclasses.replace(built.promise, logit_scale=1e20))
    assert check_construction("G1", {}, declared, tokens, answers).passed
