"""The "certified for every task" rows of ``georecall verify``: one per registered construction.

Each row certifies the construction at its ``verify_cases`` (integer mode too where the case compares it) with
:func:`georecall.verify.checking.certify.certify`, and carries a negative control: a planted counterexample on
the same construction (``verify.checking.planted``: one pair-detector unit) whose seeded task passes the
ordinary check but which certify must REFUTE, with a witness task that the ordinary check fails (A1 and
A2(a): a unit firing on a foreign query, A2(b): a pair leaking onto other states; each fails most tasks). A
construction that declares no task encoding (a user's) passes its row only by answering UNKNOWN with a
reason: never a PASS for every task by default.
"""

from __future__ import annotations

import sys
import time

from georecall.constructions import registry
from georecall.constructions.registry import ConstructionSpec
from georecall.memory import Budget, as_budget
from georecall.verify.checking.certify import certify
from georecall.verify.checking.planted import (
    ADVERSARIAL,
    FOREIGN_A1,
    FOREIGN_A2A,
    LEAKY_A2B,
    PAIR_C1,
    PAIR_G1,
    PAIR_G2,
    PLANTED,
)
from georecall.verify.checking.report import Report, claim_report
from georecall.verify.checking.run import run_check

__all__ = ["CONTROLS", "NOT_RARE", "certified_row", "certified_specs", "control_checks", "section_certified"]

# The negative control of each construction: (planted spec, N, R, k, options), small enough to run in seconds.
# Facts stored in an MLP (A1, A2(a): a unit firing on a foreign query; A2(b): a pair that leaks onto its
# neighbours' states) cannot be broken rarely: those controls fail most tasks, the seeded one too, and their
# rows do not ask the seeded task to pass (NOT_RARE).
CONTROLS = {"G1": (PAIR_G1, 256, 2, 1, {"integer": True}), "G2": (PAIR_G2, 256, 2, 2, {}),
            "C1": (PAIR_C1, 256, 2, 2, {}), "A1": (FOREIGN_A1, 64, 2, 1, {"integer": True}),
            "A2a": (FOREIGN_A2A, 16, 2, 2, {}), "A2b": (LEAKY_A2B, 64, 2, 2, {})}
NOT_RARE = (FOREIGN_A1, FOREIGN_A2A, LEAKY_A2B)


def control_checks(spec: ConstructionSpec, N: int, R: int, k: int, options: dict, seed: int = 0,
                   budget: Budget | None = None) -> dict:
    """The negative control's named checks: the seeded task passes ``check``; ``certify`` REFUTES, and the
    witness task fails ``check``.

    Parameters
    ----------
    spec : ConstructionSpec
        A planted counterexample.
    N, R, k : int
        Its sizes.
    options : dict
        Builder options.
    seed : int
        The run seed.
    budget : Budget or None
        The run's memory budget, passed to ``certify`` and ``run_check``.

    Returns
    -------
    dict
        Check name -> bool.

    Raises
    ------
    InputError
        An estimate over the budget.
    """
    budget = as_budget(budget)
    cert = certify(spec, N, R, k, options=options, seed=seed, budget=budget)
    confirmed = cert.confirmation is not None and not cert.confirmation["check_passed"]
    checks = {f"control {spec.id}: certify REFUTES it": cert.verdict == "REFUTED",
              f"control {spec.id}: its witness task fails check": confirmed}
    if spec not in NOT_RARE:
        seeded = run_check(spec, N, R, k, seed=seed, options=options, budget=budget)
        checks = {f"control {spec.id} ({spec.name}, N={N}): seeded task passes check": seeded.passed,
                  **checks}
    return checks


def certified_row(spec: ConstructionSpec, seed: int = 0, progress: bool = False,
                  budget: Budget | None = None) -> Report:
    """One construction's row: CERTIFIED at every verify case (and its negative control caught), or, without a
    declared task encoding, UNKNOWN with a reason.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction.
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget, passed to every ``certify`` and check.

    Returns
    -------
    Report

    Raises
    ------
    InputError
        A case over the budget.
    """
    budget = as_budget(budget)
    start = time.perf_counter()
    checks: dict[str, bool] = {}
    margins = []
    extra: dict = {"cases": []}
    for case in spec.verify_cases:
        case = dict(case)
        N, R, k = case.pop("N"), case.pop("R"), case.pop("k", 1)
        codes, D = case.pop("codes", None), case.pop("D", None)  # None: the builder's own codes
        both = case.pop("compare_integer", False)
        for options in ([case, {**case, "integer": True}] if both else [case]):
            if progress:
                mode = ", integer mode" if options.get("integer") else ""
                more = "".join(f", {key} {value}" for key, value in options.items() if key != "integer")
                print(f"{spec.label}: certify {codes or 'default'} codes, N = {N}, R = {R}, k = {k}{mode}"
                      f"{more}", file=sys.stderr, flush=True)
            named = {} if codes is None else {"codes": codes}
            cert = certify(spec, N, R, k, **named, D=D, options=options, seed=seed, budget=budget)
            label = f"{cert.name} N={N} R={R} k={k}"
            extra["cases"].append(cert.as_dict())
            if spec.task_encoding is None:
                checks[f"{label}: UNKNOWN (no task encoding declared), not a PASS"] = (
                    cert.verdict == "UNKNOWN")
            else:
                margin = cert.min_margin_exact or (f"{cert.min_margin:.4g}" if cert.min_margin is not None
                                                   else "none")
                checks[f"{label}: CERTIFIED for every task, min margin {margin}"] = (
                    cert.verdict == "CERTIFIED")
                margins.append(margin)
    control = CONTROLS.get(spec.id)
    if control is not None:
        checks.update(control_checks(*control, seed=seed, budget=budget))
    params = {"construction": spec.id, "seed": seed}
    # a construction without a declared encoding is not certified: its row says what it does check
    title = (f"{spec.id} certified for every task" if spec.task_encoding is not None
             else f"{spec.id} for every task: UNKNOWN (no encoding), as claimed")
    report = claim_report(title, params, checks, time.perf_counter() - start,
                          {"d": "", "m": "", "margin": ", ".join(margins)}, extra)
    # the margin column: the headline case's certified minimum (an integer-mode case when there is one)
    cases = [c for c in extra["cases"] if c["min_margin"] is not None]
    headline = next((c for c in cases if c["integer"]), cases[0] if cases else None)
    if headline is not None:
        report.result.min_margin = float(headline["min_margin"])
    return report


def section_certified(seed: int = 0, progress: bool = False, budget: Budget | None = None
                      ) -> list[Report]:
    """A "certified for every task" row per registered construction (module docstring; the planted
    counterexamples are controls, not rows, even when a ``MODULE:ATTR`` lookup has registered them).

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget, passed to every row.

    Returns
    -------
    list of Report
    """
    budget = as_budget(budget)
    return [certified_row(spec, seed, progress, budget) for spec in certified_specs()]


def certified_specs() -> list[ConstructionSpec]:
    """The registered constructions that get a "certified for every task" row: all but the planted
    counterexamples (controls, not rows, even when a ``MODULE:ATTR`` lookup has registered them).

    Returns
    -------
    list of ConstructionSpec
    """
    controls = (*PLANTED, *NOT_RARE, *ADVERSARIAL)
    return [spec for spec in registry.specs() if spec not in controls]
