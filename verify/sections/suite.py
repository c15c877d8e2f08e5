"""The rows of ``georecall verify``, one function per section.

Each section is a function ``(seed, progress, budget) -> list[Report]``; ``SECTIONS`` lists them in the order
``georecall verify`` runs them, and :func:`verify_reports` runs them (the one function the ``verify`` command
reaches, see CONTRIBUTING.md, "Layers"). A construction's rows are
:func:`georecall.verify.checking.run.run_check` at the sizes its spec lists (``verify_cases``); the other rows
check the trainer, the probes and the mechanism study. :func:`verify_steps` splits the sections into one step
per row where it can (the progress line ``[i/n steps]`` with the time so far and an estimate of the time
left; a step may give more than one row, so ``n`` counts steps, not the checks of the summary);
``verify --full`` (:data:`FULL_ONLY`) runs the mechanism row at the study's R = 4 and the frozen-embedding
threshold beside the learned one, which ``verify`` leaves out to answer in about 30 seconds.
Every function that allocates takes the run's :class:`~georecall.memory.Budget` (``None``: the default
budget), requires the one estimate (``georecall.memory``) against it before building anything, and passes it
on to the checker, whose chunks are sized from it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from georecall import estimates
from georecall.constructions import registry
from georecall.constructions.registry import ConstructionSpec
from georecall.errors import InputError
from georecall.experiments import blas, probes, study
from georecall.experiments.sweep_search import find_threshold
from georecall.experiments.sweep_trial import TrialSettings
from georecall.memory import Budget, as_budget
from georecall.theory import seeds
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries

# modules, not names: tests replace their functions
from georecall.training import backward
from georecall.training import train as trainer
from georecall.training.parameters import init_model
from georecall.verify.checking.report import Report, claim_report
from georecall.verify.checking.run import run_check  # a module name here: tests replace it in this module
from georecall.verify.sections import bounds_checks
from georecall.verify.sections.bounds_checks import bits_and_bound_reports, section_bounds
from georecall.verify.sections.certified import certified_row, certified_specs, section_certified

__all__ = [
    "FULL_ONLY",
    "MECHANISM_R",
    "SECTIONS",
    "Step",
    "construction_reports",
    "gd_row",
    "gradient_row",
    "section_constructions",
    "section_multi_hop",
    "section_probes",
    "section_single_hop",
    "section_training",
    "threshold_row",
    "verify_reports",
    "verify_steps",
]


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def _case_report(spec: ConstructionSpec, case: dict, seed: int, progress: bool,
                 budget: Budget | None = None) -> list[Report]:
    budget = as_budget(budget)
    case = dict(case)
    N, R, k = case.pop("N"), case.pop("R"), case.pop("k", 1)
    codes, D = case.pop("codes", None), case.pop("D", None)
    compare = case.pop("compare_integer", False)
    _log(progress, _case_name(spec, {"N": N, "R": R, "k": k, "codes": codes, "D": D,
                                     "compare_integer": compare, **case}))
    if not compare:
        return [run_check(spec, N, R, k, seed=seed, codes=codes, D=D, options=case, compare_storage=True,
                          budget=budget)]
    as_float = run_check(spec, N, R, k, seed=seed, codes=codes, D=D, options=case, keep=True,
                         compare_storage=True, budget=budget)
    as_int = run_check(
        spec, N, R, k, seed=seed, codes=codes, D=D, options={**case, "integer": True}, keep=True,
        compare_storage=True, budget=budget,
    )
    assert as_float.result.predictions is not None and as_int.result.predictions is not None  # keep=True
    agree = bool(np.array_equal(as_float.result.predictions, as_int.result.predictions))
    as_int.extra["agrees_with_float"] = agree
    as_int.extra_checks["float and integer predictions agree"] = agree
    return [as_float, as_int]


def section_constructions(hops: str, seed: int = 0, progress: bool = False,
                          budget: Budget | None = None) -> list[Report]:
    """Every registered construction with ``hops`` at the sizes its spec lists (``verify_cases``).

    Parameters
    ----------
    hops : str
        "single" or "multi".
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget, passed to every :func:`run_check`.

    Returns
    -------
    list of Report

    Raises
    ------
    InputError
        A case over the budget.
    """
    budget = as_budget(budget)
    reports: list[Report] = []
    for spec in registry.specs(hops):
        for case in spec.verify_cases:
            reports += _case_report(spec, case, seed, progress, budget)
    return reports


def construction_reports(spec: ConstructionSpec, seed: int = 0, progress: bool = False,
                         budget: Budget | None = None) -> list[Report]:
    """Every row of ``georecall verify`` that concerns one construction (``verify --construction``): its
    checks at the sizes its spec lists (``verify_cases``), its "certified for every task" row, and the "bits
    needed" and "lower bounds <= verified constructions" rows for it alone (its bits claim re-measured; a
    spec without a claim is named there, and a row that checks nothing is not covered, never a PASS).

    Parameters
    ----------
    spec : ConstructionSpec
        The construction.
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget, passed to every :func:`run_check`.

    Returns
    -------
    list of Report

    Raises
    ------
    InputError
        When the spec lists no ``verify_cases``, or a case over the budget.
    """
    if not spec.verify_cases:
        raise InputError(f"{spec.label} lists no verify_cases: give its ConstructionSpec "
                         "verify_cases=({'N': ..., 'R': ...},)")
    budget = as_budget(budget)
    reports: list[Report] = []
    for case in spec.verify_cases:
        reports += _case_report(spec, case, seed, progress, budget)
    reports.append(certified_row(spec, seed, progress, budget))
    return reports + bits_and_bound_reports(seed, progress, budget, [spec])


def section_single_hop(seed: int = 0, progress: bool = False, budget: Budget | None = None
                       ) -> list[Report]:
    """Single-hop constructions: :func:`section_constructions` ``("single", ...)``, i.e. every registered
    single-hop spec at its ``verify_cases``. For the built-ins: G1 at N = 4096, R = 16 (``check single-hop``'s
    default size) in float64 and in integer mode (whose predictions must agree), G1 with sign and with
    Gaussian codes (N = 512, R = 8, D = 48); A1 at N = 512, R = 8 in integer mode and with sign codes at
    N = 256, R = 4.

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget (None: the default budget), passed to every :func:`run_check`.

    Returns
    -------
    list of Report
        One per case (two for a case compared in float and integer mode), in registration order.

    Raises
    ------
    InputError
        A case over the budget (from :func:`run_check`), or a case a spec's builder refuses.
    """
    return section_constructions("single", seed, progress, budget)


def section_multi_hop(seed: int = 0, progress: bool = False, budget: Budget | None = None
                      ) -> list[Report]:
    """k-hop constructions at sizes that run in seconds, softmax attention (and hard, labelled):
    :func:`section_constructions` ``("multi", ...)``, i.e. every registered multi-hop spec at its
    ``verify_cases`` (for the built-ins: G2, also with hard attention; A2a; A2b; C1).

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget (None: the default budget), passed to every :func:`run_check`.

    Returns
    -------
    list of Report
        One per case, in registration order.

    Raises
    ------
    InputError
        A case over the budget (from :func:`run_check`), or a case a spec's builder refuses.
    """
    return section_constructions("multi", seed, progress, budget)


def gradient_row(seed: int = 0) -> Report:
    """The trainer's analytic gradients against central differences on random two-layer models (N = 7, d = 6:
    fixed sizes, nothing that grows with an input).

    Parameters
    ----------
    seed : int
        The run seed (``init`` stream).

    Returns
    -------
    Report
    """
    start = time.perf_counter()
    rng = seeds.rng(seed, "init")
    checks = {}
    for attention in ("uniform", "softmax"):
        model = init_model(7, 3, 6, 5, attention=attention, heads=2, layers=2, positions=3, rng=rng,
                           dtype=np.float64)
        tokens, answers = queries(task_for_seed(7, 3, seed), 2)
        try:
            checked = backward.check_grads(model, tokens, answers, rng=rng)
            checks[f"{attention} attention, 2 layers: {len(checked)} parameters"] = True
        except AssertionError:
            checks[f"{attention} attention, 2 layers"] = False
    return claim_report("gradients = finite differences", {"seed": seed}, checks, time.perf_counter() - start,
                        {"d": 6, "m": 5})


TRAINING_SIZE = (256, 4)  # (N, R) of the gradient-descent rows


def gd_row(seed: int = 0, progress: bool = False, budget: Budget | None = None) -> Report:
    """Gradient descent reaches 100% on every fact at G1's d (N = 256, R = 4).

    Parameters
    ----------
    seed : int
        The run seed (``init`` and ``batches`` streams).
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The memory budget the training's estimate (:func:`georecall.estimates.train_estimate`, full batch) is
        required against before the model is made.

    Returns
    -------
    Report

    Raises
    ------
    InputError
        The estimate exceeds the budget.
    """
    N, R = TRAINING_SIZE
    g1_d = registry.get("G1").nominal_promise(N, R, 1).d
    estimates.train_estimate(N, R, g1_d, 4 * g1_d, what="verify: gradient descent").require(as_budget(budget))
    _log(progress, f"training: N={N}, R={R} at G1's d")
    start = time.perf_counter()
    tokens, answers = queries(task_for_seed(N, R, seed))
    trained = trainer.train(init_model(N, R, g1_d, 4 * g1_d, rng=seeds.rng(seed, "init")), tokens,
                            answers, steps=1000, rng=seeds.rng(seed, "batches"))
    return claim_report("GD reaches 100% at G1's d", {"N": N, "R": R, "seed": seed},
                        {f"trained d = {g1_d} answers all {N * R} facts": trained.reached},
                        time.perf_counter() - start, {"d": g1_d, "m": 4 * g1_d}, {"steps": trained.steps})


def threshold_row(seed: int = 0, progress: bool = False, steps: int = 400,
                  budget: Budget | None = None, frozen: bool = True) -> Report:
    """The capacity threshold of learned embeddings at N = 256, R = 4, and with ``frozen`` the threshold of
    frozen (random) embeddings beside it (reported, not judged); the claim checked is that learned
    embeddings reach 100% at or below G1's d.

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    steps : int
        Adam steps per trial.
    budget : Budget or None
        The memory budget the largest trial's estimate (d = 2·G1's d) is required against before any trial.
    frozen : bool
        Also search the frozen-embedding threshold (``verify --full``; about half the row's time).

    Returns
    -------
    Report
        Its ``extra["detail"]`` says the thresholds in words.

    Raises
    ------
    InputError
        The estimate exceeds the budget.
    """
    N, R = TRAINING_SIZE
    g1_d = registry.get("G1").nominal_promise(N, R, 1).d
    settings = TrialSettings(steps=steps)
    d_max = 2 * g1_d
    estimates.train_estimate(N, R, d_max, settings.width_factor * d_max, what="verify: capacity thresholds"
                             ).require(as_budget(budget))
    modes = ("learned", "frozen") if frozen else ("learned",)
    _log(progress, f"training: {' and '.join(modes)} thresholds, N={N}, R={R}")
    start = time.perf_counter()
    found = {mode: find_threshold(N, R, mode, seed, settings, d_min=4, d_max=d_max, resolution=2)
             for mode in modes}
    learned = found["learned"]["d_star"]
    claim = {f"learned d* = {learned} <= G1's d = {g1_d}": learned is not None and learned <= g1_d}
    params = {"N": N, "R": R, "seed": seed, "steps": settings.steps}

    def said(d_star) -> str:
        return f"none up to d = {d_max}" if d_star is None else str(d_star)

    detail = (f"smallest d reaching 100% ({settings.steps} Adam steps, m = {settings.width_factor}d): "
              f"learned embeddings d* = {said(learned)} against G1's d = {g1_d}; "
              + (f"frozen random embeddings d* = {said(found['frozen']['d_star'])} (reported)" if frozen
                 else "frozen embeddings: verify --full"))
    return claim_report("capacity threshold, learned", params, claim, time.perf_counter() - start,
                        {"d": "", "m": ""}, {**found, "detail": detail})


def section_training(seed: int = 0, progress: bool = False, budget: Budget | None = None,
                     full: bool = True) -> list[Report]:
    """The trainer's gradients against central differences; gradient descent reaching 100% at G1's size; the
    learned capacity threshold at a small size (with ``full``, the frozen one beside it).

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget, passed to each row.
    full : bool
        The frozen threshold too (``verify --full``).

    Returns
    -------
    list of Report
    """
    budget = as_budget(budget)
    return [gradient_row(seed), gd_row(seed, progress, budget),
            threshold_row(seed, progress, budget=budget, frozen=full)]


PROBES_SIZE = (512, 4)  # (N, R) of the probes row


def section_probes(seed: int = 0, progress: bool = False, budget: Budget | None = None
                   ) -> list[Report]:
    """On G1 every probe has its exact value; on an untrained model the same probes fail (they can fail).

    Parameters
    ----------
    seed : int
        The run seed (task, ``init`` and ``probes`` streams).
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The memory budget G1's build and the probes' matrices are estimated against
        (:func:`georecall.estimates.check_estimate`, :func:`georecall.estimates.probe_estimate`) before
        building.

    Returns
    -------
    list of Report

    Raises
    ------
    InputError
        The estimate exceeds the budget.
    """
    N, R = PROBES_SIZE
    g1 = registry.get("G1")
    promise = g1.nominal_promise(N, R, 1)
    est = estimates.check_estimate(g1, N, R, what="verify: probes")
    estimates.probe_estimate(est, N, R, promise.d, promise.m, N, 256).require(as_budget(budget))
    _log(progress, f"probes: G1 (N={N}, R={R}) exact; an untrained model for contrast")
    start = time.perf_counter()
    task = task_for_seed(N, R, seed)
    g1_probes = probes.probe_all(g1.builder(task).model, task, rng=seeds.rng(seed, "probes"),
                                 transfer_steps=5)
    untrained = probes.probe_all(
        init_model(N, R, 16, 64, rng=seeds.rng(seed, "init")),
        task,
        rng=seeds.rng(seed, "probes"),
        transfer_steps=5,
    )
    checks = {
        "G1 held-out encoding R² = 1": abs(g1_probes["readout"]["encoding_r2"] - 1) < 1e-9,
        "G1 per-relation probes 100%": g1_probes["readout"]["probe_accuracy_mean"] == 1.0,
        "G1 interventions followed, others unchanged": g1_probes["intervention"]["follows"] == 1.0
        and g1_probes["intervention"]["others_unchanged"] == 1.0,
        "G1 units 100% relation-selective": g1_probes["selectivity"]["selective_fraction"] == 1.0,
        "G1 zero-shot transfer 100%": g1_probes["transfer"]["closed_form_accuracy"] == 1.0,
        "untrained: readout R² < 0.5 and transfer at chance": untrained["readout"]["encoding_r2"] < 0.5
        and untrained["transfer"]["closed_form_accuracy"] < 0.05,
    }
    return [
        claim_report(
            "probes exact on G1",
            {"N": N, "R": R, "seed": seed},
            checks,
            time.perf_counter() - start,
            {"d": "", "m": ""},
            {"g1": g1_probes, "untrained": untrained},
        )
    ]


MECHANISM_R = 2  # relations of the mechanism row in ``verify`` (d = 2d* = 10); ``verify --full``: R = 4


def _section_mechanism(seed: int = 0, progress: bool = False, budget: Budget | None = None,
                       full: bool = True) -> list[Report]:
    """The mechanism study's row (src/georecall/experiments/study.py): probe values against the controls, at
    the study's R = 4 with ``full``, else at :data:`MECHANISM_R` (the same checks and controls, a quarter of
    the time). The study does not take a budget yet: ``budget`` is accepted for the one section signature."""
    return study.section_mechanism(seed, progress, **({} if full else {"R": MECHANISM_R}))


SECTIONS: list[tuple[str, Callable[..., list[Report]]]] = [
    ("single hop", section_single_hop),
    ("multi hop", section_multi_hop),
    ("certified for every task", section_certified),
    ("lower bounds and counting", section_bounds),
    ("gradient descent", section_training),
    ("mechanism probes", section_probes),
    ("mechanism study (controls)", _section_mechanism),
]


# What ``verify --full`` adds, in words (``verify --help`` and the text summary say the same; the command line
# cannot import this module, tests/test_verify_progress.py compares them).
FULL_ONLY = ("the mechanism row at the study's R = 4 (verify: R = 2, the same checks and controls)",
             "the frozen-embedding capacity threshold beside the learned one (reported, not judged)")


@dataclass(frozen=True)
class Step:
    """One line of ``verify``'s progress: what runs, the function that runs it, and its nominal cost.

    Attributes
    ----------
    name : str
        What the step checks, in words (the progress line).
    run : callable
        ``() -> list[Report]``.
    cost : float
        Nominal seconds on a quiet machine with one BLAS thread (``benchmarks/bench_verify.py`` measures
        them): the estimate of the time left weighs the steps by it, scaled by the speed seen so far.
    """

    name: str
    run: Callable[[], list[Report]]
    cost: float = 0.5


def _case_name(spec: ConstructionSpec, case: dict) -> str:
    case = dict(case)
    N, R, k = case.pop("N"), case.pop("R"), case.pop("k", 1)
    codes, D = case.pop("codes", None), case.pop("D", None)
    words = [f"{spec.id} {codes or spec.codes or 'its own'} codes" + (f" (D = {D})" if D else ""),
             f"N = {N}, R = {R}" + (f", k = {k}" if k != 1 else "")]
    if case.pop("compare_integer", False):
        words.append("float64, then integer mode")
    if case.pop("integer", False):
        words.append("integer mode")
    words += [f"{key} {value}" for key, value in case.items()]
    return ", ".join(words)


# Nominal CPU seconds of the steps (benchmarks/bench_verify.py --steps, one BLAS thread), for the estimate of
# the time left only: a construction case not named here counts _CASE_COST.
_CASE_COSTS = {"A2b": 4.0, "G1": 0.3}
_CASE_COST = 0.1


def _construction_steps(hops: str, seed: int, budget: Budget, full: bool) -> list[Step]:
    return [Step(f"{hops} hop: {_case_name(spec, case)}",
                 partial(_case_report, spec, case, seed, False, budget), _CASE_COSTS.get(spec.id, _CASE_COST))
            for spec in registry.specs(hops) for case in spec.verify_cases]


def _certified_steps(seed: int, budget: Budget, full: bool) -> list[Step]:
    def row(spec: ConstructionSpec) -> list[Report]:
        return [certified_row(spec, seed, False, budget)]
    return [Step(f"certified for every task: {spec.id}", partial(row, spec), 0.5 if spec.id == "A1" else 0.2)
            for spec in certified_specs()]


def _bounds_steps(seed: int, budget: Budget, full: bool) -> list[Step]:
    return [Step("counting: every (N!)^R task enumerated, trees searched, gadgets built",
                 partial(bounds_checks.counting_reports, seed), 2.2),
            Step("bits needed and lower bounds: each construction quantized at its b and b - 1",
                 partial(bits_and_bound_reports, seed, False, budget), 2.3)]


def _training_steps(seed: int, budget: Budget, full: bool) -> list[Step]:
    N, R = TRAINING_SIZE
    return [Step("gradients against finite differences (N = 7, d = 6)", lambda: [gradient_row(seed)], 0.1),
            Step(f"gradient descent at G1's d (N = {N}, R = {R})", lambda: [gd_row(seed, False, budget)],
                 0.15),
            Step(f"capacity threshold, learned{' and frozen' if full else ''} embeddings (N = {N}, R = {R}, "
                 "one training per width tried)", lambda: [threshold_row(seed, False, budget=budget,
                                                                         frozen=full)],
                 5.5 if full else 2.3)]


def _probes_steps(seed: int, budget: Budget, full: bool) -> list[Step]:
    N, R = PROBES_SIZE
    return [Step(f"probes on G1 and an untrained model (N = {N}, R = {R})",
                 partial(section_probes, seed, False, budget), 0.7)]


def _mechanism_steps(seed: int, budget: Budget, full: bool) -> list[Step]:
    R = 4 if full else MECHANISM_R
    return [Step(f"mechanism probes: G1, G1 wider, A1, a trained model, its initial weights (N = 256, "
                 f"R = {R})",
                 partial(_section_mechanism, seed, False, budget, full), 8.0 if full else 2.3)]


def verify_steps(seed: int = 0, budget: Budget | None = None, full: bool = False) -> list[Step]:
    """The steps of ``georecall verify``: each section of :data:`SECTIONS`, split into one step per row
    where the section's rows are known before it runs (a section it does not know, e.g. one a test puts
    into :data:`SECTIONS`, is one step).

    Parameters
    ----------
    seed : int
        The run seed.
    budget : Budget or None
        The run's memory budget.
    full : bool
        ``verify --full`` (:data:`FULL_ONLY`).

    Returns
    -------
    list of Step
    """
    budget = as_budget(budget)
    split: dict[Any, Any] = {section_single_hop: partial(_construction_steps, "single"),
             section_multi_hop: partial(_construction_steps, "multi"),
             section_certified: _certified_steps, section_bounds: _bounds_steps,
             section_training: _training_steps, section_probes: _probes_steps,
             _section_mechanism: _mechanism_steps}
    steps: list[Step] = []
    for title, section in SECTIONS:
        if section in split:
            steps += split[section](seed, budget, full)
        else:
            steps.append(Step(title, partial(section, seed=seed, progress=False, budget=budget)))
    return steps


def _spec_steps(specs: list[ConstructionSpec], seed: int, budget: Budget | None) -> list[Step]:
    """The steps of ``verify --construction``: :func:`construction_reports` of each spec, a step per row."""
    budget = as_budget(budget)
    steps: list[Step] = []
    for spec in specs:
        if not spec.verify_cases:
            raise InputError(f"{spec.label} lists no verify_cases: give its ConstructionSpec "
                             "verify_cases=({'N': ..., 'R': ...},)")
        steps += [Step(f"{_case_name(spec, case)}", partial(_case_report, spec, case, seed, False, budget),
                       _CASE_COSTS.get(spec.id, _CASE_COST)) for case in spec.verify_cases]
        steps.append(Step(f"certified for every task: {spec.id}",
                          partial(lambda s: [certified_row(s, seed, False, budget)], spec), 0.2))
        steps.append(Step(f"bits needed and lower bounds: {spec.id}",
                          partial(bits_and_bound_reports, seed, False, budget, [spec]), 0.5))
    return steps


def _seconds(t: float) -> str:
    return f"{t:.0f} s" if t < 100 else f"{t / 60:.1f} min"


def verify_reports(specs: list[ConstructionSpec] | None = None, seed: int = 0, progress: bool = False,
                   budget: Budget | None = None, full: bool = False) -> list[Report]:
    """Every row of ``georecall verify``: the steps of :func:`verify_steps` in order, or with ``specs`` only
    those constructions' rows (:func:`construction_reports`, ``verify --construction``).

    OpenBLAS runs one thread meanwhile (:func:`~georecall.experiments.blas.limited_threads`): the rows'
    products are small, and two threads on a shared machine made ``verify`` several times slower.

    Parameters
    ----------
    specs : list of ConstructionSpec, optional
        Only these constructions (``None``: every section).
    seed : int
        The run seed.
    progress : bool
        One line per step on stderr before it runs: ``[i/n steps]``, what it checks, the time so far and
        an estimate of the time left (a step may give more than one row: ``n`` counts steps, not rows).
    budget : Budget, optional
        The run's memory budget, passed to every section.
    full : bool
        ``verify --full``: also :data:`FULL_ONLY`.

    Returns
    -------
    list of Report
        In the order run.

    Raises
    ------
    InputError
        A row over the budget, or a spec without ``verify_cases``.
    """
    with blas.limited_threads(1):
        steps = verify_steps(seed, budget, full) if specs is None else _spec_steps(specs, seed, budget)
        total = sum(step.cost for step in steps)
        reports: list[Report] = []
        start, done = time.perf_counter(), 0.0
        for i, step in enumerate(steps, 1):
            elapsed = time.perf_counter() - start
            if progress:
                pace = elapsed / done if done > 0 and elapsed > 1 else 1.0  # seconds per nominal second
                left = max(0.0, total - done) * pace
                print(f"[{i}/{len(steps)} steps] {step.name} … {_seconds(elapsed)} elapsed, about "
                      f"{_seconds(left)} left", file=sys.stderr, flush=True)
            reports += step.run()
            done += step.cost
        return reports
