"""Ridge regression with its strength chosen by k-fold cross-validation on the fit rows only (NumPy): the
one implementation every probe uses (the toy probes, ``probe-hidden``, ``probe-lm``).

Why: a probe that regresses N × d targets on p = R·d + 1 features by ordinary least squares is scored at
``1 − f·(n − 1)/(n − p − 1)`` on held-out rows when a share f of the target variance is not explained by the
features (n fit rows); it interpolates once p ≥ n. Its threshold then gets stricter as d grows, and a "no" at
large d says nothing about the model. Ridge trades that variance for a bias chosen by the data.

The estimator (one strength for all columns of one Y; the intercept is never penalized):

1. centre X and Y on the fit rows;
2. the strengths are ``α = ρ·s̄²`` for ρ in a declared relative grid, with ``s̄²`` the fit rows' scale (a
   :class:`Rule`: ``|X_c|_F² / p``, the mean eigenvalue of ``X_cᵀX_c``, or ``|X_c|_F² / min(n, p)``, the
   mean squared singular value; 1 when X is constant): the grid is invariant to the scale of X;
3. the fit rows are cut into ``folds`` random folds (``rng``: one permutation; the rule's split: the
   permutation's residues mod k, or k contiguous pieces of it; fold sizes differ by at most one; with fewer
   fit rows than folds, one row per fold); for every ρ the held-out squared error of every fold, summed over
   folds and over all columns of Y, from one factorisation of each fold's training rows, centred on their own
   means;
4. the chosen ρ minimises that sum, ties (within a relative 1e-12) going to the larger ρ, the simpler fit; the
   coefficients are refitted on all fit rows at that ρ.

Two rules are declared, each before the runs it serves: :data:`PROBE_RULE` (the toy probes and
``probe-hidden``: :data:`RELATIVE_ALPHAS`, 10⁻⁸ … 10², one point per decade, scale ``|X_c|²/p``, residue
folds) and :data:`LM_RULE` (``probe-lm``: :data:`ALPHAS`, 17 points 10⁻⁴ … 10⁴, scale ``|X_c|²/min(n, p)``,
contiguous folds). :func:`fit_ridge_cv` / :func:`fit_ridge_cv_many` fit in primal form (one SVD per fold);
:func:`cross_fit` computes held-out predictions for several held-out groups in kernel form (one Gram matrix
of all rows), the same estimator.

A grid of one value skips steps 3 and 4 (no folds, ``rng`` unused). ``alphas=(0.0,)`` is ordinary least
squares (the minimum-norm solution when X is rank-deficient: singular values at or below
``10·min(n, p)·ε·s_max`` are treated as zero): the baseline the tests compare against.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from georecall.errors import InputError

__all__ = ["ALPHAS", "LM_RULE", "PROBE_RULE", "RELATIVE_ALPHAS", "RidgeFit", "Rule", "cross_fit",
           "cross_fit_batch", "cross_fit_many", "fit_ridge_cv", "fit_ridge_cv_many", "inner_parts",
           "r_squared"]

RELATIVE_ALPHAS: tuple[float, ...] = tuple(10.0 ** k for k in range(-8, 3))
ALPHAS = np.logspace(-4, 4, 17)  # probe-lm's grid: multiples of the fit rows' mean squared singular value


@dataclass(frozen=True)
class Rule:
    """A declared ridge rule: the relative grid, the scale it multiplies, and the fold split.

    Attributes
    ----------
    alphas : tuple of float
        The relative strengths ρ.
    scale : str
        ``"features"`` (``|X_c|_F² / p``) or ``"rank"`` (``|X_c|_F² / min(n, p)``).
    split : str
        ``"residues"`` (fold of row i: ``permutation[i] mod k``) or ``"contiguous"`` (k contiguous pieces of
        the permutation, ``numpy.array_split``).
    """

    alphas: tuple
    scale: str
    split: str

    def fit_scale(self, sum_squares: float, n: int, p: int) -> float:
        """``s̄²`` of centred fit rows with ``|X_c|_F² = sum_squares`` (1 when that is 0).

        Parameters
        ----------
        sum_squares, n, p
            ``|X_c|_F²``, and the rows' number and width (divided by p; by ``min(n, p)`` for ``"rank"``).
        """
        s = sum_squares / max(1, p if self.scale == "features" else min(n, p))
        return float(s) if s > 0 else 1.0

    def parts(self, n: int, folds: int, rng: np.random.Generator) -> list[np.ndarray]:
        """The k-fold parts of ``range(n)`` (k = ``min(folds, n)``), arrays of row indices, from one
        permutation drawn from ``rng``.

        Parameters
        ----------
        n, folds, rng
            Rows to split, folds asked for, and the ``numpy.random.Generator`` that draws the permutation.
        """
        k = int(min(folds, n))
        if self.split == "residues":
            assignment = rng.permutation(n) % k
            return [np.flatnonzero(assignment == j) for j in range(k)]
        return list(np.array_split(rng.permutation(n), k))


PROBE_RULE = Rule(RELATIVE_ALPHAS, "features", "residues")
LM_RULE = Rule(tuple(float(a) for a in ALPHAS), "rank", "contiguous")


def _best(errors: np.ndarray, grid) -> int:
    """The index of the smallest error, ties (within a relative 1e-12) going to the largest strength."""
    tied = np.flatnonzero(errors <= errors.min() * (1 + 1e-12))
    return int(tied[np.argmax(np.asarray(grid, dtype=np.float64)[tied])])



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
        (``SS_tot = 0``, where the ratio is undefined): 1.0 if it is predicted exactly, else 0.0, so a
        document's R² is always a finite number. The one R² of georecall: the probes, the mechanism study's
        fits and the ``lm`` extra's superposition fits all report this one.
    """
    Y = np.asarray(Y, dtype=np.float64)
    Y_hat = np.asarray(Y_hat, dtype=np.float64)
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
                 alphas: tuple[float, ...] | None = None, folds: int = 5,
                 rule: Rule = PROBE_RULE) -> RidgeFit:
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
    rule : Rule
        The declared rule (:data:`PROBE_RULE` by default; :data:`LM_RULE` is probe-lm's): its grid (unless
        ``alphas`` is given), scale and fold split.

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
    return fit_ridge_cv_many(X, [Y], rng=rng, alphas=alphas, folds=folds, rule=rule)[0]


def fit_ridge_cv_many(X: np.ndarray, Ys: list, *, rng: np.random.Generator,
                      alphas: tuple[float, ...] | None = None, folds: int = 5,
                      rule: Rule = PROBE_RULE) -> list[RidgeFit]:
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
    rule : Rule
        As :func:`fit_ridge_cv`.

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
    grid = tuple(float(a) for a in (rule.alphas if alphas is None else alphas))
    if not grid or any(not np.isfinite(a) or a < 0 for a in grid):
        raise InputError(f"strengths must be a non-empty list of finite values >= 0, got {grid}")
    x_mean = X.mean(axis=0)
    Xc = X - x_mean
    scale = rule.fit_scale(float(np.sum(Xc * Xc)), n, p)
    chosen = [0] * len(targets)
    cv_errors: list[dict] = [{} for _ in targets]
    if len(grid) > 1:
        if not isinstance(folds, (int, np.integer)) or folds < 2:
            raise InputError(f"folds must be an integer >= 2, got {folds!r}")
        parts = rule.parts(n, int(folds), rng)  # fewer rows than folds: leave-one-out
        folds = len(parts)
        errors = np.zeros((len(targets), len(grid)))
        for part in parts:
            test = np.zeros(n, dtype=bool)
            test[part] = True
            train = ~test
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
            chosen[t] = _best(errors[t], grid)
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


def _centred(K: np.ndarray, A: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``(x_a − m_T)·(x_b − m_T)`` for a in A, b in T, from the uncentred Gram ``K`` (m_T the mean of T)."""
    kA = K[np.ix_(A, T)]
    kT = K[np.ix_(T, T)]
    return kA - kA.mean(axis=1, keepdims=True) - kT.mean(axis=0)[None, :] + kT.mean()


def _gram_eig(K, T):
    """Eigen-decomposition of the centred Gram of rows T (eigenvalues clipped at 0)."""
    lam, U = np.linalg.eigh(_centred(K, T, T))
    return np.maximum(lam, 0.0), U


def cross_fit(X, Y, groups: list[np.ndarray], *, folds: int = 5, alphas=None, rng: np.random.Generator,
              keep_W: bool = False, keep_dual: bool = False, rule: Rule = LM_RULE) -> dict:
    """Held-out ridge predictions: for each group, a fit on the other rows (α by ``folds``-fold CV on them).

    The estimator of :func:`fit_ridge_cv` under ``rule`` (default :data:`LM_RULE`), computed in kernel form
    from one Gram matrix ``X Xᵀ`` of all rows: a fit on rows T predicts rows A as
    ``m_Y + Kc[A, T] U (Λ + α)⁻¹ Uᵀ (Y_T − m_Y)`` with ``Kc[T, T] = U Λ Uᵀ`` the centred Gram, which is the
    primal ridge solution (``W = Xcᵀ U (Λ + α)⁻¹ Uᵀ Yc``). The cross-validation errors need the targets only
    through their own Gram matrix ``Y Yᵀ`` (:func:`cross_fit_batch`). Cost O(n² (p + q)) once and O(n³) per
    fit.

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
    alphas : array, optional
        The relative grid (default the rule's).
    rng : numpy.random.Generator
        Draws each fit's inner fold permutation.
    keep_W : bool
        Also return each group's (p, q) coefficients.
    keep_dual : bool
        Also return each group's dual form ``(X_c, C)``: the centred fit rows (n_fit, p) and the dual
        coefficients (n_fit, q), with ``W = X_cᵀ C`` (``v @ W = (X_c @ v) @ C`` without forming W).
    rule : Rule
        The scale and fold split (and default grid).

    Returns
    -------
    dict
        ``predictions`` (n, q) (rows outside every group stay 0), ``alphas`` (the grid value chosen for each
        group), ``W`` (list, when ``keep_W``), ``dual`` (list, when ``keep_dual``).

    Raises
    ------
    InputError
        A group that leaves fewer than two fit rows.
    """
    return cross_fit_many(X, [Y], groups, folds=folds, alphas=alphas, rng=rng, keep_W=keep_W,
                          keep_dual=keep_dual, rule=rule)[0]


def cross_fit_many(X, Ys: list, groups: list[np.ndarray], *, folds: int = 5, alphas=None,
                   rng: np.random.Generator, keep_W: bool = False, keep_dual: bool = False,
                   rule: Rule = LM_RULE) -> list[dict]:
    """:func:`cross_fit` of several targets on the same rows, groups and inner folds.

    Each Y gets the result :func:`cross_fit` gives it alone with a generator in the same state (its own
    strength per group; the same inner fold draws, made once, :func:`inner_parts`): the Gram matrix, its
    eigen-decompositions and the held-out kernels are computed once for all of them
    (:func:`cross_fit_batch` with one problem).

    Parameters
    ----------
    X, groups, folds, alphas, rng, keep_W, keep_dual, rule
        As :func:`cross_fit`.
    Ys : list of arrays
        Targets of all rows, each (n, q_i) or (n,).

    Returns
    -------
    list of dict
        One :func:`cross_fit` result per Y, in order.

    Raises
    ------
    InputError
        A group that leaves fewer than two fit rows.
    """
    X = np.asarray(X, dtype=np.float64)
    groups = [np.asarray(g) for g in groups]
    inner = inner_parts(X.shape[0], groups, folds=folds, rng=rng, rule=rule)
    outs = cross_fit_batch(X, Ys, [groups], [inner], alphas=alphas, keep_coef=keep_W or keep_dual,
                           rule=rule)[0]
    for out in outs:
        coefs = out.pop("coef", [])
        if keep_W:
            out["W"] = [(X[fit] - X[fit].mean(axis=0)).T @ C for fit, C in coefs]
        if keep_dual:
            out["dual"] = [(X[fit] - X[fit].mean(axis=0), C) for fit, C in coefs]
    return outs


def _cross_fit_many_reference(X, Ys: list, groups: list[np.ndarray], *, folds: int = 5, alphas=None,
                              rng: np.random.Generator, rule: Rule = LM_RULE) -> list[dict]:
    """The previous implementation of :func:`cross_fit_many` (the targets in primal form, one problem, one
    Python loop per target): the tests' reference for :func:`cross_fit_batch`. Predictions and the chosen
    strengths only."""
    X = np.asarray(X, dtype=np.float64)
    targets = []
    for Y in Ys:
        Y = np.asarray(Y, dtype=np.float64)
        targets.append(Y[:, None] if Y.ndim == 1 else Y)
    n = X.shape[0]
    K = X @ X.T
    outs: list[dict] = [{"predictions": np.zeros((n, Y.shape[1])), "alphas": []} for Y in targets]
    base = np.asarray(rule.alphas if alphas is None else alphas, dtype=np.float64)
    for test in groups:
        fit = np.setdiff1d(np.arange(n), test)
        if fit.size < 2:
            raise InputError(f"a fit needs at least two rows, got {fit.size}")
        scale = rule.fit_scale(float(np.trace(_centred(K, fit, fit))), fit.size, X.shape[1])
        grid = base * scale
        errors = np.zeros((len(targets), grid.size))
        for part in (fit[q] for q in rule.parts(fit.size, max(2, folds), rng)):
            tr = np.setdiff1d(fit, part)
            lam, U = _gram_eig(K, tr)
            KU = _centred(K, part, tr) @ U
            G = KU.T @ KU
            D = 1.0 / (lam[None, :] + grid[:, None])
            for t, Y in enumerate(targets):
                my = Y[tr].mean(axis=0)
                UtY = U.T @ (Y[tr] - my)
                Rp = Y[part] - my
                c = np.sum((KU.T @ Rp) * UtY, axis=1)
                GB = G * (UtY @ UtY.T)
                r2 = float(np.sum(Rp * Rp))
                errors[t] += r2 - 2.0 * (D @ c) + np.einsum("gi,gi->g", D @ GB, D)
        lam, U = _gram_eig(K, fit)
        Kt = _centred(K, test, fit)
        for t, Y in enumerate(targets):
            best = _best(errors[t], grid)
            my = Y[fit].mean(axis=0)
            UtY = U.T @ (Y[fit] - my)
            coef = U @ (UtY / (lam + grid[best])[:, None])
            outs[t]["predictions"][test] = my + Kt @ coef
            outs[t]["alphas"].append(float(base[best]))
    return outs


def inner_parts(n: int, groups: list[np.ndarray], *, folds: int = 5, rng: np.random.Generator,
                rule: Rule = LM_RULE) -> list[list[np.ndarray]]:
    """The inner folds of :func:`cross_fit` for ``groups`` of ``n`` rows, drawn from ``rng``.

    Per group, in order: ``rule.parts(fit size, max(2, folds), rng)``, indices into that group's fit rows
    (``setdiff1d(arange(n), group)``). Drawing them first and fitting later (:func:`cross_fit_batch`) gives
    the fits :func:`cross_fit` gives and leaves ``rng`` in the same state: a caller can draw, in its own
    order, the folds of many fits and then fit them together.

    Parameters
    ----------
    n : int
        Rows.
    groups : list of int arrays
        The held-out groups.
    folds : int
        As :func:`cross_fit`.
    rng : numpy.random.Generator
        Draws one permutation per group.
    rule : Rule
        The fold split.

    Returns
    -------
    list (per group) of lists of int arrays

    Raises
    ------
    InputError
        A group that leaves fewer than two fit rows.
    """
    out = []
    for test in groups:
        size = np.setdiff1d(np.arange(n), test).size
        if size < 2:
            raise InputError(f"a fit needs at least two rows, got {size}")
        out.append(rule.parts(size, max(2, folds), rng))
    return out


def _gather(K: np.ndarray, A: np.ndarray, T: np.ndarray) -> np.ndarray:
    """``K[a, t]`` for a in ``A[b]``, t in ``T[b]`` of every problem b: ``K`` (n, n) shared or (B, n, n), the
    index arrays (B, ·) or (1, ·) shared by every problem; (B or 1, |A|, |T|)."""
    if K.ndim == 2:
        return K[A[:, :, None], T[:, None, :]]
    if A.shape[0] == 1:
        return K[:, A[0][:, None], T[0][None, :]]
    return K[np.arange(A.shape[0])[:, None, None], A[:, :, None], T[:, None, :]]


def _rows_of(Y: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows[b]`` of each problem's ``Y`` ((n, q) shared or (B, n, q)); ``rows`` (B, ·) or (1, ·)."""
    if Y.ndim == 2:
        return Y[rows]
    if rows.shape[0] == 1:
        return Y[:, rows[0]]
    return Y[np.arange(rows.shape[0])[:, None], rows]


def _centred_batch(K: np.ndarray, A: np.ndarray, T: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`_centred` of every problem at once (the same operations, so each slice equals it), and what
    :func:`_sq_batch` needs.

    Returns
    -------
    (centred (B, |A|, |T|), row means of ``K[A, T]`` (B, |A|), mean of ``K[T, T]`` (B,))
    """
    kA = _gather(K, A, T)
    kT = kA if A is T else _gather(K, T, T)
    row = kA.mean(axis=2)
    total = kT.reshape(kT.shape[0], -1).mean(axis=1)
    return kA - row[:, :, None] - kT.mean(axis=1)[:, None, :] + total[:, None, None], row, total


def _sq_batch(K: np.ndarray, A: np.ndarray, row: np.ndarray, total: np.ndarray) -> np.ndarray:
    """``Σ_{a ∈ A} |y_a − m_T|²`` per problem, from the Gram ``K`` of the y's and :func:`_centred_batch`'s
    row means and total mean of ``(A, T)``."""
    if K.ndim == 2:
        diag = K[A, A]
    elif A.shape[0] == 1:
        diag = K[:, A[0], A[0]]
    else:
        diag = K[np.arange(A.shape[0])[:, None], A, A]
    return (diag - 2.0 * row + total[:, None]).sum(axis=1)


def _best_rows(errors: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """:func:`_best` of each row of ``errors`` (B, grid) against its own ``grid`` row (a minimum below 0,
    rounding of a zero error, ties within the same relative 1e-12 of its size)."""
    low = errors.min(axis=1, keepdims=True)
    tied = errors <= np.where(low >= 0, low * (1 + 1e-12), low + np.abs(low) * 1e-12)
    return np.where(tied, grid, -np.inf).argmax(axis=1)


def _minus(n: int, keep: np.ndarray | None, drop: np.ndarray, what: str) -> np.ndarray:
    """Per row b, the sorted entries of ``keep[b]`` (all of ``range(n)`` when ``keep`` is None) not in
    ``drop[b]`` (``setdiff1d`` of every row at once); every row must keep as many."""
    B = drop.shape[0]
    mask = np.zeros((B, n), dtype=bool)
    if keep is None:
        mask[:] = True
    else:
        mask[np.arange(B)[:, None], keep] = True
    mask[np.arange(B)[:, None], drop] = False
    counts = mask.sum(axis=1)
    if np.any(counts != counts[0]):
        raise InputError(f"{what} differs in size between the problems")
    return np.nonzero(mask)[1].reshape(B, -1)


def _stack(arrays: list, what: str) -> np.ndarray:
    try:
        return np.stack([np.asarray(a, dtype=np.int64) for a in arrays])
    except ValueError:
        raise InputError(f"{what} differs in size between the problems") from None


def _batch_inputs(X, Ys: list, groups: list, inner: list) -> tuple[np.ndarray, list[np.ndarray]]:
    """The features and targets as float64 (targets (·, n, q)), checked against the problems."""
    X = np.asarray(X, dtype=np.float64)
    B = len(groups)
    if len(inner) != B or X.ndim not in (2, 3) or (X.ndim == 3 and X.shape[0] != B):
        raise InputError(f"{B} problems but {len(inner)} inner splits and features of shape {X.shape}")
    n = X.shape[-2]
    targets = []
    for Y in Ys:
        Y = np.asarray(Y, dtype=np.float64)
        if Y.ndim == 1:
            Y = Y[:, None]
        if Y.ndim not in (2, 3) or Y.shape[-2] != n or (Y.ndim == 3 and Y.shape[0] != B):
            raise InputError(f"targets of shape {Y.shape} for {B} problems of {n} rows")
        targets.append(Y)
    return X, targets


def _inner_errors(K: np.ndarray, KYs: list[np.ndarray], fits: np.ndarray, folds: list, g: int,
                  grid: np.ndarray) -> np.ndarray:
    """A held-out group's inner cross-validation errors (B, targets, grid), every strength at once."""
    n, S = K.shape[-1], len(folds)  # folds: per problem, or one list shared by all (S = 1)
    errors = np.zeros((grid.shape[0], len(KYs), grid.shape[1]))
    for j in range(len(folds[0])):
        try:
            parts = _stack([fits[b][np.asarray(folds[b][j], dtype=np.int64)] for b in range(S)],
                           f"inner fold {j} of group {g}")
        except IndexError:
            raise InputError(f"inner fold {j} of group {g} is outside its fit rows") from None
        trs = _minus(n, fits, parts, f"inner fold {j} of group {g}")
        lam, U = np.linalg.eigh(_centred_batch(K, trs, trs)[0])
        lam = np.maximum(lam, 0.0)
        Ut = np.swapaxes(U, 1, 2)
        KU = _centred_batch(K, parts, trs)[0] @ U  # (B, |P|, k)
        Gm = np.swapaxes(KU, 1, 2) @ KU
        D = 1.0 / (lam[:, None, :] + grid[:, :, None])  # (B, grid, k): every strength at once
        for t, KY in enumerate(KYs):
            M = Ut @ _centred_batch(KY, trs, trs)[0] @ U
            cross, means, total = _centred_batch(KY, parts, trs)
            c = np.sum(KU * (cross @ U), axis=1)
            r2 = _sq_batch(KY, parts, means, total)
            errors[:, t] += (r2[:, None] - 2.0 * (D @ c[:, :, None])[:, :, 0]
                             + np.einsum("bgi,bgi->bg", np.broadcast_to(D @ (Gm * M), D.shape), D))
    return errors


def _fit_group(outs: list[list[dict]], K: np.ndarray, Kff: np.ndarray, tests: np.ndarray, fits: np.ndarray,
               targets: list[np.ndarray], errors: np.ndarray, grid: np.ndarray, base: np.ndarray,
               keep_coef: bool) -> None:
    """Each problem's fit at its chosen strength; its held-out predictions written into ``outs``."""
    B, S = grid.shape[0], tests.shape[0]
    pick = np.arange(B)
    lam, U = np.linalg.eigh(Kff)
    lam = np.maximum(lam, 0.0)
    Ut = np.swapaxes(U, 1, 2)
    KtU = _centred_batch(K, tests, fits)[0] @ U
    for t, Y in enumerate(targets):
        best = _best_rows(errors[:, t], grid)
        d = 1.0 / (lam + grid[pick, best][:, None])  # (B, k)
        Yf = _rows_of(Y, fits)
        my = Yf.mean(axis=1)
        Yc = Yf - my[:, None, :]
        pred = my[:, None, :] + ((KtU * d[:, None, :]) @ Ut) @ Yc
        coef = U @ (d[:, :, None] * (Ut @ Yc)) if keep_coef else None
        for b in range(B):
            out = outs[b][t]
            out["predictions"][tests[b if S > 1 else 0]] = pred[b if pred.shape[0] > 1 else 0]
            out["alphas"].append(float(base[best[b]]))
            if coef is not None:
                out["coef"].append((fits[b if S > 1 else 0], coef[b if coef.shape[0] > 1 else 0]))


def cross_fit_batch(X, Ys: list, groups: list, inner: list, *, alphas=None, keep_coef: bool = False,
                    rule: Rule = LM_RULE) -> list[list[dict]]:
    """:func:`cross_fit_many` of B problems at once: one estimator, its steps batched over the problems.

    Problem b has features ``X`` (shared) or ``X[b]``, targets ``Y`` (shared) or ``Y[b]`` for each Y of
    ``Ys``, held-out groups ``groups[b]`` and inner folds ``inner[b]`` (:func:`inner_parts`); each problem
    gets the fits :func:`cross_fit` describes, with those inner folds. Kernel form in the features and the
    targets: the cross-validation error of a fold, ``|R − Kc[P, T] U D Uᵀ Yc|²`` for every strength at once
    (``D = (Λ + α)⁻¹``), needs the targets only through their centred Gram ``Yc Ycᵀ``:
    ``|R|² − 2 Σ_j d_j c_j + dᵀ (G ∘ M) d`` with ``G = (Kc[P, T] U)ᵀ Kc[P, T] U``, ``M = Uᵀ Yc Ycᵀ U`` and
    ``c_j = Σ_a (Kc[P, T] U)_{aj} (R Ycᵀ U)_{aj}``, so a fold costs O(n³) whatever the targets' width q.
    Where the problems share their features (or targets), one Gram matrix serves all of them. The problems'
    g-th groups (and their inner folds) must have one size: one split shared by all, or the splits of one
    ``n`` drawn alike (:func:`georecall.lm.probes.folds_of`, :func:`inner_parts`).

    Parameters
    ----------
    X : (n, p) array shared by every problem, or (B, n, p) array
        Features.
    Ys : list of arrays
        Targets: each (n,) or (n, q) shared by every problem, or (B, n, q).
    groups : list (per problem) of lists of int arrays
        Each problem's held-out groups.
    inner : list (per problem) of lists (per group) of lists of int arrays
        Each group's inner folds, as indices into its fit rows (:func:`inner_parts`).
    alphas : array, optional
        The relative grid (default the rule's).
    keep_coef : bool
        Also return each group's fit rows and dual coefficients (``coef``: a list of ``(fit rows, C)``; the
        dual form of :func:`cross_fit` is ``(X[fit] − mean, C)``).
    rule : Rule
        The scale (and default grid).

    Returns
    -------
    list (per problem) of lists (per Y) of dict
        ``predictions`` (n, q) and ``alphas`` as :func:`cross_fit`; ``coef`` with ``keep_coef``.

    Raises
    ------
    InputError
        A group that leaves fewer than two fit rows; problems whose groups or inner folds differ in size;
        targets whose rows are not the features'.
    """
    B = len(groups)
    X, targets = _batch_inputs(X, Ys, groups, inner)
    n, p = X.shape[-2], X.shape[-1]
    base = np.asarray(rule.alphas if alphas is None else alphas, dtype=np.float64)
    outs: list[list[dict]] = [[{"predictions": np.zeros((n, Y.shape[-1])), "alphas": []} for Y in targets]
                              for _ in range(B)]
    if keep_coef:
        for row in outs:
            for out in row:
                out["coef"] = []
    if B == 0:
        return outs
    G = len(groups[0])
    if any(len(g) != G for g in groups) or any(len(s) != G for s in inner):
        raise InputError("every problem needs the same number of held-out groups and inner splits")
    K = X @ (X.T if X.ndim == 2 else np.swapaxes(X, 1, 2))
    KYs = [Y @ (Y.T if Y.ndim == 2 else np.swapaxes(Y, 1, 2)) for Y in targets]
    # splits shared by every problem (the same lists): index arrays of one row, broadcast over the problems
    shared = all(groups[b] is groups[0] and inner[b] is inner[0] for b in range(B))
    S = 1 if shared else B
    for g in range(G):
        tests = _stack([groups[b][g] for b in range(S)], f"held-out group {g}")
        fits = _minus(n, None, tests, f"held-out group {g}")
        if fits.shape[1] < 2:
            raise InputError(f"a fit needs at least two rows, got {fits.shape[1]}")
        Kff = _centred_batch(K, fits, fits)[0]
        scale = np.array([rule.fit_scale(float(np.trace(Kff[b])), fits.shape[1], p)
                          for b in range(Kff.shape[0])])
        grid = np.broadcast_to(base[None, :] * scale[:, None], (B, base.size))
        errors = _inner_errors(K, KYs, fits, [inner[b][g] for b in range(S)], g, grid)
        _fit_group(outs, K, Kff, tests, fits, targets, errors, grid, base, keep_coef)
    return outs
