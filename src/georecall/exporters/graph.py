"""The computation every export target runs, written once, and the rounding bound of running it.

A target (PyTorch, TransformerLens, ONNX Runtime) evaluates a georecall
:class:`~georecall.constructions.model.Model` in its own library and dtype, with its own order of operations.
Each target module builds a
:class:`Graph` — the arrays exactly as it stores them (cast to its dtype, heads padded, a softmax layer's β
placed where the target applies it) — and computes, in that order::

    x_t  = table[token_t] (+ P[t])                                        (embedding)
    per layer:
      q, k, v = x W_Q[h], x W_K[h], x W_V[h]                             (per head)
      a(t, ·) = softmax_u(c · <q_t, k_u>), u <= t     (uniform: 1/(t + 1))
      z_t     = Σ_u a(t, u) v_u;  y_t = x_t + concat_h(z_t) W_O           (one product over every head)
      x_t     = y_t + (ReLU(y_t W1 + b1) W2 + b2)
    logits = x_T U^T                                                       (read position: the last)

which is THE forward pass of ``constructions/forward.py`` in exact arithmetic (the product ``c · W_Q`` equals
the Model's ``β · W_Q``; padded heads and units are zero and add exact zeros).

:func:`reference` evaluates this graph in float64 with the *intended* (unrounded) weights and returns, beside
the logits, a bound on ``|logits computed by the target − exact logits|`` for every query: a first-order
forward-error bound in the standard model of floating-point arithmetic (``|fl(a ∘ b) − a ∘ b| <=
u·|fl(a ∘ b)|``, dot products of length n within ``γ_n = n·u/(1 − n·u)`` of ``|x|·|W|`` in any summation
order), with the stored weights' own rounding (``|Ŵ − W|``, measured entrywise), and, for softmax, the
perturbation ``a(ŝ)/a(s) ∈ [e^{−2E}, e^{2E}]`` of scores known within E plus a relative ``(|s − max s| + T +
6)·u`` for ``exp`` (assumed within 4 ulps, as the vectorized float32/float64 ``exp`` of PyTorch and ONNX
Runtime are), the sum and the division. Magnitudes come from the float64 evaluation (first order: the bound
neglects products of rounding errors, and is multiplied by 1.01 to cover them at the sizes checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from georecall.constructions.model import Model
from georecall.errors import InputError

__all__ = ["Graph", "GraphAttention", "GraphLayer", "GraphMLP", "Weight", "exportable", "graph_of",
           "reference", "unit_roundoff"]

U64 = 2.0**-53
SAFETY = 1.01


def unit_roundoff(dtype) -> float:
    """``u`` of a float dtype (``eps / 2``).

    Parameters
    ----------
    dtype : numpy dtype
        float32 or float64.

    Returns
    -------
    float
    """
    return float(np.finfo(np.dtype(dtype)).eps) / 2


@dataclass(frozen=True, eq=False)
class Weight:
    """One stored array: ``stored`` in the target's dtype, ``exact`` the float64 value it stands for, and
    ``error >= |stored − exact|`` entrywise (the cast measured, plus float64's own rounding of ``exact``)."""

    stored: np.ndarray
    exact: np.ndarray
    error: np.ndarray

    @classmethod
    def of(cls, exact: np.ndarray, dtype) -> Weight:
        """``exact`` (float64) stored in ``dtype``, with its measured error.

        Parameters
        ----------
        exact : numpy.ndarray
            The intended value (computed in float64).
        dtype : numpy dtype
            The target's dtype.

        Returns
        -------
        Weight
        """
        exact = np.asarray(exact, dtype=np.float64)
        stored = exact.astype(dtype)
        error = np.abs(stored.astype(np.float64) - exact) + U64 * np.abs(exact)
        return cls(stored, exact, error)

    @cached_property
    def magnitude(self) -> np.ndarray:
        """``|exact| + error``: a bound on ``|stored|`` and on ``|exact|`` (computed once)."""
        return np.abs(self.exact) + self.error

    @cached_property
    def relative_error(self) -> float:
        """``ρ = max error / magnitude``: ``error <= ρ·magnitude`` entrywise (computed once)."""
        M = self.magnitude
        return float(np.max(self.error / np.where(M > 0, M, 1.0), initial=0.0))

    @cached_property
    def read_columns(self) -> np.ndarray:
        """The columns of a 2-D weight with a nonzero entry or error (computed once)."""
        return np.flatnonzero(np.any(self.exact != 0, axis=0) | np.any(self.error != 0, axis=0))

    @cached_property
    def column_maxima(self) -> np.ndarray:
        """``max_j magnitude[j, c]`` per column c of a 2-D weight (computed once)."""
        return self.magnitude.max(axis=0, initial=0.0)


@dataclass(frozen=True, eq=False)
class GraphAttention:
    """Heads ``W_Q, W_K (H, d, d_k)`` (None: uniform), ``W_V (H, d, d_v)``, ``W_O (H·d_v, d)``, score factor
    ``c`` (a 0-d Weight; scores are ``c·<q, k>``)."""

    W_V: Weight
    W_O: Weight
    W_Q: Weight | None = None
    W_K: Weight | None = None
    factor: Weight | None = None

    @property
    def uniform(self) -> bool:
        """Whether attention is uniform: no ``W_Q``, or ``W_Q`` and ``W_K`` both all zero (every score 0)."""
        return self.W_Q is None or not (np.any(self.W_Q.exact) or np.any(self.W_K.exact))  # type: ignore

    @property
    def heads(self) -> int:
        """Heads: the number of attention heads, H."""
        return self.W_V.exact.shape[0]


@dataclass(frozen=True, eq=False)
class GraphMLP:
    """``W1 (d, m)``, ``b1 (m,)``, ``W2 (m, d)``, ``b2 (d,)``."""

    W1: Weight
    b1: Weight
    W2: Weight
    b2: Weight


@dataclass(frozen=True, eq=False)
class GraphLayer:
    """One layer of a :class:`Graph`, as :class:`~georecall.constructions.model.Layer`: the residual adds the
    attention's output, then the MLP's; a part that is None is absent from the target."""

    attention: GraphAttention | None
    mlp: GraphMLP | None


@dataclass(frozen=True, eq=False)
class Graph:
    """The arrays a target stores, in its dtype: the token table ``[E; Q]`` ``(N + R, d)``, positions ``P``
    (or None), layers, the read-out ``U (n_out, d)``; ``n_entities`` for the vocabulary."""

    table: Weight
    positions: Weight | None
    layers: tuple[GraphLayer, ...]
    unembedding: Weight
    n_entities: int
    dtype: np.dtype


def exportable(model: Model, target: str) -> None:
    """Refuse a model whose computation a target cannot run exactly.

    Parameters
    ----------
    model : Model
    target : str
        The target's name (for the message).

    Raises
    ------
    InputError
        Hard attention (an idealization, β -> ∞: no library computes it as a softmax).
    """
    for i, layer in enumerate(model.layers):
        if layer.attention is not None and layer.attention.kind == "hard":
            raise InputError(f"layer {i} has hard attention, an idealization (β -> ∞) that {target} cannot "
                             "compute exactly (its softmax at any finite β leaks); export the softmax build "
                             "(--attention softmax)")


def graph_of(model: Model, dtype, *, beta_in_queries: float | None = None, heads: int | None = None,
             head_width: int | None = None, mlp_width: int | None = None, every_part: bool = False) -> Graph:
    """The target graph of ``model`` in ``dtype``.

    Parameters
    ----------
    model : Model
        A model :func:`exportable` accepts.
    dtype : numpy dtype
        The target's dtype.
    beta_in_queries : float, optional
        The target divides scores by this exact power of two (TransformerLens: ``√d_head``): ``W_Q`` is
        stored as ``β · scale · W_Q`` and ``c = 1/scale``. Default: ``W_Q`` as it is and ``c = β``.
    heads, head_width, mlp_width : int, optional
        Pad every attention to this many heads of this width (``d_k`` and ``d_v`` both), and every MLP to
        this many units, with zeros.
    every_part : bool
        Give every layer an attention and an MLP (zero ones where the model has none: they add exact zeros).

    Returns
    -------
    Graph
    """
    dtype = np.dtype(dtype)
    d = model.d
    table = np.concatenate([model.entity_embedding.astype(np.float64),
                            model.relation_embedding.astype(np.float64)])
    P = None if model.position_embedding is None else Weight.of(model.position_embedding, dtype)
    layers = []
    for layer in model.layers:
        att = layer.attention
        g_att = None
        if att is not None or every_part:
            H = att.heads if att is not None else 1
            d_v = att.W_V.shape[2] if att is not None else 1
            d_k = att.W_Q.shape[2] if att is not None and att.W_Q is not None else d_v
            Hp = heads or H
            wk = head_width or d_k
            wv = head_width or d_v
            W_V = np.zeros((Hp, d, wv))
            W_O = np.zeros((Hp, wv, d))
            W_Q = np.zeros((Hp, d, wk))
            W_K = np.zeros((Hp, d, wk))
            factor = 1.0
            if att is not None:
                W_V[:H, :, :d_v] = att.W_V
                W_O[:H, :d_v, :] = att.W_O
                if att.kind == "softmax":
                    assert att.W_Q is not None and att.W_K is not None
                    if beta_in_queries is None:
                        W_Q[:H, :, :d_k], factor = att.W_Q, att.inverse_temperature
                    else:
                        W_Q[:H, :, :d_k] = att.W_Q.astype(np.float64) * (att.inverse_temperature
                                                                          * beta_in_queries)
                        factor = 1.0 / beta_in_queries
                    W_K[:H, :, :d_k] = att.W_K
            uniform = att is None or att.kind == "uniform"
            keep_qk = not uniform or head_width is not None  # TransformerLens always has q and k
            g_att = GraphAttention(
                Weight.of(W_V, dtype), Weight.of(W_O.reshape(Hp * wv, d), dtype),
                Weight.of(W_Q, dtype) if keep_qk else None, Weight.of(W_K, dtype) if keep_qk else None,
                Weight.of(np.array(factor), dtype))
        g_mlp = None
        if layer.mlp is not None or every_part:
            m = layer.mlp.width if layer.mlp is not None else 0
            mp = max(mlp_width or m, m, 1)
            W1, b1, W2 = np.zeros((d, mp)), np.zeros(mp), np.zeros((mp, d))
            b2 = np.zeros(d)
            if layer.mlp is not None:
                W1[:, :m], b1[:m], W2[:m], b2[:] = layer.mlp.W1, layer.mlp.b1, layer.mlp.W2, layer.mlp.b2
            g_mlp = GraphMLP(*(Weight.of(a, dtype) for a in (W1, b1, W2, b2)))
        layers.append(GraphLayer(g_att, g_mlp))
    return Graph(Weight.of(table, dtype), P, tuple(layers), Weight.of(model.full_unembedding(), dtype),
                 model.n_entities, dtype)


# ------------------------------------------------------------------------------ float64 value and bound


def _gamma(n: int, u: float) -> float:
    return n * u / (1 - n * u)


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` for ``a (..., n)`` and a 2-D ``b``, as one matrix product."""
    return (a.reshape(-1, a.shape[-1]) @ b).reshape(a.shape[:-1] + (b.shape[1],))


def _linear(x: np.ndarray, e_x: np.ndarray, W: Weight, u: float, b: Weight | None = None):
    """``x @ W (+ b)`` and the bound ``(γ_{n+1}·(|x| + e_x) + e_x + ρ·|x|)·|Ŵ|`` (+ ``γ_{n+1}·|b̂| + |b̂ − b|
    + u·(|x W + b| + those)`` with a bias), ``ρ = max |Ŵ − W| / |Ŵ|`` the weights' largest relative rounding
    (so ``|x|·|Ŵ − W| <= ρ·|x|·|Ŵ|``: one product for the bound). It covers the bias added after the product
    and a fused ``addmm`` that starts its sum from the bias (a dot product of length n + 1), whichever the
    library does."""
    n = W.exact.shape[0]
    MW, rho = W.magnitude, W.relative_error
    ax = np.abs(x)
    value = _mm(x, W.exact)
    error = _mm(_gamma(n + 1, u) * (ax + e_x) + e_x + rho * ax, MW)
    if b is None:
        return value, error
    value = value + b.exact
    error += _gamma(n + 1, u) * b.magnitude + b.error
    return value, error + u * (np.abs(value) + error)


def _readout(x: np.ndarray, e_x: np.ndarray, U: Weight, u: float):
    """The logits ``x U^T`` at the read position and one bound per query, ``max_j`` of the logits' bounds
    (:func:`_linear`'s with ``|Û_j|`` replaced by its maximum over j, column by column: an (n_out, d) product
    for the values alone, on the columns U reads; the bound costs O(d) per query)."""
    used = U.read_columns
    value = x[:, used] @ U.exact[:, used].T
    d = U.exact.shape[1]
    ax = np.abs(x)
    bound = (_gamma(d + 1, u) * (ax + e_x) + e_x + U.relative_error * ax) @ U.column_maxima
    return value, bound[:, None]


def _added(a: np.ndarray, e_a: np.ndarray, b: np.ndarray, e_b: np.ndarray, u: float):
    """``a + b`` and the bound ``e_a + e_b + u·(|a + b| + e_a + e_b)``."""
    s = a + b
    e = e_a + e_b
    return s, e + u * (np.abs(s) + e)


def _attention(att: GraphAttention, x: np.ndarray, e_x: np.ndarray, u: float, last: bool = False):
    """The attention output ``concat_h(z) W_O`` and its bound, at every position (``last``: at the last
    one only; the keys and values still come from every position)."""
    B, T, _ = x.shape
    causal = np.tril(np.ones((T, T), dtype=bool))[-1:] if last else np.tril(np.ones((T, T), dtype=bool))
    rows = causal.shape[0]
    zs, ezs = [], []
    for h in range(att.heads):
        v, e_v = _linear(x, e_x, _head(att.W_V, h), u)
        if att.uniform:
            w = np.broadcast_to(causal / causal.sum(axis=1, keepdims=True), (B, rows, T))
            e_w = w * (T + 6) * u
        else:
            assert att.W_Q is not None and att.W_K is not None and att.factor is not None
            q, e_q = _linear(x[:, T - rows:], e_x[:, T - rows:], _head(att.W_Q, h), u)
            k, e_k = _linear(x, e_x, _head(att.W_K, h), u)
            d_k = q.shape[-1]
            dots = q @ k.transpose(0, 2, 1)
            aq, ak = np.abs(q), np.abs(k)
            e_dot = (_gamma(d_k, u) * ((aq + e_q) @ (ak + e_k).transpose(0, 2, 1))
                     + e_q @ (ak + e_k).transpose(0, 2, 1) + aq @ e_k.transpose(0, 2, 1))
            c, e_c = float(att.factor.exact), float(att.factor.error)
            s = c * dots
            e_s = abs(c) * e_dot + np.abs(dots) * e_c + u * (np.abs(s) + abs(c) * e_dot + np.abs(dots) * e_c)
            s = np.where(causal, s, -np.inf)
            E = np.where(causal, e_s, 0.0).max(axis=-1, keepdims=True)
            shifted = s - s.max(axis=-1, keepdims=True)
            w = np.exp(shifted)
            w /= w.sum(axis=-1, keepdims=True)
            grow = np.expm1(2 * E)
            e_w = w * (grow + (np.abs(np.where(causal, shifted, 0.0)) + T + 6) * u * (1 + grow))
        Mv = np.abs(v) + e_v
        z = w @ v
        e_z = _gamma(T, u) * ((w + e_w) @ Mv) + e_w @ Mv + w @ e_v
        zs.append(z)
        ezs.append(e_z)
    z, e_z = np.concatenate(zs, axis=-1), np.concatenate(ezs, axis=-1)
    return _linear(z, e_z, att.W_O, u)


def _head(W: Weight, h: int) -> Weight:
    return Weight(W.stored[h], W.exact[h], W.error[h])


def _mlp(mlp: GraphMLP, y: np.ndarray, e_y: np.ndarray, u: float):
    """``ReLU(y W1 + b1) W2 + b2`` and its bound (ReLU is 1-Lipschitz: the bound carries through it)."""
    pre, e_pre = _linear(y, e_y, mlp.W1, u, mlp.b1)
    h = np.maximum(pre, 0.0)
    return _linear(h, e_pre, mlp.W2, u, mlp.b2)


def _evaluate(graph: Graph, tokens: np.ndarray, u: float):
    table = graph.table
    x = table.exact[tokens]
    e_x = table.error[tokens]
    T = tokens.shape[1]
    if graph.positions is not None:
        P = graph.positions
        if T > P.exact.shape[0]:
            raise InputError(f"sequence length {T} exceeds the model's {P.exact.shape[0]} positions")
        x, e_x = _added(x, e_x, P.exact[:T][None], P.error[:T][None], u)
    for i, layer in enumerate(graph.layers):
        last = i == len(graph.layers) - 1  # nothing reads the other positions' output of the last layer
        y, e_y = x, e_x
        if layer.attention is not None:
            out, e_out = _attention(layer.attention, x, e_x, u, last)
            if last:
                x, e_x = x[:, -1:], e_x[:, -1:]
            y, e_y = _added(x, e_x, out, e_out, u)
        elif last:
            y, e_y = x[:, -1:], e_x[:, -1:]
        x, e_x = y, e_y
        if layer.mlp is not None:
            out, e_out = _mlp(layer.mlp, y, e_y, u)
            x, e_x = _added(y, e_y, out, e_out, u)
    return _readout(x[:, -1], e_x[:, -1], graph.unembedding, u)


def reference(graph: Graph, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The graph's logits at the last position, in float64 with the intended weights, and the bound on the
    logits the target computes (call it on chunks: it holds a few arrays of ``(B, T, max(d, m, n_out))``).

    Parameters
    ----------
    graph : Graph
    tokens : numpy.ndarray
        ``(B, T)`` token ids.

    Returns
    -------
    logits : numpy.ndarray
        ``(B, n_out)`` float64.
    bound : numpy.ndarray
        ``(B, 1)``: for every logit of the query, ``|target's logit − exact logit| <= bound`` (first order,
        rounded up by 1.01).
    """
    u = unit_roundoff(graph.dtype)
    logits, bound = _evaluate(graph, np.asarray(tokens, dtype=np.int64), u)
    return logits, bound * SAFETY + float(np.finfo(graph.dtype).smallest_subnormal) * 64
