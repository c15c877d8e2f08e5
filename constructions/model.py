"""The one Model and THE forward pass (docs/theory.md, "Model").

Every weight source in georecall (hand-built constructions, the trainer, transplanted weights) produces a
:class:`Model`, and :func:`forward` defines what it computes: its body is the model's equations in order, and
each speed trick is a named helper whose docstring says why it equals the plain formula.

Alternative evaluation paths. Four faster paths compute (parts of) the same function where a structure
allows it, each checked against :func:`forward` by the tests (docs/theory.md, "Evaluation paths"): the
token-additive tables forward (``verify/checking/additive.py``; ``tests/test_additive.py``), the hypercube
decoder (``verify/checking/decoders.py``; ``tests/test_decoders.py``), the trainer's structure-aware step
(``verify/training/train_structured.py``; ``tests/test_train_structured.py``) and certify's product-set
evaluation (``verify/checking/certify.py``; the brute-force tests of ``tests/test_certify.py``);
``tests/test_soundness.py`` compares every path's verdicts with exact rational arithmetic. :func:`forward`
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

import itertools
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import Literal

import numpy as np

from georecall import __version__
from georecall.constructions.rounding import (
    U64,
    absmm,
    format_of,
    gamma,
    hard_weight_error,
    softmax_weight_error,
    up,
)
from georecall.errors import InputError
from georecall.io import atomic_write, damaged_input

__all__ = [
    "ATTENTION_KINDS",
    "Attention",
    "EXACT_INTEGER_LIMIT",
    "IntegerModeError",
    "Layer",
    "MLP",
    "Model",
    "Readout",
    "Trace",
    "chunk_size",
    "embed",
    "FORWARD_FIELDS",
    "NOT_READ_BY_FORWARD",
    "flatten",
    "forward",
    "forward_arrays",
    "forward_fields",
    "forward_fingerprint",
    "freeze_if_new",
    "greedy_decode",
    "integer_bounds",
    "iter_chunks",
    "load_model",
    "matmul_rows",
    "nonzero_columns",
    "predict",
    "save_model",
    "structure_of",
    "unflatten",
    "working_format",
]

AttentionKind = Literal["uniform", "softmax", "hard"]
ATTENTION_KINDS: tuple[str, ...] = ("uniform", "softmax", "hard")
EXACT_INTEGER_LIMIT = 2.0**53

# Bytes a forward chunk may use for its largest intermediate; the chunk size is derived from it.
DEFAULT_CHUNK_BYTES = 64 * 2**20


def _read_only_throughout(array: np.ndarray) -> bool:
    """Whether no array in ``array``'s chain of bases is writable (a read-only view of a writable array is
    not: its owner could still change it)."""
    current: object = array
    while isinstance(current, np.ndarray):
        if current.flags.writeable:
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
    change a Model's weights afterwards. Finiteness is checked in row blocks (no full-size temporary)."""
    given = np.asarray(value)
    if (isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.flags.c_contiguous
            and _read_only_throughout(value)):
        array = value
    else:
        array = np.array(value, dtype=np.float64 if given.dtype.kind in "iub" else None, copy=True)
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
        if self.kind not in ATTENTION_KINDS:
            raise InputError(f"attention kind must be one of {ATTENTION_KINDS}, got {self.kind!r}")
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
        product's ``d·η``)."""
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
        """``W_V[h] @ W_O[h]`` (d × d)."""
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
        return self.W1.shape[1]


@dataclass(frozen=True, eq=False)
class Layer:
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
            columns = np.asarray(self.readout_columns)
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
        the read-out's own matrix (no copy) when ``columns`` are exactly the coordinates it reads."""
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
        return self.entity_embedding.shape[1]

    @property
    def n_entities(self) -> int:
        return self.entity_embedding.shape[0]

    @property
    def n_relations(self) -> int:
        return self.relation_embedding.shape[0]

    @property
    def n_out(self) -> int:
        return self.unembedding.shape[0]

    @property
    def max_positions(self) -> int | None:
        return None if self.position_embedding is None else self.position_embedding.shape[0]

    @property
    def mlp_width(self) -> int:
        """Largest MLP width m over the layers (0 without an MLP)."""
        return max((layer.mlp.width for layer in self.layers if layer.mlp is not None), default=0)

    def relation_token(self, r) -> np.ndarray | int:
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
        again."""
        return unflatten(self, {key: freeze_if_new(value.astype(dtype, copy=False), value)
                                for key, value in flatten(self).items()})

    def replace(self, **arrays: np.ndarray) -> Model:
        """The same model with some arrays (by ``Model.arrays()`` name) replaced."""
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
            att = Attention(
                kind,
                take(p + "W_V"),
                take(p + "W_O"),
                take(p + "W_Q", kind != "uniform"),
                take(p + "W_K", kind != "uniform"),
                float(spec["attention"].get("inverse_temperature", 1.0)),
            )
        mlp = None
        if spec.get("mlp"):
            p = f"layers.{i}.mlp."
            mlp = MLP(take(p + "W1"), take(p + "b1"), take(p + "W2"), take(p + "b2"))
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


# --------------------------------------------------------------------------------------------- forward pass


@dataclass
class Trace:
    """Intermediates of one forward pass, recorded when ``trace=True`` (for probes and the trainer).

    ``residual[0]`` is the embedded input; ``residual[2i+1]`` follows layer i's attention, ``residual[2i+2]``
    its MLP; ``hidden[i]`` is layer i's post-ReLU MLP activation. In the last layer, with ``at="last"``, only
    the last position is computed, so those entries have shape ``(B, 1, ·)``.
    """

    residual: list[np.ndarray] = field(default_factory=list)
    hidden: list[np.ndarray | None] = field(default_factory=list)
    attention_weights: list[np.ndarray | None] = field(default_factory=list)


class IntegerModeError(InputError, ArithmeticError):
    """Integer mode could not prove that the forward pass computed in exact integer arithmetic: the model
    is not integer-scaled (bad input for integer mode: exit 2; float mode checks it)."""


def _require_integral(name: str, array: np.ndarray) -> None:
    if not np.array_equal(array, np.rint(array)):
        raise IntegerModeError(f"integer mode: {name} is not integral")


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
        if not np.array_equal(array, np.rint(array)):
            raise IntegerModeError(f"integer mode: weight {name} is not integral")
    tables = [model.entity_embedding, model.relation_embedding]
    bound = max(float(np.abs(t).max(initial=0.0)) for t in tables)
    if model.position_embedding is not None:
        bound += float(np.abs(model.position_embedding).max(initial=0.0))
    bounds = {"embedding": bound}

    def col(W):  # max column absolute sum: the ∞→∞ norm of x -> x @ W
        return float(np.abs(W).sum(axis=-2).max(initial=0.0))

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


def embed(model: Model, tokens: np.ndarray, dtype=None) -> np.ndarray:
    """Input embeddings ``x_t = [E; Q][token_t] + P[t]``, shape ``(B, T, d)``.

    ``[E; Q][token]`` is the one-hot row of ``token`` times the table ``[E; Q]``; every other term of that
    product is an exact zero, so it equals the row itself in any arithmetic, and the rows are gathered from E
    and Q separately (no one-hot matrix, and no concatenated copy of E: 2.8 GiB for G1 at N = 2^20). The rows
    are cast to ``dtype`` after the gather (exact when widening, as in integer mode); ``P[t]`` is then added
    in ``dtype``.

    Parameters
    ----------
    model : Model
        The weights.
    tokens : numpy.ndarray
        ``(B, T)`` token ids in ``[0, N + R)``.
    dtype : numpy.dtype, optional
        The working dtype (default: the entity table's).

    Returns
    -------
    numpy.ndarray
        ``(B, T, d)``.

    Raises
    ------
    InputError
        ``tokens`` not two-dimensional, an id outside the vocabulary, or a sequence longer than the model's
        positions.
    """
    tokens = np.asarray(tokens)
    if tokens.ndim != 2:
        raise InputError(f"tokens must have shape (batch, T), got {tokens.shape}")
    vocab = model.n_entities + model.n_relations
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab):
        raise InputError(f"token ids must lie in [0, {vocab}); got range [{tokens.min()}, {tokens.max()}]")
    N = model.n_entities
    x = np.empty(tokens.shape + (model.d,), dtype=model.entity_embedding.dtype if dtype is None else dtype)
    entity = tokens < N
    x[entity] = model.entity_embedding[tokens[entity]]
    relation = ~entity
    x[relation] = model.relation_embedding[tokens[relation] - N]
    if model.position_embedding is not None:
        T = tokens.shape[1]
        if T > model.max_positions:
            raise InputError(f"sequence length {T} exceeds the model's {model.max_positions} positions")
        x = x + model.position_embedding[:T].astype(x.dtype, copy=False)
    return x


def forward(
    model: Model,
    tokens: np.ndarray,
    *,
    at: Literal["last", "all"] = "last",
    integer: bool = False,
    trace: bool = False,
    errors: bool = False,
):
    """THE forward pass: the model's equations (docs/theory.md, "Model"), in order.

    With row vectors and causal attention, for every sequence of ``tokens``::

        x_t    = [E; Q][token_t] + P[t]                                  (embedding)
        y_t    = x_t + Σ_h Σ_{u<=t} a_h(t, u) · x_u W_V[h] W_O[h]        (attention, per layer)
        x_t    = y_t + ReLU(y_t W1 + b1) W2 + b2                         (MLP, per layer)
        logits = x_t U^T                                                 (read-out)

    with ``a_h(t, u) = 1/(t + 1)`` (uniform), ``softmax_u(β·<x_t W_Q[h], x_u W_K[h]>)`` (softmax) or uniform
    over the maximal scores (hard, the β → ∞ idealization). A layer's attention or MLP may be absent. The
    body below is these lines; each speed trick sits in a named helper whose docstring says why it computes
    the plain formula: the embedding gathers rows instead of multiplying one-hot vectors (:func:`embed`),
    the last layer computes only the positions read out (:func:`_rows_read_later`), uniform attention sums
    prefixes once for every head (:func:`_prefix_sums`), ``W_V·W_O`` is formed once per head
    (:attr:`Attention.value_outputs`), every product is one matrix product over the batch
    (:func:`matmul_rows`), the read-out reads only the coordinates ``U`` reads (:attr:`Model.readout`), and
    the working dtype is chosen once (:func:`_arithmetic`).

    Parameters
    ----------
    model : Model
        The weights.
    tokens : numpy.ndarray
        Token ids ``(B, T)``: entity ``s`` is ``s``, relation ``r`` is ``N + r``.
    at : {"last", "all"}
        Logits at the last position ``(B, n_out)`` or at every position ``(B, T, n_out)``.
    integer : bool
        Integer mode: compute in float64 and check every attention division is exact. The caller must have
        proved the a-priori bounds with :func:`integer_bounds` (the checker does); the pass is then exact
        integer arithmetic whatever the weights' storage dtype.
    trace : bool
        Also return a :class:`Trace` of the intermediates (for probes and the trainer).
    errors : bool
        Float mode: also return a float64 array of the logits' shape bounding ``|computed − exact|``
        entrywise, where *exact* is this pass in exact real arithmetic of the stored weights: the standard
        forward-error bounds propagated through every operation the pass performs (``constructions.rounding``;
        docs/theory.md, "Sound float mode"). The computed logits are the same as without it. In integer mode
        the bound is 0 (the caller proved exactness).

    Returns
    -------
    numpy.ndarray or tuple
        The logits; with ``errors`` and/or ``trace``, the tuple ``(logits[, bound][, trace])``.

    Raises
    ------
    InputError
        ``at`` not "last" or "all"; token ids outside the vocabulary; a sequence longer than the model's
        positions.
    IntegerModeError
        Integer mode, when an attention division is not exact.
    """
    if at not in ("last", "all"):
        raise InputError(f"at must be 'last' or 'all', got {at!r}")
    op = _arithmetic(model, integer=integer, errors=errors)
    x = _embedding(model, tokens, op)                                   # x_t = [E; Q][token_t] + P[t]
    T = x.value.shape[1]
    record = Trace(residual=[x.value]) if trace else None
    for i, layer in enumerate(model.layers):
        rows = _rows_read_later(i, len(model.layers), at, T)
        attended, weights = _attention(layer.attention, x, rows, op, i)  # Σ_h Σ_u a_h(t,u)·x_u W_V[h] W_O[h]
        y = op.plus(x[:, rows], attended)                                # y_t = x_t + Attn(x)_t
        h = None
        if layer.mlp is not None:
            W1, b1, W2, b2 = layer.mlp.W1, layer.mlp.b1, layer.mlp.W2, layer.mlp.b2
            h = op.relu(op.plus_bias(op.times(y, W1), b1))               # h_t = ReLU(y_t W1 + b1)
            x = op.plus_bias(op.plus(y, op.times(h, W2)), b2)            # x_t = y_t + h_t W2 + b2
        else:
            x = y
        if record is not None:
            _record_layer(record, y, weights, h, x)
    if at == "last":
        x = x[:, -1]
    logits = _readout(model, x, op)                                     # logits_t = x_t U^T
    return _returned(logits, errors, record)


# The helpers of THE forward pass, in the order it calls them. Each computes one line of the equations; its
# docstring says what it computes and why it equals the plain formula.


@dataclass(frozen=True)
class _Tracked:
    """An array computed by the pass and, in float mode with ``errors=True``, a float64 bound on its
    distance from the same quantity in exact real arithmetic (``None`` when not tracked)."""

    value: np.ndarray
    error: np.ndarray | None = None

    def __getitem__(self, index) -> _Tracked:
        return _Tracked(self.value[index], None if self.error is None else self.error[index])


class _Arithmetic:
    """How one pass computes: its working dtype, integer mode, and (float mode with ``errors=True``) the
    rounding bookkeeping (:class:`_Rounding`) that carries a bound beside every array.

    Each operation computes the value exactly as the plain formula says (``a + b``, ``a @ W``, ``ReLU``) and,
    when tracking, the standard bound on the rounding of the value it just computed, given the inputs'
    bounds."""

    def __init__(self, dtype: np.dtype, integer: bool, rounding: _Rounding | None) -> None:
        self.dtype, self.integer, self.rounding = dtype, integer, rounding

    def plus(self, a: _Tracked, b: _Tracked | None) -> _Tracked:
        """``a + b`` (a new array; ``a`` itself when ``b`` is absent: a missing sublayer adds nothing)."""
        if b is None:
            return a
        value = a.value + b.value
        return _Tracked(value, None if self.rounding is None else self.rounding.add(value, a.error, b.error))

    def plus_bias(self, a: _Tracked, bias: np.ndarray) -> _Tracked:
        """``a + bias``, in place: ``a`` is a fresh array (the result of :meth:`plus` or :meth:`times`)."""
        np.add(a.value, bias, out=a.value)
        return _Tracked(a.value, None if self.rounding is None else self.rounding.add(a.value, a.error))

    def times(self, a: _Tracked, W: np.ndarray) -> _Tracked:
        """``a @ W`` (:func:`matmul_rows`: one matrix product over every leading dimension)."""
        value = matmul_rows(a.value, W)
        return _Tracked(value, None if self.rounding is None else self.rounding.product(a.value, a.error, W))

    def relu(self, a: _Tracked) -> _Tracked:
        """``ReLU(a)``, in place. ReLU is 1-Lipschitz, so the bound carries over, except that a unit computed
        <= 0 whose exact value may be positive by at most (computed + bound) keeps only that much of it:
        ``min(e, max(0, â + e))``, which is ``e`` where ``â > 0`` (the sum rounded up)."""
        error = a.error
        if self.rounding is not None:
            assert error is not None
            room = a.value.astype(np.float64)
            room += error
            np.maximum(room, 0.0, out=room)
            room *= 1.0 + 2.0**-51
            error = np.minimum(room, error, out=room)
        np.maximum(a.value, 0, out=a.value)
        return _Tracked(a.value, error)


def _arithmetic(model: Model, *, integer: bool, errors: bool) -> _Arithmetic:
    """The pass's arithmetic. The working dtype is float64 in integer mode (casting integer weights of any
    float dtype to float64 is exact, so every product is formed in float64, where :func:`integer_bounds`
    proves it exact) and the entity table's dtype otherwise (products with a wider weight array promote,
    as NumPy does). With ``errors`` in float mode, the rounding bookkeeping uses the unit roundoff ``u`` and
    the underflow bound of the least precise format in play. When the model mixes formats, an operation may
    round twice (in the wider format, then when stored in the narrower one: ``|fl_c(fl_f(s)) − s| <= (u_c +
    u_f + u_c·u_f)·|result|``), so ``u`` is then ``u_c + 2·u_f``."""
    dtype = np.dtype(np.float64) if integer else model.entity_embedding.dtype
    rounding = _Rounding(*working_format(model)) if errors and not integer else None
    return _Arithmetic(dtype, integer, rounding)


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


def _cast_error(stored: np.ndarray, dtype: np.dtype) -> np.ndarray | None:
    """``|stored − stored.astype(dtype)|`` entrywise (float64, rounded up), or None when every value of
    ``stored``'s dtype is exact in ``dtype`` (a safe cast)."""
    if np.can_cast(stored.dtype, dtype, casting="safe"):
        return None
    wide = stored.astype(np.float64)
    return up(np.abs(wide - stored.astype(dtype).astype(np.float64)), 1)


def _embedding(model: Model, tokens: np.ndarray, arithmetic: _Arithmetic) -> _Tracked:
    """``x_t = [E; Q][token_t] + P[t]`` (:func:`embed`). Bound: the gather is exact, the position sum rounds
    once (``u·|x|``), and a table stored in a wider format than the working dtype (Q or P; E defines the
    working dtype) adds its rows' exact cast errors."""
    x = embed(model, tokens, arithmetic.dtype)
    error = None
    if arithmetic.rounding is not None:
        P = model.position_embedding
        error = arithmetic.rounding.u * np.abs(x.astype(np.float64)) if P is not None else np.zeros(x.shape)
        e_Q = _cast_error(model.relation_embedding, x.dtype)
        e_P = None if P is None else _cast_error(P[: x.shape[1]], x.dtype)
        if e_Q is not None or e_P is not None:
            tokens = np.asarray(tokens)
            if e_Q is not None:
                relation = tokens >= model.n_entities
                error[relation] += e_Q[tokens[relation] - model.n_entities]
            if e_P is not None:
                error += e_P[None]
            error = up(error, 3)
    return _Tracked(x, error)


def _rows_read_later(layer: int, n_layers: int, at: str, T: int) -> slice:
    """The positions whose output of ``layer`` is read later: all of them, except in the last layer with
    ``at="last"``, where only position T − 1 is. Nothing attends to a state after the last layer, so the
    other positions' final states would be computed and dropped: skipping them changes no logit."""
    if layer == n_layers - 1 and at == "last" and T > 1:
        return slice(T - 1, T)
    return slice(0, T)


def _attention(att: Attention | None, x: _Tracked, rows: slice, arithmetic: _Arithmetic,
               layer: int) -> tuple[_Tracked | None, np.ndarray | None]:
    """``Attn(x)_t = Σ_h Σ_{u<=t} a_h(t, u) · x_u W_V[h] W_O[h]`` at the positions ``rows`` given every
    state ``x (B, T, d)``, and the weights ``a_h`` ``(H, B, |rows|, T)`` (None for uniform attention, whose
    weights are ``1/(t + 1)``; both None without attention)."""
    if att is None:
        return None, None
    if att.kind == "uniform":
        return _uniform_attention(att, x, rows, arithmetic, layer), None
    return _scored_attention(att, x, rows, arithmetic)


def _uniform_attention(att: Attention, x: _Tracked, rows: slice, arithmetic: _Arithmetic,
                       layer: int) -> _Tracked:
    """Uniform attention, ``a_h(t, u) = 1/(t + 1)``, computed as ``(Σ_h S_t · (W_V W_O)_h) / (t + 1)`` with
    ``S_t = Σ_{u<=t} x_u``: the plain formula with the mean's linearity used twice (sum the states, then
    multiply; divide once, after the heads' sum), so that with integer weights the only non-integer step is
    one division, checked to be exact in integer mode."""
    positions = np.arange(x.value.shape[1])[rows]
    sums = _prefix_sums(x, rows, arithmetic)                                  # S_t = Σ_{u<=t} x_u
    heads = itertools.repeat(sums, att.heads)
    total = _through_heads(att, heads, x.value.dtype, arithmetic)             # Σ_h S_t (W_V W_O)_h
    out = _divided_by_count(total, positions + 1, arithmetic)                  # / (t + 1)
    if arithmetic.integer:
        _require_integral(f"layer {layer} uniform attention output", out.value)
    return out


def _prefix_sums(x: _Tracked, rows: slice, arithmetic: _Arithmetic) -> _Tracked:
    """``S_t = Σ_{u<=t} x_u`` for ``t`` in ``rows``: one cumulative sum over the positions (one plain sum
    when a single position is asked), shared by every head. Bound: a sum of at most T terms in any order,
    ``γ_T·Σ|x_u| + Σ e_u``."""
    T = x.value.shape[1]
    positions = np.arange(T)[rows]

    def prefix(a: np.ndarray) -> np.ndarray:
        if positions.size == 1:  # Σ_{u<=t} x_u for the one position asked
            return a[:, : positions[0] + 1].sum(axis=1, keepdims=True)
        return np.cumsum(a, axis=1)[:, rows]

    sums = prefix(x.value)
    error = None
    if arithmetic.rounding is not None:
        assert x.error is not None
        error = up(gamma(T, arithmetic.rounding.u) * prefix(np.abs(x.value.astype(np.float64)))
                   + prefix(x.error), T)
    return _Tracked(sums, error)


def _through_heads(att: Attention, inputs: Iterable[_Tracked], dtype: np.dtype,
                   arithmetic: _Arithmetic) -> _Tracked:
    """``Σ_h z_h · (W_V W_O)_h`` for the per-head inputs ``z_h`` (``(B, P, d)``, taken one head at a time),
    accumulated in the residual's ``dtype``.

    The product ``W_V[h]·W_O[h]`` is formed once per head (:attr:`Attention.value_outputs`, in float64, cast
    to ``dtype``): by associativity ``(z W_V) W_O = z (W_V W_O)``, one product per query instead of two. Its
    rounding is bounded by :meth:`Attention.value_output_error`; then the heads' sum (H additions into a zero
    array, ``γ_H``)."""
    rounding = arithmetic.rounding
    out: np.ndarray | None = None
    err: np.ndarray | None = None
    abs_terms: np.ndarray | None = None
    for h, z in enumerate(inputs):
        if out is None:
            out = np.zeros(z.value.shape, dtype=dtype)
            if rounding is not None:
                err, abs_terms = np.zeros(out.shape), np.zeros(out.shape)
        term = matmul_rows(z.value, att.value_outputs[h].astype(dtype, copy=False))
        out += term
        if rounding is not None:
            assert z.error is not None and err is not None and abs_terms is not None
            # the cast of the float64 product W_V·W_O to the working dtype rounds once more
            cast = 0.0 if dtype == np.float64 else rounding.u
            n = z.value.shape[-1]
            err += att.value_output_error(np.absolute(z.value, dtype=np.float64), z.error, h,
                                          gamma(n, rounding.u), cast) + n * rounding.eta
            abs_terms += np.abs(term.astype(np.float64))
    assert out is not None  # every Attention has at least one head
    if rounding is None:
        return _Tracked(out)
    assert err is not None and abs_terms is not None
    return _Tracked(out, up(err + gamma(att.heads, rounding.u) * abs_terms, att.heads))


def _divided_by_count(total: _Tracked, counts: np.ndarray, arithmetic: _Arithmetic) -> _Tracked:
    """``total_t / count_t`` (in place) for the positions' counts ``t + 1``, exact integers in any format."""
    out = total.value
    out /= counts.astype(out.dtype)[None, :, None]
    if arithmetic.rounding is None:
        return _Tracked(out)
    assert total.error is not None
    rounding = arithmetic.rounding
    return _Tracked(out, rounding.add(out, total.error / counts[None, :, None]) + rounding.eta)


def _scored_attention(att: Attention, x: _Tracked, rows: slice,
                      arithmetic: _Arithmetic) -> tuple[_Tracked, np.ndarray]:
    """Softmax or hard attention: per head, the weights ``a_h(t, u)`` from the scores, the mixture ``z_{h,t}
    = Σ_{u<=t} a_h(t, u)·x_u``, then ``Σ_h z_h (W_V W_O)_h`` (:func:`_through_heads`); one head at a time (a
    generator), so at most one head's mixture is held. Returns the output and every head's weights."""
    B, T, _ = x.value.shape
    weights = np.empty((att.heads, B, np.arange(T)[rows].size, T), dtype=x.value.dtype)

    causal = _causal(rows, T)

    def mixtures() -> Iterator[_Tracked]:
        for h in range(att.heads):
            scores = _scores(att, h, x, rows, causal, arithmetic)     # β·<x_t W_Q[h], x_u W_K[h]>, u <= t
            a = _attention_weights(att.kind, scores, causal, x.value.dtype, arithmetic)  # a_h(t, u)
            weights[h] = a.value
            yield _mixture(a, x, arithmetic)                         # z_{h,t} = Σ_u a_h(t, u)·x_u

    return _through_heads(att, mixtures(), x.value.dtype, arithmetic), weights


def _causal(rows: slice, T: int) -> np.ndarray:
    """``(|rows|, T)``: whether position ``u`` is visible from position ``t`` (``u <= t``)."""
    return np.arange(T)[rows][:, None] >= np.arange(T)[None, :]


def _scores(att: Attention, h: int, x: _Tracked, rows: slice, causal: np.ndarray,
            arithmetic: _Arithmetic) -> _Tracked:
    """Head h's scores ``β·<x_t W_Q[h], x_u W_K[h]>`` ``(B, |rows|, T)``, ``−∞`` where ``u > t``. Bound: the
    two products', the dot product's (length d_k), β's own rounding to the working dtype and the product by
    it (:meth:`_Rounding.score`)."""
    assert att.W_Q is not None and att.W_K is not None  # checked in Attention.__post_init__
    q = arithmetic.times(x[:, rows], att.W_Q[h])
    k = arithmetic.times(x, att.W_K[h])
    dots = q.value @ k.value.transpose(0, 2, 1)
    scores = att.inverse_temperature * dots
    scores = np.where(causal, scores, -np.inf)
    if arithmetic.rounding is None:
        return _Tracked(scores)
    return _Tracked(scores, arithmetic.rounding.score(q, k, dots, scores, causal, att.inverse_temperature))


def _attention_weights(kind: str, scores: _Tracked, causal: np.ndarray, dtype: np.dtype,
                       arithmetic: _Arithmetic) -> _Tracked:
    """``softmax_u`` of the scores (:func:`_softmax_lastaxis`, in the scores' dtype), or, for hard
    attention, uniform over the positions attaining the maximal score (in the residual's ``dtype``). Bound:
    the interval softmax (``rounding.softmax_weight_error``) or every position whose score may tie the
    maximum within the scores' bounds (``rounding.hard_weight_error``)."""
    s = scores.value
    if kind == "softmax":
        w = _softmax_lastaxis(s)
    else:  # hard: uniform over the positions attaining the maximum score
        w = (s == s.max(axis=-1, keepdims=True)).astype(dtype)
        w /= w.sum(axis=-1, keepdims=True)
    rounding = arithmetic.rounding
    if rounding is None:
        return _Tracked(w)
    assert scores.error is not None
    visible = np.broadcast_to(causal, s.shape)
    if kind == "softmax":
        return _Tracked(w, softmax_weight_error(s, scores.error, w, visible,
                                                rel=gamma(s.shape[-1] + 8, rounding.u)))
    return _Tracked(w, hard_weight_error(s, scores.error, visible))


def _softmax_lastaxis(scores: np.ndarray) -> np.ndarray:
    """``softmax`` along the last axis, computed as ``exp(s − max s) / Σ exp(s − max s)`` (the same quotient:
    the shift cancels; it keeps ``exp`` from overflowing). A new array; ``scores`` is not changed."""
    scores = scores - scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


def _mixture(a: _Tracked, x: _Tracked, arithmetic: _Arithmetic) -> _Tracked:
    """``z_t = Σ_{u<=t} a(t, u)·x_u`` for the weights ``a (B, |rows|, T)`` (zero where ``u > t``), one batched
    matrix product ``a @ x``. Bound: a dot product of length T with both factors inexact."""
    z = a.value @ x.value
    rounding = arithmetic.rounding
    if rounding is None:
        return _Tracked(z)
    assert a.error is not None and x.error is not None
    T = x.value.shape[1]
    aw, ax = a.value.astype(np.float64), np.abs(x.value.astype(np.float64))
    e_w, e_x = a.error, x.error
    return _Tracked(z, up(gamma(T, rounding.u) * (aw @ ax) + e_w @ ax + aw @ e_x + e_w @ e_x, T + 4))


def _readout(model: Model, x: _Tracked, arithmetic: _Arithmetic) -> _Tracked:
    """``logits = x U^T``, reading only the residual coordinates ``U`` reads (:attr:`Model.readout`): a zero
    column of ``U`` contributes exact zeros to every logit, so ``x[:, columns] @ U[:, columns]^T`` is the
    same sum without its zero terms, whatever the storage (dense, or compact ``readout_columns``). ``U`` is
    cast to the residual's dtype first (a float32 residual is read out in float32); a ``U`` stored wider adds
    its exact cast error to the bound."""
    readout = model.readout
    read = x if readout.full else x[..., readout.columns]
    U_t = readout.matrix.T.astype(read.value.dtype, copy=False)
    logits = matmul_rows(read.value, U_t)
    rounding = arithmetic.rounding
    if rounding is None:
        return _Tracked(logits)
    e_U = _cast_error(readout.matrix.T, read.value.dtype)  # U stored wider than the residual: its cast
    if e_U is None:
        return _Tracked(logits, rounding.product(read.value, read.error, readout.matrix.T))
    return _Tracked(logits, rounding.product(read.value, read.error, U_t, e_W=e_U))


def _record_layer(record: Trace, y: _Tracked, weights: np.ndarray | None, h: _Tracked | None,
                  x: _Tracked) -> None:
    """Append one layer's intermediates to the trace: the residual after attention and after the MLP, the
    attention weights and the post-ReLU hidden activation (None where the layer has no such part)."""
    record.residual.append(y.value)
    record.attention_weights.append(weights)
    record.residual.append(x.value)
    record.hidden.append(None if h is None else h.value)


def _returned(logits: _Tracked, errors: bool, record: Trace | None):
    """What :func:`forward` returns: the logits, then their bound (``errors``; zeros in integer mode, whose
    exactness the caller proved), then the trace (``trace``)."""
    out: tuple = (logits.value,)
    if errors:
        out += (np.zeros(logits.value.shape) if logits.error is None else logits.error,)
    if record is not None:
        out += (record,)
    return out if len(out) > 1 else logits.value


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

    def score(self, q: _Tracked, k: _Tracked, dots: np.ndarray, scores: np.ndarray, causal: np.ndarray,
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


def chunk_size(model: Model, T: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> int:
    """Queries per chunk so that the largest per-query intermediate stays within ``chunk_bytes``.

    Parameters
    ----------
    model : Model
    T : int
        The sequence length.
    chunk_bytes : int
        The budget of one intermediate.

    Returns
    -------
    int
        At least 1.
    """
    widest = max(model.d, model.mlp_width, model.n_out) * max(T, 1)
    return max(1, chunk_bytes // (8 * widest))


def iter_chunks(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices covering ``range(n)``, each of at most ``size`` items.

    Parameters
    ----------
    n : int
        Items.
    size : int
        Items per slice (>= 1).

    Yields
    ------
    slice
    """
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


def predict(model: Model, tokens: np.ndarray, *, chunk: int | None = None) -> np.ndarray:
    """Argmax predictions at the last position, by THE forward pass in bounded-memory chunks.

    Parameters
    ----------
    model : Model
    tokens : numpy.ndarray
        ``(B, T)`` token ids.
    chunk : int, optional
        Queries per chunk (default :func:`chunk_size`).

    Returns
    -------
    numpy.ndarray
        ``(B,)`` int64.

    Raises
    ------
    InputError
        As :func:`forward`.
    """
    tokens = np.asarray(tokens)
    chunk = chunk or chunk_size(model, tokens.shape[1])
    out = np.empty(tokens.shape[0], dtype=np.int64)
    for part in iter_chunks(tokens.shape[0], chunk):
        out[part] = forward(model, tokens[part]).argmax(axis=1)
    return out


def greedy_decode(model: Model, prompts: np.ndarray, steps: int, *, integer: bool = False):
    """Greedy chain-of-thought decoding: ``steps`` times, predict at the last position and append the
    predicted entity as a new input token (re-embedded by the input table ``E``).

    Parameters
    ----------
    model : Model
        Its outputs must be entities (``n_out == N``) for the prediction to be fed back.
    prompts : numpy.ndarray
        ``(B, T)`` token ids.
    steps : int
        Tokens generated.
    integer : bool
        Run THE forward pass in integer mode (the caller proved :func:`integer_bounds` for every length).

    Returns
    -------
    generated : numpy.ndarray
        ``(B, steps)`` int64.
    margins : numpy.ndarray
        ``(B, steps)``: top logit minus runner-up (``inf`` with one output).

    Raises
    ------
    InputError
        ``n_out != N``, or as :func:`forward`.
    """
    if model.n_out != model.n_entities:
        raise InputError(
            f"decoding feeds predictions back as entities: needs n_out == N, "
            f"got n_out = {model.n_out}, N = {model.n_entities}"
        )
    seq = np.asarray(prompts, dtype=np.int64)
    generated = np.empty((seq.shape[0], steps), dtype=np.int64)
    margins = np.empty((seq.shape[0], steps))
    for t in range(steps):
        logits = forward(model, seq, integer=integer)
        top2 = np.partition(logits, -2, axis=1)[:, -2:] if logits.shape[1] > 1 else None
        generated[:, t] = logits.argmax(axis=1)
        margins[:, t] = (top2[:, 1] - top2[:, 0]) if top2 is not None else np.inf
        seq = np.concatenate([seq, generated[:, t : t + 1]], axis=1)
    return generated, margins


# ------------------------------------------------------------------------------------------- saving


def save_model(model: Model, path, extra_arrays: dict[str, np.ndarray] | None = None, **record) -> str:
    """Write a Model to ``.npz`` without pickle: every array under its ``Model.arrays()`` name, plus a JSON
    header (layer structure, attention kinds and temperatures, the compact read-out's columns, ``meta``, the
    package version and ``record``).

    Parameters
    ----------
    model : Model
    path : str or path-like or binary file
        The file; a path without ".npz" gets the suffix, and is written atomically (a temporary file in the
        same folder, renamed when complete). A file object is written as it is (e.g. inside the caller's own
        atomic write).
    extra_arrays : dict of str to numpy.ndarray, optional
        Arrays stored beside the weights (e.g. the task table).
    **record
        JSON-able facts for the header (parameters, seed, ...).

    Returns
    -------
    str or file
        The path written (or the file object given).
    """
    structure = structure_of(model)
    header = {
        "format": "georecall-model-1",
        "version": __version__,
        "structure": structure,
        "readout_columns": None if model.readout_columns is None else model.readout_columns.tolist(),
        "meta": model.meta,
        "record": record,
    }
    arrays = {key.replace(".", "__"): value for key, value in model.arrays().items()}
    scalars = {f"layers.{i}.attention.{name}" for i, s in enumerate(structure) if s["attention"] is not None
               for name in ("kind", "inverse_temperature")}
    unstored = [name for name, value in forward_fields(model).items() if value is not None and not (
        name in model.arrays() or name in scalars or name in ("n_layers", "readout_columns")
        or name.rsplit(".", 1)[-1] in ("attention", "mlp"))]
    if unstored:  # a field FORWARD_FIELDS lists that this format does not store yet
        raise InputError(f"save_model stores no {unstored}: extend the format before saving such a model")
    arrays.update({f"extra____{key}": np.asarray(value) for key, value in (extra_arrays or {}).items()})
    arrays["__header__"] = np.array(json.dumps(header, default=str))
    if hasattr(path, "write"):  # a binary file object (e.g. inside the caller's own atomic write)
        np.savez_compressed(path, **arrays)  # type: ignore[arg-type]
        return path
    if not str(path).endswith(".npz"):  # what np.savez would do to a name; a file object gets no suffix
        path = f"{path}.npz"
    # Atomic: a temporary file in the same folder, renamed only once complete (an interrupted save leaves the
    # previous file, or none, never a torn one).
    atomic_write(path, lambda handle: np.savez_compressed(handle, **arrays))  # type: ignore[arg-type]
    return path


def load_model(path: str) -> tuple[Model, dict]:
    """Read a Model written by :func:`save_model` (``allow_pickle=False``).

    Parameters
    ----------
    path : str or path-like
        The ``.npz`` file.

    Returns
    -------
    model : Model
    header : dict
        The JSON header; its ``extra_arrays`` hold the stored extra arrays.

    Raises
    ------
    InputError
        A file that cannot be read as ``.npz``, is not a georecall model (no or a bad header, an unknown
        format, bad ``readout_columns``), or whose arrays do not make a Model (:func:`unflatten`).
    """
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as exc:  # OSError, ValueError, zipfile.BadZipFile, EOFError, ...: the reader's word
        raise InputError(f"cannot read {path!r} as an .npz file: {str(exc).strip()[:200]}") from None
    with data, damaged_input(path, "model file"):  # a damaged member: one line, whatever NumPy raises
        if "__header__" not in data.files:
            raise InputError(f"{path!r} is not a georecall model (no __header__)")
        try:
            header = json.loads(str(data["__header__"]))
        except (json.JSONDecodeError, ValueError) as exc:
            raise InputError(f"{path!r}: the model header is not JSON ({exc.__class__.__name__})") from None
        if not isinstance(header, dict) or not isinstance(header.get("structure"), list):
            raise InputError(f"{path!r}: the model header is not an object with a 'structure' list")
        if header.get("format") != "georecall-model-1":
            raise InputError(f"{path!r}: unknown model format {header.get('format')!r}")
        arrays = {
            key.replace("__", "."): data[key]
            for key in data.files
            if key != "__header__" and not key.startswith("extra____")
        }
        header["extra_arrays"] = {
            key[len("extra____") :]: data[key] for key in data.files if key.startswith("extra____")
        }
    columns = header.get("readout_columns")
    if columns is not None and (not isinstance(columns, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c < 2**62 for c in columns)):
        raise InputError(f"{path!r}: the model header's readout_columns is not a list of coordinates "
                         f"(integers >= 0)")
    model = unflatten(header["structure"], arrays, meta=header.get("meta", {}),
                      readout_columns=None if columns is None else np.array(columns, dtype=np.int64))
    return model, header
