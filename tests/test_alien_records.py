"""A results file of the wrong kind is refused (exit 2, one line naming the file and what it holds), never
read as an empty one: ``study mechanism --summary``, and ``--out`` of a sweep or a study (``--append`` of a
transfer) that would append to a file of the other kind. A file with some records of the right kind keeps
today's behaviour (the other lines counted and skipped). And Ctrl-C during a sweep ends with one line, the
resume hint.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from georecall.cli import main
from georecall.errors import InputError
from georecall.experiments import n_axis, threshold_figure
from georecall.experiments.study import read_study
from georecall.experiments.sweep_records import read_sweep
from georecall.results_files import ResultsFile, require_kind

DOCS = Path(__file__).resolve().parent.parent / "docs"
STUDY = DOCS / "study_results.jsonl"  # 75 study records
SWEEP = DOCS / "thresholds_N4096.jsonl"  # trial and threshold records
SWEEP_ARGS = ["sweep", "threshold", "--N", "8", "--R", "2", "--seeds", "0", "--modes", "learned",
              "--steps", "2", "--d-max", "8"]


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _lines(path) -> int:
    return sum(1 for line in Path(path).read_bytes().splitlines() if line.strip())


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "a.npz"
    assert main(["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "2", "--out", str(path)]) == 0
    return path


# ------------------------------------------------------------------------------------- study --summary

def test_summary_of_a_sweep_file_is_refused_naming_what_it_holds(capsys):
    code, out, err = run(["study", "mechanism", "--summary", str(SWEEP)], capsys)
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [f"georecall: error: {SWEEP} holds no study records "
                                        f"({_lines(SWEEP)} lines of another kind: sweep records?)"]


def test_summary_of_a_model_file_is_refused(model_file, capsys):
    code, out, err = run(["study", "mechanism", "--summary", str(model_file), "--json"], capsys)
    doc = json.loads(out)
    assert code == 2 and doc["status"] == 2
    assert f"{model_file} holds no study records" in doc["error"] and "not JSON" in doc["error"]
    assert "holds in none" not in out + err


def test_summary_of_an_empty_file_is_refused(tmp_path, capsys):
    path = tmp_path / "empty.jsonl"
    path.write_text("\n")
    code, _, err = run(["study", "mechanism", "--summary", str(path)], capsys)
    assert code == 2 and f"{path} holds no study records (it is empty)" in err


def test_summary_of_a_mixed_file_keeps_the_note_and_the_summary(tmp_path, capsys):
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(STUDY.read_bytes() + SWEEP.read_bytes().splitlines(keepends=True)[0])
    code, out, err = run(["study", "mechanism", "--summary", str(path), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and "skipped 1 alien line(s)" in doc["summary"]["problems"]
    assert doc["summary"]["regimes"]


# ---------------------------------------------------------------------------------- the figure scripts

@pytest.mark.parametrize("script", [n_axis, threshold_figure], ids=["n_axis", "threshold_figure"])
def test_the_figure_scripts_already_refuse_a_study_file(script, tmp_path, capsys):
    """Not the hole: they exit 2 on a file without a usable threshold record (their own message)."""
    code = script.main(["--from", str(STUDY), "--out", str(tmp_path / "figs")])
    captured = capsys.readouterr()
    assert code == 2 and "no threshold record" in captured.out + captured.err


# ------------------------------------------------------------------------------------------------ --out

def test_a_sweep_refuses_to_append_to_a_study_file(tmp_path, capsys):
    path = tmp_path / "wrong.jsonl"
    shutil.copy(STUDY, path)
    before = path.read_bytes()
    code, _, err = run([*SWEEP_ARGS, "--out", str(path)], capsys)
    assert code == 2 and path.read_bytes() == before  # nothing trained, nothing appended
    assert err.strip().splitlines() == [f"georecall: error: {path} holds no sweep records "
                                        f"({_lines(path)} lines of another kind: study records?)"]


def test_a_study_refuses_to_append_to_a_sweep_file(tmp_path, capsys):
    path = tmp_path / "wrong.jsonl"
    shutil.copy(SWEEP, path)
    before = path.read_bytes()
    code, _, err = run(["study", "mechanism", "--quick", "--out", str(path)], capsys)
    assert code == 2 and path.read_bytes() == before
    assert err.strip().splitlines() == [f"georecall: error: {path} holds no study records "
                                        f"({_lines(path)} lines of another kind: sweep records?)"]


def test_transfer_refuses_to_append_to_a_study_file_and_appends_to_its_own(model_file, tmp_path, capsys):
    path = tmp_path / "wrong.jsonl"
    shutil.copy(STUDY, path)
    before = path.read_bytes()
    code, _, err = run(["transfer", str(model_file), "--steps", "2", "--append", str(path)], capsys)
    assert code == 2 and path.read_bytes() == before  # nothing probed, nothing appended
    assert err.strip().splitlines() == [f"georecall: error: {path} holds no sweep records "
                                        f"({_lines(path)} lines of another kind: study records?)"]
    own = tmp_path / "transfer.jsonl"  # the control: a fresh file, then the same file again
    for count in (1, 2):
        assert run(["transfer", str(model_file), "--steps", "2", "--append", str(own)], capsys)[0] == 0
        assert _lines(own) == count


def test_a_sweep_resumes_its_own_file_and_starts_an_empty_one(tmp_path, capsys):
    path = tmp_path / "own.jsonl"
    path.write_text("")
    assert run([*SWEEP_ARGS, "--out", str(path)], capsys)[0] == 0
    records = _lines(path)
    assert records > 0
    with open(path, "a") as handle:  # a line of another kind among its own: counted, not refused
        handle.write(STUDY.read_text().splitlines()[0] + "\n")
    code, _, err = run([*SWEEP_ARGS, "--out", str(path)], capsys)
    assert code == 0 and _lines(path) == records + 1  # resumed: nothing to do


def test_writing_tolerates_one_torn_line_only():
    """A writer killed during its first line leaves one torn line: a fresh start, not a foreign file."""
    require_kind(ResultsFile(lines=1, torn=1), "f", {"trial"}, "sweep records", writing=True)
    with pytest.raises(InputError, match=r"f holds no sweep records \(2 lines that are not JSON"):
        require_kind(ResultsFile(lines=2, torn=2), "f", {"trial"}, "sweep records", writing=True)
    with pytest.raises(InputError, match="1 line that is not JSON"):
        require_kind(ResultsFile(lines=1, torn=1), "f", {"trial"}, "sweep records")


def test_the_readers_refuse_only_when_asked():
    assert read_sweep(str(STUDY)).records  # study records are kept as they are, as before
    assert read_study(str(SWEEP)).alien == _lines(SWEEP)
    with pytest.raises(InputError, match="holds no sweep records"):
        read_sweep(str(STUDY), require=True)
    with pytest.raises(InputError, match="holds no study records"):
        read_study(str(SWEEP), require=True)
    assert read_study(str(STUDY), require=True).records


# ----------------------------------------------------------------------------------------------- Ctrl-C

def test_ctrl_c_during_a_sweep_is_one_line_with_the_resume_hint(tmp_path, capsys, monkeypatch):
    import georecall.experiments.sweep as sweep_module

    def interrupt(*args, **kwargs):  # the first trial, run in this process (one worker)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_module, "run_trial", interrupt)
    path = tmp_path / "cut.jsonl"
    for extra, json_mode in (([], False), (["--quiet"], False), (["--json"], True)):
        code, out, err = run([*SWEEP_ARGS, "--out", str(path), *extra], capsys)
        lines = [line for line in err.splitlines() if "interrupted" in line]
        assert code == 130 and len(lines) == 1, err
        assert lines[0] == (f"georecall: interrupted: 0 new trial(s) are in {path}; rerun the same command "
                            "to resume")
        if json_mode:
            assert json.loads(out)["error"] == lines[0]
