"""k-hop constructions (docs/theory.md, "G2", "A2(a)", "A2(b)", "C1"): G2 path blocks, A2 associative width
(a) and depth (b), C1 chain-of-thought.

Queries are the tokens ``⟨r_k, ..., r_1, s⟩``: ``r_j`` sits at position ``k − j`` and the subject at position
k. All four fetch relation tokens with *positional* heads: the position embedding is one-hot
(``P[t] = 1_{pos_t}``) and a head's score is ``β·[u = target(q)]``, so it puts weight ``1 − ε`` on its target,
``ε = n/(e^β + n)`` with n other visible positions. Each builder's docstring states the leakage inequality
that keeps it exact, and its promise (in its module) carries it; the default β meets it with room.
``attention="hard"`` builds the ε = 0 idealization, and is labelled as such wherever it is reported.

The builders allocate what they are asked for: the memory a build and its check need is estimated once,
before the build, by ``georecall.estimates.check_estimate`` from the registry's spec, and refused over the
run's :class:`~georecall.memory.Budget` (``verify.checking.run.run_check`` and every command do so).

Each construction is its own module, :mod:`.g2`, :mod:`.a2_width`, :mod:`.a2_depth` and :mod:`.c1` (its
promise, family and builder), with what they share in :mod:`.hops`; this module gathers their names (the
import path of the builders).
"""

from georecall.constructions.a2_depth import (
    A2B_ENCODING,
    a2_depth_family,
    a2_depth_nominal_promise,
    a2_depth_promise,
    build_a2_depth,
)
from georecall.constructions.a2_width import (
    A2A_ENCODING,
    a2_width_family,
    a2_width_nominal_promise,
    a2_width_promise,
    build_a2_width,
)
from georecall.constructions.c1 import C1_ENCODING, build_c1, c1_family, c1_nominal_promise, c1_promise
from georecall.constructions.g2 import G2_ENCODING, build_g2, g2_family, g2_nominal_promise, g2_promise
from georecall.theory.tokens import chains, multi_hop_queries

__all__ = ["A2A_ENCODING", "A2B_ENCODING", "C1_ENCODING", "G2_ENCODING", "a2_depth_family",
           "a2_depth_nominal_promise", "a2_depth_promise", "a2_width_family", "a2_width_nominal_promise",
           "a2_width_promise", "build_a2_depth", "build_a2_width", "build_c1", "build_g2", "c1_family",
           "c1_nominal_promise", "c1_promise", "chains", "g2_family", "g2_nominal_promise", "g2_promise",
           "multi_hop_queries"]
