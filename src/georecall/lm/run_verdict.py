"""The verdict of a ``probe-lm`` document (:mod:`.run`): the declared thresholds
(:data:`.run_design.THRESHOLDS`, as the document records them) applied by the rules of ``docs/lm.md``, a
negative verdict only where the planted control has the power required."""

from __future__ import annotations

import numpy as np

from georecall.lm import controls

__all__ = ["rate_at", "verdict"]


def verdict(doc: dict) -> dict:
    """Apply :data:`.run_design.THRESHOLDS` to an :func:`.run_analysis.analyse` document (the rules of
    ``docs/lm.md``).

    Each rule is a stage of its own: decoding per relation, linear relational encoding per layer,
    superposition, LRE faithfulness, patching and the interventions, then the sentences that state them.

    Parameters
    ----------
    doc : dict
        The document (without ``verdict``).

    Returns
    -------
    dict
        ``encoding`` (per layer ``yes``/``no``/``cannot tell``), ``decodable`` (per relation, the layers),
        ``superposition_layers``, ``lre_faithful`` (per relation, the layers), ``patch_layers``,
        ``selective_layers`` and ``lines`` (the verdict sentences).
    """
    T = doc["thresholds"]
    decodable, not_dec = _decoding(doc)
    enc = _encoding(doc, T)
    sup_layers, sup_rate = _superposition(doc, T)
    lre_ok, lre_words = _lre(doc, T)
    patch_layers, patch_words = _patching(doc, T)
    selective, iv_words, iv_rate = _interventions(doc, T)
    lines = _decoding_lines(doc, T, decodable, not_dec, enc)
    lines.append(_superposition_line(T, sup_layers, sup_rate))
    lines.append(_lre_line(T, lre_words))
    lines.extend(_patching_lines(doc, T, patch_words))
    lines.append(_intervention_line(T, selective, iv_words, iv_rate))
    return {"encoding": {str(k): v for k, v in enc.items()}, "decodable": decodable,
            "superposition_layers": sup_layers, "superposition_power": sup_rate, "lre_faithful": lre_ok,
            "lre": {k: {str(a): b for a, b in v.items()} for k, v in lre_words.items()},
            "patch_layers": patch_layers,
            "patching": [{str(a): b for a, b in w.items()} for w in patch_words],
            "selective": [list(x) for x in selective], "interventions": iv_words,
            "intervention_power": iv_rate, "lines": lines}


def _decoding(doc: dict) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """Per relation, the layers where it is decodable and those where it is not decodable (with power)."""
    decodable: dict[str, list[int]] = {}
    not_dec: dict[str, list[int]] = {}
    for row in doc["layers"]:
        for x in row["per_relation"]:
            if x["verdict"] == "decodable":
                decodable.setdefault(x["relation"], []).append(row["layer"])
            elif x["verdict"] == "not decodable":
                not_dec.setdefault(x["relation"], []).append(row["layer"])
    return decodable, not_dec


def _encoding(doc: dict, T: dict) -> dict:
    """Per layer, linear relational encoding: yes, no, or cannot tell (too few relations told)."""
    enc: dict = {}
    for row in doc["layers"]:
        told = [x for x in row["per_relation"] if x["verdict"] != "cannot tell"]
        yes = [x for x in row["per_relation"] if x["verdict"] == "decodable"]
        if len(told) < T["told_min"]:
            enc[row["layer"]] = "cannot tell"
        else:
            enc[row["layer"]] = "yes" if len(yes) >= T["encoding_share"] * len(told) else "no"
    return enc


def _superposition(doc: dict, T: dict) -> tuple[list, float]:
    """The layers whose superposition fit beats every control, and the planted control's rate."""
    sp = doc["superposition_power"]
    sup_rate = sp["positive"][sp["snrs"].index(T["superposition_snr"])]
    sup_layers = []
    for row in doc["layers"]:
        s = row["superposition"]
        floor = max(s["presence_r2"], s["shuffled_r2"], s.get("random_r2", -np.inf))
        if s["r2"] >= T["superposition_r2"] and s["r2"] >= floor + T["superposition_margin"]:
            sup_layers.append(row["layer"])
    return sup_layers, sup_rate


def _lre(doc: dict, T: dict) -> tuple[dict, dict]:
    """Per relation told, LRE's faithful layers and each layer's word (negative only with power)."""
    req = T["power_required"]
    lre_ok: dict = {}
    lre_words: dict = {}
    for x in doc["lre"]:
        if not x["told"]:
            continue
        lre_ok[x["relation"]] = [y["layer"] for y in x["layers"]
                                 if controls.lre_rule(y, T["lre_faithful"], T["lre_gain"])]
        words = {}
        for y in x["layers"]:
            rate = rate_at(y["power"], "strengths", T["lre_named"])
            if controls.lre_rule(y, T["lre_faithful"], T["lre_gain"]):
                words[y["layer"]] = "faithful"
            elif not controls.lre_rule(y, T["lre_faithful"], T["lre_gain"], candidates=True) and rate >= req:
                words[y["layer"]] = "not faithful"
            else:
                words[y["layer"]] = "cannot tell"
        lre_words[x["relation"]] = words
    return lre_ok, lre_words


def _patching(doc: dict, T: dict) -> tuple[list[list], list[dict]]:
    """Per template, the layers where patching moves the answer and each layer's word."""
    req = T["power_required"]
    patch_layers = [[p["layers"][j] for j, v in enumerate(p["moved"]) if v >= T["patch_moved"]]
                    for p in doc["patching"]]
    patch_words = []
    for p in doc["patching"]:
        words = {}
        for j, layer in enumerate(p["layers"]):
            if not p["moved"]:  # no pair of known facts with different answers
                words[layer] = "cannot tell"
            elif p["moved"][j] >= T["patch_moved"]:
                words[layer] = "moves"
            elif p["power"] and rate_at(p["power"][j], "strengths", T["patch_named"]) >= req:
                words[layer] = "does not move"
            else:
                words[layer] = "cannot tell"
        patch_words.append(words)
    return patch_layers, patch_words


def _interventions(doc: dict, T: dict) -> tuple[list[tuple], dict[str, str], dict[str, float]]:
    """The selective (layer, dose) edits, each edit's word and the planted control's rate per dose."""
    req = T["power_required"]
    ivp = doc["intervention_power"]
    iv_rate = dict(zip([str(d) for d in ivp["doses"]], ivp["rate"][ivp["snrs"].index(T["intervention_snr"])]))
    selective = []
    iv_words: dict = {}
    for x in doc["interventions"]:
        for d in x.get("doses", []):
            ok = controls.selective(d, x["already"], T["intervention_success"], T["intervention_gain"],
                                    T["intervention_stay"])
            if ok:
                selective.append((x["layer"], d["dose"]))
            word = ("selective" if ok else "not selective" if iv_rate[str(d["dose"])] >= req
                    else "cannot tell")
            iv_words[f"{x['layer']}:{d['dose']}"] = word
    return selective, iv_words, iv_rate


def _few(xs) -> str:
    """The items joined by commas, or ``none``."""
    return ", ".join(str(x) for x in xs) if xs else "none"


def _by_word(words: dict, word: str) -> list:
    """The keys whose word is ``word``."""
    return [k for k, v in words.items() if v == word]


def _decoding_lines(doc: dict, T: dict, decodable: dict, not_dec: dict, enc: dict) -> list[str]:
    """The sentences of the known facts, of decoding per relation and of linear relational encoding."""
    yes_layers = [k for k, v in enc.items() if v == "yes"]
    no_layers = [k for k, v in enc.items() if v == "no"]
    ct_layers = [k for k, v in enc.items() if v == "cannot tell"]
    known = [(x["relation"], x["known"][0], x["facts"]) for x in doc["relations"]]
    cannot = [x["relation"] for x in doc["relations"] if all(
        y["verdict"] == "cannot tell" for row in doc["layers"] for y in row["per_relation"]
        if y["relation"] == x["relation"])]
    return [
        f"known facts (greedy answer = the whole attribute), template {doc['templates'][0]}: "
        f"{sum(k for _r, k, _n in known)} of {sum(n for _r, _k, n in known)}; per relation "
        + ", ".join(f"{r} {k}/{n}" for r, k, n in known),
        f"decoding into attribute vectors (accuracy >= {T['decode_margin']:.2f} above every control): "
        f"decodable somewhere: {_few(sorted(decodable))}; not decodable with power "
        f">= {T['power_required']} at SNR {T['named_snr']:g}: {_few(sorted(set(not_dec) - set(decodable)))}; "
        f"cannot tell at any layer (the planted control is not detected): {_few(cannot)}",
        f"linear relational encoding (>= {T['encoding_share']:.0%} of the relations that can be told, at "
        f"least {T['told_min']} told): yes at layers {_few(yes_layers)}; no at {_few(no_layers)}; cannot "
        f"tell at {_few(ct_layers)}",
    ]


def _superposition_line(T: dict, sup_layers: list, sup_rate: float) -> str:
    """The superposition sentence: the layers that pass, else none or cannot tell (by the control's power)."""
    if sup_layers:
        return (f"superposition (held-out R² >= {T['superposition_r2']}, >= "
                f"{T['superposition_margin']} above the controls): layers {_few(sup_layers)}")
    if sup_rate >= T["power_required"]:
        return (f"superposition: no layer (a planted superposition at SNR {T['superposition_snr']:g} of "
                f"this shape is detected in {sup_rate:.2f} of the draws)")
    return (f"superposition: no layer passes; cannot tell (the planted control at SNR "
            f"{T['superposition_snr']:g} is detected in only {sup_rate:.2f} of the draws)")


def _lre_line(T: dict, lre_words: dict) -> str:
    """The LRE faithfulness sentence, per relation told."""
    req = T["power_required"]
    lre_parts = []
    for rel, words in lre_words.items():
        part = f"{rel}: faithful at {_few(_by_word(words, 'faithful'))}"
        if _by_word(words, "not faithful"):
            part += f", not faithful at {_few(_by_word(words, 'not faithful'))}"
        if _by_word(words, "cannot tell"):
            part += f", cannot tell at {_few(_by_word(words, 'cannot tell'))}"
        lre_parts.append(part)
    return (f"LRE faithfulness (held-out known facts >= {T['lre_faithful']}, >= {T['lre_gain']} above "
            f"the bias alone; 'not faithful' also among the candidates, where a planted readout with "
            f"linear share {T['lre_named']:g} passes in >= {req} of the draws), per relation with "
            f"enough known facts ({len(lre_words)}): " + ("; ".join(lre_parts) if lre_parts else "none"))


def _patching_lines(doc: dict, T: dict, patch_words: list[dict]) -> list[str]:
    """The activation patching sentences, one per template."""
    req = T["power_required"]
    return [f"activation patching, template {doc['templates'][t]} ({doc['patching'][t]['pairs']} "
            f"pairs; the answer follows the other subject in >= {T['patch_moved']} of pairs): moves "
            f"at layers {_few(_by_word(words, 'moves'))}; does not move (a planted readout with share "
            f"{T['patch_named']:g} at the patched position moves in >= {req} of the draws) at "
            f"{_few(_by_word(words, 'does not move'))}; cannot tell at "
            f"{_few(_by_word(words, 'cannot tell'))}"
            for t, words in enumerate(patch_words)]


def _intervention_line(T: dict, selective: list, iv_words: dict, iv_rate: dict) -> str:
    """The selective interventions sentence, with the planted control's rate per dose."""
    req = T["power_required"]
    return (f"selective interventions (success >= {T['intervention_success']}, gain >= "
            f"{T['intervention_gain']}, stay >= {T['intervention_stay']}) at (layer, dose): "
            f"{_few(selective)}; not selective where the estimator on a planted superposition at SNR "
            f"{T['intervention_snr']:g} is selective in >= {req} of the draws (per dose: "
            + ", ".join(f"{d} {v:.2f}" for d, v in iv_rate.items()) + "): "
            + _few(_by_word(iv_words, "not selective")) + "; cannot tell at "
            + _few(_by_word(iv_words, "cannot tell")))


def rate_at(pw: dict, key: str, strength: float) -> float:
    """A control's detection rate at a declared strength (0 where that strength was not planted).

    Parameters
    ----------
    pw : dict
        The control's power record (its strengths under ``key``, its rates under ``"rate"``).
    key : str
        The strengths' field.
    strength : float
    """
    xs = [float(v) for v in pw[key]]
    return float(pw["rate"][xs.index(float(strength))]) if float(strength) in xs else 0.0
