"""One trial of a capacity sweep (:mod:`.sweep`): its settings, the seed streams it draws from, how it runs,
and its record.

A trial trains a fresh model of width d with MLP width ``m = width_factor·d`` on ``task_for_seed(N, R, seed)``
(the seed contract, ``theory/seeds.py``), full batch, Adam, for at most ``steps`` steps, initialized from
``rng(seed, "init", mode_id, d)`` (batch order from ``rng(seed, "batches", mode_id, d)``), and records whether
it reached 100% (confirmed by the exhaustive checker), the BLAS that computed its products (:mod:`.blas`) and
its seconds. ``mode`` is ``learned`` (every parameter trained) or ``frozen`` (entity and relation embeddings
frozen at their random initialization, so the facts must go into the MLP).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from georecall.errors import InputError
from georecall.experiments.blas import blas_description
from georecall.theory import __version__
from georecall.theory.seeds import rng
from georecall.theory.tasks import check_positive_int, task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import train, training_data

__all__ = ["FROZEN_GROUPS", "MODES", "SEED_CONTRACT", "SETTINGS_KEY", "TrialSettings", "check_mode",
           "run_trial"]

MODES = ("learned", "frozen")
FROZEN_GROUPS = {"learned": (), "frozen": ("entity_embedding", "relation_embedding")}
SEED_CONTRACT = 1  # records carry it: trials seeded otherwise (before theory/seeds.py) are never reused
# The fields of a trial record that are its settings (TrialSettings.key()).
SETTINGS_KEY = ("steps", "lr", "width_factor", "attention", "dtype", "k", "cot", "heads")


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
        """The settings part of a record's key, in :data:`.sweep_records.TRIAL_KEY` order."""
        return tuple(getattr(self, name) for name in SETTINGS_KEY)

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


def check_mode(mode: str) -> str:
    """The mode, refused unless it is one of :data:`MODES`.

    Parameters
    ----------
    mode : str

    Raises
    ------
    InputError
        Another mode.
    """
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
    check_mode(mode)
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
