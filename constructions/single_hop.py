"""Single-hop constructions: G1 (geometric, the paper's Theorem 4.1) and A1 (associative-memory baseline).

Both read a query ``(s, r)`` as the two tokens ``⟨r, s⟩`` (relation first, subject last; ``theory.tokens``)
and share the same one-layer architecture: uniform causal attention with ``W_V = I``, ``W_O = g·I`` (gain g,
default 2), so that at the last position the residual is ``y = e_s + g·(e_s + q_r)/2 = c1·e_s + c2·q_r`` with
``c1 = 1 + g/2`` and ``c2 = g/2``; then a ReLU MLP; then the read-out ``U_j = λ·J_O a_j`` on an output block
``O``. With ±1 codes, g = 2 and integer G, λ every weight is a small integer (integer mode).
Residual coordinates are allocated by name (``constructions.layout``); the model's ``meta["layout"]`` names
them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from georecall.constructions.codes import Codes, make_codes
from georecall.constructions.encoding import Family, TaskEncoding, assemble_model
from georecall.constructions.layout import Layout
from georecall.constructions.model import MLP, Layer, Model
from georecall.constructions.parts import (
    code_readout,
    gated_selector,
    relation_tagged_readout,
    uniform_gain_attention,
)
from georecall.errors import ConditionError, InputError
from georecall.theory.statements import Promise, a1_promise, attention_constants, g1_promise
from georecall.theory.tasks import Task
from georecall.theory.tokens import single_hop_queries  # noqa: F401  (re-exported for old imports)

__all__ = ["A1_ENCODING", "G1_ENCODING", "GATE_RANGE", "Construction", "a1_family", "assemble", "build_a1",
           "build_g1", "g1_family", "resolve_codes"]

G1_ENCODING = TaskEncoding("relations", "blocks", "single")
A1_ENCODING = TaskEncoding("relations", "out", "single", array="layers.0.mlp.W2")

# The largest gate G1 accepts, as a multiple of the bound c1·max|a| that c2·G must exceed (docs/theory.md).
GATE_RANGE = 2.0**26


@dataclass(frozen=True, eq=False)
class Construction:
    """A built model with the promise it was built under, its codes, constants and residual layout."""

    model: Model
    promise: Promise
    codes: Codes
    constants: dict
    layout: Layout | None = None


def assemble(family: Family, task: Task) -> Construction:
    """The construction on ``task``: ``M(π) = F ⊕ enc(π)`` (``encoding.assemble_model``) with the family's
    promise, codes, constants and layout.

    Parameters
    ----------
    family : Family
    task : Task

    Returns
    -------
    Construction

    Raises
    ------
    FamilyError, InputError
        From :func:`~georecall.constructions.encoding.assemble_model`.
    """
    return Construction(assemble_model(family, task), family.promise, family.codes, family.constants,
                        family.layout)


def resolve_codes(N: int, codes: Codes | str, D: int | None, rng, integer: bool) -> Codes:
    """The codebook a builder uses: a given :class:`Codes` (which must have N codes, and D must then be None
    or agree), or ``make_codes(kind, N, D, rng)`` at integer scale when ``integer``.

    Parameters
    ----------
    N : int
        Codes needed.
    codes : Codes or str
        A codebook, or a kind for :func:`~georecall.constructions.codes.make_codes`.
    D : int or None
        Code length.
    rng : numpy.random.Generator or int or None
        The random source of drawn codes.
    integer : bool
        Integer scale (±1 entries).

    Returns
    -------
    Codes

    Raises
    ------
    InputError
        A codebook with fewer than N codes, a D that contradicts it, or non-integer codes in integer mode
        (and whatever :func:`~georecall.constructions.codes.make_codes` raises).
    ConditionError
        Binary codes too short for N.
    """
    if isinstance(codes, Codes):
        if codes.N < N:
            raise InputError(f"codebook has {codes.N} codes, fewer than N = {N}")
        if D is not None and D != codes.D:
            raise InputError(f"D = {D} contradicts the codebook given, whose codes have length {codes.D}")
        if integer and not codes.integer:
            raise InputError("integer mode needs a codebook with integer (±1) entries")
        return codes
    return make_codes(codes, N, D, rng, scale="integer" if integer else "unit")


def _meta(construction: str, attributes: str, codes: Codes, layout: Layout, **constants) -> dict:
    return {"construction": construction, "attributes": attributes, "codes": codes.kind, "D": codes.D,
            "layout": layout.as_dict(), **constants}


def _n_answers(N: int, R: int, attributes: str) -> int:
    if attributes not in ("shared", "disjoint"):
        raise InputError(f"attributes must be 'shared' or 'disjoint', got {attributes!r}")
    return N * R if attributes == "disjoint" else N


def build_g1(task: Task, codes: Codes | str = "binary", **options) -> Construction:
    """G1 on ``task``: ``assemble(g1_family(task.N, task.R, codes, attributes=task.attributes, ...), task)``
    (:func:`g1_family` states the construction; options as there).

    Returns
    -------
    Construction
    """
    return assemble(g1_family(task.N, task.R, codes, attributes=task.attributes, **options), task)


def g1_family(
    N: int,
    R: int,
    codes: Codes | str = "binary",
    *,
    attributes: str = "shared",
    D: int | None = None,
    gate: float | None = None,
    lam: float = 1.0,
    gain: float = 2.0,
    integer: bool = False,
    rng: np.random.Generator | int | None = None,
) -> Family:
    """G1: block superposition + ReLU-gated relation selector (the paper's Theorem 4.1).

    Construction. Residual layout: R blocks ``B_r`` of size D, R gate coordinates ``g_r``, an output block
    ``O`` of size D; ``d = R·D + R + D``.

    - Subject embedding ``e_s = Σ_r J_{B_r} a_{π_r(s)}`` (block superposition of its R attribute codes); the
      subject table is the only part that depends on the facts.
    - Relation embedding ``q_r = G·1_{g_r}`` (G the gate constant).
    - Hidden unit ``(r, i, σ)``, ``σ = ±1``, ``m = 2·R·D``: ``ReLU(σ·y_{B_r,i} + y_{g_r} − c2·G)``. For the
      asked relation ρ it equals ``ReLU(σ·c1·a_{π_ρ(s),i})``; for ``r ≠ ρ`` it is at most ``c1·A − c2·G``.
    - ``W2`` writes ``σ`` into ``O_i``, so the MLP outputs ``c1·a_{π_ρ(s)}`` in O
      (``ReLU(t) − ReLU(−t) = t``).
    - ``U_j = λ·J_O a_j``.

    Exactness. If ``c2·G > c1·A`` (A = max |code entry|) every unit of an unasked relation is shut, the logit
    of answer j is exactly ``λ·c1·<a_j, a_{π_ρ(s)}>`` and every query's margin is ``>= λ·c1·|a|²(1 − μ) > 0``
    when the codes are distinct: argmax is right on all N·R queries.

    Disjoint attributes (answer ids ``r·N + j``): ``U_{(r,j)} = λ(J_O a_j + γ·1_{g_r})`` with
    ``γ = c1|a|²(1 − μ)/(c2·G)``; the open gate adds ``λ·γ·c2·G`` to the asked relation's answers only, so the
    margin is the same (``relation_tagged_readout``).

    The family is built without a task: the entity table is left out (:class:`~georecall.constructions.
    encoding.Family`); :func:`build_g1` / :func:`assemble` add ``E[s] = Σ_r J_{B_r} a_{π_r(s)}``.

    Parameters
    ----------
    N, R : int
        Entities and relations.
    codes : {"binary", "sign", "gaussian"} or Codes
        The codebook, or its kind.
    attributes : {"shared", "disjoint"}
        The answer ids' variant.
    D : int, optional
        Code length (default: ``⌈log2 N⌉`` binary, the high-probability length otherwise).
    gate : float, optional
        The gate constant G (default ``2·c1·A/c2``: twice the bound; 4 for ±1 codes), at most
        ``GATE_RANGE·c1·A/c2``.
    lam : float
        The read-out scale λ.
    gain : float
        The attention gain g (``c1 = 1 + g/2``, ``c2 = g/2``).
    integer : bool
        ±1 codes at integer scale, so that every weight is an integer (integer mode).
    rng : numpy.random.Generator or int or None
        The random source of sign and Gaussian codes.

    Returns
    -------
    Family
        The model without its entity table, its promise (:func:`~georecall.theory.statements.g1_promise`),
        codes, constants, layout and encoding (:data:`G1_ENCODING`).

    Raises
    ------
    ConditionError
        Outside the conditions: codes not distinct, ``c2·G <= c1·A``, ``c2·G > 2^26·c1·A`` (the gate range:
        beyond it float64 rounding of the gate swamps the codes), integer mode with non-integer constants.
    InputError
        A codebook with fewer than N codes, or one that contradicts D or integer mode.
    """
    n_answers = _n_answers(N, R, attributes)
    codes = resolve_codes(N, codes, D, rng, integer)
    D = codes.D
    c1, c2 = attention_constants(gain)
    if gate is None:
        gate = 2.0 * c1 * codes.max_abs / c2 if gain > 0 else 0.0
    if gain > 0 and not c2 * abs(gate) <= GATE_RANGE * c1 * codes.max_abs:
        raise ConditionError(
            f"gate range: c2·G <= 2^26·c1·max|a| is needed so that THE forward pass (float64) computes "
            f"the gated pre-activation σ·c1·a_i + c2·G − c2·G without absorbing a_i (rounding u·c2·G <= "
            f"2^-27·c1·max|a|); got c2·G = {c2 * gate:.4g} > {GATE_RANGE * c1 * codes.max_abs:.4g}")
    promise = g1_promise(N, R, D, gap=codes.gap, distinct=(codes.distinct_lhs, codes.distinct_rhs),
                         max_abs=codes.max_abs, gate=gate, lam=lam, gain=gain, n_out=n_answers,
                         norm_sq=codes.norm_sq).require()
    if integer and not (codes.integer and float(gate).is_integer() and float(lam).is_integer()
                        and float(gain).is_integer() and gain % 2 == 0):
        raise ConditionError("integer mode needs ±1 codes and integer G, λ and an even gain g")

    layout = Layout()
    blocks = layout.add("blocks", R, D)  # blocks[r, i] = coordinate of B_r, entry i
    gates = layout.add("gates", R)
    out = layout.add("out", D)
    d = layout.d

    E = np.zeros((0, d))  # the declared table, left out: the task adds e_s = Σ_r J_{B_r} a_{π_r(s)}
    Q = np.zeros((R, d))
    Q[np.arange(R), gates] = gate
    mlp = gated_selector(d, blocks, [gates], out, c2 * gate)
    if attributes == "disjoint":  # the open gate (value c2·G) tags the asked relation
        gamma = c1 * codes.gap / (c2 * gate)
        readout = relation_tagged_readout(codes, N, R, d, out, gates, lam,
                                          math.ceil(gamma) if integer else gamma)
    else:
        readout = code_readout(codes, N, d, out, lam)
    constants = {"gate": gate, "lambda": lam, "gain": gain, "c1": c1, "c2": c2}
    model = Model(entity_embedding=E, relation_embedding=Q, **readout,
                  layers=(Layer(uniform_gain_attention(d, gain), mlp),),
                  meta=_meta("G1", attributes, codes, layout, integer=integer, **constants))
    return Family(model, promise, codes, constants, layout, G1_ENCODING, N, R, 1, attributes)


def build_a1(task: Task, codes: Codes | str = "binary", **options) -> Construction:
    """A1 on ``task``: ``assemble(a1_family(task.N, task.R, codes, attributes=task.attributes, ...), task)``
    (:func:`a1_family` states the construction; options as there).

    Returns
    -------
    Construction
    """
    return assemble(a1_family(task.N, task.R, codes, attributes=task.attributes, **options), task)


def a1_family(
    N: int,
    R: int,
    codes: Codes | str = "binary",
    *,
    attributes: str = "shared",
    D: int | None = None,
    lam: float = 1.0,
    gain: float = 2.0,
    integer: bool = False,
    rng: np.random.Generator | int | None = None,
) -> Family:
    """A1: associative memory, the view the paper argues against: facts live in MLP units, one per fact.

    Construction. Residual layout: a subject block ``S`` (D), one-hot relation coordinates ``rel_r`` (R), an
    output block ``O`` (D); ``d = 2·D + R``. Embeddings are fact-independent: ``e_s = J_S a_s``,
    ``q_r = 1_{rel_r}``. Unit ``(s, r)`` (``m = N·R``): ``ReLU(<a_s, y_S> + κ·y_{rel_r} − θ)`` with
    ``θ = c1·|a|²`` and ``κ = c1·|a|²(1 − μ)/c2``; it writes ``a_{π_r(s)}`` into O. ``U_j = λ·J_O a_j``.

    Firing condition (exact). On query ``(s', ρ)`` the pre-activation of unit ``(s, r)`` is
    ``c1·<a_s, a_s'> + c1|a|²(1 − μ)·[r = ρ] − c1|a|²``: it equals ``h* = c1|a|²(1 − μ)`` when
    ``(s', ρ) = (s, r)`` and is ``<= 0`` otherwise, because ``<a_s, a_s'> <= μ|a|²`` for ``s' ≠ s``.
    So exactly one unit fires, the output is ``h*·a_{π_ρ(s')}`` and the margin is ``λ·h*·|a|²(1 − μ) > 0``
    when the codes are distinct. With ±1 codes and g = 2, ``h* = 2(|a|² − max_{i≠j}<a_i, a_j>)`` is an
    integer.

    The family is built without a task: W2 is zero on O (:class:`~georecall.constructions.encoding.Family`);
    :func:`build_a1` / :func:`assemble` write ``a_{π_r(s)}`` into unit ``(s, r)``'s row there.

    Parameters
    ----------
    N, R : int
        Entities and relations.
    codes : {"binary", "sign", "gaussian"} or Codes
        The codebook, or its kind.
    attributes : {"shared", "disjoint"}
        The answer ids' variant.
    D : int, optional
        Code length (default as in :func:`g1_family`).
    lam : float
        The read-out scale λ.
    gain : float
        The attention gain g.
    integer : bool
        ±1 codes at integer scale, so that every weight is an integer (integer mode).
    rng : numpy.random.Generator or int or None
        The random source of sign and Gaussian codes.

    Returns
    -------
    Family
        The model with W2 zero on O, its promise (:func:`~georecall.theory.statements.a1_promise`), codes,
        constants, layout and encoding (:data:`A1_ENCODING`).

    Raises
    ------
    ConditionError
        Outside the conditions: codes not distinct; integer mode with non-integer constants.
    InputError
        A codebook with fewer than N codes, or one that contradicts D or integer mode.
    """
    n_answers = _n_answers(N, R, attributes)
    codes = resolve_codes(N, codes, D, rng, integer)
    D = codes.D
    c1, c2 = attention_constants(gain)
    promise = a1_promise(N, R, D, gap=codes.gap, distinct=(codes.distinct_lhs, codes.distinct_rhs), lam=lam,
                         gain=gain, n_out=n_answers, norm_sq=codes.norm_sq).require()
    integral = float(lam).is_integer() and float(gain).is_integer() and gain % 2 == 0
    if integer and not (codes.integer and integral):
        raise ConditionError("integer mode needs ±1 codes, integer λ and an even gain g")
    layout = Layout()
    S = layout.add("subject", D)
    rel = layout.add("relations", R)
    out = layout.add("out", D)
    d, m = layout.d, N * R
    gap = codes.gap  # |a|²(1 − μ); an exact integer for ±1 codes at integer scale
    theta, kappa = c1 * codes.norm_sq, c1 * gap / c2

    E = np.zeros((N, d))
    E[:, S] = codes.vectors[:N]
    Q = np.zeros((R, d))
    Q[np.arange(R), rel] = 1.0
    # unit index u = r * N + s listens to (s, r) and writes the code of π_r(s)
    W1 = np.zeros((d, m))
    W1[S, :] = np.tile(codes.vectors[:N].T, (1, R))
    W1[rel[:, None], np.arange(m).reshape(R, N)] = kappa
    W2 = np.zeros((m, d))  # the declared rows (unit r·N + s writes a_{π_r(s)} on O) are left to the task
    if attributes == "disjoint":  # the relation coordinate (value c2) tags the asked relation
        readout = relation_tagged_readout(codes, N, R, d, out, rel, lam, c1 * gap * gap / c2)
    else:
        readout = code_readout(codes, N, d, out, lam)
    constants = {
        "lambda": lam,
        "gain": gain,
        "c1": c1,
        "c2": c2,
        "theta": theta,
        "kappa": kappa,
        "h_star": c1 * gap,
    }
    model = Model(
        entity_embedding=E,
        relation_embedding=Q,
        **readout,
        layers=(Layer(uniform_gain_attention(d, gain), MLP(W1, np.full(m, -theta), W2, np.zeros(d))),),
        meta=_meta("A1", attributes, codes, layout, integer=integer, **constants),
    )
    return Family(model, promise, codes, constants, layout, A1_ENCODING, N, R, 1, attributes)
