"""Test configuration: hypothesis profiles and shared strategies.

The profiles are georecall's own, registered (and one loaded) by importing ``georecall.testing``, so that a
user's property tests get the same ones (choose with ``GEORECALL_HYPOTHESIS_PROFILE``):

- ``deterministic`` (default): derandomized, no example database, no deadline: the same examples every run, so
  CI is reproducible;
- ``random``: fresh random examples each run and more of them, for hunting bugs locally.

The ``slow`` marker (registered in pyproject.toml) tags long checks, excluded by default; run them with
``python -m pytest -m slow``.

The machine's memory does not decide a test: in this process ``memory.available_bytes`` reads a fixed
16 GiB (so the default budget is 8 GiB and an explicit ``--max-gib`` up to 16 is kept as given, whatever is
free), except in tests marked ``machine_memory``, which read the machine's own. A test that runs georecall
in a subprocess passes ``--max-gib`` where its outcome depends on the budget.
"""

from __future__ import annotations

import os

# One BLAS thread, as the sweep's and study's worker processes run (executors._process_pool): float32 training
# rounds differently on 1 and 2 threads (src/georecall/experiments/blas.py), and tests compare records made in
# this process with records made by workers. Set before NumPy loads its BLAS (a plugin that imports NumPy
# first, such as pytest-randomly, makes this too late: the header line says which BLAS the run got).
for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import pytest  # noqa: E402

from georecall import memory, usercode  # noqa: E402 (after the BLAS threads are set)
from georecall.constructions import registry  # noqa: E402

# The strategies the tests use are public: georecall.testing (users property-test their own constructions).
# Importing it registers the hypothesis profiles and loads $GEORECALL_HYPOTHESIS_PROFILE (default:
# deterministic).
from georecall.testing import codebooks, models, tables, tasks  # noqa: E402, F401


def pytest_report_header(config):
    import georecall
    from georecall.experiments.blas import blas_description
    return [f"georecall {georecall.__version__} imported from {os.path.dirname(georecall.__file__)}",
            f"BLAS: {blas_description()}"]


@pytest.fixture(autouse=True)
def _registry_restored():
    """Each test sees the registry as it was before it ran: a construction a test registers (an example's
    OH1, a throwaway spec) is gone for the next test, and a built-in a test replaces comes back."""
    before = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)


@pytest.fixture(autouse=True)
def _usercode_limits_restored():
    """A command run in-process sets the limits user code runs under (its --build-timeout and budget); the
    next test starts from the defaults."""
    before = usercode.current_limits()
    yield
    usercode.set_limits(timeout=before.timeout, budget=before.budget, json=before.json,
                        command=before.command)


PINNED_AVAILABLE_BYTES = 16 * memory.GIB


@pytest.fixture(autouse=True)
def _available_memory_pinned(request, monkeypatch):
    """The default budget and the cap of an explicit one do not depend on what the machine has free (tests
    marked ``machine_memory`` read the machine)."""
    if request.node.get_closest_marker("machine_memory") is None:
        monkeypatch.setattr(memory, "available_bytes", lambda: PINNED_AVAILABLE_BYTES)


# ------------------------------------------------------------------------- real full / read-only disks


def _tmpfs(where, options: str):
    """Mount a tmpfs at ``where`` (made here), or skip with the reason where mounting is not allowed."""
    import subprocess
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root; CI runs as root): {proc.stderr.strip()[:120]}")


@pytest.fixture
def full_disk(tmp_path):
    """A 64 kB tmpfs, filled: every later write fails with ENOSPC (creating an empty file or a folder still
    works). Shared by the full-disk tests of every writer (test_hostile_files, test_export,
    test_hostile_lecture)."""
    import subprocess
    where = tmp_path / "full"
    _tmpfs(where, "size=64k")
    try:
        with open(where / "filler", "wb", buffering=0) as handle:
            try:
                while handle.write(b"\0" * 4096):
                    pass
            except OSError:
                pass
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)


@pytest.fixture
def read_only_disk(tmp_path):
    """A tmpfs remounted read-only: every write fails with EROFS (even root's)."""
    import subprocess
    where = tmp_path / "ro"
    _tmpfs(where, "size=64k")
    try:
        proc = subprocess.run(["mount", "-o", "remount,ro", str(where)], capture_output=True, text=True)
        if proc.returncode != 0:
            pytest.skip(f"cannot remount the tmpfs read-only: {proc.stderr.strip()[:120]}")
        yield where
    finally:
        subprocess.run(["umount", str(where)], capture_output=True)
