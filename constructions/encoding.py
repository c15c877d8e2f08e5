"""How the task enters a construction, and the construction as a family M(π) = F ⊕ enc(π) (docs/theory.md,
"Certification for every task").

A construction whose facts live in its entity table declares a :class:`TaskEncoding`: the entity table is a
*block superposition* over P slots,

    E[s, blocks[b]] = a_{answers[b, s]}  (b = 0..P−1),   E[s, c] = 0 on every other coordinate c,

where ``answers`` is the task's table (one slot per relation: G1, C1) or its k-hop table (one slot per
relation path: G2), ``blocks (P, D)`` a named block of the construction's residual layout and ``a_j`` row j
of the construction's codebook. Facts in the MLP (A1, A2(a)) declare W2's rows instead: unit ``u = b·N + e``
writes ``a_{answers[b, e]}`` on a 1-D block. The declaration also says which slot answers a query
(``queries``): the asked relation's (``"single"``), the asked path's (``"paths"``), or, for
chain-of-thought, the slot of the relation of step t at the current entity (``"cot"``).

A :class:`Family` is the task-free part F of a construction: every field THE forward pass reads
(``model.FORWARD_FIELDS``) except the declared table, made by a builder that is never given a task, with its
codebook, layout and promise. :func:`assemble` forms ``M(π) = F ⊕ enc(π)``: the declared table from the
declaration's formula, everything else F's. The built-in constructions are *defined* this way (their
``build_*`` functions are ``assemble(<family>(N, R, ...), task)``), so ``check`` and ``certify`` speak of
the same object; certify proves the family from F alone (:func:`validate_family` checks, by code, every
assumption its argument makes of F).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np

from georecall.constructions.canonical import canonical_family
from georecall.constructions.codes import Codes
from georecall.constructions.layout import Layout
from georecall.constructions.model import MLP, Layer, Model
from georecall.constructions.parts import block_superposition
from georecall.errors import ConditionError, InputError
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task

__all__ = ["ARRAYS", "QUERY_KINDS", "SLOT_KINDS", "Family", "FamilyError", "TaskEncoding", "assemble_model",
           "declared_blocks", "validate_family"]

SLOT_KINDS = ("relations", "paths")
# The entity table (block superposition: G1, G2, C1) or the MLP's output rows (one unit per fact: A1, A2(a)).
ARRAYS = ("entity_embedding", "layers.0.mlp.W2", "steps")
QUERY_KINDS = ("single", "paths", "cot")


@dataclass(frozen=True)
class TaskEncoding:
    """The declared task encoding of a construction (module docstring).

    Attributes
    ----------
    slots : "relations" (P = R slots, ``answers = task.table``) or "paths" (P = R^k, ``answers =
        task.k_hop(k)`` flattened in path order)
    blocks : the name of the ``(P, D)`` block of the construction's layout (``Construction.layout``)
    queries : which slot answers a query: "single" (query ``(s, ρ)``: slot ρ), "paths" (query ``(s, w)``: slot
        w), "cot" (step t of chain ``(s; r_1..r_k)``: slot ``r_t`` of the entity at the current position)
    array : the one task-dependent array: ``"entity_embedding"`` (the superposition above),
        ``"layers.0.mlp.W2"`` (facts in the MLP: unit ``u = b·N + e`` writes ``a_{answers[b, e]}`` on the
        coordinates of ``blocks``, a 1-D layout block, and nothing else of W2 depends on the task) or
        ``"steps"`` (A2(b): one MLP shared by every layer; the task adds ``+κ·a_{answers[b, v]}`` to unit
        ``2p``'s row and ``−κ·a_{answers[b, v]}`` to unit ``2p + 1``'s, ``p = b·N + v``, on the 1-D block,
        κ = ``constants["step_scale"]``; slots are relations, queries paths)
    """

    slots: Literal["relations", "paths"]
    blocks: str
    queries: Literal["single", "paths", "cot"]
    array: str = "entity_embedding"

    def __post_init__(self) -> None:
        if self.slots not in SLOT_KINDS:
            raise InputError(f"task encoding: slots must be one of {SLOT_KINDS}, got {self.slots!r}")
        if self.queries not in QUERY_KINDS:
            raise InputError(f"task encoding: queries must be one of {QUERY_KINDS}, got {self.queries!r}")
        if self.array not in ARRAYS:
            raise InputError(f"task encoding: the declared array must be one of {ARRAYS}, got {self.array!r}")
        if self.array == "steps":
            if (self.slots, self.queries) != ("relations", "paths"):
                raise InputError("task encoding: steps are relation slots read along path queries")
        elif (self.slots == "paths") != (self.queries == "paths"):
            raise InputError("task encoding: path slots go with path queries (and only with them)")

    def answers(self, task: Task, k: int) -> np.ndarray:
        """The declared ``(P, N)`` table: the answer (a row of the codebook) each slot holds for each
        entity.

        Parameters
        ----------
        task : Task
            The task.
        k : int
            Hops: read only for path slots, whose table is ``task.k_hop(k)`` with its R^k paths as rows.

        Returns
        -------
        numpy.ndarray
            ``task.table`` for relation slots, else the ``(R^k, N)`` k-hop answers.
        """
        if self.slots == "relations":
            return task.table
        return task.k_hop(k).reshape(-1, task.N)

    def as_dict(self) -> dict:
        """The declaration as a JSON-able dict: ``array``, ``slots``, ``blocks`` and ``queries``."""
        return {"array": self.array, "slots": self.slots, "blocks": self.blocks, "queries": self.queries}


class FamilyError(ConditionError):
    """A family (or a builder offered as one) that is not what its declaration says: refused, never
    certified."""


@dataclass(frozen=True, eq=False)
class Family:
    """The task-free part F of a construction and its declared task encoding (module docstring).

    Attributes
    ----------
    model : the model without the task: a declared entity table is left out (``entity_embedding`` has zero
        rows, width d); declared W2 rows are zero on the declared columns (every other field is the model's)
    promise : what the construction promises, computed without the task
    codes : the codebook the slots range over (its first N rows)
    constants : named constants (gate, β, ...), for reports
    layout : the residual layout; ``layout[encoding.blocks]`` are the declared coordinates
    encoding : the declared :class:`TaskEncoding`
    N, R, k : sizes (k hops; 1 for single-hop)
    attributes : "shared" or "disjoint" (the answer ids; a task variant, not a task)
    """

    model: Model
    promise: Promise
    codes: Codes
    constants: dict
    layout: Layout
    encoding: TaskEncoding
    N: int
    R: int
    k: int = 1
    attributes: str = "shared"


def declared_blocks(family: Family) -> np.ndarray:
    """The declared coordinates ``family.layout[family.encoding.blocks]`` as an int64 array.

    Parameters
    ----------
    family : Family
        Its encoding names the layout block that holds the declared table's coordinates.

    Returns
    -------
    numpy.ndarray
        The block's residual coordinates, int64, in the block's shape (as ``Layout[name]`` gives them).

    Raises
    ------
    FamilyError
        The layout has no such block.
    """
    name = family.encoding.blocks
    if name not in family.layout:
        raise FamilyError(f"the family's layout has no block {name!r} (declared)")
    return np.asarray(family.layout[name], dtype=np.int64)


def validate_family(family: Family) -> None:
    """Check, exactly, every assumption the certificate makes of a family (docs/theory.md, "Certification for
    every task", assumptions F1–F5).

    F1. The declared table is absent from F: an entity-table declaration leaves ``entity_embedding`` with
        zero rows; a W2 declaration leaves W2's declared columns zero (so :func:`assemble_model` writes the
        whole of what the task decides). F2. The declared block has the declared shape: ``(P, D)`` for a
        superposition (P = R, or R^k for paths) with distinct coordinates in ``[0, d)``; a 1-D block of D
        distinct coordinates for W2, which then has ``P·N`` rows. F3. The codebook has at least N codes of
        length D, finite. F4. The sizes agree: the model's relation table has R rows; the read-out has
        ``N`` answers (``N·R`` for disjoint attributes); one layer with an MLP for a W2 declaration. F5. The
        entity-table kinds: the encoding's query kind matches (k = 1 for "single").

    Parameters
    ----------
    family : Family

    Raises
    ------
    FamilyError
        Naming the assumption that fails and its values.
    """
    if not isinstance(family, Family):
        raise FamilyError(f"a family builder must return a Family, got {type(family).__name__}")
    enc, model, N, R, k = family.encoding, family.model, family.N, family.R, family.k
    if not isinstance(enc, TaskEncoding):
        raise FamilyError("the family's encoding is not a TaskEncoding")
    if not isinstance(model, Model):
        raise FamilyError(f"the family's model is a {type(model).__name__}, not a Model")
    if not isinstance(family.codes, Codes):
        raise FamilyError(f"the family's codes are a {type(family.codes).__name__}, not a Codes")
    if not isinstance(family.promise, Promise):
        raise FamilyError(f"the family's promise is a {type(family.promise).__name__}, not a Promise")
    if not isinstance(family.layout, Layout):
        raise FamilyError("the family has no Layout (its declared block is named in one)")
    if enc.queries == "single" and k != 1:
        raise FamilyError(f"F5: single-hop queries with k = {k}")
    d = model.d
    P = R if enc.slots == "relations" else R**k
    blocks = declared_blocks(family)
    vectors = family.codes.vectors
    D = vectors.shape[1] if vectors.ndim == 2 else -1
    if vectors.ndim != 2 or vectors.shape[0] < N or not np.isfinite(vectors).all():
        raise FamilyError(f"F3: the codebook must hold at least N = {N} finite codes, got shape "
                          f"{vectors.shape}")
    if blocks.size and (blocks.min() < 0 or blocks.max() >= d):
        raise FamilyError(f"F2: declared coordinates outside [0, d = {d})")
    if np.unique(blocks).size != blocks.size:
        raise FamilyError("F2: the declared coordinates overlap")
    if model.relation_embedding.shape[0] != R:
        raise FamilyError(f"F4: {model.relation_embedding.shape[0]} relation rows, R = {R}")
    n_out = N * R if family.attributes == "disjoint" else N
    if model.n_out != n_out:
        raise FamilyError(f"F4: the read-out has {model.n_out} answers, the task's {n_out}")
    if enc.array == "entity_embedding":
        if blocks.shape != (P, D):
            raise FamilyError(f"F2: declared block {enc.blocks!r} has shape {blocks.shape}, the declaration "
                              f"({P} slots of codes of length {D}) needs {(P, D)}")
        if model.entity_embedding.shape[0] != 0:
            raise FamilyError(f"F1: the family's entity table has {model.entity_embedding.shape[0]} rows; "
                              "the declared table must be left out (zero rows): the task alone fills it")
        return
    if enc.array == "steps":
        mlps = [layer.mlp for layer in model.layers]
        if not mlps or mlps[0] is None or any(m is not mlps[0] for m in mlps):
            raise FamilyError("F4: steps need one MLP object shared by every layer")
        scale = family.constants.get("step_scale")
        if not (isinstance(scale, float) and np.isfinite(scale) and scale > 0):
            raise FamilyError(f"F4: steps need a positive finite constants['step_scale'], got {scale!r}")
        if blocks.shape != (D,) or mlps[0].W2.shape[0] != 2 * R * N:
            raise FamilyError(f"F2: steps: W2 has {mlps[0].W2.shape[0]} units and a block of shape "
                              f"{blocks.shape}; the declaration needs {2 * R * N} units and {D} columns")
        if model.entity_embedding.shape[0] != N:
            raise FamilyError(f"F4: {model.entity_embedding.shape[0]} entity rows, N = {N}")
        return
    if len(model.layers) != 1 or model.layers[0].mlp is None:
        raise FamilyError("F4: facts declared in W2 need one layer with an MLP")
    if model.entity_embedding.shape[0] != N:
        raise FamilyError(f"F4: {model.entity_embedding.shape[0]} entity rows, N = {N}")
    W2 = model.layers[0].mlp.W2
    if blocks.shape != (D,) or W2.shape[0] != P * N:
        raise FamilyError(f"F2: declared rows: W2 has {W2.shape[0]} units and a block of shape "
                          f"{blocks.shape}; the declaration needs {P * N} units and {D} columns")
    if np.any(W2[:, blocks] != 0):
        raise FamilyError("F1: W2 is nonzero on the declared columns: the task alone fills them")


def assemble_model(family: Family, task: Task) -> Model:
    """``M(π) = F ⊕ enc(π)``: the family's model with the declared table formed from the task.

    Parameters
    ----------
    family : Family
        Validated or not (:func:`validate_family` is called).
    task : Task
        Its N, R and attribute variant must be the family's.

    Returns
    -------
    Model
        Built from the canonical family (``constructions.canonical.canonical_family``: plain read-only arrays
        taken without a copy, anything else copied; exact scalars; no cache).

    Raises
    ------
    FamilyError, InputError
        An invalid family, or a task of other sizes.
    """
    family = canonical_family(family, copy=False)  # plain values, no cache: what certify speaks of
    validate_family(family)
    if (task.N, task.R) != (family.N, family.R) or task.attributes != family.attributes:
        raise InputError(f"the task (N = {task.N}, R = {task.R}, {task.attributes}) is not the family's "
                         f"(N = {family.N}, R = {family.R}, {family.attributes})")
    enc, model, blocks = family.encoding, family.model, declared_blocks(family)
    answers = np.asarray(enc.answers(task, family.k))
    if enc.array == "entity_embedding":
        E = block_superposition(family.codes, answers, blocks, model.d)
        return dataclasses.replace(model, entity_embedding=E)
    mlp = model.layers[0].mlp
    assert mlp is not None  # validate_family
    W2 = np.array(mlp.W2)
    if enc.array == "steps":
        added = family.constants["step_scale"] * family.codes.vectors[answers.reshape(-1)]
        W2[0::2, blocks] += added
        W2[1::2, blocks] -= added
        W2.setflags(write=False)
        shared = MLP(mlp.W1, mlp.b1, W2, mlp.b2)  # ONE MLP object, shared by every layer as in F
        layers = tuple(Layer(layer.attention, shared) for layer in model.layers)
        return dataclasses.replace(model, layers=layers)
    W2[:, blocks] = family.codes.vectors[answers.reshape(-1)]
    W2.setflags(write=False)
    layer = Layer(model.layers[0].attention, MLP(mlp.W1, mlp.b1, W2, mlp.b2))
    return dataclasses.replace(model, layers=(layer,))
