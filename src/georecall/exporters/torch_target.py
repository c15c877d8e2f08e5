"""``--to torch``: a PyTorch ``nn.Module`` with its ``state_dict`` in the documented format.

The folder holds ``config.json`` (what the module needs: sizes, per-layer attention kind, heads, widths and
``attention_scale`` = β, MLP widths, positions, dtype; and, for the way back, the compact read-out's columns
and the model's ``meta``), ``state_dict.pt`` (the keys and layouts of docs/model_format.md, "From and to
PyTorch", as ``georecall.state_dict.to_state_dict`` writes them, with each softmax layer's β kept as its
``attention_scale`` so that ``q_proj`` is ``W_Q`` itself) and ``georecall_module.py`` (the module, which
imports only torch: :mod:`georecall.exporters.torch_module`). :func:`import_folder` reads a folder back
into a Model, bit for bit the exported one (``import ∘ export = identity``).

The module computes, per layer, ``v = x W_V``, ``a = softmax(attention_scale·q kᵀ)`` (or ``1/(t + 1)``),
``z = a v``, ``y = x + concat(z) W_O``, ``x = y + fc2(ReLU(fc1(y)))``: the order of
:mod:`georecall.exporters.graph`.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import shutil
import sys

import numpy as np

from georecall.constructions.model import Model, unflatten
from georecall.errors import InputError
from georecall.exporters.graph import Graph, exportable, graph_of
from georecall.state_dict import from_state_dict, to_state_dict

__all__ = ["config_of", "graph", "import_folder", "require", "runner", "save_state", "write"]

MODULE_FILE = "georecall_module.py"


def _torch():
    try:
        import torch
    except ImportError:
        raise InputError("--to torch needs PyTorch: pip install '.[export]' in a clone of georecall (CPU: "
                         "pip install torch==2.13.0 first)") from None
    return torch


def config_of(model: Model, dtype) -> dict:
    """The module's ``config.json`` for ``model``.

    Parameters
    ----------
    model : Model
    dtype : numpy dtype

    Returns
    -------
    dict
    """
    layers = []
    for layer in model.layers:
        att = layer.attention
        spec: dict = {"attention": None, "mlp": 0 if layer.mlp is None else layer.mlp.width}
        if att is not None:
            spec["attention"] = {"kind": att.kind, "heads": att.heads, "d_v": att.W_V.shape[2],
                                 "d_k": None if att.W_Q is None else att.W_Q.shape[2],
                                 "attention_scale": att.inverse_temperature}
        layers.append(spec)
    return {"format": "georecall-torch-1", "N": model.n_entities, "R": model.n_relations, "d": model.d,
            "n_out": model.n_out, "positions": model.max_positions, "layers": layers,
            "dtype": str(np.dtype(dtype)),
            "readout_columns": None if model.readout_columns is None else model.readout_columns.tolist(),
            "meta": model.meta}


def require() -> None:
    """Refuse (``InputError``) when PyTorch is missing."""
    _torch()


def graph(model: Model, dtype) -> Graph:
    """What the module stores and computes (:func:`~georecall.exporters.graph.graph_of`: ``c = β``).

    Parameters
    ----------
    model : Model
        The model to export.
    dtype : numpy dtype
        The target's dtype (every stored array is cast to it).

    Returns
    -------
    Graph

    Raises
    ------
    InputError
        Hard attention (:func:`~georecall.exporters.graph.exportable`).
    """
    exportable(model, "PyTorch")
    return graph_of(model, dtype)


def _state(model: Model) -> dict[str, np.ndarray]:
    """The documented state_dict, with each softmax layer's ``q_proj`` = ``W_Q`` (its β is the layer's
    ``attention_scale`` in config.json)."""
    state = to_state_dict(model)
    for i, layer in enumerate(model.layers):
        att = layer.attention
        if att is not None and att.kind == "softmax":
            assert att.W_Q is not None
            H, d, d_k = att.W_Q.shape
            state[f"layers.{i}.attn.q_proj.weight"] = np.ascontiguousarray(
                att.W_Q.transpose(0, 2, 1).reshape(H * d_k, d))
    return state


def write(model: Model, folder: str, dtype, context: int = 0) -> None:
    """Write ``config.json``, ``state_dict.pt`` and ``georecall_module.py`` into ``folder`` (which exists).

    Parameters
    ----------
    model : Model
    folder : str
    dtype : numpy dtype
        Every array is stored in it.
    context : int
        Unused (the module takes any sequence length its positions allow); the targets' common signature.

    Raises
    ------
    InputError
        PyTorch missing, or a model the module cannot run (hard attention).
    """
    torch = _torch()
    exportable(model, "PyTorch")
    cast = model.astype(np.dtype(dtype))
    state = {key: torch.from_numpy(np.ascontiguousarray(value)) for key, value in _state(cast).items()}
    save_state(torch, state, os.path.join(folder, "state_dict.pt"))
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config_of(cast, dtype), handle, indent=1, default=str)
    shutil.copyfile(os.path.join(os.path.dirname(__file__), "torch_module.py"),
                    os.path.join(folder, MODULE_FILE))


def save_state(torch, state: dict, path: str) -> None:
    """``torch.save(state, path)`` with the disk's refusals kept as ``OSError``: serialised in memory, then
    written by Python. (``torch.save`` to a path on a full disk raises a ``RuntimeError``,
    "PytorchStreamWriter failed writing file ...", which :func:`georecall.io.write_error` cannot tell from a
    bug.)

    Parameters
    ----------
    torch : module
    state : dict
        Name -> tensor.
    path : str
        The file (in the export's temporary folder).
    """
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with open(path, "wb") as handle:
        handle.write(buffer.getbuffer())


def _module_file(folder: str):
    """The folder's own ``georecall_module.py``, imported under a private name."""
    path = os.path.join(folder, MODULE_FILE)
    name = f"_georecall_export_module_{abs(hash(os.path.abspath(path)))}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path!r} is not a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def runner(folder: str, dtype=None):
    """The folder's module, loaded by its own ``load`` (strict), as a function tokens -> logits (NumPy).

    Parameters
    ----------
    folder : str
    dtype : numpy dtype, optional
        Unused (config.json records it); the targets' common signature.

    Returns
    -------
    callable
    """
    torch = _torch()
    module = _module_file(folder).load(folder)

    def run(tokens: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return module(torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64))).numpy()

    return run


def import_folder(folder: str) -> Model:
    """The Model of a ``--to torch`` folder (``georecall.state_dict.from_state_dict`` and config.json).

    Parameters
    ----------
    folder : str

    Returns
    -------
    Model
        With the exported arrays bit for bit, its structure, compact read-out and meta.

    Raises
    ------
    InputError
        A folder without config.json / state_dict.pt, or a read-out nonzero off its recorded columns.
    """
    torch = _torch()
    try:
        with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
            config = json.load(handle)
        state = torch.load(os.path.join(folder, "state_dict.pt"), weights_only=True)
    except (OSError, ValueError) as exc:
        raise InputError(f"{folder!r} is not a georecall torch export: {exc}") from None
    structure, arrays = from_state_dict({k: v.numpy() for k, v in state.items()}, N=int(config["N"]),
                                        heads=1, attention_scale=1.0)
    for i, spec in enumerate(config["layers"]):
        att = spec["attention"]
        if att is None:
            continue
        H, p = int(att["heads"]), f"layers.{i}.attention."
        for name in ("W_V", "W_Q", "W_K"):  # heads=1 gave (1, d, H·w): split the columns into H heads
            if p + name in arrays:
                a = arrays[p + name][0]
                arrays[p + name] = np.ascontiguousarray(a.reshape(a.shape[0], H, -1).transpose(1, 0, 2))
        a = arrays[p + "W_O"][0]
        arrays[p + "W_O"] = np.ascontiguousarray(a.reshape(H, -1, a.shape[1]))
        structure[i]["attention"] = {"kind": att["kind"],
                                     "inverse_temperature": float(att["attention_scale"])}
    columns = config.get("readout_columns")
    if columns is not None:
        U = arrays["unembedding"]
        off = np.ones(U.shape[1], dtype=bool)
        off[columns] = False
        if np.any(U[:, off]):
            raise InputError(f"{folder!r}: the read-out is nonzero off its recorded readout_columns")
        arrays["unembedding"] = np.ascontiguousarray(U[:, columns])
    return unflatten(structure, arrays, meta=config.get("meta", {}),
                     readout_columns=None if columns is None else np.array(columns, dtype=np.int64))
