"""A stored model's numbers are its own (issue 32): ``verify.checking.exact`` against independent references.

References: the rational forward pass of ``test_soundness`` (``fractions.Fraction``; uniform and hard
attention) and, for softmax, the plain formula in ``mpmath`` at 60 digits (another library's arithmetic; not a
proof, but 60 digits is far below any margin the assertions read).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_soundness import exact_margins as rational_margins

from georecall.constructions import registry
from georecall.constructions.model import MLP, Attention, Layer, Model
from georecall.errors import InputError
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries
from georecall.verify.checking.check import check_queries
from georecall.verify.checking.exact import evaluate, exact_margins

# ------------------------------------------------------------------------------------------- models


@st.composite
def small_models(draw, kinds=("none", "uniform", "hard")):
    """Models of width <= 4 with values that make rounding matter (2^53, 1/3, 1e-30, float32 values)."""
    d, n_out, n_layers = draw(st.integers(1, 4)), draw(st.integers(2, 4)), draw(st.integers(1, 2))
    values = st.floats(-4, 4, width=32) | st.sampled_from(
        [0.0, 1.0, -1.0, 2.0**53, -(2.0**53), 2.0**24 + 1, 3.0, 1e-30, 0.1, 1 / 3])

    def arr(*shape):
        n = int(np.prod(shape))
        return np.array(draw(st.lists(values, min_size=n, max_size=n)), dtype=np.float64).reshape(shape)

    layers = []
    for _ in range(n_layers):
        kind = draw(st.sampled_from(kinds))
        att = None
        if kind == "uniform":
            att = Attention("uniform", W_V=arr(1, d, d), W_O=arr(1, d, d))
        elif kind in ("hard", "softmax"):
            att = Attention(kind, W_V=arr(1, d, d), W_O=arr(1, d, d), W_Q=arr(1, d, 1), W_K=arr(1, d, 1),
                            inverse_temperature=draw(st.sampled_from([1.0, 0.5, 3.0])))
        m = draw(st.integers(0, 3))
        layers.append(Layer(att, MLP(arr(d, m), arr(m), arr(m, d), arr(d)) if m else None))
    U = arr(n_out, d)
    if draw(st.booleans()):
        U[1] = U[0]  # a constructed tie
    P = arr(3, d) if draw(st.booleans()) else None
    model = Model(arr(3, d), arr(2, d), U, tuple(layers), position_embedding=P)
    dtype = draw(st.sampled_from([np.float16, np.float32, np.float64]))
    if not all(np.all(np.abs(a) < np.finfo(dtype).max) for a in model.arrays().values()):
        dtype = np.float64  # (a value beyond float16's range)
    return model.astype(dtype)


def _queries(data, model):
    T = data.draw(st.integers(1, 3))
    tokens = np.array(data.draw(st.lists(st.lists(st.integers(0, 4), min_size=T, max_size=T), min_size=1,
                                         max_size=4)))
    answers = np.array(data.draw(st.lists(st.integers(0, model.n_out - 1), min_size=len(tokens),
                                          max_size=len(tokens))))
    return tokens, answers


def _scale(model, tokens) -> list[Fraction]:
    from test_soundness import exact_logits
    return [max(abs(v) for v in row) for row in exact_logits(model, tokens)]


# ------------------------------------------------------------------------------------ rational models


@settings(max_examples=40)
@given(data=st.data())
def test_every_query_is_decided_as_exact_arithmetic_decides_it(data):
    model = data.draw(small_models())
    tokens, answers = _queries(data, model)
    exact = rational_margins(model, tokens, answers)
    scale = _scale(model, tokens)
    for forward_ in ("auto", "dense", "tables"):
        try:
            result = evaluate(model, tokens, answers, keep=True, forward=forward_)
        except InputError:
            continue  # the tables do not apply to this model
        assert result.n_undecided == 0 and result.arith == "exact"
        assert result.n_correct == sum(m > 0 for m in exact)
        lo, hi = result.margins, result.margin_highs
        for q, m in enumerate(exact):
            if m == Fraction(10**9):  # (the reference's "one output")
                continue
            assert Fraction(float(lo[q])) <= m <= Fraction(float(hi[q])), (forward_, q, lo[q], hi[q], m)
            if m > Fraction(1, 10**9) * scale[q]:  # tight: the certified lower end within 0.1% of exact
                assert Fraction(float(lo[q])) >= Fraction(999, 1000) * m, (forward_, q, lo[q], m)


def test_a_float_tie_is_decided_wrong_exactly_where_the_float_bound_leaves_it_open():
    """3 + 2^53 − 2^53 is exactly 3: the margin is exactly 0, a failure; float64 alone cannot tell."""
    model = Model(np.array([[3.0, 2.0**53, 2.0**53]]), np.zeros((1, 3)), np.array([[1.0, 1, -1], [1, 0, 0]]))
    tokens, answers = np.array([[0]]), np.array([0])
    stored = check_queries(model, tokens, answers)
    assert stored.n_undecided == 1  # the positive control: the float bound alone leaves it open
    result = evaluate(model, tokens, answers, keep=True)
    assert (result.n_correct, result.n_undecided, result.n_redecided) == (0, 0, 1)
    assert result.margins[0] == result.margin_highs[0] == 0.0


def test_exact_margins_round_outward_to_the_nearest_floats():
    model = Model(np.array([[1.0, 1 / 3]]), np.zeros((1, 2)), np.array([[0.0, 3.0], [1.0, 0.0]]))
    cert = exact_margins(model, np.array([[0]]), np.array([0]))
    exact = Fraction(1 / 3) * 3 - 1  # 3·fl(1/3) − 1: a tiny negative rational, not a float64 product
    assert Fraction(float(cert.lo[0])) <= exact <= Fraction(float(cert.hi[0]))
    assert np.nextafter(cert.lo[0], np.inf) >= cert.hi[0]  # at most one float apart


# ------------------------------------------------------------------------------------------- softmax


def _mp_margins(model: Model, tokens, answers, dps: int = 60) -> list:
    """The plain formula in mpmath at ``dps`` digits (softmax attention included)."""
    import mpmath

    mp = mpmath.mp.clone() if hasattr(mpmath.mp, "clone") else mpmath.mp
    mp.dps = dps
    f = np.vectorize(lambda v: mp.mpf(float(v)), otypes=[object])
    E, Q, U = f(model.entity_embedding), f(model.relation_embedding), f(model.full_unembedding())
    P = None if model.position_embedding is None else f(model.position_embedding)
    out = []
    for seq, a in zip(np.asarray(tokens), np.asarray(answers)):
        xs = np.array([E[t] if t < model.n_entities else Q[t - model.n_entities] for t in seq])
        if P is not None:
            xs = xs + P[: len(seq)]
        for layer in model.layers:
            att = layer.attention
            ys = xs.copy()
            if att is not None:
                for h in range(att.heads):
                    for t in range(len(seq)):
                        if att.kind == "uniform":
                            w = [mp.mpf(1) / (t + 1)] * (t + 1)
                        else:
                            beta = mp.mpf(float(att.inverse_temperature))
                            q = xs[t] @ f(att.W_Q[h])
                            s = [beta * (q @ (xs[u] @ f(att.W_K[h]))) for u in range(t + 1)]
                            if att.kind == "softmax":
                                e = [mp.exp(v - max(s)) for v in s]
                                w = [v / sum(e) for v in e]
                            else:
                                hits = [u for u in range(t + 1) if s[u] == max(s)]
                                w = [mp.mpf(1) / len(hits) if u in hits else 0 for u in range(t + 1)]
                        z = sum((w[u] * xs[u] for u in range(t + 1)), np.zeros(xs.shape[1], dtype=object))
                        ys[t] = ys[t] + (z @ f(att.W_V[h])) @ f(att.W_O[h])
            if layer.mlp is not None:
                mlp = layer.mlp
                hid = np.array([max(v, 0) for v in (ys @ f(mlp.W1) + f(mlp.b1)).ravel()],
                               dtype=object).reshape(ys.shape[0], -1)
                ys = ys + hid @ f(mlp.W2) + f(mlp.b2)
            xs = ys
        logits = xs[-1] @ U.T
        out.append(logits[a] - max(v for j, v in enumerate(logits) if j != a))
    return out


@settings(max_examples=15)
@given(data=st.data())
def test_softmax_models_agree_with_sixty_digits(data):
    model = data.draw(small_models(kinds=("none", "softmax", "uniform")))
    tokens, answers = _queries(data, model)
    reference = _mp_margins(model, tokens, answers)
    result = evaluate(model, tokens, answers, keep=True)
    # every query forced through the exact path too (the float64 pass usually decides them all)
    forced = exact_margins(model, tokens, answers)
    for q, m in enumerate(reference):
        for lo, hi in ((result.margins[q], result.margin_highs[q]), (forced.lo[q], forced.hi[q])):
            assert float(lo) <= float(m) + 1e-40 and float(hi) >= float(m) - 1e-40, (q, lo, hi, m)
            if abs(m) > 1e-30:
                assert (lo > 0) == (m > 0) or not (lo <= 0 < hi)


def test_a_softmax_margin_of_two_to_the_minus_52_is_decided_by_the_interval_softmax():
    """Two logits that differ by 2^-52 after a softmax over two positions: float64's bound leaves the query
    open (the positive control below), the interval softmax decides it."""
    # one head reading two positions; the value path writes coordinate 1 weighted by the softmax weights
    E = np.array([[1.0, 0.0], [0.0, 0.0]])
    Q = np.array([[0.0, 0.0]])
    W_Q = np.array([[[1.0], [0.0]]])
    W_K = np.array([[[1.0], [0.0]]])
    W_V = np.array([[[0.0, 0.0], [0.0, 0.0]]])
    W_V[0, 0, 0] = 1.0
    W_O = np.array([[[0.0, 1.0], [0.0, 0.0]]])
    att = Attention("softmax", W_V=W_V, W_O=W_O, W_Q=W_Q, W_K=W_K)
    # logit_0 = x_1 (the softmax-weighted value), logit_1 = c with c just below it
    tokens = np.array([[0, 0]])  # both positions entity 0: weights (1/2, 1/2), z = 1 -> x_1 = 1
    U = np.array([[0.0, 1.0], [0.0, 1.0 - 2.0**-52]])
    model = Model(E, Q, U, (Layer(att, None),))
    assert check_queries(model, tokens, np.array([0])).n_undecided == 1
    result = evaluate(model, tokens, np.array([0]), keep=True)
    assert result.n_correct == 1 and result.n_undecided == 0 and result.n_redecided == 1
    assert Fraction(float(result.margins[0])) <= Fraction(2) ** -52 <= Fraction(float(result.margin_highs[0]))


def test_equal_readout_rows_after_a_softmax_are_an_exact_tie():
    E = np.array([[1.0, 0.5], [0.25, 0.0]])
    att = Attention("softmax", W_V=np.ones((1, 2, 2)) / 3, W_O=np.ones((1, 2, 2)), W_Q=np.ones((1, 2, 1)),
                    W_K=np.ones((1, 2, 1)))
    model = Model(E, np.zeros((1, 2)), np.array([[1.0, 2.0], [1.0, 2.0]]), (Layer(att, None),))
    cert = exact_margins(model, np.array([[0, 1]]), np.array([0]))
    assert cert.lo[0] == cert.hi[0] == 0.0


# ------------------------------------------------------------------------------- storage and arith


def _trained_model():
    from georecall.training.parameters import init_model
    from georecall.training.train import train, training_data

    task = task_for_seed(16, 2, 0)
    tokens, answers, positions, _ = training_data(task, 1, False)
    model = init_model(16, 2, 16, 32, attention="softmax", heads=2, rng=np.random.default_rng(0),
                       dtype=np.dtype(np.float32))
    result = train(model, tokens, answers, steps=300, lr=3e-2, rng=np.random.default_rng(1),
                   dtype=np.dtype(np.float32))
    return result.model, task


@pytest.fixture(scope="module")
def trained():
    return _trained_model()


def _exact_copies(model: Model) -> dict:
    """The copies of ``model`` in float16, float32 and float64 that hold exactly its values."""
    out = {}
    for dtype in (np.float16, np.float32, np.float64):
        copy = model.astype(dtype)
        if all(np.array_equal(copy.arrays()[k].astype(np.float64), v.astype(np.float64))
               for k, v in model.arrays().items()):
            out[np.dtype(dtype).name] = copy
    return out


@pytest.mark.parametrize("source", ["trained", "geometric", "associative"])
def test_storage_does_not_change_answers(source, trained):
    if source == "trained":
        model, task = trained
        model = model.astype(np.float16)  # the float16 values: exact in float32 and float64 too
    else:
        task = task_for_seed(16, 2, 0)
        model = registry.get(source).build(task).model
    copies = _exact_copies(model)
    assert len(copies) >= 2, "the positive control: at least two exact copies"
    tokens, answers = queries(task, 1)
    results = {name: evaluate(m, tokens, answers, keep=True) for name, m in copies.items()}
    first = next(iter(results.values()))
    for name, r in results.items():
        assert r.n_undecided == 0
        assert (r.n_correct, r.min_margin) == (first.n_correct, first.min_margin), name
        assert np.array_equal(r.predictions, first.predictions) and np.array_equal(r.margins, first.margins)


def test_a_float32_file_and_its_float64_copy_get_the_same_eval_probe_and_transfer(tmp_path, trained, capsys):
    import json

    from georecall.cli import main
    from georecall.constructions.storage import save_model

    model, task = trained
    docs = {}
    for dtype in ("float32", "float64"):
        path = save_model(model.astype(dtype), str(tmp_path / f"m{dtype}.npz"),
                          extra_arrays={"task_table": task.table})
        for command in (["eval"], ["probe", "--subjects", "4"], ["transfer", "--steps", "5"]):
            assert main(command + [path, "--json"]) == 0
            doc = json.loads(capsys.readouterr().out)
            for key in ("params", "memory", "model", "seconds", "dtype", "stored_dtype", "fingerprint",
                        "saved_fingerprint"):  # the stored bytes differ by dtype
                doc.pop(key, None)
            docs.setdefault(command[0], []).append(json.dumps(doc, sort_keys=True, default=str))
    for command, (a, b) in docs.items():
        assert a == b, command


def test_arith_gives_a_dtypes_own_verdict_labelled():
    task = task_for_seed(16, 2, 0)
    model = registry.get("geometric").build(task).model
    tokens, answers = queries(task, 1)
    as_float16 = evaluate(model, tokens, answers, arith="float16", keep=True)
    assert as_float16.arith == "float16" and as_float16.mode == "float with bound"
    assert evaluate(model, tokens, answers).mode.startswith("exact")
    with pytest.raises(InputError, match="arith"):
        evaluate(model, tokens, answers, arith="float8")


def test_eval_arith_float32_is_labelled_in_text_and_json(tmp_path, capsys):
    import json

    from georecall.cli import main
    from georecall.constructions.storage import save_model

    task = task_for_seed(16, 2, 0)
    path = save_model(registry.get("geometric").build(task).model, str(tmp_path / "g1.npz"),
                      extra_arrays={"task_table": task.table})
    assert main(["eval", path, "--arith", "float32", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["arith"] == "float32" and "float32 computation" in doc["margin_kind"]
    assert main(["eval", path]) == 0
    text = capsys.readouterr().out
    assert "exact arithmetic of the stored weights" in text and "re-decided exactly" in text


def test_eval_counts_the_exact_redecision_in_its_memory_estimate(tmp_path, capsys):
    import json

    from georecall.cli import main
    from georecall.constructions.storage import save_model

    task = task_for_seed(16, 2, 0)
    path = save_model(registry.get("geometric").build(task).model.astype(np.float32),
                      str(tmp_path / "g1.npz"), extra_arrays={"task_table": task.table})
    assert main(["eval", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    labels = json.dumps(doc["memory"])
    assert "exact re-decision" in labels and "cast to float64" in labels


def test_chains_that_the_float_bound_leaves_open_are_decoded_again_exactly():
    """C1 with the read-out rows of entities 0 and 1 made equal: a chain whose true token is 0 or 1 at some
    step ties there (exact margin 0: wrong), every other chain is right. float64 alone leaves the ties
    open."""
    from georecall.theory.tokens import teacher_forcing

    task = task_for_seed(16, 2, 0)
    model = registry.get("cot").build(task, 2).model.with_dense_readout()
    U = model.full_unembedding().copy()
    U[1] = U[0]
    tied = model.replace(unembedding=U)
    from georecall.verify.checking.check import check_decoding

    prompts, chains = queries(task, 2)[0], teacher_forcing(task, 2)[1]

    stored = check_decoding(tied, prompts, chains)
    assert stored.n_undecided > 0  # the positive control
    result = evaluate(tied, prompts, chains, decode=True, keep=True)
    expected = int((~np.isin(chains, [0, 1]).any(axis=1)).sum())
    assert result.n_undecided == 0 and result.n_redecided == stored.n_undecided
    assert result.n_correct == expected and 0 < expected < len(chains)


def test_check_decides_exactly_the_cot_chains_a_large_beta_leaves_open():
    """At β = 1e20 the float64 bound of C1's softmax exceeds every margin (the positive control: the
    float-only pass leaves every chain open), yet the model is right: ``check`` decides the open chains and
    steps exactly, as it does a last-token construction's, and passes with the exact margin."""
    import georecall as gr
    from georecall.theory.tokens import teacher_forcing
    from georecall.verify.checking.check import check_decoding

    task = task_for_seed(8, 2, 0)
    built = gr.build("cot", task, beta=1e20)
    prompts, chains = queries(task, 2)[0], teacher_forcing(task, 2)[1]
    assert check_decoding(built.model, prompts, chains).n_undecided == len(chains)  # float alone: all open
    report = gr.check("cot", N=8, R=2, beta=1e20)
    check = report.to_dict()["check"]
    assert report.passed and check["n_undecided"] == 0 and check["n_redecided"] == len(chains)
    assert check["min_margin"] == pytest.approx(built.promise.margin, rel=1e-12)


def test_eval_help_and_the_format_doc_say_what_accuracy_and_margin_mean(capsys):
    import os

    from georecall.cli import main

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = capsys.readouterr().out
    assert "accuracy  the share of queries whose exact margin is > 0" in text and "Example: accuracy" in text
    assert "reported as an interval [lo, hi]" in text and "Example: margins" in text
    doc = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                            "model_format.md"), encoding="utf-8").read()
    assert "## What a stored model computes: accuracy and margins" in doc and "Example:" in doc


def test_train_reports_the_trained_weights_exact_accuracy(capsys):
    import json

    from georecall.cli import main

    code = main(["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "300", "--json", "--quiet"])
    assert code in (0, 1)
    doc = json.loads(capsys.readouterr().out)
    final = doc["final_accuracy"]
    assert final["arith"] == "exact" and final["n_undecided"] == 0 and final["queries"] == 16
    assert doc["reached"] == (final["n_correct"] == 16)
