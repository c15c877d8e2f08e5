"""Single-hop constructions: G1 (geometric, the paper's Theorem 4.1) and A1 (associative-memory baseline).

Both read a query ``(s, r)`` as the two tokens ``⟨r, s⟩`` (relation first, subject last; ``theory.tokens``)
and share the same one-layer architecture: uniform causal attention with ``W_V = I``, ``W_O = g·I`` (gain g,
default 2), so that at the last position the residual is ``y = e_s + g·(e_s + q_r)/2 = c1·e_s + c2·q_r`` with
``c1 = 1 + g/2`` and ``c2 = g/2``; then a ReLU MLP; then the read-out ``U_j = λ·J_O a_j`` on an output block
``O``. With ±1 codes, g = 2 and integer G, λ every weight is a small integer (integer mode).
Residual coordinates are allocated by name (``constructions.layout``); the model's ``meta["layout"]`` names
them.

Each construction is its own module, :mod:`.g1` and :mod:`.a1` (its promise, family and builder), with what
they share in :mod:`.building`; this module gathers their names (the import path of the builders).
"""

from georecall.constructions.a1 import A1_ENCODING, a1_family, a1_nominal_promise, a1_promise, build_a1
from georecall.constructions.building import Construction, assemble, resolve_codes
from georecall.constructions.g1 import (
    G1_ENCODING,
    GATE_RANGE,
    build_g1,
    g1_family,
    g1_nominal_promise,
    g1_promise,
)
from georecall.theory.tokens import single_hop_queries

__all__ = ["A1_ENCODING", "G1_ENCODING", "GATE_RANGE", "Construction", "a1_family", "a1_nominal_promise",
           "a1_promise", "assemble", "build_a1", "build_g1", "g1_family", "g1_nominal_promise", "g1_promise",
           "resolve_codes", "single_hop_queries"]
