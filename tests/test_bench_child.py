"""benchmarks/child.py measures a command's own peak memory, not its parent's (see its docstring:
``ru_maxrss`` carries the parent's high-water mark across exec, which made CI report pytest's peak as
certify's)."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent.parent / "benchmarks"))
child = pytest.importorskip("child", reason="benchmarks/ is beside tests/ in a checkout")


def test_the_childs_peak_is_its_own_whatever_the_parent_holds():
    held = np.ones(2**26)  # 512 MiB resident in this process
    run = child.run_georecall(["--version"])
    assert run.returncode == 0 and run.stdout.startswith("georecall")
    assert run.peak_gib is not None and run.peak_gib < 0.25, run
    assert held.nbytes / 2**30 == 0.5


def test_a_child_that_allocates_is_seen_above_what_it_allocates(tmp_path):
    # the control: a user construction whose module allocates 512 MiB makes the same measurement rise
    module = tmp_path / "fat.py"
    module.write_text("import numpy as np\nHELD = np.ones(2**26)\n")
    run = child.run_georecall(["check", "single-hop", "--construction", f"{module}:HELD", "--N", "4", "--R",
                               "1"])
    assert run.peak_gib is not None and run.peak_gib >= 0.5, run
