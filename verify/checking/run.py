"""Build a registered construction on a task and check every query: the one home of "check a model".

:func:`run_check` validates the options against the spec, requires the one memory estimate against the budget,
builds the construction on THE seeded task (or the task given), and checks every query with the checker
(:mod:`.check`): the last position's argmax, or greedy decoding of every chain plus teacher forcing for a
chain-of-thought construction. :func:`check_single_hop` and :func:`check_multi_hop` are its two command-line
shapes; :func:`precision_scan` quantizes the built model at each b and checks it again
(:mod:`.precision`). The bits claims the registry carries (:func:`precision_cases`, :func:`table_bits`,
:func:`per_parameter_bits`, :func:`not_covered`) are read here too.

Everything above the checker imports this module downward: the certifier's confirming check
(:mod:`.certify`), the rows of ``georecall verify`` (:mod:`georecall.verify.sections`), the figures and the
command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from georecall import estimates
from georecall.constructions import (
    builder_options,
    registry,
    storage,  # the module: tests replace save_model there
)
from georecall.constructions.building import Construction, assemble
from georecall.constructions.canonical import model_fingerprint
from georecall.constructions.model import Model
from georecall.constructions.registry import BitsClaim, ConstructionSpec
from georecall.errors import InputError
from georecall.memory import Budget, Estimate, as_budget
from georecall.theory import seeds
from georecall.theory.tasks import Attributes, Task, check_positive_int, task_for_seed
from georecall.theory.tokens import queries, teacher_forcing
from georecall.verify.checking.certify_family import DeclarationError  # certify's refusal, shared
from georecall.verify.checking.check import check_decoding, check_queries
from georecall.verify.checking.exact import evaluate
from georecall.verify.checking.precision import CODEBOOK, quantize, smallest_exact_bits
from georecall.verify.checking.report import Report, achieved_sizes, check_construction, margin_reaches

__all__ = [
    "CheckRequest",
    "OPTION_FLAGS",
    "check_estimate",
    "check_multi_hop",
    "check_request",
    "check_single_hop",
    "not_covered",
    "per_parameter_bits",
    "precision_cases",
    "precision_scan",
    "run_check",
    "table_bits",
    "validate_request",
]

# What each shared builder option is called in a message naming a refused option (its declaration's ``what``;
# an option a spec declares itself is named by its own declaration: ``registry.option_text``).
OPTION_FLAGS = {name: option.what for name, option in builder_options.BUILDER_OPTIONS.items()}


def check_estimate(spec: ConstructionSpec, N: int, R: int, k: int, codes: str | None, **sizes) -> Estimate:
    """The memory estimate of :func:`run_check` (or, with ``bits=1``, of :func:`precision_scan`): the one a
    caller requires before reading its own input and then passes on as ``estimate=``.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction.
    N, R, k : int
        Entities, relations, hops.
    codes : str or None
        Codebook kind; ``None`` (the builder's default) is left to the estimate's own default (the nominal
        sizes, ``D = ⌈log2 N⌉``), never named here.
    **sizes
        The rest of :func:`georecall.estimates.check_estimate`'s keywords (``D``, ``dtype``, ``bits``,
        ``integer``, ``attributes``, ``what``, ``budget``).

    Returns
    -------
    Estimate
    """
    code_option: dict[str, Any] = {} if codes is None else {"codes": codes}
    return estimates.check_estimate(spec, N, R, k, **code_option, **sizes)


def validate_request(spec: ConstructionSpec, *, options: dict | None = None, codes: str | None = None,
                     D: int | None = None, k: int | None = None, attributes: str = "shared",
                     symmetric: bool = False) -> dict:
    """What a spec is asked for, checked in one place with one wording (check, certify, precision, export):
    the builder options it takes, the hops it answers and the variants it supports.

    Parameters
    ----------
    spec : ConstructionSpec
    options : dict or None
        Builder options; an option whose value is None is not asked.
    codes, D : optional
        The codebook kind and code length, when asked.
    k : int or None
        Hops (None: not checked).
    attributes : str
        ``"shared"`` or ``"disjoint"``.
    symmetric : bool
        Symmetric relations.

    Returns
    -------
    dict
        The options asked (None values dropped), with λ = 1 when the spec takes λ and none was given, and a
        real-valued option given as an int made the float the command line would pass.

    Raises
    ------
    InputError
        An option the spec does not take (naming what it takes), ``k != 1`` for a single-hop spec, or a
        variant it does not support.
    """
    options = {key: value for key, value in (options or {}).items() if value is not None}
    if "lam" in spec.accepts():
        options.setdefault("lam", 1.0)
    asked = set(options) | {name for name, value in (("codes", codes), ("D", D)) if value is not None}
    refused = asked - spec.accepts()
    if refused:
        raise InputError(f"{spec.label} does not take {registry.option_text(refused, spec)}; it takes: "
                         f"{registry.option_text(spec.accepts(), spec) or 'no options'}")
    if options.get("integer") and codes == "gaussian":
        raise InputError("gaussian codes have no integer scale: --integer needs binary or sign codes")
    if k is not None and spec.hops == "single" and k != 1:
        raise InputError(f"{spec.label} answers single-hop queries: k must be 1, got {k}")
    for variant, wanted in (("disjoint", attributes == "disjoint"), ("symmetric", symmetric)):
        if wanted and variant not in spec.variants:
            raise InputError(f"{spec.label} does not support {variant} relations/attributes")
    return {name: _as_declared(spec, name, value) for name, value in options.items()}


def _as_declared(spec: ConstructionSpec, name: str, value):
    """A real-valued option (kind ``positive`` or ``scale``) given as a Python int is the float the command
    line's parser would make of it: ``lam=2`` and ``--lam 2`` build, record and fingerprint the same
    object."""
    own = {option.name: option for option in spec.own_options}
    declared = own.get(name) or registry.builder_option(name)
    real = declared is not None and declared.kind in ("positive", "scale")
    return float(value) if real and isinstance(value, int) and not isinstance(value, bool) else value


def _spec(construction: str | ConstructionSpec) -> ConstructionSpec:
    return construction if isinstance(construction, ConstructionSpec) else registry.resolve(construction)


def run_check(
    construction: str | ConstructionSpec,
    N: int,
    R: int,
    k: int = 1,
    *,
    seed: int = 0,
    codes: str | None = None,
    D: int | None = None,
    options: dict | None = None,
    dtype: str = "float64",
    bits: int | None = None,
    attributes: Attributes = "shared",
    symmetric: bool = False,
    task: Task | None = None,
    save: str | None = None,
    keep: bool = False,
    budget: Budget | None = None,
    estimate: Estimate | None = None,
    progress: bool = False,
    compare_storage: bool = False,
) -> Report:
    """Build a registered construction on THE seeded task (``task_for_seed(N, R, seed)``) and check every
    query.

    A driver over named stages: validate (:func:`check_request`, a :class:`CheckRequest`) → estimate →
    build (and save) → check, in one of three shapes: a quantized model (``bits``), the last position's
    argmax, or greedy decoding with teacher forcing (a chain-of-thought spec).

    Before anything is built, the one memory estimate (:func:`georecall.estimates.check_estimate`: weights,
    codes, every query, the checker's chunks) is required against ``budget``; over it, the check is refused
    naming the estimate, its largest part and the sizes to lower. A caller that required that estimate
    already, before reading its own input (the command line), passes it as ``estimate``: the guard runs once
    per check.

    ``task``: check on this task instead; its N and R must equal ``N`` and ``R`` (``InputError`` otherwise)
    and its attributes variant must be one the construction supports. ``codes`` and ``D`` are passed to the
    builder only when given (a construction that does not declare them among its common options refuses
    them); ``None`` means the builder's own default (binary codes of length ⌈log2 N⌉ for the built-in ones).
    ``options`` are the builder's own options (``gate``, ``beta``, ``attention``, ``gain``, ``integer``, ...);
    one the construction does not take raises ``InputError`` naming it (never dropped). Decoding follows the
    spec: argmax at the last position, or, for chain-of-thought, greedy decoding of every chain (the report's
    result) plus every step under teacher forcing (``extra_checks``). ``bits`` quantizes every weight tensor
    first (the margin promise, stated for exact weights, then no longer applies; only exactness is required).
    ``compare_storage``: when the built read-out is stored compactly, check the same model stored densely too
    and add the extra check that both give the same predictions and margins (``georecall verify`` does).

    Parameters
    ----------
    construction : str or ConstructionSpec
        A registered id or name, ``MODULE:ATTR``, or a spec.
    N, R, k : int
        Entities, relations, hops (1 for a single-hop construction).
    seed : int
        The run seed (task and codes streams).
    codes, D : str, int or None
        Codebook kind and length (``None``: the builder's default).
    options : dict, optional
        The builder's own options; ``None`` values are dropped.
    dtype : str
        Working precision, "float32" or "float64".
    bits : int, optional
        Quantize every weight tensor to ``2^bits`` values first.
    attributes, symmetric
        Task variant.
    task : Task, optional
        Check on this task instead of the seeded one.
    save : str, optional
        Save the built model there (``constructions.storage.save_model``).
    keep : bool
        Keep per-query predictions and margins in the result.
    budget : Budget, optional
        The run's memory budget (``None``: ``Budget.default()``).
    estimate : Estimate, optional
        This check's estimate (:func:`georecall.estimates.check_estimate` with the same arguments), already
        required against ``budget`` by the caller; ``None``: made and required here.
    progress : bool
        Progress on stderr.
    compare_storage : bool
        Also check the dense storage of a compact read-out.

    Returns
    -------
    Report

    Raises
    ------
    InputError
        Bad sizes or options, a task that does not fit, an unsupported variant, or an estimate over the
        budget (raised before anything is built).
    """
    request = check_request(construction, N, R, k, seed=seed, codes=codes, D=D, options=options, dtype=dtype,
                            bits=bits, attributes=attributes, symmetric=symmetric, task=task, save=save,
                            keep=keep, budget=budget, progress=progress, compare_storage=compare_storage)
    if estimate is None:  # the one guard of this check (a caller that made it passes it on)
        _estimate(request).require(request.budget)
    task = request.task or task_for_seed(request.N, request.R, request.seed, attributes=request.attributes,
                                         symmetric=request.symmetric)
    built = _build(request, task)
    if request.bits is not None:
        return _check_quantized(request, task, built, request.bits)
    if request.spec.decoding == "greedy":
        return _check_greedy(request, task, built)
    return _check_last_token(request, task, built)


@dataclass(frozen=True)
class CheckRequest:
    """What :func:`run_check` was asked, validated (:func:`check_request`): the stages (estimate, build,
    check) read it and nothing else. Fields as :func:`run_check`'s parameters; ``options`` without the unset
    ones and with λ's default; ``attributes`` the task's when a task is given; ``budget`` resolved."""

    spec: ConstructionSpec
    N: int
    R: int
    k: int
    seed: int
    codes: str | None
    D: int | None
    options: dict
    dtype: str
    bits: int | None
    attributes: Attributes
    symmetric: bool
    task: Task | None
    save: str | None
    keep: bool
    budget: Budget
    progress: bool
    compare_storage: bool

    @property
    def integer(self) -> bool:
        """Integer mode (the builder's ``integer`` option)."""
        return bool(self.options.get("integer", False))

    @property
    def code_options(self) -> dict:
        """``codes`` and ``D``, passed to the builder only when given."""
        return {name: value for name, value in (("codes", self.codes), ("D", self.D)) if value is not None}


def check_request(construction: str | ConstructionSpec, N: int, R: int, k: int = 1, *, seed: int = 0,
                  codes: str | None = None, D: int | None = None, options: dict | None = None,
                  dtype: str = "float64", bits: int | None = None, attributes: Attributes = "shared",
                  symmetric: bool = False, task: Task | None = None, save: str | None = None,
                  keep: bool = False, budget: Budget | None = None, progress: bool = False,
                  compare_storage: bool = False) -> CheckRequest:
    """The validate stage of :func:`run_check`: its arguments checked (sizes, dtype, the task's fit, what the
    spec takes: :func:`validate_request`) into a :class:`CheckRequest`. Parameters as :func:`run_check`'s
    (but ``estimate``, which is the next stage's).

    Parameters
    ----------
    construction : str or ConstructionSpec
        A registered id or name, ``MODULE:ATTR``, or a spec (resolved by ``registry.resolve``).
    N, R, k : int
        Entities, relations, hops (1 for a single-hop construction); each must be a positive integer.
    seed : int
        The run seed (task and codes streams).
    codes, D : str, int or None
        Codebook kind and length (``None``: the builder's default).
    options : dict, optional
        The builder's own options; ``None`` values are dropped.
    dtype : str
        Working precision, "float32" or "float64".
    bits : int, optional
        Quantize every weight tensor to ``2^bits`` values first.
    attributes, symmetric
        Task variant; with ``task``, ``attributes`` is the task's own (a non-default value must agree).
    task : Task, optional
        Check on this task instead of the seeded one; its N and R must be ``N`` and ``R``.
    save : str, optional
        Where to save the built model.
    keep : bool
        Keep per-query predictions and margins in the result.
    budget : Budget, optional
        The run's memory budget (``None``: ``Budget.default()``).
    progress : bool
        Progress on stderr.
    compare_storage : bool
        Also check the dense storage of a compact read-out.

    Returns
    -------
    CheckRequest
        The checked arguments, ``options`` as :func:`validate_request` returns them and the budget resolved.

    Raises
    ------
    InputError
        Bad sizes, dtype or options, a task that does not fit, an unsupported variant, or ``bits`` with
        integer mode; an unknown construction (and whatever else ``registry.resolve`` refuses).
    UserCodeError
        A user's construction module raised while being imported.
    """
    spec = _spec(construction)
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    if dtype not in ("float32", "float64"):
        raise InputError(f"dtype must be float32 or float64, got {dtype!r}")
    if task is not None:
        if not isinstance(task, Task):
            raise InputError(f"task must be a Task, got {type(task).__name__}")
        if (task.N, task.R) != (N, R):
            raise InputError(f"the task has N = {task.N}, R = {task.R}, but N = {N}, R = {R} were asked: "
                             "pass the task's own sizes (run_check(spec, task.N, task.R, task=task))")
        if attributes != "shared" and attributes != task.attributes:
            raise InputError(f"attributes={attributes!r} disagrees with the task's {task.attributes!r}")
        attributes = task.attributes
    options = validate_request(spec, options=options, codes=codes, D=D, k=k, attributes=attributes,
                               symmetric=symmetric)
    if bits is not None and options.get("integer", False):
        raise InputError("--bits and --integer do not combine: quantized weights are not integers")
    return CheckRequest(spec, N, R, k, seed, codes, D, options, dtype, bits, attributes, symmetric, task,
                        save, keep, as_budget(budget), progress, compare_storage)


def _estimate(request: CheckRequest) -> Estimate:
    """The estimate stage: this check's one memory estimate (:func:`check_estimate`)."""
    r = request
    return check_estimate(r.spec, r.N, r.R, r.k, r.codes, D=r.D, dtype=r.dtype, bits=r.bits,
                          integer=r.integer,
                          attributes=r.attributes, what=f"checking {r.spec.label}", budget=r.budget)


def _build(request: CheckRequest, task: Task) -> Construction:
    """The build stage: the construction on ``task`` (codes from the seed's ``codes`` stream), saved when
    asked.

    A spec whose build is its family assembled on the task (``spec.assembles_family``: the object certify
    proves) is built as that build does, ``assemble(family(N, R, k, attributes=..., **options), task)``, in
    two steps so that the family's declared task encoding is compared with the spec's first: a family that
    contradicts it is refused (:class:`~.certify_family.DeclarationError`, certify's wording). The build
    itself (``registry.family_build``, whose one closure cell ``assembles_family`` reads) is left as it is.

    Raises
    ------
    DeclarationError
        The family declares another task encoding than the spec.
    """
    r = request
    keywords = {"rng": seeds.rng(r.seed, "codes"), **r.code_options, **r.options}
    family = r.spec.family
    if family is not None and r.spec.assembles_family:
        made = family(task.N, task.R, r.k, attributes=task.attributes, **keywords)
        contradiction = registry.encoding_contradiction(r.spec, made)
        if contradiction:
            raise DeclarationError(contradiction)
        built = assemble(made, task)
    else:
        built = r.spec.builder(task, r.k, **keywords)
    if r.save is not None:
        storage.save_model(built.model, r.save, extra_arrays={"task_table": task.table}, N=task.N, R=task.R,
                           k=r.k, construction=r.spec.id, codes=built.codes.kind, seed=r.seed,
                           options=r.options)
    return built


def _row(request: CheckRequest, task: Task, built) -> tuple[str, dict]:
    """The report's name (what its verdict rests on: exact integers, or certified float margins) and
    parameters."""
    r = request
    attention = r.options.get("attention", "softmax" if r.spec.hops == "multi" else None)
    name = f"{r.spec.id} {built.codes.kind}{' int (exact)' if r.integer else ' float (certified)'}" + (
        " (hard attn, idealized)" if attention == "hard" else ""
    )
    params = {
        "N": task.N,
        "R": task.R,
        "k": r.k,
        "D": built.codes.D,
        "construction": r.spec.id,
        "codes": built.codes.kind,
        "seed": r.seed,
        "dtype": "float64" if r.integer else r.dtype,
        "bits": r.bits,
        "attributes": task.attributes,
        "symmetric": r.symmetric,
        **r.options,
        **{key: built.constants[key] for key in ("gate", "beta", "attention") if key in built.constants},
    }
    return name, params


def _check_quantized(request: CheckRequest, task: Task, built, bits: int) -> Report:
    """The check stage with ``bits``: the quantized model, every query exact (the margin promise, stated for
    exact weights, no longer applies)."""
    r = request
    name, params = _row(r, task, built)
    tokens, answers = queries(task, r.k)
    model = quantize(built.model, bits).astype(np.dtype(r.dtype))
    if r.spec.decoding == "greedy":
        result = check_decoding(model, tokens, teacher_forcing(task, r.k)[1], keep=r.keep,
                                progress=r.progress,
                                budget=r.budget)
    else:
        result = check_queries(model, tokens, answers, keep=r.keep, progress=r.progress, budget=r.budget)
    return Report(f"{name} @{bits} bits", params, None, result, achieved_sizes(model),
                  {"promise (exact weights)": built.promise.as_dict()})


def _check_last_token(request: CheckRequest, task: Task, built) -> Report:
    """The check stage of a construction read at the last position: every query against the promise, and the
    dense storage of a compact read-out when asked."""
    r = request
    name, params = _row(r, task, built)
    tokens, answers = queries(task, r.k)
    report = check_construction(name, params, built, tokens, answers, integer=r.integer,
                                dtype=None if r.integer else np.dtype(r.dtype),
                                                                      keep=r.keep or r.compare_storage,
                                progress=r.progress, budget=r.budget)
    if r.compare_storage and built.model.compact:
        dense_result = check_queries(built.model.with_dense_readout(), tokens, answers, integer=r.integer,
                                     keep=True, budget=r.budget)
        _storage_agreement(report, dense_result, r.integer)
    report.extra["fingerprint"] = _fingerprint(built.model)
    return report


def _check_greedy(request: CheckRequest, task: Task, built) -> Report:
    """The check stage of a chain-of-thought construction: greedy decoding of every chain (the report's
    result) and every step under teacher forcing (its extra checks)."""
    r = request
    name, params = _row(r, task, built)
    tokens, _ = queries(task, r.k)
    same = r.integer or built.model.entity_embedding.dtype == np.dtype(r.dtype)
    model = built.model if same else built.model.astype(np.dtype(r.dtype))  # astype copies every array
    forced_tokens, targets, positions = teacher_forcing(task, r.k)
    if r.integer:  # integer weights: the float64 pass is exact, its bound 0
        greedy_result = check_decoding(model, tokens, targets, keep=r.keep or r.compare_storage,
                                       progress=r.progress, budget=r.budget)
        forced = check_queries(model, forced_tokens, targets, positions=positions, budget=r.budget)
    else:  # as a last-token check: a chain or step the float bound leaves open is decided exactly
        greedy_result = evaluate(model, tokens, targets, decode=True, keep=r.keep or r.compare_storage,
                                 progress=r.progress, budget=r.budget)
        forced = evaluate(model, forced_tokens, targets, positions=positions, budget=r.budget)
    report = Report(name, params, built.promise, greedy_result, achieved_sizes(built.model),
                    {"constants": built.constants, "codes": built.codes.kind, "mu": built.codes.mu,
                     "teacher_forcing": forced.as_dict()})
    report.extra_checks["teacher forcing: every step exact"] = forced.exact
    report.extra_checks["teacher forcing: margin >= promise"] = margin_reaches(
        forced.min_margin, built.promise.margin, forced.dtype, scale=forced.logit_bound,
        bound=forced.rounding_bound)
    if r.compare_storage and model.compact:
        dense_result = check_decoding(model.with_dense_readout(), tokens, targets, keep=True, budget=r.budget)
        _storage_agreement(report, dense_result, r.integer)
    report.extra["fingerprint"] = _fingerprint(model)
    return report


FINGERPRINT_BYTES = 2**30  # larger models are not hashed by check (a SHA-256 of 1 GiB takes seconds)


def _fingerprint(model: Model) -> str | None:
    """``constructions.canonical.model_fingerprint`` of the model checked (its arrays read in row blocks,
    never copied), or None above :data:`FINGERPRINT_BYTES`."""
    if sum(int(a.nbytes) for a in model.arrays().values()) > FINGERPRINT_BYTES:
        return None
    return model_fingerprint(model)


def _storage_agreement(report: Report, dense, integer: bool) -> None:
    """Add the extra check that the dense storage of a compact read-out gives the same predictions and margins
    (identical in integer mode; in float mode to 1e-9 relative, since BLAS may sum the read-out's nonzero
    terms in another order when the zero columns are present)."""
    compact = report.result
    assert compact.predictions is not None and dense.predictions is not None  # both checked with keep=True
    assert compact.margins is not None and dense.margins is not None
    same = bool(np.array_equal(compact.predictions, dense.predictions))
    if integer:
        same = same and bool(np.array_equal(compact.margins, dense.margins))
    else:
        same = same and bool(np.allclose(compact.margins, dense.margins, rtol=1e-9, atol=0.0))
    report.extra["dense_storage"] = {"forward": dense.forward, "decoder": dense.decoder,
                                     "min_margin": dense.min_margin}
    report.extra_checks["compact and dense read-out storage agree"] = same


def check_single_hop(
    N: int,
    R: int,
    *,
    construction: str = "geometric",
    codes: str | None = None,
    D: int | None = None,
    seed: int = 0,
    integer: bool = False,
    gate: float | None = None,
    beta: float | None = None,
    lam: float = 1.0,
    options: dict | None = None,
    **kwargs,
) -> Report:
    """:func:`run_check` for a single-hop construction (G1 by default).

    Parameters
    ----------
    N, R : int
        Entities and relations.
    construction : str
        A single-hop construction's id or name.
    codes, D, seed
        As for :func:`run_check`.
    integer : bool
        Integer mode (exact margins).
    gate, beta, lam : float or None
        Builder constants (``None``: the builder's defaults).
    options : dict, optional
        Further builder options (a spec's own), beside those above.
    **kwargs
        The rest of :func:`run_check`'s keywords (``budget``, ``dtype``, ``bits``, ``attributes``, ...).

    Returns
    -------
    Report

    Raises
    ------
    InputError
        A k-hop construction, or anything :func:`run_check` refuses.
    """
    spec = _spec(construction)
    if spec.hops != "single":
        raise InputError(f"{spec.label} is a k-hop construction: use check multi-hop")
    named = {"gate": gate, "beta": beta, "lam": lam, **({"integer": True} if integer else {})}
    return run_check(spec, N, R, 1, seed=seed, codes=codes, D=D, options={**named, **(options or {})},
                     **kwargs)


def check_multi_hop(
    N: int,
    R: int,
    k: int,
    *,
    construction: str = "path-blocks",
    codes: str | None = None,
    D: int | None = None,
    attention: str = "softmax",
    beta: float | None = None,
    gate: float | None = None,
    seed: int = 0,
    options: dict | None = None,
    **kwargs,
) -> Report:
    """:func:`run_check` for a k-hop construction (G2 by default), softmax or (idealized) hard attention.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.
    construction : str
        A k-hop construction's id or name.
    codes, D, seed
        As for :func:`run_check`.
    attention : str
        "softmax" or "hard" (the idealization, labelled).
    beta, gate : float or None
        Builder constants (``None``: the builder's defaults).
    options : dict, optional
        Further builder options (a spec's own), beside those above.
    **kwargs
        The rest of :func:`run_check`'s keywords (``budget``, ``keep``, ``progress``, ...).

    Returns
    -------
    Report

    Raises
    ------
    InputError
        A single-hop construction, or anything :func:`run_check` refuses.
    """
    spec = _spec(construction)
    if spec.hops != "multi":
        raise InputError(f"{spec.label} is a single-hop construction: use check single-hop")
    return run_check(
        spec,
        N,
        R,
        k,
        seed=seed,
        codes=codes,
        D=D,
        options={"attention": attention, "beta": beta, "gate": gate, **(options or {})},
        **kwargs,
    )


def precision_scan(
    construction: str | ConstructionSpec,
    N: int,
    R: int,
    k: int | None = None,
    *,
    codes: str | None = None,
    D: int | None = None,
    seed: int = 0,
    max_bits: int = 24,
    budget: Budget | None = None,
    estimate: Estimate | None = None,
) -> dict:
    """Smallest bits per parameter at which a construction stays exact on every query of THE seeded task
    (greedy decoding for chain-of-thought). ``k=None``: a single-hop construction; otherwise a k-hop one.

    Parameters
    ----------
    construction : str or ConstructionSpec
        The construction.
    N, R : int
        Entities and relations.
    k : int or None
        Hops of a k-hop construction; ``None`` for a single-hop one.
    codes, D : str, int or None
        Codebook kind and length (``None``: the builder's default).
    seed : int
        The run seed.
    max_bits : int
        Largest bits per parameter tried.
    budget : Budget, optional
        The memory budget: the estimate of a quantized build and check
        (:func:`georecall.estimates.check_estimate` with ``bits``) is required against it before the build,
        and the checker's chunks are sized from it.
    estimate : Estimate, optional
        That estimate, already required by the caller (``None``: made and required here).

    Returns
    -------
    dict
        The smallest exact bits (``None`` when none up to ``max_bits``) and one record per bits tried.

    Raises
    ------
    InputError
        ``k`` given for a single-hop construction (or missing for a k-hop one), options the construction does
        not take, or an estimate over the budget.
    """
    budget = as_budget(budget)
    spec = _spec(construction)
    if (k is None) != (spec.hops == "single"):
        raise InputError(
            f"{spec.label} is a {spec.hops}-hop construction: "
            f"{'omit --k' if spec.hops == 'single' else 'give --k'}"
        )
    hops = 1 if k is None else k
    validate_request(spec, codes=codes, D=D)
    code_options = {name: value for name, value in (("codes", codes), ("D", D)) if value is not None}
    if estimate is None:
        check_estimate(spec, N, R, hops, codes, D=D, bits=1, what="precision",
                       budget=budget).require(budget)
    task = task_for_seed(N, R, seed)
    built = spec.builder(task, hops, rng=seeds.rng(seed, "codes"), **code_options)
    tokens, answers = queries(task, hops)
    if spec.decoding == "greedy":
        targets = teacher_forcing(task, hops)[1]
        check = lambda m: check_decoding(m, tokens, targets, budget=budget)  # noqa: E731
    else:
        check = lambda m: check_queries(m, tokens, answers, budget=budget)  # noqa: E731
    bits, records = smallest_exact_bits(built.model, check, max_bits=max_bits)
    return {
        "construction": spec.id,
        "N": N,
        "R": R,
        "k": hops,
        "codes": built.codes.kind,
        "D": built.codes.D,
        "seed": seed,
        "queries": int(tokens.shape[0]),
        "smallest_exact_bits": bits,
        "records": records,
        "quantization": CODEBOOK,
    }


def precision_cases() -> list[tuple[ConstructionSpec, BitsClaim]]:
    """Every registered construction that makes a bits claim, with its claim (registration order)."""
    return [(spec, spec.bits) for spec in registry.specs() if spec.bits is not None]


def not_covered() -> list[str]:
    """Ids of registered constructions without a bits claim: the bits and bounds rows name them."""
    return [spec.id for spec in registry.specs() if spec.bits is None]


def table_bits() -> dict[str, int]:
    """The b each construction sits at in the gap tables (``bounds.tables.gap_rows``): claims whose need
    does not grow with N."""
    return {spec.id: claim.table for spec, claim in precision_cases() if claim.table is not None}


def per_parameter_bits() -> dict[str, int]:
    """Bits per fact-specific parameter (per-coordinate codebooks) each construction claims."""
    return {spec.id: claim.per_parameter for spec, claim in precision_cases()
            if claim.per_parameter is not None}
