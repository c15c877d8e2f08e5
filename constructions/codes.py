"""Attribute codes ``a_0..a_{N-1} ∈ R^D`` and their coherence (THEORY.md §3).

Coherence: ``μ = max_{i≠j} <a_i, a_j> / |a|²`` for codes of equal norm ``|a|``. Every construction that reads an
answer off a code uses the gap ``|a|² (1 − μ)`` between the right code and the best wrong one as its margin.

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

from georecall.theory.tasks import _as_rng, check_positive_int

CodeKind = Literal["binary", "sign", "gaussian"]
CODE_KINDS: tuple[str, ...] = ("binary", "sign", "gaussian")


@dataclass(frozen=True)
class Codes:
    """A codebook: ``vectors[i] = a_i`` (shape ``(N, D)``) with its measured geometry."""

    kind: str
    vectors: np.ndarray
    norm_sq: float  # |a|², the same for every code
    max_abs: float  # max_{i,k} |a_{i,k}|: what a ReLU gate must dominate
    mu: float  # coherence

    @property
    def N(self) -> int:
        return self.vectors.shape[0]

    @property
    def D(self) -> int:
        return self.vectors.shape[1]

    @property
    def integer(self) -> bool:
        return bool(np.all(self.vectors == np.round(self.vectors)))


def binary_length(N: int) -> int:
    """The shortest binary code length for N codes: ``ceil(log2 N)`` (at least 1)."""
    N = check_positive_int("N", N)
    return max(1, (N - 1).bit_length())


def sign_length(N: int, t: float = 0.5, delta: float = 1e-3) -> int:
    """Smallest D with ``N(N−1)/2 · exp(−D t²/2) <= δ``: random sign codes then have ``μ <= t`` w.p. ``1 − δ``."""
    N = check_positive_int("N", N)
    if not 0 < t < 1:
        raise ValueError(f"coherence target must satisfy 0 < t < 1, got t = {t}")
    if not 0 < delta < 1:
        raise ValueError(f"failure probability must satisfy 0 < δ < 1, got δ = {delta}")
    if N == 1:
        return 1
    return max(1, math.ceil(2.0 * math.log(N * (N - 1) / (2.0 * delta)) / t**2))


def coherence(vectors: np.ndarray, chunk: int = 2048) -> float:
    """``μ = max_{i≠j} <a_i, a_j> / |a|²`` computed exactly in row chunks (memory O(chunk · N)).

    The codes must have equal norms (within 1e-9 relative): the margin argument ``|a|²(1 − μ)`` needs it.
    A single code has no pair; it gets ``μ = −1``, the smallest coherence any pair of equal-norm codes can have,
    so that margins and the constants built from ``|a|²(1 − μ)`` stay finite.
    """
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.einsum("ij,ij->i", vectors, vectors)
    if norms.size and (norms.min() <= 0 or not np.allclose(norms, norms[0], rtol=1e-9, atol=0)):
        raise ValueError("coherence needs nonzero codes of equal norm")
    N = vectors.shape[0]
    best = -math.inf
    for start in range(0, N, chunk):
        block = vectors[start : start + chunk] @ vectors.T
        rows = np.arange(block.shape[0])
        block[rows, start + rows] = -np.inf
        best = max(best, float(block.max()))
    return best / float(norms[0]) if N > 1 else -1.0


def make_codes(
    kind: str,
    N: int,
    D: int | None = None,
    rng: np.random.Generator | int | None = None,
    *,
    scale: Literal["unit", "integer"] = "unit",
) -> Codes:
    """Draw (or build) N codes of length D.

    ``D=None`` picks the default: ``binary_length(N)`` for binary codes, ``sign_length(N)`` otherwise.
    Raises ``ValueError`` when the codes cannot be distinct (``2^D < N`` for binary codes) or when an integer
    scale is asked of Gaussian codes.
    """
    N = check_positive_int("N", N)
    if kind not in CODE_KINDS:
        raise ValueError(f"code kind must be one of {CODE_KINDS}, got {kind!r}")
    if scale not in ("unit", "integer"):
        raise ValueError(f"scale must be 'unit' or 'integer', got {scale!r}")
    if D is None:
        D = binary_length(N) if kind == "binary" else sign_length(N)
    D = check_positive_int("D", D)
    if kind == "binary":
        if 2**D < N:
            raise ValueError(f"binary codes need 2^D >= N; got 2^{D} = {2**D} < N = {N}")
        bits = (np.arange(N, dtype=np.int64)[:, None] >> np.arange(D, dtype=np.int64)) & 1
        vectors = 1.0 - 2.0 * bits
    elif kind == "sign":
        vectors = 1.0 - 2.0 * _as_rng(rng).integers(0, 2, size=(N, D)).astype(np.float64)
    else:
        if scale == "integer":
            raise ValueError("gaussian codes have no integer scale; use scale='unit' or ±1 codes")
        vectors = _as_rng(rng).standard_normal((N, D))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    if kind != "gaussian" and scale == "unit":
        vectors = vectors / math.sqrt(D)
    vectors.setflags(write=False)
    norm_sq = float(vectors[0] @ vectors[0])
    mu = coherence(vectors)
    return Codes(kind=kind, vectors=vectors, norm_sq=norm_sq, max_abs=float(np.abs(vectors).max()), mu=mu)
