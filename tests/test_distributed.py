"""Sweeps with real processes: the driver killed or interrupted, two sweeps on one file, workers killed, Dask.

The local-pool tests need only Linux (they find leftover processes through /proc by an environment marker);
the Dask tests need the ``distributed`` extra and skip without it. Everything listens on 127.0.0.1 only.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from georecall.errors import InputError
from georecall.experiments.executors import parse_scheduler, spawning_with_sigint_held
from georecall.experiments.sweep import sweep
from georecall.experiments.sweep_records import read_sweep
from georecall.experiments.sweep_trial import TrialSettings

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="finds processes through /proc")

SETTINGS = TrialSettings(steps=200)
KILL_GRID = {"Ns": [64], "Rs": [2, 3], "modes": ["learned", "frozen"], "seeds": [0]}  # ~10 trials
SMALL_GRID = {"Ns": [32], "Rs": [2], "modes": ["learned", "frozen"], "seeds": [0, 1]}

# The driver starts with Python's own SIGINT handler even when the test run inherited SIGINT ignored (a shell
# runs a background job, `pytest &`, with SIGINT set to SIG_IGN, and children inherit it): without this line
# the Ctrl-C test fails under such a run, not because of the driver.
SCRIPT = textwrap.dedent("""
    import json, signal, sys
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from georecall.experiments.sweep import sweep
    from georecall.experiments.sweep_trial import TrialSettings
    if __name__ == "__main__":
        args = json.loads(sys.argv[1])
        args["settings"] = TrialSettings(**args["settings"])
        try:
            sweep(**args)
        except KeyboardInterrupt:
            sys.exit(130)
""")


def _strip(records):
    return sorted(json.dumps({k: v for k, v in r.items() if k not in ("seconds", "blas")}, sort_keys=True)
                  for r in records)  # blas: worker processes run one BLAS thread


def _raw_lines(path) -> int:
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


def _marked(marker: str) -> list[int]:
    """Live (non-zombie) processes whose environment holds ``marker``."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if marker.encode() not in handle.read():
                    continue
            with open(f"/proc/{name}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


HANG = 300  # seconds: a hang guard only (a loaded machine is slow, not wrong); no test asserts a duration


def _wait_until(predicate, timeout: float, what: str, poll: float = 0.05):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


class _Driver:
    """A sweep in a subprocess, tagged with an environment marker that its descendants inherit."""

    def __init__(self, tmp_path, path, *, new_session=False, **kwargs):
        self.marker = f"GEORECALL_TEST_MARKER={uuid.uuid4().hex}"
        script = tmp_path / "run_sweep.py"
        script.write_text(SCRIPT)
        args = {"path": path, "settings": {"steps": SETTINGS.steps}, "progress": False, **kwargs}
        key, value = self.marker.split("=")
        self.stderr_path = tmp_path / f"stderr-{value}.txt"
        with open(self.stderr_path, "w") as stderr:
            self.process = subprocess.Popen([sys.executable, str(script), json.dumps(args)], stderr=stderr,
                                            env={**os.environ, key: value}, start_new_session=new_session)

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()

    def close(self):
        self.process.kill()
        self.process.wait()
        for pid in _marked(self.marker):  # leave nothing behind even when the test fails
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


@pytest.fixture(scope="module")
def kill_reference(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("reference") / "full.jsonl")
    sweep(path, **KILL_GRID, settings=SETTINGS, progress=False)
    return read_sweep(path).records


@pytest.fixture(scope="module")
def small_reference(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("reference") / "small.jsonl")
    sweep(path, **SMALL_GRID, settings=SETTINGS, progress=False)
    return read_sweep(path).records


# ------------------------------------------------------------------------------------------- local pool

def test_sigkill_of_the_driver_leaves_no_orphans_and_the_rerun_gives_the_same_records(tmp_path,
                                                                                      kill_reference):
    """Issue 11 item 5: the workers, and the resource tracker, die with the driver; the rerun resumes."""
    path = str(tmp_path / "r.jsonl")
    driver = _Driver(tmp_path, path, workers=2, **KILL_GRID)
    try:
        _wait_until(lambda: os.path.exists(path) and _raw_lines(path) >= 2, HANG, "the first records")
        assert len(_marked(driver.marker)) >= 3, "driver and two workers"
        driver.process.send_signal(signal.SIGKILL)
        driver.process.wait(HANG)
        _wait_until(lambda: not _marked(driver.marker), HANG, "the workers to exit")
    finally:
        driver.close()
    cut = read_sweep(path)
    assert 0 < len(cut.records) < len(kill_reference)
    # lock_timeout=0: the lock died with the driver
    sweep(path, **KILL_GRID, settings=SETTINGS, progress=False, lock_timeout=0)
    assert _strip(read_sweep(path).records) == _strip(kill_reference)


def test_ctrl_c_stops_the_driver_and_its_workers(tmp_path, kill_reference):
    """The outcome of Ctrl-C, not its speed: exit 130, no worker left, the file consistent and resumable.
    (The waits are hang guards, generous for a loaded machine; how fast Ctrl-C acts is not asserted.)"""
    path = str(tmp_path / "r.jsonl")
    driver = _Driver(tmp_path, path, new_session=True, workers=2, **KILL_GRID)
    try:
        _wait_until(lambda: os.path.exists(path) and _raw_lines(path) >= 1, HANG, "the first record")
        os.killpg(driver.process.pid, signal.SIGINT)  # what the terminal does: the whole process group
        driver.process.wait(HANG)
        _wait_until(lambda: not _marked(driver.marker), HANG, "the workers to exit")
    finally:
        driver.close()
    assert driver.process.returncode == 130
    assert "interrupted" in driver.stderr and "Traceback" not in driver.stderr
    cut = read_sweep(path)
    assert cut.torn == 0 and cut.alien == 0
    sweep(path, **KILL_GRID, settings=SETTINGS, progress=False)
    assert _strip(read_sweep(path).records) == _strip(kill_reference)


def _worker_survives_a_ctrl_c_while_starting(held: bool) -> bool:
    """Start one pool worker (the pool's own initializer) and send it SIGINT at once, while it is still
    importing: True when it then runs a task, False when the SIGINT broke the pool."""
    import contextlib
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from georecall.experiments.executors import _local_worker_init
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_local_worker_init, initargs=(os.getpid(),))
    try:
        with spawning_with_sigint_held() if held else contextlib.nullcontext():
            future = pool.submit(os.getpid)  # the first submit starts the process
        for process in list(pool._processes.values()):
            os.kill(process.pid, signal.SIGINT)  # microseconds after fork: long before its imports end
        try:
            return future.result(timeout=HANG) > 0
        except BrokenProcessPool:
            return False
    finally:
        pool.shutdown()


def test_a_worker_interrupted_while_it_starts_survives_and_the_drivers_ctrl_c_is_kept():
    """The Ctrl-C race under load: a worker still importing, before the pool's initializer, must not die of a
    SIGINT sent to the group (control: started without the hold, it dies), and a SIGINT that reaches the
    driver while it holds SIGINT is still raised, not lost."""
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)  # the test run may have it ignored
    try:
        assert not _worker_survives_a_ctrl_c_while_starting(held=False)
        assert _worker_survives_a_ctrl_c_while_starting(held=True)
        with pytest.raises(KeyboardInterrupt):  # inside the hold (another thread took it) or when it ends
            with spawning_with_sigint_held():
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
        assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == set()  # the mask restored
    finally:
        signal.signal(signal.SIGINT, saved)


def test_two_concurrent_sweeps_on_one_file_write_every_record_once(tmp_path, small_reference):
    """Issue 11 item 3: two sweeps started together on one file: each waits for the lock (this test holds
    it until both say so, so that they truly overlap however busy the machine is), then the first runs
    everything and the second finds everything done."""
    from georecall.results_files import FileLock
    path = str(tmp_path / "r.jsonl")
    with FileLock(path):
        drivers = [_Driver(tmp_path, path, log=None, **SMALL_GRID) for _ in range(2)]
        try:
            _wait_until(lambda: all("waiting for" in d.stderr or d.process.poll() is not None
                                    for d in drivers), HANG, "both sweeps to wait for the lock")
        except BaseException:
            for driver in drivers:
                driver.close()
            raise
    try:
        for driver in drivers:
            driver.process.wait(HANG)
    finally:
        for driver in drivers:
            driver.close()
    assert [d.process.returncode for d in drivers] == [0, 0], [d.stderr for d in drivers]
    assert all("waiting for" in d.stderr for d in drivers)
    contents = read_sweep(path)
    assert contents.duplicates == 0 and _raw_lines(path) == len(contents.records)
    assert _strip(contents.records) == _strip(small_reference)


def _pool_workers() -> list[int]:
    """Spawned multiprocessing children of this process (not the resource tracker)."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as handle:
                ppid = int(handle.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                cmdline = handle.read()
        except OSError:
            continue
        if ppid == os.getpid() and b"spawn_main" in cmdline:
            pids.append(int(name))
    return pids


def test_a_local_worker_killed_mid_sweep_is_replaced_and_nothing_is_lost(tmp_path, small_reference):
    path = str(tmp_path / "r.jsonl")
    killed, messages = [], []
    others = set(_pool_workers())  # e.g. a module-scoped Dask cluster's nannies, in a shuffled order

    def kill_a_worker(info):
        if info.trials_done == 1 and not killed:
            workers = [pid for pid in _pool_workers() if pid not in others]
            assert len(workers) == 2
            os.kill(workers[0], signal.SIGKILL)
            killed.append(workers[0])

    sweep(path, **SMALL_GRID, settings=SETTINGS, workers=2, progress=kill_a_worker, log=messages.append)
    assert killed and any("worker process died" in m for m in messages)
    contents = read_sweep(path)
    assert contents.duplicates == 0 and _raw_lines(path) == len(contents.records)
    assert _strip(contents.records) == _strip(small_reference)


# ------------------------------------------------------------------------------------------------- Dask

@pytest.fixture(scope="module")
def cluster():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as local:
        yield local


def test_scheduler_values_are_checked():
    assert parse_scheduler(None) == ("pool", None)
    assert parse_scheduler("local:3") == ("local", 3)
    assert parse_scheduler("tcp://127.0.0.1:8786") == ("address", "tcp://127.0.0.1:8786")
    for bad in ("local:0", "local:x", "127.0.0.1:8786", "tcp://"):
        with pytest.raises(ValueError, match="scheduler"):
            parse_scheduler(bad)


def test_without_the_extra_a_scheduler_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed now raises ImportError
    with pytest.raises(ValueError, match=r"pip install '\.\[distributed\]' in georecall's clone"):
        sweep(str(tmp_path / "r.jsonl"), **SMALL_GRID, settings=SETTINGS, progress=False,
              scheduler="tcp://127.0.0.1:8786")


def test_an_unreachable_scheduler_is_one_line_within_the_timeout(tmp_path):
    pytest.importorskip("distributed")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    message = f"cannot reach the Dask scheduler at tcp://127.0.0.1:{port} within 2 s"
    with pytest.raises(InputError, match=message) as info:
        sweep(str(tmp_path / "r.jsonl"), **SMALL_GRID, settings=SETTINGS, progress=False,
              scheduler=f"tcp://127.0.0.1:{port}", connect_timeout=2)
    assert "\n" not in str(info.value)


def test_a_dask_cluster_writes_the_same_records_as_this_process(tmp_path, cluster, small_reference):
    path = str(tmp_path / "r.jsonl")
    notes = []
    records = sweep(path, **SMALL_GRID, settings=SETTINGS, progress=False,
                    scheduler=cluster.scheduler_address, log=notes.append)
    assert len(records) == 4 and any("2 workers" in n for n in notes)
    assert _strip(read_sweep(path).records) == _strip(small_reference)


@pytest.mark.slow
def test_a_dask_worker_killed_mid_trial_loses_nothing_and_duplicates_nothing(tmp_path, cluster,
                                                                            kill_reference):
    distributed = pytest.importorskip("distributed")
    path = str(tmp_path / "r.jsonl")
    killed = []
    with distributed.Client(cluster.scheduler_address) as client:
        pids = client.run(os.getpid)

        def kill_a_busy_worker(info):
            if killed or info.trials_done < 1:
                return
            busy = [address for address, tasks in client.processing().items() if tasks]
            if busy:
                os.kill(pids[busy[0]], signal.SIGKILL)
                killed.append(busy[0])

        sweep(path, **KILL_GRID, settings=SETTINGS, progress=kill_a_busy_worker,
              scheduler=cluster.scheduler_address)
        client.wait_for_workers(2, timeout=HANG)  # the nanny restarts it, for the tests after this one
    assert killed
    contents = read_sweep(path)
    assert contents.duplicates == 0 and _raw_lines(path) == len(contents.records)
    assert _strip(contents.records) == _strip(kill_reference)


@pytest.mark.slow
def test_local_w_starts_a_local_cluster_that_dies_with_a_killed_driver(tmp_path, small_reference):
    pytest.importorskip("distributed")
    path = str(tmp_path / "r.jsonl")
    assert sweep(path, **SMALL_GRID, settings=SETTINGS, progress=False, scheduler="local:2")
    assert _strip(read_sweep(path).records) == _strip(small_reference)
    path = str(tmp_path / "killed.jsonl")
    driver = _Driver(tmp_path, path, scheduler="local:2", **KILL_GRID)
    try:
        _wait_until(lambda: os.path.exists(path) and _raw_lines(path) >= 1, HANG, "the first record")
        assert len(_marked(driver.marker)) >= 3, "driver and two Dask workers"
        driver.process.send_signal(signal.SIGKILL)
        driver.process.wait(HANG)
        _wait_until(lambda: not _marked(driver.marker), HANG, "the Dask workers to exit")
    finally:
        driver.close()
