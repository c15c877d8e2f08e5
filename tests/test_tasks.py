import numpy as np
import pytest
from conftest import tables
from hypothesis import given
from hypothesis import strategies as st

from georecall.theory.tasks import Task, paths, random_task


@given(N=st.integers(1, 50), R=st.integers(1, 5), seed=st.integers(0, 2**32 - 1))
def test_random_task_rows_are_permutations(N, R, seed):
    task = random_task(N, R, np.random.default_rng(seed))
    assert task.table.shape == (R, N)
    assert (np.sort(task.table, axis=1) == np.arange(N)).all()


def test_random_task_is_reproducible_and_seed_dependent():
    a, b, c = random_task(100, 3, 7), random_task(100, 3, 7), random_task(100, 3, 8)
    assert np.array_equal(a.table, b.table)
    assert not np.array_equal(a.table, c.table)


@given(N=st.integers(1, 20).map(lambda n: 2 * n), R=st.integers(1, 4), seed=st.integers(0, 1000))
def test_symmetric_relations_are_fixed_point_free_involutions(N, R, seed):
    table = random_task(N, R, seed, symmetric=True).table
    assert (np.take_along_axis(table, table, axis=1) == np.arange(N)).all()
    assert (table != np.arange(N)).all()


def test_symmetric_needs_even_N():
    with pytest.raises(ValueError, match="need N even"):
        random_task(5, 2, 0, symmetric=True)


@given(tables(max_N=12, max_R=3), st.integers(1, 3))
def test_k_hop_equals_naive_composition(table, k):
    task = Task.from_table(table)
    answers = task.k_hop(k)
    assert answers.shape == (task.R,) * k + (task.N,)
    for row, path in enumerate(paths(task.R, k)):  # path = (r_k, ..., r_1)
        expected = []
        for s in range(task.N):
            v = s
            for r in reversed(path):  # r_1 first
                v = int(table[r, v])
            expected.append(v)
        assert answers.reshape(-1, task.N)[row].tolist() == expected
        assert task.compose(path[::-1]).tolist() == expected


def test_disjoint_attributes_offset_answers():
    task = Task.from_table([[1, 0, 2], [2, 1, 0]], attributes="disjoint")
    assert task.n_answers == 6
    assert task.single_hop().tolist() == [[1, 0, 2], [5, 4, 3]]
    with pytest.raises(ValueError, match="shared"):
        task.k_hop(2)


@pytest.mark.parametrize(
    "table, message",
    [
        (
            [[0, 1, 1]],
            r"relation 0 is not a bijection .* value 1 is the image of subjects \[1, 2\]"
            r".*missing values \[2\]",
        ),
        ([[0, 1, 2], [2, 2, 0]], r"relation 1 is not a bijection"),
        ([[0, 1, 5]], r"relation 0 maps subject 2 to 5, outside \[0, 3\)"),
        ([[0, -1, 1]], r"relation 0 maps subject 1 to -1"),
        ([0, 1, 2], r"shape \(R, N\)"),
        ([[0.5, 1.0]], "integer entity ids"),
        (np.zeros((0, 3), dtype=int), "R >= 1"),
    ],
)
def test_invalid_tables_are_rejected_with_the_culprit_named(table, message):
    with pytest.raises(ValueError, match=message):
        Task.from_table(table)


def test_table_is_read_only_copy():
    raw = np.array([[1, 0]])
    task = Task.from_table(raw)
    raw[0, 0] = 0
    assert task.table.tolist() == [[1, 0]]
    with pytest.raises(ValueError):
        task.table[0, 0] = 1


@pytest.mark.parametrize("N, R", [(0, 1), (3, 0), (2.5, 1)])
def test_random_task_rejects_bad_sizes(N, R):
    with pytest.raises(ValueError):
        random_task(N, R, 0)
