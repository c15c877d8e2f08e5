"""An autograd-free NumPy trainer for the shared Model (docs/theory.md, "Gradient descent"; docs/training.md).

The forward pass is THE forward pass (``constructions.forward.forward`` with ``trace=True``); this module adds
the hand-written backward pass through every parameter group (the dense reference), cross-entropy, and
Adam/AdamW/SGD. One-layer single-hop models with uniform attention train through the structure-aware step of
:mod:`.train_structured` when it applies (``train(path="auto")``), which gives the same
gradients.

Parameters are a flat dict keyed like ``Model.arrays()`` (``entity_embedding``, ``layers.0.mlp.W1``, ...).
Groups, for freezing, weight decay and initialisation scale: ``entity_embedding``, ``relation_embedding``,
``position_embedding``, ``unembedding``, ``attention`` (every attention weight), ``mlp`` (every MLP weight and
bias).

Initialization (``init_model``), with fan-in scaling so activations stay O(1), times a per-group
``init_scale`` (default 1): embeddings (E, Q, P) and U have i.i.d. ``N(0, 1/d)`` entries (rows of norm ≈ 1);
``W_Q, W_K, W_V ~ N(0, 1/d)``, ``W_O ~ N(0, 1/d_v)``; ``W1 ~ N(0, 1/d)``, ``W2 ~ N(0, 1/m)``; biases 0;
softmax inverse temperature ``1/sqrt(d_k)`` (not trained).

Randomness: ``init_model`` draws from its own generator (``seed=S`` → the ``"init"`` stream of the seed
contract, ``theory.seeds``) and ``train`` draws the batch order from another (``seed=S`` → ``"batches"``).

Loss: mean cross-entropy over all ``n_out`` outputs, computed stably with log-sum-exp.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy import sparse

from georecall.constructions.arithmetic import matmul_rows
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Attention, Layer, Model, unflatten
from georecall.constructions.multi_hop import chains, multi_hop_queries
from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.theory.seeds import rng as seed_rng
from georecall.theory.tasks import _as_rng, check_positive_int
from georecall.verify.checking.check import check_queries
from georecall.verify.training.groups import GROUPS, group_of
from georecall.verify.training.optimizers import EPS_FORMS, OPTIMIZERS, SGD, Adam, adam, sgd
from georecall.verify.training.train_structured import (
    loss_and_grads_structured,
    structure_reason,
)

__all__ = [
    "EPS_FORMS",
    "GROUPS",
    "OPTIMIZERS",
    "PATHS",
    "SGD",
    "Adam",
    "CallFunction",
    "Callback",
    "EpochBatches",
    "PrintEvery",
    "StepState",
    "StopAtBatchAccuracy",
    "StopAtCheckedAccuracy",
    "TrainResult",
    "adam",
    "check_grads",
    "group_of",
    "init_model",
    "loss_and_grads",
    "params_of",
    "readout_backward",
    "sgd",
    "softmax_cross_entropy",
    "train",
    "training_data",
    "with_params",
]

def init_model(
    N: int,
    R: int,
    d: int,
    m: int,
    *,
    attention: str = "uniform",
    heads: int = 1,
    d_head: int | None = None,
    layers: int = 1,
    positions: int | None = None,
    n_out: int | None = None,
    rng: np.random.Generator | int | None = None,
    dtype=np.float32,
    seed: int | None = None,
    init_scale: float | Mapping[str, float] = 1.0,
    tied_readout: bool = False,
) -> Model:
    """A randomly initialized Model (see the module docstring for the distributions).

    Parameters
    ----------
    rng, seed
        The initialization's randomness, and only it: a Generator (or an integer for ``default_rng``), or
        ``seed``, the run seed of the seed contract, which draws from its ``"init"`` stream
        (``theory.seeds.rng(seed, "init")``). Give at most one. Batch order is drawn by :func:`train` from its
        own generator: never pass the same Generator (or the same integer) to both.
    init_scale
        A factor on every standard deviation, or a mapping ``{group: factor}`` over ``GROUPS`` (missing groups
        keep 1): entry ``θ ~ N(0, (scale_g)² / fan_in)``.
    tied_readout
        Start with ``U = E`` (needs ``n_out == N``); train with ``train(..., tie_readout=True)`` to keep them
        equal. The draws are the same as without tying (U is drawn, then replaced), so the other weights do
        not depend on this flag.
    positions
        Number of position-embedding rows (``None``: no position embeddings). Softmax attention on single-hop
        queries, as in the multi-hop models, wants ``positions=2``.
    """
    N, R, d, m, heads, layers = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("d", d), ("m", m),
                                                                        ("heads", heads), ("layers", layers)))
    if attention not in ("uniform", "softmax", "none"):
        raise InputError(f"attention must be 'uniform', 'softmax' or 'none', got {attention!r}")
    if seed is not None:
        if rng is not None:
            raise InputError("give rng or seed, not both")
        rng = seed_rng(seed, "init")
    rng = _as_rng(rng)
    d_head = d_head or (d if attention == "uniform" else max(1, d // heads))
    n_out = N if n_out is None else n_out
    scales = _group_values("init_scale", init_scale, 1.0)
    if tied_readout and n_out != N:
        raise InputError(f"a tied read-out U = E needs n_out == N, got n_out = {n_out}, N = {N}")

    def normal(shape, fan_in, group):
        draw = rng.standard_normal(shape) / math.sqrt(fan_in)
        if scales[group] != 1.0:
            draw *= scales[group]
        return draw.astype(dtype)

    built = []
    for _ in range(layers):
        att = None
        if attention == "uniform":
            att = Attention("uniform", W_V=normal((heads, d, d_head), d, "attention"),
                            W_O=normal((heads, d_head, d), d_head, "attention"))
        elif attention == "softmax":
            att = Attention("softmax", W_V=normal((heads, d, d_head), d, "attention"),
                            W_O=normal((heads, d_head, d), d_head, "attention"),
                            W_Q=normal((heads, d, d_head), d, "attention"),
                            W_K=normal((heads, d, d_head), d, "attention"),
                            inverse_temperature=1.0 / math.sqrt(d_head))
        mlp = MLP(normal((d, m), d, "mlp"), np.zeros(m, dtype), normal((m, d), m, "mlp"), np.zeros(d, dtype))
        built.append(Layer(att, mlp))
    E = normal((N, d), d, "entity_embedding")
    Q = normal((R, d), d, "relation_embedding")
    U = normal((n_out, d), d, "unembedding")
    if tied_readout:
        U = E.copy()
    P = None if positions is None else normal((positions, d), d, "position_embedding")
    meta = {"construction": "trained", "init": "fan-in normal", "tied_readout": bool(tied_readout)}
    return Model(E, Q, U, tuple(built), P, meta=meta)


def _group_values(name: str, value, default: float) -> dict[str, float]:
    """``{group: float}`` from one number (every group) or a mapping over ``GROUPS`` (others: ``default``)."""
    if isinstance(value, Mapping):
        unknown = set(value) - set(GROUPS)
        if unknown:
            raise InputError(f"{name}: unknown parameter groups {sorted(unknown)}; groups are {GROUPS}")
        out = {g: float(value.get(g, default)) for g in GROUPS}
    else:
        out = {g: float(value) for g in GROUPS}
    for g, v in out.items():
        if not (math.isfinite(v) and v >= 0):
            raise InputError(f"{name} for {g} must be finite and >= 0, got {v}")
    return out


def params_of(model: Model) -> dict[str, np.ndarray]:
    """Writable copies of every weight, keyed like ``Model.arrays()``.

    Parameters
    ----------
    model : Model

    Returns
    -------
    dict
    """
    return {key: np.array(value) for key, value in model.arrays().items()}


def with_params(template: Model, params: dict[str, np.ndarray]) -> Model:
    """A Model with ``template``'s structure (kinds, temperatures) and the given weights (``unflatten``).

    Parameters
    ----------
    template : Model
        The structure.
    params : dict
        Every weight, keyed like ``template.arrays()``.

    Returns
    -------
    Model

    Raises
    ------
    ValueError
        A missing key, a wrong shape, or a non-finite weight (the Model refuses it).
    """
    return unflatten(template, params)


# ------------------------------------------------------------------------------------------- loss + backward


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


# ---------------------------------------------------------------------------------------------- training


def training_data(task, k: int = 1, cot: bool = False):
    """``(tokens, answers, positions, T)`` for training on a task.

    k = 1, no CoT: the N·R queries ``⟨r, s⟩`` and their answers (``positions=None``: read at the last token).
    k > 1, no CoT: the N·R^k queries ``⟨r_k, ..., r_1, s⟩`` and their final answers.
    CoT: the queries followed by the true chain ``v_1..v_{k−1}`` (teacher forcing), answers ``v_1..v_k`` read
    at positions ``k..2k−1``. ``T`` is the sequence length (the position embedding needs T rows).

    Parameters
    ----------
    task : Task
        The facts.
    k : int
        Hops per query.
    cot : bool
        Chain of thought under teacher forcing.

    Returns
    -------
    tuple
        ``(tokens, answers, positions, T)``.
    """
    k = check_positive_int("k", k)
    if k == 1 and not cot:
        tokens, answers = single_hop_queries(task)
        return tokens, answers, None, 2
    tokens, answers = multi_hop_queries(task, k)
    if not cot:
        return tokens, answers, None, k + 1
    targets = chains(task, k)
    return np.concatenate([tokens, targets[:, :-1]], axis=1), targets, np.arange(k, 2 * k), 2 * k


@dataclass
class TrainResult:
    """What :func:`train` returns.

    ``steps``: optimizer updates applied. ``losses``/``accuracies``: the loss and accuracy of the batch seen
    at each computed step (before its update). ``epochs``: completed passes over the queries (minibatch; full
    batch: one per step). ``path``: which gradient computation ran, ``"structured"`` or ``"dense"``.
    """

    model: Model
    steps: int  # optimizer steps taken
    reached: bool  # 100% accuracy on every query, confirmed by the exhaustive checker
    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)  # accuracy of the batch seen at each step
    seconds: float = 0.0
    path: str = "dense"
    epochs: int = 0


class EpochBatches:
    """Minibatch indices: a fresh permutation of the n queries per epoch (drawn from ``rng``), cut into
    ``ceil(n / batch)`` batches, the last one shorter when ``batch`` does not divide n. Every query is seen
    exactly once per epoch. ``next()`` returns ``(indices, epoch_ends)``."""

    def __init__(self, n: int, batch: int, rng: np.random.Generator):
        self.n, self.batch, self.rng = n, batch, rng
        self.order = np.arange(n)
        self.cursor = 0
        self.epochs = 0

    def next(self) -> tuple[np.ndarray, bool]:
        """The next batch.

        Returns
        -------
        tuple
            ``(indices, epoch_ends)``: the batch's query indices, and whether it ends an epoch.
        """
        if self.cursor == 0:
            self.order = self.rng.permutation(self.n)
        stop = min(self.n, self.cursor + self.batch)
        idx = self.order[self.cursor : stop]
        self.cursor = 0 if stop == self.n else stop
        if self.cursor == 0:
            self.epochs += 1
        return idx, self.cursor == 0


@dataclass
class StepState:
    """What a :class:`Callback` sees at a step of :func:`train`.

    Attributes
    ----------
    params : dict
        The optimizer's parameters (updated in place by each step; with a tied read-out, ``unembedding`` is
        stale and ``entity_embedding`` is the shared matrix).
    grads : dict
        This step's gradient (the keys being trained).
    loss, accuracy : float
        The batch's mean cross-entropy and the share of its answers predicted, before the update.
    """

    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    loss: float
    accuracy: float


class Callback:
    """A hook of :func:`train`'s loop. Each method returns True to stop training.

    ``on_step(step, state)`` runs after the step's loss and gradient, before its update (a stop skips the
    update); ``on_epoch_end(step, state)`` runs after the update that ended an epoch, when a step follows.
    """

    def on_step(self, step: int, state: StepState) -> bool:
        """Whether to stop before the update of ``step``.

        Parameters
        ----------
        step : int
            The step (from 0).
        state : StepState
            Its parameters, gradient, loss and batch accuracy.

        Returns
        -------
        bool
        """
        return False

    def on_epoch_end(self, step: int, state: StepState) -> bool:
        """Whether to stop after the update of ``step``, which ended an epoch.

        Parameters
        ----------
        step, state
            As in :meth:`on_step` (``params`` now updated).

        Returns
        -------
        bool
        """
        return False


class StopAtBatchAccuracy(Callback):
    """Full batch: stop before the update of a step whose own predictions reach ``threshold``."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def on_step(self, step: int, state: StepState) -> bool:
        return state.accuracy >= self.threshold


class StopAtCheckedAccuracy(Callback):
    """Minibatch: at each epoch end, stop when ``accuracy(params, steps_done)`` (an exhaustive check of the
    current weights) reaches ``threshold``."""

    def __init__(self, threshold: float, accuracy: Callable[[dict, int], float]):
        self.threshold, self.accuracy = threshold, accuracy

    def on_epoch_end(self, step: int, state: StepState) -> bool:
        return self.accuracy(state.params, step + 1) >= self.threshold


class CallFunction(Callback):
    """``train(callback=f)``: ``f(params, step, grads)`` before each update, a true value stops."""

    def __init__(self, function: Callable):
        self.function = function

    def on_step(self, step: int, state: StepState) -> bool:
        return bool(self.function(state.params, step, state.grads))


class PrintEvery(Callback):
    """``train(log_every=k)``: one line on stderr every k steps (loss, batch accuracy, seconds since
    ``start``)."""

    def __init__(self, every: int, start: float):
        self.every, self.start = every, start

    def on_step(self, step: int, state: StepState) -> bool:
        if step % self.every == 0:
            print(f"step {step:6d}  loss {state.loss:.5f}  accuracy {100 * state.accuracy:6.2f}%  "
                  f"({time.perf_counter() - self.start:.1f} s)", file=sys.stderr, flush=True)
        return False


def _loss_and_grads_in_pieces(model: Model, tokens, answers, positions, frozen: frozenset, path: str,
                              max_rows: int | None):
    """The batch's mean loss, its gradient and the predictions, from pieces of at most ``max_rows`` queries
    weighted by their size (the loss is a mean over queries)."""
    def piece(piece_tokens, piece_answers):
        if path == "structured":
            return loss_and_grads_structured(model, piece_tokens, piece_answers, frozen)
        return loss_and_grads(model, piece_tokens, piece_answers, positions, frozen)

    B = len(tokens)
    if max_rows is None or B <= max_rows:
        return piece(tokens, answers)
    loss = 0.0
    grads: dict[str, np.ndarray] = {}
    predictions: list[np.ndarray] = []
    for start in range(0, B, max_rows):
        part = slice(start, min(B, start + max_rows))
        weight = (part.stop - part.start) / B
        piece_loss, piece_grads, piece_predictions = piece(tokens[part], answers[part])
        loss += weight * piece_loss
        for key, g in piece_grads.items():
            grads[key] = grads[key] + weight * g if key in grads else weight * g
        predictions.append(np.asarray(piece_predictions).reshape(part.stop - part.start, -1))
    return loss, grads, np.concatenate(predictions).reshape(-1)


class _Objective:
    """The loss :func:`train` descends: a batch's mean cross-entropy and its gradient at the optimizer's
    parameters, with the tied read-out ``U = E`` applied (its two gradients summed into E's)."""

    def __init__(self, template: Model, tokens, answers, positions, frozen: frozenset, path: str,
                 max_rows: int | None, tie_readout: bool, lr: float):
        self.template, self.tokens, self.answers, self.positions = template, tokens, answers, positions
        self.frozen, self.path, self.max_rows = frozen, path, max_rows
        self.tie_readout, self.lr = tie_readout, lr

    def model(self, params: dict, step: int) -> Model:
        """The Model of ``params`` (``FloatingPointError`` naming ``step`` when a weight is not finite)."""
        if self.tie_readout:
            params = {**params, "unembedding": params["entity_embedding"]}
        try:
            return with_params(self.template, params)
        except ValueError as exc:  # the Model refuses non-finite weights
            raise FloatingPointError(f"parameters became non-finite at step {step} ({exc}): lower the "
                                     f"learning rate (lr = {self.lr})") from None

    def __call__(self, params: dict, batch, step: int) -> tuple[float, dict, float]:
        """``(loss, grads, accuracy)`` of the queries ``batch`` (indices or a slice)."""
        answers = self.answers[batch]
        model = self.model(params, step)
        with np.errstate(over="ignore", invalid="ignore"):
            loss, grads, predictions = _loss_and_grads_in_pieces(model, self.tokens[batch], answers,
                                                                 self.positions, self.frozen, self.path,
                                                                 self.max_rows)
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss became {loss} at step {step}: lower the learning rate "
                                     f"(lr = {self.lr})")
        if self.tie_readout and "unembedding" in grads:
            grads["entity_embedding"] = grads["entity_embedding"] + grads.pop("unembedding")
        return loss, grads, float(np.mean(predictions == answers.reshape(-1)))

    def accuracy(self, params: dict, step: int) -> float:
        """The share of every query answered by ``params`` (the exhaustive checker, in float64)."""
        return check_queries(self.model(params, step).astype(np.float64), self.tokens, self.answers,
                             positions=self.positions).accuracy


def _template(model: Model, dtype, frozen: frozenset, tie_readout: bool) -> tuple[Model, frozenset]:
    """The model to train (dense read-out, ``dtype``; ``U = E`` when tied) and the groups left frozen."""
    template = model.with_dense_readout().astype(dtype)  # training may make any read-out column nonzero
    if not tie_readout:
        return template, frozen
    if template.n_out != template.n_entities:
        raise InputError(f"a tied read-out U = E needs n_out == N, got n_out = {template.n_out}, "
                         f"N = {template.n_entities}")
    if "unembedding" in frozen and "entity_embedding" not in frozen:
        raise InputError("with a tied read-out U = E, freeze 'entity_embedding' (the shared matrix), "
                         "not 'unembedding' alone")
    template = template.replace(unembedding=template.entity_embedding)
    return template, frozen | {"unembedding"} if "entity_embedding" in frozen else frozen


def train(
    model: Model,
    tokens: np.ndarray,
    answers: np.ndarray,
    *,
    steps: int = 1000,
    lr: float = 1e-2,
    optimizer: str = "adam",
    batch_size: int | None = None,
    frozen=(),
    positions: np.ndarray | None = None,
    dtype=np.float32,
    rng: np.random.Generator | int | None = None,
    stop_at_accuracy: float | None = 1.0,
    log_every: int = 0,
    callback: Callable | Callback | None = None,
    seed: int | None = None,
    weight_decay: float | Mapping[str, float] = 0.0,
    eps: float = 1e-8,
    eps_form: str = "standard",
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.0,
    tie_readout: bool = False,
    path: str = "auto",
    max_rows: int | None = None,
) -> TrainResult:
    """Train ``model`` on (tokens, answers) with cross-entropy.

    The loop: for each step, the batch's loss and gradient; the callbacks (:class:`Callback`: early
    stopping, ``log_every``, ``callback``), any of which may stop before the update; the optimizer's update
    (:class:`Adam` or :class:`SGD`); at an epoch's end, the callbacks again.

    Parameters
    ----------
    model : Model
        The initial weights (:func:`init_model`); not modified.
    tokens, answers : ndarray
        The queries ``(n, T)`` and their answers (``(n,)``, or ``(n, P)`` read at ``positions``).
    steps : int
        Optimizer updates at most.
    lr, optimizer
        Learning rate; ``"adam"`` or ``"sgd"`` (:data:`OPTIMIZERS`).
    batch_size : int or None
        ``None``: full batch. Otherwise epochs of a fresh random permutation cut into ``ceil(n / batch_size)``
        batches (the last one shorter): every query exactly once per epoch (:class:`EpochBatches`).
    frozen
        Groups (see ``GROUPS``) that receive no update: e.g. ``("unembedding",)`` for a frozen read-out,
        ``("entity_embedding", "relation_embedding")`` for frozen embeddings.
    positions : ndarray or None
        Where answers are read (teacher forcing); ``None``: at the last position.
    dtype
        The training dtype (the weights are cast to it).
    rng, seed
        The batch order's randomness, and only it: a Generator (or integer), or the run seed of the seed
        contract, drawing from its ``"batches"`` stream. Give at most one. The initialization is
        :func:`init_model`'s own (its ``seed`` uses the ``"init"`` stream); do not pass one Generator to both.
    stop_at_accuracy : float or None
        Stop when this share of the queries is answered. Full batch: a step whose own predictions reach it
        stops before its update. Minibatch: at each epoch end (after the update of an epoch's last batch) an
        exhaustive check of the current weights. ``None``: train all ``steps``.
    log_every : int
        One line on stderr every that many steps (0: none).
    callback : callable or Callback, optional
        ``callback(params, step, grads)`` before each update, a true value stops; or a :class:`Callback`
        (its ``on_step`` and ``on_epoch_end``).
    weight_decay
        Decoupled weight decay (AdamW; for SGD the same ``θ ← (1 − lr·λ)·θ``): one λ for every trained group,
        or ``{group: λ}`` (missing groups: 0).
    eps, eps_form, betas, momentum
        Adam's ε and its form (``"standard"``: ``m̂/(√v̂ + ε)`` as in PyTorch and Optax; ``"hat"``: Kingma &
        Ba's ``ε̂``), Adam's (β1, β2); SGD's momentum. See :class:`Adam`.
    tie_readout : bool
        Train with ``U = E`` (needs ``n_out == N``): the read-out is set to the entity embedding at the start,
        the two gradients are summed into one update, and the returned model has ``U = E``. The shared matrix
        is frozen with ``"entity_embedding"``; freezing ``"unembedding"`` alone is refused.
    path : str
        ``"auto"`` (structure-aware step when it applies, see :mod:`.train_structured`),
        ``"dense"`` (the reference) or ``"structured"``. The path that ran is ``TrainResult.path``.
    max_rows : int or None
        Compute each batch's loss and gradient in pieces of at most this many queries and combine them,
        weighted by piece size (the loss is a mean over queries, so the combination is the batch's gradient,
        to rounding): bounded memory for large (e.g. full) batches. ``None``: one piece.

    Returns
    -------
    TrainResult
        The final model, confirmed by the exhaustive checker (``reached``), and the run's history.

    Raises
    ------
    InputError
        An unknown optimizer, path or group, a structured path that does not apply, bad sizes, or a tied
        read-out that cannot be.
    FloatingPointError
        A non-finite loss or weight, naming the step.
    """
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
    if path not in PATHS:
        raise InputError(f"path must be one of {PATHS}, got {path!r}")
    unknown = frozenset(frozen) - set(GROUPS)
    if unknown:
        raise InputError(f"unknown parameter groups {sorted(unknown)}; groups are {GROUPS}")
    steps = check_positive_int("steps", steps)
    if seed is not None:
        if rng is not None:
            raise InputError("give rng or seed, not both")
        rng = seed_rng(seed, "batches")
    rng = _as_rng(rng)
    tokens, answers = np.asarray(tokens, dtype=np.int64), np.asarray(answers, dtype=np.int64)
    n = tokens.shape[0]
    batch = n if batch_size is None else min(check_positive_int("batch_size", batch_size), n)
    if max_rows is not None:
        check_positive_int("max_rows", max_rows)
    template, frozen = _template(model, dtype, frozenset(frozen), tie_readout)
    decay = _group_values("weight_decay", weight_decay, 0.0)
    decay_by_key = {key: decay[group_of(key)] for key in template.arrays() if decay[group_of(key)]}
    reason = structure_reason(template, tokens, positions)
    if path == "structured" and reason is not None:
        raise InputError(f"the structured step does not apply: {reason}")
    step_path = "structured" if path != "dense" and reason is None else "dense"

    objective = _Objective(template, tokens, answers, positions, frozen, step_path, max_rows, tie_readout, lr)
    descent = (Adam(lr, betas[0], betas[1], eps, eps_form, decay_by_key) if optimizer == "adam" else
               SGD(lr, momentum, decay_by_key))
    batches = EpochBatches(n, batch, rng) if batch < n else None
    start = time.perf_counter()
    callbacks: list[Callback] = [PrintEvery(log_every, start)] if log_every else []
    if stop_at_accuracy is not None:
        callbacks.append(StopAtBatchAccuracy(stop_at_accuracy) if batches is None else
                         StopAtCheckedAccuracy(stop_at_accuracy, objective.accuracy))
    if callback is not None:
        callbacks.append(callback if isinstance(callback, Callback) else CallFunction(callback))

    history = TrainResult(template, 0, False, path=step_path)
    params = descent.start(params_of(template))
    for step in range(steps):
        batch_of_step, epoch_ends = batches.next() if batches is not None else (slice(None), True)
        loss, grads, accuracy = objective(params, batch_of_step, step)
        history.losses.append(loss)
        history.accuracies.append(accuracy)
        state = StepState(params, grads, loss, accuracy)
        if any(c.on_step(step, state) for c in callbacks):
            break
        descent.update(params, grads)
        history.steps = step + 1
        if epoch_ends and step + 1 < steps and any(c.on_epoch_end(step, state) for c in callbacks):
            break

    history.epochs = batches.epochs if batches is not None else history.steps
    history.model = with_params(template, {**params, "unembedding": params["entity_embedding"]}
                                if tie_readout else params)
    # reached: every fact certified in exact arithmetic of the trained weights (checked in float64: the cast
    # is exact, and the float64 rounding bound is far tighter than the float32 one)
    verdict = check_queries(history.model.astype(np.float64), tokens, answers, positions=positions)
    history.reached = verdict.exact
    history.seconds = time.perf_counter() - start
    return history


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
    rng = _as_rng(rng)
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
