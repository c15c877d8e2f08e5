"""Figures (optional ``plot`` extra: matplotlib), written at ``dpi`` in each of ``formats`` (PNG, SVG, PDF).

- ``thresholds``: capacity threshold d* against R·ln N, learned vs frozen, with the fitted c·R·ln N; from the
  threshold records of ``--from`` (``georecall sweep threshold``).
- ``tradeoff``: d against k for G2 (no CoT) and C1 (CoT) and their lower bounds; computed (``bounds.tables``).
- ``margins``: histograms of per-query logit margins, G1 (sign codes) and C1 (every decoding step), against
  the promised bound; computed (exhaustive checks).
- ``transfer``: freeze-and-swap accuracies (closed form, fitted) of each transfer record, with chance 1/N;
  from the transfer records of ``--from`` (``georecall transfer --append``).
- ``construction``: G1 itself (E's blocks, W1's gates, one query's hidden units and logits); computed.
- ``weights_E``, ``weights_Q``, ``weights_W1``, ``weights_W2``, ``weights_U``, ``attention``: each of G1's
  matrices with a colour bar, its rows and columns named in the demo's words (subjects, ``cipher0`` …,
  ``B_cipher0``, ``g_cipher0``, ``O``, ``units of cipher0``); computed.
- ``trained_vs_g1``: a trained model's E after the best linear alignment onto G1's E, beside G1's E, and both
  MLPs' relation-selectivity matrices; computed (a model trained as ``georecall demo`` trains it).
- ``mechanism``, ``forward_reverse``: the mechanism study's criterion quantities, and forward vs reverse fit
  (``georecall study mechanism --summary FILE --figures DIR``); ``mechanism_d``: every criterion quantity
  against d/d_G1, when the records hold the d axis (issue 21).

Every figure is drawn for a slide: text of at least :data:`MIN_FONT_PT` points on a figure at most 11 inches
wide, no two labels overlapping (:func:`text_overlaps` measures the drawn text's bounding boxes, titles
included) and no text cut off at the canvas edge (:func:`clipped_texts`); the tests run both on every figure,
in both styles. Labels that would collide are left out by construction (fewer ticks, legends,
greedy label placement, labels turned 90°) and long titles are broken onto two lines, never shrunk.
``figure_style("talk")`` draws the same figures with large type (tick labels 14 pt). Saved SVG keeps its text
as ``<text>`` and PDF embeds its fonts (TrueType), so labels stay editable in slide software
(:data:`EDITABLE`).

This module holds the figures of results (thresholds, tradeoff, margins, transfer) and :func:`make_figures`;
it re-exports the rest, which live by concept: :mod:`.plotting` (style, saving, legibility measures),
:mod:`.construction_figures` (G1 and its matrices drawn, a trained model beside it) and
:mod:`.study_figures` (the mechanism study's figures).
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from georecall.constructions.multi_hop import build_c1, chains, multi_hop_queries
from georecall.constructions.single_hop import build_g1
from georecall.experiments.construction_figures import (
    WEIGHTS,
    align_embeddings,
    construction_figure,
    g1_groups,
    matrix_figure,
    relation_means,
    trained_beside_g1_figure,
    weights_figures,
)
from georecall.experiments.demo import relation_names, train_like_demo
from georecall.experiments.plotting import (
    CATEGORIES,
    DEFAULT_DPI,
    DEFAULT_FORMATS,
    EDITABLE,
    FORMATS,
    MIN_FONT_PT,
    PLOT_HINT,
    STYLE,
    STYLES,
    TALK,
    check_figure_output,
    clipped_texts,
    figure_style,
    have_matplotlib,
    import_pyplot,
    minimum_font,
    rc_params,
    save_figure,
    small_texts,
    text_overlaps,
    tick_locator,
)
from georecall.experiments.study_figures import (
    d_axis_figure,
    forward_reverse_figure,
    mechanism_figure,
)
from georecall.experiments.sweep_fit import fit_thresholds
from georecall.experiments.sweep_records import is_floor_censored
from georecall.theory import seeds
from georecall.theory.tasks import random_task, task_for_seed
from georecall.verify.checking.check import check_decoding
from georecall.verify.checking.run import check_single_hop

__all__ = [
    "CATEGORIES",
    "DEFAULT_DPI",
    "DEFAULT_FORMATS",
    "EDITABLE",
    "FORMATS",
    "STYLE",
    "STYLES",
    "TALK",
    "WEIGHTS",
    "MIN_FONT_PT",
    "PLOT_HINT",
    "align_embeddings",
    "clipped_texts",
    "construction_figure",
    "d_axis_figure",
    "g1_groups",
    "figure_style",
    "forward_reverse_figure",
    "have_matplotlib",
    "make_figures",
    "margins_figure",
    "matrix_figure",
    "mechanism_figure",
    "minimum_font",
    "relation_means",
    "save_figure",
    "small_texts",
    "text_overlaps",
    "thresholds_figure",
    "tradeoff_figure",
    "trained_beside_g1_figure",
    "transfer_figure",
    "weights_figures",
]


# ------------------------------------------------------------------------------------------ the figures


def thresholds_figure(records: list[dict]):
    """Capacity threshold d* against R·ln N per mode, with the fitted line d* ≈ c·R·ln N.

    The line is :func:`.sweep_fit.fit_thresholds`' c per mode (learned, frozen): least squares through the
    origin over every threshold record of that mode (all seeds pooled).

    Parameters
    ----------
    records : list of dict
        Sweep records; those of ``kind == "threshold"`` with a ``d_star`` are drawn (``mode``, ``N``, ``R``,
        ``d_star``, ``seed``), the others ignored; searches censored at the floor of their range (d* only an
        upper bound, :func:`.sweep_records.is_floor_censored`) are left out, their number in the title.

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when there is no threshold record with a measured ``d_star``.

    Raises
    ------
    ImportError
        Without matplotlib (the message says how to install it).
    """
    plt = import_pyplot()
    thresholds = [r for r in records if r.get("kind") == "threshold" and r.get("d_star") is not None]
    left_out = sum(is_floor_censored(r) for r in thresholds)
    thresholds = [r for r in thresholds if not is_floor_censored(r)]
    if not thresholds:
        return None
    fits = fit_thresholds(thresholds)
    with plt.rc_context(rc_params()):
        fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
        for mode, marker, colour in (("learned", "o", "tab:blue"), ("frozen", "s", "tab:orange")):
            rows = [r for r in thresholds if r["mode"] == mode]
            if not rows:
                continue
            x = [r["R"] * math.log(r["N"]) for r in rows]
            ax.scatter(x, [r["d_star"] for r in rows], marker=marker, color=colour, zorder=3,
                       label=f"{mode} embeddings: d* ≈ {fits[mode]['c']:.2f}·R·ln N")
            grid = np.linspace(0, max(x) * 1.05, 50)
            ax.plot(grid, fits[mode]["c"] * grid, linestyle="--", color=colour)
        ax.set_xlabel("R · ln N")
        ax.set_ylabel("capacity threshold d*")
        ax.set_title("smallest d reaching 100% (gradient descent)"
                     + (f"\n{left_out} search(es) censored at d_min left out" if left_out else ""))
        ax.legend(loc="upper left")
    return fig


def tradeoff_figure(N: int = 4096, R: int = 4, k_max: int = 4):
    """d against k for G2 (no CoT) and C1 (CoT), each beside its lower bound at b = 1.

    Computed from :func:`georecall.bounds.tables.bound_rows` (no records); the bounds are drawn at
    ``max(d_min, 1)`` on the log axis.

    Parameters
    ----------
    N, R : int
        Entities and relations.
    k_max : int
        The largest number of hops (k = 1 … k_max).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    InputError
        N or R not a positive integer.
    """
    from georecall.bounds.tables import bound_rows  # networkx: kept off georecall --help
    plt = import_pyplot()
    rows = bound_rows([N], [R], list(range(1, k_max + 1)), [1])
    with plt.rc_context(rc_params()):
        fig, ax = plt.subplots(figsize=(6, 4.5), layout="constrained")
        for name, what, colour in (("G2", "no CoT", "tab:blue"), ("C1", "CoT", "tab:orange")):
            mine = [r for r in rows if r["construction"] == name]
            ks = [r["k"] for r in mine]
            ax.plot(ks, [r["d"] for r in mine], marker="o", color=colour, label=f"{name} ({what}): its d")
            ax.plot(ks, [max(r["d_min"], 1) for r in mine], linestyle=":", color=colour,
                    label=f"lower bound, {what}")
        ax.set_yscale("log")
        ax.set_xticks(range(1, k_max + 1))
        ax.set_xlabel("hops k")
        ax.set_ylabel("embedding dimension d")
        ax.set_title(f"capacity-depth tradeoff, N = {N}, R = {R}, b = 1")
        ax.legend(loc="upper left")
    return fig


def _margin_panel(ax, margins: np.ndarray, promised: float, title: str) -> None:
    """A histogram over the margins' own range; the promised bound as a line when it is near that range,
    otherwise named with an arrow at the left edge (so the bars are never squeezed into a corner)."""
    margins = np.asarray(margins, dtype=float).ravel()
    lo, hi = float(margins.min()), float(margins.max())
    span = hi - lo if hi > lo else max(abs(hi), 1.0) * 0.1
    values = np.unique(margins)
    step = float(np.min(np.diff(values))) if values.size > 1 else span
    if values.size <= 40 and step >= span / 100:  # a few well-separated values: one bar per value
        ax.bar(values, [np.sum(margins == v) for v in values], width=0.8 * step, color="tab:blue")
    else:
        ax.hist(margins, bins=40, range=(lo, hi), color="tab:blue")
    left, right = lo - 0.08 * span, hi + 0.08 * span
    if promised >= lo - 0.5 * span:
        left = min(left, promised - 0.08 * span)
        ax.axvline(promised, color="k", linestyle="--", label=f"promised ≥ {promised:.3g}")
        ax.legend(loc="upper left")
    else:
        ax.annotate(f"promised ≥ {promised:.3g}\n(off scale, to the left)", xy=(0.0, 0.82),
                    xycoords="axes fraction", xytext=(0.08, 0.82), textcoords="axes fraction", va="center",
                    arrowprops=dict(arrowstyle="->", color="k"))
    ax.set_xlim(left, right)
    ax.xaxis.set_major_locator(tick_locator(4, integer=False))
    ax.set_title(title)
    ax.set_xlabel("logit margin")
    ax.set_ylabel("queries")



def margins_figure(seed: int = 0):
    """Per-query margin histograms: G1 with sign codes and C1's decoding steps, each against its promise.

    Computed by exhaustive checks: G1 with sign codes (N = 1024, R = 8, D = 48, every query) and C1 (N = 256,
    R = 3, k = 3, every decoding step of every chain), each beside its promised lower bound.

    Parameters
    ----------
    seed : int
        Run seed of both tasks.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    RuntimeError
        A check kept no margins (a bug).
    """
    plt = import_pyplot()
    g1 = check_single_hop(1024, 8, codes="sign", D=48, seed=seed, keep=True)
    task = random_task(256, 3, np.random.default_rng(seed))
    c1 = build_c1(task, 3)
    tokens, _ = multi_hop_queries(task, 3)
    decoded = check_decoding(c1.model, tokens, chains(task, 3), keep=True)
    if g1.promise is None or g1.result.margins is None or decoded.margins is None:
        raise RuntimeError("the checks kept no margins")
    with plt.rc_context(rc_params()):
        # titles of two lines: one line each ran over the other panel's title and off the canvas in talk
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), layout="constrained")
        _margin_panel(axes[0], g1.result.margins, g1.promise.margin,
                      f"G1, sign codes, N = 1024, R = 8\n(min {g1.result.min_margin:.3g})")
        _margin_panel(axes[1], decoded.margins, c1.promise.margin,
                      f"C1, every step, N = 256, R = 3, k = 3\n(min {float(np.min(decoded.margins)):.3g})")
    return fig


def _transfer_name(record: dict, index: int) -> str:
    label = record.get("label")
    model = record.get("model")
    if not label or (model and label == os.path.basename(str(model))):  # the default label: a file name
        label = record.get("description") or f"model {index + 1}"
    return str(label)


def transfer_figure(records: list[dict]):
    """Freeze-and-swap accuracies per transfer record, labelled by model and (N, R), with chance 1/N.

    Parameters
    ----------
    records : list of dict
        Records; those of ``kind == "transfer"`` are drawn (``closed_form_accuracy``, ``fitted_accuracy``,
        and optionally ``N``, ``R``, ``chance``, ``label``, ``model``, ``description``), the others ignored.

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when there is no transfer record.

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    plt = import_pyplot()
    transfers = [r for r in records if r.get("kind") == "transfer"]
    if not transfers:
        return None
    with plt.rc_context(rc_params()):
        fig, ax = plt.subplots(figsize=(min(11.0, max(5.0, 2.2 * len(transfers) + 1.5)), 4.5),
                               layout="constrained")
        bars = np.arange(len(transfers))
        ax.bar(bars - 0.2, [r["closed_form_accuracy"] for r in transfers], 0.4, color="tab:blue",
               label="closed form (zero-shot)")
        ax.bar(bars + 0.2, [r["fitted_accuracy"] for r in transfers], 0.4, color="tab:orange",
               label="embeddings fitted")
        chance_drawn = False
        for x, r in zip(bars, transfers):
            chance = r.get("chance", 1.0 / r["N"] if r.get("N") else None)
            if chance is not None:
                ax.hlines(chance, x - 0.45, x + 0.45, colors="k", linestyles="--", lw=1.2,
                          label=None if chance_drawn else "chance (1/N)")
                chance_drawn = True
        names = [f"{_transfer_name(r, i)}\nN = {r.get('N', '?')}, R = {r.get('R', '?')}"
                 for i, r in enumerate(transfers)]
        ax.set_xticks(bars, names)
        ax.set_ylabel("accuracy on new bijections")
        ax.set_ylim(0, 1.3)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_title("freeze and swap: new bijections,\nsubject embeddings rebuilt")
        legend = ax.legend(loc="upper center", ncol=3, fontsize=minimum_font())  # in the band above 1
        with warnings.catch_warnings():  # a row wider than the figure collapses this trial layout: measured
            warnings.filterwarnings("ignore", "constrained_layout not applied", UserWarning)
            fig.draw_without_rendering()
        inside, box = ax.get_window_extent(), legend.get_window_extent()
        if box.x0 < inside.x0 or box.x1 > inside.x1:  # the row is wider than the axes (talk, few models)
            legend.remove()
            ax.set_ylim(0, 1.05)
            fig.legend(loc="outside lower center", ncol=1, fontsize=minimum_font())
    return fig


# ------------------------------------------------------------------------------------------ all of them


def make_figures(records: list[dict], out_dir: str, *, seed: int = 0, N: int = 4096, R: int = 4,
                 k_max: int = 4, dpi: int = DEFAULT_DPI, formats: Sequence[str] = DEFAULT_FORMATS,
                 log: Callable[[str], None] | None = None) -> list[str]:
    """Draw every figure the records allow, plus the computed ones, into ``out_dir`` (created when missing).

    Parameters
    ----------
    records : list of dict
        Sweep threshold and transfer records (others are ignored).
    out_dir : str
        Output folder; missing parents are created.
    seed : int
        Seed of the computed figures' tasks.
    N, R, k_max : int
        Sizes of the tradeoff figure.
    dpi : int
        Resolution of PNG files.
    formats : sequence of str
        File formats (:data:`FORMATS`).
    log : callable, optional
        Receives one line per figure written.

    Returns
    -------
    list of str
        The paths written.

    Raises
    ------
    ImportError
        Without matplotlib (the message says how to install it).
    ValueError
        On a bad ``dpi`` or format.
    InputError
        A figure file that cannot be written (:func:`georecall.io.validate_output_path`).
    """
    import_pyplot()
    dpi, formats = check_figure_output(dpi, formats)
    os.makedirs(out_dir, exist_ok=True)
    written: list[str] = []
    builders: list[tuple[str, Callable[[], Any]]] = [
        ("thresholds", lambda: thresholds_figure(records)),
        ("tradeoff", lambda: tradeoff_figure(N, R, k_max)),
        ("margins", lambda: margins_figure(seed)),
        ("transfer", lambda: transfer_figure(records)),
        ("construction", lambda: construction_figure(8, 2, seed, relation_names=relation_names(2))),
    ]

    def one_matrix(matrix: str) -> Callable[[], Any]:
        label = "attention" if matrix == "attention" else f"weights_{matrix}"
        return lambda: weights_figures(8, 2, seed, relation_names=relation_names(2), which=(matrix,))[label]

    for matrix in WEIGHTS:
        builders.append(("attention" if matrix == "attention" else f"weights_{matrix}", one_matrix(matrix)))
    builders.append(("trained_vs_g1", lambda: _trained_vs_g1(64, 2, seed)))
    for name, build in builders:
        fig = build()
        if fig is None:
            continue
        written += save_figure(fig, out_dir, name, dpi=dpi, formats=formats)
        if log is not None:
            log(f"figure {name}")
    return written


def _trained_vs_g1(N: int, R: int, seed: int):
    """:func:`trained_beside_g1_figure` for a model trained as the demo trains it (``demo.train_like_demo``),
    the alignment fitted on three quarters of the subjects (drawn from the seed's ``probes`` stream)."""
    task = task_for_seed(N, R, seed)
    g1 = build_g1(task, "binary", integer=True).model
    trained = train_like_demo(task, g1.d, seed)
    fit = np.sort(seeds.rng(seed, "probes").permutation(N)[: 3 * N // 4])
    return trained_beside_g1_figure(g1, trained.model, task, relation_names=relation_names(R), fit=fit)


