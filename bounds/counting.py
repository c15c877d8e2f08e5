"""Exact counting over R-regular edge-coloured graphs (docs/bounds.md, "Total information" and "Per entity").

Two sets are counted:

- ``F_k``: the distinct k-hop answer tables ``(π_w)_{|w| = k}`` over all ``(N!)^R`` tasks;
- ``Trees_k``: the distinct depth-k leaf vectors ``(π_w(s))_{|w| = k}`` a vertex s can have (the same number
  for every s, by relabelling; we count s = 0).

``enumerate_counts`` enumerates every task for small N, vectorized over tasks: a permutation is an index into
the lexicographic list of the N! permutations, composition is one lookup in an ``N! × N!`` table, and the
answer tables of all tasks are built k lookups at a time. Distinct rows are counted with ``np.unique`` on a
byte view. Closed forms and sandwiches (``closed_forms``) hold for every N and are evaluated exactly.

``count_trees`` counts ``|Trees_k|`` without enumerating tasks, by a depth-first search over partial
injections (a leaf vector is realizable iff the tree's constraints of every colour form a partial injection,
which always extends to a permutation), so it reaches sizes (N = 7..9, R = 2, k = 2) where the lower side of
the sandwich is not trivial. ``F_lower`` is a lower bound on ``|F_k|`` for every N (proof in its docstring).

Exact logarithms: ``exact_log2`` of a Python integer uses its bit length and its top 64 bits (error below
1e-15); ``log2_falling`` computes ``log2 (n)_m`` from the exact integer ``math.perm(n, m)`` when it is small
and from mpmath's log-gamma at 50 significant digits otherwise (no double-precision cancellation).
``ceil_log2_product`` decides ``⌈log2 C⌉`` *exactly* for ``C = Π ((n_i)_{m_i})^{e_i}``: from the integer
itself when it has at most ``EXACT_BITS`` bits, otherwise from a 60-digit value that is at distance > 1e-20
from an integer (else it falls back to the integer). The lower bounds' ``d_min`` is decided from it.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from dataclasses import dataclass

import mpmath
import numpy as np

from georecall.bounds.graphs import tree_size
from georecall.errors import InputError
from georecall.theory.tasks import check_positive_int

__all__ = [
    "ClosedForms",
    "Counts",
    "EXACT_BITS",
    "F_lower",
    "Factors",
    "MAX_TASKS",
    "all_permutations",
    "ceil_log2_product",
    "closed_forms",
    "composes_by_table",
    "composition_table",
    "coprime_cycle_length",
    "count_trees",
    "enumerate_counts",
    "exact_log2",
    "log2_factorial",
    "log2_falling",
    "log2_product",
    "product_value",
]

# Largest number of tasks enumerated in one go (memory: about 8·R^k bytes each per step).
MAX_TASKS = 5_000_000
_EXACT_PERM_TERMS = 4096


def exact_log2(n: int) -> float:
    """``log2 n`` for a positive Python integer of any size, to double precision (from its bit length and its
    top 64 bits: error below 1e-15).

    Parameters
    ----------
    n : int
        A positive integer.

    Returns
    -------
    float

    Raises
    ------
    InputError
        ``n <= 0``.
    """
    if n <= 0:
        raise InputError(f"log2 needs a positive integer, got {n}")
    shift = max(0, n.bit_length() - 64)
    return math.log2(n >> shift) + shift


def log2_falling(n: int, m: int) -> float:
    """``log2 (n)_m = log2 n(n−1)…(n−m+1)``: from the exact integer ``math.perm(n, m)`` when m is small, else
    from mpmath's log-gamma at 50 significant digits (no double-precision cancellation).

    Parameters
    ----------
    n, m : int
        Non-negative integers.

    Returns
    -------
    float
        ``−inf`` when ``m > n``.

    Raises
    ------
    InputError
        n or m negative.
    """
    if m < 0 or n < 0:
        raise InputError(f"falling factorial needs n, m >= 0; got n = {n}, m = {m}")
    if m > n:
        return -math.inf
    if m <= _EXACT_PERM_TERMS:
        return exact_log2(math.perm(n, m))
    with mpmath.workdps(50):
        value = (mpmath.loggamma(n + 1) - mpmath.loggamma(n - m + 1)) / mpmath.log(2)
        return float(value)


def log2_factorial(n: int) -> float:
    """``log2 n!`` (``log2_falling(n, n)``).

    Parameters
    ----------
    n : int
        A non-negative integer.

    Returns
    -------
    float

    Raises
    ------
    InputError
        n negative.
    """
    return log2_falling(n, n)


# A count given as a product of falling factorials: ((n, m, e), ...) means Π ((n)_m)^e.
Factors = tuple[tuple[int, int, int], ...]
EXACT_BITS = 200_000


def log2_product(factors: Factors) -> float:
    """``log2 Π ((n)_m)^e`` to double precision.

    Parameters
    ----------
    factors : Factors
        ``((n, m, e), ...)``.

    Returns
    -------
    float
        ``−inf`` if a factor is 0.

    Raises
    ------
    InputError
        A negative n or m.
    """
    total = 0.0
    for n, m, e in factors:
        if e:
            total += e * log2_falling(n, m)
    return total


def product_value(factors: Factors) -> int:
    """The exact integer ``Π ((n)_m)^e`` (only for counts of reasonable size).

    Parameters
    ----------
    factors : Factors
        ``((n, m, e), ...)``.

    Returns
    -------
    int
    """
    value = 1
    for n, m, e in factors:
        value *= math.perm(n, m) ** e
    return value


def ceil_log2_product(factors: Factors) -> int:
    """``⌈log2 C⌉`` for ``C = Π ((n)_m)^e >= 1``, decided exactly.

    Small C (at most ``EXACT_BITS`` bits): ``(C − 1).bit_length()`` of the exact integer. Large C that is a
    power of two (every factor is: ``(n)_1`` with n a power of two, ``(2)_2``, or 1): its exponent, summed in
    integers. Any other large C has an irrational ``log2 C`` (never an integer), so the sum of ``e·(lnΓ(n + 1)
    − lnΓ(n − m + 1))/ln 2`` is evaluated with 50 more significant digits than its largest term has, and
    rounded up once it is farther than ``10^(digits − 40)`` (far above the evaluation's error) from an
    integer; the margin doubles until it is. C itself is never formed: its size can be astronomical (``bounds
    --bits 0.0837`` multiplies every exponent by the denominator of b, about 10^17).

    Parameters
    ----------
    factors : Factors
        ``((n, m, e), ...)`` with ``0 <= m <= n`` and ``e >= 0``.

    Returns
    -------
    int

    Raises
    ------
    InputError
        A factor with ``m > n``, ``m < 0`` or ``e < 0``.
    """
    if any(m > n or m < 0 or e < 0 for n, m, e in factors):
        raise InputError(f"need 0 <= m <= n and e >= 0 in every factor (a count >= 1), got {factors}")
    if log2_product(factors) <= EXACT_BITS:
        return (product_value(factors) - 1).bit_length()
    power = _power_of_two_exponent(factors)
    if power is not None:
        return power
    # the largest magnitude in the evaluation (the terms before they cancel), in decimal digits
    scale = sum(e * (math.lgamma(n + 1) + math.lgamma(n - m + 1)) for n, m, e in factors) / math.log(2)
    digits = len(str(int(scale))) + 1
    extra = 40
    while True:
        with mpmath.workdps(digits + extra + 10):
            x = mpmath.mpf(0)
            for n, m, e in factors:
                x += e * (mpmath.loggamma(n + 1) - mpmath.loggamma(n - m + 1))
            x /= mpmath.log(2)
            if abs(x - mpmath.nint(x)) > mpmath.mpf(10) ** (digits - extra):
                return int(mpmath.ceil(x))
        extra *= 2


def _power_of_two_exponent(factors: Factors) -> int | None:
    """``a`` when ``C = Π ((n)_m)^e = 2^a``, else None, without forming C: a falling factorial ``(n)_m`` is a
    power of two only when it is 1 (m = 0, or n = m = 1), ``n`` a power of two (m = 1) or ``2·1`` (n = m = 2),
    since any three consecutive integers include an odd one >= 3 and ``n(n − 1)`` has an odd factor > 1
    unless n = 2; and a product of integers is a power of two only when each factor is."""
    exponent = 0
    for n, m, e in factors:
        if e == 0 or m == 0 or (n, m) == (1, 1):
            continue
        if m == 1 and n & (n - 1) == 0:
            exponent += e * (n.bit_length() - 1)
        elif (n, m) == (2, 2):
            exponent += e
        else:
            return None
    return exponent


def coprime_cycle_length(N: int, k: int) -> int:
    """The largest ``L <= N`` with ``gcd(L, k) = 1`` (``L >= N − k + 1``: one of k consecutive integers is
    ``≡ 1 mod k``).

    Parameters
    ----------
    N, k : int
        Positive integers.

    Returns
    -------
    int

    Raises
    ------
    InputError
        N or k not a positive integer.
    """
    N, k = (check_positive_int(n, v) for n, v in (("N", N), ("k", k)))
    return next(L for L in range(N, 0, -1) if math.gcd(L, k) == 1)


def F_lower(N: int, R: int, k: int) -> Factors:
    """A lower bound on ``|F_k|``, the number of distinct k-hop answer tables: ``(L − 1)!·(N!)^{R−1}`` with
    ``L`` = ``coprime_cycle_length(N, k)``, as factors for ``log2_product`` / ``ceil_log2_product``.

    Proof. Let A be the ``(L − 1)!`` permutations that are one L-cycle on ``{0..L−1}`` and fix the rest. On A,
    ``τ ↦ τ^k`` is injective: ``τ^k`` is again an L-cycle (``gcd(L, k) = 1``) and ``τ = (τ^k)^{k'}`` with
    ``k·k' ≡ 1 (mod L)``. Take the tasks with ``π_0 ∈ A`` and ``π_1..π_{R−1}`` arbitrary. Their k-hop table
    contains ``π_{0…0} = π_0^k``, which determines ``π_0``, and for each r the path ``(r, 0, …, 0)`` (``r_1 =
    … = r_{k−1} = 0``, ``r_k = r``) gives ``π_r∘π_0^{k−1}``, which then determines ``π_r``. So the ``(L −
    1)!·(N!)^{R−1}`` tasks have pairwise different tables. At k = 1 the bound is the exact ``(N!)^R`` (the
    single-hop table is the task), returned as such. For R >= 2 it is within ``(N − L + 1)·log2 N`` bits of
    the upper bound ``(N!)^R`` (enumeration: ``|F_2| ≈ 0.9·(N!)^R``), and at R = 1 it bounds the number of
    k-th powers in S_N.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.

    Returns
    -------
    Factors

    Raises
    ------
    InputError
        A size not a positive integer.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    if k == 1:
        return ((N, N, R),)
    L = coprime_cycle_length(N, k)
    return ((L - 1, L - 1, 1), (N, N, R - 1))


def all_permutations(N: int) -> np.ndarray:
    """The N! permutations of [N] in lexicographic order.

    Parameters
    ----------
    N : int
        A small non-negative integer (N! rows are formed).

    Returns
    -------
    numpy.ndarray
        ``(N!, N)`` int64.
    """
    return np.array(list(itertools.permutations(range(N))), dtype=np.int64).reshape(-1, N)


def composition_table(perms: np.ndarray) -> np.ndarray:
    """``comp[a, b]`` = index of ``perms[a] ∘ perms[b]`` (apply b first, then a).

    Parameters
    ----------
    perms : numpy.ndarray
        ``(N!, N)``, every permutation of [N] in lexicographic order (:func:`all_permutations`).

    Returns
    -------
    numpy.ndarray
        ``(N!, N!)`` int32.
    """
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
    """Count ``|F_k|`` and ``|Trees_k|`` for k = 1..k_max by enumerating all ``(N!)^R`` tasks, vectorized over
    tasks (composition is one lookup in the ``N! × N!`` table; distinct rows by ``np.unique`` on a byte view).

    Parameters
    ----------
    N, R : int
        Entities and relations.
    k_max : int
        The largest k counted.
    progress : bool
        Print a bar on stderr.
    max_tasks : int
        The enumeration limit.

    Returns
    -------
    Counts

    Raises
    ------
    InputError
        A size not a positive integer, or more than ``max_tasks`` tasks (decided before any factorial is
        formed; the message names the count).
    """
    N, R, k_max = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k_max", k_max)))
    # Decide the size before computing any factorial: R·log(N!) from lgamma, with room for its rounding.
    if R * math.lgamma(N + 1) > math.log(max_tasks) + 1e-6 * max(1.0, R * math.lgamma(N + 1)):
        raise InputError(f"(N!)^R tasks for N = {N}, R = {R} exceed the enumeration limit of {max_tasks:,} "
                         f"(N <= 5 with R <= 3 and N <= 6 with R <= 2 fit)")
    n_perm = math.factorial(N)
    n_tasks = n_perm**R
    if n_tasks > max_tasks:
        raise InputError(f"(N!)^R = {n_tasks:,} tasks exceed the enumeration limit of {max_tasks:,} "
                         f"(N <= 5 with R <= 3 and N <= 6 with R <= 2 fit)")
    start = time.perf_counter()
    perms = all_permutations(N)
    small = np.uint8 if n_perm <= 256 else np.uint16
    task_perms = np.stack(np.unravel_index(np.arange(n_tasks), (n_perm,) * R), axis=1).astype(np.int32)
    F, trees = {}, {}
    if composes_by_table(N, R, k_max):
        comp = composition_table(perms)
        paths = task_perms  # (tasks, R^k) permutation indices, path order (r_k, ..., r_1)
        for k in range(1, k_max + 1):
            if k > 1:
                paths = comp[task_perms[:, :, None], paths[:, None, :]].reshape(n_tasks, -1)
            F[k] = _distinct_rows(paths.astype(small))
            leaves = perms[paths, 0]  # (tasks, R^k) leaf of vertex 0 along each path
            trees[k] = _distinct_rows(leaves.astype(np.uint8 if N <= 256 else np.uint16))
            _progress(progress, k, k_max, F[k], trees[k])
    else:  # few tasks, many permutations (R = 1): compose the permutations themselves, not a table of them
        step = perms[task_perms].astype(np.uint8)  # (tasks, R, N): each relation's permutation
        paths_of = step  # (tasks, R^k, N): the permutation along each path, the same path order
        tasks, relations = np.arange(n_tasks)[:, None, None, None], np.arange(R)[None, :, None, None]
        for k in range(1, k_max + 1):
            if k > 1:  # π_r ∘ path: the path first, then the relation
                paths_of = step[tasks, relations, paths_of[:, None, :, :]].reshape(n_tasks, -1, N)
            F[k] = _distinct_rows(np.ascontiguousarray(paths_of.reshape(n_tasks, -1)))
            trees[k] = _distinct_rows(np.ascontiguousarray(paths_of[:, :, 0]))
            _progress(progress, k, k_max, F[k], trees[k])
    if progress:
        print(file=sys.stderr)
    return Counts(N, R, n_tasks, F, trees, time.perf_counter() - start)


def composes_by_table(N: int, R: int, k_max: int) -> bool:
    """Whether :func:`enumerate_counts` composes through the ``N! × N!`` table (:func:`composition_table`):
    when the table has no more entries than the paths it serves (``(N!)^R · R^k_max``); otherwise it composes
    the permutations themselves (R = 1 at N ≥ 7: 5,040 tasks would need a 25-million-entry table).

    Parameters
    ----------
    N, R, k_max : int
        Entities, relations, the largest k counted.

    Returns
    -------
    bool
    """
    n_perm = math.factorial(N)
    return n_perm * n_perm <= n_perm**R * R**k_max


def _progress(on: bool, k: int, k_max: int, F: int, trees: int) -> None:
    if on:
        done = int(40 * k / k_max)
        print(f"\r  [{'#' * done}{'.' * (40 - done)}] k = {k}/{k_max}: |F_k| = {F:,}, |Trees_k| = {trees:,}",
              end="", file=sys.stderr, flush=True)


def count_trees(N: int, R: int, k: int, *, max_nodes: int = 5_000_000) -> int:
    """``|Trees_k(N, R)|``, the distinct depth-k leaf vectors of vertex 0, by depth-first search over partial
    injections (no enumeration of tasks).

    The complete R-ary tree of depth k below vertex 0 is labelled level by level (BFS order): the r-child of a
    labelled vertex u is ``π_r(u)``, forced if ``π_r(u)`` is already defined, otherwise any vertex not yet in
    the image of ``π_r``. A labelling reached this way is a set of constraints that is a partial injection of
    every colour, which extends to a permutation (so every labelling is realized by a task, and every task's
    tree is reached). The leaves, in path order ``(r_k, ..., r_1)``, are collected in a set. Cost: about
    ``N^{R + R² + … + R^k}`` search nodes in the worst case.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, depth.
    max_nodes : int
        The largest search estimate allowed.

    Returns
    -------
    int

    Raises
    ------
    InputError
        A size not a positive integer, or an estimate above ``max_nodes``.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    # the r-child of BFS vertex `parent` is R·parent + 1 + r
    edges = [(parent, r) for parent in range(tree_size(R, k - 1)) for r in range(R)]
    estimate = N ** len(edges)
    if estimate > max_nodes:
        raise InputError(f"count_trees would visit up to N^(R + ... + R^k) = {estimate:,} labellings, "
                         f"more than max_nodes = {max_nodes:,}")
    n_internal = tree_size(R, k - 1)
    digits = list(itertools.product(range(R), repeat=k))  # BFS leaf order: (r_1, ..., r_k)
    bfs_to_path = [sum(d * R**i for i, d in enumerate(path)) for path in digits]  # path index of (r_k..r_1)
    order = sorted(range(R**k), key=lambda leaf: bfs_to_path[leaf])
    label = [0] * tree_size(R, k)
    forward: list[dict[int, int]] = [{} for _ in range(R)]  # forward[r][u] = π_r(u)
    used: list[set[int]] = [set() for _ in range(R)]  # images of π_r so far
    seen = set()

    def extend(i: int) -> None:
        if i == len(edges):
            seen.add(tuple(label[n_internal + leaf] for leaf in order))
            return
        parent, r = edges[i]
        u = label[parent]
        child = R * parent + 1 + r
        if u in forward[r]:
            label[child] = forward[r][u]
            extend(i + 1)
            return
        for v in range(N):
            if v not in used[r]:
                forward[r][u] = v
                used[r].add(v)
                label[child] = v
                extend(i + 1)
                used[r].discard(v)
                del forward[r][u]

    extend(0)
    return len(seen)


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
    """Closed forms and sandwiches, as exact integers (only for sizes where the integers are reasonable).

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.

    Returns
    -------
    ClosedForms

    Raises
    ------
    InputError
        A size not a positive integer.
    """
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    tasks = math.factorial(N) ** R
    lower = math.perm(N - 1, R**k) if N >= tree_size(R, k) else None
    return ClosedForms(tasks=tasks, F1=tasks, trees1=N**R, trees_upper=N ** (R**k), trees_lower=lower,
                       F_upper=tasks)
