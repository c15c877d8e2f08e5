"""G2, k hops in one layer without chain-of-thought: one block per relation path (docs/theory.md, "G2"): its
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
    hop_heads,
    hop_model,
)
from georecall.constructions.layout import Layout
from georecall.constructions.model import Layer
from georecall.constructions.parts import (
    gated_selector,
)
from georecall.theory.statements import (
    Condition,
    Promise,
    distinct_codes,
    model_params,
    softmax_leakage,
)
from georecall.theory.tasks import Task, check_positive_int, paths

__all__ = ["G2_ENCODING", "build_g2", "g2_family", "g2_nominal_promise", "g2_promise"]


G2_ENCODING = TaskEncoding("paths", "path_blocks", "paths")


def g2_promise(
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
    construction: str = "G2",
) -> Promise:
    """G2, k hops without CoT in one layer, by path blocks (docs/theory.md, "G2").

    Sizes ``d = R^k·D + k·R + D + (k + 1)`` (path blocks, k gate groups, output, positions), ``m = 2·R^k·D``.
    Head j puts weight ``>= 1 − ε`` on ``r_j`` (``ε = k/(e^β + k)``), so gate ``G_j[w_j]`` is in ``[G(1 − ε),
    G]`` when ``w_j = r_j`` and in ``[0, G·ε]`` otherwise. The AND unit ``(w, i, σ)`` with bias ``−k·G`` is
    then ``σ·a_i − δ`` (``0 <= δ <= k·G·ε``) for the asked path and ``<= A − G(1 − ε) < 0`` for every other
    path. The output o satisfies ``|o − a_ans|_∞ <= δ``, so the margin is at least ``λ·(|a|²(1 − μ) −
    2·k·G·ε·L1)`` with ``L1 = max_j |a_j|_1``. Leakage inequalities: ``G(1 − ε) > A`` and ``|a|²(1 − μ) >
    2·k·G·ε·L1``.

    Parameters
    ----------
    N, R, k, D : int
        Entities, relations, hops, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    max_abs : float
        A, the codes' largest absolute entry.
    max_l1 : float
        L1, the codes' largest l1 norm.
    gate : float
        G, the gate constant.
    beta : float or None
        The heads' inverse temperature (None: hard attention, ε = 0).
    lam, norm_sq
        As in :func:`g1_promise`.

    construction : str
        The construction's id (G2), named by the promise and its refusals; a spec reusing
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
    paths = R**k
    d, m = paths * D + k * R + D + (k + 1), 2 * paths * D
    conditions = (
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
        Condition("gate vs leakage: G(1 − ε) > max|a|", gate * (1 - eps), max_abs),
        Condition("margin vs leakage: |a|²(1 − μ) > 2·k·G·ε·max|a|_1", gap, 2 * k * gate * eps * max_l1),
    )
    T = k + 1
    params = model_params(N, R, d, T, [("softmax", k, T, R, m)])
    return Promise(
        construction,
        "k hops, no CoT, one layer: path blocks (exponential in k)",
        d,
        m,
        params,
        N * paths * D,
        lam * (gap - 2 * k * gate * eps * max_l1),
        conditions,
        logit_scale=lam * (norm_sq + k * gate * max_l1),
    )


@nominal_promise_docstring("G2", g2_promise)
def g2_nominal_promise(N: int, R: int, k: int) -> Promise:
    D, geometry = nominal_geometry(N)
    return g2_promise(
        N, R, k, D, **geometry, max_abs=D**-0.5, max_l1=D**0.5, gate=2 * D**-0.5, beta=None
    )


@hop_family_docstring
def g2_family(
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
    construction: str = "G2",
) -> Family:
    """G2: k hops without CoT in one layer, by one block per relation path (exponential in k).

    Construction. Coordinates: a block ``B_w`` of size D for each path ``w = (r_k..r_1) ∈ [R]^k``, k gate
    groups ``G_1..G_k`` of R coordinates, an output block O (D), one-hot positions (k + 1):
    ``d = R^k·D + k·R + D + k + 1``.
    ``e_s = Σ_w J_{B_w} a_{π_w(s)}``; a relation token r is ``1_{G_1[r]}`` (its identity, in group 1's
    coordinates; the subject's position has none there). Head j (of k) attends from the last position to
    position ``k − j`` (where ``r_j`` is) and writes ``G·`` that one-hot into group ``G_j``. AND unit
    ``(w, i, σ)``, ``m = 2·R^k·D``: ``ReLU(σ·y_{B_w,i} + Σ_j y_{G_j[w_j]} − k·G)``, written as ``σ`` into
    ``O_i``. ``U_j = λ·J_O a_j``.

    Leakage inequality (exactness with softmax attention). With ``ε = k/(e^β + k)``: ``G(1 − ε) > A`` shuts
    every unit of a wrong path, and ``|a|²(1 − μ) > 2·k·G·ε·|a|_1`` keeps the right answer on top despite the
    shrinkage ``δ <= k·G·ε`` of the right path's units. Defaults: ``G = 2A`` and the β with
    ``2·k·G·ε·|a|_1 = |a|²(1 − μ)/2`` (half the margin survives).

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
    D, n_paths, T = codes.D, R**k, k + 1
    gate = 2.0 * codes.max_abs if gate is None else float(gate)
    l1, gap = codes.l1, codes.gap
    beta = default_beta(attention, beta, gap / (4 * k * gate * l1) if gap > 0 else 0.25, k)
    promise = g2_promise(
        N, R, k, D, **code_geometry(codes), max_abs=codes.max_abs, max_l1=l1, gate=gate, beta=beta, lam=lam,
        construction=construction
    ).require()

    layout = Layout()
    blocks = layout.add("path_blocks", n_paths, D)
    groups = layout.add("gate_groups", k, R)  # groups[j-1] = G_j
    out = layout.add("out", D)
    pos = layout.add("positions", T)
    d = layout.d

    E = np.zeros((0, d))  # the declared table, left out: the task adds e_s = Σ_w J_{B_w} a_{π_w(s)}
    Q = np.zeros((R, d))
    Q[np.arange(R), groups[0]] = 1.0
    heads = hop_heads(d, pos, groups, k, gate, attention, beta)
    path_rows = paths(R, k)  # columns r_k..r_1: hop j's relation is column k - j
    mlp = gated_selector(
        d, blocks, [groups[j - 1][path_rows[:, k - j]] for j in range(1, k + 1)], out, k * gate
    )
    model = hop_model(construction, N, k, codes, layout, E, Q, out, (Layer(heads, mlp),), pos, attention, lam)
    return Family(model, promise, codes, hop_constants(k, attention, lam, k, gate=gate, beta=beta), layout,
                  G2_ENCODING, N, R, k)


@task_builder_docstring("G2", g2_family)
def build_g2(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    return assemble(g2_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)
