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
from georecall.api_models import model_and_task
from georecall.errors import InputError

__all__ = ["TrainResult", "probe", "train"]


class TrainResult(Result):
    """The result of :func:`train`: the command's document and the trained model.

    Attributes
    ----------
    model : Model
        The trained weights (what ``--out`` would write).
    task : Task
        The task trained on: THE task of ``(N, R, seed)``, ``gr.task(N, R, seed=seed)`` (what ``--out``
        stores beside the weights). :func:`georecall.evaluate` and :func:`probe` need it with ``model``.
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
    >>> seeded = gr.train(N=8, R=2, d=16, steps=300, seed=1)
    >>> seeded.task.table.tolist() == gr.task(8, 2, seed=1).table.tolist()
    True
    >>> gr.evaluate(seeded.model, task=seeded.task)["accuracy"]
    1.0
    """

    def __init__(self, document: dict, model, task) -> None:
        super().__init__(document)
        self.model = model
        self.task = task

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
        Progress lines on stderr (``quiet``, the command line's name, is taken too: ``quiet=False`` is
        ``progress=True``; the two may not contradict each other).
    **options
        The rest of ``georecall train``'s options (``optimizer``, ``batch_size``, ``mode``, ``freeze``,
        ``dtype``, ``weight_decay``, ``cot``, ``heads``, ...).

    Returns
    -------
    TrainResult
        ``.model``, ``.task``, ``.reached``, and the document (``result["final_accuracy"]``,
        ``result["steps_run"]``).

    Raises
    ------
    InputError
        Bad sizes or options, ``progress=True`` with ``quiet=True``, or an estimate over the memory budget.
    TypeError
        An option ``georecall train`` does not have.

    Examples
    --------
    >>> import georecall as gr
    >>> result = gr.train(N=8, R=2, d=16, steps=300, seed=0)
    >>> result.reached, result.model.d
    (True, 16)
    """
    from georecall.constructions import storage  # the model file written, and its task: read when trained
    from georecall.theory.tasks import Task

    quiet = options.pop("quiet", None)  # the command line's name for "no progress", taken too
    quiet = not progress if quiet is None else quiet
    if progress and quiet is True:
        raise InputError("train: progress=True and quiet=True contradict each other: give one of them")
    with tempfile.TemporaryDirectory(prefix="georecall-") as folder:
        path = out if out is not None else os.path.join(folder, "model.npz")
        result = run_command("train", N=N, R=R, d=d, m=m, k=k, steps=steps, lr=lr, seed=seed,
                             attention=attention, out=path, quiet=quiet, **options)
        document = result.to_dict()
        if out is None:
            document = {**document, "out": None}
        model, header = storage.load_model(document.get("out") or path)
        return TrainResult(document, model, Task.from_table(header["extra_arrays"]["task_table"]))


def probe(model, *, task=None, holdout: float = 0.25, subjects: int = 256, seed: int = 0,
          **options: Any) -> Result:
    """Mechanism probes of a model: superposition readout (held-out R²), per-relation linear probes, causal
    interventions and unit selectivity: what ``georecall probe`` does.

    Parameters
    ----------
    model : Model or str
        The weights, or a model file's path.
    task : Task or str, optional
        The task (:func:`georecall.task`, with the seed the model was built or trained with), or a task
        table's path (``.npy``, R × N): as for :func:`georecall.evaluate`, used for a model given as a path or
        as an object, needed for a Model object and for a file that stores no task, and refused when its
        sizes are not the model's.
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
        The probe document: ``result["readout"]`` (the superposition readout's held-out R²
        ``["encoding_r2"]``, and the per-relation linear probes: ``["probe_accuracy_mean"]``,
        ``["per_relation"]``), ``result["intervention"]`` (``["follows"]``, ``["others_unchanged"]``),
        ``result["selectivity"]`` (``["selective_fraction"]``, ...) and ``result["accuracy"]``.

    Raises
    ------
    InputError
        ``model`` neither a Model nor a path (:func:`georecall.api_models.model_argument`), ``task`` neither a
        Task nor a path, a missing or damaged file, no task, shapes that do not match the task, or a
        ``holdout`` leaving a side empty.

    Examples
    --------
    >>> import georecall as gr
    >>> task = gr.task(32, 2)
    >>> result = gr.probe(gr.build("geometric", task).model, task=task, subjects=8)
    >>> result.passed
    True
    >>> sorted(key for key in result if key in ("readout", "intervention", "selectivity", "accuracy"))
    ['accuracy', 'intervention', 'readout', 'selectivity']
    >>> "probe_accuracy_mean" in result["readout"], "follows" in result["intervention"]
    (True, True)
    """
    with model_and_task(model, task, "probe") as (path, table_path):
        return run_command("probe", model=path, task=table_path, holdout=holdout, subjects=subjects,
                           seed=seed, **options)
