"""The canonical object: a Model (or a construction's family) rebuilt from plain values, and its fingerprint
(docs/certify.md, "What CERTIFIED speaks of").

Before ``certify`` assembles or checks anything, and before ``check`` reports and ``save_model`` writes, the
model is made canonical: every array THE forward pass reads becomes a plain, read-only ``numpy.ndarray`` of a
supported floating dtype in native byte order (a copy, never a subclass), every scalar an exact Python
``str``/``float``/``int`` of its declared set (attention kinds validated against ``ATTENTION_KINDS``), and
every object is new, so no cache (``Attention.value_outputs``, ``Model.readout``) survives: each is recomputed
from the canonical arrays. :func:`model_fingerprint` is a SHA-256 over those arrays (name, dtype, shape,
bytes) and scalars: two canonical models with one fingerprint compute the same function (up to a collision).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import numbers

import numpy as np

from georecall.constructions.model import (
    ATTENTION_KINDS,
    MLP,
    Attention,
    Layer,
    Model,
    forward_fields,
)
from georecall.errors import InputError

__all__ = [
    "SUPPORTED_DTYPES",
    "canonical_array",
    "canonical_family",
    "canonical_model",
    "exact_float",
    "exact_str",
    "model_fingerprint",
]

SUPPORTED_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


def exact_str(value, name: str, allowed: tuple[str, ...] | None = None) -> str:
    """``value`` as an exact ``str`` (a subclass converted with ``str.__str__``, which runs none of its
    methods), validated against ``allowed``.

    Parameters
    ----------
    value : str
    name : str
        For the message.
    allowed : tuple of str, optional
        The declared set.

    Returns
    -------
    str

    Raises
    ------
    InputError
        Not a str, or not in ``allowed``.
    """
    if not isinstance(value, str):
        raise InputError(f"{name} must be a string, got {type(value).__name__}")
    exact = str.__str__(value)
    if allowed is not None and exact not in allowed:
        raise InputError(f"{name} must be one of {allowed}, got {exact!r}")
    return exact


def exact_float(value, name: str) -> float:
    """``value`` as an exact, finite Python ``float`` (a float subclass read with ``float.__float__``, so an
    overridden ``__float__`` is never called; integers and NumPy numbers converted exactly or refused).

    Parameters
    ----------
    value : numbers.Real
    name : str

    Returns
    -------
    float

    Raises
    ------
    InputError
        Not a real number, a bool, not finite, or an integer that float64 does not hold exactly.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InputError(f"{name} must be a number, got {value!r}")
    if isinstance(value, float):
        exact = float.__float__(value)
    elif isinstance(value, numbers.Integral):
        integer = int.__index__(value.__index__())
        exact = float(integer)
        if int(exact) != integer:
            raise InputError(f"{name} = {integer} is not exact in float64")
    elif isinstance(value, np.floating):
        exact = float(np.float64(value))
    else:
        raise InputError(f"{name} must be a float, an integer or a NumPy number, got {type(value).__name__}")
    if not math.isfinite(exact):
        raise InputError(f"{name} must be finite, got {exact}")
    return exact


def canonical_array(value, name: str, *, integer: bool = False, copy: bool = True) -> np.ndarray:
    """A plain, read-only ``numpy.ndarray`` holding ``value``'s entries: a supported floating dtype
    (:data:`SUPPORTED_DTYPES`; ``integer``: int64) in native byte order.

    Parameters
    ----------
    value : array-like
    name : str
        For the message.
    integer : bool
        An index array (int64) instead of weights.
    copy : bool
        Copy always (the default). False: an array that is already plain (``type(a) is np.ndarray`` down its
        chain of bases), of the dtype, C-contiguous and read-only throughout is taken as it is (for a family
        georecall itself builds, whose large tables nobody else holds).

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    InputError
        An unsupported dtype (object, complex, strings, ...).
    """
    given = value if type(value) is np.ndarray else np.array(value, copy=True)  # subok=False: plain
    if integer:
        if given.size and given.dtype.kind not in "iu":
            raise InputError(f"{name} must hold integers, got dtype {given.dtype}")
        dtype: np.dtype = np.dtype(np.int64)
    else:
        dtype = given.dtype.newbyteorder("=") if given.dtype.kind == "f" else given.dtype
        if given.dtype.kind in "iub":
            dtype = np.dtype(np.float64)
        if dtype not in SUPPORTED_DTYPES:
            raise InputError(f"{name} has dtype {given.dtype}: supported are float16, float32 and float64")
    if not copy and _plain_read_only(value) and value.dtype == dtype and value.flags.c_contiguous:
        return value
    out = np.array(given, dtype=dtype, copy=True, order="C")
    assert type(out) is np.ndarray
    out.setflags(write=False)
    return out


def _plain_read_only(value) -> bool:
    current = value
    if type(current) is not np.ndarray:
        return False
    while isinstance(current, np.ndarray):
        if type(current) is not np.ndarray or current.flags.writeable:
            return False
        current = current.base
    return current is None or isinstance(current, (bytes, memoryview))


def canonical_model(model: Model, *, copy: bool = True) -> Model:
    """The canonical object of ``model`` (module docstring): new ``Model``, ``Layer``, ``Attention`` and
    ``MLP`` objects (base classes, so no subclass method and no pre-filled cache survives) from canonical
    arrays and exact scalars. ``meta`` (never read by THE forward pass) is copied as a plain dict.

    Parameters
    ----------
    model : Model
    copy : bool
        See :func:`canonical_array`.

    Returns
    -------
    Model

    Raises
    ------
    InputError
        A field of an unsupported type or dtype, an attention kind outside ``ATTENTION_KINDS``.
    """
    if not isinstance(model, Model):
        raise InputError(f"a model must be a georecall Model, got {type(model).__name__}")

    made: dict[int, object] = {}  # by the original object's id: a part (or array) shared stays shared
    keep = []  # the originals, alive while their ids are keys

    def arr(value, name: str):
        if value is None:
            return None
        if id(value) not in made:
            keep.append(value)
            made[id(value)] = canonical_array(value, name, copy=copy)
        return made[id(value)]

    def part(original, make):
        if original is None:
            return None
        if id(original) not in made:
            keep.append(original)
            made[id(original)] = make(original)
        return made[id(original)]

    layers = []
    layer_list = list(tuple.__iter__(model.layers)) if isinstance(model.layers, tuple) else list(model.layers)
    for i, layer in enumerate(layer_list):
        new_att = part(layer.attention, lambda att: Attention(
            exact_str(att.kind, f"layers.{i}.attention.kind", ATTENTION_KINDS),
            arr(att.W_V, "W_V"), arr(att.W_O, "W_O"), arr(att.W_Q, "W_Q"), arr(att.W_K, "W_K"),
            exact_float(att.inverse_temperature, f"layers.{i}.attention.inverse_temperature")))
        new_mlp = part(layer.mlp, lambda mlp: MLP(arr(mlp.W1, "W1"), arr(mlp.b1, "b1"), arr(mlp.W2, "W2"),
                                                  arr(mlp.b2, "b2")))
        layers.append(Layer(new_att, new_mlp))
    columns = model.readout_columns
    return Model(arr(model.entity_embedding, "entity_embedding"),
                 arr(model.relation_embedding, "relation_embedding"), arr(model.unembedding, "unembedding"),
                 tuple(layers), arr(model.position_embedding, "position_embedding"),
                 meta=dict(model.meta) if isinstance(model.meta, dict) else {},
                 readout_columns=None if columns is None else canonical_array(columns, "readout_columns",
                                                                             integer=True, copy=copy))


def canonical_family(family, *, copy: bool = True):
    """A construction's family (``constructions.encoding.Family``) with its model canonical
    (:func:`canonical_model`), its codebook's vectors a canonical array, its sizes exact ints and its
    constants exact scalars.

    Parameters
    ----------
    family : Family
    copy : bool
        See :func:`canonical_array`.

    Returns
    -------
    Family

    Raises
    ------
    InputError
        As :func:`canonical_model`; a size that is not an integer; a constant that is not a number or string.
    """
    def size(value, name):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise InputError(f"the family's {name} must be an integer, got {value!r}")
        return int.__index__(value.__index__())

    constants: dict[str, str | bool | int | float] = {}
    for key, value in dict(family.constants).items():
        key = exact_str(key, "a family constant's name")
        if isinstance(value, str):
            constants[key] = exact_str(value, f"constant {key}")
        elif isinstance(value, (bool, np.bool_)):
            constants[key] = bool(value)
        elif isinstance(value, numbers.Integral):
            constants[key] = size(value, f"constant {key}")
        elif isinstance(value, numbers.Real):
            constants[key] = exact_float(value, f"constant {key}")
        else:
            constants[key] = value  # reports only (certify reads gate, beta, step_scale: numbers)
    vectors = canonical_array(family.codes.vectors, "the codebook", copy=copy)
    codes = dataclasses.replace(family.codes, vectors=vectors,
                                kind=exact_str(family.codes.kind, "the codebook's kind"))
    return dataclasses.replace(family, model=canonical_model(family.model, copy=copy), codes=codes,
                               constants=constants, N=size(family.N, "N"), R=size(family.R, "R"),
                               k=size(family.k, "k"),
                               attributes=exact_str(family.attributes, "attributes", ("shared", "disjoint")))


def model_fingerprint(model: Model) -> str:
    """A SHA-256 over the model's forward fields as plain values, ``sha256:<hex>``: each array's name, dtype,
    shape and bytes read through a base-class view (no subclass method runs, nothing of the array's size is
    copied: at N = 2^20 a check's entity table is hashed in row blocks), each scalar as its exact value
    (``exact_str``, ``exact_float``). Equal for a model and its :func:`canonical_model` when its arrays
    are already of a supported dtype in native byte order.

    Parameters
    ----------
    model : Model

    Returns
    -------
    str

    Raises
    ------
    InputError
        A scalar that is not of its declared type (as :func:`canonical_model`).
    """
    digest = hashlib.sha256(b"georecall-model-fingerprint-1\0")
    for name, value in forward_fields(model).items():
        digest.update(name.encode() + b"\0")
        if isinstance(value, np.ndarray):
            array = np.ndarray.view(value, np.ndarray)  # the raw buffer, as the base class reads it
            if name != "readout_columns" and array.dtype.kind in "iub":
                array = array.astype(np.float64)  # as canonical_model stores it (never an entity table)
            elif name == "readout_columns":
                array = array.astype(np.int64)
            digest.update(f"{array.dtype.newbyteorder('=').str}{array.shape}".encode())
            rows = max(1, 2**24 // max(1, array[0].nbytes)) if array.ndim and len(array) else 1
            for start in range(0, len(array) if array.ndim else 1, rows):
                part = array[start : start + rows] if array.ndim else array
                digest.update(np.ascontiguousarray(part, dtype=part.dtype.newbyteorder("=")).tobytes())
        elif name.endswith(".kind"):
            digest.update(repr(exact_str(value, name)).encode())
        elif name.endswith(".inverse_temperature"):
            digest.update(repr(exact_float(value, name)).encode())
        else:
            digest.update(repr(value).encode())
    return "sha256:" + digest.hexdigest()
