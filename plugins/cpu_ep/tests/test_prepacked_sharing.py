"""The CPU EP's Conv, Gemm and MatMul share what they prepack (``share_prepacked=True``): a second
session adopts the first one's packed weights, and every output is bit for bit what a session
without sharing computes; nodes whose attributes differ never share a packing."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession
from ep_host.threads import BlasThreads


def model_of(nodes, x_shape, initializers, output="y"):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, None)],
        [numpy_helper.from_array(a, name) for name, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def conv_model(rng):
    """Conv variants in a chain: im2col (7x7 stride 2), Winograd (3x3, 48 channels), 1x1,
    depthwise, and a second 3x3 on the same weight with other padding (not shared)."""
    w7 = rng.standard_normal((48, 3, 7, 7)).astype(np.float32)
    w3 = rng.standard_normal((48, 48, 3, 3)).astype(np.float32)
    w1 = rng.standard_normal((48, 48, 1, 1)).astype(np.float32)
    wd = rng.standard_normal((48, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w7", "b"], ["a"], pads=[3, 3, 3, 3], strides=[2, 2]),
        helper.make_node("Conv", ["a", "w3", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["c", "w1"], ["d"]),
        helper.make_node("Conv", ["d", "wd", "b"], ["e"], group=48, pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["e", "w3"], ["y"]),  # same weight, no padding
    ]
    return model_of(nodes, [1, 3, 32, 32], {"w7": w7, "w3": w3, "w1": w1, "wd": wd, "b": b})


def gemm_matmul_model(rng):
    """MatMul of a 3-D input by two constant weights, then Gemm with transB, alpha, beta, C."""
    initializers = {
        "b": rng.standard_normal((16, 24)).astype(np.float32),
        "b2": rng.standard_normal((24, 16)).astype(np.float32),
        "bt": rng.standard_normal((8, 16)).astype(np.float32),  # transB: (N, K)
        "c": rng.standard_normal(8).astype(np.float32),
        "shape": np.array([6, 16], np.int64),
    }
    nodes = [
        helper.make_node("MatMul", ["x", "b"], ["m"]),
        helper.make_node("MatMul", ["m", "b2"], ["m3"]),
        helper.make_node("Reshape", ["m3", "shape"], ["m2"]),
        helper.make_node("Gemm", ["m2", "bt", "c"], ["y"], transB=1, alpha=0.5, beta=0.25),
    ]
    return model_of(nodes, [2, 3, 16], initializers)


CASES = {"conv": (conv_model, (1, 3, 32, 32)), "gemm and matmul": (gemm_matmul_model, (2, 3, 16))}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_second_session_adopts_the_packing_and_computes_the_same_bits(rng, case):
    build, x_shape = CASES[case]
    model = build(rng)
    first = InferenceSession(model, providers=["cpu"], share_prepacked=True)
    second = InferenceSession(model, providers=["cpu"], share_prepacked=True)
    alone = InferenceSession(model, providers=["cpu"])
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = alone.run(None, {"x": x})[0]
    for session in (first, second, first):  # the first runs again on state the second used
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], want)
    offered = [u for u in first.prepacked if u.provider == "cpu"]
    assert offered and not any(u.adopted for u in offered)
    adopted = [u for u in second.prepacked if u.provider == "cpu"]
    assert [u.node for u in adopted] == [u.node for u in offered]
    assert all(u.adopted for u in adopted)
    assert [u.held for u in adopted] == [u.held for u in offered]
    for a, b in zip(first._plan.steps, second._plan.steps, strict=True):
        for name in ("packed", "packed_b", "packed_c"):
            if name in getattr(a.kernel, "kwargs", {}):
                assert b.kernel.kwargs[name] is a.kernel.kwargs[name], (a.name, name)


def test_the_same_weight_under_other_attributes_is_packed_apart(rng):
    first = InferenceSession(conv_model(rng), providers=["cpu"], share_prepacked=True)
    by_node = {u.node: u for u in first.prepacked}
    convs = [s for s in first._plan.steps if s.op == "ai.onnx::Conv" or s.op.endswith("Conv")]
    padded, unpadded = convs[1].name, convs[4].name
    assert by_node[padded].key != by_node[unpadded].key
    assert by_node[padded].held is not by_node[unpadded].held
    assert not by_node[unpadded].adopted


# -- workspaces -------------------------------------------------------------------------------


def strided_conv_model(rng):
    """Conv variants that compute in scratch memory on every run: 7x7 stride 2 (im2col by
    phases), 3x3 stride 2 (im2col), 1x1 stride 2 (a subsample), 3x3 stride 1 with 48 channels
    (Winograd); and 3x3 stride 1 to 16 (shifted views: no workspace asked)."""
    initializers = {
        "w7": rng.standard_normal((8, 3, 7, 7)).astype(np.float32),
        "w3": rng.standard_normal((16, 8, 3, 3)).astype(np.float32),
        "w1": rng.standard_normal((48, 16, 1, 1)).astype(np.float32),
        "wg": rng.standard_normal((48, 48, 3, 3)).astype(np.float32),
        "ws": rng.standard_normal((16, 48, 3, 3)).astype(np.float32),
        "b": rng.standard_normal(16).astype(np.float32),
        "b48": rng.standard_normal(48).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w7"], ["a"], pads=[3, 3, 3, 3], strides=[2, 2],
                         name="im2col_phases"),
        helper.make_node("Conv", ["a", "w3", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2],
                         name="im2col"),
        helper.make_node("Conv", ["c", "w1"], ["d"], strides=[2, 2], name="subsample"),
        helper.make_node("Conv", ["d", "wg", "b48"], ["e"], pads=[1, 1, 1, 1], name="winograd"),
        helper.make_node("Conv", ["e", "ws"], ["y"], pads=[1, 1, 1, 1], name="shifted"),
    ]
    return model_of(nodes, [2, 3, 80, 80], initializers), initializers


def test_copying_convs_run_in_the_hosts_workspace_with_the_same_bits(rng):
    from ep_host_cpu.xp import numpy_xp

    from ep_host.kernels.conv import conv

    model, w = strided_conv_model(rng)
    session = InferenceSession(model, providers=["cpu"])
    steps = {s.name: s for s in session._plan.steps}
    (arena, (device, size)), = session._plan.arenas.items()
    asked = {name: steps[name].workspace for name in steps}
    assert asked["shifted"] is None
    assert {asked[n][0] for n in ("im2col_phases", "im2col", "subsample", "winograd")} == {
        arena}
    # the columns: 2 x 3 x 49 x 40 x 40 floats, the largest of the three
    assert asked["im2col_phases"][1] == size == 2 * 3 * 49 * 40 * 40 * 4
    assert asked["im2col"][1] == 2 * 8 * 9 * 20 * 20 * 4
    assert asked["subsample"][1] == 2 * 16 * 10 * 10 * 4
    x = rng.standard_normal((2, 3, 80, 80)).astype(np.float32)
    got = session.run(None, {"x": x})[0]
    again = session.run(None, {"x": x})[0]  # the arena's garbage from the run before
    with BlasThreads(session.get_session_options().intra_op_num_threads):  # the session's
        a = conv(numpy_xp, x, w["w7"], auto_pad="NOTSET", group=1, pads=[3, 3, 3, 3],
                 strides=[2, 2])
        c = conv(numpy_xp, a, w["w3"], w["b"], auto_pad="NOTSET", group=1, pads=[1, 1, 1, 1],
                 strides=[2, 2])
        d = conv(numpy_xp, c, w["w1"], auto_pad="NOTSET", group=1, strides=[2, 2])
        e = conv(numpy_xp, d, w["wg"], w["b48"], auto_pad="NOTSET", group=1,
                 pads=[1, 1, 1, 1])
        want = conv(numpy_xp, e, w["ws"], auto_pad="NOTSET", group=1, pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(again, want)


def test_a_workspace_too_small_for_the_input_is_left_alone(rng):
    from ep_host_cpu.xp import numpy_xp

    from ep_host.kernels.conv import conv

    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float32)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    small = np.full(64, 7, np.uint8)
    got = conv(numpy_xp, x, w, auto_pad="NOTSET", group=1, strides=[2, 2], workspace=small)
    want = conv(numpy_xp, x, w, auto_pad="NOTSET", group=1, strides=[2, 2])
    np.testing.assert_array_equal(got, want)
    assert (small == 7).all()
    big = np.full(1 << 16, 7, np.uint8)
    got = conv(numpy_xp, x, w, auto_pad="NOTSET", group=1, strides=[2, 2], workspace=big)
    np.testing.assert_array_equal(got, want)
    assert (big != 7).any()  # it was used
