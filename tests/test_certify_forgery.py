"""certify against the forgeries of issue 40: each kind planted, with its brute-force truth at tiny N.

Every kind below was CERTIFIED while some task fails (the ordinary checker, THE forward pass, over every task
at N = 2); each is now REFUTED, UNKNOWN or refused with a named reason:

1. non-finite margins (logits that overflow) and an empty minimum read as "unopposed";
2. no underflow term in the float allowance (subnormal read-outs, the built-in ``--lam 1.43e-322``);
3. facts in W2 and a pre-activation that cancels in float64 (2^53 + x − 2^53);
and the softmax weights' bound at an inverse temperature of 1e300 (issue 45: an OverflowError before).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import types

import numpy as np
import pytest

from georecall.cli import main
from georecall.constructions import registry
from georecall.constructions.canonical import (
    canonical_array,
    canonical_family,
    canonical_model,
    exact_float,
    exact_str,
    model_fingerprint,
)
from georecall.constructions.encoding import assemble_model
from georecall.constructions.model import ATTENTION_KINDS, MLP, Attention, Layer
from georecall.constructions.registry import ConstructionSpec
from georecall.errors import ConditionError, InputError
from georecall.theory import seeds
from georecall.theory.tasks import Task
from georecall.theory.tasks import task_for_seed as seeded_task  # THE seeded task
from georecall.theory.tokens import queries
from georecall.verify.checking import certify as cert
from georecall.verify.checking import certify_relaxation
from georecall.verify.checking.certify_relaxation import Lowest, Pieces
from georecall.verify.checking.check import check_queries
from georecall.verify.checking.run import run_check


def _all_tasks(N: int, R: int):
    for rows in itertools.product(itertools.permutations(range(N)), repeat=R):
        yield Task(np.array(rows, dtype=np.int64))


def _brute_passes(family) -> list[bool]:
    """THE forward pass with dense logits on every task of the family's sizes (the checker's verdict)."""
    out = []
    for task in _all_tasks(family.N, family.R):
        tokens, answers = queries(task, 1)
        res = check_queries(assemble_model(family, task), tokens, answers, forward="dense", decoder="dense")
        out.append(bool(res.exact))
    return out


def _certify_family(family):
    blocks = np.asarray(family.layout[family.encoding.blocks])
    return cert.certify_built(family.model, family.encoding, blocks, family.codes.vectors, family.N, family.R,
                              1, None)


def _with_mlp(family, **arrays):
    mlp = family.model.layers[0].mlp
    new = MLP(*(arrays.get(name, getattr(mlp, name)) for name in ("W1", "b1", "W2", "b2")))
    layer = Layer(family.model.layers[0].attention, new)
    return dataclasses.replace(family, model=dataclasses.replace(family.model, layers=(layer,)))


def run(argv, capsys):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------ kind 1: non-finite margins


def test_a_non_finite_margin_is_the_lowest_failing_point_never_absent():
    low = Lowest(1, limit=0.5, floor=0.0)
    low.add(np.array([np.nan, 3.0, np.inf, -np.inf]), [np.arange(4)])
    assert low.low == -np.inf and low.low_values[0] in (0, 2, 3)
    assert sorted(v[0] for _, v in low.failing) == [0, 2, 3]  # NaN, +inf and -inf all fail; 3.0 does not


def test_logits_that_overflow_are_never_certified():
    """G1's read-out scaled to 1e308: every logit overflows (finite weights); every task fails check."""
    family = registry.get("G1").family(2, 1, 1, codes="sign", D=8, rng=np.random.default_rng(1))
    model = family.model.replace(unembedding=family.model.unembedding * 1e308)
    planted = dataclasses.replace(family, model=model)
    with np.errstate(all="ignore"):
        assert not any(_brute_passes(planted))
        c = _certify_family(planted)
    assert c.verdict != "CERTIFIED"
    assert c.verdict == "REFUTED" or c.reasons and "overflow" in c.reasons[0]["why"]


def test_an_empty_minimum_is_not_unopposed_unless_there_is_one_answer(monkeypatch):
    """"Unopposed" comes from the answer count: an enumeration that recorded no minimum over two answers
    (every margin dropped) is not certified."""
    family = registry.get("G1").family(2, 1, 1, codes="sign", D=8, rng=np.random.default_rng(1))
    real = cert.certify_model

    def dropped(*args, **kwargs):
        out = real(*args, **kwargs)
        return {**out, "min": float("inf"), "argmin": None, "failing": []}

    monkeypatch.setattr(cert, "certify_model", dropped)
    assert family.model.n_out == 2
    assert _certify_family(family).verdict != "CERTIFIED"
    one = registry.get("G1").family(1, 1, 1)
    c = cert.certify_built(one.model, one.encoding, np.asarray(one.layout[one.encoding.blocks]),
                           one.codes.vectors, 1, 1, 1, None)
    assert c.verdict == "CERTIFIED" and c.min_margin is None


# --------------------------------------------------------------------------- kind 2: subnormal margins


@pytest.mark.parametrize("lam", [5e-324, 1e-323, 1.43e-322, 1e-321])
def test_a_subnormal_read_out_is_never_certified_where_a_task_fails(lam):
    family = registry.get("G1").family(2, 1, 1, codes="sign", D=8, lam=lam, rng=np.random.default_rng(1))
    passes = _brute_passes(family)
    c = _certify_family(family)
    if not all(passes):
        assert c.verdict != "CERTIFIED", (lam, c.min_margin, c.allowance)
    if c.verdict == "CERTIFIED":  # the allowance now has n·η per dot product
        assert c.allowance >= certify_relaxation.ETA


def test_the_built_in_subnormal_case_is_not_certified(capsys):
    argv = ["single-hop", "--construction", "geometric", "--N", "8", "--R", "2", "--codes", "sign", "--lam",
            "1.43e-322", "--float"]
    code, out, _ = run(["certify", *argv, "--json"], capsys)
    doc = json.loads(out)
    assert doc["verdict"] != "CERTIFIED" and code != 0
    check_code, _, _ = run(["check", *argv[:-1], "--quiet"], capsys)  # check runs in float by default
    assert check_code == 1  # the brute-force truth on the seeded task: check fails it


# -------------------------------------------------------------- kind 3: a pre-activation that cancels


def test_a_pre_activation_that_cancels_in_float_reaches_the_margin_through_w2():
    """A1 with 2^53 added to every unit on the relation coordinate and taken off in b1: the same function in
    exact arithmetic, but the float pre-activations round to multiples of 2. The family's declared W2
    columns are zero; the assembled models' hold codes, so the rounding reaches the margins (THE forward
    pass fails every task at N = 2). It was CERTIFIED with margin 8 and an allowance of 1e-13."""
    family = registry.get("A1").family(2, 1, 1)
    mlp = family.model.layers[0].mlp
    W1, b1 = np.array(mlp.W1), np.array(mlp.b1)
    W1[1] += 2.0**53
    b1 -= 2.0**53
    planted = _with_mlp(family, W1=W1, b1=b1)
    assert not any(_brute_passes(planted))
    c = _certify_family(planted)
    assert c.verdict != "CERTIFIED" and c.allowance > c.min_margin


def test_an_honest_a1_in_float_is_still_certified_and_agrees_with_brute_force():
    family = registry.get("A1").family(2, 2, 1)
    assert all(_brute_passes(family))
    assert _certify_family(family).verdict == "CERTIFIED"


# ---------------------------------------------------------- issue 45: softmax at inverse temperature 1e300


@pytest.mark.parametrize("construction", ["path-blocks", "cot"])
def test_an_enormous_inverse_temperature_has_a_finite_weight_bound(construction, capsys):
    code, out, err = run(["certify", "multi-hop", "--construction", construction, "--N", "16", "--R", "2",
                          "--k", "2", "--beta", "1e300", "--json"], capsys)
    doc = json.loads(out)
    assert code in (0, 1, 2) and "Traceback" not in err and doc["verdict"] in cert.VERDICTS
    family = registry.get("G2").family(16, 2, 2, beta=1e300)
    pieces = Pieces(family.model, np.asarray(family.layout[family.encoding.blocks]), family.codes.vectors,
                    False)
    weights = pieces.weights(3)
    assert np.all(np.isfinite(weights)) and np.isfinite(pieces.weight_error[3])
    assert np.allclose(weights.sum(axis=1), 1.0)



# ------------------------------------------------------------------- kind 6: the API trusts the caller


def _family_spec(family, build=None, id_="X6"):
    base = registry.get("G1")
    return ConstructionSpec(id_, "forged", "test", build, base.nominal_promise, options=base.options,
                            variants=base.variants, task_encoding=base.task_encoding, family=family)


def test_a_forged_assembles_mark_does_not_make_a_builder_the_family():
    """A builder that takes the task, marked ``assembles = family``: it is not the family, so only the
    family's verdict may be CERTIFIED (the mark was read before, and the spec was CERTIFIED)."""
    G1 = registry.get("G1")

    def build(task, k=1, **options):  # takes the task: check runs this, not F ⊕ enc(π)
        return G1.build(task, k, **options)

    build.assembles = G1.family  # type: ignore[attr-defined]
    spec = _family_spec(G1.family, build)
    assert not spec.assembles_family
    c = cert.certify(spec, 16, 2, options={"integer": True})
    assert c.verdict == "UNKNOWN" and c.family_verdict == "CERTIFIED"
    honest = _family_spec(G1.family)
    assert honest.assembles_family and cert.certify(honest, 16, 2, options={"integer": True}).passed


def test_a_copy_of_the_family_build_with_other_globals_is_not_the_family():
    G1 = registry.get("G1")
    built = G1.build
    forged = types.FunctionType(built.__code__, {**built.__globals__}, built.__name__, built.__defaults__,
                                built.__closure__)
    assert registry.assembled_family(built) is G1.family
    assert registry.assembled_family(forged) is None and registry.assembled_family(len) is None


@pytest.mark.parametrize("N", [np.int64(16), np.int32(16), np.uint16(16)])
def test_numpy_integers_are_taken_as_exact_python_integers(N):
    c = cert.certify("G1", N, np.int64(2), options={"integer": True})
    assert c.verdict == "CERTIFIED" and type(c.params["N"]) is int and type(c.params["R"]) is int


@pytest.mark.parametrize("bad", [16.0, True, "16", np.float64(16), -3])
def test_a_size_that_is_not_an_integer_is_bad_input(bad):
    with pytest.raises(InputError, match="N must be"):
        cert.certify("G1", bad, 2)


def test_an_int64_size_never_overflows_the_count_of_points():
    """N = 2^16 as np.int64 with four live slots: N^4 = 2^64 wrapped to 0 in int64, and the empty
    enumeration certified; as an exact integer it is over the limit: UNKNOWN naming the slots."""
    family = registry.get("G1").family(2**16, 4, 1, integer=True)
    planted = _with_mlp(family, b1=np.asarray(family.model.layers[0].mlp.b1) + 3.0)  # every gate ajar
    blocks = np.asarray(family.layout[family.encoding.blocks])
    c = cert.certify_built(planted.model, family.encoding, blocks, family.codes.vectors, np.int64(2**16),
                           np.int64(4), 1, family.promise, integer=True)
    assert c.verdict == "UNKNOWN" and "stay live" in c.reasons[0]["why"]


# ------------------------------------------------------------ kind 4: type confusion inside the family


class _Both(str):
    """Equal to "softmax" and to "hard"."""

    def __eq__(self, other):
        return other in ("softmax", "hard")

    __hash__ = str.__hash__


class _Liar(float):
    """A float whose ``float()`` is another number (1000: near-hard attention)."""

    def __float__(self):
        return 1000.0


class _LyingArray(np.ndarray):
    """An array whose ``astype`` returns another array (``honest``) instead of its own values."""

    honest: np.ndarray

    def astype(self, *args, **kwargs):
        return self.honest.astype(*args, **kwargs)


def _set(obj, **fields):
    for name, value in fields.items():
        object.__setattr__(obj, name, value)


def _kind_both(N, R, k=1, **options):
    """Softmax at β = 0.01 (nearly uniform: every task fails), its kind also equal to "hard"."""
    family = registry.get("G2").family(N, R, k, **options)
    _set(family.model.layers[0].attention, kind=_Both("softmax"), inverse_temperature=0.01)
    return family


def _beta_liar(N, R, k=1, **options):
    """β = 0.01 stored (nearly uniform: tasks fail), 1000 when read with float()."""
    family = registry.get("C1").family(N, R, k, **options)
    _set(family.model.layers[0].attention, inverse_temperature=_Liar(0.01))
    return family


def _lying_w1(N, R, k=1, **options):
    """W1 = 0 stored (no unit fires: tasks fail), the honest W1 when cast."""
    family = registry.get("G1").family(N, R, k, **options)
    mlp = family.model.layers[0].mlp
    lying = np.zeros_like(mlp.W1).view(_LyingArray)
    lying.honest = np.array(mlp.W1)
    _set(mlp, W1=lying)
    return family


def _cached_value_outputs(N, R, k=1, **options):
    """W_V = 0, with the honest W_V·W_O pre-filled in the cached property."""
    family = registry.get("G2").family(N, R, k, **options)
    att = family.model.layers[0].attention
    honest = att.value_outputs
    zero = Attention(att.kind, np.zeros_like(att.W_V), att.W_O, att.W_Q, att.W_K, att.inverse_temperature)
    zero.__dict__["value_outputs"] = honest
    layer = Layer(zero, family.model.layers[0].mlp)
    return dataclasses.replace(family, model=dataclasses.replace(family.model, layers=(layer,)))


def _spec_of(base: str, family, id_: str):
    spec = registry.get(base)
    return ConstructionSpec(id_, f"forged-{id_.lower()}", "test", None, spec.nominal_promise, hops=spec.hops,
                            decoding=spec.decoding, options=spec.options, variants=spec.variants,
                            task_encoding=spec.task_encoding, family=family)


@pytest.mark.parametrize("base, family, k", [("G2", _kind_both, 2), ("C1", _beta_liar, 2),
                                             ("G1", _lying_w1, 1), ("G2", _cached_value_outputs, 2)],
                         ids=["str-subclass-kind", "float-subclass-beta", "ndarray-subclass", "cache"])
def test_type_confusion_is_undone_before_certify_and_check(base, family, k):
    """Certify and check speak of one canonical object: CERTIFIED only when check passes every task
    (brute force, N = 2), and the object certify assembles holds only plain values."""
    spec = _spec_of(base, family, "X4")
    N, R = 2, 1 if k == 1 else 2
    c = cert.certify(spec, N, R, k)
    passes = [run_check(spec, N, R, k, task=task).passed for task in _all_tasks(N, R)]
    assert not all(passes)  # the brute-force truth: some task fails (the object check builds is canonical)
    assert c.verdict != "CERTIFIED", c.verdict
    canon = canonical_family(family(N, R, k))
    att, mlp = canon.model.layers[0].attention, canon.model.layers[0].mlp
    assert type(att.kind) is str and type(att.inverse_temperature) is float
    assert all(type(a) is np.ndarray and not a.flags.writeable for a in canon.model.arrays().values())
    assert type(mlp.W1) is np.ndarray and "value_outputs" not in att.__dict__


def test_a_cached_value_output_is_recomputed_so_the_zeroed_head_fails_everywhere():
    spec = _spec_of("G2", _cached_value_outputs, "X5")
    c = cert.certify(spec, 2, 2, 2)
    assert c.verdict == "REFUTED"
    assert not any(run_check(spec, 2, 2, 2, task=t).passed for t in _all_tasks(2, 2))


def test_canonical_scalars_are_exact_and_refuse_what_is_not_their_declared_set():
    assert type(exact_str(_Both("softmax"), "kind", ATTENTION_KINDS)) is str
    with pytest.raises(InputError, match="kind must be one of"):
        exact_str(_Both("linear"), "kind", ATTENTION_KINDS)
    assert exact_float(_Liar(1000.0), "beta") == 1000.0
    with pytest.raises(InputError, match="not exact"):
        exact_float(2**60 + 1, "beta")
    with pytest.raises(InputError, match="dtype"):
        canonical_array(np.array([1, 2], dtype=object), "W1")
    array = canonical_array(np.ones((2, 2)).view(_LyingArray), "W1")
    assert type(array) is np.ndarray and array.sum() == 4 and not array.flags.writeable


def test_the_fingerprint_is_of_the_canonical_values_and_sees_every_array_byte():
    family = registry.get("G1").family(4, 2, 1)
    fp = model_fingerprint(family.model)
    assert fp.startswith("sha256:") and fp == model_fingerprint(canonical_model(family.model))
    mlp = family.model.layers[0].mlp
    b1 = np.array(mlp.b1)
    b1[0] = np.nextafter(b1[0], np.inf)
    assert model_fingerprint(_with_mlp(family, b1=b1).model) != fp


# ------------------------------------------------------------------------- kind 5: impure families


def test_a_family_honest_only_under_certifys_command_line_is_not_certified(monkeypatch):
    def family(N, R, k=1, **options):
        honest = registry.get("G1").family(N, R, k, **options)
        if "certify" in sys.argv:
            return honest
        return dataclasses.replace(honest, model=honest.model.replace(unembedding=-honest.model.unembedding))

    monkeypatch.setattr(sys, "argv", ["georecall", "certify", "single-hop"])
    c = cert.certify(_spec_of("G1", family, "X7"), 8, 2)
    assert c.verdict == "UNKNOWN" and c.family_verdict == "CERTIFIED"
    assert "different F" in c.reasons[-1]["why"] and c.declaration["rebuilds"]["builds"] == 3


def test_a_family_that_changes_from_its_third_call_is_not_certified():
    calls = []

    def family(N, R, k=1, **options):
        calls.append(1)
        honest = registry.get("G1").family(N, R, k, **options)
        if len(calls) < 3:
            return honest
        return dataclasses.replace(honest, model=honest.model.replace(unembedding=-honest.model.unembedding))

    c = cert.certify(_spec_of("G1", family, "X8"), 8, 2, falsify=False)
    assert c.verdict == "UNKNOWN" and "different F" in c.reasons[-1]["why"]
    calls.clear()  # falsifying first, the checker's own builds (calls 2 to 4) already run the changed F
    c = cert.certify(_spec_of("G1", family, "X8"), 8, 2)
    assert c.verdict == "REFUTED" and c.confirmation["check_passed"] is False


def test_the_certificate_records_the_fingerprint_of_what_it_certified():
    a = cert.certify("G1", 16, 2, options={"integer": True})
    b = cert.certify("G1", 16, 2, options={"integer": True}, seed=1)
    assert a.fingerprint.startswith("sha256:") and a.as_dict()["fingerprint"] == a.fingerprint
    assert a.fingerprint == cert.certify("G1", 16, 2, options={"integer": True}).fingerprint
    assert a.fingerprint != b.fingerprint  # the seed is one of the options certified


# ----------------------------------------------------------------------- falsify before relaxing


def _gates_ajar(N, R, k=1, **options):
    """G1 with every gate ajar (b1 + 3): units fire for foreign relations; at N = 4096, R = 16 the checker
    finds 86 % of the seeded task's queries wrong, and the relaxation alone says UNKNOWN."""
    family = registry.get("G1").family(N, R, k, **options)
    return _with_mlp(family, b1=np.asarray(family.model.layers[0].mlp.b1) + 3.0)


def test_a_construction_whose_seeded_task_fails_is_refuted_before_any_relaxation():
    spec = _spec_of("G1", _gates_ajar, "X9")
    c = cert.certify(spec, 4096, 16, options={"integer": True})
    assert c.query_types == c.points == 0  # no relaxation ran
    assert c.verdict == "REFUTED" and c.declaration["falsification"]["failed_on"] == "the seeded task"
    assert "before any relaxation" in c.reasons[0]["why"] and c.fingerprint.startswith("sha256:")
    assert c.confirmation["check_passed"] is False and c.witness["margin"] <= 0
    task = Task(np.asarray(c.witness_table))
    assert not run_check(spec, 4096, 16, task=task, options={"integer": True}).passed


def test_an_honest_construction_is_checked_on_drawn_tasks_before_it_is_certified():
    c = cert.certify("G1", 16, 2, options={"integer": True})
    falsification = c.declaration["falsification"]
    assert c.verdict == "CERTIFIED" and falsification["tasks"] == 3
    assert falsification["outcome"] == "no query wrong"
    # the model check builds on the seeded task is the one certify checked there, and check says so
    seeded = run_check("G1", 16, 2, options={"integer": True})
    assert falsification["seeded_model_fingerprint"] == seeded.extra["fingerprint"]
    assert seeded.extra["fingerprint"] == model_fingerprint(canonical_model(
        assemble_model(canonical_family(registry.get("G1").family(
            16, 2, 1, integer=True, rng=seeds.rng(0, "codes"))), seeded_task(16, 2, 0))))


def test_check_prints_the_fingerprint_of_the_model_it_built(capsys):
    code, out, _ = run(["check", "single-hop", "--N", "16", "--R", "2", "--integer"], capsys)
    assert code == 0 and "model fingerprint sha256:" in out
    code, certified, _ = run(["certify", "single-hop", "--N", "16", "--R", "2", "--integer"], capsys)
    fingerprint = next(line for line in out.splitlines() if "model fingerprint" in line).split()[-1]
    assert code == 0 and f"(as `check` prints it): {fingerprint}" in certified


def test_unknown_has_its_own_exit_code_and_a_readable_summary(tmp_path, capsys):
    module = tmp_path / "gates_ajar.py"
    module.write_text(
        "import dataclasses\n"
        "import numpy as np\n"
        "from georecall.constructions import registry\n"
        "from georecall.constructions.model import MLP, Layer\n"
        "def family(N, R, k=1, **options):\n"
        "    f = registry.get('G1').family(N, R, k, **options)\n"
        "    mlp = f.model.layers[0].mlp\n"
        "    b1 = np.asarray(mlp.b1) + 3.0\n"
        "    layer = Layer(f.model.layers[0].attention, MLP(mlp.W1, b1, mlp.W2, mlp.b2))\n"
        "    return dataclasses.replace(f, model=dataclasses.replace(f.model, layers=(layer,)))\n"
        "G = registry.get('G1')\n"
        "SPEC = registry.ConstructionSpec('GA1', 'gates-ajar', 'test', None, G.nominal_promise,\n"
        "    options=G.options, task_encoding=G.task_encoding, family=family)\n")
    argv = ["certify", "single-hop", "--construction", f"{module}:SPEC", "--N", "16", "--R", "4", "--integer",
            "--max-points", "2"]
    code, out, _ = run(argv, capsys)
    assert code == cert.UNKNOWN_STATUS == 4 and "UNKNOWN" in out
    assert "{" not in out and len(out.strip().splitlines()) <= 16  # no raw dicts: one line per unit
    assert "possibly on" in out and "--json" in out
    code, out, _ = run([*argv, "--json"], capsys)
    doc = json.loads(out)
    registry.unregister("GA1")
    assert code == 4 and doc["status"] == 4 and len(doc["reasons"]) == 4 and doc["reasons"][0]["units"]


def test_a_saved_model_carries_its_fingerprint_and_eval_says_when_the_arrays_differ(tmp_path, capsys):
    saved = tmp_path / "g1.npz"
    code, out, _ = run(["check", "single-hop", "--N", "16", "--R", "2", "--integer", "--save", str(saved)],
                       capsys)
    checked = next(line for line in out.splitlines() if "model fingerprint" in line).split()[-1]
    code, out, _ = run(["eval", str(saved), "--json"], capsys)
    doc = json.loads(out)
    assert code == 0 and doc["fingerprint"] == doc["saved_fingerprint"] == checked
    arrays = dict(np.load(saved, allow_pickle=False))
    arrays["layers__0__mlp__b1"] = arrays["layers__0__mlp__b1"] + 1.0  # edited after saving
    edited = tmp_path / "edited.npz"
    np.savez(edited, **arrays)
    code, out, _ = run(["eval", str(edited)], capsys)
    assert "MISMATCH" in out and checked in out


# ----------------------------------------------------- kind 2 across the built-ins: subnormal read-outs


_SUBNORMAL_CASES = [(key, lam) for key in ("G1", "A1", "G2", "C1", "A2a", "A2b")
                    for lam in (5e-324, 1.43e-322, 1e-321)]


@pytest.mark.parametrize("key, lam", _SUBNORMAL_CASES, ids=[f"{k}-{lam:g}" for k, lam in _SUBNORMAL_CASES])
def test_no_built_in_with_a_subnormal_read_out_is_certified_where_a_task_fails(key, lam):
    """Every built-in at λ in the subnormal range, float mode, N = 2 or 3, the relaxation alone (no
    falsification), against the checker on every task (brute force): CERTIFIED only where every query of
    every task is answered, and its certified margin (minimum less allowance, underflow included) is no
    larger than any task's exact margin (the checker's interval: its lower end plus twice its rounding
    bound is above the exact value). The checker itself may still FAIL such a task on the promise, whose
    tolerance is relative (0 at subnormal magnitudes): that is the checker's statement, not certify's."""
    spec = registry.get(key)
    N, R, k = (3, 2, 1) if spec.hops == "single" else (2, 2, 2)
    options = {"lam": lam}
    try:
        c = cert.certify(spec, N, R, k, options=options, falsify=False)
    except (ConditionError, InputError):
        return  # refused, naming the condition: never CERTIFIED
    reports = [run_check(spec, N, R, k, options=options, task=task) for task in _all_tasks(N, R)]
    if c.verdict == "CERTIFIED":
        assert c.allowance > 0  # the underflow term: n·η per dot product
        for r in reports:
            assert r.result.n_correct == r.result.n_queries, (key, lam)
            assert c.min_margin - c.allowance <= r.result.min_margin + 2 * r.result.rounding_bound, (key, lam)


def test_certify_built_makes_a_model_handed_to_it_canonical():
    """The Python API: a model whose cached W_V·W_O is the honest one while W_V = 0 is certified as what it
    computes (its cache dropped), never as the cache says."""
    family = _cached_value_outputs(2, 2, 2)
    c = cert.certify_built(family.model, family.encoding, np.asarray(family.layout[family.encoding.blocks]),
                           family.codes.vectors, 2, 2, 2, family.promise)
    assert c.verdict != "CERTIFIED"
    honest = registry.get("G2").family(2, 2, 2)
    c = cert.certify_built(honest.model, honest.encoding, np.asarray(honest.layout[honest.encoding.blocks]),
                           honest.codes.vectors, 2, 2, 2, honest.promise)
    assert c.verdict == "CERTIFIED"
