"""A Conv's bias, residual and fused activation (Relu, Clip, HardSigmoid, HardSwish) after its
GEMM variants (1x1, im2col, shifted): numba's one pass and numpy's passes (``EP_HOST_NUMBA=0``),
against the definition in float64, the activations' own kernels and onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import make_model, run_ep_host, run_onnxruntime
from ep_host_cpu.conv_epilogue import ConvEpilogue
from ep_host_cpu.jit import numba_module
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

import ep_host
from ep_host.tracing import Tracer

F = TensorProto.FLOAT


@pytest.fixture(params=["numba", "numpy"])
def path(request, monkeypatch):
    monkeypatch.setenv("EP_HOST_NUMBA", "1" if request.param == "numba" else "0")
    if request.param == "numba":  # the pass waits for another kernel to have imported numba
        assert numba_module() is not None
    return request.param


def test_the_compiled_pass_equals_numpys_passes_bit_for_bit(rng):
    assert numba_module() is not None
    epilogue = ConvEpilogue()
    assert epilogue.ready(np.float32)
    y = (rng.standard_normal((2, 7, 300)) * 10).astype(np.float32)
    y[0, 1, :5] = [np.nan, np.inf, -np.inf, -0.0, 6.0]
    bias = rng.standard_normal(7).astype(np.float32)
    for clamp in (None, (0.0, 6.0), (-1.5, 2.5), (1.0, -1.0)):
        want = y + bias.reshape(1, -1, 1)
        if clamp is not None:
            want = np.minimum(np.maximum(want, np.float32(clamp[0])), np.float32(clamp[1]))
        got = epilogue(y.copy(), bias, None if clamp is None else ("clip", *clamp))
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want), equal_nan=True)


@pytest.mark.parametrize("activation", [None, ("clip", 0.0, np.inf), ("clip", -1.0, 2.0),
                                        ("hard_sigmoid", 0.2, 0.5), ("hard_swish", 1 / 6, 0.5)])
@pytest.mark.parametrize("bias", [True, False])
def test_a_residual_is_added_after_the_bias_as_numpys_add(rng, activation, bias):
    """With a residual z: the activation of (y + bias) + z, each step rounded to float32 as
    numpy's passes and the activations' own kernels round it (NaN and infinities)."""
    assert numba_module() is not None
    epilogue = ConvEpilogue()
    assert epilogue.ready(np.float32)
    y = (rng.standard_normal((2, 5, 301)) * 8).astype(np.float32)
    y[0, 1, :5] = [np.nan, np.inf, -np.inf, -0.0, 3.0]
    z = (rng.standard_normal((2, 5, 301)) * 8).astype(np.float32)
    z[0, 2, :3] = [-0.0, np.inf, -np.inf]
    y[0, 2, :3] = [-0.0, -np.inf, 1.0]
    b = rng.standard_normal(5).astype(np.float32) if bias else None
    assert numpy_xp.compiled_hard_sigmoid.ready()
    with np.errstate(invalid="ignore"):
        want = (y + b.reshape(1, -1, 1)) + z if bias else y + z
    if activation is not None and activation[0] == "clip":
        want = np.minimum(np.maximum(want, np.float32(activation[1])), np.float32(activation[2]))
    elif activation is not None:
        want = numpy_xp.compiled_hard_sigmoid(want, activation[1], activation[2],
                                              times_x=activation[0] == "hard_swish")
    with np.errstate(invalid="ignore"):
        got = epilogue(y.copy(), b, activation, z)
    np.testing.assert_array_equal(got, want)  # NaN where NaN; -0.0 and 0.0 compare equal


@pytest.mark.parametrize(("kind", "alpha", "beta"), [("hard_sigmoid", 0.2, 0.5),
                                                     ("hard_sigmoid", -0.3, 0.25),
                                                     ("hard_swish", 1 / 6, 0.5)])
@pytest.mark.parametrize("bias", [True, False])
def test_the_compiled_hard_activations_equal_their_own_kernels_bit_for_bit(rng, kind, alpha,
                                                                          beta, bias):
    """HardSigmoid and HardSwish in the pass: what the Conv's output then the CPU EP's own
    HardSigmoid/HardSwish kernel give, NaN, infinities and -0.0 included."""
    assert numba_module() is not None
    epilogue = ConvEpilogue()
    assert epilogue.ready(np.float32)
    y = (rng.standard_normal((2, 5, 333)) * 8).astype(np.float32)
    y[0, 1, :6] = [np.nan, np.inf, -np.inf, -0.0, 3.0, -3.0]
    b = rng.standard_normal(5).astype(np.float32) if bias else None
    separate = numpy_xp.compiled_hard_sigmoid
    assert separate.ready()
    want = separate(y + b.reshape(1, -1, 1) if bias else y.copy(), alpha, beta,
                    times_x=kind == "hard_swish")
    got = epilogue(y.copy(), b, (kind, alpha, beta))
    np.testing.assert_array_equal(got, want)
    assert np.array_equal(np.signbit(got), np.signbit(want), equal_nan=True)


def test_a_model_of_plain_convolutions_never_imports_numba(tmp_path):
    """The pass alone is not worth numba's memory: a fresh process running dense convs with
    bias and Relu leaves numba unimported (and gets the same values)."""
    import subprocess
    import sys

    from ep_host_cpu.profile import machine_profile

    machine_profile()  # measured once per machine (and cache folder), compiled kernels included
    rng = np.random.default_rng(0)
    model, w, b = conv_model(6, 10, 3, 1, "Relu", (), True, rng)
    path = tmp_path / "conv.onnx"
    path.write_bytes(model.SerializeToString())
    x = rng.standard_normal((2, 6, 10, 12)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    code = ("import sys, numpy as np, ep_host; "
            f"s = ep_host.InferenceSession({str(path)!r}, providers=['cpu']); "
            f"y = s.run(None, {{'x': np.load({str(tmp_path / 'x.npy')!r})}})[0]; "
            f"np.save({str(tmp_path / 'y.npy')!r}, y); "
            "from ep_host_cpu.jit import compiled_in_use; "
            "print('numba' in sys.modules or compiled_in_use())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    assert out.stdout.strip() == "False"
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), definition(x, w, b, 1, "Relu", ()),
                               rtol=1e-5, atol=1e-5)


def conv_model(c, m, kernel, strides, activation, params, bias, rng):
    """A dense Conv (``activation`` None) or com.microsoft::FusedConv, weights initializers."""
    w = (rng.standard_normal((m, c, kernel, kernel)) * 0.5).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    inputs = ["x", "w", "b"] if bias else ["x", "w"]
    attrs = {"strides": [strides, strides], "pads": [kernel // 2] * 4,
             "kernel_shape": [kernel, kernel]}
    if activation is None:
        node = helper.make_node("Conv", inputs, ["y"], **attrs)
        domains = []
    else:
        node = helper.make_node("FusedConv", inputs, ["y"], domain="com.microsoft",
                                activation=activation, **attrs,
                                **({"activation_params": list(params)} if params else {}))
        domains = [("com.microsoft", 1)]
    inits = [numpy_helper.from_array(w, "w")] + ([numpy_helper.from_array(b, "b")] if bias
                                                 else [])
    model = make_model([node], [("x", F, [2, c, 10, 12])], [("y", F, None)],
                       initializers=inits, domains=domains)
    return model, w, b if bias else None


def definition(x, w, b, strides, activation, params):
    """The convolution in float64 (padding kernel // 2), then the activation."""
    m, c, k, _ = w.shape
    pad = k // 2
    padded = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (padded.shape[2] - k) // strides + 1
    ow = (padded.shape[3] - k) // strides + 1
    y = np.zeros((x.shape[0], m, oh, ow))
    for i in range(k):
        for j in range(k):
            tap = padded[:, :, i:i + (oh - 1) * strides + 1:strides,
                         j:j + (ow - 1) * strides + 1:strides]
            y += np.einsum("oc,nchw->nohw", w[:, :, i, j].astype(np.float64), tap)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    if activation == "Relu":
        return np.maximum(y, 0)
    if activation == "Clip":
        return np.minimum(np.maximum(y, params[0]), params[1])  # NaN stays; lo > hi: all hi
    if activation == "HardSigmoid":
        alpha, beta = params or (0.2, 0.5)
        return np.minimum(np.maximum(alpha * y + beta, 0), 1)
    if activation == "HardSwish":
        return y * np.minimum(np.maximum(y / 6 + 0.5, 0), 1)
    return y


ACTIVATIONS = [(None, ()), ("Relu", ()), ("Clip", (0.0, 6.0)), ("Clip", (1.0, -1.0)),
               ("HardSigmoid", ()), ("HardSigmoid", (0.3, 0.25)), ("HardSwish", ())]


@pytest.mark.parametrize(("kernel", "strides", "variant"), [(1, 1, "1x1"), (1, 2, "1x1"),
                                                            (3, 2, "im2col"),
                                                            (3, 1, "shifted")])
@pytest.mark.parametrize(("activation", "params"), ACTIVATIONS)
@pytest.mark.parametrize("bias", [True, False])
def test_bias_and_activation_after_each_gemm_variant(path, rng, kernel, strides, variant,
                                                     activation, params, bias):
    model, w, b = conv_model(6, 10, kernel, strides, activation, params, bias, rng)
    x = rng.standard_normal((2, 6, 10, 12)).astype(np.float32)
    x[0, 0, 4, 4] = np.nan
    x[1, 2, 3, 3] = np.inf
    tracer = Tracer()
    session = ep_host.InferenceSession(model.SerializeToString(), providers=["cpu"],
                                       trace=tracer)
    with np.errstate(invalid="ignore"):
        (y,) = session.run(None, {"x": x})
        want = definition(x, w, b, strides, activation, params)
    assert [e["args"].get("kernel_variant") for e in tracer.events
            if e["cat"] == "node"] == [variant]
    assert y.dtype == np.float32 and y.shape == want.shape
    np.testing.assert_array_equal(np.isnan(y), np.isnan(want))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


def test_the_compiled_pass_runs_only_on_the_numba_path(path, rng, monkeypatch):
    calls = []
    original = ConvEpilogue.__call__

    def counted(self, y, bias, activation=None, residual=None):  # the real call, counted
        calls.append(activation)
        return original(self, y, bias, activation, residual)

    monkeypatch.setattr(ConvEpilogue, "__call__", counted)
    model, w, b = conv_model(6, 10, 1, 1, "Clip", (0.0, 6.0), True, rng)
    x = rng.standard_normal((2, 6, 10, 12)).astype(np.float32)
    (y,) = run_ep_host(model, {"x": x})
    np.testing.assert_allclose(y, definition(x, w, b, 1, "Clip", (0.0, 6.0)), rtol=1e-5,
                               atol=1e-5)
    assert calls == ([("clip", 0.0, 6.0)] if path == "numba" else [])


@pytest.mark.parametrize(("c", "m", "size"), [(16, 96, 112), (144, 24, 56), (960, 320, 7)])
def test_mobilenet_pointwise_convs_with_relu6_match_onnxruntime(path, rng, c, m, size):
    w = (rng.standard_normal((m, c, 1, 1)) / np.sqrt(c)).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["y"])]
    model = make_model(nodes, [("x", F, [1, c, size, size])], [("y", F, None)],
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b"),
                                     numpy_helper.from_array(np.float32(0), "lo"),
                                     numpy_helper.from_array(np.float32(6), "hi")])
    x = (rng.standard_normal((1, c, size, size)) * 3).astype(np.float32)
    (ours,) = run_ep_host(model, {"x": x})
    (theirs,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
