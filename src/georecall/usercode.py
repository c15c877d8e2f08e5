"""Containment of user code: a construction's module, builder and family (``--construction FILE.py:ATTR``)
run under a time limit and a memory limit, and whatever they raise is reported as theirs.

What :func:`limited` guarantees around a call into user code (the registry wraps the import of a user's
module, its ``build``, its ``family`` and its ``nominal_promise`` in it):

- **Any exception is theirs**: a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
  ``GeneratorExit``, a class of the user's own deriving from ``BaseException``) becomes a
  :class:`~georecall.errors.UserCodeError` (exit 2, one line, one JSON document under ``--json``).
  ``KeyboardInterrupt`` (and SIGTERM, delivered as one) passes unchanged: exit 130. ``Exception`` s pass
  unchanged too: the caller turns them into ``UserCodeError`` with its own words (an ``InputError`` raised
  by the builder is a refusal and stays one).
- **A time limit** (``--build-timeout``, default :data:`DEFAULT_BUILD_TIMEOUT` seconds): a ``SIGALRM``
  timer raises a ``BaseException`` in the user's code when it expires, and again every second after, so a
  loop that swallows it still ends. It interrupts Python code and anything that checks for signals
  (``time.sleep``, most NumPy loops between elements); a single C call that never returns to Python is
  not interrupted. The timer needs the main thread; elsewhere the call runs without a time limit.
- **A memory limit**: the process's address-space soft limit (``RLIMIT_AS``) is set to what it uses now
  plus the run's budget (``--max-gib``) for the duration of the call, so an allocation beyond the budget
  fails inside the user's code (a ``MemoryError``, reported as over the budget) instead of growing the
  process; the previous limit is restored afterwards. Linux and macOS; elsewhere no memory limit.
- **The built model is measured**: :func:`require_model_fits` estimates the checker's peak from the arrays
  the builder (or the family) returned (not from the sizes its promise states) and refuses it over the
  budget before anything is checked.
- **Its words are computed inside the limits**: the text of what it raised (:func:`describe`) is taken while
  the timer and the memory limit hold, so a ``__str__`` that raises, loops or allocates gives a fallback
  ("its message could not be computed"), never an escape. The timer is disarmed even if its last alarm lands
  while disarming, and an alarm already on its way afterwards is ignored: it never stops the process.
- **Its output is its own**: ``sys.stdout`` and ``sys.stderr`` point at a buffer while it runs (closing them
  closes nothing); afterwards the text goes on, under ``--json`` all of it to stdout, which the command line
  keeps in the document's ``printed``, else each to its own stream. (Writes to the file descriptors
  themselves, ``os.write(1, ...)``, are not captured.)

Why in-process and not a child process: the builder's result is a Model of NumPy arrays, a Promise and the
spec's callables, used directly by the checker; a child would have to send them back through a pipe
(pickle, which the project never unpickles from outside, or a format of its own for every field), and
forking a process that runs BLAS threads or a Dask client is unsafe. The limits above contain what a
builder can do by mistake (raise anything, loop, allocate too much); code written to escape them (a
C extension, ``os._exit``) is the user's own program, run with the user's own rights.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import signal
import sys
import threading
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from georecall import __version__
from georecall.errors import InputError, UserCodeError
from georecall.estimates import built_model_estimate
from georecall.memory import Budget

try:  # POSIX only
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = ["ABANDON_AFTER", "DEFAULT_BUILD_TIMEOUT", "BuildTimeout", "Limits", "current_limits", "describe",
           "limited", "require_model_fits", "set_limits"]

DEFAULT_BUILD_TIMEOUT = 600.0  # seconds: generous, a builder of the largest sizes the checker can take
# Interruptions (one a second after the time limit) that user code may swallow before the process stops
ABANDON_AFTER = 10


class BuildTimeout(BaseException):
    """Raised inside user code when its time limit expires (a ``BaseException``, so that an ``except
    Exception`` in the user's code does not swallow it)."""


@dataclass(frozen=True)
class Limits:
    """The limits user code runs under.

    Attributes
    ----------
    timeout : float or None
        Seconds per call into user code (None: no time limit).
    budget : Budget or None
        The run's memory budget (None: no memory limit).
    json : bool
        ``--json``: the last-resort failure (:data:`ABANDON_AFTER`) prints one JSON document.
    command : str or None
        The command, for that document.
    """

    timeout: float | None = DEFAULT_BUILD_TIMEOUT
    budget: Budget | None = None
    json: bool = False
    command: str | None = None


_limits = Limits()
_active = threading.local()  # depth of nested limited() calls in this thread


def set_limits(*, timeout: float | None, budget: Budget | None, json: bool = False,
               command: str | None = None) -> None:
    """Set the limits of every later call into user code (the command line does this once per run, from
    ``--build-timeout`` and ``--max-gib``).

    Parameters
    ----------
    timeout : float or None
        Seconds, positive and finite, or None for no time limit.
    budget : Budget or None
        The memory budget, or None for no memory limit.
    json, command : bool, str or None
        See :class:`Limits`.

    Raises
    ------
    InputError
        ``timeout`` is not a positive finite number.
    """
    global _limits
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not math.isfinite(timeout) or timeout <= 0):
        raise InputError(f"--build-timeout must be a positive finite number of seconds, got {timeout!r}")
    _limits = Limits(None if timeout is None else float(timeout), budget, bool(json), command)


def current_limits() -> Limits:
    """The limits :func:`limited` applies now.

    Returns
    -------
    Limits
    """
    return _limits


def _address_space() -> int | None:
    """The process's current virtual size in bytes (``/proc/self/statm``), or None."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _memory_limit(budget: Budget | None) -> tuple[int | None, tuple | None]:
    """Lower ``RLIMIT_AS`` to the current size plus ``budget``; return (the limit in bytes, the previous
    limits to restore), or (None, None) when no limit was set."""
    if budget is None or resource is None or not hasattr(resource, "RLIMIT_AS"):
        return None, None
    used = _address_space()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        return None, None
    if used is None:
        return None, None
    limit = used + budget.max_bytes
    for existing in (soft, hard):
        if existing != resource.RLIM_INFINITY:
            limit = min(limit, existing)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        return None, None
    return limit, (soft, hard)


def _stray_alarm(signum, frame) -> None:
    """Installed after a time limit where the default action (stop the process) was: an alarm that was
    already on its way when the timer was disarmed is ignored, never fatal."""


class _Captured(io.StringIO):
    """What user code prints while it runs (``sys.stdout`` and ``sys.stderr`` point here); closing it, as a
    builder that closes "stdout" does, closes nothing."""

    def close(self) -> None:  # noqa: D401 - the user's close() of stdout is a no-op here
        pass


class _Contained:
    """One call into user code under the limits (:func:`limited`): the memory limit, the timer, the
    streams; and, on the way out, a failure worded while the limits still hold."""

    def __init__(self, what: str, limits: Limits):
        self.what = what
        self.limits = limits
        self.fired = 0
        self.armed = False
        self.installed = False
        self.outer = False
        self.memory_limit: int | None = None
        self.rlimit: tuple | None = None
        self.previous_handler: Any = None
        self.streams: tuple | None = None
        self.out = _Captured()
        self.err = _Captured()
        self.last_resort = b""

    # -- the timer
    def _expired(self, signum, frame) -> None:
        if not self.armed:  # an alarm already on its way when the timer was disarmed
            return
        self.fired += 1
        if self.fired > ABANDON_AFTER:  # the code swallowed every interruption: stop the process, say why
            _abandon(self.last_resort)
        raise BuildTimeout(self.what)

    def _arm(self) -> None:
        timeout = self.limits.timeout
        if timeout is None or threading.current_thread() is not threading.main_thread() \
                or not hasattr(signal, "setitimer"):
            return
        # the last resort's words are made now, not while the user's code holds the stack
        line = (f"georecall: error: {self.what} did not finish within {timeout:g} s (--build-timeout) and "
                f"ignored {ABANDON_AFTER} interruptions: stopped")
        doc = b""
        if self.limits.json:
            doc = (json.dumps({"command": self.limits.command, "version": __version__, "status": 2,
                               "error": line}, indent=2) + "\n").encode()
        self.last_resort = doc + b"\0" + (line + "\n").encode()
        try:
            self.previous_handler = signal.signal(signal.SIGALRM, self._expired)
        except (ValueError, OSError):  # pragma: no cover - not the main interpreter
            return
        self.installed = True
        self.armed = True
        signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)

    def _disarm(self) -> None:
        """Stop the timer and restore the handler, even if the last alarm lands while doing so."""
        for _ in range(ABANDON_AFTER + 2):
            try:
                if not self.installed:
                    return
                self.armed = False
                signal.setitimer(signal.ITIMER_REAL, 0)
                previous = self.previous_handler
                if previous in (signal.SIG_DFL, None):  # (None: a handler not set from Python)
                    previous = _stray_alarm
                signal.signal(signal.SIGALRM, previous)
                self.installed = False
                return
            except BuildTimeout:  # the alarm landed in this very block: disarm again
                continue

    # -- the context
    def __enter__(self) -> _Contained:
        if getattr(_active, "depth", 0):  # nested (a builder calling a guarded builder): the outer limits
            return self
        self.outer = True
        _active.depth = 1
        self.streams = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = self.out, self.err
        self.memory_limit, self.rlimit = _memory_limit(self.limits.budget)
        self._arm()
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        if not self.outer:
            return False
        error: BaseException | None = None
        try:  # the verdict and its words, computed while the time and memory limits still hold
            error = self._judge(exc)
        except BaseException:  # noqa: BLE001 - the limits expired while wording it: a plain fallback
            error = _error(f"{self.what} raised {_type_name(exc)} (its message could not be computed)", exc)
        finally:
            self._release()
        if error is None:
            return False
        if error is exc:
            return False  # re-raised unchanged by the with statement
        raise error

    def _judge(self, exc: BaseException | None) -> BaseException | None:
        """What the caller sees of ``exc``: None (no exception), ``exc`` itself (an ``Exception`` or an
        interruption, for the caller), or a :class:`UserCodeError`."""
        if exc is None:
            return None
        if isinstance(exc, BuildTimeout):
            return _error(f"{self.what} did not finish within {self.limits.timeout:g} s (--build-timeout)",
                          exc, cause=False)
        if isinstance(exc, MemoryError) and self.memory_limit is not None:
            budget = self.limits.budget.gib if self.limits.budget is not None else math.nan
            return _error(f"{self.what} raised MemoryError under its memory limit (the run's budget of "
                          f"{budget:.3g} GiB, --max-gib)", exc)
        if isinstance(exc, (KeyboardInterrupt, Exception)):
            return exc
        # SystemExit, GeneratorExit, a user's own BaseException subclass
        text = describe(exc)
        return _error(f"{self.what} raised {_type_name(exc)}" + (f": {text}" if text else ""), exc)

    def _release(self) -> None:
        """Undo :meth:`__enter__`: timer, memory limit, streams (what the code printed goes on: under
        ``--json`` all of it to stdout, which the command line keeps in the document; else each to its own
        stream)."""
        self._disarm()
        if self.rlimit is not None and resource is not None:
            with contextlib.suppress(OSError, ValueError):
                resource.setrlimit(resource.RLIMIT_AS, self.rlimit)
        if self.streams is not None:
            out, err = self.streams
            sys.stdout, sys.stderr = out, err
            self.streams = None
            for text, stream in ((self.out.getvalue(), out), (self.err.getvalue(), out if self.limits.json
                                                               else err)):
                if text:
                    with contextlib.suppress(OSError, ValueError, AttributeError):
                        stream.write(text)
        _active.depth = 0


def limited(what: str) -> contextlib.AbstractContextManager:
    """Run the body as user code under the current limits (:func:`set_limits`).

    Parameters
    ----------
    what : str
        How messages name the code ("your construction X's builder", "module 'my.py'").

    Returns
    -------
    context manager
        While it is open: the memory limit, the timer, and ``sys.stdout`` / ``sys.stderr`` captured (replayed
        on exit: under ``--json`` into stdout, which the command line keeps in the document).

    Raises
    ------
    UserCodeError
        The time limit expired, an allocation failed under the memory limit, or the code raised a
        ``BaseException`` that is neither an ``Exception`` nor a ``KeyboardInterrupt`` (its ``__cause__``);
        the message is computed while the limits hold (a ``__str__`` that raises or loops gives a fallback).
    KeyboardInterrupt
        Passed unchanged (Ctrl-C, SIGTERM).
    Exception
        Whatever else the code raised, unchanged, for the caller to report (word it with :func:`describe`).
    """
    return _Contained(what, _limits)


def describe(exc: BaseException, limit: int = 300) -> str:
    """The text of an exception raised by user code, on one line, computed under the limits (a ``__str__``
    that raises, loops or allocates gives a fallback, never an escape).

    Parameters
    ----------
    exc : BaseException
    limit : int
        At most this many characters.

    Returns
    -------
    str
        The message ("" when it is empty), or "(its message could not be computed)".
    """
    fallback = "(its message could not be computed)"
    try:
        if getattr(_active, "depth", 0):  # already under the limits (and their timer)
            text = str(exc)
        else:
            limits = _limits
            brief = Limits(timeout=min(limits.timeout or 1.0, 1.0), budget=limits.budget, json=limits.json,
                           command=limits.command)
            with _Contained("the message of an exception", brief):
                text = str(exc)
        if not isinstance(text, str):
            return fallback
        return " ".join(text.split())[:limit]
    except BaseException:  # noqa: BLE001 - whatever the user's __str__ does, a fallback
        return fallback


def _type_name(exc: BaseException | None) -> str:
    try:
        name = type(exc).__name__
        return name if isinstance(name, str) and name.isidentifier() else "an exception"
    except BaseException:  # noqa: BLE001 - a hostile metaclass
        return "an exception"


def _abandon(message: bytes) -> None:
    """The last resort against user code that swallows :class:`BuildTimeout`: one line on stderr (and,
    under ``--json``, one document on stdout), then exit 2 at once (``os._exit``: no cleanup can run
    user code again; temporary files of atomic writes are not open during a build). ``message`` is
    ``document NUL line``, made before the user's code ran: nothing here needs the Python stack."""
    try:
        doc, _, line = message.partition(b"\0")
        for fd, data in ((1, doc), (2, line)):
            if data:
                with contextlib.suppress(BaseException):
                    os.write(fd, data)
    finally:
        os._exit(2)


def _error(message: str, exc: BaseException | None, *, cause: bool = True) -> UserCodeError:
    error = UserCodeError(message)
    if cause:
        error.__cause__ = exc
    else:
        error.__suppress_context__ = True
    return error


def require_model_fits(model, what: str, task=None, k: int = 1, budget: Budget | None = None) -> int:
    """Measure a built model against the budget before anything is checked: the checker's peak from the
    arrays the builder returned (:func:`georecall.estimates.built_model_estimate`), not from the sizes its
    promise states.

    Parameters
    ----------
    model : Model
        What the builder returned.
    what : str
        How the message names the builder.
    task : Task, optional
        The task it was built for (its N and R give the number of queries; without it one query).
    k : int
        Hops (queries of length up to 2k, chain-of-thought counted).
    budget : Budget, optional
        Default: the current limits' budget (no check when there is none).

    Returns
    -------
    int
        The estimated peak in bytes.

    Raises
    ------
    InputError
        The estimate exceeds the budget (the message names the largest part).
    """
    budget = budget if budget is not None else _limits.budget
    k = int(k) if isinstance(k, (int, np.integer)) and not isinstance(k, bool) and k >= 1 else 1
    n_queries = int(task.N) * int(task.R) ** k if task is not None and hasattr(task, "N") else 1
    est = built_model_estimate(model, n_queries, 2 * k, budget,
                               what=f"checking {what}'s model (its sizes measured from its arrays)")
    if budget is not None:
        est.require(budget)
    return est.total
