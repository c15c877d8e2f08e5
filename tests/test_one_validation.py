"""What a construction is asked for (its options, hops and variants) is checked in one place,
``verify.checking.run.validate_request``, with one wording: check, certify, precision and export all refuse
the same request with the same line."""

from __future__ import annotations

import dataclasses

import pytest

from georecall.api_command import python_words
from georecall.constructions import registry
from georecall.errors import InputError
from georecall.verify.checking.certify import certify
from georecall.verify.checking.run import precision_scan, run_check, validate_request


def _refusal(call) -> str:
    with pytest.raises(InputError) as refused:
        call()
    return str(refused.value)


def test_check_and_certify_refuse_an_option_a_variant_and_hops_with_one_line():
    g1 = registry.get("G1")
    for asked in ({"options": {"beta": 2.0}}, {"symmetric": True, "options": {}}, {"k": 2}):
        k = asked.get("k", 1)
        rest = {key: value for key, value in asked.items() if key != "k"}
        if g1.variants >= {"symmetric"} and rest.get("symmetric"):
            spec = dataclasses.replace(g1, id="G1V", name="no-variants", variants=frozenset())
        else:
            spec = g1
        by_check = _refusal(lambda: run_check(spec, 16, 2, k, **rest))
        by_certify = _refusal(lambda: certify(spec, 16, 2, k, **rest))
        assert by_check == by_certify == _refusal(lambda: validate_request(spec, k=k, **rest))


def test_precision_refuses_codes_a_spec_does_not_take_as_check_does():
    g1 = registry.get("G1")
    own_codes = dataclasses.replace(g1, id="G1C", name="own-codes", common=frozenset({"lam"}))
    line = _refusal(lambda: validate_request(own_codes, codes="sign"))
    assert line.startswith("G1C (own-codes) does not take code kind (--codes); it takes: ")
    assert _refusal(lambda: precision_scan(own_codes, 16, 2, codes="sign")) == line
    assert _refusal(lambda: run_check(own_codes, 16, 2, codes="sign")) == line


def test_a_request_within_the_spec_passes_with_lambdas_default():
    assert validate_request(registry.get("G2"), options={"beta": None, "gate": 3.0}, k=2) == {
        "gate": 3.0, "lam": 1.0}


def test_the_python_api_build_refuses_with_the_same_line_as_check():
    import georecall as gr

    task = gr.task(16, 2)
    g1 = registry.get("G1")
    for asked in ({"options": {"beta": 2.0}}, {"k": 2}):
        k = asked.get("k", 1)
        options = asked.get("options", {})
        by_check = _refusal(lambda: run_check(g1, 16, 2, k, options=options))
        by_build = _refusal(lambda: gr.build("geometric", task, k=k, **options))
        # the one validation's line, in Python's words (options named by keyword, as gr.check names them)
        assert by_build == _refusal(lambda: gr.check("geometric", N=16, R=2, k=k, **options))
        with pytest.raises(InputError) as info, python_words():
            run_check(g1, 16, 2, k, options=options)
        assert by_build == str(info.value) and (by_build == by_check) == ("--" not in by_check)
