"""The mechanism study: thresholds applied as declared, summary math, the file (resume after a kill loses
nothing, torn/alien/duplicate lines, the lock), the grid's validation, the verify row; the quick grid
(slow)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.errors import InputError
from georecall.io import FileLock, LockTimeout
from georecall.verify.experiments import study
from georecall.verify.experiments.probes import SUMMARY_FIELDS

# ---------------------------------------------------------------------------------------- thresholds

PASSING = {"superposition_r2": 0.95, "follows": 0.90, "others_unchanged": 0.90, "selective_fraction": 0.90,
           "gated_mass": 0.90, "breadth_median": 0.05, "closed_form_transfer": 0.90,
           "functional_zero_shot": 0.0}


def test_thresholds_are_the_declared_ones():
    """docs/study.md and the code declare the same numbers (changing one without the other fails here)."""
    assert study.THRESHOLDS == {"superposition_r2": 0.95, "follows": 0.90, "others_unchanged": 0.90,
                                "selective_fraction": 0.90, "gated_mass": 0.90, "breadth_median": 0.05,
                                "zero_shot": 0.90}
    doc = open(os.path.join(os.path.dirname(__file__), "..", "docs", "study.md"), encoding="utf-8").read()
    for text in ("≥ 0.95", "followed `≥ 0.90`", "unchanged `≥ 0.90`", "`≥ 90%` of active units",
                 "gated mass `≥ 0.90`", "breadth `≥ 0.05`", "zero-shot on B) ≥ 0.90"):
        assert text in doc, text


def test_claims_are_met_exactly_at_the_thresholds():
    assert study.claims_met(PASSING) == {"superposition": True, "selective_mlp": True, "zero_shot": True}


@pytest.mark.parametrize("field, claim", [
    ("superposition_r2", "superposition"), ("follows", "superposition"),
    ("others_unchanged", "superposition"), ("selective_fraction", "selective_mlp"),
    ("gated_mass", "selective_mlp"), ("breadth_median", "selective_mlp"),
])
def test_just_below_a_threshold_fails_only_its_claim(field, claim):
    below = {**PASSING, field: np.nextafter(PASSING[field], -np.inf)}
    met = study.claims_met(below)
    assert not met[claim] and all(v for k, v in met.items() if k != claim)
    assert not study.claims_met({**PASSING, field: None})[claim]  # a missing value fails


def test_zero_shot_takes_the_better_of_closed_form_and_functional():
    assert study.claims_met({**PASSING, "closed_form_transfer": 0.1, "functional_zero_shot": 0.9})[
        "zero_shot"]
    assert not study.claims_met({**PASSING, "closed_form_transfer": 0.89, "functional_zero_shot": 0.89})[
        "zero_shot"]
    assert not study.claims_met({**PASSING, "closed_form_transfer": None, "functional_zero_shot": None})[
        "zero_shot"]


@given(st.lists(st.fixed_dictionaries({c: st.booleans() for c in study.CLAIMS}), min_size=1, max_size=6))
def test_regime_verdicts_hold_only_when_every_seed_meets_the_claim(per_seed):
    verdicts = study.regime_verdicts(per_seed)
    for claim, v in verdicts.items():
        met = sum(seed[claim] for seed in per_seed)
        assert (v["met"], v["n"]) == (met, len(per_seed))
        assert v["verdict"] == ("holds" if met == len(per_seed) else "partly" if met else "fails")


# ------------------------------------------------------------------------------------------ summary math


def fake_summary(value: float) -> dict:
    return {f: value for f in SUMMARY_FIELDS}


def fake_records(tmp_path):
    """Three seeds of one regime (values 0.5, 0.75, 1.0 everywhere), G1 perfect, A1 at zero."""
    params = study.resolve(study.BASE, study.REGIMES[0])
    records = []
    for seed, value in zip((0, 1, 2), (0.5, 0.75, 1.0)):
        summary = fake_summary(value)
        records.append({"kind": "mechanism", "grid": "default", "regime": "base", "control": False,
                        "description": "d", "seed": seed, "params": params, "probe": study.PROBE_SETTINGS,
                        "study_version": study.STUDY_VERSION, "version": "x", "seed_contract": 1,
                        "summary": summary, "claims": study.claims_met(summary),
                        "initial": {"summary": fake_summary(0.0),
                                    "claims": study.claims_met(fake_summary(0.0))},
                        "training": {"steps": 100 * (seed + 1), "reached": seed != 2, "accuracy": 1.0,
                                     "final_loss": 0.1, "seconds": 1.0}, "seconds": 2.0})
    for construction, value in (("G1", 1.0), ("A1", 0.0)):
        for seed in (0, 1, 2):
            records.append({"kind": "control", "grid": "default", "construction": construction, "N": 1024,
                            "R": 4, "seed": seed, "probe": study.PROBE_SETTINGS, "study_version": 1,
                            "version": "x", "seed_contract": 1, "summary": fake_summary(value),
                            "claims": study.claims_met(fake_summary(value)), "d": 54, "m": 80,
                            "seconds": 1.0})
    path = tmp_path / "study.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def test_summary_mean_sd_verdicts_and_calibration(tmp_path):
    doc = study.summarize(fake_records(tmp_path))
    (regime,) = doc["regimes"]
    stat = regime["trained"]["forward_r2"]
    assert stat["mean"] == pytest.approx(0.75) and stat["n"] == 3
    assert stat["sd"] == pytest.approx(0.25)  # sample sd of 0.5, 0.75, 1.0 (ddof = 1)
    assert regime["training"]["reached"] == 2 and regime["training"]["steps"]["mean"] == pytest.approx(200)
    assert regime["initial"]["forward_r2"] == {"mean": 0.0, "sd": 0.0, "n": 3}
    # 1.0 meets every criterion, 0.75 only breadth (>= 0.05), 0.5 likewise: no claim holds in every seed
    assert regime["verdicts"]["superposition"] == {"met": 1, "n": 3, "verdict": "partly"}
    assert regime["verdicts"]["selective_mlp"]["verdict"] == "partly"
    assert doc["verdicts"]["superposition"]["partly"] == ["base (1/3)"]
    line = doc["verdicts"]["zero_shot"]["line"]
    assert "holds in none of the 1 gradient-descent regimes; partly (some seeds) in base (1/3)" in line
    assert doc["calibration"] == {"G1 meets every claim in every seed": True,
                                  "A1 meets no claim in any seed": True,
                                  "untrained weights meet no claim in any seed": True}
    text = study.render_summary(doc)
    assert "| base | 24 | 2/3 | 1.000 ± 0.000 | 200 ± 100 | 0.75 ± 0.25 |" in text
    assert "| G1 N=1024 R=4 | 54 | 80 | — | — | 1.00 ± 0.00 |" in text
    assert text.count("\n- ") == 3  # one verdict line per claim


def test_figures_are_written_or_skipped_with_a_message(tmp_path, monkeypatch):
    doc = study.summarize(fake_records(tmp_path))
    pytest.importorskip("matplotlib")
    written = study.figures(doc, str(tmp_path / "figs"), log=lambda text: None)
    assert sorted(os.path.basename(p) for p in written) == ["forward_reverse.png", "forward_reverse.svg",
                                                            "mechanism.png", "mechanism.svg"]
    assert all(os.path.getsize(p) > 1000 for p in written)
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    notes = []
    assert study.figures(doc, str(tmp_path / "none"), log=notes.append) == []
    assert "matplotlib is not installed" in notes[0] and not os.path.exists(tmp_path / "none")


# ------------------------------------------------------------------------------------------ the file


TINY = study.Grid(
    "tiny", {**study.BASE, "N": 48, "R": 2, "d": 8, "steps": 60},
    (study.Regime("base", "tiny"), study.Regime("long", "tiny long", {"steps": 20, "stop": "none"}),
     study.Regime("tied", "tiny tied", {"readout": "tied"})),
    {**study.PROBE_SETTINGS, "subjects": 16, "transfer_steps": None, "encoder_steps": 5},
    controls={"G1": None})
TIMING = ("seconds",)


def comparable(records: list[dict]) -> dict:
    """Records by key without timing fields (``seconds`` anywhere)."""
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in TIMING}
        return value
    return {r["key"]: strip(r) for r in records}


def test_resume_after_a_stop_loses_nothing_and_reruns_nothing(tmp_path):
    reference = study.run_study(str(tmp_path / "ref.jsonl"), TINY, seeds=(0, 1), progress=False)
    assert len(reference) == len(study.jobs_of(TINY, (0, 1))) == 8
    path = str(tmp_path / "study.jsonl")
    first = study.run_study(path, TINY, seeds=(0, 1), progress=False, max_jobs=3)
    assert len(first) == 3
    with open(path, "a") as handle:  # a writer killed mid-line, an alien line, a duplicate
        handle.write(json.dumps(first[0]) + "\n" + '{"kind": "other"}\n' + '{"kind": "mechan')
    seen = []
    resumed = study.run_study(path, TINY, seeds=(0, 1), progress=seen.append, log=lambda text: None)
    assert comparable(resumed) == comparable(reference)
    assert seen[-1]["done"] == seen[-1]["total"] == 8 and seen[-1]["new"] == 5
    contents = study.read_study(path)
    assert (contents.torn, contents.alien, contents.duplicates) == (1, 1, 1)
    again = []
    study.run_study(path, TINY, seeds=(0, 1), progress=again.append, log=lambda text: None)
    assert again == []  # nothing left to run: no job, no report


def test_resume_after_sigkill_loses_nothing(tmp_path):
    """The driver killed by SIGKILL mid-study: the rerun ends with the records of an uninterrupted run."""
    path = tmp_path / "study.jsonl"
    script = textwrap.dedent(f"""
        from georecall.verify.experiments import study
        from tests_tiny_grid import TINY
        study.run_study({str(path)!r}, TINY, seeds=(0, 1, 2), progress=False)
    """)
    helper = tmp_path / "tests_tiny_grid.py"
    helper.write_text(textwrap.dedent("""
        from georecall.verify.experiments import study
        TINY = study.Grid(
            "tiny", {**study.BASE, "N": 48, "R": 2, "d": 8, "steps": 60},
            (study.Regime("base", "tiny"), study.Regime("long", "tiny long", {"steps": 20, "stop": "none"}),
             study.Regime("tied", "tiny tied", {"readout": "tied"})),
            {**study.PROBE_SETTINGS, "subjects": 16, "transfer_steps": None, "encoder_steps": 5},
            controls={"G1": None})
    """))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OPENBLAS_NUM_THREADS": "1"}
    process = subprocess.Popen([sys.executable, "-c", script], env=env, cwd=tmp_path)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if path.exists() and path.read_text().count("\n") >= 2:
            break
        time.sleep(0.05)
    assert process.poll() is None, "the study finished before it could be killed: make the grid slower"
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    killed = len(study.read_study(str(path)).records)
    assert 2 <= killed < 12
    resumed = study.run_study(str(path), TINY, seeds=(0, 1, 2), progress=False, log=lambda text: None)
    reference = study.run_study(str(tmp_path / "ref.jsonl"), TINY, seeds=(0, 1, 2), progress=False)
    assert comparable(resumed) == comparable(reference)
    assert study.read_study(str(path)).duplicates == 0  # nothing ran twice


def test_a_held_lock_refuses_a_second_study(tmp_path):
    path = str(tmp_path / "study.jsonl")
    with FileLock(path):
        with pytest.raises(LockTimeout, match="locked by"):
            study.run_study(path, TINY, seeds=(0,), progress=False, lock_timeout=0, log=lambda text: None)
    assert not os.path.exists(path) or study.read_study(path).records == []


@pytest.mark.parametrize("kwargs, message", [
    ({"grid": "nope"}, "grid must be one of"),
    ({"seeds": []}, "seeds is empty"),
    ({"seeds": [-1]}, "non-negative integer"),
    ({"workers": 0}, "workers"),
])
def test_bad_arguments_are_refused_before_any_work(tmp_path, kwargs, message):
    path = tmp_path / "study.jsonl"
    with pytest.raises(InputError, match=message):
        study.run_study(str(path), **{"grid": TINY, **kwargs}, progress=False)
    assert not path.exists()


def test_output_path_is_checked_before_any_work(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        study.run_study(str(tmp_path / "missing" / "study.jsonl"), TINY, progress=False)


@pytest.mark.parametrize("changes, message", [
    ({"bogus": 1}, "unknown fields"),
    ({"readout": "sideways"}, "readout must be one of"),
    ({"N": 999}, "no declared d\\*"),
    ({"steps": 0}, "steps"),
])
def test_regimes_are_validated(changes, message):
    base = {k: v for k, v in study.BASE.items()}
    with pytest.raises(InputError, match=message):
        study.resolve(base, study.Regime("bad", "", changes))


def test_the_default_grid_covers_what_issue_12_asks():
    jobs = study.jobs_of("default")
    trials = [j for j in jobs if j["kind"] == "mechanism"]
    by_regime = {}
    for job in trials:
        by_regime.setdefault(job["regime"], []).append(job)
    assert all(len(v) >= 3 for v in by_regime.values())  # >= 3 seeds everywhere
    params = {name: v[0]["params"] for name, v in by_regime.items()}
    assert {(p["N"], p["R"]) for p in params.values()} >= {(1024, 2), (1024, 4), (4096, 2), (4096, 4)}
    assert {p["d"] for p in params.values() if (p["N"], p["R"]) == (1024, 4) and p["init"] == "fan-in"} == {
        12, 24, 48}  # 1×, 2×, 4× d* = 12
    assert {p["readout"] for p in params.values()} == {"untied", "tied", "frozen"}
    assert {p["attention"] for p in params.values()} == {"uniform", "softmax"}
    assert {p["decay_groups"] for p in params.values() if p["decay"]} == {"all", "mlp", "embeddings"}
    assert {p["stop"] for p in params.values()} == {"100%", "none"}
    assert {p["init_scale"] for p in params.values()} == {1.0, 0.1}
    assert {p["init"] for p in params.values()} == {"fan-in", "g1+noise", "g1-selector"}
    assert len({j["key"] for j in jobs}) == len(jobs)


def test_records_of_another_version_are_not_reused(tmp_path):
    path = str(tmp_path / "study.jsonl")
    records = study.run_study(path, TINY, seeds=(0,), progress=False)
    text = open(path).read().replace(f'"study_version": {study.STUDY_VERSION}', '"study_version": 0')
    with open(path, "w") as handle:
        handle.write(text)
    seen = []
    study.run_study(path, TINY, seeds=(0,), progress=seen.append)
    assert seen[-1]["new"] == len(records)


# ------------------------------------------------------------------------------------------ the verify row


def test_verify_row_passes_and_checks_the_controls():
    start = time.perf_counter()
    (report,) = study.section_mechanism(seed=0)
    assert report.passed, report.extra_checks
    assert len(report.extra_checks) == 4
    summaries = report.extra["summaries"]
    assert set(summaries) == {"G1", "A1", "trained", "untrained"}
    assert report.extra["claims"]["G1"] == {"superposition": True, "selective_mlp": True, "zero_shot": True}
    print(f"verify row: {time.perf_counter() - start:.1f} s")  # timing reported, not asserted


# ------------------------------------------------------------------------------------------ the quick grid


@pytest.mark.slow
def test_quick_grid_runs_within_five_minutes_and_summarizes(tmp_path):
    start = time.perf_counter()
    path = str(tmp_path / "quick.jsonl")
    records = study.run_study(path, "quick", seeds=(0, 1, 2), workers=2, progress=False)
    elapsed = time.perf_counter() - start
    assert len(records) == len(study.jobs_of("quick")) == 21
    doc = study.summarize(path)
    assert doc["calibration"]["G1 meets every claim in every seed"]
    assert doc["calibration"]["A1 meets no claim in any seed"]
    assert len(doc["regimes"]) == len(study.QUICK_REGIMES)
    # trained regimes that stop at 100% get there (controls report whatever they reach: that is their point)
    assert all(e["training"]["reached"] >= 1 for e in doc["regimes"]
               if e["params"]["stop"] == "100%" and not e.get("control"))
    text = study.render_summary(doc)
    assert all(f"| {r.name} |" in text for r in study.QUICK_REGIMES)
    print(f"the quick grid took {elapsed:.0f} s")  # its budget (5 min) is a benchmark figure, not asserted
