"""The forward pass against a naive reference written independently: loops over queries and positions,
explicit softmax, no chunking, no column skipping."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.arithmetic import IntegerModeError, integer_bounds
from georecall.constructions.decoding import greedy_decode, predict
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Attention, Layer, Model


def reference_logits(model: Model, seq) -> np.ndarray:
    """Logits at every position of one sequence, computed the slow, obvious way."""
    N = model.n_entities
    xs = []
    for t, tok in enumerate(seq):
        v = model.entity_embedding[tok] if tok < N else model.relation_embedding[tok - N]
        if model.position_embedding is not None:
            v = v + model.position_embedding[t]
        xs.append(np.array(v, dtype=np.float64))
    for layer in model.layers:
        att = layer.attention
        if att is not None:
            new = []
            for t in range(len(xs)):
                total = np.zeros_like(xs[t])
                for h in range(att.heads):
                    if att.kind == "uniform":
                        w = np.full(t + 1, 1.0 / (t + 1))
                    else:
                        q = xs[t] @ att.W_Q[h]
                        s = np.array(
                            [att.inverse_temperature * (q @ (xs[u] @ att.W_K[h])) for u in range(t + 1)]
                        )
                        if att.kind == "softmax":
                            w = np.exp(s - s.max())
                            w /= w.sum()
                        else:
                            w = (s == s.max()).astype(float)
                            w /= w.sum()
                    for u in range(t + 1):
                        total += w[u] * (xs[u] @ att.W_V[h] @ att.W_O[h])
                new.append(xs[t] + total)
            xs = new
        if layer.mlp is not None:
            mlp = layer.mlp
            xs = [x + np.maximum(x @ mlp.W1 + mlp.b1, 0) @ mlp.W2 + mlp.b2 for x in xs]
    return np.array([model.unembedding @ x for x in xs])


def random_model(rng, N, R, d, m, layers, kind, heads, positions, T, sparse_readout=False):
    def att():
        dk = max(1, d // 2)
        if kind == "uniform":
            return Attention(
                "uniform", W_V=rng.normal(size=(heads, d, dk)), W_O=rng.normal(size=(heads, dk, d))
            )
        return Attention(
            kind,
            W_V=rng.normal(size=(heads, d, dk)),
            W_O=rng.normal(size=(heads, dk, d)),
            W_Q=rng.normal(size=(heads, d, dk)),
            W_K=rng.normal(size=(heads, d, dk)),
            inverse_temperature=float(rng.uniform(0.1, 2.0)),
        )

    U = rng.normal(size=(N, d))
    if sparse_readout:
        U[:, : d - 2] = 0.0
    return Model(
        entity_embedding=rng.normal(size=(N, d)),
        relation_embedding=rng.normal(size=(R, d)),
        unembedding=U,
        layers=tuple(
            Layer(
                att(),
                MLP(rng.normal(size=(d, m)), rng.normal(size=m), rng.normal(size=(m, d)), rng.normal(size=d)),
            )
            for _ in range(layers)
        ),
        position_embedding=rng.normal(size=(T, d)) if positions else None,
    )


@given(
    N=st.integers(2, 9),
    R=st.integers(1, 4),
    d=st.integers(2, 8),
    m=st.integers(1, 10),
    layers=st.integers(0, 3),
    kind=st.sampled_from(["uniform", "softmax", "hard"]),
    heads=st.integers(1, 3),
    positions=st.booleans(),
    T=st.integers(1, 5),
    sparse=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_forward_matches_naive_reference(N, R, d, m, layers, kind, heads, positions, T, sparse, seed):
    rng = np.random.default_rng(seed)
    model = random_model(rng, N, R, d, m, layers, kind, heads, positions, T, sparse and d > 3)
    tokens = rng.integers(0, N + R, size=(6, T))
    expected = np.stack([reference_logits(model, seq) for seq in tokens])
    np.testing.assert_allclose(forward(model, tokens, at="all"), expected, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(forward(model, tokens), expected[:, -1], rtol=1e-9, atol=1e-9)
    logits, trace = forward(model, tokens, trace=True)
    assert len(trace.residual) == 1 + 2 * layers and len(trace.hidden) == layers
    np.testing.assert_allclose(logits, expected[:, -1], rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(predict(model, tokens, chunk=4), expected[:, -1].argmax(axis=1))


def test_greedy_decode_feeds_predictions_back():
    rng = np.random.default_rng(3)
    model = random_model(rng, 6, 2, 5, 7, 2, "softmax", 2, True, 6)
    prompts = rng.integers(0, 8, size=(5, 2))
    generated, margins = greedy_decode(model, prompts, 3)
    seq = prompts.copy()
    for t in range(3):
        logits = np.stack([reference_logits(model, s)[-1] for s in seq])
        assert np.array_equal(generated[:, t], logits.argmax(axis=1))
        top = np.sort(logits, axis=1)
        np.testing.assert_allclose(margins[:, t], top[:, -1] - top[:, -2], rtol=1e-9)
        seq = np.concatenate([seq, generated[:, t : t + 1]], axis=1)


def test_model_validation_messages():
    E, Q, U = np.zeros((4, 3)), np.zeros((2, 3)), np.zeros((4, 3))
    with pytest.raises(ValueError, match="relation_embedding has width 2"):
        Model(E, np.zeros((2, 2)), U)
    with pytest.raises(ValueError, match="non-finite"):
        Model(E, Q, np.full((4, 3), np.nan))
    with pytest.raises(ValueError, match="MLP shapes disagree"):
        MLP(np.zeros((3, 2)), np.zeros(3), np.zeros((2, 3)), np.zeros(3))
    with pytest.raises(ValueError, match="uniform attention takes no W_Q"):
        Attention(
            "uniform",
            np.zeros((1, 3, 3)),
            np.zeros((1, 3, 3)),
            W_Q=np.zeros((1, 3, 3)),
            W_K=np.zeros((1, 3, 3)),
        )
    with pytest.raises(ValueError, match="inverse temperature"):
        Attention(
            "softmax", np.zeros((1, 3, 3)), np.zeros((1, 3, 3)), np.zeros((1, 3, 3)), np.zeros((1, 3, 3)), 0.0
        )
    model = Model(E, Q, U)
    with pytest.raises(ValueError, match=r"token ids must lie in \[0, 6\)"):
        forward(model, np.array([[6]]))
    with pytest.raises(ValueError, match="exceeds the model's 1 positions"):
        forward(Model(E, Q, U, position_embedding=np.zeros((1, 3))), np.array([[0, 1]]))


def test_integer_bounds_refuse_what_cannot_be_exact():
    rng = np.random.default_rng(0)
    model = random_model(rng, 4, 2, 3, 3, 1, "uniform", 1, False, 2)
    with pytest.raises(IntegerModeError, match="not integral"):
        integer_bounds(model, 2)
    big = Model(np.full((2, 2), 2.0**30), np.ones((1, 2)), np.full((2, 2), 2.0**30))
    with pytest.raises(IntegerModeError, match="logits"):
        integer_bounds(big, 1)
    soft = random_model(rng, 4, 2, 3, 3, 1, "softmax", 1, False, 2)
    soft = soft.astype(np.float64)
    with pytest.raises(IntegerModeError):
        integer_bounds(soft, 2)


def test_integer_mode_detects_an_inexact_division():
    # uniform attention over 3 positions with W_V W_O = I: sums of integers divided by 3 are not integers.
    E = np.array([[1.0], [0.0]])
    model = Model(
        E,
        np.zeros((0, 1)),
        np.ones((2, 1)),
        layers=(Layer(Attention("uniform", np.ones((1, 1, 1)), np.ones((1, 1, 1)))),),
    )
    integer_bounds(model, 3)  # the weights are integers and small ...
    with pytest.raises(IntegerModeError, match="attention output is not integral"):
        forward(model, np.array([[0, 1, 1]]), integer=True)  # ... but 1/3 is not


def test_save_model_is_atomic_and_reports_the_path_written(tmp_path, monkeypatch):
    from georecall.constructions.single_hop import build_g1
    from georecall.constructions.storage import load_model, save_model
    from georecall.theory.tasks import random_task

    model = build_g1(random_task(8, 2, 0)).model
    path = save_model(model, str(tmp_path / "m"))
    assert path == str(tmp_path / "m.npz") and load_model(path)[0].d == model.d
    before = open(path, "rb").read()

    def torn(handle, **arrays):  # writes half a file, then dies (as a SIGINT during the write would)
        handle.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez_compressed", torn)
    with pytest.raises(KeyboardInterrupt):
        save_model(model, path)
    assert open(path, "rb").read() == before  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.npz"]  # no temporary file left


def test_load_model_names_a_damaged_header(tmp_path):
    from georecall.constructions.storage import load_model

    bad = tmp_path / "bad.npz"
    np.savez(bad, __header__=np.array("{not json"))
    with pytest.raises(ValueError, match="not JSON"):
        load_model(str(bad))
    np.savez(bad, __header__=np.array("[1, 2]"))
    with pytest.raises(ValueError, match="structure"):
        load_model(str(bad))


def test_models_copy_writable_arrays_and_take_frozen_ones_as_they_are():
    from georecall.constructions.model import Model

    E = np.ones((3, 2))
    frozen = np.ones((3, 2))
    frozen.setflags(write=False)
    model = Model(E, np.zeros((1, 2)), frozen)
    E[0, 0] = 5.0  # the caller's array changes; the model's does not
    assert model.entity_embedding[0, 0] == 1.0 and not model.entity_embedding.flags.writeable
    assert model.unembedding is frozen  # no copy of a table that is already read-only
    bad = np.ones((3, 2))
    bad[2, 1] = np.nan
    bad.setflags(write=False)
    with pytest.raises(ValueError, match="non-finite"):
        Model(np.ones((3, 2)), np.zeros((1, 2)), bad)
