"""Ridge regression with its strength chosen by k-fold cross-validation on the fit rows only (NumPy).

Model: ``Y ≈ 1·b + X·W`` with ``W = argmin |Yc − Xc·W|² + α|W|²`` on centred rows (the intercept is not
penalised). Closed form through one SVD of the centred fit rows, ``Xc = U S Vᵀ``:
``W(α) = V diag(s / (s² + α)) Uᵀ Yc``, so every α of the grid costs one small product. Rule for α: the grid
``ALPHAS`` (17 points, 10⁻⁴ … 10⁴, log-spaced, scaled by the mean squared singular value of the centred fit
rows, so the grid follows the data's scale), K folds of the fit rows (contiguous after one seeded
permutation), the α with the smallest held-out squared error, summed over the K held-out folds and all
target columns and divided by n (one α for all columns); ties (within a relative 1e-12) go to the later grid
point, the larger α for an ascending grid. Rows outside the fit rows are never seen."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from georecall.errors import InputError

__all__ = ["ALPHAS", "RidgeFit", "cross_fit", "fit_ridge_cv", "r2_score"]

ALPHAS = np.logspace(-4, 4, 17)  # multiples of mean(s²) of the fit rows


@dataclass
class RidgeFit:
    """A fitted ridge map ``predict(X) = b + X @ W``; ``alpha`` as used, ``alpha_rel`` its grid value.

    Stored in the fit rows' singular basis (``W = Vtᵀ C``, ``b = my − mx W``); ``W`` is formed on first use.
    """

    mx: np.ndarray
    my: np.ndarray
    Vt: np.ndarray
    C: np.ndarray
    alpha: float
    alpha_rel: float
    cv_error: float
    _W: np.ndarray | None = None

    @property
    def W(self) -> np.ndarray:
        """The (p, q) coefficients."""
        if self._W is None:
            self._W = self.Vt.T @ self.C
        return self._W

    @property
    def b(self) -> np.ndarray:
        """The (q,) intercept."""
        return self.my - self.mx @ self.W

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions ``b + X @ W`` for the rows of ``X`` (through the singular basis: no p × q product).

        Parameters
        ----------
        X : (m, p) array
            Rows with the fit's p features (not validated: a wrong width is NumPy's ValueError).

        Returns
        -------
        (m, q) float64 array
        """
        return self.my + ((np.asarray(X, dtype=np.float64) - self.mx) @ self.Vt.T) @ self.C


def _svd(X: np.ndarray, Y: np.ndarray):
    """Centre, then the thin SVD of the centred rows: directly, or for wide X (p > n) from the n × n Gram
    matrix's eigenvectors (``Xc Xcᵀ = U S² Uᵀ``, ``Vt = S⁻¹ Uᵀ Xc``; directions with s² below 1e-12·max
    dropped: the ridge weight s / (s² + α) of such a direction is below 1e-6 / sqrt(α) anyway)."""
    mx, my = X.mean(axis=0), Y.mean(axis=0)
    Xc = X - mx
    if Xc.shape[1] > Xc.shape[0]:
        lam, U = np.linalg.eigh(Xc @ Xc.T)
        keep = lam > max(float(lam[-1]), 0.0) * 1e-12
        lam, U = lam[keep], U[:, keep]
        s = np.sqrt(lam)
        Vt = (U.T @ Xc) / s[:, None]
    else:
        U, s, Vt = np.linalg.svd(Xc, full_matrices=False)
    return mx, my, s, Vt, U.T @ (Y - my)


def fit_ridge_cv(X, Y, *, folds: int = 5, alphas=ALPHAS, rng: np.random.Generator) -> RidgeFit:
    """Fit ``Y ≈ b + X W`` by ridge, α chosen by ``folds``-fold cross-validation on these rows.

    Parameters
    ----------
    X : (n, p) array
        The fit rows' features.
    Y : (n, q) or (n,) array
        Their targets.
    folds : int
        K of the K-fold split (values below 2 are taken as 2, above n as n).
    alphas : array
        The grid, in multiples of the mean squared singular value of the centred ``X`` (default
        :data:`ALPHAS`).
    rng : numpy.random.Generator
        Draws the fold permutation.

    Returns
    -------
    RidgeFit
        Refitted on all n rows at the chosen α; ``cv_error`` is that α's mean held-out squared error.

    Raises
    ------
    InputError
        Fewer than 2 rows, X not 2-D, or X and Y with different row counts.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    n = X.shape[0]
    if X.ndim != 2 or Y.shape[0] != n:
        raise InputError(f"ridge: X {X.shape} and Y {Y.shape} do not match")
    if n < 2:
        raise InputError(f"ridge: at least 2 fit rows are needed, got {n}")
    Xc = X - X.mean(axis=0)
    scale = float(np.sum(Xc * Xc)) / max(1, min(Xc.shape)) or 1.0
    grid = np.asarray(alphas, dtype=np.float64) * scale
    k = int(min(max(2, folds), n))
    order = rng.permutation(n)
    parts = np.array_split(order, k)
    errors = np.zeros(grid.size)
    for part in parts:
        train = np.setdiff1d(order, part)
        if train.size < 1:
            continue
        mx, my, s, Vt, UtY = _svd(X[train], Y[train])
        Z = (X[part] - mx) @ Vt.T  # the held-out rows in the fit rows' singular basis: one product per fold
        for g, a in enumerate(grid):
            err = Y[part] - my - Z @ ((s / (s * s + a))[:, None] * UtY)
            errors[g] += float(np.sum(err * err))
    errors /= n
    best = int(np.flatnonzero(errors <= errors.min() * (1 + 1e-12))[-1])  # ties: the larger alpha
    mx, my, s, Vt, UtY = _svd(X, Y)
    C = (s / (s * s + grid[best]))[:, None] * UtY
    return RidgeFit(mx, my, Vt, C, float(grid[best]), float(np.asarray(alphas)[best]), float(errors[best]))


def r2_score(Y, P) -> float:
    """Coefficient of determination of predictions ``P`` for ``Y``, pooled over columns (1 − SSE/SST).

    Parameters
    ----------
    Y, P : (n, q) arrays
        Observed values and predictions.

    Returns
    -------
    float
        ``nan`` when ``Y`` has no variance.
    """
    Y = np.asarray(Y, dtype=np.float64)
    P = np.asarray(P, dtype=np.float64)
    sst = float(np.sum((Y - Y.mean(axis=0)) ** 2))
    return float("nan") if sst == 0 else 1.0 - float(np.sum((Y - P) ** 2)) / sst


def _centred(K: np.ndarray, A: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``(x_a − m_T)·(x_b − m_T)`` for a in A, b in T, from the uncentred Gram ``K`` (m_T the mean of T)."""
    kA = K[np.ix_(A, T)]
    kT = K[np.ix_(T, T)]
    return kA - kA.mean(axis=1, keepdims=True) - kT.mean(axis=0)[None, :] + kT.mean()


def _gram_fit(K, Y, T, grid):
    """Eigen-decomposition of the centred Gram of rows T, and the centred targets' coordinates."""
    lam, U = np.linalg.eigh(_centred(K, T, T))
    lam = np.maximum(lam, 0.0)
    my = Y[T].mean(axis=0)
    return lam, U, my, U.T @ (Y[T] - my)


def cross_fit(X, Y, groups: list[np.ndarray], *, folds: int = 5, alphas=ALPHAS, rng: np.random.Generator,
              keep_W: bool = False) -> dict:
    """Held-out ridge predictions: for each group, a fit on the other rows (α by ``folds``-fold CV on them).

    The same rule as :func:`fit_ridge_cv` (grid scaled by the fit rows' mean squared singular value, ties to
    the larger α), computed in kernel form from one Gram matrix ``X Xᵀ`` of all rows: a fit on rows T predicts
    rows A as ``m_Y + Kc[A, T] U (Λ + α)⁻¹ Uᵀ (Y_T − m_Y)`` with ``Kc[T, T] = U Λ Uᵀ`` the centred Gram, which
    is the primal ridge solution (``W = Xcᵀ U (Λ + α)⁻¹ Uᵀ Yc``). Cost O(n² p) once and O(n³) per fit.

    Parameters
    ----------
    X : (n, p) array
        Features of all rows.
    Y : (n, q) or (n,) array
        Targets of all rows.
    groups : list of int arrays
        Disjoint held-out groups; each is predicted by a fit on every row outside it.
    folds : int
        K of each fit's inner K-fold split (values below 2 are taken as 2, above the fit rows as their
        number).
    alphas : array
        The relative grid (default :data:`ALPHAS`).
    rng : numpy.random.Generator
        Draws each fit's inner fold permutation.
    keep_W : bool
        Also return each group's (p, q) coefficients.

    Returns
    -------
    dict
        ``predictions`` (n, q) (rows outside every group stay 0), ``alphas`` (the grid value chosen for each
        group), ``W`` (list, when ``keep_W``).

    Raises
    ------
    InputError
        A group that leaves fewer than two fit rows.
    """
    X = np.asarray(X, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    if Y.ndim == 1:
        Y = Y[:, None]
    n = X.shape[0]
    K = X @ X.T
    P = np.zeros((n, Y.shape[1]))
    chosen, Ws = [], []
    base = np.asarray(alphas, dtype=np.float64)
    for test in groups:
        fit = np.setdiff1d(np.arange(n), test)
        if fit.size < 2:
            raise InputError(f"ridge: at least 2 fit rows are needed, got {fit.size}")
        scale = float(np.trace(_centred(K, fit, fit))) / max(1, min(fit.size, X.shape[1])) or 1.0
        grid = base * scale
        k = int(min(max(2, folds), fit.size))
        order = fit[rng.permutation(fit.size)]
        errors = np.zeros(grid.size)
        for part in np.array_split(order, k):
            tr = np.setdiff1d(order, part)
            lam, U, my, UtY = _gram_fit(K, Y, tr, grid)
            KU = _centred(K, part, tr) @ U
            Rp = Y[part] - my
            # |Rp − KU D UtY|² = |Rp|² − 2 Σ_j d_j c_j + dᵀ (G ∘ B) d, D = diag(d), d_j = 1 / (λ_j + α)
            c = np.sum((KU.T @ Rp) * UtY, axis=1)
            GB = (KU.T @ KU) * (UtY @ UtY.T)
            r2 = float(np.sum(Rp * Rp))
            for g, a in enumerate(grid):
                d = 1.0 / (lam + a)
                errors[g] += r2 - 2.0 * float(d @ c) + float(d @ GB @ d)
        best = int(np.flatnonzero(errors <= errors.min() * (1 + 1e-12))[-1])
        lam, U, my, UtY = _gram_fit(K, Y, fit, grid)
        coef = U @ (UtY / (lam + grid[best])[:, None])  # (n_fit, q): the dual coefficients
        P[test] = my + _centred(K, test, fit) @ coef
        chosen.append(float(base[best]))
        if keep_W:
            Ws.append((X[fit] - X[fit].mean(axis=0)).T @ coef)
    out: dict = {"predictions": P, "alphas": chosen}
    if keep_W:
        out["W"] = Ws
    return out
