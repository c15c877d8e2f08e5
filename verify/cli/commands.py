"""Commands: one function per ``georecall`` command, returning a result document (no printing).

Each ``run_<command>(p)`` takes that command's typed parameters (:mod:`georecall.verify.cli.params`, built
once from the parsed arguments, the memory budget included), validates what depends on several options or on
files (contradictory combinations the parser cannot see, output paths, damaged input files, the memory
estimate against ``p.budget``) *before* any work, runs the library, and returns a document: a dict with
``command``, ``version``, ``seed``, ``params``, ``status`` (the exit code: 0 pass, 1 a check failed),
``memory`` (the estimate and the budget) and the command's results. Bad input raises
:class:`~georecall.errors.InputError` (exit 2). Progress lines on stderr are the library's, and only when
``p.progress`` is true; rendering is :mod:`georecall.verify.cli.render`'s job.

Imports: the library modules are imported here at module level, except those that pull in scipy or networkx
(the bound tables and counts, the trainer and the sweep: measured to slow ``georecall --help`` by about
0.4 s) and the ``lm`` extra's package (only ``probe-lm`` imports it); those are imported by the command that
needs them. The rows of ``verify`` are not imported at all: :func:`verify_rows` finds them by their entry
point.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from georecall import __version__, memory
from georecall.constructions import registry
from georecall.constructions.model import ATTENTION_KINDS
from georecall.constructions.storage import load_model, save_model
from georecall.errors import InputError
from georecall.io import append_jsonl, atomic_write, check_path, damaged_input, validate_output_path
from georecall.memory import Estimate, query_bytes
from georecall.theory import seeds
from georecall.theory.tasks import Attributes, Task, task_for_seed
from georecall.theory.tokens import queries, teacher_forcing
from georecall.verify.checking import certify as cert
from georecall.verify.checking import run as checking  # the module: tests replace its functions
from georecall.verify.checking.exact import evaluate, exact_bytes
from georecall.verify.cli.params import (
    BoundsParams,
    CertifyMultiHopParams,
    CertifySingleHopParams,
    CheckMultiHopParams,
    CheckSingleHopParams,
    CountParams,
    DemoParams,
    EvalParams,
    ExportParams,
    FigureFiles,
    FiguresParams,
    LectureParams,
    Params,
    PrecisionParams,
    ProbeHiddenParams,
    ProbeLmParams,
    ProbeParams,
    Seeded,
    StudyMechanismParams,
    SweepThresholdParams,
    Table,
    TradeoffParams,
    TrainParams,
    TransferParams,
    VerifyParams,
)
from georecall.verify.experiments import demo, probes, study
from georecall.verify.experiments.figures import (
    DEFAULT_DPI,
    DEFAULT_FORMATS,
    PLOT_HINT,
    construction_figure,
    figure_style,
    have_matplotlib,
    make_figures,
    save_figure,
    trained_beside_g1_figure,
    weights_figures,
)
from georecall.verify.experiments.tradeoff import tradeoff_rows

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
    "run_export",
    "run_figures",
    "run_precision",
    "run_probe",
    "run_probe_hidden",
    "run_probe_lm",
    "run_study_mechanism",
    "run_sweep_threshold",
    "run_tradeoff",
    "run_train",
    "run_transfer",
    "run_verify",
    "verify_estimate",
]

# Hard limits checked before any estimate or allocation (the memory estimate refuses far below most of them).
LIMITS: dict[str, int] = {
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
    "count_paths": 2**20,  # R^k: closed forms N^(R^k) are exact integers
    "bits": 64,
}


def _doc(p: Params, params: dict, est: Estimate | None, **results) -> dict:
    """The result document of command ``p.command``: ``command``, ``version``, ``seed``, ``params``,
    ``status`` (0 unless ``results`` says otherwise), ``memory`` (``est`` against ``p.budget``, when ``est``
    is given) and ``results``."""
    doc = {"command": p.command, "version": __version__, "seed": p.seed if isinstance(p, Seeded) else None,
           "params": params, "status": 0}
    if est is not None:
        doc["memory"] = {**est.as_dict(), "budget_gib": round(p.budget.max_bytes / memory.GIB, 6)}
    doc.update(results)
    return doc


def _queries(N: int, R: int, k: int) -> None:
    if N * R**k > LIMITS["queries"]:
        raise InputError(f"N·R^k = {N}·{R}^{k} queries is more than can be enumerated (limit 2^62): lower "
                         f"N, R "
                         "or k")


def _binary_codes_fit(codes: str | None, D: int | None, N: int) -> None:
    """Refuse binary codes (the default ones: ``codes`` None) too short to tell N entities apart."""
    if codes in ("binary", None) and D is not None and D < 63 and 2**D < N:
        raise InputError(f"binary codes need 2^D >= N; got 2^{D} = {2**D} < N = {N}")


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

    Raises
    ------
    InputError
        ``path`` is a directory, its folder is missing or not writable, or it names a device.
    """
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

    Raises
    ------
    InputError
        No folder given, ``path`` exists and is not a folder, an ancestor is a file, or the nearest existing
        ancestor is not writable.
    """
    if not path:
        raise InputError(f"{what}: a folder is required")
    # the folder's own names, a symlink loop or dangling link on the way, and room for the files written
    # inside it (a figure's name with its temporary suffix: well under _ROOM_BELOW bytes)
    check_path(path, what=what, room_below=_ROOM_BELOW)
    if os.path.exists(path) and not os.path.isdir(path):
        raise InputError(f"{what} {path!r} exists and is not a folder")
    parent = os.path.abspath(path)
    while not os.path.exists(parent):  # the nearest existing ancestor: the folders below it will be created
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise InputError(f"{what} {path!r}: {parent!r} is a file, so the folder cannot be created")
    output_path(os.path.join(parent, ".georecall-probe"), what=what)
    return path


# The longest "/name" a command writes inside an output folder, with the temporary name's suffix.
_ROOM_BELOW = 100


def _input_file(path: str, what: str) -> str:
    if not os.path.exists(path):
        raise InputError(f"no such {what} {path!r}")
    if os.path.isdir(path):
        raise InputError(f"{what} {path!r} is a directory, not a file")
    if not os.access(path, os.R_OK):
        raise InputError(f"{what} {path!r} is not readable")
    return path


def _spec(name: str, hops: str | None) -> registry.ConstructionSpec:
    spec = registry.resolve(name)
    if hops is not None and spec.hops != hops:
        other = "multi-hop" if spec.hops == "multi" else "single-hop"
        raise InputError(f"{spec.label} is a {spec.hops}-hop construction: use check {other}")
    return spec


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
        The document; ``status`` 1 when any row failed.

    Raises
    ------
    InputError
        An unknown construction, or the largest case over the budget.
    """
    chosen = _user_constructions(p.construction)
    specs = None if chosen is None else [registry.get(c) for c in chosen]
    est = verify_estimate(specs, p.budget).require(p.budget)
    start = time.perf_counter()
    reports = [rep.as_dict() for rep in verify_rows()(specs, p.seed, p.progress, p.budget)]
    passed = all(rep["passed"] for rep in reports)
    params = {"seed": p.seed} if specs is None else {"seed": p.seed, "constructions": chosen}
    return _doc(p, params, est, status=0 if passed else 1, passed=passed,
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
    return _doc(p, params, est, status=0 if rep.passed else 1, passed=rep.passed, reports=[report], **rest)


def _task_file(path: str, N: int, R: int, attributes: Attributes, symmetric: bool) -> Task:
    """The task in an ``(R, N)`` ``.npy`` table (``check --task``), validated: shape, integer ids, bijections
    (perfect matchings with ``--symmetric``)."""
    member = memory.npy_member(_input_file(path, "task file"))
    if member.shape != (R, N):
        raise InputError(f"task file {path!r} holds a table of shape {member.shape}, expected (R, N) = "
                         f"({R}, {N})")
    if member.dtype.kind not in "iu":
        raise InputError(f"task file {path!r} holds {member.dtype} values, not integer entity ids")
    try:
        table = np.load(path, allow_pickle=False)
    except Exception as exc:  # whatever NumPy's readers raise on a damaged file
        raise InputError(f"cannot read task file {path!r}: {str(exc).splitlines()[0]}") from None
    task = Task(table, attributes)  # validates the bijections (InputError)
    rows = np.arange(R)[:, None]
    if symmetric and not (np.array_equal(table[rows, table], np.broadcast_to(np.arange(N), (R, N)))
                          and not np.any(table == np.arange(N))):
        raise InputError(f"task file {path!r}: --symmetric needs every relation to be a perfect matching")
    return task


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
    spec = _spec(p.construction, "single")
    _queries(p.N, p.R, 1)
    # --bits with --integer: refused by the parser (parser.CONFLICTS)
    if p.integer and p.codes == "gaussian":
        raise InputError("gaussian codes have no integer scale: --integer needs binary or sign codes")
    if p.symmetric and p.N % 2:
        raise InputError(f"--symmetric relations are perfect matchings: N must be even, got {p.N}")
    _binary_codes_fit(p.codes, p.D, p.N)
    save = output_path(p.save, suffix=".npz", what="model file") if p.save else None
    est = checking.check_estimate(spec, p.N, p.R, 1, p.codes, D=p.D, dtype=p.dtype, bits=p.bits,
                                  integer=p.integer, attributes=p.attributes, what="check single-hop",
                                  budget=p.budget).require(p.budget)
    task = _task_file(p.task, p.N, p.R, p.attributes, p.symmetric) if p.task else None
    with _saved_atomically(save) as tmp:
        rep = checking.check_single_hop(p.N, p.R, construction=spec,  # type: ignore[arg-type]  # a spec works
                                        codes=p.codes, D=p.D, seed=p.seed, integer=p.integer, gate=p.gate,
                                        beta=p.beta, lam=p.lam, dtype=p.dtype, bits=p.bits,
                                        attributes=p.attributes, symmetric=p.symmetric, task=task, save=tmp,
                                        budget=p.budget, estimate=est, progress=p.progress)
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
    spec = _spec(p.construction, "multi")
    _queries(p.N, p.R, p.k)
    _binary_codes_fit(p.codes, p.D, p.N)
    est = checking.check_estimate(spec, p.N, p.R, p.k, p.codes, D=p.D, what="check multi-hop",
                                  budget=p.budget).require(p.budget)
    task = _task_file(p.task, p.N, p.R, "shared", False) if p.task else None
    rep = checking.check_multi_hop(p.N, p.R, p.k, construction=spec,  # type: ignore[arg-type]  # a spec works
                                   codes=p.codes, D=p.D, attention=p.attention, beta=p.beta, gate=p.gate,
                                   seed=p.seed, task=task, budget=p.budget, estimate=est, progress=p.progress)
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
        The document; ``status`` 0 only for CERTIFIED.

    Raises
    ------
    InputError
        ``--integer`` with ``--float`` or with gaussian codes, ``--symmetric`` with N odd, binary codes with
        2^D < N, an unwritable ``--witness``, or the estimate over the budget.
    """
    spec = _spec(p.construction, "single" if isinstance(p, CertifySingleHopParams) else "multi")
    k, integer, symmetric = 1, False, False
    attributes: Attributes = "shared"
    options: dict[str, Any]
    if isinstance(p, CertifySingleHopParams):
        if p.integer and p.float:
            raise InputError("--integer and --float exclude each other")
        # exact arithmetic where the construction has an integer scale and no real constant was asked for
        integer = p.integer or (not p.float and "integer" in spec.accepts()
                                and (p.codes or "binary") in ("binary", "sign") and p.lam == 1.0
                                and p.gate is None)
        attributes, symmetric = p.attributes, p.symmetric
        # only options the construction takes, or that were asked for (refused then, naming them)
        lam = p.lam if ("lam" in spec.accepts() or p.lam != 1.0) else None
        options = {"gate": p.gate, "lam": lam, **({"integer": True} if integer else {})}
    else:
        k, options = p.k, {"attention": p.attention, "beta": p.beta, "gate": p.gate}
    if integer and p.codes == "gaussian":
        raise InputError("gaussian codes have no integer scale: --integer needs binary or sign codes")
    if symmetric and p.N % 2:
        raise InputError(f"--symmetric relations are perfect matchings: N must be even, got {p.N}")
    _binary_codes_fit(p.codes, p.D, p.N)
    witness = output_path(p.witness, suffix=".npy", what="witness file") if p.witness else None
    est = cert.certify_estimate(spec, p.N, p.R, k, p.codes, p.D, integer=integer,
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
    return _doc(p, params, est, status=0 if result.passed else 1, **doc)


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


def _table_format(p: Table, json_flag: bool, default: str = "text") -> str:
    """The table format of a table command: ``--format`` (json also by ``--json``, which the parser refuses
    beside another ``--format``: ``parser.CONFLICTS``); ``--columns``/``--caption``/``--label`` are refused
    where they do nothing."""
    fmt = "json" if json_flag else p.format or default
    if p.columns is not None and fmt not in ("md", "csv", "latex"):
        raise InputError(f"--columns chooses the columns of an md, csv or latex table, not of {fmt}")
    for flag, value in (("caption", p.caption), ("label", p.label)):
        if value is not None and fmt != "latex":
            raise InputError(f"--{flag} is for --format latex")
    return fmt


def _columns(p: Table) -> list[str] | None:
    if p.columns is None:
        return None
    columns = [c.strip() for c in p.columns.split(",") if c.strip()]
    if not columns:
        raise InputError("--columns needs at least one column name (comma-separated)")
    return columns


def _table_text(p: Table, fmt: str, rows: list[dict], columns, headers) -> str:
    from georecall.bounds.tables import render_table  # networkx, scipy: kept off georecall --help
    if fmt in ("text", "json"):
        return ""
    return render_table(rows, fmt, columns=_columns(p) or columns, headers=headers, caption=p.caption,
                        label=p.label)


def _user_constructions(names: list[str] | None, hops: str | None = None) -> list[str] | None:
    """The ids of ``--construction`` (registered names, ``MODULE:ATTR`` or ``FILE.py:ATTR``; a user's
    construction is imported and registered), or None for every registered one."""
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


def run_tradeoff(p: TradeoffParams) -> dict:
    """``tradeoff``: d, m and parameters of every k-hop construction (or those of ``--construction``) for
    k = 1..k_max.

    Parameters
    ----------
    p : TradeoffParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        R^k_max over 2^40, a table option that does not apply, or a single-hop ``--construction``.
    """
    fmt = _table_format(p, p.json)
    # --k-max <= LIMITS["k"]: the parser's type
    if p.R ** p.k_max > 2**40:
        raise InputError(f"R^k_max = {p.R}^{p.k_max} relation paths is too many to tabulate (limit 2^40): "
                         "lower --k-max or --R")
    est = Estimate("tradeoff").add("the table (promises only: nothing is built)", 64 * p.k_max * 2**10,
                                   "--k-max").require(p.budget)
    chosen = _user_constructions(p.construction, "multi")
    rows = tradeoff_rows(p.N, p.R, p.k_max, constructions=chosen)
    specs = registry.specs("multi") if chosen is None else [registry.get(c) for c in chosen]
    legend = [f"{s.id}: {s.result}" for s in specs]
    return _doc(p, {"N": p.N, "R": p.R, "k_max": p.k_max, "constructions": chosen, "format": fmt}, est,
                rows=rows, constructions=[s.id for s in specs], legend=legend, format=fmt,
                text=_table_text(p, fmt, rows, TRADEOFF_COLUMNS, TRADEOFF_HEADERS))


def _needed_bits(items: list[str] | None) -> dict[str, int]:
    needed = {}
    for item in items or []:
        name, sep, value = item.rpartition("=")
        if not sep or not name:
            raise InputError(f"--needed takes CONSTRUCTION=B (e.g. G1=2), got {item!r}")
        try:
            b = int(value)
        except ValueError:
            raise InputError(f"--needed {item!r}: B must be a whole number of bits") from None
        if not 1 <= b <= LIMITS["bits"]:
            raise InputError(f"--needed {item!r}: B must lie in [1, {LIMITS['bits']}]")
        needed[registry.resolve(name).id] = b
    return needed


def run_bounds(p: BoundsParams) -> dict:
    """``bounds``: lower bounds on d beside every construction's d (or those of ``--construction``); with
    ``--gaps`` the gap table (``tables.gap_rows``) at the b each construction needs and at a per-parameter
    b.

    Parameters
    ----------
    p : BoundsParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        ``--bits`` with ``--gaps``, ``--needed`` without it, a bad ``--needed`` item, a table option that does
        not apply, or the estimate over the budget.
    """
    from georecall.bounds.tables import bound_rows, gap_rows, render  # networkx, scipy: kept off --help
    fmt = _table_format(p, p.json, default="md")
    # N <= 2^53 and 1/64 <= b <= 64: the parser's types
    if p.gaps and p.bits is not None:
        raise InputError("--gaps evaluates each construction at the b it needs (and per parameter): "
                         "--bits does not apply (use --needed NAME=B to set one)")
    if not p.gaps and p.needed:
        raise InputError("--needed is for the gap table: add --gaps")
    bits = p.bits if p.bits is not None else [1.0]
    chosen = _user_constructions(p.construction)
    # the b of each spec's bits claim (``ConstructionSpec.bits``), overridden or added by --needed
    needed = {**checking.table_bits(), **_needed_bits(p.needed)} if p.gaps else {}
    est = memory.bounds_estimate(p.N, p.R, p.k).require(p.budget)
    start = time.perf_counter()
    if p.gaps:
        rows = gap_rows(p.N, p.R, p.k, needed, checking.per_parameter_bits(), constructions=chosen)
    else:
        rows = bound_rows(p.N, p.R, p.k, bits, constructions=chosen)
    text = render(rows, fmt, columns=_columns(p), caption=p.caption, label=p.label) if fmt != "json" else ""
    params = {"N": p.N, "R": p.R, "k": p.k, "bits": None if p.gaps else bits, "format": fmt, "gaps": p.gaps,
              "needed": needed or None, "constructions": chosen}
    return _doc(p, params, est, rows=rows, text=text, format=fmt,
                seconds=round(time.perf_counter() - start, 3))


def run_count(p: CountParams) -> dict:
    """``count``: enumerate every (N!)^R task and count |F_k| and |Trees_k|.

    Parameters
    ----------
    p : CountParams

    Returns
    -------
    dict
        The document; ``status`` 1 when a count contradicts its closed form or the sandwich.

    Raises
    ------
    InputError
        More tasks than the enumeration limit, R^k over 2^20, or the estimate over the budget.
    """
    from georecall.bounds.counting import MAX_TASKS, closed_forms, enumerate_counts  # networkx: not --help
    fmt = _table_format(p, p.json)
    # k <= LIMITS["k"]: the parser's type
    log2_tasks = memory.count_tasks_log2(p.N, p.R)  # lgamma: no factorial is computed before this check
    if log2_tasks > math.log2(MAX_TASKS) + 1e-9:
        raise InputError(f"the enumeration covers (N!)^R ≈ 2^{log2_tasks:.4g} tasks, more than the limit of "
                         f"{MAX_TASKS:,} (N <= 5 with R <= 3 and N <= 6 with R <= 2 fit): lower N or R")
    if p.R ** p.k > LIMITS["count_paths"]:
        raise InputError(f"R^k = {p.R}^{p.k} paths per task is more than count handles (limit 2^20): lower k")
    n_tasks = math.factorial(p.N) ** p.R
    est = memory.count_estimate(p.N, p.R, p.k, n_tasks).require(p.budget)
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
    return _doc(p, {"N": p.N, "R": p.R, "k": p.k, "format": fmt}, est, status=0 if ok else 1,
                tasks=counts.tasks, seconds=round(counts.seconds, 3), consistent=ok, rows=rows, format=fmt,
                text=_table_text(p, fmt, rows, COUNT_COLUMNS, COUNT_HEADERS))


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
    fmt = _table_format(p, p.json)
    spec = _spec(p.construction, None)
    if (p.k is None) != (spec.hops == "single"):
        raise InputError(f"{spec.label} is a {spec.hops}-hop construction: "
                         f"{'omit --k' if spec.hops == 'single' else 'give --k'}")
    k = 1 if p.k is None else p.k
    _queries(p.N, p.R, k)
    _binary_codes_fit(p.codes, p.D, p.N)
    est = checking.check_estimate(spec, p.N, p.R, k, p.codes, D=p.D, bits=1, what="precision",
                                  budget=p.budget).require(p.budget)
    doc = checking.precision_scan(spec, p.N, p.R, p.k, codes=p.codes, D=p.D, seed=p.seed,
                                  max_bits=p.max_bits, budget=p.budget, estimate=est)
    bits = doc["smallest_exact_bits"]
    params = {"construction": spec.id, "N": p.N, "R": p.R, "k": p.k, "codes": doc["codes"], "D": p.D,
              "max_bits": p.max_bits, "seed": p.seed, "format": fmt}
    return _doc(p, params, est, status=0 if bits is not None else 1, format=fmt,
                text=_table_text(p, fmt, doc["records"], PRECISION_COLUMNS, PRECISION_HEADERS),
                **{key: value for key, value in doc.items() if key not in ("seed",)})


# ---------------------------------------------------------------------------------------------- training


def _train_options(p: TrainParams) -> None:
    if (p.k > 1 or p.cot) and p.attention != "softmax":
        raise InputError(f"k-hop{' and chain-of-thought' if p.cot else ''} queries need softmax attention to "
                         "pick a hop: add --attention softmax")
    if p.attention == "uniform" and p.heads > 1:
        raise InputError("--heads applies to softmax attention; uniform attention has one head")
    # --lr positive and finite: the parser's type


def _train_estimate(p: TrainParams, m: int) -> tuple[Estimate, int | None]:
    """The trainer's estimate against the budget, and the rows per gradient chunk (``None``: no chunking)
    that make it fit when the whole batch does not (the same gradient, to rounding). The final exact
    evaluation's chunks are counted before the piece size is chosen."""
    shape: dict[str, Any] = dict(k=p.k, cot=p.cot, heads=p.heads, batch_size=p.batch_size, dtype=p.dtype)
    T_train = 2 * p.k if p.cot else p.k + 1
    evaluation = memory.checker_chunk_bytes(max(p.d, m, p.N), T_train, p.N * p.R**p.k, p.budget)
    budget = p.budget.max_bytes - evaluation
    est = memory.train_estimate(p.N, p.R, p.d, m, **shape)
    max_rows = None
    if est.total > budget:  # chunk the batch's gradient before refusing
        one = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=1).total
        per_row = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=2).total - one
        if per_row > 0 and one <= budget:
            max_rows = max(1, int((budget - one) // per_row))
            est = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=max_rows)
        else:  # not even one query at a time fits: name what does not shrink with pieces
            est = memory.train_estimate(p.N, p.R, p.d, m, **shape, max_rows=1)
    est.add("final exact evaluation (checker chunks)", evaluation, "--d, --m or --N")
    return est.require(p.budget), max_rows


def _knowledge(p: TrainParams, model, frozen: tuple[str, ...], reached: bool) -> dict:
    """Bits of knowledge the task holds, per parameter of the trained model (all, and the trained ones)."""
    from georecall.verify.experiments.sweep import BITS_REFERENCES, knowledge_bits  # scipy: not --help
    bits = knowledge_bits(p.N, p.R, p.k)
    n_params = model.parameter_count()
    arrays = model.arrays()
    n_trained = n_params - sum(int(arrays[g].size) for g in frozen if g in arrays)
    return {**bits, "parameters": n_params, "trained_parameters": n_trained,
            "bits_per_parameter": bits["bits"] / n_params,
            "bits_per_trained_parameter": bits["bits"] / n_trained if n_trained else None,
            "stored": bool(reached), "references": dict(BITS_REFERENCES)}


def run_train(p: TrainParams) -> dict:
    """``train``: the NumPy trainer on every fact (or k-hop query, or CoT step) of THE seeded task.

    Parameters
    ----------
    p : TrainParams

    Returns
    -------
    dict
        The document (``reached``: 100% within the step budget).

    Raises
    ------
    InputError
        k hops or CoT without softmax attention, ``--heads`` with uniform attention, an unwritable ``--out``,
        or the estimate over the budget even with the gradient chunked.
    FloatingPointError
        Training diverged (exit 1).
    """
    from georecall.verify.experiments.sweep import FROZEN_GROUPS  # scipy: kept off georecall --help
    from georecall.verify.training.train import init_model, train, training_data
    _train_options(p)
    _queries(p.N, p.R, p.k)
    out = output_path(p.out, suffix=".npz", what="model file") if p.out else None
    m = p.m if p.m is not None else 4 * p.d
    est, max_rows = _train_estimate(p, m)
    task = task_for_seed(p.N, p.R, p.seed)
    tokens, answers, positions, T = training_data(task, p.k, p.cot)
    model = init_model(p.N, p.R, p.d, m, attention=p.attention, heads=p.heads,
                       positions=T if p.k > 1 or p.cot else None, rng=seeds.rng(p.seed, "init"),
                       dtype=np.dtype(p.dtype), init_scale=p.init_scale, tied_readout=p.tie_readout)
    frozen = tuple(FROZEN_GROUPS[p.mode]) + tuple(g for g in p.freeze if g not in FROZEN_GROUPS[p.mode])
    options: dict[str, Any] = {"weight_decay": p.weight_decay, "tie_readout": p.tie_readout,
                               "eps_form": p.eps_form, "path": p.path, "max_rows": max_rows}
    result = train(model, tokens, answers, steps=p.steps, lr=p.lr, optimizer=p.optimizer,
                   batch_size=p.batch_size, frozen=frozen, dtype=np.dtype(p.dtype), positions=positions,
                   rng=seeds.rng(p.seed, "batches"), log_every=p.log_every if p.progress else 0, **options)
    options["gradient_path"] = options.pop("path")  # (a model file's record has its own "path")
    params = {"N": p.N, "R": p.R, "k": p.k, "cot": p.cot, "d": p.d, "m": m, "attention": p.attention,
              "heads": p.heads, "mode": p.mode, "frozen": list(frozen), "steps": p.steps, "lr": p.lr,
              "optimizer": p.optimizer, "batch_size": p.batch_size, "dtype": p.dtype, "seed": p.seed,
              "init_scale": p.init_scale, **options}
    if out:
        atomic_write(out, lambda f: save_model(result.model, f, extra_arrays={"task_table": task.table},
                                               **params))
    final = evaluate(result.model, tokens, answers, positions=positions, budget=p.budget)
    accuracy = {"accuracy": final.accuracy, "n_correct": final.n_correct, "queries": final.n_queries,
                "arith": final.arith, "n_redecided": final.n_redecided, "n_undecided": final.n_undecided,
                "min_margin": {"lo": final.min_margin},
                "meaning": "the trained weights' own function in exact arithmetic, on every training query"}
    return _doc(p, params, est, knowledge=_knowledge(p, result.model, frozen, result.reached),
                final_accuracy=accuracy,
                reached=final.exact, steps_run=result.steps, epochs=result.epochs, path=result.path,
                answers=int(answers.size), final_loss=result.losses[-1],
                final_batch_accuracy=result.accuracies[-1], seconds=round(result.seconds, 3), out=out)


def _results_file(est: Estimate, path: str) -> None:
    """Count an existing results file (read before the work) in ``est``."""
    if os.path.isfile(path):
        part = memory.results_file_estimate(est.what, path, os.path.getsize(path)).parts[0]
        est.add(*part)


def _sweep_estimate(p: SweepThresholdParams, out: str) -> Estimate:
    """The sweep's estimate: the largest trial at ``--d-max`` in each worker, and the results file read
    first."""
    worst = max((memory.train_estimate(N, R, p.d_max, p.width_factor * p.d_max, k=p.k, cot=p.cot,
                                       heads=p.heads, what="sweep threshold (one trial at --d-max)")
                 for N in p.N for R in p.R), key=lambda e: e.total)
    worst.parts = [(label, nbytes, "N, R or --d-max") for label, nbytes, _ in worst.parts]
    est = memory.workers_estimate("sweep threshold", worst, p.local_workers, local=p.local,
                                  option="--scheduler local:W" if p.scheduler else "--workers")
    _results_file(est, out)
    return est.require(p.budget)


def run_sweep_threshold(p: SweepThresholdParams) -> dict:
    """``sweep threshold``: the smallest d reaching 100% per (N, R, mode, seed), resumable JSONL, fits.

    Parameters
    ----------
    p : SweepThresholdParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        ``--d-min`` above ``--d-max``, k hops or CoT without softmax, more queries than can be enumerated, an
        unwritable ``--out``, the estimate over the budget, or what the sweep refuses (a damaged results
        file, a lock held, no Dask scheduler).
    """
    from georecall.verify.experiments.sweep import (  # scipy: kept off georecall --help
        TrialSettings,
        bits_per_parameter,
        fit_thresholds,
        knowledge_table,
        measure_step_seconds,
        summary_table,
        sweep,
    )
    if p.d_min > p.d_max:
        raise InputError(f"--d-min ({p.d_min}) must not exceed --d-max ({p.d_max})")
    # N >= 2, --lr, --lock-timeout and --connect-timeout in range: the parser's types; --scheduler: its params
    if (p.k > 1 or p.cot) and p.attention != "softmax":
        raise InputError("k-hop and chain-of-thought queries need softmax attention: add --attention softmax")
    for N in p.N:
        for R in p.R:
            _queries(N, R, p.k)
    out = output_path(p.out, what="results file")
    est = _sweep_estimate(p, out)
    settings = TrialSettings(steps=p.steps, lr=p.lr, width_factor=p.width_factor, k=p.k, cot=p.cot,
                             attention=p.attention, heads=p.heads)
    notes: list[str] = []
    estimates: list[dict] = []
    records = sweep(out, p.N, p.R, p.modes, p.seeds, settings=settings, d_min=p.d_min, d_max=p.d_max,
                    resolution=p.resolution, workers=p.workers, progress=p.progress, scheduler=p.scheduler,
                    lock_timeout=p.lock_timeout, connect_timeout=p.connect_timeout,
                    log=None if p.progress else notes.append, worker_timeout=p.worker_timeout,
                    budget=p.budget, search=p.search, budget_hours=p.budget_hours,
                    step_seconds_fallback=lambda N, R, d: measure_step_seconds(N, R, d, settings),
                    on_estimate=estimates.append)
    fits = fit_thresholds(records)
    params = {"N": p.N, "R": p.R, "modes": p.modes, "seeds": p.seeds, "d_min": p.d_min, "d_max": p.d_max,
              "resolution": p.resolution, "workers": p.workers, "scheduler": p.scheduler,
              "search": p.search, "budget_hours": p.budget_hours, "settings": settings.__dict__}
    knowledge = bits_per_parameter(records)
    summary = summary_table(records) + ("\n" + knowledge_table(knowledge) if knowledge else "")
    return _doc(p, params, est, out=out, settings=settings.__dict__, thresholds=records, fits=fits,
                summary=summary, bits_per_parameter=knowledge, notes=notes,
                estimate=estimates[0] if estimates else None)


# ------------------------------------------------------------------------------------- saved models, files


def _check_model_file(path: str, budget: memory.Budget, what: str) -> tuple[Estimate, list]:
    """Measure a model file from its headers, parse its JSON header, before the library loads it."""
    _input_file(path, "model file")
    members = memory.npz_members(path)
    est = memory.file_estimate(what, path, members, copies=3).require(budget)
    names = {m.name: m for m in members}
    header_member = names.get("__header__")
    if header_member is None:
        raise InputError(f"{path!r} is not a georecall model (no __header__)")
    if header_member.dtype.kind != "U" or header_member.shape != ():
        raise InputError(f"{path!r}: the model header is not a JSON string")
    with damaged_input(path, "model file"), np.load(path, allow_pickle=False) as data:
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
            hint = (" (bfloat16 saved as raw bytes? cast it to float32 before saving: exact)"
                    if m.dtype.kind == "V" and m.dtype.itemsize == 2 else "")
            raise InputError(f"{path!r}: array {m.name!r} has dtype {m.dtype}, not numbers{hint}")
    return est, members


def _check_structure(path: str, structure) -> None:
    """A model header's layer structure, field by field (what ``unflatten`` reads, with the types it
    needs)."""
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


def _load_model_and_task(path: str, task_path: str | None, budget: memory.Budget,
                         what: str) -> tuple[Any, Task, Estimate]:
    """The model of a model file and its task (stored inside, or ``--task``), each measured against the
    budget before it is read."""
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
        except Exception as exc:  # whatever NumPy's readers raise on a damaged file
            raise InputError(f"cannot read the task table {task_path!r}: {str(exc)[:160]}") from None
        if hasattr(table, "files"):
            with table, damaged_input(task_path, "task table"):
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


def run_probe(p: ProbeParams) -> dict:
    """``probe``: superposition readout, linear probes, interventions, unit selectivity of a saved model.

    Parameters
    ----------
    p : ProbeParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        A missing or damaged model or task file, shapes that do not match the task, a ``--holdout`` leaving a
        side empty, or the estimate over the budget.
    """
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "probe")
    model = _as_float64(model, est, p.budget)
    probes.check_model_shapes(model, task)
    _holdout(p.holdout, task.N, "subjects")
    memory.probe_estimate(est, task.N, task.R, model.d, model.mlp_width, model.n_out,
                          p.subjects).require(p.budget)
    result = probes.probe_all(model, task, holdout=p.holdout, subjects=p.subjects, transfer_steps=None,
                              rng=seeds.rng(p.seed, "probes"))
    params = {"model": p.model, "task": p.task, "holdout": p.holdout, "subjects": p.subjects, "seed": p.seed}
    return _doc(p, params, est, model=p.model, N=task.N, R=task.R, **result)


def _interval(lo: np.ndarray, hi: np.ndarray) -> dict:
    """``{"lo", "hi", "width"}`` of an interval that contains an exact value."""
    lo_v, hi_v = float(lo), float(hi)
    return {"lo": lo_v, "hi": hi_v, "width": hi_v - lo_v if math.isfinite(hi_v - lo_v) else None}


def _evaluation(result, tokens: np.ndarray, N: int, R: int, k: int) -> dict:
    """Accuracy and margins overall and per relation (the first hop r_1 of each query) from a kept check.

    Every margin is an interval ``{"lo", "hi", "width"}`` containing the exact margin (per query ``lo <=
    exact <= hi``, so the minimum, mean and each quantile of the exact margins lie between those of ``lo``
    and of ``hi``)."""
    assert result.margins is not None and result.predictions is not None  # checked with keep=True
    lows = np.asarray(result.margins, dtype=np.float64).reshape(tokens.shape[0], -1)
    highs = (lows if result.margin_highs is None
             else np.asarray(result.margin_highs, dtype=np.float64).reshape(lows.shape))
    lo, hi = lows.min(axis=1), highs.min(axis=1)
    relation = tokens[:, k - 1] - N  # r_1: the relation applied first (the token before the subject)
    correct = lo > 0
    per_relation = []
    for r in range(R):  # a loop over relations, each vectorized over its queries
        mine = relation == r
        per_relation.append({"relation": r, "queries": int(mine.sum()),
                             "accuracy": float(correct[mine].mean()) if mine.any() else None,
                             "min_margin": _interval(lo[mine].min(), hi[mine].min()) if mine.any() else None,
                             "mean_margin": _interval(lo[mine].mean(), hi[mine].mean()) if mine.any()
                             else None})
    quantiles = ({f"q{q:g}": _interval(np.quantile(lo, q), np.quantile(hi, q)) for q in (0.01, 0.1, 0.5)}
                 if lo.size else {})
    n_correct = int(correct.sum())  # strictly positive margin: a tie is not a right answer
    n = int(lo.size)
    return {"queries": n, "n_correct": n_correct, "accuracy": n_correct / n if n else 1.0,
            "exact": n_correct == n, "arith": result.arith, "n_redecided": int(result.n_redecided),
            "n_undecided": int(result.n_undecided),
            "margin_kind": "interval [lo, hi] containing the exact margin of the stored weights"
            if result.arith == "exact" else f"interval [lo, hi] certified from a {result.arith} computation "
            "(weights cast to it)",
            "min_margin": _interval(lo.min(), hi.min()) if n else None,
            "mean_margin": _interval(lo.mean(), hi.mean()) if n else None, "margin_quantiles": quantiles,
            "ties": int(((lo == 0) & (hi == 0)).sum()), "per_relation": per_relation,
            "forward": result.forward, "decoder": result.decoder, "dtype": result.dtype,
            **({"note": result.fallback} if result.fallback else {})}


def run_eval(p: EvalParams) -> dict:
    """``eval``: accuracy and logit margins of a model file on every query of its task, overall and per
    relation (greedy decoding of every chain for a chain-of-thought model).

    Parameters
    ----------
    p : EvalParams

    Returns
    -------
    dict
        The document (``status`` 0 whatever the accuracy: a check is ``georecall check``).

    Raises
    ------
    InputError
        A missing or damaged model or task file, a recorded k or cot that cannot be read, a model whose
        sizes or positions do not fit its task's queries, or the estimate over the budget.
    """
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "eval")
    header_record = _model_record(p.model)
    k = p.k if p.k is not None else header_record.get("k", 1)
    recorded_cot = header_record.get("cot", False)
    if not isinstance(recorded_cot, bool):  # "false" would be true: refuse what would be misread
        raise InputError(f"the model file records cot = {recorded_cot!r}; expected true or false")
    cot = p.cot or recorded_cot
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= LIMITS["k"]:
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
    width = max(model.d, model.readout.matrix.shape[0], model.mlp_width)
    T = 2 * k if cot else k + 1
    est.add("checker chunks", memory.checker_chunk_bytes(width, T, task.N * task.R**k, p.budget),
            "the model's d or m")
    _arith_estimate(est, model, p.arith, T, p.budget)
    est.require(p.budget)
    tokens, answers = queries(task, k)
    if cot:
        result = evaluate(model, tokens, teacher_forcing(task, k)[1], decode=True, arith=p.arith, keep=True,
                          progress=p.progress, budget=p.budget)
    else:
        result = evaluate(model, tokens, answers, arith=p.arith, keep=True, progress=p.progress,
                          budget=p.budget)
    params = {"model": p.model, "task": p.task, "k": k, "cot": cot, "arith": p.arith}
    return _doc(p, params, est, N=task.N, R=task.R, k=k, cot=cot,
                mode="greedy chain-of-thought decoding" if cot else "argmax at the last position",
                source={key: header_record.get(key) for key in ("construction", "mode", "d", "steps")
                        if key in header_record}, **_evaluation(result, tokens, task.N, task.R, k),
                stored_dtype="+".join(sorted({str(a.dtype) for a in model.arrays().values()})))


def _arith_estimate(est: Estimate, model, arith: str, T: int, budget: memory.Budget) -> None:
    """Count the cast copy of the weights (to float64 for exact arithmetic, or to ``arith``) and the exact
    re-decision in ``est``."""
    dtype = np.dtype(np.float64 if arith == "exact" else arith)
    cast = sum(int(a.size) * dtype.itemsize for a in model.arrays().values() if a.dtype != dtype)
    if cast:
        est.add(f"weights cast to {dtype}", cast, "the model's size")
    if arith == "exact":
        est.add("exact re-decision (weights as integers, one chunk)", exact_bytes(model, T, budget),
                "the model's size")


def _as_float64(model, est: Estimate, budget: memory.Budget):
    """The model with every array cast to float64 (exact: the same function), counted in ``est``: the
    probes and the transfer then compute on the same numbers whatever precision the file stores."""
    cast = sum(int(a.size) * 8 for a in model.arrays().values() if a.dtype != np.float64)
    if cast:
        est.add("weights cast to float64 (exactly)", cast, "the model's size").require(budget)
        return model.astype(np.float64)
    return model


def _model_record(path: str) -> dict:
    """The ``record`` of a model file's JSON header (parameters it was written with), or {}."""
    with damaged_input(path, "model file"), np.load(path, allow_pickle=False) as data:
        header = json.loads(str(data["__header__"]))
    record = header.get("record") if isinstance(header, dict) else None
    return record if isinstance(record, dict) else {}


def run_transfer(p: TransferParams) -> dict:
    """``transfer``: freeze-and-swap onto new bijections.

    Parameters
    ----------
    p : TransferParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        An unwritable ``--append``, a missing or damaged model or task file, shapes that do not match the
        task, or the estimate over the budget.
    """
    # --lr positive and finite: the parser's type
    append = output_path(p.append, what="results file") if p.append else None
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "transfer")
    model = _as_float64(model, est, p.budget)
    probes.check_model_shapes(model, task)
    memory.probe_estimate(est, task.N, task.R, model.d, model.mlp_width, model.n_out, 0).require(p.budget)
    accuracy = probes.task_accuracy(model, task)
    rng = seeds.rng(p.seed, "transfer")
    readout = probes.superposition_readout(model, task, holdout=0.0, rng=rng)
    result = probes.freeze_and_swap(model, task, readout["encoding_maps"], steps=p.steps, lr=p.lr, rng=rng)
    result["maps_fit"] = readout["encoding_fit"]
    warnings = probes.warnings_for(accuracy, {"encoding": readout["encoding_fit"]})
    params = {"model": p.model, "task": p.task, "steps": p.steps, "lr": p.lr, "seed": p.seed,
              "append": append, "label": p.label}
    doc = _doc(p, params, est, model=p.model, N=task.N, R=task.R, accuracy=accuracy,
               warnings=warnings, steps=p.steps, lr=p.lr, transfer=result, appended=append)
    if append:
        kind = str(model.meta.get("construction", "model")) if isinstance(model.meta, dict) else "model"
        description = f"trained, d = {model.d}" if kind == "trained" else f"{kind} (built), d = {model.d}"
        append_jsonl(append, {"kind": "transfer", "label": p.label or description, "description": description,
                              "version": __version__, "model": p.model, "seed": p.seed, "N": task.N,
                              "R": task.R, "steps": p.steps, "lr": p.lr, **result})
    return doc


def run_probe_hidden(p: ProbeHiddenParams) -> dict:
    """``probe-hidden``: linear relational encoding of hidden states the user supplies.

    Parameters
    ----------
    p : ProbeHiddenParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        A missing or damaged states file, arrays of the wrong shape or dtype, a ``--holdout`` leaving a side
        empty, or the estimate over the budget.
    """
    _input_file(p.states, "states file")
    members = {m.name: m for m in memory.npz_members(p.states)}
    est = memory.file_estimate("probe-hidden", p.states, list(members.values()), copies=3).require(p.budget)
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
    memory.hidden_states_estimate(est, n, states.shape[1], distinct).require(p.budget)
    vectors = data.get("attribute_vectors")
    if vectors is not None:
        memory.hidden_states_estimate(est, n, states.shape[1], [vectors.shape[1]]).require(p.budget)
    result = probes.linear_relational_encoding(data["states"], attributes, holdout=p.holdout,
                                               rng=seeds.rng(p.seed, "probes"), attribute_vectors=vectors)
    return _doc(p, {"states": p.states, "holdout": p.holdout, "seed": p.seed}, est, **result)


def _figure_options(p: FigureFiles) -> tuple[int, tuple[str, ...]]:
    dpi = DEFAULT_DPI if p.dpi is None else p.dpi
    formats = tuple(dict.fromkeys(p.formats or DEFAULT_FORMATS))
    return dpi, formats


def _figure_files_need_a_folder(p: FigureFiles, figures: str | None) -> None:
    """Refuse ``--dpi`` / ``--format`` without ``--figures DIR`` (the commands where figures are optional)."""
    if figures is None and (p.dpi is not None or p.formats):
        raise InputError("--dpi and --format apply to --figures DIR: add it, or leave them out")


def _require_matplotlib() -> None:
    if not have_matplotlib():
        raise InputError(PLOT_HINT)


def run_probe_lm(p: ProbeLmParams) -> dict:
    """``probe-lm``: a real LM's hidden states on real facts (the only user of :mod:`georecall.verify.lm`).

    Parameters
    ----------
    p : ProbeLmParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        The lm extra missing, a bad facts file or model, an unusable ``--figures`` folder, or the estimate
        over the budget.
    """
    from georecall.verify.lm import facts as lmfacts  # the lm extra's package: only probe-lm imports it
    from georecall.verify.lm import loader
    loader.require_extra()
    facts_path = p.facts or lmfacts.bundled_facts_path()
    facts = lmfacts.load_facts(facts_path)
    figures_dir = output_dir(p.figures) if p.figures is not None else None
    cache = output_path(p.cache, suffix=".npz", what="--cache file") if p.cache is not None else None
    if figures_dir is not None:
        _require_matplotlib()
    est = Estimate("probe-lm")
    est.add("model weights as float32 (twice with the random control) and one loading copy",
            loader.weight_bytes_bound(p.model) * (2 if p.no_random_control else 3), "--no-random-control")
    est.add("torch and transformers", memory.GIB // 2, "—")
    est.require(p.budget)
    from georecall.verify.lm import run as lmrun  # the lm extra's package, as above
    if not p.progress:
        loader.quiet()
    loader.set_threads(p.threads)
    # with a cache file the weights may not be needed: tokenizer and configuration first (probe_lm loads the
    # weights when the cache does not match)
    loaded = loader.load_light(p.model) if cache and os.path.isfile(cache) else loader.load_model(p.model)
    config = loaded.model.config if loaded.model is not None else loaded.config
    L, width = int(config.num_hidden_layers), int(config.hidden_size)
    n_seq = len(facts.subjects) + 3 * lmrun.TEMPLATES * len(facts.facts())
    est.add("states (subjects, prompts per template, final tokens; every layer), the superposition fits and "
            "the LRE products",
            4 * n_seq * (L + 1) * width * 2 + 8 * 16 * len(facts.relations) * width * width
            + 8 * lmrun.LRE_TRAIN * len(facts.facts()) * width * 3, "--layers")
    est.require(p.budget)
    doc = lmrun.probe_lm(loaded, facts, layers=p.layers, intervene_layers=p.intervene_layers,
                         lre_layers=p.lre_layers, template=p.template, seed=p.seed,
                         random_control=not p.no_random_control, batch_size=p.batch_size, cache=cache,
                         progress=lmrun.stderr_progress if p.progress else None)
    files: list[str] = []
    if figures_dir is not None:
        from georecall.verify.lm.figure import figure  # the lm extra's package, as above
        files = figure(doc, figures_dir)
    params = {"model": p.model, "facts": facts_path, "layers": p.layers,
              "intervene_layers": p.intervene_layers, "lre_layers": p.lre_layers, "cache": cache,
              "template": p.template, "random_control": not p.no_random_control, "batch_size": p.batch_size,
              "threads": p.threads, "figures": figures_dir, "seed": p.seed}
    return _doc(p, params, est, **doc, text=lmrun.render_text(doc), figures=files)


def run_figures(p: FiguresParams) -> dict:
    """``figures``: the figures of a results file and the computed ones, at ``--dpi`` in each ``--format``.

    Parameters
    ----------
    p : FiguresParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        A missing ``--from`` file, an unusable ``--out`` folder, no matplotlib, or the estimate over the
        budget.
    """
    from georecall.verify.experiments.sweep import read_records  # scipy: kept off georecall --help
    est = Estimate("figures")
    if p.source:
        _input_file(p.source, "results file")
        est.add(f"records of {os.path.basename(p.source)}", 20 * os.path.getsize(p.source), "the results "
                                                                                            "file")
    est.add("computed figures (N = 4096)", 2 * memory.GIB // 4, "—")
    est.require(p.budget)
    out = output_dir(p.out)
    dpi, formats = _figure_options(p)
    _require_matplotlib()
    records = read_records(p.source, budget=p.budget) if p.source else []
    with figure_style(p.style):
        paths = make_figures(records, out, seed=p.seed, dpi=dpi, formats=formats)
    params = {"source": p.source, "out": out, "seed": p.seed, "dpi": dpi, "formats": list(formats),
              "style": p.style}
    return _doc(p, params, est, files=paths)


def run_demo(p: DemoParams) -> dict:
    """``demo``: the G1 walk-through (text), and with ``--figures DIR`` the construction drawn.

    Parameters
    ----------
    p : DemoParams

    Returns
    -------
    dict
        The document (its ``lines`` are the narration; no memory estimate: the sizes are capped).

    Raises
    ------
    InputError
        N or R over the demo's limits, ``--dpi`` / ``--format`` without ``--figures``, an unusable
        ``--figures`` folder, or no matplotlib for it.
    """
    demo.check_size(p.N, p.R)
    if p.show_weights:
        demo.check_show_weights(p.N)
    _figure_files_need_a_folder(p, p.figures)
    if p.figures is None and p.style != "default":
        raise InputError("--style applies to --figures DIR: add it, or leave it out")
    files: list[str] = []
    if p.figures is not None:
        output_dir(p.figures, what="--figures folder")
        _require_matplotlib()
    lines: list[str] = []
    with contextlib.redirect_stdout(io.StringIO()):
        numbers = demo.run_demo(p.N, p.R, seed=p.seed, out=lines.append, weights=p.show_weights)
    if p.figures is not None:
        dpi, formats = _figure_options(p)
        os.makedirs(p.figures, exist_ok=True)
        names = numbers["relations"]
        with figure_style(p.style):
            drawn = {"construction": construction_figure(p.N, p.R, p.seed, query=numbers["query"],
                                                         relation_names=names)}
            drawn.update(weights_figures(p.N, p.R, p.seed, query=numbers["query"], relation_names=names))
            drawn["trained_vs_g1"] = trained_beside_g1_figure(numbers["g1"], numbers["trained"],
                                                              numbers["task"], relation_names=names)
            for name, fig in drawn.items():
                files += save_figure(fig, p.figures, name, dpi=dpi, formats=formats)
        lines.append(f"\nThe construction, its matrices and the trained model drawn: {', '.join(files)}")
    return _doc(p, {"N": p.N, "R": p.R, "seed": p.seed, "figures": p.figures, "show_weights": p.show_weights,
                    "style": p.style}, None, lines=lines, files=files)


def run_lecture(p: LectureParams) -> dict:
    """``lecture``: execute the lecture notebook and render it as one HTML page (teach extra).

    Parameters
    ----------
    p : LectureParams

    Returns
    -------
    dict
        The paths written (``notebook``, ``html``), the code cells run, the images embedded and the
        execution time.

    Raises
    ------
    InputError
        Without the teach extra, no notebook found (or the one given missing), an unusable ``--out``, or a
        cell that fails.
    """
    from georecall.verify.experiments import lecture  # nbclient and nbconvert (the teach extra): on demand
    lecture.require_teach()
    source = p.notebook if p.notebook is not None else lecture.default_notebook()
    if source is None:
        raise InputError(f"no lecture notebook found: run from the repository checkout (it has "
                         f"{lecture.NOTEBOOK}) or give --notebook FILE.md")
    _input_file(source, "notebook")
    out = output_dir(p.out)
    os.makedirs(out, exist_ok=True)
    built = lecture.build_lecture(source, out, timeout=p.timeout)
    params = {"out": out, "notebook": source, "timeout": p.timeout}
    return _doc(p, params, None, **built)


def run_study_mechanism(p: StudyMechanismParams) -> dict:
    """``study mechanism``: run (or resume) the declared grid, then summarize; or only summarize a file.

    Parameters
    ----------
    p : StudyMechanismParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        ``--dpi`` / ``--format`` without ``--figures``, an unusable ``--figures`` folder or no matplotlib,
        ``--quick`` with ``--grid``, an unknown grid, a missing ``--summary`` file or unwritable ``--out``,
        the estimate over the budget, or what the study refuses.
    """
    # --workers with --scheduler: refused by the parser (parser.CONFLICTS); --scheduler's syntax: its params
    figures_dir = None
    _figure_files_need_a_folder(p, p.figures)
    if p.figures is not None:  # refused before any training: no folder, or no matplotlib to draw with
        figures_dir = output_dir(p.figures, what="--figures folder")
        _require_matplotlib()
    notes: list[str] = []
    if p.grid is not None and p.quick:
        raise InputError("--quick and --grid do not combine (--quick is --grid quick)")
    grid_name = p.grid or ("quick" if p.quick else "default")
    if grid_name not in study.GRIDS:
        raise InputError(f"--grid must be one of {sorted(study.GRIDS)}, got {grid_name!r}")
    workers = p.workers
    if p.summary is not None:
        path = _input_file(p.summary, "results file")
        est = Estimate("study mechanism --summary")
    else:
        path = output_path(p.out, what="results file")
        workers = p.local_workers
        est = study.estimate(grid_name, p.seeds, workers=workers, local=p.local)
    _results_file(est, path)
    est.require(p.budget)
    if p.summary is None:
        study.run_study(path, grid_name, seeds=p.seeds, workers=p.workers, scheduler=p.scheduler,
                        progress=p.progress, connect_timeout=p.connect_timeout,
                        log=None if p.progress else notes.append, worker_timeout=p.worker_timeout,
                        budget=p.budget)
    summary = study.summarize(path, budget=p.budget)
    files: list[str] = []
    if figures_dir is not None:
        os.makedirs(figures_dir, exist_ok=True)
        dpi, formats = _figure_options(p)
        files = study.figures(summary, figures_dir, log=None if p.progress else notes.append, dpi=dpi,
                              formats=formats)
        if not files:  # matplotlib vanished between the check and now: say so, do not pass silently
            raise InputError("no figures were written (matplotlib could not be imported)")
    params = {"grid": grid_name, "seeds": p.seeds, "workers": workers, "scheduler": p.scheduler, "out": path,
              "summary_only": p.summary is not None}
    return _doc(p, params, est, out=path, summary=summary, text=study.render_summary(summary), figures=files,
                notes=notes)


# Each command's function; it takes the parameters ``params.PARAMS[command]`` (tests/test_cli_params.py).
# ----------------------------------------------------------------------------------------------- export


def _export_parts(est: Estimate, parameters: int, n_out: int, d: int) -> None:
    """The export's own memory beside the build's: the target's graph (each weight stored, exact and its
    error, the dense read-out included: about 4 float64 copies) and one checked chunk of 1024 queries
    (about a dozen arrays of (1024, max(n_out, d)) float64: the target's logits, georecall's with their
    bound, the rounding bound's terms)."""
    est.add("export: the target's weights, their exact values and errors", 4 * 8 * parameters, "N, R")
    est.add("export: one checked chunk of 1024 queries", 12 * 8 * 1024 * 2 * max(n_out, d), "N")


def _export_construction(p: ExportParams):
    """The construction of ``--construction`` built for THE seeded task (or ``--task``): model, task,
    queries, promise, record and the memory estimate (required before the build)."""
    from georecall.verify.export import query_set  # the export extra's torch: only when exporting
    spec = registry.resolve(p.construction or "geometric")
    k = p.k if p.k is not None else (1 if spec.hops == "single" else 2)
    if spec.hops == "single" and k != 1:
        raise InputError(f"{spec.label} answers single-hop queries: --k must be 1, got {k}")
    _queries(p.N, p.R, k)
    _binary_codes_fit(p.codes, p.D, p.N)
    options = {name: value for name, value in (("attention", p.attention), ("beta", p.beta),
                                               ("gate", p.gate)) if value is not None}
    codes = {name: value for name, value in (("codes", p.codes), ("D", p.D)) if value is not None}
    refused = sorted((set(options) | set(codes)) - spec.accepts())
    if refused:
        flags = ", ".join(checking.OPTION_FLAGS.get(o, o) for o in refused)
        raise InputError(f"{spec.label} does not take {flags}")
    if p.cot:
        raise InputError("--cot is for a model file: a construction decodes as its spec says")
    if p.attention == "hard":
        raise InputError(f"--attention hard is an idealization (β -> ∞) that {p.to} cannot compute exactly "
                         "(a softmax at any finite β leaks): export the softmax build")
    est = memory.check_estimate(spec, p.N, p.R, k, codes=p.codes or "binary", D=p.D, what="export",
                                budget=p.budget)
    _export_parts(est, spec.nominal_promise(p.N, p.R, k).params + p.N * spec.nominal_promise(p.N, p.R, k).d,
                  p.N, spec.nominal_promise(p.N, p.R, k).d)
    est.require(p.budget)
    task = _task_file(p.task, p.N, p.R, "shared", False) if p.task else task_for_seed(p.N, p.R, p.seed)
    if p.progress:
        print(f"building {spec.label} at N = {p.N}, R = {p.R}, k = {k}", file=sys.stderr, flush=True)
    built = spec.builder(task, k, rng=seeds.rng(p.seed, "codes"), **codes, **options)
    record = {"construction": spec.id, "N": p.N, "R": p.R, "k": k, "seed": p.seed, "codes": built.codes.kind,
              "D": built.codes.D, **options, "task": p.task}
    return built.model, task, query_set(task, k, greedy=spec.decoding == "greedy"), built.promise, record, est


def _export_model_file(p: ExportParams):
    """The model file of ``--model`` and its task: model, task, queries, no promise, record, estimate."""
    from georecall.verify.export import query_set  # the export extra's torch: only when exporting
    assert p.model is not None
    given = [flag for flag, value in (("--codes", p.codes), ("--D", p.D), ("--attention", p.attention),
                                      ("--beta", p.beta), ("--gate", p.gate)) if value is not None]
    if given:
        raise InputError(f"{', '.join(given)} build a construction: a model file (--model) is exported as "
                         "it is")
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "export")
    _export_parts(est, model.parameter_count(), model.n_out, model.d)
    est.require(p.budget)
    if (task.N, task.R) != (model.n_entities, model.n_relations):
        raise InputError(f"the task has N = {task.N}, R = {task.R}, but the model has N = "
                         f"{model.n_entities}, R = {model.n_relations}")
    stored = _model_record(p.model)
    k = p.k if p.k is not None else int(stored.get("k", 1) or 1)
    cot = p.cot or bool(stored.get("cot", False))
    _queries(task.N, task.R, k)
    record = {"model": p.model, "task": p.task, "k": k, "cot": cot, "model_record": stored}
    return model, task, query_set(task, k, greedy=cot), None, record, est


def run_export(p: ExportParams) -> dict:
    """``export``: a construction built for a task, or a model file, to torch / TransformerLens / ONNX, as a
    new folder, checked by running every query in the target (verify/export/; docs/export.md).

    Parameters
    ----------
    p : ExportParams

    Returns
    -------
    dict
        The document; ``status`` 1 when the check in the target fails.

    Raises
    ------
    InputError
        ``--model`` with construction options, an existing OUT or an unwritable folder, the target's
        library missing, a model the target cannot run (hard attention), a bad task file, or the estimate
        over the budget; nothing is written then.
    """
    from georecall.verify import export as exporting  # the export extra's torch: only when exporting
    exporting.validate_out(p.out)
    exporting.require(p.to)
    if p.model is not None:
        model, task, qs, promise, record, est = _export_model_file(p)
    else:
        model, task, qs, promise, record, est = _export_construction(p)
    exporting.supports(model, p.to)  # before any file or progress line
    if p.progress and not p.no_check:
        print(f"exporting to {p.to} and checking all {qs.prompts.shape[0]:,} queries there", file=sys.stderr,
              flush=True)
    params = {"out": p.out, "to": p.to, "dtype": p.dtype, "check": not p.no_check, **record}
    result = exporting.export(model, p.to, p.out, queries=qs, task=task, dtype=p.dtype, promise=promise,
                              check=not p.no_check, record=params)
    report = result["check"]
    passed = report is None or report["passed"]
    return _doc(p, params, est, status=0 if passed else 1, passed=passed, **result)


COMMANDS: dict[str, Callable[..., dict]] = {
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
    "export": run_export,
    "lecture": run_lecture,
}
