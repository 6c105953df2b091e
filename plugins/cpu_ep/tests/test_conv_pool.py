"""Conv, MaxPool, AveragePool, the global pools and LRN on the CPU EP, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_declines, assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from ep_host.kernels import REGISTRY
from onnx import TensorProto, helper

import ep_host

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}


def conv_model(x_shape, w_shape, opset, bias=True, elem=F, **attrs):
    names = ["x", "w", "b"] if bias else ["x", "w"]
    inputs = [("x", elem, x_shape), ("w", elem, w_shape)] + ([("b", elem, [w_shape[0]])] if bias
                                                             else [])
    return make_model([helper.make_node("Conv", names, ["y"], **attrs)], inputs,
                      [("y", elem, None)], opset=opset)


def pool_model(op, x_shape, opset, elem=F, indices=False, **attrs):
    outputs = [("y", elem, None)] + ([("i", TensorProto.INT64, None)] if indices else [])
    node = helper.make_node(op, ["x"], [n for n, _, _ in outputs], **attrs)
    return make_model([node], [("x", elem, x_shape)], outputs, opset=opset)


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


MAXPOOL_CASES = [
    ([1, 2, 7, 7], {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ([2, 3, 8, 7], {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ([1, 2, 7, 6], {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([1, 2, 7, 6], {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2]}),
    ([1, 2, 7, 6], {"kernel_shape": [2, 3], "auto_pad": "VALID", "strides": [2, 2]}),
    ([1, 2, 9], {"kernel_shape": [3], "pads": [1, 1], "strides": [2]}),
    ([1, 2, 5, 6, 5], {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1]}),
]
MAXPOOL_10_CASES = [
    ([1, 2, 7, 7], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ([1, 2, 8, 8], {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1],
                    "ceil_mode": 1}),  # the last window would start in the padding: dropped
    ([1, 2, 9, 8], {"kernel_shape": [3, 2], "dilations": [2, 3], "pads": [1, 1, 2, 0]}),
    ([1, 2, 9, 8], {"kernel_shape": [2, 2], "dilations": [2, 2], "strides": [2, 1],
                    "ceil_mode": 1}),
]


@pytest.mark.parametrize("opset", [9, 11, 12, 22])
@pytest.mark.parametrize(("x_shape", "attrs"), MAXPOOL_CASES)
def test_max_pool_matches_onnxruntime(rng, opset, x_shape, attrs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    assert_matches_onnxruntime(pool_model("MaxPool", x_shape, opset, **attrs), {"x": x}, **TOL)


@pytest.mark.parametrize("opset", [10, 11, 12, 22])
@pytest.mark.parametrize(("x_shape", "attrs"), MAXPOOL_10_CASES)
def test_max_pool_ceil_mode_and_dilations(rng, opset, x_shape, attrs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    assert_matches_onnxruntime(pool_model("MaxPool", x_shape, opset, **attrs), {"x": x}, **TOL)


def test_max_pool_version_1(rng):
    x = rng.standard_normal([1, 2, 7, 7]).astype(np.float32)
    model = pool_model("MaxPool", [1, 2, 7, 7], 7, kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                       strides=[2, 2])
    assert cpu_answer(model).is_supported
    assert_matches_onnxruntime(model, {"x": x}, **TOL)


INDICES_CASES = [
    ([2, 3, 7, 6], {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0], "strides": [2, 2]}),
    ([2, 3, 7, 6], {"kernel_shape": [3, 2], "pads": [1, 1, 1, 0], "storage_order": 1}),
    ([1, 2, 4, 5, 6], {"kernel_shape": [2, 3, 2], "pads": [1, 0, 1, 0, 1, 1]}),
    ([1, 2, 4, 5, 6], {"kernel_shape": [2, 3, 2], "storage_order": 1, "strides": [1, 2, 2]}),
    ([2, 2, 9], {"kernel_shape": [3], "pads": [1, 1], "strides": [2], "storage_order": 1}),
]
INDICES_CASES = [(opset, *case) for opset in (9, 10, 22) for case in INDICES_CASES] + [
    (opset, [1, 2, 9, 8], {"kernel_shape": [2, 2], "dilations": [2, 2], "ceil_mode": 1,
                           "strides": [2, 2]}) for opset in (10, 22)]


@pytest.mark.parametrize(("opset", "x_shape", "attrs"), INDICES_CASES)
def test_max_pool_indices(rng, opset, x_shape, attrs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    model = pool_model("MaxPool", x_shape, opset, indices=True, **attrs)
    assert_matches_onnxruntime(model, {"x": x}, **TOL)


def test_max_pool_indices_pick_the_first_of_equal_values():
    x = np.zeros([1, 1, 4, 4], dtype=np.float32)
    model = pool_model("MaxPool", [1, 1, 4, 4], 22, indices=True, kernel_shape=[2, 2],
                       strides=[2, 2])
    _, indices = assert_matches_onnxruntime(model, {"x": x})
    assert indices.ravel().tolist() == [0, 2, 8, 10]


@pytest.mark.parametrize("elem", [TensorProto.INT8, TensorProto.UINT8, TensorProto.FLOAT16,
                                  TensorProto.DOUBLE])
def test_max_pool_other_types(rng, elem):
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = rng.integers(0 if elem == TensorProto.UINT8 else -100, 100, [1, 2, 6, 6]).astype(dtype)
    model = pool_model("MaxPool", [1, 2, 6, 6], 12, elem=elem, kernel_shape=[3, 3],
                       pads=[1, 1, 1, 1], strides=[2, 2])
    assert_matches_onnxruntime(model, {"x": x})


def test_max_pool_valid_with_ceil_mode_follows_the_spec(rng):
    # VALID: output = ceil((6 - 3 + 1) / 2) = 2; onnxruntime adds a third, partial window.
    x = rng.standard_normal([1, 1, 6]).astype(np.float32)
    model = pool_model("MaxPool", [1, 1, 6], 22, kernel_shape=[3], strides=[2],
                       auto_pad="VALID", ceil_mode=1)
    (y,) = run_ep_host(model, {"x": x})
    np.testing.assert_array_equal(y.ravel(), [x[0, 0, 0:3].max(), x[0, 0, 2:5].max()])


def test_same_padding_counts_the_dilated_kernel_extent(rng):
    # extent (2 - 1) * 2 + 1 = 3: pads (1, 1), y[i] = max(x[i - 1], x[i + 1]) inside the input.
    # onnxruntime pads by the undilated kernel here, against the spec's pad_shape formula.
    x = rng.standard_normal([1, 1, 5]).astype(np.float32)
    model = pool_model("MaxPool", [1, 1, 5], 22, kernel_shape=[2], dilations=[2],
                       auto_pad="SAME_UPPER")
    (y,) = run_ep_host(model, {"x": x})
    padded = np.concatenate([[-np.inf], x.ravel(), [-np.inf]])
    np.testing.assert_array_equal(y.ravel(), np.maximum(padded[0:5], padded[2:7]))


AVGPOOL_CASES = [
    ([1, 2, 7, 7], {"kernel_shape": [3, 3], "strides": [2, 2]}),
    ([2, 3, 8, 7], {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "strides": [2, 1]}),
    ([2, 3, 8, 7], {"kernel_shape": [3, 2], "pads": [1, 0, 2, 1], "count_include_pad": 1}),
    ([1, 2, 7, 6], {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([1, 2, 7, 6], {"kernel_shape": [2, 3], "auto_pad": "SAME_LOWER", "strides": [2, 2],
                    "count_include_pad": 1}),
    ([1, 2, 7, 6], {"kernel_shape": [2, 3], "auto_pad": "VALID", "strides": [2, 2]}),
    ([1, 2, 9], {"kernel_shape": [3], "pads": [1, 1], "strides": [2]}),
    ([1, 2, 5, 6, 5], {"kernel_shape": [2, 3, 2], "pads": [1, 1, 0, 0, 1, 1],
                       "count_include_pad": 1}),
]
AVGPOOL_10_CASES = [
    ([1, 2, 7, 7], {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
    ([1, 2, 7, 7], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 2, 1],
                    "ceil_mode": 1, "count_include_pad": 1}),
    ([1, 2, 8, 8], {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 1, 1],
                    "ceil_mode": 1, "count_include_pad": 1}),
]


@pytest.mark.parametrize("opset", [9, 10, 11, 19, 22])
@pytest.mark.parametrize(("x_shape", "attrs"), AVGPOOL_CASES)
def test_average_pool_matches_onnxruntime(rng, opset, x_shape, attrs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    model = pool_model("AveragePool", x_shape, opset, **attrs)
    assert_matches_onnxruntime(model, {"x": x}, **TOL)


@pytest.mark.parametrize("opset", [10, 11, 19, 22])
@pytest.mark.parametrize(("x_shape", "attrs"), AVGPOOL_10_CASES)
def test_average_pool_ceil_mode(rng, opset, x_shape, attrs):
    x = rng.standard_normal(x_shape).astype(np.float32)
    model = pool_model("AveragePool", x_shape, opset, **attrs)
    assert_matches_onnxruntime(model, {"x": x}, **TOL)


@pytest.mark.parametrize("opset", [19, 22])
@pytest.mark.parametrize("count_include_pad", [0, 1])
def test_average_pool_dilations(rng, opset, count_include_pad):
    x = rng.standard_normal([1, 2, 9, 8]).astype(np.float32)
    model = pool_model("AveragePool", [1, 2, 9, 8], opset, kernel_shape=[3, 2],
                       dilations=[2, 3], pads=[1, 1, 2, 0], strides=[2, 1],
                       count_include_pad=count_include_pad)
    assert_matches_onnxruntime(model, {"x": x}, **TOL)


def test_average_pool_version_1_excludes_padding(rng):
    # onnxruntime has no AveragePool-1: compare with AveragePool-7's count_include_pad=0.
    x = rng.standard_normal([1, 2, 7, 7]).astype(np.float32)
    attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]}
    (ours,) = run_ep_host(pool_model("AveragePool", [1, 2, 7, 7], 6, **attrs), {"x": x})
    (seven,) = assert_matches_onnxruntime(pool_model("AveragePool", [1, 2, 7, 7], 7, **attrs),
                                          {"x": x}, **TOL)
    np.testing.assert_array_equal(ours, seven)


@pytest.mark.parametrize("opset", [9, 22])
@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
@pytest.mark.parametrize("shape", [[2, 3, 5], [2, 3, 4, 5], [1, 2, 3, 4, 5]])
def test_global_pools(rng, opset, op, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    assert_matches_onnxruntime(pool_model(op, shape, opset), {"x": x}, **TOL)


def lrn_model(opset, **attrs):
    node = helper.make_node("LRN", ["x"], ["y"], **attrs)
    return make_model([node], [("x", F, [2, 6, 4, 3])], [("y", F, None)], opset=opset)


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("attrs", [
    {"size": 5},
    {"size": 3, "alpha": 0.001, "beta": 0.5, "bias": 2.0},
    {"size": 1},
])
def test_lrn(rng, opset, attrs):
    x = rng.standard_normal([2, 6, 4, 3]).astype(np.float32) * 3
    assert_matches_onnxruntime(lrn_model(opset, **attrs), {"x": x}, **TOL)


@pytest.mark.parametrize("opset", [9, 13])
def test_lrn_even_size_sums_one_more_channel_after(rng, opset):
    # onnxruntime takes odd sizes only; the spec sums channels c - 1 ... c + 2 for size 4.
    x = rng.standard_normal([2, 6, 4, 3]).astype(np.float32) * 3
    (y,) = run_ep_host(lrn_model(opset, size=4, alpha=0.01, beta=0.75, bias=1.5), {"x": x})
    expected = np.empty_like(x)
    for c in range(6):
        window = x[:, max(0, c - 1):min(6, c + 3)]
        expected[:, c] = x[:, c] / (1.5 + 0.01 / 4 * (window**2).sum(axis=1)) ** 0.75
    np.testing.assert_allclose(y, expected, **TOL)


def flops(model):
    node = ep_host.load_model(model.SerializeToString()).graph.nodes[0]
    return REGISTRY.lookup(node).flops(node)


def test_flops():
    model = conv_model([2, 4, 8, 8], [6, 2, 3, 3], 22, group=2, pads=[1, 1, 1, 1])
    assert flops(model) == 2 * (2 * 6 * 8 * 8) * (2 * 3 * 3)
    model = pool_model("MaxPool", [1, 2, 8, 8], 22, kernel_shape=[2, 3], strides=[2, 2])
    assert flops(model) == (1 * 2 * 4 * 3) * 6


# -- declines ---------------------------------------------------------------------------------


def test_conv_declines_integer_input():
    model = conv_model([1, 2, 5, 5], [3, 2, 3, 3], 22, bias=False, elem=TensorProto.INT32)
    assert_declines(model, "dtype", "float16/float32/float64", "int32")


def test_conv_declines_a_group_that_does_not_divide_the_channels():
    model = conv_model([1, 4, 5, 5], [3, 2, 3, 3], 22, bias=False, group=2)
    assert_declines(model, "attribute", "multiple of group")


def test_conv_declines_an_input_smaller_than_the_kernel():
    model = conv_model([1, 2, 2, 2], [3, 2, 3, 3], 22, bias=False)
    assert_declines(model, "attribute", "kernel extent 3")


def test_pools_decline_pads_as_large_as_the_kernel():
    model = pool_model("MaxPool", [1, 2, 6, 6], 22, kernel_shape=[2, 2], pads=[2, 0, 0, 0])
    assert_declines(model, "attribute", "pads smaller than the kernel extent", "[2, 2]")


def test_pools_decline_negative_same_padding():
    model = pool_model("AveragePool", [1, 2, 6], 22, kernel_shape=[1], strides=[2],
                       auto_pad="SAME_UPPER")
    assert_declines(model, "attribute", "negative padding")


def test_pools_decline_an_unknown_auto_pad():
    model = pool_model("MaxPool", [1, 2, 6, 6], 22, kernel_shape=[2, 2], auto_pad="SAME")
    assert_declines(model, "attribute", "NOTSET/SAME_UPPER/SAME_LOWER/VALID", "'SAME'")


def test_pools_decline_rank_2_input():
    model = pool_model("MaxPool", [2, 6], 22, kernel_shape=[2])
    assert_declines(model, "shape", "rank >= 3")


def test_max_pool_declines_int8_before_version_12():
    model = pool_model("MaxPool", [1, 2, 6, 6], 11, elem=TensorProto.INT8, kernel_shape=[2, 2])
    assert_declines(model, "dtype", "float16/float32/float64", "int8")


def test_lrn_declines_integer_input():
    node = helper.make_node("LRN", ["x"], ["y"], size=3)
    model = make_model([node], [("x", TensorProto.INT32, [1, 4, 3, 3])],
                       [("y", TensorProto.INT32, None)], opset=13)
    assert_declines(model, "dtype", "float16/float32/float64")
