"""The layered certificate for facts declared as steps of one shared MLP (A2(b); docs/theory.md,
"Certification for every task", A2(b)).
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np

from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Layer, Model
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task, paths
from georecall.theory.tokens import queries
from georecall.verify.checking.certify_relaxation import (
    ETA,
    KEEP_FAILING,
    Lowest,
    QueryType,
    failure_limits,
    float_allowance,
)
from georecall.verify.checking.certify_witness import STEP_SEARCH_NODES, step_witness
from georecall.verify.checking.decoders import dense_decode

__all__ = [
    "certify_steps",
]


def certify_steps(model: Model, block: np.ndarray, vectors: np.ndarray, N: int, R: int, k: int,
                  promise: Promise | None, *, step_scale: float, integer: bool = False,
                  progress: bool = False, search: bool = True) -> dict:
    """The layered certificate for facts declared as steps (A2(b)), with the output of
    :func:`certify_model` (docs/theory.md, "Certification for every task", A2(b)).

    Every layer shares one MLP whose unit pairs ``(2p, 2p + 1)``, ``p = r·N + v``, read the same coordinates
    (``W1`` columns equal), differ in bias by ``h`` and write opposite rows (``W2[2p+1] = −W2[2p]``), only on
    the declared block S; the task adds ``±κ·a_{π_r(v)}`` to those rows. Attention scores read positions only
    and values only coordinates nothing writes, so the rest of the last position's residual before layer j's
    MLP is a function of the path alone, computed by THE forward pass of F with W2 = 0. Induction on the
    layer, relaxing the state to *some code* ``a_c``: if for every layer j, path w and code c the pair
    ``(r_j, c)`` has both pre-activations ``>= σ`` and every other unit ``<= −σ`` (σ a bound on the rounding
    of the computed pre-activation and on the drift of the state), the MLP adds exactly ``h·W2[2p]`` to S,
    i.e. ``a_{π_{r_j}(c)} − a_c`` up to the drift η (bounded from the stored numbers), so S holds a code
    again; after k layers S holds ``a_{π_w(s)}`` up to ``k·η``, and the margins are computed for every code
    as the final state. Float mode only.

    When the argument fails somewhere (a pair not surely on, or another unit not surely off), the state may
    leave the codebook and nothing is certified; with ``search``, :func:`~georecall.verify.checking.
    certify_witness.step_witness` then looks for a task whose query fails (branching on the slots the
    firing pairs read), returned as ``"step_witness"``: ``(task, subject, path index, margin)``.

    Parameters
    ----------
    model : Model
        The family's model (without the task's part of W2, as a :class:`Family` holds it): one MLP shared by
        every layer, W2 and the entity table written on the declared block S only, ``b2 = 0``.
    block : numpy.ndarray
        The declared state block S: the residual coordinates a code occupies (integer).
    vectors : numpy.ndarray
        The codebook ``(>= N, D)``; its first N rows are the codes a state ranges over.
    N, R, k : int
        Entities, relations and hops (one layer per hop).
    promise : Promise or None
        Its ``margin`` sets which margins count as failing (None: margin > 0 only).
    step_scale : float
        κ, the scale of the declared rows ``±κ·a_{π_r(v)}`` (the family's ``constants["step_scale"]``).
    integer : bool
        Integer mode: not supported (the answer is ``{"unsupported": ...}``).
    progress : bool
        Progress per layer on stderr.
    search : bool
        Search a failing task when the argument fails (otherwise the answer gives no verdict).

    Returns
    -------
    dict
        ``{"unsupported": reason}`` in integer mode or for a model outside the argument's shape (one MLP
        shared by the layers in on/off unit pairs, attention on positions only). Otherwise the keys of
        :func:`~georecall.verify.checking.certify_product.certify_model` (``"min"``, ``"argmin"``,
        ``"failing"``, ``"reasons"``, ``"points"``, ``"shut"``, ``"enumerated"``, ``"types"``,
        ``"allowance"``, ``"types_list"``) and ``"drift_per_layer"`` (η); when some pair is not decided, no
        margins, and ``"step_witness"`` when the search found a failing task.
    """
    if integer:
        return {"unsupported": "steps (A2(b)) are certified in float mode (use --float)"}
    st = _shape(model, block, N, R)
    if isinstance(st, str):
        return {"unsupported": st}
    tokens, base, T = _path_rests(st, N, R, k)
    e_base = _rest_error(st, T)
    V = np.asarray(vectors[:N], dtype=np.float64)
    A_max = float(np.abs(V).max(initial=0.0))
    kappa = float(step_scale)
    eta = _drift(st, V, N, kappa)
    if isinstance(eta, str):
        return {"unsupported": eta}
    types = _path_types(tokens, R, k)
    shut, enumerated, reasons, failing_fire = _layers_decided(st, base, types, V, A_max, e_base, eta, N,
                                                              progress)
    allowance = _readout_allowance(st, base[-1], A_max, k, eta, e_base)
    threshold = None if promise is None else promise.margin
    result: dict = {"min": math.inf, "argmin": None, "failing": [], "reasons": reasons[:16], "points": 0,
                    "shut": shut, "enumerated": enumerated, "types": len(types), "allowance": allowance,
                    "types_list": types, "drift_per_layer": eta}
    if failing_fire:  # the state may leave the codebook: search a task that fails, branching on slots
        limits = _search_limits(st, threshold, promise, A_max, kappa, T)
        found = step_witness(model, st.S, V, kappa, N, R, k, failing_fire, *limits) if search else None
        if found is None:
            result["reasons"].append({"why": f"the witness search (branching on the slots that firing pairs "
                                             f"read, at most {STEP_SEARCH_NODES} tasks) found no task below "
                                             "the promise: no verdict"})
        else:
            result["step_witness"] = found
        return result
    _final_margins(result, st, base[-1], V, N, k, *failure_limits(threshold, promise, False, allowance))
    return result


_U = 2.0**-53  # the unit roundoff of float64


def _gamma(n: int) -> float:
    """The forward-error factor ``γ_n = n·u / (1 − n·u)`` of n float64 operations."""
    return n * _U / (1 - n * _U)


def _col(W) -> float:
    """The largest l1 norm of a column of ``W`` (sums over the second-to-last axis)."""
    return float(np.abs(W).sum(axis=-2).max(initial=0.0))


@dataclasses.dataclass(frozen=True)
class _Steps:
    """The steps family's parts the layered argument reads (:func:`_shape`), in float64."""

    model: Model
    mlp: MLP  # the one MLP every layer shares
    S: np.ndarray  # the declared state block
    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    E: np.ndarray  # the entity table
    d: int
    m: int


def _shape(model: Model, block: np.ndarray, N: int, R: int) -> _Steps | str:
    """Whether the model has the steps' shape the argument needs (else the reason it is unsupported)."""
    layers = model.layers
    mlp = layers[0].mlp if layers else None
    if mlp is None or any(layer.mlp is not mlp for layer in layers):
        return "steps need one MLP shared by every layer"
    d, S = model.d, np.asarray(block, dtype=np.int64)
    W1, b1 = mlp.W1.astype(np.float64), mlp.b1.astype(np.float64)
    W2, b2 = mlp.W2.astype(np.float64), mlp.b2.astype(np.float64)
    m = W1.shape[1]
    off = np.ones(d, dtype=bool)
    off[S] = False
    E = model.entity_embedding.astype(np.float64)
    paired = np.array_equal(W1[:, 0::2], W1[:, 1::2]) and np.array_equal(W2[1::2], -W2[0::2])
    if m != 2 * R * N or not paired:
        return ("steps need 2·R·N units in pairs reading the same coordinates and writing "
                "opposite rows")
    if np.any(W2[:, off] != 0) or np.any(b2 != 0) or np.any(E[:, off] != 0):
        return "steps need W2 and the entity table on the declared block only, and b2 = 0"
    written = np.zeros(d, dtype=bool)
    written[S] = True
    for layer in layers:
        if layer.attention is not None:
            written |= np.any(layer.attention.W_O != 0, axis=(0, 1))
    token = np.any(E != 0, axis=0) | np.any(model.relation_embedding != 0, axis=0)
    for j, layer in enumerate(layers):
        att = layer.attention
        if att is None:
            continue
        if np.any(att.W_O[:, :, S] != 0) or np.any(att.W_V[:, written, :] != 0):
            return f"layer {j}: attention writes the state block or reads written coordinates"
        if att.kind != "uniform" and (np.any(att.W_Q[:, token | written, :] != 0)  # type: ignore[index]
                                      or np.any(att.W_K[:, token | written, :] != 0)):  # type: ignore[index]
            return f"layer {j}: attention scores read token or written coordinates"
    return _Steps(model, mlp, S, W1, b1, W2, E, d, m)


def _path_rests(st: _Steps, N: int, R: int, k: int) -> tuple[np.ndarray, list[np.ndarray], int]:
    """The rest of the last position's residual before each layer's MLP, per path (THE forward pass of F
    with W2 = 0; subject 0: E is on S only): ``(one query per path, rests per layer, T)``."""
    model, mlp = st.model, st.mlp
    zero = MLP(mlp.W1, mlp.b1, np.zeros_like(mlp.W2), mlp.b2)
    silent = dataclasses.replace(model, layers=tuple(Layer(layer.attention, zero) for layer in model.layers))
    tokens, _ = queries(Task(np.tile(np.arange(N, dtype=np.int64), (R, 1))), k)
    tokens = tokens[::N]  # one query per path (query index w·N + s)
    T = tokens.shape[1]
    _, trace = forward(silent, tokens, trace=True)
    base = [trace.residual[2 * j + 1][:, -1].astype(np.float64) for j in range(len(model.layers))]
    for x in base:
        x[:, st.S] = 0.0
    return tokens, base, T


def _rest_error(st: _Steps, T: int) -> float:
    """A forward-error bound of the rests (attention only writes them): magnitudes stage by stage."""
    model, d = st.model, st.d
    B = max(float(np.abs(model.relation_embedding).max(initial=0.0)), float(np.abs(st.E).max(initial=0.0)))
    if model.position_embedding is not None:
        B += float(np.abs(model.position_embedding).max(initial=0.0))
    e_base = 0.0
    for layer in model.layers:
        att = layer.attention
        if att is None:
            continue
        pre = B * sum(_col(att.W_V[h]) * _col(att.W_O[h]) for h in range(att.heads))
        werr = 0.0
        if att.kind != "uniform":
            top = att.inverse_temperature * B * B * max(_col(att.W_Q[h]) * _col(att.W_K[h])  # type: ignore[index]
                                                        for h in range(att.heads))
            werr = 2 * math.expm1(4 * _U * top + 4 * _U) + (T + 4) * 2 * _U
        n_y = T * att.heads * (2 * d + 2) + T + 8
        e_base += _gamma(n_y) * (B + pre) + werr * pre + n_y * ETA  # ETA: underflow, per product
        B += pre
    return e_base


def _drift(st: _Steps, V: np.ndarray, N: int, kappa: float) -> float | str:
    """The drift η of the state per layer, ``|a_c + h·W2[2p] − a_{π(c)}|`` with the stored numbers
    (docs/theory.md); the reason it is unsupported when a pair's biases are in the wrong order."""
    u, b1, A_max = _U, st.b1, float(np.abs(V).max(initial=0.0))
    h_hat = b1[0::2] - b1[1::2]  # (m/2,) the pairs' bias differences, each within u·|h| of the exact one
    if np.any(h_hat <= 0):
        return "steps need each pair's second unit to have the lower bias"
    c_of = np.arange(st.m // 2) % N
    w_rows = st.W2[0::2][:, st.S]  # F's task-independent part of each pair's step
    scaled = h_hat[:, None] * w_rows
    first = np.abs(V[c_of] + scaled) + 2 * u * (np.abs(V[c_of]) + np.abs(scaled))
    first += u * np.abs(h_hat[:, None] * w_rows)
    second = (np.abs(h_hat * kappa - 1) + 3 * u * np.abs(h_hat * kappa)) * A_max
    third = 4 * u * np.abs(h_hat) * (np.abs(w_rows).max(axis=1) + kappa * A_max)
    return float((first.max(axis=1) + second + third).max(initial=0.0)) * (1 + 8 * u) + 8 * ETA


def _path_types(tokens: np.ndarray, R: int, k: int) -> list[QueryType]:
    """One query type per path, labelled with its relations in the order they apply."""
    rows_of = paths(R, k)
    types = []
    for w in range(tokens.shape[0]):
        applied = [int(r) for r in rows_of[w][::-1]]
        types.append(QueryType([int(t) for t in tokens[w, :-1]] + [-1], [k], (k, w), 0,
                               {"path": w, "relations": applied}, {k: []}))
    return types


def _layers_decided(st: _Steps, base: list[np.ndarray], types: list[QueryType], V: np.ndarray, A_max: float,
                    e_base: float, eta: float, N: int, progress: bool) -> tuple[int, int, list, list]:
    """Decide, layer by layer, whether every path's state stays a code (its pair surely on, every other unit
    surely off): ``(units shut, units enumerated, reasons, failures (layer, path, state))``."""
    W1, b1, S, d, m = st.W1, st.b1, st.S, st.d, st.m
    AW = V @ W1[S]  # (N, m): the state's part of every pre-activation
    W1_abs_S, W1_col = _col(W1[S]), _col(W1)
    reasons: list = []
    failing_fire: list = []
    shut = enumerated = 0
    ar = np.arange(N)
    n_layers = len(st.model.layers)
    for j in range(n_layers):
        drift = j * eta
        z_rest = base[j] @ W1 + b1  # (paths, m)
        rest_abs = np.abs(base[j]) @ np.abs(W1) + np.abs(b1)
        sigma = (2 * _gamma(d + 4) * (float(rest_abs.max(initial=0.0)) + A_max * W1_abs_S) + 2
                 * _gamma(len(S)) * A_max * W1_abs_S + e_base * W1_col + drift * W1_abs_S
                 + 2 * (d + 4 + len(S)) * ETA) * (1 + 8 * _U)
        for w in range(len(types)):
            r_j = types[w].label["relations"][j]
            z = AW + z_rest[w]
            p_star = r_j * N + ar
            on = np.minimum(z[ar, 2 * p_star], z[ar, 2 * p_star + 1])
            z[ar, 2 * p_star] = -np.inf
            z[ar, 2 * p_star + 1] = -np.inf
            others = z.max(axis=1)
            bad = np.flatnonzero((on < sigma) | (others > -sigma))
            shut += int(N * (m - 2) - np.count_nonzero(z > -sigma))
            enumerated += 2 * N
            for c in bad[:4]:
                reasons.append({"query_type": {**types[w].label, "layer": j + 1, "state": int(c)},
                                "why": f"layer {j + 1}: the pair for (relation {r_j}, state {int(c)}) has "
                                       f"pre-activation {float(on[c]):.4g} (needs >= σ = {sigma:.3g}) or "
                                       f"another unit reaches {float(others[c]):.4g} (needs <= −σ): the "
                                       "state may not stay a code"})
            failing_fire += [(j, w, int(c)) for c in bad[:4]]
        if progress:
            print(f"\r  layer {j + 1}/{n_layers}: every path and state decided", end="", file=sys.stderr,
                  flush=True)
    if progress:
        print(file=sys.stderr)
    return shut, enumerated, reasons, failing_fire


def _readout_allowance(st: _Steps, last: np.ndarray, A_max: float, k: int, eta: float,
                       e_base: float) -> float:
    """The forward-error allowance of the read-out of every code as the final state, after k layers."""
    cols = st.model.readout.columns
    U_read = np.asarray(st.model.readout.matrix, dtype=np.float64)
    row1 = float(np.abs(U_read).sum(axis=1).max(initial=0.0))
    B_v = float(np.abs(last).max(initial=0.0)) + A_max + k * eta
    return 8.0 * (row1 * (k * eta + e_base) + _gamma(cols.size + 2) * B_v * row1 + (cols.size + 2) * ETA)


def _search_limits(st: _Steps, threshold: float | None, promise: Promise | None, A_max: float, kappa: float,
                   T: int) -> tuple[float, float]:
    """The failure limits for the witness search: a candidate fails THE forward pass of one task, definite
    below the promise by more than that pass's own forward-error allowance (the induction's drift bound does
    not hold there)."""
    mlp, d = st.mlp, st.d
    bound = MLP(mlp.W1, mlp.b1, np.abs(st.W2) + np.where(np.isin(np.arange(d), st.S), kappa * A_max, 0.0),
                mlp.b2)
    concrete = float_allowance(dataclasses.replace(st.model, layers=tuple(
        Layer(layer.attention, bound) for layer in st.model.layers)), T)
    return failure_limits(threshold, promise, False, concrete)


def _final_margins(result: dict, st: _Steps, last: np.ndarray, V: np.ndarray, N: int, k: int, limit: float,
                   floor: float) -> None:
    """The margins of every code as the final state, per path, into ``result`` (minimum and failing)."""
    cols = st.model.readout.columns
    U_read = np.asarray(st.model.readout.matrix, dtype=np.float64)
    at = np.searchsorted(cols, st.S)
    placed = np.zeros((N, cols.size))
    hit = (at < cols.size) & (cols[np.minimum(at, cols.size - 1)] == st.S)
    placed[:, at[hit]] = V[:, hit]
    ar = np.arange(N)
    for w in range(last.shape[0]):
        v_read = last[w, cols][None, :] + placed
        _, margins = dense_decode(v_read, ar, U_read)
        lowest = Lowest(1, limit, floor)
        lowest.add(margins, [ar])
        result["points"] += N
        if lowest.low < result["min"]:
            result["min"], result["argmin"] = lowest.low, (w, lowest.low_values, [(k, w)], 1, lowest.low)
        result["failing"] += [(m_, w, vals, [(k, w)]) for m_, vals in lowest.failing]
        result["failing"].sort(key=lambda f: f[0])
        del result["failing"][KEEP_FAILING:]
