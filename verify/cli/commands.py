"""Commands: one function per ``georecall`` command, returning a result document (no printing).

Each ``run_<command>(p)`` takes the parsed parameters (an ``argparse.Namespace`` or any object with the same
attributes), validates everything the library would otherwise trip over (ranges, contradictory options, output
paths, damaged input files, the memory estimate against the budget) *before* any work, runs the library, and
returns a document: a dict with ``command``, ``version``, ``seed``, ``params``, ``status`` (the exit code: 0
pass, 1 a check failed), ``memory`` (the estimate and the budget) and the command's results. Bad input raises
:class:`~georecall.errors.InputError` (exit 2). Progress lines on stderr are the library's, and only when
``p.progress`` is true; rendering is :mod:`georecall.verify.cli.render`'s job.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import time
from typing import Any

import numpy as np

from georecall import __version__, memory
from georecall.errors import InputError
from georecall.memory import Estimate

__all__ = [
    "LIMITS",
    "COMMANDS",
    "output_dir",
    "output_path",
    "run_bounds",
    "run_certify",
    "run_check_multi_hop",
    "run_check_single_hop",
    "run_count",
    "run_demo",
    "run_eval",
    "run_figures",
    "run_precision",
    "run_probe",
    "run_probe_hidden",
    "run_probe_lm",
    "run_sweep_threshold",
    "run_tradeoff",
    "run_train",
    "run_transfer",
    "run_verify",
]

# Hard limits checked before any estimate or allocation (the memory estimate refuses far below most of them).
LIMITS = {
    "N": 2**40,  # entities
    "R": 2**20,  # relations
    "k": 32,  # hops (Task.k_hop indexes with k + 1 NumPy dimensions; NumPy allows 64)
    "D": 2**20,  # code length (constructions.codes refuses beyond)
    "d": 2**24,  # residual width
    "m": 2**30,  # MLP width
    "heads": 1024,
    "steps": 10**9,
    "queries": 2**62,  # N·R^k: every query is enumerated
    "bounds_N": 2**53,  # the tradeoff bound scans M in float64: exact below 2^53
    "count_tasks_log2": None,  # set from bounds.counting.MAX_TASKS at first use
    "count_paths": 2**20,  # R^k: closed forms N^(R^k) are exact integers
    "bits": 64,
}


def _limit(name: str) -> int:
    """``LIMITS[name]``, one that is set (``count_tasks_log2`` is filled in at first use)."""
    value = LIMITS[name]
    assert value is not None, name
    return value


def _doc(command: str, p, params: dict, est: Estimate | None, budget: int | None, **results) -> dict:
    doc = {"command": command, "version": __version__, "seed": getattr(p, "seed", None), "params": params,
           "status": 0}
    if est is not None and budget is not None:
        doc["memory"] = {**est.as_dict(), "budget_gib": round(budget / memory.GIB, 6)}
    doc.update(results)
    return doc


def _budget(p) -> int:
    return memory.budget_bytes(getattr(p, "max_gib", None))


def _queries(N: int, R: int, k: int) -> None:
    if N * R**k > LIMITS["queries"]:
        raise InputError(f"N·R^k = {N}·{R}^{k} queries is more than can be enumerated (limit 2^62): lower "
                         f"N, R "
                         "or k")


def _positive_finite(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
            math.isfinite(value) and value > 0):
        raise InputError(f"{name} must be a positive finite number, got {value!r}")
    return float(value)


def output_path(path: str, *, suffix: str | None = None, what: str = "output file") -> str:
    """Check before any work that ``path`` can be written; return the path that will be written.

    Uses :func:`georecall.io.validate_output_path` (directory exists and is writable, target not a
    directory; ``suffix`` added when missing, so the reported path is the written one).

    Parameters
    ----------
    path : str
        The requested path.
    suffix : str, optional
        Required suffix (".npz").
    what : str
        How messages name the file.

    Returns
    -------
    str
        The path that will be written.
    """
    from georecall.io import validate_output_path
    if path and os.path.isdir(path):  # before a suffix turns DIR into DIR.npz
        raise InputError(f"{what} {path!r} is a directory; give a file name")
    try:
        return validate_output_path(path, suffix=suffix, what=what)
    except InputError:
        raise
    except ValueError as exc:  # io.py reports bad paths as ValueError: one line, user input
        raise InputError(str(exc)) from None


def output_dir(path: str, what: str = "output folder") -> str:
    """Check before any work that ``path`` is, or can be created as, a writable directory (missing parents
    included: the nearest existing ancestor must be a writable folder). Nothing is created here.

    Parameters
    ----------
    path : str
        The folder.
    what : str
        How messages name it.

    Returns
    -------
    str
        ``path``.
    """
    if not path:
        raise InputError(f"{what}: a folder is required")
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(f"{what} {path!r} exists and is not a folder")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):  # the nearest existing ancestor: the folders below it will be created
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{what} {path!r}: {parent!r} is a file, so the folder cannot be created")
    output_path(os.path.join(parent, ".georecall-probe"), what=what)
    return path


def _input_file(path: str, what: str) -> str:
    if not os.path.exists(path):
        raise InputError(f"no such {what} {path!r}")
    if os.path.isdir(path):
        raise InputError(f"{what} {path!r} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{what} {path!r} is not readable")
    return path


def _spec(name: str, hops: str | None):
    from georecall.constructions import registry
    spec = registry.resolve(name)
    if hops is not None and spec.hops != hops:
        other = "multi-hop" if spec.hops == "multi" else "single-hop"
        raise InputError(f"{spec.label} is a {spec.hops}-hop construction: use check {other}")
    return spec


# ----------------------------------------------------------------------------------------------- verify


def verify_estimate(specs=None) -> Estimate:
    """The largest ``verify`` case's estimate (every registered construction's ``verify_cases``, or those of
    ``specs``)."""
    from georecall.constructions import registry
    worst = Estimate("verify")
    for spec in registry.specs() if specs is None else specs:
        for case in spec.verify_cases:
            est = memory.check_estimate(spec, case["N"], case["R"], case.get("k", 1),
                                        codes=case.get("codes", "binary"), D=case.get("D"),
                                        integer=bool(case.get("compare_integer") or case.get("integer")),
                                        what="verify")
            if est.total > worst.total:
                worst = est
    return worst


def run_verify(p) -> dict:
    """Every section of ``georecall verify`` (``suite.SECTIONS``)."""
    from georecall.constructions import registry
    from georecall.verify.sections import suite
    chosen = _user_constructions(p)
    specs = None if chosen is None else [registry.get(c) for c in chosen]
    budget = _budget(p)
    est = verify_estimate(specs).require(budget)
    start = time.perf_counter()
    reports = []
    if specs is not None:  # --construction: only those constructions, at the sizes their specs list
        for spec in specs:
            reports += [rep.as_dict() for rep in suite.construction_reports(spec, p.seed, p.progress)]
        ok = all(rep["passed"] for rep in reports)
        return _doc("verify", p, {"seed": p.seed, "constructions": chosen}, est, budget,
                    status=0 if ok else 1, passed=ok, seconds=round(time.perf_counter() - start, 3),
                    reports=reports)
    for title, section in suite.SECTIONS:
        if p.progress:
            import sys
            print(f"== {title}", file=sys.stderr, flush=True)
        reports += [rep.as_dict() for rep in section(seed=p.seed, progress=p.progress)]
    ok = all(rep["passed"] for rep in reports)
    return _doc("verify", p, {"seed": p.seed}, est, budget, status=0 if ok else 1, passed=ok,
                seconds=round(time.perf_counter() - start, 3), reports=reports)


# ------------------------------------------------------------------------------------------------ check


def _check(p, hops: str) -> dict:
    from georecall.verify.sections import suite
    spec = _spec(p.construction, hops)
    k = getattr(p, "k", 1)
    _queries(p.N, p.R, k)
    integer = bool(getattr(p, "integer", False))
    bits = getattr(p, "bits", None)
    if bits is not None and integer:
        raise InputError("--bits and --integer do not combine: quantized weights are not integers")
    if integer and p.codes == "gaussian":
        raise InputError("gaussian codes have no integer scale: --integer needs binary or sign codes")
    if getattr(p, "symmetric", False) and p.N % 2:
        raise InputError(f"--symmetric relations are perfect matchings: N must be even, got {p.N}")
    if p.codes in ("binary", None) and p.D is not None and p.D < 63 and 2**p.D < p.N:
        raise InputError(f"binary codes need 2^D >= N; got 2^{p.D} = {2**p.D} < N = {p.N}")
    save = output_path(p.save, suffix=".npz", what="model file") if getattr(p, "save", None) else None
    budget = _budget(p)
    est = memory.check_estimate(spec, p.N, p.R, k, codes=p.codes or "binary", D=p.D,
                                dtype=getattr(p, "dtype", "float64"),
                                bits=bits, integer=integer, attributes=getattr(p, "attributes", "shared"),
                                what=f"check {hops}-hop").require(budget)
    common = dict(construction=spec, codes=p.codes, D=p.D, seed=p.seed, max_bytes=budget, progress=p.progress)
    if getattr(p, "task", None):  # a given task (a witness of georecall certify, say), not the seeded one
        common["task"] = _task_file(p.task, p.N, p.R, getattr(p, "attributes", "shared"),
                                    getattr(p, "symmetric", False))
    tmp = None
    if save is not None:
        directory, base = os.path.split(os.path.abspath(save))
        tmp = os.path.join(directory, f".{base}.tmp-{os.getpid()}.npz")
        common["save"] = tmp
    try:
        if hops == "single":
            rep = suite.check_single_hop(p.N, p.R, integer=integer, gate=p.gate, beta=p.beta, lam=p.lam,
                                         dtype=p.dtype, bits=bits, attributes=p.attributes,
                                         symmetric=p.symmetric, **common)
        else:
            rep = suite.check_multi_hop(p.N, p.R, k, attention=p.attention, beta=p.beta, gate=p.gate,
                                        **common)
        if tmp is not None and save is not None:
            os.replace(tmp, save)
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
    report = rep.as_dict()
    params = {**report["params"], "save": save, **({"task": p.task} if getattr(p, "task", None) else {})}
    report["params"] = params
    rest = {key: value for key, value in report.items() if key not in ("passed", "version", "params")}
    return _doc(f"check {hops}-hop", p, params, est, budget, status=0 if rep.passed else 1,
                passed=rep.passed, reports=[report], **rest)


def _task_file(path: str, N: int, R: int, attributes: str, symmetric: bool):
    """The task in an ``(R, N)`` ``.npy`` table (``check --task``), validated: shape, integer ids, bijections
    (perfect matchings with ``--symmetric``)."""
    from georecall.theory.tasks import Task
    member = memory.npy_member(_input_file(path, "task file"))
    if member.shape != (R, N):
        raise InputError(f"task file {path!r} holds a table of shape {member.shape}, expected (R, N) = "
                         f"({R}, {N})")
    if member.dtype.kind not in "iu":
        raise InputError(f"task file {path!r} holds {member.dtype} values, not integer entity ids")
    try:
        table = np.load(path, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"cannot read task file {path!r}: {str(exc).splitlines()[0]}") from None
    task = Task(table, attributes)  # type: ignore[arg-type]  # validates the bijections (InputError)
    rows = np.arange(R)[:, None]
    if symmetric and not (np.array_equal(table[rows, table], np.broadcast_to(np.arange(N), (R, N)))
                          and not np.any(table == np.arange(N))):
        raise InputError(f"task file {path!r}: --symmetric needs every relation to be a perfect matching")
    return task


def run_check_single_hop(p) -> dict:
    """``check single-hop``: one single-hop construction, every N·R query."""
    return _check(p, "single")


def run_check_multi_hop(p) -> dict:
    """``check multi-hop``: one k-hop construction, every N·R^k query."""
    return _check(p, "multi")


# ---------------------------------------------------------------------------------------------- certify


def certify_estimate(spec, N: int, R: int, k: int, codes: str, D: int | None) -> Estimate:
    """Peak bytes of ``certify``: codes, the declaration's tasks (and k-hop tables), the weights without the
    entity table (never formed for a recorded superposition), the per-position maps and the point chunks."""
    from georecall.verify.checking import certify as cert
    est = Estimate(f"certify {spec.hops}-hop")
    D_used = memory.code_length(codes, N, D)
    promise = spec.nominal_promise(N, R, k)
    d, m = promise.d * max(1.0, D_used / max(1, (N - 1).bit_length())), promise.m
    est.add("codes (and the compact read-out)", 2 * 8 * N * D_used, "N")
    est.add("tasks built for the declaration check", 8 * 3 * N * (R + (R**k if k > 1 else 0)) * 2, "N or R")
    est.add("weights without the entity table", int(8 * 4 * d * m), "R or k")
    est.add("per-position maps S·C_u, their W1 products", int(8 * 4 * (2 * k) * (d * d + d * m)), "R or k")
    est.add("point chunks, decoder blocks, hidden activations (facts in W2)",
            8 * 4 * cert.CHUNK_POINTS * (8 * D_used + 64) + 8 * 8 * 2**22 + 2 * 64 * 2**20, "R")
    return est


def run_certify(p) -> dict:
    """``certify single-hop|multi-hop``: every task at once (verify/checking/certify.py)."""
    from georecall.verify.checking import certify as cert
    hops = "single" if p.command == "certify single-hop" else "multi"
    spec = _spec(p.construction, hops)
    k = getattr(p, "k", 1)
    integer = bool(getattr(p, "integer", False))
    if integer and getattr(p, "float", False):
        raise InputError("--integer and --float exclude each other")
    if hops == "single" and not integer and not getattr(p, "float", False):
        # exact arithmetic where the construction has an integer scale and no real constant was asked for
        integer = ("integer" in spec.accepts() and p.codes in ("binary", "sign") and p.lam == 1.0
                   and p.gate is None)
    if integer and p.codes == "gaussian":
        raise InputError("gaussian codes have no integer scale: --integer needs binary or sign codes")
    if getattr(p, "symmetric", False) and p.N % 2:
        raise InputError(f"--symmetric relations are perfect matchings: N must be even, got {p.N}")
    if p.codes == "binary" and p.D is not None and p.D < 63 and 2**p.D < p.N:
        raise InputError(f"binary codes need 2^D >= N; got 2^{p.D} = {2**p.D} < N = {p.N}")
    witness = output_path(p.witness, suffix=".npy", what="witness file") if p.witness else None
    budget = _budget(p)
    est = certify_estimate(spec, p.N, p.R, k, p.codes, p.D).require(budget)
    if hops == "single":
        options = {"gate": p.gate, "lam": p.lam, **({"integer": True} if integer else {})}
    else:
        options = {"attention": p.attention, "beta": p.beta, "gate": p.gate}
    result = cert.certify(spec, p.N, p.R, k, codes=p.codes, D=p.D, options=options, seed=p.seed,
                          attributes=getattr(p, "attributes", "shared"),
                          symmetric=getattr(p, "symmetric", False),
                          max_points=p.max_points, progress=p.progress)
    written = None
    if result.witness_table is not None and witness is not None:
        from georecall.io import atomic_write
        table = result.witness_table
        written = atomic_write(witness, lambda f: np.save(f, table, allow_pickle=False))
    doc = result.as_dict()
    doc["witness_file"] = written
    params = {**doc.pop("params"), "witness": witness, "max_points": p.max_points}
    return _doc(p.command, p, params, est, budget, status=0 if result.passed else 1, **doc)


# ------------------------------------------------------------------------------------- tables and counts


# Column headers of the tables these commands render (Markdown, LaTeX) beside bounds.tables.COLUMNS.
TRADEOFF_HEADERS = {"params": ("parameters", "parameters"), "fact_params": ("fact-specific", "fact-specific")}
TRADEOFF_COLUMNS = ("k", "construction", "d", "m", "params")
COUNT_HEADERS = {"F_k": ("|F_k|", r"$|F_k|$"), "F_k_upper": ("(N!)^R", r"$(N!)^R$"),
                 "trees_k_lower": ("(N-1)_(R^k)", r"$(N-1)_{R^k}$"), "trees_k": ("|Trees_k|", r"$|T_k|$"),
                 "trees_k_upper": ("N^(R^k)", r"$N^{R^k}$"), "sandwich_holds": ("sandwich", "sandwich")}
COUNT_COLUMNS = ("k", "F_k", "F_k_upper", "trees_k_lower", "trees_k", "trees_k_upper", "sandwich_holds")
PRECISION_HEADERS = {"bits": ("b", "$b$"), "exact": ("exact", "exact"), "accuracy": ("accuracy", "accuracy"),
                     "min_margin": ("min margin", "min margin"), "changed": ("changed", "changed")}
PRECISION_COLUMNS = ("bits", "exact", "accuracy", "min_margin")


def _table_format(p, default: str = "text") -> str:
    """The table format of a table command: ``--format`` (json also by ``--json``, which the parser refuses
    beside another ``--format``: ``parser.CONFLICTS``); ``--columns``/``--caption``/``--label`` are refused
    where they do nothing."""
    fmt = getattr(p, "format", None) or default
    if getattr(p, "json", False):
        fmt = "json"
    if getattr(p, "columns", None) is not None and fmt not in ("md", "csv", "latex"):
        raise InputError(f"--columns chooses the columns of an md, csv or latex table, not of {fmt}")
    for flag in ("caption", "label"):
        if getattr(p, flag, None) is not None and fmt != "latex":
            raise InputError(f"--{flag} is for --format latex")
    return fmt


def _columns(p) -> list[str] | None:
    text = getattr(p, "columns", None)
    if text is None:
        return None
    columns = [c.strip() for c in text.split(",") if c.strip()]
    if not columns:
        raise InputError("--columns needs at least one column name (comma-separated)")
    return columns


def _table_text(p, fmt: str, rows: list[dict], columns, headers) -> str:
    from georecall.bounds.tables import render_table
    if fmt in ("text", "json"):
        return ""
    return render_table(rows, fmt, columns=_columns(p) or columns, headers=headers,
                        caption=getattr(p, "caption", None), label=getattr(p, "label", None))


def _user_constructions(p, hops: str | None = None) -> list[str] | None:
    """The ids of ``--construction`` (registered names, ``MODULE:ATTR`` or ``FILE.py:ATTR``; a user's
    construction is imported and registered), or None for every registered one."""
    from georecall.constructions import registry
    names = getattr(p, "construction", None)
    if not names:
        return None
    ids = []
    for name in names:
        spec = registry.resolve(name)
        if hops is not None and spec.hops != hops:
            raise InputError(f"{spec.label} is a {spec.hops}-hop construction; this table lists {hops}-hop "
                             "ones")
        ids.append(spec.id)
    return list(dict.fromkeys(ids))


def run_tradeoff(p) -> dict:
    """``tradeoff``: d, m and parameters of every k-hop construction (or those of ``--construction``) for
    k = 1..k_max."""
    from georecall.constructions import registry
    from georecall.verify.sections.suite import tradeoff_rows
    fmt = _table_format(p)
    if p.k_max > LIMITS["k"]:
        raise InputError(f"--k-max is at most {LIMITS['k']}, got {p.k_max}")
    if p.R ** p.k_max > 2**40:
        raise InputError(f"R^k_max = {p.R}^{p.k_max} relation paths is too many to tabulate (limit 2^40): "
                         "lower --k-max or --R")
    budget = _budget(p)
    est = Estimate("tradeoff").add("the table (promises only: nothing is built)", 64 * p.k_max * 2**10,
                                   "--k-max").require(budget)
    chosen = _user_constructions(p, "multi")
    rows = tradeoff_rows(p.N, p.R, p.k_max, constructions=chosen)
    specs = registry.specs("multi") if chosen is None else [registry.get(c) for c in chosen]
    legend = [f"{s.id}: {s.result}" for s in specs]
    return _doc("tradeoff", p, {"N": p.N, "R": p.R, "k_max": p.k_max, "constructions": chosen, "format": fmt},
                est, budget, rows=rows, constructions=[s.id for s in specs], legend=legend, format=fmt,
                text=_table_text(p, fmt, rows, TRADEOFF_COLUMNS, TRADEOFF_HEADERS))


def _needed_bits(items) -> dict[str, int]:
    from georecall.constructions import registry
    needed = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise InputError(f"--needed takes CONSTRUCTION=B (e.g. G1=2), got {item!r}")
        try:
            b = int(value)
        except ValueError:
            raise InputError(f"--needed {item!r}: B must be a whole number of bits") from None
        if not 1 <= b <= _limit("bits"):
            raise InputError(f"--needed {item!r}: B must lie in [1, {LIMITS['bits']}]")
        needed[registry.resolve(name).id] = b
    return needed


def run_bounds(p) -> dict:
    """``bounds``: lower bounds on d beside every construction's d (or those of ``--construction``); with
    ``--gaps`` the gap table (``tables.gap_rows``) at the b each construction needs and at a per-parameter
    b."""
    from georecall.bounds.tables import bound_rows, gap_rows, render
    from georecall.verify.sections.bounds_checks import per_parameter_bits, table_bits
    fmt = _table_format(p, default="md")
    for N in p.N:
        if N > LIMITS["bounds_N"]:
            raise InputError("--N is at most 2^53 for the bound tables (the gadget scan is float64), got "
                             f"{N}")
    gaps = bool(getattr(p, "gaps", False))
    if gaps and p.bits is not None:
        raise InputError("--gaps evaluates each construction at the b it needs (and per parameter): "
                         "--bits does not apply (use --needed NAME=B to set one)")
    if not gaps and getattr(p, "needed", None):
        raise InputError("--needed is for the gap table: add --gaps")
    bits = p.bits if p.bits is not None else [1.0]
    for b in bits:
        if not (1 / 64 <= b <= _limit("bits")):
            raise InputError(f"bits per parameter b must lie in [1/64, 64], got {b}")
    chosen = _user_constructions(p)
    # the b of each spec's bits claim (``ConstructionSpec.bits``), overridden or added by --needed
    needed = {**table_bits(), **_needed_bits(getattr(p, "needed", None))} if gaps else {}
    budget = _budget(p)
    est = memory.bounds_estimate(p.N, p.R, p.k).require(budget)
    start = time.perf_counter()
    if gaps:
        rows = gap_rows(p.N, p.R, p.k, needed, per_parameter_bits(), constructions=chosen)
    else:
        rows = bound_rows(p.N, p.R, p.k, bits, constructions=chosen)
    text = render(rows, fmt, columns=_columns(p), caption=getattr(p, "caption", None),
                  label=getattr(p, "label", None)) if fmt != "json" else ""
    params = {"N": p.N, "R": p.R, "k": p.k, "bits": None if gaps else bits, "format": fmt, "gaps": gaps,
              "needed": needed or None, "constructions": chosen}
    return _doc("bounds", p, params, est, budget, rows=rows, text=text, format=fmt,
                seconds=round(time.perf_counter() - start, 3))


def run_count(p) -> dict:
    """``count``: enumerate every (N!)^R task and count |F_k| and |Trees_k|."""
    from georecall.bounds.counting import MAX_TASKS, closed_forms, enumerate_counts
    fmt = _table_format(p)
    if p.k > LIMITS["k"]:
        raise InputError(f"--k is at most {LIMITS['k']} for count, got {p.k}")
    log2_tasks = memory.count_tasks_log2(p.N, p.R)  # lgamma: no factorial is computed before this check
    if log2_tasks > math.log2(MAX_TASKS) + 1e-9:
        raise InputError(f"the enumeration covers (N!)^R ≈ 2^{log2_tasks:.4g} tasks, more than the limit of "
                         f"{MAX_TASKS:,} (N <= 5 with R <= 3 and N <= 6 with R <= 2 fit): lower N or R")
    if p.R ** p.k > LIMITS["count_paths"]:
        raise InputError(f"R^k = {p.R}^{p.k} paths per task is more than count handles (limit 2^20): lower k")
    n_tasks = math.factorial(p.N) ** p.R
    budget = _budget(p)
    est = memory.count_estimate(p.N, p.R, p.k, n_tasks).require(budget)
    counts = enumerate_counts(p.N, p.R, p.k, progress=p.progress)
    rows = []
    for k in range(1, p.k + 1):
        closed = closed_forms(p.N, p.R, k)
        rows.append({"k": k, "F_k": counts.F[k], "F_k_upper": closed.F_upper, "trees_k": counts.trees[k],
                     "trees_k_lower": closed.trees_lower, "trees_k_upper": closed.trees_upper,
                     "F_1_closed": closed.F1 if k == 1 else None,
                     "trees_1_closed": closed.trees1 if k == 1 else None,
                     "sandwich_holds": (closed.trees_lower is None or closed.trees_lower <= counts.trees[k])
                     and counts.trees[k] <= closed.trees_upper})
    ok = all(r["sandwich_holds"] for r in rows) and counts.F[1] == rows[0]["F_1_closed"] \
        and counts.trees[1] == rows[0]["trees_1_closed"]
    return _doc("count", p, {"N": p.N, "R": p.R, "k": p.k, "format": fmt}, est, budget, status=0 if ok else 1,
                tasks=counts.tasks, seconds=round(counts.seconds, 3), consistent=ok, rows=rows, format=fmt,
                text=_table_text(p, fmt, rows, COUNT_COLUMNS, COUNT_HEADERS))


def run_precision(p) -> dict:
    """``precision``: the smallest bits per parameter keeping every query exact."""
    from georecall.verify.sections.suite import precision_scan
    fmt = _table_format(p)
    spec = _spec(p.construction, None)
    if (p.k is None) != (spec.hops == "single"):
        raise InputError(f"{spec.label} is a {spec.hops}-hop construction: "
                         f"{'omit --k' if spec.hops == 'single' else 'give --k'}")
    k = 1 if p.k is None else p.k
    _queries(p.N, p.R, k)
    if p.codes in ("binary", None) and p.D is not None and p.D < 63 and 2**p.D < p.N:
        raise InputError(f"binary codes need 2^D >= N; got 2^{p.D} = {2**p.D} < N = {p.N}")
    budget = _budget(p)
    est = memory.check_estimate(spec, p.N, p.R, k, codes=p.codes or "binary", D=p.D, bits=1,
                                what="precision").require(budget)
    doc = precision_scan(spec, p.N, p.R, p.k, codes=p.codes, D=p.D, seed=p.seed, max_bits=p.max_bits)
    bits = doc["smallest_exact_bits"]
    params = {"construction": spec.id, "N": p.N, "R": p.R, "k": p.k, "codes": doc["codes"], "D": p.D,
              "max_bits": p.max_bits, "seed": p.seed, "format": fmt}
    return _doc("precision", p, params, est, budget, status=0 if bits is not None else 1, format=fmt,
                text=_table_text(p, fmt, doc["records"], PRECISION_COLUMNS, PRECISION_HEADERS),
                **{key: value for key, value in doc.items() if key not in ("seed",)})


# ---------------------------------------------------------------------------------------------- training


def _train_options(p) -> None:
    if (p.k > 1 or p.cot) and p.attention != "softmax":
        raise InputError(f"k-hop{' and chain-of-thought' if p.cot else ''} queries need softmax attention to "
                         "pick a hop: add --attention softmax")
    if p.attention == "uniform" and p.heads > 1:
        raise InputError("--heads applies to softmax attention; uniform attention has one head")
    _positive_finite("--lr", p.lr)


def run_train(p) -> dict:
    """``train``: the NumPy trainer on every fact (or k-hop query, or CoT step) of THE seeded task."""
    from georecall.constructions.model import save_model
    from georecall.io import atomic_write
    from georecall.theory import seeds
    from georecall.theory.tasks import task_for_seed
    from georecall.verify.experiments.sweep import FROZEN_GROUPS
    from georecall.verify.training.train import init_model, train, training_data
    _train_options(p)
    _queries(p.N, p.R, p.k)
    out = output_path(p.out, suffix=".npz", what="model file") if p.out else None
    m = p.m if p.m is not None else 4 * p.d
    budget = _budget(p)
    shape = dict(k=p.k, cot=p.cot, heads=p.heads, batch_size=p.batch_size, dtype=p.dtype)
    est = memory.train_estimate(p.N, p.R, p.d, m, **shape)
    max_rows = None
    if est.total > budget:  # chunk the batch's gradient (the same gradient, to rounding) before refusing
        one = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=1).total
        per_row = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=2).total - one
        if per_row > 0 and one <= budget:
            max_rows = max(1, int((budget - one) // per_row))
            est = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=max_rows)
        else:  # not even one query at a time fits: name what does not shrink with pieces
            est = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=1)
    est.require(budget)
    task = task_for_seed(p.N, p.R, p.seed)
    tokens, answers, positions, T = training_data(task, p.k, p.cot)
    tie = bool(getattr(p, "tie_readout", False))
    model = init_model(p.N, p.R, p.d, m, attention=p.attention, heads=p.heads,
                       positions=T if p.k > 1 or p.cot else None, rng=seeds.rng(p.seed, "init"),
                       dtype=np.dtype(p.dtype), init_scale=getattr(p, "init_scale", 1.0), tied_readout=tie)
    frozen = tuple(FROZEN_GROUPS[p.mode]) + tuple(g for g in p.freeze if g not in FROZEN_GROUPS[p.mode])
    options: dict[str, Any] = {"weight_decay": getattr(p, "weight_decay", 0.0), "tie_readout": tie,
                               "eps_form": getattr(p, "eps_form", "standard"),
                               "path": getattr(p, "path", "auto"), "max_rows": max_rows}
    result = train(model, tokens, answers, steps=p.steps, lr=p.lr, optimizer=p.optimizer,
                   batch_size=p.batch_size, frozen=frozen, dtype=np.dtype(p.dtype), positions=positions,
                   rng=seeds.rng(p.seed, "batches"), log_every=p.log_every if p.progress else 0, **options)
    options["gradient_path"] = options.pop("path")  # (a model file's record has its own "path")
    params = {"N": p.N, "R": p.R, "k": p.k, "cot": p.cot, "d": p.d, "m": m, "attention": p.attention,
              "heads": p.heads, "mode": p.mode, "frozen": list(frozen), "steps": p.steps, "lr": p.lr,
              "optimizer": p.optimizer, "batch_size": p.batch_size, "dtype": p.dtype, "seed": p.seed,
              "init_scale": getattr(p, "init_scale", 1.0), **options}
    if out:
        atomic_write(out, lambda f: save_model(result.model, f, extra_arrays={"task_table": task.table},
                                               **params))
    from georecall.verify.experiments.sweep import BITS_REFERENCES, knowledge_bits
    bits = knowledge_bits(p.N, p.R, p.k)
    n_params = result.model.parameter_count()
    arrays = result.model.arrays()
    n_trained = n_params - sum(int(arrays[g].size) for g in frozen if g in arrays)
    knowledge = {**bits, "parameters": n_params, "trained_parameters": n_trained,
                 "bits_per_parameter": bits["bits"] / n_params,
                 "bits_per_trained_parameter": bits["bits"] / n_trained if n_trained else None,
                 "stored": bool(result.reached), "references": dict(BITS_REFERENCES)}
    return _doc("train", p, params, est, budget, knowledge=knowledge, reached=result.reached,
                steps_run=result.steps,
                epochs=result.epochs, path=result.path,
                answers=int(answers.size), final_loss=result.losses[-1],
                final_batch_accuracy=result.accuracies[-1], seconds=round(result.seconds, 3), out=out)


_SCHEDULER = re.compile(r"^(local:(?P<workers>[0-9]+)|tcp://(?P<host>[^\s:/]+):(?P<port>[0-9]+))$")


def _scheduler(text: str | None) -> str | None:
    if text is None:
        return None
    match = _SCHEDULER.match(text)
    if not match:
        raise InputError(f"--scheduler must be local:W (W workers) or tcp://HOST:PORT, got {text!r}")
    if match["workers"] is not None and not 1 <= int(match["workers"]) <= 1024:
        raise InputError(f"--scheduler local:W needs 1 <= W <= 1024, got {match['workers']}")
    if match["port"] is not None and not 1 <= int(match["port"]) <= 65535:
        raise InputError(f"--scheduler port must be 1..65535, got {match['port']}")
    return text


def _results_file(est: Estimate, path: str) -> None:
    """Count an existing results file (read before the work) in ``est``."""
    if os.path.isfile(path):
        part = memory.results_file_estimate(est.what, path, os.path.getsize(path)).parts[0]
        est.add(*part)


def run_sweep_threshold(p) -> dict:
    """``sweep threshold``: the smallest d reaching 100% per (N, R, mode, seed), resumable JSONL, fits."""
    from georecall.verify.experiments.sweep import (
        TrialSettings,
        bits_per_parameter,
        fit_thresholds,
        knowledge_table,
        summary_table,
        sweep,
    )
    if p.d_min > p.d_max:
        raise InputError(f"--d-min ({p.d_min}) must not exceed --d-max ({p.d_max})")
    if min(p.N) < 2:
        raise InputError("sweep needs N >= 2 for every N: the fit d* ≈ c·R·ln N has R·ln N = 0 at N = 1")
    if (p.k > 1 or p.cot) and p.attention != "softmax":
        raise InputError("k-hop and chain-of-thought queries need softmax attention: add --attention softmax")
    _positive_finite("--lr", p.lr)
    scheduler = _scheduler(p.scheduler)
    if p.lock_timeout is not None:
        if not (math.isfinite(p.lock_timeout) and p.lock_timeout >= 0):
            raise InputError(f"--lock-timeout must be a finite number of seconds >= 0, got {p.lock_timeout}")
    _positive_finite("--connect-timeout", p.connect_timeout)
    for N in p.N:
        for R in p.R:
            _queries(N, R, p.k)
    out = output_path(p.out, what="results file")
    budget = _budget(p)
    workers = int(scheduler.split(":")[1]) if scheduler and scheduler.startswith("local:") else p.workers
    worst = max((memory.train_estimate(N, R, p.d_max, p.width_factor * p.d_max, k=p.k, cot=p.cot,
                                       heads=p.heads, what="sweep threshold (one trial at --d-max)")
                 for N in p.N for R in p.R), key=lambda e: e.total)
    local = scheduler is None or scheduler.startswith("local:")
    worst.parts = [(label, nbytes, "N, R or --d-max") for label, nbytes, _ in worst.parts]
    est = memory.workers_estimate("sweep threshold", worst, workers, local=local,
                                  option="--scheduler local:W" if scheduler else "--workers")
    _results_file(est, out)
    est.require(budget)
    settings = TrialSettings(steps=p.steps, lr=p.lr, width_factor=p.width_factor, k=p.k, cot=p.cot,
                             attention=p.attention, heads=p.heads)
    notes: list[str] = []
    log = None if p.progress else notes.append
    records = sweep(out, p.N, p.R, p.modes, p.seeds, settings=settings, d_min=p.d_min, d_max=p.d_max,
                    resolution=p.resolution, workers=p.workers, progress=p.progress, scheduler=scheduler,
                    lock_timeout=p.lock_timeout, connect_timeout=p.connect_timeout, log=log,
                    worker_timeout=getattr(p, "worker_timeout", 120.0), max_bytes=budget)
    fits = fit_thresholds(records)
    params = {"N": p.N, "R": p.R, "modes": p.modes, "seeds": p.seeds, "d_min": p.d_min, "d_max": p.d_max,
              "resolution": p.resolution, "workers": p.workers, "scheduler": scheduler,
              "settings": settings.__dict__}
    knowledge = bits_per_parameter(records)
    summary = summary_table(records) + ("\n" + knowledge_table(knowledge) if knowledge else "")
    return _doc("sweep threshold", p, params, est, budget, out=out, settings=settings.__dict__,
                thresholds=records, fits=fits, summary=summary, bits_per_parameter=knowledge, notes=notes)


# ------------------------------------------------------------------------------------- saved models, files


def _check_model_file(path: str, budget: int, what: str) -> tuple[Estimate, list]:
    """Measure a model file from its headers, parse its JSON header, before the library loads it."""
    import json
    _input_file(path, "model file")
    members = memory.npz_members(path)
    est = memory.file_estimate(what, path, members, copies=3).require(budget)
    names = {m.name: m for m in members}
    header_member = names.get("__header__")
    if header_member is None:
        raise InputError(f"{path!r} is not a georecall model (no __header__)")
    if header_member.dtype.kind != "U" or header_member.shape != ():
        raise InputError(f"{path!r}: the model header is not a JSON string")
    with np.load(path, allow_pickle=False) as data:
        text = str(data["__header__"])
    try:
        header = json.loads(text)
    except ValueError:
        raise InputError(f"{path!r}: the model header is not valid JSON") from None
    if not isinstance(header, dict) or header.get("format") != "georecall-model-1":
        raise InputError(f"{path!r} is not a georecall model (its header is not a georecall-model-1 object)")
    _check_structure(path, header.get("structure"))
    for m in members:
        if m.name != "__header__" and m.dtype.kind not in "fiub":
            raise InputError(f"{path!r}: array {m.name!r} has dtype {m.dtype}, not numbers")
    return est, members


def _check_structure(path: str, structure) -> None:
    """A model header's layer structure, field by field (what ``unflatten`` reads, with the types it
    needs)."""
    from georecall.constructions.model import ATTENTION_KINDS
    if not isinstance(structure, list) or not structure or len(structure) > 1024:
        raise InputError(f"{path!r}: the model header's structure is not a list of layers")
    for i, layer in enumerate(structure):
        if not isinstance(layer, dict):
            raise InputError(f"{path!r}: layer {i} of the model header is a {type(layer).__name__}, not an "
                             "object")
        attention = layer.get("attention")
        if attention is not None:
            if not isinstance(attention, dict):
                raise InputError(f"{path!r}: layer {i}'s attention is a {type(attention).__name__}, not an "
                                 "object (kind, inverse_temperature) or null")
            if attention.get("kind") not in ATTENTION_KINDS:
                raise InputError(f"{path!r}: layer {i}'s attention kind {attention.get('kind')!r} is not one "
                                 f"of {', '.join(ATTENTION_KINDS)}")
            beta = attention.get("inverse_temperature", 1.0)
            if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta):
                raise InputError(f"{path!r}: layer {i}'s inverse_temperature {beta!r} is not a finite number")
        if not isinstance(layer.get("mlp", False), (bool, type(None))):
            raise InputError(f"{path!r}: layer {i}'s mlp is {layer.get('mlp')!r}, not true or false")


def _load_model_and_task(path: str, task_path: str | None, budget: int, what: str):
    from georecall.constructions.model import load_model
    from georecall.theory.tasks import Task
    est, _ = _check_model_file(path, budget, what)
    model, header = load_model(path)
    if task_path is not None:
        _input_file(task_path, "task table")
        if task_path.endswith(".npz"):
            members = memory.npz_members(task_path)
        else:
            members = [memory.npy_member(task_path)]
        memory.file_estimate(what, task_path, members).require(budget)
        try:
            table = np.load(task_path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the task table {task_path!r}: {str(exc)[:160]}") from None
        if hasattr(table, "files"):
            with table:
                if "task_table" not in table.files:
                    raise InputError(f"{task_path!r} has no array 'task_table'")
                table = table["task_table"]
    elif "task_table" in header.get("extra_arrays", {}):
        table = header["extra_arrays"]["task_table"]
    else:
        raise InputError(f"{path!r} stores no task table: pass --task TABLE.npy (R × N bijections)")
    table = np.asarray(table)
    if table.ndim != 2 or table.dtype.kind not in "iu":
        raise InputError(f"the task table must be an integer R × N array, got shape {table.shape}, "
                         f"dtype {table.dtype}")
    return model, Task.from_table(table), est


def _holdout(h: float, n: int, what: str) -> float:
    if not (math.isfinite(h) and 0 < h < 1):
        raise InputError(f"--holdout must lie strictly between 0 and 1, got {h}")
    n_test = int(round(h * n))
    if n_test < 1 or n - n_test < 1:
        raise InputError(f"--holdout {h} of {n} {what} leaves {n_test} held out and {n - n_test} to fit: "
                         f"both "
                         "sides need at least one")
    return h


def run_probe(p) -> dict:
    """``probe``: superposition readout, linear probes, interventions, unit selectivity of a saved model."""
    from georecall.theory import seeds
    from georecall.verify.experiments import probes
    budget = _budget(p)
    model, task, est = _load_model_and_task(p.model, p.task, budget, "probe")
    probes.check_model_shapes(model, task)
    _holdout(p.holdout, task.N, "subjects")
    memory.probe_estimate(est, task.N, task.R, model.d, model.mlp_width, model.n_out,
                          p.subjects).require(budget)
    result = probes.probe_all(model, task, holdout=p.holdout, subjects=p.subjects, transfer_steps=None,
                              rng=seeds.rng(p.seed, "probes"))
    params = {"model": p.model, "task": p.task, "holdout": p.holdout, "subjects": p.subjects, "seed": p.seed}
    return _doc("probe", p, params, est, budget, model=p.model, N=task.N, R=task.R, **result)


def _evaluation(result, tokens: np.ndarray, N: int, R: int, k: int) -> dict:
    """Accuracy and margins overall and per relation (the first hop r_1 of each query) from a kept check."""
    assert result.margins is not None and result.predictions is not None  # checked with keep=True
    margins = np.asarray(result.margins, dtype=np.float64).reshape(tokens.shape[0], -1).min(axis=1)
    relation = tokens[:, k - 1] - N  # r_1: the relation applied first (the token before the subject)
    correct = margins > 0
    per_relation = []
    for r in range(R):  # a loop over relations, each vectorized over its queries
        mine = relation == r
        per_relation.append({"relation": r, "queries": int(mine.sum()),
                             "accuracy": float(correct[mine].mean()) if mine.any() else None,
                             "min_margin": float(margins[mine].min()) if mine.any() else None,
                             "mean_margin": float(margins[mine].mean()) if mine.any() else None})
    quantiles = {f"q{q:g}": float(np.quantile(margins, q)) for q in (0.01, 0.1, 0.5)} if margins.size else {}
    n_correct = int(correct.sum())  # strictly positive margin: a tie is not a right answer
    n = int(margins.size)
    return {"queries": n, "n_correct": n_correct, "accuracy": n_correct / n if n else 1.0,
            "exact": n_correct == n, "argmax_correct": int(result.n_correct),
            "min_margin": float(margins.min()) if n else None,
            "mean_margin": float(margins.mean()) if margins.size else None, "margin_quantiles": quantiles,
            "ties": int((margins == 0).sum()), "per_relation": per_relation, "forward": result.forward,
            "decoder": result.decoder, "dtype": result.dtype}


def run_eval(p) -> dict:
    """``eval``: accuracy and logit margins of a model file on every query of its task, overall and per
    relation (greedy decoding of every chain for a chain-of-thought model)."""
    from georecall.memory import query_bytes
    from georecall.theory.tokens import queries, teacher_forcing
    from georecall.verify.checking.check import check_decoding, check_queries
    budget = _budget(p)
    model, task, est = _load_model_and_task(p.model, p.task, budget, "eval")
    header_record = _model_record(p.model)
    k = p.k if p.k is not None else header_record.get("k", 1)
    recorded_cot = header_record.get("cot", False)
    if not isinstance(recorded_cot, bool):  # "false" would be true: refuse what would be misread
        raise InputError(f"the model file records cot = {recorded_cot!r}; expected true or false")
    cot = p.cot or recorded_cot
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= _limit("k"):
        raise InputError(f"the model file records k = {k!r}; pass --k (1..{LIMITS['k']})")
    if model.n_entities != task.N or model.n_relations != task.R:
        raise InputError(f"the model has N = {model.n_entities} entities and R = {model.n_relations} "
                         f"relations, its task N = {task.N}, R = {task.R}")
    if model.n_out != task.N:
        raise InputError(f"the model has {model.n_out} outputs; eval reads answers as entity ids "
                         f"(n_out = N = {task.N})")
    if (k > 1 or cot) and model.max_positions is not None and model.max_positions < (2 * k if cot else k + 1):
        raise InputError(f"{'chain-of-thought ' if cot else ''}{k}-hop queries need "
                         f"{2 * k if cot else k + 1} positions; the model has {model.max_positions}")
    _queries(task.N, task.R, k)
    est.add("queries, predictions, margins", query_bytes(task.N, task.R, k, cot) + 16 * task.N * task.R**k,
            "the model's N or R, or --k")
    est.require(budget)
    tokens, answers = queries(task, k)
    if cot:
        result = check_decoding(model, tokens, teacher_forcing(task, k)[1], keep=True, progress=p.progress)
    else:
        result = check_queries(model, tokens, answers, keep=True, progress=p.progress)
    params = {"model": p.model, "task": p.task, "k": k, "cot": cot}
    return _doc("eval", p, params, est, budget, N=task.N, R=task.R, k=k, cot=cot,
                mode="greedy chain-of-thought decoding" if cot else "argmax at the last position",
                source={key: header_record.get(key) for key in ("construction", "mode", "d", "steps")
                        if key in header_record}, **_evaluation(result, tokens, task.N, task.R, k))


def _model_record(path: str) -> dict:
    """The ``record`` of a model file's JSON header (parameters it was written with), or {}."""
    import json
    with np.load(path, allow_pickle=False) as data:
        header = json.loads(str(data["__header__"]))
    record = header.get("record")
    return record if isinstance(record, dict) else {}


def run_transfer(p) -> dict:
    """``transfer``: freeze-and-swap onto new bijections."""
    from georecall.io import append_jsonl
    from georecall.theory import seeds
    from georecall.verify.experiments import probes
    _positive_finite("--lr", p.lr)
    append = output_path(p.append, what="results file") if p.append else None
    budget = _budget(p)
    model, task, est = _load_model_and_task(p.model, p.task, budget, "transfer")
    probes.check_model_shapes(model, task)
    memory.probe_estimate(est, task.N, task.R, model.d, model.mlp_width, model.n_out, 0).require(budget)
    accuracy = probes.task_accuracy(model, task)
    rng = seeds.rng(p.seed, "transfer")
    readout = probes.superposition_readout(model, task, holdout=0.0, rng=rng)
    result = probes.freeze_and_swap(model, task, readout["encoding_maps"], steps=p.steps, lr=p.lr, rng=rng)
    result["maps_fit"] = readout["encoding_fit"]
    warnings = probes.warnings_for(accuracy, {"encoding": readout["encoding_fit"]})
    params = {"model": p.model, "task": p.task, "steps": p.steps, "lr": p.lr, "seed": p.seed,
              "append": append, "label": p.label}
    doc = _doc("transfer", p, params, est, budget, model=p.model, N=task.N, R=task.R, accuracy=accuracy,
               warnings=warnings, steps=p.steps, lr=p.lr, transfer=result, appended=append)
    if append:
        kind = str(model.meta.get("construction", "model")) if isinstance(model.meta, dict) else "model"
        description = f"trained, d = {model.d}" if kind == "trained" else f"{kind} (built), d = {model.d}"
        append_jsonl(append, {"kind": "transfer", "label": p.label or description, "description": description,
                              "version": __version__, "model": p.model, "seed": p.seed, "N": task.N,
                              "R": task.R, "steps": p.steps, "lr": p.lr, **result})
    return doc


def run_probe_hidden(p) -> dict:
    """``probe-hidden``: linear relational encoding of hidden states the user supplies."""
    from georecall.theory import seeds
    from georecall.verify.experiments import probes
    _input_file(p.states, "states file")
    members = {m.name: m for m in memory.npz_members(p.states)}
    budget = _budget(p)
    est = memory.file_estimate("probe-hidden", p.states, list(members.values()), copies=3).require(budget)
    missing = {"states", "attributes"} - set(members)
    if missing:
        raise InputError(f"{p.states!r} needs arrays 'states' (n × width) and 'attributes' (n × R); missing "
                         f"{sorted(missing)}")
    states = members["states"]
    if len(states.shape) != 2 or states.dtype.kind != "f":
        raise InputError(f"'states' must be a 2-D float array (n × width); got shape {states.shape}, dtype "
                         f"{states.dtype}")
    n = states.shape[0]
    attributes_member = members["attributes"]
    shape = attributes_member.shape
    if len(shape) not in (1, 2) or shape[0] != n or (len(shape) == 2 and shape[1] < 1) \
            or attributes_member.dtype.kind not in "iu":
        raise InputError(f"'attributes' must be an integer array of n × R ids (n = {n} states, R >= 1); got "
                         f"shape {shape}, dtype {attributes_member.dtype}")
    if n < 1 or states.shape[1] < 1:
        raise InputError(f"'states' must hold at least one state of width >= 1; got shape {states.shape}")
    _holdout(p.holdout, n, "states")
    data = probes.load_hidden_states(p.states)
    attributes = data["attributes"]
    distinct = [int(np.unique(attributes[:, r]).size) for r in range(attributes.shape[1])]
    memory.hidden_states_estimate(est, n, states.shape[1], distinct).require(budget)
    result = probes.linear_relational_encoding(data["states"], attributes, holdout=p.holdout,
                                               rng=seeds.rng(p.seed, "probes"))
    return _doc("probe-hidden", p, {"states": p.states, "holdout": p.holdout, "seed": p.seed}, est, budget,
                **result)


def _figure_options(p) -> tuple[int, tuple[str, ...]]:
    from georecall.verify.experiments.figures import DEFAULT_DPI, DEFAULT_FORMATS
    dpi = DEFAULT_DPI if getattr(p, "dpi", None) is None else p.dpi
    formats = tuple(dict.fromkeys(getattr(p, "formats", None) or DEFAULT_FORMATS))
    return dpi, formats


def _require_matplotlib() -> None:
    from georecall.verify.experiments.figures import PLOT_HINT, have_matplotlib
    if not have_matplotlib():
        raise InputError(PLOT_HINT)


def run_probe_lm(p) -> dict:
    """``probe-lm``: a real LM's hidden states on real facts (the only user of :mod:`georecall.verify.lm`)."""
    from georecall.verify.lm import facts as lmfacts
    from georecall.verify.lm import loader
    loader.require_extra()
    facts_path = p.facts or lmfacts.bundled_facts_path()
    facts = lmfacts.load_facts(facts_path)
    figures_dir = output_dir(p.figures) if p.figures is not None else None
    if figures_dir is not None:
        _require_matplotlib()
    budget = _budget(p)
    est = Estimate("probe-lm")
    est.add("model weights as float32 (twice with the random control) and one loading copy",
            loader.weight_bytes_bound(p.model) * (2 if p.no_random_control else 3), "--no-random-control")
    est.add("torch and transformers", memory.GIB // 2, "—")
    est.require(budget)
    from georecall.verify.lm import run as lmrun
    if not p.progress:
        loader.quiet()
    loader.set_threads(p.threads)
    loaded = loader.load_model(p.model)
    L, width = int(loaded.model.config.num_hidden_layers), int(loaded.model.config.hidden_size)
    n_seq = len(facts.subjects) + 2 * len(facts.facts())
    est.add("states (subjects, prompts, attributes; every layer) and the superposition fits",
            4 * n_seq * (L + 1) * width * 2 + 8 * 16 * len(facts.relations) * width * width, "--layers")
    est.require(budget)
    doc = lmrun.probe_lm(loaded, facts, layers=p.layers, intervene_layers=p.intervene_layers,
                         template=p.template, seed=p.seed, random_control=not p.no_random_control,
                         batch_size=p.batch_size, progress=lmrun.stderr_progress if p.progress else None)
    files: list[str] = []
    if figures_dir is not None:
        from georecall.verify.lm.figure import figure
        files = figure(doc, figures_dir)
    params = {"model": p.model, "facts": facts_path, "layers": p.layers,
              "intervene_layers": p.intervene_layers,
              "template": p.template, "random_control": not p.no_random_control, "batch_size": p.batch_size,
              "threads": p.threads, "figures": figures_dir, "seed": p.seed}
    return _doc("probe-lm", p, params, est, budget, **doc, text=lmrun.render_text(doc), figures=files)


def run_figures(p) -> dict:
    """``figures``: the figures of a results file and the computed ones, at ``--dpi`` in each ``--format``."""
    from georecall.verify.experiments.figures import make_figures
    from georecall.verify.experiments.sweep import read_records
    budget = _budget(p)
    est = Estimate("figures")
    if p.source:
        _input_file(p.source, "results file")
        est.add(f"records of {os.path.basename(p.source)}", 20 * os.path.getsize(p.source), "the results "
                                                                                            "file")
    est.add("computed figures (N = 4096)", 2 * memory.GIB // 4, "—")
    est.require(budget)
    out = output_dir(p.out)
    dpi, formats = _figure_options(p)
    _require_matplotlib()
    records = read_records(p.source, max_bytes=budget) if p.source else []
    paths = make_figures(records, out, seed=p.seed, dpi=dpi, formats=formats)
    return _doc("figures", p, {"source": p.source, "out": out, "seed": p.seed, "dpi": dpi,
                               "formats": list(formats)}, est, budget, files=paths)


def run_demo(p) -> dict:
    """``demo``: the G1 walk-through (text), and with ``--figures DIR`` the construction drawn."""
    from georecall.verify.experiments.demo import check_size
    from georecall.verify.experiments.demo import run_demo as demo
    from georecall.verify.experiments.figures import construction_figure, save_figure
    N, R = getattr(p, "N", 8), getattr(p, "R", 2)
    check_size(N, R)
    figures_dir = getattr(p, "figures", None)
    if figures_dir is None and (getattr(p, "dpi", None) is not None or getattr(p, "formats", None)):
        raise InputError("--dpi and --format apply to --figures DIR: add it, or leave them out")
    files: list[str] = []
    if figures_dir is not None:
        output_dir(figures_dir, what="--figures folder")
        _require_matplotlib()
    lines: list[str] = []
    with contextlib.redirect_stdout(io.StringIO()):
        numbers = demo(N, R, seed=p.seed, out=lines.append)
    if figures_dir is not None:
        dpi, formats = _figure_options(p)
        os.makedirs(figures_dir, exist_ok=True)
        fig = construction_figure(N, R, p.seed, query=numbers["query"], relation_names=numbers["relations"])
        files = save_figure(fig, figures_dir, "construction", dpi=dpi, formats=formats)
        lines.append(f"\nThe construction drawn: {', '.join(files)}")
    return _doc("demo", p, {"N": N, "R": R, "seed": p.seed, "figures": figures_dir}, None, None, lines=lines,
                files=files)


def run_study_mechanism(p) -> dict:
    """``study mechanism``: run (or resume) the declared grid, then summarize; or only summarize a file."""
    from georecall.verify.experiments import study
    scheduler = _scheduler(p.scheduler)
    workers = p.workers  # with --scheduler too: refused by the parser (parser.CONFLICTS)
    _positive_finite("--connect-timeout", p.connect_timeout)
    figures_dir = None
    if p.figures is None and (getattr(p, "dpi", None) is not None or getattr(p, "formats", None)):
        raise InputError("--dpi and --format apply to --figures DIR: add it, or leave them out")
    if p.figures is not None:  # refused before any training: no folder, or no matplotlib to draw with
        figures_dir = output_dir(p.figures, what="--figures folder")
        _require_matplotlib()
    notes: list[str] = []
    budget = _budget(p)
    grid_name = getattr(p, "grid", None)
    if grid_name is not None and p.quick:
        raise InputError("--quick and --grid do not combine (--quick is --grid quick)")
    grid_name = grid_name or ("quick" if p.quick else "default")
    if grid_name not in study.GRIDS:
        raise InputError(f"--grid must be one of {sorted(study.GRIDS)}, got {grid_name!r}")
    if p.summary is not None:
        path = _input_file(p.summary, "results file")
        est = Estimate("study mechanism --summary")
    else:
        path = output_path(p.out, what="results file")
        local = scheduler is None or scheduler.startswith("local:")
        workers = int(scheduler.split(":")[1]) if scheduler and scheduler.startswith("local:") else p.workers
        est = study.estimate(grid_name, p.seeds, workers=workers, local=local)
    _results_file(est, path)
    est.require(budget)
    if p.summary is None:
        study.run_study(path, grid_name, seeds=p.seeds, workers=p.workers,
                        scheduler=scheduler, progress=p.progress, connect_timeout=p.connect_timeout,
                        log=None if p.progress else notes.append,
                        worker_timeout=getattr(p, "worker_timeout", None), max_bytes=budget)
    summary = study.summarize(path, max_bytes=budget)
    files: list[str] = []
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        dpi, formats = _figure_options(p)
        files = study.figures(summary, figures_dir, log=None if p.progress else notes.append, dpi=dpi,
                              formats=formats)
        if not files:  # matplotlib vanished between the check and now: say so, do not pass silently
            raise InputError("no figures were written (matplotlib could not be imported)")
    params = {"grid": grid_name, "seeds": p.seeds, "workers": workers,
              "scheduler": scheduler, "out": path, "summary_only": p.summary is not None}
    return _doc("study mechanism", p, params, est, budget, out=path, summary=summary,
                text=study.render_summary(summary), figures=files, notes=notes)


COMMANDS = {
    "verify": run_verify,
    "check single-hop": run_check_single_hop,
    "check multi-hop": run_check_multi_hop,
    "certify single-hop": run_certify,
    "certify multi-hop": run_certify,
    "tradeoff": run_tradeoff,
    "bounds": run_bounds,
    "count": run_count,
    "precision": run_precision,
    "train": run_train,
    "sweep threshold": run_sweep_threshold,
    "study mechanism": run_study_mechanism,
    "probe": run_probe,
    "eval": run_eval,
    "transfer": run_transfer,
    "probe-hidden": run_probe_hidden,
    "probe-lm": run_probe_lm,
    "figures": run_figures,
    "demo": run_demo,
}
