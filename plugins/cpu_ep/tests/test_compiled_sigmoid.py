"""Sigmoid on large float32 tensors: numba's compiled loop (its own exponential) and numpy's
passes (``EP_HOST_NUMBA=0``), against float64 over float32's whole useful range."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import feeds_model, run_ep_host
from ep_host_cpu.sigmoid import CompiledSigmoid
from ep_host_cpu.xp import numpy_xp

from ep_host.kernels.elementwise import sigmoid
from ep_host.tracing import Tracer

SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-45, 87.0, -87.0, -88.5, -103.0, -104.0, -105.0,
                    -1000.0, 1000.0, 17.0, -17.0, np.inf, -np.inf, np.nan], dtype=np.float32)


@pytest.fixture(params=["numba", "numpy"])
def path(request, monkeypatch):
    monkeypatch.setenv("EP_HOST_NUMBA", "1" if request.param == "numba" else "0")
    return request.param


def reference(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x.astype(np.float64)))


def check(y, x):
    want = reference(x)
    assert y.dtype == np.float32 and y.shape == x.shape
    finite = ~np.isnan(x)
    assert np.isnan(y[~finite]).all()
    tiny = np.finfo(np.float32).tiny
    normal = want[finite] >= tiny
    np.testing.assert_allclose(y[finite][normal], want[finite][normal], rtol=4e-7, atol=0)
    # below float32's smallest normal number: the value, or 0 as under flush-to-zero
    np.testing.assert_allclose(y[finite][~normal], want[finite][~normal], rtol=0, atol=tiny)


def test_float32s_over_the_whole_range_match_float64(path):
    x = np.concatenate([np.linspace(-110, 110, 400_001, dtype=np.float32), SPECIAL])
    (y,) = run_ep_host(feeds_model("Sigmoid", {"x": x}, opset=13), {"x": x})
    check(y, x)


def test_the_large_float32_case_runs_compiled_only_on_the_numba_path(path, rng, monkeypatch):
    x = rng.standard_normal((4, CompiledSigmoid.MIN_SIZE), dtype=np.float32) * 8
    calls = []
    original = CompiledSigmoid.__call__

    def counted(self, *args, **kwargs):  # the real call, counted
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CompiledSigmoid, "__call__", counted)
    y = sigmoid(numpy_xp, x)
    assert len(calls) == (1 if path == "numba" else 0)
    check(y, x)


def test_values_around_the_smallest_normal_result(path):
    x = np.float32(-87.33654) + np.arange(-200, 200, dtype=np.float32) * np.float32(8e-6)
    y = sigmoid(numpy_xp, np.tile(x, 50))[:400]  # large enough for the compiled loop
    check(y, x)
    assert (y[x > -87.3365] > 0).all()


def test_in_place_and_into_a_donated_buffer(rng):
    x = rng.standard_normal((3, 7, 1000), dtype=np.float32) * 30
    x[0, 0, :4] = [np.nan, np.inf, -np.inf, -0.0]
    keep = x.copy()
    out = np.empty_like(x)
    assert sigmoid(numpy_xp, x, out=out) is out
    check(out, keep)
    assert sigmoid(numpy_xp, x, out=x) is x  # the executor donates the input when it is dead
    check(x, keep)


def test_a_strided_input(rng):
    x = rng.standard_normal((200, 300), dtype=np.float32).T * 10
    with Tracer().span("s"):
        check(sigmoid(numpy_xp, x), x)
