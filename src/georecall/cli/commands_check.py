"""The commands that check constructions: ``verify``, ``check single-hop|multi-hop``, ``certify
single-hop|multi-hop`` and ``precision``."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from georecall import memory
from georecall.cli.commands_tables import (
    PRECISION_COLUMNS,
    PRECISION_HEADERS,
    table_format,
    table_text,
)
from georecall.cli.common import (
    binary_codes_fit,
    code_kind,
    document,
    output_path,
    require_enumerable,
    resolve_spec,
    task_file,
    user_constructions,
)
from georecall.cli.params import (
    CertifyMultiHopParams,
    CertifySingleHopParams,
    CheckMultiHopParams,
    CheckSingleHopParams,
    PrecisionParams,
    VerifyParams,
)
from georecall.constructions import registry
from georecall.constructions.builder_options import integer_by_default
from georecall.errors import InputError
from georecall.io import WriteError, atomic_write, write_error
from georecall.memory import Estimate
from georecall.theory.tasks import Attributes
from georecall.verify.checking import certify as cert
from georecall.verify.checking import run as checking  # the module: tests replace its functions

__all__ = [
    "VERIFY_ROWS",
    "run_certify",
    "run_check_multi_hop",
    "run_check_single_hop",
    "run_precision",
    "run_verify",
    "verify_estimate",
    "verify_rows",
]


# ----------------------------------------------------------------------------------------------- verify


def verify_estimate(specs: list[registry.ConstructionSpec] | None = None,
                    budget: memory.Budget | None = None) -> Estimate:
    """The largest ``verify`` case's estimate.

    Parameters
    ----------
    specs : list of ConstructionSpec, optional
        Only these constructions' ``verify_cases`` (default: every registered construction's).
    budget : Budget, optional
        The budget whose chunk size the checker will use (default: the default budget).

    Returns
    -------
    Estimate
        The estimate of the case with the largest total.
    """
    worst = Estimate("verify")
    for spec in registry.specs() if specs is None else specs:
        for case in spec.verify_cases:
            est = checking.check_estimate(spec, case["N"], case["R"], case.get("k", 1), case.get("codes"),
                                          D=case.get("D"),
                                          integer=bool(case.get("compare_integer") or case.get("integer")),
                                          what="verify", budget=budget)
            if est.total > worst.total:
                worst = est
    return worst


def run_verify(p: VerifyParams) -> dict:
    """``verify``: every section of ``georecall verify`` (``suite.SECTIONS``), or with ``--construction``
    only those constructions' rows.

    Parameters
    ----------
    p : VerifyParams

    Returns
    -------
    dict
        The document; ``status`` 1 when any row failed (a row that is not covered, ``not_covered`` set,
        checked nothing: it is neither a PASS nor a failure).

    Raises
    ------
    InputError
        An unknown construction, or the largest case over the budget.
    """
    chosen = user_constructions(p.construction)
    specs = None if chosen is None else [registry.get(c) for c in chosen]
    est = verify_estimate(specs, p.budget).require(p.budget)
    start = time.perf_counter()
    reports = [rep.as_dict() for rep in verify_rows()(specs, p.seed, p.progress, p.budget, full=p.full)]
    passed = all(rep["passed"] for rep in reports if rep["not_covered"] is None)  # not covered: no failure
    params = {"seed": p.seed, "full": p.full} if specs is None else {"seed": p.seed, "constructions": chosen}
    return document(p, params, est, passed=passed,
                    seconds=round(time.perf_counter() - start, 3), reports=reports)


VERIFY_ROWS = "georecall.verify_rows"  # the entry-point group (pyproject.toml) that gives verify its rows


def verify_rows() -> Callable[..., list]:
    """The function that runs the rows of ``georecall verify``
    (:func:`georecall.verify.sections.suite.verify_reports`), found by its entry point: the rows live beside
    the command line (CONTRIBUTING.md, "Layers"), which imports no module of theirs.

    Returns
    -------
    callable
        ``(specs, seed, progress, budget) -> list[Report]``.

    Raises
    ------
    RuntimeError
        Not exactly one entry point in the group (an install without georecall's metadata: a bug).
    """
    from importlib.metadata import entry_points  # startup cost: only verify reads the installed metadata

    found = list(entry_points(group=VERIFY_ROWS))
    if len(found) != 1:
        raise RuntimeError(f"expected one {VERIFY_ROWS!r} entry point, found {len(found)}: reinstall "
                           "georecall (pip install -e .)")
    return found[0].load()


# ------------------------------------------------------------------------------------------------ check


@contextlib.contextmanager
def _saved_atomically(save: str | None) -> Iterator[str | None]:
    """A temporary path beside ``save`` for the library to write, renamed to ``save`` when the block
    completes and removed whatever happens (``None`` when nothing is saved)."""
    if save is None:
        yield None
        return
    directory, base = os.path.split(os.path.abspath(save))
    tmp = os.path.join(directory, f".{base}.tmp-{os.getpid()}.npz")
    try:
        yield tmp
        os.replace(tmp, save)
    except (OSError, WriteError) as exc:  # a full or read-only disk: one line naming the file asked for, not
        # the temporary the library wrote
        refusal = write_error(exc, save)
        if refusal is not None:
            raise refusal from None
        raise
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _check_document(p: CheckSingleHopParams | CheckMultiHopParams, rep, est: Estimate,
                    save: str | None) -> dict:
    """The document of a check: its report, with ``save`` and ``task`` in its parameters."""
    report = rep.as_dict()
    params = {**report["params"], "save": save, **({"task": p.task} if p.task else {})}
    report["params"] = params
    rest = {key: value for key, value in report.items() if key not in ("passed", "version", "params")}
    return document(p, params, est, passed=rep.passed, reports=[report],
                    **rest)


def run_check_single_hop(p: CheckSingleHopParams) -> dict:
    """``check single-hop``: one single-hop construction, every N·R query.

    Parameters
    ----------
    p : CheckSingleHopParams

    Returns
    -------
    dict
        The document; ``status`` 1 when a query fails.

    Raises
    ------
    InputError
        A k-hop construction, gaussian codes with ``--integer``, ``--symmetric`` with N odd, binary codes
        with 2^D < N, an unwritable ``--save``, a bad ``--task`` file, or the estimate over the budget.
    """
    spec = resolve_spec(p.construction, "single")
    require_enumerable(p.N, p.R, 1)
    # --bits with --integer: refused by the parser (parser.CONFLICTS); gaussian codes with --integer: by
    # checking.validate_request (one wording for Python and the terminal)
    if p.symmetric and p.N % 2:
        raise InputError(f"--symmetric relations are perfect matchings: N must be even, got {p.N}")
    binary_codes_fit(code_kind(p.codes, spec), p.D, p.N)
    save = output_path(p.save, suffix=".npz", what="model file") if p.save else None
    est = checking.check_estimate(spec, p.N, p.R, 1, p.codes, D=p.D, dtype=p.dtype, bits=p.bits,
                                  integer=p.integer, attributes=p.attributes, what="check single-hop",
                                  budget=p.budget).require(p.budget)
    task = task_file(p.task, p.N, p.R, p.attributes, p.symmetric) if p.task else None
    with _saved_atomically(save) as tmp:
        rep = checking.check_single_hop(p.N, p.R, construction=spec,  # type: ignore[arg-type]  # a spec works
                                        codes=p.codes, D=p.D, seed=p.seed, integer=p.integer, gate=p.gate,
                                        beta=p.beta, lam=p.lam, dtype=p.dtype, bits=p.bits,
                                        attributes=p.attributes, symmetric=p.symmetric, task=task, save=tmp,
                                        budget=p.budget, estimate=est, progress=p.progress,
                                        options=p.builder_options)
    return _check_document(p, rep, est, save)


def run_check_multi_hop(p: CheckMultiHopParams) -> dict:
    """``check multi-hop``: one k-hop construction, every N·R^k query.

    Parameters
    ----------
    p : CheckMultiHopParams

    Returns
    -------
    dict
        The document; ``status`` 1 when a query fails.

    Raises
    ------
    InputError
        A single-hop construction, binary codes with 2^D < N, a bad ``--task`` file, or the estimate over the
        budget.
    """
    spec = resolve_spec(p.construction, "multi")
    require_enumerable(p.N, p.R, p.k)
    binary_codes_fit(code_kind(p.codes, spec), p.D, p.N)
    est = checking.check_estimate(spec, p.N, p.R, p.k, p.codes, D=p.D, what="check multi-hop",
                                  budget=p.budget).require(p.budget)
    task = task_file(p.task, p.N, p.R, "shared", False) if p.task else None
    rep = checking.check_multi_hop(p.N, p.R, p.k, construction=spec,  # type: ignore[arg-type]  # a spec works
                                   codes=p.codes, D=p.D, attention=p.attention, beta=p.beta, gate=p.gate,
                                   seed=p.seed, task=task, budget=p.budget, estimate=est, progress=p.progress,
                                   options=p.builder_options)
    return _check_document(p, rep, est, None)


# ---------------------------------------------------------------------------------------------- certify


def run_certify(p: CertifySingleHopParams | CertifyMultiHopParams) -> dict:
    """``certify single-hop|multi-hop``: every task at once (verify/checking/certify.py).

    Parameters
    ----------
    p : CertifySingleHopParams or CertifyMultiHopParams

    Returns
    -------
    dict
        The document; ``status`` 0 for CERTIFIED, 1 REFUTED, ``certify.UNKNOWN_STATUS`` (4) UNKNOWN.

    Raises
    ------
    InputError
        ``--integer`` with ``--float`` or with gaussian codes, ``--symmetric`` with N odd, binary codes with
        2^D < N, an unwritable ``--witness``, or the estimate over the budget.
    """
    spec = resolve_spec(p.construction, "single" if isinstance(p, CertifySingleHopParams) else "multi",
                        "certify")
    k, integer, symmetric = 1, False, False
    attributes: Attributes = "shared"
    options: dict[str, Any]
    if isinstance(p, CertifySingleHopParams):
        if p.integer and p.float:
            raise InputError("--integer and --float exclude each other")
        # exact arithmetic where the construction has an integer scale and no real constant was asked for
        integer = p.integer or (not p.float and integer_by_default(spec, p.codes, {"lam": p.lam,
                                                                                   "gate": p.gate}))
        attributes, symmetric = p.attributes, p.symmetric
        # only options the construction takes, or that were asked for (refused then, naming them)
        lam = p.lam if ("lam" in spec.accepts() or p.lam != 1.0) else None
        options = {"gate": p.gate, "lam": lam, **({"integer": True} if integer else {})}
    else:
        k, options = p.k, {"attention": p.attention, "beta": p.beta, "gate": p.gate}
    options.update(p.builder_options or {})  # the options a spec declares itself, as given
    if symmetric and p.N % 2:
        raise InputError(f"--symmetric relations are perfect matchings: N must be even, got {p.N}")
    binary_codes_fit(code_kind(p.codes, spec), p.D, p.N)
    witness = output_path(p.witness, suffix=".npy", what="witness file") if p.witness else None
    kind = code_kind(p.codes, spec)  # None (its own codes): the estimate's nominal sizes, never "binary"
    est = cert.certify_estimate(spec, p.N, p.R, k, kind, p.D, integer=integer,
                                attributes=attributes).require(p.budget)
    result = cert.certify(spec, p.N, p.R, k, codes=p.codes, D=p.D, options=options, seed=p.seed,
                          attributes=attributes, symmetric=symmetric, max_points=p.max_points,
                          progress=p.progress, budget=p.budget)
    written = None
    if result.witness_table is not None and witness is not None:
        table = result.witness_table
        written = atomic_write(witness, lambda f: np.save(f, table, allow_pickle=False))
    doc = result.as_dict()
    doc["witness_file"] = written
    params = {**doc.pop("params"), "witness": witness, "max_points": p.max_points}
    doc.pop("passed")  # the certificate's: verdict == CERTIFIED
    out = document(p, params, est, passed=result.passed, **doc)
    if result.verdict == "UNKNOWN":  # no verdict is not a failure found: its own exit code
        out["status"] = cert.UNKNOWN_STATUS
    return out


def run_precision(p: PrecisionParams) -> dict:
    """``precision``: the smallest bits per parameter keeping every query exact.

    Parameters
    ----------
    p : PrecisionParams

    Returns
    -------
    dict
        The document; ``status`` 1 when no b up to ``--max-bits`` is exact.

    Raises
    ------
    InputError
        ``--k`` given for a single-hop construction or missing for a k-hop one, binary codes with 2^D < N, a
        table option that does not apply, or the estimate over the budget.
    """
    fmt = table_format(p, p.json)
    spec = resolve_spec(p.construction, None)
    if (p.k is None) != (spec.hops == "single"):
        raise InputError(f"{spec.label} is a {spec.hops}-hop construction: "
                         f"{'omit --k' if spec.hops == 'single' else 'give --k'}")
    k = 1 if p.k is None else p.k
    require_enumerable(p.N, p.R, k)
    binary_codes_fit(code_kind(p.codes, spec), p.D, p.N)
    est = checking.check_estimate(spec, p.N, p.R, k, p.codes, D=p.D, bits=1, what="precision",
                                  budget=p.budget).require(p.budget)
    doc = checking.precision_scan(spec, p.N, p.R, p.k, codes=p.codes, D=p.D, seed=p.seed,
                                  max_bits=p.max_bits, budget=p.budget, estimate=est)
    bits = doc["smallest_exact_bits"]
    params = {"construction": spec.id, "N": p.N, "R": p.R, "k": p.k, "codes": doc["codes"], "D": p.D,
              "max_bits": p.max_bits, "seed": p.seed, "format": fmt}
    return document(p, params, est, passed=bits is not None, format=fmt,
                    text=table_text(p, fmt, doc["records"], PRECISION_COLUMNS, PRECISION_HEADERS),
                    **{key: value for key, value in doc.items() if key not in ("seed",)})


