"""A theorist's path (issue 23): property-testing a construction of one's own, and bound tables for a paper.

Each test fails on the code before the fix it names: the hypothesis snippet of docs/your_construction.md (once
the README's) run verbatim (it raised NameError, then DeadlineExceeded on a busy machine), the profiles
registered by ``georecall.testing`` itself, the ready ``check_spec`` property, OH1's refusals, options not
passed unless given, a spec's common options, ``run_check`` with a task, refusals naming real flags,
``--construction`` on bounds/verify/tradeoff, the ``--gaps`` table, ``--format`` on every table command, and
paper-ready LaTeX (compiled by a real TeX engine when one is installed).
"""

from __future__ import annotations

import csv
import dataclasses
import inspect
import io
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

from georecall.bounds import lower
from georecall.bounds.tables import bound_rows, gap_rows, latex_escape, render, render_table
from georecall.cli import main
from georecall.cli.parser import build_parser
from georecall.constructions import registry
from georecall.errors import ConditionError, InputError
from georecall.theory.tasks import Task, task_for_seed
from georecall.verify.checking.run import OPTION_FLAGS, run_check

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "my_construction.py")


@pytest.fixture
def registered():
    """Unregister whatever a test registers (the registry is process-wide: tables iterate it)."""
    before = {s.id for s in registry.specs()}
    yield
    for spec in registry.specs():
        if spec.id not in before:
            registry.unregister(spec.id)


@pytest.fixture
def oh1(registered):
    return registry.resolve(f"{EXAMPLE}:SPEC")


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def readme_snippet() -> str:
    """The hypothesis snippet, from docs/your_construction.md's "Property-testing it" section (issue 44: the
    README's copy did not skip tasks outside the construction's conditions; the docs page is the snippet's
    home)."""
    text = open(os.path.join(ROOT, "docs", "your_construction.md"), encoding="utf-8").read()
    section = text[text.index("## Property-testing it"):]
    section = section[:section.index("\n## ", 3)]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 1, "docs/your_construction.md's 'Property-testing it' section has one Python block"
    return blocks[0]


# ------------------------------------------------------------------------------------- georecall.testing


def test_readme_hypothesis_snippet_runs_verbatim_outside_the_test_suite(tmp_path):
    """Run in a fresh interpreter from the repository's folder, without this suite's conftest: the profile
    must come from georecall.testing (a busy machine exceeded hypothesis's default 200 ms deadline)."""
    script = tmp_path / "readme_snippet.py"
    script.write_text(readme_snippet() + textwrap.dedent("""
        import hypothesis
        assert hypothesis.settings.default.deadline is None
        names = [n for n in dir() if n.startswith("test_")]
        assert len(names) == 2, names
        for n in names:
            globals()[n]()
        print("ran", *sorted(names))
    """))
    done = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "GEORECALL_HYPOTHESIS_PROFILE": ""})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ran test_my_construction_by_hand test_my_construction_is_exact" in done.stdout


def test_georecall_testing_documents_the_same_snippet_as_the_readme():
    import georecall.testing as testing
    assert textwrap.dedent(testing.__doc__.split("::")[1]).strip() == readme_snippet().strip()


def test_importing_georecall_testing_loads_a_deterministic_profile_without_deadline():
    code = ("import hypothesis, georecall.testing as t; s = hypothesis.settings.default; "
            "print(s.deadline, s.derandomize, s.database)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k != "GEORECALL_HYPOTHESIS_PROFILE"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["None", "True", "None"]
    random = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "GEORECALL_HYPOTHESIS_PROFILE": "random"})
    assert random.stdout.split()[:2] == ["None", "False"]


def test_check_spec_passes_a_correct_construction(oh1):
    assert check_spec_count(oh1) >= 1
    assert check_spec_count(registry.get("G1")) >= 1  # disjoint attributes are drawn too (G1 supports them)


def check_spec_count(spec):
    from georecall.testing import check_spec
    return check_spec(spec, max_N=12, max_R=3, max_examples=8)


def test_check_spec_fails_a_construction_that_overclaims_its_margin(oh1):
    """OH1 with a promise of margin 3λ (it achieves 2λ): the property must fail, naming the task."""
    from georecall.testing import check_spec

    def overclaiming(task, k=1, **options):
        built = oh1.build(task, k, **options)
        return dataclasses.replace(built, promise=dataclasses.replace(built.promise, margin=3.0))

    bad = dataclasses.replace(oh1, id="OH1x", name="one-hot-overclaim", build=overclaiming)
    with pytest.raises(AssertionError, match="OH1x .* fails on"):
        check_spec(bad, max_N=8, max_R=2, max_examples=5)


def test_check_spec_rejects_draws_outside_the_conditions_but_not_every_draw(oh1):
    from georecall.testing import check_spec

    def picky(task, k=1, **options):
        if task.N < 3:
            raise ConditionError("needs N >= 3")
        return oh1.build(task, k, **options)

    spec = dataclasses.replace(oh1, id="OH1p", name="one-hot-picky", build=picky)
    assert check_spec(spec, max_N=6, max_R=2, max_examples=10) >= 1
    never = dataclasses.replace(oh1, id="OH1n", name="one-hot-never",
                                build=lambda task, k=1, **o: (_ for _ in ()).throw(ConditionError("never")))
    with pytest.raises(Exception, match="filtering out|Unsatisfiable|outside its conditions"):
        check_spec(never, max_N=4, max_R=2, max_examples=5)


# ---------------------------------------------------------------------------------- the example's refusals


def test_example_refuses_with_condition_errors(oh1):
    task = task_for_seed(8, 2, 0)
    with pytest.raises(ConditionError, match="single-hop"):
        oh1.build(task, 2)
    with pytest.raises(ConditionError, match="G > "):
        oh1.build(task, gate=1.0)


@pytest.mark.parametrize("extra, needle", [(["--codes", "sign"], "code kind"), (["--D", "64"], "code length"),
                                           (["--gate", "1"], "G > ")])
def test_example_refusals_are_one_line_exit_2(extra, needle, capsys, registered):
    code, out, err = run(["check", "single-hop", "--construction", f"{EXAMPLE}:SPEC", "--N", "64", "--R", "3",
                          *extra], capsys)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_cli_passes_codes_only_when_given_and_records_what_was_built(capsys, registered, tmp_path):
    seen = []
    path = tmp_path / "spy.py"
    path.write_text(textwrap.dedent("""
        import dataclasses
        from georecall.constructions import registry
        G1 = registry.get("G1")
        def build(task, k=1, **options):
            SEEN.append(sorted(options))
            return G1.build(task, k, **options)
        SEEN = []
        SPEC = dataclasses.replace(G1, id="SPY", name="spy", build=build)
    """))
    code, out, _ = run(["check", "single-hop", "--construction", f"{path}:SPEC", "--N", "16", "--R", "2",
                        "--json"], capsys)
    # (each resolve imports the file anew; a user's builder is guarded: unwrap reaches the function itself)
    seen = inspect.unwrap(registry.get("SPY").build).__globals__["SEEN"]
    assert code == 0 and "codes" not in seen[-1] and "D" not in seen[-1]
    code, out, _ = run(["check", "single-hop", "--construction", f"{path}:SPEC", "--N", "16", "--R", "2",
                        "--codes", "sign", "--D", "12", "--json"], capsys)
    seen = inspect.unwrap(registry.get("SPY").build).__globals__["SEEN"]
    assert code == 0 and "codes" in seen[-1] and "D" in seen[-1]
    assert json.loads(out)["params"]["codes"] == "sign"
    code, out, _ = run(["check", "single-hop", "--construction", f"{EXAMPLE}:SPEC", "--N", "16", "--R", "2",
                        "--json"], capsys)
    assert code == 0 and json.loads(out)["params"]["codes"] == "one-hot"  # what was built, not "binary"


# ------------------------------------------------------------------------------------- specs and run_check


def test_a_spec_declares_its_common_options(oh1):
    assert oh1.accepts() == {"lam", "gate"}
    with pytest.raises(InputError, match=r"code length D \(--D\)"):
        run_check(oh1, 8, 2, D=8)
    with pytest.raises(InputError, match=r"code kind \(--codes\)"):
        run_check(oh1, 8, 2, codes="binary")
    assert run_check(oh1, 8, 2, options={"lam": 2.0}).passed
    with pytest.raises(InputError, match="common options"):
        dataclasses.replace(oh1, common=frozenset({"codes", "bogus"}))


def test_run_check_with_a_task_refuses_other_sizes_and_unsupported_variants(oh1):
    task = task_for_seed(8, 2, 3)
    assert run_check(oh1, 8, 2, task=task).passed
    with pytest.raises(InputError, match="N = 8, R = 2"):
        run_check(oh1, 16, 2, task=task)
    with pytest.raises(InputError, match="N = 8, R = 2"):
        run_check(oh1, 8, 3, task=task)
    disjoint = Task(task.table, "disjoint")
    with pytest.raises(InputError, match="does not support disjoint"):
        run_check(oh1, 8, 2, task=disjoint)
    report = run_check("geometric", 8, 2, task=disjoint)  # G1 supports it: checked on the disjoint task
    assert report.passed and report.params["attributes"] == "disjoint" and report.result.n_queries == 16


def test_refusals_name_flags_that_exist():
    parser = build_parser()
    flags = set()

    def walk(p):
        for action in p._actions:
            flags.update(action.option_strings)
            if hasattr(action, "choices") and isinstance(action.choices, dict):
                for sub in action.choices.values():
                    walk(sub)
    walk(parser)
    named = {flag for text in OPTION_FLAGS.values() for flag in re.findall(r"\(--([a-z-]+)\)", text)}
    assert named and all(f"--{flag}" in flags for flag in named), sorted(f for f in named
                                                                          if f"--{f}" not in flags)


# --------------------------------------------------------------------------- --construction in other commands


def test_bounds_verify_and_precision_take_a_users_construction(capsys, registered):
    code, out, _ = run(["bounds", "--construction", f"{EXAMPLE}:SPEC", "--N", "64", "--R", "3", "--k", "1",
                        "--json"], capsys)
    rows = json.loads(out)["rows"]
    assert code == 0 and [r["construction"] for r in rows] == ["OH1"]
    assert rows[0]["d"] == 3 * 64 + 3 + 64 and rows[0]["d_min"] == lower.per_entity(64, 3, 1, 1).d_min
    assert rows[0]["d_min"] > lower.total_information(64, 3, 1, 1).d_min  # a one-pass model: per entity
    code, out, _ = run(["verify", "--construction", f"{EXAMPLE}:SPEC", "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["passed"]  # its case, its certified row, and the bits and bounds rows naming it
    assert [r["params"].get("construction") or r["params"]["constructions"] for r in doc["reports"]] == [
        "OH1", "OH1", ["OH1"], ["OH1"]]
    # OH1 makes no bits claim: its bits and bounds rows checked nothing, so they are not covered (never a
    # PASS, no failure: the exit code stays 0), and its checked rows pass
    assert [(r["passed"], r["not_covered"]) for r in doc["reports"]] == [
        (True, None), (True, None), (False, "OH1 makes no bits claim"), (False, "OH1 makes no bits claim")]


def test_tradeoff_takes_a_users_k_hop_construction(capsys, registered, tmp_path):
    path = tmp_path / "my_g2.py"
    path.write_text("import dataclasses\nfrom georecall.constructions import registry\n"
                    "SPEC = dataclasses.replace(registry.get('G2'), id='MYG2', name='my-path-blocks')\n")
    code, out, _ = run(["tradeoff", "--construction", f"{path}:SPEC", "--N", "64", "--R", "2", "--k-max", "2",
                        "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and {r["construction"] for r in doc["rows"]} == {"MYG2"} and len(doc["rows"]) == 2
    code, _, err = run(["tradeoff", "--construction", f"{EXAMPLE}:SPEC"], capsys)
    assert code == 2 and "single-hop" in err


def test_gaps_table_command(capsys):
    from georecall.verify.checking.run import per_parameter_bits, table_bits
    code, out, _ = run(["bounds", "--gaps", "--N", "4096", "--R", "16", "--k", "1", "--json"], capsys)
    rows = {r["construction"]: r for r in json.loads(out)["rows"]}
    assert code == 0 and rows["G1"]["b_needed"] == table_bits()["G1"] == 2
    assert rows["G1"]["needed_d_min"] == lower.per_entity(4096, 16, 1, 2).d_min
    one_bit = per_parameter_bits()["G1"]
    assert rows["G1"]["per_parameter_d_min"] == lower.per_entity(4096, 16, 1, one_bit).d_min
    assert rows["A1"]["b_needed"] is None
    code, out, _ = run(["bounds", "--gaps", "--needed", "A1=3", "--N", "4096", "--R", "16", "--k", "1",
                        "--json"], capsys)
    a1 = {r["construction"]: r for r in json.loads(out)["rows"]}["A1"]
    assert a1["b_needed"] == 3 and a1["needed_vacuous"] == "vacuous"  # P0 holds the facts
    code, _, err = run(["bounds", "--gaps", "--bits", "2"], capsys)
    assert code == 2 and "--bits" in err
    code, _, err = run(["bounds", "--needed", "G1=2"], capsys)
    assert code == 2 and "--gaps" in err


# ------------------------------------------------------------------------------------------ table formats


@pytest.mark.parametrize("argv", [["tradeoff", "--N", "64", "--R", "2", "--k-max", "2"],
                                  ["count", "--N", "3", "--R", "2", "--k", "2"],
                                  ["precision", "--N", "32", "--R", "2", "--max-bits", "3"],
                                  ["bounds", "--N", "64", "--R", "2", "--k", "1"]])
def test_every_table_command_has_every_format(argv, capsys):
    code, out, _ = run(argv + ["--json"], capsys)
    doc = json.loads(out)
    key = "records" if argv[0] == "precision" else "rows"
    assert code == 0
    code, same, _ = run(argv + ["--format", "json"], capsys)
    assert json.loads(same)[key] == doc[key]
    quiet = ["--quiet"] if argv[0] in ("count", "bounds") else []  # only those print progress (parser.SHARED)
    code, text, _ = run(argv + ["--format", "csv"] + quiet, capsys)
    parsed = list(csv.DictReader(io.StringIO(text)))
    assert code == 0 and len(parsed) == len(doc[key])
    assert [str(r[next(iter(doc[key][0]))]) for r in parsed] == [str(r[next(iter(r))]) for r in doc[key]]
    code, text, _ = run(argv + ["--format", "md"] + quiet, capsys)
    assert code == 0 and text.startswith("| ") and len([line for line in text.splitlines()
                                                         if line.startswith("| ")]) == len(doc[key]) + 1
    code, text, _ = run(argv + ["--format", "latex", "--caption", "A & B", "--label", "tab:x"] + quiet,
                        capsys)
    assert code == 0 and r"\toprule" in text and r"\caption{A \& B" in text and r"\label{tab:x}" in text
    code, _, err = run(argv + ["--format", "latex", "--json"], capsys)
    assert code == 2 and "--format latex" in err
    code, _, err = run(argv + ["--format", "md", "--columns", "nope"], capsys)
    assert code == 2 and "no column 'nope'" in err


def test_columns_choose_and_order_the_columns(capsys):
    code, text, _ = run(["bounds", "--N", "64", "--R", "2", "--k", "1", "--format", "md", "--columns",
                         "d_min,construction", "--quiet"], capsys)
    assert code == 0 and text.splitlines()[0] == "| d_min | construction |"


def test_csv_prints_only_the_chosen_columns(capsys):
    code, text, _ = run(["bounds", "--N", "64", "--R", "2", "--k", "1", "--format", "csv", "--columns",
                         "construction,d", "--quiet"], capsys)
    lines = [line for line in text.splitlines() if line]
    assert code == 0 and lines[0] == "construction,d" and {"G1,20", "A1,14"} <= set(lines[1:])
    assert all(line.count(",") == 1 for line in lines)


def test_chosen_latex_columns_keep_the_shared_sizes_in_the_caption(capsys):
    code, text, _ = run(["bounds", "--format", "latex", "--N", "4096", "--R", "16", "--k", "1", "--columns",
                         "construction,k,d,d_min,gap", "--caption", "Bounds", "--quiet"], capsys)
    caption = next(line for line in text.splitlines() if line.startswith(r"\caption"))
    assert code == 0 and "4{,}096" in caption and "R = 16" in caption and "b = 1" in caption


def test_construction_takes_several_names_at_once(capsys):
    code, text, _ = run(["bounds", "--N", "64", "--R", "2", "--k", "1", "--format", "csv", "--columns",
                         "construction", "--construction", "G1", "A1", "--quiet"], capsys)
    assert code == 0 and [line for line in text.splitlines() if line] == ["construction", "G1", "A1"]


# ------------------------------------------------------------------------------------------------ LaTeX


def latex_body(text: str) -> list[str]:
    lines = text.splitlines()
    return lines[lines.index(r"\midrule") + 1:lines.index(r"\bottomrule")]


def test_latex_is_booktabs_with_math_headers_and_integral_b():
    text = render(bound_rows([4096], [16], [1, 2], [1, 2]), "latex")
    assert r"\toprule" in text and r"\midrule" in text and r"\bottomrule" in text and r"\hline" not in text
    header = text.splitlines()[text.splitlines().index(r"\toprule") + 1]
    assert r"$d_{\min}$" in header and "$b$" in header and "d\\_" not in header
    assert "$P_0$" in render(bound_rows([4096], [16], [1], [1]), "latex", columns=["construction", "P0"])
    assert "1.00 &" not in text and "2.00 &" not in text and re.search(r"& [12] & ", text)
    g1 = render(bound_rows([4096], [4], [1], [3]), "latex")  # G1: d = 64, d_min = 16, a gap of exactly 4
    assert re.search(r"^G1 & .* & 4\.00 \\\\$", g1, flags=re.M)  # a ratio, printed as one


def test_empty_bounds_print_words_never_negative_numbers():
    rows = bound_rows([4096], [16], [1, 3], [1])
    assert any(r["d_bound"] < 0 for r in rows)  # A1's real-valued bound is negative: P0 holds the facts
    for fmt in ("latex", "md"):
        text = render(rows, fmt, columns=["construction", "k", "d_bound", "d_min", "gap"])
        body = latex_body(text) if fmt == "latex" else text.splitlines()[2:]
        assert not any(re.search(r"(\$-\$|-)\d", line) for line in body), text
        assert any("vacuous" in line for line in body) and any("no gadget" in line for line in body)


def test_g2_where_no_gadget_fits_shows_the_total_information_bound():
    row = [r for r in bound_rows([4096], [16], [3], [1]) if r["construction"] == "G2"][0]
    assert lower.tradeoff(4096, 16, 3, 1).d_min == 0  # N < S_3: the tradeoff bound is empty here
    assert row["bound"] == "total-information" and row["d_min"] == lower.total_information(4096, 16, 3).d_min
    assert row["d_min"] > 0 and row["gap"] == pytest.approx(row["d"] / row["d_min"], abs=1e-4)


def test_latex_escapes_every_special_character():
    nasty = "a_b&c%d$e#f{g}h~i^j\\k<l>"
    assert latex_escape(nasty) == (r"a\_b\&c\%d\$e\#f\{g\}h\textasciitilde{}i\textasciicircum{}j"
                                   r"\textbackslash{}k\textless{}l\textgreater{}")
    text = render_table([{"construction": nasty, "d": 3}], "latex", caption=nasty, label="tab:a b")
    assert nasty not in text and r"\label{tab:ab}" in text and text.count(latex_escape(nasty)) == 2


def test_default_latex_columns_are_few_and_constants_go_to_the_caption():
    rows = bound_rows([4096], [16], [1, 2, 3], [1])
    text = render(rows, "latex", caption="Bounds")
    header = text.splitlines()[text.splitlines().index(r"\toprule") + 1]
    assert header.count("&") + 1 <= 8 and "$N$" not in header  # N, R and b are the same in every row
    assert r"\caption{Bounds ($N = 4{,}096$, $R = 16$, $b = 1$)}" in text


TEX = shutil.which("pdflatex")


def compile_latex(tmp_path, tables: list[str]) -> str:
    doc = "\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n" + "\n\n".join(tables) \
        + "\n\\end{document}\n"
    (tmp_path / "t.tex").write_text(doc)
    done = subprocess.run([TEX, "-interaction=nonstopmode", "-halt-on-error", "t.tex"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    log = (tmp_path / "t.log").read_text(errors="replace")
    assert done.returncode == 0, log[-3000:]
    return log


@pytest.mark.skipif(TEX is None, reason="no TeX engine (pdflatex) installed; CI's slow step installs one")
def test_latex_tables_compile_and_fit_the_page(tmp_path, capsys):
    tables = [render(bound_rows([4096], [16], [1, 2, 3], [1]), "latex", caption="Lower bounds", label="t:b"),
              render(gap_rows([4096], [16, 4], [1, 2, 3], {"G1": 2, "G2": 2, "C1": 2},
                              {"G1": 1, "G2": 1, "C1": 1}), "latex", caption="Gaps", label="t:g"),
              render_table([{"construction": "a_b&c%d$e#f{g}h~i^j\\k<l>—", "d": 1.5}], "latex",
                           caption="x_y & 50% {z}", label="t:e")]
    for argv in (["tradeoff", "--N", "64", "--R", "2", "--k-max", "2"], ["count", "--N", "3", "--R", "2"],
                 ["precision", "--N", "32", "--R", "2", "--max-bits", "3"],
                 ["bounds", "--N", "1024", "4096", "--R", "4", "16", "--k", "1", "2", "--bits", "1", "2"]):
        code, out, _ = run(argv + ["--format", "latex"], capsys)
        assert code == 0
        tables.append(out)
    log = compile_latex(tmp_path, tables)
    assert "Overfull \\hbox" not in log, log[log.index("Overfull"):][:400]


@pytest.mark.skipif(TEX is None, reason="no TeX engine (pdflatex) installed; CI's slow step installs one")
def test_tex_compile_check_catches_a_table_wider_than_the_page(tmp_path):
    """The fit check can fail: every column of a bound row is wider than a page."""
    rows = bound_rows([4096], [16], [1], [1])
    log = compile_latex(tmp_path, [render(rows, "latex", columns=list(rows[0]))])
    assert "Overfull \\hbox" in log


def test_bound_rows_show_the_strongest_bound_that_holds_for_the_construction():
    """Each row's d_min is the largest of the spec's own bound, total information and (for a one-pass
    model) per entity, computed here from the bound functions one by one; chain of thought never takes the
    per-entity k-hop bound (its later steps read other entities' embeddings)."""
    for r in bound_rows([64, 4096], [2, 4, 16], [1, 2, 3], [1, 2]):
        args = (r["N"], r["R"], r["k"], r["b"], r["P0"])
        own = {"G2": lower.tradeoff, "A2a": lower.tradeoff, "A2b": lower.tradeoff,
               "C1": lower.chain_of_thought}.get(r["construction"], lower.total_information)(*args).d_min
        candidates = [own, lower.total_information(*args).d_min]
        if r["construction"] != "C1":
            candidates.append(lower.per_entity(*args).d_min)
        assert r["d_min"] == max(candidates), r
        if r["construction"] == "C1":
            assert r["bound"] == "chain-of-thought"
    g2 = {r["k"]: r for r in bound_rows([4096], [4], [2, 3], [1]) if r["construction"] == "G2"}
    assert g2[2]["bound"] == "tradeoff" and g2[3]["bound"] == "per-entity"  # a tie keeps the spec's own
    assert g2[3]["d_min"] == lower.per_entity(4096, 4, 3).d_min > lower.tradeoff(4096, 4, 3).d_min
