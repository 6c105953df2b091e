"""Elementwise kernels against onnxruntime: arithmetic, Pow and Mod, math and trigonometry,
activations, rounding, Clip, the variadic ops, and bfloat16 and float16 rounding once."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, feeds_model, make_model, run_ep_host
from onnx import helper, numpy_helper

import ep_host
from ep_host.kernels import REGISTRY

TRANSCENDENTAL = {"rtol": 1e-5, "atol": 1e-5}


def one_node(op, inputs, feeds, consts=None, *, opset, out_type=None, **attrs):
    """A model of one ``op`` node; ``feeds`` are graph inputs, ``consts`` initializers."""
    consts = consts or {}
    arrays = {**feeds, **consts}
    node = helper.make_node(op, list(inputs), ["out"], **attrs)
    graph_inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                    for n, a in feeds.items()]
    if out_type is None:
        out_type = helper.np_dtype_to_tensor_dtype(arrays[next(n for n in inputs if n)].dtype)
    inits = [numpy_helper.from_array(a, n) for n, a in consts.items()]
    return make_model([node], graph_inputs, [("out", out_type, None)], opset=opset,
                      initializers=inits)


def test_every_version_in_onnx_is_registered():
    ops = ["Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "Tanh", "Exp", "Log", "Neg", "Abs",
           "Reciprocal", "Sigmoid", "Relu", "LeakyRelu", "Clip", "Sum", "Max", "Min", "Mean",
           "Identity", "Floor", "Ceil"]
    for op in ops:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize(("dtype", "opset"), [
    (np.float32, 7), (np.float32, 13), (np.float64, 14), (np.float16, 14), (np.int32, 7),
    (np.int64, 13), (np.uint32, 13), (np.int8, 14), (np.uint8, 14), (np.int16, 14),
])
def test_binary_broadcasts_like_numpy(op, dtype, opset, rng):
    a = (rng.standard_normal((2, 3, 4)) * 20).astype(dtype)
    b = (rng.standard_normal((3, 1)) * 5).astype(dtype)
    if np.dtype(dtype).kind in "iu":
        b[b == 0] = 3
    assert_matches_onnxruntime(one_node(op, ["a", "b"], {"a": a, "b": b}, opset=opset),
                               {"a": a, "b": b}, rtol=1e-3 if dtype == np.float16 else 1e-5)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_div_truncates_toward_zero(dtype):
    a = np.array([7, -7, 7, -7, 6, -6, 0, 1], dtype)
    b = np.array([2, 2, -2, -2, 3, -3, 5, -5], dtype)
    model = one_node("Div", ["a", "b"], {"a": a, "b": b}, opset=14)
    (out,) = assert_matches_onnxruntime(model, {"a": a, "b": b})
    np.testing.assert_array_equal(out, [3, -3, -3, 3, 2, 2, 0, 0])


def test_binary_on_zero_size_tensors():
    a, b = np.zeros((0, 3), np.float32), np.ones((1, 3), np.float32)
    (out,) = assert_matches_onnxruntime(one_node("Mul", ["a", "b"], {"a": a, "b": b}, opset=14),
                                        {"a": a, "b": b})
    assert out.shape == (0, 3)


@pytest.mark.parametrize("op, fn", [("Add", np.add), ("Sub", np.subtract),
                                    ("Mul", np.multiply), ("Div", np.divide)])
@pytest.mark.parametrize(("b_shape", "axis", "view"), [
    ((4, 5), None, (1, 1, 4, 5)),  # suffix matching
    ((3, 4), 1, (1, 3, 4, 1)),  # a run starting at axis 1
    ((2,), 0, (2, 1, 1, 1)),
    ((1, 1), None, ()),  # one element: a scalar
])
@pytest.mark.parametrize("opset", [1, 6])
def test_legacy_broadcast_aligns_b_at_axis(op, fn, b_shape, axis, view, opset, rng):
    a = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32) + 3
    attrs = {"broadcast": 1} if axis is None else {"broadcast": 1, "axis": axis}
    model = one_node(op, ["a", "b"], {"a": a, "b": b}, opset=opset, **attrs)
    (out,) = run_ep_host(model, {"a": a, "b": b})
    np.testing.assert_allclose(out, fn(a, b.reshape(view)), rtol=1e-6)


def test_legacy_binary_without_broadcast_needs_equal_shapes():
    a, b = np.ones((2, 3), np.float32), np.ones((3,), np.float32)
    model = one_node("Add", ["a", "b"], {"a": a, "b": b}, opset=6)
    with pytest.raises(ep_host.KernelError, match="broadcast is 0"):
        run_ep_host(model, {"a": a, "b": b})
    model = one_node("Add", ["a", "b"], {"a": a, "b": a}, opset=6)
    (out,) = run_ep_host(model, {"a": a, "b": a})
    np.testing.assert_array_equal(out, a + a)


def test_legacy_add_accepts_integers_from_version_6_only():
    a = np.ones((2,), np.int32)
    assert run_ep_host(one_node("Add", ["a", "b"], {"a": a, "b": a}, opset=6),
                       {"a": a, "b": a})[0].tolist() == [2, 2]
    answer = cpu_answer(one_node("Add", ["a", "b"], {"a": a, "b": a}, opset=1))
    assert not answer.is_supported and answer.code == "dtype"


@pytest.mark.parametrize("opset", [7, 13])
def test_add_declines_int8_before_version_14(opset):
    a = np.ones((2,), np.int8)
    answer = cpu_answer(one_node("Add", ["a", "b"], {"a": a, "b": a}, opset=opset))
    assert not answer.is_supported
    assert answer.code == "dtype"
    assert "got int8" in answer.reason and "int32" in answer.reason


@pytest.mark.parametrize("opset", [12, 13, 15])
@pytest.mark.parametrize(("base", "exponent"), [
    (np.array([[2.0, 0.5, 3.0], [1.5, 4.0, 9.0]], np.float32),
     np.array([2.0, -1.0, 0.5], np.float32)),
    (np.array([2.0, -2.0, 3.0, 0.5], np.float32), np.array([3, 3, -2, 2], np.int64)),
    (np.array([2.0, -2.0, 3.0, 0.5], np.float64), np.array([3, 3, -2, 2], np.int32)),
    (np.array([2.0, 3.0, 0.5], np.float32), np.array([2.0, 0.5, 3.0], np.float64)),
    (np.array([2, -3, 5, 7, 1, -1, -1, 2], np.int64),
     np.array([10, 3, 0, 2, -5, -3, -4, -1], np.int64)),
    (np.array([2, 3, -2, 9, 10], np.int32), np.array([0.5, 1.5, 2.0, 0.5, -1.0], np.float32)),
])
def test_pow_output_has_the_base_type(base, exponent, opset):
    model = one_node("Pow", ["x", "y"], {"x": base, "y": exponent}, opset=opset)
    (out,) = assert_matches_onnxruntime(model, {"x": base, "y": exponent}, **TRANSCENDENTAL)
    assert out.dtype == base.dtype


def test_integer_pow_with_an_unsigned_exponent():
    x, y = np.array([2, -3, 5, 7], np.int32), np.array([10, 3, 0, 2], np.uint8)
    (out,) = run_ep_host(one_node("Pow", ["x", "y"], {"x": x, "y": y}, opset=15), {"x": x, "y": y})
    assert out.dtype == np.int32 and out.tolist() == [1024, -27, 1, 49]


def test_integer_pow_is_exact_beyond_float_precision():
    x, y = np.array([3, -3, 7], np.int64), np.array([39, 39, 22], np.int64)
    (out,) = run_ep_host(one_node("Pow", ["x", "y"], {"x": x, "y": y}, opset=15), {"x": x, "y": y})
    assert out.tolist() == [3**39, (-3) ** 39, 7**22]


def test_pow_7_and_legacy_pow_1(rng):
    x = rng.uniform(0.5, 2, (2, 3)).astype(np.float32)
    y = rng.uniform(-2, 2, (3,)).astype(np.float32)
    assert_matches_onnxruntime(one_node("Pow", ["x", "y"], {"x": x, "y": y}, opset=7),
                               {"x": x, "y": y}, **TRANSCENDENTAL)
    (out,) = run_ep_host(one_node("Pow", ["x", "y"], {"x": x, "y": y}, opset=1, broadcast=1),
                         {"x": x, "y": y})
    np.testing.assert_allclose(out, x**y, rtol=1e-6)


def test_pow_declines_an_integer_exponent_before_version_12():
    x, y = np.ones(2, np.float32), np.ones(2, np.int64)
    answer = cpu_answer(one_node("Pow", ["x", "y"], {"x": x, "y": y}, opset=7))
    assert not answer.is_supported and answer.code == "dtype"


UNARY = ["Sqrt", "Exp", "Log", "Tanh", "Erf", "Neg", "Abs", "Reciprocal", "Sigmoid", "Floor",
         "Ceil", "Relu", "Identity"]


@pytest.mark.parametrize(("op", "dtype", "opset"), [
    (op, dtype, opset) for op in UNARY
    for dtype, opset in ((np.float32, 13), (np.float64, 6), (np.float16, 13))
    if not (op == "Erf" and dtype == np.float64)  # onnxruntime has none: test_erf_float64
])
def test_unary_float_ops(op, dtype, opset, rng):
    x = (rng.standard_normal((3, 4)) * 3).astype(dtype)
    x[0, 0] = 0.5
    if op in ("Sqrt", "Log"):
        x = np.abs(x) + dtype(0.1)
    tol = {"rtol": 1e-3, "atol": 1e-3} if dtype == np.float16 else TRANSCENDENTAL
    (out,) = assert_matches_onnxruntime(one_node(op, ["x"], {"x": x}, opset=opset), {"x": x}, **tol)
    assert out.dtype == dtype


def test_erf_float64():
    x = np.array([-3.0, -0.5, 0.0, 0.25, 1.0, 6.0])
    (out,) = run_ep_host(one_node("Erf", ["x"], {"x": x}, opset=9), {"x": x})
    np.testing.assert_allclose(out, [math.erf(v) for v in x], rtol=1e-15)


@pytest.mark.filterwarnings("ignore:overflow encountered in exp:RuntimeWarning")
@pytest.mark.parametrize("op", ["Sigmoid", "Tanh", "Exp", "Erf"])
def test_unary_extremes_do_not_overflow(op):
    x = np.array([-1000, -88, -20, 0, 20, 88, 1000, np.inf, -np.inf], np.float32)
    assert_matches_onnxruntime(one_node(op, ["x"], {"x": x}, opset=13), {"x": x}, **TRANSCENDENTAL)


@pytest.mark.parametrize(("op", "fn"), [("Neg", np.negative), ("Abs", np.abs),
                                        ("Relu", lambda x: np.maximum(x, 0))])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_signed_integer_unary_ops(op, fn, dtype):
    x = np.array([[-5, 0, 3], [7, -1, -128]], dtype)
    (out,) = run_ep_host(one_node(op, ["x"], {"x": x}, opset=14), {"x": x})
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, fn(x))
    if not (op == "Relu" and dtype == np.int64):  # onnxruntime has no int64 Relu
        assert_matches_onnxruntime(one_node(op, ["x"], {"x": x}, opset=14), {"x": x})


def test_abs_on_unsigned_integers():
    x = np.array([0, 5, 255], np.uint8)
    assert_matches_onnxruntime(one_node("Abs", ["x"], {"x": x}, opset=13), {"x": x})


@pytest.mark.parametrize("opset", [6, 13])
def test_relu_declines_integers_before_version_14(opset):
    x = np.ones(3, np.int32)
    answer = cpu_answer(one_node("Relu", ["x"], {"x": x}, opset=opset))
    assert not answer.is_supported
    assert answer.code == "dtype" and "got int32" in answer.reason


def test_erf_declines_integers():
    x = np.ones(3, np.int32)
    answer = cpu_answer(one_node("Erf", ["x"], {"x": x}, opset=9))
    assert not answer.is_supported and answer.code == "dtype"


def test_nan_passes_through_relu_and_leaky_relu():
    x = np.array([np.nan, -1.0, 2.0], np.float32)
    for op in ("Relu", "LeakyRelu"):
        (out,) = assert_matches_onnxruntime(one_node(op, ["x"], {"x": x}, opset=16), {"x": x})
        assert np.isnan(out[0])


@pytest.mark.parametrize("opset", [6, 16])
@pytest.mark.parametrize("alpha", [0.01, 0.3])
def test_leaky_relu(opset, alpha, rng):
    x = rng.standard_normal((2, 5)).astype(np.float32)
    assert_matches_onnxruntime(one_node("LeakyRelu", ["x"], {"x": x}, opset=opset, alpha=alpha),
                               {"x": x})


def test_version_1_unary_ops_ignore_consumed_inputs():
    x = np.array([-1.0, 4.0], np.float32)
    model = one_node("Relu", ["x"], {"x": x}, opset=1, consumed_inputs=[0])
    assert run_ep_host(model, {"x": x})[0].tolist() == [0.0, 4.0]
    model = one_node("Sqrt", ["x"], {"x": x[1:]}, opset=1, consumed_inputs=[0])
    assert run_ep_host(model, {"x": x[1:]})[0].tolist() == [2.0]


@pytest.mark.parametrize(("dtype", "opset"), [(np.float32, 11), (np.float32, 13), (np.int32, 12),
                                              (np.int64, 13), (np.uint8, 13)])
@pytest.mark.parametrize("bounds", [(2, 6), (2, None), (None, 6), (None, None), (6, 2)])
def test_clip_with_optional_min_and_max_inputs(dtype, opset, bounds):
    x = np.array([[0, 1, 2, 3], [5, 7, 9, 4]], dtype)
    lo, hi = bounds
    consts = {}
    if lo is not None:
        consts["lo"] = np.array(lo, dtype)
    if hi is not None:
        consts["hi"] = np.array(hi, dtype)
    names = ["x", "lo" if lo is not None else "", "hi" if hi is not None else ""]
    while names[-1] == "":
        names.pop()
    model = one_node("Clip", names, {"x": x}, consts, opset=opset)
    (out,) = assert_matches_onnxruntime(model, {"x": x})
    expected = x
    if lo is not None:
        expected = np.maximum(expected, lo)
    if hi is not None:
        expected = np.minimum(expected, hi)
    np.testing.assert_array_equal(out, expected)


def test_clip_keeps_nan():
    x = np.array([np.nan, -5.0, 5.0], np.float32)
    consts = {"lo": np.array(-1.0, np.float32), "hi": np.array(1.0, np.float32)}
    assert_matches_onnxruntime(one_node("Clip", ["x", "lo", "hi"], {"x": x}, consts, opset=13),
                               {"x": x})


@pytest.mark.parametrize("attrs", [{"min": -0.5, "max": 0.5}, {"max": 0.5}, {}])
def test_clip_6_with_attributes(attrs, rng):
    x = (rng.standard_normal((3, 4)) * 2).astype(np.float32)
    x[0, 0] = np.inf
    assert_matches_onnxruntime(one_node("Clip", ["x"], {"x": x}, opset=6, **attrs), {"x": x})


def test_clip_6_on_float16_defaults_to_no_bound():
    x = np.array([-60000, 1, np.inf], np.float16)
    (out,) = run_ep_host(one_node("Clip", ["x"], {"x": x}, opset=6), {"x": x})
    np.testing.assert_array_equal(out, x)


def test_clip_1_without_min_has_no_lower_bound():
    x = np.array([-1e30, 0.0, 3.0], np.float32)
    (out,) = run_ep_host(one_node("Clip", ["x"], {"x": x}, opset=1, max=1.0), {"x": x})
    np.testing.assert_array_equal(out, np.array([-1e30, 0.0, 1.0], np.float32))


def test_clip_declines_integers_at_version_11():
    x = np.ones(3, np.int32)
    answer = cpu_answer(one_node("Clip", ["x"], {"x": x}, opset=11))
    assert not answer.is_supported and answer.code == "dtype"


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
@pytest.mark.parametrize("opset", [8, 13])
def test_variadic_ops_broadcast_all_inputs(op, opset, rng):
    feeds = {"a": rng.standard_normal((2, 1, 4)).astype(np.float32),
             "b": rng.standard_normal((3, 1)).astype(np.float32),
             "c": rng.standard_normal((4,)).astype(np.float32)}
    assert_matches_onnxruntime(one_node(op, list(feeds), feeds, opset=opset), feeds)


@pytest.mark.parametrize("op", ["Sum", "Max", "Min", "Mean"])
def test_variadic_ops_with_one_input(op, rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    (out,) = assert_matches_onnxruntime(one_node(op, ["x"], {"x": x}, opset=13), {"x": x})
    np.testing.assert_array_equal(out, x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_sum_of_many_alike_adds_them_in_order(dtype, rng):
    """Summed into the first sum, in input order, the inputs left as they were."""
    feeds = {f"x{i}": rng.standard_normal((7, 3)).astype(dtype) for i in range(10)}
    kept = {k: x.copy() for k, x in feeds.items()}
    (out,) = assert_matches_onnxruntime(one_node("Sum", list(feeds), feeds, opset=13), feeds)
    want = kept["x0"]
    for i in range(1, 10):
        want = want + kept[f"x{i}"]
    np.testing.assert_array_equal(out, want)
    for k, x in feeds.items():
        np.testing.assert_array_equal(x, kept[k])


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_max_min_on_integers(op, dtype, rng):
    feeds = {"a": rng.integers(0, 100, (2, 3)).astype(dtype),
             "b": rng.integers(0, 100, (3,)).astype(dtype)}
    assert_matches_onnxruntime(one_node(op, ["a", "b"], feeds, opset=12), feeds)


def test_max_min_propagate_nan():
    feeds = {"a": np.array([np.nan, 1, 5], np.float32), "b": np.array([0, np.nan, 3], np.float32)}
    for op in ("Max", "Min"):
        assert_matches_onnxruntime(one_node(op, ["a", "b"], feeds, opset=13), feeds)


@pytest.mark.parametrize("op", ["Sum", "Max", "Mean"])
def test_variadic_version_6_needs_one_shape(op, rng):
    a = rng.standard_normal((2, 3)).astype(np.float32)
    feeds = {"a": a, "b": a * 2, "c": a - 1}
    assert_matches_onnxruntime(one_node(op, list(feeds), feeds, opset=6), feeds)
    bad = {"a": a, "b": a[0]}
    with pytest.raises(ep_host.KernelError, match="share one shape"):
        run_ep_host(one_node(op, list(bad), bad, opset=6), bad)


@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_float16_sum_and_mean_round_once(op, rng):
    feeds = {n: rng.standard_normal(64).astype(np.float16) for n in "abc"}
    (out,) = run_ep_host(one_node(op, list(feeds), feeds, opset=13), feeds)
    exact = sum(x.astype(np.float64) for x in feeds.values()) / (3 if op == "Mean" else 1)
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, exact.astype(np.float16))


def test_float16_leaky_relu_rounds_once(rng):
    x = rng.standard_normal(64).astype(np.float16)
    (out,) = run_ep_host(one_node("LeakyRelu", ["x"], {"x": x}, opset=16, alpha=0.1), {"x": x})
    exact = np.where(x < 0, x.astype(np.float64) * np.float64(np.float32(0.1)), x)
    np.testing.assert_array_equal(out, exact.astype(np.float16))


def test_max_declines_integers_before_version_12():
    x = np.ones(3, np.int32)
    answer = cpu_answer(one_node("Max", ["x", "x"], {"x": x}, opset=8))
    assert not answer.is_supported and answer.code == "dtype"


def test_identity_passes_any_type_through():
    x = np.array(["a", "bc"], dtype=object)
    model = one_node("Identity", ["x"], {"x": x}, opset=13)
    assert run_ep_host(model, {"x": x})[0].tolist() == ["a", "bc"]


def test_opset_9_light_model_ops_resolve_to_registered_versions():
    a = np.ones((1, 2), np.float32)
    for op, n_inputs in (("Add", 2), ("Mul", 2), ("Relu", 1), ("Sum", 3)):
        names = ["a"] * n_inputs
        answer = cpu_answer(one_node(op, names, {"a": a}, opset=9))
        assert answer.is_supported, (op, answer.reason)


def test_every_version_of_the_trigonometric_and_activation_ops_is_registered():
    for op in ["Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh",
               "Atanh", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish", "Softplus", "Softsign",
               "ThresholdedRelu", "Shrink", "Mish", "Gelu", "Swish", "PRelu", "Round", "Sign",
               "Mod"]:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


BF16 = ml_dtypes.bfloat16
CLOSE = {"rtol": 1e-5, "atol": 1e-6}


UNARY_RANGES = {  # op: (opsets, low, high, attributes)
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


@pytest.mark.parametrize("op", sorted(UNARY_RANGES))
def test_unary_ops_match_onnxruntime(op, rng):
    opsets, low, high, attrs = UNARY_RANGES[op]
    x = rng.uniform(low, high, (3, 7)).astype(np.float32)
    for opset in opsets:
        model = feeds_model(op, {"x": x}, opset=opset, **attrs)
        assert_matches_onnxruntime(model, {"x": x}, **CLOSE)


def test_gelu_without_approximation_and_swish():
    x = np.linspace(-5, 5, 21, dtype=np.float32)
    assert_matches_onnxruntime(feeds_model("Gelu", {"x": x}, opset=20), {"x": x}, **CLOSE)
    (out,) = run_ep_host(feeds_model("Swish", {"x": x}, opset=24, alpha=0.5), {"x": x})
    np.testing.assert_allclose(out, x / (1 + np.exp(-0.5 * x)), rtol=1e-6)


def test_round_halves_to_even_and_keeps_specials():
    x = np.array([0.5, 1.5, 2.5, -2.5, -0.5, 2.3, np.inf, -0.0, np.nan], np.float32)
    (out,) = assert_matches_onnxruntime(feeds_model("Round", {"x": x}, opset=11), {"x": x})
    np.testing.assert_array_equal(out, [0, 2, 2, -2, -0.0, 2, np.inf, -0.0, np.nan])


def test_softplus_does_not_overflow():
    x = np.array([-200, 0, 200], np.float32)
    (out,) = run_ep_host(feeds_model("Softplus", {"x": x}, opset=22), {"x": x})
    np.testing.assert_allclose(out, [0, np.log(2), 200], rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.int32, np.int8, np.uint8])
def test_integer_shrink(dtype):
    x = np.array([0, 1, 2, 3, 5, 100], dtype)
    if dtype != np.uint8:
        x = np.concatenate([x, np.array([-1, -2, -3, -100], dtype)])
    model = feeds_model("Shrink", {"x": x}, opset=9, lambd=2.0, bias=1.0)
    assert_matches_onnxruntime(model, {"x": x})


def test_shrink_declines_integers_with_a_fractional_bias():
    x = np.ones(3, np.int32)
    answer = cpu_answer(feeds_model("Shrink", {"x": x}, opset=9, lambd=1.0, bias=0.5))
    assert not answer.is_supported and answer.code == "attribute"
    assert "whole lambd and bias" in answer.reason and "bias=0.5" in answer.reason


@pytest.mark.parametrize(("slope_shape", "opset"), [((4,), 9), ((3, 1), 16), ((1,), 7)])
def test_prelu_broadcasts_the_slope(slope_shape, opset, rng):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    slope = rng.uniform(0, 1, slope_shape).astype(np.float32)
    assert_matches_onnxruntime(feeds_model("PRelu", {"x": x, "s": slope}, opset=opset),
                               {"x": x, "s": slope})


def test_integer_prelu():
    x, s = np.array([-4, -1, 0, 3], np.int64), np.array([2], np.int64)
    (out,) = run_ep_host(feeds_model("PRelu", {"x": x, "s": s}, opset=16), {"x": x, "s": s})
    assert out.tolist() == [-8, -2, 0, 3]


def test_prelu_6_declines_a_slope_it_cannot_place():
    x, s = np.ones((2, 3, 4), np.float32), np.ones((3, 1), np.float32)
    answer = cpu_answer(feeds_model("PRelu", {"x": x, "s": s}, opset=6))
    assert not answer.is_supported and answer.code == "shape"
    assert "slope of one element or of X's shape" in answer.reason
    s1 = np.full((1,), 0.5, np.float32)
    (out,) = run_ep_host(feeds_model("PRelu", {"x": -x, "s": s1}, opset=6), {"x": -x, "s": s1})
    assert (out == -0.5).all()


def test_gelu_declines_an_unknown_approximation():
    x = np.ones(2, np.float32)
    answer = cpu_answer(feeds_model("Gelu", {"x": x}, opset=20, approximate="erf"))
    assert not answer.is_supported and answer.code == "attribute" and "'erf'" in answer.reason


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8, np.uint16])
@pytest.mark.parametrize("fmod", [0, 1])
def test_integer_mod_matches_onnxruntime(dtype, fmod):
    a = np.array([-7, 7, -8, 8, 5, 0, 13], np.int64)
    b = np.array([3, -3, -3, 3, 5, 4, -6], np.int64)
    if np.dtype(dtype).kind == "u":
        a, b = np.abs(a), np.abs(b)
    a, b = a.astype(dtype), b.astype(dtype)
    assert_matches_onnxruntime(feeds_model("Mod", {"a": a, "b": b}, opset=13, fmod=fmod),
                               {"a": a, "b": b})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_float_fmod_matches_onnxruntime(dtype):
    a = np.array([-4.3, 7.2, 5.0, -7.2, 8.0], dtype)
    b = np.array([2.1, -3.4, 8.0, 3.4, 5.0], dtype)
    assert_matches_onnxruntime(feeds_model("Mod", {"a": a, "b": b}, opset=13, fmod=1),
                               {"a": a, "b": b})


@pytest.mark.filterwarnings("ignore:invalid value encountered in remainder:RuntimeWarning")
def test_mod_28_floors_floats_with_fmod_0():  # inf mod 2 is nan on purpose
    a = np.array([-4.5, 4.5, 0.0, -0.0, 1.0, -1.0, np.inf], np.float32)
    b = np.array([2.0, -2.0, -2.0, 2.0, -np.inf, np.inf, 2.0], np.float32)
    (out,) = run_ep_host(feeds_model("Mod", {"a": a, "b": b}, opset=28, fmod=0), {"a": a, "b": b})
    np.testing.assert_array_equal(out, [1.5, -1.5, -0.0, 0.0, -np.inf, np.inf, np.nan])
    assert np.signbit(out[2]) and not np.signbit(out[3])


def test_mod_before_28_declines_floats_with_fmod_0():
    a = np.ones(2, np.float32)
    answer = cpu_answer(feeds_model("Mod", {"a": a, "b": a}, opset=13, fmod=0))
    assert not answer.is_supported and answer.code == "attribute"
    assert "need fmod=1" in answer.reason


def test_integer_mod_by_zero_is_zero():
    a, b = np.array([5, -5], np.int32), np.array([0, 0], np.int32)
    (out,) = run_ep_host(feeds_model("Mod", {"a": a, "b": b}, opset=13), {"a": a, "b": b})
    assert out.tolist() == [0, 0]


@pytest.mark.parametrize(("op", "fn", "opset"), [
    ("Add", np.add, 13), ("Mul", np.multiply, 14), ("Div", np.divide, 14),
    ("Sub", np.subtract, 13), ("Max", np.maximum, 13),
])
def test_bfloat16_binary_ops_round_once(op, fn, opset, rng):
    a = rng.standard_normal((3, 4)).astype(BF16)
    b = (rng.standard_normal((4,)) + 3).astype(BF16)
    (out,) = run_ep_host(feeds_model(op, {"a": a, "b": b}, opset=opset), {"a": a, "b": b})
    assert out.dtype == BF16
    expected = fn(a.astype(np.float32), b.astype(np.float32)).astype(BF16)
    np.testing.assert_array_equal(out.astype(np.float32), expected.astype(np.float32))


@pytest.mark.parametrize(("op", "fn", "opset"), [
    ("Sin", np.sin, 22), ("Exp", np.exp, 13), ("Sqrt", np.sqrt, 13), ("Tanh", np.tanh, 13),
    ("Sigmoid", lambda v: 1 / (1 + np.exp(-v)), 13), ("Round", np.rint, 22),
])
def test_bfloat16_unary_ops_round_once(op, fn, opset, rng):
    x = rng.uniform(0.1, 3, (2, 5)).astype(BF16)
    (out,) = run_ep_host(feeds_model(op, {"x": x}, opset=opset), {"x": x})
    assert out.dtype == BF16
    expected = fn(x.astype(np.float32)).astype(BF16).astype(np.float32)
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2**-8)


def test_bfloat16_is_declined_before_its_version():
    x = np.ones(2, BF16)
    for op, opset in (("Add", 7), ("Sin", 7), ("Elu", 6), ("Mod", 10)):
        feeds = {"a": x, "b": x} if op in ("Add", "Mod") else {"x": x}
        answer = cpu_answer(feeds_model(op, feeds, opset=opset, **({"fmod": 1} if op == "Mod"
                                                                  else {})))
        assert not answer.is_supported and answer.code == "dtype", op
        assert "got bfloat16" in answer.reason, op
