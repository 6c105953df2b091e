"""Memory a session holds: the model as loaded is freed once optimized, so its weights (held
in its protobuf) are not held beside the optimized model's while the plan reads them."""

from __future__ import annotations

import gc

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession
from ep_host.loading import Model


def model_with_a_foldable_weight() -> bytes:
    """MatMul by a weight, then Add of a constant folded from two (so optimization rewrites
    the graph and makes a new model)."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 64)).astype(np.float32)
    one = np.ones(64, np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["one", "one"], ["two"]),
         helper.make_node("MatMul", ["x", "w"], ["y"]),
         helper.make_node("Add", ["y", "two"], ["z"])],
        "weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 64])],
        initializer=[numpy_helper.from_array(weight, "w"), numpy_helper.from_array(one, "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def models_as_written() -> list[Model]:
    """The live (not yet collected) models with the graph as written (three nodes)."""
    return [o for o in gc.get_objects() if isinstance(o, Model)
            and [n.op_type for n in o.graph.nodes] == ["Add", "MatMul", "Add"]]


def test_the_model_as_loaded_is_freed_once_optimized():
    data = model_with_a_foldable_weight()
    gc.collect()
    gc.disable()  # what is freed must be freed by the session itself, not by a collection here
    try:
        session = InferenceSession(data, providers=["cpu"])
        as_written = models_as_written()
    finally:
        gc.enable()
    assert session._model.optimizations  # the graph was rewritten: a new model
    assert len(session._model.graph.nodes) == 1
    assert as_written == []
    x = np.ones((2, 64), np.float32)
    (z,) = session.run(None, {"x": x})
    weight = numpy_helper.to_array(
        next(t for t in session._model.proto.graph.initializer if t.name == "w"))
    np.testing.assert_allclose(z, x @ weight + 2, rtol=1e-5)
