"""A model's weights as the trainer's parameters: the random initialisation (:func:`init_model`) and the flat
dict of weights the optimizers update (:func:`params_of`, :func:`with_params`).

Parameters are a flat dict keyed like ``Model.arrays()`` (``entity_embedding``, ``layers.0.mlp.W1``, ...).
Groups, for freezing, weight decay and initialisation scale (:mod:`.groups`): ``entity_embedding``,
``relation_embedding``, ``position_embedding``, ``unembedding``, ``attention`` (every attention weight),
``mlp`` (every MLP weight and bias).

Initialization (``init_model``), with fan-in scaling so activations stay O(1), times a per-group
``init_scale`` (default 1): embeddings (E, Q, P) and U have i.i.d. ``N(0, 1/d)`` entries (rows of norm ≈ 1);
``W_Q, W_K, W_V ~ N(0, 1/d)``, ``W_O ~ N(0, 1/d_v)``; ``W1 ~ N(0, 1/d)``, ``W2 ~ N(0, 1/m)``; biases 0;
softmax inverse temperature ``1/sqrt(d_k)`` (not trained).

Randomness: ``init_model`` draws from its own generator (``seed=S`` → the ``"init"`` stream of the seed
contract, ``theory.seeds``); the trainer draws the batch order from another (:func:`.train.train`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from georecall.constructions.model import MLP, Attention, Layer, Model, unflatten
from georecall.errors import InputError
from georecall.theory.seeds import rng as seed_rng
from georecall.theory.tasks import as_rng, check_positive_int
from georecall.training.groups import GROUPS

__all__ = ["group_values", "init_model", "params_of", "with_params"]


def init_model(
    N: int,
    R: int,
    d: int,
    m: int,
    *,
    attention: str = "uniform",
    heads: int = 1,
    d_head: int | None = None,
    layers: int = 1,
    positions: int | None = None,
    n_out: int | None = None,
    rng: np.random.Generator | int | None = None,
    dtype=np.float32,
    seed: int | None = None,
    init_scale: float | Mapping[str, float] = 1.0,
    tied_readout: bool = False,
) -> Model:
    """A randomly initialized Model (see the module docstring for the distributions).

    Parameters
    ----------
    rng, seed
        The initialization's randomness, and only it: a Generator (or an integer for ``default_rng``), or
        ``seed``, the run seed of the seed contract, which draws from its ``"init"`` stream
        (``theory.seeds.rng(seed, "init")``). Give at most one. Batch order is drawn by :func:`.train.train`
        from its own generator: never pass the same Generator (or the same integer) to both.
    init_scale
        A factor on every standard deviation, or a mapping ``{group: factor}`` over ``GROUPS`` (missing groups
        keep 1): entry ``θ ~ N(0, (scale_g)² / fan_in)``.
    tied_readout
        Start with ``U = E`` (needs ``n_out == N``); train with ``train(..., tie_readout=True)`` to keep them
        equal. The draws are the same as without tying (U is drawn, then replaced), so the other weights do
        not depend on this flag.
    positions
        Number of position-embedding rows (``None``: no position embeddings). Softmax attention on single-hop
        queries, as in the multi-hop models, wants ``positions=2``.
    """
    N, R, d, m, heads, layers = (check_positive_int(n, v) for n, v in (("N", N), ("R", R), ("d", d), ("m", m),
                                                                        ("heads", heads), ("layers", layers)))
    if attention not in ("uniform", "softmax", "none"):
        raise InputError(f"attention must be 'uniform', 'softmax' or 'none', got {attention!r}")
    if seed is not None:
        if rng is not None:
            raise InputError("give rng or seed, not both")
        rng = seed_rng(seed, "init")
    rng = as_rng(rng)
    d_head = d_head or (d if attention == "uniform" else max(1, d // heads))
    n_out = N if n_out is None else n_out
    scales = group_values("init_scale", init_scale, 1.0)
    if tied_readout and n_out != N:
        raise InputError(f"a tied read-out U = E needs n_out == N, got n_out = {n_out}, N = {N}")

    def normal(shape, fan_in, group):
        draw = rng.standard_normal(shape) / math.sqrt(fan_in)
        if scales[group] != 1.0:
            draw *= scales[group]
        return draw.astype(dtype)

    built = []
    for _ in range(layers):
        att = None
        if attention == "uniform":
            att = Attention("uniform", W_V=normal((heads, d, d_head), d, "attention"),
                            W_O=normal((heads, d_head, d), d_head, "attention"))
        elif attention == "softmax":
            att = Attention("softmax", W_V=normal((heads, d, d_head), d, "attention"),
                            W_O=normal((heads, d_head, d), d_head, "attention"),
                            W_Q=normal((heads, d, d_head), d, "attention"),
                            W_K=normal((heads, d, d_head), d, "attention"),
                            inverse_temperature=1.0 / math.sqrt(d_head))
        mlp = MLP(normal((d, m), d, "mlp"), np.zeros(m, dtype), normal((m, d), m, "mlp"), np.zeros(d, dtype))
        built.append(Layer(att, mlp))
    E = normal((N, d), d, "entity_embedding")
    Q = normal((R, d), d, "relation_embedding")
    U = normal((n_out, d), d, "unembedding")
    if tied_readout:
        U = E.copy()
    P = None if positions is None else normal((positions, d), d, "position_embedding")
    meta = {"construction": "trained", "init": "fan-in normal", "tied_readout": bool(tied_readout)}
    return Model(E, Q, U, tuple(built), P, meta=meta)


def group_values(name: str, value, default: float) -> dict[str, float]:
    """``{group: float}`` from one number (every group) or a mapping over ``GROUPS`` (others: ``default``).

    Parameters
    ----------
    name : str
        The option's name, for the message.
    value : float or mapping
        One number, or a number per group.
    default : float
        The value of a group the mapping leaves out.

    Raises
    ------
    InputError
        The mapping names an unknown group.
    """
    if isinstance(value, Mapping):
        unknown = set(value) - set(GROUPS)
        if unknown:
            raise InputError(f"{name}: unknown parameter groups {sorted(unknown)}; groups are {GROUPS}")
        out = {g: float(value.get(g, default)) for g in GROUPS}
    else:
        out = {g: float(value) for g in GROUPS}
    for g, v in out.items():
        if not (math.isfinite(v) and v >= 0):
            raise InputError(f"{name} for {g} must be finite and >= 0, got {v}")
    return out


def params_of(model: Model) -> dict[str, np.ndarray]:
    """Writable copies of every weight, keyed like ``Model.arrays()``.

    Parameters
    ----------
    model : Model

    Returns
    -------
    dict
    """
    return {key: np.array(value) for key, value in model.arrays().items()}


def with_params(template: Model, params: dict[str, np.ndarray]) -> Model:
    """A Model with ``template``'s structure (kinds, temperatures) and the given weights (``unflatten``).

    Parameters
    ----------
    template : Model
        The structure.
    params : dict
        Every weight, keyed like ``template.arrays()``.

    Returns
    -------
    Model

    Raises
    ------
    ValueError
        A missing key, a wrong shape, or a non-finite weight (the Model refuses it).
    """
    return unflatten(template, params)
