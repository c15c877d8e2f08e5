"""``--to onnx``: one ONNX graph (``model.onnx``), run by ONNX Runtime.

Input ``tokens``: int64 ``(batch, sequence)`` in georecall's ids (entity ``s`` is ``s``, relation ``r`` is
``N + r``) and order (``⟨r_k, …, r_1, s⟩``, the subject last). Output ``logits``: ``(batch, n_out)`` in the
exported dtype, at the read position (the last). Sequences up to ``max_sequence`` tokens (georecall's
positions, or the longest the task needs; recorded in the graph's metadata).

Written with ``onnx.helper`` (no exporter tracing): per layer ``v = x W_V``, scores ``β·q kᵀ`` plus a causal
mask of 0 / −∞, ``Softmax`` on the last axis (uniform attention: the constant weights ``1/(t + 1)``), ``z = a
v``, ``y = x + concat(z) W_O``, ``x = y + (ReLU(y W1 + b1) W2 + b2)``: the order of
:mod:`georecall.exporters.graph`, with the arrays of the torch target (``c = β``).
"""

from __future__ import annotations

import os

import numpy as np

from georecall.constructions.model import Model
from georecall.errors import InputError
from georecall.exporters.graph import Graph, exportable, graph_of

__all__ = ["FILE", "build", "graph", "require", "runner", "write"]

FILE = "model.onnx"
OPSET = 17


def _onnx():
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        raise InputError("--to onnx needs onnx and onnxruntime: pip install '.[export]' in a clone of "
                         "georecall") from None
    return onnx, helper, numpy_helper


def _runtime():
    try:
        import onnxruntime
    except ImportError:
        raise InputError("--to onnx needs onnxruntime: pip install '.[export]' in a clone of georecall") \
            from None
    return onnxruntime


def require() -> None:
    """Refuse (``InputError``) when onnx or onnxruntime is missing."""
    _onnx()
    _runtime()


def graph(model: Model, dtype) -> Graph:
    """What the ONNX graph stores and computes (``c = β``).

    Parameters
    ----------
    model : Model
        The model to export.
    dtype : numpy dtype
        The target's dtype (every stored array is cast to it).

    Returns
    -------
    Graph

    Raises
    ------
    InputError
        Hard attention (:func:`~georecall.exporters.graph.exportable`).
    """
    exportable(model, "ONNX Runtime")
    return graph_of(model, dtype)


def build(model: Model, dtype, context: int):
    """The ``onnx.ModelProto`` of ``model``.

    Parameters
    ----------
    model : Model
    dtype : numpy dtype
    context : int
        The longest sequence needed (the masks' size when the model has no positions).

    Returns
    -------
    onnx.ModelProto
    """
    onnx, helper, numpy_helper = _onnx()
    g = graph(model, dtype)
    dtype = np.dtype(dtype)
    elem = onnx.TensorProto.FLOAT if dtype == np.float32 else onnx.TensorProto.DOUBLE
    T_max = model.max_positions or max(context, 1)
    b = _Builder(helper, numpy_helper)
    _sequence_masks(b, dtype, T_max)
    x = _embedding(b, g)
    for i, layer in enumerate(g.layers):
        p = f"layer{i}_"
        y = x if layer.attention is None else _attention(b, layer.attention, x, p)
        x = y if layer.mlp is None else _mlp(b, layer.mlp, y, p)
    b.node("Gather", [x, "last"], "x_read", axis=1)
    b.node("MatMul", ["x_read", b.const("U_T", np.ascontiguousarray(g.unembedding.stored.T))], "logits")
    proto = helper.make_graph(
        b.nodes, "georecall",
        [helper.make_tensor_value_info("tokens", onnx.TensorProto.INT64, ["batch", "sequence"])],
        [helper.make_tensor_value_info("logits", elem, ["batch", model.n_out])], b.inits)
    result = helper.make_model(proto, opset_imports=[helper.make_opsetid("", OPSET)],
                               producer_name="georecall")
    result.ir_version = 8
    helper.set_model_props(result, {"max_sequence": str(T_max), "N": str(model.n_entities),
                                    "R": str(model.n_relations),
                                    "tokens": "entity s is s, relation r is N + r"})
    onnx.checker.check_model(result)
    return result


class _Builder:
    """The graph's nodes and initializers in the order added (each method returns the name it adds)."""

    def __init__(self, helper, numpy_helper) -> None:
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes: list = []
        self.inits: list = []

    def const(self, name: str, value) -> str:
        """An initializer ``name`` holding ``value``."""
        self.inits.append(self.numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        """A node ``op`` of ``inputs`` with the one output ``output``."""
        self.nodes.append(self.helper.make_node(op, inputs, [output], **attrs))
        return output


def _sequence_masks(b: _Builder, dtype: np.dtype, T_max: int) -> None:
    """The input's length and the causal masks cut to it (``mask_t`` 0 / −∞, ``uniform_t``)."""
    causal = np.tril(np.ones((T_max, T_max), dtype=bool))
    b.const("mask", np.where(causal, 0.0, -np.inf).astype(dtype))
    b.const("uniform", (causal / np.arange(1, T_max + 1)[:, None]).astype(dtype))
    b.const("zero2", np.zeros(2, dtype=np.int64))
    b.const("one", np.array(1, dtype=np.int64))
    b.const("last", np.array(-1, dtype=np.int64))
    b.node("Shape", ["tokens"], "shape")
    b.node("Gather", ["shape", "one"], "seq", axis=0)
    b.node("Unsqueeze", ["seq", b.const("axis0", np.zeros(1, dtype=np.int64))], "seq1")
    b.node("Concat", ["seq1", "seq1"], "seq2", axis=0)
    b.node("Slice", ["mask", "zero2", "seq2"], "mask_t")
    b.node("Slice", ["uniform", "zero2", "seq2"], "uniform_t")


def _embedding(b: _Builder, g: Graph) -> str:
    """The residual stream's input: the tokens' embeddings, plus the positions' when the model has them."""
    x = b.node("Gather", [b.const("table", g.table.stored), "tokens"], "embedded", axis=0)
    if g.positions is not None:
        start = b.const("start0", np.zeros(1, np.int64))
        b.node("Slice", [b.const("positions", g.positions.stored), start, "seq1"], "positions_t")
        x = b.node("Add", [x, "positions_t"], "x_in")
    return x


def _heads(b: _Builder, W, H: int, d: int, width: int, name: str, source: str, p: str) -> str:
    """``source @ W`` for every head at once, as ``(batch, H, T, width)``."""
    flat = b.const(p + name, W.transpose(1, 0, 2).reshape(d, H * width))
    b.node("MatMul", [source, flat], p + name + "_flat")
    shape = b.const(p + name + "_shape", np.array([0, 0, H, width], np.int64))
    b.node("Reshape", [p + name + "_flat", shape], p + name + "_split")
    return b.node("Transpose", [p + name + "_split"], p + name + "_heads", perm=[0, 2, 1, 3])


def _attention(b: _Builder, att, x: str, p: str) -> str:
    """One attention layer ``y = x + concat(a v) W_O`` (masked softmax of ``β·q kᵀ``, or uniform)."""
    H, d, d_v = att.W_V.stored.shape
    v = _heads(b, att.W_V.stored, H, d, d_v, "v", x, p)
    if att.W_Q is None:
        weights = "uniform_t"
    else:
        assert att.W_K is not None and att.factor is not None
        d_k = att.W_Q.stored.shape[2]
        q = _heads(b, att.W_Q.stored, H, d, d_k, "q", x, p)
        k = _heads(b, att.W_K.stored, H, d, d_k, "k", x, p)
        b.node("Transpose", [k], p + "kT", perm=[0, 1, 3, 2])
        b.node("MatMul", [q, p + "kT"], p + "dots")
        b.node("Mul", [p + "dots", b.const(p + "beta", att.factor.stored)], p + "scores")
        b.node("Add", [p + "scores", "mask_t"], p + "masked")
        weights = b.node("Softmax", [p + "masked"], p + "weights", axis=-1)
    b.node("MatMul", [weights, v], p + "z")
    b.node("Transpose", [p + "z"], p + "zT", perm=[0, 2, 1, 3])
    b.node("Reshape", [p + "zT", b.const(p + "z_shape", np.array([0, 0, H * d_v], np.int64))], p + "zcat")
    b.node("MatMul", [p + "zcat", b.const(p + "W_O", att.W_O.stored)], p + "attn")
    return b.node("Add", [x, p + "attn"], p + "y")


def _mlp(b: _Builder, mlp, y: str, p: str) -> str:
    """One MLP layer: ``x = y + (ReLU(y W1 + b1) W2 + b2)``."""
    b.node("MatMul", [y, b.const(p + "W1", mlp.W1.stored)], p + "pre0")
    b.node("Add", [p + "pre0", b.const(p + "b1", mlp.b1.stored)], p + "pre")
    b.node("Relu", [p + "pre"], p + "hidden")
    b.node("MatMul", [p + "hidden", b.const(p + "W2", mlp.W2.stored)], p + "out0")
    b.node("Add", [p + "out0", b.const(p + "b2", mlp.b2.stored)], p + "out")
    return b.node("Add", [y, p + "out"], p + "x")


def write(model: Model, folder: str, dtype, context: int) -> None:
    """Write ``model.onnx`` into ``folder`` (which exists).

    Parameters
    ----------
    model : Model
    folder : str
    dtype : numpy dtype
    context : int

    Raises
    ------
    InputError
        onnx missing, hard attention.
    """
    onnx, _, _ = _onnx()
    onnx.save(build(model, dtype, context), os.path.join(folder, FILE))


def runner(folder: str, dtype=None):
    """The folder's graph in an ONNX Runtime session (CPU), as a function tokens -> logits.

    Parameters
    ----------
    folder : str
    dtype : numpy dtype, optional
        Unused (the graph's types record it); the targets' common signature.

    Returns
    -------
    callable
    """
    ort = _runtime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(os.path.join(folder, FILE), options, providers=["CPUExecutionProvider"])

    def run(tokens: np.ndarray) -> np.ndarray:
        return session.run(["logits"], {"tokens": np.ascontiguousarray(tokens, dtype=np.int64)})[0]

    return run
