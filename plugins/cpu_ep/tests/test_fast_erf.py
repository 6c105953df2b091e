"""The CPU EP's float32 erf (a fit evaluated in float32) against scipy.special.erf, and the Gelu
kernels that use it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from ep_host_cpu.erf import CHUNK, erf, erf_float32, gelu_float32
from ep_host_cpu.xp import numpy_xp

from ep_host.kernels import contrib, elementwise

MAX_ERROR = 1.8e-7  # three float32 ulps at 0.73, the worst of every float32 in [2^-20, 4.6]


def error(x):
    return np.abs(erf_float32(x).astype(np.float64) - scipy.special.erf(x).astype(np.float64))


def test_dense_grid_over_minus_10_to_10():
    x = np.linspace(-10, 10, 2_000_001, dtype=np.float32)
    assert error(x).max() <= MAX_ERROR


def test_random_bit_patterns_over_the_whole_float_range(rng):
    bits = rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    x = x[np.isfinite(x)]
    assert error(x).max() <= MAX_ERROR


def test_every_float32_near_the_worst_point_and_the_saturation():
    x = np.concatenate([np.float32(p) + np.arange(-5000, 5001, dtype=np.float32)
                        * np.spacing(np.float32(p)) for p in (0.73455256, 3.92, 4.5)])
    assert error(np.concatenate([x, -x])).max() <= MAX_ERROR


def test_special_values():
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-38, 1e-45, 1e30, -3e38],
                 dtype=np.float32)
    y = erf_float32(x)
    assert np.isnan(y[0])
    np.testing.assert_array_equal(y[1:3], [1.0, -1.0])
    assert y[3] == 0 and not np.signbit(y[3])
    assert y[4] == 0 and np.signbit(y[4])
    np.testing.assert_allclose(y[5:], scipy.special.erf(x[5:]), rtol=2.4e-7, atol=0)


def test_shapes_chunks_and_views(rng):
    x = rng.standard_normal((3, CHUNK + 17), dtype=np.float32) * 3
    np.testing.assert_allclose(erf(x), scipy.special.erf(x), rtol=0, atol=MAX_ERROR)
    view = x[:, ::3]
    assert erf(view).shape == view.shape
    np.testing.assert_allclose(erf(view), scipy.special.erf(view), rtol=0, atol=MAX_ERROR)
    assert erf(np.zeros((0, 4), np.float32)).shape == (0, 4)
    assert erf(np.float32(0.5).reshape(())).shape == ()


def test_other_types_go_to_scipy(rng):
    x = rng.standard_normal(100)
    np.testing.assert_array_equal(erf(x), scipy.special.erf(x))
    assert erf(x).dtype == np.float64
    h = x.astype(np.float16)
    assert numpy_xp.erf is erf
    y = elementwise.erf(numpy_xp, h)
    assert y.dtype == np.float16
    np.testing.assert_allclose(y.astype(np.float32), scipy.special.erf(h.astype(np.float32)),
                               atol=1e-3)


def reference_gelu(x):
    x = x.astype(np.float64)
    return 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_gelu_kernels_match_the_formula_and_leave_the_input_alone(rng, dtype):
    x = (rng.standard_normal((4, 257)) * 3).astype(dtype)
    before = x.copy()
    tol = {"float16": 2e-3, "float32": 5e-7, "float64": 1e-12}[np.dtype(dtype).name]
    for y in (elementwise.gelu(numpy_xp, x, approximate="none"), contrib.gelu(numpy_xp, x)):
        assert y.dtype == dtype and y.shape == x.shape
        np.testing.assert_allclose(y.astype(np.float64), reference_gelu(x), rtol=tol, atol=tol)
    np.testing.assert_array_equal(x, before)


def test_tanh_gelu_matches_its_formula(rng):
    x = rng.standard_normal(1000).astype(np.float32) * 4
    y = elementwise.gelu(numpy_xp, x, approximate="tanh")
    x64 = x.astype(np.float64)
    want = 0.5 * x64 * (1 + np.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n", [1, 1000, CHUNK + 17, 3 * CHUNK])
def test_chunked_gelu_equals_the_whole_array_formula_bit_for_bit(n):
    """The same float32 steps as gelu_of's erf form on the whole array, in chunks."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32) * 4
    x[::97] = np.nan
    want = erf_float32(x * (1 / math.sqrt(2)))
    want += 1
    want *= x
    want *= 0.5
    got = gelu_float32(x.reshape(1, -1))
    assert got.shape == (1, n) and got.dtype == np.float32
    np.testing.assert_array_equal(got.reshape(-1), want)
