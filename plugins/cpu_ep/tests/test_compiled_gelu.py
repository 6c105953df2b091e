"""The erf Gelu of float32 (``xp.gelu_float32``): numba's compiled pass within 4 float32 ulps of
float64 Gelu wherever the result is a normal float32, numpy's passes (``EP_HOST_NUMBA=0``, small
arrays) within their erf's absolute error; special values, and both against onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.special
from cpukit import feeds_model, make_model, run_ep_host, run_onnxruntime
from ep_host_cpu.erf import gelu_float32 as numpy_gelu_float32
from ep_host_cpu.gelu import GeluFloat32
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper

from ep_host.kernels import contrib, elementwise

TINY = float(np.finfo(np.float32).tiny)
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, -1e-30, 1e-38, -1e-38, 1e-40,
                    -1e-40, 1e-45, -1e-45, 1e30, -1e30, 3e38, -3e38, 14.8, -14.8, -15.0, -100.0],
                   dtype=np.float32)


@pytest.fixture(params=["numba", "numpy"])
def path(request, monkeypatch):
    monkeypatch.setenv("EP_HOST_NUMBA", "1" if request.param == "numba" else "0")
    return request.param


def reference(x):
    """float64 Gelu, ``x erfc(-x / sqrt 2) / 2``: ``1 + erf`` would cancel for x < 0 (at -13
    it is 2e-39, and float64's 1 + erf(-9.2) is 0)."""
    with np.errstate(invalid="ignore"):  # signalling NaNs among random bit patterns
        x = x.astype(np.float64)
        return np.where(x == -np.inf, 0.0, 0.5 * x * scipy.special.erfc(-x / math.sqrt(2)))


def large(x):
    """x repeated up to a size that takes the compiled pass, and the function giving back the
    first ``x.size`` values of a result."""
    reps = -(-GeluFloat32.MIN_SIZE // x.size)
    return np.tile(x, reps), lambda y: y[:x.size]


def check(y, x, path):
    want = reference(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    nan = np.isnan(x)
    assert np.isnan(y[nan]).all() and not np.isnan(y[~nan]).any()
    assert (y[x == np.inf] == np.inf).all() and (y[x == -np.inf] == 0).all()
    normal = np.isfinite(x) & (np.abs(want) >= TINY)
    got, want_normal = y[normal].astype(np.float64), want[normal]
    if path == "numba":
        ulp = np.spacing(np.abs(want_normal.astype(np.float32))).astype(np.float64)
        assert (np.abs(got - want_normal) / ulp).max() <= 4
    else:  # erf's fit: 1.8e-7 absolute, times |x| / 2, and the float32 roundings
        bound = 1.2e-7 * np.abs(x[normal]) + 2.4e-7 * np.abs(want_normal) + TINY
        assert (np.abs(got - want_normal) <= bound).all()
    # below float32's smallest normal number: the value, or 0 as under flush-to-zero
    tail = ~nan & ~normal & np.isfinite(x)
    assert (np.abs(y[tail].astype(np.float64) - want[tail]) <= TINY).all()


def test_a_dense_sweep_over_minus_10_to_10(path):
    x = np.linspace(-10, 10, 2_000_001, dtype=np.float32)
    check(numpy_xp.gelu_float32(x), x, path)


def test_the_negative_tail_down_to_the_smallest_normal_result(path):
    x = np.linspace(-15, -9, 600_001, dtype=np.float32)
    y = numpy_xp.gelu_float32(x)
    check(y, x, path)
    if path == "numba":  # numpy's erf is -1 below x = -6.4: its Gelu is 0 there
        assert (y[x < -13] < 0).any() and (y[x <= -9] < 0).sum() > 500_000


def test_every_float32_near_zero_and_near_one(path):
    x = np.concatenate([np.float32(p) + np.arange(-20_000, 20_001, dtype=np.float32)
                        * np.spacing(np.float32(p)) for p in (1e-3, 0.5, 1.0, 3.0)])
    check(numpy_xp.gelu_float32(np.concatenate([x, -x])), np.concatenate([x, -x]), path)


def test_random_bit_patterns_over_the_whole_float_range(path, rng):
    bits = rng.integers(0, 2**32, 1_000_000, dtype=np.uint64).astype(np.uint32)
    x = bits.view(np.float32)
    with np.errstate(invalid="ignore"):  # signalling NaNs
        y = numpy_xp.gelu_float32(x)
    check(y, x, path)


def test_special_values(path):
    x, first = large(SPECIAL)
    y = first(numpy_xp.gelu_float32(x))
    check(y, SPECIAL, path)
    assert np.isnan(y[0])
    assert y[1] == np.inf
    assert y[2] == 0 and y[3] == 0 and y[4] == 0
    np.testing.assert_array_equal(y[[5, 6]], SPECIAL[[5, 6]] / 2)
    np.testing.assert_array_equal(y[[13, 15]], SPECIAL[[13, 15]])
    assert (y[[14, 16, 19, 20]] == 0).all()
    assert abs(y[11]) <= 1.5e-45 and abs(y[12]) <= 1.5e-45


def test_the_compiled_pass_runs_only_on_large_arrays_on_the_numba_path(path, rng, monkeypatch):
    calls = []
    gelu = numpy_xp.gelu_float32
    ready = GeluFloat32.ready

    def counted(self):  # the real check, counted when it says yes
        answer = ready(self)
        calls.append(answer)
        return answer

    monkeypatch.setattr(GeluFloat32, "ready", counted)
    small = rng.standard_normal(GeluFloat32.MIN_SIZE - 1, dtype=np.float32) * 4
    np.testing.assert_array_equal(gelu(small), numpy_gelu_float32(small))
    assert calls == []
    big = rng.standard_normal((4, GeluFloat32.MIN_SIZE), dtype=np.float32) * 4
    y = gelu(big)
    assert calls == [path == "numba"]
    if path == "numpy":
        np.testing.assert_array_equal(y, numpy_gelu_float32(big))
    check(y, big, path)


def test_strided_input_left_alone_and_the_kernels_use_it(path, rng):
    x = (rng.standard_normal((300, 400), dtype=np.float32) * 5).T
    keep = x.copy()
    for y in (elementwise.gelu(numpy_xp, x, approximate="none"), contrib.gelu(numpy_xp, x)):
        assert y.shape == x.shape
        check(y, keep, path)
    np.testing.assert_array_equal(x, keep)


def test_gelu_models_match_onnxruntime(path, rng):
    x = rng.standard_normal((1, 64, 56, 56), dtype=np.float32) * 4
    shape = list(x.shape)
    contrib_model = make_model([helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")],
                               [("x", TensorProto.FLOAT, shape)],
                               [("y", TensorProto.FLOAT, shape)], opset=17,
                               domains=[("com.microsoft", 1)])
    for model in (contrib_model, feeds_model("Gelu", {"x": x}, opset=20)):
        (got,) = run_ep_host(model, {"x": x})
        check(got, x, path)
        (want,) = run_onnxruntime(model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
