"""The one job driver (src/georecall/experiments/driver.py) of sweeps and studies.

The records a sweep and a study write through the driver are compared byte for byte (timing fields masked)
with records made without it: the trials and searches run by ``find_threshold`` in this process, the study's
jobs run one by one by ``run_job``, each written by ``append_jsonl``. Then the driver's own guards, each with
an executor that breaks on purpose: a worker that dies once, or on every attempt, a pool broken at
submission, tasks cancelled by a scheduler, a failing task, an early stop, the capacity.
"""

import re
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool

import pytest

from georecall.errors import InputError
from georecall.experiments import driver, study, study_design
from georecall.experiments import sweep as sweep_module
from georecall.experiments.executors import ExecutorHandle, InlineExecutor
from georecall.experiments.sweep import sweep
from georecall.experiments.sweep_search import find_threshold
from georecall.experiments.sweep_trial import TrialSettings
from georecall.io import append_jsonl

SETTINGS = TrialSettings(steps=200)
CONFIGS = [(32, R, mode, seed) for R in (2, 3) for mode in ("learned", "frozen") for seed in (0, 1)]
RANGE = {"d_min": 4, "d_max": 64, "resolution": 2}
TINY = study_design.Grid(
    "tiny", {**study_design.BASE, "N": 48, "R": 2, "d": 8, "steps": 60},
    (study_design.Regime("base", "tiny"),
     study_design.Regime("long", "tiny long", {"steps": 20, "stop": "none"}),
     study_design.Regime("tied", "tiny tied", {"readout": "tied"})),
    {**study_design.PROBE_SETTINGS, "subjects": 16, "transfer_steps": None, "encoder_steps": 5},
    controls={"G1": None, "A1": None})


def _masked_lines(path) -> list[str]:
    """The file's lines with every timing field (``"seconds": x``, at any depth) set to 0 and the BLAS
    description (``"blas"``: worker processes run one BLAS thread) removed."""
    with open(path) as handle:
        timed = [re.sub(r'"seconds": [-+0-9.eE]+', '"seconds": 0', line) for line in handle]
    return [re.sub(r'"blas": (\[[^]]*\]|"[^"]*"), ', "", line) for line in timed]


@pytest.fixture(scope="module")
def sweep_reference(tmp_path_factory):
    """The sweep's records without the driver: each search run by find_threshold, in the grid's order."""
    path = tmp_path_factory.mktemp("reference") / "sweep.jsonl"
    for config in CONFIGS:
        threshold = find_threshold(*config, SETTINGS, **RANGE, on_trial=lambda t: append_jsonl(str(path), t))
        append_jsonl(str(path), threshold)
    return _masked_lines(path)


@pytest.fixture(scope="module")
def study_reference(tmp_path_factory):
    """The study's records without the driver: every job run by run_job, in the grid's order."""
    path = tmp_path_factory.mktemp("reference") / "study.jsonl"
    for job in study.jobs_of(TINY, (0, 1)):
        append_jsonl(str(path), study.run_job(job))
    return _masked_lines(path)


def test_a_sweep_through_the_driver_writes_the_records_of_searches_run_without_it(tmp_path, sweep_reference):
    path = tmp_path / "sweep.jsonl"
    records = sweep(str(path), [32], [2, 3], seeds=(0, 1), settings=SETTINGS, **RANGE, progress=False)
    assert _masked_lines(path) == sweep_reference  # the same bytes, in the same order
    assert len(records) == len(CONFIGS) and len(sweep_reference) > 2 * len(CONFIGS)


def test_a_sweep_on_two_processes_writes_the_same_records(tmp_path, sweep_reference):
    path = tmp_path / "sweep.jsonl"
    sweep(str(path), [32], [2, 3], seeds=(0, 1), settings=SETTINGS, **RANGE, progress=False, workers=2)
    assert sorted(_masked_lines(path)) == sorted(sweep_reference)  # in the order they finished


def test_a_study_through_the_driver_writes_the_records_of_jobs_run_without_it(tmp_path, study_reference):
    path = tmp_path / "study.jsonl"
    records = study.run_study(str(path), TINY, seeds=(0, 1), progress=False)
    assert _masked_lines(path) == study_reference
    assert len(records) == len(study_reference) == 10


def test_a_study_on_two_processes_writes_the_same_records(tmp_path, study_reference):
    path = tmp_path / "study.jsonl"
    study.run_study(str(path), TINY, seeds=(0, 1), progress=False, workers=2)
    assert sorted(_masked_lines(path)) == sorted(study_reference)


def test_the_comparison_sees_a_changed_record(tmp_path, sweep_reference):
    """The masking touches timing fields only: a loss that differs in its last digit is another line."""
    path = tmp_path / "sweep.jsonl"
    sweep(str(path), [32], [2], modes=("learned",), seeds=(0,), settings=SETTINGS, **RANGE, progress=False)
    lines = _masked_lines(path)
    assert set(lines) <= set(sweep_reference)
    changed = re.sub(r'"final_loss": ([0-9.]+)', lambda m: f'"final_loss": {float(m[1]) + 1e-6:.6f}',
                     lines[0])
    assert changed != lines[0] and changed not in sweep_reference


# ------------------------------------------------------------------------------- the driver's guards


def _double(x: int) -> dict:
    return {"x": x, "y": 2 * x}


class _Doubles(driver.JobList):
    """A unit x submits one task; its record is kept in order; ``follow`` maps x to a follow-up unit."""

    noun = "double"

    def __init__(self, follow=None, stop_after=None):
        super().__init__()
        self.records, self.follow, self.stop_after = [], follow or {}, stop_after
        self.opened_with = None

    def opened(self, handle, units):
        self.opened_with = (handle.description, units)

    def start(self, unit):
        return [driver.Call(_double, (unit,), unit, f"the double of {unit}")]

    def accept(self, task, record):
        self.records.append(record)
        if self.stop_after is not None and self.tally.new >= self.stop_after:
            raise driver.Stop
        return self.start(self.follow[task.tag]) if task.tag in self.follow else []


class _Flaky(Executor):
    """Runs calls at once, except that the calls named in ``fail`` (by ``name(first argument)``) meet
    ``error`` on their first ``times`` submissions; ``at_submit``: ``submit`` itself raises it (a broken
    pool); ``pending``: nothing ever finishes."""

    def __init__(self, fail=(), error=None, times=1, *, at_submit=False, pending=False, name=lambda x: x):
        self.fail, self.error, self.times, self.name = set(fail), error, times, name
        self.at_submit, self.pending = at_submit, pending
        self.seen: dict = {}
        self.submitted = []

    def submit(self, fn, /, *args, **kwargs):
        name = self.name(args[0])
        self.submitted.append(name)
        future = Future()
        count = self.seen[name] = self.seen.get(name, 0) + 1
        if name in self.fail and count <= self.times:
            if self.at_submit:
                raise self.error
            if self.error == "cancel":
                future.cancel()
                future.set_running_or_notify_cancel()
                return future
            future.set_exception(self.error)
            return future
        if self.pending:
            return future  # never finishes (the capacity test looks at what is in flight)
        future.set_result(fn(*args))
        return future


def _handle(executor, kind="pool"):
    return ExecutorHandle(kind, executor, f"a {kind}", factory=lambda: executor)


def _run(jobs, units, handle, workers=2):
    notes = []
    driver.drive(jobs, units, lambda: handle, workers=workers, path="FILE", log=notes.append)
    return notes


def test_every_unit_and_every_follow_up_is_run_once():
    jobs = _Doubles(follow={1: 10, 10: 100})
    _run(jobs, [1, 2, 3], _handle(InlineExecutor(), "inline"))
    assert [r["x"] for r in jobs.records] == [1, 10, 100, 2, 3] and jobs.tally.new == 5
    assert jobs.opened_with == ("a inline", 3)


def test_a_worker_lost_once_is_replaced_and_its_task_rerun():
    flaky = _Flaky(fail={2}, error=BrokenProcessPool("died"))
    handle = _handle(flaky)
    jobs = _Doubles()
    notes = _run(jobs, [1, 2, 3], handle)
    assert sorted(r["x"] for r in jobs.records) == [1, 2, 3]  # each once
    assert handle.restarts == 1 and any("worker process died" in n and "double(s)" in n for n in notes)


def test_a_pool_broken_at_submission_is_restarted():
    """The last unit meets a broken pool when it is submitted, with nothing else in flight: it is rerun
    (the sweep's old loop ended there and lost it), and a pool broken at every submission ends the run."""
    flaky = _Flaky(fail={3}, error=BrokenProcessPool("broken"), at_submit=True)
    handle = _handle(flaky)
    jobs = _Doubles()
    _run(jobs, [1, 2, 3], handle)
    assert sorted(r["x"] for r in jobs.records) == [1, 2, 3] and handle.restarts == 1
    always = _Flaky(fail={2}, error=BrokenProcessPool("broken"), times=99, at_submit=True)
    with pytest.raises(InputError, match="died in each of 4 attempts at the double of 2"):
        _run(_Doubles(), [1, 2, 3], _handle(always))


def test_a_task_whose_worker_dies_on_every_attempt_ends_the_run_in_one_line():
    flaky = _Flaky(fail={2}, error=BrokenProcessPool("died"), times=99)
    handle = _handle(flaky)
    with pytest.raises(InputError, match="died in each of 4 attempts at the double of 2"):
        _run(_Doubles(), [1, 2, 3], handle)
    assert handle.restarts == driver.ATTEMPTS - 1 and flaky.seen[2] == driver.ATTEMPTS


def test_a_study_job_whose_worker_always_dies_is_one_line_not_a_traceback(tmp_path, monkeypatch):
    """The study now shares the sweep's bound (it used to re-raise the pool's own exception)."""
    doomed = study.jobs_of(TINY, (0,))[0]["key"]
    flaky = _Flaky(fail={doomed}, error=BrokenProcessPool("died"), times=99, name=lambda job: job["key"])
    handle = _handle(flaky)
    monkeypatch.setattr(study, "open_executor", lambda *args, **kwargs: handle)
    with pytest.raises(InputError, match="died in each of 4 attempts at the job base seed 0"):
        study.run_study(str(tmp_path / "study.jsonl"), TINY, seeds=(0,), workers=2, progress=False,
                        log=lambda text: None)
    assert flaky.seen[doomed] == driver.ATTEMPTS


def test_tasks_cancelled_by_the_scheduler_end_the_run_in_one_line():
    flaky = _Flaky(fail={2}, error="cancel")
    with pytest.raises(InputError, match="doubles were cancelled by a pool .* 1 new double"):
        _run(_Doubles(), [1, 2, 3], _handle(flaky), workers=1)


def test_a_failing_task_is_raised_as_itself():
    flaky = _Flaky(fail={2}, error=ZeroDivisionError("a bug in the task"))
    with pytest.raises(ZeroDivisionError, match="a bug in the task"):
        _run(_Doubles(), [1, 2, 3], _handle(flaky))


def test_stop_ends_the_run_after_that_many_results():
    jobs = _Doubles(stop_after=2)
    _run(jobs, [1, 2, 3, 4], _handle(InlineExecutor(), "inline"))
    assert [r["x"] for r in jobs.records] == [1, 2]


def test_a_pool_holds_at_most_one_task_per_worker():
    never = _Flaky(pending=True)
    jobs = _Doubles()

    class Interrupt(ExecutorHandle):
        def watch(self, progressed):  # the first wait is over: look at what was submitted, then stop
            raise KeyboardInterrupt

    handle = Interrupt("pool", never, "a pool", factory=lambda: never)
    with pytest.raises(KeyboardInterrupt):
        notes = []
        driver.drive(jobs, [1, 2, 3, 4, 5], lambda: handle, workers=3, path="FILE", log=notes.append)
    assert never.submitted == [1, 2, 3]
    assert notes == ["interrupted: 0 new double(s) are in FILE; rerun the same command to resume"]


def test_the_eta_is_the_throughput_times_what_is_left():
    tally = driver.Tally(start=100.0, ready=100.0)
    assert tally.eta(0) == 0.0 and tally.eta(3) is None  # nothing left; nothing measured yet
    tally.new = 2
    eta = tally.eta(4)
    assert eta is not None and eta > 0


def test_clock_reads_minutes_and_hours():
    assert [driver.clock(s) for s in (None, float("inf"), 59.6, 130, 3725)] == ["?", "?", "1:00", "2:10",
                                                                                "1:02:05"]


def test_the_sweep_module_drives_through_the_driver(monkeypatch, tmp_path):
    """sweep() runs its searches through driver.drive (one driver for both), with its own job list."""
    seen = []
    real = driver.drive

    def spy(jobs, units, open_handle, **kwargs):
        seen.append((type(jobs).__name__, len(units)))
        return real(jobs, units, open_handle, **kwargs)

    monkeypatch.setattr(sweep_module, "drive", spy)
    monkeypatch.setattr(study, "drive", spy)
    sweep(str(tmp_path / "s.jsonl"), [32], [2], modes=("learned",), seeds=(0,), settings=SETTINGS,
          progress=False)
    study.run_study(str(tmp_path / "t.jsonl"), TINY, seeds=(0,), progress=False)
    assert seen == [("_Searches", 1), ("_Jobs", 5)]
