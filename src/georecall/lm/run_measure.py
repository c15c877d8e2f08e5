"""The measurement of the ``probe-lm`` study (:mod:`.run`): every forward pass of the model (:func:`measure`;
what is measured is listed in :mod:`.run`'s docstring), with the prompts and fact indices it is read on
(:class:`Prepared`, which the analysis of a cached measurement rebuilds without a tokenizer)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from georecall.lm import controls, extract, probes
from georecall.lm.facts import Facts
from georecall.lm.loader import random_like
from georecall.lm.run_design import (
    BETAS,
    DOSES,
    FD_STEP,
    FOLDS,
    LRE_MIN_TEST,
    LRE_TRAIN,
    PREFIX,
    TEMPLATES,
    stream_rng,
)

__all__ = ["Prepared", "edit_facts", "measure"]


class Prepared:
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
    prep = Prepared(loaded.tokenizer, facts, tmpls)
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
            partner[kr] = _derangement_pairs(kr, prep.fact_token, stream_rng(seed, "lm-patch", t, r))
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


def _measure_lre(model, prep: Prepared, m: dict, layers, lre_layers, seed, batch_size, say, t0) -> None:
    L = m["L"]
    known = m["known0"]
    prompts = prep.prompts[0]
    last = prompts.last.numpy()
    subj_pos = prompts.positions.numpy()
    for r, _rel in enumerate(prep.facts.relations):
        kr = np.flatnonzero(known & (prep.fact_rel == r))
        if kr.size < LRE_TRAIN + LRE_MIN_TEST:
            continue
        kr = kr[stream_rng(seed, "lm-lre", r).permutation(kr.size)]
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


def edit_facts(prep: Prepared, known: np.ndarray) -> tuple[list[tuple[int, int, int]], list[list[int]]]:
    """The known facts to edit, as (fact, relation, subject), and per fact the subject's other known facts.

    Parameters
    ----------
    prep : Prepared
    known : numpy.ndarray
        Per fact, whether the model knows it.
    """
    facts, others = [], []
    for k in np.flatnonzero(known):
        r, i = int(prep.fact_rel[k]), int(prep.fact_subj[k])
        facts.append((int(k), r, i))
        others.append([int(x) for x in prep.fact_row[:, i] if x >= 0 and x != k and known[x]])
    return facts, others


def _measure_interventions(model, prep: Prepared, m: dict, layers, intervene_layers, seed,
                           batch_size) -> None:
    known = m["known0"]
    R = len(prep.facts.relations)
    facts, others = edit_facts(prep, known)
    Us = [m[f"U{r}"] for r in range(R)]
    for layer in intervene_layers:
        j = layers.index(layer)
        H = m["alone"][:, j].astype(np.float64)
        blocks = [Us[r][prep.label[r]] for r in range(R)]
        sup = probes.superposition_fit(H, blocks, prep.present, folds=FOLDS, rng=stream_rng(seed, "lm-sup"),
                                       keep_maps=True)
        h_norm = np.linalg.norm(m["prompt0"][:, j].astype(np.float64), axis=1)
        ed = controls.intervention_edits(sup["maps"], Us, prep.label, facts, h_norm, others,
                                         stream_rng(seed, "lm-intervene", layer))
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
