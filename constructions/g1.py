"""G1, geometric single hop (the paper's Theorem 4.1; docs/theory.md, "G1"): its promise, its family and its
builder. Its registry entry (``constructions/registry.py``) lists it with its bits claim and verify cases."""

from __future__ import annotations

import math

import numpy as np

from georecall.constructions.building import (
    Construction,
    answer_count,
    assemble,
    nominal_geometry,
    resolve_codes,
    single_hop_meta,
)
from georecall.constructions.codes import Codes
from georecall.constructions.docstring_templates import nominal_promise_docstring, task_builder_docstring
from georecall.constructions.encoding import Family, TaskEncoding
from georecall.constructions.layout import Layout
from georecall.constructions.model import Layer, Model
from georecall.constructions.parts import (
    code_readout,
    gated_selector,
    relation_tagged_readout,
    uniform_gain_attention,
)
from georecall.errors import ConditionError
from georecall.theory.statements import (
    Condition,
    Promise,
    attention_constants,
    distinct_codes,
    exact_number,
    one_layer_params,
)
from georecall.theory.tasks import Task, check_positive_int

__all__ = ["G1_ENCODING", "GATE_RANGE", "build_g1", "g1_family", "g1_nominal_promise", "g1_promise"]


G1_ENCODING = TaskEncoding("relations", "blocks", "single")


# The largest gate G1 accepts, as a multiple of the bound c1·max|a| that c2·G must exceed (docs/theory.md).
GATE_RANGE = 2.0**26


def g1_promise(
    N: int,
    R: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    max_abs: float,
    gate: float,
    lam: float = 1.0,
    gain: float = 2.0,
    n_out: int | None = None,
    norm_sq: float = 1.0,
    construction: str = "G1",
) -> Promise:
    """G1, geometric single hop (the paper's Theorem 4.1; docs/theory.md, "G1").

    Sizes ``d = R·D + R + D``, ``m = 2·R·D``. Exact with margin ``λ·c1·gap`` (``gap = |a|²(1 − μ)``) provided
    ``c2·G > c1·A`` (every gate of a relation not asked is shut; G the gate constant, A the codes' largest
    absolute entry), the codes are distinct and ``λ > 0``. Fact-specific parameters: the ``N·R·D`` block
    entries of the subject table.

    Parameters
    ----------
    N, R, D : int
        Entities, relations, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    max_abs : float
        A, the codes' largest absolute entry.
    gate : float
        G, the gate constant.
    lam : float
        λ, the read-out scale.
    gain : float
        g, the attention's value/output gain (``c1, c2`` from :func:`attention_constants`).
    n_out : int, optional
        Answer vocabulary (N shared, N·R disjoint attributes; the margin is the same, see ``build_g1``).
    norm_sq : float
        ``|a|²``, for the logits' scale.

    construction : str
        The construction's id (G1), named by the promise and its refusals; a spec reusing
        this promise passes its own.

    Returns
    -------
    Promise
        With the conditions evaluated (not yet required: :meth:`Promise.require`).

    Raises
    ------
    InputError
        N, R or D not a positive integer.
    """
    N, R, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("D", D)))
    c1, c2 = attention_constants(gain)
    d, m = R * D + R + D, 2 * R * D
    conditions = (
        Condition("attention gain: g > 0", gain, 0.0),
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("gate: c2·G > c1·max|a| (unasked relations' units stay off)", c2 * gate, c1 * max_abs),
    )
    return Promise(
        construction,
        "Theorem 4.1 (geometric single hop)",
        d,
        m,
        one_layer_params(N, R, d, m, n_out),
        N * R * D,
        exact_number(lam * c1 * gap),
        conditions,
        logit_scale=lam * (c1 * norm_sq + c2 * gate * D * max_abs),
    )


@nominal_promise_docstring("G1", g1_promise)
def g1_nominal_promise(N: int, R: int, k: int = 1) -> Promise:
    D, geometry = nominal_geometry(N)
    return g1_promise(N, R, D, **geometry, max_abs=D**-0.5, gate=4 * D**-0.5)


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
    construction: str = "G1",
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

    construction : str
        The construction's id (G1), named by its promise, refusals and metadata; a spec
        reusing this family passes its own.

    Returns
    -------
    Family
        The model without its entity table, its promise (:func:`g1_promise`),
        codes, constants, layout and encoding (:data:`G1_ENCODING`).

    Raises
    ------
    ConditionError
        Outside the conditions: codes not distinct, ``c2·G <= c1·A``, ``c2·G > 2^26·c1·A`` (the gate range:
        beyond it float64 rounding of the gate swamps the codes), integer mode with non-integer constants.
    InputError
        A codebook with fewer than N codes, or one that contradicts D or integer mode.
    """
    n_answers = answer_count(N, R, attributes)
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
                         norm_sq=codes.norm_sq, construction=construction).require()
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
                  meta=single_hop_meta(construction, attributes, codes, layout, integer=integer, **constants))
    return Family(model, promise, codes, constants, layout, G1_ENCODING, N, R, 1, attributes)


@task_builder_docstring("G1", g1_family)
def build_g1(task: Task, codes: Codes | str = "binary", **options) -> Construction:
    return assemble(g1_family(task.N, task.R, codes, attributes=task.attributes, **options), task)
