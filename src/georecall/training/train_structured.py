"""The structure-aware training step for one-layer single-hop models (issue 14; docs/training.md).

A single-hop query is the two tokens ``⟨r, s⟩`` (relation token ``N + r`` at position 0, subject ``s`` at
position 1) and the answer is read at position 1. For a **one-layer** model whose attention is **uniform** (or
absent), everything before the first nonlinearity is a sum of a per-entity and a per-relation term. With
``M = Σ_h W_V[h] W_O[h]`` (``M = 0`` without attention) and position rows ``p_0, p_1`` (0 without positions),

.. math::

    x_{mid} = E_s + p_1 + \\tfrac12 (Q_r + p_0 + E_s + p_1) M = A^E_s + A^Q_r,
    \\qquad A^E = E + \\tfrac12 E M, \\quad A^Q = \\tfrac12 Q M + p_1 + \\tfrac12 (p_0 + p_1) M,

so the MLP's pre-activation is ``x_mid W1 + b1 = P^E_s + P^Q_r`` with the tables ``P^E = A^E W1`` (one row per
entity *in the batch*) and ``P^Q = A^Q W1 + b1`` (R rows), computed once per step: ``U_s·d·m + R·d·m``
multiply-adds instead of ``B·d·m`` (``U_s`` = distinct subjects of the batch, ``≤ min(N, B)``).

**Backward.** With ``g = ∂L/∂y`` at the MLP output and ``δ = (g W2^T) ⊙ [h > 0]`` at the pre-activation, the
B-row products through the first layer become scatter-adds into the tables:

.. math::

    G^E = \\mathrm{scatter}_s(δ),\\; G^Q = \\mathrm{scatter}_r(δ),\\quad
    ∂W_1 = A^{E\\top} G^E + A^{Q\\top} G^Q,\\quad ∂b_1 = Σ_r G^Q_r,

    ∂A^E = G^E W_1^\\top + \\mathrm{scatter}_s(g),\\quad ∂A^Q = G^Q W_1^\\top + \\mathrm{scatter}_r(g),

    ∂E = ∂A^E + \\tfrac12 ∂A^E M^\\top,\\quad ∂Q = \\tfrac12 ∂A^Q M^\\top,\\quad
    ∂M = \\tfrac12 (E^\\top ∂A^E + Q^\\top ∂A^Q + (p_0 + p_1)^\\top Σ_r ∂A^Q_r),

    ∂W_V[h] = ∂M\\, W_O[h]^\\top,\\quad ∂W_O[h] = W_V[h]^\\top ∂M,\\quad
    ∂p_1 = σ + \\tfrac12 σ M^\\top,\\quad ∂p_0 = \\tfrac12 σ M^\\top \\;(σ = Σ_r ∂A^Q_r).

Every identity is the chain rule through ``x_mid = A^E_s + A^Q_r`` (sums over the batch regrouped by subject
or by relation), so the gradients equal the dense ones (:func:`.backward.loss_and_grads`) up to
floating-point rounding; ``tests/test_train_structured.py`` checks this on random models.

The second MLP layer, the read-out and the cross-entropy are per query and stay B-row products. The read-out
is fused and processed in row blocks of bounded size (:func:`readout_cross_entropy`); the queries are
sorted by relation inside the step (the mean loss does not depend on the order) so that the per-relation terms
are added over contiguous row ranges. The entity and relation tables are stacked (``[A^E; A^Q]``,
``[G^E; G^Q]``) so that each product above is one call, and both scatters are one sparse one-hot product.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.training.groups import group_of

__all__ = ["READOUT_CHUNK_BYTES", "SOFTMAX_BLOCK_BYTES", "loss_and_grads_structured", "readout_cross_entropy",
           "run_parallel", "structure_reason"]

# Bytes of the (rows × n_out) logits block processed at once (4096 rows at n_out = 4096 in float32): it bounds
# memory for full-batch steps; larger blocks make fewer, faster matrix products (the element-wise passes work
# through the block in cache-sized sub-blocks of SOFTMAX_BLOCK_BYTES).
READOUT_CHUNK_BYTES = 64 * 2**20
SOFTMAX_BLOCK_BYTES = 2**20


def structure_reason(model: Model, tokens: np.ndarray, positions=None) -> str | None:
    """Why the structure-aware step does not apply to (model, tokens), or ``None`` when it does.

    It applies to one-layer models with an MLP and uniform (or no) attention, trained on two-token single-hop
    queries ``⟨N + r, s⟩`` read at the last position (``positions=None``).

    Parameters
    ----------
    model : Model
        The model to be trained.
    tokens : ndarray of int (B, 2)
        The queries, ``[N + r, s]`` per row.
    positions : ndarray, optional
        Teacher-forcing read positions (:func:`.train.train`); anything but None: the step does not apply.

    Returns
    -------
    str or None
        The first reason it does not apply, in words, or None when it does.
    """
    if positions is not None:
        return "answers are read at several positions (teacher forcing)"
    if len(model.layers) != 1:
        return f"the model has {len(model.layers)} layers (the structured step needs exactly one)"
    layer = model.layers[0]
    if layer.mlp is None:
        return "the layer has no MLP"
    if layer.attention is not None and layer.attention.kind != "uniform":
        return f"{layer.attention.kind} attention mixes the two tokens non-linearly (needs uniform or none)"
    tokens = np.asarray(tokens)
    if tokens.ndim != 2 or tokens.shape[1] != 2:
        return f"queries have shape {tokens.shape}, not (B, 2) = ⟨r, s⟩"
    N, R = model.n_entities, model.n_relations
    if tokens.size and not (np.all((tokens[:, 0] >= N) & (tokens[:, 0] < N + R))
                            and np.all((tokens[:, 1] >= 0) & (tokens[:, 1] < N))):
        return "queries are not ⟨relation, entity⟩ token pairs"
    return None


def _scatter_matrix(rows: np.ndarray, columns: np.ndarray, shape: tuple[int, int], dtype) -> sparse.spmatrix:
    """The 0/1 matrix ``S`` of ``shape`` with ``S[rows[i], columns[i]] = 1``: ``S @ X`` sums rows of X."""
    return sparse.csr_matrix((np.ones(rows.size, dtype=dtype), (rows, columns)), shape=shape)


# Element-wise work on large arrays runs on a few threads (NumPy releases the GIL inside its loops).
_POOL: list = []


def run_parallel(fn, tasks: list) -> list:
    """``[fn(task) for task in tasks]``, on a small thread pool when there are several tasks.

    Each task must touch only its own data, so the results are those of the loop, bit for bit. The pool (at
    most four threads, at most the CPU count) is created on first use and kept for the process.

    Parameters
    ----------
    fn : callable
        Applied to each task.
    tasks : list
        The arguments, one call each.

    Returns
    -------
    list
        ``fn(task)`` for each task, in order.
    """
    if len(tasks) < 2:
        return [fn(task) for task in tasks]
    if not _POOL:
        from concurrent.futures import ThreadPoolExecutor
        _POOL.append(ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))))
    return list(_POOL[0].map(fn, tasks))


def _halves(k: int, min_rows: int = 64) -> list[tuple[int, int]]:
    if k < 2 * min_rows:
        return [(0, k)]
    return [(0, k // 2), (k // 2, k)]


def _softmax_rows(task):
    """In place on a logits block ``z``: ``z ← exp(max(z − z*, −60)) − Σ·onehot(answer)`` with the row sums
    ``Σ`` of the exponentials; returns (argmax, z_answer − z*, Σ). Works through the block in sub-blocks of
    ``SOFTMAX_BLOCK_BYTES``, so that its five passes after the first read from cache (per row the arithmetic
    is the same, so the result does not depend on the sub-block size)."""
    z, answers = task
    n, width = z.shape
    best = np.empty(n, dtype=np.int64)
    picked = np.empty(n, dtype=z.dtype)
    total = np.empty(n, dtype=z.dtype)
    sub = max(1, SOFTMAX_BLOCK_BYTES // max(1, z.itemsize * width))
    floor = z.dtype.type(-60.0)
    for a in range(0, n, sub):
        b = min(n, a + sub)
        zz, idx, ans = z[a:b], np.arange(b - a), answers[a:b]
        arg = zz.argmax(axis=1)
        top = zz[idx, arg]
        picked[a:b] = zz[idx, ans] - top
        zz -= top[:, None]
        np.maximum(zz, floor, out=zz)
        np.exp(zz, out=zz)
        row_sum = zz.sum(axis=1)
        zz[idx, ans] -= row_sum  # P − Σ·onehot(answer): then dz = c·z with c = 1/(nΣ)
        best[a:b] = arg
        total[a:b] = row_sum
    return best, picked, total


def readout_cross_entropy(y: np.ndarray, U: np.ndarray, answers: np.ndarray, want_U: bool,
                          chunk_rows: int | None = None):
    """Fused read-out, mean cross-entropy and its backward, in row chunks.

    The chunks have ``chunk_rows`` rows (default: a block of ``READOUT_CHUNK_BYTES``, at least 256 rows: one
    block for a 4096-query batch at ``n_out = 4096`` in float32, since fewer and larger matrix products run
    faster); the element-wise part of each chunk is split over two threads (chunks of 128 rows or more) and
    walked through in cache-sized sub-blocks.

    For each chunk of rows: ``z = y U^T``; the argmax (prediction) and its value ``z*``; ``P = exp(z − z*)``
    (in place); ``Σ = Σ_j P_j``; the loss terms ``log Σ − (z_answer − z*)``. The gradient w.r.t. the logits is
    ``dz = c·P − onehot(answer)/n = c·(P − Σ·onehot(answer))`` with ``c = 1/(nΣ)`` per row, so the block is
    turned into ``P' = P − Σ·onehot(answer)`` by one write per row, and ``∂y = c·(P' U)``,
    ``∂U += P'^T (c·y)``: two products, no scatter. Shifted logits below ``−60`` (so ``P < 1e-26``, far
    below the resolution of a row sum ``Σ ≥ 1``) are clamped there before ``exp``, which keeps ``P`` out of
    the subnormal range where products run several times slower. The clamp changes each wrong-class entry
    of ``dz`` by less than ``c·e^−60`` (absolute): the loss, predictions and every gradient whose size is
    above that are unchanged up to rounding, but in a batch where every wrong-class probability is below
    ``e^−60`` the gradients are themselves of that order and the clamped ones (≈ ``e^−60``·|U|/n) are
    larger than the exact ones (1e-35 … 1e-71), not equal to them. Such gradients are far below Adam's ε,
    so training is unaffected.

    Parameters
    ----------
    y : ndarray (n, d)
        The final residual at the read-out position, one row per query; its dtype is the computation's.
    U : ndarray (n_out, d)
        The dense read-out (cast to y's dtype).
    answers : ndarray of int (n,)
        The correct answer of each row.
    want_U : bool
        Whether to compute ``∂L/∂U``.
    chunk_rows : int, optional
        Rows per chunk (default from :data:`READOUT_CHUNK_BYTES`).

    Returns
    -------
    loss : float
        The mean cross-entropy over the n rows (the log-sums added in float64).
    predictions : ndarray of int64 (n,)
        The argmax of each row's logits.
    dy : ndarray (n, d)
        ``∂L/∂y``.
    dU : ndarray (n_out, d) or None
        ``∂L/∂U`` when ``want_U``, else None.
    """
    n = y.shape[0]
    dtype = y.dtype
    U = U.astype(dtype, copy=False)
    UT = U.T
    if chunk_rows is None:
        chunk_rows = max(256, READOUT_CHUNK_BYTES // (y.itemsize * U.shape[0]))
    rows_max = max(1, min(chunk_rows, n))
    block = np.empty((rows_max, U.shape[0]), dtype=dtype)
    dy = np.empty_like(y)
    dU = np.empty_like(U) if want_U else None
    partial = np.empty_like(U) if want_U else None
    predictions = np.empty(n, dtype=np.int64)
    loss = 0.0
    inv_n = 1.0 / n
    for start in range(0, n, rows_max):
        stop = min(n, start + rows_max)
        k = stop - start
        z = block[:k]
        np.matmul(y[start:stop], UT, out=z)
        halves = [(z[a:b], answers[start + a : start + b]) for a, b in _halves(k)]  # element-wise in parallel
        parts = run_parallel(_softmax_rows, halves)
        predictions[start:stop] = np.concatenate([p[0] for p in parts])
        total = np.concatenate([p[2] for p in parts])
        loss += float(np.sum(np.log(total.astype(np.float64)))) - sum(float(np.sum(p[1])) for p in parts)
        scale = (inv_n / total).astype(dtype)
        part = dy[start:stop]
        np.matmul(z, U, out=part)
        part *= scale[:, None]
        if dU is not None and partial is not None:  # both allocated exactly when want_U
            scaled = y[start:stop] * scale[:, None]
            if start == 0:
                np.matmul(z.T, scaled, out=dU)
            else:
                np.matmul(z.T, scaled, out=partial)
                dU += partial
    return loss * inv_n, predictions, dy, dU


def _trains(frozen: frozenset[str], key: str) -> bool:
    """Whether the parameter ``key`` gets a gradient (its group is not in ``frozen``)."""
    return group_of(key) not in frozen


@dataclass(frozen=True)
class _SortedBatch:
    """A batch sorted by relation, and the distinct subjects it asks about."""

    order: np.ndarray  # the sort (the predictions are put back in the batch's order by it)
    relation: np.ndarray  # each sorted query's relation r
    answers: np.ndarray  # each sorted query's answer
    segments: list[tuple[int, int, int]]  # (r, start, stop): the rows of relation r, for each r present
    entities: np.ndarray  # the distinct subjects (U_s of them)
    inverse: np.ndarray  # each sorted query's subject, as a row of ``entities``
    E_batch: np.ndarray  # their embeddings


def _sort_batch(model: Model, tokens: np.ndarray, answers: np.ndarray) -> _SortedBatch:
    """The queries grouped by relation (contiguous row ranges) and their distinct subjects."""
    E = model.entity_embedding
    N, R = model.n_entities, model.n_relations
    tokens = np.asarray(tokens)
    answers = np.asarray(answers)
    B = tokens.shape[0]
    relation = tokens[:, 0] - N
    order = np.argsort(relation, kind="stable")  # group the queries by relation: contiguous row ranges
    relation, subject, answers = relation[order], tokens[order, 1], answers[order]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(relation, minlength=R))])
    segments = [(j, int(bounds[j]), int(bounds[j + 1])) for j in range(R) if bounds[j + 1] > bounds[j]]
    if B == N * R and np.array_equal(np.bincount(subject, minlength=N), np.full(N, R)):
        entities, inverse = np.arange(N), subject  # every entity present: no gather of E
        E_batch = E
    else:
        entities, inverse = np.unique(subject, return_inverse=True)
        E_batch = E[entities]
    return _SortedBatch(order, relation, answers, segments, entities, inverse, E_batch)


def _input_tables(model: Model, E_batch: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """The stacked inputs X = [E_batch; Q], their pre-MLP terms A = [A^E; A^Q], and M = Σ_h W_V W_O."""
    dtype = model.entity_embedding.dtype
    half = dtype.type(0.5)
    U_s = E_batch.shape[0]
    att = model.layers[0].attention
    X = np.concatenate([E_batch, model.relation_embedding])
    P = model.position_embedding
    if att is not None:
        M = att.value_outputs.sum(axis=0).astype(dtype, copy=False)
        A = X @ M
        A *= half
        A[:U_s] += E_batch
        if P is not None:
            A[U_s:] += P[1] + ((P[0] + P[1]) @ M) * half
    else:
        M = None  # no attention: M = 0
        A = np.zeros_like(X)
        A[:U_s] = E_batch
        if P is not None:
            A[U_s:] = P[1]
    return X, A, M


def _structured_forward(A: np.ndarray, mlp, batch: _SortedBatch) -> tuple[np.ndarray, np.ndarray]:
    """The MLP's hidden h = ReLU(P^E[s] + P^Q[r]) and the residual y = A^E[s] + A^Q[r] + h W2 + b2."""
    U_s = batch.entities.size
    tables = A @ mlp.W1
    tables[U_s:] += mlp.b1
    h = np.take(tables, batch.inverse, axis=0)
    for j, a, b in batch.segments:
        h[a:b] += tables[U_s + j]
    np.maximum(h, 0, out=h)
    y = h @ mlp.W2
    y += np.take(A, batch.inverse, axis=0)
    shift = A[U_s:] + mlp.b2
    for j, a, b in batch.segments:
        y[a:b] += shift[j]
    return h, y


def _input_grads(model: Model, batch: _SortedBatch, X: np.ndarray, M: np.ndarray | None, dA: np.ndarray,
                 frozen: frozenset[str]) -> dict[str, np.ndarray]:
    """The gradients of E, Q, attention and position rows (those trained) from dA = [∂A^E; ∂A^Q]."""
    E, P = model.entity_embedding, model.position_embedding
    att = model.layers[0].attention
    dtype = E.dtype
    half = dtype.type(0.5)
    N, U_s = model.n_entities, batch.entities.size
    grads: dict[str, np.ndarray] = {}
    sigma = dA[U_s:].sum(axis=0)
    if M is None:
        dX = np.zeros_like(dA)
    else:
        dX = dA @ M.T
        dX *= half
    dX[:U_s] += dA[:U_s]  # [∂E_batch; ∂Q]
    if _trains(frozen, "entity_embedding"):
        if U_s == N:
            grads["entity_embedding"] = dX[:U_s]
        else:
            dE = np.zeros_like(E)
            dE[batch.entities] = dX[:U_s]
            grads["entity_embedding"] = dE
    if _trains(frozen, "relation_embedding"):
        grads["relation_embedding"] = dX[U_s:]
    if att is not None and _trains(frozen, "attention"):
        dM = X.T @ dA
        if P is not None:
            dM += np.outer(P[0] + P[1], sigma)
        dM *= half
        grads["layers.0.attention.W_V"] = np.einsum("ij,hkj->hik", dM, att.W_O).astype(dtype, copy=False)
        grads["layers.0.attention.W_O"] = np.einsum("hji,jk->hik", att.W_V, dM).astype(dtype, copy=False)
    if P is not None and _trains(frozen, "position_embedding"):
        dP = np.zeros_like(P)
        through = (sigma @ M.T) * half if M is not None else np.zeros_like(sigma)
        dP[0] = through
        dP[1] = sigma + through
        grads["position_embedding"] = dP
    return grads


def loss_and_grads_structured(model: Model, tokens: np.ndarray, answers: np.ndarray,
                              frozen: frozenset[str] = frozenset(), *, chunk_rows: int | None = None):
    """Mean cross-entropy and gradients of a one-layer single-hop model through the structured step.

    Same contract as the dense :func:`.backward.loss_and_grads` with ``positions=None``: returns
    ``(loss, grads, predictions)``, predictions in the order of ``tokens``, one gradient per parameter whose
    group is not in ``frozen``. The caller must have checked :func:`structure_reason` (it is not re-checked
    here, so that a training loop pays for it once). Computes in the model's dtype.

    Parameters
    ----------
    model : Model
        A one-layer model with a dense read-out for which :func:`structure_reason` is None.
    tokens : ndarray of int (B, 2)
        The batch's queries ``[N + r, s]``.
    answers : ndarray of int (B,)
        Their answers.
    frozen : frozenset of str
        Parameter groups (``train.GROUPS``) that get no gradient.
    chunk_rows : int, optional
        Rows per chunk of the read-out (:func:`readout_cross_entropy`).

    Returns
    -------
    loss : float
        The batch's mean cross-entropy.
    grads : dict of str to ndarray
        ``parameter key -> gradient`` (e.g. ``"layers.0.mlp.W1"``), for every parameter not frozen.
    predictions : ndarray of int64 (B,)
        The argmax answers, in the order of ``tokens``.

    Raises
    ------
    InputError
        A model with a compact read-out (``model.with_dense_readout()`` first).
    """
    if model.compact:
        raise InputError("the structured step trains a dense read-out: use model.with_dense_readout() "
                         "(train() does)")
    dtype = model.entity_embedding.dtype
    R = model.n_relations
    mlp, att = model.layers[0].mlp, model.layers[0].attention
    assert mlp is not None  # the caller checked structure_reason, which requires an MLP
    batch = _sort_batch(model, tokens, answers)
    X, A, M = _input_tables(model, batch.E_batch)
    h, y = _structured_forward(A, mlp, batch)
    loss, predictions, g, dU = readout_cross_entropy(y, model.unembedding, batch.answers,
                                                     _trains(frozen, "unembedding"), chunk_rows)
    del y
    grads: dict[str, np.ndarray] = {}
    if dU is not None:
        grads["unembedding"] = dU
    # ---- backward through the MLP
    want_mlp = _trains(frozen, "mlp")
    if want_mlp:
        grads["layers.0.mlp.W2"] = h.T @ g
        grads["layers.0.mlp.b2"] = g.sum(axis=0)
    delta = g @ mlp.W2.T
    delta *= h > 0
    del h
    # one sparse product scatters by subject and by relation: G = [G^E; G^Q] = [S_s; S_r] δ
    U_s, B = batch.entities.size, batch.relation.size
    scatter = _scatter_matrix(np.concatenate([batch.inverse, U_s + batch.relation]), np.tile(np.arange(B), 2),
                              (U_s + R, B), dtype)
    G = scatter @ delta
    del delta
    if want_mlp:
        grads["layers.0.mlp.W1"] = np.ascontiguousarray((G.T @ A).T)  # fewer thread syncs in OpenBLAS
        grads["layers.0.mlp.b1"] = G[U_s:].sum(axis=0)
    # ---- backward to the inputs, when some of them are trained
    if (_trains(frozen, "entity_embedding") or _trains(frozen, "relation_embedding")
            or (att is not None and _trains(frozen, "attention"))
            or (model.position_embedding is not None and _trains(frozen, "position_embedding"))):
        dA = G @ mlp.W1.T  # [∂A^E; ∂A^Q]
        dA += scatter @ g
        grads.update(_input_grads(model, batch, X, M, dA, frozen))
    return loss, grads, _unsorted(predictions, batch.order)


def _unsorted(values: np.ndarray, order: np.ndarray) -> np.ndarray:
    out = np.empty_like(values)
    out[order] = values
    return out

