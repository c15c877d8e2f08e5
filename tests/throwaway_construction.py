"""A throwaway construction (tests/test_new_construction.py): one module and one registry entry, nothing else.

TA1, a lookup table: A1's one-unit-per-fact memory with one-hot codes. Residual layout: a subject block ``S``
(N), one-hot relation coordinates ``rel_r`` (R), an output block ``O`` (N); ``d = 2·N + R``, ``m = N·R``.
``e_s = J_S 1_s``, ``q_r = 1_{rel_r}``; uniform attention with gain 2 gives ``y = 2·e_s + q_r`` at the last
position. Unit ``(s, r)`` computes ``ReLU(2·y_{S,s} + 2·y_{rel_r} − 4)``: on query ``(s', ρ)`` that is
``4·[s' = s] + 2·[ρ = r] − 4 + ...``, i.e. exactly 2 for ``(s', ρ) = (s, r)`` and ``<= 0`` for every other
unit; the firing unit writes ``1_{π_r(s)}`` into O, and ``U_j = λ·J_O 1_j``. The right logit is ``2λ``, every
other 0: margin ``2λ`` on all N·R queries, provided ``λ > 0``. Every weight is 0, 1, 2 or −4 (times λ on the
read-out), so it is exact at few bits per parameter: the claim below (``BitsClaim``) says how few, and
``georecall verify --construction`` re-measures it.

Its codes are one-hot by definition: its spec takes none of ``--codes`` / ``--D`` (``common={"lam"}``), and
nothing reports them as binary.
"""

import dataclasses

import numpy as np

from georecall.constructions.codes import Codes
from georecall.constructions.encoding import Family, TaskEncoding
from georecall.constructions.layout import Layout
from georecall.constructions.model import MLP, Layer, Model
from georecall.constructions.parts import code_readout, uniform_gain_attention
from georecall.constructions.registry import BitsClaim, ConstructionSpec
from georecall.errors import ConditionError
from georecall.theory.statements import Condition, Promise, one_layer_params

ENCODING = TaskEncoding("relations", "out", "single", array="layers.0.mlp.W2")  # unit (s, r) writes π_r(s)


def lookup_promise(N: int, R: int, *, lam: float = 1.0) -> Promise:
    """TA1's promise, from the argument above (never read off a built model)."""
    d, m = 2 * N + R, N * R
    return Promise("TA1", "one-hot lookup table (throwaway test construction)", d, m,
                   one_layer_params(N, R, d, m), N * R * N, 2 * lam,
                   (Condition("read-out scale: λ > 0", lam, 0.0),))


def lookup_family(N: int, R: int, k: int = 1, *, attributes: str = "shared", lam: float = 1.0,
                  rng=None) -> Family:
    """TA1 without a task: every field but W2's declared rows, which georecall writes from the task.

    Raises
    ------
    ConditionError
        k != 1, disjoint attributes, or λ <= 0.
    """
    if k != 1 or attributes != "shared":
        raise ConditionError(f"TA1 is single-hop with shared attributes: got k = {k}, {attributes}")
    promise = lookup_promise(N, R, lam=lam).require()
    one_hot = Codes("one-hot", np.eye(N), norm_sq=1.0, max_abs=1.0, mu=0.0 if N > 1 else -1.0, gap=1.0,
                    distinct=True, distinct_lhs=1, distinct_rhs=0, certificate="one-hot codes are orthogonal")
    layout = Layout()
    S, rel, out = layout.add("subject", N), layout.add("relations", R), layout.add("out", N)
    d, m = layout.d, N * R
    E = np.zeros((N, d))
    E[np.arange(N), S] = 1.0
    Q = np.zeros((R, d))
    Q[np.arange(R), rel] = 1.0
    W1 = np.zeros((d, m))  # unit u = r·N + s listens to (s, r)
    units = np.arange(m).reshape(R, N)
    W1[S[None, :], units] = 2.0
    W1[rel[:, None], units] = 2.0
    mlp = MLP(W1, np.full(m, -4.0), np.zeros((m, d)), np.zeros(d))  # W2's rows: the task's (ENCODING)
    model = Model(E, Q, layers=(Layer(uniform_gain_attention(d, 2.0), mlp),),
                  meta={"construction": "TA1", "layout": layout.as_dict()},
                  **code_readout(one_hot, N, d, out, lam))
    return Family(model, promise, one_hot, {"lambda": lam}, layout, ENCODING, N, R)


SPEC = ConstructionSpec(
    "TA1",
    "throwaway-lookup",
    "one-hot lookup table (throwaway test construction)",
    None,  # the family, assembled on the task
    lambda N, R, k=1: lookup_promise(N, R),
    common={"lam"},
    verify_cases=({"N": 32, "R": 2},),
    facts_in="mlp",  # the facts are W2's rows
    bits=BitsClaim(32, 2, needed=2),  # measured: b = 2 is exact, b = 1 is not
    task_encoding=ENCODING,
    family=lookup_family,
)

# The same construction claiming to be exact at one bit per parameter, which it is not: its bits row fails.
SPEC_WRONG_BITS = dataclasses.replace(SPEC, id="TA1x", name="throwaway-lookup-wrong-bits",
                                      bits=BitsClaim(32, 2, needed=1))
