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
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from georecall.constructions import registry
from georecall.constructions.model import MLP, Layer, Model
from georecall.constructions.registry import ConstructionSpec
from georecall.constructions.single_hop import Construction
from georecall.theory.tasks import Task, paths

__all__ = ["FOREIGN_A1", "PLANTED", "plant_pair_detector"]


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
        built = registry.get("G1").build(task, k, **options)
        c = built.constants
        gates = built.layout["gates"][[slot_a]]  # type: ignore[index]
        return plant_pair_detector(built, blocks_name="blocks", slot_a=slot_a, slot_b=slot_b,
                                   code_a=code_a % task.N, code_b=code_b % task.N, gates=gates,
                                   gate_value=c["c2"] * c["gate"], c1=c["c1"], eps=0.0,
                                   integer=bool(options.get("integer")))
    return build


def _g2_planted(path_a: int, path_b: int, code_a: int, code_b: int):
    def build(task: Task, k: int = 1, **options) -> Construction:
        built = registry.get("G2").build(task, k, **options)
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
        built = registry.get("C1").build(task, k, **options)
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
    built = registry.get("A1").build(task, k, **options)
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
