"""Figures (optional ``plot`` extra: matplotlib), written at ``dpi`` in each of ``formats`` (PNG, SVG, PDF).

- ``thresholds``: capacity threshold d* against R·ln N, learned vs frozen, with the fitted c·R·ln N; from the
  threshold records of ``--from`` (``georecall sweep threshold``).
- ``tradeoff``: d against k for G2 (no CoT) and C1 (CoT) and their lower bounds; computed (``bounds.tables``).
- ``margins``: histograms of per-query logit margins, G1 (sign codes) and C1 (every decoding step), against
  the promised bound; computed (exhaustive checks).
- ``transfer``: freeze-and-swap accuracies (closed form, fitted) of each transfer record, with chance 1/N;
  from the transfer records of ``--from`` (``georecall transfer --append``).
- ``construction``: G1 itself (E's blocks, W1's gates, one query's hidden units and logits); computed.
- ``mechanism``, ``forward_reverse``: the mechanism study's criterion quantities, and forward vs reverse fit
  (``georecall study mechanism --summary FILE --figures DIR``); ``mechanism_d``: every criterion quantity
  against d/d_G1, when the records hold the d axis (issue 21).

Every figure is drawn for a slide: text of at least :data:`MIN_FONT_PT` points on a figure at most 11 inches
wide, and no two labels overlapping (:func:`text_overlaps` measures the drawn text's bounding boxes; the tests
run it on every figure). Labels that would collide are left out by construction (fewer ticks, legends,
greedy label placement), never shrunk.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from georecall.constructions.layout import Layout
from georecall.constructions.model import forward
from georecall.constructions.multi_hop import build_c1, chains, multi_hop_queries
from georecall.constructions.single_hop import build_g1
from georecall.io import atomic_write, validate_output_path
from georecall.theory.tasks import random_task, task_for_seed
from georecall.verify.checking.check import check_decoding
from georecall.verify.checking.run import check_single_hop
from georecall.verify.experiments.demo import relation_names

__all__ = [
    "DEFAULT_DPI",
    "DEFAULT_FORMATS",
    "FORMATS",
    "MIN_FONT_PT",
    "PLOT_HINT",
    "construction_figure",
    "d_axis_figure",
    "forward_reverse_figure",
    "have_matplotlib",
    "make_figures",
    "margins_figure",
    "mechanism_figure",
    "save_figure",
    "small_texts",
    "text_overlaps",
    "thresholds_figure",
    "tradeoff_figure",
    "transfer_figure",
]

PLOT_HINT = "drawing figures needs matplotlib: pip install 'georecall[plot]' (or pip install matplotlib)"
FORMATS = ("png", "svg", "pdf")
DEFAULT_FORMATS = ("png", "svg")
DEFAULT_DPI = 150
MIN_FONT_PT = 9.0  # the smallest text on any figure (tick labels); titles and axis labels are larger

# One look for every figure: sizes in points, for a figure 5-11 inches wide shown on a slide
STYLE = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 13, "svg.fonttype": "none",
         "pdf.fonttype": 42}

# Categories of the mechanism study's rows: colour and marker, the same in both study figures
CATEGORIES = {
    "trained": ("gradient descent (trained)", "tab:blue", "o"),
    "control": ("control: G1 given in part, then trained", "tab:orange", "s"),
    "construction": ("construction (built, not trained)", "tab:green", "D"),
}


def have_matplotlib() -> bool:
    """Whether matplotlib can be imported (checked before any work that ends in figures)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError(PLOT_HINT) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _check_output(dpi: int, formats: Iterable[str]) -> tuple[int, tuple[str, ...]]:
    formats = tuple(dict.fromkeys(formats))
    if not formats or any(f not in FORMATS for f in formats):
        raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {formats!r}")
    if isinstance(dpi, bool) or not isinstance(dpi, int) or not 30 <= dpi <= 1200:
        raise ValueError(f"dpi must be a whole number in 30..1200, got {dpi!r}")
    return dpi, formats


def save_figure(fig, out_dir: str, name: str, *, dpi: int = DEFAULT_DPI,
                formats: Sequence[str] = DEFAULT_FORMATS) -> list[str]:
    """Write ``fig`` as ``out_dir/name.<format>`` for each format, atomically; close it; return the paths.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    out_dir : str
        An existing folder.
    name : str
        File name without suffix.
    dpi : int
        Resolution of raster formats (PNG), 30..1200.
    formats : sequence of str
        A non-empty subset of :data:`FORMATS`.

    Returns
    -------
    list of str
        The paths written, one per format.

    Raises
    ------
    ValueError
        On a bad ``dpi`` or format.
    InputError
        A target that cannot be written (:func:`georecall.io.validate_output_path`).
    """
    dpi, formats = _check_output(dpi, formats)
    paths = []
    try:
        for ext in formats:
            target = validate_output_path(os.path.join(out_dir, f"{name}.{ext}"), what="figure")

            def draw(handle, fmt: str = ext) -> None:
                fig.savefig(handle, format=fmt, dpi=dpi, bbox_inches="tight")

            atomic_write(target, draw)
            paths.append(target)
    finally:
        _pyplot().close(fig)
    return paths


# ------------------------------------------------------------------------------------------ legibility


def _texts(fig) -> list:
    """Every visible, non-empty text artist of the figure, after a draw (so that tick labels exist)."""
    from matplotlib.axis import Axis
    from matplotlib.text import Text
    fig.canvas.draw()
    hidden: set[int] = set()  # labels of ticks outside the view: matplotlib keeps them, does not draw them
    for axis in fig.findobj(Axis):
        low, high = sorted(axis.get_view_interval())
        span = (high - low) * 1e-9
        for tick in axis.get_major_ticks() + axis.get_minor_ticks():
            if not low - span <= tick.get_loc() <= high + span:
                hidden.update((id(tick.label1), id(tick.label2)))
    found = []
    for artist in fig.findobj(Text):
        if artist.get_visible() and artist.get_text().strip() and id(artist) not in hidden:
            found.append(artist)
    return found


def _extent(text, renderer):
    """The box of a text's glyphs (for an annotation, without its arrow)."""
    from matplotlib.text import Annotation, Text
    if isinstance(text, Annotation):
        text.update_positions(renderer)  # places the text from its offset before it is measured
    return Text.get_window_extent(text, renderer)


def text_overlaps(fig, *, pad: float = 0.0) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose bounding boxes overlap (in display pixels, each box grown by ``pad``).

    The boxes are matplotlib's own (``Text.get_window_extent`` after a draw): tick labels, axis labels,
    titles, annotations and legend entries. Texts that are clipped away (outside their axes) are ignored.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    pad : float
        Pixels added around every box before comparing.

    Returns
    -------
    list of (str, str)
        The overlapping pairs' texts; empty when no two labels touch.
    """
    renderer = fig.canvas.get_renderer()
    texts = _texts(fig)
    fig_box = fig.bbox
    boxes = []
    for t in texts:
        box = _extent(t, renderer)
        if box.width <= 0 or box.height <= 0:
            continue
        if t.get_clip_on() and t.axes is not None and not t.axes.bbox.overlaps(box):
            continue
        if not fig_box.overlaps(box) and t.axes is not None:
            continue
        boxes.append((t, box.padded(pad)))
    pairs = []
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            a, b = boxes[i][1], boxes[j][1]
            if min(a.x1, b.x1) - max(a.x0, b.x0) > 0.5 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0.5:
                pairs.append((boxes[i][0].get_text(), boxes[j][0].get_text()))
    return pairs


def small_texts(fig, minimum: float = MIN_FONT_PT) -> list[tuple[str, float]]:
    """Drawn texts smaller than ``minimum`` points; empty when every text is legible.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure (drawn first, so that tick labels exist).
    minimum : float
        The smallest legible font size in points (default :data:`MIN_FONT_PT`).

    Returns
    -------
    list of (str, float)
        ``(text, size in points)`` of every visible text below ``minimum``.
    """
    return [(t.get_text(), float(t.get_fontsize())) for t in _texts(fig) if t.get_fontsize() < minimum - 1e-9]


def _distance(point, box) -> float:
    """Distance in pixels from a point to a box (0 inside it)."""
    dx = max(box.x0 - point[0], 0.0, point[0] - box.x1)
    dy = max(box.y0 - point[1], 0.0, point[1] - box.y1)
    return math.hypot(dx, dy)


def _place_labels(ax, points: Sequence[tuple[float, float]], labels: Sequence[str], *,
                  fontsize: float = MIN_FONT_PT) -> list[str]:
    """Annotate each point with its label where the label touches no other label, point, axes edge or tick
    label (greedy: eight directions at growing distance, a thin leader line when away from the point).
    Returns the labels that found no free place (left out, never drawn on top of each other)."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    taken = [_extent(t, renderer) for t in _texts(fig)]
    marks = [ax.transData.transform(p) for p in points]
    inside = ax.bbox
    left_out = []
    directions = [(1, 1), (1, -1), (-1, 1), (-1, -1), (1, 0), (-1, 0), (0, 1), (0, -1)]
    for (x, y), label in zip(points, labels):
        placed = False
        for distance in (6, 14, 24):
            for dx, dy in directions:
                offset = (dx * distance, dy * distance)
                ha = "left" if dx > 0 else ("right" if dx < 0 else "center")
                va = "bottom" if dy > 0 else ("top" if dy < 0 else "center")
                text = ax.annotate(label, (x, y), xytext=offset, textcoords="offset points", ha=ha, va=va,
                                   fontsize=fontsize,
                                   arrowprops=dict(arrowstyle="-", lw=0.8, color="0.3", shrinkA=1,
                                                   shrinkB=4) if distance > 8 else None)
                box = _extent(text, renderer).padded(2)
                own = _distance(ax.transData.transform((x, y)), box)
                clear = (inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0
                         and box.y1 <= inside.y1 and not any(box.overlaps(other) for other in taken)
                         # close to its point: no other point nearer; further away a leader line says
                         # whose it is, and the label only must not cover a point
                         and all(_distance(mark, box) > (own + 6 if distance <= 8 else 4) for mark in marks
                                 if not np.allclose(mark, ax.transData.transform((x, y)))))
                if clear:
                    taken.append(box)
                    placed = True
                    break
                text.remove()
            if placed:
                break
        if not placed:
            left_out.append(label)
    return left_out


# ------------------------------------------------------------------------------------------ the figures


def thresholds_figure(records: list[dict]):
    """Capacity threshold d* against R·ln N per mode, with the fitted line d* ≈ c·R·ln N.

    The line is :func:`.sweep.fit_thresholds`' c per mode (learned, frozen): least squares through the origin
    over every threshold record of that mode (all seeds pooled).

    Parameters
    ----------
    records : list of dict
        Sweep records; those of ``kind == "threshold"`` with a ``d_star`` are drawn (``mode``, ``N``, ``R``,
        ``d_star``, ``seed``), the others ignored.

    Returns
    -------
    matplotlib.figure.Figure or None
        ``None`` when there is no threshold record with a ``d_star``.

    Raises
    ------
    ImportError
        Without matplotlib (the message says how to install it).
    """
    from georecall.verify.experiments.sweep import fit_thresholds  # the trainer's scipy: off georecall --help
    plt = _pyplot()
    thresholds = [r for r in records if r.get("kind") == "threshold" and r.get("d_star") is not None]
    if not thresholds:
        return None
    fits = fit_thresholds(thresholds)
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6, 4.5))
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
        ax.set_title("smallest d reaching 100% (gradient descent)")
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
    plt = _pyplot()
    rows = bound_rows([N], [R], list(range(1, k_max + 1)), [1])
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(6, 4.5))
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
    ax.xaxis.set_major_locator(_locator(4, integer=False))
    ax.set_title(title)
    ax.set_xlabel("logit margin")
    ax.set_ylabel("queries")


def _locator(n: int, integer: bool = True):
    from matplotlib.ticker import MaxNLocator
    return MaxNLocator(nbins=n, min_n_ticks=2, integer=integer)


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
    plt = _pyplot()
    g1 = check_single_hop(1024, 8, codes="sign", D=48, seed=seed, keep=True)
    task = random_task(256, 3, np.random.default_rng(seed))
    c1 = build_c1(task, 3)
    tokens, _ = multi_hop_queries(task, 3)
    decoded = check_decoding(c1.model, tokens, chains(task, 3), keep=True)
    if g1.promise is None or g1.result.margins is None or decoded.margins is None:
        raise RuntimeError("the checks kept no margins")
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
        _margin_panel(axes[0], g1.result.margins, g1.promise.margin,
                      f"G1, sign codes, N = 1024, R = 8 (min {g1.result.min_margin:.3g})")
        _margin_panel(axes[1], decoded.margins, c1.promise.margin,
                      f"C1, every step, N = 256, R = 3, k = 3 (min {float(np.min(decoded.margins)):.3g})")
        fig.tight_layout()
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
    plt = _pyplot()
    transfers = [r for r in records if r.get("kind") == "transfer"]
    if not transfers:
        return None
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(min(11.0, max(5.0, 2.2 * len(transfers) + 1.5)), 4.5))
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
        ax.set_title("freeze and swap: new bijections, subject embeddings rebuilt")
        ax.legend(loc="upper center", ncol=3, fontsize=MIN_FONT_PT)
    return fig


# ------------------------------------------------------------------------------ the construction itself


def construction_figure(N: int = 8, R: int = 2, seed: int = 0, *, query: tuple[int, int] | None = None,
                        relation_names: Sequence[str] | None = None):
    """G1 with binary codes at integer scale, drawn: E's blocks, W1 (blocks and gates), one query's hidden
    units and its logits.

    Parameters
    ----------
    N, R : int
        Entities and relations (the task is ``task_for_seed(N, R, seed)``).
    seed : int
        Run seed.
    query : (s, r), optional
        The query drawn (default: subject 5 mod N, the last relation).
    relation_names : sequence of str, optional
        Names of the R relations (default r0, r1, …; ``georecall demo`` and ``figures`` name them as the
        demo does, cipher0, cipher1, …).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    InputError
        N or R not a positive integer, or sizes G1 refuses.
    """
    plt = _pyplot()
    names = list(relation_names) if relation_names is not None else [f"r{r}" for r in range(R)]
    task = task_for_seed(N, R, seed)
    built = build_g1(task, "binary", integer=True)
    model, D = built.model, built.codes.D
    layout = Layout.from_dict(model.meta["layout"])
    s, r = query if query is not None else (5 % N, R - 1)
    logits, trace = forward(model, np.array([[N + r, s]]), trace=True)
    hidden = trace.hidden[0][0, -1]
    E = np.asarray(model.entity_embedding)
    if model.layers[0].mlp is None:
        raise RuntimeError("G1's model has no MLP")
    W1 = np.asarray(model.layers[0].mlp.W1)
    d, m = W1.shape
    groups = [(f"B {names[q]}", layout["blocks"][q]) for q in range(R)]
    groups += [("gates", layout["gates"]), ("out", layout["out"])]

    def spans(index) -> tuple[int, int]:
        cols = np.arange(d)[index]
        return int(cols.min()), int(cols.max()) + 1

    with plt.rc_context(STYLE):
        fig = plt.figure(figsize=(11, 8.2))
        grid = fig.add_gridspec(2, 2, height_ratios=[1.1, 1], width_ratios=[1, 1], hspace=0.55, wspace=0.3)
        ax_e, ax_w = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        ax_h, ax_l = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
        from matplotlib.patches import Rectangle
        lim = max(1.0, float(np.abs(E).max()))
        ax_e.imshow(E, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        ax_e.add_patch(Rectangle((-0.5, s - 0.5), d, 1, fill=False, ec="k", lw=2))
        ax_e.set_title(f"E: subject embeddings (N = {N} rows, d = {d})")
        ax_e.set_ylabel(f"subject s (boxed: s = {s})")
        ax_e.yaxis.set_major_locator(_locator(min(N, 8)))
        top = ax_e.secondary_xaxis("top")
        ax_e.set_xticks([])
        centres, labels = [], []
        for label, index in groups:
            a, b = spans(index)
            ax_e.axvline(a - 0.5, color="k", lw=0.8)
            centres.append((a + b - 1) / 2)
            labels.append(label.replace("B ", "") if R > 4 else label)
        top.set_xticks(centres, _thin(labels, width_cols=[spans(i)[1] - spans(i)[0] for _, i in groups],
                                     total=d, inches=4.6, short=[f"B{q}" for q in range(R)] + ["g", "O"]))
        top.tick_params(length=0)
        ax_e.set_xlabel("block B_r holds the code a of π_r(s); red +, blue −")

        wl = max(1.0, float(np.abs(W1).max()))
        ax_w.imshow(W1, cmap="RdBu_r", vmin=-wl, vmax=wl, aspect="auto", interpolation="nearest")
        ax_w.set_title(f"W1 (d = {d} × m = {m}): unit (r, i, σ) reads σ·B_r[i] + gate r")
        ax_w.set_xlabel("hidden units, grouped by relation r")
        ax_w.set_ylabel("residual coordinate")
        ax_w.set_xticks([(q + 0.5) * 2 * D - 0.5 for q in range(R)],
                        _thin([names[q] for q in range(R)], width_cols=[2 * D] * R, total=m, inches=4.6,
                              short=[str(q) for q in range(R)]))
        ax_w.set_yticks([])
        for q in range(1, R):
            ax_w.axvline(q * 2 * D - 0.5, color="k", lw=0.8)
        for label, index in groups:
            ax_w.axhline(spans(index)[0] - 0.5, color="k", lw=0.5)
        ga, gb = spans(layout["gates"])
        ax_w.annotate("gate rows", xy=(m - 0.5, (ga + gb - 1) / 2), xytext=(6, 0), textcoords="offset points",
                      va="center", annotation_clip=False)

        mlp = model.layers[0].mlp
        pre = np.asarray(trace.residual[1][0, -1], dtype=float) @ mlp.W1 + mlp.b1  # what the ReLU is given
        units = np.arange(m)
        asked = (units // (2 * D)) == r
        ax_h.bar(units, pre, color="0.75", width=0.85, label="pre-activation W1·y + b1")
        ax_h.bar(units, hidden, color=np.where(asked, "tab:green", "0.35"), width=0.85)
        ax_h.axhline(0, color="k", lw=0.6)
        ax_h.set_title(f"query ⟨{names[r]}, {s}⟩: hidden units")
        ax_h.set_xlabel(f"hidden unit (green: relation {names[r]}'s, gate open)")
        ax_h.set_ylabel("value")
        ax_h.xaxis.set_major_locator(_locator(6))
        from matplotlib.patches import Patch
        ax_h.legend(handles=[Patch(color="0.75", label="pre-activation W1·y + b1"),
                             Patch(color="tab:green", label="after the ReLU")], loc="upper left",
                    fontsize=MIN_FONT_PT)

        row = np.asarray(logits[0], dtype=float)
        answer = int(task.table[r, s])
        ax_l.bar(np.arange(N), row, color=["tab:green" if j == answer else "tab:blue" for j in range(N)])
        top2 = np.sort(row)
        ax_l.set_title(f"logits λ·c1·⟨a_j, a_answer⟩: answer {answer}, margin {top2[-1] - top2[-2]:g}")
        ax_l.set_xlabel(f"attribute j (green: π_{names[r]}({s}) = {answer})")
        ax_l.set_ylabel("logit")
        ax_l.xaxis.set_major_locator(_locator(min(N, 8)))
        fig.suptitle(f"G1 (Theorem 4.1), binary codes at integer scale: N = {N}, R = {R}, D = {D}, "
                     f"seed {seed}")
    return fig


def _thin(labels: list[str], *, width_cols: list[int], total: int, inches: float,
          short: list[str] | None = None) -> list[str]:
    """Each label where its group is wide enough for it at about 0.09 in per character (10 pt), else its
    short form (``short``) if that fits, else nothing."""
    out = []
    for i, (label, cols) in enumerate(zip(labels, width_cols)):
        room = inches * cols / max(total, 1)
        fallback = short[i] if short is not None else ""
        out.append(label if 0.09 * len(label) <= room else fallback if 0.09 * len(fallback) <= room else "")
    return out


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
        The study summary (``study.summarize``): ``regimes`` (``label``, ``control``, ``params``,
        ``trained``, ``initial``) and ``constructions``, each quantity as ``{"mean", "sd"}``.
    thresholds : dict
        The declared thresholds (``study.THRESHOLDS``: ``superposition_r2``, ``follows``,
        ``selective_fraction``, ``gated_mass``, ``zero_shot``).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    plt = _pyplot()
    rows = _study_rows(doc)
    untrained = [e["initial"] for e in doc["regimes"] if e["params"]["init"] == "fan-in"]
    panels = (("superposition\nR²", "superposition_r2", thresholds["superposition_r2"]),
              ("interventions\nfollowed", "follows", thresholds["follows"]),
              ("selective\nunits", "selective_fraction", thresholds["selective_fraction"]),
              ("gated\nmass", "gated_mass", thresholds["gated_mass"]),
              ("closed-form\ntransfer", "closed_form_transfer", thresholds["zero_shot"]),
              ("functional\nzero-shot", "functional_zero_shot", thresholds["zero_shot"]))
    y = np.arange(len(rows))
    colours = [CATEGORIES[c][1] for _, c, _ in rows]
    height = 0.21 * len(rows) + 2.0
    with plt.rc_context(STYLE):
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
        axes[0].set_yticks(y, [name for name, _, _ in rows], fontsize=MIN_FONT_PT)
        axes[0].invert_yaxis()  # once: the axes share y
        from matplotlib.lines import Line2D
        present = list(dict.fromkeys(c for _, c, _ in rows))
        handles = [Line2D([], [], color=CATEGORIES[c][1], lw=6, label=CATEGORIES[c][0]) for c in present]
        handles += [Line2D([], [], color="tab:red", ls="--", label="declared threshold"),
                    Line2D([], [], color="k", ls=":", label="untrained weights (mean)")]
        fig.legend(handles=handles, loc="lower center", ncol=3, bbox_to_anchor=(0.5, 0.0))
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
    plt = _pyplot()
    merged: dict[tuple[float, float], list[tuple[str, str, Any]]] = {}
    for name, category, s in _study_rows(doc):
        f, r = s["forward_r2"], s["reverse_r2"]
        if f["mean"] is None or r["mean"] is None:
            continue
        merged.setdefault((round(r["mean"], 3), round(f["mean"], 3)), []).append((name, category, (f, r)))
    with plt.rc_context(STYLE):
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
        ax.set_xlabel("reverse fit R² (read-out row from its subjects)")
        ax.set_ylabel("forward fit R² (subject embedding from its attributes)")
        ax.set_title("Forward vs reverse (mirror-image) fit, held out")
        present = list(dict.fromkeys(c for _, c, _ in _study_rows(doc)))
        _category_legend(ax, present, bars=False, loc="lower right")
        # controls and constructions first: they are few and the point of the comparison
        order = sorted(range(len(points)), key=lambda i: 0 if any(
            c != "trained" for _, c, _ in list(merged.values())[i]) else 1)
        left_out = _place_labels(ax, [points[i] for i in order], [labels[i] for i in order])
        if left_out:
            ax.text(0.02, 0.98, f"{len(left_out)} crowded regimes unlabelled (named in mechanism.png)",
                    transform=ax.transAxes, va="top", fontsize=MIN_FONT_PT, color="0.3")
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
    _pyplot()
    dpi, formats = _check_output(dpi, formats)
    os.makedirs(out_dir, exist_ok=True)
    written: list[str] = []
    builders: list[tuple[str, Callable[[], Any]]] = [
        ("thresholds", lambda: thresholds_figure(records)),
        ("tradeoff", lambda: tradeoff_figure(N, R, k_max)),
        ("margins", lambda: margins_figure(seed)),
        ("transfer", lambda: transfer_figure(records)),
        ("construction", lambda: construction_figure(8, 2, seed, relation_names=relation_names(2))),
    ]
    for name, build in builders:
        fig = build()
        if fig is None:
            continue
        written += save_figure(fig, out_dir, name, dpi=dpi, formats=formats)
        if log is not None:
            log(f"figure {name}")
    return written


def d_axis_figure(axis: dict, thresholds: dict, fields: tuple):
    """The mechanism study across widths: one panel per criterion quantity against d/d_G1 (log2 axis), one
    line per (N, family) of trained models (mean ± sd over seeds), the untrained weights of the base runs at
    N = 1024 (grey, dotted), G1 native and embedded wider (black stars), and the declared threshold (red,
    dashed).

    Parameters
    ----------
    axis : dict
        ``study.summarize(...)["d_axis"]``.
    thresholds : dict
        ``study.THRESHOLDS``.
    fields : tuple
        ``(title, summary key, threshold key)`` per panel (``study.D_AXIS_FIELDS``).

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
    plt = _pyplot()
    if not axis or not axis.get("series"):
        raise ValueError("the summary has no d axis to draw")
    columns = 3
    rows = math.ceil(len(fields) / columns)
    markers = "osD^v<>ph"
    with plt.rc_context(STYLE):
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
        fig.legend(handles, labels, loc="lower center", ncol=4, frameon=False, fontsize=9)
        fig.tight_layout(rect=(0, 0.12, 1, 1), h_pad=0.6, w_pad=0.8)
    return fig
