"""A pytest plugin that adds one more built-in construction before any test module is collected.

``python -m pytest -p dummy_builtin`` (with ``tests/`` on ``PYTHONPATH``) runs the suite as if a contributor
had added a seventh construction to ``constructions/registry.py``: its entry is registered and its id joins
:data:`georecall.constructions.registry.BUILTIN_IDS`, so every test parametrized over the registry, and every
check reading it, covers it. ``tests/test_new_builtin.py`` runs the registry-derived tests this way, and shows
that a planted hard-coded list of the constructions then fails.

The dummy is G1's family under its own id and name ("G1X", "geometric-again"), as the two files a new
construction needs would give: the registry entry below, and (here shared with G1, wrapped) its module. It
takes a builder option of its own, declared in its entry and nowhere else: ``scale_readout`` (s, the read-out
scale λ multiplied by s), which the command line offers as ``--scale-readout`` with no edit of its own.
"""

from __future__ import annotations

from georecall.constructions import registry
from georecall.constructions.builder_options import BuilderOption
from georecall.constructions.encoding import Family
from georecall.constructions.g1 import G1_ENCODING, g1_family, g1_nominal_promise
from georecall.constructions.registry import BitsClaim, ConstructionSpec, single_hop_family

DUMMY_ID = "G1X"
# The dummy's own builder option: declared here once, offered by check, certify and export.
SCALE_READOUT = BuilderOption("scale_readout", "positive", "factor s on the read-out scale λ (G1X only)",
                              "read-out factor s (--scale-readout)", metavar="s")


def g1x_family(N: int, R: int, codes="binary", *, scale_readout: float | None = None, **options) -> Family:
    """G1's family, its read-out scale λ multiplied by ``scale_readout`` when given (the margin with it)."""
    if scale_readout is not None:
        options["lam"] = options.get("lam", 1.0) * scale_readout
    return g1_family(N, R, codes, **options)


DUMMY = ConstructionSpec(
    DUMMY_ID,
    "geometric-again",
    "a dummy built-in: Theorem 4.1's construction registered a second time under its own id",
    None,
    g1_nominal_promise,
    options=frozenset({"gate", "gain", "integer"}),
    variants=frozenset({"disjoint", "symmetric"}),
    verify_cases=({"N": 512, "R": 8, "compare_integer": True},),
    readout="code",
    bits=BitsClaim(1024, 8, needed=2, table=2, per_parameter=1),
    task_encoding=G1_ENCODING,
    family=single_hop_family(g1x_family, construction=DUMMY_ID),
    own_options=(SCALE_READOUT,),
)

registry.register(DUMMY)
registry.BUILTIN_IDS = registry.BUILTIN_IDS | {DUMMY_ID}
