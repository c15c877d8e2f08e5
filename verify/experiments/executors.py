"""Where trials run: a ``concurrent.futures.Executor`` behind one small interface.

:func:`open_executor` returns an :class:`ExecutorHandle` (a context manager) for

- ``scheduler=None, workers=1``: :class:`InlineExecutor`, the trial runs in the calling process when it is
  submitted (no processes, Ctrl-C acts at once);
- ``scheduler=None, workers=W > 1``: a ``ProcessPoolExecutor`` of W spawned processes with one BLAS thread
  each. Workers ignore SIGINT (the driver handles Ctrl-C and kills them), and die with their parent even when
  it is killed with SIGKILL: on Linux ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, everywhere a watchdog thread that
  polls the parent's pid;
- ``scheduler="local:W"``: a Dask ``LocalCluster`` on 127.0.0.1 with W single-threaded worker processes (and
  the dashboard on 127.0.0.1), through ``Client.get_executor()``;
- ``scheduler="tcp://HOST:PORT"`` (any Dask address): a ``distributed.Client`` connected to a running
  scheduler. An unreachable scheduler gives one ``InputError`` line after ``connect_timeout`` seconds.

Dask is imported only for the last two (the optional extra ``georecall[distributed]``). The driver alone
writes results: executors only return them. A worker lost mid-trial is handled by the engine: Dask
reschedules the task on another worker; a broken local pool is restarted by :meth:`ExecutorHandle.restart`
and the driver resubmits what was in flight.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from georecall.errors import InputError

__all__ = ["DISTRIBUTED_HINT", "ExecutorHandle", "InlineExecutor", "open_executor", "parse_scheduler"]

DISTRIBUTED_HINT = "pip install 'georecall[distributed]'"
_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_PR_SET_PDEATHSIG = 1


class InlineExecutor(Executor):
    """An executor that runs each call in the calling thread when it is submitted (the ``workers=1`` path)."""

    def __init__(self):
        self._shutdown = False

    def submit(self, fn, /, *args, **kwargs) -> Future:
        """Run ``fn(*args, **kwargs)`` now; return a finished future holding its result or exception.

        ``KeyboardInterrupt`` and ``SystemExit`` are not captured: they propagate to the caller at once.
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
        """Refuse further submissions."""
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
    _die_with_parent(parent_pid)


def _ready() -> int:
    return os.getpid()


def parse_scheduler(scheduler: str | None) -> tuple[str, int | str | None]:
    """Classify a ``--scheduler`` value: ``("pool", None)``, ``("local", W)`` or ``("address", address)``.

    Raises
    ------
    InputError
        A malformed value (one line saying what is accepted).
    """
    if scheduler is None:
        return "pool", None
    if not isinstance(scheduler, str):
        raise TypeError(f"scheduler must be a string, got {scheduler!r}")
    text = scheduler.strip()
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
                 factory: Callable[[], Executor] | None = None):
        self.kind = kind
        self.executor = executor
        self.description = description
        self.client = client
        self.cluster = cluster
        self._factory = factory
        self.restarts = 0

    def is_lost_worker(self, exc: BaseException) -> bool:
        """Whether ``exc`` means a local worker process died (restart the pool and rerun the trial)."""
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

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.kill()
        self.close()


def _process_pool(workers: int) -> ProcessPoolExecutor:
    """W spawned processes with one BLAS thread each, started now (so that setting reaches all of them)."""
    import multiprocessing

    saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
    os.environ.update({name: "1" for name in _THREAD_VARIABLES})
    try:
        pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_local_worker_init, initargs=(os.getpid(),))
        # W submissions at once launch W processes (one per submission while none is idle), now, while the
        # variables are set, and from this thread (the one PR_SET_PDEATHSIG watches).
        for future in [pool.submit(_ready) for _ in range(workers)]:
            future.result()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return pool


def _import_distributed():
    try:
        import distributed
    except ImportError:
        raise InputError(f"--scheduler needs Dask distributed, which is not installed: {DISTRIBUTED_HINT}") \
            from None
    return distributed


def open_executor(scheduler: str | None = None, workers: int = 1, *, connect_timeout: float = 10.0,
                  message: Callable[[str], None] | None = None) -> ExecutorHandle:
    """Open the executor for ``scheduler`` / ``workers`` (see the module docstring).

    Parameters
    ----------
    scheduler : str or None
        ``None`` (local processes), ``"local:W"`` (a Dask ``LocalCluster``), or a Dask scheduler address.
    workers : int
        Local processes when ``scheduler`` is ``None`` (1: run in this process).
    connect_timeout : float
        Seconds to wait for a remote scheduler.
    message : callable or None
        Receives one-line notes (the Dask dashboard address); default: ignore.

    Returns
    -------
    ExecutorHandle
        Use it as a context manager.

    Raises
    ------
    InputError
        Malformed scheduler, Dask not installed, or no scheduler reached within ``connect_timeout``.
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
    distributed = _import_distributed()
    if kind == "local":
        cluster = distributed.LocalCluster(n_workers=value, threads_per_worker=1, processes=True,
                                           host="127.0.0.1", dashboard_address="127.0.0.1:8787")
        try:
            client = distributed.Client(cluster, timeout=connect_timeout)
        except BaseException:
            cluster.close()
            raise
        if client.dashboard_link:
            note(f"Dask dashboard: {client.dashboard_link}")
        return ExecutorHandle("local", client.get_executor(pure=False),
                              f"Dask LocalCluster ({value} workers at {cluster.scheduler_address})",
                              client=client, cluster=cluster)
    try:
        client = distributed.Client(value, timeout=connect_timeout)
    except (OSError, TimeoutError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"cannot reach the Dask scheduler at {value} within {connect_timeout:g} s "
                         f"({reason[:160]})") from None
    note(f"connected to the Dask scheduler at {value} ({len(client.scheduler_info().get('workers', {}))} "
         f"workers now)")
    return ExecutorHandle("address", client.get_executor(pure=False), f"Dask scheduler {value}",
                          client=client)
