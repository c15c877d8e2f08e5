"""Bits per parameter: quantize a Model's weights to b bits and find the smallest b at which a check stays exact
(THEORY.md §4, "precision makes b concrete")."""

from __future__ import annotations

import numpy as np

from georecall.constructions.model import Model, flatten, unflatten

__all__ = ["quantize", "smallest_exact_bits"]

def quantize(model: Model, bits: int) -> Model:
    """Every weight tensor rounded to a b-bit uniform symmetric grid of its own.

    Per tensor W: step ``s = max|W| / (2^{b−1} − 1)`` and ``W_q = s·round(W / s)``: ``2^b − 1`` levels symmetric
    about 0, zero kept exactly (an all-zero tensor stays zero). Needs ``b >= 2``. Scalars that are not weight
    tensors (a softmax head's inverse temperature) are kept as they are. The model's ``meta`` records the bits.
    """
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or bits < 2:
        raise ValueError(f"quantization needs an integer number of bits b >= 2, got {bits!r}")
    levels = 2 ** (int(bits) - 1) - 1

    def q(array):
        if array is None:
            return None
        top = float(np.abs(array).max(initial=0.0))
        if top == 0.0:
            return array
        step = top / levels
        return np.round(array / step) * step

    return unflatten(model, {key: q(value) for key, value in flatten(model).items()},
                     meta={**model.meta, "quantized_bits": int(bits)})


def smallest_exact_bits(model: Model, check, *, max_bits: int = 24) -> tuple[int | None, list[dict]]:
    """Scan b = 2..max_bits and return the smallest b at which the quantized model still passes
    ``check(model) -> CheckResult`` (e.g. ``lambda m: check_queries(m, tokens, answers)``, or greedy decoding),
    with one record (b, exact, accuracy, min margin) per b tried. ``None`` if no b up to max_bits works."""
    records = []
    for bits in range(2, max_bits + 1):
        result = check(quantize(model, bits))
        records.append({"bits": bits, "exact": result.exact, "accuracy": result.accuracy,
                        "min_margin": result.min_margin})
        if result.exact:
            return bits, records
    return None, records
