import numpy as np
import pytest

from georecall.constructions.single_hop import build_a1, build_g1, single_hop_queries
from georecall.theory.tasks import random_task
from georecall.verify.check import check_queries
from georecall.verify.precision import quantize, smallest_exact_bits


def test_quantization_grid():
    from georecall.constructions.model import Model
    model = Model(np.array([[0.0, 0.3, -1.0]]), np.zeros((1, 3)), np.array([[0.5, 0.0, 0.26]]))
    q = quantize(model, 2)  # levels {-max, 0, max}
    assert q.entity_embedding.tolist() == [[0.0, 0.0, -1.0]]
    assert q.unembedding.tolist() == [[0.5, 0.0, 0.5]]
    q3 = quantize(model, 3)  # step max/3
    np.testing.assert_allclose(q3.entity_embedding, [[0.0, 1 / 3, -1.0]])
    assert q.meta["quantized_bits"] == 2
    with pytest.raises(ValueError, match="b >= 2"):
        quantize(model, 1)


def test_g1_binary_is_exact_at_two_bits_and_a1_is_not():
    task = random_task(512, 4, 3)
    tokens, answers = single_hop_queries(task)
    check = lambda m: check_queries(m, tokens, answers)  # noqa: E731
    bits, records = smallest_exact_bits(build_g1(task, "binary").model, check)
    assert bits == 2 and records[-1]["exact"]
    bits, records = smallest_exact_bits(build_a1(task, "binary").model, check)
    assert bits > 2 and not records[0]["exact"]
    assert check_queries(quantize(build_a1(task, "binary").model, 2), tokens, answers).accuracy < 0.5


@pytest.mark.parametrize("construction", ["path-blocks", "associative", "layered", "cot"])
def test_multi_hop_precision_scan(construction):
    from georecall.verify.suite import precision_scan
    doc = precision_scan(construction, 64, 2, 2, max_bits=16)
    assert doc["smallest_exact_bits"] is not None and doc["records"][-1]["exact"]
    assert all(not r["exact"] for r in doc["records"][:-1])


def test_precision_scan_refuses_unknown_names():
    from georecall.verify.suite import precision_scan
    with pytest.raises(ValueError, match="give --k"):
        precision_scan("cot", 16, 2)
    with pytest.raises(ValueError, match="k-hop construction"):
        precision_scan("geometric", 16, 2, 2)
