"""The public API's keywords and tasks: each keyword a verb's refusal lists is taken; ``task=`` means the same
in ``gr.evaluate`` and ``gr.probe`` (a Task or a table's path, for a model given as a path or as an object,
another size refused as the command line refuses it); a trained model's task is its seed's; the advice a
Python caller reads is Python's."""

import argparse
import importlib.util
import inspect
import json
import re

import numpy as np
import pytest

import georecall as gr
from georecall.cli import main
from georecall.errors import InputError


def cli_json(argv, capsys):
    code = main([*argv, "--json"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


# --------------------------------------------------------------- every keyword a refusal lists is taken


VERBS = {  # verb: (the module whose run_command it calls, a call with the given keywords)
    "train": ("georecall.api_training", lambda kw: gr.train(**kw)),
    "probe": ("georecall.api_training", lambda kw: gr.probe("m.npz", **kw)),
    "evaluate": ("georecall.api_models", lambda kw: gr.evaluate("m.npz", **kw)),
    "export": ("georecall.api_models", lambda kw: gr.export("out", **kw)),
    "counts": ("georecall.api_tables", lambda kw: gr.counts(**kw)),
    "lower_bounds": ("georecall.api_tables", lambda kw: gr.lower_bounds(**kw)),
}


class Reached(Exception):
    """Raised by the stand-in for run_command: the call reached the command with these options."""


def listed_keywords(verb):
    """The keywords the verb's refusal of an unknown one says it takes."""
    with pytest.raises(TypeError, match="takes no option foo; it takes ") as info:
        VERBS[verb][1]({"foo": 1})
    return str(info.value).split("; it takes ")[1].split(", ")


@pytest.mark.parametrize("verb", sorted(VERBS))
def test_every_keyword_a_refusal_lists_reaches_the_command(verb, monkeypatch):
    module, call = VERBS[verb]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())  # export: the extra "there"
    listed = listed_keywords(verb)
    own = set(inspect.signature(getattr(gr, verb)).parameters)
    given = {}

    def stand_in(command, **options):
        given.update(options)
        raise Reached(command)

    monkeypatch.setattr(importlib.import_module(module), "run_command", stand_in)
    for name in sorted(set(listed) - own):  # the verb's own parameters are Python's to refuse twice
        given.clear()
        with pytest.raises(Reached):
            call({name: None})
        assert name in given, (verb, name)


def test_train_takes_quiet_as_the_command_line_names_it():
    quiet = gr.train(N=8, R=2, d=16, steps=300, seed=0, quiet=True)
    default = gr.train(N=8, R=2, d=16, steps=300, seed=0)
    assert quiet.reached and quiet["steps_run"] == default["steps_run"]
    for name, array in default.model.arrays().items():
        assert np.array_equal(array, quiet.model.arrays()[name]), name
    assert "quiet" in listed_keywords("train")
    with pytest.raises(InputError, match="progress=True and quiet=True contradict"):
        gr.train(N=8, R=2, d=16, steps=2, progress=True, quiet=True)


def test_train_with_quiet_false_shows_progress_as_progress_true_does(capsys):
    gr.train(N=8, R=2, d=16, steps=3, quiet=False, log_every=1)
    assert "step" in capsys.readouterr().err
    gr.train(N=8, R=2, d=16, steps=3, quiet=None, log_every=1)  # None: the default, no progress
    assert capsys.readouterr().err == ""


def test_lower_bounds_takes_construction_as_the_command_line_names_it():
    one = gr.lower_bounds(N=64, R=2, k=1, construction=["geometric"]).rows
    assert [row["construction"] for row in one] == ["G1"]
    assert gr.lower_bounds(N=64, R=2, k=1, constructions=["geometric"]).rows == one
    assert gr.lower_bounds(N=64, R=2, k=1, constructions="geometric").rows == one  # one name, not letters
    with pytest.raises(InputError, match="give one of them"):
        gr.lower_bounds(N=64, R=2, k=1, constructions=["geometric"], construction=["A1"])


# ------------------------------------------------------------------------ task= in evaluate and probe


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A G1 model on THE task of (32, 2) in a file without its task and one with it, the table, a table of
    another size, and the Model."""
    folder = tmp_path_factory.mktemp("tasks")
    task = gr.task(32, 2)
    model = gr.build("geometric", task).model
    paths = {"bare": gr.save(model, str(folder / "bare.npz")),
             "stored": gr.save(model, str(folder / "stored.npz"), task=task),
             "table": str(folder / "t.npy"), "small": str(folder / "t16.npy")}
    np.save(paths["table"], task.table)
    np.save(paths["small"], gr.task(16, 2).table)
    return paths, task, model


def test_evaluate_takes_a_table_path_beside_a_model_file_as_eval_task_does(files, capsys):
    paths, task, model = files
    result = gr.evaluate(paths["bare"], task=paths["table"])  # was AttributeError: 'str' has no 'table'
    code, doc = cli_json(["eval", paths["bare"], "--task", paths["table"]], capsys)
    assert result["accuracy"] == doc["accuracy"] == 1.0 and result["min_margin"] == doc["min_margin"]
    assert gr.evaluate(model, task=paths["table"])["min_margin"] == doc["min_margin"]  # a Model object too
    assert gr.evaluate(paths["bare"], task=task)["min_margin"] == doc["min_margin"]


def test_probe_takes_a_task_beside_a_model_file_as_probe_task_does(files, capsys):
    paths, task, model = files
    code, doc = cli_json(["probe", paths["bare"], "--task", paths["table"], "--subjects", "8"], capsys)
    readout = json.loads(json.dumps(doc["readout"]))
    for given in (paths["table"], task):
        result = gr.probe(paths["bare"], task=given, subjects=8)
        assert result["readout"] == readout and result["accuracy"] == doc["accuracy"]
    assert gr.probe(model, task=paths["table"], subjects=8)["readout"] == readout


@pytest.mark.parametrize("verb", ["evaluate", "probe"])
def test_a_task_of_another_size_beside_a_model_file_is_refused_as_the_command_line_does(verb, files, capsys):
    paths, task, model = files
    call = {"evaluate": lambda **kw: gr.evaluate(paths["stored"], **kw),
            "probe": lambda **kw: gr.probe(paths["stored"], subjects=8, **kw)}[verb]
    assert call(task=task).passed  # the control: its own task, given beside the file
    command = {"evaluate": "eval", "probe": "probe"}[verb]
    assert main([command, paths["stored"], "--task", paths["small"]]) == 2
    refusal = capsys.readouterr().err.strip().split("error: ", 1)[1]
    for other in (gr.task(16, 2), paths["small"]):  # gr.probe ignored it: 100% on the file's own task
        with pytest.raises(InputError) as info:
            call(task=other)
        assert str(info.value) == refusal


@pytest.mark.parametrize("verb", ["evaluate", "probe"])
def test_a_model_file_without_a_task_is_told_the_python_way(verb, files, capsys):
    paths, _, _ = files
    call = {"evaluate": gr.evaluate, "probe": gr.probe}[verb]
    with pytest.raises(InputError) as info:
        call(paths["bare"])
    message = str(info.value)
    assert message == (f"{paths['bare']!r} stores no task table: pass task=gr.task(N, R, seed=S) with the "
                       'seed it was built or trained with, or task="TABLE.npy"')
    # the terminal keeps its own words
    assert main([{"evaluate": "eval", "probe": "probe"}[verb], paths["bare"]]) == 2
    assert "pass --task TABLE.npy" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["evaluate", "probe"])
def test_a_model_object_without_a_task_is_told_to_give_its_seed(verb, files):
    _, _, model = files
    call = {"evaluate": gr.evaluate, "probe": gr.probe}[verb]
    with pytest.raises(InputError) as info:
        call(model)
    message = str(info.value)
    assert message.startswith(f"{verb} needs the task of a Model object (N = 32, R = 2): ")
    assert "task=gr.task(32, 2, seed=S) with the seed it was built or trained with" in message
    assert "gr.task(N, R))" not in message and "--" not in message


@pytest.mark.parametrize("verb", ["evaluate", "probe"])
@pytest.mark.parametrize("value, got", [(3, "int"), (np.zeros((2, 32), dtype=int), "ndarray")])
def test_a_task_of_another_type_is_named(verb, value, got, files):
    paths, _, model = files
    call = {"evaluate": gr.evaluate, "probe": gr.probe}[verb]
    for target in (paths["stored"], model):
        with pytest.raises(InputError) as info:
            call(target, task=value)
        assert str(info.value) == (f"{verb} takes task=gr.task(N, R, seed=S) or a task table's path "
                                   f'(task="TABLE.npy"), got {got}')


# ------------------------------------------------------------------------------ a trained model's task


def test_a_train_result_holds_the_task_of_its_seed(tmp_path):
    path = str(tmp_path / "m4.npz")
    result = gr.train(N=8, R=2, d=16, steps=300, seed=1, out=path)
    assert result.reached
    assert result.task.table.tolist() == gr.task(8, 2, seed=1).table.tolist()
    assert result.task.table.tolist() != gr.task(8, 2).table.tolist()  # the seed-0 task is another one
    assert gr.evaluate(result.model, task=result.task)["accuracy"] == 1.0
    assert gr.evaluate(path)["accuracy"] == 1.0  # the file stores it
    loaded = gr.load(path)
    with pytest.raises(InputError, match=r"gr\.task\(8, 2, seed=S\) with the seed it was built or trained"):
        gr.evaluate(loaded)
    assert gr.evaluate(loaded, task=gr.task(8, 2, seed=1))["accuracy"] == 1.0
    # the task the old advice led to is another one: evaluated, it is not this model's task
    assert gr.evaluate(loaded, task=gr.task(8, 2))["accuracy"] < 1.0


# ------------------------------------------------------------------------------- the probe's document


def named_keys(doc: str) -> set[str]:
    """The document keys a docstring's Returns section names as ``result["key"]``."""
    section = doc.split("Returns\n")[1].split("Raises\n")[0]
    return set(re.findall(r'result\["(\w+)"\]', section))


def test_the_probe_docstring_names_keys_its_document_has(files):
    paths, _, _ = files
    keys = named_keys(gr.probe.__doc__)
    assert {"readout", "intervention", "selectivity"} <= keys
    document = gr.probe(paths["stored"], subjects=8)
    assert keys <= set(document)
    # the check can fail: the key the docstring named before is not one
    assert "probes" not in document
    planted = 'Returns\n    result["readout"], result["probes"]\nRaises\n'
    assert named_keys(planted) - set(document) == {"probes"}


# ------------------------------------------------------------------- a flag and its value, as Python says


def test_a_k_hop_train_without_softmax_is_told_attention_softmax(capsys):
    for options in ({"k": 2}, {"cot": True}):
        with pytest.raises(InputError) as info:
            gr.train(N=16, R=2, d=8, **options)
        assert str(info.value).endswith('add attention="softmax"'), info.value
    assert main(["train", "--N", "16", "--R", "2", "--d", "8", "--k", "2"]) == 2
    assert capsys.readouterr().err.strip().endswith("add --attention softmax")  # the terminal's words


def words_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument("--attention", choices=("uniform", "softmax"))
    parser.add_argument("--k", type=int, choices=(1, 2, 3))
    parser.add_argument("--seed", type=int)
    parser.add_argument("--task")
    parser.add_argument("--construction")
    parser.add_argument("--quiet", action="store_true")
    return parser


@pytest.mark.parametrize("message, python", [
    ("add --attention softmax", 'add attention="softmax"'),
    ("add --attention softmax.", 'add attention="softmax".'),
    ("--attention uniform, --k 2 and --seed 3", 'attention="uniform", k=2 and seed 3'),
    ("pass --task TABLE.npy (R × N)", 'pass task="TABLE.npy" (R × N)'),
    ("--attention cosine is no choice", "attention cosine is no choice"),
    ("--construction FILE.py:ATTR does not load", "construction FILE.py:ATTR does not load"),
    ("--quiet softmax", "quiet softmax"),
])
def test_a_flag_with_a_literal_value_is_said_as_python_passes_it(message, python):
    from georecall.api_command import python_words

    with pytest.raises(InputError) as info:
        with python_words(words_parser()._actions):
            raise InputError(message)
    assert str(info.value) == python
