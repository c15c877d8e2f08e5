"""The N axis decided: the comparison table and the figure of d* against N, both fitted models per mode.

The comparison itself (fits, criteria, verdict) is :mod:`.sweep_models`, as docs/science/n_axis_protocol.md
declares it; this module reads a results file (:func:`.sweep_records.read_records`), prints the table (or one
JSON document) and draws ``n_axis.png`` / ``.svg``: d* against N (log axis), one panel per mode, a point per
search (seeds side by side; hollow: budget-bound), and each R's M_log (solid) and M_pow (dashed) curves fitted
on all octaves.

Run: ``python -m georecall.experiments.n_axis --from docs/thresholds_N_axis.jsonl --out docs/figures
[--json]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import numpy as np

from georecall.errors import InputError
from georecall.experiments.plotting import STYLE, import_pyplot, save_figure
from georecall.experiments.sweep_models import (
    HELD_OUT_N,
    budget_bound,
    budget_lines,
    compare_models,
    frozen_over_learned,
    n_axis_points,
    predict_log,
    predict_power,
    seed_spread,
)
from georecall.experiments.sweep_records import read_records
from georecall.io import validate_output_path

__all__ = ["FIGURE_NAME", "n_axis_figure", "n_axis_report", "n_axis_table", "main"]

FIGURE_NAME = "n_axis"
_COLOURS = {2: "tab:blue", 4: "tab:orange", 8: "tab:green", 16: "tab:red"}
_MARKERS = ("o", "s", "^", "D", "v")


def n_axis_report(records: list[dict], held_out_N: int = HELD_OUT_N) -> dict:
    """Everything the protocol reports, from a results file's records.

    Parameters
    ----------
    records : list of dict
        Sweep records.
    held_out_N : int
        The held-out octave's N.

    Returns
    -------
    dict
        ``comparison`` (:func:`.sweep_models.compare_models`), ``spread``, ``budget`` (per search),
        ``frozen_over_learned``, ``searches`` (counts: fitted, unreached, censored at the floor and left
        out, superseded, other settings, fitted with ``d* = d_min``), ``claim_met`` (learned "log N" and
        frozen "power of N").
    """
    chosen = n_axis_points(records)
    points = chosen["points"]
    comparison = compare_models(points, held_out_N)
    verdicts = {mode: entry["verdict"] for mode, entry in comparison.items()}
    return {"comparison": comparison, "spread": seed_spread(points), "budget": budget_bound(records, points),
            "frozen_over_learned": frozen_over_learned(points),
            "searches": {"fitted": len(points), "unreached": len(chosen["unreached"]),
                         "censored": len(chosen["censored"]),
                         "superseded": chosen["superseded"], "other_settings": chosen["other_settings"],
                         "at_floor": sum(p["d_star"] == p.get("d_min") for p in points)},
            "claim_met": verdicts.get("learned") == "log N" and verdicts.get("frozen") == "power of N"}


def _se(value) -> str:
    return "—" if value is None else f"{value:.3g}"


def _num(value, spec: str = ".4f") -> str:
    return "—" if value is None else format(value, spec)


def n_axis_table(report: dict) -> str:
    """The report as text: per mode the fits, both criteria and the verdict; the seeds' spread, the
    budget-bound searches and the frozen/learned ratios.

    Parameters
    ----------
    report : dict
        :func:`n_axis_report`'s result.

    Returns
    -------
    str
    """
    s = report["searches"]
    censored = f"censored at the floor and left out {s['censored']}, " if s.get("censored") else ""
    lines = [f"searches fitted: {s['fitted']} (unreached {s['unreached']}, {censored}"
             f"superseded {s['superseded']}, other settings {s['other_settings']}, "
             f"d* at the search's floor {s['at_floor']})", ""]
    for mode, e in report["comparison"].items():
        lines.append(f"{mode} (n = {e['n']}):")
        for name in ("M_log", "M_pow"):
            fit = e[name]
            if "error" in fit:
                lines.append(f"  {name}: not fitted: {fit['error']}")
                continue
            if name == "M_log":
                form = (f"d* = a + c·R·ln N: a = {fit['params']['a']:.3f} ± {_se(fit['stderr']['a'])}, "
                        f"c = {fit['params']['c']:.4f} ± {_se(fit['stderr']['c'])}")
            else:
                form = (f"d* = b·N^p·R^q: b = {fit['params']['b']:.4g} "
                        f"(ln b ± {_se(fit['stderr']['ln_b'])}), "
                        f"p = {fit['params']['p']:.4f} ± {_se(fit['stderr']['p'])}, "
                        f"q = {fit['params']['q']:.4f} ± {_se(fit['stderr']['q'])}")
            lines.append(f"  {name}: {form}; RSS = {fit['rss']:.5f}, AIC = {fit['aic']:.2f}")
        h = e["held_out"]
        if h["rmse_log"] is None:
            lines.append(f"  held-out N = {h['N']}: {h.get('reason', 'not scored')}")
        else:
            margin = "tie" if h["winner"] is None else f"{h['winner']} by ×{h['margin']:.3g}"
            lines.append(f"  held-out N = {h['N']} (fit on {h['fit_n']} searches, {h['n']} predicted): "
                         f"RMSE ln d*: M_log {h['rmse_log']:.4f}, M_pow {h['rmse_pow']:.4f} ({margin})")
            if h.get("incomplete"):
                lines.append(f"  the held-out octave is incomplete ({h['incomplete']}): "
                             "it decides nothing yet")
        lines.append(f"  ΔAIC = AIC(M_log) − AIC(M_pow) = {_num(e['delta_aic'], '.2f')}")
        lines.append(f"  verdict: {e['verdict']}")
    lines.append(f"paper's claim (learned: log N, frozen: power of N) met: {report['claim_met']}")
    lines += ["", f"{'mode':>8} {'R':>3} {'N':>6}  {'d* per seed':<24} {'min–max':>8}"]
    for row in report["spread"]:
        per = " ".join(f"{seed}:{d}" for seed, d in row["d_star"].items())
        lines.append(f"{row['mode']:>8} {row['R']:>3} {row['N']:>6}  {per:<24} "
                     f"{row['min']:>3}–{row['max']:<4}")
    lines += ["", *budget_lines(report["budget"])]
    lines += ["", "d*(frozen)/d*(learned) per (N, R): median (min–max) over seeds"]
    for row in report["frozen_over_learned"]:
        n = len(row["ratios"])
        lines.append(f"  N = {row['N']:>5} R = {row['R']}: {row['median']:.2f} "
                     f"({row['min']:.2f}–{row['max']:.2f}), {n} seed{'s' if n > 1 else ''}")
    return "\n".join(lines)


def n_axis_figure(records: list[dict], report: dict | None = None):
    """d* against N (log axis) per mode: points per seed, M_log and M_pow fitted on all octaves, per R.

    Parameters
    ----------
    records : list of dict
        Sweep records.
    report : dict, optional
        :func:`n_axis_report`'s result for these records (computed when omitted).

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when no search has a d*.

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    plt = import_pyplot()
    report = n_axis_report(records) if report is None else report
    points = n_axis_points(records)["points"]
    if not points:
        return None
    bound = {(b["N"], b["R"], b["mode"], b["seed"]) for b in report["budget"] if b["bound"]}
    Ns = sorted({p["N"] for p in points})
    grid = np.exp(np.linspace(math.log(Ns[0]) - 0.3, math.log(max(Ns[-1], HELD_OUT_N)) + 0.3, 200))
    modes = [m for m in ("learned", "frozen") if m in report["comparison"]]
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, len(modes), figsize=(5.4 * len(modes), 5.0), squeeze=False)
        for ax, mode in zip(axes[0], modes):
            entry = report["comparison"][mode]
            rows = [p for p in points if p["mode"] == mode]
            seeds = sorted({p["seed"] for p in rows})
            for R in sorted({p["R"] for p in rows}):
                colour = _COLOURS.get(R, "tab:gray")
                for i, seed in enumerate(seeds):
                    part = [p for p in rows if p["R"] == R and p["seed"] == seed]
                    if not part:
                        continue
                    shift = 2 ** ((i - (len(seeds) - 1) / 2) * 0.06)  # seeds side by side on the log axis
                    hollow = [(p["N"], p["R"], p["mode"], p["seed"]) in bound for p in part]
                    ax.scatter([p["N"] * shift for p in part], [p["d_star"] for p in part],
                               marker=_MARKERS[i % len(_MARKERS)], s=34, zorder=4, linewidth=0.8,
                               facecolors=["none" if h else colour for h in hollow], edgecolors=colour)
                ax.plot([], [], color=colour, marker="o", linestyle="none", label=f"R = {R}")
                if "error" not in entry["M_log"]:
                    ax.plot(grid, predict_log(entry["M_log"], grid, R), color=colour, linewidth=1.5)
                if "error" not in entry["M_pow"]:
                    ax.plot(grid, predict_power(entry["M_pow"], grid, R), color=colour, linewidth=1.5,
                            linestyle="--")
            for i, seed in enumerate(seeds):
                ax.scatter([], [], marker=_MARKERS[i % len(_MARKERS)], color="black", s=34,
                           label=f"seed {seed}")
            ax.scatter([], [], marker="o", facecolors="none", edgecolors="black", s=34, label="budget-bound")
            ax.plot([], [], color="black", linewidth=1.5, label="M_log: a + c·R·ln N")
            ax.plot([], [], color="black", linewidth=1.5, linestyle="--", label="M_pow: b·N^p·R^q")
            ax.axvspan(HELD_OUT_N / 2**0.5, HELD_OUT_N * 2**0.5, color="0.92", zorder=0)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("number of subjects N (shaded: held-out octave)")
            ax.set_ylabel("capacity threshold d*")
            ax.set_ylim(0, None)
            p = entry["M_pow"].get("params", {}).get("p")
            exponent = "" if p is None else f", p = {p:.2f}"
            ax.set_title(f"{mode}: {entry['verdict']}{exponent}")
            ax.legend(loc="upper left", fontsize=9, frameon=False, ncol=2)
        fig.suptitle("d* against N (m = 4d, ≤ 500 Adam steps; hollow: budget-bound)")
        fig.tight_layout()
    return fig


def _finite(value):
    """A JSON-safe copy: non-finite floats become None, dict keys strings."""
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value


def main(argv: list[str] | None = None) -> int:
    """Print the comparison and draw the figure from a results file.

    Parameters
    ----------
    argv : list of str, optional
        ``--from FILE --out DIR [--json] [--dpi DPI]``.

    Returns
    -------
    int
        0; 2 (one line on stderr) when the file cannot be read, the folder not written, or no search has a d*.
    """
    parser = argparse.ArgumentParser(description="d* against N: M_log against M_pow, per mode (the protocol "
                                                 "of docs/science/n_axis_protocol.md)")
    parser.add_argument("--from", dest="source", required=True, metavar="RESULTS.jsonl")
    parser.add_argument("--out", required=True, metavar="DIR")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    parser.add_argument("--dpi", type=int, default=150)
    args = parser.parse_args(argv)
    try:
        if not 30 <= args.dpi <= 1200:
            raise InputError(f"--dpi must be in 30..1200, got {args.dpi}")
        os.makedirs(args.out, exist_ok=True)
        validate_output_path(os.path.join(args.out, f"{FIGURE_NAME}.png"), what="figure")
        records = read_records(args.source)
    except (InputError, OSError) as exc:
        print(f"n_axis: error: {exc}", file=sys.stderr)
        return 2
    report = n_axis_report(records)
    if not report["searches"]["fitted"]:
        print(f"n_axis: error: no threshold record with a d* and the protocol's settings in {args.source}",
              file=sys.stderr)
        return 2
    paths: list[str] = []
    try:
        fig = n_axis_figure(records, report)
    except ImportError as exc:
        print(f"n_axis: figure not drawn: {exc}", file=sys.stderr)
    else:
        paths = save_figure(fig, args.out, FIGURE_NAME, dpi=args.dpi, formats=("png", "svg"))
    if args.json:
        doc = _finite({**report, "figures": paths})
        print(json.dumps(doc, indent=1, allow_nan=False, ensure_ascii=False))
    else:
        print(n_axis_table(report))
        for path in paths:
            print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
