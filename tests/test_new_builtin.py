"""Adding a built-in construction is two files (its module and its registry entry), and nothing else: with a
seventh built-in registered before collection (``tests/dummy_builtin.py``, a pytest plugin), every test that
derives its cases from the registry covers it and passes, and a test that hard-codes the list of
constructions fails.

The runs are subprocesses (``python -m pytest -p dummy_builtin``): the registry is read when test modules are
collected (``@pytest.mark.parametrize`` over ``registry.specs()``), so the dummy must be registered before
that, in a fresh process."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

TESTS = pathlib.Path(__file__).resolve().parent

# The registry-derived tests: those parametrized over the registry (selected by the dummy's id) and those
# that iterate it inside (selected by name).
REGISTRY_DERIVED = {
    "test_architecture.py": "registry_lists or cli_choices or layouts_name or achieved_sizes",
    "test_cli.py": "bounds_command_formats or construction_choices_come",
    "test_bounds_checks.py": "the_section_passes",
    "test_forward_reference.py": "G1X or added_since",
    "test_verify_rows.py": "G1X",
    "test_soundness.py": "G1X",
    "test_compact_readout.py": "declarations_hold",
}


def run_pytest(paths: list[str], selection: str | None, *, dummy: bool) -> subprocess.CompletedProcess:
    """``python -m pytest`` on ``paths`` in a fresh process, with the dummy built-in when ``dummy``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    argv = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--rootdir", str(TESTS.parent), *paths]
    if dummy:
        argv[3:3] = ["-p", "dummy_builtin"]
    if selection:
        argv += ["-k", selection]
    return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=TESTS.parent, timeout=900)


def test_every_registry_derived_test_covers_and_passes_a_dummy_builtin():
    selection = " or ".join(f"({k})" for k in dict.fromkeys(REGISTRY_DERIVED.values()))
    done = run_pytest([str(TESTS / name) for name in REGISTRY_DERIVED], selection, dummy=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    covered = {line.split("::")[0].rsplit("/", 1)[-1] for line in done.stdout.splitlines()
               if "G1X" in line.split("::")[-1] and " PASSED" in line}
    # the dummy's own parametrized cases ran and passed in each file that parametrizes over the registry
    assert covered >= {"test_architecture.py", "test_forward_reference.py", "test_verify_rows.py",
                       "test_soundness.py"}, done.stdout[-4000:]
    assert " FAILED" not in done.stdout and " ERROR" not in done.stdout


def test_a_planted_hard_coded_list_fails_with_the_dummy_builtin(tmp_path):
    planted = tmp_path / "test_planted_list.py"
    planted.write_text(
        "from georecall.constructions import registry\n\n\n"
        "def test_the_constructions_are_the_six():\n"
        "    assert [s.id for s in registry.specs()] == ['G1', 'A1', 'G2', 'A2a', 'A2b', 'C1']\n")
    assert run_pytest([str(planted)], None, dummy=False).returncode == 0  # passes while there are six
    failed = run_pytest([str(planted)], None, dummy=True)
    assert failed.returncode == 1 and "G1X" in failed.stdout


def test_a_family_reused_under_another_id_names_that_id():
    """G1's family serving a spec "G1Y": its promise, its model's metadata and its refusal (a gate below the
    theorem's bound) name G1Y, never G1; G1's own entry still names G1."""
    import pytest

    from georecall.constructions.g1 import g1_family
    from georecall.constructions.registry import single_hop_family
    from georecall.errors import ConditionError

    reused = single_hop_family(g1_family, construction="G1Y")
    family = reused(64, 2)
    assert family.promise.result == "G1Y" and family.model.meta["construction"] == "G1Y"
    with pytest.raises(ConditionError) as refused:
        reused(64, 2, gate=0.01)
    assert "G1Y" in str(refused.value) and "G1 " not in str(refused.value)
    assert single_hop_family(g1_family)(64, 2).promise.result == "G1"
    from georecall.constructions import multi_hop, single_hop
    from georecall.constructions.registry import multi_hop_family

    # every module's family takes the id of the spec it serves
    for fn in (single_hop.a1_family, multi_hop.g2_family, multi_hop.a2_width_family,
               multi_hop.a2_depth_family, multi_hop.c1_family):
        adapt, k = (single_hop_family, 1) if fn is single_hop.a1_family else (multi_hop_family, 2)
        made = adapt(fn, construction="Y")(16, 2, k)
        assert made.promise.result == "Y" and made.model.meta["construction"] == "Y", fn.__name__
