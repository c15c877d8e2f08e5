"""What a capacity sweep (:mod:`.sweep`) would still cost, before its first trial: trials × measured seconds
per step × steps.

Each configuration's search (:mod:`.sweep_search`) is simulated against a monotone oracle whose threshold
lies anywhere in its prediction's band (:func:`.sweep_fit.predict_threshold`); seconds per step come from
the recorded trials (:func:`step_seconds`, a line through their own seconds, :func:`calibration`) or from a
few timed steps (:func:`measure_step_seconds`). :func:`estimate_cost` is logged before a sweep starts
(:func:`cost_line`) and refuses a run over ``budget_hours``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from georecall.experiments.sweep_fit import predict_threshold
from georecall.experiments.sweep_records import (
    MAX_COUNT,
    MAX_STEPS,
    MAX_WIDTH,
    record_key,
    same_settings,
)
from georecall.experiments.sweep_search import make_search
from georecall.experiments.sweep_trial import SEED_CONTRACT, TrialSettings
from georecall.theory import __version__
from georecall.theory.tasks import task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import train, training_data

__all__ = ["calibration", "cost_line", "estimate_cost", "measure_step_seconds", "step_seconds", "timed",
           "untimed"]


def _whole(v, low: int, high: int) -> bool:
    return bool(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and low <= v < high)


def _finite(v, low: float = 0.0) -> bool:
    return bool(isinstance(v, (int, float, np.floating)) and not isinstance(v, bool) and math.isfinite(v)
                and v > low)


def timed(record: dict) -> bool:
    """Whether a trial record's numbers may enter an estimate: ``N``, ``R``, ``d`` whole and in range
    (:data:`.sweep_records.MAX_WIDTH`, ``MAX_COUNT``), ``steps_run`` whole in [1, ``steps``], ``seconds``
    finite and positive. The reader (:func:`.sweep_records.read_sweep`) already skips most damaged lines;
    this is the estimate's own check, for records handed to it directly.

    Parameters
    ----------
    record : dict

    Returns
    -------
    bool
    """
    steps = record.get("steps")
    return (_whole(record.get("N"), 2, MAX_COUNT) and _whole(record.get("R"), 1, MAX_COUNT)
            and _whole(record.get("d"), 1, MAX_WIDTH) and _whole(steps, 1, MAX_STEPS)
            and _whole(record.get("steps_run"), 1, int(steps) + 1)  # type: ignore[arg-type]  # steps: whole
            and _finite(record.get("seconds")))


def _timed_rows(records: list[dict], N: int, settings: TrialSettings) -> list[dict]:
    """The trial records at N with these settings whose timing is usable (:func:`timed`)."""
    return [r for r in records if r.get("kind") == "trial" and r.get("N") == N and same_settings(r, settings)
            and r.get("steps_run") and r.get("seconds") and timed(r)]


def untimed(records: list[dict], settings: TrialSettings) -> int:
    """How many trial records with these settings carry a timing that :func:`timed` refuses (skipped by the
    estimate, and said).

    Parameters
    ----------
    records : list of dict
    settings : TrialSettings

    Returns
    -------
    int
    """
    return sum(1 for r in records if isinstance(r, dict) and r.get("kind") == "trial"
               and same_settings(r, settings) and ("steps_run" in r or "seconds" in r)
               and r.get("seconds") is not None and not timed(r))


def step_seconds(records: list[dict], N: int, settings: TrialSettings) -> Callable[[int, int], float] | None:
    """Seconds per training step as a function of (R, d), fitted to the recorded trials at N.

    The model is ``seconds/step = R·(a + b·d)`` (the step is linear in the N·R queries and, through the
    read-out over N answers and the MLP, in d), least squares over ``seconds / steps_run`` of every trial
    record at N with the same settings (each one a measurement, under whatever load it ran).

    Parameters
    ----------
    records : list of dict
        Sweep records (trial records are used).
    N : int
        Entities.
    settings : TrialSettings
        Only trials with these settings count.

    Returns
    -------
    callable or None
        ``(R, d) -> seconds``; ``None`` with fewer than two distinct (R, d) measured.
    """
    rows = _timed_rows(records, N, settings)
    if len({(r["R"], r["d"]) for r in rows}) < 2:
        return None
    A = np.array([[r["R"], r["R"] * r["d"]] for r in rows], dtype=float)
    y = np.array([r["seconds"] / r["steps_run"] for r in rows], dtype=float)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    a, b = max(float(a), 0.0), max(float(b), 0.0)
    if not (math.isfinite(a) and math.isfinite(b)) or (a == 0.0 and b == 0.0):
        return None
    return lambda R, d: R * (a + b * d)


def measure_step_seconds(N: int, R: int, d: int, settings: TrialSettings, steps: int = 2) -> float:
    """Seconds per step of a trial at (N, R, d), timed over a few steps of the trainer (no records needed).

    Parameters
    ----------
    N, R, d : int
        The trial's sizes.
    settings : TrialSettings
        The trial's settings.
    steps : int
        Steps timed.

    Returns
    -------
    float
    """
    task = task_for_seed(N, R, 0)
    tokens, answers, positions, T = training_data(task, settings.k, settings.cot)
    model = init_model(N, R, d, settings.width_factor * d, attention=settings.attention, heads=settings.heads,
                       positions=T if settings.k > 1 or settings.cot else None, rng=0,
                       dtype=np.dtype(settings.dtype))
    result = train(model, tokens, answers, steps=steps, lr=settings.lr, positions=positions, rng=0,
                   dtype=np.dtype(settings.dtype), stop_at_accuracy=None)
    return result.seconds / max(result.steps, 1)


def _simulate(search: str, prediction: dict | None, known: dict[int, bool], range_: dict,
              threshold: float) -> list[int]:
    """The widths a search would still train if success were exactly ``d >= threshold`` (known trials are
    reused, not counted)."""
    s = make_search(search, prediction, known, range_)
    trained = []
    while not s.done:
        d = s.next_d
        assert d is not None  # a search that is not done has a next d
        if d in known:
            s.feed(known[d])
            continue
        trained.append(d)
        s.feed(d >= threshold)
    return trained


def calibration(records: list[dict], N: int, settings: TrialSettings,
                rate: Callable[[int, int], float]) -> dict | None:
    """How the recorded trials at N compare with the step model ``rate`` (:func:`step_seconds`): the factors
    that turn its seconds per step into the seconds the trials took.

    The step model is a least-squares line through measurements taken under whatever load the machine had;
    a trial's ``seconds / (rate(R, d) · steps_run)`` is how much slower (or faster) than the line it ran.
    The estimate scales its worst case by the largest of these ratios (so it holds unless the machine is
    slower than during every recorded trial) and its expected cost by their median. Successful trials stop
    early: the expected cost counts a success at the median share of the step budget that recorded successes
    used.

    Parameters
    ----------
    records : list of dict
        Sweep records (trial records at N with these settings are used).
    N : int
        Entities.
    settings : TrialSettings
        Only trials with these settings count.
    rate : callable
        ``(R, d) -> seconds per step``, the model being calibrated.

    Returns
    -------
    dict or None
        ``slowest`` (the largest ratio), ``median`` (the median ratio), ``trials`` (how many trials), and
        ``success_share`` (median ``steps_run / steps`` of the successful ones; 1 without any); ``None``
        without recorded trials at N.
    """
    rows = _timed_rows(records, N, settings)
    ratios = [r["seconds"] / (rate(r["R"], r["d"]) * r["steps_run"]) for r in rows
              if rate(r["R"], r["d"]) > 0]
    ratios = [x for x in ratios if math.isfinite(x) and x > 0]
    if not ratios:
        return None
    shares = [r["steps_run"] / r["steps"] for r in rows if r["reached"] and r["steps"]]
    return {"slowest": float(max(ratios)), "median": float(np.median(ratios)), "trials": len(ratios),
            "success_share": float(np.median(shares)) if shares else 1.0}


def estimate_cost(records: list[dict], configs: list[tuple], settings: TrialSettings, *, search: str,
                  d_min: int, d_max: int, resolution: int,
                  seconds: Callable[[int, int, int], float] | None = None) -> dict:
    """What a sweep of ``configs`` would still cost: trials × measured seconds per step × steps.

    For each configuration the search is simulated against a monotone oracle whose threshold lies anywhere in
    the prediction's band (:func:`.sweep_fit.predict_threshold`; every integer width in it), reusing the
    recorded trials; the worst case over the band is counted, each trial at its full step budget. Seconds per
    step come from :func:`step_seconds` (recorded trials at that N), calibrated against those trials' own
    seconds (:func:`calibration`): the worst case is scaled by the slowest recorded trial's ratio to the step
    model, the expected cost (threshold at the prediction) by the median ratio, with successful trials at the
    median share of the step budget recorded successes used. For an N without records, one call ``seconds(N,
    R, d0)`` at the predicted width d0 (e.g. :func:`measure_step_seconds`), scaled linearly in d, uncalibrated
    (nothing recorded to calibrate against).

    Parameters
    ----------
    records : list of dict
        The results file's records.
    configs : list of tuple
        ``(N, R, mode, seed)`` still to search.
    settings : TrialSettings
        The trials' settings.
    search : str
        ``"doubling"`` or ``"predicted"``.
    d_min, d_max, resolution : int
        The search range.
    seconds : callable, optional
        ``(N, R, d) -> seconds per step`` where no trial at N is recorded.

    Returns
    -------
    dict
        ``trials`` and ``hours`` (worst case over the bands), ``expected_trials`` and ``expected_hours`` (the
        threshold exactly at the prediction), ``per_config`` (each configuration's prediction, widths,
        hours and ``calibration``: :func:`calibration`'s dict, ``None`` when uncalibrated), and ``unknown``
        (configurations with no prediction: not counted).
    """
    range_ = {"d_min": d_min, "d_max": d_max, "resolution": resolution}
    known_by: dict[tuple, dict[int, bool]] = {}
    for r in records:
        if r.get("kind") == "trial" and same_settings(r, settings):
            config = (r["N"], r["R"], r["mode"], r["seed"], *record_key(r, ("seed_contract", "version")))
            known_by.setdefault(config, {})[r["d"]] = bool(r["reached"])
    rates: dict[int, Callable[[int, int], float] | None] = {}
    calibrations: dict[int, dict | None] = {}
    per_config, unknown = [], []
    total_trials = total_hours = exp_trials = exp_hours = 0.0
    for N, R, mode, seed in configs:
        prediction = predict_threshold(records, N, R, mode, settings)
        if prediction is None:
            unknown.append((N, R, mode, seed))
            continue
        if N not in rates:
            fitted = step_seconds(records, N, settings)
            rates[N] = fitted
            calibrations[N] = None if fitted is None else calibration(records, N, settings, fitted)
        rate, calibrated = rates[N], calibrations[N]
        if rate is None and seconds is None:
            unknown.append((N, R, mode, seed))
            continue

        if rate is None:  # one measurement at the predicted width, scaled linearly in d
            assert seconds is not None  # checked above
            d0 = max(int(round(prediction["d"])), 1)
            measured = seconds(N, R, d0)
            if not _finite(measured):  # a measurement of nothing prices nothing: not counted, said
                unknown.append((N, R, mode, seed))
                continue
            rate = lambda R_, d, s0=measured, d0=d0: s0 * d / d0  # noqa: E731
        slowest = calibrated["slowest"] if calibrated else 1.0
        typical = calibrated["median"] if calibrated else 1.0
        share = calibrated["success_share"] if calibrated else 1.0

        def cost(widths: list[int], factor: float, threshold: float | None = None, R=R, rate=rate,
                 share=share) -> float:
            """Hours of the trials at ``widths`` (with a threshold: successes at ``share`` of the steps)."""
            steps = [settings.steps * (share if threshold is not None and d >= threshold else 1.0)
                     for d in widths]
            return factor * sum(rate(R, d) * n for d, n in zip(widths, steps)) / 3600

        known = known_by.get((N, R, mode, seed, SEED_CONTRACT, __version__), {})
        lo, hi = prediction["band"]
        worst: list[int] = []
        worst_hours = -1.0
        for t in range(max(int(math.floor(lo)), 1), int(math.ceil(hi)) + 1):
            widths = _simulate(search, prediction, known, range_, t)
            hours = cost(widths, slowest)
            if hours > worst_hours:
                worst, worst_hours = widths, hours
        expected = _simulate(search, prediction, known, range_, prediction["d"])
        expected_hours = cost(expected, typical, prediction["d"])
        if (worst and not (math.isfinite(worst_hours) and worst_hours > 0)) \
                or (expected and not (math.isfinite(expected_hours) and expected_hours > 0)):
            unknown.append((N, R, mode, seed))  # work that trains is never free: no estimate, not a zero
            continue
        total_trials += len(worst)
        total_hours += worst_hours
        exp_trials += len(expected)
        exp_hours += expected_hours
        per_config.append({"N": N, "R": R, "mode": mode, "seed": seed, "prediction": prediction,
                           "known_trials": len(known), "worst_widths": worst, "worst_hours": worst_hours,
                           "expected_widths": expected, "expected_hours": expected_hours,
                           "calibration": calibrated})
    return {"trials": int(total_trials), "hours": total_hours, "expected_trials": int(exp_trials),
            "expected_hours": exp_hours, "per_config": per_config, "unknown": unknown,
            "skipped_timings": untimed(records, settings)}


def cost_line(estimate: dict) -> str:
    """:func:`estimate_cost` in one line.

    Parameters
    ----------
    estimate : dict
        What :func:`estimate_cost` returns.

    Returns
    -------
    str
    """
    parts = [f"estimated cost: {estimate['trials']} trials, {estimate['hours']:.2f} h at most (thresholds "
             f"anywhere in the predictions' bands, every trial at its full step budget); "
             f"{estimate['expected_trials']} trials, {estimate['expected_hours']:.2f} h if each threshold is "
             f"at its prediction"]
    factors = [c["calibration"] for c in estimate["per_config"] if c.get("calibration")]
    if factors:
        f = factors[0]
        parts.append(f" (calibrated on {f['trials']} recorded trials: seconds per step × {f['slowest']:.2f}, "
                     f"the slowest trial against the step model, at most; × {f['median']:.2f}, the median, "
                     f"expected, with successes at {f['success_share']:.0%} of the steps)")
    elif estimate["per_config"]:
        parts.append(" (uncalibrated: no recorded trial at this N)")
    if estimate.get("skipped_timings"):
        parts.append(f"; {estimate['skipped_timings']} trial record(s) with a damaged timing (steps_run, "
                     "seconds, or sizes out of range) skipped")
    if estimate["unknown"]:
        parts.append(f"; {len(estimate['unknown'])} configuration(s) without a prediction or a measured step "
                     "not counted")
    return "".join(parts)
