"""The loss and its gradient: mean cross-entropy over all ``n_out`` outputs (computed stably with
log-sum-exp); the hand-written backward pass through every parameter group of THE forward pass
(``constructions.forward.forward`` with ``trace=True``: the dense reference); the dispatch to the
structure-aware step of :mod:`.train_structured` where it applies (the same gradients); and the
finite-difference gradient checker (:func:`check_grads`) that the tests and ``georecall verify`` run on random
models.

Gradients are dicts keyed like ``Model.arrays()`` (:mod:`.parameters`); a frozen group (:mod:`.groups`) gets
none.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from scipy import sparse

from georecall.constructions.arithmetic import matmul_rows
from georecall.constructions.forward import forward
from georecall.constructions.model import Attention, Layer, Model
from georecall.errors import InputError
from georecall.theory.tasks import as_rng
from georecall.training.groups import GROUPS, group_of
from georecall.training.parameters import params_of, with_params
from georecall.training.train_structured import loss_and_grads_structured, structure_reason

__all__ = ["LOGIT_FLOOR", "PATHS", "check_grads", "loss_and_grads", "readout_backward",
           "softmax_cross_entropy"]


# Shifted logits are clamped here before exp (softmax_cross_entropy), the structured step's floor: P >= e^-60.
LOGIT_FLOOR = -60.0


def softmax_cross_entropy(logits: np.ndarray, answers: np.ndarray):
    """Mean cross-entropy over rows, in the factored form the backward pass uses.

    Returns ``(loss, P, scale, predictions)`` with ``P = exp(z − max z)`` (computed in place in ``logits``, a
    scratch array the caller owns) and ``scale = 1/(n·Σ_j P_j)`` per row, so that the gradient w.r.t. the
    logits is ``dz = scale·P − onehot(answer)/n``. It is never formed: :func:`readout_backward` applies it
    through two matrix products, saving passes over the largest array of a step.

    Shifted logits below ``LOGIT_FLOOR`` (−60: ``P < 1e-26``, far below the resolution of ``Σ ≥ 1``) are
    clamped there before ``exp``, as in the structured step (``train_structured._softmax_rows``): otherwise a
    trained model's confident rows put ``P`` in float32's subnormal range, where ``exp`` and the two read-out
    products run several times slower. The loss uses the unclamped answer logit.

    Parameters
    ----------
    logits : ndarray
        ``(n, n_out)``, overwritten.
    answers : ndarray
        ``(n,)`` answer indices.

    Returns
    -------
    tuple
        ``(loss, P, scale, predictions)``.
    """
    n = logits.shape[0]
    rows = np.arange(n)
    predictions = logits.argmax(axis=-1)
    logits -= logits[rows, predictions][:, None]  # shift by the row maximum: every exponent <= 0
    picked = logits[rows, answers]
    np.maximum(logits, logits.dtype.type(LOGIT_FLOOR), out=logits)
    np.exp(logits, out=logits)
    total = logits.sum(axis=-1)
    loss = float(np.mean(np.log(total) - picked))
    return loss, logits, (1.0 / (total * n)).astype(logits.dtype), predictions


def readout_backward(P, scale, answers, U, x_read, want_U: bool):
    """``dx = dz @ U`` and ``dU = dz^T @ x`` for ``dz = scale·P − onehot/n`` without forming dz:
    ``dz @ U = scale·(P @ U) − U[answers]/n`` and
    ``dz^T @ x = P^T @ (scale·x) − Σ_{rows with answer j} x/n``.

    Parameters
    ----------
    P, scale, answers
        What :func:`softmax_cross_entropy` returns (``P``, ``scale``) and the answers it was given.
    U : ndarray
        The read-out ``(n_out, d)``.
    x_read : ndarray
        The residual rows read ``(n, d)``.
    want_U : bool
        Whether to compute ``dU`` (``None`` otherwise: a frozen read-out).

    Returns
    -------
    tuple
        ``(dx, dU)``.
    """
    n = P.shape[0]
    dx = matmul_rows(P, U)
    dx *= scale[:, None]
    dx -= U[answers] / n
    dU = None
    if want_U:
        dU = P.T @ (x_read * scale[:, None])
        dU -= _scatter(answers, x_read / n, U.shape[0], 0)
    return dx, dU


PATHS = ("auto", "dense", "structured")


def loss_and_grads(model: Model, tokens: np.ndarray, answers: np.ndarray,
                   positions: np.ndarray | None = None, frozen: frozenset[str] = frozenset(), *,
                   path: str = "dense"):
    """Mean cross-entropy of ``answers`` and its gradient for every parameter not in a frozen group.

    ``positions=None``: one answer per query, read at the last position (``answers`` shape ``(B,)``).
    Otherwise answers ``(B, P)`` are read at the given positions (teacher forcing) and the loss is the mean
    over all B·P predictions. Returns ``(loss, grads, predictions)``.

    ``path="dense"`` (the default, the reference): the generic backward pass below. ``"structured"``: the
    structure-aware step of :mod:`.train_structured` (one-layer, uniform or no attention,
    ``⟨r, s⟩`` queries; ``ValueError`` saying why otherwise). ``"auto"``: structured when it applies.

    Parameters
    ----------
    model : Model
    tokens : ndarray
        ``(B, T)`` token ids.
    answers : ndarray
        ``(B,)``, or ``(B, P)`` with ``positions``.
    positions : ndarray, optional
        Where answers are read (teacher forcing).
    frozen : frozenset of str
        Groups that get no gradient.
    path : str
        ``"dense"``, ``"structured"`` or ``"auto"`` (:data:`PATHS`).

    Returns
    -------
    tuple
        ``(loss, grads, predictions)``.

    Raises
    ------
    InputError
        An unknown path, the structured path where it does not apply, or a compact read-out to be trained.
    """
    if path not in PATHS:
        raise InputError(f"path must be one of {PATHS}, got {path!r}")
    if model.compact:  # gradients are for the dense read-out the model means
        if group_of("unembedding") not in frozen:
            raise InputError("the model stores its read-out compactly, and its gradient would be dense: use "
                             "model.with_dense_readout() (train() does), or freeze 'unembedding'")
        model = model.with_dense_readout()
    if path != "dense":
        reason = structure_reason(model, tokens, positions)
        if reason is None:
            return loss_and_grads_structured(model, tokens, answers, frozenset(frozen))
        if path == "structured":
            raise InputError(f"the structured step does not apply: {reason}")
    at: Literal["last", "all"] = "last" if positions is None else "all"
    logits, trace = forward(model, tokens, at=at, trace=True)
    B, T = tokens.shape
    if positions is None:
        flat_logits, flat_answers = logits, answers
    else:
        flat_logits = logits[:, positions].reshape(-1, logits.shape[-1])  # a copy: fancy indexing
        flat_answers = answers.reshape(-1)
    loss, P, scale, predictions = softmax_cross_entropy(flat_logits, flat_answers)
    grads: dict[str, np.ndarray] = {}
    def need(key: str) -> bool:
        return group_of(key) not in frozen

    x_final = trace.residual[-1]  # (B, Tq, d): Tq = 1 for at="last"
    x_read = x_final[:, -1] if positions is None else x_final[:, positions].reshape(-1, x_final.shape[-1])
    dx_read, dU = readout_backward(P, scale, flat_answers, model.unembedding, x_read, need("unembedding"))
    dx = np.zeros_like(x_final)
    if positions is None:
        dx[:, -1] = dx_read
    else:
        dx[:, positions] = dx_read.reshape(B, len(positions), -1)
    if dU is not None:
        grads["unembedding"] = dU
    for i in range(len(model.layers) - 1, -1, -1):
        dx = _layer_backward(model.layers[i], i, trace, dx, grads, need)
    # embeddings: x0 = [E; Q][tokens] + P[:T]
    dx0 = dx  # (B, T, d)
    N = model.n_entities
    flat_tokens = tokens.reshape(-1)
    flat_dx = dx0.reshape(-1, dx0.shape[-1])
    if need("entity_embedding"):
        grads["entity_embedding"] = _scatter(flat_tokens, flat_dx, N, 0)
    if need("relation_embedding"):
        grads["relation_embedding"] = _scatter(flat_tokens, flat_dx, model.n_relations, N)
    if model.position_embedding is not None and need("position_embedding"):
        dP = np.zeros_like(model.position_embedding)
        dP[:T] = dx0.sum(axis=0)
        grads["position_embedding"] = dP
    return loss, grads, predictions


def _scatter(tokens: np.ndarray, rows: np.ndarray, size: int, offset: int) -> np.ndarray:
    """Sum the gradient rows of every occurrence of token ``offset + j`` into row j (a ``size × d`` array)."""
    mask = (tokens >= offset) & (tokens < offset + size)
    picked = tokens[mask] - offset
    onehot = sparse.csr_matrix((np.ones(picked.size, dtype=rows.dtype), (picked, np.arange(picked.size))),
                               shape=(size, picked.size))
    return np.asarray(onehot @ rows[mask])


def _layer_backward(layer: Layer, i: int, trace, dy: np.ndarray, grads: dict, need) -> np.ndarray:
    """Back through one layer: ``dy`` is the gradient w.r.t. the layer's output (its query positions);
    returns the gradient w.r.t. its input (all positions)."""
    x_in, x_mid = trace.residual[2 * i], trace.residual[2 * i + 1]
    Tq = x_mid.shape[1]
    queries = slice(x_in.shape[1] - Tq, x_in.shape[1])
    prefix = f"layers.{i}"
    dx_mid = dy
    if layer.mlp is not None:
        mlp, hidden = layer.mlp, trace.hidden[i]
        flat_dy = dy.reshape(-1, dy.shape[-1])
        flat_h = hidden.reshape(-1, hidden.shape[-1])
        dh = flat_dy @ mlp.W2.T
        dh *= flat_h > 0
        if need("mlp"):
            flat_mid = x_mid.reshape(-1, x_mid.shape[-1])
            grads[f"{prefix}.mlp.W2"] = flat_h.T @ flat_dy
            grads[f"{prefix}.mlp.b2"] = flat_dy.sum(axis=0)
            grads[f"{prefix}.mlp.W1"] = flat_mid.T @ dh
            grads[f"{prefix}.mlp.b1"] = dh.sum(axis=0)
        dx_mid = dy + (dh @ mlp.W1.T).reshape(dy.shape)
    dx_in = np.zeros_like(x_in)
    dx_in[:, queries] += dx_mid
    if layer.attention is not None:
        _attention_backward(layer.attention, prefix, x_in, queries, trace.attention_weights[i], dx_mid,
                            dx_in, grads, need)
    return dx_in


def _attention_backward(att: Attention, prefix: str, x: np.ndarray, queries: slice, weights, g: np.ndarray,
                        dx: np.ndarray, grads: dict, need) -> None:
    """Accumulate into ``dx`` the gradient through attention whose output at ``queries`` has gradient
    ``g``."""
    T = x.shape[1]
    positions = np.arange(T)[queries]
    want = need("attention")
    dW = {name: np.zeros_like(getattr(att, name)) for name in ("W_V", "W_O", "W_Q", "W_K")
          if want and getattr(att, name) is not None}
    def flat(a: np.ndarray) -> np.ndarray:
        return a.reshape(-1, a.shape[-1])

    if att.kind == "uniform":
        counts = (positions + 1).astype(x.dtype)[None, :, None]
        if positions.size == 1:
            sums = x[:, : positions[0] + 1].sum(axis=1, keepdims=True)
        else:
            sums = np.cumsum(x, axis=1)[:, queries]  # (B, Tq, d)
        dsums = np.zeros_like(sums)
        scaled = g / counts  # the mean's 1/(t+1), applied once
        for h in range(att.heads):
            # out = S·W_V·W_O/(t+1): with G = Σ_t S_t^T g_t/(t+1) (d × d), dW_V = G·W_O^T and dW_O = W_V^T·G,
            # and dS = (g/(t+1))·(W_V·W_O)^T: two products over the batch instead of five
            if want:
                G = flat(sums).T @ flat(scaled)
                dW["W_V"][h] = G @ att.W_O[h].T
                dW["W_O"][h] = att.W_V[h].T @ G
            dsums += matmul_rows(scaled, att.value_output(h).T.astype(x.dtype, copy=False))
        # sums[t] = Σ_{u<=t} x_u: x_u receives Σ_{t>=u} dsums[t]
        if positions.size == 1:
            dx[:, : positions[0] + 1] += dsums
        else:
            full = np.zeros_like(x)
            full[:, queries] = dsums
            dx += np.flip(np.cumsum(np.flip(full, axis=1), axis=1), axis=1)
    else:
        W_Q, W_K = att.W_Q, att.W_K
        assert W_Q is not None and W_K is not None  # Attention requires them for every kind but "uniform"
        xq = x[:, queries]
        for h in range(att.heads):
            A = weights[h]  # (B, Tq, T)
            v = matmul_rows(x, att.W_V[h])  # (B, T, dv)
            o = A @ v  # (B, Tq, dv)
            do = matmul_rows(g, att.W_O[h].T)
            dv = A.transpose(0, 2, 1) @ do  # (B, T, dv)
            if want:
                dW["W_O"][h] = flat(o).T @ flat(g)
                dW["W_V"][h] = flat(x).T @ flat(dv)
            dx += matmul_rows(dv, att.W_V[h].T)
            if att.kind == "softmax":  # hard attention: the argmax weights are piecewise constant
                dA = do @ v.transpose(0, 2, 1)  # (B, Tq, T)
                dscores = A * (dA - (A * dA).sum(axis=-1, keepdims=True))
                beta = att.inverse_temperature
                q, k = matmul_rows(xq, W_Q[h]), matmul_rows(x, W_K[h])
                dq = beta * (dscores @ k)
                dk = beta * (dscores.transpose(0, 2, 1) @ q)
                if want:
                    dW["W_Q"][h] = flat(xq).T @ flat(dq)
                    dW["W_K"][h] = flat(x).T @ flat(dk)
                dx[:, queries] += matmul_rows(dq, W_Q[h].T)
                dx += matmul_rows(dk, W_K[h].T)
    for name, value in dW.items():
        grads[f"{prefix}.attention.{name}"] = value


# ------------------------------------------------------------------------------------------ gradient check


def check_grads(model: Model, tokens, answers, *, positions=None, frozen=(), rng=None, h: float = 1e-6,
                rtol: float = 1e-5, path: str = "dense") -> dict[str, tuple[float, float]]:
    """Directional central differences in float64, one random direction per parameter.

    For each trainable parameter θ and a random unit direction v: compares ``<∇L, v>`` with
    ``(L(θ + h·v) − L(θ − h·v)) / 2h``. Returns ``{key: (analytic, numeric)}``; raises ``AssertionError``
    naming the first parameter whose two values differ by more than ``rtol`` (relative to their scale, plus
    1e-8).
    ``path`` selects the analytic gradient (see :func:`loss_and_grads`): ``"structured"`` checks the
    structure-aware step directly against the finite differences of THE forward pass.

    Parameters
    ----------
    model : Model
        Cast to float64.
    tokens, answers, positions
        As in :func:`loss_and_grads`.
    frozen
        Groups left out.
    rng
        The directions' randomness (a Generator or an integer).
    h, rtol : float
        The step of the differences and the tolerance.
    path : str
        The analytic gradient's path.

    Returns
    -------
    dict
        ``{key: (analytic, numeric)}``.

    Raises
    ------
    AssertionError
        The first parameter whose two values differ.
    """
    rng = as_rng(rng)
    model = model.astype(np.float64)
    tokens, answers = np.asarray(tokens), np.asarray(answers)
    frozen = frozenset(frozen)
    _, grads, _ = loss_and_grads(model, tokens, answers, positions, frozen, path=path)
    params = params_of(model)
    out = {}
    for key in sorted(grads):
        v = rng.standard_normal(params[key].shape)
        v /= np.linalg.norm(v)
        analytic = float(np.sum(grads[key] * v))
        plus, minus = dict(params), dict(params)
        plus[key], minus[key] = params[key] + h * v, params[key] - h * v
        lp = loss_and_grads(with_params(model, plus), tokens, answers, positions, frozenset(GROUPS))[0]
        lm = loss_and_grads(with_params(model, minus), tokens, answers, positions, frozenset(GROUPS))[0]
        numeric = (lp - lm) / (2 * h)
        out[key] = (analytic, numeric)
        if abs(analytic - numeric) > rtol * max(abs(analytic), abs(numeric)) + 1e-8:
            raise AssertionError(f"gradient of {key}: analytic {analytic:.10g} vs numeric {numeric:.10g}")
    return out
