"""Lower bounds beside the constructions' sizes, with the gap ratio (THEORY.md §4, docs/bounds.md).

One row per (construction, N, R, k, b): the construction's d and its other fact-specific parameters P0 (from
its promise in ``theory/statements.py``, never from a built model), the lower bound that applies to a model of
its kind with that P0, and ``gap = d / d_min``. A bound that is vacuous (``d_min = 0``, e.g. when P0 already
holds all the facts) has no gap: the construction pays in P0 instead of d.

Two notions of b (docs/bounds.md, "Two notions of b"): ``bound_rows`` evaluates the bounds at the b it is
given, which is the *per-parameter codebook* notion (each fact-specific parameter takes one of ``2^b``
task-independent values of its own); ``gap_rows`` puts each construction at the b its *per-tensor*
quantization actually needs (the checker's precision scan measures it; the caller passes it in) beside
the per-parameter b = 1 row where the construction's embeddings are known to fit it.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping

from georecall.bounds import lower
from georecall.constructions.codes import binary_length
from georecall.theory import __version__, statements
from georecall.theory.tasks import check_positive_int

__all__ = ["FORMATS", "bound_rows", "gap_rows", "governing_bound", "render"]

FORMATS = ("md", "csv", "json", "latex")


def _promises(N: int, R: int, k: int) -> dict[str, statements.Promise]:
    """Promised sizes at binary codes and nominal constants for every registered construction answering k
    hops (``constructions.registry``: the one list of constructions; sizes do not depend on the attention
    constants)."""
    from georecall.constructions import registry

    return {spec.id: spec.nominal_promise(N, R, k) for spec in registry.specs()
            if spec.hops == "multi" or k == 1}


def governing_bound(name: str, promise: statements.Promise):
    """``(bound function, P0)`` for a registered construction: the bound its spec names (``spec.bound``), and
    as P0 its promise's fact-specific parameters when it stores the facts in the MLP (``spec.facts_in``),
    else 0 (the embeddings are counted by the bound itself)."""
    from georecall.constructions import registry

    spec = registry.get(name)
    # spec.bound names a function of bounds.lower (looked up at call time, so it can be replaced in tests)
    return getattr(lower, spec.bound), (promise.fact_params if spec.facts_in == "mlp" else 0)


def _bound_cells(bound: lower.Bound, d: int, prefix: str = "") -> dict:
    gap = d / bound.d_min if bound.d_min > 0 else None
    return {f"{prefix}d_bound": round(bound.d_bound, 6), f"{prefix}d_min": bound.d_min,
            f"{prefix}gap": None if gap is None else round(gap, 4)}


def bound_rows(Ns, Rs, ks, bits=(1,)) -> list[dict]:
    """Rows for every combination of the given N, R, k and b (b in the per-parameter codebook notion).

    ``log2_count_lower`` is log2 of a lower bound on the counted set (``count_exact`` says when it is the
    exact size). G1 rows also carry its fact-carrying bits per subject (``R·⌈log2 N⌉``) against the
    per-subject share of ``log2|F_1|`` and their ratio (``1 + O(1/log N)``).
    """
    rows = []
    for N in Ns:
        for R in Rs:
            for k in ks:
                N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
                for b in bits:
                    for name, promise in _promises(N, R, k).items():
                        bound_fn, P0 = governing_bound(name, promise)
                        bound = bound_fn(N, R, k, b, P0)
                        row = {"construction": name, "N": N, "R": R, "k": k, "b": b,
                               "codebook": "per parameter", "d": promise.d, "m": promise.m, "P0": P0,
                               "bound": bound.id, "formula": bound.formula, "counted": bound.counted,
                               "log2_count_lower": round(bound.log2_count_lower, 6),
                               "count_exact": bound.count_exact, **_bound_cells(bound, promise.d),
                               "M": bound.params.get("M"), "version": __version__}
                        # G1: fact-carrying bits per subject vs the per-subject share of log2|F_1|
                        if name == "G1":
                            row["fact_bits_per_subject"] = R * binary_length(N)
                            row["bound_bits_per_subject"] = round(bound.log2_count_lower / N, 6)
                            # (N = 1: one task, nothing to store; the ratio is undefined)
                            row["fact_bits_ratio"] = round(
                                R * binary_length(N) * N / bound.log2_count_lower, 4
                            ) if bound.log2_count_lower > 0 else None
                        rows.append(row)
    return rows


def gap_rows(Ns, Rs, ks, needed: Mapping[str, int | None],
             per_parameter: Mapping[str, int] | None = None) -> list[dict]:
    """One row per (construction, N, R, k): the gap at the b the construction needs, and at a per-parameter b.

    ``needed[name]``: the smallest b at which the construction's per-tensor quantization stays exact (measured
    by the precision scan; ``None``: not measured or size-dependent, no bound evaluated).
    ``per_parameter[name]``: a b at which its fact-specific parameters fit per-parameter codebooks (e.g. 1 for
    G1: every embedding entry is ``±|a_i|`` or a task-independent 0). Columns ``b_needed``, ``d_min_needed``,
    ``gap_needed`` and ``b_per_parameter``, ``d_min_per_parameter``, ``gap_per_parameter``; a vacuous bound
    has gap ``None``.
    """
    per_parameter = per_parameter or {}
    rows = []
    for N in Ns:
        for R in Rs:
            for k in ks:
                N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
                for name, promise in _promises(N, R, k).items():
                    bound_fn, P0 = governing_bound(name, promise)
                    row = {"construction": name, "N": N, "R": R, "k": k, "d": promise.d, "P0": P0}
                    b = needed.get(name)
                    row["b_needed"] = b
                    if b is not None:
                        bound = bound_fn(N, R, k, b, P0)
                        row.update(bound=bound.id, **_bound_cells(bound, promise.d, "needed_"))
                    b1 = per_parameter.get(name)
                    row["b_per_parameter"] = b1
                    if b1 is not None:
                        bound = bound_fn(N, R, k, b1, P0)
                        row.update(bound=bound.id, **_bound_cells(bound, promise.d, "per_parameter_"))
                    row["version"] = __version__
                    rows.append(row)
    return rows


def render(rows: list[dict], fmt: str = "md") -> str:
    """Format rows as a Markdown, CSV, JSON or LaTeX table."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "json":
        return json.dumps({"version": __version__, "rows": rows}, indent=2)
    columns = ["construction", "N", "R", "k", "b", "d", "m", "P0", "bound", "d_bound", "d_min", "gap", "M"]
    if rows and "b_needed" in rows[0]:
        columns = ["construction", "N", "R", "k", "d", "P0", "bound", "b_needed", "needed_d_min",
                   "needed_gap",
                   "b_per_parameter", "per_parameter_d_min", "per_parameter_gap"]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(dict.fromkeys(columns + [c for r in rows for c in r])))
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()

    def cell(value):
        if value is None:
            return "—"
        if isinstance(value, float):
            return f"{value:,.2f}" if math.isfinite(value) else str(value)
        return f"{value:,}" if isinstance(value, int) else str(value)

    body = [[cell(r.get(c)) for c in columns] for r in rows]
    if fmt == "md":
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(row) + " |" for row in body]
        return "\n".join(lines)

    def escape(s: str) -> str:
        return s.replace("_", r"\_").replace("—", "--").replace(",", "{,}")

    lines = [r"\begin{tabular}{" + "l" * 1 + "r" * (len(columns) - 1) + "}", r"\hline",
             " & ".join(escape(c) for c in columns) + r" \\", r"\hline"]
    lines += [" & ".join(escape(c) for c in row) + r" \\" for row in body]
    lines += [r"\hline", r"\end{tabular}", f"% georecall {__version__}"]
    return "\n".join(lines)
