"""Builder options are declared once, in ``constructions.builder_options`` (``BuilderOption``): the command
line reads every kind, a spec's own declaration is checked when the spec is made, and a refusal names an
option from its declaration. ``tests/test_new_builtin.py`` shows a new option reaching the command line
end to end."""

import argparse
import re

import pytest

import georecall as gr
from georecall.cli import main
from georecall.cli.options import OPTION_TYPES
from georecall.cli.parser import build_parser
from georecall.constructions import registry
from georecall.constructions.builder_options import BUILDER_OPTIONS, OPTION_KINDS, BuilderOption
from georecall.constructions.g1 import G1_ENCODING, g1_family, g1_nominal_promise
from georecall.constructions.registry import ConstructionSpec, single_hop_family
from georecall.errors import InputError
from georecall.experiments import study_design
from georecall.verify.checking.run import validate_request


def _spec(**changes) -> ConstructionSpec:
    return ConstructionSpec("G1O", "geometric-options", "G1 with options of its own", None,
                            g1_nominal_promise, task_encoding=G1_ENCODING,
                            family=single_hop_family(g1_family, construction="G1O"), **changes)


def test_the_command_line_reads_every_kind_and_every_shared_option_declares_a_known_kind():
    assert set(OPTION_TYPES) == set(OPTION_KINDS)
    assert {option.kind for option in BUILDER_OPTIONS.values()} <= set(OPTION_KINDS)
    assert registry.COMMON_OPTIONS <= set(BUILDER_OPTIONS)
    for spec in registry.specs():  # every option a built-in takes is declared
        assert spec.accepts() <= set(BUILDER_OPTIONS) | {o.name for o in spec.own_options}, spec.id


def test_a_declaration_is_checked_when_made():
    with pytest.raises(InputError, match="kind must be one of"):
        BuilderOption("x", "number", "help")
    with pytest.raises(InputError, match="choices are given exactly for kind 'choice'"):
        BuilderOption("x", "choice", "help")
    with pytest.raises(InputError, match="Python identifier"):
        BuilderOption("x-y", "text", "help")
    with pytest.raises(InputError, match="may set help, metavar and default"):
        BuilderOption("x", "text", "help", per_command={"check single-hop": {"type": int}})
    assert BuilderOption("read_out", "text", "help").what == "read_out (--read-out)"


def test_a_specs_own_options_join_what_it_takes_and_never_redeclare_a_shared_one():
    own = BuilderOption("twist", "positive", "a twist", "twist t (--twist)")
    spec = _spec(options=frozenset({"gate"}), own_options=(own,))
    assert spec.options == {"gate", "twist"} and "twist" in spec.accepts()
    with pytest.raises(InputError, match="'gate' is declared in BUILDER_OPTIONS"):
        _spec(own_options=(BuilderOption("gate", "positive", "mine"),))
    with pytest.raises(InputError, match="declares an option twice"):
        _spec(own_options=(own, own))
    with pytest.raises(InputError, match="own_options are BuilderOption declarations"):
        _spec(own_options=("twist",))
    # a refusal names an option by its declaration: the spec's own, or a registered spec's
    with pytest.raises(InputError) as refused:  # its own, unregistered: named from the spec
        validate_request(_spec(common=frozenset({"lam"}), own_options=(own,)), codes="binary")
    assert str(refused.value) == ("G1O (geometric-options) does not take code kind (--codes); it takes: "
                                  "read-out scale λ (--lam), twist t (--twist)")
    with pytest.raises(InputError, match=r"G1 \(geometric\) does not take twist; it takes: "):
        validate_request(registry.get("G1"), options={"twist": 1.0})  # nothing registered declares it
    registry.register(spec)
    with pytest.raises(InputError) as refused:
        validate_request(registry.get("G1"), options={"twist": 1.0})
    assert "does not take twist t (--twist); it takes: " in str(refused.value)


def _python_only_hints() -> list[tuple[BuilderOption, str]]:
    """Every declared option whose refusal says it is offered in Python only, with what the hint says."""
    declared = [*BUILDER_OPTIONS.values(), *(o for spec in registry.specs() for o in spec.own_options)]
    return [(o, o.what.split("Python only: ", 1)[1]) for o in declared if "Python only: " in o.what]


def test_a_python_only_hint_names_what_works_from_gr(capsys):
    hints = _python_only_hints()
    assert hints  # gain, today
    for option, hint in hints:
        verbs = re.findall(r"gr\.(\w+)", hint)
        assert f"{option.name}=" in hint and "options=" not in hint and verbs, hint
        assert set(verbs) <= set(gr.__all__), hint
    # the refusal that shows it (a construction taking gain, asked for an option it lacks)
    assert main(["check", "single-hop", "--construction", "associative", "--beta", "0.001", "--N", "16",
                 "--R", "2"]) == 2
    err = capsys.readouterr().err
    assert "attention gain g (Python only: gain=g in gr.check, gr.certify, gr.build)" in err


def test_the_gain_hint_works_when_followed():
    # the hint followed as written, on every verb it names, and the refused form it used to give
    assert gr.check("geometric", N=16, R=2, gain=4).passed
    assert gr.certify("geometric", N=16, R=2, gain=4).passed
    task = gr.task(16, 2)
    assert gr.build("geometric", task, gain=4).model.d == gr.build("geometric", task).model.d
    with pytest.raises(InputError, match="does not take options"):
        gr.check("geometric", N=16, R=2, options={"gain": 4})


def test_study_mechanism_help_lists_every_declared_grid(capsys):
    with pytest.raises(SystemExit):
        main(["study", "mechanism", "--help"])
    assert "--grid NAME" in capsys.readouterr().out
    parser = build_parser()
    study = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["study"]
    kinds = next(a for a in study._actions if isinstance(a, argparse._SubParsersAction))
    mechanism = kinds.choices["mechanism"]
    grid = next(action for action in mechanism._actions if action.dest == "grid")
    listed = grid.help.split("a declared grid by name: ", 1)[1].split("; docs/study.md", 1)[0]
    assert re.sub(r" \([^)]*\)", "", listed).split(", ") == list(study_design.GRIDS)  # notes dropped
    assert "long" in study_design.GRIDS
