"""The mechanism study's figures (optional ``plot`` extra): its criterion quantities
(:func:`mechanism_figure`), forward vs reverse fit (:func:`forward_reverse_figure`), every criterion
quantity across widths (:func:`d_axis_figure`) and along training (:func:`trajectory_figure`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from georecall.experiments.plotting import (
    CATEGORIES,
    import_pyplot,
    minimum_font,
    place_labels,
    rc_params,
)

__all__ = [
    "d_axis_figure",
    "forward_reverse_figure",
    "mechanism_figure",
    "trajectory_figure",
]


# ----------------------------------------------------------------------------------- the mechanism study


def _study_rows(doc: dict) -> list[tuple[str, str, dict]]:
    rows = [(e["label"], "control" if e.get("control") else "trained", e["trained"]) for e in doc["regimes"]]
    rows += [(_construction_label(e), "construction", e["trained"]) for e in doc["constructions"]]
    return rows


def _construction_label(entry: dict) -> str:
    """A construction's row name; G1 embedded in a wider residual (``pad_d``) says so, with its native d."""
    name = f"{entry['construction']} N={entry['N']} R={entry['R']}"
    if entry.get("pad_d"):
        return f"{name} d={entry['pad_d']} (padded)"
    return name


def _category_legend(ax, present: Iterable[str], *, bars: bool, **kwargs) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    handles = []
    for key in present:
        label, colour, marker = CATEGORIES[key]
        handles.append(Patch(color=colour, label=label) if bars
                       else Line2D([], [], color=colour, marker=marker, ls="", label=label))
    ax.legend(handles=handles, **kwargs)


def mechanism_figure(doc: dict, thresholds: dict):
    """The mechanism study's criterion quantities per regime (mean ± sd over seeds), coloured by category.

    One panel per quantity (superposition R², interventions followed, selective units, gated mass,
    closed-form transfer, functional zero-shot), one bar per trained regime, control and construction, with
    the declared threshold (red, dashed) and the mean of the untrained fan-in weights (black, dotted).

    Parameters
    ----------
    doc : dict
        The study summary (``study_report.summarize``): ``regimes`` (``label``, ``control``, ``params``,
        ``trained``, ``initial``) and ``constructions``, each quantity as ``{"mean", "sd"}``.
    thresholds : dict
        The declared thresholds (``study_design.THRESHOLDS``: ``superposition_r2``, ``follows``,
        ``selective_fraction``, ``gated_mass``, ``zero_shot``).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    plt = import_pyplot()
    rows = _study_rows(doc)
    untrained = [e["initial"] for e in doc["regimes"] if e["params"]["init"] == "fan-in"]
    large = minimum_font() > 10  # the talk style: six titles in large type fit 11 inches hyphenated
    panels = (("super-\nposition\nR²" if large else "superposition\nR²", "superposition_r2",
               thresholds["superposition_r2"]),
              ("inter-\nventions\nfollowed" if large else "interventions\nfollowed", "follows",
               thresholds["follows"]),
              ("selective\nunits", "selective_fraction", thresholds["selective_fraction"]),
              ("gated\nmass", "gated_mass", thresholds["gated_mass"]),
              ("closed-\nform\ntransfer" if large else "closed-form\ntransfer", "closed_form_transfer",
               thresholds["zero_shot"]),
              ("func-\ntional\nzero-shot" if large else "functional\nzero-shot", "functional_zero_shot",
               thresholds["zero_shot"]))
    y = np.arange(len(rows))
    colours = [CATEGORIES[c][1] for _, c, _ in rows]
    # inches per row (the row names' size and some air), and for the titles, tick labels and legend
    pitch, frame = (1.15 * minimum_font() / 72, 2.8) if large else (0.21, 2.0)
    height = pitch * len(rows) + frame
    if height > 8.5:
        warnings.warn(f"the mechanism figure's {len(rows)} rows make it {height:.1f} inches tall in this "
                      "style, taller than a slide (8.5)", UserWarning, stacklevel=2)
    with plt.rc_context(rc_params()):
        fig, axes = plt.subplots(1, len(panels), figsize=(11, height), sharey=True)
        for ax, (title, key, threshold) in zip(axes, panels):
            means = [s[key]["mean"] if s[key]["mean"] is not None else np.nan for _, _, s in rows]
            sds = [s[key]["sd"] or 0.0 for _, _, s in rows]
            ax.barh(y, means, xerr=sds, color=colours, alpha=0.85, error_kw={"lw": 0.8})
            ax.axvline(threshold, color="tab:red", lw=1.2, ls="--")
            base = [s[key]["mean"] for s in untrained if s[key]["mean"] is not None]
            if base:
                ax.axvline(float(np.mean(base)), color="k", lw=1.2, ls=":")
            ax.set_title(title)
            low = float(np.nanmin(means)) if np.isfinite(np.nanmin(means)) else 0.0
            ax.set_xlim(min(0.0, low - 0.05), 1.05)
            ax.set_xticks([0, 0.5, 1], ["0", ".5", "1"])
        axes[0].set_yticks(y, [name for name, _, _ in rows], fontsize=minimum_font())
        axes[0].invert_yaxis()  # once: the axes share y
        from matplotlib.lines import Line2D
        present = list(dict.fromkeys(c for _, c, _ in rows))
        handles = [Line2D([], [], color=CATEGORIES[c][1], lw=6, label=CATEGORIES[c][0]) for c in present]
        handles += [Line2D([], [], color="tab:red", ls="--", label="declared threshold"),
                    Line2D([], [], color="k", ls=":", label="untrained weights (mean)")]
        fig.legend(handles=handles, loc="lower center", ncol=2 if large else 3, bbox_to_anchor=(0.5, 0.0))
        fig.suptitle("Does gradient descent find the geometry? (mean ± sd over seeds)")
        fig.tight_layout(rect=(0, 0.8 / height, 1, 1))
    return fig


def forward_reverse_figure(doc: dict):
    """Forward against reverse fit R² per regime and construction, coloured by category.

    Points at the same (rounded) place share one label; labels are placed where they touch nothing else, and
    those that find no place are counted on the figure (they are named in mechanism.png). Rows without both
    means are left out.

    Parameters
    ----------
    doc : dict
        The study summary (as :func:`mechanism_figure`), with ``forward_r2`` and ``reverse_r2``.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    plt = import_pyplot()
    merged: dict[tuple[float, float], list[tuple[str, str, Any]]] = {}
    for name, category, s in _study_rows(doc):
        f, r = s["forward_r2"], s["reverse_r2"]
        if f["mean"] is None or r["mean"] is None:
            continue
        merged.setdefault((round(r["mean"], 3), round(f["mean"], 3)), []).append((name, category, (f, r)))
    with plt.rc_context(rc_params()):
        fig, ax = plt.subplots(figsize=(7.5, 6.5))
        ax.plot([-0.2, 1.05], [-0.2, 1.05], color="gray", lw=0.8, ls=":")
        points, labels = [], []
        for (x, yv), items in merged.items():
            for _, category, (f, r) in items:
                _, colour, marker = CATEGORIES[category]
                ax.errorbar(r["mean"], f["mean"], xerr=r["sd"], yerr=f["sd"], fmt=marker, ms=6, color=colour,
                            elinewidth=0.8)
            if len(items) > 1 and len({n.split(" ")[0] for n, _, _ in items}) == 1:
                label = f"{items[0][0].split(' ')[0]} ({len(items)} sizes)"
            else:
                label = ", ".join(n for n, _, _ in items)
            points.append((x, yv))
            labels.append(label)
        ax.set_xlim(-0.2, 1.1)
        ax.set_ylim(-0.2, 1.1)
        for axis in (ax.xaxis, ax.yaxis):  # no −0.2 on both axes: they meet in the corner in large type
            axis.set_ticks([0, 0.5, 1], ["0", "0.5", "1"])
        ax.set_xlabel("reverse fit R² (read-out row from its subjects)")
        ax.set_ylabel("forward fit R² (subject embedding from its attributes)")
        ax.set_title("Forward vs reverse (mirror-image) fit, held out")
        present = list(dict.fromkeys(c for _, c, _ in _study_rows(doc)))
        _category_legend(ax, present, bars=False, loc="lower right")
        # controls and constructions first: they are few and the point of the comparison
        order = sorted(range(len(points)), key=lambda i: 0 if any(
            c != "trained" for _, c, _ in list(merged.values())[i]) else 1)
        # the note first (the widest count it can show), so that no label is placed under it
        note = ax.text(0.02, 0.98, f"{len(points)} crowded regimes unlabelled (named in mechanism.png)",
                       transform=ax.transAxes, va="top", fontsize=minimum_font(), color="0.3")
        left_out = place_labels(ax, [points[i] for i in order], [labels[i] for i in order])
        if left_out:
            note.set_text(f"{len(left_out)} crowded regimes unlabelled (named in mechanism.png)")
        else:
            note.remove()
    return fig


def d_axis_figure(axis: dict, thresholds: dict, fields: tuple):
    """The mechanism study across widths: one panel per criterion quantity against d/d_G1 (log2 axis), one
    line per (N, family) of trained models (mean ± sd over seeds), the untrained weights of the base runs at
    N = 1024 (grey, dotted), G1 native and embedded wider (black stars), and the declared threshold (red,
    dashed).

    Parameters
    ----------
    axis : dict
        ``study_report.summarize(...)["d_axis"]``.
    thresholds : dict
        ``study_design.THRESHOLDS``.
    fields : tuple
        ``(title, summary key, threshold key)`` per panel (``study_report.D_AXIS_FIELDS``).

    Returns
    -------
    matplotlib.figure.Figure
        The figure (save it with :func:`save_figure`, as ``mechanism_d``).

    Raises
    ------
    ImportError
        Without matplotlib.
    ValueError
        An axis without series (nothing to draw).
    """
    plt = import_pyplot()
    if not axis or not axis.get("series"):
        raise ValueError("the summary has no d axis to draw")
    columns = 3
    rows = math.ceil(len(fields) / columns)
    markers = "osD^v<>ph"
    with plt.rc_context(rc_params()):
        fig, axes = plt.subplots(rows, columns, figsize=(11, 8.5), squeeze=False, sharex=True)
        for ax, (title, key, threshold_key) in zip(axes.ravel(), fields):
            for i, item in enumerate(axis["series"]):
                points = [q for q in item["points"] if q["trained"].get(key, {}).get("mean") is not None]
                if not points:
                    continue
                ax.errorbar([q["factor"] for q in points], [q["trained"][key]["mean"] for q in points],
                            yerr=[q["trained"][key]["sd"] or 0.0 for q in points],
                            marker=markers[i % len(markers)], ms=4, lw=1, capsize=2,
                            ls="-" if item["N"] == 1024 else "--", label=f"{item['family']} (N={item['N']})")
            base = [q for q in axis["series"][0]["points"]
                    if q["initial"].get(key, {}).get("mean") is not None]
            if base:
                ax.plot([q["factor"] for q in base], [q["initial"][key]["mean"] for q in base], color="gray",
                        ls=":", marker=".", label="untrained")
            g1 = [g for g in axis.get("g1", [])
                  if g["factor"] and g["trained"].get(key, {}).get("mean") is not None]
            if g1:
                ax.scatter([g["factor"] for g in g1], [g["trained"][key]["mean"] for g in g1], marker="*",
                           s=60, color="black", zorder=5, label="G1 (native / embedded wider)")
            ax.axhline(thresholds[threshold_key], color="tab:red", lw=1, ls="--", label="threshold")
            ax.set_xscale("log", base=2)
            ax.set_xticks([0.5, 1, 2, 4], ["0.5", "1", "2", "4"])
            ax.minorticks_off()
            low = ax.get_ylim()[0]
            ax.set_ylim(min(low, 0.0) if key != "forward_ceiling" else low, 1.05)
            ax.set_title(title)
        for ax in axes.ravel()[len(fields):]:
            ax.axis("off")
        for ax in axes[-1]:
            ax.set_xlabel("d / d_G1")
        handles, labels = axes.ravel()[0].get_legend_handles_labels()
        # four columns fit 11 inches at 10 pt, three in large type; the panels leave the legend's height
        legend = fig.legend(handles, labels, loc="lower center", ncol=4 if minimum_font() <= 10 else 3,
                            frameon=False)
        fig.canvas.draw()
        below = legend.get_window_extent().height / fig.bbox.height + 0.01
        fig.tight_layout(rect=(0, below, 1, 1), h_pad=0.6, w_pad=0.8)
    return fig




# ------------------------------------------------------------------------------- along training (issue 41)

_TRAJECTORY_TITLES = {"accuracy": "facts answered", "superposition_r2": "superposition R²",
                      "follows": "interventions followed", "others_unchanged": "other relations unchanged",
                      "selective_fraction": "selective units", "gated_mass": "gated mass",
                      "breadth_median": "breadth (median)", "zero_shot": "zero-shot transfer (best)",
                      "component_share": "components, not a key", "rebuilt_accuracy": "fit's rebuild read"}
_LINESTYLES: tuple[Any, ...] = ("-", "--", ":", "-.")


def trajectory_figure(doc: dict, thresholds: dict, fields: tuple):
    """The probes against the training step, per regime with a trajectory (mean over seeds): one panel per
    quantity, a colour per family, a line style per N, the claim's threshold as a grey line.

    Parameters
    ----------
    doc : dict
        :func:`.study_report.summarize`'s document (regimes with ``trajectory``).
    thresholds : dict
        The declared thresholds (:data:`.study_design.THRESHOLDS`).
    fields : tuple of str
        The quantities, one panel each (:data:`.study_report.TRAJECTORY_FIELDS`).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    plt = import_pyplot()
    from matplotlib.lines import Line2D

    rows = [e for e in doc["regimes"] if e.get("trajectory")]
    families = list(dict.fromkeys(e.get("family") or e["regime"] for e in rows))
    sizes = sorted({e["params"]["N"] for e in rows})
    colours = plt.get_cmap("tab10")
    columns = 4
    panels = math.ceil(len(fields) / columns)
    large = minimum_font() > 10  # the talk style: long titles on two lines
    with plt.rc_context(rc_params()):
        fig, axes = plt.subplots(panels, columns, figsize=(11, min(8.5, 2.4 * panels + 1.2)), squeeze=False)
        for ax, name in zip(axes.flat, fields):
            for e in rows:
                t = e["trajectory"]
                colour = colours(families.index(e.get("family") or e["regime"]) % 10)
                style = _LINESTYLES[sizes.index(e["params"]["N"]) % len(_LINESTYLES)]
                ys = [np.nan if s["mean"] is None else s["mean"] for s in t[name]]
                ax.plot(t["steps"], ys, color=colour, linestyle=style, linewidth=1.3, marker="o",
                        markersize=3)
            if name in thresholds:  # every criterion quantity is named as its threshold
                ax.axhline(thresholds[name], color="0.55", linewidth=1.0, linestyle="--")
            title = _TRAJECTORY_TITLES.get(name, name)
            if large and len(title) > 16:  # at its last space before the middle
                cut = title.rfind(" ", 0, len(title) // 2 + 3)
                title = title[:cut] + "\n" + title[cut + 1:] if cut > 0 else title
            ax.set_title(title, fontsize=minimum_font() + 1)
            ax.set_ylim(-0.03, 1.03)
            ax.set_xlabel("training step", fontsize=minimum_font())
            ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1000:g}k" if x >= 1000 else f"{x:g}")
        for ax in list(axes.flat)[len(fields):]:
            ax.set_visible(False)
        handles = [Line2D([], [], color=colours(i % 10), label=f) for i, f in enumerate(families)]
        handles += [Line2D([], [], color="black", linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                           label=f"N = {N}") for i, N in enumerate(sizes)]
        handles.append(Line2D([], [], color="0.55", linestyle="--", label="claim's threshold"))
        legend = fig.legend(handles=handles, loc="lower center", ncol=min(4 if large else 6, len(handles)),
                            frameon=False, fontsize=minimum_font())
        fig.suptitle("the probes along training (mean over seeds)")
        fig.canvas.draw()  # the panels leave the legend's height
        fig.tight_layout(rect=(0, legend.get_window_extent().height / fig.bbox.height + 0.01, 1, 1))
    return fig
