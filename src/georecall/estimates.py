"""The memory estimate of each command (:class:`georecall.memory.Estimate`): peak bytes of a job, summed over
its parts (construction weights, codes, queries, logit chunks, trainer activations and Adam state, probe
design matrices, the enumeration of ``count``, arrays read from a file, worker processes), compared with the
run's :class:`~georecall.memory.Budget` before any large allocation.

Estimates are deliberately generous upper bounds (they count every copy the code makes: a float64 build and
its working-precision copy, quantized copies, gradient and Adam moments). They are computed in Python
integers, so no size can overflow. The arrays of a file are measured from its headers
(:mod:`georecall.npy_headers`), never decompressed."""

from __future__ import annotations

import math
import os

from georecall.errors import InputError
from georecall.memory import Budget, Estimate, checker_chunk_bytes
from georecall.npy_headers import Member

__all__ = [
    "bounds_estimate",
    "built_model_estimate",
    "check_estimate",
    "code_length",
    "count_estimate",
    "count_tasks_log2",
    "file_estimate",
    "hidden_states_estimate",
    "probe_estimate",
    "query_bytes",
    "results_file_estimate",
    "train_estimate",
    "worker_limit",
    "workers_estimate",
]

CODES_CHUNK_BYTES = 64 * 2**20  # the row chunk of the codes' coherence scan (constructions.codes)
# A spawned worker process: interpreter, NumPy, SciPy and georecall imported (measured RSS ~ 90 MiB).
WORKER_BASE = 128 * 2**20
# Parsed JSON per byte of text: measured 5.6 for sweep records and up to 19 for the densest hostile form
# ([[0],[0],...] or [{},{},...]: a container per 3 bytes), so 24 bounds any line.
JSON_EXPANSION = 24
WORKERS_PER_CPU = 4  # local worker processes beyond this many per CPU only queue for the cores


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
                   attributes: str = "shared", what: str = "check", budget: Budget | None = None
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
    budget : Budget or None
        The budget the job runs under (``None``: the default budget): the checker's chunks are the ones it
        sizes from the budget (:meth:`georecall.memory.Budget.chunk_bytes`), so a small budget counts small
        chunks.

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


def built_model_estimate(model, n_queries: int, T: int, budget: Budget | None = None, *,
                         what: str = "checking the built model") -> Estimate:
    """Peak bytes of checking a model that is already built, from its measured arrays (not from a promise):
    the parts :func:`check_estimate` counts, with d, m, the heads and the parameters read off ``model``.

    Parameters
    ----------
    model : Model
        The built model (duck-typed: ``arrays()``, ``d``, ``mlp_width``, ``n_out``, ``layers``).
    n_queries, T : int
        Queries checked and their length.
    budget : Budget or None
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


def train_estimate(N: int, R: int, d: int, m: int, *, k: int = 1, cot: bool = False, heads: int = 1,
                   batch_size: int | None = None, dtype: str = "float32", n_out: int | None = None,
                   what: str = "train", max_rows: int | None = None,
                   budget: Budget | None = None) -> Estimate:
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
    budget : Budget or None
        The run's budget, which sizes the final check's chunks (:func:`georecall.memory.checker_chunk_bytes`:
        never more than the queries need; ``None``: the default budget, the largest chunks).

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
    est.add("final exhaustive check", checker_chunk_bytes(max(d, m, n_out, 1), T, Q, budget) + 8 * params,
            "N, d or m")
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


def count_estimate(N: int, R: int, k: int, n_tasks: int, by_table: bool = True) -> Estimate:
    """Peak bytes of enumerating all ``(N!)^R`` tasks up to k hops (``bounds.counting.enumerate_counts``).

    Parameters
    ----------
    N, R, k : int
        Entities, relations, largest k.
    n_tasks : int
        ``(N!)^R`` (the caller has checked it is small enough to compute).
    by_table : bool
        Whether the enumeration composes through the ``N! × N!`` table
        (``bounds.counting.composes_by_table``), or the permutations themselves.

    Returns
    -------
    Estimate
        Permutations, their composition table (with its ``(N!)²·N`` intermediate) or the composed
        permutations, paths per task.
    """
    est = Estimate("count")
    n_perm = math.factorial(N)
    est.add("permutations", 8 * n_perm * N, "N")
    if by_table:
        est.add("composition table", 8 * n_perm * n_perm * (N + 2), "N")
        est.add(f"paths of {n_tasks:,} tasks at k = {k}", 40 * n_tasks * R**k, "k, N or R")
    else:  # uint8 permutations along every path, with a gather's int64 index arrays beside them
        est.add(f"composed permutations of {n_tasks:,} tasks at k = {k}", 24 * n_tasks * R**k * N,
                "k, N or R")
    return est


def bounds_estimate(Ns, Rs, ks, scan: bool = True) -> Estimate:
    """Peak bytes of the bound tables: the tradeoff bound scans every gadget count ``M <= N / S_k``.

    Parameters
    ----------
    Ns, Rs, ks : lists of int
        The grid.
    scan : bool
        Whether a row's bound is the tradeoff bound (a construction whose spec names it): without one, nothing
        is scanned and the table's rows are all it holds.

    Returns
    -------
    Estimate
        The largest scan (about six float64 arrays of length ``N / S_k``), or the rows.
    """
    est = Estimate("bounds")
    if not scan:
        return est.add("the table's rows", 4096 * len(Ns) * len(Rs) * len(ks), "the grid")
    worst = 0
    for N in Ns:
        for R in Rs:
            for k in ks:
                tree = sum(R**i for i in range(k + 1))
                worst = max(worst, 48 * (N // tree))
    est.add("gadget scan of the tradeoff bound", worst, "N (or raise k)")
    return est


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
