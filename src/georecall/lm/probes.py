"""The per-layer probes on hidden states of real facts (NumPy only; the arrays come from :mod:`.extract`).

Every fit is a ridge map (:mod:`.ridge`: strength by 5-fold cross-validation on the fit rows only) evaluated
by **cross-fitting over subjects**: the subjects are split into ``folds`` groups; each group is held out once,
the map is fitted on the others, and every subject is scored exactly once, by a map that never saw it.

- :func:`decode_relation`: map a subject's state ``h`` (width p) to the vector of its attribute (the
  unembedding row of the attribute's first token); the prediction's nearest candidate (cosine after
  subtracting the fit targets' mean) among the relation's candidates, grouped by first token (two candidates
  that share a first token are one class), must be the attribute's class. Baselines: chance 1 / classes and
  the fit rows' majority class.
- :func:`superposition_fit`: the subject's state on the concatenation of its attributes' vectors, one block
  per relation (zeros and a 0/1 presence column where the subject has no fact in that relation); held-out R².
- :func:`shuffled` permutes the attributes among the subjects of each relation: the shuffled-facts control."""

from __future__ import annotations

import numpy as np

from georecall.experiments.ridge import cross_fit, cross_fit_many, r_squared

__all__ = ["BlockMaps", "block_design", "decode_relation", "folds_of", "shuffled", "superposition_fit",
           "superposition_fit_many"]


def folds_of(n: int, k: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``k`` (at most n) disjoint held-out groups covering ``range(n)``, from one seeded permutation.

    Parameters
    ----------
    n : int
        Rows (subjects).
    k : int
        Groups wanted, at least 1; more than n gives n groups of one row.
    rng : numpy.random.Generator
        Draws the permutation.

    Returns
    -------
    list of ndarray of int
        ``min(k, n)`` sorted index arrays whose sizes differ by at most one.
    """
    return [np.sort(p) for p in np.array_split(rng.permutation(n), int(min(k, n)))]


def decode_relation(H: np.ndarray, labels: np.ndarray, V: np.ndarray, *, folds: int, rng: np.random.Generator
                    ) -> dict:
    """Cross-fitted linear decoding of one relation's attribute class from states.

    The estimator: ridge (:func:`.ridge.cross_fit`) from the state (p = width of H, plus an unpenalized
    intercept) to the class's target vector (q = width of V), for each of ``folds`` held-out groups of
    subjects fitted on the other n − n/folds subjects; its strength chosen on those fit rows only, by 5-fold
    cross-validation over the grid :data:`.ridge.ALPHAS` (relative to the fit rows' mean squared singular
    value). A held-out subject is decoded correctly when its prediction's nearest class vector by cosine,
    both centred on the fit rows' mean target, is its own class; every subject is scored once.

    Parameters
    ----------
    H : (n, p) array
        One state per subject of the relation.
    labels : (n,) int array
        Each subject's attribute class (an index into ``V``).
    V : (C, q) array
        One target vector per candidate class.
    folds : int
        Cross-fitting groups over the subjects (at most n are made).
    rng : numpy.random.Generator
        The groups and every fit's inner folds.

    Returns
    -------
    dict
        ``accuracy``, ``majority`` (per held-out group, the most frequent class of its fit rows, scored on the
        group), ``chance`` (1 / C), ``n``, ``classes``, ``alphas`` (the chosen strength of each group's fit,
        as a grid value relative to the scale).

    Raises
    ------
    InputError
        A held-out group that leaves fewer than two fit rows (fewer than three subjects, or ``folds`` = 1).
    """
    n = H.shape[0]
    groups = folds_of(n, folds, rng)
    fitted = cross_fit(H, V[labels], groups, rng=rng)
    correct = np.zeros(n, dtype=bool)
    majority = np.zeros(n, dtype=bool)
    alphas = fitted["alphas"]
    for test in groups:
        fit = np.setdiff1d(np.arange(n), test)
        mu = V[labels[fit]].mean(axis=0)
        P = fitted["predictions"][test] - mu
        C = V - mu
        P /= np.maximum(np.linalg.norm(P, axis=1, keepdims=True), 1e-30)
        C = C / np.maximum(np.linalg.norm(C, axis=1, keepdims=True), 1e-30)
        correct[test] = (P @ C.T).argmax(axis=1) == labels[test]
        counts = np.bincount(labels[fit], minlength=V.shape[0])
        majority[test] = labels[test] == int(counts.argmax())
    return {"accuracy": float(correct.mean()), "majority": float(majority.mean()), "chance": 1.0 / V.shape[0],
            "n": int(n), "classes": int(V.shape[0]), "alphas": alphas}


def block_design(blocks: list[np.ndarray], present: np.ndarray) -> np.ndarray:
    """Concatenated per-relation attribute vectors (zeros where absent) and the 0/1 presence columns.

    Parameters
    ----------
    blocks : list of numpy.ndarray
        Per relation, its attribute vectors (one row per subject).
    present : numpy.ndarray
        ``(n, R)`` booleans: whether the subject has a known fact of relation r.
    """
    parts = [np.where(present[:, r : r + 1], B, 0.0) for r, B in enumerate(blocks)]
    return np.concatenate(parts + [present.astype(np.float64)], axis=1)


class BlockMaps:
    """The fitted superposition blocks of one held-out group, kept in dual form (``W = X_cᵀ C``): ``A[r]``,
    the (q, p) block that maps relation r's vector into the state, is formed only when asked for, and
    :meth:`apply` computes ``v @ A[r]`` as ``(X_c[:, block r] @ v) @ C`` (n_fit·(q + p) operations, not
    q·p·n_fit).

    Parameters
    ----------
    Xc : (n_fit, R·q + R) array
        The centred design rows of the fit.
    C : (n_fit, p) array
        The dual coefficients.
    q : int
        The width of each relation's block.
    R : int
        Relations.
    """

    def __init__(self, Xc: np.ndarray, C: np.ndarray, q: int, R: int):
        self.Xc, self.C, self.q, self.R = Xc, C, q, R

    def apply(self, r: int, v: np.ndarray) -> np.ndarray:
        """``v @ A[r]`` for a (q,) vector (or (m, q) rows).

        Parameters
        ----------
        r : int
            The relation.
        v : array_like
            A (q,) vector or (m, q) rows.

        Returns
        -------
        numpy.ndarray
            (p,) or (m, p).
        """
        return (self.Xc[:, r * self.q : (r + 1) * self.q] @ np.asarray(v).T).T @ self.C

    def __getitem__(self, r: int) -> np.ndarray:
        return self.Xc[:, r * self.q : (r + 1) * self.q].T @ self.C

    def __len__(self) -> int:
        return self.R


def superposition_fit(H: np.ndarray, blocks: list[np.ndarray], present: np.ndarray, *, folds: int,
                      rng: np.random.Generator, keep_maps: bool = True) -> dict:
    """Cross-fitted ridge fit of each subject's state on its attributes' vectors; held-out R².

    The estimator: ridge (:func:`.ridge.cross_fit`) of the state (width targets) on the design
    ``[v_1 · present_1, …, v_R · present_R, present]`` (p = R·q + R, plus an unpenalized intercept), for each
    of ``folds`` held-out groups of subjects fitted on the others, its strength chosen on those fit rows only
    by 5-fold cross-validation over :data:`.ridge.ALPHAS`. The presence-only control is the same cross-fit on
    the R presence columns alone (p = R).

    Parameters
    ----------
    H : (n, p) array
        One state per subject.
    blocks : list of (n, q) arrays
        For each relation, the vector of each subject's attribute (any value where absent).
    present : (n, R) bool array
        Whether the subject has a fact in each relation.
    folds : int
        Cross-fitting groups over the subjects.
    rng : numpy.random.Generator
        The groups and every fit's inner folds.
    keep_maps : bool
        Return the fitted blocks (R·q·p floats per group; only where interventions need them).

    Returns
    -------
    dict
        ``r2`` (pooled over held-out subjects and state coordinates), ``presence_r2`` (the same fit on the
        presence columns alone: how much the relation pattern explains), ``alphas``, and ``maps``: per
        held-out group ``(test indices, A)`` with ``A[r]`` the (q, p) block that maps relation r's vector
        into the state (a :class:`BlockMaps`; empty without ``keep_maps``). An R² is ``nan`` when H has no
        variance.

    Raises
    ------
    InputError
        A held-out group that leaves fewer than two fit rows.
    """
    X = block_design(blocks, present)
    q = blocks[0].shape[1]
    groups = folds_of(H.shape[0], folds, rng)
    fitted = cross_fit(X, H, groups, rng=rng, keep_dual=keep_maps)
    P = fitted["predictions"]
    P0 = cross_fit(present.astype(np.float64), H, groups, rng=rng)["predictions"]
    alphas = fitted["alphas"]
    maps = [(test, BlockMaps(Xc, C, q, len(blocks))) for test, (Xc, C) in zip(groups, fitted.get("dual", []))]
    return {"r2": r_squared(H, P), "presence_r2": r_squared(H, P0), "alphas": alphas, "maps": maps}


def superposition_fit_many(Hs: list[np.ndarray], blocks: list[np.ndarray], present: np.ndarray, *, folds: int,
                           rng: np.random.Generator) -> list[dict]:
    """:func:`superposition_fit` (without maps) of several state matrices on one design, e.g. every layer's
    subject states: entry i is what :func:`superposition_fit` gives ``Hs[i]`` with a generator in ``rng``'s
    state (the same groups and inner folds; one Gram matrix and its eigen-decompositions serve every H).

    Parameters
    ----------
    Hs : list of (n, p) arrays
        The states.
    blocks, present, folds, rng
        As :func:`superposition_fit`.

    Returns
    -------
    list of dict
        ``r2``, ``presence_r2``, ``alphas`` and ``maps`` (empty) per H.
    """
    X = block_design(blocks, present)
    groups = folds_of(present.shape[0], folds, rng)
    fitted = cross_fit_many(X, Hs, groups, rng=rng)
    alone = cross_fit_many(present.astype(np.float64), Hs, groups, rng=rng)
    return [{"r2": r_squared(H, f["predictions"]), "presence_r2": r_squared(H, f0["predictions"]),
             "alphas": f["alphas"], "maps": []} for H, f, f0 in zip(Hs, fitted, alone)]


def shuffled(labels_by_relation: list[np.ndarray], present: np.ndarray, rng: np.random.Generator
             ) -> list[np.ndarray]:
    """Attributes permuted among the subjects that have each relation (the shuffled-facts control).

    Parameters
    ----------
    labels_by_relation : list of (n,) int arrays
        Each relation's attribute index per subject (any value where absent).
    present : (n, R) bool array
        Whether the subject has a fact in each relation.
    rng : numpy.random.Generator
        One permutation per relation.

    Returns
    -------
    list of (n,) int arrays
        The permuted labels (unchanged where absent); the inputs are not modified.
    """
    out = []
    for r, lab in enumerate(labels_by_relation):
        lab = lab.copy()
        idx = np.flatnonzero(present[:, r])
        lab[idx] = lab[rng.permutation(idx)]
        out.append(lab)
    return out
