"""The text report of a ``probe-lm`` document (:mod:`.run`): per relation, per layer, LRE, the interventions,
patching and their power, and the verdict, as terminal lines."""

from __future__ import annotations

import numpy as np

from georecall.lm.run_design import LRE_TRAIN
from georecall.lm.run_verdict import rate_at

__all__ = ["render_text"]


def _f(x, nd=2) -> str:
    """A number with ``nd`` decimals, or a dash for None and non-finite values."""
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def render_text(doc: dict) -> list[str]:
    """The result as terminal lines: per relation, per layer, interventions, the verdict.

    Parameters
    ----------
    doc : dict
        A :func:`.run.probe_lm` document (with its ``verdict``).

    Returns
    -------
    list of str
        The lines, without newlines.
    """
    return (_header_lines(doc) + _relation_lines(doc) + _layer_lines(doc) + [_superposition_power_line(doc)]
            + _lre_lines(doc) + _intervention_lines(doc) + _patching_power_lines(doc)
            + [_intervention_power_line(doc)] + ["verdict: " + v for v in doc["verdict"]["lines"]])


def _header_lines(doc: dict) -> list[str]:
    """What was run: the model, the facts, the cross-fitting and the decoding probe with its power."""
    T = doc["thresholds"]
    return [f"{doc['model']}: {doc['L']} layers, width {doc['width']}; {doc['subjects']} subjects, "
            f"{doc['relations_n']} relations, {doc['facts']} facts; templates {doc['templates']}; "
            f"{doc['folds']}-fold cross-fitting over subjects, ridge strength by 5-fold CV on the fit rows",
            "decoding: subject state -> attribute vector (ridge), ranked by cosine among all candidates; "
            f"power = detection rate of a planted mechanism of the same shape at SNR {T['named_snr']:g} "
            f"({doc['draws']} draws; negative control: the same with shuffled labels)"]


def _relation_lines(doc: dict) -> list[str]:
    """The table of relations, each at its best decoding layer, with its controls, power and verdict."""
    snr_i = doc["snrs"].index(doc["thresholds"]["named_snr"])
    best: dict[str, tuple] = {}
    for row in doc["layers"]:
        for x in row["per_relation"]:
            if x["relation"] not in best or x["accuracy"] > best[x["relation"]][1]["accuracy"]:
                best[x["relation"]] = (row["layer"], x)
    lines = [f"  {'relation':<26} {'facts':>5} {'known':>9} {'1st':>4} {'cls':>4} {'unseen':>6} "
             f"{'chance':>6} {'layer':>5} {'acc':>4} {'seen':>4} {'unsn':>4} {'ctrl':>4} {'power':>5} "
             f"{'neg':>4}  verdict (best layer)"]
    for rel in doc["relations"]:
        layer, x = best[rel["relation"]]
        ctrl = max(x["majority"], x["shuffled"], x.get("random_model", 0.0))
        known = "/".join(str(k) for k in rel["known"])
        lines.append(f"  {rel['relation']:<26} {rel['facts']:>5} {known:>9} "
                     f"{_f(rel['first_token_accuracy']):>4} {rel['classes']:>4} {x['unseen']:>3}/{x['n']:<3}"
                     f"{_f(x['chance'], 3):>6} {layer:>5} {_f(x['accuracy']):>4} {_f(x['accuracy_seen']):>4} "
                     f"{_f(x['accuracy_unseen']):>4} {_f(ctrl):>4} {_f(rel['power']['positive'][snr_i]):>5} "
                     f"{_f(rel['power']['negative'][snr_i]):>4}  {x['verdict']}")
    return lines


def _layer_lines(doc: dict) -> list[str]:
    """Per layer: decoding, encoding, superposition R² with its controls, logit lens and patching."""
    lines = ["per layer: decoding mean, relations decodable / told, superposition R² (shuffled, "
             "presence only, random model), logit lens and patching (share of known facts / pairs) per "
             "template"]
    for j, row in enumerate(doc["layers"]):
        per = row["per_relation"]
        s = row["superposition"]
        told = sum(x["verdict"] != "cannot tell" for x in per)
        dec = sum(x["verdict"] == "decodable" for x in per)
        lens = " ".join(_f(lt[j]) for lt in doc["logit_lens"])
        patch = " ".join(_f(p["moved"][p["layers"].index(row["layer"])])
                         if p["moved"] and row["layer"] in p["layers"] else "—" for p in doc["patching"])
        lines.append(f"  layer {row['layer']:>2}: decode {_f(row['decode_mean'])} ({dec}/{told} of "
                     f"{len(per)}; encoding {doc['verdict']['encoding'][str(row['layer'])]})  "
                     f"R² {_f(s['r2'])} ({_f(s['shuffled_r2'])}, {_f(s['presence_r2'])}, "
                     f"{_f(s.get('random_r2'))})  lens {lens}"
                     f"  patch {patch}")
    return lines


def _superposition_power_line(doc: dict) -> str:
    """The superposition probe's power per planted SNR, with its shuffled control."""
    sp = doc["superposition_power"]
    return ("superposition power (planted, same shape): "
            + ", ".join(f"SNR {a:g}: {_f(b)} (shuffled {_f(c)})"
                        for a, b, c in zip(sp["snrs"], sp["positive"], sp["negative"])))


def _lre_lines(doc: dict) -> list[str]:
    """LRE per relation: its best layer, and per layer faithfulness, power and verdict (or why not told)."""
    T = doc["thresholds"]
    lines = [f"LRE (template {doc['templates'][0]}, {LRE_TRAIN} training facts, β chosen on them from "
             f"{[b for b in doc['betas'] if b]}; held-out faithfulness vocabulary / candidates, "
             f"bias alone):"]
    for x in doc["lre"]:
        if not x["told"]:
            lines.append(f"  {x['relation']:<26} cannot tell: {x['reason']}")
            continue
        bestl = max(x["layers"], key=lambda y: y["faithful"])
        words = doc["verdict"]["lre"][x["relation"]]
        lines.append(f"  {x['relation']:<26} {x['held_out']} held out; best layer {bestl['layer']} (β "
                     f"{bestl['beta']:g}): {_f(bestl['faithful'])} / {_f(bestl['faithful_candidates'])}, "
                     f"bias "
                     f"{_f(bestl['bias_only'])} / {_f(bestl['bias_only_candidates'])}; per layer "
                     "faithful (power at λ " f"{T['lre_named']:g}) verdict: "
                     + ", ".join(f"{y['layer']}:{_f(y['faithful'])} "
                                 f"({_f(rate_at(y['power'], 'strengths', T['lre_named']))}) "
                                 f"{words[str(y['layer'])]}" for y in x["layers"]))
    return lines


def _intervention_lines(doc: dict) -> list[str]:
    """Per intervention layer, its edits and each dose's success, changes and stays."""
    lines = []
    for x in doc["interventions"]:
        if not x.get("edits"):
            lines.append(f"interventions at layer {x['layer']}: no edit")
            continue
        lines.append(f"interventions at layer {x['layer']}: {x['edits']} edits, {x['others']} other prompts; "
                     f"already j {_f(x['already'])}; fitted |Δ|/|h| median "
                     f"{_f(x['fitted_ratio_median'], 3)}; "
                     + "; ".join(f"dose {d['dose']}: -> j {_f(d['success'])}, changed {_f(d['changed'])}, "
                                 f"stay {_f(d['stay'])}" for d in x["doses"]))
    return lines


def _patching_power_lines(doc: dict) -> list[str]:
    """Per template with a planted patching control, its rate per layer at the named share and at 0."""
    T = doc["thresholds"]
    lines = []
    for t, p in enumerate(doc["patching"]):
        if p["power"]:
            lines.append(f"patching power, template {doc['templates'][t]} (planted readout, share read at "
                         f"the patched position {T['patch_named']:g}; λ = 0 the negative control): "
                         + ", ".join(f"{layer}:{_f(rate_at(pw, 'strengths', T['patch_named']))}"
                                     f"/{_f(rate_at(pw, 'strengths', 0.0))}"
                                     for layer, pw in zip(p["layers"], p["power"])))
    return lines


def _intervention_power_line(doc: dict) -> str:
    """The intervention estimator's selective share per dose on planted superposition states."""
    T = doc["thresholds"]
    ivp = doc["intervention_power"]
    k = ivp["snrs"].index(T["intervention_snr"])
    return (f"intervention power (the estimator on planted superposition states, SNR "
            f"{T['intervention_snr']:g}; selective share per dose, shuffled facts in brackets): "
            + ", ".join(f"{d}: {_f(a)} ({_f(b)})" for d, a, b in zip(
                ivp["doses"], ivp["rate"][k], ivp["negative"] or [None] * len(ivp["doses"])))
            + f"; {ivp['edited'][k]:.0f} facts edited per planting")
