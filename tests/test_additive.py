"""The token-additive (tables) forward against THE forward pass on random one-layer models; its guards."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.arithmetic import IntegerModeError
from georecall.constructions.forward import forward
from georecall.constructions.model import MLP, Attention, Layer, Model
from georecall.verify.checking import additive, additive_run
from georecall.verify.checking.additive import NotAdditive, plan_additive
from georecall.verify.checking.additive_run import run_additive
from georecall.verify.checking.check import check_decoding, check_queries


def random_model(rng: np.random.Generator, *, N: int, R: int, d_tok: int, T_max: int, m: int, heads: int,
                 kind: str | None, integer: bool, T: int) -> Model:
    """One layer; the last T_max coordinates are position coordinates that no token embedding uses, and
    softmax / hard heads read only those (so their weights do not depend on the tokens)."""
    d = d_tok + T_max

    def draw(*shape, scale=1.0):
        if integer:
            return rng.integers(-2, 3, size=shape).astype(np.float64) * scale
        return rng.normal(size=shape) * scale

    E = np.zeros((N, d))
    E[:, :d_tok] = draw(N, d_tok)
    Q = np.zeros((R, d))
    Q[:, :d_tok] = draw(R, d_tok)
    P = draw(T_max, d) if kind != "none-positions" else None
    att = None
    if kind in ("uniform",):
        # integer mode: W_V·W_O divisible by T keeps every attention output integral
        att = Attention("uniform", W_V=draw(heads, d, 2), W_O=draw(heads, 2, d, scale=T if integer else 1.0))
    elif kind in ("softmax", "hard"):
        W_Q = np.zeros((heads, d, 3))
        W_K = np.zeros((heads, d, 3))
        W_Q[:, d_tok:] = rng.normal(size=(heads, T_max, 3)) * 2
        W_K[:, d_tok:] = rng.normal(size=(heads, T_max, 3)) * 2
        if kind == "hard":  # integer scores so that ties between positions really happen
            W_Q, W_K = np.rint(W_Q), np.rint(W_K)
        att = Attention(kind, W_V=draw(heads, d, 2), W_O=draw(heads, 2, d), W_Q=W_Q, W_K=W_K,
                        inverse_temperature=1.5)
    mlp = MLP(draw(d, m), draw(m), draw(m, d), draw(d)) if m else None
    n_out = int(rng.integers(2, 9))
    U = np.zeros((n_out, d))
    read = rng.choice(d, size=int(rng.integers(1, d + 1)), replace=False)
    U[:, read] = draw(n_out, read.size)
    return Model(E, Q, U, (Layer(att, mlp),), P)


@st.composite
def cases(draw, integer: bool):
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kinds = ["uniform", "none"] if integer else ["uniform", "softmax", "hard", "none"]
    kind = draw(st.sampled_from(kinds))
    T = draw(st.integers(1, 4))
    N, R = draw(st.integers(1, 12)), draw(st.integers(1, 3))
    model = random_model(rng, N=N, R=R, d_tok=draw(st.integers(1, 5)), T_max=4, m=draw(st.integers(0, 6)),
                         heads=draw(st.integers(1, 2)), kind=None if kind == "none" else kind,
                         integer=integer, T=T)
    Qn = draw(st.integers(1, 60))
    tokens = rng.integers(0, N + R, size=(Qn, T))
    if draw(st.booleans()):  # the G1 layout: relations first, subject last, in canonical order
        tokens[:, :-1] = N + rng.integers(0, R, size=(Qn, T - 1))
        tokens = tokens[np.lexsort(tokens.T[::-1])]
    # tiny blocks: many of them
    block_bytes = draw(st.sampled_from([8 * 7, 8 * 64, additive_run.BLOCK_BYTES]))
    return model, tokens, block_bytes


def residual_by_tables(model, tokens, columns, integer, block_bytes):
    plan = plan_additive(model, [tokens[:, u] for u in range(tokens.shape[1])], columns, integer=integer)
    out = np.full((tokens.shape[0], columns.size), np.nan)
    seen = np.zeros(tokens.shape[0], dtype=int)

    def consume(queries, v):
        out[queries] = v
        np.add.at(seen, np.arange(tokens.shape[0])[queries], 1)
    run_additive(plan, [tokens[:, u] for u in range(tokens.shape[1])], consume, block_bytes=block_bytes)
    assert np.all(seen == 1)  # every query handed over exactly once
    return out


def residual_by_forward(model, tokens, columns, integer):
    _, trace = forward(model, tokens, integer=integer, trace=True)
    return trace.residual[-1][:, -1][:, columns]


@given(cases(integer=True))
def test_tables_equal_the_forward_pass_exactly_in_integer_mode(case):
    model, tokens, block_bytes = case
    columns = model.readout.columns
    ours = residual_by_tables(model, tokens, columns, True, block_bytes)
    assert np.array_equal(ours, residual_by_forward(model, tokens, columns, True))
    answers = np.arange(tokens.shape[0]) % model.n_out
    fast = check_queries(model, tokens, answers, integer=True, keep=True)
    slow = check_queries(model, tokens, answers, integer=True, keep=True, forward="dense", decoder="dense")
    assert fast.forward == "tables" and slow.forward == "dense"
    assert np.array_equal(fast.predictions, slow.predictions) and np.array_equal(fast.margins, slow.margins)
    assert (fast.n_correct, fast.min_margin, fast.argmin_query, fast.failures) == (
        slow.n_correct, slow.min_margin, slow.argmin_query, slow.failures)


@given(cases(integer=False))
def test_tables_equal_the_forward_pass_to_rounding_in_float_mode(case):
    model, tokens, block_bytes = case
    columns = model.readout.columns
    ours = residual_by_tables(model, tokens, columns, False, block_bytes)
    theirs = residual_by_forward(model, tokens, columns, False)
    scale = 1 + np.abs(theirs).max()
    assert np.allclose(ours, theirs, rtol=0, atol=1e-12 * scale)


# ---------------------------------------------------------------------------------------------- constructions


def test_g1_tables_and_dense_agree_exactly_in_integer_mode_and_prune_to_the_asked_relation():
    from georecall.constructions.single_hop import build_g1
    from georecall.theory.tasks import random_task
    from georecall.theory.tokens import single_hop_queries
    task = random_task(64, 5, 3)
    built = build_g1(task, "binary", integer=True)
    tokens, answers = single_hop_queries(task)
    fast = check_queries(built.model, tokens, answers, integer=True, keep=True)
    slow = check_queries(built.model, tokens, answers, integer=True, keep=True, decoder="dense",
                         forward="dense")
    assert (fast.forward, fast.decoder) == ("tables", "hypercube")
    assert np.array_equal(fast.predictions, slow.predictions) and np.array_equal(fast.margins, slow.margins)
    assert fast.exact and fast.min_margin == 4.0
    plan = plan_additive(built.model, [tokens[:, 0], tokens[:, 1]], built.model.readout.columns,
                         integer=True)
    stats = run_additive(plan, [tokens[:, 0], tokens[:, 1]], lambda q, v: None)
    assert stats["live_units"] == 2 * built.codes.D * stats["groups"]  # only the asked relation's 2D units


def test_c1_greedy_decoding_by_tables_matches_the_forward_pass():
    from georecall.constructions.multi_hop import build_c1
    from georecall.theory.tasks import random_task
    from georecall.theory.tokens import chains, multi_hop_queries
    task = random_task(32, 3, 4)
    built = build_c1(task, 2)
    tokens, _ = multi_hop_queries(task, 2)
    targets = chains(task, 2)
    fast = check_decoding(built.model, tokens, targets, keep=True)
    slow = check_decoding(built.model, tokens, targets, keep=True, decoder="dense", forward="dense")
    assert (fast.forward, fast.decoder) == ("tables", "hypercube")
    assert np.array_equal(fast.predictions, slow.predictions)
    # certified lower bounds of the same exact margins: each within its own rounding bound of the other
    assert np.all(np.abs(fast.margins - slow.margins) <= fast.rounding_bound + slow.rounding_bound)
    forced_tokens = np.concatenate([tokens, targets[:, :-1]], axis=1)
    fast = check_queries(built.model, forced_tokens, targets, positions=np.arange(2, 4), keep=True)
    slow = check_queries(built.model, forced_tokens, targets, positions=np.arange(2, 4), keep=True,
                         forward="dense", decoder="dense")
    assert fast.forward == "tables" and fast.per_position == slow.per_position
    assert np.all(np.abs(fast.margins - slow.margins) <= fast.rounding_bound + slow.rounding_bound)


def test_a_corrupted_subject_is_found_in_shuffled_query_order():
    from georecall.constructions.single_hop import build_g1
    from georecall.theory.tasks import random_task
    from georecall.theory.tokens import single_hop_queries
    task = random_task(32, 3, 5)
    built = build_g1(task, "binary", integer=True)
    E = np.array(built.model.entity_embedding)
    D = built.codes.D
    E[7, D : 2 * D] = built.codes.vectors[(task.table[1, 7] + 1) % 32]
    broken = built.model.replace(entity_embedding=E)
    tokens, answers = single_hop_queries(task)
    order = np.random.default_rng(0).permutation(len(tokens))
    result = check_queries(broken, tokens[order], answers[order], integer=True)
    assert result.forward == "tables" and result.n_correct == result.n_queries - 1
    assert result.failures[0]["query"] == int(np.flatnonzero(order == 32 + 7)[0])
    assert result.min_margin < 0


# ---------------------------------------------------------------------------------------------------- guards


def small_model(rng, **kw):
    base = dict(N=5, R=2, d_tok=3, T_max=4, m=4, heads=1, kind="uniform", integer=True, T=2)
    base.update(kw)
    return random_model(rng, **base)


def test_two_layers_are_refused():
    model = small_model(np.random.default_rng(0))
    two = Model(model.entity_embedding, model.relation_embedding, model.unembedding,
                model.layers * 2, model.position_embedding)
    with pytest.raises(NotAdditive, match="2 layers"):
        plan_additive(two, [np.array([5]), np.array([0])], two.readout.columns)
    result = check_queries(two, np.array([[5, 0]]), np.array([0]))
    assert result.forward == "dense" and "2 layers" in result.fallback


def test_a_head_that_reads_token_coordinates_is_refused():
    model = small_model(np.random.default_rng(1), kind="softmax", integer=False)
    att = model.layers[0].attention
    W_K = np.array(att.W_K)
    W_K[0, 0, 0] = 1.0  # coordinate 0 is used by token embeddings
    leaky = Model(model.entity_embedding, model.relation_embedding, model.unembedding,
                  (Layer(Attention("softmax", att.W_V, att.W_O, att.W_Q, W_K, 1.5), model.layers[0].mlp),),
                  model.position_embedding)
    with pytest.raises(NotAdditive, match="depend on the tokens"):
        plan_additive(leaky, [np.array([5]), np.array([0])], leaky.readout.columns)
    with pytest.raises(ValueError, match="token-additive forward does not apply"):
        check_queries(leaky, np.array([[5, 0]]), np.array([0]), forward="tables")


def test_integer_mode_needs_attention_divisible_by_T():
    rng = np.random.default_rng(2)
    model = small_model(rng)
    att = model.layers[0].attention
    odd = Model(model.entity_embedding, model.relation_embedding, model.unembedding,
                (Layer(Attention("uniform", att.W_V, att.W_O + 1.0 / 1), model.layers[0].mlp),),
                model.position_embedding)
    total = odd.layers[0].attention.value_outputs.sum(axis=0)
    assert np.any(np.mod(total, 2) != 0)
    with pytest.raises(NotAdditive, match="divisible"):
        plan_additive(odd, [np.array([5]), np.array([0])], odd.readout.columns, integer=True)


def test_integer_mode_refuses_non_integral_weights_and_large_bounds():
    rng = np.random.default_rng(3)
    model = small_model(rng)
    mlp = model.layers[0].mlp
    half = Model(model.entity_embedding, model.relation_embedding, model.unembedding,
                 (Layer(model.layers[0].attention, MLP(mlp.W1, mlp.b1 + 0.5, mlp.W2, mlp.b2)),),
                 model.position_embedding)
    with pytest.raises(IntegerModeError, match="b1 is not integral"):
        plan_additive(half, [np.array([5]), np.array([0])], half.readout.columns, integer=True)
    huge = Model(model.entity_embedding, model.relation_embedding, model.unembedding * 2.0**51,
                 model.layers, model.position_embedding)
    with pytest.raises(IntegerModeError, match="2\\^53"):
        plan_additive(huge, [np.array([5]), np.array([0])], huge.readout.columns, integer=True)


def test_margins_are_bounded_not_only_logits():
    """A read-out whose logits fit below 2^53 but whose differences may not is refused."""
    rng = np.random.default_rng(4)
    model = small_model(rng, m=0)
    plan = plan_additive(model, [np.array([5]), np.array([0])], model.readout.columns, integer=True)
    logits = plan.info["integer_bounds"]["logits"]
    scale = 2.0 ** int(np.floor(np.log2(2.0**53 / logits)))  # logits now in [2^52, 2^53)
    big = Model(model.entity_embedding, model.relation_embedding, model.unembedding * scale, model.layers,
                model.position_embedding)
    with pytest.raises(IntegerModeError, match="margins"):
        plan_additive(big, [np.array([5]), np.array([0])], big.readout.columns, integer=True)


def test_out_of_range_tokens_are_refused():
    model = small_model(np.random.default_rng(5))
    plan = plan_additive(model, [np.array([5]), np.array([0])], model.readout.columns)
    with pytest.raises(ValueError, match="token ids"):
        run_additive(plan, [np.array([5]), np.array([99])], lambda q, v: None)


def test_a_unit_open_for_one_entity_only_is_not_pruned():
    """Break G1's gate for one subject: an unasked relation's unit fires on that subject alone. The pruning
    (by the block's largest pre-activation) must keep it, and the check must see every query it spoils."""
    from georecall.constructions.single_hop import build_g1
    from georecall.theory.tasks import random_task
    from georecall.theory.tokens import single_hop_queries
    task = random_task(64, 3, 6)
    built = build_g1(task, "binary", integer=True)
    E = np.array(built.model.entity_embedding)
    E[9, 0] = 7.0  # block B_0, coordinate 0: 7 > the gate's shut-off, so relation 0's unit opens for r != 0
    broken = built.model.replace(entity_embedding=E)
    tokens, answers = single_hop_queries(task)
    fast = check_queries(broken, tokens, answers, integer=True, keep=True)
    slow = check_queries(broken, tokens, answers, integer=True, keep=True, forward="dense", decoder="dense")
    assert fast.forward == "tables" and not fast.exact
    assert np.array_equal(fast.margins, slow.margins) and np.array_equal(fast.predictions, slow.predictions)
    assert {f["query"] % 64 for f in fast.failures} == {9}


def test_plan_guards_on_lengths_and_shapes():
    model = small_model(np.random.default_rng(7))
    columns = model.readout.columns
    with pytest.raises(NotAdditive, match="exceeds the model's 4 positions"):
        plan_additive(model, [np.array([0])] * 5, columns)
    with pytest.raises(NotAdditive, match="no tokens"):
        plan_additive(model, [], columns)
    plan = plan_additive(model, [np.array([5]), np.array([0])], columns)
    with pytest.raises(ValueError, match="plan is for T = 2"):
        run_additive(plan, [np.array([5])], lambda q, v: None)
    with pytest.raises(ValueError, match="shape"):
        run_additive(plan, [np.array([5, 6]), np.array([0])], lambda q, v: None)


def test_too_many_distinct_tokens_before_the_last_position_fall_back(monkeypatch):
    model = small_model(np.random.default_rng(8), N=40)
    columns = model.readout.columns
    tokens = np.stack([np.arange(40), np.arange(40)[::-1]], axis=1)
    monkeypatch.setattr(additive, "MAX_GROUP_TABLE", 8)
    with pytest.raises(NotAdditive, match="distinct tokens"):
        plan_additive(model, [tokens[:, 0], tokens[:, 1]], columns)
    result = check_queries(model, tokens, np.zeros(40, dtype=int) % model.n_out)
    assert result.forward == "dense" and "distinct tokens" in result.fallback
