"""train() against gradient descent written out in a few lines: the same losses, accuracies, steps, epochs,
batches and weights, bit for bit, on the paths where the arithmetic is the same (SGD with momentum and decay,
full batch or minibatch, early stopping three ways, a tied read-out); Adam against the textbook update to
rounding (float64). The reference calls the loss and its gradient (``loss_and_grads``, checked against finite
differences in tests/test_train.py) and the exhaustive checker, nothing of the loop itself.
"""

import itertools
import math

import numpy as np
import pytest

from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.theory.tasks import random_task
from georecall.training.backward import loss_and_grads
from georecall.training.parameters import init_model, params_of, with_params
from georecall.training.train import train, training_data
from georecall.verify.checking.check import check_queries

# ------------------------------------------------------------------------- the reference, written out


def descend(model, tokens, answers, *, steps, lr, momentum=0.0, decay=0.0, batch_size=None, rng=None,
            stop=1.0, positions=None, tie=False, callback=None, adam=None, dtype=np.float32, frozen=()):
    """Minibatch gradient descent: each epoch a fresh permutation cut into batches; per step the batch's loss
    and gradient, then θ ← (1 − lr·λ)·θ, v ← μ·v + g, θ ← θ − lr·v (or Adam, ``adam=(β1, β2, ε)``). Stops
    before the update of a full batch that reached ``stop``, when ``callback`` says so, or after the update
    that ends an epoch when every query is answered (not after the last step)."""
    template = model.with_dense_readout().astype(dtype)
    template = template.replace(unembedding=template.entity_embedding) if tie else template
    as_model = lambda p: with_params(template, {**p, "unembedding": p["entity_embedding"]} if tie else p)  # noqa: E731
    params = {k: np.array(v) for k, v in params_of(template).items()}
    v1, v2 = ({k: np.zeros_like(v) for k, v in params.items()} for _ in range(2))
    n = len(tokens)
    full = batch_size is None or batch_size >= n
    epochs_of = (rng.permutation(n) for _ in itertools.count())  # one per epoch, drawn as it starts
    batches = (itertools.repeat((slice(None), True)) if full else
               ((order[i:i + batch_size], i + batch_size >= n) for order in epochs_of
                for i in range(0, n, batch_size)))
    losses, accuracies, done, epochs = [], [], 0, 0
    for step, (idx, epoch_ends) in zip(range(steps), batches):
        epochs += epoch_ends
        loss, grads, predictions = loss_and_grads(as_model(params), tokens[idx], answers[idx], positions,
                                                  frozen)
        if tie:
            grads["entity_embedding"] = grads["entity_embedding"] + grads.pop("unembedding")
        losses.append(loss)
        accuracies.append(float(np.mean(predictions == answers[idx].reshape(-1))))
        if (full and stop is not None and accuracies[-1] >= stop) or (
                callback is not None and callback(params, step, grads)):
            break
        for k, g in grads.items():
            if decay:
                params[k] *= params[k].dtype.type(1 - lr * decay)
            if adam is None:
                v1[k] = momentum * v1[k] + g
                params[k] -= lr * v1[k]
            else:
                (b1, b2, eps), t = adam, step + 1
                v1[k], v2[k] = b1 * v1[k] + (1 - b1) * g, b2 * v2[k] + (1 - b2) * g * g
                params[k] -= lr * (v1[k] / (1 - b1**t)) / (np.sqrt(v2[k] / (1 - b2**t)) + eps)
        done = step + 1
        if epoch_ends and not full and stop is not None and step + 1 < steps and check_queries(
                as_model(params).astype(np.float64), tokens, answers, positions=positions).accuracy >= stop:
            break
    final = as_model(params)
    reached = check_queries(final.astype(np.float64), tokens, answers, positions=positions).exact
    return losses, accuracies, done, done if full else epochs, reached, final


# ------------------------------------------------------------------------------------ the comparison

TASK = random_task(24, 3, 5)
TOKENS, ANSWERS = single_hop_queries(TASK)
TWO_HOP = training_data(TASK, 2, False)

# name: (init_model options, options of both); SGD, the dense path
CASES = {
    "full batch": ({}, {"steps": 40, "lr": 0.5}),
    "momentum and decay": ({}, {"steps": 40, "lr": 0.5, "momentum": 0.9, "decay": 0.01}),
    "reaches 100% on the batch": ({}, {"steps": 400, "lr": 1.0}),
    "minibatch, stopped by the epoch-end check": ({}, {"steps": 400, "lr": 0.5, "momentum": 0.5,
                                                       "batch_size": 36}),
    "minibatch without a stop": ({}, {"steps": 50, "lr": 0.5, "batch_size": 20, "stop": None}),
    "stopped by the callback": ({}, {"steps": 40, "lr": 0.5, "stop_after": 7}),
    "tied read-out": ({"tied_readout": True}, {"steps": 40, "lr": 0.5, "tie": True}),
    "frozen read-out": ({}, {"steps": 40, "lr": 0.5, "frozen": ("unembedding",)}),
    "frozen embeddings": ({}, {"steps": 40, "lr": 0.5, "frozen": ("entity_embedding", "relation_embedding")}),
    "softmax, two hops, minibatch": ({"attention": "softmax", "heads": 2, "positions": TWO_HOP[3]},
                                     {"steps": 60, "lr": 0.5, "batch_size": 50, "data": TWO_HOP}),
    "float64": ({"dtype": np.float64}, {"steps": 30, "lr": 0.5, "dtype": np.float64}),
}
# the reference's option -> train()'s
TRAIN_NAMES = {"decay": "weight_decay", "stop": "stop_at_accuracy", "tie": "tie_readout"}


def _both(model_options, options):
    """Train with train() (SGD, dense path) and with the reference; return both runs' outputs."""
    options = dict(options)
    tokens, answers, positions, _ = options.pop("data", (TOKENS, ANSWERS, None, 2))
    stop_after = options.pop("stop_after", None)
    out = []
    for trainer in ("train", "reference"):
        seen = []

        def callback(params, step, grads):
            seen.append((step, sorted(grads), float(np.sum(params["entity_embedding"]))))
            return step >= stop_after

        generator = np.random.default_rng(3)
        model = init_model(24, 3, 8, 16, rng=1, **model_options)
        extra = {"callback": callback} if stop_after is not None else {}
        if trainer == "train":
            named = {TRAIN_NAMES.get(k, k): v for k, v in options.items()}
            r = train(model, tokens, answers, positions=positions, rng=generator, optimizer="sgd",
                      path="dense", **named, **extra)
            run = (r.losses, r.accuracies, r.steps, r.epochs, r.reached, r.model)
        else:
            run = descend(model, tokens, answers, positions=positions, rng=generator, **options, **extra)
        out.append((run, seen, generator.integers(0, 2**62)))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_train_is_gradient_descent_written_out_bit_for_bit(name):
    (new, new_seen, new_next), (ref, ref_seen, ref_next) = _both(*CASES[name])
    assert new[:5] == ref[:5]  # losses, accuracies (every float, exactly), steps, epochs, reached
    new_weights, ref_weights = new[5].arrays(), ref[5].arrays()
    assert new_weights.keys() == ref_weights.keys()
    for key, value in ref_weights.items():
        assert new_weights[key].dtype == value.dtype and np.array_equal(new_weights[key], value), key
    assert new_seen == ref_seen and new_next == ref_next  # the callback saw the same; the same draws


def test_the_cases_cover_each_way_to_stop():
    """Among the cases: runs stopped at 100% by the batch, by an epoch-end check, by the callback, and a run
    to the step budget."""
    runs = {name: _both(*CASES[name])[1][0] for name in ("reaches 100% on the batch", "full batch",
            "minibatch, stopped by the epoch-end check", "stopped by the callback")}
    losses, _, steps, epochs, reached, _ = runs["reaches 100% on the batch"]
    assert reached and steps < 400 and len(losses) == steps + 1  # the last loss is the one that stopped it
    _, _, steps, epochs, reached, _ = runs["minibatch, stopped by the epoch-end check"]
    assert reached and steps < 400 and steps == epochs * math.ceil(len(TOKENS) / 36)
    assert runs["stopped by the callback"][2] == 7
    assert runs["full batch"][2] == 40 and not runs["full batch"][4]


def test_the_comparison_can_fail():
    """A learning rate larger by one part in a million is another trajectory: the comparison sees it."""
    new = train(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=20, lr=0.5, optimizer="sgd",
                path="dense")
    ref = descend(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=20, lr=0.5 * (1 + 1e-6))
    assert new.losses[0] == ref[0][0] and new.losses != ref[0]


@pytest.mark.parametrize("betas, eps", [((0.9, 0.999), 1e-8), ((0.8, 0.99), 1e-3)])
def test_adam_is_the_textbook_update(betas, eps):
    """Adam's update (computed as α_t·m/(√v + ε̂), in blocks, on threads) against m̂/(√v̂ + ε) written out, in
    float64: the same trajectory to rounding."""
    model = init_model(24, 3, 8, 16, rng=1, dtype=np.float64)
    new = train(model, TOKENS, ANSWERS, steps=15, lr=1e-2, betas=betas, eps=eps, dtype=np.float64,
                path="dense", stop_at_accuracy=None)
    ref = descend(model, TOKENS, ANSWERS, steps=15, lr=1e-2, adam=(*betas, eps), stop=None, dtype=np.float64)
    assert len(new.losses) == len(ref[0]) == 15 and np.allclose(new.losses, ref[0], rtol=1e-12, atol=0)
    for key, value in ref[5].arrays().items():
        assert np.allclose(new.model.arrays()[key], value, rtol=1e-9, atol=1e-12), key
    nearby = (betas[0] * (1 + 1e-6), betas[1], eps)  # the comparison can fail: β1 one part in a million off
    other = descend(model, TOKENS, ANSWERS, steps=15, lr=1e-2, adam=nearby, stop=None, dtype=np.float64)
    assert not np.allclose(new.losses, other[0], rtol=1e-12, atol=0)


def test_divergence_names_the_step():
    with pytest.raises(FloatingPointError, match="at step"):
        train(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=50, lr=1e6, optimizer="sgd")


# ------------------------------------------------------------------------------------ the callbacks


def test_a_callback_object_stops_at_an_epoch_end():
    """A Callback passed as ``callback``: its on_epoch_end runs after the update that ends each epoch."""
    from georecall.training.train import Callback

    class AfterEpochs(Callback):
        def __init__(self, epochs):
            self.epochs, self.seen = epochs, []

        def on_epoch_end(self, step, state):
            self.seen.append(step)
            return len(self.seen) >= self.epochs

    stop = AfterEpochs(2)
    result = train(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=100, batch_size=20, rng=0,
                   stop_at_accuracy=None, callback=stop)
    per_epoch = math.ceil(len(TOKENS) / 20)
    assert stop.seen == [per_epoch - 1, 2 * per_epoch - 1]
    assert result.steps == 2 * per_epoch == len(result.losses) and result.epochs == 2
    never = AfterEpochs(10**6)
    result = train(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=3 * per_epoch, batch_size=20,
                   rng=0, stop_at_accuracy=None, callback=never)
    assert result.steps == 3 * per_epoch and len(never.seen) == 2  # not after the last step: none follows


def test_the_epoch_end_check_stops_only_when_the_check_says_so():
    from georecall.training.train import StepState, StopAtCheckedAccuracy

    state = StepState({}, {}, 0.0, 0.0)
    calls = []
    stop = StopAtCheckedAccuracy(1.0, lambda params, steps: calls.append(steps) or 1.0)
    assert stop.on_epoch_end(4, state) and calls == [5] and not stop.on_step(4, state)
    assert not StopAtCheckedAccuracy(1.0, lambda params, steps: 0.99).on_epoch_end(4, state)


def test_the_batch_accuracy_stop_needs_the_threshold():
    from georecall.training.train import StepState, StopAtBatchAccuracy

    assert StopAtBatchAccuracy(1.0).on_step(0, StepState({}, {}, 0.1, 1.0))
    assert not StopAtBatchAccuracy(1.0).on_step(0, StepState({}, {}, 0.1, 0.99))
    unreachable = train(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=200, lr=3e-2,
                        stop_at_accuracy=1.01)
    assert unreachable.steps == 200 and unreachable.reached  # it reached 100%, and went on


def test_optimizer_state_is_a_small_object_that_counts_its_updates():
    from georecall.training.train import SGD, Adam

    adam = Adam(lr=0.1)
    params = adam.start({"w": np.ones(3), "still": np.ones(2)})
    for _ in range(3):
        adam.update(params, {"w": np.full(3, 2.0)})
    assert adam.t == 3 and np.all(params["w"] < 1) and np.array_equal(params["still"], np.ones(2))
    assert np.allclose(adam.m1["w"], 2 * (1 - 0.9**3))  # m = (1 − β1^t)·g for a constant gradient
    adam.start(params)
    assert adam.t == 0 and not adam.m1["w"].any()
    sgd = SGD(lr=0.5, momentum=0.5)
    params = sgd.start({"w": np.zeros(2)})
    sgd.update(params, {"w": np.ones(2)})
    sgd.update(params, {"w": np.ones(2)})
    assert np.array_equal(sgd.velocity["w"], [1.5, 1.5]) and np.array_equal(params["w"], [-1.25, -1.25])
    with pytest.raises(InputError, match="eps_form"):
        Adam(eps_form="kingma")


def test_the_log_line_counts_steps_of_the_budget_and_says_what_is_left(capsys):
    """train(log_every=k): a line at steps 0, k, 2k, ... of the budget; from the second line on it estimates
    the time left at the rate so far (format only: no timing is asserted)."""
    train(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=30, lr=1e-4, log_every=10,
          stop_at_accuracy=None)
    lines = capsys.readouterr().err.strip().splitlines()
    assert [line.split()[1] for line in lines] == ["0/30", "10/30", "20/30"], lines
    assert "left" not in lines[0] and all(line.endswith(" s left)") for line in lines[1:]), lines
