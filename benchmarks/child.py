"""Run ``georecall ARGV`` in a child process and measure it: wall seconds, CPU seconds and the child's own
peak resident memory. Shared by the benchmarks that time a command as a user meets it.

The peak is the child's ``VmHWM`` (``/proc/self/status``), which the child writes to a file as it exits; it is
never ``ru_maxrss``. Linux carries the parent's high-water mark across fork + exec into the child's
``ru_maxrss`` (``exec_mmap`` folds the old address space's peak into the process's), so a benchmark that has
itself grown (an in-process case run before the child, or a large pytest process) would report its own peak
as the child's: that is how CI saw 1.86 GiB for a certification that peaks at 0.21 GiB. ``VmHWM`` belongs to
the address space the command runs in and starts afresh at exec.

CPU seconds (user + system) come from ``os.wait4``; they do not carry over, and unlike wall time the
machine's load does not inflate them.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import time

__all__ = ["ChildRun", "run_georecall"]

# The child: report VmHWM (KiB) to the file named by argv[1] at exit, then run the CLI with the rest.
_WRAPPER = """\
import atexit, runpy, sys
path = sys.argv[1]
def _report():
    with open('/proc/self/status') as status:
        kib = next(line.split()[1] for line in status if line.startswith('VmHWM:'))
    with open(path, 'w') as out:
        out.write(kib)
atexit.register(_report)
sys.argv = ['georecall', *sys.argv[2:]]
runpy.run_module('georecall.cli', run_name='__main__', alter_sys=True)
"""


@dataclasses.dataclass(frozen=True)
class ChildRun:
    """One measured command: exit code, wall and CPU seconds, the child's own peak (GiB; None if the child
    died before it could write it), and its captured output."""

    returncode: int
    wall: float
    cpu: float
    peak_gib: float | None
    stdout: str
    stderr: str


def run_georecall(argv: list[str]) -> ChildRun:
    """``georecall ARGV`` in a child process, measured (see the module's docstring for why ``VmHWM``).

    Parameters
    ----------
    argv
        The command line after ``georecall`` (e.g. ``["certify", "single-hop", "--N", "4096", "--json"]``).

    Returns
    -------
    ChildRun
        Exit code, wall seconds, CPU seconds (user + system), peak resident memory in GiB, stdout, stderr.
    """
    with tempfile.TemporaryDirectory() as folder:
        peak_file = os.path.join(folder, "vmhwm")
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            child = subprocess.Popen([sys.executable, "-c", _WRAPPER, peak_file, *argv], stdout=out,
                                     stderr=err)
            _, status, usage = os.wait4(child.pid, 0)
            wall = time.perf_counter() - start
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read().decode(), err.read().decode()
        try:
            with open(peak_file) as f:
                peak: float | None = int(f.read()) / 2**20
        except (OSError, ValueError):
            peak = None
    return ChildRun(os.waitstatus_to_exitcode(status), wall, usage.ru_utime + usage.ru_stime, peak, stdout,
                    stderr)


if __name__ == "__main__":  # a self-check: a child's peak is its own, whatever the parent holds
    import numpy as np

    held = np.ones(2**27)  # 1 GiB in this process
    run = run_georecall(["--version"])
    print(f"parent holds {held.nbytes / 2**30:.1f} GiB; child `georecall --version`: peak {run.peak_gib} GiB,"
          " "
          f"exit {run.returncode}, {run.wall:.2f} s")
