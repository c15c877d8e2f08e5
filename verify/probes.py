"""Probes of a Model's mechanism (THEORY.md §5). They run on *any* Model through THE forward pass: constructed
ones, where the answers are known exactly (G1 gives R² = 1 and 100% everywhere), and trained ones, where they
report what they measure.

Notation: ``e_s`` entity embedding, ``u_j = U[j]`` the unembedding (attribute) vector of answer j.

- **Superposition readout.** Encoding fit: ``e_s ≈ c + Σ_r A_r u_{π_r(s)}`` (one d×d map per relation, least
  squares over subjects) and its R² on held-out subjects. Decoding fit per relation:
  ``u_{π_r(s)} ≈ e_s B_r + c_r`` and its held-out R²; the probe's accuracy is that of
  ``argmax_j <u_j, ê>``.
- **Causal intervention.** ``e'_s = e_s + A_r (u_j − u_{π_r(s)})`` for a random ``j ≠ π_r(s)``: how often the
  query (s, r) now answers j ("follows") and how often every other relation's answer stays what the model
  answered before the intervention.
- **Unit selectivity.** Mean activation of every hidden unit by queried relation; a unit's selectivity is the
  share of its activation in its top relation (1 = fires for one relation only); a unit is relation-selective at
  ``>= 0.9``. Units never active are counted apart.
- **Freeze and swap.** New random bijections; subject embeddings rebuilt (a) in closed form from the fitted
  maps, ``e'_s = c + Σ_r A_r u_{π'_r(s)}``, (b) by training only the entity embeddings; accuracy on every new
  query, everything else frozen.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from georecall.constructions.model import Model, forward, predict
from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.theory.tasks import Task, _as_rng, random_task
from georecall.verify.check import check_queries


def require_fit(model: Model, task: Task) -> None:
    """The probes read attributes as entity ids (shared attributes): refuse a model that does not match."""
    if model.n_entities < task.N or model.n_relations != task.R or model.n_out != task.N:
        raise InputError(f"model (N={model.n_entities}, R={model.n_relations}, n_out={model.n_out}) does not "
                         f"fit the task (N={task.N}, R={task.R}); the probes need shared attributes (n_out = N)")


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
    """Least squares with an intercept column: returns W of shape (features + 1, targets)."""
    X1 = np.hstack([X, np.ones((X.shape[0], 1))])
    return np.linalg.lstsq(X1, Y, rcond=None)[0]


def _apply(W: np.ndarray, X: np.ndarray) -> np.ndarray:
    return X @ W[:-1] + W[-1]


def r_squared(Y: np.ndarray, Y_hat: np.ndarray) -> float:
    """``1 − SS_res / SS_tot`` over all entries (SS_tot about the column means); 1.0 when Y is constant and
    predicted exactly."""
    ss_res = float(np.sum((Y - Y_hat) ** 2))
    ss_tot = float(np.sum((Y - Y.mean(axis=0)) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else 0.0
    return 1.0 - ss_res / ss_tot


def _encoding_design(model: Model, table: np.ndarray) -> np.ndarray:
    """Rows ``[u_{π_1(s)}, ..., u_{π_R(s)}]`` (N × R·d) for a task table (R, N)."""
    U = np.asarray(model.unembedding, dtype=np.float64)
    return U[table.T].reshape(table.shape[1], -1)


def superposition_readout(model: Model, task: Task, *, holdout: float = 0.25,
                          rng: np.random.Generator | int | None = None) -> dict:
    """Encoding R² (overall) and per-relation decoding R² and probe accuracy, on held-out subjects."""
    rng = _as_rng(rng)
    E = np.asarray(model.entity_embedding[: task.N], dtype=np.float64)
    U = np.asarray(model.unembedding, dtype=np.float64)
    fit, test = _split(task.N, holdout, rng)
    X = _encoding_design(model, task.table)
    W = _lstsq(X[fit], E[fit])
    encoding_r2 = r_squared(E[test], _apply(W, X[test]))
    per_relation = []
    for r in range(task.R):
        target = U[task.table[r]]
        B = _lstsq(E[fit], target[fit])
        decoded = _apply(B, E[test])
        accuracy = float(np.mean((decoded @ U.T).argmax(axis=1) == task.table[r, test]))
        per_relation.append({"relation": r, "r2": r_squared(target[test], decoded), "probe_accuracy": accuracy})
    return {"encoding_r2": encoding_r2,
            # the fitted maps could interpolate any embeddings: the held-out R² is then the only honest one
            "underdetermined": bool(np.linalg.matrix_rank(np.hstack([X[fit], np.ones((fit.size, 1))])) >= fit.size),
            "decoding_r2_mean": float(np.mean([p["r2"] for p in per_relation])),
            "probe_accuracy_mean": float(np.mean([p["probe_accuracy"] for p in per_relation])),
            "per_relation": per_relation, "fit_subjects": int(fit.size), "test_subjects": int(test.size),
            "holdout": holdout, "encoding_maps": W}


def _with_entities(model: Model, E: np.ndarray) -> Model:
    """The same model with a different entity table (e.g. extra, intervened rows appended)."""
    return replace(model, entity_embedding=np.asarray(E, dtype=model.entity_embedding.dtype))


def causal_intervention(model: Model, task: Task, encoding_maps: np.ndarray, *, subjects: int | None = 256,
                        rng: np.random.Generator | int | None = None) -> dict:
    """Swap relation r's component of ``e_s`` for another attribute's and watch every relation's answer.

    ``subjects`` caps how many subjects are intervened on (all if None); each gets one intervention per
    relation. The intervened embeddings are extra rows of the entity table, run through THE forward pass.
    """
    rng = _as_rng(rng)
    N, R = task.N, task.R
    d = model.d
    chosen = np.sort(rng.choice(N, size=min(subjects or N, N), replace=False))
    A = encoding_maps[:-1].reshape(R, d, d)  # A[r]: attribute vector -> its contribution to e_s (row form)
    U = np.asarray(model.unembedding, dtype=np.float64)
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


def unit_selectivity(model: Model, task: Task, *, layer: int = -1, threshold: float = 0.9) -> dict:
    """Mean activation of each hidden unit per queried relation (over all subjects) and its selectivity."""
    tokens, _ = single_hop_queries(task)
    layer = layer % len(model.layers)
    mlp = model.layers[layer].mlp
    if mlp is None:
        raise InputError(f"layer {layer} has no MLP")
    m = mlp.width
    totals = np.zeros((task.R, m))
    for start in range(0, tokens.shape[0], 4096):
        part = tokens[start : start + 4096]
        _, trace = forward(model, part, trace=True)
        hidden = trace.hidden[layer][:, -1]  # (B, m) at the read-out position
        np.add.at(totals, part[:, 0] - model.n_entities, hidden)
    mean = totals / task.N  # (R, m)
    mass = mean.sum(axis=0)
    active = mass > 0
    selectivity = np.zeros(m)
    selectivity[active] = mean[:, active].max(axis=0) / mass[active]
    preferred = mean.argmax(axis=0)
    return {"units": int(m), "active_units": int(active.sum()),
            "selective_fraction": float(np.mean(selectivity[active] >= threshold)) if active.any() else 0.0,
            "mean_selectivity": float(selectivity[active].mean()) if active.any() else 0.0,
            "chance_selectivity": 1.0 / task.R, "threshold": threshold,
            "units_per_relation": np.bincount(preferred[active], minlength=task.R).tolist()}


def freeze_and_swap(model: Model, task: Task, encoding_maps: np.ndarray, *, steps: int = 200, lr: float = 1e-2,
                    rng: np.random.Generator | int | None = None) -> dict:
    """Transfer to brand-new bijections with the MLP, attention, relation embeddings and U frozen."""
    from georecall.verify.train import GROUPS, train

    rng = _as_rng(rng)
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
    return {"closed_form_accuracy": closed_result.accuracy, "closed_form_min_margin": closed_result.min_margin,
            "fitted_accuracy": fitted.accuracy, "fitted_steps": trained.steps, "chance": 1.0 / task.N}


def probe_all(model: Model, task: Task, *, holdout: float = 0.25, subjects: int | None = 256,
              transfer_steps: int | None = 200, rng: np.random.Generator | int | None = None) -> dict:
    """Every probe, with one rng: readout, intervention, selectivity and (unless ``transfer_steps`` is None)
    freeze-and-swap."""
    rng = _as_rng(rng)
    require_fit(model, task)
    readout = superposition_readout(model, task, holdout=holdout, rng=rng)
    readout.pop("encoding_maps")  # fit on the training split only; intervention and transfer use all subjects
    full_maps = superposition_readout(model, task, holdout=0.0, rng=rng)["encoding_maps"]
    out = {"readout": readout,
           "intervention": causal_intervention(model, task, full_maps, subjects=subjects, rng=rng),
           "selectivity": unit_selectivity(model, task)}
    if transfer_steps is not None:
        out["transfer"] = freeze_and_swap(model, task, full_maps, steps=transfer_steps, rng=rng)
    return out


# ------------------------------------------------------------------------------- hidden states of real LMs


def load_hidden_states(path: str) -> dict[str, np.ndarray]:
    """Read ``states`` (n × width, float) and ``attributes`` (n × R, integer ids) from an ``.npz`` the user
    supplies (``allow_pickle=False``), validating names, shapes and dtypes with clear messages."""
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
    if attributes.min() < 0:
        raise InputError("'attributes' must be non-negative ids")
    return {"states": states.astype(np.float64), "attributes": attributes.astype(np.int64)}


def linear_relational_encoding(states: np.ndarray, attributes: np.ndarray, *, holdout: float = 0.25,
                               rng: np.random.Generator | int | None = None) -> dict:
    """Per relation: a least-squares linear probe from hidden state to the one-hot attribute, scored by
    held-out accuracy (argmax), beside the majority-class baseline; and the R² of reconstructing the states
    linearly from the R one-hot attributes (a superposition of per-relation attribute vectors)."""
    rng = _as_rng(rng)
    n, R = attributes.shape
    fit, test = _split(n, holdout, rng)
    per_relation = []
    onehots = []
    for r in range(R):
        labels = attributes[:, r]
        values, index = np.unique(labels, return_inverse=True)
        onehot = np.eye(values.size)[index]
        onehots.append(onehot)
        W = _lstsq(states[fit], onehot[fit])
        accuracy = float(np.mean(_apply(W, states[test]).argmax(axis=1) == index[test]))
        majority = float(np.mean(index[test] == np.bincount(index[fit], minlength=values.size).argmax()))
        per_relation.append({"relation": r, "attributes": int(values.size), "probe_accuracy": accuracy,
                             "majority_baseline": majority})
    X = np.hstack(onehots)
    W = _lstsq(X[fit], states[fit])
    return {"n": int(n), "width": int(states.shape[1]), "relations": int(R), "holdout": holdout,
            "superposition_r2": r_squared(states[test], _apply(W, X[test])),
            "probe_accuracy_mean": float(np.mean([p["probe_accuracy"] for p in per_relation])),
            "per_relation": per_relation}
