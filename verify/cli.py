"""The ``georecall`` command line.

Exit codes: 0 every check passed; 1 a check failed; 2 bad arguments or parameters outside a theorem's
conditions (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
from georecall.constructions import registry
from georecall.theory import seeds
from georecall.theory.tasks import task_for_seed
from georecall.verify.check import Report
from georecall.verify.suite import SECTIONS, check_multi_hop, check_single_hop, tradeoff_rows

from georecall import __version__
from georecall.errors import InputError


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage + message by default)
        raise UsageError(f"{self.prog}: {message}")


def _fmt(value, digits: int = 4) -> str:
    if isinstance(value, float):
        return "—" if value != value else f"{value:.{digits}g}"
    return str(value)


def report_table(reports: list[Report]) -> str:
    """A fixed-width PASS/FAIL table: sizes and margins, promised vs achieved."""
    header = ("check", "N", "R", "k", "d prom/ach", "m prom/ach", "margin prom/ach", "accuracy", "checked",
              "time s", "verdict")
    rows = []
    for rep in reports:
        p, a, r = rep.promise, rep.achieved, rep.result
        rows.append((
            rep.name, _fmt(rep.params.get("N", "")), _fmt(rep.params.get("R", "")),
            _fmt(rep.params.get("k", 1 if p else "")),
            f"{p.d}/{a['d']}" if p else str(a.get("d", "")),
            f"{p.m}/{a['m']}" if p else str(a.get("m", "")),
            f"{_fmt(p.margin)}/{_fmt(r.min_margin)}" if p else _fmt(r.min_margin),
            f"{100 * r.accuracy:.2f}%", f"{r.n_queries:,}", f"{r.seconds:.2f}",
            "PASS" if rep.passed else "FAIL",
        ))
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line("-" * w for w in widths)] + [line(row) for row in rows])


def _print_failures(rep: Report) -> None:
    for failure in rep.result.failures:
        if "claim" in failure:
            continue
        print(f"  {rep.name}: query {failure['query']} tokens {failure['tokens']} expected {failure['expected']} "
              f"predicted {failure['predicted']} margin {failure['margin']:.4g}")
    for name, ok in rep.extra_checks.items():
        if not ok:
            print(f"  {rep.name}: failed: {name}")
    if rep.result.failures and "claim" in rep.result.failures[0]:
        return
    if rep.promise and rep.result.exact and not rep.passed:
        print(f"  {rep.name}: achieved sizes/margin fall short of the promise")


def cmd_verify(args) -> int:
    start = time.perf_counter()
    reports: list[Report] = []
    for title, section in SECTIONS:
        if not (args.json or args.quiet):
            print(f"== {title}", file=sys.stderr, flush=True)
        reports += section(seed=args.seed, progress=not args.quiet)
    ok = all(rep.passed for rep in reports)
    if args.json:
        print(json.dumps({"version": __version__, "seed": args.seed, "passed": ok,
                          "seconds": round(time.perf_counter() - start, 3),
                          "reports": [rep.as_dict() for rep in reports]}, indent=2))
    else:
        print(report_table(reports))
        for rep in reports:
            _print_failures(rep)
        print(f"\ngeorecall {__version__}, seed {args.seed}: {sum(r.passed for r in reports)}/{len(reports)} "
              f"checks passed in {time.perf_counter() - start:.1f} s -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


def cmd_check_single_hop(args) -> int:
    rep = check_single_hop(args.N, args.R, construction=args.construction, codes=args.codes, D=args.D,
                           seed=args.seed, integer=args.integer, gate=args.gate, beta=args.beta, lam=args.lam,
                           dtype=args.dtype,
                           bits=args.bits, save=args.save, attributes=args.attributes, symmetric=args.symmetric,
                           progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(rep.as_dict(), indent=2))
    else:
        print(report_table([rep]))
        _print_failures(rep)
    return 0 if rep.passed else 1


def cmd_check_multi_hop(args) -> int:
    rep = check_multi_hop(args.N, args.R, args.k, construction=args.construction, codes=args.codes, D=args.D,
                          attention=args.attention, beta=args.beta, gate=args.gate, seed=args.seed,
                          max_bytes=int(args.max_gib * 2**30), progress=not (args.quiet or args.json))
    if args.json:
        print(json.dumps(rep.as_dict(), indent=2))
    else:
        print(report_table([rep]))
        if rep.result.per_position is not None:
            forced = rep.extra.get("teacher_forcing", {})
            print(f"  greedy decoding: per-step accuracy {rep.result.per_position}, final-answer accuracy "
                  f"{rep.result.final_accuracy}; teacher forcing: per-step accuracy "
                  f"{forced.get('per_position')}, min margin {forced.get('min_margin', float('nan')):.4g}")
        _print_failures(rep)
    return 0 if rep.passed else 1


def cmd_tradeoff(args) -> int:
    rows = tradeoff_rows(args.N, args.R, args.k_max)
    if args.json:
        print(json.dumps({"version": __version__, "N": args.N, "R": args.R, "k_max": args.k_max, "rows": rows},
                         indent=2))
        return 0
    names = ["G2", "A2a", "A2b", "C1"]
    print(f"capacity-depth tradeoff at N = {args.N}, R = {args.R}, D = {rows[0]['D']} (binary codes): "
          "d / m / parameters each construction promises")
    header = ["k"] + [f"{n} {what}" for n in names for what in ("d", "m", "params")]
    table = []
    for k in range(1, args.k_max + 1):
        by = {r["construction"]: r for r in rows if r["k"] == k}
        table.append([str(k)] + [f"{by[n][what]:,}" for n in names for what in ("d", "m", "params")])
    widths = [max(len(c) for c in col) for col in zip(header, *table)]
    for row in [header] + table:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    print("G2: path blocks, no CoT (d exponential in k); A2a: one unit per k-hop fact (m = N·R^k); "
          "A2b: k layers of width 2·N·R; C1: chain-of-thought (d linear in R, additive in k).")
    return 0


def cmd_bounds(args) -> int:
    from georecall.bounds.tables import bound_rows, render
    start = time.perf_counter()
    rows = bound_rows(args.N, args.R, args.k, args.bits)
    fmt = "json" if args.json else args.format
    print(render(rows, fmt))
    if not args.quiet and fmt in ("md", "latex"):
        print(f"{len(rows)} rows in {time.perf_counter() - start:.2f} s; gap = d / d_min; a bound with d_min = 0 "
              "is vacuous for that construction (its facts sit in P0, the MLP).", file=sys.stderr)
    return 0


def cmd_count(args) -> int:
    from georecall.bounds.counting import closed_forms, enumerate_counts
    counts = enumerate_counts(args.N, args.R, args.k, progress=not (args.quiet or args.json))
    rows = []
    for k in range(1, args.k + 1):
        closed = closed_forms(args.N, args.R, k)
        rows.append({"k": k, "F_k": counts.F[k], "F_k_upper": closed.F_upper, "trees_k": counts.trees[k],
                     "trees_k_lower": closed.trees_lower, "trees_k_upper": closed.trees_upper,
                     "F_1_closed": closed.F1 if k == 1 else None, "trees_1_closed": closed.trees1 if k == 1 else None,
                     "sandwich_holds": (closed.trees_lower is None or closed.trees_lower <= counts.trees[k])
                     and counts.trees[k] <= closed.trees_upper})
    ok = all(r["sandwich_holds"] for r in rows) and counts.F[1] == rows[0]["F_1_closed"] \
        and counts.trees[1] == rows[0]["trees_1_closed"]
    if args.json:
        print(json.dumps({"version": __version__, "N": args.N, "R": args.R, "tasks": counts.tasks,
                          "seconds": round(counts.seconds, 3), "consistent": ok, "rows": rows}, indent=2))
    else:
        print(f"all (N!)^R = {counts.tasks:,} tasks of N = {args.N}, R = {args.R} enumerated in "
              f"{counts.seconds:.2f} s")
        print(f"{'k':>2}  {'|F_k|':>12}  {'(N!)^R':>12}  {'(N-1)_(R^k)':>12}  {'|Trees_k|':>12}  {'N^(R^k)':>14}")
        for r in rows:
            lower = "n/a" if r["trees_k_lower"] is None else f"{r['trees_k_lower']:,}"
            print(f"{r['k']:>2}  {r['F_k']:>12,}  {r['F_k_upper']:>12,}  {lower:>12}  {r['trees_k']:>12,}  "
                  f"{r['trees_k_upper']:>14,}")
        print("closed forms: |F_1| = (N!)^R, |Trees_1| = N^R; sandwich (N-1)_(R^k) <= |Trees_k| <= N^(R^k) "
              f"(lower side when N >= 1 + R + ... + R^k): {'all hold' if ok else 'VIOLATED'}")
    return 0 if ok else 1


def cmd_precision(args) -> int:
    from georecall.verify.suite import precision_scan
    doc = {"version": __version__, **precision_scan(args.construction, args.N, args.R, args.k, codes=args.codes,
                                                    D=args.D, seed=args.seed, max_bits=args.max_bits)}
    bits = doc["smallest_exact_bits"]
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        for r in doc["records"]:
            print(f"b = {r['bits']:>2}: accuracy {100 * r['accuracy']:6.2f}%, min margin {r['min_margin']:.4g}")
        print(f"smallest b keeping every one of the {doc['queries']:,} queries exact: "
              f"{bits if bits is not None else f'none up to {args.max_bits}'}")
    return 0 if bits is not None else 1


def cmd_train(args) -> int:
    from georecall.constructions.model import save_model
    from georecall.verify.sweep import FROZEN_GROUPS
    from georecall.verify.train import init_model, train, training_data
    task = task_for_seed(args.N, args.R, args.seed)
    tokens, answers, positions, T = training_data(task, args.k, args.cot)
    m = args.m if args.m is not None else 4 * args.d
    model = init_model(args.N, args.R, args.d, m, attention=args.attention, heads=args.heads,
                       positions=T if args.k > 1 or args.cot else None,
                       rng=seeds.rng(args.seed, "init"), dtype=np.dtype(args.dtype))
    frozen = tuple(FROZEN_GROUPS[args.mode]) + tuple(args.freeze)
    result = train(model, tokens, answers, steps=args.steps, lr=args.lr, optimizer=args.optimizer,
                   batch_size=args.batch_size, frozen=frozen, dtype=np.dtype(args.dtype), positions=positions,
                   rng=seeds.rng(args.seed, "batches"), log_every=0 if (args.quiet or args.json) else args.log_every)
    params = {"N": args.N, "R": args.R, "k": args.k, "cot": args.cot, "d": args.d, "m": m,
              "attention": args.attention, "heads": args.heads,
              "mode": args.mode, "frozen": list(frozen), "steps": args.steps, "lr": args.lr,
              "optimizer": args.optimizer, "batch_size": args.batch_size, "dtype": args.dtype, "seed": args.seed}
    doc = {"version": __version__, "params": params, "reached": result.reached, "steps_run": result.steps,
           "final_loss": result.losses[-1], "final_batch_accuracy": result.accuracies[-1],
           "seconds": round(result.seconds, 3), "out": args.out}
    if args.out:
        save_model(result.model, args.out, extra_arrays={"task_table": task.table}, **params)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{'reached 100%' if result.reached else 'did not reach 100%'} on all {answers.size:,} "
              f"{'chain steps' if args.cot else 'facts'} "
              f"after {result.steps} steps ({result.seconds:.1f} s), final loss {result.losses[-1]:.4g}"
              + (f"; model written to {args.out}" if args.out else ""))
    return 0


def cmd_sweep_threshold(args) -> int:
    from georecall.verify.sweep import TrialSettings, fit_thresholds, summary_table, sweep
    settings = TrialSettings(steps=args.steps, lr=args.lr, width_factor=args.width_factor, k=args.k, cot=args.cot,
                             attention=args.attention, heads=args.heads)
    records = sweep(args.out, args.N, args.R, args.modes, args.seeds, settings=settings, d_min=args.d_min,
                    d_max=args.d_max, resolution=args.resolution, workers=args.workers,
                    progress=not (args.quiet or args.json))
    fits = fit_thresholds(records)
    if args.json:
        print(json.dumps({"version": __version__, "out": args.out, "settings": settings.__dict__,
                          "thresholds": records, "fits": fits}, indent=2))
    else:
        print(summary_table(records))
        for mode, fit in fits.items():
            law = fit["power_law"]
            exponents = ", ".join(f"{k[0]} = {v:.3f}" for k, v in law.items() if k != "log_a") or "—"
            print(f"{mode}: d* ≈ c·R·ln N with c = {fit['c']:.3f} (per seed {fit['c_seed_mean']:.3f} ± "
                  f"{fit['c_seed_std']:.3f}, {fit['points']} points, {fit['non_monotone']} non-monotone, "
                  f"{fit['unreached']} never reached); power law d* ∝ N^p·R^q: {exponents}")
        print(f"records in {args.out}")
    return 0


def _load_model_and_task(path: str, task_path: str | None):
    from georecall.constructions.model import load_model
    from georecall.theory.tasks import Task
    model, header = load_model(path)
    if task_path is not None:
        try:
            table = np.load(task_path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read the task table {task_path!r}: {exc}") from None
        if hasattr(table, "files"):
            if "task_table" not in table.files:
                raise InputError(f"{task_path!r} has no array 'task_table'")
            table = table["task_table"]
    elif "task_table" in header.get("extra_arrays", {}):
        table = header["extra_arrays"]["task_table"]
    else:
        raise InputError(f"{path!r} stores no task table: pass --task TABLE.npy (R × N bijections)")
    return model, Task.from_table(table), header


def _print_probe(doc: dict) -> None:
    if "readout" in doc:
        r = doc["readout"]
        print(f"superposition readout (held-out {r['test_subjects']} subjects): encoding R² {r['encoding_r2']:.4f}, "
              f"decoding R² {r['decoding_r2_mean']:.4f}, per-relation probe accuracy {r['probe_accuracy_mean']:.4f}")
    if "intervention" in doc:
        r = doc["intervention"]
        print(f"causal intervention ({r['interventions']:,}): follows {r['follows']:.4f}, other relations "
              f"unchanged {r['others_unchanged']:.4f}")
    if "selectivity" in doc:
        r = doc["selectivity"]
        print(f"unit selectivity: {r['active_units']}/{r['units']} active, {100 * r['selective_fraction']:.1f}% "
              f"relation-selective (>= {r['threshold']}), mean {r['mean_selectivity']:.3f} "
              f"(chance {r['chance_selectivity']:.3f})")
    if "transfer" in doc:
        r = doc["transfer"]
        print(f"freeze and swap on new bijections: closed form {100 * r['closed_form_accuracy']:.2f}%, "
              f"embeddings fitted ({r['fitted_steps']} steps) {100 * r['fitted_accuracy']:.2f}% "
              f"(chance {100 * r['chance']:.2f}%)")


def cmd_probe(args) -> int:
    from georecall.verify import probes
    model, task, _ = _load_model_and_task(args.model, args.task)
    doc = {"version": __version__, "model": args.model, "seed": args.seed, "N": task.N, "R": task.R,
           **probes.probe_all(model, task, holdout=args.holdout, subjects=args.subjects, transfer_steps=None,
                              rng=np.random.default_rng(args.seed))}
    print(json.dumps(doc, indent=2)) if args.json else _print_probe(doc)
    return 0


def cmd_transfer(args) -> int:
    from georecall.verify import probes
    from georecall.verify.sweep import _append
    model, task, _ = _load_model_and_task(args.model, args.task)
    probes.require_fit(model, task)
    rng = np.random.default_rng(args.seed)
    maps = probes.superposition_readout(model, task, holdout=0.0, rng=rng)["encoding_maps"]
    result = probes.freeze_and_swap(model, task, maps, steps=args.steps, lr=args.lr, rng=rng)
    doc = {"version": __version__, "model": args.model, "seed": args.seed, "N": task.N, "R": task.R,
           "steps": args.steps, "lr": args.lr, "transfer": result}
    if args.append:
        _append(args.append, {"kind": "transfer", "label": args.label or os.path.basename(args.model),
                              **{k: v for k, v in doc.items() if k != "transfer"}, **result})
    print(json.dumps(doc, indent=2)) if args.json else _print_probe(doc)
    return 0


def cmd_probe_hidden(args) -> int:
    from georecall.verify import probes
    data = probes.load_hidden_states(args.states)
    result = probes.linear_relational_encoding(data["states"], data["attributes"], holdout=args.holdout,
                                               rng=np.random.default_rng(args.seed))
    doc = {"version": __version__, "states": args.states, "seed": args.seed, **result}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{result['n']} states of width {result['width']}, {result['relations']} relations; held-out "
              f"{args.holdout:.0%}")
        for p in result["per_relation"]:
            print(f"  relation {p['relation']}: {p['attributes']} attributes, linear probe accuracy "
                  f"{p['probe_accuracy']:.3f} (majority baseline {p['majority_baseline']:.3f})")
        print(f"superposition R² (states from the R one-hot attributes): {result['superposition_r2']:.4f}")
    return 0


def cmd_figures(args) -> int:
    from georecall.verify.figures import PLOT_HINT, make_figures
    from georecall.verify.sweep import read_records
    if args.source and not os.path.exists(args.source):
        raise InputError(f"no results file {args.source!r}")
    records = read_records(args.source) if args.source else []
    try:
        paths = make_figures(records, args.out, seed=args.seed)
    except ImportError:
        print(PLOT_HINT, file=sys.stderr)
        return 2
    print(json.dumps({"version": __version__, "files": paths}, indent=2) if args.json else "\n".join(paths))
    return 0


def cmd_demo(args) -> int:
    from georecall.verify.demo import run_demo
    run_demo(seed=args.seed)
    return 0


def _whole(minimum: int):
    """An argparse type: a whole number >= minimum."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {minimum}, got {value}")
        return value
    return parse


_positive_int, _seed = _whole(1), _whole(0)


def _add_sizes(p: argparse.ArgumentParser, N, R) -> None:
    """--N and --R in the paper's letters; lists (several values) when the defaults are lists."""
    many = isinstance(N, list)
    extra = {"nargs": "+"} if many else {}
    p.add_argument("--N", type=_positive_int, default=N, **extra,
                   help=f"number of entities N{' (one or more)' if many else ''} (default {N})")
    p.add_argument("--R", type=_positive_int, default=R, **extra,
                   help=f"number of relations R{' (one or more)' if many else ''} (default {R})")


def _choices(hops: str) -> str:
    return ", ".join(f"{spec.name} ({spec.id})" for spec in registry.specs(hops))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="georecall", description="Executable, exactly checked statements of 'Geometric "
                     "Factual Recall in Transformers' (arXiv 2605.12426).")
    parser.add_argument("--version", action="version", version=f"georecall {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    common = _Parser(add_help=False)
    common.add_argument("--seed", type=_seed, default=0, help="seed of every random choice (default 0)")
    common.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    common.add_argument("--quiet", action="store_true", help="no progress output on stderr")

    p = sub.add_parser("verify", parents=[common], help="check every claim at default sizes (the main job)",
                       description="Run every construction check at its default size and print a PASS/FAIL "
                       "table with promised vs achieved sizes and margins. Exit 1 on any failure.")
    p.set_defaults(func=cmd_verify)

    check = sub.add_parser("check", help="check one construction exhaustively")
    check_sub = check.add_subparsers(dest="target", required=True, parser_class=_Parser)
    p = check_sub.add_parser("single-hop", parents=[common],
                             help="G1 or A1 on R random bijections of [N]: all N·R queries",
                             description="Build a single-hop construction on R random bijections of [N] and "
                             "check all N·R queries (s, r) -> π_r(s): argmax and logit margin of each.")
    _add_sizes(p, N=1024, R=8)
    p.add_argument("--construction", default="geometric", metavar="NAME",
                   help="a registered single-hop construction: " + _choices("single")
                   + "; or MODULE:ATTR / FILE.py:ATTR naming your own ConstructionSpec")
    p.add_argument("--codes", choices=("binary", "sign", "gaussian"), default="binary",
                   help="attribute codes a_i: binary (bits of i), random sign, normalised Gaussian")
    p.add_argument("--D", type=_positive_int, default=None,
                   help="code length D (default: ceil(log2 N) for binary, 2 ln(N²/2δ)/t² with t=1/2, "
                   "δ=1e-3 for random codes)")
    p.add_argument("--integer", action="store_true",
                   help="±1 codes and integer constants; prove every activation and logit is an exact integer")
    p.add_argument("--gate", type=float, default=None, help="gate constant G (G1; default 2·c1·max|a|/c2)")
    p.add_argument("--beta", type=float, default=None,
                   help="softmax inverse temperature β (constructions with softmax heads only; G1 and A1 have "
                   "none and refuse it)")
    p.add_argument("--lam", type=float, default=1.0, help="read-out scale λ (default 1)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="working precision of the float mode (integer mode always uses float64)")
    p.add_argument("--bits", type=_whole(2), default=None,
                   help="quantize every weight tensor to b bits (uniform symmetric) before checking")
    p.add_argument("--save", default=None, help="also write the built model (and its task) to this .npz")
    p.add_argument("--attributes", choices=("shared", "disjoint"), default="shared",
                   help="shared: every relation maps into [N]; disjoint: relation r has its own N attributes "
                   "(answer vocabulary N·R)")
    p.add_argument("--symmetric", action="store_true",
                   help="relations are random perfect matchings (involutions; N must be even)")
    p.set_defaults(func=cmd_check_single_hop)

    p = check_sub.add_parser("multi-hop", parents=[common],
                             help="G2, A2(a), A2(b) or C1 on k-hop queries: all N·R^k of them",
                             description="Build a k-hop construction and check all N·R^k queries "
                             "⟨r_k, …, r_1, s⟩ -> π_{r_k}(…π_{r_1}(s)). For cot: greedy decoding of every chain "
                             "and, separately, every step under teacher forcing.")
    p.add_argument("--construction", default="path-blocks", metavar="NAME",
                   help="a registered k-hop construction: " + _choices("multi")
                   + "; or MODULE:ATTR / FILE.py:ATTR naming your own ConstructionSpec")
    p.add_argument("--gate", type=float, default=None, help="gate constant G (default: twice its bound)")
    _add_sizes(p, N=256, R=3)
    p.add_argument("--k", type=_positive_int, default=2, help="number of hops k (default 2)")
    p.add_argument("--codes", choices=("binary", "sign", "gaussian"), default="binary", help="attribute codes")
    p.add_argument("--D", type=_positive_int, default=None, help="code length D (default as for single-hop)")
    p.add_argument("--attention", choices=("softmax", "hard"), default="softmax",
                   help="softmax (default; β from the leakage inequality) or hard (an idealization: β -> ∞)")
    p.add_argument("--beta", type=float, default=None,
                   help="inverse temperature β of the positional heads (default: the smallest β whose leakage "
                   "leaves half the margin)")
    p.add_argument("--max-gib", type=float, default=4.0,
                   help="refuse (exit 2) when weights or queries would need more memory than this (default 4)")
    p.set_defaults(func=cmd_check_multi_hop)

    p = sub.add_parser("tradeoff", parents=[common], help="the capacity-depth tradeoff as a table",
                       description="For k = 1..k_max, the d, m and parameter counts that G2, A2(a), A2(b) and C1 "
                       "promise (binary codes, D = ceil(log2 N)).")
    _add_sizes(p, N=4096, R=16)
    p.add_argument("--k-max", type=_positive_int, default=4, help="largest number of hops (default 4)")
    p.set_defaults(func=cmd_tradeoff)

    p = sub.add_parser("bounds", parents=[common], help="lower bounds beside the constructions' sizes",
                       description="Information-theoretic lower bounds on d (total information, per entity, "
                       "capacity-depth tradeoff, chain-of-thought), evaluated exactly, beside the d of each "
                       "construction and the gap ratio d / d_min. Every row carries the formula, its "
                       "parameters and the package version.")
    _add_sizes(p, N=[4096], R=[16])
    p.add_argument("--k", type=_positive_int, nargs="+", default=[1, 2, 3], help="hops k (one or more)")
    p.add_argument("--bits", type=float, nargs="+", default=[1.0], help="bits per parameter b (one or more)")
    p.add_argument("--format", choices=("md", "csv", "json", "latex"), default="md", help="output format")
    p.set_defaults(func=cmd_bounds)

    p = sub.add_parser("count", parents=[common], help="enumerate all (N!)^R tasks and count |F_k|, |Trees_k|",
                       description="Exact enumeration over all (N!)^R tasks (small N): distinct k-hop answer "
                       "tables |F_k| and distinct depth-k leaf vectors |Trees_k|, next to the closed forms.")
    _add_sizes(p, N=5, R=3)
    p.add_argument("--k", type=_positive_int, default=2, help="largest k counted (default 2)")
    p.set_defaults(func=cmd_count)

    p = sub.add_parser("precision", parents=[common], help="smallest bits per parameter keeping a check exact",
                       description="Quantize every weight tensor to a b-bit uniform symmetric grid (step "
                       "max|W|/(2^(b-1)-1)) and report the smallest b at which all N·R queries stay exact.")
    p.add_argument("--construction", default="geometric", metavar="NAME",
                   help="without --k a single-hop construction (" + _choices("single") + "); with --k a k-hop "
                   "one (" + _choices("multi") + ")")
    p.add_argument("--k", type=_positive_int, default=None, help="hops: check a k-hop construction")
    p.add_argument("--codes", choices=("binary", "sign", "gaussian"), default="binary")
    _add_sizes(p, N=1024, R=8)
    p.add_argument("--D", type=_positive_int, default=None, help="code length D")
    p.add_argument("--max-bits", type=_whole(2), default=24, help="largest b tried (default 24)")
    p.set_defaults(func=cmd_precision)

    p = sub.add_parser("train", parents=[common], help="train a one-layer model on R random bijections",
                       description="Train the shared Model with the NumPy trainer (hand-written gradients, Adam) "
                       "on all N·R single-hop facts; progress on stderr; optionally write the model to .npz "
                       "(no pickle; the task table is stored beside the weights).")
    _add_sizes(p, N=256, R=4)
    p.add_argument("--d", type=_positive_int, default=32, help="residual width d (default 32)")
    p.add_argument("--m", type=_positive_int, default=None, help="MLP width m (default 4d)")
    p.add_argument("--k", type=_positive_int, default=1, help="hops per query (default 1)")
    p.add_argument("--cot", action="store_true",
                   help="chain-of-thought: train every step of the chain under teacher forcing")
    p.add_argument("--attention", choices=("uniform", "softmax"), default="uniform",
                   help="uniform (default) or softmax; k-hop and CoT queries need softmax to pick a hop")
    p.add_argument("--heads", type=_positive_int, default=1)
    p.add_argument("--mode", choices=("learned", "frozen"), default="learned",
                   help="frozen: entity and relation embeddings stay at their random initialization")
    p.add_argument("--freeze", nargs="*", default=[], choices=("entity_embedding", "relation_embedding",
                   "position_embedding", "unembedding", "attention", "mlp"), help="further groups to freeze")
    p.add_argument("--steps", type=_positive_int, default=2000, help="step budget (stops early at 100%%)")
    p.add_argument("--lr", type=float, default=1e-2, help="learning rate (default 1e-2)")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--batch-size", type=_positive_int, default=None, help="minibatch size (default: full batch)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--log-every", type=_positive_int, default=50, help="progress line every this many steps")
    p.add_argument("--out", default=None, help="write the trained model to this .npz file")
    p.set_defaults(func=cmd_train)

    sweep_parser = sub.add_parser("sweep", help="capacity-threshold sweeps")
    sweep_sub = sweep_parser.add_subparsers(dest="target", required=True, parser_class=_Parser)
    p = sweep_sub.add_parser("threshold", parents=[common],
                             help="smallest d reaching 100%% (learned vs frozen embeddings), resumable JSONL",
                             description="For each (N, R, mode, seed): the smallest d (MLP width m = "
                             "width_factor·d) at which training reaches 100%% within the step budget, by doubling "
                             "then bisection. Results are appended to --out line by line; a rerun skips what is "
                             "done. Ends with a fit d* ≈ c·R·ln N per mode. --seed is ignored: use --seeds.")
    _add_sizes(p, N=[1024], R=[2, 4, 8])
    p.add_argument("--modes", nargs="+", choices=("learned", "frozen"), default=["learned", "frozen"])
    p.add_argument("--seeds", type=_seed, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=_positive_int, default=500, help="step budget per trial (default 500)")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--width-factor", type=_positive_int, default=4, help="m = width_factor·d (default 4)")
    p.add_argument("--k", type=_positive_int, default=1, help="hops per query (default 1)")
    p.add_argument("--cot", action="store_true", help="chain-of-thought under teacher forcing")
    p.add_argument("--attention", choices=("uniform", "softmax"), default="uniform")
    p.add_argument("--heads", type=_positive_int, default=1)
    p.add_argument("--d-min", type=_positive_int, default=4)
    p.add_argument("--d-max", type=_positive_int, default=1024)
    p.add_argument("--resolution", type=_positive_int, default=2, help="stop bisecting at this gap in d")
    p.add_argument("--workers", type=_positive_int, default=1, help="parallel processes (default 1)")
    p.add_argument("--out", default="thresholds.jsonl", help="JSONL results file (default thresholds.jsonl)")
    p.set_defaults(func=cmd_sweep_threshold)

    p = sub.add_parser("probe", parents=[common], help="mechanism probes of a saved model",
                       description="Superposition readout (held-out R²), per-relation linear probes, causal "
                       "interventions and unit selectivity of a model saved by 'train' or 'check --save'.")
    p.add_argument("model", help="MODEL.npz")
    p.add_argument("--task", default=None, help="task table (R × N .npy) if the model file has none")
    p.add_argument("--holdout", type=float, default=0.25, help="share of subjects held out of the fits")
    p.add_argument("--subjects", type=_positive_int, default=256, help="subjects intervened on (default 256)")
    p.set_defaults(func=cmd_probe)

    p = sub.add_parser("transfer", parents=[common], help="freeze-and-swap transfer to new bijections",
                       description="Keep the MLP, attention, relation embeddings and U; build subject embeddings "
                       "for brand-new bijections (closed form from the fitted maps, and by fitting only the "
                       "embeddings); report accuracy on every new query.")
    p.add_argument("model", help="MODEL.npz")
    p.add_argument("--task", default=None, help="task table (R × N .npy) if the model file has none")
    p.add_argument("--steps", type=_positive_int, default=200, help="steps fitting only the embeddings")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--append", default=None, help="append a transfer record to this JSONL (for figures)")
    p.add_argument("--label", default=None, help="label of the record in the transfer figure")
    p.set_defaults(func=cmd_transfer)

    p = sub.add_parser("probe-hidden", parents=[common], help="linear relational encoding of supplied states",
                       description="Hidden states of a real LM, supplied as STATES.npz with arrays 'states' "
                       "(n × width, float) and 'attributes' (n × R, integer ids): held-out linear probe "
                       "accuracy per relation and the R² of a superposition of per-relation attribute vectors.")
    p.add_argument("states", help="STATES.npz (loaded with allow_pickle=False)")
    p.add_argument("--holdout", type=float, default=0.25)
    p.set_defaults(func=cmd_probe_hidden)

    p = sub.add_parser("figures", parents=[common], help="draw the figures (needs the plot extra)",
                       description="Capacity thresholds, the construction-vs-bound tradeoff, margin histograms "
                       "and transfer accuracies, as PNG and SVG.")
    p.add_argument("--from", dest="source", default=None, help="RESULTS.jsonl (sweep and transfer records)")
    p.add_argument("--out", default="figures", help="output folder (default figures/)")
    p.set_defaults(func=cmd_figures)

    p = sub.add_parser("demo", parents=[common], help="a walk through G1 at N=8, R=2, then a trained model")
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 pass, 1 a check failed, 2 bad input or parameters outside a theorem
    (one line on stderr), 3 an internal error (a bug: its traceback is shown), 130 interrupted."""
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        print(f"{exc}", file=sys.stderr)
        return 2
    except InputError as exc:
        print(f"georecall: error: {exc}", file=sys.stderr)
        return 2
    except FloatingPointError as exc:
        print(f"georecall: training diverged: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ngeorecall: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug, never disguised as bad input
        import traceback
        traceback.print_exc()
        print(f"georecall {__version__}: internal error (a bug; please report it with the traceback above)",
              file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
