"""FastGelu (com.microsoft, the tanh form of Gelu) on large float32 tensors: numba's one pass
(``w sigmoid(2z)``) against the definition in float64 over float32's useful range, with and
without a bias, special values, the numpy passes it replaces, and onnxruntime."""

from __future__ import annotations

import math

import numpy as np
import pytest
from cpukit import make_model, run_ep_host, run_onnxruntime
from ep_host_cpu.fast_gelu import CompiledFastGelu
from onnx import TensorProto, helper

MS = "com.microsoft"
A = math.sqrt(2 / math.pi)
SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-30, 3.0, -3.0, -5.0, -10.0, -20.0, 30.0, 1e4, -1e4,
                    np.inf, np.nan], dtype=np.float32)


@pytest.fixture(scope="module")
def compiled():
    loop = CompiledFastGelu()
    if not loop.ready():
        pytest.skip("numba's loops are not available")
    return loop


def definition(x, bias=None):
    """0.5 w (1 + tanh(w (A + 0.044715 A w^2))) in float64, as its cancellation-free twin
    w / (1 + exp(-2z)) (the same function)."""
    w = (x if bias is None else x + bias).astype(np.float64)  # the bias added in float32
    z = w * (A + 0.044715 * A * w * w)
    with np.errstate(over="ignore", invalid="ignore"):
        return w / (1 + np.exp(-2 * z))


def assert_close(y, want, w):
    """Where the value is a normal float32: within 4e-7 of it relative to it (about 3 float32
    ulps), plus what rounding z to float32 (as the numpy passes and onnxruntime compute it too)
    moves exp(-2|z|) by: 2e-7 relative per unit of |2z|, about three roundings (w = -10:
    1.2e-5 measured). Where the sigmoid is below float32's smallest normal number it is 0 (as
    under flush-to-zero): within that times |w|."""
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(y[~finite]), np.isnan(want[~finite]))
    w = w.astype(np.float64)
    twice = np.abs(2 * w * (A + 0.044715 * A * w * w))
    tiny = np.finfo(np.float32).tiny
    normal = finite & (np.abs(want) >= tiny * np.maximum(np.abs(w), 1))
    err = np.abs(y[normal].astype(np.float64) - want[normal])
    assert (err <= (4e-7 + 2e-7 * twice[normal]) * np.abs(want[normal])).all()
    rest = finite & ~normal
    assert (np.abs(y[rest] - want[rest]) <= tiny * np.maximum(np.abs(w[rest]), 1)).all()


def test_values_over_the_useful_range_match_float64_without_and_with_a_bias(compiled, rng):
    x = np.concatenate([np.linspace(-12, 12, 2_000_000, dtype=np.float32), SPECIAL])
    assert compiled.takes(x, None)
    assert_close(compiled(x), definition(x), x)
    rows = rng.standard_normal((64, 3072), dtype=np.float32) * 4
    bias = rng.standard_normal(3072, dtype=np.float32)
    assert compiled.takes(rows, bias)
    y = compiled(rows, bias)
    assert y.shape == rows.shape and y.dtype == np.float32
    assert_close(y, definition(rows, bias), rows + bias)


def test_special_values(compiled):
    x = np.tile(SPECIAL, 2000)  # large enough for the compiled pass
    y = compiled(x)
    assert np.isnan(y[np.isnan(x)]).all()
    assert (y[x == np.inf] == np.inf).all()
    assert (y[x == -1e4] == 0).all() and np.signbit(y[x == -1e4]).all()  # -0.0
    assert (y[x == 0] == 0).all()


def test_small_or_other_inputs_are_left_to_the_numpy_passes(compiled, rng):
    small = rng.standard_normal(100, dtype=np.float32)
    assert not compiled.takes(small, None)
    big = rng.standard_normal((8, 4096), dtype=np.float32)
    assert not compiled.takes(big.astype(np.float16), None)
    assert not compiled.takes(big, np.ones(4095, np.float32))  # not the last axis' length
    assert not compiled.takes(big, np.ones((1, 4096), np.float32))


def fast_gelu_model(shape, with_bias):
    inputs = [("x", TensorProto.FLOAT, list(shape))]
    names = ["x"]
    if with_bias:
        inputs.append(("b", TensorProto.FLOAT, [shape[-1]]))
        names.append("b")
    node = helper.make_node("FastGelu", names, ["y"], domain=MS)
    return make_model([node], inputs, [("y", TensorProto.FLOAT, list(shape))],
                      domains=[(MS, 1)])


@pytest.mark.parametrize("with_bias", [False, True])
def test_a_session_runs_the_compiled_pass_and_matches_onnxruntime(compiled, rng, with_bias,
                                                                  monkeypatch):
    x = rng.standard_normal((2, 128, 768), dtype=np.float32) * 3
    feeds = {"x": x}
    if with_bias:
        feeds["b"] = rng.standard_normal(768, dtype=np.float32)
    model = fast_gelu_model(x.shape, with_bias)
    (ours,) = run_ep_host(model, feeds)
    (theirs,) = run_onnxruntime(model, feeds)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert_close(ours, definition(x, feeds.get("b")), x + feeds.get("b", 0))
    calls = []
    original = CompiledFastGelu.__call__

    def counted(self, *args, **kwargs):  # the real call, counted
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CompiledFastGelu, "__call__", counted)
    (again,) = run_ep_host(model, feeds)
    assert calls == [1]
    np.testing.assert_array_equal(again, ours)
