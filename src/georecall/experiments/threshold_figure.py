"""The capacity grid at two sizes: d* against R·ln N, learned against frozen embeddings, N = 1024 and 4096.

The N = 4096 points are threshold records (``georecall sweep threshold``; the project's are in
docs/thresholds_N4096.jsonl). The N = 1024 points are the summary the README reports for the georecall 0.1.0
sweep (N = 1024, R ∈ {2, 4, 8}, 3 seeds: the smallest and largest d* over the seeds, and the fitted c); its
per-seed records were not kept, so they are drawn as ranges, labelled as such, and not refitted.

Drawn per mode: the points, the line ``d* = c·R·ln N`` refitted to every N = 4096 record
(:func:`.sweep_fit.fit_thresholds`), the band that the records with R ≤ 4 predicted for larger R (``c ± max(3
standard errors, 10%)``, what :func:`.sweep_fit.predict_threshold` gives the predicted search), and the N =
1024 line. Slide rules as in :mod:`.figures` (at most 11 inches wide, no text under 9 pt, no overlapping
labels).

Run: ``python -m georecall.experiments.threshold_figure --from docs/thresholds_N4096.jsonl --reruns
docs/thresholds_N4096_reruns.jsonl docs/thresholds_N_axis.jsonl --out docs/figures`` (writes
``capacity_grid.png`` and ``.svg`` and prints the table, the fits and the budget-bound searches at N with
their reruns at twice the steps: the ``--reruns`` files are read for that report only, :func:`budget_report`,
the N-axis file for the R ≤ 4 searches it shares; the table and the figure are the ``--from`` records').
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Sequence

import numpy as np

from georecall.errors import InputError
from georecall.experiments.figures import STYLE, save_figure
from georecall.experiments.plotting import import_pyplot
from georecall.experiments.sweep_fit import BAND_FLOOR, BAND_SIGMAS, fit_thresholds
from georecall.experiments.sweep_models import budget_bound, budget_lines
from georecall.experiments.sweep_records import is_floor_censored, read_records
from georecall.io import validate_output_path

__all__ = ["N1024_SUMMARY", "budget_report", "capacity_grid_figure", "grid_rows", "grid_table", "main",
           "search_table", "unfinished_searches"]

# georecall 0.1.0, N = 1024, R ∈ {2, 4, 8}, 3 seeds, m = 4d, ≤ 500 Adam steps (README, "Measured on this
# project's machine"): (smallest, largest) d* over the seeds per R, and the fitted c ± its spread over seeds.
N1024_SUMMARY = {
    "N": 1024,
    "learned": {"d_star": {2: (6, 6), 4: (12, 12), 8: (24, 26)}, "c": 0.442, "c_spread": 0.016},
    "frozen": {"d_star": {2: (12, 12), 4: (22, 24), 8: (38, 40)}, "c": 0.737, "c_spread": 0.021},
}
_COLOURS = {"learned": "tab:blue", "frozen": "tab:orange"}
_MARKERS = {"learned": "o", "frozen": "s"}


def _thresholds(records: list[dict], N: int) -> list[dict]:
    """The threshold records at N with a measured d*, one per (R, mode, seed): the first in file order (those
    censored at the floor, d* only an upper bound, are left out: :func:`_censored`)."""
    seen, out = set(), []
    for r in records:
        if r.get("kind") != "threshold" or r.get("N") != N or r.get("d_star") is None or is_floor_censored(r):
            continue
        key = (r["R"], r["mode"], r["seed"])
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def _censored(records: list[dict], N: int) -> list[dict]:
    """The threshold records at N censored at the floor of their search (left out of the table and fits)."""
    return [r for r in records if r.get("kind") == "threshold" and r.get("N") == N and is_floor_censored(r)]


def budget_report(records: list[dict], reruns: Sequence[dict] = (), N: int = 4096) -> list[str]:
    """Which searches at N are budget-bound (their deciding trial reached at ≥ 90 % of its steps), with the
    trials of ``reruns`` at twice the steps at d* or at the width below (the declared rule:
    :func:`.sweep_models.budget_bound`), in words.

    Parameters
    ----------
    records : list of dict
        Sweep records (the searches: threshold records at N with a d*, and their trial records).
    reruns : list of dict
        Records of the reruns (only their trial records at twice a search's steps are read).
    N : int
        Entities.

    Returns
    -------
    list of str
        :func:`.sweep_models.budget_lines`.
    """
    points = _thresholds(records, N)
    trials = [r for r in [*records, *reruns] if r.get("kind") == "trial"]
    return budget_lines(budget_bound(trials, points))


def search_table(records: list[dict], reruns: Sequence[dict] = (), N: int = 4096, R: int = 16,
                 fraction: float = 0.9) -> str:
    """Every search at (N, R) as a Markdown table: d*, c = d*/(R·ln N), its deciding trial's step, whether it
    is budget-bound (deciding trial at ≥ ``fraction`` of its steps), its trials (``d ✓step`` reached, ``d ✗``
    not) and its reruns at twice the steps; a search without a threshold record yet shows the bracket its
    trials leave.

    Parameters
    ----------
    records : list of dict
        Sweep records (trial and threshold records at (N, R) are read).
    reruns : sequence of dict
        Records of the reruns (trial records at twice a search's steps).
    N, R : int
        The configuration.
    fraction : float
        The budget-bound share of the steps (the protocol's 0.9).

    Returns
    -------
    str
        The table, one row per (mode, seed), learned first.
    """
    def ours(r: dict, kind: str) -> bool:
        return r.get("kind") == kind and r.get("N") == N and r.get("R") == R

    lines = ["| mode | seed | d* | c = d*/(R·ln N) | deciding trial (step) | budget-bound | trials "
             "| rerun at twice the steps |", "|---|---|---|---|---|---|---|---|"]
    keys = sorted({(r["mode"], r["seed"]) for r in records if ours(r, "trial") or ours(r, "threshold")},
                  key=lambda key: (key[0] != "learned", key))
    for mode, seed in keys:
        thresholds = [r for r in records if ours(r, "threshold") and r["mode"] == mode and r["seed"] == seed]
        steps = thresholds[0]["steps"] if thresholds else None
        trials: dict[int, dict] = {}
        for r in records:
            if ours(r, "trial") and r["mode"] == mode and r["seed"] == seed and (steps is None or
                                                                                r["steps"] == steps):
                trials[r["d"]] = r
                steps = r["steps"]

        def said(found: dict[int, dict]) -> str:
            return ", ".join(f"{d} ✓{t.get('steps_run')}" if t["reached"] else f"{d} ✗"
                             for d, t in sorted(found.items()))

        done = next((t for t in thresholds if t.get("d_star") is not None), None)
        if done is not None:
            d_star = done["d_star"]
            step = (trials.get(d_star) or {}).get("steps_run")
            bound = step is not None and steps is not None and step >= fraction * steps
            cells = [f"**{d_star}**", f"{d_star / (R * math.log(N)):.3f}",
                     "—" if step is None else f"{step} of {steps}", "yes" if bound else "no"]
        else:
            wins = [d for d, t in trials.items() if t["reached"]]
            losses = [d for d, t in trials.items() if not t["reached"] and (not wins or d < min(wins))]
            hi, lo = (min(wins) if wins else None), (max(losses) if losses else None)
            bracket = (f"{lo} < d* ≤ {hi}" if lo is not None and hi is not None else
                       f"d* ≤ {hi}" if hi is not None else f"d* > {lo}" if lo is not None else "—")
            cells, bound = [f"{bracket} (unfinished)", "—", "—", "—"], False
        again = {r["d"]: r for r in reruns if ours(r, "trial") and r["mode"] == mode and r["seed"] == seed
                 and steps is not None and r["steps"] == 2 * steps}
        rerun = said(again) or ("not run yet" if bound else "—")
        lines.append(f"| {mode} | {seed} | " + " | ".join(cells) + f" | {said(trials)} | {rerun} |")
    return "\n".join(lines)


def grid_rows(records: list[dict], N: int = 4096) -> list[dict]:
    """Per R at N: d* per seed in each mode, their means and the frozen/learned ratio of the means.

    Parameters
    ----------
    records : list of dict
        Sweep records (threshold records at N are used).
    N : int
        Entities.

    Returns
    -------
    list of dict
        One row per R (ascending): ``R``, ``x`` (R·ln N), ``learned`` and ``frozen`` (``{seed: d*}``),
        ``learned_mean``, ``frozen_mean`` (``None`` without a d*) and ``ratio`` (``None`` unless both).
    """
    rows: dict[int, dict] = {}
    for r in _thresholds(records, N):
        row = rows.setdefault(r["R"], {"R": r["R"], "x": r["R"] * math.log(N), "learned": {}, "frozen": {}})
        row[r["mode"]][r["seed"]] = r["d_star"]
    out = []
    for R in sorted(rows):
        row = rows[R]
        for mode in ("learned", "frozen"):
            values = list(row[mode].values())
            row[f"{mode}_mean"] = float(np.mean(values)) if values else None
        both = row["learned_mean"] is not None and row["frozen_mean"] is not None
        row["ratio"] = row["frozen_mean"] / row["learned_mean"] if both else None
        out.append(row)
    return out


def unfinished_searches(records: list[dict], N: int = 4096) -> list[dict]:
    """The configurations at N with trials but no threshold record: what their trials bracket, and their cost.

    Under the monotone rule a search's d* lies above its largest failure below its smallest success (``lo``)
    and at or below that success (``hi``); an unfinished search has one side, both, or neither yet.

    Parameters
    ----------
    records : list of dict
        Sweep records (trial and threshold records at N are used).
    N : int
        Entities.

    Returns
    -------
    list of dict
        One per (R, mode, seed) without a threshold record, sorted: ``R``, ``mode``, ``seed``, ``lo`` and
        ``hi`` (``None`` when not known yet), ``trials`` (``(d, reached, seconds, steps_run)`` in file order).
    """
    done = {(r["R"], r["mode"], r["seed"]) for r in records
            if r.get("kind") == "threshold" and r.get("N") == N}
    trials: dict[tuple, list] = {}
    for r in records:
        key = (r.get("R"), r.get("mode"), r.get("seed"))
        if r.get("kind") == "trial" and r.get("N") == N and key not in done:
            trials.setdefault(key, []).append((r["d"], bool(r["reached"]), r.get("seconds"),
                                               r.get("steps_run")))
    out = []
    for (R, mode, seed), rows in sorted(trials.items()):
        wins = [d for d, ok, *_ in rows if ok]
        hi = min(wins) if wins else None
        losses = [d for d, ok, *_ in rows if not ok and (hi is None or d < hi)]
        out.append({"R": R, "mode": mode, "seed": seed, "lo": max(losses) if losses else None, "hi": hi,
                    "trials": rows})
    return out


def grid_table(records: list[dict], N: int = 4096) -> str:
    """:func:`grid_rows` and the fits as text (a Markdown table, then one line per mode).

    Parameters
    ----------
    records : list of dict
        Sweep records.
    N : int
        Entities.

    Returns
    -------
    str
    """

    def seeds(values: dict) -> str:
        return ", ".join(f"{values[s]}" for s in sorted(values)) or "—"

    lines = ["| R | R·ln N | learned d* (by seed) | frozen d* (by seed) | frozen / learned |",
             "|---|---|---|---|---|"]
    for row in grid_rows(records, N):
        ratio = "—" if row["ratio"] is None else f"{row['ratio']:.2f}"
        lines.append(f"| {row['R']} | {row['x']:.1f} | {seeds(row['learned'])} | {seeds(row['frozen'])} | "
                     f"{ratio} |")
    for u in unfinished_searches(records, N):
        bracket = (f"{u['lo']} < d* ≤ {u['hi']}" if u["lo"] is not None and u["hi"] is not None else
                   f"d* > {u['lo']}" if u["lo"] is not None else f"d* ≤ {u['hi']}")
        runs = "; ".join(f"d = {d} {'reached' if ok else 'not reached'}"
                         + ("" if seconds is None else f" ({seconds:,.0f} s, {steps} steps)")
                         for d, ok, seconds, steps in u["trials"])
        lines.append(f"unfinished: R = {u['R']} {u['mode']} seed {u['seed']}: {bracket} ({runs})")
    thresholds = _thresholds(records, N)
    for label, subset in (("every R", thresholds), ("R ≤ 4", [r for r in thresholds if r["R"] <= 4])):
        for mode, fit in fit_thresholds(subset).items():
            se = "exact fit" if fit["c_stderr"] is None else f"± {fit['c_stderr']:.3f} (standard error)"
            lines.append(f"{mode}, {label}: c = {fit['c']:.3f} {se}, seeds' spread {fit['c_seed_std']:.3f}, "
                         f"{fit['points']} searches")
    for r in _censored(records, N):
        lines.append(f"left out: R = {r['R']} {r['mode']} seed {r['seed']}: d* ≤ {r['d_star']} (censored at "
                     f"the floor of its search, d_min = {r.get('d_min')})")
    return "\n".join(lines)


def capacity_grid_figure(records: list[dict], N: int = 4096, reference: dict | None = N1024_SUMMARY):
    """d* against R·ln N for both modes at N (records) and at the reference size (summary ranges).

    Parameters
    ----------
    records : list of dict
        Sweep records (threshold records at N are drawn).
    N : int
        The records' size.
    reference : dict or None
        A summary like :data:`N1024_SUMMARY` (``None``: not drawn).

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when no threshold record at N has a d*.

    Raises
    ------
    ImportError
        Without matplotlib.
    """

    plt = import_pyplot()
    thresholds = _thresholds(records, N)
    if not thresholds:
        return None
    fits = fit_thresholds(thresholds)
    early = fit_thresholds([r for r in thresholds if r["R"] <= 4])
    open_searches = [u for u in unfinished_searches(records, N) if u["lo"] is not None or u["hi"] is not None]
    x_max = max(r["R"] for r in thresholds + open_searches) * math.log(N) * 1.08
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(8.5, 5.2))
        grid = np.linspace(0, x_max, 100)
        for mode in ("learned", "frozen"):
            colour, marker = _COLOURS[mode], _MARKERS[mode]
            rows = [r for r in thresholds if r["mode"] == mode]
            beyond = rows + [u for u in open_searches if u["mode"] == mode]
            if mode in early and any(r["R"] > 4 for r in beyond):
                c, se = early[mode]["c"], early[mode]["c_stderr"] or 0.0
                half = max(BAND_SIGMAS * se, BAND_FLOOR * c)
                ax.fill_between(grid, (c - half) * grid, (c + half) * grid, color=colour, alpha=0.12, lw=0,
                                label=f"{mode}: band predicted from R ≤ 4 ({c:.2f} ± {half:.2f})")
            if rows:
                seeds = sorted({r["seed"] for r in rows})
                for i, seed in enumerate(seeds):  # seeds side by side, a little apart
                    part = [r for r in rows if r["seed"] == seed]
                    shift = (i - (len(seeds) - 1) / 2) * 0.6
                    ax.scatter([r["R"] * math.log(N) + shift for r in part], [r["d_star"] for r in part],
                               marker=marker, color=colour, s=42, zorder=4, edgecolor="black", linewidth=0.5,
                               label=f"{mode}, N = {N}" if i == 0 else None)
                fit = fits[mode]
                se = "" if fit["c_stderr"] is None else f" ± {fit['c_stderr']:.3f}"
                ax.plot(grid, fit["c"] * grid, color=colour, linewidth=1.6,
                        label=f"fit N = {N}: c = {fit['c']:.3f}{se} (s.e.)")
            brackets = [u for u in open_searches if u["mode"] == mode]
            for i, u in enumerate(brackets):  # unfinished: the interval its trials leave for d*
                x = u["R"] * math.log(N) + (0.6 if u["seed"] else -0.6) * (len(brackets) > 1)
                both = u["lo"] is not None and u["hi"] is not None
                lo = u["lo"] if u["lo"] is not None else 0.8 * u["hi"]  # one side only: an arrow away from it
                hi = u["hi"] if u["hi"] is not None else 1.25 * u["lo"]
                label = f"{mode}, N = {N}: search unfinished (d* in the bar)" if i == 0 else None
                ax.plot([x, x], [lo, hi], color=colour, linewidth=2.2, linestyle="-" if both else "--",
                        zorder=3, label=label)
                for end, known, arrow in ((lo, u["lo"] is not None, "v"), (hi, u["hi"] is not None, "^")):
                    ax.scatter([x], [end], marker="_" if known else arrow, color=colour,
                               s=120 if known else 40, zorder=3)
            if reference is not None and mode in reference:
                ref, N_ref = reference[mode], reference["N"]
                xs = [R * math.log(N_ref) for R in ref["d_star"]]
                lows = [lo for lo, _ in ref["d_star"].values()]
                highs = [hi for _, hi in ref["d_star"].values()]
                mids = [(lo + hi) / 2 for lo, hi in zip(lows, highs)]
                ax.errorbar(xs, mids, yerr=[np.subtract(mids, lows), np.subtract(highs, mids)], fmt=marker,
                            mfc="white", mec=colour, ecolor=colour, ms=6, capsize=3, zorder=3,
                            label=f"{mode}, N = {N_ref} (0.1.0, range over 3 seeds)")
                ax.plot(grid, ref["c"] * grid, color=colour, linestyle=":", linewidth=1.3,
                        label=f"fit N = {N_ref}: c = {ref['c']:.3f} (0.1.0)")
        ax.set_xlim(0, x_max)
        ax.set_ylim(0, None)
        ax.set_xlabel("R · ln N")
        ax.set_ylabel("capacity threshold d*")
        left_out = len(_censored(records, N))
        ax.set_title("smallest d that memorizes every fact (m = 4d, ≤ 500 Adam steps)"
                     + (f"\n{left_out} search(es) censored at d_min left out" if left_out else ""))
        ax.legend(loc="upper left", fontsize=9, frameon=False)
        fig.tight_layout()
    return fig


def main(argv: list[str] | None = None) -> int:
    """Draw the figure from a results file and print the table.

    Parameters
    ----------
    argv : list of str, optional
        ``--from FILE --out DIR [--reruns FILE ...] [--N N] [--dpi DPI]``.

    Returns
    -------
    int
        0; 2 (one line on stderr) when the file cannot be read, the folder not written, or no threshold
        record at N has a d*.
    """

    parser = argparse.ArgumentParser(description="d* against R·ln N, learned vs frozen, N = 1024 and 4096")
    parser.add_argument("--from", dest="source", required=True, metavar="RESULTS.jsonl")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--reruns", metavar="RESULTS.jsonl", nargs="+", default=[],
                        help="files holding the budget-bound searches' reruns at twice the steps (reported, "
                             "not drawn; their other records are not read)")
    parser.add_argument("--N", type=int, default=4096)
    parser.add_argument("--dpi", type=int, default=150)
    args = parser.parse_args(argv)
    try:
        os.makedirs(args.out, exist_ok=True)
        validate_output_path(os.path.join(args.out, "capacity_grid.png"), what="figure")
        records = read_records(args.source)
        reruns = [record for path in args.reruns for record in read_records(path)]
    except (InputError, OSError) as exc:
        print(f"threshold_figure: error: {exc}", file=sys.stderr)
        return 2
    fig = capacity_grid_figure(records, args.N)
    if fig is None:
        print(f"no threshold record at N = {args.N} with a d* in {args.source}")
        return 2
    for path in save_figure(fig, args.out, "capacity_grid", dpi=args.dpi, formats=("png", "svg")):
        print(path)
    print(grid_table(records, args.N))
    print("\n".join(budget_report(records, reruns, args.N)))
    largest = max((r["R"] for r in records if r.get("kind") == "threshold" and r.get("N") == args.N),
                  default=None)
    if largest is not None:  # every search of the largest R, with its trials and reruns
        print(f"\nR = {largest}, every search:")
        print(search_table(records, reruns, args.N, largest))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
