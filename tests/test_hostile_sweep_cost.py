"""Damaged records cannot fool the budget: ``sweep threshold --search predicted --budget-hours`` refuses on a
results file with one damaged trial record (``steps_run`` NaN, negative, a string, past its budget; ``d`` or
``R`` = 2^62; ``seconds`` NaN or negative) exactly as it refuses on the clean file, the damaged line skipped
and said; an estimate handed damaged records directly skips them, and never prices work that trains at zero.
No trial ever runs here (``run_trial`` is replaced by a function that fails the test)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from georecall.cli import main
from georecall.experiments import sweep as sweep_module
from georecall.experiments.sweep_cost import cost_line, estimate_cost, step_seconds, timed
from georecall.experiments.sweep_trial import SEED_CONTRACT, TrialSettings
from georecall.theory import __version__

SETTINGS = TrialSettings(steps=200)
BASE = {**asdict(SETTINGS), "N": 64, "seed": 0, "seed_contract": SEED_CONTRACT, "version": __version__,
        "mode": "learned"}


def _model(R, d):
    return R * (0.01 + 0.001 * d)


def _records() -> list[dict]:
    """Five timed trials on the step model R·(0.01 + 0.001·d) and two thresholds: R = 16 predicted at
    N = 64, each trial there ≈ 0.08 h, far over 0.01 h."""
    records = []
    for R, d, ok, steps_run in ((2, 8, False, 200), (2, 10, True, 50), (4, 20, True, 150),
                                (4, 16, False, 200), (2, 12, True, 100)):
        records.append({**BASE, "kind": "trial", "R": R, "d": d, "reached": ok, "steps_run": steps_run,
                        "seconds": steps_run * _model(R, d), "seed": len(records)})
    for R, d_star in ((2, 10), (4, 20)):
        records.append({**BASE, "kind": "threshold", "R": R, "d_star": d_star, "monotone": True,
                        "trials": [d_star]})
    return records


DAMAGE = {"steps_run NaN": ("steps_run", float("nan")), "steps_run negative": ("steps_run", -5),
          "steps_run a string": ("steps_run", "x"), "steps_run past its budget": ("steps_run", 10**9),
          "d = 2^62": ("d", 2**62), "R = 2^62": ("R", 2**62), "seconds NaN": ("seconds", float("nan")),
          "seconds negative": ("seconds", -1.0)}


def _write(path, records) -> None:
    # allow_nan: the damage includes a NaN, written as Python's json writes it (the reader must survive it)
    path.write_text("".join(json.dumps(r, allow_nan=True) + "\n" for r in records))


@pytest.fixture
def no_training(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a trial started under a budget the estimate should have refused")

    monkeypatch.setattr(sweep_module, "run_trial", refuse)


def _budget_run(path, capsys, *extra):
    code = main(["sweep", "threshold", "--N", "64", "--R", "16", "--modes", "learned", "--seeds", "0",
                 "--steps", "200", "--search", "predicted", "--budget-hours", "0.01", "--out", str(path),
                 *extra])
    return code, *capsys.readouterr()


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_record_does_not_let_the_budget_start_work(damage, tmp_path, capsys, no_training):
    clean = tmp_path / "clean.jsonl"
    _write(clean, _records())
    code, _, err = _budget_run(clean, capsys, "--quiet")
    assert code == 2 and err.strip().splitlines()[-1].startswith("georecall: error: the estimated cost")
    refusal = err.strip().splitlines()[-1]

    damaged = tmp_path / "damaged.jsonl"
    records = _records()
    field, value = DAMAGE[damage]
    records[0][field] = value
    _write(damaged, records)
    before = damaged.read_bytes()
    code, out, err = _budget_run(damaged, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and lines[-1] == refusal.replace(str(clean), str(damaged)), err
    assert any("skipped 1 alien line" in line for line in lines), err  # skipped, and said
    assert damaged.read_bytes() == before
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))  # (the lock file stays)
    assert left == ["clean.jsonl", "damaged.jsonl"]

    code, out, err = _budget_run(damaged, capsys, "--json")
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert code == 2 and doc["status"] == 2 and "exceeds the budget" in doc["error"]
    assert err.strip().splitlines() == [doc["error"]]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_the_estimate_itself_skips_damaged_timings(damage):
    """Records handed to the estimate directly (not through the reader): the damaged one is skipped and
    counted; the estimate equals the clean file's without that record. Control: the clean records pass."""
    assert all(timed(r) for r in _records() if r["kind"] == "trial")
    records = _records()
    field, value = DAMAGE[damage]
    records[0][field] = value
    assert not timed(records[0])
    est = estimate_cost(records, [(64, 16, "learned", 0)], SETTINGS, search="predicted", d_min=4, d_max=256,
                        resolution=2)
    without = estimate_cost(_records()[1:], [(64, 16, "learned", 0)], SETTINGS, search="predicted", d_min=4,
                            d_max=256, resolution=2)
    assert est["hours"] == pytest.approx(without["hours"]) and est["hours"] > 0.01
    assert est["skipped_timings"] == 1 and "damaged timing" in cost_line(est)


def test_work_that_trains_is_never_priced_at_zero(tmp_path):
    """A step measurement of zero (or NaN) seconds: the configuration has no estimate (counted as unknown, so
    --budget-hours refuses), never an estimate of 0 h. Control: a positive measurement gives one."""
    records = [r for r in _records() if r["kind"] == "threshold"]
    for measured in (0.0, float("nan"), -1.0):
        est = estimate_cost(records, [(64, 16, "learned", 0)], SETTINGS, search="predicted", d_min=4,
                            d_max=256, resolution=2, seconds=lambda N, R, d, s=measured: s)
        assert est["unknown"] == [(64, 16, "learned", 0)] and est["per_config"] == []
    est = estimate_cost(records, [(64, 16, "learned", 0)], SETTINGS, search="predicted", d_min=4, d_max=256,
                        resolution=2, seconds=lambda N, R, d: 1.0)
    assert est["unknown"] == [] and est["hours"] > 0
    assert step_seconds(_records(), 64, SETTINGS)(16, 80) == pytest.approx(_model(16, 80))
