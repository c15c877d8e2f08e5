"""Long checks (marked slow: excluded from the default run; `python -m pytest -m slow`; CI runs them as a
second step). Each is a full-size version of a check the default suite makes at small size."""

import numpy as np
import pytest

from georecall.bounds.counting import closed_forms, enumerate_counts
from georecall.verify.checking.run import check_multi_hop, check_single_hop, precision_scan

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("construction, N, R, k", [("path-blocks", 1024, 3, 3), ("cot", 1024, 4, 3),
                                                   ("associative-depth", 1024, 3, 3),
                                                   ("associative-width", 256, 3, 3)])
def test_multi_hop_at_benchmark_sizes(construction, N, R, k):
    report = check_multi_hop(N, R, k, construction=construction, seed=1)
    assert report.passed and report.result.n_queries == N * R**k


@pytest.mark.parametrize("codes, D", [("sign", None), ("gaussian", None)])
def test_g1_random_codes_at_the_high_probability_length(codes, D):
    """Default D = 2 ln(N²/2δ)/t² (t = 1/2, δ = 1e-3): μ <= 1/2 expected, margin >= λ·c1·|a|²/2."""
    report = check_single_hop(1024, 8, codes=codes, D=D, seed=3)
    assert report.passed and report.extra["mu"] <= 0.5


def test_enumeration_at_k_3():
    counts = enumerate_counts(5, 3, 3)
    # computed once with the vectorized enumerator (cross-checked against brute force for N <= 4 in
    # test_bounds.py); the sandwich and closed forms are re-checked here
    assert counts.F[3] == 1_726_110 and counts.trees[3] == 1_569_257
    for k in (1, 2, 3):
        assert counts.trees[k] <= closed_forms(5, 3, k).trees_upper


def test_precision_at_default_size():
    doc = precision_scan("geometric", 4096, 16)
    assert doc["smallest_exact_bits"] == 2 and doc["queries"] == 65_536
    assert np.isfinite(doc["records"][-1]["min_margin"])
