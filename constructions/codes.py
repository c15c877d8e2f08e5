"""Attribute codes ``a_0..a_{N-1} ∈ R^D`` and their coherence (docs/theory.md, "Codes").

Coherence: ``μ = max_{i≠j} <a_i, a_j> / |a|²`` for codes of equal norm ``|a|``. Every construction that reads
an answer off a code uses the gap ``|a|² (1 − μ)`` between the right code and the best wrong one as its
margin.

Kinds:

- ``binary``: entry ``k`` of ``a_i`` is ``+1`` if bit ``k`` of ``i`` is 0, else ``-1``; needs ``2^D >= N``;
  deterministic; ``μ = 1 − 2/D`` (two indices differing in one bit) whenever N >= 2.
- ``sign``: i.i.d. uniform ±1 entries. By Hoeffding and a union bound over pairs,
  ``P(μ > t) <= N(N−1)/2 · exp(−D t²/2)``, so ``D >= 2 ln(N²/(2δ)) / t²`` gives ``μ <= t`` w.p. ``1 − δ``.
- ``gaussian``: i.i.d. normal vectors normalised to unit length (points on the sphere).

``scale="integer"`` keeps ±1 entries (``|a|² = D``), so that constructions built on them have integer weights;
``scale="unit"`` divides by ``|a|`` (``|a| = 1``). Gaussian codes exist only at unit scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from georecall.errors import ConditionError, InputError
from georecall.theory.tasks import as_rng, check_positive_int

__all__ = [
    "CODE_KINDS",
    "Codes",
    "binary_length",
    "coherence",
    "make_codes",
    "max_inner_product",
    "sign_length",
]

CodeKind = Literal["binary", "sign", "gaussian"]
CODE_KINDS: tuple[str, ...] = ("binary", "sign", "gaussian")


@dataclass(frozen=True, eq=False)
class Codes:
    """A codebook: ``vectors[i] = a_i`` (shape ``(N, D)``) with its measured geometry.

    ``gap = |a|² − max_{i≠j} <a_i, a_j> = |a|²(1 − μ)`` is the quantity every margin is built from, and
    ``distinct`` says whether it is positive, decided **exactly**: for ±1 codes (binary, sign; either scale)
    in integer arithmetic on the ±1 entries; for Gaussian codes by a certified floating-point gap (the
    computed gap must exceed a rigorous bound on its rounding error, else the codes are not certified
    distinct). ``distinct_lhs > distinct_rhs`` is that decision as two numbers (integers for ±1 codes), for
    the promise.
    """

    kind: str
    vectors: np.ndarray
    norm_sq: float  # |a|², the same for every code
    max_abs: float  # max_{i,k} |a_{i,k}|: what a ReLU gate must dominate
    mu: float  # coherence
    gap: float = 0.0  # |a|² − max_{i≠j} <a_i, a_j>; exact for ±1 codes at integer scale
    distinct: bool = False  # decided exactly (see above)
    distinct_lhs: float = 0.0
    distinct_rhs: float = 0.0
    certificate: str = ""

    @property
    def N(self) -> int:
        """Codes: the number of code vectors, N (rows of ``vectors``)."""
        return self.vectors.shape[0]

    @property
    def D(self) -> int:
        """Code length: the number of coordinates of each code vector, D."""
        return self.vectors.shape[1]

    @property
    def integer(self) -> bool:
        """Whether every entry of ``vectors`` is an integer (whatever the dtype)."""
        return bool(np.all(self.vectors == np.round(self.vectors)))

    @property
    def l1(self) -> float:
        """``max_j |a_j|_1``: what leakage multiplies in the multi-hop margins."""
        return float(np.abs(self.vectors).sum(axis=1).max())


def binary_length(N: int) -> int:
    """The shortest binary code length for N codes: ``⌈log2 N⌉`` (at least 1).

    Parameters
    ----------
    N : int
        Number of codes (>= 1).

    Returns
    -------
    int

    Raises
    ------
    InputError
        N not a positive integer.
    """
    N = check_positive_int("N", N)
    return max(1, (N - 1).bit_length())


def sign_length(N: int, t: float = 0.5, delta: float = 1e-3) -> int:
    """Smallest D with ``N(N−1)/2 · exp(−D t²/2) <= δ``: random sign codes then have ``μ <= t`` with
    probability at least ``1 − δ`` (Hoeffding and a union bound over pairs).

    Parameters
    ----------
    N : int
        Number of codes (>= 1).
    t : float
        Coherence target, ``0 < t < 1``.
    delta : float
        Failure probability, ``0 < δ < 1``.

    Returns
    -------
    int

    Raises
    ------
    InputError
        N not a positive integer, or t or δ outside (0, 1).
    """
    N = check_positive_int("N", N)
    if not 0 < t < 1:
        raise InputError(f"coherence target must satisfy 0 < t < 1, got t = {t}")
    if not 0 < delta < 1:
        raise InputError(f"failure probability must satisfy 0 < δ < 1, got δ = {delta}")
    if N == 1:
        return 1
    return max(1, math.ceil(2.0 * math.log(N * (N - 1) / (2.0 * delta)) / t**2))


def max_inner_product(vectors: np.ndarray, chunk_bytes: int = 64 * 2**20) -> float:
    """``max_{i≠j} <a_i, a_j>`` in row chunks (memory ``chunk_bytes``, not O(N²)).

    For integer-valued vectors with ``D·max|a|² < 2^53`` every float64 product and sum is an exact integer, so
    the result is exact.

    Parameters
    ----------
    vectors : numpy.ndarray
        ``(N, D)``.
    chunk_bytes : int
        Bytes of one block of inner products.

    Returns
    -------
    float
        ``−inf`` for a single code.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    N = vectors.shape[0]
    chunk = max(1, chunk_bytes // (8 * max(N, 1)))
    best = -math.inf
    for start in range(0, N, chunk):
        block = vectors[start : start + chunk] @ vectors.T
        rows = np.arange(block.shape[0])
        block[rows, start + rows] = -np.inf
        best = max(best, float(block.max()))
    return best


def coherence(vectors: np.ndarray, chunk_bytes: int = 64 * 2**20) -> float:
    """``μ = max_{i≠j} <a_i, a_j> / |a|²``, in row chunks of bounded memory.

    The codes must have equal norms (within 1e-9 relative): the margin argument ``|a|²(1 − μ)`` needs it. A
    single code has no pair; it gets ``μ = −1``, the smallest coherence any pair of equal-norm codes can have,
    so that margins and the constants built from ``|a|²(1 − μ)`` stay finite.

    Parameters
    ----------
    vectors : numpy.ndarray
        ``(N, D)`` codes of equal norm.
    chunk_bytes : int
        Bytes of one block of inner products.

    Returns
    -------
    float

    Raises
    ------
    InputError
        A zero code, codes of unequal norms, or a code whose norm is not finite in float64.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.einsum("ij,ij->i", vectors, vectors)
    if norms.size and not np.isfinite(norms).all():  # an infinite entry, or a square overflowing float64
        raise InputError("coherence needs codes of finite norm (an entry is infinite, NaN, or too large to "
                         "square in float64)")
    if norms.size and (norms.min() <= 0 or not np.allclose(norms, norms[0], rtol=1e-9, atol=0)):
        raise InputError("coherence needs nonzero codes of equal norm")
    if vectors.shape[0] < 2:
        return -1.0
    return max_inner_product(vectors, chunk_bytes) / float(norms[0])


def _sign_geometry(signs: np.ndarray, kind: str) -> tuple[int, int]:
    """``(|a|², max_{i≠j} <a_i, a_j>)`` of ±1 codes, exactly, as Python ints. Binary codes of distinct indices
    are distinct and two indices differing in bit 0 give the maximum ``D − 2``: no pairwise product needed."""
    N, D = signs.shape
    if N < 2:
        return D, -D
    if kind == "binary":
        return D, D - 2
    return D, int(max_inner_product(signs))


def make_codes(
    kind: str,
    N: int,
    D: int | None = None,
    rng: np.random.Generator | int | None = None,
    *,
    scale: Literal["unit", "integer"] = "unit",
) -> Codes:
    """Draw (or build) N codes of length D, with their geometry decided exactly (:class:`Codes`).

    Parameters
    ----------
    kind : {"binary", "sign", "gaussian"}
        ``binary``: the bits of i as ±1, deterministic, ``μ = 1 − 2/D``; ``sign``: i.i.d. uniform ±1;
        ``gaussian``: i.i.d. normal vectors normalised to unit length.
    N : int
        Number of codes.
    D : int, optional
        Code length; default ``binary_length(N)`` for binary codes, ``sign_length(N)`` otherwise.
    rng : numpy.random.Generator or int or None
        The random source (sign and Gaussian codes).
    scale : {"unit", "integer"}
        ``unit``: ``|a| = 1``; ``integer``: ±1 entries (``|a|² = D``), so that constructions built on them
        have integer weights.

    Returns
    -------
    Codes

    Raises
    ------
    ConditionError
        Binary codes with ``2^D < N`` (they cannot be distinct).
    InputError
        An unknown kind or scale, N or D not a positive integer, ``D > 2^20``, or an integer scale asked of
        Gaussian codes.
    """
    N = check_positive_int("N", N)
    if kind not in CODE_KINDS:
        raise InputError(f"code kind must be one of {CODE_KINDS}, got {kind!r}")
    if scale not in ("unit", "integer"):
        raise InputError(f"scale must be 'unit' or 'integer', got {scale!r}")
    if D is None:
        D = binary_length(N) if kind == "binary" else sign_length(N)
    D = check_positive_int("D", D)
    if D > 2**20:
        raise InputError(f"code length D = {D} is beyond what georecall supports (2^20)")
    if kind == "binary":
        if 2**D < N:
            raise ConditionError(f"binary codes need 2^D >= N; got 2^{D} = {2**D} < N = {N}")
        bits = (np.arange(N, dtype=np.int64)[:, None] >> np.arange(D, dtype=np.int64)) & 1
        signs = 1.0 - 2.0 * bits
    elif kind == "sign":
        signs = 1.0 - 2.0 * as_rng(rng).integers(0, 2, size=(N, D)).astype(np.float64)
    else:
        if scale == "integer":
            raise InputError("gaussian codes have no integer scale; use scale='unit' or ±1 codes")
        return _gaussian_codes(N, D, rng)
    norm_int, inner_int = _sign_geometry(signs, kind)
    unit = scale == "unit"
    vectors = signs / math.sqrt(D) if unit else signs
    vectors.setflags(write=False)
    gap = (norm_int - inner_int) / D if unit else float(norm_int - inner_int)
    return Codes(
        kind=kind,
        vectors=vectors,
        norm_sq=1.0 if unit else float(D),
        max_abs=float(np.abs(vectors).max()),
        mu=inner_int / norm_int if N > 1 else -1.0,
        gap=gap,
        distinct=norm_int > inner_int,
        distinct_lhs=norm_int,
        distinct_rhs=inner_int,
        certificate="exact: integer arithmetic on the ±1 entries",
    )


def _gaussian_codes(N: int, D: int, rng) -> Codes:
    """Unit Gaussian codes with a *certified* gap.

    Each float64 inner product of unit vectors is within ``γ = (D + 2)·u/(1 − (D + 2)·u)`` (u = 2^-53) of the
    exact inner product of the stored vectors (Higham, Thm 3.5, with the normalisation's error). The codes are
    certified distinct when ``min_i |a_i|² − max_{i≠j} <a_i, a_j> > 2γ`` computed values apart; otherwise
    ``distinct`` is False and the builders refuse them. Exact duplicate rows are never certified.
    """
    vectors = as_rng(rng).standard_normal((N, D))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    vectors.setflags(write=False)
    norms = np.einsum("ij,ij->i", vectors, vectors)
    inner = max_inner_product(vectors) if N > 1 else -1.0
    u = 2.0**-53
    gamma = (D + 2) * u / (1 - (D + 2) * u)
    lower_gap = float(norms.min()) - inner - 2 * gamma
    duplicates = N > 1 and np.unique(vectors, axis=0).shape[0] < N
    return Codes(
        kind="gaussian",
        vectors=vectors,
        norm_sq=float(norms[0]),
        max_abs=float(np.abs(vectors).max()),
        mu=inner / float(norms[0]) if N > 1 else -1.0,
        gap=float(norms[0]) - inner,
        distinct=bool(lower_gap > 0 and not duplicates),
        distinct_lhs=0.0 if duplicates else lower_gap,
        distinct_rhs=0.0,
        certificate="certified: float gap minus a rigorous rounding bound",
    )
