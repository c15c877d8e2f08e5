"""A construction named on the command line as ``FILE.py:ATTR`` or ``MODULE:ATTR`` gets its spec's own builder
options (``ConstructionSpec.own_options``) on that command line: ``check``, ``certify`` and ``export`` offer
them, show them in ``--help`` when the construction is on the line, and pass them to its builder. The module
is loaded once, before parsing, under the line's limits; a file that is missing, or lacks ATTR, or raises, is
refused with the line it gets without the option.

The command lines run in fresh processes (``python -m georecall.cli``): a loaded spec stays registered for the
rest of a process, so an in-process run would change every later parser of the test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from georecall.cli.common import constructions_loaded_once, resolve_spec
from georecall.constructions import registry

# A user's construction with an option of its own: G1's family under its own id, its read-out scale λ
# multiplied by --scale-readout s (the promised margin scales with it). Importing it prints one line, so a
# test sees how often the module ran.
SPEC_SOURCE = '''
from georecall.constructions.builder_options import BuilderOption
from georecall.constructions.g1 import G1_ENCODING, g1_family, g1_nominal_promise
from georecall.constructions.registry import ConstructionSpec, single_hop_family

SCALE_READOUT = BuilderOption("scale_readout", "positive", "factor s on the read-out scale (this file only)",
                              "read-out factor s (--scale-readout)", metavar="s")


def family(N, R, codes="binary", *, scale_readout=None, **options):
    if scale_readout is not None:
        options["lam"] = options.get("lam", 1.0) * scale_readout
    return g1_family(N, R, codes, **options)


print("module {name} loaded")
SPEC = ConstructionSpec("{id}", "{name}", "G1 with an option of its own", None, g1_nominal_promise,
                        options=frozenset({{"gate", "integer"}}), task_encoding=G1_ENCODING,
                        family=single_hop_family(family, construction="{id}"), own_options=(SCALE_READOUT,))
'''
SIZES = ("--N", "64", "--R", "2")


@pytest.fixture
def folder(tmp_path):
    """A folder holding the spec as a file (``my_spec.py``) and as an importable module (``my_module``)."""
    (tmp_path / "my_spec.py").write_text(SPEC_SOURCE.format(id="G1F", name="file-spec"))
    (tmp_path / "my_module.py").write_text(SPEC_SOURCE.format(id="G1M", name="module-spec"))
    return tmp_path


def georecall(folder, *argv: str) -> subprocess.CompletedProcess:
    """``georecall ARGV`` in a fresh process, in ``folder`` (where the spec's file and module are)."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "georecall.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=folder, timeout=300)


def document(done: subprocess.CompletedProcess) -> dict:
    """The one JSON document a ``--json`` run printed."""
    return json.loads(done.stdout)


@pytest.mark.parametrize("key", ["my_spec.py:SPEC", "my_module:SPEC"])
def test_a_named_specs_own_option_is_offered_and_reaches_its_builder(folder, key):
    plain = document(georecall(folder, "check", "single-hop", "--construction", key, *SIZES, "--json"))
    scaled = georecall(folder, "check", "single-hop", f"--construction={key}", *SIZES, "--scale-readout", "3",
                       "--json")
    assert scaled.returncode == 0, scaled.stderr
    doc = document(scaled)
    report, before = doc["reports"][0], plain["reports"][0]
    assert report["params"]["scale_readout"] == 3.0 and report["passed"]
    # the builder saw it: λ tripled, and with it the promised margin
    assert report["promise"]["margin"] == pytest.approx(3 * before["promise"]["margin"])
    assert doc["printed"].count("loaded") == 1  # the module ran once: the look ahead's load is the command's


def test_certify_passes_a_file_specs_own_option_to_its_builder(folder):
    runs = [georecall(folder, "certify", "single-hop", "--construction", "my_spec.py:SPEC", *SIZES, *scale,
                      "--json") for scale in ((), ("--scale-readout", "2"))]
    plain, scaled = (document(done) for done in runs)
    assert [plain["verdict"], scaled["verdict"]] == ["CERTIFIED", "CERTIFIED"], runs[1].stderr
    assert scaled["params"]["scale_readout"] == 2.0
    assert scaled["promise"]["margin"] == 2 * plain["promise"]["margin"]


def test_export_accepts_a_file_specs_own_option(folder):
    done = georecall(folder, "export", str(folder / "out"), "--to", "onnx", "--construction",
                     "my_spec.py:SPEC", "--N", "16", "--R", "2", "--scale-readout", "2", "--json")
    doc = document(done)
    assert doc["params"]["builder_options"] == {"scale_readout": 2.0}  # parsed, not refused
    # the export extra may be missing here: then the refusal names it, not the option
    assert doc["status"] == 0 or (doc["status"] == 2 and "onnx" in doc["error"].lower()), doc


@pytest.mark.parametrize("command", [("check", "single-hop"), ("certify", "single-hop"), ("export",)])
def test_help_shows_the_own_option_when_the_construction_is_on_the_line(folder, command):
    helped = georecall(folder, *command, "--construction", "my_spec.py:SPEC", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "--scale-readout s" in helped.stdout and "factor s on the read-out scale (this file only)" in \
        helped.stdout
    assert "--scale-readout" not in georecall(folder, *command, "--help").stdout
    via_module = georecall(folder, *command, "--construction=my_module:SPEC", "--help")
    assert "--scale-readout s" in via_module.stdout


def test_the_option_is_refused_for_another_construction(folder):
    usual = "georecall: unrecognized arguments: --scale-readout 2\n"
    line = ("check", "single-hop")
    refused = georecall(folder, *line, "--construction", "geometric", *SIZES, "--scale-readout", "2")
    assert (refused.returncode, refused.stdout, refused.stderr) == (2, "", usual)
    # the last --construction is the one built (as argparse reads it), and the one whose options are offered
    overridden = georecall(folder, *line, "--construction", "my_spec.py:SPEC", "--construction", "geometric",
                           *SIZES, "--scale-readout", "2")
    assert (overridden.returncode, overridden.stderr) == (2, usual)
    # a multi-hop command does not offer a single-hop spec's options
    multi = georecall(folder, "check", "multi-hop", "--construction", "my_spec.py:SPEC", "--scale-readout",
                      "2")
    assert (multi.returncode, multi.stderr) == (2, usual)


@pytest.mark.parametrize("key, line", [
    ("missing.py:SPEC", "georecall: error: no such file 'missing.py' for construction 'missing.py:SPEC'"),
    ("my_spec.py:NOPE", "georecall: error: construction 'my_spec.py:NOPE': module 'my_spec.py' has no "
                        "attribute 'NOPE'"),
    ("missing_module:SPEC", "georecall: error: cannot import 'missing_module' for construction "
                            "'missing_module:SPEC': No module named 'missing_module'"),
])
def test_a_construction_that_does_not_load_is_refused_with_its_usual_line(folder, key, line):
    for option in ((), ("--scale-readout", "2")):  # with the option its spec would declare, the same line
        done = georecall(folder, "check", "single-hop", "--construction", key, *SIZES, *option, "--json")
        assert (done.returncode, done.stderr) == (2, line + "\n"), done.stderr
        doc = document(done)
        assert doc["error"] == line and doc["status"] == 2


def test_a_module_that_raises_runs_once_under_the_lines_limits(folder):
    (folder / "raises.py").write_text("print('about to fail')\nraise RuntimeError('boom')\n")
    done = georecall(folder, "check", "single-hop", "--construction", "raises.py:SPEC", *SIZES, "--json")
    doc = document(done)
    assert doc["status"] == 2 and doc["error"].startswith("georecall: error: your construction module "
                                                          "'raises.py' raised RuntimeError: boom")
    assert doc["printed"] == "about to fail\n"  # loaded once, its output kept for the document
    (folder / "slow.py").write_text("import time\ntime.sleep(120)\n")
    slow = georecall(folder, "check", "single-hop", "--construction", "slow.py:SPEC", "--build-timeout", "1",
                     "--scale-readout", "2")
    assert slow.returncode == 2
    assert "your construction's module 'slow.py' did not finish within 1 s (--build-timeout)" in slow.stderr


def test_help_with_a_construction_that_does_not_load_says_why_its_options_are_missing(folder):
    (folder / "raises.py").write_text("raise RuntimeError('boom')\n")
    helped = georecall(folder, "check", "single-hop", "--construction", "raises.py:SPEC", "--help")
    assert helped.returncode == 0 and "--construction" in helped.stdout  # the help, less the spec's options
    assert helped.stderr == ("georecall: note: the help above lacks the options of a construction that did "
                             "not load: your construction module 'raises.py' raised RuntimeError: boom\n")
    control = georecall(folder, "check", "single-hop", "--construction", "my_spec.py:SPEC", "--help")
    assert control.returncode == 0 and control.stderr == ""


def test_within_one_command_line_a_users_construction_is_loaded_once(folder, monkeypatch):
    monkeypatch.chdir(folder)
    try:
        with constructions_loaded_once():
            first = resolve_spec("my_spec.py:SPEC", None)
            assert resolve_spec("my_spec.py:SPEC", "single") is first
        again = resolve_spec("my_spec.py:SPEC", None)  # outside a run: loaded again, as registry.resolve does
        assert again is not first and again.id == first.id == "G1F"
        with constructions_loaded_once(), pytest.raises(Exception, match="no such file") as missing:
            resolve_spec("missing.py:SPEC", None)
        with constructions_loaded_once():
            refusals = []
            for _ in range(2):
                with pytest.raises(Exception, match="no such file") as refused:
                    resolve_spec("missing.py:SPEC", None)
                refusals.append(refused.value)
            assert refusals[0] is refusals[1] and type(refusals[0]) is type(missing.value)
    finally:
        registry.unregister("G1F")
