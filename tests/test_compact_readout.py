"""Compact read-out storage (``Model.readout_columns``): the same model as the dense ``(n_out, d)`` read-out
it means, through THE forward pass, the checker, the trainer's gradients, the quantizer and save/load; every
guard refuses a broken input. References: the dense storage of the same weights and the naive loop forward
of ``test_model``."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_model import random_model, reference_logits  # a sibling test module (pytest imports by rootdir)

from georecall.constructions.forward import forward
from georecall.constructions.model import Model, nonzero_columns, unflatten
from georecall.constructions.storage import load_model, save_model
from georecall.errors import InputError
from georecall.theory.tasks import task_for_seed
from georecall.theory.tokens import single_hop_queries
from georecall.training.backward import loss_and_grads
from georecall.verify.checking.check import check_queries
from georecall.verify.checking.precision import quantize


def compact_copy(dense: Model, columns: np.ndarray) -> Model:
    """``dense`` with U zeroed off ``columns`` in both storages: (dense-stored, compact-stored)."""
    U = np.zeros_like(dense.unembedding)
    U[:, columns] = dense.unembedding[:, columns]
    zeroed = dense.replace(unembedding=U)
    return zeroed, Model(dense.entity_embedding, dense.relation_embedding, U[:, columns], dense.layers,
                         dense.position_embedding, readout_columns=columns)


@given(
    N=st.integers(2, 8), R=st.integers(1, 3), d=st.integers(2, 8), m=st.integers(1, 8),
    layers=st.integers(0, 2), kind=st.sampled_from(["uniform", "softmax", "hard"]), T=st.integers(1, 4),
    data=st.data(), seed=st.integers(0, 2**31),
)
def test_compact_storage_computes_the_dense_model(N, R, d, m, layers, kind, T, data, seed):
    rng = np.random.default_rng(seed)
    model = random_model(rng, N, R, d, m, layers, kind, 2, True, T)
    columns = np.array(sorted(data.draw(st.sets(st.integers(0, d - 1), max_size=d - 1))), dtype=np.int64)
    dense, compact = compact_copy(model, columns)
    assert compact.compact and not dense.compact
    np.testing.assert_array_equal(compact.full_unembedding(), dense.unembedding)
    assert compact.parameter_count() == dense.parameter_count()
    tokens = rng.integers(0, N + R, size=(5, T))
    expected = np.stack([reference_logits(dense, seq) for seq in tokens])  # naive loops on the dense storage
    np.testing.assert_allclose(forward(compact, tokens, at="all"), expected, rtol=1e-9, atol=1e-9)
    # U on any increasing columns, against indexing the dense array
    probe = np.array(sorted(data.draw(st.sets(st.integers(0, d - 1)))), dtype=np.int64)
    np.testing.assert_array_equal(compact.unembedding_on(probe), dense.unembedding[:, probe])
    np.testing.assert_array_equal(nonzero_columns(dense.unembedding), compact.readout.columns)


@pytest.mark.parametrize("construction, attributes", [("G1", "shared"), ("G1", "disjoint"), ("A1", "shared"),
                                                      ("A1", "disjoint")])
@pytest.mark.parametrize("integer", [False, True])
def test_builders_store_the_read_out_compactly_and_check_the_same(construction, attributes, integer):
    from georecall.constructions import registry

    task = task_for_seed(16, 3, 4, attributes=attributes)
    built = registry.get(construction).build(task, integer=integer)
    model = built.model
    assert model.compact and model.unembedding.shape[1] < model.d
    # U_j = λ·a_j on the output block, from the codes directly (a loop, not the builder's part)
    out = built.layout["out"]
    full = model.full_unembedding()
    lam = built.constants["lambda"]
    for j in range(model.n_out):  # answer id r·N + j reads code j (disjoint), j itself (shared)
        np.testing.assert_array_equal(full[j, out], lam * built.codes.vectors[j % task.N])
    tokens, answers = single_hop_queries(task)
    dense = model.with_dense_readout()
    assert not dense.compact and dense.parameter_count() == model.parameter_count() == built.promise.params
    for forward_, decoder in (("auto", "auto"), ("dense", "dense")):
        options = {"integer": integer, "keep": True, "forward": forward_, "decoder": decoder}
        a = check_queries(model, tokens, answers, **options)
        b = check_queries(dense, tokens, answers, **options)
        assert a.exact and b.exact and (a.forward, a.decoder) == (b.forward, b.decoder)
        np.testing.assert_array_equal(a.predictions, b.predictions)
        if integer:  # exact integers in any summation order
            np.testing.assert_array_equal(a.margins, b.margins)
        else:
            np.testing.assert_allclose(a.margins, b.margins, rtol=1e-12)


def test_a_broken_compact_read_out_fails_its_check():
    from georecall.constructions import registry

    task = task_for_seed(16, 2, 1)
    model = registry.get("G1").build(task).model
    U = np.array(model.unembedding)
    U[3] = U[5]  # two answers with one read-out vector: a tie, never a pass
    broken = model.replace(unembedding=U)
    assert broken.compact
    tokens, answers = single_hop_queries(task)
    result = check_queries(broken, tokens, answers)
    assert not result.exact and result.min_margin <= 0


def test_compact_read_out_guards():
    E, Q = np.zeros((4, 5)), np.zeros((2, 5))
    with pytest.raises(InputError, match="increasing"):
        Model(E, Q, np.ones((4, 2)), readout_columns=np.array([3, 1]))
    with pytest.raises(InputError, match="increasing"):
        Model(E, Q, np.ones((4, 2)), readout_columns=np.array([1, 5]))  # 5 is not a coordinate of d = 5
    with pytest.raises(InputError, match="increasing"):
        Model(E, Q, np.ones((4, 2)), readout_columns=np.array([-1, 2]))
    with pytest.raises(InputError, match="fewer than d"):
        Model(E, Q, np.ones((4, 5)), readout_columns=np.arange(5))  # every column: store it densely
    with pytest.raises(InputError, match="2 columns"):
        Model(E, Q, np.ones((4, 3)), readout_columns=np.array([0, 2]))
    with pytest.raises(InputError, match="integer"):
        Model(E, Q, np.ones((4, 2)), readout_columns=np.array([0.0, 2.0]))
    with pytest.raises(InputError, match="width 3"):
        Model(E, Q, np.ones((4, 3)))  # dense storage must have width d


def test_storage_survives_replace_astype_save_and_load(tmp_path):
    from georecall.constructions import registry

    task = task_for_seed(16, 2, 2)
    model = registry.get("G1").build(task).model
    assert model.astype(np.float32).compact and model.replace(unembedding=2 * model.unembedding).compact
    dense_width = model.replace(unembedding=np.asarray(model.full_unembedding()))  # a (n_out, d) array
    assert not dense_width.compact
    path = save_model(model, tmp_path / "g1")
    loaded, header = load_model(path)
    assert loaded.compact and header["readout_columns"] == model.readout_columns.tolist()
    np.testing.assert_array_equal(loaded.full_unembedding(), model.full_unembedding())
    assert not load_model(save_model(dense_width, tmp_path / "dense"))[0].compact
    # a damaged header is refused with a message, not a traceback
    import json

    header["readout_columns"] = ["x"]
    header.pop("extra_arrays")
    bad = tmp_path / "bad.npz"
    with np.load(path) as stored:
        arrays = dict(stored)
    arrays["__header__"] = np.array(json.dumps(header))
    np.savez(bad, **arrays)
    with pytest.raises(InputError, match="readout_columns"):
        load_model(str(bad))
    header["readout_columns"] = [2**70]  # beyond int64: refused as damage, not an OverflowError
    arrays["__header__"] = np.array(json.dumps(header))
    np.savez(bad, **arrays)
    with pytest.raises(InputError, match="readout_columns"):
        load_model(str(bad))
    with pytest.raises(InputError, match="missing"):
        unflatten(model, {})


def test_gradients_and_quantization_are_those_of_the_dense_model():
    from georecall.constructions import registry

    task = task_for_seed(8, 2, 3)
    model = registry.get("G1").build(task).model
    dense = model.with_dense_readout()
    tokens, answers = single_hop_queries(task)
    with pytest.raises(InputError, match="compactly"):
        loss_and_grads(model, tokens, answers)
    frozen = frozenset({"unembedding"})
    loss_c, grads_c, _ = loss_and_grads(model, tokens, answers, frozen=frozen)
    loss_d, grads_d, _ = loss_and_grads(dense, tokens, answers, frozen=frozen)
    assert loss_c == loss_d and grads_c.keys() == grads_d.keys()
    for key in grads_c:
        np.testing.assert_array_equal(grads_c[key], grads_d[key])
    for bits in (0, 1, 2):  # the codebook of the dense U, its zeros included (b = 1 moves them)
        np.testing.assert_array_equal(quantize(model, bits).full_unembedding(),
                                      quantize(dense, bits).full_unembedding())


def test_registry_read_out_declarations_hold():
    """A spec declaring ``readout="code"`` builds a compact read-out of D columns (D + R for disjoint
    attributes): what the memory estimate counts. A bad declaration is refused."""
    from georecall.constructions import registry

    for spec in registry.specs():
        if spec.readout != "code":
            continue
        k = 1 if spec.hops == "single" else 2
        for attributes in ["shared"] + (["disjoint"] if "disjoint" in spec.variants else []):
            task = task_for_seed(16, 3, 0, attributes=attributes)
            built = spec.build(task, k)
            width = built.codes.D + (task.R if attributes == "disjoint" else 0)
            assert built.model.compact and built.model.unembedding.shape == (task.n_answers, width), spec.id
    bad = registry.get("G1")
    with pytest.raises(InputError, match="readout"):
        registry.ConstructionSpec("X9", "x9", "", bad.build, bad.nominal_promise, readout="sparse")


def test_a_read_only_view_of_a_writable_array_is_copied():
    """The Model takes read-only arrays without a copy only when nothing can change them: a read-only view of
    a writable array (e.g. a user's codebook shared by a read-out with λ = 1) is copied."""
    from georecall.constructions.registry import resolve

    base = np.ones((3, 2))
    view = base[:]
    view.setflags(write=False)
    model = Model(np.zeros((3, 2)), np.zeros((1, 2)), view)
    base[0, 0] = 5.0
    assert model.unembedding[0, 0] == 1.0
    task = task_for_seed(8, 2, 0)
    root = __file__.rsplit("/tests/", 1)[0]
    built = resolve(f"{root}/examples/my_construction.py:SPEC").build(task)  # OH1: a writable np.eye codebook
    assert built.codes.vectors.flags.writeable
    before = check_queries(built.model, *single_hop_queries(task))
    built.codes.vectors[:] = 0.0  # the user's array changes; the built model must not
    after = check_queries(built.model, *single_hop_queries(task))
    assert before.exact and after.exact and after.min_margin == before.min_margin


def test_unflatten_keeps_compact_storage_only_for_the_same_widths():
    from georecall.constructions import registry
    from georecall.constructions.model import flatten, structure_of
    from georecall.training.parameters import init_model

    g1 = registry.get("G1").build(task_for_seed(16, 2, 0)).model
    other = init_model(16, 2, g1.unembedding.shape[1], 8, rng=0)  # d equal to g1's compact width
    rebuilt = unflatten(g1, flatten(other))
    assert not rebuilt.compact and rebuilt.d == other.d
    assert not unflatten(structure_of(g1), flatten(other)).compact
    assert unflatten(g1, flatten(g1)).compact


def test_the_structured_step_refuses_a_compact_read_out():
    from georecall.constructions import registry
    from georecall.training.train_structured import loss_and_grads_structured

    task = task_for_seed(8, 2, 3)
    model = registry.get("G1").build(task).model
    tokens, answers = single_hop_queries(task)
    with pytest.raises(InputError, match="dense read-out"):
        loss_and_grads_structured(model, tokens, answers)
    loss, grads, _ = loss_and_grads_structured(model.with_dense_readout(), tokens, answers)
    assert np.isfinite(loss) and grads["unembedding"].shape == (task.N, model.d)
