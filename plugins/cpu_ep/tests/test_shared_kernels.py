"""Nodes of one op with equal plain attributes share one kernel (a long chain makes one kernel
per op, not per node); nodes whose attributes differ in any way a kernel could see, or that
prepare constants, keep their own, and every node computes with its own attributes."""

from __future__ import annotations

import numpy as np
from cpukit import make_model
from onnx import TensorProto, helper, numpy_helper

import ep_host

F = TensorProto.FLOAT


def kernels(session):
    return [s.kernel for s in session._steps]


def test_a_chain_of_one_op_shares_one_kernel_per_attribute_set():
    nodes, prev = [], "x"
    for i in range(40):
        alpha = 0.5 if i % 2 else 0.25
        nodes.append(helper.make_node("LeakyRelu", [prev], [f"h{i}"], alpha=alpha, name=f"l{i}"))
        prev = f"h{i}"
    nodes.append(helper.make_node("Relu", [prev], ["y"], name="relu"))
    model = make_model(nodes, [("x", F, [4])], [("y", F, [4])])
    session = ep_host.InferenceSession(model.SerializeToString(), providers=["cpu"],
                                       optimizations=())
    made = kernels(session)
    assert len({id(k) for k in made}) == 3  # alpha 0.25, alpha 0.5, Relu
    assert made[0] is made[2] and made[1] is made[3] and made[0] is not made[1]
    x = np.array([-8.0, -1.0, 0.5, 3.0], np.float32)
    want = x.copy()
    for i in range(40):
        alpha = np.float32(0.5 if i % 2 else 0.25)
        want = np.where(want < 0, want * alpha, want)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum(want, 0))


def test_attributes_that_differ_only_in_sign_of_zero_or_type_are_not_shared():
    nodes = [helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.0, name="plus"),
             helper.make_node("LeakyRelu", ["a"], ["b"], alpha=-0.0, name="minus"),
             helper.make_node("Relu", ["b"], ["y"], name="relu")]
    model = make_model(nodes, [("x", F, [3])], [("y", F, [3])])
    session = ep_host.InferenceSession(model.SerializeToString(),
                                       providers=["cpu"], optimizations=())
    made = kernels(session)
    assert made[0] is not made[1]


def test_kernels_that_prepare_constants_are_not_shared():
    w = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 2, "w")
    v = numpy_helper.from_array(np.eye(3, dtype=np.float32) * 3, "v")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="m1"),
             helper.make_node("MatMul", ["a", "v"], ["y"], name="m2")]
    model = make_model(nodes, [("x", F, [1, 3])], [("y", F, [1, 3])], initializers=[w, v])
    session = ep_host.InferenceSession(model.SerializeToString(),
                                       providers=["cpu"], optimizations=())
    made = kernels(session)
    assert made[0] is not made[1]
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x * 6)


def test_a_sum_of_two_inputs_of_one_type_is_numpys_add_itself():
    # KernelSpec.direct_when: a Sum of two float32 (or float64) inputs calls xp.add with no
    # Python function between; three inputs, or float16 ones, keep Sum's own function; the
    # direct kernel and the other are not one shared kernel
    nodes = [helper.make_node("Sum", ["x", "x"], ["two"], name="two"),
             helper.make_node("Sum", ["two", "x", "x"], ["three"], name="three"),
             helper.make_node("Cast", ["three"], ["h"], to=TensorProto.FLOAT16, name="to16"),
             helper.make_node("Sum", ["h", "h"], ["y"], name="half")]
    model = make_model(nodes, [("x", F, [3])], [("y", TensorProto.FLOAT16, [3])])
    session = ep_host.InferenceSession(model.SerializeToString(), providers=["cpu"],
                                       optimizations=())
    by_name = {s.nodes[0].name: s.kernel for s in session._steps}
    assert by_name["two"].call is np.add
    assert by_name["three"].call is not np.add and by_name["half"].call is not np.add
    x = np.array([1.5, -2.0, 1e-3], np.float32)
    (y,) = session.run(None, {"x": x})
    want = ((x + x) + x + x).astype(np.float16)
    np.testing.assert_array_equal(y, want + want)
