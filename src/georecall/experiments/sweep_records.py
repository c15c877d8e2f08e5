"""The results file of a capacity sweep (:mod:`.sweep`): what identifies a record, what a usable line is, and
reading the file.

Every trial is appended to the JSONL file as soon as it finishes (``{"kind": "trial"}``) and every finished
search as ``{"kind": "threshold"}``; only the driver writes it (:mod:`.sweep`).

- *Keys.* A trial record is identified by :data:`TRIAL_KEY` (every parameter its result depends on, the seed
  contract and the package version), a threshold record by :data:`THRESHOLD_KEY` (the same without d, plus
  ``d_min``, ``d_max``, ``resolution``, ``search``). A rerun reuses a trial only with an equal key, and a
  threshold record is built only from the trials its own search visits, so it is the same as on a fresh file.
- *Arithmetic.* Each trial records the BLAS that computed its products and its thread count (``blas``,
  :mod:`.blas`): float32 training rounds differently with another kernel or another thread count, so such
  trials are different runs. The field is not part of the key (each trial is judged exactly on its own
  weights, and a search may resume on another machine), but a threshold record lists every ``blas`` its
  trials used, so a search that mixed arithmetics says so (``"not recorded"``: trials from before the field).
- *Censoring.* A threshold record with ``"censored": "floor"`` has a d* that is only an upper bound (the
  smallest width tried reached 100 %, :func:`.sweep_search.floor_censored`); :func:`is_floor_censored` is
  how every fit and summary tells, and leaves it out. A record without the key reads as before.
- *Reading* (:func:`read_sweep`) skips and counts torn lines (not JSON: a writer killed mid-line), alien lines
  (JSON that is not a sweep record) and duplicates (a key seen before; the first record wins).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from georecall.experiments.sweep_search import FLOOR, SEARCHES
from georecall.experiments.sweep_trial import MODES, SETTINGS_KEY, TrialSettings
from georecall.memory import Budget
from georecall.results_files import ResultsFile, read_jsonl, require_kind

__all__ = ["MAX_COUNT", "MAX_STEPS", "MAX_WIDTH", "THRESHOLD_KEY", "TIMING_FIELDS", "TRIAL_KEY", "SweepFile",
           "is_finite_real", "is_floor_censored", "read_records", "read_sweep", "record_config_key",
           "record_key", "same_settings", "threshold_key", "trial_key"]

_CONFIG_KEY = ("N", "R", "mode", "seed", *SETTINGS_KEY, "seed_contract", "version")
TRIAL_KEY = (*_CONFIG_KEY, "d")
THRESHOLD_KEY = (*_CONFIG_KEY, "d_min", "d_max", "resolution", "search")
TIMING_FIELDS = ("seconds",)

# fields older records may lack (a record without "search" came from the doubling search)
_DEFAULTS = {"k": 1, "cot": False, "heads": 1, "seed_contract": None, "search": "doubling"}
_REQUIRED = {"trial": ("N", "R", "mode", "seed", "d", "reached", "steps", "lr", "width_factor", "attention",
                       "dtype", "version"),
             "threshold": ("N", "R", "mode", "seed", "d_star", "monotone", "trials", "steps", "lr",
                           "width_factor", "attention", "dtype", "version")}


def record_key(record: dict, fields: tuple) -> tuple:
    """The values of ``fields`` in a record, an absent field read as its default (an older record's).

    Parameters
    ----------
    record : dict
    fields : tuple of str
    """
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
    return record_key(record, TRIAL_KEY)


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
    return record_key(record, THRESHOLD_KEY)


def record_config_key(record: dict) -> tuple:
    """The configuration a record belongs to: sizes, mode, seed, trial settings, seed contract and version.

    Parameters
    ----------
    record : dict
    """
    return record_key(record, _CONFIG_KEY)


def same_settings(record: dict, settings: TrialSettings) -> bool:
    """Whether a record was made with these trial settings.

    Parameters
    ----------
    record : dict
    settings : TrialSettings
    """
    return record_key(record, SETTINGS_KEY) == settings.key()


SweepFile = ResultsFile  # the old name of what read_sweep returns (one results-file class)


# Sizes no trial can have had: a width d past 2^24 means d×d weights of 2^48 numbers; N or R past 2^32, more
# queries (N·R) than any trainer could hold. A record beyond them is damaged, and would fool the cost estimate
# (a least-squares step model through a width of 2^62 prices every other trial at nothing).
MAX_WIDTH = 2**24
MAX_COUNT = 2**32
MAX_STEPS = 2**40


def _whole(low: int = 0, high: int = 2**63):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and low <= v < high


def is_finite_real(v) -> bool:
    """Whether ``v`` is a finite int or float (not a bool).

    Parameters
    ----------
    v
        Any value read from a record.
    """
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def is_floor_censored(record: dict) -> bool:
    """Whether a threshold record's d* is censored at the floor of its search (only an upper bound).

    Parameters
    ----------
    record : dict
        A threshold record.

    Returns
    -------
    bool
        ``True`` for ``"censored": "floor"`` with a d*; ``False`` for a record without the key (a measured
        threshold, or one written before the key existed, read as before) and for one that never reached
        100 %.
    """
    return record.get("censored") == FLOOR and record.get("d_star") is not None


def _text(v) -> bool:
    return isinstance(v, str) and len(v) <= 1000


def _flag(v) -> bool:
    return isinstance(v, bool)


def _maybe(check):
    return lambda v: v is None or check(v)


# What the code reads of each kind of record, with the type it needs: a line that breaks any is alien.
_FIELDS: dict[str, dict[str, Callable[[Any], bool]]] = {
    "trial": {"N": _whole(2, MAX_COUNT), "R": _whole(1, MAX_COUNT), "mode": lambda v: v in MODES,
              "seed": _whole(0), "d": _whole(1, MAX_WIDTH), "reached": _flag, "steps": _whole(0, MAX_STEPS),
              "lr": lambda v: is_finite_real(v) and v > 0,
              "width_factor": _whole(1), "attention": _text, "dtype": _text, "version": _text},
    "threshold": {"N": _whole(2, MAX_COUNT), "R": _whole(1, MAX_COUNT), "mode": lambda v: v in MODES,
                  "seed": _whole(0), "d_star": _maybe(_whole(1, MAX_WIDTH)), "monotone": _flag,
                  "trials": lambda v: isinstance(v, list) and len(v) <= 10_000
                  and all(map(_whole(1, MAX_WIDTH), v)),
                  "steps": _whole(0, MAX_STEPS), "lr": lambda v: is_finite_real(v) and v > 0,
                  "width_factor": _whole(1),
                  "attention": _text, "dtype": _text, "version": _text},
    "transfer": {"closed_form_accuracy": lambda v: is_finite_real(v) and 0 <= v <= 1,
                 "fitted_accuracy": lambda v: is_finite_real(v) and 0 <= v <= 1},
}
# Fields that older records may lack (their defaults are _DEFAULTS), checked when present.
_OPTIONAL: dict[str, Callable[[Any], bool]] = {
    "k": _whole(1), "cot": _flag, "heads": _whole(1), "seed_contract": _maybe(_whole(0)),
    "d_min": _whole(1), "d_max": _whole(1), "resolution": _whole(1),
    "seconds": _maybe(lambda v: is_finite_real(v) and v >= 0), "steps_run": _whole(0, MAX_STEPS),
    "label": _maybe(_text), "search": lambda v: v in SEARCHES, "prediction": _maybe(is_finite_real),
    "prediction_c": _maybe(is_finite_real), "censored": lambda v: v == FLOOR,
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
    if not all(check(value[name]) for name, check in _OPTIONAL.items() if name in value):
        return False
    # a trial cannot have run more steps than its budget
    return value["kind"] != "trial" or value.get("steps_run", 0) <= value["steps"]


def read_sweep(path: str, *, budget: Budget | None = None, require: bool = False,
               writing: bool = False) -> ResultsFile:
    """Read a results file: records de-duplicated by key, torn and alien lines counted and skipped.

    Parameters
    ----------
    path : str
        The JSONL file (missing: an empty result).
    budget : Budget or None
        A memory budget: the file is counted against it before it is parsed.
    require : bool
        Refuse a file that holds no trial, threshold or transfer record
        (:func:`georecall.results_files.require_kind`: a study file, a model file).
    writing : bool
        With ``require``: the file is about to be appended to (empty or missing is a fresh start).

    Returns
    -------
    georecall.results_files.ResultsFile

    Raises
    ------
    InputError
        ``path`` is a directory, a device, cannot be read, or (with ``budget``) is too large; with
        ``require``, it holds no sweep record.
    """
    def key(value: dict):
        if value["kind"] not in _REQUIRED:
            return None
        return (value["kind"], *(trial_key(value) if value["kind"] == "trial" else threshold_key(value)))

    contents = read_jsonl(path, ResultsFile(), _is_sweep_record, key, budget=budget, what="sweep")
    if require:
        require_kind(contents, path, _FIELDS, "sweep records", writing=writing)
    return contents


def read_records(path: str, *, budget: Budget | None = None) -> list[dict]:
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
