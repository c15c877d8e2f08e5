"""A1, the associative-memory baseline (one MLP unit per fact; docs/theory.md, "A1"): its promise, its family
and its builder."""

from __future__ import annotations

import numpy as np

from georecall.constructions.building import (
    Construction,
    answer_count,
    assemble,
    nominal_geometry,
    resolve_codes,
    single_hop_meta,
)
from georecall.constructions.codes import Codes
from georecall.constructions.docstring_templates import nominal_promise_docstring, task_builder_docstring
from georecall.constructions.encoding import Family, TaskEncoding
from georecall.constructions.layout import Layout
from georecall.constructions.model import MLP, Layer, Model
from georecall.constructions.parts import (
    code_readout,
    relation_tagged_readout,
    uniform_gain_attention,
)
from georecall.errors import ConditionError
from georecall.theory.statements import (
    Condition,
    Promise,
    attention_constants,
    distinct_codes,
    exact_number,
    one_layer_params,
)
from georecall.theory.tasks import Task, check_positive_int

__all__ = ["A1_ENCODING", "a1_family", "a1_nominal_promise", "a1_promise", "build_a1"]


A1_ENCODING = TaskEncoding("relations", "out", "single", array="layers.0.mlp.W2")


def a1_promise(
    N: int,
    R: int,
    D: int,
    *,
    gap: float,
    distinct: tuple[float, float],
    lam: float = 1.0,
    gain: float = 2.0,
    n_out: int | None = None,
    norm_sq: float = 1.0,
    construction: str = "A1",
) -> Promise:
    """A1, associative memory (the baseline): one MLP unit per fact, frozen fact-independent embeddings.

    Sizes ``d = 2·D + R`` (subject code, one-hot relation, output block), ``m = N·R``. Unit ``(s, r)``
    computes ``ReLU(<a_s, y_S> + κ·y_{rel_r} − θ)`` with ``θ = c1|a|²`` and ``κ·c2 = c1|a|²(1 − μ)``. Firing
    condition: on query ``(s', ρ)`` its pre-activation is ``c1<a_s, a_s'> + c1|a|²(1−μ)[r = ρ] − c1|a|²``,
    which is ``h* = c1|a|²(1 − μ) > 0`` iff ``(s', ρ) = (s, r)`` and ``<= 0`` otherwise (``<a_s, a_s'> <=
    μ|a|²`` for ``s' ≠ s``): exactly one unit fires, given ``μ < 1``. It writes ``h*·a_{π_r(s)}``, so the
    margin is ``λ·h*·|a|²(1 − μ)``. Fact-specific parameters: the ``N·R·D`` answer-code entries of ``W2``
    (``W1`` only says which query each unit listens to).

    Parameters
    ----------
    N, R, D : int
        Entities, relations, code length.
    gap : float
        ``|a|²(1 − μ)``, the codes' squared norm times one minus their coherence.
    distinct : (float, float)
        The pair whose strict comparison decides that the codes are distinct (:func:`distinct_codes`).
    lam, gain, n_out, norm_sq
        As in :func:`g1_promise`.

    construction : str
        The construction's id (A1), named by the promise and its refusals; a spec reusing
        this promise passes its own.

    Returns
    -------
    Promise

    Raises
    ------
    InputError
        N, R or D not a positive integer.
    """
    N, R, D = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("D", D)))
    c1, _ = attention_constants(gain)
    d, m = 2 * D + R, N * R
    fired = c1 * gap
    conditions = (
        Condition("attention gain: g > 0", gain, 0.0),
        Condition("read-out scale: λ > 0", lam, 0.0),
        distinct_codes(*distinct),
    )
    return Promise(
        construction,
        "associative-memory baseline (one unit per fact)",
        d,
        m,
        one_layer_params(N, R, d, m, n_out),
        N * R * D,
        exact_number(lam * fired * gap),
        conditions,
        logit_scale=lam * fired * norm_sq,
    )


@nominal_promise_docstring("A1", a1_promise)
def a1_nominal_promise(N: int, R: int, k: int = 1) -> Promise:
    D, geometry = nominal_geometry(N)
    return a1_promise(N, R, D, **geometry)


def a1_family(
    N: int,
    R: int,
    codes: Codes | str = "binary",
    *,
    attributes: str = "shared",
    D: int | None = None,
    lam: float = 1.0,
    gain: float = 2.0,
    integer: bool = False,
    rng: np.random.Generator | int | None = None,
    construction: str = "A1",
) -> Family:
    """A1: associative memory, the view the paper argues against: facts live in MLP units, one per fact.

    Construction. Residual layout: a subject block ``S`` (D), one-hot relation coordinates ``rel_r`` (R), an
    output block ``O`` (D); ``d = 2·D + R``. Embeddings are fact-independent: ``e_s = J_S a_s``,
    ``q_r = 1_{rel_r}``. Unit ``(s, r)`` (``m = N·R``): ``ReLU(<a_s, y_S> + κ·y_{rel_r} − θ)`` with
    ``θ = c1·|a|²`` and ``κ = c1·|a|²(1 − μ)/c2``; it writes ``a_{π_r(s)}`` into O. ``U_j = λ·J_O a_j``.

    Firing condition (exact). On query ``(s', ρ)`` the pre-activation of unit ``(s, r)`` is
    ``c1·<a_s, a_s'> + c1|a|²(1 − μ)·[r = ρ] − c1|a|²``: it equals ``h* = c1|a|²(1 − μ)`` when
    ``(s', ρ) = (s, r)`` and is ``<= 0`` otherwise, because ``<a_s, a_s'> <= μ|a|²`` for ``s' ≠ s``.
    So exactly one unit fires, the output is ``h*·a_{π_ρ(s')}`` and the margin is ``λ·h*·|a|²(1 − μ) > 0``
    when the codes are distinct. With ±1 codes and g = 2, ``h* = 2(|a|² − max_{i≠j}<a_i, a_j>)`` is an
    integer.

    The family is built without a task: W2 is zero on O (:class:`~georecall.constructions.encoding.Family`);
    :func:`build_a1` / :func:`assemble` write ``a_{π_r(s)}`` into unit ``(s, r)``'s row there.

    Parameters
    ----------
    N, R : int
        Entities and relations.
    codes : {"binary", "sign", "gaussian"} or Codes
        The codebook, or its kind.
    attributes : {"shared", "disjoint"}
        The answer ids' variant.
    D : int, optional
        Code length (default as in :func:`g1_family`).
    lam : float
        The read-out scale λ.
    gain : float
        The attention gain g.
    integer : bool
        ±1 codes at integer scale, so that every weight is an integer (integer mode).
    rng : numpy.random.Generator or int or None
        The random source of sign and Gaussian codes.

    construction : str
        The construction's id (A1), named by its promise, refusals and metadata; a spec
        reusing this family passes its own.

    Returns
    -------
    Family
        The model with W2 zero on O, its promise (:func:`a1_promise`), codes,
        constants, layout and encoding (:data:`A1_ENCODING`).

    Raises
    ------
    ConditionError
        Outside the conditions: codes not distinct; integer mode with non-integer constants.
    InputError
        A codebook with fewer than N codes, or one that contradicts D or integer mode.
    """
    n_answers = answer_count(N, R, attributes)
    codes = resolve_codes(N, codes, D, rng, integer)
    D = codes.D
    c1, c2 = attention_constants(gain)
    promise = a1_promise(N, R, D, gap=codes.gap, distinct=(codes.distinct_lhs, codes.distinct_rhs), lam=lam,
                         gain=gain, n_out=n_answers, norm_sq=codes.norm_sq,
                         construction=construction).require()
    integral = float(lam).is_integer() and float(gain).is_integer() and gain % 2 == 0
    if integer and not (codes.integer and integral):
        raise ConditionError("integer mode needs ±1 codes, integer λ and an even gain g")
    layout = Layout()
    S = layout.add("subject", D)
    rel = layout.add("relations", R)
    out = layout.add("out", D)
    d, m = layout.d, N * R
    gap = codes.gap  # |a|²(1 − μ); an exact integer for ±1 codes at integer scale
    theta, kappa = c1 * codes.norm_sq, c1 * gap / c2

    E = np.zeros((N, d))
    E[:, S] = codes.vectors[:N]
    Q = np.zeros((R, d))
    Q[np.arange(R), rel] = 1.0
    # unit index u = r * N + s listens to (s, r) and writes the code of π_r(s)
    W1 = np.zeros((d, m))
    W1[S, :] = np.tile(codes.vectors[:N].T, (1, R))
    W1[rel[:, None], np.arange(m).reshape(R, N)] = kappa
    W2 = np.zeros((m, d))  # the declared rows (unit r·N + s writes a_{π_r(s)} on O) are left to the task
    if attributes == "disjoint":  # the relation coordinate (value c2) tags the asked relation
        readout = relation_tagged_readout(codes, N, R, d, out, rel, lam, c1 * gap * gap / c2)
    else:
        readout = code_readout(codes, N, d, out, lam)
    constants = {
        "lambda": lam,
        "gain": gain,
        "c1": c1,
        "c2": c2,
        "theta": theta,
        "kappa": kappa,
        "h_star": c1 * gap,
    }
    model = Model(
        entity_embedding=E,
        relation_embedding=Q,
        **readout,
        layers=(Layer(uniform_gain_attention(d, gain), MLP(W1, np.full(m, -theta), W2, np.zeros(d))),),
        meta=single_hop_meta(construction, attributes, codes, layout, integer=integer, **constants),
    )
    return Family(model, promise, codes, constants, layout, A1_ENCODING, N, R, 1, attributes)


@task_builder_docstring("A1", a1_family)
def build_a1(task: Task, codes: Codes | str = "binary", **options) -> Construction:
    return assemble(a1_family(task.N, task.R, codes, attributes=task.attributes, **options), task)
