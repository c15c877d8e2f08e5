"""The N-axis model comparison (docs/science/n_axis_protocol.md) on synthetic records with a known answer."""

import json
import math

import numpy as np
import pytest

from georecall.errors import InputError
from georecall.experiments import n_axis, sweep_models
from georecall.experiments.sweep_models import (
    PROTOCOL_SETTINGS,
    aic,
    budget_bound,
    compare_models,
    fit_log_model,
    fit_power_model,
    n_axis_points,
    verdict,
)

NS = (256, 512, 1024, 2048, 4096, 8192)
RS = (2, 4)
SEEDS = (0, 1, 2)


def _threshold(N, R, mode, seed, d_star, **extra):
    return {"kind": "threshold", "N": N, "R": R, "mode": mode, "seed": seed, "d_star": d_star,
            "monotone": True, "trials": [2], "version": "0.2.0", "seed_contract": 1,
            "d_min": 2, "d_max": 256, "resolution": 2, "search": "predicted", **PROTOCOL_SETTINGS, **extra}


def _grid(law, mode="learned", noise=0.01, seed=0):
    """Threshold records with d* = law(N, R)·exp(noise·z) (z standard normal, a fixed stream); real d*
    are integers, these are floats so that the law is exact up to the planted noise."""
    rng = np.random.default_rng(seed)
    return [_threshold(N, R, mode, s, float(law(N, R) * math.exp(noise * rng.standard_normal())))
            for N in NS for R in RS for s in SEEDS]


def _log_law(N, R):
    return 1.5 + 0.45 * R * math.log(N)


def _pow_law(N, R):
    return 0.8 * N**0.5 * R**0.9


def test_data_from_the_log_model_gives_log_n():
    result = compare_models(_grid(_log_law))["learned"]
    assert result["verdict"] == "log N"
    assert result["held_out"]["winner"] == "M_log" and result["held_out"]["n"] == 6
    assert result["delta_aic"] < -2
    fit = result["M_log"]
    assert fit["params"]["a"] == pytest.approx(1.5, abs=0.3)
    assert fit["params"]["c"] == pytest.approx(0.45, rel=0.05)
    assert fit["n"] == 36 and fit["converged"]


def test_data_from_a_power_model_gives_power_of_n():
    result = compare_models(_grid(_pow_law, mode="frozen"))["frozen"]
    assert result["verdict"] == "power of N"
    assert result["held_out"]["winner"] == "M_pow" and result["delta_aic"] > 2
    fit = result["M_pow"]
    assert fit["params"]["p"] == pytest.approx(0.5, abs=0.02)
    assert fit["params"]["q"] == pytest.approx(0.9, abs=0.05)
    # the standard error is the fit's: about noise / sqrt(sum of squared centred ln N)
    assert 0 < fit["stderr"]["p"] < 0.01


def test_modes_are_fitted_separately():
    records = _grid(_log_law, "learned") + _grid(_pow_law, "frozen", seed=1)
    result = compare_models(records)
    assert result["learned"]["verdict"] == "log N" and result["frozen"]["verdict"] == "power of N"
    report = n_axis.n_axis_report(records)
    assert report["claim_met"] is True
    # a broken claim: both modes logarithmic
    assert n_axis.n_axis_report(_grid(_log_law, "learned") + _grid(_log_law, "frozen"))["claim_met"] is False


def test_held_out_fit_uses_only_n_up_to_2_to_the_12():
    records = _grid(_log_law)
    planted = [dict(r, d_star=r["d_star"] * 1.7) if r["N"] == 8192 else r for r in records]
    before = compare_models(records)["learned"]["held_out"]
    after = compare_models(planted)["learned"]["held_out"]
    assert after["fit"] == before["fit"]  # the fit never saw N = 2^13
    assert after["fit_n"] == before["fit_n"] == 30
    assert after["rmse_log"] != pytest.approx(before["rmse_log"])  # the score did
    assert after["rmse_log"] == pytest.approx(math.log(1.7), abs=0.05)
    # the held-out fit equals a fit on the N <= 2^12 records alone
    alone = fit_log_model([r for r in records if r["N"] <= 4096])
    assert before["fit"]["M_log"] == pytest.approx(alone["params"])
    # and a planted change of a fitted octave changes the fit
    moved = [dict(r, d_star=r["d_star"] * 1.7) if r["N"] == 4096 else r for r in records]
    moved_fit = compare_models(moved)["learned"]["held_out"]["fit"]["M_log"]
    assert moved_fit != pytest.approx(before["fit"]["M_log"])


def test_no_held_out_octave_cannot_tell():
    records = [r for r in _grid(_log_law) if r["N"] < 8192]
    result = compare_models(records)["learned"]
    assert result["held_out"]["rmse_log"] is None and "8192" in result["held_out"]["reason"]
    assert result["verdict"] == "cannot tell"


def test_a_partly_run_held_out_octave_decides_nothing():
    """The protocol scores the whole octave: with only R = 2's three seeds at 2^13 the scores are shown but
    the verdict is "cannot tell"; the complete octave decides (the control)."""
    full = _grid(_log_law)
    partial = [r for r in full if r["N"] < 8192 or r["R"] == 2]
    held = compare_models(partial)["learned"]
    assert held["held_out"]["n"] == 3 and held["held_out"]["rmse_log"] is not None
    assert not held["held_out"]["complete"] and "(4, 0)" in held["held_out"]["incomplete"]
    assert held["verdict"] == "cannot tell"
    control = compare_models(full)["learned"]
    assert control["held_out"]["complete"] and control["verdict"] == "log N"


def test_aic_by_hand():
    assert aic(0.5, 10, 2) == pytest.approx(10 * math.log(0.05) + 4)
    assert aic(0.0, 10, 3) == -math.inf
    with pytest.raises(InputError):
        aic(-1.0, 10, 2)
    with pytest.raises(InputError):
        aic(1.0, 0, 2)
    records = _grid(_pow_law, noise=0.05)
    fit = fit_power_model(records)
    # by hand: ordinary least squares of ln d* on (1, ln N, ln R), residuals, n ln(RSS/n) + 2·3
    X = np.array([[1.0, math.log(r["N"]), math.log(r["R"])] for r in records])
    y = np.log([r["d_star"] for r in records])
    beta = np.linalg.solve(X.T @ X, X.T @ y)
    rss = float(np.sum((y - X @ beta) ** 2))
    assert fit["rss"] == pytest.approx(rss, rel=1e-9)
    assert fit["aic"] == pytest.approx(36 * math.log(rss / 36) + 6, rel=1e-9)
    log_fit = fit_log_model(records)
    x = np.array([r["R"] * math.log(r["N"]) for r in records])
    pred = log_fit["params"]["a"] + log_fit["params"]["c"] * x
    rss_log = float(np.sum((np.log(pred) - y) ** 2))
    assert log_fit["aic"] == pytest.approx(36 * math.log(rss_log / 36) + 4, rel=1e-9)


def test_log_fit_improves_on_its_linear_start():
    records = _grid(_log_law, noise=0.08)
    fit = fit_log_model(records)
    y = np.log([r["d_star"] for r in records])
    x = np.array([r["R"] * math.log(r["N"]) for r in records])

    def rss(a, c):
        return float(np.sum((np.log(a + c * x) - y) ** 2))

    assert fit["rss"] <= rss(fit["start"]["a"], fit["start"]["c"]) + 1e-12
    assert fit["rss"] == pytest.approx(rss(fit["params"]["a"], fit["params"]["c"]))
    assert fit["stderr"]["c"] is not None and fit["stderr"]["c"] > 0


def test_verdict_rule():
    assert verdict(0.01, 0.02, 0.0) == "log N"
    assert verdict(0.01, 0.02, 3.0) == "cannot tell"  # held-out says log, AIC says power
    assert verdict(0.02, 0.01, 0.0) == "power of N"
    assert verdict(0.02, 0.01, -3.0) == "cannot tell"
    assert verdict(0.02, 0.02, 0.0) == "cannot tell"  # a tie
    assert verdict(None, 0.01, 5.0) == "cannot tell"


def test_fits_refuse_too_little_data():
    one_R = [r for r in _grid(_pow_law) if r["R"] == 2]
    with pytest.raises(InputError, match="two values of R"):
        fit_power_model(one_R)
    one_N = [r for r in _grid(_pow_law) if r["N"] == 256]
    with pytest.raises(InputError, match="two values of N"):
        fit_log_model(one_N)
    assert "error" in compare_models(one_R)["learned"]["M_pow"]


def test_points_one_per_search_with_the_protocol_settings():
    a = _threshold(256, 2, "learned", 0, 6, d_min=4, search="doubling")
    b = _threshold(256, 2, "learned", 0, 8)
    other = _threshold(256, 2, "learned", 1, 6, steps=1000)
    unreached = _threshold(512, 2, "learned", 0, None)
    chosen = n_axis_points([a, {"kind": "trial"}, b, other, unreached])
    assert chosen["points"] == [b] and chosen["superseded"] == 1
    assert chosen["other_settings"] == 1 and chosen["unreached"] == [unreached]


def _trial(N, R, mode, seed, d, steps_run, steps=500, reached=True):
    return {"kind": "trial", "N": N, "R": R, "mode": mode, "seed": seed, "d": d, "reached": reached,
            "steps_run": steps_run, "version": "0.2.0", "seed_contract": 1,
            **dict(PROTOCOL_SETTINGS, steps=steps)}


def test_budget_bound_detection():
    searches = [_threshold(256, 2, "learned", s, 8, last_failure=6) for s in range(4)]
    trials = [_trial(256, 2, "learned", 0, 8, 450),  # exactly 90 %: bound
              _trial(256, 2, "learned", 1, 8, 449),  # just under: not bound
              _trial(256, 2, "learned", 2, 6, 500, reached=False),  # only the failing width: unknown
              _trial(256, 2, "learned", 0, 8, 700, steps=1000),  # reruns at twice the steps
              _trial(256, 2, "learned", 0, 6, 1000, steps=1000, reached=False),
              _trial(256, 2, "learned", 0, 4, 1000, steps=1000, reached=False)]  # another width: not a rerun
    result = {b["seed"]: b for b in budget_bound(trials + searches, searches)}
    assert result[0]["bound"] is True and result[0]["steps_run"] == 450
    assert [(t["d"], t["reached"]) for t in result[0]["reruns"]] == [(6, False), (8, True)]
    assert result[1]["bound"] is False and result[1]["reruns"] == []
    assert result[2]["bound"] is None and result[3]["bound"] is None
    # a trial of another seed's search is not the deciding trial
    assert budget_bound([_trial(256, 2, "learned", 1, 8, 480)], searches[:1])[0]["bound"] is None
    assert sweep_models.BUDGET_FRACTION == 0.9


def test_seed_spread_and_ratios():
    records = [_threshold(256, 2, "learned", s, d) for s, d in ((0, 6), (1, 4), (2, 6))]
    records += [_threshold(256, 2, "frozen", s, d) for s, d in ((0, 12), (1, 8))]
    spread = {(r["mode"], r["N"]): r for r in sweep_models.seed_spread(records)}
    assert spread[("learned", 256)]["min"] == 4 and spread[("learned", 256)]["max"] == 6
    (ratio,) = sweep_models.frozen_over_learned(records)
    assert ratio["ratios"] == {0: 2.0, 1: 2.0} and ratio["median"] == 2.0


def _write(path, records):
    """The records as a results file; d* ×10 and rounded to an integer, as the reader requires (the
    rounding is below 1 % at these widths, so the planted answer stays the same)."""
    path.write_text("".join(json.dumps(dict(r, d_star=round(10 * r["d_star"]))) + "\n" for r in records))


def test_main_json_is_one_strict_document(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the figure needs the optional plot extra")
    source = tmp_path / "t.jsonl"
    _write(source, _grid(_log_law, "learned") + _grid(_pow_law, "frozen", seed=1))
    assert n_axis.main(["--from", str(source), "--out", str(tmp_path / "fig"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["comparison"]["learned"]["verdict"] == "log N" and doc["claim_met"] is True
    assert (tmp_path / "fig" / "n_axis.png").stat().st_size > 0
    assert n_axis.main(["--from", str(source), "--out", str(tmp_path / "fig")]) == 0
    out = capsys.readouterr().out
    assert "verdict: log N" in out and "verdict: power of N" in out


def test_main_exact_fit_json_has_no_infinity(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the figure needs the optional plot extra")
    source = tmp_path / "t.jsonl"
    records = [_threshold(N, R, "learned", 0, 3 * R * round(math.log2(N))) for N in NS for R in RS]
    _write(source, records)  # d* = 30·R·log2 N: M_log fits exactly, AIC = -inf, written as null
    assert n_axis.main(["--from", str(source), "--out", str(tmp_path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["comparison"]["learned"]["M_log"]["rss"] == pytest.approx(0, abs=1e-20)


def test_main_bad_input_exits_2(tmp_path, capsys):
    assert n_axis.main(["--from", str(tmp_path), "--out", str(tmp_path)]) == 2  # a directory
    assert capsys.readouterr().err.count("\n") == 1
    empty = tmp_path / "e.jsonl"
    empty.write_text("")
    assert n_axis.main(["--from", str(empty), "--out", str(tmp_path)]) == 2
    assert "no threshold record" in capsys.readouterr().err
