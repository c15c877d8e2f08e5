"""One-layer forward passes as sums of per-(position, token) tables: the structure-aware path of the checker.

For a model with one layer whose attention weights at the read position do not depend on the tokens (uniform
attention; or softmax / hard attention whose queries and keys read only position coordinates, checked
exactly), the residual at the last position ``q = T − 1`` of a query ``⟨t_0, …, t_q⟩`` is

    y = Σ_u x_u·C_u,    x_u = emb(t_u) + P[u],    C_u = Σ_h w_h[u]·W_V[h]·W_O[h] + [u = q]·I,

where ``w_h`` are the (fixed) attention weights of head h at position q. Everything up to the MLP's ReLU is
linear in ``y``, so

    pre = b1 + Σ_u x_u·(C_u·W1)            (m numbers per query)
    v   = b2[c] + Σ_u x_u·C_u[:, c] + ReLU(pre)·W2[:, c]      (only the columns c the read-out reads)

is a sum over positions of rows of per-(position, token) tables ``x_u·(C_u·W1)`` and ``x_u·C_u[:, c]``. A
position whose rows are equal for every token present there folds into a constant; the other positions before
q ("group positions": the relations of G1 and of C1's prompt) have few tokens, so each combination of them is
a *group* with one pre-activation vector; the last position is computed in *blocks* of token ids, each block's
table once (``N·m`` entries in all instead of ``Q·d·m`` products). Within a (group, block) the units whose
largest pre-activation over the block is ``<= 0`` output exactly 0 and are skipped (for G1: all but the 2D
units of the asked relation).

Exactness (docs/theory.md, "The token-additive pass"). Real arithmetic: the formulas above are the forward
pass rearranged (linearity; a unit skipped is one whose ReLU is 0). Integer mode: attention must be uniform
with ``Σ_h W_V[h]·W_O[h] ≡ 0 (mod T)`` entrywise, so every ``C_u`` is an integer matrix and every attention
output is an integer (the dense pass checks that per query; here it holds for all token sequences). Then every
table, sum and product is an integer, and :func:`integer_bounds` bounds each stage — including the logits and
their differences (margins) — below 2^53, so float64 computes them exactly in any order. In float mode the
result is the same function with a different rounding order (like any two BLAS calls).

This module decides whether the pass applies and builds its plan (:func:`plan_additive`: the tables, the
groups, and the a-priori bounds :func:`integer_bounds` / :func:`float_bounds`); :mod:`.additive_run` runs it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from georecall.constructions.arithmetic import EXACT_INTEGER_LIMIT, IntegerModeError
from georecall.constructions.model import Model
from georecall.constructions.rounding import (
    absmm,
    format_of,
    gamma,
    hard_weight_error,
    softmax_weight_error,
    up,
)

__all__ = ["AdditivePlan", "NotAdditive", "TableFacts", "embedding_rows", "float_bounds", "integer_bounds",
           "plan_additive", "support", "table_facts"]

# Largest table of a group position (distinct tokens × m), and the largest number of groups.
MAX_GROUP_TABLE = 2**24
MAX_GROUPS = 2**20
SCAN_BYTES = 2 * 2**20


class NotAdditive(ValueError):
    """The model or the queries do not have the structure the token-additive pass needs (the reason)."""


def _scan(array: np.ndarray, fn, init):
    """Fold ``fn`` over row blocks of about 2 MiB of a large array (bounded, cache-sized temporaries)."""
    acc = init
    rows = max(1, SCAN_BYTES // (8 * max(1, int(np.prod(array.shape[1:])))))
    for start in range(0, array.shape[0], rows):
        acc = fn(acc, array[start : start + rows])
    return acc


@dataclass(frozen=True)
class TableFacts:
    """What one pass over a weight table tells: the columns with a nonzero entry, the largest absolute entry,
    and whether every entry is an integer."""

    support: np.ndarray
    max_abs: float
    integral: bool


def _facts_of(array: np.ndarray) -> TableFacts:
    array = array.reshape(array.shape[0], -1) if array.ndim != 2 else array

    def step(acc, block):
        used, top, whole = acc
        used |= np.any(block != 0, axis=0)
        top = max(top, float(np.abs(block).max(initial=0.0)))
        whole = whole and bool(np.array_equal(block, np.rint(block)))
        return used, top, whole
    used, top, whole = _scan(array, step, (np.zeros(array.shape[1], dtype=bool), 0.0, True))
    return TableFacts(np.flatnonzero(used), top, whole)


_FACTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def table_facts(model: Model, name: str) -> TableFacts:
    """:class:`TableFacts` of ``model.arrays()[name]``, computed once per (immutable) model and name.

    Parameters
    ----------
    model : Model
        The model (a weak key of the cache: the facts go with it).
    name : str
        A name of ``model.arrays()`` ("entity_embedding", "layers.0.mlp.W1", ...).

    Returns
    -------
    TableFacts
        ``support``: for a 2-D array, the indices of its columns with a nonzero entry; an array of another
        rank is first reshaped to ``(shape[0], -1)`` (a 1-D array is one column: support ``[0]`` or empty).
        ``max_abs`` and ``integral`` are over all its entries.

    Raises
    ------
    KeyError
        ``name`` is not one of ``model.arrays()``.
    """
    cache = _FACTS.setdefault(model, {})
    if name not in cache:
        cache[name] = _facts_of(model.arrays()[name])
    return cache[name]


def support(table: np.ndarray) -> np.ndarray:
    """Columns of ``table`` with a nonzero entry (scanned in row blocks).

    Parameters
    ----------
    table : numpy.ndarray
        A 2-D array ``(rows, columns)``; an array of another rank (at least 1-D) is read as
        ``table.reshape(table.shape[0], -1)``.

    Returns
    -------
    numpy.ndarray
        The indices of those columns, ascending (integer array).
    """
    return _facts_of(table).support


@dataclass(eq=False)
class AdditivePlan:
    """Everything the token-additive pass needs for queries of length T (see the module docstring)."""

    model: Model
    T: int
    columns: np.ndarray  # residual coordinates the read-out reads
    integer: bool
    dtype: np.dtype
    weights: np.ndarray  # (H, T): attention weights of each head at the last position
    C: list[np.ndarray]  # per position u: d × d
    M: list[np.ndarray | None]  # per position: C_u @ W1 (d × m), None without an MLP
    const_pre: np.ndarray | None  # b1 + constant positions' terms (m,)
    const_read: np.ndarray  # b2[c] + constant positions' terms (D,)
    group_positions: list[int] = field(default_factory=list)
    group_tokens: list[np.ndarray] = field(default_factory=list)  # sorted present tokens per group position
    group_pre: list[np.ndarray | None] = field(default_factory=list)  # (n_u, m) table rows (None: no MLP)
    group_read: list[np.ndarray] = field(default_factory=list)  # (n_u, D)
    W2_read: np.ndarray | None = None  # W2[:, c] (m, D)
    info: dict = field(default_factory=dict)


def embedding_rows(model: Model, ids: np.ndarray) -> np.ndarray:
    """Rows of ``[E; Q]`` for token ids, without the concatenated table (which copies E).

    Parameters
    ----------
    model : Model
    ids : numpy.ndarray
        Token ids: entities below ``model.n_entities``, relations above.
    """
    N = model.n_entities
    ids = np.asarray(ids)
    if ids.size and ids.max() < N:
        return model.entity_embedding[ids]
    out = np.empty((ids.size, model.d), dtype=model.entity_embedding.dtype)
    entity = ids < N
    out[entity] = model.entity_embedding[ids[entity]]
    out[~entity] = model.relation_embedding[ids[~entity] - N]
    return out


def _attention_weights(model: Model, T: int, supp: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """Head weights ``(H, T)`` at position T − 1 and the value-output maps, or NotAdditive when they depend on
    the tokens. Token-independence is exact: no coordinate that any token embedding uses is read by W_Q or
    W_K, so a score is ``β·<P[q]·W_Q, P[u]·W_K>`` (0 without position embeddings)."""
    layer = model.layers[0]
    att = layer.attention
    if att is None:
        return np.zeros((0, T)), []
    VO = [att.value_output(h).astype(np.float64) for h in range(att.heads)]
    if att.kind == "uniform":
        return np.full((att.heads, T), 1.0 / T), VO
    weights = np.empty((att.heads, T))
    P = model.position_embedding
    W_Q, W_K = att.W_Q, att.W_K
    # Attention.__post_init__ requires W_Q and W_K for every kind but "uniform" (returned above).
    assert W_Q is not None and W_K is not None
    for h in range(att.heads):
        for name, W in (("W_Q", W_Q[h]), ("W_K", W_K[h])):
            if np.any(W[supp] != 0):
                raise NotAdditive(f"{att.kind} attention: {name}[{h}] reads coordinates that token "
                                  "embeddings use, so the weights depend on the tokens")
        if P is None:
            scores = np.zeros(T)
        else:
            q = P[T - 1].astype(np.float64) @ W_Q[h]
            k = P[:T].astype(np.float64) @ W_K[h]
            scores = att.inverse_temperature * (k @ q)
        if att.kind == "softmax":
            e = np.exp(scores - scores.max())
            weights[h] = e / e.sum()
        else:  # hard: uniform over the positions with the largest score
            top = (scores == scores.max()).astype(np.float64)
            weights[h] = top / top.sum()
    return weights, VO


def plan_additive(model: Model, token_columns: Sequence[np.ndarray], columns: np.ndarray, *,
                  integer: bool = False) -> AdditivePlan:
    """Check the structure and build the tables for queries given as T token columns (each ``(Q,)``).

    Also computes the a-priori bounds the pass needs: :func:`integer_bounds` in integer mode, else
    :func:`float_bounds` (stored in ``plan.info``).

    Parameters
    ----------
    model : Model
        A one-layer model.
    token_columns : sequence of numpy.ndarray
        The queries' tokens, one integer array ``(Q,)`` per position ``0 … T−1``: ids in ``[0, N + R)``
        (entities first, then relations). Not validated here (:func:`.additive_run.run_additive` checks the
        ids); every column before the last must hold at least one token.
    columns : numpy.ndarray
        The residual coordinates the read-out reads (integer array ``(D,)``, increasing).
    integer : bool
        Integer mode: requires uniform attention whose ``Σ_h W_V·W_O`` is divisible by T, and integral
        weights bounded below 2^53 (:func:`integer_bounds`).

    Returns
    -------
    AdditivePlan
        The tables; ``plan.info`` holds T, the number of groups, the group positions, the embeddings'
        supports and ``"integer_bounds"`` or ``"float_bounds"``.

    Raises
    ------
    NotAdditive
        The pass does not apply (then use THE forward pass), with the reason: not one layer, no tokens, more
        positions than the model has, attention weights that depend on the tokens (or integer mode without
        uniform attention, or ``Σ_h W_V·W_O`` not divisible by T), or too many distinct tokens or
        combinations of tokens at the positions before the last.
    IntegerModeError
        Integer mode: from :func:`integer_bounds` (a weight not integral, or a bound at or over 2^53).
    """
    T = len(token_columns)
    _check_applies(model, T, integer)
    supp_E = table_facts(model, "entity_embedding").support
    supp_Q = table_facts(model, "relation_embedding").support
    weights, VO = _attention_weights(model, T, np.union1d(supp_E, supp_Q))
    C = _position_maps(model.d, T, weights, VO, integer)
    mlp = model.layers[0].mlp
    W1 = None if mlp is None else mlp.W1.astype(np.float64)
    M = [None if W1 is None else Cu @ W1 for Cu in C]
    dtype = np.dtype(np.float64) if integer else model.entity_embedding.dtype
    const_pre, const_read = _position_constants(model, C, M, columns)
    W2_read = None if mlp is None else np.ascontiguousarray(mlp.W2[:, columns], dtype=dtype)
    plan = AdditivePlan(model, T, columns, integer, dtype, weights, C, M, const_pre, const_read,
                        W2_read=W2_read)
    n_groups = _add_groups(plan, token_columns, supp_E, supp_Q)
    plan.info = {"T": T, "groups": n_groups, "group_positions": list(plan.group_positions),
                 "supp_E": supp_E, "supp_Q": supp_Q}
    if integer:
        plan.info["integer_bounds"] = integer_bounds(plan)
    else:
        plan.info["float_bounds"] = float_bounds(plan, token_columns)
    return plan


def _check_applies(model: Model, T: int, integer: bool) -> None:
    """Refuse (NotAdditive) a model that is not one layer, queries without tokens or longer than the model's
    positions, and integer mode without uniform attention."""
    if len(model.layers) != 1:
        raise NotAdditive(f"the model has {len(model.layers)} layers, the token-additive pass needs one")
    if T < 1:
        raise NotAdditive("queries have no tokens")
    P = model.position_embedding
    if P is not None and T > P.shape[0]:
        raise NotAdditive(f"sequence length {T} exceeds the model's {P.shape[0]} positions")
    att = model.layers[0].attention
    if integer and att is not None and att.kind != "uniform":
        raise NotAdditive(f"integer mode needs uniform attention, not {att.kind}")


def _position_maps(d: int, T: int, weights: np.ndarray, VO: list[np.ndarray],
                   integer: bool) -> list[np.ndarray]:
    """``C_u = Σ_h w_h[u]·W_V[h]·W_O[h] + [u = T − 1]·I`` for each position u; in integer mode the uniform
    weights' ``Σ_h W_V·W_O / T``, refused (NotAdditive) when that is not an integer matrix."""
    q = T - 1
    C = []
    if integer and VO:
        total = sum(VO)
        if not np.array_equal(np.mod(total, T), np.zeros_like(total)):
            raise NotAdditive(f"integer mode: Σ_h W_V·W_O is not divisible by T = {T}, so attention outputs "
                              "need a per-query integrality check (THE forward pass does it)")
        shared = np.asarray(total / T)  # exact: an integer matrix
    for u in range(T):
        if integer:
            Cu = shared.copy() if VO else np.zeros((d, d))
        else:
            Cu = np.zeros((d, d))
            for h, vo in enumerate(VO):
                Cu += weights[h, u] * vo
        if u == q:
            Cu[np.arange(d), np.arange(d)] += 1.0
        C.append(Cu)
    return C


def _position_constants(model: Model, C: list[np.ndarray], M: list[np.ndarray | None],
                        columns: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """The terms every query shares: ``b1`` plus the position embeddings' ``P[u]·M_u`` (None without an
    MLP), and ``b2[c]`` plus their ``P[u]·C_u[:, c]`` on the read columns."""
    mlp = model.layers[0].mlp
    P = model.position_embedding
    const_pre = None if mlp is None else mlp.b1.astype(np.float64).copy()
    const_read = np.zeros(columns.size) if mlp is None else mlp.b2[columns].astype(np.float64)
    if P is not None:
        for u in range(len(C)):
            Pu = P[u].astype(np.float64)
            if mlp is not None:
                const_pre += Pu @ M[u]
            const_read += Pu @ C[u][:, columns]
    return const_pre, const_read


def _add_groups(plan: AdditivePlan, token_columns: Sequence[np.ndarray], supp_E: np.ndarray,
                supp_Q: np.ndarray) -> int:
    """Sort each position before the last into a constant one (its rows folded into the plan's constants) or
    a group position (its tokens and table rows appended to the plan); the number of groups. NotAdditive
    when a group position has too many distinct tokens or there are too many groups."""
    model, columns, C, M = plan.model, plan.columns, plan.C, plan.M
    mlp = model.layers[0].mlp
    const_pre, const_read = plan.const_pre, plan.const_read
    V = model.n_entities + model.n_relations
    n_groups = 1
    for u in range(plan.T - 1):
        column = np.asarray(token_columns[u])
        present = np.zeros(V, dtype=bool)
        present[column] = True
        tokens = np.flatnonzero(present)
        rows_used = np.union1d(supp_E if tokens[0] < model.n_entities else [],
                               supp_Q if tokens[-1] >= model.n_entities else []).astype(np.intp)
        if not (np.any(C[u][rows_used] != 0)):  # every token's terms are zero here: a constant position
            continue
        width = 0 if mlp is None else mlp.width
        if tokens.size * max(width, columns.size) > MAX_GROUP_TABLE:
            raise NotAdditive(f"position {u} holds {tokens.size} distinct tokens that change the result: too "
                              "many to enumerate as groups")
        emb = embedding_rows(model, tokens).astype(np.float64)
        Mu = M[u]
        pre = None if Mu is None else emb @ Mu
        read = emb @ C[u][:, columns]
        if (pre is None or np.all(pre == pre[0])) and np.all(read == read[0]):
            if pre is not None:
                const_pre += pre[0]
            const_read += read[0]
            continue
        n_groups *= tokens.size
        if n_groups > MAX_GROUPS:
            raise NotAdditive(f"more than {MAX_GROUPS} combinations of tokens at positions before the last")
        plan.group_positions.append(u)
        plan.group_tokens.append(tokens)
        plan.group_pre.append(pre)
        plan.group_read.append(read)
    return n_groups


def integer_bounds(plan: AdditivePlan) -> dict[str, float]:
    """A-priori bounds on every intermediate of the integer token-additive pass; each must be < 2^53.

    Checks that every array the pass reads is integral (E, Q, P, W_V, W_O, W1, b1, W2, b2 and U, scanned in
    row blocks). With ``X`` the largest ``|emb| + |P|``, ``|A|`` entrywise absolute values and column sums
    ``colsum``: the partial sums of ``C_u·W1`` are at most ``max |C_u|·|W1|``, and those of ``W_V·W_O`` at
    most ``max Σ_h |W_V[h]|·|W_O[h]|``; a table entry and its partial sums are at most
    ``X·colsum(|C_u|·|W1|)``, so pre-activations are at most ``p = Σ_u X·colsum(|C_u|·|W1|) + |b1|``;
    read residuals at most ``v = Σ_u X·colsum(|C_u[:, c]|) + |b2[c]| + p·|W2[:, c]|``, logits at most
    ``max_j Σ_i |U_ji|·v_i`` and margins (differences of two logits) at most twice that.

    Parameters
    ----------
    plan : AdditivePlan
        An integer-mode plan (:func:`plan_additive` calls this itself with ``integer=True``).

    Returns
    -------
    dict of str to float
        Each bound by name ("embedding", "W_V·W_O partial sums", "position u: C_u·W1 partial sums",
        "pre-activations (sums of table rows)", "read residual v", "logits", "margins (differences of two
        logits)"); the attention and MLP entries only when the layer has them. All are < 2^53.

    Raises
    ------
    IntegerModeError
        A weight that is not integral, or a bound at or over 2^53 (naming the first failing one).
    """
    model = plan.model
    layer = model.layers[0]
    named = [name for name in model.arrays() if name == "entity_embedding" or name == "relation_embedding"
             or name == "unembedding" or name == "position_embedding" or name.startswith("layers.0.")]
    for name in named:
        if not table_facts(model, name).integral:
            raise IntegerModeError(f"integer mode: weight {name} is not integral")
    X = max(table_facts(model, "entity_embedding").max_abs, table_facts(model, "relation_embedding").max_abs)
    if model.position_embedding is not None:
        X += float(np.abs(model.position_embedding[: plan.T]).max(initial=0.0))
    bounds = {"embedding": X}
    if layer.attention is not None:
        att = layer.attention
        bounds["W_V·W_O partial sums"] = float(sum(np.abs(att.W_V[h]) @ np.abs(att.W_O[h])
                                                   for h in range(att.heads)).max(initial=0.0))
    cols = plan.columns
    mlp = layer.mlp
    read = np.abs(mlp.b2[cols]) if mlp is not None else np.zeros(cols.size)
    pre = np.abs(mlp.b1).astype(np.float64) if mlp is not None else None
    for u, Cu in enumerate(plan.C):
        absC = np.abs(Cu)
        read = read + X * absC[:, cols].sum(axis=0)
        if mlp is not None:
            Mb = absC @ np.abs(mlp.W1)
            bounds[f"position {u}: C_u·W1 partial sums"] = float(Mb.max(initial=0.0))
            pre = pre + X * Mb.sum(axis=0)
    if mlp is not None and pre is not None:  # pre is None exactly when mlp is
        bounds["pre-activations (sums of table rows)"] = float(pre.max(initial=0.0))
        read = read + pre @ np.abs(mlp.W2[:, cols])
    bounds["read residual v"] = float(read.max(initial=0.0))
    U_read = model.unembedding_on(cols)
    logits = float(_scan(U_read, lambda acc, b: max(acc, float((np.abs(b) @ read).max(initial=0.0))), 0.0))
    bounds["logits"] = logits
    bounds["margins (differences of two logits)"] = 2 * logits
    for name, value in bounds.items():
        if not value < EXACT_INTEGER_LIMIT:
            raise IntegerModeError(f"integer mode: bound on {name} is {value:.3g} >= 2^53")
    return bounds


def _column_max_abs(model: Model, name: str) -> np.ndarray:
    """``max_t |table[t, i]|`` per column i of an embedding table (scanned in row blocks), float64."""
    table = model.arrays()[name]
    return _scan(table, lambda acc, b: np.maximum(acc, np.abs(b).max(axis=0).astype(np.float64)),
                 np.zeros(table.shape[1]))


def float_bounds(plan: AdditivePlan, token_columns: Sequence[np.ndarray]) -> dict:
    """An a-priori bound, the same for every query, on the rounding of the read residual ``v`` and of the
    margins, valid for the tables' own computation AND for THE forward pass of the same queries in the
    model's working precision (any summation order; docs/theory.md, "Sound float mode", the fast paths).

    With ``X_u`` the largest ``|emb| + |P_u|`` per coordinate over the whole embedding table(s) of the kinds
    of token (entity, relation) present at position u, attention weights
    known to within ``e_w`` (exactly 1/T for uniform attention; an interval softmax or a certified argmax
    around the scores, whose rounding in the working precision is bounded a priori), magnitudes
    ``A = Σ_{h,u} w̄_{hu}·X_u·|W_V||W_O|``, ``y = X_q + A``, ``p = y·|W1| + |b1|``, ``v = y + (p + e_p)·|W2| +
    |b2|`` on the read columns bound every term; every term passes through at most ``K = 2T + d_v + 2d + H +
    m + 16`` roundings, so ``e_p = γ_K·p + A_w·|W1|`` and ``e_v = γ_K·v + A_w + e_p·|W2|`` (``A_w`` the weight
    uncertainty's share). The logits then differ from exact by at most ``γ_n·(v + e_v)·|U_j| + e_v·|U_j|``
    (``n = D`` read columns) and a margin by twice the largest of those plus ``2n·η`` for underflow
    (``forward_margin``).

    Parameters
    ----------
    plan : AdditivePlan
        A float-mode plan (:func:`plan_additive` calls this itself with ``integer=False``).
    token_columns : sequence of numpy.ndarray
        The T token columns the plan was built for (each ``(Q,)``); only which kinds of token (entity,
        relation) occur at each position matters.

    Returns
    -------
    dict
        ``"e_v"``: numpy.ndarray ``(D,)``, the bound on the rounding of each read coordinate of ``v``;
        ``"forward_margin"``: float, the bound on a margin's rounding; ``"u"``, ``"eta"``: the unit roundoff
        and underflow bound of the least precise format involved (``rounding.format_of``); ``"K"``: the
        roundings counted per term.

    Raises
    ------
    ValueError
        From ``rounding.format_of``, when the plan's dtype or a model array is not floating-point.
    """
    model = plan.model
    layer = model.layers[0]
    att, mlp = layer.attention, layer.mlp
    u, eta = format_of(plan.dtype, *(a.dtype for a in model.arrays().values()))
    T, d, cols = plan.T, model.d, plan.columns
    X_all = _token_magnitudes(model, token_columns)  # (T, d)
    H = 0 if att is None else att.heads
    d_v = 0 if att is None else att.W_V.shape[2]
    m = 0 if mlp is None else mlp.width
    K = 2 * T + d_v + 2 * d + H + m + 16
    gK = gamma(K, u)
    A, A_w = _attention_terms(plan, X_all, u, eta, gK)
    y = up(X_all[T - 1] + A, 1)
    v, e_v = _read_terms(plan, y, A_w, gK)
    forward_margin = _margin_rounding(model, cols, v, e_v, u, eta)
    return {"e_v": e_v, "forward_margin": forward_margin, "u": u, "eta": eta, "K": K}


def _token_magnitudes(model: Model, token_columns: Sequence[np.ndarray]) -> np.ndarray:
    """``X (T, d)``: per position u and coordinate, the largest ``|emb| + |P_u|`` over the embedding tables
    of the kinds of token (entity, relation) present at u, rounded up."""
    N = model.n_entities
    P = model.position_embedding
    colmax: dict[str, np.ndarray] = {}
    X = []
    for t in range(len(token_columns)):
        column = np.asarray(token_columns[t])
        Xu = np.zeros(model.d)
        if column.size and column.min() < N:
            colmax.setdefault("E", _column_max_abs(model, "entity_embedding"))
            Xu = np.maximum(Xu, colmax["E"])
        if column.size and column.max() >= N:
            colmax.setdefault("Q", _column_max_abs(model, "relation_embedding"))
            Xu = np.maximum(Xu, colmax["Q"])
        if P is not None:
            Xu = up(Xu + np.abs(P[t].astype(np.float64)), 1)
        X.append(Xu)
    return np.array(X)


def _attention_terms(plan: AdditivePlan, X_all: np.ndarray, u: float, eta: float,
                     gK: float) -> tuple[np.ndarray, np.ndarray]:
    """``A = Σ_{h,u} w̄_{hu}·X_u·|W_V||W_O|``, the attention output's magnitude, and ``A_w``, the weight
    uncertainty's share of its rounding (both 0 without attention)."""
    att = plan.model.layers[0].attention
    A = np.zeros(plan.model.d)
    A_w = np.zeros(plan.model.d)
    if att is None:
        return A, A_w
    w_bar, e_w = _weight_bounds(plan, u, eta)
    for h in range(att.heads):  # through d_v: |W_V·W_O| <= |W_V|·|W_O| without a d × d array
        aV, aO = np.abs(att.W_V[h].astype(np.float64)), np.abs(att.W_O[h].astype(np.float64))
        A = A + absmm(absmm(absmm(w_bar[h][None, :], X_all), aV), aO)[0]
        A_w = A_w + absmm(absmm(absmm(e_w[h][None, :], X_all), aV), aO)[0]
    return A, up(A_w * (1 + gK), 2)


def _weight_bounds(plan: AdditivePlan, u: float, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """``(w̄, e_w)``, each ``(H, T)``: an upper bound on every attention weight and on its computed values'
    distance from it (exactly 1/T and 0 for uniform attention; an interval softmax or a certified argmax
    around the scores otherwise)."""
    att = plan.model.layers[0].attention
    assert att is not None
    T = plan.T
    w = np.asarray(plan.weights, dtype=np.float64)  # (H, T)
    if att.kind == "uniform":
        return np.full_like(w, 1.0 / T), np.zeros_like(w)
    scores, delta = _score_bounds(plan.model, T, u, eta)
    visible = np.ones((att.heads, T), dtype=bool)
    if att.kind == "softmax":
        err = softmax_weight_error(scores, delta, w, visible, rel=gamma(T + 8, u))
    else:
        err = hard_weight_error(scores, delta, visible)
    e_w = up(2.0 * err, 1)  # |ŵ_tables − w| and |ŵ_forward − w| are both within 2·err
    return np.minimum(up(w + err, 1), 1.0), e_w


def _score_bounds(model: Model, T: int, u: float, eta: float) -> tuple[np.ndarray, np.ndarray]:
    """The attention scores ``(H, T)`` at the last position and a bound on their rounding (both 0 without
    position embeddings: the heads read only position coordinates)."""
    att = model.layers[0].attention
    assert att is not None and att.W_Q is not None and att.W_K is not None
    H, d, P = att.heads, model.d, model.position_embedding
    delta = np.zeros((H, T))
    scores = np.zeros((H, T))
    if P is not None:
        aP = np.abs(P[:T].astype(np.float64))
        beta = abs(float(att.inverse_temperature))
        for h in range(H):
            aq = absmm(aP[T - 1], np.abs(att.W_Q[h].astype(np.float64)))
            ak = absmm(aP, np.abs(att.W_K[h].astype(np.float64)))
            dot_abs = absmm(ak, aq[:, None])[:, 0]
            n = 2 * d + att.W_Q.shape[2] + 4
            # THE forward's scores in the working precision (and the tables' in float64, a smaller u)
            delta[h] = up(2.0 * (beta * (1 + u) * (gamma(n, u) * dot_abs + n * eta)
                                 + 2 * u * beta * dot_abs + eta), 8)
            q = P[T - 1].astype(np.float64) @ att.W_Q[h]
            k = P[:T].astype(np.float64) @ att.W_K[h]
            scores[h] = att.inverse_temperature * (k @ q)
    return scores, delta


def _read_terms(plan: AdditivePlan, y: np.ndarray, A_w: np.ndarray,
                gK: float) -> tuple[np.ndarray, np.ndarray]:
    """``v``, the magnitude of the read residual on the read columns, and ``e_v``, the bound on its rounding,
    from the magnitude ``y`` of the residual after attention (through the MLP when there is one)."""
    mlp, cols = plan.model.layers[0].mlp, plan.columns
    if mlp is None:
        v = y[cols]
        return v, up(gK * v + A_w[cols], 2)
    absW1 = np.abs(mlp.W1.astype(np.float64))
    absW2 = np.abs(mlp.W2[:, cols].astype(np.float64))
    p = up(absmm(y[None, :], absW1)[0] + np.abs(mlp.b1.astype(np.float64)), 1)
    e_p = up(gK * p + absmm(A_w[None, :], absW1)[0], 2)
    v = up(y[cols] + absmm((p + e_p)[None, :], absW2)[0] + np.abs(mlp.b2[cols].astype(np.float64)), 2)
    return v, up(gK * v + A_w[cols] + absmm(e_p[None, :], absW2)[0], 3)


def _margin_rounding(model: Model, cols: np.ndarray, v: np.ndarray, e_v: np.ndarray, u: float,
                     eta: float) -> float:
    """The bound on a margin's rounding: twice the largest logit's, ``γ_n·(v + e_v)·|U_j| + e_v·|U_j|`` over
    the ``n`` read columns, plus ``2n·η`` for underflow."""
    n = cols.size
    g_n = gamma(n, u)
    weight = up(g_n * (v + e_v) + e_v, 2)
    U_read = model.unembedding_on(cols)
    top = float(_scan(U_read, lambda acc, b: max(acc, float((np.abs(b.astype(np.float64)) @ weight).max(
        initial=0.0))), 0.0))
    return float(up(2.0 * (up(top, n) + n * eta), 2))
