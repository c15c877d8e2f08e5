"""Exact counting over R-regular edge-coloured graphs (THEORY.md §4).

Two sets are counted:

- ``F_k``: the distinct k-hop answer tables ``(π_w)_{|w| = k}`` over all ``(N!)^R`` tasks;
- ``Trees_k``: the distinct depth-k leaf vectors ``(π_w(s))_{|w| = k}`` a vertex s can have (the same number for
  every s, by relabelling; we count s = 0).

``enumerate_counts`` enumerates every task for small N, vectorized over tasks: a permutation is an index into
the lexicographic list of the N! permutations, composition is one lookup in an ``N! × N!`` table, and the
answer tables of all tasks are built k lookups at a time. Distinct rows are counted with ``np.unique`` on a
byte view. Closed forms and sandwiches (``closed_forms``) hold for every N and are evaluated exactly.

Exact logarithms: ``exact_log2`` of a Python integer uses its bit length and its top 64 bits (error below
1e-15); ``log2_falling`` computes ``log2 (n)_m`` from the exact integer ``math.perm(n, m)`` when it is small and
from mpmath's log-gamma at 50 significant digits otherwise (no double-precision cancellation).
"""

from __future__ import annotations

import itertools
import math
import sys
from dataclasses import dataclass

import mpmath
import numpy as np

from georecall.bounds.graphs import tree_size
from georecall.theory.tasks import check_positive_int

# Largest number of tasks enumerated in one go (memory: about 8·R^k bytes each per step).
MAX_TASKS = 5_000_000
_EXACT_PERM_TERMS = 4096


def exact_log2(n: int) -> float:
    """``log2 n`` for a positive Python integer of any size, to double precision."""
    if n <= 0:
        raise ValueError(f"log2 needs a positive integer, got {n}")
    shift = max(0, n.bit_length() - 64)
    return math.log2(n >> shift) + shift


def log2_falling(n: int, m: int) -> float:
    """``log2 (n)_m = log2 n(n−1)…(n−m+1)``, exactly rounded to double (−inf when m > n)."""
    if m < 0 or n < 0:
        raise ValueError(f"falling factorial needs n, m >= 0; got n = {n}, m = {m}")
    if m > n:
        return -math.inf
    if m <= _EXACT_PERM_TERMS:
        return exact_log2(math.perm(n, m))
    with mpmath.workdps(50):
        value = (mpmath.loggamma(n + 1) - mpmath.loggamma(n - m + 1)) / mpmath.log(2)
        return float(value)


def log2_factorial(n: int) -> float:
    return log2_falling(n, n)


def all_permutations(N: int) -> np.ndarray:
    """The N! permutations of [N] in lexicographic order, shape ``(N!, N)``."""
    return np.array(list(itertools.permutations(range(N))), dtype=np.int64).reshape(-1, N)


def composition_table(perms: np.ndarray) -> np.ndarray:
    """``comp[a, b]`` = index of ``perms[a] ∘ perms[b]`` (apply b first, then a)."""
    N = perms.shape[1]
    weights = N ** np.arange(N - 1, -1, -1, dtype=np.int64)
    codes = perms @ weights  # lexicographic order = increasing code
    composed = perms[:, perms]  # composed[a, b, i] = perms[a, perms[b, i]]
    index = np.searchsorted(codes, composed @ weights)
    return index.astype(np.int32)


@dataclass(frozen=True)
class Counts:
    """Enumerated counts for one (N, R): ``F[k]`` and ``trees[k]`` for k = 1..k_max."""

    N: int
    R: int
    tasks: int
    F: dict[int, int]
    trees: dict[int, int]
    seconds: float = 0.0


def _distinct_rows(rows: np.ndarray) -> int:
    rows = np.ascontiguousarray(rows)
    view = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)
    return int(np.unique(view).size)


def enumerate_counts(N: int, R: int, k_max: int = 3, *, progress: bool = False,
                     max_tasks: int = MAX_TASKS) -> Counts:
    """Count ``|F_k|`` and ``|Trees_k|`` for k = 1..k_max by enumerating all ``(N!)^R`` tasks.

    Refuses (``ValueError`` with the count) above ``max_tasks`` tasks. ``progress`` prints a bar on stderr.
    """
    import time

    N, R, k_max = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k_max", k_max)))
    n_perm = math.factorial(N)
    n_tasks = n_perm**R
    if n_tasks > max_tasks:
        raise ValueError(f"(N!)^R = {n_tasks:,} tasks exceed the enumeration limit of {max_tasks:,} "
                         f"(N <= 5 with R <= 3 and N <= 6 with R <= 2 fit)")
    start = time.perf_counter()
    perms = all_permutations(N)
    comp = composition_table(perms)
    small = np.uint8 if n_perm <= 256 else np.uint16
    task_perms = np.stack(np.unravel_index(np.arange(n_tasks), (n_perm,) * R), axis=1).astype(np.int32)
    F, trees = {}, {}
    paths = task_perms  # (tasks, R^k) permutation indices, path order (r_k, ..., r_1)
    for k in range(1, k_max + 1):
        if k > 1:
            paths = comp[task_perms[:, :, None], paths[:, None, :]].reshape(n_tasks, -1)
        F[k] = _distinct_rows(paths.astype(small))
        leaves = perms[paths, 0]  # (tasks, R^k) leaf of vertex 0 along each path
        trees[k] = _distinct_rows(leaves.astype(np.uint8 if N <= 256 else np.uint16))
        if progress:
            done = int(40 * k / k_max)
            print(f"\r  [{'#' * done}{'.' * (40 - done)}] k = {k}/{k_max}: |F_k| = {F[k]:,}, "
                  f"|Trees_k| = {trees[k]:,}", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return Counts(N, R, n_tasks, F, trees, time.perf_counter() - start)


@dataclass(frozen=True)
class ClosedForms:
    """What holds for every N: exact integers where they exist, and the Trees_k sandwich."""

    tasks: int  # (N!)^R
    F1: int  # |F_1| = (N!)^R: the single-hop table is the task
    trees1: int  # |Trees_1| = N^R: π_1(s), ..., π_R(s) are arbitrary
    trees_upper: int  # N^{R^k}
    trees_lower: int | None  # (N−1)_{R^k}, when N >= 1 + R + ... + R^k (else None)
    F_upper: int  # (N!)^R


def closed_forms(N: int, R: int, k: int) -> ClosedForms:
    """Closed forms and sandwiches, as exact integers (only for sizes where the integers are reasonable)."""
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    tasks = math.factorial(N) ** R
    lower = math.perm(N - 1, R**k) if N >= tree_size(R, k) else None
    return ClosedForms(tasks=tasks, F1=tasks, trees1=N**R, trees_upper=N ** (R**k), trees_lower=lower,
                       F_upper=tasks)
