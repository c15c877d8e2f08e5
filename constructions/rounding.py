"""Rigorous bounds on floating-point rounding (docs/theory.md, "Sound float mode").

The float checker certifies the margin of a query in exact real arithmetic of the stored weights from the
numbers a floating-point pass actually computed, using the standard forward-error bounds (Higham, *Accuracy
and Stability of Numerical Algorithms*, §2.2 and §3.1):

- a rounding: ``fl(a ∘ b) = (a ∘ b)(1 + δ) + η`` with ``|δ| <= u`` (``u = eps/2`` of the working format) and
  ``|η| <= η_min`` (half the smallest subnormal; ``η = 0`` for additions);
- a dot product of length n, in ANY summation order (BLAS blocking, FMA, pairwise): ``|fl(x·y) − x·y| <=
  γ_n·|x|·|y| + n·η_min`` with ``γ_n = n·u/(1 − n·u)``.

The bounds themselves are computed in float64 from nonnegative terms and then inflated (:func:`absmm`,
:func:`up`) so that their own rounding can only make them larger. ``exp`` is assumed accurate to 4 ulp
(NumPy's and glibc's are within 1–4 ulp); the interval softmax allows 256 ulp.

Everything here works on float64 arrays of bounds; the forward pass (``constructions.forward.forward`` with
``errors=True``) and the checker's fast paths call it.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "U64",
    "absmm",
    "format_of",
    "gamma",
    "hard_weight_error",
    "softmax_weight_error",
    "up",
]

U64 = 2.0**-53
_TINY64 = float(np.finfo(np.float64).smallest_subnormal)
_EXP_REL = 256 * U64  # the interval softmax's allowance for exp's own error (assumed <= 4 ulp)


def format_of(*dtypes) -> tuple[float, float]:
    """``(u, η)`` of the least precise of the given floating-point dtypes: the unit roundoff ``eps/2`` and a
    bound on the absolute error of an underflowing product (the smallest subnormal).

    Parameters
    ----------
    *dtypes : numpy.dtype or type
        Floating-point dtypes.

    Returns
    -------
    (float, float)
        ``(u, η)``; ``(0, 0)`` for no dtype.

    Raises
    ------
    ValueError
        A dtype that is not floating-point (``numpy.finfo`` refuses it).
    """
    u, eta = 0.0, 0.0
    for dtype in dtypes:
        info = np.finfo(np.dtype(dtype))
        u = max(u, float(info.eps) / 2)
        eta = max(eta, float(info.smallest_subnormal))
    return u, eta


def gamma(n: int | float, u: float) -> float:
    """``γ_n = n·u/(1 − n·u)`` (infinite when ``n·u >= 1/2``), rounded up: the relative error bound of a dot
    product of length n in any summation order.

    Parameters
    ----------
    n : int or float
        The number of operations.
    u : float
        The unit roundoff.

    Returns
    -------
    float
    """
    nu = float(n) * u
    if nu >= 0.5:
        return np.inf
    return float(np.nextafter(nu / (1.0 - nu) * (1 + 4 * U64), np.inf))


def up(x, n: int = 4, out: np.ndarray | None = None):
    """``x`` (nonnegative, float64) inflated to cover the rounding of the at most ``n`` float64 operations
    that computed it from exact nonnegative terms: ``x·(1 + 2γ_{n+2}) + (n + 2)·tiny``.

    Parameters
    ----------
    x : array_like
        Nonnegative bounds.
    n : int
        The float64 operations that computed them.
    out : numpy.ndarray, optional
        Write the result here (in place).

    Returns
    -------
    numpy.ndarray
    """
    x = np.asarray(x, dtype=np.float64)
    result = np.multiply(x, 1.0 + 2.0 * gamma(n + 2, U64), out=out)
    result += (n + 2) * _TINY64
    return result


def absmm(a: np.ndarray, b: np.ndarray, extra: int = 0) -> np.ndarray:
    """An upper bound on the exact product ``a @ b`` of nonnegative arrays (float64 GEMM, then inflated by the
    GEMM's own ``γ_n`` and ``extra`` further operations). Exactly 0 for an empty product (n = 0); otherwise
    every entry gets ``n·tiny`` in case a product underflowed.

    Parameters
    ----------
    a : numpy.ndarray
        ``(..., n)``, nonnegative.
    b : numpy.ndarray
        ``(n, k)``, nonnegative.
    extra : int
        Further float64 operations to cover.

    Returns
    -------
    numpy.ndarray
        ``(..., k)`` float64.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    n = a.shape[-1]
    shape = a.shape[:-1] + (b.shape[-1],)
    if n == 0:
        return np.zeros(shape)
    flat = a.reshape(int(np.prod(a.shape[:-1])), n) @ b
    up(flat, n + extra, out=flat)
    flat += n * _TINY64
    return flat.reshape(shape)


def _exp_bounds(lo_arg: np.ndarray, hi_arg: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds on ``exp(t)`` for every real ``t`` in ``[lo_arg, hi_arg]``."""
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        lo = np.nextafter(np.exp(lo_arg) * (1.0 - _EXP_REL), 0.0)
        hi = np.nextafter(np.exp(hi_arg) * (1.0 + _EXP_REL), np.inf) + _TINY64
    lo = np.where(np.isnan(lo), 0.0, np.maximum(lo, 0.0))
    hi = np.where(np.isnan(hi), np.inf, hi)
    return lo, hi


def softmax_weight_error(scores: np.ndarray, delta: np.ndarray, weights: np.ndarray,
                         visible: np.ndarray, rel: float = 0.0) -> np.ndarray:
    """Bound ``|weights − softmax(s)|`` entrywise for every exact score row ``s`` with ``|s − scores| <=
    delta`` (over the ``visible`` positions of the last axis; others have weight 0 in both).

    Interval arithmetic with outward rounding: with ``c = max(scores)`` (softmax is shift invariant), ``e_i ∈
    [exp(ŝ_i − c − δ_i), exp(ŝ_i − c + δ_i)]`` and ``w_i = e_i/(e_i + Σ_{j≠i} e_j)`` is increasing in ``e_i``
    and decreasing in the others, so ``lo_i = e⁻_i/(e⁻_i + Σ_{j≠i} e⁺_j)`` and ``hi_i = e⁺_i/(e⁺_i + Σ_{j≠i}
    e⁻_j)`` (docs/theory.md, "Sound float mode").

    Parameters
    ----------
    scores : numpy.ndarray
        The computed scores ŝ (any float dtype).
    delta : numpy.ndarray
        Bounds on ``|s − ŝ|``, broadcastable to ``scores``.
    weights : numpy.ndarray
        The computed weights ŵ.
    visible : numpy.ndarray
        Boolean mask of the positions attended to.
    rel : float
        Widen the interval by this relative amount (a computed softmax's own rounding).

    Returns
    -------
    numpy.ndarray
        float64 bounds, at most 1, 0 off the visible positions.
    """
    s = np.where(visible, np.asarray(scores, dtype=np.float64), -np.inf)
    c = np.max(s, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", over="ignore"):
        shifted = s - c
        lo_arg = np.nextafter(np.nextafter(shifted, -np.inf) - delta, -np.inf)
        hi_arg = np.nextafter(np.nextafter(shifted, np.inf) + delta, np.inf)
    lo_e, hi_e = _exp_bounds(np.where(visible, lo_arg, -np.inf), np.where(visible, hi_arg, -np.inf))
    lo_e = np.where(visible, lo_e, 0.0)
    hi_e = np.where(visible, hi_e, 0.0)
    T = s.shape[-1]
    g = 2.0 * gamma(T + 2, U64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        # Σ_{j≠i} e_j as (Σ_j e_j) − e_i, with the absolute rounding of the sum and of the subtraction
        # (at most 2γ_{T+2}·Σ) taken off (lower) or added (upper): no relative cancellation error.
        S_lo = lo_e.sum(axis=-1, keepdims=True)
        S_hi = hi_e.sum(axis=-1, keepdims=True)
        rest_lo = np.maximum(np.nextafter(np.nextafter(S_lo - lo_e, -np.inf) - g * S_lo, -np.inf), 0.0)
        rest_hi = np.nextafter(np.nextafter(S_hi - hi_e, np.inf) + g * S_hi, np.inf)
        w_lo = np.nextafter(lo_e / up(lo_e + rest_hi, 1), 0.0)
        w_hi = np.nextafter(hi_e / np.nextafter((hi_e + rest_lo) * (1 - 4 * U64), 0.0), np.inf)
    w_lo = np.where(np.isfinite(w_lo), w_lo, 0.0) * (1 - rel)
    w_hi = np.minimum(np.where(np.isfinite(w_hi), w_hi, 1.0) * (1 + rel), 1.0)
    w = np.asarray(weights, dtype=np.float64)
    err = np.maximum(w_hi - w, w - w_lo)
    err = np.where(visible, up(np.maximum(err, 0.0), 2), 0.0)
    return np.minimum(err, 1.0)


def hard_weight_error(scores: np.ndarray, delta: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """Bound ``|ŵ − w|`` for hard attention (uniform over the maximal positions): 0 on a row whose computed
    maximal set is certainly the exact one (every other position is certainly lower, and the maximal set is
    one position or has exact scores, ``δ = 0``), else 1 on every position that may be maximal.

    Parameters
    ----------
    scores : numpy.ndarray
        The computed scores.
    delta : numpy.ndarray
        Bounds on their errors.
    visible : numpy.ndarray
        Boolean mask of the positions attended to.

    Returns
    -------
    numpy.ndarray
        float64, each entry 0 or 1.
    """
    s = np.where(visible, np.asarray(scores, dtype=np.float64), -np.inf)
    d = np.where(visible, np.asarray(delta, dtype=np.float64), 0.0)
    top = np.max(s, axis=-1, keepdims=True)
    is_top = visible & (s == top)
    with np.errstate(invalid="ignore"):
        floor = np.min(np.where(is_top, np.nextafter(s - d, -np.inf), np.inf), axis=-1, keepdims=True)
        maybe = visible & (np.nextafter(s + d, np.inf) >= floor)
    certain = (np.sum(maybe, axis=-1, keepdims=True) == np.sum(is_top, axis=-1, keepdims=True)) & (
        (np.sum(is_top, axis=-1, keepdims=True) == 1) | np.all(np.where(is_top, d == 0, True), axis=-1,
                                                                 keepdims=True))
    return np.where(certain, 0.0, np.where(maybe, 1.0, 0.0))
