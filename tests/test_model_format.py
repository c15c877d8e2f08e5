"""A researcher's path (issue 23): the model file format documented, a PyTorch state_dict in and out, and
``georecall eval``.

The forward pass on converted arrays is compared with an independent NumPy transcription of the PyTorch
module's forward (``examples/export_torch_model.py``), and with PyTorch itself when it is installed.
"""

from __future__ import annotations

import json
import math
import os
import re
import runpy

import numpy as np
import pytest

from georecall.cli import main
from georecall.constructions import registry
from georecall.constructions.forward import forward
from georecall.constructions.model import unflatten
from georecall.constructions.storage import save_model
from georecall.errors import InputError
from georecall.io import from_state_dict, to_state_dict
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import queries

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = runpy.run_path(os.path.join(ROOT, "examples", "export_torch_model.py"), run_name="example")
DOC = open(os.path.join(ROOT, "docs", "model_format.md"), encoding="utf-8").read()


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def strict_json(text: str) -> dict:
    def refuse(constant):
        raise ValueError(f"not strict JSON: {constant}")
    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------------------------------------- the doc


def test_the_doc_names_every_array_every_header_field_and_every_state_dict_key():
    model = unflatten(*from_state_dict(EXAMPLE["numpy_state_dict"](np.random.default_rng(0)), N=16, heads=2))
    names = set(model.arrays()) | {"layers.i.attention.W_Q", "layers.i.mlp.W1"}
    for name in names:
        assert re.sub(r"layers\.\d+\.", "layers.i.", name) in DOC, name
    for key in EXAMPLE["numpy_state_dict"](np.random.default_rng(0)):
        assert re.sub(r"layers\.\d+\.", "layers.i.", key.removesuffix(".bias")) in DOC, key
    for field in ("format", "version", "structure", "readout_columns", "meta", "record"):
        assert f"`{field}`" in DOC
    for what in ("LayerNorm", "GELU", "attention biases", "tied", "1/√d_k", "W1 = fc1.weight.T", "⟨r, s⟩",
                 "extra____task_table", "row vectors"):
        assert what.lower() in DOC.lower(), what


def test_a_saved_file_holds_exactly_what_the_doc_says(tmp_path):
    task = task_for_seed(16, 2, 0)
    model = unflatten(*from_state_dict(EXAMPLE["numpy_state_dict"](np.random.default_rng(0)), N=16, heads=2))
    path = save_model(model, str(tmp_path / "m.npz"), extra_arrays={"task_table": task.table}, k=1)
    with np.load(path, allow_pickle=False) as data:
        header = json.loads(str(data["__header__"]))
        members = set(data.files)
    assert header["format"] == "georecall-model-1" and header["record"] == {"k": 1}
    assert header["structure"] == [{"attention": {"kind": "softmax", "inverse_temperature": 1 / math.sqrt(8)},
                                    "mlp": True}]
    assert members == {"__header__", "extra____task_table"} | {k.replace(".", "__") for k in model.arrays()}


# ------------------------------------------------------------------------------------------ state_dicts


def test_from_state_dict_computes_the_modules_forward():
    """Against the NumPy transcription of the PyTorch module (an independent reference), 2 heads."""
    sd = EXAMPLE["numpy_state_dict"](np.random.default_rng(1))
    tokens, _ = queries(task_for_seed(16, 2, 1))
    model = unflatten(*from_state_dict(sd, N=16, heads=2))
    reference = EXAMPLE["torch_layout_forward"](sd, tokens, 2)
    assert np.allclose(forward(model, tokens), reference, rtol=1e-12, atol=1e-12)
    wrong_heads = unflatten(*from_state_dict(sd, N=16, heads=1))  # one wide head is another function
    assert not np.allclose(forward(wrong_heads, tokens), reference, atol=1e-6)


class _Tensor:
    """Enough of a ``torch.Tensor`` for ``from_state_dict`` (torch is optional): its values, its dtype's name,
    and ``.numpy()`` refusing the dtypes NumPy has no type for, as torch does."""

    def __init__(self, values: np.ndarray, dtype: str) -> None:
        self.values, self.dtype = values, dtype

    def detach(self):
        return self

    def cpu(self):
        return self

    def float(self):
        return _Tensor(self.values.astype(np.float32), "torch.float32")

    def numpy(self):
        if self.dtype in ("torch.bfloat16", "torch.float8_e4m3fn"):
            raise TypeError(f"Got unsupported ScalarType {self.dtype.split('.')[1].capitalize()}")
        return self.values


def _bfloat16(array: np.ndarray) -> np.ndarray:
    """Values of bfloat16: float32 with the low 16 significand bits cleared (exactly what torch holds)."""
    bits = np.asarray(array, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFF0000)
    return bits.view(np.float32)


def test_bfloat16_tensors_load_cast_exactly_and_other_unholdable_dtypes_are_refused_naming_the_key():
    sd = EXAMPLE["numpy_state_dict"](np.random.default_rng(3))
    as_bf16 = {k: _Tensor(_bfloat16(v), "torch.bfloat16") for k, v in sd.items()}
    structure, arrays = from_state_dict(as_bf16, N=16, heads=2)
    plain, expected = from_state_dict({k: _bfloat16(v) for k, v in sd.items()}, N=16, heads=2)
    assert structure == plain and all(arrays[k].dtype == np.float32 for k in arrays)
    assert all(np.array_equal(arrays[k], expected[k]) for k in expected)  # the same values: cast exactly
    odd = dict(sd, **{"unembed.weight": _Tensor(sd["unembed.weight"], "torch.float8_e4m3fn")})
    with pytest.raises(InputError, match=r"unembed\.weight.*float8_e4m3fn.*\.double\(\)"):
        from_state_dict(odd, N=16, heads=2)


def test_eval_of_a_float32_file_reports_its_exact_accuracy_as_its_float64_copy_does(tmp_path, capsys):
    """The positive control: computed in float32, the file's bound leaves queries open; the exact accuracy
    (float64 with its bound, then exact) is the float64 copy's."""
    task = task_for_seed(32, 2, 0)
    model = registry.get("geometric").build(task).model
    rng = np.random.default_rng(0)
    noisy = model.replace(entity_embedding=model.entity_embedding + 1e-3 * rng.standard_normal(
        model.entity_embedding.shape)).astype(np.float32)
    docs = {}
    for name, m in (("float32", noisy), ("float64", noisy.astype(np.float64))):
        path = save_model(m, str(tmp_path / f"{name}.npz"), extra_arrays={"task_table": task.table})
        code, out, _ = run(["eval", path, "--json"], capsys)
        docs[name] = strict_json(out)
        code, out, _ = run(["eval", path, "--json", "--arith", name], capsys)
        docs[name + " computed"] = strict_json(out)
    assert docs["float32"]["accuracy"] == docs["float64"]["accuracy"]
    assert docs["float32"]["min_margin"] == docs["float64"]["min_margin"]
    assert docs["float32"]["n_undecided"] == 0 and docs["float32"]["arith"] == "exact"
    assert docs["float32 computed"]["arith"] == "float32"
    assert docs["float32 computed"]["min_margin"]["width"] > docs["float32"]["min_margin"]["width"]


def test_round_trip_is_exact_for_uniform_softmax_and_compact_models():
    sd = EXAMPLE["numpy_state_dict"](np.random.default_rng(2))
    back = to_state_dict(unflatten(*from_state_dict(sd, N=16, heads=2)))
    assert back.keys() == sd.keys() and all(np.array_equal(back[k], sd[k]) for k in sd)
    for name, k in (("geometric", 1), ("path-blocks", 2), ("cot", 2)):
        task = task_for_seed(16, 2, 0)
        model = registry.get(name).build(task, k).model  # compact read-outs, softmax heads with β
        heads = max((layer.attention.heads for layer in model.layers if layer.attention), default=1)
        again = unflatten(*from_state_dict(to_state_dict(model), N=16, heads=heads))
        tokens, _ = queries(task, k)
        assert np.array_equal(forward(again, tokens), forward(model, tokens)), name


def test_entity_and_relation_tables_may_come_apart():
    sd = EXAMPLE["numpy_state_dict"](np.random.default_rng(3))
    table = sd.pop("embed.weight")
    split = {**sd, "entity_embed.weight": table[:16], "relation_embed.weight": table[16:]}
    a = unflatten(*from_state_dict(split, heads=2))
    b = unflatten(*from_state_dict({**sd, "embed.weight": table}, N=16, heads=2))
    assert np.array_equal(a.entity_embedding, b.entity_embedding)
    assert set(to_state_dict(a, token_table=False)) == set(split)


@pytest.mark.parametrize("change, message", [
    (lambda sd: sd.update({"layers.0.ln1.weight": np.ones(32)}), "normalization"),
    (lambda sd: sd.update({"norm.weight": np.ones(32)}), "normalization"),
    (lambda sd: sd.update({"layers.0.attn.q_proj.bias": np.ones(16)}), "attention bias"),
    (lambda sd: sd.update({"unembed.bias": np.ones(16)}), "read-out bias"),
    (lambda sd: sd.update({"layers.0.gate.weight": np.ones((3, 3))}), "unknown state_dict key"),
    (lambda sd: sd.pop("layers.0.attn.k_proj.weight"), "come together"),
    (lambda sd: sd.update({"layers.0.attn.q_proj.weight": np.ones((15, 32))}), "H·d_k"),
    (lambda sd: sd.pop("unembed.weight"), "no 'unembed.weight'"),
    # a bias of attention projections that the layer does not have is refused, not dropped (review)
    (lambda sd: [sd.pop(f"layers.0.attn.{x}_proj.weight") for x in "qkvo"]
     and sd.update({"layers.0.attn.q_proj.bias": np.ones(16)}), "attention bias"),
])
def test_unrepresentable_state_dicts_are_refused_naming_the_key(change, message):
    sd = EXAMPLE["numpy_state_dict"](np.random.default_rng(4))
    change(sd)
    with pytest.raises(InputError, match=message):
        unflatten(*from_state_dict(sd, N=16, heads=2))


def test_a_bad_attention_scale_is_an_input_error():
    sd = EXAMPLE["numpy_state_dict"](np.random.default_rng(4))
    for scale in ("foo", None, -1.0):
        with pytest.raises(InputError, match="attention_scale"):
            from_state_dict(sd, N=16, heads=2, attention_scale=scale)


def test_zero_biases_are_accepted_and_a_token_table_needs_n():
    sd = EXAMPLE["numpy_state_dict"](np.random.default_rng(5))
    sd["layers.0.attn.q_proj.bias"] = np.zeros(16)
    sd["unembed.bias"] = np.zeros(16)
    unflatten(*from_state_dict(sd, N=16, heads=2))
    with pytest.raises(InputError, match="pass N"):
        from_state_dict(sd, heads=2)


def test_hard_attention_has_no_pytorch_counterpart():
    model = registry.get("path-blocks").build(task_for_seed(8, 2, 0), 2, attention="hard").model
    with pytest.raises(InputError, match="hard attention"):
        to_state_dict(model)


def test_torch_tensors_are_accepted_and_a_trained_module_round_trips(tmp_path, capsys):
    torch = pytest.importorskip("torch", reason="PyTorch is optional; the NumPy transcription tests the same "
                                "conversion")
    torch.manual_seed(0)
    module = EXAMPLE["torch_module"](16, 2, 32, 64, 2, 8, positions=2)
    tokens, answers = queries(task_for_seed(16, 2, 0))
    with torch.no_grad():
        expected = module(torch.tensor(tokens)).numpy()
    model = unflatten(*from_state_dict(module.state_dict(), N=16, heads=2))
    assert np.allclose(forward(model, tokens), expected, atol=1e-5)
    fresh = EXAMPLE["torch_module"](16, 2, 32, 64, 2, 8, positions=2)
    fresh.load_state_dict({k: torch.from_numpy(v) for k, v in to_state_dict(model).items()}, strict=True)
    with torch.no_grad():
        assert np.allclose(fresh(torch.tensor(tokens)).numpy(), expected, atol=1e-6)
    EXAMPLE["with_torch"](str(tmp_path / "trained.npz"))  # trains, exports, evaluates, loads back
    assert "accuracy 100.00%" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------------- eval


def test_eval_of_an_exact_construction_agrees_with_check(tmp_path, capsys):
    path = str(tmp_path / "g1.npz")
    code, out, _ = run(["check", "single-hop", "--N", "64", "--R", "3", "--save", path, "--json"], capsys)
    checked = strict_json(out)
    code, out, _ = run(["eval", path, "--json"], capsys)
    doc = strict_json(out)
    assert code == 0 and doc["accuracy"] == 1.0 and doc["queries"] == 192 and doc["exact"]
    margin = doc["min_margin"]  # an interval containing the exact minimum margin
    assert margin["lo"] == pytest.approx(checked["check"]["min_margin"], abs=1e-12)
    assert margin["lo"] <= checked["promise"]["margin"] <= margin["hi"] and margin["width"] < 1e-9
    assert doc["arith"] == "exact" and doc["n_undecided"] == 0
    assert [r["queries"] for r in doc["per_relation"]] == [64, 64, 64]


def test_eval_counts_per_relation_against_a_brute_force_loop(tmp_path, capsys):
    """A model broken on purpose (read-out rows of two entities swapped): eval's per-relation accuracy equals
    a plain loop over the queries."""
    task = task_for_seed(32, 3, 1)
    model = registry.get("geometric").build(task).model.with_dense_readout()
    U = model.full_unembedding().copy()
    U[[0, 5]] = U[[5, 0]]
    broken = model.replace(unembedding=U)
    path = save_model(broken, str(tmp_path / "broken.npz"), extra_arrays={"task_table": task.table})
    code, out, _ = run(["eval", path, "--json"], capsys)
    doc = strict_json(out)
    logits = forward(broken, queries(task)[0])
    right = {r: 0 for r in range(3)}
    for q, (tokens, answer) in enumerate(zip(*queries(task))):
        others = np.delete(logits[q], answer)
        right[int(tokens[0]) - 32] += bool(logits[q, answer] > others.max())
    assert code == 0 and 0 < doc["accuracy"] < 1
    assert [r["accuracy"] for r in doc["per_relation"]] == [right[r] / 32 for r in range(3)]


def test_eval_decodes_a_chain_of_thought_model(tmp_path, capsys):
    task = task_for_seed(16, 2, 0)
    model = registry.get("cot").build(task, 2).model
    path = save_model(model, str(tmp_path / "c1.npz"), extra_arrays={"task_table": task.table}, k=2, cot=True)
    code, out, _ = run(["eval", path, "--json"], capsys)
    doc = strict_json(out)
    assert code == 0 and doc["cot"] and doc["k"] == 2 and doc["queries"] == 16 * 4 and doc["accuracy"] == 1.0


def test_eval_refuses_a_cot_flag_that_is_not_a_boolean(tmp_path, capsys):
    task = task_for_seed(16, 2, 0)
    model = registry.get("geometric").build(task).model
    path = save_model(model, str(tmp_path / "g1.npz"), extra_arrays={"task_table": task.table}, cot="false")
    code, _, err = run(["eval", path], capsys)
    assert code == 2 and "cot = 'false'" in err


def test_eval_refuses_in_one_line(tmp_path, capsys):
    task = task_for_seed(16, 2, 0)
    model = registry.get("geometric").build(task).model
    bare = save_model(model, str(tmp_path / "bare.npz"))
    code, _, err = run(["eval", bare], capsys)
    assert code == 2 and "--task" in err and len(err.strip().splitlines()) == 1
    other = save_model(model, str(tmp_path / "other.npz"),
                       extra_arrays={"task_table": task_for_seed(16, 3, 0).table})
    code, _, err = run(["eval", other], capsys)
    assert code == 2 and "R = 3" in err
    code, _, err = run(["eval", str(tmp_path / "missing.npz")], capsys)
    assert code == 2 and "no such" in err


def test_the_example_without_torch_converts_evaluates_and_round_trips(tmp_path, capsys):
    EXAMPLE["without_torch"](str(tmp_path / "numpy.npz"))  # runs whether or not torch is installed
    out = capsys.readouterr().out
    assert "to_state_dict(from_state_dict(sd)) == sd" in out and "accuracy" in out
