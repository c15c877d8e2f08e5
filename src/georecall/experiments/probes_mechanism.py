"""The mechanism study's discriminating probes (issue 12; :mod:`.study`): :func:`mechanism_probes` runs them
all, with the probes of :mod:`.probes`, and returns a flat summary (:data:`SUMMARY_FIELDS`). Notation as in
:mod:`.probes`.

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
- **Relation selectivity** (:func:`.probes.unit_selectivity`): per unit u, ``M[r, u]`` = mean activation over
  the queries of relation r; selectivity ``max_r M[r, u] / Σ_r M[r, u]``, selective at ``>= threshold`` (0.9,
  chance 1/R); the gated mass ``Σ_u max_r M[r, u] / Σ_{r,u} M[r, u]`` (the share of all hidden activation that
  sits in units preferring the asked relation); the breadth of a unit, the fraction of its preferred
  relation's queries on which it is active (G1: about 1/2, a per-fact unit of A1: 1/N).
- **Functional zero-shot** (:func:`functional_transfer`): a per-relation linear encoder
  ``E(π) = c + Σ_r U[π_r] A_r`` trained by gradient descent *through the frozen network* on task A (start:
  the forward fit's maps), then applied unchanged to a new task B: accuracy on A and, zero-shot, on B.
- **Superposition power** (:func:`superposition_power`): how often the forward fit finds a planted
  superposition of the model's own shape (the power of a negative superposition verdict).

:func:`embed_wider` puts a model into a wider, randomly rotated residual with the same logits: the positive
control of these probes at any width. Every fit is ridge regression with its strength chosen by 5-fold
cross-validation on the fit rows only (:mod:`.ridge`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from georecall.constructions.model import MLP, Attention, Layer, Model
from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.experiments import power as _power
from georecall.experiments.probes import (
    SELECTIVITY_THRESHOLD,
    apply_affine,
    causal_intervention,
    check_model_shapes,
    encoding_design,
    freeze_and_swap,
    holdout_split,
    require_fit,
    superposition_readout,
    task_accuracy,
    unit_selectivity,
    warnings_for,
    with_entities,
)
from georecall.experiments.ridge import fit_ridge_cv, fit_ridge_cv_many, r_squared
from georecall.theory.seeds import rng as seed_rng
from georecall.theory.tasks import Task, as_rng, random_task
from georecall.training.backward import loss_and_grads
from georecall.training.train import GROUPS, adam
from georecall.verify.checking.exact import evaluate  # the weights' own, exact

__all__ = [
    "SUMMARY_FIELDS",
    "attribute_fits",
    "embed_wider",
    "functional_transfer",
    "inverse_table",
    "mechanism_probes",
    "superposition_power",
]

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
    X = encoding_design(model, task.table)
    labels = [task.table[r] for r in range(task.R)]
    hits = 0
    for _ in range(draws):
        E = _power.planted_states(labels, [U] * task.R, np.ones((task.N, task.R), dtype=bool), model.d, snr,
                                  rng)
        forward = fit_ridge_cv(X[fit], E[fit], rng=rng)
        hits += r_squared(E[test], forward.predict(X[test])) >= threshold
    return hits / draws


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
    rng = as_rng(rng)
    check_model_shapes(model, task)
    retained = {"E": 1.0, "U": 1.0, **(retained or {})}
    N, R = task.N, task.R
    E = np.asarray(model.entity_embedding[:N], dtype=np.float64)
    U = np.asarray(model.full_unembedding()[:N], dtype=np.float64)
    subjects_fit, subjects_test = holdout_split(N, holdout, rng)
    attributes_fit, attributes_test = holdout_split(N, holdout, rng)
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
        return with_entities(model, np.vstack([E, extra]) if extra.size else E)

    tokens_a, answers_a = single_hop_queries(task)
    tokens_b, answers_b = single_hop_queries(new_task)
    params = {"A": maps[:-1].reshape(R, d, d).copy(), "c": maps[-1].copy()}
    start_accuracy = evaluate(with_E(encode(params, task.table)), tokens_a, answers_a).accuracy
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
    accuracy_a = evaluate(with_E(encode(final, task.table)), tokens_a, answers_a).accuracy
    zero_shot = evaluate(with_E(encode(final, new_task.table)), tokens_b, answers_b).accuracy
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
        At most this many held-out subjects intervened on (:func:`.probes.causal_intervention`).
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
        closed = with_entities(model, np.vstack([apply_affine(maps, encoding_design(model, new_task.table)),
                                                  np.asarray(model.entity_embedding[task.N :])]))
        transfer = {"closed_form_accuracy": evaluate(closed, *single_hop_queries(new_task)).accuracy,
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

    rng = as_rng(rng)
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
