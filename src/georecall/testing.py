"""Hypothesis strategies for property-testing georecall and your own constructions.

Requires hypothesis (``pip install '.[test]'`` in georecall's clone); nothing else in georecall imports this
module.

Importing it registers two hypothesis profiles and loads one of them (``GEORECALL_HYPOTHESIS_PROFILE``):

- ``georecall-deterministic`` (the default): derandomized, no example database, no deadline (an exhaustive
  check of a construction takes longer than hypothesis's 200 ms default on a busy machine), 40 examples;
- ``georecall-random``: fresh random examples each run, 200 of them, no deadline.

(``deterministic`` and ``random`` are accepted as short names.) Your own ``@settings(...)`` still override it.

- :func:`tables`: ``(R, N)`` tables of arbitrary bijections (shrinking toward small N, R and the identity);
- :func:`tasks`: :class:`~georecall.theory.tasks.Task` objects built from them (shared or disjoint
  attributes);
- :func:`codebooks`: binary, sign or Gaussian :class:`~georecall.constructions.codes.Codes` of small length;
- :func:`models`: random :class:`~georecall.constructions.model.Model` objects (uniform or softmax attention,
  heads, layers, positions) for gradient and forward-pass properties.

A property test of your own construction (a ``ConstructionSpec``, see ``examples/my_construction.py``),
with the ready property :func:`check_spec` and written out with the strategies (docs/your_construction.md's
snippet, run from the repository's folder; a task outside the construction's conditions is skipped, as
:func:`check_spec` does)::

    from hypothesis import assume, given

    from georecall.constructions.registry import resolve
    from georecall.errors import ConditionError
    from georecall.testing import check_spec, tasks
    from georecall.verify.checking.run import run_check

    SPEC = resolve("examples/my_construction.py:SPEC")


    def test_my_construction_is_exact():  # the ready property: every query of every drawn task
        check_spec(SPEC, max_N=32, max_R=3)


    @given(tasks(max_N=32, max_R=3))  # the same, written out
    def test_my_construction_by_hand(task):
        try:
            report = run_check(SPEC, task.N, task.R, task=task)
        except ConditionError:  # outside its conditions (say N = 1): skipped, as check_spec does
            assume(False)
        assert report.passed
"""

from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from georecall.constructions.codes import Codes, make_codes
from georecall.constructions.model import Model
from georecall.constructions.registry import ConstructionSpec, resolve
from georecall.errors import ConditionError
from georecall.theory.tasks import Task

__all__ = ["PROFILES", "check_spec", "codebooks", "load_profile", "models", "tables", "tasks"]

PROFILES = {
    "georecall-deterministic": dict(derandomize=True, database=None, deadline=None, max_examples=40,
                                    suppress_health_check=[HealthCheck.too_slow]),
    "georecall-random": dict(derandomize=False, deadline=None, max_examples=200,
                             suppress_health_check=[HealthCheck.too_slow]),
}
_SHORT = {"deterministic": "georecall-deterministic", "random": "georecall-random"}
for _short, _name in _SHORT.items():
    for _registered in (_name, _short):
        settings.register_profile(_registered, **PROFILES[_name])  # type: ignore[arg-type]


def load_profile(name: str | None = None) -> str:
    """Load a georecall hypothesis profile: ``name``, else ``$GEORECALL_HYPOTHESIS_PROFILE``, else
    ``georecall-deterministic``; returns the profile's name.

    Parameters
    ----------
    name : str, optional
        ``georecall-deterministic`` / ``deterministic`` or ``georecall-random`` / ``random`` (any other
        profile registered with hypothesis works too).

    Raises
    ------
    hypothesis.errors.InvalidArgument
        For a profile nobody registered.
    """
    chosen = name or os.environ.get("GEORECALL_HYPOTHESIS_PROFILE") or "georecall-deterministic"
    settings.load_profile(_SHORT.get(chosen, chosen))
    return chosen


load_profile()


@st.composite
def tables(draw, min_N: int = 1, max_N: int = 64, min_R: int = 1, max_R: int = 6) -> np.ndarray:
    """A strategy: an ``(R, N)`` table of arbitrary bijections; shrinks toward small N, R and identity
    permutations.

    Parameters
    ----------
    min_N, max_N, min_R, max_R : int
        Ranges of the drawn sizes.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of ``(R, N)`` int64 arrays.
    """
    N = draw(st.integers(min_N, max_N))
    R = draw(st.integers(min_R, max_R))
    rows = [draw(st.permutations(range(N))) for _ in range(R)]
    return np.array(rows, dtype=np.int64).reshape(R, N)


@st.composite
def tasks(draw, min_N: int = 1, max_N: int = 64, min_R: int = 1, max_R: int = 6,
          attributes: tuple[str, ...] = ("shared",)) -> Task:
    """A strategy: a :class:`~georecall.theory.tasks.Task` on a drawn :func:`tables` table.

    Parameters
    ----------
    min_N, max_N, min_R, max_R : int
        Ranges of the drawn sizes.
    attributes : tuple of str
        The variants to draw from (``"shared"``, ``"disjoint"``).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of Task.
    """
    table = draw(tables(min_N, max_N, min_R, max_R))
    return Task(table, draw(st.sampled_from(attributes)))


@st.composite
def codebooks(draw, N: int, kinds: tuple[str, ...] = ("binary", "sign", "gaussian"), min_D: int = 1,
              max_D: int = 12, scale: str = "unit") -> Codes:
    """A strategy: N codes of a drawn kind and length (short lengths included, so that duplicates and
    near-duplicates occur and guards are exercised); the draw of random codes is seeded by hypothesis.

    Parameters
    ----------
    N : int
        Number of codes.
    kinds : tuple of str
        Kinds to draw from (``"binary"``, ``"sign"``, ``"gaussian"``).
    min_D, max_D : int
        Range of the code length (binary codes are at least ``⌈log2 N⌉`` long).
    scale : {"unit", "integer"}
        Integer scale gives ±1 entries (Gaussian codes are always unit).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of Codes.
    """
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
    """A strategy: a randomly initialised Model (``verify.training.parameters.init_model``) of drawn shape,
    attention kind (uniform or softmax), heads, layers and positions.

    Parameters
    ----------
    max_N, max_R, max_d, max_m, max_layers : int
        Upper ends of the drawn sizes.
    dtype : numpy.dtype
        The weights' dtype.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of Model.
    """
    N, R = draw(st.integers(2, max_N)), draw(st.integers(1, max_R))
    d, m = draw(st.integers(2, max_d)), draw(st.integers(1, max_m))
    attention = draw(st.sampled_from(["uniform", "softmax"]))
    heads = draw(st.integers(1, 2))
    layers = draw(st.integers(1, max_layers))
    positions = draw(st.one_of(st.none(), st.integers(3, 4))) if attention == "softmax" else None
    seed = draw(st.integers(0, 2**32 - 1))
    # the trainer and the checker's sections (scipy, networkx: about 0.5 s) are imported when a strategy or a
    # check first runs, not when a user's test module imports georecall.testing
    from georecall.training.parameters import init_model

    return init_model(N, R, d, m, attention=attention, heads=heads, layers=layers, positions=positions,
                      rng=np.random.default_rng(seed), dtype=dtype)


def check_spec(spec, *, min_N: int = 1, max_N: int = 32, min_R: int = 1, max_R: int = 3, k: int = 1,
               attributes: tuple[str, ...] | None = None, max_examples: int | None = None,
               **check_options) -> int:
    """Property-test a construction: ``run_check(spec, task.N, task.R, k, task=task)`` must pass on every
    drawn task (every query exact, the promised sizes and margin reached). Call it inside a test function.

    Tasks are drawn by :func:`tasks` (arbitrary bijections, shrinking toward small N, R and the identity);
    a task outside the construction's conditions (a :class:`~georecall.errors.ConditionError`, e.g. N too
    small for its codes) is rejected with ``hypothesis.assume``, not counted as a failure; any other error
    fails the property. The active profile (see above) sets the number of examples unless ``max_examples``
    is given.

    Parameters
    ----------
    spec : ConstructionSpec or str
        The construction (a spec, a registered name, or ``FILE.py:ATTR`` / ``module:ATTR``).
    min_N, max_N, min_R, max_R : int
        Ranges of the drawn task sizes.
    k : int
        Hops of the queries (multi-hop constructions).
    attributes : tuple of str, optional
        Task variants to draw: ``("shared",)`` by default, plus ``"disjoint"`` when the spec supports it.
    max_examples : int, optional
        Overrides the profile's number of examples.
    **check_options
        Passed to ``run_check`` (``codes``, ``D``, ``options``, ``dtype``, ...).

    Returns
    -------
    int
        How many tasks passed (at least one; a run in which every draw was rejected fails).

    Raises
    ------
    AssertionError
        The first (shrunk) task on which the check fails, with the failing report's name and numbers.
    """
    from georecall.verify.checking.run import run_check  # see models(): imported when a check runs

    spec = spec if isinstance(spec, ConstructionSpec) else resolve(spec)
    if attributes is None:
        attributes = ("shared", "disjoint") if "disjoint" in spec.variants else ("shared",)
    passed = []

    @given(tasks(min_N, max_N, min_R, max_R, attributes=attributes))
    def prop(task):
        try:
            report = run_check(spec, task.N, task.R, k, task=task, **check_options)
        except ConditionError:
            assume(False)
            return
        result = report.result
        assert report.passed, (
            f"{spec.label} fails on a {task.attributes} task N = {task.N}, R = {task.R} (table "
            f"{task.table.tolist()}): {result.n_correct}/{result.n_queries} queries right, min margin "
            f"{result.min_margin:g} (promised {report.promise.margin if report.promise else None}), sizes "
            f"{report.achieved}")
        passed.append(task)

    if max_examples is not None:
        prop = settings(max_examples=max_examples)(prop)
    prop()
    assert passed, f"{spec.label}: every drawn task was outside its conditions; widen min_N/max_N"
    return len(passed)
