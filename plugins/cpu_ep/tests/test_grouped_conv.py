"""Depthwise and grouped Conv on numba's compiled loops (variant ``direct``) and on the numpy
variants (``EP_HOST_NUMBA=0``), against a loop reference written here and onnxruntime; numba
imported only when such a Conv is made."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
from cpukit import make_model, run_ep_host, run_onnxruntime
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

import ep_host
from ep_host.kernels import conv as conv_kernels
from ep_host.tracing import Tracer

F = TensorProto.FLOAT


@pytest.fixture(params=["numba", "numpy"])
def path(request, monkeypatch):
    """Each test runs on both paths: numba's loops, and numpy's with EP_HOST_NUMBA=0."""
    monkeypatch.setenv("EP_HOST_NUMBA", "1" if request.param == "numba" else "0")
    return request.param


def same_pads(size, kernel, stride, dilation, upper):
    """SAME padding for one axis: the output is ceil(size / stride); the odd pad goes at the
    end for SAME_UPPER and at the beginning for SAME_LOWER."""
    extent = (kernel - 1) * dilation + 1
    total = max((math.ceil(size / stride) - 1) * stride + extent - size, 0)
    small, large = total // 2, total - total // 2
    return (small, large) if upper else (large, small)


def reference_conv(x, w, b, group, strides, dilations, pads):
    """The definition, in float64: y[n, o, r, j] = b[o] + sum over the group's input channels
    and the taps of w * the zero-padded input; ``pads`` (top, left, bottom, right)."""
    n, c, h, width = x.shape
    m, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    padded = np.zeros((n, c, h + pads[0] + pads[2], width + pads[1] + pads[3]))
    padded[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + width] = x
    oh = (padded.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (padded.shape[3] - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, m, oh, ow))
    for o in range(m):
        g = o // (m // group)
        for ci in range(cg):
            for i in range(kh):
                for k in range(kw):
                    rows = slice(i * dh, i * dh + (oh - 1) * sh + 1, sh)
                    cols = slice(k * dw, k * dw + (ow - 1) * sw + 1, sw)
                    y[:, o] += float(w[o, ci, i, k]) * padded[:, g * cg + ci, rows, cols]
        if b is not None:
            y[:, o] += float(b[o])
    return y


# x shape, (M, C/group, kh, kw), group, strides, dilations, pads (top, left, bottom, right)
CASES = [
    ((1, 8, 12, 12), (8, 1, 3, 3), 8, (1, 1), (1, 1), (1, 1, 1, 1)),  # depthwise 3x3
    ((2, 6, 11, 9), (6, 1, 3, 3), 6, (2, 2), (1, 1), (1, 1, 1, 1)),  # stride 2, odd sizes
    ((1, 5, 14, 13), (5, 1, 5, 5), 5, (1, 1), (1, 1), (2, 2, 2, 2)),  # 5x5
    ((1, 4, 15, 16), (4, 1, 7, 7), 4, (1, 1), (1, 1), (3, 3, 3, 3)),  # ConvNeXt's 7x7
    ((1, 6, 13, 14), (6, 1, 5, 5), 6, (2, 2), (1, 1), (1, 2, 2, 1)),  # 5x5 stride 2, asym
    ((1, 4, 10, 11), (8, 1, 3, 3), 4, (1, 1), (1, 1), (1, 1, 1, 1)),  # multiplier 2
    ((1, 3, 9, 10), (9, 1, 3, 3), 3, (2, 1), (1, 1), (0, 1, 2, 0)),  # multiplier 3, stride (2, 1)
    ((1, 4, 12, 12), (4, 1, 3, 3), 4, (1, 1), (2, 2), (2, 2, 2, 2)),  # dilation 2
    ((1, 4, 12, 13), (4, 1, 3, 3), 4, (3, 3), (2, 1), (1, 0, 0, 3)),  # stride 3, dilation (2, 1)
    ((1, 3, 6, 7), (3, 1, 3, 3), 3, (1, 1), (1, 1), (4, 5, 3, 6)),  # pads past kernel - 1
    ((1, 4, 1, 1), (4, 1, 3, 3), 4, (1, 1), (1, 1), (1, 1, 1, 1)),  # a 1x1 image
    ((2, 3, 1, 1), (6, 1, 3, 3), 3, (2, 2), (1, 1), (2, 2, 2, 2)),  # 1x1, pads > kernel - 1
    ((1, 4, 7, 9), (4, 1, 1, 3), 4, (1, 1), (1, 1), (0, 1, 0, 1)),  # a 1x3 kernel
    ((1, 4, 9, 7), (4, 1, 3, 1), 4, (1, 2), (1, 1), (1, 0, 1, 0)),  # 3x1, stride (1, 2)
    ((1, 8, 10, 10), (8, 2, 3, 3), 4, (1, 1), (1, 1), (1, 1, 1, 1)),  # 2 channels per group
    ((2, 12, 9, 11), (18, 4, 3, 3), 3, (2, 2), (1, 1), (1, 0, 1, 2)),  # 4 per group, 6 out
    ((1, 32, 8, 8), (32, 16, 3, 3), 2, (1, 1), (1, 1), (1, 1, 1, 1)),  # 16 per group
    ((1, 16, 9, 9), (16, 8, 3, 3), 2, (2, 2), (2, 2), (2, 2, 2, 2)),  # grouped, dilated, strided
    # 3x3 on planes of NINE_TAP_MIN_OUTPUT pixels and more: the nine taps in one pass
    ((1, 3, 28, 28), (3, 1, 3, 3), 3, (1, 1), (1, 1), (1, 1, 1, 1)),  # depthwise, 28 x 28 out
    ((1, 4, 30, 31), (8, 2, 3, 3), 2, (1, 1), (1, 1), (1, 0, 0, 1)),  # 2 per group, then added
    ((1, 2, 33, 32), (2, 1, 3, 3), 2, (1, 1), (2, 2), (2, 1, 1, 2)),  # dilated, asymmetric
    ((1, 2, 61, 60), (4, 1, 3, 3), 2, (2, 2), (1, 1), (1, 1, 1, 1)),  # stride 2, multiplier 2
]


def run_kernel(x, w, b, group, strides, dilations, pads, prepared, auto_pad="NOTSET"):
    kw = {"auto_pad": auto_pad, "group": group, "strides": strides, "dilations": dilations,
          "pads": None if auto_pad != "NOTSET" else (pads[0], pads[1], pads[2], pads[3])}
    if prepared:
        constants = {1: w} if b is None else {1: w, 2: b}
        kw.update(conv_kernels.prepare_conv(numpy_xp, constants, **kw))
    tracer = Tracer()
    with tracer.span("Conv") as span:
        y = conv_kernels.conv(numpy_xp, x, w, b, **kw)
    return y, span.args["kernel_variant"]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("prepared", [True, False])
@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "dilations", "pads"), CASES)
def test_grouped_conv_equals_the_definition(rng, path, x_shape, w_shape, group, strides,
                                            dilations, pads, prepared, bias):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32) if bias else None
    x.flags.writeable = False  # feeds may be read-only
    y, variant = run_kernel(x, w, b, group, strides, dilations, pads, prepared)
    assert (variant == "direct") == (path == "numba")
    want = reference_conv(x, w, b, group, strides, dilations, pads)
    assert y.dtype == np.float32 and y.shape == want.shape and y.flags.c_contiguous
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID"])
@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "dilations"), [
    ((1, 6, 9, 8), (6, 1, 3, 3), 6, (2, 2), (1, 1)),
    ((1, 6, 10, 7), (12, 1, 4, 4), 6, (2, 3), (1, 1)),  # an even kernel: the odd pad's side
    ((1, 4, 11, 12), (4, 1, 5, 5), 4, (3, 2), (1, 2)),
    ((1, 8, 7, 9), (8, 4, 3, 2), 2, (1, 1), (2, 1)),
])
def test_auto_pad(rng, path, auto_pad, x_shape, w_shape, group, strides, dilations):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    if auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        (t, bt), (lt, r) = (same_pads(s, k, st, d, auto_pad == "SAME_UPPER")
                            for s, k, st, d in zip(x_shape[2:], w_shape[2:], strides, dilations,
                                                   strict=True))
        pads = (t, lt, bt, r)
    y, variant = run_kernel(x, w, b, group, strides, dilations, pads, True, auto_pad)
    assert (variant == "direct") == (path == "numba")
    np.testing.assert_allclose(y, reference_conv(x, w, b, group, strides, dilations, pads),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_other_float_types(rng, path, dtype):
    x = rng.standard_normal((1, 6, 10, 9)).astype(dtype)
    w = rng.standard_normal((12, 1, 3, 3)).astype(dtype)
    b = rng.standard_normal(12).astype(dtype)
    y, variant = run_kernel(x, w, b, 6, (2, 1), (1, 2), (1, 2, 0, 2), True)
    assert (variant == "direct") == (path == "numba")  # float16 runs in float32
    assert y.dtype == dtype
    want = reference_conv(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64), 6,
                          (2, 1), (1, 2), (1, 2, 0, 2))
    tol = 1e-10 if dtype == np.float64 else 2e-2
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=tol, atol=tol)


def test_nan_and_inf_propagate(path):
    x = np.ones((1, 2, 5, 5), dtype=np.float32)
    x[0, 0, 2, 2] = np.nan
    x[0, 1, 0, 0] = np.inf
    w = np.ones((2, 1, 3, 3), dtype=np.float32)
    y, _ = run_kernel(x, w, None, 2, (1, 1), (1, 1), (1, 1, 1, 1), True)
    assert np.isnan(y[0, 0, 1:4, 1:4]).all() and not np.isnan(y[0, 0, 0]).any()
    assert np.isposinf(y[0, 1, :2, :2]).all() and np.isfinite(y[0, 1, 2:]).all()
    big = np.ones((1, 2, 30, 30), dtype=np.float32)  # the nine taps in one pass
    big[0, 0, 10, 10] = np.nan
    big[0, 1, 0, 29] = -np.inf
    y, _ = run_kernel(big, w, None, 2, (1, 1), (1, 1), (1, 1, 1, 1), True)
    assert np.isnan(y[0, 0, 9:12, 9:12]).all() and np.isnan(y[0, 0]).sum() == 9
    assert np.isneginf(y[0, 1, :2, 28:]).all() and np.isfinite(y[0, 1]).sum() == 900 - 4


# Stride-2 depthwise and grouped convs of the corpus' models, at their real shapes (x shape, w
# shape, group, pads): the column pairs the compiled loops copy by, over widths even and odd.
REAL_STRIDED = [
    ((1, 16, 112, 112), (16, 1, 3, 3), 16, (1, 1, 1, 1)),  # mobilenet_v3_small
    ((1, 72, 56, 56), (72, 1, 5, 5), 72, (2, 2, 2, 2)),  # mobilenet_v3_small, 5x5
    ((1, 104, 56, 56), (104, 8, 3, 3), 13, (1, 1, 1, 1)),  # regnet_y_400mf, 8 per group
    ((1, 96, 27, 27), (96, 1, 3, 3), 96, (1, 1, 1, 1)),  # an odd width, its last column alone
    ((1, 40, 15, 15), (40, 1, 5, 5), 40, (1, 2, 2, 1)),  # odd, the columns' phases swapped
]


@pytest.mark.parametrize(("x_shape", "w_shape", "group", "pads"), REAL_STRIDED)
def test_strided_real_shapes_equal_numpys_variant_and_onnxruntime(rng, monkeypatch, x_shape,
                                                                  w_shape, group, pads):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    compiled, variant = run_kernel(x, w, b, group, (2, 2), (1, 1), pads, True)
    assert variant == "direct"
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    numpys, variant = run_kernel(x, w, b, group, (2, 2), (1, 1), pads, True)
    assert variant != "direct"
    np.testing.assert_allclose(compiled, numpys, rtol=1e-5, atol=1e-5)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, strides=[2, 2],
                            pads=list(pads), kernel_shape=list(w_shape[2:]))
    model = make_model([node], [("x", F, list(x_shape))], [("y", F, None)],
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b")])
    (theirs,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(compiled, theirs, rtol=1e-5, atol=1e-5)


def test_a_large_1x1_or_dense_grouped_conv_keeps_the_gemm_variants(rng, path):
    x = rng.standard_normal((1, 64, 6, 6), dtype=np.float32)
    for w_shape, group in (((64, 32, 3, 3), 2), ((64, 16, 1, 1), 4)):  # 32 per group; 1x1
        w = rng.standard_normal(w_shape, dtype=np.float32)
        y, variant = run_kernel(x, w, None, group, (1, 1), (1, 1), (1, 1, 1, 1)
                                if w_shape[2] == 3 else (0, 0, 0, 0), True)
        assert variant != "direct"


def depthwise_model(activation=None, params=()):
    """A depthwise 3x3 stride-2 Conv with bias, as a Conv or as a com.microsoft::FusedConv with
    ``activation``, its weights initializers."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((16, 1, 3, 3), dtype=np.float32)
    b = rng.standard_normal(16, dtype=np.float32)
    attrs = {"group": 8, "strides": [2, 2], "pads": [1, 0, 1, 2], "kernel_shape": [3, 3]}
    if activation is None:
        node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **attrs)
        domains = []
    else:
        node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft",
                                activation=activation, **attrs,
                                **({"activation_params": list(params)} if params else {}))
        domains = [("com.microsoft", 1)]
    return make_model([node], [("x", F, [2, 8, 13, 12])], [("y", F, None)],
                      initializers=[numpy_helper.from_array(w, "w"),
                                    numpy_helper.from_array(b, "b")], domains=domains), w, b


def test_a_session_matches_onnxruntime(rng, path):
    model, _, _ = depthwise_model()
    x = rng.standard_normal((2, 8, 13, 12), dtype=np.float32)
    (ours,) = run_ep_host(model, {"x": x})
    (theirs,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("activation", "params", "fn"), [
    ("Relu", (), lambda y: np.maximum(y, 0)),
    ("Clip", (-0.5, 1.5), lambda y: np.minimum(np.maximum(y, -0.5), 1.5)),
    ("Clip", (1.0, -1.0), lambda y: np.full_like(y, -1.0)),  # lo > hi: everything is hi
    ("Tanh", (), np.tanh),
    ("HardSigmoid", (), lambda y: np.clip(0.2 * y + 0.5, 0, 1)),
    ("HardSigmoid", (-0.4, 0.25), lambda y: np.clip(-0.4 * y + 0.25, 0, 1)),
    ("HardSwish", (), lambda y: y * np.clip(y / 6 + 0.5, 0, 1)),
])
def test_fused_conv_applies_its_activation(rng, path, activation, params, fn):
    model, w, b = depthwise_model(activation, params)
    x = rng.standard_normal((2, 8, 13, 12), dtype=np.float32)
    (y,) = run_ep_host(model, {"x": x})
    want = fn(reference_conv(x, w, b, 8, (2, 2), (1, 1), (1, 0, 1, 2)))
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("op", "attrs", "params"), [("HardSwish", {}, ()),
                                                     ("HardSigmoid", {}, ()),
                                                     ("HardSigmoid", {"alpha": 0.3}, (0.3, 0.5))])
def test_a_fused_hard_activation_equals_the_conv_then_the_activation(rng, path, op, attrs,
                                                                     params):
    """The direct loops' HardSigmoid/HardSwish give what the activation's own kernel gives
    after the Conv, bit for bit (NaN and infinities included)."""
    fused, _, _ = depthwise_model(op, params)
    plain, _, _ = depthwise_model()
    plain.graph.node.append(helper.make_node(op, ["c"], ["y"], **attrs))
    plain.graph.node[0].output[0] = "c"
    x = rng.standard_normal((2, 8, 13, 12), dtype=np.float32) * 4
    x[0, 1, 5, 5], x[1, 4, 7, 3] = np.nan, -np.inf
    with np.errstate(invalid="ignore"):  # numpy's HardSwish: -inf times 0
        (got,) = run_ep_host(fused, {"x": x})
        (want,) = ep_host.InferenceSession(plain.SerializeToString(), providers=["cpu"],
                                           optimizations=()).run(None, {"x": x})
    np.testing.assert_array_equal(got, want)


def test_a_fused_clip_keeps_nan_and_clamps_inf(path):
    model, w, b = depthwise_model("Clip", (0.0, 6.0))
    x = np.zeros((2, 8, 13, 12), dtype=np.float32)
    x[0, 0, 6, 6] = np.nan
    x[1, 3, 6, 6] = np.inf
    (y,) = run_ep_host(model, {"x": x})
    want = np.clip(reference_conv(x, w, b, 8, (2, 2), (1, 1), (1, 0, 1, 2)), 0.0, 6.0)
    assert np.isnan(y).sum() == np.isnan(want).sum() > 0
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)  # NaN where NaN, inf clamped


def python_with(code, **env):
    """Run ``code`` in a fresh interpreter with this one's path and ``env`` added."""
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), **env}
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=300, check=True).stdout.strip()


MAKE_SESSION = """
import sys
import numpy as np
import ep_host, ep_host_cpu.provider
from ep_host_cpu.jit import compiled_in_use
print(compiled_in_use())
from onnx import helper, numpy_helper, TensorProto
w = numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "w")
node = helper.make_node("Conv", ["x", "w"], ["y"], group=4, pads=[1, 1, 1, 1])
graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
    [1, 4, 5, 5])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
session = ep_host.InferenceSession(model.SerializeToString(), providers=["cpu"])
print(compiled_in_use())
"""


@pytest.mark.parametrize(("switch", "imported"), [("1", "False\nTrue"), ("0", "False\nFalse")])
def test_compiled_kernels_are_loaded_only_when_a_grouped_conv_is_made(switch, imported, tmp_path):
    assert python_with(MAKE_SESSION, EP_HOST_NUMBA=switch,
                       EP_HOST_CACHE_DIR=str(tmp_path)) == imported


def test_a_kernel_numba_cannot_compile_runs_on_numpy_with_a_warning(monkeypatch):
    from ep_host_cpu import jit

    monkeypatch.setenv("EP_HOST_NUMBA", "1")

    def untypable(x):
        return x.no_such_attribute

    with pytest.warns(RuntimeWarning, match="numba cannot compile .*untypable.* runs on numpy"):
        assert jit.compiled(untypable, lambda numba: ["float32(float32)"]) is None


def test_compiled_kernels_divide_as_numpy_does(monkeypatch):
    """numba's default raises ZeroDivisionError, which keeps every loop with a division scalar
    (the compiled Sigmoid ran 2.5x slower): compiled kernels take numpy's rules instead."""
    from ep_host_cpu import jit

    monkeypatch.setenv("EP_HOST_NUMBA", "1")

    def reciprocal(x):
        return np.float32(1) / x

    compiled = jit.compiled(reciprocal, lambda numba: ["float32(float32)"])
    assert compiled is not None
    assert compiled(np.float32(0)) == np.inf
    assert compiled(np.float32(-0.0)) == -np.inf
