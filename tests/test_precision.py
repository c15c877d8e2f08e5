import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from georecall.cli import main
from georecall.constructions.single_hop import build_a1, build_g1, single_hop_queries
from georecall.theory.tasks import random_task
from georecall.verify.checking.check import check_queries
from georecall.verify.checking.precision import changed_arrays, quantize, quantize_array, smallest_exact_bits


def test_quantization_grid():
    from georecall.constructions.model import Model
    model = Model(np.array([[0.0, 0.3, -1.0]]), np.zeros((1, 3)), np.array([[0.5, 0.0, 0.26]]))
    q = quantize(model, 2)  # levels {-max, 0, max}
    assert q.entity_embedding.tolist() == [[0.0, 0.0, -1.0]]
    assert q.unembedding.tolist() == [[0.5, 0.0, 0.5]]
    q3 = quantize(model, 3)  # step max/3
    np.testing.assert_allclose(q3.entity_embedding, [[0.0, 1 / 3, -1.0]])
    assert q.meta["quantized_bits"] == 2
    q1 = quantize(model, 1)  # sign: zero is not kept (sgn(0) = +1)
    assert q1.entity_embedding.tolist() == [[1.0, 1.0, -1.0]] and q1.unembedding.tolist() == [[0.5, 0.5, 0.5]]
    assert q1.relation_embedding.tolist() == [[0.0, 0.0, 0.0]]  # an all-zero tensor stays zero
    q0 = quantize(model, 0)  # one value: the mean
    np.testing.assert_allclose(q0.entity_embedding, [[-0.7 / 3] * 3])
    for bad in (-1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="b >= 0"):
            quantize(model, bad)


@given(values=arrays(np.float64, st.integers(1, 40), elements=st.floats(-1e6, 1e6)), bits=st.integers(0, 6))
@example(values=np.array([5e-324]), bits=3)  # a subnormal max|W|: δ underflowed to 0 and gave NaN
@example(values=np.array([1e-310, -3e-311, 0.0]), bits=5)
@example(values=np.array([1.7e308, -1e308, 3.0]), bits=6)
def test_b_bits_means_at_most_two_to_the_b_values_per_tensor(values, bits):
    q = quantize_array(values, bits)
    assert np.isfinite(q).all()
    assert np.unique(q).size <= 2**bits
    if bits >= 1 and np.abs(values).max() > 0:
        assert np.abs(q).max() == pytest.approx(np.abs(values).max())  # the top level is max|W|


def test_g1_binary_needs_two_bits_and_a1_more():
    task = random_task(512, 4, 3)
    tokens, answers = single_hop_queries(task)
    def check(m):
        return check_queries(m, tokens, answers)
    g1 = build_g1(task, "binary").model
    bits, records = smallest_exact_bits(g1, check)
    assert bits == 2 and records[-1]["exact"] and not records[0]["exact"] and records[0]["bits"] == 1
    assert changed_arrays(g1, 2) == []  # every G1 tensor already lies in {-t, 0, t}
    assert changed_arrays(g1, 1)  # sign quantization moves the zeros
    a1 = build_a1(task, "binary").model
    bits, records = smallest_exact_bits(a1, check)
    assert bits > 2 and not any(r["exact"] for r in records[:-1])
    assert changed_arrays(a1, bits)  # quantization at A1's smallest b changes the model
    assert check_queries(quantize(a1, 2), tokens, answers).accuracy < 0.5


@pytest.mark.parametrize("construction", ["path-blocks", "associative-width", "associative-depth", "cot"])
def test_multi_hop_precision_scan(construction):
    from georecall.verify.checking.run import precision_scan
    doc = precision_scan(construction, 64, 2, 2, max_bits=16)
    assert doc["smallest_exact_bits"] is not None and doc["records"][-1]["exact"]
    assert all(not r["exact"] for r in doc["records"][:-1])


def test_precision_scan_refuses_unknown_names():
    from georecall.verify.checking.run import precision_scan
    with pytest.raises(ValueError, match="give --k"):
        precision_scan("cot", 16, 2)
    with pytest.raises(ValueError, match="single-hop construction"):
        precision_scan("geometric", 16, 2, 2)


@pytest.mark.parametrize("command", [["precision"], ["check", "single-hop"]])
def test_the_help_says_what_b_bits_do_at_b_1_and_above(command, capsys):
    # what the code does: b = 1 keeps signs at max|W| (a zero becomes +max|W|); b = 2 the grid {-s, 0, s}
    W = np.array([[-3.0, 0.0, 1.0, 2.0]])
    assert quantize_array(W, 1).tolist() == [[-3.0, 3.0, 3.0, 3.0]]
    assert quantize_array(W, 2).tolist() == [[-3.0, 0.0, 0.0, 3.0]]
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse's line breaks undone
    assert "b = 1 keeps signs, max|W|·sgn(W), zeros becoming +max|W|" in text
    assert "b >= 2 rounds to the uniform symmetric grid of step max|W|/(2^(b-1)-1), zero kept" in text
