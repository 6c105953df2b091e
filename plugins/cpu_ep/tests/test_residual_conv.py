"""A Conv whose output an Add sums with a value of its shape, then a Relu (a ResNet block's end):
one FusedConv with that value as its residual input Z, on every Conv variant, on numba's path
and numpy's (``EP_HOST_NUMBA=0``), against onnxruntime on the unfused graph; and the shapes
that are left alone."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import make_model, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession
from ep_host.tracing import Tracer

F = TensorProto.FLOAT

# (x shape, w shape, group, strides, pads, the variant): the residual is the block's input
# itself where the conv keeps its shape, else a second input of the output's shape
VARIANTS = [
    ((1, 16, 9, 9), (16, 16, 1, 1), 1, (1, 1), (0, 0, 0, 0), "1x1"),
    ((2, 8, 10, 10), (8, 8, 3, 3), 1, (1, 1), (1, 1, 1, 1), "shifted"),
    ((1, 64, 8, 8), (64, 64, 3, 3), 1, (1, 1), (1, 1, 1, 1), "winograd"),
    ((1, 3, 17, 17), (8, 3, 7, 7), 1, (2, 2), (3, 3, 3, 3), "im2col"),
    ((1, 24, 9, 9), (24, 1, 3, 3), 24, (1, 1), (1, 1, 1, 1), "direct"),
    ((1, 256, 2, 2), (256, 256, 3, 3), 1, (1, 1), (1, 1, 1, 1), "tapwise"),
]


def block(rng, x_shape, w_shape, group, strides, pads, bias=True, z_shape=None, z_first=False):
    w = rng.standard_normal(w_shape).astype(np.float32)
    b = rng.standard_normal(w_shape[0]).astype(np.float32)
    names = ["x", "w", "b"] if bias else ["x", "w"]
    conv = helper.make_node("Conv", names, ["c"], group=group, strides=list(strides),
                            pads=list(pads))
    add = helper.make_node("Add", ["z", "c"] if z_first else ["c", "z"], ["s"])
    relu = helper.make_node("Relu", ["s"], ["y"])
    x = rng.standard_normal(x_shape).astype(np.float32)
    z_shape = z_shape or _out_shape(x_shape, w_shape, strides, pads)
    z = rng.standard_normal(z_shape).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if bias
                                                 else [])
    model = make_model([conv, add, relu], [("x", F, list(x_shape)), ("z", F, list(z_shape))],
                       [("y", F, None)], opset=17, initializers=inits)
    return model, {"x": x, "z": z}


def _out_shape(x_shape, w_shape, strides, pads):
    n = len(x_shape) - 2
    return (x_shape[0], w_shape[0]) + tuple(
        (x_shape[2 + i] + pads[i] + pads[i + n] - w_shape[2 + i]) // strides[i] + 1
        for i in range(n))


def fused_nodes(session):
    return [n.qualified_op for n in session.placement.table.nodes]


@pytest.mark.parametrize("numba", ["1", "0"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "pads", "variant"), VARIANTS)
def test_conv_add_relu_is_one_fused_conv_on_every_variant(rng, monkeypatch, numba, bias,
                                                          x_shape, w_shape, group, strides,
                                                          pads, variant):
    monkeypatch.setenv("EP_HOST_NUMBA", numba)
    model, feeds = block(rng, x_shape, w_shape, group, strides, pads, bias, z_first=bias)
    tracer = Tracer()
    session = InferenceSession(model.SerializeToString(), providers=["cpu"], trace=tracer)
    assert session.model.optimizations.get("conv_activation_fusion") == 1
    assert fused_nodes(session) == ["com.microsoft::FusedConv"]
    (got,) = session.run(None, feeds)
    (want,) = run_onnxruntime(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert got.min() >= 0  # the Relu after the sum
    variants = {e["args"].get("kernel_variant") for e in tracer.events if e["cat"] == "node"}
    assert variant in variants or (variant == "direct" and numba == "0")


@pytest.mark.parametrize("case", ["broadcast", "read twice", "no relu"])
def test_other_shapes_are_left_alone(rng, case):
    x_shape, w_shape = (1, 8, 6, 6), (8, 8, 1, 1)
    if case == "broadcast":  # a per-channel Add broadcasts: not a residual of the output's shape
        model, feeds = block(rng, x_shape, w_shape, 1, (1, 1), (0,) * 4, z_shape=(1, 8, 1, 1))
    else:
        model, feeds = block(rng, x_shape, w_shape, 1, (1, 1), (0,) * 4)
        if case == "read twice":  # the conv's output is a graph output too
            model.graph.output.append(helper.make_tensor_value_info("c", F, None))
        else:
            model.graph.node[2].op_type = "Sigmoid"
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert "com.microsoft::FusedConv" not in fused_nodes(session)
    got = session.run(None, feeds)
    want = run_onnxruntime(model, feeds)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_a_fused_conv_with_a_residual_of_another_shape_fails_with_both_shapes(rng):
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    w = numpy_helper.from_array(rng.standard_normal((6, 4, 1, 1)).astype(np.float32), "w")
    node = helper.make_node("FusedConv", ["x", "w", "", "z"], ["y"], domain="com.microsoft",
                            activation="Relu")
    model = make_model([node], [("x", F, [1, 4, 5, 5]), ("z", F, None)], [("y", F, None)],
                       opset=17, initializers=[w], domains=[("com.microsoft", 1)])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    with pytest.raises(Exception, match=r"residual has shape \(1, 6, 5, 1\).*\(1, 6, 5, 5\)"):
        session.run(None, {"x": x, "z": np.zeros((1, 6, 5, 1), np.float32)})
