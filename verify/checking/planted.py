"""Planted counterexamples: constructions broken so that sampled tasks pass and some task fails.

Each is a real construction (G1, G2 or C1, built by its registered builder) with ONE extra MLP unit, a
*pair detector*: a task-independent unit that reads two slots of the entity at the read position, the asked
relation's (or path's) slot ``b_a`` and another slot ``b_b``, and the gate coordinates of ``b_a``,

    ReLU(κ·(<a_{j_a}, y_{B_{b_a}}> + <a_{j_b}, y_{B_{b_b}}>) + Σ_gates y_g − θ),

with θ set so that it fires only when ``b_a`` is asked and the two slots hold exactly the codes
``(j_a, j_b)`` (one mismatch costs ``κ·c1·|a|²(1 − μ)``, half of which is the slack; a shut gate costs
more than the rest). When it fires it writes ``−3·c1·a_{j_a}/h`` per unit of its value h into the output
block, so that block holds about ``−2·c1·a_{j_a}`` and the answer loses. A random task has an entity with
that pair of attributes with probability 1/N (``π_{b_b}(π_{b_a}^{-1}(j_a)) = j_b``), so the seeded task and a
few hundred random tasks pass at N = 1024 while some task fails: the failure only a "for every task"
argument sees.

The detector reads slot contents through fixed weights and every other array is the base construction's, so
each declares the base's task encoding truthfully; the promise is the base's with m + 1 units.

:data:`ADVERSARIAL` holds five more, written as a user would to fool a certifier that samples the builder
(each once came out CERTIFIED): a builder that changes W1/b1 only on a rare task (:data:`RARE_TASK`), one
that derives b2 from the entity table it formed (:data:`DERIVED_FROM_TABLE`), ones that change a field
outside the arrays — the read-out's columns (:data:`READOUT_COLUMNS`), an attention temperature
(:data:`TEMPERATURE`) —, an honest family whose hard-attention scores tie in float64 but not exactly
(:data:`HARD_TIE`), and an honest family promising margin 1000 at logit scale 1e20 (:data:`HUGE_SCALE`).
None may be CERTIFIED: each is REFUTED with a witness the ordinary checker fails, refused naming the field
that depends on the task, or UNKNOWN saying what was (not) established (tests/test_certify.py).

Facts stored in an MLP cannot be broken rarely (a unit's firing is task-independent and its effect linear in
the written codes), so their counterexamples fail most tasks, the seeded one too: :data:`FOREIGN_A1` and
:data:`FOREIGN_A2A` (a unit that also fires on a foreign query) and :data:`LEAKY_A2B` (an A2(b) pair that
fires on its neighbours' states, so the state leaves the codebook: the layered argument fails and certify's
branching witness search must find the task). They are the negative controls of the A1, A2(a) and A2(b)
rows of ``georecall verify``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from georecall.constructions import registry
from georecall.constructions.encoding import Family
from georecall.constructions.model import MLP, Attention, Layer, Model
from georecall.constructions.registry import ConstructionSpec
from georecall.constructions.single_hop import Construction
from georecall.errors import ConditionError
from georecall.theory.tasks import Task, paths

__all__ = ["ADVERSARIAL", "DERIVED_FROM_TABLE", "FOREIGN_A1", "FOREIGN_A2A", "HARD_TIE", "HUGE_SCALE",
           "LEAKY_A2B", "PLANTED", "RARE_TASK", "READOUT_COLUMNS", "TEMPERATURE", "plant_pair_detector",
           "rare_task"]


def plant_pair_detector(built: Construction, *, blocks_name: str, slot_a: int, slot_b: int, code_a: int,
                        code_b: int, gates: np.ndarray, gate_value: float, c1: float, eps: float,
                        integer: bool) -> Construction:
    """``built`` with one pair-detector unit appended (module docstring).

    Parameters
    ----------
    built : Construction
        The base construction (G1, G2 or C1).
    blocks_name : str
        Its layout's slot blocks ("blocks" or "path_blocks").
    slot_a, slot_b : int
        The asked slot and the other slot the detector reads.
    code_a, code_b : int
        The codes that make it fire (the builders below take them modulo N).
    gates : array of int
        Residual coordinates that hold ``gate_value`` (times at least ``1 − eps``) exactly when ``slot_a`` is
        asked, and at most ``gate_value·eps`` otherwise.
    gate_value : float
        The open gate's value.
    c1 : float
        The scale at which the entity's blocks reach the MLP.
    eps : float
        Leakage bound of the heads that write the gates (0 for G1's uniform attention).
    integer : bool
        Round the constants to integers (integer mode).

    Returns
    -------
    Construction
    """
    model, codes, layout = built.model, built.codes, built.layout
    assert layout is not None
    blocks = layout[blocks_name]
    out = layout["out"]
    a = codes.vectors
    gap, norm = codes.gap, codes.norm_sq
    d = model.d
    w = np.zeros(d)
    w[blocks[slot_a]] = a[code_a]
    w[blocks[slot_b]] = a[code_b]
    w[np.asarray(gates)] = 1.0
    n_gates = int(np.asarray(gates).size)
    theta = c1 * (2 * norm - gap / 2) + n_gates * gate_value * (1 - eps)
    fired = c1 * gap / 2  # the least value it takes when it fires
    damage = -3 * c1 * a[code_a] / fired  # the output block then holds about −2·c1·a_{j_a}
    if integer:
        theta, damage = float(math.floor(theta)), np.sign(damage) * np.ceil(np.abs(damage))
    mlp = model.layers[0].mlp
    assert mlp is not None
    W2_row = np.zeros((1, d))
    W2_row[0, out] = damage
    planted = MLP(np.hstack([mlp.W1, w[:, None]]), np.append(mlp.b1, -theta), np.vstack([mlp.W2, W2_row]),
                  mlp.b2)
    new = Model(model.entity_embedding, model.relation_embedding, model.unembedding,
                (Layer(model.layers[0].attention, planted),), model.position_embedding,
                meta={**model.meta, "planted": "pair detector"}, readout_columns=model.readout_columns)
    promise = dataclasses.replace(built.promise, m=built.promise.m + 1,
                                  params=built.promise.params + 2 * d + 1)
    return Construction(new, promise, codes, {**built.constants, "planted_theta": theta}, layout)


def _g1_planted(slot_a: int, slot_b: int, code_a: int, code_b: int):
    def build(task: Task, k: int = 1, **options) -> Construction:
        built = registry.get("G1").builder(task, k, **options)
        c = built.constants
        gates = built.layout["gates"][[slot_a]]  # type: ignore[index]
        return plant_pair_detector(built, blocks_name="blocks", slot_a=slot_a, slot_b=slot_b,
                                   code_a=code_a % task.N, code_b=code_b % task.N, gates=gates,
                                   gate_value=c["c2"] * c["gate"], c1=c["c1"], eps=0.0,
                                   integer=bool(options.get("integer")))
    return build


def _g2_planted(path_a: int, path_b: int, code_a: int, code_b: int):
    def build(task: Task, k: int = 1, **options) -> Construction:
        built = registry.get("G2").builder(task, k, **options)
        layout = built.layout
        assert layout is not None
        rows = paths(task.R, k)[path_a]  # (r_k..r_1)
        groups = layout["gate_groups"]
        gates = np.array([groups[j - 1][rows[k - j]] for j in range(1, k + 1)])
        c = built.constants
        eps = c["leakage"] if c.get("beta") is not None else 0.0
        return plant_pair_detector(built, blocks_name="path_blocks", slot_a=path_a, slot_b=path_b,
                                   code_a=code_a % task.N, code_b=code_b % task.N, gates=gates,
                                   gate_value=c["gate"], c1=1.0, eps=eps, integer=False)
    return build


def _c1_planted(slot_a: int, slot_b: int, code_a: int, code_b: int):
    def build(task: Task, k: int = 1, **options) -> Construction:
        built = registry.get("C1").builder(task, k, **options)
        c = built.constants
        eps = c["leakage"] if c.get("beta") is not None else 0.0
        gates = built.layout["gates"][[slot_a]]  # type: ignore[index]
        return plant_pair_detector(built, blocks_name="blocks", slot_a=slot_a, slot_b=slot_b,
                                   code_a=code_a % task.N, code_b=code_b % task.N, gates=gates,
                                   gate_value=c["gate"], c1=1.0, eps=eps, integer=False)
    return build


def _a1_foreign(task: Task, k: int = 1, **options) -> Construction:
    """A1 whose unit (s = 0, r = 0) also fires, as strongly as the right unit, on the query (s = 0, r = 1):
    that query's output is the sum of two answers' codes, wrong on every task where they differ in some way
    that flips the argmax (most tasks: this one is not a rare-task counterexample, the seeded check sees it
    too). Facts in the MLP fire task-independently, so a planted failure there is linear in the written codes
    and cannot be made rare the way the pair detectors are."""
    built = registry.get("A1").builder(task, k, **options)
    assert built.layout is not None
    mlp = built.model.layers[0].mlp
    assert mlp is not None
    rel = built.layout["relations"]
    W1 = np.array(mlp.W1)
    W1[rel[1], 0] = W1[rel[0], 0]
    layer = Layer(built.model.layers[0].attention, MLP(W1, mlp.b1, mlp.W2, mlp.b2))
    model = Model(built.model.entity_embedding, built.model.relation_embedding, built.model.unembedding,
                  (layer,), built.model.position_embedding, meta=built.model.meta,
                  readout_columns=built.model.readout_columns)
    return Construction(model, built.promise, built.codes, built.constants, built.layout)


def _spec(id_: str, name: str, base: str, build, cases: tuple[dict, ...]) -> ConstructionSpec:
    spec = registry.get(base)
    return ConstructionSpec(id_, name, f"planted counterexample on {spec.id}: one pair-detector unit", build,
                            spec.nominal_promise, hops=spec.hops, decoding=spec.decoding, bound=spec.bound,
                            options=spec.options, variants=spec.variants, verify_cases=cases,
                            facts_in=spec.facts_in, readout=spec.readout, task_encoding=spec.task_encoding)


# Each: the spec and the case (sizes, codes, options, variant) where sampled tasks pass and some task fails.
# The code pairs were chosen (once, by enumerating the pairs those tasks hold) so that THE seeded task and the
# 300 random tasks of the tests (seeds 1000..1299) hold none: a planted counterexample is a designed object.
PAIR_G1 = _spec("P1", "planted-g1-binary", "G1", _g1_planted(0, 1, 5, 100),
                ({"N": 1024, "R": 2, "integer": True},))
PAIR_G1_SIGN = _spec("P2", "planted-g1-sign", "G1", _g1_planted(2, 0, 17, 300),
                     ({"N": 1024, "R": 3, "codes": "sign", "D": 40},))
PAIR_G1_SYMMETRIC = _spec("P3", "planted-g1-symmetric", "G1", _g1_planted(1, 0, 2, 100),
                          ({"N": 1024, "R": 2, "integer": True, "symmetric": True},))
PAIR_G1_DISJOINT = _spec("P4", "planted-g1-disjoint", "G1", _g1_planted(0, 1, 33, 44),
                         ({"N": 1024, "R": 2, "integer": True, "attributes": "disjoint"},))
PAIR_G2 = _spec("P5", "planted-g2-paths", "G2", _g2_planted(1, 2, 12, 100),
                ({"N": 1024, "R": 2, "k": 2},))
PAIR_C1 = _spec("P6", "planted-c1-cot", "C1", _c1_planted(1, 0, 77, 501),
                ({"N": 1024, "R": 2, "k": 2},))
FOREIGN_A1 = _spec("P7", "planted-a1-foreign-unit", "A1", _a1_foreign, ({"N": 64, "R": 2, "integer": True},))
PLANTED = (PAIR_G1, PAIR_G1_SIGN, PAIR_G1_SYMMETRIC, PAIR_G1_DISJOINT, PAIR_G2, PAIR_C1)


# ------------------------------------------------------------------- five ways to fool a sampling certifier


def rare_task(N: int, R: int) -> Task:
    """A task with the rare property ``π_0(0) = π_1(0) = 0``: even relations the identity, odd ones
    ``s ↦ −s mod N`` (every relation fixes 0, and relations 0 and 1 differ elsewhere).

    Parameters
    ----------
    N : int
        Entities (>= 1).
    R : int
        Relations (>= 2 for the property, which reads relations 0 and 1).

    Returns
    -------
    Task
        The ``(R, N)`` table, shared attributes.
    """
    s = np.arange(N, dtype=np.int64)
    return Task(np.stack([s if r % 2 == 0 else (-s) % N for r in range(R)]))


def _is_rare(task: Task) -> bool:
    return task.R >= 2 and int(task.table[0, 0]) == 0 and int(task.table[1, 0]) == 0


def _with_mlp(built: Construction, mlp: MLP) -> Construction:
    model = dataclasses.replace(built.model, layers=(Layer(built.model.layers[0].attention, mlp),))
    return dataclasses.replace(built, model=model)


def _rare_task_build(task: Task, k: int = 1, **options) -> Construction:
    """G1, except on tasks with ``π_0(0) = π_1(0) = 0``, where relation 1's units have their bias raised by
    the gate (their gate is always open: asked for relation 0 they add ``c1·a_{π_1(s)}``, a tie between the
    two answers). None of the tasks a sampling certifier builds has the property; some task of every
    size does (:func:`rare_task`)."""
    built = registry.get("G1").builder(task, k, **options)
    if not _is_rare(task):
        return built
    mlp = built.model.layers[0].mlp
    assert mlp is not None
    b1 = np.array(mlp.b1)
    D = built.codes.D
    b1[2 * D : 4 * D] += built.constants["c2"] * built.constants["gate"]  # units (r = 1, i, σ)
    return _with_mlp(built, MLP(mlp.W1, b1, mlp.W2, mlp.b2))


def _derived_build(task: Task, k: int = 1, **options) -> Construction:
    """G1 whose b2 is derived from the entity table it formed: ``−3·c1·a_{π_0(0)}`` on the output block when
    subject 0's blocks 0 and 1 hold the same code (``π_0(0) = π_1(0)``), zero otherwise."""
    built = registry.get("G1").builder(task, k, **options)
    layout, E = built.layout, built.model.entity_embedding
    assert layout is not None
    blocks, out = layout["blocks"], layout["out"]
    if task.R < 2 or not np.array_equal(E[0, blocks[0]], E[0, blocks[1]]):
        return built
    mlp = built.model.layers[0].mlp
    assert mlp is not None
    b2 = np.array(mlp.b2)
    b2[out] = -3 * built.constants["c1"] * E[0, blocks[0]]
    return _with_mlp(built, MLP(mlp.W1, mlp.b1, mlp.W2, b2))


def _readout_columns_build(task: Task, k: int = 1, **options) -> Construction:
    """G1 whose read-out reads relation 0's block instead of the output block on tasks with ``π_0(0) = 0``
    (relation-0 queries stay right, the others go wrong): a field ``Model.arrays()`` does not hold."""
    built = registry.get("G1").builder(task, k, **options)
    if int(task.table[0, 0]) != 0 or not built.model.compact:
        return built
    assert built.layout is not None
    columns = np.sort(np.asarray(built.layout["blocks"][0]))
    return dataclasses.replace(built, model=dataclasses.replace(built.model, readout_columns=columns))


def _temperature_build(task: Task, k: int = 1, **options) -> Construction:
    """G2 whose heads' inverse temperature is divided by 1000 on tasks with ``π_0(0) = 0`` (the heads then
    spread their weight: the gates do not open)."""
    built = registry.get("G2").builder(task, k, **options)
    att = built.model.layers[0].attention
    if int(task.table[0, 0]) != 0 or att is None or att.kind != "softmax":
        return built
    cooled = Attention(att.kind, att.W_V, att.W_O, att.W_Q, att.W_K, att.inverse_temperature / 1000)
    model = dataclasses.replace(built.model, layers=(Layer(cooled, built.model.layers[0].mlp),))
    return dataclasses.replace(built, model=model)


def _hard_tie_family(N: int, R: int, k: int = 1, **options) -> Family:
    """G2 with one hard head (k = 1) whose scores tie in float64 but not exactly: the relation's position
    scores ``fl(0.1)·1 + fl(0.2)·1`` and the subject's ``0.30000000000000004``. In float64 both are
    0.30000000000000004 (a tie: half the weight on each); exactly the subject's is larger (0.1 + 0.2 as
    stored is 0.300000000000000016653...), so the head reads the subject only, no gate opens and every
    margin is 0."""
    if k != 1:
        raise ConditionError(f"the float-tie family is one-hop: k = 1, got {k}")
    family = registry.get("G2").family(N, R, k, **{**options, "attention": "hard"})  # type: ignore[misc]
    model, layout = family.model, family.layout
    att = model.layers[0].attention
    assert att is not None and att.W_Q is not None and att.W_K is not None
    pos = layout["positions"]
    W_Q, W_K = np.zeros_like(att.W_Q), np.zeros_like(att.W_K)
    W_Q[0, pos[1]] = (1.0, 1.0)
    W_K[0, pos[0]] = (0.1, 0.2)
    W_K[0, pos[1]] = (0.30000000000000004, 0.0)
    tied = Attention("hard", att.W_V, att.W_O, W_Q, W_K, att.inverse_temperature)
    model = dataclasses.replace(model, layers=(Layer(tied, model.layers[0].mlp),))
    return dataclasses.replace(family, model=model)


def _huge_scale_family(N: int, R: int, k: int = 1, **options) -> Family:
    """G1 (float) promising margin 1000 at logit scale 1e20: a promise its model does not keep (its margins
    are G1's, 2/3 at D = 6). A tolerance that is a multiple of the logit scale (2·10^7 here) would pass it."""
    family = registry.get("G1").family(N, R, k, **options)  # type: ignore[misc]
    promise = dataclasses.replace(family.promise, margin=1000.0, logit_scale=1e20)
    return dataclasses.replace(family, promise=promise)


def _a2b_leaky_family(N: int, R: int, k: int = 1, **options) -> Family:
    """A2(b) whose pair for the fact ``(relation 0, entity 1)`` has its threshold lowered by gap/2: on a
    state ``a_c`` next to ``a_1`` (one bit apart: ``<a_1, a_c> = μ|a|²``) with relation 0 asked (gate at
    least ``1 − ε``, ε = 1/16) it reaches ``gap/4 − 2·gap·ε = gap/8 > 0`` and adds a quarter of its step,
    ``(a_{π_0(1)} − a_1)/4``, to the state. Whenever ``π_0(1) ≠ 1`` the state leaves the codebook (the
    answer's margin halves, or the next layers misread it): the layered argument fails and the branching
    witness search must find a task the ordinary checker fails. Like :data:`FOREIGN_A1`, a planted failure
    of facts stored in an MLP is linear in the written codes and cannot be made rare: the seeded task
    fails too."""
    family = registry.get("A2b").family(N, R, k, **options)  # type: ignore[misc]
    mlp = family.model.layers[0].mlp
    assert mlp is not None
    b1 = np.array(mlp.b1)
    p = 0 * N + 1  # pair index r·N + v of (r = 0, v = 1)
    b1[2 * p : 2 * p + 2] += family.codes.gap / 2
    shared = MLP(mlp.W1, b1, mlp.W2, mlp.b2)
    layers = tuple(Layer(layer.attention, shared) for layer in family.model.layers)
    return dataclasses.replace(family, model=dataclasses.replace(family.model, layers=layers))


def _a2a_foreign_family(N: int, R: int, k: int = 2, **options) -> Family:
    """A2(a) whose unit for (subject 0, path 0) also listens to relation 1 at the first hop: on the query
    (subject 0, path 0 with its first relation replaced by 1) it fires as strongly as that query's own unit,
    and the output is the sum of two answers' codes (wrong on most tasks, the seeded one too: a planted
    failure of facts in W2 cannot be made rare, as for :data:`FOREIGN_A1`)."""
    family = registry.get("A2a").family(N, R, k, **options)  # type: ignore[misc]
    mlp = family.model.layers[0].mlp
    assert mlp is not None and R >= 2
    W1 = np.array(mlp.W1)
    W1[family.layout["gate_groups"][0][1], 0] = 1.0
    layer = Layer(family.model.layers[0].attention, MLP(W1, mlp.b1, mlp.W2, mlp.b2))
    return dataclasses.replace(family, model=dataclasses.replace(family.model, layers=(layer,)))


def _adversarial(id_: str, name: str, base: str, result: str, cases: tuple[dict, ...], *, build=None,
                 family=None) -> ConstructionSpec:
    spec = registry.get(base)
    return ConstructionSpec(id_, name, result, build, spec.nominal_promise, hops=spec.hops,
                            decoding=spec.decoding, bound=spec.bound, options=spec.options,
                            variants=spec.variants, verify_cases=cases, facts_in=spec.facts_in,
                            readout=spec.readout, task_encoding=spec.task_encoding, family=family)


RARE_TASK = _adversarial("P8", "planted-rare-task", "G1", "G1 that changes b1 on a rare task",
                         ({"N": 64, "R": 3, "integer": True},), build=_rare_task_build)
DERIVED_FROM_TABLE = _adversarial("P9", "planted-derived-from-table", "G1",
                                  "G1 whose b2 is derived from its entity table",
                                  ({"N": 64, "R": 3, "integer": True},), build=_derived_build)
READOUT_COLUMNS = _adversarial("P10", "planted-readout-columns", "G1",
                               "G1 whose read-out columns depend on the task",
                               ({"N": 64, "R": 3, "integer": True},), build=_readout_columns_build)
TEMPERATURE = _adversarial("P11", "planted-temperature", "G2", "G2 whose temperature depends on the task",
                           ({"N": 64, "R": 3, "k": 2},), build=_temperature_build)
HARD_TIE = _adversarial("P12", "planted-float-hard-tie", "G2", "G2 whose hard scores tie in float64 only",
                        ({"N": 64, "R": 3, "k": 1, "attention": "hard"},), family=_hard_tie_family)
HUGE_SCALE = _adversarial("P13", "planted-huge-logit-scale", "G1", "G1 promising margin 1000 at scale 1e20",
                          ({"N": 64, "R": 3},), family=_huge_scale_family)
LEAKY_A2B = _adversarial("P14", "planted-a2b-leaky-pair", "A2b",
                         "A2(b) whose pair for (relation 0, entity 1) also fires on entity 0",
                         ({"N": 64, "R": 2, "k": 2},), family=_a2b_leaky_family)
FOREIGN_A2A = _adversarial("P15", "planted-a2a-foreign-unit", "A2a",
                           "A2(a) whose unit for (0, path 0) also fires on another path's query",
                           ({"N": 16, "R": 2, "k": 2},), family=_a2a_foreign_family)
ADVERSARIAL = (RARE_TASK, DERIVED_FROM_TABLE, READOUT_COLUMNS, TEMPERATURE, HARD_TIE, HUGE_SCALE)
