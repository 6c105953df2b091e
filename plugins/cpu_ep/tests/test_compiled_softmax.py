"""Softmax of float32 over the last axis: numba's compiled rows against float64, numpy's
passes (``EP_HOST_NUMBA=0``) and onnxruntime, NaN, infinities and huge spreads included."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import feeds_model, run_ep_host, run_onnxruntime
from ep_host_cpu.softmax import CompiledSoftmax
from ep_host_cpu.xp import numpy_xp

from ep_host.kernels.normalization import softmax


def reference(x):
    x = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("shape", [(1, 64, 2, 49, 49), (128, 1000), (3, 7, 4099), (8192, 1)])
def test_compiled_softmax_matches_float64_and_numpy(shape, rng, monkeypatch):
    x = (rng.standard_normal(shape) * 30).astype(np.float32)
    assert x.size >= CompiledSoftmax.MIN_SIZE and numpy_xp.compiled_softmax.ready()
    got = softmax(numpy_xp, x, axis=-1)
    want = reference(x)
    assert got.shape == x.shape and got.dtype == np.float32
    tiny = np.finfo(np.float32).tiny
    normal = want >= tiny
    # float32's x - max alone errs by an ulp of x: 30 * 4 sigma * 6e-8 relative in the result
    np.testing.assert_allclose(got[normal], want[normal], rtol=1e-5, atol=0)
    np.testing.assert_allclose(got[~normal], want[~normal], rtol=0, atol=tiny)
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    passes = softmax(numpy_xp, x, axis=-1)
    np.testing.assert_allclose(got, passes, rtol=1e-6, atol=tiny)  # the same float32 steps


def test_special_values_give_what_numpy_passes_give(monkeypatch):
    rows = np.full((64, 80), 0.5, dtype=np.float32)
    rows[1, 3] = np.nan
    rows[2, 5] = np.inf
    rows[3, :] = -np.inf
    rows[4, 7] = -np.inf
    rows[5, :] = 0
    rows[6, 0] = 1e30
    rows[7, :40] = -1e30
    rows[8, 9] = np.array([0xFFC00000], dtype=np.uint32).view(np.float32)[0]  # a NaN, sign set
    rows[9, :] = np.linspace(-70, -2, 80, dtype=np.float32)  # all negative: the maximum -2
    rows[9, 41] = -1.5
    rows[10, :] = -0.0
    rows[10, 3::7] = 0.0
    rows[11, :] = np.linspace(-1e-38, 1e-38, 80, dtype=np.float32)  # subnormal and normal keys
    got = softmax(numpy_xp, rows, axis=-1)
    assert np.isnan(got[8]).all() and np.isfinite(got[9]).all() and got[9].argmax() == 41
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    with np.errstate(invalid="ignore"):
        want = softmax(numpy_xp, rows, axis=-1)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_a_session_matches_onnxruntime(rng):
    x = (rng.standard_normal((1, 16, 4, 49, 49)) * 5).astype(np.float32)
    model = feeds_model("Softmax", {"x": x}, opset=13, axis=-1)
    (got,) = run_ep_host(model, {"x": x})
    (want,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_other_axes_and_log_softmax_take_numpy_passes(rng, monkeypatch):
    calls = []
    compiled = numpy_xp.compiled_softmax
    original = type(compiled).__call__
    monkeypatch.setattr(type(compiled), "__call__",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    x = rng.standard_normal((64, 128)).astype(np.float32)
    softmax(numpy_xp, x, axis=1)
    assert calls == [1]
    softmax(numpy_xp, x, axis=0)
    softmax(numpy_xp, x.astype(np.float64), axis=1)
    assert calls == [1]


@pytest.mark.parametrize("cols", [7, 16, 49, 256, 259])
def test_the_row_maximum_at_every_position(cols):
    """Each row's one large value at another column (the lanes of the partial sums see it in
    every lane and in the tail): exp(x - max) then never exceeds 1."""
    rows = max(cols, 4096 // cols + 1)
    x = np.tile(np.linspace(-3, 3, cols, dtype=np.float32), (rows, 1))
    x[np.arange(rows), np.arange(rows) % cols] = 80
    got = softmax(numpy_xp, x, axis=-1)
    want = reference(x)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-37)
    np.testing.assert_allclose(got.astype(np.float64).sum(axis=-1), 1, rtol=1e-6)


def test_a_small_softmax_takes_the_loop_only_where_no_build_is_needed(rng, tmp_path,
                                                                       monkeypatch):
    """Under MIN_SIZE values the loop is used where it is at hand (compiled in this process, or
    its module built on disk and imported then); where it is not, numpy's passes run and
    nothing is built."""
    small = rng.standard_normal((7, 3)).astype(np.float32)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # nothing built there
    fresh = CompiledSoftmax()
    assert not fresh.at_hand() and fresh._compiled is None
    assert not (tmp_path / "aot").exists()
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    assert numpy_xp.compiled_softmax.ready()  # built (or read back) where the others run
    fresh = CompiledSoftmax()
    assert fresh.at_hand()
    got = fresh(small)
    np.testing.assert_allclose(got, reference(small), rtol=1e-6, atol=0)
    calls = []
    original = type(numpy_xp.compiled_softmax).__call__
    monkeypatch.setattr(type(numpy_xp.compiled_softmax), "__call__",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    np.testing.assert_array_equal(softmax(numpy_xp, small, axis=-1), got)
    assert calls == [1]
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    assert not fresh.at_hand()
    np.testing.assert_allclose(softmax(numpy_xp, small, axis=-1), got, rtol=1e-6, atol=0)
    assert calls == [1]
