"""A new construction is one module and one registry entry (CONTRIBUTING.md, "Adding a construction"):
``tests/throwaway_construction.py`` (its promise, family and ``ConstructionSpec``, no other file touched),
registered the way users register theirs (``--construction FILE.py:SPEC``), reaches ``check``, ``certify``,
``bounds``, ``precision`` and every row of ``verify`` that concerns it, the bits row included; a wrong bits
claim in it fails that row, and its one-hot codes are never reported as binary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from georecall.cli import main
from georecall.constructions import registry

MODULE = str(Path(__file__).parent / "throwaway_construction.py")
SPEC, WRONG = f"{MODULE}:SPEC", f"{MODULE}:SPEC_WRONG_BITS"


@pytest.fixture(autouse=True)
def unregistered_afterwards():
    """Each test registers the throwaway through the command line; it leaves the registry as it found it."""
    yield
    for spec_id in ("TA1", "TA1x"):
        registry.unregister(spec_id)


def run(capsys, *argv: str, code: int = 0) -> dict:
    assert main([*argv, "--json"]) == code
    out = capsys.readouterr().out
    return json.loads(out)


def test_check_certify_bounds_and_precision_reach_it(capsys):
    doc = run(capsys, "check", "single-hop", "--construction", SPEC, "--N", "32", "--R", "2")
    assert doc["passed"] and doc["params"]["construction"] == "TA1"
    assert doc["reports"][0]["achieved"]["d"] == 2 * 32 + 2  # d = 2·N + R, measured from the built arrays
    doc = run(capsys, "certify", "single-hop", "--construction", SPEC, "--N", "32", "--R", "2")
    assert doc["verdict"] == "CERTIFIED" and doc["params"]["codes"] == "one-hot"  # its own codebook's name
    doc = run(capsys, "bounds", "--construction", SPEC, "--N", "32", "--R", "2", "--k", "1")
    assert [row["construction"] for row in doc["rows"]] == ["TA1"] and doc["rows"][0]["d"] == 66
    doc = run(capsys, "precision", "--construction", SPEC, "--N", "32", "--R", "2")
    assert doc["smallest_exact_bits"] == 2 and doc["codes"] != "binary"


def test_its_codes_are_its_own_not_binary():
    spec = registry.resolve(SPEC)
    assert spec.codes is None and "codes" not in spec.accepts()  # takes no --codes: one-hot by definition
    assert registry.get("G1").codes == "binary"  # a built-in names its default codebook
    code = main(["check", "single-hop", "--construction", SPEC, "--N", "32", "--R", "2", "--codes", "sign"])
    assert code == 2  # refused, naming the option it does not take


def test_verify_runs_every_row_of_it_the_bits_row_included(capsys):
    doc = run(capsys, "verify", "--construction", SPEC)
    names = [report["name"] for report in doc["reports"]]
    assert doc["passed"] and names == ["TA1 one-hot float (certified)", "TA1 certified for every task",
                                       "bits needed: smallest exact b, b-1 fails",
                                       "lower bounds <= verified constructions"]
    bits, bounds = doc["reports"][2], doc["reports"][3]
    assert bits["params"]["constructions"] == ["TA1"] and bits["params"]["codes"] == {"TA1": "its own"}
    assert bits["extra"]["records"]["TA1"]["smallest_exact_bits"] == 2  # re-measured, not the claim read
    assert set(bits["extra_checks"]) == {"TA1 N=32 R=2 k=1: smallest exact b = 2",
                                         "TA1 N=32 R=2 k=1: b - 1 = 1 fails"}
    assert [row["construction"] for row in bounds["extra"]["gap table"]] == ["TA1"]
    # at N = 32 its governing bound is vacuous (d_min = 0): the bounds row checked nothing, so it is not
    # covered (no PASS, no failure), and says why
    assert bounds["extra"]["gap table"][0]["needed_d_min"] == 0 and not bounds["extra_checks"]
    assert not bounds["passed"] and "vacuous" in bounds["not_covered"]


def test_a_wrong_bits_claim_fails_the_bits_row(capsys):
    doc = run(capsys, "verify", "--construction", WRONG, code=1)
    failed = [report["name"] for report in doc["reports"]
              if not report["passed"] and not report["not_covered"]]
    assert failed == ["bits needed: smallest exact b, b-1 fails"]
    assert not doc["reports"][2]["extra_checks"]["TA1x N=32 R=2 k=1: smallest exact b = 1"]
