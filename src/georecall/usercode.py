"""Containment of user code: a construction's module and builder (``--construction FILE.py:ATTR``) run under a
time limit and a memory limit, and whatever they raise is reported as theirs.

What :func:`limited` guarantees around a call into user code (the registry wraps the import of a user's
module, its ``build`` and its ``nominal_promise`` in it):

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
  the builder returned (not from the sizes its promise states) and refuses it over the budget before
  anything is checked.

Why in-process and not a child process: the builder's result is a Model of NumPy arrays, a Promise and the
spec's callables, used directly by the checker; a child would have to send them back through a pipe
(pickle, which the project never unpickles from outside, or a format of its own for every field), and
forking a process that runs BLAS threads or a Dask client is unsafe. The limits above contain what a
builder can do by mistake (raise anything, loop, allocate too much); code written to escape them (a
C extension, ``os._exit``) is the user's own program, run with the user's own rights.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from georecall import __version__
from georecall.errors import InputError, UserCodeError
from georecall.estimates import built_model_estimate
from georecall.memory import Budget

try:  # POSIX only
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None  # type: ignore[assignment]

__all__ = ["ABANDON_AFTER", "DEFAULT_BUILD_TIMEOUT", "BuildTimeout", "Limits", "current_limits", "limited",
           "require_model_fits", "set_limits"]

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


@contextlib.contextmanager
def _memory_limit(budget: Budget | None) -> Iterator[int | None]:
    """``RLIMIT_AS`` lowered to the current size plus ``budget`` (yields the limit in bytes, or None)."""
    if budget is None or resource is None or not hasattr(resource, "RLIMIT_AS"):
        yield None
        return
    used = _address_space()
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    except (OSError, ValueError):
        yield None
        return
    if used is None:
        yield None
        return
    limit = used + budget.max_bytes
    for existing in (soft, hard):
        if existing != resource.RLIM_INFINITY:
            limit = min(limit, existing)
    try:
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    except (OSError, ValueError):
        yield None
        return
    try:
        yield limit
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def _time_limit(timeout: float | None, what: str) -> Iterator[bool]:
    """A ``SIGALRM`` timer raising :class:`BuildTimeout` after ``timeout`` seconds, then every second (yields
    whether it is armed)."""
    if timeout is None or threading.current_thread() is not threading.main_thread() \
            or not hasattr(signal, "setitimer"):
        yield False
        return

    fired = [0]

    def expired(signum, frame):
        fired[0] += 1
        if fired[0] > ABANDON_AFTER:  # the code swallowed every interruption: stop the process, say why
            _abandon(f"{what} did not finish within {timeout:g} s (--build-timeout) and ignored "
                     f"{ABANDON_AFTER} interruptions: stopped")
        raise BuildTimeout(what)

    try:
        previous = signal.signal(signal.SIGALRM, expired)
    except (ValueError, OSError):  # pragma: no cover - not the main interpreter
        yield False
        return
    signal.setitimer(signal.ITIMER_REAL, timeout, 1.0)
    try:
        yield True
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def limited(what: str) -> Iterator[None]:
    """Run the body as user code under the current limits (:func:`set_limits`).

    Parameters
    ----------
    what : str
        How messages name the code ("your construction X's builder", "module 'my.py'").

    Raises
    ------
    UserCodeError
        The time limit expired, an allocation failed under the memory limit, or the code raised a
        ``BaseException`` that is neither an ``Exception`` nor a ``KeyboardInterrupt`` (its ``__cause__``).
    KeyboardInterrupt
        Passed unchanged (Ctrl-C, SIGTERM).
    Exception
        Whatever else the code raised, unchanged, for the caller to report.
    """
    depth = getattr(_active, "depth", 0)
    limits = _limits
    if depth:  # nested (a builder calling a guarded builder): the outer limits already apply
        yield
        return
    _active.depth = 1
    try:
        with _memory_limit(limits.budget) as memory_limit, _time_limit(limits.timeout, what):
            try:
                yield
            except MemoryError as exc:
                if memory_limit is None:
                    raise
                budget = limits.budget.gib if limits.budget is not None else math.nan
                raise _error(f"{what} raised MemoryError under its memory limit (the run's budget of "
                             f"{budget:.3g} GiB, --max-gib)", exc) from exc
    except BuildTimeout as exc:
        raise _error(f"{what} did not finish within {limits.timeout:g} s (--build-timeout)", exc) from None
    except (KeyboardInterrupt, Exception):
        raise
    except BaseException as exc:  # SystemExit, GeneratorExit, a user's own BaseException subclass
        text = " ".join(str(exc).split())[:300]
        raise _error(f"{what} raised {type(exc).__name__}" + (f": {text}" if text else ""), exc) from exc
    finally:
        _active.depth = 0


def _abandon(message: str) -> None:
    """The last resort against user code that swallows :class:`BuildTimeout`: one line on stderr (and,
    under ``--json``, one document on stdout), then exit 2 at once (``os._exit``: no cleanup can run
    user code again; temporary files of atomic writes are not open during a build)."""
    line = f"georecall: error: {message}"
    try:  # the real streams: the command's stdout is being captured
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        if _limits.json:
            doc = {"command": _limits.command, "version": __version__, "status": 2, "error": line}
            os.write(1, (json.dumps(doc, indent=2) + "\n").encode())
        os.write(2, (line + "\n").encode())
    finally:
        os._exit(2)


def _error(message: str, cause: BaseException) -> UserCodeError:
    error = UserCodeError(message)
    error.__cause__ = cause
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
