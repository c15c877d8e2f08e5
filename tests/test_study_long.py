"""The long-training regimes of the mechanism study (issue 41): their declarations, the probes recorded along
training (the trainer's RecordEvery and the study record's trajectory), resumption and the time estimate."""

import json

import numpy as np
import pytest

from georecall.errors import InputError
from georecall.experiments import study, study_report
from georecall.experiments.study_design import (
    BASE,
    D_STAR,
    GRIDS,
    LONG_BASE,
    LONG_FAMILIES,
    REGIMES,
    Grid,
    Regime,
    resolve,
)
from georecall.theory.seeds import rng
from georecall.theory.tasks import task_for_seed
from georecall.training.parameters import init_model, params_of
from georecall.training.train import RecordEvery, train, training_data

TINY_PROBE = {"holdout": 0.25, "subjects": 16, "transfer_steps": None, "encoder_steps": 5, "lr": 1e-2}


def _tiny_problem():
    task = task_for_seed(32, 2, 0)
    tokens, answers, _, _ = training_data(task)
    return task, tokens, answers, init_model(32, 2, 8, 16, rng=rng(0, "init", 12, 8, 16))


def _weights(model) -> dict:
    return {k: np.array(v) for k, v in params_of(model).items()}


def test_record_every_measures_the_weights_after_that_many_updates():
    _, tokens, answers, initial = _tiny_problem()
    recorder = RecordEvery(2, lambda model, steps: {"weights": _weights(model)}, initial)
    result = train(initial, tokens, answers, steps=6, lr=1e-2, weight_decay=0.5, stop_at_accuracy=None,
                   callback=recorder)
    assert [p["step"] for p in recorder.points] == [2, 4]  # the last step's model is the final one
    for point in recorder.points:
        alone = train(initial, tokens, answers, steps=point["step"], lr=1e-2, weight_decay=0.5,
                      stop_at_accuracy=None).model
        for key, value in _weights(alone).items():
            np.testing.assert_array_equal(point["weights"][key], value)
    # a broken recorder (off by one update) would differ from the model after 2 updates
    one = train(initial, tokens, answers, steps=1, lr=1e-2, weight_decay=0.5, stop_at_accuracy=None).model
    first = recorder.points[0]["weights"]["entity_embedding"]
    assert not np.array_equal(_weights(one)["entity_embedding"], first)
    assert result.steps == 6


def test_record_every_with_a_tied_readout_and_sgd():
    _, tokens, answers, initial = _tiny_problem()
    recorder = RecordEvery(3, lambda model, steps: {"U": np.array(model.unembedding), "E": np.array(
        model.entity_embedding)}, initial, tie_readout=True)
    train(initial, tokens, answers, steps=4, lr=0.1, optimizer="sgd", momentum=0.9, tie_readout=True,
          stop_at_accuracy=None, callback=recorder)
    (point,) = recorder.points
    np.testing.assert_array_equal(point["U"], point["E"])  # U = E, not the stale read-out


def test_record_every_refuses_a_bad_interval():
    _, _, _, initial = _tiny_problem()
    with pytest.raises(InputError):
        RecordEvery(0, lambda model, steps: {}, initial)


def _tiny_grid(steps: int, every: int | None) -> Grid:
    changes = {"N": 32, "R": 2, "d": 8, "steps": steps, "stop": "none", "decay": 0.5}
    if every is not None:
        changes["trajectory_every"] = every
    return Grid("tiny-long", BASE, (Regime(f"tiny {steps}", "a tiny long regime", changes),), TINY_PROBE,
                controls={})


def test_trajectory_points_equal_the_probes_of_a_model_trained_that_long():
    (job,) = study.jobs_of(_tiny_grid(6, 3), [0])
    record = study.run_job(job)
    trajectory = record["trajectory"]
    assert [p["step"] for p in trajectory] == [3, 6]
    last = trajectory[-1]
    assert last["summary"] == record["summary"] and last["claims"] == record["claims"]
    assert last["accuracy"] == record["training"]["accuracy"]
    # the point at step 3 is what a run of 3 steps probes on its final model
    (short,) = study.jobs_of(_tiny_grid(3, None), [0])
    alone = study.run_job(short)
    assert trajectory[0]["summary"] == alone["summary"] and trajectory[0]["claims"] == alone["claims"]
    assert "trajectory" not in alone
    json.dumps(record, allow_nan=False)  # a record is strict JSON


def test_a_long_record_is_read_and_summarized(tmp_path):
    out = tmp_path / "long.jsonl"
    records = study.run_study(str(out), _tiny_grid(4, 2), seeds=[0], progress=False, log=lambda line: None)
    assert len(records) == 1 and [p["step"] for p in records[0]["trajectory"]] == [2, 4]
    summary = study_report.summarize(str(out))
    assert [r["regime"] for r in summary["regimes"]] == ["tiny 4"]
    lines: list[dict] = []
    again = study.run_study(str(out), _tiny_grid(4, 2), seeds=[0], progress=lines.append,
                            log=lambda line: None)
    assert again == records and not lines  # resumed: nothing to run


def test_the_estimate_is_said_before_the_run(tmp_path):
    lines: list[dict] = []
    study.run_study(str(tmp_path / "r.jsonl"), _tiny_grid(2, None), seeds=[0], progress=lines.append,
                    log=lambda line: None)
    assert lines[0]["done"] == 0
    assert "estimate: 2 training steps at most and 2 probe sets" in lines[0]["message"]


def test_long_grid_declarations():
    grid = GRIDS["long"]
    assert grid.ordered and grid.base is LONG_BASE
    resolved = {r.name: resolve(grid.base, r) for r in grid.regimes}
    families = {r.family for r in grid.regimes}
    assert families == {f.name for f in LONG_FAMILIES}
    assert {(p["N"], p["R"]) for p in resolved.values()} == {(256, 4), (512, 4), (1024, 4)}
    for name, p in resolved.items():
        assert p["steps"] >= 20_000 and p["stop"] == "none", name
        assert 0 < p["trajectory_every"] < p["steps"], name
        assert (p["N"], p["R"]) in D_STAR
    by_family: dict[str, list[dict]] = {}
    for r in grid.regimes:
        by_family.setdefault(r.family, []).append(resolved[r.name])
    adamw = {p["decay"] for f in ("adamw-0.1", "adamw-1", "adamw-10") for p in by_family[f]}
    assert adamw == {0.1, 1.0, 10.0}
    assert all(p.get("optimizer", "adam") == "adam" for f in ("adamw-0.1", "adamw-1", "adamw-10")
               for p in by_family[f])
    for p in by_family["small-mlp"]:  # m in {8, 2R}, d well above the threshold
        assert p["m"] in (8, 2 * p["R"]) and p["d"] >= 4 * D_STAR[(p["N"], p["R"])]["d_star"]
    assert {p["decay"] > 0 for f in ("small-init", "small-init+wd") for p in by_family[f]} == {True, False}
    assert all(p["init_scale"] < 1 for f in ("small-init", "small-init+wd") for p in by_family[f])
    for p in by_family["sgd-momentum"]:
        assert p["optimizer"] == "sgd" and 0 < p["momentum"] < 1 and p["decay"] == 0
    jobs = study.jobs_of("long", [0])
    assert [j["kind"] for j in jobs[:4]] == ["control"] * 4  # controls first, then the declared order
    assert [j["params"]["N"] for j in jobs if j["kind"] == "mechanism"] == sorted(
        j["params"]["N"] for j in jobs if j["kind"] == "mechanism")


def test_earlier_regimes_resolve_as_before():
    """The new optional fields are absent from every earlier regime's parameters, so their records' keys
    (and with them the resumption of their files) are unchanged."""
    for r in REGIMES:
        p = resolve(BASE, r)
        assert not {"optimizer", "momentum", "trajectory_every"} & set(p)
        assert p["m"] == p["width_factor"] * p["d"] or p["init"] != "fan-in"


@pytest.mark.parametrize("changes", [{"optimizer": "lbfgs"}, {"momentum": 1.0}, {"momentum": -0.1},
                                     {"trajectory_every": 0}, {"m": 0}, {"schedule": "cosine"}])
def test_resolve_refuses_bad_long_fields(changes):
    with pytest.raises(InputError):
        resolve(LONG_BASE, Regime("bad", "broken", changes))


def test_time_estimate_counts_steps_and_probe_sets():
    (job,) = [j for j in study.jobs_of("long", [0]) if j.get("regime") == "adamw-1 N=256"]
    one = study.time_estimate([job])
    assert one["steps"] == 20_000 and one["probe_sets"] == 6  # 4,000 … 16,000, the end, the initial
    longer = {**job, "params": {**job["params"], "steps": 40_000}}
    assert study.time_estimate([longer])["seconds"] > one["seconds"]
    bigger = [j for j in study.jobs_of("long", [0]) if j.get("regime") == "adamw-1 N=1024"]
    assert study.time_estimate(bigger)["seconds"] > one["seconds"]


def test_trajectories_average_over_seeds_from_the_untrained_weights(tmp_path):
    out = tmp_path / "long.jsonl"
    records = study.run_study(str(out), _tiny_grid(4, 2), seeds=[0, 1], progress=False, log=lambda line: None)
    t = study_report.trajectories(records)
    assert t["steps"] == [0, 2, 4]
    at_end = [r["trajectory"][-1]["summary"]["superposition_r2"] for r in records]
    assert t["superposition_r2"][-1]["mean"] == pytest.approx(np.mean(at_end), abs=1e-6)
    assert t["accuracy"][0]["mean"] == pytest.approx(np.mean([r["training"]["initial_accuracy"]
                                                              for r in records]), abs=1e-6)
    without = [{k: v for k, v in r.items() if k != "trajectory"} for r in records]
    assert study_report.trajectories(without) is None
    doc = study_report.summarize(str(out))
    assert doc["regimes"][0]["trajectory"]["steps"] == [0, 2, 4]
    pytest.importorskip("matplotlib", reason="the figures need the optional plot extra")
    written = study_report.figures(doc, str(tmp_path / "fig"), formats=("png",))
    assert any(path.endswith("mechanism_trajectory.png") for path in written)


def test_study_records_carry_the_components_probe():
    grid = Grid("tiny-controls", BASE, (), TINY_PROBE, controls={"G1": ((64, 4),), "A1": ((64, 4),)})
    records = {job["construction"]: study.run_job(job) for job in study.jobs_of(grid, [0])}
    assert records["G1"]["summary"]["component_share"] == 1.0
    assert records["G1"]["details"]["components"]["reading"] == "components"
    assert records["A1"]["details"]["components"]["reading"] == "key"
    (job,) = study.jobs_of(_tiny_grid(2, 1), [0])
    record = study.run_job(job)
    assert all("component_share" in p["summary"] for p in record["trajectory"])
