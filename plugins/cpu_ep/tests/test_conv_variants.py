"""Conv's variants (1x1, depthwise, shifted, winograd, im2col): each is chosen by the
geometry, recorded on the trace span, and equals a direct convolution; prepared (constant)
weights give the same answer as weights fed at run time."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cpukit import assert_matches_onnxruntime, make_model, run_ep_host
from ep_host.kernels import conv as conv_kernels
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

from ep_host.tracing import Tracer

F = TensorProto.FLOAT


def direct_conv(x, w, b, group, strides, dilations, pads):
    """Conv by its definition: a sum over the taps of each window, in float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    n, c = x.shape[:2]
    m = w.shape[0]
    ns = x.ndim - 2
    kernel = w.shape[2:]
    widths = [(0, 0), (0, 0)] + [(pads[i], pads[i + ns]) for i in range(ns)]
    xp_ = np.pad(x, widths)
    out = [(xp_.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
           for i in range(ns)]
    cg, mg = c // group, m // group
    y = np.zeros((n, m, *out))
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (o - 1) * s + 1, s)
            for t, d, o, s in zip(tap, dilations, out, strides, strict=True))
        v = xp_[window]
        for g in range(group):
            wt = w[g * mg:(g + 1) * mg, :, *tap]  # (mg, cg)
            y[:, g * mg:(g + 1) * mg] += np.einsum("mc,nc...->nm...", wt,
                                                    v[:, g * cg:(g + 1) * cg])
    if b is not None:
        y += b.reshape((m,) + (1,) * ns)
    return y


# (x shape, w shape, group, strides, dilations, pads, the variant it must pick)
CASES = [
    ((2, 8, 7, 6), (12, 8, 1, 1), 1, (1, 1), (1, 1), (0, 0, 0, 0), "1x1"),
    ((1, 8, 7, 6), (12, 8, 1, 1), 1, (2, 3), (1, 1), (0, 0, 0, 0), "1x1"),
    ((2, 8, 5, 5), (12, 2, 1, 1), 4, (1, 1), (1, 1), (0, 0, 0, 0), "1x1"),
    ((2, 6, 9, 8), (6, 1, 3, 3), 6, (1, 1), (1, 1), (1, 1, 1, 1), "depthwise"),
    ((1, 6, 9, 8), (12, 1, 3, 3), 6, (1, 1), (1, 1), (1, 1, 1, 1), "depthwise"),
    ((1, 6, 9, 8), (6, 1, 3, 3), 6, (2, 2), (1, 1), (1, 0, 1, 2), "im2col"),  # strided
    ((1, 4, 11, 10), (4, 1, 3, 3), 4, (1, 1), (2, 2), (2, 2, 2, 2), "depthwise"),
    ((1, 4, 12), (8, 1, 5), 4, (1,), (1,), (2, 2), "depthwise"),
    ((2, 5, 16, 16), (7, 5, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),
    ((1, 6, 20, 20), (4, 3, 3, 3), 2, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),
    ((1, 3, 30, 30), (4, 3, 3, 3), 1, (1, 1), (2, 2), (0, 2, 1, 0), "shifted"),
    ((1, 4, 10), (5, 4, 3), 1, (1,), (1,), (1, 2), "shifted"),
    ((1, 2, 5, 12, 12), (3, 2, 2, 2, 2), 1, (1, 1, 1), (1, 1, 1), (1, 0, 0, 0, 1, 0), "shifted"),
    ((1, 3, 7, 7), (4, 3, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # 9/7 too wide
    ((1, 3, 16, 16), (96, 3, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # 96 > 64 out
    ((2, 4, 9, 8), (6, 2, 3, 2), 2, (2, 1), (1, 2), (1, 0, 2, 1), "im2col"),
    ((1, 3, 17, 17), (8, 3, 7, 7), 1, (2, 2), (1, 1), (3, 3, 3, 3), "im2col"),
    ((1, 64, 8, 8), (64, 64, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "winograd"),
    ((2, 64, 9, 7), (72, 64, 3, 3), 1, (1, 1), (1, 1), (2, 0, 1, 3), "winograd"),  # odd out
    ((1, 66, 11, 10), (64, 66, 3, 3), 1, (1, 1), (1, 1), (0, 0, 0, 0), "winograd"),
    ((1, 64, 10, 9), (64, 64, 3, 3), 1, (1, 1), (1, 1), (0, 1, 2, 0), "winograd"),
    ((1, 16, 16, 16), (64, 16, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "shifted"),  # C < 32
    ((1, 64, 5, 5), (64, 64, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), "im2col"),  # 9 tiles
    # a strided last axis and a wide kernel: the columns copied from its phases
    ((1, 2, 23, 19), (4, 2, 5, 5), 1, (2, 3), (1, 2), (2, 1, 0, 2), "im2col"),
    ((2, 3, 40), (4, 3, 6), 1, (4,), (1,), (1, 2), "im2col"),
    ((1, 4, 9, 9, 30), (6, 2, 2, 3, 5), 2, (1, 2, 2), (2, 1, 1), (1, 0, 1, 0, 2, 2), "im2col"),
]
WINOGRAD = [c for c in CASES if c[-1] == "winograd"]


def run_conv(x, w, b, group, strides, dilations, pads, prepared):
    kw = {"auto_pad": "NOTSET", "group": group, "strides": strides, "dilations": dilations,
          "pads": pads}
    if prepared:
        constants = {1: w} if b is None else {1: w, 2: b}
        kw.update(conv_kernels.prepare_conv(numpy_xp, constants, **kw))
    span = Tracer()
    with span.span("Conv") as s:
        y = conv_kernels.conv(numpy_xp, x, w, b, **kw)
    return y, s.args


@pytest.mark.parametrize("prepared", [False, True])
@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "dilations", "pads",
                          "variant"), CASES)
def test_variant_is_chosen_by_shape_and_equals_direct_conv(rng, x_shape, w_shape, group,
                                                           strides, dilations, pads, variant,
                                                           prepared):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    x_before, w_before = x.copy(), w.copy()
    y, args = run_conv(x, w, b, group, strides, dilations, pads, prepared)
    assert args["kernel_variant"] == variant
    assert args["kernel_variant.reason"]
    want = direct_conv(x, w, b, group, strides, dilations, pads)
    assert y.dtype == np.float32 and y.shape == want.shape
    assert y.flags.c_contiguous
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(x, x_before)  # inputs are read only
    np.testing.assert_array_equal(w, w_before)


@pytest.mark.parametrize(("x_shape", "w_shape", "group", "strides", "dilations", "pads",
                          "variant"), CASES[::3])
def test_without_bias(rng, x_shape, w_shape, group, strides, dilations, pads, variant):
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    for prepared in (False, True):
        y, _ = run_conv(x, w, None, group, strides, dilations, pads, prepared)
        np.testing.assert_allclose(y, direct_conv(x, w, None, group, strides, dilations, pads),
                                   rtol=1e-4, atol=1e-4)
        assert y.flags.c_contiguous


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[8], CASES[14], WINOGRAD[1]])
def test_float16_computes_in_float32_and_rounds_once(rng, case):
    x_shape, w_shape, group, strides, dilations, pads, _ = case
    x = rng.standard_normal(x_shape).astype(np.float16)
    w = rng.standard_normal(w_shape).astype(np.float16)
    b = rng.standard_normal(w_shape[0]).astype(np.float16)
    for prepared in (False, True):
        y, _ = run_conv(x, w, b, group, strides, dilations, pads, prepared)
        assert y.dtype == np.float16
        want = direct_conv(x, w, b, group, strides, dilations, pads).astype(np.float16)
        np.testing.assert_allclose(y.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                                   atol=2e-3)


@pytest.mark.parametrize("case", [CASES[1], CASES[4], CASES[9], CASES[15], WINOGRAD[1]])
def test_constant_weights_in_a_session_match_onnxruntime(rng, case):
    x_shape, w_shape, group, strides, dilations, pads, _ = case
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[0], dtype=np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=group, strides=list(strides),
                            dilations=list(dilations), pads=list(pads))
    model = make_model([node], [("x", F, list(x_shape))], [("y", F, None)], opset=17,
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b")])
    x = rng.standard_normal(x_shape, dtype=np.float32)
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-4, atol=1e-4)
    again = run_ep_host(model, {"x": x})[0]  # the prepared session, run twice, is unchanged
    np.testing.assert_array_equal(again, run_ep_host(model, {"x": x})[0])


@pytest.mark.parametrize("case", [c for c in CASES if c[-1] == "depthwise"])
def test_depthwise_without_spread_weights_is_the_same(rng, monkeypatch, case):
    """Past SPREAD_BYTES the per-tap weights broadcast instead of being spread and kept."""
    x_shape, w_shape, group, strides, dilations, pads, _ = case
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    spread, _ = run_conv(x, w, None, group, strides, dilations, pads, prepared=True)
    monkeypatch.setattr(conv_kernels, "SPREAD_BYTES", 0)
    broadcast, _ = run_conv(x, w, None, group, strides, dilations, pads, prepared=True)
    np.testing.assert_array_equal(spread, broadcast)
