"""Information-theoretic lower bounds on the embedding dimension d (docs/theory.md, "Lower bounds"; proofs in
docs/bounds.md).

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
from fractions import Fraction

import numpy as np
import sympy as sp
from scipy.special import gammaln

from georecall.bounds.counting import F_lower, Factors, ceil_log2_product, coprime_cycle_length, log2_product
from georecall.bounds.graphs import tree_size
from georecall.errors import InputError
from georecall.theory import __version__
from georecall.theory.tasks import check_positive_int

__all__ = ["Bound", "chain_of_thought", "d_min_exact", "gadget_factors", "gadget_log2", "leading_terms",
           "per_entity", "total_information", "tradeoff"]


@dataclass(frozen=True)
class Bound:
    """A lower bound: ``(per_d·d + P0)·b >= log2 C`` for a counted set of size at least C.

    ``log2_count_lower`` is ``log2 C`` (a lower bound on log2 of the set the fact-specific bits must tell
    apart; ``count_exact`` says whether C is that set's exact size), ``d_bound = (log2 C / b − P0)/per_d`` the
    real-valued bound and ``d_min`` the smallest integer d >= 0 satisfying the inequality, decided exactly
    (``d_min_exact``; it equals ``max(0, ⌈d_bound⌉)``).
    """

    id: str
    formula: str
    params: dict
    log2_count_lower: float
    count_exact: bool
    counted: str
    d_bound: float
    d_min: int
    assumption: str
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The bound as a JSON-able dict: every field, and the georecall ``version``."""
        return {**asdict(self), "version": __version__}


def _check_bits(b) -> Fraction:
    if isinstance(b, bool) or not (isinstance(b, (int, float, Fraction, np.integer, np.floating)) and b > 0
                                   and math.isfinite(b)):
        raise InputError(f"bits per parameter b must be positive, got {b!r}")
    return Fraction(b) if isinstance(b, (int, Fraction)) else Fraction(float(b))


def d_min_exact(factors: Factors, per_d: int, P0: int, b) -> int:
    """The smallest integer ``d >= 0`` with ``(per_d·d + P0)·b >= log2 C``, ``C = Π ((n)_m)^e``, decided in
    integers.

    With ``b = p/q`` in lowest terms and ``t = per_d·d + P0`` (an integer), ``t·b >= log2 C`` iff ``2^{t·p} >=
    C^q`` iff ``t·p >= ⌈log2 C^q⌉``, so ``t >= t_min = ⌈⌈log2 C^q⌉ / p⌉`` and ``d_min = max(0, ⌈(t_min −
    P0)/per_d⌉)``. No floating-point tolerance is involved.

    Parameters
    ----------
    factors : Factors
        C as ``((n, m, e), ...)`` (empty: C = 1).
    per_d : int
        Parameters per unit of d (>= 1).
    P0 : int
        Other fact-specific parameters (>= 0).
    b : int, float or Fraction
        Bits per parameter (> 0).

    Returns
    -------
    int

    Raises
    ------
    InputError
        b not positive and finite, ``per_d < 1``, ``P0 < 0`` or a bad factor.
    """
    b = _check_bits(b)
    if per_d < 1 or P0 < 0:
        raise InputError(f"need per_d >= 1 and P0 >= 0, got {per_d}, {P0}")
    p, q = b.numerator, b.denominator
    log2_cq = ceil_log2_product(tuple((n, m, e * q) for n, m, e in factors)) if factors else 0
    t_min = -(-log2_cq // p)
    return max(0, -(-(t_min - P0) // per_d))


def _bound(id_, formula, params, factors, exact, counted, per_d, P0, b, assumption, **extra) -> Bound:
    log2c = log2_product(factors) if factors else 0.0
    d_bound = (log2c / float(b) - P0) / per_d
    return Bound(id_, formula, params, log2c, exact, counted, d_bound, d_min_exact(factors, per_d, P0, b),
                 assumption, extra)


def gadget_factors(N: int, R: int, k: int, M: int) -> Factors:
    """``(N − M·S_{k−1})_{M·R^k}`` as factors: the distinct leaf assignments of M gadget roots.

    Parameters
    ----------
    N, R, k, M : int
        Entities, relations, depth, roots; ``N >= M·S_k`` with ``S_k = 1 + R + … + R^k``.

    Returns
    -------
    Factors

    Raises
    ------
    InputError
        The family does not fit (``N < M·S_k``).
    """
    if N < M * tree_size(R, k):
        raise InputError(f"the gadget family needs N >= M·S_k = {M * tree_size(R, k)}; got N = {N}")
    return ((N - M * tree_size(R, k - 1), M * R**k, 1),)


def gadget_log2(N: int, R: int, k: int, M: int) -> float:
    """``log2 (N − M·S_{k−1})_{M·R^k}`` with ``S_{k−1} = 1 + R + … + R^{k−1}``: the distinct leaf assignments
    of M gadget roots.

    Parameters
    ----------
    N, R, k, M : int
        Entities, relations, depth, roots.

    Returns
    -------
    float
        ``−inf`` when the family does not fit (``N < M·S_k``).
    """
    return log2_product(gadget_factors(N, R, k, M)) if N >= M * tree_size(R, k) else -math.inf


def total_information(N: int, R: int, k: int = 1, b: float = 1, P0: int = 0) -> Bound:
    """``(N·d + P0)·b >= log2|F_k|``: the fact-specific bits must tell apart every k-hop answer table.

    k = 1: ``|F_1| = (N!)^R`` exactly, so ``d >= (R·log2 N! − P0·b)/(N·b) ≈ R·log2(N/e)/b``. k >= 2: ``|F_k|
    >= (L − 1)!·(N!)^{R−1}``, L the largest integer ``<= N`` coprime to k (``counting.F_lower``, proof there):
    for R >= 2 the bound is within ``k·log2 N / N`` of the k = 1 bound. (The gadget family of ``tradeoff``
    counts at most ``(N − k)!`` tables, never more than this.)

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.
    b : float
        Bits per parameter (> 0; a float is taken at its exact binary value).
    P0 : int
        Fact-specific parameters besides the entity embeddings.

    Returns
    -------
    Bound

    Raises
    ------
    InputError
        A size not a positive integer, or b not positive and finite.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    _check_bits(b)
    factors = F_lower(N, R, k)
    if k == 1:
        counted = "|F_1| = (N!)^R"
    else:
        counted = f"|F_k| >= (L-1)!·(N!)^(R-1), L = {coprime_cycle_length(N, k)}"
    return _bound("total-information", "(N·d + P0)·b >= log2|F_k|",
                  {"N": N, "R": R, "k": k, "b": b, "P0": P0},
                  factors, k == 1, counted, N, P0, b, "every parameter holds b bits")


def per_entity(N: int, R: int, k: int = 1, b: float = 1, P0: int = 0) -> Bound:
    """``(d + P0)·b >= log2|Trees_k|``: with a generic read-out, an entity's k-hop answers are a function of
    its own embedding (and the P0 other fact-specific parameters).

    k = 1: ``|Trees_1| = N^R``. k >= 2: ``|Trees_k| >= (N − 1)_{R^k}`` when ``N >= 1 + R + … + R^k``
    (otherwise no bound: ``C = 1``).

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.
    b : float
        Bits per parameter (> 0; a float is taken at its exact binary value).
    P0 : int
        Fact-specific parameters besides the entity embeddings.

    Returns
    -------
    Bound

    Raises
    ------
    InputError
        A size not a positive integer, or b not positive and finite.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    _check_bits(b)
    factors: tuple[tuple[int, int, int], ...]
    if k == 1:
        factors, exact, counted = ((N, 1, R),), True, "|Trees_1| = N^R"
    elif N >= tree_size(R, k):
        factors, exact, counted = ((N - 1, R**k, 1),), False, "|Trees_k| >= (N-1)_{R^k}"
    else:
        factors, exact, counted = (), False, f"N < 1 + R + ... + R^k = {tree_size(R, k)}: no lower side"
    return _bound("per-entity", "(d + P0)·b >= log2|Trees_k|", {"N": N, "R": R, "k": k, "b": b, "P0": P0},
                  factors, exact, counted, 1, P0, b, "generic read-out")


def tradeoff(N: int, R: int, k: int, b: float = 1, P0: int = 0) -> Bound:
    """Capacity–depth tradeoff without CoT: for every M with ``N >= M·S_k``, ``(P0 + M·d)·b >= log2 (N −
    M·S_{k−1})_{M·R^k}``, so ``d >= max_M (log2(…)/b − P0)/M``.

    A vectorized double-precision scan over all admissible M locates the best M; the exact ``d_min`` is the
    largest over the best M and its two neighbours (every M gives a valid bound). With ``M = Θ(N/R^k)`` this
    reads: ``d = Ω(R^k log N / b)`` unless ``P0·b = Ω(N log N)``.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.
    b : float
        Bits per parameter (> 0; a float is taken at its exact binary value).
    P0 : int
        Fact-specific parameters besides the entity embeddings.

    Returns
    -------
    Bound

    Raises
    ------
    InputError
        A size not a positive integer, or b not positive and finite.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    fb = float(_check_bits(b))
    formula = "(P0 + M·d)·b >= log2 (N − M·S_{k−1})_{M·R^k}"
    M_max = N // tree_size(R, k)
    if M_max < 1:
        return _bound("tradeoff", formula, {"N": N, "R": R, "k": k, "b": b, "P0": P0, "M": 0}, (), False,
                      f"N < S_k = {tree_size(R, k)}: no gadget fits", 1, P0, b, "no gadget fits")
    M = np.arange(1, M_max + 1, dtype=np.float64)
    top = N - M * tree_size(R, k - 1)
    approx = (gammaln(top + 1) - gammaln(top - M * R**k + 1)) / math.log(2)
    best = int(np.argmax((approx / fb - P0) / M)) + 1
    candidates = sorted(m for m in (best - 1, best, best + 1) if 1 <= m <= M_max)
    exact = {m: d_min_exact(gadget_factors(N, R, k, m), m, P0, b) for m in candidates}
    reals = {m: (gadget_log2(N, R, k, m) / fb - P0) / m for m in candidates}
    M_best = max(candidates, key=lambda m: (exact[m], reals[m]))
    factors = gadget_factors(N, R, k, M_best)
    return _bound("tradeoff", formula, {"N": N, "R": R, "k": k, "b": b, "P0": P0, "M": M_best}, factors, True,
                  f"gadget family, M = {M_best}: (N - M·S_(k-1))_(M·R^k)", M_best, P0, b,
                  "no CoT; generic read-out; gadget family with the best M")


def chain_of_thought(N: int, R: int, k: int = 1, b: float = 1, P0: int = 0) -> Bound:
    """With CoT, ``(d + P0)·b >= log2|Trees_1| = R·log2 N`` whatever k is, **because of the first generated
    token alone**: ``v_1 = π_{r_1}(s)`` is predicted at the position of s from the prompt ``⟨r_k, …, r_1,
    s⟩``, whose only fact-specific parameters are ``e_s`` (and P0); as ``r_1`` ranges over [R] the first-step
    answers ``(π_1(s), …, π_R(s))`` take all ``N^R`` values. Later steps attend to several entities'
    embeddings and are not used. C1 matches it up to constants.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.
    b : float
        Bits per parameter (> 0; a float is taken at its exact binary value).
    P0 : int
        Fact-specific parameters besides the entity embeddings.

    Returns
    -------
    Bound

    Raises
    ------
    InputError
        A size not a positive integer, or b not positive and finite.
    """
    bound = per_entity(N, R, 1, b, P0)
    return Bound("chain-of-thought", "(d + P0)·b >= R·log2 N", {**bound.params, "k": k},
                 bound.log2_count_lower,
                 True, "|Trees_1| = N^R (first generated token)", bound.d_bound, bound.d_min,
                 "CoT: the first generated token is read off e_s; generic read-out")


# ------------------------------------------------------------------------------------------ leading terms

N_, R_, k_, b_, P0_ = sp.symbols("N R k b P_0", positive=True)


def leading_terms() -> dict[str, sp.Expr]:
    """Sympy forms of the bounds' leading terms (d as a function of N, R, k, b, with P0 = 0).

    Returns
    -------
    dict
        ``{bound: expr}``.
    """
    return {
        "total-information (k=1)": R_ * sp.log(N_ / sp.E, 2) / b_,
        "per-entity": R_**k_ * sp.log(N_, 2) / b_,
        "tradeoff": R_**k_ * sp.log(N_, 2) / b_,
        "tradeoff (P0 side)": N_ * sp.log(N_, 2) / b_,
        "chain-of-thought": R_ * sp.log(N_, 2) / b_,
    }
