"""The mechanism study: does gradient descent find G1's geometry (docs/theory.md, "Gradient descent")?

A declared grid of training regimes × seeds. Each trial trains one model on ``task_for_seed(N, R, seed)``,
runs every probe of :func:`.probes_mechanism.mechanism_probes` on the trained model *and* on its initial
(untrained) weights, and writes one record. Control records probe the constructions G1 (the geometry, where
every probe is exact) and A1 (facts in per-fact MLP units) on the same tasks. The summary gives mean ± sd over
seeds per regime and probe, the controls beside them, and one verdict per claim by the declared thresholds.

This module runs the study: one job (:func:`run_job`), the jobs of a grid (:func:`jobs_of`) and their memory
estimate, the results file (:func:`read_study`), the driver (:func:`run_study`) and the ``georecall verify``
row (:func:`section_mechanism`). Everything that decides a verdict is declared before any run in
:mod:`.study_design` (and in docs/study.md); the summary, its tables and figures are :mod:`.study_report`'s.

Randomness (the seed contract, ``theory.seeds``): the task is ``task_for_seed(N, R, seed)``; initial weights
come from ``rng(seed, "init", 12, d, m)`` (regimes of one shape start from the same draws: a small-init
regime is the base draw scaled), batch order from ``rng(seed, "batches", 12, d, m)``, the noise added to G1
from ``rng(seed, "noise", 12)``; the probes use the ``probes`` and ``transfer`` streams (the same splits and
the same new task B for every model of one ``(N, R, seed)``).

The results file is JSONL, written only by the driver (the process that called :func:`run_study`) under the
advisory lock of :class:`georecall.results_files.FileLock`; trials run on the executors of
:mod:`.executors` (this process, local processes, or Dask). Every record carries its key
(regime, seed, resolved parameters, probe settings, study version, package version, seed contract); a rerun
skips every job whose key is in the file, so an interrupted study loses at most the jobs in flight.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from georecall import estimates, memory
from georecall.constructions import registry
from georecall.errors import InputError
from georecall.experiments import probes, probes_components, probes_mechanism
from georecall.experiments.driver import Call, JobList, Stop, clock, drive, open_results, stderr_note
from georecall.experiments.executors import WORKER_TIMEOUT, open_executor
from georecall.experiments.study_design import (
    GRIDS,
    QUICK_BASE,
    THRESHOLDS,
    Grid,
    Regime,
    claims_met,
    resolve,
)
from georecall.io import append_jsonl, validate_output_path
from georecall.memory import Budget
from georecall.results_files import ResultsFile, read_jsonl, require_kind
from georecall.theory import __version__
from georecall.theory.seeds import check_seed, rng
from georecall.theory.tasks import check_positive_int, task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import GROUPS, RecordEvery, train, training_data
from georecall.verify.checking.exact import evaluate  # the weights' own, exact
from georecall.verify.checking.report import claim_report

__all__ = [
    "STUDY_VERSION",
    "StudyFile",
    "estimate",
    "job_estimate",
    "jobs_of",
    "read_study",
    "run_job",
    "run_study",
    "section_mechanism",
    "time_estimate",
]

# bump when a trial's meaning changes: records of another version are never reused (2: ridge probes, issue 21;
# 3: the power columns decode_power and superposition_power, issue 35; 4: the components-vs-key probe,
# issue 41)
STUDY_VERSION = 4
STREAM_KEY = 12  # the study's key in the init / batches / noise streams (issue 12)
SEED_CONTRACT = 1


# ---------------------------------------------------------------------------------------------- one job


def _decay(p: dict):
    if not p["decay"]:
        return 0.0
    if p["decay_groups"] == "all":
        return float(p["decay"])
    if p["decay_groups"] == "mlp":
        return {"mlp": float(p["decay"])}
    return {"entity_embedding": float(p["decay"]), "relation_embedding": float(p["decay"]),
            "position_embedding": float(p["decay"])}


def _initial_model(p: dict, task, seed: int):
    """The untrained model of a regime and the groups training leaves frozen."""
    N, R, d, m = p["N"], p["R"], p["d"], p["m"]
    if p["init"] == "fan-in":
        model = init_model(N, R, d, m, attention=p["attention"],
                           positions=2 if p["attention"] == "softmax" else None,
                           rng=rng(seed, "init", STREAM_KEY, d, m), init_scale=p["init_scale"],
                           tied_readout=p["readout"] == "tied")
        return model, ("unembedding",) if p["readout"] == "frozen" else ()
    # Dense read-out storage: noise goes on every coordinate of U, as on a trained model's.
    g1 = registry.get("G1").builder(task, lam=p["lam"]).model.with_dense_readout().astype(np.float32)
    if p["init"] == "g1+noise":
        noise = rng(seed, "noise", STREAM_KEY)
        arrays = {}
        for key, value in g1.arrays().items():
            rms = float(np.sqrt(np.mean(np.square(value, dtype=np.float64))))
            arrays[key] = (value + p["noise"] * rms * noise.standard_normal(value.shape)).astype(np.float32)
        return g1.replace(**arrays), ("unembedding",) if p["readout"] == "frozen" else ()
    random_E = init_model(N, R, d, m, rng=rng(seed, "init", STREAM_KEY, d, m)).entity_embedding
    return g1.replace(entity_embedding=random_E), tuple(g for g in GROUPS if g != "entity_embedding")


def _rounded(value):
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(v) for v in value]
    return value


def _retained(p: dict, frozen: tuple, steps: int) -> dict:
    """The share of E⁰ and U⁰ that decoupled weight decay leaves after ``steps`` updates: ``(1 − lr·λ)^steps``
    for a decayed, trained group (the trainer shrinks before every update), 1 otherwise."""
    decay = _decay(p)
    out = {}
    for key, group in (("E", "entity_embedding"), ("U", "unembedding")):
        lam = decay.get(group, 0.0) if isinstance(decay, dict) else decay
        if group in frozen or (group == "unembedding" and p["readout"] == "tied"):
            lam = 0.0
        out[key] = float((1.0 - p["lr"] * lam) ** steps) if lam else 1.0
    return out


def _probe(model, task, seed: int, settings: dict, initial=None, retained: dict | None = None) -> dict:
    out = probes_mechanism.mechanism_probes(model, task, initial=initial, seed=seed,
                                            holdout=settings["holdout"], subjects=settings["subjects"],
                                            transfer_steps=settings["transfer_steps"],
                                            encoder_steps=settings["encoder_steps"], lr=settings["lr"],
                                            retained=retained)
    components = probes_components.components_or_key(model, task, seed=seed,
                                                     holdout=settings["holdout"] or 0.25,
                                                     subjects=settings["subjects"])
    out["summary"].update(probes_components.summary_of(components))
    details = {"components": {k: components[k] for k in ("reading", "moved", "interventions",
                                                          "component_interval", "scale_median")},
               "selectivity": {k: out["selectivity"][k] for k in ("units", "active_units", "mean_selectivity",
                                                                   "breadth_mean", "units_per_relation")},
               "functional": None if out["functional"] is None else
               {k: out["functional"][k] for k in ("start_accuracy_A", "steps")},
               "fits": {**{k: out["fits"][k] for k in ("displacement_notes", "features", "fit_rows")},
                        **out["fits"]["fits"], "retained": retained},
               "warnings": out["warnings"]}
    summary = _rounded(out["summary"])
    return {"summary": summary, "claims": claims_met(summary), "details": _rounded(details)}


def _point(model, task, tokens, answers, seed: int, settings: dict, initial, retained: dict) -> dict:
    """One point of a trajectory: the accuracy on every query, the probes' summary and the claims met."""
    probed = _probe(model, task, seed, settings, initial=initial, retained=retained)
    return {"accuracy": evaluate(model, tokens, answers).accuracy, "summary": probed["summary"],
            "claims": probed["claims"]}


def run_job(job: dict) -> dict:
    """Run one job (in a worker): a ``"mechanism"`` trial (train, probe trained and initial weights) or a
    ``"control"`` (probe a construction). Returns its record.

    A regime with ``trajectory_every`` also records the probes along training: ``trajectory``, one point
    (``step``, ``accuracy``, ``summary``, ``claims``) every that many steps and one at the end (the final
    model's, the same values as the record's own ``summary`` and ``claims``).

    Parameters
    ----------
    job : dict
        One job of :func:`jobs_of`.

    Returns
    -------
    dict
        The record: the job's fields, the probes' ``summary``, ``claims`` and ``details`` (a mechanism trial:
        also ``training`` and the untrained weights' ``initial``), and the timing field ``seconds``.
    """
    start = time.perf_counter()
    seed = job["seed"]
    if job["kind"] == "control":
        task = task_for_seed(job["N"], job["R"], seed)
        model = probes.reference_models(task, (job["construction"],))[job["construction"]]
        if job.get("pad_d"):
            model = probes_mechanism.embed_wider(model, job["pad_d"],
                                                 rng(seed, "noise", STREAM_KEY, 21, job["pad_d"]))
        probed = _probe(model, task, seed, job["probe"])
        return {**job, **probed, "d": model.d, "m": model.mlp_width,
                "seconds": round(time.perf_counter() - start, 3)}
    p = job["params"]
    task = task_for_seed(p["N"], p["R"], seed)
    tokens, answers, positions, _ = training_data(task)
    initial, frozen = _initial_model(p, task, seed)
    before = evaluate(initial, tokens, answers).accuracy
    tied = p["readout"] == "tied"
    trajectory = None
    if p.get("trajectory_every"):
        trajectory = RecordEvery(p["trajectory_every"], lambda model, steps: _point(
            model, task, tokens, answers, seed, job["probe"], initial, _retained(p, frozen, steps)),
            initial, tie_readout=tied)
    result = train(initial, tokens, answers, steps=p["steps"], lr=p["lr"], frozen=frozen,
                   weight_decay=_decay(p), tie_readout=tied, batch_size=p["batch_size"],
                   stop_at_accuracy=1.0 if p["stop"] == "100%" else None,
                   rng=rng(seed, "batches", STREAM_KEY, p["d"], p["m"]), callback=trajectory,
                   optimizer=p.get("optimizer", "adam"), momentum=p.get("momentum", 0.0))
    trained_seconds = result.seconds
    final = evaluate(result.model, tokens, answers)
    training = {"steps": result.steps, "reached": bool(result.reached), "accuracy": final.accuracy,
                "initial_accuracy": before, "final_loss": float(result.losses[-1]) if result.losses else None,
                "path": result.path, "seconds": trained_seconds}
    trained = _probe(result.model, task, seed, job["probe"], initial=initial,
                     retained=_retained(p, frozen, result.steps))
    untrained = _probe(initial, task, seed, job["probe"])
    record = {**job, "training": _rounded(training), **trained, "initial": untrained}
    if trajectory is not None:
        last = {"step": result.steps, "accuracy": final.accuracy, "summary": trained["summary"],
                "claims": trained["claims"]}
        record["trajectory"] = _rounded([*trajectory.points, last])
    return {**record, "seconds": round(time.perf_counter() - start, 3)}


# ------------------------------------------------------------------------------------------- the jobs


def _grid(grid) -> Grid:
    if isinstance(grid, Grid):
        return grid
    if grid not in GRIDS:
        raise InputError(f"grid must be one of {sorted(GRIDS)}, got {grid!r}")
    return GRIDS[grid]


def _identity(job: dict) -> str:
    """A job's key: every field its result depends on, as canonical JSON."""
    fields = ("kind", "grid", "regime", "construction", "N", "R", "pad_d", "seed", "params", "probe",
              "study_version", "version", "seed_contract")
    return json.dumps({k: job.get(k) for k in fields}, sort_keys=True)


def jobs_of(grid: str | Grid = "default", seeds: Iterable[int] = (0, 1, 2)) -> list[dict]:
    """Every job of a grid and seeds, most expensive first (a long tail on two workers costs wall time).

    Parameters
    ----------
    grid : str or Grid
        A name of :data:`.study_design.GRIDS`, or a grid.
    seeds : list of int
        Seeds per regime (regimes that declare their own seeds keep only those).

    Returns
    -------
    list of dict
        The jobs, each with its ``key`` (every field its record depends on, as canonical JSON).

    Raises
    ------
    InputError
        An unknown grid, no seeds, a bad seed, or regime names that repeat.
    """
    g = _grid(grid)
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise TypeError(f"seeds must be a list, got {seeds!r}")
    seeds = list(seeds)
    if not seeds:
        raise InputError("seeds is empty: nothing to run")
    for seed in seeds:
        try:
            check_seed(seed)
        except ValueError as exc:
            raise InputError(str(exc)) from None
    seeds = list(dict.fromkeys(int(s) for s in seeds))
    names = [r.name for r in g.regimes]
    if len(set(names)) != len(names):
        # a priority list may name a regime again for other seeds (never the same seed twice)
        taken: dict[str, set] = {}
        for r in g.regimes:
            if not g.ordered or r.seeds is None or taken.setdefault(r.name, set()) & set(r.seeds):
                raise InputError(f"grid {g.name!r}: regime names repeat")
            taken[r.name] |= set(r.seeds)
    common = {"grid": g.name, "study_version": STUDY_VERSION, "version": __version__,
              "seed_contract": SEED_CONTRACT}
    jobs = []
    pairs = []
    for regime in g.regimes:
        params = resolve(g.base, regime)
        pairs.append((params["N"], params["R"]))
        for seed in seeds:
            if regime.seeds is not None and seed not in regime.seeds:
                continue
            jobs.append({"kind": "mechanism", "regime": regime.name, "control": regime.control,
                         "description": regime.description, "seed": seed, "params": params,
                         "probe": dict(g.probe), **common})
            if regime.family is not None:
                jobs[-1]["family"] = regime.family
    control_seeds = [s for s in seeds if g.control_seeds is None or s in g.control_seeds]
    for construction, where in g.controls.items():
        for N, R in (dict.fromkeys(pairs) if where is None else where):
            for seed in control_seeds:
                jobs.append({"kind": "control", "construction": construction, "N": N, "R": R, "seed": seed,
                             "probe": {**g.probe, **g.control_probe.get(construction, {})}, **common})
    for N, R, d in g.padded:
        for seed in control_seeds:
            jobs.append({"kind": "control", "construction": "G1", "N": N, "R": R, "pad_d": int(d),
                         "seed": seed, "probe": {**g.probe, **g.control_probe.get("G1", {})}, **common})

    def cost(job: dict) -> float:
        if job["kind"] == "control":
            scale = 10 if job["construction"] == "A1" else 1
            return job["N"] * job["R"] * scale * (1 + job.get("pad_d", 0))
        p = job["params"]
        return p["N"] * p["R"] * (p["d"] + p["m"]) * (3 + (p["steps"] if p["stop"] == "none" else 150) / 200)

    if g.ordered:  # a priority list: controls first (cheap, they calibrate), then the declared order
        jobs.sort(key=lambda job: job["kind"] != "control")
    else:
        jobs.sort(key=cost, reverse=True)
    for job in jobs:
        job["key"] = _identity(job)
    return jobs


def job_estimate(job: dict):
    """Peak bytes of one job in its worker (:func:`run_job`): training (a mechanism job), the probes'
    design matrices, and the probes' own fits (the transfer and functional-encoder trainings, of the same
    sizes).

    Parameters
    ----------
    job : dict
        A job of :func:`jobs_of`.

    Returns
    -------
    georecall.memory.Estimate
    """
    if job["kind"] == "control":
        N, R = job["N"], job["R"]
        promise = registry.get(job["construction"]).nominal_promise(N, R, 1)
        d, m = int(promise.d), int(promise.m)
        est = memory.Estimate("study mechanism")
        est.add(f"control {job['construction']} N={N} R={R} (d = {d}, m = {m})", 8 * 2 * int(promise.params),
                "the grid's N or R")
    else:
        p = job["params"]
        N, R, d, m = p["N"], p["R"], p["d"], p["m"]
        est = estimates.train_estimate(N, R, d, m, batch_size=p["batch_size"], what="study mechanism")
        est.parts = [(f"{label} ({job['regime']})", nbytes, "the grid's N, R or d")
                     for label, nbytes, _ in est.parts]
        est.add("initial weights kept for the probes", 4 * ((2 * N + R + 2) * d + 2 * d * m + 4 * d * d),
                "the grid's N, R or d")
    fits = estimates.train_estimate(N, R, d, m, what="study mechanism")  # its final check is the trainer's
    est.add("the probes' transfer and encoder fits",
            sum(nbytes for label, nbytes, _ in fits.parts if not label.startswith("final")),
            "the grid's N, R or d")
    estimates.probe_estimate(est, N, R, d, m, N, job["probe"]["subjects"])
    return est


def estimate(grid: str | Grid = "default", seeds: Iterable[int] = (0, 1, 2), *, workers: int = 1,
             local: bool = True):
    """Peak bytes of the study: its largest job (:func:`job_estimate`) in each of ``workers`` processes.

    Parameters
    ----------
    grid, seeds
        As in :func:`jobs_of`.
    workers : int
        Jobs running at once on this machine.
    local : bool
        Whether the workers are on this machine (``False``: a remote Dask scheduler's; only the driver
        counts).

    Returns
    -------
    georecall.memory.Estimate

    Raises
    ------
    InputError
        More workers than this machine runs at once (:func:`georecall.estimates.worker_limit`).
    """
    worst = max((job_estimate(job) for job in jobs_of(grid, seeds)), key=lambda e: e.total)
    if not local:
        driver = memory.Estimate("study mechanism")
        driver.add("the driver (records only; the jobs run on the scheduler's workers)", 16 * 2**20, "—")
        return driver
    return estimates.workers_estimate("study mechanism", worst, workers)


# The time model of :func:`time_estimate`, measured on this project's machine (2 shared cores, load ≈ 10)
# with full-batch structured steps: a step costs ≈ 0.65–1.4 ns per unit of N·R·(d·m + N·d) (N = 256…1024,
# d = 20…48), and one set of probes ≈ 4 s at N = 256, d = 20, growing with N·d.
_SECONDS_PER_UNIT = 1.2e-9
_PROBE_SECONDS = 4.0


def time_estimate(jobs: list[dict]) -> dict:
    """Seconds of one core the jobs take, from the time model above (an estimate, not a promise).

    Parameters
    ----------
    jobs : list of dict
        Jobs of :func:`jobs_of`.

    Returns
    -------
    dict
        ``seconds`` (all jobs), ``jobs``, ``steps`` (training steps at most: a regime that stops at 100%
        counts its whole budget) and ``probe_sets`` (probed models: trained, initial, every trajectory point,
        controls).
    """
    seconds, steps, probe_sets = 0.0, 0, 0
    for job in jobs:
        if job["kind"] == "control":
            probe_sets += 1
            seconds += _PROBE_SECONDS * job["N"] / 256 * (1 + job.get("pad_d", 0) / 64)
            continue
        p = job["params"]
        N, R, d, m = p["N"], p["R"], p["d"], p["m"]
        sets = 2 + (p["steps"] - 1) // p["trajectory_every"] if p.get("trajectory_every") else 2
        steps += p["steps"]
        probe_sets += sets
        seconds += p["steps"] * _SECONDS_PER_UNIT * N * R * (d * m + N * d)
        seconds += sets * _PROBE_SECONDS * (N / 256) * (d / 20)
    return {"seconds": seconds, "jobs": len(jobs), "steps": steps, "probe_sets": probe_sets}


# ------------------------------------------------------------------------------------------- the file


StudyFile = ResultsFile  # the old name of what read_study returns (one results-file class)


_REQUIRED = {"mechanism": ("regime", "seed", "params", "probe", "summary", "claims", "initial", "training"),
             "control": ("construction", "N", "R", "seed", "probe", "summary", "claims")}


def _whole(v, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v < 2**63


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _scalar(v) -> bool:
    """What a flat parameter object may hold: a short string, a finite number, a flag or nothing."""
    return v is None or isinstance(v, bool) or _real(v) or (isinstance(v, str) and len(v) <= 1000)


def _flat(v, size: int = 200) -> bool:
    return isinstance(v, dict) and len(v) <= size and all(
        isinstance(k, str) and (_scalar(x) or isinstance(x, list) and len(x) <= 64 and all(map(_scalar, x)))
        for k, x in v.items())


def _numbers(v) -> bool:
    """A probe summary: names to finite numbers or nothing (``_stats`` averages them)."""
    return isinstance(v, dict) and len(v) <= 1000 and all(
        isinstance(k, str) and (x is None or _real(x)) for k, x in v.items())


def _flags(v) -> bool:
    """Claims met: names to true/false (a missing claim counts as not met)."""
    return isinstance(v, dict) and len(v) <= 100 and all(
        isinstance(k, str) and isinstance(x, bool) for k, x in v.items())


def _training(v) -> bool:
    return isinstance(v, dict) and isinstance(v.get("reached"), bool) and all(
        name in v and (v[name] is None or _real(v[name])) for name in ("steps", "accuracy", "final_loss",
                                                                       "seconds"))


def _initial(v) -> bool:
    return isinstance(v, dict) and _numbers(v.get("summary")) and _flags(v.get("claims"))


def _text(v) -> bool:
    return isinstance(v, str) and len(v) <= 1000


# What the report (:func:`.study_report.summarize`) reads of each kind of record, with the type it needs; any
# other field is kept as is.
_FIELDS = {
    "mechanism": {"regime": _text, "seed": _whole, "params": lambda v: _flat(v) and _whole(v.get("d"), 1)
                  and isinstance(v.get("init"), str), "probe": _flat, "summary": _numbers, "claims": _flags,
                  "initial": _initial, "training": _training},
    "control": {"construction": _text, "N": lambda v: _whole(v, 1), "R": lambda v: _whole(v, 1),
                "seed": _whole, "probe": _flat, "summary": _numbers, "claims": _flags},
}
_OPTIONAL = {"seconds": _real, "description": _text, "control": lambda v: isinstance(v, bool),
             "grid": lambda v: v is None or _text(v), "version": _scalar, "study_version": _scalar,
             "seed_contract": _scalar, "d": lambda v: v is None or _whole(v),
             "m": lambda v: v is None or _whole(v)}


def _usable(value) -> bool:
    """Whether a parsed line is a study record whose every field :func:`.study_report.summarize` reads has the
    type it needs (a record of another shape is alien: counted and skipped, never a traceback)."""
    if not isinstance(value, dict) or value.get("kind") not in _FIELDS:
        return False
    fields = _FIELDS[value["kind"]]
    if not all(name in value and check(value[name]) for name, check in fields.items()):
        return False
    return all(check(value[name]) for name, check in _OPTIONAL.items() if name in value)


def read_study(path: str, *, budget: Budget | None = None, require: bool = False,
               writing: bool = False) -> ResultsFile:
    """Read a study file: torn lines (a writer killed mid-line), alien lines (not a study record, or one with
    a field of the wrong type) and duplicates (a key seen before) are counted and skipped. A missing file is
    empty. With ``budget`` (a memory budget) the file is counted against it before it is parsed.

    Parameters
    ----------
    path : str
        The JSONL file (missing: empty).
    budget : Budget or None
        Memory budget.
    require : bool
        Refuse a file that holds no study record (:func:`georecall.results_files.require_kind`: a sweep
        file, a model file, an empty file).
    writing : bool
        With ``require``: the file is about to be appended to (empty or missing is a fresh start).

    Returns
    -------
    georecall.results_files.ResultsFile
        The usable records (the first of each key) and the counts of skipped lines.

    Raises
    ------
    InputError
        ``path`` cannot be read, or is larger than ``budget`` allows; with ``require``, it holds no study
        record.
    """
    contents = read_jsonl(path, ResultsFile(), _usable, _identity, budget=budget, what="study mechanism")
    if require:
        require_kind(contents, path, _FIELDS, "study records", writing=writing)
    return contents


def _read_to_append(path: str, *, budget: Budget | None = None) -> ResultsFile:
    """:func:`read_study` of a file the study is about to append to (refused if it holds another kind)."""
    return read_study(path, budget=budget, require=True, writing=True)


# ------------------------------------------------------------------------------------------- the driver


def _describe(record: dict) -> str:
    if record["kind"] == "control":
        return f"control {record['construction']} N={record['N']} R={record['R']} seed {record['seed']}"
    return f"{record['regime']} seed {record['seed']}"


def run_study(out: str, grid: str | Grid = "default", seeds: Iterable[int] = (0, 1, 2), workers: int = 1,
              scheduler: str | None = None, progress: bool | Callable[[dict], None] = True, *,
              lock_timeout: float | None = None, connect_timeout: float = 10.0, max_jobs: int | None = None,
              log: Callable[[str], None] | None = None, worker_timeout: float | None = None,
              budget: Budget | None = None) -> list[dict]:
    """Run (or resume) the mechanism study; return the grid's records (trials and controls).

    Parameters
    ----------
    out : str
        The JSONL results file (created if missing; validated, then locked, before any work).
    grid : "default", "quick" or Grid
        The declared grid (:data:`GRIDS`).
    seeds : list of int
        Seeds per regime (the default grid wants at least 3).
    workers : int
        Local processes when ``scheduler`` is None (1: jobs run in this process).
    scheduler : str, optional
        ``"local:W"`` or a Dask scheduler address (:func:`.executors.open_executor`).
    progress : bool or callable
        ``True``: one line per finished job on stderr (done/total, elapsed, ETA from the throughput).
        A callable receives ``{"done", "total", "new", "elapsed", "eta", "message"}`` instead.
    lock_timeout, connect_timeout : float
        As in :func:`georecall.experiments.sweep.sweep`.
    max_jobs : int, optional
        Stop after that many new records (the file stays consistent; for tests of resumption).
    log : callable, optional
        One-line notes (skipped lines, lock waits, interruption); default stderr.
    worker_timeout : float, optional
        Seconds without any Dask worker before the study gives up (default
        :data:`~georecall.experiments.executors.WORKER_TIMEOUT`).
    budget : Budget or None
        Memory budget the existing results file is counted against before it is read.

    Raises
    ------
    InputError
        Bad grid, seeds, workers or output path; an output file holding lines, none a study record; lock
        not obtained; scheduler not reached.
    KeyboardInterrupt
        Re-raised after the workers are stopped and a note is logged; rerun the same call to resume.
    """
    jobs = jobs_of(grid, seeds)
    workers = check_positive_int("workers", workers)
    if max_jobs is not None:
        max_jobs = check_positive_int("max_jobs", max_jobs)
    out = validate_output_path(out, what="results file")
    log = log if log is not None else stderr_note
    wanted = {job["key"] for job in jobs}
    with open_results(out, _read_to_append, lock_timeout=lock_timeout, log=log, budget=budget) as contents:
        have = {_identity(r) for r in contents.records}
        todo = [job for job in jobs if job["key"] not in have]
        if todo:
            patience = WORKER_TIMEOUT if worker_timeout is None else worker_timeout
            drive(_Jobs(out, len(jobs), len(todo), progress, max_jobs, time_estimate(todo)), todo,
                  lambda: open_executor(scheduler, workers, connect_timeout=connect_timeout, message=log,
                                        worker_timeout=patience), workers=workers, path=out, log=log)
        return [r for r in read_study(out, budget=budget).records if _identity(r) in wanted]


class _Jobs(JobList):
    """The study's jobs as a job list of :func:`.driver.drive`: a unit is one job, its one task
    :func:`run_job`; each record is appended as it arrives."""

    noun = "job"

    def __init__(self, path: str, total: int, todo: int, progress, max_jobs: int | None, cost: dict):
        super().__init__()
        self.path, self.total, self.progress, self.max_jobs = path, total, progress, max_jobs
        self.done = total - todo
        self.cost = cost

    def report(self, message: str) -> None:
        """One line on stderr, or ``{"done", "total", "new", "elapsed", "eta", "message"}`` to a callback."""
        if self.progress is False or self.progress is None:
            return
        elapsed, eta = self.tally.elapsed(), self.tally.eta(self.total - self.done)
        if callable(self.progress):
            self.progress({"done": self.done, "total": self.total, "new": self.tally.new, "elapsed": elapsed,
                           "eta": eta, "message": message})
        else:
            print(f"study: {self.done}/{self.total} done, elapsed {clock(elapsed)}, ETA {clock(eta)} | "
                  f"{message}", file=sys.stderr, flush=True)

    def opened(self, handle, units: int) -> None:
        cost = self.cost
        self.report(f"{units} job(s) to run on {handle.description}; estimate: {cost['steps']:,} training "
                    f"steps at most and {cost['probe_sets']} probe sets, about {clock(cost['seconds'])} "
                    f"of one core on this project's machine (2 shared cores)")

    def start(self, job: dict) -> list[Call]:
        return [Call(run_job, (job,), job, f"the job {_describe(job)}")]

    def accept(self, task: Call, record: dict) -> list[Call]:
        append_jsonl(self.path, record)
        self.done += 1
        self.report(f"{_describe(record)} ({record['seconds']:.1f} s)")
        if self.max_jobs is not None and self.tally.new >= self.max_jobs:
            raise Stop
        return []


# ------------------------------------------------------------------------------------ the verify row


def section_mechanism(seed: int = 0, progress: bool = False, *, R: int = 4) -> list:
    """``georecall verify`` row: on a small regime (N = 256, R = 4, d = 2d* = 20, m = 4d, Adam 1e-2, stop at
    100%), with the ridge probes: G1 scores every probe exactly and meets every claim's criterion, and so does
    G1 embedded in a residual 3× wider (randomly rotated, the same logits: the positive control at a width
    where an unregularized fit would be underdetermined); the trained model's initial weights and A1 meet
    none (the negative controls). The trained model's values are reported, not judged.

    Parameters
    ----------
    seed : int
        The run seed (task, initial weights, probes).
    progress : bool
        One line on stderr before the work.
    R : int
        Relations (the row's 4; 2, with d = 2d* = 10, is the tests' shorter case of the same checks).

    Returns
    -------
    list
        One ``ClaimReport``.
    """
    if progress:
        print(f"mechanism: probes on G1, A1, a trained model and its initial weights (N=256, R={R})",
              file=sys.stderr, flush=True)
    start = time.perf_counter()
    N = 256
    params = resolve({**QUICK_BASE, "N": N, "R": R}, Regime("verify", "verify row"))
    task = task_for_seed(N, R, seed)
    tokens, answers, _, _ = training_data(task)
    initial, frozen = _initial_model(params, task, seed)
    trained = train(initial, tokens, answers, steps=params["steps"], lr=params["lr"], frozen=frozen,
                    rng=rng(seed, "batches", STREAM_KEY, params["d"], params["m"]))
    budgets: dict[str, Any] = {"holdout": 0.25, "subjects": 128, "transfer_steps": None, "encoder_steps": 50}
    references = probes.reference_models(task)
    wide = 3 * references["G1"].d  # R·wide + 1 > 192 fit subjects: OLS would interpolate
    references["G1 wider"] = probes_mechanism.embed_wider(references["G1"], wide,
                                                          rng(seed, "noise", STREAM_KEY, 21, wide))
    models = {**references, "trained": trained.model, "untrained": initial}
    summaries = {name: probes_mechanism.mechanism_probes(model, task,
                                                         initial=initial if name == "trained" else None,
                                                         seed=seed, **budgets)["summary"]
                 for name, model in models.items()}
    met = {name: claims_met(s) for name, s in summaries.items()}
    g1 = summaries["G1"]
    exact = ("forward_r2", "reverse_r2", "probe_accuracy", "follows", "others_unchanged",
             "selective_fraction", "gated_mass", "closed_form_transfer", "encoder_accuracy_A",
             "functional_zero_shot")
    checks = {
        "G1: fits R² = 1, probes, interventions, selectivity, closed-form and functional transfer = 100%":
            all(abs(g1[k] - 1.0) < 1e-9 for k in exact),
        "G1 meets every claim's criterion": all(met["G1"].values()),
        f"G1 embedded in d = {wide} (rotated) meets every claim's criterion": all(met["G1 wider"].values()),
        "untrained weights meet no claim's criterion": not any(met["untrained"].values()),
        "untrained weights answer about 1/N of their facts (< 5/N)":
            summaries["untrained"]["accuracy"] < 5 / N,
        "A1 meets no claim's criterion (per-fact units: breadth 1/N)": not any(met["A1"].values()),
    }
    return [claim_report("mechanism probes vs controls", {"N": N, "R": R, "d": params["d"], "seed": seed},
                         checks, time.perf_counter() - start, {"d": params["d"], "m": params["m"]},
                         {"summaries": summaries, "claims": met, "trained_reached": bool(trained.reached),
                          "trained_steps": trained.steps, "thresholds": dict(THRESHOLDS)})]
