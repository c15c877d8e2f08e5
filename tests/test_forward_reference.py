"""THE forward pass (``constructions.forward.forward``) against an independent reference and against its own
outputs captured before it was rewritten to read like the math (issue 19, item 6).

Two oracles:

- **An exact reference written here**: one sequence at a time, one position at a time, the embedding as a
  one-hot row times the table ``[E; Q]``, every attention weight and every product in exact rationals
  (``fractions.Fraction``) of the stored weights; softmax weights from ``mpmath`` at 60 digits, converted
  to exact rationals (their error, below 1e-55, is far under any rounding bound of float32 or float64). No
  ``W_V·W_O`` precomputed, no cumulative sums, no last-position shortcut, no compact read-out. In integer
  mode THE forward pass must equal it exactly; in float mode with ``errors=True`` every computed logit must
  lie within its certified bound of it (the bound's promise, checked on every registry construction).
- **Captured values** (``tests/data/forward_golden.npz``): for every registry construction at small sizes
  (float64, float32 and integer storage, every attention kind a construction offers) and for random models
  (every attention kind, positions, compact and sparse read-outs, mixed dtypes), the file stores the model
  itself, its tokens and its outputs: logits, certified bounds, integer-mode logits, the traces' structure
  and greedy decodes. The test runs THE forward pass on the stored models and compares only what does not
  depend on the machine: integer results, refusals, trace structure and greedy tokens exactly; float logits
  and margins within the sum of both certified bounds (each contains the exact value); the bounds within a
  tolerance derived from the rounding bound (:func:`bound_tolerance`). No comparison is bit for bit on
  floats and none depends on a platform key. A second test checks that the stored models are what the
  registry builds now (the file is stale otherwise).

Regenerate the captured file, from the registry and the forward pass as they are, with one command (the
commit is recorded in it): ``python tests/test_forward_reference.py regenerate``. Do it when a builder or
the arithmetic changes on purpose, after the exact-reference tests above pass. A built-in construction added
to the registry after the file was written is not stale: it is named (a skip that gives this command) and
checked against the exact reference until its values are captured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from georecall.constructions import registry
from georecall.constructions.arithmetic import IntegerModeError, integer_bounds, working_format
from georecall.constructions.decoding import greedy_decode
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Attention, Layer, Model, structure_of, unflatten
from georecall.constructions.rounding import gamma
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries, teacher_forcing

GOLDEN = Path(__file__).parent / "data" / "forward_golden.npz"

# ------------------------------------------------------------------------------------ the exact reference


def _rational(array) -> list:
    """A float array as nested lists of exact rationals (every float is a dyadic rational)."""
    a = np.asarray(array, dtype=np.float64)
    if a.ndim == 0:
        return Fraction(float(a))  # type: ignore[return-value]
    return [_rational(row) for row in a]


def _row_times(x: list, W: list) -> list:
    """The row vector ``x`` times the matrix ``W`` (lists of rationals), by the definition of the product."""
    cols = len(W[0]) if W else 0
    return [sum((x[i] * W[i][j] for i in range(len(x))), Fraction(0)) for j in range(cols)]


def _softmax(scores: list) -> list:
    """Softmax of exact scores, each weight to 60 digits (mpmath), returned as an exact rational."""
    with mpmath.workdps(60):
        top = max(scores)
        ex = [mpmath.exp(mpmath.mpf((s - top).numerator) / (s - top).denominator) for s in scores]
        total = mpmath.fsum(ex)
        weights = []
        for w in ex:
            man, exp = (w / total).man_exp  # w / total = man · 2^exp exactly
            weights.append(Fraction(int(man)) * Fraction(2) ** int(exp))
        return weights


def exact_logits(model: Model, tokens) -> np.ndarray:
    """Logits at every position of every sequence, in exact arithmetic of the stored weights, as an object
    array of Fractions ``(B, T, n_out)``: the model's equations (docs/theory.md, "Model") evaluated as
    written.

    ``x_t = onehot(token_t) @ [E; Q] + P[t]``; per layer ``x_t += Σ_h Σ_{u<=t} a_h(t, u) · x_u @ W_V[h] @
    W_O[h]`` (uniform: ``a = 1/(t+1)``; softmax: ``softmax_u(β·<x_t W_Q, x_u W_K>)``; hard: uniform over the
    maximal scores), then ``x_t += ReLU(x_t @ W1 + b1) @ W2 + b2``; logits ``x_t @ U.T`` with the dense U.
    """
    table = _rational(np.concatenate([model.entity_embedding.astype(np.float64),
                                      model.relation_embedding.astype(np.float64)]))
    P = None if model.position_embedding is None else _rational(model.position_embedding)
    U_t = _rational(model.full_unembedding().T)
    vocab = len(table)
    layers = []
    for layer in model.layers:
        att, mlp = layer.attention, layer.mlp
        layers.append((
            None if att is None else (att.kind, Fraction(float(att.inverse_temperature)),
                                      [(_rational(att.W_V[h]), _rational(att.W_O[h]),
                                        None if att.W_Q is None else _rational(att.W_Q[h]),
                                        None if att.W_K is None else _rational(att.W_K[h]))
                                       for h in range(att.heads)]),
            None if mlp is None else tuple(_rational(a) for a in (mlp.W1, mlp.b1, mlp.W2, mlp.b2)),
        ))
    out = []
    for seq in np.asarray(tokens).tolist():
        xs = []
        for t, token in enumerate(seq):
            onehot = [Fraction(int(v == token)) for v in range(vocab)]
            x = _row_times(onehot, table)
            if P is not None:
                x = [a + b for a, b in zip(x, P[t])]
            xs.append(x)
        for att, mlp in layers:
            if att is not None:
                kind, beta, heads = att
                new = []
                for t in range(len(xs)):
                    y = list(xs[t])
                    for W_V, W_O, W_Q, W_K in heads:
                        if kind == "uniform":
                            weights = [Fraction(1, t + 1)] * (t + 1)
                        else:
                            q = _row_times(xs[t], W_Q)
                            keys = [_row_times(xs[u], W_K) for u in range(t + 1)]
                            scores = [beta * sum((a * b for a, b in zip(q, key)), Fraction(0))
                                      for key in keys]
                            if kind == "softmax":
                                weights = _softmax(scores)
                            else:
                                hits = [s == max(scores) for s in scores]
                                weights = [Fraction(int(h), sum(hits)) for h in hits]
                        for u in range(t + 1):
                            value = _row_times(_row_times(xs[u], W_V), W_O)
                            y = [a + weights[u] * v for a, v in zip(y, value)]
                    new.append(y)
                xs = new
            if mlp is not None:
                W1, b1, W2, b2 = mlp
                for t in range(len(xs)):
                    hidden = [max(Fraction(0), a + b) for a, b in zip(_row_times(xs[t], W1), b1)]
                    xs[t] = [a + b + c for a, b, c in zip(xs[t], _row_times(hidden, W2), b2)]
        out.append([_row_times(x, U_t) for x in xs])
    return np.array(out, dtype=object)


def assert_within(logits: np.ndarray, bound: np.ndarray, exact: np.ndarray, what: str) -> None:
    """``|logits − exact| <= bound`` entrywise, decided in exact arithmetic (an infinite bound holds)."""
    assert logits.shape == bound.shape == exact.shape, (what, logits.shape, bound.shape, exact.shape)
    for index in np.ndindex(logits.shape):
        computed, allowed, true = float(logits[index]), float(bound[index]), exact[index]
        if np.isinf(allowed):
            continue
        assert np.isfinite(computed), (what, index, computed)
        assert abs(Fraction(computed) - true) <= Fraction(allowed), (
            what, index, computed, float(true), allowed)


# ------------------------------------------------------------------------------------------ the cases

SINGLE = {"N": 8, "R": 2}
MULTI = {"N": 5, "R": 2, "k": 2}


def _builtin_specs() -> list:
    return [s for s in registry.specs() if s.id in registry.BUILTIN_IDS]


def construction_variants(spec) -> list[tuple[str, dict, dict]]:
    """``(label, sizes, options)`` of the small builds of a registry construction that the golden values
    cover: every attention kind it offers, integer weights where it takes ``integer``, a second codebook."""
    if spec.hops == "single":
        out = [("binary", SINGLE, {}), ("gaussian", SINGLE, {"codes": "gaussian", "D": 6})]
        if "integer" in spec.accepts():
            out.append(("integer", SINGLE, {"integer": True}))
        return [(label, sizes, opts) for label, sizes, opts in out
                if "codes" in spec.accepts() or "codes" not in opts]
    kinds = ["softmax", "hard"] if "attention" in spec.accepts() else [None]
    return [(f"{kind or 'default'}", MULTI, {} if kind is None else {"attention": kind}) for kind in kinds]


def build(spec, sizes: dict, options: dict):
    task = task_for_seed(sizes["N"], sizes["R"], 0)
    k = sizes.get("k", 1)
    built = spec.build(task, k, rng=np.random.default_rng(0), **options)
    return task, k, built.model


def construction_cases():
    """Every (case name, model, tokens, greedy steps) the golden file covers for the registry's built-ins."""
    for spec in _builtin_specs():
        for label, sizes, options in construction_variants(spec):
            task, k, model = build(spec, sizes, options)
            tokens, _ = queries(task, k)
            runs = [("q", tokens)]
            if spec.decoding == "greedy":
                runs.append(("tf", teacher_forcing(task, k)[0]))
            for dtype in (np.float64, np.float32):
                typed = model.astype(dtype)
                for run, toks in runs:
                    yield (f"{spec.id}/{label}/{np.dtype(dtype).name}/{run}", typed, toks,
                           k if spec.decoding == "greedy" and run == "q" else 0)


def random_model(seed: int, kind: str, *, heads: int = 2, positions: bool = True, layers: int = 2,
                 readout: str = "dense", dtype=np.float64, integer: bool = False) -> Model:
    """A small random model; ``integer``: small integer weights (integer mode applies to uniform ones)."""
    rng = np.random.default_rng(seed)
    N, R, d, m, T = 5, 2, 6, 7, 4

    def w(*shape):
        return (rng.integers(-2, 3, size=shape).astype(np.float64) if integer else rng.normal(size=shape))

    def att():
        if kind == "uniform":  # integer: W_O a multiple of 12 makes every division by t + 1 <= 4 exact
            return Attention("uniform", W_V=w(heads, d, 3), W_O=w(heads, 3, d) * (12 if integer else 1))
        return Attention(kind, W_V=w(heads, d, 3), W_O=w(heads, 3, d), W_Q=w(heads, d, 3), W_K=w(heads, d, 3),
                         inverse_temperature=1.0 if integer else float(rng.uniform(0.2, 1.5)))

    stack = []
    for i in range(layers):
        mlp = MLP(w(d, m), w(m), w(m, d), w(d))
        stack.append(Layer(att(), mlp) if i % 2 == 0 else Layer(att() if layers == 1 else None, mlp))
    U = w(N, d)
    columns = None
    if readout == "sparse":
        U[:, :3] = 0.0
    elif readout == "compact":
        columns = np.array([1, 4])
        U = U[:, columns]
    model = Model(w(N, d), w(R, d), U, tuple(stack), w(T, d) if positions else None, readout_columns=columns)
    if dtype == "mixed":
        return model.replace(entity_embedding=model.entity_embedding.astype(np.float32),
                             **{"layers.0.mlp.W1": model.layers[0].mlp.W1.astype(np.float32)})
    return model.astype(dtype)


def random_cases():
    """Random models: every attention kind, with and without positions, dense / sparse / compact read-out,
    float64 / float32 / mixed storage, and integer-weight ones."""
    rng = np.random.default_rng(19)
    tokens = rng.integers(0, 7, size=(6, 4))
    seed = 0
    for kind in ("uniform", "softmax", "hard"):
        for positions in (True, False):
            for readout in ("dense", "sparse", "compact"):
                for dtype in (np.float64, np.float32, "mixed"):
                    seed += 1
                    storage = "mixed" if dtype == "mixed" else np.dtype(dtype).name
                    name = f"random/{kind}/{'P' if positions else 'noP'}/{readout}/{storage}"
                    model = random_model(seed, kind, positions=positions, readout=readout, dtype=dtype)
                    yield name, model, tokens, 0
        seed += 1
        yield f"random/{kind}/integer", random_model(seed, kind, integer=True), tokens, 0
        yield (f"random/{kind}/one-layer-one-head", random_model(seed, kind, heads=1, layers=1),
               tokens[:, :3], 0)


def all_cases():
    yield from construction_cases()
    yield from random_cases()


def outputs(model: Model, tokens: np.ndarray, greedy_steps: int) -> dict[str, np.ndarray]:
    """Everything the captured file records of one case, from the public API only: logits and their
    certified bounds (last position and every position), integer-mode logits or the refusal, the structure
    of the traces, and for greedy cases the decoded tokens, their margins and a bound on the margins'
    error."""
    out: dict[str, np.ndarray] = {}
    for at in ("last", "all"):
        out[f"logits_{at}"] = forward(model, tokens, at=at)
        logits, out[f"bound_{at}"] = forward(model, tokens, at=at, errors=True)
        np.testing.assert_array_equal(logits, out[f"logits_{at}"])  # errors=True computes the same logits
    try:
        integer_bounds(model, tokens.shape[1])
    except IntegerModeError:
        pass
    else:  # integral weights within 2^53: the logits, or the refusal of an attention division
        for at in ("last", "all"):
            try:
                out[f"integer_{at}"] = forward(model, tokens, at=at, integer=True)
            except IntegerModeError as exc:
                out[f"integer_{at}_refused"] = np.array(str(exc))
    for at in ("last", "all"):  # traces: which intermediates exist, their dtypes and shapes
        logits, trace = forward(model, tokens, at=at, trace=True)
        np.testing.assert_array_equal(logits, out[f"logits_{at}"])
        parts = [("residual", x) for x in trace.residual] + [("hidden", h) for h in trace.hidden] + [
            ("weights", a) for a in trace.attention_weights]
        out[f"trace_{at}"] = np.array([f"{kind}:None" if a is None else f"{kind}:{a.dtype}:{a.shape}"
                                       for kind, a in parts])
    if greedy_steps:
        generated, margins = greedy_decode(model, tokens, greedy_steps)
        out["greedy_generated"], out["greedy_margins"] = generated, margins
        # the prefix each step predicted from, and the certified bound of its logits: top-1 and top-2 are
        # 1-Lipschitz in the max norm, so a margin's error is at most twice the row's largest bound
        prefixes = np.concatenate([tokens, generated[:, :-1]], axis=1)
        _, bound = forward(model, prefixes, at="all", errors=True)
        out["greedy_margin_bound"] = 2 * bound[:, tokens.shape[1] - 1:].max(axis=2)
    return out


REGENERATE = "python tests/test_forward_reference.py regenerate"


def bound_tolerance(model: Model, T: int) -> float:
    """How far two evaluations of the same certified bound may differ, relatively.

    Every term of the bound is ``γ_n(u)`` times the absolute value of a computed intermediate, plus the
    bounds propagated into it. Another summation order (another BLAS, another CPU) or another libm moves
    each computed intermediate by at most ``γ_n(u)`` relatively per product it passed through, and so moves
    the bound by relatively at most ``(L + 2)·γ_n(u)`` (L layers, the embedding and the read-out), with
    ``u`` the working format's unit roundoff and ``n`` the longest inner product (d, MLP width, outputs or
    positions). We allow 16 times that: far below a change of the bound's formula (the stale captured file
    of issue 28 was off by 2.3e-4 relatively in float64, where this tolerance is about 2e-13)."""
    u, _ = working_format(model)
    n = max(model.d, model.mlp_width, model.n_out, T)
    return 16 * (len(model.layers) + 2) * gamma(n, u)


def compare_with_captured(name: str, now: dict, then: dict, rtol: float) -> None:
    """``now`` agrees with the captured ``then`` wherever the comparison does not depend on the machine:

    - exactly: the set of outputs, every dtype and shape, integer-mode logits and refusals, the traces'
      structure and the greedy decodes' tokens;
    - within both certified bounds (each contains the exact value, so the computed values differ by at
      most their sum): float logits and greedy margins;
    - within ``rtol`` relatively (:func:`bound_tolerance`): the bounds themselves.

    Raises AssertionError naming the case, the output and :data:`REGENERATE`."""
    hint = f"(if the arithmetic changed on purpose, regenerate the file: {REGENERATE})"
    assert set(now) == set(then), (name, sorted(set(now) ^ set(then)), hint)
    for key, value in now.items():
        assert value.dtype == then[key].dtype and value.shape == then[key].shape, (
            name, key, value.dtype, then[key].dtype, value.shape, then[key].shape, hint)
    slack = 1 + 8 * 2.0**-53  # the float64 subtraction and sum below round
    for key, value in now.items():
        if key.startswith(("integer", "trace", "greedy_generated")):
            np.testing.assert_array_equal(value, then[key], err_msg=f"{name}: {key} {hint}")
        elif key.startswith("bound_") or key == "greedy_margin_bound":
            a, b = value.astype(np.float64), then[key].astype(np.float64)
            finite = np.isfinite(a) & np.isfinite(b)
            assert np.array_equal(np.isfinite(a), np.isfinite(b)), (name, key, hint)
            worst = float(np.max(np.abs(a - b)[finite] / np.maximum(a, b)[finite], initial=0.0,
                                 where=np.maximum(a, b)[finite] > 0))
            assert worst <= rtol, (name, key, f"relative difference {worst:.3g} > tolerance {rtol:.3g}",
                                   hint)
    pairs = [(f"logits_{at}", f"bound_{at}") for at in ("last", "all")]
    if "greedy_margins" in now:
        pairs.append(("greedy_margins", "greedy_margin_bound"))
    for key, bound in pairs:
        a, b = now[key].astype(np.float64), then[key].astype(np.float64)
        allowed = (now[bound].astype(np.float64) + then[bound]) * slack
        same = a == b  # equal values (also equal infinities) agree whatever the bounds
        with np.errstate(invalid="ignore"):
            inside = np.abs(a - b) <= allowed
        bad = ~(same | inside)
        assert not bad.any(), (name, key, f"{int(bad.sum())} value(s) outside both certified bounds", hint)


def stored_case(arrays: dict, meta: dict, name: str) -> tuple[Model, np.ndarray, int, dict]:
    """The model, tokens and greedy steps of a case as the captured file stores them, and its outputs."""
    case = meta["cases"][name]
    prefix = f"{name}|"
    weights = {key[len(prefix) + len("model."):]: value for key, value in arrays.items()
               if key.startswith(prefix + "model.")}
    columns = arrays.get(prefix + "readout_columns")
    model = unflatten(case["structure"], weights, readout_columns=columns)
    captured = {key[len(prefix) + len("out."):]: value for key, value in arrays.items()
                if key.startswith(prefix + "out.")}
    return model, arrays[prefix + "tokens"], int(case["steps"]), captured


def regenerate(path: Path = GOLDEN) -> None:
    """Write the captured file from the registry and the forward pass as they are now: per case the model's
    arrays and structure, the tokens, the greedy steps and :func:`outputs`; the commit it came from."""
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    arrays: dict[str, np.ndarray] = {}
    cases = {}
    for name, model, tokens, steps in all_cases():
        cases[name] = {"structure": structure_of(model), "steps": steps}
        for key, value in model.arrays().items():
            arrays[f"{name}|model.{key}"] = value
        if model.readout_columns is not None:
            arrays[f"{name}|readout_columns"] = np.asarray(model.readout_columns)
        arrays[f"{name}|tokens"] = np.asarray(tokens)
        for key, value in outputs(model, tokens, steps).items():
            arrays[f"{name}|out.{key}"] = value
    arrays["__meta__"] = np.array(json.dumps({"commit": commit, "command": REGENERATE, "cases": cases}))
    path.parent.mkdir(exist_ok=True)
    partial = path.with_name(path.name + ".partial.npz")
    np.savez_compressed(partial, **arrays)
    partial.replace(path)
    print(f"wrote {len(cases)} cases to {path} (commit {commit or 'unknown'})")


# ------------------------------------------------------------------------------------------- the tests

CASES = list(all_cases())
CASE_IDS = [name for name, *_ in CASES]


def _captured_names() -> list[str]:
    """The case names the captured file holds (read at collection: each is one comparison)."""
    with np.load(GOLDEN, allow_pickle=False) as data:
        return list(json.loads(str(data["__meta__"]))["cases"])


CAPTURED = _captured_names()


def construction_of(case: str) -> str:
    """The construction id of a case name ("G1/binary/float64/q" -> "G1"; "random/..." -> "random")."""
    return case.split("/", 1)[0]


def uncaptured(golden_meta: dict) -> list[str]:
    """Registered built-in constructions with no captured case at all: added since the file was written.
    They are not stale (the file has nothing of theirs to disagree with): THE forward pass on them is
    checked against the exact reference (:func:`test_registry_constructions_against_the_exact_reference`),
    and :data:`REGENERATE` captures them."""
    have = {construction_of(name) for name in golden_meta["cases"]}
    return [spec.id for spec in _builtin_specs() if spec.id not in have]


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    meta = json.loads(str(arrays.pop("__meta__")))
    return meta, arrays


@pytest.mark.parametrize("spec_id", [s.id for s in _builtin_specs()])
def test_golden_file_covers_every_builtin_construction(golden, spec_id):
    """Each built-in construction the file captured has captured values for each of its variants and both
    dtypes. One added since the file was written is named (skipped with the command that captures it), not
    failed: a new registry entry needs nothing else, and its forward pass is checked against the exact
    reference meanwhile."""
    meta, _ = golden
    if spec_id in uncaptured(meta):
        pytest.skip(f"{spec_id} has no captured values yet (checked against the exact reference); capture "
                    f"them from a trusted commit: {REGENERATE}")
    names = set(meta["cases"])
    for label, _, _ in construction_variants(registry.get(spec_id)):
        for dtype in ("float64", "float32"):
            assert f"{spec_id}/{label}/{dtype}/q" in names, (spec_id, label, dtype, REGENERATE)


def stale_cases(golden_meta: dict, arrays: dict) -> list[str]:
    """The cases whose stored model, tokens or steps differ from what the registry and this module build
    now: the structure, dtypes, shapes, tokens and steps exactly; the weights within a few units in the
    last place of the array's largest entry (a builder's floating-point work may round differently on
    another machine; a changed builder moves them far more). A case of a captured construction missing
    from the file, or a captured case the registry and this module no longer build, is stale; a
    construction the file has never captured (:func:`uncaptured`) is not."""
    new = set(uncaptured(golden_meta))
    stale = [name for name in golden_meta["cases"] if name not in CASE_IDS]
    for name, model, tokens, steps in CASES:
        if construction_of(name) in new:
            continue
        if name not in golden_meta["cases"]:
            stale.append(name)
            continue
        stored, stored_tokens, stored_steps, _ = stored_case(arrays, golden_meta, name)
        now, then = model.arrays(), stored.arrays()
        same = (structure_of(model) == structure_of(stored) and steps == stored_steps
                and np.array_equal(tokens, stored_tokens) and now.keys() == then.keys()
                and np.array_equal(model.readout_columns if model.readout_columns is not None else [],
                                   stored.readout_columns if stored.readout_columns is not None else []))
        for key in now if same else ():
            a, b = now[key], then[key]
            if a.dtype != b.dtype or a.shape != b.shape:
                same = False
                break
            scale = float(np.max(np.abs(a), initial=0.0))
            if not np.all(np.abs(a.astype(np.float64) - b) <= 16 * np.finfo(a.dtype).eps * scale):
                same = False
                break
        if not same:
            stale.append(name)
    return stale


def test_captured_file_is_current(golden):
    """The stored cases are the ones the registry builds now: a changed builder, codebook or case list makes
    the captured file stale, and this test says how to regenerate it."""
    meta, arrays = golden
    assert meta.get("command") == REGENERATE
    stale = stale_cases(meta, arrays)
    assert not stale, (f"{len(stale)} captured case(s) are stale, e.g. {stale[:3]}; regenerate: {REGENERATE}")


def test_a_stale_captured_file_is_detected(golden):
    """The staleness check has teeth: one weight of one stored model moved by a millionth, a token changed,
    or a case missing, each makes it report that case."""
    meta, arrays = golden
    name = "G1/binary/float64/q"
    moved = dict(arrays)
    key = f"{name}|model.entity_embedding"
    moved[key] = arrays[key].copy()
    moved[key].flat[0] += 1e-6
    assert stale_cases(meta, moved) == [name]
    retokened = dict(arrays)
    retokened[f"{name}|tokens"] = arrays[f"{name}|tokens"].copy()
    retokened[f"{name}|tokens"].flat[0] ^= 1
    assert stale_cases(meta, retokened) == [name]
    fewer = {**meta, "cases": {k: v for k, v in meta["cases"].items() if k != name}}
    assert stale_cases(fewer, arrays) == [name]
    more = {**meta, "cases": {**meta["cases"], "G1/removed/float64/q": meta["cases"][name]}}
    assert stale_cases(more, arrays) == ["G1/removed/float64/q"]  # a case no longer built


def test_a_construction_added_since_the_capture_is_named_not_stale(golden):
    """A file without any case of G1 (as if G1 had been added after it was written) is not stale, and G1
    is named as uncaptured, beside any built-in really added since the file was written."""
    meta, arrays = golden
    without = {**meta, "cases": {k: v for k, v in meta["cases"].items() if construction_of(k) != "G1"}}
    added_since = uncaptured(meta)
    assert "G1" not in added_since and sorted(uncaptured(without)) == sorted(["G1", *added_since])
    assert stale_cases(without, arrays) == []


@pytest.mark.parametrize("case", CAPTURED)
def test_forward_equals_captured_values(golden, case):
    """THE forward pass, run now on each stored model, agrees with its captured outputs: integer results,
    refusals, trace structure and greedy tokens exactly; float logits and margins within both certified
    bounds; the bounds within :func:`bound_tolerance`."""
    meta, arrays = golden
    model, tokens, steps, captured = stored_case(arrays, meta, case)
    compare_with_captured(case, outputs(model, tokens, steps), captured,
                          bound_tolerance(model, tokens.shape[1]))


def test_captured_comparison_has_teeth(golden):
    """A logit moved past both bounds, a bound 0.1% smaller, an integer logit off by one, a greedy token
    changed, a trace with another shape: each fails the comparison."""
    meta, arrays = golden
    for name in ("random/softmax/P/dense/float32", "G1/integer/float64/q", "C1/softmax/float64/q"):
        model, tokens, steps, then = stored_case(arrays, meta, name)
        rtol = bound_tolerance(model, tokens.shape[1])
        compare_with_captured(name, then, then, rtol)  # the control: the captured values agree with them
        changes = {
            "logits_all": lambda v, t: v + 3 * t["bound_all"].flat[0] + abs(v) * 1e-12 + 1e-300,
            "bound_last": lambda v, t: v * (1 - 1e-3),
            "integer_last": lambda v, t: v + 1,
            "greedy_generated": lambda v, t: v + 1,
        }
        tried = 0
        for key, change in changes.items():
            if key not in then:
                continue
            changed = {k: v.copy() for k, v in then.items()}
            changed[key].flat[0] = change(changed[key].flat[0], then)
            with pytest.raises(AssertionError):
                compare_with_captured(name, changed, then, rtol)
            tried += 1
        changed = {**then, "trace_all": np.array([str(s).replace("(", "(9, ", 1) for s in then["trace_all"]])}
        with pytest.raises(AssertionError):
            compare_with_captured(name, changed, then, rtol)
        assert tried >= 2, name


@pytest.mark.parametrize("spec_id", [s.id for s in _builtin_specs()])
def test_registry_constructions_against_the_exact_reference(spec_id):
    """Every registry construction, float64 and float32 storage, every attention kind it offers: the
    certified bound contains the exact logit, at the last position and at every position; integer-weight
    builds equal the exact logits in integer mode."""
    spec = registry.get(spec_id)
    for label, sizes, options in construction_variants(spec):
        task, k, model = build(spec, sizes, options)
        tokens = queries(task, k)[0]
        if spec.decoding == "greedy":
            tokens = teacher_forcing(task, k)[0]
        tokens = tokens[:: max(1, len(tokens) // 12)]  # a spread of queries keeps the exact reference quick
        exact = exact_logits(model, tokens)
        for dtype in (np.float64, np.float32):
            typed = model.astype(dtype)
            for at, want in (("last", exact[:, -1]), ("all", exact)):
                logits, bound = forward(typed, tokens, at=at, errors=True)
                np.testing.assert_array_equal(logits, forward(typed, tokens, at=at))
                assert_within(logits, bound, want, f"{spec_id}/{label}/{np.dtype(dtype).name}/{at}")
            if options.get("integer"):
                integer_bounds(typed, tokens.shape[1])
                got = forward(typed, tokens, at="all", integer=True)
                assert got.dtype == np.float64
                assert [[[Fraction(float(v)) for v in row] for row in seq] for seq in got] == exact.tolist()


@pytest.mark.parametrize("case", [i for i, name in enumerate(CASE_IDS) if name.startswith("random/")],
                         ids=[name for name in CASE_IDS if name.startswith("random/")])
def test_random_models_against_the_exact_reference(case):
    """Random models, every attention kind and storage: the bound contains the exact logit; integer ones
    equal it in integer mode (uniform) or are refused (softmax, hard)."""
    name, model, tokens, _ = CASES[case]
    exact = exact_logits(model, tokens)
    for at, want in (("last", exact[:, -1]), ("all", exact)):
        logits, bound = forward(model, tokens, at=at, errors=True)
        assert_within(logits, bound, want, f"{name}/{at}")
    if name.endswith("/integer"):
        if "uniform" in name:
            integer_bounds(model, tokens.shape[1])
            got = forward(model, tokens, at="all", integer=True)
            assert [[[Fraction(float(v)) for v in row] for row in seq] for seq in got] == exact.tolist()
        else:
            with pytest.raises(IntegerModeError, match="uniform attention only"):
                integer_bounds(model, tokens.shape[1])


@settings(max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["uniform", "softmax", "hard"]),
       heads=st.integers(1, 2), positions=st.booleans(), layers=st.integers(0, 2),
       readout=st.sampled_from(["dense", "sparse", "compact"]), integer=st.booleans(),
       dtype=st.sampled_from(["float64", "float32"]), T=st.integers(1, 4))
def test_forward_against_the_exact_reference_property(seed, kind, heads, positions, layers, readout, integer,
                                                      dtype, T):
    """Drawn structure: the same two promises (integer mode exact; every float logit within its bound)."""
    model = random_model(seed, kind, heads=heads, positions=positions, layers=layers, readout=readout,
                         dtype=np.dtype(dtype), integer=integer)
    tokens = np.random.default_rng(seed).integers(0, 7, size=(3, T))
    exact = exact_logits(model, tokens)
    logits, bound = forward(model, tokens, at="all", errors=True)
    assert_within(logits, bound, exact, "drawn")
    if integer and kind == "uniform":
        integer_bounds(model, T)
        got = forward(model, tokens, at="all", integer=True)
        assert [[[Fraction(float(v)) for v in row] for row in seq] for seq in got] == exact.tolist()


def _tie_above(scale: float, ulp: float) -> float:
    """A float64 just above the float32 rounding tie ``scale + ulp/2``: it rounds up, by almost half an
    ulp."""
    return scale + ulp / 2 + 2.0**-45


@pytest.mark.parametrize("where", ["relation table", "positions", "read-out"])
def test_a_table_stored_wider_than_the_working_dtype_is_counted(where):
    """A float64 table in a float32 model is cast to float32 before use; the cast rounds, and the bound must
    say so. Each model makes the cast round up by almost half an ulp and the product after it round up by
    half an ulp, so the error is about twice the one rounding of a length-1 dot product. Before the casts
    were counted, the relation-table and read-out cases failed (bounds 1.8e-7 against errors of 3.0e-7 and
    2.4e-7); the positions case was covered by the position sum's own charge, and is kept as a control."""
    f32 = np.float32
    one = np.array([[1.0]], f32)
    q = _tie_above(1.0, 2.0**-23)  # cast(q) = 1 + 2^-23, and 3·(1 + 2^-23) is a tie that rounds up
    if where == "relation table":
        model = Model(np.zeros((1, 1), f32), np.array([[q]]), np.array([[3.0]], f32))
        tokens = np.array([[1]])
    elif where == "positions":
        model = Model(np.zeros((1, 1), f32), np.zeros((1, 1), f32), np.array([[3.0]], f32),
                      position_embedding=np.array([[q]]))
        tokens = np.array([[0]])
    else:  # U = cast(w) rounds up, then x·U rounds up
        model = Model(np.array([[1 + 2.0**-23]], f32), one, np.array([[_tie_above(3.0, 2.0**-22)]]))
        tokens = np.array([[0]])
    assert model.arrays()["entity_embedding"].dtype == f32
    exact = exact_logits(model, tokens)[:, -1]
    logits, bound = forward(model, tokens, errors=True)
    assert logits.dtype == np.float32
    error = abs(Fraction(float(logits[0, 0])) - exact[0, 0])
    assert error > Fraction(2.0**-24 * 3)  # more than one rounding of the logit: the cast mattered
    assert_within(logits, bound, exact, where)


def test_the_exact_reference_catches_a_wrong_forward():
    """The oracle has teeth: a logit moved by one unit in the last place falls outside its bound, and an
    integer logit moved by one is unequal."""
    model = random_model(3, "softmax")
    tokens = np.random.default_rng(3).integers(0, 7, size=(2, 4))
    exact = exact_logits(model, tokens)
    logits, bound = forward(model, tokens, errors=True)
    broken = logits.copy()
    broken[0, 0] = exact[0, -1, 0] + 2 * bound[0, 0] + abs(float(exact[0, -1, 0])) * 1e-15
    with pytest.raises(AssertionError):
        assert_within(broken, bound, exact[:, -1], "broken")
    integer_model = random_model(4, "uniform", integer=True)
    got = forward(integer_model, tokens, at="all", integer=True)
    got[1, 2, 3] += 1
    assert [[[Fraction(float(v)) for v in row] for row in seq] for seq in got] != \
        exact_logits(integer_model, tokens).tolist()


if __name__ == "__main__":
    if sys.argv[1:] != ["regenerate"]:
        sys.exit(f"usage: {REGENERATE}")
    regenerate()
