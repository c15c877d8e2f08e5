"""The architecture issue's promises: one import name, one registry, named layouts, one seed contract, CLI
errors that tell user errors from bugs, exact guards."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import georecall
from georecall.cli import main
from georecall.constructions import registry
from georecall.constructions.arithmetic import IntegerModeError, integer_bounds
from georecall.constructions.codes import make_codes
from georecall.constructions.layout import Layout
from georecall.constructions.single_hop import build_g1
from georecall.errors import ConditionError, InputError
from georecall.testing import tasks
from georecall.theory import seeds
from georecall.theory import tasks as tasks_module
from georecall.theory.tasks import random_task, task_for_seed
from georecall.verify.checking.run import run_check

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ------------------------------------------------------------------------------------------------ namespace


def test_the_installed_distribution_has_one_top_level_name():
    # The installed wheel's metadata (a .dist-info with a RECORD), not a build's egg-info in the source tree.
    installed = [d for d in importlib.metadata.distributions(name="georecall")
                 if any(str(f).endswith(".dist-info/RECORD") for f in (d.files or []))]
    assert installed, "georecall is not installed from a wheel"
    files = [str(f) for f in (installed[0].files or [])]
    if any(f.endswith(".pth") or "__editable__" in f for f in files):
        pytest.skip("editable install: the wheel's file list is checked in CI (non-editable install)")
    top = {f.split("/")[0] for f in files if not f.startswith("..")}
    top = {t for t in top if not t.endswith(".dist-info") and t != "__pycache__"}
    assert top == {"georecall"}, top


def test_ci_tests_the_installed_package_not_the_source_tree():
    where = os.path.dirname(georecall.__file__)
    if os.environ.get("CI") != "true":
        pytest.skip(f"only enforced in CI (here georecall comes from {where})")
    folders = ("src", "theory", "constructions", "bounds", "verify")
    source_folders = [os.path.join(REPO, name) for name in folders]
    assert "site-packages" in where and not any(where.startswith(folder) for folder in source_folders)


def test_unrelated_top_level_packages_named_like_our_folders_break_nothing(tmp_path):
    """Stand-ins for PyPI's `verify` and `bounds` (and a user's theory.py) earlier on sys.path."""
    for name in ("verify", "bounds"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('the unrelated PyPI package')\n")
    (tmp_path / "theory.py").write_text("raise ImportError('a user script')\n")
    (tmp_path / "constructions.py").write_text("raise ImportError('a user script')\n")
    code = (
        "from georecall.cli import main; raise SystemExit(main(['tradeoff', '--N', '64', '--R', '2', "
        "'--k-max', '2', '--json']))"
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"]


# ------------------------------------------------------------------------------------------------- registry


def test_registry_lists_the_six_constructions_once():
    ids = [spec.id for spec in registry.specs()]
    assert {"G1", "A1", "G2", "A2a", "A2b", "C1"} <= set(ids)  # any order: nothing may depend on it
    names = [spec.name for spec in registry.specs()]
    assert len(set(ids)) == len(ids) and len(set(names)) == len(names)
    for spec in registry.specs():
        assert registry.get(spec.id) is spec and registry.get(spec.name.upper()) is spec


def test_registry_refuses_collisions_and_unknown_names():
    g1 = registry.get("G1")
    clash = registry.ConstructionSpec("X9", "geometric", "clash", g1.build, g1.nominal_promise)
    with pytest.raises(InputError, match="collides"):
        registry.register(clash)
    with pytest.raises(InputError, match="no construction 'nope'"):
        registry.get("nope")
    with pytest.raises(InputError, match="hops"):
        registry.ConstructionSpec("X8", "x8", "bad", g1.build, g1.nominal_promise, hops="three")


def test_cli_choices_come_from_the_registry(capsys):
    with pytest.raises(SystemExit):
        main(["check", "single-hop", "--help"])
    out = capsys.readouterr().out
    assert all(spec.name in out for spec in registry.specs("single"))


@pytest.mark.parametrize("where", ["examples/my_construction.py:SPEC", "examples.my_construction:SPEC"])
def test_bring_your_own_construction_from_the_command_line(where, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    try:
        assert main(["check", "single-hop", "--construction", where, "--N", "32", "--R", "3", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["passed"] and doc["params"]["construction"] == "OH1"
        assert doc["achieved"]["d"] == doc["promise"]["d"] == 3 * 32 + 3 + 32
    finally:
        registry.unregister("OH1")


@given(task=tasks(min_N=2, max_N=24, max_R=3))
def test_property_test_of_a_user_construction(task):
    """The five-line property test of docs/your_construction.md, against the bring-your-own example."""
    import runpy

    spec = runpy.run_path(os.path.join(REPO, "examples", "my_construction.py"))["SPEC"]
    assert run_check(spec, task.N, task.R, task=task).passed


def test_a_refused_option_names_itself(capsys):
    code = main(["check", "single-hop", "--construction", "associative", "--beta", "0.001", "--N", "16"])
    err = capsys.readouterr().err
    assert code == 2 and "β" in err and "A1" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(InputError, match="gate constant"):
        run_check("associative-depth", 16, 2, 2, options={"gate": 3.0})
    with pytest.raises(InputError, match="single-hop queries"):
        run_check("G1", 16, 2, 2)


def test_a_codebook_and_a_contradicting_D_are_refused():
    task = random_task(16, 2, 0)
    with pytest.raises(InputError, match="D = 7 contradicts"):
        build_g1(task, make_codes("binary", 16), D=7)


# --------------------------------------------------------------------------------------------------- layouts


def test_layouts_name_every_coordinate_and_the_model_records_them():
    layout = Layout()
    blocks, gates = layout.add("blocks", 2, 3), layout.add("gates", 2)
    assert blocks.tolist() == [[0, 1, 2], [3, 4, 5]] and gates.tolist() == [6, 7] and layout.d == 8
    with pytest.raises(InputError, match="already"):
        layout.add("gates", 1)
    assert Layout.from_dict(layout.as_dict()).as_dict() == layout.as_dict()
    for spec in registry.specs():
        built = spec.build(task_for_seed(16, 2, 0), 1 if spec.hops == "single" else 2, rng=0)
        rebuilt = Layout.from_dict(built.model.meta["layout"])
        assert rebuilt.d == built.model.d  # the layout covers the residual exactly
        used = np.flatnonzero(np.any(built.model.entity_embedding != 0, axis=0))
        name = {"G1": "blocks", "C1": "blocks", "G2": "path_blocks"}.get(spec.id, None)
        if name:  # facts live in the named blocks and nowhere else
            assert set(used) <= set(rebuilt[name].reshape(-1).tolist())


@pytest.mark.parametrize("spec_id", [spec.id for spec in registry.specs()])
def test_achieved_sizes_are_measured_and_match_the_independent_promise(spec_id):
    spec = registry.get(spec_id)
    k = 1 if spec.hops == "single" else 2
    built = spec.build(task_for_seed(32, 3, 1), k, rng=0)
    promise = spec.nominal_promise(32, 3, k)
    assert (built.model.d, built.model.mlp_width) == (promise.d, promise.m)
    assert built.model.parameter_count() == promise.params  # A2(b): the shared MLP counted once


# ------------------------------------------------------------------------------------------ seed contract


def test_the_same_seed_gives_the_same_task_in_every_command(tmp_path, monkeypatch, capsys):
    seen = []
    real = tasks_module.random_task

    def spy(N, R, rng=None, **kwargs):
        task = real(N, R, rng, **kwargs)
        seen.append(task.table.copy())
        return task

    monkeypatch.setattr(tasks_module, "random_task", spy)
    assert main(["check", "single-hop", "--N", "16", "--R", "2", "--seed", "7", "--quiet"]) == 0
    assert main(["precision", "--N", "16", "--R", "2", "--seed", "7", "--max-bits", "4"]) == 0
    assert main(["train", "--N", "16", "--R", "2", "--d", "8", "--steps", "2", "--seed", "7", "--quiet"]) == 0
    from georecall.experiments import sweep, sweep_trial

    sweep.sweep(
        str(tmp_path / "t.jsonl"),
        [16],
        [2],
        ["learned"],
        [7],
        settings=sweep_trial.TrialSettings(steps=2),
        d_min=4,
        d_max=4,
        workers=1,
    )
    capsys.readouterr()
    assert len(seen) >= 4
    assert all(np.array_equal(t, seen[0]) for t in seen)
    assert np.array_equal(seen[0], random_task(16, 2, seeds.rng(7, "task")).table)


def test_streams_are_distinct_and_keyed():
    draws = {name: seeds.rng(3, name).integers(0, 2**62) for name in seeds.STREAMS}
    assert len(set(draws.values())) == len(draws)
    assert seeds.rng(3, "init", 1).integers(0, 2**62) != seeds.rng(3, "init", 2).integers(0, 2**62)
    with pytest.raises(ValueError, match="unknown random stream"):
        seeds.rng(3, "tsak")
    with pytest.raises(ValueError, match="non-negative"):
        seeds.rng(-1, "task")


# ------------------------------------------------------------------------------------------ errors and guards


def test_an_internal_error_is_not_reported_as_bad_input(monkeypatch, capsys):
    from georecall.verify.checking import run

    def shape_bug(*args, **kwargs):
        return np.zeros((2, 3)) @ np.zeros((4, 5))  # a NumPy ValueError: a bug, not the user's fault

    monkeypatch.setattr(run, "check_construction", shape_bug)
    code = main(["check", "single-hop", "--N", "16", "--R", "2"])
    err = capsys.readouterr().err
    assert code == 3 and "Traceback" in err and "internal error" in err


def test_condition_errors_are_value_errors_naming_the_inequality():
    with pytest.raises(ConditionError, match=r"gate: c2·G > c1·max\|a\|"):
        build_g1(random_task(8, 2, 0), gate=0.5)
    assert issubclass(ConditionError, ValueError)


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "single-hop", "--N", "7", "--R", "3", "--codes", "sign", "--D", "5", "--seed", "0"],
        *[
            [
                "check",
                "multi-hop",
                "--codes",
                "sign",
                "--D",
                "5",
                "--N",
                "7",
                "--R",
                "2",
                "--k",
                "2",
                "--construction",
                name,
            ]
            for name in ("path-blocks", "associative-width", "associative-depth", "cot")
        ],
    ],
)
def test_duplicate_codes_are_refused_exactly(argv, capsys):
    """The audit's reproducers: two identical sign codes (μ = 0.9999999999999999 in floating point)."""
    code = main(argv + ["--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "distinct codes" in err


@given(
    N=st.integers(2, 12),
    D=st.integers(1, 6),
    kind=st.sampled_from(["sign", "gaussian"]),
    seed=st.integers(0, 2**31),
    builder=st.sampled_from(["G1", "A1", "G2", "C1"]),
)
def test_random_short_codes_never_yield_a_model_that_fails_its_check(N, D, kind, seed, builder):
    spec = registry.get(builder)
    k = 1 if spec.hops == "single" else 2
    try:
        report = run_check(spec, N, 2, k, seed=seed, codes=kind, D=D)
    except ConditionError as exc:
        assert "distinct codes" in str(exc) or "leakage" in str(exc) or "gate" in str(exc)
        return
    assert report.passed, report.as_dict()


def test_duplicate_gaussian_rows_are_never_certified():
    codes = make_codes("gaussian", 4, 3, 0)
    assert codes.distinct
    from georecall.constructions.codes import _gaussian_codes

    class Repeating(np.random.Generator):  # a generator whose draw repeats a row
        def standard_normal(self, shape):
            rows = super().standard_normal(shape)
            rows[1] = rows[0]
            return rows

    repeated = _gaussian_codes(4, 3, Repeating(np.random.PCG64(0)))
    assert not repeated.distinct and repeated.mu == pytest.approx(1.0)


def test_integer_mode_bounds_the_margins_too():
    task = random_task(8, 2, 0)
    ok = build_g1(task, integer=True).model
    assert integer_bounds(ok, 2)["margins (differences of two logits)"] < 2**53
    # Choose an integer λ with the logits' bound in [2^52, 2^53): logits are still exact, but a margin (a
    # difference of two logits) could reach 2^53, which float64 no longer represents exactly.
    per_lambda = integer_bounds(ok, 2)["logits"]
    lam = float(-(-(2**52) // int(per_lambda)))
    big = build_g1(task, integer=True, lam=lam).model
    with pytest.raises(IntegerModeError, match="margins"):
        integer_bounds(big, 2)


def test_integer_promises_are_integers():
    report = run_check("G1", 64, 3, options={"integer": True})
    assert isinstance(report.promise.margin, int) and report.promise.margin == 4 and report.passed


def test_the_docs_property_test_snippet_is_the_one_in_georecall_testing():
    """The snippet's home is docs/your_construction.md (issue 44: it skips tasks outside the conditions, as
    check_spec does); georecall.testing's docstring shows the same one."""
    import georecall.testing as testing

    snippet = textwrap.dedent(testing.__doc__.split("::")[1]).strip()
    assert "report = run_check(SPEC, task.N, task.R, task=task)" in snippet and "assume(False)" in snippet
    docs = open(os.path.join(REPO, "docs", "your_construction.md"), encoding="utf-8").read()
    assert snippet in docs
