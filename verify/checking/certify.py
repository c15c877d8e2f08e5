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

Modules, one concept each: ``certify_family`` (the family and what is checked of it), ``certify_relaxation``
(query types, the linear pieces, the float allowances), ``certify_product`` (units shut, live slots
enumerated), ``certify_layers`` (A2(b) layer by layer), ``certify_witness`` (tasks that realize a failing
point), ``certify_check`` (the ordinary checker: falsification first, a witness confirmed); this module
holds the verdict (:class:`Certificate`, :func:`certify`, :func:`certify_built`) and re-exports the public
names of the others.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import numbers
import operator
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from georecall import estimates, memory
from georecall.constructions import registry
from georecall.constructions.canonical import canonical_array, canonical_family, canonical_model
from georecall.constructions.encoding import TaskEncoding
from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.memory import Budget, as_budget
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task
from georecall.verify.checking.certify_check import confirm_with_check, falsify_with_check
from georecall.verify.checking.certify_codes import compact_binary_codes
from georecall.verify.checking.certify_family import (
    W2_ARRAY,
    DeclarationError,
    build_family,
    check_family,
    declaration_tasks,
    family_fingerprint,
    family_of_builder,
    without_declared,
)
from georecall.verify.checking.certify_layers import certify_steps
from georecall.verify.checking.certify_product import certify_model, certify_rows
from georecall.verify.checking.certify_relaxation import (
    CHUNK_BYTES,
    CHUNK_POINTS,
    MAX_POINTS,
    Unsupported,
    float_allowance,
)
from georecall.verify.checking.certify_witness import realize, witness_for
from georecall.verify.checking.decoders import DENSE_BLOCK_ELEMENTS
from georecall.verify.checking.run import validate_request

__all__ = [
    "CHUNK_POINTS",
    "MAX_POINTS",
    "UNKNOWN_STATUS",
    "VERDICTS",
    "Certificate",
    "DeclarationError",
    "certify",
    "certify_built",
    "certificate_fingerprint",
    "certify_estimate",
    "certify_model",
    "certify_rows",
    "certify_steps",
    "check_family",
    "compact_codes_apply",
    "declaration_tasks",
    "exact_int",
    "family_fingerprint",
    "family_of_builder",
    "float_allowance",
    "realize",
    "without_declared",
]

VERDICTS = ("CERTIFIED", "REFUTED", "UNKNOWN")
UNKNOWN_STATUS = 4  # the exit code of UNKNOWN (0 CERTIFIED, 1 REFUTED, 2 bad input, 3 a bug)


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
    fingerprint: str | None = None  # of the canonical family and options certified (certificate_fingerprint)

    @property
    def passed(self) -> bool:
        """Whether the verdict is "CERTIFIED"."""
        return self.verdict == "CERTIFIED"

    def as_dict(self) -> dict:
        """The certificate as a JSON-able dict (what ``georecall certify --json`` reports): every field but
        ``witness_table``, the promise as its dict, ``passed``, and ``certified_margin = min_margin −
        allowance``."""
        return {"name": self.name, "verdict": self.verdict, "passed": self.passed, "params": self.params,
                "promise": None if self.promise is None else self.promise.as_dict(), "integer": self.integer,
                "min_margin": self.min_margin, "min_margin_exact": self.min_margin_exact,
                "allowance": self.allowance,
                "certified_margin": (None if self.min_margin is None else self.min_margin - self.allowance),
                "query_types": self.query_types, "points": self.points, "units_shut": self.units_shut,
                "units_enumerated": self.units_enumerated, "argmin": self.argmin, "witness": self.witness,
                "reasons": self.reasons, "declaration": self.declaration, "seconds": round(self.seconds, 4),
                "confirmation": self.confirmation, "family_verdict": self.family_verdict,
                "fingerprint": self.fingerprint}


def exact_int(name: str, value, minimum: int = 1) -> int:
    """``value`` as an exact Python ``int``: any ``numbers.Integral`` (NumPy integers included; not a bool),
    so that no count (``N ** len(live)``, points, chunks) is computed in a fixed-width integer.

    Parameters
    ----------
    name : str
        The parameter, for the message.
    value : numbers.Integral
    minimum : int
        The smallest value allowed.

    Returns
    -------
    int

    Raises
    ------
    InputError
        Not an integer, a bool, or below ``minimum`` (the message names ``name``).
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise InputError(f"{name} must be an integer, got {value!r}")
    exact = int.__index__(operator.index(value))  # a plain int, whatever subclass ``index`` returned
    if exact < minimum:
        raise InputError(f"{name} must be >= {minimum}, got {exact}")
    return exact


def compact_codes_apply(spec, codes: str | None, integer: bool) -> bool:
    """Whether certify hands the family a compact binary codebook (``certify_codes``): a built-in family
    (``spec.family``, whose ``codes`` option takes a codebook) with a declared entity table, in integer mode,
    with binary codes (asked for, or the default).

    Parameters
    ----------
    spec : ConstructionSpec
    codes : str or None
        The codes asked for (None: the builder's default, binary for the built-in single-hop families).
    integer : bool
        Integer mode.

    Returns
    -------
    bool
    """
    encoding = spec.task_encoding
    return bool(integer and spec.assembles_family and spec.id in registry.BUILTIN_IDS
                and (codes or spec.codes) == "binary" and encoding is not None
                and encoding.array == "entity_embedding" and "codes" in spec.accepts())


def certify_estimate(spec, N: int, R: int, k: int = 1, codes: str | None = None, D: int | None = None, *,
                     integer: bool = False, attributes: str = "shared") -> memory.Estimate:
    """Peak bytes of :func:`certify`, as named parts, estimated before anything is allocated.

    The codebook: binary codes stored as float16 where :func:`compact_codes_apply` (2 bytes per entry, the
    read-out sharing them, and one byte per entry while the family's codebook is validated); otherwise as
    ``make_codes`` forms it (±1 codes: int64 bits, a float64 temporary and the float64 signs, 24 bytes per
    entry at its peak; Gaussian: 16). The decoder: the hypercube decoder's sign patterns and row index when
    the read-out can be one (``N = 2^D``), else the read-out as float64 when it is stored narrower. A builder
    that takes the task is built on three tasks (tasks and entity tables). Then the weights without the
    entity table, the per-position maps, one chunk of points (``certify_relaxation.CHUNK_BYTES``: chunks are
    sized to it) and, where THE forward pass runs over the queries (facts in W2, steps), its activations.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction (its ``nominal_promise`` gives d and m at binary codes).
    N, R, k : int
        Entities, relations, hops.
    codes, D : str, int or None
        Codebook kind (None: the construction's own, ``spec.codes``) and length.
    integer : bool
        Integer mode.
    attributes : str
        "disjoint" answers N·R ids.

    Returns
    -------
    georecall.memory.Estimate
    """
    kind = codes or spec.codes or "binary"  # no codes of its own: counted as binary (an upper bound)
    est = memory.Estimate(f"certify {spec.hops}-hop")
    D_used = estimates.code_length(kind, N, D)
    promise = spec.nominal_promise(N, R, k)
    d, m = promise.d * max(1.0, D_used / max(1, (N - 1).bit_length())), promise.m
    n_out = N * R if attributes == "disjoint" else N
    entries = N * D_used  # codes
    compact = compact_codes_apply(spec, codes, integer)
    if compact:
        est.add("binary codes as float16, shared by the read-out", 2 * entries, "N")
        est.add("validating the codebook (one byte per entry, at once)", entries, "N")
    else:
        est.add("codes as make_codes forms them (and the read-out)", (24 if kind != "gaussian" else 16)
                * entries, "N")
    if n_out == 2**D_used:  # a compact codebook is its own sign patterns (certify_codes.binary_hypercube)
        est.add("hypercube decoder (row index" + ("" if compact else ", sign patterns") + ")",
                8 * n_out + (0 if compact else n_out * D_used), "N")
    else:
        est.add("dense decoder blocks", 2 * 8 * DENSE_BLOCK_ELEMENTS, "N")
        if compact:
            est.add("the read-out as float64 for the dense decoder", 8 * n_out * D_used, "N")
    if not spec.assembles_family:  # a task-taking builder is built thrice
        est.add("tasks built for the declaration check", 8 * 3 * N * (R + (R**k if k > 1 else 0)) * 2,
                "N or R")
        est.add("entity tables of those builds", 8 * 2 * N * int(d), "N or R")
    est.add("weights without the entity table", int(8 * 4 * d * m), "R or k")
    est.add("per-position maps S·C_u, their W1 products", int(8 * 4 * (2 * k) * (d * d + d * m)), "R or k")
    est.add("one chunk of points (sized to fit)", CHUNK_BYTES, "N")
    encoding = spec.task_encoding
    if encoding is not None and encoding.array != "entity_embedding":  # THE forward pass over the queries
        est.add("hidden activations of a chunk of queries (facts in W2, steps)", 8 * 8 * 2**22, "R or k")
    return est


def certify(spec, N: int, R: int, k: int = 1, *, codes: str | None = None, D: int | None = None,
            options: dict | None = None, seed: int = 0, attributes: str = "shared", symmetric: bool = False,
            max_points: int = MAX_POINTS, confirm: bool = True, progress: bool = False,
            budget: Budget | None = None, falsify: bool = True) -> Certificate:
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
    falsify : bool
        Before any relaxation, check THE seeded task (and, below ``certify_check.FALSIFY_DRAWN_BELOW``
        queries, two drawn tasks) with the ordinary checker; a query wrong there is REFUTED at once (skipped
        above ``certify_check.FALSIFY_QUERIES`` queries per task).
    progress : bool
        Progress on stderr.
    budget : Budget or None
        The run's memory budget (``None``: the default budget): the certifier's estimate
        (:func:`certify_estimate`) is required against it before anything is built, and the confirming
        check runs under it.

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
    req = _request(spec, N, R, k, codes=codes, D=D, options=options, seed=seed, attributes=attributes,
                   symmetric=symmetric, max_points=max_points, confirm=confirm, progress=progress,
                   budget=budget, falsify=falsify)
    params = _params(req)
    if req.spec.task_encoding is None:
        return _undeclared(req, params, start)
    certify_estimate(req.spec, req.N, req.R, req.k, req.codes, req.D, integer=req.integer,
                     attributes=req.attributes).require(req.budget)
    family, record = _checked_family(req)
    _family_params(params, family)
    fingerprint = certificate_fingerprint(family, params, record.get("fingerprint"))
    # falsify before relaxing: the ordinary checker on the seeded task (and, small, a few drawn ones); a
    # query it finds wrong in exact arithmetic is a witness, and no relaxation is needed
    falsified = falsify_with_check(
        req.spec, req.N, req.R, req.k, codes=req.codes, D=req.D, options=req.options, seed=req.seed,
        attributes=req.attributes, symmetric=req.symmetric, budget=req.budget, record=record,
        family=family if req.structural and req.spec.decoding == "last" else None,
        integer=req.integer) if req.falsify else None
    if falsified is not None:
        cert = _refuted_by_check(req, family, record, params, fingerprint, falsified)
    else:
        cert = _relaxed(req, family, record, params, fingerprint)
        del family  # the builder's rebuilds below hold one family at a time
        _builder_verdict(req, cert, record)
    cert.seconds = time.perf_counter() - start
    return cert


@dataclass(frozen=True)
class _Request:
    """What :func:`certify` was asked, validated (:func:`_request`)."""

    spec: Any  # ConstructionSpec, resolved
    N: int
    R: int
    k: int
    codes: str | None
    D: int | None
    options: dict  # as validate_request returns them
    seed: int
    attributes: str
    symmetric: bool
    max_points: int
    confirm: bool
    progress: bool
    budget: Budget
    falsify: bool
    integer: bool  # integer mode (the ``integer`` option)
    attention: str | None  # the attention option, or the multi-hop default
    structural: bool  # spec.assembles_family: check builds exactly the family certified
    compact: bool  # compact_codes_apply: the family gets a compact binary codebook

    def label(self, kind: str) -> str:
        """The certificate's name for codes of ``kind``: the spec, the codes, the integer mode and the
        variant of the task family certified (``disjoint`` attributes, ``symmetric`` relations)."""
        variants = "".join(f" {variant}" for variant, on in (("disjoint", self.attributes == "disjoint"),
                                                             ("symmetric", self.symmetric)) if on)
        return f"{self.spec.id} {kind}{' int' if self.integer else ''}{variants}" + (
            " (hard attn, idealized)" if self.attention == "hard" else "")


def _request(spec, N, R, k, *, codes, D, options, seed, attributes, symmetric, max_points, confirm, progress,
             budget, falsify) -> _Request:
    """Decide whether the request is well formed: exact integer sizes, the spec resolved, options it takes."""
    N, R, k, seed = exact_int("N", N), exact_int("R", R), exact_int("k", k), exact_int("seed", seed, 0)
    D, max_points = (None if D is None else exact_int("D", D)), exact_int("max_points", max_points)
    spec = spec if not isinstance(spec, str) else registry.resolve(spec)
    options = validate_request(spec, options=options, codes=codes, D=D, k=k, attributes=attributes,
                               symmetric=symmetric)
    integer = bool(options.get("integer", False))
    attention = options.get("attention", "softmax" if spec.hops == "multi" else None)
    return _Request(spec, N, R, k, codes, D, options, seed, attributes, symmetric, max_points, confirm,
                    progress, budget, falsify, integer, attention, structural=spec.assembles_family,
                    compact=compact_codes_apply(spec, codes, integer))


def _params(req: _Request) -> dict:
    """The certificate's parameters as asked (codes and D are replaced by the family's own once built)."""
    return {"construction": req.spec.id, "N": req.N, "R": req.R, "k": req.k, "codes": req.codes,
            "D": req.D, "seed": req.seed, "attributes": req.attributes, "symmetric": req.symmetric,
            "integer": req.integer,
            **{key: v for key, v in req.options.items() if key != "integer"}}


def _undeclared(req: _Request, params: dict, start: float) -> Certificate:
    """UNKNOWN for a spec that declares no task encoding: the certifier's argument does not apply."""
    spec = req.spec
    where = "its MLP" if spec.facts_in == "mlp" else "arrays it does not declare"
    name = req.label(req.codes or "default codes")
    return Certificate("UNKNOWN", name, params, None, req.integer, reasons=[{
        "why": f"{spec.label} declares no task encoding: its facts live in {where}, and the certifier's "
               "argument (a declared task table, every other field task-independent) does not apply; no "
               "verdict for every task is given"}], seconds=time.perf_counter() - start)


def _checked_family(req: _Request):
    """Build the canonical family certified and decide whether it meets the certificate's assumptions:
    ``(family, record)``; the spec's task-free family, or a task-taking builder's build on one task."""
    spec = req.spec
    # the canonical object (constructions.canonical): plain arrays, exact scalars, no cache. A built-in
    # family's plain read-only arrays are taken without a copy (nobody else holds them); any other is copied
    if req.structural:
        trusted = spec.family in _builtin_families()
        codes = compact_binary_codes(req.N, req.D) if req.compact else req.codes
        built = build_family(spec, req.N, req.R, req.k, codes, req.D, req.seed, req.options, req.attributes)
        family = _canonical(spec, built, trusted)
        del built
        record = check_family(spec, family)
        if req.compact:
            record["codebook"] = ("binary codes at integer scale stored as float16 (every entry ±1, exact): "
                                  "the values make_codes gives, so the family check builds in every value")
        return family, record
    family, record = family_of_builder(spec, req.N, req.R, req.k, codes=req.codes, D=req.D,
                                       options=req.options, seed=req.seed, attributes=req.attributes,
                                       symmetric=req.symmetric)
    return _canonical(spec, family, False), record


def _family_params(params: dict, family) -> None:
    """Set the codes, D and constants in ``params`` to the family's own (what was certified)."""
    params["codes"] = family.codes.kind
    params["D"] = family.codes.D
    params.update({key: family.constants[key] for key in ("gate", "beta", "attention")
                   if key in family.constants})


def _refuted_by_check(req: _Request, family, record: dict, params: dict, fingerprint: str,
                      falsified) -> Certificate:
    """REFUTED before any relaxation: the ordinary checker found a query wrong (``falsify_with_check``)."""
    task, failure, result = falsified
    N, structural = req.N, req.structural
    tokens = [int(t) for t in failure["tokens"]]
    threshold = 0.0 if family.promise is None else family.promise.margin
    return Certificate("REFUTED", req.label(family.codes.kind), params, family.promise, req.integer,
                       witness={"subject": tokens[-1],
                                "query_type": {"relations": [t - N for t in tokens if t >= N]},
                                "prompt_tokens": tokens, "margin": failure["margin"],
                                "promised": threshold},
                       witness_table=task.table, declaration=record,
                       family_verdict="REFUTED" if structural else None, fingerprint=fingerprint,
                       confirmation={"check_passed": False, "accuracy": result.accuracy,
                                     "min_margin": result.min_margin, "same_object": structural,
                                     "wrong_queries": result.n_wrong, "queries": result.n_queries},
                       reasons=[{"why": f"REFUTED before any relaxation: the ordinary checker finds "
                                        f"{result.n_wrong:,} of {result.n_queries:,} "
                                        f"{record['falsification']['queries']} wrong on "
                                        f"{record['falsification']['failed_on']}"}])


def _relaxed(req: _Request, family, record: dict, params: dict, fingerprint: str) -> Certificate:
    """The family's verdict over the product set (relax, prove, enumerate; a witness confirmed by check)."""
    encoding = family.encoding
    blocks = np.array(family.layout[encoding.blocks], dtype=np.int64, copy=True)  # a plain index array
    confirm = functools.partial(
        confirm_with_check, req.spec, family, N=req.N, R=req.R, k=req.k, codes=req.codes, D=req.D,
        options=req.options, seed=req.seed, attributes=req.attributes, symmetric=req.symmetric,
        integer=req.integer, compact=req.compact, budget=req.budget) if req.confirm else None
    cert = _certify_canonical(family.model, encoding, blocks, family.codes.vectors, req.N, req.R, req.k,
                              family.promise, integer=req.integer, attributes=req.attributes,
                              symmetric=req.symmetric, max_points=req.max_points, progress=req.progress,
                              confirm=confirm, name=req.label(family.codes.kind), params=params,
                              constants=family.constants)
    cert.declaration = record
    cert.family_verdict = cert.verdict
    cert.fingerprint = fingerprint
    return cert


def _builder_verdict(req: _Request, cert: Certificate, record: dict) -> None:
    """Decide whether the family's verdict is the construction's: a built-in family is; another family only
    if rebuilding it gives the same F; a task-taking builder is never CERTIFIED."""
    spec, structural = req.spec, req.structural
    if structural and cert.verdict == "CERTIFIED" and spec.id in registry.BUILTIN_IDS:
        # a built-in family is a function of (N, R, k, options, the seed's codes stream): tested against
        # check's build on every forward field (tests/test_certify.py), not rebuilt here (2^20 codes)
        record["deterministic"] = True
    elif structural and cert.verdict == "CERTIFIED":
        record["rebuilds"] = _rebuilds(req, record["fingerprint"])
        if not record["rebuilds"]["same"]:
            cert.verdict = "UNKNOWN"
            cert.reasons.append({"why": "the family builder returned a different F on another call with the "
                                        "same options and seed (builds compared: 3, the last with a neutral "
                                        "sys.argv): check would not build the object certified"})
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


def _rebuilds(req: _Request, first: str) -> dict:
    """Decide whether the family builder returns the same F again (``first``: its fingerprint).

    check builds spec.builder = the family assembled on the task: the same object only if the family builder
    returns the same F again (a builder drawing from a global stream, counting its calls or reading the
    command line would not). Built twice more, the last time with a neutral sys.argv: what an in-process
    rebuild can see; state it cannot see is not detected (docs/certify.md).
    """
    calls = []
    for neutral in (False, True):
        saved = list(sys.argv)
        if neutral:
            sys.argv[:] = saved[:1]
        try:
            built = build_family(req.spec, req.N, req.R, req.k, req.codes, req.D, req.seed, req.options,
                                 req.attributes)
            again = _canonical(req.spec, built, False)
            del built
        finally:
            sys.argv[:] = saved
        calls.append(family_fingerprint(again))
        del again
    return {"builds": 1 + len(calls), "same": all(f == first for f in calls)}


def _builtin_families() -> set:
    """The built-in constructions' family functions (georecall's own: nobody else holds their arrays)."""
    return {registry.get(key).family for key in registry.BUILTIN_IDS} - {None}


def _canonical(spec, family, trusted: bool):
    """``canonical_family`` with its refusal as the spec's declaration error (named)."""
    try:
        return canonical_family(family, copy=not trusted)
    except InputError as exc:
        raise DeclarationError(f"{spec.label}: its family is not made of plain values: {exc}") from None


def certificate_fingerprint(family, params: dict, family_hash: str | None = None) -> str:
    """``sha256:<hex>`` over the canonical family (``certify_family.family_fingerprint``: every forward
    field, the codebook, the declared blocks, encoding, sizes, promise) and the certificate's options.

    Parameters
    ----------
    family : Family
        Canonical (``constructions.canonical.canonical_family``).
    params : dict
        The certificate's parameters (construction, sizes, codes, seed, options).
    family_hash : str, optional
        ``family_fingerprint(family)`` when already computed (``check_family``'s record): not hashed again
        (a 2^24-code codebook takes seconds).

    Returns
    -------
    str
    """
    digest = hashlib.sha256(b"georecall-certificate-1\0")
    digest.update((family_hash or family_fingerprint(family)).encode())
    digest.update(json.dumps(params, sort_keys=True, default=repr).encode())
    return "sha256:" + digest.hexdigest()


def certify_built(model: Model, encoding: TaskEncoding, blocks: np.ndarray, vectors: np.ndarray, N: int,
                  R: int, k: int, promise: Promise | None, *, integer: bool = False,
                  attributes: str = "shared", symmetric: bool = False, max_points: int = MAX_POINTS,
                  progress: bool = False, confirm: Callable[[Task, list[int]], dict] | None = None,
                  name: str = "", params: dict | None = None, constants: dict | None = None) -> Certificate:
    """The verdict for a model whose entity table is the declared superposition (its own table unread).

    Parameters
    ----------
    model : Model
        The construction's model (any entity table: only the declared encoding is used); made canonical
        first (``constructions.canonical``: plain arrays, exact scalars, no cache), as are the codebook and
        the blocks.
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
    # the canonical object (plain read-only arrays are not copied)
    return _certify_canonical(canonical_model(model, copy=False), encoding,
                              canonical_array(blocks, "the declared blocks", integer=True, copy=False),
                              canonical_array(vectors, "the codebook", copy=False), exact_int("N", N),
                              exact_int("R", R), exact_int("k", k), promise, integer=integer,
                              attributes=attributes, symmetric=symmetric,
                              max_points=exact_int("max_points", max_points), progress=progress,
                              confirm=confirm, name=name, params=params, constants=constants)


def _certify_canonical(model: Model, encoding: TaskEncoding, blocks: np.ndarray, vectors: np.ndarray, N: int,
                       R: int, k: int, promise: Promise | None, *, integer: bool, attributes: str,
                       symmetric: bool, max_points: int, progress: bool,
                       confirm: Callable[[Task, list[int]], dict] | None, name: str, params: dict | None,
                       constants: dict | None) -> Certificate:
    """:func:`certify_built` on a model, codebook and blocks already canonical and sizes already exact ints
    (``certify`` made them so itself; nothing outside this module calls it)."""
    start = time.perf_counter()
    params = dict(params or {})
    out = _product_set(model, encoding, blocks, vectors, N, R, k, promise, integer=integer,
                       attributes=attributes, symmetric=symmetric, max_points=max_points, progress=progress,
                       constants=constants)
    cert = Certificate("UNKNOWN", name, params, promise, integer)
    if "unsupported" in out:
        cert.reasons.append({"why": out["unsupported"]})
        cert.seconds = time.perf_counter() - start
        return cert
    # one possible answer (the answer count, never an empty minimum): no competitor, every point answered;
    # no margin exists, as for check (its minimum margin is then None)
    unopposed = int(model.n_out) == 1 and out["points"] > 0
    _record_minimum(cert, out, integer, unopposed)
    _verdict(cert, out, model, encoding, N, R, k, attributes=attributes, symmetric=symmetric,
             unopposed=unopposed, confirm=confirm)
    cert.seconds = time.perf_counter() - start
    return cert


def _product_set(model: Model, encoding: TaskEncoding, blocks: np.ndarray, vectors: np.ndarray, N: int,
                 R: int, k: int, promise: Promise | None, *, integer: bool, attributes: str, symmetric: bool,
                 max_points: int, progress: bool, constants: dict | None) -> dict[str, Any]:
    """The minimum over the product set, by the computation the declared array calls for (or unsupported)."""
    out: dict[str, Any]  # as the certify_* functions return it: one value type per key
    try:
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
    except Unsupported as exc:  # e.g. a forward-error bound that overflows float64
        out = {"unsupported": str(exc)}
    return out


def _record_minimum(cert: Certificate, out: dict[str, Any], integer: bool, unopposed: bool) -> None:
    """The counts, the minimum margin (exact in integer mode), its point and the reasons, into ``cert``."""
    cert.query_types, cert.points = out["types"], out["points"]
    cert.units_shut, cert.units_enumerated = out["shut"], out["enumerated"]
    cert.allowance = out["allowance"]
    types = out["types_list"]
    if out["argmin"] is not None and not unopposed:
        qi, values, live, S, scaled = out["argmin"]
        cert.min_margin = out["min"]
        if integer and math.isfinite(scaled):
            exact = Fraction(int(round(scaled)), S)
            cert.min_margin_exact = str(exact)
            cert.min_margin = float(exact)
        cert.argmin = {"query_type": types[qi].label,
                       "slots": [{"position": u, "slot": b, "code": j} for (u, b), j in zip(live, values)]}
    cert.reasons += out["reasons"]


def _meets_promise(cert: Certificate, integer: bool, unopposed: bool) -> bool:
    """Whether the minimum (less the float allowance) reaches the promised margin."""
    lower = None if cert.min_margin is None else cert.min_margin - cert.allowance
    threshold = 0.0 if cert.promise is None else cert.promise.margin
    if unopposed:
        return True
    if lower is None or cert.min_margin is None:
        return False
    if integer:
        return cert.min_margin > 0 and cert.min_margin >= threshold
    # float: certified margin > 0, and the minimum within the forward-error allowance of the promise
    return lower > 0 and cert.min_margin >= threshold - cert.allowance


def _verdict(cert: Certificate, out: dict[str, Any], model: Model, encoding: TaskEncoding, N: int, R: int,
             k: int, *, attributes: str, symmetric: bool, unopposed: bool,
             confirm: Callable[[Task, list[int]], dict] | None) -> None:
    """CERTIFIED, REFUTED by a witness task, or UNKNOWN with the reason why, into ``cert``."""
    promise, types = cert.promise, out["types_list"]
    lower = None if cert.min_margin is None else cert.min_margin - cert.allowance
    complete = not out["reasons"]
    threshold = 0.0 if promise is None else promise.margin
    meets = _meets_promise(cert, cert.integer, unopposed)
    sizes_ok = promise is None or (model.d == promise.d and model.mlp_width == promise.m)
    if complete and meets and sizes_ok:
        cert.verdict = "CERTIFIED"
    elif out.get("step_witness") is not None:  # steps: a task the branching search found
        task, s, w, margin = out["step_witness"]
        _report_witness(cert, task, s, types[w], margin, threshold, confirm)
    elif out["failing"]:
        found = witness_for(out["failing"], types, N, R, k, attributes, symmetric,
                            "paths" if encoding.array == "steps" else encoding.slots)
        if found is None:
            cert.reasons.append({"why": f"{len(out['failing'])} point(s) of the product set fall below the "
                                        "promise, but the search found no task realizing one",
                                 "lowest_margin": out["failing"][0][0]})
        else:
            task, s, qt, margin, _ = found
            _report_witness(cert, task, s, qt, margin, threshold, confirm)
    elif complete and not sizes_ok:
        assert promise is not None
        cert.reasons.append({"why": f"sizes d = {model.d}, m = {model.mlp_width} differ from the promise's "
                                    f"d = {promise.d}, m = {promise.m}"})
    elif complete and lower is not None:
        cert.reasons.append({"why": f"float mode: the certified margin {lower:.6g} (minimum "
                                    f"{cert.min_margin:.6g} minus the allowance {cert.allowance:.3g}) does "
                                    f"not reach the promise {threshold:.6g}, and no point is definitely "
                                    "below it"})


def _report_witness(cert: Certificate, task: Task, s: int, qt, margin: float, threshold: float,
                    confirm: Callable[[Task, list[int]], dict] | None) -> None:
    """Record a candidate witness in ``cert``: REFUTED when the ordinary checker fails it (``confirm``), or
    directly without ``confirm``; otherwise a reason saying it was not confirmed."""
    tokens = [s if t < 0 else t for t in qt.tokens[: len(qt.tokens) - len(qt.entity_positions) + 1]]
    cert.witness = {"subject": s, "query_type": qt.label, "prompt_tokens": tokens, "margin": margin,
                    "promised": threshold}
    cert.witness_table = task.table
    if confirm is None:
        cert.verdict = "REFUTED"
        return
    cert.confirmation = confirm(task, tokens)
    if not cert.confirmation["check_passed"]:
        cert.verdict = "REFUTED"
        return
    exact = cert.confirmation.get("exact_margin")
    promise = cert.promise
    if exact is not None and promise is not None and exact[1] < promise.margin:
        # check passes a margin below the promise: within its float allowance (rounding relative to the
        # logits' magnitude bounded from the stored weights, report.margin_reaches)
        tolerance = cert.confirmation.get("check_tolerance")
        why = (f"not confirmed by check, so not REFUTED: on the witness task the query {tokens} has exact "
               f"margin in [{exact[0]:.6g}, {exact[1]:.6g}] (exact arithmetic on the stored weights), below "
               f"the promise {promise.margin:.6g}, but check passes it within its float allowance for the "
               "rounding of the weights (report.margin_reaches)")
        cert.reasons.append({"why": why, "exact_margin": exact, "check_tolerance": tolerance})
    else:
        cert.reasons.append({"why": "the witness task passed the ordinary checker: not confirmed"})
