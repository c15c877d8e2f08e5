"""The ``probe-lm`` study: a real LM's hidden states on real facts, the literature's probes with their
controls and power, and a verdict against thresholds declared before the run (``docs/lm.md``; the constants
below are those).

States (one per layer ``ℓ = 0..L``, see :mod:`.extract`; every text is read after the one-token context
:data:`PREFIX`): the *subject state* ``h_s`` at the last token of the subject's name read alone (the same
tensor as in every prompt that starts with the subject: the model is causal), the *prompt state* at the last
subject token of a relation's prompt, the *final state* at the prompt's last token. A fact is **known** under
a template when greedy decoding after the prompt produces exactly the tokens of ``" " + attribute``
(:func:`.extract.continuation_match`). Attribute vectors ``U``: the unembedding row of the attribute's first
token; candidates sharing a first token are one class.

Measured (the model's forward passes; cached with ``cache``, see :func:`measure`):

- **Known facts** per relation and template (:data:`TEMPLATES` templates: ``template`` and the next one).
- **Logit lens** at the final token of each known fact's prompt, every layer: the model's final norm and head
  applied to the state; the share whose argmax is the attribute's first token.
- **Activation patching**, every layer, each template: a known fact's prompt state at the last subject token
  replaced by that of another known fact of the same relation with a different first answer token (one partner
  each, a seeded derangement); the share whose answer becomes the partner's.
- **LRE** (Hernandez et al. 2023) at :func:`default_lre_layers`, template ``template``, per relation with at
  least :data:`LRE_TRAIN` + :data:`LRE_MIN_TEST` known facts: ``W`` the mean over :data:`LRE_TRAIN` training
  facts of the Jacobian of the final state (layer L, before the final norm) with respect to the prompt state
  at layer ℓ, ``b`` the mean of ``o_i − J_i h_i``; ``LRE_β(h) = β W h + b``, decoded with the model's own norm
  and head. Jacobian-vector products by forward differences (relative step :data:`FD_STEP`). Faithfulness: the
  decoded token equals the model's answer, on the held-out known facts; over the vocabulary and among the
  relation's candidate tokens; β in :data:`BETAS` (β = 0: the bias alone, the control), chosen on the training
  facts.
- **Interventions** at :func:`default_intervene_layers`: for each known fact ``Δ ∝ A_r(U_j − U_a)`` (``A_r``
  relation r's block of the cross-fitted superposition map, the group in which the subject was held out; ``j``
  a drawn other class), scaled to ``|Δ| = dose·|h|`` for each dose of :data:`DOSES` and at its own fitted
  size; added at the subject position of the relation's prompt (success: the answer becomes ``j``) and of the
  subject's other known prompts (stay: their answers do not change).

Analysed (NumPy, from the measurement, :func:`analyse`): per layer and relation, decoding of the subject state
into attribute vectors ranked among all candidates (:func:`georecall.verify.experiments.power.decode_vectors`;
seen and unseen answers apart) with the shuffled-label and random-initialisation controls, the superposition
fit, and the power of both (a planted positive control of the same shape,
:mod:`georecall.verify.experiments.power`); and the planted controls of LRE, patching and the interventions
(:mod:`.controls`: the same estimators, through the same ``forward`` interface, on planted models of the run's
shape), which decide whether a failure of those probes is a negative verdict or "cannot tell"."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from georecall import __version__
from georecall.errors import InputError
from georecall.io import atomic_write
from georecall.theory import seeds
from georecall.verify.experiments import power
from georecall.verify.lm import controls, extract, probes
from georecall.verify.lm.facts import Facts
from georecall.verify.lm.loader import random_like

__all__ = ["BETAS", "DOSES", "THRESHOLDS", "analyse", "default_intervene_layers", "default_lre_layers",
           "measure", "probe_lm", "render_text", "verdict"]

# Declared before the runs they judge (docs/lm.md, "Thresholds"); changing them changes the verdict only.
# The first seven date from the first SmolLM2 run; the rest (power, known facts, LRE, patching) from issue
# 35's rewrite, before its run.
THRESHOLDS = {
    "decode_margin": power.DECODE_MARGIN,  # accuracy - max(chance, majority, shuffled, random model)
    "encoding_share": 0.5,  # share of the relations that can be told that are decodable
    "superposition_r2": 0.5,  # held-out R² of the superposition fit
    "superposition_margin": 0.10,  # ... above the shuffled-facts, presence-only and random-model R²
    "intervention_success": 0.5,  # answer becomes j
    "intervention_gain": 0.4,  # ... above how often the unedited answer is already j
    "intervention_stay": 0.8,  # the other relations' answers unchanged
    "power_required": power.POWER_REQUIRED,  # a negative verdict needs the planted control this often
    "named_snr": power.NAMED_SNR,  # ... at this planted signal-to-noise ratio (decoding)
    "superposition_snr": 3.0,  # ... and at this one (superposition: R² >= 0.5 needs SNR >= 1 even ideally)
    "told_min": 3,  # relations that can be told needed for a layer-level encoding verdict
    "lre_faithful": 0.5,  # held-out LRE faithfulness (vocabulary) ...
    "lre_gain": 0.2,  # ... above the bias alone
    "patch_moved": 0.5,  # patching moves the answer to the other subject's in this share of pairs
    # power of the probes of the model's own answer (issue 35, second part; declared before its run): a
    # negative LRE, patching or intervention verdict needs its planted control (verify/lm/controls.py)
    # passing the same rule in power_required of the draws at these strengths
    "lre_named": controls.LRE_NAMED,  # linear share of the planted readout's logits
    "patch_named": controls.PATCH_NAMED,  # share of the planted answer read at the patched position
    "intervention_snr": 3.0,  # planted superposition SNR (as superposition_snr)
}
FOLDS = 5
TEMPLATES = 2
LRE_TRAIN = 5
LRE_MIN_TEST = 3
BETAS = (0.0, 0.5, 1.0, 2.0, 4.0)
DOSES = (0.25, 1.0, 4.0)
FD_STEP = 1e-3
POWER_DRAWS = power.DRAWS  # plantings per SNR for every power estimate
# Every text read starts with this one-token context, so that no state is read at position 0: there decoder
# LMs keep an "attention sink" with massive activations (docs/lm_smollm2_run1_sink.txt).
PREFIX = "\n"
CACHE_FORMAT = "georecall-probe-lm-cache/2"


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


def default_lre_layers(L: int) -> list[int]:
    """The declared LRE layers: every third layer from 1 to L − 1 (the Jacobian is costly).

    Parameters
    ----------
    L : int
        The model's number of blocks.

    Returns
    -------
    list of int
    """
    return list(range(1, max(2, L), 3))


_KEYS = {"lm-shuffle": 1000, "lm-decode": 1001, "lm-sup": 1002, "lm-intervene": 1003, "lm-power": 1004,
         "lm-patch": 1005, "lm-lre": 1006, "lm-sup-power": 1007, "lm-lre-power": 1008, "lm-patch-power": 1009,
         "lm-iv-power": 1010}


def _rng(seed: int, name: str, *key: int) -> np.random.Generator:
    return seeds.rng(seed, "probes", _KEYS[name], *key)


class _Prepared:
    """Tokenized prompts (per template), the attributes' token classes, and the fact indices.

    Without a tokenizer (the analysis of a cached measurement), ``token_ids`` gives each relation's
    candidates' first tokens (the measurement's ``cand_ids{r}``) and there are no prompts."""

    def __init__(self, tokenizer, facts: Facts, templates: Sequence[int],
                 token_ids: Sequence[np.ndarray] | None = None):
        self.facts = facts
        self.fact_list = facts.facts()
        R = len(facts.relations)
        self.classes: list[np.ndarray] = []
        self.cand_class: list[dict[str, int]] = []
        self.cand_ids: list[np.ndarray] = []
        for r, rel in enumerate(facts.relations):
            ids = (extract.first_token_ids(tokenizer, [" " + c for c in rel.candidates]) if token_ids is None
                   else np.asarray(token_ids[r], dtype=np.int64))
            self.cand_ids.append(ids)
            uniq = np.unique(ids)
            self.classes.append(uniq)
            self.cand_class.append({c: int(np.searchsorted(uniq, t)) for c, t in zip(rel.candidates, ids)})
        self.templates = list(templates)
        self.prompt_texts: list[list[str]] = []
        self.prompts = []
        self.distinct: list[np.ndarray] = []  # per template: does the relation have this template of its own
        for tm in self.templates:
            texts, spans = [], []
            for i, r, _a in self.fact_list:
                ts = facts.relations[r].templates
                t = ts[min(tm, len(ts) - 1)]
                s = facts.subjects[i]
                start = t.index("{}")
                texts.append(PREFIX + t.replace("{}", s, 1))
                spans.append((len(PREFIX) + start, len(PREFIX) + start + len(s)))
            self.prompt_texts.append(texts)
            if tokenizer is not None:
                self.prompts.append(extract.encode(tokenizer, texts, spans))
            self.distinct.append(np.array([len(rel.templates) > tm for rel in facts.relations]))
        self.alone = (extract.encode(tokenizer, [PREFIX + s for s in facts.subjects],
                                     [(len(PREFIX), len(PREFIX) + len(s)) for s in facts.subjects])
                      if tokenizer is not None else None)
        n = len(facts.subjects)
        self.present = np.zeros((n, R), dtype=bool)
        self.label = np.zeros((R, n), dtype=np.int64)
        self.fact_row = -np.ones((R, n), dtype=np.int64)
        self.fact_rel = np.array([r for _i, r, _a in self.fact_list], dtype=np.int64)
        self.fact_subj = np.array([i for i, _r, _a in self.fact_list], dtype=np.int64)
        self.fact_token = np.zeros(len(self.fact_list), dtype=np.int64)
        for k, (i, r, a) in enumerate(self.fact_list):
            self.present[i, r] = True
            self.label[r, i] = self.cand_class[r][a]
            self.fact_row[r, i] = k
            self.fact_token[k] = self.classes[r][self.cand_class[r][a]]


def _derangement_pairs(known: np.ndarray, token: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """For each known fact of one relation a partner with a different answer token (or -1): a seeded shift."""
    out = -np.ones(known.size, dtype=np.int64)
    if known.size < 2:
        return out
    order = rng.permutation(known.size)
    for pos, a in enumerate(order):
        for step in range(1, known.size):
            b = order[(pos + step) % known.size]
            if token[known[b]] != token[known[a]]:
                out[a] = known[b]
                break
    return out


def measure(loaded, facts: Facts, *, layers: Sequence[int], lre_layers: Sequence[int],
            intervene_layers: Sequence[int], template: int, seed: int, random_control: bool,
            batch_size: int, say: Callable[[str], None]) -> dict:
    """Every forward pass of the study (module docstring): a dict of arrays and plain values.

    Parameters
    ----------
    loaded : LoadedModel
        The model and tokenizer.
    facts : Facts
        The facts.
    layers, lre_layers, intervene_layers : sequences of int
        Probed layers (states), LRE layers and intervention layers (both among ``layers``).
    template : int
        The first template; the next one is the second.
    seed : int
        The run seed (pairs, LRE training facts, intervention targets, the random twin).
    random_control : bool
        Also extract the subject states of a randomly initialised model of the same configuration.
    batch_size : int
        Sequences per forward pass.
    say : callable
        Progress lines.

    Returns
    -------
    dict
        Arrays (``alone``, ``prompt`` per template, ``answers``, ``known``, ``lens``, patching, LRE and
        intervention answers, ``U`` per relation) and sizes.
    """
    model = loaded.model
    L = int(model.config.num_hidden_layers)
    tmpls = [template + k for k in range(TEMPLATES)]
    prep = _Prepared(loaded.tokenizer, facts, tmpls)
    m: dict = {"L": L, "width": int(model.config.hidden_size), "layers": list(layers), "templates": tmpls,
               "lre_layers": list(lre_layers), "intervene_layers": list(intervene_layers)}
    for r, ids in enumerate(prep.cand_ids):  # the tokenizer's part of the analysis: a cached rerun needs no
        m[f"cand_ids{r}"] = ids              # tokenizer
    t0 = time.perf_counter()
    alone = prep.alone
    assert alone is not None  # a tokenizer was given
    m["alone"], _ = extract.run(model, alone, layers, batch_size=batch_size)
    Uw = model.get_output_embeddings().weight.detach().float().numpy()
    for r in range(len(facts.relations)):
        m[f"U{r}"] = Uw[prep.classes[r]].astype(np.float64)
    answers_tpl = [(" " + a) for _i, _r, a in prep.fact_list]
    nf = len(prep.fact_list)
    for t, _tm in enumerate(tmpls):
        m[f"known{t}"], m[f"object_tokens{t}"] = extract.continuation_match(
            model, loaded.tokenizer, prep.prompt_texts[t], answers_tpl, batch_size=batch_size)
        kn = np.flatnonzero(m[f"known{t}"])
        # template 0: every prompt (the model's own first-token answers); later templates: the known ones only
        rows = np.arange(nf) if t == 0 else kn
        states = np.zeros((nf, len(layers), m["width"]), dtype=np.float32)
        answers = -np.ones(nf, dtype=np.int64)
        if rows.size:
            states[rows], answers[rows] = extract.run(model, extract.subset(prep.prompts[t], rows), layers,
                                                      batch_size=batch_size)
        m[f"prompt{t}"], m[f"answers{t}"] = states, answers
        # the final token's states, for the logit lens (and LRE's base outputs): known facts only
        m[f"lens{t}"] = -np.ones((nf, len(layers)), dtype=np.int64)
        if t == 0:
            m["final0"] = np.zeros((nf, m["width"]), dtype=np.float32)
        if kn.size:
            last = extract.subset(prep.prompts[t], kn, prep.prompts[t].last.numpy()[kn])
            final, _ = extract.run(model, last, sorted(set(layers) | {L}), batch_size=batch_size)
            at = sorted(set(layers) | {L})
            m[f"lens{t}"][kn] = extract.lens(model, final[:, [at.index(x) for x in layers]])
            if t == 0:
                m["final0"][kn] = final[:, at.index(L)]
        say(f"  template {t}: {kn.size} of {nf} facts known ({time.perf_counter() - t0:.0f} s)")
    # activation patching: every probed layer for the first template, the LRE layers for the others
    for t, _tm in enumerate(tmpls):
        known = m[f"known{t}"]
        partner = -np.ones(nf, dtype=np.int64)
        for r in range(len(facts.relations)):
            kr = np.flatnonzero(known & (prep.fact_rel == r))
            partner[kr] = _derangement_pairs(kr, prep.fact_token, _rng(seed, "lm-patch", t, r))
        src = np.flatnonzero(partner >= 0)
        m[f"patch_src{t}"], m[f"patch_dst{t}"] = src, partner[src]
        p_layers = list(layers) if t == 0 else [x for x in layers if x in lre_layers]
        m[f"patch_layers{t}"] = np.array(p_layers, dtype=np.int64)
        out = np.zeros((src.size, len(p_layers)), dtype=np.int64)
        if src.size:
            sub = extract.subset(prep.prompts[t], src)
            # each layer's pass starts at that layer, from the unedited streams of these prompts
            streams = extract.Streams(model, sub, p_layers, batch_size)
            for q, layer in enumerate(p_layers):

                def forward(rows, deltas, layer=layer):  # rows is src: ``sub`` holds their prompts
                    return extract.run(model, sub, [], edits={layer: deltas}, batch_size=batch_size,
                                       streams=streams)[1]

                out[:, q] = controls.patch_answers(forward, m[f"prompt{t}"][:, layers.index(layer)], src,
                                                   partner[src])
        m[f"patched{t}"] = out
        say(f"  patching, template {t}: {src.size} pairs at {len(p_layers)} layers "
            f"({time.perf_counter() - t0:.0f} s)")
    _measure_lre(model, prep, m, layers, lre_layers, seed, batch_size, say, t0)
    _measure_interventions(model, prep, m, layers, intervene_layers, seed, batch_size)
    say(f"  interventions at layers {list(intervene_layers)} ({time.perf_counter() - t0:.0f} s)")
    if random_control:
        twin = random_like(loaded, seed)
        m["alone_random"], _ = extract.run(twin.model, alone, layers, batch_size=batch_size)
        del twin
        say(f"  random-init twin ({time.perf_counter() - t0:.0f} s)")
    m["measure_seconds"] = time.perf_counter() - t0
    return m


def _measure_lre(model, prep: _Prepared, m: dict, layers, lre_layers, seed, batch_size, say, t0) -> None:
    L = m["L"]
    known = m["known0"]
    prompts = prep.prompts[0]
    last = prompts.last.numpy()
    subj_pos = prompts.positions.numpy()
    for r, _rel in enumerate(prep.facts.relations):
        kr = np.flatnonzero(known & (prep.fact_rel == r))
        if kr.size < LRE_TRAIN + LRE_MIN_TEST:
            continue
        kr = kr[_rng(seed, "lm-lre", r).permutation(kr.size)]
        train = kr[:LRE_TRAIN]
        m[f"lre_facts{r}"], m[f"lre_train{r}"] = kr, train
        cand = prep.classes[r]
        pred = np.zeros((len(lre_layers), len(BETAS), kr.size), dtype=np.int64)
        pred_c = np.zeros_like(pred)
        # the training prompts, once per fact scored (controls.lre_outputs' rows), and their unedited streams:
        # each layer's passes start at that layer
        rows_fd = np.repeat(train, kr.size)
        sub = extract.subset(prompts, rows_fd, last[rows_fd])
        streams = extract.Streams(model, sub, lre_layers, batch_size)
        for jl, layer in enumerate(lre_layers):
            j = layers.index(layer)

            def forward(rows, deltas, layer=layer):
                same = np.array_equal(rows, rows_fd)
                here = sub if same else extract.subset(prompts, rows, last[rows])
                o, _ = extract.run(model, here, [L], edits={layer: deltas}, batch_size=batch_size,
                                   edit_positions=subj_pos[rows], streams=streams if same else None)
                return o[:, 0]

            out = controls.lre_outputs(forward, m["prompt0"][:, j], m["final0"], kr, train, BETAS, FD_STEP)
            pred[jl] = extract.lens(model, out)
            pred_c[jl] = extract.lens_within(model, out, cand)
        m[f"lre_pred{r}"], m[f"lre_pred_cand{r}"] = pred, pred_c
    say(f"  LRE at layers {list(lre_layers)} ({time.perf_counter() - t0:.0f} s)")


def _edit_facts(prep: _Prepared, known: np.ndarray) -> tuple[list[tuple[int, int, int]], list[list[int]]]:
    """The known facts to edit, as (fact, relation, subject), and per fact the subject's other known facts."""
    facts, others = [], []
    for k in np.flatnonzero(known):
        r, i = int(prep.fact_rel[k]), int(prep.fact_subj[k])
        facts.append((int(k), r, i))
        others.append([int(x) for x in prep.fact_row[:, i] if x >= 0 and x != k and known[x]])
    return facts, others


def _measure_interventions(model, prep: _Prepared, m: dict, layers, intervene_layers, seed,
                           batch_size) -> None:
    known = m["known0"]
    R = len(prep.facts.relations)
    facts, others = _edit_facts(prep, known)
    Us = [m[f"U{r}"] for r in range(R)]
    for layer in intervene_layers:
        j = layers.index(layer)
        H = m["alone"][:, j].astype(np.float64)
        blocks = [Us[r][prep.label[r]] for r in range(R)]
        sup = probes.superposition_fit(H, blocks, prep.present, folds=FOLDS, rng=_rng(seed, "lm-sup"),
                                       keep_maps=True)
        h_norm = np.linalg.norm(m["prompt0"][:, j].astype(np.float64), axis=1)
        ed = controls.intervention_edits(sup["maps"], Us, prep.label, facts, h_norm, others,
                                         _rng(seed, "lm-intervene", layer))
        own = ed["own"]
        m[f"iv_own{layer}"] = own
        m[f"iv_target{layer}"] = np.array([int(prep.classes[prep.fact_rel[k]][c])
                                           for k, c in zip(own, ed["target"])], dtype=np.int64)
        m[f"iv_ratio{layer}"] = ed["ratio"]
        m[f"iv_other{layer}"], m[f"iv_owner{layer}"] = ed["others"], ed["owner"]
        if not own.size:
            continue
        doses = list(DOSES) + ["fitted"]
        res = None
        for q, dose in enumerate(doses):
            rows, delta = controls.intervention_deltas(ed, dose)
            if res is None:  # the same prompts at every dose: their streams once, each pass from there
                sub = extract.subset(prep.prompts[0], rows)
                streams = extract.Streams(model, sub, [layer], batch_size)
                res = np.zeros((len(doses), rows.size), dtype=np.int64)
            _, res[q] = extract.run(model, sub, [], edits={layer: delta}, batch_size=batch_size,
                                    streams=streams)
        m[f"iv_answers{layer}"] = res


# ------------------------------------------------------------------------------------------- analysis


def _frac(x) -> float | None:
    x = np.asarray(x)
    return float(x.mean()) if x.size else None


def analyse(m: dict, facts: Facts, tokenizer_classes: list[np.ndarray] | None = None, *, seed: int,
            prep: _Prepared, workers: int | None = None) -> dict:
    """The probes, controls, power and verdict from a :func:`measure` dict (NumPy only).

    Parameters
    ----------
    m : dict
        :func:`measure`'s output (or the cache's).
    facts : Facts
        The facts measured.
    tokenizer_classes : unused
    seed : int
        The run seed (folds, shuffles, plantings).
    prep : _Prepared
        The prepared prompts (labels, classes, fact indices).
    workers : int, optional
        Threads (default two where two CPUs are available; the document does not depend on it).

    Returns
    -------
    dict
        Plain data (the ``--json`` document's body).
    """
    R = len(facts.relations)
    layers = m["layers"]
    width = m["width"]
    Us = [m[f"U{r}"] for r in range(R)]
    subj = [np.flatnonzero(prep.present[:, r]) for r in range(R)]
    groups = [probes.folds_of(s.size, FOLDS, _rng(seed, "lm-decode", r)) for r, s in enumerate(subj)]
    shuf = probes.shuffled(list(prep.label), prep.present, _rng(seed, "lm-shuffle"))
    # decoding and superposition per layer. Every layer (and the random-init model's) is fitted with the same
    # folds, drawn afresh from each probe's own stream, so the layers are fitted together: per relation one
    # batch of 2 × layers problems (the real labels and their shuffled control), per design one Gram matrix.
    # Each probe draws from its own stream, so the two halves below are independent: they run in two threads
    # where two CPUs are available (the same document either way).
    nl = len(layers)
    alone = m["alone"].astype(np.float64)
    alone_r = m["alone_random"].astype(np.float64) if "alone_random" in m else None

    def decoding() -> tuple:
        pw = power.decode_power(list(prep.label), Us, prep.present, width, groups,
                                rng=_rng(seed, "lm-power"), draws=POWER_DRAWS)
        decoded = []
        for r in range(R):
            stack = [alone[subj[r], j] for j in range(nl)]
            if alone_r is not None:
                stack += [alone_r[subj[r], j] for j in range(nl)]
            decoded.append(power.decode_vectors_stack(np.stack(stack), [prep.label[r, subj[r]],
                                                                        shuf[r][subj[r]]], Us[r], groups[r],
                                                      rng=_rng(seed, "lm-decode", r)))
        return pw, decoded

    def the_rest() -> tuple:
        blocks = [Us[r][prep.label[r]] for r in range(R)]
        Hs = [alone[:, j] for j in range(nl)] + ([alone_r[:, j] for j in range(nl)]
                                                 if alone_r is not None else [])
        sup_all = probes.superposition_fit_many(Hs, blocks, prep.present, folds=FOLDS,
                                                rng=_rng(seed, "lm-sup"))
        sup_sh = probes.superposition_fit_many(Hs[:nl], [Us[r][shuf[r]] for r in range(R)], prep.present,
                                               folds=FOLDS, rng=_rng(seed, "lm-sup"))
        return (sup_all, sup_sh, _planted_superposition(m, prep, Us, width, seed),
                _patch_power(m, prep, seed), _lre_rows(m, prep, facts, seed))

    (pw, decoded), (sup_all, sup_sh, (sup_power, iv_power), patch_power, lre) = _in_parallel(
        [decoding, the_rest], _workers() if workers is None else workers)
    relations = []
    for r, rel in enumerate(facts.relations):
        rows = prep.fact_row[r][subj[r]]
        row = {"relation": rel.name, "facts": int(rows.size), "classes": int(prep.classes[r].size),
               "first_token_accuracy": float(np.mean(m["answers0"][rows] == prep.fact_token[rows])),
               "known": [int(m[f"known{t}"][rows].sum()) for t in range(len(m["templates"]))],
               "template_distinct": [bool(prep.distinct[t][r]) for t in range(len(m["templates"]))],
               "power": pw[r]}
        if "answers_random" in m:
            row["random_first_token_accuracy"] = float(np.mean(m["answers_random"][rows]
                                                               == prep.fact_token[rows]))
        relations.append(row)
    layer_rows = []
    for j, layer in enumerate(layers):
        per = []
        for r in range(R):
            res, sh = decoded[r][j]
            x: dict[str, Any] = {"relation": facts.relations[r].name}
            x.update({k: res[k] for k in ("n", "classes", "chance", "accuracy", "majority", "unseen",
                                     "accuracy_seen", "accuracy_unseen")})
            x["shuffled"] = sh["accuracy"]
            floor = max(res["chance"], res["majority"], sh["accuracy"])
            if alone_r is not None:
                x["random_model"] = decoded[r][nl + j][0]["accuracy"]
                floor = max(floor, x["random_model"])
            x["decodable"] = bool(res["accuracy"] >= floor + THRESHOLDS["decode_margin"])
            word, why = power.verdict_word(x["decodable"], pw[r], unseen=res["unseen"], n=res["n"])
            x["verdict"], x["reason"] = word, why
            per.append(x)
        sup, sup_s = sup_all[j], sup_sh[j]
        srow = {"r2": sup["r2"], "presence_r2": sup["presence_r2"], "shuffled_r2": sup_s["r2"]}
        if alone_r is not None:
            srow["random_r2"] = sup_all[nl + j]["r2"]
        layer_rows.append({"layer": layer, "per_relation": per, "superposition": srow,
                           "decode_mean": float(np.mean([x["accuracy"] for x in per]))})
    # the model's own probes
    lens, patch = [], []
    for t in range(len(m["templates"])):
        known = m[f"known{t}"]
        lens.append([_frac(m[f"lens{t}"][known, j] == prep.fact_token[known]) for j in range(len(layers))])
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
    inter = _intervention_rows(m, prep, facts)
    doc = {"L": m["L"], "width": width, "subjects": len(facts.subjects), "relations_n": R,
           "facts": len(prep.fact_list), "templates": m["templates"], "folds": FOLDS, "layers": layer_rows,
           "relations": relations, "superposition_power": sup_power, "logit_lens": lens, "patching": patch,
           "lre": lre, "lre_layers": m["lre_layers"], "betas": list(BETAS), "interventions": inter,
           "intervene_layers": m["intervene_layers"], "doses": list(DOSES) + ["fitted"],
           "intervention_power": iv_power, "lre_strengths": list(controls.LRE_STRENGTHS),
           "patch_strengths": list(controls.PATCH_STRENGTHS),
           "thresholds": dict(THRESHOLDS), "snrs": list(power.SNRS), "draws": POWER_DRAWS,
           "layer_list": list(layers)}
    doc["verdict"] = verdict(doc)
    return doc


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


def _patch_power(m: dict, prep: _Prepared, seed: int) -> list[list[dict]]:
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
                    rng=_rng(seed, "lm-patch-power", t, layer), draws=POWER_DRAWS))
        out.append(rows)
    return out


def _lre_rows(m: dict, prep: _Prepared, facts: Facts, seed: int) -> list[dict]:
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
                rng=_rng(seed, "lm-lre-power", r, layer), draws=POWER_DRAWS)
            rows.append(row)
        out.append({"relation": rel.name, "known": k_known, "told": True, "train": LRE_TRAIN,
                    "held_out": int((~is_train).sum()), "layers": rows})
    return out


def _planted_superposition(m: dict, prep: _Prepared, Us, width: int, seed: int) -> tuple[dict, dict]:
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
    facts, others = _edit_facts(prep, m["known0"])

    def sup_rule(fit: dict) -> bool:
        return bool(fit["r2"] >= T["superposition_r2"]
                    and fit["r2"] >= fit["presence_r2"] + T["superposition_margin"])

    iv = controls.intervention_power(
        list(prep.label), Us, prep.present, width, facts, others, prep.fact_rel, prep.fact_subj, FOLDS,
        list(DOSES) + ["fitted"],
        lambda sc, already: controls.selective(sc, already, T["intervention_success"], T["intervention_gain"],
                                               T["intervention_stay"]),
        rng=_rng(seed, "lm-iv-power"), superposition_rule=sup_rule, negative_snr=T["intervention_snr"],
        draws=POWER_DRAWS)
    sup = {"snrs": list(iv["snrs"]), "positive": iv.pop("superposition"),
           "negative": [iv["superposition_negative"] if x == T["superposition_snr"] == T["intervention_snr"]
                        else None for x in iv["snrs"]], "draws": iv["draws"]}
    iv.pop("superposition_negative")
    return sup, iv


def _intervention_rows(m: dict, prep: _Prepared, facts: Facts) -> list[dict]:
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


def verdict(doc: dict) -> dict:
    """Apply :data:`THRESHOLDS` to an :func:`analyse` document (the rules of ``docs/lm.md``).

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
    enc: dict = {}
    decodable: dict[str, list[int]] = {}
    told_by_rel: dict = {}
    not_dec: dict[str, list[int]] = {}
    for row in doc["layers"]:
        told = [x for x in row["per_relation"] if x["verdict"] != "cannot tell"]
        yes = [x for x in row["per_relation"] if x["verdict"] == "decodable"]
        for x in yes:
            decodable.setdefault(x["relation"], []).append(row["layer"])
        for x in row["per_relation"]:
            if x["verdict"] == "not decodable":
                not_dec.setdefault(x["relation"], []).append(row["layer"])
        if len(told) < T["told_min"]:
            enc[row["layer"]] = "cannot tell"
        else:
            enc[row["layer"]] = "yes" if len(yes) >= T["encoding_share"] * len(told) else "no"
        told_by_rel[row["layer"]] = len(told)
    sp = doc["superposition_power"]
    sup_rate = sp["positive"][sp["snrs"].index(T["superposition_snr"])]
    sup_layers = []
    for row in doc["layers"]:
        s = row["superposition"]
        floor = max(s["presence_r2"], s["shuffled_r2"], s.get("random_r2", -np.inf))
        if s["r2"] >= T["superposition_r2"] and s["r2"] >= floor + T["superposition_margin"]:
            sup_layers.append(row["layer"])
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
            rate = _rate_at(y["power"], "strengths", T["lre_named"])
            if controls.lre_rule(y, T["lre_faithful"], T["lre_gain"]):
                words[y["layer"]] = "faithful"
            elif not controls.lre_rule(y, T["lre_faithful"], T["lre_gain"], candidates=True) and rate >= req:
                words[y["layer"]] = "not faithful"
            else:
                words[y["layer"]] = "cannot tell"
        lre_words[x["relation"]] = words
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
            elif p["power"] and _rate_at(p["power"][j], "strengths", T["patch_named"]) >= req:
                words[layer] = "does not move"
            else:
                words[layer] = "cannot tell"
        patch_words.append(words)
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

    def few(xs):
        return ", ".join(str(x) for x in xs) if xs else "none"

    yes_layers = [k for k, v in enc.items() if v == "yes"]
    no_layers = [k for k, v in enc.items() if v == "no"]
    ct_layers = [k for k, v in enc.items() if v == "cannot tell"]
    known = [(x["relation"], x["known"][0], x["facts"]) for x in doc["relations"]]
    cannot = [x["relation"] for x in doc["relations"] if all(
        y["verdict"] == "cannot tell" for row in doc["layers"] for y in row["per_relation"]
        if y["relation"] == x["relation"])]
    lines = [
        f"known facts (greedy answer = the whole attribute), template {doc['templates'][0]}: "
        f"{sum(k for _r, k, _n in known)} of {sum(n for _r, _k, n in known)}; per relation "
        + ", ".join(f"{r} {k}/{n}" for r, k, n in known),
        f"decoding into attribute vectors (accuracy >= {T['decode_margin']:.2f} above every control): "
        f"decodable somewhere: {few(sorted(decodable))}; not decodable with power "
        f">= {T['power_required']} at SNR {T['named_snr']:g}: {few(sorted(set(not_dec) - set(decodable)))}; "
        f"cannot tell at any layer (the planted control is not detected): {few(cannot)}",
        f"linear relational encoding (>= {T['encoding_share']:.0%} of the relations that can be told, at "
        f"least {T['told_min']} told): yes at layers {few(yes_layers)}; no at {few(no_layers)}; cannot tell "
        f"at {few(ct_layers)}",
    ]
    if sup_layers:
        lines.append(f"superposition (held-out R² >= {T['superposition_r2']}, >= "
                     f"{T['superposition_margin']} above the controls): layers {few(sup_layers)}")
    elif sup_rate >= T["power_required"]:
        lines.append(f"superposition: no layer (a planted superposition at SNR {T['superposition_snr']:g} of "
                     f"this shape is detected in {sup_rate:.2f} of the draws)")
    else:
        lines.append(f"superposition: no layer passes; cannot tell (the planted control at SNR "
                     f"{T['superposition_snr']:g} is detected in only {sup_rate:.2f} of the draws)")
    def by_word(words: dict, word: str) -> list:
        return [k for k, v in words.items() if v == word]

    lre_parts = []
    for rel, words in lre_words.items():
        part = f"{rel}: faithful at {few(by_word(words, 'faithful'))}"
        if by_word(words, "not faithful"):
            part += f", not faithful at {few(by_word(words, 'not faithful'))}"
        if by_word(words, "cannot tell"):
            part += f", cannot tell at {few(by_word(words, 'cannot tell'))}"
        lre_parts.append(part)
    lines.append(f"LRE faithfulness (held-out known facts >= {T['lre_faithful']}, >= {T['lre_gain']} above "
                 f"the bias alone; 'not faithful' also among the candidates, where a planted readout with "
                 f"linear share {T['lre_named']:g} passes in >= {req} of the draws), per relation with "
                 f"enough known facts ({len(lre_words)}): " + ("; ".join(lre_parts) if lre_parts else "none"))
    for t, words in enumerate(patch_words):
        lines.append(f"activation patching, template {doc['templates'][t]} ({doc['patching'][t]['pairs']} "
                     f"pairs; the answer follows the other subject in >= {T['patch_moved']} of pairs): moves "
                     f"at layers {few(by_word(words, 'moves'))}; does not move (a planted readout with share "
                     f"{T['patch_named']:g} at the patched position moves in >= {req} of the draws) at "
                     f"{few(by_word(words, 'does not move'))}; cannot tell at "
                     f"{few(by_word(words, 'cannot tell'))}")
    lines.append(f"selective interventions (success >= {T['intervention_success']}, gain >= "
                 f"{T['intervention_gain']}, stay >= {T['intervention_stay']}) at (layer, dose): "
                 f"{few(selective)}; not selective where the estimator on a planted superposition at SNR "
                 f"{T['intervention_snr']:g} is selective in >= {req} of the draws (per dose: "
                 + ", ".join(f"{d} {v:.2f}" for d, v in iv_rate.items()) + "): "
                 + few(by_word(iv_words, "not selective")) + "; cannot tell at "
                 + few(by_word(iv_words, "cannot tell")))
    return {"encoding": {str(k): v for k, v in enc.items()}, "decodable": decodable,
            "superposition_layers": sup_layers, "superposition_power": sup_rate, "lre_faithful": lre_ok,
            "lre": {k: {str(a): b for a, b in v.items()} for k, v in lre_words.items()},
            "patch_layers": patch_layers,
            "patching": [{str(a): b for a, b in w.items()} for w in patch_words],
            "selective": [list(x) for x in selective], "interventions": iv_words,
            "intervention_power": iv_rate, "lines": lines}


def _rate_at(pw: dict, key: str, strength: float) -> float:
    """A control's detection rate at a declared strength (0 where that strength was not planted)."""
    xs = [float(v) for v in pw[key]]
    return float(pw["rate"][xs.index(float(strength))]) if float(strength) in xs else 0.0


def _cache_key(loaded, facts: Facts, params: dict) -> str:
    h = hashlib.sha256(json.dumps(facts.to_json(), sort_keys=True).encode()).hexdigest()
    return json.dumps({"format": CACHE_FORMAT, "model": loaded.source, "facts": h, "version": __version__,
                       **params}, sort_keys=True)


def _load_cache(path: str, key: str) -> dict | None:
    import os
    if not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if str(z["key"]) != key:
                return None
            out = {k: z[k] for k in z.files if k not in ("key", "meta")}
            out.update(json.loads(str(z["meta"])))
            return out
    except (OSError, ValueError, KeyError):
        return None


def _save_cache(path: str, key: str, m: dict) -> None:
    arrays = {k: v for k, v in m.items() if isinstance(v, np.ndarray)}
    meta = {k: v for k, v in m.items() if not isinstance(v, np.ndarray)}
    arrays["key"] = np.array(key)
    arrays["meta"] = np.array(json.dumps(meta))
    atomic_write(path, lambda f: np.savez_compressed(f, **arrays))  # type: ignore[arg-type]


def probe_lm(loaded, facts: Facts, *, layers: Sequence[int] | None = None,
             intervene_layers: Sequence[int] | None = None, lre_layers: Sequence[int] | None = None,
             template: int = 0, seed: int = 0, random_control: bool = True, batch_size: int = 64,
             cache: str | None = None, progress: Callable[[str], None] | None = None) -> dict:
    """Measure (or read the cache), then analyse: the ``probe-lm`` document (module docstring).

    Parameters
    ----------
    loaded : LoadedModel
        The model and tokenizer (:func:`.loader.load_model`), or a light load (:func:`.loader.load_light`:
        the weights are loaded only when the cache cannot be used).
    facts : Facts
        The facts (:func:`.facts.load_facts`).
    layers : sequence of int, optional
        Layers to probe (default every layer ``0..L``).
    intervene_layers, lre_layers : sequences of int, optional
        Intervention and LRE layers (defaults :func:`default_intervene_layers`, :func:`default_lre_layers`);
        each must be probed.
    template : int
        The first prompt template of each relation (the last one when a relation has fewer); the second is
        the next.
    seed : int
        The run seed: every random choice draws from its ``"probes"`` stream under a key of its own.
    random_control : bool
        Also probe a randomly initialised model of the same configuration.
    batch_size : int
        Sequences per forward pass.
    cache : str, optional
        An ``.npz`` holding the measurement: read when its key (model, facts, version and every parameter
        above) matches, else written after measuring.
    progress : callable, optional
        Receives progress lines.

    Returns
    -------
    dict
        Plain data (:func:`analyse`), with ``model``, ``seconds`` and ``cached``.

    Raises
    ------
    InputError
        A layer outside ``0..L``, an intervention or LRE layer not probed, a relation with fewer subjects than
        :data:`FOLDS`, or an attribute that tokenizes to nothing.
    """
    say = progress or (lambda _m: None)
    config = loaded.model.config if loaded.model is not None else loaded.config
    L = int(config.num_hidden_layers)
    layers = list(range(L + 1)) if layers is None else sorted(set(int(x) for x in layers))
    bad = [x for x in layers if not 0 <= x <= L]
    if bad:
        raise InputError(f"--layers {bad}: this model has layers 0..{L}")
    intervene_layers = (default_intervene_layers(L) if intervene_layers is None
                        else sorted(set(intervene_layers)))
    lre_layers = default_lre_layers(L) if lre_layers is None else sorted(set(lre_layers))
    for name, xs in (("--intervene-layers", intervene_layers), ("--lre-layers", lre_layers)):
        missing = [x for x in xs if x not in layers]
        if missing:
            raise InputError(f"{name} {missing} are not among the probed --layers")
    for k, rel in enumerate(facts.relations):
        if len(facts.attributes[k]) < FOLDS:
            raise InputError(f"relation {rel.name!r} has {len(facts.attributes[k])} subjects; "
                             f"the held-out fits need at least {FOLDS}")
    t0 = time.perf_counter()
    params = {"layers": layers, "intervene_layers": intervene_layers, "lre_layers": lre_layers,
              "template": template, "seed": seed, "random_control": random_control}
    key = _cache_key(loaded, facts, params)
    m = _load_cache(cache, key) if cache else None
    cached = m is not None
    say(f"probe-lm: {loaded.description}, {L} layers, width {config.hidden_size}; "
        f"{len(facts.subjects)} subjects, {len(facts.relations)} relations, {len(facts.facts())} facts"
        + ("; measurement read from the cache" if cached else ""))
    if m is None:
        if loaded.model is None:  # a light load (loader.load_light) and no usable cache: the weights now
            loaded = loaded.full()
        m = measure(loaded, facts, layers=layers, lre_layers=lre_layers, intervene_layers=intervene_layers,
                    template=template, seed=seed, random_control=random_control, batch_size=batch_size,
                    say=say)
        if cache:
            _save_cache(cache, key, m)
    templates = [template + k for k in range(TEMPLATES)]
    R = len(facts.relations)
    if all(f"cand_ids{r}" in m for r in range(R)):  # no tokenizer needed (a cache written by measure)
        prep = _Prepared(None, facts, templates, token_ids=[m[f"cand_ids{r}"] for r in range(R)])
    else:
        tokenizer = loaded.get_tokenizer() if hasattr(loaded, "get_tokenizer") else loaded.tokenizer
        prep = _Prepared(tokenizer, facts, templates)
    t1 = time.perf_counter()
    doc = analyse(m, facts, seed=seed, prep=prep)
    doc["model"] = loaded.description
    doc["cached"] = cached
    doc["measure_seconds"] = float(m.get("measure_seconds", 0.0))
    doc["analysis_seconds"] = time.perf_counter() - t1
    doc["seconds"] = time.perf_counter() - t0
    say(f"  analysis {doc['analysis_seconds']:.0f} s")
    return doc


def _f(x, nd=2) -> str:
    return "—" if x is None or (isinstance(x, float) and not np.isfinite(x)) else f"{x:.{nd}f}"


def render_text(doc: dict) -> list[str]:
    """The result as terminal lines: per relation, per layer, interventions, the verdict.

    Parameters
    ----------
    doc : dict
        A :func:`probe_lm` document (with its ``verdict``).

    Returns
    -------
    list of str
        The lines, without newlines.
    """
    T = doc["thresholds"]
    snr_i = doc["snrs"].index(T["named_snr"])
    lines = [f"{doc['model']}: {doc['L']} layers, width {doc['width']}; {doc['subjects']} subjects, "
             f"{doc['relations_n']} relations, {doc['facts']} facts; templates {doc['templates']}; "
             f"{doc['folds']}-fold cross-fitting over subjects, ridge strength by 5-fold CV on the fit rows",
             "decoding: subject state -> attribute vector (ridge), ranked by cosine among all candidates; "
             f"power = detection rate of a planted mechanism of the same shape at SNR {T['named_snr']:g} "
             f"({doc['draws']} draws; negative control: the same with shuffled labels)"]
    best: dict[str, tuple] = {}
    for row in doc["layers"]:
        for x in row["per_relation"]:
            if x["relation"] not in best or x["accuracy"] > best[x["relation"]][1]["accuracy"]:
                best[x["relation"]] = (row["layer"], x)
    lines.append(f"  {'relation':<26} {'facts':>5} {'known':>9} {'1st':>4} {'cls':>4} {'unseen':>6} "
                 f"{'chance':>6} {'layer':>5} {'acc':>4} {'seen':>4} {'unsn':>4} {'ctrl':>4} {'power':>5} "
                 f"{'neg':>4}  verdict (best layer)")
    for rel in doc["relations"]:
        layer, x = best[rel["relation"]]
        ctrl = max(x["majority"], x["shuffled"], x.get("random_model", 0.0))
        known = "/".join(str(k) for k in rel["known"])
        lines.append(f"  {rel['relation']:<26} {rel['facts']:>5} {known:>9} "
                     f"{_f(rel['first_token_accuracy']):>4} {rel['classes']:>4} {x['unseen']:>3}/{x['n']:<3}"
                     f"{_f(x['chance'], 3):>6} {layer:>5} {_f(x['accuracy']):>4} {_f(x['accuracy_seen']):>4} "
                     f"{_f(x['accuracy_unseen']):>4} {_f(ctrl):>4} {_f(rel['power']['positive'][snr_i]):>5} "
                     f"{_f(rel['power']['negative'][snr_i]):>4}  {x['verdict']}")
    lines.append("per layer: decoding mean, relations decodable / told, superposition R² (shuffled, "
                 "presence only, random model), logit lens and patching (share of known facts / pairs) per "
                 "template")
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
    sp = doc["superposition_power"]
    lines.append("superposition power (planted, same shape): "
                 + ", ".join(f"SNR {a:g}: {_f(b)} (shuffled {_f(c)})"
                             for a, b, c in zip(sp["snrs"], sp["positive"], sp["negative"])))
    lines.append(f"LRE (template {doc['templates'][0]}, {LRE_TRAIN} training facts, β chosen on them from "
                 f"{[b for b in doc['betas'] if b]}; held-out faithfulness vocabulary / candidates, "
                 f"bias alone):")
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
                                 f"({_f(_rate_at(y['power'], 'strengths', T['lre_named']))}) "
                                 f"{words[str(y['layer'])]}" for y in x["layers"]))
    for x in doc["interventions"]:
        if not x.get("edits"):
            lines.append(f"interventions at layer {x['layer']}: no edit")
            continue
        lines.append(f"interventions at layer {x['layer']}: {x['edits']} edits, {x['others']} other prompts; "
                     f"already j {_f(x['already'])}; fitted |Δ|/|h| median "
                     f"{_f(x['fitted_ratio_median'], 3)}; "
                     + "; ".join(f"dose {d['dose']}: -> j {_f(d['success'])}, changed {_f(d['changed'])}, "
                                 f"stay {_f(d['stay'])}" for d in x["doses"]))
    for t, p in enumerate(doc["patching"]):
        if p["power"]:
            lines.append(f"patching power, template {doc['templates'][t]} (planted readout, share read at "
                         f"the patched position {T['patch_named']:g}; λ = 0 the negative control): "
                         + ", ".join(f"{layer}:{_f(_rate_at(pw, 'strengths', T['patch_named']))}"
                                     f"/{_f(_rate_at(pw, 'strengths', 0.0))}"
                                     for layer, pw in zip(p["layers"], p["power"])))
    ivp = doc["intervention_power"]
    k = ivp["snrs"].index(T["intervention_snr"])
    lines.append(f"intervention power (the estimator on planted superposition states, SNR "
                 f"{T['intervention_snr']:g}; selective share per dose, shuffled facts in brackets): "
                 + ", ".join(f"{d}: {_f(a)} ({_f(b)})" for d, a, b in zip(
                     ivp["doses"], ivp["rate"][k], ivp["negative"] or [None] * len(ivp["doses"])))
                 + f"; {ivp['edited'][k]:.0f} facts edited per planting")
    lines.extend("verdict: " + v for v in doc["verdict"]["lines"])
    return lines


def stderr_progress(message: str) -> None:
    """Progress lines on stderr."""
    print(message, file=sys.stderr, flush=True)
