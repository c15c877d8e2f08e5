"""A threshold search censored at its floor: the smallest width tried reached 100 % with nothing tried below
it, so d* is only an upper bound. Its record says ``"censored": "floor"``, the summary prints ``d* ≤ …``,
and the fits, the prediction of a predicted search, the figures and the N-axis comparison leave it out and
count it.

Trials are planted (``run_trial`` replaced by a function of d), so the searches take no training.
"""

import json
from dataclasses import asdict

import pytest

from georecall.errors import InputError
from georecall.experiments import n_axis, sweep_search
from georecall.experiments import sweep as sweep_module
from georecall.experiments import threshold_figure as TF
from georecall.experiments.sweep import sweep
from georecall.experiments.sweep_fit import fit_thresholds, predict_threshold, summary_table
from georecall.experiments.sweep_knowledge import bits_per_parameter
from georecall.experiments.sweep_models import PROTOCOL_SETTINGS, n_axis_points
from georecall.experiments.sweep_records import is_floor_censored, read_sweep
from georecall.experiments.sweep_search import (
    FLOOR,
    SMALLEST_WIDTH,
    find_threshold,
    floor_censored,
    threshold_record,
)
from georecall.experiments.sweep_trial import SEED_CONTRACT, TrialSettings
from georecall.theory import __version__

SETTINGS = TrialSettings(steps=200)


def _planted(threshold: int):
    """A trial function that reaches 100 % exactly from width ``threshold`` up (no training)."""

    def trial(N, R, mode, seed, d, settings):
        return {"kind": "trial", "N": N, "R": R, "mode": mode, "seed": seed, "d": d,
                "m": settings.width_factor * d, "reached": d >= threshold, "steps_run": 10, "final_loss": 0.0,
                "final_batch_accuracy": 1.0, "seconds": 0.01, "train_path": "dense", "blas": "planted",
                **asdict(settings), "seed_contract": SEED_CONTRACT, "version": __version__}

    return trial


def _search(path, monkeypatch, threshold, d_min, **kwargs):
    monkeypatch.setattr(sweep_module, "run_trial", _planted(threshold))
    (record,) = sweep(str(path), [64], [2], modes=("learned",), seeds=(0,), settings=SETTINGS, progress=False,
                      d_min=d_min, **kwargs)
    return record


# ------------------------------------------------------------------------------------------- the record

def test_a_search_that_succeeds_at_its_floor_is_recorded_censored(tmp_path, monkeypatch):
    record = _search(tmp_path / "r.jsonl", monkeypatch, threshold=4, d_min=16)
    assert record["d_star"] == 16 and record["trials"] == [16] and record["last_failure"] is None
    assert record["censored"] == FLOOR and is_floor_censored(record)
    (on_disk,) = [r for r in read_sweep(str(tmp_path / "r.jsonl")).records if r["kind"] == "threshold"]
    assert on_disk["censored"] == "floor"  # read back: the key is a usable field, not an alien line


def test_a_search_that_fails_below_its_threshold_is_not_censored(tmp_path, monkeypatch):
    record = _search(tmp_path / "r.jsonl", monkeypatch, threshold=4, d_min=2)
    assert record["d_star"] == 4 and record["last_failure"] == 2
    assert "censored" not in record and not is_floor_censored(record)


def test_a_search_that_succeeds_at_the_smallest_allowed_width_measured_its_threshold(tmp_path, monkeypatch):
    assert SMALLEST_WIDTH == 1
    record = _search(tmp_path / "r.jsonl", monkeypatch, threshold=1, d_min=SMALLEST_WIDTH)
    assert record["d_star"] == 1 and record["trials"] == [1]
    assert "censored" not in record and not is_floor_censored(record)
    assert fit_thresholds([record])["learned"]["points"] == 1


def test_a_search_that_never_reaches_is_not_floor_censored(tmp_path, monkeypatch):
    record = _search(tmp_path / "r.jsonl", monkeypatch, threshold=10**6, d_min=16, d_max=64)
    assert record["d_star"] is None and "censored" not in record
    assert fit_thresholds([record]) == {}


@pytest.mark.parametrize("outcomes, censored", [
    ({16: True}, True),
    ({16: True, 32: True}, True),
    ({16: True, 32: False}, True),  # a failure above d* (non-monotone) does not bound it from below
    ({8: False, 16: True}, False),
    ({1: True}, False),  # nothing below the smallest allowed width
    ({1: True, 2: True}, False),
    ({16: False, 32: False}, False),  # censored at the ceiling instead (no d*)
    ({}, False),
])
def test_censored_at_the_floor_means_no_failure_below_the_smallest_success(outcomes, censored):
    assert floor_censored(outcomes) is censored
    record = threshold_record(64, 2, "learned", 0, SETTINGS, outcomes, None, 16, 1024, 2)
    assert is_floor_censored(record) is censored and ("censored" in record) is censored


def test_find_threshold_records_the_censoring_too(monkeypatch):
    monkeypatch.setattr(sweep_search, "run_trial", _planted(4))
    assert find_threshold(64, 2, "learned", 0, SETTINGS, d_min=16)["censored"] == FLOOR
    assert "censored" not in find_threshold(64, 2, "learned", 0, SETTINGS, d_min=2)


# ----------------------------------------------------------------------------- summaries, fits, prediction

def test_the_summary_says_censored_and_the_fit_leaves_it_out(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    censored = _search(path, monkeypatch, threshold=4, d_min=16)
    measured = _search(path, monkeypatch, threshold=4, d_min=2)
    text = summary_table([censored])
    assert "[≤16]" in text and "d* ≤ 16 (censored at --d-min)" in text
    assert text.splitlines()[1].split()[-2] == "—"  # no mean from an upper bound
    assert fit_thresholds([censored]) == {}
    fit = fit_thresholds([censored, measured])["learned"]
    assert fit["points"] == 1 and fit["censored"] == 1 and fit["unreached"] == 0
    assert fit == {**fit_thresholds([measured])["learned"], "censored": 1}
    assert bits_per_parameter([censored]) == [] and len(bits_per_parameter([censored, measured])) == 1


def test_the_prediction_of_a_predicted_search_leaves_censored_searches_out(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    censored = _search(path, monkeypatch, threshold=4, d_min=16)
    assert predict_threshold([censored], 64, 2, "learned", SETTINGS) is None
    with pytest.raises(InputError, match="1 censored at the floor"):
        _search(path, monkeypatch, threshold=4, d_min=16, search="predicted")
    measured = _search(path, monkeypatch, threshold=4, d_min=2)
    prediction = predict_threshold([censored, measured], 64, 2, "learned", SETTINGS)
    assert prediction["points"] == 1 and prediction["censored"] == 1
    assert prediction["d"] == pytest.approx(4.0)  # from the measured d* = 4, not the bound 16


def test_the_cli_prints_the_censored_threshold_and_the_count_left_out(tmp_path, monkeypatch, capsys):
    from georecall.cli import main

    monkeypatch.setattr(sweep_module, "run_trial", _planted(4))
    path = str(tmp_path / "r.jsonl")
    args = ["sweep", "threshold", "--N", "64", "--R", "2", "--modes", "learned", "--seeds", "0", "--steps",
            "200", "--quiet", "--out", path]
    assert main([*args, "--d-min", "2"]) == 0
    capsys.readouterr()
    assert main([*args, "--d-min", "16"]) == 0
    out = capsys.readouterr().out
    assert "d* ≤ 16 (censored at --d-min)" in out
    assert main([*args, "--d-min", "16", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["thresholds"][0]["censored"] == "floor" and doc["fits"] == {}


# ------------------------------------------------------------------------------------------ old records

def test_an_old_record_without_the_key_reads_as_before(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    new = _search(path, monkeypatch, threshold=4, d_min=16)
    old = {k: v for k, v in new.items() if k != "censored"}  # written before the key existed
    old_path = tmp_path / "old.jsonl"
    old_path.write_text(json.dumps(old) + "\n")
    (read,) = read_sweep(str(old_path)).records
    assert read == old and not is_floor_censored(read)
    assert summary_table([read]).splitlines()[1].split()[3] == "[16]"
    assert "censored" not in summary_table([read])
    fit = fit_thresholds([read])["learned"]
    assert fit["points"] == 1 and fit["censored"] == 0


def test_a_censored_key_of_another_value_makes_the_line_alien(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    new = _search(path, monkeypatch, threshold=4, d_min=16)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({**new, "censored": "sideways"}) + "\n")
    contents = read_sweep(str(bad))
    assert contents.records == [] and contents.alien == 1


# --------------------------------------------------------------------------------- figures and the N axis

def _threshold(N, R, mode, seed, d_star, **extra):
    return {"kind": "threshold", "N": N, "R": R, "mode": mode, "seed": seed, "d_star": d_star,
            "monotone": True, "trials": [2, d_star], "version": "0.2.0", "seed_contract": 1,
            "d_min": 2, "d_max": 256, "resolution": 2, "search": "doubling", **PROTOCOL_SETTINGS, **extra}


def test_the_n_axis_comparison_leaves_censored_searches_out_and_counts_them():
    measured = _threshold(256, 2, "learned", 0, 6)
    censored = _threshold(256, 2, "learned", 1, 16, trials=[16], d_min=16, censored="floor")
    chosen = n_axis_points([measured, censored])
    assert chosen["points"] == [measured] and chosen["censored"] == [censored]
    report = n_axis.n_axis_report([measured, censored])
    assert report["searches"]["fitted"] == 1 and report["searches"]["censored"] == 1
    assert "censored at the floor and left out 1" in n_axis.n_axis_table(report)
    assert "censored" not in n_axis.n_axis_table(n_axis.n_axis_report([measured]))


def test_the_capacity_grid_leaves_censored_searches_out_and_lists_them():
    measured = _threshold(4096, 2, "learned", 0, 8)
    censored = _threshold(4096, 2, "learned", 1, 16, trials=[16], d_min=16, censored="floor")
    rows = TF.grid_rows([measured, censored])
    assert rows[0]["learned"] == {0: 8}
    text = TF.grid_table([measured, censored])
    assert "left out: R = 2 learned seed 1: d* ≤ 16 (censored at the floor of its search, d_min = 16)" in text
    assert "1 searches" in text


def test_the_figures_leave_censored_searches_out_and_say_how_many():
    pytest.importorskip("matplotlib", reason="the figures need the optional plot extra")
    from georecall.experiments import plotting as P
    from georecall.experiments.figures import thresholds_figure

    measured = _threshold(4096, 2, "learned", 0, 8)
    censored = _threshold(4096, 2, "learned", 1, 16, trials=[16], d_min=16, censored="floor")
    assert thresholds_figure([censored]) is None and TF.capacity_grid_figure([censored]) is None
    for fig in (thresholds_figure([measured, censored]), TF.capacity_grid_figure([measured, censored])):
        ax = fig.axes[0]
        assert "1 search(es) censored at d_min left out" in ax.get_title()
        drawn = {float(y) for c in ax.collections for _, y in c.get_offsets()}
        assert 8 in drawn and 16 not in drawn
        assert P.text_overlaps(fig) == [] and P.small_texts(fig) == []
        P.import_pyplot().close(fig)
