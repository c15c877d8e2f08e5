"""Adding a construction is one module + one registry entry: a throwaway construction registered here (no
other file touched) appears in ``check``, ``verify``'s construction and bits/bounds rows, ``bounds``,
``tradeoff`` and ``precision``; one registered without a bits claim is named as not covered, never
silently dropped."""

from __future__ import annotations

import dataclasses
import json

import pytest

from georecall.cli import main
from georecall.constructions import registry
from georecall.constructions.registry import BitsClaim, ConstructionSpec
from georecall.errors import InputError
from georecall.verify.sections import bounds_checks, suite

G1, G2 = registry.get("G1"), registry.get("G2")
SINGLE = ConstructionSpec(
    "T1", "throwaway-geometric", "a throwaway copy of G1 (test only)", G1.build, G1.nominal_promise,
    options=G1.options, variants=G1.variants, verify_cases=({"N": 64, "R": 2},), readout="code",
    bits=BitsClaim(64, 2, needed=2, table=2, per_parameter=1),
)
MULTI = ConstructionSpec(
    "T2", "throwaway-path-blocks", "a throwaway copy of G2 (test only)", G2.build, G2.nominal_promise,
    hops="multi", bound="tradeoff", options=G2.options, verify_cases=({"N": 64, "R": 2, "k": 2},),
    readout="code", bits=BitsClaim(64, 2, 2, needed=2, table=2),
)


@pytest.fixture
def only_throwaways(monkeypatch):
    """A registry holding just the two throwaways (the built-ins are restored after the test)."""
    monkeypatch.setattr(registry, "_REGISTRY", {})
    registry.register(SINGLE)
    registry.register(MULTI)


def run(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0  # --json prints no progress (and not every command has --quiet)
    return json.loads(capsys.readouterr().out)


def test_it_appears_in_check(only_throwaways, capsys):
    doc = run(capsys, "check", "single-hop", "--construction", "throwaway-geometric", "--N", "64", "--R", "2")
    assert doc["passed"] and doc["params"]["construction"] == "T1"
    doc = run(capsys, "check", "multi-hop", "--construction", "throwaway-path-blocks",
              "--N", "64", "--R", "2", "--k", "2")
    assert doc["passed"]


def test_it_appears_in_the_verify_rows(only_throwaways):
    rows = suite.section_constructions("single") + suite.section_constructions("multi")
    assert [r.name.split()[0] for r in rows] == ["T1", "T2"] and all(r.passed for r in rows)
    checks, records, instances = bounds_checks.precision_checks(0)
    assert set(records) == {"T1", "T2"} and records["T1"]["smallest_exact_bits"] == 2
    # Binary-code G1 and G2 already lie on a 2-bit grid, so with only them registered the row's own guard
    # (quantization must change at least one construction) is the one check that fails.
    assert [c for c, ok in checks.items() if not ok] == [
        "quantization at the smallest b changes at least one construction"]
    gap_checks, table = bounds_checks.gap_checks(instances)
    assert {row["construction"] for row in table} == {"T1", "T2"} and gap_checks and all(gap_checks.values())


def test_it_appears_in_bounds_tradeoff_and_precision(only_throwaways, capsys):
    doc = run(capsys, "bounds", "--N", "64", "--R", "2", "--k", "1", "2")
    assert {"T1", "T2"} <= {row["construction"] for row in doc["rows"]}
    doc = run(capsys, "tradeoff", "--N", "64", "--R", "2", "--k-max", "2")
    assert {row["construction"] for row in doc["rows"]} == {"T2"}
    doc = run(capsys, "precision", "--construction", "throwaway-geometric", "--N", "64", "--R", "2")
    assert doc["smallest_exact_bits"] == 2


def test_a_wrong_bits_claim_fails_the_bits_row(only_throwaways):
    registry.register(dataclasses.replace(SINGLE, bits=BitsClaim(64, 2, needed=3)), replace=True)
    checks, _, _ = bounds_checks.precision_checks(0)
    assert "T1 N=64 R=2 k=1: smallest exact b = 3" in [claim for claim, ok in checks.items() if not ok]
    assert checks["T2 N=64 R=2 k=2: smallest exact b = 2"]


def test_a_construction_without_a_bits_claim_is_named_not_dropped(only_throwaways):
    registry.register(dataclasses.replace(SINGLE, bits=None), replace=True)
    assert bounds_checks.not_covered() == ["T1"]
    assert [spec.id for spec, _ in bounds_checks.precision_cases()] == ["T2"]


@pytest.mark.parametrize("bad", [dict(N=0, R=2), dict(N=4, R=2, needed=0), dict(N=4, R=2, table=0),
                                 dict(N=4, R=2, k=True)])
def test_bits_claims_are_validated(bad):
    with pytest.raises(InputError, match="BitsClaim"):
        BitsClaim(**bad)


def test_a_single_hop_claim_at_k_above_one_is_refused():
    with pytest.raises(InputError, match="k = 1"):
        dataclasses.replace(SINGLE, bits=BitsClaim(64, 2, 2))


def test_builder_is_the_build_given_or_derived_from_the_family():
    assert SINGLE.builder is SINGLE.build is G1.build  # a build given is the builder
    assert G1.assembles_family and G1.builder is G1.build  # a family's spec: build derived in __post_init__
    assert getattr(G1.builder, "assembles", None) is G1.family


def test_builder_refuses_a_spec_whose_build_was_reset_to_none():
    broken = dataclasses.replace(SINGLE)
    object.__setattr__(broken, "build", None)  # (a frozen spec's build cleared behind __post_init__'s back)
    with pytest.raises(InputError, match="give a build"):
        broken.builder
    with pytest.raises(InputError, match="give a build"):  # and a spec is never made without one
        dataclasses.replace(SINGLE, build=None)
