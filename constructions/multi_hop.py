"""k-hop constructions (docs/theory.md, "G2", "A2(a)", "A2(b)", "C1"): G2 path blocks, A2 associative width
(a) and depth (b), C1 chain-of-thought.

Queries are the tokens ``⟨r_k, ..., r_1, s⟩``: ``r_j`` sits at position ``k − j`` and the subject at position
k. All four fetch relation tokens with *positional* heads: the position embedding is one-hot
(``P[t] = 1_{pos_t}``) and a head's score is ``β·[u = target(q)]``, so it puts weight ``1 − ε`` on its target,
``ε = n/(e^β + n)`` with n other visible positions. Each builder's docstring states the leakage inequality
that keeps it exact, and its promise (``theory/statements.py``) carries it; the default β meets it with room.
``attention="hard"`` builds the ε = 0 idealization, and is labelled as such wherever it is reported.

The builders allocate what they are asked for: the memory a build and its check need is estimated once,
before the build, by ``georecall.memory.check_estimate`` from the registry's spec, and refused over the
run's :class:`~georecall.memory.Budget` (``verify.checking.run.run_check`` and every command do so).
"""

from __future__ import annotations

import numpy as np

from georecall.constructions.codes import Codes
from georecall.constructions.encoding import Family, TaskEncoding
from georecall.constructions.layout import Layout
from georecall.constructions.model import MLP, Layer, Model
from georecall.constructions.parts import (
    code_readout,
    gated_selector,
    one_hot_positions,
    positional_heads,
)
from georecall.constructions.single_hop import Construction, assemble, resolve_codes
from georecall.errors import InputError
from georecall.theory.statements import (
    a2_depth_promise,
    a2_width_promise,
    beta_for_leakage,
    c1_promise,
    g2_promise,
    softmax_leakage,
)
from georecall.theory.tasks import Task, check_positive_int, paths
from georecall.theory.tokens import chains, multi_hop_queries  # noqa: F401  (re-exported for old imports)

__all__ = ["A2A_ENCODING", "A2B_ENCODING", "C1_ENCODING", "G2_ENCODING", "a2_depth_family", "a2_width_family",
           "build_a2_depth", "build_a2_width", "build_c1", "build_g2", "c1_family", "g2_family"]

G2_ENCODING = TaskEncoding("paths", "path_blocks", "paths")
A2A_ENCODING = TaskEncoding("paths", "out", "paths", array="layers.0.mlp.W2")
C1_ENCODING = TaskEncoding("relations", "blocks", "cot")
A2B_ENCODING = TaskEncoding("relations", "current_entity", "paths", array="steps")


def _check_attention(attention: str) -> None:
    if attention not in ("softmax", "hard"):
        raise InputError(f"attention must be 'softmax' or 'hard' (an idealization), got {attention!r}")


def _shared(attributes: str) -> None:
    if attributes != "shared":
        raise InputError(f"the multi-hop constructions answer shared attributes only, got {attributes!r}")


def _geometry(codes: Codes) -> dict:
    return {"gap": codes.gap, "distinct": (codes.distinct_lhs, codes.distinct_rhs), "norm_sq": codes.norm_sq}


def _meta(construction: str, k: int, codes: Codes, layout: Layout, attention: str) -> dict:
    return {"construction": construction, "k": k, "codes": codes.kind, "D": codes.D, "attention": attention,
            "layout": layout.as_dict()}


def _hop_heads(d: int, pos: np.ndarray, groups: np.ndarray, k: int, gate: float, attention: str,
               beta: float | None):
    """The k positional heads of G2 and A2(a): head j fetches ``r_j`` (position ``k − j``) from the last
    position into gate group ``G_j`` with gain G (a relation token carries its identity in group 1's
    coordinates)."""
    return positional_heads(d, pos, [{k: k - j} for j in range(1, k + 1)], groups[0],
                            [groups[j] for j in range(k)], [gate] * k, attention, beta)


def _model(name: str, N: int, k: int, codes: Codes, layout: Layout, E: np.ndarray, Q: np.ndarray,
           U_out: np.ndarray, layers: tuple, pos: np.ndarray, attention: str, lam: float) -> Model:
    """The Model (one-hot positions, code read-out of N answers on ``U_out``)."""
    d = layout.d
    return Model(E, Q, layers=layers, position_embedding=one_hot_positions(pos, d),
                 meta=_meta(name, k, codes, layout, attention), **code_readout(codes, N, d, U_out, lam))


def _constants(k: int, attention: str, lam: float, leakage_others: int, **constants) -> dict:
    return {"k": k, **constants, "attention": attention,
            "leakage": softmax_leakage(constants.get("beta"), leakage_others), "lambda": lam}


def _default_beta(attention: str, beta: float | None, eps: float, others: int) -> float | None:
    """The β a builder uses: None for hard attention, else the given β or the one meeting the leakage
    target."""
    if attention == "hard":
        return None
    return beta_for_leakage(eps, others) if beta is None else float(beta)


def build_g2(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    """G2 on ``task``: ``assemble(g2_family(task.N, task.R, k, codes, ...), task)`` (:func:`g2_family` states
    the construction; options as there).

    Returns
    -------
    Construction
    """
    return assemble(g2_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)


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
    k : int
        Hops, >= 1.
    codes : Codes or str
        A codebook, or its kind ("binary", "sign", "gaussian").
    D : int, optional
        Code length (default: the kind's).
    gate : float, optional
        Gate constant G (default: the one in the leakage inequality above).
    beta : float, optional
        Softmax inverse temperature (default: the one meeting the leakage target); ignored for hard
        attention.
    attention : str
        "softmax", or "hard" (the ε = 0 idealization, labelled as such).
    lam : float
        Read-out scale λ.
    rng : numpy.random.Generator, int or None
        Random codes' stream.

    Returns
    -------
    Family
        The model without the declared table, its promise (checked: ``Promise.require``), codes, constants,
        layout and encoding.

    Raises
    ------
    InputError
        ``k`` is not a whole number >= 1, an unknown attention kind, bad codes.
    ConditionError
        The constants violate the construction's conditions (the promise's ``require``).
    """
    k = check_positive_int("k", k)
    _check_attention(attention)
    _shared(attributes)
    codes = resolve_codes(N, codes, D, rng, False)
    D, n_paths, T = codes.D, R**k, k + 1
    gate = 2.0 * codes.max_abs if gate is None else float(gate)
    l1, gap = codes.l1, codes.gap
    beta = _default_beta(attention, beta, gap / (4 * k * gate * l1) if gap > 0 else 0.25, k)
    promise = g2_promise(
        N, R, k, D, **_geometry(codes), max_abs=codes.max_abs, max_l1=l1, gate=gate, beta=beta, lam=lam
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
    heads = _hop_heads(d, pos, groups, k, gate, attention, beta)
    path_rows = paths(R, k)  # columns r_k..r_1: hop j's relation is column k - j
    mlp = gated_selector(
        d, blocks, [groups[j - 1][path_rows[:, k - j]] for j in range(1, k + 1)], out, k * gate
    )
    model = _model("G2", N, k, codes, layout, E, Q, out, (Layer(heads, mlp),), pos, attention, lam)
    return Family(model, promise, codes, _constants(k, attention, lam, k, gate=gate, beta=beta), layout,
                  G2_ENCODING, N, R, k)


def build_a2_width(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    """A2(a) on ``task``: ``assemble(a2_width_family(task.N, task.R, k, codes, ...), task)``
    (:func:`a2_width_family` states the construction; options as there).

    Returns
    -------
    Construction
    """
    return assemble(a2_width_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)


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
    k : int
        Hops, >= 1.
    codes : Codes or str
        A codebook, or its kind ("binary", "sign", "gaussian").
    D : int, optional
        Code length (default: the kind's).
    gate : float, optional
        Gate constant G (default: the one in the leakage inequality above).
    beta : float, optional
        Softmax inverse temperature (default: the one meeting the leakage target); ignored for hard
        attention.
    attention : str
        "softmax", or "hard" (the ε = 0 idealization, labelled as such).
    lam : float
        Read-out scale λ.
    rng : numpy.random.Generator, int or None
        Random codes' stream.

    Returns
    -------
    Family
        The model without the declared table, its promise (checked: ``Promise.require``), codes, constants,
        layout and encoding.

    Raises
    ------
    InputError
        ``k`` is not a whole number >= 1, an unknown attention kind, bad codes.
    ConditionError
        The constants violate the construction's conditions (the promise's ``require``).
    """
    k = check_positive_int("k", k)
    _check_attention(attention)
    _shared(attributes)
    codes = resolve_codes(N, codes, D, rng, False)
    D, T, n_paths = codes.D, k + 1, R**k
    gap = codes.gap
    gate = 2.0 * gap if gate is None else float(gate)
    beta = _default_beta(attention, beta, 1 / (4 * k), k)
    promise = a2_width_promise(N, R, k, D, **_geometry(codes), gate=gate, beta=beta, lam=lam).require()
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
    heads = _hop_heads(d, pos, groups, k, gate, attention, beta)
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
    model = _model("A2a", N, k, codes, layout, E, Q, out, layers, pos, attention, lam)
    return Family(model, promise, codes, _constants(k, attention, lam, k, gate=gate, beta=beta), layout,
                  A2A_ENCODING, N, R, k)


def build_a2_depth(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    """A2(b) on ``task``: ``assemble(a2_depth_family(task.N, task.R, k, codes, ...), task)``
    (:func:`a2_depth_family` states the construction; options as there).

    Returns
    -------
    Construction
    """
    return assemble(a2_depth_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)


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
    k : int
        Hops, >= 1.
    codes : Codes or str
        A codebook, or its kind ("binary", "sign", "gaussian").
    D : int, optional
        Code length (default: the kind's).
    beta : float, optional
        Softmax inverse temperature (default: the one meeting the leakage target); ignored for hard
        attention.
    attention : str
        "softmax", or "hard" (the ε = 0 idealization, labelled as such).
    lam : float
        Read-out scale λ.
    rng : numpy.random.Generator, int or None
        Random codes' stream.

    Returns
    -------
    Family
        The model with the task-independent part of W2, its promise (checked: ``Promise.require``), codes,
        constants (``step_scale`` = 1/h) and layout, and :data:`A2B_ENCODING`.

    Raises
    ------
    InputError
        ``k`` is not a whole number >= 1, an unknown attention kind, bad codes.
    ConditionError
        The constants violate the construction's conditions (the promise's ``require``).
    """
    k = check_positive_int("k", k)
    _check_attention(attention)
    _shared(attributes)
    codes = resolve_codes(N, codes, D, rng, False)
    D, T = codes.D, k + 1
    beta = _default_beta(attention, beta, 1 / 16, k)
    promise = a2_depth_promise(N, R, k, D, **_geometry(codes), beta=beta, lam=lam).require()
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
    model = _model("A2b", N, k, codes, layout, E, Q, S, tuple(layers), pos, attention, lam)
    constants = _constants(k, attention, lam, k, beta=beta, theta=theta, h=h, step_scale=1.0 / h)
    return Family(model, promise, codes, constants, layout, A2B_ENCODING, N, R, k)


def build_c1(task: Task, k: int, codes: Codes | str = "binary", **options) -> Construction:
    """C1 on ``task``: ``assemble(c1_family(task.N, task.R, k, codes, ...), task)`` (:func:`c1_family`
    states the construction; options as there).

    Returns
    -------
    Construction
    """
    return assemble(c1_family(task.N, task.R, k, codes, attributes=task.attributes, **options), task)


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
    k : int
        Hops, >= 1.
    codes : Codes or str
        A codebook, or its kind ("binary", "sign", "gaussian").
    D : int, optional
        Code length (default: the kind's).
    gate : float, optional
        Gate constant G (default: the one in the leakage inequality above).
    beta : float, optional
        Softmax inverse temperature (default: the one meeting the leakage target); ignored for hard
        attention.
    attention : str
        "softmax", or "hard" (the ε = 0 idealization, labelled as such).
    lam : float
        Read-out scale λ.
    rng : numpy.random.Generator, int or None
        Random codes' stream.

    Returns
    -------
    Family
        The model without the declared table, its promise (checked: ``Promise.require``), codes, constants,
        layout and encoding.

    Raises
    ------
    InputError
        ``k`` is not a whole number >= 1, an unknown attention kind, bad codes.
    ConditionError
        The constants violate the construction's conditions (the promise's ``require``).
    """
    k = check_positive_int("k", k)
    _check_attention(attention)
    _shared(attributes)
    codes = resolve_codes(N, codes, D, rng, False)
    D, T = codes.D, 2 * k
    gate = 2.0 * codes.max_abs if gate is None else float(gate)
    l1, gap = codes.l1, codes.gap
    beta = _default_beta(attention, beta, gap / (4 * gate * l1) if gap > 0 else 0.25, T - 1)
    promise = c1_promise(
        N, R, k, D, **_geometry(codes), max_abs=codes.max_abs, max_l1=l1, gate=gate, beta=beta, lam=lam
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
    model = _model("C1", N, k, codes, layout, E, Q, out, (Layer(head, mlp),), pos, attention, lam)
    return Family(model, promise, codes, _constants(k, attention, lam, T - 1, gate=gate, beta=beta), layout,
                  C1_ENCODING, N, R, k)
