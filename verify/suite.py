"""The checks behind ``georecall verify`` and ``georecall check``, one function per named check.

Each section is a function ``(seed, progress) -> list[Report]``; ``SECTIONS`` lists them in the order
``georecall verify`` runs them. Later capabilities add their sections here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

from georecall.constructions.codes import binary_length
from georecall.constructions.multi_hop import (build_a2_depth, build_a2_width, build_c1, build_g2, chains,
                                     multi_hop_queries)
from georecall.constructions.single_hop import build_a1, build_g1, single_hop_queries
from georecall.theory import statements
from georecall.theory.tasks import Task, check_positive_int, random_task
from georecall.verify.check import (Report, claim_report, achieved_sizes, check_construction, check_decoding,
                                    check_queries, margin_reaches)
from georecall.verify.bounds_checks import section_bounds
from georecall.verify.precision import quantize, smallest_exact_bits

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
    bits: int | None = None,
    save: str | None = None,
    attributes: str = "shared",
    symmetric: bool = False,
    keep: bool = False,
    progress: bool = False,
) -> Report:
    """Build G1 or A1 on a random task (seeded) and check all N·R queries against its promise.

    ``bits`` quantizes every weight tensor to b bits first (``verify.check.quantize``); the margin promise
    then no longer applies (it is stated for exact weights), so only exactness is required."""
    if construction not in BUILDERS:
        raise ValueError(f"construction must be one of {sorted(BUILDERS)}, got {construction!r}")
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    seeds = np.random.SeedSequence(seed).spawn(2)
    if task is None:
        task = random_task(N, R, np.random.default_rng(seeds[0]), attributes=attributes, symmetric=symmetric)
    kwargs = {"beta": beta} if construction == "geometric" else {}
    built = BUILDERS[construction](task, codes, D=D, lam=lam, integer=integer,
                                   rng=np.random.default_rng(seeds[1]), **kwargs)
    tokens, answers = single_hop_queries(task)
    if save is not None:
        from georecall.constructions.model import save_model
        save_model(built.model, save, extra_arrays={"task_table": task.table}, N=task.N, R=task.R,
                   construction=construction, codes=codes, seed=seed, integer=integer)
    name = f"{'G1' if construction == 'geometric' else 'A1'} {codes}{' int' if integer else ''}"
    params = {"N": task.N, "R": task.R, "D": built.codes.D, "construction": construction, "codes": codes,
              "integer": integer, "seed": seed, "dtype": "float64" if integer else dtype, "bits": bits,
              "attributes": task.attributes, "symmetric": symmetric}
    if bits is not None:
        if integer:
            raise ValueError("--bits and --integer do not combine: quantized weights are not integers")
        model = quantize(built.model, bits).astype(np.dtype(dtype))
        result = check_queries(model, tokens, answers, keep=keep, progress=progress)
        return Report(f"{name} @{bits} bits", params, None, result, achieved_sizes(model),
                      {"promise (exact weights)": built.promise.as_dict()})
    return check_construction(name, params, built, tokens, answers, integer=integer,
                              dtype=None if integer else np.dtype(dtype), keep=keep, progress=progress)


def precision_scan(construction: str, N: int, R: int, k: int | None = None, *, codes: str = "binary",
                   D: int | None = None, seed: int = 0, max_bits: int = 24) -> dict:
    """Smallest bits per parameter at which a construction stays exact on every query (greedy decoding for
    C1). ``k=None``: the single-hop constructions (geometric = G1, associative = A1); otherwise the k-hop ones
    (path-blocks, associative, layered, cot)."""
    rng = np.random.default_rng(seed)
    task = random_task(N, R, rng)
    if k is None:
        if construction not in BUILDERS:
            raise ValueError(f"single-hop construction must be one of {sorted(BUILDERS)} (give --k for the k-hop "
                             f"ones), got {construction!r}")
        built = BUILDERS[construction](task, codes, D=D, rng=rng)
        tokens, answers = single_hop_queries(task)
        check = lambda m: check_queries(m, tokens, answers)  # noqa: E731
    else:
        if construction not in MULTI_HOP_BUILDERS:
            raise ValueError(f"k-hop construction must be one of {sorted(MULTI_HOP_BUILDERS)}, got {construction!r}")
        built = MULTI_HOP_BUILDERS[construction][1](task, k, codes, D=D, rng=rng)
        tokens, answers = multi_hop_queries(task, k)
        if construction == "cot":
            targets = chains(task, k)
            check = lambda m: check_decoding(m, tokens, targets)  # noqa: E731
        else:
            check = lambda m: check_queries(m, tokens, answers)  # noqa: E731
    bits, records = smallest_exact_bits(built.model, check, max_bits=max_bits)
    return {"construction": construction, "N": N, "R": R, "k": k or 1, "codes": codes, "D": built.codes.D,
            "seed": seed, "queries": int(tokens.shape[0]), "smallest_exact_bits": bits, "records": records,
            "quantization": "uniform symmetric per tensor: step max|W|/(2^(b-1)-1)"}


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
    report.extra_checks["teacher forcing: every step exact"] = forced.exact
    report.extra_checks["teacher forcing: margin >= promise"] = margin_reaches(forced.min_margin,
                                                                               built.promise.margin)
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


def section_training(seed: int = 0, progress: bool = False) -> list[Report]:
    """The trainer's gradients against central differences; gradient descent reaching 100% at G1's size; the
    learned-vs-frozen capacity thresholds at a small size (reported; the claim checked is that learned
    embeddings reach 100% at or below G1's d)."""
    import time

    from georecall.verify.sweep import TrialSettings, find_threshold
    from georecall.verify.train import check_grads, init_model, train
    reports = []
    start = time.perf_counter()
    rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])
    checks = {}
    for attention in ("uniform", "softmax"):
        model = init_model(7, 3, 6, 5, attention=attention, heads=2, layers=2, positions=3, rng=rng,
                           dtype=np.float64)
        tokens, answers = multi_hop_queries(random_task(7, 3, rng), 2)
        try:
            checked = check_grads(model, tokens, answers, rng=rng)
            checks[f"{attention} attention, 2 layers: {len(checked)} parameters"] = True
        except AssertionError:
            checks[f"{attention} attention, 2 layers"] = False
    reports.append(claim_report("gradients = finite differences", {"seed": seed}, checks,
                                time.perf_counter() - start, {"d": 6, "m": 5}))

    N, R = 256, 4
    _log(progress, f"training: N={N}, R={R} at G1's d, then learned vs frozen thresholds")
    start = time.perf_counter()
    task = random_task(N, R, np.random.default_rng(seed))
    tokens, answers = single_hop_queries(task)
    g1_d = statements.g1_promise(N, R, binary_length(N), norm_sq=1, mu=0, max_abs=1, beta=3).d
    trained = train(init_model(N, R, g1_d, 4 * g1_d, rng=seed), tokens, answers, steps=1000, rng=seed)
    reports.append(claim_report("GD reaches 100% at G1's d", {"N": N, "R": R, "seed": seed},
                                {f"trained d = {g1_d} answers all {N * R} facts": trained.reached},
                                time.perf_counter() - start, {"d": g1_d, "m": 4 * g1_d},
                                {"steps": trained.steps}))
    start = time.perf_counter()
    settings = TrialSettings(steps=400)
    found = {mode: find_threshold(N, R, mode, seed, settings, d_min=4, resolution=2)
             for mode in ("learned", "frozen")}
    learned, frozen = found["learned"]["d_star"], found["frozen"]["d_star"]
    reports.append(claim_report(
        "capacity threshold, learned", {"N": N, "R": R, "seed": seed, "steps": settings.steps},
        {f"learned d* = {learned} <= G1's d = {g1_d}": learned is not None and learned <= g1_d},
        time.perf_counter() - start, {"d": f"d*={learned}", "m": f"frozen d*={frozen}"},
        {"learned": found["learned"], "frozen": found["frozen"]}))
    return reports


def section_probes(seed: int = 0, progress: bool = False) -> list[Report]:
    """On G1 every probe has its exact value; on an untrained model the same probes fail (they can fail)."""
    import time

    from georecall.verify.probes import probe_all
    from georecall.verify.train import init_model
    _log(progress, "probes: G1 (N=512, R=4) exact; an untrained model for contrast")
    start = time.perf_counter()
    task = random_task(512, 4, np.random.default_rng(seed))
    g1 = probe_all(build_g1(task, "binary").model, task, rng=seed, transfer_steps=5)
    untrained = probe_all(init_model(512, 4, 16, 64, rng=seed), task, rng=seed, transfer_steps=5)
    checks = {
        "G1 held-out encoding R² = 1": abs(g1["readout"]["encoding_r2"] - 1) < 1e-9,
        "G1 per-relation probes 100%": g1["readout"]["probe_accuracy_mean"] == 1.0,
        "G1 interventions followed, others unchanged": g1["intervention"]["follows"] == 1.0
        and g1["intervention"]["others_unchanged"] == 1.0,
        "G1 units 100% relation-selective": g1["selectivity"]["selective_fraction"] == 1.0,
        "G1 zero-shot transfer 100%": g1["transfer"]["closed_form_accuracy"] == 1.0,
        "untrained: readout R² < 0.5 and transfer at chance": untrained["readout"]["encoding_r2"] < 0.5
        and untrained["transfer"]["closed_form_accuracy"] < 0.05,
    }
    return [claim_report("probes exact on G1", {"N": 512, "R": 4, "seed": seed}, checks,
                         time.perf_counter() - start, {"d": "", "m": ""}, {"g1": g1, "untrained": untrained})]


SECTIONS: list[tuple[str, Callable[..., list[Report]]]] = [
    ("single hop (G1, A1)", section_single_hop),
    ("multi hop (G2, A2, C1)", section_multi_hop),
    ("lower bounds and counting", section_bounds),
    ("gradient descent", section_training),
    ("mechanism probes", section_probes),
]
