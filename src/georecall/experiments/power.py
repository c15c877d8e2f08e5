"""Decoding into attribute vectors, and the power of a probe: a positive control of the same shape.

A probe's negative verdict ("relation r is not linearly decodable") says something about the model only if
the probe could have seen the mechanism on data of exactly that shape. Two things cap a probe before any
state is read: a decoder onto class ids cannot score a class it never fitted, and under a bijection every
held-out subject's answer is such a class; ridge onto target vectors predicts inside the span of the fit
rows' targets, so an unseen answer is reachable only when the fit targets span its direction. Both are
properties of the *shape* (subjects, labels, split, candidate vectors, width), so they are measured on it:

- :func:`decode_vectors`: ridge (:func:`georecall.experiments.ridge.cross_fit`: unpenalized intercept,
  strength by 5-fold cross-validation on the fit rows only) from the state to the vector of the row's
  attribute, one fit per held-out group; the decoded answer is the candidate whose vector is nearest by
  cosine, both centred on the mean of *all* candidates' vectors, ranked among all C candidates (not only
  those in the fit rows). Accuracy is reported on held-out rows whose answer occurs in their fit rows
  (*seen*) and on those whose answer does not (*unseen*) separately.
- :func:`planted_states`: ``h_s = Σ_r present_r(s)·(V_r[label_r(s)] − mean) A_r / scale_r + noise``, with
  ``A_r`` a Gaussian q_r × p map, each relation's term scaled to mean squared norm 1 over its subjects and
  isotropic Gaussian noise of mean squared norm ``1 / snr``: the geometry the paper predicts, planted at a
  stated signal-to-noise ratio, with the real run's labels, presence pattern and candidate vectors.
- :func:`decode_power`: the detection rate of the decode rule (accuracy ≥ max(chance, majority) + margin)
  on ``draws`` plantings at each SNR of :data:`SNRS` (the positive control) and on the same plantings with
  the labels permuted among the relation's rows (the negative control: the states carry no information
  about the labels scored).

A negative verdict is allowed only where the positive control is detected in at least :data:`POWER_REQUIRED`
of the draws at the named strength (:func:`verdict_word`); otherwise the verdict is "cannot tell", with the
reason. The constants were declared before any run that uses them."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from georecall.experiments.ridge import cross_fit, cross_fit_batch, cross_fit_many, inner_parts

__all__ = ["DECODE_MARGIN", "DRAWS", "NAMED_SNR", "POWER_REQUIRED", "SNRS", "decode_power", "decode_vectors",
           "decode_vectors_many", "decode_vectors_stack", "detected", "planted_states", "score_predictions",
           "verdict_word"]

SNRS: tuple[float, ...] = (0.1, 0.3, 1.0, 3.0, 10.0)  # planted signal / noise (mean squared norms)
NAMED_SNR = 1.0  # the strength a negative verdict is stated at: the signal as strong as the noise
POWER_REQUIRED = 0.9  # a negative verdict needs the planted control detected in >= 90% of the draws
DECODE_MARGIN = 0.20  # detected / decodable: accuracy >= max(chance, majority) + 0.20
DRAWS = 10  # plantings per SNR


def decode_vectors(H: np.ndarray, labels: np.ndarray, V: np.ndarray, groups: Sequence[np.ndarray], *,
                   rng: np.random.Generator, predict: Callable | None = None) -> dict:
    """Held-out decoding of each row's attribute by ridge onto attribute vectors, ranked among all candidates.

    Parameters
    ----------
    H : (n, p) array
        One state per row.
    labels : (n,) int array
        Each row's attribute (an index into ``V``).
    V : (C, q) array
        One vector per candidate attribute (every candidate, also those no row has).
    groups : sequence of int arrays
        Disjoint held-out groups; each is decoded by a fit on every row outside it (rows outside every
        group are not scored).
    rng : numpy.random.Generator
        Every fit's inner folds.
    predict : callable, optional
        ``predict(H_fit, Y_fit, H_test, rng) -> (predictions, fit description or None)``, another ridge
        rule; default :func:`~georecall.experiments.ridge.cross_fit` over all groups at once.

    Returns
    -------
    dict
        ``n`` (rows scored), ``classes`` (C), ``chance`` (1 / C), ``accuracy``, ``majority`` (each group's
        fit rows' most frequent answer, scored on the group), ``unseen`` (scored rows whose answer does not
        occur in their fit rows), ``accuracy_seen`` and ``accuracy_unseen`` (None where there is no such
        row), ``correct`` (bool per scored row, in
        the order of the concatenated groups), ``fits`` (the descriptions ``predict`` returned).

    Raises
    ------
    InputError
        A group that leaves fewer than two fit rows (:func:`~georecall.experiments.ridge.cross_fit`).
    """
    H = np.asarray(H, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    n = H.shape[0]
    fits = []
    if predict is None:
        predictions = cross_fit(H, V[labels], list(groups), rng=rng)["predictions"]
    else:
        predictions = np.zeros((n, V.shape[1]))
        for test in groups:
            fit = np.setdiff1d(np.arange(n), test)
            predictions[test], described = predict(H[fit], V[labels[fit]], H[test], rng)
            fits.append(described)
    return score_predictions(predictions, labels, V, groups, fits)


def decode_vectors_many(H: np.ndarray, labels_list: Sequence[np.ndarray], V: np.ndarray,
                        groups: Sequence[np.ndarray], *, rng: np.random.Generator) -> list[dict]:
    """:func:`decode_vectors` (default ridge) of several labelings of the same rows, e.g. the real labels and
    their shuffled control: each result equals :func:`decode_vectors` on that labeling with a generator in
    the same state (the same inner folds; :func:`~georecall.experiments.ridge.cross_fit_many` shares
    the factorisations).

    Parameters
    ----------
    H, V, groups, rng
        As :func:`decode_vectors`.
    labels_list : sequence of (n,) int arrays
        The labelings.

    Returns
    -------
    list of dict
        One :func:`decode_vectors` result per labeling.
    """
    H = np.asarray(H, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    labs = [np.asarray(lab, dtype=np.int64) for lab in labels_list]
    fitted = cross_fit_many(H, [V[lab] for lab in labs], list(groups), rng=rng)
    return [score_predictions(f["predictions"], lab, V, groups) for f, lab in zip(fitted, labs)]


def decode_vectors_stack(Hs: np.ndarray, labels_list: Sequence[np.ndarray], V: np.ndarray,
                         groups: Sequence[np.ndarray], *, rng: np.random.Generator) -> list[list[dict]]:
    """:func:`decode_vectors_many` of a stack of states of the same rows (e.g. one per layer), all fitted at
    once (:func:`~georecall.experiments.ridge.cross_fit_batch`): entry ``[b][t]`` is what
    :func:`decode_vectors` gives ``Hs[b]`` and labeling t with a generator in ``rng``'s state (every problem
    the same inner folds, drawn once; ``rng`` is left as one such call leaves it).

    Parameters
    ----------
    Hs : (B, n, p) array
        The states, one (n, p) block per problem.
    labels_list : sequence of (n,) int arrays
        The labelings scored on every problem.
    V, groups, rng
        As :func:`decode_vectors`.

    Returns
    -------
    list (per problem) of lists (per labeling) of dict
        :func:`decode_vectors` results.
    """
    Hs = np.asarray(Hs, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    labs = [np.asarray(lab, dtype=np.int64) for lab in labels_list]
    groups = [np.asarray(g) for g in groups]
    inner = inner_parts(Hs.shape[1], groups, rng=rng)
    fitted = cross_fit_batch(Hs, [V[lab] for lab in labs], [groups] * Hs.shape[0], [inner] * Hs.shape[0])
    scored = [_score_stack(np.stack([row[t]["predictions"] for row in fitted]), lab, V, groups)
              for t, lab in enumerate(labs)]
    return [[scored[t][b] for t in range(len(labs))] for b in range(Hs.shape[0])]


def score_predictions(predictions: np.ndarray, labels: np.ndarray, V: np.ndarray,
                      groups: Sequence[np.ndarray], fits: list | None = None) -> dict:
    """Score held-out predictions of attribute vectors: :func:`decode_vectors`'s result from its
    predictions (rows of ``predictions`` outside every group are not read).

    Parameters
    ----------
    predictions : (n, q) array
        Each row's predicted vector (by a fit that did not see the row's group).
    labels, V, groups
        As :func:`decode_vectors`.
    fits : list, optional
        The fits' descriptions (returned as ``fits``).

    Returns
    -------
    dict
        As :func:`decode_vectors`.
    """
    V = np.asarray(V, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    n = labels.size
    m = V.mean(axis=0)
    C = V - m
    C = C / np.maximum(np.linalg.norm(C, axis=1, keepdims=True), 1e-300)
    correct, seen, majority = [], [], []
    for test in groups:
        fit = np.setdiff1d(np.arange(n), test)
        P = predictions[test] - m
        P = P / np.maximum(np.linalg.norm(P, axis=1, keepdims=True), 1e-300)
        correct.append((P @ C.T).argmax(axis=1) == labels[test])
        seen.append(np.isin(labels[test], labels[fit]))
        majority.append(labels[test] == int(np.bincount(labels[fit], minlength=V.shape[0]).argmax()))
    ok = np.concatenate(correct)
    sn = np.concatenate(seen)
    return {"n": int(ok.size), "classes": int(V.shape[0]), "chance": 1.0 / V.shape[0],
            "accuracy": float(ok.mean()), "majority": float(np.concatenate(majority).mean()),
            "unseen": int((~sn).sum()),
            "accuracy_seen": float(ok[sn].mean()) if sn.any() else None,
            "accuracy_unseen": float(ok[~sn].mean()) if (~sn).any() else None,
            "correct": ok, "fits": list(fits or [])}


def _score_stack(predictions: np.ndarray, labels: np.ndarray, V: np.ndarray,
                 groups: Sequence[np.ndarray]) -> list[dict]:
    """:func:`score_predictions` of a stack of problems on the same rows and groups: ``predictions``
    (B, n, q), ``labels`` (n,) shared or (B, n) (the same operations on each problem's slice)."""
    V = np.asarray(V, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64)
    B, n = predictions.shape[0], predictions.shape[1]
    m = V.mean(axis=0)
    C = V - m
    C = C / np.maximum(np.linalg.norm(C, axis=1, keepdims=True), 1e-300)
    order = np.concatenate([np.asarray(t) for t in groups])
    P = predictions[:, order] - m
    P = P / np.maximum(np.linalg.norm(P, axis=2, keepdims=True), 1e-300)
    lab = np.broadcast_to(labels, (B, n))
    ok = (P @ C.T).argmax(axis=2) == lab[:, order]
    out = []
    known: dict = {}
    for b in range(B):
        key = id(labels) if labels.ndim == 1 else None
        if key is None or key not in known:
            seen, majority = [], []
            for test in groups:
                fit = np.setdiff1d(np.arange(n), test)
                seen.append(np.isin(lab[b][test], lab[b][fit]))
                majority.append(lab[b][test] == int(np.bincount(lab[b][fit], minlength=V.shape[0]).argmax()))
            known[key] = (np.concatenate(seen), float(np.concatenate(majority).mean()))
        sn, maj = known[key]
        okb = ok[b]
        out.append({"n": int(okb.size), "classes": int(V.shape[0]), "chance": 1.0 / V.shape[0],
                    "accuracy": float(okb.mean()), "majority": maj, "unseen": int((~sn).sum()),
                    "accuracy_seen": float(okb[sn].mean()) if sn.any() else None,
                    "accuracy_unseen": float(okb[~sn].mean()) if (~sn).any() else None,
                    "correct": okb, "fits": []})
    return out


def detected(result: dict, margin: float = DECODE_MARGIN) -> bool:
    """The decode rule: held-out accuracy ≥ max(chance, majority) + ``margin``.

    Parameters
    ----------
    result : dict
        A :func:`decode_vectors` result; its ``accuracy``, ``chance`` and ``majority`` are read.
    margin : float
        The required excess over the better of chance and the majority answer (default
        :data:`DECODE_MARGIN`, 0.20).

    Returns
    -------
    bool
    """
    return result["accuracy"] >= max(result["chance"], result["majority"]) + margin


def planted_states(labels: Sequence[np.ndarray], vectors: Sequence[np.ndarray], present: np.ndarray, p: int,
                   snr: float, rng: np.random.Generator, *, return_maps: bool = False):
    """States with the superposition geometry planted: ``Σ_r present_r·(V_r[label_r] − m_r) A_r`` + noise.

    Parameters
    ----------
    labels : sequence of (n,) int arrays
        Each relation's attribute per row (any value where absent).
    vectors : sequence of (C_r, q_r) arrays
        Each relation's candidate vectors (``m_r`` their mean).
    present : (n, R) bool array
        Whether each row has a fact in each relation.
    p : int
        The states' width.
    snr : float
        Each relation's term has mean squared norm 1 over its rows; the noise has mean squared norm
        ``1 / snr``.
    rng : numpy.random.Generator
        The maps ``A_r`` (i.i.d. Gaussian) and the noise.
    return_maps : bool
        Also return each relation's map as applied, ``A_r / scale_r`` (q_r × p; zero for a relation without
        rows).

    Returns
    -------
    (n, p) float64 array, or (that array, list of (q_r, p) arrays) with ``return_maps``
    """
    n = present.shape[0]
    H = np.zeros((n, p))
    maps = []
    for r, (lab, V) in enumerate(zip(labels, vectors)):
        V = np.asarray(V, dtype=np.float64)
        rows = np.flatnonzero(present[:, r])
        A = rng.standard_normal((V.shape[1], p))
        term = (V[np.asarray(lab)[rows]] - V.mean(axis=0)) @ A
        scale = float(np.sqrt(np.mean(np.sum(term * term, axis=1)))) if rows.size else 0.0
        if scale > 0:
            H[rows] += term / scale
        maps.append(A / scale if scale > 0 else np.zeros_like(A))
    H += rng.standard_normal((n, p)) / np.sqrt(snr * p)
    return (H, maps) if return_maps else H


def decode_power(labels: Sequence[np.ndarray], vectors: Sequence[np.ndarray], present: np.ndarray, p: int,
                 groups_of: Sequence[Sequence[np.ndarray]], *, rng: np.random.Generator,
                 snrs: Sequence[float] = SNRS, draws: int = DRAWS, margin: float = DECODE_MARGIN,
                 predict: Callable | None = None, negative_snr: float | None = NAMED_SNR,
                 predict_many: Callable | None = None) -> list[dict]:
    """Per relation, how often :func:`decode_vectors` detects a planted mechanism of the real run's shape.

    Parameters
    ----------
    labels, vectors, present, p
        As :func:`planted_states` (the real run's labels, candidate vectors, presence and width).
    groups_of : sequence of sequences of int arrays
        Per relation, the real run's held-out groups, as indices into that relation's rows
        (``flatnonzero(present[:, r])``).
    rng : numpy.random.Generator
        The plantings, the negative control's permutations and every fit's folds.
    snrs : sequence of float
        The planted strengths.
    draws : int
        Plantings per strength.
    margin : float
        The decode rule's margin (:func:`detected`).
    predict : callable, optional
        The real run's ridge rule (:func:`decode_vectors`).
    negative_snr : float or None
        The SNR at which the negative control runs (default :data:`NAMED_SNR`, if among ``snrs``; None: at
        every SNR).
    predict_many : callable, optional
        ``predict_many(H_fit, [Y_fit, ...], H_test, rng) -> [predictions, ...]``: ``predict`` for several
        targets on the same rows at once (each target fitted as ``predict`` would fit it, with one fold
        assignment for all). Used where every relation has the same rows and groups (a toy task: every
        subject has every relation): one factorisation of the fit rows then serves every relation and its
        negative control.

    Returns
    -------
    list of dict, one per relation
        ``snrs``, ``positive`` (detection rate per SNR), ``negative`` (the same with permuted labels; None at
        an SNR where it did not run),
        ``accuracy_unseen`` (mean planted accuracy on unseen answers per SNR; None without unseen rows),
        ``draws``.
    """
    R = present.shape[1]
    pos = np.zeros((R, len(snrs)))
    neg = np.zeros((R, len(snrs)))
    uns: list[list[list[float]]] = [[[] for _ in snrs] for _ in range(R)]
    shared = (predict_many is not None and R > 0 and bool(np.all(present == present[:, :1]))
              and all(len(g) == len(groups_of[0])
                      and all(np.array_equal(a, b) for a, b in zip(g, groups_of[0])) for g in groups_of))
    # the default ridge: every draw is made in the order of the loop below (plantings, permutations, each
    # fit's inner folds), and the fits of a relation are then made together (_decode_planned)
    planned = predict is None and not shared
    plan: list[list[tuple]] = [[] for _ in range(R)]
    stored: list[np.ndarray] = []
    for k, snr in enumerate(snrs):
        for _ in range(draws):
            H = planted_states(labels, vectors, present, p, snr, rng)
            if planned:
                stored.append(H)
                for r in range(R):
                    rows = np.flatnonzero(present[:, r])
                    lab = np.asarray(labels[r])[rows]
                    groups = [np.asarray(g) for g in groups_of[r]]
                    plan[r].append((k, len(stored) - 1, lab, inner_parts(rows.size, groups, rng=rng), False))
                    if snr == negative_snr or negative_snr is None:
                        perm = lab[rng.permutation(lab.size)]
                        plan[r].append((k, len(stored) - 1, perm, inner_parts(rows.size, groups, rng=rng),
                                        True))
                continue
            if shared:
                neg_here = snr == negative_snr or negative_snr is None
                for r, res, sh in _decode_all(H, labels, vectors, present, groups_of[0], neg_here, rng,
                                              predict_many):
                    pos[r, k] += detected(res, margin)
                    if res["accuracy_unseen"] is not None:
                        uns[r][k].append(res["accuracy_unseen"])
                    if sh is not None:
                        neg[r, k] += detected(sh, margin)
                continue
            for r in range(R):
                rows = np.flatnonzero(present[:, r])
                lab = np.asarray(labels[r])[rows]
                res = decode_vectors(H[rows], lab, vectors[r], groups_of[r], rng=rng, predict=predict)
                pos[r, k] += detected(res, margin)
                if res["accuracy_unseen"] is not None:
                    uns[r][k].append(res["accuracy_unseen"])
                if snr == negative_snr or negative_snr is None:
                    shuffled = decode_vectors(H[rows], lab[rng.permutation(lab.size)], vectors[r],
                                              groups_of[r], rng=rng, predict=predict)
                    neg[r, k] += detected(shuffled, margin)
    for r in range(R):
        if not plan[r]:
            continue
        rows = np.flatnonzero(present[:, r])
        for (k, _h, lab, _inner, negative), res in zip(plan[r], _decode_planned(stored, rows, vectors[r],
                                                                                 groups_of[r], plan[r])):
            if negative:
                neg[r, k] += detected(res, margin)
                continue
            pos[r, k] += detected(res, margin)
            if res["accuracy_unseen"] is not None:
                uns[r][k].append(res["accuracy_unseen"])
    ran = [negative_snr is None or snr == negative_snr for snr in snrs]
    return [{"snrs": list(snrs), "positive": (pos[r] / draws).tolist(),
             "negative": [float(v) / draws if on else None for v, on in zip(neg[r], ran)],
             "accuracy_unseen": [float(np.mean(u)) if u else None for u in uns[r]], "draws": int(draws)}
            for r in range(R)]


def _decode_planned(stored: list[np.ndarray], rows: np.ndarray, V: np.ndarray, groups: Sequence[np.ndarray],
                    plan: list[tuple]) -> list[dict]:
    """The planned decodings of one relation (:func:`decode_power`'s default ridge), fitted together: per
    entry ``(snr index, planting, labels, inner folds, negative)`` the :func:`decode_vectors` result on the
    planting's rows."""
    V = np.asarray(V, dtype=np.float64)
    groups = [np.asarray(g) for g in groups]
    out: list[dict] = []
    chunk = 64  # problems per batch: bounds the stacked states and targets
    for lo in range(0, len(plan), chunk):
        part = plan[lo : lo + chunk]
        X = np.stack([stored[h][rows] for _k, h, _lab, _inner, _neg in part])
        Y = np.stack([V[lab] for _k, _h, lab, _inner, _neg in part])
        fitted = cross_fit_batch(X, [Y], [groups] * len(part), [inner for _k, _h, _lab, inner, _neg in part])
        out.extend(_score_stack(np.stack([f[0]["predictions"] for f in fitted]),
                                np.stack([lab for _k, _h, lab, _inner, _neg in part]), V, groups))
    return out


def _decode_all(H, labels, vectors, present, groups, negative: bool, rng, predict_many):
    """Every relation's decoding (and, with ``negative``, its permuted-label control) on planted states whose
    relations share their rows and groups: one ``predict_many`` call per group."""
    rows = np.flatnonzero(present[:, 0])
    Hr = H[rows]
    R = len(labels)
    labs = [np.asarray(labels[r])[rows] for r in range(R)]
    perm = [lab[rng.permutation(lab.size)] for lab in labs] if negative else []
    targets = [(r, lab) for r, lab in enumerate(labs)] + [(r, lab) for r, lab in enumerate(perm)]
    n = rows.size
    preds = [np.zeros((n, np.asarray(vectors[r]).shape[1])) for r, _ in targets]
    for test in groups:
        fit = np.setdiff1d(np.arange(n), test)
        out = predict_many(Hr[fit], [np.asarray(vectors[r])[lab[fit]] for r, lab in targets], Hr[test], rng)
        for P, Q in zip(preds, out):
            P[test] = Q
    results = [score_predictions(P, lab, vectors[r], groups) for P, (r, lab) in zip(preds, targets)]
    return [(r, results[r], results[R + r] if negative else None) for r in range(R)]


def verdict_word(real_detected: bool, power: dict, *, unseen: int, n: int, snr: float = NAMED_SNR,
                 required: float = POWER_REQUIRED) -> tuple[str, str]:
    """``("decodable" | "not decodable" | "cannot tell", reason)`` from a real result and its control.

    Parameters
    ----------
    real_detected : bool
        Whether the real states pass the decode rule.
    power : dict
        One relation's entry of :func:`decode_power` (``snr`` must be among its ``snrs``).
    unseen, n : int
        Held-out rows whose answer is unseen in their fit rows, and rows scored (for the reason).
    snr : float
        The named strength.
    required : float
        The detection rate a negative verdict needs.

    Returns
    -------
    (str, str)
    """
    rate = power["positive"][power["snrs"].index(snr)]
    if real_detected:
        return "decodable", f"planted control detected {rate:.2f} at SNR {snr:g}"
    if rate >= required:
        return "not decodable", (f"a planted mechanism at SNR {snr:g} is detected in {rate:.2f} of "
                                 f"{power['draws']} draws")
    why = f"the planted control at SNR {snr:g} is detected in only {rate:.2f} of {power['draws']} draws"
    if unseen:
        why += f"; {unseen} of {n} held-out answers do not occur in their fit rows"
    return "cannot tell", why
