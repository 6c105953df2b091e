"""MaxPool and AveragePool 3 x 3 at stride 1 on float32: numba's loops against numpy's passes
(MaxPool's values equal, NaN and infinities included, to the bit but for a tie between -0 and
+0, which numpy's own vector and scalar loops keep differently; AveragePool's to the bit, signed
zeros included, for either divisor rule), over the flat pass of "same" padding and the row
loop of every other geometry, and against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_matches_onnxruntime, make_model
from ep_host_cpu.average_pool import CompiledAveragePool3x3s1
from ep_host_cpu.max_pool import SAME_BLOCK, CompiledMaxPool3x3s1
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper

from ep_host.kernels.pool import average_pool, max_pool

SAME = [1, 1, 1, 1]
GEOMETRIES = [
    ((1, 192, 28, 28), {"pads": SAME, "ceil_mode": 1}),  # GoogLeNet's
    ((1, 170, 7, 7), {"pads": SAME}),  # blocks of SAME_BLOCK // 49 planes and a rest
    ((1, 2, 91, 92), {"pads": SAME}),  # a plane over SAME_BLOCK floats: one at a time
    ((2, 3, 2, 2), {"pads": SAME}),
    ((1, 3, 2, 5), {"pads": SAME}),
    ((1, 3, 5, 2), {"pads": SAME}),
    ((1, 2, 1, 1), {"pads": SAME}),  # the row loop from here on
    ((1, 2, 1, 6), {"pads": SAME}),
    ((1, 2, 6, 1), {"pads": SAME}),
    ((1, 2, 6, 7), {}),
    ((1, 2, 9, 8), {"pads": [0, 1, 1, 0], "ceil_mode": 1}),
    ((1, 2, 8, 9), {"pads": [1, 0, 0, 1]}),
    ((1, 2, 5, 4), {"pads": [2, 2, 2, 2]}),
    ((1, 2, 4, 5), {"pads": [2, 0, 1, 2], "ceil_mode": 1}),
    ((1, 3, 7, 6), {"auto_pad": "SAME_UPPER"}),
    ((1, 3, 6, 6), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), {"auto_pad": "VALID"}),
]


def attributes(attrs):
    return {"auto_pad": "NOTSET", **attrs, "kernel_shape": [3, 3], "strides": [1, 1]}


def special_values(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    count = min(flat.size, 60)
    picks = rng.choice(flat.size, size=count, replace=False)
    flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32), count)
    x[..., :1, :] = np.float32(-0.0)  # rows of signed zeros, edge ones and inside ones
    x[..., 2:3, :] = np.float32(0.0)
    x[..., :, -1:] = np.float32(-0.0)
    return x


def counted(monkeypatch, cls):
    calls = []
    original = cls.__call__

    def call(self, *args):  # the real call, counted
        calls.append(args)
        return original(self, *args)

    monkeypatch.setattr(cls, "__call__", call)
    return calls


def numpys_and_compiled(monkeypatch, pool, cls, x, kwargs):
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    with np.errstate(invalid="ignore"):  # inf - inf in numpy's sums
        want = pool(numpy_xp, x, **kwargs)
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    calls = counted(monkeypatch, cls)
    got = pool(numpy_xp, x, **kwargs)
    assert len(calls) == 1
    assert got.shape == want.shape and got.dtype == want.dtype
    return want, got


def test_same_padding_blocks_cover_the_cases_named():
    assert 170 > SAME_BLOCK // 49 and 170 % (SAME_BLOCK // 49) and 91 * 92 > SAME_BLOCK


@pytest.mark.parametrize(("shape", "attrs"), GEOMETRIES)
def test_the_compiled_max_pool_equals_numpys_passes(rng, monkeypatch, shape, attrs):
    x = special_values(rng, shape)
    want, got = numpys_and_compiled(monkeypatch, max_pool, CompiledMaxPool3x3s1, x,
                                    attributes(attrs))
    np.testing.assert_array_equal(got, want)  # NaN where numpy has NaN, -0 == +0
    bits = (want != 0) & ~np.isnan(want)  # and to the bit but for ties of signed zeros
    np.testing.assert_array_equal(got.view(np.uint32)[bits], want.view(np.uint32)[bits])


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize(("shape", "attrs"), GEOMETRIES)
def test_the_compiled_average_pool_equals_numpys_passes(rng, monkeypatch, shape, attrs,
                                                        count_include_pad):
    x = special_values(rng, shape)
    kwargs = {**attributes(attrs), "count_include_pad": count_include_pad}
    want, got = numpys_and_compiled(monkeypatch, average_pool, CompiledAveragePool3x3s1, x,
                                    kwargs)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    values = ~np.isnan(want)  # every other value to the bit, signed zeros included
    np.testing.assert_array_equal(got.view(np.uint32)[values], want.view(np.uint32)[values])


def test_a_float16_average_pool_runs_compiled_in_float32(rng, monkeypatch):
    x = rng.standard_normal((1, 4, 9, 9)).astype(np.float16)
    want, got = numpys_and_compiled(monkeypatch, average_pool, CompiledAveragePool3x3s1, x,
                                    {**attributes({"pads": SAME}), "count_include_pad": 1})
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize(("shape", "attrs"), GEOMETRIES[:1] + GEOMETRIES[3:5] + GEOMETRIES[9:])
def test_the_compiled_max_pool_matches_onnxruntime(rng, shape, attrs):
    x = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attributes(attrs))
    model = make_model([node], [("x", TensorProto.FLOAT, list(shape))],
                       [("y", TensorProto.FLOAT, None)], opset=12)
    assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize(("shape", "attrs"), [((1, 288, 35, 35), {"pads": SAME}),
                                              ((1, 5, 8, 8), {"pads": SAME}),
                                              ((1, 2, 9, 8), {"pads": [0, 1, 1, 0]})])
def test_the_compiled_average_pool_matches_onnxruntime(rng, shape, attrs, count_include_pad):
    x = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node("AveragePool", ["x"], ["y"], count_include_pad=count_include_pad,
                            **attributes(attrs))
    model = make_model([node], [("x", TensorProto.FLOAT, list(shape))],
                       [("y", TensorProto.FLOAT, None)], opset=19)
    # onnxruntime divides the sum by the count, numpy's passes multiply by its inverse
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-6, atol=1e-6)


def test_other_windows_types_and_indices_stay_on_numpys_passes(rng, monkeypatch):
    calls = []
    for cls in (CompiledMaxPool3x3s1, CompiledAveragePool3x3s1):
        monkeypatch.setattr(cls, "__call__",
                            lambda self, *args: calls.append(args) or pytest.fail("compiled"))
    x = rng.standard_normal((1, 2, 9, 9)).astype(np.float32)
    base = {"auto_pad": "NOTSET", "kernel_shape": [3, 3], "strides": [1, 1], "pads": SAME}
    for pool in (max_pool, average_pool):
        pool(numpy_xp, x, **{**base, "kernel_shape": [2, 2], "pads": [0, 0, 0, 0]})
        pool(numpy_xp, x, **{**base, "strides": [1, 2]})
        pool(numpy_xp, x, **{**base, "dilations": [2, 2]})
        pool(numpy_xp, x.astype(np.float64), **base)
        pool(numpy_xp, x[:, :, :, :, None].repeat(3, axis=4),
             **{**base, "kernel_shape": [3, 3, 3], "strides": [1, 1, 1], "pads": [1] * 6})
    max_pool(numpy_xp, x, **base, with_indices=True)
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    max_pool(numpy_xp, x, **base)
    average_pool(numpy_xp, x, **base)
    assert calls == []
