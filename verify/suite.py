"""The checks behind ``georecall verify`` and ``georecall check``, one function per named check.

Each section is a function ``(seed, progress) -> list[Report]``; ``SECTIONS`` lists them in the order
``georecall verify`` runs them. Later capabilities add their sections here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from constructions.codes import binary_length
from constructions.multi_hop import (build_a2_depth, build_a2_width, build_c1, build_g2, chains,
                                     multi_hop_queries)
from constructions.single_hop import build_a1, build_g1, single_hop_queries
from theory import statements
from theory.tasks import Task, check_positive_int, random_task
from verify.check import Report, achieved_sizes, check_construction, check_decoding, check_queries

BUILDERS = {"geometric": build_g1, "associative": build_a1}


def _log(progress: bool, message: str) -> None:
    if progress:
        print(message, file=sys.stderr, flush=True)


def check_single_hop(
    N: int,
    R: int,
    *,
    construction: str = "geometric",
    codes: str = "binary",
    D: int | None = None,
    seed: int = 0,
    integer: bool = False,
    beta: float | None = None,
    lam: float = 1.0,
    dtype: str = "float64",
    task: Task | None = None,
    keep: bool = False,
    progress: bool = False,
) -> Report:
    """Build G1 or A1 on a random task (seeded) and check all N·R queries against its promise."""
    if construction not in BUILDERS:
        raise ValueError(f"construction must be one of {sorted(BUILDERS)}, got {construction!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    seeds = np.random.SeedSequence(seed).spawn(2)
    task = random_task(N, R, np.random.default_rng(seeds[0])) if task is None else task
    kwargs = {"beta": beta} if construction == "geometric" else {}
    built = BUILDERS[construction](task, codes, D=D, lam=lam, integer=integer,
                                   rng=np.random.default_rng(seeds[1]), **kwargs)
    tokens, answers = single_hop_queries(task)
    name = f"{'G1' if construction == 'geometric' else 'A1'} {codes}{' int' if integer else ''}"
    params = {"N": task.N, "R": task.R, "D": built.codes.D, "construction": construction, "codes": codes,
              "integer": integer, "seed": seed, "dtype": "float64" if integer else dtype}
    return check_construction(name, params, built, tokens, answers, integer=integer,
                              dtype=None if integer else np.dtype(dtype), keep=keep, progress=progress)


def section_single_hop(seed: int = 0, progress: bool = False) -> list[Report]:
    """G1 at full default size (N=4096, R=16) in float and integer mode, which must agree; G1 with random codes
    and A1 at smaller sizes."""
    reports = []
    _log(progress, "single hop: G1 binary, N=4096, R=16 (float64, then integer mode)")
    as_float = check_single_hop(4096, 16, seed=seed, keep=True)
    as_int = check_single_hop(4096, 16, seed=seed, integer=True, keep=True)
    agree = bool(np.array_equal(as_float.result.predictions, as_int.result.predictions))
    as_int.extra["agrees_with_float"] = agree
    as_int.extra_checks["float and integer predictions agree"] = agree
    reports += [as_float, as_int]
    for codes in ("sign", "gaussian"):  # D = 48 < the high-probability length: μ < 1 is checked, not assumed
        _log(progress, f"single hop: G1 {codes}, N=512, R=8, D=48")
        reports.append(check_single_hop(512, 8, codes=codes, D=48, seed=seed))
    _log(progress, "single hop: A1 binary integer, N=512, R=8; A1 sign, N=256, R=4")
    reports.append(check_single_hop(512, 8, construction="associative", integer=True, seed=seed))
    reports.append(check_single_hop(256, 4, construction="associative", codes="sign", seed=seed))
    return reports


MULTI_HOP_BUILDERS = {"path-blocks": ("G2", build_g2), "associative": ("A2a", build_a2_width),
                      "layered": ("A2b", build_a2_depth), "cot": ("C1", build_c1)}
DEFAULT_MAX_BYTES = 4 * 2**30


def query_bytes(N: int, R: int, k: int, cot: bool = False) -> int:
    """Bytes the checker holds for all N·R^k queries: tokens, answers, predictions and margins."""
    T = 2 * k if cot else k + 1
    return 8 * N * R**k * (T + 3 * (k if cot else 1))


def check_multi_hop(
    N: int,
    R: int,
    k: int,
    *,
    construction: str = "path-blocks",
    codes: str = "binary",
    D: int | None = None,
    attention: str = "softmax",
    beta: float | None = None,
    seed: int = 0,
    max_bytes: int = DEFAULT_MAX_BYTES,
    progress: bool = False,
) -> Report:
    """Build G2, A2(a), A2(b) or C1 on a random task and check all N·R^k queries against its promise.

    C1 is checked twice: greedy decoding of every chain (the report's result: a query passes only if all k
    steps are right) and teacher forcing (``extra_checks``: every step exact with the promised margin).
    """
    if construction not in MULTI_HOP_BUILDERS:
        raise ValueError(f"construction must be one of {sorted(MULTI_HOP_BUILDERS)}, got {construction!r}")
    N, R, k = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k", k)))
    cot = construction == "cot"
    need = query_bytes(N, R, k, cot)
    if need > max_bytes:
        raise ValueError(f"checking all N·R^k = {N * R**k:,} queries needs about {need / 2**30:.2f} GiB, more "
                         f"than the {max_bytes / 2**30:.2f} GiB allowed (max_bytes)")
    result_id, builder = MULTI_HOP_BUILDERS[construction]
    seeds = np.random.SeedSequence(seed).spawn(2)
    task = random_task(N, R, np.random.default_rng(seeds[0]))
    kwargs = {"beta": beta} if beta is not None else {}
    built = builder(task, k, codes, D=D, attention=attention, rng=np.random.default_rng(seeds[1]),
                    max_bytes=max_bytes, **kwargs)
    tokens, answers = multi_hop_queries(task, k)
    name = f"{result_id} {codes}" + (" (hard attn, idealized)" if attention == "hard" else "")
    params = {"N": N, "R": R, "k": k, "D": built.codes.D, "construction": construction, "codes": codes,
              "attention": attention, "beta": built.constants.get("beta"), "seed": seed}
    if not cot:
        return check_construction(name, params, built, tokens, answers, progress=progress)
    targets = chains(task, k)
    greedy = check_decoding(built.model, tokens, targets, progress=progress)
    forced = check_queries(built.model, np.concatenate([tokens, targets[:, :-1]], axis=1), targets,
                           positions=np.arange(k, 2 * k))
    report = Report(name, params, built.promise, greedy, achieved_sizes(built.model),
                    {"constants": built.constants, "codes": built.codes.kind, "mu": built.codes.mu,
                     "teacher_forcing": forced.as_dict()})
    tol = 1e3 * np.finfo(np.float64).eps * max(1.0, abs(built.promise.margin))
    report.extra_checks["teacher forcing: every step exact"] = forced.exact
    report.extra_checks["teacher forcing: margin >= promise"] = bool(forced.min_margin >= built.promise.margin - tol)
    return report


def section_multi_hop(seed: int = 0, progress: bool = False) -> list[Report]:
    """G2, A2(a), A2(b) and C1 at sizes that run in seconds, with softmax attention (and G2 hard, labelled)."""
    cases = [("path-blocks", 1024, 3, 3, "softmax"), ("path-blocks", 256, 3, 2, "hard"),
             ("associative", 64, 3, 2, "softmax"), ("layered", 256, 3, 3, "softmax"),
             ("cot", 1024, 4, 3, "softmax")]
    reports = []
    for construction, N, R, k, attention in cases:
        _log(progress, f"multi hop: {construction}, N={N}, R={R}, k={k}, {attention} attention")
        reports.append(check_multi_hop(N, R, k, construction=construction, attention=attention, seed=seed))
    return reports


def tradeoff_rows(N: int, R: int, k_max: int) -> list[dict]:
    """d, m and parameters that G2, A2(a), A2(b) and C1 promise for k = 1..k_max (binary codes, ε = 0: sizes
    do not depend on the attention constants)."""
    N, R, k_max = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("k_max", k_max)))
    D = binary_length(N)
    geometry = {"norm_sq": 1.0, "mu": statements.binary_coherence(D) if D > 1 else -1.0}
    rows = []
    for k in range(1, k_max + 1):
        promises = {
            "G2": statements.g2_promise(N, R, k, D, max_abs=D**-0.5, max_l1=D**0.5, gate=2 * D**-0.5, beta=None,
                                        **geometry),
            "A2a": statements.a2_width_promise(N, R, k, D, gate=1.0, beta=None, **geometry),
            "A2b": statements.a2_depth_promise(N, R, k, D, beta=None, **geometry),
            "C1": statements.c1_promise(N, R, k, D, max_abs=D**-0.5, max_l1=D**0.5, gate=2 * D**-0.5, beta=None,
                                        **geometry),
        }
        for name, p in promises.items():
            rows.append({"k": k, "construction": name, "d": p.d, "m": p.m, "params": p.params,
                         "fact_params": p.fact_params, "N": N, "R": R, "D": D})
    return rows


SECTIONS: list[tuple[str, Callable[..., list[Report]]]] = [
    ("single hop (G1, A1)", section_single_hop),
    ("multi hop (G2, A2, C1)", section_multi_hop),
]
