"""``georecall demo``: G1 on R bijections of N symbols, then a model trained on the same facts.

Everything printed is computed by the library (the same builder, forward pass, checker and probes the checks
use); nothing here is a hard-coded illustration. The relations are named ``cipher0``, ``cipher1``, …: a
substitution cipher maps every symbol to a symbol and no two to the same one, which is what a bijection is
(a symbol may encode to itself).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from georecall.constructions.forward import forward
from georecall.constructions.layout import Layout
from georecall.constructions.single_hop import build_g1, single_hop_queries
from georecall.errors import InputError
from georecall.experiments.construction_figures import align_embeddings
from georecall.experiments.probes import superposition_readout, unit_selectivity
from georecall.theory import seeds
from georecall.theory.tasks import task_for_seed
from georecall.training.parameters import init_model
from georecall.training.train import train
from georecall.verify.checking.check import check_queries

__all__ = ["LIMITS", "SHOW_WEIGHTS_MAX_N", "alignment_size", "check_show_weights", "check_size",
           "format_matrix", "relation_names", "run_demo", "show_weights", "trained_beside_g1",
           "train_like_demo"]

LIMITS = {"N": 64, "R": 8}  # every code and every subject embedding is printed, and a model is trained
SHOW_WEIGHTS_MAX_N = 16  # --show-weights prints E, Q, W1, b1, W2 and U in full: readable up to N = 16


def check_size(N: int, R: int) -> None:
    """Refuse sizes outside :data:`LIMITS`.

    Parameters
    ----------
    N : int
        Number of symbols (entities): 2 <= N <= ``LIMITS["N"]`` (64).
    R : int
        Number of relations: 1 <= R <= ``LIMITS["R"]`` (8).

    Raises
    ------
    InputError
        When N or R is outside the demo's limits.
    """
    if not (2 <= N <= LIMITS["N"] and 1 <= R <= LIMITS["R"]):
        raise InputError(f"demo prints every code and embedding: it takes 2 <= N <= {LIMITS['N']} and "
                         f"1 <= R <= {LIMITS['R']}, got N = {N}, R = {R}")


def relation_names(R: int) -> list[str]:
    """The demo's names of the R relations: ``cipher0`` … (labels for bijections of the symbols).

    Parameters
    ----------
    R : int
        Number of relations.

    Returns
    -------
    list of str
        ``["cipher0", …, f"cipher{R - 1}"]`` (empty for R <= 0).
    """
    return [f"cipher{r}" for r in range(R)]


def check_show_weights(N: int) -> None:
    """Refuse ``--show-weights`` above :data:`SHOW_WEIGHTS_MAX_N`.

    Parameters
    ----------
    N : int
        Number of symbols.

    Raises
    ------
    InputError
        When N > 16 (the matrices would not fit a terminal; ``demo --figures`` draws them at any size).
    """
    if N > SHOW_WEIGHTS_MAX_N:
        raise InputError(f"--show-weights prints every matrix in full and takes N <= {SHOW_WEIGHTS_MAX_N}, "
                         f"got N = {N}: use a smaller --N, or --figures DIR to draw the matrices at this "
                         "size")


def _spans(groups: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"{a}" + (f"-{b - 1}" if b - a > 1 else "") + f" {label}" for label, a, b in groups)


def format_matrix(matrix, row_labels: list[str], *, name: str, columns: str) -> list[str]:
    """A matrix as text: a header of column indices, one labelled line per row, every entry an integer
    (``+1``, ``-4``, ``0``) or, for a non-integer matrix, with two decimals.

    Parameters
    ----------
    matrix : array_like
        ``(rows, columns)``.
    row_labels : list of str
        One label per row.
    name : str
        The matrix's name and shape line (printed first).
    columns : str
        What the columns are (printed under the name).

    Returns
    -------
    list of str
        The lines.
    """
    M = np.asarray(matrix, dtype=float)
    integral = bool(np.all(M == np.round(M)))
    cells = [[f"{int(v):+d}" if integral and v != 0 else ("0" if integral else f"{v:+.2f}") for v in row]
             for row in M]
    width = max([len(c) for row in cells for c in row] + [len(str(M.shape[1] - 1))]) + 1
    label_width = max(len(label) for label in row_labels)
    lines = [name, f"  columns: {columns}",
             "  " + " " * label_width + " " + "".join(f"{j:>{width}}" for j in range(M.shape[1]))]
    for label, row in zip(row_labels, cells):
        lines.append(f"  {label:>{label_width}} " + "".join(f"{c:>{width}}" for c in row))
    return lines


def show_weights(model, task, codes, names: list[str], out: Callable[[str], None] = print) -> None:
    """Print G1's matrices as numbers: E, Q, W1, b1, W2, U (rows and columns named as the demo names them).

    Parameters
    ----------
    model : Model
        G1 built on ``task`` (its ``meta["layout"]``).
    task : Task
        The task.
    codes : Codes
        Its codebook (for D).
    names : list of str
        The relations' names.
    out : callable
        Receives each printed line.

    Raises
    ------
    InputError
        N above :data:`SHOW_WEIGHTS_MAX_N`.
    """
    N, R, D = task.N, task.R, codes.D
    check_show_weights(N)
    layout = Layout.from_dict(model.meta["layout"])
    blocks, gates, outs = np.asarray(layout["blocks"]), np.asarray(layout["gates"]), np.asarray(layout["out"])
    coordinates = [(f"B_{names[r]}", int(blocks[r].min()), int(blocks[r].max()) + 1) for r in range(R)]
    coordinates += [(f"g_{names[r]}", int(gates[r]), int(gates[r]) + 1) for r in range(R)]
    coordinates += [("O", int(outs.min()), int(outs.max()) + 1)]
    coordinate_names = [""] * model.d
    for label, a, b in coordinates:
        for c in range(a, b):
            coordinate_names[c] = label if b - a == 1 else f"{label}[{c - a}]"
    unit_names = [f"{names[r]} i{i}{'+' if sigma == 0 else '-'}" for r in range(R) for i in range(D)
                  for sigma in range(2)]
    units = ", ".join(f"{r * 2 * D}-{(r + 1) * 2 * D - 1} {names[r]}" for r in range(R))
    residual = _spans(coordinates)
    mlp = model.layers[0].mlp
    out("\n== The weights as numbers (x @ W: a row vector times the matrix; rows and columns named as above)")
    for line in (format_matrix(model.entity_embedding, [f"e_{s}" for s in range(N)],
                               name=f"E ({N} × {model.d}): row s is e_s", columns=f"residual {residual}")
                 + format_matrix(model.relation_embedding, [f"q_{n}" for n in names],
                                 name=f"Q ({R} × {model.d}): row r is q_r", columns=f"residual {residual}")
                 + format_matrix(mlp.W1, coordinate_names, name=f"W1 ({model.d} × {mlp.width}): residual "
                                 f"coordinate -> hidden unit (r, i, σ)", columns=f"hidden units of {units}; "
                                 "within a relation (i, σ) = " + " ".join(
                                     f"({i},{'+' if sg == 0 else '−'})" for i in range(D) for sg in range(2)))
                 + format_matrix(mlp.b1[None, :], ["b1"], name=f"b1 ({mlp.width}): −c2·G on every unit",
                                 columns=f"hidden units of {units}")
                 + format_matrix(mlp.W2, unit_names, name=f"W2 ({mlp.width} × {model.d}): hidden unit -> "
                                 "residual coordinate", columns=f"residual {residual}")
                 + format_matrix(model.full_unembedding(), [f"u_{j}" for j in range(task.n_answers)],
                                 name=f"U ({task.n_answers} × {model.d}): row j scores answer j",
                                 columns=f"residual {residual}")):
        out(line)


def train_like_demo(task, d: int, seed: int = 0):
    """The demo's trained model: d = ``d``, m = 4·d, uniform attention, Adam (lr 1e-2), full batch, at most
    2000 steps (it stops once every query is right), on every query of ``task``.

    Parameters
    ----------
    task : Task
        The facts.
    d : int
        Residual width (the demo uses G1's d).
    seed : int
        Run seed: initialisation from its ``init`` stream, batches from ``batches``.

    Returns
    -------
    TrainResult
    """
    tokens, answers = single_hop_queries(task)
    return train(init_model(task.N, task.R, d, 4 * d, rng=seeds.rng(seed, "init")), tokens, answers,
                 steps=2000, lr=1e-2, rng=seeds.rng(seed, "batches"))


def alignment_size(N: int, R: int) -> int:
    """The smallest N' >= N (a power of two, at most 4096) at which the alignment of a trained E onto G1's
    (:func:`~georecall.experiments.construction_figures.align_embeddings`: d + 1 parameters per
    coordinate, fitted on three quarters of the subjects) has fewer parameters than fit subjects, so it cannot
    interpolate: below it, any E aligns onto G1's exactly and the picture would say nothing.

    Parameters
    ----------
    N, R : int

    Returns
    -------
    int
    """
    n = max(N, 2)
    while n < 4096:
        D = int(np.ceil(np.log2(n)))
        if 3 * n // 4 > R * D + R + D + 1:
            break
        n *= 2
    return n


def trained_beside_g1(N: int, R: int, seed: int = 0) -> dict:
    """G1 and a model trained as the demo trains it (:func:`train_like_demo`) at the size where their
    alignment is honest (:func:`alignment_size`), the subjects it is fitted on (three quarters, drawn from the
    seed's ``probes`` stream), and its held-out R².

    Parameters
    ----------
    N, R : int
        The demo's sizes (the figure's N is ``alignment_size(N, R)``).
    seed : int

    Returns
    -------
    dict
        ``N``, ``task``, ``g1``, ``trained`` (Models), ``fit`` (subject ids), ``r2_held_out``, ``p``
        and ``n``.
    """
    size = alignment_size(N, R)
    task = task_for_seed(size, R, seed)
    g1 = build_g1(task, "binary", integer=True).model
    trained = train_like_demo(task, g1.d, seed).model
    fit = np.sort(seeds.rng(seed, "probes").permutation(size)[: 3 * size // 4])
    alignment = align_embeddings(np.asarray(trained.entity_embedding)[:size], g1.entity_embedding, fit=fit)
    return {"N": size, "task": task, "g1": g1, "trained": trained, "fit": fit,
            "r2_held_out": alignment["r2_held_out"], "p": alignment["p"], "n": alignment["n"]}


def _code(v) -> str:
    return "[" + " ".join(f"{int(x):+d}" for x in v) + "]"


def _show_task(task, names: list[str], seed: int, out: Callable[[str], None]) -> None:
    """Print the task: each relation's bijection of the symbols."""
    N, R = task.N, task.R
    width = max(len(n) for n in names)
    out(f"== The task: R = {R} bijections π_r of the N = {N} symbols 0..{N - 1} (seed {seed})")
    out("  each relation is a substitution cipher: every symbol to one symbol, no two to the same one (a "
        "symbol may encode to itself)")
    for r in range(R):
        out(f"  {names[r]:>{width}}: " + "  ".join(f"{s}->{task.table[r, s]}" for s in range(N)))


def _show_g1(built, task, names: list[str], out: Callable[[str], None]) -> None:
    """Print G1's sizes, its attribute codes and its subject embeddings, block by block."""
    N, R = task.N, task.R
    model, codes = built.model, built.codes
    layout = Layout.from_dict(model.meta["layout"])  # the residual blocks by name, as the builder made them
    D = codes.D
    out(f"\n== G1 (Theorem 4.1) with binary ±1 codes, D = ⌈log2 N⌉ = {D}: d = R·D + R + D = {model.d}, "
        f"m = 2·R·D = {model.mlp_width}")
    out(f"  residual coordinates: a block B_r of D = {D} per relation, one gate coordinate g_r per relation, "
        f"an output block O of D")
    out("  attribute codes a_j (entry i is -1 where bit i of j is set):")
    for j in range(N):
        out(f"    a_{j} = {_code(codes.vectors[j])}")
    out("  subject embeddings: block B_r of e_s holds the code of π_r(s) (block superposition)")
    for s in range(N):
        blocks = "  ".join(f"B_{names[r]}={_code(model.entity_embedding[s, layout['blocks'][r]])}"
                           for r in range(R))
        attrs = ", ".join(str(task.table[r, s]) for r in range(R))
        out(f"    e_{s}: {blocks}   (= codes of {attrs})")


def _show_constants(built, out: Callable[[str], None]) -> None:
    """Print G1's constants (gain, c1, c2, gate, σ, λ, μ) and the margin they promise."""
    codes, consts = built.codes, built.constants
    D = codes.D
    gate, c1, c2, lam, gain = consts["gate"], consts["c1"], consts["c2"], consts["lambda"], consts["gain"]
    norm2 = int(round(float(codes.vectors[0] @ codes.vectors[0])))
    out("\n== The constants (docs/theory.md, sections \"Attention constants\" and \"G1\")")
    out(f"  g = {gain:g}: attention gain. One uniform head with W_V = I, W_O = g·I: on ⟨r, s⟩ the last "
        f"position receives e_s + g·(q_r + e_s)/2")
    out(f"  c1 = 1 + g/2 = {c1:g}, c2 = g/2 = {c2:g}: so the MLP sees y = c1·e_s + c2·q_r")
    out(f"  G = {gate:g}: gate constant. The relation embedding is q_r = G·1_(g_r); the gate shuts the other "
        f"relations once c2·G > c1·max|a| = {c1 * codes.max_abs:g}")
    out("  σ = ±1: the sign of a hidden unit. Unit (r, i, σ) computes ReLU(σ·y_(B_r, i) + y_(g_r) − c2·G); "
        "the pair σ = ±1 copies y_(B_r, i), because ReLU(t) − ReLU(−t) = t")
    out(f"  λ = {lam:g}: read-out scale. Row j of the read-out is λ·a_j on block O, so "
        f"logit_j = λ·<a_j, output>")
    mu = 1 - 2 / D if D > 1 else -1.0
    out(f"  μ = max_(i≠j) <a_i, a_j>/|a|² = {mu:.4g}: the codes' coherence (binary codes: 1 − 2/D); "
        f"|a|² = {norm2}")
    out(f"  promised margin λ·c1·|a|²(1 − μ) = {built.promise.margin:g}")


def _show_query(built, task, names: list[str], tokens: np.ndarray, out: Callable[[str], None]) -> float:
    """Print one query through G1 (the gates, each relation's hidden units, the logits); return its margin."""
    R = task.R
    model, codes, consts = built.model, built.codes, built.constants
    layout = Layout.from_dict(model.meta["layout"])
    gate, c1, c2 = consts["gate"], consts["c1"], consts["c2"]
    width = max(len(n) for n in names)
    r, s = int(tokens[0, 0]) - task.N, int(tokens[0, 1])
    logits, trace = forward(model, tokens, trace=True)
    y = trace.residual[1][0, -1]
    gates = y[layout["gates"]]
    answer = int(task.table[r, s])
    out(f"\n== Query: what does {names[r]} turn {s} into? tokens ⟨{names[r]}, {s}⟩; answer "
        f"π_{names[r]}({s}) = {answer}")
    out(f"  after uniform attention the MLP sees y = {c1:g}·e_s + {c2:g}·q_r; gate coordinates y_g = "
        f"{gates.astype(int).tolist()} (c2·G = {c2 * gate:g} on the asked relation's gate)")
    hidden = trace.hidden[0][0, -1].reshape(R, codes.D, 2)
    for rr in range(R):
        state = "open" if gates[rr] > 0 else "shut"
        detail = ("  -> pass σ·c1·a, ReLU(t) − ReLU(−t) = t" if gates[rr] > 0
                  else f"  -> every pre-activation <= c1·max|a| − c2·G = "
                       f"{c1 * codes.max_abs - c2 * gate:g} < 0")
        out(f"  units of {names[rr]:>{width}} (gate {state}): max activation {hidden[rr].max():g}{detail}")
    out(f"  logits λ·c1·<a_j, a_answer>: {logits[0].astype(int).tolist()}")
    top = np.sort(logits[0])
    out(f"  argmax = {int(logits[0].argmax())}, margin = {top[-1] - top[-2]:g} (promised >= "
        f"{built.promise.margin:g})")
    return float(top[-1] - top[-2])


def _show_scales(task, built, all_tokens: np.ndarray, answers: np.ndarray, out: Callable[[str], None]):
    """Print G1 at integer and at unit scale; return the unit-scale model's exhaustive check."""
    D = built.codes.D
    unit = build_g1(task, "binary", integer=False)
    unit_result = check_queries(unit.model, all_tokens, answers)
    out("\n== Two scales of one construction")
    out(f"  integer scale (above; `georecall check single-hop --integer`): code entries ±1, |a|² = D = {D}, "
        f"margin λ·c1·|a|²(1 − μ) = 2·λ·c1 = {built.promise.margin:g}; every weight, activation and "
        f"logit is an integer")
    out(f"  unit scale (`georecall check single-hop`, the default): entries ±1/√D, |a|² = 1, margin "
        f"λ·c1·(1 − μ) = 4/D = {unit.promise.margin:.4g} (measured: {unit_result.n_correct}/"
        f"{unit_result.n_queries} right, min margin {unit_result.min_margin:.4g}); the same argmax on every "
        "query, the margin divided by D (0.3333 at N = 4096, D = 12)")
    return unit_result


def _show_trained(task, d: int, seed: int, tokens: np.ndarray, out: Callable[[str], None]):
    """Train a model of G1's width on the same facts and print what it learned; return its result."""
    N = task.N
    all_tokens, answers = single_hop_queries(task)
    out(f"\n== A trained model on the same facts: d = {d}, m = {4 * d}, uniform attention, Adam, full batch")
    trained = train_like_demo(task, d, seed)
    logits_t = forward(trained.model, tokens)[0]
    top_t = np.sort(logits_t)
    result = check_queries(trained.model, all_tokens, answers)
    readout = superposition_readout(trained.model, task, holdout=0.0, rng=seeds.rng(seed, "probes"))
    selectivity = unit_selectivity(trained.model, task)
    out(f"  trained for {trained.steps} steps: {result.n_correct}/{result.n_queries} right, min margin "
        f"{result.min_margin:.3g}")
    out(f"  same query: argmax = {int(logits_t.argmax())}, margin = {top_t[-1] - top_t[-2]:.3g}")
    out(f"  e_s as a superposition of its attribute vectors: in-sample R² = {readout['encoding_r2']:.3f} "
        f"(with N = {N} subjects this fit has many parameters; see `georecall probe` at larger N)")
    out(f"  hidden units relation-selective: {100 * selectivity['selective_fraction']:.0f}% of "
        f"{selectivity['active_units']} active (G1: 100%)")
    return trained


def run_demo(N: int = 8, R: int = 2, *, seed: int = 0, out: Callable[[str], None] = print,
             weights: bool = False) -> dict:
    """Print the walk-through of G1 at (N, R) and of a model trained on the same task.

    Parameters
    ----------
    N : int
        Number of symbols (entities), 2 <= N <= 64.
    R : int
        Number of relations, 1 <= R <= 8.
    seed : int
        Run seed: the task is ``task_for_seed(N, R, seed)``; the trained model draws from its named streams.
    out : callable
        Receives each printed line.
    weights : bool
        Also print E, Q, W1, b1, W2 and U as numbers (:func:`show_weights`; N <= 16).

    Returns
    -------
    dict
        ``exact`` (every query right at integer scale), ``margin`` (the shown query's), ``unit_margin`` (the
        minimum at unit scale), ``trained_reached``, ``query`` (s, r), ``relations`` (their names), and the
        models: ``g1`` (integer scale), ``trained`` and ``task``.

    Raises
    ------
    InputError
        When N or R is outside the demo's limits, or ``weights`` with N > 16.
    """
    check_size(N, R)
    if weights:
        check_show_weights(N)
    names = relation_names(R)
    task = task_for_seed(N, R, seed)
    _show_task(task, names, seed, out)
    built = build_g1(task, "binary", integer=True)
    _show_g1(built, task, names, out)
    _show_constants(built, out)
    if weights:
        show_weights(built.model, task, built.codes, names, out)
    s, r = 5 % N, R - 1
    tokens = np.array([[N + r, s]])
    margin = _show_query(built, task, names, tokens, out)
    all_tokens, answers = single_hop_queries(task)
    exhaustive = check_queries(built.model, all_tokens, answers, integer=True)
    out(f"  every one of the N·R = {N * R} queries: {exhaustive.n_correct}/{exhaustive.n_queries} right, "
        f"min margin {exhaustive.min_margin:g}, in exact integer arithmetic")
    unit_result = _show_scales(task, built, all_tokens, answers, out)
    trained = _show_trained(task, built.model.d, seed, tokens, out)
    return {"exact": exhaustive.exact, "margin": margin,
            "unit_margin": float(unit_result.min_margin), "trained_reached": trained.reached,
            "query": (s, r), "relations": names, "g1": built.model, "trained": trained.model, "task": task}
