"""The constant folds computed directly with numpy (ep_host.fold_direct) give what onnx's
reference evaluator gives, and leave every case outside their narrow rules to it."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from ep_host import InferenceSession
from ep_host.fold_direct import DIRECT, fold_directly

RNG = np.random.default_rng(0)


def reference(node, inputs, opset):
    names = [f"in{i}" for i in range(len(inputs))]
    probe = helper.make_node(node.op_type, names, ["out"],
                             **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    graph = helper.make_graph(
        [probe], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in zip(names, inputs, strict=True)],
        [helper.make_tensor_value_info("out", TensorProto.UNDEFINED, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    with np.errstate(all="ignore"):  # a float division by zero gives inf, as it should
        return np.asarray(ReferenceEvaluator(model).run(
            None, dict(zip(names, inputs, strict=True)))[0])


def ints(*shape, low=-50, high=50, dtype=np.int64):
    return RNG.integers(low, high, shape).astype(dtype)


CASES = [
    ("Identity", {}, [RNG.standard_normal((3, 4)).astype(np.float32)], 17),
    ("Add", {}, [ints(2, 3), ints(3)], 17),
    ("Add", {}, [np.array(np.iinfo(np.int64).max), np.array(1)], 17),  # wraps
    ("Sub", {}, [RNG.standard_normal((2, 1)).astype(np.float16),
                 RNG.standard_normal((1, 5)).astype(np.float16)], 17),
    ("Mul", {}, [ints(4, dtype=np.int32), ints(1, dtype=np.int32)], 17),
    ("Mul", {}, [np.array(3.5), np.array([1.0, -2.0])], 17),
    ("Div", {}, [RNG.standard_normal(5).astype(np.float32),
                 np.array([1, 0, -2, 3, 0.5], np.float32)], 17),
    ("Div", {}, [ints(6, low=0), ints(6, low=1, high=7)], 17),
    ("Sqrt", {}, [np.array([4.0, 2.0, 0.0, 9.0], np.float32)], 17),
    ("Gather", {"axis": 0}, [ints(4, 3), np.array([0, -1, 2], np.int64)], 17),
    ("Gather", {"axis": -1}, [ints(2, 5), np.array([[4, 0], [-5, 1]], np.int32)], 17),
    ("Gather", {}, [np.array([1, 3, 224, 224], np.int64), np.array(1, np.int64)], 17),
    ("Unsqueeze", {}, [ints(3, 2), np.array([0, -1], np.int64)], 17),
    ("Unsqueeze", {"axes": [0, 2]}, [ints(3)], 11),
    ("Concat", {"axis": 0}, [ints(1), ints(2), ints(1)], 17),
    ("Concat", {"axis": -1}, [ints(2, 1).astype(np.float32), ints(2, 3).astype(np.float32)], 17),
]


@pytest.mark.parametrize(("op", "attrs", "inputs", "opset"), CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_a_direct_fold_equals_the_reference_evaluator(op, attrs, inputs, opset):
    node = helper.make_node(op, [f"in{i}" for i in range(len(inputs))], ["out"], **attrs)
    got = fold_directly(node, inputs, opset)
    assert got is not None, "the case is one the direct folds take"
    want = reference(node, inputs, opset)
    assert got[0].dtype == want.dtype and got[0].shape == want.shape
    np.testing.assert_array_equal(got[0], want)


DECLINED = [
    ("Div", {}, [np.array([-7], np.int64), np.array([2], np.int64)]),  # truncation differs
    ("Div", {}, [np.array([7], np.int64), np.array([0], np.int64)]),  # by zero
    ("Add", {}, [np.array([1], np.int32), np.array([1], np.int64)]),  # mixed dtypes
    ("Gather", {}, [ints(3), np.array([3], np.int64)]),  # out of range
    ("Unsqueeze", {"axes": [-1]}, [ints(2)]),  # negative before opset 11 (opset 10 here)
    ("Concat", {"axis": 0}, [ints(2, 2), ints(2, 3)]),  # shapes that do not join
    ("Sqrt", {}, [ints(3)]),  # integers
]


@pytest.mark.parametrize(("op", "attrs", "inputs"), DECLINED,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(DECLINED)])
def test_cases_outside_the_rules_are_left_to_the_evaluator(op, attrs, inputs):
    node = helper.make_node(op, [f"in{i}" for i in range(len(inputs))], ["out"], **attrs)
    assert fold_directly(node, inputs, 10 if op == "Unsqueeze" else 17) is None


def test_unsqueeze_axes_in_any_order_insert_where_the_spec_says():
    """"The order of values in axes does not matter" (Unsqueeze-11): onnxruntime gives
    (1, 1, 3) for axes [1, 0] on (3,); onnx's reference evaluator inserts them one by one and
    gives (1, 3, 1)."""
    x = ints(3)
    node = helper.make_node("Unsqueeze", ["in0"], ["out"], axes=[1, 0])
    graph = helper.make_graph(
        [helper.make_node("Unsqueeze", ["x"], ["y"], axes=[1, 0])], "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    model.ir_version = 8
    want = onnxruntime.InferenceSession(model.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = fold_directly(node, [x], 11)
    assert got is not None and got[0].shape == want.shape == (1, 1, 3)
    np.testing.assert_array_equal(got[0], want)


def test_every_direct_op_is_covered_here():
    assert {c[0] for c in CASES} == set(DIRECT)


def test_a_model_of_folded_shape_arithmetic_runs_as_onnxruntime_runs_it(tmp_path):
    """A channel shuffle written as exporters write it: the reshape target computed from the
    input's shape (Gather, Div, Mul, Unsqueeze, Concat) and a weight read through Identity."""
    w = RNG.standard_normal((8, 8)).astype(np.float32)
    nodes = [
        helper.make_node("Identity", ["w"], ["w_id"]),
        helper.make_node("MatMul", ["x", "w_id"], ["h"]),
        helper.make_node("Shape", ["h"], ["s"]),
        helper.make_node("Gather", ["s", "one"], ["c"], axis=0),
        helper.make_node("Div", ["c", "two"], ["half"]),
        helper.make_node("Mul", ["half", "two"], ["back"]),
        helper.make_node("Unsqueeze", ["half", "zero"], ["half1"]),
        helper.make_node("Unsqueeze", ["back", "zero"], ["back1"]),
        helper.make_node("Concat", ["half1", "two1", "minus1"], ["target"], axis=0),
        helper.make_node("Reshape", ["h", "target"], ["r"]),
        helper.make_node("Concat", ["back1"], ["size"], axis=0),
        helper.make_node("Reshape", ["r", "size"], ["y0"]),
        helper.make_node("Sqrt", ["sq"], ["root"]),
        helper.make_node("Mul", ["y0", "root"], ["y"]),
    ]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([2], np.int64), "two1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"),
             numpy_helper.from_array(np.array([4.0], np.float32), "sq")]
    graph = helper.make_graph(nodes, "shuffle",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8])],
                              initializer=inits)
    path = tmp_path / "shuffle.onnx"
    path.write_bytes(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    session = InferenceSession(str(path), providers=["cpu"])
    left = {n.op_type for n in session._model.graph.nodes}
    assert left <= {"MatMul", "Reshape", "Mul"}, left  # the arithmetic was folded
    x = RNG.standard_normal((1, 8)).astype(np.float32)
    want = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[0]
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-6)
