"""C1, k hops with chain-of-thought: the G1 selector at every generated token (docs/theory.md, "C1"): its
promise, its family and its builder."""

from __future__ import annotations

import numpy as np

from georecall.constructions.building import (
    Construction,
    assemble,
    nominal_geometry,
)
from georecall.constructions.codes import Codes
from georecall.constructions.docstring_templates import nominal_promise_docstring, task_builder_docstring
from georecall.constructions.encoding import Family, TaskEncoding
from georecall.constructions.hops import (
    code_geometry,
    default_beta,
    hop_constants,
    hop_family_docstring,
    hop_family_inputs,
    hop_model,
)
from georecall.constructions.layout import Layout
from georecall.constructions.model import Layer
from georecall.constructions.parts import (
    gated_selector,
    positional_heads,
)
from georecall.theory.statements import (
    Condition,
    Promise,
    distinct_codes,
    model_params,
    softmax_leakage,
)
from georecall.theory.tasks import Task, check_positive_int

__all__ = ["C1_ENCODING", "build_c1", "c1_family", "c1_nominal_promise", "c1_promise"]


C1_ENCODING = TaskEncoding("relations", "blocks", "cot")


def c1_promise(
    N: int,
    R: int,
    k: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    max_abs: float,
    max_l1: float,
    gate: float,
    beta: float | None,
    lam: float = 1.0,
    norm_sq: float = 1.0,
    construction: str = "C1",
) -> Promise:
    """C1, k hops with chain-of-thought in one layer: the G1 selector applied once per generated token.

    Sizes ``d = R·D + R + D + 2k`` (blocks, gates, output, positions of the 2k tokens fed), ``m = 2·R·D``. At
    the position of ``v_{t−1}`` one positional head fetches ``r_t`` into the gates (at most ``2k − 1`` other
    visible positions: ``ε = (2k−1)/(e^β + 2k − 1)``); the entity's own embedding is the superposition of its
    R attributes. As in G2 with one hop: margin at least ``λ·(|a|²(1 − μ) − 2·G·ε·L1)`` at every step. Leakage
    inequalities: ``G(1 − ε) > A`` and ``|a|²(1 − μ) > 2·G·ε·L1``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    max_abs, max_l1, gate, beta, lam, norm_sq
        As in :func:`g2_promise`.

    construction : str
        The construction's id (C1), named by the promise and its refusals; a spec reusing
        this promise passes its own.

    Returns
    -------
    Promise

    Raises
    ------
    InputError
        N, R, k or D not a positive integer.
    """
    N, R, k, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k), ("D", D)))
    eps = softmax_leakage(beta, 2 * k - 1)
    d, m = R * D + R + D + 2 * k, 2 * R * D
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("gate vs leakage: G(1 − ε) > max|a|", gate * (1 - eps), max_abs),
        Condition("margin vs leakage: |a|²(1 − μ) > 2·G·ε·max|a|_1", gap, 2 * gate * eps * max_l1),
    )
    params = model_params(N, R, d, 2 * k, [("softmax", 1, 2 * k, R, m)])
    return Promise(
        construction,
        "k hops with chain-of-thought, one layer (linear in R, additive in k)",
        d,
        m,
        params,
        N * R * D,
        lam * (gap - 2 * gate * eps * max_l1),
        conditions,
        logit_scale=lam * (norm_sq + gate * max_l1),
    )


@nominal_promise_docstring("C1", c1_promise)
def c1_nominal_promise(N: int, R: int, k: int) -> Promise:
    D, geometry = nominal_geometry(N)
    return c1_promise(
        N, R, k, D, **geometry, max_abs=D**-0.5, max_l1=D**0.5, gate=2 * D**-0.5, beta=None
    )


@hop_family_docstring
def c1_family(
    N: int,
    R: int,
    k: int,
    codes: Codes | str = "binary",
    *,
    attributes: str = "shared",
    D: int | None = None,
    gate: float | None = None,
    beta: float | None = None,
    attention: str = "softmax",
    lam: float = 1.0,
    rng: np.random.Generator | int | None = None,
    construction: str = "C1",
) -> Family:
    """C1: k hops with chain-of-thought in one layer: the G1 selector applied at every generated token.

    Sequence ``⟨r_k, ..., r_1, s, v_1, ..., v_{k−1}⟩`` (2k tokens fed at most); ``v_t`` is predicted at the
    position ``k + t − 1`` of ``v_{t−1}`` (``v_0 = s``) and fed back through the input table.
    Construction. Coordinates: R blocks ``B_r`` (D each), R gates, output O (D), positions (2k):
    ``d = R·D + R + D + 2k``, ``m = 2·R·D``. Every entity's embedding is G1's superposition
    ``e_v = Σ_r J_{B_r} a_{π_r(v)}``; a relation token is ``1_{g_r}``. One positional head maps query position
    q to key position ``2k − 1 − q`` (for ``q = k + t − 1`` that is ``k − t``, where ``r_t`` is) and writes
    ``G·1_{g_{r_t}}``. The G1 selector (units ``ReLU(σ·y_{B_r,i} + y_{g_r} − G)``) then writes
    ``≈ a_{π_{r_t}(v_{t−1})}`` into O.

    Leakage inequality. At most ``2k − 1`` other positions are visible, ``ε = (2k−1)/(e^β + 2k − 1)``:
    ``G(1 − ε) > A`` and ``|a|²(1 − μ) > 2·G·ε·|a|_1``. Defaults ``G = 2A`` and
    ``2·G·ε·|a|_1 = |a|²(1 − μ)/2``.

    Parameters
    ----------
    N, R : int
        Entities and relations (the family is built without a task: :func:`~georecall.constructions.
        single_hop.assemble` adds the declared entity table or W2 rows).
    {hop family parameters}

    Returns
    -------
    Family
        The model without the declared table, its promise (checked: ``Promise.require``), codes, constants,
        layout and encoding.

    {hop family raises}
    """
    k, codes = hop_family_inputs(N, k, codes, D, rng, attention, attributes)
    D, T = codes.D, 2 * k
    gate = 2.0 * codes.max_abs if gate is None else float(gate)
    l1, gap = codes.l1, codes.gap
    beta = default_beta(attention, beta, gap / (4 * gate * l1) if gap > 0 else 0.25, T - 1)
    promise = c1_promise(
        N, R, k, D, **code_geometry(codes), max_abs=codes.max_abs, max_l1=l1, gate=gate, beta=beta, lam=lam,
        construction=construction
    ).require()
    layout = Layout()
    blocks = layout.add("blocks", R, D)
    gates = layout.add("gates", R)
    out = layout.add("out", D)
    pos = layout.add("positions", T)
    d = layout.d
    E = np.zeros((0, d))  # the declared table, left out: the task adds e_v = Σ_r J_{B_r} a_{π_r(v)}
    Q = np.zeros((R, d))
    Q[np.arange(R), gates] = 1.0
    head = positional_heads(
        d, pos, [{q: 2 * k - 1 - q for q in range(T)}], gates, [gates], [gate], attention, beta
    )
    mlp = gated_selector(d, blocks, [gates], out, gate)
    model = hop_model(construction, N, k, codes, layout, E, Q, out, (Layer(head, mlp),), pos, attention, lam)
    return Family(model, promise, codes, hop_constants(k, attention, lam, T - 1, gate=gate, beta=beta),
                  layout, C1_ENCODING, N, R, k)


@task_builder_docstring("C1", c1_family)
def build_c1(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    return assemble(c1_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)
