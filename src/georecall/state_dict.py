"""georecall's model arrays from a PyTorch-style ``state_dict``, and back.

The model file format and the conventions are in ``docs/model_format.md``. This module translates between
georecall's arrays (row vectors, ``x @ W``; the names of ``Model.arrays()``, which are the model file's) and
the names and layouts a PyTorch module of the same architecture would use (``nn.Linear`` stores ``weight``
as ``(out_features, in_features)``, so ``W1 = fc1.weight.T``). Values are NumPy arrays; a ``torch.Tensor`` is
accepted anywhere an array is (converted with ``.detach().cpu().numpy()``; bfloat16, which NumPy cannot hold,
is cast to float32 first, exactly): torch is never imported here.
Like ``georecall.io`` it is infrastructure (it imports none of georecall's packages), so it returns the
structure and arrays that ``georecall.constructions.model.unflatten`` turns into a Model::

    from georecall.constructions.model import unflatten
    from georecall.constructions.storage import save_model
    from georecall.io import from_state_dict, to_state_dict

    model = unflatten(*from_state_dict(module.state_dict(), N=N, heads=H))
    save_model(model, "model.npz", extra_arrays={"task_table": table})   # then: georecall eval model.npz
    module.load_state_dict({k: torch.from_numpy(v) for k, v in to_state_dict(model).items()})

Key schema (``i`` is the layer index, ``H`` the heads, ``d_k``/``d_v`` the per-head widths):

========================================  ==================  ============================================
key                                       shape               georecall array
========================================  ==================  ============================================
``embed.weight``                          ``(N + R, d)``      ``E = [:N]``, ``Q = [N:]`` (entities first)
  or ``entity_embed.weight`` and          ``(N, d)``,         ``E``, ``Q``
  ``relation_embed.weight``               ``(R, d)``
``pos_embed.weight`` (optional)           ``(T, d)``          ``P``
``layers.i.attn.q_proj.weight``           ``(H·d_k, d)``      ``W_Q[h] = q_proj.weight[h·d_k:(h+1)·d_k].T``
``layers.i.attn.k_proj.weight``           ``(H·d_k, d)``      ``W_K`` likewise
``layers.i.attn.v_proj.weight``           ``(H·d_v, d)``      ``W_V`` likewise
``layers.i.attn.o_proj.weight``           ``(d, H·d_v)``      ``W_O[h] = o_proj.weight[:, h·d_v:(h+1)·d_v].T``
``layers.i.mlp.fc1.weight`` / ``.bias``   ``(m, d)``/``(m,)`` ``W1 = fc1.weight.T``, ``b1``
``layers.i.mlp.fc2.weight`` / ``.bias``   ``(d, m)``/``(d,)`` ``W2 = fc2.weight.T``, ``b2``
``unembed.weight``                        ``(n_out, d)``      ``U`` (logits ``x @ U.T``: already row form)
========================================  ==================  ============================================

A layer without ``q_proj``/``k_proj`` but with ``v_proj``/``o_proj`` is *uniform* attention (the mean over
positions ``u <= t``); with all four it is causal softmax attention with scores ``β·<x_t W_Q, x_u W_K>``.
PyTorch's scaled dot product uses ``β = 1/√d_k``, which is :func:`from_state_dict`'s default
(``attention_scale="sqrt_dk"``); pass a number for another β.

Refused (``InputError``, naming the key), because georecall's forward pass has no such part: LayerNorm or
RMSNorm weights (``*norm*``, ``ln*``), biases of the attention projections or of the read-out, unless they are
all zero, and keys the schema does not know. Activations other than ReLU and non-causal attention leave no
trace in a state_dict: the caller must know the module uses ReLU and a causal mask (docs/model_format.md).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping

import numpy as np

from georecall.errors import InputError

__all__ = ["from_state_dict", "to_state_dict"]

_NORM = re.compile(r"(^|\.)(ln|norm|layernorm|layer_norm|rmsnorm)[\w]*\.", re.I)
_LAYER_KEY = re.compile(r"^layers\.(\d+)\.(attn\.(q|k|v|o)_proj|mlp\.fc(1|2))\.(weight|bias)$")


def _array(value, key: str) -> np.ndarray:
    """``state[key]`` as a NumPy array. bfloat16 (which NumPy has no type for) is cast to float32, exactly:
    every bfloat16 value is a float32 value (the same exponent range, 8 of float32's 24 significand bits)."""
    if hasattr(value, "detach"):  # a torch.Tensor (not imported here)
        tensor = value.detach().cpu()
        name = str(getattr(tensor, "dtype", ""))
        if name == "torch.bfloat16":
            tensor = tensor.float()  # exact
        try:
            value = tensor.numpy()
        except TypeError as exc:
            raise InputError(f"state_dict[{key!r}] has dtype {name}, which NumPy cannot hold ({exc}); cast "
                             f"it first, e.g. state_dict[{key!r}].double() (exact for every float "
                             "format)") from None
    if np.ma.isMaskedArray(value) and np.ma.is_masked(value):  # np.asarray would read the hidden data
        raise InputError(f"state_dict[{key!r}] is a masked array with masked entries: fill them first "
                         "(array.filled(value)); the data under a mask is not a weight")
    array = np.asarray(value)
    if array.dtype.name == "bfloat16":  # ml_dtypes' bfloat16 inside a NumPy array
        array = array.astype(np.float32)  # exact
    if array.dtype.kind not in "fiu":
        raise InputError(f"state_dict[{key!r}] must hold numbers, got dtype {array.dtype}")
    return array


def _zero_or_refuse(state: Mapping, key: str, what: str) -> None:
    if key in state and np.any(_array(state[key], key) != 0):
        raise InputError(f"state_dict[{key!r}] is a nonzero {what}: georecall's forward pass has none "
                         "(see docs/model_format.md, 'What cannot be represented')")


def from_state_dict(state: Mapping, *, heads: int = 1, attention_scale: str | float = "sqrt_dk",
                    N: int | None = None, dtype=None) -> tuple[list[dict], dict[str, np.ndarray]]:
    """The structure and arrays of a georecall model from a state_dict in the schema above.

    Parameters
    ----------
    state : mapping of str to array or torch.Tensor
        The weights (``module.state_dict()`` of a module named as in the schema).
    heads : int
        Attention heads H of every attention layer (``q_proj``'s rows are H blocks of d_k).
    attention_scale : "sqrt_dk" or float
        β of softmax layers: ``1/√d_k`` as in PyTorch's scaled dot product (default), or a number.
    N : int, optional
        Number of entities when the state has one token table ``embed.weight`` of N + R rows (required
        then: the table does not say where entities end).
    dtype : numpy dtype, optional
        Cast every array to it (default: keep the state's dtype, float32 for most PyTorch models).

    Returns
    -------
    tuple
        ``(structure, arrays)``: the per-layer structure (attention kind and β, MLP or not) and the arrays
        under ``Model.arrays()`` names, as ``unflatten(structure, arrays)`` takes them (it checks every shape
        again and builds the Model).

    Raises
    ------
    InputError
        A missing, misshapen, unknown or unrepresentable key (LayerNorm, a nonzero attention or read-out
        bias), or an inconsistent number of heads.
    """
    _check_keys(state, heads)
    get = _reader(state, dtype)
    E, Q = _embeddings(state, N, get)
    d = E.shape[1]
    P = get("pos_embed.weight", 2) if "pos_embed.weight" in state else None
    _zero_or_refuse(state, "unembed.bias", "read-out bias")
    U = get("unembed.weight", 2)
    indices = sorted({int(m.group(1)) for k in state if (m := _LAYER_KEY.match(str(k)))})
    if indices != list(range(len(indices))):
        raise InputError(f"layers must be numbered 0, 1, ...; got {indices}")
    arrays: dict[str, np.ndarray] = {"entity_embedding": E, "relation_embedding": Q, "unembedding": U}
    if P is not None:
        arrays["position_embedding"] = P
    if U.shape[1] != d or Q.shape[1] != d or (P is not None and P.shape[1] != d):
        raise InputError(f"widths disagree: the entity embedding has d = {d}, the relation embedding "
                         f"{Q.shape[1]}, unembed.weight {U.shape[1]}"
                         + ("" if P is None else f", pos_embed.weight {P.shape[1]}"))
    structure: list[dict] = []
    for i in indices:
        attention = _attention(state, i, d, heads, attention_scale, get, arrays)
        structure.append({"attention": attention, "mlp": _mlp(state, i, d, get, arrays)})
    return structure, arrays


def _check_keys(state: Mapping, heads: int) -> None:
    """Refuse a state that is no mapping, a bad number of heads, normalization keys and unknown keys."""
    if not isinstance(state, Mapping):
        raise InputError(f"a state_dict is a mapping of names to arrays, got {type(state).__name__}")
    if isinstance(heads, bool) or not isinstance(heads, int) or heads < 1:
        raise InputError(f"heads must be a whole number >= 1, got {heads!r}")
    for key in state:
        if _NORM.search(str(key) + "."):
            raise InputError(f"state_dict[{key!r}] looks like a normalization layer (LayerNorm/RMSNorm): "
                             "georecall's forward pass has none (docs/model_format.md)")
    known = {"embed.weight", "entity_embed.weight", "relation_embed.weight", "pos_embed.weight",
             "unembed.weight", "unembed.bias"}
    unknown = sorted(k for k in state if k not in known and not _LAYER_KEY.match(str(k)))
    if unknown:
        raise InputError(f"unknown state_dict key(s) {unknown[:5]}: the schema is in docs/model_format.md")


def _reader(state: Mapping, dtype) -> Callable[[str, int], np.ndarray]:
    """``get(key, ndim)``: ``state[key]`` as an array of ``ndim`` dimensions, cast to ``dtype`` if given."""
    cast = (lambda a: a) if dtype is None else (lambda a: a.astype(dtype))

    def get(key: str, ndim: int) -> np.ndarray:
        if key not in state:
            raise InputError(f"state_dict has no {key!r}")
        array = _array(state[key], key)
        if array.ndim != ndim:
            raise InputError(f"state_dict[{key!r}] must be {ndim}-D, got shape {array.shape}")
        return cast(array)

    return get


def _embeddings(state: Mapping, N, get: Callable[[str, int], np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The entity and relation embeddings ``E``, ``Q``: one token table split at ``N``, or two tables."""
    if "embed.weight" in state:
        if "entity_embed.weight" in state or "relation_embed.weight" in state:
            raise InputError("give either embed.weight (one token table) or entity_embed.weight and "
                             "relation_embed.weight, not both")
        table = get("embed.weight", 2)
        if N is None or isinstance(N, bool) or not isinstance(N, int) or not 1 <= N < table.shape[0]:
            raise InputError(f"embed.weight has {table.shape[0]} rows (N entities, then R relations): pass "
                             f"N with 1 <= N < {table.shape[0]}, got N = {N!r}")
        return table[:N], table[N:]
    E, Q = get("entity_embed.weight", 2), get("relation_embed.weight", 2)
    if N is not None and N != E.shape[0]:
        raise InputError(f"entity_embed.weight has {E.shape[0]} rows, but N = {N} was given")
    return E, Q


def _attention(state: Mapping, i: int, d: int, heads: int, attention_scale: str | float,
               get: Callable[[str, int], np.ndarray], arrays: dict[str, np.ndarray]) -> dict | None:
    """Layer ``i``'s attention (its kind and β, or None), its per-head arrays added to ``arrays``."""
    p, a = f"layers.{i}.", f"layers.{i}.attention."
    for x in "qkvo":  # with or without the layer's attention weights: a nonzero bias is never dropped
        _zero_or_refuse(state, f"{p}attn.{x}_proj.bias", "attention bias")
    if not any(f"{p}attn.{x}_proj.weight" in state for x in "qkvo"):
        return None
    v, o = get(f"{p}attn.v_proj.weight", 2), get(f"{p}attn.o_proj.weight", 2)
    if v.shape[1] != d or v.shape[0] % heads or o.shape != (d, v.shape[0]):
        raise InputError(f"layer {i}: v_proj.weight {v.shape} and o_proj.weight {o.shape} must be "
                         f"(H·d_v, d) and (d, H·d_v) with H = {heads}, d = {d}")
    d_v = v.shape[0] // heads
    arrays[a + "W_V"] = v.reshape(heads, d_v, d).transpose(0, 2, 1)
    arrays[a + "W_O"] = o.T.reshape(heads, d_v, d)
    has_qk = [f"{p}attn.{x}_proj.weight" in state for x in "qk"]
    if any(has_qk) and not all(has_qk):
        raise InputError(f"layer {i}: q_proj and k_proj come together (neither: uniform attention)")
    if not all(has_qk):
        return {"kind": "uniform", "inverse_temperature": 1.0}
    q, k = get(f"{p}attn.q_proj.weight", 2), get(f"{p}attn.k_proj.weight", 2)
    if q.shape != k.shape or q.shape[1] != d or q.shape[0] % heads:
        raise InputError(f"layer {i}: q_proj.weight {q.shape} and k_proj.weight {k.shape} must "
                         f"both be (H·d_k, d) with H = {heads}, d = {d}")
    d_k = q.shape[0] // heads
    beta = _beta(d_k, attention_scale)
    arrays[a + "W_Q"] = q.reshape(heads, d_k, d).transpose(0, 2, 1)
    arrays[a + "W_K"] = k.reshape(heads, d_k, d).transpose(0, 2, 1)
    return {"kind": "softmax", "inverse_temperature": beta}


def _beta(d_k: int, attention_scale: str | float) -> float:
    """A softmax layer's β: ``1/√d_k`` for ``"sqrt_dk"``, else the positive number given."""
    try:
        beta = 1 / math.sqrt(d_k) if attention_scale == "sqrt_dk" else float(attention_scale)
    except (TypeError, ValueError):
        beta = math.nan
    if not (math.isfinite(beta) and beta > 0):
        raise InputError(f"attention_scale must be 'sqrt_dk' or a positive number, got "
                         f"{attention_scale!r}")
    return beta


def _mlp(state: Mapping, i: int, d: int, get: Callable[[str, int], np.ndarray],
         arrays: dict[str, np.ndarray]) -> bool:
    """Whether layer ``i`` has an MLP, its arrays (zero biases where none are given) added to ``arrays``."""
    p = f"layers.{i}."
    if f"{p}mlp.fc1.weight" in state or f"{p}mlp.fc2.weight" in state:
        fc1, fc2 = get(f"{p}mlp.fc1.weight", 2), get(f"{p}mlp.fc2.weight", 2)
        m = fc1.shape[0]
        arrays[p + "mlp.W1"], arrays[p + "mlp.W2"] = fc1.T, fc2.T
        arrays[p + "mlp.b1"] = get(f"{p}mlp.fc1.bias", 1) if f"{p}mlp.fc1.bias" in state else \
            np.zeros(m, fc1.dtype)
        arrays[p + "mlp.b2"] = get(f"{p}mlp.fc2.bias", 1) if f"{p}mlp.fc2.bias" in state else \
            np.zeros(d, fc2.dtype)
        return True
    if f"{p}mlp.fc1.bias" in state or f"{p}mlp.fc2.bias" in state:
        raise InputError(f"layer {i}: MLP biases without fc1.weight and fc2.weight")
    return False


def to_state_dict(model, *, token_table: bool = True, attention_scale: str | float = "sqrt_dk"
                  ) -> dict[str, np.ndarray]:
    """The state_dict of ``model`` (a georecall Model) in the schema above (NumPy arrays; ``torch.from_numpy``
    each for ``module.load_state_dict``).

    A softmax layer's β is folded into ``q_proj`` so that a module scaling scores by ``attention_scale``
    (``1/√d_k`` by default, as PyTorch does) computes the same scores: ``q_proj = β/scale · W_Q``. The
    read-out is written densely (``(n_out, d)``) whatever its storage.

    Parameters
    ----------
    model : Model
        The model.
    token_table : bool
        One ``embed.weight`` of N + R rows (default), or ``entity_embed.weight`` and
        ``relation_embed.weight``.
    attention_scale : "sqrt_dk" or float
        The score scale of the receiving module.

    Returns
    -------
    dict of str to numpy.ndarray
        The state_dict (biases of the MLPs included; no attention or read-out biases).

    Raises
    ------
    InputError
        For ``hard`` attention (an idealization with no PyTorch counterpart) or heads of unequal width.
    """
    E, Q = model.entity_embedding, model.relation_embedding
    state: dict[str, np.ndarray] = {}
    if token_table:
        state["embed.weight"] = np.concatenate([E, Q.astype(E.dtype, copy=False)])
    else:
        state["entity_embed.weight"], state["relation_embed.weight"] = np.array(E), np.array(Q)
    if model.position_embedding is not None:
        state["pos_embed.weight"] = np.array(model.position_embedding)
    for i, layer in enumerate(model.layers):
        p = f"layers.{i}."
        att = layer.attention
        if att is not None:
            if att.kind == "hard":
                raise InputError(f"layer {i} has hard attention, an idealization (β -> ∞) with no PyTorch "
                                 "counterpart")
            H, d, d_v = att.W_V.shape
            state[p + "attn.v_proj.weight"] = att.W_V.transpose(0, 2, 1).reshape(H * d_v, d)
            state[p + "attn.o_proj.weight"] = att.W_O.reshape(H * d_v, d).T.copy()
            if att.kind == "softmax":
                assert att.W_Q is not None and att.W_K is not None  # checked by Attention
                d_k = att.W_Q.shape[2]
                scale = 1 / math.sqrt(d_k) if attention_scale == "sqrt_dk" else float(attention_scale)
                factor = att.inverse_temperature / scale
                W_Q = att.W_Q if factor == 1 else att.W_Q * factor
                state[p + "attn.q_proj.weight"] = W_Q.transpose(0, 2, 1).reshape(H * d_k, d)
                state[p + "attn.k_proj.weight"] = att.W_K.transpose(0, 2, 1).reshape(H * d_k, d)
        if layer.mlp is not None:
            state[p + "mlp.fc1.weight"] = layer.mlp.W1.T.copy()
            state[p + "mlp.fc1.bias"] = np.array(layer.mlp.b1)
            state[p + "mlp.fc2.weight"] = layer.mlp.W2.T.copy()
            state[p + "mlp.fc2.bias"] = np.array(layer.mlp.b2)
    state["unembed.weight"] = np.array(model.full_unembedding())
    return {key: np.array(value) for key, value in state.items()}  # writable copies, never views
