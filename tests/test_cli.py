import json
import os
import pathlib
import subprocess
import sys

import pytest

from georecall.cli import main


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_check_single_hop_json_records_parameters_seed_and_version(capsys):
    code, out, _ = run(["check", "single-hop", "--N", "64", "--R", "3", "--seed", "5", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["passed"]
    assert doc["params"]["N"] == 64 and doc["params"]["seed"] == 5 and doc["version"]
    assert doc["check"]["n_queries"] == 192 and doc["check"]["exact"]


@pytest.mark.parametrize("construction", ["geometric", "associative"])
@pytest.mark.parametrize("codes", ["binary", "sign", "gaussian"])
def test_check_single_hop_table(construction, codes, capsys):
    args = [
        "check",
        "single-hop",
        "--N",
        "40",
        "--R",
        "2",
        "--construction",
        construction,
        "--codes",
        codes,
        "--D",
        "20",
        "--quiet",
    ]
    code, out, _ = run(args, capsys)
    assert code == 0 and "PASS" in out


def test_integer_mode_from_the_command_line(capsys):
    code, out, _ = run(["check", "single-hop", "--N", "100", "--R", "4", "--integer", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["check"]["integer"] and doc["check"]["min_margin"] == 4.0


@pytest.mark.parametrize(
    "argv, message",
    [
        (["check", "single-hop", "--N", "100", "--D", "3"], "2^D >= N"),
        (["check", "single-hop", "--N", "0"], "whole number >= 1"),
        (["check", "single-hop", "--N", "ten"], "whole number"),
        (["check", "single-hop", "--gate", "0.1"], "gate"),
        (["check", "single-hop", "--codes", "gaussian", "--integer"], "no integer scale"),
        (["check", "single-hop", "--seed", "-1"], "whole number >= 0, got -1"),
        (["check"], "required"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, message, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_failing_check_exits_1(monkeypatch, capsys):
    import georecall.verify.sections.suite as suite
    from georecall.verify.checking.check import CheckResult
    from georecall.verify.checking.report import Report

    failing = Report(
        "broken",
        {"N": 2, "R": 1},
        None,
        CheckResult(
            2, 1, -1.0, 0, [{"query": 0, "tokens": [2, 0], "expected": 1, "predicted": 0, "margin": -1.0}]
        ),
        {"d": 1, "m": 0},
    )
    monkeypatch.setattr(suite, "SECTIONS", [("broken", lambda seed, progress, budget=None: [failing])])
    code, out, _ = run(["verify", "--quiet"], capsys)
    assert code == 1 and "FAIL" in out and "expected 1 predicted 0" in out


@pytest.mark.slow
def test_console_script_verify_passes():
    """The main job, as a user runs it (a subprocess through the installed entry point's module)."""
    proc = subprocess.run(
        [sys.executable, "-m", "georecall.cli", "verify", "--json", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["passed"] and all(r["passed"] for r in doc["reports"])
    names = [r["name"] for r in doc["reports"]]
    assert "G1 binary int (exact)" in names and "G1 binary float (certified)" in names


@pytest.mark.parametrize("construction", ["path-blocks", "associative-width", "associative-depth", "cot"])
def test_check_multi_hop(construction, capsys):
    code, out, _ = run(
        ["check", "multi-hop", "--construction", construction, "--N", "32", "--R", "2", "--k", "2", "--json"],
        capsys,
    )
    doc = json.loads(out)
    assert code == 0 and doc["passed"] and doc["check"]["n_queries"] == 32 * 4
    if construction == "cot":
        assert doc["extra"]["teacher_forcing"]["per_position"] == [1.0, 1.0]


def test_multi_hop_refusals_exit_2(capsys):
    code, _, err = run(["check", "multi-hop", "--N", "4096", "--R", "16", "--k", "3"], capsys)
    assert code == 2 and "GiB" in err
    code, _, err = run(["check", "multi-hop", "--N", "64", "--R", "2", "--beta", "0.1"], capsys)
    assert code == 2 and "leakage" in err


def test_tradeoff_table_and_json(capsys):
    code, out, _ = run(["tradeoff", "--N", "1024", "--R", "4", "--k-max", "3"], capsys)
    assert code == 0 and "G2 d" in out
    code, out, _ = run(["tradeoff", "--N", "1024", "--R", "4", "--k-max", "3", "--json"], capsys)
    rows = json.loads(out)["rows"]
    assert len(rows) == 12 and {r["construction"] for r in rows} == {"G2", "A2a", "A2b", "C1"}


def test_bounds_command_formats(capsys):
    code, out, _ = run(["bounds", "--N", "1024", "4096", "--R", "4", "--k", "1", "2", "--json"], capsys)
    rows = json.loads(out)["rows"]
    from georecall.constructions import registry

    per_N = len(registry.specs()) + len(registry.specs("multi"))  # k = 1: every construction; k = 2: k-hop
    assert code == 0 and len(rows) == 2 * per_N
    code, out, _ = run(
        ["bounds", "--N", "1024", "--R", "4", "--k", "1", "--format", "csv", "--quiet"], capsys
    )
    assert code == 0 and out.startswith("construction,")


def test_count_command(capsys):
    code, out, _ = run(["count", "--N", "4", "--R", "2", "--k", "3", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["passed"] and doc["tasks"] == 576
    assert [r["F_k"] for r in doc["rows"]] == [576, 458, 534]


def test_precision_command(capsys):
    code, out, _ = run(["precision", "--N", "128", "--R", "3", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["smallest_exact_bits"] == 2 and doc["seed"] == 0


def test_check_with_bits(capsys):
    code, out, _ = run(["check", "single-hop", "--N", "128", "--R", "3", "--bits", "2", "--json"], capsys)
    assert code == 0 and json.loads(out)["check"]["exact"]
    code, _, _ = run(
        [
            "check",
            "single-hop",
            "--N",
            "128",
            "--R",
            "3",
            "--bits",
            "2",
            "--construction",
            "associative",
            "--quiet",
        ],
        capsys,
    )
    assert code == 1


def test_train_command_writes_a_loadable_model(tmp_path, capsys):
    out = str(tmp_path / "model.npz")
    code, text, _ = run(
        ["train", "--N", "32", "--R", "2", "--d", "12", "--out", out, "--json", "--seed", "3"], capsys
    )
    doc = json.loads(text)
    assert code == 0 and doc["reached"] and doc["params"]["seed"] == 3
    from georecall.constructions.storage import load_model

    model, header = load_model(out)
    assert header["record"]["N"] == 32 and header["extra_arrays"]["task_table"].shape == (2, 32)


def test_sweep_threshold_command_resumes(tmp_path, capsys):
    out = str(tmp_path / "t.jsonl")
    args = [
        "sweep",
        "threshold",
        "--N",
        "32",
        "--R",
        "2",
        "--seeds",
        "0",
        "--steps",
        "150",
        "--out",
        out,
        "--json",
    ]
    code, text, _ = run(args, capsys)
    doc = json.loads(text)
    assert code == 0 and {r["mode"] for r in doc["thresholds"]} == {"learned", "frozen"}
    lines = open(out).read().splitlines()
    code, text, _ = run(args, capsys)
    assert code == 0 and open(out).read().splitlines() == lines


def test_train_command_with_hops_and_cot(capsys):
    code, text, _ = run(
        [
            "train",
            "--N",
            "32",
            "--R",
            "2",
            "--k",
            "2",
            "--cot",
            "--attention",
            "softmax",
            "--heads",
            "2",
            "--d",
            "16",
            "--json",
        ],
        capsys,
    )
    doc = json.loads(text)
    assert code == 0 and doc["reached"] and doc["params"]["k"] == 2 and doc["params"]["cot"]


# ----------------------------------------------------------------------------- layers, validation, contract


def _parsers():
    from georecall.cli import build_parser

    stack, seen = [build_parser()], []
    while stack:
        parser = stack.pop()
        seen.append(parser)
        for action in parser._actions:
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                stack += list(action.choices.values())
    return seen


def test_help_has_no_literal_percent_every_option_has_help_and_demo_a_description():
    parsers = _parsers()
    assert len(parsers) > 15
    for parser in parsers:
        text = parser.format_help()
        assert "%%" not in text, parser.prog
        for action in parser._actions:
            if action.option_strings or action.dest not in ("group", "target", "command"):
                assert action.help, f"{parser.prog} {action.option_strings or action.dest}"
    demo = [p for p in parsers if p.prog.endswith(" demo")][0]
    assert demo.description


def test_construction_choices_come_from_the_registry():
    from georecall.constructions import registry

    text = [p for p in _parsers() if p.prog.endswith("multi-hop")][0].format_help()
    for spec in registry.specs("multi"):
        assert spec.name in text and spec.id in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--lr", "nan"], "finite"),
        (["train", "--lr", "inf"], "finite"),
        (["train", "--lr", "0"], "positive"),
        (["train", "--lr", "-1"], "positive"),
        (["check", "single-hop", "--bits", "1100"], "<= 64"),
        (["check", "single-hop", "--bits", "0"], ">= 1"),
        (["check", "single-hop", "--max-gib", "inf"], "finite"),
        (["check", "single-hop", "--max-gib", "-1"], "positive"),
        (["check", "single-hop", "--D", "100000000"], "<="),
        (["check", "single-hop", "--bits", "4", "--integer"], "do not combine"),
        (["check", "single-hop", "--integer", "--lam", "1e17"], "<="),
        (["check", "single-hop", "--N", "7", "--R", "2", "--symmetric"], "even"),
        (["check", "single-hop", "--construction", "nonsense"], "no construction"),
        (["check", "single-hop", "--construction", "path-blocks"], "check multi-hop"),
        (["check", "multi-hop", "--construction", "geometric"], "check single-hop"),
        (["check", "multi-hop", "--k", "100", "--R", "1", "--N", "16"], "<= 32"),
        (["train", "--k", "2"], "softmax"),
        (["train", "--cot"], "softmax"),
        (["train", "--heads", "2"], "softmax"),
        (["train", "--d", "1000000000"], "<="),
        (["sweep", "threshold", "--d-min", "16", "--d-max", "4"], "--d-min"),
        (["sweep", "threshold", "--N", "1"], ">= 2"),
        (["sweep", "threshold", "--scheduler", "bogus"], "--scheduler"),
        (["sweep", "threshold", "--scheduler", "tcp://h:99999"], "port"),
        (["sweep", "threshold", "--scheduler", "local:0"], "1 <= W"),
        (["bounds", "--bits", "0"], ">="),
        (["bounds", "--N", str(2**60)], "<="),
        (["precision", "--k", "2"], "omit --k"),
        (["precision", "--construction", "cot"], "give --k"),
        (["precision", "--max-bits", "65"], "<= 64"),
        (["demo", "--json"], "unrecognized arguments: --json"),
        (["demo", "--N", "1"], ">= 2"),
        (["demo", "--N", "65"], "<= 64"),
        (["demo", "--R", "9"], "<= 8"),
        (["demo", "--dpi", "100"], "apply to --figures"),
        (["probe", "/nonexistent/model.npz"], "no such model file"),
        (["probe-hidden", "/nonexistent/s.npz"], "no such states file"),
        (["figures", "--from", "/nonexistent/r.jsonl"], "no such results file"),
    ],
)
def test_guards_exit_2_with_one_plain_line(argv, message, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2, err
    assert message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    if "--json" in argv:  # the failure's document, and nothing else, on stdout
        assert json.loads(out)["status"] == 2
    else:
        assert out == ""


@pytest.mark.parametrize("holdout", ["0", "0.999", "1", "nan"])
def test_probe_holdout_leaves_one_subject_each_side(holdout, tmp_path, capsys):
    model = str(tmp_path / "m.npz")
    assert main(
        ["train", "--N", "16", "--R", "2", "--d", "8", "--steps", "3", "--out", model, "--quiet"]
    ) in (0, 1)
    capsys.readouterr()
    code, _, err = run(["probe", model, "--holdout", holdout], capsys)
    assert code == 2 and ("holdout" in err.lower() or "number" in err)


def test_probe_hidden_with_one_state_is_refused(tmp_path, capsys):
    import numpy as np

    path = tmp_path / "one.npz"
    np.savez(path, states=np.zeros((1, 3)), attributes=np.zeros((1, 1), dtype=np.int64))
    code, _, err = run(["probe-hidden", str(path)], capsys)
    assert code == 2 and "at least one" in err


@pytest.mark.parametrize("width, warned", [(64, True), (8, False)])  # p = 64 > n = 60 fit rows: interpolates
def test_probe_hidden_text_states_its_fits_and_warns_when_one_is_underdetermined(tmp_path, capsys, width,
                                                                                  warned):
    import numpy as np

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, (80, 2))
    vectors = rng.standard_normal((2, 3, width))
    states = sum(vectors[r][labels[:, r]] for r in range(2)) + rng.standard_normal((80, width))
    path = tmp_path / "states.npz"
    np.savez(path, states=states, attributes=labels)
    code, out, _ = run(["probe-hidden", str(path)], capsys)
    assert code == 0
    assert f"p = {width} features, n = 60 fit rows" in out and "superposition R² (" in out and "p = 6" in out
    assert ("would interpolate" in out) is warned


def test_output_paths_are_checked_before_the_work(tmp_path, capsys, monkeypatch):
    from georecall.cli import commands_training  # the module that looks train up

    def trained(*args, **kwargs):
        pytest.fail("trained before checking --out")

    monkeypatch.setattr(commands_training, "train", trained)
    code, _, err = run(["train", "--N", "8", "--R", "2", "--out", "/nonexistent/dir/m.npz"], capsys)
    assert code == 2 and "does not exist" in err
    code, _, err = run(["train", "--N", "8", "--R", "2", "--out", str(tmp_path)], capsys)
    assert code == 2 and "directory" in err
    code, _, err = run(["sweep", "threshold", "--N", "8", "--out", str(tmp_path)], capsys)
    assert code == 2 and "directory" in err
    (tmp_path / "file").write_text("x")
    code, _, err = run(["figures", "--out", str(tmp_path / "file")], capsys)
    assert code == 2 and "not a folder" in err


def test_reported_model_path_is_the_written_path(tmp_path, capsys):
    target = tmp_path / "name"
    code, out, _ = run(
        ["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "2", "--out", str(target), "--json"], capsys
    )
    doc = json.loads(out)
    assert doc["out"] == str(target) + ".npz" and (tmp_path / "name.npz").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    code, out, _ = run(
        ["check", "single-hop", "--N", "16", "--R", "2", "--save", str(tmp_path / "c"), "--json"], capsys
    )
    assert json.loads(out)["params"]["save"] == str(tmp_path / "c.npz") and (tmp_path / "c.npz").exists()


def test_interrupted_save_leaves_no_file(tmp_path, capsys, monkeypatch):
    import georecall.constructions.storage as storage_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(storage_module, "save_model", interrupted)
    code, _, err = run(
        ["check", "single-hop", "--N", "16", "--R", "2", "--save", str(tmp_path / "m.npz")], capsys
    )
    assert code == 130 and err.startswith("\n") and "interrupted" in err
    assert list(tmp_path.iterdir()) == []


def test_json_is_strict_and_stderr_is_empty(capsys, monkeypatch):
    import georecall.cli.commands as commands

    real = commands.run_tradeoff

    def with_nan(p):
        doc = real(p)
        doc["rows"][0]["nan"] = float("nan")
        doc["rows"][0]["inf"] = float("-inf")
        return doc

    monkeypatch.setitem(commands.COMMANDS, "tradeoff", with_nan)
    code, out, err = run(["tradeoff", "--N", "64", "--R", "2", "--k-max", "2", "--json"], capsys)

    def refuse(name):
        raise AssertionError(f"non-strict JSON constant {name}")

    doc = json.loads(out, parse_constant=refuse)
    assert code == 0 and err == "" and doc["rows"][0]["nan"] is None and doc["rows"][0]["inf"] is None
    assert {"command", "version", "seed", "params", "status"} <= set(doc)


def test_verify_json_prints_no_progress(capsys, monkeypatch):
    import georecall.verify.sections.suite as suite
    from georecall.verify.sections.suite import section_single_hop

    monkeypatch.setattr(suite, "SECTIONS", [("single hop", section_single_hop)])
    code, out, err = run(["verify", "--json"], capsys)
    assert code == 0 and err == "" and json.loads(out)["passed"]


def test_an_internal_error_is_exit_3_with_traceback(capsys, monkeypatch):
    import georecall.cli.commands as commands

    def broken(p):
        raise ValueError("operands could not be broadcast together with shapes (3,) (4,)")

    monkeypatch.setitem(commands.COMMANDS, "tradeoff", broken)
    code, _, err = run(["tradeoff"], capsys)
    assert code == 3 and "Traceback" in err and "internal error" in err


def test_ctrl_c_is_130_on_its_own_line(capsys, monkeypatch):
    import georecall.cli.commands as commands

    def interrupted(p):
        raise KeyboardInterrupt

    monkeypatch.setitem(commands.COMMANDS, "tradeoff", interrupted)
    code, _, err = run(["tradeoff"], capsys)
    assert code == 130 and err == "\ngeorecall: interrupted\n"


def test_sweep_passes_scheduler_and_timeouts(tmp_path, capsys, monkeypatch):
    from georecall.cli import commands_training  # the module that looks sweep up

    seen = {}

    def fake_sweep(path, Ns, Rs, modes, seeds, **kwargs):
        seen.update(kwargs)
        return []

    monkeypatch.setattr(commands_training, "sweep", fake_sweep)
    code, out, err = run(
        [
            "sweep",
            "threshold",
            "--N",
            "16",
            "--R",
            "2",
            "--scheduler",
            "local:2",
            "--lock-timeout",
            "0",
            "--connect-timeout",
            "3",
            "--out",
            str(tmp_path / "s.jsonl"),
            "--json",
        ],
        capsys,
    )
    assert code == 0 and err == ""
    assert seen["scheduler"] == "local:2" and seen["lock_timeout"] == 0 and seen["connect_timeout"] == 3
    assert seen["progress"] is False and callable(seen["log"])


def test_demo_text(capsys):
    code, out, _ = run(["demo"], capsys)
    assert code == 0 and "N = 8" in out
    code, out, _ = run(["demo", "--N", "5", "--R", "3", "--seed", "2"], capsys)
    assert code == 0 and "R = 3 bijections π_r of the N = 5 symbols" in out and "15/15 right" in out


# ------------------------------------------------------------------------- the shared options and conflicts


def _commands(parser):
    """Every leaf command of the parser: (its ``command`` default, its parser)."""
    import argparse

    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                command = sub.get_default("command")
                if command is not None:
                    found[command] = sub
                found.update(_commands(sub))
    return found


def _offered(sub) -> set[str]:
    names = {"--seed": "seed", "--json": "json", "--quiet": "quiet", "--max-gib": "max-gib"}
    return {names[o] for a in sub._actions for o in a.option_strings if o in names}


def test_every_command_has_its_row_of_shared_options():
    from georecall.cli.parser import SHARED, build_parser

    commands = _commands(build_parser())
    assert set(commands) == set(SHARED)
    for command, sub in commands.items():
        assert _offered(sub) == set(SHARED[command]), command


class _Reads:
    """Which attributes of the typed parameters (``georecall.cli.params``) a command reads, while
    installed on :class:`Params` (reads by ``_doc``, which copies the seed and the budget into every document,
    and by the parameters' own methods do not count: they are not a use)."""

    def __init__(self):
        self.read: set[str] = set()

    def install(self, monkeypatch):
        from georecall.cli.params import Params

        real = object.__getattribute__
        reads = self.read

        def recording(obj, name):
            caller = sys._getframe(1).f_code
            if caller.co_name != "_doc" and not caller.co_filename.endswith("params.py"):
                reads.add(name)
            return real(obj, name)

        monkeypatch.setattr(Params, "__getattribute__", recording)


def _small_argv(tmp_path) -> dict[str, list[str]]:
    model, states = str(tmp_path / "m.npz"), str(tmp_path / "s.npz")
    return {
        "verify": ["verify"],
        "check single-hop": ["check", "single-hop", "--N", "16", "--R", "2"],
        "check multi-hop": ["check", "multi-hop", "--N", "8", "--R", "2", "--k", "2"],
        "certify single-hop": ["certify", "single-hop", "--N", "16", "--R", "2"],
        "certify multi-hop": ["certify", "multi-hop", "--N", "8", "--R", "2", "--k", "2"],
        "tradeoff": ["tradeoff", "--N", "64", "--R", "2", "--k-max", "2"],
        "bounds": ["bounds", "--N", "64", "--R", "2", "--k", "1"],
        "count": ["count", "--N", "3", "--R", "2", "--k", "1"],
        "precision": ["precision", "--N", "16", "--R", "2", "--max-bits", "3"],
        "train": ["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "2"],
        "sweep threshold": ["sweep", "threshold", "--N", "8", "--R", "2", "--seeds", "0", "--modes",
                            "learned", "--steps", "2", "--d-max", "8", "--out", str(tmp_path / "t.jsonl")],
        "study mechanism": ["study", "mechanism", "--quick", "--out", str(tmp_path / "q.jsonl")],
        "probe": ["probe", model, "--subjects", "4"],
        "eval": ["eval", model],
        "transfer": ["transfer", model, "--steps", "2"],
        "probe-hidden": ["probe-hidden", states],
        "figures": ["figures", "--out", str(tmp_path / "fig"), "--format", "png", "--dpi", "40"],
        "demo": ["demo", "--N", "4", "--R", "1"],
    }


def test_every_shared_option_offered_is_read_by_its_command(tmp_path, capsys, monkeypatch):
    """An option that does nothing is not offered: each command reads --seed, the progress switch (--quiet)
    and the budget (--max-gib) wherever it offers them. Fails for the old one-size parent parser (tradeoff,
    bounds and count offered --seed, demo --json, precision and probe --quiet)."""
    import shutil

    import numpy as np

    from georecall.cli import commands_figures
    from georecall.cli.parser import SHARED
    from georecall.experiments import study
    from georecall.verify.sections import suite

    pytest.importorskip("matplotlib", reason="figures needs the optional plot extra")
    assert main(["check", "single-hop", "--N", "16", "--R", "2", "--save", str(tmp_path / "m.npz")]) == 0
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "s.npz", states=rng.standard_normal((40, 6)), attributes=rng.integers(0, 3, (40, 2)))
    monkeypatch.setattr(suite, "SECTIONS", [("none", lambda seed, progress, budget=None: [])])

    def fake_study(path, grid, **kwargs):  # the quick grid's training replaced by the committed records
        assert "progress" in kwargs
        shutil.copy(pathlib.Path(__file__).parent.parent / "docs" / "study_results.jsonl", path)
        return []

    monkeypatch.setattr(study, "run_study", fake_study)
    # the figures are drawn by their own tests: here the command reads its options and writes nothing
    monkeypatch.setattr(commands_figures, "make_figures", lambda records, out, **options: [])
    capsys.readouterr()
    field = {"seed": "seed", "quiet": "progress", "max-gib": "budget"}
    # probe-lm needs the lm extra and a model: tests/test_lm.py runs it on a tiny model; lecture needs the
    # teach extra: tests/test_hostile_lecture.py::test_quiet_leaves_stderr_empty shows it reads --quiet;
    # export needs the export extra: tests/test_export.py checks the options it offers are read
    assert set(_small_argv(tmp_path)) == set(SHARED) - {"probe-lm", "export", "lecture"}
    for command, argv in _small_argv(tmp_path).items():
        reads = _Reads()
        with monkeypatch.context() as patch:
            reads.install(patch)
            assert main(argv) in (0, 1), command
        unused = {name for name in SHARED[command] if name in field and field[name] not in reads.read}
        assert not unused, f"{command} offers {sorted(unused)} but never reads them"
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv",
    [
        ["demo", "--json"],
        ["tradeoff", "--seed", "1"],
        ["bounds", "--seed", "1"],
        ["count", "--seed", "1"],
        ["sweep", "threshold", "--seed", "1"],
        ["study", "mechanism", "--seed", "1"],
        ["tradeoff", "--max-gib", "1"],
        ["tradeoff", "--quiet"],
        ["precision", "--quiet"],
    ],
)
def test_options_that_do_nothing_are_not_offered(argv, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and "unrecognized arguments" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bounds", "--N", "64", "--R", "2", "--k", "1", "--format", "latex", "--json"],
         "--json and --format latex do not combine"),
        (["bounds", "--N", "64", "--R", "2", "--k", "1", "--format", "md", "--json"],
         "--json and --format md do not combine"),
        (["sweep", "threshold", "--workers", "2", "--scheduler", "local:2"],
         "--workers 2 and --scheduler local:2 do not combine"),
        (["study", "mechanism", "--workers", "2", "--scheduler", "local:2"],
         "--workers 2 and --scheduler local:2 do not combine"),
    ],
)
def test_conflicting_options_are_refused_in_one_line(argv, message, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert json.loads(out)["status"] == 2 if "--json" in argv else out == ""  # --json: the failure document


def test_agreeing_options_are_not_conflicts(capsys):
    code, out, _ = run(["bounds", "--N", "64", "--R", "2", "--k", "1", "--format", "json", "--json"], capsys)
    assert code == 0 and json.loads(out)["params"]["format"] == "json"
    code, out, _ = run(["bounds", "--N", "64", "--R", "2", "--k", "1", "--json"], capsys)
    assert code == 0 and json.loads(out)["params"]["format"] == "json"
    code, out, _ = run(["bounds", "--N", "64", "--R", "2", "--k", "1", "--quiet"], capsys)
    assert code == 0 and out.startswith("|")


def test_help_shows_every_default_and_no_internal_references():
    import argparse
    import re

    from georecall.cli.parser import build_parser

    for command, sub in _commands(build_parser()).items():
        text = sub.format_help()
        assert not re.search(r"\bissue \d|DESIGN\.md|THEORY\.md|/work/", text), command
        formatter = sub._get_formatter()
        for action in sub._actions:
            meaningful = action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS)
            if meaningful and action.help is not argparse.SUPPRESS:
                shown = formatter._get_help_string(action) % {"default": action.default, "prog": sub.prog}
                assert "default" in shown, f"{command} {action.option_strings[0]}: no default shown"


def test_given_options_are_the_typed_ones_whatever_the_defaults():
    from georecall.cli.parser import given_options

    assert given_options(["bounds"]) == set()
    assert given_options(["bounds", "--format", "md", "--N", "64"]) == {"format", "N"}
    assert given_options(["sweep", "threshold", "--workers", "1"]) == {"workers"}
    assert given_options(["probe", "m.npz", "--json"]) == {"json", "model"}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full (always full)")
@pytest.mark.parametrize("extra", [[], ["--json"]])
def test_an_unwritable_stdout_is_one_line_not_a_bug(extra):
    """A full disk under stdout is exit 2 with one line, not an internal error (review finding)."""
    with open("/dev/full", "w") as full:
        argv = ["tradeoff", "--N", "64", "--R", "2", "--k-max", "2", *extra]
        proc = subprocess.run([sys.executable, "-m", "georecall.cli", *argv], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "georecall: error: cannot write the output: No space left on device"]
