"""Saving and loading a Model: the ``.npz`` format of docs/model_format.md, written by :func:`save_model`
without pickle and read back by :func:`load_model` (``allow_pickle=False``) through
``constructions.model.unflatten``.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np

from georecall import __version__
from georecall.constructions.canonical import model_fingerprint
from georecall.constructions.model import Model, forward_fields, structure_of, unflatten
from georecall.errors import InputError
from georecall.io import atomic_write, damaged_input, parse_json

__all__ = ["load_model", "save_model"]


def save_model(model: Model, path, extra_arrays: dict[str, np.ndarray] | None = None, **record) -> str:
    """Write a Model to ``.npz`` without pickle: every array under its ``Model.arrays()`` name, plus a JSON
    header (layer structure, attention kinds and temperatures, the compact read-out's columns, ``meta``, the
    package version, ``record`` and the model's ``fingerprint`` (``constructions.canonical.
    model_fingerprint``), which ``eval`` compares with the model it reads back).

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
        "fingerprint": model_fingerprint(model),  # of the arrays written (docs/certify.md); eval compares
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
    if os.path.isfile(path) and not zipfile.is_zipfile(path):  # np.load would read a .npy, or talk pickle
        raise InputError(f"{path!r} is not a readable .npz file (not a zip archive: a model file is an .npz, "
                         "docs/model_format.md)")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as exc:  # OSError, ValueError, zipfile.BadZipFile, EOFError, ...: the reader's word
        raise InputError(f"cannot read {path!r} as an .npz file: {str(exc).strip()[:200]}") from None
    with data, damaged_input(path, "model file"):  # a damaged member: one line, whatever NumPy raises
        if "__header__" not in data.files:
            raise InputError(f"{path!r} is not a georecall model (no __header__)")
        header = parse_json(str(data["__header__"]), path, "the model header")
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
    meta = header.get("meta", {})
    if not isinstance(meta, dict):
        raise InputError(f"{path!r}: the model header's meta is a {type(meta).__name__}, not an object")
    with damaged_input(path, "model file"):  # arrays or a structure that make no Model: one line
        try:
            model = unflatten(header["structure"], arrays, meta=meta,
                              readout_columns=None if columns is None else np.array(columns, dtype=np.int64))
        except InputError as exc:  # the array's own refusal ("b1 has non-finite entries"), naming the file
            raise InputError(f"{path!r}: {exc}") from None
    return model, header
