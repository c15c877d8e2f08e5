"""Every guard that refuses bad input fires on a deliberately broken input (CONTRIBUTING's standard).

Each case calls a public function with a minimal, otherwise valid input and exactly one broken thing, and
asserts the exception class and a distinctive piece of its message; where it is cheap, a control makes the
same call with the broken thing fixed and shows that it does not raise. The sites are those an audit found
untested; writing them found five guards that let bad input through (infinite code norms gave coherence NaN,
float leaves, vertices and relation ids were truncated or raised IndexError), fixed with them.

Sites of the audit left out here, and why:

- ``constructions/registry.py``, ``ConstructionSpec`` "give a build" (build and family both None): already
  tested (tests/test_registry_carries_everything.py, ``test_builder_refuses_a_spec_whose_build_was_...``).
- ``constructions/registry.py``, a single-hop spec whose ``BitsClaim`` has k != 1: already tested
  (tests/test_registry_carries_everything.py, ``test_a_single_hop_claim_at_k_above_one_is_refused``).
- ``ConstructionSpec``'s ``hops`` and ``readout`` checks: tested (tests/test_architecture.py,
  tests/test_compact_readout.py).

No listed site was unreachable through a public path; the library-level holdout guard
(``probes.holdout_split``) is reached through ``probes.superposition_readout``.
"""

from __future__ import annotations

import json
import math

import networkx as nx
import numpy as np
import pytest

from georecall.bounds import graphs, lower
from georecall.bounds.counting import exact_log2, log2_falling
from georecall.constructions import registry
from georecall.constructions.codes import coherence, make_codes, sign_length
from georecall.constructions.decoding import greedy_decode
from georecall.constructions.forward import forward
from georecall.constructions.layout import Layout
from georecall.constructions.model import MLP, Attention, Layer, Model, flatten, unflatten
from georecall.constructions.registry import BitsClaim, ConstructionSpec
from georecall.constructions.single_hop import single_hop_queries
from georecall.constructions.storage import load_model, save_model
from georecall.errors import InputError
from georecall.experiments.executors import open_executor, parse_scheduler
from georecall.experiments.probes import superposition_readout
from georecall.io import validate_output_path
from georecall.theory.statements import beta_for_leakage
from georecall.theory.tasks import Task
from georecall.training.parameters import init_model
from georecall.training.train import train

# ------------------------------------------------------------------------------------------------ helpers

N, R, D = 2, 1, 2  # the tiny model: 2 entities, 1 relation, width 2


def _attention(kind: str = "uniform", d: int = D, **weights) -> Attention:
    return Attention(kind, W_V=np.ones((1, d, d)), W_O=np.ones((1, d, d)), **weights)


def _mlp(d: int = D, m: int = 3) -> MLP:
    return MLP(np.ones((d, m)), np.zeros(m), np.ones((m, d)), np.zeros(d))


def _model(n_out: int = N, layers: tuple[Layer, ...] | None = None, **arrays) -> Model:
    """A valid one-layer model (uniform attention and an MLP), with ``arrays`` overriding its tables."""
    tables = {"entity_embedding": np.eye(N, D), "relation_embedding": np.zeros((R, D)),
              "unembedding": np.eye(n_out, D)}
    tables.update(arrays)
    return Model(tables["entity_embedding"], tables["relation_embedding"], tables["unembedding"],
                 (Layer(_attention(), _mlp()),) if layers is None else layers)


def _task() -> Task:
    return Task(np.array([[1, 0, 2], [2, 1, 0]]))  # N = 3, R = 2


# ------------------------------------------------------------------------------------------------- bounds


@pytest.mark.parametrize("n", [0, -3])
def test_exact_log2_refuses_a_non_positive_integer(n):
    with pytest.raises(InputError, match="log2 needs a positive integer"):
        exact_log2(n)
    assert exact_log2(8) == 3.0


@pytest.mark.parametrize("n, m", [(-1, 0), (3, -1)])
def test_log2_falling_refuses_a_negative_argument(n, m):
    with pytest.raises(InputError, match="falling factorial needs n, m >= 0"):
        log2_falling(n, m)
    assert log2_falling(3, 2) == pytest.approx(math.log2(6))


def test_validate_graph_refuses_vertices_not_numbered_from_zero():
    graph = graphs.to_graph(_task())
    shifted = nx.relabel_nodes(graph, {v: v + 1 for v in graph.nodes})
    with pytest.raises(InputError, match=r"vertices must be 0\.\.N-1"):
        graphs.from_graph(shifted)
    assert np.array_equal(graphs.from_graph(graph).table, _task().table)


def test_validate_graph_refuses_non_integer_vertex_labels():
    graph = nx.relabel_nodes(graphs.to_graph(_task()), {v: float(v) for v in range(3)})
    with pytest.raises(InputError):
        graphs.validate_graph(graph)


@pytest.mark.parametrize("vertex", [3, -1])
def test_leaf_vector_refuses_a_vertex_out_of_range(vertex):
    with pytest.raises(InputError, match=rf"vertex {vertex} outside \[0, 3\)"):
        graphs.leaf_vector(_task(), vertex, 1)
    assert graphs.leaf_vector(_task(), 0, 1).tolist() == [1, 2]


def test_leaf_vector_refuses_a_non_integer_vertex():
    with pytest.raises(InputError):
        graphs.leaf_vector(_task(), 0.5, 1)


# gadget_task(N=5, R=2, k=1, M=1): root 0, leaves two distinct vertices of 1..4.
@pytest.mark.parametrize("leaves, match", [
    ([[1, 2, 3]], r"leaves must have shape \(M, R\^k\) = \(1, 2\)"),
    ([1, 2], r"leaves must have shape \(M, R\^k\)"),
    ([[1, 1]], "leaves must be distinct vertices"),
    ([[0, 2]], "leaves must be distinct vertices"),  # 0 is the root
    ([[1, 5]], "leaves must be distinct vertices"),  # >= N
    ([[-1, 2]], "leaves must be distinct vertices"),
])
def test_gadget_task_refuses_bad_explicit_leaves(leaves, match):
    with pytest.raises(InputError, match=match):
        graphs.gadget_task(5, 2, 1, 1, leaves=leaves, rng=0)
    task, roots, realized = graphs.gadget_task(5, 2, 1, 1, leaves=[[1, 2]], rng=0)
    assert roots.tolist() == [0] and realized.tolist() == [[1, 2]]
    assert graphs.leaf_vector(task, 0, 1).tolist() == [1, 2]


def test_gadget_task_refuses_non_integer_leaves():
    with pytest.raises(InputError):
        graphs.gadget_task(5, 2, 1, 1, leaves=[[1.7, 2.2]], rng=0)


@pytest.mark.parametrize("per_d, P0", [(0, 0), (-1, 0), (1, -1)])
def test_d_min_exact_refuses_bad_per_d_or_P0(per_d, P0):
    factors = ((4, 4, 1),)  # C = 4! = 24
    with pytest.raises(InputError, match="need per_d >= 1 and P0 >= 0"):
        lower.d_min_exact(factors, per_d, P0, 1)
    assert lower.d_min_exact(factors, 1, 0, 1) == 5  # 2^5 = 32 >= 24 > 16


# ------------------------------------------------------------------------------------------ constructions

@pytest.mark.parametrize("kwargs, match", [
    (dict(delta=0.0), "failure probability must satisfy 0 < δ < 1"),
    (dict(delta=1.0), "failure probability must satisfy 0 < δ < 1"),
    (dict(delta=float("nan")), "failure probability must satisfy 0 < δ < 1"),
    (dict(t=0.0), "coherence target must satisfy 0 < t < 1"),
    (dict(t=1.5), "coherence target must satisfy 0 < t < 1"),
])
def test_sign_length_refuses_t_or_delta_outside_the_unit_interval(kwargs, match):
    with pytest.raises(InputError, match=match):
        sign_length(10, **kwargs)
    assert sign_length(10, t=0.5, delta=1e-3) >= 1


@pytest.mark.parametrize("codes", [[[0.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 2.0]], [[0.0, 0.0]]],
                         ids=["a zero code", "unequal norms", "one zero code"])
def test_coherence_refuses_zero_or_unequal_norm_codes(codes):
    with pytest.raises(InputError, match="coherence needs nonzero codes of equal norm"):
        coherence(np.array(codes))
    assert coherence(np.array([[1.0, 0.0], [0.0, 1.0]])) == 0.0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("codes", [[[np.inf, 0.0], [0.0, np.inf]], [[1e200, 0.0], [1e200, 1e200]]],
                         ids=["infinite codes", "norms overflowing to inf"])
def test_coherence_refuses_codes_without_a_finite_norm(codes):
    with pytest.raises(InputError):
        coherence(np.array(codes))


@pytest.mark.parametrize("scale", ["float", "", None])
def test_make_codes_refuses_an_unknown_scale(scale):
    with pytest.raises(InputError, match="scale must be 'unit' or 'integer'"):
        make_codes("binary", 4, scale=scale)
    assert make_codes("binary", 4, scale="integer").D == 2


@pytest.mark.parametrize("at", ["first", None, "LAST"])
def test_forward_refuses_an_unknown_at(at):
    tokens = np.array([[0, N]])  # entity 0, relation 0
    with pytest.raises(InputError, match="at must be 'last' or 'all'"):
        forward(_model(), tokens, at=at)
    assert forward(_model(), tokens, at="all").shape == (1, 2, N)


@pytest.mark.parametrize("shape", [(), (2, -1), (2.0,), (True,), ("3",)])
def test_layout_refuses_a_bad_block_shape(shape):
    with pytest.raises(InputError, match="needs a shape of non-negative integers"):
        Layout().add("blocks", *shape)
    assert Layout().add("blocks", 2, 0).shape == (2, 0)


def test_greedy_decode_refuses_outputs_that_are_not_entities():
    prompts = np.array([[0, N]])
    with pytest.raises(InputError, match="needs n_out == N"):
        greedy_decode(_model(n_out=N + 1), prompts, 1)
    generated, _ = greedy_decode(_model(), prompts, 1)
    assert generated.shape == (1, 1)


# model.py: the Model's arrays, its attention and layers, replace and unflatten

@pytest.mark.parametrize("table", [np.eye(N, D) * (1 + 0j), np.array([["a", "b"], ["c", "d"]])],
                         ids=["complex", "strings"])
def test_model_refuses_an_array_that_is_not_floating_point(table):
    with pytest.raises(InputError, match="entity_embedding must be a floating-point array"):
        _model(entity_embedding=table)
    assert _model(entity_embedding=np.eye(N, D)).d == D


@pytest.mark.parametrize("table", [np.ones(D), np.ones((1, N, D))], ids=["1-D", "3-D"])
def test_model_refuses_an_array_of_the_wrong_rank(table):
    with pytest.raises(InputError, match=r"entity_embedding must have 2 dimensions"):
        _model(entity_embedding=table)


@pytest.mark.parametrize("kind", ["softmax", "hard"])
@pytest.mark.parametrize("given", [{}, {"W_Q": np.ones((1, D, D))}, {"W_K": np.ones((1, D, D))}],
                         ids=["neither", "no W_K", "no W_Q"])
def test_attention_refuses_missing_queries_or_keys(kind, given):
    with pytest.raises(InputError, match=f"{kind} attention needs W_Q and W_K"):
        _attention(kind, **given)
    assert _attention(kind, W_Q=np.ones((1, D, D)), W_K=np.ones((1, D, D))).heads == 1


@pytest.mark.parametrize("W_Q, W_K", [
    (np.ones((1, D, 2)), np.ones((1, D, 3))),   # d_k differs
    (np.ones((1, 3, 2)), np.ones((1, 3, 2))),   # width 3, not d = 2
    (np.ones((2, D, 2)), np.ones((2, D, 2))),   # 2 heads, W_V has 1
])
def test_attention_refuses_misshapen_queries_or_keys(W_Q, W_K):
    with pytest.raises(InputError, match=r"W_Q and W_K must both have shape \(H, d, d_k\)"):
        _attention("softmax", W_Q=W_Q, W_K=W_K)


@pytest.mark.parametrize("layer, match", [
    (Layer(_attention(d=3), _mlp()), "layer 0 attention expects width 3, d = 2"),
    (Layer(_attention(), _mlp(d=3)), "layer 0 MLP expects width 3, d = 2"),
    (Layer(None, _mlp(d=3)), "layer 0 MLP expects width 3, d = 2"),
])
def test_model_refuses_a_layer_of_another_width(layer, match):
    with pytest.raises(InputError, match=match):
        _model(layers=(layer,))
    assert _model(layers=(Layer(_attention(), _mlp()),)).d == D


def test_model_replace_refuses_an_unknown_array_name():
    model = _model()
    with pytest.raises(InputError, match=r"no such weight array\(s\): \['layers.0.mlp.W3'\]"):
        model.replace(**{"layers.0.mlp.W3": np.ones((3, D))})
    assert np.array_equal(model.replace(unembedding=2 * np.eye(N, D)).unembedding, 2 * np.eye(N, D))


@pytest.mark.parametrize("extra", ["layers.1.mlp.W1", "position_embeddings", "layers.0.attention.W_X"])
def test_unflatten_refuses_unexpected_arrays(extra):
    model = _model()
    with pytest.raises(InputError, match=r"unexpected model array\(s\)"):
        unflatten(model, {**flatten(model), extra: np.ones((1, D, D))})
    assert unflatten(model, flatten(model)).arrays().keys() == model.arrays().keys()


# registry.py: ConstructionSpec's fields, register and resolve

def _spec_fields() -> dict:
    g1 = registry.get("G1")
    return dict(id="X1", name="x-one", result="test", build=g1.build, nominal_promise=g1.nominal_promise)


@pytest.mark.parametrize("bad, match", [
    (dict(family=3, task_encoding="G1"), "family must be a callable"),
    (dict(family="G1"), "a family declares its task_encoding"),
    (dict(decoding="eager"), "decoding must be 'last' or 'greedy'"),
    (dict(facts_in="weights"), "facts_in must be 'embeddings' or 'mlp'"),
    (dict(task_encoding="relations"), "task_encoding must be a TaskEncoding or None"),
    (dict(bound="vc_dimension"), "bound must be one of"),
    (dict(bits=(1024, 8)), "bits must be a BitsClaim or None, got tuple"),
    (dict(common={"codes", "gate"}), "common options are a subset of"),
    (dict(codes="ternary"), "codes must be one of"),
])
def test_construction_spec_refuses_a_bad_field(bad, match):
    g1 = registry.get("G1")
    # "G1" stands for G1's own family / task encoding (a spec can be a parametrize id only by name)
    bad = {key: getattr(g1, key) if value == "G1" else value for key, value in bad.items()}
    with pytest.raises(InputError, match=match):
        ConstructionSpec(**_spec_fields(), **bad)
    spec = ConstructionSpec(**_spec_fields(), family=g1.family, task_encoding=g1.task_encoding,
                            decoding="last", facts_in="mlp", bound="tradeoff", bits=BitsClaim(64, 2),
                            common={"codes", "lam"}, codes="sign")
    assert spec.common == frozenset({"codes", "lam"})


@pytest.mark.parametrize("spec", ["G1", None, _spec_fields], ids=["a name", "None", "a function"])
def test_register_refuses_what_is_not_a_spec(spec):
    with pytest.raises(InputError, match=r"register\(\) takes a ConstructionSpec"):
        registry.register(spec)


@pytest.mark.parametrize("what", ["id", "name"])
def test_register_refuses_an_id_or_name_with_a_colon(what):
    fields = _spec_fields()
    with pytest.raises(InputError, match=f"a construction's {what} must be a non-empty string without ':'"):
        registry.register(ConstructionSpec(**{**fields, what: "my:spec"}))
    # (the conftest fixture restores the registry after the test)
    assert registry.register(ConstructionSpec(**fields)) is registry.get("X1")


def test_resolve_refuses_an_attribute_that_is_not_a_spec(tmp_path):
    module = tmp_path / "guard_specs.py"
    module.write_text("from georecall.constructions.registry import get\n\n"
                      "SPEC = get('G1')\nNOT_A_SPEC = 3\n")
    with pytest.raises(InputError, match=r"is not a ConstructionSpec \(got int\)"):
        registry.resolve(f"{module}:NOT_A_SPEC")
    assert registry.resolve(f"{module}:SPEC") is registry.get("G1")


# storage.py

def test_load_model_refuses_an_unknown_format_version(tmp_path):
    good = save_model(_model(), str(tmp_path / "good.npz"))
    with np.load(good, allow_pickle=False) as data:
        arrays = {key: data[key] for key in data.files}
    header = json.loads(str(arrays["__header__"]))
    header["format"] = "georecall-model-2"
    arrays["__header__"] = np.array(json.dumps(header))
    np.savez(tmp_path / "future.npz", **arrays)
    with pytest.raises(InputError, match="unknown model format 'georecall-model-2'"):
        load_model(str(tmp_path / "future.npz"))
    assert load_model(good)[0].d == D


# ------------------------------------------------------------------------------------------------- theory

@pytest.mark.parametrize("eps", [0.0, 1.0, -0.1, float("nan")])
def test_beta_for_leakage_refuses_a_target_outside_the_unit_interval(eps):
    with pytest.raises(InputError, match="leakage target must satisfy 0 < ε < 1"):
        beta_for_leakage(eps, 3)
    assert beta_for_leakage(0.25, 3) == pytest.approx(math.log(9))


@pytest.mark.parametrize("path", [[2], [-1], [0, 2]])
def test_task_compose_refuses_a_relation_out_of_range(path):
    with pytest.raises(InputError, match=r"relation -?\d outside \[0, 2\)"):
        _task().compose(path)
    assert _task().compose([0, 1]).tolist() == [1, 2, 0]


def test_task_compose_refuses_a_non_integer_relation():
    with pytest.raises(InputError):
        _task().compose([0.7])


# --------------------------------------------------------------------------------------------- georecall.io

@pytest.mark.parametrize("name", ["a\0b", "\0"])
def test_validate_output_path_refuses_a_nul_character(tmp_path, name):
    with pytest.raises(InputError, match="contains a NUL character"):
        validate_output_path(str(tmp_path / name))
    assert validate_output_path(str(tmp_path / "ab")) == str(tmp_path / "ab")


# ----------------------------------------------------------------------------------------------- verify

@pytest.mark.parametrize("timeouts, match", [
    (dict(connect_timeout=0), "connect timeout must be positive"),
    (dict(connect_timeout=-1.0), "connect timeout must be positive"),
    (dict(connect_timeout=float("nan")), "connect timeout must be positive"),
    (dict(worker_timeout=0), "worker timeout must be positive"),
    (dict(worker_timeout=float("nan")), "worker timeout must be positive"),
])
def test_open_executor_refuses_a_non_positive_timeout(timeouts, match):
    # (the control, a LocalCluster, is not cheap: it is shown that the scheduler itself is well formed)
    assert parse_scheduler("local:1") == ("local", 1)
    with pytest.raises(InputError, match=match):
        open_executor("local:1", **timeouts)


@pytest.mark.parametrize("init_scale, match", [
    (-1.0, "init_scale for entity_embedding must be finite and >= 0"),
    (float("nan"), "init_scale for entity_embedding must be finite and >= 0"),
    (float("inf"), "init_scale for entity_embedding must be finite and >= 0"),
    ({"mlp": -0.5}, "init_scale for mlp must be finite and >= 0"),
])
def test_init_model_refuses_a_negative_or_non_finite_init_scale(init_scale, match):
    with pytest.raises(InputError, match=match):
        init_model(2, 1, 2, 1, rng=0, init_scale=init_scale)
    assert init_model(2, 1, 2, 1, rng=0, init_scale={"mlp": 0.0}).d == 2


@pytest.mark.parametrize("weight_decay, match", [
    (-0.1, "weight_decay for entity_embedding must be finite and >= 0"),
    (float("nan"), "weight_decay for entity_embedding must be finite and >= 0"),
    ({"attention": float("-inf")}, "weight_decay for attention must be finite and >= 0"),
])
def test_train_refuses_a_negative_or_non_finite_weight_decay(weight_decay, match):
    task = Task(np.array([[1, 0]]))
    tokens, answers = single_hop_queries(task)
    model = init_model(2, 1, 2, 1, rng=0)
    with pytest.raises(InputError, match=match):
        train(model, tokens, answers, steps=1, weight_decay=weight_decay)
    assert train(model, tokens, answers, steps=1, stop_at_accuracy=None, weight_decay=0.1).model.d == 2


@pytest.mark.parametrize("holdout", [1.0, -0.1, 1.5, float("nan")])
def test_superposition_readout_refuses_a_holdout_outside_zero_one(holdout):
    task = Task(np.array([[1, 2, 3, 4, 5, 6, 7, 0]]))
    model = init_model(8, 1, 4, 2, rng=0)
    with pytest.raises(InputError, match=r"holdout must be in \[0, 1\)"):
        superposition_readout(model, task, holdout=holdout, rng=0, power_draws=0)
    assert superposition_readout(model, task, holdout=0.25, rng=0, power_draws=0)["test_subjects"] == 2

