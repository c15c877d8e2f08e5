"""Certification for every task: one verdict for all (N!)^R tasks of a construction (docs/theory.md,
"Certification for every task").

Statement. For given (N, R, k), construction options and codebook, **every** task π gives a model C(π) that
answers every query with margin >= the promise (for chain-of-thought: every step of every chain under
teacher forcing, hence greedy decoding by induction).

Method. The certified object is the family ``M(π) = F ⊕ enc(π)`` that georecall assembles
(``constructions.encoding``): F from the spec's ``family``, a call that never sees a task, checked by
:func:`check_family` (assumptions F1–F5 of docs/theory.md); a spec whose builder takes the task gets F from
its build on one task (:func:`family_of_builder`) and is never CERTIFIED itself. Then:

1. *Relaxation.* An entity's row is ``Σ_b J_{B_b} a_{j_b}`` with ``j_b`` its slot-b answer. Let every slot of
   every entity position range over the whole codebook independently: a product set containing every input
   that any task can produce at the read position.
2. *Separable bounds.* The model has one layer whose attention weights do not read token contents (uniform,
   or softmax / hard heads whose W_Q and W_K read no coordinate a token uses: checked exactly), so the
   residual at the read position is ``Σ_u x_u·C_u`` with fixed matrices ``C_u``. Each MLP unit's
   pre-activation for a query type (everything but the entities' slot values) is
   ``c_u + Σ_slot <a_{j_slot}, w_{u,slot}>``: its maximum over the product set is
   ``c_u + Σ_slot max_j <a_j, w_{u,slot}>``, exact. A unit whose maximum is <= 0 is off for every task.
3. *Exact enumeration.* The slots read by the remaining units or by the read-out directly, and the answer
   slot, are enumerated jointly over the codebook (N^L points for L such slots); logits and margins are
   computed at each point (integer mode: exact integers, scaled by the attention's common denominator).
4. *Verdict.* Minimum margin over the product set >= promise: CERTIFIED (sound: the product set contains
   every task). A point below the promise: REFUTED when a task realizes it (a witness task is built, and
   confirmed by the ordinary checker), UNKNOWN otherwise. Too many slots to enumerate: UNKNOWN,
   naming the units and their bounds.

Float mode decides every discrete choice exactly (hard-attention ties on exact rational scores, supports from
absolute values, units proved off only beyond a rounding bound) and widens every comparison by a forward-error
allowance from the magnitudes in the computation (``float_allowance``; never a multiple of the promised logit
scale): a certified float margin is ``min − allowance``. A2(b)'s facts, steps of one MLP shared by k layers,
are certified layer by layer (:func:`certify_steps`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from georecall import memory
from georecall.constructions import registry
from georecall.constructions.arithmetic import EXACT_INTEGER_LIMIT, integer_bounds
from georecall.constructions.decoding import iter_chunks
from georecall.constructions.encoding import (
    Family,
    FamilyError,
    TaskEncoding,
    assemble_model,
    validate_family,
)
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Layer, Model, forward_fields, forward_fingerprint
from georecall.constructions.single_hop import Construction
from georecall.errors import InputError
from georecall.memory import Budget, as_budget
from georecall.theory import seeds
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task, paths, task_for_seed
from georecall.theory.tokens import queries
from georecall.verify.checking.check import check_decoding, check_queries
from georecall.verify.checking.decoders import dense_decode, detect_hypercube, hypercube_decode
from georecall.verify.checking.run import run_check

__all__ = [
    "MAX_POINTS",
    "VERDICTS",
    "Certificate",
    "DeclarationError",
    "certify",
    "certify_built",
    "certify_model",
    "certify_steps",
    "check_family",
    "declaration_tasks",
    "family_fingerprint",
    "family_of_builder",
    "float_allowance",
    "realize",
    "without_declared",
]

VERDICTS = ("CERTIFIED", "REFUTED", "UNKNOWN")
MAX_POINTS = 2**24  # largest product of enumerated slot codebooks per query type
CHUNK_POINTS = 2**16  # points evaluated at once
KEEP_FAILING = 64  # failing points kept (lowest margins first) for the search of a realizable one
UNIT = -1  # the "position" of a slot that is an MLP unit's row (facts in W2: A1, A2(a))
W2_ARRAY = "layers.0.mlp.W2"


class DeclarationError(FamilyError):
    """The construction's declared task encoding is not what its builder (or family) does: refused, never
    certified."""


# ------------------------------------------------------------------------------------- the declaration


def declaration_tasks(N: int, R: int, seed: int, *, attributes: str = "shared",
                      symmetric: bool = False) -> list[Task]:
    """The tasks a declaration is checked on: THE seeded task and two structured ones (cyclic shifts
    ``π_r(s) = s + r + 1`` and mirrors ``π_r(s) = r − s (mod N)``; for symmetric relations, the pairings
    ``s ↔ s xor 1`` and ``s ↔ s + N/2``); above N·R = 2^22 the two structured ones only (drawing the seeded
    task costs seconds there). The two structured tasks differ whenever more than one task exists; the
    seeded one may coincide with one of them (small N: N = 2, R = 1 has only two tasks).

    Parameters
    ----------
    N : int
        Entities (even for symmetric relations).
    R : int
        Relations.
    seed : int
        The run seed (THE seeded task, ``theory.tasks.task_for_seed``).
    attributes : {"shared", "disjoint"}
        The tasks' attribute variant.
    symmetric : bool
        Symmetric relations (perfect matchings) instead of arbitrary bijections.

    Returns
    -------
    list of Task
        ``[seeded, shifts, mirrors]`` (or ``[pairings xor 1, pairings + N/2]`` when symmetric); without the
        seeded task above N·R = 2^22.

    Raises
    ------
    InputError
        From :class:`~georecall.theory.tasks.Task`: N or R below 1, ``attributes`` not "shared" or
        "disjoint", or ``symmetric`` with N odd (the pairing ``s xor 1`` then leaves [N]: the message names
        an out-of-range entry).
    """
    s = np.arange(N, dtype=np.int64)
    r = np.arange(R, dtype=np.int64)[:, None]
    if symmetric:
        first = np.broadcast_to(s ^ 1, (R, N))
        second = np.broadcast_to((s + N // 2) % N, (R, N))
    else:
        first = (s[None, :] + r + 1) % N
        second = (r - s[None, :]) % N
    structured = [Task(np.array(t), attributes) for t in (first, second)]  # type: ignore[arg-type]
    if N * R > 2**22:  # drawing the seeded task costs more than the two builds together there
        return structured
    return [task_for_seed(N, R, seed, attributes=attributes, symmetric=symmetric),  # type: ignore[arg-type]
            *structured]


def _declared_entity_check(model: Model, answers: np.ndarray, blocks: np.ndarray, vectors: np.ndarray) -> str:
    """Compare a formed entity table with the declared superposition, in row blocks; '' or the first
    difference."""
    E = model.entity_embedding
    N, d = E.shape
    if N != answers.shape[1]:
        return f"the entity table has {N} rows, the task {answers.shape[1]} entities"
    used = np.zeros(d, dtype=bool)
    used[blocks.reshape(-1)] = True
    rows = max(1, 2**21 // (8 * max(1, d)))
    for start in range(0, N, rows):
        part = slice(start, min(N, start + rows))
        block = E[part]
        if np.any(block[:, ~used] != 0):
            return f"entity rows {part.start}..{part.stop - 1} are nonzero outside the declared blocks"
        for b in range(blocks.shape[0]):
            if not np.array_equal(block[:, blocks[b]], vectors[answers[b, part]]):
                return f"entity rows {part.start}..{part.stop - 1}: block {b} is not the code of slot {b}"
    return ""


def _code_options(codes, D) -> dict:
    """``codes`` and ``D`` as builder options, each only when given (a spec that does not take them is never
    passed them)."""
    return {name: value for name, value in (("codes", codes), ("D", D)) if value is not None}


def _build(spec, task: Task, k: int, codes, D: int | None, seed: int, options: dict) -> Construction:
    """``spec.build`` as ``check`` calls it: code options only when given, the codes stream of the seed."""
    return spec.build(task, k, rng=seeds.rng(seed, "codes"), **_code_options(codes, D), **options)


def _family(spec, N: int, R: int, k: int, codes, D: int | None, seed: int, options: dict,
            attributes: str) -> Family:
    """``spec.family`` as ``check`` reaches it (through ``spec.build = family_build(spec.family)``): the same
    options and codes stream, and no task."""
    return spec.family(N, R, k, attributes=attributes, rng=seeds.rng(seed, "codes"),
                       **_code_options(codes, D), **options)


def _declared_rows_check(model: Model, out: np.ndarray, answers: np.ndarray, vectors: np.ndarray) -> str:
    """Compare W2's declared columns with the codes of the units' answers; '' or the difference."""
    if len(model.layers) != 1 or model.layers[0].mlp is None:
        return "facts declared in W2 need one layer with an MLP"
    W2 = model.layers[0].mlp.W2
    if out.ndim != 1 or out.size != vectors.shape[1] or W2.shape[0] != answers.size:
        return (f"declared rows: W2 has {W2.shape[0]} units and block of {out.size} columns, the declaration "
                f"{answers.size} slots of codes of length {vectors.shape[1]}")
    if not np.array_equal(W2[:, out], vectors[answers]):
        return "W2's declared columns are not the codes of the units' answers"
    return ""


def without_declared(model: Model, encoding: TaskEncoding, blocks: np.ndarray) -> Model:
    """``model`` with its declared table removed, as a :class:`Family` holds it: a declared entity table
    leaves zero rows; declared W2 rows leave W2 zero on the declared columns.

    Parameters
    ----------
    model : Model
    encoding : TaskEncoding
    blocks : numpy.ndarray
        The declared coordinates.

    Returns
    -------
    Model
    """
    if encoding.array == "entity_embedding":
        return dataclasses.replace(model, entity_embedding=np.zeros((0, model.d)))
    mlp = model.layers[0].mlp
    assert mlp is not None
    W2 = np.array(mlp.W2)
    W2[:, blocks] = 0.0
    return dataclasses.replace(model, layers=(Layer(model.layers[0].attention,
                                                    MLP(mlp.W1, mlp.b1, W2, mlp.b2)),))


def _same_fields(a: Model, b: Model) -> str:
    """'' when the two models agree exactly on every field THE forward pass reads (``FORWARD_FIELDS``), else
    the first field that differs."""
    fa, fb = forward_fields(a), forward_fields(b)
    if fa.keys() != fb.keys():
        return f"the fields {sorted(set(fa) ^ set(fb))}"
    for name, x in fa.items():
        y = fb[name]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.shape == y.shape
                    and x.dtype == y.dtype and np.array_equal(x, y)):
                return name
        elif type(x) is not type(y) or repr(x) != repr(y):  # floats by their exact repr, never by tolerance
            return name
    return ""


def family_of_builder(spec, N: int, R: int, k: int, *, codes: str | None = None, D: int | None = None,
                      options: dict | None = None, seed: int = 0, attributes: str = "shared",
                      symmetric: bool = False) -> tuple[Family, dict]:
    """For a spec whose builder takes the task (no ``family``): the family georecall assembles from its build
    on the first of :func:`declaration_tasks`, and what was checked of the builder on those tasks.

    On each task the declared table is compared with the declaration's formula, and every other field THE
    forward pass reads (``constructions.model.FORWARD_FIELDS``: arrays with their dtypes, read-out columns,
    attention kinds and temperatures), the codebook and the promise with the first build's, exactly. This
    establishes that the builder equals the family ``F ⊕ enc(π)`` **on these tasks only**: a builder can
    differ on a task never built, so certify never calls such a builder CERTIFIED.

    Parameters
    ----------
    spec : ConstructionSpec
        With a ``task_encoding`` and a ``build``.
    N, R, k : int
        Sizes.
    codes, D, options, seed, attributes, symmetric
        As for ``georecall check`` (``options`` are the builder's own; codes and D passed only when given).

    Returns
    -------
    (Family, dict)
        The family (F from the first build) and a record of what was compared.

    Raises
    ------
    DeclarationError
        On a built task the declared table is not the declared formula, or another field, the codebook or the
        promise differs between tasks.
    """
    encoding: TaskEncoding | None = spec.task_encoding
    if encoding is None:
        raise InputError(f"{spec.label} declares no task encoding")
    options = dict(options or {})
    tasks = declaration_tasks(N, R, seed, attributes=attributes, symmetric=symmetric)
    first: Construction | None = None
    fixed: Model | None = None
    for i, task in enumerate(tasks):
        built = _build(spec, task, k, codes, D, seed, options)
        layout = built.layout
        if layout is None or encoding.blocks not in layout:
            raise DeclarationError(f"{spec.label}: its layout has no block {encoding.blocks!r} (declared)")
        blocks = np.asarray(layout[encoding.blocks])
        answers = np.asarray(encoding.answers(task, k))
        vectors = built.codes.vectors
        if encoding.array == W2_ARRAY:
            why = _declared_rows_check(built.model, blocks, answers.reshape(-1), vectors)
        elif blocks.ndim != 2 or blocks.shape[0] != answers.shape[0]:
            why = (f"declared block {encoding.blocks!r} has shape {blocks.shape}, but the declared slots "
                   f"number {answers.shape[0]}")
        else:
            why = _declared_entity_check(built.model, answers, blocks, vectors)
            why = why and f"the entity table is not the declared encoding: {why}"
        if why:
            raise DeclarationError(f"{spec.label}: on task {i}: {why}")
        rest = without_declared(built.model, encoding, blocks)
        if first is None or fixed is None:
            first, fixed = built, rest
            continue
        differs = _same_fields(rest, fixed)
        if differs:
            raise DeclarationError(f"{spec.label}: {differs} depends on the task (differs between task 0 and "
                                   f"task {i}) but is not declared")
        if not (built.codes.vectors.shape == first.codes.vectors.shape
                and np.array_equal(built.codes.vectors, first.codes.vectors)):
            raise DeclarationError(f"{spec.label}: its codebook depends on the task")
        if not np.array_equal(blocks, np.asarray(first.layout[encoding.blocks])):  # type: ignore[index]
            raise DeclarationError(f"{spec.label}: its declared block depends on the task")
        if built.promise.as_dict() != first.promise.as_dict():
            raise DeclarationError(f"{spec.label}: its promise depends on the task")
    assert first is not None and fixed is not None and first.layout is not None
    family = Family(fixed, first.promise, first.codes, first.constants, first.layout, encoding, N, R, k,
                    attributes)
    try:
        validate_family(family)
    except FamilyError as exc:
        raise DeclarationError(f"{spec.label}: {exc}") from None
    record = {"object": "the family F ⊕ enc(π), F from the builder's build on task 0",
              "tasks_built": len(tasks), "distinct_tasks": len({t.table.tobytes() for t in tasks}),
              "fields_compared": sorted(forward_fields(fixed)),
              "builder": f"equals the family on the {len(tasks)} tasks built (every field the forward pass "
                         "reads); nothing is established on any other task"}
    return family, record


def check_family(spec, family: Family) -> dict:
    """Check, exactly, what the certificate assumes of a spec's family (``encoding.validate_family``'s F1–F5)
    and that it declares the spec's own encoding.

    Parameters
    ----------
    spec : ConstructionSpec
    family : Family

    Returns
    -------
    dict
        The record of what was checked.

    Raises
    ------
    DeclarationError
        An assumption fails (named).
    """
    try:
        validate_family(family)
    except FamilyError as exc:
        raise DeclarationError(f"{spec.label}: {exc}") from None
    if family.encoding != spec.task_encoding:
        raise DeclarationError(f"{spec.label}: its family declares {family.encoding.as_dict()}, the spec "
                               f"{None if spec.task_encoding is None else spec.task_encoding.as_dict()}")
    return {"object": "the family F ⊕ enc(π), F from a build that never saw a task", "tasks_built": 0,
            "checked": ["F1 declared table absent from F", "F2 declared block shape", "F3 codebook",
                        "F4 sizes", "F5 query kind", "encoding = the spec's"],
            "fingerprint": family_fingerprint(family)}


def family_fingerprint(family: Family) -> str:
    """A SHA-256 of everything a family contributes to ``F ⊕ enc(π)``: every field THE forward pass reads
    (``model.forward_fingerprint``), the codebook, the declared coordinates, the encoding and the sizes.

    Parameters
    ----------
    family : Family

    Returns
    -------
    str
    """
    digest = hashlib.sha256(forward_fingerprint(family.model).encode())
    for array in (np.ascontiguousarray(family.codes.vectors),
                  np.ascontiguousarray(family.layout[family.encoding.blocks])):
        digest.update(repr((array.shape, array.dtype.str)).encode())
        digest.update(array.tobytes())
    digest.update(repr((family.encoding.as_dict(), family.N, family.R, family.k, family.attributes,
                        family.promise.as_dict())).encode())
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------ the verdict


@dataclass
class Certificate:
    """The outcome of :func:`certify`: verdict, minimum margin over all tasks, witness or reasons."""

    verdict: str
    name: str
    params: dict
    promise: Promise | None
    integer: bool
    min_margin: float | None = None  # over the whole product set (exact value in integer mode)
    min_margin_exact: str | None = None  # integer mode: the exact rational, e.g. "4" or "7/2"
    allowance: float = 0.0  # float mode: forward-error allowance subtracted before comparing
    query_types: int = 0
    points: int = 0  # product-set points enumerated in all
    units_shut: int = 0  # (query type, unit) pairs proved off for every task
    units_enumerated: int = 0
    argmin: dict | None = None
    witness: dict | None = None
    witness_table: np.ndarray | None = None
    reasons: list[dict] = field(default_factory=list)
    declaration: dict = field(default_factory=dict)
    seconds: float = 0.0
    confirmation: dict | None = None
    family_verdict: str | None = None  # the verdict on the assembled family (== verdict for a family spec)

    @property
    def passed(self) -> bool:
        return self.verdict == "CERTIFIED"

    def as_dict(self) -> dict:
        return {"name": self.name, "verdict": self.verdict, "passed": self.passed, "params": self.params,
                "promise": None if self.promise is None else self.promise.as_dict(), "integer": self.integer,
                "min_margin": self.min_margin, "min_margin_exact": self.min_margin_exact,
                "allowance": self.allowance,
                "certified_margin": (None if self.min_margin is None else self.min_margin - self.allowance),
                "query_types": self.query_types, "points": self.points, "units_shut": self.units_shut,
                "units_enumerated": self.units_enumerated, "argmin": self.argmin, "witness": self.witness,
                "reasons": self.reasons, "declaration": self.declaration, "seconds": round(self.seconds, 4),
                "confirmation": self.confirmation, "family_verdict": self.family_verdict}


# --------------------------------------------------------------------------------------- query types


@dataclass
class _QueryType:
    """Everything of a query but the entities' slot values: its tokens (entities as -1), the entity
    positions, the answer slot ``(position, slot)``, the answer id offset, and how to name it."""

    tokens: list[int]
    entity_positions: list[int]
    answer: tuple[int, int]
    offset: int
    label: dict
    # the path from the subject to each entity position (relations in the order applied)
    prefix: dict[int, list[int]]


def _query_types(encoding: TaskEncoding, N: int, R: int, k: int, disjoint: bool) -> list[_QueryType]:
    out = []
    if encoding.queries == "single":
        for rho in range(R):
            out.append(_QueryType([N + rho, -1], [1], (1, rho), rho * N if disjoint else 0,
                                  {"relation": rho}, {1: []}))
        return out
    rows = paths(R, k)  # (R^k, k): columns r_k..r_1
    for w in range(rows.shape[0]):
        rel_tokens = [N + int(r) for r in rows[w]]
        applied = [int(r) for r in rows[w][::-1]]  # r_1 first
        if encoding.queries == "paths":
            out.append(_QueryType(rel_tokens + [-1], [k], (k, w), 0, {"path": w, "relations": applied},
                                  {k: []}))
        else:  # chain-of-thought: step t reads the entity v_{t−1} at position k + t − 1
            for t in range(1, k + 1):
                ents = list(range(k, k + t))
                out.append(_QueryType(rel_tokens + [-1] * t, ents, (k + t - 1, applied[t - 1]), 0,
                                      {"path": w, "relations": applied, "step": t},
                                      {k + i: applied[:i] for i in range(t)}))
    return out


# ---------------------------------------------------------------------------------- the linear pieces


class _Pieces:
    """Per sequence length T: the maps ``S·C_u`` (S the common denominator in integer mode, 1 otherwise) and
    their products with W1 and the read-out columns, with the per-slot extremes over the codebook."""

    def __init__(self, model: Model, blocks: np.ndarray, vectors: np.ndarray, integer: bool) -> None:
        self.model, self.blocks, self.vectors, self.integer = model, blocks, vectors, integer
        layer = model.layers[0]
        self.att, self.mlp = layer.attention, layer.mlp
        self.cols = model.readout.columns
        self.cmax, self.cmin = vectors.max(axis=0), vectors.min(axis=0)
        self.Q = model.relation_embedding.astype(np.float64)
        self._cache: dict[int, dict] = {}
        self.weight_error: dict[int, float] = {}  # per T: relative rounding of the softmax weights
        supp = np.zeros(model.d, dtype=bool)
        supp[blocks.reshape(-1)] = True
        supp |= np.any(model.relation_embedding != 0, axis=0)
        self.token_support = np.flatnonzero(supp)

    def weights(self, T: int) -> np.ndarray:
        """The heads' weights at the read position T − 1 of a T-token query. Scores read positions only
        (checked exactly); they are computed as exact rationals of the stored floats, so hard attention's
        maximal positions are decided exactly (never ``==`` on floats); softmax weights are float64 values of
        the exact scores, their rounding bounded in :attr:`weight_error`."""
        att = self.att
        if att is None:
            return np.zeros((0, T))
        if att.kind == "uniform":
            return np.full((att.heads, T), 1.0 / T)
        assert att.W_Q is not None and att.W_K is not None
        P = self.model.position_embedding
        out = np.empty((att.heads, T))
        error = 0.0
        for h in range(att.heads):
            for name, W in (("W_Q", att.W_Q[h]), ("W_K", att.W_K[h])):
                if np.any(W[self.token_support] != 0):
                    raise _Unsupported(f"{att.kind} attention: {name}[{h}] reads coordinates that tokens "
                                       "use, so its weights depend on the task")
            scores = [Fraction(0)] * T if P is None else _exact_scores(P, att.W_Q[h], att.W_K[h],
                                                                       att.inverse_temperature, T)
            if att.kind == "hard":
                top = max(scores)
                hits = np.array([score == top for score in scores], dtype=np.float64)
                out[h] = hits / hits.sum()
                continue
            rounded = np.array([float(score) for score in scores])  # each within u·|score|
            e = np.exp(rounded - rounded.max())
            out[h] = e / e.sum()
            # relative error of each weight: the scores' rounding (u·|s| each, twice through the difference)
            # through exp, exp's and the normalization's own rounding (docs/theory.md)
            spread = 2 * 2.0**-53 * float(np.abs(rounded).max(initial=0.0)) * (1 + 2.0**-50)
            error = max(error, 2 * math.expm1(spread + 4 * 2.0**-53) + (T + 4) * 2.0**-52)
        self.weight_error[T] = error
        return out

    def at(self, T: int) -> dict:
        if T in self._cache:
            return self._cache[T]
        model, att, mlp = self.model, self.att, self.mlp
        d = model.d
        w = self.weights(T)
        VO = [] if att is None else [att.value_output(h).astype(np.float64) for h in range(att.heads)]
        scale = 1
        if self.integer and att is not None:
            if att.kind != "uniform":
                raise InputError(f"integer mode needs uniform attention, not {att.kind} (use --float)")
            scale = T
        W1 = mlp.W1.astype(np.float64) if mlp is not None else np.zeros((d, 0))
        P = model.position_embedding
        per_u = []
        for u in range(T):
            if self.integer:
                Cu = sum(VO) if VO else np.zeros((d, d))  # S·(1/T)·Σ_h VO_h with S = T
                Cu = np.array(Cu, dtype=np.float64)
            else:
                Cu = np.zeros((d, d))
                for h, vo in enumerate(VO):
                    Cu += w[h, u] * vo
            if u == T - 1:
                Cu[np.arange(d), np.arange(d)] += scale
            CW1 = Cu @ W1
            Cread = Cu[:, self.cols]
            # which units / read-out columns read a slot: from |C_u|·|W1| (a sum of nonnegative terms is zero
            # only when every term is: no float cancellation can hide a dependence)
            reads = (np.abs(Cu) @ np.abs(W1))[self.blocks]
            piece = {"rel_pre": self.Q @ CW1, "rel_read": self.Q @ Cread,
                     "pos_pre": np.zeros(W1.shape[1]) if P is None else P[u].astype(np.float64) @ CW1,
                     "pos_read": np.zeros(self.cols.size) if P is None else P[u].astype(np.float64) @ Cread,
                     "G": CW1[self.blocks],  # (P, D, m)
                     "H": Cread[self.blocks]}  # (P, D, c)
            piece["hi"], piece["lo"] = self._extremes(piece["G"])
            piece["G_any"] = np.any(reads != 0, axis=1)  # (P, m): which units read slot b here
            piece["H_any"] = np.any(np.abs(Cu)[:, self.cols][self.blocks] != 0, axis=(1, 2))  # (P,)
            per_u.append(piece)
        out = {"scale": scale, "weights": w, "u": per_u}
        self._cache[T] = out
        return out

    def _extremes(self, G: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``max_j <a_j, G[b, :, u]>`` and the min, for every slot b and unit u: per coordinate for columns
        with one nonzero (exact), by products with the codebook in row blocks otherwise."""
        P, D, m = G.shape
        hi, lo = np.zeros((P, m)), np.zeros((P, m))
        nnz = np.count_nonzero(G, axis=1)  # (P, m)
        one = nnz == 1
        if np.any(one):
            i = np.argmax(G != 0, axis=1)  # the coordinate of the nonzero
            c = np.take_along_axis(G, i[:, None, :], axis=1)[:, 0, :]
            top = np.where(c > 0, c * self.cmax[i], c * self.cmin[i])
            bottom = np.where(c > 0, c * self.cmin[i], c * self.cmax[i])
            hi[one], lo[one] = top[one], bottom[one]
        many = nnz > 1
        for b in np.flatnonzero(many.any(axis=1)):
            units = np.flatnonzero(many[b])
            top = np.full(units.size, -np.inf)
            bottom = np.full(units.size, np.inf)
            step = max(1, 2**22 // max(1, units.size))
            for start in range(0, self.vectors.shape[0], step):
                prod = self.vectors[start : start + step] @ G[b][:, units]
                top = np.maximum(top, prod.max(axis=0))
                bottom = np.minimum(bottom, prod.min(axis=0))
            hi[b, units], lo[b, units] = top, bottom
        return hi, lo


def _exact_scores(P: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, beta: float, T: int) -> list[Fraction]:
    """``β·<P[u] W_K, P[T−1] W_Q>`` for u < T as exact rationals of the stored floats (only nonzero entries
    enter: the positional heads' P and W are one-hot)."""
    def row(vector: np.ndarray, W: np.ndarray) -> dict[int, Fraction]:
        out: dict[int, Fraction] = {}
        for i in np.flatnonzero(vector):
            scale = Fraction(float(vector[i]))
            for c in np.flatnonzero(W[i]):
                out[int(c)] = out.get(int(c), Fraction(0)) + scale * Fraction(float(W[i, c]))
        return out

    query = row(P[T - 1], W_Q)
    b = Fraction(float(beta))
    scores = []
    for u in range(T):
        key = row(P[u], W_K)
        scores.append(b * sum((value * query[c] for c, value in key.items() if c in query), Fraction(0)))
    return scores


class _Right:
    """``X @ W`` for a fixed ``W (a, b)`` and many ``X (n, a)``: as gathers of columns of X when every column
    of W has few nonzeros (the selectors' W1 and W2 have one or two per unit), else one BLAS product. Sums of
    integers below 2^53 are exact in any order, so integer mode stays exact."""

    def __init__(self, W: np.ndarray) -> None:
        self.W = np.ascontiguousarray(W, dtype=np.float64)
        a, b = self.W.shape
        nnz = np.count_nonzero(self.W, axis=0)
        self.ranks = int(nnz.max(initial=0))
        self.sparse = 4 * self.ranks <= a
        if self.sparse:
            self.index = np.zeros((self.ranks, b), dtype=np.intp)
            self.value = np.zeros((self.ranks, b))
            rows, cols = np.nonzero(self.W.T)  # row of W.T = column of W, in order
            rank = np.arange(rows.size) - np.searchsorted(rows, rows)
            self.index[rank, rows] = cols
            self.value[rank, rows] = self.W.T[rows, cols]

    def add_to(self, out: np.ndarray, X: np.ndarray) -> None:
        """``out += X @ W``."""
        if not self.sparse:
            out += X @ self.W
            return
        for k in range(self.ranks):
            out += X[:, self.index[k]] * self.value[k]


class _Unsupported(ValueError):
    """The model lacks the structure the certifier needs (the reason): UNKNOWN."""


# ------------------------------------------------------------------------------------ float allowance


def float_allowance(model: Model, T: int, points_terms: int = 0, weight_error: float = 0.0) -> float:
    """A forward-error allowance for float64 margins: twice a bound on ``max_j |fl(logit_j) − logit_j|``
    for THE forward pass and for the certifier's own evaluation (docs/theory.md).

    Stage by stage, layer by layer, with ∞-norm magnitude bounds ``B`` (as ``integer_bounds``; ``|W|`` the
    largest column sum of absolute values) and ``γ_n = n·u/(1 − n·u)`` (u = 2^-53): embeddings exact;
    attention output (T·H products of length d, weights computed with relative error <= γ_{T+8})
    ``e_y <= γ_{n_y}·B_y`` with ``n_y = T·H·(2d + 2) + T + 8``; pre-activations
    ``e_z <= |W1|·e_y + γ_{d+2}·B_z``; ReLU is 1-Lipschitz; MLP output ``e_v <= e_y + |W2|·e_z +
    γ_{m+3}·B_v``; logits ``e_l <= |U|·e_v + γ_{c+2}·B_l`` (c read coordinates). ``points_terms`` adds the
    certifier's extra summation length (slot terms) to ``n_y`` and to the pre-activations' ``d + 2``. The
    allowance is ``4·e_l`` (two logits, two evaluations), doubled again for safety: ``8·e_l``.

    The unit roundoff is float64's: the allowance covers arithmetic in float64, not a forward pass in a
    lower precision.

    Parameters
    ----------
    model : Model
        The model (any number of layers); its entity table's magnitude enters ``B`` (the certifier passes a
        stand-in table holding the codebook's largest magnitude).
    T : int
        Sequence length of the queries.
    points_terms : int
        Extra terms per summation of the certifier's own evaluation (0 for THE forward pass alone).
    weight_error : float
        A bound on the relative rounding of each attention weight beyond ``γ_{T+8}`` (the certifier's
        softmax of exactly computed scores: ``_Pieces.weights``); adds ``weight_error·B·Σ_h |W_V||W_O|`` to
        the attention output's error (the weights sum to 1).

    Returns
    -------
    float
        The allowance (>= 0; the ``γ_n`` assume ``n·u < 1``, i.e. fewer than 2^53 terms, which holds at every
        size that fits in memory).
    """
    u = 2.0**-53
    d = model.d

    def gamma(n: int) -> float:
        return n * u / (1 - n * u)

    def col(W) -> float:
        return float(np.abs(W).sum(axis=-2).max(initial=0.0))

    B = max(float(np.abs(model.entity_embedding).max(initial=0.0)),
            float(np.abs(model.relation_embedding).max(initial=0.0)))
    if model.position_embedding is not None:
        B += float(np.abs(model.position_embedding).max(initial=0.0))
    extra = points_terms
    e = 0.0
    for layer in model.layers:
        att = layer.attention
        if att is not None:
            pre = B * sum(col(att.W_V[h]) * col(att.W_O[h]) for h in range(att.heads))
            B_y = B + pre
            e = e + gamma(T * att.heads * (2 * d + 2) + T + 8 + extra) * B_y + weight_error * pre
            B = B_y
        if layer.mlp is not None:
            mlp = layer.mlp
            B_z = B * col(mlp.W1) + float(np.abs(mlp.b1).max(initial=0.0))
            e_z = col(mlp.W1) * e + gamma(d + 2 + extra) * B_z
            B_v = B + B_z * col(mlp.W2) + float(np.abs(mlp.b2).max(initial=0.0))
            e = e + col(mlp.W2) * e_z + gamma(mlp.width + 3) * B_v
            B = B_v
    c = model.readout.columns.size
    U = model.readout.matrix
    e_l = col(U.T) * e + gamma(c + 2) * B * col(U.T)
    return 8.0 * e_l


# ----------------------------------------------------------------------------------------- realizing


def realize(N: int, R: int, constraints: list[tuple[list[int], int]], *, symmetric: bool = False,
            attributes: str = "shared", subject: int | None = None, starts: list[int | None] | None = None,
            max_nodes: int = 20000) -> tuple[Task, int] | None:
    """A task and a subject s with ``π_path(s) = target`` for every ``(path, target)`` constraint (paths as
    relations in the order applied), or None when the search finds none.

    Depth-first over partial injections: each hop follows an edge already fixed, or fixes it (to the target at
    the last hop, else to a fresh entity, preferring ones not used yet); the partial injections are then
    completed to bijections (symmetric: to perfect matchings, paths of one hop only).

    Parameters
    ----------
    N, R : int
        Sizes.
    constraints : list of (list of int, int)
        Paths from the subject and the entity each must reach.
    symmetric : bool
        Relations must be fixed-point-free involutions (N even).
    attributes : str
        The task's attribute variant.
    subject : int, optional
        The subject (default: the first that works).
    starts : list of (int or None), optional
        Per constraint, the entity its path starts from (None: the subject).
    max_nodes : int
        Search budget (partial assignments tried).

    Returns
    -------
    (Task, int) or None
    """
    if symmetric and any(len(p) != 1 for p, _ in constraints):
        return None
    subjects = range(N) if subject is None else [subject]
    budget = [max_nodes]
    for s in subjects:
        fwd: list[dict[int, int]] = [dict() for _ in range(R)]
        bwd: list[dict[int, int]] = [dict() for _ in range(R)]
        origin = [s if starts is None or starts[c] is None else int(starts[c])  # type: ignore[arg-type]
                  for c in range(len(constraints))]
        if _search(N, origin, constraints, 0, 0, origin[0] if origin else s, fwd, bwd, symmetric, budget):
            table = _complete(N, R, fwd, symmetric)
            if table is None:
                continue
            return Task(table, attributes), s  # type: ignore[arg-type]
        if budget[0] <= 0:
            return None
    return None


def _fix(r: int, x: int, y: int, fwd, bwd, symmetric: bool) -> list[tuple[int, int]] | None:
    """Fix π_r(x) = y if consistent; returns the edges added (for undoing) or None."""
    if symmetric and x == y:
        return None
    want = [(x, y), (y, x)] if symmetric else [(x, y)]
    added: list[tuple[int, int]] = []
    for a, b in want:
        if a in fwd[r]:
            if fwd[r][a] != b:
                for a2, _ in added:
                    del bwd[r][fwd[r].pop(a2)]
                return None
            continue
        if b in bwd[r]:
            for a2, _ in added:
                del bwd[r][fwd[r].pop(a2)]
            return None
        fwd[r][a], bwd[r][b] = b, a
        added.append((a, b))
    return added


def _undo(r: int, added, fwd, bwd) -> None:
    for a, _ in added:
        del bwd[r][fwd[r].pop(a)]


def _search(N, origin, constraints, c, hop, at, fwd, bwd, symmetric, budget) -> bool:
    budget[0] -= 1
    if budget[0] <= 0:
        return False
    if c == len(constraints):
        return True
    path, target = constraints[c]
    if hop == len(path):
        nxt = origin[c + 1] if c + 1 < len(constraints) else at
        return at == target and _search(N, origin, constraints, c + 1, 0, nxt, fwd, bwd, symmetric, budget)
    r = path[hop]
    if at in fwd[r]:
        return _search(N, origin, constraints, c, hop + 1, fwd[r][at], fwd, bwd, symmetric, budget)
    last = hop == len(path) - 1
    if last:
        candidates = [target]
    else:
        touched = set(origin) | {x for f in fwd for x in f} | {y for f in fwd for y in f.values()}
        fresh = [y for y in range(N) if y not in touched and y not in bwd[r]]
        used = [y for y in range(N) if y in touched and y not in bwd[r]]
        candidates = (fresh[:4] + used)[:16]
    for y in candidates:
        added = _fix(r, at, y, fwd, bwd, symmetric)
        if added is None:
            continue
        if _search(N, origin, constraints, c, hop + 1, y, fwd, bwd, symmetric, budget):
            return True
        _undo(r, added, fwd, bwd)
    return False


def _complete(N: int, R: int, fwd, symmetric: bool) -> np.ndarray | None:
    table = np.empty((R, N), dtype=np.int64)
    for r in range(R):
        row = dict(fwd[r])
        if symmetric:
            free = [x for x in range(N) if x not in row]
            if len(free) % 2:
                return None
            for a, b in zip(free[0::2], free[1::2]):
                row[a], row[b] = b, a
        else:
            free_src = [x for x in range(N) if x not in row]
            taken = set(row.values())
            free_dst = [y for y in range(N) if y not in taken]
            row.update(zip(free_src, free_dst))
        table[r] = [row[x] for x in range(N)]
    return table


# ------------------------------------------------------------------------------------------ certify


def _bound_check(*values: float) -> None:
    for v in values:
        if not v < EXACT_INTEGER_LIMIT:
            raise InputError(f"integer mode: an intermediate of the certificate may reach {v:.3g} >= 2^53 "
                             "(use --float)")


def certify_model(model: Model, encoding: TaskEncoding, blocks: np.ndarray, vectors: np.ndarray, N: int,
                  R: int, k: int, promise: Promise | None, *, integer: bool = False,
                  attributes: str = "shared", symmetric: bool = False, max_points: int = MAX_POINTS,
                  progress: bool = False) -> dict:
    """The product-set computation behind :func:`certify` for a model whose entity rows are declared.

    The model's own entity table is never read.

    Parameters
    ----------
    model : Model
        The construction's model; one layer with an MLP (otherwise the answer is ``{"unsupported": ...}``).
    encoding : TaskEncoding
        The declared task encoding (its ``slots`` and ``queries`` give the query types).
    blocks : numpy.ndarray
        The declared ``(P, D)`` residual coordinates of each slot's block (integer).
    vectors : numpy.ndarray
        The codebook ``(>= N, D)``; its first N rows are the codes an entity slot ranges over.
    N, R, k : int
        Sizes (k hops; 1 for single-hop encodings).
    promise : Promise or None
        Its ``margin`` sets which points count as failing (None: margin > 0 only).
    integer : bool
        Integer mode: every weight but the entity table must be integral, and so must the codebook;
        attention must be uniform and every intermediate below 2^53; margins are then exact integers scaled
        by S (T with attention, else 1).
    attributes : {"shared", "disjoint"}
        Disjoint attributes offset each relation's answer ids by ``ρ·N``.
    symmetric : bool
        Accepted for the common signature; not used (the product set contains symmetric tasks too).
    max_points : int
        Largest joint enumeration ``N^L`` per query type; a query type above it gets a reason (UNKNOWN).
    progress : bool
        Progress on stderr.

    Returns
    -------
    dict
        ``{"unsupported": reason}`` when the model is outside the certifier (not one layer, no MLP,
        attention weights that read token coordinates). Otherwise:

        - ``"min"``: float, the minimum margin over the enumerated points, divided by the scale S (T in
          integer mode with attention, else 1); ``inf`` when nothing was enumerated;
        - ``"argmin"``: ``(query type index, code indices, live slots, S, margin·S)``, the last an integer
          in integer mode, from which :func:`certify_built` forms the exact Fraction; None when nothing was
          enumerated;
        - ``"failing"``: up to 64 ``(margin, query type index, code indices, live slots)``, lowest first;
        - ``"reasons"``: one per UNKNOWN query type (too many points);
        - counts ``"points"``, ``"shut"`` (units off for every task, summed over query types),
          ``"enumerated"``, ``"types"``; ``"scale_max"`` (always 1);
        - ``"allowance"``: float mode's largest :func:`float_allowance` (0 in integer mode);
        - ``"types_list"``: the query types.

    Raises
    ------
    InputError
        Integer mode on non-integral weights or codebook, attention that is not uniform, or intermediates
        that may reach 2^53.
    """
    if len(model.layers) != 1:
        return {"unsupported": f"the model has {len(model.layers)} layers; the certifier handles one"}
    if model.layers[0].mlp is None:
        return {"unsupported": "the model has no MLP"}
    if integer:
        for name, array in model.arrays().items():
            if name != "entity_embedding" and not np.array_equal(array, np.rint(array)):
                raise InputError(f"integer mode: weight {name} is not integral (certify it in float mode: "
                                 "--float)")
        if not np.array_equal(vectors, np.rint(vectors)):
            raise InputError("integer mode: the codebook is not integral (certify it in float mode: --float)")
    vectors = np.asarray(vectors[:N], dtype=np.float64)
    pieces = _Pieces(model, blocks, vectors, integer)
    mlp = model.layers[0].mlp
    b1, b2 = mlp.b1.astype(np.float64), mlp.b2.astype(np.float64)
    W2 = mlp.W2.astype(np.float64)
    cols = pieces.cols
    W2_read = W2[:, cols]
    U_read = np.asarray(model.readout.matrix, dtype=np.float64)  # (no copy of float64)
    cube, _ = detect_hypercube(U_read, np.arange(cols.size))
    disjoint = attributes == "disjoint"
    types = _query_types(encoding, N, R, k, disjoint)
    amax = float(np.abs(vectors).max(initial=0.0))
    result: dict = {"min": math.inf, "argmin": None, "failing": [], "reasons": [], "points": 0, "shut": 0,
                    "enumerated": 0, "types": len(types), "scale_max": 1, "allowance": 0.0}
    threshold = None if promise is None else promise.margin
    allowance_by_T: dict[int, float] = {}
    slack_by_T: dict[int, float] = {}
    memo: dict[bytes, tuple] = {}
    try:
        for qi, qt in enumerate(types):
            T = len(qt.tokens)
            piece = pieces.at(T)
            S = piece["scale"]
            c_pre = S * b1.copy()
            c_read = S * b2[cols].copy()
            for u, tok in enumerate(qt.tokens):
                pu = piece["u"][u]
                c_pre += pu["pos_pre"]
                c_read += pu["pos_read"]
                if tok >= 0:
                    c_pre += pu["rel_pre"][tok - N]
                    c_read += pu["rel_read"][tok - N]
            slots = [(u, b) for u in qt.entity_positions for b in range(blocks.shape[0])]
            zmax = c_pre.copy()
            for u, b in slots:
                zmax += piece["u"][u]["hi"][b]
            slack = 0.0  # integer mode: zmax is exact
            if not integer:
                if T not in allowance_by_T:
                    terms = len(slots) * blocks.shape[1]
                    werr = pieces.weight_error.get(T, 0.0)
                    allowance_by_T[T] = _allowance(model, vectors, T, terms, werr)
                    slack_by_T[T] = _preactivation_slack(model, vectors, T, terms, werr)
                result["allowance"] = max(result["allowance"], allowance_by_T[T])
                slack = slack_by_T[T]
            active = np.flatnonzero(zmax > -slack)  # off for every task: proved only at <= -slack
            result["shut"] += int(zmax.size - active.size)
            result["enumerated"] += int(active.size)
            live = [qt.answer]
            for u, b in slots:
                if (u, b) == qt.answer:
                    continue
                pu = piece["u"][u]
                if pu["H_any"][b] or np.any(pu["G_any"][b][active]):
                    live.append((u, b))
            n_points = N ** len(live)
            if n_points > max_points:
                result["reasons"].append(_reason(qt, live, active, zmax, piece, S, blocks.shape[0]))
                continue
            if integer:
                g_col = max(float(np.abs(piece["u"][u]["G"][b]).sum(axis=0).max(initial=0)) for u, b in live)
                bound = float(np.abs(c_pre).max(initial=0)) + len(live) * amax * g_col
                vb = float(np.abs(c_read).max(initial=0)) + bound * float(np.abs(W2_read).sum(axis=0).max(
                    initial=0)) + len(live) * amax * max(float(np.abs(piece["u"][u]["H"][b]).sum(axis=0).max(
                        initial=0)) for u, b in live)
                _bound_check(bound, 2 * vb * float(np.abs(U_read).sum(axis=1).max(initial=0)) + 1)
            G_raw = [piece["u"][u]["G"][b][:, active] for u, b in live]
            H_raw = [piece["u"][u]["H"][b] for u, b in live]
            limit, floor = _limits(threshold, promise, integer, allowance_by_T.get(T, 0.0))
            # Query types whose restricted arrays are identical give identical margins at every point
            # (G1's relations, by symmetry): computed once, exactly the same function of the same numbers.
            key = _key(N, S, qt.offset, limit, floor, c_pre[active], c_read, W2_read[active], *G_raw, *H_raw)
            if key not in memo:
                memo[key] = _enumerate(N, len(live), c_pre[active], c_read, G_raw, H_raw, W2_read[active],
                                       vectors, qt.offset, S, cube, U_read, limit, floor)
            low, low_values, failing, count = memo[key]
            result["points"] += count
            if low < result["min"]:
                result["min"] = low
                result["argmin"] = (qi, low_values, live, S, low * S)
            result["failing"] += [(m_, qi, vals, live) for m_, vals in failing]
            result["failing"].sort(key=lambda f: f[0])
            del result["failing"][KEEP_FAILING:]
            if progress and qi % 64 == 0:
                print(f"\r  certified {qi + 1}/{len(types)} query types", end="", file=sys.stderr, flush=True)
    except _Unsupported as exc:
        return {"unsupported": str(exc)}
    if progress:
        print(file=sys.stderr)
    result["types_list"] = types
    return result


def certify_rows(model: Model, encoding: TaskEncoding, out_block: np.ndarray, vectors: np.ndarray, N: int,
                 R: int, k: int, promise: Promise | None, *, integer: bool = False,
                 attributes: str = "shared",
                 max_points: int = MAX_POINTS, progress: bool = False) -> dict:
    """The product-set computation for facts declared in W2's rows (A1, A2(a)): the same output as
    :func:`certify_model`.

    Everything upstream of W2 is task-independent, so every query's hidden activations are computed exactly by
    THE forward pass (integer mode: proved exact by ``integer_bounds``), once, whatever the task. The read-out
    residual is then ``base(q) + Σ_{u fires} h_u(q)·a_{j_u}`` on the declared columns, with ``j_u`` unit u's
    answer; relaxing the ``j_u`` to range independently over the codebook, the live slots of query q are its
    own answer's unit (unit index = query index) and the units that fire on it, enumerated jointly.
    """
    if len(model.layers) != 1 or model.layers[0].mlp is None:
        return {"unsupported": "facts in W2 are certified for one-layer models with an MLP only"}
    mlp = model.layers[0].mlp
    cols = model.readout.columns
    at = np.searchsorted(cols, out_block)
    if np.any(at >= cols.size) or not np.array_equal(cols[np.minimum(at, cols.size - 1)], out_block):
        return {"unsupported": "the read-out does not read every declared column of W2"}
    vectors = np.asarray(vectors[:N], dtype=np.float64)
    placed = np.zeros((N, cols.size))
    placed[:, at] = vectors  # a_j on the read-out's columns
    W2_rest = mlp.W2.astype(np.float64)[:, cols].copy()
    W2_rest[:, at] = 0.0
    b2 = mlp.b2.astype(np.float64)[cols]
    dummy = Task(np.tile(np.arange(N, dtype=np.int64), (R, 1)))
    tokens, _ = queries(dummy, k)
    n, T = tokens.shape
    if integer:
        integer_bounds(model, T)
    U_read = np.asarray(model.readout.matrix, dtype=np.float64)  # (no copy of float64)
    cube, _ = detect_hypercube(U_read, np.arange(cols.size))
    reach = float(np.abs(placed @ U_read.T).max(initial=0.0))  # largest |logit| one code on the block makes
    disjoint = attributes == "disjoint" and k == 1
    rows_of = paths(R, k)
    types = []
    allowance = 0.0 if integer else float_allowance(model, T, 0)
    limit, floor = _limits(None if promise is None else promise.margin, promise, integer, allowance)
    result: dict = {"min": math.inf, "argmin": None, "failing": [], "reasons": [], "points": 0, "shut": 0,
                    "enumerated": 0, "types": n, "allowance": allowance}
    memo: dict[bytes, tuple] = {}
    for part in iter_chunks(n, max(1, 2**22 // max(1, mlp.width))):
        _, trace = forward(model, tokens[part], integer=integer, trace=True)
        y = trace.residual[1][:, -1].astype(np.float64)
        h = trace.hidden[0][:, -1].astype(np.float64)
        base = y[:, cols] + b2 + h @ W2_rest
        firing = h > 0
        if not integer:
            # Float rounding turns exact zeros into specks (4e-16): units firing below 1e-9 of the largest
            # are left out of the enumeration and their largest effect on a margin joins the allowance.
            speck = (h <= 1e-9 * max(1.0, float(h.max(initial=0.0)))) & firing
            if np.any(speck):
                effect = 2 * float((h * speck).sum(axis=1).max()) * reach
                result["allowance"] = max(result["allowance"], allowance + effect)
                firing &= ~speck
        result["shut"] += int(firing.size - np.count_nonzero(firing))
        result["enumerated"] += int(np.count_nonzero(firing))
        for i, q in enumerate(range(part.start, part.stop)):  # queries of a chunk: grouped below by memo
            w, subject = divmod(q, N)
            label = ({"relation": w} if k == 1
                     else {"path": w, "relations": [int(r) for r in rows_of[w][::-1]]})
            qt = _QueryType([int(t) for t in tokens[q]], [], (UNIT, q), w * N if disjoint else 0,
                            {**label, "subject": subject}, {})
            types.append(qt)
            others = np.flatnonzero(firing[i])
            others = others[others != q]
            live = [q] + others.tolist()
            if N ** len(live) > max_points:
                result["reasons"].append({"query_type": qt.label, "units": [
                    {"unit": int(u), "fires_with": float(h[i, u])} for u in others[:8]],
                    "why": f"{others.size} unit(s) besides the query's own fire on it: enumerating their "
                           "answers jointly exceeds the limit"})
                continue
            hs = h[i, live]
            key = _key(base[i], hs, np.asarray([qt.offset]))
            if key not in memo:
                memo[key] = _enumerate_rows(N, base[i], hs, placed, qt.offset, cube, U_read, limit, floor)
            low, low_values, failing, count = memo[key]
            result["points"] += count
            slots = [(UNIT, u) for u in live]
            if low < result["min"]:
                result["min"] = low
                result["argmin"] = (q, low_values, slots, 1, low)
            if failing:
                result["failing"] += [(m_, q, vals, slots) for m_, vals in failing]
                result["failing"].sort(key=lambda f: f[0])
                del result["failing"][KEEP_FAILING:]
        if progress:
            print(f"\r  certified {part.stop:,}/{n:,} queries", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    result["types_list"] = types
    return result


def certify_steps(model: Model, block: np.ndarray, vectors: np.ndarray, N: int, R: int, k: int,
                  promise: Promise | None, *, step_scale: float, integer: bool = False,
                  progress: bool = False) -> dict:
    """The layered certificate for facts declared as steps (A2(b)), with the output of
    :func:`certify_model` (docs/theory.md, "Certification for every task", A2(b)).

    Every layer shares one MLP whose unit pairs ``(2p, 2p + 1)``, ``p = r·N + v``, read the same coordinates
    (``W1`` columns equal), differ in bias by ``h`` and write opposite rows (``W2[2p+1] = −W2[2p]``), only on
    the declared block S; the task adds ``±κ·a_{π_r(v)}`` to those rows. Attention scores read positions only
    and values only coordinates nothing writes, so the rest of the last position's residual before layer j's
    MLP is a function of the path alone, computed by THE forward pass of F with W2 = 0. Induction on the
    layer, relaxing the state to *some code* ``a_c``: if for every layer j, path w and code c the pair
    ``(r_j, c)`` has both pre-activations ``>= σ`` and every other unit ``<= −σ`` (σ a bound on the rounding
    of the computed pre-activation and on the drift of the state), the MLP adds exactly ``h·W2[2p]`` to S,
    i.e. ``a_{π_{r_j}(c)} − a_c`` up to the drift η (bounded from the stored numbers), so S holds a code
    again; after k layers S holds ``a_{π_w(s)}`` up to ``k·η``, and the margins are computed for every code
    as the final state. Float mode only.
    """
    u = 2.0**-53

    def gamma(n: int) -> float:
        return n * u / (1 - n * u)

    def col(W) -> float:
        return float(np.abs(W).sum(axis=-2).max(initial=0.0))

    if integer:
        return {"unsupported": "steps (A2(b)) are certified in float mode (use --float)"}
    layers = model.layers
    mlp = layers[0].mlp if layers else None
    if mlp is None or any(layer.mlp is not mlp for layer in layers):
        return {"unsupported": "steps need one MLP shared by every layer"}
    d, S = model.d, np.asarray(block, dtype=np.int64)
    W1, b1 = mlp.W1.astype(np.float64), mlp.b1.astype(np.float64)
    W2, b2 = mlp.W2.astype(np.float64), mlp.b2.astype(np.float64)
    m = W1.shape[1]
    off = np.ones(d, dtype=bool)
    off[S] = False
    E = model.entity_embedding.astype(np.float64)
    paired = np.array_equal(W1[:, 0::2], W1[:, 1::2]) and np.array_equal(W2[1::2], -W2[0::2])
    if m != 2 * R * N or not paired:
        return {"unsupported": "steps need 2·R·N units in pairs reading the same coordinates and writing "
                               "opposite rows"}
    if np.any(W2[:, off] != 0) or np.any(b2 != 0) or np.any(E[:, off] != 0):
        return {"unsupported": "steps need W2 and the entity table on the declared block only, and b2 = 0"}
    written = np.zeros(d, dtype=bool)
    written[S] = True
    for layer in layers:
        if layer.attention is not None:
            written |= np.any(layer.attention.W_O != 0, axis=(0, 1))
    token = np.any(E != 0, axis=0) | np.any(model.relation_embedding != 0, axis=0)
    for j, layer in enumerate(layers):
        att = layer.attention
        if att is None:
            continue
        if np.any(att.W_O[:, :, S] != 0) or np.any(att.W_V[:, written, :] != 0):
            return {"unsupported": f"layer {j}: attention writes the state block or reads written "
                                   "coordinates"}
        if att.kind != "uniform" and (np.any(att.W_Q[:, token | written, :] != 0)  # type: ignore[index]
                                      or np.any(att.W_K[:, token | written, :] != 0)):  # type: ignore[index]
            return {"unsupported": f"layer {j}: attention scores read token or written coordinates"}
    # the rest of the last position's residual before each layer's MLP, per path (subject 0: E is on S only)
    zero = MLP(mlp.W1, mlp.b1, np.zeros_like(mlp.W2), mlp.b2)
    silent = dataclasses.replace(model, layers=tuple(Layer(layer.attention, zero) for layer in layers))
    tokens, _ = queries(Task(np.tile(np.arange(N, dtype=np.int64), (R, 1))), k)
    tokens = tokens[::N]  # one query per path (query index w·N + s)
    n_paths, T = tokens.shape
    _, trace = forward(silent, tokens, trace=True)
    base = [trace.residual[2 * j + 1][:, -1].astype(np.float64) for j in range(len(layers))]
    for x in base:
        x[:, S] = 0.0
    # forward-error bound of that rest (attention only writes it): magnitudes stage by stage
    B = max(float(np.abs(model.relation_embedding).max(initial=0.0)), float(np.abs(E).max(initial=0.0)))
    if model.position_embedding is not None:
        B += float(np.abs(model.position_embedding).max(initial=0.0))
    e_base = 0.0
    for layer in layers:
        att = layer.attention
        if att is None:
            continue
        pre = B * sum(col(att.W_V[h]) * col(att.W_O[h]) for h in range(att.heads))
        werr = 0.0
        if att.kind != "uniform":
            top = att.inverse_temperature * B * B * max(col(att.W_Q[h]) * col(att.W_K[h])  # type: ignore[index]
                                                        for h in range(att.heads))
            werr = 2 * math.expm1(4 * u * top + 4 * u) + (T + 4) * 2 * u
        e_base += gamma(T * att.heads * (2 * d + 2) + T + 8) * (B + pre) + werr * pre
        B += pre
    V = np.asarray(vectors[:N], dtype=np.float64)
    A_max = float(np.abs(V).max(initial=0.0))
    AW = V @ W1[S]  # (N, m): the state's part of every pre-activation
    # drift of the state per layer: |a_c + h·W2[2p] − a_{π(c)}| with the stored numbers (docs/theory.md)
    h_hat = b1[0::2] - b1[1::2]  # (m/2,) the pairs' bias differences, each within u·|h| of the exact one
    if np.any(h_hat <= 0):
        return {"unsupported": "steps need each pair's second unit to have the lower bias"}
    c_of = np.arange(m // 2) % N
    w_rows = W2[0::2][:, S]  # F's task-independent part of each pair's step
    kappa = float(step_scale)
    scaled = h_hat[:, None] * w_rows
    first = np.abs(V[c_of] + scaled) + 2 * u * (np.abs(V[c_of]) + np.abs(scaled))
    first += u * np.abs(h_hat[:, None] * w_rows)
    second = (np.abs(h_hat * kappa - 1) + 3 * u * np.abs(h_hat * kappa)) * A_max
    third = 4 * u * np.abs(h_hat) * (np.abs(w_rows).max(axis=1) + kappa * A_max)
    eta = float((first.max(axis=1) + second + third).max(initial=0.0)) * (1 + 8 * u)
    W1_abs_S, W1_col = col(W1[S]), col(W1)
    rows_of = paths(R, k)
    types, failing_fire, reasons = [], [], []
    shut = enumerated = 0
    ar = np.arange(N)
    for w in range(n_paths):
        applied = [int(r) for r in rows_of[w][::-1]]
        types.append(_QueryType([int(t) for t in tokens[w, :-1]] + [-1], [k], (k, w), 0,
                                {"path": w, "relations": applied}, {k: []}))
    for j in range(len(layers)):
        drift = j * eta
        z_rest = base[j] @ W1 + b1  # (paths, m)
        rest_abs = np.abs(base[j]) @ np.abs(W1) + np.abs(b1)
        sigma = (2 * gamma(d + 4) * (float(rest_abs.max(initial=0.0)) + A_max * W1_abs_S) + 2 * gamma(len(S))
                 * A_max * W1_abs_S + e_base * W1_col + drift * W1_abs_S) * (1 + 8 * u)
        for w in range(n_paths):
            r_j = types[w].label["relations"][j]
            z = AW + z_rest[w]
            p_star = r_j * N + ar
            on = np.minimum(z[ar, 2 * p_star], z[ar, 2 * p_star + 1])
            z[ar, 2 * p_star] = -np.inf
            z[ar, 2 * p_star + 1] = -np.inf
            others = z.max(axis=1)
            bad = np.flatnonzero((on < sigma) | (others > -sigma))
            shut += int(N * (m - 2) - np.count_nonzero(z > -sigma))
            enumerated += 2 * N
            for c in bad[:4]:
                reasons.append({"query_type": {**types[w].label, "layer": j + 1, "state": int(c)},
                                "why": f"layer {j + 1}: the pair for (relation {r_j}, state {int(c)}) has "
                                       f"pre-activation {float(on[c]):.4g} (needs >= σ = {sigma:.3g}) or "
                                       f"another unit reaches {float(others[c]):.4g} (needs <= −σ): the "
                                       "state may not stay a code"})
            failing_fire += list(bad)
        if progress:
            print(f"\r  layer {j + 1}/{len(layers)}: every path and state decided", end="", file=sys.stderr,
                  flush=True)
    if progress:
        print(file=sys.stderr)
    # the read-out of every code as the final state, per path
    cols = model.readout.columns
    U_read = np.asarray(model.readout.matrix, dtype=np.float64)
    at = np.searchsorted(cols, S)
    placed = np.zeros((N, cols.size))
    hit = (at < cols.size) & (cols[np.minimum(at, cols.size - 1)] == S)
    placed[:, at[hit]] = V[:, hit]
    last = base[-1]
    row1 = float(np.abs(U_read).sum(axis=1).max(initial=0.0))
    B_v = float(np.abs(last).max(initial=0.0)) + A_max + k * eta
    allowance = 8.0 * (row1 * (k * eta + e_base) + gamma(cols.size + 2) * B_v * row1)
    threshold = None if promise is None else promise.margin
    limit, floor = _limits(threshold, promise, False, allowance)
    result: dict = {"min": math.inf, "argmin": None, "failing": [], "reasons": reasons[:16], "points": 0,
                    "shut": shut, "enumerated": enumerated, "types": n_paths, "allowance": allowance,
                    "types_list": types, "drift_per_layer": eta}
    if failing_fire:
        return result
    for w in range(n_paths):
        v_read = last[w, cols][None, :] + placed
        _, margins = dense_decode(v_read, ar, U_read)
        lowest = _Lowest(1, limit, floor)
        lowest.add(margins, [ar])
        result["points"] += N
        if lowest.low < result["min"]:
            result["min"], result["argmin"] = lowest.low, (w, lowest.low_values, [(k, w)], 1, lowest.low)
        result["failing"] += [(m_, w, vals, [(k, w)]) for m_, vals in lowest.failing]
        result["failing"].sort(key=lambda f: f[0])
        del result["failing"][KEEP_FAILING:]
    return result


class _Lowest:
    """The enumeration's running minimum over chunks of points: the lowest margin and its point, and the
    :data:`KEEP_FAILING` lowest failing points (margin < ``limit`` or <= ``floor``), lowest first."""

    def __init__(self, n_live: int, limit: float, floor: float) -> None:
        self.low, self.low_values = math.inf, [0] * n_live
        self.failing: list = []
        self.limit, self.floor = limit, floor

    def add(self, margins: np.ndarray, values: list[np.ndarray]) -> None:
        """Fold in one chunk: ``margins[p]`` at the point whose j-th live slot is ``values[j][p]``."""
        i = int(np.argmin(margins))
        if margins[i] < self.low:
            self.low, self.low_values = float(margins[i]), [int(v[i]) for v in values]
        bad = np.flatnonzero((margins < self.limit) | (margins <= self.floor))
        if bad.size:
            pick = bad[np.argsort(margins[bad], kind="stable")[:KEEP_FAILING]]
            self.failing += [(float(margins[p]), [int(v[p]) for v in values]) for p in pick]
            self.failing.sort(key=lambda f: f[0])
            del self.failing[KEEP_FAILING:]


def _point_chunks(N: int, n_live: int):
    """The N^n_live joint points in chunks of ``CHUNK_POINTS``: ``(idx, values)``, where ``values[j]`` is the
    j-th live slot's code index at each point (the mixed-radix digits of ``idx``, least significant first)."""
    n_points = N**n_live
    for start in range(0, n_points, CHUNK_POINTS):
        idx = np.arange(start, min(n_points, start + CHUNK_POINTS), dtype=np.int64)
        values = []
        rest = idx
        for _ in range(n_live):
            rest, v = np.divmod(rest, N)
            values.append(v)
        yield idx, values


def _enumerate_rows(N: int, base: np.ndarray, hs: np.ndarray, placed: np.ndarray, offset: int, cube,
                    U_read: np.ndarray, limit: float, floor: float) -> tuple[float, list[int], list, int]:
    """Margins at every joint choice of the live units' answers (the first is the query's own)."""
    n_live = hs.size
    n_points = N**n_live
    lowest = _Lowest(n_live, limit, floor)
    for idx, values in _point_chunks(N, n_live):
        v_read = np.broadcast_to(base, (idx.size, base.size)).copy()
        for j, hv in zip(values, hs):
            if hv != 0:
                v_read += hv * placed[j]
        answers = values[0] + offset
        if cube is not None:
            _, margins = hypercube_decode(cube, v_read, answers)
        else:
            margins = _decode_distinct(v_read, answers, U_read)
        lowest.add(margins, values)
    return lowest.low, lowest.low_values, lowest.failing, n_points


def _key(*parts) -> bytes:
    digest = hashlib.sha256()
    for part in parts:
        array = np.ascontiguousarray(part)
        digest.update(repr((array.shape, str(array.dtype))).encode())
        digest.update(array.tobytes())
    return digest.digest()


def _enumerate(N: int, n_live: int, c_pre: np.ndarray, c_read: np.ndarray, G_raw: list[np.ndarray],
               H_raw: list[np.ndarray], W2a_raw: np.ndarray, vectors: np.ndarray, offset: int, S: int, cube,
               U_read: np.ndarray, limit: float, floor: float) -> tuple[float, list[int], list, int]:
    """Margins at every point of the live slots' product (the first live slot answers): the minimum, its
    point, the lowest failing points (margin < ``limit`` or <= ``floor``) and the number of points."""
    n_points = N**n_live
    G_live, H_live, W2a = [_Right(G) for G in G_raw], [_Right(H) for H in H_raw], _Right(W2a_raw)
    lowest = _Lowest(n_live, limit, floor)
    for idx, values in _point_chunks(N, n_live):
        z = np.broadcast_to(c_pre, (idx.size, c_pre.size)).copy()
        v_read = np.broadcast_to(c_read, (idx.size, c_read.size)).copy()
        for j, G, H in zip(values, G_live, H_live):
            codes_j = vectors if (n_live == 1 and idx.size == N) else vectors[j]
            G.add_to(z, codes_j)
            H.add_to(v_read, codes_j)
        np.maximum(z, 0, out=z)
        W2a.add_to(v_read, z)
        answers = values[0] + offset
        if cube is not None:
            _, margins = hypercube_decode(cube, v_read, answers)
        elif n_live > 1:  # most points repeat a (residual, answer) pair: decode each distinct pair once
            margins = _decode_distinct(v_read, answers, U_read)
        else:
            _, margins = dense_decode(v_read, answers, U_read)
        margins = margins / S if S != 1 else margins
        lowest.add(margins, values)
    return lowest.low, lowest.low_values, lowest.failing, n_points


def _decode_distinct(v: np.ndarray, answers: np.ndarray, U_read: np.ndarray) -> np.ndarray:
    """Dense margins of rows ``v`` with their answers, decoding each distinct (row, answer) once: rows are
    grouped by a 64-bit hash of their bytes, and the grouping is then checked exactly (every row equal to its
    group's representative, bit for bit); on any collision every row is decoded."""
    bits = np.ascontiguousarray(v).view(np.uint64)
    key = answers.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for c in range(bits.shape[1]):
            key = (key ^ bits[:, c]) * np.uint64(0x100000001B3)
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    rep = first[inverse.reshape(-1)]
    if not (np.array_equal(bits, bits[rep]) and np.array_equal(answers, answers[rep])):
        return dense_decode(v, answers, U_read)[1]
    return dense_decode(np.ascontiguousarray(v[first]), answers[first], U_read)[1][inverse.reshape(-1)]


def _limits(threshold: float | None, promise: Promise | None, integer: bool,
            allowance: float) -> tuple[float, float]:
    """Margins below the first value, or at most the second, are definite failures: below the promise (in
    float mode by more than the forward-error allowance, never a multiple of the logit scale) or not
    positive."""
    if integer:
        return (threshold if threshold is not None else 0.0), 0.0
    if threshold is None:
        return -math.inf, -allowance
    return threshold - allowance, -allowance


def _stand_in(model: Model, vectors: np.ndarray) -> Model:
    """``model`` with a one-row entity table holding the codebook's largest magnitude: the magnitudes the
    forward-error bounds need (the family's own table is left out)."""
    bound = float(np.abs(vectors).max(initial=0.0))
    return Model(np.full((1, model.d), bound), model.relation_embedding, model.unembedding, model.layers,
                 model.position_embedding, readout_columns=model.readout_columns)


def _allowance(model: Model, vectors: np.ndarray, T: int, terms: int, weight_error: float = 0.0) -> float:
    """:func:`float_allowance` with the entity table's magnitude taken from the codebook."""
    return float_allowance(_stand_in(model, vectors), T, terms, weight_error)


def _preactivation_slack(model: Model, vectors: np.ndarray, T: int, terms: int, weight_error: float) -> float:
    """A bound on the float64 error of the certifier's per-unit maximum ``c_u + Σ_slot max_j <a_j, w>``
    (float mode): ``4·(γ_n·B_z + e_y·|W1|)`` with B_z the pre-activations' magnitude bound and e_y the
    attention output's error, as in :func:`float_allowance`. A unit is proved off only when its computed
    maximum is <= −slack; one within the slack is enumerated instead (sound either way)."""
    u = 2.0**-53
    probe = _stand_in(model, vectors)
    d = model.d

    def col(W) -> float:
        return float(np.abs(W).sum(axis=-2).max(initial=0.0))

    B = max(float(np.abs(probe.entity_embedding).max(initial=0.0)),
            float(np.abs(probe.relation_embedding).max(initial=0.0)))
    if probe.position_embedding is not None:
        B += float(np.abs(probe.position_embedding).max(initial=0.0))
    layer = probe.layers[0]
    att, mlp = layer.attention, layer.mlp
    assert mlp is not None
    pre = 0.0 if att is None else B * sum(col(att.W_V[h]) * col(att.W_O[h]) for h in range(att.heads))
    B_y = B + pre
    n = T * (1 if att is None else att.heads) * (2 * d + 2) + T + 8 + terms + d + 2
    e_y = n * u / (1 - n * u) * B_y + weight_error * pre
    B_z = B_y * col(mlp.W1) + float(np.abs(mlp.b1).max(initial=0.0))
    return 4.0 * (n * u / (1 - n * u) * B_z + e_y * col(mlp.W1))


def _reason(qt: _QueryType, live, active, zmax, piece, S, P) -> dict:
    """Why a query type is UNKNOWN: the units left possibly on that read slots besides the answer slot."""
    others = [(u, b) for u, b in live if (u, b) != qt.answer]
    culprits = []
    for u, b in others:
        pu = piece["u"][u]
        units = active[pu["G_any"][b][active]]
        for unit in units[:4]:
            culprits.append({"unit": int(unit), "max_preactivation": float(zmax[unit] / S),
                             "reads_slot": {"position": u, "slot": b},
                             "slot_range": [float(pu["lo"][b][unit] / S), float(pu["hi"][b][unit] / S)]})
        if pu["H_any"][b]:
            culprits.append({"read_out_reads_slot": {"position": u, "slot": b}})
    return {"query_type": qt.label, "live_slots": [{"position": u, "slot": b} for u, b in live],
            "points_needed": f"N^{len(live)}", "units": culprits[:16],
            "why": f"{len(others)} slot(s) besides the answer's stay live: units not proved off for every "
                   "task (per-slot maxima add up above 0) or a read-out reading them; enumerating their "
                   "joint codes exceeds the limit"}


def _witness_for(failing, types: list[_QueryType], N: int, R: int, k: int, attributes: str,
                 symmetric: bool, slots: str) -> tuple[Task, int, _QueryType, float, list[int]] | None:
    rows = paths(R, k) if slots == "paths" else None
    for margin, qi, values, live in failing:
        qt = types[qi]
        constraints = []
        starts: list[int | None] = []
        for (u, b), j in zip(live, values):
            if u == UNIT:  # a unit's row: slot b is (path or relation index, entity) flattened, b = w·N + e
                w, e = divmod(b, N)
                hops = [int(r) for r in rows[w][::-1]] if rows is not None else [w]
                constraints.append((hops, int(j)))
                starts.append(e)
                continue
            hops = [int(r) for r in rows[b][::-1]] if rows is not None else [b]  # slot b's relations, applied
            constraints.append((qt.prefix[u] + hops, int(j)))
            starts.append(None)
        subject = qt.tokens[-1] if qt.tokens and qt.tokens[-1] >= 0 else None
        found = realize(N, R, constraints, symmetric=symmetric, attributes=attributes, starts=starts,
                        subject=subject)
        if found is not None:
            task, s = found
            return task, s, qt, margin, values
    return None


def certify(spec, N: int, R: int, k: int = 1, *, codes: str | None = None, D: int | None = None,
            options: dict | None = None, seed: int = 0, attributes: str = "shared", symmetric: bool = False,
            max_points: int = MAX_POINTS, confirm: bool = True, progress: bool = False,
            budget: Budget | int | None = None) -> Certificate:
    """Certify a construction for every task (module docstring), or refute it with a confirmed witness.

    The certified object is the family ``M(π) = F ⊕ enc(π)`` that georecall assembles: F from the spec's
    ``family`` (a build that never sees a task; the spec's ``build``, which ``check`` runs, is that family
    assembled on the task), or, for a spec with only a ``build`` taking the task, F from its build on one
    task (:func:`family_of_builder`). Only the first can be CERTIFIED: for the second the family's verdict is
    reported as ``family_verdict`` and the construction's verdict stays UNKNOWN (what was established of the
    builder is in ``declaration["builder"]``), or REFUTED when the ordinary checker fails the builder on a
    witness task.

    Parameters
    ----------
    spec : ConstructionSpec or str
        The construction (registered name/id, ``MODULE:ATTR`` or a spec).
    N, R, k : int
        Sizes (k = 1 for single-hop constructions).
    codes, D : str, int or None
        Codebook kind and length, passed to the builder only when given (as for ``check``).
    options : dict
        Builder options (``gate``, ``beta``, ``attention``, ``gain``, ``integer``, ``lam``); one the spec
        does not take is refused.
    seed : int
        The run seed (codes stream; the seeded task is one of a task-taking builder's tasks).
    attributes, symmetric
        Task variant.
    max_points : int
        Largest enumeration per query type before UNKNOWN.
    confirm : bool
        Confirm a witness with the ordinary checker (``run_check`` on the witness task).
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The run's memory budget (``None``: the default budget): the certifier's estimate
        (:func:`georecall.memory.certify_estimate`) is required against it before anything is built, and
        the confirming check runs under it.

    Returns
    -------
    Certificate

    Raises
    ------
    DeclarationError
        The family breaks an assumption of the certificate, or a task-taking builder's declared table or
        other fields are not what its declaration says on a task built.
    InputError
        Bad parameters (as ``check``), or an estimate over the budget.
    """
    budget = as_budget(budget)
    start = time.perf_counter()
    spec = spec if not isinstance(spec, str) else registry.resolve(spec)
    options = {key: value for key, value in (options or {}).items() if value is not None}
    if "lam" in spec.accepts():
        options.setdefault("lam", 1.0)
    refused = sorted((set(options) | set(_code_options(codes, D))) - spec.accepts())
    if refused:
        raise InputError(f"{spec.label} does not take {', '.join(refused)}; it takes "
                         f"{', '.join(sorted(spec.accepts())) or 'no options'}")
    if spec.hops == "single" and k != 1:
        raise InputError(f"{spec.label} answers single-hop queries: k must be 1, got {k}")
    for variant, asked in (("disjoint", attributes == "disjoint"), ("symmetric", symmetric)):
        if asked and variant not in spec.variants:
            raise InputError(f"{spec.label} does not support {variant} relations/attributes")
    integer = bool(options.get("integer", False))
    attention = options.get("attention", "softmax" if spec.hops == "multi" else None)

    def label(kind: str) -> str:
        return f"{spec.id} {kind}{' int' if integer else ''}" + (
            " (hard attn, idealized)" if attention == "hard" else "")

    params = {"construction": spec.id, "N": N, "R": R, "k": k, "codes": codes, "D": D, "seed": seed,
              "attributes": attributes, "symmetric": symmetric, "integer": integer,
              **{key: v for key, v in options.items() if key != "integer"}}
    if spec.task_encoding is None:
        where = "its MLP" if spec.facts_in == "mlp" else "arrays it does not declare"
        return Certificate("UNKNOWN", label(codes or "default codes"), params, None, integer, reasons=[{
            "why": f"{spec.label} declares no task encoding: its facts live in {where}, and the certifier's "
                   "argument (a declared task table, every other field task-independent) does not apply; no "
                   "verdict for every task is given"}], seconds=time.perf_counter() - start)
    memory.certify_estimate(spec, N, R, k, codes or "binary", D, chunk_points=CHUNK_POINTS).require(budget)
    structural = spec.assembles_family  # check builds exactly the family certified
    if structural:
        family = _family(spec, N, R, k, codes, D, seed, options, attributes)
        record = check_family(spec, family)
    else:
        family, record = family_of_builder(spec, N, R, k, codes=codes, D=D, options=options, seed=seed,
                                           attributes=attributes, symmetric=symmetric)
    encoding = family.encoding
    blocks = np.asarray(family.layout[encoding.blocks])
    params["codes"] = family.codes.kind
    params["D"] = family.codes.D
    params.update({key: family.constants[key] for key in ("gate", "beta") if key in family.constants})

    def confirm_with_check(task: Task, prompt: list[int]) -> dict:
        """``check`` on the witness task (as ``georecall check --task`` runs it), and THE forward pass with
        dense logits on the witness query itself; ``same_object``: the checked model equals the family's
        ``F ⊕ enc(witness)`` on every field the forward pass reads."""
        report = run_check(spec, N, R, k, seed=seed, codes=codes, D=D, options={**options},
                           attributes=attributes, symmetric=symmetric, task=task,  # type: ignore[arg-type]
                           budget=budget)
        rebuilt = _build(spec, task, k, codes, D, seed, options)
        same = not _same_fields(rebuilt.model, assemble_model(family, task))
        tokens = np.asarray([prompt], dtype=np.int64)
        if spec.decoding == "greedy":
            target = task.table[prompt[k - 1] - N, prompt[k]]  # step 1's answer; then the true chain
            chain = [int(target)]
            for t in range(2, k + 1):
                chain.append(int(task.table[prompt[k - t] - N, chain[-1]]))
            single = check_decoding(rebuilt.model, tokens, np.asarray([chain]), forward="dense",
                                    decoder="dense")
        else:
            s_, path = prompt[-1], [t - N for t in prompt[:-1]][::-1]
            answer = int(task.compose(path)[s_]) + (path[0] * N if attributes == "disjoint" else 0)
            single = check_queries(rebuilt.model, tokens, np.asarray([answer]), integer=integer,
                                   forward="dense", decoder="dense")
        return {"check_passed": report.passed, "min_margin": report.result.min_margin,
                "accuracy": report.result.accuracy, "same_object": same,
                "forward_pass": {"forward": single.forward, "decoder": single.decoder,
                                 "margin": single.min_margin, "correct": single.exact}}

    cert = certify_built(family.model, encoding, blocks, family.codes.vectors, N, R, k, family.promise,
                         integer=integer, attributes=attributes, symmetric=symmetric, max_points=max_points,
                         progress=progress, confirm=confirm_with_check if confirm else None,
                         name=label(family.codes.kind), params=params, constants=family.constants)
    cert.declaration = record
    cert.family_verdict = cert.verdict
    if structural and cert.verdict == "CERTIFIED" and spec.id in registry.BUILTIN_IDS:
        # a built-in family is a function of (N, R, k, options, the seed's codes stream): tested against
        # check's build on every forward field (tests/test_certify.py), not rebuilt here (2^20 codes)
        record["deterministic"] = True
    elif structural and cert.verdict == "CERTIFIED":
        # check builds spec.build = the family assembled on the task: the same object only if the family
        # builder returns the same F again (a builder drawing from a global stream would not)
        fingerprint = record["fingerprint"]
        del family
        again = _family(spec, N, R, k, codes, D, seed, options, attributes)
        if family_fingerprint(again) != fingerprint:
            cert.verdict = "UNKNOWN"
            cert.reasons.append({"why": "the family builder returned a different F on a second call with the "
                                        "same options and seed: check would not build the object certified"})
        record["deterministic"] = cert.verdict == "CERTIFIED"
    elif not structural and cert.verdict == "CERTIFIED":
        cert.verdict = "UNKNOWN"
        margin = cert.min_margin_exact or f"{cert.min_margin:.6g}"
        cert.reasons.append({"why": f"the family F ⊕ enc(π) that georecall assembled from {spec.label}'s "
                                    f"build on one task is CERTIFIED (every task: margin >= {margin}); the "
                                    f"builder itself takes the task, and it {record['builder']}. It is not "
                                    "certified: give the spec a task-free family (ConstructionSpec(family="
                                    "...)) to certify the construction"})
    if cert.verdict == "REFUTED" and cert.confirmation is not None and not structural:
        cert.reasons.append({"why": "REFUTED: the ordinary checker fails the builder on the witness task"})
    cert.seconds = time.perf_counter() - start
    return cert


def certify_built(model: Model, encoding: TaskEncoding, blocks: np.ndarray, vectors: np.ndarray, N: int,
                  R: int, k: int, promise: Promise | None, *, integer: bool = False,
                  attributes: str = "shared", symmetric: bool = False, max_points: int = MAX_POINTS,
                  progress: bool = False, confirm: Callable[[Task, list[int]], dict] | None = None,
                  name: str = "", params: dict | None = None, constants: dict | None = None) -> Certificate:
    """The verdict for a model whose entity table is the declared superposition (its own table unread).

    Parameters
    ----------
    model : Model
        The construction's model (any entity table: only the declared encoding is used).
    encoding, blocks, vectors
        The declared encoding, its ``(P, D)`` coordinates and the codebook.
    N, R, k : int
        Sizes.
    promise : Promise or None
        The margin and sizes to certify (None: margin > 0, sizes unchecked).
    integer, attributes, symmetric, max_points, progress
        As in :func:`certify`.
    confirm : callable, optional
        ``confirm(task, prompt) -> dict`` with ``check_passed``: the ordinary checker on a witness task;
        REFUTED only when it fails there (without ``confirm``, a realizable failing point is REFUTED
        directly).
    name, params
        For the report.
    constants : dict, optional
        The family's constants (steps: ``step_scale``).

    Returns
    -------
    Certificate
    """
    start = time.perf_counter()
    params = dict(params or {})
    out: dict[str, Any]  # as the certify_* functions return it: one value type per key
    if encoding.array == "steps":
        scale = (constants or {}).get("step_scale")
        out = ({"unsupported": "steps need the family's step_scale"} if scale is None else
               certify_steps(model, blocks, vectors, N, R, k, promise, step_scale=float(scale),
                             integer=integer, progress=progress))
    elif encoding.array == W2_ARRAY:
        out = certify_rows(model, encoding, blocks, vectors, N, R, k, promise, integer=integer,
                           attributes=attributes, max_points=max_points, progress=progress)
    else:
        out = certify_model(model, encoding, blocks, vectors, N, R, k, promise, integer=integer,
                            attributes=attributes, symmetric=symmetric, max_points=max_points,
                            progress=progress)
    cert = Certificate("UNKNOWN", name, params, promise, integer)
    if "unsupported" in out:
        cert.reasons.append({"why": out["unsupported"]})
        cert.seconds = time.perf_counter() - start
        return cert
    cert.query_types, cert.points = out["types"], out["points"]
    cert.units_shut, cert.units_enumerated = out["shut"], out["enumerated"]
    cert.allowance = out["allowance"]
    types = out["types_list"]
    if out["argmin"] is not None:
        qi, values, live, S, scaled = out["argmin"]
        cert.min_margin = out["min"]
        if integer:
            exact = Fraction(int(round(scaled)), S)
            cert.min_margin_exact = str(exact)
            cert.min_margin = float(exact)
        cert.argmin = {"query_type": types[qi].label,
                       "slots": [{"position": u, "slot": b, "code": j} for (u, b), j in zip(live, values)]}
    cert.reasons += out["reasons"]
    lower = None if cert.min_margin is None else cert.min_margin - cert.allowance
    complete = not out["reasons"]
    threshold = 0.0 if promise is None else promise.margin
    # one answer only (N = 1, shared attributes): no competitor, every point answered; no margin exists,
    # as for check (its minimum margin is then None)
    unopposed = out["argmin"] is None and out["points"] > 0 and out["min"] == math.inf
    if unopposed:
        meets = True
    elif lower is None or cert.min_margin is None:
        meets = False
    elif integer:
        meets = cert.min_margin > 0 and cert.min_margin >= threshold
    else:  # float: certified margin > 0, and the minimum within the forward-error allowance of the promise
        meets = lower > 0 and cert.min_margin >= threshold - cert.allowance
    sizes_ok = promise is None or (model.d == promise.d and model.mlp_width == promise.m)
    if complete and meets and sizes_ok:
        cert.verdict = "CERTIFIED"
    elif out["failing"]:
        found = _witness_for(out["failing"], types, N, R, k, attributes, symmetric,
                             "paths" if encoding.array == "steps" else encoding.slots)
        if found is None:
            cert.reasons.append({"why": f"{len(out['failing'])} point(s) of the product set fall below the "
                                        "promise, but the search found no task realizing one",
                                 "lowest_margin": out["failing"][0][0]})
        else:
            task, s, qt, margin, values = found
            tokens = [s if t < 0 else t for t in qt.tokens[: len(qt.tokens) - len(qt.entity_positions) + 1]]
            cert.witness = {"subject": s, "query_type": qt.label, "prompt_tokens": tokens, "margin": margin,
                            "promised": threshold}
            cert.witness_table = task.table
            if confirm is not None:
                cert.confirmation = confirm(task, tokens)
                if not cert.confirmation["check_passed"]:
                    cert.verdict = "REFUTED"
                else:
                    cert.reasons.append({"why": "the witness task passed the ordinary checker: not "
                                                "confirmed"})
            else:
                cert.verdict = "REFUTED"
    elif complete and not sizes_ok:
        assert promise is not None
        cert.reasons.append({"why": f"sizes d = {model.d}, m = {model.mlp_width} differ from the promise's "
                                    f"d = {promise.d}, m = {promise.m}"})
    elif complete and lower is not None:
        cert.reasons.append({"why": f"float mode: the certified margin {lower:.6g} (minimum "
                                    f"{cert.min_margin:.6g} minus the allowance {cert.allowance:.3g}) does "
                                    f"not reach the promise {threshold:.6g}, and no point is definitely "
                                    "below it"})
    cert.seconds = time.perf_counter() - start
    return cert
