import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.codes import binary_length, coherence, make_codes, sign_length


def naive_coherence(vectors):
    norm = vectors[0] @ vectors[0]
    return max(vectors[i] @ vectors[j] for i, j in itertools.permutations(range(len(vectors)), 2)) / norm


@given(N=st.integers(2, 300))
def test_binary_codes_distinct_with_closed_form_coherence(N):
    D = binary_length(N)
    assert 2**D >= N > 2 ** (D - 1) or (N <= 2 and D == 1)
    codes = make_codes("binary", N, scale="integer")
    assert len({tuple(v) for v in codes.vectors}) == N
    assert set(np.unique(codes.vectors)) <= {-1.0, 1.0}
    assert codes.mu == pytest.approx(1 - 2 / D, abs=1e-12)
    assert codes.norm_sq == D


@given(kind=st.sampled_from(["sign", "gaussian", "binary"]), N=st.integers(2, 40), D=st.integers(6, 20),
       seed=st.integers(0, 10_000))
def test_chunked_coherence_equals_naive(kind, N, D, seed):
    codes = make_codes(kind, N, D, seed)
    assert coherence(codes.vectors, chunk_bytes=7 * 8 * codes.N) == pytest.approx(
        naive_coherence(codes.vectors), abs=1e-12
    )
    assert codes.mu == pytest.approx(naive_coherence(codes.vectors), abs=1e-12)
    assert codes.norm_sq == pytest.approx(1.0)


def test_sign_length_meets_the_union_bound():
    for N in (2, 10, 1000, 4096):
        D = sign_length(N, t=0.5, delta=1e-3)
        assert N * (N - 1) / 2 * np.exp(-D * 0.25 / 2) <= 1e-3
        assert N * (N - 1) / 2 * np.exp(-(D - 1) * 0.25 / 2) > 1e-3 or D == 1


def test_sign_codes_at_sign_length_have_small_coherence():
    codes = make_codes("sign", 1000, None, np.random.default_rng(0))
    assert codes.D == sign_length(1000)
    assert codes.mu <= 0.5


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: make_codes("binary", 9, 3), r"2\^D >= N; got 2\^3 = 8 < N = 9"),
        (lambda: make_codes("gaussian", 4, 3, 0, scale="integer"), "no integer scale"),
        (lambda: make_codes("fourier", 4, 3), "code kind"),
        (lambda: sign_length(10, t=1.5), "0 < t < 1"),
        (lambda: make_codes("sign", 4, 0, 0), "D must be >= 1"),
    ],
)
def test_code_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()
