"""HardSigmoid and HardSwish on float32: numba's one-pass loop and numpy's passes
(``EP_HOST_NUMBA=0``), against the float64 definition and against onnxruntime on MobileNetV3's
shapes."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import feeds_model, run_ep_host, run_onnxruntime
from ep_host_cpu.hard_sigmoid import CompiledHardSigmoid
from ep_host_cpu.xp import numpy_xp

from ep_host.kernels.elementwise import hard_sigmoid, hard_swish

SPECIAL = np.array([0.0, -0.0, -3.0, 3.0, -2.9999998, 2.9999998, 1e-30, -1e30, 1e30, np.inf,
                    -np.inf, np.nan], dtype=np.float32)


@pytest.fixture(params=["numba", "numpy"])
def path(request, monkeypatch):
    monkeypatch.setenv("EP_HOST_NUMBA", "1" if request.param == "numba" else "0")
    return request.param


def definition(x, alpha, beta, times_x):
    x = x.astype(np.float64)
    y = np.clip(alpha * x + beta, 0, 1)
    with np.errstate(invalid="ignore"):
        return y * x if times_x else y


def test_hard_swish_and_hard_sigmoid_match_the_definition(path, rng):
    x = np.concatenate([np.linspace(-8, 8, 100_001, dtype=np.float32), SPECIAL,
                        rng.standard_normal(1000).astype(np.float32) * 100])
    with np.errstate(invalid="ignore"):
        swish = hard_swish(numpy_xp, x)
    np.testing.assert_allclose(swish, definition(x, 1 / 6, 0.5, True), rtol=3e-7, atol=1e-7)
    sig = hard_sigmoid(numpy_xp, x, alpha=0.2, beta=0.5)
    np.testing.assert_allclose(sig, definition(x, 0.2, 0.5, False), rtol=3e-7, atol=1e-7)
    assert np.isnan(swish[-1001]) and np.isnan(sig[-1001])  # NaN stays NaN
    assert swish.dtype == sig.dtype == np.float32 and swish.shape == x.shape


def test_the_compiled_loop_runs_only_on_the_numba_path(path, rng, monkeypatch):
    x = rng.standard_normal((2, 3, 4, 5), dtype=np.float32).transpose(0, 3, 1, 2) * 5
    calls = []
    original = CompiledHardSigmoid.__call__

    def counted(self, *args, **kwargs):  # the real call, counted
        calls.append(kwargs.get("times_x", False))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CompiledHardSigmoid, "__call__", counted)
    np.testing.assert_allclose(hard_swish(numpy_xp, x), definition(x, 1 / 6, 0.5, True),
                               rtol=3e-7, atol=1e-7)
    hard_sigmoid(numpy_xp, x, alpha=0.2, beta=0.5)
    hard_swish(numpy_xp, x.astype(np.float64))  # float64: numpy's passes
    assert calls == ([True, False] if path == "numba" else [])


@pytest.mark.parametrize("shape", [(1, 16, 112, 112), (1, 576, 7, 7), (1, 96, 1, 1)])
def test_mobilenet_v3_shapes_match_onnxruntime(path, rng, shape):
    x = rng.standard_normal(shape, dtype=np.float32) * 5
    for op, attrs in [("HardSwish", {}), ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5})]:
        model = feeds_model(op, {"x": x}, opset=14, **attrs)
        (got,) = run_ep_host(model, {"x": x})
        (want,) = run_onnxruntime(model, {"x": x})
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_into_the_donated_input_equals_a_new_array_bit_for_bit(path, rng):
    """The executor donates a dead input as the output (MobileNetV3's activations after each
    convolution): the same values as into a new array; a buffer that overlaps the input
    without being it is not written."""
    x = np.concatenate([rng.standard_normal(50_000).astype(np.float32) * 8, SPECIAL])
    for run in (lambda a, out: hard_swish(numpy_xp, a, out=out),
                lambda a, out: hard_sigmoid(numpy_xp, a, alpha=0.2, beta=0.5, out=out)):
        with np.errstate(invalid="ignore"):
            fresh = run(x, None)
            donated = x.copy()
            np.testing.assert_array_equal(run(donated, donated), fresh)
            wide = np.concatenate([x, x[:1]])
            shifted = wide[1:]  # overlaps wide[:-1] one element on
            before = wide.copy()
            y = run(wide[:-1], shifted)
            np.testing.assert_array_equal(y, fresh)
            assert y is not shifted
            np.testing.assert_array_equal(wide, before)
