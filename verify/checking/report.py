"""A check's report and its verdict: a named check with its parameters, the promise, what was achieved and
whether it passed (:class:`Report`, whose ``passed`` is the one name of a check's outcome from here to the
exit code, and whose ``not_covered`` says why a row that checked nothing is neither a PASS nor a failure);
the comparison of an achieved margin with the promised one (:func:`margin_reaches`); the
exhaustive check of a built construction against its promise (:func:`check_construction`); and a report for
claims that are not query checks (:func:`claim_report`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from georecall.constructions.model import Model, forward_arrays
from georecall.theory import __version__
from georecall.theory.statements import Promise
from georecall.verify.checking.check import CheckResult
from georecall.verify.checking.exact import evaluate

__all__ = ["Report", "achieved_sizes", "check_construction", "claim_report", "margin_reaches"]


def margin_reaches(achieved: float, promised: float, dtype: str | np.dtype = "float64",
                   integer: bool = False, scale: float = 0.0, bound: float = 0.0) -> bool:
    """Does an achieved minimum margin reach the promised lower bound?

    ``achieved`` is a certified lower bound on the exact margin (``CheckResult.min_margin``). A margin that
    is not strictly positive never passes (a tie is ambiguous), whatever was promised: that decides
    exactness, with no allowance. The comparison with the promise (a theorem about exact arithmetic, whose
    value is itself computed in floating point, from weights rounded to the storage format) is exact in
    integer mode; otherwise it allows ``bound`` (the certified margin's distance from the computed one,
    ``CheckResult.rounding_bound``) plus 1000 rounding units of the working precision relative to
    ``max(|promised|, scale)``, where ``scale`` is the magnitude of the logits whose difference the margin is,
    bounded from the stored weights (``CheckResult.logit_bound``, from ``constructions.arithmetic.
    logit_bound``): never a number the construction declares, so a promise cannot widen its own allowance. A
    promise of 1e-16 is never met by 0. An infinite promise (a single possible answer: no wrong answer to
    beat) must be met exactly.

    Parameters
    ----------
    achieved : float
        The certified minimum margin (NaN never passes).
    promised : float
        The promised margin (``Promise.margin``); ``inf`` when there is no wrong answer.
    dtype : str or numpy.dtype
        The working precision whose ``eps`` sets the float-mode tolerance (ignored in integer mode and for an
        infinite promise).
    integer : bool
        Integer mode: compare exactly, no tolerance.
    scale : float
        The logits' magnitude from the stored weights (``CheckResult.logit_bound``), for the relative
        tolerance.
    bound : float
        ``CheckResult.rounding_bound``, allowed on top of the tolerance (float mode).

    Returns
    -------
    bool
        ``achieved > 0`` and ``achieved >= promised`` (integer mode, or a promise that is not finite), else
        ``achieved >= promised − bound − 1000·eps·max(|promised|, |scale|)``.

    Raises
    ------
    TypeError
        From NumPy, a ``dtype`` it does not understand (float mode with a finite promise only).
    ValueError
        From ``numpy.finfo``, a ``dtype`` that is not floating-point (likewise).
    """
    if not achieved > 0:
        return False
    if integer or not np.isfinite(promised):
        return achieved >= promised
    eps = float(np.finfo(np.dtype(dtype)).eps)
    return achieved >= promised - bound - 1e3 * eps * max(abs(promised), abs(scale))


@dataclass
class Report:
    """A named check with its parameters, the promise, what was achieved and the verdict.

    A row that checked nothing (a claim row without claims, e.g. the bits row of a construction that makes
    no bits claim) is **not covered**: ``not_covered`` holds why, its ``passed`` is False (it proves
    nothing), and it is no failure either: ``georecall verify`` counts it apart and its exit code ignores it.
    """

    name: str
    params: dict
    promise: Promise | None
    result: CheckResult
    achieved: dict
    extra: dict = field(default_factory=dict)
    extra_checks: dict[str, bool] = field(default_factory=dict)  # further named conditions that must hold
    # Weights stored in a coarser format than they were built in (check --dtype float32 / float16): the
    # certified margin of the weights as built, before storage rounding (:func:`check_construction`).
    before_storage: CheckResult | None = None
    storage_dtype: str | None = None
    # Why the row checked nothing ("not covered"; None: it covered what its name says).
    not_covered: str | None = None

    def _stored_margin_reaches(self) -> bool:
        assert self.promise is not None
        return margin_reaches(self.result.min_margin, self.promise.margin, self.result.dtype,
                              self.result.integer, self.result.logit_bound, self.result.rounding_bound)

    @property
    def basis(self) -> str | None:
        """What the margin verdict rests on: ``"promise"`` (the stored weights' margin reaches it), ``"promise
        less storage rounding"`` (they answer every query, and the weights as built reach the promise: the
        stored margin is the promise less the storage's measured rounding; docs/precision.md), or None
        (no promise, or the verdict fails)."""
        if self.promise is None or not self._sizes_and_exact():
            return None
        if self._stored_margin_reaches():
            return "promise"
        built = self.before_storage
        if built is not None and built.exact and margin_reaches(
                built.min_margin, self.promise.margin, built.dtype, built.integer, built.logit_bound,
                built.rounding_bound):
            return "promise less storage rounding"
        return None

    def _sizes_and_exact(self) -> bool:
        return (self.result.exact and all(self.extra_checks.values()) and self.promise is not None
                and self.achieved["d"] == self.promise.d and self.achieved["m"] == self.promise.m)

    @property
    def passed(self) -> bool:
        """The verdict: every query answered and every extra check holding, and with a promise the promised d
        and m achieved and its margin reached (:attr:`basis` not None); never for a row that checked nothing
        (:attr:`not_covered` set)."""
        if self.not_covered is not None:
            return False
        if not self.result.exact or not all(self.extra_checks.values()):
            return False
        if self.promise is None:
            return True
        return self.basis is not None

    def as_dict(self) -> dict:
        """The report as a JSON-able dict (one entry of ``georecall check --json``'s ``reports``), with
        ``not_covered`` (why the row checked nothing, or None), and ``storage`` (the margins before and after
        storage) when the weights were stored in a coarser format."""
        doc = {"name": self.name, "passed": self.passed, "not_covered": self.not_covered,
               "params": self.params,
               "promise": None if self.promise is None else self.promise.as_dict(),
               "achieved": self.achieved, "check": self.result.as_dict(), "extra": self.extra,
               "extra_checks": self.extra_checks,
               "version": __version__}
        if self.before_storage is not None:
            built, stored = self.before_storage.min_margin, self.result.min_margin
            doc["storage"] = {"dtype": self.storage_dtype, "basis": self.basis,
                              "margin_before_storage": built, "stored_margin": stored,
                              "storage_rounding": built - stored}
        return doc


def achieved_sizes(model: Model) -> dict:
    """The sizes a report records as achieved, to compare with the promise's.

    Parameters
    ----------
    model : Model
        The built model.

    Returns
    -------
    dict
        ``{"d": model width, "m": largest MLP width (0 without an MLP), "params": Model.parameter_count()
        (the unembedding counted dense), "layers": number of layers}``.
    """
    return {"d": model.d, "m": model.mlp_width, "params": model.parameter_count(),
            "layers": len(model.layers)}


def check_construction(name: str, params: dict, construction, tokens, answers, *, integer: bool = False,
                       dtype=None, **kwargs) -> Report:
    """Exhaustive check of a built construction against its promise (cast to ``dtype`` only when some array
    has another dtype: a cast copies every array, 6 GiB for G1 at N = 2^20). In float mode the verdict is the
    stored (cast) weights' own, in exact arithmetic (``verify.checking.exact.evaluate``).

    Parameters
    ----------
    name : str
        The report's name.
    params : dict
        The parameters it records.
    construction : Construction
        The built construction (model, promise, codes, constants).
    tokens, answers : numpy.ndarray
        Every query and its answer.
    integer : bool
        Integer mode.
    dtype : numpy.dtype, optional
        Working precision (``None``: the model's own).
    **kwargs
        Passed to :func:`check_queries` (``budget``, ``keep``, ``progress``, ``decoder``, ``forward``, ...).

    Returns
    -------
    Report
    """
    model = construction.model
    if dtype is not None and any(a.dtype != np.dtype(dtype) for a in forward_arrays(model).values()):
        # stored in ``dtype``: the same function when every value survives the cast (then no copy is
        # needed: the float mode evaluates the stored values exactly), else the rounded model's
        if integer or not _holds_exactly(model, np.dtype(dtype)):
            model = model.astype(dtype)
    result = evaluate(model, tokens, answers, integer=integer, **kwargs)
    report = Report(name, params, construction.promise, result, achieved_sizes(construction.model),
                    {"constants": construction.constants, "codes": construction.codes.kind,
                     "mu": construction.codes.mu})
    if model is not construction.model and not integer and report.promise is not None and result.exact \
            and not report.passed:
        # Storage rounded the weights and the stored margin misses the promise although every query is
        # answered: the promise is a theorem about the weights as built, so their margin is certified too
        # (the verdict "promise less storage rounding", docs/precision.md); a real shortfall stays a FAIL.
        report.before_storage = evaluate(construction.model, tokens, answers, integer=False, **kwargs)
        report.storage_dtype = str(np.dtype(dtype))
    return report


def _holds_exactly(model: Model, dtype: np.dtype) -> bool:
    """Whether ``dtype`` holds every value of ``model`` exactly (checked one array at a time)."""
    for a in model.arrays().values():
        with np.errstate(over="ignore"):
            if a.dtype != dtype and not np.array_equal(a.astype(dtype).astype(a.dtype), a):
                return False
    return True


def claim_report(name: str, params: dict, checks: dict[str, bool], seconds: float, achieved: dict,
                 extra: dict | None = None, not_covered: str | None = None) -> Report:
    """A report for claims that are not query checks (counts, bounds): each named check is one 'query'.

    Parameters
    ----------
    name : str
        The report's name.
    params : dict
        The parameters it records.
    checks : dict of str to bool
        Each named claim and whether it holds (values are read as ``bool``).
    seconds : float
        Time taken, recorded in the result.
    achieved : dict
        What was achieved (recorded as is).
    extra : dict, optional
        Further fields for the report.
    not_covered : str, optional
        Why there is nothing to check, said when ``checks`` is empty (default "no claim to check").

    Returns
    -------
    Report
        No promise; its result counts ``len(checks)`` queries, the true claims correct (min margin NaN), one
        failure record per false claim (``"claim"`` its name); ``extra_checks`` holds every claim, so the
        report passes exactly when all claims hold. With ``checks`` empty it is not covered
        (``Report.not_covered`` holds the reason): a row that checked nothing is never a PASS.
    """
    ok = sum(bool(v) for v in checks.values())
    failures = [{"query": i, "tokens": [], "expected": 1, "predicted": 0, "margin": 0.0, "claim": name}
                for i, (name, v) in enumerate(checks.items()) if not v]
    result = CheckResult(len(checks), ok, float("nan"), -1, failures, seconds=seconds)
    report = Report(name, params, None, result, achieved, extra or {})
    report.extra_checks.update({k: bool(v) for k, v in checks.items()})
    if not checks:
        report.not_covered = not_covered or "no claim to check"
    return report
