"""The token format, in one place (docs/theory.md, "Task" and "Model"): constructions, checker, trainer,
probes and demo use it.

Vocabulary: entity ``s`` is token ``s`` (``0 <= s < N``); relation ``r`` is token ``N + r``.

- single hop: ``⟨r, s⟩`` -> ``π_r(s)``; query row ``r·N + s``;
- k hops: ``⟨r_k, ..., r_1, s⟩`` -> ``π_{r_k}(...π_{r_1}(s))`` (the subject last, ``r_1`` applied first; "the
  mother of the wife of x"); query row ``path·N + s`` with ``path`` the flat index of ``(r_k, ..., r_1)``
  (``theory.tasks.paths``); ``r_j`` sits at position ``k − j``, the subject at position ``k``;
- chain of thought: after the k-hop prompt the model generates ``v_1..v_k``, ``v_t = π_{r_t}(v_{t−1})``,
  ``v_0 = s``; ``v_t`` is predicted at the position of ``v_{t−1}`` (position ``k + t − 1``) and fed back as
  entity token ``v_t``. Under teacher forcing the input is ``⟨r_k..r_1, s, v_1..v_{k−1}⟩`` (2k tokens) and the
  targets are read at positions ``k..2k−1``.
"""

from __future__ import annotations

import numpy as np

from georecall.theory.tasks import Task, check_positive_int, paths

__all__ = ["chains", "multi_hop_queries", "queries", "relation_token", "single_hop_queries",
           "teacher_forcing"]


def relation_token(N: int, r):
    """Token id of relation ``r`` in a vocabulary with N entities: ``N + r``.

    Parameters
    ----------
    N : int
        Entities.
    r : int or array_like
        Relation index (or indices).

    Returns
    -------
    int or numpy.ndarray
        ``N + r``, of the kind given.
    """
    return N + np.asarray(r) if not isinstance(r, (int, np.integer)) else N + int(r)


def single_hop_queries(task: Task) -> tuple[np.ndarray, np.ndarray]:
    """All N·R single-hop queries as tokens ``⟨N + r, s⟩`` (row ``r·N + s``) and their answer ids.

    Parameters
    ----------
    task : Task
        The task (either attribute variant).

    Returns
    -------
    tokens : numpy.ndarray
        ``(N·R, 2)`` int64, filled in place (no N·R-sized temporary: 0.75 GiB at N = 2^20).
    answers : numpy.ndarray
        ``(N·R,)``: for shared attributes a read-only view of the task's table (no copy).
    """
    N, R = task.N, task.R
    tokens = np.empty((R, N, 2), dtype=np.int64)  # filled in place: no N·R-sized temporary (0.75 GiB at 2^20)
    tokens[:, :, 0] = N + np.arange(R, dtype=np.int64)[:, None]
    tokens[:, :, 1] = np.arange(N, dtype=np.int64)
    answers = task.table if task.attributes == "shared" else task.single_hop()
    return tokens.reshape(N * R, 2), answers.reshape(-1)


def multi_hop_queries(task: Task, k: int) -> tuple[np.ndarray, np.ndarray]:
    """All N·R^k k-hop queries as tokens ``⟨N + r_k, ..., N + r_1, s⟩`` and their answers.

    Parameters
    ----------
    task : Task
        A task with shared attributes.
    k : int
        Hops (>= 1).

    Returns
    -------
    tokens : numpy.ndarray
        ``(N·R^k, k + 1)`` int64, row ``path·N + s``.
    answers : numpy.ndarray
        ``(N·R^k,)``.

    Raises
    ------
    InputError
        k not a positive integer, or a task with disjoint attributes (answers must be entities to chain).
    """
    k = check_positive_int("k", k)
    N = task.N
    path_rows = paths(task.R, k)  # (R^k, k), columns r_k .. r_1
    tokens = np.empty((path_rows.shape[0], N, k + 1), dtype=np.int64)
    tokens[:, :, :k] = N + path_rows[:, None, :]
    tokens[:, :, k] = np.arange(N)
    return tokens.reshape(-1, k + 1), task.k_hop(k).reshape(-1)


def queries(task: Task, k: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """All queries with k hops: :func:`single_hop_queries` for k = 1 (any attribute variant), else
    :func:`multi_hop_queries`.

    Parameters
    ----------
    task : Task
        The task.
    k : int
        Hops.

    Returns
    -------
    (numpy.ndarray, numpy.ndarray)
        Tokens and answers.

    Raises
    ------
    InputError
        As :func:`multi_hop_queries`.
    """
    return single_hop_queries(task) if k == 1 else multi_hop_queries(task, k)


def chains(task: Task, k: int) -> np.ndarray:
    """The CoT targets ``v_1..v_k`` of every k-hop query, rows as in :func:`multi_hop_queries`.

    Parameters
    ----------
    task : Task
        A task with shared attributes.
    k : int
        Hops.

    Returns
    -------
    numpy.ndarray
        ``(N·R^k, k)`` int64, ``v_t = π_{r_t}(v_{t−1})`` with ``v_0 = s``.

    Raises
    ------
    InputError
        As :func:`multi_hop_queries`.
    """
    tokens, _ = multi_hop_queries(task, k)
    out = np.empty((tokens.shape[0], k), dtype=np.int64)
    v = tokens[:, k]
    for t in range(1, k + 1):
        v = task.table[tokens[:, k - t] - task.N, v]
        out[:, t - 1] = v
    return out


def teacher_forcing(task: Task, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-forced chain-of-thought inputs: the prompt followed by the true ``v_1..v_{k−1}``.

    Parameters
    ----------
    task : Task
        A task with shared attributes.
    k : int
        Hops.

    Returns
    -------
    inputs : numpy.ndarray
        ``(N·R^k, 2k)`` tokens.
    targets : numpy.ndarray
        ``(N·R^k, k)``: ``v_t`` is read at position ``k + t − 1``.
    positions : numpy.ndarray
        The read-out positions ``k..2k−1``.

    Raises
    ------
    InputError
        As :func:`multi_hop_queries`.
    """
    tokens, _ = multi_hop_queries(task, k)
    targets = chains(task, k)
    return np.concatenate([tokens, targets[:, :-1]], axis=1), targets, np.arange(k, 2 * k)
