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


# ------------------------------------------------------------- a builder option declared in the registry only

GEORECALL_WITH_DUMMY = ("import sys, dummy_builtin; from georecall.cli import main; "
                        "sys.exit(main(sys.argv[1:]))")


def georecall_with_dummy(*argv: str) -> subprocess.CompletedProcess:
    """``georecall ARGV`` in a fresh process where the dummy built-in (and its own option) is registered."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", GEORECALL_WITH_DUMMY, *argv], capture_output=True, text=True,
                          env=env, cwd=TESTS.parent, timeout=300)


def test_a_builder_option_reaches_the_command_line_from_its_declaration_alone(capsys):
    """G1X declares ``scale_readout`` in its registry entry (tests/dummy_builtin.py) and nowhere else: the
    commands building a single-hop construction offer ``--scale-readout`` in its declared wording, the value
    reaches the builder (the promised margin scales with it), and a construction that does not take it
    refuses it (exit 2) in the wording of every option a spec does not take."""
    import json

    import pytest

    from georecall.cli import main
    from georecall.verify.checking.run import run_check

    helped = georecall_with_dummy("check", "single-hop", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--scale-readout s" in helped.stdout
    assert "factor s on the read-out scale λ (G1X only)" in helped.stdout
    assert "--scale-readout" in georecall_with_dummy("certify", "single-hop", "--help").stdout
    assert "--scale-readout" in georecall_with_dummy("export", "--help").stdout
    # offered where a construction of its hops is built, nowhere else; absent while G1X is not registered
    assert "--scale-readout" not in georecall_with_dummy("check", "multi-hop", "--help").stdout
    with pytest.raises(SystemExit):  # argparse's --help
        main(["check", "single-hop", "--help"])
    assert "--scale-readout" not in capsys.readouterr().out

    done = georecall_with_dummy("check", "single-hop", "--construction", "G1X", "--N", "64", "--R", "2",
                                "--scale-readout", "3", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["reports"][0]
    assert report["params"]["scale_readout"] == 3.0
    tripled = run_check("G1", 64, 2, options={"lam": 3.0}).promise.margin  # λ = 3 on G1, the same family
    assert report["promise"]["margin"] == tripled > run_check("G1", 64, 2).promise.margin

    refused = georecall_with_dummy("check", "single-hop", "--N", "64", "--R", "2", "--scale-readout", "3")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.strip() == (
        "georecall: error: G1 (geometric) does not take read-out factor s (--scale-readout); it takes: "
        "attention gain g (Python only: gain=g in gr.check, gr.certify, gr.build), code kind (--codes), code "
        "length D (--D), gate constant G (--gate), integer mode (--integer), read-out scale λ (--lam)")


# --------------------------------------------------- a declared task encoding the family contradicts

PLANTED_SPEC = """
from georecall.constructions.a1 import A1_ENCODING
from georecall.constructions.g1 import g1_family, g1_nominal_promise
from georecall.constructions.registry import ConstructionSpec, single_hop_family

# G1's family, its entry declaring A1's encoding (facts in W2) by mistake: the family declares G1's
SPEC = ConstructionSpec("G1E", "geometric-misdeclared", "G1 with a wrong declaration", None,
                        g1_nominal_promise, options=frozenset({"gate", "gain", "integer"}),
                        task_encoding=A1_ENCODING, family=single_hop_family(g1_family, construction="G1E"))
"""


def test_check_refuses_a_declared_encoding_the_family_contradicts_as_certify_does(tmp_path, capsys):
    """A spec declaring a task encoding its family contradicts: ``check`` refuses it before any query, with
    certify's error and wording (exit 2 on the command line), and certify still refuses it; the honest G1
    entry is checked as before."""
    import pytest

    from georecall.cli import main
    from georecall.verify.checking import certify as cert
    from georecall.verify.checking.certify_family import DeclarationError
    from georecall.verify.checking.run import run_check

    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED_SPEC)
    namespace: dict = {}
    exec(PLANTED_SPEC, namespace)
    spec = namespace["SPEC"]
    assert spec.assembles_family  # check builds the family certify proves: the declaration must be its
    with pytest.raises(DeclarationError) as checked:
        run_check(spec, 16, 2)
    with pytest.raises(DeclarationError) as certified:
        cert.certify(spec, 16, 2)
    assert str(checked.value) == str(certified.value)
    assert str(checked.value).startswith("G1E (geometric-misdeclared): its family declares {")
    assert "the spec {" in str(checked.value) and "'layers.0.mlp.W2'" in str(checked.value)
    lines = []
    for command in ("check", "certify"):
        code = main([command, "single-hop", "--construction", f"{planted}:SPEC", "--N", "16", "--R", "2"])
        out, err = capsys.readouterr()
        assert code == 2 and out == "", (command, err)
        lines.append(err)
    assert lines[0] == lines[1] == f"georecall: error: {checked.value}\n"
    assert run_check("G1", 16, 2).passed  # the honest declaration
