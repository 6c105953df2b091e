"""Comparisons, boolean logic, Where, the bitwise ops, BitShift, IsInf and IsNaN: bool outputs,
broadcasting, dtypes per version."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, feeds_model, make_model, run_ep_host
from onnx import TensorProto, helper

from ep_host.kernels import REGISTRY

COMPARISONS = {"Equal": np.equal, "Less": np.less, "LessOrEqual": np.less_equal,
               "Greater": np.greater, "GreaterOrEqual": np.greater_equal}


LOGIC = {"And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor}


def one_node(op, feeds, *, opset, out_type=TensorProto.BOOL, **attrs):
    node = helper.make_node(op, list(feeds), ["out"], **attrs)
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for n, a in feeds.items()]
    return make_model([node], inputs, [("out", out_type, None)], opset=opset)


def test_every_version_in_onnx_is_registered():
    for op in [*COMPARISONS, *LOGIC, "Not", "Where"]:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


@pytest.mark.parametrize("op", list(COMPARISONS))
@pytest.mark.parametrize(("dtype", "opset"), [
    (np.float32, 13), (np.float64, 16), (np.int32, 13), (np.int64, 16), (np.uint8, 16),
    (np.int8, 13), (np.float16, 16),
])
def test_comparisons_broadcast_and_return_bool(op, dtype, opset, rng):
    a = rng.integers(-3, 4, (2, 3, 4)).astype(dtype)
    b = rng.integers(-3, 4, (3, 1)).astype(dtype)
    (out,) = assert_matches_onnxruntime(one_node(op, {"a": a, "b": b}, opset=opset),
                                        {"a": a, "b": b})
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, COMPARISONS[op](a, b))


@pytest.mark.parametrize(("op", "dtype", "opset"), [
    ("Equal", np.int32, 7), ("Equal", np.bool_, 7), ("Equal", np.int64, 11),
    ("Less", np.float32, 7), ("Less", np.int32, 9), ("Greater", np.float64, 7),
    ("Greater", np.uint32, 9), ("LessOrEqual", np.int64, 12), ("GreaterOrEqual", np.float32, 12),
])
def test_comparisons_at_older_versions(op, dtype, opset, rng):
    a = rng.integers(0, 2, (3, 4)).astype(dtype)
    b = rng.integers(0, 2, (4,)).astype(dtype)
    assert_matches_onnxruntime(one_node(op, {"a": a, "b": b}, opset=opset), {"a": a, "b": b})


def test_comparisons_with_nan_are_false_and_not_equal():
    a = np.array([np.nan, 1.0, np.nan], np.float32)
    b = np.array([np.nan, np.nan, 1.0], np.float32)
    for op in COMPARISONS:
        (out,) = assert_matches_onnxruntime(one_node(op, {"a": a, "b": b}, opset=16),
                                            {"a": a, "b": b})
        assert not out.any()


def test_equal_on_strings_from_version_19():
    a = np.array(["ab", "c", ""], dtype=object)
    b = np.array(["ab", "d", ""], dtype=object)
    (out,) = assert_matches_onnxruntime(one_node("Equal", {"a": a, "b": b}, opset=19),
                                        {"a": a, "b": b})
    assert out.tolist() == [True, False, True]


@pytest.mark.parametrize(("op", "dtype", "opset"), [
    ("Equal", np.object_, 13), ("Equal", np.float32, 7), ("Less", np.int32, 7),
    ("Less", np.bool_, 13), ("Greater", np.object_, 13),
])
def test_comparisons_decline_types_the_version_lacks(op, dtype, opset):
    a = np.zeros(2, dtype)
    answer = cpu_answer(one_node(op, {"a": a, "b": a.copy()}, opset=opset))
    assert not answer.is_supported
    assert answer.code == "dtype"
    assert "got" in answer.reason and op in answer.reason


@pytest.mark.parametrize("op", list(LOGIC))
@pytest.mark.parametrize("b_shape", [(2, 3), (3,), (2, 1), ()])
def test_logic_broadcasts(op, b_shape, rng):
    a = rng.integers(0, 2, (2, 3)).astype(bool)
    b = rng.integers(0, 2, b_shape).astype(bool)
    (out,) = assert_matches_onnxruntime(one_node(op, {"a": a, "b": b}, opset=7), {"a": a, "b": b})
    np.testing.assert_array_equal(out, LOGIC[op](a, b))


def test_not():
    x = np.array([[True, False], [False, False]])
    (out,) = assert_matches_onnxruntime(one_node("Not", {"x": x}, opset=1), {"x": x})
    assert out.tolist() == [[False, True], [True, True]]


def test_logic_declines_non_bool_inputs():
    a = np.ones(2, np.int32)
    answer = cpu_answer(one_node("And", {"a": a, "b": a.copy()}, opset=7))
    assert not answer.is_supported and answer.code == "dtype"


@pytest.mark.parametrize(("op", "fn"), [("Equal", np.equal), ("Less", np.less),
                                        ("Greater", np.greater), ("And", np.logical_and),
                                        ("Or", np.logical_or), ("Xor", np.logical_xor)])
def test_version_1_broadcasts_b_onto_a_at_axis(op, fn, rng):
    dtype = bool if op in LOGIC else (np.int32 if op == "Equal" else np.float32)
    a = rng.integers(0, 2, (2, 3, 4)).astype(dtype)
    b = rng.integers(0, 2, (3,)).astype(dtype)
    model = one_node(op, {"a": a, "b": b}, opset=1, broadcast=1, axis=1)
    (out,) = run_ep_host(model, {"a": a, "b": b})
    np.testing.assert_array_equal(out, fn(a, b.reshape(3, 1)))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.uint8, np.int32, np.float16])
@pytest.mark.parametrize("opset", [9, 16])
def test_where_broadcasts_all_three_inputs(dtype, opset, rng):
    feeds = {"c": rng.integers(0, 2, (2, 1, 4)).astype(bool),
             "x": rng.integers(0, 9, (3, 1)).astype(dtype),
             "y": rng.integers(0, 9, (4,)).astype(dtype)}
    model = one_node("Where", feeds, opset=opset, out_type=helper.np_dtype_to_tensor_dtype(
        np.dtype(dtype)))
    (out,) = assert_matches_onnxruntime(model, feeds)
    assert out.shape == (2, 3, 4) and out.dtype == dtype


def test_where_on_bools():  # onnxruntime has no bool Where
    feeds = {"c": np.array([[True], [False]]), "x": np.array([True, False, True]),
             "y": np.array(False)}
    (out,) = run_ep_host(one_node("Where", feeds, opset=16), feeds)
    assert out.tolist() == [[True, False, True], [False, False, False]]


def test_where_on_strings():
    feeds = {"c": np.array([True, False]), "x": np.array(["a", "b"], dtype=object),
             "y": np.array(["c", "d"], dtype=object)}
    model = one_node("Where", feeds, opset=16, out_type=TensorProto.STRING)
    (out,) = assert_matches_onnxruntime_strings(model, feeds)
    assert out.tolist() == ["a", "d"]


def assert_matches_onnxruntime_strings(model, feeds):
    from cpukit import run_onnxruntime

    ours, theirs = run_ep_host(model, feeds), run_onnxruntime(model, feeds)
    assert [o.tolist() for o in ours] == [t.tolist() for t in theirs]
    return ours


def test_where_on_zero_size_tensors():
    feeds = {"c": np.zeros((0, 2), bool), "x": np.ones((1, 2), np.float32),
             "y": np.zeros((2,), np.float32)}
    (out,) = assert_matches_onnxruntime(one_node("Where", feeds, opset=16,
                                                 out_type=TensorProto.FLOAT), feeds)
    assert out.shape == (0, 2)


def test_where_declines_a_non_bool_condition():
    feeds = {"c": np.ones(2, np.int32), "x": np.ones(2, np.float32), "y": np.ones(2, np.float32)}
    answer = cpu_answer(one_node("Where", feeds, opset=16, out_type=TensorProto.FLOAT))
    assert not answer.is_supported and answer.code == "dtype" and "got int32" in answer.reason


def test_every_version_of_the_bitwise_ops_and_is_inf_is_nan_is_registered():
    for op in ["BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "IsInf", "IsNaN"]:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint64])
def test_bitwise_binary_matches_onnxruntime(op, dtype, rng):
    a = rng.integers(0, 120, (2, 3)).astype(dtype)
    b = rng.integers(0, 120, (3,)).astype(dtype)
    assert_matches_onnxruntime(feeds_model(op, {"a": a, "b": b}, opset=18), {"a": a, "b": b})


def test_bitwise_not():
    x = np.array([0, 1, -1, 127], np.int8)
    (out,) = assert_matches_onnxruntime(feeds_model("BitwiseNot", {"x": x}, opset=18), {"x": x})
    assert out.tolist() == [-1, -2, 0, -128]


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bit_shift_11_matches_onnxruntime(direction, dtype):
    x, y = np.array([16, 4, 1, 255], dtype), np.array([1, 2, 3, 4], dtype)
    assert_matches_onnxruntime(feeds_model("BitShift", {"x": x, "y": y}, opset=11,
                                           direction=direction), {"x": x, "y": y})


def test_bit_shift_28_on_signed_values():
    x = np.array([-16, -16, 64, 1, -1, 5, -5, 5], np.int8)
    y = np.array([2, 8, 1, 7, 9, -1, 3, 8], np.int8)
    (right,) = run_ep_host(feeds_model("BitShift", {"x": x, "y": y}, opset=28, direction="RIGHT"),
                           {"x": x, "y": y})
    (left,) = run_ep_host(feeds_model("BitShift", {"x": x, "y": y}, opset=28, direction="LEFT"),
                          {"x": x, "y": y})
    # arithmetic right shift; out-of-range amounts leave only the sign fill
    assert right.tolist() == [-4, -1, 32, 0, -1, 0, -1, 0]
    assert left.tolist() == [-64, 0, -128, -128, 0, 0, -40, 0]


def test_bit_shift_11_declines_signed_types():
    x = np.ones(2, np.int32)
    answer = cpu_answer(feeds_model("BitShift", {"x": x, "y": x}, opset=11, direction="LEFT"))
    assert not answer.is_supported and answer.code == "dtype" and "got int32" in answer.reason


@pytest.mark.parametrize(("pos", "neg"), [(1, 1), (1, 0), (0, 1)])
def test_is_inf_matches_onnxruntime(pos, neg):
    x = np.array([np.inf, -np.inf, np.nan, 0, 1e38], np.float32)
    model = feeds_model("IsInf", {"x": x}, opset=10, out_type=TensorProto.BOOL,
                        detect_positive=pos, detect_negative=neg)
    assert_matches_onnxruntime(model, {"x": x})


def test_is_inf_and_is_nan_on_float8():
    x = np.array([np.inf, -np.inf, np.nan, 3.0], np.float32)
    for dtype, infs in ((ml_dtypes.float8_e5m2, [1, 1, 0, 0]),
                        (ml_dtypes.float8_e4m3fn, [0, 0, 0, 0])):  # E4M3 saturates to NaN
        x8 = x.astype(dtype)
        (inf,) = run_ep_host(feeds_model("IsInf", {"x": x8}, opset=20, out_type=TensorProto.BOOL),
                             {"x": x8})
        (nan,) = run_ep_host(feeds_model("IsNaN", {"x": x8}, opset=20, out_type=TensorProto.BOOL),
                             {"x": x8})
        assert inf.tolist() == [bool(v) for v in infs]
        assert nan.tolist() == np.isnan(x8.astype(np.float32)).tolist()


def test_is_nan_13_declines_float8():
    x = np.ones(2, ml_dtypes.float8_e4m3fn)
    answer = cpu_answer(feeds_model("IsNaN", {"x": x}, opset=13, out_type=TensorProto.BOOL))
    assert not answer.is_supported and answer.code == "dtype"
    assert "got float8e4m3fn" in answer.reason
