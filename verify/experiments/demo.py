"""``georecall demo``: G1 at N = 8, R = 2 in the terminal, then a trained model on the same facts.

Everything printed is computed by the library (the same builder, forward pass and probes the checks use);
nothing here is a hard-coded illustration.
"""

from __future__ import annotations

import numpy as np

from georecall.constructions.layout import Layout
from georecall.constructions.model import forward
from georecall.constructions.single_hop import build_g1, single_hop_queries
from georecall.theory import seeds
from georecall.theory.tasks import task_for_seed
from georecall.verify.checking.check import check_queries

RELATION_NAMES = ("mother", "wife")


def _code(v) -> str:
    return "[" + " ".join(f"{int(x):+d}" for x in v) + "]"


def run_demo(seed: int = 0, out=print) -> dict:
    """Print the walk-through; returns the numbers it printed (for tests)."""
    N, R = 8, 2
    task = task_for_seed(N, R, seed)
    out(f"== The task: R = {R} bijections of N = {N} entities (seed {seed})")
    for r in range(R):
        out(f"  {RELATION_NAMES[r]:>6}: " + "  ".join(f"{s}->{task.table[r, s]}" for s in range(N)))

    built = build_g1(task, "binary", integer=True)
    model, codes = built.model, built.codes
    layout = Layout.from_dict(
        model.meta["layout"]
    )  # the residual blocks by name, as the builder allocated them
    D = codes.D
    out(
        f"\n== G1 (Theorem 4.1) with binary ±1 codes, D = ⌈log2 N⌉ = {D}: d = R·D + R + D = {model.d}, "
        f"m = 2·R·D = {model.mlp_width}"
    )
    out("  attribute codes a_j (entry k is -1 where bit k of j is set):")
    for j in range(N):
        out(f"    a_{j} = {_code(codes.vectors[j])}")
    out("  subject embeddings: block B_r holds the code of the r-th attribute (block superposition)")
    for s in range(N):
        blocks = "  ".join(
            f"B_{RELATION_NAMES[r]}={_code(model.entity_embedding[s, layout['blocks'][r]])}" for r in range(R)
        )
        out(f"    e_{s}: {blocks}   (= codes of {task.table[0, s]}, {task.table[1, s]})")

    s, r = 5 % N, 1
    tokens = np.array([[N + r, s]])
    logits, trace = forward(model, tokens, trace=True)
    y = trace.residual[1][0, -1]
    gates = y[layout["gates"]]
    gate, c1, c2 = built.constants["gate"], built.constants["c1"], built.constants["c2"]
    out(
        f"\n== Query: the {RELATION_NAMES[r]} of {s}? tokens ⟨{RELATION_NAMES[r]}, {s}⟩; "
        f"answer π_{RELATION_NAMES[r]}({s}) = "
        f"{task.table[r, s]}"
    )
    out(
        f"  after uniform attention the MLP sees y = {c1:g}·e_s + {c2:g}·q_r; gate coordinates g = "
        f"{gates.astype(int).tolist()} (G = {gate:g}: the asked relation's gate is open)"
    )
    hidden = trace.hidden[0][0, -1].reshape(R, D, 2)
    for rr in range(R):
        state = "open" if gates[rr] > 0 else "shut"
        out(
            f"  units of {RELATION_NAMES[rr]:>6} (gate {state}): max activation {hidden[rr].max():g}"
            + (
                "  -> pass σ·c1·a, ReLU(t) − ReLU(−t) = t"
                if gates[rr] > 0
                else f"  -> every pre-activation <= c1·max|a| − c2·G = {c1 - c2 * gate:g} < 0"
            )
        )
    out(f"  logits λ·c1·<a_j, a_answer>: {logits[0].astype(int).tolist()}")
    top = np.sort(logits[0])
    out(
        f"  argmax = {int(logits[0].argmax())}, margin = {top[-1] - top[-2]:g} (promised >= "
        f"{built.promise.margin:g})"
    )
    all_tokens, answers = single_hop_queries(task)
    exhaustive = check_queries(model, all_tokens, answers, integer=True)
    out(
        f"  every one of the N·R = {N * R} queries: {exhaustive.n_correct}/{exhaustive.n_queries} right, "
        f"min margin {exhaustive.min_margin:g}, in exact integer arithmetic"
    )

    from georecall.verify.experiments.probes import superposition_readout, unit_selectivity
    from georecall.verify.training.train import init_model, train

    d = model.d
    out(f"\n== A trained model on the same facts: d = {d}, m = {4 * d}, uniform attention, Adam, full batch")
    trained = train(
        init_model(N, R, d, 4 * d, rng=seeds.rng(seed, "init")),
        all_tokens,
        answers,
        steps=2000,
        lr=1e-2,
        rng=seeds.rng(seed, "batches"),
    )
    logits_t = forward(trained.model, tokens)[0]
    top_t = np.sort(logits_t)
    result = check_queries(trained.model, all_tokens, answers)
    readout = superposition_readout(trained.model, task, holdout=0.0, rng=seeds.rng(seed, "probes"))
    selectivity = unit_selectivity(trained.model, task)
    out(
        f"  trained for {trained.steps} steps: {result.n_correct}/{result.n_queries} right, min margin "
        f"{result.min_margin:.3g}"
    )
    out(f"  same query: argmax = {int(logits_t.argmax())}, margin = {top_t[-1] - top_t[-2]:.3g}")
    out(
        f"  e_s as a superposition of its attribute vectors: in-sample R² = {readout['encoding_r2']:.3f} "
        f"(with N = {N} subjects this fit has many parameters; see `georecall probe` at larger N)"
    )
    out(
        f"  hidden units relation-selective: {100 * selectivity['selective_fraction']:.0f}% of "
        f"{selectivity['active_units']} active (G1: 100%)"
    )
    return {"exact": exhaustive.exact, "margin": float(top[-1] - top[-2]), "trained_reached": trained.reached}
