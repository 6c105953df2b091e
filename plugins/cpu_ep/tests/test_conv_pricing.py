"""Convolutions are priced at the speed this EP measured for their kind (``conv_kind``): a
depthwise convolution is not priced as if it ran at GEMM speed."""

import dataclasses

import numpy as np
import pytest
from ep_host_cpu import profile, provider
from onnx import TensorProto, helper, numpy_helper

from ep_host import load_model
from ep_host.kernels import CONV_CASES, REGISTRY, conv_kind, conv_speeds


def conv_node(c: int, m: int, window: int, group: int = 1, stride: int = 1, hw: int = 28):
    w = numpy_helper.from_array(np.zeros((m, c // group, window, window), np.float32), "w")
    out = (hw + 2 * (window // 2) - window) // stride + 1
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[window, window],
                          group=group, strides=[stride, stride], pads=[window // 2] * 4)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, out, out])],
        initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return load_model(model.SerializeToString()).graph.nodes[0]


@pytest.mark.parametrize("args, kind", [
    ((64, 64, 3), "dense"), ((64, 256, 1), "pointwise"), ((64, 64, 1, 1, 2), "dense"),
    ((32, 32, 3, 32), "grouped"), ((32, 64, 3, 4), "grouped"), ((3, 64, 7, 1, 2), "dense")])
def test_conv_kind(args, kind):
    node = conv_node(*args)
    assert conv_kind(REGISTRY.lookup(node, "test"), node) == kind


def test_conv_kind_is_none_outside_convolutions():
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    node = load_model(helper.make_model(graph).SerializeToString()).graph.nodes[0]
    assert conv_kind(REGISTRY.lookup(node, "test"), node) is None


def test_conv_speeds_is_the_geometric_mean_per_kind():
    # every case timed at flops / 10 GFLOP/s, except the first dense case at 40 GFLOP/s
    first = CONV_CASES[0]
    speeds = conv_speeds(lambda case: case.flops / ((40 if case is first else 10) * 1e9))
    dense = [c for c in CONV_CASES if c.kind == "dense"]
    assert speeds["dense"] == pytest.approx(10 * 4 ** (1 / len(dense)))
    assert speeds["pointwise"] == pytest.approx(10) and speeds["grouped"] == pytest.approx(10)


def test_each_kind_is_priced_at_its_measured_speed(monkeypatch):
    measured = profile.MachineProfile(peak_gflops=100.0, bandwidth_gbps=1e9, dispatch_us=0.0,
                                      dense_conv_gflops=50.0, pointwise_conv_gflops=80.0,
                                      grouped_conv_gflops=5.0)
    monkeypatch.setattr(provider, "machine_profile", lambda: measured)
    for args, speed in (((64, 64, 3), 50.0), ((64, 256, 1), 80.0), ((64, 64, 3, 64), 5.0)):
        node = conv_node(*args)
        spec = REGISTRY.lookup(node, "test")
        cost = provider.CLAIMS.answer(spec, node).cost
        assert cost.compute_us == pytest.approx(spec.flops(node) / (speed * 1e3))


def test_an_unmeasured_kind_falls_back_to_peak():
    old = profile.MachineProfile(peak_gflops=90.0, bandwidth_gbps=10.0, dispatch_us=1.0)
    assert old.conv_gflops("grouped") == 90.0 and old.conv_gflops(None) == 90.0
    assert dataclasses.replace(old, grouped_conv_gflops=4.0).conv_gflops("grouped") == 4.0



@pytest.mark.parametrize(("switch", "variant"), [("1", "direct"), ("0", "depthwise")])
def test_the_grouped_cases_are_timed_on_the_variant_a_session_runs(monkeypatch, switch,
                                                                     variant):
    from ep_host.tracing import Tracer

    monkeypatch.setenv("EP_HOST_NUMBA", switch)
    case = next(c for c in CONV_CASES if c.kind == "grouped" and c.w_shape[2] == 5)
    tracer = Tracer()
    with tracer.span("case") as span:
        assert profile.time_conv(case) > 0
    assert span.args["kernel_variant"] == variant  # numba's, else numpy's


def test_the_profile_is_kept_apart_with_and_without_numba(monkeypatch):
    keys = set()
    for switch in ("1", "0"):
        monkeypatch.setenv("EP_HOST_NUMBA", switch)
        keys.add(profile._machine_key())
    assert len(keys) == 2
