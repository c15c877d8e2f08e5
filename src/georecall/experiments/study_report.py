"""The mechanism study's report (:mod:`.study`): per regime and per control, mean ± sd over seeds of every
probe, one verdict per claim by the declared thresholds (:mod:`.study_design`), the d axis, the Markdown
tables and the figures.

A claim *holds in a regime* when every seed's trained model meets its criterion, holds *partly* when some
seeds do, and *fails* otherwise (``superposition`` "fails" only where its planted control was detected; else
it "cannot tell").
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from georecall.experiments import figures as drawing
from georecall.experiments import probes_components, probes_mechanism
from georecall.experiments.study import read_study
from georecall.experiments.study_design import (
    CLAIMS,
    D_AXIS_FAMILIES,
    D_STAR,
    GRIDS,
    POWER_REQUIRED,
    THRESHOLDS,
    g1_d,
)
from georecall.experiments.study_figures import trajectory_figure
from georecall.memory import Budget

__all__ = ["D_AXIS_FIELDS", "TRAJECTORY_FIELDS", "d_axis", "figures", "regime_verdicts", "render_summary",
           "summarize", "trajectories"]

# What the trajectory figure draws against the training step (a regime with ``trajectory_every``): the share
# of facts answered and each claim's criterion quantities; ``zero_shot`` is the larger of the closed-form and
# the functional transfer, as in the claim.
TRAJECTORY_FIELDS = ("accuracy", "superposition_r2", "follows", "others_unchanged", "selective_fraction",
                     "gated_mass", "breadth_median", "zero_shot", "component_share", "rebuilt_accuracy")


def _trajectory_point(point: dict) -> dict:
    s = point.get("summary") or {}
    transfer = [v for k in ("closed_form_transfer", "functional_zero_shot") if (v := s.get(k)) is not None]
    values = {"accuracy": point.get("accuracy"), "zero_shot": max(transfer) if transfer else None}
    return {"step": point.get("step"),
            **{f: values[f] if f in values else s.get(f) for f in TRAJECTORY_FIELDS}}


def trajectories(records: list[dict]) -> dict | None:
    """The probes along training of one regime's records: per step, mean ± sd over seeds of
    :data:`TRAJECTORY_FIELDS`; step 0 is the untrained weights (the record's ``initial`` probes).

    Parameters
    ----------
    records : list of dict
        Mechanism records of one regime (those without a ``trajectory`` are skipped).

    Returns
    -------
    dict or None
        ``steps`` (sorted) and per field a list of :func:`_stats` per step; ``None`` when no record has a
        trajectory.
    """
    points: dict[int, list[dict]] = {}
    for r in records:
        trajectory = r.get("trajectory")
        if not isinstance(trajectory, list):
            continue
        start = {"step": 0, "accuracy": r["training"].get("initial_accuracy"),
                 "summary": r["initial"]["summary"]}
        for point in [start, *trajectory]:
            if isinstance(point, dict) and isinstance(point.get("step"), int):
                points.setdefault(point["step"], []).append(_trajectory_point(point))
    if not points:
        return None
    steps = sorted(points)
    return {"steps": steps,
            **{f: [_stats([p[f] for p in points[s]]) for s in steps] for f in TRAJECTORY_FIELDS}}


def _stats(values: list) -> dict:
    """Mean and sample standard deviation (ddof = 1; 0 for one value) of the non-missing values."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return {"mean": None, "sd": None, "n": 0}
    sd = float(np.std(present, ddof=1)) if len(present) > 1 else 0.0
    return {"mean": float(np.mean(present)), "sd": sd, "n": len(present)}


def regime_verdicts(claims_per_seed: list[dict], powers: list[float | None] | None = None
                    ) -> dict[str, dict]:
    """Per claim: seeds meeting it, seeds in all, and the verdict — ``holds`` (every seed), ``partly`` (some)
    or ``fails`` (none); ``superposition`` "fails" only where its planted control was detected.

    Parameters
    ----------
    claims_per_seed : list of dict
        ``{claim: met}`` per seed (:func:`.study_design.claims_met`).
    powers : list of float or None, optional
        Per seed, the superposition probe's power (:func:`.probes_mechanism.superposition_power`). When a
        seed's superposition claim is not met and its power is below :data:`.study_design.POWER_REQUIRED` (or
        unknown), that seed cannot tell; the claim's verdict is then ``cannot tell`` instead of ``fails``
        (``partly`` stays).

    Returns
    -------
    dict
        ``{claim: {"met", "n", "verdict"}}`` over :data:`.study_design.CLAIMS` (``superposition`` also
        ``power``, the smallest per-seed power, ``None`` when some seed's was not measured, when given).
    """
    out: dict[str, dict[str, Any]] = {}
    for claim in CLAIMS:
        met = sum(bool(c.get(claim)) for c in claims_per_seed)
        n = len(claims_per_seed)
        out[claim] = {"met": met, "n": n,
                      "verdict": "holds" if n and met == n else ("partly" if met else "fails")}
    if powers is not None:
        known = [float(p) for p in powers if p is not None]
        weakest = min(known) if len(known) == len(powers) and known else None
        entry: dict[str, Any] = out["superposition"]
        entry["power"] = weakest
        if entry["verdict"] == "fails" and (weakest is None or weakest < POWER_REQUIRED):
            entry["verdict"] = "cannot tell"
    return out


def _fields() -> tuple[str, ...]:
    return probes_mechanism.SUMMARY_FIELDS + probes_components.SUMMARY_FIELDS


def _group_key(record: dict) -> str:
    fields = ("kind", "grid", "regime", "construction", "N", "R", "pad_d", "params", "probe", "study_version",
              "version")
    return json.dumps({k: record.get(k) for k in fields}, sort_keys=True)


def summarize(path: str, *, budget: Budget | None = None) -> dict:
    """The study's document: per regime and per control, mean ± sd over seeds of every probe, the verdicts by
    the declared thresholds, and one line per claim.

    Parameters
    ----------
    path : str
        The study's results file.
    budget : Budget or None
        Memory budget the file is counted against before it is parsed.

    Returns
    -------
    dict
        ``file``, ``problems`` (skipped lines), ``thresholds``, ``claims``, ``regimes`` (trained regimes and
        the two controls (a), (b), in grid order: ``trained`` and ``initial`` probe statistics, ``training``,
        ``verdicts``), ``constructions`` (G1, A1 per (N, R)), ``verdicts`` (per claim: regimes where it holds,
        partly holds, fails; and its one-line statement), ``calibration`` (G1 meets every claim, A1 and every
        untrained model none), ``seconds`` (sum of job times).

    Raises
    ------
    InputError
        The file cannot be read, is larger than ``budget`` allows, or holds no study record (a sweep file,
        a model file, an empty file).
    """
    contents = read_study(path, budget=budget, require=True)
    groups: dict[str, list[dict]] = {}
    for record in contents.records:
        groups.setdefault(_group_key(record), []).append(record)
    order = {r.name: i for g in GRIDS.values() for i, r in enumerate(g.regimes)}
    regimes: list[dict[str, Any]] = []
    constructions: list[dict[str, Any]] = []
    for records in groups.values():
        records.sort(key=lambda r: r["seed"])
        if records[0]["kind"] == "control":
            constructions.append(_construction_entry(records))
        else:
            regimes.append(_regime_entry(records))
    regimes.sort(key=lambda e: (e["grid"] or "", e["control"], order.get(e["regime"], len(order))))
    constructions.sort(key=lambda e: (e["construction"], e["N"], e["R"], e.get("pad_d") or 0))
    names = [e["regime"] for e in regimes]
    for e in regimes:  # the same regime name under two versions or grids: say which
        e["label"] = (e["regime"] if names.count(e["regime"]) == 1
                      else f"{e['regime']} [{e['grid']} {e['version']}]")
    verdicts = {claim: _claim_verdict(claim, statement, regimes, constructions)
                for claim, statement in CLAIMS.items()}
    return {"file": path, "problems": contents.problems(), "thresholds": dict(THRESHOLDS),
            "claims": dict(CLAIMS), "regimes": regimes, "constructions": constructions, "verdicts": verdicts,
            "calibration": _calibration(regimes, constructions),
            "seconds": float(sum(e["seconds"] for e in regimes + constructions)),
            "d_star": {f"N={N}, R={R}": v for (N, R), v in D_STAR.items()},
            "d_axis": d_axis(regimes, constructions)}


def _seed_statistics(records: list[dict]) -> dict[str, Any]:
    """One group's statistics over its seeds (sorted): its trained models' probes, verdicts and seconds."""
    fields = _fields()
    return {"seeds": [r["seed"] for r in records], "n": len(records),
            "trained": {f: _stats([r["summary"].get(f) for r in records]) for f in fields},
            "verdicts": regime_verdicts([r["claims"] for r in records],
                                        [r["summary"].get("superposition_power") for r in records]),
            "seconds": float(sum(r.get("seconds", 0.0) for r in records))}


def _construction_entry(records: list[dict]) -> dict[str, Any]:
    """A construction's entry (a control of kind ``control``): its sizes and its statistics over seeds."""
    first = records[0]
    return {"construction": first["construction"], "N": first["N"], "R": first["R"],
            "d": first.get("d"), "m": first.get("m"), "pad_d": first.get("pad_d"),
            "grid": first.get("grid"), "version": first.get("version"), **_seed_statistics(records)}


def _regime_entry(records: list[dict]) -> dict[str, Any]:
    """A regime's entry: seed statistics, declaration, training, untrained probes, trajectory."""
    first = records[0]
    fields = _fields()
    entry = _seed_statistics(records)
    p = first["params"]
    training = [r["training"] for r in records]
    entry.update(
        regime=first["regime"], description=first.get("description", ""), family=first.get("family"),
        control=bool(first.get("control")), grid=first.get("grid"), version=first.get("version"),
        params={k: p.get(k) for k in ("N", "R", "d", "m", "attention", "init", "init_scale", "readout",
                                      "decay", "decay_groups", "steps", "stop", "batch_size", "noise",
                                      "lr", "lam", "d_g1_factor")},
        training={"reached": sum(bool(t["reached"]) for t in training),
                  "steps": _stats([t["steps"] for t in training]),
                  "accuracy": _stats([t["accuracy"] for t in training]),
                  "final_loss": _stats([t["final_loss"] for t in training]),
                  "seconds": _stats([t["seconds"] for t in training])},
        initial={f: _stats([r["initial"]["summary"].get(f) for r in records]) for f in fields},
        initial_verdicts=regime_verdicts([r["initial"]["claims"] for r in records],
                                         [r["initial"]["summary"].get("superposition_power")
                                          for r in records]))
    trajectory = trajectories(records)
    if trajectory is not None:
        entry["trajectory"] = trajectory
    return entry


def _claim_verdict(claim: str, statement: str, regimes: list[dict], constructions: list[dict]) -> dict:
    """One claim's verdict: where it holds, partly holds or cannot tell, and its one-line statement."""
    gd = [e for e in regimes if not e["control"]]
    holds = [e["label"] for e in gd if e["verdicts"][claim]["verdict"] == "holds"]
    partly = [f"{e['label']} ({e['verdicts'][claim]['met']}/{e['verdicts'][claim]['n']})" for e in gd
              if e["verdicts"][claim]["verdict"] == "partly"]
    controls = [f"{e['label']}: {e['verdicts'][claim]['verdict']}" for e in regimes if e["control"]]
    refs = [f"{_construction_label(e)}: {e['verdicts'][claim]['verdict']}" for e in constructions]
    where = (f"holds in {len(holds)} of {len(gd)} gradient-descent regimes ({', '.join(holds)})" if holds
             else f"holds in none of the {len(gd)} gradient-descent regimes")
    if partly:
        where += f"; partly (some seeds) in {', '.join(partly)}"
    untold = [e for e in gd if e["verdicts"][claim]["verdict"] == "cannot tell"]
    weak = [e["label"] for e in untold if e["verdicts"][claim].get("power") is not None]
    unmeasured = [e["label"] for e in untold if e["verdicts"][claim].get("power") is None]
    if weak:
        where += (f"; cannot tell (no seed meets it, and its planted control is detected in fewer than "
                  f"{POWER_REQUIRED:.0%} of the draws) in {', '.join(weak)}")
    if unmeasured:
        where += (f"; cannot tell (no seed meets it, and its planted control's power was not measured in "
                  f"every seed: records of study version < 3 have none) in {', '.join(unmeasured)}")
    line = (f"{claim} — {statement} [{_criterion(claim)}]: {where}. Controls: "
            f"{'; '.join(controls) or 'none run'}. Constructions: {'; '.join(refs) or 'none run'}.")
    return {"holds": holds, "partly": partly, "controls": controls, "constructions": refs, "line": line}


def _calibration(regimes: list[dict], constructions: list[dict]) -> dict[str, bool | None]:
    """Whether G1 meets every claim, and A1 and untrained weights none (``None``: not run)."""
    g1 = [e for e in constructions if e["construction"] == "G1"]
    a1 = [e for e in constructions if e["construction"] == "A1"]
    fan_in = [e for e in regimes if e["params"]["init"] == "fan-in"]
    return {
        "G1 meets every claim in every seed": all(
            v["verdict"] == "holds" for e in g1 for v in e["verdicts"].values()) if g1 else None,
        "A1 meets no claim in any seed": all(
            v["met"] == 0 for e in a1 for v in e["verdicts"].values()) if a1 else None,
        "untrained weights meet no claim in any seed": all(
            v["met"] == 0 for e in fan_in for v in e["initial_verdicts"].values()) if fan_in else None,
    }


def _construction_label(e: dict) -> str:
    wider = f", embedded in d={e['pad_d']}" if e.get("pad_d") else ""
    return f"{e['construction']} (N={e['N']}, R={e['R']}{wider})"


# the criterion quantities drawn and tabulated against d/d_G1
D_AXIS_FIELDS: tuple[tuple[str, str, str], ...] = (
    ("superposition R²", "superposition_r2", "superposition_r2"),
    ("forward-fit ceiling", "forward_ceiling", "superposition_r2"),
    ("interventions followed", "follows", "follows"),
    ("others unchanged", "others_unchanged", "others_unchanged"),
    ("selective units", "selective_fraction", "selective_fraction"),
    ("gated mass", "gated_mass", "gated_mass"),
    ("median breadth", "breadth_median", "breadth_median"),
    ("closed-form zero-shot", "closed_form_transfer", "zero_shot"),
    ("functional zero-shot", "functional_zero_shot", "zero_shot"),
)


def d_axis(regimes: list[dict], constructions: list[dict]) -> dict:
    """The d axis of a summary: per (N, R, family), the entries at each width d/d_G1, the verdict of every
    claim at every width, and G1 (native and embedded wider) at its widths.

    Parameters
    ----------
    regimes, constructions : list of dict
        The summary's ``regimes`` and ``constructions`` entries.

    Returns
    -------
    dict
        ``series``: list of ``{"N", "R", "family", "points": [{"factor", "d", "label", "n", "trained",
        "initial", "verdicts", "reachable"}]}`` (``reachable``: the mean forward-fit ceiling meets the
        superposition threshold, i.e. an exact superposition would pass the fit at this width);
        ``g1``: ``[{"N", "R", "d", "factor", "label", "trained", "verdicts"}]``; ``verdicts``: per claim, one
        line per (N, family) listing the widths where it holds, partly holds and fails.
    """
    series: dict[tuple, dict] = {}
    for e in regimes:
        factor = e["params"].get("d_g1_factor")
        if e.get("family") is None or factor is None:
            continue
        N, R = e["params"]["N"], e["params"]["R"]
        item = series.setdefault((N, R, e["family"]), {"N": N, "R": R, "family": e["family"], "points": []})
        ceiling = e["trained"].get("forward_ceiling", {}).get("mean")
        item["points"].append({"factor": factor, "d": e["params"]["d"], "label": e["label"], "n": e["n"],
                               "trained": e["trained"], "initial": e["initial"], "verdicts": e["verdicts"],
                               "initial_verdicts": e["initial_verdicts"],
                               "reachable": None if ceiling is None
                               else bool(ceiling >= THRESHOLDS["superposition_r2"])})
    for item in series.values():
        item["points"].sort(key=lambda q: q["factor"])
    rank = {r.name: i for i, r in enumerate(D_AXIS_FAMILIES)}
    series = dict(sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1], rank.get(kv[0][2], len(rank)),
                                                         kv[0][2])))
    g1 = []
    for e in constructions:
        if e["construction"] != "G1":
            continue
        d = e.get("pad_d") or e.get("d")
        g1.append({"N": e["N"], "R": e["R"], "d": d, "factor": d / g1_d(e["N"], e["R"]) if d else None,
                   "label": _construction_label(e), "trained": e["trained"], "verdicts": e["verdicts"]})
    verdicts: dict[str, list[str]] = {}
    for claim in CLAIMS:
        lines = []
        for item in series.values():
            by: dict[str, list[str]] = {"holds": [], "partly": [], "fails": [], "cannot tell": []}
            for q in item["points"]:
                v = q["verdicts"][claim]
                by[v["verdict"]].append(f"{q['factor']:g}" + ("" if v["verdict"] != "partly"
                                                                else f" ({v['met']}/{v['n']})"))
            said = [f"{verdict} at d/d_G1 ∈ {{{', '.join(widths)}}}"
                    for verdict, widths in by.items() if widths]
            lines.append(f"{item['family']} (N={item['N']}, R={item['R']}): {'; '.join(said)}")
        verdicts[claim] = lines
    return {"series": list(series.values()), "g1": g1, "verdicts": verdicts}


def _criterion(claim: str) -> str:
    t = THRESHOLDS
    if claim == "superposition":
        return (f"held-out R² of E or E − E0 ≥ {t['superposition_r2']}, interventions followed ≥ "
                f"{t['follows']:.0%}, other relations unchanged ≥ {t['others_unchanged']:.0%}")
    if claim == "selective_mlp":
        return (f"≥ {t['selective_fraction']:.0%} of active units relation-selective (≥ 0.9 of their "
                f"activation on one relation), gated mass ≥ {t['gated_mass']:.0%}, median breadth ≥ "
                f"{t['breadth_median']}")
    return f"closed-form or functional zero-shot accuracy on a new task ≥ {t['zero_shot']:.0%}"


def _cell(stat: dict, digits: int = 2) -> str:
    if stat is None or stat.get("mean") is None:
        return "—"
    if stat["n"] > 1:
        return f"{stat['mean']:.{digits}f} ± {stat['sd']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}"


_COLUMNS = (("fwd R²", "forward_r2", 2), ("rev R²", "reverse_r2", 2),
            ("ΔE fwd R²", "displacement_forward_r2", 2), ("follows", "follows", 2),
            ("others", "others_unchanged", 2), ("selective", "selective_fraction", 2),
            ("gated", "gated_mass", 2), ("breadth", "breadth_median", 3),
            ("closed-form", "closed_form_transfer", 2), ("encoder A", "encoder_accuracy_A", 2),
            ("zero-shot B", "functional_zero_shot", 2), ("fitted B", "fitted_transfer", 2))


def _claims_cell(verdicts: dict) -> str:
    return " · ".join(f"{v['met']}/{v['n']}" for v in verdicts.values())


def _render_d_axis(axis: dict | None) -> list[str]:
    """The d-axis tables (one per (N, R, family)) and the verdict per claim across d, as Markdown lines."""
    if not axis or not axis["series"]:
        return []
    keys = [(title, key) for title, key, _ in D_AXIS_FIELDS]
    head = "| " + " | ".join(["d/d_G1", "d", "seeds", "accuracy"] + [t for t, _ in keys]
                             + ["claims S·M·Z"]) + " |"
    rule = "|" + "---|" * (len(keys) + 5)
    lines = ["", "## Across d (d/d_G1; mean ± sd over seeds; ceiling: the forward fit's R² on an exact "
             "superposition with the model's own attribute vectors)", ""]
    for item in axis["series"]:
        lines += [f"### {item['family']} (N={item['N']}, R={item['R']})", "", head, rule]
        for q in item["points"]:
            lines.append("| " + " | ".join(
                [f"{q['factor']:g}", str(q["d"]), str(q["n"]), _cell(q["trained"].get("accuracy"), 3)]
                + [_cell(q["trained"].get(key)) for _, key in keys] + [_claims_cell(q["verdicts"])]) + " |")
        lines.append("")
    if axis["g1"]:
        lines += ["### G1, native and embedded in a wider residual (random rotation, the same logits)", "",
                  head, rule]
        for g in axis["g1"]:
            lines.append("| " + " | ".join(
                [(f"{g['factor']:.2f}" if g["factor"] else "—") + f" (N={g['N']})", str(g["d"]),
                 str(g["trained"]["accuracy"]["n"]), _cell(g["trained"].get("accuracy"), 3)]
                + [_cell(g["trained"].get(key)) for _, key in keys] + [_claims_cell(g["verdicts"])]) + " |")
        lines.append("")
    lines += ["Verdict per claim across d:", ""]
    for claim, entries in axis["verdicts"].items():
        lines += [f"- {claim}: " + "; ".join(entries)]
    return lines


def render_summary(doc: dict) -> str:
    """The document as Markdown: the trained table, the controls, the untrained table, the verdicts.

    Parameters
    ----------
    doc : dict
        What :func:`summarize` returns.

    Returns
    -------
    str
    """
    head = "| " + " | ".join(["regime", "d", "reached", "accuracy", "steps"] + [c[0] for c in _COLUMNS]
                             + ["claims S·M·Z"]) + " |"
    rule = "|" + "---|" * (len(_COLUMNS) + 6)
    lines = [f"# Mechanism study ({doc['file']})", ""]
    if doc["problems"]:
        lines += [f"Note: {doc['problems']}.", ""]
    lines += ["Mean ± sd over seeds. reached: seeds whose model answers every query; accuracy: over all "
              "queries after training. Claims S·M·Z: seeds meeting the superposition, relation-selective-MLP "
              "and zero-shot criteria.", "", "## Trained models", "", head, rule]
    for e in doc["regimes"]:
        t = e["training"]
        lines.append("| " + " | ".join(
            [e["label"], str(e["params"]["d"]), f"{t['reached']}/{e['n']}", _cell(t["accuracy"], 3),
             _cell(t["steps"], 0)]
            + [_cell(e["trained"][key], digits) for _, key, digits in _COLUMNS]
            + [_claims_cell(e["verdicts"])]) + " |")
    lines += ["", "## Constructions (controls)", "",
              head.replace("| reached | accuracy | steps", "| m | — | —"), rule]
    for e in doc["constructions"]:
        lines.append("| " + " | ".join(
            [f"{e['construction']} N={e['N']} R={e['R']}"
             + (f" (embedded in d={e['pad_d']})" if e.get("pad_d") else ""), str(e["d"]), str(e["m"]), "—",
             "—"]
            + [_cell(e["trained"][key], digits) for _, key, digits in _COLUMNS]
            + [_claims_cell(e["verdicts"])]) + " |")
    lines += ["", "## The same probes on each regime's initial (untrained) weights", "", head, rule]
    for e in doc["regimes"]:
        lines.append("| " + " | ".join(
            [e["label"], str(e["params"]["d"]), "—", "—", "0"]
            + [_cell(e["initial"][key], digits) for _, key, digits in _COLUMNS]
            + [_claims_cell(e["initial_verdicts"])]) + " |")
    lines += ["", "## Verdicts (thresholds declared before the run)", ""]
    lines += [f"- {v['line']}" for v in doc["verdicts"].values()]
    said = {True: "yes", False: "NO", None: "not run"}
    lines += _render_d_axis(doc.get("d_axis"))
    lines += ["", "Calibration: " + "; ".join(f"{k}: {said[v]}" for k, v in doc["calibration"].items()) + "."]
    lines.append(f"Job time (sum over jobs): {doc['seconds'] / 60:.1f} min.")
    return "\n".join(lines) + "\n"


def figures(doc: dict, out_dir: str, *, log: Callable[[str], None] | None = None, dpi: int | None = None,
            formats: Iterable[str] | None = None) -> list[str]:
    """Write ``mechanism`` (the criterion quantities per regime, coloured by trained / control / construction,
    with thresholds and the untrained weights) and ``forward_reverse`` (forward vs reverse fit) into
    ``out_dir`` (created when missing), drawn by :mod:`.figures`. matplotlib is imported there; without it
    nothing is written and ``log`` says so (the command line refuses ``--figures`` before any work instead).
    Returns the paths written.

    Parameters
    ----------
    doc : dict
        What :func:`summarize` returns.
    out_dir : str
        The folder (created when missing).
    log : callable, optional
        Receives the note that matplotlib is missing; default stderr.
    dpi : int, optional
        Raster resolution (default :data:`.figures.DEFAULT_DPI`).
    formats : list of str, optional
        File formats (default :data:`.figures.DEFAULT_FORMATS`).

    Returns
    -------
    list of str
        The paths written (none without matplotlib).
    """
    log = log or (lambda text: print(f"georecall: {text}", file=sys.stderr, flush=True))
    if not drawing.have_matplotlib():
        log("matplotlib is not installed: no figures (pip install '.[plot]' in georecall's clone)")
        return []
    options: dict[str, Any] = {"dpi": drawing.DEFAULT_DPI if dpi is None else dpi,
                               "formats": tuple(formats) if formats else drawing.DEFAULT_FORMATS}
    os.makedirs(out_dir, exist_ok=True)
    written = drawing.save_figure(drawing.mechanism_figure(doc, THRESHOLDS), out_dir, "mechanism", **options)
    written += drawing.save_figure(drawing.forward_reverse_figure(doc), out_dir, "forward_reverse", **options)
    if any(e.get("trajectory") for e in doc["regimes"]):
        written += drawing.save_figure(trajectory_figure(doc, THRESHOLDS, TRAJECTORY_FIELDS), out_dir,
                                       "mechanism_trajectory", **options)
    axis = doc.get("d_axis")
    if axis and axis.get("series"):
        written += drawing.save_figure(drawing.d_axis_figure(axis, THRESHOLDS, D_AXIS_FIELDS), out_dir,
                                       "mechanism_d", **options)
    return written
