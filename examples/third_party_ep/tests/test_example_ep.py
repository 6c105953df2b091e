"""The example EP: its FastSwish result, where placement puts custom_op.onnx's nodes, its decline
reasons, its discovery through the entry point, and custom_op.onnx against onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

import ep_host

provider = pytest.importorskip(
    "ep_host_example.provider", reason="install it: pip install -e examples/third_party_ep"
)

CUSTOM_OP_MODEL = Path(__file__).resolve().parents[2] / "custom_op.onnx"


def one_node(op_type, dtype=np.float32, domain="", version=1, **attrs):
    """One node ``x -> y`` on a float 2x3 input (model bytes); a custom op's output undeclared."""
    from ep_host.testing.kit import one_node_model

    model = one_node_model(op_type, {"x": (dtype, [2, 3])}, domain=domain,
                           domain_version=version, **attrs)
    return model.SerializeToString()


def example_answer(model_bytes):
    """The example EP's answer for the model's only node, asked through its hook directly."""
    model = ep_host.load_model(model_bytes)
    context = ep_host.ProviderContext(provider="example", opset_imports=model.opset_imports)
    try:
        return provider.ep_host_supports_op(node=model.graph.nodes[0], context=context)
    except ep_host.Decline as decline:
        return ep_host.KernelMatch.unsupported(decline.reason, decline.code)


# -- computing -----------------------------------------------------------------------------------


def swish64(x):
    x64 = x.astype(np.float64)
    return (x64 / (1 + np.exp(-x64))).astype(np.float32)


def test_fast_swish_matches_formula(custom_op_model, assert_matches_reference, ep_session):
    x = np.array([[-100.0, -5.0, -0.5], [0.0, 0.5, 100.0]], np.float32)
    model = custom_op_model("com.example", "FastSwish", {"x": x})
    (y,) = assert_matches_reference(model, {"x": x}, reference=swish64, rtol=1e-6)
    assert y.dtype == np.float32
    assert ep_session(model).placement.by_node["node"].provider == "example"


@pytest.mark.parametrize("op_type", ["Relu", "Sigmoid"])
def test_standard_ops_match_onnx_reference(op_type, one_node_model, assert_matches_reference,
                                           ep_session):
    model = one_node_model(op_type, {"x": (np.float32, [4, 5])})
    assert_matches_reference(model)
    assert ep_session(model).placement.by_node["node"].provider == "example"


# -- placement -----------------------------------------------------------------------------------


@pytest.fixture
def custom_op_session(ep_session):
    return ep_session(str(CUSTOM_OP_MODEL), also=["cpu"])


def test_fast_swish_goes_to_example_and_the_rest_to_cpu(custom_op_session):
    where = {name: p.provider for name, p in custom_op_session.placement.by_node.items()}
    assert where == {
        "dense/MatMul": "cpu",
        "act/FastSwish": "example",
        "dense/Add": "cpu",
        "out/Relu": "cpu",
    }


def test_example_claims_relu_but_loses_on_cost(custom_op_session):
    table = custom_op_session.placement.table
    ours, cpus = table.answer("out/Relu", "example"), table.answer("out/Relu", "cpu")
    assert ours.is_supported and cpus.is_supported
    assert ours.cost.total_us > cpus.cost.total_us
    assert not table.answer("act/FastSwish", "cpu").is_supported


def test_custom_op_model_matches_onnxruntime(custom_op_session):
    ort = pytest.importorskip("onnxruntime")
    # onnxruntime has no FastSwish: give it the same model with Sigmoid and Mul in its place.
    model = onnx.load(CUSTOM_OP_MODEL)
    nodes = list(model.graph.node)
    i = next(k for k, n in enumerate(nodes) if n.op_type == "FastSwish")
    x, y = nodes[i].input[0], nodes[i].output[0]
    nodes[i:i + 1] = [
        helper.make_node("Sigmoid", [x], ["swish_gate"]),
        helper.make_node("Mul", [x, "swish_gate"], [y]),
    ]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.opset_import[1:]
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {"x": np.random.default_rng(0).standard_normal((3, 32)).astype(np.float32) * 3}
    (ours,) = custom_op_session.run(None, feed)
    (theirs,) = reference.run(None, feed)
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape == (3, 32)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


# -- declining ---------------------------------------------------------------------------------


def test_declines_ops_it_does_not_run(custom_op_session):
    answer = custom_op_session.placement.table.answer("dense/MatMul", "example")
    assert not answer.is_supported
    assert answer.code == "op"
    assert answer.reason.startswith("MatMul: the example EP runs only com.example::FastSwish")
    assert "another provider" in answer.reason


def test_declines_float64_with_dtype_code():
    answer = example_answer(one_node("Relu", dtype=np.float64))
    assert not answer.is_supported
    assert answer.code == "dtype"
    assert "takes float32 input, got float64" in answer.reason


def test_declines_other_custom_opset_with_opset_code():
    model = one_node("FastSwish", domain="com.example", version=2)
    answer = example_answer(model)
    assert not answer.is_supported
    assert answer.code == "opset"
    assert "resolves to version 2; the example EP implements 1" in answer.reason


def test_declines_fast_swish_with_attributes():
    model = one_node("FastSwish", domain="com.example", beta=2.0)
    answer = example_answer(model)
    assert (answer.is_supported, answer.code) == (False, "attribute")
    assert "beta" in answer.reason


def test_claims_float32_sigmoid():
    answer = example_answer(one_node("Sigmoid"))
    assert answer.is_supported
    assert answer.cost.total_us >= provider.LAUNCH_US


# -- discovery -----------------------------------------------------------------------------------


def test_discovered_through_its_entry_point():
    host = ep_host.Host.discover(["example"])
    record = host.records["example"]
    assert record.status == "available", record.fault
    assert record.distribution == "ep-host-example"
    assert record.entry_point == "ep_host_example.provider"
    assert record.plugin is provider
    assert set(record.hooks) == {
        "ep_host_provider_info", "ep_host_supports_op", "ep_host_create_kernel",
        "ep_host_infer_types",
    }


# -- declared types ------------------------------------------------------------------------------


def test_fast_swish_declares_its_output_so_a_later_relu_is_typed(ep_session):
    """Without the declaration, the Relu after FastSwish has an input of unknown type, which the
    example EP declines ("the type of its input is unknown"); declared, the example EP claims
    it and the output has FastSwish's input's type and shape."""
    model = helper.make_model(helper.make_graph(
        [helper.make_node("FastSwish", ["x"], ["s"], name="swish", domain="com.example"),
         helper.make_node("Relu", ["s"], ["y"], name="relu")],
        "swish_relu", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n", 4])],
        [onnx.ValueInfoProto(name="y")]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    model.ir_version = 8
    session = ep_session(model)
    relu = session.placement.table.answer("relu", "example")
    assert relu.is_supported, relu.reason
    [y] = session.get_outputs()
    assert (y.type, y.shape) == ("tensor(float)", ["n", 4])
    x = np.linspace(-3, 3, 8, dtype=np.float32).reshape(2, 4)
    (out,) = session.run(None, {"x": x})
    np.testing.assert_allclose(out, np.maximum(swish64(x), 0), rtol=1e-6)
