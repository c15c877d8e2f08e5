"""The NumPy trainer: gradients against finite differences, training to 100%, freezing, determinism."""

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from georecall.constructions.multi_hop import multi_hop_queries
from georecall.constructions.single_hop import single_hop_queries
from georecall.constructions.storage import load_model, save_model
from georecall.experiments.sweep import sweep
from georecall.experiments.sweep_fit import fit_thresholds
from georecall.experiments.sweep_records import read_records
from georecall.experiments.sweep_search import find_threshold
from georecall.experiments.sweep_trial import TrialSettings
from georecall.theory.tasks import random_task
from georecall.training.backward import check_grads
from georecall.training.parameters import init_model
from georecall.training.train import GROUPS, train
from georecall.verify.checking.check import check_queries


@given(N=st.integers(2, 8), R=st.integers(1, 3), d=st.integers(2, 7), m=st.integers(1, 6),
       attention=st.sampled_from(["uniform", "softmax", "none"]), heads=st.integers(1, 2),
       layers=st.integers(1, 2), k=st.integers(1, 2), seed=st.integers(0, 2**31),
       frozen=st.sets(st.sampled_from(GROUPS), max_size=2))
def test_gradients_match_central_differences(N, R, d, m, attention, heads, layers, k, seed, frozen):
    rng = np.random.default_rng(seed)
    model = init_model(N, R, d, m, attention=attention, heads=heads, layers=layers, positions=k + 1, rng=rng,
                       dtype=np.float64)
    tokens, answers = multi_hop_queries(random_task(N, R, rng), k)
    results = check_grads(model, tokens, answers, frozen=frozen, rng=rng)
    assert not any(key.split(".")[2 if key.startswith("layers") else 0] in frozen for key in results)
    expected_groups = {"entity_embedding", "relation_embedding", "unembedding", "position_embedding", "mlp"}
    if attention != "none":
        expected_groups.add("attention")
    seen = {key.split(".")[2] if key.startswith("layers") else key for key in results}
    assert seen == expected_groups - set(frozen)


@given(attention=st.sampled_from(["uniform", "softmax"]), seed=st.integers(0, 2**31))
def test_teacher_forcing_gradients(attention, seed):
    rng = np.random.default_rng(seed)
    model = init_model(6, 2, 5, 4, attention=attention, heads=2, positions=5, rng=rng, dtype=np.float64)
    tokens = rng.integers(0, 8, size=(7, 5))
    answers = rng.integers(0, 6, size=(7, 3))
    check_grads(model, tokens, answers, positions=np.array([1, 2, 4]), rng=rng)


def test_gradient_checker_can_fail():
    model = init_model(5, 2, 4, 3, rng=0, dtype=np.float64)
    tokens, answers = single_hop_queries(random_task(5, 2, 0))
    import georecall.training.backward as tr
    original = tr.loss_and_grads

    def wrong(*args, **kwargs):
        loss, grads, pred = original(*args, **kwargs)
        if "layers.0.mlp.W1" in grads:
            grads["layers.0.mlp.W1"] = grads["layers.0.mlp.W1"] * 1.1
        return loss, grads, pred

    tr.loss_and_grads = wrong
    try:
        with pytest.raises(AssertionError, match="layers.0.mlp.W1"):
            check_grads(model, tokens, answers, rng=1)
    finally:
        tr.loss_and_grads = original


@pytest.mark.parametrize("optimizer, lr", [("adam", 1e-2), ("sgd", 1.0)])
def test_tiny_task_trains_to_100_percent(optimizer, lr):
    task = random_task(16, 2, 0)
    tokens, answers = single_hop_queries(task)
    result = train(init_model(16, 2, 16, 64, rng=0), tokens, answers, steps=3000, lr=lr, optimizer=optimizer,
                   rng=0)
    assert result.reached and result.steps < 3000
    assert check_queries(result.model, tokens, answers).exact
    assert result.losses[-1] < result.losses[0]


def test_minibatch_training_reaches_100_percent():
    task = random_task(32, 2, 1)
    tokens, answers = single_hop_queries(task)
    result = train(init_model(32, 2, 16, 64, rng=1), tokens, answers, steps=3000, batch_size=16, rng=1)
    assert result.reached


def test_frozen_groups_do_not_change_and_others_do():
    task = random_task(16, 2, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(16, 2, 8, 16, rng=3)
    result = train(model, tokens, answers, steps=20, rng=0, frozen=("entity_embedding", "attention"),
                   stop_at_accuracy=None)
    before, after = model.arrays(), result.model.arrays()
    for key in before:
        frozen = key == "entity_embedding" or ".attention." in key
        assert np.array_equal(before[key], after[key]) == frozen, key


def test_frozen_given_as_a_one_shot_iterator_freezes_its_groups():
    """Before TrainSettings, the first check used a one-shot iterator up and nothing was frozen."""
    task = random_task(16, 2, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(16, 2, 8, 16, rng=3)
    result = train(model, tokens, answers, steps=20, rng=0, frozen=iter(("entity_embedding", "attention")),
                   stop_at_accuracy=None)
    before, after = model.arrays(), result.model.arrays()
    for key in before:
        frozen = key == "entity_embedding" or ".attention." in key
        assert np.array_equal(before[key], after[key]) == frozen, key


def test_same_seed_same_run():
    task = random_task(24, 3, 0)
    tokens, answers = single_hop_queries(task)
    runs = [train(init_model(24, 3, 8, 32, rng=5), tokens, answers, steps=30, batch_size=20, rng=9,
                  stop_at_accuracy=None) for _ in range(2)]
    assert runs[0].losses == runs[1].losses
    other = train(init_model(24, 3, 8, 32, rng=5), tokens, answers, steps=30, batch_size=20, rng=10,
                  stop_at_accuracy=None)
    assert other.losses != runs[0].losses


def test_divergence_names_the_step():
    task = random_task(16, 2, 0)
    tokens, answers = single_hop_queries(task)
    with pytest.raises(FloatingPointError, match=r"at step \d+"):
        train(init_model(16, 2, 8, 16, rng=0), tokens, answers, steps=50, lr=1e12, rng=0)


def test_bad_arguments():
    tokens, answers = single_hop_queries(random_task(4, 1, 0))
    with pytest.raises(ValueError, match="unknown parameter groups"):
        train(init_model(4, 1, 4, 4, rng=0), tokens, answers, frozen=("embeddings",))
    with pytest.raises(ValueError, match="optimizer"):
        train(init_model(4, 1, 4, 4, rng=0), tokens, answers, optimizer="lbfgs")


def test_model_file_round_trip_without_pickle(tmp_path):
    model = init_model(6, 2, 4, 3, attention="softmax", heads=2, positions=3, rng=0)
    path = tmp_path / "m.npz"
    save_model(model, str(path), extra_arrays={"task_table": np.arange(12).reshape(2, 6)}, seed=7)
    loaded, header = load_model(str(path))
    assert header["record"]["seed"] == 7 and header["version"]
    assert np.array_equal(header["extra_arrays"]["task_table"], np.arange(12).reshape(2, 6))
    for key, value in model.arrays().items():
        assert np.array_equal(value, loaded.arrays()[key])
    tokens = np.array([[6, 0], [7, 5]])
    from georecall.constructions.forward import forward
    assert np.array_equal(forward(model, tokens), forward(loaded, tokens))
    np.savez(tmp_path / "bad.npz", x=np.zeros(2))
    with pytest.raises(ValueError, match="not a georecall model"):
        load_model(str(tmp_path / "bad.npz"))


# ----------------------------------------------------------------------------------------------- sweeps

SETTINGS = TrialSettings(steps=200)


def _strip(records):
    return sorted(json.dumps({k: v for k, v in r.items() if k not in ("seconds", "blas")}, sort_keys=True)
                  for r in records)  # blas: worker processes run one BLAS thread


def test_resuming_an_interrupted_sweep_reproduces_the_records(tmp_path):
    full, cut = str(tmp_path / "full.jsonl"), str(tmp_path / "cut.jsonl")
    sweep(full, [32], [2, 3], seeds=(0,), settings=SETTINGS, progress=False)
    sweep(cut, [32], [2, 3], seeds=(0,), settings=SETTINGS, progress=False, max_trials=3)
    assert len(read_records(cut)) < len(read_records(full))
    with open(cut, "a") as handle:  # a line half-written when the process was killed
        handle.write('{"kind": "trial", "N": 32')
    sweep(cut, [32], [2, 3], seeds=(0,), settings=SETTINGS, progress=False)
    assert _strip(read_records(cut)) == _strip(read_records(full))
    before = len(read_records(cut))
    sweep(cut, [32], [2, 3], seeds=(0,), settings=SETTINGS, progress=False)  # nothing left to do
    assert len(read_records(cut)) == before


def test_parallel_workers_write_the_same_records(tmp_path):
    serial, parallel = str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")
    sweep(serial, [32], [2], seeds=(0, 1), settings=SETTINGS, progress=False)
    sweep(parallel, [32], [2], seeds=(0, 1), settings=SETTINGS, progress=False, workers=2)
    assert _strip(read_records(serial)) == _strip(read_records(parallel))


def test_threshold_search_is_bisection_with_a_monotonicity_flag():
    record = find_threshold(32, 2, "learned", 0, SETTINGS, d_min=2, resolution=1)
    trials = record["trials"]
    assert record["d_star"] in trials and record["monotone"]
    assert record["last_failure"] is None or record["d_star"] - record["last_failure"] <= 1
    fake = {4: {"d": 4, "reached": True}, 8: {"d": 8, "reached": False}, 16: {"d": 16, "reached": True}}
    flagged = find_threshold(32, 2, "learned", 0, SETTINGS, d_min=4, known=fake)
    assert flagged["monotone"] is False and flagged["d_star"] == 4


def test_fit_recovers_a_planted_constant():
    import math
    records = [{"mode": "learned", "N": N, "R": R, "seed": s, "d_star": round(1.5 * R * math.log(N)) + s,
                "monotone": True} for N in (64, 256, 1024) for R in (2, 4, 8) for s in (0, 1)]
    fit = fit_thresholds(records)["learned"]
    assert fit["c"] == pytest.approx(1.5, abs=0.05) and fit["c_seed_std"] > 0
    polynomial = [{"mode": "frozen", "N": N, "R": R, "seed": 0, "d_star": 2.0 * N**0.5 * R, "monotone": True}
                  for N in (64, 256, 1024) for R in (2, 4)]
    law = fit_thresholds(polynomial)["frozen"]["power_law"]
    assert law["p_N"] == pytest.approx(0.5) and law["q_R"] == pytest.approx(1.0)


def test_training_data_for_hops_and_chain_of_thought():
    from georecall.training.train import training_data
    task = random_task(10, 2, 0)
    tokens, answers, positions, T = training_data(task, 1)
    assert tokens.shape == (20, 2) and positions is None and T == 2
    tokens, answers, positions, T = training_data(task, 3)
    assert tokens.shape == (80, 4) and answers.shape == (80,) and T == 4
    tokens, answers, positions, T = training_data(task, 3, cot=True)
    assert tokens.shape == (80, 6) and answers.shape == (80, 3) and list(positions) == [3, 4, 5] and T == 6
    assert np.array_equal(tokens[:, 4:], answers[:, :2])  # teacher forcing feeds the true chain


@pytest.mark.parametrize("cot", [False, True])
def test_two_hop_training_reaches_100_percent_and_decodes(cot):
    from georecall.training.train import training_data
    from georecall.verify.checking.check import check_decoding
    task = random_task(32, 2, 1)
    tokens, answers, positions, T = training_data(task, 2, cot)
    model = init_model(32, 2, 16, 64, attention="softmax", heads=2, positions=T, rng=2)
    result = train(model, tokens, answers, positions=positions, steps=2000, rng=2)
    assert result.reached
    if cot:  # exact under teacher forcing at every step, hence exact greedy decoding
        prompts = tokens[:, :3]
        # certified in exact arithmetic of the trained weights, like `reached` (float64: a far tighter bound)
        assert check_decoding(result.model.astype(np.float64), prompts, answers).exact


def test_sweep_records_carry_hops_and_cot(tmp_path):
    settings = TrialSettings(steps=200, k=2, cot=True, attention="softmax", heads=2)
    records = sweep(str(tmp_path / "k2.jsonl"), [16], [2], modes=("learned",), seeds=(0,), settings=settings,
                    progress=False)
    assert len(records) == 1 and records[0]["k"] == 2 and records[0]["cot"] is True
    assert records[0]["d_star"] is not None


# ------------------------------------------------------------------------------- trainer fixes (issue 12)


def test_every_query_exactly_once_per_epoch():
    """10 queries, batch 4: epochs of batches 4, 4, 2; after whole epochs every query was seen equally often
    (the old schedule gave counts [4,3,4,4,2,3,4,4,3,5] after 9 steps)."""
    import georecall.training.train as tr
    task = random_task(5, 2, 0)
    tokens, answers = single_hop_queries(task)
    seen, sizes = [], []
    original = tr.loss_and_grads

    def recording(model, batch_tokens, *args, **kwargs):
        rows = [int(np.flatnonzero((tokens == row).all(axis=1))[0]) for row in batch_tokens]
        seen.extend(rows)
        sizes.append(len(rows))
        return original(model, batch_tokens, *args, **kwargs)

    tr.loss_and_grads = recording
    try:
        result = train(init_model(5, 2, 4, 4, rng=0), tokens, answers, steps=9, batch_size=4, rng=0,
                       stop_at_accuracy=None, path="dense")
    finally:
        tr.loss_and_grads = original
    assert sizes == [4, 4, 2] * 3 and result.epochs == 3 and result.steps == 9
    assert np.bincount(seen, minlength=10).tolist() == [3] * 10
    for epoch in range(3):  # and each epoch is a permutation
        assert sorted(seen[10 * epoch : 10 * epoch + 10]) == list(range(10))


def test_epoch_batches_cover_each_epoch():
    from georecall.training.train import EpochBatches
    batches = EpochBatches(11, 3, np.random.default_rng(0))
    seen, ends = [], []
    for _ in range(8):  # two epochs of 4 batches (3, 3, 3, 2)
        idx, end = batches.next()
        seen.append(idx)
        ends.append(end)
    assert ends == [False, False, False, True] * 2 and batches.epochs == 2
    for epoch in (seen[:4], seen[4:]):
        assert sorted(np.concatenate(epoch).tolist()) == list(range(11))


def test_minibatch_training_stops_at_an_epoch_end():
    task = random_task(32, 2, 1)
    tokens, answers = single_hop_queries(task)
    result = train(init_model(32, 2, 16, 64, rng=1), tokens, answers, steps=3000, batch_size=24, rng=1)
    assert result.reached and result.steps < 3000
    per_epoch = -(-64 // 24)  # 3 batches: 24, 24, 16
    assert result.steps % per_epoch == 0 and result.epochs == result.steps // per_epoch


def _adam_reference(theta0, grads, lr, b1, b2, eps, form, wd):
    """Adam written from the formulas (float64), one λ for all coordinates."""
    theta, m, v = theta0.copy(), np.zeros_like(theta0), np.zeros_like(theta0)
    for t, g in enumerate(grads, start=1):
        theta = theta - lr * wd * theta
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g**2
        if form == "standard":  # PyTorch / Optax
            theta = theta - lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
        else:  # Kingma & Ba, Algorithm 1's efficient form with ε̂
            theta = theta - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    return theta


@pytest.mark.parametrize("form", ["standard", "hat"])
@pytest.mark.parametrize("wd", [0.0, 0.3])
def test_adam_matches_the_formulas(form, wd):
    from georecall.training.train import adam
    rng = np.random.default_rng(0)
    theta0 = rng.standard_normal(50)
    scales = 10.0 ** rng.uniform(-6, 0, 50)  # tiny gradients, where the two ε forms differ
    grads = [scales * rng.standard_normal(50) for _ in range(12)]
    lr, b1, b2, eps = 1e-2, 0.9, 0.99, 1e-4
    out = adam(lambda p, step: {"w": grads[step]}, {"w": theta0, "still": theta0}, 12, lr=lr, b1=b1, b2=b2,
               eps=eps, eps_form=form, weight_decay={"w": wd})
    expected = _adam_reference(theta0, grads, lr, b1, b2, eps, form, wd)
    np.testing.assert_allclose(out["w"], expected, rtol=1e-12, atol=1e-15)
    assert np.array_equal(out["still"], theta0)  # no gradient: no update and no decay
    other = _adam_reference(theta0, grads, lr, b1, b2, eps, "hat" if form == "standard" else "standard", wd)
    assert np.max(np.abs(other - expected)) > 1e-4  # the two forms are told apart


def test_adam_rejects_an_unknown_eps_form():
    from georecall.training.train import adam
    with pytest.raises(ValueError, match="eps_form"):
        adam(lambda p, s: {}, {"w": np.zeros(2)}, 1, eps_form="kingma")


def test_decoupled_weight_decay_per_group():
    """One step: the decayed group differs from the undecayed run by exactly lr·λ·θ0; the rest is the same."""
    task = random_task(8, 2, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(8, 2, 6, 5, rng=0, dtype=np.float64)
    lr, lam = 1e-2, 0.5
    runs = [train(model, tokens, answers, steps=1, lr=lr, dtype=np.float64, stop_at_accuracy=None,
                  weight_decay=wd).model.arrays() for wd in (0.0, {"mlp": lam})]
    for key, before in model.arrays().items():
        if ".mlp." in key:
            np.testing.assert_allclose(runs[1][key] - runs[0][key], -lr * lam * before, atol=1e-15)
        else:
            assert np.array_equal(runs[1][key], runs[0][key]), key
    with pytest.raises(ValueError, match="unknown parameter groups"):
        train(model, tokens, answers, steps=1, weight_decay={"embeddings": 1.0})


def test_init_scale_per_group_and_seed_streams():
    from georecall.theory.seeds import rng as seed_rng
    base = init_model(6, 2, 4, 3, rng=1).arrays()
    scaled = init_model(6, 2, 4, 3, rng=1, init_scale={"mlp": 0.5, "unembedding": 2.0}).arrays()
    for key, value in base.items():
        factor = 0.5 if ".mlp." in key else 2.0 if key == "unembedding" else 1.0
        assert np.array_equal(scaled[key], value * np.float32(factor)), key
    by_seed = init_model(6, 2, 4, 3, seed=3).arrays()
    by_stream = init_model(6, 2, 4, 3, rng=seed_rng(3, "init")).arrays()
    assert all(np.array_equal(by_seed[k], by_stream[k]) for k in by_seed)
    with pytest.raises(ValueError, match="rng or seed"):
        init_model(6, 2, 4, 3, rng=1, seed=1)
    task = random_task(6, 2, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(6, 2, 4, 3, seed=3)
    options = {"steps": 6, "batch_size": 4, "stop_at_accuracy": None}
    a = train(model, tokens, answers, seed=3, **options)
    b = train(model, tokens, answers, rng=seed_rng(3, "batches"), **options)
    c = train(model, tokens, answers, rng=seed_rng(3, "init"), **options)
    assert a.losses == b.losses and a.losses != c.losses
    with pytest.raises(ValueError, match="rng or seed"):
        train(model, tokens, answers, steps=1, rng=1, seed=1)


def test_tied_readout_sums_the_two_gradients():
    from georecall.training.backward import loss_and_grads
    task = random_task(8, 2, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(8, 2, 6, 5, rng=0, dtype=np.float64, tied_readout=True)
    assert np.array_equal(model.unembedding, model.entity_embedding)
    lr = 0.1
    result = train(model, tokens, answers, steps=1, lr=lr, optimizer="sgd", dtype=np.float64,
                   stop_at_accuracy=None, tie_readout=True)
    _, grads, _ = loss_and_grads(model, tokens, answers)
    expected = model.entity_embedding - lr * (grads["entity_embedding"] + grads["unembedding"])
    np.testing.assert_allclose(result.model.entity_embedding, expected, rtol=1e-13)
    assert np.array_equal(result.model.unembedding, result.model.entity_embedding)
    frozen = train(model, tokens, answers, steps=3, frozen=("entity_embedding",), tie_readout=True,
                   stop_at_accuracy=None)
    assert np.array_equal(frozen.model.unembedding, model.entity_embedding.astype(np.float32))
    with pytest.raises(ValueError, match="tied read-out"):
        train(model, tokens, answers, steps=1, frozen=("unembedding",), tie_readout=True)
    with pytest.raises(ValueError, match="n_out == N"):
        init_model(8, 2, 6, 5, n_out=9, tied_readout=True)


@pytest.mark.parametrize("frozen", [("unembedding",), ("entity_embedding", "relation_embedding")])
def test_frozen_readout_or_embeddings(frozen):
    task = random_task(16, 2, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(16, 2, 8, 16, rng=3)
    result = train(model, tokens, answers, steps=10, rng=0, frozen=frozen, stop_at_accuracy=None)
    for key, before in model.arrays().items():
        assert np.array_equal(before, result.model.arrays()[key]) == (key in frozen), key


def test_single_hop_softmax_attention_with_positions_trains():
    task = random_task(16, 2, 0)
    tokens, answers = single_hop_queries(task)
    model = init_model(16, 2, 16, 64, attention="softmax", heads=2, positions=2, rng=0)
    result = train(model, tokens, answers, steps=2000, rng=0)
    assert result.path == "dense" and result.reached
    assert not np.array_equal(result.model.position_embedding, model.position_embedding)


@pytest.mark.parametrize("path, k, cot", [("dense", 1, False), ("structured", 1, False), ("dense", 2, True)])
def test_a_batch_computed_in_pieces_follows_the_same_trajectory(path, k, cot):
    """max_rows splits each batch's gradient into pieces; weighted by size they are the batch's gradient."""
    from georecall.theory.tasks import task_for_seed
    from georecall.training.parameters import init_model
    from georecall.training.train import train, training_data

    task = task_for_seed(12, 2, 0)
    tokens, answers, positions, T = training_data(task, k, cot)
    attention = "uniform" if k == 1 else "softmax"
    runs = []
    for rows in (None, 5):
        model = init_model(12, 2, 8, 16, attention=attention, positions=T if k > 1 else None, seed=1,
                           dtype=np.float64)
        result = train(model, tokens, answers, steps=6, lr=1e-2, positions=positions, seed=2, path=path,
                       max_rows=rows, dtype=np.float64, stop_at_accuracy=None)
        runs.append(result)
    assert runs[0].path == runs[1].path == path
    np.testing.assert_allclose(runs[0].losses, runs[1].losses, rtol=1e-10)
    for key, value in runs[0].model.arrays().items():
        np.testing.assert_allclose(runs[1].model.arrays()[key], value, rtol=1e-8, atol=1e-12)
    with pytest.raises(ValueError, match="max_rows"):
        train(runs[0].model, tokens, answers, steps=1, max_rows=0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_probabilities_stay_out_of_the_subnormal_range(dtype):
    """Confident rows (shifted logits down to −200) would put float32 probabilities in the subnormal range,
    where exp and the read-out products run several times slower: they are clamped at e^−60, and the loss and
    the logits' gradient still equal a float64 log-sum-exp reference to rounding."""
    from georecall.training.backward import LOGIT_FLOOR, softmax_cross_entropy

    rng = np.random.default_rng(0)
    confident, ordinary = rng.uniform(-200.0, 0.0, size=(64, 300)), rng.normal(size=(64, 300))
    logits = np.concatenate([confident, ordinary]).astype(dtype)
    answers = rng.integers(0, 300, size=128)
    z = logits.astype(np.float64)
    shifted = z - z.max(axis=1, keepdims=True)
    log_total = np.log(np.exp(shifted).sum(axis=1))
    reference_loss = float(np.mean(log_total - shifted[np.arange(128), answers]))
    reference_dz = (np.exp(shifted - log_total[:, None]) - np.eye(300)[answers]) / 128
    loss, P, scale, predictions = softmax_cross_entropy(logits.copy(), answers)
    tiny = np.finfo(np.float32).tiny
    assert np.all(P >= np.exp(LOGIT_FLOOR, dtype=np.float64).astype(dtype)) and np.all(P >= tiny)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    assert loss == pytest.approx(reference_loss, rel=rtol)
    dz = scale[:, None].astype(np.float64) * P - np.eye(300)[answers] / 128
    np.testing.assert_allclose(dz, reference_dz, rtol=0, atol=rtol / 128)
    np.testing.assert_array_equal(predictions, z.argmax(axis=1))
