"""Exact read-out decoders: from the residual coordinates a read-out uses to (prediction, margin) per query.

The read-out of a :class:`~georecall.constructions.model.Model` is ``logits = x @ U.T``; the prediction is the
argmax (the first index among equal maxima, as ``np.argmax``) and a query's margin is
``logit[answer] − max_{j ≠ answer} logit[j]`` (:func:`margins_of`). Two decoders compute them from
``v = x[:, columns]``, the coordinates that ``U`` reads:

- :func:`dense_decode`: the logits themselves, ``v @ U[:, columns].T``, in row chunks (the reference);
- :func:`hypercube_decode`: for a read-out ``U[:, columns] = λ·S`` whose rows ``S`` are all ``2^D`` sign
  patterns ``{−1, +1}^D`` (``N = 2^D`` outputs, zero outside ``columns``), without any logit:

  * ``logit_j = λ·<s_j, v>`` is largest for the sign pattern of ``v``: ``max_j logit_j = λ·|v|_1``;
  * if the answer's pattern ``a`` agrees with ``sign(v)`` wherever ``v_i ≠ 0`` (``δ = 0`` below), the best
    other pattern flips one coordinate, the one of least ``|v_i|``: margin ``= 2·λ·min_i |v_i|``;
  * otherwise ``δ = Σ_{i: a_i·v_i < 0} |v_i| > 0`` and the margin is ``λ·<a, v> − λ·|v|_1 = −2·λ·δ``;
  * a zero coordinate ``v_i = 0`` makes two patterns tie: the margin is then ``<= 0`` (a failure).

  Proof in ``docs/theory.md`` ("The hypercube decoder"). Rows with a zero coordinate (ties) are predicted by
  the dense decoder on those rows only, so predictions equal ``np.argmax`` of the logits there too.

With integer ``v``, integer ``λ`` and ``2·λ·|v|_1 < 2^53`` every quantity above is an exact integer in
float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from georecall.constructions.model import nonzero_columns
from georecall.constructions.rounding import absmm, gamma, up

__all__ = ["Certified", "Hypercube", "certify_logits", "dense_certify", "dense_decode", "detect_hypercube",
           "hypercube_certify", "hypercube_decode", "margins_of"]

# Elements of one block of logits in the dense decoder (float64: 64 MiB).
DENSE_BLOCK_ELEMENTS = 8 * 2**20
# Rows of U scanned at once when detecting structure (bounded memory for N = 2^20 and more).
SCAN_ROWS = 2**16


def margins_of(logits: np.ndarray, answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(predictions, margins)`` for a block of logits ``(B, n_out)``; overwrites ``logits`` (scratch).

    ``margin = logit[answer] − max_{j ≠ answer} logit[j]`` (``+inf`` when ``n_out == 1``).

    Parameters
    ----------
    logits : numpy.ndarray
        ``(B, n_out)`` floating-point logits; each row's answer entry is overwritten with ``-inf``.
    answers : numpy.ndarray
        ``(B,)`` integer output indices in ``[0, n_out)`` (not checked: NumPy indexing wraps a negative one
        and raises IndexError for one too large).

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``predictions (B,)``: ``argmax`` of each row (the first among equal maxima), taken before the
        overwrite; ``margins (B,)``: in the logits' dtype, one rounded subtraction of computed logits.
    """
    rows = np.arange(logits.shape[0])
    predictions = logits.argmax(axis=1)
    correct = logits[rows, answers].copy()
    logits[rows, answers] = -np.inf
    runner_up = logits.max(axis=1) if logits.shape[1] > 1 else np.full(len(rows), -np.inf)
    return predictions, correct - runner_up


@dataclass(frozen=True, eq=False)
class Hypercube:
    """A read-out ``U[:, columns] = λ·signs`` with ``signs`` all ``2^D`` patterns of ``{−1, +1}^D``.

    ``row_of[code]`` is the output row whose pattern has ``s_i = +1`` exactly for the bits ``i`` of ``code``
    (``code = Σ_i [s_i > 0]·2^i``)."""

    columns: np.ndarray
    lam: float
    signs: np.ndarray
    row_of: np.ndarray

    @property
    def D(self) -> int:
        """Code length: the number of read-out columns, D (the read-out has ``2^D`` rows)."""
        return int(self.columns.size)

    @cached_property
    def readout(self) -> np.ndarray:
        """``λ·signs`` as float64 ``(2^D, D)``: the read-out on its columns, for the dense decoder at ties."""
        out = self.lam * self.signs.astype(np.float64)
        out.setflags(write=False)
        return out


def detect_hypercube(U: np.ndarray, columns: np.ndarray | None = None) -> tuple[Hypercube | None, str]:
    """Is ``U`` exactly ``λ·S`` on some columns (``S``: every ±1 pattern once, ``n_out = 2^D``), 0 elsewhere?

    Every test is an exact comparison of the stored floats: one common absolute value ``λ > 0`` on the read
    columns and the ``2^D`` sign patterns a permutation of the rows. "0 elsewhere" holds by construction
    when ``columns`` is None (they are then every column with a nonzero entry); given ``columns`` are taken
    as the read columns and the other columns of ``U`` are NOT examined (the callers pass every column of a
    compact read-out).

    Parameters
    ----------
    U : numpy.ndarray
        The read-out ``(n_out, d)`` (or its compact ``(n_out, D)`` columns).
    columns : numpy.ndarray, optional
        The read columns when already known (integer indices into ``U``'s columns).

    Returns
    -------
    (Hypercube or None, str)
        ``(Hypercube, "")``, or ``(None, reason)``: ``n_out`` is not ``2^D`` (also for ``D = 0`` or
        ``D > 40``), an entry on the read columns is not ``±λ``, or two rows share a sign pattern.
    """
    n_out = U.shape[0]
    columns = nonzero_columns(U) if columns is None else np.asarray(columns)
    D = int(columns.size)
    if D == 0 or D > 40 or n_out != 2**D:
        return None, f"n_out = {n_out} is not 2^D for the D = {D} coordinates the read-out reads"
    lam = float(abs(U[0, columns[0]]))
    pw = (2 ** np.arange(D, dtype=np.int64))
    row_of = np.full(n_out, -1, dtype=np.int64)
    signs = np.empty((n_out, D), dtype=np.int8)
    for start in range(0, n_out, SCAN_ROWS):
        block = U[start : start + SCAN_ROWS][:, columns]
        if not np.all(np.abs(block) == lam):
            return None, "read-out entries on the read coordinates are not all ±λ for one λ"
        positive = block > 0
        signs[start : start + block.shape[0]] = np.where(positive, 1, -1)
        codes = positive.astype(np.int64) @ pw
        if np.any(row_of[codes] >= 0) or np.unique(codes).size != codes.size:
            return None, "two read-out rows have the same sign pattern"
        row_of[codes] = np.arange(start, start + block.shape[0])
    signs.setflags(write=False)
    row_of.setflags(write=False)
    return Hypercube(columns, lam, signs, row_of), ""


def dense_decode(v: np.ndarray, answers: np.ndarray, U_read: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Predictions and margins from the logits ``v @ U_read.T``, in row blocks of bounded size.

    ``v (n, D)`` are the residual coordinates the read-out reads and ``U_read (n_out, D)`` its columns there.

    Parameters
    ----------
    v : numpy.ndarray
        ``(n, D)`` floating-point read residuals; the logits are computed in ``v``'s dtype (``U_read`` is
        cast to it).
    answers : numpy.ndarray
        ``(n,)`` integer output indices in ``[0, n_out)``.
    U_read : numpy.ndarray
        ``(n_out, D)``: the read-out on the read coordinates.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``predictions (n,)`` int64 (argmax of the computed logits, the first among equal maxima) and
        ``margins (n,)`` float64 (:func:`margins_of` of the computed logits).
    """
    n = v.shape[0]
    predictions = np.empty(n, dtype=np.int64)
    margins = np.empty(n, dtype=np.float64)
    step = max(1, DENSE_BLOCK_ELEMENTS // max(1, U_read.shape[0]))
    Ut = U_read.T.astype(v.dtype, copy=False)
    for start in range(0, n, step):
        part = slice(start, min(n, start + step))
        predictions[part], margins[part] = margins_of(v[part] @ Ut, answers[part])
    return predictions, margins


def hypercube_decode(cube: Hypercube, v: np.ndarray, answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact argmax and margin of ``logits = λ·v @ S.T`` without forming them (see the module docstring).

    ``v (n, D)``: the residual on ``cube.columns`` (any memory layout); ``answers (n,)``. Returns
    ``(predictions int64, margins float64)``, equal to :func:`dense_decode`'s on the exact logits when every
    quantity is exact (integer ``v`` and ``λ``, ``2·λ·|v|_1 < 2^53``); with float ``v`` the margins are the
    closed forms above evaluated in float64 (``2λ·min_i |v_i|``: one rounding; ``−2λ·δ``: a rounded sum).

    Parameters
    ----------
    cube : Hypercube
        The read-out (:func:`detect_hypercube`).
    v : numpy.ndarray
        ``(n, D)`` read residuals on ``cube.columns``.
    answers : numpy.ndarray
        ``(n,)`` integer output rows in ``[0, 2^D)``.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        ``predictions (n,)``: the row of ``sign(v)``'s pattern (``v_i = 0`` read as −1), replaced on rows
        with a zero coordinate by :func:`dense_decode`'s on ``cube.readout`` (the first maximal row, as
        ``np.argmax``); ``margins (n,)``: ``2λ·min_i |v_i|`` when the answer's pattern agrees with ``v``
        (0 at a tie), else ``−2λ·δ``.
    """
    D = cube.D
    v = np.asarray(v)
    vT = v.T  # coordinate-major: contiguous rows when v is the transpose of a (D, n) array (the tables')
    codes = np.zeros(v.shape[0], dtype=np.int64)
    bit = np.empty(v.shape[0], dtype=np.int64)
    for i in range(D):  # code = Σ_i [v_i > 0]·2^i, in integers (no BLAS call for a (n, D) by (D,) product)
        np.greater(vT[i], 0, out=bit, casting="unsafe")
        np.left_shift(bit, i, out=bit)
        codes |= bit
    predictions = cube.row_of[codes]
    absmin = np.abs(vT[0])
    for i in range(1, D):
        np.minimum(absmin, np.abs(vT[i]), out=absmin)
    margins = (2.0 * cube.lam) * absmin.astype(np.float64)
    tie = absmin == 0
    bad = np.flatnonzero((predictions != answers) | tie)
    if bad.size:
        vb = v[bad].astype(np.float64)
        agree = cube.signs[answers[bad]] * vb  # a_i·v_i
        delta = np.where(agree < 0, -agree, 0.0).sum(axis=1)
        margins[bad] = np.where(delta > 0, (-2.0 * cube.lam) * delta, margins[bad])
        ties = bad[tie[bad]]
        if ties.size:  # several maximal patterns: the first row among them, as np.argmax
            predictions[ties] = dense_decode(v[ties], answers[ties], cube.readout)[0]
    return predictions, margins


# ------------------------------------------------------------------------------------ certified decoding


@dataclass(frozen=True, eq=False)
class Certified:
    """Per query: the prediction (argmax of the computed logits), the computed margin, and an interval
    ``[lo, hi]`` that contains the margin in exact real arithmetic (``lo = hi =`` the margin when the
    computation is exact). ``lo`` is also a lower bound on the margin THE forward pass computes.

    ``positive`` (exact re-decision only): whether each exact margin is certainly > 0. ``lo > 0`` says the
    same, except for an exact margin nearer 0 than float64's smallest subnormal, whose ``lo`` rounds to 0."""

    predictions: np.ndarray
    margins: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    positive: np.ndarray | None = None


def _down(x):
    """A lower bound on the exact result of the one rounded operation that gave ``x``."""
    return np.nextafter(x, -np.inf)


def _up(x):
    """An upper bound on the exact result of the one rounded operation that gave ``x``."""
    return np.nextafter(x, np.inf)


def _down_sum(x):
    """:func:`_down` for a sum or difference: a computed 0 is exact (``fl(a ± b) = 0`` iff ``a ± b = 0``)."""
    return np.where(x == 0, 0.0, np.nextafter(x, -np.inf))


def _up_sum(x):
    """:func:`_up` for a sum or difference (a computed 0 is exact)."""
    return np.where(x == 0, 0.0, np.nextafter(x, np.inf))


def certify_logits(logits: np.ndarray, e_logits: np.ndarray | None, answers: np.ndarray) -> Certified:
    """Interval margins from computed logits ``(B, n_out)`` and a bound ``e_logits`` on their distance from
    the exact logits (None: exact). ``lo = (L_a − e_a) − max_{j≠a}(L_j + e_j)`` and ``hi = (L_a + e_a) −
    max_{j≠a}(L_j − e_j)``, each rounded outward.

    Parameters
    ----------
    logits : numpy.ndarray
        ``(B, n_out)`` computed logits (any floating dtype; the arithmetic is in float64). Not modified.
    e_logits : numpy.ndarray or None
        Entrywise bound on ``|computed − exact|``, broadcastable to ``(B, n_out)``; a non-finite logit or
        bound counts as an infinite bound. None: the logits are exact (``lo = hi = margins``).
    answers : numpy.ndarray
        ``(B,)`` integer output indices in ``[0, n_out)``.

    Returns
    -------
    Certified
        ``predictions``: argmax of the computed logits; ``margins``: computed margins (float64); ``lo``,
        ``hi``: the interval (``+inf`` both with a single output; a NaN bound becomes ``−inf`` / ``+inf``).
    """
    rows = np.arange(logits.shape[0])
    predictions = logits.argmax(axis=1)
    L = logits.astype(np.float64)
    correct = L[rows, answers].copy()
    if e_logits is None:
        work = L.copy()
        work[rows, answers] = -np.inf
        runner = work.max(axis=1) if L.shape[1] > 1 else np.full(len(rows), -np.inf)
        margins = correct - runner
        return Certified(predictions, margins, margins, margins)
    with np.errstate(invalid="ignore"):
        e = np.where(np.isfinite(L) & np.isfinite(e_logits), np.asarray(e_logits, dtype=np.float64), np.inf)
    e_a = e[rows, answers]
    high = _up_sum(L + e)
    high[rows, answers] = -np.inf
    low = _down_sum(L - e)
    low[rows, answers] = -np.inf
    work = L.copy()
    work[rows, answers] = -np.inf
    if L.shape[1] > 1:
        runner, runner_hi, runner_lo = work.max(axis=1), high.max(axis=1), low.max(axis=1)
    else:
        runner = runner_hi = runner_lo = np.full(len(rows), -np.inf)
    with np.errstate(invalid="ignore"):
        margins = correct - runner
        lo = _down_sum(_down_sum(correct - e_a) - runner_hi)
        hi = _up_sum(_up_sum(correct + e_a) - runner_lo)
    lo = np.where(runner_hi == -np.inf, np.inf, np.where(np.isnan(lo), -np.inf, lo))  # one answer: nothing
    hi = np.where(runner_lo == -np.inf, np.inf, np.where(np.isnan(hi), np.inf, hi))  # to beat; NaN: unknown
    return Certified(predictions, margins, lo, hi)


def dense_certify(v: np.ndarray, e_v: np.ndarray | None, answers: np.ndarray, U_read: np.ndarray,
                  u: float, eta: float) -> Certified:
    """:func:`certify_logits` of the logits ``v @ U_read.T`` that THE forward pass forms (in ``v``'s dtype),
    with the bound ``(γ_D·|v| + e_v)·|U_read|ᵀ + D·η`` on their error (D read coordinates: the product's own
    rounding plus the propagated error ``e_v`` of ``v``), in row blocks of bounded size.

    Parameters
    ----------
    v : numpy.ndarray
        ``(n, D)`` computed read residuals.
    e_v : numpy.ndarray or None
        Bound on ``|v − v_exact|``: ``(n, D)`` per row or ``(D,)`` for every row. None: ``v`` and the
        logits are taken as exact (integer mode), so no bound at all is added.
    answers : numpy.ndarray
        ``(n,)`` integer output indices in ``[0, n_out)``.
    U_read : numpy.ndarray
        ``(n_out, D)``: the read-out on the read coordinates.
    u, eta : float
        Unit roundoff and underflow bound of the working format (``rounding.format_of``); unused when
        ``e_v`` is None.

    Returns
    -------
    Certified
        As :func:`certify_logits`, row by row.
    """
    n = v.shape[0]
    out = [np.empty(n, dtype=np.int64), np.empty(n), np.empty(n), np.empty(n)]
    step = max(1, DENSE_BLOCK_ELEMENTS // max(1, U_read.shape[0]))
    Ut = U_read.T.astype(v.dtype, copy=False)
    absU = None if e_v is None else np.abs(U_read.T.astype(np.float64))
    D = U_read.shape[1]
    for start in range(0, n, step):
        part = slice(start, min(n, start + step))
        logits = v[part] @ Ut
        e_L = None
        if e_v is not None and absU is not None:
            ev = e_v if e_v.ndim == 1 else e_v[part]
            e_L = up(absmm(gamma(D, u) * np.abs(v[part].astype(np.float64)) + ev, absU) + D * eta, 2)
        c = certify_logits(logits, e_L, answers[part])
        for array, value in zip(out, (c.predictions, c.margins, c.lo, c.hi)):
            array[part] = value
    return Certified(*out)


def _cube_margin(z: np.ndarray, lam: float, upper: bool) -> np.ndarray:
    """A lower (``upper=False``) or upper bound, rounding included, on the exact margin ``2λ·min_i z_i`` (all
    ``z_i >= 0``) or ``−2λ·Σ_i max(0, −z_i)`` of the answer's pattern ``a`` for agreements ``z_i = a_i·v_i``
    (module docstring); the margin is increasing in every ``z_i``."""
    low = z.min(axis=1)
    D = z.shape[1]
    deficit = np.maximum(-z, 0.0).sum(axis=1)
    if upper:
        return np.where(low >= 0, _up(2.0 * lam * low),
                        -_down(2.0 * lam * _down(deficit * (1 - gamma(D + 1, 2.0**-53)))))
    return np.where(low >= 0, _down(2.0 * lam * low), -up(2.0 * lam * up(deficit, D), 1))


def hypercube_certify(cube: Hypercube, v: np.ndarray, e_v: np.ndarray | None, answers: np.ndarray,
                      u: float, eta: float) -> Certified:
    """:func:`hypercube_decode` with an interval margin. With ``|v − v_exact| <= e_v`` entrywise, the answer
    pattern's agreements ``z = a·v`` lie in ``[z − e, z + e]`` and the margin (:func:`_cube_margin`) is
    increasing in each, so ``lo = margin(z − e)``, ``hi = margin(z + e)`` (rounded outward). ``lo`` is also
    lowered to a bound on the margin THE forward pass computes when it forms the logits ``λ·S·v`` itself: the
    exact margin of ``v`` minus twice that product's rounding ``λ·(γ_D·|v|_1 + D·η)``.

    Parameters
    ----------
    cube : Hypercube
        The read-out (:func:`detect_hypercube`).
    v : numpy.ndarray
        ``(n, D)`` computed read residuals on ``cube.columns``.
    e_v : numpy.ndarray or None
        Bound on ``|v − v_exact|``: ``(n, D)`` or ``(D,)``; a non-finite entry counts as an infinite bound.
        None: exact (``lo = hi = margins``, no allowance for the forward's read-out either).
    answers : numpy.ndarray
        ``(n,)`` integer output rows in ``[0, 2^D)``.
    u, eta : float
        Unit roundoff and underflow bound of the working format, for the forward's own read-out rounding.

    Returns
    -------
    Certified
        :func:`hypercube_decode`'s predictions and margins, with ``lo`` (``−inf`` where unbounded) and
        ``hi`` (``+inf`` where unbounded; on rows predicted right with every ``|v_i| > e_i`` it is
        ``2λ·min_i (|v_i| + e_i)``, rounded up).
    """
    predictions, margins = hypercube_decode(cube, v, answers)
    if e_v is None:
        return Certified(predictions, margins, margins, margins)
    lam = float(cube.lam)
    D = cube.D
    n = predictions.size
    # Rows predicted right (the answer's pattern is sign(v), so z_i = |v_i|) are bounded coordinate by
    # coordinate without any gather: lo = 2λ·min_i(|v_i| − e_i) and the forward's 2λ·min|v_i| − 2·read.
    vT = np.asarray(v).T
    e_arr = np.asarray(e_v, dtype=np.float64)
    per_row = e_arr.ndim == 2
    eT = e_arr.T if per_row else e_arr
    slack = np.full(n, np.inf)
    reach = np.full(n, np.inf)  # min_i (|v_i| + e_i): the upper end on rows predicted right
    total = np.zeros(n)
    with np.errstate(invalid="ignore"):
        for i in range(D):
            a = np.absolute(vT[i], dtype=np.float64)
            total += a
            np.minimum(reach, a + eT[i], out=reach)
            a -= eT[i]
            np.minimum(slack, a, out=slack)
    good = (predictions == answers) & (slack > 0) & np.isfinite(total)
    read = up(2.0 * lam * up(gamma(D, u) * total + D * eta, D + 2), 1)  # THE forward's own read-out
    # one subtraction per coordinate: a positive computed |v_i| − e_i is within a factor (1 ± u) of exact
    lo_exact = _down(2.0 * lam * (slack * (1 - 4 * 2.0**-53)))
    lo_forward = _down(np.where(np.isfinite(margins), margins, 0.0) * (1 - 4 * 2.0**-53) - read)
    lo = np.where(good, np.minimum(lo_exact, lo_forward), -np.inf)
    # one addition per coordinate, rounded up: the exact |v_i| + e_i is at most (1 + u)·computed
    hi = np.where(good & np.isfinite(reach), _up(2.0 * lam * _up(reach * (1 + 4 * 2.0**-53))), np.inf)
    bad = np.flatnonzero(~good)
    if bad.size:
        vb = np.asarray(v[bad], dtype=np.float64)
        z = cube.signs[answers[bad]].astype(np.float64) * vb
        with np.errstate(invalid="ignore"):
            e = np.where(np.isfinite(z) & np.isfinite(e_arr[bad] if per_row else e_arr),
                         np.broadcast_to(e_arr[bad] if per_row else e_arr, z.shape), np.inf)
            lo_b = np.minimum(_cube_margin(_down_sum(z - e), lam, upper=False),
                              _down_sum(_cube_margin(z, lam, upper=False) - read[bad]))
            hi_b = _cube_margin(_up_sum(z + e), lam, upper=True)
        lo[bad] = np.where(np.isnan(lo_b), -np.inf, lo_b)
        hi[bad] = np.where(np.isnan(hi_b), np.inf, hi_b)
    return Certified(predictions, margins, lo, hi)
