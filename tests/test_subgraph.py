"""Parts of a graph as standalone models: one node, or a group of nodes with its boundary,
load and run in onnxruntime with the same results as the whole model."""

import numpy as np
import onnx
from hostkit import make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import PartitionView, load_model, node_model

F = TensorProto.FLOAT


def conv_relu_add():
    w = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    return make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "c"], ["y"], name="add")],
        [("x", F, [1, 3, 8, 8])], [("y", F, [1, 4, 8, 8])], initializers=[w])


def ort_run(model, feeds):
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def test_one_node_becomes_a_model_with_its_weights_as_initializers():
    model = load_model(conv_relu_add())
    conv = model.graph.nodes[0]
    standalone = node_model(conv)
    onnx.checker.check_model(standalone)
    assert [i.name for i in standalone.graph.input] == ["x"]
    assert [i.name for i in standalone.graph.initializer] == ["w"]
    assert [o.name for o in standalone.graph.output] == ["c"]
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    (c,) = ort_run(standalone, {"x": x})
    whole = helper.make_model(conv_relu_add().graph, opset_imports=conv_relu_add().opset_import)
    whole.graph.output.append(helper.make_tensor_value_info("c", F, [1, 4, 8, 8]))
    np.testing.assert_allclose(c, ort_run(whole, {"x": x})[1], rtol=1e-6)


def test_a_group_keeps_its_boundary_in_the_order_given():
    model = load_model(conv_relu_add())
    conv, relu, add = model.graph.nodes
    values = model.graph.values
    part = PartitionView("p", "mine", [relu, add], [values["c"]], [values["y"], values["r"]], [])
    standalone = part.to_model()
    onnx.checker.check_model(standalone)
    assert [i.name for i in standalone.graph.input] == ["c"]
    assert [o.name for o in standalone.graph.output] == ["y", "r"]
    c = np.random.default_rng(2).standard_normal((1, 4, 8, 8)).astype(np.float32)
    y, r = ort_run(standalone, {"c": c})
    np.testing.assert_array_equal(r, np.maximum(c, 0))
    np.testing.assert_array_equal(y, np.maximum(c, 0) + c)
