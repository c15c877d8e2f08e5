"""The ordinary checker inside certification: falsification before any relaxation
(:func:`falsify_with_check`) and the confirmation of a witness task (:func:`confirm_with_check`)
(docs/theory.md, "Certification for every task", refutation).

Both run ``run_check``, what ``georecall check --task`` runs, so that certify reports REFUTED only where the
ordinary checker fails the construction.
"""

from __future__ import annotations

import numpy as np

from georecall.constructions.encoding import assemble_model
from georecall.errors import InputError
from georecall.memory import Budget
from georecall.theory import seeds
from georecall.theory.tasks import Task, random_task, task_for_seed
from georecall.theory.tokens import queries as task_queries
from georecall.verify.checking.certify_family import build_on_task, same_fields
from georecall.verify.checking.check import check_decoding, check_queries
from georecall.verify.checking.exact import exact_margins
from georecall.verify.checking.run import run_check

__all__ = [
    "FALSIFY_DRAWN_BELOW",
    "FALSIFY_QUERIES",
    "FALSIFY_SAMPLE",
    "confirm_with_check",
    "falsify_with_check",
]

FALSIFY_QUERIES = 2**18  # largest number of queries per task the falsification checks (else: skipped)
FALSIFY_DRAWN_BELOW = 2**12  # below this many queries, two drawn tasks are checked beside the seeded one


FALSIFY_SAMPLE = 2**12  # queries of a task checked first, spread over it (the rest only if they all pass)


def falsify_with_check(spec, N: int, R: int, k: int, *, codes, D, options: dict, seed: int, attributes: str,
            symmetric: bool, budget: Budget, record: dict, family=None, integer: bool = False):
    """The ordinary checker on THE seeded task and, below :data:`FALSIFY_DRAWN_BELOW` queries, two drawn
    tasks: the first query found wrong in exact arithmetic (status "wrong": certainly margin <= 0).

    With ``family`` (a family spec read at the last position), :data:`FALSIFY_SAMPLE` queries spread over
    each task are checked first on ``F ⊕ enc(π)`` itself (``check_queries``, the checker's own function).
    Skipped above :data:`FALSIFY_QUERIES` queries or when the check's own estimate is over the budget.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction.
    N, R, k : int
        Sizes.
    codes, D, options, seed, attributes, symmetric
        As ``certify`` was asked (validated).
    budget : Budget
        The run's memory budget.
    record : dict
        The certificate's declaration record: ``record["falsification"]`` says what was checked.
    family : Family, optional
        The canonical family, to check a sample of each task's queries on first.
    integer : bool
        Integer mode (the sample's check).

    Returns
    -------
    (Task, dict, CheckResult) or None
        The task, the failure (as the checker reports it) and the check's result; None when no query was
        found wrong.
    """
    queries = N * R**k
    if queries > FALSIFY_QUERIES:
        record["falsification"] = {"tasks": 0, "skipped": f"{queries:,} queries per task > "
                                                          f"{FALSIFY_QUERIES:,}"}
        return None
    seeded = None
    tasks = [task_for_seed(N, R, seed, attributes=attributes, symmetric=symmetric)]  # type: ignore[arg-type]
    names = ["the seeded task"]
    if queries < FALSIFY_DRAWN_BELOW:
        for i in (1, 2):
            tasks.append(random_task(N, R, seeds.rng(seed, "task", i), attributes=attributes,  # type: ignore[arg-type]
                                     symmetric=symmetric))
            names.append(f"drawn task {i}")
    for task, name in zip(tasks, names):
        if family is not None and queries > FALSIFY_SAMPLE:
            tokens, answers = task_queries(task, k)
            pick = np.unique(np.linspace(0, len(tokens) - 1, FALSIFY_SAMPLE).astype(np.int64))
            sample = check_queries(assemble_model(family, task), tokens[pick], answers[pick], integer=integer,
                                   budget=budget)
            wrong = [f for f in sample.failures if f.get("status") == "wrong"]
            if wrong:
                record["falsification"] = {"tasks": len(tasks), "failed_on": name,
                                           "queries": "queries spread over the task"}
                return task, wrong[0], sample
        try:
            report = run_check(spec, N, R, k, seed=seed, codes=codes, D=D, options={**options},
                               attributes=attributes, symmetric=symmetric, task=task,  # type: ignore[arg-type]
                               budget=budget)
        except InputError as exc:  # the check's own estimate over the budget, ...: no falsification
            record["falsification"] = {"tasks": 0, "skipped": str(exc)}
            return None
        if name == "the seeded task":  # what `georecall check` prints for the same options
            seeded = report.extra.get("fingerprint")
        wrong = [f for f in report.result.failures if f.get("status") == "wrong"]
        if wrong:
            record["falsification"] = {"tasks": len(tasks), "failed_on": name, "queries": "queries"}
            return task, wrong[0], report.result
    record["falsification"] = {"tasks": len(tasks), "outcome": "no query wrong",
                               "seeded_model_fingerprint": seeded}
    return None


def confirm_with_check(spec, family, task: Task, prompt: list[int], *, N: int, R: int, k: int, codes, D,
                    options: dict, seed: int, attributes: str, symmetric: bool, integer: bool, compact: bool,
                    budget: Budget) -> dict:
    """Whether the ordinary checker fails a witness task: ``check`` on it (as ``georecall check --task``
    runs it), and THE forward pass with dense logits on the witness query itself.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction.
    family : Family
        The canonical family certified.
    task : Task
        The witness task.
    prompt : list of int
        The witness query's tokens.
    N, R, k : int
        Sizes.
    codes, D, options, seed, attributes, symmetric
        As ``certify`` was asked (validated).
    integer : bool
        Integer mode.
    compact : bool
        The family holds a compact binary codebook (``certify.compact_codes_apply``): the checked model is
        compared with it on values only.
    budget : Budget
        The run's memory budget.

    Returns
    -------
    dict
        ``check_passed``, ``min_margin``, ``accuracy`` (check's), ``check_tolerance`` (float mode: check's
        allowance), ``same_object`` (the checked model equals the family's ``F ⊕ enc(witness)`` on every
        field the forward pass reads), ``forward_pass`` (the witness query alone) and ``exact_margin``
        (when check passes: the witness query's exact margin interval).
    """
    report = run_check(spec, N, R, k, seed=seed, codes=codes, D=D, options={**options},
                       attributes=attributes, symmetric=symmetric, task=task,  # type: ignore[arg-type]
                       budget=budget)
    rebuilt = build_on_task(spec, task, k, codes, D, seed, options)
    same = not same_fields(rebuilt.model, assemble_model(family, task), values_only=compact)
    tokens = np.asarray([prompt], dtype=np.int64)
    if spec.decoding == "greedy":
        target = task.table[prompt[k - 1] - N, prompt[k]]  # step 1's answer; then the true chain
        chain = [int(target)]
        for t in range(2, k + 1):
            chain.append(int(task.table[prompt[k - t] - N, chain[-1]]))
        single = check_decoding(rebuilt.model, tokens, np.asarray([chain]), forward="dense", decoder="dense")
    else:
        s_, path = prompt[-1], [t - N for t in prompt[:-1]][::-1]
        answer = int(task.compose(path)[s_]) + (path[0] * N if attributes == "disjoint" else 0)
        single = check_queries(rebuilt.model, tokens, np.asarray([answer]), integer=integer,
                               forward="dense", decoder="dense")
    exact = tolerance = None
    if report.passed and spec.decoding != "greedy":  # not confirmed: the witness query's exact margin
        ex = exact_margins(rebuilt.model, tokens, np.asarray([answer]), budget=budget)
        exact = [float(ex.lo[0]), float(ex.hi[0])]
        if not integer and report.promise is not None:  # report.margin_reaches's allowance
            tolerance = report.result.rounding_bound + 1e3 * float(np.finfo(np.float64).eps) * max(
                abs(report.promise.margin), report.result.logit_bound)
    return {"check_passed": report.passed, "min_margin": report.result.min_margin,
            "check_tolerance": tolerance,
            "accuracy": report.result.accuracy, "same_object": same,
            "forward_pass": {"forward": single.forward, "decoder": single.decoder,
                             "margin": single.min_margin, "correct": single.exact},
            "exact_margin": exact}
