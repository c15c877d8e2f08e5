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

from georecall.constructions.model import Model, chunk_size, forward, integer_bounds, iter_chunks
from georecall.theory import __version__
from georecall.theory.statements import Promise


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
    per_position: list[float] | None = None  # accuracy per read-out position / decoding step
    final_accuracy: float | None = None  # decoding: accuracy of the last generated token alone

    @property
    def accuracy(self) -> float:
        return self.n_correct / self.n_queries if self.n_queries else 1.0

    @property
    def exact(self) -> bool:
        return self.n_correct == self.n_queries

    def as_dict(self) -> dict:
        return {"n_queries": self.n_queries, "n_correct": self.n_correct, "accuracy": self.accuracy,
                "exact": self.exact, "min_margin": self.min_margin, "argmin_query": self.argmin_query,
                "failures": self.failures, "integer": self.integer, "dtype": self.dtype, "seconds": round(self.seconds, 4),
                **({"per_position": self.per_position} if self.per_position is not None else {}),
                **({"final_accuracy": self.final_accuracy} if self.final_accuracy is not None else {})}


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
    positions: np.ndarray | None = None,
    integer: bool = False,
    chunk: int | None = None,
    keep: bool = False,
    max_failures: int = 10,
    progress: bool = False,
) -> CheckResult:
    """Run every query ``tokens[q]`` (shape ``(Q, T)``) and compare the argmax with ``answers[q]``.

    By default the prediction is read at the last position and ``answers`` has shape ``(Q,)``. With
    ``positions`` (P indices, e.g. every chain-of-thought step under teacher forcing) it is read at each of them
    and ``answers`` has shape ``(Q, P)``; every (query, position) pair counts as one prediction, and
    ``per_position`` reports the accuracy at each position.
    ``integer=True`` first proves (``integer_bounds``) that the forward pass computes in exact integer
    arithmetic, then runs it in float64; margins are then exact integers. ``keep=True`` returns the per-query
    predictions and margins. Memory is bounded by the chunk size (default: ``chunk_size(model, T)``).
    """
    tokens = np.asarray(tokens, dtype=np.int64)
    answers = np.asarray(answers, dtype=np.int64)
    n = tokens.shape[0] if tokens.ndim == 2 else -1
    expected_shape = (n,) if positions is None else (n, len(positions))
    if tokens.ndim != 2 or answers.shape != expected_shape:
        raise ValueError(f"need tokens (Q, T) and answers {'(Q,)' if positions is None else '(Q, P)'}; "
                         f"got {tokens.shape} and {answers.shape}")
    if answers.size and (answers.min() < 0 or answers.max() >= model.n_out):
        raise ValueError(f"answers must lie in [0, {model.n_out})")
    if integer:
        integer_bounds(model, tokens.shape[1])
    start = time.perf_counter()
    chunk = chunk or chunk_size(model, tokens.shape[1])
    predictions = np.empty(answers.shape, dtype=np.int64)
    margins = np.empty(answers.shape, dtype=np.float64)
    for i, part in enumerate(iter_chunks(n, chunk)):
        if positions is None:
            logits = forward(model, tokens[part], integer=integer)
            predictions[part], margins[part] = margins_of(logits, answers[part])
        else:
            logits = forward(model, tokens[part], at="all", integer=integer)[:, positions]
            shape = logits.shape[:2]
            pred, marg = margins_of(logits.reshape(-1, logits.shape[2]), answers[part].reshape(-1))
            predictions[part], margins[part] = pred.reshape(shape), marg.reshape(shape)
        if progress and i % 8 == 0:
            print(f"\r  checked {part.stop:,}/{n:,} queries", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    return _result(tokens, answers, predictions, margins, integer, model, start, keep, max_failures)


def _result(tokens, answers, predictions, margins, integer, model, start, keep, max_failures) -> CheckResult:
    """Summarize per-prediction margins (shape (Q,) or (Q, P)) into a CheckResult."""
    ok = margins > 0
    flat = margins.reshape(-1)
    wrong = np.flatnonzero(~ok.reshape(-1))
    per = margins.shape[1] if margins.ndim == 2 else 1
    failures = []
    for f in wrong[:max_failures]:
        q, p = divmod(int(f), per)
        failures.append({"query": q, **({"position": p} if margins.ndim == 2 else {}),
                         "tokens": tokens[q].tolist(), "expected": int(answers.reshape(-1)[f]),
                         "predicted": int(predictions.reshape(-1)[f]), "margin": float(flat[f])})
    argmin = int(flat.argmin()) if flat.size else -1
    return CheckResult(
        n_queries=flat.size, n_correct=flat.size - wrong.size,
        min_margin=float(flat[argmin]) if flat.size else float("inf"), argmin_query=argmin // per,
        failures=failures, integer=integer,
        dtype="float64" if integer else str(model.entity_embedding.dtype), seconds=time.perf_counter() - start,
        predictions=predictions if keep else None, margins=margins if keep else None,
        per_position=ok.mean(axis=0).tolist() if margins.ndim == 2 else None,
    )


def check_decoding(
    model: Model,
    prompts: np.ndarray,
    chains: np.ndarray,
    *,
    chunk: int | None = None,
    keep: bool = False,
    max_failures: int = 10,
    progress: bool = False,
) -> CheckResult:
    """Greedy chain-of-thought decoding of every prompt, scored against the true chain ``(Q, k)``.

    Step t runs THE forward pass on the prompt plus the model's own k − 1 previous predictions (re-embedded by
    the input table) and records the margin of the true ``v_t``. A query counts as correct only if every step
    is (then its final answer is right too); ``per_position`` is the accuracy of each step and
    ``final_accuracy`` that of the last token alone.
    """
    prompts = np.asarray(prompts, dtype=np.int64)
    chains = np.asarray(chains, dtype=np.int64)
    if prompts.ndim != 2 or chains.ndim != 2 or chains.shape[0] != prompts.shape[0]:
        raise ValueError(f"need prompts (Q, T) and chains (Q, k); got {prompts.shape} and {chains.shape}")
    if model.n_out != model.n_entities:
        raise ValueError("decoding feeds predictions back as entities: needs n_out == N")
    start = time.perf_counter()
    n, k = chains.shape
    chunk = chunk or chunk_size(model, prompts.shape[1] + k)
    predictions = np.empty(chains.shape, dtype=np.int64)
    margins = np.empty(chains.shape, dtype=np.float64)
    for i, part in enumerate(iter_chunks(n, chunk)):
        seq = prompts[part]
        for t in range(k):
            logits = forward(model, seq)
            predictions[part, t], margins[part, t] = margins_of(logits, chains[part, t])
            seq = np.concatenate([seq, predictions[part, t : t + 1]], axis=1)
        if progress and i % 8 == 0:
            print(f"\r  decoded {part.stop:,}/{n:,} chains", end="", file=sys.stderr, flush=True)
    if progress:
        print(file=sys.stderr)
    per_query = margins.min(axis=1)
    result = _result(prompts, chains[:, -1], predictions[:, -1], per_query, False, model, start, False,
                     max_failures)
    result.per_position = (margins > 0).mean(axis=0).tolist()
    result.final_accuracy = float((predictions[:, -1] == chains[:, -1]).mean()) if n else 1.0
    if keep:
        result.predictions, result.margins = predictions, margins
    return result


def margin_reaches(achieved: float, promised: float, dtype: str = "float64", integer: bool = False) -> bool:
    """Does an achieved minimum margin reach the promised lower bound?

    A margin that is not strictly positive never passes (a tie is ambiguous), whatever was promised. In
    integer mode the comparison is exact. Otherwise the allowance is relative to the promise's own scale:
    ``achieved >= promised·(1 − 1000·eps)`` with eps of the working precision, so a promise of 1e-16 is not met
    by 0 and a promise of 4 is met by 3.9999999999995 (rounding of a float forward pass). An infinite promise (a
    single possible answer: no wrong answer to beat) must be met exactly.
    """
    if not achieved > 0:
        return False
    if integer or not np.isfinite(promised):
        return achieved >= promised
    eps = float(np.finfo(np.dtype(dtype)).eps)
    return achieved >= promised - 1e3 * eps * abs(promised)


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
        return (self.achieved["d"] == self.promise.d and self.achieved["m"] == self.promise.m
                and margin_reaches(self.result.min_margin, self.promise.margin, self.result.dtype,
                                   self.result.integer))

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


def claim_report(name: str, params: dict, checks: dict[str, bool], seconds: float, achieved: dict,
                 extra: dict | None = None) -> Report:
    """A report for claims that are not query checks (counts, bounds): each named check is one 'query'."""
    ok = sum(bool(v) for v in checks.values())
    failures = [{"query": i, "tokens": [], "expected": 1, "predicted": 0, "margin": 0.0, "claim": name}
                for i, (name, v) in enumerate(checks.items()) if not v]
    result = CheckResult(len(checks), ok, float("nan"), -1, failures, seconds=seconds)
    report = Report(name, params, None, result, achieved, extra or {})
    report.extra_checks.update({k: bool(v) for k, v in checks.items()})
    return report
