"""The product-set computation: units proved off for every task, then the live slots enumerated
exactly (docs/theory.md, "Certification for every task", steps 2–3).

:func:`certify_model` for a declared entity table (G1, G2, C1), :func:`certify_rows` for facts declared in
W2's rows (A1, A2(a)). Both return the same dictionary, which ``certify.certify_built`` turns into a
verdict.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

import numpy as np

from georecall.constructions.arithmetic import EXACT_INTEGER_LIMIT, integer_bounds
from georecall.constructions.array_scans import abs_max, is_integral, row_l1_max
from georecall.constructions.decoding import iter_chunks
from georecall.constructions.encoding import TaskEncoding
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Layer, Model
from georecall.errors import InputError
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task, paths
from georecall.theory.tokens import queries
from georecall.verify.checking.certify_codes import binary_hypercube, same_memory
from georecall.verify.checking.certify_relaxation import (
    KEEP_FAILING,
    MAX_POINTS,
    UNIT,
    Lowest,
    Pieces,
    QueryType,
    SparseRight,
    Unsupported,
    chunk_rows,
    codebook_allowance,
    content_key,
    decode_distinct,
    failure_limits,
    float_allowance,
    point_chunks,
    preactivation_slack,
    query_types,
)
from georecall.verify.checking.decoders import dense_decode, detect_hypercube, hypercube_decode

__all__ = [
    "certify_model",
    "certify_rows",
]



# ------------------------------------------------------------------------------------------ certify


def _bound_check(*values: float) -> None:
    for v in values:
        if not v < EXACT_INTEGER_LIMIT:
            raise InputError(f"integer mode: an intermediate of the certificate may reach {v:.3g} >= 2^53 "
                             "(use --float)")


def certify_model(model: Model, encoding: TaskEncoding, blocks: np.ndarray, vectors: np.ndarray, N: int,
                  R: int, k: int, promise: Promise | None, *, integer: bool = False,
                  attributes: str = "shared", symmetric: bool = False, max_points: int = MAX_POINTS,
                  progress: bool = False) -> dict:
    """The product-set computation behind :func:`certify` for a model whose entity rows are declared.

    The model's own entity table is never read.

    Parameters
    ----------
    model : Model
        The construction's model; one layer with an MLP (otherwise the answer is ``{"unsupported": ...}``).
    encoding : TaskEncoding
        The declared task encoding (its ``slots`` and ``queries`` give the query types).
    blocks : numpy.ndarray
        The declared ``(P, D)`` residual coordinates of each slot's block (integer).
    vectors : numpy.ndarray
        The codebook ``(>= N, D)``; its first N rows are the codes an entity slot ranges over.
    N, R, k : int
        Sizes (k hops; 1 for single-hop encodings).
    promise : Promise or None
        Its ``margin`` sets which points count as failing (None: margin > 0 only).
    integer : bool
        Integer mode: every weight but the entity table must be integral, and so must the codebook;
        attention must be uniform and every intermediate below 2^53; margins are then exact integers scaled
        by S (T with attention, else 1).
    attributes : {"shared", "disjoint"}
        Disjoint attributes offset each relation's answer ids by ``ρ·N``.
    symmetric : bool
        Accepted for the common signature; not used (the product set contains symmetric tasks too).
    max_points : int
        Largest joint enumeration ``N^L`` per query type; a query type above it gets a reason (UNKNOWN).
    progress : bool
        Progress on stderr.

    Returns
    -------
    dict
        ``{"unsupported": reason}`` when the model is outside the certifier (not one layer, no MLP,
        attention weights that read token coordinates). Otherwise:

        - ``"min"``: float, the minimum margin over the enumerated points, divided by the scale S (T in
          integer mode with attention, else 1); ``inf`` when nothing was enumerated;
        - ``"argmin"``: ``(query type index, code indices, live slots, S, margin·S)``, the last an integer
          in integer mode, from which :func:`certify_built` forms the exact Fraction; None when nothing was
          enumerated;
        - ``"failing"``: up to 64 ``(margin, query type index, code indices, live slots)``, lowest first;
        - ``"reasons"``: one per UNKNOWN query type (too many points);
        - counts ``"points"``, ``"shut"`` (units off for every task, summed over query types),
          ``"enumerated"``, ``"types"``; ``"scale_max"`` (always 1);
        - ``"allowance"``: float mode's largest :func:`float_allowance` (0 in integer mode);
        - ``"types_list"``: the query types.

    Raises
    ------
    InputError
        Integer mode on non-integral weights or codebook, attention that is not uniform, or intermediates
        that may reach 2^53.
    """
    if len(model.layers) != 1:
        return {"unsupported": f"the model has {len(model.layers)} layers; the certifier handles one"}
    if model.layers[0].mlp is None:
        return {"unsupported": "the model has no MLP"}
    if integer:
        _require_integral(model, vectors)
    vectors = vectors[:N]  # in its own dtype (float16 for a compact codebook: every chunk is cast exactly)
    ctx = _product(model, blocks, vectors, N, promise, integer, max_points)
    types = query_types(encoding, N, R, k, attributes == "disjoint")
    result: dict = {"min": math.inf, "argmin": None, "failing": [], "reasons": [], "points": 0, "shut": 0,
                    "enumerated": 0, "types": len(types), "scale_max": 1, "allowance": 0.0}
    try:
        for qi, qt in enumerate(types):
            if not _certify_type(ctx, qi, qt, result):
                continue
            if progress and (qi % 64 == 0 or qi + 1 == len(types)):  # the last one too: never a stale count
                print(f"\r  certified {qi + 1}/{len(types)} query types", end="", file=sys.stderr, flush=True)
    except Unsupported as exc:
        return {"unsupported": str(exc)}
    if progress:
        print(file=sys.stderr)
    result["types_list"] = types
    return result


def _require_integral(model: Model, vectors: np.ndarray) -> None:
    """Decide whether integer mode applies: every weight but the entity table, and the codebook, integral."""
    for name, array in model.arrays().items():
        # an array that is the codebook's own memory (a read-out sharing it) is checked once, below
        if name != "entity_embedding" and not same_memory(array, vectors[:len(array)]) and \
                not is_integral(array):
            raise InputError(f"integer mode: weight {name} is not integral (certify it in float mode: "
                             "--float)")
    if not is_integral(vectors):
        raise InputError("integer mode: the codebook is not integral (certify it in float mode: --float)")


@dataclasses.dataclass
class _Product:
    """What :func:`certify_model` reads for every query type (:func:`_product`), and its caches."""

    model: Model
    blocks: np.ndarray
    vectors: np.ndarray  # the first N codes
    N: int
    promise: Promise | None
    integer: bool
    max_points: int
    pieces: Pieces
    b1: np.ndarray
    b2: np.ndarray
    W2_read: np.ndarray  # W2 on the read-out's columns
    cols: np.ndarray
    U_read: np.ndarray
    cube: Any  # the hypercube decoder, or None
    U_row_l1: float
    amax: float
    allowance_by_T: dict[int, float] = dataclasses.field(default_factory=dict)
    slack_by_T: dict[int, float] = dataclasses.field(default_factory=dict)
    memo: dict[bytes, tuple] = dataclasses.field(default_factory=dict)


def _product(model: Model, blocks: np.ndarray, vectors: np.ndarray, N: int, promise: Promise | None,
             integer: bool, max_points: int) -> _Product:
    """The linear pieces, the MLP's biases and read-out rows, and the decoder the read-out allows."""
    pieces = Pieces(model, blocks, vectors, integer)
    mlp = model.layers[0].mlp
    assert mlp is not None, "certify_model checked the MLP"
    b1, b2 = mlp.b1.astype(np.float64), mlp.b2.astype(np.float64)
    W2 = mlp.W2.astype(np.float64)
    cols = pieces.cols
    W2_read = W2[:, cols]
    U_read = model.readout.matrix
    cube = binary_hypercube(vectors, U_read) or detect_hypercube(U_read, np.arange(cols.size))[0]
    if cube is None:  # the dense decoder reads U as float64 (no copy of a float64 read-out)
        U_read = np.asarray(U_read, dtype=np.float64)
    return _Product(model, blocks, vectors, N, promise, integer, max_points, pieces, b1, b2, W2_read, cols,
                    U_read, cube, row_l1_max(U_read), abs_max(vectors))


def _type_constants(ctx: _Product, piece: dict, qt: QueryType) -> tuple[np.ndarray, np.ndarray]:
    """The part of every pre-activation and read-out coordinate that no entity slot moves (scaled by S)."""
    S, N = piece["scale"], ctx.N
    c_pre = S * ctx.b1.copy()
    c_read = S * ctx.b2[ctx.cols].copy()
    for u, tok in enumerate(qt.tokens):
        pu = piece["u"][u]
        c_pre += pu["pos_pre"]
        c_read += pu["pos_read"]
        if tok >= 0:
            c_pre += pu["rel_pre"][tok - N]
            c_read += pu["rel_read"][tok - N]
    return c_pre, c_read


def _active_units(ctx: _Product, piece: dict, T: int, c_pre: np.ndarray, slots: list,
                  result: dict) -> tuple[np.ndarray, np.ndarray]:
    """Which units may be on for some task (their maximum over the product set above ``-slack``):
    ``(active, zmax)``; the counts and float mode's allowance go into ``result``."""
    zmax = c_pre.copy()
    for u, b in slots:
        zmax += piece["u"][u]["hi"][b]
    slack = 0.0  # integer mode: zmax is exact
    if not ctx.integer:
        if T not in ctx.allowance_by_T:
            terms = len(slots) * ctx.blocks.shape[1]
            werr = ctx.pieces.weight_error.get(T, 0.0)
            ctx.allowance_by_T[T] = codebook_allowance(ctx.model, ctx.vectors, T, terms, werr)
            ctx.slack_by_T[T] = preactivation_slack(ctx.model, ctx.vectors, T, terms, werr)
        result["allowance"] = max(result["allowance"], ctx.allowance_by_T[T])
        slack = ctx.slack_by_T[T]
    active = np.flatnonzero(zmax > -slack)  # off for every task: proved only at <= -slack
    result["shut"] += int(zmax.size - active.size)
    result["enumerated"] += int(active.size)
    return active, zmax


def _live_slots(piece: dict, qt: QueryType, slots: list, active: np.ndarray) -> list:
    """The slots enumerated jointly: the answer slot, and every slot a unit not proved off or the read-out
    reads."""
    live = [qt.answer]
    for u, b in slots:
        if (u, b) == qt.answer:
            continue
        pu = piece["u"][u]
        if pu["H_any"][b] or np.any(pu["G_any"][b][active]):
            live.append((u, b))
    return live


def _integer_range(ctx: _Product, piece: dict, live: list, c_pre: np.ndarray, c_read: np.ndarray) -> None:
    """Decide whether every intermediate of the enumeration stays below 2^53 (integer mode)."""
    g_col = max(float(np.abs(piece["u"][u]["G"][b]).sum(axis=0).max(initial=0)) for u, b in live)
    bound = float(np.abs(c_pre).max(initial=0)) + len(live) * ctx.amax * g_col
    vb = float(np.abs(c_read).max(initial=0)) + bound * float(np.abs(ctx.W2_read).sum(axis=0).max(
        initial=0)) + len(live) * ctx.amax * max(float(np.abs(piece["u"][u]["H"][b]).sum(axis=0).max(
            initial=0)) for u, b in live)
    _bound_check(bound, 2 * vb * ctx.U_row_l1 + 1)


def _certify_type(ctx: _Product, qi: int, qt: QueryType, result: dict) -> bool:
    """One query type: units shut, live slots enumerated (or a reason, UNKNOWN), folded into ``result``;
    whether it was enumerated."""
    T = len(qt.tokens)
    piece = ctx.pieces.at(T)
    S, P = piece["scale"], ctx.blocks.shape[0]
    c_pre, c_read = _type_constants(ctx, piece, qt)
    slots = [(u, b) for u in qt.entity_positions for b in range(P)]
    active, zmax = _active_units(ctx, piece, T, c_pre, slots, result)
    live = _live_slots(piece, qt, slots, active)
    if ctx.N ** len(live) > ctx.max_points:
        result["reasons"].append(_reason(qt, live, active, zmax, piece, S, P, ctx.N, ctx.max_points))
        return False
    if ctx.integer:
        _integer_range(ctx, piece, live, c_pre, c_read)
    G_raw = [piece["u"][u]["G"][b][:, active] for u, b in live]
    H_raw = [piece["u"][u]["H"][b] for u, b in live]
    threshold = None if ctx.promise is None else ctx.promise.margin
    limit, floor = failure_limits(threshold, ctx.promise, ctx.integer, ctx.allowance_by_T.get(T, 0.0))
    # Query types whose restricted arrays are identical give identical margins at every point
    # (G1's relations, by symmetry): computed once, exactly the same function of the same numbers.
    key = content_key(ctx.N, S, qt.offset, limit, floor, c_pre[active], c_read, ctx.W2_read[active], *G_raw,
                      *H_raw)
    if key not in ctx.memo:
        ctx.memo[key] = _enumerate(ctx.N, len(live), c_pre[active], c_read, G_raw, H_raw, ctx.W2_read[active],
                                   ctx.vectors, qt.offset, S, ctx.cube, ctx.U_read, limit, floor)
    low, low_values, failing, count = ctx.memo[key]
    _fold(result, count, low, (qi, low_values, live, S, low * S),
          [(m_, qi, vals, live) for m_, vals in failing])
    return True


def _fold(result: dict, count: int, low: float, argmin: tuple, failing: list) -> None:
    """Fold one enumeration into ``result``: its points, a new minimum, the lowest failing points."""
    result["points"] += count
    if low < result["min"]:
        result["min"] = low
        result["argmin"] = argmin
    result["failing"] += failing
    result["failing"].sort(key=lambda f: f[0])
    del result["failing"][KEEP_FAILING:]


def certify_rows(model: Model, encoding: TaskEncoding, out_block: np.ndarray, vectors: np.ndarray, N: int,
                 R: int, k: int, promise: Promise | None, *, integer: bool = False,
                 attributes: str = "shared",
                 max_points: int = MAX_POINTS, progress: bool = False) -> dict:
    """The product-set computation for facts declared in W2's rows (A1, A2(a)): the same output as
    :func:`certify_model`.

    Everything upstream of W2 is task-independent, so every query's hidden activations are computed exactly by
    THE forward pass (integer mode: proved exact by ``integer_bounds``), once, whatever the task. The read-out
    residual is then ``base(q) + Σ_{u fires} h_u(q)·a_{j_u}`` on the declared columns, with ``j_u`` unit u's
    answer; relaxing the ``j_u`` to range independently over the codebook, the live slots of query q are its
    own answer's unit (unit index = query index) and the units that fire on it, enumerated jointly.

    Parameters
    ----------
    model : Model
        The construction's model; one layer with an MLP (otherwise the answer is ``{"unsupported": ...}``).
    encoding : TaskEncoding
        The declared task encoding (accepted for the common signature; the queries come from N, R and k).
    out_block : numpy.ndarray
        The declared columns of W2 (integer), each of which the read-out must read.
    vectors : numpy.ndarray
        The codebook ``(>= N, D)``; its first N rows are the codes a unit's answer ranges over.
    N, R, k : int
        Entities, relations and hops (one unit per query).
    promise : Promise or None
        Its ``margin`` sets which points count as failing (None: margin > 0 only).
    integer : bool
        Integer mode: the hidden activations are proved exact by ``integer_bounds`` and margins are exact.
    attributes : {"shared", "disjoint"}
        Disjoint attributes (single hop) offset each relation's answer ids by ``ρ·N``.
    max_points : int
        Largest joint enumeration per query; a query above it gets a reason (UNKNOWN).
    progress : bool
        Progress on stderr.

    Returns
    -------
    dict
        As :func:`certify_model`: ``{"unsupported": reason}`` when the model is not one layer with an MLP or
        the read-out misses a declared column; otherwise ``"min"``, ``"argmin"``, ``"failing"``,
        ``"reasons"``, ``"points"``, ``"shut"``, ``"enumerated"``, ``"types"`` (one per query),
        ``"allowance"`` and ``"types_list"``.

    Raises
    ------
    IntegerModeError
        Integer mode, when ``integer_bounds`` cannot prove the forward pass exact.
    Unsupported
        Float mode, when the forward-error allowance overflows float64.
    """
    if len(model.layers) != 1 or model.layers[0].mlp is None:
        return {"unsupported": "facts in W2 are certified for one-layer models with an MLP only"}
    cols = model.readout.columns
    at = np.searchsorted(cols, out_block)
    if np.any(at >= cols.size) or not np.array_equal(cols[np.minimum(at, cols.size - 1)], out_block):
        return {"unsupported": "the read-out does not read every declared column of W2"}
    ctx = _rows(model, out_block, at, vectors, N, R, k, promise, integer, attributes, max_points)
    n = ctx.tokens.shape[0]
    result: dict = {"min": math.inf, "argmin": None, "failing": [], "reasons": [], "points": 0, "shut": 0,
                    "enumerated": 0, "types": n, "allowance": ctx.allowance}
    types: list[QueryType] = []
    for part in iter_chunks(n, max(1, 2**22 // max(1, ctx.mlp.width))):
        base, h, firing = _firing(ctx, part, result)
        for i, q in enumerate(range(part.start, part.stop)):  # queries of a chunk: grouped below by memo
            types.append(_certify_query(ctx, q, base[i], h[i], firing[i], result))
        if progress:
            print(f"\r  certified {part.stop:,}/{n:,} queries", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    result["types_list"] = types
    return result


@dataclasses.dataclass
class _Rows:
    """What :func:`certify_rows` reads for every query (:func:`_rows`), and its memo."""

    model: Model
    mlp: MLP
    N: int
    k: int
    integer: bool
    disjoint: bool
    max_points: int
    tokens: np.ndarray  # every query, index w·N + s
    rows_of: np.ndarray  # the paths' relations
    cols: np.ndarray
    placed: np.ndarray  # a_j on the read-out's columns, (N, cols)
    W2_rest: np.ndarray  # W2 on the read-out's columns, the declared ones zero
    b2: np.ndarray
    U_read: np.ndarray
    cube: Any  # the hypercube decoder, or None
    reach: float  # the largest |logit| one code on the block makes
    allowance: float
    slack: float
    limit: float
    floor: float
    memo: dict[bytes, tuple] = dataclasses.field(default_factory=dict)


def _rows(model: Model, out_block: np.ndarray, at: np.ndarray, vectors: np.ndarray, N: int, R: int, k: int,
          promise: Promise | None, integer: bool, attributes: str, max_points: int) -> _Rows:
    """The queries, the task-independent part of the read-out, the decoder and float mode's allowances."""
    mlp = model.layers[0].mlp
    assert mlp is not None, "certify_rows checked the MLP"
    cols = model.readout.columns
    vectors = np.asarray(vectors[:N], dtype=np.float64)
    placed = np.zeros((N, cols.size))
    placed[:, at] = vectors  # a_j on the read-out's columns
    W2_rest = mlp.W2.astype(np.float64)[:, cols].copy()
    W2_rest[:, at] = 0.0
    b2 = mlp.b2.astype(np.float64)[cols]
    dummy = Task(np.tile(np.arange(N, dtype=np.int64), (R, 1)))
    tokens, _ = queries(dummy, k)
    T = tokens.shape[1]
    if integer:
        integer_bounds(model, T)
    U_read = np.asarray(model.readout.matrix, dtype=np.float64)  # (no copy of float64)
    cube, _ = detect_hypercube(U_read, np.arange(cols.size))
    reach = float(np.abs(placed @ U_read.T).max(initial=0.0))  # largest |logit| one code on the block makes
    # float mode: the family's declared columns of W2 are zero, but the assembled model's hold codes: the
    # allowance is computed with every unit's declared columns at the codebook's largest magnitude, so the
    # pre-activations' rounding reaches the margin through |W2| there
    allowance = 0.0 if integer else float_allowance(_declared_bound(model, out_block, vectors), T, 0)
    # a unit computed off whose pre-activation is within its rounding bound of 0 may be on: its output is at
    # most 2·slack, and its effect on a margin joins the allowance below
    slack = 0.0 if integer else preactivation_slack(model, np.asarray(model.entity_embedding), T, 0, 0.0)
    limit, floor = failure_limits(None if promise is None else promise.margin, promise, integer, allowance)
    return _Rows(model, mlp, N, k, integer, attributes == "disjoint" and k == 1, max_points, tokens,
                 paths(R, k), cols, placed, W2_rest, b2, U_read, cube, reach, allowance, slack, limit, floor)


def _firing(ctx: _Rows, part: slice, result: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """THE forward pass on a chunk of queries: the read-out residual without the declared rows, the hidden
    activations, and which units fire (float mode: specks and units that may be on join the allowance)."""
    mlp, integer = ctx.mlp, ctx.integer
    _, trace = forward(ctx.model, ctx.tokens[part], integer=integer, trace=True)
    y = trace.residual[1][:, -1].astype(np.float64)
    h = trace.hidden[0][:, -1].astype(np.float64)
    base = y[:, ctx.cols] + ctx.b2 + h @ ctx.W2_rest
    firing = (h > 0) | ~np.isfinite(h)  # a NaN unit is never "off"
    if not integer:
        z = y @ mlp.W1.astype(np.float64) + mlp.b1.astype(np.float64)
        maybe = (z > -ctx.slack) & ~firing
        # Float rounding turns exact zeros into specks (4e-16): units firing below 1e-9 of the largest
        # are left out of the enumeration and their largest effect on a margin joins the allowance.
        speck = (h <= 1e-9 * max(1.0, float(h.max(initial=0.0)))) & firing
        off_effect = 2 * ctx.slack * np.count_nonzero(maybe, axis=1)
        extra = 2 * (np.where(speck, h, 0.0).sum(axis=1) + off_effect) * ctx.reach
        if np.any(speck | maybe):
            result["allowance"] = max(result["allowance"], ctx.allowance + float(extra.max()))
            firing &= ~speck
    result["shut"] += int(firing.size - np.count_nonzero(firing))
    result["enumerated"] += int(np.count_nonzero(firing))
    return base, h, firing


def _certify_query(ctx: _Rows, q: int, base: np.ndarray, h: np.ndarray, firing: np.ndarray,
                   result: dict) -> QueryType:
    """One query: its answer's unit and the units firing on it enumerated jointly (or a reason, UNKNOWN),
    folded into ``result``; its query type."""
    N, k = ctx.N, ctx.k
    w, subject = divmod(q, N)
    label = ({"relation": w} if k == 1
             else {"path": w, "relations": [int(r) for r in ctx.rows_of[w][::-1]]})
    qt = QueryType([int(t) for t in ctx.tokens[q]], [], (UNIT, q), w * N if ctx.disjoint else 0,
                   {**label, "subject": subject}, {})
    others = np.flatnonzero(firing)
    others = others[others != q]
    live = [q] + others.tolist()
    if N ** len(live) > ctx.max_points:
        result["reasons"].append({"query_type": qt.label, "units": [
            {"unit": int(u), "fires_with": float(h[u])} for u in others[:8]],
            "why": f"{others.size} unit(s) besides the query's own fire on it: enumerating their "
                   f"answers jointly (N^{len(live)} = {N ** len(live):,} points) exceeds the limit of "
                   f"{ctx.max_points:,} (--max-points)"})
        return qt
    hs = h[live]
    key = content_key(base, hs, np.asarray([qt.offset]))
    if key not in ctx.memo:
        ctx.memo[key] = _enumerate_rows(N, base, hs, ctx.placed, qt.offset, ctx.cube, ctx.U_read, ctx.limit,
                                        ctx.floor)
    low, low_values, failing, count = ctx.memo[key]
    slots = [(UNIT, u) for u in live]
    _fold(result, count, low, (q, low_values, slots, 1, low), [(m_, q, vals, slots) for m_, vals in failing])
    return qt


def _declared_bound(model: Model, out_block: np.ndarray, vectors: np.ndarray) -> Model:
    """``model`` with W2's declared columns set to the codebook's largest magnitude (every unit may write any
    code there): the magnitudes :func:`float_allowance` needs for the assembled models."""
    mlp = model.layers[0].mlp
    assert mlp is not None, "the assembled single-hop models have an MLP"
    W2 = np.array(mlp.W2, dtype=np.float64)
    W2[:, out_block] = abs_max(vectors)
    layer = Layer(model.layers[0].attention, MLP(mlp.W1, mlp.b1, W2, mlp.b2))
    return dataclasses.replace(model, layers=(layer,))


def _enumerate_rows(N: int, base: np.ndarray, hs: np.ndarray, placed: np.ndarray, offset: int, cube,
                    U_read: np.ndarray, limit: float, floor: float) -> tuple[float, list[int], list, int]:
    """Margins at every joint choice of the live units' answers (the first is the query's own)."""
    n_live = hs.size
    n_points = N**n_live
    lowest = Lowest(n_live, limit, floor)
    rows = chunk_rows(8 * (4 * base.size + 2 * n_live + 16))  # v_read and its temporaries, indices, margins
    for idx, values in point_chunks(N, n_live, rows):
        v_read = np.broadcast_to(base, (idx.size, base.size)).copy()
        for j, hv in zip(values, hs):
            if hv != 0:
                v_read += hv * placed[j]
        answers = values[0] + offset
        if cube is not None:
            _, margins = hypercube_decode(cube, v_read, answers)
        else:
            margins = decode_distinct(v_read, answers, U_read)
        lowest.add(margins, values)
    return lowest.low, lowest.low_values, lowest.failing, n_points


def _enumerate(N: int, n_live: int, c_pre: np.ndarray, c_read: np.ndarray, G_raw: list[np.ndarray],
               H_raw: list[np.ndarray], W2a_raw: np.ndarray, vectors: np.ndarray, offset: int, S: int, cube,
               U_read: np.ndarray, limit: float, floor: float) -> tuple[float, list[int], list, int]:
    """Margins at every point of the live slots' product (the first live slot answers): the minimum, its
    point, the lowest failing points (margin < ``limit`` or <= ``floor``) and the number of points."""
    n_points = N**n_live
    G_live, H_live = [SparseRight(G) for G in G_raw], [SparseRight(H) for H in H_raw]
    W2a = SparseRight(W2a_raw)
    lowest = Lowest(n_live, limit, floor)
    # per point: z, v_read and a gathered temporary of each, the codes, indices and margins
    rows = chunk_rows(8 * (3 * c_pre.size + 3 * c_read.size + vectors.shape[1] + 2 * n_live + 16))
    for idx, values in point_chunks(N, n_live, rows):
        # coordinate-major (a row per unit or coordinate, a column per point): the sparse products gather
        # contiguous rows, and the hypercube decoder reads the coordinates as rows
        zT = np.repeat(c_pre[:, None], idx.size, axis=1)
        vT = np.repeat(c_read[:, None], idx.size, axis=1)
        for j, G, H in zip(values, G_live, H_live):
            # one live slot: the chunk's codes are consecutive rows (a view, no gather)
            codes_j = vectors[int(idx[0]) : int(idx[-1]) + 1] if n_live == 1 else vectors[j]
            codesT = codes_j.T.astype(np.float64, order="C")  # (D, n); a compact chunk widened (exact)
            G.add_to_T(zT, codesT)
            H.add_to_T(vT, codesT)
        np.maximum(zT, 0, out=zT)
        W2a.add_to_T(vT, zT)
        v_read = vT.T  # (n, c), a view
        answers = values[0] + offset
        if cube is not None:
            _, margins = hypercube_decode(cube, v_read, answers)
        elif n_live > 1:  # most points repeat a (residual, answer) pair: decode each distinct pair once
            margins = decode_distinct(v_read, answers, U_read)
        else:
            _, margins = dense_decode(v_read, answers, U_read)
        margins = margins / S if S != 1 else margins
        lowest.add(margins, values)
    return lowest.low, lowest.low_values, lowest.failing, n_points


def _reason(qt: QueryType, live, active, zmax, piece, S, P, N: int, max_points: int) -> dict:
    """Why a query type is UNKNOWN: the units left possibly on that read slots besides the answer slot, and
    the points their joint codes need against the limit."""
    others = [(u, b) for u, b in live if (u, b) != qt.answer]
    culprits = []
    for u, b in others:
        pu = piece["u"][u]
        units = active[pu["G_any"][b][active]]
        for unit in units[:4]:
            culprits.append({"unit": int(unit), "max_preactivation": float(zmax[unit] / S),
                             "reads_slot": {"position": u, "slot": b},
                             "slot_range": [float(pu["lo"][b][unit] / S), float(pu["hi"][b][unit] / S)]})
        if pu["H_any"][b]:
            culprits.append({"read_out_reads_slot": {"position": u, "slot": b}})
    return {"query_type": qt.label, "live_slots": [{"position": u, "slot": b} for u, b in live],
            "points_needed": f"N^{len(live)}", "units": culprits[:16],
            "why": (f"{len(others)} slot(s) besides the answer's stay live: units not proved off for every "
                    "task (per-slot maxima add up above 0) or a read-out reading them; enumerating their "
                    f"joint codes (N^{len(live)} = {N ** len(live):,} points) exceeds the limit of "
                    f"{max_points:,} (--max-points)") if others else
                   (f"the answer slot alone has N = {N:,} codes to enumerate, more than the limit of "
                    f"{max_points:,} (--max-points)")}
