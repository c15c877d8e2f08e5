"""The checks behind ``georecall verify`` and ``georecall check``, one function per named check.

Each section is a function ``(seed, progress, budget) -> list[Report]``; ``SECTIONS`` lists them in the order
``georecall verify`` runs them. Later capabilities add their sections here. Every function that allocates
takes the run's :class:`~georecall.memory.Budget` (``None``: the default budget), requires the one estimate
(``georecall.memory``) against it before building anything, and passes it on to the checker, whose chunks
are sized from it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np

from georecall import memory
from georecall.constructions import model as models  # the module: tests replace save_model there
from georecall.constructions import registry
from georecall.constructions.codes import binary_length
from georecall.constructions.registry import ConstructionSpec
from georecall.errors import InputError
from georecall.memory import Budget, as_budget
from georecall.theory import seeds
from georecall.theory.tasks import Attributes, Task, check_positive_int, task_for_seed
from georecall.theory.tokens import queries, teacher_forcing
from georecall.verify.checking.check import (
    Report,
    achieved_sizes,
    check_construction,
    check_decoding,
    check_queries,
    claim_report,
    margin_reaches,
)
from georecall.verify.checking.precision import CODEBOOK, quantize, smallest_exact_bits
from georecall.verify.experiments import probes, study, sweep
from georecall.verify.sections.bounds_checks import section_bounds
from georecall.verify.training import train as trainer  # modules, not names: tests replace their functions

__all__ = [
    "SECTIONS",
    "check_multi_hop",
    "check_single_hop",
    "construction_reports",
    "precision_scan",
    "run_check",
    "section_constructions",
    "section_multi_hop",
    "section_single_hop",
    "tradeoff_rows",
]

# What each option is called on the command line (for messages naming a refused option).
OPTION_FLAGS = {
    "gate": "gate constant G (--gate)",
    "beta": "softmax inverse temperature β (--beta)",
    "attention": "attention kind (--attention)",
    "gain": "attention gain g (Python only: options={'gain': g})",
    "integer": "integer mode (--integer)",
    "lam": "read-out scale λ (--lam)",
    "D": "code length D (--D)",
    "codes": "code kind (--codes)",
}


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


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
    budget: Budget | int | None = None,
    progress: bool = False,
    compare_storage: bool = False,
) -> Report:
    """Build a registered construction on THE seeded task (``task_for_seed(N, R, seed)``) and check every
    query.

    Before anything is built, the one memory estimate (:func:`georecall.memory.check_estimate`: weights,
    codes, every query, the checker's chunks) is required against ``budget``; over it, the check is refused
    naming the estimate, its largest part and the sizes to lower.

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
        Save the built model there (``constructions.model.save_model``).
    keep : bool
        Keep per-query predictions and margins in the result.
    budget : Budget, int or None
        The run's memory budget (an ``int``: bytes; ``None``: ``Budget.from_gib(None)``).
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
    budget = as_budget(budget)
    spec = _spec(construction)
    options = {key: value for key, value in (options or {}).items() if value is not None}
    if "lam" in spec.accepts():
        options.setdefault("lam", 1.0)
    asked = set(options) | {name for name, value in (("codes", codes), ("D", D)) if value is not None}
    refused = sorted(asked - spec.accepts())
    if refused:
        names = ", ".join(OPTION_FLAGS.get(o, o) for o in refused)
        raise InputError(
            f"{spec.label} does not take {names}; it takes: "
            f"{', '.join(sorted(OPTION_FLAGS.get(o, o) for o in spec.accepts()))}"
        )
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    if spec.hops == "single" and k != 1:
        raise InputError(f"{spec.label} answers single-hop queries: k must be 1, got {k}")
    if dtype not in ("float32", "float64"):
        raise InputError(f"dtype must be float32 or float64, got {dtype!r}")
    integer = bool(options.get("integer", False))
    if bits is not None and integer:
        raise InputError("--bits and --integer do not combine: quantized weights are not integers")
    if task is not None:
        if not isinstance(task, Task):
            raise InputError(f"task must be a Task, got {type(task).__name__}")
        if (task.N, task.R) != (N, R):
            raise InputError(f"the task has N = {task.N}, R = {task.R}, but N = {N}, R = {R} were asked: "
                             "pass the task's own sizes (run_check(spec, task.N, task.R, task=task))")
        if attributes != "shared" and attributes != task.attributes:
            raise InputError(f"attributes={attributes!r} disagrees with the task's {task.attributes!r}")
        attributes = task.attributes
    for variant, wanted in (("disjoint", attributes == "disjoint"), ("symmetric", symmetric)):
        if wanted and variant not in spec.variants:
            raise InputError(f"{spec.label} does not support {variant} relations/attributes")
    greedy = spec.decoding == "greedy"
    memory.check_estimate(spec, N, R, k, codes=codes or "binary", D=D, dtype=dtype, bits=bits,
                          integer=integer, attributes=attributes, what=f"checking {spec.label}",
                          budget=budget).require(budget)
    if task is None:
        task = task_for_seed(N, R, seed, attributes=attributes, symmetric=symmetric)
    code_options = {name: value for name, value in (("codes", codes), ("D", D)) if value is not None}
    built = spec.build(task, k, rng=seeds.rng(seed, "codes"), **code_options, **options)
    if save is not None:
        models.save_model(
            built.model,
            save,
            extra_arrays={"task_table": task.table},
            N=task.N,
            R=task.R,
            k=k,
            construction=spec.id,
            codes=built.codes.kind,
            seed=seed,
            options=options,
        )
    attention = options.get("attention", "softmax" if spec.hops == "multi" else None)
    # the row says what its verdict certifies: exact integers, or float margins net of a rounding bound
    name = f"{spec.id} {built.codes.kind}{' int (exact)' if integer else ' (float, bound)'}" + (
        " (hard attn, idealized)" if attention == "hard" else ""
    )
    params = {
        "N": task.N,
        "R": task.R,
        "k": k,
        "D": built.codes.D,
        "construction": spec.id,
        "codes": built.codes.kind,
        "seed": seed,
        "dtype": "float64" if integer else dtype,
        "bits": bits,
        "attributes": task.attributes,
        "symmetric": symmetric,
        **options,
        **{key: built.constants[key] for key in ("gate", "beta") if key in built.constants},
    }
    tokens, answers = queries(task, k)
    if bits is not None:
        model = quantize(built.model, bits).astype(np.dtype(dtype))
        if greedy:
            result = check_decoding(model, tokens, teacher_forcing(task, k)[1], keep=keep, progress=progress,
                                    budget=budget)
        else:
            result = check_queries(model, tokens, answers, keep=keep, progress=progress, budget=budget)
        return Report(
            f"{name} @{bits} bits",
            params,
            None,
            result,
            achieved_sizes(model),
            {"promise (exact weights)": built.promise.as_dict()},
        )
    if not greedy:
        report = check_construction(
            name,
            params,
            built,
            tokens,
            answers,
            integer=integer,
            dtype=None if integer else np.dtype(dtype),
            keep=keep or compare_storage,
            progress=progress,
            budget=budget,
        )
        if compare_storage and built.model.compact:
            dense_model = built.model.with_dense_readout()
            dense_result = check_queries(dense_model, tokens, answers, integer=integer, keep=True,
                                         budget=budget)
            _storage_agreement(report, dense_result, integer)
        return report
    same = integer or built.model.entity_embedding.dtype == np.dtype(dtype)
    model = built.model if same else built.model.astype(np.dtype(dtype))  # astype copies every array
    forced_tokens, targets, positions = teacher_forcing(task, k)
    greedy_result = check_decoding(model, tokens, targets, keep=keep or compare_storage, progress=progress,
                                   budget=budget)
    forced = check_queries(model, forced_tokens, targets, positions=positions, budget=budget)
    report = Report(
        name,
        params,
        built.promise,
        greedy_result,
        achieved_sizes(built.model),
        {
            "constants": built.constants,
            "codes": built.codes.kind,
            "mu": built.codes.mu,
            "teacher_forcing": forced.as_dict(),
        },
    )
    report.extra_checks["teacher forcing: every step exact"] = forced.exact
    report.extra_checks["teacher forcing: margin >= promise"] = margin_reaches(
        forced.min_margin, built.promise.margin, forced.dtype, scale=built.promise.logit_scale,
        bound=forced.rounding_bound)
    if compare_storage and model.compact:
        dense_result = check_decoding(model.with_dense_readout(), tokens, targets, keep=True, budget=budget)
        _storage_agreement(report, dense_result, integer)
    return report


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
    options = {"gate": gate, "beta": beta, "lam": lam, **({"integer": True} if integer else {})}
    return run_check(spec, N, R, 1, seed=seed, codes=codes, D=D, options=options, **kwargs)


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
        options={"attention": attention, "beta": beta, "gate": gate},
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
    budget: Budget | int | None = None,
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
    budget : Budget, int or None
        The memory budget: the estimate of a quantized build and check
        (:func:`georecall.memory.check_estimate` with ``bits``) is required against it before the build,
        and the checker's chunks are sized from it.

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
    code_options = {name: value for name, value in (("codes", codes), ("D", D)) if value is not None}
    refused = sorted(set(code_options) - spec.accepts())
    if refused:
        raise InputError(f"{spec.label} does not take {', '.join(OPTION_FLAGS[o] for o in refused)}")
    memory.check_estimate(spec, N, R, hops, codes=codes or "binary", D=D, bits=1, what="precision",
                          budget=budget).require(budget)
    task = task_for_seed(N, R, seed)
    built = spec.build(task, hops, rng=seeds.rng(seed, "codes"), **code_options)
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


def _case_report(spec: ConstructionSpec, case: dict, seed: int, progress: bool,
                 budget: Budget | int | None = None) -> list[Report]:
    budget = as_budget(budget)
    case = dict(case)
    N, R, k = case.pop("N"), case.pop("R"), case.pop("k", 1)
    codes, D = case.pop("codes", None), case.pop("D", None)
    compare = case.pop("compare_integer", False)
    _log(
        progress,
        f"{spec.label}: {codes or 'default'} codes, N={N}, R={R}, k={k}"
        + (" (float64, then integer mode)" if compare else ""),
    )
    if not compare:
        return [run_check(spec, N, R, k, seed=seed, codes=codes, D=D, options=case, compare_storage=True,
                          budget=budget)]
    as_float = run_check(spec, N, R, k, seed=seed, codes=codes, D=D, options=case, keep=True,
                         compare_storage=True, budget=budget)
    as_int = run_check(
        spec, N, R, k, seed=seed, codes=codes, D=D, options={**case, "integer": True}, keep=True,
        compare_storage=True, budget=budget,
    )
    assert as_float.result.predictions is not None and as_int.result.predictions is not None  # keep=True
    agree = bool(np.array_equal(as_float.result.predictions, as_int.result.predictions))
    as_int.extra["agrees_with_float"] = agree
    as_int.extra_checks["float and integer predictions agree"] = agree
    return [as_float, as_int]


def section_constructions(hops: str, seed: int = 0, progress: bool = False,
                          budget: Budget | int | None = None) -> list[Report]:
    """Every registered construction with ``hops`` at the sizes its spec lists (``verify_cases``).

    Parameters
    ----------
    hops : str
        "single" or "multi".
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The run's memory budget, passed to every :func:`run_check`.

    Returns
    -------
    list of Report

    Raises
    ------
    InputError
        A case over the budget.
    """
    budget = as_budget(budget)
    reports: list[Report] = []
    for spec in registry.specs(hops):
        for case in spec.verify_cases:
            reports += _case_report(spec, case, seed, progress, budget)
    return reports


def construction_reports(spec: ConstructionSpec, seed: int = 0, progress: bool = False,
                         budget: Budget | int | None = None) -> list[Report]:
    """One construction at the sizes its spec lists (``verify_cases``): ``georecall verify --construction``.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction.
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The run's memory budget, passed to every :func:`run_check`.

    Returns
    -------
    list of Report

    Raises
    ------
    InputError
        When the spec lists no ``verify_cases``, or a case over the budget.
    """
    if not spec.verify_cases:
        raise InputError(f"{spec.label} lists no verify_cases: give its ConstructionSpec "
                         "verify_cases=({'N': ..., 'R': ...},)")
    budget = as_budget(budget)
    reports: list[Report] = []
    for case in spec.verify_cases:
        reports += _case_report(spec, case, seed, progress, budget)
    return reports


def section_single_hop(seed: int = 0, progress: bool = False, budget: Budget | int | None = None
                       ) -> list[Report]:
    """Single-hop constructions: :func:`section_constructions` ``("single", ...)``, i.e. every registered
    single-hop spec at its ``verify_cases``. For the built-ins: G1 at N = 4096, R = 16 (``check single-hop``'s
    default size) in float64 and in integer mode (whose predictions must agree), G1 with sign and with
    Gaussian codes (N = 512, R = 8, D = 48); A1 at N = 512, R = 8 in integer mode and with sign codes at
    N = 256, R = 4.

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The run's memory budget (None: the default budget), passed to every :func:`run_check`.

    Returns
    -------
    list of Report
        One per case (two for a case compared in float and integer mode), in registration order.

    Raises
    ------
    InputError
        A case over the budget (from :func:`run_check`), or a case a spec's builder refuses.
    """
    return section_constructions("single", seed, progress, budget)


def section_multi_hop(seed: int = 0, progress: bool = False, budget: Budget | int | None = None
                      ) -> list[Report]:
    """k-hop constructions at sizes that run in seconds, softmax attention (and hard, labelled):
    :func:`section_constructions` ``("multi", ...)``, i.e. every registered multi-hop spec at its
    ``verify_cases`` (for the built-ins: G2, also with hard attention; A2a; A2b; C1).

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The run's memory budget (None: the default budget), passed to every :func:`run_check`.

    Returns
    -------
    list of Report
        One per case, in registration order.

    Raises
    ------
    InputError
        A case over the budget (from :func:`run_check`), or a case a spec's builder refuses.
    """
    return section_constructions("multi", seed, progress, budget)


def tradeoff_rows(N: int, R: int, k_max: int, constructions: list[str] | None = None) -> list[dict]:
    """d, m and parameters every registered k-hop construction (or those whose ids or names
    ``constructions`` lists) promises for k = 1..k_max (binary codes, nominal constants: sizes do not depend
    on the attention constants).

    Parameters
    ----------
    N, R, k_max : int
        Entities, relations and the largest k (each a whole number >= 1).
    constructions : list of str, optional
        Ids or names (case-insensitive, as :func:`georecall.constructions.registry.get`); None: every
        registered multi-hop spec. A listed single-hop spec is not refused: its nominal promise does not
        depend on k, so its row repeats for every k.

    Returns
    -------
    list of dict
        One row per (k, construction), k ascending, then in the order chosen: ``k``, ``construction`` (the
        id), ``d``, ``m``, ``params``, ``fact_params`` (the nominal promise's), ``N``, ``R`` and
        ``D = max(1, ⌈log2 N⌉)`` (binary codes).

    Raises
    ------
    InputError
        N, R or k_max not a whole number >= 1, ``R^k_max`` over 2^40, or an unknown construction.
    UserCodeError
        A user's spec's ``nominal_promise`` raised or returned something else than a Promise (a subclass of
        InputError).
    """
    N, R, k_max = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k_max", k_max)))
    if R**k_max > 2**40:
        raise InputError(f"R^k_max = {R}^{k_max} is too large to tabulate (over 2^40 relation paths)")
    chosen = registry.specs("multi") if constructions is None else [registry.get(c) for c in constructions]
    rows = []
    for k in range(1, k_max + 1):
        for spec in chosen:
            p = spec.nominal_promise(N, R, k)
            rows.append(
                {
                    "k": k,
                    "construction": spec.id,
                    "d": p.d,
                    "m": p.m,
                    "params": p.params,
                    "fact_params": p.fact_params,
                    "N": N,
                    "R": R,
                    "D": binary_length(N),
                }
            )
    return rows


def gradient_row(seed: int = 0) -> Report:
    """The trainer's analytic gradients against central differences on random two-layer models (N = 7, d = 6:
    fixed sizes, nothing that grows with an input).

    Parameters
    ----------
    seed : int
        The run seed (``init`` stream).

    Returns
    -------
    Report
    """
    start = time.perf_counter()
    rng = seeds.rng(seed, "init")
    checks = {}
    for attention in ("uniform", "softmax"):
        model = trainer.init_model(7, 3, 6, 5, attention=attention, heads=2, layers=2, positions=3, rng=rng,
                           dtype=np.float64)
        tokens, answers = queries(task_for_seed(7, 3, seed), 2)
        try:
            checked = trainer.check_grads(model, tokens, answers, rng=rng)
            checks[f"{attention} attention, 2 layers: {len(checked)} parameters"] = True
        except AssertionError:
            checks[f"{attention} attention, 2 layers"] = False
    return claim_report("gradients = finite differences", {"seed": seed}, checks, time.perf_counter() - start,
                        {"d": 6, "m": 5})


TRAINING_SIZE = (256, 4)  # (N, R) of the gradient-descent rows


def gd_row(seed: int = 0, progress: bool = False, budget: Budget | int | None = None) -> Report:
    """Gradient descent reaches 100% on every fact at G1's d (N = 256, R = 4).

    Parameters
    ----------
    seed : int
        The run seed (``init`` and ``batches`` streams).
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The memory budget the training's estimate (:func:`georecall.memory.train_estimate`, full batch) is
        required against before the model is made.

    Returns
    -------
    Report

    Raises
    ------
    InputError
        The estimate exceeds the budget.
    """
    N, R = TRAINING_SIZE
    g1_d = registry.get("G1").nominal_promise(N, R, 1).d
    memory.train_estimate(N, R, g1_d, 4 * g1_d, what="verify: gradient descent").require(as_budget(budget))
    _log(progress, f"training: N={N}, R={R} at G1's d")
    start = time.perf_counter()
    tokens, answers = queries(task_for_seed(N, R, seed))
    trained = trainer.train(trainer.init_model(N, R, g1_d, 4 * g1_d, rng=seeds.rng(seed, "init")), tokens,
                            answers, steps=1000, rng=seeds.rng(seed, "batches"))
    return claim_report("GD reaches 100% at G1's d", {"N": N, "R": R, "seed": seed},
                        {f"trained d = {g1_d} answers all {N * R} facts": trained.reached},
                        time.perf_counter() - start, {"d": g1_d, "m": 4 * g1_d}, {"steps": trained.steps})


def threshold_row(seed: int = 0, progress: bool = False, steps: int = 400,
                  budget: Budget | int | None = None) -> Report:
    """The learned-vs-frozen capacity thresholds at N = 256, R = 4 (reported); the claim checked is that
    learned embeddings reach 100% at or below G1's d.

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    steps : int
        Adam steps per trial.
    budget : Budget, int or None
        The memory budget the largest trial's estimate (d = 2·G1's d) is required against before any trial.

    Returns
    -------
    Report

    Raises
    ------
    InputError
        The estimate exceeds the budget.
    """
    N, R = TRAINING_SIZE
    g1_d = registry.get("G1").nominal_promise(N, R, 1).d
    settings = sweep.TrialSettings(steps=steps)
    d_max = 2 * g1_d
    memory.train_estimate(N, R, d_max, settings.width_factor * d_max, what="verify: capacity thresholds"
                          ).require(as_budget(budget))
    _log(progress, f"training: learned vs frozen thresholds, N={N}, R={R}")
    start = time.perf_counter()
    found = {mode: sweep.find_threshold(N, R, mode, seed, settings, d_min=4, d_max=d_max, resolution=2)
             for mode in ("learned", "frozen")}
    learned, frozen = found["learned"]["d_star"], found["frozen"]["d_star"]
    claim = {f"learned d* = {learned} <= G1's d = {g1_d}": learned is not None and learned <= g1_d}
    params = {"N": N, "R": R, "seed": seed, "steps": settings.steps}
    return claim_report("capacity threshold, learned", params, claim, time.perf_counter() - start,
                        {"d": f"d*={learned}", "m": f"frozen d*={frozen}"},
                        {"learned": found["learned"], "frozen": found["frozen"]})


def section_training(seed: int = 0, progress: bool = False, budget: Budget | int | None = None
                     ) -> list[Report]:
    """The trainer's gradients against central differences; gradient descent reaching 100% at G1's size; the
    learned-vs-frozen capacity thresholds at a small size.

    Parameters
    ----------
    seed : int
        The run seed.
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The run's memory budget, passed to each row.

    Returns
    -------
    list of Report
    """
    budget = as_budget(budget)
    return [gradient_row(seed), gd_row(seed, progress, budget), threshold_row(seed, progress,
                                                                                        budget=budget)]


PROBES_SIZE = (512, 4)  # (N, R) of the probes row


def section_probes(seed: int = 0, progress: bool = False, budget: Budget | int | None = None
                   ) -> list[Report]:
    """On G1 every probe has its exact value; on an untrained model the same probes fail (they can fail).

    Parameters
    ----------
    seed : int
        The run seed (task, ``init`` and ``probes`` streams).
    progress : bool
        Progress on stderr.
    budget : Budget, int or None
        The memory budget G1's build and the probes' matrices are estimated against
        (:func:`georecall.memory.check_estimate`, :func:`georecall.memory.probe_estimate`) before building.

    Returns
    -------
    list of Report

    Raises
    ------
    InputError
        The estimate exceeds the budget.
    """
    N, R = PROBES_SIZE
    g1 = registry.get("G1")
    promise = g1.nominal_promise(N, R, 1)
    est = memory.check_estimate(g1, N, R, what="verify: probes")
    memory.probe_estimate(est, N, R, promise.d, promise.m, N, 256).require(as_budget(budget))
    _log(progress, f"probes: G1 (N={N}, R={R}) exact; an untrained model for contrast")
    start = time.perf_counter()
    task = task_for_seed(N, R, seed)
    g1_probes = probes.probe_all(g1.build(task).model, task, rng=seeds.rng(seed, "probes"), transfer_steps=5)
    untrained = probes.probe_all(
        trainer.init_model(N, R, 16, 64, rng=seeds.rng(seed, "init")),
        task,
        rng=seeds.rng(seed, "probes"),
        transfer_steps=5,
    )
    checks = {
        "G1 held-out encoding R² = 1": abs(g1_probes["readout"]["encoding_r2"] - 1) < 1e-9,
        "G1 per-relation probes 100%": g1_probes["readout"]["probe_accuracy_mean"] == 1.0,
        "G1 interventions followed, others unchanged": g1_probes["intervention"]["follows"] == 1.0
        and g1_probes["intervention"]["others_unchanged"] == 1.0,
        "G1 units 100% relation-selective": g1_probes["selectivity"]["selective_fraction"] == 1.0,
        "G1 zero-shot transfer 100%": g1_probes["transfer"]["closed_form_accuracy"] == 1.0,
        "untrained: readout R² < 0.5 and transfer at chance": untrained["readout"]["encoding_r2"] < 0.5
        and untrained["transfer"]["closed_form_accuracy"] < 0.05,
    }
    return [
        claim_report(
            "probes exact on G1",
            {"N": N, "R": R, "seed": seed},
            checks,
            time.perf_counter() - start,
            {"d": "", "m": ""},
            {"g1": g1_probes, "untrained": untrained},
        )
    ]


def _section_mechanism(seed: int = 0, progress: bool = False, budget: Budget | int | None = None
                       ) -> list[Report]:
    """The mechanism study's fast row (verify/experiments/study.py): probe values against the controls. The
    study does not take a budget yet: ``budget`` is accepted for the one section signature."""
    return study.section_mechanism(seed, progress)


def _section_certified(seed: int = 0, progress: bool = False, budget: Budget | int | None = None
                       ) -> list[Report]:
    """The "certified for every task" rows (verify/sections/certified.py), each with a negative control."""
    # imported here: certified imports run_check from this module
    from georecall.verify.sections.certified import section_certified

    return section_certified(seed, progress, budget)


SECTIONS: list[tuple[str, Callable[..., list[Report]]]] = [
    ("single hop", section_single_hop),
    ("multi hop", section_multi_hop),
    ("certified for every task", _section_certified),
    ("lower bounds and counting", section_bounds),
    ("gradient descent", section_training),
    ("mechanism probes", section_probes),
    ("mechanism study (controls)", _section_mechanism),
]
