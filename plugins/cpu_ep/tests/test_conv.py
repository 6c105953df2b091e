"""Conv (its variants by geometry: 1x1, depthwise, shifted, Winograd, tapwise, im2col),
ConvInteger and CausalConvWithState on the CPU EP, against onnxruntime and a direct
convolution."""

from __future__ import annotations

import itertools
import math

import ml_dtypes
import numpy as np
import pytest
from cpukit import (
    assert_declines,
    assert_matches_onnxruntime,
    flops,
    make_model,
    node_model,
    randn,
    run_ep_host,
)
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

from ep_host.kernels import conv as conv_kernels
from ep_host.kernels.conv_geometry import reached_taps, window_geometry
from ep_host.tracing import Tracer

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}


def conv_model(x_shape, w_shape, opset, bias=True, elem=F, **attrs):
    names = ["x", "w", "b"] if bias else ["x", "w"]
    inputs = [("x", elem, x_shape), ("w", elem, w_shape)] + ([("b", elem, [w_shape[0]])] if bias
                                                             else [])
    return make_model([helper.make_node("Conv", names, ["y"], **attrs)], inputs,
                      [("y", elem, None)], opset=opset)


CONV_CASES = [
    ([1, 3, 9, 9], [4, 3, 3, 3], {}),
    ([2, 4, 9, 8], [6, 2, 3, 2], {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1],
                                  "dilations": [1, 2]}),
    ([1, 6, 9, 8], [6, 1, 3, 3], {"group": 6, "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([1, 6, 9, 8], [12, 1, 4, 4], {"group": 6, "auto_pad": "SAME_LOWER", "strides": [2, 3]}),
    ([1, 6, 9, 8], [4, 3, 2, 4], {"group": 2, "auto_pad": "VALID", "strides": [2, 3]}),
    ([1, 4, 10], [5, 4, 3], {"strides": [2], "pads": [1, 2]}),
    ([1, 2, 5, 6, 7], [3, 2, 2, 3, 2], {"strides": [1, 2, 1], "pads": [0, 1, 1, 1, 0, 0],
                                        "dilations": [2, 1, 1]}),
    ([2, 8, 7, 7], [16, 8, 1, 1], {}),
    ([2, 8, 7, 7], [16, 8, 1, 1], {"strides": [2, 2]}),
    ([2, 8, 7, 7], [16, 4, 1, 1], {"group": 2, "kernel_shape": [1, 1]}),
    ([1, 2, 5], [3, 2, 1], {"auto_pad": "SAME_UPPER", "strides": [3]}),  # negative SAME pad -> 0
]


@pytest.mark.parametrize("opset", [9, 11, 22])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), CONV_CASES)
def test_conv_matches_onnxruntime(rng, opset, x_shape, w_shape, attrs):
    feeds = {"x": rng.standard_normal(x_shape).astype(np.float32),
             "w": rng.standard_normal(w_shape).astype(np.float32),
             "b": rng.standard_normal(w_shape[0]).astype(np.float32)}
    assert_matches_onnxruntime(conv_model(x_shape, w_shape, opset, **attrs), feeds, **TOL)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_padding_counts_the_dilated_kernel_extent(rng, auto_pad):
    # onnxruntime refuses SAME with dilations; the spec pads by the extent (k - 1) * d + 1:
    # axis 0: extent 5, pads (2, 2); axis 1: extent 4 with stride 2, pads (1, 2) or (2, 1).
    feeds = {"x": rng.standard_normal([1, 4, 5, 7]).astype(np.float32),
             "w": rng.standard_normal([2, 4, 3, 2]).astype(np.float32),
             "b": rng.standard_normal([2]).astype(np.float32)}
    same = conv_model([1, 4, 5, 7], [2, 4, 3, 2], 22, auto_pad=auto_pad, dilations=[2, 3],
                      strides=[1, 2])
    pads = [2, 1, 2, 2] if auto_pad == "SAME_UPPER" else [2, 2, 2, 1]
    explicit = conv_model([1, 4, 5, 7], [2, 4, 3, 2], 22, pads=pads, dilations=[2, 3],
                          strides=[1, 2])
    (ours,) = run_ep_host(same, feeds)
    (expected,) = assert_matches_onnxruntime(explicit, feeds, **TOL)
    assert ours.shape == (1, 2, 5, 4)
    np.testing.assert_allclose(ours, expected, **TOL)


def test_conv_float64_and_float16_without_bias(rng):
    x = rng.standard_normal([1, 4, 6, 6])
    w = rng.standard_normal([4, 2, 3, 3])
    attrs = {"group": 2, "pads": [1, 1, 1, 1]}
    single = conv_model([1, 4, 6, 6], [4, 2, 3, 3], 22, bias=False, **attrs)
    (expected,) = assert_matches_onnxruntime(
        single, {"x": x.astype(np.float32), "w": w.astype(np.float32)}, **TOL)
    # onnxruntime has no float64 Conv: compare with its float32 answer.
    double = conv_model([1, 4, 6, 6], [4, 2, 3, 3], 22, bias=False, elem=TensorProto.DOUBLE,
                        **attrs)
    (y,) = run_ep_host(double, {"x": x, "w": w})
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, expected, **TOL)
    half = conv_model([1, 4, 6, 6], [4, 2, 3, 3], 22, bias=False, elem=TensorProto.FLOAT16,
                      **attrs)
    feeds = {"x": x.astype(np.float16), "w": w.astype(np.float16)}
    assert_matches_onnxruntime(half, feeds, rtol=1e-2, atol=1e-2)


def test_conv_flops():
    model = conv_model([2, 4, 8, 8], [6, 2, 3, 3], 22, group=2, pads=[1, 1, 1, 1])
    assert flops(model) == 2 * (2 * 6 * 8 * 8) * (2 * 3 * 3)


def test_conv_declines_integer_input():
    model = conv_model([1, 2, 5, 5], [3, 2, 3, 3], 22, bias=False, elem=TensorProto.INT32)
    assert_declines(model, "dtype", "float16/float32/float64", "int32")


def test_conv_declines_a_group_that_does_not_divide_the_channels():
    model = conv_model([1, 4, 5, 5], [3, 2, 3, 3], 22, bias=False, group=2)
    assert_declines(model, "attribute", "multiple of group")


def test_conv_declines_an_input_smaller_than_the_kernel():
    model = conv_model([1, 2, 2, 2], [3, 2, 3, 3], 22, bias=False)
    assert_declines(model, "attribute", "kernel extent 3")


def test_bfloat16_conv_accumulates_in_float32_and_rounds_once(rng):
    bf16 = TensorProto.BFLOAT16
    x = randn(rng, 1, 2, 5, 5).astype(ml_dtypes.bfloat16)
    w = randn(rng, 3, 2, 3, 3).astype(ml_dtypes.bfloat16)
    model = node_model("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22, elem=bf16)
    (y,) = run_ep_host(model, {"x": x, "w": w})
    conv = node_model("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22)
    (want,) = run_ep_host(conv, {"x": x.astype(np.float32), "w": w.astype(np.float32)})
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y, want.astype(ml_dtypes.bfloat16))


def test_bfloat16_declines_before_the_version_that_allows_it():
    model = node_model("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 11,
                       elem=TensorProto.BFLOAT16)
    assert_declines(model, "dtype", "float16/float32/float64", "bfloat16")


def test_conv_integer_matches_onnxruntime(rng):
    u8 = TensorProto.UINT8
    model = node_model("ConvInteger", [("x", [1, 4, 5, 5], u8), ("w", [4, 2, 2, 2], u8),
                                     ("xz", [], u8)], ["y"], 10, elem=TensorProto.INT32,
                       group=2, pads=[1, 0, 1, 2], strides=[1, 2])
    feeds = {"x": rng.integers(0, 256, (1, 4, 5, 5)).astype(np.uint8),
             "w": rng.integers(0, 256, (4, 2, 2, 2)).astype(np.uint8),
             "xz": np.array(128, np.uint8)}
    assert_matches_onnxruntime(model, feeds)


def test_conv_integer_per_channel_zero_points_equal_a_float_conv(rng):
    # onnxruntime has no per-channel w_zero_point; a float Conv of the shifted values is exact.
    i8 = TensorProto.INT8
    model = node_model("ConvInteger", [("x", [1, 2, 5, 5], i8), ("w", [3, 2, 3, 3], i8),
                                     ("xz", [], i8), ("wz", [3], i8)], ["y"], 10,
                       elem=TensorProto.INT32, pads=[1, 1, 1, 1])
    feeds = {"x": rng.integers(-128, 128, (1, 2, 5, 5)).astype(np.int8),
             "w": rng.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8),
             "xz": np.array(3, np.int8), "wz": np.array([1, -2, 5], np.int8)}
    (y,) = run_ep_host(model, feeds)
    conv = node_model("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22,
                      elem=TensorProto.DOUBLE, pads=[1, 1, 1, 1])
    (want,) = run_ep_host(conv, {"x": feeds["x"].astype(np.float64) - 3,
                                 "w": feeds["w"].astype(np.float64)
                                 - feeds["wz"].reshape(3, 1, 1, 1)})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want.astype(np.int32))


def causal_conv_model(length, past=True, activation="silu"):
    inputs = [("x", [2, 3, length]), ("w", [3, 1, 4]), ("b", [3])]
    inputs += [("past", [2, 3, 3])] if past else []
    return node_model("CausalConvWithState", inputs, ["y", "state"], 27, activation=activation)


def test_causal_conv_with_state_is_a_left_padded_depthwise_conv(rng):
    feeds = {"x": randn(rng, 2, 3, 7), "w": randn(rng, 3, 1, 4), "b": randn(rng, 3)}
    y, state = run_ep_host(causal_conv_model(7, past=False, activation="none"), feeds)
    conv = node_model("Conv", [("x", [2, 3, 7]), ("w", [3, 1, 4]), ("b", [3])], ["y"], 22,
                      group=3, pads=[3, 0])
    np.testing.assert_allclose(y, run_ep_host(conv, feeds)[0], **TOL)
    np.testing.assert_array_equal(state, feeds["x"][..., -3:])


def test_causal_conv_with_state_streams_in_chunks(rng):
    x = randn(rng, 2, 3, 7)
    params = {"w": randn(rng, 3, 1, 4), "b": randn(rng, 3)}
    past = randn(rng, 2, 3, 3)
    whole, final = run_ep_host(causal_conv_model(7), params | {"x": x, "past": past})
    first, state = run_ep_host(causal_conv_model(2), params | {"x": x[..., :2], "past": past})
    rest, state = run_ep_host(causal_conv_model(5), params | {"x": x[..., 2:], "past": state})
    np.testing.assert_allclose(np.concatenate([first, rest], axis=-1), whole, **TOL)
    np.testing.assert_array_equal(state, final)


def direct_conv(x, w, b, group, strides, dilations, pads):
    """Conv by its definition: a sum over the taps of each window, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c = x.shape[:2]
    m = w.shape[0]
    ns = x.ndim - 2
    kernel = w.shape[2:]
    widths = [(0, 0), (0, 0)] + [(pads[i], pads[i + ns]) for i in range(ns)]
    xp_ = np.pad(x, widths)
    out = [(xp_.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
           for i in range(ns)]
    cg, mg = c // group, m // group
    y = np.zeros((n, m, *out))
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(tap, dilations, out, strides, strict=True))
        v = xp_[window]
        for g in range(group):
            wt = w[g * mg:(g + 1) * mg, :, *tap]  # (mg, cg)
            y[:, g * mg:(g + 1) * mg] += np.einsum("mc,nc...->nm...", wt,
                                                    v[:, g * cg:(g + 1) * cg])
    if b is not None:
        y += b.reshape((m,) + (1,) * ns)
    return y


# (x shape, w shape, group, strides, dilations, pads, the variant it must pick)
CASES = [
    ((2, 8, 7, 6), (12, 8, 1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0), "1x1"),
    ((1, 8, 7, 6), (12, 8, 1, 1), 1, (2, 3), (1, 1), (0, 0, 0, 0), "1x1"),
    ((2, 8, 5, 5), (12, 2, 1, 1), 4, (1, 1), (1, 1), (0, 0, 0, 0), "1x1"),
    ((2, 6, 9, 8), (6, 1, 3, 3), 6, (1, 1), (1, 1), (1, 1, 1, 1), "depthwise"),
    ((1, 6, 9, 8), (12, 1, 3, 3), 6, (1, 1), (1, 1), (1, 1, 1, 1), "depthwise"),
    ((1, 6, 9, 8), (6, 1, 3, 3), 6, (2, 2), (1, 1), (1, 0, 1, 2), "im2col"),  # strided
    ((1, 4, 11, 10), (4, 1, 3, 3), 4, (1, 1), (2, 2), (2, 2, 2, 2), "depthwise"),
    ((1, 4, 12), (8, 1, 5), 4, (1,), (1,), (2, 2), "depthwise"),
    ((2, 5, 16, 16), (7, 5, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),
    ((1, 6, 20, 20), (4, 3, 3, 3), 2, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),
    ((1, 3, 30, 30), (4, 3, 3, 3), 1, (1, 1), (2, 2), (0, 2, 1, 0), "shifted"),
    ((1, 4, 10), (5, 4, 3), 1, (1,), (1,), (1, 2), "shifted"),
    ((1, 2, 5, 12, 12), (3, 2, 2, 2, 2), 1, (1, 1, 1), (1, 1, 1), (1, 0, 0, 0, 1, 0), "shifted"),
    ((1, 3, 7, 7), (4, 3, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # 9/7 too wide
    ((1, 3, 16, 16), (96, 3, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # 96 > 64 out
    ((2, 4, 9, 8), (6, 2, 3, 2), 2, (2, 1), (1, 2), (1, 0, 2, 1), "im2col"),
    ((1, 3, 17, 17), (8, 3, 7, 7), 1, (2, 2), (1, 1), (3, 3, 3, 3), "im2col"),
    ((1, 64, 8, 8), (64, 64, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "winograd"),
    ((2, 64, 9, 7), (72, 64, 3, 3), 1, (1, 1), (1, 1), (2, 0, 1, 3), "winograd"),  # odd out
    ((1, 66, 11, 10), (64, 66, 3, 3), 1, (1, 1), (1, 1), (0, 0, 0, 0), "winograd"),
    ((1, 64, 10, 9), (64, 64, 3, 3), 1, (1, 1), (1, 1), (0, 1, 2, 0), "winograd"),
    ((1, 16, 16, 16), (64, 16, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),  # C < 32
    ((1, 4, 16, 16), (24, 4, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # C < 8, > 16 out
    ((1, 4, 16, 16), (16, 4, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),  # 16 out
    ((1, 32, 8, 8), (64, 32, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "winograd"),  # 16 tiles
    ((1, 32, 66, 65), (32, 32, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),  # 1089 tiles
    ((1, 32, 66, 65), (96, 32, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # and > 64 out
    ((1, 40, 66, 65), (32, 40, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "winograd"),  # C >= 40
    ((1, 64, 5, 5), (64, 64, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # 9 tiles
    # a strided last axis and a wide kernel: the columns copied from its phases
    ((1, 2, 23, 19), (4, 2, 5, 5), 1, (2, 3), (1, 2), (2, 1, 0, 2), "im2col"),
    ((2, 3, 40), (4, 3, 6), 1, (4,), (1,), (1, 2), "im2col"),
    ((1, 4, 9, 9, 30), (6, 2, 2, 3, 5), 2, (1, 2, 2), (2, 1, 1), (1, 0, 1, 0, 2, 2), "im2col"),
    # taps in the padding skipped: most (dilation 4 on 5 x 5), all but the centre (dilation 6
    # on 4 x 4), a small image; with groups, strides and uneven pads; no tap reaching every
    # output (2x2 kernel, one pad each side); 1-D
    ((1, 64, 5, 5), (128, 64, 3, 3), 1, (1, 1), (4, 4), (4, 4, 4, 4), "tapwise"),
    ((2, 32, 4, 4), (64, 32, 3, 3), 1, (1, 1), (6, 6), (6, 6, 6, 6), "tapwise"),
    ((1, 256, 2, 2), (256, 256, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "tapwise"),
    ((2, 128, 6, 7), (256, 64, 3, 3), 2, (2, 1), (3, 4), (3, 0, 1, 5), "tapwise"),
    ((1, 256, 2, 2), (256, 256, 2, 2), 1, (1, 1), (1, 1), (1, 1, 1, 1), "tapwise"),
    ((1, 128, 6), (256, 128, 5), 1, (1,), (3,), (6, 6), "tapwise"),
    # 3-D keeps im2col: a copy of its many taps' weights costs more memory than time saved
    ((1, 64, 1, 4, 4), (128, 64, 3, 3, 3), 1, (1, 1, 1), (1, 1, 1), (1,) * 6, "im2col"),
]


WINOGRAD = [c for c in CASES if c[-1] == "winograd"]


def run_conv(x, w, b, group, strides, dilations, pads, prepared):
    kw = {"auto_pad": "NOTSET", "group": group, "strides": strides, "dilations": dilations,
          "pads": pads}
    if prepared:
        constants = {1: w} if b is None else {1: w, 2: b}
        kw.update(conv_kernels.prepare_conv(numpy_xp, constants, **kw))
    span = Tracer()
    with span.span("Conv") as s:
        y = conv_kernels.conv(numpy_xp, x, w, b, **kw)
    return y, s.args


@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "dilations", "pads",
                          "variant"), CASES)
def test_variant_is_chosen_by_shape_and_equals_direct_conv(rng, x_shape, w_shape, group,
                                                           strides, dilations, pads, variant,
                                                           prepared, monkeypatch):
    monkeypatch.setenv("EP_HOST_NUMBA", "0")  # the numpy variants; test_grouped_conv: numba's
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    x_before, w_before = x.copy(), w.copy()
    y, args = run_conv(x, w, b, group, strides, dilations, pads, prepared)
    assert args["kernel_variant"] == variant
    assert args["kernel_variant.reason"]
    want = direct_conv(x, w, b, group, strides, dilations, pads)
    assert y.dtype == np.float32 and y.shape == want.shape
    assert y.flags.c_contiguous
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(x, x_before)  # inputs are read only
    np.testing.assert_array_equal(w, w_before)


@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "dilations", "pads",
                          "variant"), CASES[::3])
def test_without_bias(rng, x_shape, w_shape, group, strides, dilations, pads, variant):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    for prepared in (False, True):
        y, _ = run_conv(x, w, None, group, strides, dilations, pads, prepared)
        np.testing.assert_allclose(y, direct_conv(x, w, None, group, strides, dilations, pads),
                                   rtol=1e-4, atol=1e-4)
        assert y.flags.c_contiguous


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[8], CASES[14], WINOGRAD[1]])
def test_float16_computes_in_float32_and_rounds_once(rng, case):
    x_shape, w_shape, group, strides, dilations, pads, _ = case
    x = rng.standard_normal(x_shape).astype(np.float16)
    w = rng.standard_normal(w_shape).astype(np.float16)
    b = rng.standard_normal(w_shape[0]).astype(np.float16)
    for prepared in (False, True):
        y, _ = run_conv(x, w, b, group, strides, dilations, pads, prepared)
        assert y.dtype == np.float16
        want = direct_conv(x, w, b, group, strides, dilations, pads).astype(np.float16)
        np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                                   atol=2e-3)


@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[9], CASES[15], WINOGRAD[1]])
def test_constant_weights_in_a_session_match_onnxruntime(rng, case):
    x_shape, w_shape, group, strides, dilations, pads, _ = case
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, strides=list(strides),
                            dilations=list(dilations), pads=list(pads))
    model = make_model([node], [("x", F, list(x_shape))], [("y", F, None)], opset=17,
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b")])
    x = rng.standard_normal(x_shape, dtype=np.float32)
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-4, atol=1e-4)
    again = run_ep_host(model, {"x": x})[0]  # the prepared session, run twice, is unchanged
    np.testing.assert_array_equal(again, run_ep_host(model, {"x": x})[0])


@pytest.mark.parametrize("case", [c for c in CASES if c[-1] == "depthwise"])
def test_depthwise_without_spread_weights_is_the_same(rng, monkeypatch, case):
    """Past SPREAD_BYTES the per-tap weights broadcast instead of being spread and kept."""
    x_shape, w_shape, group, strides, dilations, pads, _ = case
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    spread, _ = run_conv(x, w, None, group, strides, dilations, pads, prepared=True)
    monkeypatch.setattr(conv_kernels, "SPREAD_BYTES", 0)
    broadcast, _ = run_conv(x, w, None, group, strides, dilations, pads, prepared=True)
    np.testing.assert_array_equal(spread, broadcast)


def test_reached_taps_are_the_taps_and_outputs_that_read_the_input(rng):
    """Against the definition, on random geometries: a tap is left out exactly when every
    output puts it in the padding; its box holds exactly the outputs where it reads the input,
    and its source slice the input indices they read, in order."""
    checked = 0
    while checked < 400:
        nd = int(rng.integers(1, 3))
        spatial = tuple(int(v) for v in rng.integers(1, 12, nd))
        kernel = tuple(int(v) for v in rng.integers(1, 5, nd))
        strides = tuple(int(v) for v in rng.integers(1, 4, nd))
        dilations = tuple(int(v) for v in rng.integers(1, 6, nd))
        pads = tuple(int(v) for v in rng.integers(0, 8, 2 * nd))
        try:
            out, begin, _ = window_geometry(spatial, kernel, strides, dilations, pads, "NOTSET")
        except ValueError:
            continue
        checked += 1
        found = {r[0]: r[1:] for r in reached_taps(spatial, kernel, out, strides, dilations,
                                                   begin)}
        for index, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
            reads = [[o for o in range(out[a])
                      if 0 <= o * strides[a] + tap[a] * dilations[a] - begin[a] < spatial[a]]
                     for a in range(nd)]
            if not all(reads):
                assert index not in found
                continue
            box, source, size = found[index]
            assert size == math.prod(len(r) for r in reads)
            for a in range(nd):
                assert list(range(box[a].start, box[a].stop)) == reads[a]
                assert list(range(spatial[a]))[source[a]] == [
                    o * strides[a] + tap[a] * dilations[a] - begin[a] for o in reads[a]]


def test_reached_count_counts_what_reached_taps_lists():
    # the variant choice counts the reached taps axis by axis; tapwise lists them
    from ep_host.kernels.conv_geometry import reached_count, reached_taps, window_geometry

    rng = np.random.default_rng(3)
    checked = 0
    for _ in range(600):
        nd = int(rng.integers(1, 4))
        spatial = rng.integers(1, 12, nd).tolist()
        kernel = rng.integers(1, 6, nd).tolist()
        strides = rng.integers(1, 4, nd).tolist()
        dilations = rng.integers(1, 5, nd).tolist()
        pads = rng.integers(0, 7, 2 * nd).tolist()
        try:
            out, begin, _ = window_geometry(spatial, kernel, strides, dilations, pads, "NOTSET")
        except ValueError:
            continue
        if min(out) <= 0:
            continue
        listed = reached_taps(spatial, kernel, out, strides, dilations, begin)
        assert reached_count(spatial, kernel, out, strides, dilations, begin) == (
            len(listed), sum(r[3] for r in listed))
        checked += 1
    assert checked > 300


def test_a_conv_plan_is_made_once_per_geometry_and_told_apart_by_every_attribute():
    work = np.dtype(np.float32)
    args = ((1, 16, 9, 9), (8, 16, 3, 3), 1, "NOTSET", [1, 1], [1, 1, 1, 1], [1, 1], work)
    plan = conv_kernels.conv_plan(numpy_xp, *args)
    assert conv_kernels.conv_plan(numpy_xp, *args) is plan
    # lists or tuples: one geometry
    assert conv_kernels.conv_plan(numpy_xp, (1, 16, 9, 9), (8, 16, 3, 3), 1, "NOTSET", (1, 1),
                                  (1, 1, 1, 1), (1, 1), work) is plan
    others = [((1, 16, 9, 9), (8, 16, 3, 3), 1, "NOTSET", [1, 1], [0, 0, 0, 0], [1, 1], work),
              ((1, 16, 9, 9), (8, 16, 3, 3), 1, "NOTSET", [1, 1], [1, 1, 1, 1], [2, 2], work),
              ((1, 16, 9, 9), (8, 16, 3, 3), 1, "NOTSET", [2, 2], [1, 1, 1, 1], [1, 1], work),
              ((1, 16, 9, 9), (8, 16, 3, 3), 1, "SAME_UPPER", None, None, [2, 2], work),
              ((1, 16, 9, 9), (16, 1, 3, 3), 16, "NOTSET", [1, 1], [1, 1, 1, 1], [1, 1], work),
              ((1, 16, 11, 9), (8, 16, 3, 3), 1, "NOTSET", [1, 1], [1, 1, 1, 1], [1, 1], work),
              ((1, 16, 9, 9), (8, 16, 3, 3), 1, "NOTSET", [1, 1], [1, 1, 1, 1], [1, 1],
               np.dtype(np.float64))]
    for other in others:
        made = conv_kernels.conv_plan(numpy_xp, *other)
        fresh = conv_kernels.ConvPlan(numpy_xp, *other)
        assert made is not plan
        assert (made.variant, made.out, made.begin, made.end) == (
            fresh.variant, fresh.out, fresh.begin, fresh.end)


def test_a_kept_conv_plan_is_made_again_when_a_compiled_loop_it_asked_about_changes(
        monkeypatch):
    args = ((2, 4, 9, 8), (6, 2, 3, 2), 2, "NOTSET", (1, 2), (1, 0, 2, 1), (2, 1),
            np.dtype(np.float32))
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    with_numba = conv_kernels.conv_plan(numpy_xp, *args)
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    without = conv_kernels.conv_plan(numpy_xp, *args)
    assert without.variant == conv_kernels.ConvPlan(numpy_xp, *args).variant == "im2col"
    if with_numba.variant == "direct":  # numba installed: the compiled loop was used
        assert without is not with_numba
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    assert conv_kernels.conv_plan(numpy_xp, *args).variant == with_numba.variant


@pytest.mark.parametrize("out_channels", [16, 1000])
def test_a_1x1_conv_whose_filters_are_all_equal_gives_every_channel_the_same_value(
        out_channels):
    """Constant weights (onnx's light models) make every output channel one dot product: each
    channel gets it to the last bit, whichever rows the BLAS kernel sums in another order
    (OpenBLAS's Haswell kernels, on AMD Zen 3, did for 10 of 16), as light SqueezeNet's softmax
    of logits near 1e10 needs."""
    rng = np.random.default_rng(0)
    w = np.full((out_channels, 512, 1, 1), 0.02, np.float32)
    b = np.full(out_channels, 0.02, np.float32)
    x = (rng.random((1, 512, 13, 13)) * 1e6).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"])],
                       [("x", F, [1, 512, 13, 13])], [("y", F, None)],
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b")])
    (y,) = run_ep_host(model, {"x": x})
    assert y.shape == (1, out_channels, 13, 13)
    assert (y == y[:, :1]).all()
    want = np.einsum("c,nchw->nhw", w[0, :, 0, 0].astype(np.float64), x.astype(np.float64))
    np.testing.assert_allclose(y[0, 0], want[0] + 0.02, rtol=1e-5)
    w[3, 7] = 0.03  # one filter apart: that channel differs, the others still agree
    model.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    (y,) = run_ep_host(model, {"x": x})
    assert (y[0, 3] != y[0, 0]).any()
    np.testing.assert_allclose(y[0, 3], want[0] + 0.02 + 0.01 * x[0, 7], rtol=1e-5)
