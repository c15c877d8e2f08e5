"""A researcher brings their own model: a file written by hand in the documented format
(docs/model_format.md), damaged the ways real files are, and read by ``georecall eval`` and the Python API.

Every verdict is compared with a naive exact recomputation (Python fractions over every query); every
refusal is one line naming the file (or the array) and the problem, exit 2, never a silent coercion that
changes the numbers checked.
"""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from georecall.cli import main
from georecall.constructions.model import unflatten
from georecall.errors import InputError
from georecall.io import from_state_dict

N, R, D = 4, 1, 4
STRUCTURE = [{"attention": None, "mlp": True}]  # the MLP is all zeros: the logits are E[s] @ U.T


def arrays(scale: float = 1.0, dtype=np.float64) -> dict[str, np.ndarray]:
    """A model whose answer to subject s is s (relation 0 is the identity): E = U = scale·I."""
    eye = np.eye(N, D) * scale
    return {"entity_embedding": eye.astype(dtype), "relation_embedding": np.zeros((R, D), dtype),
            "unembedding": eye.astype(dtype), "layers.0.mlp.W1": np.zeros((D, 2), dtype),
            "layers.0.mlp.b1": np.zeros(2, dtype), "layers.0.mlp.W2": np.zeros((2, D), dtype),
            "layers.0.mlp.b2": np.zeros(D, dtype)}


def write(path, weights: dict[str, np.ndarray], table=None, structure=None) -> str:
    """The file a PyTorch user writes with ``np.savez`` from the documented format."""
    header = {"format": "georecall-model-1", "structure": structure or STRUCTURE, "readout_columns": None,
              "meta": {}, "record": {"N": N, "R": R, "k": 1}}
    stored = {key.replace(".", "__"): value for key, value in weights.items()}
    stored["extra____task_table"] = np.arange(N)[None, :].repeat(R, 0) if table is None else table
    stored["__header__"] = np.array(json.dumps(header))
    np.savez(path, **stored)
    return str(path)


def exact_accuracy(weights: dict[str, np.ndarray], table: np.ndarray) -> Fraction:
    """The share of queries whose exact margin is > 0 (this model's logits are E[s] @ U.T exactly)."""
    E = [[Fraction(float(x)) for x in row] for row in weights["entity_embedding"]]
    U = [[Fraction(float(x)) for x in row] for row in weights["unembedding"]]
    right = 0
    for r in range(table.shape[0]):
        for s in range(N):
            logits = [sum(a * b for a, b in zip(E[s], u)) for u in U]
            answer = int(table[r, s])
            right += logits[answer] > max(v for j, v in enumerate(logits) if j != answer)
    return Fraction(right, table.size)


def eval_json(path, capsys) -> tuple[int, dict | None, str]:
    code = main(["eval", path, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


# ------------------------------------------------------------------------- margins below float64's range


@pytest.mark.parametrize("swap", [False, True])
def test_margins_below_the_smallest_subnormal_are_decided_by_their_exact_sign(tmp_path, capsys, swap):
    """E = U = 2^-600·I: every exact margin is ±2^-1200, below float64's smallest subnormal. Its exact sign
    decides the query (it was "undecided (a softmax tie)" in a model without softmax, and counted wrong)."""
    weights = arrays(2.0**-600)
    table = np.array([[1, 0, 2, 3]]) if swap else np.arange(N)[None, :]
    path = write(tmp_path / "tiny.npz", weights, table)
    code, doc, err = eval_json(path, capsys)
    assert code == 0, err
    assert doc is not None
    assert doc["n_undecided"] == 0
    assert Fraction(doc["n_correct"], doc["queries"]) == exact_accuracy(weights, table)
    assert doc["accuracy"] == (0.5 if swap else 1.0)
    low, high = doc["min_margin"]["lo"], doc["min_margin"]["hi"]
    assert low <= (-(2.0**-1200) if swap else 2.0**-1200) <= high  # the interval still contains it (as 0.0)


# ------------------------------------------------------------------ dtypes: never a silent coercion


def test_a_long_double_file_that_float64_would_round_is_refused_naming_the_array(tmp_path, capsys):
    weights = arrays()
    wide = weights["unembedding"].astype(np.longdouble)
    wide[0, 0] += np.longdouble(2) ** -70  # a float64 where long double is float64 (then it is accepted)
    weights["unembedding"] = wide
    path = write(tmp_path / "wide.npz", weights)
    code, doc, err = eval_json(path, capsys)
    if np.array_equal(wide.astype(np.float64).astype(wide.dtype), wide):
        assert code == 0 and doc is not None and doc["accuracy"] == 1.0
    else:
        assert code == 2
        assert "wide.npz" in err and "'unembedding'" in err and "float64" in err
        assert "Traceback" not in err


def test_a_long_double_file_holding_float64_values_is_read_exactly(tmp_path, capsys):
    weights = {key: value.astype(np.longdouble) for key, value in arrays(3.0).items()}
    code, doc, err = eval_json(write(tmp_path / "wide.npz", weights), capsys)
    assert code == 0, err
    assert doc is not None and doc["accuracy"] == 1.0
    assert doc["min_margin"]["lo"] <= 9.0 <= doc["min_margin"]["hi"]


def test_integers_beyond_two_to_the_53_are_refused_not_rounded(tmp_path, capsys):
    weights = arrays()
    weights["layers.0.mlp.b2"] = np.full(D, 2**62 + 1, dtype=np.int64)  # float64 would make it 2^62
    code, _, err = eval_json(write(tmp_path / "big.npz", weights), capsys)
    assert code == 2
    assert "big.npz" in err and "b2" in err and "2^53" in err


def test_small_integers_are_exact_and_evaluated_as_they_are(tmp_path, capsys):
    weights = {key: (value * 3).astype(np.int64) for key, value in arrays().items()}
    code, doc, err = eval_json(write(tmp_path / "int.npz", weights), capsys)
    assert code == 0, err
    assert doc is not None and doc["accuracy"] == 1.0
    assert doc["min_margin"]["lo"] <= 9.0 <= doc["min_margin"]["hi"]


def test_a_masked_array_with_masked_entries_is_refused_not_read_as_its_hidden_data():
    weights = arrays()
    hidden = np.ma.masked_array(weights["unembedding"].copy(), mask=np.eye(N, D, dtype=bool))
    hidden.data[0, 0] = 1e6  # what np.asarray would read under the mask
    with pytest.raises(InputError, match="unembedding.*masked"):
        unflatten(STRUCTURE, {**weights, "unembedding": hidden})
    state = {"entity_embed.weight": weights["entity_embedding"], "relation_embed.weight":
             weights["relation_embedding"], "unembed.weight": hidden}
    with pytest.raises(InputError, match=r"unembed\.weight.*masked"):
        from_state_dict(state)


def test_a_masked_array_without_masked_entries_and_a_matrix_are_their_values():
    weights = arrays(2.0)
    plain = unflatten(STRUCTURE, weights)
    for wrapped in (np.ma.masked_array(weights["unembedding"]), np.asmatrix(weights["unembedding"])):
        model = unflatten(STRUCTURE, {**weights, "unembedding": wrapped})
        assert type(model.unembedding) is np.ndarray
        assert np.array_equal(model.unembedding, plain.unembedding)


# ------------------------------------------------------------------------- refusals name the file


@pytest.mark.parametrize("change, words", [
    (lambda w: w.pop("layers.0.mlp.b2"), ["'layers.0.mlp.b2' is missing"]),
    (lambda w: w.update({"layers.0.mlp.b3": w["layers.0.mlp.b2"]}), ["unexpected", "layers.0.mlp.b3"]),
    (lambda w: w.update({"layers.0.mlp.b1": np.full(2, np.inf)}), ["layers.0.mlp", "b1", "non-finite"]),
    (lambda w: w.update({"unembedding": np.full((N, D), np.nan)}), ["unembedding", "non-finite"]),
    (lambda w: w.update({"layers.0.mlp.W1": np.zeros((2, D))}), ["layers.0.mlp", "shapes disagree"]),
    (lambda w: w.update({"layers.0.mlp.b2": np.array(0.0)}), ["layers.0.mlp", "b2", "dimensions"]),
    (lambda w: w.update({"unembedding": np.zeros((D + 1, N + 1))}), ["unembedding", "width"]),
])
def test_a_damaged_array_is_refused_in_one_line_naming_the_file(tmp_path, capsys, change, words):
    weights = arrays()
    change(weights)
    code, _, err = eval_json(write(tmp_path / "damaged.npz", weights), capsys)
    assert code == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "damaged.npz" in err
    for word in words:
        assert word in err


# ---------------------------------------------------------------------- what the report says it is about


def test_a_hard_attention_model_is_labelled_an_idealization(tmp_path, capsys):
    """docs/model_format.md: hard attention is the β → ∞ idealization, "labelled as such in reports"."""
    weights = arrays()
    weights.update({f"layers.0.attention.{name}": np.zeros((1, D, D if name in ("W_V", "W_O") else 1))
                    for name in ("W_Q", "W_K", "W_V", "W_O")})
    hard = [{"attention": {"kind": "hard", "inverse_temperature": 1.0}, "mlp": True}]
    path = write(tmp_path / "hard.npz", weights, structure=hard)
    code, doc, err = eval_json(path, capsys)
    assert code == 0, err
    assert doc is not None and "idealization" in doc["attention"] and "hard" in doc["attention"]
    assert main(["eval", path]) == 0
    assert "hard attention" in capsys.readouterr().out.splitlines()[0]
    code, doc, err = eval_json(write(tmp_path / "plain.npz", arrays()), capsys)
    assert code == 0 and doc is not None and "attention" not in doc


# ------------------------------------------------------------------------- margins beyond float64's range


@pytest.mark.parametrize("swap", [False, True])
def test_margins_beyond_float64_are_enclosed_and_the_overflow_is_no_warning(tmp_path, capsys, swap):
    """E = U = 2^600·I: every exact margin is ±2^1200, beyond float64. The float64 pass overflows (by
    design: those queries are decided exactly), which is no warning to the user; each interval still
    contains the exact margin: [largest float64, +inf] above the range, [-inf, -largest float64] below."""
    weights = arrays(2.0**600)
    table = np.array([[1, 0, 2, 3]]) if swap else np.arange(N)[None, :]
    code, doc, err = eval_json(write(tmp_path / "huge.npz", weights, table), capsys)
    assert code == 0, err
    assert doc is not None and "warnings" not in doc and err == ""
    assert Fraction(doc["n_correct"], doc["queries"]) == exact_accuracy(weights, table)
    biggest = float(np.finfo(np.float64).max)
    if swap:  # the smallest margin is -2^1200: its interval is [-inf (null in strict JSON), -largest]
        assert doc["min_margin"]["lo"] is None and doc["min_margin"]["hi"] == -biggest
    else:
        assert doc["min_margin"]["lo"] == biggest and doc["min_margin"]["hi"] is None


# ---------------------------------------------------------------------- what is not a model file at all


@pytest.mark.parametrize("kind", ["text", "npy", "object npy"])
def test_gr_load_of_a_file_that_is_no_npz_says_so_in_the_commands_words(tmp_path, kind):
    """``gr.load`` read a ``.npy`` array into a TypeError traceback, and a text file into NumPy's advice to
    load it "unsafely" (pickle); ``georecall eval`` says the file is no readable .npz; so does gr.load."""
    import georecall as gr

    path = tmp_path / "model.npz"
    if kind == "text":
        path.write_text("hello")
    else:
        with open(path, "wb") as handle:
            np.save(handle, np.zeros(3) if kind == "npy" else np.array([{}], dtype=object), allow_pickle=True)
    with pytest.raises(InputError, match=r"model\.npz.* is not a readable \.npz file") as caught:
        gr.load(str(path))
    assert "unsafely" not in str(caught.value) and "pickle" not in str(caught.value)


# ------------------------------------------------------- the record's k and cot, read alike by every command


def write_record(path, **record) -> str:
    """The hand-written file, with ``record`` fields of its header replaced."""
    write(path, arrays())
    with np.load(path) as data:
        stored = {key: data[key] for key in data.files}
    header = json.loads(str(stored["__header__"]))
    header["record"].update(record)
    stored["__header__"] = np.array(json.dumps(header))
    np.savez(path, **stored)
    return str(path)


@pytest.mark.parametrize("record, words", [
    ({"k": "two"}, "records k = 'two'"),       # was an internal error (exit 3) in export
    ({"k": 1.9}, "records k = 1.9"),           # export read it as k = 1
    ({"k": 0}, "records k = 0"),               # export read it as k = 1
    ({"k": 10**30}, "records k = 1000000000000000000000000000000"),   # export ran out of memory
    ({"cot": "false"}, "records cot = 'false'"),  # export decoded a chain of thought ("false" is true)
])
def test_export_reads_the_records_k_and_cot_as_eval_does(tmp_path, capsys, monkeypatch, record, words):
    from georecall import exporters  # the export extra: its library is not needed to refuse the file

    monkeypatch.setattr(exporters, "require", lambda to: None)
    path = write_record(tmp_path / "m.npz", **record)
    for argv in (["eval", path], ["export", "--to", "onnx", "--model", path, str(tmp_path / "out")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert words in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_arith_narrower_than_the_weights_range_is_refused_as_such(tmp_path, capsys):
    """``--arith float32`` of finite float64 weights beyond float32's range: the cast overflows, which was
    refused as if the file held non-finite entries ("unembedding has non-finite entries")."""
    path = write(tmp_path / "wide.npz", arrays(2.0**200))
    assert main(["eval", path, "--arith", "float32"]) == 2
    err = capsys.readouterr().err
    assert "non-finite" not in err and "float32" in err and "entity_embedding" in err
    assert "Traceback" not in err and "RuntimeWarning" not in err
    code, doc, err = eval_json(path, capsys)  # the stored weights' own verdict
    assert code == 0 and doc is not None and doc["accuracy"] == 1.0


def test_a_chain_of_thought_with_margins_below_the_smallest_subnormal_is_decoded_by_exact_signs(tmp_path,
                                                                                               capsys):
    """C1 (chain of thought) with its read-out ±1/√3 replaced by ±2^-1074: the same argmax at every step
    (a positive multiple of the read-out), every exact margin about 0.96·2^-1074, below float64's smallest
    subnormal. Each chain is right (it was 16/32: a step whose lower end rounds to 0 ended its chain)."""
    from georecall.constructions import registry
    from georecall.constructions.storage import save_model
    from georecall.theory.tasks import task_for_seed

    task = task_for_seed(8, 2, 0)
    model = registry.get("C1").build(task, 2).model
    assert set(np.unique(np.abs(model.unembedding))) == {1 / np.sqrt(3)}  # control: the sign is the read-out
    for scale in (1.0, 2.0**-1074):
        path = save_model(model.replace(unembedding=np.sign(model.unembedding) * scale),
                          str(tmp_path / "cot.npz"), extra_arrays={"task_table": task.table}, k=2, cot=True)
        code, doc, err = eval_json(path, capsys)
        assert code == 0, err
        assert doc is not None and doc["cot"] and doc["n_undecided"] == 0
        assert doc["accuracy"] == 1.0
        assert doc["min_margin"]["lo"] <= 0.9622504486493763 * scale <= doc["min_margin"]["hi"]
        # each step's own verdict too (per-step accuracy was 0.5, 0.0 at 2^-1074: steps counted by lower end)
        from georecall.theory.tokens import chains, multi_hop_queries
        from georecall.verify.checking.exact import evaluate

        prompts, truth = multi_hop_queries(task, 2)[0], chains(task, 2)
        scaled = model.replace(unembedding=np.sign(model.unembedding) * scale)
        assert evaluate(scaled, prompts, truth, decode=True).per_position == [1.0, 1.0]


# ---------------------------------------------------------------------------- transfer at extreme scales


def test_transfer_of_huge_weights_says_what_overflowed_not_the_file():
    """Weights × 1e300: the fitted embeddings are finite, their spread was computed by squaring (inf), and the
    trained start was refused as "entity_embedding has non-finite entries", blaming the file. The spread is
    now computed without squaring: the start is finite and the training's own divergence is said. Maps that
    overflow the rebuilt embeddings are refused as such. The control: the unscaled model transfers."""
    from georecall.errors import InputError
    from georecall.experiments import probes
    from georecall.theory.tasks import task_for_seed
    from georecall.training.parameters import init_model

    task = task_for_seed(8, 2, 0)
    model = init_model(8, 2, 8, 32, rng=0, dtype=np.float64)
    maps = probes.superposition_readout(model, task, holdout=0.0, rng=0)["encoding_maps"]
    assert 0 <= probes.freeze_and_swap(model, task, maps, steps=2, rng=0)["fitted_accuracy"] <= 1
    try:  # embeddings rebuilt at 1e200: their spread squared was inf (the start refused, the file blamed)
        result = probes.freeze_and_swap(model, task, maps * 1e200, steps=2, rng=0)
    except FloatingPointError as error:  # the training's own verdict on such a start, if it diverges
        assert "loss" in str(error)
    else:
        assert 0 <= result["closed_form_accuracy"] <= 1
    with pytest.raises(InputError, match="rebuilt for the new bijections overflow float64"):
        probes.freeze_and_swap(model, task, np.full_like(maps, np.finfo(np.float64).max), steps=2, rng=0)
