"""QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger, QLinearMatMul and
QLinearConv on the CPU EP."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from onnx import TensorProto, helper

F, F16, U8, I8 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.UINT8, TensorProto.INT8


def quantize_model(opset, x_shape, scale_shape, zp_type=U8, with_zp=True, x_type=F,
                   scale_type=F, **attrs):
    names = ["x", "s"] + (["z"] if with_zp else [])
    inputs = [("x", x_type, x_shape), ("s", scale_type, scale_shape)]
    if with_zp:
        inputs.append(("z", zp_type, scale_shape))
    out = attrs.get("output_dtype", zp_type)
    node = helper.make_node("QuantizeLinear", names, ["y"], **attrs)
    return make_model([node], inputs, [("y", out, x_shape)], opset=opset)


def dequantize_model(opset, x_type, x_shape, scale_shape, scale_type=F, with_zp=True, **attrs):
    names = ["x", "s"] + (["z"] if with_zp else [])
    inputs = [("x", x_type, x_shape), ("s", scale_type, scale_shape)]
    if with_zp:
        inputs.append(("z", x_type, scale_shape))
    node = helper.make_node("DequantizeLinear", names, ["y"], **attrs)
    return make_model([node], inputs, [("y", attrs.get("output_dtype", scale_type), x_shape)],
                      opset=opset)


@pytest.mark.parametrize("opset", [10, 13, 19, 21])
@pytest.mark.parametrize("zp_type, dtype", [(U8, np.uint8), (I8, np.int8)])
def test_quantize_per_tensor_rounds_half_to_even_and_saturates(opset, zp_type, dtype):
    model = quantize_model(opset, [8], [], zp_type)
    x = np.array([-300, -1.5, -0.5, 0.5, 1.5, 2.5, 100.2, 1e4], np.float32)
    feeds = {"x": x, "s": np.array(0.5, np.float32), "z": np.array(3, dtype)}
    (y,) = assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)
    assert y.dtype == dtype


@pytest.mark.parametrize("opset", [13, 21])
def test_quantize_and_dequantize_per_axis(rng, opset):
    x = rng.standard_normal([2, 3, 4]).astype(np.float32) * 50
    s = np.array([0.5, 0.25, 2.0], np.float32)
    z = np.array([1, 128, 250], np.uint8)
    q = quantize_model(opset, [2, 3, 4], [3], axis=1)
    (y,) = assert_matches_onnxruntime(q, {"x": x, "s": s, "z": z}, rtol=0, atol=0)
    dq = dequantize_model(opset, U8, [2, 3, 4], [3], axis=-2)
    assert_matches_onnxruntime(dq, {"x": y, "s": s, "z": z})


def test_quantize_and_dequantize_blocked(rng):
    x = rng.standard_normal([3, 5]).astype(np.float32) * 10
    s = np.array([[0.5, 0.1, 1.0]] * 3, np.float32)
    z = np.array([[1, 2, 3]] * 3, np.int8)
    q = quantize_model(21, [3, 5], [3, 3], I8, axis=1, block_size=2)
    (y,) = run_ep_host(q, {"x": x, "s": s, "z": z})
    per_column = np.repeat(s, 2, axis=1)[:, :5]
    zp = np.repeat(z, 2, axis=1)[:, :5].astype(np.float32)
    np.testing.assert_array_equal(y, np.clip(np.rint(x / per_column) + zp, -128, 127))
    dq = dequantize_model(21, I8, [3, 5], [3, 3], axis=1, block_size=2)
    (back,) = run_ep_host(dq, {"x": y, "s": s, "z": z})
    np.testing.assert_allclose(back, (y.astype(np.float32) - zp) * per_column)


@pytest.mark.parametrize("code, dtype, saturate, expected", [
    (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 1, [448, -448, 1.75, 0]),
    (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 0, [np.nan, np.nan, 1.75, 0]),
    (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2, 0, [np.inf, -np.inf, 1.75, 0]),
    (TensorProto.INT4, ml_dtypes.int4, 1, [7, -8, 2, 0]),
    (TensorProto.UINT2, ml_dtypes.uint2, 1, [3, 0, 2, 0]),
])
def test_quantize_to_narrow_types(code, dtype, saturate, expected):
    model = quantize_model(25, [4], [], with_zp=False, output_dtype=code, saturate=saturate)
    x = np.array([1e6, -1e6, 1.8, 0.0], np.float32)
    (y,) = run_ep_host(model, {"x": x, "s": np.array(1.0, np.float32)})
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.astype(np.float32), np.array(expected, np.float32))


def test_quantize_23_divides_in_the_scale_type():
    # 12.397794 / 0.37 is 33.4969 exactly, but 33.5 in float16, which rounds to 34
    model = quantize_model(23, [1], [], scale_type=F16)
    feeds = {"x": np.array([12.397794], np.float32), "s": np.array(0.37, np.float16),
             "z": np.array(0, np.uint8)}
    assert run_ep_host(model, feeds)[0].tolist() == [34]
    model = quantize_model(21, [1], [], x_type=F16, scale_type=F16)
    feeds["x"] = feeds["x"].astype(np.float16)
    assert run_ep_host(model, feeds)[0].tolist() == [33]


def test_dequantize_float8_to_float16():
    model = dequantize_model(21, TensorProto.FLOAT8E4M3FN, [3], [], scale_type=F16,
                             with_zp=False)
    x = np.array([1.5, -448, 0.125], ml_dtypes.float8_e4m3fn)
    (y,) = run_ep_host(model, {"x": x, "s": np.array(2.0, np.float16)})
    assert y.dtype == np.float16 and y.tolist() == [3.0, -896.0, 0.25]


def test_quantize_declines_a_zero_point_type_of_a_later_version():
    answer = cpu_answer(quantize_model(19, [4], [], TensorProto.INT16))
    assert not answer.is_supported and answer.code == "dtype"
    assert "since_version 19" in answer.reason


def test_quantize_declines_a_2d_scale_without_block_size():
    answer = cpu_answer(quantize_model(21, [4, 4], [4, 4]))
    assert not answer.is_supported and answer.code == "shape"


def test_dynamic_quantize_linear(rng):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    model = make_model([node], [("x", F, [3, 4])], [("y", U8, None), ("s", F, None),
                                                    ("z", U8, None)], opset=11)
    assert_matches_onnxruntime(model, {"x": rng.standard_normal([3, 4]).astype(np.float32)})
    # all zeros: the spec's function gives scale 0 (then 0 / 0 for the rest)
    y, s, z = run_ep_host(model, {"x": np.zeros([3, 4], np.float32)})
    assert s == 0 and z == 0 and not y.any()


@pytest.mark.parametrize("a_type, b_type", [(U8, I8), (I8, U8), (U8, U8)])
def test_matmul_integer(rng, a_type, b_type):
    types = {U8: np.uint8, I8: np.int8}
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    model = make_model([node], [("a", a_type, [2, 4, 3]), ("b", b_type, [3, 5]),
                                ("za", a_type, []), ("zb", b_type, [])],
                       [("y", TensorProto.INT32, None)], opset=10)
    feeds = {"a": rng.integers(0, 120, [2, 4, 3]).astype(types[a_type]),
             "b": rng.integers(0, 120, [3, 5]).astype(types[b_type]),
             "za": np.array(7, types[a_type]), "zb": np.array(3, types[b_type])}
    assert_matches_onnxruntime(model, feeds, rtol=0, atol=0)


def test_matmul_integer_per_row_and_per_column_zero_points(rng):
    # onnxruntime takes only scalar zero points: compare with the spec's formula
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    model = make_model([node], [("a", U8, [4, 3]), ("b", I8, [3, 5]), ("za", U8, [4]),
                                ("zb", I8, [5])], [("y", TensorProto.INT32, None)], opset=10)
    a, b = rng.integers(0, 255, [4, 3]), rng.integers(-128, 127, [3, 5])
    za, zb = rng.integers(0, 255, [4]), rng.integers(-128, 127, [5])
    (y,) = run_ep_host(model, {"a": a.astype(np.uint8), "b": b.astype(np.int8),
                               "za": za.astype(np.uint8), "zb": zb.astype(np.int8)})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, (a - za[:, None]) @ (b - zb))


def test_qlinear_matmul(rng):
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                            ["y"])
    inputs = [("a", U8, [2, 3, 4]), ("sa", F, []), ("za", U8, []), ("b", U8, [4, 5]),
              ("sb", F, []), ("zb", U8, []), ("sy", F, []), ("zy", U8, [])]
    model = make_model([node], inputs, [("y", U8, None)], opset=21)
    feeds = {"a": rng.integers(0, 255, [2, 3, 4]).astype(np.uint8),
             "b": rng.integers(0, 255, [4, 5]).astype(np.uint8),
             "sa": np.array(0.02, np.float32), "za": np.array(120, np.uint8),
             "sb": np.array(0.01, np.float32), "zb": np.array(130, np.uint8),
             "sy": np.array(0.05, np.float32), "zy": np.array(100, np.uint8)}
    assert_matches_onnxruntime(model, feeds, rtol=0, atol=1)


def qlinear_conv_by_the_spec(feeds, pads, strides, group):
    """QLinearConv in exact integers, one output element at a time: (x - zx) * (w - zw) summed in
    int64 plus the int32 bias, scaled by sx * sw / sy per output channel in float64, rounded half to
    even, offset by zy and saturated to uint8."""
    x = np.pad(feeds["x"].astype(np.int64) - int(feeds["zx"]),
               [(0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])])
    w = feeds["w"].astype(np.int64) - feeds["zw"].astype(np.int64)[:, None, None, None]
    n, _, height, width = x.shape
    m, c_per_group, kh, kw = w.shape
    out_h, out_w = (height - kh) // strides[0] + 1, (width - kw) // strides[1] + 1
    acc = np.zeros([n, m, out_h, out_w], np.int64)
    for b, o, i, j in np.ndindex(*acc.shape):
        c0 = o // (m // group) * c_per_group
        top, left = i * strides[0], j * strides[1]
        patch = x[b, c0:c0 + c_per_group, top:top + kh, left:left + kw]
        acc[b, o, i, j] = (patch * w[o]).sum() + int(feeds["b"][o])
    scale = (feeds["sx"].astype(np.float64) * feeds["sw"].astype(np.float64)
             / feeds["sy"].astype(np.float64))
    y = np.rint(acc * scale[None, :, None, None]) + int(feeds["zy"])
    return np.clip(y, 0, 255).astype(np.uint8)


def test_qlinear_conv_per_channel_with_bias(rng):
    """Compared with the specification computed exactly, not with onnxruntime: onnxruntime 1.32's
    CPU QLinearConv (uint8 input, int8 weight) on an AVX2 machine without VNNI multiplies in
    int16 pairs (vpmaddubsw) that saturate when |x * w + x' * w'| > 32767; with weights up to
    100 and raw inputs up to 255 that happens, and 12 of the 90 outputs differ from the exact
    result by up to 6 (onnx.reference agrees with the exact result). With |w| <= 64 no pair can
    saturate, so onnxruntime is still the reference there."""
    names = ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 1, 1, 1], strides=[2, 1],
                            group=2)
    inputs = [("x", U8, [1, 4, 6, 5]), ("sx", F, []), ("zx", U8, []), ("w", I8, [6, 2, 3, 3]),
              ("sw", F, [6]), ("zw", I8, [6]), ("sy", F, []), ("zy", U8, []),
              ("b", TensorProto.INT32, [6])]
    model = make_model([node], inputs, [("y", U8, None)], opset=10)
    feeds = {"x": rng.integers(0, 255, [1, 4, 6, 5]).astype(np.uint8),
             "sx": np.array(0.03, np.float32), "zx": np.array(128, np.uint8),
             "w": rng.integers(-100, 100, [6, 2, 3, 3]).astype(np.int8),
             "sw": rng.uniform(0.001, 0.01, [6]).astype(np.float32),
             "zw": np.zeros([6], np.int8), "sy": np.array(0.1, np.float32),
             "zy": np.array(90, np.uint8),
             "b": rng.integers(-500, 500, [6]).astype(np.int32)}
    (y,) = run_ep_host(model, feeds)
    assert y.dtype == np.uint8
    np.testing.assert_array_equal(y, qlinear_conv_by_the_spec(feeds, [1, 1, 1, 1], [2, 1], 2))
    feeds["w"] = np.clip(feeds["w"], -64, 64)
    assert_matches_onnxruntime(model, feeds, rtol=0, atol=1)
