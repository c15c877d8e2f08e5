"""Where trials run: a ``concurrent.futures.Executor`` behind one small interface.

:func:`open_executor` returns an :class:`ExecutorHandle` (a context manager) for

- ``scheduler=None, workers=1``: :class:`InlineExecutor`, the trial runs in the calling process when it is
  submitted (no processes, Ctrl-C acts at once);
- ``scheduler=None, workers=W > 1``: a ``ProcessPoolExecutor`` of W spawned processes with one BLAS thread
  each. Workers ignore SIGINT (the driver handles Ctrl-C and kills them), and die with their parent even when
  it is killed with SIGKILL: on Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, everywhere a watchdog thread that
  polls the parent's pid;
- ``scheduler="local:W"``: a Dask ``LocalCluster`` on 127.0.0.1 with W single-threaded worker processes,
  through ``Client.get_executor()``. Its HTTP server (Dask starts one even without a dashboard, on 8787 by
  default, warning when that port is taken) listens on a port the system picks, unless ``dashboard`` names
  an address; only then is the dashboard's link reported;
- ``scheduler="tcp://HOST:PORT"`` (any Dask address): a ``distributed.Client`` connected to a running
  scheduler. Before Dask connects, a handshake probe (:func:`probe_scheduler`) reads what the peer sends
  first, under a hard deadline of ``connect_timeout`` seconds: an unreachable port, a peer that accepts and
  stays silent (an HTTP server waits for a request), or one that sends anything but a Dask handshake (garbage,
  an endless stream) is one ``InputError`` line within that time. Dask's own log messages (tracebacks of
  lost connections) are silenced while the handle is open.

Waiting for workers. A scheduler without workers, or one whose workers all went away, would leave the driver
waiting without a word: :meth:`ExecutorHandle.watch` (called by the drivers between results) prints one line
on stderr, even under ``--quiet``, when nothing has finished for :data:`QUIET_NOTE` seconds, and gives up
(``InputError``) when no worker has been connected for ``worker_timeout`` seconds (default
:data:`WORKER_TIMEOUT`). A worker that Dask gave up on (``KilledWorker``: killed, e.g. for memory, on every
attempt) is reported in one line by :meth:`ExecutorHandle.failure`.

Dask is imported only for the last two (the optional ``distributed`` extra). The driver alone
writes results: executors only return them. A worker lost mid-trial is handled by the engine: Dask
reschedules the task on another worker; a broken local pool is restarted by :meth:`ExecutorHandle.restart`
and the driver resubmits what was in flight.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import resource_tracker

from georecall.errors import InputError

__all__ = ["DISTRIBUTED_HINT", "QUIET_NOTE", "WORKER_TIMEOUT", "ExecutorHandle", "InlineExecutor",
           "open_executor", "parse_scheduler", "probe_scheduler", "spawning_with_sigint_held"]

DISTRIBUTED_HINT = "pip install '.[distributed]' in georecall's clone"
WORKER_TIMEOUT = 120.0  # seconds without any Dask worker before a run gives up
QUIET_NOTE = 60.0  # seconds without a finished result before one line says what the driver waits for
_HANDSHAKE_LIMIT = 1 << 16  # bytes: a Dask handshake is about 60
_WORKER_POLL = 2.0  # seconds between looks at the scheduler's worker count
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_PR_SET_PDEATHSIG = 1


class InlineExecutor(Executor):
    """An executor that runs each call in the calling thread when it is submitted (the ``workers=1`` path)."""

    def __init__(self):
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """Run ``fn(*args, **kwargs)`` now; return a finished future holding its result or exception.

        ``KeyboardInterrupt`` and ``SystemExit`` are not captured: they propagate to the caller at once.

        Parameters
        ----------
        fn : callable
            The call.
        *args, **kwargs
            Its arguments.

        Returns
        -------
        concurrent.futures.Future
            Done: its result, or the ``Exception`` the call raised.

        Raises
        ------
        RuntimeError
            After :meth:`shutdown`.
        """
        if self._shutdown:
            raise RuntimeError("cannot schedule new futures after shutdown")
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - the future carries any error of the call, as a pool's does
            future.set_exception(exc)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Refuse further submissions.

        Parameters
        ----------
        wait, cancel_futures : bool
            Ignored: every submitted call has already finished.
        """
        self._shutdown = True


def _die_with_parent(parent_pid: int) -> None:
    """In a worker: exit when ``parent_pid`` is gone (pdeathsig on Linux plus a polling thread)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no prctl: the watchdog below still works
            pass
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="georecall-parent-watchdog", daemon=True).start()


def _local_worker_init(parent_pid: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the driver handles it
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # blocked since spawning_with_sigint_held
    _die_with_parent(parent_pid)


@contextlib.contextmanager
def spawning_with_sigint_held():
    """Processes started in this block cannot die of SIGINT before they ignore it; the caller's is kept.

    A spawned worker spends its first second importing before the pool's initializer ignores SIGINT; a Ctrl-C
    sent to the process group in that window killed it with a traceback. Inside this block SIGINT is blocked
    in the calling thread; a process started here inherits the block (a signal mask survives ``fork`` and
    ``exec``), so a SIGINT sent to it waits, pending, until :func:`_local_worker_init` has set it to ignored
    and unblocks it (a pending signal whose action is "ignore" is discarded). This process's own handler is
    never changed: a Ctrl-C that arrives meanwhile is taken by another thread's handler or stays pending until
    the block ends, and is raised as ``KeyboardInterrupt`` either way; never lost. Threads started inside the
    block (the pool's manager thread) inherit the mask, which is harmless: Python handles signals in the main
    thread.
    """
    resource_tracker.ensure_running()  # started now: starting it unblocks SIGINT in the caller
    saved_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, saved_mask)


def _ready() -> int:
    return os.getpid()


def parse_scheduler(scheduler: str | None) -> tuple[str, int | str | None]:
    """Classify a ``--scheduler`` value: ``("pool", None)``, ``("local", W)`` or ``("address", address)``.

    Parameters
    ----------
    scheduler : str or None
        ``None``, ``"local"``, ``"local:W"`` or a Dask address ``"tcp://HOST:PORT"``.

    Returns
    -------
    tuple
        ``(kind, value)``.

    Raises
    ------
    InputError
        A malformed value (one line saying what is accepted).
    """
    if scheduler is None:
        return "pool", None
    if not isinstance(scheduler, str):
        raise TypeError(f"scheduler must be a string, got {scheduler!r}")
    text = scheduler
    if not text.isascii() or text != text.strip() or any(c.isspace() for c in text):
        raise InputError(f"scheduler {scheduler!r}: no spaces, newlines or non-ASCII characters")
    if text == "local" or text.startswith("local:"):
        count = text[len("local:"):] if text.startswith("local:") else str(os.cpu_count() or 1)
        if not count.isdigit() or int(count) < 1:
            raise InputError(f"scheduler {scheduler!r}: use local:W with W a positive number of workers")
        return "local", int(count)
    if "://" in text and text.split("://", 1)[1]:
        return "address", text
    raise InputError(f"scheduler {scheduler!r}: use tcp://HOST:PORT (a running Dask scheduler) or local:W")


class ExecutorHandle:
    """An executor plus what the driver needs around it.

    Attributes
    ----------
    executor : concurrent.futures.Executor
        Where ``submit`` sends trials.
    kind : str
        ``"inline"``, ``"pool"``, ``"local"`` (a ``LocalCluster``) or ``"address"`` (a remote scheduler).
    description : str
        One line for progress output (``"2 local processes"``, ``"Dask scheduler tcp://127.0.0.1:8786"``).
    client : distributed.Client or None
        The Dask client (``None`` for the local executors).
    """

    def __init__(self, kind: str, executor: Executor, description: str, *, client=None, cluster=None,
                 factory: Callable[[], Executor] | None = None, worker_timeout: float = WORKER_TIMEOUT,
                 say: Callable[[str], None] | None = None, quiet_logs: Callable[[], None] | None = None):
        self.kind = kind
        self.executor = executor
        self.description = description
        self.client = client
        self.cluster = cluster
        self._factory = factory
        self.restarts = 0
        self.worker_timeout = worker_timeout
        self._say = say or _stderr
        self._restore_logs = quiet_logs
        now = time.monotonic()
        self._last_result = self._last_note = self._last_poll = self._workers_seen = now
        self._workers = -1

    def _worker_count(self) -> int:
        try:
            return len(self.client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - a lost scheduler: the futures say so (cancelled)
            return self._workers if self._workers >= 0 else 0

    def watch(self, progressed: bool) -> None:
        """Between results (the drivers call it after each wait): with Dask, say once in a while what the run
        waits for when nothing finishes, and give up when no worker has been connected for
        ``worker_timeout`` seconds.

        Parameters
        ----------
        progressed : bool
            Whether a result arrived since the last call.

        Raises
        ------
        InputError
            No Dask worker for ``worker_timeout`` seconds (the records so far are kept).
        """
        now = time.monotonic()
        if progressed:
            self._last_result = self._last_note = now
        if self.client is None:
            return
        if now - self._last_poll >= _WORKER_POLL or self._workers < 0:
            self._last_poll = now
            self._workers = self._worker_count()
            if self._workers > 0:
                self._workers_seen = now
        if self._workers == 0 and now - self._workers_seen >= self.worker_timeout:
            raise InputError(f"no Dask worker connected to {self.description} for {self.worker_timeout:g} s: "
                             "start workers (dask worker ADDRESS) and rerun to resume")
        if now - self._last_note >= QUIET_NOTE:
            self._last_note = now
            if self._workers == 0:
                left = self.worker_timeout - (now - self._workers_seen)
                self._say(f"waiting for Dask workers: none connected to {self.description} (giving up in "
                          f"{max(0.0, left):.0f} s)")
            else:
                self._say(f"no result for {now - self._last_result:.0f} s; {self._workers} Dask worker(s) "
                          f"connected to {self.description}")

    def failure(self, exc: BaseException) -> BaseException:
        """What to raise for a job's exception: one ``InputError`` line for a worker Dask gave up on
        (``KilledWorker``) or a lost connection to the scheduler; otherwise ``exc`` itself.

        Parameters
        ----------
        exc : BaseException
            The exception a job's future holds.

        Returns
        -------
        BaseException
            The exception to raise.
        """
        if self.client is None:
            return exc
        name = type(exc).__name__
        if name == "KilledWorker":
            return InputError(f"Dask workers of {self.description} died running a job, on every attempt "
                              "(killed for memory?): lower the sizes, or give the workers more memory")
        if name in ("CommClosedError", "FutureCancelledError", "CancelledError") or isinstance(
                exc, (OSError, TimeoutError)):
            return InputError(f"lost {self.description} ({name}): the records so far are kept; rerun to "
                              "resume")
        return exc

    def is_lost_worker(self, exc: BaseException) -> bool:
        """Whether ``exc`` means a local worker process died (restart the pool and rerun the trial).

        Parameters
        ----------
        exc : BaseException
            The exception a call's future holds, or that ``submit`` raised.

        Returns
        -------
        bool
        """
        return self.kind == "pool" and isinstance(exc, BrokenProcessPool)

    def restart(self) -> None:
        """Replace a broken local pool by a fresh one (the caller resubmits what was in flight)."""
        if self._factory is None:
            raise RuntimeError(f"a {self.kind} executor cannot be restarted")
        self.kill()
        self.executor = self._factory()
        self.restarts += 1

    def kill(self) -> None:
        """Stop now: cancel queued work and kill local worker processes (in-flight results are discarded)."""
        executor = self.executor
        if isinstance(executor, ProcessPoolExecutor):
            for process in list((getattr(executor, "_processes", None) or {}).values()):
                try:
                    process.kill()
                except (OSError, AttributeError, ValueError):
                    pass
            executor.shutdown(wait=False, cancel_futures=True)
            for process in list((getattr(executor, "_processes", None) or {}).values()):
                try:
                    process.join(1.0)
                except (AssertionError, ValueError, AttributeError):
                    pass
        elif self.client is not None:
            with contextlib.suppress(Exception):  # best effort on the way out
                executor.shutdown(wait=False)  # cancels the submitted tasks on the cluster
        else:
            executor.shutdown(wait=False)

    def close(self) -> None:
        """Release everything (pool processes, Dask client, local cluster); idempotent."""
        if isinstance(self.executor, ProcessPoolExecutor):
            self.executor.shutdown(wait=True)
        else:
            self.executor.shutdown(wait=False)
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.close(timeout=5)
            self.client = None
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close(timeout=5)
            self.cluster = None
        if self._restore_logs is not None:
            restore, self._restore_logs = self._restore_logs, None
            restore()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.kill()
        self.close()


def _process_pool(workers: int) -> ProcessPoolExecutor:
    """W spawned processes with one BLAS thread each, started now (so that setting reaches all of them)."""
    saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    os.environ.update({name: "1" for name in _THREAD_VARIABLES})
    try:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_local_worker_init, initargs=(os.getpid(),))
        # W submissions at once launch W processes (one per submission while none is idle), now, while the
        # variables are set, and from this thread (the one PR_SET_PDEATHSIG watches); SIGINT held off from
        # their first instruction (spawning_with_sigint_held), ignored from the initializer on.
        with spawning_with_sigint_held():
            ready = [pool.submit(_ready) for _ in range(workers)]
        for future in ready:
            future.result()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return pool


def _stderr(text: str) -> None:
    print(f"georecall: {text}", file=sys.stderr, flush=True)


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise InputError(f"--scheduler needs Dask distributed, which is not installed: {DISTRIBUTED_HINT}") \
            from None
    return distributed


def _quiet_dask_logs() -> Callable[[], None]:
    """Silence Dask's loggers (their tracebacks of lost connections); return what restores them."""
    import logging

    prefixes = ("distributed", "tornado", "asyncio", "bokeh")
    names = [name for name in list(logging.root.manager.loggerDict) if name.split(".")[0] in prefixes]
    loggers = [logging.getLogger(name) for name in dict.fromkeys([*prefixes, *names])]
    # Dask's config gives some child loggers levels of their own (distributed.client: warning) and the
    # parent a stderr handler: silence every level and every handler, and put them back afterwards.
    saved = [(logger, logger.level, [(h, h.level) for h in logger.handlers]) for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
        for handler in logger.handlers:
            handler.setLevel(logging.CRITICAL + 1)

    def restore() -> None:
        for logger, level, handlers in saved:
            logger.setLevel(level)
            for handler, handler_level in handlers:
                handler.setLevel(handler_level)
    return restore


def _recv_exactly(sock, n: int, deadline: float, address: str, timeout: float) -> bytes:
    import socket

    data = bytearray()
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise InputError(f"the peer at {address} did not complete a Dask handshake within {timeout:g} s "
                             "(not a Dask scheduler?)")
        sock.settimeout(left)
        try:
            chunk = sock.recv(min(65536, n - len(data)))
        except socket.timeout:
            continue
        except OSError as exc:
            raise InputError(f"cannot reach the Dask scheduler at {address}: {exc.strerror or exc}") from None
        if not chunk:
            raise InputError(f"the peer at {address} closed the connection before a Dask handshake (not a "
                             "Dask scheduler?)")
        data += chunk
    return bytes(data)


def probe_scheduler(address: str, timeout: float) -> None:
    """Check, within ``timeout`` seconds in all, that ``address`` (``tcp://HOST:PORT``) is a Dask scheduler:
    connect and read the handshake a Dask server sends first (an 8-byte length, then msgpack frames holding
    an object with ``python`` and ``pickle-protocol``), refusing lengths beyond 64 KiB before reading them.

    Parameters
    ----------
    address : str
        ``tcp://HOST:PORT``.
    timeout : float
        Seconds for connecting and reading the handshake, together.

    Raises
    ------
    InputError
        Unreachable, silent, closed, or not speaking Dask's protocol (one line naming the address).
    """
    import socket
    import struct

    if not address.startswith("tcp://"):
        return  # other Dask protocols (tls://, ucx://): Dask's own timeout applies
    host, _, port = address[len("tcp://"):].rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    while True:  # a refused connection is retried until the deadline (a scheduler may be starting)
        try:
            sock = socket.create_connection((host, int(port)), timeout=max(0.01, deadline - time.monotonic()))
            break
        except (OSError, ValueError) as exc:
            if isinstance(exc, ConnectionRefusedError) and time.monotonic() + 0.2 < deadline:
                time.sleep(0.2)
                continue
            reason = getattr(exc, "strerror", None) or " ".join(str(exc).split()) or type(exc).__name__
            raise InputError(f"cannot reach the Dask scheduler at {address} within {timeout:g} s "
                             f"({str(reason)[:160]})") from None
    with sock:
        (length,) = struct.unpack("<Q", _recv_exactly(sock, 8, deadline, address, timeout))
        if not 8 <= length <= _HANDSHAKE_LIMIT:
            raise InputError(f"the peer at {address} is not a Dask scheduler (its first message declares "
                             f"{length:,} bytes, not a handshake)")
        payload = _recv_exactly(sock, length, deadline, address, timeout)
    try:
        import msgpack
        from distributed.protocol.utils import unpack_frames

        frames = unpack_frames(payload)
        info = msgpack.loads(bytes(frames[0]), raw=False) if frames else None
    except Exception:  # noqa: BLE001 - whatever the bytes were, they are not a handshake
        info = None
    if not (isinstance(info, dict) and "python" in info and "pickle-protocol" in info):
        raise InputError(f"the peer at {address} is not a Dask scheduler (it answered with {length:,} bytes "
                         "that are not a Dask handshake)")


def open_executor(scheduler: str | None = None, workers: int = 1, *, connect_timeout: float = 10.0,
                  message: Callable[[str], None] | None = None, worker_timeout: float = WORKER_TIMEOUT,
                  dashboard: str | None = None) -> ExecutorHandle:
    """Open the executor for ``scheduler`` / ``workers`` (see the module docstring).

    Parameters
    ----------
    scheduler : str or None
        ``None`` (local processes), ``"local:W"`` (a Dask ``LocalCluster``), or a Dask scheduler address.
    workers : int
        Local processes when ``scheduler`` is ``None`` (1: run in this process).
    connect_timeout : float
        Seconds to wait for a remote scheduler (the handshake probe and Dask's connection, each).
    message : callable or None
        Receives one-line notes (the Dask dashboard address); default: ignore.
    worker_timeout : float
        Seconds without any Dask worker before the run gives up (:meth:`ExecutorHandle.watch`).
    dashboard : str or None
        The ``LocalCluster`` dashboard's address (``"127.0.0.1:8787"``); default: a free port, not reported.

    Returns
    -------
    ExecutorHandle
        Use it as a context manager.

    Raises
    ------
    InputError
        Malformed scheduler, Dask not installed, or no Dask scheduler reached within ``connect_timeout``.
    """
    kind, value = parse_scheduler(scheduler)
    note = message or (lambda text: None)
    if kind == "pool":
        if workers == 1:
            return ExecutorHandle("inline", InlineExecutor(), "this process")
        return ExecutorHandle("pool", _process_pool(workers), f"{workers} local processes",
                              factory=lambda: _process_pool(workers))
    if not (connect_timeout > 0):
        raise InputError(f"connect timeout must be positive, got {connect_timeout!r}")
    if not (worker_timeout > 0):
        raise InputError(f"worker timeout must be positive, got {worker_timeout!r}")
    distributed = _import_distributed()
    restore = _quiet_dask_logs()
    try:
        if kind == "local":
            cluster = distributed.LocalCluster(n_workers=value, threads_per_worker=1, processes=True,
                                               host="127.0.0.1",
                                               dashboard_address=dashboard or "127.0.0.1:0",
                                               silence_logs=False)
            try:
                client = distributed.Client(cluster, timeout=connect_timeout)
            except BaseException:
                cluster.close()
                raise
            if dashboard and client.dashboard_link:
                note(f"Dask dashboard: {client.dashboard_link}")
            return ExecutorHandle("local", client.get_executor(pure=False),
                                  f"Dask LocalCluster ({value} workers at {cluster.scheduler_address})",
                                  client=client, cluster=cluster, worker_timeout=worker_timeout,
                                  quiet_logs=restore)
        assert isinstance(value, str)
        probe_scheduler(value, connect_timeout)
        try:
            client = distributed.Client(value, timeout=connect_timeout)
        except (OSError, TimeoutError) as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise InputError(f"cannot reach the Dask scheduler at {value} within {connect_timeout:g} s "
                             f"({reason[:160]})") from None
        count = len(client.scheduler_info().get("workers", {}))
        note(f"connected to the Dask scheduler at {value} ({count} workers now)")
        if count == 0:
            _stderr(f"the Dask scheduler at {value} has no workers yet: waiting at most {worker_timeout:g} s "
                    "for one")
        return ExecutorHandle("address", client.get_executor(pure=False), f"Dask scheduler {value}",
                              client=client, worker_timeout=worker_timeout, quiet_logs=restore)
    except BaseException:
        restore()
        raise
