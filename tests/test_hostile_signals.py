"""Signals at any moment: Ctrl-C and SIGTERM give 130 / 143 with one line and, under ``--json``, one strict
document from the first instruction (the console entry, ``georecall.cli:main``, answers them before
the heavy imports), during the work, and an atomic write never leaves its temporary whatever instant the
signal lands (the temporary is created with the signals held back, inside the block that removes it).

No timed assertion: a subprocess is signalled once a condition is seen (its SIGTERM handler installed, read
from ``/proc``; a progress line on stderr), never after a fixed sleep."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from georecall import io

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self") or sys.platform != "linux",
                                reason="reads a process's signal handlers from /proc (Linux)")

ENTRY = [sys.executable, "-c", "import sys; from georecall.cli import main; sys.exit(main())"]
CODES = {signal.SIGINT: 130, signal.SIGTERM: 143}


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    except OSError:
        pass
    return False


def _wait_for_handler(proc: subprocess.Popen) -> None:
    """Until the entry point's SIGTERM handler is in place (Python installs none of its own), or the process
    ended."""
    while proc.poll() is None and not _catches(proc.pid, signal.SIGTERM):
        os.sched_yield()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.parametrize("argv", [["check", "single-hop", "--N", "64", "--R", "4"], ["count", "--N", "3"],
                                  ["verify"]])
def test_a_signal_while_the_modules_import_is_one_document(signum, argv, tmp_path):
    proc = subprocess.Popen([*ENTRY, *argv, "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    _wait_for_handler(proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == CODES[signum], (proc.returncode, err[-2000:])
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert doc["status"] == CODES[signum] and doc["command"] == argv[0] + (" single-hop" if argv[0] == "check"
                                                                            else "")
    assert err.strip().splitlines() == [doc["error"]] and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_training_leaves_no_file(signum, tmp_path):
    """Signalled once the first progress line is out (the work is under way): 130 / 143, one line, neither
    the model file nor a temporary."""
    out = tmp_path / "m.npz"
    proc = subprocess.Popen([*ENTRY, "train", "--N", "64", "--R", "4", "--d", "16", "--steps", "1000000",
                             "--log-every", "1", "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    first = proc.stderr.readline()  # a progress line: training has started
    assert first, proc.communicate()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == CODES[signum], err[-2000:]
    assert "Traceback" not in err and ("interrupted" in err or "terminated" in err), err[-500:]
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def other_thread():
    """A live thread besides the main one: the kernel may deliver a process's signal to it (NumPy's BLAS,
    an executor and Dask start such threads), and then only Python's own handlers can hold it back."""
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, daemon=True)
    thread.start()
    yield thread
    stop.set()
    thread.join()


@pytest.mark.parametrize("delivery", ["process", "other thread"])
def test_the_temporary_is_created_with_signals_held_back(delivery, tmp_path, monkeypatch, other_thread):
    """A signal that lands right after the temporary's creation (here: sent by the creating call itself,
    once the file exists; to the process, or to another thread) is answered inside the block that removes
    it: nothing is left. Control: without the deferral the same interruption orphans the file (mkstemp does
    not clean up)."""
    created = []
    real = tempfile.mkstemp

    def mkstemp_then_interrupt(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        created.append(name)
        if delivery == "process":
            os.kill(os.getpid(), signal.SIGINT)  # held back until the creation block ends
        else:
            signal.pthread_kill(other_thread.ident, signal.SIGINT)
        for _ in range(500):  # Python code after the creation, as mkstemp's own is: where a signal the
            time.sleep(0.001)  # kernel handed to another thread is answered (it arrives asynchronously)
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        io.atomic_write(str(tmp_path / "x.bin"), b"data")
    assert created and not Path(created[0]).exists()
    assert list(tmp_path.iterdir()) == []
    # the control: mkstemp itself leaves the file when interrupted after creating it
    with pytest.raises(KeyboardInterrupt):
        fd, name = mkstemp_then_interrupt(dir=tmp_path)
        os.close(fd)
    assert len(list(tmp_path.iterdir())) == 1


def test_signals_deferred_delivers_them_afterwards():
    with pytest.raises(KeyboardInterrupt):
        with io.signals_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            reached = True  # not interrupted inside the block
    assert reached


def test_the_console_entry_imports_nothing_heavy_before_its_handlers():
    """The early answer is only as early as the entry module's own imports: importing it (and the package
    above it) loads no NumPy. A package ``__init__`` that imports the library eagerly would break this."""
    proc = subprocess.run([sys.executable, "-c", "import sys, georecall.cli; "
                           "print(sorted(m for m in ('numpy', 'scipy', 'sympy') if m in sys.modules))"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr)


def test_an_in_process_caller_gets_its_signal_handlers_back(capsys):
    """``main`` answers signals itself only while it runs: afterwards the caller's handlers are in place
    again (a test runner's, a notebook's)."""
    from georecall.cli import main

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    assert main(["count", "--N", "3", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == 0
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
