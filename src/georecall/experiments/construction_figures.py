"""The construction drawn (optional ``plot`` extra): G1 itself (:func:`construction_figure`), each of its
matrices with its rows and columns named in the demo's words (:func:`matrix_figure`, :func:`weights_figures`),
and a trained model beside G1 (:func:`trained_beside_g1_figure`: E after the best linear alignment, both MLPs'
relation selectivity)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from georecall.constructions.forward import forward
from georecall.constructions.layout import Layout
from georecall.constructions.single_hop import build_g1, single_hop_queries
from georecall.errors import InputError
from georecall.experiments.plotting import (
    import_pyplot,
    minimum_font,
    rc_params,
    tick_locator,
)
from georecall.theory.tasks import task_for_seed

__all__ = [
    "MAX_CELL_NUMBERS",
    "WEIGHTS",
    "align_embeddings",
    "construction_figure",
    "g1_groups",
    "matrix_figure",
    "relation_means",
    "trained_beside_g1_figure",
    "weights_figures",
]


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
    plt = import_pyplot()
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

    with plt.rc_context(rc_params()):
        fig = plt.figure(figsize=(11, 8.2), layout="constrained")
        grid = fig.add_gridspec(2, 2, height_ratios=[1.1, 1], width_ratios=[1, 1])
        ax_e, ax_w = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
        ax_h, ax_l = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
        from matplotlib.patches import Rectangle
        lim = max(1.0, float(np.abs(E).max()))
        image = ax_e.imshow(E, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto", interpolation="nearest")
        bar = fig.colorbar(image, ax=ax_e, fraction=0.05, pad=0.02)
        bar.set_label("entry")
        bar.ax.yaxis.set_major_locator(tick_locator(4, integer=False))
        ax_e.add_patch(Rectangle((-0.5, s - 0.5), d, 1, fill=False, ec="k", lw=2))
        ax_e.set_title(f"E: subject embeddings\n(N = {N} rows, d = {d})")  # two lines: within the panel
        ax_e.set_ylabel(f"subject s (boxed: s = {s})")
        ax_e.yaxis.set_major_locator(tick_locator(min(N, 8)))
        _group_ticks(ax_e, "x", coords, top=True)
        ax_e.set_xlabel("block B_r holds\nthe code a of π_r(s)")

        wl = max(1.0, float(np.abs(W1).max()))
        image = ax_w.imshow(W1, cmap="RdBu_r", vmin=-wl, vmax=wl, aspect="auto", interpolation="nearest")
        bar = fig.colorbar(image, ax=ax_w, fraction=0.05, pad=0.02)
        bar.set_label("weight")
        bar.ax.yaxis.set_major_locator(tick_locator(4, integer=False))
        ax_w.set_title(f"W1 (d = {d} × m = {m}):\nunit (r, i, σ) reads σ·B_r[i] + g_r")
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
        ax_h.set_xlabel(f"hidden unit\n(green: relation {names[r]}'s, gate open)")
        ax_h.set_ylabel("value")
        ax_h.xaxis.set_major_locator(tick_locator(6))
        from matplotlib.patches import Patch
        ax_h.legend(handles=[Patch(color="0.75", label="pre-activation W1·y + b1"),
                             Patch(color="tab:green", label="after the ReLU")], loc="upper left",
                    fontsize=minimum_font())

        row = np.asarray(logits[0], dtype=float)
        answer = int(task.table[r, s])
        ax_l.bar(np.arange(N), row, color=["tab:green" if j == answer else "tab:blue" for j in range(N)])
        top2 = np.sort(row)
        ax_l.set_title(f"logits λ·c1·⟨a_j, a_answer⟩:\nanswer {answer}, margin {top2[-1] - top2[-2]:g}")
        ax_l.set_xlabel(f"attribute j (green: π_{names[r]}({s}) = {answer})")
        ax_l.set_ylabel("logit")
        ax_l.xaxis.set_major_locator(tick_locator(min(N, 8)))
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
    size = minimum_font()
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
    plt = import_pyplot()
    M = np.asarray(matrix, dtype=float)
    n_rows, n_cols = M.shape
    if size is None:
        size = (min(11.0, max(6.0, 2.8 + 0.42 * n_cols)), min(8.5, max(3.6, 1.9 + 0.36 * n_rows)))
    lim = max(float(np.abs(M).max()), 1e-12)
    with plt.rc_context(rc_params()):
        fig, ax = plt.subplots(figsize=size, layout="constrained")
        image = ax.imshow(M, cmap="RdBu_r" if signed else "Greens", vmin=-lim if signed else 0.0, vmax=lim,
                          aspect="auto", interpolation="nearest")
        bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
        bar.set_label(colour_label)
        bar.ax.yaxis.set_major_locator(tick_locator(4, integer=False))
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
                pattern, title=f"attention on ⟨{names[r]}, {s}⟩\n({kind})",
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
    bar.ax.yaxis.set_major_locator(tick_locator(2, integer=False))
    ax.set_yticks(range(len(names)), list(names))
    ax.set_ylabel("asked relation")
    ax.set_xlabel(f"hidden unit, by preferred relation\n({int(active.sum())} of {means.shape[1]} ever fire; "
                  "grey: silent)")
    ax.xaxis.set_major_locator(tick_locator(6))
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
    plt = import_pyplot()
    names = list(relation_names) if relation_names is not None else [f"cipher{r}" for r in range(task.R)]
    E_g1 = np.asarray(g1_model.entity_embedding, dtype=np.float64)
    alignment = align_embeddings(np.asarray(trained_model.entity_embedding)[: task.N], E_g1, fit=fit)
    groups = g1_groups(g1_model, names)["coordinates"]
    lim = float(np.abs(E_g1).max()) or 1.0
    with plt.rc_context(rc_params()):
        fig, axes = plt.subplots(2, 2, figsize=(11, 8.2), layout="constrained")
        for ax, matrix, title in ((axes[0, 0], E_g1, f"G1's E (N = {task.N}, d = {E_g1.shape[1]})"),
                                  (axes[0, 1], alignment["aligned"], "trained E, aligned onto G1's")):
            image = ax.imshow(matrix, cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto",
                              interpolation="nearest")
            bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.02)
            bar.set_label("entry")
            bar.ax.yaxis.set_major_locator(tick_locator(2, integer=False))
            ax.set_title(title)
            ax.set_ylabel("subject s")
            ax.yaxis.set_major_locator(tick_locator(8))
            _group_ticks(ax, "x", groups, top=True)
        held = alignment["r2_held_out"]
        fit_text = (f"least squares, p = {alignment['p']}, n = {alignment['n']}\nR² {alignment['r2_fit']:.2f}"
                    + (f", held out {held:.2f}" if held is not None else " in sample")).replace("-", "−")
        if alignment["underdetermined"]:
            fit_text += "\n(p >= n: a fit this free is exact on any data)"
        axes[0, 1].set_xlabel(fit_text)
        axes[0, 0].set_xlabel("block B_r holds\nthe code of π_r(s)")
        _selectivity_panel(axes[1, 0], fig, relation_means(g1_model, task), names, "G1: which relation\n"
                           "drives each unit")
        _selectivity_panel(axes[1, 1], fig, relation_means(trained_model, task), names,
                           "trained: which relation\ndrives each unit")
        fig.suptitle("constructed (left) beside trained (right), the same facts")
        _finish(fig)
    return fig
