"""Safe file output: atomic writes and output paths checked before the work (results files and their lock:
:mod:`georecall.results_files`).

- :func:`validate_output_path` is called *before* a command does its work: the directory must exist and be
  writable (tested by creating and removing a probe file, which is also right for root and read-only mounts),
  the target must not be a directory. It returns the path that will be written (with a required suffix added),
  so a command reports the path it wrote.
- :func:`atomic_write` writes bytes, text or whatever a callback writes to a file object under a temporary
  name in the target's directory, flushes and fsyncs it, then renames it over the target
  (:func:`os.replace`). An interruption at any point (Ctrl-C, SIGTERM, SIGKILL, a full disk) leaves either
  the old file or the new one, never a half-written file at the requested path. A temporary file orphaned
  by SIGKILL is named ``.<name>.tmp-<pid>-<random>`` next to the target.
- :func:`append_jsonl` appends one JSON line, closing a line an interrupted writer left unfinished. A
  results file's lock and its defensive reader are :mod:`georecall.results_files`.
- A path is checked against the file system's limits before the work: every name on it, and the temporary
  name a file is first written under (:func:`temporary_prefix`), must fit ``NAME_MAX`` and the whole path
  ``PATH_MAX``; a symlink loop or a dangling link on the way is refused (:func:`check_path`).
- Output paths that are devices, pipes or sockets (``/dev/null``, ``/dev/stdout``) are refused: an atomic
  write replaces a regular file, and a suffix added to ``/dev/null`` would create ``/dev/null.npz``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import IO, Any

import numpy as np

from georecall.errors import InputError
from georecall.state_dict import from_state_dict, to_state_dict  # re-exported: docs/model_format.md

__all__ = ["MAX_LINE_BYTES", "WRITE_ERRORS", "WriteError", "append_jsonl", "atomic_write", "check_path",
           "damaged_input", "from_state_dict", "lock_path", "parse_json", "signals_deferred", "strict_json",
           "temporary_prefix", "to_state_dict", "validate_output_path", "write_error"]

# The longest results line read (the longest record georecall writes, a study record, is a few tens of kB);
# a longer line is skipped and counted as alien, read in pieces of this size so it never sits in memory.
MAX_LINE_BYTES = 1 << 20


# mkstemp's random part of a temporary name (tempfile._RandomNameSequence draws 8 characters)
_TEMPORARY_RANDOM = 8


def temporary_prefix(path: str) -> str:
    """The prefix of the temporary name :func:`atomic_write` writes ``path`` under first, in the same folder:
    ``.<name>.tmp-<pid>-`` (``mkstemp`` adds 8 random characters).

    Parameters
    ----------
    path : str

    Returns
    -------
    str
    """
    return f".{os.path.basename(os.fspath(path))}.tmp-{os.getpid()}-"


def _limit(directory: str, name: str, default: int) -> int:
    """``os.pathconf(directory, name)`` of the nearest existing folder, or ``default``."""
    while directory and not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    try:
        value = os.pathconf(directory or os.sep, name)
    except (OSError, ValueError, AttributeError):
        return default
    return value if value and value > 0 else default


def _explain(exc: OSError, what: str, path: str, where: str) -> InputError:
    """One line for an OSError met while resolving ``where`` on the way to ``path``."""
    if exc.errno == errno.ELOOP:
        return InputError(f"{what} {path!r}: {where!r} is a symbolic link loop")
    if exc.errno == errno.ENAMETOOLONG:
        return InputError(f"{what} {path!r} is too long for the file system")
    if exc.errno == errno.ENOTDIR:
        return InputError(f"{what} {path!r}: a part of {where!r} is a file, not a directory")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return InputError(f"{what} {path!r}: {where!r} cannot be reached ({exc.strerror})")
    return InputError(f"{what} {path!r}: {where!r}: {exc.strerror or exc}")


def check_path(path: str, *, what: str = "output file", names_beside: tuple[str, ...] = (),
               room_below: int = 0) -> str:
    """Check that ``path`` fits the file system's limits and resolves: every name on it at most
    ``NAME_MAX`` bytes, each of ``names_beside`` (files written in the same folder, such as the temporary
    name of an atomic write) too, the whole path, ``room_below`` bytes more, at most ``PATH_MAX``; no
    symbolic-link loop, dangling link or file on the way to the nearest existing ancestor.

    Parameters
    ----------
    path : str
        The path (need not exist).
    what : str
        How messages name it.
    names_beside : tuple of str
        Names that will be created in the folder of ``path``.
    room_below : int
        For a folder, the length of the longest ``/name`` that will be written inside it.

    Returns
    -------
    str
        ``path``, unchanged.

    Raises
    ------
    InputError
        One line naming the path and the limit or the link.
    """
    absolute = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(absolute)
    name_max = _limit(directory, "PC_NAME_MAX", 255)
    path_max = _limit(directory, "PC_PATH_MAX", 4096)
    for name in [part for part in absolute.split(os.sep) if part] + list(names_beside):
        size = len(os.fsencode(name))
        if size > name_max:
            shown = name if len(name) <= 40 else name[:20] + "…" + name[-12:]
            also = "" if name in absolute.split(os.sep) else ", the name it is first written under"
            raise InputError(f"{what} {path!r}: the name {shown!r}{also} is {size} bytes, longer than the "
                             f"{name_max} bytes a file name may have here")
    longest = max([len(os.fsencode(absolute)) + room_below]
                  + [len(os.fsencode(os.path.join(directory, n))) for n in names_beside])
    if longest >= path_max:
        raise InputError(f"{what} {path!r} is too long: {longest} bytes with the names written there, the "
                         f"limit is {path_max}")
    current = absolute
    while True:  # the nearest existing ancestor, and no broken link on the way to it
        try:
            os.stat(current)
            break
        except FileNotFoundError:
            if os.path.islink(current):
                raise InputError(f"{what} {path!r}: {current!r} is a dangling symbolic link") from None
        except OSError as exc:
            raise _explain(exc, what, path, current) from None
        parent = os.path.dirname(current)
        if parent == current:
            break
        current = parent
    return os.fspath(path)


def validate_output_path(path: str, *, suffix: str | None = None, what: str = "output file") -> str:
    """Check, before any work, that ``path`` can be written; return the path that will be written.

    Parameters
    ----------
    path : str
        The requested output path.
    suffix : str, optional
        A suffix the written file must have (``".npz"``); added when ``path`` lacks it, and the returned path
        carries it.
    what : str
        How the messages name the file (``"results file"``, ``"model file"``).

    Returns
    -------
    str
        The path that will be written.

    Raises
    ------
    InputError
        One line naming the path and what is wrong: empty path, missing directory, a directory where a file
        is asked for, a device, pipe or socket (``/dev/null``), an unwritable directory or target.
    """
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise InputError(f"{what}: an output path is required, got {path!r}")
    path = os.fspath(path)
    if "\0" in path:
        raise InputError(f"{what}: the path {path!r} contains a NUL character")
    for candidate in (path, path + suffix if suffix and not path.endswith(suffix) else path):
        try:
            mode = os.stat(candidate).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            raise InputError(f"{what} {candidate!r} is a device, pipe or socket, not a regular file: give a "
                             "file name")
    if suffix and not path.endswith(suffix):
        path += suffix
    check_path(path, what=what, names_beside=(temporary_prefix(path) + "x" * _TEMPORARY_RANDOM,
                                              os.path.basename(lock_path(path))))
    if os.path.isdir(path):
        raise InputError(f"{what} {path!r} is a directory; give a file name")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.exists(directory):
        raise InputError(f"{what} {path!r}: directory {directory!r} does not exist")
    if not os.path.isdir(directory):
        raise InputError(f"{what} {path!r}: {directory!r} is not a directory")
    try:  # a real probe: os.access says yes to root on a read-only mount
        fd, probe = tempfile.mkstemp(prefix=".georecall-probe-", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise InputError(f"{what} {path!r}: directory {directory!r} is not writable{_why(exc)}") from None
    if os.path.exists(path):
        try:
            with open(path, "ab"):
                pass
        except OSError as exc:
            raise InputError(f"{what} {path!r} is not writable{_why(exc)}") from None
    return path


# What a write can meet that is the disk's or the user's, not a bug: each becomes one line naming the path.
WRITE_ERRORS: dict[int, str] = {
    errno.ENOSPC: "no space left on the disk",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.ENAMETOOLONG: "the name is too long for the file system",
    errno.EFBIG: "the file is too large for the file system",
    errno.EIO: "an input/output error on the disk",
}


def _why(exc: OSError) -> str:
    """``: <the reason in words> (<strerror>)`` for a refusal in :data:`WRITE_ERRORS` (the same words the
    writer uses: "the file system is read-only"), else `` (<strerror>)``."""
    detail = f"({exc.strerror or exc})"
    return f": {WRITE_ERRORS[exc.errno]} {detail}" if exc.errno in WRITE_ERRORS else f" {detail}"


class WriteError(InputError):
    """A write the disk refused (full, read-only, over quota, not permitted, a name too long): one line naming
    the path and the reason.

    Attributes
    ----------
    path : str
        The file whose write failed (as the user named it).
    reason : str
        Why, in words ("no space left on the disk (No space left on device)").
    """

    def __init__(self, path: str, reason: str):
        super().__init__(f"cannot write {os.fspath(path)!r}: {reason}")
        self.path = os.fspath(path)
        self.reason = reason

    def at(self, path: str) -> WriteError:
        """The same refusal naming ``path`` (the file the user asked for, not the temporary written first).

        Parameters
        ----------
        path : str

        Returns
        -------
        WriteError
        """
        return WriteError(path, self.reason)


def write_error(exc: BaseException, path: str) -> WriteError | None:
    """The one-line refusal for an ``OSError`` met while writing ``path`` (the disk full, read-only, a quota,
    permissions, a name too long), or None for any other exception (which stays what it is).

    Parameters
    ----------
    exc : BaseException
        What the write raised.
    path : str
        The file being written (named in the message).

    Returns
    -------
    WriteError or None
        ``cannot write '<path>': <reason>`` (a ``WriteError`` already raised is renamed to ``path``).
    """
    if isinstance(exc, WriteError):
        return exc.at(path)
    if not isinstance(exc, OSError) or exc.errno not in WRITE_ERRORS:
        return None
    return WriteError(path, f"{WRITE_ERRORS[exc.errno]} "
                            f"({exc.strerror or errno.errorcode.get(exc.errno, exc.errno)})")


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; the rename is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM back for the body, answering them when it ends: around the creation of a
    temporary, so that a signal cannot land between the file's creation and the moment its name is known to
    the code that removes it.

    Python runs signal handlers in the main thread only, whichever thread the kernel delivers the signal to;
    so the handlers are swapped for ones that note the signal, and the previous handler is called on exit
    (``KeyboardInterrupt`` raised then, in the caller's protected block). In another thread: a no-op.

    Yields
    ------
    None
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    noted: list[int] = []

    def note(signum, frame) -> None:
        noted.append(signum)

    previous: dict[int, Any] = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, note)
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        if noted:
            first = noted[0]
            handler = previous.get(first)
            if callable(handler):
                handler(first, None)  # raises (KeyboardInterrupt) here, in the caller's protected block
            elif handler in (signal.SIG_DFL, None):
                os.kill(os.getpid(), first)  # its default action, now


def atomic_write(path: str, data: bytes | str | Callable[[IO[bytes]], object], *,
                 encoding: str = "utf-8") -> str:
    """Write ``path`` atomically: a temporary file in the same directory, fsync, :func:`os.replace`.

    Parameters
    ----------
    path : str
        The target. Its directory must exist (see :func:`validate_output_path`).
    data : bytes, str or callable
        The content: bytes, text (encoded with ``encoding``) or a callback that writes to the binary file
        object it is given (``lambda f: np.savez_compressed(f, **arrays)``; no suffix is added to a file
        object).
    encoding : str
        Encoding of text ``data``.

    Returns
    -------
    str
        ``path``: the path written.

    Raises
    ------
    InputError
        The disk is full, read-only, over quota, not writable or the name too long (:func:`write_error`).
    Exception
        Whatever else the write or the callback raised (also ``KeyboardInterrupt``); in every case the
        temporary file is removed and an existing file at ``path`` is left as it was.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:  # the temporary is created inside the protected block: a signal at any instant removes it
        with signals_deferred():  # (and none lands between its creation and ``tmp`` naming it)
            fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path), dir=directory)
        with os.fdopen(fd, "wb") as handle:
            if callable(data):
                data(handle)
            elif isinstance(data, str):
                handle.write(data.encode(encoding))
            elif isinstance(data, (bytes, bytearray, memoryview)):
                handle.write(data)
            else:
                raise TypeError(f"atomic_write takes bytes, str or a callback, got {type(data).__name__}")
            handle.flush()
            os.fsync(handle.fileno())
        if os.path.exists(path):  # keep the target's permission bits
            try:
                os.chmod(tmp, os.stat(path).st_mode & 0o7777)
            except OSError:
                pass
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
        tmp = None
    except BaseException as exc:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        refusal = write_error(exc, path)
        if refusal is not None:
            raise refusal from None
        raise
    _fsync_directory(directory)
    return path


def append_jsonl(path: str, record: dict) -> None:
    """Append one JSON line to ``path`` and fsync it.

    A line left unfinished by an interrupted writer is closed with a newline first, so the new record starts
    on a line of its own (the torn line is then skipped, and counted, by the reader). Non-finite floats are
    written as ``null`` (strict JSON). Does not lock: hold a :class:`FileLock` around appends when other
    processes may write the same file.

    Parameters
    ----------
    path : str
        The results file (created if absent).
    record : dict
        A JSON-able record.

    Raises
    ------
    InputError
        The disk is full, read-only, ... (:func:`write_error`); the file is left at its previous length.
    OSError
        The file cannot be opened or written for another reason.
    TypeError
        A value that JSON cannot encode.
    """
    line = json.dumps(_strict(record), sort_keys=True, allow_nan=False) + "\n"
    try:
        handle = open(path, "a+b", buffering=0)  # unbuffered: a failed write fails here, not at close
    except OSError as exc:
        refusal = write_error(exc, path)
        if refusal is not None:
            raise refusal from None
        raise
    with handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        try:
            data = line.encode()
            if size > 0:
                handle.seek(-1, os.SEEK_END)
                if handle.read(1) != b"\n":
                    data = b"\n" + data
            view = memoryview(data)
            while view:  # a raw write may write part of it
                view = view[handle.write(view):]
            os.fsync(handle.fileno())
        except OSError as exc:  # a full disk mid-line: the file goes back to what it was, no partial line
            with suppress(OSError):
                handle.truncate(size)
            refusal = write_error(exc, path)
            if refusal is not None:
                raise refusal from None
            raise


def _strict(value):
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def strict_json(value, **options) -> str:
    """``json.dumps`` that never writes a non-finite number: NaN and ±inf become ``null`` (strict JSON,
    whatever a report computed), NumPy scalars plain numbers.

    Parameters
    ----------
    value : object
        JSON data (dicts, lists, numbers, strings); NumPy scalars allowed.
    **options
        Passed to :func:`json.dumps` (``indent``, ``sort_keys``, ``default``); ``allow_nan`` is always False.

    Returns
    -------
    str
    """
    options["allow_nan"] = False
    return json.dumps(_strict(value), **options)


@contextmanager
def damaged_input(path: str, what: str = "file") -> Iterator[None]:
    """Turn any exception raised while reading ``path`` (NumPy's ``.npy``/``.npz`` readers, zipfile, JSON)
    into one :class:`InputError` line: a truncated member ("EOF: reading array data"), a bad CRC, a header
    NumPy cannot parse. An ``InputError`` or ``MemoryError`` raised inside passes unchanged;
    ``BaseException`` s that are not ``Exception`` s (Ctrl-C) are not touched.

    Parameters
    ----------
    path : str
        The file being read.
    what : str
        How the message names it.

    Raises
    ------
    InputError
        ``cannot read <what> '<path>': <the reader's first line>``.
    """
    try:
        yield
    except (InputError, MemoryError):  # a refusal stays one; running out of memory is not damage
        raise
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        raise InputError(f"cannot read {what} {os.fspath(path)!r}: {first}") from None


def parse_json(text: str, path: str, what: str = "file"):
    """Parse JSON read from ``path``: any failure (not JSON, nested past the interpreter's recursion limit,
    an integer too long for Python) is one :class:`InputError` naming the file.

    Parameters
    ----------
    text : str
        The JSON text.
    path : str
        Where it was read (named in the message).
    what : str
        How the message names the text ("the model header").

    Returns
    -------
    object
        The parsed value.

    Raises
    ------
    InputError
        ``'<path>': <what> is not JSON (<why>)``.
    """
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{os.fspath(path)!r}: {what} is not JSON (nested too deeply)") from None
    except ValueError as exc:  # JSONDecodeError, an integer of too many digits
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:120]
        raise InputError(f"{os.fspath(path)!r}: {what} is not JSON ({why})") from None


def lock_path(path: str) -> str:
    """The lock file of ``path``: ``<path>.lock``.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    str
    """
    return os.fspath(path) + ".lock"
