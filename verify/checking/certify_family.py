"""The family certify proves, and what it checks of it (docs/theory.md, "Certification for every task").

A spec with a ``family`` gives F from a call that never sees a task: :func:`check_family` checks the
assumptions F1–F5 of the certificate exactly (``encoding.validate_family``) and fingerprints F. A spec whose
builder takes the task gets F from its build on one task (:func:`family_of_builder`), compared on the
:func:`declaration_tasks` field by field (:func:`same_fields`, every field THE forward pass reads); such a
builder is never CERTIFIED itself.
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from georecall.constructions import registry
from georecall.constructions.encoding import Family, FamilyError, TaskEncoding, validate_family
from georecall.constructions.model import MLP, Layer, Model, forward_fields
from georecall.constructions.single_hop import Construction
from georecall.errors import InputError
from georecall.theory import seeds
from georecall.theory.tasks import Task, task_for_seed

__all__ = [
    "DeclarationError",
    "W2_ARRAY",
    "build_family",
    "build_on_task",
    "check_family",
    "code_options",
    "declaration_tasks",
    "family_fingerprint",
    "family_of_builder",
    "same_fields",
    "without_declared",
]

W2_ARRAY = "layers.0.mlp.W2"  # the declared array of facts in W2's rows (A1, A2(a))


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


def code_options(codes, D) -> dict:
    """``codes`` and ``D`` as builder options, each only when given (a spec that does not take them is never
    passed them).

    Parameters
    ----------
    codes : Codes or str or None
        The codebook or its kind, or None (not given).
    D : int or None
        The code length, or None (not given).

    Returns
    -------
    dict
        ``{"codes": codes, "D": D}`` without the entries that are None.
    """
    return {name: value for name, value in (("codes", codes), ("D", D)) if value is not None}


def build_on_task(spec, task: Task, k: int, codes, D: int | None, seed: int, options: dict) -> Construction:
    """``spec.builder`` as ``check`` calls it: code options only when given, the codes stream of the
    seed.

    Parameters
    ----------
    spec : ConstructionSpec
        Its ``builder(task, k, *, rng, [codes], [D], **options)`` is called.
    task : Task
        The facts to build on.
    k : int
        Hops.
    codes : Codes or str or None
        The codebook or its kind; passed only when not None.
    D : int or None
        The code length; passed only when not None.
    seed : int
        The run's seed; the builder's ``rng`` is its ``"codes"`` stream (:func:`georecall.theory.seeds.rng`).
    options : dict
        The builder's own options, passed as keywords.

    Returns
    -------
    Construction
        What the builder returns (anything it raises propagates).
    """
    return spec.builder(task, k, rng=seeds.rng(seed, "codes"), **code_options(codes, D), **options)


def build_family(spec, N: int, R: int, k: int, codes, D: int | None, seed: int, options: dict,
                 attributes: str) -> Family:
    """``spec.family`` as ``check`` reaches it (through ``spec.builder``, the family assembled on the
    task): the same options and codes stream, and no task.

    Parameters
    ----------
    spec : ConstructionSpec
        Its ``family(N, R, k, *, attributes, rng, [codes], [D], **options)`` is called.
    N, R, k : int
        Entities, relations and hops.
    codes : Codes or str or None
        The codebook or its kind; passed only when not None.
    D : int or None
        The code length; passed only when not None.
    seed : int
        The run's seed; the family's ``rng`` is its ``"codes"`` stream (:func:`georecall.theory.seeds.rng`).
    options : dict
        The builder's own options, passed as keywords.
    attributes : str
        ``"shared"`` or ``"disjoint"``.

    Returns
    -------
    Family
        What ``spec.family`` returns (anything it raises propagates).
    """
    return spec.family(N, R, k, attributes=attributes, rng=seeds.rng(seed, "codes"),
                       **code_options(codes, D), **options)


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


def same_fields(a: Model, b: Model, *, values_only: bool = False) -> str:
    """'' when the two models agree exactly on every field THE forward pass reads (``FORWARD_FIELDS``), else
    the first field that differs. ``values_only``: arrays are compared by shape and values, not dtype (a
    compact codebook's float16 read-out against the float64 one: the same numbers).

    Parameters
    ----------
    a, b : Model
        The two models (:func:`~georecall.constructions.model.forward_fields` of each is compared).
    values_only : bool
        Compare arrays by shape and values only, not by dtype. Other fields are compared by type and
        ``repr`` (floats by their exact repr, never by a tolerance).

    Returns
    -------
    str
        ``""`` when they agree; otherwise the name of the first field that differs, or ``"the fields [...]"``
        naming the fields only one of them has.
    """
    fa, fb = forward_fields(a), forward_fields(b)
    if fa.keys() != fb.keys():
        return f"the fields {sorted(set(fa) ^ set(fb))}"
    for name, x in fa.items():
        y = fb[name]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.shape == y.shape
                    and (values_only or x.dtype == y.dtype) and np.array_equal(x, y)):
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
        built = build_on_task(spec, task, k, codes, D, seed, options)
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
        differs = same_fields(rest, fixed)
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
    contradiction = registry.encoding_contradiction(spec, family)
    if contradiction:
        raise DeclarationError(contradiction)
    return {"object": "the family F ⊕ enc(π), F from a build that never saw a task", "tasks_built": 0,
            "checked": ["F1 declared table absent from F", "F2 declared block shape", "F3 codebook",
                        "F4 sizes", "F5 query kind", "encoding = the spec's"],
            "fingerprint": family_fingerprint(family)}


def family_fingerprint(family: Family) -> str:
    """A SHA-256 of everything a family contributes to ``F ⊕ enc(π)``: every field THE forward pass reads
    (:func:`~georecall.constructions.model.forward_fields`: names, shapes, dtypes, bytes, scalars), the
    codebook, the declared coordinates, the encoding and the sizes. Arrays are hashed through their buffers
    (no copy of a 2^24-code read-out).

    Parameters
    ----------
    family : Family

    Returns
    -------
    str
    """
    digest = hashlib.sha256()
    for name, value in forward_fields(family.model).items():
        digest.update(name.encode() + b"\0")
        if isinstance(value, np.ndarray):
            _hash_array(digest, value)
        else:
            digest.update(repr(value).encode())
    for array in (family.codes.vectors, np.asarray(family.layout[family.encoding.blocks])):
        _hash_array(digest, array)
    digest.update(repr((family.encoding.as_dict(), family.N, family.R, family.k, family.attributes,
                        family.promise.as_dict())).encode())
    return digest.hexdigest()


def _hash_array(digest, array: np.ndarray) -> None:
    """Shape, dtype and bytes of ``array`` into ``digest``, through its buffer (a copy only when it is not
    contiguous)."""
    array = np.ascontiguousarray(array)
    digest.update(repr((array.shape, array.dtype.str)).encode())
    digest.update(array.reshape(-1).view(np.uint8))
