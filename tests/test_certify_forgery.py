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
import types

import numpy as np
import pytest

from georecall.constructions import registry
from georecall.constructions.encoding import assemble_model
from georecall.constructions.model import MLP, Layer
from georecall.constructions.registry import ConstructionSpec
from georecall.errors import InputError
from georecall.theory.tasks import Task
from georecall.theory.tokens import queries
from georecall.verify.checking import certify as cert
from georecall.verify.checking import certify_relaxation
from georecall.verify.checking.certify_relaxation import Lowest, Pieces
from georecall.verify.checking.check import check_queries
from georecall.verify.cli import main


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
    family = registry.get("G1").family(2, 1, 1, codes="sign", D=4)
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
    family = registry.get("G1").family(2, 1, 1, codes="sign", D=4)
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
    family = registry.get("G1").family(2, 1, 1, codes="sign", D=8, lam=lam)
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
