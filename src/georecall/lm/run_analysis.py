"""The analysis of a ``probe-lm`` measurement (:mod:`.run`, :mod:`.run_measure`), NumPy only: decoding and the
superposition fit per layer with their controls and power, the logit lens, patching, LRE and the interventions
with their planted controls (:mod:`.controls`), gathered into the document :func:`analyse` returns with its
verdict (:mod:`.run_verdict`)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from georecall.experiments import power
from georecall.lm import controls, probes
from georecall.lm.facts import Facts
from georecall.lm.run_design import (
    BETAS,
    DOSES,
    FD_STEP,
    FOLDS,
    LRE_MIN_TEST,
    LRE_TRAIN,
    POWER_DRAWS,
    THRESHOLDS,
    stream_rng,
)
from georecall.lm.run_measure import Prepared, edit_facts
from georecall.lm.run_verdict import verdict

__all__ = ["analyse"]


def _frac(x) -> float | None:
    """The mean of a boolean array, or None when it is empty."""
    x = np.asarray(x)
    return float(x.mean()) if x.size else None


def analyse(m: dict, facts: Facts, *, seed: int,
            prep: Prepared, workers: int | None = None) -> dict:
    """The probes, controls, power and verdict from a :func:`.run_measure.measure` dict (NumPy only).

    A driver over named stages: the shared inputs (folds, shuffles, states), then two independent halves in
    parallel (decoding with its power; the superposition fits and the planted controls of the model's own
    probes), then the document's rows (relations, layers, logit lens, patching, interventions) and the
    verdict.

    Parameters
    ----------
    m : dict
        :func:`.run_measure.measure`'s output (or the cache's).
    facts : Facts
        The facts measured.
    seed : int
        The run seed (folds, shuffles, plantings).
    prep : Prepared
        The prepared prompts (labels, classes, fact indices).
    workers : int, optional
        Threads (default two where two CPUs are available; the document does not depend on it).

    Returns
    -------
    dict
        Plain data (the ``--json`` document's body).
    """
    inp = _inputs(m, prep, facts, seed)
    (pw, decoded), (sup_all, sup_sh, (sup_power, iv_power), patch_power, lre) = _in_parallel(
        [lambda: _decoding(inp, prep, seed), lambda: _fits_and_controls(inp, m, prep, facts, seed)],
        _workers() if workers is None else workers)
    layers = m["layers"]
    doc = {"L": m["L"], "width": inp.width, "subjects": len(facts.subjects), "relations_n": inp.R,
           "facts": len(prep.fact_list), "templates": m["templates"], "folds": FOLDS,
           "layers": _layer_rows(inp, facts, layers, decoded, pw, sup_all, sup_sh),
           "relations": _relation_rows(inp, m, prep, facts, pw), "superposition_power": sup_power,
           "logit_lens": _logit_lens(m, prep), "patching": _patching_rows(m, prep, facts, patch_power),
           "lre": lre, "lre_layers": m["lre_layers"], "betas": list(BETAS),
           "interventions": _intervention_rows(m, prep, facts),
           "intervene_layers": m["intervene_layers"], "doses": list(DOSES) + ["fitted"],
           "intervention_power": iv_power, "lre_strengths": list(controls.LRE_STRENGTHS),
           "patch_strengths": list(controls.PATCH_STRENGTHS),
           "thresholds": dict(THRESHOLDS), "snrs": list(power.SNRS), "draws": POWER_DRAWS,
           "layer_list": list(layers)}
    doc["verdict"] = verdict(doc)
    return doc


@dataclass(frozen=True)
class _Inputs:
    """What both halves of the analysis read: class vectors, subjects, folds, shuffles and states."""

    R: int
    width: int
    nl: int
    Us: list
    subj: list
    groups: list
    shuf: list
    alone: np.ndarray
    alone_r: np.ndarray | None


def _inputs(m: dict, prep: Prepared, facts: Facts, seed: int) -> _Inputs:
    """The shared inputs of a measurement (folds and shuffles each from its own stream)."""
    # Every layer (and the random-init model's) is fitted with the same folds, drawn afresh from each probe's
    # own stream, so the layers are fitted together: per relation one batch of 2 × layers problems (the real
    # labels and their shuffled control), per design one Gram matrix. Each probe draws from its own stream, so
    # the two halves of analyse are independent: they run in two threads where two CPUs are available (the
    # same document either way).
    R = len(facts.relations)
    subj = [np.flatnonzero(prep.present[:, r]) for r in range(R)]
    return _Inputs(
        R=R, width=m["width"], nl=len(m["layers"]), Us=[m[f"U{r}"] for r in range(R)], subj=subj,
        groups=[probes.folds_of(s.size, FOLDS, stream_rng(seed, "lm-decode", r)) for r, s in enumerate(subj)],
        shuf=probes.shuffled(list(prep.label), prep.present, stream_rng(seed, "lm-shuffle")),
        alone=m["alone"].astype(np.float64),
        alone_r=m["alone_random"].astype(np.float64) if "alone_random" in m else None)


def _decoding(inp: _Inputs, prep: Prepared, seed: int) -> tuple[list, list]:
    """Decoding's planted power per relation, and each relation's decoding of every layer."""
    pw = power.decode_power(list(prep.label), inp.Us, prep.present, inp.width, inp.groups,
                            rng=stream_rng(seed, "lm-power"), draws=POWER_DRAWS)
    decoded = []
    for r in range(inp.R):
        sub = inp.subj[r]
        stack = [inp.alone[sub, j] for j in range(inp.nl)]
        if inp.alone_r is not None:
            stack += [inp.alone_r[sub, j] for j in range(inp.nl)]
        labelings = [prep.label[r, sub], inp.shuf[r][sub]]
        decoded.append(power.decode_vectors_stack(np.stack(stack), labelings, inp.Us[r], inp.groups[r],
                                                  rng=stream_rng(seed, "lm-decode", r)))
    return pw, decoded


def _fits_and_controls(inp: _Inputs, m: dict, prep: Prepared, facts: Facts, seed: int) -> tuple:
    """The superposition fits (real and shuffled labels), the planted controls and the LRE rows."""
    R, nl = inp.R, inp.nl
    blocks = [inp.Us[r][prep.label[r]] for r in range(R)]
    Hs = [inp.alone[:, j] for j in range(nl)] + ([inp.alone_r[:, j] for j in range(nl)]
                                                 if inp.alone_r is not None else [])
    sup_all = probes.superposition_fit_many(Hs, blocks, prep.present, folds=FOLDS,
                                            rng=stream_rng(seed, "lm-sup"))
    sup_sh = probes.superposition_fit_many(Hs[:nl], [inp.Us[r][inp.shuf[r]] for r in range(R)], prep.present,
                                           folds=FOLDS, rng=stream_rng(seed, "lm-sup"))
    return (sup_all, sup_sh, _planted_superposition(m, prep, inp.Us, inp.width, seed),
            _patch_power(m, prep, seed), _lre_rows(m, prep, facts, seed))


def _relation_rows(inp: _Inputs, m: dict, prep: Prepared, facts: Facts, pw: list) -> list[dict]:
    """Per relation: facts, classes, first-token accuracy, known facts and decoding power."""
    relations = []
    for r, rel in enumerate(facts.relations):
        rows = prep.fact_row[r][inp.subj[r]]
        row = {"relation": rel.name, "facts": int(rows.size), "classes": int(prep.classes[r].size),
               "first_token_accuracy": float(np.mean(m["answers0"][rows] == prep.fact_token[rows])),
               "known": [int(m[f"known{t}"][rows].sum()) for t in range(len(m["templates"]))],
               "template_distinct": [bool(prep.distinct[t][r]) for t in range(len(m["templates"]))],
               "power": pw[r]}
        if "answers_random" in m:
            row["random_first_token_accuracy"] = float(np.mean(m["answers_random"][rows]
                                                               == prep.fact_token[rows]))
        relations.append(row)
    return relations


def _layer_rows(inp: _Inputs, facts: Facts, layers: list, decoded: list, pw: list, sup_all: list,
                sup_sh: list) -> list[dict]:
    """Per layer: each relation's decoding against its controls, and the superposition fit."""
    nl = inp.nl
    layer_rows = []
    for j, layer in enumerate(layers):
        per = []
        for r in range(inp.R):
            res, sh = decoded[r][j]
            x: dict[str, Any] = {"relation": facts.relations[r].name}
            x.update({k: res[k] for k in ("n", "classes", "chance", "accuracy", "majority", "unseen",
                                     "accuracy_seen", "accuracy_unseen")})
            x["shuffled"] = sh["accuracy"]
            floor = max(res["chance"], res["majority"], sh["accuracy"])
            if inp.alone_r is not None:
                x["random_model"] = decoded[r][nl + j][0]["accuracy"]
                floor = max(floor, x["random_model"])
            x["decodable"] = bool(res["accuracy"] >= floor + THRESHOLDS["decode_margin"])
            word, why = power.verdict_word(x["decodable"], pw[r], unseen=res["unseen"], n=res["n"])
            x["verdict"], x["reason"] = word, why
            per.append(x)
        sup, sup_s = sup_all[j], sup_sh[j]
        srow = {"r2": sup["r2"], "presence_r2": sup["presence_r2"], "shuffled_r2": sup_s["r2"]}
        if inp.alone_r is not None:
            srow["random_r2"] = sup_all[nl + j]["r2"]
        layer_rows.append({"layer": layer, "per_relation": per, "superposition": srow,
                           "decode_mean": float(np.mean([x["accuracy"] for x in per]))})
    return layer_rows


def _logit_lens(m: dict, prep: Prepared) -> list[list[float | None]]:
    """Per template, per layer, the share of known facts whose logit-lens answer is the fact's first token."""
    lens = []
    nl = len(m["layers"])
    for t in range(len(m["templates"])):
        known = m[f"known{t}"]
        lens.append([_frac(m[f"lens{t}"][known, j] == prep.fact_token[known]) for j in range(nl)])
    return lens


def _patching_rows(m: dict, prep: Prepared, facts: Facts, patch_power: list) -> list[dict]:
    """Per template, the share of pairs that patching moves, per layer and relation, with power."""
    patch = []
    for t in range(len(m["templates"])):
        src, dst = m[f"patch_src{t}"], m[f"patch_dst{t}"]
        p_layers = [int(x) for x in m[f"patch_layers{t}"]]
        moved = m[f"patched{t}"] == prep.fact_token[dst][:, None]
        stayed = m[f"patched{t}"] == prep.fact_token[src][:, None]
        per_rel = {}
        for r, rel in enumerate(facts.relations):
            sel = prep.fact_rel[src] == r
            if sel.any():
                per_rel[rel.name] = {"pairs": int(sel.sum()), "moved": moved[sel].mean(axis=0).tolist()}
        patch.append({"pairs": int(src.size), "layers": p_layers,
                      "moved": moved.mean(axis=0).tolist() if src.size else [],
                      "kept": stayed.mean(axis=0).tolist() if src.size else [], "per_relation": per_rel,
                      "power": patch_power[t]})
    return patch


def _workers() -> int:
    """Threads for the analysis: two where this process may use two CPUs, else one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return 2 if cpus >= 2 else 1


def _in_parallel(tasks: list[Callable[[], Any]], workers: int) -> list:
    """Each task's result, in order; the tasks after the first in ``workers − 1`` threads beside it (NumPy's
    factorisations, products and random draws release the GIL)."""
    if workers < 2 or len(tasks) < 2:
        return [task() for task in tasks]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=workers - 1) as pool:
        pending = [pool.submit(task) for task in tasks[1:]]
        first = tasks[0]()
        return [first] + [f.result() for f in pending]


def _patch_power(m: dict, prep: Prepared, seed: int) -> list[list[dict]]:
    """Per template, per patched layer, the planted control of patching (:func:`.controls.patch_power`)."""
    out = []
    layers = m["layers"]
    fact_class = prep.label[prep.fact_rel, prep.fact_subj]
    n_classes = [int(c.size) for c in prep.classes]
    for t in range(len(m["templates"])):
        src, dst = m[f"patch_src{t}"], m[f"patch_dst{t}"]
        rows = []
        if src.size:
            for layer in (int(x) for x in m[f"patch_layers{t}"]):
                rows.append(controls.patch_power(
                    m[f"prompt{t}"][:, layers.index(layer)].astype(np.float64), fact_class, prep.fact_rel,
                    n_classes, src, dst, THRESHOLDS["patch_moved"],
                    rng=stream_rng(seed, "lm-patch-power", t, layer), draws=POWER_DRAWS))
        out.append(rows)
    return out


def _lre_rows(m: dict, prep: Prepared, facts: Facts, seed: int) -> list[dict]:
    """Per relation, LRE's held-out scores per layer with its planted control (or why not told)."""
    T = THRESHOLDS
    out = []
    for r, rel in enumerate(facts.relations):
        k_known = int((m["known0"] & (prep.fact_rel == r)).sum())
        if f"lre_pred{r}" not in m:
            out.append({"relation": rel.name, "known": k_known, "told": False,
                        "reason": f"{k_known} known facts; LRE needs {LRE_TRAIN} to fit and {LRE_MIN_TEST} "
                                  f"held out"})
            continue
        kr, train = m[f"lre_facts{r}"], m[f"lre_train{r}"]
        truth = m["answers0"][kr]
        is_train = np.isin(kr, train)
        labels = prep.label[r, prep.fact_subj[kr]]
        rows = []
        for jl, layer in enumerate(m["lre_layers"]):
            row = {"layer": layer}
            row.update(controls.lre_scores(m[f"lre_pred{r}"][jl], m[f"lre_pred_cand{r}"][jl], truth, is_train,
                                           BETAS))
            H = m["prompt0"][kr, m["layers"].index(layer)].astype(np.float64)
            row["power"] = controls.lre_power(
                H, labels, int(prep.classes[r].size), LRE_TRAIN, BETAS, FD_STEP,
                lambda sc: controls.lre_rule(sc, T["lre_faithful"], T["lre_gain"], candidates=True),
                rng=stream_rng(seed, "lm-lre-power", r, layer), draws=POWER_DRAWS)
            rows.append(row)
        out.append({"relation": rel.name, "known": k_known, "told": True, "train": LRE_TRAIN,
                    "held_out": int((~is_train).sum()), "layers": rows})
    return out


def _planted_superposition(m: dict, prep: Prepared, Us, width: int, seed: int) -> tuple[dict, dict]:
    """The superposition fit and the intervention estimator on planted superposition states of the real
    run's shape (:func:`.controls.intervention_power`; the same plantings and fits serve both, and every
    intervention layer: the plantings do not depend on it).

    Returns
    -------
    (dict, dict)
        The superposition power (``snrs``, ``positive``, ``negative`` at the named SNR only, ``draws``) and
        the intervention power (:func:`.controls.intervention_power`).
    """
    T = THRESHOLDS
    facts, others = edit_facts(prep, m["known0"])

    def sup_rule(fit: dict) -> bool:
        return bool(fit["r2"] >= T["superposition_r2"]
                    and fit["r2"] >= fit["presence_r2"] + T["superposition_margin"])

    iv = controls.intervention_power(
        list(prep.label), Us, prep.present, width, facts, others, prep.fact_rel, prep.fact_subj, FOLDS,
        list(DOSES) + ["fitted"],
        lambda sc, already: controls.selective(sc, already, T["intervention_success"], T["intervention_gain"],
                                               T["intervention_stay"]),
        rng=stream_rng(seed, "lm-iv-power"), superposition_rule=sup_rule, negative_snr=T["intervention_snr"],
        draws=POWER_DRAWS)
    sup = {"snrs": list(iv["snrs"]), "positive": iv.pop("superposition"),
           "negative": [iv["superposition_negative"] if x == T["superposition_snr"] == T["intervention_snr"]
                        else None for x in iv["snrs"]], "draws": iv["draws"]}
    iv.pop("superposition_negative")
    return sup, iv


def _intervention_rows(m: dict, prep: Prepared, facts: Facts) -> list[dict]:
    """Per intervention layer, each dose's success, change and stay shares over the edits."""
    out = []
    for layer in m["intervene_layers"]:
        own = m[f"iv_own{layer}"]
        if own.size == 0 or f"iv_answers{layer}" not in m:
            out.append({"layer": layer, "edits": 0})
            continue
        res = m[f"iv_answers{layer}"]
        target = m[f"iv_target{layer}"]
        base_own = m["answers0"][own]
        other = m[f"iv_other{layer}"]
        doses = []
        for q, dose in enumerate(list(DOSES) + ["fitted"]):
            a_own, a_oth = res[q, : own.size], res[q, own.size :]
            doses.append({"dose": dose, "success": float(np.mean(a_own == target)),
                          "changed": float(np.mean(a_own != base_own)),
                          "stay": _frac(a_oth == m["answers0"][other]) if other.size else None})
        out.append({"layer": layer, "edits": int(own.size), "others": int(other.size),
                    "already": float(np.mean(base_own == target)),
                    "fitted_ratio_median": float(np.median(m[f"iv_ratio{layer}"])), "doses": doses})
    return out
