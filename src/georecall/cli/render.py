"""Renderers: a command's result document as strict JSON or as text tables.

A result document is a dict (see :mod:`.commands`). :func:`to_json` maps non-finite floats to
``null`` and NumPy scalars and arrays to plain numbers and lists, then serializes with ``allow_nan=False``:
the output is JSON that any parser accepts. :func:`to_text` renders the same document for a terminal."""

from __future__ import annotations

import json
import math
import re
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

import numpy as np

__all__ = ["interval_text", "jsonable", "plain_note", "report_table", "to_json", "to_text"]


def jsonable(value):
    """``value`` with non-finite floats as ``None`` and NumPy types as Python ones (recursively).

    Parameters
    ----------
    value : object
        Dicts, lists, tuples, numbers, strings, NumPy scalars or arrays.

    Returns
    -------
    object
        Plain JSON data. Other objects raise ``TypeError`` (a bug: documents hold data only).
    """
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, str):
        return value
    raise TypeError(f"a result document holds data only, got {type(value).__name__}")


def to_json(doc: dict) -> str:
    """One strict JSON document (``allow_nan=False``; non-finite floats become ``null``).

    Parameters
    ----------
    doc : dict
        A result document.

    Returns
    -------
    str
        The JSON text (indented).
    """
    return json.dumps(jsonable(doc), indent=2, allow_nan=False, ensure_ascii=False)


def _fmt(value, digits: int = 4) -> str:
    if isinstance(value, float):
        return "—" if not math.isfinite(value) else f"{value:.{digits}g}"
    if value is None:
        return "—"
    return str(value)


def _distinct(a, b, digits: int = 4) -> tuple[str, str]:
    """``a`` and ``b`` as :func:`_fmt` prints them, with more significant digits (up to 17) when two
    different floats would otherwise print alike (a margin 1.99999999996 against a promise 2.00000000001)."""
    if isinstance(a, float) and isinstance(b, float) and math.isfinite(a) and math.isfinite(b) and a != b:
        for n in range(digits, 18):
            if f"{a:.{n}g}" != f"{b:.{n}g}":
                return f"{a:.{n}g}", f"{b:.{n}g}"
    return _fmt(a, digits), _fmt(b, digits)


WIDTH = 100  # columns the report table and its detail lines fit in
_LEGEND = ("d, m, margin: promised/achieved (or achieved); checked: queries (claims in a claim row); "
           "s: seconds")


def _margin(value) -> str:
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:.4g}"
    return _fmt(value)


def _size(value) -> str:
    """A size column's cell: whole numbers only (a row that reports something else says it in words)."""
    return str(value) if isinstance(value, (int, np.integer)) and not isinstance(value, bool) else ""


def _percent(values) -> str:
    return ", ".join(f"{100 * v:.4g}%" for v in values)


def _details(rep: dict) -> list[str]:
    """What a row says in words under it: why it is not covered, its ``detail`` and, for greedy decoding, the
    per-step accuracy."""
    out = []
    if rep.get("not_covered") is not None:
        out.append(f"not covered: {rep['not_covered']}")
    detail = rep.get("extra", {}).get("detail")
    if detail:
        out.append(str(detail))
    forced = rep.get("extra", {}).get("teacher_forcing")
    per_position = rep["check"].get("per_position")
    if per_position is not None and forced:
        final = rep["check"].get("final_accuracy")
        out.append(f"greedy decoding: per-step accuracy {_percent(per_position)}, final answer "
                   f"{_percent([final]) if final is not None else '—'}; teacher forcing: per-step accuracy "
                   f"{_percent(forced.get('per_position') or [])}, min margin "
                   f"{_margin(forced.get('min_margin'))}")
    return out


def report_table(reports: list[dict], width: int = WIDTH) -> str:
    """A PASS/FAIL table of report dicts, at most ``width`` columns wide: one meaning per column (sizes and
    margins promised/achieved, what was checked, seconds, verdict); a row's numbers that are not sizes (a
    threshold, bits, gaps, greedy decoding's per-step accuracy) in words on indented lines under it.

    Parameters
    ----------
    reports : list of dict
        ``Report.as_dict()`` documents.
    width : int
        The most columns a line takes (a long check name wraps within its column).

    Returns
    -------
    str
        A legend line, the header, the rows with their detail lines.
    """
    import textwrap

    header = ("", "check", "N", "R", "k", "d", "m", "margin", "checked", "s")  # first: PASS or FAIL
    rows, notes = [], []
    for rep in reports:
        p, a, r, params = rep["promise"], rep["achieved"], rep["check"], rep["params"]
        margin = r.get("min_margin")
        missing = margin is None or (isinstance(margin, float) and math.isnan(margin))
        rows.append((
            _verdict(rep), rep["name"], _size(params.get("N")), _size(params.get("R")),
            _size(params.get("k", 1 if p else None)),
            f"{p['d']}/{a['d']}" if p else _size(a.get("d")),
            f"{p['m']}/{a['m']}" if p else _size(a.get("m")),
            f"{_margin(p['margin'])}/{_margin(margin)}" if p else ("" if missing else _margin(margin)),
            f"{r['n_queries']:,}", f"{r['seconds']:.2f}",
        ))
        notes.append(_details(rep))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    gaps = ["", "  ", "  ", " ", " ", "  ", "  ", "  ", "  ", "  "]  # before each column (N R k: one space)
    others = sum(w for k, w in enumerate(widths) if k != 1) + sum(map(len, gaps))
    widths[1] = max(16, min(widths[1], width - others))
    right = {2, 3, 4, 8, 9}  # numbers align right

    def line(cells) -> str:
        return "".join(gap + (str(c).rjust(w) if k in right else str(c).ljust(w))
                       for k, (gap, c, w) in enumerate(zip(gaps, cells, widths))).rstrip()

    indent = " " * (widths[0] + 4)  # under the check's name, two further in
    out = [_LEGEND if len(_LEGEND) <= width else textwrap.fill(_LEGEND, width), line(header),
           line("-" * w for w in widths)]
    for row, note in zip(rows, notes):
        names = textwrap.wrap(row[1], widths[1], break_on_hyphens=False) or [""]
        out.append(line((row[0], names[0], *row[2:])))
        out += [line(("", more) + ("",) * (len(header) - 2)) for more in names[1:]]
        for text in note:
            out += textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                                 break_on_hyphens=False)
    return "\n".join(out)


def _verdict(rep: dict) -> str:
    """PASS, FAIL, PASS* (the promise less storage rounding: docs/precision.md), or NOT COVERED (a row that
    checked nothing: neither a PASS nor a failure)."""
    if rep.get("not_covered") is not None:
        return "NOT COVERED"
    if not rep["passed"]:
        return "FAIL"
    return "PASS*" if (rep.get("storage") or {}).get("basis") == "promise less storage rounding" else "PASS"


def _failures(rep: dict) -> list[str]:
    out = []
    failures = rep["check"].get("failures") or []
    check = rep["check"]
    if check.get("accuracy", 1.0) < 1.0 and not (failures and "claim" in failures[0]):
        right = check.get("n_correct", round(check["accuracy"] * check["n_queries"]))
        open_ = check.get("n_undecided") or 0  # neither proved right nor proved wrong: not counted right
        out.append(f"  {rep['name']}: accuracy {100 * check['accuracy']:.2f}% ({right:,} of "
                   f"{check['n_queries']:,} queries right"
                   + (f"; {open_:,} undecided, {check.get('n_wrong', 0):,} wrong)" if open_ else ")"))
    for failure in failures:
        if "claim" in failure:
            continue
        margin = failure.get("margin")
        out.append(f"  {rep['name']}: query {failure['query']} tokens {failure['tokens']} expected "
                   f"{failure['expected']} predicted {failure['predicted']} margin {_fmt(margin)}"
                   + (" (undecided within rounding)" if failure.get("status") == "undecided" else ""))
    for name, passed in rep.get("extra_checks", {}).items():
        if not passed:
            out.append(f"  {rep['name']}: failed: {name}")
    if failures and "claim" in failures[0]:
        return out
    if rep["promise"] and rep["check"]["exact"] and not rep["passed"]:
        out.append(f"  {rep['name']}: achieved sizes/margin fall short of the promise")
    storage = rep.get("storage")
    if storage and storage.get("basis") == "promise less storage rounding":
        out.append(f"  {rep['name']}: PASS* = promise less storage rounding: the weights as built reach the "
                   f"promise (margin {_fmt(storage['margin_before_storage'], 10)}); stored in "
                   f"{storage['dtype']} they answer every query with margin "
                   f"{_fmt(storage['stored_margin'], 10)}, {_fmt(storage['storage_rounding'], 3)} less "
                   "(docs/precision.md)")
    return out


def _reports(doc: dict) -> list[str]:
    lines = [report_table(doc["reports"])]
    for rep in doc["reports"]:
        lines += _failures(rep)
    # which exact path computed a check (verify's table stays compact)
    if str(doc.get("command", "")).startswith("check"):
        for rep in doc["reports"]:
            check = rep["check"]
            if check.get("decoder") or check.get("forward"):
                why = f" ({check['fallback']})" if check.get("fallback") else ""
                lines.append(f"  {rep['name']}: forward pass {check.get('forward', 'dense')}, decoder "
                             f"{check.get('decoder', 'dense')}{why}")
            if "fingerprint" in rep.get("extra", {}):  # of the model checked (docs/certify.md)
                fingerprint = rep["extra"]["fingerprint"] or "not computed (over 1 GiB of weights)"
                lines.append(f"  {rep['name']}: model fingerprint {fingerprint}")
    return lines


def _verify(doc: dict) -> list[str]:
    reports = doc["reports"]
    params = doc.get("params") or {}
    more = ([] if params.get("full", True) or "constructions" in params else
            ["verify --full also runs (a few minutes): the mechanism row at the study's R = 4, and the",
             "frozen-embedding capacity threshold beside the learned one"])
    uncovered = sum(r.get("not_covered") is not None for r in reports)
    passed = sum(bool(r["passed"]) for r in reports)
    return _reports(doc) + [
        f"\ngeorecall {doc['version']}, seed {doc['seed']}: {passed}/{len(reports) - uncovered} checks passed"
        + (f", {uncovered} not covered" if uncovered else "")
        + f" in {doc['seconds']:.1f} s -> {'PASS' if doc['passed'] else 'FAIL'}"] + more


def _tradeoff(doc: dict) -> list[str]:
    rows, names = doc["rows"], doc["constructions"]
    p = doc["params"]
    lines = [f"capacity-depth tradeoff at N = {p['N']}, R = {p['R']}, D = {rows[0]['D']} (binary codes): "
             "d / m / parameters each construction promises"]
    header = ["k"] + [f"{n} {what}" for n in names for what in ("d", "m", "params")]
    table = []
    for k in range(1, p["k_max"] + 1):
        by = {r["construction"]: r for r in rows if r["k"] == k}
        table.append([str(k)] + [f"{by[n][what]:,}" for n in names for what in ("d", "m", "params")])
    widths = [max(len(c) for c in col) for col in zip(header, *table)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [header] + table]
    lines.append("; ".join(doc["legend"]))
    return lines


def _count(doc: dict) -> list[str]:
    p = doc["params"]
    lines = [f"all (N!)^R = {doc['tasks']:,} tasks of N = {p['N']}, R = {p['R']} enumerated in "
             f"{doc['seconds']:.2f} s",
             f"{'k':>2}  {'|F_k|':>12}  {'(N!)^R':>12}  {'(N-1)_(R^k)':>12}  {'|Trees_k|':>12}  "
             f"{'N^(R^k)':>14}"]
    for r in doc["rows"]:
        lower = "n/a" if r["trees_k_lower"] is None else f"{r['trees_k_lower']:,}"
        lines.append(f"{r['k']:>2}  {r['F_k']:>12,}  {r['F_k_upper']:>12,}  {lower:>12}  "
                     f"{r['trees_k']:>12,}  "
                     f"{r['trees_k_upper']:>14,}")
    lines.append("closed forms: |F_1| = (N!)^R, |Trees_1| = N^R; sandwich (N-1)_(R^k) <= |Trees_k| <= "
                 "N^(R^k) "
                 "(lower side when N >= 1 + R + ... + R^k): "
                 f"{'all hold' if doc['passed'] else 'VIOLATED'}")
    return lines


def _precision(doc: dict) -> list[str]:
    lines = [f"b = {r['bits']:>2}: accuracy {100 * r['accuracy']:6.2f}%, min margin {_fmt(r['min_margin'])}"
             for r in doc["records"]]
    bits = doc["smallest_exact_bits"]
    lines.append(f"smallest b keeping every one of the {doc['queries']:,} queries exact: "
                 f"{bits if bits is not None else 'none up to ' + str(doc['params']['max_bits'])}")
    return lines


def _train(doc: dict) -> list[str]:
    p = doc["params"]
    what = "chain steps" if p["cot"] else "facts"
    return [f"{'reached 100%' if doc['reached'] else 'did not reach 100%'} on all {doc['answers']:,} {what} "
            f"after {doc['steps_run']} steps ({doc['seconds']:.1f} s, {doc.get('path', 'dense')} gradients), "
            f"final loss {_fmt(doc['final_loss'])}"
            + (f"; model written to {doc['out']}" if doc["out"] else "")] \
        + _final(doc.get("final_accuracy")) + _knowledge(doc.get("knowledge"))


def _final(f: dict | None) -> list[str]:
    """``train``: the trained weights' accuracy in exact arithmetic."""
    if not f:
        return []
    return [f"accuracy of the trained weights in exact arithmetic: {100 * f['accuracy']:.2f}% "
            f"({f['n_correct']:,}/{f['queries']:,}; {f['n_redecided']:,} re-decided exactly)"]


def _knowledge(k: dict | None) -> list[str]:
    """Bits of knowledge per parameter of a trained model (``train``)."""
    if not k:
        return []
    refs = "; ".join(f"≈{v:g}, {name.split(' (')[0]}" for name, v in k["references"].items())
    held = "it answers every query, so it holds them" if k["stored"] else "it does not answer every query"
    return [f"{k['bits']:,.0f} bits of knowledge{'' if k['exact'] else ' (at least)'} ({k['count']}) over "
            f"{k['parameters']:,} parameters = {k['bits_per_parameter']:.3f} bits/parameter ({held}); "
            f"references: {refs}"]


def _sweep(doc: dict) -> list[str]:
    lines = [doc["summary"]]
    for mode, fit in doc["fits"].items():
        law = fit.get("power_law") or {}
        exponents = ", ".join(f"{k[0]} = {_fmt(v, 4)}" for k, v in law.items() if k != "log_a") or "—"
        lines.append(f"{mode}: d* ≈ c·R·ln N with c = {_fmt(fit['c'])} (per seed {_fmt(fit['c_seed_mean'])} "
                     f"± "
                     f"{_fmt(fit['c_seed_std'])}, {fit['points']} points, {fit['non_monotone']} "
                     f"non-monotone, "
                     f"{fit['unreached']} never reached and {fit.get('censored', 0)} censored at --d-min, "
                     f"left out); power law d* ∝ N^p·R^q: {exponents}")
    lines += doc.get("notes", [])
    lines.append(f"records in {doc['out']}")
    return lines


def _probe(doc: dict) -> list[str]:
    lines = []
    if "accuracy" in doc:
        a = doc["accuracy"]
        lines.append(f"the model answers {a['correct']:,} of its {a['queries']:,} facts "
                     f"({100 * a['accuracy']:.2f}%; chance 1/N = {100 * a['chance']:.2f}%)")
    for warning in doc.get("warnings", []):
        lines.append(f"WARNING: {warning}")
    if "readout" in doc:
        r = doc["readout"]
        f = r.get("encoding_fit", {})
        fit = (f" [ridge, p = {f['p']}, rank {f['rank']}, n = {f['n']}, ρ = {f['relative_alpha']:g} by "
               f"{f['folds']}-fold CV on the fit subjects]") if f else ""
        lines.append(f"superposition readout (held-out {r['test_subjects']} subjects): encoding R² "
                     f"{_fmt(r['encoding_r2'])}{fit}, decoding R² {_fmt(r['decoding_r2_mean'])}, "
                     f"per-relation probe accuracy {_fmt(r['probe_accuracy_mean'])} (mean"
                     + ("; the lines below fit again, with folds of their own" if any(
                         "power" in x for x in r.get("per_relation", [])) else "") + ")"
                     + (" (underdetermined without the penalty)" if r.get("underdetermined") else ""))
        for x in r.get("per_relation", []):
            if "power" in x:
                lines.append(f"  relation {x['relation']}: decoded among all N read-out rows "
                             f"{_fmt(x['vector_accuracy'])} (chance {_fmt(x['chance'], 3)}; seen "
                             f"{_fmt(x['accuracy_seen'])}, unseen {_fmt(x['accuracy_unseen'])}: "
                             f"{x['unseen']} "
                             f"of {x['held_out']} held-out answers unseen in the fit rows); power "
                             f"{_fmt(x['power']['positive'][0])} at SNR {_fmt(x['power']['snrs'][0])} "
                             f"(shuffled {_fmt(x['power']['negative'][0])}): {x['verdict']}"
                             + ("" if x["verdict"] == "decodable" else f" ({x['reason']})"))
    if "intervention" in doc:
        r = doc["intervention"]
        lines.append(f"causal intervention ({r['interventions']:,}): follows {_fmt(r['follows'])}, other "
                     f"relations unchanged {_fmt(r['others_unchanged'])}")
    if "selectivity" in doc:
        r = doc["selectivity"]
        lines.append(f"unit selectivity: {r['active_units']}/{r['units']} active, "
                     f"{_fmt(100 * r['selective_fraction'], 3)}% relation-selective (>= {r['threshold']}), "
                     f"mean {_fmt(r['mean_selectivity'])} (chance {_fmt(r['chance_selectivity'])})")
    if "transfer" in doc:
        r = doc["transfer"]
        lines += ["transfer to new facts: every weight is kept except the subjects' embeddings, made anew "
                  "for brand-new bijections; accuracy on every new query (chance "
                  f"{_fmt(100 * r['chance'])}%):",
                  f"  closed form {_fmt(100 * r['closed_form_accuracy'])}%: each new subject's embedding "
                  "computed, with no training, from its new attributes by the linear maps fitted on the old "
                  "subjects (high when the model stores each attribute as a linear code, as G1 does)",
                  f"  embeddings fitted ({r['fitted_steps']} steps) {_fmt(100 * r['fitted_accuracy'])}%: the "
                  "new subjects' embeddings trained by gradient descent with every other weight frozen (how "
                  "well the frozen layers read new facts written into the embeddings)"]
    if doc.get("appended"):
        lines.append(f"record appended to {doc['appended']}")
    return lines


def _probe_hidden(doc: dict) -> list[str]:
    lines = [f"{doc['n']} states of width {doc['width']}, {doc['relations']} relations; held-out "
             f"{doc['params']['holdout']:.0%}"]
    fits = [p["fit"] for p in doc["per_relation"]]
    if fits:
        low, high = min(f["relative_alpha"] for f in fits), max(f["relative_alpha"] for f in fits)
        strength = _fmt(low, 2) if low == high else f"{_fmt(low, 2)}–{_fmt(high, 2)}"
        folds = sorted({f.get("folds") for f in fits if f.get("folds")})
        cv = (f"{'–'.join(map(str, (folds[0], folds[-1]) if len(folds) > 1 else folds))}-fold CV on the fit "
              "rows" if folds else "CV on the fit rows")
        lines.append(f"  per-relation probes: ridge, p = {fits[0]['p']} features, n = {fits[0]['n']} fit "
                     f"rows, relative strength ρ = {strength} ({cv})")
        if any(f["underdetermined_without_penalty"] for f in fits):
            lines.append("  warning: p >= n - 1: without the penalty these fits would interpolate their "
                         "rows; only the held-out accuracies below speak for the states")
    lines.append(f"  decoder: ridge onto {doc.get('decoder', 'ids')}, ranked among all candidates; power = "
                 f"detection rate of a planted superposition of the same shape at SNR "
                 f"{_fmt(doc.get('power_snr', 1.0))} (a negative verdict needs >= "
                 f"{_fmt(doc.get('power_required', 0.9))})")
    for p in doc["per_relation"]:
        snr = p["power"]["snrs"].index(doc.get("power_snr", 1.0))
        lines.append(f"  relation {p['relation']}: {p['attributes']} attributes ({p['candidates']} "
                     f"candidates), "
                     f"accuracy {_fmt(p['probe_accuracy'], 3)} (chance {_fmt(p['chance'], 3)}, majority "
                     f"{_fmt(p['majority_baseline'], 3)}, shuffled {_fmt(p['shuffled'], 3)}); seen "
                     f"{_fmt(p['accuracy_seen'], 3)}, unseen {_fmt(p['accuracy_unseen'], 3)} "
                     f"({p['unseen']} of {p['held_out']} held-out answers unseen in the fit rows); power "
                     f"{_fmt(p['power']['positive'][snr])}, shuffled control "
                     f"{_fmt(p['power']['negative'][snr])}"
                     f": {p['verdict']}" + ("" if p["verdict"] == "decodable" else f" ({p['reason']})"))
    s = doc["superposition_fit"]
    lines.append(f"superposition R² (states from the R attributes' {doc.get('decoder', 'ids')}; ridge, "
                 f"p = {s['p']}, "
                 f"n = {s['n']}, ρ {_fmt(s['relative_alpha'], 2)}): {_fmt(doc['superposition_r2'])}")
    return lines


def _directed(x: float, digits: int, rounding: str) -> str:
    """``x`` to ``digits`` significant digits rounded toward ``ROUND_FLOOR`` or ``ROUND_CEILING`` (from its
    exact binary value), so that a printed lower end is never above the true one nor an upper end below."""
    exact = Decimal(x)
    if exact == 0:
        return "0"
    step = Decimal(1).scaleb(exact.adjusted() - digits + 1)
    return format(exact.quantize(step, rounding=rounding), "g")


def interval_text(lo: float, hi: float) -> tuple[str, str]:
    """The two ends of an interval ``[lo, hi]`` printed with the digits that tell them apart.

    The fewest significant digits (at least 4, at most 17) at which the two ends, each rounded to nearest,
    differ; then ``lo`` is printed rounded down and ``hi`` rounded up at that many digits, so the printed
    interval still contains the exact one. Equal ends print as the shortest text that reads back to the
    float (``repr``).

    Parameters
    ----------
    lo, hi : float
        The ends, ``lo <= hi``, both finite.

    Returns
    -------
    (str, str)
    """
    if lo == hi:
        return repr(float(lo)), repr(float(hi))
    digits = 4
    while digits < 17 and f"{lo:.{digits}g}" == f"{hi:.{digits}g}":
        digits += 1
    return _directed(lo, digits, ROUND_FLOOR), _directed(hi, digits, ROUND_CEILING)


def _span(m: dict | None) -> str:
    """An eval margin interval as text: the value when exact, else ``[lo, hi] (width w)``, with the digits
    that tell its ends apart (:func:`interval_text`)."""
    if not m:
        return "n/a"
    lo, hi = m["lo"], m["hi"]
    if lo is None or hi is None or not (math.isfinite(lo) and math.isfinite(hi)):
        return f"[{_fmt(lo)}, {_fmt(hi)}]"
    if lo == hi:
        return f"{repr(float(lo))} (exact)"
    low, high = interval_text(lo, hi)
    return f"[{low}, {high}] (width {m['width']:.1e})" if m.get("width") is not None else f"[{low}, {high}]"


def _lower_end(m: dict | None) -> str:
    """An interval's lower end to 6 significant digits rounded down (a table column)."""
    lo = (m or {}).get("lo")
    return _directed(lo, 6, ROUND_FLOOR) if isinstance(lo, float) and math.isfinite(lo) else _fmt(lo)


# The reasons a fast path was not taken (verify/checking), each said for a user: what it means for them.
_PLAIN_NOTES = (
    (re.compile(r"decoder: n_out = (\d+) is not 2\^D for the D = (\d+) coordinates"),
     lambda m: f"the answers were found by comparing all {m[1]} output logits of every query (the shortcut "
               "for the paper's constructions, whose output layer is a table of ±λ sign codes, does not fit "
               f"this model: it reads {m[2]} coordinates for {m[1]} answers, not 2^{m[2]}): the same result, "
               "only slower"),
    (re.compile(r"decoder: (read-out entries|two read-out rows)"),
     lambda m: "the answers were found by comparing all output logits of every query (the shortcut for the "
               "paper's constructions, whose output layer is a table of distinct ±λ sign codes, does not fit "
               "this model's output layer): the same result, only slower"),
    (re.compile(r"forward: "),
     lambda m: "every query ran the full forward pass (the shortcut that adds up precomputed per-token "
               "tables, for models whose layers act on each token separately, does not fit this model): "
               "the same result, only slower"),
    (re.compile(r"([\d,]+) queries left undecided by the tables' a-priori bound"),
     lambda m: f"{m[1]} queries too close to call from the precomputed tables were decided by the full "
               "forward pass"),
)


def plain_note(note: str) -> list[str]:
    """The notes of a check (``"; "``-separated reasons, from verify/checking) in plain words: what each
    means for the user; a reason not known here is kept as it is.

    Parameters
    ----------
    note : str

    Returns
    -------
    list of str
        One sentence per reason.
    """
    out = []
    for part in (p.strip() for p in note.split("; ") if p.strip()):
        for pattern, say in _PLAIN_NOTES:
            found = pattern.search(part)
            if found:
                out.append(say(found))
                break
        else:
            out.append(part)
    return out


def _eval(doc: dict) -> list[str]:
    q = doc["margin_quantiles"]
    if doc.get("arith", "exact") == "exact":
        how = (f"exact arithmetic of the stored weights ({doc.get('stored_dtype')}): every query decided, "
               f"{doc.get('n_redecided', 0):,} of them re-decided exactly")
    else:
        how = (f"as computed in {doc['arith']} (weights cast to it): accuracy counts the queries that "
               f"computation certifies; {doc.get('n_undecided', 0):,} undecided")
    undecided = doc.get("n_undecided", 0)
    lines = [f"{doc['params']['model']}: N = {doc['N']}, R = {doc['R']}, k = {doc['k']}, {doc['mode']}"
             + (f"; {doc['attention']}" if doc.get("attention") else ""),
             f"arithmetic: {how}" + (f"; {undecided:,} left undecided (a softmax tie)" if undecided and
                                     doc.get("arith", "exact") == "exact" else ""),
             f"accuracy {100 * doc['accuracy']:.2f}% ({doc['n_correct']:,}/{doc['queries']:,} queries)"
             + (f"; {doc['ties']:,} ties (margin 0, counted wrong)" if doc["ties"] else ""),
             "margins (right logit minus the best other; each interval contains the exact value):",
             f"  min     {_span(doc['min_margin'])}",
             f"  mean    {_span(doc['mean_margin'])}",
             f"  1%      {_span(q.get('q0.01'))}",
             f"  10%     {_span(q.get('q0.1'))}",
             f"  median  {_span(q.get('q0.5'))}",
             f"{'relation':>8}  {'queries':>9}  {'accuracy':>8}  {'min margin (lower end)':>22}  "
             f"{'mean margin (lower end)':>23}"]
    lines += [f"{r['relation']:>8}  {r['queries']:>9,}  {100 * (r['accuracy'] or 0):7.2f}%  "
              f"{_lower_end(r['min_margin']):>22}  {_lower_end(r['mean_margin']):>23}"
              for r in doc["per_relation"]]
    if doc.get("note"):
        lines += [f"note: {sentence}" for sentence in plain_note(doc["note"])]
    if doc.get("fingerprint"):  # of the model read (docs/certify.md)
        saved = doc.get("saved_fingerprint")
        lines.append(f"model fingerprint {doc['fingerprint']}" + (
            "" if saved is None else " (the one saved)" if saved == doc["fingerprint"] else
            f"; MISMATCH: the file was saved with {saved}, so these arrays are not the model saved"))
    return lines


def _certify(doc: dict) -> list[str]:
    """``certify``: one row (sizes, margin promised vs certified, counts, verdict), then the witness or the
    reasons."""
    promise = doc.get("promise") or {}
    params = doc["params"]
    margin = doc.get("min_margin_exact") or _fmt(doc.get("min_margin"))
    head = ["certify", "N", "R", "k", "margin prom/min", "allowance", "query types", "points", "units shut",
            "time s", "verdict"]
    row = [doc["name"], f"{params['N']:,}", str(params["R"]), str(params["k"]),
           f"{_fmt(promise.get('margin'))}/{margin}", _fmt(doc.get("allowance"), 3),
           f"{doc.get('query_types', 0):,}", f"{doc.get('points', 0):,}", f"{doc.get('units_shut', 0):,}",
           f"{doc.get('seconds', 0.0):.2f}", doc["verdict"]]
    widths = [max(len(a), len(b)) for a, b in zip(head, row)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip() for cells in (head, row)]
    if doc["verdict"] == "CERTIFIED" and doc.get("min_margin") is None:  # one possible answer (N = 1)
        lines.append("every task: every query answered; one possible answer, so no wrong answer to beat and "
                     "no margin to bound")
    elif doc["verdict"] == "CERTIFIED":
        lowest, promised = doc.get("min_margin"), promise.get("margin")
        shown, promised_text = ((margin, _fmt(promised)) if doc.get("min_margin_exact")
                                else _distinct(lowest, promised))
        below = isinstance(lowest, float) and isinstance(promised, float) and lowest < promised
        lines.append(f"every task: every query's margin >= {shown} (promise {promised_text}"
                     + (", met only within the float64 allowance" if below else "") + ")"
                     + ("" if doc.get("integer") else f", float64 allowance {_fmt(doc.get('allowance'), 3)}"))
    witness = doc.get("witness")
    if witness:
        found, promised_text = _distinct(witness["margin"], witness["promised"])
        lines.append(f"witness: subject {witness['subject']}, query {witness['query_type']}, margin "
                     f"{found} (promised {promised_text})"
                     + (f"; task written to {doc['witness_file']}" if doc.get("witness_file") else
                        "; write the task with --witness FILE.npy"))
        conf = doc.get("confirmation")
        if conf:
            shown = "passed" if conf["check_passed"] else "FAILED"  # certify's name for the check's `passed`
            lines.append(f"confirmed by check on the witness task: accuracy {conf['accuracy']:.6%}, min "
                         f"margin {_fmt(conf['min_margin'])}, check {shown}")
    if doc.get("fingerprint"):  # "certified" only for a CERTIFIED verdict: else the object examined
        label = "certified object" if doc["verdict"] == "CERTIFIED" else "object examined"
        lines.append(f"{label}: the canonical family and options, {doc['fingerprint']}")
        seeded = ((doc.get("declaration") or {}).get("falsification") or {}).get("seeded_model_fingerprint")
        if seeded:
            lines.append(f"  its model on the seeded task (as `check` prints it): {seeded}")
    return lines + _certify_reasons(doc)


def _certify_reasons(doc: dict) -> list[str]:
    """The reasons, readable: one line per distinct reason (with how many query types it covers), then one
    line per unit or slot it names (its bounds), at most :data:`_REASON_LINES` of them; the full detail is in
    ``--json``."""
    prefix = "unknown: " if doc["verdict"] == "UNKNOWN" else "note: "
    groups: dict[str, list[dict]] = {}
    for reason in doc.get("reasons", []):
        groups.setdefault(reason.get("why", ""), []).append(reason)
    lines: list[str] = []
    cut = any_unit = False
    for why, group in groups.items():
        where = [_query_label(r["query_type"]) for r in group if isinstance(r.get("query_type"), dict)]
        shown = ", ".join(where[:3]) + (", ..." if len(where) > 3 else "")
        lines.append(prefix + why + (f" [{len(where)} query type(s): {shown}]" if where else ""))
        seen: list[str] = []
        for reason in group:
            for unit in reason.get("units", []):
                line = _unit_line(unit)
                if line not in seen:
                    seen.append(line)
        lines += [f"  {line}" for line in seen[:_REASON_LINES]]
        any_unit = any_unit or bool(seen)
        cut = cut or len(seen) > _REASON_LINES or len(where) > 3
    if cut:
        lines.append("  (every query type, unit and bound: --json)" if not any_unit else
                     "  (one line per unit or slot shown; every query type, unit and bound: --json)")
    return lines


_REASON_LINES = 8


def _query_label(label: dict) -> str:
    return " ".join(f"{key} {value}" for key, value in label.items())


def _unit_line(unit: dict) -> str:
    """One unit or slot of an UNKNOWN reason, in words."""
    if "unit" in unit and "max_preactivation" in unit:
        slot = unit.get("reads_slot", {})
        low, high = unit.get("slot_range", [None, None])
        top = _fmt(unit["max_preactivation"])
        return (f"unit {unit['unit']}: possibly on (its largest pre-activation {top} > 0); reads slot "
                f"{slot.get('slot')} at position {slot.get('position')}, whose codes add "
                f"[{_fmt(low)}, {_fmt(high)}]")
    if "read_out_reads_slot" in unit:
        slot = unit["read_out_reads_slot"]
        return f"the read-out reads slot {slot.get('slot')} at position {slot.get('position')} directly"
    if "unit" in unit and "fires_with" in unit:
        return f"unit {unit['unit']} fires on the query with {_fmt(unit['fires_with'])}"
    return ", ".join(f"{key} {value}" for key, value in unit.items())


def _export(doc: dict) -> list[str]:
    """``export``: the folder written and the check in the target."""
    params, check = doc["params"], doc.get("check")
    what = params.get("construction") or params.get("model")
    lines = [f"{what} -> {doc['target']} ({doc['dtype']}): {doc['out']}  [{', '.join(doc['files'])}]"]
    if check is None:
        return lines + ["not checked in the target (--no-check)"]
    lines.append(f"checked in {check['target']}: {check['correct']:,}/{check['queries']:,} queries right "
                 f"({check['decoding']}, {check['steps']} step(s)); answers differing from georecall: "
                 f"{check['disagreements_with_georecall']} (of them near-ties within rounding: "
                 f"{check['within_rounding']}); right/wrong changed: "
                 f"{check.get('right_or_wrong_changed', 0)}")
    lines.append(f"logits: max |target - georecall| = {_fmt(check['max_logit_difference'], 3)}, allowed "
                 f"<= {_fmt(check['max_allowed'], 3)} ({check['queries_outside_bound']} queries outside); "
                 f"margin min {_fmt(check['min_margin_target'])} (target's logits)"
                 + (f", promise {_fmt(check['promise_margin'])}" if "promise_margin" in check else ""))
    lines.append(f"{'PASS' if check['passed'] else 'FAIL'} in {check['seconds']:.2f} s; bound: "
                 f"{check['bound']}")
    return lines


_TEXT = {
    "verify": _verify,
    "check single-hop": _reports,
    "check multi-hop": _reports,
    "certify single-hop": _certify,
    "certify multi-hop": _certify,
    "tradeoff": _tradeoff,
    "count": _count,
    "precision": _precision,
    "train": _train,
    "sweep threshold": _sweep,
    "study mechanism": lambda doc: [doc["text"]] + list(doc["figures"]),
    "probe": _probe,
    "eval": _eval,
    "transfer": _probe,
    "probe-hidden": _probe_hidden,
    "probe-lm": lambda doc: list(doc["text"]) + list(doc["figures"]),
    "figures": lambda doc: list(doc["files"]) + list(doc["notes"]),
    "demo": lambda doc: list(doc["lines"]),
    "lecture": lambda doc: [f"executed {doc['cells']} cells in {doc['seconds']:.0f} s ({doc['images']} "
                            f"figures): {doc['notebook']}", f"the lecture page: {doc['html']}",
                            f"the slides ({doc.get('slide_count', 0)}, open offline in a browser): "
                            f"{doc.get('slides')}"],
    "bounds": lambda doc: [doc["text"]],
    "export": _export,
}
# Commands whose table can also be rendered as md, csv or latex (``--format``): the command puts it in "text".
_TABLES = ("tradeoff", "count", "precision")



def to_text(doc: dict) -> str:
    """The document of ``doc["command"]`` rendered for a terminal.

    Parameters
    ----------
    doc : dict
        A result document.

    Returns
    -------
    str
        Text (no trailing newline).
    """
    if doc["command"] in _TABLES and doc.get("format", "text") != "text":
        return doc["text"].rstrip("\n")
    return "\n".join(_TEXT[doc["command"]](doc))
