"""The ``probe-lm`` study: a real LM's hidden states on real facts, per-layer probes, interventions, controls,
and a verdict against thresholds declared before the run (``docs/lm.md``; the constants below are those).

States (one per layer ``ℓ = 0..L``, see :mod:`.extract`; every text is read after the one-token context
:data:`PREFIX`): the *subject state* ``h_s`` is the state at the last token of the subject's name read alone
(the same tensor as in every prompt that starts with the subject: the model is causal), the *prompt state* is
the state at the last subject token of the relation-r prompt. Attribute vectors: ``U`` the unembedding row of
the attribute's first token (``" " + attribute``), and ``Hv`` the attribute's own state (last token of ``" " +
attribute`` read alone) at the same layer.

Interventions at layer ℓ: ``A_r`` is relation r's block of the cross-fitted superposition map (``U`` vectors;
the map from the group in which the subject was held out), ``Δ = A_r(U_j − U_{a_r(s)})`` with ``j`` a
uniformly drawn other attribute class of r; ``Δ`` is added at the subject position of the relation-r prompt
(success: the greedy next token becomes ``j``'s first token) and, the same ``Δ``, at the subject position of
each of the subject's other prompts (stay: their greedy answer does not change)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from georecall.errors import InputError
from georecall.theory import seeds
from georecall.verify.lm import extract, probes
from georecall.verify.lm.facts import Facts
from georecall.verify.lm.loader import random_like

__all__ = ["THRESHOLDS", "default_intervene_layers", "probe_lm", "render_text", "verdict"]

# Declared before the first SmolLM2 run (docs/lm.md, "Thresholds"); changing them changes the verdict only.
THRESHOLDS = {
    "decode_margin": 0.20,  # accuracy - max(chance, majority, shuffled, random model): a decodable relation
    "encoding_share": 0.5,  # share of relations decodable at a layer for "linear relational encoding"
    "superposition_r2": 0.5,  # held-out R² of the superposition fit (U or Hv vectors)
    "superposition_margin": 0.10,  # ... above the shuffled-facts, presence-only and random-model R²
    "intervention_success": 0.5,  # answer becomes j
    "intervention_gain": 0.4,  # ... above how often the unedited answer is already j
    "intervention_stay": 0.8,  # the other relations' answers unchanged
}
FOLDS = 5
# Every text read (prompts, subjects alone, attributes alone) starts with this one-token context, so that no
# state is read at position 0: there decoder LMs keep an "attention sink" with massive activations (SmolLM2:
# |h| ≈ 24,000 against ≈ 200 elsewhere at layer 15, 99% of the states' variance in 3 coordinates), which
# made a single-token subject's or attribute's state a sink state, not its own (found in the first full run,
# kept in docs/lm_smollm2_run1_sink.txt).
PREFIX = "\n"


def default_intervene_layers(L: int) -> list[int]:
    """The declared intervention layers: a quarter, half and three quarters of the depth.

    Parameters
    ----------
    L : int
        The model's number of blocks (layers are ``0..L``).

    Returns
    -------
    list of int
        ``round(L/4)``, ``round(L/2)``, ``round(3L/4)`` (halves rounded up), distinct and sorted.
    """
    return sorted({int(L * f + 0.5) for f in (0.25, 0.5, 0.75)})


# Every random choice draws from the run seed's "probes" stream under its own key (georecall.theory.seeds).
_KEYS = {"lm-shuffle": 1000, "lm-decode": 1001, "lm-sup": 1002, "lm-intervene": 1003}


def _rng(seed: int, name: str, *key: int) -> np.random.Generator:
    return seeds.rng(seed, "probes", _KEYS[name], *key)


class _Prepared:
    """Tokenized prompts and the attributes' token classes for one tokenizer (shared by the model and its
    random twin)."""

    def __init__(self, tokenizer, facts: Facts, template: int):
        self.facts = facts
        self.fact_list = facts.facts()
        R = len(facts.relations)
        self.classes: list[np.ndarray] = []  # per relation: the distinct first-token ids (class -> token id)
        self.cand_class: list[dict[str, int]] = []
        for rel in facts.relations:
            ids = extract.first_token_ids(tokenizer, [" " + c for c in rel.candidates])
            uniq = np.unique(ids)
            self.classes.append(uniq)
            self.cand_class.append({c: int(np.searchsorted(uniq, t)) for c, t in zip(rel.candidates, ids)})
        texts, spans = [], []
        for i, r, _a in self.fact_list:
            templates = facts.relations[r].templates
            t = templates[min(template, len(templates) - 1)]
            s = facts.subjects[i]
            start = t.index("{}")
            texts.append(PREFIX + t.replace("{}", s, 1))
            spans.append((len(PREFIX) + start, len(PREFIX) + start + len(s)))
        self.prompt_texts = texts
        self.prompts = extract.encode(tokenizer, texts, spans)
        self.alone = extract.encode(tokenizer, [PREFIX + s for s in facts.subjects],
                                    [(len(PREFIX), len(PREFIX) + len(s)) for s in facts.subjects])
        attrs = sorted({a for _i, _r, a in self.fact_list})
        self.attr_index = {a: k for k, a in enumerate(attrs)}
        self.attr_batch = extract.encode(tokenizer, [PREFIX + " " + a for a in attrs])
        n = len(facts.subjects)
        self.present = np.zeros((n, R), dtype=bool)
        self.label = np.zeros((R, n), dtype=np.int64)  # attribute class per subject
        self.attr_of = np.zeros((R, n), dtype=np.int64)  # attribute index (for Hv) per subject
        self.fact_row = -np.ones((R, n), dtype=np.int64)
        for k, (i, r, a) in enumerate(self.fact_list):
            self.present[i, r] = True
            self.label[r, i] = self.cand_class[r][a]
            self.attr_of[r, i] = self.attr_index[a]
            self.fact_row[r, i] = k


def _extract(model, prep: _Prepared, layers: list[int], batch_size: int, say) -> dict:
    out: dict = {}
    t = time.perf_counter()
    out["alone"], _ = extract.run(model, prep.alone, layers, batch_size=batch_size)
    out["prompt"], out["answers"] = extract.run(model, prep.prompts, layers, batch_size=batch_size)
    out["attr"], _ = extract.run(model, prep.attr_batch, layers, batch_size=batch_size)
    U = model.get_output_embeddings().weight.detach().float().numpy()
    out["U"] = [U[c].astype(np.float64) for c in prep.classes]  # per relation: (classes, width)
    say(f"  states of {prep.alone.input_ids.shape[0]} subjects, {prep.prompts.input_ids.shape[0]} prompts, "
        f"{prep.attr_batch.input_ids.shape[0]} attributes at {len(layers)} layers "
        f"({time.perf_counter() - t:.1f} s)")
    return out


def _layer_probes(prep: _Prepared, st: dict, j: int, seed: int, shuffle_too: bool, keep_maps: bool) -> dict:
    facts = prep.facts
    R = len(facts.relations)
    rows = []
    shuf_labels = probes.shuffled(list(prep.label), prep.present, _rng(seed, "lm-shuffle"))
    for r in range(R):
        subj = np.flatnonzero(prep.present[:, r])
        lab = prep.label[r, subj]
        V = st["U"][r]
        row: dict = {"relation": facts.relations[r].name}
        row["alone"] = probes.decode_relation(st["alone"][subj, j].astype(np.float64), lab, V, folds=FOLDS,
                                              rng=_rng(seed, "lm-decode", r))
        in_prompt = st["prompt"][prep.fact_row[r, subj], j].astype(np.float64)
        row["prompt"] = probes.decode_relation(in_prompt, lab, V, folds=FOLDS, rng=_rng(seed, "lm-decode", r))
        if shuffle_too:
            row["shuffled"] = probes.decode_relation(st["alone"][subj, j].astype(np.float64),
                                                     shuf_labels[r][subj], V, folds=FOLDS,
                                                     rng=_rng(seed, "lm-decode", r))
        rows.append(row)
    H = st["alone"][:, j].astype(np.float64)
    blocks_u = [st["U"][r][prep.label[r]] for r in range(R)]
    blocks_h = [st["attr"][prep.attr_of[r], j].astype(np.float64) for r in range(R)]
    sup_u = probes.superposition_fit(H, blocks_u, prep.present, folds=FOLDS, rng=_rng(seed, "lm-sup"),
                                     keep_maps=keep_maps)
    sup_h = probes.superposition_fit(H, blocks_h, prep.present, folds=FOLDS, rng=_rng(seed, "lm-sup"),
                                     keep_maps=False)
    out = {"relations": rows, "sup_u": sup_u, "sup_h": sup_h}
    if shuffle_too:
        blocks_s = [st["U"][r][shuf_labels[r]] for r in range(R)]
        out["sup_shuffled"] = probes.superposition_fit(H, blocks_s, prep.present, folds=FOLDS,
                                                       rng=_rng(seed, "lm-sup"), keep_maps=False)
    return out


def _interventions(model, prep: _Prepared, st: dict, j: int, layer: int, maps, seed: int, batch_size: int
                   ) -> dict:
    """Edit at ``layer`` (index ``j`` into the extracted layers), as the module docstring says."""
    rng = _rng(seed, "lm-intervene", layer)
    held = {}
    for test, A in maps:
        for i in test:
            held[int(i)] = A
    facts = prep.facts
    answers = st["answers"]
    idx, deltas, kind, target, base = [], [], [], [], []
    ratios = []
    for k, (i, r, _a) in enumerate(prep.fact_list):
        classes = prep.classes[r]
        if classes.size < 2:
            continue
        a_cls = prep.label[r, i]
        j_cls = int(rng.integers(classes.size - 1))
        j_cls += j_cls >= a_cls
        V = st["U"][r]
        delta = (V[j_cls] - V[a_cls]) @ held[i][r]
        ratios.append(float(np.linalg.norm(delta)) / max(1e-30, float(np.linalg.norm(st["prompt"][k, j]))))
        idx.append(k)
        deltas.append(delta)
        kind.append(-1)
        target.append(int(classes[j_cls]))
        base.append(int(answers[k]))
        for r2 in range(len(facts.relations)):
            k2 = prep.fact_row[r2, i]
            if r2 != r and k2 >= 0:
                idx.append(int(k2))
                deltas.append(delta)
                kind.append(r2)
                target.append(int(answers[k2]))
                base.append(int(answers[k2]))
    if not idx:
        return {"layer": layer, "edits": 0}
    sel = np.array(idx)
    batch = extract.Batch(prep.prompts.input_ids[sel], prep.prompts.attention_mask[sel],
                          prep.prompts.positions.numpy()[sel])
    _, edited = extract.run(model, batch, [layer], edits={layer: np.array(deltas)}, batch_size=batch_size)
    kind_a, target_a, base_a = np.array(kind), np.array(target), np.array(base)
    own = kind_a == -1
    per_rel = []
    fact_rel = np.array([prep.fact_list[k][1] for k in idx])
    for r, rel in enumerate(facts.relations):
        m = own & (fact_rel == r)
        if m.any():
            per_rel.append({"relation": rel.name, "edits": int(m.sum()),
                            "success": float(np.mean(edited[m] == target_a[m])),
                            "already": float(np.mean(base_a[m] == target_a[m]))})
    return {"layer": layer, "edits": int(own.sum()), "success": float(np.mean(edited[own] == target_a[own])),
            "already": float(np.mean(base_a[own] == target_a[own])),
            "stay": float(np.mean(edited[~own] == target_a[~own])) if (~own).any() else float("nan"),
            "others": int((~own).sum()), "delta_ratio_median": float(np.median(ratios)),
            "per_relation": per_rel}


def _summary_row(layer: int, res: dict) -> dict:
    rel = res["relations"]
    row = {"layer": layer,
           "decode_alone": float(np.mean([x["alone"]["accuracy"] for x in rel])),
           "decode_prompt": float(np.mean([x["prompt"]["accuracy"] for x in rel])),
           "baseline": float(np.mean([max(x["alone"]["chance"], x["alone"]["majority"]) for x in rel])),
           "r2_u": res["sup_u"]["r2"], "r2_h": res["sup_h"]["r2"], "presence_r2": res["sup_u"]["presence_r2"],
           "per_relation": [{"relation": x["relation"], "alone": x["alone"]["accuracy"],
                             "prompt": x["prompt"]["accuracy"], "chance": x["alone"]["chance"],
                             "majority": x["alone"]["majority"],
                             **({"shuffled": x["shuffled"]["accuracy"]} if "shuffled" in x else {})}
                            for x in rel],
           "sup_alphas_u": res["sup_u"]["alphas"]}
    if "sup_shuffled" in res:
        row["decode_shuffled"] = float(np.mean([x["shuffled"]["accuracy"] for x in rel]))
        row["r2_shuffled"] = res["sup_shuffled"]["r2"]
    return row


def probe_lm(loaded, facts: Facts, *, layers: Sequence[int] | None = None,
             intervene_layers: Sequence[int] | None = None, template: int = 0, seed: int = 0,
             random_control: bool = True, batch_size: int = 64,
             progress: Callable[[str], None] | None = None) -> dict:
    """Run every probe of the module docstring on ``loaded`` (a :class:`~.loader.LoadedModel`) and ``facts``.

    The probes per layer are :func:`.probes.decode_relation` and :func:`.probes.superposition_fit`
    (cross-fitted ridge, :data:`FOLDS` groups over subjects, each fit's strength by 5-fold cross-validation
    on its fit rows), the interventions those of the module docstring; the random-initialisation twin is
    probed the same way (without the shuffled control).

    Parameters
    ----------
    loaded : LoadedModel
        The model and tokenizer (:func:`.loader.load_model`).
    facts : Facts
        The facts (:func:`.facts.load_facts`).
    layers : sequence of int, optional
        Layers to probe (default every layer ``0..L``).
    intervene_layers : sequence of int, optional
        Layers to intervene at (default :func:`default_intervene_layers`); each must be probed.
    template : int
        Which prompt template of each relation (the last one when a relation has fewer).
    seed : int
        The run seed: every random choice draws from its ``"probes"`` stream under a key of its own, the
        random twin from its ``"init"`` stream.
    random_control : bool
        Also probe a randomly initialised model of the same configuration.
    batch_size : int
        Sequences per forward pass.
    progress : callable, optional
        Receives progress lines.

    Returns
    -------
    dict
        Plain data: ``layers`` (per-layer rows), ``random_layers``, ``relations`` (the model's own accuracy),
        ``interventions`` (and ``random_interventions``), ``verdict``, ``thresholds``, sizes and timings.

    Raises
    ------
    InputError
        A layer outside ``0..L``, an intervention layer not probed, a relation with fewer subjects than
        :data:`FOLDS`, or an attribute that tokenizes to nothing.
    """
    say = progress or (lambda _m: None)
    model = loaded.model
    L = int(model.config.num_hidden_layers)
    layers = list(range(L + 1)) if layers is None else sorted(set(int(x) for x in layers))
    bad = [x for x in layers if not 0 <= x <= L]
    if bad:
        raise InputError(f"--layers {bad}: this model has layers 0..{L}")
    intervene_layers = (default_intervene_layers(L) if intervene_layers is None
                        else sorted(set(intervene_layers)))
    missing = [x for x in intervene_layers if x not in layers]
    if missing:
        raise InputError(f"--intervene-layers {missing} are not among the probed --layers")
    for k, rel in enumerate(facts.relations):
        if len(facts.attributes[k]) < FOLDS:
            raise InputError(f"relation {rel.name!r} has {len(facts.attributes[k])} subjects; "
                             f"the held-out fits need at least {FOLDS}")
    t0 = time.perf_counter()
    prep = _Prepared(loaded.tokenizer, facts, template)
    say(f"probe-lm: {loaded.description}, {L} layers, width {model.config.hidden_size}; "
        f"{len(facts.subjects)} subjects, {len(facts.relations)} relations, {len(prep.fact_list)} facts")
    st = _extract(model, prep, layers, batch_size, say)
    own = []
    for r, rel in enumerate(facts.relations):
        rows = prep.fact_row[r][prep.present[:, r]]
        truth = prep.classes[r][prep.label[r][prep.present[:, r]]]
        own.append({"relation": rel.name, "facts": int(rows.size), "classes": int(prep.classes[r].size),
                    "model_accuracy": float(np.mean(st["answers"][rows] == truth))})
    layer_rows, maps = [], {}
    for j, layer in enumerate(layers):
        res = _layer_probes(prep, st, j, seed, shuffle_too=True, keep_maps=layer in intervene_layers)
        maps[layer] = res["sup_u"]["maps"]
        layer_rows.append(_summary_row(layer, res))
        say(f"  layer {layer}: decoding {layer_rows[-1]['decode_alone']:.3f}, R² "
            f"{layer_rows[-1]['r2_u']:.3f}")
    inter = []
    for layer in intervene_layers:
        inter.append(_interventions(model, prep, st, layers.index(layer), layer, maps[layer], seed,
                                    batch_size))
        say(f"  interventions at layer {layer}: success {inter[-1].get('success', float('nan')):.3f}, "
            f"stay {inter[-1].get('stay', float('nan')):.3f}")
    doc = {"model": loaded.description, "L": L, "width": int(model.config.hidden_size),
           "subjects": len(facts.subjects), "relations_n": len(facts.relations), "facts": len(prep.fact_list),
           "template": template, "folds": FOLDS, "layers": layer_rows, "relations": own,
           "interventions": inter,
           "thresholds": dict(THRESHOLDS), "intervene_layers": list(intervene_layers)}
    if random_control:
        say("random-init control: same configuration")
        twin = random_like(loaded, seed)
        st_r = _extract(twin.model, prep, layers, batch_size, say)
        rrows, rmaps = [], {}
        for j, layer in enumerate(layers):
            res = _layer_probes(prep, st_r, j, seed, shuffle_too=False, keep_maps=layer in intervene_layers)
            rmaps[layer] = res["sup_u"]["maps"]
            rrows.append(_summary_row(layer, res))
        doc["random_layers"] = rrows
        doc["random_relations_accuracy"] = float(np.mean(
            [np.mean(st_r["answers"][prep.fact_row[r][prep.present[:, r]]]
                     == prep.classes[r][prep.label[r][prep.present[:, r]]])
             for r in range(len(facts.relations))]))
        doc["random_interventions"] = [
            _interventions(twin.model, prep, st_r, layers.index(x), x, rmaps[x], seed, batch_size)
            for x in intervene_layers]
        del twin
    doc["verdict"] = verdict(doc)
    doc["seconds"] = time.perf_counter() - t0
    return doc


def verdict(doc: dict) -> dict:
    """Apply :data:`THRESHOLDS` to a result document (the rules of ``docs/lm.md``).

    Parameters
    ----------
    doc : dict
        The output of :func:`probe_lm` (without ``verdict``).

    Returns
    -------
    dict
        ``encoding_layers``, ``superposition_layers``, ``selective_layers``, ``decodable`` (per layer, as a
        string key, the decodable relations) and ``lines`` (the verdict sentences).
    """
    T = doc.get("thresholds", THRESHOLDS)
    rnd = {row["layer"]: row for row in doc.get("random_layers", [])}
    decodable, encoding, superposition = {}, [], []
    for row in doc["layers"]:
        rr = {x["relation"]: x for x in rnd[row["layer"]]["per_relation"]} if row["layer"] in rnd else {}
        ok = []
        for x in row["per_relation"]:
            floor = max(x["chance"], x["majority"], x.get("shuffled", 0.0),
                        rr.get(x["relation"], {}).get("alone", 0.0))
            if x["alone"] >= floor + T["decode_margin"]:
                ok.append(x["relation"])
        decodable[row["layer"]] = ok
        if len(ok) >= T["encoding_share"] * len(row["per_relation"]):
            encoding.append(row["layer"])
        best = max(row["r2_u"], row["r2_h"])
        floor = max(row.get("r2_shuffled", -np.inf), row["presence_r2"],
                    rnd.get(row["layer"], {}).get("r2_u", -np.inf),
                    rnd.get(row["layer"], {}).get("r2_h", -np.inf))
        if best >= T["superposition_r2"] and best >= floor + T["superposition_margin"]:
            superposition.append(row["layer"])
    selective = [x["layer"] for x in doc["interventions"] if x.get("edits") and
                 x["success"] >= T["intervention_success"] and
                 x["success"] - x["already"] >= T["intervention_gain"] and
                 x["stay"] >= T["intervention_stay"]]
    accs = {x["relation"]: x["model_accuracy"] for x in doc["relations"]}
    known = [r for r, a in accs.items() if a >= 0.5]

    def few(xs):
        return ", ".join(str(x) for x in xs) if xs else "none"

    most = max(decodable.items(), key=lambda kv: len(kv[1])) if decodable else (None, [])
    lines = [
        f"model's own recall (greedy first token): mean {np.mean(list(accs.values())):.2f} over "
        f"{len(accs)} relations; >= 0.5 in {len(known)} ({few(known)})",
        f"linear relational encoding (>= {T['encoding_share']:.0%} of relations decodable by "
        f"{T['decode_margin']:.2f} above every baseline): layers {few(encoding)}; "
        f"most relations decodable at layer {most[0]} ({len(most[1])} of {len(doc['relations'])}: "
        f"{few(most[1])})",
        f"superposition (held-out R² >= {T['superposition_r2']} and >= {T['superposition_margin']} above the "
        f"controls): layers {few(superposition)}",
        f"selective interventions (success >= {T['intervention_success']}, gain >= {T['intervention_gain']}, "
        f"stay >= {T['intervention_stay']}): layers {few(selective)} of {few(doc['intervene_layers'])}",
    ]
    return {"encoding_layers": encoding, "superposition_layers": superposition, "selective_layers": selective,
            "decodable": {str(k): v for k, v in decodable.items()}, "lines": lines}


def _f(x, nd=2) -> str:
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def render_text(doc: dict) -> list[str]:
    """The result as terminal lines: the per-layer table, the relations, the interventions, the verdict.

    Parameters
    ----------
    doc : dict
        A :func:`probe_lm` document (with its ``verdict``).

    Returns
    -------
    list of str
        The lines, without newlines.
    """
    rnd = {row["layer"]: row for row in doc.get("random_layers", [])}
    lines = [f"{doc['model']}: {doc['L']} layers, width {doc['width']}; {doc['subjects']} subjects, "
             f"{doc['relations_n']} relations, {doc['facts']} facts; {doc['folds']}-fold cross-fitting over "
             f"subjects, ridge strength by 5-fold CV on the fit rows",
             "decoding = mean over relations of held-out nearest-candidate accuracy "
             "(subject state alone / in the prompt); base = mean max(chance, majority); "
             "R² = held-out superposition fit on U (unembedding) or Hv (attribute state) vectors",
             f"{'layer':>5} {'dec':>5} {'prompt':>6} {'shuf':>5} {'base':>5} {'rand':>5} "
             f"{'R²U':>6} {'R²Hv':>6} {'R²shuf':>6} {'R²pres':>6} {'R²rand':>6} {'decodable':>9}"]
    dec = doc["verdict"]["decodable"]
    for row in doc["layers"]:
        r = rnd.get(row["layer"], {})
        lines.append(f"{row['layer']:>5} {_f(row['decode_alone']):>5} {_f(row['decode_prompt']):>6} "
                     f"{_f(row.get('decode_shuffled')):>5} {_f(row['baseline']):>5} "
                     f"{_f(r.get('decode_alone')):>5} "
                     f"{_f(row['r2_u']):>6} {_f(row['r2_h']):>6} {_f(row.get('r2_shuffled')):>6} "
                     f"{_f(row['presence_r2']):>6} {_f(r.get('r2_u')):>6} "
                     f"{len(dec[str(row['layer'])]):>4}/{len(row['per_relation'])}")
    best = max(doc["layers"], key=lambda row: row["decode_alone"])
    lines.append(f"per relation (model's greedy first token; decoding at layer {best['layer']}, "
                 f"the best mean):")
    for own, x in zip(doc["relations"], best["per_relation"]):
        lines.append(f"  {own['relation']:<26} facts {own['facts']:>4}  classes {own['classes']:>4}  model "
                     f"{_f(own['model_accuracy'])}  decode {_f(x['alone'])} (prompt {_f(x['prompt'])}, "
                     f"chance {_f(x['chance'], 3)}, majority {_f(x['majority'])}, "
                     f"shuffled {_f(x.get('shuffled'))})")
    if "random_relations_accuracy" in doc:
        lines.append(f"random-init model's own recall: {_f(doc['random_relations_accuracy'])}")
    for name, rows in (("interventions", doc["interventions"]), ("random-init interventions",
                                                                  doc.get("random_interventions", []))):
        for x in rows:
            if x.get("edits"):
                lines.append(f"{name} at layer {x['layer']}: {x['edits']} edits, "
                             f"answer -> j {_f(x['success'])} (already j {_f(x['already'])}), "
                             f"other relations unchanged {_f(x['stay'])} of {x['others']}; "
                             f"|Δ|/|h| median {_f(x['delta_ratio_median'], 3)}")
    lines.extend("verdict: " + v for v in doc["verdict"]["lines"])
    return lines


def stderr_progress(message: str) -> None:
    """Progress lines on stderr."""
    print(message, file=sys.stderr, flush=True)
