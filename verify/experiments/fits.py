"""Regularized linear fits for the probes: ridge regression with its strength chosen by k-fold
cross-validation on the fit rows only, in closed form through one SVD per fold.

Why: a probe that regresses N × d targets on p = R·d + 1 features by ordinary least squares is scored at
``1 − f·(n − 1)/(n − p − 1)`` on held-out rows when a share f of the target variance is not explained by the
features (n fit rows); it interpolates once p ≥ n. Its threshold then gets stricter as d grows, and a "no" at
large d says nothing about the model. Ridge trades that variance for a bias chosen by the data.

The rule (declared; :data:`RELATIVE_ALPHAS`):

1. centre X and Y on the fit rows (the intercept is never penalized);
2. the strengths are ``α = ρ·s̄²`` for ρ in the log grid :data:`RELATIVE_ALPHAS` (10⁻⁸ … 10², one point per
   decade), with ``s̄² = |X_c|_F² / p`` the mean eigenvalue of ``X_cᵀX_c`` (1 when X is constant): the grid is
   invariant to the scale of X;
3. the fit rows are cut into ``folds`` random folds (``rng``: one permutation, fold sizes differing by at most
   one; with fewer fit rows than folds, one row per fold); for every ρ the held-out squared error of every
   fold, summed over folds and over all columns of Y (one strength for all columns of one Y), is computed from
   one SVD of each fold's training rows, centred on their own means;
4. the chosen ρ minimises that sum (ties go to the larger ρ, the simpler fit); the coefficients are refitted
   on all fit rows at that ρ.

A grid of one value skips steps 3 and 4 (no folds, ``rng`` unused). ``alphas=(0.0,)`` is ordinary least
squares (the minimum-norm solution when X is rank-deficient: singular values at or below
``10·min(n, p)·ε·s_max`` are treated as zero): the baseline the tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from georecall.errors import InputError

__all__ = ["RELATIVE_ALPHAS", "RidgeFit", "fit_ridge_cv", "fit_ridge_cv_many", "r_squared"]

RELATIVE_ALPHAS: tuple[float, ...] = tuple(10.0 ** k for k in range(-8, 3))


def r_squared(Y: np.ndarray, Y_hat: np.ndarray) -> float:
    """Coefficient of determination pooled over every entry of Y.

    ``1 − SS_res / SS_tot`` with ``SS_res = Σ (Y − Ŷ)²`` and ``SS_tot = Σ (Y − column mean of Y)²``, both
    summed over all rows and columns (not a mean of per-column R²).

    Parameters
    ----------
    Y : ndarray (n,) or (n, targets)
        The observed values (held-out rows, for a held-out R²).
    Y_hat : ndarray, same shape as Y
        The predictions.

    Returns
    -------
    float
        At most 1, negative when the predictions are worse than the column means. When Y is constant
        (``SS_tot = 0``): 1.0 if it is predicted exactly, else 0.0.
    """
    Y = np.asarray(Y, dtype=np.float64)
    ss_res = float(np.sum((Y - Y_hat) ** 2))
    ss_tot = float(np.sum((Y - Y.mean(axis=0)) ** 2))
    if ss_tot == 0:
        return 1.0 if ss_res == 0 else 0.0
    return 1.0 - ss_res / ss_tot


@dataclass(frozen=True)
class RidgeFit:
    """A fitted ridge regression ``Y ≈ X @ coef + intercept``.

    Attributes
    ----------
    coef : ndarray (p, targets)
    intercept : ndarray (targets,)
    alpha : float
        The absolute strength used (``relative_alpha · scale``).
    relative_alpha : float
        The chosen point ρ of the grid.
    scale : float
        ``s̄² = |X_c|_F² / p`` on the fit rows.
    n, p : int
        Fit rows and features (without the intercept).
    folds : int
        Folds of the cross-validation (0: a single strength, no cross-validation).
    rank : int
        Numerical rank of the centred fit rows (singular values above ``max(n, p)·ε·s_max``).
    cv_error : dict
        ρ -> summed held-out squared error over folds and targets.
    """

    coef: np.ndarray
    intercept: np.ndarray
    alpha: float
    relative_alpha: float
    scale: float
    n: int
    p: int
    folds: int
    rank: int = 0
    cv_error: dict = field(default_factory=dict)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Predictions ``X @ coef + intercept``.

        Parameters
        ----------
        X : ndarray (rows, p)
            Rows with the fit's p features.

        Returns
        -------
        ndarray (rows, targets)

        Raises
        ------
        InputError
            X is not 2-D or does not have p columns.
        """
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.p:
            raise InputError(f"X must have {self.p} columns, got shape {X.shape}")
        return X @ self.coef + self.intercept

    @property
    def underdetermined(self) -> bool:
        """The centred fit rows have full row rank (``rank ≥ n − 1``): without the penalty the fit would
        interpolate them, whatever the targets."""
        return self.rank >= self.n - 1

    def maps(self) -> np.ndarray:
        """``[coef; intercept]``, shape (p + 1, targets): the row form ``X @ W[:-1] + W[-1]``."""
        return np.vstack([self.coef, self.intercept[None, :]])

    def describe(self) -> dict:
        """p, n, rank, the chosen strength and the fold count, for reports (JSON-ready).

        Returns
        -------
        dict
            ``p``, ``n``, ``rank``, ``alpha``, ``relative_alpha``, ``folds`` and
            ``underdetermined_without_penalty`` (:attr:`underdetermined`).
        """
        return {"p": int(self.p), "n": int(self.n), "rank": int(self.rank), "alpha": float(self.alpha),
                "relative_alpha": float(self.relative_alpha), "folds": int(self.folds),
                "underdetermined_without_penalty": bool(self.underdetermined)}


def _svd(Xc: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    U, s, Vt = np.linalg.svd(Xc, full_matrices=False)
    return U, s, Vt


def _rank(s: np.ndarray, shape: tuple[int, int]) -> int:
    if not s.size or s[0] == 0:
        return 0
    return int(np.sum(s > s[0] * max(shape) * np.finfo(np.float64).eps))


def _shrink(s: np.ndarray, alpha: float) -> np.ndarray:
    """``s / (s² + α)``; for α = 0 the pseudo-inverse's ``1/s`` with tiny singular values dropped."""
    if alpha > 0:
        return s / (s * s + alpha)
    out = np.zeros_like(s)
    if s.size:
        keep = s > s[0] * max(len(s), 1) * np.finfo(np.float64).eps * 10
        out[keep] = 1.0 / s[keep]
    return out


def fit_ridge_cv(X: np.ndarray, Y: np.ndarray, *, rng: np.random.Generator,
                 alphas: tuple[float, ...] | None = None, folds: int = 5) -> RidgeFit:
    """Ridge regression of Y on X with an unpenalized intercept, strength by k-fold cross-validation.

    The estimator of the module docstring: n fit rows, p features plus an unpenalized intercept, penalty
    ``α·|coef|_F²`` with ``α = ρ·s̄²`` and ρ chosen from ``alphas`` by ``folds``-fold cross-validation on these
    rows only (one ρ for all columns of Y), then refitted on all of them. Nothing outside X and Y is seen, so
    rows scored afterwards are held out only if the caller kept them out of X.

    Parameters
    ----------
    X : ndarray (n, p)
        Fit rows only: held-out rows must not be passed here.
    Y : ndarray (n, targets) or (n,)
        The targets of the same rows (a 1-D Y is one target column).
    rng : numpy.random.Generator
        The fold assignment (one permutation; not drawn from when ``alphas`` has one value).
    alphas : tuple of float, optional
        Relative strengths ρ (``α = ρ·s̄²``); default :data:`RELATIVE_ALPHAS`. One value: no cross-validation
        (``(0.0,)`` is ordinary least squares).
    folds : int
        Folds (at least 2; with fewer fit rows than folds, one fold per row: leave-one-out). Ignored, and not
        checked, when ``alphas`` has one value.

    Returns
    -------
    RidgeFit
        Coefficients (p, targets), intercept, the chosen strength, n, p, rank and the cross-validation errors.

    Raises
    ------
    InputError
        X not 2-D, Y not 1-D or 2-D, X and Y with different row counts, non-finite entries, fewer than two
        rows, an empty grid or a negative or non-finite strength, or (with more than one strength) ``folds``
        not an integer >= 2.
    """
    return fit_ridge_cv_many(X, [Y], rng=rng, alphas=alphas, folds=folds)[0]


def fit_ridge_cv_many(X: np.ndarray, Ys: list, *, rng: np.random.Generator,
                      alphas: tuple[float, ...] | None = None, folds: int = 5) -> list[RidgeFit]:
    """:func:`fit_ridge_cv` of several targets on the same X and folds, each with its own strength.

    Every Y of ``Ys`` is fitted as :func:`fit_ridge_cv` would fit it alone with the same fold assignment (one
    permutation drawn from ``rng`` for all of them), its ρ chosen by its own summed held-out error; the SVD of
    each fold's training rows and of all fit rows is computed once and shared.

    Parameters
    ----------
    X : ndarray (n, p)
        Fit rows only: held-out rows must not be passed here.
    Ys : list of ndarray
        Targets, each (n, targets_i) or (n,) on the rows of X.
    rng : numpy.random.Generator
        The fold assignment, shared by every target (not drawn from when ``alphas`` has one value).
    alphas : tuple of float, optional
        Relative strengths ρ; default :data:`RELATIVE_ALPHAS`. One value: no cross-validation.
    folds : int
        Folds, as :func:`fit_ridge_cv`.

    Returns
    -------
    list of RidgeFit
        One per element of ``Ys``, in order (empty for an empty ``Ys``).

    Raises
    ------
    InputError
        As :func:`fit_ridge_cv`, for X and for every Y.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise InputError(f"X must be 2-D (n, p), got shape {X.shape}")
    targets = []
    for Y in Ys:
        Y = np.asarray(Y, dtype=np.float64)
        if Y.ndim == 1:
            Y = Y[:, None]
        if Y.ndim != 2 or X.shape[0] != Y.shape[0]:
            raise InputError(f"X (n, p) and Y (n, targets) must share n; got {X.shape} and {Y.shape}")
        if not np.all(np.isfinite(Y)):
            raise InputError("X and Y must be finite")
        targets.append(Y)
    n, p = X.shape
    if n < 2:
        raise InputError(f"a fit needs at least two rows, got {n}")
    if not np.all(np.isfinite(X)):
        raise InputError("X and Y must be finite")
    grid = tuple(float(a) for a in (RELATIVE_ALPHAS if alphas is None else alphas))
    if not grid or any(not np.isfinite(a) or a < 0 for a in grid):
        raise InputError(f"strengths must be a non-empty list of finite values >= 0, got {grid}")
    x_mean = X.mean(axis=0)
    Xc = X - x_mean
    scale = float(np.sum(Xc * Xc) / max(p, 1))
    if scale == 0:
        scale = 1.0
    chosen = [0] * len(targets)
    cv_errors: list[dict] = [{} for _ in targets]
    if len(grid) > 1:
        if not isinstance(folds, (int, np.integer)) or folds < 2:
            raise InputError(f"folds must be an integer >= 2, got {folds!r}")
        folds = min(int(folds), n)  # fewer rows than folds: leave-one-out
        assignment = rng.permutation(n) % folds
        errors = np.zeros((len(targets), len(grid)))
        for k in range(folds):
            train, test = assignment != k, assignment == k
            xm = X[train].mean(axis=0)
            U, s, Vt = _svd(X[train] - xm)
            Xv = (X[test] - xm) @ Vt.T  # validation rows in the right-singular basis
            shrink = np.array([_shrink(s, rho * scale) for rho in grid])  # (grid, k)
            XvS = Xv[None, :, :] * shrink[:, None, :]  # (grid, validation rows, k): every ρ in one product
            for t, Y in enumerate(targets):
                ym = Y[train].mean(axis=0)
                UtY = U.T @ (Y[train] - ym)
                resid = (Y[test] - ym)[None, :, :] - XvS @ UtY
                errors[t] += np.einsum("gij,gij->g", resid, resid)
        for t in range(len(targets)):
            cv_errors[t] = dict(zip(grid, errors[t].tolist()))
            order = sorted(range(len(grid)), key=lambda i: (float(errors[t, i]), -grid[i]))
            chosen[t] = order[0]
    U, s, Vt = _svd(Xc)
    rank = _rank(s, Xc.shape)
    out = []
    for t, Y in enumerate(targets):
        rho = grid[chosen[t]]
        y_mean = Y.mean(axis=0)
        coef = Vt.T @ (_shrink(s, rho * scale)[:, None] * (U.T @ (Y - y_mean)))
        intercept = y_mean - x_mean @ coef
        out.append(RidgeFit(coef=coef, intercept=intercept, alpha=rho * scale, relative_alpha=rho,
                            scale=scale, n=n, p=p, folds=folds if len(grid) > 1 else 0, rank=rank,
                            cv_error=cv_errors[t]))
    return out
