"""The structure-aware training step against the dense reference (issue 14; docs/training.md)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.single_hop import single_hop_queries
from georecall.theory.tasks import random_task
from georecall.training.backward import loss_and_grads
from georecall.training.parameters import init_model
from georecall.training.train import GROUPS, train, training_data
from georecall.training.train_structured import (
    loss_and_grads_structured,
    readout_cross_entropy,
    structure_reason,
)


def _assert_same_gradients(dense, structured, rtol):
    """Same keys; each gradient equal to ``rtol`` relative to its largest entry (rounding)."""
    assert set(dense) == set(structured)
    for key, value in dense.items():
        assert structured[key].shape == value.shape and structured[key].dtype == value.dtype, key
        scale = max(float(np.abs(value).max()), 1e-300)
        err = float(np.abs(structured[key] - value).max())
        assert err <= rtol * scale, f"{key}: max error {err:.3g} vs scale {scale:.3g}"


@given(N=st.integers(2, 12), R=st.integers(1, 4), d=st.integers(1, 7), m=st.integers(1, 9),
       attention=st.sampled_from(["uniform", "none"]), heads=st.integers(1, 3),
       positions=st.sampled_from([None, 2, 3]), frozen=st.sets(st.sampled_from(GROUPS), max_size=3),
       batch=st.integers(1, 30), full=st.booleans(), chunk=st.integers(1, 7), seed=st.integers(0, 2**31))
def test_structured_gradients_equal_dense(N, R, d, m, attention, heads, positions, frozen, batch, full, chunk,
                                          seed):
    rng = np.random.default_rng(seed)
    model = init_model(N, R, d, m, attention=attention, heads=heads, positions=positions, rng=rng,
                       dtype=np.float64)
    model = model.replace(**{f"layers.0.mlp.{b}": rng.standard_normal(s) * 0.3  # non-zero biases
                             for b, s in (("b1", m), ("b2", d))})
    tokens, answers = single_hop_queries(random_task(N, R, rng))
    if not full:  # a minibatch with repeats, in any order
        pick = rng.integers(0, N * R, size=batch)
        tokens, answers = tokens[pick], answers[pick]
    assert structure_reason(model, tokens) is None
    loss_d, grads_d, pred_d = loss_and_grads(model, tokens, answers, frozen=frozenset(frozen))
    loss_s, grads_s, pred_s = loss_and_grads_structured(model, tokens, answers, frozenset(frozen),
                                                         chunk_rows=chunk)
    assert loss_s == pytest.approx(loss_d, rel=1e-12)
    assert np.array_equal(pred_s, pred_d)
    _assert_same_gradients(grads_d, grads_s, 1e-11)


@given(seed=st.integers(0, 2**31), heads=st.integers(1, 2))
def test_structured_float32_agrees_to_float32_rounding(seed, heads):
    rng = np.random.default_rng(seed)
    model = init_model(64, 4, 16, 32, heads=heads, positions=2, rng=rng)
    tokens, answers = single_hop_queries(random_task(64, 4, rng))
    pick = rng.permutation(256)[:100]
    _, dense, _ = loss_and_grads(model, tokens[pick], answers[pick])
    _, structured, _ = loss_and_grads(model, tokens[pick], answers[pick], path="structured")
    for value in structured.values():
        assert value.dtype == np.float32
    _assert_same_gradients(dense, structured, 2e-5)


def test_the_comparison_can_fail():
    """A wrong structured gradient (the positional constant dropped) is caught."""
    rng = np.random.default_rng(0)
    model = init_model(6, 2, 4, 5, positions=2, rng=rng, dtype=np.float64)
    tokens, answers = single_hop_queries(random_task(6, 2, rng))
    _, dense, _ = loss_and_grads(model, tokens, answers)
    shifted = model.replace(position_embedding=np.zeros_like(model.position_embedding))
    _, wrong, _ = loss_and_grads_structured(shifted, tokens, answers)
    with pytest.raises(AssertionError):
        _assert_same_gradients(dense, wrong, 1e-11)


def test_readout_chunks_and_clamp_do_not_change_results():
    rng = np.random.default_rng(1)
    y = rng.standard_normal((37, 5))
    U = rng.standard_normal((11, 5)) * 40  # logit gaps far beyond the clamp at −60
    answers = rng.integers(0, 11, 37)
    ref = readout_cross_entropy(y, U, answers, True, chunk_rows=37)
    z = y @ U.T
    top = z.max(1)
    exact_loss = np.mean(np.log(np.exp(z - top[:, None]).sum(1)) + top - z[np.arange(37), answers])
    assert ref[0] == pytest.approx(exact_loss, rel=1e-12)
    for chunk in (1, 4, 36):
        other = readout_cross_entropy(y, U, answers, True, chunk_rows=chunk)
        assert other[0] == pytest.approx(ref[0], rel=1e-12) and np.array_equal(other[1], ref[1])
        np.testing.assert_allclose(other[2], ref[2], rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(other[3], ref[3], rtol=1e-12, atol=1e-14)


def test_structure_reasons_and_forced_paths():
    task = random_task(8, 2, 0)
    tokens, answers = single_hop_queries(task)
    uniform = init_model(8, 2, 4, 4, rng=0)
    assert structure_reason(uniform, tokens) is None
    assert "layers" in structure_reason(init_model(8, 2, 4, 4, layers=2, rng=0), tokens)
    softmax = init_model(8, 2, 4, 4, attention="softmax", positions=2, rng=0)
    assert "softmax" in structure_reason(softmax, tokens)
    assert "shape" in structure_reason(uniform, training_data(task, 2)[0])
    assert "pairs" in structure_reason(uniform, tokens[:, ::-1])
    assert "positions" in structure_reason(uniform, tokens, positions=np.array([1]))
    with pytest.raises(ValueError, match="does not apply"):
        loss_and_grads(init_model(8, 2, 4, 4, layers=2, rng=0), tokens, answers, path="structured")
    with pytest.raises(ValueError, match="does not apply"):
        train(init_model(8, 2, 4, 4, layers=2, rng=0), tokens, answers, steps=1, path="structured")
    with pytest.raises(ValueError, match="path"):
        train(uniform, tokens, answers, steps=1, path="fast")


@pytest.mark.parametrize("batch_size", [None, 12])
def test_training_paths_follow_the_same_trajectory(batch_size):
    task = random_task(24, 3, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(24, 3, 8, 16, heads=2, rng=0, dtype=np.float64)
    runs = {path: train(model, tokens, answers, steps=40, lr=1e-2, dtype=np.float64, batch_size=batch_size,
                        rng=0, path=path, stop_at_accuracy=None, weight_decay={"mlp": 0.1})
            for path in ("auto", "dense")}
    assert runs["auto"].path == "structured" and runs["dense"].path == "dense"
    np.testing.assert_allclose(runs["auto"].losses, runs["dense"].losses, rtol=1e-9)
    for key, value in runs["dense"].model.arrays().items():
        np.testing.assert_allclose(runs["auto"].model.arrays()[key], value, rtol=1e-7, atol=1e-9)


def test_structured_training_reaches_100_percent_with_a_tied_readout():
    task = random_task(32, 2, 1)
    tokens, answers = single_hop_queries(task)
    result = train(init_model(32, 2, 16, 64, rng=1, tied_readout=True), tokens, answers, steps=3000, rng=1,
                   tie_readout=True)
    assert result.path == "structured" and result.reached
    assert np.array_equal(result.model.unembedding, result.model.entity_embedding)


@given(attention=st.sampled_from(["uniform", "none"]), heads=st.integers(1, 2),
       positions=st.sampled_from([None, 2]), seed=st.integers(0, 2**31))
def test_structured_gradients_match_central_differences(attention, heads, positions, seed):
    from georecall.training.backward import check_grads
    rng = np.random.default_rng(seed)
    model = init_model(7, 3, 5, 6, attention=attention, heads=heads, positions=positions, rng=rng,
                       dtype=np.float64)
    tokens, answers = single_hop_queries(random_task(7, 3, rng))
    checked = check_grads(model, tokens, answers, rng=rng, path="structured")
    assert "entity_embedding" in checked and "layers.0.mlp.W1" in checked
