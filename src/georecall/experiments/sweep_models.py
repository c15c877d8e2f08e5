"""The N-axis model comparison of a capacity sweep (:mod:`.sweep`): ``d* = a + c·R·ln N`` (M_log) against
``d* = b·N^p·R^q`` (M_pow), per mode, exactly as docs/science/n_axis_protocol.md declares it.

- *Points* (:func:`n_axis_points`): one threshold record per search (N, R, mode, seed) with the protocol's
  trial settings; a search recorded twice counts once (the later record: the protocol's own search, which
  reuses the trials of an earlier one); searches that never reached 100 % and searches censored at the floor
  of their range (d* only an upper bound, :func:`.sweep_records.is_floor_censored`) are counted, not fitted.
- *Fits* (:func:`fit_log_model`, :func:`fit_power_model`): unweighted least squares on ln d*; M_pow is linear
  in (1, ln N, ln R); M_log is fitted by ``scipy.optimize.least_squares`` started from the linear fit of d* on
  (1, R·ln N). Standard errors from the fit's covariance ``σ²·(JᵀJ)⁻¹``, ``σ² = RSS/(n − k)``.
- *Criteria* (:func:`compare_models`): (1) held-out octave: fit on N < 2^13 (i.e. N ≤ 2^12), predict every
  N = 2^13 search, score = RMSE of ln d*; (2) AIC = n·ln(RSS/n) + 2k on all octaves, ΔAIC = AIC(M_log) −
  AIC(M_pow). Verdict (:func:`verdict`): "log N" when M_log wins (1) and ΔAIC < 2; "power of N" when M_pow
  wins (1) and ΔAIC > −2; "cannot tell" otherwise.
- *Reported with it*: the seeds' spread per (N, R), the budget-bound searches (:func:`budget_bound`: the
  deciding trial reached at ≥ 90 % of its steps) with any rerun at twice the steps, and frozen/learned ratios.

The figure and the command are in :mod:`.n_axis`.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from georecall.errors import InputError
from georecall.experiments.sweep_records import TRIAL_KEY, is_floor_censored, threshold_key, trial_key

__all__ = ["BUDGET_FRACTION", "HELD_OUT_N", "PROTOCOL_SETTINGS", "VERDICTS", "aic", "budget_bound",
           "budget_lines", "compare_models", "fit_log_model", "fit_power_model", "frozen_over_learned",
           "n_axis_points", "predict_log", "predict_power", "seed_spread", "verdict"]

# The trial settings the protocol declares (docs/science/n_axis_protocol.md, "Grid"): only these count.
PROTOCOL_SETTINGS = {"k": 1, "attention": "uniform", "heads": 1, "width_factor": 4, "lr": 0.01, "steps": 500,
                     "dtype": "float32", "cot": False}
HELD_OUT_N = 2**13  # criterion 1: fit on N < HELD_OUT_N, predict N == HELD_OUT_N
BUDGET_FRACTION = 0.9  # a deciding trial reached at >= 90 % of its steps: the search is budget-bound
VERDICTS = ("log N", "power of N", "cannot tell")
_AIC_MARGIN = 2.0
_DEFAULTS = {"k": 1, "cot": False, "heads": 1}
_CONFIG_LENGTH = len(TRIAL_KEY) - 1  # a trial's key is its search's configuration and d


def _setting(record: dict, name: str):
    return record.get(name, _DEFAULTS.get(name))


def n_axis_points(records: list[dict], settings: dict | None = None) -> dict:
    """The searches the comparison fits: one threshold record per (N, R, mode, seed) with the settings.

    Parameters
    ----------
    records : list of dict
        Sweep records (:func:`.sweep_records.read_records`); trial records and other kinds are skipped.
    settings : dict, optional
        Trial settings a record must have (default :data:`PROTOCOL_SETTINGS`).

    Returns
    -------
    dict
        ``points`` (the threshold records with a measured d*, file order, the later record of a search
        recorded twice), ``unreached`` (those without a d*), ``censored`` (those censored at the floor, d*
        only an upper bound), ``superseded`` (earlier records of a search recorded again),
        ``other_settings`` (threshold records with other settings, not used).
    """
    settings = PROTOCOL_SETTINGS if settings is None else settings
    chosen: dict[tuple, dict] = {}
    superseded = other = 0
    for r in records:
        if r.get("kind") != "threshold":
            continue
        if any(_setting(r, name) != value for name, value in settings.items()):
            other += 1
            continue
        key = (r["N"], r["R"], r["mode"], r["seed"])
        if key in chosen:
            superseded += 1
            del chosen[key]  # re-inserted below: the later record, in its own file position
        chosen[key] = r
    rows = list(chosen.values())
    return {"points": [r for r in rows if r["d_star"] is not None and not is_floor_censored(r)],
            "unreached": [r for r in rows if r["d_star"] is None],
            "censored": [r for r in rows if is_floor_censored(r)],
            "superseded": superseded, "other_settings": other}


def _arrays(points: list[dict]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    N = np.array([p["N"] for p in points], dtype=float)
    R = np.array([p["R"] for p in points], dtype=float)
    d = np.array([p["d_star"] for p in points], dtype=float)
    return N, R, d


def _covariance(jacobian: np.ndarray, rss: float, n: int, k: int) -> list[float | None]:
    """Standard errors ``sqrt(diag(σ²·(JᵀJ)⁻¹))`` with ``σ² = RSS/(n − k)``; None where undefined."""
    if n <= k:
        return [None] * k
    gram = jacobian.T @ jacobian
    if np.linalg.matrix_rank(gram) < k:
        return [None] * k
    cov = np.linalg.inv(gram) * (rss / (n - k))
    return [float(math.sqrt(v)) if v >= 0 and math.isfinite(v) else None for v in np.diag(cov)]


def aic(rss: float, n: int, k: int) -> float:
    """Akaike's criterion for least squares: ``n·ln(RSS/n) + 2k`` (``-inf`` for an exact fit).

    Parameters
    ----------
    rss : float
        Residual sum of squares (of ln d*), ≥ 0.
    n : int
        Number of points, ≥ 1.
    k : int
        Number of fitted parameters.

    Returns
    -------
    float

    Raises
    ------
    InputError
        ``n < 1`` or ``rss < 0``.
    """
    if n < 1 or not rss >= 0:
        raise InputError(f"AIC needs n >= 1 points and RSS >= 0 (got n = {n}, RSS = {rss})")
    if rss == 0:
        return -math.inf
    return n * math.log(rss / n) + 2 * k


def _need(points: list[dict], model: str, k: int) -> None:
    N, R, _ = _arrays(points)
    if len(points) < k:
        raise InputError(f"{model} has {k} parameters and needs at least {k} searches, got {len(points)}")
    if np.unique(N).size < 2:
        raise InputError(f"{model} needs searches at two values of N or more")
    if model == "M_pow" and np.unique(R).size < 2:
        raise InputError("M_pow needs searches at two values of R or more (its exponent q is fitted)")


def fit_power_model(points: list[dict]) -> dict:
    """M_pow: ``ln d* = ln b + p·ln N + q·ln R`` by ordinary least squares.

    Parameters
    ----------
    points : list of dict
        Threshold records with a d* (``N``, ``R``, ``d_star``).

    Returns
    -------
    dict
        ``model`` ("M_pow"), ``params`` (``b``, ``p``, ``q``), ``stderr`` (of ``ln_b``, ``p``, ``q``; None
        when n ≤ 3), ``n``, ``k`` (3), ``rss`` (on ln d*), ``aic``.

    Raises
    ------
    InputError
        Fewer than 3 points, or one value of N or of R only.
    """
    _need(points, "M_pow", 3)
    N, R, d = _arrays(points)
    X = np.stack([np.ones_like(N), np.log(N), np.log(R)], axis=1)
    y = np.log(d)
    coef = np.linalg.lstsq(X, y, rcond=None)[0]
    rss = float(np.sum((X @ coef - y) ** 2))
    se = _covariance(X, rss, len(points), 3)
    params = {"b": float(math.exp(coef[0])), "p": float(coef[1]), "q": float(coef[2])}
    return {"model": "M_pow", "params": params,
            "stderr": {"ln_b": se[0], "p": se[1], "q": se[2]}, "n": len(points), "k": 3, "rss": rss,
            "aic": aic(rss, len(points), 3)}


def predict_power(fit: dict, N, R) -> np.ndarray:
    """d* predicted by a fitted M_pow.

    Parameters
    ----------
    fit : dict
        :func:`fit_power_model`'s result.
    N, R : array_like
        Configurations.

    Returns
    -------
    numpy.ndarray
    """
    p = fit["params"]
    return p["b"] * np.asarray(N, dtype=float) ** p["p"] * np.asarray(R, dtype=float) ** p["q"]


def predict_log(fit: dict, N, R) -> np.ndarray:
    """d* predicted by a fitted M_log (may be ≤ 0 far outside the data).

    Parameters
    ----------
    fit : dict
        :func:`fit_log_model`'s result.
    N, R : array_like
        Configurations.

    Returns
    -------
    numpy.ndarray
    """
    p = fit["params"]
    return p["a"] + p["c"] * np.asarray(R, dtype=float) * np.log(np.asarray(N, dtype=float))


_TINY = 1e-12  # a prediction at or below 0 has no logarithm: its residual is taken at this floor


def fit_log_model(points: list[dict]) -> dict:
    """M_log: ``d* = a + c·R·ln N`` by nonlinear least squares on ln d* (scipy ``least_squares``), started
    from the linear least-squares fit of d* on (1, R·ln N).

    Parameters
    ----------
    points : list of dict
        Threshold records with a d*.

    Returns
    -------
    dict
        ``model`` ("M_log"), ``params`` (``a``, ``c``), ``stderr`` (of ``a``, ``c``; None when n ≤ 2),
        ``start`` (the linear fit), ``n``, ``k`` (2), ``rss`` (on ln d*), ``aic``, ``converged``.

    Raises
    ------
    InputError
        Fewer than 2 points, or one value of N only.
    """
    from scipy.optimize import least_squares  # the trainer's scipy: imported where it is used

    _need(points, "M_log", 2)
    N, R, d = _arrays(points)
    x = R * np.log(N)
    start = np.linalg.lstsq(np.stack([np.ones_like(x), x], axis=1), d, rcond=None)[0]
    y = np.log(d)

    def residuals(theta):
        return np.log(np.maximum(theta[0] + theta[1] * x, _TINY)) - y

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = least_squares(residuals, start, method="lm" if len(points) > 2 else "trf")
    a, c = (float(v) for v in result.x)
    res = residuals(result.x)
    rss = float(np.sum(res**2))
    se = _covariance(np.asarray(result.jac, dtype=float), rss, len(points), 2)
    return {"model": "M_log", "params": {"a": a, "c": c}, "stderr": {"a": se[0], "c": se[1]},
            "start": {"a": float(start[0]), "c": float(start[1])}, "n": len(points), "k": 2, "rss": rss,
            "aic": aic(rss, len(points), 2), "converged": bool(result.success)}


def _rmse(predicted: np.ndarray, observed: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(np.maximum(predicted, _TINY))
    return float(math.sqrt(np.mean((logs - np.log(observed)) ** 2)))


def verdict(rmse_log: float | None, rmse_pow: float | None, delta_aic: float | None) -> str:
    """The protocol's verdict for one mode.

    Parameters
    ----------
    rmse_log, rmse_pow : float or None
        Held-out RMSE of ln d* of each model (None: the held-out octave is missing).
    delta_aic : float or None
        AIC(M_log) − AIC(M_pow) on all octaves.

    Returns
    -------
    str
        ``"log N"`` when M_log wins the held-out octave and ΔAIC < 2; ``"power of N"`` when M_pow wins it and
        ΔAIC > −2; ``"cannot tell"`` otherwise (a tie or a missing number included).
    """
    if rmse_log is None or rmse_pow is None or delta_aic is None or math.isnan(delta_aic):
        return "cannot tell"
    if rmse_log < rmse_pow and delta_aic < _AIC_MARGIN:
        return "log N"
    if rmse_pow < rmse_log and delta_aic > -_AIC_MARGIN:
        return "power of N"
    return "cannot tell"


def seed_spread(points: list[dict]) -> list[dict]:
    """d* over seeds per (N, R, mode).

    Parameters
    ----------
    points : list of dict
        Threshold records with a d*.

    Returns
    -------
    list of dict
        ``N``, ``R``, ``mode``, ``d_star`` (per seed, by seed), ``min``, ``max``, sorted.
    """
    groups: dict[tuple, dict] = {}
    for p in points:
        groups.setdefault((p["mode"], p["R"], p["N"]), {})[p["seed"]] = p["d_star"]
    return [{"N": N, "R": R, "mode": mode, "d_star": dict(sorted(by_seed.items())),
             "min": min(by_seed.values()), "max": max(by_seed.values())}
            for (mode, R, N), by_seed in sorted(groups.items())]


def budget_bound(records: list[dict], points: list[dict], fraction: float = BUDGET_FRACTION) -> list[dict]:
    """Per search: whether its deciding trial (the one at d = d*) reached at ≥ ``fraction`` of its steps.

    Parameters
    ----------
    records : list of dict
        Every record of the file (the trial records are looked up).
    points : list of dict
        Threshold records with a d*.
    fraction : float
        The share of the step budget from which a search is budget-bound (0.9 in the protocol).

    Returns
    -------
    list of dict
        Per search: ``N``, ``R``, ``mode``, ``seed``, ``d_star``, ``steps``, ``steps_run`` of the deciding
        trial (None when its trial record is not in the file), ``bound`` (True, False or None: unknown),
        and ``reruns``: trial records at twice the steps at d* or at the last failing width (``d``,
        ``steps``, ``reached``, ``steps_run``).
    """
    trials = {}
    longer: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("kind") != "trial":
            continue
        trials[trial_key(r)] = r
        longer.setdefault((r["N"], r["R"], r["mode"], r["seed"], r["steps"]), []).append(r)
    out = []
    for p in points:
        deciding = trials.get((*threshold_key(p)[:_CONFIG_LENGTH], p["d_star"]))
        steps_run = None if deciding is None else deciding.get("steps_run")
        bound = None if steps_run is None else bool(steps_run >= fraction * p["steps"])
        widths = {p["d_star"], p.get("last_failure")}
        reruns = [{"d": t["d"], "steps": t["steps"], "reached": t["reached"], "steps_run": t.get("steps_run")}
                  for t in longer.get((p["N"], p["R"], p["mode"], p["seed"], 2 * p["steps"]), [])
                  if t["d"] in widths]
        out.append({"N": p["N"], "R": p["R"], "mode": p["mode"], "seed": p["seed"], "d_star": p["d_star"],
                    "steps": p["steps"], "steps_run": steps_run, "bound": bound,
                    "reruns": sorted(reruns, key=lambda t: t["d"])})
    return out


def budget_lines(budget: list[dict]) -> list[str]:
    """:func:`budget_bound`'s outcome in words: how many searches are budget-bound, then one line each with
    its deciding trial's step and its reruns at twice the steps.

    Parameters
    ----------
    budget : list of dict
        What :func:`budget_bound` returns.

    Returns
    -------
    list of str

    Examples
    --------
    >>> for line in budget_lines([{"N": 64, "R": 2, "mode": "frozen", "seed": 0, "d_star": 12, "steps": 500,
    ...                              "steps_run": 480, "bound": True,
    ...                              "reruns": [{"d": 10, "steps": 1000, "reached": False}]}]):
    ...     print(line)
    budget-bound searches (deciding trial at ≥ 90 % of its steps): 1 of 1
      frozen N = 64 R = 2 seed 0: d* = 12 at step 480 of 500; d = 10: not reached in 1000
    """
    bound = [b for b in budget if b["bound"]]
    unknown = sum(b["bound"] is None for b in budget)
    lines = [f"budget-bound searches (deciding trial at ≥ {100 * BUDGET_FRACTION:.0f} % of its steps): "
             f"{len(bound)} of {len(budget)}"
             + (f" ({unknown} without the deciding trial's record)" if unknown else "")]
    for b in bound:
        reruns = ", ".join(f"d = {t['d']}: {'reached' if t['reached'] else 'not reached'} in {t['steps']}"
                           + (f" (at step {t['steps_run']})" if t["reached"] and t.get("steps_run") else "")
                           for t in b["reruns"]) or "no rerun at twice the steps yet"
        lines.append(f"  {b['mode']} N = {b['N']} R = {b['R']} seed {b['seed']}: d* = {b['d_star']} at "
                     f"step {b['steps_run']} of {b['steps']}; {reruns}")
    return lines


def frozen_over_learned(points: list[dict]) -> list[dict]:
    """d*(frozen)/d*(learned) per (N, R), over the seeds with both modes.

    Parameters
    ----------
    points : list of dict
        Threshold records with a d*.

    Returns
    -------
    list of dict
        ``N``, ``R``, ``ratios`` (per seed), ``median``, ``min``, ``max``; (N, R) without a pair are left out.
    """
    by = {(p["N"], p["R"], p["mode"], p["seed"]): p["d_star"] for p in points}
    out = []
    for N, R in sorted({(p["N"], p["R"]) for p in points}):
        seeds = sorted(s for (n, r, mode, s) in by if (n, r, mode) == (N, R, "learned"))
        ratios = {s: by[(N, R, "frozen", s)] / by[(N, R, "learned", s)] for s in seeds
                  if (N, R, "frozen", s) in by}
        if ratios:
            values = list(ratios.values())
            out.append({"N": N, "R": R, "ratios": ratios, "median": float(np.median(values)),
                        "min": min(values), "max": max(values)})
    return out


def compare_models(points: list[dict], held_out_N: int = HELD_OUT_N) -> dict[str, dict]:
    """The protocol's comparison per mode: both fits on all octaves, the held-out octave, ΔAIC, the verdict.

    Parameters
    ----------
    points : list of dict
        Threshold records with a d* (:func:`n_axis_points`'s ``points``).
    held_out_N : int
        The held-out size: fits for criterion 1 use N < held_out_N, the score the searches at N = held_out_N.

    Returns
    -------
    dict
        Per mode with points: ``n``, ``M_log`` and ``M_pow`` (fits on all octaves, or ``{"error": ...}``),
        ``held_out`` (``N``, ``n``, ``fit_n``, ``rmse_log``, ``rmse_pow``, ``winner``, ``margin`` = the larger
        score over the smaller, ``points`` with both predictions; or ``None`` scores with a ``reason`` when
        the octave or the fit is missing), ``delta_aic``, ``verdict``.
    """
    out = {}
    for mode in ("learned", "frozen"):
        rows = [p for p in points if p["mode"] == mode]
        if not rows:
            continue
        entry: dict = {"n": len(rows)}
        for name, fitter in (("M_log", fit_log_model), ("M_pow", fit_power_model)):
            try:
                entry[name] = fitter(rows)
            except InputError as exc:
                entry[name] = {"error": str(exc)}
        both = "error" not in entry["M_log"] and "error" not in entry["M_pow"]
        entry["delta_aic"] = entry["M_log"]["aic"] - entry["M_pow"]["aic"] if both else None
        if entry["delta_aic"] is not None and math.isnan(entry["delta_aic"]):
            entry["delta_aic"] = None  # both fits exact: AIC cannot order them
        train = [p for p in rows if p["N"] < held_out_N]
        test = [p for p in rows if p["N"] == held_out_N]
        held: dict = {"N": held_out_N, "n": len(test), "fit_n": len(train), "rmse_log": None,
                      "rmse_pow": None, "winner": None, "margin": None}
        if not test:
            held["reason"] = f"no search at N = {held_out_N}"
        else:
            try:
                log_fit, pow_fit = fit_log_model(train), fit_power_model(train)
            except InputError as exc:
                held["reason"] = f"fit on N < {held_out_N}: {exc}"
            else:
                N, R, d = _arrays(test)
                pl, pp = predict_log(log_fit, N, R), predict_power(pow_fit, N, R)
                held.update(rmse_log=_rmse(pl, d), rmse_pow=_rmse(pp, d),
                            fit={"M_log": log_fit["params"], "M_pow": pow_fit["params"]},
                            points=[{"R": p["R"], "seed": p["seed"], "d_star": p["d_star"],
                                     "M_log": float(a), "M_pow": float(b)} for p, a, b in zip(test, pl, pp)])
                lo, hi = sorted((held["rmse_log"], held["rmse_pow"]))
                if held["rmse_log"] != held["rmse_pow"]:
                    held["winner"] = "M_log" if held["rmse_log"] < held["rmse_pow"] else "M_pow"
                    held["margin"] = hi / lo if lo > 0 else math.inf
        # The protocol scores the whole octave: every (R, seed) searched below it must be searched at it too;
        # a partly run octave is reported but decides nothing ("cannot tell").
        expected = {(p["R"], p["seed"]) for p in train}
        missing = sorted(expected - {(p["R"], p["seed"]) for p in test})
        held["complete"] = bool(test) and not missing
        if test and missing:
            held["incomplete"] = (f"{len(expected) - len(missing)} of {len(expected)} searches; missing "
                                  "(R, seed) " + ", ".join(f"({r}, {s})" for r, s in missing))
        entry["held_out"] = held
        decided = verdict(held["rmse_log"], held["rmse_pow"], entry["delta_aic"])
        entry["verdict"] = decided if held["complete"] else "cannot tell"
        out[mode] = entry
    return out
