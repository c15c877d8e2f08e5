"""What each result promises, as plain numbers (THEORY.md §3), written from the theorems — never read off a built
model. The checker compares what a construction achieved against these promises; tables print both.

Every promise carries the inequalities the result needs, evaluated at the given constants;
:meth:`Promise.require` raises ``ValueError`` naming the first violated one. Builders call it before they build,
so no construction is ever returned outside its theorem's conditions.

Common constants (see ``constructions/single_hop.py`` for where they come from):

- ``c1, c2``: after uniform attention over ``⟨r, s⟩`` with value/output gain ``g`` (``W_V = I``, ``W_O = g I``)
  the last residual is ``y = c1·e_s + c2·q_r`` with ``c1 = 1 + g/2`` and ``c2 = g/2`` (g = 2: c1 = 2, c2 = 1);
- ``|a|², μ, A``: the codes' squared norm, coherence and largest absolute entry (``constructions/codes.py``);
- ``β``: the gate constant (relation embedding ``β·1_{g_r}``); ``λ``: the read-out scale (``U_j = λ·a_j``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sympy as sp

from theory.tasks import check_positive_int


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

    def violations(self) -> list[Condition]:
        return [c for c in self.conditions if not c.holds]

    def require(self) -> Promise:
        """Raise ``ValueError`` naming the first violated inequality (with its values); return self otherwise."""
        bad = self.violations()
        if bad:
            raise ValueError(f"{self.result} ({self.reference}) outside its conditions: {bad[0].describe()}")
        return self

    def as_dict(self) -> dict:
        return {"result": self.result, "reference": self.reference, "d": self.d, "m": self.m,
                "params": self.params, "fact_params": self.fact_params, "margin": self.margin,
                "conditions": [{"text": c.text, "lhs": c.lhs, "rhs": c.rhs, "holds": c.holds}
                               for c in self.conditions]}


def attention_constants(gain: float, T: int = 2) -> tuple[float, float]:
    """``(c1, c2)`` for uniform attention over ``⟨r, s⟩`` (T = 2) with ``W_V W_O = gain·I``."""
    return 1.0 + gain / T, gain / T


def one_layer_params(N: int, R: int, d: int, m: int, n_out: int | None = None) -> int:
    """Parameters of the one-layer model: E, Q, uniform attention W_V and W_O (d×d each), MLP, U."""
    n_out = N if n_out is None else n_out
    return N * d + R * d + 2 * d * d + (2 * d * m + m + d) + n_out * d


def g1_promise(N: int, R: int, D: int, *, norm_sq: float, mu: float, max_abs: float,
               beta: float, lam: float = 1.0, gain: float = 2.0) -> Promise:
    """G1, geometric single hop (the paper's Theorem 4.1).

    Sizes ``d = R·D + R + D``, ``m = 2·R·D``. Exact with margin ``λ·c1·|a|²·(1 − μ)`` provided
    ``c2·β > c1·A`` (every gate of a relation not asked is shut), ``μ < 1`` (codes distinct) and ``λ > 0``.
    Fact-specific parameters: the ``N·R·D`` block entries of the subject table.
    """
    N, R, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("D", D)))
    c1, c2 = attention_constants(gain)
    d, m = R * D + R + D, 2 * R * D
    conditions = (
        Condition("attention gain: g > 0", gain, 0.0),
        Condition("read-out scale: λ > 0", lam, 0.0),
        Condition("distinct codes: 1 > μ", 1.0, mu),
        Condition("gate: c2·β > c1·max|a| (unasked relations' units stay off)", c2 * beta, c1 * max_abs),
    )
    return Promise("G1", "Theorem 4.1 (geometric single hop)", d, m, one_layer_params(N, R, d, m),
                   N * R * D, lam * c1 * norm_sq * (1.0 - mu), conditions)


def a1_promise(N: int, R: int, D: int, *, norm_sq: float, mu: float, lam: float = 1.0,
               gain: float = 2.0) -> Promise:
    """A1, associative memory (the baseline): one MLP unit per fact, frozen fact-independent embeddings.

    Sizes ``d = 2·D + R`` (subject code, one-hot relation, output block), ``m = N·R``.
    Unit ``(s, r)`` computes ``ReLU(<a_s, y_S> + κ·y_{rel_r} − θ)`` with ``θ = c1|a|²`` and
    ``κ·c2 = c1|a|²(1 − μ)``. Firing condition: on query ``(s', ρ)`` its pre-activation is
    ``c1<a_s, a_s'> + c1|a|²(1−μ)[r = ρ] − c1|a|²``, which is ``h* = c1|a|²(1 − μ) > 0`` iff ``(s', ρ) = (s, r)``
    and ``<= 0`` otherwise (``<a_s, a_s'> <= μ|a|²`` for ``s' ≠ s``): exactly one unit fires, given ``μ < 1``.
    It writes ``h*·a_{π_r(s)}``, so the margin is ``λ·h*·|a|²(1 − μ)``. Fact-specific parameters: the
    ``N·R·D`` answer-code entries of ``W2`` (``W1`` only says which query each unit listens to).
    """
    N, R, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("D", D)))
    c1, _ = attention_constants(gain)
    d, m = 2 * D + R, N * R
    fired = c1 * norm_sq * (1.0 - mu)
    conditions = (
        Condition("attention gain: g > 0", gain, 0.0),
        Condition("read-out scale: λ > 0", lam, 0.0),
        Condition("distinct codes: 1 > μ", 1.0, mu),
    )
    return Promise("A1", "associative-memory baseline (one unit per fact)", d, m, one_layer_params(N, R, d, m),
                   N * R * D, lam * fired * norm_sq * (1.0 - mu), conditions)


def binary_coherence(D: int) -> float:
    """Coherence of binary codes of length D for N >= 2 (two indices differing in one bit): ``1 − 2/D``."""
    return 1.0 - 2.0 / check_positive_int("D", D)


# ------------------------------------------------------------------------------------------ symbolic forms

N_, R_, D_, k_ = sp.symbols("N R D k", positive=True, integer=True)


def binary_D_expr():
    """``D = ⌈log2 N⌉``: the binary code length."""
    return sp.ceiling(sp.log(N_, 2))


def g1_sizes_expr(D=None) -> dict[str, sp.Expr]:
    """Sympy forms of G1's sizes; ``D`` defaults to the binary length ``⌈log2 N⌉``."""
    D = binary_D_expr() if D is None else D
    return {"d": R_ * D + R_ + D, "m": 2 * R_ * D}


def a1_sizes_expr(D=None) -> dict[str, sp.Expr]:
    D = binary_D_expr() if D is None else D
    return {"d": 2 * D + R_, "m": N_ * R_}


def evaluate(expr: sp.Expr, **values) -> int:
    """Evaluate a size expression exactly at integer values (``N=4096, R=16``)."""
    subs = {sp.Symbol(k, positive=True, integer=True): v for k, v in values.items()}
    out = sp.nsimplify(expr.subs(subs))
    if not out.is_Integer:
        raise ValueError(f"{expr} did not evaluate to an integer at {values}: {out}")
    return int(out)


__all__ = ["Condition", "Promise", "attention_constants", "g1_promise", "a1_promise", "binary_coherence",
           "g1_sizes_expr", "a1_sizes_expr", "binary_D_expr", "evaluate", "one_layer_params"]
