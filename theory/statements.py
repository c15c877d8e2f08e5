"""What each result promises, as plain numbers (docs/theory.md, a section per construction), written from the
theorems — never read off a built model. The checker compares what a construction achieved against these
promises; tables print both.

Every promise carries the inequalities the result needs, evaluated at the given constants;
:meth:`Promise.require` raises :class:`ConditionError` (a ``ValueError``) naming the first violated one.
Builders call it before they build, so no construction is ever returned outside its theorem's conditions.

Common constants (see ``constructions/single_hop.py`` for where they come from):

- ``c1, c2``: after uniform attention over ``⟨r, s⟩`` with value/output gain ``g`` (``W_V = I``,
  ``W_O = g·I``) the last residual is ``y = c1·e_s + c2·q_r`` with ``c1 = 1 + g/2`` and ``c2 = g/2``
  (g = 2: c1 = 2, c2 = 1);
- ``|a|², μ, A``: the codes' squared norm, coherence and largest absolute entry (``constructions/codes.py``);
- ``G``: the gate constant (relation embedding ``G·1_{g_r}``); ``β``: a softmax head's inverse temperature;
  ``λ``: the read-out scale (``U_j = λ·a_j``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from georecall.errors import ConditionError, InputError
from georecall.theory.tasks import check_positive_int

if TYPE_CHECKING:
    import sympy as sp

__all__ = ["Condition", "ConditionError", "Promise", "a1_promise", "a2_depth_promise", "a2_width_promise",
           "attention_constants", "beta_for_leakage", "binary_coherence", "c1_promise", "distinct_codes",
           "g1_promise", "g2_promise", "model_params", "multi_hop_sizes_expr", "one_layer_params",
           "softmax_leakage"]


@dataclass(frozen=True)
class Condition:
    """An inequality a result needs: ``lhs > rhs`` (strict) or ``lhs >= rhs``, with its values."""

    text: str
    lhs: float
    rhs: float
    strict: bool = True

    @property
    def holds(self) -> bool:
        return self.lhs > self.rhs if self.strict else self.lhs >= self.rhs

    def describe(self) -> str:
        op = ">" if self.strict else ">="
        return f"{self.text}: need {self.lhs:.6g} {op} {self.rhs:.6g}"


@dataclass(frozen=True)
class Promise:
    """Sizes and the guaranteed margin of one construction at given parameters."""

    result: str  # short id: "G1", "A1", ...
    reference: str  # the paper result it implements
    d: int  # residual dimension
    m: int  # MLP width
    params: int  # all parameters of the architecture the result describes
    fact_params: int  # parameters whose values depend on the facts
    margin: float  # guaranteed lower bound on every query's logit margin
    conditions: tuple[Condition, ...] = field(default_factory=tuple)
    # Magnitude of the logits whose difference is the margin (λ·c1·|a|² for G1): floating-point rounding of a
    # margin is relative to it, not to the margin (a margin of 1e-4 between logits of size 2 carries the
    # rounding of numbers of size 2). 0 means: use the margin itself.
    logit_scale: float = 0.0

    def violations(self) -> list[Condition]:
        return [c for c in self.conditions if not c.holds]

    def require(self) -> Promise:
        """Raise :class:`ConditionError` naming the first violated inequality (with its values); else self."""
        bad = self.violations()
        if bad:
            raise ConditionError(
                f"{self.result} ({self.reference}) outside its conditions: {bad[0].describe()}"
            )
        return self

    def as_dict(self) -> dict:
        return {
            "result": self.result,
            "reference": self.reference,
            "d": self.d,
            "m": self.m,
            "params": self.params,
            "fact_params": self.fact_params,
            "margin": self.margin,
            "logit_scale": self.logit_scale,
            "conditions": [
                {"text": c.text, "lhs": c.lhs, "rhs": c.rhs, "holds": c.holds} for c in self.conditions
            ],
        }


def attention_constants(gain: float, T: int = 2) -> tuple[float, float]:
    """``(c1, c2)`` for uniform attention over T positions with ``W_V W_O = gain·I``: at the last of T = 2
    positions ``y = c1·e_s + c2·q_r`` with ``c1 = 1 + gain/T`` and ``c2 = gain/T``.

    Parameters
    ----------
    gain : float
        The value/output gain g.
    T : int
        The number of positions averaged (2 for ``⟨r, s⟩``).

    Returns
    -------
    (float, float)
        ``(c1, c2)``.
    """
    return 1.0 + gain / T, gain / T


def distinct_codes(lhs: float, rhs: float) -> Condition:
    """The condition that the codes are distinct: ``|a|² > max_{i≠j} <a_i, a_j>``, given as two numbers whose
    comparison decides it exactly (``Codes.distinct_lhs/rhs``: integers for ±1 codes, a certified gap against
    0 for Gaussian ones).

    Parameters
    ----------
    lhs, rhs : float
        The two sides.

    Returns
    -------
    Condition
        The strict inequality ``lhs > rhs``.
    """
    return Condition("distinct codes: |a|² > max_{i≠j}<a_i, a_j> (decided exactly)", lhs, rhs)


def _exact(x: float) -> float | int:
    """An integral float as an int (so integer-mode promises are integers); anything else unchanged."""
    return int(x) if isinstance(x, float) and x.is_integer() and abs(x) < 2**53 else x


def one_layer_params(N: int, R: int, d: int, m: int, n_out: int | None = None) -> int:
    """Parameters of the one-layer model: E, Q, uniform attention W_V and W_O (d×d each), MLP, U.

    Parameters
    ----------
    N, R, d, m : int
        Entities, relations, residual width, MLP width.
    n_out : int, optional
        Read-out rows (default N).

    Returns
    -------
    int
        ``N·d + R·d + 2·d² + (2·d·m + m + d) + n_out·d``.
    """
    n_out = N if n_out is None else n_out
    return N * d + R * d + 2 * d * d + (2 * d * m + m + d) + n_out * d


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
        "G1",
        "Theorem 4.1 (geometric single hop)",
        d,
        m,
        one_layer_params(N, R, d, m, n_out),
        N * R * D,
        _exact(lam * c1 * gap),
        conditions,
        logit_scale=lam * (c1 * norm_sq + c2 * gate * D * max_abs),
    )


def a1_promise(
    N: int,
    R: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    lam: float = 1.0,
    gain: float = 2.0,
    n_out: int | None = None,
    norm_sq: float = 1.0,
) -> Promise:
    """A1, associative memory (the baseline): one MLP unit per fact, frozen fact-independent embeddings.

    Sizes ``d = 2·D + R`` (subject code, one-hot relation, output block), ``m = N·R``. Unit ``(s, r)``
    computes ``ReLU(<a_s, y_S> + κ·y_{rel_r} − θ)`` with ``θ = c1|a|²`` and ``κ·c2 = c1|a|²(1 − μ)``. Firing
    condition: on query ``(s', ρ)`` its pre-activation is ``c1<a_s, a_s'> + c1|a|²(1−μ)[r = ρ] − c1|a|²``,
    which is ``h* = c1|a|²(1 − μ) > 0`` iff ``(s', ρ) = (s, r)`` and ``<= 0`` otherwise (``<a_s, a_s'> <=
    μ|a|²`` for ``s' ≠ s``): exactly one unit fires, given ``μ < 1``. It writes ``h*·a_{π_r(s)}``, so the
    margin is ``λ·h*·|a|²(1 − μ)``. Fact-specific parameters: the ``N·R·D`` answer-code entries of ``W2``
    (``W1`` only says which query each unit listens to).

    Parameters
    ----------
    N, R, D : int
        Entities, relations, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    lam, gain, n_out, norm_sq
        As in :func:`g1_promise`.

    Returns
    -------
    Promise

    Raises
    ------
    InputError
        N, R or D not a positive integer.
    """
    N, R, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("D", D)))
    c1, _ = attention_constants(gain)
    d, m = 2 * D + R, N * R
    fired = c1 * gap
    conditions = (
        Condition("attention gain: g > 0", gain, 0.0),
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
    )
    return Promise(
        "A1",
        "associative-memory baseline (one unit per fact)",
        d,
        m,
        one_layer_params(N, R, d, m, n_out),
        N * R * D,
        _exact(lam * fired * gap),
        conditions,
        logit_scale=lam * fired * norm_sq,
    )


def binary_coherence(D: int) -> float:
    """Coherence of binary codes of length D for N >= 2 (two indices differing in one bit): ``1 − 2/D``.

    Parameters
    ----------
    D : int
        The code length (>= 1).

    Returns
    -------
    float

    Raises
    ------
    InputError
        D not a positive integer.
    """
    return 1.0 - 2.0 / check_positive_int("D", D)


# ------------------------------------------------------------------------------------------ symbolic forms

@functools.cache
def _sympy():
    """sympy and the symbols N, R, D, k. Imported on first use: sympy takes about 0.17 s to import, and only
    the symbolic size forms need it (every command that reads the registry imports this module)."""
    import sympy

    return sympy, sympy.symbols("N R D k", positive=True, integer=True)


def binary_D_expr():
    """``D = ⌈log2 N⌉``: the binary code length."""
    sp, (N_, _, _, _) = _sympy()
    return sp.ceiling(sp.log(N_, 2))


# ------------------------------------------------------------------------------------------ multi-hop (§3)
#
# The k-hop constructions fetch relation tokens with *positional* softmax heads: a head's score is β at its
# one target position and 0 at the others, so with n other visible positions its leakage (the attention weight
# off target) is ε = n / (e^β + n); "hard" attention (an idealization, the β → ∞ limit) has ε = 0.


def softmax_leakage(beta: float | None, others: int) -> float:
    """Weight a positional head puts off its target: ``ε = n/(e^β + n)`` for n other visible positions.

    Parameters
    ----------
    beta : float or None
        The inverse temperature β; None for hard attention (ε = 0).
    others : int
        n, the visible positions other than the target.

    Returns
    -------
    float
        ε (0 for hard attention, no other position, or β > 700, where it underflows).
    """
    if beta is None or others == 0:
        return 0.0
    if beta > 700:
        return 0.0
    return others / (math.exp(beta) + others)


def beta_for_leakage(eps: float, others: int) -> float:
    """The smallest β with ``n/(e^β + n) <= ε``: ``β = ln(n(1 − ε)/ε)``.

    Parameters
    ----------
    eps : float
        The leakage target, ``0 < ε < 1``.
    others : int
        n, the visible positions other than the target (at least 1 is assumed).

    Returns
    -------
    float

    Raises
    ------
    InputError
        ε outside (0, 1).
    """
    if not 0 < eps < 1:
        raise InputError(f"leakage target must satisfy 0 < ε < 1, got {eps}")
    return math.log(max(others, 1) * (1 - eps) / eps)


def model_params(N: int, R: int, d: int, T: int, layers, n_out: int | None = None) -> int:
    """Parameters of a Model with the given shapes: E, Q, P (T rows, 0 for none), U and, per layer,
    ``(kind, heads, d_k, d_v, m)``: softmax heads store W_Q, W_K (H·d·d_k each), every head W_V, W_O (H·d·d_v
    each), an MLP 2·d·m + m + d.

    Parameters
    ----------
    N, R, d, T : int
        Entities, relations, residual width, position rows.
    layers : iterable of (str, int, int, int, int)
        Per layer ``(kind, heads, d_k, d_v, m)``; 0 heads or ``m = 0`` for an absent part.
    n_out : int, optional
        Read-out rows (default N).

    Returns
    -------
    int
    """
    n_out = N if n_out is None else n_out
    total = (N + R + T + n_out) * d
    for kind, heads, d_k, d_v, m in layers:
        if heads:
            total += 2 * heads * d * d_v + (2 * heads * d * d_k if kind != "uniform" else 0)
        if m:
            total += 2 * d * m + m + d
    return total


def g2_promise(
    N: int,
    R: int,
    k: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    max_abs: float,
    max_l1: float,
    gate: float,
    beta: float | None,
    lam: float = 1.0,
    norm_sq: float = 1.0,
) -> Promise:
    """G2, k hops without CoT in one layer, by path blocks (docs/theory.md, "G2").

    Sizes ``d = R^k·D + k·R + D + (k + 1)`` (path blocks, k gate groups, output, positions), ``m = 2·R^k·D``.
    Head j puts weight ``>= 1 − ε`` on ``r_j`` (``ε = k/(e^β + k)``), so gate ``G_j[w_j]`` is in ``[G(1 − ε),
    G]`` when ``w_j = r_j`` and in ``[0, G·ε]`` otherwise. The AND unit ``(w, i, σ)`` with bias ``−k·G`` is
    then ``σ·a_i − δ`` (``0 <= δ <= k·G·ε``) for the asked path and ``<= A − G(1 − ε) < 0`` for every other
    path. The output o satisfies ``|o − a_ans|_∞ <= δ``, so the margin is at least ``λ·(|a|²(1 − μ) −
    2·k·G·ε·L1)`` with ``L1 = max_j |a_j|_1``. Leakage inequalities: ``G(1 − ε) > A`` and ``|a|²(1 − μ) >
    2·k·G·ε·L1``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    max_abs : float
        A, the codes' largest absolute entry.
    max_l1 : float
        L1, the codes' largest l1 norm.
    gate : float
        G, the gate constant.
    beta : float or None
        The heads' inverse temperature (None: hard attention, ε = 0).
    lam, norm_sq
        As in :func:`g1_promise`.

    Returns
    -------
    Promise

    Raises
    ------
    InputError
        N, R, k or D not a positive integer.
    """
    N, R, k, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k), ("D", D)))
    eps = softmax_leakage(beta, k)
    paths = R**k
    d, m = paths * D + k * R + D + (k + 1), 2 * paths * D
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("gate vs leakage: G(1 − ε) > max|a|", gate * (1 - eps), max_abs),
        Condition("margin vs leakage: |a|²(1 − μ) > 2·k·G·ε·max|a|_1", gap, 2 * k * gate * eps * max_l1),
    )
    T = k + 1
    params = model_params(N, R, d, T, [("softmax", k, T, R, m)])
    return Promise(
        "G2",
        "k hops, no CoT, one layer: path blocks (exponential in k)",
        d,
        m,
        params,
        N * paths * D,
        lam * (gap - 2 * k * gate * eps * max_l1),
        conditions,
        logit_scale=lam * (norm_sq + k * gate * max_l1),
    )


def a2_width_promise(
    N: int,
    R: int,
    k: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    gate: float,
    beta: float | None,
    lam: float = 1.0,
    norm_sq: float = 1.0,
) -> Promise:
    """A2(a), k hops without CoT in one layer, one MLP unit per k-hop fact (``m = N·R^k``).

    Sizes ``d = D + k·R + D + (k + 1)`` (subject code, gate groups, output, positions). Gates as in G2. Unit
    ``(s, w)``: ``ReLU(<a_s, x_S> + Σ_j y_{G_j, w_j} − θ)`` with ``θ = |a|² + k·G − h*``, ``h* = |a|²(1 −
    μ)``: ``h* − δ`` (``δ <= k·G·ε``) on its own query, ``<= h* − G(1 − ε)`` on another path, ``<= 0`` on
    another subject. It writes ``a_{π_w(s)}``, so the margin is at least ``λ·(h* − k·G·ε)·h*``. Leakage
    inequalities: ``G(1 − ε) >= h*`` and ``h* > k·G·ε``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    gate, beta, lam, norm_sq
        As in :func:`g2_promise`.

    Returns
    -------
    Promise

    Raises
    ------
    InputError
        N, R, k or D not a positive integer.
    """
    N, R, k, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k), ("D", D)))
    eps = softmax_leakage(beta, k)
    d, m = 2 * D + k * R + (k + 1), N * R**k
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("gate vs leakage: G(1 − ε) >= |a|²(1 − μ)", gate * (1 - eps), gap, strict=False),
        Condition("firing vs leakage: |a|²(1 − μ) > k·G·ε", gap, k * gate * eps),
    )
    params = model_params(N, R, d, k + 1, [("softmax", k, k + 1, R, m)])
    return Promise(
        "A2a",
        "k hops, no CoT, one layer: one MLP unit per k-hop fact",
        d,
        m,
        params,
        N * R**k * D,
        lam * (gap - k * gate * eps) * gap,
        conditions,
        logit_scale=lam * (norm_sq + k * gate) * norm_sq,
    )


def a2_depth_promise(
    N: int,
    R: int,
    k: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    beta: float | None,
    lam: float = 1.0,
    norm_sq: float = 1.0,
) -> Promise:
    """A2(b), k hops without CoT in k layers, each an associative MLP of width ``2·N·R`` (one clipped unit
    pair per single-hop fact) that maps (current entity, relation of this hop) to the next entity.

    Sizes ``d = D + 2·R + (k + 1)`` (current-entity block S, relation-token block, one shared gate group,
    positions): ``O(log N + R + k)``; ``m = 2·N·R`` per layer. Layer j's attention has a head fetching ``r_j``
    (+1) and, for j >= 2, a head with the same scores fetching ``r_{j−1}`` (−1); both put the same weights on
    the same positions, so the gate group holds exactly layer j's fetch: ``g[r_j] ∈ [1 − ε, 1]``, others ``[0,
    ε]``. Unit pair ``(v, r)``: ``clip(z, 0, h)`` with ``z = <a_v, x_S> + 2·gap·g[r] − θ``, ``θ = μ|a|² +
    2·gap + gap/8``, ``h = gap/2`` (gap = ``|a|²(1 − μ)``): ``z >= gap(7/8 − 2ε) >= h`` on the current fact,
    ``z <= 0`` otherwise (needs ``ε <= 3/16``). The pair writes ``(a_{π_r(v)} − a_v)`` exactly, so S holds the
    exact code of each hop's entity and the final margin is ``λ·|a|²(1 − μ)``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    beta, lam, norm_sq
        As in :func:`g2_promise`.

    Returns
    -------
    Promise

    Raises
    ------
    InputError
        N, R, k or D not a positive integer.
    """
    N, R, k, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k), ("D", D)))
    eps = softmax_leakage(beta, k)
    d, m = D + 2 * R + (k + 1), 2 * N * R
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("clip vs leakage: 3/16 >= ε", 3 / 16, eps, strict=False),
    )
    # The k layers share ONE MLP (the same single-hop map at every hop): its weights are counted once.
    layers = [("softmax", 1 if j == 0 else 2, k + 1, R, m if j == 0 else 0) for j in range(k)]
    params = model_params(N, R, d, k + 1, layers)
    # Fact-specific: W2 of the shared MLP, 2·D entries per clipped pair (v, r) writing ±(a_{π_r(v)} − a_v)/h.
    return Promise(
        "A2b",
        "k hops, no CoT, k layers: one associative MLP of width O(N·R), shared by the hops",
        d,
        m,
        params,
        2 * N * R * D,
        lam * gap,
        conditions,
        logit_scale=lam * (norm_sq + 2 * gap) * norm_sq,
    )


def c1_promise(
    N: int,
    R: int,
    k: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    max_abs: float,
    max_l1: float,
    gate: float,
    beta: float | None,
    lam: float = 1.0,
    norm_sq: float = 1.0,
) -> Promise:
    """C1, k hops with chain-of-thought in one layer: the G1 selector applied once per generated token.

    Sizes ``d = R·D + R + D + 2k`` (blocks, gates, output, positions of the 2k tokens fed), ``m = 2·R·D``. At
    the position of ``v_{t−1}`` one positional head fetches ``r_t`` into the gates (at most ``2k − 1`` other
    visible positions: ``ε = (2k−1)/(e^β + 2k − 1)``); the entity's own embedding is the superposition of its
    R attributes. As in G2 with one hop: margin at least ``λ·(|a|²(1 − μ) − 2·G·ε·L1)`` at every step. Leakage
    inequalities: ``G(1 − ε) > A`` and ``|a|²(1 − μ) > 2·G·ε·L1``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    max_abs, max_l1, gate, beta, lam, norm_sq
        As in :func:`g2_promise`.

    Returns
    -------
    Promise

    Raises
    ------
    InputError
        N, R, k or D not a positive integer.
    """
    N, R, k, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k), ("D", D)))
    eps = softmax_leakage(beta, 2 * k - 1)
    d, m = R * D + R + D + 2 * k, 2 * R * D
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("gate vs leakage: G(1 − ε) > max|a|", gate * (1 - eps), max_abs),
        Condition("margin vs leakage: |a|²(1 − μ) > 2·G·ε·max|a|_1", gap, 2 * gate * eps * max_l1),
    )
    params = model_params(N, R, d, 2 * k, [("softmax", 1, 2 * k, R, m)])
    return Promise(
        "C1",
        "k hops with chain-of-thought, one layer (linear in R, additive in k)",
        d,
        m,
        params,
        N * R * D,
        lam * (gap - 2 * gate * eps * max_l1),
        conditions,
        logit_scale=lam * (norm_sq + gate * max_l1),
    )


def multi_hop_sizes_expr() -> dict[str, dict[str, sp.Expr]]:
    """Sympy forms of d and m for G2, A2(a), A2(b), C1 with binary ``D = ⌈log2 N⌉``.

    Returns
    -------
    dict
        ``{id: {"d": expr, "m": expr}}`` in the symbols N, R, k.
    """
    _, (N_, R_, _, k_) = _sympy()
    D = binary_D_expr()
    return {
        "G2": {"d": R_**k_ * D + k_ * R_ + D + k_ + 1, "m": 2 * R_**k_ * D},
        "A2a": {"d": 2 * D + k_ * R_ + k_ + 1, "m": N_ * R_**k_},
        "A2b": {"d": D + 2 * R_ + k_ + 1, "m": 2 * N_ * R_},
        "C1": {"d": R_ * D + R_ + D + 2 * k_, "m": 2 * R_ * D},
    }
