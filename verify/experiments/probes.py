"""Probes of a Model's mechanism (docs/theory.md, "Gradient descent"). They run on *any* Model through THE
forward pass: constructed ones, where the answers are known exactly (G1 gives R² = 1 and 100% everywhere), and
trained ones, where they report what they measure.

Notation: ``e_s`` entity embedding, ``u_j = U[j]`` the unembedding (attribute) vector of answer j.

- **Superposition readout.** Encoding fit: ``e_s ≈ c + Σ_r u_{π_r(s)} A_r`` (one d×d map per relation,
  ridge over the fit subjects) and its R² on held-out subjects. Decoding fit per relation:
  ``u_{π_r(s)} ≈ e_s B_r + c_r`` and its held-out R²; the probe's accuracy is that of ``argmax_j <u_j, ê>``
  for the decoded vector ê.
- **Causal intervention.** ``e'_s = e_s + (u_j − u_{π_r(s)}) A_r`` for a random ``j ≠ π_r(s)``: how often the
  query (s, r) now answers j ("follows") and how often every other relation's answer stays what the model
  answered before the intervention.
- **Unit selectivity.** Mean activation of every hidden unit by queried relation; a unit's selectivity is
  the share of its activation in its top relation (1 = fires for one relation only); a unit is
  relation-selective at ``>= 0.9``. Units never active are counted apart.
- **Freeze and swap.** New random bijections; subject embeddings rebuilt (a) in closed form from the fitted
  maps, ``e'_s = c + Σ_r A_r u_{π'_r(s)}``, (b) by training only the entity embeddings; accuracy on every new
  query, everything else frozen.

Probes that discriminate (issue 12; :func:`mechanism_probes` runs them all and returns a flat summary):

- **Forward vs reverse fit** (:func:`attribute_fits`). Forward: ``e_s ≈ c + Σ_r u_{π_r(s)} A_r`` (the paper's
  direction: a subject is a superposition of its attributes). Reverse, its mirror image:
  ``u_j ≈ c' + Σ_r e_{π_r^{-1}(j)} B_r`` (an attribute's read-out row from the embeddings of its R subjects).
  Both are held-out R²; their difference is reported. On G1 both are exactly 1 (each subject holds its
  attribute codes in separate blocks, so each attribute code can be read from any one of its subjects): a high
  reverse fit does not contradict the geometry, but a forward fit that is not above it is not specific.
- **Displacement fit.** The forward fit of what training wrote, ``e_s − e⁰_s`` (``initial``: the model before
  training), and the reverse fit of ``u_j − u⁰_j``. An initialisation that training never removes caps the
  forward R² of ``e_s`` at ``1 − |E⁰|²/|E|²`` even when the displacement is an exact superposition.
- **Null fit.** The forward fit with the table of an independent random task: the held-out R² that fitting
  alone produces (about −p/(n − p) for ordinary least squares with p features and n fit rows; the
  cross-validated ridge can shrink towards the mean, nearer 0).
- **Relation selectivity** (:func:`unit_selectivity`): per unit u, ``M[r, u]`` = mean activation over the
  queries of relation r; selectivity ``max_r M[r, u] / Σ_r M[r, u]``, selective at ``>= threshold`` (0.9,
  chance 1/R); the gated mass ``Σ_u max_r M[r, u] / Σ_{r,u} M[r, u]`` (the share of all hidden activation
  that sits in units preferring the asked relation); the breadth of a unit, the fraction of its preferred
  relation's queries on which it is active (G1: about 1/2, a per-fact unit of A1: 1/N).
- **Functional zero-shot** (:func:`functional_transfer`): a per-relation linear encoder
  ``E(π) = c + Σ_r U[π_r] A_r`` trained by gradient descent *through the frozen network* on task A (start:
  the forward fit's maps), then applied unchanged to a new task B: accuracy on A and, zero-shot, on B.

Every fit above is ridge regression with its strength chosen by 5-fold cross-validation on the fit rows only
(:mod:`.fits`), also :func:`linear_relational_encoding` (hidden states of real LMs).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from georecall.constructions import registry
from georecall.constructions.decoding import predict
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Attention, Layer, Model
from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.theory.seeds import rng as seed_rng
from georecall.theory.tasks import Task, _as_rng, random_task
from georecall.verify.checking.exact import evaluate as check_queries  # the weights' own, exact
from georecall.verify.experiments import power as _power
from georecall.verify.experiments.ridge import RidgeFit, fit_ridge_cv, fit_ridge_cv_many, r_squared

__all__ = [
    "SELECTIVITY_THRESHOLD",
    "SUMMARY_FIELDS",
    "attribute_fits",
    "causal_intervention",
    "check_model_shapes",
    "embed_wider",
    "freeze_and_swap",
    "functional_transfer",
    "inverse_table",
    "linear_relational_encoding",
    "load_hidden_states",
    "mechanism_probes",
    "probe_all",
    "r_squared",
    "reference_models",
    "require_fit",
    "superposition_power",
    "superposition_readout",
    "task_accuracy",
    "warnings_for",
    "unit_selectivity",
]

SELECTIVITY_THRESHOLD = 0.9  # relation-selective unit: >= 90% of its mean activation on one relation
HIDDEN_SNRS = (0.3, 1.0, 3.0)  # probe-hidden's planted strengths (the named one, 1, in the middle)


def check_model_shapes(model: Model, task: Task) -> None:
    """Refuse a model the probes would misread, naming the shapes (:class:`InputError`).

    The probes read token ids as the model does (entity s is id s, relation r is id ``n_entities + r``) and
    attributes as entity ids (shared attributes). An entity table with more rows than the task has entities
    (e.g. a model exported with one token table) would put relation tokens on entity rows; a read-out of
    another size would score answers that are not the task's.

    Parameters
    ----------
    model : Model
        The model to probe.
    task : Task
        Its task (N entities, R relations).

    Raises
    ------
    InputError
        The entity table does not have N rows, the relation table R rows, or the read-out N rows (every
        mismatch named in one message).
    """
    E = model.entity_embedding
    problems = []
    if model.n_entities != task.N:
        problems.append(f"the entity table has {model.n_entities} rows (E: {E.shape[0]} × {E.shape[1]}) but "
                        f"the task has N = {task.N} entities")
    if model.n_relations != task.R:
        problems.append(f"the relation table has {model.n_relations} rows but the task has "
                        f"R = {task.R} relations")
    if model.n_out != task.N:
        problems.append(f"the read-out has {model.n_out} rows (U: {model.n_out} × {model.d}) but the task's "
                        f"answers are its N = {task.N} entities")
    if problems:
        raise InputError(f"model does not fit the task: {'; '.join(problems)} (the probes need shared "
                         f"attributes, E: N × d, U: N × d)")


def require_fit(model: Model, task: Task) -> None:
    """:func:`check_model_shapes` (kept under its old name).

    Parameters
    ----------
    model : Model
        The model to probe.
    task : Task
        Its task.

    Raises
    ------
    InputError
        As :func:`check_model_shapes`.
    """
    check_model_shapes(model, task)


def task_accuracy(model: Model, task: Task) -> dict:
    """The model's own accuracy on every query of its task, with the chance level 1/N.

    First in every probe report: probes of a model that does not answer its task describe something else.
    Every one of the N·R single-hop queries is run through THE forward pass
    (:func:`~georecall.verify.checking.check.check_queries`).

    Parameters
    ----------
    model : Model
        The model.
    task : Task
        Its task.

    Returns
    -------
    dict
        ``accuracy`` (share of queries answered), ``correct``, ``queries`` (N·R) and ``chance`` (1/N).

    Raises
    ------
    InputError
        A model whose shapes do not fit the task (:func:`check_model_shapes`).
    """
    check_model_shapes(model, task)
    tokens, answers = single_hop_queries(task)
    result = check_queries(model, tokens, answers)
    return {"accuracy": float(result.accuracy), "correct": int(round(result.accuracy * answers.size)),
            "queries": int(answers.size), "chance": 1.0 / task.N}


def warnings_for(accuracy: dict, fits: dict[str, dict]) -> list[str]:
    """One line per reason to distrust a probe report.

    Parameters
    ----------
    accuracy : dict
        :func:`task_accuracy`'s result: a line when its ``accuracy`` is below 1.
    fits : dict of str to dict
        ``name -> RidgeFit.describe()`` (empty or ``None`` entries are skipped): a line for each fit whose
        centred fit rows have full row rank (``underdetermined_without_penalty``), i.e. that would interpolate
        its fit rows without the ridge penalty.

    Returns
    -------
    list of str
        The warnings, accuracy first (empty when there is nothing to distrust).
    """
    out = []
    if accuracy["accuracy"] < 1.0:
        out.append(f"the model answers {accuracy['accuracy']:.2%} of its {accuracy['queries']:,} facts "
                   f"(chance 1/N = {accuracy['chance']:.2%}): the probes describe a model that "
                   f"does not know its task")
    for name, fit in fits.items():
        if fit and fit.get("underdetermined_without_penalty"):
            out.append(f"{name} fit is underdetermined: p = {fit['p']} features of rank {fit['rank']} "
                       f"for n = {fit['n']} fit rows; without the ridge penalty (chosen ρ = "
                       f"{fit['relative_alpha']:g}) it would interpolate, and its held-out R² is bounded by "
                       f"what n rows identify, not only by the model")
    return out


def _split(n: int, holdout: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """Random train / held-out index split (held-out = fit set when ``holdout == 0``)."""
    if not 0 <= holdout < 1:
        raise InputError(f"holdout must be in [0, 1), got {holdout}")
    order = rng.permutation(n)
    n_test = int(round(holdout * n))
    if n_test == 0:
        return order, order
    return order[n_test:], order[:n_test]


def _lstsq(X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """Least squares with an intercept column (``probe-hidden`` only): W of shape (features + 1, targets)."""
    X1 = np.hstack([X, np.ones((X.shape[0], 1))])
    return np.linalg.lstsq(X1, Y, rcond=None)[0]


def _apply(W: np.ndarray, X: np.ndarray) -> np.ndarray:
    return X @ W[:-1] + W[-1]


def _encoding_design(model: Model, table: np.ndarray) -> np.ndarray:
    """Rows ``[u_{π_1(s)}, ..., u_{π_R(s)}]`` (N × R·d) for a task table (R, N)."""
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    return U[table.T].reshape(table.shape[1], -1)


def superposition_readout(model: Model, task: Task, *, holdout: float = 0.25,
                          rng: np.random.Generator | int | None = None,
                          split: tuple[np.ndarray, np.ndarray] | None = None,
                          forward: RidgeFit | None = None, power_draws: int | None = None) -> dict:
    """Encoding R² (overall) and per-relation decoding R² and probe accuracy, on held-out subjects.

    - Encoding: ridge of ``e_s`` (d targets) on ``[u_{π_1(s)}, …, u_{π_R(s)}]`` (p = R·d features plus an
      intercept), n = the fit subjects, one strength for all d targets.
    - Decoding, per relation r: ridge of ``u_{π_r(s)}`` (d targets) on ``e_s`` (p = d), n = the fit subjects;
      the probe's answer for a held-out subject is ``argmax_j <u_j, ê>`` over all N read-out rows.

    Every fit is ridge with its strength chosen by 5-fold cross-validation on the fit subjects only
    (:func:`.ridge.fit_ridge_cv`, grid :data:`.ridge.RELATIVE_ALPHAS`); the R² (:func:`.ridge.r_squared`) and
    accuracies are on the held-out subjects (on the fit subjects when ``holdout == 0``). ``split`` and
    ``forward`` reuse a split and an encoding fit already made on it (:func:`mechanism_probes`).
    ``encoding_maps`` (``(R·d + 1) × d``, fitted on the fit subjects) are what the interventions and the
    closed-form transfer apply.

    Power (with held-out subjects): the decoding probe is also run as :func:`.power.decode_vectors` (the same
    ridge rule, the decoded vector's nearest read-out row by cosine, both centred on the rows' mean), with
    accuracy on held-out subjects whose answer occurs among the fit subjects' answers (seen) and on the others
    (unseen); and on ``power_draws`` plantings of the same shape (N subjects, width d, the task's table, this
    split, the read-out rows as attribute vectors) at SNR :data:`.power.NAMED_SNR`
    (:func:`.power.decode_power`, from a generator spawned off ``rng``, so the other probes' draws are
    unchanged). Each relation's ``verdict`` is "decodable", "not decodable" (the planted control detected in
    at least :data:`.power.POWER_REQUIRED` of the draws) or "cannot tell", with its ``reason``.

    Parameters
    ----------
    model : Model
        The model (E: N × d, U: N × d).
    task : Task
        Its task.
    holdout : float
        Share of the N subjects held out, in [0, 1) (rounded to whole subjects; 0, or a share that rounds to
        no subject, scores on the fit subjects). Unused for splitting when ``split`` is given.
    rng : numpy.random.Generator or int or None
        The subject split (unless ``split`` is given) and every fit's folds.
    split : (ndarray, ndarray), optional
        ``(fit subjects, held-out subjects)`` to use instead of drawing one.
    forward : RidgeFit, optional
        An encoding fit already made on ``split``'s fit subjects.
    power_draws : int or None
        Plantings for the power of the decoding probe (default :data:`.power.DRAWS`; 0 skips the power).

    Returns
    -------
    dict
        ``encoding_r2``, ``underdetermined`` and ``encoding_fit`` (p, n, strength) of the encoding fit;
        ``decoding_r2_mean`` and ``probe_accuracy_mean`` over relations; ``per_relation`` (``relation``,
        ``r2``, ``probe_accuracy``, ``fit`` and, with held-out subjects and power, ``vector_accuracy``,
        ``held_out``, ``unseen``, ``accuracy_seen``, ``accuracy_unseen``, ``power``, ``verdict``,
        ``reason``); ``fit_subjects``, ``test_subjects``, ``holdout``;
        ``encoding_maps`` ((R·d + 1) × d, row form ``X @ W[:-1] + W[-1]``) and ``test_index`` (the held-out
        subjects).

    Raises
    ------
    InputError
        A model whose shapes do not fit the task, a holdout outside [0, 1), fewer than two fit subjects, or
        non-finite embeddings (:func:`.ridge.fit_ridge_cv`).
    """
    rng = _as_rng(rng)
    check_model_shapes(model, task)
    E = np.asarray(model.entity_embedding[: task.N], dtype=np.float64)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    fit, test = _split(task.N, holdout, rng) if split is None else split
    X = _encoding_design(model, task.table)
    if forward is None:
        forward = fit_ridge_cv(X[fit], E[fit], rng=rng)
    encoding_r2 = r_squared(E[test], forward.predict(X[test]))
    per_relation = []
    for r in range(task.R):
        target = U[task.table[r]]
        B = fit_ridge_cv(E[fit], target[fit], rng=rng)
        decoded = B.predict(E[test])
        accuracy = float(np.mean((decoded @ U.T).argmax(axis=1) == task.table[r, test]))
        per_relation.append({"relation": r, "r2": r_squared(target[test], decoded),
                             "probe_accuracy": accuracy, "fit": B.describe()})
    draws = _power.DRAWS if power_draws is None else int(power_draws)
    if draws > 0 and not np.array_equal(np.sort(fit), np.sort(test)):
        _add_power(per_relation, E, U, task, test, rng, draws)
    return {"encoding_r2": encoding_r2, "underdetermined": forward.underdetermined,
            "encoding_fit": forward.describe(),
            "decoding_r2_mean": float(np.mean([p["r2"] for p in per_relation])),
            "probe_accuracy_mean": float(np.mean([p["probe_accuracy"] for p in per_relation])),
            "per_relation": per_relation, "fit_subjects": int(fit.size), "test_subjects": int(test.size),
            "holdout": holdout, "encoding_maps": forward.maps(), "test_index": test}


def _add_power(per_relation: list[dict], E: np.ndarray, U: np.ndarray, task: Task, test: np.ndarray, rng,
               draws: int) -> None:
    """The decoding probe's seen/unseen accuracy and its power (:func:`superposition_readout`), in place."""
    try:
        prng = rng.spawn(1)[0]
    except (AttributeError, TypeError, ValueError):  # a generator without a seed sequence
        prng = np.random.default_rng(int(rng.bit_generator.state["state"]["state"]) % 2**63)
    labels = [task.table[r] for r in range(task.R)]
    pw = _power.decode_power(labels, [U] * task.R, np.ones((task.N, task.R), dtype=bool), E.shape[1],
                             [[test]] * task.R, rng=prng, snrs=(_power.NAMED_SNR,), draws=draws,
                             predict=_ridge_predict, predict_many=_ridge_predict_many)
    for r, entry in enumerate(per_relation):
        res = _power.decode_vectors(E, labels[r], U, [test], rng=prng, predict=_ridge_predict)
        word, why = _power.verdict_word(_power.detected(res), pw[r], unseen=res["unseen"], n=res["n"])
        entry.update({"vector_accuracy": res["accuracy"], "held_out": res["n"], "unseen": res["unseen"],
                      "accuracy_seen": res["accuracy_seen"], "accuracy_unseen": res["accuracy_unseen"],
                      "chance": res["chance"], "power": pw[r], "verdict": word, "reason": why})


SUPERPOSITION_POWER_SNR = 100.0  # the study's superposition criterion is R² >= 0.95: planted at 1% noise
SUPERPOSITION_POWER_R2 = 0.95


def _mean_power(per_relation: list[dict]) -> float | None:
    rates = [x["power"]["positive"][0] for x in per_relation if "power" in x]
    return float(np.mean(rates)) if rates else None


def superposition_power(model: Model, task: Task, split: tuple[np.ndarray, np.ndarray], *, seed: int,
                        draws: int = _power.DRAWS, snr: float = SUPERPOSITION_POWER_SNR,
                        threshold: float = SUPERPOSITION_POWER_R2) -> float | None:
    """How often the forward fit finds a planted superposition of this shape (the study's power column).

    Embeddings ``E' = Σ_r (u_{π_r(s)} − ū) A_r + noise`` (:func:`.power.planted_states`: the model's read-out
    rows, the task's table, width d, signal-to-noise ``snr``) are fitted exactly as the forward fit
    (:func:`.ridge.fit_ridge_cv` of ``E'`` on ``[u_{π_1(s)}, …, u_{π_R(s)}]`` over the fit subjects of
    ``split``); the rate is the share of ``draws`` plantings whose held-out R² reaches ``threshold``.

    Parameters
    ----------
    model : Model
        Supplies the read-out rows and d.
    task : Task
        The table.
    split : (ndarray, ndarray)
        ``(fit subjects, held-out subjects)`` of the real fit.
    seed : int
        The run seed (its ``"probes"`` stream under key 2000).
    draws : int
        Plantings.
    snr : float
        Planted strength.
    threshold : float
        The R² a planting must reach.

    Returns
    -------
    float or None
        None when the split has no held-out subjects.
    """
    fit, test = split
    if np.array_equal(np.sort(fit), np.sort(test)):
        return None
    rng = seed_rng(seed, "probes", 2000)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    X = _encoding_design(model, task.table)
    labels = [task.table[r] for r in range(task.R)]
    hits = 0
    for _ in range(draws):
        E = _power.planted_states(labels, [U] * task.R, np.ones((task.N, task.R), dtype=bool), model.d, snr,
                                  rng)
        forward = fit_ridge_cv(X[fit], E[fit], rng=rng)
        hits += r_squared(E[test], forward.predict(X[test])) >= threshold
    return hits / draws


def _with_entities(model: Model, E: np.ndarray) -> Model:
    """The same model with a different entity table (e.g. extra, intervened rows appended)."""
    return replace(model, entity_embedding=np.asarray(E, dtype=model.entity_embedding.dtype))


def causal_intervention(model: Model, task: Task, encoding_maps: np.ndarray, *, subjects: int | None = 256,
                        rng: np.random.Generator | int | None = None,
                        candidates: np.ndarray | None = None) -> dict:
    """Swap relation r's component of ``e_s`` for another attribute's and watch every relation's answer.

    ``subjects`` caps how many subjects are intervened on (all if None), drawn from ``candidates`` (default:
    every subject; :func:`mechanism_probes` passes the subjects held out of the maps' fit); each gets one
    intervention per relation: ``e'_s = e_s + (u_j − u_{π_r(s)}) A_r`` with j uniform over the N − 1 answers
    other than π_r(s). The intervened embeddings are extra rows of the entity table, run through THE forward
    pass, and each is asked every relation.

    Parameters
    ----------
    model : Model
        The model (its shapes are not re-checked here: :func:`check_model_shapes`).
    task : Task
        Its task.
    encoding_maps : ndarray ((R·d + 1), d)
        Row-form maps ``[A_1; …; A_R; c]``, as ``superposition_readout(...)["encoding_maps"]`` (the shape is
        not validated).
    subjects : int or None
        At most this many subjects, drawn without replacement (None or 0: every candidate).
    rng : numpy.random.Generator or int or None
        The subjects drawn and the new answers j.
    candidates : ndarray of int, optional
        The subjects to draw from (default: all N).

    Returns
    -------
    dict
        ``interventions`` (subjects × R), ``follows`` (share of interventions whose query (s, r) now answers
        j) and ``others_unchanged`` (over the R − 1 other relations of every intervened row, the share
        answered as the model answered for the original ``e_s``; 1.0 when R = 1).

    Raises
    ------
    InputError
        No candidate subjects.
    """
    rng = _as_rng(rng)
    N, R = task.N, task.R
    d = model.d
    pool = np.arange(N) if candidates is None else np.asarray(candidates)
    if pool.size == 0:
        raise InputError("no subjects to intervene on")
    chosen = np.sort(rng.choice(pool, size=min(subjects or pool.size, pool.size), replace=False))
    A = encoding_maps[:-1].reshape(R, d, d)  # A[r]: attribute vector -> its contribution to e_s (row form)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    E = np.asarray(model.entity_embedding, dtype=np.float64)
    S_grid, R_grid = np.meshgrid(chosen, np.arange(R), indexing="ij")
    S, Rr = S_grid.ravel(), R_grid.ravel()
    current = task.table[Rr, S]
    new = (current + rng.integers(1, N, size=current.size)) % N  # uniform over j != π_r(s)
    delta = np.einsum("kd,kde->ke", U[new] - U[current], A[Rr])
    intervened = E[S] + delta
    extended = _with_entities(model, np.vstack([E, intervened]))
    n_int = intervened.shape[0]
    ids = N + np.arange(n_int)
    # every intervened subject asked every relation: tokens ⟨relation, intervened entity⟩
    q_rel = np.tile(np.arange(R), n_int)
    q_ent = np.repeat(ids, R)
    tokens = np.stack([extended.n_entities + q_rel, q_ent], axis=1)
    predictions = predict(extended, tokens).reshape(n_int, R)
    asked = predictions[np.arange(n_int), Rr]
    follows = float(np.mean(asked == new))
    others = np.ones((n_int, R), dtype=bool)
    others[np.arange(n_int), Rr] = False
    # the model's own answers before the intervention (not the task's: an untrained model has its own)
    before = np.stack([extended.n_entities + q_rel, np.repeat(S, R)], axis=1)
    original = predict(extended, before).reshape(n_int, R)
    unchanged = float(np.mean((predictions == original)[others])) if R > 1 else 1.0
    return {"interventions": int(n_int), "follows": follows, "others_unchanged": unchanged}


def unit_selectivity(model: Model, task: Task, *, layer: int = -1,
                     threshold: float = SELECTIVITY_THRESHOLD) -> dict:
    """How relation-conditioned the MLP's hidden units are, from their activations on every query.

    With ``h_u(s, r)`` the activation of unit u at the read-out position on query (s, r):

    - ``M[r, u] = (1/N) Σ_s h_u(s, r)`` (mean activation per queried relation); u is *active* if
      ``Σ_r M[r, u] > 0``;
    - selectivity ``σ_u = max_r M[r, u] / Σ_r M[r, u]`` (1: fires for one relation only; chance 1/R); u is
      relation-selective at ``σ_u >= threshold``; ``selective_fraction``: the share of active units that are;
    - gated mass ``Σ_u max_r M[r, u] / Σ_{r,u} M[r, u]``: the share of all hidden activation (over every
      query) carried by units whose preferred relation ``p_u = argmax_r M[r, u]`` is the asked one;
    - breadth ``b_u = |{s : h_u(s, p_u) > 0}| / N``: on how many of its relation's queries u fires (G1's
      selector: about 1/2; a per-fact unit of A1: 1/N). ``breadth_median`` is over active units.

    Every one of the N·R single-hop queries is run through THE forward pass (in batches of 4096 queries).

    Parameters
    ----------
    model : Model
        The model; its read-out position is the last token.
    task : Task
        Its task (the queries asked).
    layer : int
        Index into ``model.layers`` of the MLP whose hidden units are measured (taken modulo the number of
        layers, so -1 is the last).
    threshold : float
        Selectivity at or above which a unit counts as relation-selective, in (0, 1].

    Returns
    -------
    dict
        ``units``, ``active_units``, ``selective_fraction``, ``mean_selectivity``, ``gated_mass``,
        ``breadth_median``, ``breadth_mean``, ``chance_selectivity`` (1/R), ``threshold``,
        ``units_per_relation`` (active units by preferred relation). With no active unit the shares are 0.0.

    Raises
    ------
    InputError
        A threshold outside (0, 1], or a layer without an MLP.
    """
    if not 0 < threshold <= 1:
        raise InputError(f"the selectivity threshold must be in (0, 1], got {threshold}")
    tokens, _ = single_hop_queries(task)
    layer = layer % len(model.layers)
    mlp = model.layers[layer].mlp
    if mlp is None:
        raise InputError(f"layer {layer} has no MLP")
    m = mlp.width
    totals = np.zeros((task.R, m))
    fired = np.zeros((task.R, m))
    for start in range(0, tokens.shape[0], 4096):
        part = tokens[start : start + 4096]
        _, trace = forward(model, part, trace=True)
        hidden = np.asarray(trace.hidden[layer][:, -1], dtype=np.float64)  # (B, m) at the read-out position
        relation = part[:, 0] - model.n_entities
        onehot = (relation[None, :] == np.arange(task.R)[:, None]).astype(np.float64)  # (R, B)
        totals += onehot @ hidden
        fired += onehot @ (hidden > 0)
    mean = totals / task.N  # (R, m)
    mass = mean.sum(axis=0)
    active = mass > 0
    selectivity = np.zeros(m)
    selectivity[active] = mean[:, active].max(axis=0) / mass[active]
    preferred = mean.argmax(axis=0)
    breadth = fired[preferred, np.arange(m)] / task.N
    total_mass = float(mass.sum())
    return {"units": int(m), "active_units": int(active.sum()),
            "selective_fraction": float(np.mean(selectivity[active] >= threshold)) if active.any() else 0.0,
            "mean_selectivity": float(selectivity[active].mean()) if active.any() else 0.0,
            "gated_mass": float(mean.max(axis=0).sum() / total_mass) if total_mass > 0 else 0.0,
            "breadth_median": float(np.median(breadth[active])) if active.any() else 0.0,
            "breadth_mean": float(breadth[active].mean()) if active.any() else 0.0,
            "chance_selectivity": 1.0 / task.R, "threshold": threshold,
            "units_per_relation": np.bincount(preferred[active], minlength=task.R).tolist()}


def freeze_and_swap(model: Model, task: Task, encoding_maps: np.ndarray, *, steps: int = 200,
                    lr: float = 1e-2, rng: np.random.Generator | int | None = None,
                    new_task: Task | None = None) -> dict:
    """Transfer to brand-new bijections with the MLP, attention, relation embeddings and U frozen.

    The new task is ``new_task`` or, if None, ``random_task(N, R, rng)``. Subject embeddings for it are
    (a) the closed form ``e'_s = c + Σ_r u_{π'_r(s)} A_r`` from ``encoding_maps`` (fitted on the old task),
    (b) trained from ``N(0, std(closed form)²)`` (one std over every entry) with every other group frozen,
    full batch, for at most ``steps`` Adam steps (:func:`~georecall.verify.training.train.train`; it stops at
    100%). Both are checked on every query of the new task through THE forward pass.

    Parameters
    ----------
    model : Model
        The model (entity rows beyond N, if any, are kept unchanged).
    task : Task
        Its task (for N, R and the chance level).
    encoding_maps : ndarray ((R·d + 1), d)
        Row-form maps ``[A_1; …; A_R; c]`` (``superposition_readout(...)["encoding_maps"]``).
    steps : int
        Step budget of (b), a positive integer.
    lr : float
        Adam's learning rate for (b).
    rng : numpy.random.Generator or int or None
        The new task (when ``new_task`` is None) and the start of (b) (the trainer takes it too; at full
        batch it draws nothing).
    new_task : Task, optional
        The new bijections (same N and R; not checked here).

    Returns
    -------
    dict
        ``closed_form_accuracy``, ``closed_form_min_margin``, ``fitted_accuracy``, ``fitted_steps`` (updates
        applied in (b)) and ``chance`` (1/N).

    Raises
    ------
    InputError
        ``steps`` not a positive integer (from the trainer).
    FloatingPointError
        Training (b) diverged (a non-finite loss).
    """
    from georecall.verify.training.train import GROUPS, train  # the trainer's scipy: off georecall --help

    rng = _as_rng(rng)
    if new_task is None:
        new_task = random_task(task.N, task.R, rng)
    tokens, answers = single_hop_queries(new_task)
    X = _encoding_design(model, new_task.table)
    rebuilt = _apply(encoding_maps, X)
    extra = np.asarray(model.entity_embedding[task.N :], dtype=np.float64)
    closed = _with_entities(model, np.vstack([rebuilt, extra]))
    closed_result = check_queries(closed, tokens, answers)
    start = _with_entities(model, np.vstack([rng.standard_normal(rebuilt.shape) * rebuilt.std(), extra]))
    trained = train(start, tokens, answers, steps=steps, lr=lr, rng=rng,
                    frozen=tuple(g for g in GROUPS if g != "entity_embedding"),
                    dtype=model.entity_embedding.dtype)
    fitted = check_queries(trained.model, tokens, answers)
    return {"closed_form_accuracy": closed_result.accuracy,
            "closed_form_min_margin": closed_result.min_margin, "fitted_accuracy": fitted.accuracy,
            "fitted_steps": trained.steps, "chance": 1.0 / task.N}


# ----------------------------------------------------------------------------- probes that discriminate


def inverse_table(table: np.ndarray) -> np.ndarray:
    """The inverse bijections: ``inv[r, j] = π_r^{-1}(j)`` for ``table[r, s] = π_r(s)``.

    Parameters
    ----------
    table : ndarray of int (R, N)
        A task table whose rows are permutations of ``0..N-1`` (not validated: other rows give a meaningless
        result, or an IndexError for values outside ``0..N-1``).

    Returns
    -------
    ndarray of int (R, N)
        ``inv`` with ``inv[r, table[r, s]] = s``.
    """
    table = np.asarray(table)
    inv = np.empty_like(table)
    rows = np.arange(table.shape[0])[:, None]
    inv[rows, table] = np.arange(table.shape[1])[None, :]
    return inv


def _displacement(final: np.ndarray, start: np.ndarray | None, what: str, tolerance: float,
                  retained: float = 1.0):
    """``final − retained·start``, or ``(None, reason)`` when there is no start or training did not move it.

    ``retained`` is the share of the initialisation that decoupled weight decay leaves after training:
    ``Π_t (1 − lr·λ)`` over the updates applied (AdamW and the trainer's SGD shrink θ by ``1 − lr·λ`` before
    every step, so ``θ_T = keep^T·θ_0 + (decayed updates)`` exactly, in exact arithmetic).
    """
    if start is None:
        return None, "no initial model given"
    start = np.asarray(start, dtype=np.float64)
    if start.shape != final.shape:
        raise InputError(f"initial {what} has shape {start.shape}, the model's has {final.shape}")
    if not (np.isfinite(retained) and 0 <= retained <= 1):
        raise InputError(f"the retained share of the initial {what} must be in [0, 1], got {retained}")
    moved = final - retained * start
    if np.linalg.norm(final - start) <= tolerance * max(np.linalg.norm(start), np.finfo(float).tiny):
        return None, f"{what} did not move (|Δ| <= {tolerance:g}·|initial|)"
    if retained < 1:
        return moved, f"{what} − {retained:.3g}·{what}⁰ (the initialisation's share left by weight decay)"
    return moved, ""


def _attribute_fits(model: Model, task: Task, *, initial: Model | None, holdout: float, rng,
                    tolerance: float, retained: dict | None) -> tuple[dict, dict]:
    """:func:`attribute_fits`, with the forward fit and the subject split (for reuse) on the side."""
    rng = _as_rng(rng)
    check_model_shapes(model, task)
    retained = {"E": 1.0, "U": 1.0, **(retained or {})}
    N, R = task.N, task.R
    E = np.asarray(model.entity_embedding[:N], dtype=np.float64)
    U = np.asarray(model.full_unembedding()[:N], dtype=np.float64)
    subjects_fit, subjects_test = _split(N, holdout, rng)
    attributes_fit, attributes_test = _split(N, holdout, rng)
    forward_design = U[task.table.T].reshape(N, -1)  # row s: [u_{π_1(s)}, ..., u_{π_R(s)}]
    reverse_design = E[inverse_table(task.table).T].reshape(N, -1)  # row j: [e_{π_1^{-1}(j)}, ...]
    if initial is not None:
        check_model_shapes(initial, task)
    dE, why_E = _displacement(E, None if initial is None else initial.entity_embedding[:N], "E", tolerance,
                              retained["E"])
    dU, why_U = _displacement(U, None if initial is None else initial.full_unembedding()[:N], "U", tolerance,
                              retained["U"])
    # the ceiling: an exact superposition c + X·A* with i.i.d. Gaussian maps on the model's own attribute
    # vectors, through the same estimator, rows and folds: what this fit can score at this (n, p)
    planted = forward_design @ rng.standard_normal((forward_design.shape[1], model.d))
    sf, st = subjects_fit, subjects_test
    targets = [E[sf], planted[sf]] + ([] if dE is None else [dE[sf]])
    fits = fit_ridge_cv_many(forward_design[sf], targets, rng=rng)
    forward, ceiling = fits[0], fits[1]
    af, at = attributes_fit, attributes_test
    rfits = fit_ridge_cv_many(reverse_design[af], [U[af]] + ([] if dU is None else [dU[af]]), rng=rng)
    null = random_task(N, R, rng)
    null_design = U[null.table.T].reshape(N, -1)
    null_fit = fit_ridge_cv(null_design[sf], E[sf], rng=rng)
    out: dict = {"forward_r2": r_squared(E[st], forward.predict(forward_design[st])),
                 "reverse_r2": r_squared(U[at], rfits[0].predict(reverse_design[at]))}
    out["forward_minus_reverse"] = out["forward_r2"] - out["reverse_r2"]
    out["displacement_forward_r2"] = (None if dE is None else
                                      r_squared(dE[st], fits[2].predict(forward_design[st])))
    out["displacement_reverse_r2"] = (None if dU is None else
                                      r_squared(dU[at], rfits[1].predict(reverse_design[at])))
    out["displacement_notes"] = [why for why in (why_E, why_U) if why]
    out["null_forward_r2"] = r_squared(E[st], null_fit.predict(null_design[st]))
    out["forward_ceiling"] = r_squared(planted[st], ceiling.predict(forward_design[st]))
    candidates = [v for v in (out["forward_r2"], out["displacement_forward_r2"]) if v is not None]
    out["superposition_r2"] = max(candidates)
    out["fits"] = {"forward": forward.describe(), "reverse": rfits[0].describe(),
                   "displacement_forward": None if dE is None else fits[2].describe(),
                   "displacement_reverse": None if dU is None else rfits[1].describe(),
                   "null_forward": null_fit.describe(), "ceiling": ceiling.describe()}
    out["underdetermined"] = bool(forward.underdetermined)
    out.update(holdout=holdout, fit_rows=int(sf.size), test_rows=int(st.size),
               features=int(forward_design.shape[1] + 1))
    return out, {"forward": forward, "split": (sf, st)}


def attribute_fits(model: Model, task: Task, *, initial: Model | None = None, holdout: float = 0.25,
                   rng: np.random.Generator | int | None = None, tolerance: float = 1e-6,
                   retained: dict | None = None) -> dict:
    """Forward, reverse, displacement and null fits of embeddings against attribute read-out rows.

    With ``E`` (N × d) the entity embeddings, ``U`` (N × d) the read-out rows (attribute vectors) and
    ``π_r^{-1}`` the inverse bijections:

    - forward: ``e_s ≈ c + Σ_r u_{π_r(s)} A_r``, held-out over subjects s;
    - reverse: ``u_j ≈ c' + Σ_r e_{π_r^{-1}(j)} B_r``, held-out over attributes j;
    - displacement forward / reverse: the same fits of ``E − ρ_E·E⁰`` and ``U − ρ_U·U⁰`` (``initial`` holds
      ``E⁰, U⁰``; ``ρ`` the share of the initialisation weight decay left, ``retained``; ``None`` with a
      reason when there is no initial model or the table did not move, e.g. a frozen read-out);
    - null forward: the forward fit with the table of an independent random task (what fitting alone gives);
    - ceiling: the forward fit of an exact superposition with random Gaussian maps on the model's own
      attribute vectors: the R² this estimator reaches at this (n, p) when the claim is exactly true.

    Every fit is ridge regression, its strength chosen by 5-fold cross-validation on the fit rows only
    (:func:`.ridge.fit_ridge_cv`, grid :data:`.ridge.RELATIVE_ALPHAS`; one strength per fit for all d target
    columns); ``fits`` records p, n and the chosen strength of each. Forward, displacement forward, null and
    ceiling fits have p = R·d features (plus an intercept) and n = the fit subjects, and are scored on the
    held-out subjects; reverse and displacement reverse fits have p = R·d and n = the fit attributes, from a
    second, independent split of the N attributes, and are scored on the held-out attributes. Each R² is
    ``1 − SS_res/SS_tot`` over every entry of the held-out rows (:func:`.ridge.r_squared`). The
    ``superposition_r2`` is ``max(forward, displacement forward)``.

    Parameters
    ----------
    model : Model
        The model (E: N × d, U: N × d).
    task : Task
        Its task.
    initial : Model, optional
        The same model before training (same shapes).
    holdout : float
        Share of rows held out (in [0, 1); 0 scores on the fit rows).
    rng
        Splits, folds, the planted maps and the null table.
    tolerance : float
        A table counts as unmoved when ``|Δ|_F <= tolerance·|initial|_F``.
    retained : dict, optional
        ``{"E": ρ_E, "U": ρ_U}`` in [0, 1] (default 1): the initialisation's share left by weight decay (used,
        and checked, only with ``initial``).

    Returns
    -------
    dict
        ``forward_r2``, ``reverse_r2``, ``forward_minus_reverse``, ``displacement_forward_r2`` and
        ``displacement_reverse_r2`` (``None`` without a displacement), ``displacement_notes`` (why not, or
        the retained share used), ``null_forward_r2``, ``forward_ceiling``, ``superposition_r2``, ``fits``
        (each fit's :meth:`.ridge.RidgeFit.describe`), ``underdetermined`` (the forward fit's), ``holdout``,
        ``fit_rows``, ``test_rows`` and ``features`` (R·d + 1, the intercept included).

    Raises
    ------
    InputError
        A model or initial model whose shapes do not fit the task or each other; a holdout outside [0, 1); a
        retained share outside [0, 1] (with ``initial``); fewer than two fit rows.
    """
    return _attribute_fits(model, task, initial=initial, holdout=holdout, rng=rng, tolerance=tolerance,
                           retained=retained)[0]


def functional_transfer(model: Model, task: Task, new_task: Task, encoding_maps: np.ndarray, *,
                        steps: int = 300, lr: float = 1e-2) -> dict:
    """Train a per-relation linear encoder through the frozen network on task A; apply it unchanged to task B.

    The encoder maps a table π to subject embeddings ``E(π) = c + Σ_r U[π_r] A_r`` (row s:
    ``e_s = c + Σ_r u_{π_r(s)} A_r``), with the model's own read-out rows ``U`` as attribute vectors and
    parameters ``A_r`` (d × d) and ``c`` (d). Starting from ``encoding_maps`` (the ridge forward fit,
    ``(R·d + 1) × d``), Adam minimises the cross-entropy of task A's N·R queries (full batch) with every
    weight of the network frozen; the gradients are ``∂L/∂A_r = U[π_r]ᵀ ∂L/∂E`` and ``∂L/∂c = Σ_s ∂L/∂e_s``,
    with ``∂L/∂E`` from the trainer's backward pass. It stops at 100% on A or after ``steps`` steps. Then
    ``E(π')`` for B's table π' is checked on every query of B: if the network decodes *any* superposition of
    attribute vectors (as G1's selector does), the accuracy on B is that on A. No randomness.

    Parameters
    ----------
    model : Model
        The frozen network (E: N × d, U: N × d); entity rows beyond N, if any, are kept unchanged.
    task : Task
        Task A, trained on.
    new_task : Task
        Task B, applied zero-shot (same N and R).
    encoding_maps : ndarray ((R·d + 1), d)
        The encoder's start, row form ``[A_1; …; A_R; c]``.
    steps : int
        Adam's step budget (0: no training).
    lr : float
        Adam's learning rate.

    Returns
    -------
    dict
        ``start_accuracy_A`` (the starting encoder on A), ``accuracy_A`` (trained), ``zero_shot_B``,
        ``steps`` (the index of the step at which training stopped: the updates applied when it stopped at
        100% on A, one less than those applied when the budget ran out; 0 when the start is already at 100%),
        ``chance`` (1/N).

    Raises
    ------
    InputError
        A model whose shapes do not fit task A, a task B of other sizes, or maps not of shape
        ``(R·d + 1, d)``.
    FloatingPointError
        The encoder's training diverged (a non-finite loss).
    """
    from georecall.verify.training.backward import loss_and_grads  # scipy: off georecall --help
    from georecall.verify.training.train import GROUPS, adam

    require_fit(model, task)
    if new_task.N != task.N or new_task.R != task.R:
        raise InputError(f"task B (N={new_task.N}, R={new_task.R}) must have task A's sizes "
                         f"(N={task.N}, R={task.R})")
    N, R, d = task.N, task.R, model.d
    dtype = model.entity_embedding.dtype
    U = np.asarray(model.full_unembedding()[:N], dtype=dtype)
    extra = np.asarray(model.entity_embedding[N:], dtype=dtype)
    frozen = frozenset(GROUPS) - {"entity_embedding"}
    maps = np.asarray(encoding_maps, dtype=dtype)
    if maps.shape != (R * d + 1, d):
        raise InputError(f"encoding maps must have shape {(R * d + 1, d)}, got {maps.shape}")

    def encode(params: dict, table: np.ndarray) -> np.ndarray:
        E = np.broadcast_to(params["c"], (N, d)).copy()
        for r in range(R):
            E += U[table[r]] @ params["A"][r]
        return E

    def with_E(E: np.ndarray) -> Model:
        return _with_entities(model, np.vstack([E, extra]) if extra.size else E)

    tokens_a, answers_a = single_hop_queries(task)
    tokens_b, answers_b = single_hop_queries(new_task)
    params = {"A": maps[:-1].reshape(R, d, d).copy(), "c": maps[-1].copy()}
    start_accuracy = check_queries(with_E(encode(params, task.table)), tokens_a, answers_a).accuracy
    state: dict[str, Any] = {"done": start_accuracy == 1.0, "steps": 0}

    def grad_fn(current: dict, step: int) -> dict:
        if state["done"]:
            return {}
        with np.errstate(over="ignore", invalid="ignore"):
            loss, grads, predictions = loss_and_grads(with_E(encode(current, task.table)), tokens_a,
                                                      answers_a, frozen=frozen, path="auto")
        if not np.isfinite(loss):
            raise FloatingPointError(f"encoder training diverged at step {step} (lr = {lr})")
        if np.all(predictions == answers_a):
            state["done"] = True
            return {}
        dE = grads["entity_embedding"][:N]
        return {"A": np.stack([U[task.table[r]].T @ dE for r in range(R)]), "c": dE.sum(axis=0)}

    def stop(current: dict, step: int, grads: dict) -> bool:
        state["steps"] = step
        return state["done"]

    final = adam(grad_fn, params, steps, lr=lr, callback=stop) if not state["done"] else params
    accuracy_a = check_queries(with_E(encode(final, task.table)), tokens_a, answers_a).accuracy
    zero_shot = check_queries(with_E(encode(final, new_task.table)), tokens_b, answers_b).accuracy
    return {"start_accuracy_A": start_accuracy, "accuracy_A": accuracy_a, "zero_shot_B": zero_shot,
            "steps": int(state["steps"]), "chance": 1.0 / N}


SUMMARY_FIELDS = (
    "accuracy", "forward_r2", "reverse_r2", "forward_minus_reverse", "displacement_forward_r2",
    "displacement_reverse_r2", "null_forward_r2", "forward_ceiling", "superposition_r2", "forward_alpha",
    "probe_accuracy", "decode_power", "superposition_power", "follows", "others_unchanged",
    "selective_fraction", "gated_mass", "breadth_median", "active_fraction", "closed_form_transfer",
    "encoder_accuracy_A", "functional_zero_shot", "fitted_transfer", "chance",
)


def mechanism_probes(model: Model, task: Task, *, initial: Model | None = None, seed: int = 0,
                     holdout: float = 0.25, subjects: int | None = 256, transfer_steps: int | None = 200,
                     encoder_steps: int | None = 300, lr: float = 1e-2,
                     threshold: float = SELECTIVITY_THRESHOLD, retained: dict | None = None) -> dict:
    """Every probe of the mechanism study on one model, with a flat ``summary`` of :data:`SUMMARY_FIELDS`.

    The encoding maps (forward fit, ridge with cross-validated strength) are fitted on the fit subjects only;
    the interventions are made on held-out subjects; the closed-form and functional transfer apply the same
    maps to a new task.

    Randomness follows the seed contract: splits, folds, the planted ceiling maps, the null table, the
    intervened subjects and their new answers come from ``rng(seed, "probes")``; the new task B and the fitted
    transfer's start from ``rng(seed, "transfer")``. So every model probed with the same ``(N, R, seed)`` sees
    the same splits and the same task B.

    Parameters
    ----------
    model : Model
        The model (E: N × d, U: N × d).
    task : Task
        Its task.
    initial : Model, optional
        The model before training, for the displacement fits.
    seed : int
        The run seed of the seed contract.
    holdout : float
        Share of subjects (and, for the reverse fits, of attributes) held out, in [0, 1).
    subjects : int or None
        At most this many held-out subjects intervened on (:func:`causal_intervention`).
    transfer_steps, encoder_steps : int or None
        Step budgets of the fitted transfer (E trained on B, the rest frozen) and of the functional encoder;
        ``None`` skips that probe (its summary fields are then ``None``; the closed-form transfer is always
        computed).
    lr : float
        Adam's learning rate for both.
    threshold : float
        The selectivity threshold (:func:`unit_selectivity`).
    retained : dict, optional
        The initialisation's share left by weight decay (:func:`attribute_fits`).

    Returns
    -------
    dict
        ``summary`` (flat numbers), ``accuracy`` (the model's own, on its task), ``warnings``, and the
        detailed ``fits``, ``readout``, ``intervention``, ``selectivity``, ``transfer`` and ``functional``
        results.

    Raises
    ------
    InputError
        From the probes it runs: shapes that do not fit the task, a bad holdout, retained share, threshold or
        step budget, too few subjects for a fit.
    FloatingPointError
        A transfer's training diverged.
    """

    check_model_shapes(model, task)
    accuracy = task_accuracy(model, task)
    probes_rng = seed_rng(seed, "probes")
    transfer_rng = seed_rng(seed, "transfer")
    fits, extra = _attribute_fits(model, task, initial=initial, holdout=holdout, rng=probes_rng,
                                  tolerance=1e-6, retained=retained)
    readout = superposition_readout(model, task, holdout=holdout, rng=probes_rng, split=extra["split"],
                                    forward=extra["forward"])
    maps = readout.pop("encoding_maps")
    held_out = readout.pop("test_index")
    intervention = causal_intervention(model, task, maps, subjects=subjects, rng=probes_rng,
                                       candidates=held_out if holdout > 0 else None)
    selectivity = unit_selectivity(model, task, threshold=threshold)
    new_task = random_task(task.N, task.R, transfer_rng)
    transfer = freeze_and_swap(model, task, maps, steps=transfer_steps, lr=lr, rng=transfer_rng,
                               new_task=new_task) if transfer_steps is not None else None
    if transfer is None:  # the closed form costs one check: always report it
        closed = _with_entities(model, np.vstack([_apply(maps, _encoding_design(model, new_task.table)),
                                                  np.asarray(model.entity_embedding[task.N :])]))
        transfer = {"closed_form_accuracy": check_queries(closed, *single_hop_queries(new_task)).accuracy,
                    "fitted_accuracy": None, "chance": 1.0 / task.N}
    functional = (functional_transfer(model, task, new_task, maps, steps=encoder_steps, lr=lr)
                  if encoder_steps is not None else None)
    summary = {
        "accuracy": accuracy["accuracy"],
        **{k: fits[k] for k in ("forward_r2", "reverse_r2", "forward_minus_reverse",
                                "displacement_forward_r2", "displacement_reverse_r2", "null_forward_r2",
                                "forward_ceiling", "superposition_r2")},
        "forward_alpha": fits["fits"]["forward"]["relative_alpha"],
        "probe_accuracy": readout["probe_accuracy_mean"],
        "decode_power": _mean_power(readout["per_relation"]),
        "superposition_power": superposition_power(model, task, extra["split"], seed=seed),
        "follows": intervention["follows"], "others_unchanged": intervention["others_unchanged"],
        "selective_fraction": selectivity["selective_fraction"], "gated_mass": selectivity["gated_mass"],
        "breadth_median": selectivity["breadth_median"],
        "active_fraction": selectivity["active_units"] / selectivity["units"],
        "closed_form_transfer": transfer["closed_form_accuracy"],
        "encoder_accuracy_A": None if functional is None else functional["accuracy_A"],
        "functional_zero_shot": None if functional is None else functional["zero_shot_B"],
        "fitted_transfer": transfer["fitted_accuracy"], "chance": 1.0 / task.N,
    }
    warnings = warnings_for(accuracy, {"forward": fits["fits"]["forward"],
                                       "reverse": fits["fits"]["reverse"]})
    return {"summary": summary, "accuracy": accuracy, "warnings": warnings, "fits": fits, "readout": readout,
            "intervention": intervention, "selectivity": selectivity, "transfer": transfer,
            "functional": functional}


def embed_wider(model: Model, d: int, rng: np.random.Generator | int | None = None) -> Model:
    """The same function in a wider residual: pad every residual vector with ``d − model.d`` zeros and rotate
    by a random orthogonal ``d × d`` matrix Q (Haar, from ``rng``).

    With ``x' = [x, 0]·Q`` for every residual state, a map that reads the residual, ``x·W``, becomes
    ``x'·Qᵀ[W; 0]`` and a write ``V`` becomes ``[V, 0]·Q``; embeddings, attention (W_Q, W_K, W_V read, W_O
    writes), the MLP (W1 reads, W2 and b2 write) and the read-out U (``x'·U'ᵀ = x·Uᵀ``) are transformed so:
    the logits are those of ``model`` up to rounding, but no coordinate means anything on its own, and every
    table has full width d. The positive control of the probes at any width (G1 padded to the study's d).

    Parameters
    ----------
    model : Model
        The model to embed (a compact read-out is written out in full).
    d : int
        The new residual width, at least ``model.d`` (``d == model.d``: a rotation only).
    rng : numpy.random.Generator or int or None
        Draws Q.

    Returns
    -------
    Model
        The embedded model, in float64, with ``meta["embedded_wider"] = {"from_d", "d", "rotation"}``.

    Raises
    ------
    InputError
        ``d`` not an integer, or smaller than the model's width.
    """

    rng = _as_rng(rng)
    d0 = model.d
    if not isinstance(d, (int, np.integer)) or d < d0:
        raise InputError(f"the wider residual must have d >= the model's d = {d0}, got {d!r}")
    Q, upper = np.linalg.qr(rng.standard_normal((d, d)))
    Q = Q * np.sign(np.diag(upper))[None, :]  # Haar: fix the signs of the QR factor
    rot = Q.T  # x' = [x, 0] @ rot (rows of rot: the new coordinates of each old one)

    def write(V):  # (..., d0) -> (..., d)
        V = np.asarray(V, dtype=np.float64)
        return V @ rot[:d0]

    def read(W):  # (d0, k) -> (d, k), or (H, d0, k) -> (H, d, k)
        W = np.asarray(W, dtype=np.float64)
        return np.einsum("ij,...jk->...ik", rot[:d0].T, W)

    layers = []
    for layer in model.layers:
        att = layer.attention
        new_att = None
        if att is not None:
            new_att = Attention(att.kind, read(att.W_V), write(att.W_O),
                                None if att.W_Q is None else read(att.W_Q),
                                None if att.W_K is None else read(att.W_K), att.inverse_temperature)
        mlp = layer.mlp
        new_mlp = None if mlp is None else MLP(read(mlp.W1), np.asarray(mlp.b1, dtype=np.float64),
                                               write(mlp.W2), write(mlp.b2))
        layers.append(Layer(new_att, new_mlp))
    meta = {**model.meta, "embedded_wider": {"from_d": int(d0), "d": int(d), "rotation": "Haar"}}
    return Model(write(model.entity_embedding), write(model.relation_embedding),
                 write(model.full_unembedding()), tuple(layers),
                 None if model.position_embedding is None else write(model.position_embedding), meta=meta)


def reference_models(task: Task, names: tuple[str, ...] = ("G1", "A1")) -> dict[str, Model]:
    """The constructions whose probe values bracket a trained model's, built on ``task``.

    G1 (the geometry, every probe exact) and A1 (facts in per-fact MLP units), each built through the registry
    with its default options (``registry.get(name).builder(task)``).

    Parameters
    ----------
    task : Task
        The task to build them on.
    names : tuple of str
        Registry ids or names (case-insensitive).

    Returns
    -------
    dict of str to Model
        ``name -> model``.

    Raises
    ------
    InputError
        A name the registry does not know, or a task its builder refuses (including
        :class:`~georecall.errors.ConditionError`, a subclass: a task outside the construction's conditions).
    """

    return {name: registry.get(name).builder(task).model for name in names}


def probe_all(model: Model, task: Task, *, holdout: float = 0.25, subjects: int | None = 256,
              transfer_steps: int | None = 200, rng: np.random.Generator | int | None = None) -> dict:
    """The model's own accuracy, then every probe with one rng (``georecall probe``).

    In order: :func:`task_accuracy`, :func:`superposition_readout`, :func:`causal_intervention` (on subjects
    held out of the maps' fit; on every subject when ``holdout == 0``), :func:`unit_selectivity` and, unless
    ``transfer_steps`` is None, :func:`freeze_and_swap`. ``warnings`` lists an accuracy below 100% and an
    encoding fit that would interpolate without its penalty (:func:`warnings_for`; ``probe`` prints them
    first).

    Parameters
    ----------
    model : Model
        The model (E: N × d, U: N × d).
    task : Task
        Its task.
    holdout : float
        Share of subjects held out of the fits, in [0, 1).
    subjects : int or None
        At most this many subjects intervened on.
    transfer_steps : int or None
        Step budget of freeze-and-swap's fitted embeddings; None skips freeze-and-swap.
    rng : numpy.random.Generator or int or None
        Every probe's randomness, drawn in the order above.

    Returns
    -------
    dict
        ``accuracy``, ``warnings``, ``readout``, ``intervention``, ``selectivity`` and (with
        ``transfer_steps``) ``transfer``.

    Raises
    ------
    InputError
        From the probes: shapes that do not fit the task, a bad holdout or step budget, too few subjects.
    FloatingPointError
        Freeze-and-swap's training diverged.
    """
    rng = _as_rng(rng)
    check_model_shapes(model, task)
    accuracy = task_accuracy(model, task)
    readout = superposition_readout(model, task, holdout=holdout, rng=rng)
    maps = readout.pop("encoding_maps")
    held_out = readout.pop("test_index")
    out = {"accuracy": accuracy,
           "warnings": warnings_for(accuracy, {"encoding": readout["encoding_fit"]}),
           "readout": readout,
           "intervention": causal_intervention(model, task, maps, subjects=subjects, rng=rng,
                                               candidates=held_out if holdout > 0 else None),
           "selectivity": unit_selectivity(model, task)}
    if transfer_steps is not None:
        out["transfer"] = freeze_and_swap(model, task, maps, steps=transfer_steps, rng=rng)
    return out


# ------------------------------------------------------------------------------- hidden states of real LMs


def load_hidden_states(path: str) -> dict[str, np.ndarray]:
    """Read ``states``, ``attributes`` and the optional ``attribute_vectors`` from an ``.npz``, validated.

    Parameters
    ----------
    path : str
        An ``.npz`` with arrays ``states`` (n × width, float), ``attributes`` (n × R or n, integer ids) and,
        optionally, ``attribute_vectors`` (n_attributes × any width, float: row k is attribute id k's vector,
        e.g. a model's unembedding rows); read with ``allow_pickle=False``.

    Returns
    -------
    dict of str to ndarray
        ``states`` (n × width, float64), ``attributes`` (n × R, int64; a 1-D array becomes one column) and,
        when present, ``attribute_vectors`` (float64).

    Raises
    ------
    InputError
        An unreadable file or one that needs pickled objects, a missing array, ``states`` not a 2-D float
        array or with non-finite entries, ``attributes`` not a 1-D or 2-D integer array, different row
        counts, a negative id, or ``attribute_vectors`` not a 2-D finite float array with a row for every id.
    """
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read {path!r} as an .npz without pickled objects: {exc}") from None
    with data:
        missing = {"states", "attributes"} - set(data.files)
        if missing:
            raise InputError(f"{path!r} needs arrays 'states' (n × width) and 'attributes' (n × R); missing "
                             f"{sorted(missing)} (found {sorted(data.files)})")
        try:
            states, attributes = data["states"], data["attributes"]
            vectors = data["attribute_vectors"] if "attribute_vectors" in data.files else None
        except ValueError as exc:
            raise InputError(f"cannot read {path!r} without pickled objects: {exc}") from None
    if states.ndim != 2 or states.dtype.kind != "f":
        raise InputError(f"'states' must be a 2-D float array (n × width); got shape {states.shape}, "
                         f"dtype {states.dtype}")
    if attributes.ndim == 1:
        attributes = attributes[:, None]
    if attributes.ndim != 2 or attributes.dtype.kind not in "iu":
        raise InputError(f"'attributes' must be an integer array (n × R); got shape {attributes.shape}, "
                         f"dtype {attributes.dtype}")
    if attributes.shape[0] != states.shape[0]:
        raise InputError(f"'states' has {states.shape[0]} rows but 'attributes' has {attributes.shape[0]}")
    if not np.all(np.isfinite(states)):
        raise InputError("'states' has non-finite entries")
    if states.shape[0] < 2:
        raise InputError(f"'states' has {states.shape[0]} row(s): the probes need at least two")
    if attributes.min() < 0:
        raise InputError("'attributes' must be non-negative ids")
    out = {"states": states.astype(np.float64), "attributes": attributes.astype(np.int64)}
    if vectors is not None:
        if vectors.ndim != 2 or vectors.dtype.kind != "f" or vectors.shape[1] < 1:
            raise InputError(f"'attribute_vectors' must be a 2-D float array (n_attributes × width); got "
                             f"shape {vectors.shape}, dtype {vectors.dtype}")
        if not np.all(np.isfinite(vectors)):
            raise InputError("'attribute_vectors' has non-finite entries")
        if int(attributes.max()) >= vectors.shape[0]:
            raise InputError(f"'attributes' holds id {int(attributes.max())} but 'attribute_vectors' has "
                             f"only {vectors.shape[0]} rows (row k is the vector of id k)")
        out["attribute_vectors"] = vectors.astype(np.float64)
    return out


def _ridge_predict(X_fit: np.ndarray, Y_fit: np.ndarray, X_test: np.ndarray, rng) -> tuple[np.ndarray, dict]:
    """The probes' ridge rule (:func:`.ridge.fit_ridge_cv`) as a decoder for :func:`.power.decode_vectors`."""
    fit = fit_ridge_cv(X_fit, Y_fit, rng=rng)
    return fit.predict(X_test), fit.describe()


def _ridge_predict_many(X_fit: np.ndarray, Ys: list, X_test: np.ndarray, rng) -> list[np.ndarray]:
    """:func:`_ridge_predict` for several targets on the same rows (:func:`.ridge.fit_ridge_cv_many`: each
    target its own strength, one fold assignment): :func:`.power.decode_power`'s shared path."""
    return [fit.predict(X_test) for fit in fit_ridge_cv_many(X_fit, Ys, rng=rng)]


def linear_relational_encoding(states: np.ndarray, attributes: np.ndarray, *, holdout: float = 0.25,
                               rng: np.random.Generator | int | None = None,
                               attribute_vectors: np.ndarray | None = None) -> dict:
    """Per-relation decoding of hidden states into attribute vectors, its power, and the superposition R².

    - Per relation r: ridge regression (:func:`.ridge.fit_ridge_cv`: unpenalized intercept, strength chosen by
      5-fold cross-validation on the fit rows only) from the state (p = width features) to the vector of the
      row's attribute, n = the fit rows; the decoded attribute is the candidate nearest by cosine (both
      centred on the candidates' mean) among **all** candidates (:func:`.power.decode_vectors`). The vectors
      are ``attribute_vectors`` (every row a candidate) when given, else the one-hot of the relation's
      distinct ids (a decoder onto ids: it cannot score an id no fit row has). Accuracy on held-out rows
      whose attribute occurs in the fit rows (seen) and on the others (unseen) is reported apart, beside
      chance, the fit rows' majority attribute and the same decoder on shuffled labels.
    - Power (:func:`.power.decode_power`): the same decoder on states of the same shape (same n, width,
      labels, split and vectors) with the superposition planted at each SNR of :data:`HIDDEN_SNRS`; a
      relation is "not decodable" only when the real states fail the rule (accuracy ≥ max(chance, majority,
      shuffled) + :data:`.power.DECODE_MARGIN`) and the planted control is detected in at least
      :data:`.power.POWER_REQUIRED` of the draws at :data:`.power.NAMED_SNR`; otherwise "cannot tell", with
      the reason.
    - Superposition: the same ridge rule for the states (width targets) on the R concatenated attribute
      vectors (or one-hots), n = the fit rows; its R² (:func:`.ridge.r_squared`) on the held-out rows.

    Parameters
    ----------
    states : ndarray (n, width)
        Hidden states, as :func:`load_hidden_states` returns them.
    attributes : ndarray of int (n, R)
        Each row's attribute id per relation.
    holdout : float
        Share of rows held out, in (0, 1).
    rng : numpy.random.Generator or int or None
        The split, every fit's folds and the plantings.
    attribute_vectors : ndarray (n_attributes, q), optional
        Row k: the vector of attribute id k.

    Returns
    -------
    dict
        ``n``, ``width``, ``relations``, ``holdout``, ``decoder`` ("attribute vectors" or "ids"),
        ``superposition_r2``, ``superposition_fit``, ``probe_accuracy_mean`` and ``per_relation``
        (``relation``, ``attributes`` (distinct ids), ``candidates``, ``probe_accuracy``, ``chance``,
        ``majority_baseline``, ``shuffled``, ``unseen``, ``held_out``, ``accuracy_seen``,
        ``accuracy_unseen``, ``power``, ``verdict``, ``reason``, ``fit``).

    Raises
    ------
    InputError
        A holdout outside (0, 1), or fewer than two fit rows.
    """
    power = _power
    rng = _as_rng(rng)
    n, R = attributes.shape
    if not 0 < holdout < 1:
        raise InputError(f"holdout must be in (0, 1) (the decoders are scored on held-out rows), got "
                         f"{holdout}")
    fit, test = _split(n, holdout, rng)
    if len(fit) < 2 or len(test) < 1:
        raise InputError(f"the probes need at least two fit rows and one held-out row; {n} row(s) with "
                         f"holdout {holdout} leave {len(fit)} and {len(test)}")
    labels, vectors = [], []
    for r in range(R):
        if attribute_vectors is not None:
            labels.append(attributes[:, r])
            vectors.append(attribute_vectors)
        else:
            values, index = np.unique(attributes[:, r], return_inverse=True)
            labels.append(index.astype(np.int64))
            vectors.append(np.eye(values.size))
    groups = [test]
    pw = power.decode_power(labels, vectors, np.ones((n, R), dtype=bool), states.shape[1], [groups] * R,
                            rng=rng, predict=_ridge_predict, snrs=HIDDEN_SNRS,
                            predict_many=_ridge_predict_many)
    per_relation = []
    # every relation and its shuffled control on the same fit rows: one factorisation (fit_ridge_cv_many;
    # each target its own strength, one fold assignment)
    permuted = [labels[r][np.asarray(rng.permutation(n))] for r in range(R)]
    targets = list(labels) + permuted
    many = fit_ridge_cv_many(states[fit], [vectors[r % R][lab[fit]] for r, lab in enumerate(targets)],
                             rng=rng)
    scored = []
    for r, (lab, ridge) in enumerate(zip(targets, many)):
        P = np.zeros((n, vectors[r % R].shape[1]))
        P[test] = ridge.predict(states[test])
        scored.append(power.score_predictions(P, lab, vectors[r % R], groups, [ridge.describe()]))
    for r in range(R):
        res, shuffled = scored[r], scored[R + r]
        passed = res["accuracy"] >= max(res["chance"], res["majority"], shuffled["accuracy"]) + \
            power.DECODE_MARGIN
        word, why = power.verdict_word(bool(passed), pw[r], unseen=res["unseen"], n=res["n"])
        if word == "cannot tell" and attribute_vectors is None and res["unseen"]:
            why += "; with ids only (no attribute_vectors) an id no fit row has cannot be decoded"
        per_relation.append({"relation": r, "attributes": int(np.unique(attributes[:, r]).size),
                             "candidates": int(vectors[r].shape[0]), "probe_accuracy": res["accuracy"],
                             "chance": res["chance"], "majority_baseline": res["majority"],
                             "shuffled": shuffled["accuracy"], "held_out": res["n"], "unseen": res["unseen"],
                             "accuracy_seen": res["accuracy_seen"], "accuracy_unseen": res["accuracy_unseen"],
                             "power": pw[r], "verdict": word, "reason": why, "fit": res["fits"][0]})
    X = np.hstack([vectors[r][labels[r]] for r in range(R)])
    superposition = fit_ridge_cv(X[fit], states[fit], rng=rng)
    return {"n": int(n), "width": int(states.shape[1]), "relations": int(R), "holdout": holdout,
            "decoder": "attribute vectors" if attribute_vectors is not None else "ids",
            "superposition_r2": r_squared(states[test], superposition.predict(X[test])),
            "superposition_fit": superposition.describe(),
            "probe_accuracy_mean": float(np.mean([p["probe_accuracy"] for p in per_relation])),
            "power_snr": power.NAMED_SNR, "power_required": power.POWER_REQUIRED,
            "per_relation": per_relation}
