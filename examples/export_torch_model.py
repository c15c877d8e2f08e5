"""A model trained elsewhere: export a small PyTorch transformer to a georecall model file, evaluate it, and
load it back into PyTorch (docs/model_format.md).

With PyTorch installed this trains a one-layer transformer (token table, positions, 2 causal softmax heads,
a ReLU MLP, an untied read-out) on every fact of a small task, converts its ``state_dict`` with
``georecall.io.from_state_dict``, checks that georecall's forward pass gives the same logits, writes the model
file, runs ``georecall eval`` on it, and loads ``to_state_dict`` of the georecall model into a fresh PyTorch
module (strict), which again gives the same logits. Without PyTorch it builds the same ``state_dict`` with
NumPy in PyTorch's layout (``nn.Linear`` weights are ``(out, in)``) and compares georecall's forward pass with
a NumPy transcription of the PyTorch module's forward.

    python examples/export_torch_model.py [OUT.npz]
"""

from __future__ import annotations

import math
import os
import sys
import tempfile

import numpy as np

from georecall.constructions.forward import forward
from georecall.constructions.model import unflatten
from georecall.constructions.storage import save_model
from georecall.io import from_state_dict, to_state_dict
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries

N, R, D_MODEL, MLP_WIDTH, HEADS, D_HEAD, SEED = 16, 2, 32, 128, 2, 8, 0


def torch_module(N: int, R: int, d: int, m: int, heads: int, d_head: int, positions: int):
    """The PyTorch module, named as docs/model_format.md's schema (needs torch)."""
    import torch
    from torch import nn

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(d, heads * d_head, bias=False)
            self.k_proj = nn.Linear(d, heads * d_head, bias=False)
            self.v_proj = nn.Linear(d, heads * d_head, bias=False)
            self.o_proj = nn.Linear(heads * d_head, d, bias=False)

        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (p(x).view(B, T, heads, d_head).transpose(1, 2)
                       for p in (self.q_proj, self.k_proj, self.v_proj))
            out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # scale 1/√d_head
            return self.o_proj(out.transpose(1, 2).reshape(B, T, heads * d_head))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(d, m), nn.Linear(m, d)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn, self.mlp = Attention(), MLP()

        def forward(self, x):
            x = x + self.attn(x)  # no LayerNorm: georecall's forward pass has none
            return x + self.mlp(x)

    class OneLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(N + R, d)  # entities 0..N-1, then relations N..N+R-1
            self.pos_embed = nn.Embedding(positions, d)
            self.layers = nn.ModuleList([Block()])
            self.unembed = nn.Linear(d, N, bias=False)

        def forward(self, tokens):
            x = self.embed(tokens) + self.pos_embed.weight[: tokens.shape[1]]
            for layer in self.layers:
                x = layer(x)
            return self.unembed(x[:, -1])  # logits at the last position

    return OneLayer()


def with_torch(out: str) -> None:
    import torch

    from georecall.cli import main

    torch.manual_seed(SEED)
    task = task_for_seed(N, R, SEED)
    tokens, answers = queries(task)  # ⟨r, s⟩: relation token N + r, then the subject s
    module = torch_module(N, R, D_MODEL, MLP_WIDTH, HEADS, D_HEAD, positions=2)
    x, y = torch.tensor(tokens), torch.tensor(answers)
    optimizer = torch.optim.Adam(module.parameters(), lr=1e-2)
    for step in range(400):
        optimizer.zero_grad()
        logits = module(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        optimizer.step()
        if (logits.argmax(1) == y).all():
            break
    with torch.no_grad():
        torch_logits = module(x).numpy()
    print(f"PyTorch: {int((torch_logits.argmax(1) == answers).sum())}/{len(answers)} facts after {step + 1} "
          f"steps")
    model = unflatten(*from_state_dict(module.state_dict(), N=N, heads=HEADS), meta={"source": "pytorch"})
    ours = forward(model, tokens)
    gap = float(np.abs(ours - torch_logits).max())
    print(f"georecall's forward pass vs PyTorch: largest logit difference {gap:.2e} (float32)")
    assert gap < 1e-4 * max(1.0, float(np.abs(torch_logits).max()))
    save_model(model, out, extra_arrays={"task_table": task.table}, source="pytorch", N=N, R=R, k=1)
    print(f"wrote {out}; georecall eval {out}:")
    assert main(["eval", out, "--quiet"]) == 0
    fresh = torch_module(N, R, D_MODEL, MLP_WIDTH, HEADS, D_HEAD, positions=2)
    fresh.load_state_dict({key: torch.from_numpy(value) for key, value in to_state_dict(model).items()},
                          strict=True)
    with torch.no_grad():
        back = fresh(x).numpy()
    print(f"round trip into PyTorch: largest logit difference {float(np.abs(back - torch_logits).max()):.2e}")
    assert np.allclose(back, torch_logits, atol=1e-5, rtol=1e-5)


def numpy_state_dict(rng) -> dict[str, np.ndarray]:
    """The same module's state_dict, drawn with NumPy in PyTorch's layout (``nn.Linear``: ``(out, in)``)."""
    d, m, hd = D_MODEL, MLP_WIDTH, HEADS * D_HEAD
    return {"embed.weight": rng.normal(size=(N + R, d)), "pos_embed.weight": rng.normal(size=(2, d)),
            "layers.0.attn.q_proj.weight": rng.normal(size=(hd, d)) / math.sqrt(d),
            "layers.0.attn.k_proj.weight": rng.normal(size=(hd, d)) / math.sqrt(d),
            "layers.0.attn.v_proj.weight": rng.normal(size=(hd, d)) / math.sqrt(d),
            "layers.0.attn.o_proj.weight": rng.normal(size=(d, hd)) / math.sqrt(hd),
            "layers.0.mlp.fc1.weight": rng.normal(size=(m, d)) / math.sqrt(d),
            "layers.0.mlp.fc1.bias": rng.normal(size=m) * 0.1,
            "layers.0.mlp.fc2.weight": rng.normal(size=(d, m)) / math.sqrt(m),
            "layers.0.mlp.fc2.bias": rng.normal(size=d) * 0.1,
            "unembed.weight": rng.normal(size=(N, d)) / math.sqrt(d)}


def torch_layout_forward(sd: dict, tokens: np.ndarray, heads: int) -> np.ndarray:
    """The PyTorch module's forward, transcribed to NumPy (column-vector weights, ``x @ W.T``): an independent
    reference for georecall's forward pass on the converted arrays."""
    B, T = tokens.shape
    x = sd["embed.weight"][tokens] + sd["pos_embed.weight"][:T]
    for i in range(1 + max(int(k.split(".")[1]) for k in sd if k.startswith("layers."))):
        p = f"layers.{i}."
        q, k, v = (x @ sd[f"{p}attn.{n}_proj.weight"].T for n in "qkv")
        q, k, v = (a.reshape(B, T, heads, -1) for a in (q, k, v))
        scores = np.einsum("bthe,buhe->bhtu", q, k) / math.sqrt(q.shape[-1])
        scores = np.where(np.tril(np.ones((T, T), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attended = np.einsum("bhtu,buhe->bthe", weights, v).reshape(B, T, -1)
        x = x + attended @ sd[f"{p}attn.o_proj.weight"].T
        hidden = np.maximum(x @ sd[f"{p}mlp.fc1.weight"].T + sd[f"{p}mlp.fc1.bias"], 0)
        x = x + hidden @ sd[f"{p}mlp.fc2.weight"].T + sd[f"{p}mlp.fc2.bias"]
    return x[:, -1] @ sd["unembed.weight"].T


def without_torch(out: str) -> None:
    from georecall.cli import main

    print("PyTorch is not installed: the state_dict is drawn with NumPy in PyTorch's layout")
    task = task_for_seed(N, R, SEED)
    tokens, _ = queries(task)
    sd = numpy_state_dict(np.random.default_rng(SEED))
    model = unflatten(*from_state_dict(sd, N=N, heads=HEADS))
    gap = float(np.abs(forward(model, tokens) - torch_layout_forward(sd, tokens, HEADS)).max())
    print(f"georecall's forward pass vs the module's forward in NumPy: largest logit difference {gap:.2e}")
    assert gap < 1e-9
    back = to_state_dict(model)
    assert back.keys() == sd.keys() and all(np.array_equal(back[k], sd[k]) for k in sd)
    print("to_state_dict(from_state_dict(sd)) == sd, every array")
    save_model(model, out, extra_arrays={"task_table": task.table}, source="numpy", N=N, R=R, k=1)
    print(f"wrote {out}; georecall eval {out} (untrained: about chance):")
    assert main(["eval", out, "--quiet"]) == 0


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        given = [a for a in sys.argv[1:] if a.endswith(".npz")]  # (not the test runner's own options)
        target = given[0] if given else os.path.join(folder, "exported.npz")
        try:
            import torch  # noqa: F401
        except ImportError:
            without_torch(target)
        else:
            with_torch(target)
