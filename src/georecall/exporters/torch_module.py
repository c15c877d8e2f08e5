"""A georecall model as a PyTorch ``nn.Module``: standalone (it imports only torch), copied into every
``georecall export --to torch`` folder as ``georecall_module.py``, so that the folder loads without
georecall::

    import sys; sys.path.insert(0, OUT)
    from georecall_module import load
    module = load(OUT)                      # config.json + state_dict.pt, strict
    logits = module(tokens)                 # tokens: int64 (batch, T); logits: (batch, n_out), last position

Parameter names and layouts are those of docs/model_format.md ("From and to PyTorch"): ``embed.weight`` (the
N + R token table, entities first), ``pos_embed.weight``, ``layers.i.attn.{q,k,v,o}_proj.weight``,
``layers.i.mlp.fc1/fc2.{weight,bias}``, ``unembed.weight``. Attention is causal; ``uniform`` layers average
the positions ``u <= t``; ``softmax`` layers score ``attention_scale · <q_t, k_u>`` with the layer's own
``attention_scale`` from config.json (georecall's β: no implicit ``1/√d_k``). No normalization, ReLU MLPs.
"""

from __future__ import annotations

import json
import os

import torch
from torch import nn

__all__ = ["GeorecallModule", "load"]

DTYPES = {"float32": torch.float32, "float64": torch.float64}


class _Attention(nn.Module):
    def __init__(self, d: int, spec: dict):
        super().__init__()
        self.kind, self.heads = spec["kind"], int(spec["heads"])
        self.d_k, self.d_v = int(spec.get("d_k") or 0), int(spec["d_v"])
        self.scale = float(spec.get("attention_scale", 1.0))
        if self.kind == "softmax":
            self.q_proj = nn.Linear(d, self.heads * self.d_k, bias=False)
            self.k_proj = nn.Linear(d, self.heads * self.d_k, bias=False)
        elif self.kind != "uniform":
            raise ValueError(f"attention kind {self.kind!r} is not supported (uniform or softmax)")
        self.v_proj = nn.Linear(d, self.heads * self.d_v, bias=False)
        self.o_proj = nn.Linear(self.heads * self.d_v, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        v = self.v_proj(x).view(B, T, self.heads, self.d_v).transpose(1, 2)
        if self.kind == "uniform":  # a(t, u) = 1/(t + 1) for u <= t
            counts = torch.arange(1, T + 1, dtype=x.dtype, device=x.device)[:, None]
            weights = causal.to(x.dtype) / counts
        else:
            q = self.q_proj(x).view(B, T, self.heads, self.d_k).transpose(1, 2)
            k = self.k_proj(x).view(B, T, self.heads, self.d_k).transpose(1, 2)
            scores = (q @ k.transpose(-1, -2)) * self.scale
            weights = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        z = (weights @ v).transpose(1, 2).reshape(B, T, self.heads * self.d_v)
        return self.o_proj(z)


class _MLP(nn.Module):
    def __init__(self, d: int, m: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, m), nn.Linear(m, d)

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(y)))


class _Layer(nn.Module):
    def __init__(self, d: int, spec: dict):
        super().__init__()
        if spec.get("attention") is not None:
            self.attn = _Attention(d, spec["attention"])
        if spec.get("mlp"):
            self.mlp = _MLP(d, int(spec["mlp"]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "attn"):
            x = x + self.attn(x)
        if hasattr(self, "mlp"):
            x = x + self.mlp(x)
        return x


class GeorecallModule(nn.Module):
    """THE forward pass of georecall (docs/model_format.md) in PyTorch.

    Parameters
    ----------
    config : dict
        ``N``, ``R``, ``d``, ``n_out``, ``positions`` (T or None), ``layers`` (per layer ``attention``: None
        or ``{"kind", "heads", "d_k", "d_v", "attention_scale"}``, ``mlp``: its width m or 0), ``dtype``.
    """

    def __init__(self, config: dict):
        super().__init__()
        self.config = dict(config)
        d = int(config["d"])
        self.n_entities = int(config["N"])
        self.embed = nn.Embedding(int(config["N"]) + int(config["R"]), d)
        if config.get("positions"):
            self.pos_embed = nn.Embedding(int(config["positions"]), d)
        self.layers = nn.ModuleList(_Layer(d, spec) for spec in config["layers"])
        self.unembed = nn.Linear(d, int(config["n_out"]), bias=False)
        self.to(DTYPES[config.get("dtype", "float32")])

    def forward(self, tokens: torch.Tensor, at: str = "last") -> torch.Tensor:
        """Logits at the last position ``(batch, n_out)`` (``at="all"``: every position).

        Parameters
        ----------
        tokens : torch.Tensor
            ``(batch, T)`` int64 token ids.
        at : str
            ``"last"`` (the default) or ``"all"``.

        Returns
        -------
        torch.Tensor
            ``(batch, n_out)``, or ``(batch, T, n_out)`` with ``at="all"``.
        """
        x = self.embed(tokens)
        if hasattr(self, "pos_embed"):
            x = x + self.pos_embed.weight[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.unembed(x[:, -1] if at == "last" else x)


def load(folder: str) -> GeorecallModule:
    """The module of an export folder (``config.json`` and ``state_dict.pt``, loaded strictly).

    Parameters
    ----------
    folder : str

    Returns
    -------
    GeorecallModule
        In evaluation mode.
    """
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as handle:
        config = json.load(handle)
    module = GeorecallModule(config)
    state = torch.load(os.path.join(folder, "state_dict.pt"), weights_only=True)
    module.load_state_dict(state, strict=True)
    return module.eval()
