"""The depthwise loop on blocks of channels (``block_conv2d``), the lane loops of
:mod:`ep_host_cpu.lane_conv` and the per-channel phase loop (``phase_conv2d``), each called
directly on shapes of both sizes, against a numpy reference in float64: strides, dilations,
asymmetric pads, channel counts that are not a multiple of the block, every fused activation
(NaN kept), float32 and float64."""

from __future__ import annotations

import numpy as np
import pytest
from ep_host_cpu import grouped_conv
from ep_host_cpu.grouped_conv import BlockGeometry, GroupedConv2d, LaneGeometry, PhaseGeometry
from ep_host_cpu.lane_conv import LANE_KERNELS

from ep_host.kernels.conv_geometry import window_geometry


@pytest.fixture(scope="module")
def loops():
    conv = GroupedConv2d()
    for dtype in GroupedConv2d.DTYPES:
        if not conv.ready(dtype):
            pytest.skip("numba's loops are not available")
    return conv


def reference(x, w, b, strides, dilations, begin, end):
    """The definition in float64: y[n, c] = b[c] + the taps of w[c, 0] over the zero-padded
    channel c."""
    n, c, h, width = x.shape
    kh, kw = w.shape[2:]
    (sh, sw), (dh, dw) = strides, dilations
    padded = np.zeros((n, c, h + begin[0] + end[0], width + begin[1] + end[1]))
    padded[:, :, begin[0]:begin[0] + h, begin[1]:begin[1] + width] = x
    oh = (padded.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (padded.shape[3] - (kw - 1) * dw - 1) // sw + 1
    y = np.zeros((n, c, oh, ow)) + b.astype(np.float64)[:, None, None]
    for i in range(kh):
        for k in range(kw):
            part = padded[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                          k * dw:k * dw + (ow - 1) * sw + 1:sw]
            y += w[:, 0, i, k].astype(np.float64)[:, None, None] * part
    return y


ACTIVATIONS = {
    None: lambda v: v,
    ("clip", 0.0, 6.0): lambda v: np.minimum(np.maximum(v, 0.0), 6.0),
    ("clip", 1.0, -1.0): lambda v: np.where(np.isnan(v), v, -1.0),  # lo > hi: all hi
    ("hard_sigmoid", 0.2, 0.5): lambda v: np.clip(0.2 * v + 0.5, 0.0, 1.0),
    ("hard_swish", 1 / 6, 0.5): lambda v: v * np.clip(v / 6 + 0.5, 0.0, 1.0),
}

# batch, channels, (h, w), (kh, kw), strides, dilations, pads (top, left, bottom, right)
SHAPES = [
    (1, 5, (1, 1), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # a 1x1 plane
    (2, 13, (7, 7), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),  # batch 2, a short last block
    (1, 20, (14, 14), (5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),  # stride 2 to 7 x 7
    (1, 20, (14, 13), (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),  # asymmetric pads, odd width
    (2, 5, (9, 11), (3, 3), (3, 3), (1, 1), (1, 2, 0, 1)),  # stride 3
    (1, 13, (8, 8), (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),  # dilation 2
    (1, 20, (10, 9), (3, 3), (2, 1), (2, 1), (1, 0, 3, 2)),  # mixed strides and dilations
    (1, 5, (7, 7), (7, 7), (1, 1), (1, 1), (3, 3, 3, 3)),  # ConvNeXt's 7x7
    (1, 13, (6, 9), (1, 3), (1, 1), (1, 1), (0, 1, 0, 1)),  # a 1x3 kernel
    (1, 5, (5, 6), (3, 3), (1, 1), (1, 1), (4, 5, 3, 6)),  # pads past the kernel
    (1, 20, (20, 20), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # over BLOCK_MAX_OUTPUT
    (2, 13, (40, 40), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),
    (1, 5, (40, 40), (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
]


def make(rng, dtype, batch, channels, size, kernel, strides, dilations, pads):
    x = (rng.standard_normal((batch, channels) + size) * 3).astype(dtype)
    x.flat[rng.integers(x.size)] = np.nan
    w = rng.standard_normal((channels, 1) + kernel).astype(dtype)
    b = rng.standard_normal(channels).astype(dtype)
    begin, end = pads[:2], pads[2:]
    out, _, _ = window_geometry(size, kernel, strides, dilations, pads, "NOTSET")
    return x, w, b, begin, end, out


def assert_equals_the_definition(loops, geometry, made, shape, activation):
    """The loop of ``geometry`` on what :func:`make` ``made`` for ``shape`` equals the float64
    definition, then ``activation``, to float32's or float64's precision."""
    x, w, b, begin, end, out = made
    batch, channels, _, _, strides, dilations, _ = shape
    y = np.full((batch, channels) + out, 7.0, dtype=x.dtype)
    x.flags.writeable = False
    loops(x, w.reshape(channels, 1, -1), b, y, geometry, channels, activation)
    want = ACTIVATIONS[activation](reference(x, w, b, strides, dilations, begin, end))
    tol = 1e-4 if x.dtype == np.float32 else 1e-10
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol * np.nanmax(np.abs(want)))


@pytest.mark.parametrize("loop", ["chosen", "block", "phase"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("activation", list(ACTIVATIONS), ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_depthwise_loops_equal_the_definition(rng, loops, loop, dtype, activation, shape):
    strides, dilations = shape[4:6]
    made = x, w, b, begin, end, out = make(rng, dtype, *shape)
    args = (x.shape, w.shape, strides, dilations, begin, end, out)
    if loop == "block":
        geometry = grouped_conv.block_geometry(*args[:5], out)
    elif loop == "phase":
        geometry = grouped_conv.phase_geometry(*args)
    else:
        geometry = loops.geometry(*args)
        small = out[0] * out[1] <= grouped_conv.BLOCK_MAX_OUTPUT
        assert isinstance(geometry, BlockGeometry if small else PhaseGeometry)
    assert_equals_the_definition(loops, geometry, made, shape, activation)


# each kernel size's lane loop in float32, and one of them in float64 (each is built apart)
LANE_CASES = [(shape, dtype) for shape in SHAPES for dtype in (np.float32, np.float64)
              if shape[3] in LANE_KERNELS and (dtype == np.float32 or shape[3] == (3, 3))]


@pytest.mark.parametrize("activation", list(ACTIVATIONS), ids=str)
@pytest.mark.parametrize(("shape", "dtype"), LANE_CASES, ids=str)
def test_lane_loops_equal_the_definition(rng, loops, dtype, activation, shape):
    kernel, strides, dilations = shape[3:6]
    made = x, w, _, begin, _, out = make(rng, dtype, *shape)
    assert loops.lanes_ready(dtype, kernel)
    geometry = grouped_conv.lane_geometry(x.shape, w.shape, strides, dilations, begin, out)
    assert_equals_the_definition(loops, geometry, made, shape, activation)


def test_the_choice_is_made_with_the_geometry(loops):
    """Depthwise convolutions with small outputs take the lane loop of their kernel size, given
    the compute type, else the blocked loop; larger outputs, and grouped convolutions of several
    channels per group, the phase loop."""
    def chosen(x_shape, w_shape, out, dtype=None):
        return type(loops.geometry(x_shape, w_shape, (1, 1), (1, 1), (1, 1), (1, 1), out,
                                   dtype=dtype))

    assert chosen((1, 576, 7, 7), (576, 1, 3, 3), (7, 7), np.float32) is LaneGeometry
    assert chosen((1, 576, 7, 7), (576, 1, 5, 5), (7, 7), "float32") is LaneGeometry
    assert chosen((1, 576, 7, 7), (576, 1, 3, 3), (7, 7)) is BlockGeometry  # type unknown
    assert chosen((1, 576, 7, 7), (576, 1, 1, 3), (7, 7), np.float32) is BlockGeometry
    assert chosen((1, 576, 14, 14), (576, 1, 3, 3), (14, 14), np.float32) is PhaseGeometry
    assert chosen((1, 144, 56, 56), (144, 1, 3, 3), (56, 56)) is PhaseGeometry
    assert chosen((1, 64, 7, 7), (64, 8, 3, 3), (7, 7)) is PhaseGeometry
    assert chosen((1, 64, 7, 7), (128, 1, 3, 3), (7, 7)) is PhaseGeometry  # multiplier 2
