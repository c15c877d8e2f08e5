"""What every figure shares (optional ``plot`` extra: matplotlib): the style and its talk variant, matplotlib
imported on demand, saving at ``dpi`` in each of ``formats`` (written atomically), and the legibility
measures the tests run on every figure (:func:`text_overlaps`, :func:`clipped_texts`,
:func:`small_texts`) with the greedy label placement that avoids collisions (``place_labels``).

Its underscore names are the figure modules' own (:mod:`.figures`, :mod:`.construction_figures`,
:mod:`.study_figures`, :mod:`.threshold_figure`), not a public interface."""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Iterable, Sequence

import numpy as np

from georecall.io import atomic_write, validate_output_path

__all__ = [
    "CATEGORIES",
    "DEFAULT_DPI",
    "DEFAULT_FORMATS",
    "EDITABLE",
    "FORMATS",
    "MIN_FONT_PT",
    "PLOT_HINT",
    "STYLE",
    "STYLES",
    "TALK",
    "check_figure_output",
    "clipped_texts",
    "figure_style",
    "have_matplotlib",
    "import_pyplot",
    "minimum_font",
    "place_labels",
    "rc_params",
    "save_figure",
    "small_texts",
    "text_overlaps",
    "tick_locator",
]


PLOT_HINT = ("drawing figures needs matplotlib: pip install '.[plot]' in georecall's clone (or pip install "
             "matplotlib)")
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


def rc_params() -> dict:
    """The rc parameters of the active style (:func:`figure_style`), for ``plt.rc_context``."""
    return STYLES[_ACTIVE_STYLE.get()]


def minimum_font() -> float:
    """The smallest legible text (points) of the active style, its tick-label size: :data:`MIN_FONT_PT` by
    default, 14 in talk.

    Returns
    -------
    float
    """
    return MIN_FONT_PT if _ACTIVE_STYLE.get() == "default" else float(rc_params()["xtick.labelsize"])

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


def import_pyplot():
    """``matplotlib.pyplot`` on the Agg backend, imported on demand (the ``plot`` extra).

    Raises
    ------
    ImportError
        Without matplotlib (the message says how to install it).
    """
    try:
        import matplotlib
    except ImportError:
        raise ImportError(PLOT_HINT) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def check_figure_output(dpi: int, formats: Iterable[str]) -> tuple[int, tuple[str, ...]]:
    """The resolution and the formats (deduplicated) of figure files, checked before any drawing.

    Parameters
    ----------
    dpi : int
        Dots per inch, 30..1200.
    formats : iterable of str
        A non-empty subset of :data:`FORMATS`.

    Raises
    ------
    ValueError
        Either is out of range.
    """
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
    dpi, formats = check_figure_output(dpi, formats)
    paths = []
    try:
        for ext in formats:
            target = validate_output_path(os.path.join(out_dir, f"{name}.{ext}"), what="figure")

            def draw(handle, fmt: str = ext) -> None:
                # a figure laid out by its layout engine fits its canvas already; the others are cropped
                tight = None if fig.get_layout_engine() is not None else "tight"
                with import_pyplot().rc_context(EDITABLE):  # text as text in SVG, embedded fonts in PDF
                    fig.savefig(handle, format=fmt, dpi=dpi, bbox_inches=tight)

            atomic_write(target, draw)
            paths.append(target)
    finally:
        import_pyplot().close(fig)
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


def _clipped_away(text, box) -> bool:
    """Whether a text is not drawn at all: clipped (``clip_on`` with a clip box or path) and wholly outside
    its clip region. Titles, axis labels and tick labels have ``clip_on`` but no clip region: they are drawn
    wherever they fall, over the next panel's title or off the canvas."""
    if not text.get_clip_on():
        return False
    clip = text.get_clip_box()
    if clip is None and text.get_clip_path() is not None:
        clip = text.get_clip_path().get_fully_transformed_path().get_extents()
    return clip is not None and not clip.overlaps(box)


def _drawn_boxes(fig) -> list:
    """``(text, box)`` of every text drawn on the figure, measured after a draw (the layout engine done)."""
    renderer = fig.canvas.get_renderer()
    boxes = []
    for t in _texts(fig):
        box = _extent(t, renderer)
        if box.width > 0 and box.height > 0 and not _clipped_away(t, box):
            boxes.append((t, box))
    return boxes


def text_overlaps(fig, *, pad: float = 0.0) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose bounding boxes overlap (in display pixels, each box grown by ``pad``).

    The boxes are matplotlib's own (``Text.get_window_extent`` after a draw, so after the figure's layout
    engine has placed its axes): tick labels, axis labels, axes and figure titles, annotations and legend
    entries, of every axes compared with those of every other. Only texts that are not drawn at all (clipped
    by their clip box, wholly outside it) are ignored; text running off the canvas is :func:`clipped_texts`.

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
    boxes = [(t, box.padded(pad)) for t, box in _drawn_boxes(fig)]
    pairs = []
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            a, b = boxes[i][1], boxes[j][1]
            if min(a.x1, b.x1) - max(a.x0, b.x0) > 0.5 and min(a.y1, b.y1) - max(a.y0, b.y0) > 0.5:
                pairs.append((boxes[i][0].get_text(), boxes[j][0].get_text()))
    return pairs


def clipped_texts(fig, *, tolerance: float = 0.5) -> list[str]:
    """Drawn texts that do not fit on the figure's canvas: cut off at its edge (or wholly off it) when saved.

    The canvas is the figure at its own size (``fig.bbox``), the one :func:`save_figure` writes for a figure
    with a layout engine. A figure without one is saved cropped to its drawn contents instead, a canvas that
    grows past the figure's size (and past a slide's 11 inches): its texts outside ``fig.bbox`` are reported
    too, so every figure that passes keeps its text within its declared size.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    tolerance : float
        Pixels a box may stick out (antialiasing) before it counts.

    Returns
    -------
    list of str
        The texts that stick out, in drawing order; empty when every text is on the canvas.
    """
    canvas = fig.bbox
    return [t.get_text() for t, box in _drawn_boxes(fig)
            if box.x0 < canvas.x0 - tolerance or box.y0 < canvas.y0 - tolerance
            or box.x1 > canvas.x1 + tolerance or box.y1 > canvas.y1 + tolerance]


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


def place_labels(ax, points: Sequence[tuple[float, float]], labels: Sequence[str], *,
                  fontsize: float | None = None) -> list[str]:
    """Annotate each point with its label where the label touches no other label, point, axes edge or tick
    label (greedy: eight directions at growing distance, a thin leader line when away from the point).
    Returns the labels that found no free place (left out, never drawn on top of each other).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    points : sequence of (float, float)
        The points, in data coordinates.
    labels : sequence of str
        One per point.
    fontsize : float or None
        Their size (None: :func:`minimum_font`).
    """
    fontsize = minimum_font() if fontsize is None else fontsize
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


def tick_locator(n: int, integer: bool = True):
    """A tick locator of at most ``n`` bins (at least two ticks; whole numbers when ``integer``).

    Parameters
    ----------
    n : int
        Bins.
    integer : bool
        Ticks at whole numbers only.
    """
    from matplotlib.ticker import MaxNLocator
    return MaxNLocator(nbins=n, min_n_ticks=2, integer=integer)
