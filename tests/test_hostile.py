"""Hostile input: each case a deliberately broken input from a hostile-input run (issue 28), and what the
command line must do with it: exit 2 with one line on stderr (one JSON document on stdout under ``--json``),
before the work, nothing left behind; Ctrl-C stays exit 130.

Paths: names too long once the temporary name is counted, folders too long, symbolic-link loops, dangling
links, files where a folder is asked. Damaged files: a truncated ``.npz`` member. User code: a builder or
module raising a ``BaseException``, looping, allocating past the budget, or building a model larger than
its promise says. The budget: ``--max-gib`` above the machine's memory. Output formats: ``--format json``
against ``--json``, LaTeX of characters it cannot set, a scheduler address with a newline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from georecall import memory, usercode
from georecall.cli import main
from georecall.errors import InputError, UserCodeError
from georecall.io import check_path, validate_output_path

LONG_NAME = "a" * 245  # a legal file name whose temporary name ".<name>.tmp-<pid>-XXXXXXXX" is not
LONG_FOLDER = "d" * 300  # longer than any file system's NAME_MAX


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_refusal(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("georecall: error:"), err
    for needle in needles:
        assert needle in lines[0], (needle, err)


def json_refusal(code: int, out: str, err: str, *needles: str) -> dict:
    assert code == 2, err
    doc = json.loads(out)
    assert doc["status"] == 2 and all(needle in doc["error"] for needle in needles), doc
    assert len(err.strip().splitlines()) <= 1, err
    return doc


@pytest.fixture
def loop(tmp_path):
    """``loop1 -> loop2 -> loop1``: a symbolic-link loop."""
    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    return tmp_path / "loop1"


def _left(tmp_path: Path, *keep: str) -> list[str]:
    return sorted(p.name for p in tmp_path.iterdir() if p.name not in keep)


# ------------------------------------------------------------------------------------------------ paths


@pytest.mark.parametrize("argv", [
    ["sweep", "threshold", "--N", "8", "--out"],
    ["train", "--N", "8", "--R", "2", "--steps", "2", "--out"],
    ["check", "single-hop", "--N", "8", "--R", "2", "--save"],
    ["certify", "single-hop", "--N", "3", "--R", "2", "--witness"],
], ids=["sweep", "train", "check", "certify"])
def test_a_name_whose_temporary_name_is_too_long_is_refused_before_the_work(argv, tmp_path, capsys,
                                                                            monkeypatch):
    """245 characters are a legal name, but the temporary name the file is written under first is not:
    refused before the work (which would have crashed at the write, after it), nothing written."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run([*argv, LONG_NAME], capsys)
    one_line_refusal(code, err, "bytes", "the name it is first written under")
    assert _left(tmp_path) == []


def test_the_temporary_name_is_what_atomic_write_uses(tmp_path):
    """The length check counts the name atomic_write really creates: a name just short enough passes and is
    written; one character more is refused (the control and the broken input side by side)."""
    from georecall.io import atomic_write, temporary_prefix

    name_max = os.pathconf(tmp_path, "PC_NAME_MAX")
    fits = "b" * (name_max - len(temporary_prefix("")) - 8)  # its temporary name: exactly NAME_MAX
    path = validate_output_path(str(tmp_path / fits))
    atomic_write(path, b"x")
    assert (tmp_path / fits).read_bytes() == b"x"
    with pytest.raises(InputError, match="first written under"):
        validate_output_path(str(tmp_path / (fits + "b")))


@pytest.mark.parametrize("argv", [
    ["demo", "--N", "8", "--R", "2", "--figures"],
    ["study", "mechanism", "--quick", "--out", "r.jsonl", "--figures"],
    ["figures", "--out"],
    ["sweep", "threshold", "--N", "8", "--out"],
], ids=["demo", "study", "figures", "sweep"])
@pytest.mark.parametrize("where", ["long", "loop", "dangling"])
def test_a_folder_too_long_or_behind_a_bad_link_is_refused(argv, where, tmp_path, loop, capsys, monkeypatch):
    """A 300-character folder, a symbolic-link loop and a dangling link, as the folder a command writes
    into (or the folder of its results file): one line, exit 2, nothing created."""
    monkeypatch.chdir(tmp_path)
    os.symlink(tmp_path / "missing", tmp_path / "dangling")
    folder = {"long": LONG_FOLDER, "loop": "loop1", "dangling": "dangling"}[where]
    target = os.path.join(folder, "r.jsonl") if argv[0] == "sweep" else folder
    code, _, err = run([*argv, target], capsys)
    word = {"long": "bytes", "loop": "symbolic link loop", "dangling": "dangling"}[where]
    one_line_refusal(code, err, word)
    assert _left(tmp_path, "loop1", "loop2", "dangling") == []


def test_a_file_where_a_folder_is_asked_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    code, _, err = run(["figures", "--out", str(tmp_path / "file")], capsys)
    one_line_refusal(code, err, "not a folder")
    code, _, err = run(["figures", "--out", str(tmp_path / "file" / "below")], capsys)
    one_line_refusal(code, err, "file")


def test_check_path_control_and_limits(tmp_path, loop):
    """The helper itself: an ordinary path passes; each limit fails with its own word."""
    assert check_path(str(tmp_path / "ok" / "fine.npz")) == str(tmp_path / "ok" / "fine.npz")
    with pytest.raises(InputError, match="bytes"):
        check_path(str(tmp_path / LONG_FOLDER / "x"))
    with pytest.raises(InputError, match="too long"):
        check_path(str(tmp_path / "/".join(["e" * 200] * 25)))
    with pytest.raises(InputError, match="symbolic link loop"):
        check_path(str(loop / "x"))


# ------------------------------------------------------------------------------------------ damaged files


def _truncate_member(src: Path, dst: Path, member: str, cut: int = 20) -> None:
    """Copy an .npz with one member's bytes cut short (a valid zip; NumPy reads "EOF: reading array
    data")."""
    with zipfile.ZipFile(src) as z, zipfile.ZipFile(dst, "w") as out:
        for info in z.infolist():
            data = z.read(info)
            out.writestr(info.filename, data[:-cut] if info.filename.startswith(member) else data)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    code = main(["check", "single-hop", "--N", "8", "--R", "2", "--save", str(folder / "m.npz"), "--quiet"])
    assert code == 0
    return folder / "m.npz"


@pytest.mark.parametrize("command", ["eval", "probe", "transfer"])
@pytest.mark.parametrize("member", ["entity_embedding", "extra____task_table"])
def test_a_truncated_member_is_one_line(command, member, model_file, tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    _truncate_member(model_file, bad, member)
    code, _, err = run([command, str(bad)], capsys)
    one_line_refusal(code, err, "bad.npz")
    code, out, err = run([command, str(bad), "--json"], capsys)
    json_refusal(code, out, err, "bad.npz")


def test_a_truncated_task_table_is_one_line(model_file, tmp_path, capsys):
    np.save(tmp_path / "t.npy", np.zeros((2, 8), np.int64))
    raw = (tmp_path / "t.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(raw[:-10])
    code, _, err = run(["eval", str(model_file), "--task", str(tmp_path / "t.npy")], capsys)
    one_line_refusal(code, err, "t.npy")
    code, _, err = run(["check", "single-hop", "--N", "8", "--R", "2", "--task", str(tmp_path / "t.npy")],
                       capsys)
    one_line_refusal(code, err, "t.npy")
    (tmp_path / "t.npz").write_bytes(b"")
    _truncate_member(model_file, tmp_path / "t.npz", "extra____task_table")
    code, _, err = run(["eval", str(model_file), "--task", str(tmp_path / "t.npz")], capsys)
    one_line_refusal(code, err)


def test_an_intact_model_file_still_evaluates(model_file, capsys):
    """The control of the damaged-file cases: the same file untouched evaluates."""
    code, out, _ = run(["eval", str(model_file), "--json"], capsys)
    assert code == 0 and json.loads(out)["accuracy"] == 1.0


# ------------------------------------------------------------------------------------------- user code

USER_MODULE = '''
import dataclasses, time
import numpy as np
from georecall.constructions import registry

G1 = registry.get("G1")


class Boom(BaseException):
    pass


def raising(task, k=1, **options):
    raise Boom("kaboom")


def exiting(task, k=1, **options):
    raise SystemExit(0)


def interrupted(task, k=1, **options):
    raise KeyboardInterrupt


def looping(task, k=1, **options):
    while True:
        time.sleep(0.01)


def swallowing(task, k=1, **options):
    while True:
        try:
            time.sleep(0.01)
        except BaseException:
            pass


def allocating(task, k=1, **options):
    hog = np.ones(12 * 2**30 // 8)
    return G1.build(task, k, **options)


def understated(task, k=1, **options):
    """G1 with an MLP of 8 M units per row more than the promise (zeros: the function is unchanged)."""
    built = G1.build(task, k, **options)
    model = built.model
    mlp = model.layers[0].mlp
    wide = 8 * 2**20 // model.d
    model = model.replace(**{"layers.0.mlp.W1": np.zeros((model.d, wide)), "layers.0.mlp.b1": np.zeros(wide),
                             "layers.0.mlp.W2": np.zeros((wide, model.d))})
    return dataclasses.replace(built, model=model)


def spec(ident, build):
    return dataclasses.replace(G1, id=ident, name=ident.lower(), build=build)


RAISE = spec("H1", raising)
EXIT = spec("H2", exiting)
INTERRUPT = spec("H3", interrupted)
LOOP = spec("H4", looping)
SWALLOW = spec("H5", swallowing)
ALLOCATE = spec("H6", allocating)
UNDERSTATE = spec("H7", understated)
'''


@pytest.fixture
def user_module(tmp_path):
    path = tmp_path / "hostile_user.py"
    path.write_text(USER_MODULE)
    return str(path)


def check(user_module, attr, *extra):
    return ["check", "single-hop", "--N", "8", "--R", "2", "--quiet", "--construction",
            f"{user_module}:{attr}", *extra]


@pytest.mark.parametrize("attr, needle", [("RAISE", "raised Boom: kaboom"), ("EXIT", "raised SystemExit")])
def test_a_builder_raising_a_base_exception_exits_2(user_module, attr, needle, capsys):
    code, _, err = run(check(user_module, attr), capsys)
    one_line_refusal(code, err, needle)
    code, out, err = run(check(user_module, attr, "--json"), capsys)
    json_refusal(code, out, err, needle)


def test_a_builder_interrupted_is_still_130(user_module, capsys):
    code, _, err = run(check(user_module, "INTERRUPT"), capsys)
    assert code == 130 and "interrupted" in err


def test_a_looping_builder_is_stopped_by_the_build_timeout(user_module, capsys):
    code, out, err = run(check(user_module, "LOOP", "--build-timeout", "0.5", "--json"), capsys)
    json_refusal(code, out, err, "did not finish within 0.5 s")


@pytest.mark.parametrize("command", ["check", "certify"])
def test_a_builder_allocating_past_the_budget_is_stopped(user_module, command, capsys):
    """12 GiB asked at --max-gib 1: the allocation fails inside the builder (the process does not grow)."""
    argv = check(user_module, "ALLOCATE", "--max-gib", "1", "--json")
    if command == "certify":
        argv = ["certify", "single-hop", "--N", "3", *argv[6:]]
    code, out, err = run(argv, capsys)
    json_refusal(code, out, err, "raised MemoryError under its memory limit")


def test_a_model_larger_than_its_promise_is_measured_before_the_check(user_module, capsys):
    """The promise says G1's sizes; the built MLP holds 16 M parameters more: refused from the measured
    arrays as soon as it is built, before the checker runs (at a budget the promise passes)."""
    code, out, err = run(check(user_module, "UNDERSTATE", "--max-gib", "0.5", "--json"), capsys)
    json_refusal(code, out, err, "measured", "budget")


def test_the_measured_model_estimate_grows_with_the_arrays():
    """Control of the measurement: G1 itself fits a small budget; its much wider variant does not."""
    from georecall.constructions import registry
    from georecall.theory.tasks import task_for_seed

    task = task_for_seed(8, 2, 0)
    model = registry.get("G1").build(task).model
    budget = memory.Budget.from_gib(0.5)
    assert usercode.require_model_fits(model, "G1", task, 1, budget) < budget.max_bytes
    wide = 8 * 2**20 // model.d
    big = model.replace(**{"layers.0.mlp.W1": np.zeros((model.d, wide)), "layers.0.mlp.b1": np.zeros(wide),
                           "layers.0.mlp.W2": np.zeros((wide, model.d))})
    with pytest.raises(InputError, match="measured"):
        usercode.require_model_fits(big, "G1 wide", task, 1, budget)


def test_a_module_looping_or_raising_at_import_exits_2(tmp_path, capsys):
    (tmp_path / "loops.py").write_text("import time\nwhile True:\n    time.sleep(0.01)\n")
    (tmp_path / "raises.py").write_text("class Boom(BaseException):\n    pass\nraise Boom('at import')\n")
    code, out, err = run(["check", "single-hop", "--construction", f"{tmp_path / 'loops.py'}:X",
                          "--build-timeout", "0.5", "--json"], capsys)
    json_refusal(code, out, err, "did not finish")
    code, _, err = run(["check", "single-hop", "--construction", f"{tmp_path / 'raises.py'}:X"], capsys)
    one_line_refusal(code, err, "raised Boom: at import")


def test_limited_lets_exceptions_and_interrupts_through():
    """The containment's own contract: an Exception passes for the caller to word, Ctrl-C passes, a
    BaseException becomes UserCodeError, and the limits are gone afterwards."""
    with pytest.raises(ValueError):
        with usercode.limited("x"):
            raise ValueError("theirs")
    with pytest.raises(KeyboardInterrupt):
        with usercode.limited("x"):
            raise KeyboardInterrupt
    with pytest.raises(UserCodeError, match="raised GeneratorExit"):
        with usercode.limited("x"):
            raise GeneratorExit
    import resource
    import signal
    usercode.set_limits(timeout=5, budget=memory.Budget.from_gib(1))
    before = resource.getrlimit(resource.RLIMIT_AS)
    with usercode.limited("x"):
        assert resource.getrlimit(resource.RLIMIT_AS)[0] != before[0]
        assert signal.getitimer(signal.ITIMER_REAL)[0] > 0
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


@pytest.mark.slow
def test_a_builder_swallowing_the_timeout_is_stopped(user_module):
    """A builder that catches every interruption: after ABANDON_AFTER of them the process stops, with one
    line and, under --json, one document (a subprocess: the stop is os._exit)."""
    proc = subprocess.run([sys.executable, "-m", "georecall.cli", *check(user_module, "SWALLOW"),
                           "--build-timeout", "0.2", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert json.loads(proc.stdout)["status"] == 2
    assert proc.stderr.strip().splitlines() == [json.loads(proc.stdout)["error"]]
    assert "ignored" in proc.stderr


# ----------------------------------------------------------------------------------------------- budget


def test_a_commands_own_warnings_are_kept_beside_the_runs_python_warnings(monkeypatch, capsys):
    """probe and transfer put warnings in their result; a Python warning raised during the run is added to
    them under --json, not written over them."""
    import warnings as python_warnings

    from georecall.cli import commands

    real = commands.COMMANDS["count"]

    def count_with_warnings(p):
        python_warnings.warn("a library's warning", UserWarning, stacklevel=1)
        return {**real(p), "warnings": ["the command's own warning"]}

    monkeypatch.setitem(commands.COMMANDS, "count", count_with_warnings)
    code, out, _ = run(["count", "--N", "3", "--R", "1", "--json"], capsys)
    found = json.loads(out)["warnings"]
    assert code == 0 and found[0] == "the command's own warning"
    assert any("a library's warning" in line for line in found[1:])


def test_max_gib_above_the_machine_is_capped_with_a_warning(capsys):
    code, out, err = run(["count", "--N", "3", "--R", "1", "--max-gib", str(2.0**20), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and err == ""
    assert any("capped" in w for w in doc["warnings"]), doc.get("warnings")
    with pytest.warns(UserWarning, match="capped"):
        assert memory.budget_bytes(2.0**20) <= memory.available_bytes()
    small = memory.budget_bytes(0.001)  # the control: a budget the machine has is kept as given
    assert small == int(0.001 * memory.GIB)


def test_examples_are_unaffected(capsys):
    """The shipped user construction (the control of every user-code case) still checks."""
    root = Path(__file__).resolve().parents[1]
    code, out, _ = run(["check", "single-hop", "--N", "16", "--R", "2", "--json", "--construction",
                        f"{root / 'examples' / 'my_construction.py'}:SPEC"], capsys)
    assert code == 0 and json.loads(out)["passed"]



# ------------------------------------------------------------------------------------------ output formats


@pytest.mark.parametrize("argv", [["bounds", "--columns", "construction"], ["bounds", "--columns", "nope"],
                                  ["count", "--N", "0"]], ids=["columns", "bad-column", "bad-N"])
def test_format_json_fails_as_json_does(argv, capsys):
    """``--format json`` is ``--json``: a refusal prints one document, like ``--json``'s."""
    code, out, err = run([*argv, "--format", "json"], capsys)
    doc = json_refusal(code, out, err)
    code2, out2, _ = run([*argv, "--json"], capsys)
    assert code2 == code and json.loads(out2)["error"] == doc["error"]


def test_a_failure_document_records_the_parameters_a_success_records(tmp_path, capsys):
    """A refused run's ``params`` are the command's parameters (those its success document records: the
    control), not the run's controls (``json``, ``quiet``, ``max_gib``, ``debug``, ``build_timeout``)."""
    model = tmp_path / "m.npz"
    saved = run(["check", "single-hop", "--N", "16", "--R", "2", "--save", str(model), "--quiet"], capsys)
    assert saved[0] == 0
    code, out, _ = run(["eval", str(model), "--json"], capsys)
    assert code == 0
    success = json.loads(out)["params"]
    code, out, err = run(["eval", str(tmp_path / "missing.npz"), "--json", "--max-gib", "1"], capsys)
    failure = json_refusal(code, out, err)["params"]
    assert set(failure) == set(success), (failure, success)
    assert failure["model"] == str(tmp_path / "missing.npz")


def test_format_json_prints_nothing_on_stderr(capsys):
    """``count`` prints progress on stderr in text mode (the control); with ``--format json``, nothing."""
    code, _, err = run(["count", "--N", "4", "--R", "2"], capsys)
    assert code == 0
    code, out, err = run(["count", "--N", "4", "--R", "2", "--format", "json"], capsys)
    assert code == 0 and err == "" and json.loads(out)["status"] == 0


@pytest.mark.slow
def test_json_on_a_dask_cluster_prints_nothing_on_stderr(tmp_path):
    """A Dask ``local:2`` cluster's workers log INFO lines on stderr unless told not to; under --json the
    run prints nothing there at exit 0 (a subprocess: the workers inherit its environment)."""
    pytest.importorskip("distributed", reason="the distributed extra is not installed")
    env = {k: v for k, v in os.environ.items() if not k.startswith("DASK_")}
    proc = subprocess.run([sys.executable, "-m", "georecall.cli", "sweep", "threshold", "--N", "8",
                           "--R", "2", "--seeds", "0", "--scheduler", "local:2", "--out",
                           str(tmp_path / "r.jsonl"), "--json"], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr[-2000:]
    assert json.loads(proc.stdout)["status"] == 0


def test_latex_maps_what_it_can_and_says_what_it_cannot(capsys):
    from georecall.bounds.tables import latex_escape

    with pytest.warns(UserWarning, match="U\\+1F4A5"):
        text = latex_escape("α≤β 💥 ∑ é Ω")
    assert text == r"$\alpha\leq\beta$ ? $\sum$ \'{e} $\Omega$" and text.isascii()
    code, out, err = run(["bounds", "--format", "latex", "--caption", "α≤β 💥 ∑"], capsys)
    assert code == 0 and r"\caption{$\alpha\leq\beta$ ? $\sum$" in out and out.isascii()
    warned = [line for line in err.splitlines() if "warning" in line]
    assert len(warned) == 1 and "U+1F4A5 COLLISION SYMBOL" in warned[0]
    code, out, err = run(["bounds", "--format", "latex", "--caption", "α≤β ∑"], capsys)  # the control
    assert code == 0 and "warning" not in err


@pytest.mark.parametrize("value", ["local:2\n", "local:2 ", " local:2", "local:\u0662", "tcp://h\x01:1",
                                   "tcp://h:1\n", "tcp://-h:1", "tcp://h:1/x"])
def test_a_scheduler_value_is_validated_whole(value, capsys):
    code, _, err = run(["sweep", "threshold", "--N", "8", "--scheduler", value], capsys)
    one_line_refusal(code, err, "--scheduler")


def test_well_formed_scheduler_values_pass_validation():
    from georecall.cli.params import check_scheduler

    for value in ("local:2", "tcp://127.0.0.1:8786", "tcp://[::1]:8786", "tcp://my-host.example:1"):
        check_scheduler(value)


@pytest.mark.parametrize("value", ["local:2\n", " local:2", "local:\u00b2", "tcp://host:1 ", "local: 2"])
def test_the_library_scheduler_parser_is_as_strict_as_the_command_line(value):
    from georecall.experiments.executors import parse_scheduler

    assert parse_scheduler("local:2") == ("local", 2)  # the control: the clean spelling is accepted
    with pytest.raises(InputError):
        parse_scheduler(value)
