"""The ``probe-lm`` study: a real LM's hidden states on real facts, the literature's probes with their
controls and power, and a verdict against thresholds declared before the run (``docs/lm.md``; the constants
are those of :mod:`.run_design`).

States (one per layer ``ℓ = 0..L``, see :mod:`.extract`; every text is read after the one-token context
:data:`.run_design.PREFIX`): the *subject state* ``h_s`` at the last token of the subject's name read alone
(the same tensor as in every prompt that starts with the subject: the model is causal), the *prompt state* at
the last subject token of a relation's prompt, the *final state* at the prompt's last token. A fact is
**known** under a template when greedy decoding after the prompt produces exactly the tokens of
``" " + attribute`` (:func:`.extract.continuation_match`). Attribute vectors ``U``: the unembedding row of the
attribute's first token; candidates sharing a first token are one class.

Measured (the model's forward passes; cached with ``cache``, see :func:`.run_measure.measure`):

- **Known facts** per relation and template (:data:`.run_design.TEMPLATES` templates: ``template`` and the
  next one).
- **Logit lens** at the final token of each known fact's prompt, every layer: the model's final norm and head
  applied to the state; the share whose argmax is the attribute's first token.
- **Activation patching**, every layer, each template: a known fact's prompt state at the last subject token
  replaced by that of another known fact of the same relation with a different first answer token (one partner
  each, a seeded derangement); the share whose answer becomes the partner's.
- **LRE** (Hernandez et al. 2023) at :func:`.run_design.default_lre_layers`, template ``template``, per
  relation with at least :data:`.run_design.LRE_TRAIN` + :data:`.run_design.LRE_MIN_TEST` known facts: ``W``
  the mean over :data:`.run_design.LRE_TRAIN` training facts of the Jacobian of the final state (layer L,
  before the final norm) with respect to the prompt state at layer ℓ, ``b`` the mean of ``o_i − J_i h_i``;
  ``LRE_β(h) = β W h + b``, decoded with the model's own norm and head. Jacobian-vector products by forward
  differences (relative step :data:`.run_design.FD_STEP`). Faithfulness: the decoded token equals the model's
  answer, on the held-out known facts; over the vocabulary and among the relation's candidate tokens; β in
  :data:`.run_design.BETAS` (β = 0: the bias alone, the control), chosen on the training facts.
- **Interventions** at :func:`.run_design.default_intervene_layers`: for each known fact
  ``Δ ∝ A_r(U_j − U_a)`` (``A_r`` relation r's block of the cross-fitted superposition map, the group in
  which the subject was held out; ``j`` a drawn other class), scaled to ``|Δ| = dose·|h|`` for each dose of
  :data:`.run_design.DOSES` and at its own fitted size; added at the subject position of the relation's prompt
  (success: the answer becomes ``j``) and of the subject's other known prompts (stay: their answers do not
  change).

Analysed (NumPy, from the measurement, :func:`.run_analysis.analyse`): per layer and relation, decoding of the
subject state into attribute vectors ranked among all candidates
(:func:`georecall.experiments.power.decode_vectors`; seen and unseen answers apart) with the
shuffled-label and random-initialisation controls, the superposition fit, and the power of both (a planted
positive control of the same shape, :mod:`georecall.experiments.power`); and the planted controls of
LRE, patching and the interventions (:mod:`.controls`: the same estimators, through the same ``forward``
interface, on planted models of the run's shape), which decide whether a failure of those probes is a negative
verdict or "cannot tell".

This module is the driver (:func:`probe_lm`: measure or read the cache, then analyse). The study's other parts
are its siblings: :mod:`.run_design` (what is declared before a run: thresholds, sizes, default layers, seed
streams), :mod:`.run_measure` (the forward passes), :mod:`.run_analysis` (the analysis of a measurement),
:mod:`.run_verdict` (the thresholds applied) and :mod:`.run_report` (the text report)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from georecall import __version__
from georecall.errors import InputError
from georecall.io import atomic_write
from georecall.lm.facts import Facts
from georecall.lm.run_analysis import analyse
from georecall.lm.run_design import FOLDS, TEMPLATES, default_intervene_layers, default_lre_layers
from georecall.lm.run_measure import Prepared, measure

__all__ = ["probe_lm", "stderr_progress"]

CACHE_FORMAT = "georecall-probe-lm-cache/2"


def _cache_key(loaded, facts: Facts, params: dict) -> str:
    return json.dumps({"format": CACHE_FORMAT, "model": loaded.source, "facts": facts.digest(),
                       "version": __version__, **params}, sort_keys=True)


def _load_cache(path: str, key: str) -> dict | None:
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
        Intervention and LRE layers (defaults :func:`.run_design.default_intervene_layers`,
        :func:`.run_design.default_lre_layers`); each must be probed.
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
        Plain data (:func:`.run_analysis.analyse`), with ``model``, ``seconds`` and ``cached``.

    Raises
    ------
    InputError
        A layer outside ``0..L``, an intervention or LRE layer not probed, a relation with fewer subjects than
        :data:`.run_design.FOLDS`, or an attribute that tokenizes to nothing.
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
        prep = Prepared(None, facts, templates, token_ids=[m[f"cand_ids{r}"] for r in range(R)])
    else:
        tokenizer = loaded.get_tokenizer() if hasattr(loaded, "get_tokenizer") else loaded.tokenizer
        prep = Prepared(tokenizer, facts, templates)
    t1 = time.perf_counter()
    doc = analyse(m, facts, seed=seed, prep=prep)
    doc["model"] = loaded.description
    doc["cached"] = cached
    doc["measure_seconds"] = float(m.get("measure_seconds", 0.0))
    doc["analysis_seconds"] = time.perf_counter() - t1
    doc["seconds"] = time.perf_counter() - t0
    say(f"  analysis {doc['analysis_seconds']:.0f} s")
    return doc


def stderr_progress(message: str) -> None:
    """Progress lines on stderr: ``message`` and a newline, flushed.

    Parameters
    ----------
    message : str
        The line.
    """
    print(message, file=sys.stderr, flush=True)
