"""The typed parameters (georecall.cli.params): each command's dataclass declares exactly its parser's
options, the conversion refuses any drift, the budget is built once, and each option is validated once."""

import argparse
import dataclasses
import inspect
import json
import typing

import pytest

from georecall.cli import commands, main, params
from georecall.cli.parser import SHARED, build_parser
from georecall.errors import InputError
from georecall.memory import GIB, Budget


def _commands(parser) -> dict[str, argparse.ArgumentParser]:
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                command = sub.get_default("command")
                if command is not None:
                    found[command] = sub
                found.update(_commands(sub))
    return found


def _dests(sub: argparse.ArgumentParser) -> set[str]:
    """What the sub-command's parser sets: every action's dest but --help's, and its set_defaults."""
    return {a.dest for a in sub._actions if not isinstance(a, argparse._HelpAction)} | set(sub._defaults)


PARSERS = _commands(build_parser())


def test_every_command_has_parameters_a_function_and_a_row_of_shared_options():
    assert set(PARSERS) == set(params.PARAMS) == set(commands.COMMANDS) == set(SHARED)


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_the_dataclass_fields_are_the_parsers_dests(command):
    assert params.option_names(params.PARAMS[command]) == _dests(PARSERS[command]) - params.STRUCTURE


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_each_command_is_annotated_with_its_parameters(command):
    """What mypy checks inside each command is the class main builds for it."""
    function = commands.COMMANDS[command]
    hint = typing.get_type_hints(function)[next(iter(inspect.signature(function).parameters))]
    accepted = typing.get_args(hint) or (hint,)
    assert params.PARAMS[command] in accepted, (command, hint)


@pytest.mark.parametrize("command", sorted(PARSERS))
def test_the_shared_options_are_the_mixins(command):
    mixins = {"seed": params.Seeded, "json": params.Json, "quiet": params.Quiet, "max-gib": params.Budgeted}
    has = {name for name, mixin in mixins.items() if issubclass(params.PARAMS[command], mixin)}
    assert has == set(SHARED[command])


def _namespace(argv):
    return build_parser().parse_args(argv)


def test_from_namespace_refuses_a_missing_or_an_undeclared_field():
    args = _namespace(["count", "--N", "3"])
    assert params.build(args).N == 3
    extra = argparse.Namespace(**vars(args), surprise=1)
    with pytest.raises(TypeError, match=r"not declared \['surprise'\]"):
        params.build(extra)
    missing = argparse.Namespace(**{k: v for k, v in vars(args).items() if k != "k"})
    with pytest.raises(TypeError, match=r"missing \['k'\]"):
        params.build(missing)
    with pytest.raises(TypeError, match="missing"):  # the wrong class for the namespace
        params.from_namespace(params.TradeoffParams, args)


def test_a_drifted_parser_is_an_internal_error_not_bad_input(monkeypatch, capsys):
    monkeypatch.setitem(params.PARAMS, "count", params.TradeoffParams)
    assert main(["count", "--N", "3", "--R", "2", "--k", "1"]) == 3
    assert "does not match the parser of 'count'" in capsys.readouterr().err


def test_the_parameters_are_frozen():
    p = params.build(_namespace(["count"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.N = 4  # type: ignore[misc]


def test_the_budget_is_built_once_from_max_gib():
    p = params.build(_namespace(["count", "--max-gib", "0.5"]))
    assert p.budget == Budget(GIB // 2) and p.max_gib == 0.5
    default = params.build(_namespace(["tradeoff"]))  # no --max-gib offered: the machine's default budget
    assert default.budget == Budget.from_gib(None)


def test_a_small_budget_refuses_before_any_work(capsys):
    code = main(["count", "--N", "5", "--R", "3", "--k", "2", "--max-gib", "0.000001", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 2 and "more than the budget" in doc["error"]


@pytest.mark.parametrize("argv, progress", [
    (["count"], True), (["count", "--quiet"], False), (["count", "--json"], False),
    (["tradeoff"], False),  # no --quiet offered: tradeoff prints no progress
    (["precision"], False),
])
def test_progress_follows_quiet_and_json(argv, progress):
    assert params.build(_namespace(argv)).progress is progress


@pytest.mark.parametrize("value, message", [
    ("zzz", "--scheduler must be local:W"), ("local:0", "1 <= W <= 1024"),
    ("local:2000", "1 <= W <= 1024"),
    ("tcp://h:0", "port must be 1..65535"), ("tcp://h:99999", "port must be 1..65535"),
    ("tcp://h", "must be"),
])
def test_the_scheduler_is_validated_once_when_the_parameters_are_built(value, message):
    for argv in (["sweep", "threshold"], ["study", "mechanism"]):
        with pytest.raises(InputError, match=message):
            params.build(_namespace([*argv, "--scheduler", value]))
    params.check_scheduler("local:2")
    params.check_scheduler("tcp://127.0.0.1:8786")
    assert params.build(_namespace(["sweep", "threshold", "--scheduler", "local:3"])).local_workers == 3


def test_the_commands_no_longer_validate_what_the_parser_and_the_parameters_did():
    """One place per check: the scheduler regex lives in params.py (the library's parse_scheduler is its own
    guard for API users), the --bits/--integer pair in parser.CONFLICTS."""
    source = inspect.getsource(commands)
    assert "_SCHEDULER" not in source and "getattr(p," not in source
    assert "quantized weights are not integers" not in source


def test_bits_with_integer_is_refused_by_the_parser_in_one_line(capsys):
    code = main(["check", "single-hop", "--N", "16", "--R", "2", "--bits", "4", "--integer"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "georecall check single-hop: --bits 4 and --integer do not combine: give one of them"]
