"""The one job driver of sweeps and studies: units of work, calls on an executor, records into one file.

A run (:func:`georecall.experiments.sweep.sweep`, :func:`georecall.experiments.study.run_study`)

1. checks its output path (:func:`georecall.io.validate_output_path`), then opens the results file under its
   advisory lock and reads it (:func:`open_results`: skipped lines are counted and said in one line);
2. keeps the units whose records the file lacks (threshold searches; study jobs), and hands them to
   :func:`drive` with a :class:`JobList`, which says what a unit submits and what a finished call records;
3. :func:`drive` opens the executor (:mod:`.executors`: this process, local processes or Dask), keeps at most
   one call per worker in flight, appends nothing itself (the job list appends, through
   :func:`georecall.io.append_jsonl`, so the driver process alone writes the file), reruns the calls a dead
   local worker took with it (at most four attempts each), and turns what Dask reports (a lost scheduler, a
   worker killed on every attempt, no worker for ``worker_timeout`` seconds) into one line;
4. rereads the file and returns the records of its grid.

Stopping. A job list raises :class:`Stop` (``max_trials``, ``max_jobs``: for tests of resumption) to end the
run; Ctrl-C kills the workers, says how many new records the file holds, and is re-raised. Either way the
file holds whole records only, and rerunning the same call resumes.

Progress. The job list reports (on stderr or to a callback) from its :class:`Tally`: results accepted by
this run, elapsed time since the run began, and :meth:`Tally.eta`, the remaining count at the throughput
measured since the executor was up.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from typing import Any

from georecall.errors import InputError
from georecall.experiments.executors import ExecutorHandle
from georecall.memory import Budget
from georecall.results_files import FileLock, ResultsFile

__all__ = ["ATTEMPTS", "Call", "JobList", "Stop", "Tally", "clock", "drive", "stderr_note", "open_results"]

ATTEMPTS = 4  # tries of one call whose local worker process dies, before the run gives up


def clock(seconds: float | None) -> str:
    """A duration for progress lines: ``M:SS``, or ``H:MM:SS`` from an hour on; ``?`` when unknown.

    Parameters
    ----------
    seconds : float or None
        The duration (``None`` or not finite: not known yet).

    Returns
    -------
    str
    """
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def stderr_note(text: str) -> None:
    """The default ``log`` of sweeps and studies: one line ``georecall: TEXT`` on stderr.

    Parameters
    ----------
    text : str
        The note, without a trailing newline.
    """
    print(f"georecall: {text}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def open_results(path: str, read: Callable[..., ResultsFile], *, lock_timeout: float | None,
                 log: Callable[[str], None], budget: Budget | None) -> Iterator[ResultsFile]:
    """Hold the results file's lock and yield what is in it (the driver appends while the lock is held).

    Parameters
    ----------
    path : str
        The results file, already checked by :func:`georecall.io.validate_output_path`.
    read : callable
        ``read(path, budget=...)``: the module's reader (:func:`.sweep_records.read_sweep`,
        :func:`.study.read_study`).
    lock_timeout : float or None
        Seconds to wait for the lock (``None``: wait, saying so once; ``0``: refuse at once).
    log : callable
        Receives the line counting skipped lines, and the lock's waiting note.
    budget : Budget or None
        Memory budget the file is counted against before it is parsed (passed to ``read``).

    Yields
    ------
    georecall.results_files.ResultsFile
        The usable records and the counts of skipped lines.

    Raises
    ------
    georecall.results_files.LockTimeout
        Another process holds the lock beyond ``lock_timeout``.
    InputError
        The file cannot be read, or is larger than ``budget`` allows.
    """
    with FileLock(path, timeout=lock_timeout, message=log):
        contents = read(path, budget=budget)
        if contents.problems():
            log(f"{path}: {contents.problems()}")
        yield contents


@dataclass(frozen=True)
class Call:
    """One call for an executor: ``fn(*args)`` returns a record; ``tag`` tells the job list where it goes.

    Attributes
    ----------
    fn : callable
        A module-level function (local processes and Dask pickle it by name).
    args : tuple
        Its arguments (picklable).
    tag : object
        What the job list needs to file the result (a search's configuration and width; a study job).
    label : str
        The call in one phrase, for the line that ends a run whose worker dies on every attempt
        (``"the trial N=32 R=2 learned seed 0 d=4"``).
    """

    fn: Callable[..., dict]
    args: tuple
    tag: Any = None
    label: str = "a call"


class Stop(Exception):
    """Raised by a job list to end the run now (its in-flight calls are cancelled, the file stays whole)."""


@dataclass
class Tally:
    """Counts and clocks of one run: the driver keeps them, the job list's progress reports read them.

    Attributes
    ----------
    start : float
        ``time.perf_counter()`` when the run began (elapsed time counts from here).
    ready : float
        When the executor was up (the ETA's throughput leaves out its start-up).
    new : int
        Results accepted by this run.
    """

    start: float = field(default_factory=time.perf_counter)
    ready: float = 0.0
    new: int = 0

    def __post_init__(self):
        self.ready = self.ready or self.start

    def elapsed(self) -> float:
        """Seconds since the run began."""
        return time.perf_counter() - self.start

    def eta(self, left: float) -> float | None:
        """Seconds for ``left`` more results at this run's throughput so far.

        Parameters
        ----------
        left : float
            Results still to come (an estimate for searches of unknown length).

        Returns
        -------
        float or None
            ``0.0`` when nothing is left; ``None`` until a result has arrived.
        """
        if left == 0:
            return 0.0
        if not self.new:
            return None
        return (time.perf_counter() - self.ready) / self.new * left


class JobList:
    """What :func:`drive` runs: subclass it with the two methods below (and ``noun``, ``tally``).

    Attributes
    ----------
    noun : str
        The driver's word for one call in its lines (``"trial"``, ``"job"``).
    tally : Tally
        The run's counts and clocks (the driver sets ``ready`` and counts ``new``).
    """

    noun = "call"

    def __init__(self) -> None:
        self.tally = Tally()

    def opened(self, handle: ExecutorHandle, units: int) -> None:
        """The executor is up and ``units`` units are about to start (a job list reports it, or not).

        Parameters
        ----------
        handle : ExecutorHandle
            The open executor (its ``description`` names it).
        units : int
            Units to run.
        """

    def start(self, unit) -> list[Call]:
        """Start one unit of work: the calls to submit now (none when the file already holds its results).

        Parameters
        ----------
        unit : object
            One of the units given to :func:`drive`.

        Returns
        -------
        list of Call
        """
        raise NotImplementedError

    def accept(self, call: Call, record: dict) -> list[Call]:
        """File the record a call returned (append it, report); return the calls it leads to.

        Parameters
        ----------
        call : Call
            The call that ran.
        record : dict
            What ``call.fn`` returned.

        Returns
        -------
        list of Call

        Raises
        ------
        Stop
            To end the run now.
        """
        raise NotImplementedError


class _Run:
    """One run of :func:`drive`: the calls in flight on an open executor, and what to do with each result."""

    def __init__(self, jobs: JobList, handle: ExecutorHandle, path: str, log: Callable[[str], None]):
        self.jobs, self.handle, self.path, self.log = jobs, handle, path, log
        self.in_flight: dict[Future, tuple[Call, int]] = {}  # future -> (call, attempts before this one)
        self.rerun: list[tuple[Call, int]] = []  # what a dead local worker took with it, or a broken pool met

    def submit(self, call: Call, attempts: int = 0) -> None:
        try:
            future = self.handle.executor.submit(call.fn, *call.args)
        except Exception as exc:
            if not self.handle.is_lost_worker(exc):
                raise
            self.lost(call, attempts)
            return
        self.in_flight[future] = (call, attempts)

    def lost(self, call: Call, attempts: int) -> None:
        """A local worker died running ``call`` (or the pool was broken when it came): rerun it, at most
        :data:`ATTEMPTS` times in all."""
        if attempts + 1 >= ATTEMPTS:
            raise InputError(f"a worker process died in each of {ATTEMPTS} attempts at {call.label} (out of "
                             "memory?); lower the sizes or the number of workers") from None
        self.rerun.append((call, attempts))

    def accept(self, call: Call, record: dict) -> None:
        self.jobs.tally.new += 1
        for follow in self.jobs.accept(call, record):
            self.submit(follow)

    def settle(self, done) -> None:
        """File the finished futures: accept a result, set a lost worker's call aside, raise a failure."""
        noun = self.jobs.noun
        for future in done:
            call, attempts = self.in_flight.pop(future)
            if future.cancelled():  # not by us: the cluster dropped it (a Dask scheduler went away)
                raise InputError(f"{noun}s were cancelled by {self.handle.description} (scheduler lost?); "
                                 f"{self.jobs.tally.new} new {noun}(s) are in {self.path}: rerun to resume")
            error = future.exception()
            if error is None:
                self.accept(call, future.result())
            elif self.handle.is_lost_worker(error):
                self.lost(call, attempts)
            else:
                raise self.handle.failure(error)

    def restart(self) -> None:
        """A local worker died, so the pool is broken: keep what finished, rerun the rest on a new pool."""
        for future in list(self.in_flight):
            call, attempts = self.in_flight.pop(future)
            if future.done() and future.exception() is None:
                self.accept(call, future.result())
            else:
                self.rerun.append((call, attempts))
        self.log(f"a worker process died; restarting the pool and rerunning {len(self.rerun)} "
                 f"{self.jobs.noun}(s)")
        self.handle.restart()
        again, self.rerun[:] = self.rerun[:], []
        for call, attempts in again:
            self.submit(call, attempts + 1)


def _capacity(handle: ExecutorHandle, workers: int, units: int) -> int:
    """Calls in flight at once: one in this process, one per local process, every unit on Dask (its
    scheduler queues them)."""
    if handle.kind == "inline":
        return 1
    return workers if handle.kind == "pool" else units


def drive(jobs: JobList, units: list, open_handle: Callable[[], ExecutorHandle], *, workers: int, path: str,
          log: Callable[[str], None]) -> None:
    """Run every unit of ``units`` on the executor ``open_handle()`` opens; ``jobs`` files the results.

    Parameters
    ----------
    jobs : JobList
        What a unit submits and what a result records (:meth:`JobList.start`, :meth:`JobList.accept`).
    units : list
        The units to run, in order (searches, jobs); started while fewer calls than the capacity are in
        flight (in this process: one unit at a time, each call run when it is submitted).
    open_handle : callable
        Opens the executor (:func:`.executors.open_executor` with the run's options).
    workers : int
        Local processes (the capacity of a local pool).
    path : str
        The results file, for the lines that say where the records are.
    log : callable
        Receives one-line notes (a restarted pool, an interruption).

    Raises
    ------
    InputError
        Calls cancelled by Dask (scheduler lost), a local worker dead in each of :data:`ATTEMPTS` attempts at
        one call, or what :meth:`.executors.ExecutorHandle.failure` makes of a Dask failure.
    KeyboardInterrupt
        Re-raised after the workers are killed and a note is logged; its ``args`` carry the note, and its
        ``said`` whether ``log`` (or what it wraps) is :func:`stderr_note` (the command line then adds no
        line of its own).
    """
    waiting = list(units)
    with open_handle() as handle:
        jobs.tally.ready = time.perf_counter()
        capacity = _capacity(handle, workers, len(waiting))
        run = _Run(jobs, handle, path, log)
        try:
            jobs.opened(handle, len(waiting))
            while waiting or run.in_flight or run.rerun:
                while waiting and len(run.in_flight) < capacity:
                    for call in jobs.start(waiting.pop(0)):
                        run.submit(call)
                    if handle.kind == "inline":
                        break  # run what was just submitted before starting another unit
                if run.in_flight:
                    done, _ = wait(list(run.in_flight), timeout=0.25, return_when=FIRST_COMPLETED)
                    handle.watch(bool(done))
                    run.settle(done)
                if run.rerun:  # also a call that met a broken pool when it was submitted
                    run.restart()
        except Stop:
            handle.kill()
        except KeyboardInterrupt as exc:
            handle.kill()
            text = (f"interrupted: {jobs.tally.new} new {jobs.noun}(s) are in {path}; rerun the same command "
                    "to resume")
            log(text)
            # the hint rides on the exception: the command line ends with it, once (``said``: it is on stderr
            # already, written by the default log or a wrapper of it)
            exc.args = (text,)
            exc.said = inspect.unwrap(log) is stderr_note  # type: ignore[attr-defined]
            raise
