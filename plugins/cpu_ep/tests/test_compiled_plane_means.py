"""GlobalAveragePool on float32 planes: numba's loop against ``numpy.mean`` to the bit on short
planes (numpy's pairwise order at lengths around its unroll of 8 and up to its block of 128;
values that cancel, huge and tiny values, signed zeros, NaN and infinities), against float64
means on long ones (equal planes, equal means), whether it is asked, and against onnxruntime
through a session."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_matches_onnxruntime, make_model
from ep_host_cpu.global_mean import LANES, MAX_PLANE, CompiledPlaneMeans
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper

from ep_host.kernels.pool import global_average_pool


@pytest.fixture
def compiled():
    means = numpy_xp.compiled_plane_means
    numpy_xp.grouped_conv2d.ready("float32")  # a compiled kernel in use: the loop is asked
    assert means.ready()
    return means


def bits(a):
    return np.ascontiguousarray(a).view(np.int32)


@pytest.mark.parametrize("plane", [(1, 1), (1, 7), (2, 4), (3, 3), (1, 9), (4, 4), (5, 5),
                                   (7, 7), (3, 17), (10, 10), (9, 13), (8, 16)])
@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e10, 3e37])
def test_the_means_equal_numpys_to_the_bit(rng, compiled, plane, scale):
    x = (rng.standard_normal((2, 37) + plane) * scale
         + rng.standard_normal((2, 37, 1, 1)) * scale).astype(np.float32)
    want = np.mean(x, axis=(2, 3), keepdims=True)
    got = compiled(x)
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_array_equal(bits(got), bits(want))


def test_special_values_equal_numpys(rng, compiled):
    x = rng.standard_normal((1, 6, 7, 7)).astype(np.float32)
    x[0, 0] = -0.0  # all negative zeros
    x[0, 1, 3, 3] = np.nan
    x[0, 2, 0, 0] = np.inf
    x[0, 3, 1, 1], x[0, 3, 2, 2] = np.inf, -np.inf
    x[0, 4] = 3e38  # the sum overflows float32: inf, as numpy's does
    x[0, 5] = np.where(np.arange(49).reshape(7, 7) % 2, 1e8, -1e8)  # cancelling
    want = np.mean(x, axis=(2, 3), keepdims=True)
    with np.errstate(over="ignore"):
        got = compiled(x)
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("shape", [(1, 576, 7, 7), (2, 96, 8, 8), (1, 5, 2, 3, 4), (1, 3, 9),
                                   (1, 4, 14, 14)])
def test_the_library_kernel_asks_for_contiguous_float32(rng, compiled, monkeypatch, shape):
    calls = []
    original = CompiledPlaneMeans.__call__
    monkeypatch.setattr(CompiledPlaneMeans, "__call__",
                        lambda self, x: calls.append(x.shape) or original(self, x))
    x = rng.standard_normal(shape).astype(np.float32)
    got = global_average_pool(numpy_xp, x)
    want = np.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert calls == [shape]
    calls.clear()
    global_average_pool(numpy_xp, x.astype(np.float64))
    global_average_pool(numpy_xp, x[:, ::-1])  # not C-contiguous
    assert calls == []


@pytest.mark.parametrize("length", [MAX_PLANE + 1, 169, 196, 2 * LANES + 1, 3 * LANES + 63, 784,
                                    3136, 12544])
@pytest.mark.parametrize("scale", [1e-30, 1.0, 1e10, 1e33])  # sums short of float32's overflow
def test_long_planes_are_float64_means_rounded_and_equal_planes_equal(rng, compiled, length,
                                                                     scale):
    x = (rng.standard_normal((2, 19, length)) * scale
         + rng.standard_normal((2, 19, 1)) * scale).astype(np.float32)
    x[1, 5:] = x[1, 4]  # equal planes
    got = compiled(x)
    want = x.astype(np.float64).mean(axis=2, keepdims=True)
    spread = np.abs(x.astype(np.float64)).mean(axis=2, keepdims=True)  # what rounding scales with
    assert got.shape == want.shape and got.dtype == np.float32
    assert np.all(np.abs(got - want) <= 1e-6 * spread + 1e-45)
    assert np.unique(bits(got[1, 4:])).size == 1


def test_long_planes_special_values(rng, compiled):
    x = rng.standard_normal((1, 6, 300)).astype(np.float32)
    x[0, 0] = -0.0  # all negative zeros: +0.0, as numpy's sum (its identity is +0.0)
    x[0, 1, 257] = np.nan  # past the last whole run of partial sums
    x[0, 2, 3] = np.inf
    x[0, 3, 1], x[0, 3, 2] = np.inf, -np.inf
    x[0, 4] = 3e38  # the sum overflows float32
    x[0, 5] = np.where(np.arange(300) % 2, 1e8, -1e8)  # cancelling exactly
    with np.errstate(over="ignore", invalid="ignore"):
        got = compiled(x).reshape(6)
    assert bits(got[0]) == bits(np.float32(0.0))
    assert np.isnan(got[1]) and got[2] == np.inf and np.isnan(got[3])
    assert got[4] == np.inf and got[5] == 0.0


def test_a_session_matches_onnxruntime(rng):
    x = rng.standard_normal((1, 64, 7, 7)).astype(np.float32)
    node = helper.make_node("GlobalAveragePool", ["x"], ["y"])
    model = make_model([node], [("x", TensorProto.FLOAT, list(x.shape))],
                       [("y", TensorProto.FLOAT, None)], opset=17)
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-6, atol=1e-6)
