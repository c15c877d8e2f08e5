"""Capacity-threshold sweeps (docs/theory.md, "Gradient descent"): the smallest d at which gradient descent
reaches 100% accuracy. This module is the driver; each concept of a sweep has its own module:

- :mod:`.sweep_trial`: a *trial*, one model of width d trained on the configuration's task (its settings,
  seed streams and record);
- :mod:`.sweep_search`: the threshold search rule (doubling then bisection, or a predicted start);
- :mod:`.sweep_records`: the results file (record keys, what a usable line is, reading it);
- :mod:`.sweep_fit`: ``d* = c·R·ln N`` fitted to threshold records, and the prediction a predicted search
  starts from;
- :mod:`.sweep_cost`: the cost estimate logged (and checked against ``budget_hours``) before the first trial;
- :mod:`.sweep_knowledge`: bits of knowledge per parameter at d*.

For each configuration (N, R, mode, seed), ``mode`` = ``learned`` (every parameter trained) or ``frozen``
(entity and relation embeddings frozen at their random initialization, so the facts must go into the MLP):

- the task is ``task_for_seed(N, R, seed)`` (the seed contract, ``theory/seeds.py``): the same facts for both
  modes, every d, and every other command run with that seed;
- a *trial* trains a fresh model of width d with MLP width ``m = width_factor·d`` (default 4d), full batch,
  Adam, for at most ``steps`` steps, initialized from ``rng(seed, "init", mode_id, d)`` (batch order, if any,
  from ``rng(seed, "batches", mode_id, d)``), and records whether it reached 100% (confirmed by the exhaustive
  checker). With ``k > 1`` the facts are all N·R^k k-hop queries; with ``cot`` the model is trained and judged
  on every step of the chain under teacher forcing (exact at every step under teacher forcing is the same as
  exact greedy decoding, by induction over the steps);
- the threshold search doubles d from ``d_min`` until a trial succeeds, then bisects between the last failure
  and the first success until they are ``resolution`` apart (``search="doubling"``, the default); or
  (``search="predicted"``, :class:`.sweep_search.PredictedSearch`) starts at ``c·R·ln N`` fitted to the
  threshold records already in the file (:func:`.sweep_fit.predict_threshold`), takes every recorded trial of
  the configuration into its bracket, gallops outward from the prediction and bisects. A search whose smallest
  width tried reached 100 % only bounds d* from above: its record says ``"censored": "floor"`` and the fits
  and predictions leave it out (:mod:`.sweep_search`, "Censoring"). Before the first trial
  the sweep logs the estimated cost (:func:`.sweep_cost.estimate_cost`: trials × measured seconds per step ×
  steps, calibrated on the recorded trials' own seconds, :func:`.sweep_cost.calibration`) and, given
  ``budget_hours``, refuses a run whose worst case exceeds it.

Where trials run. The driver (the process that called :func:`sweep`) runs every search and submits each
trial to an executor (:mod:`.executors`): this process (``workers=1``), a pool of local
processes (``workers=W``), or a Dask cluster (``scheduler="local:W"`` or ``"tcp://HOST:PORT"``). Executors
only return records; the driver alone writes the file.

The results file (:mod:`.sweep_records`: keys, the BLAS of each trial, reading). Every trial is appended to
the JSONL file as soon as it finishes and every finished search as a threshold record. While a sweep runs it
holds an advisory lock on ``<file>.lock``: a second sweep on the same file waits (saying so) or refuses after
``lock_timeout``. *Resumability*: an interrupted sweep loses at most the trials in flight; rerunning the same
call finishes with the same records as an uninterrupted run, except the timing field ``seconds``.
"""
from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import numpy as np

from georecall.errors import InputError
from georecall.experiments.driver import Call, JobList, Stop, clock, drive, open_results, stderr_note
from georecall.experiments.executors import WORKER_TIMEOUT, open_executor
from georecall.experiments.sweep_cost import cost_line, estimate_cost
from georecall.experiments.sweep_fit import predict_threshold
from georecall.experiments.sweep_records import (
    is_finite_real,
    is_floor_censored,
    read_sweep,
    record_config_key,
    same_settings,
    threshold_key,
)
from georecall.experiments.sweep_search import (
    SEARCHES,
    PredictedSearch,
    ThresholdSearch,
    check_search_range,
    make_search,
    threshold_record,
)
from georecall.experiments.sweep_trial import (
    MODES,
    SEED_CONTRACT,
    TrialSettings,
    check_mode,
    run_trial,
)
from georecall.io import append_jsonl, validate_output_path
from georecall.memory import Budget
from georecall.results_files import ResultsFile
from georecall.theory import __version__
from georecall.theory.seeds import check_seed
from georecall.theory.tasks import check_positive_int

__all__ = ["ProgressInfo", "sweep"]


# ---------------------------------------------------------------------------------------------- progress

@dataclass
class ProgressInfo:
    """A snapshot for a progress callback.

    Attributes
    ----------
    configs_done, configs_total : int
        Finished searches (including those found finished in the file) and all searches of the call.
    trials_done : int
        Trials run by this call so far.
    trials_reused : int
        Trials taken from the file instead of being run.
    trials_left : int
        Estimated trials still to run (from the mean trials per finished search).
    elapsed : float
        Seconds since the sweep started.
    eta : float or None
        Estimated seconds left (``None`` until a trial has finished).
    message : str
        What just happened.
    """

    configs_done: int
    configs_total: int
    trials_done: int
    trials_reused: int
    trials_left: int
    elapsed: float
    eta: float | None
    message: str


class _StderrProgress:
    """Progress on stderr: one rewritten line on a terminal, else plain lines (at most one per second)."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last = 0.0
        self.open_line = False

    def __call__(self, info: ProgressInfo) -> None:
        now = time.monotonic()
        final = info.configs_done == info.configs_total
        if not self.tty and not final and now - self.last < 1.0:
            return
        self.last = now
        text = (f"sweep: {info.configs_done}/{info.configs_total} searches, {info.trials_done} trials run"
                f" (~{info.trials_left} left), elapsed {clock(info.elapsed)}, ETA {clock(info.eta)}"
                f" | {info.message}")
        if self.tty:
            width = 150
            print("\r" + text[:width].ljust(width), end="", file=self.stream, flush=True)
            self.open_line = True
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.open_line:
            print(file=self.stream, flush=True)
            self.open_line = False


# ------------------------------------------------------------------------------------------------ driver

def _configs(Ns, Rs, modes, seeds) -> list[tuple]:
    for name, values in (("Ns", Ns), ("Rs", Rs), ("modes", modes), ("seeds", seeds)):
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"{name} must be a list, got {values!r}")
    Ns, Rs, modes, seeds = (list(v) for v in (Ns, Rs, modes, seeds))
    for name, values in (("Ns", Ns), ("Rs", Rs), ("modes", modes), ("seeds", seeds)):
        if not values:
            raise InputError(f"{name} is empty: nothing to sweep")
    for N in Ns:
        check_positive_int("N", N)
    for R in Rs:
        check_positive_int("R", R)
    for mode in modes:
        check_mode(mode)
    for seed in seeds:
        try:
            check_seed(seed)
        except ValueError as exc:  # theory.seeds raises a plain ValueError; here it is the user's input
            raise InputError(str(exc)) from None
    configs = []
    grid = ((int(N), int(R), mode, int(seed)) for N in Ns for R in Rs for mode in modes for seed in seeds)
    for config in grid:
        if config not in configs:
            configs.append(config)
    return configs


def _check_options(search: str, budget_hours, workers, scheduler, d_min, d_max, resolution,
                   max_trials) -> tuple[int, int | None]:
    """The driver's options checked (one line each); ``workers`` and ``max_trials`` as ints."""
    if search not in SEARCHES:
        raise InputError(f"search must be one of {SEARCHES}, got {search!r}")
    if budget_hours is not None and (isinstance(budget_hours, bool) or not is_finite_real(budget_hours)
                                     or budget_hours <= 0):
        raise InputError(f"budget_hours must be a positive finite number, got {budget_hours!r}")
    workers = check_positive_int("workers", workers)
    if scheduler is not None and workers != 1:
        raise InputError(f"give either workers ({workers}) or a scheduler ({scheduler!r}), not both: a Dask "
                         f"cluster has its own workers")
    check_search_range(d_min, d_max, resolution)
    if max_trials is not None:
        max_trials = check_positive_int("max_trials", max_trials)
    return workers, max_trials


def _known_trials(records: list[dict]) -> dict[tuple, dict[int, dict]]:
    """The trials already in the file: ``{config key: {d: record}}``."""
    known: dict[tuple, dict[int, dict]] = {}
    for r in records:
        if r["kind"] == "trial":
            known.setdefault(record_config_key(r), {})[r["d"]] = r
    return known


def _predictions(records: list[dict], todo: list[tuple], settings: TrialSettings, search: str) -> dict:
    """Where a predicted search starts, per configuration (``{}`` for doubling); refuses one with none."""
    if search != "predicted":
        return {}
    # from the file as it is now, whatever the executor runs first
    predictions = {(N, R, mode, seed): predict_threshold(records, N, R, mode, settings)
                   for N, R, mode, seed in todo}
    missing = [c for c, p in predictions.items() if p is None]
    if missing:
        N, R, mode, seed = missing[0]
        censored = sum(1 for r in records if r.get("kind") == "threshold" and r["mode"] == mode
                       and is_floor_censored(r) and same_settings(r, settings))
        left_out = (f" ({censored} censored at the floor of its search, d* only an upper bound, left out)"
                    if censored else "")
        raise InputError(f"no threshold record of mode {mode} with these settings to predict "
                         f"N={N} R={R} from{left_out}: run a doubling search first (search='doubling')")
    return predictions


def _check_cost(estimate: dict, budget_hours: float | None, log: Callable[[str], None],
                on_estimate: Callable[[dict], None] | None) -> None:
    """Log the estimated cost, hand it to ``on_estimate``, and refuse it above ``budget_hours``."""
    if estimate["per_config"]:
        log(cost_line(estimate))
    if on_estimate is not None:
        on_estimate(estimate)
    if budget_hours is not None:
        if estimate["unknown"]:
            raise InputError(f"cannot estimate the cost of {len(estimate['unknown'])} "
                             f"configuration(s) (no prediction or no measured step) within "
                             f"budget_hours = {budget_hours:g}")
        if estimate["hours"] > budget_hours:
            raise InputError(f"the estimated cost, {estimate['hours']:.2f} h at most "
                             f"({estimate['trials']} trials), exceeds the budget of "
                             f"{budget_hours:g} h")


def _read_to_append(path: str, *, budget: Budget | None = None) -> ResultsFile:
    """:func:`.sweep_records.read_sweep` of a file the sweep is about to append to (refused if it holds
    records, none of them a sweep's)."""
    return read_sweep(path, budget=budget, require=True, writing=True)


def sweep(path: str, Ns, Rs, modes=MODES, seeds=(0, 1, 2), *, settings: TrialSettings = TrialSettings(),
          d_min: int = 4, d_max: int = 1024, resolution: int = 2, workers: int = 1,
          progress: bool | Callable[[ProgressInfo], None] = True, max_trials: int | None = None,
          scheduler: str | None = None, lock_timeout: float | None = None, connect_timeout: float = 10.0,
          log: Callable[[str], None] | None = None, worker_timeout: float = WORKER_TIMEOUT,
          budget: Budget | None = None, search: str = "doubling", budget_hours: float | None = None,
          step_seconds_fallback: Callable[[int, int, int], float] | None = None,
          on_estimate: Callable[[dict], None] | None = None) -> list[dict]:
    """Run (or resume) the threshold search for every configuration; return its threshold records.

    Parameters
    ----------
    path : str
        The JSONL results file (created if missing; validated, then locked, before any work).
    Ns, Rs, modes, seeds : lists
        The grid: every (N, R, mode, seed).
    settings : TrialSettings
        Trial parameters shared by the grid.
    d_min, d_max, resolution : int
        Search range and resolution (``d_min <= d_max``).
    workers : int
        Local processes when ``scheduler`` is ``None`` (1: trials run in this process).
    progress : bool or callable
        ``True``: progress on stderr (searches and trials done, elapsed, ETA; plain lines when stderr is not a
        terminal). A callable receives a :class:`ProgressInfo` after every trial and search instead.
    max_trials : int, optional
        Stop after that many new trials (the file stays consistent; for tests of resumption).
    scheduler : str, optional
        ``"local:W"`` (a Dask ``LocalCluster`` of W single-threaded workers) or ``"tcp://HOST:PORT"`` (a
        running Dask scheduler); needs the ``distributed`` extra. Exclusive with ``workers > 1``.
    lock_timeout : float, optional
        Seconds to wait for the file's lock when another sweep holds it (``None``: wait, saying so once;
        ``0``: refuse at once).
    connect_timeout : float
        Seconds to wait for a Dask scheduler.
    log : callable, optional
        Receives one-line notes (skipped lines, lock waits, the dashboard, interruption); default: stderr.
    worker_timeout : float
        Seconds without any Dask worker before the sweep gives up (the records so far are kept).
    budget : Budget or None
        Memory budget the existing results file is counted against before it is read.
    search : str
        ``"doubling"`` (:class:`.sweep_search.ThresholdSearch`, from ``d_min``) or ``"predicted"``
        (:class:`.sweep_search.PredictedSearch` from ``c·R·ln N`` fitted to the threshold records in the file
        when the sweep starts, :func:`.sweep_fit.predict_threshold`, so that every executor gives the same
        records; a search resumed from its trials keeps the prediction they recorded). Part of the threshold
        key. To predict R = 16 from R = 8, run R = 8 first, in a sweep of its own.
    budget_hours : float, optional
        Refuse (``InputError``, before any trial) when the estimated cost (:func:`.sweep_cost.estimate_cost`,
        worst case over the predictions' bands) exceeds this many hours, or cannot be estimated.
    step_seconds_fallback : callable, optional
        ``(N, R, d) -> seconds per step`` for the estimate where the file has no trials at N (e.g.
        :func:`.sweep_cost.measure_step_seconds`).
    on_estimate : callable, optional
        Receives the estimate (a dict, :func:`.sweep_cost.estimate_cost`) before any trial; its line is also
        logged.

    Returns
    -------
    list of dict
        The threshold records of the grid (every configuration unless stopped by ``max_trials``).

    Raises
    ------
    InputError
        Bad parameters or output path, an output file holding lines, none a sweep record, a lock not
        obtained in time, a scheduler not reached (one line each).
    KeyboardInterrupt
        Re-raised after the workers are stopped (within about a second) and a note is logged.
    """
    settings = settings.validate()
    workers, max_trials = _check_options(search, budget_hours, workers, scheduler, d_min, d_max, resolution,
                                         max_trials)
    configs = _configs(Ns, Rs, modes, seeds)
    path = validate_output_path(path, what="results file")
    log = log if log is not None else stderr_note
    version = {"seed_contract": SEED_CONTRACT, "version": __version__, **asdict(settings)}
    range_ = {"d_min": d_min, "d_max": d_max, "resolution": resolution}
    keyed = {**range_, "search": search}

    def config_record(config: tuple) -> dict:
        N, R, mode, seed = config
        return {"N": N, "R": R, "mode": mode, "seed": seed, **version}

    wanted = {threshold_key({**config_record(c), **keyed}) for c in configs}
    with open_results(path, _read_to_append, lock_timeout=lock_timeout, log=log, budget=budget) as contents:
        finished = {threshold_key(r) for r in contents.records if r["kind"] == "threshold"}
        known = _known_trials(contents.records)
        todo = [c for c in configs if threshold_key({**config_record(c), **keyed}) not in finished]
        if todo:
            estimate = estimate_cost(contents.records, todo, settings, search=search, **range_,
                                     seconds=step_seconds_fallback)
            predictions = _predictions(contents.records, todo, settings, search)
            _check_cost(estimate, budget_hours, log, on_estimate)
            reporter = _StderrProgress() if progress is True else (progress if callable(progress) else None)
            close = getattr(reporter, "close", None)

            @functools.wraps(log)  # it says what log says (the driver looks through it: said on stderr?)
            def note(text: str) -> None:  # a note starts a line of its own after a line rewritten in place
                if close is not None:
                    close()
                log(text)

            searches = _Searches(path, settings, range_, known, len(configs), todo,
                                 config_key=lambda c: record_config_key(config_record(c)), search=search,
                                 predictions=predictions,
                                 per_search=[len(r["trials"]) for r in contents.records
                                             if r["kind"] == "threshold"],
                                 reporter=reporter, max_trials=max_trials)
            try:
                drive(searches, todo, lambda: open_executor(
                    scheduler, workers, connect_timeout=connect_timeout, message=note,
                    worker_timeout=worker_timeout), workers=workers, path=path, log=note)
            finally:
                if close is not None:
                    close()
        records = read_sweep(path, budget=budget).records
        return [r for r in records if r["kind"] == "threshold" and threshold_key(r) in wanted]


class _Searches(JobList):
    """The threshold searches of one sweep as a job list of :func:`.driver.drive`: a unit is a configuration
    (N, R, mode, seed), its tasks are the trials its search asks for one at a time; a search's trials found in
    the file are reused, and a finished search appends its threshold record."""

    noun = "trial"

    def __init__(self, path: str, settings: TrialSettings, range_: dict, known: dict, total: int, todo: list,
                 *, config_key: Callable[[tuple], tuple], per_search: list[int],
                 reporter: Callable[[ProgressInfo], None] | None, max_trials: int | None,
                 search: str = "doubling", predictions: dict[tuple, dict | None] | None = None):
        super().__init__()
        self.path, self.settings, self.range_, self.known = path, settings, range_, known
        self.config_key, self.reporter, self.max_trials = config_key, reporter, max_trials
        self.total, self.search, self.predicted = total, search, dict(predictions or {})
        self.searches: dict[tuple, ThresholdSearch | PredictedSearch] = {}  # made when a search starts
        self.predictions: dict[tuple, dict | None] = {}
        self.todo = list(todo)
        self.done = total - len(todo)  # finished searches, those found finished in the file included
        self.reused = 0
        self.visited_trials = per_search[:]  # trials per finished search, for the estimate of what is left

    def report(self, message: str) -> None:
        """Give the progress callback a :class:`ProgressInfo` (trials left: the mean per finished search)."""
        if self.reporter is None:
            return
        mean = float(np.mean(self.visited_trials)) if self.visited_trials else 6.0
        left = sum(max(round(mean) - len(s.visited), 1) for s in self.searches.values() if not s.done)
        left += sum(round(mean) for c in self.todo if c not in self.searches)
        tally = self.tally
        self.reporter(ProgressInfo(self.done, self.total, tally.new, self.reused, left, tally.elapsed(),
                                   tally.eta(left), message))

    def opened(self, handle, units: int) -> None:
        self.report(f"{units} searches on {handle.description}")

    def start(self, config: tuple) -> list[Call]:
        """Feed the search the trials the file already has; return its next trial, or finish it."""
        have = self.known.get(self.config_key(config), {})
        if config not in self.searches:  # made when it starts (the reused trials are the file's by then)
            prediction = None
            if self.search == "predicted":  # a resumed search keeps the prediction its trials recorded
                earlier = [t for t in have.values() if is_finite_real(t.get("prediction"))]
                prediction = ({"d": float(earlier[0]["prediction"]), "c": earlier[0].get("prediction_c")}
                              if earlier else self.predicted[config])
            self.predictions[config] = prediction
            outcomes = {d: bool(t["reached"]) for d, t in have.items()}
            self.searches[config] = make_search(self.search, prediction, outcomes, self.range_)
            if self.search == "predicted":
                self.reused += len(have)  # a predicted search takes every recorded trial at once
        search = self.searches[config]
        while not search.done and search.next_d in have:
            search.feed(have[search.next_d]["reached"])
            self.reused += 1
        N, R, mode, seed = config
        if not search.done:
            d = search.next_d
            assert d is not None  # a search that is not done has a next d
            return [Call(run_trial, (*config, d, self.settings), (config, d),
                         f"the trial N={N} R={R} {mode} seed {seed} d={d}")]
        blas = sorted({have[d].get("blas") or "not recorded" for d in search.visited if d in have})
        record = threshold_record(N, R, mode, seed, self.settings, dict(search.visited), search.lo,
                                   **self.range_, search=self.search,
                                   extra={**self._prediction_fields(config), "blas": blas})
        append_jsonl(self.path, record)
        self.visited_trials.append(len(search.visited))
        self.done += 1
        found = (f"d* ≤ {record['d_star']} (censored at d_min)" if is_floor_censored(record)
                 else f"d* = {record['d_star']}")
        self.report(f"N={N} R={R} {mode} seed {seed}: {found}")
        return []

    def _prediction_fields(self, config: tuple) -> dict:
        """The prediction a predicted search started from (also written into its trial records, so that a
        resumed search starts from the same one)."""
        prediction = self.predictions.get(config)
        if prediction is None:
            return {}
        c = prediction.get("c")
        return {"prediction": round(prediction["d"], 3), "prediction_c": None if c is None else round(c, 6)}

    def accept(self, task: Call, record: dict) -> list[Call]:
        config, d = task.tag
        record = {**record, **self._prediction_fields(config)}
        append_jsonl(self.path, record)
        self.known.setdefault(self.config_key(config), {})[d] = record
        self.searches[config].feed(record["reached"])
        N, R, mode, seed = config
        self.report(f"N={N} R={R} {mode} seed {seed}: d={d} {'reached' if record['reached'] else 'failed'}"
                    f" ({record['seconds']:.1f} s)")
        if self.max_trials is not None and self.tally.new >= self.max_trials:
            raise Stop
        return self.start(config)
