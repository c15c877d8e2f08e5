"""Sweeps in one process: keys, de-duplication, damaged lines, guards, the lock, progress, interruption.

Process-level faults (SIGKILL and Ctrl-C of the driver, concurrent sweeps, killed workers, Dask) are in
tests/test_distributed.py.
"""

import io
import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from georecall.errors import InputError
from georecall.experiments.sweep import ProgressInfo, _StderrProgress, sweep
from georecall.experiments.sweep_cost import cost_line, estimate_cost, step_seconds
from georecall.experiments.sweep_fit import fit_thresholds, predict_threshold, summary_table
from georecall.experiments.sweep_records import (
    THRESHOLD_KEY,
    TRIAL_KEY,
    read_sweep,
    threshold_key,
    trial_key,
)
from georecall.experiments.sweep_search import PredictedSearch, ThresholdSearch
from georecall.experiments.sweep_trial import SEED_CONTRACT, TrialSettings, run_trial
from georecall.results_files import FileLock, LockTimeout
from georecall.theory import __version__
from georecall.theory.seeds import rng
from georecall.theory.tasks import task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import train, training_data

SETTINGS = TrialSettings(steps=200)
GRID = {"Ns": [32], "Rs": [2], "modes": ("learned",), "seeds": (0,)}


def _strip(records):
    return sorted(json.dumps({k: v for k, v in r.items() if k not in ("seconds", "blas")}, sort_keys=True)
                  for r in records)


def _lines(path):
    with open(path) as handle:
        return [line for line in handle.read().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------- the search

def test_the_search_finds_the_smallest_successful_width_within_the_resolution():
    for threshold in range(1, 200):
        for d_min, resolution in ((1, 1), (4, 2), (3, 5)):
            search = ThresholdSearch(d_min, 1024, resolution)
            while not search.done:
                search.feed(search.next_d >= threshold)
            successes = [d for d, ok in search.visited.items() if ok]
            assert min(successes) >= threshold
            assert min(successes) - max(threshold - 1, search.lo or 0) <= max(resolution, d_min)
            assert search.hi == min(successes)


def test_a_search_gives_up_above_d_max():
    search = ThresholdSearch(4, 20, 2)
    while not search.done:
        search.feed(False)
    assert sorted(search.visited) == [4, 8, 16]
    with pytest.raises(RuntimeError, match="over"):
        search.feed(True)


# ----------------------------------------------------------------------------------------- seed contract

def test_a_trial_trains_on_task_for_seed_from_the_init_stream():
    record = run_trial(16, 2, "frozen", 3, 6, SETTINGS)
    tokens, answers, _, _ = training_data(task_for_seed(16, 2, 3), 1, False)
    model = init_model(16, 2, 6, 24, rng=rng(3, "init", 1, 6), dtype=np.float32)
    result = train(model, tokens, answers, steps=200, frozen=("entity_embedding", "relation_embedding"),
                   rng=rng(3, "batches", 1, 6))
    assert record["reached"] == result.reached and record["steps_run"] == result.steps
    assert record["final_loss"] == round(float(result.losses[-1]), 6)
    assert record["seed_contract"] == SEED_CONTRACT


# ------------------------------------------------------------------------------------------------- keys

def test_every_setting_and_the_search_range_are_part_of_the_keys():
    assert set(asdict(SETTINGS)) <= set(TRIAL_KEY) and set(asdict(SETTINGS)) <= set(THRESHOLD_KEY)
    assert {"N", "R", "mode", "seed", "d", "seed_contract", "version"} <= set(TRIAL_KEY)
    assert {"d_min", "d_max", "resolution"} <= set(THRESHOLD_KEY)
    base = {name: 1 for name in (*TRIAL_KEY, *THRESHOLD_KEY)}
    for name in TRIAL_KEY:
        assert trial_key({**base, name: 2}) != trial_key(base), name
    for name in THRESHOLD_KEY:
        assert threshold_key({**base, name: 2}) != threshold_key(base), name


def test_resume_does_not_reuse_a_search_with_another_range(tmp_path):
    """Issue 11 item 4: d* = None from --d-max 2 was reused where a fresh file finds a threshold."""
    path = str(tmp_path / "r.jsonl")
    narrow = sweep(path, **GRID, settings=SETTINGS, d_min=2, d_max=2, progress=False)
    assert narrow[0]["d_star"] is None
    wide = sweep(path, **GRID, settings=SETTINGS, d_min=2, d_max=64, progress=False)
    fresh = sweep(str(tmp_path / "fresh.jsonl"), **GRID, settings=SETTINGS, d_min=2, d_max=64, progress=False)
    assert wide[0]["d_star"] is not None and _strip(wide) == _strip(fresh)
    assert len(read_sweep(path).records) == len(read_sweep(str(tmp_path / "fresh.jsonl")).records) + 1


def _planted(settings, d, reached, **extra):
    return {"kind": "trial", "N": 32, "R": 2, "mode": "learned", "seed": 0, "d": d, "m": 4 * d,
            "reached": reached, "steps_run": 1, "final_loss": 0.0, "final_batch_accuracy": 1.0,
            "seconds": 0.0, **asdict(settings),
            "seed_contract": SEED_CONTRACT, "version": run_trial.__globals__["__version__"], **extra}


@pytest.mark.parametrize("change", [None, {"lr": 0.02}, {"steps": 201}, {"width_factor": 3},
                                    {"seed_contract": None}, {"version": "0.0.1"}])
def test_a_trial_is_reused_only_with_an_equal_key(tmp_path, change):
    """A planted 'reached at d = 4' (true or not) is used when its key matches, and ignored otherwise."""
    path = tmp_path / "r.jsonl"
    record = _planted(SETTINGS, 4, True)
    record.update(change or {})
    path.write_text(json.dumps(record) + "\n")
    result = sweep(str(path), **GRID, settings=SETTINGS, d_min=4, d_max=4, progress=False)
    trials = [r for r in read_sweep(str(path)).records if r["kind"] == "trial"]
    if change is None:
        assert result[0]["d_star"] == 4 and len(trials) == 1  # reused, nothing run
    else:
        assert len(trials) == 2  # ran its own trial at d = 4


# ------------------------------------------------------------------------------------- reading the file

def test_reading_skips_and_counts_torn_alien_and_duplicate_lines(tmp_path):
    path = tmp_path / "r.jsonl"
    trial = _planted(SETTINGS, 4, True)
    threshold = {**{k: v for k, v in trial.items() if k not in ("d", "m", "reached")}, "kind": "threshold",
                 "d_star": 4, "last_failure": None, "trials": [4], "monotone": True, "d_min": 4, "d_max": 4,
                 "resolution": 2}
    lines = [json.dumps(trial), json.dumps({**trial, "seconds": 9.0}),  # duplicate (timing differs)
             json.dumps(threshold), json.dumps(threshold),  # duplicate
             '{"kind": "trial", "N": 3',  # torn
             "[1, 2]", "null", "17", '{"no": "kind"}',  # alien: not records
             json.dumps({k: v for k, v in trial.items() if k != "reached"}),  # alien: a field missing
             json.dumps({**trial, "N": True}),  # alien: a boolean size
             json.dumps({"kind": "transfer", "label": "x", "closed_form_accuracy": 0.5,
                         "fitted_accuracy": 1.0}),  # another kind of record: kept
             json.dumps({"kind": "transfer", "label": "x"}),  # alien: the figures read its accuracies
             json.dumps({**trial, "lr": [1]}),  # alien: a list where a number is read (and hashed)
             json.dumps({**threshold, "trials": "yes"}),  # alien: trials not a list of widths
             json.dumps({"kind": "other", "anything": [1]}),  # a kind nobody reads: kept
             ""]
    path.write_bytes("\n".join(lines).encode() + b"\n\xff\xfe not UTF-8\n")  # the second torn line
    contents = read_sweep(str(path))
    assert (contents.torn, contents.alien, contents.duplicates) == (2, 9, 2)
    assert [r["kind"] for r in contents.records] == ["trial", "threshold", "transfer", "other"]
    assert "2 torn, 9 alien, 2 duplicate" in contents.problems()
    messages = []
    records = sweep(str(path), **GRID, settings=SETTINGS, d_min=4, d_max=4, progress=False,
                    log=messages.append)
    assert len(records) == 1 and any("2 torn, 9 alien, 2 duplicate" in m for m in messages)


def test_duplicates_do_not_reach_summaries_or_fits(tmp_path):
    """Issue 11 item 3: a file holding every record twice summarizes like the file holding them once."""
    once, twice = tmp_path / "once.jsonl", tmp_path / "twice.jsonl"
    records = sweep(str(once), [32], [2], seeds=(0, 1), settings=SETTINGS, progress=False)
    twice.write_text(once.read_text() * 2)
    again = sweep(str(twice), [32], [2], seeds=(0, 1), settings=SETTINGS, progress=False)
    assert _strip(again) == _strip(records) and len(again) == 4
    assert summary_table(again) == summary_table(records)
    # (learned at N = 32 reaches 100 % at d_min = 4: both its searches are censored at the floor, not fitted)
    fits = fit_thresholds(again)
    assert fits == fit_thresholds(records) and fits["frozen"]["points"] == 2 and "learned" not in fits
    assert len(_lines(twice)) == 2 * len(_lines(once))  # reading never rewrites the file


def test_read_sweep_refuses_a_directory(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        read_sweep(str(tmp_path))


# ---------------------------------------------------------------------------------------------- guards

@pytest.mark.parametrize("kwargs, message", [
    ({"d_min": 16, "d_max": 4}, "d_min must be <= d_max"),
    ({"settings": replace(SETTINGS, lr=float("nan"))}, "lr must be a positive finite"),
    ({"settings": replace(SETTINGS, lr=0.0)}, "lr must be a positive finite"),
    ({"settings": replace(SETTINGS, lr=-1.0)}, "lr must be a positive finite"),
    ({"settings": replace(SETTINGS, attention="linear")}, "attention must be"),
    ({"settings": replace(SETTINGS, steps=0)}, "steps must be >= 1"),
    ({"Ns": []}, "Ns is empty"),
    ({"modes": ("learned", "tied")}, "mode must be one of"),
    ({"seeds": (-1,)}, "seed must be a non-negative"),
    ({"workers": 0}, "workers must be >= 1"),
    ({"scheduler": "nowhere"}, "use tcp://HOST:PORT"),
    ({"scheduler": "local:0"}, "local:W"),
    ({"scheduler": "local:2", "workers": 2}, "not both"),
])
def test_bad_arguments_are_one_line_errors_before_any_work(tmp_path, kwargs, message):
    path = tmp_path / "r.jsonl"
    args = {**GRID, "settings": SETTINGS, "progress": False, **kwargs}
    with pytest.raises(InputError, match=message) as info:  # the command line's exit 2
        sweep(str(path), **args)
    assert "\n" not in str(info.value)
    assert not path.exists()


@pytest.mark.parametrize("where", ["directory", "missing directory"])
def test_an_unusable_output_path_is_refused_before_any_trial(tmp_path, where):
    path = str(tmp_path) if where == "directory" else str(tmp_path / "no" / "r.jsonl")
    calls = []
    with pytest.raises(ValueError, match="results file"):
        sweep(path, **GRID, settings=SETTINGS, progress=calls.append)
    assert calls == []


# ------------------------------------------------------------------------------------------------ lock

def test_a_sweep_refuses_a_file_another_sweep_holds(tmp_path):
    path = str(tmp_path / "r.jsonl")
    messages = []
    with FileLock(path), pytest.raises(LockTimeout, match="locked by pid"):
        sweep(path, **GRID, settings=SETTINGS, progress=False, lock_timeout=0.2, log=messages.append)
    assert any("waiting" in m for m in messages)
    assert read_sweep(path).records == []
    assert sweep(path, **GRID, settings=SETTINGS, progress=False, lock_timeout=0)  # free again: runs


# -------------------------------------------------------------------------------------------- progress

def test_progress_callback_sees_every_trial_and_an_eta(tmp_path):
    seen: list[ProgressInfo] = []
    sweep(str(tmp_path / "r.jsonl"), [32], [2], seeds=(0, 1), settings=SETTINGS, progress=seen.append)
    trials = [s for s in seen if s.trials_done and "d=" in s.message]
    assert trials and all(s.eta is not None for s in trials)
    assert [s.trials_done for s in trials] == list(range(1, len(trials) + 1))
    last = seen[-1]
    assert last.configs_done == last.configs_total == 4 and last.trials_left == 0 and last.eta == 0.0


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


def test_progress_is_plain_lines_off_a_terminal_and_one_line_on_it():
    infos = [ProgressInfo(i, 3, i, 0, 3 - i, 65.0 * i, 130.0 if i < 3 else 0.0, f"step {i}")
             for i in (1, 2, 3)]
    plain, tty = _Stream(False), _Stream(True)
    for stream in (plain, tty):
        progress = _StderrProgress(stream)
        for info in infos:
            progress(info)
        progress.close()
    lines = plain.getvalue().splitlines()
    assert lines[0].startswith("sweep: 1/3 searches, 1 trials run") and "ETA 2:10" in lines[0]
    assert "\r" not in plain.getvalue() and lines[-1].startswith("sweep: 3/3")  # the last is always shown
    assert tty.getvalue().count("\r") == 3 and tty.getvalue().endswith("\n")
    assert "elapsed 3:15" in tty.getvalue()


# ---------------------------------------------------------------------------------------- interruption

def test_ctrl_c_leaves_a_consistent_file_that_resumes_to_the_same_records(tmp_path):
    path, full = str(tmp_path / "cut.jsonl"), str(tmp_path / "full.jsonl")

    def interrupt(info):
        if info.trials_done == 2:
            raise KeyboardInterrupt

    messages = []
    with pytest.raises(KeyboardInterrupt):
        sweep(path, [32], [2, 3], seeds=(0,), settings=SETTINGS, progress=interrupt, log=messages.append)
    assert any("interrupted" in m and "resume" in m for m in messages)
    contents = read_sweep(path)
    assert contents.torn == contents.alien == 0
    assert sum(r["kind"] == "trial" for r in contents.records) == 2
    with FileLock(path, timeout=0):  # released
        pass
    sweep(path, [32], [2, 3], seeds=(0,), settings=SETTINGS, progress=False)
    sweep(full, [32], [2, 3], seeds=(0,), settings=SETTINGS, progress=False)
    assert _strip(read_sweep(path).records) == _strip(read_sweep(full).records)


def test_a_trial_that_kills_its_worker_every_time_is_one_line_after_four_attempts(tmp_path, monkeypatch):
    """The pool-restart loop is bounded: a trial whose worker always dies (say OOM) ends the sweep."""
    from concurrent.futures import Executor, Future
    from concurrent.futures.process import BrokenProcessPool

    from georecall.experiments import executors
    from georecall.experiments import sweep as sweep_module

    class Doomed(Executor):
        def submit(self, fn, /, *args, **kwargs):
            future = Future()
            future.set_exception(BrokenProcessPool("a worker died"))
            return future

    handle = executors.ExecutorHandle("pool", Doomed(), "doomed", factory=Doomed)
    monkeypatch.setattr(sweep_module, "open_executor", lambda *args, **kwargs: handle)
    messages = []
    message = "died in each of 4 attempts at the trial N=32 R=2 learned seed 0 d=4"
    with pytest.raises(InputError, match=message):
        sweep(str(tmp_path / "r.jsonl"), **GRID, settings=SETTINGS, workers=2, progress=False,
              log=messages.append)
    assert handle.restarts == 3 and sum("worker process died" in m for m in messages) == 3


# ------------------------------------------------------------------- the predicted search and its cost

def _trials(search, threshold) -> tuple[int, int | None, int | None]:
    """Run a search against the monotone oracle ``d >= threshold``: (trials, smallest success, last
    failure)."""
    count = 0
    while not search.done:
        search.feed(search.next_d >= threshold)
        count += 1
    return count, search.hi, search.lo


def _plain_bisection_trials(threshold: int, d_min: int, d_max: int, resolution: int) -> int:
    """An independent plain bisection over [d_min, d_max] (d_max assumed to succeed), counted naively."""
    lo, hi, count = d_min - 1, d_max, 0
    while hi - lo > resolution:
        mid = (lo + hi) // 2
        count += 1
        if mid >= threshold:
            hi = mid
        else:
            lo = mid
    return count


@hypothesis_settings(max_examples=300, deadline=None)
@given(threshold=st.integers(5, 1024), offset=st.integers(-2, 2), resolution=st.sampled_from([1, 2, 4]))
def test_a_prediction_within_two_resolutions_takes_fewer_trials_than_plain_bisection(threshold, offset,
                                                                                     resolution):
    """Plain bisection over [4, 1024] needs at least 8 trials; from a prediction within 2·resolution of the
    threshold the predicted search needs at most 2 + 2·log2(3) < 6, and ends with the right bracket."""
    trials, hi, lo = _trials(PredictedSearch(threshold + offset * resolution, 4, 1024, resolution), threshold)
    assert hi is not None and hi >= threshold and (lo is None and hi == 4 or lo < threshold)
    assert lo is None or hi - lo <= resolution
    assert trials < _plain_bisection_trials(threshold, 4, 1024, resolution)


@hypothesis_settings(max_examples=300, deadline=None)
@given(threshold=st.integers(4, 1024), prediction=st.floats(-100, 2000),
       resolution=st.sampled_from([1, 2, 4]))
def test_the_predicted_search_costs_two_plus_twice_log_of_its_error(threshold, prediction, resolution):
    """From any prediction: the right bracket, in at most 2 + 2·⌈log2(1 + |error| / resolution)⌉ trials
    (galloping out to the threshold, then bisecting the last gallop step)."""
    trials, hi, lo = _trials(PredictedSearch(prediction, 4, 1024, resolution), threshold)
    assert hi is not None and hi >= threshold and (lo is None and hi == 4 or lo < threshold)
    assert lo is None or hi - lo <= resolution
    error = abs(resolution * round(prediction / resolution) - threshold)
    assert trials <= 2 + 2 * math.ceil(math.log2(1 + error / resolution))


def test_the_predicted_search_spends_fewer_trials_in_total_on_a_grid_of_thresholds():
    total = {"predicted": 0, "doubling": 0, "bisection": 0}
    for threshold in range(8, 300, 7):
        for error in (-0.2, -0.05, 0.0, 0.05, 0.2):
            total["predicted"] += _trials(PredictedSearch(threshold * (1 + error), 4, 1024, 2), threshold)[0]
        total["doubling"] += 5 * _trials(ThresholdSearch(4, 1024, 2), threshold)[0]
        total["bisection"] += 5 * _plain_bisection_trials(threshold, 4, 1024, 2)
    assert total["predicted"] < total["doubling"] / 1.5 and total["predicted"] < total["bisection"] / 1.5


def test_the_predicted_search_never_retries_a_known_width_and_starts_inside_the_known_bracket():
    search = PredictedSearch(10.0, 4, 1024, 2, known={16: False, 32: True, 8: False})
    assert search.next_d == 24  # the prediction lies outside the known bracket (16, 32): bisect it
    assert PredictedSearch(10.0, 4, 1024, 2, known={16: False}).next_d == 24  # gallop: p + 2·(lo − p) + r
    assert PredictedSearch(20.0, 4, 1024, 2, known={16: False, 32: True}).next_d == 20  # inside: tried
    tried = []
    while not search.done:
        tried.append(search.next_d)
        search.feed(search.next_d >= 23)
    assert all(16 < d < 32 for d in tried) and search.hi == 24 and search.lo == 22
    assert set(search.visited) == {8, 16, 32, *tried}
    assert PredictedSearch(40.0, 4, 1024, 2, known={30: False, 32: True}).done  # already bracketed
    with pytest.raises(InputError, match="finite"):
        PredictedSearch(float("nan"), 4, 1024, 2)


@hypothesis_settings(max_examples=200, deadline=None)
@given(threshold=st.integers(4, 300), prediction=st.floats(-20, 400), resolution=st.sampled_from([1, 2, 4]),
       cut=st.integers(0, 20))
def test_a_predicted_search_resumed_from_its_first_trials_takes_the_uninterrupted_path(threshold, prediction,
                                                                                      resolution, cut):
    """The next width depends on the outcomes, not on their order or on which run produced them."""
    search, path = PredictedSearch(prediction, 4, 256, resolution), []
    while not search.done:
        path.append(search.next_d)
        search.feed(search.next_d >= threshold)
    cut = min(cut, len(path))
    resumed = PredictedSearch(prediction, 4, 256, resolution, known={d: d >= threshold for d in path[:cut]})
    rest = []
    while not resumed.done:
        rest.append(resumed.next_d)
        resumed.feed(resumed.next_d >= threshold)
    assert path[:cut] + rest == path and resumed.hi == search.hi and resumed.lo == search.lo


def _seed_file(path):
    """A doubling search at R = 2 (so that R = 3 can be predicted), from d_min = 2: it fails there and reaches
    100 % at 4 (from the default d_min = 4 its d* would be censored at the floor, and predict nothing)."""
    sweep(path, [32], [2], modes=("learned",), seeds=(0,), settings=SETTINGS, progress=False, d_min=2)


def test_a_predicted_sweep_reuses_every_recorded_trial_and_a_rerun_trains_nothing(tmp_path, monkeypatch):
    from georecall.experiments import sweep as sweep_module

    path = str(tmp_path / "r.jsonl")
    _seed_file(path)
    first = sweep(path, [32], [2, 3], modes=("learned",), seeds=(0,), settings=SETTINGS, progress=False,
                  search="predicted")
    assert [r["search"] for r in first] == ["predicted", "predicted"] and first[0]["prediction"] is not None
    doubling = [r for r in read_sweep(path).records if r["kind"] == "threshold" and r["search"] == "doubling"]
    # R = 2 again: every trial the doubling search ran is reused, so the predicted search trains none
    assert first[0]["d_star"] == doubling[0]["d_star"]
    assert set(doubling[0]["trials"]) <= set(first[0]["trials"])
    trials_before = sum(r["kind"] == "trial" for r in read_sweep(path).records)

    def no_training(*args):
        raise AssertionError(f"retrained {args}")

    monkeypatch.setattr(sweep_module, "run_trial", no_training)
    seen = []
    again = sweep(path, [32], [2, 3], modes=("learned",), seeds=(0,), settings=SETTINGS, search="predicted",
                  progress=seen.append)
    assert _strip(again) == _strip(first) and not seen  # nothing left to do: no progress, no trial
    assert sum(r["kind"] == "trial" for r in read_sweep(path).records) == trials_before


def test_a_predicted_search_is_keyed_apart_from_a_doubling_one(tmp_path):
    path = str(tmp_path / "r.jsonl")
    _seed_file(path)
    (record,) = sweep(path, [32], [2], modes=("learned",), seeds=(0,), settings=SETTINGS, progress=False,
                      search="predicted")
    old = [r for r in read_sweep(path).records if r["kind"] == "threshold" and r["search"] == "doubling"]
    assert threshold_key(record) != threshold_key(old[0])
    legacy = {k: v for k, v in old[0].items() if k != "search"}  # records from before the field existed
    assert threshold_key(legacy) == threshold_key(old[0])


def test_a_predicted_sweep_without_records_to_predict_from_is_refused(tmp_path):
    path = str(tmp_path / "r.jsonl")
    with pytest.raises(InputError, match="doubling search first"):
        sweep(path, [32], [2], modes=("learned",), seeds=(0,), settings=SETTINGS, progress=False,
              search="predicted")
    assert not os.path.exists(path) or not _lines(path)


def test_the_cost_estimate_is_trials_times_measured_seconds_per_step_times_steps(tmp_path):
    """Hand-made records: seconds/step exactly R·(0.01 + 0.001·d), so the estimate is checked by hand."""
    base = {**asdict(SETTINGS), "N": 64, "seed": 0, "seed_contract": SEED_CONTRACT, "version": __version__,
            "mode": "learned"}
    records = []
    for R, d, ok in ((2, 8, False), (2, 10, True), (4, 16, False), (4, 20, True)):
        records.append({**base, "kind": "trial", "R": R, "d": d, "reached": ok, "steps_run": 100,
                        "seconds": 100 * R * (0.01 + 0.001 * d)})
    for R, d_star in ((2, 10), (4, 20)):
        records.append({**base, "kind": "threshold", "R": R, "d_star": d_star, "monotone": True})
    rate = step_seconds(records, 64, SETTINGS)
    assert rate(8, 40) == pytest.approx(8 * (0.01 + 0.04))
    x = [2 * math.log(64), 4 * math.log(64)]
    c = (x[0] * 10 + x[1] * 20) / (x[0] ** 2 + x[1] ** 2)  # least squares through the origin, by hand
    prediction = predict_threshold(records, 64, 8, "learned", SETTINGS)
    assert prediction["d"] == pytest.approx(c * 8 * math.log(64)) and prediction["basis"] == "same N"
    est = estimate_cost(records, [(64, 8, "learned", 0)], SETTINGS, search="predicted", d_min=4, d_max=256,
                        resolution=2)
    (row,) = est["per_config"]
    assert est["trials"] == len(row["worst_widths"]) and est["hours"] == pytest.approx(
        sum(8 * (0.01 + 0.001 * d) for d in row["worst_widths"]) * SETTINGS.steps / 3600)
    assert row["expected_widths"] == _simulated(prediction, prediction["d"])
    assert est["expected_trials"] <= est["trials"]
    # the worst case covers every integer threshold in the band
    lo, hi = prediction["band"]
    band = range(math.floor(lo), math.ceil(hi) + 1)
    assert all(len(_simulated(prediction, t)) <= est["trials"] for t in band)
    # known trials of the configuration are not counted again
    known = [*records, {**base, "kind": "trial", "R": 8, "d": row["expected_widths"][0], "reached": True,
                        "steps_run": 10, "seconds": 1.0}]
    again = estimate_cost(known, [(64, 8, "learned", 0)], SETTINGS, search="predicted", d_min=4, d_max=256,
                          resolution=2)
    assert row["expected_widths"][0] not in again["per_config"][0]["expected_widths"]


def test_the_cost_estimate_is_calibrated_on_the_recorded_trials_seconds(tmp_path):
    """Two trials at (R, d) = (4, 16) ran 1.5× and 0.5× the step model R·(0.01 + 0.001·d) (their mean is on
    it, so the least-squares model is unchanged): the worst case scales by the slowest ratio, 1.5; the
    expected cost by the median ratio, 1, with successes at the median share of the steps successes used."""
    base = {**asdict(SETTINGS), "N": 64, "seed": 0, "seed_contract": SEED_CONTRACT, "version": __version__,
            "mode": "learned"}
    model = lambda R, d: R * (0.01 + 0.001 * d)  # noqa: E731
    records = []
    rows = ((2, 8, False, 200, 1.0), (2, 10, True, 50, 1.0), (4, 20, True, 150, 1.0),
            (4, 16, False, 200, 1.5), (4, 16, False, 200, 0.5))
    for R, d, ok, steps_run, factor in rows:
        records.append({**base, "kind": "trial", "R": R, "d": d, "reached": ok, "steps_run": steps_run,
                        "seconds": factor * steps_run * model(R, d), "seed": len(records)})
    for R, d_star in ((2, 10), (4, 20)):
        records.append({**base, "kind": "threshold", "R": R, "d_star": d_star, "monotone": True})
    assert step_seconds(records, 64, SETTINGS)(8, 40) == pytest.approx(model(8, 40))
    est = estimate_cost(records, [(64, 8, "learned", 0)], SETTINGS, search="predicted", d_min=4, d_max=256,
                        resolution=2)
    (row,) = est["per_config"]
    assert row["calibration"] == pytest.approx({"slowest": 1.5, "median": 1.0, "trials": 5,
                                                "success_share": (50 / 200 + 150 / 200) / 2})
    full = SETTINGS.steps / 3600
    assert est["hours"] == pytest.approx(1.5 * sum(model(8, d) for d in row["worst_widths"]) * full)
    threshold = predict_threshold(records, 64, 8, "learned", SETTINGS)["d"]
    expected = sum(model(8, d) * (0.5 if d >= threshold else 1.0) for d in row["expected_widths"]) * full
    assert est["expected_hours"] == pytest.approx(expected)
    assert "× 1.50" in cost_line(est) and "calibrated on 5 recorded trials" in cost_line(est)
    # a file whose trials ran exactly on the model: no correction; an N without trials: uncalibrated
    exact = [r for r in records if r.get("seconds") is None or r["d"] != 16]
    assert estimate_cost(exact, [(64, 8, "learned", 0)], SETTINGS, search="predicted", d_min=4, d_max=256,
                         resolution=2)["per_config"][0]["calibration"]["slowest"] == pytest.approx(1.0)
    other = estimate_cost(records, [(128, 8, "learned", 0)], SETTINGS, search="predicted", d_min=4, d_max=256,
                          resolution=2, seconds=lambda N, R, d: 1.0)
    assert other["per_config"][0]["calibration"] is None and "uncalibrated" in cost_line(other)


def _simulated(prediction, threshold):
    search, widths = PredictedSearch(prediction["d"], 4, 256, 2), []
    while not search.done:
        widths.append(search.next_d)
        search.feed(search.next_d >= threshold)
    return widths


def test_a_run_over_its_budget_is_refused_in_one_line_before_any_trial(tmp_path, capsys):
    from georecall.cli import main

    path = str(tmp_path / "r.jsonl")
    _seed_file(path)
    # keep one trial at N = 32 (d = 4; the threshold record still says the search failed at d = 2)
    kept = [line for line in _lines(path) if json.loads(line).get("d") != 2]
    with open(path, "w") as handle:
        handle.write("\n".join(kept) + "\n")
    before = _lines(path)
    with pytest.raises(InputError, match=r"cannot estimate the cost"):  # one trial at N = 32: no step model
        sweep(path, [32], [4], modes=("learned",), seeds=(0,), settings=SETTINGS, progress=False,
              search="predicted", budget_hours=1e-9, log=lambda text: None)
    with pytest.raises(InputError, match=r"exceeds the budget of 1e-09 h"):
        sweep(path, [32], [4], modes=("learned",), seeds=(0,), settings=SETTINGS, progress=False,
              search="predicted", budget_hours=1e-9, step_seconds_fallback=lambda N, R, d: 1.0,
              log=lambda text: None)
    assert _lines(path) == before
    capsys.readouterr()
    code = main(["sweep", "threshold", "--N", "32", "--R", "4", "--modes", "learned", "--seeds", "0",
                 "--steps", "200", "--search", "predicted", "--budget-hours", "1e-9", "--quiet",
                 "--out", path])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "exceeds the budget" in err[0]
    assert _lines(path) == before
    # within budget it runs, and the estimate is in the document
    code = main(["sweep", "threshold", "--N", "32", "--R", "4", "--modes", "learned", "--seeds", "0",
                 "--steps", "200", "--search", "predicted", "--budget-hours", "100", "--json", "--out", path])
    out = capsys.readouterr()
    doc = json.loads(out.out)
    assert code == 0 and out.err == "" and doc["estimate"]["trials"] >= 1
    assert doc["thresholds"][0]["search"] == "predicted"


@pytest.mark.slow
@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="kills a subprocess")
def test_a_killed_predicted_sweep_loses_at_most_the_trial_in_progress(tmp_path):
    """SIGKILL of a sweep in this process's executor (one trial at a time): every line on disk is whole,
    every finished trial is kept and reused by the rerun, which ends with the uninterrupted run's records."""
    path, full = str(tmp_path / "cut.jsonl"), str(tmp_path / "full.jsonl")
    for p in (path, full):
        # from d_min = 2, so that the seed searches fail below their d* (a search never failing below its
        # floor is censored there and predicts nothing)
        sweep(p, [64], [2], modes=("learned", "frozen"), seeds=(0,), settings=SETTINGS, progress=False,
              d_min=2)
    grid = {"Ns": [64], "Rs": [3, 4], "modes": ["learned", "frozen"], "seeds": [0]}
    sweep(full, **grid, settings=SETTINGS, progress=False, search="predicted")
    start = len(_lines(path))
    script = tmp_path / "run.py"
    script.write_text("import json, sys\n"
                      "from georecall.experiments.sweep import sweep\n"
                      "from georecall.experiments.sweep_trial import TrialSettings\n"
                      "a = json.loads(sys.argv[1]); a['settings'] = TrialSettings(**a['settings'])\n"
                      "sweep(**a)\n")
    args = {"path": path, **grid, "settings": {"steps": SETTINGS.steps}, "progress": False,
            "search": "predicted"}
    process = subprocess.Popen([sys.executable, str(script), json.dumps(args)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300  # a hang guard only
        while len(_lines(path)) < start + 1 and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
        process.wait(60)
    finally:
        if process.poll() is None:
            process.kill()
    cut = read_sweep(path)
    assert cut.torn == 0 and cut.alien == 0
    finished = [r for r in cut.records if r["kind"] == "trial" and r["R"] in (3, 4)]
    assert finished, "killed before any trial finished"
    counts = []
    sweep(path, **grid, settings=SETTINGS, progress=counts.append, lock_timeout=0, search="predicted")
    wanted = [r for r in read_sweep(full).records if r["kind"] == "trial" and r["R"] in (3, 4)]
    assert counts[-1].trials_done == len(wanted) - len(finished)  # nothing finished was trained again
    assert len(_lines(path)) == len(read_sweep(path).records)  # and no line is a duplicate
    assert _strip(read_sweep(path).records) == _strip(read_sweep(full).records)


@pytest.mark.slow
def test_a_predicted_sweep_on_a_dask_cluster_gives_the_records_of_one_in_this_process(tmp_path):
    """Every search is predicted from the file as the sweep found it, so the executor (which runs the
    searches in its own order, all at once on Dask) does not change the records."""
    pytest.importorskip("distributed", reason="needs the distributed extra")
    inline, dask = str(tmp_path / "inline.jsonl"), str(tmp_path / "dask.jsonl")
    grid = {"Ns": [64], "Rs": [3, 4], "modes": ["learned", "frozen"], "seeds": [0]}
    for path, where in ((inline, {}), (dask, {"scheduler": "local:2"})):
        sweep(path, [64], [2], modes=("learned", "frozen"), seeds=(0,), settings=SETTINGS, progress=False,
              d_min=2)  # fails below its d* (as _seed_file)
        sweep(path, **grid, settings=SETTINGS, progress=False, search="predicted", log=lambda text: None,
              **where)
    assert _strip(read_sweep(dask).records) == _strip(read_sweep(inline).records)


# ------------------------------------------------------------------------------------------- arithmetic

def test_every_trial_records_its_blas_and_a_threshold_lists_the_blas_of_its_trials(tmp_path, monkeypatch):
    """A search that mixes arithmetics says so: a planted trial from another BLAS (and one from before the
    field) is reused, and the threshold record names all of them; without a plant it names one."""
    import georecall.experiments.sweep_trial as trial_module

    monkeypatch.setattr(trial_module, "blas_description", lambda: "FakeBLAS 1.0 Kernel, 1 thread")
    clean = sweep(str(tmp_path / "clean.jsonl"), **GRID, settings=SETTINGS, d_min=2, d_max=64, progress=False)
    trials = [r for r in read_sweep(str(tmp_path / "clean.jsonl")).records if r["kind"] == "trial"]
    assert trials and all(r["blas"] == "FakeBLAS 1.0 Kernel, 1 thread" for r in trials)
    assert clean[0]["blas"] == ["FakeBLAS 1.0 Kernel, 1 thread"]
    path = tmp_path / "mixed.jsonl"  # the doubling search visits 2 and 4 first: plant both, as failures
    path.write_text(json.dumps(_planted(SETTINGS, 2, False, blas="OtherBLAS 2.0 Kernel, 2 threads")) + "\n"
                    + json.dumps(_planted(SETTINGS, 4, False)) + "\n")
    mixed = sweep(str(path), **GRID, settings=SETTINGS, d_min=2, d_max=64, progress=False)
    assert mixed[0]["blas"] == ["FakeBLAS 1.0 Kernel, 1 thread", "OtherBLAS 2.0 Kernel, 2 threads",
                                "not recorded"]


def test_the_blas_description_names_numpys_openblas_and_its_threads_or_says_unknown():
    import scipy.sparse  # noqa: F401  (the trainer loads SciPy's OpenBLAS beside NumPy's)

    from georecall.experiments.blas import UNKNOWN, blas_description

    text = blas_description()
    assert text == UNKNOWN or ("OpenBLAS" in text and text.rstrip("s").endswith(" thread"))


def test_numpys_own_openblas_is_told_from_scipys():
    from georecall.experiments.blas import numpys_openblas

    site = "/x/site-packages"
    numpy_lib = f"{site}/numpy.libs/libscipy_openblas64_-1.so"
    scipy_lib = f"{site}/scipy.libs/libscipy_openblas-2.so"
    assert numpys_openblas([numpy_lib, scipy_lib], f"{site}/numpy") == numpy_lib
    assert numpys_openblas([scipy_lib, numpy_lib], f"{site}/numpy") == numpy_lib
    assert numpys_openblas(["/usr/lib/libopenblas.so.0"], f"{site}/numpy") == "/usr/lib/libopenblas.so.0"
    assert numpys_openblas(["/usr/lib/libopenblas.so.0", scipy_lib], f"{site}/numpy") is None  # cannot tell
    assert numpys_openblas([], f"{site}/numpy") is None


def test_a_record_with_a_blas_that_is_not_text_is_alien(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(_planted(SETTINGS, 4, True, blas=3)) + "\n"
                    + json.dumps(_planted(SETTINGS, 6, True, blas="OpenBLAS 0.3 Haswell, 1 thread")) + "\n")
    contents = read_sweep(str(path))
    assert [r["d"] for r in contents.records] == [6] and contents.alien == 1
