"""An autograd-free NumPy trainer for the shared Model (docs/theory.md, "Gradient descent"; docs/training.md):
the training data of a task, and the loop.

The loop descends the loss of :mod:`.backward` (THE forward pass with ``trace=True`` and the hand-written
backward pass; one-layer single-hop models with uniform attention train through the structure-aware step of
:mod:`.train_structured` when it applies, ``train(path="auto")``, which gives the same gradients) with
Adam/AdamW/SGD (:mod:`.optimizers`), from the weights of :mod:`.parameters` (``init_model``).

The trainer is :func:`run_training`, a driver over named stages (validate → initialise → the loop → confirm
by the exhaustive checker) that take one :class:`TrainSettings`; :func:`train` takes the same settings as
keyword arguments.

Randomness: ``train`` draws the batch order from its own generator (``seed=S`` → the ``"batches"`` stream of
the seed contract, ``theory.seeds``); the initialisation is ``init_model``'s (the ``"init"`` stream).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from georecall.constructions.model import Model
from georecall.constructions.multi_hop import chains, multi_hop_queries
from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.theory.seeds import rng as seed_rng
from georecall.theory.tasks import as_rng, check_positive_int
from georecall.training.backward import PATHS, loss_and_grads
from georecall.training.groups import GROUPS, group_of
from georecall.training.optimizers import EPS_FORMS, OPTIMIZERS, SGD, Adam, adam, sgd
from georecall.training.parameters import group_values, params_of, with_params
from georecall.training.train_structured import loss_and_grads_structured, structure_reason
from georecall.verify.checking.check import check_queries

__all__ = [
    "EPS_FORMS",
    "GROUPS",
    "OPTIMIZERS",
    "SGD",
    "Adam",
    "CallFunction",
    "Callback",
    "EpochBatches",
    "PrintEvery",
    "RecordEvery",
    "StepState",
    "StopAtBatchAccuracy",
    "StopAtCheckedAccuracy",
    "TrainResult",
    "TrainSettings",
    "adam",
    "group_of",
    "run_training",
    "sgd",
    "train",
    "training_data",
]


def training_data(task, k: int = 1, cot: bool = False):
    """``(tokens, answers, positions, T)`` for training on a task.

    k = 1, no CoT: the N·R queries ``⟨r, s⟩`` and their answers (``positions=None``: read at the last token).
    k > 1, no CoT: the N·R^k queries ``⟨r_k, ..., r_1, s⟩`` and their final answers.
    CoT: the queries followed by the true chain ``v_1..v_{k−1}`` (teacher forcing), answers ``v_1..v_k`` read
    at positions ``k..2k−1``. ``T`` is the sequence length (the position embedding needs T rows).

    Parameters
    ----------
    task : Task
        The facts.
    k : int
        Hops per query.
    cot : bool
        Chain of thought under teacher forcing.

    Returns
    -------
    tuple
        ``(tokens, answers, positions, T)``.
    """
    k = check_positive_int("k", k)
    if k == 1 and not cot:
        tokens, answers = single_hop_queries(task)
        return tokens, answers, None, 2
    tokens, answers = multi_hop_queries(task, k)
    if not cot:
        return tokens, answers, None, k + 1
    targets = chains(task, k)
    return np.concatenate([tokens, targets[:, :-1]], axis=1), targets, np.arange(k, 2 * k), 2 * k


@dataclass
class TrainResult:
    """What :func:`train` returns.

    ``steps``: optimizer updates applied. ``losses``/``accuracies``: the loss and accuracy of the batch seen
    at each computed step (before its update). ``epochs``: completed passes over the queries (minibatch; full
    batch: one per step). ``path``: which gradient computation ran, ``"structured"`` or ``"dense"``.
    """

    model: Model
    steps: int  # optimizer steps taken
    reached: bool  # 100% accuracy on every query, confirmed by the exhaustive checker
    losses: list[float] = field(default_factory=list)
    accuracies: list[float] = field(default_factory=list)  # accuracy of the batch seen at each step
    seconds: float = 0.0
    path: str = "dense"
    epochs: int = 0


class EpochBatches:
    """Minibatch indices: a fresh permutation of the n queries per epoch (drawn from ``rng``), cut into
    ``ceil(n / batch)`` batches, the last one shorter when ``batch`` does not divide n. Every query is seen
    exactly once per epoch. ``next()`` returns ``(indices, epoch_ends)``."""

    def __init__(self, n: int, batch: int, rng: np.random.Generator):
        self.n, self.batch, self.rng = n, batch, rng
        self.order = np.arange(n)
        self.cursor = 0
        self.epochs = 0

    def next(self) -> tuple[np.ndarray, bool]:
        """The next batch.

        Returns
        -------
        tuple
            ``(indices, epoch_ends)``: the batch's query indices, and whether it ends an epoch.
        """
        if self.cursor == 0:
            self.order = self.rng.permutation(self.n)
        stop = min(self.n, self.cursor + self.batch)
        idx = self.order[self.cursor : stop]
        self.cursor = 0 if stop == self.n else stop
        if self.cursor == 0:
            self.epochs += 1
        return idx, self.cursor == 0


@dataclass
class StepState:
    """What a :class:`Callback` sees at a step of :func:`train`.

    Attributes
    ----------
    params : dict
        The optimizer's parameters (updated in place by each step; with a tied read-out, ``unembedding`` is
        stale and ``entity_embedding`` is the shared matrix).
    grads : dict
        This step's gradient (the keys being trained).
    loss, accuracy : float
        The batch's mean cross-entropy and the share of its answers predicted, before the update.
    """

    params: dict[str, np.ndarray]
    grads: dict[str, np.ndarray]
    loss: float
    accuracy: float


class Callback:
    """A hook of :func:`train`'s loop. Each method returns True to stop training.

    ``on_step(step, state)`` runs after the step's loss and gradient, before its update (a stop skips the
    update); ``on_epoch_end(step, state)`` runs after the update that ended an epoch, when a step follows.
    """

    def on_step(self, step: int, state: StepState) -> bool:
        """Whether to stop before the update of ``step``.

        Parameters
        ----------
        step : int
            The step (from 0).
        state : StepState
            Its parameters, gradient, loss and batch accuracy.

        Returns
        -------
        bool
        """
        return False

    def on_epoch_end(self, step: int, state: StepState) -> bool:
        """Whether to stop after the update of ``step``, which ended an epoch.

        Parameters
        ----------
        step, state
            As in :meth:`on_step` (``params`` now updated).

        Returns
        -------
        bool
        """
        return False


class StopAtBatchAccuracy(Callback):
    """Full batch: stop before the update of a step whose own predictions reach ``threshold``."""

    def __init__(self, threshold: float):
        self.threshold = threshold

    def on_step(self, step: int, state: StepState) -> bool:
        """Stop when the step's batch accuracy (of the weights before its update) reaches ``threshold``.

        Parameters
        ----------
        step, state
            As in :meth:`Callback.on_step`.

        Returns
        -------
        bool
            Whether to stop (the update of ``step`` is then skipped).
        """
        return state.accuracy >= self.threshold


class StopAtCheckedAccuracy(Callback):
    """Minibatch: at each epoch end, stop when ``accuracy(params, steps_done)`` (an exhaustive check of the
    current weights) reaches ``threshold``."""

    def __init__(self, threshold: float, accuracy: Callable[[dict, int], float]):
        self.threshold, self.accuracy = threshold, accuracy

    def on_epoch_end(self, step: int, state: StepState) -> bool:
        """Stop when ``accuracy(params, step + 1)``, the check of the weights after ``step + 1`` updates,
        reaches ``threshold``.

        Parameters
        ----------
        step, state
            As in :meth:`Callback.on_epoch_end`.

        Returns
        -------
        bool
            Whether to stop.
        """
        return self.accuracy(state.params, step + 1) >= self.threshold


class CallFunction(Callback):
    """``train(callback=f)``: ``f(params, step, grads)`` before each update, a true value stops."""

    def __init__(self, function: Callable):
        self.function = function

    def on_step(self, step: int, state: StepState) -> bool:
        """Call ``function(params, step, grads)``; a true value stops.

        Parameters
        ----------
        step, state
            As in :meth:`Callback.on_step`.

        Returns
        -------
        bool
            The function's value, as a bool.
        """
        return bool(self.function(state.params, step, state.grads))


class PrintEvery(Callback):
    """``train(log_every=k)``: one line on stderr every k steps (the step of ``total``, loss, batch accuracy,
    seconds since ``start`` and, from the second line on, about how long the remaining steps take at the
    rate so far: an early stop ends sooner)."""

    def __init__(self, every: int, start: float, total: int | None = None):
        self.every, self.start, self.total = every, start, total

    def on_step(self, step: int, state: StepState) -> bool:
        """Print one line on stderr when ``step`` is a multiple of ``every`` (step, loss, batch accuracy in %,
        seconds since ``start``); never stops.

        Parameters
        ----------
        step, state
            As in :meth:`Callback.on_step`.

        Returns
        -------
        bool
            False.
        """
        if step % self.every == 0:
            elapsed = time.perf_counter() - self.start
            of = f"/{self.total}" if self.total else ""
            left = f", about {elapsed / step * (self.total - step):.0f} s left" if self.total and step else ""
            print(f"step {step:6d}{of}  loss {state.loss:.5f}  accuracy {100 * state.accuracy:6.2f}%  "
                  f"({elapsed:.1f} s{left})", file=sys.stderr, flush=True)
        return False


class RecordEvery(Callback):
    """A trajectory: every ``every`` updates, ``measure(model, steps)`` on the weights after that many updates
    (``steps`` = every, 2·every, …, below the run's last step; the final model is the caller's to measure).

    Parameters
    ----------
    every : int
        Updates between two points.
    measure : callable
        ``measure(model, steps) -> dict``: what to record of the model after ``steps`` updates.
    initial : Model
        The model given to :func:`train` (its structure is the trained model's).
    tie_readout : bool, dtype
        As given to :func:`train`.

    Attributes
    ----------
    points : list of dict
        ``{"step": steps, **measure(model, steps)}`` per point, in order.

    Raises
    ------
    InputError
        ``every`` is not a positive integer.
    """

    def __init__(self, every: int, measure: Callable[[Model, int], dict], initial: Model, *,
                 tie_readout: bool = False, dtype=np.float32):
        self.every = check_positive_int("every", every)
        self.measure, self.tie_readout = measure, tie_readout
        self.template, _ = _template(initial, dtype, frozenset(), tie_readout)
        self.points: list[dict] = []

    def on_step(self, step: int, state: StepState) -> bool:
        """Record a point when ``step`` is a positive multiple of ``every``: ``measure`` of the weights after
        ``step`` updates (``state.params``, before this step's update); never stops.

        Parameters
        ----------
        step, state
            As in :meth:`Callback.on_step`.

        Returns
        -------
        bool
            False.
        """
        # before the update of `step`: the parameters are those after `step` updates
        if step and step % self.every == 0:
            params = state.params
            if self.tie_readout:
                params = {**params, "unembedding": params["entity_embedding"]}
            self.points.append({"step": step, **self.measure(with_params(self.template, params), step)})
        return False


def _loss_and_grads_in_pieces(model: Model, tokens, answers, positions, frozen: frozenset, path: str,
                              max_rows: int | None):
    """The batch's mean loss, its gradient and the predictions, from pieces of at most ``max_rows`` queries
    weighted by their size (the loss is a mean over queries)."""
    def piece(piece_tokens, piece_answers):
        if path == "structured":
            return loss_and_grads_structured(model, piece_tokens, piece_answers, frozen)
        return loss_and_grads(model, piece_tokens, piece_answers, positions, frozen)

    B = len(tokens)
    if max_rows is None or B <= max_rows:
        return piece(tokens, answers)
    loss = 0.0
    grads: dict[str, np.ndarray] = {}
    predictions: list[np.ndarray] = []
    for start in range(0, B, max_rows):
        part = slice(start, min(B, start + max_rows))
        weight = (part.stop - part.start) / B
        piece_loss, piece_grads, piece_predictions = piece(tokens[part], answers[part])
        loss += weight * piece_loss
        for key, g in piece_grads.items():
            grads[key] = grads[key] + weight * g if key in grads else weight * g
        predictions.append(np.asarray(piece_predictions).reshape(part.stop - part.start, -1))
    return loss, grads, np.concatenate(predictions).reshape(-1)


class _Objective:
    """The loss :func:`train` descends: a batch's mean cross-entropy and its gradient at the optimizer's
    parameters, with the tied read-out ``U = E`` applied (its two gradients summed into E's)."""

    def __init__(self, template: Model, tokens, answers, positions, frozen: frozenset, path: str,
                 max_rows: int | None, tie_readout: bool, lr: float):
        self.template, self.tokens, self.answers, self.positions = template, tokens, answers, positions
        self.frozen, self.path, self.max_rows = frozen, path, max_rows
        self.tie_readout, self.lr = tie_readout, lr

    def model(self, params: dict, step: int) -> Model:
        """The Model of ``params`` (``FloatingPointError`` naming ``step`` when a weight is not finite)."""
        if self.tie_readout:
            params = {**params, "unembedding": params["entity_embedding"]}
        try:
            return with_params(self.template, params)
        except ValueError as exc:  # the Model refuses non-finite weights
            raise FloatingPointError(f"parameters became non-finite at step {step} ({exc}): lower the "
                                     f"learning rate (lr = {self.lr})") from None

    def __call__(self, params: dict, batch, step: int) -> tuple[float, dict, float]:
        """``(loss, grads, accuracy)`` of the queries ``batch`` (indices or a slice)."""
        answers = self.answers[batch]
        model = self.model(params, step)
        with np.errstate(over="ignore", invalid="ignore"):
            loss, grads, predictions = _loss_and_grads_in_pieces(model, self.tokens[batch], answers,
                                                                 self.positions, self.frozen, self.path,
                                                                 self.max_rows)
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss became {loss} at step {step}: lower the learning rate "
                                     f"(lr = {self.lr})")
        if self.tie_readout and "unembedding" in grads:
            grads["entity_embedding"] = grads["entity_embedding"] + grads.pop("unembedding")
        return loss, grads, float(np.mean(predictions == answers.reshape(-1)))

    def accuracy(self, params: dict, step: int) -> float:
        """The share of every query answered by ``params`` (the exhaustive checker, in float64)."""
        return check_queries(self.model(params, step).astype(np.float64), self.tokens, self.answers,
                             positions=self.positions).accuracy


def _template(model: Model, dtype, frozen: frozenset, tie_readout: bool) -> tuple[Model, frozenset]:
    """The model to train (dense read-out, ``dtype``; ``U = E`` when tied) and the groups left frozen."""
    template = model.with_dense_readout().astype(dtype)  # training may make any read-out column nonzero
    if not tie_readout:
        return template, frozen
    if template.n_out != template.n_entities:
        raise InputError(f"a tied read-out U = E needs n_out == N, got n_out = {template.n_out}, "
                         f"N = {template.n_entities}")
    if "unembedding" in frozen and "entity_embedding" not in frozen:
        raise InputError("with a tied read-out U = E, freeze 'entity_embedding' (the shared matrix), "
                         "not 'unembedding' alone")
    template = template.replace(unembedding=template.entity_embedding)
    return template, frozen | {"unembedding"} if "entity_embedding" in frozen else frozen


@dataclass(frozen=True)
class TrainSettings:
    """How :func:`train` trains: every setting of the loop, apart from the data, the randomness of the batch
    order and the callback.

    Each field is the keyword parameter of :func:`train` of the same name, with the same default and meaning
    (see there); ``frozen`` is kept as a frozenset of groups. The settings are checked when a run starts
    (:func:`run_training`), not when they are made, so that the errors come in the order :func:`train` gives
    them.

    Attributes
    ----------
    steps : int
        Optimizer updates at most.
    lr : float
        Learning rate.
    optimizer : str
        ``"adam"`` or ``"sgd"`` (:data:`OPTIMIZERS`).
    batch_size : int or None
        ``None``: full batch; else minibatch epochs (:class:`EpochBatches`).
    frozen : frozenset of str
        Groups (``GROUPS``) that receive no update.
    dtype
        The training dtype.
    stop_at_accuracy : float or None
        The share of the queries at which training stops (``None``: train all ``steps``).
    log_every : int
        One line on stderr every that many steps (0: none).
    weight_decay : float or mapping
        Decoupled weight decay: one λ, or ``{group: λ}``.
    eps, eps_form, betas, momentum
        Adam's ε, its form and (β1, β2); SGD's momentum.
    tie_readout : bool
        Train with ``U = E``.
    path : str
        ``"auto"``, ``"dense"`` or ``"structured"``.
    max_rows : int or None
        The largest piece of a batch computed at once (``None``: one piece).
    """

    steps: int = 1000
    lr: float = 1e-2
    optimizer: str = "adam"
    batch_size: int | None = None
    frozen: frozenset[str] = frozenset()
    dtype: Any = np.float32
    stop_at_accuracy: float | None = 1.0
    log_every: int = 0
    weight_decay: float | Mapping[str, float] = 0.0
    eps: float = 1e-8
    eps_form: str = "standard"
    betas: tuple[float, float] = (0.9, 0.999)
    momentum: float = 0.0
    tie_readout: bool = False
    path: str = "auto"
    max_rows: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "frozen", frozenset(self.frozen))


@dataclass(frozen=True)
class _Run:
    """What the loop runs on, prepared by :func:`_initialise`."""

    template: Model
    objective: _Objective
    descent: Adam | SGD
    batches: EpochBatches | None
    path: str


def _validate(settings: TrainSettings, tokens, answers, rng, seed
              ) -> tuple[TrainSettings, np.random.Generator, np.ndarray, np.ndarray]:
    """The settings checked (steps, batch size as ints), the batch order's generator, the data as int64."""
    if settings.optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {settings.optimizer!r}")
    if settings.path not in PATHS:
        raise InputError(f"path must be one of {PATHS}, got {settings.path!r}")
    unknown = settings.frozen - set(GROUPS)
    if unknown:
        raise InputError(f"unknown parameter groups {sorted(unknown)}; groups are {GROUPS}")
    steps = check_positive_int("steps", settings.steps)
    if seed is not None:
        if rng is not None:
            raise InputError("give rng or seed, not both")
        rng = seed_rng(seed, "batches")
    rng = as_rng(rng)
    tokens, answers = np.asarray(tokens, dtype=np.int64), np.asarray(answers, dtype=np.int64)
    n = tokens.shape[0]
    size = settings.batch_size
    batch = n if size is None else min(check_positive_int("batch_size", size), n)
    if settings.max_rows is not None:
        check_positive_int("max_rows", settings.max_rows)
    return replace(settings, steps=steps, batch_size=batch), rng, tokens, answers


def _initialise(model: Model, tokens, answers, positions, settings: TrainSettings,
                rng: np.random.Generator) -> _Run:
    """The model to train, the gradient path that applies, its objective, the optimizer, the batch order."""
    template, frozen = _template(model, settings.dtype, settings.frozen, settings.tie_readout)
    decay = group_values("weight_decay", settings.weight_decay, 0.0)
    decay_by_key = {key: decay[group_of(key)] for key in template.arrays() if decay[group_of(key)]}
    reason = structure_reason(template, tokens, positions)
    if settings.path == "structured" and reason is not None:
        raise InputError(f"the structured step does not apply: {reason}")
    path = "structured" if settings.path != "dense" and reason is None else "dense"
    objective = _Objective(template, tokens, answers, positions, frozen, path, settings.max_rows,
                           settings.tie_readout, settings.lr)
    descent = (Adam(settings.lr, settings.betas[0], settings.betas[1], settings.eps, settings.eps_form,
                    decay_by_key) if settings.optimizer == "adam" else SGD(settings.lr, settings.momentum,
                                                                           decay_by_key))
    n, batch = tokens.shape[0], settings.batch_size
    batches = EpochBatches(n, batch, rng) if batch is not None and batch < n else None
    return _Run(template, objective, descent, batches, path)


def _callbacks(settings: TrainSettings, run: _Run, callback: Callable | Callback | None,
               start: float) -> list[Callback]:
    """The loop's callbacks, in order: the log line, the early stop, the caller's."""
    callbacks: list[Callback] = ([PrintEvery(settings.log_every, start, settings.steps)] if settings.log_every
                                 else [])
    if settings.stop_at_accuracy is not None:
        callbacks.append(StopAtBatchAccuracy(settings.stop_at_accuracy) if run.batches is None else
                         StopAtCheckedAccuracy(settings.stop_at_accuracy, run.objective.accuracy))
    if callback is not None:
        callbacks.append(callback if isinstance(callback, Callback) else CallFunction(callback))
    return callbacks


def _loop(run: _Run, callbacks: list[Callback], steps: int) -> tuple[TrainResult, dict[str, np.ndarray]]:
    """The descent itself: the run's history (steps, losses, accuracies, epochs) and the final parameters."""
    history = TrainResult(run.template, 0, False, path=run.path)
    params = run.descent.start(params_of(run.template))
    for step in range(steps):
        batch_of_step, epoch_ends = run.batches.next() if run.batches is not None else (slice(None), True)
        loss, grads, accuracy = run.objective(params, batch_of_step, step)
        history.losses.append(loss)
        history.accuracies.append(accuracy)
        state = StepState(params, grads, loss, accuracy)
        if any(c.on_step(step, state) for c in callbacks):
            break
        run.descent.update(params, grads)
        history.steps = step + 1
        if epoch_ends and step + 1 < steps and any(c.on_epoch_end(step, state) for c in callbacks):
            break
    history.epochs = run.batches.epochs if run.batches is not None else history.steps
    return history, params


def _confirm(history: TrainResult, params: dict[str, np.ndarray], run: _Run, tie_readout: bool,
             start: float) -> TrainResult:
    """The history completed: the trained model, ``reached`` by the exhaustive checker, the seconds."""
    history.model = with_params(run.template, {**params, "unembedding": params["entity_embedding"]}
                                if tie_readout else params)
    # reached: every fact certified in exact arithmetic of the trained weights (checked in float64: the cast
    # is exact, and the float64 rounding bound is far tighter than the float32 one)
    objective = run.objective
    verdict = check_queries(history.model.astype(np.float64), objective.tokens, objective.answers,
                            positions=objective.positions)
    history.reached = verdict.exact
    history.seconds = time.perf_counter() - start
    return history


def run_training(model: Model, tokens: np.ndarray, answers: np.ndarray,
                 settings: TrainSettings = TrainSettings(), *, positions: np.ndarray | None = None,
                 rng: np.random.Generator | int | None = None, seed: int | None = None,
                 callback: Callable | Callback | None = None) -> TrainResult:
    """Train ``model`` on (tokens, answers) with ``settings``: :func:`train` with its settings in one object.

    The stages: validate the settings and the data; initialise the model to train, its objective, the
    optimizer and the batch order; the loop (:class:`Callback` hooks around each update); confirm the trained
    model on every query with the exhaustive checker.

    Parameters
    ----------
    model : Model
        The initial weights; not modified.
    tokens, answers : ndarray
        The queries ``(n, T)`` and their answers (``(n,)``, or ``(n, P)`` read at ``positions``).
    settings : TrainSettings
        How to train.
    positions : ndarray or None
        Where answers are read (teacher forcing); ``None``: at the last position.
    rng, seed
        The batch order's randomness (at most one), as in :func:`train`.
    callback : callable or Callback, optional
        As in :func:`train`.

    Returns
    -------
    TrainResult
        The final model, confirmed by the exhaustive checker (``reached``), and the run's history.

    Raises
    ------
    InputError
        As :func:`train`.
    FloatingPointError
        A non-finite loss or weight, naming the step.
    """
    settings, rng, tokens, answers = _validate(settings, tokens, answers, rng, seed)
    run = _initialise(model, tokens, answers, positions, settings, rng)
    start = time.perf_counter()
    history, params = _loop(run, _callbacks(settings, run, callback, start), settings.steps)
    return _confirm(history, params, run, settings.tie_readout, start)


def train(
    model: Model,
    tokens: np.ndarray,
    answers: np.ndarray,
    *,
    steps: int = 1000,
    lr: float = 1e-2,
    optimizer: str = "adam",
    batch_size: int | None = None,
    frozen=(),
    positions: np.ndarray | None = None,
    dtype=np.float32,
    rng: np.random.Generator | int | None = None,
    stop_at_accuracy: float | None = 1.0,
    log_every: int = 0,
    callback: Callable | Callback | None = None,
    seed: int | None = None,
    weight_decay: float | Mapping[str, float] = 0.0,
    eps: float = 1e-8,
    eps_form: str = "standard",
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.0,
    tie_readout: bool = False,
    path: str = "auto",
    max_rows: int | None = None,
) -> TrainResult:
    """Train ``model`` on (tokens, answers) with cross-entropy.

    The loop: for each step, the batch's loss and gradient; the callbacks (:class:`Callback`: early
    stopping, ``log_every``, ``callback``), any of which may stop before the update; the optimizer's update
    (:class:`Adam` or :class:`SGD`); at an epoch's end, the callbacks again. ``train`` gathers its keyword
    settings into a :class:`TrainSettings` and runs :func:`run_training` (validate → initialise → the loop →
    confirm by the exhaustive checker), which callers holding the settings as one object may call directly.

    Parameters
    ----------
    model : Model
        The initial weights (:func:`.parameters.init_model`); not modified.
    tokens, answers : ndarray
        The queries ``(n, T)`` and their answers (``(n,)``, or ``(n, P)`` read at ``positions``).
    steps : int
        Optimizer updates at most.
    lr, optimizer
        Learning rate; ``"adam"`` or ``"sgd"`` (:data:`OPTIMIZERS`).
    batch_size : int or None
        ``None``: full batch. Otherwise epochs of a fresh random permutation cut into ``ceil(n / batch_size)``
        batches (the last one shorter): every query exactly once per epoch (:class:`EpochBatches`).
    frozen
        Groups (see ``GROUPS``) that receive no update: e.g. ``("unembedding",)`` for a frozen read-out,
        ``("entity_embedding", "relation_embedding")`` for frozen embeddings.
    positions : ndarray or None
        Where answers are read (teacher forcing); ``None``: at the last position.
    dtype
        The training dtype (the weights are cast to it).
    rng, seed
        The batch order's randomness, and only it: a Generator (or integer), or the run seed of the seed
        contract, drawing from its ``"batches"`` stream. Give at most one. The initialization is
        :func:`.parameters.init_model`'s own (its ``seed`` uses the ``"init"`` stream); do not pass one
        Generator to both.
    stop_at_accuracy : float or None
        Stop when this share of the queries is answered. Full batch: a step whose own predictions reach it
        stops before its update. Minibatch: at each epoch end (after the update of an epoch's last batch) an
        exhaustive check of the current weights. ``None``: train all ``steps``.
    log_every : int
        One line on stderr every that many steps (0: none).
    callback : callable or Callback, optional
        ``callback(params, step, grads)`` before each update, a true value stops; or a :class:`Callback`
        (its ``on_step`` and ``on_epoch_end``).
    weight_decay
        Decoupled weight decay (AdamW; for SGD the same ``θ ← (1 − lr·λ)·θ``): one λ for every trained group,
        or ``{group: λ}`` (missing groups: 0).
    eps, eps_form, betas, momentum
        Adam's ε and its form (``"standard"``: ``m̂/(√v̂ + ε)`` as in PyTorch and Optax; ``"hat"``: Kingma &
        Ba's ``ε̂``), Adam's (β1, β2); SGD's momentum. See :class:`Adam`.
    tie_readout : bool
        Train with ``U = E`` (needs ``n_out == N``): the read-out is set to the entity embedding at the start,
        the two gradients are summed into one update, and the returned model has ``U = E``. The shared matrix
        is frozen with ``"entity_embedding"``; freezing ``"unembedding"`` alone is refused.
    path : str
        ``"auto"`` (structure-aware step when it applies, see :mod:`.train_structured`),
        ``"dense"`` (the reference) or ``"structured"``. The path that ran is ``TrainResult.path``.
    max_rows : int or None
        Compute each batch's loss and gradient in pieces of at most this many queries and combine them,
        weighted by piece size (the loss is a mean over queries, so the combination is the batch's gradient,
        to rounding): bounded memory for large (e.g. full) batches. ``None``: one piece.

    Returns
    -------
    TrainResult
        The final model, confirmed by the exhaustive checker (``reached``), and the run's history.

    Raises
    ------
    InputError
        An unknown optimizer, path or group, a structured path that does not apply, bad sizes, or a tied
        read-out that cannot be.
    FloatingPointError
        A non-finite loss or weight, naming the step.
    """
    settings = TrainSettings(steps=steps, lr=lr, optimizer=optimizer, batch_size=batch_size, frozen=frozen,
                             dtype=dtype, stop_at_accuracy=stop_at_accuracy, log_every=log_every,
                             weight_decay=weight_decay, eps=eps, eps_form=eps_form, betas=betas,
                             momentum=momentum, tie_readout=tie_readout, path=path, max_rows=max_rows)
    return run_training(model, tokens, answers, settings, positions=positions, rng=rng, seed=seed,
                        callback=callback)
