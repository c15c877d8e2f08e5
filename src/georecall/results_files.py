"""Results files: the advisory lock a writer holds (:class:`FileLock` on ``<path>.lock``), what a results file
held when it was read (:class:`ResultsFile`), and the defensive reader (:func:`read_jsonl`).

A second writer either waits (with one message on stderr naming the holder's pid) or, after ``timeout``
seconds, raises :class:`LockTimeout` (an ``InputError``: one line, exit 2 on the command line); the lock dies
with its holder, even by SIGKILL. :func:`read_jsonl` skips a line longer than
:data:`georecall.io.MAX_LINE_BYTES` without holding it in memory, counts a line nested too deeply or holding
an integer too long for Python as torn, and, given a budget, counts the whole file against it
(:func:`~georecall.estimates.results_file_estimate`) before a byte is parsed. :func:`require_kind` refuses a
file that holds no record of the reader's kind (a model file, or a study file given to a sweep: one rule for
``--from``, ``--summary`` and ``--out``). Appending a line is
:func:`georecall.io.append_jsonl` (the atomic writers live there).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from georecall.errors import InputError
from georecall.estimates import results_file_estimate
from georecall.io import MAX_LINE_BYTES, lock_path, write_error
from georecall.memory import Budget

__all__ = ["FileLock", "LockTimeout", "ResultsFile", "read_jsonl", "require_kind"]

# Which command writes each kind of record: how a refusal guesses what a file of another kind holds.
_WRITERS = {"trial": "sweep records", "threshold": "sweep records", "transfer": "sweep records",
            "mechanism": "study records", "control": "study records"}


class LockTimeout(InputError):
    """Another process holds the lock and did not release it within the timeout."""


class FileLock:
    """An advisory, exclusive ``fcntl.flock`` lock on ``<path>.lock`` (a context manager).

    Parameters
    ----------
    path : str
        The file to protect (the lock file is ``path + ".lock"``, left in place after release: removing it
        would let two writers lock two different files).
    timeout : float or None
        Seconds to wait for a lock another process holds; ``None`` waits as long as it takes, ``0`` refuses at
        once. On expiry :class:`LockTimeout` is raised.
    message : callable or None
        Called once with a one-line text when the lock is busy and we start waiting (default: stderr).
    poll : float
        Seconds between attempts while waiting (the wait stays interruptible by Ctrl-C).

    Notes
    -----
    ``flock`` locks belong to the open file: a second :class:`FileLock` on the same path conflicts even within
    one process, and the kernel releases the lock when its holder dies, however it dies. The holder's pid is
    written into the lock file for the waiting message. On platforms without ``fcntl`` the lock is a no-op.
    """

    def __init__(self, path: str, *, timeout: float | None = None,
                 message: Callable[[str], None] | None = None, poll: float = 0.1):
        if timeout is not None and not (timeout >= 0):
            raise InputError(f"lock timeout must be a non-negative number of seconds or None, "
                             f"got {timeout!r}")
        self.path = lock_path(path)
        self.target = os.fspath(path)
        self.timeout = timeout
        self.poll = poll
        self.message = message if message is not None else (lambda text: print(text, file=sys.stderr,
                                                                                flush=True))
        self._fd: int | None = None

    def _holder(self) -> str:
        try:
            with open(self.path) as handle:
                pid = handle.read().strip()
            return f"pid {int(pid)}" if pid else "another process"
        except (OSError, ValueError):
            return "another process"

    def acquire(self) -> FileLock:
        """Take the lock, waiting or refusing as configured (see the class)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return self
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path!r} is already held by this object")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as exc:
            refusal = write_error(exc, self.path)
            if refusal is not None:
                raise refusal from None
            raise
        start, told = time.monotonic(), False
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                waited = time.monotonic() - start
                if self.timeout is not None and waited >= self.timeout:
                    raise LockTimeout(f"{self.target!r} is locked by {self._holder()} (another sweep writing "
                                      f"it?); gave up after {self.timeout:g} s")
                if not told:
                    told = True
                    limit = "" if self.timeout is None else f" (at most {self.timeout:g} s)"
                    self.message(f"waiting for {self.target!r}: locked by {self._holder()}{limit}; "
                                 f"Ctrl-C to stop")
                time.sleep(self.poll)
        except BaseException:
            os.close(fd)
            raise
        try:  # the pid is for the waiting message only: a full disk does not stop the lock
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            pass
        self._fd = fd
        return self

    def release(self) -> None:
        """Release the lock (idempotent)."""
        if self._fd is None:
            return
        import fcntl

        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def __enter__(self):
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass
class ResultsFile:
    """What :func:`read_jsonl` found in a results file (sweeps and studies alike).

    Attributes
    ----------
    records : list of dict
        Every usable record in file order, duplicates removed (by the reader's key).
    lines : int
        Non-empty lines read.
    torn : int
        Lines that are not JSON (cut short by an interrupted writer, or garbage).
    alien : int
        JSON lines that are not usable records (not an object, or a record lacking a field or of wrong type).
    duplicates : int
        Records whose key appeared earlier (skipped; the first one wins).
    kinds : dict of str to int
        How many JSON lines (usable or not) carry each ``"kind"`` (what :func:`require_kind` names).
    """

    records: list[dict] = field(default_factory=list)
    lines: int = 0
    torn: int = 0
    alien: int = 0
    duplicates: int = 0
    kinds: dict[str, int] = field(default_factory=dict)

    def problems(self) -> str | None:
        """One line counting what was skipped, or ``None`` if nothing was."""
        parts = [f"{count} {name}" for count, name in ((self.torn, "torn"), (self.alien, "alien"),
                                                       (self.duplicates, "duplicate")) if count]
        return f"skipped {', '.join(parts)} line(s) of {self.lines}" if parts else None


def read_jsonl(path: str, out, usable: Callable[[object], bool], key: Callable[[dict], object], *,
               budget: Budget | None = None, what: str = "reading the results file"):
    """Read a results file into ``out`` (an object with ``records``, ``lines``, ``torn``, ``alien``,
    ``duplicates`` and ``kinds``).

    Torn lines (a writer killed mid-line; not JSON, not UTF-8, nested too deeply or holding an integer too
    long for Python), alien lines (``usable`` says no, a line longer than :data:`MAX_LINE_BYTES`, or a key
    that is not hashable) and duplicates (``key`` seen before; ``key`` returning None means "never a
    duplicate") are counted and skipped.

    Parameters
    ----------
    path : str
        The JSONL file; a missing file gives ``out`` unchanged.
    out : object
        Receives the records and the counts.
    usable, key : callable
        Whether a parsed line is a record of ours (it must check every field's type before anything reads
        it), and its identity.
    budget : Budget or None
        The memory budget: the file is counted against it (:func:`georecall.estimates.results_file_estimate`)
        before it is parsed.
    what : str
        How a refusal names the job.

    Returns
    -------
    object
        ``out``.

    Raises
    ------
    InputError
        ``path`` is a directory, a device, unreadable, or (with ``budget``) too large for the budget.
    """
    if not os.path.exists(path):
        return out
    if os.path.isdir(path):
        raise InputError(f"results file {path!r} is a directory")
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InputError(f"cannot read results file {path!r}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"results file {path!r} is a device, pipe or socket, not a regular file")
    if budget is not None:
        results_file_estimate(what, path, info.st_size).require(budget)
    seen: set = set()
    try:
        with open(path, "rb") as handle:
            while True:
                raw = handle.readline(MAX_LINE_BYTES + 1)
                if not raw:
                    break
                if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):  # skip the rest of the line
                    while raw and not raw.endswith(b"\n"):
                        raw = handle.readline(MAX_LINE_BYTES)
                    out.lines += 1
                    out.alien += 1
                    continue
                raw = raw.strip()
                if not raw:
                    continue
                out.lines += 1
                try:
                    value = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError, RecursionError):  # ValueError: JSON, long integers
                    out.torn += 1
                    continue
                if isinstance(value, dict) and isinstance(value.get("kind"), str):
                    kind = value["kind"][:100]
                    if kind in out.kinds or len(out.kinds) < 100:
                        out.kinds[kind] = out.kinds.get(kind, 0) + 1
                if not usable(value):
                    out.alien += 1
                    continue
                identity = key(value)
                if identity is not None:
                    try:
                        hash(identity)
                    except TypeError:
                        out.alien += 1
                        continue
                    if identity in seen:
                        out.duplicates += 1
                        continue
                    seen.add(identity)
                out.records.append(value)
    except OSError as exc:
        raise InputError(f"cannot read results file {path!r}: {exc.strerror or exc}") from None
    return out


def require_kind(contents: ResultsFile, path: str, kinds: Collection[str], noun: str, *,
                 writing: bool = False) -> None:
    """Refuse a results file that holds no record of ``kinds`` (one rule for every reader and writer).

    Reading (``--from``, ``--summary``), a file without one such record is refused, an empty one too.
    Writing (``--out``, appended to and resumed from), a file that holds lines, none of them such a record,
    is refused; an empty or missing file, or one holding only a single torn line (a writer killed during
    its first line), is a fresh start. A file holding at least one such record is never refused here (its
    other lines are counted and skipped by the reader, as before).

    Parameters
    ----------
    contents : ResultsFile
        What :func:`read_jsonl` found in ``path``.
    path : str
        The file, as the refusal names it.
    kinds : collection of str
        The ``"kind"`` values of the caller's records (``{"mechanism", "control"}`` for a study).
    noun : str
        Those records in words (``"study records"``).
    writing : bool
        Whether the file is about to be appended to (see above).

    Raises
    ------
    InputError
        ``path`` holds no record of ``kinds`` (the message says what it holds instead).
    """
    if any(record.get("kind") in kinds for record in contents.records):
        return
    parsed = contents.lines - contents.torn
    if writing and parsed == 0 and contents.torn <= 1:
        return
    if contents.lines == 0:
        if not os.path.exists(path):
            raise InputError(f"results file {path!r} does not exist")
        raise InputError(f"{path} holds no {noun} (it is empty)")
    parts = []
    # lines of the caller's kinds that are not usable (a field missing or of the wrong type), then the others
    unusable = min(parsed, sum(count for kind, count in contents.kinds.items() if kind in kinds))
    if unusable:
        parts.append(f"{unusable} {'records' if unusable != 1 else 'record'} of that kind lacking a field it "
                     "needs (or of the wrong type)")
    if parsed - unusable:
        others = sorted({_WRITERS[kind] for kind in contents.kinds if kind in _WRITERS and kind not in kinds})
        guess = f": {' or '.join(others)}?" if others else ""
        count = parsed - unusable
        parts.append(f"{count} line{'s' if count != 1 else ''} of another kind{guess}")
    if contents.torn:
        parts.append(f"{contents.torn} line{'s that are' if contents.torn != 1 else ' that is'} not JSON"
                     + ("" if parsed else ": a model or other binary file?"))
    raise InputError(f"{path} holds no {noun} ({'; '.join(parts)})")
