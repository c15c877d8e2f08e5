"""``georecall verify`` as a newcomer meets it (issue 44): one progress line per step with ``[i/n steps]``,
the time so far and an estimate of the time left (steps, not the checks of the summary: a step may give two
rows); a result table that fits 100 columns, each row's numbers that are not sizes said in words under it;
a row that checked nothing shown NOT COVERED, counted apart and no failure; ``--full`` named and refused where
it does nothing; OpenBLAS on one thread while the rows run; ``georecall`` alone prints the command list (exit
2)."""

from __future__ import annotations

import re

import pytest

from georecall.cli import main, render
from georecall.experiments import blas
from georecall.verify.checking.check import CheckResult
from georecall.verify.checking.report import Report, claim_report
from georecall.verify.sections import suite


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------------ steps


@pytest.mark.parametrize("full", [False, True])
def test_every_step_is_named_in_words(full):
    steps = suite.verify_steps(0, full=full)
    names = [step.name for step in steps]
    assert len(set(names)) == len(names) and all(step.cost > 0 for step in steps)
    for name in names:  # no Python reprs such as {'integer': True}
        assert not re.search(r"[{}\[\]]|'[a-z]+'|True|False|None", name), name
    assert any("float64, then integer mode" in n for n in names)
    assert any(n.startswith("certified for every task: G1") for n in names)
    mechanism = [n for n in names if n.startswith("mechanism probes")]
    assert len(mechanism) == 1 and (f"R = {4 if full else suite.MECHANISM_R})" in mechanism[0])
    threshold = [n for n in names if n.startswith("capacity threshold")]
    assert len(threshold) == 1 and ("frozen" in threshold[0]) == full


def test_the_steps_cover_every_row_of_the_sections(monkeypatch):
    """Splitting the sections into steps leaves out no row and adds none (each step stubbed by its section's
    row count: the sections themselves are the rows' own tests)."""
    from georecall.constructions import registry
    from georecall.verify.sections.certified import certified_specs

    steps = suite.verify_steps(0)
    cases = sum(len(spec.verify_cases) for spec in registry.specs())
    # construction cases, certified rows, counting, bits + bounds, gradients, GD, threshold, probes, mechanism
    assert len(steps) == cases + len(certified_specs()) + 2 + 3 + 1 + 1


def test_progress_lines_count_steps_and_estimate_the_time_left(monkeypatch, capsys):
    def row(name):
        return lambda seed, progress, budget=None: [claim_report(name, {}, {"holds": True}, 0.0, {})]

    monkeypatch.setattr(suite, "SECTIONS", [("first section", row("a")), ("second section", row("b"))])
    reports = suite.verify_reports(progress=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert [r.name for r in reports] == ["a", "b"] and len(lines) == 2
    for i, (line, title) in enumerate(zip(lines, ["first section", "second section"]), 1):
        assert re.fullmatch(rf"\[{i}/2 steps\] {title} … \d+ s elapsed, about \d+ s left", line), line
    suite.verify_reports(progress=False)
    assert capsys.readouterr().err == ""


def test_verify_runs_its_rows_on_one_blas_thread(monkeypatch):
    seen = []

    def spy(seed, progress, budget=None):
        seen.append(blas.blas_threads())
        return []

    monkeypatch.setattr(suite, "SECTIONS", [("spy", spy)])
    suite.verify_reports()
    assert seen and (seen[0] is None or seen[0] == 1)  # None: a BLAS this process cannot ask


def test_limited_threads_sets_and_restores_the_count(monkeypatch):
    """On a stand-in library (the machine's BLAS may already run one thread, or not be OpenBLAS)."""
    count = [4]

    def get():
        return count[0]

    def set_(n):
        count[0] = n

    monkeypatch.setattr(blas, "_CACHE", [("FakeBLAS 1.0 Kernel", get, set_)])
    with blas.limited_threads(1) as inside:
        assert inside == 1 and count == [1] and blas.blas_description() == "FakeBLAS 1.0 Kernel, 1 thread"
    assert count == [4] and blas.blas_description() == "FakeBLAS 1.0 Kernel, 4 threads"
    with pytest.raises(RuntimeError), blas.limited_threads(2):
        raise RuntimeError("a row failed")
    assert count == [4]  # restored after an error too
    monkeypatch.setattr(blas, "_CACHE", [None])  # not an OpenBLAS: nothing is set
    with blas.limited_threads(1) as inside:
        assert inside is None
    with pytest.raises(ValueError):
        with blas.limited_threads(0):
            pass


# ------------------------------------------------------------------------------------------------ table


def _doc(reports: list[Report], **params) -> dict:
    return {"command": "verify", "version": "x", "seed": 0, "params": {"seed": 0, **params},
            "passed": all(r.passed for r in reports), "seconds": 1.0,
            "reports": [r.as_dict() for r in reports]}


def _sample_reports() -> list[Report]:
    from georecall.verify.checking.run import run_check

    rows = [run_check("G1", 64, 4), run_check("cot", 64, 2, 2)]
    rows.append(claim_report("a claim row whose name is much longer than the check column can hold at all",
                             {"N": 256, "R": 4}, {"x": True}, 0.5, {"d": "G1:2 A1:3 G2:2 A2a:4 A2b:7 C1:2",
                                                                    "m": ""},
                             {"detail": "words " * 40}))
    rows.append(Report("broken", {"N": 2, "R": 1}, None, CheckResult(
        2, 1, -1.0, 0, [{"query": 0, "tokens": [2, 0], "expected": 1, "predicted": 0, "margin": -1.0}]),
        {"d": 1, "m": 0}))
    return rows


def test_the_table_fits_100_columns_and_says_non_sizes_in_words():
    text = render.to_text(_doc(_sample_reports(), full=False))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    assert "G1:2" not in text  # a column holds sizes only; the bits summary is the row's detail, in words
    c1 = next(i for i, line in enumerate(lines) if " C1 " in line)
    assert "greedy decoding: per-step accuracy 100%" in lines[c1 + 1]  # under its own row
    assert "[" not in lines[c1 + 1]  # no Python list
    assert any(line.startswith("verify --full also runs (a few minutes): the mechanism row at the study's")
               for line in lines)
    assert "accuracy 50.00% (1 of 2 queries right)" in text  # a failed row's accuracy, in its failure lines
    assert "undecided" not in text  # nothing left open: the line says nothing of it (the control)
    open_row = Report("open", {"N": 4, "R": 1}, None, CheckResult(4, 1, -1.0, 0, n_undecided=2),
                      {"d": 1, "m": 0})
    opened = render.to_text(_doc([open_row], full=False))
    assert "accuracy 25.00% (1 of 4 queries right; 2 undecided, 1 wrong)" in opened
    full = render.to_text(_doc(_sample_reports(), full=True))
    assert "verify --full also runs" not in full


def test_the_table_checks_its_width_against_a_narrower_limit():
    """The width rule can fail: the same rows against 60 columns do not fit (numbers are never cut)."""
    table = render.report_table([r.as_dict() for r in _sample_reports()], width=60)
    assert max(len(line) for line in table.splitlines()) > 60


def test_a_claim_row_with_nothing_to_check_is_not_covered():
    """A claim row without claims checked nothing: not covered (its reason said), never a PASS; one claim
    makes it covered again (the control)."""
    empty = claim_report("nothing", {}, {}, 0.0, {})
    assert empty.not_covered == "no claim to check" and not empty.passed
    assert empty.as_dict()["not_covered"] == "no claim to check" and not empty.as_dict()["passed"]
    said = claim_report("nothing", {}, {}, 0.0, {}, not_covered="X makes no bits claim")
    assert said.not_covered == "X makes no bits claim" and not said.passed
    held = claim_report("something", {}, {"holds": True}, 0.0, {}, not_covered="unused: a claim was checked")
    assert held.not_covered is None and held.passed and held.as_dict()["not_covered"] is None


def test_the_table_shows_a_row_that_checked_nothing_as_not_covered():
    planted = claim_report("bits needed", {}, {}, 0.0, {}, not_covered="X makes no claim")
    rows = _sample_reports()[:3] + [planted]
    text = render.to_text(_doc(rows, full=True))
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 100, max(lines, key=len)
    row = next(i for i, line in enumerate(lines) if "bits needed" in line)
    assert lines[row].startswith("NOT COVERED  bits needed") and "PASS" not in lines[row]
    assert lines[row + 1].strip() == "not covered: X makes no claim"  # why, under its row
    assert "3/3 checks passed, 1 not covered in 1.0 s" in text  # counted apart, not as passed
    assert "4/4" not in text and "3/4" not in text


def _planted_sections(*rows):
    """One section (one step) whose rows are claim rows: ``True`` passes, ``False`` fails, ``None`` checks
    nothing."""
    def section(seed, progress, budget=None):
        return [claim_report(f"row {i}", {}, {} if ok is None else {"holds": ok}, 0.0, {})
                for i, ok in enumerate(rows)]
    return [("planted section", section)]


def test_a_not_covered_row_leaves_the_exit_code_and_counts_apart(monkeypatch, capsys):
    """Planted rows through the command: a not-covered row is no failure (exit 0), counted apart in the
    summary and said in --json; a failing row beside it still fails the run (exit 1). The progress counts
    steps (one here) and says so; the summary counts checks (two here)."""
    import json

    monkeypatch.setattr(suite, "SECTIONS", _planted_sections(True, True, None))
    code, out, err = run(["verify"], capsys)
    summary = r"seed 0: {}/2 checks passed, 1 not covered in [\d.]+ s -> {}$"
    assert code == 0 and re.search(summary.format(2, "PASS"), out, re.M)
    assert re.match(r"\[1/1 steps\] planted section … ", err), err
    code, out, _ = run(["verify", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["passed"] and doc["status"] == 0
    assert [(r["passed"], r["not_covered"]) for r in doc["reports"]] == [
        (True, None), (True, None), (False, "no claim to check")]
    monkeypatch.setattr(suite, "SECTIONS", _planted_sections(True, False, None))
    code, out, _ = run(["verify", "--quiet"], capsys)
    assert code == 1 and re.search(summary.format(1, "FAIL"), out, re.M)


# ------------------------------------------------------------------------------------------ command line


def test_georecall_alone_prints_the_command_list_and_exits_2(capsys):
    code, out, err = run([], capsys)
    assert code == 2
    for command in ("verify", "check", "certify", "bounds", "export", "lecture"):
        assert re.search(rf"^\s+{command}\s", out, flags=re.M), command
    assert len(err.strip().splitlines()) == 1 and "give a command" in err


def test_verify_help_names_what_full_adds(capsys):
    with pytest.raises(SystemExit):
        main(["verify", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--full" in out and "R = 4" in out and "frozen-embedding capacity threshold" in out
    assert len(suite.FULL_ONLY) == 2


def test_full_with_construction_is_refused(capsys):
    code, _, err = run(["verify", "--full", "--construction", "G1"], capsys)
    assert code == 2 and "--full" in err and "--construction" in err and len(err.strip().splitlines()) == 1


def test_full_reaches_the_sections(monkeypatch, capsys):
    seen = []
    real = suite.verify_steps

    def spy(seed=0, budget=None, full=False):
        seen.append(full)
        return real(seed, budget, full)[:1]  # the first step only: the rows have their own tests

    monkeypatch.setattr(suite, "verify_steps", spy)
    assert run(["verify", "--quiet", "--full"], capsys)[0] == 0
    assert run(["verify", "--quiet"], capsys)[0] == 0
    assert seen == [True, False]


def test_verify_construction_counts_its_own_steps(capsys):
    from georecall.constructions import registry

    spec = registry.get("G2")
    reports = suite.verify_reports([spec], progress=True)
    lines = capsys.readouterr().err.strip().splitlines()
    n = len(spec.verify_cases) + 2  # its cases, its certified row, its bits and bounds rows (one step)
    assert len(lines) == n and all(line.startswith(f"[{i}/{n} steps] ") for i, line in enumerate(lines, 1))
    assert [r.name for r in reports] == [r.name for r in suite.construction_reports(spec)]


def test_verify_construction_refuses_a_spec_without_cases():
    import dataclasses

    from georecall.constructions import registry
    from georecall.errors import InputError

    bare = dataclasses.replace(registry.get("G1"), id="BARE", name="bare", verify_cases=())
    with pytest.raises(InputError, match="lists no verify_cases"):
        suite.verify_reports([bare])
