"""The token-additive pass itself (the plan and its bounds are :mod:`.additive`'s): the read residual ``v`` of
every query, summed from the plan's per-(position, token) tables.

The last position is computed in *blocks* of token ids, each block's table once (``N·m`` entries in all
instead of ``Q·d·m`` products), and each (group, block) of queries at once: the group's constant rows are
added, the units whose largest pre-activation over the block is ``<= 0`` are skipped (they output exactly 0),
and the live ones go through ReLU and ``W2`` on the read columns. Products with the constructions' sparse
``W1`` and ``W2`` are gathers of rows (:class:`_SparseProduct`), exact in integer mode.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from georecall.verify.checking.additive import AdditivePlan, embedding_rows

__all__ = ["BLOCK_BYTES", "run_additive"]

# Bytes of one block's pre-activation table (m × block tokens); the block size follows from it.
BLOCK_BYTES = 16 * 2**20


class _SparseProduct:
    """``A @ X`` for a fixed ``A (k, s)`` and many ``X (s, c)``: as gathers of rows of X when every row of A
    has few nonzeros (the constructions' W1 and W2 have one or two per unit), else one BLAS product. Exact in
    integer mode (sums of integers below 2^53); in float mode another summation order.

    Gathers: ``out = 0; out += value[k]·X[index[k]]`` for the slots k = 0, 1, … (a row's k-th nonzero; rows
    with fewer are padded with value 0). :meth:`upper` repeats exactly these operations with each ``X`` entry
    replaced by the largest (value >= 0) or smallest (value < 0) entry of its row: floating-point addition and
    multiplication by a constant are monotone, so the result bounds every computed entry of that row of
    ``out`` from above, rounding included.
    """

    def __init__(self, A: np.ndarray, dtype) -> None:
        self.A = np.ascontiguousarray(A, dtype=dtype)
        self.dtype = np.dtype(dtype)
        nnz = np.count_nonzero(self.A, axis=1)
        self.slots = int(nnz.max(initial=0))
        self.sparse = 4 * self.slots <= A.shape[1]
        if self.sparse:
            k = A.shape[0]
            self.index = np.zeros((self.slots, k), dtype=np.intp)
            self.value = np.zeros((self.slots, k), dtype=dtype)
            rows, cols = np.nonzero(self.A)
            rank = np.arange(rows.size) - np.searchsorted(rows, rows)  # position of each nonzero in its row
            self.index[rank, rows] = cols
            self.value[rank, rows] = self.A[rows, cols]
            self.unit = [bool(np.all(self.value[k] == 1)) for k in range(self.slots)]

    def __call__(self, X: np.ndarray, rows: np.ndarray | None = None,
                 cols: slice | np.ndarray | None = None) -> np.ndarray:
        """``A[rows] @ X[:, cols]`` (all rows / columns when None)."""
        if cols is None:
            cols = slice(None)
        if not self.sparse:
            A = self.A if rows is None else self.A[rows]
            return A @ (X[:, cols] if isinstance(cols, slice) else X[:, cols])
        index = self.index if rows is None else self.index[:, rows]
        value = self.value if rows is None else self.value[:, rows]
        if isinstance(cols, slice):
            X = X[:, cols]
            width = X.shape[1]
        else:
            width = cols.size
        if self.slots == 0:
            return np.zeros((index.shape[1], width), dtype=X.dtype)
        out = None
        for k in range(self.slots):  # out = v_0·x_0 (= 0 + v_0·x_0 exactly), then out += v_k·x_k
            gathered = X[index[k]] if isinstance(cols, slice) else X[index[k]][:, cols]
            if not self.unit[k]:
                gathered *= value[k][:, None]
            if out is None:
                out = gathered
            else:
                out += gathered
        assert out is not None
        return out

    def upper(self, row_max: np.ndarray, row_min: np.ndarray) -> np.ndarray:
        """An upper bound on every entry of each row of ``A @ X`` given the row maxima / minima of X."""
        out = np.zeros(self.index.shape[1], dtype=self.dtype)
        for k in range(self.slots):
            v = self.value[k]
            term = np.where(v >= 0, v * row_max[self.index[k]], v * row_min[self.index[k]])
            out = term if k == 0 else out + term
        return out


def _group_keys(plan: AdditivePlan, token_columns: Sequence[np.ndarray], lo: int, block: int, n_blocks: int,
                V: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query: key = group·n_blocks + block of its last token, where group is the mixed-radix number of its
    tokens at the group positions (the first one most significant); and the radix of each group position."""
    Q = len(token_columns[-1])
    n_groups = 1
    luts, radix = [], []
    for tokens in reversed(plan.group_tokens):  # the first group position is the most significant digit
        lut = np.full(V, -1, dtype=np.int64)
        lut[tokens] = np.arange(tokens.size)
        luts.append(lut)
        radix.append(n_groups)
        n_groups *= tokens.size
    luts.reverse()
    radix.reverse()
    key = np.empty(Q, dtype=np.uint16 if n_groups * n_blocks <= 2**16 else np.int64)
    step = 2**20
    last = token_columns[-1]
    for start in range(0, Q, step):
        part = slice(start, min(Q, start + step))
        group = np.zeros(part.stop - part.start, dtype=np.int64)
        for u, lut, r in zip(plan.group_positions, luts, radix):
            group += lut[token_columns[u][part]] * r
        key[part] = group * n_blocks + (np.asarray(last[part], dtype=np.int64) - lo) // block
    return key, np.array(radix, dtype=np.int64)


def run_additive(plan: AdditivePlan, token_columns: Sequence[np.ndarray],
                 consume: Callable[[slice | np.ndarray, np.ndarray], None], *, block_bytes: int = BLOCK_BYTES,
                 progress: bool = False) -> dict:
    """Compute ``v`` (the read residual) of every query and hand it over as ``consume(queries, v)``.

    ``queries`` is a slice or an ascending index array into the Q queries; ``v`` has shape ``(len, D)``.
    Every query is handed over exactly once.

    Parameters
    ----------
    plan : AdditivePlan
        From :func:`.additive.plan_additive` on the same token columns.
    token_columns : sequence of numpy.ndarray
        The T token columns, each an integer array ``(Q,)`` of ids in ``[0, N + R)``.
    consume : callable
        ``consume(queries, v)``, called once per (group, block) of queries: ``v`` is ``(len(queries), D)``
        in ``plan.dtype`` (a transposed view; ``D = plan.columns.size``), the read residual on
        ``plan.columns``.
    block_bytes : int
        Bytes of one block's pre-activation table; a block holds ``block_bytes // (8·max(m, D, 1))``
        consecutive token ids at the last position (at least one).
    progress : bool
        Print the block count on stderr.

    Returns
    -------
    dict of str to int
        ``"groups"``: (group, block) pairs handed over; ``"blocks"``: blocks of last tokens; ``"units"``:
        MLP units examined (m per pair, with an MLP); ``"live_units"``: those not skipped (some
        pre-activation over the pair may be > 0). All 0 when ``Q == 0``.

    Raises
    ------
    ValueError
        Not ``plan.T`` columns, a column not of shape ``(Q,)``, or a token id outside ``[0, N + R)``.
    """
    Q = _checked_queries(plan, token_columns)
    stats = {"groups": 0, "blocks": 0, "units": 0, "live_units": 0}
    if Q == 0:
        return stats
    layout = _layout(plan, token_columns, block_bytes)
    tables = _Tables(plan, layout.radix, stats)
    last = token_columns[-1]
    for bi, b in enumerate(sorted(layout.by_block)):
        b0 = layout.lo + b * layout.block
        block = tables.block(b0, min(layout.hi, b0 + layout.block))
        stats["blocks"] += 1
        for group, s, e in layout.by_block[b]:
            idx = slice(s, e) if layout.order is None else layout.order[s:e]
            vT = tables.residual(block, group, layout.span(last, idx, s, e, b0))
            stats["groups"] += 1
            consume(idx, vT.T)
        if progress and len(layout.by_block) > 1 and bi % 8 == 0:
            print(f"\r  tables: block {bi + 1}/{len(layout.by_block)}", end="", file=sys.stderr, flush=True)
    if progress and len(layout.by_block) > 1:
        print(file=sys.stderr)
    return stats


def _checked_queries(plan: AdditivePlan, token_columns: Sequence[np.ndarray]) -> int:
    """The number Q of queries, once every token column is checked to be ``(Q,)`` ids in ``[0, N + R)``
    (ValueError otherwise) and there are ``plan.T`` of them."""
    V = plan.model.n_entities + plan.model.n_relations
    Q = len(token_columns[-1])
    if len(token_columns) != plan.T:
        raise ValueError(f"plan is for T = {plan.T} tokens, got {len(token_columns)} columns")
    for u, column in enumerate(token_columns):
        column = np.asarray(column)
        if column.shape != (Q,):
            raise ValueError(f"token column {u} has shape {column.shape}, expected ({Q},)")
        if Q and (column.min() < 0 or column.max() >= V):
            raise ValueError(f"token ids must lie in [0, {V}); column {u} has "
                             f"[{column.min()}, {column.max()}]")
    return Q


@dataclass
class _Layout:
    """How the queries fall into (group, block) pairs: blocks of ``block`` consecutive last-token ids from
    ``lo`` up to ``hi``; per block its pairs as ``(group, start, end)``, ranges of the queries taken in
    ``order`` (None: their own order); the radix of each group position; and ``steps``, the running count of
    last tokens one above their predecessor (contiguity in O(1); None when the queries are reordered)."""

    lo: int
    hi: int
    block: int
    radix: np.ndarray
    order: np.ndarray | None
    steps: np.ndarray | None
    by_block: dict[int, list[tuple[int, int, int]]]

    def span(self, last: np.ndarray, idx: slice | np.ndarray, s: int, e: int, b0: int) -> slice | np.ndarray:
        """The last tokens of the range ``[s, e)`` (the queries ``idx``) as positions in the block from
        ``b0``: a slice when they are consecutive ids, else an index array."""
        if self.steps is not None and self.steps[e - 1] - self.steps[s] == e - s - 1:
            first = int(last[s]) - b0  # last tokens l, l + 1, ..., l + n − 1
            return slice(first, first + e - s)
        return np.asarray(last[idx], dtype=np.int64) - b0


def _layout(plan: AdditivePlan, token_columns: Sequence[np.ndarray], block_bytes: int) -> _Layout:
    """The (group, block) layout of at least one query (:class:`_Layout`), blocks sized from
    ``block_bytes``."""
    model = plan.model
    Q = len(token_columns[-1])
    mlp = model.layers[0].mlp
    m = 0 if mlp is None else mlp.width
    last = token_columns[-1]
    lo, hi = int(np.min(last)), int(np.max(last)) + 1
    block = max(1, block_bytes // (8 * max(m, plan.columns.size, 1)))
    n_blocks = -(-(hi - lo) // block)
    key, radix = _group_keys(plan, token_columns, lo, block, n_blocks, model.n_entities + model.n_relations)
    order, keys, starts, ends = _key_ranges(key)
    del key
    steps = None
    if order is None and Q > 1:  # steps[i] = #{j < i : last[j + 1] == last[j] + 1}: contiguity in O(1)
        steps = np.zeros(Q, dtype=np.int32 if Q < 2**31 else np.int64)
        for start in range(0, Q - 1, 2**20):
            stop = min(Q - 1, start + 2**20)
            ahead, here = np.asarray(last[start + 1 : stop + 1]), np.asarray(last[start:stop])
            steps[start + 1 : stop + 1] = ahead - here == 1
        np.cumsum(steps, out=steps)
    by_block: dict[int, list[tuple[int, int, int]]] = {}
    for k, s, e in zip(keys.tolist(), starts.tolist(), ends.tolist()):
        by_block.setdefault(k % n_blocks, []).append((k // n_blocks, s, e))
    return _Layout(lo, hi, block, radix, order, steps, by_block)


def _key_ranges(key: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray]:
    """The distinct keys, ascending, each with the range ``[start, end)`` of its queries in an order: None
    (the queries' own) when the keys are already sorted, else a stable sort by key."""
    Q = key.size
    ordered = bool(np.all(key[1:] >= key[:-1])) if Q > 1 else True
    if ordered:  # e.g. the canonical query order: every (group, block) is a contiguous range of queries
        starts = np.concatenate([[0], np.flatnonzero(key[1:] != key[:-1]) + 1])
        ends = np.concatenate([starts[1:], [Q]])
        return None, key[starts].astype(np.int64), starts, ends
    order = np.argsort(key, kind="stable")
    counts = np.bincount(key, minlength=int(key.max()) + 1)
    keys = np.flatnonzero(counts)
    ends = np.cumsum(counts)[keys]
    return order, keys, ends - counts[keys], ends


@dataclass
class _Block:
    """One block of last-token ids from ``b0``: their embeddings on the rows used, feature-major (``Et``), and
    what is computed from them once: the pre-activations (``table``: one BLAS product for the block; None:
    computed per group by ``pre_product``), an upper bound on each unit's (``colmax``; None without an MLP)
    and the read table (``read_table``, None when it is all zero)."""

    b0: int
    Et: np.ndarray
    pre_product: _SparseProduct | None
    table: np.ndarray | None
    colmax: np.ndarray | None
    read_table: np.ndarray | None


class _Tables:
    """The sums of :func:`run_additive`: each block's tables (:meth:`block`), then each group's read residual
    from them (:meth:`residual`), with the products built once per kind of block and per set of live units,
    and the units counted in ``stats``."""

    def __init__(self, plan: AdditivePlan, radix: np.ndarray, stats: dict[str, int]) -> None:
        self.plan, self.radix, self.stats = plan, radix, stats
        mlp = plan.model.layers[0].mlp
        self.m = 0 if mlp is None else mlp.width
        self.products: dict[str, tuple[_SparseProduct | None, _SparseProduct]] = {}
        self.w2_products: dict[bytes, _SparseProduct] = {}

    def block(self, b0: int, b1: int) -> _Block:
        """The tables of the last-token ids ``[b0, b1)``."""
        plan, model, dtype = self.plan, self.plan.model, self.plan.dtype
        supp_E, supp_Q = plan.info["supp_E"], plan.info["supp_Q"]
        kind = "E" if b1 <= model.n_entities else ("Q" if b0 >= model.n_entities else "EQ")
        rows_used = {"E": supp_E, "Q": supp_Q, "EQ": np.union1d(supp_E, supp_Q)}[kind].astype(np.intp)
        if kind not in self.products:
            Mq = plan.M[plan.T - 1]
            self.products[kind] = (None if Mq is None else _SparseProduct(Mq[rows_used].T, dtype),
                                   _SparseProduct(plan.C[plan.T - 1][rows_used][:, plan.columns].T, dtype))
        pre_product, read_product = self.products[kind]
        if kind == "E":
            emb = model.entity_embedding[b0:b1, rows_used]
        elif kind == "Q":
            emb = model.relation_embedding[b0 - model.n_entities : b1 - model.n_entities, rows_used]
        else:
            emb = embedding_rows(model, np.arange(b0, b1))[:, rows_used]
        Et = np.ascontiguousarray(emb.T, dtype=dtype)  # (supp, block): feature-major
        del emb
        table = colmax = None
        if pre_product is not None:
            if pre_product.sparse:  # units computed per group, live ones only; bound from the row extremes
                colmax = pre_product.upper(Et.max(axis=1, initial=-np.inf), Et.min(axis=1, initial=np.inf))
            else:  # one BLAS product for the whole block; exact column maxima
                table = pre_product(Et)
                colmax = table.max(axis=1)
        read_zero = read_product.sparse and read_product.slots == 0
        read_table = None if read_zero else read_product(Et)  # (D, block)
        return _Block(b0, Et, pre_product, table, colmax, read_table)

    def group_rows(self, group: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The constant read and pre-activation rows of ``group`` (its tokens at the group positions) added to
        the plan's constants (pre: None without an MLP)."""
        plan = self.plan
        g_read = plan.const_read.copy()
        g_pre = None if plan.const_pre is None else plan.const_pre.copy()
        for j in range(len(plan.group_positions)):
            digit = (group // int(self.radix[j])) % plan.group_tokens[j].size
            g_read += plan.group_read[j][digit]
            rows = plan.group_pre[j]
            if g_pre is not None and rows is not None:
                g_pre += rows[digit]
        return g_read, g_pre

    def residual(self, block: _Block, group: int, span: slice | np.ndarray) -> np.ndarray:
        """The read residual ``vT (D, n)`` of the queries of ``group`` whose last tokens are ``b0 + span``."""
        plan, dtype = self.plan, self.plan.dtype
        g_read, g_pre = self.group_rows(group)
        if block.read_table is None:
            n = span.stop - span.start if isinstance(span, slice) else span.size
            vT = np.empty((plan.columns.size, n), dtype=dtype)
            vT[...] = g_read.astype(dtype)[:, None]
        else:
            vT = block.read_table[:, span] + g_read.astype(dtype)[:, None]
        if block.colmax is not None and g_pre is not None and plan.W2_read is not None:
            g = g_pre.astype(dtype)
            # colmax bounds every computed entry of a unit's row, so fl(colmax + g) <= 0 means that every
            # fl(entry + g) <= 0 (monotone rounding): the unit outputs exactly 0 on this whole group.
            live = np.flatnonzero(block.colmax + g > 0)
            self.stats["units"] += self.m
            self.stats["live_units"] += live.size
            if live.size:
                if block.table is not None:
                    hT = block.table[live][:, span]
                else:
                    assert block.pre_product is not None
                    hT = block.pre_product(block.Et, rows=live, cols=span)
                hT += g[live][:, None]
                np.maximum(hT, 0, out=hT)
                live_key = live.tobytes()
                if live_key not in self.w2_products:
                    self.w2_products[live_key] = _SparseProduct(plan.W2_read[live].T, dtype)
                vT += self.w2_products[live_key](hT)
        return vT
