"""MaxPool 3 x 3 at stride 2 on float32: numba's one-pass loop against numpy's passes (equal
values, NaN and infinities included; of a tie between -0 and +0 numpy's own vector and scalar
loops keep different ones), and against onnxruntime, for every padding, ceil mode and SAME
padding."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_matches_onnxruntime, make_model
from ep_host_cpu.max_pool import CompiledMaxPool3x3s2
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper

from ep_host.kernels.pool import max_pool

GEOMETRIES = [
    ((1, 64, 111, 111), {"ceil_mode": 1}),  # SqueezeNet's
    ((1, 24, 112, 112), {"pads": [1, 1, 1, 1]}),  # ShuffleNet's, ResNet's
    ((2, 3, 10, 9), {"ceil_mode": 1}),
    ((1, 2, 9, 12), {"pads": [2, 0, 1, 2], "ceil_mode": 1}),
    ((1, 2, 8, 8), {"pads": [0, 2, 2, 0]}),
    ((1, 3, 7, 6), {"auto_pad": "SAME_UPPER"}),
    ((1, 3, 7, 6), {"auto_pad": "SAME_LOWER"}),
    ((1, 2, 3, 3), {"auto_pad": "VALID"}),
    ((1, 1, 1, 5), {"pads": [1, 1, 1, 1]}),
]


def attributes(attrs):
    return {"auto_pad": "NOTSET", **attrs, "kernel_shape": [3, 3], "strides": [2, 2]}


def special_values(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1)
    picks = rng.choice(flat.size, size=min(flat.size, 40), replace=False)
    flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32), 40)[
        :picks.size]
    x[..., :2, :] = np.float32(-0.0)  # ties of signed zeros: equal values either way
    x[..., 2:3, :] = np.float32(0.0)
    return x


@pytest.mark.parametrize(("shape", "attrs"), GEOMETRIES)
def test_the_compiled_pool_equals_numpys_passes(rng, monkeypatch, shape, attrs):
    x = special_values(rng, shape)
    kwargs = attributes(attrs)
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    want = max_pool(numpy_xp, x, **kwargs)
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    calls = []
    original = CompiledMaxPool3x3s2.__call__

    def counted(self, *args):  # the real call, counted
        calls.append(args[1])
        return original(self, *args)

    monkeypatch.setattr(CompiledMaxPool3x3s2, "__call__", counted)
    got = max_pool(numpy_xp, x, **kwargs)
    assert len(calls) == 1
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)  # NaN where numpy has NaN


@pytest.mark.parametrize(("shape", "attrs"), GEOMETRIES[:6])
def test_the_compiled_pool_matches_onnxruntime(rng, shape, attrs):
    x = rng.standard_normal(shape).astype(np.float32)
    node = helper.make_node("MaxPool", ["x"], ["y"], **attributes(attrs))
    model = make_model([node], [("x", TensorProto.FLOAT, list(shape))],
                       [("y", TensorProto.FLOAT, None)], opset=12)
    assert_matches_onnxruntime(model, {"x": x}, rtol=0, atol=0)


def test_other_windows_types_and_indices_stay_on_numpys_passes(rng, monkeypatch):
    calls = []
    monkeypatch.setattr(CompiledMaxPool3x3s2, "__call__",
                        lambda self, *args: calls.append(args) or pytest.fail("compiled"))
    x = rng.standard_normal((1, 2, 9, 9)).astype(np.float32)
    base = {"auto_pad": "NOTSET", "kernel_shape": [3, 3], "strides": [2, 2]}
    max_pool(numpy_xp, x, **{**base, "kernel_shape": [2, 2]})
    max_pool(numpy_xp, x, **{**base, "strides": [1, 1]})
    max_pool(numpy_xp, x, **{**base, "dilations": [2, 2]})
    max_pool(numpy_xp, x.astype(np.float64), **base)
    max_pool(numpy_xp, x, **base, with_indices=True)
    max_pool(numpy_xp, x[:, :, :, :, None].repeat(3, axis=4),
             **{**base, "kernel_shape": [3, 3, 3], "strides": [2, 2, 2]})
    assert calls == []
