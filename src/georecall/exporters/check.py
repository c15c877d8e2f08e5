"""The check in the target: every query of the task run by the target's own library, compared with THE
forward pass of georecall.

For every query (and, for a chain-of-thought model, every decoding step, greedy, the target feeding back its
own predictions) the target's logits at the read position are compared with georecall's float64 logits:

- **logits**: ``|target − georecall| <= 2·bound``, where ``bound`` is the first-order rounding bound of the
  target's own computation in its dtype (:func:`georecall.exporters.graph.reference`), one per query
  (the largest over its logits). It bounds the target's distance from the exact logits, and also georecall's
  float64 pass's: the same first-order terms (products of length n within ``γ_n``, one rounding per sum, the
  stored weights' rounding) with ``u = 2^-53`` and georecall's float64 weights, no larger term by term than
  the target's (whose ``u`` is at least as large and whose weights are cast from those);
- **answers**: the target's argmax equals georecall's on **every** query, and each query is right in the
  target exactly when it is right in georecall (the sign of its margin over the task's answer is the same):
  any change fails the check, whatever the logits' allowance. A change where georecall's own margin is
  within twice the largest bound (a near-tie rounding could flip) is also counted as ``within_rounding``, to
  say why it may have happened, but it fails all the same: the model that leaves must answer as the model
  checked;
- **margins**: recomputed from the target's own logits (top minus runner-up; a tie is 0 and wrong); for a
  construction, its smallest margin must reach the promise less twice the bound (two logits, each within
  the bound: :func:`~georecall.verify.checking.report.margin_reaches`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from georecall.constructions.arithmetic import logit_bound
from georecall.constructions.decoding import iter_chunks
from georecall.constructions.forward import forward
from georecall.constructions.model import Model
from georecall.exporters.graph import Graph, reference
from georecall.theory.statements import Promise
from georecall.theory.tasks import Task
from georecall.theory.tokens import chains, queries
from georecall.verify.checking.report import margin_reaches

__all__ = ["QuerySet", "check_in_target", "query_set"]

Runner = Callable[[np.ndarray], np.ndarray]  # int64 tokens (B, T) -> logits (B, n_out) at the last position


@dataclass(frozen=True, eq=False)
class QuerySet:
    """Every query of a task: ``prompts (n, T)`` and ``answers (n, steps)``; ``greedy``: decode ``steps``
    tokens (chain of thought), else read one answer at the last position."""

    prompts: np.ndarray
    answers: np.ndarray
    greedy: bool
    k: int

    @property
    def steps(self) -> int:
        """Answers per query: the number of tokens read or decoded per query (columns of ``answers``)."""
        return self.answers.shape[1]

    @property
    def longest(self) -> int:
        """The longest sequence the target sees."""
        return self.prompts.shape[1] + self.steps - 1


def query_set(task: Task, k: int = 1, *, greedy: bool = False) -> QuerySet:
    """The queries of ``task``: all N·R^k of them, with their answers (every step of the chain when
    ``greedy``).

    Parameters
    ----------
    task : Task
    k : int
        Hops.
    greedy : bool
        Chain-of-thought decoding of k steps.

    Returns
    -------
    QuerySet
    """
    tokens, answers = queries(task, k)
    if greedy:
        return QuerySet(tokens, chains(task, k), True, k)
    return QuerySet(tokens, np.asarray(answers).reshape(-1, 1), False, k)


def _top_two(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """argmax and margin (top minus runner-up; inf with one output) of each row."""
    best = logits.argmax(axis=1)
    if logits.shape[1] == 1:
        return best, np.full(logits.shape[0], np.inf)
    rows = np.arange(logits.shape[0])
    top = logits[rows, best]
    others = logits.copy()
    others[rows, best] = -np.inf
    return best, top - others.max(axis=1)


def check_in_target(model: Model, graph: Graph, run: Runner, qs: QuerySet, *, target: str,
                    promise: Promise | None = None, chunk: int = 1024) -> dict:
    """Run every query through the target and compare it with georecall (module docstring).

    Parameters
    ----------
    model : Model
        The georecall model (evaluated in float64).
    graph : Graph
        What the target stores and computes (:func:`~georecall.exporters.graph.graph_of`).
    run : callable
        The target: int64 tokens ``(B, T)`` -> its logits ``(B, n_out)`` at the last position.
    qs : QuerySet
        The queries.
    target : str
        Its name, for the report.
    promise : Promise, optional
        A construction's promise (its margin is then required).
    chunk : int
        Queries per batch.

    Returns
    -------
    dict
        The report: counts, the largest logit difference and bound, margins, ``passed``.
    """
    start = time.perf_counter()
    wide = all(a.dtype == np.float64 for a in model.arrays().values())
    model64 = model if wide else model.astype(np.float64)
    n = qs.prompts.shape[0]
    correct = np.ones(n, dtype=bool)
    min_margin_target = np.full(n, np.inf)
    min_margin_georecall = np.full(n, np.inf)
    worst_diff = worst_bound = worst_ratio = 0.0
    outside = disagree = within_rounding = sign_changes = 0
    for part in iter_chunks(n, chunk):
        seq = qs.prompts[part]
        for step in range(qs.steps):
            got = np.asarray(run(seq), dtype=np.float64)
            ref = forward(model64, seq)
            _, bound = reference(graph, seq)
            allowed = 2 * bound[:, 0]  # one per query: every logit of it within this of georecall's
            diff = np.abs(got - ref).max(axis=1)
            outside += int(np.count_nonzero(~(diff <= allowed)))
            worst_diff = max(worst_diff, float(diff.max(initial=0.0)))
            worst_bound = max(worst_bound, float(allowed.max(initial=0.0)))
            worst_ratio = max(worst_ratio, float((diff / np.maximum(allowed, 1e-300)).max(initial=0.0)))
            best_t, margin_t = _top_two(got)
            best_r, margin_r = _top_two(ref)
            decided = margin_r > 2 * allowed
            differ = best_t != best_r
            disagree += int(np.count_nonzero(differ))
            within_rounding += int(np.count_nonzero(differ & ~decided))
            margin_t = np.where(margin_t > 0, margin_t, 0.0)
            right_t = (best_t == qs.answers[part, step]) & (margin_t > 0)
            right_r = (best_r == qs.answers[part, step]) & (margin_r > 0)
            sign_changes += int(np.count_nonzero(right_t != right_r))
            correct[part] &= right_t
            min_margin_target[part] = np.minimum(min_margin_target[part], margin_t)
            min_margin_georecall[part] = np.minimum(min_margin_georecall[part], margin_r)
            if qs.greedy:  # the target's own prediction is fed back, as a user's decoding loop would
                seq = np.concatenate([seq, best_t[:, None].astype(np.int64)], axis=1)
    accuracy = float(correct.mean()) if n else 1.0
    report = {
        "target": target,
        "dtype": str(graph.dtype),
        "queries": int(n),
        "steps": qs.steps,
        "decoding": "greedy" if qs.greedy else "last",
        "correct": int(correct.sum()),
        "accuracy": accuracy,
        "queries_outside_bound": outside,
        "max_logit_difference": worst_diff,
        "max_allowed": worst_bound,
        "max_difference_over_allowed": worst_ratio,
        "disagreements_with_georecall": disagree,
        "within_rounding": within_rounding,
        "right_or_wrong_changed": sign_changes,
        "min_margin_target": float(min_margin_target.min(initial=np.inf)),
        "min_margin_georecall": float(min_margin_georecall.min(initial=np.inf)),
        "bound": "twice the first-order rounding bound of the target's computation in its dtype (exp "
                 "within 4 ulps): once for the target, once for georecall's float64 pass",
    }
    passed = outside == 0 and disagree == 0 and sign_changes == 0
    if promise is not None:
        report["promise_margin"] = float(promise.margin)
        # a margin is a difference of two logits, each within bound of its exact value: worst_bound (2·bound)
        reaches = bool(margin_reaches(float(min_margin_target.min(initial=np.inf)), promise.margin,
                                      graph.dtype, scale=logit_bound(model), bound=worst_bound))
        report["margin_reaches_promise"] = reaches
        passed = passed and accuracy == 1.0 and reaches
    report["passed"] = bool(passed)
    report["seconds"] = round(time.perf_counter() - start, 3)
    return report
