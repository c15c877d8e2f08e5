"""Bits per parameter: quantize a Model's weights to b bits and find the smallest b at which a check stays
exact (docs/theory.md, "Lower bounds": precision makes b concrete; docs/bounds.md, "Two notions of b").

**What "b bits per parameter" means here** (the *per-tensor* notion): every entry of a weight tensor W is one
of at most ``2^b`` values of a codebook shared by the whole tensor, ``s·V_b`` with one real scale
``s = max|W|`` per tensor (not counted in b):

- ``b = 0``: ``V_0 = {mean(W)/s}`` — one value, the tensor becomes constant (its mean);
- ``b = 1``: ``V_1 = {−1, +1}`` — sign quantization ``W_q = s·sgn(W)`` with ``sgn(0) = +1``. Zero is **not**
  kept: a codebook ``{−1, 0, +1}`` has three values, i.e. ``log2 3 ≈ 1.58`` bits, not one;
- ``b >= 2``: the uniform symmetric grid ``V_b = {j/(2^{b−1} − 1) : |j| <= 2^{b−1} − 1}``, ``2^b − 1 <= 2^b``
  levels with zero exact: ``W_q = δ·round(W/δ)``, ``δ = s/(2^{b−1} − 1)``. At b = 2 this is ``{−s, 0, s}``.

An all-zero tensor stays zero at every b. Scalars that are not weight tensors (a softmax head's inverse
temperature) are kept. A model quantized at b bits in this sense also holds b bits per parameter in the sense
of the lower bounds (a per-tensor codebook is a special per-parameter codebook), provided the scale s of every
fact-specific tensor does not depend on the task — true for the constructions with binary codes, whose
entries are fixed multiples of ``|a_i|`` entries.
"""

from __future__ import annotations

import numpy as np

from georecall.constructions.model import Model, flatten, freeze_if_new, unflatten

__all__ = ["CODEBOOK", "changed_arrays", "quantize", "quantize_array", "smallest_exact_bits"]

CODEBOOK = ("per tensor, at most 2^b values: b=0 the mean; b=1 s·sgn(W), sgn(0)=+1, s=max|W|; "
            "b>=2 uniform symmetric, step max|W|/(2^(b-1)-1), zero exact")


def _check_bits(bits) -> int:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits < 0:
        raise ValueError(f"quantization needs an integer number of bits b >= 0, got {bits!r}")
    return int(bits)


def quantize_array(array: np.ndarray | None, bits: int) -> np.ndarray | None:
    """One tensor on its b-bit codebook (module docstring): at most ``2^b`` distinct values.

    Parameters
    ----------
    array : numpy.ndarray or None
        The tensor (any shape). None passes through.
    bits : int
        b >= 0 (a bool is refused).

    Returns
    -------
    numpy.ndarray or None
        A new array of ``array``'s shape; an all-zero ``array`` is returned itself (no copy). dtype: the
        input's at b = 0 and b = 1 (so an integer tensor's mean is truncated at b = 0), at b >= 2 NumPy's
        result of ``round(array / step) * step`` (a float input keeps its dtype, an integer one becomes
        float64). Rounding is half to even (``np.round``).

    Raises
    ------
    ValueError
        ``bits`` is not a whole number >= 0 (checked before ``array``, also when it is None).

    Examples
    --------
    >>> quantize_array(np.array([0.0, 0.3, -1.0]), 1).tolist()
    [1.0, 1.0, -1.0]
    >>> quantize_array(np.array([0.0, 0.3, -1.0]), 2).tolist()
    [0.0, 0.0, -1.0]
    """
    bits = _check_bits(bits)
    if array is None:
        return None
    array = np.asarray(array)
    top = float(np.abs(array).max(initial=0.0))
    if top == 0.0:
        return array
    if bits == 0:
        return np.full_like(array, array.mean())
    if bits == 1:
        return np.where(array >= 0, top, -top).astype(array.dtype)
    # δ·round(W/δ) computed on W scaled by a power of two that brings max|W| to [0.5, 1): exact scaling both
    # ways, so the same numbers as without it wherever nothing under- or overflows, and no 0/0 where δ itself
    # would underflow (a subnormal max|W| gave NaN)
    exponent = int(np.frexp(top)[1])
    scaled = np.ldexp(array, -exponent)
    step = float(np.ldexp(top, -exponent)) / (2 ** (bits - 1) - 1)
    return np.ldexp(np.round(scaled / step) * step, exponent)


def quantize(model: Model, bits: int) -> Model:
    """Every weight tensor of ``model`` on its own b-bit codebook (``quantize_array``); ``b >= 0``.

    The model's ``meta`` records the bits.

    Parameters
    ----------
    model : Model
        The model; a compact read-out is first made dense (``Model.with_dense_readout``), so the codebook
        of ``U`` is the dense matrix's, its zeros included.
    bits : int
        b >= 0.

    Returns
    -------
    Model
        A new model: every array of ``model.arrays()`` quantized (a softmax head's inverse temperature is
        not an array and is kept), a dense read-out, and ``meta["quantized_bits"] = bits``.

    Raises
    ------
    ValueError
        ``bits`` is not a whole number >= 0.
    """
    bits = _check_bits(bits)
    model = model.with_dense_readout()  # the codebook of the dense U (its zeros included), however stored
    return unflatten(model, {key: _quantized(value, bits) for key, value in flatten(model).items()},
                     meta={**model.meta, "quantized_bits": bits})


def _quantized(array: np.ndarray, bits: int) -> np.ndarray:
    out = quantize_array(array, bits)
    assert out is not None  # quantize_array maps arrays to arrays (None only to None)
    return freeze_if_new(out, array)  # the Model then takes it without another copy


def changed_arrays(model: Model, bits: int) -> list[str]:
    """Names of the weight arrays that quantization at b bits changes (any entry differs).

    An empty list means ``quantize(model, bits)`` computes exactly what ``model`` computes: a check of it
    would only re-run the unquantized check.

    Parameters
    ----------
    model : Model
        The model (its read-out compared as the dense ``U``, as :func:`quantize` quantizes it).
    bits : int
        b >= 0.

    Returns
    -------
    list of str
        Flat array names (``"unembedding"``, ``"layers.0.mlp.W1"``, ...) in ``model.arrays()`` order.

    Raises
    ------
    ValueError
        ``bits`` is not a whole number >= 0 (raised on the first array; a model has at least its embeddings).
    """
    return [key for key, value in flatten(model.with_dense_readout()).items()
            if not np.array_equal(_quantized(value, bits), value)]


def smallest_exact_bits(model: Model, check, *, max_bits: int = 24,
                        min_bits: int = 1) -> tuple[int | None, list[dict]]:
    """Scan ``b = min_bits..max_bits`` and return the smallest b at which the quantized model still passes
    ``check(model) -> CheckResult`` (e.g. ``lambda m: check_queries(m, tokens, answers)``, or greedy
    decoding), with one record per b tried; ``None`` if no b up to ``max_bits`` works. The scan stops at the
    first exact b: it does not claim that larger b stay exact.

    Parameters
    ----------
    model : Model
        The unquantized model.
    check : callable
        ``check(quantized_model)`` returning an object with ``exact``, ``accuracy`` and ``min_margin``
        (a ``CheckResult``); what it raises passes through.
    max_bits : int
        Largest b tried (>= 0).
    min_bits : int
        Smallest b tried (>= 0; the default 1 leaves out b = 0). ``min_bits > max_bits`` tries nothing.

    Returns
    -------
    (int or None, list of dict)
        The smallest exact b (None: none in the range), and per b tried ``{"bits", "exact", "accuracy",
        "min_margin", "changed"}``, where ``"changed"`` is the NUMBER of arrays that quantization changes
        (:func:`changed_arrays`).

    Raises
    ------
    ValueError
        ``min_bits`` or ``max_bits`` is not a whole number >= 0 (before any check runs).
    """
    records = []
    for bits in range(_check_bits(min_bits), _check_bits(max_bits) + 1):
        result = check(quantize(model, bits))
        records.append({"bits": bits, "exact": result.exact, "accuracy": result.accuracy,
                        "min_margin": result.min_margin, "changed": len(changed_arrays(model, bits))})
        if result.exact:
            return bits, records
    return None, records
