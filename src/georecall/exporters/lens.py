"""``--to transformer-lens``: a TransformerLens 4.x model (``TransformerBridge.boot_native``).

The folder holds ``config.json`` (fields of ``TransformerBridgeConfig``) and ``state_dict.pt`` (the keys
``TransformerBridge.state_dict()`` shows after ``boot_native``, which its ``load_state_dict`` accepts
strictly), so that a process that never imports georecall loads it, with no import for its side effect::

    import json, torch
    from transformer_lens.model_bridge.sources import boot_native
    bridge = boot_native(json.load(open(f"{OUT}/config.json")))
    bridge.load_state_dict(torch.load(f"{OUT}/state_dict.pt"), strict=True)
    logits = bridge(tokens)[:, -1]                          # tokens: int64 (batch, T), georecall's ids

(a float64 export boots with ``dtype=torch.float64``: ``load_state_dict`` would cast into float32 weights).
``config.json`` also names what the model's parts are (its ``"georecall"`` entry, which TransformerLens
ignores: :func:`units_of`): the residual stream's named coordinate ranges and each block's heads and units.

How georecall's model maps onto TransformerLens's native architecture (normalization off, ReLU MLP, learned
absolute positions, causal softmax attention with scores divided by ``√d_head``, biases everywhere):

- vocabulary ``d_vocab = N + R`` in georecall's ids (entities, then relations; no BOS), answers
  ``d_vocab_out = n_out``;
- **positions**: georecall's ``P`` when the model has one, else ``pos_embed`` is zero (it adds exact zeros)
  and ``n_ctx`` is the longest sequence the task needs;
- **uniform attention** (the causal mean over ``u <= t``) has no TransformerLens kind: it is built exactly as
  zero ``W_Q`` and ``W_K`` — every score is 0 and the causal softmax of zeros is exactly ``1/(t + 1)``;
- **``d_head`` is the model's own**: the widest head's key width ``d_k`` or value width ``d_v``. Where
  TransformerLens does not allow the model's shape it is padded with zero columns: its native attention has
  one ``d_head`` for queries, keys and values alike, so a head whose ``d_v`` differs from its ``d_k`` (G2, C1:
  ``d_v = 2`` beside ``d_k = D``), or a layer narrower than the widest, is padded to the widest;
- **softmax attention** with georecall's explicit β: the config sets ``attn_scale = 2`` (TransformerLens then
  divides scores by 2 instead of ``√d_head``: exact, a power of two) and ``W_Q`` is stored as ``2·β·W_Q``: the
  scores are ``β·<q, k>`` (one rounding, in the bound);
- every layer has attention and an MLP (TransformerLens blocks do): a missing one is zero and adds exact
  zeros; heads and MLP units are padded with zeros to the largest layer's;
- **hard attention** (an idealization, β -> ∞) is refused: no finite softmax computes it.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.exporters.graph import Graph, exportable, graph_of
from georecall.exporters.torch_target import save_state

__all__ = ["ATTN_SCALE", "config_of", "graph", "load", "require", "runner", "units_of", "write"]

# TransformerLens divides scores by this (a power of two: exact); 1.0 it refuses for d_head > 1
ATTN_SCALE = 2.0


def _libraries():
    try:
        import torch
        from transformer_lens.model_bridge.sources import boot_native
    except ImportError:
        raise InputError("--to transformer-lens needs PyTorch and TransformerLens 4.x: pip install "
                         "'.[export-tl]' in a clone of georecall (CPU: pip install torch==2.13.0 first)") \
            from None
    return torch, boot_native


def _head_width(model: Model) -> int:
    """``d_head``: the widest head's ``d_k`` or ``d_v`` (TransformerLens has one width for both)."""
    widest = 1
    for layer in model.layers:
        att = layer.attention
        if att is not None:
            widest = max(widest, att.W_V.shape[2], 0 if att.W_Q is None else att.W_Q.shape[2])
    return widest


def _sizes(model: Model) -> tuple[int, int, int]:
    heads = max([1] + [layer.attention.heads for layer in model.layers if layer.attention is not None])
    mlp = max([0] + [layer.mlp.width for layer in model.layers if layer.mlp is not None])
    return heads, _head_width(model), mlp


def require() -> None:
    """Refuse (``InputError``) when PyTorch or TransformerLens is missing."""
    _libraries()


def graph(model: Model, dtype) -> Graph:
    """What the bridge stores and computes (padded heads and units, ``W_Q`` scaled by ``β·√d_head``): every
    attention padded to the model's most heads and widest head, every MLP to its widest, every layer given
    both parts (zero ones add exact zeros), except that a model with no MLP at all has none (``attn_only``).

    Parameters
    ----------
    model : Model
        The model to export.
    dtype : numpy dtype
        The target's dtype (every stored array is cast to it).

    Returns
    -------
    Graph

    Raises
    ------
    InputError
        Hard attention (:func:`~georecall.exporters.graph.exportable`).
    """
    exportable(model, "TransformerLens")
    heads, width, mlp = _sizes(model)
    g = graph_of(model, dtype, beta_in_queries=ATTN_SCALE, heads=heads, head_width=width,
                 mlp_width=mlp, every_part=True)
    if mlp == 0:  # attn_only: no block has an MLP
        g = dataclasses.replace(g, layers=tuple(dataclasses.replace(layer, mlp=None) for layer in g.layers))
    return g


def config_of(model: Model, context: int) -> dict:
    """The ``TransformerBridgeConfig`` fields of ``model``.

    Parameters
    ----------
    model : Model
    context : int
        The longest sequence needed (``n_ctx`` without position embeddings).

    Returns
    -------
    dict
    """
    heads, width, mlp = _sizes(model)
    return {
        "n_layers": len(model.layers), "d_model": model.d, "d_head": width, "n_heads": heads,
        "d_mlp": max(mlp, 1), "attn_only": mlp == 0,
        "n_ctx": model.max_positions or max(context, 1),
        "d_vocab": model.n_entities + model.n_relations, "d_vocab_out": model.n_out,
        "act_fn": "relu", "normalization_type": None, "attention_dir": "causal",
        "use_attn_scale": True, "attn_scale": ATTN_SCALE,
        "positional_embedding_type": "standard", "original_architecture": "georecall",
        "init_weights": False, "tokenizer_prepends_bos": False, "default_prepend_bos": False,
        "model_name": f"georecall-{model.meta.get('construction', 'model')}",
        "georecall": units_of(model),
    }


def units_of(model: Model) -> dict:
    """What the exported model's parts are, in TransformerLens's names (the ``"georecall"`` entry of
    ``config.json``; TransformerLens ignores a field it does not know).

    Parameters
    ----------
    model : Model

    Returns
    -------
    dict
        ``residual``: the named coordinate ranges of ``d_model`` (``[start, stop)`` and the shape they
        are read in, e.g. G1's ``blocks`` of shape ``(R, D)``: block ``B_r`` is coordinates
        ``start + r·D ...``), from the construction's layout (empty for a model without one); ``blocks``: per
        TransformerLens block its attention (kind, β, each head's own ``d_k`` and ``d_v`` inside the
        exported ``d_head``) and MLP width; ``tokens``: georecall's ids; the construction's own sizes
        (``D``, ``k``) when it has them.
    """
    _, width, _ = _sizes(model)
    blocks = []
    for i, layer in enumerate(model.layers):
        att, mlp = layer.attention, layer.mlp
        entry: dict = {"name": f"blocks.{i}"}
        if att is None:
            entry["attn"] = "none: zero weights, adds exact zeros"
        else:
            d_k = 0 if att.W_Q is None else int(att.W_Q.shape[2])
            entry["attn"] = {
                "kind": att.kind, "heads": att.heads, "d_k": d_k, "d_v": int(att.W_V.shape[2]),
                "d_head": width,
                "beta": None if att.kind == "uniform" else float(att.inverse_temperature),
                "how": ("the causal mean: zero W_Q and W_K, so every score is 0" if att.kind == "uniform" else
                        f"W_Q stored as {ATTN_SCALE:g}·β·W_Q; TransformerLens divides scores by attn_scale = "
                        f"{ATTN_SCALE:g}, so the scores are β·<q, k>"),
                "padding": "columns past d_k (queries, keys) or d_v (values) are zero",
            }
        entry["mlp"] = ("none: zero weights" if mlp is None else
                        {"units": int(mlp.width), "activation": "relu", "hook": f"blocks.{i}.mlp.hook_post"})
        blocks.append(entry)
    layout = model.meta.get("layout") if isinstance(model.meta.get("layout"), dict) else {}
    sizes = {key: model.meta[key] for key in ("construction", "D", "k") if key in model.meta}
    return {"residual": layout, "blocks": blocks, **sizes,
            "tokens": {"entities": [0, model.n_entities], "relations": [model.n_entities,
                                                                       model.n_entities + model.n_relations],
                       "order": "<r_k, ..., r_1, s>: the subject last; logits at the last position"}}


def _state(g: Graph, config: dict) -> dict[str, np.ndarray]:
    """TransformerLens's state_dict keys (``blocks.i.attn.q.weight`` ...) from the graph's stored arrays."""
    d, width, heads = config["d_model"], config["d_head"], config["n_heads"]
    pos = np.zeros((config["n_ctx"], d), dtype=g.dtype)
    if g.positions is not None:
        pos[: g.positions.stored.shape[0]] = g.positions.stored
    state = {"embed.weight": g.table.stored, "pos_embed.weight": pos}
    for i, layer in enumerate(g.layers):
        att, p = layer.attention, f"blocks.{i}."
        assert att is not None and att.W_Q is not None and att.W_K is not None  # every_part
        for name, W in (("q", att.W_Q), ("k", att.W_K), ("v", att.W_V)):
            state[f"{p}attn.{name}.weight"] = W.stored.transpose(0, 2, 1).reshape(heads * width, d)
            state[f"{p}attn.{name}.bias"] = np.zeros(heads * width, dtype=g.dtype)
        state[f"{p}attn.o.weight"] = att.W_O.stored.T
        state[f"{p}attn.o.bias"] = np.zeros(d, dtype=g.dtype)
        if not config["attn_only"]:
            mlp = layer.mlp
            assert mlp is not None
            state[f"{p}mlp.in.weight"], state[f"{p}mlp.in.bias"] = mlp.W1.stored.T, mlp.b1.stored
            state[f"{p}mlp.out.weight"], state[f"{p}mlp.out.bias"] = mlp.W2.stored.T, mlp.b2.stored
    state["unembed.weight"] = g.unembedding.stored
    state["unembed.bias"] = np.zeros(g.unembedding.stored.shape[0], dtype=g.dtype)
    return state


def write(model: Model, folder: str, dtype, context: int) -> None:
    """Write ``config.json`` and ``state_dict.pt`` into ``folder`` (which exists).

    Parameters
    ----------
    model : Model
    folder : str
    dtype : numpy dtype
    context : int
        The longest sequence the model must take (for ``n_ctx`` when it has no positions).

    Raises
    ------
    InputError
        PyTorch or TransformerLens missing, hard attention.
    """
    torch, _ = _libraries()
    config = config_of(model, context)
    state = _state(graph(model, dtype), config)
    save_state(torch, {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()},
               os.path.join(folder, "state_dict.pt"))  # a full disk stays an OSError
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(config, handle, indent=1)


def load(folder: str, dtype=None):
    """The bridge of an export folder, booted with ``boot_native`` and loaded strictly.

    Parameters
    ----------
    folder : str
    dtype : numpy dtype, optional
        The stored dtype (float64 boots a float64 model).

    Returns
    -------
    TransformerBridge
    """
    torch, boot_native = _libraries()
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    as_torch = torch.float64 if dtype is not None and np.dtype(dtype) == np.float64 else None
    bridge = boot_native(config, dtype=as_torch)
    bridge.load_state_dict(torch.load(os.path.join(folder, "state_dict.pt"), weights_only=True), strict=True)
    return bridge.eval()


def runner(folder: str, dtype=None):
    """The loaded bridge as a function tokens -> logits at the last position (NumPy).

    Parameters
    ----------
    folder : str
    dtype : numpy dtype, optional

    Returns
    -------
    callable
    """
    torch, _ = _libraries()
    bridge = load(folder, dtype)

    def run(tokens: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return bridge(torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64)))[:, -1].numpy()

    return run
