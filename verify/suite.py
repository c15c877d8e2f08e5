"""The checks behind ``georecall verify`` and ``georecall check``, one function per named check.

Each section is a function ``(seed, progress) -> list[Report]``; ``SECTIONS`` lists them in the order
``georecall verify`` runs them. Later capabilities add their sections here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from constructions.single_hop import build_a1, build_g1, single_hop_queries
from theory.tasks import Task, random_task
from verify.check import Report, check_construction

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


SECTIONS: list[tuple[str, Callable[..., list[Report]]]] = [
    ("single hop (G1, A1)", section_single_hop),
]
