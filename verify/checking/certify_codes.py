"""The codebook certify hands a built-in family in integer mode: binary codes stored as float16.

Binary codes at integer scale are ±1 (``a_i[k] = +1`` if bit k of i is 0, else −1): every entry is exact in
float16, so a codebook stored as float16 is the same codebook, value for value, as the float64 one
``constructions.codes.make_codes("binary", N, D, scale="integer")`` returns, at a quarter of the memory
(2^24 codes of length 24: 0.75 GiB instead of 3 GiB, and no int64 temporaries while it is formed). The
family built on it holds the same numbers in every field THE forward pass reads (its read-out shares the
codebook, as it does the float64 one), so in integer mode, where the forward pass computes exactly whatever
the storage dtype, it is the same function: certify proves the family ``check`` builds. The equality of
values and geometry with ``make_codes`` is tested (tests/test_certify.py), and certify uses these codes only
in integer mode.
"""

from __future__ import annotations

import numpy as np

from georecall.constructions.codes import Codes, binary_length
from georecall.errors import ConditionError, InputError
from georecall.theory.tasks import check_positive_int
from georecall.verify.checking.decoders import Hypercube

__all__ = ["CODE_ROWS", "CompactBinaryCodes", "binary_hypercube", "compact_binary_codes", "same_memory"]

CODE_ROWS = 2**16  # codes formed at once


class CompactBinaryCodes(Codes):
    """Binary codes at integer scale stored as float16 (:func:`compact_binary_codes`). ``integer`` and
    ``l1`` are known by construction (±1 entries: integral, ``|a|_1 = D``) instead of scanned, so no
    temporary of the codebook's size is formed."""

    @property
    def integer(self) -> bool:
        """True: the ±1 entries are integers (known by construction, not scanned)."""
        return True

    @property
    def l1(self) -> float:
        """``D``: every code's ``|a|_1`` (±1 entries; known by construction, not scanned)."""
        return float(self.D)


def compact_binary_codes(N: int, D: int | None = None) -> CompactBinaryCodes:
    """N binary codes of length D at integer scale, stored as float16, formed in row blocks.

    Parameters
    ----------
    N : int
        Number of codes.
    D : int, optional
        Code length (default ``⌈log2 N⌉``, at least 1).

    Returns
    -------
    CompactBinaryCodes
        The values and geometry of ``make_codes("binary", N, D, scale="integer")``: ``|a|² = D``, largest
        inner product of distinct codes ``D − 2`` (indices differing in bit 0; ``−D`` for N = 1, as there),
        decided exactly.

    Raises
    ------
    InputError
        N or D not a positive integer, or ``D > 2^20``.
    ConditionError
        ``2^D < N`` (the codes cannot be distinct).
    """
    N = check_positive_int("N", N)
    D = binary_length(N) if D is None else check_positive_int("D", D)
    if D > 2**20:
        raise InputError(f"code length D = {D} is beyond what georecall supports (2^20)")
    if 2**D < N:
        raise ConditionError(f"binary codes need 2^D >= N; got 2^{D} = {2**D} < N = {N}")
    vectors = np.empty((N, D), dtype=np.float16)
    for start in range(0, N, CODE_ROWS):
        stop = min(N, start + CODE_ROWS)
        vectors[start:stop] = _binary_rows(start, stop, D)
    vectors.setflags(write=False)
    norm_int, inner_int = (D, D - 2) if N >= 2 else (D, -D)
    return CompactBinaryCodes(
        kind="binary",
        vectors=vectors,
        norm_sq=float(D),
        max_abs=1.0,
        mu=inner_int / norm_int if N > 1 else -1.0,
        gap=float(norm_int - inner_int),
        distinct=norm_int > inner_int,
        distinct_lhs=norm_int,
        distinct_rhs=inner_int,
        certificate="exact: integer arithmetic on the ±1 entries",
    )


def _binary_rows(start: int, stop: int, D: int) -> np.ndarray:
    """The binary codes of ``start..stop − 1`` as float16 ``(stop − start, D)``: entry k is −1 where bit k
    of the index is 1, else +1 (bits beyond an index's 64 are 0)."""
    out = np.ones((stop - start, D), dtype=np.float16)
    width = min(D, 64)
    index = np.arange(start, stop, dtype="<u8")
    bits = np.unpackbits(index.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")  # bit k in column k
    out[:, :width] = _SIGN[bits[:, :width]]
    return out


_SIGN = np.array([1, -1], dtype=np.float16)  # bit 0 -> +1, bit 1 -> -1 (exact in float16)


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are the same bytes read the same way (data address, shape, strides, dtype):
    then they hold the same values, decided without reading them.

    Parameters
    ----------
    a, b : numpy.ndarray

    Returns
    -------
    bool
    """
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0] and a.shape == b.shape
            and a.strides == b.strides and a.dtype == b.dtype)


def binary_hypercube(vectors: np.ndarray, U_read: np.ndarray) -> Hypercube | None:
    """The hypercube decoder of a read-out that *is* a compact binary codebook of ``N = 2^D`` codes (λ = 1),
    formed without scanning it; None otherwise (the caller then runs ``decoders.detect_hypercube``).

    When ``U_read`` is the same memory as ``vectors`` (:func:`same_memory`) and holds, exactly, the codes of
    :func:`compact_binary_codes` (compared block by block with the definition: every ±1 pattern once, row r
    ``+1`` exactly at the bits that are 0 in r), the row whose pattern's positive coordinates are the bits of
    ``c`` is ``r = c xor (2^D − 1)``; the sign patterns are the read-out itself (no copy).
    ``tests/test_certify.py`` compares the result with ``detect_hypercube``'s.

    Parameters
    ----------
    vectors : numpy.ndarray
        The codebook the family was given (a :class:`CompactBinaryCodes`' vectors).
    U_read : numpy.ndarray
        The family's read-out on the columns it reads.

    Returns
    -------
    Hypercube or None
    """
    N, D = vectors.shape
    if not (D <= 40 and N == 2**D and vectors.dtype == np.float16 and same_memory(vectors, U_read)):
        return None
    for start in range(0, N, CODE_ROWS):
        stop = min(N, start + CODE_ROWS)
        if not np.array_equal(U_read[start:stop], _binary_rows(start, stop, D)):
            return None
    row_of = np.arange(N, dtype=np.int64) ^ (N - 1)
    row_of.setflags(write=False)
    return Hypercube(np.arange(D), 1.0, U_read, row_of)
