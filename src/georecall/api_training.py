"""Training and probing in the public API: ``gr.train`` (the NumPy trainer on every fact of THE task) and
``gr.probe`` (superposition readout, linear probes, interventions and unit selectivity of a model).

Both are the commands ``georecall train`` and ``georecall probe`` run from Python
(:func:`georecall.api_command.run_command`), so their defaults, memory estimates and results are the command
line's; ``train`` also hands back the trained model.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from georecall.api_command import Result, run_command
from georecall.api_models import load, model_argument, model_file

__all__ = ["TrainResult", "probe", "train"]


class TrainResult(Result):
    """The result of :func:`train`: the command's document and the trained model.

    Attributes
    ----------
    model : Model
        The trained weights (what ``--out`` would write).
    reached : bool
        Every training query answered (exactly, on the trained weights' own function).
    passed : bool
        The command's outcome, as for every command: training ran (``georecall train`` exits 0 whether or not
        it memorized). Whether it memorized is ``reached``.

    Examples
    --------
    >>> import georecall as gr
    >>> result = gr.train(N=8, R=2, d=16, steps=300)
    >>> result.reached, result.model.n_entities, result["final_accuracy"]["accuracy"]
    (True, 8, 1.0)
    >>> short = gr.train(N=64, R=4, d=4, steps=2)  # too narrow and too short to memorize
    >>> short.passed, short.reached
    (True, False)
    """

    def __init__(self, document: dict, model) -> None:
        super().__init__(document)
        self.model = model

    @property
    def reached(self) -> bool:
        """Every training query answered (exactly, on the trained weights' own function)."""
        return bool(self["reached"])


def train(N: int = 256, R: int = 4, d: int = 32, *, m: int | None = None, k: int = 1, steps: int = 2000,
          lr: float = 1e-2, seed: int = 0, attention: str = "uniform", out: str | None = None,
          progress: bool = False, **options: Any) -> TrainResult:
    """Train a one-layer transformer of width ``d`` with the NumPy trainer on every one of the N·R facts of
    THE task of ``(N, R, seed)`` (or its k-hop queries): what ``georecall train`` does.

    Parameters
    ----------
    N : int
        Entities.
    R : int
        Relations.
    d : int
        Residual width.
    m : int, optional
        MLP width (default 4d).
    k : int
        Hops per query (k > 1 needs ``attention="softmax"``).
    steps : int
        Step budget (stops early at 100 %).
    lr : float
        Learning rate η.
    seed : int
        The run seed (task, initialization, batches).
    attention : {"uniform", "softmax"}
        Attention kind.
    out : str, optional
        Also write the trained model there.
    progress : bool
        Progress lines on stderr.
    **options
        The rest of ``georecall train``'s options (``optimizer``, ``batch_size``, ``mode``, ``freeze``,
        ``dtype``, ``weight_decay``, ``cot``, ``heads``, ...).

    Returns
    -------
    TrainResult
        ``.model``, ``.reached``, and the document (``result["final_accuracy"]``, ``result["steps_run"]``).

    Raises
    ------
    InputError
        Bad sizes or options, or an estimate over the memory budget.
    TypeError
        An option ``georecall train`` does not have.

    Examples
    --------
    >>> import georecall as gr
    >>> result = gr.train(N=8, R=2, d=16, steps=300, seed=0)
    >>> result.reached, result.model.d
    (True, 16)
    """
    with tempfile.TemporaryDirectory(prefix="georecall-") as folder:
        path = out if out is not None else os.path.join(folder, "model.npz")
        result = run_command("train", N=N, R=R, d=d, m=m, k=k, steps=steps, lr=lr, seed=seed,
                             attention=attention, out=path, quiet=not progress, **options)
        document = result.to_dict()
        if out is None:
            document = {**document, "out": None}
        return TrainResult(document, load(document.get("out") or path))


def probe(model, *, task=None, holdout: float = 0.25, subjects: int = 256, seed: int = 0,
          **options: Any) -> Result:
    """Mechanism probes of a model: superposition readout (held-out R²), per-relation linear probes, causal
    interventions and unit selectivity: what ``georecall probe`` does.

    Parameters
    ----------
    model : Model or str
        The weights, or a model file's path.
    task : Task, optional
        The task (needed for a Model object; a model file stores its own).
    holdout : float
        Share of subjects held out of the fits, 0 < h < 1.
    subjects : int
        Subjects intervened on.
    seed : int
        The probes' seed (splits).
    **options
        The rest of ``georecall probe``'s options.

    Returns
    -------
    Result
        The probe document (``result["readout"]``, ``result["probes"]``, ...).

    Raises
    ------
    InputError
        ``model`` neither a Model nor a path (:func:`georecall.api_models.model_argument`), a missing or
        damaged file, no task, shapes that do not match the task, or a ``holdout`` leaving a side empty.

    Examples
    --------
    >>> import georecall as gr
    >>> task = gr.task(32, 2)
    >>> result = gr.probe(gr.build("geometric", task).model, task=task, subjects=8)
    >>> result.passed
    True
    """
    from georecall.errors import InputError  # imported with the command

    model = model_argument(model, "probe")
    if task is None and not isinstance(model, str):
        raise InputError("probe needs the task of a Model object: probe(model, task=gr.task(N, R))")
    with model_file(model, task, "probe") as path:
        return run_command("probe", model=path, holdout=holdout, subjects=subjects, seed=seed, **options)
