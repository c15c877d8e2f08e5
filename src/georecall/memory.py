"""One memory estimator and one budget for every command (``--max-gib``).

Every command that allocates in proportion to its inputs asks this module, *before* any large allocation, how
many bytes the job needs at its peak, summed over its parts (construction weights, codes, queries, logit
chunks, trainer activations and Adam state, probe design matrices, the enumeration of ``count``, arrays read
from a file), and compares the sum with one budget. Over budget, :meth:`Estimate.require` raises
:class:`~georecall.errors.InputError` naming the estimate, the budget and the parameter to lower (exit 2 on
the command line).

The budget is ``--max-gib`` when given, otherwise :data:`DEFAULT_FRACTION` of the machine's available memory
(``MemAvailable`` in ``/proc/meminfo``; 4 GiB where that cannot be read).

Estimates are deliberately generous upper bounds (they count every copy the code makes: a float64 build and
its working-precision copy, quantized copies, gradient and Adam moments). They are computed in Python
integers, so no size can overflow. Files are measured without decompressing them: an ``.npz`` member's size is
read from the zip directory and from its ``.npy`` header (a zip bomb is refused before a byte of its payload
is inflated)."""

from __future__ import annotations

import math
import os
import warnings
import zipfile
from dataclasses import dataclass, field

import numpy as np

from georecall.errors import InputError

__all__ = [
    "BOUNDED_ARRAYS",
    "array_bytes",
    "CHUNK_BYTES",
    "CHUNK_COPIES",
    "DEFAULT_FRACTION",
    "GIB",
    "Budget",
    "Estimate",
    "Member",
    "as_budget",
    "available_bytes",
    "bounds_estimate",
    "budget_bytes",
    "check_estimate",
    "checker_chunk_bytes",
    "queries_per_chunk",
    "code_length",
    "count_estimate",
    "count_tasks_log2",
    "file_estimate",
    "query_bytes",
    "hidden_states_estimate",
    "npz_members",
    "npy_member",
    "probe_estimate",
    "results_file_estimate",
    "train_estimate",
    "worker_limit",
    "workers_estimate",
]

GIB = 2**30
DEFAULT_FRACTION = 0.5
FALLBACK_AVAILABLE = 8 * GIB  # when /proc/meminfo cannot be read: budget 4 GiB
CHUNK_BYTES = 64 * 2**20  # the checker's largest chunk (Budget.chunk_bytes)
# intermediates alive at once per chunk in THE forward pass (x, attention, hidden, logits, ...)
CHUNK_COPIES = 6
# arrays per intermediate of THE forward pass with its error bounds (values, bounds, two temporaries): each
# array of a checker chunk takes 1/BOUNDED_ARRAYS of Budget.chunk_bytes()
BOUNDED_ARRAYS = 4
CODES_CHUNK_BYTES = 64 * 2**20  # the row chunk of the codes' coherence scan (constructions.codes)
PYTHON_BASE = 64 * 2**20  # interpreter, NumPy, small tables
# A spawned worker process: interpreter, NumPy, SciPy and georecall imported (measured RSS ~ 90 MiB).
WORKER_BASE = 128 * 2**20
# Parsed JSON per byte of text: measured 5.6 for sweep records and up to 19 for the densest hostile form
# ([[0],[0],...] or [{},{},...]: a container per 3 bytes), so 24 bounds any line.
JSON_EXPANSION = 24
WORKERS_PER_CPU = 4  # local worker processes beyond this many per CPU only queue for the cores


def available_bytes() -> int:
    """Bytes the machine can still give (``MemAvailable`` of ``/proc/meminfo``; a fallback elsewhere).

    Returns
    -------
    int
        Available memory in bytes.
    """
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return FALLBACK_AVAILABLE


def budget_bytes(max_gib: float | None) -> int:
    """The budget in bytes: ``max_gib`` GiB, or :data:`DEFAULT_FRACTION` of the available memory.

    Parameters
    ----------
    max_gib : float or None
        The ``--max-gib`` value, or ``None`` for the default.

    Returns
    -------
    int
        The budget in bytes (at least 1).

    Raises
    ------
    InputError
        ``max_gib`` is not a positive finite number (zero, negative, NaN, infinite, a bool, a string).

    Warns
    -----
    UserWarning
        ``max_gib`` is more than the machine's available memory (:func:`available_bytes`): the budget is
        capped at the available memory.
    """
    if max_gib is None:
        return max(1, int(DEFAULT_FRACTION * available_bytes()))
    if isinstance(max_gib, bool) or not (isinstance(max_gib, (int, float)) and math.isfinite(max_gib)
                                         and max_gib > 0):
        raise InputError(f"--max-gib must be a positive finite number of GiB, got {max_gib!r}")
    wanted = max_gib * GIB
    available = available_bytes()
    if wanted > available:  # a budget the machine cannot give guards nothing: cap it, and say so
        warnings.warn(f"--max-gib {max_gib:g} is more than the {available / GIB:.1f} GiB this machine has "
                      f"available: the budget is capped at {available / GIB:.1f} GiB", stacklevel=2)
        return max(1, int(available))
    return max(1, int(wanted))


@dataclass(frozen=True)
class Budget:
    """The one memory budget of a run, created once from ``--max-gib`` and passed to every part of the job.

    Attributes
    ----------
    max_bytes : int
        The budget in bytes (at least 1).

    Notes
    -----
    Estimates are compared with it by :meth:`Estimate.require`; the checker sizes its chunks from it
    (:meth:`chunk_bytes`), so a small budget also bounds the checker's working set.
    """

    max_bytes: int

    def __post_init__(self) -> None:
        if isinstance(self.max_bytes, bool) or not (isinstance(self.max_bytes, int) and self.max_bytes >= 1):
            raise InputError(f"a memory budget must be a positive number of bytes, got {self.max_bytes!r}")

    @classmethod
    def from_gib(cls, max_gib: float | None) -> Budget:
        """The budget of ``--max-gib`` (``None``: :data:`DEFAULT_FRACTION` of the available memory).

        Parameters
        ----------
        max_gib : float or None
            GiB, positive and finite, or ``None`` for the default.

        Returns
        -------
        Budget

        Raises
        ------
        InputError
            ``max_gib`` is not a positive finite number.
        """
        return cls(budget_bytes(max_gib))

    @property
    def gib(self) -> float:
        """The budget in GiB."""
        return self.max_bytes / GIB

    def chunk_bytes(self, copies: int = CHUNK_COPIES) -> int:
        """Bytes one checker chunk's intermediate may take: :data:`CHUNK_BYTES`, or less when ``copies`` such
        intermediates would not fit in a tenth of the budget (at least 1 MiB).

        The checker (``verify.checking.check``) sizes its query chunks and its tables' token blocks from it
        (:data:`BOUNDED_ARRAYS` arrays per intermediate), and :func:`check_estimate` counts the same bytes.

        Parameters
        ----------
        copies : int
            Intermediates alive at once per chunk.

        Returns
        -------
        int
            Between 1 MiB and :data:`CHUNK_BYTES`.
        """
        return max(2**20, min(CHUNK_BYTES, self.max_bytes // (10 * max(1, copies))))

    @classmethod
    def default(cls) -> Budget:
        """The budget without ``--max-gib``: :data:`DEFAULT_FRACTION` of the available memory.

        Returns
        -------
        Budget
        """
        return cls.from_gib(None)


def as_budget(budget: Budget | int | None) -> Budget:
    """The :class:`Budget` a library function was given: itself, a number of bytes, or ``None`` (the default
    budget, :meth:`Budget.default`).

    Parameters
    ----------
    budget : Budget, int or None
        The budget; an ``int`` is bytes.

    Returns
    -------
    Budget

    Raises
    ------
    InputError
        Anything else, or a number of bytes below 1.
    """
    if budget is None:
        return Budget.default()
    if isinstance(budget, Budget):
        return budget
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)):
        raise InputError(f"a memory budget is a Budget or a number of bytes, got {type(budget).__name__}")
    return Budget(int(budget))


def _gib(nbytes: int) -> str:
    if nbytes >= 1024 * GIB:
        return f"{nbytes / GIB:.3g} GiB"
    return f"{nbytes / GIB:.2f} GiB"


@dataclass
class Estimate:
    """Peak bytes of one job, as named parts.

    Attributes
    ----------
    what : str
        The job, as messages name it ("check single-hop", "train").
    parts : list of (label, bytes, lower)
        Each part's label, its bytes and the command-line parameter(s) that shrink it.
    """

    what: str
    parts: list[tuple[str, int, str]] = field(default_factory=list)

    def add(self, label: str, nbytes: int, lower: str) -> Estimate:
        """Add a part of ``nbytes`` bytes; ``lower`` names the parameters that shrink it. Returns ``self``."""
        self.parts.append((label, max(0, int(nbytes)), lower))
        return self

    @property
    def total(self) -> int:
        """Sum of the parts, plus the interpreter's base."""
        return PYTHON_BASE + sum(nbytes for _, nbytes, _ in self.parts)

    def as_dict(self) -> dict:
        """The estimate as plain data (GiB per part)."""
        return {"total_gib": round(self.total / GIB, 6),
                "parts": {label: round(nbytes / GIB, 6) for label, nbytes, _ in self.parts}}

    def require(self, budget: Budget | int) -> Estimate:
        """Refuse (``InputError``: estimate, budget, what to lower) when the total exceeds the budget.

        Parameters
        ----------
        budget : Budget or int
            The budget (an ``int``: bytes).

        Returns
        -------
        Estimate
            ``self`` when it fits.

        Raises
        ------
        InputError
            The estimate exceeds the budget (the message names the largest part and what to lower).
        """
        limit = as_budget(budget).max_bytes
        if self.total <= limit:
            return self
        label, nbytes, lower = max(self.parts, key=lambda p: p[1]) if self.parts else ("", 0, "the sizes")
        raise InputError(f"{self.what} needs about {_gib(self.total)} of memory (largest part: {label}, "
                         f"{_gib(nbytes)}), more than the budget of {_gib(limit)}: lower {lower}, or raise "
                         f"--max-gib")


def code_length(kind: str, N: int, D: int | None) -> int:
    """The code length D a builder will use (the default when ``D`` is None).

    Parameters
    ----------
    kind : str
        "binary", "sign" or "gaussian".
    N : int
        Number of codes.
    D : int or None
        The requested length.

    Returns
    -------
    int
        ``D``, ``ceil(log2 N)`` for binary codes, or the random-code default ``2 ln(N²/2δ)/t²``.
    """
    if D is not None:
        return int(D)
    if kind == "binary" or N <= 1:
        return max(1, (N - 1).bit_length())
    return max(1, math.ceil(2.0 * math.log(N * (N - 1) / (2.0 * 1e-3)) / 0.25))


def query_bytes(N: int, R: int, k: int, cot: bool = False) -> int:
    """Bytes the checker holds for all N·R^k queries: tokens, answers, predictions and margins.

    Parameters
    ----------
    N, R, k : int
        Entities, relations, hops.
    cot : bool
        Chain-of-thought queries (2k tokens, k answers each).

    Returns
    -------
    int
        ``8·N·R^k·(T + 3·answers)`` with T the sequence length.
    """
    T = 2 * k if cot else k + 1
    return 8 * N * R**k * (T + 3 * (k if cot else 1))


def check_estimate(spec, N: int, R: int, k: int = 1, *, codes: str = "binary", D: int | None = None,
                   dtype: str = "float64", bits: int | None = None, integer: bool = False,
                   attributes: str = "shared", what: str = "check", budget: Budget | int | None = None
                   ) -> Estimate:
    """Peak bytes of building a registered construction and checking every query.

    Parameters
    ----------
    spec : ConstructionSpec
        The construction (its ``nominal_promise`` gives d, m and the parameter count at binary codes; other
        code lengths scale the embeddings linearly and the layer weights quadratically).
    N, R, k : int
        Entities, relations, hops.
    codes, D : str, int or None
        Codebook kind and length.
    dtype, bits, integer, attributes
        Working precision, quantization, integer mode, attribute vocabulary ("disjoint": N·R answers).
    what : str
        How the message names the job.
    budget : Budget, int or None
        The budget the job runs under (``None``: the default budget): the checker's chunks are the ones
        it sizes from the budget (:meth:`Budget.chunk_bytes`), so a small budget counts small chunks.

    Returns
    -------
    Estimate
        Codes, task, weights (float64 build plus working copies), queries, checker chunks. The read-out is
        counted as stored (``spec.readout``: the compact code block, or dense ``n_out × d``).
    """
    est = Estimate(what)
    D_used = code_length(codes, N, D)
    D_bin = max(1, (N - 1).bit_length())
    scale = max(1.0, D_used / D_bin)
    promise = spec.nominal_promise(N, R, k)
    n_out = N * R if attributes == "disjoint" else N
    T = 2 * k if spec.decoding == "greedy" else k + 1
    embed = (N + n_out + T) * int(promise.d)  # the promise counts U as the dense n_out × d it means
    layers = max(0, int(promise.params) - embed)
    stored_readout = (n_out * (D_used + (R if attributes == "disjoint" else 0)) if spec.readout == "code"
                      else n_out * int(promise.d) * scale)
    rest = (N + T) * int(promise.d) * scale + layers * scale * scale
    weights = 8 * int(rest + stored_readout)
    lower = "N, R" + (", k" if spec.hops == "multi" else "") + " or D"
    est.add("codes", 8 * N * D_used + CODES_CHUNK_BYTES, "N or D")
    est.add("task", 8 * 4 * R * N, "N or R")
    sizes = f"d = {int(promise.d * scale):,}, m = {int(promise.m * scale):,}"
    est.add(f"weights ({sizes}, as stored)", weights, lower)
    dense_readout = 8 * int(n_out * promise.d * scale)
    quantized = 8 * int(rest) + dense_readout
    if bits is not None:  # quantizing reads the dense read-out (zeros quantized too) and keeps a copy
        widest_table = 8 * int(max(N, n_out, promise.m * scale) * promise.d * scale)
        est.add("quantizing (the dense read-out, two temporaries of the widest array)",
                dense_readout + 2 * widest_table, lower)
        est.add("the quantized copy", quantized, lower)
    if dtype != "float64":  # a cast copy; integer mode computes in float64 from the stored weights (no copy)
        est.add(f"a working copy in {dtype}", quantized if bits is not None else weights, lower)
    # The passes use each head's W_V·W_O as one dense d × d product (cached); the tables pass also keeps a
    # float64 copy of each and one d × d map per position (T = k + 1): k heads for the k-hop constructions
    # (k fetch heads, or k layers of one), one for single hop. Measured: 5.1 × heads × d² float64 at G2,
    # R = 2, k = 10 (d = 4131); counted as 6.
    heads, width = (k if spec.hops == "multi" else 1), int(promise.d * scale)
    est.add(f"attention value outputs W_V·W_O and the tables' maps (6 x {heads} x d²)",
            6 * 8 * heads * width * width, lower)
    est.add(f"all {N * R**k:,} queries", query_bytes(N, R, k, spec.decoding == "greedy"),
            "N, R" + (" or k" if spec.hops == "multi" else ""))
    # The checker's chunk as it sizes it (queries_per_chunk of array_bytes): each array of the widest
    # intermediate takes 1/BOUNDED_ARRAYS of the budget's chunk bytes (at least one query, at most all);
    # CHUNK_COPIES intermediates of BOUNDED_ARRAYS arrays each are alive at once.
    width = max(int(promise.d * scale), int(promise.m * scale), n_out, 1)
    est.add("checker chunks", checker_chunk_bytes(width, T, N * R**k, budget), "N or R")
    return est


def built_model_estimate(model, n_queries: int, T: int, budget: Budget | int | None = None, *,
                         what: str = "checking the built model") -> Estimate:
    """Peak bytes of checking a model that is already built, from its measured arrays (not from a promise):
    the parts :func:`check_estimate` counts, with d, m, the heads and the parameters read off ``model``.

    Parameters
    ----------
    model : Model
        The built model (duck-typed: ``arrays()``, ``d``, ``mlp_width``, ``n_out``, ``layers``).
    n_queries, T : int
        Queries checked and their length.
    budget : Budget, int or None
        The run's budget (the checker's chunks are sized from it).
    what : str
        How the message names the job.

    Returns
    -------
    Estimate
        The stored weights in float64, one working copy, the attention value outputs, the checker chunks.
    """
    est = Estimate(what)
    params = sum(int(a.size) for a in model.arrays().values())
    d, m, n_out = int(model.d), int(model.mlp_width), int(model.n_out)
    heads = sum(layer.attention.heads for layer in model.layers if layer.attention is not None)
    sizes = f"d = {d:,}, m = {m:,}, {params:,} parameters, measured"
    est.add(f"weights ({sizes})", 8 * params, "the construction's sizes")
    est.add("a working copy of the weights", 8 * params, "the construction's sizes")
    est.add(f"attention value outputs W_V·W_O and the tables' maps (6 x {heads} x d²)", 6 * 8 * heads * d * d,
            "the construction's sizes")
    est.add("checker chunks", checker_chunk_bytes(max(d, m, n_out, 1), T, n_queries, budget), "N or R")
    return est


def array_bytes(budget: Budget | int | None = None) -> int:
    """Bytes of one array of a checker chunk under ``budget``: THE forward pass with its error bounds holds
    about :data:`BOUNDED_ARRAYS` float64 arrays per intermediate (values, bounds and two temporaries), so each
    gets that fraction of the budget's chunk bytes (:meth:`Budget.chunk_bytes`).

    Parameters
    ----------
    budget : Budget, int or None
        The run's budget (an ``int``: bytes; ``None``: the default budget).

    Returns
    -------
    int
        Bytes per array: 16 MiB under any budget of 3.75 GiB or more, less under a smaller one.

    Raises
    ------
    InputError
        ``budget`` is not a Budget, a positive number of bytes or None.
    """
    return max(1, as_budget(budget).chunk_bytes() // BOUNDED_ARRAYS)


def queries_per_chunk(width: int, T: int, bytes_per_array: int) -> int:
    """Queries in one chunk of THE forward pass: as many as keep a ``T × width`` float64 intermediate per
    query within ``bytes_per_array`` (at least one). The one formula the checker sizes its chunks with
    (``constructions.decoding.chunk_size``) and :func:`checker_chunk_bytes` counts.

    Parameters
    ----------
    width : int
        The widest per-position intermediate (max of d, m and the read-out's rows).
    T : int
        Positions per query.
    bytes_per_array : int
        Bytes one array may take (:func:`array_bytes`).

    Returns
    -------
    int
        At least 1.
    """
    return max(1, int(bytes_per_array) // (8 * max(1, int(width)) * max(1, int(T))))


def checker_chunk_bytes(width: int, T: int, n_queries: int, budget: Budget | int | None = None) -> int:
    """Peak bytes of the checker's chunks as it sizes them (:func:`queries_per_chunk` queries of
    :func:`array_bytes` per array, at most all queries); :data:`CHUNK_COPIES` intermediates of
    :data:`BOUNDED_ARRAYS` arrays are alive at once.

    Parameters
    ----------
    width : int
        The widest per-position intermediate (max of d, m and the read-out's rows).
    T : int
        Positions per query.
    n_queries : int
        Queries checked.
    budget : Budget, int or None
        The run's budget (``None``: the default budget).

    Returns
    -------
    int
    """
    queries = min(queries_per_chunk(width, T, array_bytes(budget)), max(1, n_queries))
    return CHUNK_COPIES * BOUNDED_ARRAYS * queries * max(1, int(width)) * max(1, int(T)) * 8


def train_estimate(N: int, R: int, d: int, m: int, *, k: int = 1, cot: bool = False, heads: int = 1,
                   batch_size: int | None = None, dtype: str = "float32", n_out: int | None = None,
                   what: str = "train", max_rows: int | None = None) -> Estimate:
    """Peak bytes of training a one-layer model on all N·R^k queries (or CoT steps).

    Parameters
    ----------
    N, R, d, m : int
        Entities, relations, residual width, MLP width.
    k, cot, heads : int, bool, int
        Hops, chain-of-thought, attention heads.
    batch_size : int or None
        Minibatch (``None``: full batch, every query in one step).
    max_rows : int or None
        The trainer computes a batch's gradient in pieces of at most this many queries (``train(max_rows=)``):
        only one piece's activations are alive at a time.
    dtype : str
        Training precision.
    n_out : int, optional
        Read-out vocabulary (default N).
    what : str
        How the message names the job.

    Returns
    -------
    Estimate
        Data, parameters with gradients and Adam moments, activations of one batch, the final exhaustive
        check.
    """
    est = Estimate(what)
    item = 4 if dtype == "float32" else 8
    n_out = N if n_out is None else n_out
    T = 2 * k if cot else k + 1
    P = k if cot else 1
    Q = N * R**k
    B = Q if batch_size is None else min(batch_size, Q)
    if max_rows is not None:
        B = min(B, max_rows)
    params = (N + n_out + R + T) * d + 2 * d * m + 4 * heads * d * d + m + d
    est.add(f"data ({Q:,} queries)", 8 * Q * (T + P) * 2, "N, R or k")
    est.add("parameters, gradients, Adam moments", item * params * 6, "N, d or m")
    per_query = T * (8 * d + 3 * m + 4 * heads * T) + P * 4 * n_out
    est.add(f"activations of {'a piece' if max_rows is not None and max_rows < Q else 'a batch'} of {B:,}",
            item * B * per_query,
            "--batch-size" if batch_size is None or B > 1 else "N, d or m")
    est.add("final exhaustive check", CHUNK_COPIES * CHUNK_BYTES + 8 * params, "N, d or m")
    return est


def results_file_estimate(what: str, path: str, nbytes: int) -> Estimate:
    """An estimate holding the records of a JSONL results file of ``nbytes`` bytes once parsed.

    Parameters
    ----------
    what : str
        The job.
    path : str
        The file (for the message).
    nbytes : int
        Its size in bytes.

    Returns
    -------
    Estimate
        One part: :data:`JSON_EXPANSION` bytes per byte of the file, plus the longest line read
        (``georecall.io.MAX_LINE_BYTES``) as text and parsed.
    """
    est = Estimate(what)
    line = 1 << 20
    est.add(f"records of {os.path.basename(path)} ({nbytes:,} bytes of JSON)",
            JSON_EXPANSION * max(0, int(nbytes)) + (JSON_EXPANSION + 2) * line,
            f"the size of {os.path.basename(path)} (a smaller results file)")
    return est


def worker_limit() -> int:
    """The most local worker processes a job may start: :data:`WORKERS_PER_CPU` per CPU of this machine.

    Returns
    -------
    int
        At least :data:`WORKERS_PER_CPU`.
    """
    return WORKERS_PER_CPU * max(1, os.cpu_count() or 1)


def workers_estimate(what: str, per_worker: Estimate, workers: int, *, local: bool = True,
                     option: str = "--workers") -> Estimate:
    """The peak of ``workers`` processes each running the job ``per_worker`` estimates, plus the driver.

    Parameters
    ----------
    what : str
        The job, as messages name it.
    per_worker : Estimate
        One worker's job (its largest).
    workers : int
        Worker processes on this machine (``local``), each holding ``per_worker`` and an interpreter
        (:data:`WORKER_BASE`); with ``local=False`` (a remote scheduler) only the driver's copy counts.
    local : bool
        Whether the workers run on this machine.
    option : str
        The option that sets the number of workers (named in messages).

    Returns
    -------
    Estimate
        Per part of ``per_worker``: its bytes times the workers.

    Raises
    ------
    InputError
        More local workers than :func:`worker_limit` (refused before any estimate).
    """
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise InputError(f"{option} must be a positive whole number, got {workers!r}")
    if local and workers > worker_limit():
        raise InputError(f"{option} {workers} is more worker processes than this machine can run at once "
                         f"(at most {worker_limit()}: {WORKERS_PER_CPU} per CPU, {os.cpu_count() or 1} "
                         f"CPU(s)): lower {option}")
    copies = workers if local else 1
    est = Estimate(what)
    for label, nbytes, lower in per_worker.parts:
        est.add(f"{label} ({copies} x)" if copies > 1 else label, nbytes * copies,
                f"{lower} or {option}" if copies > 1 else lower)
    if local and workers > 1:
        est.add(f"{workers} worker interpreters", workers * WORKER_BASE, option)
    return est


def count_tasks_log2(N: int, R: int) -> float:
    """``log2 (N!)^R``, from ``lgamma`` (no factorial is computed).

    Parameters
    ----------
    N : int
        Entities (the size of each relation's permutation); ``N >= 0``.
    R : int
        Relations (the exponent ``R``).

    Returns
    -------
    float
        ``R · ln Γ(N + 1) / ln 2``: the base-2 logarithm of the number of tasks, in floating point (with
        ``math.lgamma``'s rounding; not an exact count).

    Raises
    ------
    ValueError
        From ``math.lgamma`` when ``N <= -1`` (a pole of Γ); this function does not validate its arguments.
    OverflowError
        From ``math.lgamma`` when ``N + 1`` is an integer too large for a float.
    """
    return R * math.lgamma(N + 1) / math.log(2)


def count_estimate(N: int, R: int, k: int, n_tasks: int) -> Estimate:
    """Peak bytes of enumerating all ``(N!)^R`` tasks up to k hops (``bounds.counting.enumerate_counts``).

    Parameters
    ----------
    N, R, k : int
        Entities, relations, largest k.
    n_tasks : int
        ``(N!)^R`` (the caller has checked it is small enough to compute).

    Returns
    -------
    Estimate
        Permutations, their composition table (with its ``(N!)²·N`` intermediate), paths per task.
    """
    est = Estimate("count")
    n_perm = math.factorial(N)
    est.add("permutations", 8 * n_perm * N, "N")
    est.add("composition table", 8 * n_perm * n_perm * (N + 2), "N")
    est.add(f"paths of {n_tasks:,} tasks at k = {k}", 40 * n_tasks * R**k, "k, N or R")
    return est


def bounds_estimate(Ns, Rs, ks) -> Estimate:
    """Peak bytes of the bound tables: the tradeoff bound scans every gadget count ``M <= N / S_k``.

    Parameters
    ----------
    Ns, Rs, ks : lists of int
        The grid.

    Returns
    -------
    Estimate
        The largest scan (about six float64 arrays of length ``N / S_k``).
    """
    est = Estimate("bounds")
    worst = 0
    for N in Ns:
        for R in Rs:
            for k in ks:
                tree = sum(R**i for i in range(k + 1))
                worst = max(worst, 48 * (N // tree))
    est.add("gadget scan of the tradeoff bound", worst, "N (or raise k)")
    return est


@dataclass(frozen=True)
class Member:
    """One array of an ``.npz``/``.npy`` file, read from the headers only.

    Attributes
    ----------
    name : str
        The array's name (without ``.npy``).
    shape : tuple of int
        Its declared shape.
    dtype : numpy.dtype
        Its declared dtype.
    nbytes : int
        Bytes it takes once loaded (the larger of the declared shape's size and the zip's uncompressed size).
    """

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int


def _read_header(stream, path: str, name: str) -> tuple[tuple[int, ...], np.dtype]:
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version == (1, 0):
            shape, _, dtype = fmt.read_array_header_1_0(stream, max_header_size=100_000)
        elif version == (2, 0):
            shape, _, dtype = fmt.read_array_header_2_0(stream, max_header_size=100_000)
        else:
            raise ValueError(f"unsupported .npy version {version}")
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, SyntaxError, TypeError) as exc:
        raise InputError(f"{path!r}: array {name!r} has a damaged header ({_plain(exc)})") from None
    if dtype.hasobject:
        raise InputError(f"{path!r}: array {name!r} holds Python objects (pickled data); georecall reads "
                         "numbers only")
    if not isinstance(shape, tuple) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0
                                               for s in shape):
        raise InputError(f"{path!r}: array {name!r} has a damaged header (shape {shape!r} is not a tuple of "
                         "sizes >= 0)")
    return tuple(int(s) for s in shape), dtype


def _plain(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def npy_member(path: str) -> Member:
    """Shape, dtype and size of a plain ``.npy`` file, read from its header only.

    Parameters
    ----------
    path : str
        The file.

    Returns
    -------
    Member
        The array's description.
    """
    try:
        with open(path, "rb") as f:
            shape, dtype = _read_header(f, path, os.path.basename(path))
    except IsADirectoryError:
        raise InputError(f"{path!r} is a directory, not an .npy file") from None
    except OSError as exc:
        raise InputError(f"cannot read {path!r}: {exc.strerror or exc}") from None
    return Member(os.path.basename(path), shape, dtype, math.prod(shape) * dtype.itemsize)


def npz_members(path: str) -> list[Member]:
    """Every array of an ``.npz`` file, from the zip directory and each member's ``.npy`` header.

    Only the first bytes of each member are inflated (its header): a member whose declared or uncompressed
    size is huge is measured, never read.

    Parameters
    ----------
    path : str
        The file.

    Returns
    -------
    list of Member
        One per array.

    Raises
    ------
    InputError
        A missing, empty, truncated or non-zip file, a member that is not an ``.npy`` array, or object arrays.
    """
    if os.path.isdir(path):
        raise InputError(f"{path!r} is a directory, not an .npz file")
    if not os.path.exists(path):
        raise InputError(f"no such file {path!r}")
    if os.path.getsize(path) == 0:
        raise InputError(f"{path!r} is empty, not an .npz file")
    members = []
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename.endswith(".npy"):
                    raise InputError(f"{path!r}: member {info.filename!r} is not an .npy array")
                name = info.filename[:-4]
                with archive.open(info) as stream:
                    shape, dtype = _read_header(stream, path, name)
                declared = math.prod(shape) * dtype.itemsize
                members.append(Member(name, shape, dtype, max(declared, int(info.file_size))))
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError,
            RuntimeError) as exc:
        raise InputError(f"{path!r} is not a readable .npz file ({_plain(exc)})") from None
    return members


def file_estimate(what: str, path: str, members: list[Member], copies: int = 2) -> Estimate:
    """An estimate holding the arrays of a file (``copies`` times: loaded and converted).

    Parameters
    ----------
    what : str
        The job.
    path : str
        The file (for the message).
    members : list of Member
        Its arrays.
    copies : int
        How many copies of the arrays the job keeps at once.

    Returns
    -------
    Estimate
        One part: the file's arrays.
    """
    est = Estimate(what)
    est.add(f"arrays of {os.path.basename(path)}", copies * sum(m.nbytes for m in members),
            f"the size of {os.path.basename(path)}")
    return est


def probe_estimate(est: Estimate, N: int, R: int, d: int, m: int, n_out: int, subjects: int) -> Estimate:
    """Add the mechanism probes' design matrices to ``est`` (readout fits, decoding logits, interventions).

    Parameters
    ----------
    est : Estimate
        The estimate to extend (already holding the loaded model).
    N, R, d, m, n_out : int
        The model's sizes.
    subjects : int
        Subjects intervened on.

    Returns
    -------
    Estimate
        ``est``.
    """
    est.add("readout design and fits", 8 * (4 * N * R * d + 4 * N * d), "the model's N, R or d")
    est.add("decoded logits", 8 * 2 * N * n_out, "the model's N")
    est.add("unit activations", 8 * 2 * N * R * max(m, d), "the model's N, R or m")
    est.add("interventions", 8 * 2 * min(subjects, N) * R * (n_out + d), "--subjects")
    return est


def hidden_states_estimate(est: Estimate, n: int, width: int, distinct: list[int]) -> Estimate:
    """Add the linear relational probes' matrices to ``est`` (one-hot targets, least squares).

    Parameters
    ----------
    est : Estimate
        The estimate to extend (already holding the loaded arrays).
    n, width : int
        States and their width.
    distinct : list of int
        Distinct attribute ids per relation.

    Returns
    -------
    Estimate
        ``est``.
    """
    widest = max(distinct, default=1)
    est.add("one-hot attribute identity", 8 * widest * widest, "the number of distinct attribute ids")
    est.add("one-hot design and least squares", 8 * 4 * n * (sum(distinct) + width + 1),
            "the number of states or of distinct attribute ids")
    return est
