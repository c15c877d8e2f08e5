"""georecall.io: atomic writes survive interruption, output paths refused before work, the advisory lock."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from georecall.io import (
    append_jsonl,
    atomic_write,
    lock_path,
    validate_output_path,
)
from georecall.results_files import FileLock, LockTimeout


def _leftovers(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if ".tmp-" in name)


# ------------------------------------------------------------------------------------------- atomic_write

def test_atomic_write_bytes_text_and_npz_callback(tmp_path):
    target = tmp_path / "a.bin"
    assert atomic_write(str(target), b"\x00\x01") == str(target)
    assert target.read_bytes() == b"\x00\x01"
    atomic_write(str(target), "é\n")
    assert target.read_text(encoding="utf-8") == "é\n"
    npz = tmp_path / "m.npz"
    atomic_write(str(npz), lambda handle: np.savez_compressed(handle, w=np.arange(5)))
    with np.load(npz) as data:
        assert data["w"].tolist() == [0, 1, 2, 3, 4]
    assert _leftovers(tmp_path) == []


def test_atomic_write_keeps_the_permission_bits_of_the_file_it_replaces(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    atomic_write(str(target), "new")
    assert target.read_text() == "new" and (os.stat(target).st_mode & 0o777) == 0o640


@pytest.mark.parametrize("error", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, error):
    target = tmp_path / "model.npz"
    target.write_bytes(b"old content")

    def half_then_fail(handle):
        handle.write(b"half of the new")
        raise error

    with pytest.raises(type(error)):
        atomic_write(str(target), half_then_fail)
    assert target.read_bytes() == b"old content"
    assert _leftovers(tmp_path) == []


def test_atomic_write_refuses_other_data_types(tmp_path):
    with pytest.raises(TypeError, match="bytes, str or a callback"):
        atomic_write(str(tmp_path / "x"), 3.5)
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_writer_killed_mid_write_leaves_the_old_file_intact(tmp_path, sig):
    """A real process killed while its callback is half-way: the requested path keeps the old content."""
    target = tmp_path / "big.npz"
    target.write_bytes(b"old")
    started = tmp_path / "started"
    script = textwrap.dedent(f"""
        import signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)  # even when the run inherited SIGINT ignored
        from georecall.io import atomic_write
        def slow(handle):
            handle.write(b"x" * 100000)
            handle.flush()
            open({str(started)!r}, "w").close()
            time.sleep(60)
        atomic_write({str(target)!r}, slow)
    """)
    process = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300  # a hang guard only
        while not started.exists():
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
            time.sleep(0.02)
        process.send_signal(sig)
        process.wait(10)
    finally:
        process.kill()
        process.wait()
    assert process.returncode != 0
    assert target.read_bytes() == b"old"
    if sig == signal.SIGINT:  # a Python-level interruption also removes the temporary file
        assert _leftovers(tmp_path) == []


# ---------------------------------------------------------------------------------- validate_output_path

def test_validate_output_path_returns_the_path_written(tmp_path):
    assert validate_output_path(str(tmp_path / "r.jsonl")) == str(tmp_path / "r.jsonl")
    assert validate_output_path(str(tmp_path / "model"), suffix=".npz") == str(tmp_path / "model.npz")
    assert validate_output_path(str(tmp_path / "m.npz"), suffix=".npz") == str(tmp_path / "m.npz")
    assert os.listdir(tmp_path) == []  # the writability probe leaves nothing behind


@pytest.mark.parametrize("case, message", [
    ("missing directory", "does not exist"),
    ("a directory", "is a directory"),
    ("parent is a file", "not a directory"),
    ("empty", "required"),
])
def test_validate_output_path_refuses(tmp_path, case, message):
    (tmp_path / "file").write_text("x")
    path = {"missing directory": str(tmp_path / "nope" / "r.jsonl"), "a directory": str(tmp_path),
            "parent is a file": str(tmp_path / "file" / "r.jsonl"), "empty": ""}[case]
    with pytest.raises(ValueError, match=message) as info:
        validate_output_path(path)
    assert "\n" not in str(info.value)


def test_validate_output_path_refuses_an_unwritable_directory():
    """A real unwritable place, for root too (procfs accepts no new files)."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no procfs")
    with pytest.raises(ValueError, match="not writable"):
        validate_output_path("/proc/self/georecall-results.jsonl")


def test_validate_output_path_refuses_an_unwritable_file(tmp_path):
    if os.geteuid() == 0:  # root writes read-only files; use a file the kernel refuses instead
        if not os.path.exists("/proc/version"):
            pytest.skip("no procfs")
        with pytest.raises(ValueError, match="not writable"):
            validate_output_path("/proc/version")
        return
    target = tmp_path / "ro.jsonl"
    target.write_text("")
    os.chmod(target, 0o444)
    with pytest.raises(ValueError, match="not writable"):
        validate_output_path(str(target))


# ------------------------------------------------------------------------------------------- append_jsonl

def test_append_closes_a_torn_line_and_writes_strict_json(tmp_path):
    path = str(tmp_path / "r.jsonl")
    with open(path, "w") as handle:
        handle.write('{"kind": "trial", "N": 3')  # cut short
    append_jsonl(path, {"kind": "x", "loss": float("nan"), "values": [1.0, float("inf")]})
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert lines[0] == '{"kind": "trial", "N": 3'
    assert json.loads(lines[1]) == {"kind": "x", "loss": None, "values": [1.0, None]}


# ------------------------------------------------------------------------------------------------ FileLock

def test_a_second_lock_refuses_after_its_timeout_naming_the_holder(tmp_path):
    path = str(tmp_path / "r.jsonl")
    messages = []
    with FileLock(path):
        with open(lock_path(path)) as handle:
            assert handle.read().strip() == str(os.getpid())
        with pytest.raises(LockTimeout, match=f"locked by pid {os.getpid()}.*after 0.3 s"):
            FileLock(path, timeout=0.3, message=messages.append).acquire()
    assert len(messages) == 1 and "waiting" in messages[0]
    with FileLock(path, timeout=0) as lock:  # released: free again
        assert lock.held
    assert not lock.held


def test_a_waiting_lock_gets_the_file_when_the_holder_releases(tmp_path):
    path = str(tmp_path / "r.jsonl")
    first = FileLock(path).acquire()
    timer = threading.Timer(0.3, first.release)
    timer.start()
    messages = []
    with FileLock(path, timeout=10, message=messages.append):
        pass
    timer.join()
    assert len(messages) == 1


def test_the_lock_dies_with_a_holder_killed_by_sigkill(tmp_path):
    path = str(tmp_path / "r.jsonl")
    script = textwrap.dedent(f"""
        import sys, time
        from georecall.results_files import FileLock
        FileLock({path!r}).acquire()
        print("locked", flush=True)
        time.sleep(60)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(LockTimeout, match=f"pid {holder.pid}"):
            FileLock(path, timeout=0).acquire()
        holder.kill()
        holder.wait()
        with FileLock(path, timeout=5):
            pass
    finally:
        holder.kill()
        holder.wait()


def test_lock_timeout_must_be_non_negative(tmp_path):
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="non-negative"):
            FileLock(str(tmp_path / "r.jsonl"), timeout=bad)
