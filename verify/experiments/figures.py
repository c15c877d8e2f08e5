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
wide, and no two labels overlapping (:func:`text_overlaps` measures the drawn text's bounding boxes; the tests
run it on every figure). Labels that would collide are left out by construction (fewer ticks, legends,
greedy label placement, labels turned 90°), never shrunk. ``figure_style("talk")`` draws the same figures with
large type (tick labels 14 pt). Saved SVG keeps its text as ``<text>`` and PDF embeds its fonts (TrueType), so
labels stay editable in slide software (:data:`EDITABLE`).
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from georecall.constructions.forward import forward
from georecall.constructions.layout import Layout
from georecall.constructions.multi_hop import build_c1, chains, multi_hop_queries
from georecall.constructions.single_hop import build_g1, single_hop_queries
from georecall.errors import InputError
from georecall.io import atomic_write, validate_output_path
from georecall.theory import seeds
from georecall.theory.tasks import random_task, task_for_seed
from georecall.verify.checking.check import check_decoding
from georecall.verify.checking.run import check_single_hop
from georecall.verify.experiments.demo import relation_names, train_like_demo

__all__ = [
    "DEFAULT_DPI",
    "DEFAULT_FORMATS",
    "FORMATS",
    "STYLES",
    "WEIGHTS",
    "MIN_FONT_PT",
    "PLOT_HINT",
    "align_embeddings",
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

PLOT_HINT = "drawing figures needs matplotlib: pip install 'georecall[plot]' (or pip install matplotlib)"
FORMATS = ("png", "svg", "pdf")
DEFAULT_FORMATS = ("png", "svg")
DEFAULT_DPI = 150
MIN_FONT_PT = 9.0  # the smallest text on any figure (tick labels); titles and axis labels are larger

# Text stays editable in slide software: SVG keeps text as <text> elements (not outlined paths), PDF embeds
# TrueType fonts (Type 42). Applied when a figure is saved (matplotlib reads these at savefig time).
EDITABLE = {"svg.fonttype": "none", "pdf.fonttype": 42, "ps.fonttype": 42}

# One look for every figure: sizes in points, for a figure 5-11 inches wide shown on a slide
STYLE = {"font.size": 11, "axes.titlesize": 12, "axes.labelsize": 11, "xtick.labelsize": 10,
         "ytick.labelsize": 10, "legend.fontsize": 10, "figure.titlesize": 13, **EDITABLE}
# --style talk: the same figures with large type, for a lecture hall (tick labels 14 pt)
TALK = {"font.size": 16, "axes.titlesize": 16, "axes.labelsize": 16, "xtick.labelsize": 14,
        "ytick.labelsize": 14, "legend.fontsize": 14, "figure.titlesize": 17, **EDITABLE}
STYLES = {"default": STYLE, "talk": TALK}
_ACTIVE_STYLE: contextvars.ContextVar[str] = contextvars.ContextVar("figure_style", default="default")


@contextlib.contextmanager
def figure_style(name: str):
    """Draw the figures made inside the block in the style ``name`` (a key of :data:`STYLES`).

    Parameters
    ----------
    name : {"default", "talk"}
        ``default``: tick labels 10 pt, for slides and papers; ``talk``: tick labels 14 pt, titles 16 pt.

    Raises
    ------
    ValueError
        An unknown style name.
    """
    if name not in STYLES:
        raise ValueError(f"style must be one of {sorted(STYLES)}, got {name!r}")
    token = _ACTIVE_STYLE.set(name)
    try:
        yield
    finally:
        _ACTIVE_STYLE.reset(token)


def _rc() -> dict:
    """The rc parameters of the active style (:func:`figure_style`)."""
    return STYLES[_ACTIVE_STYLE.get()]


def _small() -> float:
    """The smallest text of the active style: its tick-label size (9 pt in the default style)."""
    return MIN_FONT_PT if _ACTIVE_STYLE.get() == "default" else float(_rc()["xtick.labelsize"])


def minimum_font() -> float:
    """The smallest legible text (points) of the active style: :data:`MIN_FONT_PT` by default, 14 in talk.

    Returns
    -------
    float
    """
    return _small()

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
                # a figure laid out by its layout engine fits its canvas already; the others are cropped
                tight = None if fig.get_layout_engine() is not None else "tight"
                with _pyplot().rc_context(EDITABLE):  # text as text in SVG, embedded fonts in PDF
                    fig.savefig(handle, format=fmt, dpi=dpi, bbox_inches=tight)

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
                  fontsize: float | None = None) -> list[str]:
    """Annotate each point with its label where the label touches no other label, point, axes edge or tick
    label (greedy: eight directions at growing distance, a thin leader line when away from the point).
    Returns the labels that found no free place (left out, never drawn on top of each other)."""
    fontsize = _small() if fontsize is None else fontsize
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
    with plt.rc_context(_rc()):
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
    with plt.rc_context(_rc()):
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
    with plt.rc_context(_rc()):
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
    with plt.rc_context(_rc()):
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
        ax.legend(loc="upper center", ncol=3, fontsize=_small())
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
    s, r = query if query is not None else (5 % N, R - 1)
    logits, trace = forward(model, np.array([[N + r, s]]), trace=True)
    hidden = trace.hidden[0][0, -1]
    E = np.asarray(model.entity_embedding)
    if model.layers[0].mlp is None:
        raise RuntimeError("G1's model has no MLP")
    W1 = np.asarray(model.layers[0].mlp.W1)
    d, m = W1.shape
    groups = g1_groups(model, names)
    coords, unit_groups = groups["coordinates"], groups["units"]

    with plt.rc_context(_rc()):
        fig = plt.figure(figsize=(11, 8.2), layout="constrained")
        grid = fig.add_gridspec(2, 2, height_ratios=[1.1, 1], width_ratios=[1, 1])
        ax_e, ax_w = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        ax_h, ax_l = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
        from matplotlib.patches import Rectangle
        lim = max(1.0, float(np.abs(E).max()))
        image = ax_e.imshow(E, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        bar = fig.colorbar(image, ax=ax_e, fraction=0.05, pad=0.02)
        bar.set_label("entry")
        bar.ax.yaxis.set_major_locator(_locator(4, integer=False))
        ax_e.add_patch(Rectangle((-0.5, s - 0.5), d, 1, fill=False, ec="k", lw=2))
        ax_e.set_title(f"E: subject embeddings (N = {N} rows, d = {d})")
        ax_e.set_ylabel(f"subject s (boxed: s = {s})")
        ax_e.yaxis.set_major_locator(_locator(min(N, 8)))
        _group_ticks(ax_e, "x", coords, top=True)
        ax_e.set_xlabel("block B_r holds the code a of π_r(s)")

        wl = max(1.0, float(np.abs(W1).max()))
        image = ax_w.imshow(W1, cmap="RdBu_r", vmin=-wl, vmax=wl, aspect="auto", interpolation="nearest")
        bar = fig.colorbar(image, ax=ax_w, fraction=0.05, pad=0.02)
        bar.set_label("weight")
        bar.ax.yaxis.set_major_locator(_locator(4, integer=False))
        ax_w.set_title(f"W1 (d = {d} × m = {m}): unit (r, i, σ) reads σ·B_r[i] + g_r")
        ax_w.set_xlabel("hidden units (r, i, σ), grouped by relation r")
        ax_w.set_ylabel("residual coordinate")
        ax_w.set_xticks([])
        _group_ticks(ax_w, "x", [(label.replace("units of ", ""), a, b) for label, a, b in unit_groups])
        _group_ticks(ax_w, "y", coords)

        mlp = model.layers[0].mlp
        pre = np.asarray(trace.residual[1][0, -1], dtype=float) @ mlp.W1 + mlp.b1  # what the ReLU is given
        units = np.arange(m)
        asked = (units // (2 * D)) == r
        ax_h.bar(units, pre, color="0.75", width=0.85, label="pre-activation W1·y + b1")
        ax_h.bar(units, hidden, color=np.where(asked, "tab:green", "0.35"), width=0.85)
        ax_h.axhline(0, color="k", lw=0.6)
        low = min(float(np.min(pre)), 0.0)
        high = max(float(np.max(hidden)), 1.0)
        ax_h.set_ylim(low * 1.05 - 0.5, high + 0.9 * (high - low))  # room for the legend above the bars
        ax_h.set_title(f"query ⟨{names[r]}, {s}⟩: hidden units")
        ax_h.set_xlabel(f"hidden unit (green: relation {names[r]}'s, gate open)")
        ax_h.set_ylabel("value")
        ax_h.xaxis.set_major_locator(_locator(6))
        from matplotlib.patches import Patch
        ax_h.legend(handles=[Patch(color="0.75", label="pre-activation W1·y + b1"),
                             Patch(color="tab:green", label="after the ReLU")], loc="upper left",
                    fontsize=_small())

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
        _finish(fig)
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
    with plt.rc_context(_rc()):
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
        axes[0].set_yticks(y, [name for name, _, _ in rows], fontsize=_small())
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
    with plt.rc_context(_rc()):
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
                    transform=ax.transAxes, va="top", fontsize=_small(), color="0.3")
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
    with plt.rc_context(_rc()):
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


# ------------------------------------------------------------------- every matrix, labelled (issue 31)


def _tick_boxes_overlap(labels, renderer) -> bool:
    boxes = [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text().strip()]
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def _group_ticks(ax, axis: str, groups: Sequence[tuple[str, int, int]], *, top: bool = False,
                 separators: bool = True) -> None:
    """Label the groups ``(label, start, stop)`` of one axis of a heatmap at their centres, with a line
    between groups. Labels are drawn horizontally where they fit, turned 90° where they do not, and thinned
    (every second, third, … kept) where even that collides; never shrunk."""
    centres = [(a + b - 1) / 2 for _, a, b in groups]
    labels = [label for label, _, _ in groups]
    target = ax
    if axis == "x":
        target.set_xticks(centres, labels)
        target.tick_params(axis="x", length=0)
        if top:  # on the axes' own top axis, so that the title is placed above the labels
            target.tick_params(axis="x", top=True, labeltop=True, bottom=False, labelbottom=False)
    else:
        target.set_yticks(centres, labels)
        target.tick_params(axis="y", length=0)
    if separators:
        for _, a, _ in groups[1:]:
            (ax.axvline if axis == "x" else ax.axhline)(a - 0.5, color="k", lw=0.8)
    ticks = target.get_xticklabels if axis == "x" else target.get_yticklabels
    _fit_labels(ax.figure, ticks, rotate=axis == "x")  # made disjoint by _finish, in the final layout


def _fit_labels(fig, ticks: Callable[[], list], *, rotate: bool) -> None:
    """Register one axis's tick labels (``ticks()`` returns them) to be made disjoint by :func:`_finish`, in
    the figure's final layout (a layout engine moves labels as panels are added, so they are measured once
    everything is drawn)."""
    fits = getattr(fig, "_label_fits", None)
    if fits is None:
        fits = []
        fig._label_fits = fits
    if not any(entry[0] is ticks for entry in fits):
        fits.append((ticks, rotate))


def _step_needed(ticks, renderer) -> int:
    """Keep every k-th label: the smallest k at which the largest label fits the smallest distance between
    neighbouring labels' centres, k of them apart (measured; the loop in :func:`_finish` confirms it)."""
    boxes = [t.get_window_extent(renderer) for t in ticks if t.get_text().strip()]
    if len(boxes) < 2:
        return 1
    along_x = abs(boxes[1].x0 - boxes[0].x0) >= abs(boxes[1].y0 - boxes[0].y0)
    centres = np.array([(b.x0 + b.x1) / 2 if along_x else (b.y0 + b.y1) / 2 for b in boxes])
    extent = max(b.width if along_x else b.height for b in boxes) + 1.0
    gap = float(np.min(np.abs(np.diff(centres)))) if len(centres) > 1 else extent
    return max(1, math.ceil(extent / gap)) if gap > 0 else len(boxes)


def _finish(fig):
    """Make every registered axis's labels disjoint (:func:`_fit_labels`): where an axis's labels collide,
    turn them 90° (x axes) or, when turned already, keep every second, third, … of them, and measure again,
    until none collide. Returns ``fig``.

    The data artists inside each axes (bars, lines, patches, cell texts) are left out of the layout engine's
    measurements: they lie within their axes, and measuring hundreds of bars made every layout pass slow."""
    for ax in fig.axes:
        for artist in [*ax.patches, *ax.lines, *ax.texts, *ax.collections]:
            artist.set_in_layout(False)
    fits = list(getattr(fig, "_label_fits", []))
    steps = [1] * len(fits)
    for _ in range(40):
        fig.draw_without_rendering()
        renderer = fig.canvas.get_renderer()
        crowded = [k for k, (ticks, _) in enumerate(fits) if _tick_boxes_overlap(ticks(), renderer)]
        if not crowded:
            break
        for k in crowded:
            labels, rotate = fits[k]
            ticks = labels()
            if rotate and ticks and ticks[0].get_rotation() == 0:
                for t in ticks:
                    t.set_rotation(90)
                continue
            steps[k] = max(steps[k] + 1, _step_needed(ticks, renderer))
            for i, t in enumerate(ticks):
                t.set_visible(i % steps[k] == 0)
    return fig


MAX_CELL_NUMBERS = 400  # entries written in their cells up to this many (beyond, the colours carry them)


def _cell_numbers(ax, matrix: np.ndarray, fmt: Callable[[float], str]) -> bool:
    """Write each entry in its cell when the matrix has at most :data:`MAX_CELL_NUMBERS` entries and every
    cell is wide and tall enough for its text at the style's smallest size; returns whether
    they were written."""
    fig = ax.figure  # drawn in its final layout by _finish
    rows, cols = matrix.shape
    if rows * cols > MAX_CELL_NUMBERS:
        return False
    size = _small()
    cell_w = ax.bbox.width / cols * 72 / fig.dpi  # points
    cell_h = ax.bbox.height / rows * 72 / fig.dpi
    widest = max(len(fmt(v)) for v in matrix.ravel())
    if cell_w < 0.62 * size * widest + 2 or cell_h < 1.25 * size:
        return False
    lim = float(np.abs(matrix).max()) or 1.0
    for (i, j), v in np.ndenumerate(matrix):
        ax.text(j, i, fmt(v), ha="center", va="center", fontsize=size,
                color="white" if abs(v) > 0.6 * lim else "black")
    return True


def _number_format(matrix: np.ndarray) -> Callable[[float], str]:
    if np.all(np.asarray(matrix) == np.round(matrix)):
        return lambda v: f"{int(round(v)):d}"
    return lambda v: f"{v:.1f}"


def matrix_figure(matrix, *, title: str, row_title: str, column_title: str,
                  rows: Sequence[tuple[str, int, int]] | None = None,
                  columns: Sequence[tuple[str, int, int]] | None = None,
                  row_ticks: Sequence[str] | None = None, column_ticks: Sequence[str] | None = None,
                  boxed_row: int | None = None, colour_label: str = "value", numbers: bool = True,
                  size: tuple[float, float] | None = None, signed: bool = True):
    """One matrix as a heatmap (red positive, blue negative, white 0) with a colour bar, its axes named and
    its groups of rows and columns labelled; the entries written in the cells when they fit.

    Parameters
    ----------
    matrix : array_like
        ``(rows, columns)``.
    title, row_title, column_title : str
        The figure's title and the two axis titles.
    rows, columns : sequence of (label, start, stop), optional
        Groups of rows / columns (labelled at their centres, separated by lines); columns' groups go on top.
    row_ticks, column_ticks : sequence of str, optional
        One label per row / column (used where there are no groups on that axis; thinned when crowded).
    boxed_row : int, optional
        A row outlined in black (the query's subject).
    colour_label : str
        The colour bar's title.
    numbers : bool
        Write the entries in the cells where they fit.
    size : (float, float), optional
        Figure size in inches (default: from the shape, at most 11 × 8.5).
    signed : bool
        Signed entries on a diverging scale symmetric about 0 (default); otherwise non-negative entries
        (weights of an attention pattern) from 0 (white) to their maximum.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    """
    plt = _pyplot()
    M = np.asarray(matrix, dtype=float)
    n_rows, n_cols = M.shape
    if size is None:
        size = (min(11.0, max(6.0, 2.8 + 0.42 * n_cols)), min(8.5, max(3.6, 1.9 + 0.36 * n_rows)))
    lim = max(float(np.abs(M).max()), 1e-12)
    with plt.rc_context(_rc()):
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        image = ax.imshow(M, cmap="RdBu_r" if signed else "Greens", vmin=-lim if signed else 0.0, vmax=lim,
                          aspect="auto", interpolation="nearest")
        bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
        bar.set_label(colour_label)
        bar.ax.yaxis.set_major_locator(_locator(4, integer=False))
        ax.set_title(title)
        ax.set_ylabel(row_title)
        ax.set_xlabel(column_title)
        if boxed_row is not None:
            from matplotlib.patches import Rectangle
            ax.add_patch(Rectangle((-0.5, boxed_row - 0.5), n_cols, 1, fill=False, ec="k", lw=2.5))
        if columns:
            _group_ticks(ax, "x", columns, top=True)
            if column_ticks is not None:  # one label per column below, the groups on top
                below = ax.secondary_xaxis("bottom")
                below.set_xticks(range(n_cols), list(column_ticks))
                _fit_labels(fig, below.get_xticklabels, rotate=True)
                below.set_xlabel(column_title)
                ax.set_xlabel("")
        elif column_ticks is not None:
            ax.set_xticks(range(n_cols), list(column_ticks))
            _fit_labels(fig, ax.get_xticklabels, rotate=True)
        else:
            ax.set_xticks([])
        if rows:
            _group_ticks(ax, "y", rows)
        elif row_ticks is not None:
            ax.set_yticks(range(n_rows), list(row_ticks))
            _fit_labels(fig, ax.get_yticklabels, rotate=False)
        else:
            ax.set_yticks([])
        _finish(fig)
        if numbers:
            _cell_numbers(ax, M, _number_format(M))
    return fig


def g1_groups(model, names: Sequence[str], *, gates_apart: bool | None = None
              ) -> dict[str, list[tuple[str, int, int]]]:
    """The named groups of G1's residual coordinates and hidden units, in the words the demo prints.

    Parameters
    ----------
    model : Model
        A G1 model (its ``meta["layout"]``: blocks, gates, out).
    names : sequence of str
        The relations' names (``cipher0``, …).
    gates_apart : bool, optional
        One group per gate coordinate (``g_cipher0``, …) or one group ``gates g_r`` for all of them
        (default: apart for R <= 4).

    Returns
    -------
    dict
        ``coordinates``: ``[("B_cipher0", start, stop), …, ("g_cipher0", …), …, ("O", …)]`` in residual
        order; ``units``: ``[("units of cipher0", start, stop), …]`` (unit (r, i, σ) is ``r·2D + 2i + σ``).
    """
    layout = Layout.from_dict(model.meta["layout"])
    blocks, gates, out = np.asarray(layout["blocks"]), np.asarray(layout["gates"]), np.asarray(layout["out"])
    R, D = blocks.shape
    coordinates = [(f"B_{names[r]}", int(blocks[r].min()), int(blocks[r].max()) + 1) for r in range(R)]
    if gates_apart if gates_apart is not None else R <= 4:
        coordinates += [(f"g_{names[r]}", int(gates[r]), int(gates[r]) + 1) for r in range(R)]
    else:  # contiguous (the layout allocates them together)
        coordinates += [("gates g_r", int(gates.min()), int(gates.max()) + 1)]
    coordinates += [("O", int(out.min()), int(out.max()) + 1)]
    coordinates.sort(key=lambda g: g[1])
    units = [(f"units of {names[r]}", 2 * D * r, 2 * D * (r + 1)) for r in range(R)]
    return {"coordinates": coordinates, "units": units}


WEIGHTS = ("E", "Q", "W1", "W2", "U", "attention")


def weights_figures(N: int = 8, R: int = 2, seed: int = 0, *, query: tuple[int, int] | None = None,
                    relation_names: Sequence[str] | None = None,
                    which: Sequence[str] = WEIGHTS) -> dict[str, Any]:
    """G1's matrices at integer scale, one figure each: E, Q, W1, W2, U and the query's attention pattern,
    every axis named in the demo's words (subjects, relations ``cipher0`` …, blocks ``B_cipher0``, gates
    ``g_cipher0``, the output block ``O``, ``units of cipher0``), each with a colour bar.

    Parameters
    ----------
    N, R : int
        Entities and relations (the task is ``task_for_seed(N, R, seed)``).
    seed : int
        Run seed.
    query : (s, r), optional
        The query whose subject is boxed in E and whose attention is drawn (default: 5 mod N, the last
        relation, as the demo).
    relation_names : sequence of str, optional
        Names of the relations (default ``cipher0`` …, as the demo).
    which : sequence of str
        A subset of :data:`WEIGHTS`.

    Returns
    -------
    dict
        ``{"weights_E": Figure, …, "attention": Figure}`` in :data:`WEIGHTS` order.

    Raises
    ------
    ImportError
        Without matplotlib.
    ValueError
        An unknown matrix name.
    InputError
        Sizes G1 refuses.
    """
    unknown = set(which) - set(WEIGHTS)
    if unknown:
        raise ValueError(f"which must be a subset of {WEIGHTS}, got {sorted(unknown)}")
    names = list(relation_names) if relation_names is not None else [f"cipher{r}" for r in range(R)]
    task = task_for_seed(N, R, seed)
    built = build_g1(task, "binary", integer=True)
    model = built.model
    groups = g1_groups(model, names)
    coords, units = groups["coordinates"], groups["units"]
    s, r = query if query is not None else (5 % N, R - 1)
    mlp = model.layers[0].mlp
    if mlp is None:
        raise RuntimeError("G1's model has no MLP")
    G, c2 = built.constants["gate"], built.constants["c2"]
    subjects = [str(i) for i in range(N)]
    D = built.codes.D
    unit_ticks = [f"{i}{sign}" for _ in range(R) for i in range(D) for sign in ("+", "−")]
    figures: dict[str, Any] = {}
    for name in which:
        if name == "E":
            figures["weights_E"] = matrix_figure(
                model.entity_embedding,
                title=f"E: block B_r of e_s holds the code of π_r(s) (boxed: s = {s})",
                row_title="subject s", column_title="residual coordinate", columns=coords,
                row_ticks=subjects, boxed_row=s, colour_label="entry")
        elif name == "Q":
            figures["weights_Q"] = matrix_figure(
                model.relation_embedding,
                title=f"Q: relation r's embedding is G·1 on its gate g_r (G = {G:g})",
                row_title="relation r", column_title="residual coordinate", columns=coords, row_ticks=names,
                colour_label="entry", size=(min(11.0, max(6.0, 2.8 + 0.42 * model.d)), 2.4 + 0.4 * R))
        elif name == "W1":
            figures["weights_W1"] = matrix_figure(
                mlp.W1, title=f"W1: unit (r, i, σ) reads σ·B_r[i] and g_r; bias b1 = −c2·G = {-c2 * G:g}",
                row_title="residual coordinate", column_title="hidden unit (i, σ) of each relation r",
                rows=coords, columns=units, column_ticks=unit_ticks, colour_label="weight")
        elif name == "W2":
            figures["weights_W2"] = matrix_figure(
                mlp.W2, title="W2: unit (r, i, σ) writes σ into O[i]", row_title="hidden unit (r, i, σ)",
                column_title="residual coordinate", rows=units, columns=coords, colour_label="weight")
        elif name == "U":
            figures["weights_U"] = matrix_figure(
                model.full_unembedding(), title=f"U: row j is λ·a_j on the output block O "
                f"(λ = {built.constants['lambda']:g})", row_title="attribute j",
                column_title="residual coordinate", columns=coords, row_ticks=subjects, colour_label="entry")
        elif name == "attention":
            _, trace = forward(model, np.array([[N + r, s]]), trace=True)
            weights = trace.attention_weights[0]
            att = model.layers[0].attention
            if weights is None:  # uniform attention: a(t, u) = 1/(t + 1) for u <= t
                T = 2
                pattern = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
                kind = "uniform: a(t, u) = 1/(t + 1) for u <= t"
            else:
                pattern = np.asarray(weights[0, 0], dtype=float)
                kind = att.kind if att is not None else ""
            words = [names[r], str(s)]
            figures["attention"] = matrix_figure(
                pattern, title=f"attention on ⟨{names[r]}, {s}⟩ ({kind})",
                row_title="query position t", column_title="key position u", row_ticks=words,
                column_ticks=words, colour_label="weight a(t, u)", size=(6.5, 4.2), signed=False)
    return figures


# ---------------------------------------------------------------- trained beside constructed (issue 31)


def relation_means(model, task) -> np.ndarray:
    """``M[r, u]``: hidden unit u's mean activation over the N queries of relation r, at the read-out
    position of THE forward pass (the matrix :func:`.probes.unit_selectivity` summarizes).

    Parameters
    ----------
    model : Model
        A one-MLP model of the task's shape.
    task : Task
        Its task (every one of the N·R queries is run).

    Returns
    -------
    numpy.ndarray
        ``(R, m)`` float64.

    Raises
    ------
    InputError
        A model without an MLP in its last layer.
    """
    if model.layers[-1].mlp is None:
        raise InputError("the model's last layer has no MLP")
    tokens, _ = single_hop_queries(task)
    _, trace = forward(model, tokens, trace=True)
    hidden = np.asarray(trace.hidden[-1][:, -1], dtype=np.float64)  # (N·R, m)
    relation = tokens[:, 0] - model.n_entities
    onehot = (relation[None, :] == np.arange(task.R)[:, None]).astype(np.float64)  # (R, N·R)
    return onehot @ hidden / task.N


def align_embeddings(source: np.ndarray, target: np.ndarray, *, fit: np.ndarray | None = None) -> dict:
    """The best linear alignment of ``source`` onto ``target``: ``A = argmin ||source[fit]·A + b −
    target[fit]||²`` (ordinary least squares with an intercept, no regularization).

    Parameters
    ----------
    source : numpy.ndarray
        ``(N, p)`` (a trained model's E).
    target : numpy.ndarray
        ``(N, q)`` (G1's E).
    fit : numpy.ndarray, optional
        Rows the map is fitted on (default: all); the others are held out.

    Returns
    -------
    dict
        ``aligned`` (N × q, every row mapped), ``r2_fit`` and ``r2_held_out`` (None without held-out rows),
        ``p`` (features: p + 1 with the intercept), ``n`` (fit rows), ``underdetermined`` (p + 1 >= n: an
        exact fit says nothing).
    """
    source = np.asarray(source, dtype=np.float64)
    target = np.asarray(target, dtype=np.float64)
    N = source.shape[0]
    fit = np.arange(N) if fit is None else np.asarray(fit)
    held = np.setdiff1d(np.arange(N), fit)
    X = np.hstack([source, np.ones((N, 1))])
    A, *_ = np.linalg.lstsq(X[fit], target[fit], rcond=None)
    aligned = X @ A

    def r2(rows: np.ndarray) -> float:
        total = float(((target[rows] - target[rows].mean(axis=0)) ** 2).sum())
        return 1.0 - float(((target[rows] - aligned[rows]) ** 2).sum()) / total if total > 0 else float("nan")

    return {"aligned": aligned, "r2_fit": r2(fit), "r2_held_out": r2(held) if held.size else None,
            "p": X.shape[1], "n": int(fit.size), "underdetermined": X.shape[1] >= fit.size}


def _selectivity_panel(ax, fig, means: np.ndarray, names: Sequence[str], title: str) -> None:
    """Each unit's share of its mean activation per relation (columns sum to 1; silent units grey), units
    ordered by preferred relation, then by selectivity."""
    mass = means.sum(axis=0)
    active = mass > 0
    share = np.full(means.shape, np.nan)
    share[:, active] = means[:, active] / mass[active]
    preferred = np.where(active, means.argmax(axis=0), means.shape[0])
    peak = np.where(active, np.nan_to_num(share).max(axis=0), 0.0)
    order = np.lexsort((-peak, preferred))
    import matplotlib
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="0.85")
    image = ax.imshow(share[:, order], cmap=cmap, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
    bar.set_label("share of activation")
    bar.ax.yaxis.set_major_locator(_locator(2, integer=False))
    ax.set_yticks(range(len(names)), list(names))
    ax.set_ylabel("asked relation")
    ax.set_xlabel(f"hidden unit, by preferred relation\n({int(active.sum())} of {means.shape[1]} ever fire; "
                  "grey: silent)")
    ax.xaxis.set_major_locator(_locator(6))
    ax.set_title(title)


def trained_beside_g1_figure(g1_model, trained_model, task, *, relation_names: Sequence[str] | None = None,
                             fit: np.ndarray | None = None):
    """A trained model beside G1 on the same task: G1's E, the trained E after the best linear alignment onto
    G1's E (:func:`align_embeddings`), and the two MLPs' relation-selectivity matrices side by side.

    Parameters
    ----------
    g1_model, trained_model : Model
        G1 built on ``task`` and a model trained on it (one MLP each).
    task : Task
        The task.
    relation_names : sequence of str, optional
        Names of the relations (default ``cipher0`` …).
    fit : numpy.ndarray, optional
        Subjects the alignment is fitted on (default: all; the others are scored held out and named so).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ImportError
        Without matplotlib.
    InputError
        A model without an MLP.
    """
    plt = _pyplot()
    names = list(relation_names) if relation_names is not None else [f"cipher{r}" for r in range(task.R)]
    E_g1 = np.asarray(g1_model.entity_embedding, dtype=np.float64)
    alignment = align_embeddings(np.asarray(trained_model.entity_embedding)[: task.N], E_g1, fit=fit)
    groups = g1_groups(g1_model, names)["coordinates"]
    lim = float(np.abs(E_g1).max()) or 1.0
    with plt.rc_context(_rc()):
        fig, axes = plt.subplots(2, 2, figsize=(11, 8.2), layout="constrained")
        for ax, matrix, title in ((axes[0, 0], E_g1, f"G1's E (N = {task.N}, d = {E_g1.shape[1]})"),
                                  (axes[0, 1], alignment["aligned"], "trained E, aligned onto G1's")):
            image = ax.imshow(matrix, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
                              interpolation="nearest")
            bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
            bar.set_label("entry")
            bar.ax.yaxis.set_major_locator(_locator(2, integer=False))
            ax.set_title(title)
            ax.set_ylabel("subject s")
            ax.yaxis.set_major_locator(_locator(8))
            _group_ticks(ax, "x", groups, top=True)
        held = alignment["r2_held_out"]
        fit_text = (f"least squares, p = {alignment['p']}, n = {alignment['n']}\nR² {alignment['r2_fit']:.2f}"
                    + (f", held out {held:.2f}" if held is not None else " in sample")).replace("-", "−")
        if alignment["underdetermined"]:
            fit_text += "\n(p >= n: a fit this free is exact on any data)"
        axes[0, 1].set_xlabel(fit_text)
        axes[0, 0].set_xlabel("block B_r holds\nthe code of π_r(s)")
        _selectivity_panel(axes[1, 0], fig, relation_means(g1_model, task), names, "G1: which relation "
                           "drives each unit")
        _selectivity_panel(axes[1, 1], fig, relation_means(trained_model, task), names,
                           "trained: which relation drives each unit")
        fig.suptitle("constructed (left) beside trained (right), the same facts")
        _finish(fig)
    return fig
