"""Sigmoid and SiLU (``x * sigmoid(x)``, fused to QuickGelu with alpha 1) on large float32
tensors: numba's compiled loop (its own exponential) and numpy's passes (``EP_HOST_NUMBA=0``),
against float64 over float32's whole useful range and against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import feeds_model, make_model, run_ep_host, run_onnxruntime
from ep_host_cpu.sigmoid import CompiledSigmoid
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper

from ep_host.kernels.contrib import quick_gelu
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


def test_in_place_equals_a_new_array_bit_for_bit(path, rng):
    """The executor donates a dead input as the output (EfficientNet's SiLU after each
    depthwise convolution): the same values as into a new array, for Sigmoid and SiLU."""
    x = rng.standard_normal((1, 96, 35, 35), dtype=np.float32) * 20
    x[0, 0, 0, :5] = [np.nan, np.inf, -np.inf, -0.0, -100.0]
    for run in (lambda a, out: sigmoid(numpy_xp, a, out=out),
                lambda a, out: quick_gelu(numpy_xp, a, alpha=1.0, out=out)):
        with np.errstate(invalid="ignore"):  # -inf * sigmoid(-inf): NaN
            fresh = run(x, None)
            donated = x.copy()
            np.testing.assert_array_equal(run(donated, donated), fresh)


def test_a_strided_input(rng):
    x = rng.standard_normal((200, 300), dtype=np.float32).T * 10
    with Tracer().span("s"):
        check(sigmoid(numpy_xp, x), x)


def silu_model(shape):
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Mul", ["x", "s"], ["y"])]
    return make_model(nodes, [("x", TensorProto.FLOAT, list(shape))],
                      [("y", TensorProto.FLOAT, list(shape))], opset=13)


def test_silu_over_the_whole_range_matches_float64(path):
    x = np.concatenate([np.linspace(-110, 110, 400_001, dtype=np.float32), SPECIAL[:-3]])
    (y,) = run_ep_host(silu_model(x.shape), {"x": x})
    want = reference(x) * x.astype(np.float64)
    tiny = np.finfo(np.float32).tiny
    normal = (reference(x) >= tiny) & (np.abs(want) >= tiny)
    np.testing.assert_allclose(y[normal], want[normal], rtol=5e-7, atol=0)
    # where the sigmoid is below float32's smallest normal number: it, or 0, times |x| <= 110
    np.testing.assert_allclose(y[~normal], want[~normal], rtol=0, atol=110 * tiny)
    assert y[x == 1000.0].item() == 1000.0


def test_silu_special_values_are_those_of_sigmoid_then_mul(path):
    x = np.tile(SPECIAL, CompiledSigmoid.MIN_SIZE // SPECIAL.size + 1)
    with np.errstate(invalid="ignore"):
        want = sigmoid(numpy_xp, x) * x  # -inf * 0: NaN, as the Mul computes it
        got = quick_gelu(numpy_xp, x, alpha=1.0)
    np.testing.assert_array_equal(got, want)


def test_silu_runs_compiled_in_one_pass_only_on_the_numba_path(path, rng, monkeypatch):
    x = rng.standard_normal((4, CompiledSigmoid.MIN_SIZE), dtype=np.float32) * 8
    calls = []
    original = CompiledSigmoid.__call__

    def counted(self, *args, **kwargs):  # the real call, counted
        calls.append(kwargs.get("times_x"))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(CompiledSigmoid, "__call__", counted)
    y = quick_gelu(numpy_xp, x, alpha=1.0)
    assert calls == ([True] if path == "numba" else [])
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(y, x * reference(x), rtol=5e-7, atol=1e-37)
    calls.clear()
    quick_gelu(numpy_xp, x)  # QuickGelu's own alpha, 1.702: numpy's passes
    assert calls == []


def test_efficientnet_silu_shapes_match_onnxruntime(path, rng):
    for shape in [(1, 32, 112, 112), (1, 96, 112, 112), (1, 1152, 7, 7), (1, 1280, 7, 7)]:
        x = rng.standard_normal(shape, dtype=np.float32) * 6
        model = silu_model(shape)
        (got,) = run_ep_host(model, {"x": x})
        (want,) = run_onnxruntime(model, {"x": x})
        # onnxruntime's sigmoid is an approximation off by up to about 1e-7 (times |x| < 40)
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-5)


def test_a_small_sigmoid_takes_the_loop_where_it_is_at_hand(rng, monkeypatch):
    """Under MIN_SIZE values the loop runs once it is compiled or built (no build for a small
    tensor: see test_compiled_softmax), with numpy's passes' values."""
    small = (rng.standard_normal((7, 3)) * 20).astype(np.float32)
    small[0, :3] = [-1000.0, 0.0, np.nan]
    assert small.size < CompiledSigmoid.MIN_SIZE and numpy_xp.compiled_sigmoid.ready()
    calls = []
    original = type(numpy_xp.compiled_sigmoid).__call__
    monkeypatch.setattr(type(numpy_xp.compiled_sigmoid), "__call__",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    got = sigmoid(numpy_xp, small)
    assert calls == [1]
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    want = sigmoid(numpy_xp, small)
    assert calls == [1]
    np.testing.assert_allclose(got, want, rtol=2e-7, atol=0)
    assert np.isnan(got[0, 2]) and got[0, 0] == 0 and got[0, 1] == 0.5
