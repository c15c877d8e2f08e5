"""Lower bounds beside the constructions' sizes, with the gap ratio (THEORY.md §4).

One row per (construction, N, R, k, b): the construction's d and its other fact-specific parameters P0 (from
its promise in ``theory/statements.py``, never from a built model), the lower bound that applies to a model of
its kind with that P0, and ``gap = d / d_min``. A bound that is vacuous (``d_min = 0``, e.g. when P0 already holds
all the facts) has no gap: the construction pays in P0 instead of d.
"""

from __future__ import annotations

import csv
import io
import json
import math

from georecall.bounds import lower
from georecall.constructions.codes import binary_length
from georecall.theory import __version__, statements
from georecall.theory.tasks import check_positive_int

FORMATS = ("md", "csv", "json", "latex")


def _promises(N: int, R: int, k: int) -> dict[str, statements.Promise]:
    """Promised sizes at binary codes (ε = 0; the sizes do not depend on the attention constants)."""
    D = binary_length(N)
    geometry = {"norm_sq": 1.0, "mu": statements.binary_coherence(D) if D > 1 else -1.0}
    unit_codes = {"max_abs": D**-0.5, "max_l1": D**0.5, "gate": 2 * D**-0.5, "beta": None}
    out = {"G2": statements.g2_promise(N, R, k, D, **unit_codes, **geometry),
           "A2a": statements.a2_width_promise(N, R, k, D, gate=1.0, beta=None, **geometry),
           "A2b": statements.a2_depth_promise(N, R, k, D, beta=None, **geometry),
           "C1": statements.c1_promise(N, R, k, D, **unit_codes, **geometry)}
    if k == 1:
        out = {"G1": statements.g1_promise(N, R, D, max_abs=D**-0.5, beta=4 * D**-0.5, **geometry),
               "A1": statements.a1_promise(N, R, D, **geometry), **out}
    return out


# Which bound governs each construction, and which of its parameters are fact-specific besides embeddings.
_GOVERNING = {
    "G1": (lower.total_information, lambda p: 0),
    "A1": (lower.total_information, lambda p: p.fact_params),
    "G2": (lower.tradeoff, lambda p: 0),
    "A2a": (lower.tradeoff, lambda p: p.fact_params),
    "A2b": (lower.tradeoff, lambda p: p.fact_params),
    "C1": (lower.chain_of_thought, lambda p: 0),
}


def bound_rows(Ns, Rs, ks, bits=(1,)) -> list[dict]:
    """Rows for every combination of the given N, R, k and b."""
    rows = []
    for N in Ns:
        for R in Rs:
            for k in ks:
                N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
                for b in bits:
                    for name, promise in _promises(N, R, k).items():
                        bound_fn, p0 = _GOVERNING[name]
                        P0 = p0(promise)
                        bound = bound_fn(N, R, k, b, P0)
                        gap = promise.d / bound.d_min if bound.d_min > 0 else None
                        row = {"construction": name, "N": N, "R": R, "k": k, "b": b, "d": promise.d,
                               "m": promise.m, "P0": P0, "bound": bound.id, "formula": bound.formula,
                               "log2_count": round(bound.log2_count, 6), "d_bound": round(bound.d_bound, 6),
                               "d_min": bound.d_min, "gap": None if gap is None else round(gap, 4),
                               "M": bound.params.get("M"), "version": __version__}
                        if name == "G1":  # fact-carrying bits per subject vs the per-subject share of log2|F_1|
                            row["fact_bits_per_subject"] = R * binary_length(N)
                            row["bound_bits_per_subject"] = round(bound.log2_count / N, 6)
                        rows.append(row)
    return rows


def render(rows: list[dict], fmt: str = "md") -> str:
    """Format rows as a Markdown, CSV, JSON or LaTeX table."""
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    if fmt == "json":
        return json.dumps({"version": __version__, "rows": rows}, indent=2)
    columns = ["construction", "N", "R", "k", "b", "d", "m", "P0", "bound", "d_bound", "d_min", "gap", "M"]
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
    escape = lambda s: s.replace("_", r"\_").replace("—", "--").replace(",", "{,}")  # noqa: E731
    lines = [r"\begin{tabular}{" + "l" * 1 + "r" * (len(columns) - 1) + "}", r"\hline",
             " & ".join(escape(c) for c in columns) + r" \\", r"\hline"]
    lines += [" & ".join(escape(c) for c in row) + r" \\" for row in body]
    lines += [r"\hline", r"\end{tabular}", f"% georecall {__version__}"]
    return "\n".join(lines)
