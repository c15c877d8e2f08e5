"""Test configuration: hypothesis profiles and shared strategies.

Profiles (choose with ``GEORECALL_HYPOTHESIS_PROFILE``):

- ``deterministic`` (default): derandomized, no example database, no deadline: the same examples every run, so
  CI is reproducible;
- ``random``: fresh random examples each run and more of them, for hunting bugs locally.

The ``slow`` marker (registered in pyproject.toml) tags long checks, excluded by default; run them with
``python -m pytest -m slow``.
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

settings.register_profile(
    "deterministic", derandomize=True, database=None, deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("random", derandomize=False, deadline=None, max_examples=200,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("GEORECALL_HYPOTHESIS_PROFILE", "deterministic"))


@st.composite
def tables(draw, min_N: int = 1, max_N: int = 64, min_R: int = 1, max_R: int = 6) -> np.ndarray:
    """An ``(R, N)`` table of arbitrary bijections; shrinks toward small N, R and identity permutations."""
    N = draw(st.integers(min_N, max_N))
    R = draw(st.integers(min_R, max_R))
    rows = [draw(st.permutations(range(N))) for _ in range(R)]
    return np.array(rows, dtype=np.int64).reshape(R, N)


def pytest_report_header(config):
    import georecall
    return f"georecall {georecall.__version__} imported from {os.path.dirname(georecall.__file__)}"
