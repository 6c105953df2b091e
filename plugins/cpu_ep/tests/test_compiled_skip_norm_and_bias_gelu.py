"""The CPU EP's compiled SkipLayerNormalization (``xp.compiled_skip_layer_norm``) and BiasGelu
(``xp.bias_gelu_float32``): the same values as the Adds, then the compiled LayerNormalization
or Gelu, to the bit; numpy's passes where they do not apply, and both against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import make_model, run_ep_host, run_onnxruntime
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

from ep_host.kernels import contrib
from ep_host.kernels.normalization import layer_norm

F = TensorProto.FLOAT
MS = "com.microsoft"


@pytest.mark.parametrize("with_bias", [True, False])
@pytest.mark.parametrize("with_beta", [True, False])
@pytest.mark.parametrize("shape", [(1, 128, 768), (2, 9, 520)])
def test_skip_layer_norm_equals_the_adds_then_the_compiled_norm(rng, shape, with_bias,
                                                                with_beta):
    x, skip = (rng.standard_normal(shape).astype(np.float32) * 3 for _ in range(2))
    gamma, beta, bias = (rng.standard_normal(shape[-1]).astype(np.float32) for _ in range(3))
    beta, bias = beta if with_beta else None, bias if with_bias else None
    y, mean, inv_std, s = contrib.skip_layer_norm(numpy_xp, x, skip, gamma, beta, bias,
                                                  epsilon=1e-5, n_outputs=4)
    want_sum = ((x + bias) if with_bias else x) + skip
    want = layer_norm(numpy_xp, want_sum, gamma, beta, axis=-1, epsilon=1e-5, stash_type=1)
    assert numpy_xp.compiled_skip_layer_norm.ready()
    np.testing.assert_array_equal(s, want_sum)
    for got, expected in zip((y, mean, inv_std), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    (only_y,) = contrib.skip_layer_norm(numpy_xp, x, skip, gamma, beta, bias, epsilon=1e-5)
    np.testing.assert_array_equal(only_y, y)


def test_a_broadcast_skip_or_a_small_input_takes_numpy_passes(rng, monkeypatch):
    calls = []
    compiled = numpy_xp.compiled_skip_layer_norm
    original = type(compiled).__call__
    monkeypatch.setattr(type(compiled), "__call__",
                        lambda self, *a, **k: calls.append(1) or original(self, *a, **k))
    gamma = np.ones(64, np.float32)
    x = rng.standard_normal((2, 64, 64)).astype(np.float32)
    contrib.skip_layer_norm(numpy_xp, x, x[:1], gamma)  # (1, S, H) skip: numpy's passes
    contrib.skip_layer_norm(numpy_xp, x[:, :4], x[:, :4], gamma)  # 512 values
    assert calls == []
    contrib.skip_layer_norm(numpy_xp, x, x, gamma)
    assert calls == [1]


def skip_norm_model(shape, gamma, beta, bias):
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                            ["y", "", "", "sum"], domain=MS, epsilon=1e-5)
    inits = [numpy_helper.from_array(v, n) for v, n in ((gamma, "gamma"), (beta, "beta"),
                                                         (bias, "bias"))]
    return make_model([node], [("x", F, list(shape)), ("skip", F, list(shape))],
                      [("y", F, list(shape)), ("sum", F, list(shape))], opset=17,
                      initializers=inits, domains=[(MS, 1)])


def test_compiled_skip_layer_norm_matches_onnxruntime(rng):
    shape = (1, 128, 768)
    x, skip = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    vectors = [rng.standard_normal(768).astype(np.float32) for _ in range(3)]
    m = skip_norm_model(shape, *vectors)
    ours = run_ep_host(m, {"x": x, "skip": skip})
    theirs = run_onnxruntime(m, {"x": x, "skip": skip})
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("shape", [(1, 128, 3072), (3, 7, 2500)])
def test_bias_gelu_equals_the_add_then_the_compiled_gelu(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    bias = rng.standard_normal(shape[-1]).astype(np.float32)
    got = contrib.bias_gelu(numpy_xp, x, bias)
    assert numpy_xp.bias_gelu_float32.ready()
    np.testing.assert_array_equal(got, numpy_xp.gelu_float32(x + bias))
    node = helper.make_node("BiasGelu", ["x", "bias"], ["y"], domain=MS)
    m = make_model([node], [("x", F, list(shape))], [("y", F, list(shape))], opset=17,
                   initializers=[numpy_helper.from_array(bias, "bias")], domains=[(MS, 1)])
    ours = run_ep_host(m, {"x": x})
    theirs = run_onnxruntime(m, {"x": x})
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)


def test_bias_gelu_of_a_small_input_takes_numpy_passes(rng):
    x = rng.standard_normal((4, 64)).astype(np.float32)
    bias = rng.standard_normal(64).astype(np.float32)
    assert numpy_xp.bias_gelu_float32(x, bias) is None
    np.testing.assert_allclose(contrib.bias_gelu(numpy_xp, x, bias),
                               numpy_xp.gelu_float32(x + bias), rtol=1e-6, atol=1e-7)
