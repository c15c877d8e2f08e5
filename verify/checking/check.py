"""The exhaustive checker: every query through THE forward pass, argmax, and the logit margin of each.

A query's margin is ``logit[answer] − max_{j ≠ answer} logit[j]``; the query is answered exactly iff its
margin is strictly positive (a tie is a failure: argmax would be ambiguous). The checker works on any
:class:`Model` and any list of queries; :mod:`.report` compares what a check achieved with what a
construction promised.

Two exact fast paths stand behind the same interface (proofs in docs/theory.md; tests compare them with the
reference on random models):

- the **decoder** (``decoder="auto" | "dense" | "hypercube"``): ``dense`` forms the logits; ``hypercube``
  (``verify.decoders``) reads argmax and margin off the residual when the read-out is ``λ·`` every ±1 pattern
  (``N = 2^D``): argmax = sign pattern, margin = ``2·λ·min_i |v_i|``. ``auto`` takes it when the read-out has
  that structure (checked exactly) and the dense decoder otherwise.
- the **forward** (``forward="auto" | "dense" | "tables"``): ``dense`` is THE forward pass per query chunk;
  ``tables`` (``verify.additive``) is the same function for one-layer models whose attention weights do not
  depend on the tokens (G1's uniform attention, C1's positional head), summed from per-(position, token)
  tables built once, on the residual columns the read-out reads only. ``auto`` takes it when it applies.

``CheckResult.decoder`` and ``CheckResult.forward`` record what ran, and ``fallback`` why a fast path did not.

Memory: THE forward pass runs in chunks of queries and the tables in blocks of tokens, both sized from the
run's :class:`~georecall.memory.Budget` (``budget=``; :func:`georecall.memory.array_bytes`), the same bytes
that :func:`georecall.estimates.check_estimate` counts. The chunking changes no prediction and no margin.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from georecall import memory
from georecall.constructions.arithmetic import integer_bounds, logit_bound, working_format
from georecall.constructions.decoding import chunk_size, iter_chunks
from georecall.constructions.forward import forward
from georecall.constructions.model import Model, flatten, forward_arrays, unflatten
from georecall.constructions.rounding import format_of
from georecall.errors import InputError
from georecall.memory import Budget
from georecall.verify.checking.additive import AdditivePlan, NotAdditive, plan_additive
from georecall.verify.checking.additive_run import run_additive
from georecall.verify.checking.decoders import (
    Certified,
    Hypercube,
    certify_logits,
    dense_certify,
    detect_hypercube,
    hypercube_certify,
    margins_of,
)

__all__ = [
    "DECODERS",
    "FORWARDS",
    "CheckResult",
    "check_decoding",
    "check_queries",
    "margins_of",
]

DECODERS = ("auto", "dense", "hypercube")
forward_pass = forward  # THE forward pass, under a name that the ``forward=`` option does not shadow
FORWARDS = ("auto", "dense", "tables")


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
    decoder: str = "dense"  # which decoder ran: "dense" (logits) or "hypercube"
    forward: str = "dense"  # which forward ran: "dense" (THE forward pass) or "tables" (token-additive)
    fallback: str = ""  # why a fast path asked for ("auto") was not taken
    n_undecided: int = 0  # float mode: neither certainly right nor certainly wrong within rounding
    rounding_bound: float = 0.0  # float mode: the largest certified margin's distance from the computed one
    margin_highs: np.ndarray | None = None  # with keep: upper ends of the margin intervals (margins: lower)
    arith: str = "stored"  # "exact" (verify.checking.exact), or the dtype the verdict was computed in
    n_redecided: int = 0  # exact arith: queries the float64 bound left open or loose, computed exactly
    logit_bound: float = 0.0  # a-priori max |logit| from the stored weights (arithmetic.logit_bound)
    right: np.ndarray | None = None  # with keep: certainly right (margin > 0 exactly; margins > 0 but for
    # an exact margin nearer 0 than the smallest subnormal, whose lower end rounds to 0)

    @property
    def accuracy(self) -> float:
        """Share of queries answered, ``n_correct / n_queries`` (1.0 when there are none)."""
        return self.n_correct / self.n_queries if self.n_queries else 1.0

    @property
    def exact(self) -> bool:
        """Whether every query is answered: ``n_correct == n_queries``."""
        return self.n_correct == self.n_queries

    @property
    def n_wrong(self) -> int:
        """Queries whose margin in exact arithmetic is certainly <= 0."""
        return self.n_queries - self.n_correct - self.n_undecided

    @property
    def mode(self) -> str:
        """What the verdict certifies: ``"integer exact"`` (every number computed exactly) or ``"float with
        bound"`` (margins in exact arithmetic certified from the computed ones and a rounding bound)."""
        if self.integer:
            return "integer exact"
        if self.arith == "exact":
            return "exact (float64 with bound, open queries re-decided exactly)"
        return "float with bound"

    def as_dict(self) -> dict:
        """The result as a JSON-able dict: the counts, accuracy, mode, bounds, minimum margin and its query,
        the first failures and how it ran (no arrays; ``fallback``, ``per_position`` and ``final_accuracy``
        only when set)."""
        return {"n_queries": self.n_queries, "n_correct": self.n_correct, "accuracy": self.accuracy,
                "exact": self.exact, "n_undecided": self.n_undecided, "n_wrong": self.n_wrong,
                "mode": self.mode, "rounding_bound": self.rounding_bound, "arith": self.arith,
                "n_redecided": self.n_redecided, "logit_bound": self.logit_bound,
                "min_margin": self.min_margin, "argmin_query": self.argmin_query,
                "failures": self.failures, "integer": self.integer, "dtype": self.dtype,
                "seconds": round(self.seconds, 4), "decoder": self.decoder, "forward": self.forward,
                **({"fallback": self.fallback} if self.fallback else {}),
                **({"per_position": self.per_position} if self.per_position is not None else {}),
                **({"final_accuracy": self.final_accuracy} if self.final_accuracy is not None else {})}


class _Tally:
    """Streaming summary of (query, position) predictions: counts, the first minimum margin, the first
    failures (by flat index ``query·P + position``), per-position accuracy; full arrays only with ``keep``."""

    def __init__(self, n: int, per: int, keep: bool, max_failures: int, shape: tuple[int, ...]) -> None:
        self.n, self.per, self.max_failures = n, per, max_failures
        self.correct = np.zeros(per, dtype=np.int64)
        self.min_margin, self.argmin = np.inf, -1
        self.undecided, self.bound, self.redecided = 0, 0.0, 0
        self.fail_flat: list[np.ndarray] = []
        self.fail_pred: list[np.ndarray] = []
        self.fail_margin: list[np.ndarray] = []
        self.fail_open: list[np.ndarray] = []  # undecided within rounding (not certainly wrong)
        self.predictions = np.empty(shape, dtype=np.int64) if keep else None
        self.margins = np.empty(shape, dtype=np.float64) if keep else None
        self.highs = np.empty(shape, dtype=np.float64) if keep else None
        self.right = np.empty(shape, dtype=bool) if keep else None

    def add(self, queries, position: int, predictions: np.ndarray, margins: np.ndarray,
            hi: np.ndarray | None = None, computed: np.ndarray | None = None,
            positive: np.ndarray | None = None) -> None:
        """Record one block: ``queries`` a slice or an ascending index array, at read position index
        ``position``; ``margins`` certified lower bounds (exact: > 0), ``hi`` upper bounds (wrong: <= 0; None:
        the margins are exact), ``computed`` the computed margins (for the rounding-bound summary),
        ``positive`` the exact re-decision's signs (``Certified.positive``: right where ``margins`` rounds an
        exact positive margin to 0)."""
        q = np.arange(queries.start, queries.stop) if isinstance(queries, slice) else np.asarray(queries)
        ok = margins > 0 if positive is None else (margins > 0) | positive
        if self.predictions is not None and self.margins is not None:
            target = (q, position) if self.predictions.ndim == 2 else q
            self.predictions[target], self.margins[target] = predictions, margins
            if self.highs is not None:
                self.highs[target] = margins if hi is None else hi
            if self.right is not None:
                self.right[target] = ok
        if q.size == 0:
            return
        if hi is not None:
            self.undecided += int(np.count_nonzero(~ok & (hi > 0)))
        if computed is not None:
            with np.errstate(invalid="ignore"):
                gap = np.asarray(computed, dtype=np.float64) - margins
            gap = gap[np.isfinite(gap)]
            if gap.size:
                self.bound = max(self.bound, float(gap.max()))
        self.correct[position] += int(np.count_nonzero(ok))
        i = int(np.argmin(margins))
        value, flat = float(margins[i]), int(q[i]) * self.per + position
        if value < self.min_margin or (value == self.min_margin and flat < self.argmin) or self.argmin < 0:
            self.min_margin, self.argmin = value, flat
        wrong = np.flatnonzero(~ok)[: self.max_failures]
        if wrong.size:
            self.fail_flat.append(q[wrong] * self.per + position)
            self.fail_pred.append(np.asarray(predictions)[wrong])
            self.fail_margin.append(np.asarray(margins, dtype=np.float64)[wrong])
            self.fail_open.append(np.zeros(wrong.size, dtype=bool) if hi is None
                                  else np.asarray(hi)[wrong] > 0)

    def result(self, tokens: np.ndarray, answers: np.ndarray, **kwargs) -> CheckResult:
        failures = []
        if self.fail_flat:
            flat = np.concatenate(self.fail_flat)
            pick = np.argsort(flat, kind="stable")[: self.max_failures]
            pred, marg = np.concatenate(self.fail_pred)[pick], np.concatenate(self.fail_margin)[pick]
            status = np.where(np.concatenate(self.fail_open)[pick], "undecided", "wrong").tolist()
            for f, p, mg, st in zip(flat[pick].tolist(), pred.tolist(), marg.tolist(), status):
                q, pos = divmod(f, self.per)
                failures.append({"query": q, **({"position": pos} if answers.ndim == 2 else {}),
                                 "tokens": tokens[q].tolist(), "expected": int(answers.reshape(-1)[f]),
                                 "predicted": int(p), "margin": float(mg), "status": st})
        total = self.n * self.per
        return CheckResult(
            n_queries=total, n_correct=int(self.correct.sum()),
            min_margin=float(self.min_margin) if total else float("inf"),
            argmin_query=self.argmin // self.per if total else -1, failures=failures,
            predictions=self.predictions, margins=self.margins, margin_highs=self.highs, right=self.right,
            n_undecided=self.undecided,
            rounding_bound=self.bound, n_redecided=self.redecided,
            per_position=(self.correct / max(self.n, 1)).tolist() if answers.ndim == 2 else None, **kwargs)


MAX_TIGHTENED = 4096  # loose (but decided) queries a check_queries(redecide=..., tight=...) recomputes


def _loose(lo: np.ndarray, hi: np.ndarray, computed: np.ndarray | None, tight: float) -> np.ndarray:
    """Positive certified intervals looser than ``lo >= tight·hi`` (with an unbounded ``hi``, as the
    hypercube decoder gives on rows it predicts right, the computed margin stands in for it)."""
    ref = np.asarray(hi, dtype=np.float64)
    if computed is not None:
        ref = np.where(np.isfinite(ref), ref, np.asarray(computed, dtype=np.float64))
    with np.errstate(invalid="ignore"):
        return (lo > 0) & np.isfinite(ref) & (lo < tight * ref)


class _Deferring:
    """Between the passes and the tally: with a re-decision, the queries a pass leaves open (and, with
    ``tight``, loose) are set aside, then decided by ``redecide`` in :meth:`finish` and tallied."""

    def __init__(self, tally: _Tally, per: int, active: bool, tight: float | None) -> None:
        self.tally, self.active, self.tight = tally, active, tight
        self.pending: list[list[np.ndarray]] = [[] for _ in range(per)]
        self.loose: list[list[np.ndarray]] = [[] for _ in range(per)]
        self.n_loose = 0

    def add(self, queries, position: int, predictions, lo, hi, computed) -> None:
        if not self.active or hi is None:
            self.tally.add(queries, position, predictions, lo, hi, computed)
            return
        q = np.arange(queries.start, queries.stop) if isinstance(queries, slice) else np.asarray(queries)
        open_ = ~(lo > 0) & (hi > 0)
        later = open_.copy()
        if self.tight is not None and self.n_loose < MAX_TIGHTENED:
            loose = _loose(lo, hi, computed, self.tight) & ~open_
            take = np.flatnonzero(loose)[: MAX_TIGHTENED - self.n_loose]
            self.n_loose += take.size
            later[take] = True
        if later.any():
            self.pending[position].append(q[later])
        keep = ~later
        self.tally.add(q[keep], position, np.asarray(predictions)[keep], np.asarray(lo)[keep],
                       np.asarray(hi)[keep], None if computed is None else np.asarray(computed)[keep])

    def finish(self, tokens: np.ndarray, read_at: list[int], column_answers: np.ndarray, redecide) -> None:
        if not self.active:
            return
        for i, parts in enumerate(self.pending):
            if not parts:
                continue
            q = np.sort(np.concatenate(parts))
            cert = redecide(tokens[q], read_at[i], column_answers[q, i])
            self.tally.redecided += q.size
            self.tally.add(q, i, cert.predictions, cert.lo, cert.hi, None, cert.positive)


def _choose_decoder(model: Model, decoder: str) -> tuple[Hypercube | None, str]:
    """The hypercube codebook when it applies and is asked for, else None; and the reason when it does not."""
    if decoder not in DECODERS:
        raise InputError(f"decoder must be one of {DECODERS}, got {decoder!r}")
    if decoder == "dense":
        return None, ""
    readout = model.readout
    cube, why = detect_hypercube(readout.matrix, np.arange(readout.columns.size))
    if cube is not None:  # detected on the read-out's own columns: name them as residual coordinates
        cube = replace(cube, columns=readout.columns)
    if cube is None and decoder == "hypercube":
        raise InputError(f"the hypercube decoder does not apply: {why}")
    return cube, ("" if cube is not None else f"decoder: {why}")


def _choose_forward(model: Model, forward_: str, columns, token_columns, integer: bool):
    """A token-additive plan when it applies and is asked for, else None; and the reason when it does not."""
    if forward_ not in FORWARDS:
        raise InputError(f"forward must be one of {FORWARDS}, got {forward_!r}")
    if forward_ == "dense":
        return None, ""
    try:
        return plan_additive(model, token_columns, columns, integer=integer), ""
    except NotAdditive as exc:
        if forward_ == "tables":
            raise InputError(f"the token-additive forward does not apply: {exc}") from None
        return None, f"forward: {exc}"


def _readout_model(model: Model, columns: np.ndarray) -> Model:
    """The same model whose "logits" are the read residual coordinates ``x[:, columns]`` (an identity read-out
    on them), for the hypercube decoder behind THE forward pass: ``x·1 + 0`` is exact in floating point."""
    identity = np.eye(columns.size, dtype=model.unembedding.dtype)  # compact: identity on increasing columns
    return unflatten(model, {**flatten(model), "unembedding": identity},
                     readout_columns=columns if columns.size < model.d else None)


@dataclass(frozen=True)
class _Reading:
    """How a pass's output becomes predictions and certified margins: through the hypercube codebook
    ``cube`` or, without one, the dense read-out ``U_read``, in the working format ``(u, η)``."""

    cube: Hypercube | None
    U_read: np.ndarray | None
    u: float
    eta: float

    @property
    def decoder(self) -> str:
        """The decoder this reading is: ``"hypercube"`` or ``"dense"``."""
        return "hypercube" if self.cube is not None else "dense"

    def of_residual(self, v: np.ndarray, e_v: np.ndarray | None, answers: np.ndarray) -> Certified:
        """Predictions and certified margin intervals from the read residual ``v`` (error bound ``e_v``; None:
        exact)."""
        if self.cube is not None:
            return hypercube_certify(self.cube, v, e_v, answers, self.u, self.eta)
        assert self.U_read is not None  # built exactly when there is no hypercube decoder
        return dense_certify(v, e_v, answers, self.U_read, self.u, self.eta)

    def of_pass(self, out: np.ndarray, err: np.ndarray | None, answers: np.ndarray) -> Certified:
        """Predictions and certified margin intervals from THE forward pass's output ``out`` (its logits, or
        under the hypercube decoder the read coordinates) with its a-posteriori bound ``err``."""
        if self.cube is not None:
            return hypercube_certify(self.cube, out, err, answers, self.u, self.eta)
        return certify_logits(out, err, answers)


def _reading(model: Model, cube: Hypercube | None, integer: bool) -> _Reading:
    """The reading of ``model``'s passes with the decoder ``cube`` (None: dense), in its working format."""
    U_read = None if cube is not None else model.readout.matrix
    return _Reading(cube, U_read, *_working_format(model, integer))


def _working_format(model: Model, integer: bool) -> tuple[float, float]:
    """``(u, η)`` of THE forward pass on ``model`` (``constructions.arithmetic.working_format``, which counts
    the double rounding of mixed storage formats); in integer mode the work is in float64."""
    if integer:
        return format_of(np.float64, *(a.dtype for a in forward_arrays(model).values()))
    return working_format(model)


def _lowered(cert: Certified, slack: float) -> np.ndarray:
    """Certified lower bounds lowered by ``slack`` (THE forward pass's a-priori margin error), rounded
    down."""
    if slack == 0:
        return cert.lo
    return np.where(cert.lo == np.inf, np.inf, np.nextafter(cert.lo - slack, -np.inf))


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
    decoder: str = "auto",
    forward: str = "auto",
    budget: Budget | None = None,
    redecide=None,
    tight: float | None = None,
) -> CheckResult:
    """Run every query ``tokens[q]`` (shape ``(Q, T)``) and compare the argmax with ``answers[q]``.

    By default the prediction is read at the last position and ``answers`` has shape ``(Q,)``. With
    ``positions`` (P indices, e.g. every chain-of-thought step under teacher forcing) it is read at each of
    them and ``answers`` has shape ``(Q, P)``; every (query, position) pair counts as one prediction, and
    ``per_position`` reports the accuracy at each position.
    ``integer=True`` first proves that the pass computes in exact integer arithmetic (``integer_bounds`` of
    the model for THE forward pass, ``verify.additive.integer_bounds`` for the tables; both bound the margins
    too), then runs it in float64; margins are then exact integers. ``keep=True`` returns the per-query
    predictions and margins. ``decoder`` and ``forward`` choose the implementations (module docstring); the
    result records which ran. Memory is bounded by the chunk size (default: ``chunk_size(model, T,
    memory.array_bytes(budget))``, a quarter of the budget's chunk bytes since the bounded pass holds about
    four arrays per intermediate) or, for the tables, by their block size (the same bytes); nothing of size
    Q × d or Q × n_out is formed. The chunking changes neither the predictions nor the margins.

    Parameters
    ----------
    model : Model
        The model (THE forward pass, ``constructions.forward.forward``).
    tokens : numpy.ndarray
        ``(Q, T)`` token ids.
    answers : numpy.ndarray
        ``(Q,)`` expected ids, or ``(Q, P)`` with ``positions``.
    positions : numpy.ndarray, optional
        Read positions (default: the last).
    integer : bool
        Prove exact integer arithmetic first, then compute exact integer margins.
    chunk : int, optional
        Queries per chunk of THE forward pass (default: from ``budget``).
    keep : bool
        Return the per-query predictions and certified margins.
    max_failures : int
        Failures listed in the result.
    progress : bool
        Progress on stderr.
    decoder, forward : str
        Implementations (``DECODERS``, ``FORWARDS``).
    budget : Budget or None
        The memory budget the chunks and the tables' blocks are sized from (``None``: the default budget).
    redecide : callable, optional
        ``redecide(tokens, position, answers) -> Certified``: decides again the queries this pass leaves
        open (certified interval straddling 0) and, with ``tight``, loose ones (at most
        :data:`MAX_TIGHTENED`); ``verify.checking.exact`` passes its exact evaluation. Counted in
        ``CheckResult.n_redecided``.
    tight : float, optional
        With ``redecide``: a positive interval with ``lo < tight·hi`` is loose (the tables' a-priori bound is
        first replaced by THE forward pass's a-posteriori one, then ``redecide`` runs).

    Returns
    -------
    CheckResult

    Raises
    ------
    ValueError
        Shapes of ``tokens`` and ``answers`` disagree, or answers outside the read-out.
    InputError
        An unknown or inapplicable ``decoder``/``forward``, or a bad ``budget``.
    IntegerModeError
        ``integer=True`` on a model whose pass is not exact in float64.
    """
    tokens, answers = _query_arrays(model, tokens, answers, positions)
    start = time.perf_counter()
    read_at = [tokens.shape[1] - 1] if positions is None else [int(p) for p in positions]
    cube, why_decoder = _choose_decoder(model, decoder)
    tally = _Tally(tokens.shape[0], len(read_at), keep, max_failures, answers.shape)
    column_answers = answers[:, None] if positions is None else answers
    sink = _Deferring(tally, len(read_at), redecide is not None and not integer, tight)
    plans, why_forward = _plan_tables(model, forward, tokens, read_at, integer)
    kind = {"decoder": "hypercube" if cube is not None else "dense", "integer": integer,
            "logit_bound": logit_bound(model),
            "dtype": "float64" if integer else str(model.entity_embedding.dtype)}
    reading = _reading(model, cube, integer)
    if integer:  # THE forward pass must be exact (on the tables path too: else they certify another function)
        integer_bounds(model, tokens.shape[1])
    run = _readout_model(model, model.readout.columns) if cube is not None else model
    array_bytes = memory.array_bytes(budget)
    chunk = chunk or chunk_size(model, tokens.shape[1], array_bytes)
    qs = _Queries(run, tokens, column_answers, read_at, positions is None, integer, reading, sink, chunk,
                  progress)
    if len(plans) == len(read_at):  # the token-additive pass at every read position
        # "auto" in float mode: a query the tables' a-priori bound leaves undecided is decided again by THE
        # forward pass with its own (a-posteriori, usually much smaller) bound; both bound the same margins
        pending = _tables_pass(qs, plans, array_bytes, forward == "auto" and not integer, tight)
        used, fallback = "tables", _dense_retry(qs, pending, why_decoder)
    else:
        _dense_pass(qs, None, None)
        used, fallback = "dense", "; ".join(r for r in (why_decoder, why_forward) if r)
    sink.finish(tokens, read_at, column_answers, redecide)
    return tally.result(tokens, answers, seconds=time.perf_counter() - start, forward=used,
                        fallback=fallback, **kind)


def _query_arrays(model: Model, tokens: np.ndarray, answers: np.ndarray,
                  positions: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """``tokens`` and ``answers`` as int64 arrays, refused (ValueError) when their shapes disagree or an
    answer lies outside the read-out."""
    tokens = np.asarray(tokens, dtype=np.int64)
    answers = np.asarray(answers, dtype=np.int64)
    n = tokens.shape[0] if tokens.ndim == 2 else -1
    expected_shape = (n,) if positions is None else (n, len(positions))
    if tokens.ndim != 2 or answers.shape != expected_shape:
        raise ValueError(f"need tokens (Q, T) and answers {'(Q,)' if positions is None else '(Q, P)'}; "
                         f"got {tokens.shape} and {answers.shape}")
    if answers.size and (answers.min() < 0 or answers.max() >= model.n_out):
        raise ValueError(f"answers must lie in [0, {model.n_out})")
    return tokens, answers


def _plan_tables(model: Model, forward_: str, tokens: np.ndarray, read_at: list[int],
                 integer: bool) -> tuple[list[AdditivePlan], str]:
    """The token-additive plans of the read positions, up to the first one it does not apply to; and the
    reason it does not (or asked for)."""
    plans: list[AdditivePlan] = []
    why_forward = ""
    for p in read_at:
        plan, why_forward = _choose_forward(model, forward_, model.readout.columns,
                                            [tokens[:, u] for u in range(p + 1)], integer)
        if plan is None:
            break
        plans.append(plan)
    return plans, why_forward


@dataclass
class _Queries:
    """What every pass over the queries of a :func:`check_queries` shares: the model it runs (``run``: with
    the hypercube decoder, the one whose logits are the read coordinates), the queries and their answers per
    read position, the reading of an output and the sink its verdicts go to."""

    run: Model
    tokens: np.ndarray
    column_answers: np.ndarray  # (Q, P): the expected answer at each read position
    read_at: list[int]
    last_only: bool  # read at the last position only (no ``positions``)
    integer: bool
    reading: _Reading
    sink: _Deferring
    chunk: int
    progress: bool


def _dense_pass(qs: _Queries, selected: np.ndarray | None, wanted: list[np.ndarray] | None) -> None:
    """THE forward pass with its a-posteriori bound on the queries ``selected`` (all when None), recording
    at read position i only the queries in ``wanted[i]`` (all when None)."""
    total = qs.tokens.shape[0] if selected is None else selected.size
    for c, part in enumerate(iter_chunks(total, qs.chunk)):
        rows = part if selected is None else selected[part]
        out, err = forward_pass(qs.run, qs.tokens[rows], at="last" if qs.last_only else "all",
                                integer=qs.integer, errors=True)
        outs = [(out, err)] if qs.last_only else [(out[:, p], err[:, p]) for p in qs.read_at]
        for i, (o, e) in enumerate(outs):
            q: slice | np.ndarray = rows
            if wanted is not None and not isinstance(rows, slice):
                take = np.isin(rows, wanted[i])
                q, o, e = rows[take], o[take], e[take]
            cert = qs.reading.of_pass(o, None if qs.integer else e, qs.column_answers[q, i])
            qs.sink.add(q, i, cert.predictions, cert.lo, None if qs.integer else cert.hi, cert.margins)
        if qs.progress and c % 8 == 0:
            print(f"\r  checked {part.stop:,}/{total:,} queries", end="", file=sys.stderr, flush=True)
    if qs.progress:
        print(file=sys.stderr)


def _tables_pass(qs: _Queries, plans: list[AdditivePlan], array_bytes: int, retry: bool,
                 tight: float | None) -> list[list[np.ndarray]]:
    """The token-additive pass at every read position; with ``retry``, the queries its a-priori bound leaves
    open (and, with ``tight``, loose) are set aside: returned per read position, for THE forward pass."""
    pending: list[list[np.ndarray]] = [[] for _ in qs.read_at]
    for i, (p, plan) in enumerate(zip(qs.read_at, plans)):
        bounds = plan.info.get("float_bounds")
        e_v = None if bounds is None else bounds["e_v"]
        slack = 0.0 if bounds is None else bounds["forward_margin"]

        def consume(queries, v, i=i, e_v=e_v, slack=slack):
            cert = qs.reading.of_residual(v, e_v, qs.column_answers[queries, i])
            lo = _lowered(cert, slack)
            pred, hi, computed = cert.predictions, cert.hi, cert.margins
            if retry:
                open_ = ~(lo > 0) & (hi > 0)
                if tight is not None:
                    open_ |= _loose(lo, hi, computed, tight)
                if open_.any():
                    q = (np.arange(queries.start, queries.stop) if isinstance(queries, slice)
                         else np.asarray(queries))
                    pending[i].append(q[open_])
                    keep = ~open_
                    queries, pred, lo = q[keep], pred[keep], lo[keep]
                    hi, computed = hi[keep], computed[keep]
            qs.sink.add(queries, i, pred, lo, None if qs.integer else hi, computed)
        run_additive(plan, [qs.tokens[:, u] for u in range(p + 1)], consume, block_bytes=array_bytes,
                     progress=qs.progress)
    return pending


def _dense_retry(qs: _Queries, pending: list[list[np.ndarray]], why_decoder: str) -> str:
    """THE forward pass on the queries the tables set aside (``pending``, per read position); the result's
    ``fallback`` note, which says how many there were."""
    if not any(pending):
        return why_decoder
    wanted = [np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64) for parts in pending]
    selected = np.unique(np.concatenate(wanted))
    _dense_pass(qs, selected, wanted)
    return "; ".join(r for r in (why_decoder, f"{selected.size:,} queries left undecided by the "
                                 "tables' a-priori bound were decided by THE forward pass") if r)


def check_decoding(
    model: Model,
    prompts: np.ndarray,
    chains: np.ndarray,
    *,
    chunk: int | None = None,
    keep: bool = False,
    max_failures: int = 10,
    progress: bool = False,
    decoder: str = "auto",
    forward: str = "auto",
    budget: Budget | None = None,
    redecide=None,
) -> CheckResult:
    """Greedy chain-of-thought decoding of every prompt, scored against the true chain ``(Q, k)``.

    Step t runs the forward pass on the prompt plus the model's own t − 1 previous predictions (re-embedded by
    the input table) and records the margin of the true ``v_t``. A query counts as correct only if every step
    is (then its final answer is right too); ``per_position`` is the accuracy of each step and
    ``final_accuracy`` that of the last token alone. ``decoder`` and ``forward`` as in :func:`check_queries`
    (the token-additive pass applies step by step, with the generated tokens as further positions).

    Parameters
    ----------
    model : Model
        The model; its read-out vocabulary must be its entities (predictions are fed back).
    prompts : numpy.ndarray
        ``(Q, T)`` prompt token ids.
    chains : numpy.ndarray
        ``(Q, k)`` the true chain ``v_1..v_k`` of each prompt.
    chunk : int, optional
        Prompts per chunk of THE forward pass (default: from ``budget``).
    keep : bool
        Return the per-step predictions and certified margins.
    max_failures : int
        Failures listed in the result.
    progress : bool
        Progress on stderr.
    decoder, forward : str
        Implementations, as in :func:`check_queries`.
    budget : Budget or None
        The memory budget the chunks and the tables' blocks are sized from (``None``: the default budget).
    redecide : object, optional
        With a method ``chains(prompts, chains)`` returning ``(predictions, lo, hi, step_lo, step_hi,
        step_right)``: decodes again the chains this pass leaves open (``verify.checking.exact`` passes its
        exact decoding); counted in ``CheckResult.n_redecided``.

    Returns
    -------
    CheckResult

    Raises
    ------
    ValueError
        Shapes disagree, or the read-out vocabulary is not the entities.
    InputError
        An unknown or inapplicable ``decoder``/``forward``, or a bad ``budget``.
    """
    prompts = np.asarray(prompts, dtype=np.int64)
    chains = np.asarray(chains, dtype=np.int64)
    if prompts.ndim != 2 or chains.ndim != 2 or chains.shape[0] != prompts.shape[0]:
        raise ValueError(f"need prompts (Q, T) and chains (Q, k); got {prompts.shape} and {chains.shape}")
    if model.n_out != model.n_entities:
        raise ValueError("decoding feeds predictions back as entities: needs n_out == N")
    start = time.perf_counter()
    cube, why_decoder = _choose_decoder(model, decoder)
    steps = _Steps(prompts, chains, _reading(model, cube, False), progress)
    array_bytes = memory.array_bytes(budget)
    used_tables, why_forward = _decode_by_tables(model, forward, steps, array_bytes)
    if not used_tables:
        run = _readout_model(model, model.readout.columns) if cube is not None else model
        _decode_dense(run, steps, chunk or chunk_size(model, prompts.shape[1] + chains.shape[1], array_bytes))
    per_query, per_query_hi, n_redecided, right, step_right = _chain_verdicts(steps, redecide)
    n = chains.shape[0]
    tally = _Tally(n, 1, False, max_failures, (n,))
    tally.add(slice(0, n), 0, steps.predictions[:, -1], per_query, per_query_hi, steps.computed.min(axis=1),
              right)
    result = tally.result(prompts, chains[:, -1], seconds=time.perf_counter() - start,
                          decoder=steps.reading.decoder, forward="tables" if used_tables else "dense",
                          fallback="; ".join(r for r in (why_decoder, why_forward) if r),
                          dtype=str(model.entity_embedding.dtype), logit_bound=logit_bound(model))
    result.per_position = step_right.mean(axis=0).tolist()  # exact where a step was decoded again exactly
    result.final_accuracy = float((steps.predictions[:, -1] == chains[:, -1]).mean()) if n else 1.0
    result.n_redecided = n_redecided
    if keep:
        result.predictions, result.margins = steps.predictions, steps.margins
        result.margin_highs, result.right = steps.highs, right
    return result


class _Steps:
    """The decoding steps of a :func:`check_decoding`: its prompts and true chains, the reading of an output,
    and per (chain, step) the prediction and the certified margin interval, filled in by :meth:`record`."""

    def __init__(self, prompts: np.ndarray, chains: np.ndarray, reading: _Reading, progress: bool) -> None:
        self.prompts, self.chains, self.reading, self.progress = prompts, chains, reading, progress
        self.predictions = np.empty(chains.shape, dtype=np.int64)
        self.margins = np.empty(chains.shape, dtype=np.float64)  # certified lower bounds
        self.highs = np.empty(chains.shape, dtype=np.float64)  # upper bounds on the exact margins
        self.computed = np.empty(chains.shape, dtype=np.float64)

    def record(self, queries, t: int, cert: Certified, slack: float = 0.0) -> None:
        """Store step ``t`` of the chains ``queries``, its lower bounds lowered by ``slack``."""
        self.predictions[queries, t], self.margins[queries, t] = cert.predictions, _lowered(cert, slack)
        self.highs[queries, t], self.computed[queries, t] = cert.hi, cert.margins


def _decode_by_tables(model: Model, forward_: str, steps: _Steps, array_bytes: int) -> tuple[bool, str]:
    """Every step by the token-additive pass, the generated tokens as further positions; whether it applied to
    every step (else THE forward pass redoes them all) and the reason it did not."""
    prompts, chains = steps.prompts, steps.chains
    why_forward = ""
    for t in range(chains.shape[1]):
        token_columns = ([prompts[:, u] for u in range(prompts.shape[1])]
                         + [steps.predictions[:, j] for j in range(t)])
        plan, why_forward = _choose_forward(model, forward_, model.readout.columns, token_columns, False)
        if plan is None:
            return False, why_forward
        bounds = plan.info["float_bounds"]

        def consume(queries, v, t=t, bounds=bounds):
            steps.record(queries, t, steps.reading.of_residual(v, bounds["e_v"], chains[queries, t]),
                         bounds["forward_margin"])
        run_additive(plan, token_columns, consume, block_bytes=array_bytes, progress=steps.progress)
    return True, why_forward


def _decode_dense(run: Model, steps: _Steps, chunk: int) -> None:
    """Every step by THE forward pass, chunk by chunk of prompts, each prediction fed back."""
    n, k = steps.chains.shape
    for i, part in enumerate(iter_chunks(n, chunk)):
        seq = steps.prompts[part]
        for t in range(k):
            out, err = forward_pass(run, seq, errors=True)
            steps.record(part, t, steps.reading.of_pass(out, err, steps.chains[part, t]))
            seq = np.concatenate([seq, steps.predictions[part, t : t + 1]], axis=1)
        if steps.progress and i % 8 == 0:
            print(f"\r  decoded {part.stop:,}/{n:,} chains", end="", file=sys.stderr, flush=True)
    if steps.progress:
        print(file=sys.stderr)


def _chain_verdicts(steps: _Steps, redecide) -> tuple[np.ndarray, np.ndarray, int, np.ndarray, np.ndarray]:
    """Each chain's certified margin interval ``(lo, hi)``, with the open chains decoded again by
    ``redecide`` (which overwrites their steps); how many were; whether each chain is certainly right; and
    whether each step is (``lo > 0``, or decoded right exactly where a step's lower end rounds to 0)."""
    # A chain is exact when every step is certified; certainly wrong when its first uncertified step is
    # certainly wrong (the steps before it fed exactly the true tokens back); undecided otherwise.
    n, k = steps.chains.shape
    margins, highs = steps.margins, steps.highs
    per_query = margins.min(axis=1) if k else np.full(n, np.inf)
    open_step = margins <= 0
    first = open_step.argmax(axis=1) if k else np.zeros(n, dtype=np.int64)
    rows = np.arange(n)
    per_query_hi = np.where(open_step.any(axis=1), highs[rows, first], np.inf) if k else per_query
    open_chain = ~(per_query > 0) & (per_query_hi > 0)
    redecided = (np.flatnonzero(open_chain) if redecide is not None and k else np.zeros(0, dtype=np.int64))
    step_right = margins > 0
    if len(redecided):
        q = redecided
        steps.predictions[q, -1], per_query[q], per_query_hi[q], margins[q], highs[q], step_right[q] = \
            redecide.chains(steps.prompts[q], steps.chains[q])
    right = np.asarray(step_right.all(axis=1) if k else per_query > 0)
    return per_query, per_query_hi, len(redecided), right, step_right
