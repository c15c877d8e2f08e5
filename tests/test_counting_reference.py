"""Counting checked against an independent ground truth.

The two reference counters below are deliberately simple plain-Python loops that share no code with
``bounds/counting.py`` (no NumPy, no composition tables, no search): they exist to produce and re-check the
golden integers that ``georecall verify`` pins in ``verify/sections/bounds_checks.py``.

- ``reference_counts`` enumerates every task (all R-tuples of permutations of [N]) and composes maps by hand.
- ``reference_trees_by_labels`` never builds a task: it tries every labelling of the depth-k tree below vertex
  0 and keeps those whose constraints are, colour by colour, a partial injection (same source, same target;
  different sources, different targets). That this counts ``|Trees_k|`` rests on "a partial injection extends
  to a permutation", and is itself checked against ``reference_counts`` for every small case.
"""

from __future__ import annotations

import itertools
import math

import pytest

from georecall.bounds.counting import F_lower, closed_forms, count_trees, enumerate_counts, product_value
from georecall.verify.sections.bounds_checks import COUNT_CASES, GOLDEN_COUNTS, GOLDEN_TREES


def reference_counts(N, R, k):
    """(|F_k|, |Trees_k|) by enumerating all (N!)^R tasks with plain loops."""
    perms = list(itertools.permutations(range(N)))
    paths = list(itertools.product(range(R), repeat=k))  # (r_k, ..., r_1): r_1 applied first
    tables, trees = set(), set()
    for task in itertools.product(perms, repeat=R):
        table = []
        for path in paths:
            image = []
            for s in range(N):
                v = s
                for r in reversed(path):
                    v = task[r][v]
                image.append(v)
            table.append(tuple(image))
        tables.add(tuple(table))
        trees.add(tuple(row[0] for row in table))
    return len(tables), len(trees)


def reference_trees_by_labels(N, R, k):
    """|Trees_k| by trying every labelling of the tree below vertex 0 (no task is built)."""
    n_vertices = sum(R**j for j in range(k + 1))
    n_internal = n_vertices - R**k
    leaves = set()
    for rest in itertools.product(range(N), repeat=n_vertices - 1):
        label = (0,) + rest
        consistent = True
        for r in range(R):
            image = {}
            for parent in range(n_internal):
                source, target = label[parent], label[R * parent + 1 + r]
                if image.get(source, target) != target:
                    consistent = False  # one source, two targets
                    break
                image[source] = target
            if not consistent or len(set(image.values())) != len(image):
                consistent = False  # two sources, one target
                break
        if consistent:
            leaves.add(label[n_internal:])
    return len(leaves)


FAST = [(N, R, k) for (N, R, k) in GOLDEN_COUNTS if math.factorial(N) ** R * R**k * N * k <= 3_000_000]
SLOW = [case for case in GOLDEN_COUNTS if case not in FAST]


def test_the_fast_cases_cover_k_2_and_3_at_N_up_to_5():
    assert {k for (_, _, k) in FAST} >= {2, 3}
    assert {(N, R) for (N, R, _) in FAST} >= {(3, 1), (3, 2), (4, 2), (4, 3), (5, 2)}


@pytest.mark.parametrize("case", FAST)
def test_golden_counts_are_the_reference_counts(case):
    assert reference_counts(*case) == GOLDEN_COUNTS[case]


@pytest.mark.slow
@pytest.mark.parametrize("case", SLOW)
def test_golden_counts_are_the_reference_counts_slow(case):
    assert reference_counts(*case) == GOLDEN_COUNTS[case]


@pytest.mark.parametrize("N, R, k_max", COUNT_CASES)
def test_vectorized_enumeration_matches_the_golden_counts(N, R, k_max):
    counts = enumerate_counts(N, R, k_max)
    for k in range(2, k_max + 1):
        assert (counts.F[k], counts.trees[k]) == GOLDEN_COUNTS[(N, R, k)]


@pytest.mark.parametrize("N, R, k", [(2, 2, 3), (3, 2, 2), (3, 3, 2), (4, 2, 2), (3, 1, 4), (4, 1, 3),
                                     pytest.param(3, 2, 3, marks=pytest.mark.slow), (2, 3, 2)])
def test_labelling_reference_equals_task_enumeration(N, R, k):
    assert reference_trees_by_labels(N, R, k) == reference_counts(N, R, k)[1]


@pytest.mark.parametrize("N", sorted(GOLDEN_TREES))
def test_golden_trees_beyond_enumeration(N):
    assert reference_trees_by_labels(N, 2, 2) == GOLDEN_TREES[N]
    assert count_trees(N, 2, 2) == GOLDEN_TREES[N]


@pytest.mark.parametrize("N", sorted(GOLDEN_TREES))
def test_sandwich_lower_side_is_not_trivial_there(N):
    lower = closed_forms(N, 2, 2).trees_lower
    assert lower is not None and lower <= GOLDEN_TREES[N] <= N**4
    assert lower > GOLDEN_TREES[N] / 6  # within a small factor: a bound made 6x too strong would fail


def test_F_lower_holds_on_every_golden_count():
    for (N, R, k), (F, _) in GOLDEN_COUNTS.items():
        assert product_value(F_lower(N, R, k)) <= F <= math.factorial(N) ** R


def test_count_trees_refuses_large_searches():
    with pytest.raises(ValueError, match="max_nodes"):
        count_trees(30, 3, 3)


@pytest.mark.parametrize("N, R, k_max", [(4, 2, 3), (3, 3, 2), (5, 1, 3), (4, 1, 4)])
def test_composing_permutations_counts_what_the_composition_table_counts(N, R, k_max, monkeypatch):
    """The two ways of composing along paths (the N! × N! table; the permutations themselves, which R = 1
    uses at N ≥ 7 where the table would not fit) give the same counts."""
    from georecall.bounds import counting

    by_table = enumerate_counts(N, R, k_max)
    monkeypatch.setattr(counting, "composes_by_table", lambda *_: False)
    direct = enumerate_counts(N, R, k_max)
    assert (direct.F, direct.trees) == (by_table.F, by_table.trees)


def test_r_1_at_n_8_counts_the_squares_of_s_8():
    """``count --N 8 --R 1 --k 2`` (40,320 tasks, under the limit) was refused for a 121 GiB composition
    table; |F_2| is the number of distinct squares in S_8, counted here by brute force."""
    squares = {tuple(p[p[i]] for i in range(8)) for p in itertools.permutations(range(8))}
    assert not counting_module().composes_by_table(8, 1, 2)
    counts = enumerate_counts(8, 1, 2)
    assert counts.F[2] == len(squares) == 14280 and counts.F[1] == math.factorial(8)


def counting_module():
    from georecall.bounds import counting
    return counting
