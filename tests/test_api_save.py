"""``gr.save`` and the verbs that take a model: a folder, a missing folder, a header fact that is not strict
JSON, a ``TrainResult`` or another object where a model is expected, and a task table whose size is not the
model's, each refused in one line that names what is wrong (no file written beside the request)."""

import json
import os
import zipfile

import numpy as np
import pytest

import georecall as gr
from georecall.cli import main
from georecall.constructions.storage import save_model
from georecall.errors import InputError


@pytest.fixture(scope="module")
def built():
    task = gr.task(16, 2)
    return gr.build("geometric", task).model, task


def test_save_refuses_a_folder_as_the_command_line_does(built, tmp_path, capsys):
    model, task = built
    folder = tmp_path / "r2"
    folder.mkdir()
    with pytest.raises(InputError) as info:
        gr.save(model, str(folder), task=task)
    assert str(info.value) == f"model file {str(folder)!r} is a directory; give a file name"
    assert sorted(os.listdir(tmp_path)) == ["r2"]  # no r2.npz beside the folder
    assert main(["check", "single-hop", "--N", "16", "--R", "2", "--save", str(folder)]) == 2
    assert str(info.value) in capsys.readouterr().err


def test_save_into_a_missing_folder_names_the_folder_as_train_does(built, tmp_path):
    model, task = built
    target = tmp_path / "nodir" / "x.npz"
    with pytest.raises(InputError) as info:
        gr.save(model, str(target), task=task)
    folder = str(tmp_path / "nodir")
    assert str(info.value) == f"model file {str(target)!r}: directory {folder!r} does not exist"
    with pytest.raises(InputError) as trained:
        gr.train(N=8, R=2, d=16, steps=1, out=str(target))
    assert str(trained.value) == str(info.value)


@pytest.mark.parametrize("value, what", [(object(), "object"), (float("nan"), "nan"), (float("inf"), "inf"),
                                         ({"inner": {1, 2}}, "set")])
def test_save_refuses_a_record_that_is_not_strict_json(built, tmp_path, value, what):
    model, task = built
    path = tmp_path / "m.npz"
    with pytest.raises(InputError, match=r"record field 'foo' .*not strict JSON") as info:
        gr.save(model, str(path), task=task, seed=1, foo=value)
    assert what in str(info.value) or type(value).__name__ in str(info.value)
    assert not path.exists()


def test_save_writes_a_strict_json_record(built, tmp_path):
    model, task = built
    path = gr.save(model, str(tmp_path / "m"), task=task, seed=3, construction="G1", notes=[1.5, None, "x"])
    assert path == str(tmp_path / "m.npz")
    with zipfile.ZipFile(path) as archive:
        header = np.load(archive.open("__header__.npy"), allow_pickle=False)
    record = json.loads(str(header), parse_constant=lambda name: pytest.fail(f"bare {name}"))["record"]
    assert record == {"N": 16, "R": 2, "seed": 3, "construction": "G1", "notes": [1.5, None, "x"]}


@pytest.fixture(scope="module")
def trained():
    return gr.train(N=8, R=2, d=16, steps=2, seed=0)


@pytest.mark.parametrize("verb", ["save", "evaluate", "probe"])
def test_a_train_result_where_a_model_is_expected_says_pass_result_model(verb, trained, tmp_path):
    calls = {"save": lambda m: gr.save(m, str(tmp_path / "m.npz")),
             "evaluate": lambda m: gr.evaluate(m), "probe": lambda m: gr.probe(m)}
    with pytest.raises(InputError) as info:
        calls[verb](trained)
    assert str(info.value).startswith(f"{verb} takes a Model")
    assert "got TrainResult: pass result.model" in str(info.value)
    assert not (tmp_path / "m.npz").exists()


@pytest.mark.parametrize("verb, value, takes", [
    ("evaluate", 123, "a Model or a model file's path, got int"),
    ("probe", None, "a Model or a model file's path, got NoneType"),
    ("save", "model.npz", "a Model, got str"),
])
def test_another_object_where_a_model_is_expected_names_its_type(verb, value, takes, tmp_path):
    calls = {"save": lambda m: gr.save(m, str(tmp_path / "m.npz")),
             "evaluate": lambda m: gr.evaluate(m), "probe": lambda m: gr.probe(m)}
    with pytest.raises(InputError) as info:
        calls[verb](value)
    assert str(info.value) == f"{verb} takes {takes}"


def test_a_task_table_of_another_size_is_named_by_its_size_not_its_values(tmp_path, capsys):
    task = gr.task(32, 2)
    model = gr.build("geometric", task).model
    path = save_model(model, str(tmp_path / "m.npz"), extra_arrays={"task_table": task.table[:, :16]})
    message = "the task table is R×N = 2×16; the model has N = 32, R = 2"
    with pytest.raises(InputError) as info:
        gr.evaluate(path)
    assert str(info.value) == message
    assert main(["eval", path]) == 2
    assert message in capsys.readouterr().err
    table_path = str(tmp_path / "task.npy")
    np.save(table_path, task.table[:1])  # a valid table of the wrong size: the eval's own message, as before
    assert main(["eval", str(tmp_path / "m.npz"), "--task", table_path]) == 2
    assert "its task N = 32, R = 1" in capsys.readouterr().err
