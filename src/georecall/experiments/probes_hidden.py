"""Probes of a real language model's hidden states (``georecall probe-hidden``): per-relation decoding of the
states into attribute vectors, its power against planted controls, and the superposition R²
(:func:`linear_relational_encoding`), on states read from an ``.npz`` (:func:`load_hidden_states`). The same
ridge rule as the probes of a Model (:mod:`.probes`, :mod:`.ridge`).
"""

from __future__ import annotations

import numpy as np

from georecall.errors import InputError
from georecall.experiments import power as _power
from georecall.experiments.probes import holdout_split, ridge_predict, ridge_predict_many
from georecall.experiments.ridge import fit_ridge_cv, fit_ridge_cv_many, r_squared
from georecall.theory.tasks import as_rng

__all__ = ["HIDDEN_SNRS", "linear_relational_encoding", "load_hidden_states"]

HIDDEN_SNRS = (0.3, 1.0, 3.0)  # probe-hidden's planted strengths (the named one, 1, in the middle)


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
    rng = as_rng(rng)
    n, R = attributes.shape
    if not 0 < holdout < 1:
        raise InputError(f"holdout must be in (0, 1) (the decoders are scored on held-out rows), got "
                         f"{holdout}")
    fit, test = holdout_split(n, holdout, rng)
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
                            rng=rng, predict=ridge_predict, snrs=HIDDEN_SNRS,
                            predict_many=ridge_predict_many)
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
