"""Benchmark: exhaustive G1 checks with the checker's exact fast paths against the dense reference (issue 14).

Part 1 (ratios): the same exhaustive check of G1 (binary codes) run as forward/decoder = dense/dense (THE
forward pass, logits), dense/hypercube and tables/hypercube, interleaved over ``--repeats`` rounds; minima,
and each one's time as a ratio to dense/dense. Float64 and integer mode.

Part 2 (``--big``): the target, G1 at N = 2^20, R = 16 (16.8 M queries): build once, then the exhaustive check
(``decoder="auto"``, ``forward="auto"``) in float64 and in integer mode. Each check reports its seconds and
the process's peak resident memory *during the check* (VmHWM, reset after the build through
/proc/self/clear_refs; it includes the resident model, which the check reads). ``--float32`` stores the
model's weights in float32 first (exact for G1's integer weights) to show the floor that the model's own size
sets.

Part 3 (``--end-to-end``): the issue's target as a user meets it: ``georecall check single-hop --N 1048576
--R 16 [--integer] --json`` in a child process (default memory budget: the estimator must admit it), float
and integer mode; reports the child's wall time (task, build, queries, check) and its peak resident memory
(the child's own VmHWM through ``child.run_georecall``; ``ru_maxrss`` would carry this process's peak from
part 2 across exec), against the targets ≤ 60 s and ≤ 4 GiB.

Run by hand:
    python benchmarks/bench_check.py                       # ratios at N = 4096, R = 16
    python benchmarks/bench_check.py --big                 # N = 2^20, R = 16
    python benchmarks/bench_check.py --skip-ratios --end-to-end   # the CLI at N = 2^20, R = 16
    /usr/bin/time -v python benchmarks/bench_check.py --big --skip-ratios --no-reset   # whole-process peak
(the reset also lowers the kernel's peak that /usr/bin/time reports, hence --no-reset for that figure)
"""

from __future__ import annotations

import argparse
import gc
import time

import numpy as np

from georecall.constructions.single_hop import build_g1
from georecall.theory.tasks import random_task
from georecall.theory.tokens import single_hop_queries
from georecall.verify.checking.check import check_queries

PATHS = (("dense", "dense"), ("dense", "hypercube"), ("tables", "hypercube"))


def memory_kib(field: str) -> int:
    """``VmHWM`` (peak) or ``VmRSS`` (current) of this process in KiB, from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False if the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def ratios(N: int, R: int, repeats: int, seed: int) -> None:
    task = random_task(N, R, seed)
    tokens, answers = single_hop_queries(task)
    for integer in (False, True):
        model = build_g1(task, "binary", integer=integer).model
        best = {path: np.inf for path in PATHS}
        results = {}
        for _ in range(repeats):  # interleaved: every path once per round, so drifting load hits all alike
            for forward, decoder in PATHS:
                result = check_queries(model, tokens, answers, integer=integer, forward=forward,
                                       decoder=decoder)
                best[(forward, decoder)] = min(best[(forward, decoder)], result.seconds)
                results[(forward, decoder)] = result
        reference = best[PATHS[0]]
        print(f"G1 N={N} R={R} ({N * R:,} queries), {'integer' if integer else 'float64'} mode, "
              f"min of {repeats}:")
        for path in PATHS:
            r = results[path]
            print(f"  forward={path[0]:6s} decoder={path[1]:9s} {best[path]:8.3f} s  "
                  f"ratio {best[path] / reference:6.3f}  exact={r.exact} min margin {r.min_margin:.6g} "
                  f"(ran {r.forward}/{r.decoder})")
        ref = results[PATHS[0]].min_margin
        gaps = ", ".join(f"{p[0]}/{p[1]}: {abs(results[p].min_margin - ref):.2g}" for p in PATHS[1:])
        print(f"  |min margin − dense/dense's|: {gaps} ({'must be 0' if integer else 'rounding'})")


def big(N: int, R: int, seed: int, float32: bool, reset: bool = True) -> None:
    start = time.perf_counter()
    task = random_task(N, R, seed)
    model = build_g1(task, "binary", integer=True).model
    if float32:
        model = model.astype(np.float32)
    tokens, answers = single_hop_queries(task)
    built = time.perf_counter() - start
    gc.collect()
    model_bytes = sum(a.nbytes for a in model.arrays().values())
    print(f"G1 N={N} R={R}: {N * R:,} queries; build {built:.1f} s; model arrays "
          f"{model_bytes / 2**30:.2f} GiB ({model.entity_embedding.dtype}), tokens+answers "
          f"{(tokens.nbytes + answers.nbytes) / 2**30:.2f} GiB; "
          f"RSS after build {memory_kib('VmRSS') / 2**20:.2f} GiB")
    for integer in (False, True):
        before = memory_kib("VmRSS")
        reset = reset_peak() if reset else False
        result = check_queries(model, tokens, answers, integer=integer)
        peak = memory_kib("VmHWM")
        print(f"  {'integer' if integer else str(model.entity_embedding.dtype) + ' float'} mode: "
              f"check {result.seconds:.1f} s, exact={result.exact} "
              f"({result.n_correct:,}/{result.n_queries:,}), "
              f"min margin {result.min_margin:g}, forward={result.forward}, decoder={result.decoder}; "
              f"peak RSS during the check {peak / 2**20:.2f} GiB "
              f"({'reset after build' if reset else 'NOT reset: whole-process peak'}), "
              f"of which {(peak - before) / 2**20:.2f} GiB above the RSS before it")


def end_to_end(N: int, R: int, seed: int) -> None:
    """The CLI in a child process: wall seconds and the child's own peak RSS per mode."""
    import json

    from child import run_georecall

    for mode in ([], ["--integer"]):
        argv = ["check", "single-hop", "--N", str(N), "--R", str(R), "--seed", str(seed), "--json", *mode]
        run = run_georecall(argv)
        try:
            report = json.loads(run.stdout)["reports"][0]
        except (json.JSONDecodeError, KeyError, IndexError):
            print(f"  {' '.join(argv)}: exit {run.returncode}, no report: {run.stderr[-300:]}")
            continue
        check = report["check"]
        print(f"  georecall check single-hop --N {N} --R {R}{' --integer' if mode else ''}: exit "
              f"{run.returncode}, {run.wall:.1f} s wall (target <= 60), {run.cpu:.1f} CPU s, "
              f"peak RSS {run.peak_gib:.2f} GiB (target <= 4); check {check['seconds']:.1f} s, "
              f"{check['n_correct']:,}/{check['n_queries']:,} "
              f"correct, min margin {check['min_margin']:g}, forward={check['forward']}, "
              f"decoder={check['decoder']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=4096, help="entities for the ratio runs")
    parser.add_argument("--R", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--big", action="store_true", help="also run the N = 2^20, R = 16 target")
    parser.add_argument("--big-N", type=int, default=2**20)
    parser.add_argument("--float32", action="store_true", help="store the big model's weights in float32")
    parser.add_argument("--skip-ratios", action="store_true")
    parser.add_argument("--no-reset", action="store_true", help="whole-process peak (build included)")
    parser.add_argument("--end-to-end", action="store_true",
                        help="the CLI at N = --big-N, R = --R in a child process: wall time and peak RSS")
    args = parser.parse_args()
    if not args.skip_ratios:
        ratios(args.N, args.R, args.repeats, args.seed)
    if args.big:
        big(args.big_N, args.R, args.seed, args.float32, reset=not args.no_reset)
    if args.end_to_end:
        end_to_end(args.big_N, args.R, args.seed)


if __name__ == "__main__":
    main()
