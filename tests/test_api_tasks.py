"""The public API's keywords and tasks: each keyword a verb's refusal lists is taken; ``task=`` means the same
in ``gr.evaluate`` and ``gr.probe`` (a Task or a table's path, for a model given as a path or as an object,
another size refused as the command line refuses it); a trained model's task is its seed's; the advice a
Python caller reads is Python's."""

import argparse
import json

import pytest

import georecall as gr
from georecall.cli import main
from georecall.errors import InputError


def cli_json(argv, capsys):
    code = main([*argv, "--json"])
    out, _ = capsys.readouterr()
    return code, json.loads(out)


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
