"""MaxPool and AveragePool run as one pass per spatial axis; they must equal the window-by-window
definition for every geometry (pads, strides, dilations, ceil mode, count_include_pad)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from ep_host.kernels import pool as pool_kernels
from ep_host_cpu.xp import numpy_xp


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
