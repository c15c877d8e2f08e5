"""Whole-array scans in row blocks: integrality, the largest magnitude, the largest row l1 norm and column
extremes of a weight table, with no temporary the size of the table (an entity table at N = 2^20, R = 16 is
2.9 GiB). Used by THE forward pass's integer mode (:mod:`.arithmetic`) and by certification's relaxation
(``verify.checking.certify_relaxation``); blocks are whole rows, so every answer is the whole-array one
(tests/test_memory.py compares them)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SCAN_BYTES", "abs_max", "column_extremes", "is_integral", "row_blocks", "row_l1_max"]

SCAN_BYTES = 1 << 23  # bytes of rows scanned at once


def row_blocks(array: np.ndarray, widen: bool = False):
    """``array`` in consecutive blocks of whole rows of about :data:`SCAN_BYTES` each (the array itself when
    0-d).

    Parameters
    ----------
    array : numpy.ndarray
        Blocks are taken along its first axis.
    widen : bool
        Give float16 blocks as float32 (exact, and far faster to compute with).

    Yields
    ------
    numpy.ndarray
        Views of ``array`` (copies when widened).
    """
    if array.ndim == 0:
        yield array.astype(np.float32) if widen and array.dtype == np.float16 else array
        return
    rows = max(1, SCAN_BYTES // max(1, array[:1].nbytes))
    for start in range(0, array.shape[0], rows):
        block = array[start:start + rows]
        yield block.astype(np.float32) if widen and block.dtype == np.float16 else block


def is_integral(array: np.ndarray) -> bool:
    """Whether every entry of ``array`` is an integer by exact comparison with its rounding (NaN is not;
    ±inf is, as ``rint`` keeps it: non-finite weights are refused before, by the model's validation), in row
    blocks.

    Parameters
    ----------
    array : numpy.ndarray
        Any float or integer array.

    Returns
    -------
    bool
        True when ``array == rint(array)`` everywhere (an empty array is integral).

    Examples
    --------
    >>> import numpy as np
    >>> is_integral(np.array([[1.0, -2.0]])), is_integral(np.array([0.5])), is_integral(np.array([np.nan]))
    (True, False, False)
    """
    return all(np.array_equal(block, np.rint(block)) for block in row_blocks(np.asarray(array), widen=True))


def abs_max(array: np.ndarray) -> float:
    """``max |array|`` (0 when empty; NaN when any entry is NaN), in row blocks and without forming
    ``|array|`` (``max(max(block), −min(block))``).

    Parameters
    ----------
    array : numpy.ndarray
        A real array of any shape.

    Returns
    -------
    float
    """
    best = 0.0
    for block in row_blocks(np.asarray(array)):
        largest = float(np.maximum(block.max(initial=0.0), -block.min(initial=0.0)))
        if math.isnan(largest):
            return math.nan
        best = max(best, largest)
    return best


def row_l1_max(array: np.ndarray) -> float:
    """``max_i Σ_j |array[i, j]|`` in float64 (0 for no rows), in row blocks.

    Parameters
    ----------
    array : numpy.ndarray
        2-D.

    Returns
    -------
    float
    """
    return max((float(np.abs(block).sum(axis=1, dtype=np.float64).max(initial=0.0))
                for block in row_blocks(np.asarray(array), widen=True)), default=0.0)


def column_extremes(array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(array.max(axis=0), array.min(axis=0))`` as float64, in row blocks.

    Parameters
    ----------
    array : numpy.ndarray
        2-D, at least one row.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)

    Raises
    ------
    ValueError
        ``array`` has no rows.
    """
    top = bottom = None
    for block in row_blocks(np.asarray(array), widen=True):
        hi, lo = block.max(axis=0).astype(np.float64), block.min(axis=0).astype(np.float64)
        top = hi if top is None else np.maximum(top, hi)
        bottom = lo if bottom is None else np.minimum(bottom, lo)
    if top is None or bottom is None:
        raise ValueError("column_extremes: the array has no rows")
    return top, bottom
