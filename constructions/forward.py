"""THE forward pass: :func:`forward` computes the model's equations (docs/theory.md, "Model") in order, on the
data of ``constructions.model`` and with the arithmetic of ``constructions.arithmetic``; :func:`embed` is its
first line and :class:`Trace` records its intermediates. Its helpers follow it in the order it calls them.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from georecall.constructions.arithmetic import (
    Arithmetic,
    Tracked,
    cast_error,
    matmul_rows,
    pass_arithmetic,
    require_integral,
)
from georecall.constructions.model import Attention, Model
from georecall.constructions.rounding import gamma, hard_weight_error, softmax_weight_error, up
from georecall.errors import InputError

__all__ = ["Trace", "embed", "forward"]


@dataclass
class Trace:
    """Intermediates of one forward pass, recorded when ``trace=True`` (for probes and the trainer).

    ``residual[0]`` is the embedded input; ``residual[2i+1]`` follows layer i's attention, ``residual[2i+2]``
    its MLP; ``hidden[i]`` is layer i's post-ReLU MLP activation. In the last layer, with ``at="last"``, only
    the last position is computed, so those entries have shape ``(B, 1, ·)``.
    """

    residual: list[np.ndarray] = field(default_factory=list)
    hidden: list[np.ndarray | None] = field(default_factory=list)
    attention_weights: list[np.ndarray | None] = field(default_factory=list)


def embed(model: Model, tokens: np.ndarray, dtype=None) -> np.ndarray:
    """Input embeddings ``x_t = [E; Q][token_t] + P[t]``, shape ``(B, T, d)``.

    ``[E; Q][token]`` is the one-hot row of ``token`` times the table ``[E; Q]``; every other term of that
    product is an exact zero, so it equals the row itself in any arithmetic, and the rows are gathered from E
    and Q separately (no one-hot matrix, and no concatenated copy of E: 2.8 GiB for G1 at N = 2^20). The rows
    are cast to ``dtype`` after the gather (exact when widening, as in integer mode); ``P[t]`` is then added
    in ``dtype``.

    Parameters
    ----------
    model : Model
        The weights.
    tokens : numpy.ndarray
        ``(B, T)`` token ids in ``[0, N + R)``.
    dtype : numpy.dtype, optional
        The working dtype (default: the entity table's).

    Returns
    -------
    numpy.ndarray
        ``(B, T, d)``.

    Raises
    ------
    InputError
        ``tokens`` not two-dimensional, an id outside the vocabulary, or a sequence longer than the model's
        positions.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise InputError(f"tokens must have shape (batch, T), got {tokens.shape}")
    vocab = model.n_entities + model.n_relations
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab):
        raise InputError(f"token ids must lie in [0, {vocab}); got range [{tokens.min()}, {tokens.max()}]")
    N = model.n_entities
    x = np.empty(tokens.shape + (model.d,), dtype=model.entity_embedding.dtype if dtype is None else dtype)
    entity = tokens < N
    x[entity] = model.entity_embedding[tokens[entity]]
    relation = ~entity
    x[relation] = model.relation_embedding[tokens[relation] - N]
    if model.position_embedding is not None:
        T = tokens.shape[1]
        if T > model.max_positions:
            raise InputError(f"sequence length {T} exceeds the model's {model.max_positions} positions")
        x = x + model.position_embedding[:T].astype(x.dtype, copy=False)
    return x


def forward(
    model: Model,
    tokens: np.ndarray,
    *,
    at: Literal["last", "all"] = "last",
    integer: bool = False,
    trace: bool = False,
    errors: bool = False,
):
    """THE forward pass: the model's equations (docs/theory.md, "Model"), in order.

    With row vectors and causal attention, for every sequence of ``tokens``::

        x_t    = [E; Q][token_t] + P[t]                                  (embedding)
        y_t    = x_t + Σ_h Σ_{u<=t} a_h(t, u) · x_u W_V[h] W_O[h]        (attention, per layer)
        x_t    = y_t + ReLU(y_t W1 + b1) W2 + b2                         (MLP, per layer)
        logits = x_t U^T                                                 (read-out)

    with ``a_h(t, u) = 1/(t + 1)`` (uniform), ``softmax_u(β·<x_t W_Q[h], x_u W_K[h]>)`` (softmax) or uniform
    over the maximal scores (hard, the β → ∞ idealization). A layer's attention or MLP may be absent. The
    body below is these lines; each speed trick sits in a named helper whose docstring says why it computes
    the plain formula: the embedding gathers rows instead of multiplying one-hot vectors (:func:`embed`),
    the last layer computes only the positions read out (:func:`_rows_read_later`), uniform attention sums
    prefixes once for every head (:func:`_prefix_sums`), ``W_V·W_O`` is formed once per head
    (:attr:`Attention.value_outputs`), every product is one matrix product over the batch
    (:func:`matmul_rows`), the read-out reads only the coordinates ``U`` reads (:attr:`Model.readout`), and
    the working dtype is chosen once (:func:`pass_arithmetic`).

    Parameters
    ----------
    model : Model
        The weights.
    tokens : numpy.ndarray
        Token ids ``(B, T)``: entity ``s`` is ``s``, relation ``r`` is ``N + r``.
    at : {"last", "all"}
        Logits at the last position ``(B, n_out)`` or at every position ``(B, T, n_out)``.
    integer : bool
        Integer mode: compute in float64 and check every attention division is exact. The caller must have
        proved the a-priori bounds with :func:`integer_bounds` (the checker does); the pass is then exact
        integer arithmetic whatever the weights' storage dtype.
    trace : bool
        Also return a :class:`Trace` of the intermediates (for probes and the trainer).
    errors : bool
        Float mode: also return a float64 array of the logits' shape bounding ``|computed − exact|``
        entrywise, where *exact* is this pass in exact real arithmetic of the stored weights: the standard
        forward-error bounds propagated through every operation the pass performs (``constructions.rounding``;
        docs/theory.md, "Sound float mode"). The computed logits are the same as without it. In integer mode
        the bound is 0 (the caller proved exactness).

    Returns
    -------
    numpy.ndarray or tuple
        The logits; with ``errors`` and/or ``trace``, the tuple ``(logits[, bound][, trace])``.

    Raises
    ------
    InputError
        ``at`` not "last" or "all"; token ids outside the vocabulary; a sequence longer than the model's
        positions.
    IntegerModeError
        Integer mode, when an attention division is not exact.
    """
    if at not in ("last", "all"):
        raise InputError(f"at must be 'last' or 'all', got {at!r}")
    op = pass_arithmetic(model, integer=integer, errors=errors)
    x = _embedding(model, tokens, op)                                   # x_t = [E; Q][token_t] + P[t]
    T = x.value.shape[1]
    record = Trace(residual=[x.value]) if trace else None
    for i, layer in enumerate(model.layers):
        rows = _rows_read_later(i, len(model.layers), at, T)
        attended, weights = _attention(layer.attention, x, rows, op, i)  # Σ_h Σ_u a_h(t,u)·x_u W_V[h] W_O[h]
        y = op.plus(x[:, rows], attended)                                # y_t = x_t + Attn(x)_t
        h = None
        if layer.mlp is not None:
            W1, b1, W2, b2 = layer.mlp.W1, layer.mlp.b1, layer.mlp.W2, layer.mlp.b2
            h = op.relu(op.plus_bias(op.times(y, W1), b1))               # h_t = ReLU(y_t W1 + b1)
            x = op.plus_bias(op.plus(y, op.times(h, W2)), b2)            # x_t = y_t + h_t W2 + b2
        else:
            x = y
        if record is not None:
            _record_layer(record, y, weights, h, x)
    if at == "last":
        x = x[:, -1]
    logits = _readout(model, x, op)                                     # logits_t = x_t U^T
    return _returned(logits, errors, record)


# The helpers of THE forward pass, in the order it calls them. Each computes one line of the equations; its
# docstring says what it computes and why it equals the plain formula.


def _embedding(model: Model, tokens: np.ndarray, arithmetic: Arithmetic) -> Tracked:
    """``x_t = [E; Q][token_t] + P[t]`` (:func:`embed`). Bound: the gather is exact, the position sum rounds
    once (``u·|x|``), and a table stored in a wider format than the working dtype (Q or P; E defines the
    working dtype) adds its rows' exact cast errors."""
    x = embed(model, tokens, arithmetic.dtype)
    error = None
    if arithmetic.rounding is not None:
        P = model.position_embedding
        error = arithmetic.rounding.u * np.abs(x.astype(np.float64)) if P is not None else np.zeros(x.shape)
        e_Q = cast_error(model.relation_embedding, x.dtype)
        e_P = None if P is None else cast_error(P[: x.shape[1]], x.dtype)
        if e_Q is not None or e_P is not None:
            tokens = np.asarray(tokens)
            if e_Q is not None:
                relation = tokens >= model.n_entities
                error[relation] += e_Q[tokens[relation] - model.n_entities]
            if e_P is not None:
                error += e_P[None]
            error = up(error, 3)
    return Tracked(x, error)


def _rows_read_later(layer: int, n_layers: int, at: str, T: int) -> slice:
    """The positions whose output of ``layer`` is read later: all of them, except in the last layer with
    ``at="last"``, where only position T − 1 is. Nothing attends to a state after the last layer, so the
    other positions' final states would be computed and dropped: skipping them changes no logit."""
    if layer == n_layers - 1 and at == "last" and T > 1:
        return slice(T - 1, T)
    return slice(0, T)


def _attention(att: Attention | None, x: Tracked, rows: slice, arithmetic: Arithmetic,
               layer: int) -> tuple[Tracked | None, np.ndarray | None]:
    """``Attn(x)_t = Σ_h Σ_{u<=t} a_h(t, u) · x_u W_V[h] W_O[h]`` at the positions ``rows`` given every
    state ``x (B, T, d)``, and the weights ``a_h`` ``(H, B, |rows|, T)`` (None for uniform attention, whose
    weights are ``1/(t + 1)``; both None without attention)."""
    if att is None:
        return None, None
    if att.kind == "uniform":
        return _uniform_attention(att, x, rows, arithmetic, layer), None
    return _scored_attention(att, x, rows, arithmetic)


def _uniform_attention(att: Attention, x: Tracked, rows: slice, arithmetic: Arithmetic,
                       layer: int) -> Tracked:
    """Uniform attention, ``a_h(t, u) = 1/(t + 1)``, computed as ``(Σ_h S_t · (W_V W_O)_h) / (t + 1)`` with
    ``S_t = Σ_{u<=t} x_u``: the plain formula with the mean's linearity used twice (sum the states, then
    multiply; divide once, after the heads' sum), so that with integer weights the only non-integer step is
    one division, checked to be exact in integer mode."""
    positions = np.arange(x.value.shape[1])[rows]
    sums = _prefix_sums(x, rows, arithmetic)                                  # S_t = Σ_{u<=t} x_u
    heads = itertools.repeat(sums, att.heads)
    total = _through_heads(att, heads, x.value.dtype, arithmetic)             # Σ_h S_t (W_V W_O)_h
    out = _divided_by_count(total, positions + 1, arithmetic)                  # / (t + 1)
    if arithmetic.integer:
        require_integral(f"layer {layer} uniform attention output", out.value)
    return out


def _prefix_sums(x: Tracked, rows: slice, arithmetic: Arithmetic) -> Tracked:
    """``S_t = Σ_{u<=t} x_u`` for ``t`` in ``rows``: one cumulative sum over the positions (one plain sum
    when a single position is asked), shared by every head. Bound: a sum of at most T terms in any order,
    ``γ_T·Σ|x_u| + Σ e_u``."""
    T = x.value.shape[1]
    positions = np.arange(T)[rows]

    def prefix(a: np.ndarray) -> np.ndarray:
        if positions.size == 1:  # Σ_{u<=t} x_u for the one position asked
            return a[:, : positions[0] + 1].sum(axis=1, keepdims=True)
        return np.cumsum(a, axis=1)[:, rows]

    sums = prefix(x.value)
    error = None
    if arithmetic.rounding is not None:
        assert x.error is not None
        error = up(gamma(T, arithmetic.rounding.u) * prefix(np.abs(x.value.astype(np.float64)))
                   + prefix(x.error), T)
    return Tracked(sums, error)


def _through_heads(att: Attention, inputs: Iterable[Tracked], dtype: np.dtype,
                   arithmetic: Arithmetic) -> Tracked:
    """``Σ_h z_h · (W_V W_O)_h`` for the per-head inputs ``z_h`` (``(B, P, d)``, taken one head at a time),
    accumulated in the residual's ``dtype``.

    The product ``W_V[h]·W_O[h]`` is formed once per head (:attr:`Attention.value_outputs`, in float64, cast
    to ``dtype``): by associativity ``(z W_V) W_O = z (W_V W_O)``, one product per query instead of two. Its
    rounding is bounded by :meth:`Attention.value_output_error`; then the heads' sum (H additions into a zero
    array, ``γ_H``)."""
    rounding = arithmetic.rounding
    out: np.ndarray | None = None
    err: np.ndarray | None = None
    abs_terms: np.ndarray | None = None
    for h, z in enumerate(inputs):
        if out is None:
            out = np.zeros(z.value.shape, dtype=dtype)
            if rounding is not None:
                err, abs_terms = np.zeros(out.shape), np.zeros(out.shape)
        term = matmul_rows(z.value, att.value_outputs[h].astype(dtype, copy=False))
        out += term
        if rounding is not None:
            assert z.error is not None and err is not None and abs_terms is not None
            # the cast of the float64 product W_V·W_O to the working dtype rounds once more
            cast = 0.0 if dtype == np.float64 else rounding.u
            n = z.value.shape[-1]
            err += att.value_output_error(np.absolute(z.value, dtype=np.float64), z.error, h,
                                          gamma(n, rounding.u), cast) + n * rounding.eta
            abs_terms += np.abs(term.astype(np.float64))
    assert out is not None  # every Attention has at least one head
    if rounding is None:
        return Tracked(out)
    assert err is not None and abs_terms is not None
    return Tracked(out, up(err + gamma(att.heads, rounding.u) * abs_terms, att.heads))


def _divided_by_count(total: Tracked, counts: np.ndarray, arithmetic: Arithmetic) -> Tracked:
    """``total_t / count_t`` (in place) for the positions' counts ``t + 1``, exact integers in any format."""
    out = total.value
    out /= counts.astype(out.dtype)[None, :, None]
    if arithmetic.rounding is None:
        return Tracked(out)
    assert total.error is not None
    rounding = arithmetic.rounding
    return Tracked(out, rounding.add(out, total.error / counts[None, :, None]) + rounding.eta)


def _scored_attention(att: Attention, x: Tracked, rows: slice,
                      arithmetic: Arithmetic) -> tuple[Tracked, np.ndarray]:
    """Softmax or hard attention: per head, the weights ``a_h(t, u)`` from the scores, the mixture ``z_{h,t}
    = Σ_{u<=t} a_h(t, u)·x_u``, then ``Σ_h z_h (W_V W_O)_h`` (:func:`_through_heads`); one head at a time (a
    generator), so at most one head's mixture is held. Returns the output and every head's weights."""
    B, T, _ = x.value.shape
    weights = np.empty((att.heads, B, np.arange(T)[rows].size, T), dtype=x.value.dtype)

    causal = _causal(rows, T)

    def mixtures() -> Iterator[Tracked]:
        for h in range(att.heads):
            scores = _scores(att, h, x, rows, causal, arithmetic)     # β·<x_t W_Q[h], x_u W_K[h]>, u <= t
            a = _attention_weights(att.kind, scores, causal, x.value.dtype, arithmetic)  # a_h(t, u)
            weights[h] = a.value
            yield _mixture(a, x, arithmetic)                         # z_{h,t} = Σ_u a_h(t, u)·x_u

    return _through_heads(att, mixtures(), x.value.dtype, arithmetic), weights


def _causal(rows: slice, T: int) -> np.ndarray:
    """``(|rows|, T)``: whether position ``u`` is visible from position ``t`` (``u <= t``)."""
    return np.arange(T)[rows][:, None] >= np.arange(T)[None, :]


def _scores(att: Attention, h: int, x: Tracked, rows: slice, causal: np.ndarray,
            arithmetic: Arithmetic) -> Tracked:
    """Head h's scores ``β·<x_t W_Q[h], x_u W_K[h]>`` ``(B, |rows|, T)``, ``−∞`` where ``u > t``. Bound: the
    two products', the dot product's (length d_k), β's own rounding to the working dtype and the product by
    it (:meth:`_Rounding.score`)."""
    assert att.W_Q is not None and att.W_K is not None  # checked in Attention.__post_init__
    q = arithmetic.times(x[:, rows], att.W_Q[h])
    k = arithmetic.times(x, att.W_K[h])
    dots = q.value @ k.value.transpose(0, 2, 1)
    scores = att.inverse_temperature * dots
    scores = np.where(causal, scores, -np.inf)
    if arithmetic.rounding is None:
        return Tracked(scores)
    return Tracked(scores, arithmetic.rounding.score(q, k, dots, scores, causal, att.inverse_temperature))


def _attention_weights(kind: str, scores: Tracked, causal: np.ndarray, dtype: np.dtype,
                       arithmetic: Arithmetic) -> Tracked:
    """``softmax_u`` of the scores (:func:`_softmax_lastaxis`, in the scores' dtype), or, for hard
    attention, uniform over the positions attaining the maximal score (in the residual's ``dtype``). Bound:
    the interval softmax (``rounding.softmax_weight_error``) or every position whose score may tie the
    maximum within the scores' bounds (``rounding.hard_weight_error``)."""
    s = scores.value
    if kind == "softmax":
        w = _softmax_lastaxis(s)
    else:  # hard: uniform over the positions attaining the maximum score
        w = (s == s.max(axis=-1, keepdims=True)).astype(dtype)
        w /= w.sum(axis=-1, keepdims=True)
    rounding = arithmetic.rounding
    if rounding is None:
        return Tracked(w)
    assert scores.error is not None
    visible = np.broadcast_to(causal, s.shape)
    if kind == "softmax":
        return Tracked(w, softmax_weight_error(s, scores.error, w, visible,
                                                rel=gamma(s.shape[-1] + 8, rounding.u)))
    return Tracked(w, hard_weight_error(s, scores.error, visible))


def _softmax_lastaxis(scores: np.ndarray) -> np.ndarray:
    """``softmax`` along the last axis, computed as ``exp(s − max s) / Σ exp(s − max s)`` (the same quotient:
    the shift cancels; it keeps ``exp`` from overflowing). A new array; ``scores`` is not changed."""
    scores = scores - scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def _mixture(a: Tracked, x: Tracked, arithmetic: Arithmetic) -> Tracked:
    """``z_t = Σ_{u<=t} a(t, u)·x_u`` for the weights ``a (B, |rows|, T)`` (zero where ``u > t``), one batched
    matrix product ``a @ x``. Bound: a dot product of length T with both factors inexact."""
    z = a.value @ x.value
    rounding = arithmetic.rounding
    if rounding is None:
        return Tracked(z)
    assert a.error is not None and x.error is not None
    T = x.value.shape[1]
    aw, ax = a.value.astype(np.float64), np.abs(x.value.astype(np.float64))
    e_w, e_x = a.error, x.error
    return Tracked(z, up(gamma(T, rounding.u) * (aw @ ax) + e_w @ ax + aw @ e_x + e_w @ e_x, T + 4))


def _readout(model: Model, x: Tracked, arithmetic: Arithmetic) -> Tracked:
    """``logits = x U^T``, reading only the residual coordinates ``U`` reads (:attr:`Model.readout`): a zero
    column of ``U`` contributes exact zeros to every logit, so ``x[:, columns] @ U[:, columns]^T`` is the
    same sum without its zero terms, whatever the storage (dense, or compact ``readout_columns``). ``U`` is
    cast to the residual's dtype first (a float32 residual is read out in float32); a ``U`` stored wider adds
    its exact cast error to the bound."""
    readout = model.readout
    read = x if readout.full else x[..., readout.columns]
    U_t = readout.matrix.T.astype(read.value.dtype, copy=False)
    logits = matmul_rows(read.value, U_t)
    rounding = arithmetic.rounding
    if rounding is None:
        return Tracked(logits)
    e_U = cast_error(readout.matrix.T, read.value.dtype)  # U stored wider than the residual: its cast
    if e_U is None:
        return Tracked(logits, rounding.product(read.value, read.error, readout.matrix.T))
    return Tracked(logits, rounding.product(read.value, read.error, U_t, e_W=e_U))


def _record_layer(record: Trace, y: Tracked, weights: np.ndarray | None, h: Tracked | None,
                  x: Tracked) -> None:
    """Append one layer's intermediates to the trace: the residual after attention and after the MLP, the
    attention weights and the post-ReLU hidden activation (None where the layer has no such part)."""
    record.residual.append(y.value)
    record.attention_weights.append(weights)
    record.residual.append(x.value)
    record.hidden.append(None if h is None else h.value)


def _returned(logits: Tracked, errors: bool, record: Trace | None):
    """What :func:`forward` returns: the logits, then their bound (``errors``; zeros in integer mode, whose
    exactness the caller proved), then the trace (``trace``)."""
    out: tuple = (logits.value,)
    if errors:
        out += (np.zeros(logits.value.shape) if logits.error is None else logits.error,)
    if record is not None:
        out += (record,)
    return out if len(out) > 1 else logits.value
