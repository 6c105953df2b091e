"""Elementwise ops added for the full op set: trigonometry, activations, Mod, rounding, bitwise
logic and shifts, IsInf/IsNaN, and bfloat16 on the existing elementwise ops."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from ep_host.kernels import REGISTRY
from onnx import TensorProto, helper

BF16 = ml_dtypes.bfloat16
CLOSE = {"rtol": 1e-5, "atol": 1e-6}


def one_node(op, feeds, *, opset, out_type=None, outputs=1, **attrs):
    names = list(feeds)
    node = helper.make_node(op, names, [f"out{i}" for i in range(outputs)], **attrs)
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for n, a in feeds.items()]
    out_type = inputs[0][1] if out_type is None else out_type
    return make_model([node], inputs, [(f"out{i}", out_type, None) for i in range(outputs)],
                      opset=opset)


def test_every_version_in_onnx_is_registered():
    ops = ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
           "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign",
           "ThresholdedRelu", "Shrink", "Mish", "Gelu", "Swish", "PRelu", "Round", "Sign", "Mod",
           "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "IsInf", "IsNaN"]
    for op in ops:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


# ---------------------------------------------------------------------------------------------
# Unary math and activations against onnxruntime
# ---------------------------------------------------------------------------------------------

UNARY = {  # op: (opsets, low, high, attributes)
    "Sin": ((7,), -4, 4, {}), "Cos": ((7,), -4, 4, {}), "Tan": ((7,), -1.5, 1.5, {}),
    "Asin": ((7,), -1, 1, {}), "Acos": ((7,), -1, 1, {}), "Atan": ((7,), -9, 9, {}),
    "Sinh": ((9,), -5, 5, {}), "Cosh": ((9,), -5, 5, {}), "Asinh": ((9,), -9, 9, {}),
    "Acosh": ((9,), 1, 9, {}), "Atanh": ((9,), -0.99, 0.99, {}),
    "Elu": ((6, 22), -4, 4, {"alpha": 0.7}), "Selu": ((6, 22), -4, 4, {}),
    "Celu": ((12,), -4, 4, {"alpha": 1.5}), "HardSigmoid": ((6, 22), -6, 6, {"alpha": 0.3}),
    "HardSwish": ((14, 22), -6, 6, {}), "Softplus": ((1, 22), -30, 30, {}),
    "Softsign": ((1, 22), -5, 5, {}), "ThresholdedRelu": ((10, 22), -3, 3, {"alpha": 0.5}),
    "Mish": ((18, 22), -6, 6, {}), "Gelu": ((20,), -4, 4, {"approximate": "tanh"}),
    "Round": ((11, 22), -5, 5, {}), "Sign": ((9, 13), -2, 2, {}),
    "Shrink": ((9,), -3, 3, {"lambd": 0.8, "bias": 0.3}),
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary_ops_match_onnxruntime(op, rng):
    opsets, low, high, attrs = UNARY[op]
    x = rng.uniform(low, high, (3, 7)).astype(np.float32)
    for opset in opsets:
        assert_matches_onnxruntime(one_node(op, {"x": x}, opset=opset, **attrs), {"x": x}, **CLOSE)


def test_gelu_without_approximation_and_swish():
    x = np.linspace(-5, 5, 21, dtype=np.float32)
    assert_matches_onnxruntime(one_node("Gelu", {"x": x}, opset=20), {"x": x}, **CLOSE)
    (out,) = run_ep_host(one_node("Swish", {"x": x}, opset=24, alpha=0.5), {"x": x})
    np.testing.assert_allclose(out, x / (1 + np.exp(-0.5 * x)), rtol=1e-6)


def test_round_halves_to_even_and_keeps_specials():
    x = np.array([0.5, 1.5, 2.5, -2.5, -0.5, 2.3, np.inf, -0.0, np.nan], np.float32)
    (out,) = assert_matches_onnxruntime(one_node("Round", {"x": x}, opset=11), {"x": x})
    np.testing.assert_array_equal(out, [0, 2, 2, -2, -0.0, 2, np.inf, -0.0, np.nan])


def test_softplus_does_not_overflow():
    x = np.array([-200, 0, 200], np.float32)
    (out,) = run_ep_host(one_node("Softplus", {"x": x}, opset=22), {"x": x})
    np.testing.assert_allclose(out, [0, np.log(2), 200], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_integer_shrink(dtype):
    x = np.array([0, 1, 2, 3, 5, 100], dtype)
    if dtype != np.uint8:
        x = np.concatenate([x, np.array([-1, -2, -3, -100], dtype)])
    model = one_node("Shrink", {"x": x}, opset=9, lambd=2.0, bias=1.0)
    assert_matches_onnxruntime(model, {"x": x})


def test_shrink_declines_integers_with_a_fractional_bias():
    x = np.ones(3, np.int32)
    answer = cpu_answer(one_node("Shrink", {"x": x}, opset=9, lambd=1.0, bias=0.5))
    assert not answer.is_supported and answer.code == "attribute"
    assert "whole lambd and bias" in answer.reason and "bias=0.5" in answer.reason


@pytest.mark.parametrize(("slope_shape", "opset"), [((4,), 9), ((3, 1), 16), ((1,), 7)])
def test_prelu_broadcasts_the_slope(slope_shape, opset, rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    slope = rng.uniform(0, 1, slope_shape).astype(np.float32)
    assert_matches_onnxruntime(one_node("PRelu", {"x": x, "s": slope}, opset=opset),
                               {"x": x, "s": slope})


def test_integer_prelu():
    x, s = np.array([-4, -1, 0, 3], np.int64), np.array([2], np.int64)
    (out,) = run_ep_host(one_node("PRelu", {"x": x, "s": s}, opset=16), {"x": x, "s": s})
    assert out.tolist() == [-8, -2, 0, 3]


def test_prelu_6_declines_a_slope_it_cannot_place():
    x, s = np.ones((2, 3, 4), np.float32), np.ones((3, 1), np.float32)
    answer = cpu_answer(one_node("PRelu", {"x": x, "s": s}, opset=6))
    assert not answer.is_supported and answer.code == "shape"
    assert "slope of one element or of X's shape" in answer.reason
    s1 = np.full((1,), 0.5, np.float32)
    (out,) = run_ep_host(one_node("PRelu", {"x": -x, "s": s1}, opset=6), {"x": -x, "s": s1})
    assert (out == -0.5).all()


def test_gelu_declines_an_unknown_approximation():
    x = np.ones(2, np.float32)
    answer = cpu_answer(one_node("Gelu", {"x": x}, opset=20, approximate="erf"))
    assert not answer.is_supported and answer.code == "attribute" and "'erf'" in answer.reason


# ---------------------------------------------------------------------------------------------
# Mod
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint16])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_matches_onnxruntime(dtype, fmod):
    a = np.array([-7, 7, -8, 8, 5, 0, 13], np.int64)
    b = np.array([3, -3, -3, 3, 5, 4, -6], np.int64)
    if np.dtype(dtype).kind == "u":
        a, b = np.abs(a), np.abs(b)
    a, b = a.astype(dtype), b.astype(dtype)
    assert_matches_onnxruntime(one_node("Mod", {"a": a, "b": b}, opset=13, fmod=fmod),
                               {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_float_fmod_matches_onnxruntime(dtype):
    a = np.array([-4.3, 7.2, 5.0, -7.2, 8.0], dtype)
    b = np.array([2.1, -3.4, 8.0, 3.4, 5.0], dtype)
    assert_matches_onnxruntime(one_node("Mod", {"a": a, "b": b}, opset=13, fmod=1),
                               {"a": a, "b": b})


def test_mod_28_floors_floats_with_fmod_0():
    a = np.array([-4.5, 4.5, 0.0, -0.0, 1.0, -1.0, np.inf], np.float32)
    b = np.array([2.0, -2.0, -2.0, 2.0, -np.inf, np.inf, 2.0], np.float32)
    (out,) = run_ep_host(one_node("Mod", {"a": a, "b": b}, opset=28, fmod=0), {"a": a, "b": b})
    np.testing.assert_array_equal(out, [1.5, -1.5, -0.0, 0.0, -np.inf, np.inf, np.nan])
    assert np.signbit(out[2]) and not np.signbit(out[3])


def test_mod_before_28_declines_floats_with_fmod_0():
    a = np.ones(2, np.float32)
    answer = cpu_answer(one_node("Mod", {"a": a, "b": a}, opset=13, fmod=0))
    assert not answer.is_supported and answer.code == "attribute"
    assert "need fmod=1" in answer.reason


def test_integer_mod_by_zero_is_zero():
    a, b = np.array([5, -5], np.int32), np.array([0, 0], np.int32)
    (out,) = run_ep_host(one_node("Mod", {"a": a, "b": b}, opset=13), {"a": a, "b": b})
    assert out.tolist() == [0, 0]


# ---------------------------------------------------------------------------------------------
# Bitwise logic and shifts
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint64])
def test_bitwise_binary_matches_onnxruntime(op, dtype, rng):
    a = rng.integers(0, 120, (2, 3)).astype(dtype)
    b = rng.integers(0, 120, (3,)).astype(dtype)
    assert_matches_onnxruntime(one_node(op, {"a": a, "b": b}, opset=18), {"a": a, "b": b})


def test_bitwise_not():
    x = np.array([0, 1, -1, 127], np.int8)
    (out,) = assert_matches_onnxruntime(one_node("BitwiseNot", {"x": x}, opset=18), {"x": x})
    assert out.tolist() == [-1, -2, 0, -128]


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.uint64])
def test_bit_shift_11_matches_onnxruntime(direction, dtype):
    x, y = np.array([16, 4, 1, 255], dtype), np.array([1, 2, 3, 4], dtype)
    assert_matches_onnxruntime(one_node("BitShift", {"x": x, "y": y}, opset=11,
                                        direction=direction), {"x": x, "y": y})


def test_bit_shift_28_on_signed_values():
    x = np.array([-16, -16, 64, 1, -1, 5, -5, 5], np.int8)
    y = np.array([2, 8, 1, 7, 9, -1, 3, 8], np.int8)
    (right,) = run_ep_host(one_node("BitShift", {"x": x, "y": y}, opset=28, direction="RIGHT"),
                           {"x": x, "y": y})
    (left,) = run_ep_host(one_node("BitShift", {"x": x, "y": y}, opset=28, direction="LEFT"),
                          {"x": x, "y": y})
    # arithmetic right shift; out-of-range amounts leave only the sign fill
    assert right.tolist() == [-4, -1, 32, 0, -1, 0, -1, 0]
    assert left.tolist() == [-64, 0, -128, -128, 0, 0, -40, 0]


def test_bit_shift_11_declines_signed_types():
    x = np.ones(2, np.int32)
    answer = cpu_answer(one_node("BitShift", {"x": x, "y": x}, opset=11, direction="LEFT"))
    assert not answer.is_supported and answer.code == "dtype" and "got int32" in answer.reason


# ---------------------------------------------------------------------------------------------
# IsInf and IsNaN
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pos", "neg"), [(1, 1), (1, 0), (0, 1)])
def test_is_inf_matches_onnxruntime(pos, neg):
    x = np.array([np.inf, -np.inf, np.nan, 0, 1e38], np.float32)
    model = one_node("IsInf", {"x": x}, opset=10, out_type=TensorProto.BOOL,
                     detect_positive=pos, detect_negative=neg)
    assert_matches_onnxruntime(model, {"x": x})


def test_is_inf_and_is_nan_on_float8():
    x = np.array([np.inf, -np.inf, np.nan, 3.0], np.float32)
    for dtype, infs in ((ml_dtypes.float8_e5m2, [1, 1, 0, 0]),
                        (ml_dtypes.float8_e4m3fn, [0, 0, 0, 0])):  # E4M3 saturates to NaN
        x8 = x.astype(dtype)
        (inf,) = run_ep_host(one_node("IsInf", {"x": x8}, opset=20, out_type=TensorProto.BOOL),
                             {"x": x8})
        (nan,) = run_ep_host(one_node("IsNaN", {"x": x8}, opset=20, out_type=TensorProto.BOOL),
                             {"x": x8})
        assert inf.tolist() == [bool(v) for v in infs]
        assert nan.tolist() == np.isnan(x8.astype(np.float32)).tolist()


def test_is_nan_13_declines_float8():
    x = np.ones(2, ml_dtypes.float8_e4m3fn)
    answer = cpu_answer(one_node("IsNaN", {"x": x}, opset=13, out_type=TensorProto.BOOL))
    assert not answer.is_supported and answer.code == "dtype"
    assert "got float8e4m3fn" in answer.reason


# ---------------------------------------------------------------------------------------------
# bfloat16: computed in float32, rounded once
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "fn", "opset"), [
    ("Add", np.add, 13), ("Mul", np.multiply, 14), ("Div", np.divide, 14),
    ("Sub", np.subtract, 13), ("Max", np.maximum, 13),
])
def test_bfloat16_binary_ops_round_once(op, fn, opset, rng):
    a = rng.standard_normal((3, 4)).astype(BF16)
    b = (rng.standard_normal((4,)) + 3).astype(BF16)
    (out,) = run_ep_host(one_node(op, {"a": a, "b": b}, opset=opset), {"a": a, "b": b})
    assert out.dtype == BF16
    expected = fn(a.astype(np.float32), b.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(out.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize(("op", "fn", "opset"), [
    ("Sin", np.sin, 22), ("Exp", np.exp, 13), ("Sqrt", np.sqrt, 13), ("Tanh", np.tanh, 13),
    ("Sigmoid", lambda v: 1 / (1 + np.exp(-v)), 13), ("Round", np.rint, 22),
])
def test_bfloat16_unary_ops_round_once(op, fn, opset, rng):
    x = rng.uniform(0.1, 3, (2, 5)).astype(BF16)
    (out,) = run_ep_host(one_node(op, {"x": x}, opset=opset), {"x": x})
    assert out.dtype == BF16
    expected = fn(x.astype(np.float32)).astype(BF16).astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2**-8)


def test_bfloat16_is_declined_before_its_version():
    x = np.ones(2, BF16)
    for op, opset in (("Add", 7), ("Sin", 7), ("Elu", 6), ("Mod", 10)):
        feeds = {"a": x, "b": x} if op in ("Add", "Mod") else {"x": x}
        answer = cpu_answer(one_node(op, feeds, opset=opset, **({"fmod": 1} if op == "Mod"
                                                                  else {})))
        assert not answer.is_supported and answer.code == "dtype", op
        assert "got bfloat16" in answer.reason, op
