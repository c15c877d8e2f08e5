"""Fitting the capacity thresholds of a sweep (:mod:`.sweep`): ``d* = c·R·ln N`` (and a power law) per mode,
the threshold a predicted search starts from (:func:`predict_threshold`, with the band the cost estimate
covers), and the table of d* per configuration.

Censored searches are left out of every fit and mean, and counted: those that never reached 100 % (``d_star``
``None``, censored at the ceiling: ``unreached``) and those whose smallest width tried reached it (censored
at the floor, :func:`.sweep_records.is_floor_censored`: ``censored``), whose d* is only an upper bound.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from georecall.experiments.sweep_records import is_floor_censored, same_settings
from georecall.experiments.sweep_trial import MODES, TrialSettings

__all__ = ["BAND_FLOOR", "BAND_SIGMAS", "fit_thresholds", "predict_threshold", "summary_table"]

BAND_SIGMAS = 3.0  # the cost estimate covers thresholds within c ± max(3 standard errors, 10% of c)
BAND_FLOOR = 0.10


def predict_threshold(records: list[dict], N: int, R: int, mode: str, settings: TrialSettings) -> dict | None:
    """The threshold predicted for (N, R, mode) by ``d* = c·R·ln N`` fitted to earlier threshold records.

    The fit (:func:`fit_thresholds`) uses the records of that mode and the same settings at the same N when
    there are any (the constant c drifts with N for frozen embeddings), else those at every N; searches
    censored at the floor of their range (d* only an upper bound) are left out and counted.

    Parameters
    ----------
    records : list of dict
        Sweep records (threshold records are used; others are skipped).
    N, R : int
        The configuration predicted.
    mode : str
        ``"learned"`` or ``"frozen"``.
    settings : TrialSettings
        Only records with these settings count.

    Returns
    -------
    dict or None
        ``d`` (the prediction), ``c``, ``c_stderr`` (``None`` when the fit is exact), ``band`` (the widths
        ``(c ∓ max(3·stderr, 0.1·c))·R·ln N`` the cost estimate covers), ``points`` and ``basis`` (``"same
        N"`` or ``"every N"``) and ``censored`` (the searches of that mode and settings left out as
        censored at the floor); ``None`` when no record has a measured d*.
    """
    rows = [r for r in records if r.get("kind") == "threshold" and r["mode"] == mode
            and r.get("d_star") is not None and same_settings(r, settings)]
    censored = [r for r in rows if is_floor_censored(r)]
    rows = [r for r in rows if not is_floor_censored(r)]
    same = [r for r in rows if r["N"] == N]
    use, basis = (same, "same N") if same else (rows, "every N")
    if not use:
        return None
    fit = fit_thresholds(use)[mode]
    x = R * math.log(N)
    c, se = fit["c"], fit["c_stderr"]
    half = max(BAND_SIGMAS * (se or 0.0), BAND_FLOOR * c)
    return {"d": c * x, "c": c, "c_stderr": se, "band": ((c - half) * x, (c + half) * x),
            "points": fit["points"], "basis": basis,
            "censored": sum(r["N"] == N for r in censored) if basis == "same N" else len(censored)}


def fit_thresholds(records: list[dict]) -> dict[str, dict]:
    """Per mode: least-squares fit of ``d* = c·R·ln N`` (scipy), c per seed and its spread over seeds; and a
    power law ``d* = a·N^p·R^q`` (exponents fitted where the records vary N, resp. R).

    Parameters
    ----------
    records : list of dict
        Threshold records (``mode``, ``N``, ``R``, ``seed``, ``d_star``, ``monotone``); searches that never
        reached 100% (``d_star`` None) are counted as ``unreached``, those censored at the floor
        (:func:`.sweep_records.is_floor_censored`) as ``censored``, neither fitted.

    Returns
    -------
    dict
        Per mode with at least one d*: ``c``, ``c_stderr`` (None when the fit is exact), ``c_per_seed``,
        ``c_seed_mean``, ``c_seed_std`` (ddof 1), ``power_law`` (``log_a`` and ``p_N`` / ``q_R`` where
        fitted), ``points``, ``non_monotone``, ``unreached``, ``censored``.
    """
    from scipy.optimize import curve_fit

    out = {}
    for mode in MODES:
        rows = [r for r in records if r["mode"] == mode and r["d_star"] is not None
                and not is_floor_censored(r)]
        if not rows:
            continue
        x = np.array([r["R"] * math.log(r["N"]) for r in rows], dtype=float)
        y = np.array([r["d_star"] for r in rows], dtype=float)
        with warnings.catch_warnings():  # a perfect fit (too few points) has no covariance estimate
            warnings.simplefilter("ignore")
            (c,), cov = curve_fit(lambda t, c: c * t, x, y, p0=[1.0])
        per_seed = {}
        for seed in sorted({r["seed"] for r in rows}):
            mask = np.array([r["seed"] == seed for r in rows])
            per_seed[seed] = float(np.sum(x[mask] * y[mask]) / np.sum(x[mask] ** 2))
        values = np.array(list(per_seed.values()))
        # A second form that can tell logarithmic from polynomial growth: log d* = log a + p·log N + q·log R
        # (p, q fitted only when the records hold at least two N, resp. two R).
        Ns = np.array([r["N"] for r in rows], dtype=float)
        Rs = np.array([r["R"] for r in rows], dtype=float)
        columns = [np.ones_like(y)] + [np.log(v) for v in (Ns, Rs) if np.unique(v).size > 1]
        coef = np.linalg.lstsq(np.stack(columns, axis=1), np.log(y), rcond=None)[0]
        names = ["log_a"] + [n for n, v in (("p_N", Ns), ("q_R", Rs)) if np.unique(v).size > 1]
        power_law = {name: float(value) for name, value in zip(names, coef)}
        stderr = float(math.sqrt(cov[0, 0])) if np.isfinite(cov[0, 0]) else None
        out[mode] = {"power_law": power_law, "c": float(c), "c_stderr": stderr,
                     "c_per_seed": per_seed, "c_seed_mean": float(values.mean()),
                     "c_seed_std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
                     "points": len(rows), "non_monotone": sum(not r["monotone"] for r in rows),
                     "unreached": sum(1 for r in records if r["mode"] == mode and r["d_star"] is None),
                     "censored": sum(1 for r in records if r["mode"] == mode and is_floor_censored(r))}
    return out


def summary_table(records: list[dict]) -> str:
    """d* per (N, R, mode) over seeds, as text.

    Parameters
    ----------
    records : list of dict
        Threshold records.

    Returns
    -------
    str
        One line per (N, R, mode): d* per seed (``≤16`` for a search censored at the floor), their mean (over
        the searches that measured a d*) and R·ln N; then one line per search censored at the floor.
    """
    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault((r["N"], r["R"], r["mode"]), []).append(r)
    lines = [f"{'N':>6} {'R':>3} {'mode':>8}  {'d* per seed':<20} {'mean':>7} {'R·lnN':>7}"]
    for (N, R, mode), rows in sorted(groups.items()):
        values = "[" + ", ".join(f"≤{r['d_star']}" if is_floor_censored(r) else str(r["d_star"])
                                 for r in rows) + "]"
        measured = [r["d_star"] for r in rows if r["d_star"] is not None and not is_floor_censored(r)]
        mean = f"{np.mean(measured):7.1f}" if measured else "      —"
        lines.append(f"{N:>6} {R:>3} {mode:>8}  {values:<20} {mean} {R * math.log(N):7.1f}")
    for r in records:
        if is_floor_censored(r):
            lines.append(f"N={r['N']} R={r['R']} {r['mode']} seed {r['seed']}: d* ≤ {r['d_star']} "
                         f"(censored at --d-min): its smallest width tried reached 100 %; left out of the "
                         f"means, fits and bits per parameter (search again with a smaller --d-min)")
    return "\n".join(lines)
