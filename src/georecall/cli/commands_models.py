"""The commands on stored models and hidden states: ``probe``, ``eval``, ``transfer``, ``probe-hidden``,
``probe-lm`` and ``export``."""

from __future__ import annotations

import math
import os
import sys
from typing import Any

import numpy as np

from georecall import __version__, estimates, memory, npy_headers
from georecall.cli.common import (
    LIMITS,
    binary_codes_fit,
    code_kind,
    document,
    input_file,
    output_dir,
    output_path,
    require_enumerable,
    require_matplotlib,
    resolve_spec,
    task_file,
)
from georecall.cli.params import (
    EvalParams,
    ExportParams,
    ProbeHiddenParams,
    ProbeLmParams,
    ProbeParams,
    TransferParams,
)
from georecall.constructions.canonical import model_fingerprint
from georecall.constructions.model import ATTENTION_KINDS
from georecall.constructions.storage import load_model
from georecall.errors import InputError
from georecall.estimates import query_bytes
from georecall.experiments import probes, probes_hidden
from georecall.experiments.sweep_records import read_sweep
from georecall.io import append_jsonl, damaged_input, parse_json
from georecall.memory import Estimate
from georecall.theory import seeds
from georecall.theory.tasks import Task, task_for_seed
from georecall.theory.tokens import queries, teacher_forcing
from georecall.verify.checking import run as checking  # the module: tests replace its functions
from georecall.verify.checking.exact import evaluate, exact_bytes

__all__ = [
    "run_eval",
    "run_export",
    "run_probe",
    "run_probe_hidden",
    "run_probe_lm",
    "run_transfer",
]


# ------------------------------------------------------------------------------------- saved models, files


def _check_model_file(path: str, budget: memory.Budget, what: str) -> tuple[Estimate, list]:
    """Measure a model file from its headers, parse its JSON header, before the library loads it."""
    input_file(path, "model file")
    members = npy_headers.npz_members(path)
    est = estimates.file_estimate(what, path, members, copies=3).require(budget)
    names = {m.name: m for m in members}
    header_member = names.get("__header__")
    if header_member is None:
        raise InputError(f"{path!r} is not a georecall model (no __header__)")
    if header_member.dtype.kind != "U" or header_member.shape != ():
        raise InputError(f"{path!r}: the model header is not a JSON string")
    with damaged_input(path, "model file"), np.load(path, allow_pickle=False) as data:
        text = str(data["__header__"])
    header = parse_json(text, path, "the model header")
    if not isinstance(header, dict) or header.get("format") != "georecall-model-1":
        raise InputError(f"{path!r} is not a georecall model (its header is not a georecall-model-1 object)")
    if not isinstance(header.get("meta", {}), dict):
        raise InputError(f"{path!r}: the model header's meta is a {type(header['meta']).__name__}, not an "
                         "object")
    _check_structure(path, header.get("structure"))
    for m in members:
        if m.name != "__header__" and m.dtype.kind not in "fiub":
            hint = (" (bfloat16 saved as raw bytes? cast it to float32 before saving: exact)"
                    if m.dtype.kind == "V" and m.dtype.itemsize == 2 else "")
            raise InputError(f"{path!r}: array {m.name!r} has dtype {m.dtype}, not numbers{hint}")
    return est, members


def _check_structure(path: str, structure) -> None:
    """A model header's layer structure, field by field (what ``unflatten`` reads, with the types it
    needs)."""
    if not isinstance(structure, list) or not structure or len(structure) > 1024:
        raise InputError(f"{path!r}: the model header's structure is not a list of layers")
    for i, layer in enumerate(structure):
        if not isinstance(layer, dict):
            raise InputError(f"{path!r}: layer {i} of the model header is a {type(layer).__name__}, not an "
                             "object")
        attention = layer.get("attention")
        if attention is not None:
            if not isinstance(attention, dict):
                raise InputError(f"{path!r}: layer {i}'s attention is a {type(attention).__name__}, not an "
                                 "object (kind, inverse_temperature) or null")
            if attention.get("kind") not in ATTENTION_KINDS:
                raise InputError(f"{path!r}: layer {i}'s attention kind {attention.get('kind')!r} is not one "
                                 f"of {', '.join(ATTENTION_KINDS)}")
            beta = attention.get("inverse_temperature", 1.0)
            if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not math.isfinite(beta):
                raise InputError(f"{path!r}: layer {i}'s inverse_temperature {beta!r} is not a finite number")
        if not isinstance(layer.get("mlp", False), (bool, type(None))):
            raise InputError(f"{path!r}: layer {i}'s mlp is {layer.get('mlp')!r}, not true or false")


def _load_model_and_task(path: str, task_path: str | None, budget: memory.Budget,
                         what: str) -> tuple[Any, Task, Estimate]:
    """The model of a model file and its task (stored inside, or ``--task``), each measured against the
    budget before it is read."""
    est, _ = _check_model_file(path, budget, what)
    model, header = load_model(path)
    if task_path is not None:
        input_file(task_path, "task table")
        if task_path.endswith(".npz"):
            members = npy_headers.npz_members(task_path)
        else:
            members = [npy_headers.npy_member(task_path)]
        estimates.file_estimate(what, task_path, members).require(budget)
        try:
            table = np.load(task_path, allow_pickle=False)
        except Exception as exc:  # whatever NumPy's readers raise on a damaged file
            raise InputError(f"cannot read the task table {task_path!r}: {str(exc)[:160]}") from None
        if hasattr(table, "files"):
            with table, damaged_input(task_path, "task table"):
                if "task_table" not in table.files:
                    raise InputError(f"{task_path!r} has no array 'task_table'")
                table = table["task_table"]
    elif "task_table" in header.get("extra_arrays", {}):
        table = header["extra_arrays"]["task_table"]
    else:
        raise InputError(f"{path!r} stores no task table: pass --task TABLE.npy (R × N bijections)")
    table = np.asarray(table)
    if table.ndim != 2 or table.dtype.kind not in "iu":
        raise InputError(f"the task table must be an integer R × N array, got shape {table.shape}, "
                         f"dtype {table.dtype}")
    try:
        task = Task.from_table(table)
    except InputError:
        # a table of another size than the model's: its size is the news, not the values it holds (a valid
        # table of another size reaches the command's own comparison of the two)
        if table.shape != (model.n_relations, model.n_entities):
            raise InputError(f"the task table is R×N = {table.shape[0]}×{table.shape[1]}; the model has "
                             f"N = {model.n_entities}, R = {model.n_relations}") from None
        raise
    return model, task, est


def _holdout(h: float, n: int, what: str) -> float:
    if not (math.isfinite(h) and 0 < h < 1):
        raise InputError(f"--holdout must lie strictly between 0 and 1, got {h}")
    n_test = int(round(h * n))
    if n_test < 1 or n - n_test < 1:
        raise InputError(f"--holdout {h} of {n} {what} leaves {n_test} held out and {n - n_test} to fit: "
                         f"both "
                         "sides need at least one")
    return h


def run_probe(p: ProbeParams) -> dict:
    """``probe``: superposition readout, linear probes, interventions, unit selectivity of a saved model.

    Parameters
    ----------
    p : ProbeParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        A missing or damaged model or task file, shapes that do not match the task, a ``--holdout`` leaving a
        side empty, or the estimate over the budget.
    """
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "probe")
    model = _as_float64(model, est, p.budget)
    probes.check_model_shapes(model, task)
    _holdout(p.holdout, task.N, "subjects")
    estimates.probe_estimate(est, task.N, task.R, model.d, model.mlp_width, model.n_out,
                             p.subjects).require(p.budget)
    result = probes.probe_all(model, task, holdout=p.holdout, subjects=p.subjects, transfer_steps=None,
                              rng=seeds.rng(p.seed, "probes"))
    params = {"model": p.model, "task": p.task, "holdout": p.holdout, "subjects": p.subjects, "seed": p.seed}
    return document(p, params, est, model=p.model, N=task.N, R=task.R, **result)


def _interval(lo: np.ndarray | float, hi: np.ndarray | float) -> dict:
    """``{"lo", "hi", "width"}`` of an interval that contains an exact value."""
    lo_v, hi_v = float(lo), float(hi)
    return {"lo": lo_v, "hi": hi_v, "width": hi_v - lo_v if math.isfinite(hi_v - lo_v) else None}


def _evaluation(result, tokens: np.ndarray, N: int, R: int, k: int) -> dict:
    """Accuracy and margins overall and per relation (the first hop r_1 of each query) from a kept check.

    Every margin is an interval ``{"lo", "hi", "width"}`` containing the exact margin (per query ``lo <=
    exact <= hi``, so the minimum, mean and each quantile of the exact margins lie between those of ``lo``
    and of ``hi``)."""
    assert result.margins is not None and result.predictions is not None  # checked with keep=True
    with np.errstate(invalid="ignore"):  # a mean or quantile over margins of +inf and -inf is NaN (null)
        return _summary(result, tokens, N, R, k)


def _mean(values: np.ndarray) -> float:
    """The mean of finite margins near float64's largest without overflowing in the sum (±inf, NaN as
    NumPy's mean gives them)."""
    with np.errstate(over="ignore"):
        mean = float(values.mean())
    if not math.isfinite(mean) and np.isfinite(values).all():
        mean = float((values / values.size).sum())
    return mean


def _summary(result, tokens: np.ndarray, N: int, R: int, k: int) -> dict:
    """:func:`_evaluation`'s document."""
    assert result.margins is not None and result.predictions is not None  # checked with keep=True
    lows = np.asarray(result.margins, dtype=np.float64).reshape(tokens.shape[0], -1)
    highs = (lows if result.margin_highs is None
             else np.asarray(result.margin_highs, dtype=np.float64).reshape(lows.shape))
    lo, hi = lows.min(axis=1), highs.min(axis=1)
    relation = tokens[:, k - 1] - N  # r_1: the relation applied first (the token before the subject)
    # certainly right: the exact sign (a margin nearer 0 than the smallest subnormal has lo = 0 but is > 0)
    correct = np.asarray(lo > 0 if result.right is None  # per query, or per chain (decoding)
                         else np.asarray(result.right).reshape(lows.shape[0], -1).all(axis=1), dtype=bool)
    per_relation = []
    for r in range(R):  # a loop over relations, each vectorized over its queries
        mine = relation == r
        per_relation.append({"relation": r, "queries": int(mine.sum()),
                             "accuracy": float(correct[mine].mean()) if mine.any() else None,
                             "min_margin": _interval(lo[mine].min(), hi[mine].min()) if mine.any() else None,
                             "mean_margin": _interval(_mean(lo[mine]), _mean(hi[mine])) if mine.any()
                             else None})
    quantiles = ({f"q{q:g}": _interval(np.quantile(lo, q), np.quantile(hi, q)) for q in (0.01, 0.1, 0.5)}
                 if lo.size else {})
    n_correct = int(correct.sum())  # strictly positive margin: a tie is not a right answer
    n = int(lo.size)
    return {"queries": n, "n_correct": n_correct, "accuracy": n_correct / n if n else 1.0,
            "exact": n_correct == n, "arith": result.arith, "n_redecided": int(result.n_redecided),
            "n_undecided": int(result.n_undecided),
            "margin_kind": "interval [lo, hi] containing the exact margin of the stored weights"
            if result.arith == "exact" else f"interval [lo, hi] certified from a {result.arith} computation "
            "(weights cast to it)",
            "min_margin": _interval(lo.min(), hi.min()) if n else None,
            "mean_margin": _interval(_mean(lo), _mean(hi)) if n else None, "margin_quantiles": quantiles,
            "ties": int(((lo == 0) & (hi == 0)).sum()), "per_relation": per_relation,
            "forward": result.forward, "decoder": result.decoder, "dtype": result.dtype,
            **({"note": result.fallback} if result.fallback else {})}


def run_eval(p: EvalParams) -> dict:
    """``eval``: accuracy and logit margins of a model file on every query of its task, overall and per
    relation (greedy decoding of every chain for a chain-of-thought model).

    Parameters
    ----------
    p : EvalParams

    Returns
    -------
    dict
        The document (``status`` 0 whatever the accuracy: a check is ``georecall check``).

    Raises
    ------
    InputError
        A missing or damaged model or task file, a recorded k or cot that cannot be read, a model whose
        sizes or positions do not fit its task's queries, or the estimate over the budget.
    """
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "eval")
    header_record = _model_record(p.model)
    fingerprints: dict[str, Any] = {"fingerprint": model_fingerprint(model),
                                    "saved_fingerprint": _saved_fingerprint(p.model)}
    k, cot = _hops(header_record, p.k, p.cot)
    if model.n_entities != task.N or model.n_relations != task.R:
        raise InputError(f"the model has N = {model.n_entities} entities and R = {model.n_relations} "
                         f"relations, its task N = {task.N}, R = {task.R}")
    if model.n_out != task.N:
        raise InputError(f"the model has {model.n_out} outputs; eval reads answers as entity ids "
                         f"(n_out = N = {task.N})")
    if (k > 1 or cot) and model.max_positions is not None and model.max_positions < (2 * k if cot else k + 1):
        raise InputError(f"{'chain-of-thought ' if cot else ''}{k}-hop queries need "
                         f"{2 * k if cot else k + 1} positions; the model has {model.max_positions}")
    require_enumerable(task.N, task.R, k)
    est.add("queries, predictions, margins", query_bytes(task.N, task.R, k, cot) + 16 * task.N * task.R**k,
            "the model's N or R, or --k")
    width = max(model.d, model.readout.matrix.shape[0], model.mlp_width)
    T = 2 * k if cot else k + 1
    est.add("checker chunks", memory.checker_chunk_bytes(width, T, task.N * task.R**k, p.budget),
            "the model's d or m")
    _arith_estimate(est, model, p.arith, T, p.budget)
    est.require(p.budget)
    tokens, answers = queries(task, k)
    if cot:
        result = evaluate(model, tokens, teacher_forcing(task, k)[1], decode=True, arith=p.arith, keep=True,
                          progress=p.progress, budget=p.budget)
    else:
        result = evaluate(model, tokens, answers, arith=p.arith, keep=True, progress=p.progress,
                          budget=p.budget)
    params = {"model": p.model, "task": p.task, "k": k, "cot": cot, "arith": p.arith}
    return document(p, params, est, N=task.N, R=task.R, k=k, cot=cot,
                    mode="greedy chain-of-thought decoding" if cot else "argmax at the last position",
                    source={key: header_record.get(key) for key in ("construction", "mode", "d", "steps")
                        if key in header_record}, **_evaluation(result, tokens, task.N, task.R, k),
                    stored_dtype="+".join(sorted({str(a.dtype) for a in model.arrays().values()})),
                    **_idealized(model), **fingerprints)


def _idealized(model) -> dict:
    """``{"attention": ...}`` naming hard attention as the idealization it is (docs/model_format.md), or
    nothing."""
    hard = [i for i, layer in enumerate(model.layers)
            if layer.attention is not None and layer.attention.kind == "hard"]
    if not hard:
        return {}
    return {"attention": f"hard attention in layer(s) {', '.join(map(str, hard))}: the idealization "
                         "β -> ∞ (uniform over the positions of maximal score), which no finite "
                         "softmax computes"}


def _arith_estimate(est: Estimate, model, arith: str, T: int, budget: memory.Budget) -> None:
    """Count the cast copy of the weights (to float64 for exact arithmetic, or to ``arith``) and the exact
    re-decision in ``est``."""
    dtype = np.dtype(np.float64 if arith == "exact" else arith)
    cast = sum(int(a.size) * dtype.itemsize for a in model.arrays().values() if a.dtype != dtype)
    if cast:
        est.add(f"weights cast to {dtype}", cast, "the model's size")
    if arith == "exact":
        est.add("exact re-decision (weights as integers, one chunk)", exact_bytes(model, T, budget),
                "the model's size")


def _as_float64(model, est: Estimate, budget: memory.Budget):
    """The model with every array cast to float64 (exact: the same function), counted in ``est``: the
    probes and the transfer then compute on the same numbers whatever precision the file stores."""
    cast = sum(int(a.size) * 8 for a in model.arrays().values() if a.dtype != np.float64)
    if cast:
        est.add("weights cast to float64 (exactly)", cast, "the model's size").require(budget)
        return model.astype(np.float64)
    return model


def _file_header(path: str) -> dict:
    """A model file's JSON header (``__header__``), read as every model file is (damage is exit 2)."""
    with damaged_input(path, "model file"), np.load(path, allow_pickle=False) as data:
        header = parse_json(str(data["__header__"]), path, "the model header")
    return header if isinstance(header, dict) else {}


def _saved_fingerprint(path: str) -> str | None:
    """The fingerprint a model file's header records (``save_model`` writes it), or None."""
    saved = _file_header(path).get("fingerprint")
    return saved if isinstance(saved, str) else None


def _hops(record: dict, k: int | None, cot: bool) -> tuple[int, bool]:
    """The k and cot of a model file: ``--k`` and ``--cot`` when given, else its record's, which must be an
    integer in 1..LIMITS["k"] and a boolean (``"false"`` would be true, 1.9 would be 1: refused, not
    misread). The one reading of ``eval`` and ``export --model``."""
    recorded_cot = record.get("cot", False)
    if not isinstance(recorded_cot, bool):  # "false" would be true: refuse what would be misread
        raise InputError(f"the model file records cot = {recorded_cot!r}; expected true or false")
    k = k if k is not None else record.get("k", 1)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= LIMITS["k"]:
        raise InputError(f"the model file records k = {k!r}; pass --k (1..{LIMITS['k']})")
    return k, cot or recorded_cot


def _model_record(path: str) -> dict:
    """The ``record`` of a model file's JSON header (parameters it was written with), or {}."""
    record = _file_header(path).get("record")
    return record if isinstance(record, dict) else {}


def run_transfer(p: TransferParams) -> dict:
    """``transfer``: freeze-and-swap onto new bijections.

    Parameters
    ----------
    p : TransferParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        An unwritable ``--append`` or one holding records of another kind, a missing or damaged model or task
        file, shapes that do not match the
        task, or the estimate over the budget.
    """
    # --lr positive and finite: the parser's type
    append = output_path(p.append, what="results file") if p.append else None
    if append:  # a file of another kind (a study's, a model) is refused before any work, as sweep --out does
        read_sweep(append, budget=p.budget, require=True, writing=True)
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "transfer")
    model = _as_float64(model, est, p.budget)
    probes.check_model_shapes(model, task)
    estimates.probe_estimate(est, task.N, task.R, model.d, model.mlp_width, model.n_out, 0).require(p.budget)
    accuracy = probes.task_accuracy(model, task)
    rng = seeds.rng(p.seed, "transfer")
    readout = probes.superposition_readout(model, task, holdout=0.0, rng=rng)
    result = probes.freeze_and_swap(model, task, readout["encoding_maps"], steps=p.steps, lr=p.lr, rng=rng)
    result["maps_fit"] = readout["encoding_fit"]
    warnings = probes.warnings_for(accuracy, {"encoding": readout["encoding_fit"]})
    params = {"model": p.model, "task": p.task, "steps": p.steps, "lr": p.lr, "seed": p.seed,
              "append": append, "label": p.label}
    doc = document(p, params, est, model=p.model, N=task.N, R=task.R, accuracy=accuracy,
                   warnings=warnings, steps=p.steps, lr=p.lr, transfer=result, appended=append)
    if append:
        kind = str(model.meta.get("construction", "model")) if isinstance(model.meta, dict) else "model"
        description = f"trained, d = {model.d}" if kind == "trained" else f"{kind} (built), d = {model.d}"
        append_jsonl(append, {"kind": "transfer", "label": p.label or description, "description": description,
                              "version": __version__, "model": p.model, "seed": p.seed, "N": task.N,
                              "R": task.R, "steps": p.steps, "lr": p.lr, **result})
    return doc


def run_probe_hidden(p: ProbeHiddenParams) -> dict:
    """``probe-hidden``: linear relational encoding of hidden states the user supplies.

    Parameters
    ----------
    p : ProbeHiddenParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        A missing or damaged states file, arrays of the wrong shape or dtype, a ``--holdout`` leaving a side
        empty, or the estimate over the budget.
    """
    input_file(p.states, "states file")
    members = {m.name: m for m in npy_headers.npz_members(p.states)}
    est = estimates.file_estimate("probe-hidden", p.states, list(members.values()), copies=3)
    est.require(p.budget)
    missing = {"states", "attributes"} - set(members)
    if missing:
        raise InputError(f"{p.states!r} needs arrays 'states' (n × width) and 'attributes' (n × R); missing "
                         f"{sorted(missing)}")
    states = members["states"]
    if len(states.shape) != 2 or states.dtype.kind != "f":
        raise InputError(f"'states' must be a 2-D float array (n × width); got shape {states.shape}, dtype "
                         f"{states.dtype}")
    n = states.shape[0]
    attributes_member = members["attributes"]
    shape = attributes_member.shape
    if len(shape) not in (1, 2) or shape[0] != n or (len(shape) == 2 and shape[1] < 1) \
            or attributes_member.dtype.kind not in "iu":
        raise InputError(f"'attributes' must be an integer array of n × R ids (n = {n} states, R >= 1); got "
                         f"shape {shape}, dtype {attributes_member.dtype}")
    if n < 1 or states.shape[1] < 1:
        raise InputError(f"'states' must hold at least one state of width >= 1; got shape {states.shape}")
    _holdout(p.holdout, n, "states")
    data = probes_hidden.load_hidden_states(p.states)
    attributes = data["attributes"]
    distinct = [int(np.unique(attributes[:, r]).size) for r in range(attributes.shape[1])]
    estimates.hidden_states_estimate(est, n, states.shape[1], distinct).require(p.budget)
    vectors = data.get("attribute_vectors")
    if vectors is not None:
        estimates.hidden_states_estimate(est, n, states.shape[1], [vectors.shape[1]]).require(p.budget)
    result = probes_hidden.linear_relational_encoding(data["states"], attributes, holdout=p.holdout,
                                                      rng=seeds.rng(p.seed, "probes"),
                                                      attribute_vectors=vectors)
    return document(p, {"states": p.states, "holdout": p.holdout, "seed": p.seed}, est, **result)


def run_probe_lm(p: ProbeLmParams) -> dict:
    """``probe-lm``: a real LM's hidden states on real facts (the only user of :mod:`georecall.lm`).

    Parameters
    ----------
    p : ProbeLmParams

    Returns
    -------
    dict

    Raises
    ------
    InputError
        The lm extra missing, a bad facts file or model, an unusable ``--figures`` folder, or the estimate
        over the budget.
    """
    from georecall.lm import facts as lmfacts  # the lm extra's package: only probe-lm imports it
    from georecall.lm import loader
    loader.require_extra()
    facts_path = p.facts or lmfacts.bundled_facts_path()
    facts = lmfacts.load_facts(facts_path)
    figures_dir = output_dir(p.figures) if p.figures is not None else None
    cache = output_path(p.cache, suffix=".npz", what="--cache file") if p.cache is not None else None
    if figures_dir is not None:
        require_matplotlib()
    est = Estimate("probe-lm")
    est.add("model weights as float32 (twice with the random control) and one loading copy",
            loader.weight_bytes_bound(p.model) * (2 if p.no_random_control else 3), "--no-random-control")
    est.add("torch and transformers", memory.GIB // 2, "—")
    est.require(p.budget)
    from georecall.lm import run as lmrun  # the lm extra's package, as above
    from georecall.lm import run_design, run_report
    if not p.progress:
        loader.quiet()
    loader.set_threads(p.threads)
    # with a cache file the weights may not be needed: tokenizer and configuration first (probe_lm loads the
    # weights when the cache does not match)
    loaded = loader.load_light(p.model) if cache and os.path.isfile(cache) else loader.load_model(p.model)
    config = loaded.model.config if loaded.model is not None else loaded.config
    L, width = int(config.num_hidden_layers), int(config.hidden_size)
    n_seq = len(facts.subjects) + 3 * run_design.TEMPLATES * len(facts.facts())
    est.add("states (subjects, prompts per template, final tokens; every layer), the superposition fits and "
            "the LRE products",
            4 * n_seq * (L + 1) * width * 2 + 8 * 16 * len(facts.relations) * width * width
            + 8 * run_design.LRE_TRAIN * len(facts.facts()) * width * 3, "--layers")
    est.require(p.budget)
    doc = lmrun.probe_lm(loaded, facts, layers=p.layers, intervene_layers=p.intervene_layers,
                         lre_layers=p.lre_layers, template=p.template, seed=p.seed,
                         random_control=not p.no_random_control, batch_size=p.batch_size, cache=cache,
                         progress=lmrun.stderr_progress if p.progress else None)
    files: list[str] = []
    if figures_dir is not None:
        from georecall.lm.figure import figure  # the lm extra's package, as above
        files = figure(doc, figures_dir)
    # the bundled facts by name (not the install's path), any facts by content
    params = {"model": p.model, "facts": p.facts or "bundled", "facts_sha256": facts.digest(),
              "layers": p.layers, "intervene_layers": p.intervene_layers, "lre_layers": p.lre_layers,
              "cache": cache, "template": p.template, "random_control": not p.no_random_control,
              "batch_size": p.batch_size, "threads": p.threads, "figures": figures_dir, "seed": p.seed}
    return document(p, params, est, **doc, text=run_report.render_text(doc), figures=files)


# ----------------------------------------------------------------------------------------------- export


def _export_parts(est: Estimate, parameters: int, n_out: int, d: int) -> None:
    """The export's own memory beside the build's: the target's graph (each weight stored, exact and its
    error, the dense read-out included: about 4 float64 copies) and one checked chunk of 1024 queries
    (about a dozen arrays of (1024, max(n_out, d)) float64: the target's logits, georecall's with their
    bound, the rounding bound's terms)."""
    est.add("export: the target's weights, their exact values and errors", 4 * 8 * parameters, "N, R")
    est.add("export: one checked chunk of 1024 queries", 12 * 8 * 1024 * 2 * max(n_out, d), "N")


def _export_construction(p: ExportParams):
    """The construction of ``--construction`` built for THE seeded task (or ``--task``): model, task,
    queries, promise, record and the memory estimate (required before the build)."""
    from georecall.exporters import query_set  # the export extra's torch: only when exporting
    assert p.N is not None and p.R is not None  # None only with --model
    spec = resolve_spec(p.construction or "geometric", None)  # a user's: loaded once per command line
    k = p.k if p.k is not None else (1 if spec.hops == "single" else 2)
    if spec.hops == "single" and k != 1:
        raise InputError(f"{spec.label} answers single-hop queries: --k must be 1, got {k}")
    require_enumerable(p.N, p.R, k)
    binary_codes_fit(code_kind(p.codes, spec), p.D, p.N)
    options = {name: value for name, value in (("attention", p.attention), ("beta", p.beta),
                                               ("gate", p.gate)) if value is not None}
    options.update(p.builder_options or {})  # the options a spec declares itself, as given
    codes = {name: value for name, value in (("codes", p.codes), ("D", p.D)) if value is not None}
    checking.validate_request(spec, options=options, codes=p.codes, D=p.D)
    if p.cot:
        raise InputError("--cot is for a model file: a construction decodes as its spec says")
    if p.attention == "hard":
        raise InputError(f"--attention hard is an idealization (β -> ∞) that {p.to} cannot compute exactly "
                         "(a softmax at any finite β leaks): export the softmax build")
    kind = code_kind(p.codes, spec)  # None (its own codes): the estimate's nominal sizes, never "binary"
    code_option: dict[str, Any] = {} if kind is None else {"codes": kind}
    est = estimates.check_estimate(spec, p.N, p.R, k, **code_option, D=p.D, what="export", budget=p.budget)
    _export_parts(est, spec.nominal_promise(p.N, p.R, k).params + p.N * spec.nominal_promise(p.N, p.R, k).d,
                  p.N, spec.nominal_promise(p.N, p.R, k).d)
    est.require(p.budget)
    task = task_file(p.task, p.N, p.R, "shared", False) if p.task else task_for_seed(p.N, p.R, p.seed)
    if p.progress:
        print(f"building {spec.label} at N = {p.N}, R = {p.R}, k = {k}", file=sys.stderr, flush=True)
    built = spec.builder(task, k, rng=seeds.rng(p.seed, "codes"), **codes, **options)
    record = {"construction": spec.id, "N": p.N, "R": p.R, "k": k, "seed": p.seed, "codes": built.codes.kind,
              "D": built.codes.D, **options, "task": p.task,
              "builder_options": dict(p.builder_options or {})}  # as a refusal records them
    return built.model, task, query_set(task, k, greedy=spec.decoding == "greedy"), built.promise, record, est


def _export_model_file(p: ExportParams):
    """The model file of ``--model`` and its task: model, task, queries, no promise, record, estimate."""
    from georecall.exporters import query_set  # the export extra's torch: only when exporting
    assert p.model is not None
    given = [flag for flag, value in (("--codes", p.codes), ("--D", p.D), ("--attention", p.attention),
                                      ("--beta", p.beta), ("--gate", p.gate)) if value is not None]
    given += ["--" + name.replace("_", "-") for name in p.builder_options or {}]  # a spec's own options
    if given:
        raise InputError(f"{', '.join(given)} build a construction: a model file (--model) is exported as "
                         "it is")
    model, task, est = _load_model_and_task(p.model, p.task, p.budget, "export")
    _export_parts(est, model.parameter_count(), model.n_out, model.d)
    est.require(p.budget)
    if (task.N, task.R) != (model.n_entities, model.n_relations):
        raise InputError(f"the task has N = {task.N}, R = {task.R}, but the model has N = "
                         f"{model.n_entities}, R = {model.n_relations}")
    stored = _model_record(p.model)
    k, cot = _hops(stored, p.k, p.cot)
    require_enumerable(task.N, task.R, k)
    record = {"model": p.model, "task": p.task, "k": k, "cot": cot, "model_record": stored}
    return model, task, query_set(task, k, greedy=cot), None, record, est


def run_export(p: ExportParams) -> dict:
    """``export``: a construction built for a task, or a model file, to torch / TransformerLens / ONNX, as a
    new folder, checked by running every query in the target (src/georecall/exporters/; docs/export.md).

    Parameters
    ----------
    p : ExportParams

    Returns
    -------
    dict
        The document; ``status`` 1 when the check in the target fails.

    Raises
    ------
    InputError
        ``--model`` with construction options, an existing OUT or an unwritable folder, the target's
        library missing, a model the target cannot run (hard attention), a bad task file, or the estimate
        over the budget; nothing is written then.
    """
    from georecall import exporters as exporting  # the export extra's torch: only when exporting
    exporting.validate_out(p.out)
    exporting.require(p.to)
    if p.model is not None:
        model, task, qs, promise, record, est = _export_model_file(p)
    else:
        model, task, qs, promise, record, est = _export_construction(p)
    exporting.supports(model, p.to)  # before any file or progress line
    exporting.require_representable(model, p.dtype)  # (export() refuses too: said before the progress line)
    if p.progress and not p.no_check:
        print(f"exporting to {p.to} and checking all {qs.prompts.shape[0]:,} queries there", file=sys.stderr,
              flush=True)
    params = {"out": p.out, "to": p.to, "dtype": p.dtype, "check": not p.no_check, **record}
    result = exporting.export(model, p.to, p.out, queries=qs, task=task, dtype=p.dtype, promise=promise,
                              check=not p.no_check, record=params)
    report = result["check"]
    passed = report is None or report["passed"]
    return document(p, params, est, passed=passed, **result)


