"""Test configuration: hypothesis profiles and shared strategies.

The profiles are georecall's own, registered (and one loaded) by importing ``georecall.testing``, so that a
user's property tests get the same ones (choose with ``GEORECALL_HYPOTHESIS_PROFILE``):

- ``deterministic`` (default): derandomized, no example database, no deadline: the same examples every run, so
  CI is reproducible;
- ``random``: fresh random examples each run and more of them, for hunting bugs locally.

The ``slow`` marker (registered in pyproject.toml) tags long checks, excluded by default; run them with
``python -m pytest -m slow``.
"""

from __future__ import annotations

import os

import pytest

from georecall import usercode
from georecall.constructions import registry

# The strategies the tests use are public: georecall.testing (users property-test their own constructions).
# Importing it registers the hypothesis profiles and loads $GEORECALL_HYPOTHESIS_PROFILE (default:
# deterministic).
from georecall.testing import codebooks, models, tables, tasks  # noqa: F401


def pytest_report_header(config):
    import georecall
    return f"georecall {georecall.__version__} imported from {os.path.dirname(georecall.__file__)}"


@pytest.fixture(autouse=True)
def _registry_restored():
    """Each test sees the registry as it was before it ran: a construction a test registers (an example's
    OH1, a throwaway spec) is gone for the next test, and a built-in a test replaces comes back."""
    before = dict(registry._REGISTRY)
    yield
    registry._REGISTRY.clear()
    registry._REGISTRY.update(before)


@pytest.fixture(autouse=True)
def _usercode_limits_restored():
    """A command run in-process sets the limits user code runs under (its --build-timeout and budget); the
    next test starts from the defaults."""
    before = usercode.current_limits()
    yield
    usercode.set_limits(timeout=before.timeout, budget=before.budget, json=before.json,
                        command=before.command)
