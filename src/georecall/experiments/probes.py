"""Probes of a Model's mechanism (docs/theory.md, "Gradient descent"). They run on *any* Model through THE
forward pass: constructed ones, where the answers are known exactly (G1 gives R² = 1 and 100% everywhere), and
trained ones, where they report what they measure. :func:`probe_all` runs them (``georecall probe``); the
mechanism study's discriminating probes are in :mod:`.probes_mechanism`, the probes of a real LM's hidden
states in :mod:`.probes_hidden`.

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

Every fit is ridge regression with its strength chosen by 5-fold cross-validation on the fit rows only
(:mod:`.ridge`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from georecall.constructions import registry
from georecall.constructions.decoding import predict
from georecall.constructions.forward import forward
from georecall.constructions.model import Model
from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.experiments import power as _power
from georecall.experiments.ridge import RidgeFit, fit_ridge_cv, fit_ridge_cv_many, r_squared
from georecall.theory.tasks import Task, as_rng, random_task
from georecall.training.train import GROUPS, train
from georecall.verify.checking.exact import evaluate  # the weights' own, exact

__all__ = [
    "SELECTIVITY_THRESHOLD",
    "apply_affine",
    "causal_intervention",
    "check_model_shapes",
    "encoding_design",
    "freeze_and_swap",
    "holdout_split",
    "probe_all",
    "r_squared",
    "reference_models",
    "require_fit",
    "ridge_predict",
    "ridge_predict_many",
    "superposition_readout",
    "task_accuracy",
    "unit_selectivity",
    "warnings_for",
    "with_entities",
]

SELECTIVITY_THRESHOLD = 0.9  # relation-selective unit: >= 90% of its mean activation on one relation


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
    (:func:`~georecall.verify.checking.exact.evaluate`).

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
    result = evaluate(model, tokens, answers)
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


def holdout_split(n: int, holdout: float, rng) -> tuple[np.ndarray, np.ndarray]:
    """Random train / held-out index split (held-out = fit set when ``holdout == 0``).

    Parameters
    ----------
    n : int
        Rows.
    holdout : float
        The held-out share, in [0, 1).
    rng : numpy.random.Generator

    Raises
    ------
    InputError
        ``holdout`` outside [0, 1).
    """
    if not 0 <= holdout < 1:
        raise InputError(f"holdout must be in [0, 1), got {holdout}")
    order = rng.permutation(n)
    n_test = int(round(holdout * n))
    if n_test == 0:
        return order, order
    return order[n_test:], order[:n_test]


def apply_affine(W: np.ndarray, X: np.ndarray) -> np.ndarray:
    """``X @ W[:-1] + W[-1]``: an affine map stored with its bias as the last row.

    Parameters
    ----------
    W : numpy.ndarray
        The map, ``(p + 1, q)``.
    X : numpy.ndarray
        The rows, ``(n, p)``.
    """
    return X @ W[:-1] + W[-1]


def encoding_design(model: Model, table: np.ndarray) -> np.ndarray:
    """Rows ``[u_{π_1(s)}, ..., u_{π_R(s)}]`` (N × R·d) for a task table (R, N).

    Parameters
    ----------
    model : Model
    table : numpy.ndarray
        The task table, ``(R, N)``.
    """
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
    ``forward`` reuse a split and an encoding fit already made on it
    (:func:`.probes_mechanism.mechanism_probes`). ``encoding_maps`` (``(R·d + 1) × d``, fitted on the fit
    subjects) are what the interventions and the closed-form transfer apply.

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
    rng = as_rng(rng)
    check_model_shapes(model, task)
    E = np.asarray(model.entity_embedding[: task.N], dtype=np.float64)
    U = np.asarray(model.full_unembedding(), dtype=np.float64)
    fit, test = holdout_split(task.N, holdout, rng) if split is None else split
    X = encoding_design(model, task.table)
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
                             predict=ridge_predict, predict_many=ridge_predict_many)
    for r, entry in enumerate(per_relation):
        res = _power.decode_vectors(E, labels[r], U, [test], rng=prng, predict=ridge_predict)
        word, why = _power.verdict_word(_power.detected(res), pw[r], unseen=res["unseen"], n=res["n"])
        entry.update({"vector_accuracy": res["accuracy"], "held_out": res["n"], "unseen": res["unseen"],
                      "accuracy_seen": res["accuracy_seen"], "accuracy_unseen": res["accuracy_unseen"],
                      "chance": res["chance"], "power": pw[r], "verdict": word, "reason": why})


def with_entities(model: Model, E: np.ndarray) -> Model:
    """The same model with a different entity table (e.g. extra, intervened rows appended).

    Parameters
    ----------
    model : Model
    E : numpy.ndarray
        The new entity table (cast to the model's dtype).
    """
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
    rng = as_rng(rng)
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
    extended = with_entities(model, np.vstack([E, intervened]))
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
    full batch, for at most ``steps`` Adam steps (:func:`~georecall.training.train.train`; it stops at
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
        ``steps`` not a positive integer (from the trainer), or the rebuilt embeddings overflow float64.
    FloatingPointError
        Training (b) diverged (a non-finite loss).
    """

    rng = as_rng(rng)
    if new_task is None:
        new_task = random_task(task.N, task.R, rng)
    tokens, answers = single_hop_queries(new_task)
    X = encoding_design(model, new_task.table)
    with np.errstate(over="ignore", invalid="ignore"):
        rebuilt = apply_affine(encoding_maps, X)
    if not np.isfinite(rebuilt).all():  # the fit's maps times the design: the model's scale, not its file
        raise InputError("the embeddings rebuilt for the new bijections overflow float64 (the superposition "
                         f"maps reach {np.abs(encoding_maps).max():.3g}): this model's weights are too large "
                         "for the closed-form transfer")
    extra = np.asarray(model.entity_embedding[task.N :], dtype=np.float64)
    closed = with_entities(model, np.vstack([rebuilt, extra]))
    closed_result = evaluate(closed, tokens, answers)
    with np.errstate(over="ignore", invalid="ignore"):
        spread = float(rebuilt.std())
    if not np.isfinite(spread):  # its squares overflow: the same standard deviation, of values scaled to ≤ 1
        scale = float(np.abs(rebuilt).max())
        spread = scale * float((rebuilt / scale).std())
    start = with_entities(model, np.vstack([rng.standard_normal(rebuilt.shape) * spread, extra]))
    trained = train(start, tokens, answers, steps=steps, lr=lr, rng=rng,
                    frozen=tuple(g for g in GROUPS if g != "entity_embedding"),
                    dtype=model.entity_embedding.dtype)
    fitted = evaluate(trained.model, tokens, answers)
    return {"closed_form_accuracy": closed_result.accuracy,
            "closed_form_min_margin": closed_result.min_margin, "fitted_accuracy": fitted.accuracy,
            "fitted_steps": trained.steps, "chance": 1.0 / task.N}


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
    rng = as_rng(rng)
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


def ridge_predict(X_fit: np.ndarray, Y_fit: np.ndarray, X_test: np.ndarray, rng) -> tuple[np.ndarray, dict]:
    """The probes' ridge rule (:func:`.ridge.fit_ridge_cv`) as a decoder for :func:`.power.decode_vectors`.

    Parameters
    ----------
    X_fit, Y_fit : numpy.ndarray
        The fit rows and their targets.
    X_test : numpy.ndarray
        The rows to predict.
    rng : numpy.random.Generator
        The cross-validation folds' stream.
    """
    fit = fit_ridge_cv(X_fit, Y_fit, rng=rng)
    return fit.predict(X_test), fit.describe()


def ridge_predict_many(X_fit: np.ndarray, Ys: list, X_test: np.ndarray, rng) -> list[np.ndarray]:
    """:func:`ridge_predict` for several targets on the same rows (:func:`.ridge.fit_ridge_cv_many`: each
    target its own strength, one fold assignment): :func:`.power.decode_power`'s shared path.

    Parameters
    ----------
    X_fit : numpy.ndarray
        The fit rows.
    Ys : list of numpy.ndarray
        The targets.
    X_test : numpy.ndarray
        The rows to predict.
    rng : numpy.random.Generator
        The cross-validation folds' stream.
    """
    return [fit.predict(X_test) for fit in fit_ridge_cv_many(X_fit, Ys, rng=rng)]
