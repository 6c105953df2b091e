"""MaxPool, AveragePool, LpPool and the global pools on the CPU EP: against onnxruntime, and
against the window-by-window definition for every geometry (one pass per spatial axis)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cpukit import (
    assert_declines,
    assert_matches_onnxruntime,
    cpu_answer,
    flops,
    make_model,
    node_model,
    randn,
    run_ep_host,
)
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper

from ep_host.kernels import pool as pool_kernels

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}


def pool_model(op, x_shape, opset, elem=F, indices=False, **attrs):
    outputs = [("y", elem, None)] + ([("i", TensorProto.INT64, None)] if indices else [])
    node = helper.make_node(op, ["x"], [n for n, _, _ in outputs], **attrs)
    return make_model([node], [("x", elem, x_shape)], outputs, opset=opset)


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


@pytest.mark.parametrize("shape", [[1, 96, 112, 112], [1, 144, 56, 56], [1, 1152, 7, 7],
                                   [2, 3, 1, 1]])
def test_global_average_pool_of_squeeze_excite_shapes(rng, shape):
    """Channel means far from zero (the hard case for a float32 sum) against float64 and
    onnxruntime."""
    x = (rng.standard_normal(shape) + rng.uniform(-10, 10, (shape[0], shape[1], 1, 1))).astype(
        np.float32)
    # onnxruntime's own float32 sums are off by up to 4.4e-6 here (relative to float64)
    (y,) = assert_matches_onnxruntime(pool_model("GlobalAveragePool", shape, 22), {"x": x},
                                      rtol=1e-5, atol=1e-6)
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    assert y.shape == want.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=5e-7, atol=1e-6)


def test_global_average_pool_of_a_strided_input_and_of_nothing():
    x = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5).transpose(0, 1, 3, 2)
    np.testing.assert_array_equal(pool_kernels.global_average_pool(numpy_xp, x),
                                  x.mean(axis=(2, 3), keepdims=True))
    with np.errstate(invalid="ignore"), pytest.warns(RuntimeWarning):
        empty = pool_kernels.global_average_pool(numpy_xp, np.zeros((1, 2, 0, 3), np.float32))
    assert empty.shape == (1, 2, 1, 1) and np.isnan(empty).all()


def test_pool_flops():
    model = pool_model("MaxPool", [1, 2, 8, 8], 22, kernel_shape=[2, 3], strides=[2, 2])
    assert flops(model) == (1 * 2 * 4 * 3) * 6


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


@pytest.mark.parametrize("opset", [11, 18, 22])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "p": 3},
                                   {"kernel_shape": [2, 3], "p": 1, "strides": [2, 1],
                                    "pads": [1, 1, 0, 2]},
                                   {"kernel_shape": [3, 2], "p": 2, "auto_pad": "SAME_UPPER"}])
def test_lp_pool_matches_onnxruntime(rng, opset, attrs):
    model = node_model("LpPool", [("x", [1, 2, 6, 6])], ["y"], opset, **attrs)
    assert_matches_onnxruntime(model, {"x": randn(rng, 1, 2, 6, 6)}, **TOL)


def test_lp_pool_18_ceil_mode_and_dilations_match_onnxruntime(rng):
    model = node_model("LpPool", [("x", [1, 2, 7, 7])], ["y"], 18, kernel_shape=[2, 2], p=2,
                       ceil_mode=1, strides=[2, 2], dilations=[2, 1])
    assert_matches_onnxruntime(model, {"x": randn(rng, 1, 2, 7, 7)}, **TOL)


def test_lp_pool_declines():
    model = node_model("LpPool", [("x", [1, 2, 6, 6])], ["y"], 2, kernel_shape=[2, 2], p=2,
                       strides=[2, 2], auto_pad="SAME_UPPER")
    assert_declines(model, "attribute", "LpPool-2", "ambiguous")
    model = node_model("LpPool", [("x", [1, 2, 6, 6])], ["y"], 22, kernel_shape=[2, 2], p=0)
    assert_declines(model, "attribute", "p must be positive")


@pytest.mark.parametrize(("opset", "p"), [(1, 3.0), (2, 3), (22, 1)])
def test_global_lp_pool_is_the_norm_over_space(rng, opset, p):
    x = randn(rng, 2, 3, 4, 5)
    (y,) = run_ep_host(node_model("GlobalLpPool", [("x", [2, 3, 4, 5])], ["y"], opset, p=p),
                       {"x": x})
    want = (np.abs(x.astype(np.float64)) ** p).sum(axis=(2, 3), keepdims=True) ** (1 / p)
    np.testing.assert_allclose(y, want, **TOL)


def window_pool(x, kernel, strides, dilations, pads, ceil_mode, reduce, include_pad=False):
    """Each output from its own window, taps inside the input only (with count_include_pad
    the padded taps inside the explicit pads count as zeros)."""
    ns = len(kernel)
    spatial = x.shape[2:]
    out = []
    for i in range(ns):
        span = spatial[i] + pads[i] + pads[i + ns] - ((kernel[i] - 1) * dilations[i] + 1)
        o = (-(-span // strides[i]) if ceil_mode else span // strides[i]) + 1
        if ceil_mode and (o - 1) * strides[i] >= spatial[i] + pads[i]:
            o -= 1
        out.append(o)
    y = np.empty(x.shape[:2] + tuple(out), dtype=np.float64)
    for pos in itertools.product(*(range(o) for o in out)):
        values, count = [], 0
        for tap in itertools.product(*(range(k) for k in kernel)):
            idx = [p * s - pads[i] + t * d for i, (p, s, t, d) in
                   enumerate(zip(pos, strides, tap, dilations, strict=True))]
            inside = all(0 <= j < n for j, n in zip(idx, spatial, strict=True))
            in_pads = all(-pads[i] <= j < spatial[i] + pads[i + ns] for i, j in enumerate(idx))
            if inside:
                values.append(x[(Ellipsis, *idx)].astype(np.float64))
                count += 1
            elif include_pad and in_pads:
                count += 1
        stack = np.stack(values)
        y[(Ellipsis, *pos)] = stack.max(axis=0) if reduce == "max" else stack.sum(axis=0) / count
    return y


GEOMETRIES = [
    ((2, 3, 8, 8), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0), 0),
    ((1, 3, 9, 9), (3, 3), (2, 2), (1, 1), (0, 0, 1, 1), 0),
    ((1, 2, 7, 7), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 0),
    ((1, 2, 10, 9), (3, 2), (2, 3), (2, 1), (1, 0, 2, 1), 1),
    ((1, 2, 11), (4,), (3,), (1,), (1, 2), 1),
    ((1, 2, 5, 6, 7), (2, 3, 2), (1, 2, 2), (1, 1, 2), (0, 1, 1, 1, 0, 1), 0),
    ((1, 4, 7, 7), (7, 7), (1, 1), (1, 1), (0, 0, 0, 0), 0),
]


@pytest.mark.parametrize(("shape", "kernel", "strides", "dilations", "pads", "ceil"),
                         GEOMETRIES)
def test_max_pool_equals_its_windows(rng, shape, kernel, strides, dilations, pads, ceil):
    x = rng.standard_normal(shape, dtype=np.float32)
    before = x.copy()
    y = pool_kernels.max_pool(numpy_xp, x, auto_pad="NOTSET", kernel_shape=kernel,
                              strides=strides, dilations=dilations, pads=pads, ceil_mode=ceil)
    want = window_pool(x, kernel, strides, dilations, pads, ceil, "max")
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_array_equal(y, want.astype(np.float32))
    np.testing.assert_array_equal(x, before)
    assert not np.shares_memory(y, x)


@pytest.mark.parametrize("include_pad", [0, 1])
@pytest.mark.parametrize(("shape", "kernel", "strides", "dilations", "pads", "ceil"),
                         GEOMETRIES)
def test_average_pool_equals_its_windows(rng, shape, kernel, strides, dilations, pads, ceil,
                                         include_pad):
    x = rng.standard_normal(shape, dtype=np.float32)
    y = pool_kernels.average_pool(numpy_xp, x, auto_pad="NOTSET", kernel_shape=kernel,
                                  strides=strides, dilations=dilations, pads=pads,
                                  ceil_mode=ceil, count_include_pad=include_pad)
    want = window_pool(x, kernel, strides, dilations, pads, ceil, "avg", bool(include_pad))
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_max_pool_of_int8_and_a_1x1_window_copies(rng):
    x = rng.integers(-128, 127, (1, 2, 5, 5)).astype(np.int8)
    y = pool_kernels.max_pool(numpy_xp, x, auto_pad="NOTSET", kernel_shape=(1, 1))
    np.testing.assert_array_equal(y, x)
    assert y.dtype == np.int8 and not np.shares_memory(y, x)
    y = pool_kernels.max_pool(numpy_xp, x, auto_pad="NOTSET", kernel_shape=(2, 2),
                              pads=(1, 1, 1, 1), strides=(2, 2))
    np.testing.assert_array_equal(
        y, window_pool(x, (2, 2), (2, 2), (1, 1), (1, 1, 1, 1), 0, "max").astype(np.int8))
