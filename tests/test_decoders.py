"""The hypercube decoder against the dense argmax and margins (exact, small N), and its detection guards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.model import nonzero_columns
from georecall.verify.checking.decoders import dense_decode, detect_hypercube, hypercube_decode


def hypercube_readout(D: int, d: int, lam: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``U (2^D, d)``: every ±1 pattern times λ, rows shuffled, on D random columns; zero elsewhere."""
    patterns = ((np.arange(2**D)[:, None] >> np.arange(D)) & 1) * 2.0 - 1.0
    patterns = patterns[rng.permutation(2**D)]
    columns = np.sort(rng.choice(d, size=D, replace=False))
    U = np.zeros((2**D, d))
    U[:, columns] = lam * patterns
    return U, columns


@st.composite
def cubes(draw):
    D = draw(st.integers(1, 6))
    d = draw(st.integers(D, D + 5))
    lam = draw(st.sampled_from([1.0, 2.0, 3.0, 0.5]))
    seed = draw(st.integers(0, 2**32 - 1))
    U, columns = hypercube_readout(D, d, lam, np.random.default_rng(seed))
    n = draw(st.integers(1, 40))
    # small integers, many zeros: ties are common, and margins are exact in float64
    v = np.array(draw(st.lists(st.integers(-3, 3), min_size=n * D, max_size=n * D)), dtype=np.float64)
    answers = np.array(draw(st.lists(st.integers(0, 2**D - 1), min_size=n, max_size=n)))
    return U, columns, v.reshape(n, D), answers


@given(cubes())
def test_hypercube_equals_dense_argmax_and_margins_exactly(case):
    U, columns, v, answers = case
    cube, why = detect_hypercube(U)
    assert cube is not None, why
    assert np.array_equal(cube.columns, columns)
    pred, marg = hypercube_decode(cube, v, answers)
    dense_pred, dense_marg = dense_decode(v, answers, U[:, columns])
    assert np.array_equal(pred, dense_pred)
    assert np.array_equal(marg, dense_marg)


def test_a_zero_coordinate_is_a_tie_and_a_failure():
    U, columns = hypercube_readout(3, 3, 1.0, np.random.default_rng(0))
    cube, _ = detect_hypercube(U)
    answer = cube.row_of[0b101]  # pattern (+, −, +)
    v = np.array([[2.0, 0.0, 1.0], [2.0, -1.0, 1.0], [0.0, 0.0, 0.0]])
    pred, marg = hypercube_decode(cube, v, np.array([answer, answer, answer]))
    assert marg.tolist() == [0.0, 2.0, 0.0]  # tie, then 2·λ·min|v_i| = 2, then all tie
    assert pred[1] == answer
    assert pred[0] == min(cube.row_of[0b101], cube.row_of[0b111])  # np.argmax: first of the tied rows
    assert pred[2] == 0


def test_a_wrong_answer_has_margin_minus_twice_the_disagreement():
    U, _ = hypercube_readout(4, 4, 3.0, np.random.default_rng(1))
    cube, _ = detect_hypercube(U)
    v = np.array([[1.0, -2.0, 3.0, -4.0]])  # pattern code 0b0101
    wrong = cube.row_of[0b0100]  # disagrees at coordinate 0 (|v_0| = 1) only
    assert hypercube_decode(cube, v, np.array([wrong]))[1].tolist() == [-2 * 3.0 * 1.0]
    far = cube.row_of[0b1010]  # disagrees everywhere: δ = |v|_1 = 10
    assert hypercube_decode(cube, v, np.array([far]))[1].tolist() == [-2 * 3.0 * 10.0]


def test_float32_residuals_decode_like_float64():
    U, columns = hypercube_readout(5, 8, 1.0, np.random.default_rng(2))
    cube, _ = detect_hypercube(U)
    v = np.random.default_rng(3).normal(size=(50, 5)).astype(np.float32)
    answers = np.random.default_rng(4).integers(0, 32, size=50)
    pred32, marg32 = hypercube_decode(cube, v, answers)
    pred64, marg64 = hypercube_decode(cube, v.astype(np.float64), answers)
    assert np.array_equal(pred32, pred64) and np.array_equal(marg32, marg64)


# ------------------------------------------------------------------ guards: read-outs that are not hypercubes


def broken_readouts():
    rng = np.random.default_rng(5)
    U, columns = hypercube_readout(3, 6, 2.0, rng)
    missing = U[:-1]  # 7 rows: not 2^D
    duplicate = U.copy()
    duplicate[1] = duplicate[0]  # a pattern twice, another missing
    scaled = U.copy()
    scaled[2] *= 2  # not one common λ
    stray = U.copy()
    stray[0, [c for c in range(6) if c not in columns][0]] = 2.0  # a 4th column read by one row: n_out != 2^4
    partial = U.copy()
    partial[3, columns[0]] = 0.0  # a zero on a read column
    return {"missing row": missing, "duplicate pattern": duplicate, "two scales": scaled,
            "stray column": stray, "zero entry": partial, "all zero": np.zeros_like(U)}


@pytest.mark.parametrize("name", sorted(broken_readouts()))
def test_detection_refuses_readouts_that_are_not_full_hypercubes(name):
    cube, why = detect_hypercube(broken_readouts()[name])
    assert cube is None and why


@pytest.mark.parametrize("name", ["missing row", "duplicate pattern", "two scales", "zero entry"])
def test_checker_falls_back_to_dense_and_says_so(name):
    from georecall.constructions.model import MLP, Layer, Model
    from georecall.verify.checking.check import check_queries
    U = broken_readouts()[name]
    n_out, d = U.shape
    rng = np.random.default_rng(6)
    model = Model(rng.integers(-2, 3, size=(n_out, d)).astype(float),
                  rng.integers(-2, 3, size=(2, d)).astype(float), U,
                  (Layer(None, MLP(rng.normal(size=(d, 4)), rng.normal(size=4), rng.normal(size=(4, d)),
                                   np.zeros(d))),))
    tokens = np.stack([n_out + rng.integers(0, 2, size=30), rng.integers(0, n_out, size=30)], axis=1)
    answers = rng.integers(0, n_out, size=30)
    result = check_queries(model, tokens, answers, keep=True)
    assert result.decoder == "dense" and "decoder" in result.fallback
    reference = check_queries(model, tokens, answers, keep=True, decoder="dense", forward="dense")
    assert np.array_equal(result.predictions, reference.predictions)
    with pytest.raises(ValueError, match="hypercube decoder does not apply"):
        check_queries(model, tokens, answers, decoder="hypercube")


def test_read_columns_are_the_nonzero_columns():
    U = np.zeros((70000, 5))
    U[69999, 3] = 1.0  # in the second scan block
    U[0, 1] = -1.0
    assert nonzero_columns(U).tolist() == [1, 3]
