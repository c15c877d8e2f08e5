"""The error-bound arithmetic of THE forward pass (``constructions.forward.forward``): how one pass computes
and what it proves about what it computed.

Integer mode: :func:`integer_bounds` bounds every intermediate a-priori below ``EXACT_INTEGER_LIMIT`` (2^53),
so the float64 pass is exact integer arithmetic (docs/theory.md, "Integer mode"). Float mode with
``errors=True``: :class:`_Rounding` carries the standard forward-error bound beside every array, in the unit
roundoff and underflow bound of :func:`working_format` (docs/theory.md, "Sound float mode"). The underscore
names (``Tracked``, ``Arithmetic``, ``pass_arithmetic``, ``_Rounding``, ``cast_error``, ``require_integral``)
are the forward pass's internals, shared with ``constructions.forward`` only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from georecall.constructions.array_scans import abs_max, is_integral
from georecall.constructions.model import Model
from georecall.constructions.rounding import absmm, format_of, gamma, up
from georecall.errors import InputError

__all__ = [
    "EXACT_INTEGER_LIMIT",
    "Arithmetic",
    "IntegerModeError",
    "Tracked",
    "cast_error",
    "integer_bounds",
    "logit_bound",
    "matmul_rows",
    "pass_arithmetic",
    "require_integral",
    "working_format",
]


EXACT_INTEGER_LIMIT = 2.0**53


class IntegerModeError(InputError, ArithmeticError):
    """Integer mode could not prove that the forward pass computed in exact integer arithmetic: the model
    is not integer-scaled (bad input for integer mode: exit 2; float mode checks it)."""


def require_integral(name: str, array: np.ndarray) -> None:
    """Refuse a non-integral array in integer mode.

    Parameters
    ----------
    name : str
        What the array is, for the message.
    array : numpy.ndarray

    Raises
    ------
    IntegerModeError
        When an entry of ``array`` is not an integer.
    """
    if not is_integral(array):
        raise IntegerModeError(f"integer mode: {name} is not integral")


def _col(W: np.ndarray) -> float:
    """The largest column absolute sum of ``W`` (per head when 3-d): the ∞→∞ norm of ``x -> x @ W``."""
    return float(np.abs(W).sum(axis=-2).max(initial=0.0))


def logit_bound(model: Model) -> float:
    """An a-priori bound on ``max |logit|`` over every query, from the stored weights alone.

    Stage by stage, ``|x @ W|_∞ <= |x|_∞ · max_j Σ_i |W_ij|``: the embeddings' largest entries, then each
    attention layer adds at most ``|x|_∞ · Σ_h col(W_V[h])·col(W_O[h])`` (every kind averages its values:
    uniform, softmax and hard weights are convex), each MLP ``|x|_∞·col(W1) + |b1|_∞`` through ``col(W2)``
    plus ``|b2|_∞``, and the read-out ``col(Uᵀ)``. It is the magnitude of the numbers whose difference a
    margin is: float mode's allowance for comparing a margin with a promise is relative to it
    (``verify.checking.report.margin_reaches``), never to a number a construction declares.

    Parameters
    ----------
    model : Model
        The weights.

    Returns
    -------
    float
        The bound (``inf`` when it overflows).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        bound = max(abs_max(model.entity_embedding), abs_max(model.relation_embedding))
        if model.position_embedding is not None:
            bound += abs_max(model.position_embedding)
        for layer in model.layers:
            att = layer.attention
            if att is not None:
                bound += bound * sum(_col(att.W_V[h]) * _col(att.W_O[h]) for h in range(att.heads))
            if layer.mlp is not None:
                mlp = layer.mlp
                hidden = bound * _col(mlp.W1) + abs_max(mlp.b1)
                bound += hidden * _col(mlp.W2) + abs_max(mlp.b2)
        value = bound * _col(model.unembedding.T)
    return float(value) if np.isfinite(value) else float("inf")


def integer_bounds(model: Model, T: int) -> dict[str, float]:
    """A-priori bounds on ``max |·|`` of every intermediate of a length-T forward pass; each must be < 2^53.

    The pass computes in float64 whatever the storage dtype (float32 weights are cast, exactly; no product is
    formed in float32), so the limit is 2^53 for every dtype. Bounds every product the pass forms: the heads'
    ``W_V·W_O`` (formed once), then ``|x @ W|_∞ <= |x|_∞ · max_j Σ_i |W_ij|`` stage by stage; the last entry
    bounds the margins (a difference of two logits, so twice the logits' bound), which are then exact integers
    too (docs/theory.md, "Integer mode").

    Parameters
    ----------
    model : Model
        The weights (every one must be an integer).
    T : int
        The sequence length.

    Returns
    -------
    dict of str to float
        The bound of every stage, by name.

    Raises
    ------
    IntegerModeError
        Naming the first weight that is not an integer, an attention that is not uniform, or the first stage
        whose bound reaches 2^53.
    """
    for name, array in model.arrays().items():
        if not is_integral(array):
            raise IntegerModeError(f"integer mode: weight {name} is not integral")
    tables = [model.entity_embedding, model.relation_embedding]
    bound = max(abs_max(t) for t in tables)
    if model.position_embedding is not None:
        bound += abs_max(model.position_embedding)
    bounds = {"embedding": bound}
    col = _col

    for i, layer in enumerate(model.layers):
        att = layer.attention
        if att is not None:
            if att.kind != "uniform":
                raise IntegerModeError(
                    f"integer mode supports uniform attention only (layer {i} is {att.kind})"
                )
            # W_V·W_O itself (formed once, in float64 from the cast weights): every partial sum of entry
            # (j, k) is at most Σ_l |W_V_jl|·|W_O_lk|
            bounds[f"layers.{i}.attention W_V·W_O"] = att.value_output_partial_sum_max()
            # (Σ_u x_u) @ W_V @ W_O before the division by the count: at most T·|x|.
            pre = T * bound * sum(col(att.W_V[h]) * col(att.W_O[h]) for h in range(att.heads))
            bounds[f"layers.{i}.attention (before division)"] = pre
            bound = bound + pre
            bounds[f"layers.{i}.after_attention"] = bound
        if layer.mlp is not None:
            mlp = layer.mlp
            hidden = bound * col(mlp.W1) + float(np.abs(mlp.b1).max(initial=0.0))
            bounds[f"layers.{i}.hidden"] = hidden
            bound = bound + hidden * col(mlp.W2) + float(np.abs(mlp.b2).max(initial=0.0))
            bounds[f"layers.{i}.after_mlp"] = bound
    bounds["logits"] = bound * col(model.unembedding.T)
    # A margin is the difference of two logits: bounding it too keeps every reported margin an exact integer.
    bounds["margins (differences of two logits)"] = 2 * bounds["logits"]
    for name, value in bounds.items():
        if not value < EXACT_INTEGER_LIMIT:
            raise IntegerModeError(f"integer mode: bound on {name} is {value:.3g} >= 2^53")
    return bounds


@dataclass(frozen=True)
class Tracked:
    """An array computed by the pass and, in float mode with ``errors=True``, a float64 bound on its
    distance from the same quantity in exact real arithmetic (``None`` when not tracked)."""

    value: np.ndarray
    error: np.ndarray | None = None

    def __getitem__(self, index) -> Tracked:
        return Tracked(self.value[index], None if self.error is None else self.error[index])


class Arithmetic:
    """How one pass computes: its working dtype, integer mode, and (float mode with ``errors=True``) the
    rounding bookkeeping (:class:`_Rounding`) that carries a bound beside every array.

    Each operation computes the value exactly as the plain formula says (``a + b``, ``a @ W``, ``ReLU``) and,
    when tracking, the standard bound on the rounding of the value it just computed, given the inputs'
    bounds."""

    def __init__(self, dtype: np.dtype, integer: bool, rounding: _Rounding | None) -> None:
        self.dtype, self.integer, self.rounding = dtype, integer, rounding

    def plus(self, a: Tracked, b: Tracked | None) -> Tracked:
        """``a + b`` (a new array; ``a`` itself when ``b`` is absent: a missing sublayer adds nothing).

        Parameters
        ----------
        a : Tracked
            The left term.
        b : Tracked or None
            The right term, or None.

        Returns
        -------
        Tracked
            The sum, with the bound on its rounding when tracking.
        """
        if b is None:
            return a
        value = a.value + b.value
        return Tracked(value, None if self.rounding is None else self.rounding.add(value, a.error, b.error))

    def plus_bias(self, a: Tracked, bias: np.ndarray) -> Tracked:
        """``a + bias``, in place: ``a`` is a fresh array (the result of :meth:`plus` or :meth:`times`).

        Parameters
        ----------
        a : Tracked
            The array, overwritten with the sum.
        bias : numpy.ndarray
            Added to every row (broadcast).

        Returns
        -------
        Tracked
            The sum (``a``'s array), with the bound on its rounding when tracking.
        """
        np.add(a.value, bias, out=a.value)
        return Tracked(a.value, None if self.rounding is None else self.rounding.add(a.value, a.error))

    def times(self, a: Tracked, W: np.ndarray) -> Tracked:
        """``a @ W`` (:func:`matmul_rows`: one matrix product over every leading dimension).

        Parameters
        ----------
        a : Tracked
            The left factor, ``(..., n)``.
        W : numpy.ndarray
            The weight, ``(n, k)``.

        Returns
        -------
        Tracked
            The product ``(..., k)``, with the bound on its rounding when tracking.
        """
        value = matmul_rows(a.value, W)
        return Tracked(value, None if self.rounding is None else self.rounding.product(a.value, a.error, W))

    def relu(self, a: Tracked) -> Tracked:
        """``ReLU(a)``, in place. ReLU is 1-Lipschitz, so the bound carries over, except that a unit computed
        <= 0 whose exact value may be positive by at most (computed + bound) keeps only that much of it:
        ``min(e, max(0, â + e))``, which is ``e`` where ``â > 0`` (the sum rounded up).

        Parameters
        ----------
        a : Tracked
            The pre-activations, overwritten with their ReLU.

        Returns
        -------
        Tracked
            The activations (``a``'s array), with their bound when tracking.
        """
        error = a.error
        if self.rounding is not None:
            assert error is not None
            room = a.value.astype(np.float64)
            room += error
            np.maximum(room, 0.0, out=room)
            room *= 1.0 + 2.0**-51
            error = np.minimum(room, error, out=room)
        np.maximum(a.value, 0, out=a.value)
        return Tracked(a.value, error)


def pass_arithmetic(model: Model, *, integer: bool, errors: bool) -> Arithmetic:
    """The pass's arithmetic. The working dtype is float64 in integer mode (casting integer weights of any
    float dtype to float64 is exact, so every product is formed in float64, where :func:`integer_bounds`
    proves it exact) and the entity table's dtype otherwise (products with a wider weight array promote,
    as NumPy does). With ``errors`` in float mode, the rounding bookkeeping uses the unit roundoff ``u`` and
    the underflow bound of the least precise format in play. When the model mixes formats, an operation may
    round twice (in the wider format, then when stored in the narrower one: ``|fl_c(fl_f(s)) − s| <= (u_c +
    u_f + u_c·u_f)·|result|``), so ``u`` is then ``u_c + 2·u_f``.

    Parameters
    ----------
    model : Model
    integer : bool
        Integer mode.
    errors : bool
        Whether float mode tracks a rounding bound beside every array.
    """
    dtype = np.dtype(np.float64) if integer else model.entity_embedding.dtype
    rounding = _Rounding(*working_format(model)) if errors and not integer else None
    return Arithmetic(dtype, integer, rounding)


def working_format(model: Model) -> tuple[float, float]:
    """``(u, η)`` that THE forward pass's float-mode bounds use on ``model`` (:func:`forward` with
    ``errors=True``): the unit roundoff and underflow bound of the least precise format among the working
    dtype (the entity table's) and every stored array's, with ``u = u_c + 2·u_f`` when the formats differ
    (an operation may round in the wider format, then again when stored in the narrower).

    Parameters
    ----------
    model : Model

    Returns
    -------
    (float, float)
        ``(u, η)``.
    """
    dtypes = {model.entity_embedding.dtype, *(a.dtype for a in model.arrays().values())}
    u, eta = format_of(*dtypes)
    if len(dtypes) > 1:  # a double rounding: coarse after fine
        u += 2 * min(float(np.finfo(t).eps) / 2 for t in dtypes)
    return u, eta


def cast_error(stored: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """``|stored − stored.astype(dtype)|`` entrywise (float64, rounded up), or None when every value of
    ``stored``'s dtype is exact in ``dtype`` (a safe cast).

    Parameters
    ----------
    stored : numpy.ndarray
        An array as the model stores it.
    dtype : numpy.dtype
        The working dtype it is cast to.
    """
    if np.can_cast(stored.dtype, dtype, casting="safe"):
        return None
    wide = stored.astype(np.float64)
    return up(np.abs(wide - stored.astype(dtype).astype(np.float64)), 1)


def matmul_rows(x: np.ndarray, W: np.ndarray) -> np.ndarray:
    """``x @ W`` for ``x`` of shape ``(..., a)`` and a 2-D ``W``, as ONE matrix product over all leading
    dimensions: the same dot products as ``x @ W`` (NumPy runs ``(B, T, a) @ (a, b)`` as B separate small
    products, several times slower).

    Parameters
    ----------
    x : numpy.ndarray
        ``(..., a)``.
    W : numpy.ndarray
        ``(a, b)``.

    Returns
    -------
    numpy.ndarray
        ``(..., b)``, in NumPy's result dtype of ``x`` and ``W``.
    """
    out = np.reshape(x, (int(np.prod(x.shape[:-1])), x.shape[-1])) @ W
    return out.reshape(x.shape[:-1] + (W.shape[1],))


class _Rounding:
    """Running rounding-error bookkeeping of one forward pass in float mode (docs/theory.md, "Sound float
    mode"): ``u``, ``η`` of the least precise format in play and the standard bounds."""

    def __init__(self, u: float, eta: float) -> None:
        self.u, self.eta = u, eta

    def add(self, value: np.ndarray, *errors: np.ndarray | None) -> np.ndarray:
        """Error of ``value = fl(a + b)`` given the errors of a and b: ``e_a + e_b + u·|value|``. (A
        non-finite value or bound stays non-finite through every later step; the decoders then certify
        nothing for it.)"""
        total = np.absolute(value, dtype=np.float64)
        total *= self.u
        for e in errors:
            if e is not None:
                total += e
        return up(total, len(errors) + 1, out=total)

    def product(self, x: np.ndarray, e_x: np.ndarray | None, W: np.ndarray, abs_W: np.ndarray | None = None,
                e_W: np.ndarray | None = None) -> np.ndarray:
        """Error of ``fl(x̂ @ Ŵ)`` against ``x @ W`` (exact), with ``|x̂ − x| <= e_x`` and ``|Ŵ − W| <= e_W``:
        ``γ_n·|x̂|·|Ŵ| + e_x·|Ŵ| + (|x̂| + e_x)·e_W + n·η`` (any summation order; 0 for n = 0)."""
        n = x.shape[-1]
        if n == 0:
            return np.zeros(x.shape[:-1] + (W.shape[-1],))
        ax = np.absolute(x, dtype=np.float64)
        aW = np.absolute(W, dtype=np.float64) if abs_W is None else abs_W
        with np.errstate(invalid="ignore", over="ignore"):
            left = ax * gamma(n, self.u)
            if e_x is not None:
                left += e_x
            out = absmm(left, aW, extra=2)
            out += n * self.eta
            if e_W is not None:
                if e_x is not None:
                    ax += e_x
                out += absmm(ax, e_W, extra=2)
        return out

    def score(self, q: Tracked, k: Tracked, dots: np.ndarray, scores: np.ndarray, causal: np.ndarray,
              beta: float) -> np.ndarray:
        """Error of the scores ``fl(fl(β)·fl(q·k))`` given the bounds of ``q`` and ``k``: the dot product's
        (length d_k, both factors inexact), β's own rounding to the working dtype, the product's."""
        assert q.error is not None and k.error is not None
        aq, ak = np.abs(q.value.astype(np.float64)), np.abs(k.value.astype(np.float64))
        e_q, e_k = q.error, k.error
        d_k = q.value.shape[-1]
        kt = ak.transpose(0, 2, 1)
        e_dot = up(gamma(d_k, self.u) * (aq @ kt) + e_q @ kt + aq @ e_k.transpose(0, 2, 1)
                   + e_q @ e_k.transpose(0, 2, 1) + d_k * self.eta, d_k + 4)
        beta = abs(float(beta))
        return up(beta * (1 + self.u) * e_dot + self.u * beta * np.abs(dots.astype(np.float64))
                  + self.u * np.abs(np.where(causal, scores, 0.0).astype(np.float64)) + self.eta, 6)
