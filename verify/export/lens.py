"""``--to transformer-lens``: a TransformerLens 4.x model (``TransformerBridge.boot_native``).

The folder holds ``config.json`` (fields of ``TransformerBridgeConfig``) and ``state_dict.pt`` (the keys
``TransformerBridge.state_dict()`` shows after ``boot_native``, which its ``load_state_dict`` accepts
strictly), so that a process that never imports georecall loads it::

    import json, torch
    from transformer_lens.model_bridge import TransformerBridge
    import transformer_lens.model_bridge.sources            # attaches boot_native
    bridge = TransformerBridge.boot_native(json.load(open(f"{OUT}/config.json")))
    bridge.load_state_dict(torch.load(f"{OUT}/state_dict.pt"), strict=True)
    logits = bridge(tokens)[:, -1]                          # tokens: int64 (batch, T), georecall's ids

(a float64 export boots with ``dtype=torch.float64``: ``load_state_dict`` would cast into float32 weights).

How georecall's model maps onto TransformerLens's native architecture (normalization off, ReLU MLP, learned
absolute positions, causal softmax attention with scores divided by ``√d_head``, biases everywhere):

- vocabulary ``d_vocab = N + R`` in georecall's ids (entities, then relations; no BOS), answers
  ``d_vocab_out = n_out``;
- **positions**: georecall's ``P`` when the model has one, else ``pos_embed`` is zero (it adds exact zeros)
  and ``n_ctx`` is the longest sequence the task needs;
- **uniform attention** (the causal mean over ``u <= t``) has no TransformerLens kind: it is built exactly as
  zero ``W_Q`` and ``W_K`` — every score is 0 and the causal softmax of zeros is exactly ``1/(t + 1)``;
- **softmax attention** with georecall's explicit β: TransformerLens divides scores by ``√d_head``, so
  ``d_head`` is padded (with zero columns) to a power of 4, making ``√d_head`` a power of two, and ``W_Q`` is
  stored as ``β·√d_head·W_Q``: the scores are ``β·<q, k>`` (one rounding, in the bound);
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
from georecall.verify.export.graph import Graph, exportable, graph_of

__all__ = ["config_of", "graph", "load", "require", "runner", "write"]


def _libraries():
    try:
        import torch
        import transformer_lens.model_bridge.sources  # noqa: F401  (attaches boot_native)
        from transformer_lens.model_bridge import TransformerBridge
    except ImportError:
        raise InputError("--to transformer-lens needs PyTorch and TransformerLens 4.x: pip install "
                         "'.[export]' in georecall's clone (CPU: pip install torch==2.13.0 first)") from None
    return torch, TransformerBridge


def _head_width(model: Model) -> int:
    """``d_head``: the widest head (``d_k`` or ``d_v``) rounded up to a power of 4 (so ``√d_head`` is a power
    of two)."""
    widest = 1
    for layer in model.layers:
        att = layer.attention
        if att is not None:
            widest = max(widest, att.W_V.shape[2], 0 if att.W_Q is None else att.W_Q.shape[2])
    width = 1
    while width < widest:
        width *= 4
    return width


def _sizes(model: Model) -> tuple[int, int, int]:
    heads = max([1] + [layer.attention.heads for layer in model.layers if layer.attention is not None])
    mlp = max([0] + [layer.mlp.width for layer in model.layers if layer.mlp is not None])
    return heads, _head_width(model), mlp


def require() -> None:
    """Refuse (``InputError``) when PyTorch or TransformerLens is missing."""
    _libraries()


def graph(model: Model, dtype) -> Graph:
    """What the bridge stores and computes (padded heads and units, ``W_Q`` scaled by ``β·√d_head``)."""
    exportable(model, "TransformerLens")
    heads, width, mlp = _sizes(model)
    g = graph_of(model, dtype, beta_in_queries=float(np.sqrt(width)), heads=heads, head_width=width,
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
        "positional_embedding_type": "standard", "original_architecture": "georecall",
        "init_weights": False, "tokenizer_prepends_bos": False, "default_prepend_bos": False,
        "model_name": f"georecall-{model.meta.get('construction', 'model')}",
    }


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
    torch.save({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in state.items()},
               os.path.join(folder, "state_dict.pt"))
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
    torch, TransformerBridge = _libraries()
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    as_torch = torch.float64 if dtype is not None and np.dtype(dtype) == np.float64 else None
    bridge = TransformerBridge.boot_native(config, dtype=as_torch)
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
