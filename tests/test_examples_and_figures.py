"""The runnable examples, the demo, and the figure command."""

import json
import os
import pathlib
import runpy
import sys

import numpy as np
import pytest

from georecall.cli import main

EXAMPLES = sorted((pathlib.Path(__file__).parent.parent / "examples").glob("*.py"))


def test_there_are_examples():
    assert len(EXAMPLES) >= 3


SLOW_EXAMPLES = {"train_and_probe.py"}  # minutes on 2 cores: run with -m slow (CONTRIBUTING, CI times)


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.name in SLOW_EXAMPLES else p
                                  for p in EXAMPLES], ids=lambda p: p.name)
def test_example_runs(path, capsys):
    runpy.run_path(str(path), run_name="__main__")
    assert capsys.readouterr().out.strip()


def test_demo_prints_the_walkthrough(capsys):
    from georecall.experiments.demo import run_demo
    numbers = run_demo(seed=0)
    out = capsys.readouterr().out
    assert numbers["exact"] and numbers["margin"] == 4.0 and numbers["trained_reached"]
    assert "gate" in out and "B_cipher0" in out and "16/16 right" in out
    assert numbers["unit_margin"] == pytest.approx(4 / 3) and numbers["relations"] == ["cipher0", "cipher1"]


def test_demo_sizes_and_names():
    """demo takes --N and --R (validated); its relation names are labels of bijections, not kinship words
    (mother, wife: not bijections, and a bijection may have fixed points)."""
    from georecall.errors import InputError
    from georecall.experiments.demo import run_demo

    lines = []
    numbers = run_demo(6, 3, seed=4, out=lines.append)
    text = "\n".join(lines)
    assert numbers["exact"] and "18/18 right" in text and "R = 3 bijections" in text
    assert "mother" not in text and "wife" not in text and "a symbol may encode to itself" in text
    for N, R in ((1, 2), (65, 2), (8, 0), (8, 9)):
        with pytest.raises(InputError):
            run_demo(N, R, out=lines.append)


def test_walkthrough_defines_every_letter_and_both_scales():
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "walkthrough.md").read_text()
    for letter in ("| c1, c2 |", "| g |", "| σ |", "| G |", "| λ |", "| μ |", "| N, R |"):
        assert letter in doc, letter
    assert "integer scale" in doc and "unit scale" in doc and "0.3333" in doc and "4/D" in doc


@pytest.mark.slow  # long (CONTRIBUTING, CI times); a shorter case of the behaviour stays in the default run
def test_figures_are_written(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="the figure command needs the optional plot extra")
    results = tmp_path / "results.jsonl"
    from georecall import __version__
    base = {"kind": "threshold", "seed": 0, "monotone": True, "trials": [], "steps": 500, "lr": 1e-2,
            "width_factor": 4, "attention": "uniform", "dtype": "float32", "version": __version__}
    records = [{**base, "N": N, "R": R, "mode": mode, "d_star": d}
               for N, R, mode, d in [(256, 2, "learned", 8), (256, 4, "learned", 12), (256, 2, "frozen", 10),
                                     (256, 4, "frozen", 18)]]
    records.append({"kind": "transfer", "label": "g1", "closed_form_accuracy": 1.0, "fitted_accuracy": 0.6})
    results.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    code = main(["figures", "--from", str(results), "--out", str(tmp_path / "fig"), "--json"])
    files = json.loads(capsys.readouterr().out)["files"]
    assert code == 0
    names = {pathlib.Path(f).name for f in files}
    assert names == {
        f"{n}.{e}" for n in ("thresholds", "tradeoff", "margins", "transfer", "construction", "weights_E",
                             "weights_Q", "weights_W1", "weights_W2", "weights_U", "attention",
                             "trained_vs_g1")
        for e in ("png", "svg")
    }
    assert all(os.path.getsize(f) > 1000 for f in files)


def test_figures_without_matplotlib_say_how_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code = main(["figures", "--out", str(tmp_path / "fig")])
    assert code == 2 and "pip install '.[plot]' in georecall's clone" in capsys.readouterr().err


def test_probe_and_transfer_commands(tmp_path, capsys):
    path = str(tmp_path / "g1.npz")
    assert main(["check", "single-hop", "--N", "128", "--R", "2", "--save", path, "--quiet"]) == 0
    capsys.readouterr()
    assert main(["probe", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["readout"]["encoding_r2"] == pytest.approx(1.0) and doc["intervention"]["follows"] == 1.0
    log = str(tmp_path / "results.jsonl")
    assert main(["transfer", path, "--steps", "3", "--append", log, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["transfer"]["closed_form_accuracy"] == 1.0
    assert json.loads(open(log).read())["kind"] == "transfer"
    np.save(tmp_path / "bad.npy", np.zeros((2, 3), dtype=int))
    assert main(["probe", path, "--task", str(tmp_path / "bad.npy")]) == 2


def test_probe_hidden_command(tmp_path, capsys):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 5, size=(300, 2))
    states = np.eye(5)[labels[:, 0]] @ rng.standard_normal((5, 16)) + np.eye(5)[
        labels[:, 1]
    ] @ rng.standard_normal((5, 16))
    np.savez(tmp_path / "s.npz", states=states, attributes=labels)
    assert main(["probe-hidden", str(tmp_path / "s.npz"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["probe_accuracy_mean"] > 0.95
    np.savez(tmp_path / "t.npz", states=states)
    assert main(["probe-hidden", str(tmp_path / "t.npz")]) == 2


def test_walkthrough_shows_what_the_demo_prints():
    """docs/walkthrough.md quotes `georecall demo`; its G1 part (exact integers) must match the code today."""
    from georecall.experiments.demo import run_demo

    lines = []
    run_demo(seed=0, out=lines.append)
    printed = "\n".join(lines).split("== A trained model")[0].strip()
    doc = (pathlib.Path(__file__).parent.parent / "docs" / "walkthrough.md").read_text()
    assert printed in doc


def _repository_texts():
    root = pathlib.Path(__file__).parent.parent
    for path in sorted(root.rglob("*")):
        parts = set(path.relative_to(root).parts)
        if path.is_file() and path.suffix in {".py", ".md", ".toml", ".cfg", ".txt"} and not parts & {
                ".venv", ".git", "build", "dist", "__pycache__", "georecall.egg-info", ".ruff_cache"}:
            yield path, path.read_text(errors="replace")


def test_docs_and_docstrings_cite_the_repositorys_own_docs():
    """The project's formalization lives in docs/: nothing may point to files that are not in the repository
    (the names are assembled here so that this file does not match itself)."""
    outside = ["THEORY" + ".md", "DESIGN" + ".md", "THEORY" + " §"]
    found = [(str(path), name) for path, text in _repository_texts() for name in outside if name in text]
    assert found == []


def test_every_cited_section_exists():
    """Citations of a doc's section by its title (or several: "A", "B" and "C") name real headings."""
    import re

    root = pathlib.Path(__file__).parent.parent
    headings = {}
    for doc in (root / "docs").glob("*.md"):
        headings[doc.name] = [line.lstrip("#").strip() for line in doc.read_text().splitlines()
                              if line.startswith("#")]
    cite = re.compile(r'(\w+)\.md,? (?:sections? )?((?:"[^"\n]+"(?:, | and )?)+)')
    checked = 0
    for path, text in _repository_texts():
        for match in cite.finditer(text):
            name = f"{match.group(1)}.md"
            if name not in headings:
                continue
            for section in re.findall(r'"([^"\n]+)"', match.group(2)):
                checked += 1
                assert any(h.startswith(section) for h in headings[name]), (str(path), name, section)
    assert checked >= 15


def _unresolved_dotted_names(text: str) -> tuple[int, list[str]]:
    """The dotted names of georecall's code in backticks (`verify.checking.check.check_queries`, with or
    without the ``georecall.`` prefix) that do not resolve, or resolve only through a module's table of names
    that moved (a DeprecationWarning); and how many were checked."""
    import importlib
    import re
    import warnings

    pattern = re.compile(r"`((?:georecall\.)?(?:verify|constructions|bounds|theory)(?:\.[A-Za-z_]\w*)+)"
                         r"(?:\(\))?`")
    bad, checked = [], 0
    for name in pattern.findall(text):
        checked += 1
        parts = (name if name.startswith("georecall.") else f"georecall.{name}").split(".")
        for k in range(len(parts), 1, -1):  # the longest importable module, then attributes
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("error", DeprecationWarning)
                    obj = importlib.import_module(".".join(parts[:k]))
                    for attribute in parts[k:]:
                        obj = getattr(obj, attribute)
                break
            except (ImportError, AttributeError, DeprecationWarning):
                continue
        else:
            bad.append(name)
    return checked, bad


def test_every_dotted_name_in_the_docs_resolves():
    """A module or function the docs name by its dotted path exists there (modules get split and renamed)."""
    root = pathlib.Path(__file__).parent.parent
    checked, bad = 0, {}
    for doc in [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").rglob("*.md"))]:
        n, unresolved = _unresolved_dotted_names(doc.read_text())
        checked += n
        if unresolved:
            bad[doc.name] = unresolved
    assert bad == {} and checked >= 20
    # the check itself: a stale path, an old path (its name moved to a sibling module), and a good one
    stale, moved = "verify.check.check_queries", "verify.checking.additive.run_additive"
    good = "`verify.checking.additive_run.run_additive` `constructions.forward.forward()`"
    planted = f"`{stale}` `{moved}` {good}"
    assert _unresolved_dotted_names(planted) == (4, [stale, moved])


def test_no_sentence_is_broken_after_a_lone_word():
    """An earlier mechanical re-wrap left lines like "# by" or "computed" between a full line and its
    continuation. A lone word whose previous line is full and whose next line continues the sentence is that
    artifact (a last word ending a sentence, "margin.", is not)."""
    import keyword
    import re

    root = pathlib.Path(__file__).parent.parent
    broken = []
    for folder in ("theory", "constructions", "bounds", "verify", "src", "tests", "examples", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            lines = path.read_text().splitlines()
            for i in range(1, len(lines) - 1):
                word = re.fullmatch(r"\s*(#\s*)?([\w'-]+)", lines[i])
                following = lines[i + 1].strip().lstrip("#").strip()
                if word and keyword.iskeyword(word.group(2)):
                    continue
                if word and len(lines[i - 1]) >= 98 and re.match(r"[a-z(`]", following) and (
                        word.group(1) is None or lines[i - 1].lstrip().startswith("#")):
                    if word.group(1) is None and not lines[i - 1].rstrip().endswith((",", "&", "the", "a")) \
                            and re.search(r"[=(\[{:]$", lines[i - 1].rstrip()):
                        continue  # code: a call's argument on its own line
                    broken.append(f"{path.relative_to(root)}:{i + 1}: {lines[i].strip()}")
    assert broken == []


def test_demo_shows_the_weights_as_numbers(capsys):
    """`demo --show-weights` prints E, Q, W1, b1, W2 and U; E's rows are checked against binary codes built by
    hand (entry i of a_j is −1 where bit i of j is set), and N > 16 is refused in one line."""
    from georecall.experiments.demo import run_demo
    from georecall.theory.tasks import task_for_seed

    lines = []
    run_demo(8, 2, seed=0, out=lines.append, weights=True)
    text = "\n".join(lines)
    for name in ("E (8 × 11)", "Q (2 × 11)", "W1 (11 × 12)", "b1 (12)", "W2 (12 × 11)", "U (8 × 11)"):
        assert name in text, name
    task = task_for_seed(8, 2, 0)
    for s in range(8):
        row = next(line for line in lines if line.strip().startswith(f"e_{s} ") and "+" in line)
        entries = [int(x) for x in row.split()[1:]]
        expected = [1 - 2 * ((int(task.table[r, s]) >> i) & 1) for r in range(2) for i in range(3)]
        assert entries[:6] == expected and entries[6:] == [0] * 5
    b1 = next(line for line in lines if line.strip().startswith("b1 ") and "(" not in line)
    assert b1.split()[1:] == ["-4"] * 12
    assert main(["demo", "--N", "17", "--show-weights"]) == 2
    err = capsys.readouterr().err
    assert "N <= 16" in err and len(err.strip().splitlines()) == 1
