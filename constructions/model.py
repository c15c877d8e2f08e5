"""The one Model: its data (docs/theory.md, "Model").

Every weight source in georecall (hand-built constructions, the trainer, transplanted weights) produces a
:class:`Model`; this module holds the model's data (:class:`Attention`, :class:`MLP`, :class:`Layer`,
:class:`Model`), its flat arrays (:func:`flatten`, :func:`structure_of`, :func:`unflatten`) and the fields
THE forward pass reads (:data:`FORWARD_FIELDS`). The rest lives beside it, one concept per module:
``constructions.arithmetic`` (the error-bound arithmetic, integer mode), ``constructions.forward`` (THE
forward pass, which defines what a model computes: its body is the model's equations in order, and each
speed trick is a named helper whose docstring says why it equals the plain formula),
``constructions.decoding`` (chunked predictions, greedy decoding) and ``constructions.storage`` (saving and
loading).

Alternative evaluation paths. Four faster paths compute (parts of) the same function where a structure
allows it, each checked against THE forward pass by the tests (docs/theory.md, "Evaluation paths"): the
token-additive tables forward (``verify/checking/additive.py``; ``tests/test_additive.py``), the hypercube
decoder (``verify/checking/decoders.py``; ``tests/test_decoders.py``), the trainer's structure-aware step
(``src/georecall/training/train_structured.py``; ``tests/test_train_structured.py``) and certify's product-set
evaluation (``verify/checking/certify.py``; the brute-force tests of ``tests/test_certify.py``);
``tests/test_soundness.py`` compares every path's verdicts with exact rational arithmetic. THE forward pass
itself is tested against an exact reference and its captured outputs (``tests/test_forward_reference.py``).

Conventions
-----------
Row vectors: a residual state is a row ``x ∈ R^d`` and a linear map is ``x @ W``.

Vocabulary of input tokens: entity ``s`` is token ``s`` (``0 <= s < N``), relation ``r`` is token ``N + r``.
The input embedding table is ``[E; Q]`` (entities then relations), plus ``P[t]`` at position ``t`` when the
model has position embeddings.

A layer is ``x <- x + Attn(x)`` then ``x <- x + ReLU(x @ W1 + b1) @ W2 + b2`` (either part may be absent).
Logits are ``x @ U.T`` with the untied unembedding ``U`` of shape ``(n_out, d)``; the prediction is the
argmax. A read-out that reads only some residual coordinates may be stored *compactly*: ``readout_columns``
(increasing, fewer than d) and ``U`` of shape ``(n_out, len(readout_columns))``, the nonzero columns of the
dense ``(n_out, d)`` read-out, which is the model's meaning in either storage (G1 at N = 2^20 reads D = 20 of
d = 356 coordinates: 0.16 GiB instead of 2.8).

Attention kinds (all causal):

- ``uniform``: the mean over positions ``u <= t`` of ``x_u @ W_V[h] @ W_O[h]``, summed over heads. It is
  computed as ``((Σ_u x_u) @ W_V @ W_O) / count`` so that with integer weights the only non-integer step is
  one exact division (checked in integer mode).
- ``softmax``: ``softmax_u(β · <x_t W_Q[h], x_u W_K[h]>)`` with an explicit inverse temperature ``β``.
- ``hard``: an **idealization**, the β → ∞ limit of softmax: the mean over the positions with maximal score.

Integer mode (``integer=True``) runs the same pass in float64 and proves that it computed in exact integer
arithmetic: every weight is an integer, an a-priori bound on every intermediate stays below 2^53 (so BLAS sums
of integers are exact in any order), and every attention output is checked to be integral after its division.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Literal

import numpy as np

from georecall.constructions.rounding import U64, absmm, gamma, up
from georecall.errors import InputError

__all__ = [
    "ATTENTION_KINDS",
    "Attention",
    "FORWARD_FIELDS",
    "Layer",
    "MLP",
    "Model",
    "NOT_READ_BY_FORWARD",
    "Readout",
    "flatten",
    "forward_arrays",
    "forward_fields",
    "forward_fingerprint",
    "freeze_if_new",
    "nonzero_columns",
    "structure_of",
    "unflatten",
]

AttentionKind = Literal["uniform", "softmax", "hard"]
ATTENTION_KINDS: tuple[str, ...] = ("uniform", "softmax", "hard")


def _read_only_throughout(array: np.ndarray) -> bool:
    """Whether no array in ``array``'s chain of bases is writable (a read-only view of a writable array is
    not: its owner could still change it)."""
    current: object = array
    while isinstance(current, np.ndarray):
        if type(current) is not np.ndarray or current.flags.writeable:  # a subclass may override anything
            return False
        current = current.base
    return True


def freeze_if_new(array: np.ndarray, source: np.ndarray) -> np.ndarray:
    """``array`` made read-only when it is a new array (not ``source`` itself, and owning its data), so that a
    Model takes it without a second copy.

    Parameters
    ----------
    array : numpy.ndarray
        The result of an operation on ``source`` (e.g. ``source.astype(dtype, copy=False)``).
    source : numpy.ndarray
        The array it came from (never frozen here).

    Returns
    -------
    numpy.ndarray
        ``array``.
    """
    if array is not source and array.base is None:
        array.setflags(write=False)
    return array


def _frozen_array(value, name: str, ndim: int) -> np.ndarray:
    """A read-only floating-point array for a Model. An array that is read-only throughout (itself and every
    array it is a view of), floating-point and C-contiguous is taken as it is (builders freeze their large
    tables, so a model of N = 2^20 entities is not copied); anything else is copied, so that no caller can
    change a Model's weights afterwards. Finiteness is checked in row blocks (no full-size temporary).

    Nothing is rounded on the way in: integers are taken as float64 only when every one is exact there
    (|value| <= 2^53), a float wider than float64 (long double) only when every value is a float64, and a
    masked array only when no entry is masked (its hidden data is no weight); anything else is refused."""
    if np.ma.isMaskedArray(value) and np.ma.is_masked(value):
        raise InputError(f"{name} is a masked array with masked entries: fill them first "
                         "(array.filled(value)); the data under a mask is not a weight")
    given = np.asarray(value)
    if (type(value) is np.ndarray and value.dtype.kind == "f" and value.dtype.isnative
            and value.flags.c_contiguous and _read_only_throughout(value) and value.dtype.itemsize <= 8):
        array = value
    else:  # np.array(..., copy=True) of a subclass is a plain ndarray (subok=False): none of its methods run
        wide = given.dtype.kind == "f" and given.dtype.itemsize > 8
        dtype = np.float64 if given.dtype.kind in "iub" or wide else given.dtype.newbyteorder("=")
        array = np.array(value, dtype=dtype, copy=True)
        if given.dtype.kind in "iu" and given.size and (
                int(given.max()) > 2**53 or int(given.min()) < -(2**53)):
            raise InputError(f"{name} holds integers beyond 2^53 in magnitude, which float64 would round: "
                             "scale them down, or cast them yourself if rounding is intended")
        if wide and not np.array_equal(array.astype(given.dtype), given, equal_nan=True):
            raise InputError(f"{name} is {given.dtype} with values that float64 would round: cast it "
                             "(array.astype(numpy.float64)) if rounding is intended; the model is checked "
                             "in exact arithmetic of float64 (or narrower) values")
    if array.dtype.kind != "f":
        raise InputError(f"{name} must be a floating-point array, got dtype {array.dtype}")
    if array.ndim != ndim:
        raise InputError(f"{name} must have {ndim} dimensions, got shape {array.shape}")
    rows = max(1, (16 * 2**20) // max(1, array[0].size * array.itemsize)) if array.ndim and len(array) else 1
    for start in range(0, len(array) if array.ndim else 1, rows):
        if not np.isfinite(array[start : start + rows] if array.ndim else array).all():
            raise InputError(f"{name} has non-finite entries")
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class Attention:
    """Causal multi-head attention. Shapes: ``W_Q, W_K (H, d, d_k)``, ``W_V (H, d, d_v)``,
    ``W_O (H, d_v, d)``.

    ``uniform`` attention ignores ``W_Q``/``W_K`` (they must be ``None``).
    """

    kind: str
    W_V: np.ndarray
    W_O: np.ndarray
    W_Q: np.ndarray | None = None
    W_K: np.ndarray | None = None
    inverse_temperature: float = 1.0

    def __post_init__(self) -> None:
        # exact values of the declared types: a str or float subclass could compare or convert otherwise
        kind = str.__str__(self.kind) if isinstance(self.kind, str) else self.kind
        if type(kind) is not str or kind not in ATTENTION_KINDS:
            raise InputError(f"attention kind must be one of {ATTENTION_KINDS}, got {self.kind!r}")
        object.__setattr__(self, "kind", kind)
        beta = self.inverse_temperature
        if isinstance(beta, (bool, np.bool_)) or not isinstance(beta, (int, float, np.integer, np.floating)):
            raise InputError(f"inverse temperature must be a number, got {beta!r}")
        object.__setattr__(self, "inverse_temperature",
                           float.__float__(beta) if isinstance(beta, float) else float(np.float64(beta)))
        for name in ("W_V", "W_O", "W_Q", "W_K"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _frozen_array(value, name, 3))
        H, d, d_v = self.W_V.shape
        if self.W_O.shape != (H, d_v, d):
            raise InputError(f"W_O must have shape (H, d_v, d) = {(H, d_v, d)}, got {self.W_O.shape}")
        if self.kind == "uniform":
            if self.W_Q is not None or self.W_K is not None:
                raise InputError("uniform attention takes no W_Q/W_K")
        else:
            if self.W_Q is None or self.W_K is None:
                raise InputError(f"{self.kind} attention needs W_Q and W_K")
            if self.W_Q.shape != self.W_K.shape or self.W_Q.shape[:2] != (H, d):
                raise InputError(
                    f"W_Q and W_K must both have shape (H, d, d_k) with (H, d) = {(H, d)}; "
                    f"got {self.W_Q.shape} and {self.W_K.shape}"
                )
            if not (np.isfinite(self.inverse_temperature) and self.inverse_temperature > 0):
                raise InputError(
                    f"inverse temperature must be positive and finite, got {self.inverse_temperature}"
                )

    @property
    def heads(self) -> int:
        """Heads: the number of attention heads, H."""
        return self.W_V.shape[0]

    @cached_property
    def value_outputs(self) -> np.ndarray:
        """``W_V[h] @ W_O[h]`` for every head, shape ``(H, d, d)``, computed once (one product per query, not
        two), in float64 whatever the weights' dtype (float32 weights are cast first, exactly): with integer
        weights whose ``Σ_j |W_V[h]_ij|·|W_O[h]_jk|`` stays below 2^53 (``integer_bounds`` checks it) every
        entry is exact; otherwise its rounding is bounded in :meth:`value_output_error`. A cached property of
        an immutable object: the arrays are read-only."""
        product = np.einsum("hij,hjk->hik", self.W_V.astype(np.float64), self.W_O.astype(np.float64))
        product.setflags(write=False)
        return product

    def value_output_partial_sum_max(self) -> float:
        """``max_{h,j,k} Σ_l |W_V[h]_jl|·|W_O[h]_lk|`` (rounded up): a bound on every partial sum of every
        entry of :attr:`value_outputs`; computed in row blocks, never holding another ``(H, d, d)`` array."""
        top = 0.0
        for h in range(self.heads):
            aV, aO = np.abs(self.W_V[h].astype(np.float64)), np.abs(self.W_O[h].astype(np.float64))
            for start in range(0, aV.shape[0], 256):
                top = max(top, float(absmm(aV[start : start + 256], aO).max(initial=0.0)))
        return top

    def value_output_error(self, x_abs: np.ndarray, e_x: np.ndarray, h: int, gamma_d: float,
                           cast: float) -> np.ndarray:
        """A bound on ``|fl(x̂ @ V̂O_h) − x @ W_V[h]·W_O[h]|`` for the product THE forward pass forms with the
        float64 ``V̂O_h`` (:attr:`value_outputs`, cast once more with relative rounding ``cast`` to the
        working dtype), given ``|x̂|`` and ``|x̂ − x| <= e_x``; through ``d_v`` (no ``d × d`` array): with
        ``|V̂O| <= |W_V||W_O|(1 + g)(1 + cast)`` and ``|V̂O − VO| <= (g + cast·(1 + g))·|W_V||W_O|``, ``g =
        γ_{d_v}`` in float64, it is ``(γ_d·|x̂| + e_x)·|V̂O| + (|x̂| + e_x)·|V̂O − VO|`` (without the
        product's ``d·η``).

        Parameters
        ----------
        x_abs : numpy.ndarray
            ``|x̂|``, rows of width d.
        e_x : numpy.ndarray
            A bound on ``|x̂ − x|``, entrywise (broadcast with ``x_abs``).
        h : int
            The head.
        gamma_d : float
            ``γ_d`` of the working dtype: the relative rounding bound of a length-d dot product.
        cast : float
            The relative rounding of casting ``V̂O_h`` to the working dtype (0 in float64).

        Returns
        -------
        numpy.ndarray
            The bound, rows of width d, rounded up.
        """
        aV, aO = np.abs(self.W_V[h].astype(np.float64)), np.abs(self.W_O[h].astype(np.float64))
        g = gamma(self.W_V.shape[2], U64)
        left = x_abs * gamma_d
        left += e_x
        out = absmm(absmm(left, aV), aO)
        out *= (1 + g) * (1 + cast)
        whole = x_abs + e_x
        out += absmm(absmm(whole, aV), aO) * (g + cast * (1 + g))
        return up(out, 2, out=out)

    def value_output(self, h: int) -> np.ndarray:
        """``W_V[h] @ W_O[h]`` (d × d).

        Parameters
        ----------
        h : int
            The head.

        Returns
        -------
        numpy.ndarray
            The read-only float64 row ``h`` of :attr:`value_outputs`.
        """
        return self.value_outputs[h]


@dataclass(frozen=True, eq=False)
class MLP:
    """``ReLU(x @ W1 + b1) @ W2 + b2`` with ``W1 (d, m)``, ``b1 (m,)``, ``W2 (m, d)``, ``b2 (d,)``."""

    W1: np.ndarray
    b1: np.ndarray
    W2: np.ndarray
    b2: np.ndarray

    def __post_init__(self) -> None:
        for name, ndim in (("W1", 2), ("b1", 1), ("W2", 2), ("b2", 1)):
            object.__setattr__(self, name, _frozen_array(getattr(self, name), name, ndim))
        d, m = self.W1.shape
        if self.b1.shape != (m,) or self.W2.shape != (m, d) or self.b2.shape != (d,):
            raise InputError(
                f"MLP shapes disagree: W1 {self.W1.shape}, b1 {self.b1.shape}, "
                f"W2 {self.W2.shape}, b2 {self.b2.shape}"
            )

    @property
    def width(self) -> int:
        """MLP width: the number of hidden units, m (columns of ``W1``)."""
        return self.W1.shape[1]


@dataclass(frozen=True, eq=False)
class Layer:
    """One residual block of THE forward pass: ``y_t = x_t + Attn(x)_t``, then ``x'_t = y_t + MLP(y_t)``; a
    part that is None adds nothing (``attention=None``: ``y = x``; ``mlp=None``: ``x' = y``)."""

    attention: Attention | None = None
    mlp: MLP | None = None


def nonzero_columns(array: np.ndarray) -> np.ndarray:
    """Indices of the columns of a 2-D ``array`` with a nonzero entry, scanned in row blocks of about 2 MiB
    (no full-size temporary at N = 2^20).

    Parameters
    ----------
    array : numpy.ndarray
        ``(n, d)``.

    Returns
    -------
    numpy.ndarray
        Increasing int64 column indices.
    """
    used = np.zeros(array.shape[1], dtype=bool)
    rows = max(1, 2**21 // (8 * max(1, array.shape[1])))
    for start in range(0, array.shape[0], rows):
        used |= np.any(array[start : start + rows] != 0, axis=0)
    return np.flatnonzero(used)


@dataclass(frozen=True, eq=False)
class Readout:
    """The read-out restricted to the residual coordinates it reads: ``logits = x[:, columns] @ matrix.T``.

    ``columns`` increasing; ``matrix (n_out, columns.size)`` is ``U`` on them. ``full`` is True when
    ``columns`` is every coordinate and ``matrix`` the stored dense ``U`` itself (no gather is needed)."""

    columns: np.ndarray
    matrix: np.ndarray
    full: bool


@dataclass(frozen=True, eq=False)
class Model:
    """Embeddings ``E (N, d)`` for entities, ``Q (R, d)`` for relations, optional positions ``P (T, d)``,
    layers, and the untied unembedding ``U (n_out, d)``. ``meta`` holds JSON-able facts about the weights'
    origin (construction name, constants); it never changes what the model computes.

    ``readout_columns`` (optional): ``U`` is stored compactly as its columns there, shape
    ``(n_out, len(readout_columns))``; the dense read-out (zero on every other coordinate) is what the model
    means, and what :meth:`full_unembedding` returns and :meth:`parameter_count` counts. The columns must be
    increasing and fewer than d (so that the storage is never ambiguous)."""

    entity_embedding: np.ndarray
    relation_embedding: np.ndarray
    unembedding: np.ndarray
    layers: tuple[Layer, ...] = ()
    position_embedding: np.ndarray | None = None
    meta: dict = field(default_factory=dict, compare=False)
    readout_columns: np.ndarray | None = None

    def __post_init__(self) -> None:
        for name in ("entity_embedding", "relation_embedding", "unembedding", "position_embedding"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, _frozen_array(value, name, 2))
        object.__setattr__(self, "layers", tuple(self.layers))
        d = self.d
        for name in ("relation_embedding", "position_embedding"):
            value = getattr(self, name)
            if value is not None and value.shape[1] != d:
                raise InputError(f"{name} has width {value.shape[1]}, but the entity embedding has d = {d}")
        if self.readout_columns is None:
            if self.unembedding.shape[1] != d:
                raise InputError(f"unembedding has width {self.unembedding.shape[1]}, but the entity "
                                 f"embedding has d = {d}")
        else:
            columns = np.array(self.readout_columns, copy=True)  # a plain ndarray, whatever was given
            if columns.ndim != 1 or (columns.size and columns.dtype.kind not in "iu"):
                raise InputError(f"readout_columns must be a 1-D integer array, got shape {columns.shape}, "
                                 f"dtype {columns.dtype}")
            columns = columns.astype(np.int64)
            if columns.size >= d or (columns.size and (columns[0] < 0 or columns[-1] >= d
                                                       or np.any(np.diff(columns) <= 0))):
                raise InputError(f"readout_columns must be increasing coordinates in [0, {d}), fewer than "
                                 f"d = {d}; got {columns.size} of them")
            if self.unembedding.shape[1] != columns.size:
                raise InputError(f"a compact unembedding on {columns.size} readout_columns must have "
                                 f"{columns.size} columns, got shape {self.unembedding.shape}")
            columns.setflags(write=False)
            object.__setattr__(self, "readout_columns", columns)
        for i, layer in enumerate(self.layers):
            if layer.attention is not None and layer.attention.W_V.shape[1] != d:
                raise InputError(f"layer {i} attention expects width {layer.attention.W_V.shape[1]}, d = {d}")
            if layer.mlp is not None and layer.mlp.W1.shape[0] != d:
                raise InputError(f"layer {i} MLP expects width {layer.mlp.W1.shape[0]}, d = {d}")

    @cached_property
    def readout(self) -> Readout:
        """The read-out on the coordinates it reads (columns of ``U`` with a nonzero entry), built once.

        A zero column contributes exact zeros to every logit, so ``x[:, columns] @ matrix.T`` is the same sum
        as ``x @ U.T`` without its zero terms (identical in integer mode; in float mode up to the summation
        order BLAS picks). A dense ``U`` that reads every coordinate is used as it is (no copy)."""
        U = self.unembedding
        used = nonzero_columns(U)
        if self.readout_columns is None and used.size == self.d:
            return Readout(np.arange(self.d), U, True)
        matrix = U if used.size == U.shape[1] else U[:, used]
        matrix.setflags(write=False)
        columns = used if self.readout_columns is None else self.readout_columns[used]
        return Readout(columns, matrix, False)

    @property
    def compact(self) -> bool:
        """Whether the unembedding is stored compactly (``readout_columns`` given)."""
        return self.readout_columns is not None

    def full_unembedding(self) -> np.ndarray:
        """The dense unembedding ``(n_out, d)``: the stored array, or (compact storage) a new array with zeros
        off ``readout_columns``."""
        if self.readout_columns is None:
            return self.unembedding
        U = np.zeros((self.n_out, self.d), dtype=self.unembedding.dtype)
        U[:, self.readout_columns] = self.unembedding
        U.setflags(write=False)
        return U

    def unembedding_on(self, columns: np.ndarray) -> np.ndarray:
        """``U[:, columns]`` of the dense unembedding, ``(n_out, len(columns))``, for increasing ``columns``;
        the read-out's own matrix (no copy) when ``columns`` are exactly the coordinates it reads.

        Parameters
        ----------
        columns : array_like of int
            Increasing residual coordinates in [0, d).

        Returns
        -------
        numpy.ndarray
        """
        readout, columns = self.readout, np.asarray(columns, dtype=np.int64)
        if np.array_equal(columns, readout.columns):
            return readout.matrix
        at = np.searchsorted(readout.columns, columns)
        hit = at < readout.columns.size
        hit[hit] = readout.columns[at[hit]] == columns[hit]
        out = np.zeros((self.n_out, columns.size), dtype=readout.matrix.dtype)
        out[:, hit] = readout.matrix[:, at[hit]]
        return out

    def with_dense_readout(self) -> Model:
        """The same model with its unembedding stored densely (itself when it already is)."""
        if self.readout_columns is None:
            return self
        return Model(self.entity_embedding, self.relation_embedding, self.full_unembedding(), self.layers,
                     self.position_embedding, meta=self.meta)

    @property
    def d(self) -> int:
        """Width: the residual dimension, d (columns of the entity embedding)."""
        return self.entity_embedding.shape[1]

    @property
    def n_entities(self) -> int:
        """Entities: the number of entity tokens, N (rows of the entity embedding)."""
        return self.entity_embedding.shape[0]

    @property
    def n_relations(self) -> int:
        """Relations: the number of relation tokens, R (rows of the relation embedding)."""
        return self.relation_embedding.shape[0]

    @property
    def n_out(self) -> int:
        """Outputs: the number of logits the read-out gives (rows of the unembedding ``U``)."""
        return self.unembedding.shape[0]

    @property
    def max_positions(self) -> int | None:
        """Positions: the number of rows of the position embedding ``P``, or None when the model has none."""
        return None if self.position_embedding is None else self.position_embedding.shape[0]

    @property
    def mlp_width(self) -> int:
        """Largest MLP width m over the layers (0 without an MLP)."""
        return max((layer.mlp.width for layer in self.layers if layer.mlp is not None), default=0)

    def relation_token(self, r) -> np.ndarray | int:
        """The token id of relation ``r``: ``r + N`` (relation tokens follow the N entity tokens).

        Parameters
        ----------
        r : int or array_like of int
            Relation ids, in [0, R) (not checked).

        Returns
        -------
        numpy.ndarray or numpy.int64
            ``r + N``, of ``r``'s shape (a NumPy integer for an int).
        """
        return np.asarray(r) + self.n_entities

    def arrays(self) -> dict[str, np.ndarray]:
        """Every weight array under a flat, stable name (``layers.0.mlp.W1``, ...): saving, counting."""
        out = {
            "entity_embedding": self.entity_embedding,
            "relation_embedding": self.relation_embedding,
            "unembedding": self.unembedding,
        }
        if self.position_embedding is not None:
            out["position_embedding"] = self.position_embedding
        for i, layer in enumerate(self.layers):
            for part in (layer.attention, layer.mlp):
                if part is None:
                    continue
                prefix = f"layers.{i}.{'attention' if part is layer.attention else 'mlp'}"
                for f in fields(part):
                    value = getattr(part, f.name)
                    if isinstance(value, np.ndarray):
                        out[f"{prefix}.{f.name}"] = value
        return out

    def parameter_count(self) -> int:
        """Parameters as built: an array shared by several layers (one MLP object reused) is counted once; the
        unembedding counts as the dense ``n_out × d`` it means, however it is stored."""
        unique = {id(a): a for a in self.arrays().values()}
        unstored_zeros = self.n_out * self.d - self.unembedding.size if self.compact else 0
        return int(sum(a.size for a in unique.values())) + unstored_zeros

    def astype(self, dtype) -> Model:
        """The same model with every array cast to ``dtype`` (float32 for speed, float64 for exactness); the
        storage of the unembedding is kept; an array already in ``dtype`` is shared, a cast one is not copied
        again.

        Parameters
        ----------
        dtype : numpy dtype or str
            The arrays' new dtype.

        Returns
        -------
        Model
        """
        return unflatten(self, {key: freeze_if_new(value.astype(dtype, copy=False), value)
                                for key, value in flatten(self).items()})

    def replace(self, **arrays: np.ndarray) -> Model:
        """The same model with some arrays (by ``Model.arrays()`` name) replaced.

        Parameters
        ----------
        **arrays : numpy.ndarray
            The new arrays, by name (``entity_embedding=...``; a layer's as ``**{"layers.0.mlp.W1": ...}``).

        Returns
        -------
        Model

        Raises
        ------
        InputError
            A name that is not one of the model's arrays (or new arrays the model refuses).
        """
        unknown = set(arrays) - set(flatten(self))
        if unknown:
            raise InputError(f"no such weight array(s): {sorted(unknown)}")
        return unflatten(self, {**flatten(self), **arrays})


# ----------------------------------------------------------------------------------- flatten / unflatten


def flatten(model: Model) -> dict[str, np.ndarray]:
    """Every weight array of ``model`` under its flat name (``layers.0.mlp.W1``, ...): ``model.arrays()``.

    Parameters
    ----------
    model : Model

    Returns
    -------
    dict of str to numpy.ndarray
    """
    return model.arrays()


def structure_of(model: Model) -> list[dict]:
    """The JSON-able structure of a model that its arrays do not carry: per layer, the attention kind and
    inverse temperature (or None) and whether it has an MLP. :func:`unflatten` needs it; :func:`save_model`
    stores it.

    Parameters
    ----------
    model : Model

    Returns
    -------
    list of dict
        ``[{"attention": {"kind": ..., "inverse_temperature": ...} or None, "mlp": bool}, ...]``.
    """
    return [
        {
            "attention": None
            if layer.attention is None
            else {"kind": layer.attention.kind, "inverse_temperature": layer.attention.inverse_temperature},
            "mlp": layer.mlp is not None,
        }
        for layer in model.layers
    ]


# ------------------------------------------------------------------------------ what the forward pass reads

# Every field of the model dataclasses that THE forward pass reads, per class, in one place: certify compares
# and fingerprints exactly these (``forward_fields``), save_model stores every one, and a test fails when a
# dataclass gains a field that is neither here nor in NOT_READ_BY_FORWARD. Arrays carry their shape and dtype.
FORWARD_FIELDS: dict[str, tuple[str, ...]] = {
    "Model": ("entity_embedding", "relation_embedding", "unembedding", "layers", "position_embedding",
              "readout_columns"),
    "Layer": ("attention", "mlp"),
    "Attention": ("kind", "W_V", "W_O", "W_Q", "W_K", "inverse_temperature"),
    "MLP": ("W1", "b1", "W2", "b2"),
}
NOT_READ_BY_FORWARD: dict[str, tuple[str, ...]] = {"Model": ("meta",)}  # origin facts: never computed with


def forward_fields(model: Model) -> dict[str, object]:
    """Every value THE forward pass reads, under flat names (``Model.arrays()`` names for arrays;
    ``readout_columns``, ``layers.i.attention.kind``, ``layers.i.attention.inverse_temperature``,
    ``layers.i.attention`` / ``layers.i.mlp`` as None when absent, ``n_layers``), enumerated from
    :data:`FORWARD_FIELDS`.

    Parameters
    ----------
    model : Model

    Returns
    -------
    dict of str to object
        Arrays (numpy.ndarray, their shape and dtype part of the value), strings, floats and None.
    """
    out: dict[str, object] = {"n_layers": len(model.layers)}
    for name in FORWARD_FIELDS["Model"]:
        if name != "layers":
            out[name] = getattr(model, name)
    for i, layer in enumerate(model.layers):
        for part_name in FORWARD_FIELDS["Layer"]:
            part = getattr(layer, part_name)
            prefix = f"layers.{i}.{part_name}"
            if part is None:
                out[prefix] = None
                continue
            for name in FORWARD_FIELDS[type(part).__name__]:
                out[f"{prefix}.{name}"] = getattr(part, name)
    return out


def forward_arrays(model: Model) -> dict[str, np.ndarray]:
    """The weight arrays among :func:`forward_fields` (``readout_columns``, an index array, left out): the
    arrays whose values and dtypes THE forward pass computes with.

    Parameters
    ----------
    model : Model

    Returns
    -------
    dict of str to numpy.ndarray
    """
    return {name: value for name, value in forward_fields(model).items()
            if isinstance(value, np.ndarray) and name != "readout_columns"}


def forward_fingerprint(model: Model, skip: Iterable[str] = ()) -> str:
    """A SHA-256 over :func:`forward_fields` (names, shapes, dtypes, bytes, scalars), leaving out ``skip``:
    two models with the same fingerprint compute the same function (up to a hash collision).

    Parameters
    ----------
    model : Model
    skip : iterable of str
        Flat names left out (a construction's declared task table).

    Returns
    -------
    str
        Hex digest.
    """
    import hashlib

    skipped = set(skip)
    digest = hashlib.sha256()
    for name, value in forward_fields(model).items():
        if name in skipped:
            continue
        digest.update(name.encode() + b"\0")
        if isinstance(value, np.ndarray):
            array = np.ascontiguousarray(value)
            digest.update(repr((array.shape, array.dtype.str)).encode())
            digest.update(array.tobytes())
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


_TEMPLATE = object()


@contextmanager
def _naming(part: str) -> Iterator[None]:
    """A refusal of one layer's part (``b1 has non-finite entries``) names it (``layers.0.mlp: ...``)."""
    try:
        yield
    except InputError as exc:
        raise InputError(f"{part}: {exc}") from None


def unflatten(
    template: Model | list[dict], arrays: Mapping[str, np.ndarray], *, meta: dict | None = None,
    readout_columns=_TEMPLATE,
) -> Model:
    """THE way to rebuild a Model from flat arrays (trainer, quantizer, I/O, probes all use it).

    Parameters
    ----------
    template : Model or list of dict
        A Model (its structure and meta are kept) or a structure list from :func:`structure_of`.
    arrays : mapping of str to numpy.ndarray
        Every array of the structure under its ``Model.arrays()`` name, and no other.
    meta : dict, optional
        The new model's meta (default: a Model template's, else empty).
    readout_columns : numpy.ndarray or None, optional
        The compact read-out's columns, or None for a dense one. By default a Model template's, kept when
        ``arrays["unembedding"]`` has the compact width and the entity embedding the template's d (a dense
        ``(n_out, d)`` array, or a model of another width, makes a dense read-out); None for a structure list.

    Returns
    -------
    Model

    Raises
    ------
    InputError
        A structure that is not a list of per-layer objects, a missing or unexpected array (named), or arrays
        whose shapes disagree (from the Model's own checks).
    """
    structure = structure_of(template) if isinstance(template, Model) else template
    if meta is None:
        meta = dict(template.meta) if isinstance(template, Model) else {}
    if readout_columns is _TEMPLATE:
        readout_columns = None
        if isinstance(template, Model) and template.compact and "unembedding" in arrays:
            given = np.shape(arrays["unembedding"])
            same_d = np.shape(arrays.get("entity_embedding", ()))[-1:] == (template.d,)
            compact_width = given[-1:] == (template.unembedding.shape[1],)
            readout_columns = template.readout_columns if compact_width and same_d else None
    if not isinstance(structure, list) or not all(isinstance(s, dict) for s in structure):
        raise InputError("a model structure must be a list of per-layer objects")
    used: set[str] = set()

    def take(name: str, required: bool = True):
        if name not in arrays:
            if required:
                raise InputError(f"model array {name!r} is missing")
            return None
        used.add(name)
        return arrays[name]

    layers = []
    for i, spec in enumerate(structure):
        att = None
        if spec.get("attention") is not None:
            p = f"layers.{i}.attention."
            kind = spec["attention"].get("kind")
            given = (take(p + "W_V"), take(p + "W_O"), take(p + "W_Q", kind != "uniform"),
                     take(p + "W_K", kind != "uniform"))
            with _naming(p[:-1]):
                att = Attention(kind, *given, float(spec["attention"].get("inverse_temperature", 1.0)))
        mlp = None
        if spec.get("mlp"):
            p = f"layers.{i}.mlp."
            given = (take(p + "W1"), take(p + "b1"), take(p + "W2"), take(p + "b2"))
            with _naming(p[:-1]):
                mlp = MLP(*given)
        layers.append(Layer(att, mlp))
    model = Model(
        take("entity_embedding"),
        take("relation_embedding"),
        take("unembedding"),
        tuple(layers),
        take("position_embedding", False),
        meta=meta,
        readout_columns=readout_columns,
    )
    extra = set(arrays) - used
    if extra:
        raise InputError(f"unexpected model array(s) {sorted(extra)} for a {len(structure)}-layer structure")
    return model
