import json
import subprocess
import sys

import pytest

from georecall.verify.cli import main


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
    args = ["check", "single-hop", "--N", "40", "--R", "2", "--construction", construction, "--codes", codes,
            "--D", "20", "--quiet"]
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
    import georecall.verify.suite as suite
    from georecall.verify.check import CheckResult, Report

    failing = Report("broken", {"N": 2, "R": 1}, None, CheckResult(2, 1, -1.0, 0, [{"query": 0, "tokens": [2, 0],
                     "expected": 1, "predicted": 0, "margin": -1.0}]), {"d": 1, "m": 0})
    monkeypatch.setattr(suite, "SECTIONS", [("broken", lambda seed, progress: [failing])])
    code, out, _ = run(["verify", "--quiet"], capsys)
    assert code == 1 and "FAIL" in out and "expected 1 predicted 0" in out


def test_console_script_verify_passes():
    """The main job, as a user runs it (a subprocess through the installed entry point's module)."""
    proc = subprocess.run([sys.executable, "-m", "georecall.verify.cli", "verify", "--json", "--quiet"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["passed"] and all(r["passed"] for r in doc["reports"])
    names = [r["name"] for r in doc["reports"]]
    assert "G1 binary int" in names


@pytest.mark.parametrize("construction", ["path-blocks", "associative-width", "associative-depth", "cot"])
def test_check_multi_hop(construction, capsys):
    code, out, _ = run(["check", "multi-hop", "--construction", construction, "--N", "32", "--R", "2", "--k", "2",
                        "--json"], capsys)
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
    assert code == 0 and len(rows) == 2 * (6 + 4)
    code, out, _ = run(["bounds", "--N", "1024", "--R", "4", "--k", "1", "--format", "csv", "--quiet"], capsys)
    assert code == 0 and out.startswith("construction,")


def test_count_command(capsys):
    code, out, _ = run(["count", "--N", "4", "--R", "2", "--k", "3", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["consistent"] and doc["tasks"] == 576
    assert [r["F_k"] for r in doc["rows"]] == [576, 458, 534]


def test_precision_command(capsys):
    code, out, _ = run(["precision", "--N", "128", "--R", "3", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["smallest_exact_bits"] == 2 and doc["seed"] == 0


def test_check_with_bits(capsys):
    code, out, _ = run(["check", "single-hop", "--N", "128", "--R", "3", "--bits", "2", "--json"], capsys)
    assert code == 0 and json.loads(out)["check"]["exact"]
    code, _, _ = run(["check", "single-hop", "--N", "128", "--R", "3", "--bits", "2", "--construction",
                      "associative", "--quiet"], capsys)
    assert code == 1


def test_train_command_writes_a_loadable_model(tmp_path, capsys):
    out = str(tmp_path / "model.npz")
    code, text, _ = run(["train", "--N", "32", "--R", "2", "--d", "12", "--out", out, "--json", "--seed", "3"],
                        capsys)
    doc = json.loads(text)
    assert code == 0 and doc["reached"] and doc["params"]["seed"] == 3
    from georecall.constructions.model import load_model
    model, header = load_model(out)
    assert header["record"]["N"] == 32 and header["extra_arrays"]["task_table"].shape == (2, 32)


def test_sweep_threshold_command_resumes(tmp_path, capsys):
    out = str(tmp_path / "t.jsonl")
    args = ["sweep", "threshold", "--N", "32", "--R", "2", "--seeds", "0", "--steps", "150", "--out", out,
            "--json"]
    code, text, _ = run(args, capsys)
    doc = json.loads(text)
    assert code == 0 and {r["mode"] for r in doc["thresholds"]} == {"learned", "frozen"}
    lines = open(out).read().splitlines()
    code, text, _ = run(args, capsys)
    assert code == 0 and open(out).read().splitlines() == lines


def test_train_command_with_hops_and_cot(capsys):
    code, text, _ = run(["train", "--N", "32", "--R", "2", "--k", "2", "--cot", "--attention", "softmax",
                         "--heads", "2", "--d", "16", "--json"], capsys)
    doc = json.loads(text)
    assert code == 0 and doc["reached"] and doc["params"]["k"] == 2 and doc["params"]["cot"]
