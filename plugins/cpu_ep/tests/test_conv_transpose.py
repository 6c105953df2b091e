"""ConvTranspose and DeformConv on the CPU EP, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_declines, assert_matches_onnxruntime, node_model, randn, run_ep_host
from onnx import TensorProto

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}


TRANSPOSE_CASES = [
    ([1, 2, 4, 5], [2, 3, 3, 3], {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
    ([1, 2, 4, 5], [2, 3, 3, 3], {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
    ([1, 2, 4, 5], [2, 3, 3, 3], {"strides": [2, 3], "output_shape": [10, 16]}),
    ([1, 2, 4, 5], [2, 3, 3, 3], {"strides": [2, 3], "output_padding": [1, 2],
                                  "pads": [1, 0, 2, 1]}),
    ([2, 4, 4, 5], [4, 3, 3, 2], {"group": 2, "dilations": [2, 1], "strides": [1, 2],
                                  "pads": [0, 1, 1, 0]}),
    ([2, 4, 7], [4, 1, 3], {"group": 4, "strides": [3], "pads": [1, 1]}),
    ([1, 2, 3, 3, 3], [2, 2, 2, 2, 2], {"strides": [2, 1, 2], "pads": [1, 0, 0, 0, 1, 1]}),
    ([1, 2, 4, 5], [2, 3, 3, 3], {"strides": [2, 2], "auto_pad": "VALID"}),
]


@pytest.mark.parametrize("opset", [11, 22])
@pytest.mark.parametrize(("x_shape", "w_shape", "attrs"), TRANSPOSE_CASES)
def test_conv_transpose_matches_onnxruntime(rng, opset, x_shape, w_shape, attrs):
    m = w_shape[1] * attrs.get("group", 1)
    model = node_model("ConvTranspose", [("x", x_shape), ("w", w_shape), ("b", [m])], ["y"], opset,
                       **attrs)
    feeds = {"x": randn(rng, *x_shape), "w": randn(rng, *w_shape), "b": randn(rng, m)}
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_conv_transpose_1_takes_an_even_derived_padding(rng):
    model = node_model("ConvTranspose", [("x", [1, 2, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 10,
                       strides=[2, 3], output_shape=[9, 15])
    assert_matches_onnxruntime(model, {"x": randn(rng, 1, 2, 4, 5), "w": randn(rng, 2, 3, 3, 3)},
                               **TOL)


def test_conv_transpose_declines():
    # ConvTranspose-1's text puts an odd padding pixel on the other side from version 11's.
    model = node_model("ConvTranspose", [("x", [1, 2, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 10,
                       strides=[2, 3], output_shape=[8, 14])
    assert_declines(model, "attribute", "odd total padding")
    model = node_model("ConvTranspose", [("x", [1, 2, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 10,
                       strides=[2, 2], auto_pad="SAME_UPPER")
    assert_declines(model, "attribute", "ambiguous")
    model = node_model("ConvTranspose", [("x", [1, 3, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 22)
    assert_declines(model, "shape", "input channels (3)")


@pytest.mark.parametrize("opset", [19, 22])
def test_deform_conv_matches_onnxruntime(rng, opset):
    model = node_model("DeformConv", [("x", [2, 4, 5, 6]), ("w", [6, 2, 3, 2]),
                                    ("o", [2, 24, 2, 5]), ("b", [6]), ("m", [2, 12, 2, 5])],
                       ["y"], opset, group=2, offset_group=2, pads=[1, 0, 0, 1], strides=[2, 1],
                       dilations=[1, 2])
    feeds = {"x": randn(rng, 2, 4, 5, 6), "w": randn(rng, 6, 2, 3, 2),
             "o": randn(rng, 2, 24, 2, 5) * 2, "b": randn(rng, 6), "m": randn(rng, 2, 12, 2, 5)}
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_deform_conv_with_zero_offsets_is_a_conv(rng):
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1]}
    deform = node_model("DeformConv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3]),
                                     ("o", [1, 18, 3, 5])], ["y"], 22, **attrs)
    conv = node_model("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22, **attrs)
    feeds = {"x": randn(rng, 1, 2, 5, 5), "w": randn(rng, 3, 2, 3, 3)}
    (y,) = run_ep_host(deform, feeds | {"o": np.zeros((1, 18, 3, 5), np.float32)})
    np.testing.assert_allclose(y, run_ep_host(conv, feeds)[0], **TOL)


def test_deform_conv_declines_an_offset_off_the_output_grid():
    model = node_model("DeformConv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3]),
                                    ("o", [1, 18, 4, 4])], ["y"], 22)
    assert_declines(model, "shape", "output's spatial shape (3, 3)")
