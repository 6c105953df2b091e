"""Invalid models are refused, not computed: control-flow bodies whose output counts do not
fit, Scans over inputs of different lengths, a domain imported twice, attributes and counts the
op's schema does not allow. Sparse initializers are densified, or refused saying why.
Where onnxruntime's verdict is the reference, each case is checked against it too.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ep_host import InferenceSession, load_model
from ep_host.errors import HostError, ModelValidationError

F = TensorProto.FLOAT
vi = helper.make_tensor_value_info


def _model(nodes, inputs, outputs, inits=(), opsets=(("", 17),), sparse=()):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    g.sparse_initializer.extend(sparse)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    m.ir_version = 8
    return m


def _refused_by_onnxruntime(m) -> bool:
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception:
        return True
    return False


def _refused(m, *words):
    with pytest.raises(ModelValidationError) as info:
        load_model(m.SerializeToString())
    text = str(info.value)
    for word in words:
        assert word in text, text
    return text


def _body(name, outputs, inputs=(), nodes=None):
    nodes = nodes if nodes is not None else [
        helper.make_node("Neg", ["x"], [o]) for o in outputs]
    return helper.make_graph(nodes, name, list(inputs), [vi(o, F, [2]) for o in outputs])


def _if(then_outputs, else_outputs, node_outputs):
    node = helper.make_node("If", ["c"], node_outputs, name="the_if",
                            then_branch=_body("then", then_outputs),
                            else_branch=_body("else", else_outputs))
    return _model([node], [vi("x", F, [2]), vi("c", TensorProto.BOOL, [])],
                  [vi(o, F, [2]) for o in node_outputs])


# -- If, Loop and Scan bodies -----------------------------------------------------------------


@pytest.mark.parametrize("then_outputs, else_outputs, node_outputs", [
    (["t1", "t2"], ["e1"], ["y"]),        # branches differ
    (["t1"], ["e1", "e2"], ["y"]),        # branches differ the other way
    (["t1"], ["e1"], ["y", "z"]),         # branches agree, the node wants more
    (["t1", "t2"], ["e1", "e2"], ["y"]),  # branches agree, the node wants fewer
])
def test_an_if_whose_output_counts_do_not_fit_is_refused(then_outputs, else_outputs,
                                                         node_outputs):
    m = _if(then_outputs, else_outputs, node_outputs)
    assert _refused_by_onnxruntime(m)
    _refused(m, "'the_if'", "If", "outputs")


def test_an_if_whose_counts_fit_runs():
    m = _if(["t1"], ["e1"], ["y"])
    s = InferenceSession(m.SerializeToString(), providers=["cpu"])
    x = np.array([1.0, -2.0], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x, "c": np.array(True)})[0], -x)


def test_a_loop_whose_body_output_count_does_not_fit_is_refused():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "v_in"], ["v_out"])],
        "body", [vi("i", TensorProto.INT64, []), vi("cond_in", TensorProto.BOOL, []),
                 vi("v_in", F, [2])],
        [vi("cond_out", TensorProto.BOOL, [])])  # the carried v_out is missing
    node = helper.make_node("Loop", ["n", "", "v"], ["v_final"], name="the_loop", body=body)
    m = _model([node], [vi("n", TensorProto.INT64, []), vi("v", F, [2])], [vi("v_final", F, [2])])
    assert _refused_by_onnxruntime(m)
    _refused(m, "'the_loop'", "Loop", "body")


def test_a_loop_whose_body_input_count_does_not_fit_is_refused():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["v_in", "v_in"], ["v_out"])],
        "body", [vi("cond_in", TensorProto.BOOL, []), vi("v_in", F, [2])],  # no iteration number
        [vi("cond_out", TensorProto.BOOL, []), vi("v_out", F, [2])])
    node = helper.make_node("Loop", ["n", "", "v"], ["v_final"], name="the_loop", body=body)
    m = _model([node], [vi("n", TensorProto.INT64, []), vi("v", F, [2])], [vi("v_final", F, [2])])
    assert _refused_by_onnxruntime(m)
    _refused(m, "'the_loop'", "Loop", "body")


def _scan(x_shape, z_shape, body_outputs=("s",)):
    body = helper.make_graph([helper.make_node("Add", ["a", "b"], list(body_outputs))], "body",
                             [vi("a", F, [2]), vi("b", F, [2])],
                             [vi(o, F, [2]) for o in body_outputs])
    node = helper.make_node("Scan", ["x", "z"], ["y"], name="the_scan", body=body,
                            num_scan_inputs=2)
    return _model([node], [vi("x", F, x_shape), vi("z", F, z_shape)], [vi("y", F, None)])


def test_a_scan_whose_body_output_count_does_not_fit_is_refused():
    m = _scan([3, 2], [3, 2], body_outputs=("s", "t"))
    _refused(m, "'the_scan'", "Scan", "body")


@pytest.mark.parametrize("x_shape, z_shape", [([3, 2], [4, 2]), ([1, 2], [5, 2])])
def test_a_scan_over_inputs_of_known_different_lengths_is_refused_at_load(x_shape, z_shape):
    m = _scan(x_shape, z_shape)
    assert _refused_by_onnxruntime(m)
    _refused(m, "'the_scan'", "Scan", "length")


@pytest.mark.parametrize("x_len, z_len", [(3, 4), (5, 1)])
def test_a_scan_over_inputs_of_different_lengths_fails_at_run_time(x_len, z_len):
    m = _scan(["n", 2], ["k", 2])
    s = InferenceSession(m.SerializeToString(), providers=["cpu"])
    feed = {"x": np.ones((x_len, 2), np.float32), "z": np.ones((z_len, 2), np.float32)}
    with pytest.raises(HostError) as info:
        s.run(None, feed)
    assert "the_scan" in str(info.value) and "length" in str(info.value)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    refused = False
    try:
        session.run(None, feed)
    except Exception:  # onnxruntime raises its own Fail/InvalidArgument classes
        refused = True
    assert refused  # onnxruntime refuses too


def test_a_scan_over_inputs_of_equal_lengths_runs():
    m = _scan(["n", 2], ["n", 2])
    s = InferenceSession(m.SerializeToString(), providers=["cpu"])
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    np.testing.assert_array_equal(s.run(None, {"x": x, "z": x})[0], x + x)


# -- opset_import ------------------------------------------------------------------------------


@pytest.mark.parametrize("opsets, domain", [
    ((("", 17), ("", 13)), "ai.onnx"),
    ((("", 17), ("ai.onnx", 16)), "ai.onnx"),
    ((("", 17), ("ai.onnx.ml", 3), ("ai.onnx.ml", 2)), "ai.onnx.ml"),
])
def test_a_domain_imported_twice_at_two_versions_is_refused(opsets, domain):
    m = _model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [vi("x", F, [2])],
               [vi("y", F, [2])], opsets=opsets)
    _refused(m, "opset_import", repr(domain), "twice")


@pytest.mark.parametrize("opsets", [(("", 17), ("", 17)), (("", 17), ("ai.onnx", 17))])
def test_a_domain_imported_twice_at_one_version_runs(opsets):
    """skl2onnx 1.20 writes the default domain twice when given its opset; onnxruntime runs
    such a model."""
    m = _model([helper.make_node("Add", ["x", "x"], ["y"], name="add")], [vi("x", F, [2])],
               [vi("y", F, [2])], opsets=opsets)
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(
        InferenceSession(m.SerializeToString(), providers=["cpu"]).run(None, {"x": x})[0], x + x)


# -- attributes and counts the schema does not allow ----------------------------------------------


@pytest.mark.parametrize("node, opset, words", [
    (helper.make_node("ReduceSum", ["x"], ["y"], name="rs", axes=[0]), 13,
     ["'rs'", "ReduceSum-13", "'axes'"]),
    (helper.make_node("ReduceSum", ["x"], ["y"], name="rs", axes=[0]), 18,
     ["'rs'", "ReduceSum-13", "'axes'"]),
    (helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=0.5), 17,
     ["'relu'", "Relu-14", "'alpha'"]),
    (helper.make_node("Cast", ["x"], ["y"], name="cast"), 17,
     ["'cast'", "Cast-13", "requires", "'to'"]),
    (helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1.5), 17,
     ["'sm'", "Softmax-13", "'axis'", "INT"]),
    (helper.make_node("Relu", ["x", "x"], ["y"], name="relu2"), 17,
     ["'relu2'", "Relu-14", "2 inputs"]),
    (helper.make_node("Relu", ["x"], ["y", "z"], name="relu3"), 17,
     ["'relu3'", "Relu-14", "2 outputs"]),
])
def test_a_node_the_schema_does_not_allow_is_refused(node, opset, words):
    m = _model([node], [vi("x", F, [2, 3])], [vi("y", F, None)], opsets=(("", opset),))
    assert _refused_by_onnxruntime(m)
    _refused(m, *words)


def test_a_node_after_valid_nodes_of_its_op_is_still_checked():
    """Attribute-less nodes of one op and counts are checked once: one with other counts, or
    one that has an attribute, after them is refused all the same."""
    relus = [helper.make_node("Relu", ["x"], [f"r{i}"], name=f"relu{i}") for i in range(3)]
    extra = helper.make_node("Relu", ["r2", "r1"], ["y"], name="relu_two")
    m = _model([*relus, extra], [vi("x", F, [2, 3])], [vi("y", F, None)])
    _refused(m, "'relu_two'", "Relu-14", "2 inputs")
    tagged = helper.make_node("Relu", ["r2"], ["y"], name="relu_alpha", alpha=0.5)
    _refused(_model([*relus, tagged], [vi("x", F, [2, 3])], [vi("y", F, None)]),
             "'relu_alpha'", "'alpha'")


def test_a_node_after_valid_nodes_of_its_attributes_is_still_checked():
    """Nodes of one op, counts and attribute names and types are checked once: one whose
    attribute has another type, or that lacks a required one, after them is refused."""
    def flatten(name, **attrs):
        return helper.make_node("Flatten", ["x"], [name], name=name, **attrs)

    good = [flatten(f"f{i}", axis=1) for i in range(3)]
    outputs = [vi(f"f{i}", F, None) for i in range(3)]
    bad_type = helper.make_node("Flatten", ["x"], ["y"], name="flat_float")
    bad_type.attribute.append(helper.make_attribute("axis", 1.5))
    m = _model([*good, bad_type], [vi("x", F, [2, 3])], [*outputs, vi("y", F, None)])
    assert _refused_by_onnxruntime(m)
    _refused(m, "'flat_float'", "'axis'", "FLOAT")
    casts = [helper.make_node("Cast", ["x"], [f"c{i}"], name=f"c{i}", to=F) for i in range(2)]
    bare = helper.make_node("Cast", ["x"], ["y"], name="cast_bare")
    m = _model([*casts, bare], [vi("x", F, [2, 3])],
               [vi("c0", F, None), vi("c1", F, None), vi("y", F, None)])
    _refused(m, "'cast_bare'", "'to'")


def test_reduce_sum_11_with_an_axes_attribute_runs():
    m = _model([helper.make_node("ReduceSum", ["x"], ["y"], name="rs", axes=[0], keepdims=0)],
               [vi("x", F, [2, 3])], [vi("y", F, None)], opsets=(("", 11),))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = InferenceSession(m.SerializeToString(), providers=["cpu"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, x.sum(axis=0))


def test_an_attribute_in_a_body_is_checked_too():
    then = _body("then", ["t"], nodes=[helper.make_node("Neg", ["x"], ["t"], name="neg", k=1)])
    node = helper.make_node("If", ["c"], ["y"], name="the_if", then_branch=then,
                            else_branch=_body("else", ["e"]))
    m = _model([node], [vi("x", F, [2]), vi("c", TensorProto.BOOL, [])], [vi("y", F, [2])])
    assert _refused_by_onnxruntime(m)
    _refused(m, "'neg'", "Neg-13", "'k'")


# -- sparse initializers ---------------------------------------------------------------------------


def _sparse_model(values, indices, dims, dtype=F, out_dtype=F):
    sp = helper.make_sparse_tensor(
        helper.make_tensor("w", dtype, [len(values)], values),
        helper.make_tensor("w_indices", TensorProto.INT64, list(np.shape(indices)),
                           np.asarray(indices).ravel().tolist()),
        dims)
    node = helper.make_node("Add", ["x", "w"], ["y"], name="add")
    return _model([node], [vi("x", dtype, dims)], [vi("y", out_dtype, dims)], sparse=[sp])


@pytest.mark.parametrize("values, indices, dims, dtype", [
    ([5.0, 7.0], [1, 4], [2, 3], F),                       # linear indices
    ([5.0, 7.0, 9.0], [[0, 0], [1, 1], [1, 2]], [2, 3], F),  # one row of coordinates per value
    ([3, -4], [0, 5], [6], TensorProto.INT64),               # dtype kept
    ([2.5], [[1, 0, 1]], [2, 2, 2], TensorProto.DOUBLE),
])
def test_a_sparse_initializer_is_densified(values, indices, dims, dtype):
    m = _sparse_model(values, indices, dims, dtype, dtype)
    dt = helper.tensor_dtype_to_np_dtype(dtype)
    x = np.ones(dims, dt)
    got = InferenceSession(m.SerializeToString(), providers=["cpu"]).run(None, {"x": x})[0]
    dense = np.zeros(dims, dt)
    idx = np.asarray(indices)
    flat = idx if idx.ndim == 1 else np.ravel_multi_index(tuple(idx.T), dims)
    dense.reshape(-1)[flat] = values
    np.testing.assert_array_equal(got, x + dense)
    assert got.dtype == dt
    want = ort.InferenceSession(m.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("values, indices, dims, words", [
    ([5.0], [6], [2, 3], ["sparse", "'w'", "index"]),             # linear index past the end
    ([5.0], [[2, 0]], [2, 3], ["sparse", "'w'", "index"]),        # coordinate past its dim
    ([5.0], [-1], [2, 3], ["sparse", "'w'", "index"]),
    ([5.0, 6.0], [1, 1], [2, 3], ["sparse", "'w'", "twice"]),     # one position twice
    ([5.0, 6.0], [1], [2, 3], ["sparse", "'w'", "indices"]),      # counts disagree
    ([5.0], [0], [2**40, 2**20], ["sparse", "'w'", "dense"]),     # too big to densify
])
def test_a_sparse_initializer_that_cannot_be_densified_is_refused(values, indices, dims, words):
    m = _sparse_model(values, indices, dims)
    with pytest.raises(ModelValidationError) as info:
        InferenceSession(m.SerializeToString(), providers=["cpu"])
    for word in words:
        assert word in str(info.value), str(info.value)
