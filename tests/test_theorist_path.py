"""docs/your_construction.md, run (issue 44): the property-test snippet skips tasks outside a construction's
conditions as ``check_spec`` does (the README's copy errored on a drawn N = 1); a user's construction opts
into integer mode by declaring it, and the check proves it; which decoder a user's construction gets and
why; ``bounds --gaps`` says why a row is empty and what to pass."""

from __future__ import annotations

import dataclasses
import json
import os
import re

import pytest

from georecall.cli import main
from georecall.constructions import registry
from georecall.constructions.arithmetic import IntegerModeError
from georecall.errors import ConditionError
from georecall.verify.checking.run import run_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "your_construction.md")


@pytest.fixture(autouse=True)
def _in_the_repository(monkeypatch):
    monkeypatch.chdir(ROOT)  # the snippets resolve examples/my_construction.py from the repository's folder


def blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", open(DOC, encoding="utf-8").read(), flags=re.S)


def picky(task, k=1, **options):
    """OH1, refusing N < 3 (a condition the snippet must skip, not fail on)."""
    if task.N < 3:
        raise ConditionError("needs N >= 3")
    return registry.resolve("examples/my_construction.py:SPEC").build(task, k, **options)


def test_the_docs_snippet_skips_tasks_outside_the_conditions():
    namespace: dict = {}
    exec(compile(blocks()[0], DOC, "exec"), namespace)
    namespace["test_my_construction_is_exact"]()
    namespace["test_my_construction_by_hand"]()
    oh1 = namespace["SPEC"]
    namespace["SPEC"] = dataclasses.replace(oh1, id="OH1p", name="one-hot-picky", family=None, build=picky)
    namespace["test_my_construction_by_hand"]()  # N < 3 drawn and skipped, larger N checked


def test_the_snippet_without_the_skip_errors_on_such_a_task():
    """The rule has force: the README's old form (no try/except) fails on the same construction."""
    old = re.sub(r"    try:\n        report = (.*)\n    except ConditionError:.*\n        assume\(False\)\n"
                 r"    assert report.passed", r"    assert \1.passed", blocks()[0])
    assert old != blocks()[0] and "assume(False)" not in old
    namespace: dict = {}
    exec(compile(old, DOC, "exec"), namespace)
    oh1 = namespace["SPEC"]
    namespace["SPEC"] = dataclasses.replace(oh1, id="OH1q", name="one-hot-picky2", family=None, build=picky)
    with pytest.raises(ConditionError):
        namespace["test_my_construction_by_hand"]()


# ------------------------------------------------------------------------------------------ integer mode


def integer_namespace() -> dict:
    namespace: dict = {}
    exec(compile(blocks()[1], DOC, "exec"), namespace)  # runs its own assertions
    return namespace


def test_a_user_spec_declares_integer_mode_and_the_check_proves_it():
    namespace = integer_namespace()
    spec = namespace["SPEC"]
    assert "integer" in spec.options and "integer" not in namespace["OH1"].options
    report = run_check(spec, 16, 2, options={"integer": True})
    assert report.passed and "int (exact)" in report.name and report.result.mode == "integer exact"
    with pytest.raises(ConditionError, match="integer G and λ"):  # the family's own refusal
        run_check(spec, 16, 2, options={"integer": True, "lam": 0.5})
    with pytest.raises(Exception, match=r"does not take integer mode \(--integer\)"):  # undeclared: refused
        run_check(namespace["OH1"], 16, 2, options={"integer": True})


def test_integer_mode_is_proved_not_trusted():
    """A spec that declares integer mode but builds non-integer weights is refused by the check."""
    namespace = integer_namespace()
    oh1 = namespace["OH1"]

    def liar(N, R, k=1, *, integer=False, **options):
        return oh1.family(N, R, k, **{**options, "lam": 0.5})

    spec = dataclasses.replace(namespace["SPEC"], id="OH1l", name="one-hot-liar", family=liar, build=None)
    with pytest.raises(IntegerModeError, match="not integral"):
        run_check(spec, 16, 2, options={"integer": True})


def test_integer_mode_of_a_user_spec_on_the_command_line(capsys, tmp_path):
    path = tmp_path / "oh1i.py"
    path.write_text(blocks()[1])
    code = main(["check", "single-hop", "--construction", f"{path}:SPEC", "--N", "16", "--R", "2",
                 "--integer", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["reports"][0]["name"] == "OH1i one-hot int (exact)"


# ------------------------------------------------------------------------------------------- decoders


def test_which_decoder_a_users_construction_gets_and_why():
    """Binary codes at N = 2^D: the hypercube decoder; one-hot codes: dense, with the reason."""
    mine = dataclasses.replace(registry.get("G1"), id="MYB", name="my-binary")  # a user spec, G1's family
    binary = run_check(mine, 64, 2).as_dict()["check"]
    assert binary["decoder"] == "hypercube" and binary["forward"] == "tables"
    one_hot = run_check(registry.resolve("examples/my_construction.py:SPEC"), 64, 2).as_dict()["check"]
    assert one_hot["decoder"] == "dense" and one_hot["forward"] == "tables"
    assert "n_out = 64 is not 2^D for the D = 64 coordinates" in one_hot["fallback"]


# ------------------------------------------------------------------------------------------ --gaps notes


def test_gaps_say_why_a_row_is_empty_and_what_to_pass(capsys):
    code = main(["bounds", "--gaps", "--construction", "examples/my_construction.py:SPEC", "--construction",
                 "A1", "--construction", "G1", "--N", "64", "--R", "3", "--k", "1"])
    out, err = capsys.readouterr()
    assert code == 0 and "| OH1 |" in out and "note" not in out  # the table stays a table
    notes = [line for line in err.splitlines() if line.startswith("georecall: note: ")]
    assert len(notes) == 2
    assert "OH1: no needed-bits b" in notes[0] and "no bits claim" in notes[0]
    assert "pass --needed OH1=B" in notes[0]
    assert "A1: no needed-bits b" in notes[1] and "grows with N" in notes[1] and "--needed A1=B" in notes[1]
    code = main(["bounds", "--gaps", "--construction", "examples/my_construction.py:SPEC", "--needed",
                 "OH1=2", "--N", "64", "--R", "3", "--k", "1", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["notes"] == [] and doc["rows"][0]["needed_d_min"] > 0  # given a b: no note
    code = main(["bounds", "--gaps", "--construction", "G1", "--N", "64", "--R", "3", "--k", "1", "--quiet"])
    assert code == 0 and "note" not in capsys.readouterr().err  # G1 declares both: nothing to say
