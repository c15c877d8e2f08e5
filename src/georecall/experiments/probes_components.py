"""The components-vs-key probe (issue 41): does a network read a subject's embedding as separately readable
components, one per relation (G1: change relation r's component and only r's answer moves), or as one key for
the whole subject (a dense memorized lookup: when r's answer moves, the other relations' answers move too)?

The move (:func:`relation_moves`): for a held-out subject s, a relation r and a new answer j ≠ π_r(s), the
superposition fit's component of r is changed, ``Δ = (u_j − u_{π_r(s)}) A_r`` (the forward fit's maps, fitted
on the other subjects, as in :func:`.probes.causal_intervention`). The reading (:func:`read_moves`): the
embedding ``e_s + t·Δ`` is asked every relation for t = 1, 2, 4, … until ``|t·Δ|`` reaches :data:`REACH`
times ``|e_s|`` (the first t at which r's answer leaves the model's own answer on ``e_s`` is the one read, so
a component the fit finds only weakly, as on a key network, is still moved); an intervention that never
moves r's answer is *inert*. Of the moved interventions, the
*component share* is the share whose R − 1 other answers all stayed as they were; a key network has none.
With its Wilson 95 % interval the reading is ``"components"`` (share ≥ 0.9), ``"key"`` (≤ 0.1), ``"mixed"``
(between), or ``"cannot tell"`` (fewer than :data:`MIN_MOVED` moved interventions). ``rebuilt_accuracy``
says whether the network reads the fit's own reconstruction ``ê_s = c + Σ_r u_{π_r(s)} A_r`` of a held-out
subject as that subject (every relation answered).

Calibration (:func:`planted_mixture`): on G1 (components, every move exact) a share q of the moves is
replaced by a whole-subject move ``e_{s'} − e_s`` (the key reading of a change), so the component share
planted is 1 − q; the probe's power is how often it reads q = 0, ½, 1 as components, mixed and key.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from georecall.constructions.decoding import predict
from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.experiments.ridge import fit_ridge_cv
from georecall.theory.seeds import rng as seed_rng
from georecall.theory.tasks import Task

__all__ = ["COMPONENT_SHARE", "MIN_MOVED", "READINGS", "REACH", "SUMMARY_FIELDS", "components_or_key",
           "mixture_power", "planted_mixture", "read_moves", "reading", "relation_moves", "summarize_moves",
           "summary_of", "wilson"]

REACH = 4.0  # the change is doubled from t = 1 until |t·Δ| >= REACH·|e_s| (at most _DOUBLINGS times)
_DOUBLINGS = 24
COMPONENT_SHARE = 0.9  # >= 0.9 of the moved interventions keep every other answer: components; <= 0.1: key
MIN_MOVED = 20
READINGS = ("components", "key", "mixed", "cannot tell")
# what a study record's summary holds of this probe (:func:`summary_of`)
SUMMARY_FIELDS = ("component_share", "components_follows", "components_moved", "rebuilt_accuracy")
_STREAM = 41  # the probe's key in the "probes" stream of the seed contract


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float] | None:
    """The Wilson score interval of a binomial share (None when n = 0).

    Parameters
    ----------
    successes, n : int
        Successes out of n trials.
    z : float
        The normal quantile (1.96: 95 %).

    Returns
    -------
    tuple of float or None
    """
    if n == 0:
        return None
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def reading(component_share: float | None, moved: int) -> str:
    """The probe's reading of a component share.

    Parameters
    ----------
    component_share : float or None
        Share of the moved interventions that kept every other answer.
    moved : int
        Moved interventions.

    Returns
    -------
    str
        One of :data:`READINGS`.
    """
    if component_share is None or moved < MIN_MOVED:
        return "cannot tell"
    if component_share >= COMPONENT_SHARE:
        return "components"
    if component_share <= 1 - COMPONENT_SHARE:
        return "key"
    return "mixed"


def _fit_maps(model: Model, task: Task, fit: np.ndarray, rng) -> np.ndarray:
    E = np.asarray(model.entity_embedding[: task.N], dtype=np.float64)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    X = U[task.table.T].reshape(task.N, -1)
    return fit_ridge_cv(X[fit], E[fit], rng=rng).maps()


def relation_moves(model: Model, task: Task, maps: np.ndarray, subjects: np.ndarray, relations: np.ndarray,
                   new: np.ndarray) -> np.ndarray:
    """The change of relation r's fitted component of subject s to answer j: ``(u_j − u_{π_r(s)}) A_r``.

    Parameters
    ----------
    model : Model
        Supplies the read-out rows u.
    task : Task
        The table π.
    maps : ndarray ((R·d + 1) × d)
        The forward fit's maps ``[A_1; …; A_R; c]``.
    subjects, relations, new : ndarray of int
        One intervention per entry: subject s, relation r, new answer j.

    Returns
    -------
    ndarray (n, d)
    """
    d, R = model.d, task.R
    A = np.asarray(maps, dtype=np.float64)[:-1].reshape(R, d, d)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    current = task.table[relations, subjects]
    return np.einsum("kd,kde->ke", U[new] - U[current], A[relations])


def _answers(model: Model, rows: np.ndarray, R: int) -> np.ndarray:
    """Every relation's answer for each of ``rows`` (extra entity rows appended to the model's table)."""
    E = np.asarray(model.entity_embedding, dtype=np.float64)
    base = E.shape[0]
    extended = replace(model, entity_embedding=np.vstack([E, rows]).astype(model.entity_embedding.dtype))
    n = rows.shape[0]
    tokens = np.stack([extended.n_entities + np.tile(np.arange(R), n), np.repeat(base + np.arange(n), R)],
                      axis=1)
    return np.asarray(predict(extended, tokens)).reshape(n, R)


def read_moves(model: Model, task: Task, subjects: np.ndarray, relations: np.ndarray, moves: np.ndarray,
               reach: float = REACH) -> dict:
    """Ask every relation of ``e_s + t·Δ`` for t = 1, 2, 4, …, up to the first t with ``|t·Δ| >=
    reach·|e_s|`` (t = 1 only with ``reach = 0``); per intervention, the first t that moves r's answer.

    Parameters
    ----------
    model : Model
        The network.
    task : Task
        Its task (R).
    subjects, relations : ndarray of int (n,)
        The interventions.
    moves : ndarray (n, d)
        Their changes Δ.
    reach : float
        How far the doubling goes, relative to ``|e_s|`` (≥ 0).

    Returns
    -------
    dict
        ``moved`` (bool (n,)), ``scale`` (the t read, nan when inert), ``answers`` (int (n, R) at that t;
        at the largest t when inert) and ``before`` (int (n, R), the answers on ``e_s``).

    Raises
    ------
    InputError
        A negative or non-finite reach, or arrays of different lengths.
    """
    if not (math.isfinite(reach) and reach >= 0):
        raise InputError(f"reach must be a finite number >= 0, got {reach}")
    n = len(subjects)
    if not (len(relations) == n == moves.shape[0]):
        raise InputError("subjects, relations and moves must have one entry per intervention")
    R = task.R
    E = np.asarray(model.entity_embedding, dtype=np.float64)
    before = _answers(model, E[subjects], R)
    size = np.linalg.norm(moves, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        needed = np.where(size > 0, reach * np.linalg.norm(E[subjects], axis=1) / size, 1.0)
    # the last doubling of each intervention: the first t = 2^k with t >= needed (k <= _DOUBLINGS)
    last = np.clip(np.ceil(np.log2(np.maximum(needed, 1.0))), 0, _DOUBLINGS).astype(int)
    scales = 2.0 ** np.arange(int(last.max()) + 1 if n else 1)
    stacked = np.concatenate([E[subjects] + t * moves for t in scales])
    after = _answers(model, stacked, R).reshape(len(scales), n, R)
    changed = after[:, np.arange(n), relations] != before[np.arange(n), relations]  # (scales, n)
    changed &= np.arange(len(scales))[:, None] <= last[None, :]  # beyond an intervention's reach: not tried
    moved = changed.any(axis=0)
    first = np.where(moved, changed.argmax(axis=0), last)
    return {"moved": moved, "scale": np.where(moved, scales[first], np.nan),
            "answers": after[first, np.arange(n)], "before": before}


def summarize_moves(outcome: dict, relations: np.ndarray, new: np.ndarray) -> dict:
    """The component share of the moved interventions, its interval and the reading.

    Parameters
    ----------
    outcome : dict
        :func:`read_moves`' result.
    relations, new : ndarray of int (n,)
        The relation moved and the answer it was moved to.

    Returns
    -------
    dict
        ``interventions``, ``moved``, ``moved_share``, ``component_share`` (None when nothing moved),
        ``component_interval`` (Wilson 95 %), ``follows`` (share of the moved that answer j),
        ``others_kept`` (over the moved, the share of the other relations' answers kept), ``reading``.
    """
    moved = outcome["moved"]
    n, R = outcome["before"].shape
    others = np.ones((n, R), dtype=bool)
    others[np.arange(n), relations] = False
    kept = outcome["answers"] == outcome["before"]
    all_kept = np.array([kept[i][others[i]].all() for i in range(n)]) if R > 1 else np.ones(n, dtype=bool)
    m = int(moved.sum())
    share = float(all_kept[moved].mean()) if m else None
    follows = float(np.mean(outcome["answers"][np.arange(n), relations][moved] == new[moved])) if m else None
    kept_share = float(kept[moved][others[moved]].mean()) if m and R > 1 else None
    return {"interventions": int(n), "moved": m, "moved_share": m / n if n else None,
            "component_share": share, "component_interval": wilson(int(all_kept[moved].sum()), m),
            "follows": follows, "others_kept": kept_share, "reading": reading(share, m)}


def _draw(task: Task, pool: np.ndarray, subjects: int | None, rng):
    chosen = np.sort(rng.choice(pool, size=min(subjects or pool.size, pool.size), replace=False))
    S = np.repeat(chosen, task.R)
    Rr = np.tile(np.arange(task.R), chosen.size)
    new = (task.table[Rr, S] + rng.integers(1, task.N, size=S.size)) % task.N  # uniform over j != π_r(s)
    return S, Rr, new


def _split(N: int, holdout: float, rng) -> tuple[np.ndarray, np.ndarray]:
    if not 0 < holdout < 1:
        raise InputError(f"holdout must be in (0, 1), got {holdout}")
    order = rng.permutation(N)
    n_test = min(N - 2, max(1, int(round(holdout * N))))
    if n_test < 1:
        raise InputError(f"N = {N} leaves no held-out subject")
    return np.sort(order[n_test:]), np.sort(order[:n_test])


def components_or_key(model: Model, task: Task, *, seed: int = 0, holdout: float = 0.25,
                      subjects: int | None = 128, reach: float = REACH) -> dict:
    """The components-vs-key probe on one model (see the module's docstring).

    Parameters
    ----------
    model : Model
        The network (E: N × d at least, U: N × d).
    task : Task
        Its task.
    seed : int
        The run seed (the ``"probes"`` stream under key 41: the split, the subjects, the new answers).
    holdout : float
        Share of subjects held out of the fit, in (0, 1); the interventions are made on them.
    subjects : int or None
        At most this many held-out subjects, each moved once per relation.
    reach : float
        How far a change is doubled, relative to ``|e_s|`` (:func:`read_moves`).

    Returns
    -------
    dict
        :func:`summarize_moves`' fields, ``rebuilt_accuracy`` (the fit's reconstruction of a held-out
        subject, every relation answered as the task says) and ``scale_median`` (the median t that moved).

    Raises
    ------
    InputError
        A holdout outside (0, 1), or a bad reach.
    """
    rng = seed_rng(seed, "probes", _STREAM)
    fit, test = _split(task.N, holdout, rng)
    maps = _fit_maps(model, task, fit, rng)
    S, Rr, new = _draw(task, test, subjects, rng)
    moves = relation_moves(model, task, maps, S, Rr, new)
    outcome = read_moves(model, task, S, Rr, moves, reach)
    out = summarize_moves(outcome, Rr, new)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    rebuilt = U[task.table[:, test].T].reshape(test.size, -1) @ maps[:-1] + maps[-1]
    answers = _answers(model, rebuilt, task.R)
    out["rebuilt_accuracy"] = float(np.mean(answers == task.table[:, test].T))
    scale = outcome["scale"][outcome["moved"]]
    out["scale_median"] = float(np.median(scale)) if scale.size else None
    return out


def planted_mixture(model: Model, task: Task, key_share: float, *, seed: int = 0, holdout: float = 0.25,
                    subjects: int | None = 128, draw: int = 0) -> dict:
    """The probe with a share ``key_share`` of its moves replaced by whole-subject moves ``e_{s'} − e_s``.

    On a components model (G1) the component share planted is ``1 − key_share`` up to the sampling of which
    moves are replaced: the calibration of :func:`components_or_key`.

    Parameters
    ----------
    model : Model
        A components model (G1) whose fit is exact.
    task : Task
        Its task.
    key_share : float
        In [0, 1].
    seed, holdout, subjects
        As in :func:`components_or_key`.
    draw : int
        Which planting (the ``"probes"`` stream under keys 41 and ``draw``).

    Returns
    -------
    dict
        :func:`summarize_moves`' fields and ``key_moves`` (how many moves were replaced).

    Raises
    ------
    InputError
        ``key_share`` outside [0, 1].
    """
    if not 0 <= key_share <= 1:
        raise InputError(f"key_share must be in [0, 1], got {key_share}")
    rng = seed_rng(seed, "probes", _STREAM)
    fit, test = _split(task.N, holdout, rng)
    maps = _fit_maps(model, task, fit, rng)
    S, Rr, new = _draw(task, test, subjects, rng)
    moves = relation_moves(model, task, maps, S, Rr, new)
    plant = seed_rng(seed, "probes", _STREAM, draw)
    replaced = plant.random(S.size) < key_share
    other = (S + plant.integers(1, task.N, size=S.size)) % task.N  # another subject s' != s
    E = np.asarray(model.entity_embedding, dtype=np.float64)
    moves[replaced] = (E[other] - E[S])[replaced]
    out = summarize_moves(read_moves(model, task, S, Rr, moves, 0.0), Rr, new)
    out["key_moves"] = int(replaced.sum())
    return out


def mixture_power(model: Model, task: Task, *, seed: int = 0, draws: int = 20, subjects: int | None = 128,
                  shares: tuple[float, ...] = (0.0, 0.5, 1.0)) -> dict:
    """How often the probe reads a planted mixture as what was planted: key share 0 as ``"components"``,
    1 as ``"key"``, anything between as ``"mixed"`` (and whether the interval covers the planted share).

    Parameters
    ----------
    model : Model
        A components model (G1).
    task : Task
        Its task.
    seed, subjects
        As in :func:`components_or_key`.
    draws : int
        Plantings per share.
    shares : tuple of float
        Key shares planted.

    Returns
    -------
    dict
        Per share (as a string): ``expected`` (the reading), ``power`` (share of draws read so),
        ``coverage`` (share of draws whose interval holds the planted component share, counted on the
        moves actually replaced).
    """
    out = {}
    for q in shares:
        expected = "components" if q == 0 else "key" if q == 1 else "mixed"
        right = covered = 0
        for draw in range(draws):
            r = planted_mixture(model, task, q, seed=seed, subjects=subjects, draw=draw)
            right += r["reading"] == expected
            lo, hi = r["component_interval"] or (math.nan, math.nan)
            covered += lo <= 1 - r["key_moves"] / r["interventions"] <= hi
        out[f"{q:g}"] = {"expected": expected, "power": right / draws, "coverage": covered / draws}
    return out


def summary_of(result: dict) -> dict:
    """The probe's numbers under the study summary's names (:data:`SUMMARY_FIELDS`).

    Parameters
    ----------
    result : dict
        :func:`components_or_key`'s result.

    Returns
    -------
    dict
        ``component_share``, ``components_follows``, ``components_moved`` (the moved share) and
        ``rebuilt_accuracy``.
    """
    return {"component_share": result["component_share"], "components_follows": result["follows"],
            "components_moved": result["moved_share"], "rebuilt_accuracy": result["rebuilt_accuracy"]}
