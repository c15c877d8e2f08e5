"""train() against the loop it replaced: the same losses, accuracies, steps, epochs and weights, bit for bit.

The reference is the trainer as it was before the rewrite into a plain loop with callback objects (closures
over a state dict, early stopping by a gradient function that returned ``{}``), kept here verbatim with its
optimizers: it calls only helpers the rewrite left alone (the loss and gradients, the batches, the checker).
Each configuration trains a small model with both and compares every recorded number exactly.
"""

import math
import sys
import time
from collections.abc import Callable, Mapping

import numpy as np
import pytest

from georecall.constructions.model import Model
from georecall.constructions.single_hop import single_hop_queries
from georecall.errors import InputError
from georecall.theory.seeds import rng as seed_rng
from georecall.theory.tasks import _as_rng, check_positive_int, random_task
from georecall.verify.checking.check import check_queries
from georecall.verify.training.groups import group_of
from georecall.verify.training.optimizers import _adam_task
from georecall.verify.training.train import (
    GROUPS,
    OPTIMIZERS,
    PATHS,
    EpochBatches,
    TrainResult,
    _group_values,
    init_model,
    loss_and_grads,
    params_of,
    train,
    training_data,
    with_params,
)
from georecall.verify.training.train_structured import (
    loss_and_grads_structured,
    run_parallel,
    structure_reason,
)

# ------------------------------------------------------------------------- the reference (the old loop)


def _old_decay(params: dict, grads: dict, lr: float, weight_decay) -> None:
    if not weight_decay:
        return
    for k in grads:
        lam = weight_decay.get(k, 0.0) if isinstance(weight_decay, Mapping) else weight_decay
        if lam:
            params[k] *= params[k].dtype.type(1.0 - lr * lam)



def _old_sgd(grad_fn: Callable, params: dict, steps: int, *, lr: float = 0.1, momentum: float = 0.0,
        weight_decay: float | Mapping[str, float] = 0.0, callback: Callable | None = None) -> dict:
    params = {k: np.array(v) for k, v in params.items()}
    velocity = {k: np.zeros_like(v) for k, v in params.items()}
    for step in range(steps):
        grads = grad_fn(params, step)
        if callback is not None and callback(params, step, grads):
            break
        _old_decay(params, grads, lr, weight_decay)
        for k, g in grads.items():
            velocity[k] *= momentum
            velocity[k] += g
            params[k] -= lr * velocity[k]
    return params



EPS_FORMS = ("standard", "hat")
ADAM_BLOCK = 1 << 18


def _old_adam(grad_fn: Callable, params: dict, steps: int, *, lr: float = 1e-3, b1: float = 0.9,
              b2: float = 0.999, eps: float = 1e-8, eps_form: str = "standard",
              weight_decay: float | Mapping[str, float] = 0.0, callback: Callable | None = None) -> dict:
    if eps_form not in EPS_FORMS:
        raise InputError(f"eps_form must be one of {EPS_FORMS}, got {eps_form!r}")
    params = {k: np.array(v, order="C") for k, v in params.items()}
    m1 = {k: np.zeros_like(v) for k, v in params.items()}
    m2 = {k: np.zeros_like(v) for k, v in params.items()}
    scratch = {k: np.empty_like(v) for k, v in params.items()}
    for step in range(steps):
        grads = grad_fn(params, step)
        if callback is not None and callback(params, step, grads):
            break
        t = step + 1
        correction2 = math.sqrt(1 - b2**t)
        alpha = lr * correction2 / (1 - b1**t)
        eps_t = eps * correction2 if eps_form == "standard" else eps
        tasks = []
        for k, g in grads.items():
            lam = weight_decay.get(k, 0.0) if isinstance(weight_decay, Mapping) else weight_decay
            views = [a.reshape(-1) for a in (params[k], np.asarray(g, dtype=params[k].dtype), m1[k], m2[k],
                                             scratch[k])]
            for start in range(0, views[0].size, ADAM_BLOCK):
                block = slice(start, start + ADAM_BLOCK)
                tasks.append([v[block] for v in views] + [1.0 - lr * lam, b1, b2, eps_t, alpha])
        run_parallel(_adam_task, tasks)
    return params



_OLD_OPTIMIZERS = {"adam": _old_adam, "sgd": _old_sgd}


def _old_train(
    model: Model,
    tokens: np.ndarray,
    answers: np.ndarray,
    *,
    steps: int = 1000,
    lr: float = 1e-2,
    optimizer: str = "adam",
    batch_size: int | None = None,
    frozen=(),
    positions: np.ndarray | None = None,
    dtype=np.float32,
    rng: np.random.Generator | int | None = None,
    stop_at_accuracy: float | None = 1.0,
    log_every: int = 0,
    callback: Callable | None = None,
    seed: int | None = None,
    weight_decay: float | Mapping[str, float] = 0.0,
    eps: float = 1e-8,
    eps_form: str = "standard",
    betas: tuple[float, float] = (0.9, 0.999),
    momentum: float = 0.0,
    tie_readout: bool = False,
    path: str = "auto",
    max_rows: int | None = None,
) -> TrainResult:
    if optimizer not in OPTIMIZERS:
        raise InputError(f"optimizer must be one of {sorted(OPTIMIZERS)}, got {optimizer!r}")
    if path not in PATHS:
        raise InputError(f"path must be one of {PATHS}, got {path!r}")
    frozen = frozenset(frozen)
    unknown = frozen - set(GROUPS)
    if unknown:
        raise InputError(f"unknown parameter groups {sorted(unknown)}; groups are {GROUPS}")
    steps = check_positive_int("steps", steps)
    if seed is not None:
        if rng is not None:
            raise InputError("give rng or seed, not both")
        rng = seed_rng(seed, "batches")
    rng = _as_rng(rng)
    tokens = np.asarray(tokens, dtype=np.int64)
    answers = np.asarray(answers, dtype=np.int64)
    n = tokens.shape[0]
    batch = n if batch_size is None else min(check_positive_int("batch_size", batch_size), n)
    if max_rows is not None:
        check_positive_int("max_rows", max_rows)
    template = model.with_dense_readout().astype(dtype)  # training may make any read-out column nonzero
    if tie_readout:
        if template.n_out != template.n_entities:
            raise InputError(f"a tied read-out U = E needs n_out == N, got n_out = {template.n_out}, "
                             f"N = {template.n_entities}")
        if "unembedding" in frozen and "entity_embedding" not in frozen:
            raise InputError("with a tied read-out U = E, freeze 'entity_embedding' (the shared matrix), "
                             "not 'unembedding' alone")
        template = template.replace(unembedding=template.entity_embedding)
        if "entity_embedding" in frozen:
            frozen = frozen | {"unembedding"}
    decay = _group_values("weight_decay", weight_decay, 0.0)
    params = params_of(template)
    decay_by_key = {key: decay[group_of(key)] for key in params if decay[group_of(key)]}
    reason = structure_reason(template, tokens, positions)
    if path == "structured" and reason is not None:
        raise InputError(f"the structured step does not apply: {reason}")
    step_path = "structured" if path != "dense" and reason is None else "dense"
    history = TrainResult(template, 0, False, path=step_path)
    batches = EpochBatches(n, batch, rng) if batch < n else None
    start = time.perf_counter()
    state = {"done": False}

    def _piece(current_model: Model, piece_tokens, piece_answers):
        if step_path == "structured":
            return loss_and_grads_structured(current_model, piece_tokens, piece_answers, frozen)
        return loss_and_grads(current_model, piece_tokens, piece_answers, positions, frozen)

    def _pieces(current_model: Model, batch_tokens, batch_answers):
        """The batch's mean loss and its gradient, from pieces of at most ``max_rows`` queries."""
        B = len(batch_tokens)
        if max_rows is None or B <= max_rows:
            return _piece(current_model, batch_tokens, batch_answers)
        loss = 0.0
        grads: dict[str, np.ndarray] = {}
        predictions: list[np.ndarray] = []
        for start in range(0, B, max_rows):
            part = slice(start, min(B, start + max_rows))
            weight = (part.stop - part.start) / B
            piece_loss, piece_grads, piece_predictions = _piece(current_model, batch_tokens[part],
                                                                batch_answers[part])
            loss += weight * piece_loss
            for key, g in piece_grads.items():
                grads[key] = grads[key] + weight * g if key in grads else weight * g
            predictions.append(np.asarray(piece_predictions).reshape(part.stop - part.start, -1))
        return loss, grads, np.concatenate(predictions).reshape(-1)

    def model_of(current: dict) -> Model:
        if tie_readout:
            current = {**current, "unembedding": current["entity_embedding"]}
        try:
            return with_params(template, current)
        except ValueError as exc:  # the Model refuses non-finite weights
            raise FloatingPointError(f"parameters became non-finite at step {len(history.losses)} ({exc}): "
                                     f"lower the learning rate (lr = {lr})") from None

    def grad_fn(current, step):
        if state.pop("check_now", False):  # the previous update ended an epoch: check every query
            accuracy = check_queries(model_of(current).astype(np.float64), tokens, answers,
                                     positions=positions).accuracy
            if accuracy >= stop_at_accuracy:
                state["done"] = True
                return {}
        if batches is not None:
            idx, epoch_ends = batches.next()
            state["check_now"] = epoch_ends and stop_at_accuracy is not None
        else:
            idx = slice(None)
        batch_answers = answers[idx]
        current_model = model_of(current)
        batch_tokens = tokens[idx]
        with np.errstate(over="ignore", invalid="ignore"):
            loss, grads, predictions = _pieces(current_model, batch_tokens, batch_answers)
        if not math.isfinite(loss):
            raise FloatingPointError(f"loss became {loss} at step {step}: lower the learning rate "
                                     f"(lr = {lr})")
        if tie_readout and "unembedding" in grads:
            grads["entity_embedding"] = grads["entity_embedding"] + grads.pop("unembedding")
        accuracy = float(np.mean(predictions == batch_answers.reshape(-1)))
        history.losses.append(loss)
        history.accuracies.append(accuracy)
        if log_every and step % log_every == 0:
            print(f"step {step:6d}  loss {loss:.5f}  accuracy {100 * accuracy:6.2f}%  "
                  f"({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
        if batches is None and stop_at_accuracy is not None and accuracy >= stop_at_accuracy:
            state["done"] = True
        return grads

    def stop(current, step, grads):
        history.steps = step  # updates applied so far
        if state["done"] or (callback is not None and callback(current, step, grads)):
            return True
        history.steps = step + 1  # this one is about to be applied
        return False

    options = {"lr": lr, "weight_decay": decay_by_key, "callback": stop}
    if optimizer == "adam":
        options.update(b1=betas[0], b2=betas[1], eps=eps, eps_form=eps_form)
    else:
        options.update(momentum=momentum)
    final = _OLD_OPTIMIZERS[optimizer](grad_fn, params, steps, **options)
    history.epochs = batches.epochs if batches is not None else history.steps
    if tie_readout:
        final = {**final, "unembedding": final["entity_embedding"]}
    history.model = with_params(template, final)
    # reached: every fact certified in exact arithmetic of the trained weights (checked in float64: the cast
    # is exact, and the float64 rounding bound is far tighter than the float32 one)
    verdict = check_queries(history.model.astype(np.float64), tokens, answers, positions=positions)
    history.reached = verdict.exact
    history.seconds = time.perf_counter() - start
    return history




# ------------------------------------------------------------------------------------ the comparison

TASK = random_task(24, 3, 5)
TOKENS, ANSWERS = single_hop_queries(TASK)
COT = training_data(TASK, 2, True)
TWO_HOP = training_data(TASK, 2, False)

# name: (init_model options, train options); the data is the single-hop queries unless the options say
CASES = {
    "base": ({}, {"steps": 40}),
    "base dense": ({}, {"steps": 40, "path": "dense"}),
    "reaches 100%": ({}, {"steps": 3000, "lr": 3e-2}),
    "decay groups": ({}, {"steps": 40, "weight_decay": {"mlp": 0.1, "entity_embedding": 0.5}}),
    "frozen read-out": ({}, {"steps": 40, "frozen": ("unembedding",)}),
    "frozen embeddings": ({}, {"steps": 40, "frozen": ("entity_embedding", "relation_embedding")}),
    "softmax": ({"attention": "softmax", "heads": 2, "positions": 2}, {"steps": 40}),
    "chunked rows": ({}, {"steps": 30, "max_rows": 20}),
    "chunked rows dense": ({}, {"steps": 30, "max_rows": 20, "path": "dense"}),
    "minibatch to 100%": ({}, {"steps": 400, "lr": 3e-2, "batch_size": 16}),
    "minibatch without a stop": ({}, {"steps": 50, "batch_size": 20, "stop_at_accuracy": None}),
    "sgd momentum decay": ({}, {"steps": 40, "lr": 0.5, "optimizer": "sgd", "momentum": 0.9,
                                "weight_decay": 0.01}),
    "sgd to 100%": ({}, {"steps": 3000, "lr": 1.0, "optimizer": "sgd"}),
    "tied read-out": ({"tied_readout": True}, {"steps": 40, "tie_readout": True}),
    "tied and frozen": ({"tied_readout": True}, {"steps": 20, "tie_readout": True,
                                                 "frozen": ("entity_embedding",)}),
    "hat epsilon, betas": ({}, {"steps": 30, "eps_form": "hat", "eps": 1e-6, "betas": (0.8, 0.99)}),
    "float64": ({"dtype": np.float64}, {"steps": 30, "dtype": np.float64}),
    "CoT": ({"attention": "softmax", "heads": 2, "positions": COT[3]},
            {"steps": 30, "data": COT}),
    "two hops, minibatch in pieces": ({"attention": "softmax", "positions": TWO_HOP[3]},
                                      {"steps": 60, "batch_size": 50, "max_rows": 17, "data": TWO_HOP}),
    "stopped by the callback": ({}, {"steps": 40, "stop_after": 7}),
}


def _run(trainer, model_options, options):
    """Train with ``trainer``; return everything it produced (and the batch generator's next draw)."""
    options = {"lr": 1e-2, **options}
    tokens, answers, positions, _ = options.pop("data", (TOKENS, ANSWERS, None, 2))
    calls = []
    stop_after = options.pop("stop_after", None)
    if stop_after is not None:
        def callback(params, step, grads):
            calls.append((step, sorted(grads), float(np.sum(params["entity_embedding"]))))
            return step >= stop_after
        options["callback"] = callback
    generator = np.random.default_rng(3)
    result = trainer(init_model(24, 3, 8, 16, rng=1, **model_options), tokens, answers, positions=positions,
                     rng=generator, **options)
    return result, calls, generator.integers(0, 2**62)


@pytest.mark.parametrize("name", list(CASES))
def test_train_is_the_old_loop_bit_for_bit(name):
    model_options, options = CASES[name]
    new, new_calls, new_next = _run(train, model_options, dict(options))
    old, old_calls, old_next = _run(_old_train, model_options, dict(options))
    assert new.losses == old.losses and new.accuracies == old.accuracies  # every float, exactly
    assert (new.steps, new.epochs, new.reached, new.path) == (old.steps, old.epochs, old.reached, old.path)
    new_weights, old_weights = new.model.arrays(), old.model.arrays()
    assert new_weights.keys() == old_weights.keys()
    for key, value in old_weights.items():
        assert new_weights[key].dtype == value.dtype and np.array_equal(new_weights[key], value), key
    assert new_calls == old_calls and new_next == old_next  # the callback saw the same; the same draws
    assert len(old.losses) in (old.steps, old.steps + 1)


def test_the_cases_cover_each_way_to_stop():
    """Among the cases: runs stopped at 100% by the batch, by an epoch-end check, by the callback, and runs
    to the step budget."""
    seen = {name: _run(_old_train, *CASES[name])[0] for name in
            ("reaches 100%", "minibatch to 100%", "stopped by the callback", "base")}
    assert seen["reaches 100%"].reached and seen["reaches 100%"].steps < 3000
    assert seen["minibatch to 100%"].reached and seen["minibatch to 100%"].epochs < 400
    assert seen["stopped by the callback"].steps == 7 and not seen["base"].reached
    assert seen["base"].steps == 40


def test_the_comparison_can_fail():
    """A learning rate larger by one part in a million (a few float32 units in the last place of the
    update) is another trajectory: the comparison sees it."""
    new = _run(train, {}, {"steps": 20, "lr": 1e-2})[0]
    old = _run(_old_train, {}, {"steps": 20, "lr": 1e-2 * (1 + 1e-6)})[0]
    assert new.losses[0] == old.losses[0] and new.losses != old.losses


def test_divergence_is_the_same_error():
    options = {"steps": 50, "lr": 1e6, "optimizer": "sgd"}
    messages = []
    for trainer in (train, _old_train):
        with pytest.raises(FloatingPointError) as caught:
            _run(trainer, {}, dict(options))
        messages.append(str(caught.value))
    assert messages[0] == messages[1] and "at step" in messages[0]


# ------------------------------------------------------------------------------------ the callbacks


def test_a_callback_object_stops_at_an_epoch_end():
    """A Callback passed as ``callback``: its on_epoch_end runs after the update that ends each epoch."""
    from georecall.verify.training.train import Callback

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
    from georecall.verify.training.train import StepState, StopAtCheckedAccuracy

    state = StepState({}, {}, 0.0, 0.0)
    calls = []
    stop = StopAtCheckedAccuracy(1.0, lambda params, steps: calls.append(steps) or 1.0)
    assert stop.on_epoch_end(4, state) and calls == [5] and not stop.on_step(4, state)
    assert not StopAtCheckedAccuracy(1.0, lambda params, steps: 0.99).on_epoch_end(4, state)


def test_the_batch_accuracy_stop_needs_the_threshold():
    from georecall.verify.training.train import StepState, StopAtBatchAccuracy

    assert StopAtBatchAccuracy(1.0).on_step(0, StepState({}, {}, 0.1, 1.0))
    assert not StopAtBatchAccuracy(1.0).on_step(0, StepState({}, {}, 0.1, 0.99))
    unreachable = train(init_model(24, 3, 8, 16, rng=1), TOKENS, ANSWERS, steps=200, lr=3e-2,
                        stop_at_accuracy=1.01)
    assert unreachable.steps == 200 and unreachable.reached  # it reached 100%, and went on


def test_optimizer_state_is_a_small_object_that_counts_its_updates():
    from georecall.verify.training.train import SGD, Adam

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
