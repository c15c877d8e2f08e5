"""A2(b), associative depth: k layers of one shared associative MLP (docs/theory.md, "A2(b)"): its promise,
its family and its builder."""

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
from georecall.constructions.model import MLP, Layer
from georecall.constructions.parts import (
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

__all__ = [
    "A2B_ENCODING",
    "a2_depth_family",
    "a2_depth_nominal_promise",
    "a2_depth_promise",
    "build_a2_depth",
]


A2B_ENCODING = TaskEncoding("relations", "current_entity", "paths", array="steps")


def a2_depth_promise(
    N: int,
    R: int,
    k: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    beta: float | None,
    lam: float = 1.0,
    norm_sq: float = 1.0,
    construction: str = "A2b",
) -> Promise:
    """A2(b), k hops without CoT in k layers, each an associative MLP of width ``2·N·R`` (one clipped unit
    pair per single-hop fact) that maps (current entity, relation of this hop) to the next entity.

    Sizes ``d = D + 2·R + (k + 1)`` (current-entity block S, relation-token block, one shared gate group,
    positions): ``O(log N + R + k)``; ``m = 2·N·R`` per layer. Layer j's attention has a head fetching ``r_j``
    (+1) and, for j >= 2, a head with the same scores fetching ``r_{j−1}`` (−1); both put the same weights on
    the same positions, so the gate group holds exactly layer j's fetch: ``g[r_j] ∈ [1 − ε, 1]``, others ``[0,
    ε]``. Unit pair ``(v, r)``: ``clip(z, 0, h)`` with ``z = <a_v, x_S> + 2·gap·g[r] − θ``, ``θ = μ|a|² +
    2·gap + gap/8``, ``h = gap/2`` (gap = ``|a|²(1 − μ)``): ``z >= gap(7/8 − 2ε) >= h`` on the current fact,
    ``z <= 0`` otherwise (needs ``ε <= 3/16``). The pair writes ``(a_{π_r(v)} − a_v)`` exactly, so S holds the
    exact code of each hop's entity and the final margin is ``λ·|a|²(1 − μ)``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    beta, lam, norm_sq
        As in :func:`g2_promise`.

    construction : str
        The construction's id (A2b), named by the promise and its refusals; a spec reusing
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
    eps = softmax_leakage(beta, k)
    d, m = D + 2 * R + (k + 1), 2 * N * R
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("clip vs leakage: 3/16 >= ε", 3 / 16, eps, strict=False),
    )
    # The k layers share ONE MLP (the same single-hop map at every hop): its weights are counted once.
    layers = [("softmax", 1 if j == 0 else 2, k + 1, R, m if j == 0 else 0) for j in range(k)]
    params = model_params(N, R, d, k + 1, layers)
    # Fact-specific: W2 of the shared MLP, 2·D entries per clipped pair (v, r) writing ±(a_{π_r(v)} − a_v)/h.
    return Promise(
        construction,
        "k hops, no CoT, k layers: one associative MLP of width O(N·R), shared by the hops",
        d,
        m,
        params,
        2 * N * R * D,
        lam * gap,
        conditions,
        logit_scale=lam * (norm_sq + 2 * gap) * norm_sq,
    )


@nominal_promise_docstring("A2(b)", a2_depth_promise)
def a2_depth_nominal_promise(N: int, R: int, k: int) -> Promise:
    D, geometry = nominal_geometry(N)
    return a2_depth_promise(N, R, k, D, **geometry, beta=None)


@hop_family_docstring
def a2_depth_family(
    N: int,
    R: int,
    k: int,
    codes: Codes | str = "binary",
    *,
    attributes: str = "shared",
    D: int | None = None,
    beta: float | None = None,
    attention: str = "softmax",
    lam: float = 1.0,
    rng: np.random.Generator | int | None = None,
    construction: str = "A2b",
) -> Family:
    """A2(b): k hops without CoT in k layers, each an associative MLP of width ``2·N·R`` (the depth side of
    the tradeoff: ``d = D + 2R + k + 1 = O(log N + R + k)``).

    Construction. Coordinates: current-entity block S (D), relation-token block ``rel`` (R), one gate group
    ``g`` (R), positions (k + 1). ``e_s = J_S a_s``; relation token ``1_{rel[r]}``. Layer j's attention: a
    head from the last position to position ``k − j`` (``r_j``) writing ``+1_{g[r_j]}``, and for j >= 2 a head
    to position ``k − j + 1`` writing ``−`` its one-hot. Scores depend on positions only and values on the
    never-written ``rel`` block, so this head cancels layer j − 1's fetch *exactly* (same weights on the same
    values): after layer j's attention ``g`` holds one fetch, ``g[r_j] ∈ [1 − ε, 1]``, others ``[0, ε]``.
    Layer j's MLP has a clipped pair per fact ``(v, r)``: ``ReLU(z) − ReLU(z − h)`` with
    ``z = <a_v, x_S> + 2·gap·g[r] − θ``, ``θ = μ|a|² + 2·gap + gap/8``, ``h = gap/2``, gap = ``|a|²(1 − μ)``;
    the pair writes ``(a_{π_r(v)} − a_v)/h`` per unit of output into S.

    Leakage inequality. ``ε = k/(e^β + k) <= 3/16``: then z >= h on the current fact (the pair outputs exactly
    h) and z <= 0 for every other (v, r), so S moves from ``a_{v_{j−1}}`` to exactly ``a_{v_j}`` and, after k
    layers, ``U_j = λ·J_S a_j`` reads the answer with margin ``λ·|a|²(1 − μ)``. Default ``ε = 1/16``.

    Parameters
    ----------
    N, R : int
        Entities and relations (the family is built without a task: :func:`~georecall.constructions.
        single_hop.assemble` adds the task's part of each pair's step, ``a_{π_r(v)}/h``).
    {hop family parameters}

    Returns
    -------
    Family
        The model with the task-independent part of W2, its promise (checked: ``Promise.require``), codes,
        constants (``step_scale`` = 1/h) and layout, and :data:`A2B_ENCODING`.

    {hop family raises}
    """
    k, codes = hop_family_inputs(N, k, codes, D, rng, attention, attributes)
    D, T = codes.D, k + 1
    beta = default_beta(attention, beta, 1 / 16, k)
    promise = a2_depth_promise(N, R, k, D, **code_geometry(codes), beta=beta, lam=lam,
                               construction=construction).require()
    layout = Layout()
    S = layout.add("current_entity", D)
    rel = layout.add("relations", R)
    g = layout.add("gates", R)
    pos = layout.add("positions", T)
    d, m = layout.d, 2 * N * R
    E = np.zeros((N, d))
    E[:, S] = codes.vectors[:N]
    Q = np.zeros((R, d))
    Q[np.arange(R), rel] = 1.0

    gap = codes.gap
    h = gap / 2
    theta = (codes.norm_sq - gap) + 2 * gap + gap / 8  # μ|a|² + 2·gap + gap/8
    # units: pair p = r·N + v; unit 2p is ReLU(z), unit 2p+1 is ReLU(z − h)
    r_of, v_of = np.divmod(np.arange(N * R), N)
    W1_pair = np.zeros((d, N * R))
    W1_pair[S] = codes.vectors[v_of].T
    W1_pair[g[r_of], np.arange(N * R)] = 2 * gap
    W1 = np.repeat(W1_pair, 2, axis=1)
    b1 = np.empty(m)
    b1[0::2], b1[1::2] = -theta, -theta - h
    # pair p writes (a_{π_r(v)} − a_v)/h: its task-independent part −a_v/h here, the task adds a_{π_r(v)}/h
    # (A2B_ENCODING, step_scale 1/h)
    step = -codes.vectors[v_of] * (1.0 / h)
    W2 = np.zeros((m, d))
    W2[0::2, layout.span("current_entity")], W2[1::2, layout.span("current_entity")] = step, -step
    mlp = MLP(W1, b1, W2, np.zeros(d))  # ONE MLP object, shared by the k layers
    layers = []
    for j in range(1, k + 1):
        targets, writes, gains = [{k: k - j}], [g], [1.0]
        if j >= 2:
            targets.append({k: k - j + 1})
            writes.append(g)
            gains.append(-1.0)
        layers.append(Layer(positional_heads(d, pos, targets, rel, writes, gains, attention, beta), mlp))
    model = hop_model(construction, N, k, codes, layout, E, Q, S, tuple(layers), pos, attention, lam)
    constants = hop_constants(k, attention, lam, k, beta=beta, theta=theta, h=h, step_scale=1.0 / h)
    return Family(model, promise, codes, constants, layout, A2B_ENCODING, N, R, k)


@task_builder_docstring("A2(b)", a2_depth_family)
def build_a2_depth(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    return assemble(a2_depth_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)
