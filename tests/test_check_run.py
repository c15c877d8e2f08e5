"""``verify/checking/run.py``, the one home of "check a model": one memory guard per check, whoever
calls it."""

from __future__ import annotations

import pytest

from georecall import memory
from georecall.errors import InputError
from georecall.memory import Budget
from georecall.verify.checking import run
from georecall.verify.cli import main


@pytest.fixture
def estimates(monkeypatch):
    """Every call of :func:`georecall.memory.check_estimate` during the test, by its ``what``."""
    calls: list[str] = []
    real = memory.check_estimate

    def counted(*args, **kwargs):
        calls.append(kwargs.get("what", "check"))
        return real(*args, **kwargs)

    monkeypatch.setattr(memory, "check_estimate", counted)
    return calls


@pytest.mark.parametrize("argv", [
    ["check", "single-hop", "--N", "16", "--R", "2", "--json"],
    ["check", "multi-hop", "--N", "16", "--R", "2", "--k", "2", "--json"],
    ["precision", "--construction", "G1", "--N", "16", "--R", "2", "--json"],
])
def test_a_command_estimates_its_check_once(argv, estimates, capsys):
    assert main(argv) == 0
    capsys.readouterr()
    assert len(estimates) == 1, estimates


def test_run_check_estimates_once_unless_given_the_estimate(estimates):
    assert run.run_check("G1", 16, 2).passed and len(estimates) == 1
    given = run.check_estimate(run.registry.get("G1"), 16, 2, 1, None, what="mine")
    estimates.clear()
    assert run.run_check("G1", 16, 2, estimate=given).passed and estimates == []


def test_the_guard_refuses_over_the_budget_before_building():
    with pytest.raises(InputError, match="memory"):
        run.run_check("G1", 4096, 16, budget=Budget(2**30 // 100))
    with pytest.raises(InputError, match="memory"):
        run.precision_scan("G1", 4096, 16, budget=Budget(2**30 // 100))


def test_codes_left_to_the_builder_are_not_named_binary(monkeypatch):
    """``codes=None`` reaches the estimate as its own default, never as a kind chosen here."""
    seen = []
    monkeypatch.setattr(memory, "check_estimate", lambda *a, **k: seen.append(k) or memory.Estimate("x"))
    run.check_estimate(run.registry.get("G1"), 16, 2, 1, None, D=4)
    run.check_estimate(run.registry.get("G1"), 16, 2, 1, "sign", D=4)
    assert "codes" not in seen[0] and seen[1]["codes"] == "sign"
