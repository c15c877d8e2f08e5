"""The mechanism study: does gradient descent find G1's geometry (docs/theory.md, "Gradient descent")?

A declared grid of training regimes × seeds. Each trial trains one model on ``task_for_seed(N, R, seed)``,
runs every probe of :func:`.probes.mechanism_probes` on the trained model *and* on its initial
(untrained) weights, and writes one record. Control records probe the constructions G1 (the geometry, where
every probe is exact) and A1 (facts in per-fact MLP units) on the same tasks. The summary gives mean ± sd over
seeds per regime and probe, the controls beside them, and one verdict per claim by the thresholds below.

Everything that decides a verdict is declared here, before any run (and in docs/study.md):

- :data:`THRESHOLDS` and :func:`claims_met`: when a claim holds for one trained model;
- :data:`REGIMES` (default grid) and :data:`QUICK_REGIMES`: what is trained, as data; a regime is the
  :data:`BASE` regime with a few fields changed (one factor at a time, except where a regime says otherwise);
- :data:`D_STAR`: the capacity thresholds the widths are multiples of (README's measured values, or its fit).

A claim *holds in a regime* when every seed's trained model meets its criterion, holds *partly* when some
seeds do, and *fails* otherwise.

Randomness (the seed contract, ``theory.seeds``): the task is ``task_for_seed(N, R, seed)``; initial weights
come from ``rng(seed, "init", 12, d, m)`` (regimes of one shape start from the same draws: a small-init
regime is the base draw scaled), batch order from ``rng(seed, "batches", 12, d, m)``, the noise added to G1
from ``rng(seed, "noise", 12)``; the probes use the ``probes`` and ``transfer`` streams (the same splits and
the same new task B for every model of one ``(N, R, seed)``).

The results file is JSONL, written only by the driver (the process that called :func:`run_study`) under the
advisory lock of :class:`georecall.io.FileLock`; trials run on the executors of
:mod:`.executors` (this process, local processes, or Dask). Every record carries its key
(regime, seed, resolved parameters, probe settings, study version, package version, seed contract); a rerun
skips every job whose key is in the file, so an interrupted study loses at most the jobs in flight.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from georecall import memory
from georecall.constructions import registry
from georecall.errors import InputError
from georecall.io import ResultsFile, append_jsonl, read_jsonl, validate_output_path
from georecall.memory import Budget
from georecall.theory import __version__
from georecall.theory.seeds import check_seed, rng
from georecall.theory.tasks import check_positive_int, task_for_seed
from georecall.verify.checking.check import claim_report
from georecall.verify.checking.exact import evaluate as check_queries  # the weights' own, exact
from georecall.verify.experiments import figures as drawing
from georecall.verify.experiments import probes
from georecall.verify.experiments.driver import Call as Task  # the driver's Call; the body still says Task
from georecall.verify.experiments.driver import JobList, Stop, clock, drive, open_results, stderr_note
from georecall.verify.experiments.executors import WORKER_TIMEOUT, open_executor
from georecall.verify.training.parameters import init_model
from georecall.verify.training.train import GROUPS, train, training_data

__all__ = [
    "BASE",
    "CLAIMS",
    "D_STAR",
    "GRIDS",
    "PROBE_SETTINGS",
    "QUICK_BASE",
    "QUICK_REGIMES",
    "REGIMES",
    "STUDY_VERSION",
    "THRESHOLDS",
    "Grid",
    "Regime",
    "StudyFile",
    "claims_met",
    "estimate",
    "figures",
    "jobs_of",
    "read_study",
    "regime_verdicts",
    "render_summary",
    "resolve",
    "run_job",
    "run_study",
    "section_mechanism",
    "summarize",
]

# bump when a trial's meaning changes: records of another version are never reused (2: ridge probes, issue 21;
# 3: the power columns decode_power and superposition_power, issue 35)
STUDY_VERSION = 3
STREAM_KEY = 12  # the study's key in the init / batches / noise streams (issue 12)
SEED_CONTRACT = 1

# ------------------------------------------------------------------------------ declared before any run

THRESHOLDS: dict[str, float] = {
    # superposition: the embeddings, or what training wrote into them (E − E0), are a linear superposition of
    # the attribute read-out vectors (held-out forward R²), and the network reads them so (interventions)
    "superposition_r2": 0.95,
    "follows": 0.90,
    "others_unchanged": 0.90,
    # relation-selective MLP: units fire for one relation (selectivity >= SELECTIVITY_THRESHOLD = 0.9), they
    # carry the activation mass, and they are selectors, not per-fact memories (breadth >= 5% of queries)
    "selective_fraction": 0.90,
    "gated_mass": 0.90,
    "breadth_median": 0.05,
    # zero-shot transfer: a fixed linear encoder of attribute vectors (closed form, or trained through the
    # frozen network on task A) answers a brand-new task B
    "zero_shot": 0.90,
}
# A negative superposition verdict needs its planted control (probes.superposition_power: the same shape, SNR
# 100, the forward fit reaching R² 0.95) detected in at least this share of the draws (issue 35).
POWER_REQUIRED = 0.9

CLAIMS: dict[str, str] = {
    "superposition": "subject embeddings are linear superpositions of their attributes' vectors, read "
                     "causally",
    "selective_mlp": "the MLP is a relation-conditioned ReLU selector",
    "zero_shot": "the frozen network transfers zero-shot to new bijections",
}


def claims_met(summary: dict) -> dict[str, bool]:
    """Whether one probed model meets each claim's declared criterion (:data:`THRESHOLDS`).

    - ``superposition``: ``superposition_r2 >= 0.95`` (``max`` of the held-out forward R² of E and of E − E0),
      interventions followed ``>= 0.90`` and other relations unchanged ``>= 0.90``;
    - ``selective_mlp``: ``selective_fraction >= 0.90``, ``gated_mass >= 0.90``, ``breadth_median >= 0.05``;
    - ``zero_shot``: ``max(closed_form_transfer, functional_zero_shot) >= 0.90``.

    A missing (``None``) value fails its criterion.

    Parameters
    ----------
    summary : dict
        A probe summary (:func:`.probes.mechanism_probes`' ``summary``); a missing or ``None`` value fails its
        criterion.

    Returns
    -------
    dict
        ``{claim: met}`` over :data:`CLAIMS`.
    """
    def at_least(name: str, key: str | None = None) -> bool:
        value = summary.get(name)
        return value is not None and value >= THRESHOLDS[key or name]

    transfer = [float(v) for k in ("closed_form_transfer", "functional_zero_shot")
                if (v := summary.get(k)) is not None]
    return {
        "superposition": at_least("superposition_r2") and at_least("follows")
        and at_least("others_unchanged"),
        "selective_mlp": at_least("selective_fraction") and at_least("gated_mass")
        and at_least("breadth_median"),
        "zero_shot": bool(transfer) and max(transfer) >= THRESHOLDS["zero_shot"],
    }


# Capacity thresholds d* (smallest d reaching 100%, m = 4d, learned embeddings). N = 1024: README's measured
# values (3 seeds, <= 500 Adam steps: d* = 6 at R = 2, 12 at R = 4). N = 4096 and N = 256, R = 2: README's fit
# d* ≈ 0.442·R·ln N rounded up (extrapolated, not measured). N = 256, R = 4: README's measured 10.
D_STAR: dict[tuple[int, int], dict] = {
    (1024, 2): {"d_star": 6, "source": "README measured"},
    (1024, 4): {"d_star": 12, "source": "README measured"},
    (4096, 2): {"d_star": 8, "source": "README fit 0.442·R·ln N (extrapolated)"},
    (4096, 4): {"d_star": 15, "source": "README fit 0.442·R·ln N (extrapolated)"},
    (256, 2): {"d_star": 5, "source": "README fit 0.442·R·ln N (extrapolated)"},
    (256, 4): {"d_star": 10, "source": "README measured"},
}


@dataclass(frozen=True)
class Regime:
    """One training regime: the base regime with ``changes``; ``control`` marks the bracketing controls."""

    name: str
    description: str
    changes: dict = field(default_factory=dict)
    control: bool = False
    family: str | None = None  # the d axis: the regime this one is a width of (None: its own name)
    seeds: tuple[int, ...] | None = None  # the declared seeds of this regime (None: every seed asked for)


# The base regime. ``d = d_factor · d*`` unless ``d`` is given (or ``d = round(d_g1_factor · d_G1)``, d_G1
# the d of G1 at (N, R) with binary codes: the d axis of issue 21); ``m = width_factor · d``. ``stop``: "100%"
# (stop when every query is answered, at most ``steps``) or "none" (exactly ``steps`` steps). ``readout``:
# "untied", "tied" (U = E) or "frozen" (U stays at its random init). ``decay``: AdamW λ; ``decay_groups``:
# "all", "mlp" or "embeddings" (entity and relation tables; not U). ``init``: "fan-in" (init_model),
# "g1+noise" (G1's weights plus Gaussian noise of std ``noise`` × each array's RMS), "g1-selector" (G1's MLP,
# attention, relation embeddings and U, frozen; entity embeddings from the fan-in init, the only trained
# group). ``lam``: G1's read-out scale λ in the G1-initialised regimes (at λ = 1 G1's own cross-entropy is 5.1
# on N = 1024, R = 4, although it answers every query; at λ = 16 it is 0.017).
BASE: dict = {"N": 1024, "R": 4, "d": None, "d_factor": 2, "d_g1_factor": None, "width_factor": 4,
              "attention": "uniform", "init": "fan-in", "init_scale": 1.0, "readout": "untied", "decay": 0.0,
              "decay_groups": "all", "lr": 1e-2, "steps": 3000, "stop": "100%", "batch_size": None,
              "noise": 0.0, "lam": 1.0}
LONG = {"steps": 1000, "stop": "none"}  # loss ≈ 1e-4 at step ~800 on the base regime: "train to low loss"

REGIMES: tuple[Regime, ...] = (
    Regime("base", "stop at 100% (N=1024, R=4, d=2d*=24, m=4d, Adam 1e-2, full batch)"),
    Regime("long", "1000 steps, no stop at 100%: train to loss ≈ 1e-4", LONG),
    Regime("wd-all", "long, AdamW λ=1 on every group", {**LONG, "decay": 1.0}),
    Regime("wd-mlp", "long, AdamW λ=1 on the MLP only", {**LONG, "decay": 1.0, "decay_groups": "mlp"}),
    Regime("wd-emb", "long, AdamW λ=1 on the embeddings only (E, Q)",
           {**LONG, "decay": 1.0, "decay_groups": "embeddings"}),
    Regime("d=1x", "d = d* = 12", {"d_factor": 1}),
    Regime("d=4x", "d = 4d* = 48", {"d_factor": 4}),
    Regime("N1024-R2", "N=1024, R=2, d=2d*=12", {"R": 2}),
    Regime("N4096-R2", "N=4096, R=2, d=2d*=16", {"N": 4096, "R": 2}),
    Regime("N4096-R4", "N=4096, R=4, d=2d*=30", {"N": 4096, "R": 4}),
    Regime("tied", "tied read-out U = E", {"readout": "tied"}),
    Regime("frozen-U", "read-out frozen at its random init", {"readout": "frozen"}),
    Regime("softmax", "softmax attention (1 head) with position embeddings; stop at 100% or 1000 steps",
           {"attention": "softmax", "steps": 1000}),
    Regime("small-init", "every group initialised at 0.1× the fan-in scale", {"init_scale": 0.1}),
    # where our reading of the paper says the geometry should appear: a generic (fixed) read-out, as in G1,
    # with the initialisation decayed away; the rich (small-init) regime with decay; minibatch noise and decay
    Regime("frozen-U+wd-emb", "long, U frozen at init, AdamW λ=1 on E and Q: facts must be written into E",
           {**LONG, "readout": "frozen", "decay": 1.0, "decay_groups": "embeddings"}),
    Regime("small-init+wd", "long, 0.1× init, AdamW λ=1 on every group",
           {**LONG, "init_scale": 0.1, "decay": 1.0}),
    Regime("minibatch+wd", "long (1000 steps of batch 256), AdamW λ=1 on every group",
           {**LONG, "decay": 1.0, "batch_size": 256}),
    # the two controls that bracket the claim (declared after a training-only pilot, before the run: at G1's
    # λ = 1, E-only training reached 26% in 3000 steps, because cross-entropy barely separates G1's own exact
    # solution there; λ = 16 makes it low-loss)
    Regime("ctrl-a:G1+noise", "control (a): start at G1's weights (λ=16; d=54, m=80) + noise 0.5×RMS, "
           "train long", {**LONG, "init": "g1+noise", "noise": 0.5, "lam": 16.0}, control=True),
    Regime("ctrl-b:G1-selector", "control (b): G1's MLP, attention, Q, U (λ=16) frozen; only E learned",
           {"init": "g1-selector", "lam": 16.0}, control=True),
    Regime("ctrl-b:G1-selector,λ=1", "control (b) at G1's default read-out scale λ=1 (1000 steps at most)",
           {"init": "g1-selector", "steps": 1000}, control=True),
)

QUICK_BASE: dict = {**BASE, "N": 256, "R": 4, "steps": 1500}
QUICK_REGIMES: tuple[Regime, ...] = (
    Regime("base", "stop at 100% (N=256, R=4, d=2d*=20)"),
    Regime("long", "300 steps", {"steps": 300, "stop": "none"}),
    Regime("wd-all", "300 steps, AdamW λ=1 on every group", {"steps": 300, "stop": "none", "decay": 1.0}),
    Regime("tied", "tied read-out", {"readout": "tied"}),
    # control (b) as in the default grid (λ = 16: at λ = 1 E-only training crawls, 20-50 s a seed here),
    # capped at 300 steps so that the quick grid stays quick (its time: README, "Does gradient descent find
    # the geometry?")
    Regime("ctrl-b:G1-selector", "control (b) at λ=16, at most 300 steps",
           {"init": "g1-selector", "lam": 16.0, "steps": 300}, control=True),
)

# Probe budgets (every model, trained or initial): held-out share of the fits, intervened subjects, Adam
# steps of the fitted transfer (E trained on task B) and of the functional encoder (trained through the
# network on task A)
PROBE_SETTINGS: dict = {"holdout": 0.25, "subjects": 256, "transfer_steps": 100, "encoder_steps": 200,
                        "lr": 1e-2}
QUICK_PROBE_SETTINGS: dict = {**PROBE_SETTINGS, "transfer_steps": 50, "encoder_steps": 50}


# ------------------------------------------------------------ the d axis (issue 21), declared before its run
#
# Widths relative to G1's: d = round(f·d_G1) with d_G1 = 54 at N = 1024, R = 4 and 64 at N = 4096, R = 4
# (m = 4d throughout). At f ≥ 1 the predicted structure is representable; at f = 0.5 it is not (G1 needs
# d_G1).
D_AXIS_FACTORS: dict[tuple[int, int], tuple[float, ...]] = {(1024, 4): (0.5, 1.0, 2.0, 4.0),
                                                             (4096, 4): (0.5, 1.0)}
D_AXIS_FAMILIES: tuple[Regime, ...] = (
    Regime("base", "stop at 100% (at most 3000 steps), Adam 1e-2, full batch"),
    Regime("long", "1000 steps, no stop at 100%", LONG),
    Regime("wd-all", "long, AdamW λ=1 on every group", {**LONG, "decay": 1.0}),
    Regime("small-init+wd", "long, 0.1× init, AdamW λ=1 on every group", {**LONG, "init_scale": 0.1,
                                                                          "decay": 1.0}),
    Regime("frozen-U+wd-emb", "long, U frozen at init, AdamW λ=1 on E and Q",
           {**LONG, "readout": "frozen", "decay": 1.0, "decay_groups": "embeddings"}),
)
# the families run at N = 4096 (the smaller set)
D_AXIS_FAMILIES_4096 = ("base", "wd-all")


def d_axis_regimes(factors: dict[tuple[int, int], tuple[float, ...]] = D_AXIS_FACTORS,
                   families: tuple[Regime, ...] = D_AXIS_FAMILIES,
                   families_4096: tuple[str, ...] = D_AXIS_FAMILIES_4096,
                   seeds: dict | None = None) -> tuple[Regime, ...]:
    """The d axis as regimes ``"{family} N={N} d={f}×d_G1"``; ``seeds`` maps ``(family, N, f)`` to declared
    seeds (missing: every seed asked for).

    Parameters
    ----------
    factors : dict
        ``{(N, R): widths}``, the widths as multiples of G1's d.
    families, families_4096 : tuple
        The training families at N = 1024 and at N = 4096.
    seeds : dict, optional
        Declared seeds per ``(family, N, factor)``.

    Returns
    -------
    tuple of Regime
    """
    out = []
    for (N, R), fs in factors.items():
        for family in families:
            if N != 1024 and family.name not in families_4096:
                continue
            for f in fs:
                name = f"{family.name} N={N} d={f:g}×d_G1"
                out.append(Regime(name, f"{family.description}; N={N}, R={R}, d = {f:g}·d_G1, m = 4d",
                                  {**family.changes, "N": N, "R": R, "d_g1_factor": f}, family=family.name,
                                  seeds=None if seeds is None else seeds.get((family.name, N, f), ())))
    return tuple(out)


# Probe budgets of the d axis: no fitted transfer (not a criterion); the functional encoder gets 100 steps
D_AXIS_PROBE_SETTINGS: dict = {**PROBE_SETTINGS, "transfer_steps": None, "encoder_steps": 100}
# G1 embedded in a wider residual (probes.embed_wider: padded, randomly rotated; the same logits): the
# positive control at every width of the axis, and at the d = 128, 256
D_AXIS_PADDED: tuple[tuple[int, int, int], ...] = ((1024, 4, 108), (1024, 4, 128), (1024, 4, 216),
                                                   (1024, 4, 256))


@dataclass(frozen=True)
class Grid:
    """A study grid: the base regime, its variations, probe budgets and the constructions probed as controls
    (``controls``: construction id -> the (N, R) pairs at which it is built; ``None``: every pair of the
    grid)."""

    name: str
    base: dict
    regimes: tuple[Regime, ...]
    probe: dict
    controls: dict = field(default_factory=lambda: {"G1": None, "A1": ((1024, 4),)})
    control_probe: dict = field(default_factory=dict)  # per construction: probe settings overriding ``probe``
    padded: tuple[tuple[int, int, int], ...] = ()  # (N, R, d): G1 embedded wider (probes.embed_wider)
    ordered: bool = False  # True: run controls first, then regimes in declared order (a priority list)
    control_seeds: tuple[int, ...] | None = None  # the seeds controls are probed at (None: every seed)


GRIDS: dict[str, Grid] = {
    # A1 has N·R MLP units: probed at the base size only, with 50-step transfer budgets (its per-fact units
    # make transfer impossible by construction; the budgets only have to show it)
    "default": Grid("default", BASE, REGIMES, PROBE_SETTINGS,
                    control_probe={"A1": {"transfer_steps": 50, "encoder_steps": 50}}),
    "quick": Grid("quick", QUICK_BASE, QUICK_REGIMES, QUICK_PROBE_SETTINGS,
                  controls={"G1": None, "A1": ((256, 4),)}),
    # the d axis as the issue asks for it: 5 families × 4 widths at N = 1024 and 2 × 2 at N = 4096, 3 seeds
    "d-axis": Grid("d-axis", BASE, d_axis_regimes(), D_AXIS_PROBE_SETTINGS,
                   control_probe={"A1": {"encoder_steps": 50}}, padded=D_AXIS_PADDED),
    # what was run of it on this shared 2-core machine (one worker under nice, to end by 15:30 UTC): see
    # D_AXIS_RUN_ORDER
    "d-axis-run": Grid("d-axis-run", BASE, (), D_AXIS_PROBE_SETTINGS,
                       controls={"G1": ((1024, 4), (4096, 4)), "A1": ((1024, 4),)},
                       control_probe={"A1": {"encoder_steps": 50}}, padded=D_AXIS_PADDED, ordered=True,
                       control_seeds=(0,)),
}

# The cut, declared after timing one job (wd-all at d = d_G1, N = 1024, seed 0: 130 s wall, 116 s of it
# training, at ~26% of a core under the machine's load; the cost of a 1000-step job scales with
# d·m + d·N per query: ≈ 55 s at d = 27, 340 s at 108, 1000 s at 216; N = 4096 costs ≈ 4–8× more per step)
# and before any probe value of the run was seen. Jobs run in this order (controls first); the run is
# stopped at 15:30 UTC and whatever did not finish is reported as not run.
D_AXIS_RUN_ORDER: tuple[tuple[str, int, float, int], ...] = (
    *(("base", 1024, f, 0) for f in (0.5, 1.0, 2.0, 4.0)),
    *(("wd-all", 1024, f, 0) for f in (0.5, 1.0, 2.0, 4.0)),
    *(("small-init+wd", 1024, f, 0) for f in (0.5, 1.0, 2.0)),
    *(("frozen-U+wd-emb", 1024, f, 0) for f in (0.5, 1.0, 2.0)),
    *(("long", 1024, f, 0) for f in (0.5, 1.0, 2.0)),
    ("base", 4096, 0.5, 0),
    # only if time allows
    *(("base", 1024, f, 1) for f in (0.5, 1.0, 2.0)),
    *(("wd-all", 1024, f, 1) for f in (0.5, 1.0, 2.0)),
    ("small-init+wd", 1024, 4.0, 0), ("frozen-U+wd-emb", 1024, 4.0, 0), ("long", 1024, 4.0, 0),
    ("wd-all", 4096, 0.5, 0), ("base", 4096, 1.0, 0),
    # item 5, declared at 13:59 UTC while the run was at its 10th job, before any probe value was looked at:
    # more seeds if the list above ends before 15:30 (the same command, rerun, resumes with these)
    *((family, 1024, f, 1) for family in ("small-init+wd", "frozen-U+wd-emb", "long")
      for f in (0.5, 1.0, 2.0)),
    ("base", 1024, 4.0, 1), ("wd-all", 1024, 4.0, 1),
    *((family, 1024, f, 2) for family in ("base", "wd-all", "small-init+wd", "frozen-U+wd-emb", "long")
      for f in (0.5, 1.0, 2.0)),
    ("base", 4096, 0.5, 1),
)


def _run_regimes() -> tuple[Regime, ...]:
    by_name = {r.name: r for r in d_axis_regimes()}
    out = []
    for family, N, f, seed in D_AXIS_RUN_ORDER:
        r = by_name[f"{family} N={N} d={f:g}×d_G1"]
        out.append(Regime(r.name, r.description, r.changes, family=r.family, seeds=(seed,)))
    return tuple(out)


GRIDS["d-axis-run"] = replace(GRIDS["d-axis-run"], regimes=_run_regimes())

_PARAMS = tuple(BASE)
_CHOICES = {"attention": ("uniform", "softmax"), "init": ("fan-in", "g1+noise", "g1-selector"),
            "readout": ("untied", "tied", "frozen"), "decay_groups": ("all", "mlp", "embeddings"),
            "stop": ("100%", "none")}


def g1_d(N: int, R: int) -> int:
    """G1's residual width at (N, R) (binary codes): ``R·D + R + D``, D = ⌈log2 N⌉.

    Parameters
    ----------
    N, R : int
        Entities and relations.

    Returns
    -------
    int
    """
    return int(registry.get("G1").nominal_promise(N, R, 1).d)


def resolve(base: dict, regime: Regime) -> dict:
    """The concrete parameters of a regime: base + changes, with ``d`` and ``m`` computed (``InputError`` on
    an unknown field, a bad choice, or an (N, R) without a declared d*). G1-initialised regimes take G1's d
    and m.

    Parameters
    ----------
    base : dict
        A grid's base parameters (:data:`BASE`, :data:`QUICK_BASE`).
    regime : Regime
        Its changes.

    Returns
    -------
    dict
        Every parameter of :data:`BASE`, with ``d`` and ``m`` concrete.

    Raises
    ------
    InputError
        An unknown field, a value outside its choices, or an (N, R) without a declared d* and no ``d``.
    """
    unknown = set(regime.changes) - set(_PARAMS)
    if unknown:
        raise InputError(f"regime {regime.name!r}: unknown fields {sorted(unknown)}; fields: {list(_PARAMS)}")
    p = {**base, **regime.changes}
    for name, choices in _CHOICES.items():
        if p[name] not in choices:
            raise InputError(f"regime {regime.name!r}: {name} must be one of {choices}, got {p[name]!r}")
    N, R = check_positive_int("N", p["N"]), check_positive_int("R", p["R"])
    if p["init"] == "fan-in":
        if p["d"] is not None:
            d = check_positive_int("d", p["d"])
        elif p["d_g1_factor"] is not None:
            factor = p["d_g1_factor"]
            if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
                raise InputError(f"regime {regime.name!r}: d_g1_factor must be a positive number, got "
                                 f"{factor!r}")
            d = max(1, int(round(factor * g1_d(N, R))))
        elif (N, R) in D_STAR:
            d = int(math.ceil(p["d_factor"] * D_STAR[(N, R)]["d_star"]))
        else:
            raise InputError(f"regime {regime.name!r}: no declared d* for N={N}, R={R} (D_STAR); give d")
        m = p["width_factor"] * d
    else:
        promise = registry.get("G1").nominal_promise(N, R, 1)
        d, m = promise.d, promise.m
    check_positive_int("steps", p["steps"])
    if p["batch_size"] is not None:
        check_positive_int("batch_size", p["batch_size"])
    return {**p, "d": d, "m": m}


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
    out = probes.mechanism_probes(model, task, initial=initial, seed=seed, holdout=settings["holdout"],
                           subjects=settings["subjects"], transfer_steps=settings["transfer_steps"],
                           encoder_steps=settings["encoder_steps"], lr=settings["lr"], retained=retained)
    details = {"selectivity": {k: out["selectivity"][k] for k in ("units", "active_units", "mean_selectivity",
                                                                   "breadth_mean", "units_per_relation")},
               "functional": None if out["functional"] is None else
               {k: out["functional"][k] for k in ("start_accuracy_A", "steps")},
               "fits": {**{k: out["fits"][k] for k in ("displacement_notes", "features", "fit_rows")},
                        **out["fits"]["fits"], "retained": retained},
               "warnings": out["warnings"]}
    summary = _rounded(out["summary"])
    return {"summary": summary, "claims": claims_met(summary), "details": _rounded(details)}


def run_job(job: dict) -> dict:
    """Run one job (in a worker): a ``"mechanism"`` trial (train, probe trained and initial weights) or a
    ``"control"`` (probe a construction). Returns its record.

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
            model = probes.embed_wider(model, job["pad_d"], rng(seed, "noise", STREAM_KEY, 21, job["pad_d"]))
        probed = _probe(model, task, seed, job["probe"])
        return {**job, **probed, "d": model.d, "m": model.mlp_width,
                "seconds": round(time.perf_counter() - start, 3)}
    p = job["params"]
    task = task_for_seed(p["N"], p["R"], seed)
    tokens, answers, positions, _ = training_data(task)
    initial, frozen = _initial_model(p, task, seed)
    before = check_queries(initial, tokens, answers).accuracy
    result = train(initial, tokens, answers, steps=p["steps"], lr=p["lr"], frozen=frozen,
                   weight_decay=_decay(p), tie_readout=p["readout"] == "tied", batch_size=p["batch_size"],
                   stop_at_accuracy=1.0 if p["stop"] == "100%" else None,
                   rng=rng(seed, "batches", STREAM_KEY, p["d"], p["m"]))
    trained_seconds = result.seconds
    final = check_queries(result.model, tokens, answers)
    training = {"steps": result.steps, "reached": bool(result.reached), "accuracy": final.accuracy,
                "initial_accuracy": before, "final_loss": float(result.losses[-1]) if result.losses else None,
                "path": result.path, "seconds": trained_seconds}
    trained = _probe(result.model, task, seed, job["probe"], initial=initial,
                     retained=_retained(p, frozen, result.steps))
    untrained = _probe(initial, task, seed, job["probe"])
    return {**job, "training": _rounded(training), **trained, "initial": untrained,
            "seconds": round(time.perf_counter() - start, 3)}


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
        A name of :data:`GRIDS`, or a grid.
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
        est = memory.train_estimate(N, R, d, m, batch_size=p["batch_size"], what="study mechanism")
        est.parts = [(f"{label} ({job['regime']})", nbytes, "the grid's N, R or d")
                     for label, nbytes, _ in est.parts]
        est.add("initial weights kept for the probes", 4 * ((2 * N + R + 2) * d + 2 * d * m + 4 * d * d),
                "the grid's N, R or d")
    fits = memory.train_estimate(N, R, d, m, what="study mechanism")  # its final check is the trainer's
    est.add("the probes' transfer and encoder fits",
            sum(nbytes for label, nbytes, _ in fits.parts if not label.startswith("final")),
            "the grid's N, R or d")
    memory.probe_estimate(est, N, R, d, m, N, job["probe"]["subjects"])
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
        More workers than this machine runs at once (:func:`georecall.memory.worker_limit`).
    """
    worst = max((job_estimate(job) for job in jobs_of(grid, seeds)), key=lambda e: e.total)
    if not local:
        driver = memory.Estimate("study mechanism")
        driver.add("the driver (records only; the jobs run on the scheduler's workers)", 16 * 2**20, "—")
        return driver
    return memory.workers_estimate("study mechanism", worst, workers)


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


# What :func:`summarize` reads of each kind of record, with the type it needs; any other field is kept as is.
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
    """Whether a parsed line is a study record whose every field :func:`summarize` reads has the type it
    needs (a record of another shape is alien: counted and skipped, never a traceback)."""
    if not isinstance(value, dict) or value.get("kind") not in _FIELDS:
        return False
    fields = _FIELDS[value["kind"]]
    if not all(name in value and check(value[name]) for name, check in fields.items()):
        return False
    return all(check(value[name]) for name, check in _OPTIONAL.items() if name in value)


def read_study(path: str, *, budget: Budget | int | None = None) -> ResultsFile:
    """Read a study file: torn lines (a writer killed mid-line), alien lines (not a study record, or one with
    a field of the wrong type) and duplicates (a key seen before) are counted and skipped. A missing file is
    empty. With ``budget`` (a memory budget) the file is counted against it before it is parsed.

    Parameters
    ----------
    path : str
        The JSONL file (missing: empty).
    budget : Budget, int or None
        Memory budget.

    Returns
    -------
    georecall.io.ResultsFile
        The usable records (the first of each key) and the counts of skipped lines.

    Raises
    ------
    InputError
        ``path`` cannot be read, or is larger than ``budget`` allows.
    """
    return read_jsonl(path, ResultsFile(), _usable, _identity, budget=budget, what="study mechanism")


# ------------------------------------------------------------------------------------------- the driver


def _describe(record: dict) -> str:
    if record["kind"] == "control":
        return f"control {record['construction']} N={record['N']} R={record['R']} seed {record['seed']}"
    return f"{record['regime']} seed {record['seed']}"


def run_study(out: str, grid: str | Grid = "default", seeds: Iterable[int] = (0, 1, 2), workers: int = 1,
              scheduler: str | None = None, progress: bool | Callable[[dict], None] = True, *,
              lock_timeout: float | None = None, connect_timeout: float = 10.0, max_jobs: int | None = None,
              log: Callable[[str], None] | None = None, worker_timeout: float | None = None,
              budget: Budget | int | None = None) -> list[dict]:
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
        As in :func:`georecall.verify.experiments.sweep.sweep`.
    max_jobs : int, optional
        Stop after that many new records (the file stays consistent; for tests of resumption).
    log : callable, optional
        One-line notes (skipped lines, lock waits, interruption); default stderr.
    worker_timeout : float, optional
        Seconds without any Dask worker before the study gives up (default
        :data:`~georecall.verify.experiments.executors.WORKER_TIMEOUT`).
    budget : Budget, int or None
        Memory budget the existing results file is counted against before it is read.

    Raises
    ------
    InputError
        Bad grid, seeds, workers or output path; lock not obtained; scheduler not reached.
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
    with open_results(out, read_study, lock_timeout=lock_timeout, log=log, budget=budget) as contents:
        have = {_identity(r) for r in contents.records}
        todo = [job for job in jobs if job["key"] not in have]
        if todo:
            patience = WORKER_TIMEOUT if worker_timeout is None else worker_timeout
            drive(_Jobs(out, len(jobs), len(todo), progress, max_jobs), todo,
                  lambda: open_executor(scheduler, workers, connect_timeout=connect_timeout, message=log,
                                        worker_timeout=patience), workers=workers, path=out, log=log)
        return [r for r in read_study(out, budget=budget).records if _identity(r) in wanted]


class _Jobs(JobList):
    """The study's jobs as a job list of :func:`.driver.drive`: a unit is one job, its one task
    :func:`run_job`; each record is appended as it arrives."""

    noun = "job"

    def __init__(self, path: str, total: int, todo: int, progress, max_jobs: int | None):
        super().__init__()
        self.path, self.total, self.progress, self.max_jobs = path, total, progress, max_jobs
        self.done = total - todo

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
        self.report(f"{units} job(s) to run on {handle.description}")

    def start(self, job: dict) -> list[Task]:
        return [Task(run_job, (job,), job, f"the job {_describe(job)}")]

    def accept(self, task: Task, record: dict) -> list[Task]:
        append_jsonl(self.path, record)
        self.done += 1
        self.report(f"{_describe(record)} ({record['seconds']:.1f} s)")
        if self.max_jobs is not None and self.tally.new >= self.max_jobs:
            raise Stop
        return []


# ------------------------------------------------------------------------------------------- the summary


def _stats(values: list) -> dict:
    """Mean and sample standard deviation (ddof = 1; 0 for one value) of the non-missing values."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return {"mean": None, "sd": None, "n": 0}
    sd = float(np.std(present, ddof=1)) if len(present) > 1 else 0.0
    return {"mean": float(np.mean(present)), "sd": sd, "n": len(present)}


def regime_verdicts(claims_per_seed: list[dict], powers: list[float | None] | None = None
                    ) -> dict[str, dict]:
    """Per claim: seeds meeting it, seeds in all, and the verdict — ``holds`` (every seed), ``partly`` (some)
    or ``fails`` (none); ``superposition`` "fails" only where its planted control was detected.

    Parameters
    ----------
    claims_per_seed : list of dict
        ``{claim: met}`` per seed (:func:`claims_met`).
    powers : list of float or None, optional
        Per seed, the superposition probe's power (:func:`.probes.superposition_power`). When a seed's
        superposition claim is not met and its power is below :data:`POWER_REQUIRED` (or unknown), that seed
        cannot tell; the claim's verdict is then ``cannot tell`` instead of ``fails`` (``partly`` stays).

    Returns
    -------
    dict
        ``{claim: {"met", "n", "verdict"}}`` over :data:`CLAIMS` (``superposition`` also ``power``, the
        smallest per-seed power, when given).
    """
    out: dict[str, dict[str, Any]] = {}
    for claim in CLAIMS:
        met = sum(bool(c.get(claim)) for c in claims_per_seed)
        n = len(claims_per_seed)
        out[claim] = {"met": met, "n": n,
                      "verdict": "holds" if n and met == n else ("partly" if met else "fails")}
    if powers is not None:
        known = [float(p) for p in powers if p is not None]
        weakest = min(known) if len(known) == len(powers) and known else None
        entry: dict[str, Any] = out["superposition"]
        entry["power"] = weakest
        if entry["verdict"] == "fails" and (weakest is None or weakest < POWER_REQUIRED):
            entry["verdict"] = "cannot tell"
    return out


def _fields() -> tuple[str, ...]:
    return probes.SUMMARY_FIELDS


def _group_key(record: dict) -> str:
    fields = ("kind", "grid", "regime", "construction", "N", "R", "pad_d", "params", "probe", "study_version",
              "version")
    return json.dumps({k: record.get(k) for k in fields}, sort_keys=True)


def summarize(path: str, *, budget: Budget | int | None = None) -> dict:
    """The study's document: per regime and per control, mean ± sd over seeds of every probe, the verdicts by
    the declared thresholds, and one line per claim.

    Parameters
    ----------
    path : str
        The study's results file.
    budget : Budget, int or None
        Memory budget the file is counted against before it is parsed.

    Returns
    -------
    dict
        ``file``, ``problems`` (skipped lines), ``thresholds``, ``claims``, ``regimes`` (trained regimes and
        the two controls (a), (b), in grid order: ``trained`` and ``initial`` probe statistics, ``training``,
        ``verdicts``), ``constructions`` (G1, A1 per (N, R)), ``verdicts`` (per claim: regimes where it holds,
        partly holds, fails; and its one-line statement), ``calibration`` (G1 meets every claim, A1 and every
        untrained model none), ``seconds`` (sum of job times).

    Raises
    ------
    InputError
        The file cannot be read, or is larger than ``budget`` allows.
    """
    contents = read_study(path, budget=budget)
    groups: dict[str, list[dict]] = {}
    for record in contents.records:
        groups.setdefault(_group_key(record), []).append(record)
    order = {r.name: i for g in GRIDS.values() for i, r in enumerate(g.regimes)}
    fields = _fields()
    regimes: list[dict[str, Any]] = []
    constructions: list[dict[str, Any]] = []
    for records in groups.values():
        records.sort(key=lambda r: r["seed"])
        first = records[0]
        entry = {"seeds": [r["seed"] for r in records], "n": len(records),
                 "trained": {f: _stats([r["summary"].get(f) for r in records]) for f in fields},
                 "verdicts": regime_verdicts([r["claims"] for r in records],
                                             [r["summary"].get("superposition_power") for r in records]),
                 "seconds": float(sum(r.get("seconds", 0.0) for r in records))}
        if first["kind"] == "control":
            constructions.append({"construction": first["construction"], "N": first["N"], "R": first["R"],
                                  "d": first.get("d"), "m": first.get("m"), "pad_d": first.get("pad_d"),
                                  "grid": first.get("grid"), "version": first.get("version"), **entry})
            continue
        p = first["params"]
        training = [r["training"] for r in records]
        entry.update(
            regime=first["regime"], description=first.get("description", ""), family=first.get("family"),
            control=bool(first.get("control")), grid=first.get("grid"), version=first.get("version"),
            params={k: p.get(k) for k in ("N", "R", "d", "m", "attention", "init", "init_scale", "readout",
                                          "decay", "decay_groups", "steps", "stop", "batch_size", "noise",
                                          "lr", "lam", "d_g1_factor")},
            training={"reached": sum(bool(t["reached"]) for t in training),
                      "steps": _stats([t["steps"] for t in training]),
                      "accuracy": _stats([t["accuracy"] for t in training]),
                      "final_loss": _stats([t["final_loss"] for t in training]),
                      "seconds": _stats([t["seconds"] for t in training])},
            initial={f: _stats([r["initial"]["summary"].get(f) for r in records]) for f in fields},
            initial_verdicts=regime_verdicts([r["initial"]["claims"] for r in records],
                                             [r["initial"]["summary"].get("superposition_power")
                                              for r in records]))
        regimes.append(entry)
    regimes.sort(key=lambda e: (e["grid"] or "", e["control"], order.get(e["regime"], len(order))))
    constructions.sort(key=lambda e: (e["construction"], e["N"], e["R"], e.get("pad_d") or 0))
    names = [e["regime"] for e in regimes]
    for e in regimes:  # the same regime name under two versions or grids: say which
        e["label"] = (e["regime"] if names.count(e["regime"]) == 1
                      else f"{e['regime']} [{e['grid']} {e['version']}]")
    verdicts: dict[str, dict[str, Any]] = {}
    for claim, statement in CLAIMS.items():
        gd = [e for e in regimes if not e["control"]]
        holds = [e["label"] for e in gd if e["verdicts"][claim]["verdict"] == "holds"]
        partly = [f"{e['label']} ({e['verdicts'][claim]['met']}/{e['verdicts'][claim]['n']})" for e in gd
                  if e["verdicts"][claim]["verdict"] == "partly"]
        controls = [f"{e['label']}: {e['verdicts'][claim]['verdict']}" for e in regimes if e["control"]]
        refs = [f"{_construction_label(e)}: {e['verdicts'][claim]['verdict']}" for e in constructions]
        where = (f"holds in {len(holds)} of {len(gd)} gradient-descent regimes ({', '.join(holds)})" if holds
                 else f"holds in none of the {len(gd)} gradient-descent regimes")
        if partly:
            where += f"; partly (some seeds) in {', '.join(partly)}"
        untold = [e["label"] for e in gd if e["verdicts"][claim]["verdict"] == "cannot tell"]
        if untold:
            where += (f"; cannot tell (no seed meets it, and its planted control is detected in fewer than "
                      f"{POWER_REQUIRED:.0%} of the draws) in {', '.join(untold)}")
        line = (f"{claim} — {statement} [{_criterion(claim)}]: {where}. Controls: "
                f"{'; '.join(controls) or 'none run'}. Constructions: {'; '.join(refs) or 'none run'}.")
        verdicts[claim] = {"holds": holds, "partly": partly, "controls": controls, "constructions": refs,
                           "line": line}
    g1 = [e for e in constructions if e["construction"] == "G1"]
    a1 = [e for e in constructions if e["construction"] == "A1"]
    fan_in = [e for e in regimes if e["params"]["init"] == "fan-in"]
    calibration = {  # None: not run
        "G1 meets every claim in every seed": all(
            v["verdict"] == "holds" for e in g1 for v in e["verdicts"].values()) if g1 else None,
        "A1 meets no claim in any seed": all(
            v["met"] == 0 for e in a1 for v in e["verdicts"].values()) if a1 else None,
        "untrained weights meet no claim in any seed": all(
            v["met"] == 0 for e in fan_in for v in e["initial_verdicts"].values()) if fan_in else None,
    }
    return {"file": path, "problems": contents.problems(), "thresholds": dict(THRESHOLDS),
            "claims": dict(CLAIMS), "regimes": regimes, "constructions": constructions, "verdicts": verdicts,
            "calibration": calibration, "seconds": float(sum(e["seconds"] for e in regimes + constructions)),
            "d_star": {f"N={N}, R={R}": v for (N, R), v in D_STAR.items()},
            "d_axis": d_axis(regimes, constructions)}


def _construction_label(e: dict) -> str:
    wider = f", embedded in d={e['pad_d']}" if e.get("pad_d") else ""
    return f"{e['construction']} (N={e['N']}, R={e['R']}{wider})"


# the criterion quantities drawn and tabulated against d/d_G1
D_AXIS_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("superposition R²", "superposition_r2", "superposition_r2"),
    ("forward-fit ceiling", "forward_ceiling", "superposition_r2"),
    ("interventions followed", "follows", "follows"),
    ("others unchanged", "others_unchanged", "others_unchanged"),
    ("selective units", "selective_fraction", "selective_fraction"),
    ("gated mass", "gated_mass", "gated_mass"),
    ("median breadth", "breadth_median", "breadth_median"),
    ("closed-form zero-shot", "closed_form_transfer", "zero_shot"),
    ("functional zero-shot", "functional_zero_shot", "zero_shot"),
)


def d_axis(regimes: list[dict], constructions: list[dict]) -> dict:
    """The d axis of a summary: per (N, R, family), the entries at each width d/d_G1, the verdict of every
    claim at every width, and G1 (native and embedded wider) at its widths.

    Parameters
    ----------
    regimes, constructions : list of dict
        The summary's ``regimes`` and ``constructions`` entries.

    Returns
    -------
    dict
        ``series``: list of ``{"N", "R", "family", "points": [{"factor", "d", "label", "n", "trained",
        "initial", "verdicts", "reachable"}]}`` (``reachable``: the mean forward-fit ceiling meets the
        superposition threshold, i.e. an exact superposition would pass the fit at this width);
        ``g1``: ``[{"N", "R", "d", "factor", "label", "trained", "verdicts"}]``; ``verdicts``: per claim, one
        line per (N, family) listing the widths where it holds, partly holds and fails.
    """
    series: dict[tuple, dict] = {}
    for e in regimes:
        factor = e["params"].get("d_g1_factor")
        if e.get("family") is None or factor is None:
            continue
        N, R = e["params"]["N"], e["params"]["R"]
        item = series.setdefault((N, R, e["family"]), {"N": N, "R": R, "family": e["family"], "points": []})
        ceiling = e["trained"].get("forward_ceiling", {}).get("mean")
        item["points"].append({"factor": factor, "d": e["params"]["d"], "label": e["label"], "n": e["n"],
                               "trained": e["trained"], "initial": e["initial"], "verdicts": e["verdicts"],
                               "initial_verdicts": e["initial_verdicts"],
                               "reachable": None if ceiling is None
                               else bool(ceiling >= THRESHOLDS["superposition_r2"])})
    for item in series.values():
        item["points"].sort(key=lambda q: q["factor"])
    rank = {r.name: i for i, r in enumerate(D_AXIS_FAMILIES)}
    series = dict(sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1], rank.get(kv[0][2], len(rank)),
                                                         kv[0][2])))
    g1 = []
    for e in constructions:
        if e["construction"] != "G1":
            continue
        d = e.get("pad_d") or e.get("d")
        g1.append({"N": e["N"], "R": e["R"], "d": d, "factor": d / g1_d(e["N"], e["R"]) if d else None,
                   "label": _construction_label(e), "trained": e["trained"], "verdicts": e["verdicts"]})
    verdicts: dict[str, list[str]] = {}
    for claim in CLAIMS:
        lines = []
        for item in series.values():
            by: dict[str, list[str]] = {"holds": [], "partly": [], "fails": [], "cannot tell": []}
            for q in item["points"]:
                v = q["verdicts"][claim]
                by[v["verdict"]].append(f"{q['factor']:g}" + ("" if v["verdict"] != "partly"
                                                                else f" ({v['met']}/{v['n']})"))
            said = [f"{verdict} at d/d_G1 ∈ {{{', '.join(widths)}}}"
                    for verdict, widths in by.items() if widths]
            lines.append(f"{item['family']} (N={item['N']}, R={item['R']}): {'; '.join(said)}")
        verdicts[claim] = lines
    return {"series": list(series.values()), "g1": g1, "verdicts": verdicts}


def _criterion(claim: str) -> str:
    t = THRESHOLDS
    if claim == "superposition":
        return (f"held-out R² of E or E − E0 ≥ {t['superposition_r2']}, interventions followed ≥ "
                f"{t['follows']:.0%}, other relations unchanged ≥ {t['others_unchanged']:.0%}")
    if claim == "selective_mlp":
        return (f"≥ {t['selective_fraction']:.0%} of active units relation-selective (≥ 0.9 of their "
                f"activation on one relation), gated mass ≥ {t['gated_mass']:.0%}, median breadth ≥ "
                f"{t['breadth_median']}")
    return f"closed-form or functional zero-shot accuracy on a new task ≥ {t['zero_shot']:.0%}"


def _cell(stat: dict, digits: int = 2) -> str:
    if stat is None or stat.get("mean") is None:
        return "—"
    if stat["n"] > 1:
        return f"{stat['mean']:.{digits}f} ± {stat['sd']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}"


_COLUMNS = (("fwd R²", "forward_r2", 2), ("rev R²", "reverse_r2", 2),
            ("ΔE fwd R²", "displacement_forward_r2", 2), ("follows", "follows", 2),
            ("others", "others_unchanged", 2), ("selective", "selective_fraction", 2),
            ("gated", "gated_mass", 2), ("breadth", "breadth_median", 3),
            ("closed-form", "closed_form_transfer", 2), ("encoder A", "encoder_accuracy_A", 2),
            ("zero-shot B", "functional_zero_shot", 2), ("fitted B", "fitted_transfer", 2))


def _claims_cell(verdicts: dict) -> str:
    return " · ".join(f"{v['met']}/{v['n']}" for v in verdicts.values())


def _render_d_axis(axis: dict | None) -> list[str]:
    """The d-axis tables (one per (N, R, family)) and the verdict per claim across d, as Markdown lines."""
    if not axis or not axis["series"]:
        return []
    keys = [(title, key) for title, key, _ in D_AXIS_FIELDS]
    head = "| " + " | ".join(["d/d_G1", "d", "seeds", "accuracy"] + [t for t, _ in keys]
                             + ["claims S·M·Z"]) + " |"
    rule = "|" + "---|" * (len(keys) + 5)
    lines = ["", "## Across d (d/d_G1; mean ± sd over seeds; ceiling: the forward fit's R² on an exact "
             "superposition with the model's own attribute vectors)", ""]
    for item in axis["series"]:
        lines += [f"### {item['family']} (N={item['N']}, R={item['R']})", "", head, rule]
        for q in item["points"]:
            lines.append("| " + " | ".join(
                [f"{q['factor']:g}", str(q["d"]), str(q["n"]), _cell(q["trained"].get("accuracy"), 3)]
                + [_cell(q["trained"].get(key)) for _, key in keys] + [_claims_cell(q["verdicts"])]) + " |")
        lines.append("")
    if axis["g1"]:
        lines += ["### G1, native and embedded in a wider residual (random rotation, the same logits)", "",
                  head, rule]
        for g in axis["g1"]:
            lines.append("| " + " | ".join(
                [(f"{g['factor']:.2f}" if g["factor"] else "—") + f" (N={g['N']})", str(g["d"]),
                 str(g["trained"]["accuracy"]["n"]), _cell(g["trained"].get("accuracy"), 3)]
                + [_cell(g["trained"].get(key)) for _, key in keys] + [_claims_cell(g["verdicts"])]) + " |")
        lines.append("")
    lines += ["Verdict per claim across d:", ""]
    for claim, entries in axis["verdicts"].items():
        lines += [f"- {claim}: " + "; ".join(entries)]
    return lines


def render_summary(doc: dict) -> str:
    """The document as Markdown: the trained table, the controls, the untrained table, the verdicts.

    Parameters
    ----------
    doc : dict
        What :func:`summarize` returns.

    Returns
    -------
    str
    """
    head = "| " + " | ".join(["regime", "d", "reached", "accuracy", "steps"] + [c[0] for c in _COLUMNS]
                             + ["claims S·M·Z"]) + " |"
    rule = "|" + "---|" * (len(_COLUMNS) + 6)
    lines = [f"# Mechanism study ({doc['file']})", ""]
    if doc["problems"]:
        lines += [f"Note: {doc['problems']}.", ""]
    lines += ["Mean ± sd over seeds. reached: seeds whose model answers every query; accuracy: over all "
              "queries after training. Claims S·M·Z: seeds meeting the superposition, relation-selective-MLP "
              "and zero-shot criteria.", "", "## Trained models", "", head, rule]
    for e in doc["regimes"]:
        t = e["training"]
        lines.append("| " + " | ".join(
            [e["label"], str(e["params"]["d"]), f"{t['reached']}/{e['n']}", _cell(t["accuracy"], 3),
             _cell(t["steps"], 0)]
            + [_cell(e["trained"][key], digits) for _, key, digits in _COLUMNS]
            + [_claims_cell(e["verdicts"])]) + " |")
    lines += ["", "## Constructions (controls)", "",
              head.replace("| reached | accuracy | steps", "| m | — | —"), rule]
    for e in doc["constructions"]:
        lines.append("| " + " | ".join(
            [f"{e['construction']} N={e['N']} R={e['R']}"
             + (f" (embedded in d={e['pad_d']})" if e.get("pad_d") else ""), str(e["d"]), str(e["m"]), "—",
             "—"]
            + [_cell(e["trained"][key], digits) for _, key, digits in _COLUMNS]
            + [_claims_cell(e["verdicts"])]) + " |")
    lines += ["", "## The same probes on each regime's initial (untrained) weights", "", head, rule]
    for e in doc["regimes"]:
        lines.append("| " + " | ".join(
            [e["label"], str(e["params"]["d"]), "—", "—", "0"]
            + [_cell(e["initial"][key], digits) for _, key, digits in _COLUMNS]
            + [_claims_cell(e["initial_verdicts"])]) + " |")
    lines += ["", "## Verdicts (thresholds declared before the run)", ""]
    lines += [f"- {v['line']}" for v in doc["verdicts"].values()]
    said = {True: "yes", False: "NO", None: "not run"}
    lines += _render_d_axis(doc.get("d_axis"))
    lines += ["", "Calibration: " + "; ".join(f"{k}: {said[v]}" for k, v in doc["calibration"].items()) + "."]
    lines.append(f"Job time (sum over jobs): {doc['seconds'] / 60:.1f} min.")
    return "\n".join(lines) + "\n"


def figures(doc: dict, out_dir: str, *, log: Callable[[str], None] | None = None, dpi: int | None = None,
            formats: Iterable[str] | None = None) -> list[str]:
    """Write ``mechanism`` (the criterion quantities per regime, coloured by trained / control / construction,
    with thresholds and the untrained weights) and ``forward_reverse`` (forward vs reverse fit) into
    ``out_dir`` (created when missing), drawn by :mod:`.figures`. matplotlib is imported there; without it
    nothing is written and ``log`` says so (the command line refuses ``--figures`` before any work instead).
    Returns the paths written.

    Parameters
    ----------
    doc : dict
        What :func:`summarize` returns.
    out_dir : str
        The folder (created when missing).
    log : callable, optional
        Receives the note that matplotlib is missing; default stderr.
    dpi : int, optional
        Raster resolution (default :data:`.figures.DEFAULT_DPI`).
    formats : list of str, optional
        File formats (default :data:`.figures.DEFAULT_FORMATS`).

    Returns
    -------
    list of str
        The paths written (none without matplotlib).
    """
    log = log or (lambda text: print(f"georecall: {text}", file=sys.stderr, flush=True))
    if not drawing.have_matplotlib():
        log("matplotlib is not installed: no figures (pip install 'georecall[plot]')")
        return []
    options: dict[str, Any] = {"dpi": drawing.DEFAULT_DPI if dpi is None else dpi,
                               "formats": tuple(formats) if formats else drawing.DEFAULT_FORMATS}
    os.makedirs(out_dir, exist_ok=True)
    written = drawing.save_figure(drawing.mechanism_figure(doc, THRESHOLDS), out_dir, "mechanism", **options)
    written += drawing.save_figure(drawing.forward_reverse_figure(doc), out_dir, "forward_reverse", **options)
    axis = doc.get("d_axis")
    if axis and axis.get("series"):
        written += drawing.save_figure(drawing.d_axis_figure(axis, THRESHOLDS, D_AXIS_FIELDS), out_dir,
                                       "mechanism_d", **options)
    return written


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
    references["G1 wider"] = probes.embed_wider(references["G1"], wide,
                                                rng(seed, "noise", STREAM_KEY, 21, wide))
    models = {**references, "trained": trained.model, "untrained": initial}
    summaries = {name: probes.mechanism_probes(model, task, initial=initial if name == "trained" else None,
                                        seed=seed, **budgets)["summary"] for name, model in models.items()}
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
