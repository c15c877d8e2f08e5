"""The exhaustive checker: every query through THE forward pass, argmax, and the logit margin of each.

A query's margin is ``logit[answer] − max_{j ≠ answer} logit[j]``; the query is answered exactly iff its margin
is strictly positive (a tie is a failure: argmax would be ambiguous). The checker works on any :class:`Model`
and any list of queries; ``check_construction`` adds promised-vs-achieved for a built construction.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import numpy as np

from constructions.model import Model, chunk_size, forward, integer_bounds, iter_chunks
from theory import __version__
from theory.statements import Promise


@dataclass
class CheckResult:
    """Outcome of an exhaustive check."""

    n_queries: int
    n_correct: int
    min_margin: float
    argmin_query: int
    failures: list[dict] = field(default_factory=list)  # first few: query index, tokens, expected, predicted
    integer: bool = False
    dtype: str = "float64"
    seconds: float = 0.0
    predictions: np.ndarray | None = None
    margins: np.ndarray | None = None

    @property
    def accuracy(self) -> float:
        return self.n_correct / self.n_queries if self.n_queries else 1.0

    @property
    def exact(self) -> bool:
        return self.n_correct == self.n_queries

    def as_dict(self) -> dict:
        return {"n_queries": self.n_queries, "n_correct": self.n_correct, "accuracy": self.accuracy,
                "exact": self.exact, "min_margin": self.min_margin, "argmin_query": self.argmin_query,
                "failures": self.failures, "integer": self.integer, "dtype": self.dtype, "seconds": round(self.seconds, 4)}


def margins_of(logits: np.ndarray, answers: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(predictions, margins)`` for a block of logits ``(B, n_out)``; overwrites ``logits`` (scratch)."""
    rows = np.arange(logits.shape[0])
    predictions = logits.argmax(axis=1)
    correct = logits[rows, answers].copy()
    logits[rows, answers] = -np.inf
    runner_up = logits.max(axis=1) if logits.shape[1] > 1 else np.full(len(rows), -np.inf)
    return predictions, correct - runner_up


def check_queries(
    model: Model,
    tokens: np.ndarray,
    answers: np.ndarray,
    *,
    integer: bool = False,
    chunk: int | None = None,
    keep: bool = False,
    max_failures: int = 10,
    progress: bool = False,
) -> CheckResult:
    """Run every query ``tokens[q]`` (shape ``(Q, T)``) and compare the argmax with ``answers[q]``.

    ``integer=True`` first proves (``integer_bounds``) that the forward pass computes in exact integer
    arithmetic, then runs it in float64; margins are then exact integers. ``keep=True`` returns the per-query
    predictions and margins. Memory is bounded by the chunk size (default: ``chunk_size(model, T)``).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    answers = np.asarray(answers, dtype=np.int64)
    if tokens.ndim != 2 or answers.shape != (tokens.shape[0],):
        raise ValueError(f"need tokens (Q, T) and answers (Q,); got {tokens.shape} and {answers.shape}")
    if answers.size and (answers.min() < 0 or answers.max() >= model.n_out):
        raise ValueError(f"answers must lie in [0, {model.n_out})")
    if integer:
        integer_bounds(model, tokens.shape[1])
    start = time.perf_counter()
    n = tokens.shape[0]
    chunk = chunk or chunk_size(model, tokens.shape[1])
    predictions = np.empty(n, dtype=np.int64)
    margins = np.empty(n, dtype=np.float64)
    for i, part in enumerate(iter_chunks(n, chunk)):
        logits = forward(model, tokens[part], integer=integer)
        predictions[part], margins[part] = margins_of(logits, answers[part])
        if progress and i % 8 == 0:
            print(f"\r  checked {part.stop:,}/{n:,} queries", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    wrong = np.flatnonzero(~(margins > 0))
    failures = [{"query": int(q), "tokens": tokens[q].tolist(), "expected": int(answers[q]),
                 "predicted": int(predictions[q]), "margin": float(margins[q])} for q in wrong[:max_failures]]
    argmin = int(margins.argmin()) if n else -1
    return CheckResult(
        n_queries=n, n_correct=n - wrong.size, min_margin=float(margins[argmin]) if n else float("inf"),
        argmin_query=argmin, failures=failures, integer=integer,
        dtype="float64" if integer else str(model.entity_embedding.dtype), seconds=time.perf_counter() - start,
        predictions=predictions if keep else None, margins=margins if keep else None,
    )


@dataclass
class Report:
    """A named check with its parameters, the promise, what was achieved and the verdict."""

    name: str
    params: dict
    promise: Promise | None
    result: CheckResult
    achieved: dict
    extra: dict = field(default_factory=dict)
    extra_checks: dict[str, bool] = field(default_factory=dict)  # further named conditions that must hold

    @property
    def passed(self) -> bool:
        if not self.result.exact or not all(self.extra_checks.values()):
            return False
        if self.promise is None:
            return True
        # Sizes must equal the promise, and the margin must reach the promised lower bound: exactly in integer
        # mode, up to a rounding allowance of 1000 ulps of the working precision otherwise.
        eps = float(np.finfo(np.dtype(self.result.dtype)).eps)
        tol = 0.0 if self.result.integer else 1e3 * eps * max(1.0, abs(self.promise.margin))
        return (self.achieved["d"] == self.promise.d and self.achieved["m"] == self.promise.m
                and self.result.min_margin >= self.promise.margin - tol)

    def as_dict(self) -> dict:
        return {"name": self.name, "passed": self.passed, "params": self.params,
                "promise": None if self.promise is None else self.promise.as_dict(),
                "achieved": self.achieved, "check": self.result.as_dict(), "extra": self.extra,
                "extra_checks": self.extra_checks,
                "version": __version__}


def achieved_sizes(model: Model) -> dict:
    return {"d": model.d, "m": model.mlp_width, "params": model.parameter_count(), "layers": len(model.layers)}


def check_construction(name: str, params: dict, construction, tokens, answers, *, integer: bool = False,
                       dtype=None, **kwargs) -> Report:
    """Exhaustive check of a built construction against its promise."""
    model = construction.model if dtype is None else construction.model.astype(dtype)
    result = check_queries(model, tokens, answers, integer=integer, **kwargs)
    return Report(name, params, construction.promise, result, achieved_sizes(construction.model),
                  {"constants": construction.constants, "codes": construction.codes.kind,
                   "mu": construction.codes.mu})
