"""Hypothesis strategies for property-testing georecall and your own constructions.

Requires hypothesis (``pip install 'georecall[test]'``); nothing else in georecall imports this module.

- :func:`tables`: ``(R, N)`` tables of arbitrary bijections (shrinking toward small N, R and the identity);
- :func:`tasks`: :class:`~georecall.theory.tasks.Task` objects built from them (shared or disjoint
attributes);
- :func:`codebooks`: binary, sign or Gaussian :class:`~georecall.constructions.codes.Codes` of small length;
- :func:`models`: random :class:`~georecall.constructions.model.Model` objects (uniform or softmax attention,
  heads, layers, positions) for gradient and forward-pass properties.

A property test of your own construction (a ``ConstructionSpec``, see ``examples/my_construction.py``)::

    from hypothesis import given
    from georecall.testing import tasks
    from georecall.verify.sections.suite import run_check
    from my_construction import SPEC

    @given(tasks(max_N=32, max_R=3))
    def test_my_construction_is_exact(task):
        assert run_check(SPEC, task.N, task.R, task=task).passed
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from georecall.constructions.codes import Codes, make_codes
from georecall.constructions.model import Model
from georecall.theory.tasks import Task

__all__ = ["codebooks", "models", "tables", "tasks"]


@st.composite
def tables(draw, min_N: int = 1, max_N: int = 64, min_R: int = 1, max_R: int = 6) -> np.ndarray:
    """An ``(R, N)`` table of arbitrary bijections; shrinks toward small N, R and identity permutations."""
    N = draw(st.integers(min_N, max_N))
    R = draw(st.integers(min_R, max_R))
    rows = [draw(st.permutations(range(N))) for _ in range(R)]
    return np.array(rows, dtype=np.int64).reshape(R, N)


@st.composite
def tasks(draw, min_N: int = 1, max_N: int = 64, min_R: int = 1, max_R: int = 6,
          attributes: tuple[str, ...] = ("shared",)) -> Task:
    """A :class:`Task` on a drawn table; ``attributes`` lists the variants to draw from."""
    table = draw(tables(min_N, max_N, min_R, max_R))
    return Task(table, draw(st.sampled_from(attributes)))


@st.composite
def codebooks(draw, N: int, kinds: tuple[str, ...] = ("binary", "sign", "gaussian"), min_D: int = 1,
              max_D: int = 12, scale: str = "unit") -> Codes:
    """N codes of a drawn kind and length (short lengths included, so that duplicates and near-duplicates
    occur and guards are exercised); the draw of random codes is seeded by hypothesis."""
    kind = draw(st.sampled_from(kinds))
    if kind == "binary":
        D = draw(st.integers(max(min_D, max(1, (N - 1).bit_length())), max(max_D, (N - 1).bit_length(), 1)))
    else:
        D = draw(st.integers(min_D, max_D))
    seed = draw(st.integers(0, 2**32 - 1))
    return make_codes(kind, N, D, np.random.default_rng(seed),
                      scale="integer" if scale == "integer" and kind != "gaussian" else "unit")


@st.composite
def models(draw, max_N: int = 8, max_R: int = 3, max_d: int = 8, max_m: int = 8, max_layers: int = 2,
           dtype=np.float64) -> Model:
    """A randomly initialised Model (``verify.train.init_model``) of drawn shape, attention kind and heads."""
    from georecall.verify.training.train import init_model

    N, R = draw(st.integers(2, max_N)), draw(st.integers(1, max_R))
    d, m = draw(st.integers(2, max_d)), draw(st.integers(1, max_m))
    attention = draw(st.sampled_from(["uniform", "softmax"]))
    heads = draw(st.integers(1, 2))
    layers = draw(st.integers(1, max_layers))
    positions = draw(st.one_of(st.none(), st.integers(3, 4))) if attention == "softmax" else None
    seed = draw(st.integers(0, 2**32 - 1))
    return init_model(N, R, d, m, attention=attention, heads=heads, layers=layers, positions=positions,
                      rng=np.random.default_rng(seed), dtype=dtype)
