"""Model files in the public API: ``gr.load`` and ``gr.save`` a model (``.npz``, no pickle, the task table
beside the weights), ``gr.evaluate`` one on every query of its task, ``gr.export`` one to PyTorch,
TransformerLens or ONNX Runtime.

The format is :mod:`georecall.constructions.storage`'s (docs/model_format.md). ``evaluate`` and ``export``
are the commands ``georecall eval`` and ``georecall export`` run from Python
(:func:`georecall.api_command.run_command`); a model given as an object is first written to a temporary
file with its task, so both read exactly what the command line reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from georecall.api_command import Result, run_command

__all__ = ["evaluate", "export", "load", "model_and_task", "model_argument", "model_file", "save"]


def _task_advice(N: object = "N", R: object = "R") -> str:
    """How a Python caller gives a task: the advice of every refusal for a missing task."""
    return f'task=gr.task({N}, {R}, seed=S) with the seed it was built or trained with, or task="TABLE.npy"'


def load(path: str):
    """Read a model file written by :func:`save`, ``gr.train(out=...)``, ``gr.check(save=...)`` or the
    command line.

    Parameters
    ----------
    path : str
        The ``.npz`` file.

    Returns
    -------
    Model
        The weights (:class:`georecall.constructions.model.Model`), ready for :func:`evaluate`,
        :func:`georecall.probe` or the forward pass. The weights only: a task stored in the file, and the
        seed it records, are not kept; give the model file's path to :func:`evaluate` and
        :func:`georecall.probe` to use them, or ``task=gr.task(N, R, seed=S)`` with the recorded seed.

    Raises
    ------
    InputError
        A file that is missing, damaged, or not a georecall model.

    Examples
    --------
    >>> import os, tempfile
    >>> import georecall as gr
    >>> task = gr.task(16, 2)
    >>> path = os.path.join(tempfile.mkdtemp(), "g1.npz")
    >>> path = gr.save(gr.build("geometric", task).model, path, task=task)
    >>> gr.load(path).n_entities
    16
    """
    from georecall.cli.common import input_file  # the commands' wording for a missing file: imported on use
    from georecall.constructions import storage  # numpy and the model: imported when a file is read

    return storage.load_model(input_file(os.fspath(path), "model file"))[0]


def save(model, path: str, *, task=None, **record: Any) -> str:
    """Write ``model`` to ``path`` (``.npz`` added when missing), atomically, without pickle.

    Parameters
    ----------
    model : Model
        The weights (``gr.build(...).model``, ``gr.load(...)``, ``gr.train(...).model``).
    path : str
        Where to write.
    task : Task, optional
        Stored beside the weights (``task_table``), so that :func:`evaluate` and ``georecall eval`` need no
        ``--task``.
    **record
        Facts for the file's header (``k``, ``construction``, ``seed``, ...), each strict JSON (numbers,
        strings, booleans, None, lists and dicts of them; no NaN or infinity).

    Returns
    -------
    str
        The path written (``.npz`` added when missing).

    Raises
    ------
    InputError
        ``model`` is not a Model (a :class:`~georecall.TrainResult` is named: pass ``result.model``); a path
        that cannot be written (a folder, a missing folder: the words of ``georecall check --save``); a
        ``record`` field that is not strict JSON.

    Examples
    --------
    >>> import os, tempfile
    >>> import georecall as gr
    >>> task = gr.task(16, 2)
    >>> path = os.path.join(tempfile.mkdtemp(), "g1.npz")
    >>> gr.save(gr.build("geometric", task).model, path, task=task, construction="G1") == path
    True
    """
    from georecall.cli.common import output_path  # the commands' check of --save and --out: imported on use
    from georecall.constructions import storage  # as in load()
    from georecall.errors import InputError  # imported with the model

    model = model_argument(model, "save", paths=False)
    path = output_path(path, suffix=".npz", what="model file")
    for key, value in record.items():  # the header is read back as strict JSON: no repr, no bare NaN
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InputError(f"save: record field {key!r} = {_short_repr(value)} is not strict JSON "
                             f"({exc})") from None
    extra = {} if task is None else {"task_table": task.table}
    if task is not None:
        record = {"N": task.N, "R": task.R, **record}
    return storage.save_model(model, path, extra_arrays=extra, **record)


def _short_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def model_argument(model: Any, what: str, *, paths: bool = True) -> Any:
    """``model`` when it is a Model (or, with ``paths``, a model file's path, returned as a string); else a
    one-line refusal naming the verb and what was given, the same for every verb that takes a model.

    Parameters
    ----------
    model : Model or str or path-like
        The argument given.
    what : str
        The calling verb, for messages.
    paths : bool
        Whether a model file's path is accepted.

    Returns
    -------
    Model or str
        The model, or the path.

    Raises
    ------
    InputError
        Anything else; a result holding a model (``gr.train``'s :class:`~georecall.TrainResult`,
        ``gr.build``'s result) is told to pass ``result.model``.
    """
    if paths and isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    from georecall.constructions.model import Model  # the check of the argument's type, when one is given
    from georecall.errors import InputError  # imported with the model

    if isinstance(model, Model):
        return model
    takes = "a Model or a model file's path" if paths else "a Model"
    got = type(model).__name__
    if isinstance(getattr(model, "model", None), Model):  # gr.train's TrainResult, gr.build's result
        hint = " (gr.train returns a TrainResult)" if got == "TrainResult" else ""
        raise InputError(f"{what} takes {takes}, got {got}: pass result.model{hint}")
    raise InputError(f"{what} takes {takes}, got {got}")


@contextlib.contextmanager
def model_file(model, task, what: str, **record: Any) -> Iterator[str]:
    """``model`` itself when it is a path; else a temporary model file holding it (and ``task``).

    Parameters
    ----------
    model : Model or path
        The model, or its file.
    task : Task or None
        Stored beside a model written here.
    what : str
        The calling function, for messages.
    **record
        Further fields of the file written.
    """
    model = model_argument(model, what)
    if isinstance(model, str):
        yield model
        return
    with tempfile.TemporaryDirectory(prefix="georecall-") as folder:
        path = os.path.join(folder, "model.npz")
        save(model, path, task=task, **record)
        yield path


def _task_argument(task: Any, what: str) -> Any:
    """``task`` when it is None or a Task; a task table file's path as a string; else a one-line refusal
    naming the verb and what was given.

    Parameters
    ----------
    task : Task or str or path-like or None
        The argument given.
    what : str
        The calling verb, for messages.

    Returns
    -------
    Task or str or None

    Raises
    ------
    InputError
        Anything else.
    """
    if task is None:
        return None
    if isinstance(task, (str, os.PathLike)):
        return os.fspath(task)
    from georecall.errors import InputError  # imported with the model
    from georecall.theory.tasks import Task  # the check of the argument's type, when one is given

    if isinstance(task, Task):
        return task
    raise InputError(f"{what} takes task=gr.task(N, R, seed=S) or a task table's path (task=\"TABLE.npy\"), "
                     f"got {type(task).__name__}")


@contextlib.contextmanager
def model_and_task(model, task, what: str) -> Iterator[tuple[str, str | None]]:
    """The model file and the task table file (or None: the model file's own) a command reads for
    ``model`` and ``task``, the same for every verb that takes both (:func:`evaluate`,
    :func:`georecall.probe`).

    A Model object is written to a temporary file, with a Task beside it; a Task given beside a model file
    is written to a temporary table; a table's path is the command's ``--task``. Whichever way they come,
    the command reads them and refuses a task of other sizes as the command line does.

    Parameters
    ----------
    model : Model or str or path-like
        The weights, or a model file's path.
    task : Task or str or path-like or None
        The task, a task table's path (``.npy``), or None (the model file's own).
    what : str
        The calling verb, for messages.

    Yields
    ------
    tuple of (str, str or None)
        The model file's path and the task table's path (None: the model file stores its task).

    Raises
    ------
    InputError
        ``model`` or ``task`` of another type; a Model object without a task; a model file that stores no
        task, given none (raised from the body, in Python's words: ``task=gr.task(N, R, seed=S)`` or
        ``task="TABLE.npy"``).
    """
    from georecall.errors import InputError  # imported with the model

    model = model_argument(model, what)
    task = _task_argument(task, what)
    if task is None and not isinstance(model, str):
        N, R = model.n_entities, model.n_relations
        raise InputError(f"{what} needs the task of a Model object (N = {N}, R = {R}): {_task_advice(N, R)} "
                         "(a Model holds no task, not even one read by gr.load: pass the model file's path "
                         "for its own)")
    with contextlib.ExitStack() as stack:
        stored = task if not isinstance(task, str) else None  # a Task goes inside a model written here
        path = stack.enter_context(model_file(model, None if isinstance(model, str) else stored, what))
        table_path = task if isinstance(task, str) else None
        if isinstance(model, str) and stored is not None:  # a file, and a Task given beside it
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="georecall-"))
            table_path = os.path.join(folder, "task.npy")
            import numpy as np  # a task given beside a file: written for the command to read

            np.save(table_path, stored.table)
        try:
            yield path, table_path
        except InputError as exc:  # the command's "stores no task table", with Python's advice
            if task is None and exc.args and "stores no task table" in str(exc.args[0]):
                exc.args = (f"{model!r} stores no task table: pass {_task_advice()}", *exc.args[1:])
            raise


def evaluate(model, *, task=None, k: int | None = None, cot: bool = False, arith: str = "exact",
             **options: Any) -> Result:
    """Accuracy and logit margins of a model on every query of its task, overall and per relation: what
    ``georecall eval`` prints.

    Every margin is an interval ``[lo, hi]`` that contains the exact margin of the stored weights (``arith =
    "exact"``); a query counts as right when its exact margin is positive.

    Parameters
    ----------
    model : Model or str
        The weights, or a model file's path.
    task : Task or str, optional
        The task (:func:`georecall.task`, with the seed the model was built or trained with), or a task
        table's path (``.npy``, R × N), used for a model given as a path or as an object. Needed for a Model
        object (a Model holds no task: :func:`load` keeps the weights only) and for a file that stores none;
        for a file that stores its task it replaces that one. A task of other sizes than the model's is
        refused, as ``georecall eval --task`` refuses it.
    k : int, optional
        Hops of the queries (default: the k the file records, else 1).
    cot : bool
        Greedy chain-of-thought decoding.
    arith : {"exact", "float64", "float32", "float16"}
        Exact (the stored weights' own function), or the verdict of a computation in that dtype.
    **options
        The rest of ``georecall eval``'s options.

    Returns
    -------
    Result
        ``result["accuracy"]``, ``result["min_margin"]``, ``result["per_relation"]``, ...

    Raises
    ------
    InputError
        ``model`` neither a Model nor a path (:func:`model_argument`), ``task`` neither a Task nor a path, a
        missing or damaged file, no task, or sizes that do not fit the task.

    Examples
    --------
    >>> import os, tempfile
    >>> import georecall as gr
    >>> task = gr.task(16, 2)
    >>> result = gr.evaluate(gr.build("geometric", task).model, task=task)
    >>> result["accuracy"], result["queries"]
    (1.0, 32)

    A trained model's file stores its task (seed included); its loaded Model does not, so evaluate the file,
    or give the task of the run's seed (``TrainResult.task`` is it):

    >>> path = os.path.join(tempfile.mkdtemp(), "m.npz")
    >>> trained = gr.train(N=8, R=2, d=16, steps=300, seed=1, out=path)
    >>> gr.evaluate(path)["accuracy"], gr.evaluate(gr.load(path), task=gr.task(8, 2, seed=1))["accuracy"]
    (1.0, 1.0)
    >>> gr.evaluate(trained.model, task=trained.task)["accuracy"]
    1.0
    """
    with model_and_task(model, task, "evaluate") as (path, table_path):
        return run_command("eval", model=path, task=table_path, k=k, cot=cot, arith=arith, **options)


_EXPORT_LIBRARIES = {"torch": ("torch",), "transformer-lens": ("torch", "transformer_lens"),
                     "onnx": ("onnx", "onnxruntime")}


def export(out: str, *, to: str = "torch", construction: str | None = None, model: str | None = None,
           N: int | None = None, R: int | None = None, k: int | None = None, **options: Any) -> Result:
    """Write a construction built for a task (or a model file) as a new folder ``out`` for PyTorch,
    TransformerLens or ONNX Runtime, then load it with that library and check every query there: what
    ``georecall export`` does (docs/export.md).

    Needs the ``export`` extra, installed from a clone of georecall (it is not on the package index):
    ``pip install '.[export]'``.

    Parameters
    ----------
    out : str
        The folder to create (must not exist).
    to : {"torch", "transformer-lens", "onnx"}
        The target library.
    construction : str, optional
        A construction to build on THE seeded task (default ``"geometric"``; not with ``model``).
    model : str, optional
        A model file to export instead.
    N, R, k : int, optional
        Sizes of the construction's task (defaults as ``georecall export``).
    **options
        The rest of ``georecall export``'s options (``seed``, ``codes``, ``D``, ``dtype``, ``no_check``, ...).

    Returns
    -------
    Result
        ``result.passed``: every query checked in the target agrees with georecall.

    Raises
    ------
    ImportError
        The target's library is not installed (the message gives the install line).
    InputError
        ``out`` exists, an unknown target or construction, or bad sizes.

    Examples
    --------
    >>> import os, tempfile
    >>> import georecall as gr
    >>> out = os.path.join(tempfile.mkdtemp(), "g1")
    >>> try:
    ...     result = gr.export(out, to="onnx", N=16, R=2)
    ... except ImportError as exc:
    ...     print("pip install '.[export]'" in str(exc))
    ... else:
    ...     print(result.passed)
    True
    """
    import importlib.util

    from georecall.errors import InputError  # imported with the command

    if to not in _EXPORT_LIBRARIES:
        raise InputError(f"export: to must be one of {', '.join(_EXPORT_LIBRARIES)}, got {to!r}")
    missing = [name for name in _EXPORT_LIBRARIES[to] if importlib.util.find_spec(name) is None]
    if missing:
        raise ImportError(f"export to {to} needs {', '.join(missing)}: the export extra, installed from a "
                          "clone of georecall (it is not on the package index): pip install '.[export]'")
    return run_command("export", out=out, to=to, construction=construction, model=model, N=N, R=R, k=k,
                       **options)
