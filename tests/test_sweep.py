"""Sweeps in one process: keys, de-duplication, damaged lines, guards, the lock, progress, interruption.

Process-level faults (SIGKILL and Ctrl-C of the driver, concurrent sweeps, killed workers, Dask) are in
tests/test_distributed.py.
"""

import io
import json
from dataclasses import asdict, replace

import numpy as np
import pytest

from georecall.errors import InputError
from georecall.io import FileLock, LockTimeout
from georecall.theory.seeds import rng
from georecall.theory.tasks import task_for_seed
from georecall.verify.experiments.sweep import (
    SEED_CONTRACT,
    THRESHOLD_KEY,
    TRIAL_KEY,
    ProgressInfo,
    ThresholdSearch,
    TrialSettings,
    _StderrProgress,
    fit_thresholds,
    read_sweep,
    run_trial,
    summary_table,
    sweep,
    threshold_key,
    trial_key,
)
from georecall.verify.training.train import init_model, train, training_data

SETTINGS = TrialSettings(steps=200)
GRID = {"Ns": [32], "Rs": [2], "modes": ("learned",), "seeds": (0,)}


def _strip(records):
    return sorted(json.dumps({k: v for k, v in r.items() if k != "seconds"}, sort_keys=True) for r in records)


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
    assert fit_thresholds(again)["learned"]["points"] == 2
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

    from georecall.verify.experiments import executors
    from georecall.verify.experiments import sweep as sweep_module

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
