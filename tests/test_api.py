"""The public API (``import georecall as gr``): each verb against what the command line (or the library path
it wraps) returns for the same input, bad input against the documented exception, and ``import georecall``
kept light."""

import json
import subprocess
import sys

import numpy as np
import pytest

import georecall as gr
from georecall.cli import main
from georecall.errors import InputError


def cli_json(argv, capsys):
    code = main([*argv, "--json"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


# ------------------------------------------------------------------------------------- the package door


def test_every_public_name_resolves_and_is_documented_with_an_example():
    for name in gr.__all__:
        if name == "__version__":
            continue
        obj = getattr(gr, name)
        doc = obj.__doc__ or ""
        assert "Examples" in doc and ">>>" in doc, name
        if not isinstance(obj, type):  # a verb: its arguments and what it returns
            assert "Returns" in doc and "Parameters" in doc and "Raises" in doc, name
    assert set(gr.__all__) <= set(dir(gr))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'chek'"):
        gr.chek  # noqa: B018


def test_no_verb_shadows_a_subpackage():
    # gr.constructions / gr.bounds would be replaced by the subpackage of that name once it is imported
    import georecall.bounds  # noqa: F401
    import georecall.constructions  # noqa: F401
    assert callable(gr.list_constructions) and callable(gr.lower_bounds)
    assert not {"constructions", "bounds", "theory", "verify"} & set(gr.__all__)


def test_import_georecall_imports_no_heavy_module():
    code = ("import sys, georecall; heavy = [m for m in ('numpy', 'scipy', 'networkx', 'sympy', "
            "'matplotlib', 'torch', 'transformers', 'dask', 'sphinx', 'georecall.verify') "
            "if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_planted_heavy_import_would_be_seen():
    # the test above reads sys.modules in a fresh interpreter: importing a heavy module shows up there
    code = "import sys, georecall, networkx; print('networkx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


# --------------------------------------------------------------------------- constructions and tasks


def test_list_constructions_is_the_command_lines_choice_of_names(capsys):
    from georecall.constructions import registry

    assert gr.list_constructions() == [s.name for s in registry.specs()]
    assert set(gr.list_constructions("single")) | set(gr.list_constructions("multi")) == set(
        gr.list_constructions())
    with pytest.raises(InputError, match="hops must be"):
        gr.list_constructions("double")


def test_construction_resolves_names_and_ids_and_refuses_unknown_ones():
    assert gr.construction("geometric") is gr.construction("G1")
    with pytest.raises(InputError):
        gr.construction("no-such-construction")


def test_task_is_the_seeded_task_of_every_command(tmp_path, capsys):
    # independent path: the task stored by `check --save` from the command line
    path = tmp_path / "m.npz"
    code, _ = cli_json(["check", "single-hop", "--N", "16", "--R", "3", "--seed", "7", "--save", str(path)],
                       capsys)
    assert code == 0
    from georecall.constructions.storage import load_model

    _, header = load_model(str(path))
    assert np.array_equal(gr.task(16, 3, seed=7).table, header["extra_arrays"]["task_table"])
    assert not np.array_equal(gr.task(16, 3, seed=7).table, gr.task(16, 3, seed=8).table)
    with pytest.raises(InputError):
        gr.task(0, 3)
    with pytest.raises(InputError):
        gr.task(5, 2, symmetric=True)  # a perfect matching needs N even


def test_build_gives_the_weights_check_saves(tmp_path, capsys):
    path = tmp_path / "m.npz"
    cli_json(["check", "single-hop", "--N", "16", "--R", "2", "--save", str(path)], capsys)
    built = gr.build("geometric", gr.task(16, 2))
    stored = gr.load(str(path))
    for name, array in built.model.arrays().items():
        assert np.array_equal(array, stored.arrays()[name]), name
    with pytest.raises(InputError, match="does not take"):
        gr.build("geometric", gr.task(16, 2), attention="hard")
    with pytest.raises(InputError, match="k must be 1"):
        gr.build("geometric", gr.task(16, 2), k=2)


# -------------------------------------------------------------------------------------- check, certify


def test_check_is_the_command_lines_check(capsys):
    report = gr.check("geometric", N=64, R=3, seed=5)
    code, doc = cli_json(["check", "single-hop", "--N", "64", "--R", "3", "--seed", "5"], capsys)
    assert report.passed and code == 0 and doc["passed"]
    mine = report.to_dict()
    assert mine["achieved"] == doc["achieved"] and mine["promise"] == doc["promise"]
    assert mine["check"]["min_margin"] == doc["check"]["min_margin"]
    assert mine["check"]["n_queries"] == doc["check"]["n_queries"] == 64 * 3
    text = repr(report)
    assert "PASS" in text and "G1" in text and "0.6667" in text


def test_check_multi_hop_defaults_to_two_hops_and_matches_the_command_line(capsys):
    report = gr.check("path-blocks", N=8, R=2)
    code, doc = cli_json(["check", "multi-hop", "--construction", "path-blocks", "--N", "8", "--R", "2",
                          "--k", "2"], capsys)
    assert report.to_dict()["params"]["k"] == 2 and report.passed and doc["passed"]
    assert report.to_dict()["check"]["n_queries"] == doc["check"]["n_queries"] == 8 * 2**2


def test_a_failing_check_says_so():
    # the constructions guard their own conditions, so break a real report: one of its checks fails
    report = gr.check("geometric", N=64, R=3)
    report.report.extra_checks["planted failure"] = False
    assert not report.passed and not report.to_dict()["passed"] and "FAIL" in repr(report)


def test_check_refuses_bad_input_with_input_error():
    with pytest.raises(InputError, match="does not take"):
        gr.check("geometric", N=64, R=3, attention="hard")
    with pytest.raises(InputError):
        gr.check("geometric", N=0, R=3)
    with pytest.raises(InputError):
        gr.check("no-such-construction")
    with pytest.raises(InputError, match="task has N"):
        gr.check("geometric", N=64, R=3, task=gr.task(32, 3))


@pytest.mark.parametrize("python, flags", [({"lam": 2}, ["--lam", "2"]), ({"gate": 3}, ["--gate", "3"]),
                                           ({"lam": 1}, [])])
def test_an_int_for_a_real_option_certifies_the_object_the_command_line_certifies(python, flags, capsys):
    """``lam=2`` in Python is ``--lam 2`` (the float 2.0) on the command line: one object, one fingerprint
    (an int was recorded and hashed as 2, the command line's 2.0 as 2.0: two fingerprints)."""
    cert = gr.certify("geometric", N=16, R=2, **python)
    code, doc = cli_json(["certify", "single-hop", "--N", "16", "--R", "2", *flags], capsys)
    assert code == 0 and cert.to_dict()["fingerprint"] == doc["fingerprint"]


def test_certify_takes_max_points_as_the_command_line_does(capsys):
    """``max_points`` was refused as an option the construction does not take; it is certify's limit, as
    ``--max-points`` (the control: without it, CERTIFIED)."""
    cert = gr.certify("geometric", N=16, R=2, max_points=1)
    code, doc = cli_json(["certify", "single-hop", "--N", "16", "--R", "2", "--max-points", "1"], capsys)
    assert cert.verdict == doc["verdict"] == "UNKNOWN" and code == 4 and not cert.passed
    certified = gr.certify("geometric", N=16, R=2)
    assert certified.verdict == "CERTIFIED"
    # the object's line says "certified" only for a CERTIFIED verdict
    assert "object examined: the canonical family" in str(cert) and "certified object" not in str(cert)
    assert "certified object: the canonical family" in str(certified)


def test_certify_is_the_command_lines_certify(capsys):
    cert = gr.certify("geometric", N=16, R=2, integer=True)
    code, doc = cli_json(["certify", "single-hop", "--N", "16", "--R", "2", "--integer"], capsys)
    assert cert.verdict == doc["verdict"] == "CERTIFIED" and cert.passed and code == 0
    assert cert.to_dict()["min_margin_exact"] == doc["min_margin_exact"]
    assert "CERTIFIED" in repr(cert)
    with pytest.raises(InputError):
        gr.certify("geometric", N=16, R=2, attention="hard")


@pytest.mark.parametrize("python, argv", [
    ({}, []),  # integer where the construction has an integer scale: both say "G1 binary int"
    ({"integer": False}, ["--float"]),
    ({"lam": 2.0}, ["--lam", "2"]),  # a real constant asked for: float64 in both
    ({"codes": "sign"}, ["--codes", "sign"]),
])
def test_certify_defaults_are_the_command_lines(python, argv, capsys):
    # the same request gives the same certificate (its fingerprint, its name) from Python and the terminal
    cert = gr.certify("geometric", N=16, R=2, **python).to_dict()
    code, doc = cli_json(["certify", "single-hop", "--N", "16", "--R", "2", *argv], capsys)
    assert cert["fingerprint"] == doc["fingerprint"] and cert["name"] == doc["name"]
    assert cert["params"]["integer"] == doc["params"]["integer"] == (python.get("integer", True) and
                                                                     "lam" not in python)


def test_certify_multi_hop_is_the_command_lines_object(capsys):
    # the attention kind the family has is recorded whether it was asked for (the command line always asks)
    cert = gr.certify("path-blocks", N=8, R=2).to_dict()
    code, doc = cli_json(["certify", "multi-hop", "--N", "8", "--R", "2"], capsys)
    assert cert["fingerprint"] == doc["fingerprint"] and cert["params"]["attention"] == "softmax"


@pytest.mark.parametrize("name, argv", [
    ("geometric", ["single-hop", "--N", "16", "--R", "2"]),
    ("path-blocks", ["multi-hop", "--N", "8", "--R", "2"]),
])
def test_check_parameters_are_the_command_lines(name, argv, capsys):
    mine = gr.check(name, N=16 if name == "geometric" else 8, R=2).to_dict()
    code, doc = cli_json(["check", *argv], capsys)
    theirs = doc["reports"][0]
    assert mine["name"] == theirs["name"]
    assert mine["params"] == {key: value for key, value in theirs["params"].items() if key != "save"}


# ------------------------------------------------------------------------------------------ the tables


def test_lower_bounds_are_the_command_lines_rows(capsys):
    table = gr.lower_bounds(N=4096, R=16, k=[1, 2])
    code, doc = cli_json(["bounds", "--N", "4096", "--R", "16", "--k", "1", "2"], capsys)
    assert table.rows == json.loads(json.dumps(doc["rows"]))  # JSON turns tuples to lists
    assert table.passed and "total information" in repr(table)
    with pytest.raises(InputError):
        gr.lower_bounds(N=0)
    with pytest.raises(TypeError, match="takes no option"):
        gr.lower_bounds(entities=4)


def test_lower_bounds_take_one_construction_name_and_needed_bits_as_a_dict():
    """A str is one name (it was iterated: "no construction 'g'"); ``needed={"G1": 2}`` is the command
    line's ``--needed G1=2`` (it was refused)."""
    one = gr.lower_bounds(N=64, R=3, k=1, constructions="geometric")
    assert [row["construction"] for row in one.rows] == ["G1"]
    as_dict = gr.lower_bounds(N=64, R=3, k=1, gaps=True, needed={"G1": 3})
    as_words = gr.lower_bounds(N=64, R=3, k=1, gaps=True, needed=["G1=3"])
    assert as_dict.rows == as_words.rows and as_dict["params"]["needed"]["G1"] == 3


def test_counts_agree_with_an_independent_enumeration():
    from itertools import permutations, product

    table = gr.counts(N=3, R=2, k=2)
    perms = list(permutations(range(3)))
    tables_1 = {t for t in product(perms, repeat=2)}
    two_hop = {tuple(tuple(b[a[s]] for s in range(3)) for a in t for b in t)
               for t in product(perms, repeat=2)}
    assert table.passed
    assert table.rows[0]["F_k"] == len(tables_1) == 36
    assert table.rows[1]["F_k"] == len(two_hop)
    with pytest.raises(InputError, match="limit"):
        gr.counts(N=9, R=3, k=1)


def test_a_tables_text_is_the_table_the_terminal_prints(capsys):
    """``gr.counts(...).text`` was empty (the text format is rendered by the command, not stored); it is the
    fixed-width table ``georecall count`` prints, and a Markdown table stays the stored one (the control)."""
    table = gr.counts(N=3, R=2, k=2)
    assert main(["count", "--N", "3", "--R", "2", "--k", "2"]) == 0
    printed = capsys.readouterr().out
    assert table.text and "|F_k|" in table.text
    assert table.text.splitlines()[1:] == printed.strip().splitlines()[1:]  # the first line has the time
    markdown = gr.counts(N=3, R=2, k=2, format="md")
    assert markdown.text == markdown["text"] and markdown.text.startswith("|")


# ------------------------------------------------------------------------------- train, probe, files


def test_train_returns_the_model_the_command_line_writes(tmp_path, capsys):
    result = gr.train(N=8, R=2, d=16, steps=300, seed=1)
    path = tmp_path / "t.npz"
    code, doc = cli_json(["train", "--N", "8", "--R", "2", "--d", "16", "--steps", "300", "--seed", "1",
                          "--out", str(path)], capsys)
    assert result.reached == doc["reached"]
    assert result["steps_run"] == doc["steps_run"]
    stored = gr.load(str(path))
    for name, array in result.model.arrays().items():
        assert np.array_equal(array, stored.arrays()[name]), name
    with pytest.raises(TypeError, match="takes no option"):
        gr.train(N=8, R=2, width=16)
    with pytest.raises(InputError):
        gr.train(N=8, R=2, d=0)


def test_save_load_evaluate_round_trip(tmp_path, capsys):
    task = gr.task(16, 2)
    model = gr.build("geometric", task).model
    path = str(tmp_path / "g1.npz")
    gr.save(model, path, task=task)
    result = gr.evaluate(path)
    code, doc = cli_json(["eval", path], capsys)
    assert result["accuracy"] == doc["accuracy"] == 1.0
    assert result["min_margin"] == doc["min_margin"]
    assert gr.evaluate(model, task=task)["min_margin"] == doc["min_margin"]
    with pytest.raises(InputError, match="needs the task"):
        gr.evaluate(model)
    with pytest.raises(InputError):
        gr.evaluate(str(tmp_path / "missing.npz"))
    with pytest.raises(InputError, match="takes a Model"):
        gr.evaluate([1, 2], task=task)


def test_load_and_evaluate_say_the_same_of_a_missing_or_wrong_path(tmp_path):
    for path, message in [(tmp_path / "missing.npz", "no such model file"),
                          (tmp_path, "is a directory, not a file")]:
        refusals = []
        for verb in (gr.load, gr.evaluate):
            with pytest.raises(InputError, match=message) as info:
                verb(str(path))
            refusals.append(str(info.value))
        assert refusals[0] == refusals[1]


@pytest.mark.parametrize("call, message", [
    (lambda: gr.lower_bounds(N=0), "N must be a whole number >= 1, got 0"),
    (lambda: gr.train(N=64, R=2, d=0), "d must be a whole number >= 1, got 0"),
    (lambda: gr.train(N=8, R=2, batch_size=0), "batch_size must be a whole number >= 1, got 0"),
    (lambda: gr.train(N=8, R=2, optimizer="x"), "optimizer must be one of 'adam', 'sgd', got 'x'"),
    (lambda: gr.train(N=[8, 9], R=2), "N takes one value, got [8, 9]"),
    (lambda: gr.counts(N=3, R=1, k=1, json=True, format="text"),
     'json and format="text" do not combine: give one of them'),
])
def test_a_refusal_in_python_names_the_python_parameter(call, message):
    with pytest.raises(InputError) as info:
        call()
    assert str(info.value) == message


@pytest.mark.parametrize("verb", ["check", "certify", "build"])
def test_a_construction_refusal_in_python_names_options_by_keyword(verb, capsys):
    call = {"check": lambda: gr.check("geometric", N=8, R=2, beta=3.0),
            "certify": lambda: gr.certify("geometric", N=8, R=2, beta=3.0),
            "build": lambda: gr.build("geometric", gr.task(8, 2), beta=3.0)}[verb]
    with pytest.raises(InputError) as info:
        call()
    message = str(info.value)
    assert "does not take softmax inverse temperature β (beta)" in message and "code kind (codes)" in message
    assert "--" not in message
    # the terminal names the same refusal by its flags
    assert main(["check", "single-hop", "--construction", "geometric", "--N", "8", "--R", "2",
                 "--beta", "3"]) == 2
    assert "(--beta)" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [gr.check, gr.certify])
def test_gaussian_codes_in_integer_mode_are_refused_in_the_command_lines_words(verb):
    """Python reached the codebook's own refusal, which advised an option gr.check and gr.certify do not
    have ("use scale='unit'"); one validation now refuses it for both, in the terminal's words."""
    with pytest.raises(InputError) as info:
        verb("geometric", N=16, R=2, codes="gaussian", integer=True)
    assert str(info.value) == "gaussian codes have no integer scale: integer needs binary or sign codes"


def test_python_words_keeps_the_error_class_and_traceback():
    from georecall.api_command import python_words
    from georecall.errors import ConditionError

    def deep():
        raise ConditionError("codes too short: raise --D to 5")

    with pytest.raises(ConditionError) as info:
        with python_words():
            deep()
    assert str(info.value) == "codes too short: raise D to 5"
    assert info.traceback[-1].name == "deep"  # the raising frame is kept


def test_the_command_line_keeps_its_own_words(capsys):
    assert main(["bounds", "--N", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "georecall bounds: argument --N: expected a whole number >= 1, got 0"
    assert main(["count", "--N", "3", "--R", "1", "--k", "1", "--json", "--format", "text"]) == 2
    assert "--json and --format text do not combine" in capsys.readouterr().err


def test_evaluate_sees_a_broken_model(tmp_path):
    task = gr.task(16, 2)
    model = gr.build("geometric", task).model
    other = gr.task(16, 2, seed=1)  # the wrong task: the stored facts are not its facts
    result = gr.evaluate(model, task=other)
    assert result["accuracy"] < 1.0


def test_probe_is_the_command_lines_probe(tmp_path, capsys):
    task = gr.task(32, 2)
    path = str(tmp_path / "g1.npz")
    gr.save(gr.build("geometric", task).model, path, task=task)
    result = gr.probe(path, subjects=8)
    code, doc = cli_json(["probe", path, "--subjects", "8"], capsys)
    assert result["readout"] == json.loads(json.dumps(doc["readout"]))
    assert result["accuracy"] == doc["accuracy"]
    with pytest.raises(InputError, match="holdout"):
        gr.probe(path, holdout=1.5)


def test_export_names_the_install_line_from_a_clone_when_the_extra_is_missing(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "onnx" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install '\.\[export\]'"):
        gr.export("/nonexistent/out", to="onnx")
    with pytest.raises(InputError, match="to must be one of"):
        gr.export("/nonexistent/out", to="tensorflow")


def test_the_readme_python_example_runs_verbatim(tmp_path):
    import pathlib
    import re

    readme = (pathlib.Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## In Python"):]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    assert code.count("\n") <= 12 and "import georecall as gr" in code
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "PASS" in out.stdout and "CERTIFIED" in out.stdout and "True 1.0" in out.stdout
