"""A stored model's own numbers: accuracy and margins of the function its stored weights define, exactly.

Every float16, bfloat16, float32 and float64 value is an exact rational (a dyadic ``m·2^e``), so a stored
model is a mathematical function of its stored weights: THE forward pass (``constructions.forward.forward``)
in exact real arithmetic. Its accuracy, its margins and every verdict built on them are about that
function, whatever precision the file happens to be stored in. :func:`evaluate`, this module's one entry
point, decides them in three steps:

1. **Fast, float64.** The weights are cast to float64 (exact: every narrower format embeds in float64) and
   THE forward pass runs with its a-posteriori error bound (``forward(..., errors=True)``: the standard
   ``γ_n`` forward-error analysis on the magnitudes ``|W||x|`` the pass actually meets, componentwise;
   ``constructions.rounding``). Each query gets an interval ``[lo, hi]`` that contains its exact margin.
2. **Exact re-decision.** A query whose interval straddles 0 (undecided), or is loose (``lo < 0.999·hi``
   for a positive margin), is computed again without rounding: rational arithmetic on the stored values
   (Python integers over one common denominator per tensor), exact for every operation THE forward pass
   performs except ``exp``. Softmax weights are enclosed by interval arithmetic (``mpmath.iv``, rigorous
   outward rounding) at a working precision that is doubled until the query is decided
   (:data:`PRECISIONS`). A margin that is exactly 0 through a softmax cannot be decided by any enclosure:
   such a query stays undecided and is counted (``CheckResult.n_undecided``); without softmax it never
   happens.
3. **Summary.** Accuracy counts the queries whose exact margin is > 0 (a tie is a failure);
   ``CheckResult.n_redecided`` says how many needed step 2. Margins are reported as intervals ``[lo, hi]``
   (``CheckResult.margins`` and ``margin_highs``); after step 2 they are the exact rational rounded outward
   to float64 (width at most 2 ulp), or the enclosure at the last precision.

``arith="float32"`` (or ``"float16"``, ``"float64"``) asks for something else, explicitly: the verdict as a
computation in that dtype makes it (weights cast to it, every operation rounded in it), with that
computation's own sound interval on the exact margin of the weights it computed with. Its accuracy counts
the queries whose interval is certainly positive; nothing is re-decided.

Memory: the exact pass runs in chunks of queries sized from the run's budget (:func:`exact_bytes` is what
its weights and one chunk take; ``eval`` counts it in ``--max-gib``). The read-out is converted block by
block, so a model with many outputs is never held as Python integers at once.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.memory import Budget, as_budget
from georecall.verify.checking.check import CheckResult, check_decoding, check_queries
from georecall.verify.checking.decoders import Certified

__all__ = ["ARITHS", "PRECISIONS", "evaluate", "exact_bytes", "exact_margins"]

ARITHS = ("exact", "float64", "float32", "float16")
# Bits of the interval softmax's working precision, tried in turn until a query is decided.
PRECISIONS = (80, 200, 640, 2000)
# A query whose certified interval is looser than this (lo < TIGHT·hi) is computed exactly.
TIGHT = 0.999
# Bytes one Python integer of an exact tensor takes, with its pointer (ints of a few hundred bits).
INT_BYTES = 96
# Rows of the read-out converted to Python integers at once.
READOUT_ROWS = 4096
# The largest float64: an exact margin beyond it is enclosed as [_LARGEST, inf] ([-inf, -_LARGEST]).
_LARGEST = float(np.finfo(np.float64).max)


def evaluate(model: Model, tokens: np.ndarray, answers: np.ndarray, *, positions: np.ndarray | None = None,
             arith: str = "exact", chunk: int | None = None, keep: bool = False, max_failures: int = 10,
             progress: bool = False, decoder: str = "auto", forward: str = "auto",
             budget: Budget | None = None, integer: bool = False, decode: bool = False) -> CheckResult:
    """Accuracy and margins of the stored model's own function on every query (module docstring).

    The arguments are :func:`~georecall.verify.checking.check.check_queries`'s, so that this is a drop-in
    replacement for it, plus ``arith`` and ``decode`` (``check_decoding``'s chains).

    Parameters
    ----------
    model : Model
        The stored weights (any float dtype; mixed dtypes too).
    tokens : numpy.ndarray
        ``(Q, T)`` token ids.
    answers : numpy.ndarray
        ``(Q,)`` expected ids, or ``(Q, P)`` with ``positions``.
    positions : numpy.ndarray, optional
        Read positions (default: the last).
    arith : {"exact", "float64", "float32", "float16"}
        ``"exact"`` (default): the stored weights' function, every query decided. A dtype: the verdict of a
        computation in that dtype, with its own sound bound (labelled ``CheckResult.arith``).
    chunk : int, optional
        Queries per chunk of THE forward pass (default: from ``budget``).
    keep : bool
        Keep per-query predictions, lower bounds (``margins``) and upper bounds (``margin_highs``).
    max_failures : int
        Failures listed in the result.
    progress : bool
        Progress on stderr.
    decoder, forward : str
        The float pass's implementations (``check.DECODERS``, ``check.FORWARDS``).
    budget : Budget or None
        The run's memory budget.
    integer : bool
        Integer mode (``check_queries``'s proof of exact integer arithmetic; exact already, so ``arith`` is
        then ignored).
    decode : bool
        Greedy chain-of-thought decoding (``check_decoding``): ``tokens`` are the prompts and ``answers`` the
        true chains ``(Q, k)``; a chain the float64 pass leaves open is decoded again exactly, step by step
        (the true token fed back after each step decided right).

    Returns
    -------
    CheckResult
        With ``arith``, ``n_redecided`` and (``keep``) ``margin_highs``. With ``arith="exact"`` and no
        softmax tie, ``n_undecided == 0``.

    Raises
    ------
    InputError
        An unknown ``arith``, or as :func:`~georecall.verify.checking.check.check_queries`.
    """
    if arith not in ARITHS:
        raise InputError(f"arith must be one of {ARITHS}, got {arith!r}")
    # exact: the float64 pass may overflow (its bounds are then infinite and the query is decided again
    # exactly), which is no warning to the user; a computation in another arith keeps NumPy's warnings
    quiet = np.errstate(over="ignore", invalid="ignore") if arith == "exact" else contextlib.nullcontext()
    if decode:
        run = _cast(model, np.dtype(np.float64 if arith == "exact" else arith))
        with quiet:
            result = check_decoding(run, tokens, answers, chunk=chunk, keep=keep, max_failures=max_failures,
                                    progress=progress, decoder=decoder, forward=forward, budget=budget,
                                    redecide=_Redecider(model, as_budget(budget)) if arith == "exact"
                                    else None)
        result.arith = arith
        return result
    kwargs: dict[str, Any] = dict(positions=positions, chunk=chunk, keep=keep, max_failures=max_failures,
                                  progress=progress, decoder=decoder, forward=forward, budget=budget)
    if integer:
        result = check_queries(model, tokens, answers, integer=True, **kwargs)
        result.arith = "exact"
        return result
    if arith != "exact":
        run = _cast(model, np.dtype(arith))
        result = check_queries(run, tokens, answers, **kwargs)
        result.arith = arith
        if run is not model and _rounds(model, np.dtype(arith)):
            result.fallback = "; ".join(r for r in (result.fallback, f"weights rounded to {arith} from their "
                                        "stored format: the bound is on that rounded model's margins") if r)
        return result
    wide = _cast(model, np.dtype(np.float64))
    redecider = _Redecider(model, as_budget(budget))
    with quiet:
        result = check_queries(wide, tokens, answers, redecide=redecider, tight=TIGHT, **kwargs)
    result.arith = "exact"
    return result


def exact_margins(model: Model, tokens: np.ndarray, answers: np.ndarray, *, position: int | None = None,
                  budget: Budget | None = None) -> Certified:
    """Predictions and margins of ``model``'s stored weights computed without rounding (step 2 of the module
    docstring), for a few queries.

    Parameters
    ----------
    model : Model
        The stored weights.
    tokens : numpy.ndarray
        ``(n, T)`` token ids.
    answers : numpy.ndarray
        ``(n,)`` expected output ids at ``position``.
    position : int, optional
        The read position (default: the last).
    budget : Budget or None
        Sizes the chunks.

    Returns
    -------
    Certified
        ``lo`` and ``hi`` the exact margin rounded outward to float64 (``lo = hi`` when it is a float64
        number), or the last enclosure of a query a softmax leaves undecided; ``margins`` the midpoint;
        ``predictions`` the exact argmax (the first among equal maxima), or the enclosure's best guess.
    """
    return _Redecider(model, as_budget(budget))(np.asarray(tokens, dtype=np.int64),
                                                 np.asarray(tokens).shape[1] - 1 if position is None
                                                 else position, np.asarray(answers, dtype=np.int64))


def exact_bytes(model: Model, T: int, budget: Budget | None = None) -> int:
    """Bytes the exact re-decision may take on ``model`` with sequences of T tokens: its weights as Python
    integers (the read-out in blocks of :data:`READOUT_ROWS` rows) and one chunk of queries.

    Parameters
    ----------
    model : Model
    T : int
        Positions per query.
    budget : Budget or None
        The budget whose chunk bytes size the exact pass's chunks.

    Returns
    -------
    int
    """
    arrays = model.arrays()
    weights = sum(int(a.size) for name, a in arrays.items()
                  if name not in ("unembedding", "entity_embedding"))
    read = min(model.n_out, READOUT_ROWS) * model.readout.columns.size
    return INT_BYTES * (weights + 2 * read) + as_budget(budget).chunk_bytes()


# --------------------------------------------------------------------------------------------- helpers


def _cast(model: Model, dtype: np.dtype) -> Model:
    """``model`` with every array in ``dtype`` (itself when all already are); an array whose finite values
    overflow ``dtype`` is refused as such (not as "non-finite entries" of the cast copy)."""
    if all(a.dtype == dtype for a in model.arrays().values()):
        return model
    for name, a in model.arrays().items():
        if a.dtype.itemsize > dtype.itemsize:
            with np.errstate(over="ignore"):
                overflows = not np.isfinite(a.astype(dtype)).all()
            if overflows:
                raise InputError(f"{name} holds values beyond {dtype}'s largest ({np.finfo(dtype).max:g}): a "
                                 f"computation in {dtype} (arith {dtype}) cannot hold these weights; arith "
                                 "exact gives the stored weights' own verdict")
    return model.astype(dtype)


def _rounds(model: Model, dtype: np.dtype) -> bool:
    """Whether casting ``model`` to ``dtype`` changes a value."""
    for a in model.arrays().values():
        if a.dtype != dtype and not np.array_equal(a.astype(dtype).astype(a.dtype), a):
            return True
    return False


# ------------------------------------------------------------------------- exact rational tensors


def _dyadic(array: np.ndarray) -> tuple[np.ndarray, int]:
    """``(ints, den)``: ``array == ints / den`` exactly, ``ints`` Python integers (object array), ``den`` a
    power of two (every finite float is ``m·2^e`` with an integer ``m``)."""
    a = np.asarray(array, dtype=np.float64)
    m, e = np.frexp(a)
    mant = (m * 2.0**53).astype(np.int64)  # |m| < 1: exact
    e = e.astype(np.int64) - 53
    nz = mant != 0
    if not nz.any():
        return np.zeros(a.shape, dtype=object), 1
    low = np.where(nz, mant & -mant, 1)  # the lowest set bit: strip the trailing zeros of each mantissa
    tz = np.round(np.log2(low.astype(np.float64))).astype(np.int64)
    mant = np.where(nz, mant >> tz, 0)
    e = np.where(nz, e + tz, 0)
    emin = int(e[nz].min())
    shift = np.where(nz, e - emin, 0).astype(object)
    ints = mant.astype(object) * (np.full(a.shape, 2, dtype=object) ** shift)
    if emin >= 0:
        return ints * (1 << emin), 1
    return ints, 1 << (-emin)


@dataclass
class _R:
    """A tensor of rational intervals ``[lo/den, hi/den]`` (``lo is hi`` when exact); ``den > 0``."""

    lo: np.ndarray
    hi: np.ndarray
    den: int

    @property
    def exact(self) -> bool:
        return self.lo is self.hi

    @staticmethod
    def of(array: np.ndarray) -> _R:
        ints, den = _dyadic(array)
        return _R(ints, ints, den)

    def scaled(self, den: int) -> _R:
        """The same values over the multiple ``den`` of ``self.den``."""
        if den == self.den:
            return self
        f = den // self.den
        lo = self.lo * f
        return _R(lo, lo if self.exact else self.hi * f, den)

    def __getitem__(self, index) -> _R:
        return self.map(lambda a: a[index])

    def map(self, f) -> _R:
        """``f`` (a reshaping or indexing) applied to both ends, keeping an exact tensor exact."""
        lo = f(self.lo)
        return _R(lo, lo if self.exact else f(self.hi), self.den)


def _plus(a: _R, b: _R) -> _R:
    den = math.lcm(a.den, b.den)
    a, b = a.scaled(den), b.scaled(den)
    lo = a.lo + b.lo
    return _R(lo, lo if a.exact and b.exact else a.hi + b.hi, den)


def _times(x: _R, W: tuple[np.ndarray, int]) -> _R:
    """``x @ W`` for an exact ``W = (ints, den)``; interval ``x``: the signs of W's entries pick the ends."""
    ints, den = W
    shape = x.lo.shape[:-1] + (ints.shape[-1],)

    def mm(a, b):
        return np.reshape(np.reshape(a, (-1, a.shape[-1])) @ b, shape) if a.shape[-1] else \
            np.zeros(shape, dtype=object)

    if x.exact:
        v = mm(x.lo, ints)
        return _R(v, v, x.den * den)
    pos = np.where(ints > 0, ints, 0)
    neg = np.where(ints < 0, ints, 0)
    return _R(mm(x.lo, pos) + mm(x.hi, neg), mm(x.hi, pos) + mm(x.lo, neg), x.den * den)


def _relu(x: _R) -> _R:
    lo = np.maximum(x.lo, 0)
    return _R(lo, lo if x.exact else np.maximum(x.hi, 0), x.den)


def _weights(x: _R, ints: np.ndarray, den: int) -> _R:
    """Multiply by exact nonnegative factors ``ints / den`` (broadcast)."""
    lo = x.lo * ints
    return _R(lo, lo if x.exact else x.hi * ints, x.den * den)


def _interval_product_sum(a: _R, b: _R) -> _R:
    """``Σ_last a·b`` elementwise-then-summed over the last axis, for interval ``a`` and ``b`` (broadcast)."""
    if a.exact and b.exact:
        v = (a.lo * b.lo).sum(axis=-1)
        return _R(v, v, a.den * b.den)
    p = [a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi]
    lo = np.minimum(np.minimum(p[0], p[1]), np.minimum(p[2], p[3])).sum(axis=-1)
    hi = np.maximum(np.maximum(p[0], p[1]), np.maximum(p[2], p[3])).sum(axis=-1)
    return _R(lo, hi, a.den * b.den)


class _NeedsPrecision(Exception):
    """The enclosure at this precision cannot fix a discrete choice (hard attention's maximal set)."""


class _Redecider:
    """THE forward pass in exact rational arithmetic (softmax: interval enclosures), on a few queries."""

    def __init__(self, model: Model, budget: Budget) -> None:
        self.model, self.budget = model, budget
        self.softmax = any(layer.attention is not None and layer.attention.kind == "softmax"
                           for layer in model.layers)
        self._layers: list | None = None
        self.count = 0

    def layers(self) -> list:
        """Every layer's weights as exact ``(ints, den)``, converted once (on first use)."""
        if self._layers is None:
            out = []
            for layer in self.model.layers:
                att, mlp = layer.attention, layer.mlp
                a = None
                if att is not None:
                    a = {"kind": att.kind, "heads": att.heads,
                         "V": [_dyadic(att.W_V[h]) for h in range(att.heads)],
                         "O": [_dyadic(att.W_O[h]) for h in range(att.heads)],
                         "beta": Fraction(float(att.inverse_temperature))}
                    if att.kind != "uniform":
                        assert att.W_Q is not None and att.W_K is not None  # checked by Attention
                        a["Q"] = [_dyadic(att.W_Q[h]) for h in range(att.heads)]
                        a["K"] = [_dyadic(att.W_K[h]) for h in range(att.heads)]
                m = None if mlp is None else {"W1": _dyadic(mlp.W1), "b1": _R.of(mlp.b1),
                                              "W2": _dyadic(mlp.W2), "b2": _R.of(mlp.b2)}
                out.append((a, m))
            self._layers = out
        return self._layers

    def __call__(self, tokens: np.ndarray, position: int, answers: np.ndarray) -> Certified:
        n = tokens.shape[0]
        self.count += n
        preds = np.empty(n, dtype=np.int64)
        lo, hi, mid = np.empty(n), np.empty(n), np.empty(n)
        positive = np.zeros(n, dtype=bool)  # the exact sign, also where lo rounds to 0 (below subnormals)
        width = max(1, self.model.d, self.model.mlp_width, min(self.model.n_out, READOUT_ROWS))
        per_query = INT_BYTES * 4 * width * max(1, tokens.shape[1]) ** 2
        step = max(1, self.budget.chunk_bytes() // per_query)
        for start in range(0, n, step):
            part = slice(start, min(n, start + step))
            todo = np.arange(part.start, part.stop)
            precisions = PRECISIONS if self.softmax else (0,)
            for prec in precisions:
                try:
                    p, lq, hq = self._margins(tokens[todo], position, answers[todo], prec)
                except _NeedsPrecision:
                    if prec != precisions[-1]:
                        continue
                    p = np.zeros(todo.size, dtype=np.int64)
                    lq, hq = [Fraction(-1)] * todo.size, [Fraction(1)] * todo.size
                for j, q in enumerate(todo):
                    preds[q] = answers[q] if lq[j] > 0 else p[j]  # a positive margin: the answer is argmax
                    lo[q], hi[q] = _down(lq[j]), _upward(hq[j])
                    positive[q] = lq[j] > 0
                    mid[q] = (float((lq[j] + hq[j]) / 2) if math.isfinite(lo[q]) and math.isfinite(hi[q])
                              else lo[q] if math.isfinite(lo[q]) else hi[q])
                decided = np.array([not (lq[j] <= 0 < hq[j]) for j in range(todo.size)], dtype=bool)
                todo = todo[~decided]
                if not todo.size:
                    break
        return Certified(preds, mid, lo, hi, positive)

    def chains(self, prompts: np.ndarray, chains: np.ndarray):
        """Greedy decoding of each chain in exact arithmetic: step t reads the margin of the true ``v_t``;
        a step decided right feeds ``v_t`` back (it is then the argmax), the first step that is not ends the
        chain. Returns the last step's predictions, each chain's margin interval (its first open or wrong
        step's, else the smallest over its steps), every step's interval (``−inf`` after the end), and whether
        each step is right (its exact margin > 0, also where its lower end rounds to 0; False after the end):
        a chain is right when all its steps are."""
        n, k = chains.shape
        step_lo, step_hi = np.full((n, k), -np.inf), np.full((n, k), -np.inf)
        step_right = np.zeros((n, k), dtype=bool)
        predictions = np.zeros(n, dtype=np.int64)
        seq = np.asarray(prompts, dtype=np.int64)
        alive = np.arange(n)
        for t in range(k):
            if not alive.size:
                break
            cert = self(seq[alive], seq.shape[1] - 1, chains[alive, t])
            step_lo[alive, t], step_hi[alive, t] = cert.lo, cert.hi
            predictions[alive] = cert.predictions
            seq = np.concatenate([seq, chains[:, t : t + 1]], axis=1)
            right = cert.lo > 0 if cert.positive is None else cert.positive
            step_right[alive, t] = right
            alive = alive[right]
        done = np.isin(np.arange(n), alive)
        first = (~step_right).argmax(axis=1)
        rows = np.arange(n)
        lo = np.where(done, step_lo.min(axis=1), step_lo[rows, first])
        hi = np.where(done, step_hi.min(axis=1), step_hi[rows, first])
        return predictions, lo, hi, step_lo, step_hi, step_right

    # --- the pass

    def _embed(self, tokens: np.ndarray) -> _R:
        model = self.model
        N = model.n_entities
        rows = np.empty(tokens.shape + (model.d,), dtype=np.float64)
        entity = tokens < N
        rows[entity] = model.entity_embedding[tokens[entity]]
        rows[~entity] = model.relation_embedding[tokens[~entity] - N]
        x = _R.of(rows)
        if model.position_embedding is not None:
            x = _plus(x, _R.of(model.position_embedding[: tokens.shape[1]])[None])
        return x

    def _margins(self, tokens: np.ndarray, position: int, answers: np.ndarray, prec: int):
        x = self._embed(tokens)
        for att, mlp in self.layers():
            y = x if att is None else _plus(x, self._attention(att, x, prec))
            if mlp is not None:
                h = _relu(_plus(_times(y, mlp["W1"]), mlp["b1"]))
                x = _plus(_plus(y, _times(h, mlp["W2"])), mlp["b2"])
            else:
                x = y
        return self._readout(x[:, position], answers)

    def _attention(self, att: dict, x: _R, prec: int) -> _R:
        B, T, _ = x.lo.shape
        total: _R | None = None
        if att["kind"] == "uniform":
            sums = x.lo.cumsum(axis=1)
            mixed = _R(sums, sums if x.exact else x.hi.cumsum(axis=1), x.den)
            L = math.lcm(*range(1, T + 1))
            factors = np.array([L // (t + 1) for t in range(T)], dtype=object)[None, :, None]
            mixed = _weights(mixed, factors, L)
            for h in range(att["heads"]):
                term = _times(_times(mixed, att["V"][h]), att["O"][h])
                total = term if total is None else _plus(total, term)
            assert total is not None
            return total
        for h in range(att["heads"]):
            q, k = _times(x, att["Q"][h]), _times(x, att["K"][h])
            dots = _interval_product_sum(q.map(lambda a: a[:, :, None, :]),
                                         k.map(lambda a: a[:, None, :, :]))  # (B, T, T)
            beta = att["beta"]
            scores = _weights(dots, np.array(beta.numerator, dtype=object), beta.denominator)
            a = (self._softmax(scores, prec) if att["kind"] == "softmax" else self._hard(scores))
            # Σ_u a(t, u)·x_u: the products (B, T, d, u) summed over u
            mix = _interval_product_sum(a.map(lambda w: w[:, :, None, :]),
                                        x.map(lambda v: v.swapaxes(1, 2)[:, None]))
            term = _times(_times(mix, att["V"][h]), att["O"][h])
            total = term if total is None else _plus(total, term)
        assert total is not None
        return total

    @staticmethod
    def _hard(scores: _R) -> _R:
        """Uniform weights over the maximal causal scores (the maximal set must be certain)."""
        B, T, _ = scores.lo.shape
        L = math.lcm(*range(1, T + 1))
        w = np.zeros((B, T, T), dtype=object)
        for b in range(B):
            for t in range(T):
                lo = [scores.lo[b, t, u] for u in range(t + 1)]
                hi = [scores.hi[b, t, u] for u in range(t + 1)]
                floor = max(lo)
                maybe = [u for u in range(t + 1) if hi[u] >= floor]
                if not scores.exact and len(maybe) > 1:
                    raise _NeedsPrecision
                top = [u for u in maybe if lo[u] == floor] if scores.exact else maybe
                for u in top:
                    w[b, t, u] = L // len(top)
        return _R(w, w, L)

    @staticmethod
    def _softmax(scores: _R, prec: int) -> _R:
        """Rigorous enclosures of the causal softmax weights at ``prec`` bits, on the grid ``2^-prec``:
        ``w_u = 1 / (1 + Σ_{v≠u} exp(s_v − s_u))`` is decreasing in every ``s_v − s_u``."""
        from mpmath.ctx_iv import MPIntervalContext

        iv = MPIntervalContext()  # a context of our own: no global precision is changed
        iv.prec = prec + 32

        B, T, _ = scores.lo.shape
        lo = np.zeros((B, T, T), dtype=object)
        hi = np.zeros((B, T, T), dtype=object)
        G = prec
        den = scores.den
        one, zero = iv.mpf(1), iv.mpf(0)
        for b in range(B):
            for t in range(T):
                sl = [scores.lo[b, t, u] for u in range(t + 1)]
                sh = [scores.hi[b, t, u] for u in range(t + 1)]
                for u in range(t + 1):
                    s_max = zero  # Σ exp(sh_v − sl_u) (upper) and Σ exp(sl_v − sh_u) (lower)
                    s_min = zero
                    for v in range(t + 1):
                        if v == u:
                            continue
                        s_max += iv.exp(iv.mpf(sh[v] - sl[u]) / den)
                        s_min += iv.exp(iv.mpf(sl[v] - sh[u]) / den)
                    w_lo = one / (one + s_max)
                    w_hi = one / (one + s_min)
                    lo[b, t, u] = _scaled(w_lo._mpi_[0], G, ceil=False)
                    hi[b, t, u] = _scaled(w_hi._mpi_[1], G, ceil=True)
        return _R(lo, hi, 1 << G)

    def _readout(self, x: _R, answers: np.ndarray):
        """Exact argmax and margin interval per query from the last residual (read-out in row blocks).

        Exact ``x``: the margin is ``L_a − max_{j≠a} L_j`` of the exact logits. An enclosure ``x``: each
        ``L_a − L_j = x·(U_a − U_j)`` is enclosed directly (the difference of the rows is exact), so that
        equal rows give an exact 0 and the enclosure does not lose the correlation of the two logits."""
        model = self.model
        readout = model.readout
        v = x[:, readout.columns] if not readout.full else x
        n = answers.size
        lo_m: list = [None] * n  # min over j ≠ a of the margin's lower / upper ends
        hi_m: list = [None] * n
        top: list = [None] * n  # (lower end, index) of the first maximal logit: the exact argmax if exact
        a_exact: list = [None] * n
        rows_a = None
        if not v.exact:
            rows_a = [_dyadic(readout.matrix[a]) for a in answers.tolist()]
        for start in range(0, model.n_out, READOUT_ROWS):
            rows = np.arange(start, min(model.n_out, start + READOUT_ROWS))
            ints, d_U = _dyadic(readout.matrix[rows])
            L = _times(v, (ints.T, d_U))
            for q in range(n):
                lo_q = L.lo[q]
                j = int(np.argmax(lo_q))
                if top[q] is None or Fraction(lo_q[j], L.den) > top[q][0]:
                    top[q] = (Fraction(lo_q[j], L.den), start + j)
                a = int(answers[q]) - start
                inside = 0 <= a < rows.size
                if v.exact:
                    if inside:
                        a_exact[q] = Fraction(lo_q[a], L.den)
                    others = np.delete(lo_q, a) if inside else lo_q
                    if len(others):
                        best = Fraction(max(others), L.den)
                        lo_m[q] = best if lo_m[q] is None else max(lo_m[q], best)  # (max other logit)
                    continue
                assert rows_a is not None
                ia, da = rows_a[q]
                den = math.lcm(da, d_U)
                diff = ia[None, :] * (den // da) - ints * (den // d_U)  # (rows, D): U_a − U_j exactly
                if inside:
                    diff = np.delete(diff, a, axis=0)
                if not diff.shape[0]:
                    continue
                m = _times(v[q : q + 1], (diff.T, den))
                lo_b, hi_b = Fraction(min(m.lo[0]), m.den), Fraction(min(m.hi[0]), m.den)
                lo_m[q] = lo_b if lo_m[q] is None else min(lo_m[q], lo_b)
                hi_m[q] = hi_b if hi_m[q] is None else min(hi_m[q], hi_b)
        predictions = np.array([t[1] for t in top], dtype=np.int64)
        out_lo, out_hi = [], []
        huge = Fraction(10**400)  # one output: nothing to beat (+inf once rounded)
        for q in range(n):
            if lo_m[q] is None:
                out_lo.append(huge)
                out_hi.append(huge)
            elif v.exact:
                out_lo.append(a_exact[q] - lo_m[q])
                out_hi.append(a_exact[q] - lo_m[q])
            else:
                out_lo.append(lo_m[q])
                out_hi.append(hi_m[q])
        return predictions, out_lo, out_hi


def _scaled(mpf_tuple, G: int, ceil: bool) -> int:
    """``floor`` (or ``ceil``) of ``value·2^G`` for an mpf given as its raw ``(sign, man, exp, bc)``."""
    sign, man, exp, _ = mpf_tuple
    man = -man if sign else man
    k = exp + G
    if k >= 0:
        return man << k
    return -((-man) >> (-k)) if ceil else man >> (-k)


def _down(q: Fraction) -> float:
    """The largest float64 <= q (−inf below the range; the largest float64 above it)."""
    try:
        f = float(q)
    except OverflowError:
        return _LARGEST if q > 0 else -np.inf
    if Fraction(f) > q if math.isfinite(f) else f > 0:
        f = float(np.nextafter(f, -np.inf))
    return f


def _upward(q: Fraction) -> float:
    """The smallest float64 >= q (+inf above the range; minus the largest float64 below it)."""
    try:
        f = float(q)
    except OverflowError:
        return np.inf if q > 0 else -_LARGEST
    if Fraction(f) < q if math.isfinite(f) else f < 0:
        f = float(np.nextafter(f, np.inf))
    return f
