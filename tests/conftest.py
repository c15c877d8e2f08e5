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

from hypothesis import HealthCheck, settings

settings.register_profile(
    "deterministic", derandomize=True, database=None, deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("random", derandomize=False, deadline=None, max_examples=200,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("GEORECALL_HYPOTHESIS_PROFILE", "deterministic"))


# The strategies the tests use are public: georecall.testing (users property-test their own constructions).
from georecall.testing import codebooks, models, tables, tasks  # noqa: E402,F401


def pytest_report_header(config):
    import georecall
    return f"georecall {georecall.__version__} imported from {os.path.dirname(georecall.__file__)}"
