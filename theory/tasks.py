"""Factual-recall tasks: R bijections of the entity set [N] (docs/theory.md, "Task").

Shape letters, used the same way throughout georecall:

- ``N``: number of entities (subjects and, in the shared variant, attributes), ``[N] = {0..N-1}``;
- ``R``: number of relations, ``[R] = {0..R-1}``;
- ``k``: number of hops of a query;
- ``D``: length of one attribute code; ``d``: residual (embedding) dimension; ``m``: MLP width.

A task is stored as an integer table ``table[r, s] = π_r(s)`` of shape ``(R, N)``, each row a permutation.
Seen as a graph it is an R-regular edge-coloured digraph (``bounds.graphs`` builds that view).

Paths. A k-hop query is ``(s; r_1..r_k) -> π_{r_k}(...π_{r_1}(s))`` with ``r_1`` applied first. Its tokens are
written in the order of "the mother of the wife of x": ``⟨r_k, ..., r_1, s⟩``. Every array of k-hop answers in
georecall is indexed the same way, ``answers[r_k, ..., r_1, s]``, so that a query's index tuple *is* its token
order. ``path_index`` and ``paths`` convert between the flat path index and the tuple ``(r_k, ..., r_1)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from georecall.errors import InputError
from georecall.theory import seeds

__all__ = [
    "Attributes",
    "as_rng",
    "Task",
    "check_positive_int",
    "is_integer",
    "paths",
    "random_task",
    "task_for_seed",
    "validate_table",
]

Attributes = Literal["shared", "disjoint"]


def as_rng(rng: np.random.Generator | int | None) -> np.random.Generator:
    """A random generator from a Generator or a seed; never touches the global RNG state.

    Parameters
    ----------
    rng : numpy.random.Generator, int or None
        A generator (returned as it is) or a seed for ``numpy.random.default_rng`` (None: fresh entropy).
    """
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(rng)


def is_integer(value) -> bool:
    """Whether ``value`` is a Python or NumPy integer (a bool is not; a float such as ``2.0`` is not).

    Parameters
    ----------
    value
        Any object.

    Returns
    -------
    bool
    """
    return not isinstance(value, bool) and isinstance(value, (int, np.integer))


def check_positive_int(name: str, value: int, minimum: int = 1) -> int:
    """Validate an integer size parameter.

    Parameters
    ----------
    name : str
        The parameter's name, for the message.
    value : int
        The value (a Python or NumPy integer; not a bool).
    minimum : int
        The smallest value allowed.

    Returns
    -------
    int
        ``value`` as a Python int.

    Raises
    ------
    InputError
        ``value`` is not an integer, or is below ``minimum`` (the message names ``name``).
    """
    if not is_integer(value):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


@dataclass(frozen=True, eq=False)
class Task:
    """R bijections of [N]: ``table[r, s] = π_r(s)``.

    ``attributes="shared"``: every relation maps into the same set [N] (answers are entity ids).
    ``attributes="disjoint"``: relation r has its own answer set; the answer id of ``(s, r)`` is
    ``r * N + π_r(s)``, a vocabulary of ``N * R`` attributes.

    Build one with :func:`random_task` or :meth:`Task.from_table` (which validates).
    """

    table: np.ndarray
    attributes: Attributes = "shared"

    def __post_init__(self) -> None:
        raw = np.asarray(self.table)
        if raw.dtype.kind not in "iu":
            if (
                raw.dtype.kind not in "fb"
                or raw.dtype.kind == "b"
                or not np.all(np.isfinite(raw))
                or not np.array_equal(raw, np.round(raw))
            ):
                raise InputError(f"a task table must hold integer entity ids; got dtype {raw.dtype}")
        table = np.array(raw, dtype=np.int64, copy=True)
        table.setflags(write=False)
        object.__setattr__(self, "table", table)
        if self.attributes not in ("shared", "disjoint"):
            raise InputError(f"attributes must be 'shared' or 'disjoint', got {self.attributes!r}")
        validate_table(table)

    @classmethod
    def from_table(cls, table, attributes: Attributes = "shared") -> Task:
        """Validate a user-supplied ``(R, N)`` table of bijections and wrap it.

        Parameters
        ----------
        table : array_like of int
            ``table[r, s] = π_r(s)``, each row a permutation of [N].
        attributes : {"shared", "disjoint"}
            Whether every relation answers in [N] or in an answer set of its own (the class docstring).

        Returns
        -------
        Task

        Raises
        ------
        InputError
            A table that is not integer, not ``(R, N)`` with R, N >= 1, or has a row that is not a
            bijection; or unknown ``attributes``.
        """
        return cls(np.asarray(table), attributes)

    @property
    def N(self) -> int:
        """Entities: the number of subjects, N (columns of ``table``)."""
        return self.table.shape[1]

    @property
    def R(self) -> int:
        """Relations: the number of bijections, R (rows of ``table``)."""
        return self.table.shape[0]

    @property
    def n_answers(self) -> int:
        """Size of the answer vocabulary: N (shared) or N·R (disjoint)."""
        return self.N * (self.R if self.attributes == "disjoint" else 1)

    def single_hop(self) -> np.ndarray:
        """Answer ids of all N·R single-hop queries, shape ``(R, N)``: ``[r, s] -> π_r(s)``."""
        if self.attributes == "disjoint":
            return self.table + self.N * np.arange(self.R, dtype=np.int64)[:, None]
        return self.table.copy()

    def k_hop(self, k: int) -> np.ndarray:
        """Answers of all N·R^k k-hop queries, shape ``(R,)*k + (N,)``, indexed ``[r_k, ..., r_1, s]``.

        Built by k fancy-indexing steps over whole tables (no loop over N or over paths):
        ``A_1 = table`` and ``A_j = table[:, A_{j-1}]``, whose new leading axis is the hop applied last.

        Parameters
        ----------
        k : int
            Hops, at least 1.

        Returns
        -------
        numpy.ndarray
            The int64 answers (``table`` itself when k = 1).

        Raises
        ------
        InputError
            ``k`` is not a positive integer, or the task's attributes are not shared.
        """
        k = check_positive_int("k", k)
        if self.attributes != "shared":
            raise InputError("k-hop queries need attributes='shared' (answers must be entities to chain)")
        answers = self.table
        for _ in range(k - 1):
            answers = self.table[:, answers]
        return answers

    def compose(self, relations_in_order_applied) -> np.ndarray:
        """π_w for w = (r_1, ..., r_k) given in the order applied (r_1 first): a permutation of [N].

        Parameters
        ----------
        relations_in_order_applied : iterable of int
            Relation ids in [0, R), the first applied first (empty: the identity).

        Returns
        -------
        numpy.ndarray
            ``perm[s] = π_{r_k}(...π_{r_1}(s))``, int64, shape ``(N,)``.

        Raises
        ------
        InputError
            A relation id that is not an integer or is outside [0, R).
        """
        perm = np.arange(self.N, dtype=np.int64)
        for r in relations_in_order_applied:
            if not is_integer(r):
                raise InputError(f"relation ids must be integers, got {r!r}")
            if not 0 <= r < self.R:
                raise InputError(f"relation {r} outside [0, {self.R})")
            perm = self.table[int(r)][perm]
        return perm


def validate_table(table: np.ndarray) -> None:
    """Check that ``table`` is an ``(R, N)`` integer table whose rows are permutations of [N].

    Parameters
    ----------
    table : numpy.ndarray
        The candidate table, ``table[r, s] = π_r(s)``.

    Raises
    ------
    InputError
        Not two-dimensional, empty, an entry outside [0, N), or a row that is not a bijection; the message
        names the first bad relation and its offending entries.
    """
    if table.ndim != 2:
        raise InputError(f"a task table must have shape (R, N); got an array with shape {table.shape}")
    R, N = table.shape
    if R < 1 or N < 1:
        raise InputError(f"a task needs R >= 1 and N >= 1; got shape (R, N) = {table.shape}")
    out_of_range = (table < 0) | (table >= N)
    if out_of_range.any():
        r, s = np.argwhere(out_of_range)[0]
        bad = np.flatnonzero(out_of_range[r])
        raise InputError(
            f"relation {r} maps subject {s} to {table[r, s]}, outside [0, {N}) "
            f"({bad.size} out-of-range entries in relation {r}, at subjects {bad[:8].tolist()})"
        )
    counts = np.zeros((R, N), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(R), N), table.ravel()), 1)
    not_bijective = (counts != 1).any(axis=1)
    if not_bijective.any():
        r = int(np.flatnonzero(not_bijective)[0])
        repeated = np.flatnonzero(counts[r] > 1)
        missing = np.flatnonzero(counts[r] == 0)
        v = int(repeated[0])
        raise InputError(
            f"relation {r} is not a bijection of [0, {N}): value {v} is the image of subjects "
            f"{np.flatnonzero(table[r] == v)[:8].tolist()}; repeated values {repeated[:8].tolist()}, "
            f"missing values {missing[:8].tolist()}"
        )


def random_task(
    N: int,
    R: int,
    rng: np.random.Generator | int | None = None,
    *,
    attributes: Attributes = "shared",
    symmetric: bool = False,
) -> Task:
    """R independent uniformly random bijections of [N].

    Parameters
    ----------
    N, R : int
        Entities and relations (>= 1).
    rng : numpy.random.Generator or int or None
        The random source (a seed makes a fresh Generator; global state is never used).
    attributes : {"shared", "disjoint"}
        The answer vocabulary (:class:`Task`).
    symmetric : bool
        Draw each relation as a uniformly random perfect matching (an involution without fixed points, so
        ``π_r = π_r^{-1}``); needs N even.

    Returns
    -------
    Task

    Raises
    ------
    InputError
        N or R not a positive integer; ``symmetric`` with N odd.
    """
    N = check_positive_int("N", N)
    R = check_positive_int("R", R)
    rng = as_rng(rng)
    if symmetric:
        if N % 2:
            raise InputError(f"symmetric relations are perfect matchings and need N even; got N = {N}")
        order = rng.permuted(np.tile(np.arange(N), (R, 1)), axis=1)
        table = np.empty((R, N), dtype=np.int64)
        rows = np.arange(R)[:, None]
        table[rows, order[:, 0::2]] = order[:, 1::2]
        table[rows, order[:, 1::2]] = order[:, 0::2]
    else:
        table = rng.permuted(np.tile(np.arange(N, dtype=np.int64), (R, 1)), axis=1)
    return Task(table, attributes)


def task_for_seed(
    N: int, R: int, seed: int, *, attributes: Attributes = "shared", symmetric: bool = False
) -> Task:
    """THE task of a run: :func:`random_task` on the ``task`` stream of ``seed`` (``theory.seeds``).

    A function of ``(N, R, seed)`` (and the variant flags) alone, the same in every command.

    Parameters
    ----------
    N, R : int
        Entities and relations.
    seed : int
        The run seed (>= 0).
    attributes, symmetric
        As in :func:`random_task`.

    Returns
    -------
    Task

    Raises
    ------
    InputError
        As :func:`random_task`, or a seed that is not a non-negative integer.
    """
    return random_task(N, R, seeds.rng(seed, "task"), attributes=attributes, symmetric=symmetric)


def paths(R: int, k: int) -> np.ndarray:
    """All R^k relation paths as rows ``(r_k, ..., r_1)`` (token order); row i is flat path index i.

    Parameters
    ----------
    R, k : int
        Relations and hops (>= 1).

    Returns
    -------
    numpy.ndarray
        ``(R^k, k)`` int64.

    Raises
    ------
    InputError
        R or k not a positive integer.
    """
    R = check_positive_int("R", R)
    k = check_positive_int("k", k)
    return np.stack(np.unravel_index(np.arange(R**k), (R,) * k), axis=1).astype(np.int64)
