"""Doors out: a georecall model (a construction built for a task, or any model file) exported to PyTorch,
TransformerLens or ONNX Runtime, and checked there by running every query in the target's own library.

One module per target (:mod:`.torch_target`, :mod:`.lens`, :mod:`.onnx_target`), each with the same four
functions: ``require()`` (its libraries are installed), ``graph(model, dtype)`` (what it stores and computes,
refusing what it cannot run), ``write(model, folder, dtype, context)`` and ``runner(folder, dtype)`` (the
folder loaded by the target's own library, as tokens -> logits). The computation they all run and its
rounding bound are written once (:mod:`.graph`), the check in the target once (:mod:`.check`). Only these
modules import torch, transformer_lens, onnx or onnxruntime, and only when a target is used (the ``export``
extra for torch and ONNX, ``export-tl`` for TransformerLens: ``pip install '.[export]'`` or
``'.[export-tl]'`` in a clone of georecall)::

    from georecall.exporters import export, query_set
    report = export(model, "transformer-lens", "OUT", queries=query_set(task), promise=built.promise)

writes ``OUT`` (a new folder, created atomically: written under a temporary name beside it and renamed when
complete) and returns the check's report (docs/export.md).
"""

from __future__ import annotations

import importlib
import os
import shutil
import tempfile
import warnings

import numpy as np

from georecall import __version__
from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.exporters.check import QuerySet, check_in_target, query_set
from georecall.io import check_path, signals_deferred, strict_json, temporary_prefix, write_error
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task

__all__ = ["TARGETS", "QuerySet", "check_folder", "export", "query_set", "require", "require_representable",
           "supports", "validate_out"]

TARGETS = ("torch", "transformer-lens", "onnx")
RECORD_FILE = "georecall.json"
TASK_FILE = "task.npy"


def _target(name: str):
    """The target's module (each has ``require``, ``graph``, ``write``, ``runner``)."""
    if name not in TARGETS:
        raise InputError(f"unknown export target {name!r}: one of {', '.join(TARGETS)}")
    module = {"torch": "torch_target", "transformer-lens": "lens", "onnx": "onnx_target"}[name]
    return importlib.import_module(f"georecall.exporters.{module}")


def require(to: str) -> None:
    """Refuse, before any work, a target whose libraries are not installed.

    Parameters
    ----------
    to : str
        One of :data:`TARGETS`.

    Raises
    ------
    InputError
        An unknown target, or its library missing (naming the extra to install).
    """
    _target(to).require()


def supports(model: Model, to: str) -> None:
    """Refuse a model the target cannot run exactly (hard attention), before any file is written.

    Parameters
    ----------
    model : Model
    to : str
        One of :data:`TARGETS`.

    Raises
    ------
    InputError
        Naming the layer and the reason.
    """
    _target(to).graph(model, "float64")


def validate_out(out: str) -> str:
    """Refuse, before any work, an output folder that exists or whose parent is missing or not writable.

    Parameters
    ----------
    out : str

    Returns
    -------
    str
        The absolute path.

    Raises
    ------
    InputError
    """
    if not out:
        raise InputError("export: an output folder is required")
    path = os.path.abspath(out)
    if os.path.lexists(path):
        raise InputError(f"output folder {out!r} exists: remove it or name a new one")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise InputError(f"output folder {out!r}: its parent {parent!r} is not a folder")
    # the folder is first written under ".<name>.tmp-<pid>-XXXXXXXX": refused now, not after the work
    check_path(path, what="output folder", names_beside=(temporary_prefix(path) + "X" * 8,), room_below=64)
    try:
        probe = tempfile.mkdtemp(prefix=".georecall-probe-", dir=parent)
    except OSError as exc:  # a full or read-only disk in the writer's words, naming the folder
        refusal = write_error(exc, out)
        raise (refusal if refusal is not None else
               InputError(f"output folder {out!r}: cannot write in {parent!r} ({exc.strerror or exc})")) \
            from None
    os.rmdir(probe)
    return path


def check_folder(model: Model, to: str, folder: str, queries: QuerySet, *, dtype="float32",
                 promise: Promise | None = None) -> dict:
    """Load an export folder with the target's library and check every query (:mod:`.check`).

    Parameters
    ----------
    model : Model
        The exported georecall model.
    to : str
        The target (one of :data:`TARGETS`).
    folder : str
        The folder the target's files are in.
    queries : QuerySet
    dtype : numpy dtype
        The exported dtype.
    promise : Promise, optional
        A construction's promise.

    Returns
    -------
    dict
        The check's report.
    """
    module = _target(to)
    return check_in_target(model, module.graph(model, dtype), module.runner(folder, dtype), queries,
                           target=to, promise=promise)


def require_representable(model: Model, dtype) -> None:
    """Refuse weights that the target's ``dtype`` cannot hold, and warn of those it flushes to zero.

    A finite weight beyond the dtype's largest would be stored as ±inf (the target then computes NaN, and
    the check fails with nothing to say why): refused, naming the array. A nonzero weight below the dtype's
    smallest subnormal is stored as 0: allowed (the check still compares the target with georecall within
    the stated rounding bound, which such a weight is inside), with a warning naming the array and how many.

    Parameters
    ----------
    model : Model
    dtype : numpy dtype
        The exported dtype.

    Raises
    ------
    InputError
        An array with finite values beyond ``dtype``'s range.
    """
    dtype = np.dtype(dtype)
    flushed = []
    for name, array in model.arrays().items():
        if array.dtype.itemsize <= dtype.itemsize:
            continue
        with np.errstate(over="ignore", under="ignore"):
            cast = array.astype(dtype)
        if not np.isfinite(cast[np.isfinite(array)]).all():
            raise InputError(f"{name} holds values beyond {dtype}'s largest ({np.finfo(dtype).max:g}): "
                             f"the target would store them as inf; export with --dtype float64")
        zeroed = int(np.count_nonzero((cast == 0) & (array != 0)))
        if zeroed:
            flushed.append(f"{name} ({zeroed:,})")
    if flushed:
        warnings.warn(f"nonzero weights below {dtype}'s smallest subnormal are stored as 0: "
                      f"{', '.join(flushed)}", UserWarning, stacklevel=2)


def export(model: Model, to: str, out: str, *, queries: QuerySet, task: Task | None = None,
           dtype="float32", promise: Promise | None = None, check: bool = True,
           record: dict | None = None) -> dict:
    """Export ``model`` to the target ``to`` as the new folder ``out``, checked there first.

    The folder is written under a temporary name beside ``out``, the target's files loaded back by the
    target's own library and every query run (unless ``check`` is False), then ``georecall.json`` (the
    record: parameters, version, token ids, the check's report) and ``task.npy`` (the task, when given) are
    added and the folder renamed to ``out``. On any error nothing is left at ``out``.

    Parameters
    ----------
    model : Model
    to : str
        "torch", "transformer-lens" or "onnx".
    out : str
        The folder to create (it must not exist).
    queries : QuerySet
        Every query of the task (:func:`query_set`), for the check and the sequence length.
    task : Task, optional
        Stored as ``task.npy`` (an ``(R, N)`` table).
    dtype : str or numpy dtype
        float32 or float64: every array is stored, and the target computes, in it.
    promise : Promise, optional
        A construction's promise: the check then requires every answer right and its margin.
    check : bool
        Run the check in the target.
    record : dict, optional
        JSON-able parameters for ``georecall.json`` (construction, N, R, k, seed, ...).

    Returns
    -------
    dict
        ``{"out", "target", "dtype", "files", "check"}`` (``check`` None when skipped).

    Raises
    ------
    InputError
        A bad target or dtype, an existing ``out`` or an unwritable parent, a missing library, a model the
        target cannot run (hard attention), or weights beyond ``dtype``'s range
        (:func:`require_representable`).
    """
    if np.dtype(dtype) not in (np.float32, np.float64):
        raise InputError(f"dtype must be float32 or float64, got {dtype!r}")
    module = _target(to)
    path = validate_out(out)
    module.graph(model, dtype)  # refuses what the target cannot run, before any file
    require_representable(model, dtype)
    tmp = None
    try:  # the temporary folder is made inside the protected block: removed whatever instant a signal lands
        with signals_deferred():  # no signal between the folder's creation and ``tmp`` naming it
            tmp = tempfile.mkdtemp(prefix=temporary_prefix(path), dir=os.path.dirname(path))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # a folder as mkdir would make it (mkdtemp's is private)
        module.write(model, tmp, dtype, queries.longest)
        report = check_folder(model, to, tmp, queries, dtype=dtype, promise=promise) if check else None
        if task is not None:
            np.save(os.path.join(tmp, TASK_FILE), np.asarray(task.table), allow_pickle=False)
        info = {"format": "georecall-export-1", "version": __version__, "target": to,
                "dtype": str(np.dtype(dtype)), "record": record or {}, "meta": model.meta,
                "vocabulary": {"N": model.n_entities, "R": model.n_relations,
                               "tokens": "entity s is token s, relation r is token N + r",
                               "order": "<r_k, ..., r_1, s>: the subject last; logits at the last position"},
                "queries": {"k": queries.k, "decoding": "greedy" if queries.greedy else "last",
                            "count": int(queries.prompts.shape[0])},
                "check": report}
        with open(os.path.join(tmp, RECORD_FILE), "w", encoding="utf-8") as handle:
            handle.write(strict_json(info, indent=1, default=str))  # a non-finite number is null, never NaN
        files = sorted(os.listdir(tmp))
        try:
            os.rename(tmp, path)
        except OSError as exc:
            raise InputError(f"cannot create the output folder {out!r}: {exc.strerror or exc}") from None
    except BaseException as exc:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        refusal = write_error(exc, path)  # a full or read-only disk: one line naming the folder
        if refusal is not None:
            raise refusal from None
        raise
    return {"out": path, "target": to, "dtype": str(np.dtype(dtype)), "files": files, "check": report}
