"""Ops nobody claims but that have a function body are expanded and the body is placed."""

import json
import subprocess
import sys

import numpy as np
import onnx
from hostkit import make_model
from onnx import TensorProto, helper

from ep_host import InferenceSession


def _local_function_model():
    # local.ScaledSwish(x; alpha) = x * sigmoid(alpha * x), written as a model-local function
    alpha = helper.make_node("Constant", [], ["a"], name="alpha_const")
    alpha.attribute.append(onnx.AttributeProto(name="value_float", ref_attr_name="alpha",
                                               type=onnx.AttributeProto.FLOAT))
    fn = helper.make_function(
        "local", "ScaledSwish", ["X"], ["Y"],
        [alpha,
         helper.make_node("Mul", ["X", "a"], ["ax"]),
         helper.make_node("Sigmoid", ["ax"], ["s"]),
         helper.make_node("Mul", ["X", "s"], ["Y"])],
        opset_imports=[helper.make_opsetid("", 17)], attributes=["alpha"])
    model = make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("ScaledSwish", ["r"], ["y"], domain="local", alpha=2.0, name="swish")],
        [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])],
        domains=[("local", 1)])
    model.functions.append(fn)
    return model


def test_a_model_local_function_is_expanded_placed_and_run():
    model = _local_function_model()
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    table = session.placement.table
    assert table.expanded["swish"][0].startswith("swish::")
    assert not table.answers["swish"]["cpu"].is_supported  # the op itself is declined
    placed = [n.name for n in session.placement.nodes]
    assert "swish" not in placed and any(n.startswith("swish::") for n in placed)
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    (y,) = session.run(None, {"x": x})
    r = np.maximum(x, 0)
    np.testing.assert_allclose(y, r / (1 + np.exp(-2.0 * r)), rtol=1e-6)


def test_a_schema_function_body_reads_the_nodes_inputs_and_writes_its_outputs():
    from ep_host.functions import expand_function
    from ep_host.loading import load_model

    model = make_model([helper.make_node("Celu", ["x"], ["y"], alpha=0.5, name="celu")],
                       [("x", TensorProto.FLOAT, [4])], [("y", TensorProto.FLOAT, [4])],
                       opset=13)
    node = load_model(model).graph.nodes[0]
    body = expand_function(node)
    assert body is not None and len(body.nodes) > 1
    assert all(n.name.startswith("celu::") for n in body.nodes)
    assert body.nodes[-1].outputs[0].name == "y"
    reads = {v.name for n in body.nodes for v in n.inputs if v is not None}
    assert "x" in reads and all(r == "x" or r.startswith("celu::") for r in reads)
    # alpha reached the body through an attribute reference
    assert any(0.5 in tuple(n.attributes.values()) or n.attributes.get("alpha") == 0.5
               or (n.op_type == "Constant" and n.outputs[0].value is not None
                   and float(n.outputs[0].value.ravel()[0]) == 0.5)
               for n in body.nodes)


def test_explain_shows_the_declined_op_and_its_expansion(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_local_function_model().SerializeToString())
    result = subprocess.run([sys.executable, "-m", "ep_host", "explain", str(path),
                             "--providers", "cpu"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "expanded into its function body" in result.stdout
    data = json.loads(subprocess.run(
        [sys.executable, "-m", "ep_host", "explain", str(path), "--providers", "cpu", "--json"],
        capture_output=True, text=True, timeout=120).stdout)
    assert data["expanded"]["swish"]["answers"]["cpu"]["supported"] is False
    assert data["expanded"]["swish"]["into"][0].startswith("swish::")
