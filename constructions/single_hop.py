"""Single-hop constructions: G1 (geometric, the paper's Theorem 4.1) and A1 (associative-memory baseline).

Both read a query ``(s, r)`` as the two tokens ``⟨r, s⟩`` (relation first, subject last) and share the same
one-layer architecture: uniform causal attention with ``W_V = I``, ``W_O = g·I`` (gain g, default 2), so that at
the last position the residual is ``y = e_s + g·(e_s + q_r)/2 = c1·e_s + c2·q_r`` with ``c1 = 1 + g/2`` and
``c2 = g/2``; then a ReLU MLP; then the read-out ``U_j = λ·J_O a_j`` on an output block ``O``.
With ±1 codes, g = 2 and integer β, λ, κ every weight is a small integer (integer mode).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from georecall.constructions.codes import Codes, make_codes
from georecall.constructions.model import MLP, Attention, Layer, Model
from georecall.theory.statements import Promise, a1_promise, attention_constants, g1_promise
from georecall.theory.tasks import Task


@dataclass(frozen=True)
class Construction:
    """A built model with the promise it was built under and the constants used."""

    model: Model
    promise: Promise
    codes: Codes
    constants: dict


def uniform_gain_attention(d: int, gain: float) -> Attention:
    """One uniform head with ``W_V = I_d`` and ``W_O = gain·I_d``."""
    return Attention("uniform", W_V=np.eye(d)[None], W_O=gain * np.eye(d)[None])


def code_readout(codes: Codes, n_out: int, d: int, out_block: slice, lam: float) -> np.ndarray:
    """``U (n_out, d)`` with ``U_j = λ·a_j`` on ``out_block`` and zero elsewhere."""
    U = np.zeros((n_out, d))
    U[:, out_block] = lam * codes.vectors[:n_out]
    return U


def relation_tagged_readout(codes: Codes, N: int, R: int, d: int, out_block: slice, tags: np.ndarray, lam: float,
                            gamma: float) -> np.ndarray:
    """Read-out for *disjoint* attributes (answer id ``r·N + j``): ``U_{(r,j)} = λ·(J_O a_j + γ·1_{tags[r]})``.

    ``tags[r]`` is a residual coordinate that holds a positive value ``t`` exactly when relation r is asked
    (G1's gate, A1's relation coordinate) and 0 otherwise. Against an answer of the wrong relation the right
    one gains ``λ·γ·t`` and loses at most ``λ·c·|a|²(1 − μ)`` on the code part when ``γ·t >= c·|a|²(1 − μ)``
    (c the scale of the code written in O): the single-hop margin is unchanged.
    """
    U = np.zeros((N * R, d))
    U[:, out_block] = lam * np.tile(codes.vectors[:N], (R, 1))
    U[np.arange(N * R), np.repeat(tags, N)] = lam * gamma
    return U


def _resolve_codes(N: int, codes: Codes | str, D: int | None, rng, integer: bool) -> Codes:
    if isinstance(codes, Codes):
        if codes.N < N:
            raise ValueError(f"codebook has {codes.N} codes, fewer than N = {N}")
        return codes
    return make_codes(codes, N, D, rng, scale="integer" if integer else "unit")


def build_g1(
    task: Task,
    codes: Codes | str = "binary",
    *,
    D: int | None = None,
    beta: float | None = None,
    lam: float = 1.0,
    gain: float = 2.0,
    integer: bool = False,
    rng: np.random.Generator | int | None = None,
) -> Construction:
    """G1: block superposition + ReLU-gated relation selector (the paper's Theorem 4.1).

    Construction. Coordinates: R blocks ``B_r`` of size D, R gate coordinates ``g_r``, an output block ``O`` of
    size D; ``d = R·D + R + D``.

    - Subject embedding ``e_s = Σ_r J_{B_r} a_{π_r(s)}`` (block superposition of its R attribute codes); the
      subject table is the only part that depends on the facts.
    - Relation embedding ``q_r = β·1_{g_r}``.
    - Hidden unit ``(r, i, σ)``, ``σ = ±1``, ``m = 2·R·D``: ``ReLU(σ·y_{B_r,i} + y_{g_r} − c2·β)``. For the asked
      relation ρ it equals ``ReLU(σ·c1·a_{π_ρ(s),i})``; for ``r ≠ ρ`` it is at most ``c1·A − c2·β``.
    - ``W2`` writes ``σ`` into ``O_i``, so the MLP outputs ``c1·a_{π_ρ(s)}`` in O (``ReLU(t) − ReLU(−t) = t``).
    - ``U_j = λ·J_O a_j``.

    Exactness. If ``c2·β > c1·A`` (A = max |code entry|) every unit of an unasked relation is shut, the logit of
    answer j is exactly ``λ·c1·<a_j, a_{π_ρ(s)}>`` and every query's margin is ``>= λ·c1·|a|²·(1 − μ) > 0``
    when ``μ < 1``: argmax is right on all N·R queries.

    Disjoint attributes (answer ids ``r·N + j``): ``U_{(r,j)} = λ(J_O a_j + γ·1_{g_r})`` with
    ``γ = c1|a|²(1 − μ)/(c2·β)``; the open gate adds ``λ·γ·c2·β`` to the asked relation's answers only, so the
    margin is the same (``relation_tagged_readout``).

    Default ``β = 2·c1·A/c2`` (twice the gate bound; 4 for ±1 codes). ``integer=True`` uses ±1 codes
    (unnormalised) so every weight is an integer; a ``β`` at or below the bound raises ``ValueError``.
    """
    N, R = task.N, task.R
    codes = _resolve_codes(N, codes, D, rng, integer)
    D = codes.D
    c1, c2 = attention_constants(gain)
    if beta is None:
        beta = 2.0 * c1 * codes.max_abs / c2 if gain > 0 else 0.0
    promise = g1_promise(N, R, D, norm_sq=codes.norm_sq, mu=codes.mu, max_abs=codes.max_abs,
                         beta=beta, lam=lam, gain=gain, n_out=task.n_answers).require()
    if integer and not (codes.integer and float(beta).is_integer() and float(lam).is_integer()
                        and float(gain).is_integer() and gain % 2 == 0):
        raise ValueError("integer mode needs ±1 codes and integer β, λ and an even gain g")

    d = promise.d
    blocks = np.arange(R * D).reshape(R, D)  # blocks[r, i] = coordinate of B_r, entry i
    gates = R * D + np.arange(R)
    out = slice(R * D + R, d)

    E = np.zeros((N, d))
    E[:, : R * D] = codes.vectors[task.table].transpose(1, 0, 2).reshape(N, R * D)  # e_s = Σ_r J_{B_r} a_{π_r(s)}
    Q = np.zeros((R, d))
    Q[np.arange(R), gates] = beta

    m = promise.m
    unit = np.arange(m).reshape(R, D, 2)  # unit[r, i, 0] has σ = +1, unit[r, i, 1] has σ = −1
    sigma = np.array([1.0, -1.0])
    W1 = np.zeros((d, m))
    W1[blocks[:, :, None], unit] = sigma
    W1[gates[:, None, None], unit] = 1.0
    b1 = np.full(m, -c2 * beta)
    W2 = np.zeros((m, d))
    W2[unit, (R * D + R + np.arange(D))[None, :, None]] = sigma

    if task.attributes == "disjoint":  # the open gate (value c2·β) tags the asked relation
        gamma = c1 * codes.norm_sq * (1 - codes.mu) / (c2 * beta)
        U = relation_tagged_readout(codes, N, R, d, out, gates, lam, math.ceil(gamma - 1e-9) if integer else gamma)
    else:
        U = code_readout(codes, N, d, out, lam)
    model = Model(
        entity_embedding=E, relation_embedding=Q, unembedding=U,
        layers=(Layer(uniform_gain_attention(d, gain), MLP(W1, b1, W2, np.zeros(d))),),
        meta={"attributes": task.attributes, "construction": "G1", "codes": codes.kind, "D": D, "beta": beta, "lambda": lam, "gain": gain,
              "integer": integer},
    )
    return Construction(model, promise, codes, {"beta": beta, "lambda": lam, "gain": gain, "c1": c1, "c2": c2})


def build_a1(
    task: Task,
    codes: Codes | str = "binary",
    *,
    D: int | None = None,
    lam: float = 1.0,
    gain: float = 2.0,
    integer: bool = False,
    rng: np.random.Generator | int | None = None,
) -> Construction:
    """A1: associative memory, the view the paper argues against: facts live in MLP units, one per fact.

    Construction. Coordinates: a subject block ``S`` (D), one-hot relation coordinates ``rel_r`` (R), an output
    block ``O`` (D); ``d = 2·D + R``. Embeddings are fact-independent: ``e_s = J_S a_s``, ``q_r = 1_{rel_r}``.
    Unit ``(s, r)`` (``m = N·R``): ``ReLU(<a_s, y_S> + κ·y_{rel_r} − θ)`` with ``θ = c1·|a|²`` and
    ``κ = c1·|a|²(1 − μ)/c2``; it writes ``a_{π_r(s)}`` into O. ``U_j = λ·J_O a_j``.

    Firing condition (exact). On query ``(s', ρ)`` the pre-activation of unit ``(s, r)`` is
    ``c1·<a_s, a_s'> + c1|a|²(1 − μ)·[r = ρ] − c1|a|²``: it equals ``h* = c1|a|²(1 − μ)`` when
    ``(s', ρ) = (s, r)`` and is ``<= 0`` otherwise, because ``<a_s, a_s'> <= μ|a|²`` for ``s' ≠ s``.
    So exactly one unit fires, the output is ``h*·a_{π_ρ(s')}`` and the margin is ``λ·h*·|a|²(1 − μ) > 0`` given
    ``μ < 1``. With ±1 codes and g = 2, ``h* = 2(|a|² − max_{i≠j}<a_i, a_j>)`` is an integer.
    """
    N, R = task.N, task.R
    codes = _resolve_codes(N, codes, D, rng, integer)
    D = codes.D
    c1, c2 = attention_constants(gain)
    promise = a1_promise(N, R, D, norm_sq=codes.norm_sq, mu=codes.mu, lam=lam, gain=gain,
                         n_out=task.n_answers).require()
    if integer and not (codes.integer and float(lam).is_integer() and float(gain).is_integer() and gain % 2 == 0):
        raise ValueError("integer mode needs ±1 codes, integer λ and an even gain g")
    d, m = promise.d, promise.m
    S, rel, out = slice(0, D), D + np.arange(R), slice(D + R, d)
    gap = codes.norm_sq - codes.mu * codes.norm_sq  # |a|²(1 − μ); an exact integer for ±1 codes
    if integer:
        gap = float(round(gap))
    theta, kappa = c1 * codes.norm_sq, c1 * gap / c2

    E = np.zeros((N, d))
    E[:, S] = codes.vectors[:N]
    Q = np.zeros((R, d))
    Q[np.arange(R), rel] = 1.0

    # unit index u = r * N + s listens to (s, r) and writes the code of π_r(s)
    W1 = np.zeros((d, m))
    W1[S, :] = np.tile(codes.vectors[:N].T, (1, R))
    W1[rel[:, None], np.arange(m).reshape(R, N)] = kappa
    b1 = np.full(m, -theta)
    W2 = np.zeros((m, d))
    W2[:, out] = codes.vectors[task.table.reshape(-1)]
    if task.attributes == "disjoint":  # the relation coordinate (value c2) tags the asked relation
        U = relation_tagged_readout(codes, N, R, d, out, rel, lam, c1 * gap * gap / c2)
    else:
        U = code_readout(codes, N, d, out, lam)
    model = Model(
        entity_embedding=E, relation_embedding=Q, unembedding=U,
        layers=(Layer(uniform_gain_attention(d, gain), MLP(W1, b1, W2, np.zeros(d))),),
        meta={"attributes": task.attributes, "construction": "A1", "codes": codes.kind, "D": D, "lambda": lam, "gain": gain, "integer": integer},
    )
    return Construction(model, promise, codes, {"lambda": lam, "gain": gain, "c1": c1, "c2": c2,
                                                "theta": theta, "kappa": kappa, "h_star": c1 * gap})


def single_hop_queries(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """All N·R queries as tokens ``⟨N + r, s⟩`` (row ``r·N + s``) and their answer ids."""
    N, R = task.N, task.R
    r, s = np.divmod(np.arange(N * R, dtype=np.int64), N)
    tokens = np.stack([N + r, s], axis=1)
    return tokens, task.single_hop().reshape(-1)
