"""The table commands: ``tradeoff``, ``bounds`` and ``count`` (and the table options every table command
shares: ``--format``, ``--columns``, ``--caption``, ``--label``)."""

from __future__ import annotations

import math
import time

from georecall import estimates
from georecall.cli.common import (
    LIMITS,
    document,
    user_constructions,
)
from georecall.cli.params import (
    BoundsParams,
    CountParams,
    Table,
    TradeoffParams,
)
from georecall.constructions import registry
from georecall.errors import InputError
from georecall.experiments.tradeoff import tradeoff_rows
from georecall.memory import Estimate
from georecall.verify.checking import run as checking  # the module: tests replace its functions

__all__ = [
    "COUNT_COLUMNS",
    "COUNT_HEADERS",
    "PRECISION_COLUMNS",
    "PRECISION_HEADERS",
    "TRADEOFF_COLUMNS",
    "TRADEOFF_HEADERS",
    "run_bounds",
    "run_count",
    "run_tradeoff",
    "table_format",
    "table_text",
]


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


def table_format(p: Table, json_flag: bool, default: str = "text") -> str:
    """The table format of a table command: ``--format`` (json also by ``--json``, which the parser refuses
    beside another ``--format``: ``parser.CONFLICTS``); ``--columns``/``--caption``/``--label`` are refused
    where they do nothing.

    Parameters
    ----------
    p : Table
        The command's parameters (``format``, ``columns``, ``caption``, ``label``).
    json_flag : bool
        ``--json`` was given.
    default : str
        The format without ``--format`` or ``--json``.

    Returns
    -------
    str
        ``"json"`` with ``--json``, else ``--format`` or ``default``.

    Raises
    ------
    InputError
        ``--columns`` with a format other than md, csv or latex; ``--caption`` or ``--label`` without latex.
    """
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


def table_text(p: Table, fmt: str, rows: list[dict], columns, headers, constants: dict | None = None) -> str:
    """A table command's rows rendered as ``fmt`` (:func:`~georecall.bounds.tables.render_table`), or ``""``
    for the text and json formats, which the command prints itself.

    Parameters
    ----------
    p : Table
        The command's parameters: ``--columns`` (comma-separated) chooses the columns, ``--caption`` and
        ``--label`` the LaTeX caption and label.
    fmt : str
        The format (:func:`table_format`): "text", "json", "md", "csv" or "latex".
    rows : list of dict
        The rows.
    columns : sequence of str
        The command's default columns, used without ``--columns``.
    headers : mapping
        Key -> (Markdown header, LaTeX header).
    constants : dict, optional
        What every row shares and no column shows (``{"N": 64, "R": 3}``): a line under a Markdown table,
        the LaTeX caption and a comment, the first CSV columns.

    Returns
    -------
    str

    Raises
    ------
    InputError
        ``--columns`` naming no column, or a column that no row has.
    """
    from georecall.bounds.tables import render_table  # networkx, scipy: kept off georecall --help
    if fmt in ("text", "json"):
        return ""
    shown = _columns(p) or columns
    constants = {key: value for key, value in (constants or {}).items() if key not in shown}
    if fmt == "csv" and constants:  # a CSV file stands alone: the shared values are its first columns
        rows, shown = [{**constants, **row} for row in rows], [*constants, *shown]
    return render_table(rows, fmt, columns=shown, headers=headers, caption=p.caption, label=p.label,
                        constants=constants)


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
    fmt = table_format(p, p.json)
    # --k-max <= LIMITS["k"]: the parser's type
    if p.R ** p.k_max > 2**40:
        raise InputError(f"R^k_max = {p.R}^{p.k_max} relation paths is too many to tabulate (limit 2^40): "
                         "lower --k-max or --R")
    est = Estimate("tradeoff").add("the table (promises only: nothing is built)", 64 * p.k_max * 2**10,
                                   "--k-max").require(p.budget)
    chosen = user_constructions(p.construction, "multi")
    rows = tradeoff_rows(p.N, p.R, p.k_max, constructions=chosen)
    specs = registry.specs("multi") if chosen is None else [registry.get(c) for c in chosen]
    legend = [f"{s.id}: {s.result}" for s in specs]
    return document(p, {"N": p.N, "R": p.R, "k_max": p.k_max, "constructions": chosen, "format": fmt}, est,
                    rows=rows, constructions=[s.id for s in specs], legend=legend, format=fmt,
                    text=table_text(p, fmt, rows, TRADEOFF_COLUMNS, TRADEOFF_HEADERS, {"N": p.N, "R": p.R}))


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
    fmt = table_format(p, p.json, default="md")
    # N <= 2^53 and 1/64 <= b <= 64: the parser's types
    if p.gaps and p.bits is not None:
        raise InputError("--gaps evaluates each construction at the b it needs (and per parameter): "
                         "--bits does not apply (use --needed NAME=B to set one)")
    if not p.gaps and p.needed:
        raise InputError("--needed is for the gap table: add --gaps")
    bits = p.bits if p.bits is not None else [1.0]
    chosen = user_constructions(p.construction)
    # the b of each spec's bits claim (``ConstructionSpec.bits``), overridden or added by --needed
    needed = {**checking.table_bits(), **_needed_bits(p.needed)} if p.gaps else {}
    specs = registry.specs() if chosen is None else [registry.get(c) for c in chosen]
    scan = any(spec.bound == "tradeoff" for spec in specs)  # only the tradeoff bound scans gadget counts
    est = estimates.bounds_estimate(p.N, p.R, p.k, scan=scan).require(p.budget)
    start = time.perf_counter()
    if p.gaps:
        rows = gap_rows(p.N, p.R, p.k, needed, checking.per_parameter_bits(), constructions=chosen)
    else:
        rows = bound_rows(p.N, p.R, p.k, bits, constructions=chosen)
    text = render(rows, fmt, columns=_columns(p), caption=p.caption, label=p.label) if fmt != "json" else ""
    params = {"N": p.N, "R": p.R, "k": p.k, "bits": None if p.gaps else bits, "format": fmt, "gaps": p.gaps,
              "needed": needed or None, "constructions": chosen}
    notes = _single_hop_notes(chosen, p.k) + (_gap_notes(rows) if p.gaps else [])
    return document(p, params, est, rows=rows, text=text, format=fmt, notes=notes,
                    seconds=round(time.perf_counter() - start, 3))


def _single_hop_notes(chosen: list[str] | None, ks: list[int]) -> list[str]:
    """Why a construction asked for by name has no row at some k: it answers single-hop queries only."""
    multi = sorted(k for k in ks if k > 1)
    if not chosen or not multi:
        return []
    hops = ", ".join(map(str, multi))
    return [f"{spec.label} answers single-hop queries: no row at k = {hops}"
            for spec in map(registry.get, chosen) if spec.hops == "single"]


def _gap_notes(rows: list[dict]) -> list[str]:
    """Why a gap row's cells are empty, and what to pass: one line per construction without a b."""
    notes = []
    for name in dict.fromkeys(r["construction"] for r in rows if r["b_needed"] is None):
        claim = registry.get(name).bits
        why = ("its spec makes no bits claim (ConstructionSpec.bits)" if claim is None else
               f"its needed b grows with N ({claim.needed} at N = {claim.N}; BitsClaim.table is None)")
        notes.append(f"{name}: no needed-bits b for the gap table: {why}; pass --needed {name}=B for its gap "
                     "at b = B")
    if any(r["b_per_parameter"] is not None for r in rows):  # the per-parameter columns are shown
        for name in dict.fromkeys(r["construction"] for r in rows
                                  if r["b_needed"] is not None and r["b_per_parameter"] is None):
            notes.append(f"{name}: no per-parameter b declared (BitsClaim.per_parameter): its per-parameter "
                         "columns stay empty")
    return notes


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
    from georecall.bounds.counting import (  # networkx: not --help
        MAX_TASKS,
        closed_forms,
        composes_by_table,
        enumerate_counts,
    )
    fmt = table_format(p, p.json)
    # k <= LIMITS["k"]: the parser's type
    log2_tasks = estimates.count_tasks_log2(p.N, p.R)  # lgamma: no factorial is computed before this check
    if log2_tasks > math.log2(MAX_TASKS) + 1e-9:
        raise InputError(f"the enumeration covers (N!)^R ≈ 2^{log2_tasks:.4g} tasks, more than the limit of "
                         f"{MAX_TASKS:,} (N <= 5 with R <= 3 and N <= 6 with R <= 2 fit): lower N or R")
    if p.R ** p.k > LIMITS["count_paths"]:
        raise InputError(f"R^k = {p.R}^{p.k} paths per task is more than count handles (limit 2^20): lower k")
    n_tasks = math.factorial(p.N) ** p.R
    est = estimates.count_estimate(p.N, p.R, p.k, n_tasks, composes_by_table(p.N, p.R, p.k)).require(p.budget)
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
    passed = all(r["sandwich_holds"] for r in rows) and counts.F[1] == rows[0]["F_1_closed"] \
        and counts.trees[1] == rows[0]["trees_1_closed"]
    return document(p, {"N": p.N, "R": p.R, "k": p.k, "format": fmt}, est, passed=passed,
                    tasks=counts.tasks, seconds=round(counts.seconds, 3), rows=rows, format=fmt,
                    text=table_text(p, fmt, rows, COUNT_COLUMNS, COUNT_HEADERS, {"N": p.N, "R": p.R}))


