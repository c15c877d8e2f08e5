"""The generic machinery of a promise (docs/theory.md): what a result promises is a :class:`Promise` (sizes d,
m, parameters and the guaranteed margin, as plain numbers computed from the parameters alone, never read off a
built model) carrying the :class:`Condition` s (inequalities, with their values) the result needs;
:meth:`Promise.require` raises :class:`ConditionError` (a ``ValueError``) naming the first violated one.
Builders call it before they build, so no construction is ever returned outside its theorem's conditions.

Each construction's own promise lives with it, in its module (``constructions/g1.py``: ``g1_promise``, and so
on for A1, G2, A2(a), A2(b), C1; a user's in theirs): this module holds only what they share, the parameter
counts of the architectures, the constants of uniform attention and the leakage of positional softmax heads.

Common constants:

- ``c1, c2``: after uniform attention over ``⟨r, s⟩`` with value/output gain ``g`` (``W_V = I``,
  ``W_O = g·I``) the last residual is ``y = c1·e_s + c2·q_r`` with ``c1 = 1 + g/2`` and ``c2 = g/2``
  (g = 2: c1 = 2, c2 = 1);
- ``|a|², μ, A``: the codes' squared norm, coherence and largest absolute entry (``constructions/codes.py``);
- ``G``: the gate constant (relation embedding ``G·1_{g_r}``); ``β``: a softmax head's inverse temperature;
  ``λ``: the read-out scale (``U_j = λ·a_j``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from georecall.errors import ConditionError, InputError
from georecall.theory.tasks import check_positive_int

__all__ = ["Condition", "ConditionError", "Promise", "attention_constants", "beta_for_leakage",
           "binary_coherence", "distinct_codes", "exact_number", "model_params", "one_layer_params",
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
        """Whether the inequality holds: ``lhs > rhs`` (strict) or ``lhs >= rhs``."""
        return self.lhs > self.rhs if self.strict else self.lhs >= self.rhs

    def describe(self) -> str:
        """The inequality with its values, for a message: ``"TEXT: need LHS > RHS"`` (6 significant
        digits)."""
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
        """The conditions that do not hold, in their order (empty when the promise applies)."""
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
        """The promise as a JSON-able dict: its sizes, margin, logit scale and every condition with its values
        and whether it holds."""
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


def exact_number(x: float) -> float | int:
    """An integral float as an int (so integer-mode promises are integers); anything else unchanged.

    Parameters
    ----------
    x : float

    Returns
    -------
    float or int
    """
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


