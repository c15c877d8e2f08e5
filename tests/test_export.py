"""georecall export (georecall.exporters): every target answers every query as georecall does, checked in the
target's own library; the torch door is the identity both ways; bad input is refused in one line with nothing
written. Needs the export extra (pip install torch==2.13.0, then '.[export]' in a clone; '.[export-tl]' for
TransformerLens); each target's tests skip, naming what is missing, without it. The tests that boot
TransformerLens in a fresh process or run the docs are marked slow (TransformerLens takes seconds to
import): CI runs this file with -m "slow or not slow".
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from georecall.cli import main
from georecall.constructions import registry
from georecall.constructions.forward import forward
from georecall.constructions.model import Model
from georecall.constructions.storage import load_model
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import chains, queries

ROOT = Path(__file__).resolve().parent.parent
LIBRARIES = {"torch": ("torch",), "transformer-lens": ("torch", "transformer_lens"),
             "onnx": ("onnx", "onnxruntime")}


def _have(target: str) -> bool:
    return all(_importable(name) for name in LIBRARIES[target])


def _needs(target: str):
    missing = [name for name in LIBRARIES[target] if not _importable(name)]
    extra = "export-tl" if target == "transformer-lens" else "export"
    return pytest.mark.skipif(bool(missing), reason=f"--to {target} needs the {extra} extra: {missing} not "
                              f"installed (pip install torch==2.13.0 '.[{extra}]' in a clone of georecall)")


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


TARGETS = [pytest.param(t, marks=_needs(t)) for t in ("torch", "transformer-lens", "onnx")]
# The constructions the issue names, at small sizes (C1: its greedy chain-of-thought decoding is checked).
CASES = [("G1", 1, 16, 2), ("A1", 1, 16, 2), ("G2", 2, 8, 2), ("C1", 2, 8, 2)]


def _built(construction: str, k: int, N: int, R: int, **options):
    task = task_for_seed(N, R, 0)
    return task, registry.get(construction).build(task, k, **options)


def _run_target(target: str, folder: Path, dtype: str):
    """The target loaded from its folder by the test itself (not by georecall's runner): tokens -> logits."""
    if target == "onnx":
        import onnxruntime as ort
        session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])
        return lambda tokens: session.run(["logits"], {"tokens": tokens})[0]
    import torch
    if target == "torch":
        sys.path.insert(0, str(folder))
        try:
            import importlib
            module = importlib.import_module("georecall_module")
            module = importlib.reload(module)  # another test's folder may have been imported first
        finally:
            sys.path.remove(str(folder))
        net = module.load(str(folder))
        return lambda tokens: net(torch.from_numpy(tokens)).detach().numpy()
    from transformer_lens.model_bridge.sources import boot_native
    config = json.loads((folder / "config.json").read_text())
    bridge = boot_native(config, dtype=torch.float64 if dtype == "float64" else None)
    bridge.load_state_dict(torch.load(folder / "state_dict.pt"), strict=True)
    return lambda tokens: bridge(torch.from_numpy(tokens))[:, -1].detach().numpy()


def _answers_in_target(run, task, k: int, greedy: bool):
    """Every query's answers (every step when greedy) and smallest margin, from the target's logits."""
    tokens, answers = queries(task, k)
    steps = k if greedy else 1
    expected = chains(task, k) if greedy else np.asarray(answers).reshape(-1, 1)
    seq, got, margins = tokens, [], []
    for _ in range(steps):
        logits = np.asarray(run(np.ascontiguousarray(seq)), dtype=np.float64)
        order = np.sort(logits, axis=1)
        margins.append(order[:, -1] - order[:, -2])
        got.append(logits.argmax(axis=1))
        seq = np.concatenate([seq, got[-1][:, None]], axis=1)
    return np.stack(got, axis=1), expected, np.min(margins, axis=0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("construction, k, N, R", CASES)
def test_every_target_answers_every_query_with_the_margin(target, construction, k, N, R, tmp_path):
    from georecall.exporters import export, query_set
    spec = registry.get(construction)
    task, built = _built(construction, k, N, R)
    greedy = spec.decoding == "greedy"
    out = tmp_path / "out"
    result = export(built.model, target, str(out), queries=query_set(task, k, greedy=greedy), task=task,
                    promise=built.promise)
    report = result["check"]
    assert report["passed"] and report["accuracy"] == 1.0 and report["queries_outside_bound"] == 0
    assert report["queries"] == N * R**k and report["steps"] == (k if greedy else 1)
    # independently of the report: the test loads the folder with the target's library itself
    got, expected, margins = _answers_in_target(_run_target(target, out, "float32"), task, k, greedy)
    np.testing.assert_array_equal(got, expected)
    # the target's own margins reach the promise, less the stated bound (float32 rounding)
    assert margins.min() >= built.promise.margin - 2 * report["max_allowed"] - 1e-6
    assert report["max_allowed"] < built.promise.margin / 4  # the bound is tight enough to decide


@pytest.mark.parametrize("construction, k, N, R", CASES + [("A2b", 2, 8, 2)])
def test_the_graph_computes_the_forward_pass(construction, k, N, R):
    """Each target's graph (padded heads, β folded into W_Q for TransformerLens) is the same function as
    THE forward pass: an independent float64 implementation agrees with it to rounding."""
    from georecall.exporters import graph as graphs
    from georecall.exporters.lens import _sizes
    task, built = _built(construction, k, N, R)
    model = built.model
    tokens, _ = queries(task, k)
    want = forward(model, tokens)
    heads, width, mlp = _sizes(model)
    for g in (graphs.graph_of(model, np.float32),
              graphs.graph_of(model, np.float32, beta_in_queries=float(np.sqrt(width)), heads=heads,
                              head_width=width, mlp_width=mlp, every_part=True)):
        logits, bound = graphs.reference(g, tokens)
        np.testing.assert_allclose(logits, want, rtol=1e-12, atol=1e-12)
        assert np.all(bound > 0) and np.all(np.isfinite(bound))


def _same_model(a: Model, b: Model) -> None:
    assert set(a.arrays()) == set(b.arrays())
    for name, value in a.arrays().items():
        other = b.arrays()[name]
        assert other.dtype == value.dtype and other.shape == value.shape, name
        assert np.array_equal(value.view(np.uint8), np.ascontiguousarray(other).view(np.uint8)), name
    for la, lb in zip(a.layers, b.layers):
        assert (la.attention is None) == (lb.attention is None) and (la.mlp is None) == (lb.mlp is None)
        if la.attention is not None:
            assert la.attention.kind == lb.attention.kind
            assert la.attention.inverse_temperature == lb.attention.inverse_temperature
    assert (a.readout_columns is None) == (b.readout_columns is None)
    if a.readout_columns is not None:
        assert np.array_equal(a.readout_columns, b.readout_columns)
    assert a.meta == b.meta


def _trained_model(tmp_path) -> Path:
    path = tmp_path / "trained.npz"
    assert main(["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "30", "--attention", "softmax",
                 "--heads", "2", "--quiet", "--out", str(path)]) == 0
    return path


@_needs("torch")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("construction, k", [("G1", 1), ("A1", 1), ("G2", 2), ("C1", 2), ("A2b", 2)])
def test_torch_import_of_export_is_the_identity_bit_for_bit(construction, k, dtype, tmp_path):
    from georecall.exporters import torch_target
    _, built = _built(construction, k, 8, 2)
    model = built.model.astype(np.dtype(dtype))
    torch_target.write(model, str(tmp_path), dtype)
    _same_model(model, torch_target.import_folder(str(tmp_path)))


@_needs("torch")
def test_torch_import_of_export_of_a_trained_model_file(tmp_path):
    from georecall.exporters import torch_target
    model, _ = load_model(str(_trained_model(tmp_path)))
    folder = tmp_path / "t"
    folder.mkdir()
    torch_target.write(model, str(folder), model.entity_embedding.dtype)
    _same_model(model, torch_target.import_folder(str(folder)))


@_needs("torch")
def test_torch_import_refuses_a_readout_nonzero_off_its_columns(tmp_path):
    import torch

    from georecall.errors import InputError
    from georecall.exporters import torch_target
    _, built = _built("G1", 1, 8, 2)
    torch_target.write(built.model, str(tmp_path), "float64")
    state = torch.load(tmp_path / "state_dict.pt")
    state["unembed.weight"][0, 0] = 1.0  # a coordinate the compact read-out says is zero
    torch.save(state, tmp_path / "state_dict.pt")
    with pytest.raises(InputError, match="nonzero off its recorded readout_columns"):
        torch_target.import_folder(str(tmp_path))


@pytest.mark.parametrize("target", TARGETS)
def test_a_trained_model_file_exports_and_checks(target, tmp_path, capsys):
    path = _trained_model(tmp_path)
    capsys.readouterr()
    out = tmp_path / "out"
    code = main(["export", "--model", str(path), "--to", target, str(out), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["passed"], doc
    check = doc["check"]
    assert check["disagreements_with_georecall"] == 0 and check["queries"] == 16
    model, header = load_model(str(path))
    tokens, answers = queries(task_for_seed(8, 2, 0), 1)
    georecall_right = int(np.sum(forward(model, tokens).argmax(axis=1) == answers))
    assert check["correct"] == georecall_right  # the target is as right as the model is, no more


@pytest.mark.parametrize("target", TARGETS)
def test_the_bound_holds_where_float32_really_rounds(target, tmp_path, capsys):
    """A float64 model with arbitrary weights (trained: two softmax heads) stored in float32: every weight
    and every step rounds, and the target's logits still lie within the stated bound of georecall's."""
    path = tmp_path / "wide.npz"
    assert main(["train", "--N", "8", "--R", "2", "--d", "8", "--steps", "30", "--attention", "softmax",
                 "--heads", "2", "--dtype", "float64", "--quiet", "--out", str(path)]) == 0
    capsys.readouterr()
    assert main(["export", "--model", str(path), "--to", target, str(tmp_path / "out"), "--json"]) == 0
    check = json.loads(capsys.readouterr().out)["check"]
    assert check["passed"] and check["queries_outside_bound"] == 0
    assert 0 < check["max_logit_difference"] <= check["max_allowed"] < 1e-2


@pytest.mark.parametrize("target", TARGETS)
def test_the_check_fails_when_the_target_computes_something_else(target, tmp_path, monkeypatch):
    """Positive controls of the check: logits moved beyond the bound, and an answer flipped."""
    from georecall import exporters as exporting
    task, built = _built("G1", 1, 16, 2)
    qs = exporting.query_set(task)
    module = exporting._target(target)
    real = module.runner

    def moved(*args):
        run = real(*args)
        return lambda tokens: run(tokens) + np.float32(1e-3)  # a shift far above float32 rounding

    monkeypatch.setattr(module, "runner", moved)
    report = exporting.export(built.model, target, str(tmp_path / "a"), queries=qs, promise=built.promise)
    assert not report["check"]["passed"] and report["check"]["queries_outside_bound"] > 0

    def flipped(*args):
        run = real(*args)

        def go(tokens):
            logits = run(tokens).copy()
            logits[0] = logits[0][::-1].copy()  # the first query now answers something else
            return logits
        return go

    monkeypatch.setattr(module, "runner", flipped)
    report = exporting.export(built.model, target, str(tmp_path / "b"), queries=qs, promise=built.promise)
    assert not report["check"]["passed"] and report["check"]["disagreements_with_georecall"] >= 1
    assert report["check"]["accuracy"] < 1


def _near_tie_model():
    """A user's model (no promise) whose query ``<r, 0>`` is right by a margin of 1e-7, below the float32
    check's logit allowance: no layers, the read-out of ``E[s]``."""
    from georecall.theory.tasks import Task
    model = Model(entity_embedding=np.eye(2), relation_embedding=np.zeros((1, 2)),
                  unembedding=np.array([[1.0, 0.0], [1.0 - 1e-7, 1.0]]))
    return model, Task(np.array([[0, 1]]))


@pytest.mark.parametrize("planted", ["swapped", "tied"])
def test_the_check_fails_when_an_answer_changes_within_the_allowance(planted):
    """A planted wrong export: the target answers one query otherwise (or ties it), by less than the logits'
    allowance. The check compares answers and their right/wrong on every query, so it fails; the same
    target without the plant passes (the control)."""
    from georecall.exporters.check import check_in_target, query_set
    from georecall.exporters.graph import graph_of
    model, task = _near_tie_model()
    qs = query_set(task)
    graph = graph_of(model, "float32")

    def honest(tokens):
        return forward(model, tokens)

    def planted_run(tokens):
        logits = forward(model, tokens).copy()
        for row in np.flatnonzero(tokens[:, -1] == 0):
            if planted == "swapped":
                logits[row] = logits[row][::-1].copy()
            else:
                logits[row, 1] = logits[row, 0]
        return logits

    control = check_in_target(model, graph, honest, qs, target="planted")
    assert control["passed"] and control["correct"] == 2
    report = check_in_target(model, graph, planted_run, qs, target="planted")
    assert report["queries_outside_bound"] == 0  # the plant hides inside the allowance
    assert report["max_logit_difference"] <= report["max_allowed"]
    assert not report["passed"] and report["right_or_wrong_changed"] == 1 and report["correct"] == 1
    if planted == "swapped":
        assert report["disagreements_with_georecall"] == 1 and report["within_rounding"] == 1


@pytest.mark.parametrize("target", TARGETS)
def test_the_done_when_command_for_every_target(target, tmp_path, capsys):
    out = tmp_path / "OUT"
    code = main(["export", "--construction", "geometric", "--N", "64", "--R", "4", "--to", target, str(out),
                 "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["status"] == 0
    check = doc["check"]
    assert check["correct"] == check["queries"] == 256 and check["margin_reaches_promise"]
    record = json.loads((out / "georecall.json").read_text())
    assert record["record"]["construction"] == "G1" and record["version"] == doc["version"]
    assert np.load(out / "task.npy").shape == (4, 64)
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]  # no temporary folder left


@_needs("transformer-lens")
@pytest.mark.parametrize("construction, k, N, R", [("G1", 1, 16, 2), ("G2", 2, 8, 2)])
def test_transformer_lens_keeps_the_true_head_width_and_names_the_parts(construction, k, N, R, tmp_path):
    """d_head is the model's widest d_k or d_v (no power-of-4 padding), and config.json names the residual
    stream's coordinate ranges and each block's heads and units, so units read without georecall."""
    from georecall.exporters import export, query_set
    task, built = _built(construction, k, N, R)
    report = export(built.model, "transformer-lens", str(tmp_path / "OUT"), queries=query_set(task, k),
                    promise=built.promise)
    assert report["check"]["passed"]
    config = json.loads((tmp_path / "OUT" / "config.json").read_text())
    widths = [w for layer in built.model.layers if layer.attention is not None
              for w in (layer.attention.W_V.shape[2],
                        0 if layer.attention.W_Q is None else layer.attention.W_Q.shape[2])]
    assert config["d_head"] == max(widths)
    names = config["georecall"]
    assert names["residual"] == built.model.meta["layout"] and names["D"] == built.model.meta["D"]
    assert [b["name"] for b in names["blocks"]] == [f"blocks.{i}" for i in range(len(built.model.layers))]
    mlps = [b["mlp"]["units"] for b in names["blocks"]]
    assert mlps == [layer.mlp.width for layer in built.model.layers]


FRESH = {
    "torch": """
        sys.path.insert(0, OUT)
        from georecall_module import load
        net = load(OUT)
        run = lambda t: net(torch.from_numpy(t)).detach().numpy()
    """,
    "transformer-lens": """
        from transformer_lens.model_bridge.sources import boot_native
        bridge = boot_native(json.load(open(os.path.join(OUT, "config.json"))))
        bridge.load_state_dict(torch.load(os.path.join(OUT, "state_dict.pt")), strict=True)
        run = lambda t: bridge(torch.from_numpy(t))[:, -1].detach().numpy()
    """,
    "onnx": """
        import onnxruntime
        session = onnxruntime.InferenceSession(os.path.join(OUT, "model.onnx"))
        run = lambda t: session.run(["logits"], {"tokens": t})[0]
    """,
}


@pytest.mark.slow
@pytest.mark.parametrize("target", TARGETS)
def test_a_fresh_process_without_georecall_answers_all_256_queries(target, tmp_path, capsys):
    out = tmp_path / "OUT"
    assert main(["export", "--construction", "geometric", "--N", "64", "--R", "4", "--to", target,
                 str(out)]) == 0
    capsys.readouterr()
    script = textwrap.dedent("""
        import json, os, sys
        import numpy as np
        import torch
        OUT = sys.argv[1]
    """) + textwrap.dedent(FRESH[target]) + textwrap.dedent("""
        table = np.load(os.path.join(OUT, "task.npy"))
        R, N = table.shape
        tokens = np.stack([np.repeat(N + np.arange(R), N), np.tile(np.arange(N), R)], axis=1).astype(np.int64)
        logits = np.asarray(run(tokens), dtype=np.float64)
        top = np.sort(logits, axis=1)
        assert not any(m == "georecall" or m.startswith("georecall.") for m in sys.modules)
        print(json.dumps({"right": int((logits.argmax(1) == table.reshape(-1)).sum()),
                          "min_margin": float((top[:, -1] - top[:, -2]).min())}))
    """)
    if target == "onnx":
        script = script.replace("import torch\n", "")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", script, str(out)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    record = json.loads((out / "georecall.json").read_text())
    assert result["right"] == 256
    promise = record["check"]["promise_margin"]
    assert result["min_margin"] >= promise - 2 * record["check"]["max_allowed"] - 1e-6


# ----------------------------------------------------------------------------------------- bad input


def _refused(argv, capsys, message: str) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err
    return err


@pytest.mark.parametrize("target", TARGETS)
def test_an_existing_output_folder_is_refused_and_left_alone(target, tmp_path, capsys):
    out = tmp_path / "OUT"
    out.mkdir()
    (out / "mine.txt").write_text("keep")
    _refused(["export", "--N", "8", "--R", "2", "--to", target, str(out)], capsys, "exists")
    assert os.listdir(out) == ["mine.txt"]


@pytest.mark.parametrize("target", TARGETS)
def test_hard_attention_is_refused_with_the_reason(target, tmp_path, capsys):
    out = tmp_path / "OUT"
    _refused(["export", "--construction", "path-blocks", "--N", "8", "--R", "2", "--attention", "hard",
              "--to", target, str(out)], capsys, "idealization")
    assert os.listdir(tmp_path) == []
    # the same refusal for a model file with a hard layer (the model itself is examined)
    from georecall.constructions.storage import save_model
    task, built = _built("G2", 2, 8, 2, attention="hard")
    path = save_model(built.model, str(tmp_path / "hard.npz"), extra_arrays={"task_table": task.table}, k=2)
    _refused(["export", "--model", path, "--to", target, str(out)], capsys, "layer 0 has hard attention")
    assert os.listdir(tmp_path) == ["hard.npz"]


def test_a_missing_target_library_is_refused(tmp_path, capsys, monkeypatch):
    for name in ("onnx", "onnxruntime", "torch", "transformer_lens"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    for target, extra in (("torch", "export"), ("transformer-lens", "export-tl"), ("onnx", "export")):
        _refused(["export", "--N", "8", "--R", "2", "--to", target, str(tmp_path / "OUT")], capsys,
                 f"pip install '.[{extra}]' in a clone of georecall")
    assert os.listdir(tmp_path) == []


def test_an_unwritable_or_missing_folder_is_refused(tmp_path, capsys, monkeypatch):
    (tmp_path / "file").write_text("")
    _refused(["export", "--N", "8", "--R", "2", "--to", "onnx", str(tmp_path / "file" / "OUT")], capsys,
             "is not a folder")
    _refused(["export", "--N", "8", "--R", "2", "--to", "onnx", str(tmp_path / "no" / "OUT")], capsys,
             "is not a folder")
    import tempfile

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkdtemp", denied)
    _refused(["export", "--N", "8", "--R", "2", "--to", "onnx", str(tmp_path / "OUT")], capsys,
             "Permission denied")
    assert sorted(os.listdir(tmp_path)) == ["file"]


def test_weights_beyond_the_dtype_are_refused_and_flushed_ones_said():
    """float32 cannot hold 1e300 (stored as inf, the target computes NaN): refused naming the array; a weight
    below float32's smallest subnormal is stored as 0: a warning naming the array and how many. The control:
    the same model in float64, and the unscaled model in float32, pass silently."""
    import warnings

    from georecall.errors import InputError
    from georecall.exporters import require_representable

    _, built = _built("G1", 1, 8, 2)
    model = built.model.astype(np.float64)
    huge = dataclasses.replace(model, unembedding=model.unembedding * 1e300)
    with pytest.raises(InputError, match="unembedding holds values beyond float32's largest"):
        require_representable(huge, "float32")
    tiny = dataclasses.replace(model, unembedding=model.unembedding * 2.0**-160)
    with pytest.warns(UserWarning, match=r"stored as 0: unembedding \(\d"):
        require_representable(tiny, "float32")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for candidate, dtype in ((huge, "float64"), (tiny, "float64"), (model, "float32")):
            require_representable(candidate, dtype)


def test_model_and_construction_do_not_combine(tmp_path, capsys):
    _refused(["export", "--model", "m.npz", "--construction", "geometric", "--to", "onnx",
              str(tmp_path / "OUT")], capsys, "do not combine")


def test_a_model_files_failure_document_records_no_construction_sizes_or_seed(tmp_path, capsys):
    """With --model the sizes and the seed (which draw a construction's task) do not apply: given, they are
    refused; left out, the failure document records them as null, not the parser's N = 64, R = 4, seed 0
    (which a construction's failure document still records, the control)."""
    for extra in (["--N", "32"], ["--R", "3"], ["--seed", "2"]):
        _refused(["export", "--model", "m.npz", *extra, "--to", "onnx", str(tmp_path / "OUT")], capsys,
                 "do not combine")
    missing = str(tmp_path / "no" / "OUT")
    assert main(["export", "--model", "m.npz", "--to", "onnx", missing, "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["seed"] is None and doc["params"]["model"] == "m.npz"
    assert doc["params"]["N"] is None and doc["params"]["R"] is None and doc["params"]["seed"] is None
    assert main(["export", "--to", "onnx", missing, "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert (doc["seed"], doc["params"]["N"], doc["params"]["R"]) == (0, 64, 4)


@_needs("onnx")
def test_a_failure_while_writing_leaves_nothing(tmp_path, capsys, monkeypatch):
    from georecall.exporters import onnx_target
    real = onnx_target.write

    def broken(model, folder, *args):
        real(model, folder, *args)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(onnx_target, "write", broken)
    from georecall.io import WriteError
    with pytest.raises(WriteError, match="no space left on the disk"):  # the disk's refusal: one line
        from georecall.exporters import export, query_set
        task, built = _built("G1", 1, 8, 2)
        export(built.model, "onnx", str(tmp_path / "OUT"), queries=query_set(task))
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("target", TARGETS)
def test_a_full_disk_is_one_line_naming_the_folder(target, full_disk, capsys):
    """On a real full file system (a filled tmpfs, tests/conftest.py; skipped where it cannot be mounted)
    every target's files (torch.save's state_dict.pt included) fail with ENOSPC: exit 2, one line naming the
    folder and the disk, one strict JSON document with --json, no temporary folder or partial file left."""
    out = full_disk / "OUT"
    argv = ["export", "--N", "8", "--R", "2", "--to", target, str(out), "--quiet"]
    err = _refused(argv, capsys, "no space left on the disk")
    assert repr(str(out)) in err and err.startswith("georecall: error: cannot write"), err
    assert sorted(os.listdir(full_disk)) == ["filler"]
    code = main([*argv, "--json"])
    captured = capsys.readouterr()
    doc = json.loads(captured.out, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert code == 2 and doc["status"] == 2 and "no space left on the disk" in doc["error"], doc
    assert captured.err.strip().splitlines() == [doc["error"]]
    assert sorted(os.listdir(full_disk)) == ["filler"]


def test_the_torch_targets_save_keeps_a_full_disk_an_oserror(full_disk):
    """torch.save given a path on a full disk raises RuntimeError ("PytorchStreamWriter failed writing
    file"), which the writer cannot tell from a bug; the torch and TransformerLens targets serialise in
    memory and write with Python, so ENOSPC stays an OSError (mapped to exit 2). A stand-in for torch that
    behaves as torch does, so this runs without the export extra."""
    import errno
    import io
    import types

    from georecall.exporters import lens, torch_target

    def save(obj, f):
        if not isinstance(f, io.BytesIO):
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
        f.write(b"\1" * 200_000)

    fake = types.SimpleNamespace(save=save)
    with pytest.raises(OSError) as info:
        torch_target.save_state(fake, {}, str(full_disk / "state_dict.pt"))
    assert info.value.errno == errno.ENOSPC
    assert lens.save_state is torch_target.save_state


@_needs("onnx")
def test_export_reads_the_shared_options_it_offers(tmp_path, capsys, monkeypatch):
    """--seed (the task), --quiet (progress) and --max-gib (the budget) do something (as tests/test_cli.py
    checks for the other commands)."""
    from test_cli import _Reads
    reads = _Reads()
    reads.install(monkeypatch)
    assert main(["export", "--N", "8", "--R", "2", "--to", "onnx", str(tmp_path / "OUT")]) == 0
    assert {"seed", "progress", "budget"} <= reads.read


# ----------------------------------------------------------------------------------------------- docs


@pytest.mark.slow
@pytest.mark.skipif(not _have("transformer-lens"), reason="docs/export.md needs TransformerLens (the "
                                                          "export-tl extra)")
def test_docs_export_code_runs_verbatim(tmp_path):
    text = (ROOT / "docs" / "export.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 3
    shells = re.findall(r"```bash\n(.*?)```", text, re.S)
    for block in shells:
        for line in block.strip().splitlines():
            if line.startswith("georecall export"):
                done = subprocess.run([sys.executable, "-m", "georecall.cli", *line.split()[1:]],
                                      cwd=tmp_path, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, done.stderr[-2000:]
    done = subprocess.run([sys.executable, "-c", "\n".join(blocks)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
