"""Capacity-threshold sweeps (docs/theory.md, "Gradient descent"): the smallest d at which gradient descent
reaches 100% accuracy.

For each configuration (N, R, mode, seed), ``mode`` = ``learned`` (every parameter trained) or ``frozen``
(entity and relation embeddings frozen at their random initialization, so the facts must go into the MLP):

- the task is ``task_for_seed(N, R, seed)`` (the seed contract, ``theory/seeds.py``): the same facts for both
  modes, every d, and every other command run with that seed;
- a *trial* trains a fresh model of width d with MLP width ``m = width_factor·d`` (default 4d), full batch,
  Adam, for at most ``steps`` steps, initialized from ``rng(seed, "init", mode_id, d)`` (batch order, if any,
  from ``rng(seed, "batches", mode_id, d)``), and records whether it reached 100% (confirmed by the exhaustive
  checker). With ``k > 1`` the facts are all N·R^k k-hop queries; with ``cot`` the model is trained and judged
  on every step of the chain under teacher forcing (exact at every step under teacher forcing is the same as
  exact greedy decoding, by induction over the steps);
- the threshold search doubles d from ``d_min`` until a trial succeeds, then bisects between the last failure
  and the first success until they are ``resolution`` apart (``search="doubling"``, the default); or
  (``search="predicted"``, :class:`PredictedSearch`) starts at ``c·R·ln N`` fitted to the threshold records
  already in the file (:func:`predict_threshold`), takes every recorded trial of the configuration into its
  bracket, gallops outward from the prediction and bisects. Before the first trial the sweep logs the
  estimated cost (:func:`estimate_cost`: trials × measured seconds per step × steps, calibrated on the
  recorded trials' own seconds, :func:`calibration`) and, given ``budget_hours``, refuses a run whose worst
  case exceeds it.

Monotonicity. Bisection assumes that success is monotone in d. Every trial the search visits is kept, and the
record says ``monotone: false`` if some failing d lies above some successful d (the threshold is then the
smallest successful d found, and the record is flagged rather than trusted).

Where trials run. The driver (the process that called :func:`sweep`) runs every search and submits each
trial to an executor (:mod:`.executors`): this process (``workers=1``), a pool of local
processes (``workers=W``), or a Dask cluster (``scheduler="local:W"`` or ``"tcp://HOST:PORT"``). Executors
only return records; the driver alone writes the file.

The results file. Every trial is appended to the JSONL file as soon as it finishes (``{"kind": "trial"}``)
and every finished search as ``{"kind": "threshold"}``. While a sweep runs it holds an advisory lock on
``<file>.lock``: a second sweep on the same file waits (saying so) or refuses after ``lock_timeout``.

- *Keys.* A trial record is identified by :data:`TRIAL_KEY` (every parameter its result depends on, the seed
  contract and the package version), a threshold record by :data:`THRESHOLD_KEY` (the same without d, plus
  ``d_min``, ``d_max``, ``resolution``). A rerun reuses a trial only with an equal key, and a threshold
  record is built only from the trials its own search visits, so it is the same as on a fresh file.
- *Arithmetic.* Each trial records the BLAS that computed its products and its thread count (``blas``,
  :mod:`.blas`): float32 training rounds differently with another kernel or another thread count, so such
  trials are different runs. The field is not part of the key (each trial is judged exactly on its own
  weights, and a search may resume on another machine), but a threshold record lists every ``blas`` its
  trials used, so a search that mixed arithmetics says so (``"not recorded"``: trials from before the field).
- *Reading* (:func:`read_sweep`) skips and counts torn lines (not JSON: a writer killed mid-line), alien lines
  (JSON that is not a sweep record) and duplicates (a key seen before; the first record wins).
- *Resumability.* An interrupted sweep loses at most the trials in flight; rerunning the same call finishes
  with the same records as an uninterrupted run, except the timing field ``seconds``.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from georecall.bounds.counting import F_lower, log2_product
from georecall.constructions import registry
from georecall.errors import InputError
from georecall.io import ResultsFile, append_jsonl, read_jsonl, validate_output_path
from georecall.memory import Budget
from georecall.theory import __version__
from georecall.theory.seeds import check_seed, rng
from georecall.theory.tasks import check_positive_int, task_for_seed
from georecall.verify.experiments.blas import blas_description
from georecall.verify.experiments.driver import Call as Task  # the driver's Call; the body still says Task
from georecall.verify.experiments.driver import JobList, Stop, clock, drive, open_results, stderr_note
from georecall.verify.experiments.executors import WORKER_TIMEOUT, open_executor
from georecall.verify.training.parameters import init_model
from georecall.verify.training.train import train, training_data

__all__ = [
    "BITS_REFERENCES",
    "FROZEN_GROUPS",
    "MODES",
    "SEED_CONTRACT",
    "THRESHOLD_KEY",
    "TIMING_FIELDS",
    "TRIAL_KEY",
    "PredictedSearch",
    "ProgressInfo",
    "SEARCHES",
    "SweepFile",
    "ThresholdSearch",
    "TrialSettings",
    "bits_per_parameter",
    "calibration",
    "cost_line",
    "estimate_cost",
    "find_threshold",
    "fit_thresholds",
    "knowledge_bits",
    "knowledge_table",
    "measure_step_seconds",
    "model_parameters",
    "predict_threshold",
    "read_records",
    "read_sweep",
    "run_trial",
    "summary_table",
    "step_seconds",
    "sweep",
    "threshold_key",
    "trial_key",
]

MODES = ("learned", "frozen")
FROZEN_GROUPS = {"learned": (), "frozen": ("entity_embedding", "relation_embedding")}
SEED_CONTRACT = 1  # records carry it: trials seeded otherwise (before theory/seeds.py) are never reused
_SETTINGS_KEY = ("steps", "lr", "width_factor", "attention", "dtype", "k", "cot", "heads")
_CONFIG_KEY = ("N", "R", "mode", "seed", *_SETTINGS_KEY, "seed_contract", "version")
TRIAL_KEY = (*_CONFIG_KEY, "d")
THRESHOLD_KEY = (*_CONFIG_KEY, "d_min", "d_max", "resolution", "search")
TIMING_FIELDS = ("seconds",)
SEARCHES = ("doubling", "predicted")
# fields older records may lack (a record without "search" came from the doubling search)
_DEFAULTS = {"k": 1, "cot": False, "heads": 1, "seed_contract": None, "search": "doubling"}
_REQUIRED = {"trial": ("N", "R", "mode", "seed", "d", "reached", "steps", "lr", "width_factor", "attention",
                       "dtype", "version"),
             "threshold": ("N", "R", "mode", "seed", "d_star", "monotone", "trials", "steps", "lr",
                           "width_factor", "attention", "dtype", "version")}


@dataclass(frozen=True)
class TrialSettings:
    """Everything besides (N, R, mode, seed, d) that a trial's result depends on.

    Attributes
    ----------
    steps : int
        Adam step budget per trial.
    lr : float
        Learning rate (positive, finite).
    width_factor : int
        MLP width ``m = width_factor·d``.
    attention : str
        ``"uniform"`` or ``"softmax"`` (k-hop queries need softmax).
    dtype : str
        ``"float32"`` or ``"float64"``.
    k : int
        Hops of every query.
    cot : bool
        Train and judge chain-of-thought under teacher forcing.
    heads : int
        Attention heads.
    """

    steps: int = 500
    lr: float = 1e-2
    width_factor: int = 4
    attention: str = "uniform"
    dtype: str = "float32"
    k: int = 1
    cot: bool = False
    heads: int = 1

    def key(self) -> tuple:
        """The settings part of a record's key, in :data:`TRIAL_KEY` order."""
        return tuple(getattr(self, name) for name in _SETTINGS_KEY)

    def validate(self) -> TrialSettings:
        """Check every field (``InputError``, one line, naming the field); return ``self``."""
        for name in ("steps", "width_factor", "k", "heads"):
            check_positive_int(name, getattr(self, name))
        if isinstance(self.lr, bool) or not isinstance(self.lr, (int, float)) or not (
                math.isfinite(self.lr) and self.lr > 0):
            raise InputError(f"lr must be a positive finite number, got {self.lr!r}")
        if self.attention not in ("uniform", "softmax"):
            raise InputError(f"attention must be 'uniform' or 'softmax', got {self.attention!r}")
        if self.dtype not in ("float32", "float64"):
            raise InputError(f"dtype must be 'float32' or 'float64', got {self.dtype!r}")
        if not isinstance(self.cot, bool):
            raise TypeError(f"cot must be True or False, got {self.cot!r}")
        return self


def _mode_id(mode: str) -> int:
    return MODES.index(mode)


def _check_mode(mode: str) -> str:
    if mode not in MODES:
        raise InputError(f"mode must be one of {MODES}, got {mode!r}")
    return mode


def run_trial(N: int, R: int, mode: str, seed: int, d: int, settings: TrialSettings) -> dict:
    """Train one model and report whether it reached 100% on every query (one ``"trial"`` record).

    Parameters
    ----------
    N, R : int
        Entities and relations of the task ``task_for_seed(N, R, seed)``.
    mode : str
        ``"learned"`` or ``"frozen"`` (embeddings frozen at initialization).
    seed : int
        Run seed (see ``theory/seeds.py``); the init stream is keyed by ``(mode_id, d)``.
    d : int
        Model width (MLP width ``settings.width_factor·d``).
    settings : TrialSettings
        The rest of the trial's parameters.

    Returns
    -------
    dict
        The record: every :data:`TRIAL_KEY` field, the outcome, the trainer's path (``train_path``: dense or
        structure-aware) and the timing field ``seconds``.
    """
    _check_mode(mode)
    task = task_for_seed(N, R, seed)
    tokens, answers, positions, T = training_data(task, settings.k, settings.cot)
    trial = (_mode_id(mode), d)
    model = init_model(N, R, d, settings.width_factor * d, attention=settings.attention, heads=settings.heads,
                       positions=T if settings.k > 1 or settings.cot else None, rng=rng(seed, "init", *trial),
                       dtype=np.dtype(settings.dtype))
    result = train(model, tokens, answers, steps=settings.steps, lr=settings.lr, frozen=FROZEN_GROUPS[mode],
                   positions=positions, rng=rng(seed, "batches", *trial), dtype=np.dtype(settings.dtype))
    return {"kind": "trial", "N": N, "R": R, "mode": mode, "seed": seed, "d": d,
            "m": settings.width_factor * d, "reached": bool(result.reached), "steps_run": result.steps,
            "final_loss": round(float(result.losses[-1]), 6),
            "final_batch_accuracy": float(result.accuracies[-1]), "seconds": round(result.seconds, 3),
            "train_path": getattr(result, "path", "dense"), "blas": blas_description(),
            **asdict(settings), "seed_contract": SEED_CONTRACT, "version": __version__}


class ThresholdSearch:
    """The doubling-then-bisection search over d as a state machine, so a driver can run many at once.

    ``next_d`` is the width to try next (``None`` once the search is over); :meth:`feed` gives the outcome of
    that trial. ``visited`` maps every d tried to its outcome.

    Parameters
    ----------
    d_min, d_max : int
        Doubling starts at ``d_min`` and gives up above ``d_max``.
    resolution : int
        Bisection stops when the last failure and the first success are at most this far apart.
    """

    def __init__(self, d_min: int, d_max: int, resolution: int):
        self.d_min, self.d_max, self.resolution = d_min, d_max, resolution
        self.visited: dict[int, bool] = {}
        self.lo: int | None = None  # largest failure below the first success
        self.hi: int | None = None  # smallest success
        self.next_d: int | None = d_min if d_min <= d_max else None
        self._doubling = True

    def feed(self, reached: bool) -> None:
        """Record the outcome of the trial at ``next_d`` and move to the next width (or finish).

        Parameters
        ----------
        reached : bool
            Whether the trial at ``next_d`` reached 100%.

        Raises
        ------
        RuntimeError
            The search is over.
        """
        d = self.next_d
        if d is None:
            raise RuntimeError("the search is over")
        self.visited[d] = bool(reached)
        if self._doubling:
            if reached:
                self.hi, self._doubling = d, False
            else:
                self.lo = d
                self.next_d = d * 2 if d * 2 <= self.d_max else None
                return
        elif reached:
            self.hi = d
        else:
            self.lo = d
        if self.lo is not None and self.hi is not None and self.hi - self.lo > self.resolution:
            self.next_d = (self.lo + self.hi) // 2
        else:
            self.next_d = None

    @property
    def done(self) -> bool:
        """Whether the search has finished."""
        return self.next_d is None


class PredictedSearch:
    """A threshold search that starts at a predicted width and brackets outward from it, then bisects.

    Every outcome known for the configuration (recorded trials, whatever search ran them) counts: under the
    monotone rule the threshold lies above every failure and at or below every success, so the search only
    tries widths strictly between the largest failure below the smallest success (``lo``) and the smallest
    success (``hi``). The next width is a function of (``lo``, ``hi``, the prediction) alone, never of the
    order in which outcomes arrived, so a search resumed from its recorded trials takes the path an
    uninterrupted one takes. With ``p`` the prediction rounded to a multiple of ``resolution`` and ``r`` the
    resolution:

    - nothing on one side of ``p`` yet: try ``p`` itself (moved inside the open bracket);
    - successes only, ``hi <= p``: gallop down to ``p − (2·(p − hi) + r)`` (offsets r, 3r, 7r, ...: steps
      that double); failures only, ``lo >= p``: gallop up to ``p + 2·(lo − p) + r``;
    - both: try ``p`` when it lies strictly inside, else bisect, until ``hi − lo <= resolution``.

    From a prediction within e of the threshold this takes at most ``2 + 2·⌈log2(1 + e/r)⌉`` trials (the
    doubling search of :class:`ThresholdSearch` takes about ``log2(d*/d_min)`` doublings and ``log2(d*/2r)``
    bisections, whatever the prediction).

    The interface is :class:`ThresholdSearch`'s: ``next_d`` (``None`` when done), :meth:`feed`, ``visited``
    (every outcome used, the known ones included), ``lo`` and ``hi``.

    Parameters
    ----------
    prediction : float
        The predicted threshold (e.g. ``c·R·ln N`` fitted from earlier records, :func:`predict_threshold`).
    d_min, d_max : int
        The widths the search may try.
    resolution : int
        Stop when ``hi − lo`` is at most this.
    known : dict, optional
        Outcomes already recorded, ``{d: reached}``.

    Raises
    ------
    InputError
        A prediction that is not a finite number.
    """

    def __init__(self, prediction: float, d_min: int, d_max: int, resolution: int,
                 known: dict[int, bool] | None = None):
        if isinstance(prediction, bool) or not (isinstance(prediction, (int, float))
                                                and math.isfinite(prediction)):
            raise InputError(f"the prediction must be a finite number, got {prediction!r}")
        self.prediction = float(prediction)
        self.d_min, self.d_max, self.resolution = d_min, d_max, resolution
        self.start = resolution * round(self.prediction / resolution)
        self.visited: dict[int, bool] = {int(d): bool(ok) for d, ok in (known or {}).items()}
        self.next_d: int | None = None
        self._advance()

    @property
    def hi(self) -> int | None:
        """The smallest success (``None`` before one)."""
        wins = [d for d, ok in self.visited.items() if ok]
        return min(wins) if wins else None

    @property
    def lo(self) -> int | None:
        """The largest failure below the smallest success (``None`` before one)."""
        hi = self.hi
        losses = [d for d, ok in self.visited.items() if not ok and (hi is None or d < hi)]
        return max(losses) if losses else None

    def _advance(self) -> None:
        lo, hi, res, p = self.lo, self.hi, self.resolution, self.start
        low = self.d_min if lo is None else lo + 1  # the widths still worth a trial: [low, high]
        high = self.d_max if hi is None else hi - 1
        if lo is not None and hi is not None and hi - lo <= res or low > high:
            self.next_d = None
            return
        if lo is None and hi is None or low <= p <= high and p not in self.visited:
            d = p  # (moved into [low, high] below)
        elif lo is not None and hi is not None:
            d = (lo + hi) // 2
        elif hi is not None:  # successes only, at or below the prediction: gallop down
            d = p - (2 * (p - hi) + res)
        else:  # failures only, at or above the prediction: gallop up
            assert lo is not None  # not both None (the first branch)
            d = p + 2 * (lo - p) + res
        self.next_d = min(max(d, low), high)

    def feed(self, reached: bool) -> None:
        """Record the outcome of the trial at ``next_d`` and move to the next width (or finish).

        Parameters
        ----------
        reached : bool
            Whether the trial at ``next_d`` reached 100%.

        Raises
        ------
        RuntimeError
            The search is over.
        """
        if self.next_d is None:
            raise RuntimeError("the search is over")
        self.visited[self.next_d] = bool(reached)
        self._advance()

    @property
    def done(self) -> bool:
        """Whether the search has finished."""
        return self.next_d is None


def _threshold_record(N: int, R: int, mode: str, seed: int, settings: TrialSettings,
                      outcomes: dict[int, bool], last_failure: int | None, d_min: int, d_max: int,
                      resolution: int, search: str = "doubling",
                      extra: dict | None = None) -> dict:
    successes = [d for d, ok in outcomes.items() if ok]
    failures = [d for d, ok in outcomes.items() if not ok]
    monotone = not successes or not failures or max(failures) < min(successes)
    return {"kind": "threshold", "N": N, "R": R, "mode": mode, "seed": seed,
            "d_star": min(successes) if successes else None, "last_failure": last_failure,
            "trials": sorted(outcomes), "monotone": monotone, "d_min": d_min, "d_max": d_max,
            "resolution": resolution, "search": search, **(extra or {}), **asdict(settings),
            "seed_contract": SEED_CONTRACT, "version": __version__}


def _check_range(d_min: int, d_max: int, resolution: int) -> None:
    for name, value in (("d_min", d_min), ("d_max", d_max), ("resolution", resolution)):
        check_positive_int(name, value)
    if d_min > d_max:
        raise InputError(f"d_min must be <= d_max, got d_min = {d_min} > d_max = {d_max}")


def find_threshold(N: int, R: int, mode: str, seed: int, settings: TrialSettings, *, d_min: int = 4,
                   d_max: int = 1024, resolution: int = 2, known: dict[int, dict] | None = None,
                   on_trial: Callable[[dict], None] | None = None) -> dict:
    """Run one threshold search in this process; ``known`` trials (by d) are reused instead of re-run.

    Parameters
    ----------
    N, R, mode, seed, settings
        The configuration (see :func:`run_trial`).
    d_min, d_max, resolution : int
        The search range and resolution (see :class:`ThresholdSearch`).
    known : dict, optional
        Trial records by d. Every one of them counts for ``d_star`` and the ``monotone`` flag, visited or not
        (:func:`sweep` passes none and builds its records from visited trials only).
    on_trial : callable, optional
        Called with each new trial record.

    Returns
    -------
    dict
        The ``"threshold"`` record.
    """
    _check_mode(mode)
    _check_range(d_min, d_max, resolution)
    known = dict(known or {})
    search = ThresholdSearch(d_min, d_max, resolution)
    while not search.done:
        d = search.next_d
        assert d is not None  # a search that is not done has a next d
        if d not in known:
            known[d] = run_trial(N, R, mode, seed, d, settings)
            if on_trial is not None:
                on_trial(known[d])
        search.feed(known[d]["reached"])
    outcomes = {d: bool(t["reached"]) for d, t in known.items()}
    blas = sorted({t.get("blas") or "not recorded" for t in known.values()})
    return _threshold_record(N, R, mode, seed, settings, outcomes, search.lo, d_min, d_max, resolution,
                             extra={"blas": blas})


# ------------------------------------------------------------------------------------------- the results file

def _key(record: dict, fields: tuple) -> tuple:
    return tuple(record.get(name, _DEFAULTS.get(name)) for name in fields)


def trial_key(record: dict) -> tuple:
    """A trial record's identity.

    Parameters
    ----------
    record : dict
        A trial record (or any dict with its fields).

    Returns
    -------
    tuple
        Its :data:`TRIAL_KEY` values, in that order (fields older records lack take their defaults).
    """
    return _key(record, TRIAL_KEY)


def threshold_key(record: dict) -> tuple:
    """A threshold record's identity.

    Parameters
    ----------
    record : dict
        A threshold record.

    Returns
    -------
    tuple
        Its :data:`THRESHOLD_KEY` values, in that order (fields older records lack take their defaults).
    """
    return _key(record, THRESHOLD_KEY)


def _config_key(record: dict) -> tuple:
    return _key(record, _CONFIG_KEY)


SweepFile = ResultsFile  # the old name of what read_sweep returns (one results-file class)


def _whole(low: int = 0):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v < 2**63


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _text(v) -> bool:
    return isinstance(v, str) and len(v) <= 1000


def _flag(v) -> bool:
    return isinstance(v, bool)


def _maybe(check):
    return lambda v: v is None or check(v)


# What the code reads of each kind of record, with the type it needs: a line that breaks any is alien.
_FIELDS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "trial": {"N": _whole(2), "R": _whole(1), "mode": lambda v: v in MODES, "seed": _whole(0), "d": _whole(1),
              "reached": _flag, "steps": _whole(0), "lr": lambda v: _real(v) and v > 0,
              "width_factor": _whole(1), "attention": _text, "dtype": _text, "version": _text},
    "threshold": {"N": _whole(2), "R": _whole(1), "mode": lambda v: v in MODES, "seed": _whole(0),
                  "d_star": _maybe(_whole(1)), "monotone": _flag,
                  "trials": lambda v: isinstance(v, list) and len(v) <= 10_000 and all(map(_whole(1), v)),
                  "steps": _whole(0), "lr": lambda v: _real(v) and v > 0, "width_factor": _whole(1),
                  "attention": _text, "dtype": _text, "version": _text},
    "transfer": {"closed_form_accuracy": lambda v: _real(v) and 0 <= v <= 1,
                 "fitted_accuracy": lambda v: _real(v) and 0 <= v <= 1},
}
# Fields that older records may lack (their defaults are _DEFAULTS), checked when present.
_OPTIONAL: dict[str, Callable[[Any], bool]] = {
    "k": _whole(1), "cot": _flag, "heads": _whole(1), "seed_contract": _maybe(_whole(0)),
    "d_min": _whole(1), "d_max": _whole(1), "resolution": _whole(1), "seconds": _maybe(_real),
    "label": _maybe(_text), "search": lambda v: v in SEARCHES, "prediction": _maybe(_real),
    "prediction_c": _maybe(_real),
    "blas": lambda v: _text(v) or isinstance(v, list) and len(v) <= 1000 and all(map(_text, v)),
}


def _is_sweep_record(value) -> bool:
    """Whether a parsed line is a record this module reads, with every field it reads of the type it needs
    (trial and threshold records; transfer records for the figures); lines of other kinds are kept as they
    are (nothing reads them)."""
    if not isinstance(value, dict) or not isinstance(value.get("kind"), str):
        return False
    fields = _FIELDS.get(value["kind"])
    if fields is None:
        return True  # another kind of record: kept, never read here
    if value["kind"] in _REQUIRED and any(name not in value for name in _REQUIRED[value["kind"]]):
        return False
    if not all(name in value and check(value[name]) for name, check in fields.items()):
        return False
    return all(check(value[name]) for name, check in _OPTIONAL.items() if name in value)


def read_sweep(path: str, *, budget: Budget | int | None = None) -> ResultsFile:
    """Read a results file: records de-duplicated by key, torn and alien lines counted and skipped.

    Parameters
    ----------
    path : str
        The JSONL file (missing: an empty result).
    budget : Budget, int or None
        A memory budget: the file is counted against it before it is parsed.

    Returns
    -------
    georecall.io.ResultsFile

    Raises
    ------
    InputError
        ``path`` is a directory, a device, cannot be read, or (with ``budget``) is too large.
    """
    def key(value: dict):
        if value["kind"] not in _REQUIRED:
            return None
        return (value["kind"], *(trial_key(value) if value["kind"] == "trial" else threshold_key(value)))

    return read_jsonl(path, ResultsFile(), _is_sweep_record, key, budget=budget, what="sweep")


def read_records(path: str, *, budget: Budget | int | None = None) -> list[dict]:
    """The usable records of a results file (skipped lines are not reported).

    Parameters
    ----------
    path, budget
        As in :func:`read_sweep`.

    Returns
    -------
    list of dict
        Every usable record in file order, duplicates removed.

    Raises
    ------
    InputError
        As in :func:`read_sweep`.
    """
    return read_sweep(path, budget=budget).records


# ---------------------------------------------------------------------------------------------- progress

@dataclass
class ProgressInfo:
    """A snapshot for a progress callback.

    Attributes
    ----------
    configs_done, configs_total : int
        Finished searches (including those found finished in the file) and all searches of the call.
    trials_done : int
        Trials run by this call so far.
    trials_reused : int
        Trials taken from the file instead of being run.
    trials_left : int
        Estimated trials still to run (from the mean trials per finished search).
    elapsed : float
        Seconds since the sweep started.
    eta : float or None
        Estimated seconds left (``None`` until a trial has finished).
    message : str
        What just happened.
    """

    configs_done: int
    configs_total: int
    trials_done: int
    trials_reused: int
    trials_left: int
    elapsed: float
    eta: float | None
    message: str


class _StderrProgress:
    """Progress on stderr: one rewritten line on a terminal, else plain lines (at most one per second)."""

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last = 0.0
        self.open_line = False

    def __call__(self, info: ProgressInfo) -> None:
        now = time.monotonic()
        final = info.configs_done == info.configs_total
        if not self.tty and not final and now - self.last < 1.0:
            return
        self.last = now
        text = (f"sweep: {info.configs_done}/{info.configs_total} searches, {info.trials_done} trials run"
                f" (~{info.trials_left} left), elapsed {clock(info.elapsed)}, ETA {clock(info.eta)}"
                f" | {info.message}")
        if self.tty:
            width = 150
            print("\r" + text[:width].ljust(width), end="", file=self.stream, flush=True)
            self.open_line = True
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> None:
        if self.open_line:
            print(file=self.stream, flush=True)
            self.open_line = False


# ------------------------------------------------------------------------------------------------ driver

def _configs(Ns, Rs, modes, seeds) -> list[tuple]:
    for name, values in (("Ns", Ns), ("Rs", Rs), ("modes", modes), ("seeds", seeds)):
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise TypeError(f"{name} must be a list, got {values!r}")
    Ns, Rs, modes, seeds = (list(v) for v in (Ns, Rs, modes, seeds))
    for name, values in (("Ns", Ns), ("Rs", Rs), ("modes", modes), ("seeds", seeds)):
        if not values:
            raise InputError(f"{name} is empty: nothing to sweep")
    for N in Ns:
        check_positive_int("N", N)
    for R in Rs:
        check_positive_int("R", R)
    for mode in modes:
        _check_mode(mode)
    for seed in seeds:
        try:
            check_seed(seed)
        except ValueError as exc:  # theory.seeds raises a plain ValueError; here it is the user's input
            raise InputError(str(exc)) from None
    configs = []
    grid = ((int(N), int(R), mode, int(seed)) for N in Ns for R in Rs for mode in modes for seed in seeds)
    for config in grid:
        if config not in configs:
            configs.append(config)
    return configs


def sweep(path: str, Ns, Rs, modes=MODES, seeds=(0, 1, 2), *, settings: TrialSettings = TrialSettings(),
          d_min: int = 4, d_max: int = 1024, resolution: int = 2, workers: int = 1,
          progress: bool | Callable[[ProgressInfo], None] = True, max_trials: int | None = None,
          scheduler: str | None = None, lock_timeout: float | None = None, connect_timeout: float = 10.0,
          log: Callable[[str], None] | None = None, worker_timeout: float = WORKER_TIMEOUT,
          budget: Budget | int | None = None, search: str = "doubling", budget_hours: float | None = None,
          step_seconds_fallback: Callable[[int, int, int], float] | None = None,
          on_estimate: Callable[[dict], None] | None = None) -> list[dict]:
    """Run (or resume) the threshold search for every configuration; return its threshold records.

    Parameters
    ----------
    path : str
        The JSONL results file (created if missing; validated, then locked, before any work).
    Ns, Rs, modes, seeds : lists
        The grid: every (N, R, mode, seed).
    settings : TrialSettings
        Trial parameters shared by the grid.
    d_min, d_max, resolution : int
        Search range and resolution (``d_min <= d_max``).
    workers : int
        Local processes when ``scheduler`` is ``None`` (1: trials run in this process).
    progress : bool or callable
        ``True``: progress on stderr (searches and trials done, elapsed, ETA; plain lines when stderr is not a
        terminal). A callable receives a :class:`ProgressInfo` after every trial and search instead.
    max_trials : int, optional
        Stop after that many new trials (the file stays consistent; for tests of resumption).
    scheduler : str, optional
        ``"local:W"`` (a Dask ``LocalCluster`` of W single-threaded workers) or ``"tcp://HOST:PORT"`` (a
        running Dask scheduler); needs the ``distributed`` extra. Exclusive with ``workers > 1``.
    lock_timeout : float, optional
        Seconds to wait for the file's lock when another sweep holds it (``None``: wait, saying so once;
        ``0``: refuse at once).
    connect_timeout : float
        Seconds to wait for a Dask scheduler.
    log : callable, optional
        Receives one-line notes (skipped lines, lock waits, the dashboard, interruption); default: stderr.
    worker_timeout : float
        Seconds without any Dask worker before the sweep gives up (the records so far are kept).
    budget : Budget, int or None
        Memory budget the existing results file is counted against before it is read.
    search : str
        ``"doubling"`` (:class:`ThresholdSearch`, from ``d_min``) or ``"predicted"`` (:class:`PredictedSearch`
        from ``c·R·ln N`` fitted to the threshold records in the file when the sweep starts,
        :func:`predict_threshold`, so that every executor gives the same records; a search resumed from its
        trials keeps the prediction they recorded). Part of the threshold key. To predict R = 16 from
        R = 8, run R = 8 first, in a sweep of its own.
    budget_hours : float, optional
        Refuse (``InputError``, before any trial) when the estimated cost (:func:`estimate_cost`, worst case
        over the predictions' bands) exceeds this many hours, or cannot be estimated.
    step_seconds_fallback : callable, optional
        ``(N, R, d) -> seconds per step`` for the estimate where the file has no trials at N (e.g.
        :func:`measure_step_seconds`).
    on_estimate : callable, optional
        Receives the estimate (a dict, :func:`estimate_cost`) before any trial; its line is also logged.

    Returns
    -------
    list of dict
        The threshold records of the grid (every configuration unless stopped by ``max_trials``).

    Raises
    ------
    InputError
        Bad parameters or output path, a lock not obtained in time, a scheduler not reached (one line each).
    KeyboardInterrupt
        Re-raised after the workers are stopped (within about a second) and a note is logged.
    """
    settings = settings.validate()
    if search not in SEARCHES:
        raise InputError(f"search must be one of {SEARCHES}, got {search!r}")
    if budget_hours is not None and (isinstance(budget_hours, bool) or not _real(budget_hours)
                                     or budget_hours <= 0):
        raise InputError(f"budget_hours must be a positive finite number, got {budget_hours!r}")
    workers = check_positive_int("workers", workers)
    if scheduler is not None and workers != 1:
        raise InputError(f"give either workers ({workers}) or a scheduler ({scheduler!r}), not both: a Dask "
                         f"cluster has its own workers")
    _check_range(d_min, d_max, resolution)
    if max_trials is not None:
        max_trials = check_positive_int("max_trials", max_trials)
    configs = _configs(Ns, Rs, modes, seeds)
    path = validate_output_path(path, what="results file")
    log = log if log is not None else stderr_note
    version = {"seed_contract": SEED_CONTRACT, "version": __version__, **asdict(settings)}
    range_ = {"d_min": d_min, "d_max": d_max, "resolution": resolution}
    keyed = {**range_, "search": search}

    def config_record(config: tuple) -> dict:
        N, R, mode, seed = config
        return {"N": N, "R": R, "mode": mode, "seed": seed, **version}

    wanted = {threshold_key({**config_record(c), **keyed}) for c in configs}
    with open_results(path, read_sweep, lock_timeout=lock_timeout, log=log, budget=budget) as contents:
        finished = {threshold_key(r) for r in contents.records if r["kind"] == "threshold"}
        known: dict[tuple, dict[int, dict]] = {}
        for r in contents.records:
            if r["kind"] == "trial":
                known.setdefault(_config_key(r), {})[r["d"]] = r
        todo = [c for c in configs if threshold_key({**config_record(c), **keyed}) not in finished]
        if todo:
            estimate = estimate_cost(contents.records, todo, settings, search=search, **range_,
                                     seconds=step_seconds_fallback)
            predictions = {}
            if search == "predicted":  # from the file as it is now, whatever the executor runs first
                predictions = {(N, R, mode, seed): predict_threshold(contents.records, N, R, mode, settings)
                               for N, R, mode, seed in todo}
                missing = [c for c, p in predictions.items() if p is None]
                if missing:
                    N, R, mode, seed = missing[0]
                    raise InputError(f"no threshold record of mode {mode} with these settings to predict "
                                     f"N={N} R={R} from: run a doubling search first (search='doubling')")
            if estimate["per_config"]:
                log(cost_line(estimate))
            if on_estimate is not None:
                on_estimate(estimate)
            if budget_hours is not None:
                if estimate["unknown"]:
                    raise InputError(f"cannot estimate the cost of {len(estimate['unknown'])} "
                                     f"configuration(s) (no prediction or no measured step) within "
                                     f"budget_hours = {budget_hours:g}")
                if estimate["hours"] > budget_hours:
                    raise InputError(f"the estimated cost, {estimate['hours']:.2f} h at most "
                                     f"({estimate['trials']} trials), exceeds the budget of "
                                     f"{budget_hours:g} h")
            reporter = _StderrProgress() if progress is True else (progress if callable(progress) else None)
            close = getattr(reporter, "close", None)

            def note(text: str) -> None:  # a note starts a line of its own after a line rewritten in place
                if close is not None:
                    close()
                log(text)

            searches = _Searches(path, settings, range_, known, len(configs), todo,
                                 config_key=lambda c: _config_key(config_record(c)), search=search,
                                 predictions=predictions,
                                 per_search=[len(r["trials"]) for r in contents.records
                                             if r["kind"] == "threshold"],
                                 reporter=reporter, max_trials=max_trials)
            try:
                drive(searches, todo, lambda: open_executor(
                    scheduler, workers, connect_timeout=connect_timeout, message=note,
                    worker_timeout=worker_timeout), workers=workers, path=path, log=note)
            finally:
                if close is not None:
                    close()
        records = read_sweep(path, budget=budget).records
        return [r for r in records if r["kind"] == "threshold" and threshold_key(r) in wanted]


class _Searches(JobList):
    """The threshold searches of one sweep as a job list of :func:`.driver.drive`: a unit is a configuration
    (N, R, mode, seed), its tasks are the trials its search asks for one at a time; a search's trials found in
    the file are reused, and a finished search appends its threshold record."""

    noun = "trial"

    def __init__(self, path: str, settings: TrialSettings, range_: dict, known: dict, total: int, todo: list,
                 *, config_key: Callable[[tuple], tuple], per_search: list[int],
                 reporter: Callable[[ProgressInfo], None] | None, max_trials: int | None,
                 search: str = "doubling", predictions: dict[tuple, dict | None] | None = None):
        super().__init__()
        self.path, self.settings, self.range_, self.known = path, settings, range_, known
        self.config_key, self.reporter, self.max_trials = config_key, reporter, max_trials
        self.total, self.search, self.predicted = total, search, dict(predictions or {})
        self.searches: dict[tuple, ThresholdSearch | PredictedSearch] = {}  # made when a search starts
        self.predictions: dict[tuple, dict | None] = {}
        self.todo = list(todo)
        self.done = total - len(todo)  # finished searches, those found finished in the file included
        self.reused = 0
        self.visited_trials = per_search[:]  # trials per finished search, for the estimate of what is left

    def report(self, message: str) -> None:
        """Give the progress callback a :class:`ProgressInfo` (trials left: the mean per finished search)."""
        if self.reporter is None:
            return
        mean = float(np.mean(self.visited_trials)) if self.visited_trials else 6.0
        left = sum(max(round(mean) - len(s.visited), 1) for s in self.searches.values() if not s.done)
        left += sum(round(mean) for c in self.todo if c not in self.searches)
        tally = self.tally
        self.reporter(ProgressInfo(self.done, self.total, tally.new, self.reused, left, tally.elapsed(),
                                   tally.eta(left), message))

    def opened(self, handle, units: int) -> None:
        self.report(f"{units} searches on {handle.description}")

    def start(self, config: tuple) -> list[Task]:
        """Feed the search the trials the file already has; return its next trial, or finish it."""
        have = self.known.get(self.config_key(config), {})
        if config not in self.searches:  # made when it starts (the reused trials are the file's by then)
            prediction = None
            if self.search == "predicted":  # a resumed search keeps the prediction its trials recorded
                earlier = [t for t in have.values() if _real(t.get("prediction"))]
                prediction = ({"d": float(earlier[0]["prediction"]), "c": earlier[0].get("prediction_c")}
                              if earlier else self.predicted[config])
            self.predictions[config] = prediction
            outcomes = {d: bool(t["reached"]) for d, t in have.items()}
            self.searches[config] = _make_search(self.search, prediction, outcomes, self.range_)
            if self.search == "predicted":
                self.reused += len(have)  # a predicted search takes every recorded trial at once
        search = self.searches[config]
        while not search.done and search.next_d in have:
            search.feed(have[search.next_d]["reached"])
            self.reused += 1
        N, R, mode, seed = config
        if not search.done:
            d = search.next_d
            assert d is not None  # a search that is not done has a next d
            return [Task(run_trial, (*config, d, self.settings), (config, d),
                         f"the trial N={N} R={R} {mode} seed {seed} d={d}")]
        blas = sorted({have[d].get("blas") or "not recorded" for d in search.visited if d in have})
        record = _threshold_record(N, R, mode, seed, self.settings, dict(search.visited), search.lo,
                                   **self.range_, search=self.search,
                                   extra={**self._prediction_fields(config), "blas": blas})
        append_jsonl(self.path, record)
        self.visited_trials.append(len(search.visited))
        self.done += 1
        self.report(f"N={N} R={R} {mode} seed {seed}: d* = {record['d_star']}")
        return []

    def _prediction_fields(self, config: tuple) -> dict:
        """The prediction a predicted search started from (also written into its trial records, so that a
        resumed search starts from the same one)."""
        prediction = self.predictions.get(config)
        if prediction is None:
            return {}
        c = prediction.get("c")
        return {"prediction": round(prediction["d"], 3), "prediction_c": None if c is None else round(c, 6)}

    def accept(self, task: Task, record: dict) -> list[Task]:
        config, d = task.tag
        record = {**record, **self._prediction_fields(config)}
        append_jsonl(self.path, record)
        self.known.setdefault(self.config_key(config), {})[d] = record
        self.searches[config].feed(record["reached"])
        N, R, mode, seed = config
        self.report(f"N={N} R={R} {mode} seed {seed}: d={d} {'reached' if record['reached'] else 'failed'}"
                    f" ({record['seconds']:.1f} s)")
        if self.max_trials is not None and self.tally.new >= self.max_trials:
            raise Stop
        return self.start(config)


# ------------------------------------------------------------------------------ prediction and cost

_BAND_SIGMAS = 3.0  # the cost estimate covers thresholds within c ± max(3 standard errors, 10% of c)
_BAND_FLOOR = 0.10


def _same_settings(record: dict, settings: TrialSettings) -> bool:
    return _key(record, _SETTINGS_KEY) == settings.key()


def predict_threshold(records: list[dict], N: int, R: int, mode: str, settings: TrialSettings) -> dict | None:
    """The threshold predicted for (N, R, mode) by ``d* = c·R·ln N`` fitted to earlier threshold records.

    The fit (:func:`fit_thresholds`) uses the records of that mode and the same settings at the same N when
    there are any (the constant c drifts with N for frozen embeddings), else those at every N.

    Parameters
    ----------
    records : list of dict
        Sweep records (threshold records are used; others are skipped).
    N, R : int
        The configuration predicted.
    mode : str
        ``"learned"`` or ``"frozen"``.
    settings : TrialSettings
        Only records with these settings count.

    Returns
    -------
    dict or None
        ``d`` (the prediction), ``c``, ``c_stderr`` (``None`` when the fit is exact), ``band`` (the widths
        ``(c ∓ max(3·stderr, 0.1·c))·R·ln N`` the cost estimate covers), ``points`` and ``basis`` (``"same
        N"`` or ``"every N"``); ``None`` when no record reached 100%.
    """
    rows = [r for r in records if r.get("kind") == "threshold" and r["mode"] == mode
            and r.get("d_star") is not None and _same_settings(r, settings)]
    same = [r for r in rows if r["N"] == N]
    use, basis = (same, "same N") if same else (rows, "every N")
    if not use:
        return None
    fit = fit_thresholds(use)[mode]
    x = R * math.log(N)
    c, se = fit["c"], fit["c_stderr"]
    half = max(_BAND_SIGMAS * (se or 0.0), _BAND_FLOOR * c)
    return {"d": c * x, "c": c, "c_stderr": se, "band": ((c - half) * x, (c + half) * x),
            "points": fit["points"], "basis": basis}


def step_seconds(records: list[dict], N: int, settings: TrialSettings) -> Callable[[int, int], float] | None:
    """Seconds per training step as a function of (R, d), fitted to the recorded trials at N.

    The model is ``seconds/step = R·(a + b·d)`` (the step is linear in the N·R queries and, through the
    read-out over N answers and the MLP, in d), least squares over ``seconds / steps_run`` of every trial
    record at N with the same settings (each one a measurement, under whatever load it ran).

    Parameters
    ----------
    records : list of dict
        Sweep records (trial records are used).
    N : int
        Entities.
    settings : TrialSettings
        Only trials with these settings count.

    Returns
    -------
    callable or None
        ``(R, d) -> seconds``; ``None`` with fewer than two distinct (R, d) measured.
    """
    rows = [r for r in records if r.get("kind") == "trial" and r["N"] == N and _same_settings(r, settings)
            and r.get("steps_run") and r.get("seconds")]
    if len({(r["R"], r["d"]) for r in rows}) < 2:
        return None
    A = np.array([[r["R"], r["R"] * r["d"]] for r in rows], dtype=float)
    y = np.array([r["seconds"] / r["steps_run"] for r in rows], dtype=float)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    a, b = max(float(a), 0.0), max(float(b), 0.0)
    if a == 0.0 and b == 0.0:
        return None
    return lambda R, d: R * (a + b * d)


def measure_step_seconds(N: int, R: int, d: int, settings: TrialSettings, steps: int = 2) -> float:
    """Seconds per step of a trial at (N, R, d), timed over a few steps of the trainer (no records needed).

    Parameters
    ----------
    N, R, d : int
        The trial's sizes.
    settings : TrialSettings
        The trial's settings.
    steps : int
        Steps timed.

    Returns
    -------
    float
    """
    task = task_for_seed(N, R, 0)
    tokens, answers, positions, T = training_data(task, settings.k, settings.cot)
    model = init_model(N, R, d, settings.width_factor * d, attention=settings.attention, heads=settings.heads,
                       positions=T if settings.k > 1 or settings.cot else None, rng=0,
                       dtype=np.dtype(settings.dtype))
    result = train(model, tokens, answers, steps=steps, lr=settings.lr, positions=positions, rng=0,
                   dtype=np.dtype(settings.dtype), stop_at_accuracy=None)
    return result.seconds / max(result.steps, 1)


def _make_search(search: str, prediction: dict | None, known: dict[int, bool], range_: dict):
    if search == "doubling":
        return ThresholdSearch(range_["d_min"], range_["d_max"], range_["resolution"])
    assert prediction is not None  # sweep refuses a predicted search without a prediction
    return PredictedSearch(prediction["d"], range_["d_min"], range_["d_max"], range_["resolution"], known)


def _simulate(search: str, prediction: dict | None, known: dict[int, bool], range_: dict,
              threshold: float) -> list[int]:
    """The widths a search would still train if success were exactly ``d >= threshold`` (known trials are
    reused, not counted)."""
    s = _make_search(search, prediction, known, range_)
    trained = []
    while not s.done:
        d = s.next_d
        assert d is not None  # a search that is not done has a next d
        if d in known:
            s.feed(known[d])
            continue
        trained.append(d)
        s.feed(d >= threshold)
    return trained


def calibration(records: list[dict], N: int, settings: TrialSettings,
                rate: Callable[[int, int], float]) -> dict | None:
    """How the recorded trials at N compare with the step model ``rate`` (:func:`step_seconds`): the factors
    that turn its seconds per step into the seconds the trials took.

    The step model is a least-squares line through measurements taken under whatever load the machine had;
    a trial's ``seconds / (rate(R, d) · steps_run)`` is how much slower (or faster) than the line it ran.
    The estimate scales its worst case by the largest of these ratios (so it holds unless the machine is
    slower than during every recorded trial) and its expected cost by their median. Successful trials stop
    early: the expected cost counts a success at the median share of the step budget that recorded successes
    used.

    Parameters
    ----------
    records : list of dict
        Sweep records (trial records at N with these settings are used).
    N : int
        Entities.
    settings : TrialSettings
        Only trials with these settings count.
    rate : callable
        ``(R, d) -> seconds per step``, the model being calibrated.

    Returns
    -------
    dict or None
        ``slowest`` (the largest ratio), ``median`` (the median ratio), ``trials`` (how many trials), and
        ``success_share`` (median ``steps_run / steps`` of the successful ones; 1 without any); ``None``
        without recorded trials at N.
    """
    rows = [r for r in records if r.get("kind") == "trial" and r["N"] == N and _same_settings(r, settings)
            and r.get("steps_run") and r.get("seconds")]
    ratios = [r["seconds"] / (rate(r["R"], r["d"]) * r["steps_run"]) for r in rows
              if rate(r["R"], r["d"]) > 0]
    if not ratios:
        return None
    shares = [r["steps_run"] / r["steps"] for r in rows if r["reached"] and r["steps"]]
    return {"slowest": float(max(ratios)), "median": float(np.median(ratios)), "trials": len(ratios),
            "success_share": float(np.median(shares)) if shares else 1.0}


def estimate_cost(records: list[dict], configs: list[tuple], settings: TrialSettings, *, search: str,
                  d_min: int, d_max: int, resolution: int,
                  seconds: Callable[[int, int, int], float] | None = None) -> dict:
    """What a sweep of ``configs`` would still cost: trials × measured seconds per step × steps.

    For each configuration the search is simulated against a monotone oracle whose threshold lies anywhere
    in the prediction's band (:func:`predict_threshold`; every integer width in it), reusing the recorded
    trials; the worst case over the band is counted, each trial at its full step budget. Seconds per step
    come from :func:`step_seconds` (recorded trials at that N), calibrated against those trials' own seconds
    (:func:`calibration`): the worst case is scaled by the slowest recorded trial's ratio to the step model,
    the expected cost (threshold at the prediction) by the median ratio, with successful trials at the
    median share of the step budget recorded successes used. For an N without records, one call
    ``seconds(N, R, d0)`` at the predicted width d0 (e.g. :func:`measure_step_seconds`), scaled linearly in
    d, uncalibrated (nothing recorded to calibrate against).

    Parameters
    ----------
    records : list of dict
        The results file's records.
    configs : list of tuple
        ``(N, R, mode, seed)`` still to search.
    settings : TrialSettings
        The trials' settings.
    search : str
        ``"doubling"`` or ``"predicted"``.
    d_min, d_max, resolution : int
        The search range.
    seconds : callable, optional
        ``(N, R, d) -> seconds per step`` where no trial at N is recorded.

    Returns
    -------
    dict
        ``trials`` and ``hours`` (worst case over the bands), ``expected_trials`` and ``expected_hours`` (the
        threshold exactly at the prediction), ``per_config`` (each configuration's prediction, widths,
        hours and ``calibration``: :func:`calibration`'s dict, ``None`` when uncalibrated), and ``unknown``
        (configurations with no prediction: not counted).
    """
    range_ = {"d_min": d_min, "d_max": d_max, "resolution": resolution}
    known_by: dict[tuple, dict[int, bool]] = {}
    for r in records:
        if r.get("kind") == "trial" and _same_settings(r, settings):
            config = (r["N"], r["R"], r["mode"], r["seed"], *_key(r, ("seed_contract", "version")))
            known_by.setdefault(config, {})[r["d"]] = bool(r["reached"])
    rates: dict[int, Callable[[int, int], float] | None] = {}
    calibrations: dict[int, dict | None] = {}
    per_config, unknown = [], []
    total_trials = total_hours = exp_trials = exp_hours = 0.0
    for N, R, mode, seed in configs:
        prediction = predict_threshold(records, N, R, mode, settings)
        if prediction is None:
            unknown.append((N, R, mode, seed))
            continue
        if N not in rates:
            fitted = step_seconds(records, N, settings)
            rates[N] = fitted
            calibrations[N] = None if fitted is None else calibration(records, N, settings, fitted)
        rate, calibrated = rates[N], calibrations[N]
        if rate is None and seconds is None:
            unknown.append((N, R, mode, seed))
            continue

        if rate is None:  # one measurement at the predicted width, scaled linearly in d
            assert seconds is not None  # checked above
            d0 = max(int(round(prediction["d"])), 1)
            measured = seconds(N, R, d0)
            rate = lambda R_, d, s0=measured, d0=d0: s0 * d / d0  # noqa: E731
        slowest = calibrated["slowest"] if calibrated else 1.0
        typical = calibrated["median"] if calibrated else 1.0
        share = calibrated["success_share"] if calibrated else 1.0

        def cost(widths: list[int], factor: float, threshold: float | None = None, R=R, rate=rate,
                 share=share) -> float:
            """Hours of the trials at ``widths`` (with a threshold: successes at ``share`` of the steps)."""
            steps = [settings.steps * (share if threshold is not None and d >= threshold else 1.0)
                     for d in widths]
            return factor * sum(rate(R, d) * n for d, n in zip(widths, steps)) / 3600

        known = known_by.get((N, R, mode, seed, SEED_CONTRACT, __version__), {})
        lo, hi = prediction["band"]
        worst: list[int] = []
        worst_hours = -1.0
        for t in range(max(int(math.floor(lo)), 1), int(math.ceil(hi)) + 1):
            widths = _simulate(search, prediction, known, range_, t)
            hours = cost(widths, slowest)
            if hours > worst_hours:
                worst, worst_hours = widths, hours
        expected = _simulate(search, prediction, known, range_, prediction["d"])
        expected_hours = cost(expected, typical, prediction["d"])
        total_trials += len(worst)
        total_hours += worst_hours
        exp_trials += len(expected)
        exp_hours += expected_hours
        per_config.append({"N": N, "R": R, "mode": mode, "seed": seed, "prediction": prediction,
                           "known_trials": len(known), "worst_widths": worst, "worst_hours": worst_hours,
                           "expected_widths": expected, "expected_hours": expected_hours,
                           "calibration": calibrated})
    return {"trials": int(total_trials), "hours": total_hours, "expected_trials": int(exp_trials),
            "expected_hours": exp_hours, "per_config": per_config, "unknown": unknown}


def cost_line(estimate: dict) -> str:
    """:func:`estimate_cost` in one line.

    Parameters
    ----------
    estimate : dict
        What :func:`estimate_cost` returns.

    Returns
    -------
    str
    """
    parts = [f"estimated cost: {estimate['trials']} trials, {estimate['hours']:.2f} h at most (thresholds "
             f"anywhere in the predictions' bands, every trial at its full step budget); "
             f"{estimate['expected_trials']} trials, {estimate['expected_hours']:.2f} h if each threshold is "
             f"at its prediction"]
    factors = [c["calibration"] for c in estimate["per_config"] if c.get("calibration")]
    if factors:
        f = factors[0]
        parts.append(f" (calibrated on {f['trials']} recorded trials: seconds per step × {f['slowest']:.2f}, "
                     f"the slowest trial against the step model, at most; × {f['median']:.2f}, the median, "
                     f"expected, with successes at {f['success_share']:.0%} of the steps)")
    elif estimate["per_config"]:
        parts.append(" (uncalibrated: no recorded trial at this N)")
    if estimate["unknown"]:
        parts.append(f"; {len(estimate['unknown'])} configuration(s) without a prediction or a measured step "
                     "not counted")
    return "".join(parts)


def fit_thresholds(records: list[dict]) -> dict[str, dict]:
    """Per mode: least-squares fit of ``d* = c·R·ln N`` (scipy), c per seed and its spread over seeds; and a
    power law ``d* = a·N^p·R^q`` (exponents fitted where the records vary N, resp. R).

    Parameters
    ----------
    records : list of dict
        Threshold records (``mode``, ``N``, ``R``, ``seed``, ``d_star``, ``monotone``); searches that never
        reached 100% (``d_star`` None) are counted as ``unreached``, not fitted.

    Returns
    -------
    dict
        Per mode with at least one d*: ``c``, ``c_stderr`` (None when the fit is exact), ``c_per_seed``,
        ``c_seed_mean``, ``c_seed_std`` (ddof 1), ``power_law`` (``log_a`` and ``p_N`` / ``q_R`` where
        fitted), ``points``, ``non_monotone``, ``unreached``.
    """
    from scipy.optimize import curve_fit

    out = {}
    for mode in MODES:
        rows = [r for r in records if r["mode"] == mode and r["d_star"] is not None]
        if not rows:
            continue
        x = np.array([r["R"] * math.log(r["N"]) for r in rows], dtype=float)
        y = np.array([r["d_star"] for r in rows], dtype=float)
        with warnings.catch_warnings():  # a perfect fit (too few points) has no covariance estimate
            warnings.simplefilter("ignore")
            (c,), cov = curve_fit(lambda t, c: c * t, x, y, p0=[1.0])
        per_seed = {}
        for seed in sorted({r["seed"] for r in rows}):
            mask = np.array([r["seed"] == seed for r in rows])
            per_seed[seed] = float(np.sum(x[mask] * y[mask]) / np.sum(x[mask] ** 2))
        values = np.array(list(per_seed.values()))
        # A second form that can tell logarithmic from polynomial growth: log d* = log a + p·log N + q·log R
        # (p, q fitted only when the records hold at least two N, resp. two R).
        Ns = np.array([r["N"] for r in rows], dtype=float)
        Rs = np.array([r["R"] for r in rows], dtype=float)
        columns = [np.ones_like(y)] + [np.log(v) for v in (Ns, Rs) if np.unique(v).size > 1]
        coef = np.linalg.lstsq(np.stack(columns, axis=1), np.log(y), rcond=None)[0]
        names = ["log_a"] + [n for n, v in (("p_N", Ns), ("q_R", Rs)) if np.unique(v).size > 1]
        power_law = {name: float(value) for name, value in zip(names, coef)}
        stderr = float(math.sqrt(cov[0, 0])) if np.isfinite(cov[0, 0]) else None
        out[mode] = {"power_law": power_law, "c": float(c), "c_stderr": stderr,
                     "c_per_seed": per_seed, "c_seed_mean": float(values.mean()),
                     "c_seed_std": float(values.std(ddof=1)) if values.size > 1 else 0.0,
                     "points": len(rows), "non_monotone": sum(not r["monotone"] for r in rows),
                     "unreached": sum(1 for r in records if r["mode"] == mode and r["d_star"] is None)}
    return out


def summary_table(records: list[dict]) -> str:
    """d* per (N, R, mode) over seeds, as text.

    Parameters
    ----------
    records : list of dict
        Threshold records.

    Returns
    -------
    str
        One line per (N, R, mode): d* per seed, their mean (over the searches that reached 100%) and R·ln N.
    """
    groups: dict[tuple, list] = {}
    for r in records:
        groups.setdefault((r["N"], r["R"], r["mode"]), []).append(r["d_star"])
    lines = [f"{'N':>6} {'R':>3} {'mode':>8}  {'d* per seed':<20} {'mean':>7} {'R·lnN':>7}"]
    for (N, R, mode), values in sorted(groups.items()):
        reached = [v for v in values if v is not None]
        mean = f"{np.mean(reached):7.1f}" if reached else "      —"
        lines.append(f"{N:>6} {R:>3} {mode:>8}  {values!s:<20} {mean} {R * math.log(N):7.1f}")
    return "\n".join(lines)


# ------------------------------------------------------------------------- bits of knowledge per parameter

# Published capacities of trained language models, in bits of knowledge per parameter (approximate)
BITS_REFERENCES: dict[str, float] = {
    "Allen-Zhu & Li 2024 (Physics of Language Models 3.3: knowledge capacity)": 2.0,
    "Morris et al. 2025 (How much do language models memorize?)": 3.6,
}


def knowledge_bits(N: int, R: int, k: int = 1) -> dict:
    """The bits a model must hold to answer every query of an unknown task: ``log2`` of the number of tasks
    it must tell apart. k = 1: ``R·log2 N!`` (``(N!)^R`` tasks, exact). k >= 2: ``log2 |F_k|`` from the proved
    lower bound ``(L − 1)!·(N!)^{R−1}`` (``bounds.counting.F_lower``): at least that many bits.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops (positive).

    Returns
    -------
    dict
        ``bits`` (float), ``exact`` (k = 1) and ``count`` (what was counted, in words).

    Raises
    ------
    InputError
        A size that is not a positive integer.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    return {"bits": float(log2_product(F_lower(N, R, k))), "exact": k == 1,
            "count": "(N!)^R tasks" if k == 1 else "|F_k| >= (L-1)!·(N!)^(R-1) k-hop answer tables"}


def model_parameters(N: int, R: int, d: int, settings: TrialSettings) -> dict:
    """Parameters of the model a trial of ``settings`` trains at width d, counted from the model itself
    (``Model.parameter_count``).

    Parameters
    ----------
    N, R, d : int
        The task's sizes and the model's width.
    settings : TrialSettings
        The trial's MLP width factor, attention, heads, hops and CoT.

    Returns
    -------
    dict
        ``all`` (every parameter) and, per mode of :data:`FROZEN_GROUPS`, the parameters it trains.
    """
    T = None
    if settings.k > 1 or settings.cot:  # positions: the sequence length of the trial's queries
        T = training_data(task_for_seed(N, R, 0), settings.k, settings.cot)[3]
    model = init_model(N, R, d, settings.width_factor * d, attention=settings.attention, heads=settings.heads,
                       positions=T, rng=0, dtype=np.dtype(np.float32))
    total = model.parameter_count()
    arrays = model.arrays()
    out = {"all": total}
    for mode, groups in FROZEN_GROUPS.items():
        out[mode] = total - sum(int(arrays[g].size) for g in groups if g in arrays)
    return out


def bits_per_parameter(records: list[dict]) -> list[dict]:
    """Bits of knowledge per parameter at the capacity threshold, per (N, R, k, mode) of threshold records.

    For every seed with a d*: ``knowledge_bits(N, R, k)`` over the parameter count of the model trained at
    d* (all parameters; ``per_trained_parameter``: over the parameters not frozen in that mode). Beside them:
    the same ratio for the constructions at (N, R, k) (their nominal sizes: G1 and A1 for one hop, G2 and C1
    for k hops) and :data:`BITS_REFERENCES`.

    Parameters
    ----------
    records : list of dict
        Sweep records (threshold records are used; others are skipped).

    Returns
    -------
    list of dict
        One row per (N, R, k, CoT, mode): ``bits`` (:func:`knowledge_bits`), ``seeds`` (per seed: d*, the
        parameter count, the two ratios), their ``mean``, ``constructions`` and ``references``.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if r.get("kind", "threshold") == "threshold" and r.get("d_star") is not None:
            groups.setdefault((r["N"], r["R"], r.get("k", 1), bool(r.get("cot")), r["mode"]), []).append(r)
    rows = []
    for (N, R, k, cot, mode), group in sorted(groups.items()):
        group.sort(key=lambda r: r["seed"])
        bits = knowledge_bits(N, R, k)
        seeds = []
        for r in group:
            settings = TrialSettings(steps=r["steps"], lr=r["lr"], width_factor=r["width_factor"],
                                     attention=r["attention"], dtype=r["dtype"], k=r.get("k", 1),
                                     cot=bool(r.get("cot")), heads=r.get("heads", 1))
            counts = model_parameters(N, R, r["d_star"], settings)
            seeds.append({"seed": r["seed"], "d_star": r["d_star"], "parameters": counts["all"],
                          "bits_per_parameter": bits["bits"] / counts["all"],
                          "per_trained_parameter": bits["bits"] / counts[mode]})
        constructions = {}
        for name in (("G1", "A1") if k == 1 else (("C1",) if cot else ("G2",))):
            promise = registry.get(name).nominal_promise(N, R, k)
            constructions[name] = {"d": int(promise.d), "parameters": int(promise.params),
                                   "bits_per_parameter": bits["bits"] / promise.params}
        values = [s["bits_per_parameter"] for s in seeds]
        rows.append({"N": N, "R": R, "k": k, "cot": cot, "mode": mode, **bits, "seeds": seeds,
                     "mean": float(np.mean(values)), "constructions": constructions,
                     "references": dict(BITS_REFERENCES)})
    return rows


def knowledge_table(rows: list[dict]) -> str:
    """:func:`bits_per_parameter` as text.

    Parameters
    ----------
    rows : list of dict
        What :func:`bits_per_parameter` returns.

    Returns
    -------
    str
        One line per row and one of references; empty when no search reached 100%.
    """
    if not rows:
        return ""
    lines = ["bits of knowledge per parameter at d* (log2 of the tasks told apart / the trained model's "
             "parameters):"]
    for row in rows:
        per_seed = ", ".join(f"{s['bits_per_parameter']:.2f} (seed {s['seed']}, d* = {s['d_star']}, "
                             f"{s['parameters']:,} params)" for s in row["seeds"])
        built = ", ".join(f"{name} {c['bits_per_parameter']:.3f} (d = {c['d']})"
                          for name, c in row["constructions"].items())
        bound = "" if row["exact"] else " (at least)"
        lines.append(f"  N={row['N']} R={row['R']} k={row['k']}{' CoT' if row['cot'] else ''} {row['mode']}: "
                     f"{row['bits']:,.0f} bits{bound}; {per_seed}; constructions: {built}")
    lines.append("  references: " + "; ".join(f"≈{v:g} bits/param, {k}" for k, v in BITS_REFERENCES.items()))
    return "\n".join(lines)
