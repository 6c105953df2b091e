"""LayerNormalization of float32: numba's compiled rows against numpy's passes
(``EP_HOST_NUMBA=0``) and onnxruntime, all three outputs."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import make_model, run_ep_host, run_onnxruntime
from ep_host_cpu.layer_norm import CompiledLayerNorm
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

from ep_host.kernels.normalization import layer_norm

F = TensorProto.FLOAT
CASES = [((1, 128, 768), -1, True), ((1, 64, 49, 256), -1, True), ((1, 56, 56, 96), 3, False),
         ((2, 20, 9, 13), 2, True), ((4, 1029), 1, True), ((3, 5, 333), -1, False)]


def model(shape, axis, bias, scale_value, bias_value):
    inputs = ["x", "scale"] + (["bias"] if bias else [])
    node = helper.make_node("LayerNormalization", inputs, ["y", "mean", "inv_std"], axis=axis,
                            epsilon=1e-5)
    inits = [numpy_helper.from_array(scale_value, "scale")]
    if bias:
        inits.append(numpy_helper.from_array(bias_value, "bias"))
    return make_model([node], [("x", F, list(shape))],
                      [("y", F, None), ("mean", F, None), ("inv_std", F, None)], opset=17,
                      initializers=inits)


@pytest.mark.parametrize(("shape", "axis", "bias"), CASES)
def test_compiled_layer_norm_matches_numpy_and_onnxruntime(shape, axis, bias, rng, monkeypatch):
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    normalized = shape[axis % len(shape):]
    scale = rng.standard_normal(normalized).astype(np.float32)
    shift = rng.standard_normal(normalized).astype(np.float32)
    compiled = layer_norm(numpy_xp, x, scale, shift if bias else None, axis=axis,
                          epsilon=1e-5, stash_type=1)
    assert x.size >= CompiledLayerNorm.MIN_SIZE and numpy_xp.compiled_layer_norm.ready()
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    passes = layer_norm(numpy_xp, x, scale, shift if bias else None, axis=axis, epsilon=1e-5,
                        stash_type=1)
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    for got, want in zip(compiled, passes, strict=True):
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    m = model(shape, axis, bias, scale, shift)
    ours = run_ep_host(m, {"x": x})
    theirs = run_onnxruntime(m, {"x": x})
    for got, want in zip(ours, theirs, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_a_scale_of_another_shape_takes_numpy_passes(rng, monkeypatch):
    x = rng.standard_normal((8, 1024)).astype(np.float32)
    calls = []
    pool = numpy_xp.compiled_layer_norm
    original = type(pool).__call__
    monkeypatch.setattr(type(pool), "__call__",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    layer_norm(numpy_xp, x, np.ones(1024, np.float32), None, axis=-1, epsilon=1e-5,
               stash_type=1)
    assert calls == [1]
    layer_norm(numpy_xp, x, np.ones((1, 1024), np.float32), None, axis=-1, epsilon=1e-5,
               stash_type=1)  # broadcast from a leading 1: numpy's passes
    layer_norm(numpy_xp, x.astype(np.float64), np.ones(1024), None, axis=-1, epsilon=1e-5,
               stash_type=1)
    assert calls == [1]
