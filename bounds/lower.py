"""Information-theoretic lower bounds on the embedding dimension d (THEORY.md §4; proofs in docs/bounds.md).

Model of storage: every parameter holds b bits. The entity embeddings (N·d numbers) are fact-specific; ``P0``
counts every other fact-specific parameter; everything else (the read-out U included) is *generic*: the same
for every task. A model "answers" a family of tasks if, for each, some setting of its fact-specific parameters
answers every query right. Then the fact-specific bits must be able to take as many values as there are
distinct answer tables in the family.

Each function returns a :class:`Bound`: the log2 of the set it counts, the real-valued lower bound on d, and
the smallest integer d consistent with it. All logarithms are exact (``bounds.counting``).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import sympy as sp
from scipy.special import gammaln

from georecall.bounds.counting import log2_factorial, log2_falling
from georecall.bounds.graphs import tree_size
from georecall.theory import __version__
from georecall.theory.tasks import check_positive_int


@dataclass(frozen=True)
class Bound:
    """A lower bound ``d >= d_bound`` (so ``d >= d_min = max(0, ceil(d_bound))``)."""

    id: str
    formula: str
    params: dict
    log2_count: float  # log2 of the counted set of answer tables / leaf vectors
    d_bound: float
    assumption: str
    extra: dict = field(default_factory=dict)

    @property
    def d_min(self) -> int:
        return max(0, math.ceil(self.d_bound - 1e-9))

    def as_dict(self) -> dict:
        return {**asdict(self), "d_min": self.d_min, "version": __version__}


def _check_bits(b: float) -> float:
    if not (isinstance(b, (int, float)) and b > 0 and math.isfinite(b)):
        raise ValueError(f"bits per parameter b must be positive, got {b!r}")
    return float(b)


def gadget_log2(N: int, R: int, k: int, M: int) -> float:
    """``log2 (N − M·S_{k−1})_{M·R^k}`` with ``S_{k−1} = 1 + R + … + R^{k−1}``: the distinct leaf assignments of
    M gadget roots (−inf when the family does not fit, ``N < M·S_k``)."""
    internal = M * tree_size(R, k - 1)
    return log2_falling(N - internal, M * R**k) if N >= M * tree_size(R, k) else -math.inf


def total_information(N: int, R: int, k: int = 1, b: float = 1, P0: int = 0) -> Bound:
    """``(N·d + P0)·b >= log2|F_k|``: the fact-specific bits must tell apart every k-hop answer table.

    k = 1: ``|F_1| = (N!)^R`` exactly, so ``d >= (R·log2 N! − P0·b)/(N·b) ≈ R·log2(N/e)/b``.
    k >= 2: ``|F_k| >= (N − M·S_{k−1})_{M·R^k}`` with ``M = ⌊N/S_k⌋`` (distinct gadget leaf assignments give
    distinct tables), a valid lower bound for every N.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    b = _check_bits(b)
    if k == 1:
        bits, how = R * log2_factorial(N), "|F_1| = (N!)^R"
    else:
        M = N // tree_size(R, k)
        bits, how = (gadget_log2(N, R, k, M), f"|F_k| >= gadget family, M = {M}") if M >= 1 else (0.0, "none")
    return Bound("total-information", "(N·d + P0)·b >= log2|F_k|", {"N": N, "R": R, "k": k, "b": b, "P0": P0},
                 bits, (bits - P0 * b) / (N * b), f"every parameter holds b bits; {how}")


def per_entity(N: int, R: int, k: int = 1, b: float = 1, P0: int = 0) -> Bound:
    """``(d + P0)·b >= log2|Trees_k|``: with a generic read-out, an entity's k-hop answers are a function of its
    own embedding (and the P0 other fact-specific parameters).

    k = 1: ``|Trees_1| = N^R``. k >= 2: ``|Trees_k| >= (N − 1)_{R^k}`` when ``N >= 1 + R + … + R^k``.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    b = _check_bits(b)
    if k == 1:
        bits, how = R * math.log2(N), "|Trees_1| = N^R"
    elif N >= tree_size(R, k):
        bits, how = log2_falling(N - 1, R**k), "|Trees_k| >= (N-1)_{R^k}"
    else:
        bits, how = 0.0, f"N < 1 + R + ... + R^k = {tree_size(R, k)}: no lower side of the sandwich"
    return Bound("per-entity", "(d + P0)·b >= log2|Trees_k|", {"N": N, "R": R, "k": k, "b": b, "P0": P0},
                 bits, bits / b - P0, f"generic read-out; {how}")


def tradeoff(N: int, R: int, k: int, b: float = 1, P0: int = 0) -> Bound:
    """Capacity–depth tradeoff without CoT: for every M with ``N >= M·S_k``,
    ``(P0 + M·d)·b >= log2 (N − M·S_{k−1})_{M·R^k}``, so ``d >= max_M (log2(…)/b − P0)/M``.

    M is chosen to maximize the bound: a vectorized double-precision scan over all admissible M locates the
    best M, and the bound is then evaluated exactly there (any M gives a valid bound). With
    ``M = Θ(N/R^k)`` this reads: ``d = Ω(R^k log N / b)`` unless ``P0·b = Ω(N log N)``.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    b = _check_bits(b)
    M_max = N // tree_size(R, k)
    if M_max < 1:
        return Bound("tradeoff", "(P0 + M·d)·b >= log2 (N − M·S_{k−1})_{M·R^k}",
                     {"N": N, "R": R, "k": k, "b": b, "P0": P0, "M": 0}, 0.0, 0.0,
                     f"N < S_k = {tree_size(R, k)}: no gadget fits")
    M = np.arange(1, M_max + 1, dtype=np.float64)
    top = N - M * tree_size(R, k - 1)
    approx = (gammaln(top + 1) - gammaln(top - M * R**k + 1)) / math.log(2)
    scores = (approx / b - P0) / M
    best = int(np.argmax(scores)) + 1
    candidates = {m for m in (best - 1, best, best + 1) if 1 <= m <= M_max}
    values = {m: (gadget_log2(N, R, k, m) / b - P0) / m for m in candidates}
    M_best = max(values, key=values.get)
    return Bound("tradeoff", "(P0 + M·d)·b >= log2 (N − M·S_{k−1})_{M·R^k}",
                 {"N": N, "R": R, "k": k, "b": b, "P0": P0, "M": M_best}, gadget_log2(N, R, k, M_best),
                 values[M_best], "no CoT; generic read-out; gadget family with the best M")


def chain_of_thought(N: int, R: int, k: int = 1, b: float = 1, P0: int = 0) -> Bound:
    """With CoT only depth 1 matters: each generated token is read off the current entity's embedding, so
    ``(d + P0)·b >= log2|Trees_1| = R·log2 N`` whatever k is. C1 matches it up to constants."""
    bound = per_entity(N, R, 1, b, P0)
    return Bound("chain-of-thought", "(d + P0)·b >= R·log2 N", {**bound.params, "k": k}, bound.log2_count,
                 bound.d_bound, "CoT: one hop per generated token; generic read-out")


# ------------------------------------------------------------------------------------------ leading terms

N_, R_, k_, b_, P0_ = sp.symbols("N R k b P_0", positive=True)


def leading_terms() -> dict[str, sp.Expr]:
    """Sympy forms of the bounds' leading terms (d as a function of N, R, k, b, with P0 = 0)."""
    return {
        "total-information (k=1)": R_ * sp.log(N_ / sp.E, 2) / b_,
        "per-entity": R_**k_ * sp.log(N_, 2) / b_,
        "tradeoff": R_**k_ * sp.log(N_, 2) / b_,
        "tradeoff (P0 side)": N_ * sp.log(N_, 2) / b_,
        "chain-of-thought": R_ * sp.log(N_, 2) / b_,
    }
