"""A PASS is a proof: integer mode exact whatever the storage dtype, float mode certified against exact
rational arithmetic, and every path of the checker certifying the same function (issue 18).

The reference is an independent forward pass in exact rationals (``fractions.Fraction``) of the stored
weights: uniform and hard attention, ReLU MLP, read-out (softmax is not rational and is covered by the
construction tests and the interval softmax's own test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from georecall.constructions import registry
from georecall.constructions.arithmetic import IntegerModeError
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Attention, Layer, Model
from georecall.constructions.rounding import softmax_weight_error
from georecall.errors import ConditionError, InputError
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries, teacher_forcing
from georecall.verify.checking.check import check_decoding, check_queries

# ------------------------------------------------------------------------------- exact rational reference


def _fr(array) -> list:
    return [[Fraction(float(v)) for v in row] for row in np.asarray(array, dtype=np.float64)]


def _mat(x: list, W: list) -> list:
    return [sum((xi * W[i][j] for i, xi in enumerate(x)), Fraction(0)) for j in range(len(W[0]))]


def exact_logits(model: Model, tokens) -> list[list[Fraction]]:
    """THE forward pass in exact rational arithmetic of the stored weights (uniform / hard attention)."""
    E, Qr = _fr(model.entity_embedding), _fr(model.relation_embedding)
    P = None if model.position_embedding is None else _fr(model.position_embedding)
    U = _fr(model.full_unembedding())
    N = model.n_entities
    out = []
    for seq in np.asarray(tokens):
        xs = []
        for t, tok in enumerate(seq.tolist()):
            row = list(E[tok] if tok < N else Qr[tok - N])
            if P is not None:
                row = [a + b for a, b in zip(row, P[t])]
            xs.append(row)
        for layer in model.layers:
            new = []
            for t in range(len(xs)):
                y = list(xs[t])
                att = layer.attention
                if att is not None:
                    for h in range(att.heads):
                        Wv, Wo = _fr(att.W_V[h]), _fr(att.W_O[h])
                        if att.kind == "uniform":
                            w = [Fraction(1, t + 1)] * (t + 1)
                        else:
                            Wq, Wk = _fr(att.W_Q[h]), _fr(att.W_K[h])
                            beta = Fraction(float(att.inverse_temperature))
                            q = _mat(xs[t], Wq)
                            s = [beta * sum((a * b for a, b in zip(q, _mat(xs[u], Wk))), Fraction(0))
                                 for u in range(t + 1)]
                            top = max(s)
                            hits = [u for u in range(t + 1) if s[u] == top]
                            w = [Fraction(1, len(hits)) if u in hits else Fraction(0) for u in range(t + 1)]
                        z = [sum((w[u] * xs[u][i] for u in range(t + 1)), Fraction(0)) for i in range(len(y))]
                        o = _mat(_mat(z, Wv), Wo)
                        y = [a + b for a, b in zip(y, o)]
                if layer.mlp is not None:
                    W1, b1, W2, b2 = (_fr(layer.mlp.W1), [Fraction(float(v)) for v in layer.mlp.b1],
                                      _fr(layer.mlp.W2), [Fraction(float(v)) for v in layer.mlp.b2])
                    hid = [max(Fraction(0), a + b) for a, b in zip(_mat(y, W1), b1)]
                    y = [a + b + c for a, b, c in zip(y, _mat(hid, W2), b2)]
                new.append(y)
            xs = new
        out.append([sum((a * b for a, b in zip(xs[-1], Uj)), Fraction(0)) for Uj in U])
    return out


def exact_margins(model: Model, tokens, answers) -> list[Fraction]:
    margins = []
    for logits, a in zip(exact_logits(model, tokens), np.asarray(answers).tolist()):
        others = [v for j, v in enumerate(logits) if j != a]
        margins.append(logits[a] - max(others) if others else Fraction(10**9))
    return margins


def assert_sound(result, exact: list[Fraction]) -> None:
    """Every certified verdict agrees with exact arithmetic, and the certified margin is a lower bound."""
    assert result.margins is not None
    lo = result.margins.reshape(-1)
    exact_ok = sum(m > 0 for m in exact)
    for q, m in enumerate(exact):
        if lo[q] > 0:  # certified exact
            assert m > 0, (q, lo[q], m)
        assert lo[q] == -np.inf or lo[q] == np.inf or Fraction(float(lo[q])) <= m, (q, lo[q], m)
    assert result.n_correct <= exact_ok
    assert result.n_queries - result.n_correct - result.n_undecided <= len(exact) - exact_ok  # wrong: truly


# ----------------------------------------------------------------------------------- the three reproducers


def reproducer_integer_float32(U_rows=((1.0, 0.0), (0.0, 1.0))) -> Model:
    """Issue 18, item 1: 4097² = 16,785,409 rounds to 16,785,408 in float32."""
    f = np.float32
    VO = np.array([[[4097, 0], [0, 0]]], f)
    att = Attention("uniform", W_V=VO, W_O=VO)
    E, Q = np.array([[1, 16785410]], f), np.array([[1, 0]], f)
    return Model(E, Q, np.array(U_rows, f), (Layer(att, None),))


def reproducer_float_tie() -> Model:
    """Issue 18, item 2: 3 + 2^53 − 2^53 computes 4 (or 0), exactly 3: the exact margin is 0."""
    return Model(np.array([[3.0, 2.0**53, 2.0**53]]), np.zeros((1, 3)), np.array([[1.0, 1, -1], [1, 0, 0]]))


def reproducer_hard_tie(dtype) -> Model:
    """Issue 18, item 3: hard attention whose exact scores 2^24 + 1 > 2^24 tie in float32."""
    P = np.array([[2.0**24, 1, 0, 0], [2.0**24, 0, 0, 0]])
    W_Q = np.zeros((1, 4, 2))
    W_Q[0, 0] = [2.0**-24, 2.0**-24]
    W_K = np.zeros((1, 4, 2))
    W_K[0, 0, 0] = W_K[0, 1, 1] = 1.0
    W_V = np.zeros((1, 4, 1))
    W_V[0, 2, 0] = 1.0
    W_O = np.zeros((1, 1, 4))
    W_O[0, 0, 3] = 1.0
    att = Attention("hard", W_V=W_V, W_O=W_O, W_Q=W_Q, W_K=W_K)
    model = Model(np.array([[0.0, 0, 1, 0]]), np.array([[0.0, 0, -1, 0]]),
                  np.array([[0.0, 0, 0, -1], [0, 0, 0, 1]]), (Layer(att, None),), position_embedding=P)
    return model.astype(dtype)


QUERY = (np.array([[1, 0]]), np.array([1]))


def test_integer_mode_with_float32_weights_is_exact():
    model = reproducer_integer_float32()
    tokens, answers = QUERY
    assert exact_margins(model, tokens, answers) == [0]
    for path in ("auto", "dense"):
        result = check_queries(model, tokens, answers, integer=True, forward=path, keep=True)
        assert not result.exact and result.min_margin == 0.0 and result.n_wrong == 1
    # the product the forward forms is inside integer_bounds, and computed in float64
    assert model.layers[0].attention.value_outputs[0, 0, 0] == 4097**2


def test_float_mode_never_counts_an_exact_tie():
    model = reproducer_float_tie()
    tokens, answers = np.array([[1, 0]]), np.array([0])
    assert exact_margins(model, tokens, answers) == [0]
    result = check_queries(model, tokens, answers, keep=True)
    assert not result.exact and result.n_undecided == 1 and result.min_margin <= 0
    assert_sound(result, [Fraction(0)])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_hard_attention_score_tie_is_the_same_on_every_path(dtype):
    model = reproducer_hard_tie(dtype)
    tokens, answers = np.array([[1, 0]]), np.array([0])
    assert exact_margins(model, tokens, answers) == [2]
    verdicts = set()
    for path in ("dense", "tables"):
        result = check_queries(model, tokens, answers, forward=path, decoder="dense", keep=True)
        assert_sound(result, [Fraction(2)])
        verdicts.add((result.n_correct, result.n_undecided))
    # float64 resolves the exact gap on both paths; float32 cannot (its forward pass ties): never a PASS
    assert verdicts == ({(1, 0)} if dtype == "float64" else {(0, 1)})


def test_huge_gate_is_refused_and_a_hand_built_one_is_never_passed():
    task = task_for_seed(16, 2, 0)
    with pytest.raises(ConditionError, match="gate range"):
        registry.get("G1").build(task, gate=1e17)
    built = registry.get("G1").build(task)
    G = 1e17
    Q = built.model.relation_embedding / built.constants["gate"] * G
    b1 = np.full(built.model.mlp_width, -G)
    model = built.model.replace(relation_embedding=Q, **{"layers.0.mlp.b1": b1})
    tokens, answers = queries(task)
    assert all(m > 0 for m in exact_margins(model, tokens[:4], answers[:4]))  # exact arithmetic: right
    for path in ("dense", "tables"):
        for decoder in ("dense", "hypercube"):
            result = check_queries(model, tokens, answers, forward=path, decoder=decoder)
            assert not result.exact and result.n_undecided == result.n_queries, (path, decoder)


SPEC_FILE = '''
import numpy as np
from georecall.constructions.codes import Codes
from georecall.constructions.model import Attention, Layer, Model
from georecall.constructions.registry import ConstructionSpec
from georecall.constructions.single_hop import Construction
from georecall.theory.statements import Promise

def model(kind):
    if kind == "int32":
        f = np.float32
        att = Attention("uniform", W_V=np.array([[[4097, 0], [0, 0]]], f),
                        W_O=np.array([[[4097, 0], [0, 0]]], f))
        return Model(np.array([[1, 16785410]], f), np.array([[1, 0]], f), np.array([[0, 1], [1, 0]], f),
                     (Layer(att, None),))
    return Model(np.array([[3.0, 2.0**53, 2.0**53]]), np.zeros((1, 3)), np.array([[1.0, 1, -1], [1, 0, 0]]))

def build(kind):
    def builder(task, k=1, *, codes="binary", D=None, lam=1.0, integer=False, rng=None):
        m = model(kind)
        codes_ = Codes("x", np.ones((1, 1)), 1.0, 1.0, -1.0, 1.0, True, 1, 0)
        promise = Promise("X", "reproducer", m.d, m.mlp_width, 0, 0, 1e-300, ())
        return Construction(m, promise, codes_, {})
    return builder

def nominal(d):
    return lambda N, R, k=1: Promise("X", "reproducer", d, 0, 0, 0, 1e-300, ())

INT32 = ConstructionSpec("R1", "repro-int32", "issue 18 item 1", build("int32"), nominal(2),
                         options={"integer"})
TIE = ConstructionSpec("R2", "repro-tie", "issue 18 item 2", build("tie"), nominal(3))
'''


@pytest.mark.parametrize("name, extra", [("INT32", ["--integer"]), ("TIE", [])])
def test_reproducers_fail_through_the_cli(tmp_path, name, extra):
    (tmp_path / "repro.py").write_text(textwrap.dedent(SPEC_FILE))
    proc = subprocess.run([sys.executable, "-m", "georecall.cli", "check", "single-hop",
                           "--construction", f"{tmp_path / 'repro.py'}:{name}", "--N", "1", "--R", "1",
                           "--json", *extra],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    check = doc["reports"][0]["check"]
    assert not doc["reports"][0]["passed"] and not check["exact"]
    assert check["mode"] == "integer exact" if extra else check["mode"].startswith("exact")


# --------------------------------------------------------------- integer mode: exact whatever the storage


@st.composite
def integer_models(draw):
    d, m, n_out = draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(2, 3))
    big = draw(st.sampled_from([3, 2**12 + 1, 2**24 + 1]))
    ints = st.integers(-big, big)

    def arr(*shape):
        return np.array(draw(st.lists(ints, min_size=int(np.prod(shape)), max_size=int(np.prod(shape)))),
                        dtype=np.float64).reshape(shape)
    att = None
    if draw(st.booleans()):
        att = Attention("uniform", W_V=arr(1, d, d), W_O=arr(1, d, d))
    mlp = MLP(arr(d, m), arr(m), arr(m, d), arr(d)) if m else None
    model = Model(arr(2, d), arr(1, d), arr(n_out, d), (Layer(att, mlp),))
    return model.astype(draw(st.sampled_from([np.float32, np.float64])))


@settings(max_examples=30)
@given(model=integer_models())
def test_integer_mode_equals_exact_integers_for_float32_and_float64_storage(model):
    tokens = np.array([[2, 0], [2, 1], [0, 1]])
    answers = np.array([0, 1, 1]) % model.n_out
    try:
        result = check_queries(model, tokens, answers, integer=True, keep=True)
    except IntegerModeError:
        return  # refused: never a wrong number
    exact = exact_margins(model, tokens, answers)
    assert result.margins is not None
    assert [Fraction(float(v)) for v in result.margins] == exact
    assert result.n_correct == sum(m > 0 for m in exact)


# --------------------------------------------------------------- float mode: certified against rationals


@st.composite
def float_models(draw, dtype=None):
    """Small one-layer models with adversarial numbers: huge values that cancel, duplicated read-out rows
    (constructed ties), tiny ones; uniform or hard attention, optional positions."""
    d, m, n_out = draw(st.integers(1, 3)), draw(st.integers(0, 3)), draw(st.integers(2, 3))
    special = [0.0, 1.0, -1.0, 2.0**53, -2.0**53, 2.0**24, 3.0, 1e-30, 0.1]
    values = st.one_of(st.floats(-4, 4, width=32), st.sampled_from(special))

    def arr(*shape):
        n = int(np.prod(shape))
        return np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64).reshape(shape)
    kind = draw(st.sampled_from(["none", "uniform", "hard"]))
    P = arr(2, d) if draw(st.booleans()) else None
    att = None
    if kind == "uniform":
        att = Attention("uniform", W_V=arr(1, d, d), W_O=arr(1, d, d))
    elif kind == "hard":
        att = Attention("hard", W_V=arr(1, d, d), W_O=arr(1, d, d), W_Q=arr(1, d, 1), W_K=arr(1, d, 1))
    mlp = MLP(arr(d, m), arr(m), arr(m, d), arr(d)) if m else None
    U = arr(n_out, d)
    if draw(st.booleans()):
        U[1] = U[0]  # a constructed tie between outputs 0 and 1
    model = Model(arr(2, d), arr(1, d), U, (Layer(att, mlp),), position_embedding=P)
    return model.astype(dtype or draw(st.sampled_from([np.float32, np.float64])))


TOKENS = np.array([[2, 0], [2, 1], [0, 1], [1, 0]])


# On purpose: float_models draws entries up to 2^53 and casts some models to float32, whose products then
# overflow to inf (and inf − inf to nan) in the float pass and its bounds. That is the case under test: the
# bound becomes infinite, the query is re-decided exactly, and the verdict must still match the rationals.
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                            "ignore:invalid value encountered:RuntimeWarning")
@settings(max_examples=40)
@given(model=float_models(),
       paths=st.sampled_from([("dense", "dense"), ("auto", "auto"), ("dense", "auto"), ("tables", "dense")]))
def test_float_verdicts_are_certified_by_exact_rationals(model, paths):
    answers = np.array([0, 1, 0, 1]) % model.n_out
    forward_, decoder = paths
    try:
        result = check_queries(model, TOKENS, answers, keep=True, forward=forward_, decoder=decoder)
    except InputError as exc:  # the tables asked for where they do not apply: said so, nothing computed
        assert "does not apply" in str(exc)
        return
    assert_sound(result, exact_margins(model, TOKENS, answers))


def test_the_forward_error_bound_contains_the_exact_logits():
    # catastrophic cancellation in the MLP: computed logits are off, the bound covers them
    W1 = np.array([[1.0, 1.0]])
    model = Model(np.array([[2.0**53], [1.0]]), np.array([[-2.0**53 + 1]]), np.array([[1.0], [0.0]]),
                  (Layer(Attention("uniform", W_V=np.ones((1, 1, 1)), W_O=np.full((1, 1, 1), 2.0)),
                         MLP(W1, np.array([3.0, -1.0]), np.array([[1.0], [-1.0]]), np.zeros(1))),))
    logits, err = forward(model, TOKENS[:, ::-1] % 3, errors=True)
    exact = exact_logits(model, TOKENS[:, ::-1] % 3)
    for row, e_row, x_row in zip(logits, err, exact):
        for value, e, x in zip(row, e_row, x_row):
            assert abs(Fraction(float(value)) - x) <= Fraction(float(e))


def test_interval_softmax_contains_the_exact_weights():
    rng = np.random.default_rng(0)
    for _ in range(50):
        s = rng.normal(size=(1, 5)) * 10
        delta = np.abs(rng.normal(size=(1, 5))) * 1e-3
        shifted = s + rng.uniform(-1, 1, size=s.shape) * delta  # some exact scores in the box
        w_hat = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
        w_true = np.exp(shifted - shifted.max()) / np.exp(shifted - shifted.max()).sum()
        err = softmax_weight_error(s, delta, w_hat, np.ones_like(s, dtype=bool))
        assert np.all(np.abs(w_true - w_hat) <= err * (1 + 1e-9))
    # a broken (too small) bound is caught by the same comparison
    assert np.any(np.abs(w_true - w_hat) > err * 1e-6)


# --------------------------------------------------------- one function: every construction, every path


def _paths(model, tokens, answers, integer):
    out = []
    for forward_ in ("dense", "tables"):
        for decoder in ("dense", "hypercube"):
            try:
                out.append(check_queries(model, tokens, answers, integer=integer, forward=forward_,
                                         decoder=decoder, keep=True))
            except Exception as exc:  # a path that does not apply says so (InputError), nothing else
                assert "does not apply" in str(exc), exc
    return out


def _same(results, integer):
    first = results[0]
    for r in results[1:]:
        assert (r.n_correct, r.n_undecided, r.n_wrong) == (first.n_correct, first.n_undecided, first.n_wrong)
        assert np.array_equal(r.predictions, first.predictions)
        if integer:
            assert np.array_equal(r.margins, first.margins)
        else:  # certified lower bounds of the same exact margins
            assert np.all(np.abs(r.margins - first.margins) <= r.rounding_bound + first.rounding_bound)


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda s: s.id)
def test_every_construction_gives_the_same_verdict_on_every_path(spec):
    k = 1 if spec.hops == "single" else 2
    task = task_for_seed(16, 2, 0)
    for integer in ((False, True) if "integer" in spec.options else (False,)):
        built = spec.build(task, k, **({"integer": True} if integer else {}))
        if spec.decoding == "greedy":
            tokens, targets = queries(task, k)[0], teacher_forcing(task, k)[1]
            results = []
            for forward_ in ("dense", "tables"):
                for decoder in ("dense", "hypercube"):
                    results.append(check_decoding(built.model, tokens, targets, forward=forward_,
                                                  decoder=decoder, keep=True))
            assert all(r.exact for r in results)
            _same(results, False)
            continue
        tokens, answers = queries(task, k)
        for dtype in (("float64",) if integer else ("float64", "float32")):
            results = _paths(built.model.astype(dtype), tokens, answers, integer)
            assert len(results) >= 2 and all(r.exact for r in results), [r.forward for r in results]
            _same(results, integer)


def test_the_readout_clamp_is_bounded_and_documented_as_inexact():
    """Issue 18, item 4: where every wrong-class probability is below e^-60 the structured read-out's
    gradient is of order e^-60, not the exact (much smaller) one; the difference stays within the documented
    bound c·e^-60·|U_j − U_a| summed over the wrong classes."""
    from georecall.training.train_structured import readout_cross_entropy

    n, n_out = 4, 5
    U = np.eye(n_out)  # the logits are y itself
    answers = np.arange(n) % n_out
    y = np.zeros((n, n_out))
    y[np.arange(n), answers] = 100.0  # every wrong class e^-100 below the answer
    z = y @ U.T
    _, _, dy, _ = readout_cross_entropy(y, U, answers, want_U=False)
    shifted = z - z.max(axis=1, keepdims=True)
    p = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)  # float64: no underflow at e^-100
    p[np.arange(n), answers] -= 1
    exact = p @ U / n
    bound = np.exp(-60) * np.abs(U[None, :, :] - U[answers][:, None, :]).sum(axis=1) / n
    assert np.all(np.abs(dy - exact) <= bound * (1 + 1e-6))
    assert np.max(np.abs(dy)) > 1e6 * np.max(np.abs(exact))  # not equal: the clamp floor dominates


@settings(max_examples=60)
@given(D=st.integers(1, 3), lam=st.sampled_from([1.0, 0.5, 3.0, 1 / 3]), data=st.data())
def test_hypercube_certified_interval_contains_every_exact_margin_in_the_box(D, lam, data):
    from itertools import product

    from georecall.verify.checking.decoders import detect_hypercube, hypercube_certify

    signs = np.array(list(product([-1.0, 1.0], repeat=D)))
    cube, _ = detect_hypercube(lam * signs)
    assert cube is not None
    n = data.draw(st.integers(1, 4))
    vals = st.one_of(st.floats(-3, 3, width=32), st.sampled_from([0.0, 1e-30, 2.0**53, 1.0, -1.0]))
    v = np.array(data.draw(st.lists(st.lists(vals, min_size=D, max_size=D), min_size=n, max_size=n)))
    e = np.array(data.draw(st.lists(st.sampled_from([0.0, 1e-12, 0.5, 1.0]), min_size=D, max_size=D)))
    answers = np.array(data.draw(st.lists(st.integers(0, 2**D - 1), min_size=n, max_size=n)))
    cert = hypercube_certify(cube, v, e, answers, 2.0**-53, 2.0**-1074)
    S = [[Fraction(float(x)) for x in row] for row in lam * signs]
    for q in range(n):
        a = answers[q]
        for corner in product([-1, 0, 1], repeat=D):  # the box's corners, faces and centre
            vt = [Fraction(float(v[q, i])) + c * Fraction(float(e[i])) for i, c in enumerate(corner)]
            logits = [sum((s * x for s, x in zip(row, vt)), Fraction(0)) for row in S]
            m = logits[a] - max(x for j, x in enumerate(logits) if j != a)
            assert cert.lo[q] == -np.inf or Fraction(float(cert.lo[q])) <= m, (q, corner)
            assert cert.hi[q] == np.inf or m <= Fraction(float(cert.hi[q])), (q, corner)


def test_the_checker_counts_the_double_rounding_of_mixed_storage_formats():
    """A float32 model with a float64 read-out: the checker's unit roundoff is the forward pass's
    u_f32 + 2·u_f64 (a value rounded in float64, then again in float32), written out here by hand, not the
    float32 roundoff alone (what the checker used before it took the forward pass's working_format)."""
    import numpy as np

    from georecall.constructions.model import Model
    from georecall.verify.checking import check

    f32 = np.float32
    mixed = Model(np.ones((2, 2), f32), np.ones((1, 2), f32), np.ones((2, 2), np.float64))
    u, _ = check._working_format(mixed, False)
    assert u == 2.0**-24 + 2 * 2.0**-53
    single = Model(np.ones((2, 2), f32), np.ones((1, 2), f32), np.ones((2, 2), f32))
    assert check._working_format(single, False)[0] == 2.0**-24
