"""A2(a), associative width: one MLP unit per k-hop fact, in one layer (docs/theory.md, "A2(a)"): its promise,
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
    hop_heads,
    hop_model,
)
from georecall.constructions.layout import Layout
from georecall.constructions.model import MLP, Layer
from georecall.theory.statements import (
    Condition,
    Promise,
    distinct_codes,
    model_params,
    softmax_leakage,
)
from georecall.theory.tasks import Task, check_positive_int, paths

__all__ = [
    "A2A_ENCODING",
    "a2_width_family",
    "a2_width_nominal_promise",
    "a2_width_promise",
    "build_a2_width",
]


A2A_ENCODING = TaskEncoding("paths", "out", "paths", array="layers.0.mlp.W2")


def a2_width_promise(
    N: int,
    R: int,
    k: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    gate: float,
    beta: float | None,
    lam: float = 1.0,
    norm_sq: float = 1.0,
    construction: str = "A2a",
) -> Promise:
    """A2(a), k hops without CoT in one layer, one MLP unit per k-hop fact (``m = N·R^k``).

    Sizes ``d = D + k·R + D + (k + 1)`` (subject code, gate groups, output, positions). Gates as in G2. Unit
    ``(s, w)``: ``ReLU(<a_s, x_S> + Σ_j y_{G_j, w_j} − θ)`` with ``θ = |a|² + k·G − h*``, ``h* = |a|²(1 −
    μ)``: ``h* − δ`` (``δ <= k·G·ε``) on its own query, ``<= h* − G(1 − ε)`` on another path, ``<= 0`` on
    another subject. It writes ``a_{π_w(s)}``, so the margin is at least ``λ·(h* − k·G·ε)·h*``. Leakage
    inequalities: ``G(1 − ε) >= h*`` and ``h* > k·G·ε``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    gate, beta, lam, norm_sq
        As in :func:`g2_promise`.

    construction : str
        The construction's id (A2a), named by the promise and its refusals; a spec reusing
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
    d, m = 2 * D + k * R + (k + 1), N * R**k
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("gate vs leakage: G(1 − ε) >= |a|²(1 − μ)", gate * (1 - eps), gap, strict=False),
        Condition("firing vs leakage: |a|²(1 − μ) > k·G·ε", gap, k * gate * eps),
    )
    params = model_params(N, R, d, k + 1, [("softmax", k, k + 1, R, m)])
    return Promise(
        construction,
        "k hops, no CoT, one layer: one MLP unit per k-hop fact",
        d,
        m,
        params,
        N * R**k * D,
        lam * (gap - k * gate * eps) * gap,
        conditions,
        logit_scale=lam * (norm_sq + k * gate) * norm_sq,
    )


@nominal_promise_docstring("A2(a)", a2_width_promise)
def a2_width_nominal_promise(N: int, R: int, k: int) -> Promise:
    D, geometry = nominal_geometry(N)
    return a2_width_promise(N, R, k, D, **geometry, gate=2 * geometry["gap"], beta=None)


@hop_family_docstring
def a2_width_family(
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
    construction: str = "A2a",
) -> Family:
    """A2(a): k hops without CoT in one layer, one MLP unit per k-hop fact (``m = N·R^k``).

    Construction. Coordinates: subject block S (D), k gate groups (R each), output O (D), positions (k + 1):
    ``d = 2·D + k·R + k + 1``; fact-independent embeddings ``e_s = J_S a_s``, relation token ``1_{G_1[r]}``;
    the same k positional heads as G2. Unit ``(s, w)``: ``ReLU(<a_s, y_S> + Σ_j y_{G_j[w_j]} − θ)``,
    ``θ = |a|² + k·G − h*``, ``h* = |a|²(1 − μ)``; it writes ``a_{π_w(s)}`` into O.

    Leakage inequality. With ``ε = k/(e^β + k)``: ``G(1 − ε) >= h*`` (wrong paths stay off) and ``h* > k·G·ε``
    (the right unit fires with ``h* − δ > 0``). Defaults ``G = 2h*`` and ``ε = 1/(4k)``.

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
    D, T, n_paths = codes.D, k + 1, R**k
    gap = codes.gap
    gate = 2.0 * gap if gate is None else float(gate)
    beta = default_beta(attention, beta, 1 / (4 * k), k)
    promise = a2_width_promise(N, R, k, D, **code_geometry(codes), gate=gate, beta=beta, lam=lam,
                               construction=construction).require()
    layout = Layout()
    S = layout.add("subject", D)
    groups = layout.add("gate_groups", k, R)
    out = layout.add("out", D)
    pos = layout.add("positions", T)
    d, m = layout.d, N * n_paths
    E = np.zeros((N, d))
    E[:, S] = codes.vectors[:N]
    Q = np.zeros((R, d))
    Q[np.arange(R), groups[0]] = 1.0
    heads = hop_heads(d, pos, groups, k, gate, attention, beta)
    # unit u = path·N + s listens to (s, path) and writes the code of π_path(s)
    path_rows = paths(R, k)
    W1 = np.zeros((d, m))
    W1[S] = np.tile(codes.vectors[:N].T, (1, n_paths))
    unit = np.arange(m).reshape(n_paths, N)
    for j in range(1, k + 1):
        W1[groups[j - 1][path_rows[:, k - j]][:, None], unit] = 1.0
    W2 = np.zeros((m, d))  # the declared rows (unit w·N + s writes a_{π_w(s)} on O) are left to the task
    b1 = np.full(m, -(codes.norm_sq + k * gate - gap))
    layers = (Layer(heads, MLP(W1, b1, W2, np.zeros(d))),)
    model = hop_model(construction, N, k, codes, layout, E, Q, out, layers, pos, attention, lam)
    return Family(model, promise, codes, hop_constants(k, attention, lam, k, gate=gate, beta=beta), layout,
                  A2A_ENCODING, N, R, k)


@task_builder_docstring("A2(a)", a2_width_family)
def build_a2_width(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    return assemble(a2_width_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)
