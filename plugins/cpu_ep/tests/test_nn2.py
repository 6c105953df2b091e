"""The rest of the CPU EP's normalization and convolution families: RMS, group, instance, Lp and
mean-variance normalization, training-mode BatchNormalization and Dropout, ConvTranspose,
ConvInteger, DeformConv, CausalConvWithState, LpPool and GlobalLpPool, and bfloat16 input."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cpukit import assert_declines, assert_matches_onnxruntime, make_model, run_ep_host
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}


def one_node(op, inputs, outputs, opset, elem=F, **attrs):
    """``inputs``: (name, shape) pairs, or (name, shape, elem)."""
    node = helper.make_node(op, [i[0] for i in inputs], list(outputs), **attrs)
    graph_inputs = [(i[0], i[2] if len(i) > 2 else elem, i[1]) for i in inputs]
    return make_model([node], graph_inputs, [(o, elem, None) for o in outputs], opset=opset)


def randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


# -- normalizations ---------------------------------------------------------------------------


@pytest.mark.parametrize(("axis", "elem", "dtype", "tol"), [(-1, F, np.float32, 1e-5),
                                                            (1, F, np.float32, 1e-5),
                                                            (-1, TensorProto.FLOAT16, np.float16,
                                                             2e-3)])
def test_rms_normalization_matches_onnxruntime(rng, axis, elem, dtype, tol):
    shape = [2, 3, 8]
    model = one_node("RMSNormalization", [("x", shape), ("s", shape[axis:])], ["y"], 23,
                     elem=elem, axis=axis, epsilon=1e-3)
    feeds = {"x": randn(rng, *shape, dtype=dtype), "s": randn(rng, *shape[axis:], dtype=dtype)}
    assert_matches_onnxruntime(model, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize(("opset", "params"), [(18, 2), (21, 6)])
def test_group_normalization_matches_onnxruntime(rng, opset, params):
    # Version 18 scales per group, version 21 per channel.
    model = one_node("GroupNormalization", [("x", [2, 6, 3, 4]), ("s", [params]),
                                            ("b", [params])], ["y"], opset, num_groups=2,
                     epsilon=1e-3)
    feeds = {"x": randn(rng, 2, 6, 3, 4), "s": randn(rng, params), "b": randn(rng, params)}
    assert_matches_onnxruntime(model, feeds, **TOL)


@pytest.mark.parametrize("opset", [6, 22])
def test_instance_normalization_matches_onnxruntime(rng, opset):
    model = one_node("InstanceNormalization", [("x", [2, 3, 4, 5, 2]), ("s", [3]), ("b", [3])],
                     ["y"], opset, epsilon=1e-3)
    feeds = {"x": randn(rng, 2, 3, 4, 5, 2), "s": randn(rng, 3), "b": randn(rng, 3)}
    assert_matches_onnxruntime(model, feeds, **TOL)


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize(("axis", "p"), [(1, 1), (0, 2), (-1, 2)])
def test_lp_normalization_matches_onnxruntime_and_keeps_zero_vectors(rng, opset, axis, p):
    x = randn(rng, 3, 4)
    x[1], x[:, 2] = 0, 0
    (y,) = assert_matches_onnxruntime(one_node("LpNormalization", [("x", [3, 4])], ["y"], opset,
                                               axis=axis, p=p), {"x": x}, **TOL)
    assert np.isfinite(y).all()


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("axes", [None, [1, 2]])
def test_mean_variance_normalization_matches_onnxruntime(rng, opset, axes):
    attrs = {} if axes is None else {"axes": axes}
    model = one_node("MeanVarianceNormalization", [("x", [2, 3, 4, 5])], ["y"], opset, **attrs)
    assert_matches_onnxruntime(model, {"x": randn(rng, 2, 3, 4, 5) * 3 + 1}, **TOL)


def test_batch_normalization_training_mode_matches_onnxruntime(rng):
    model = one_node("BatchNormalization", [("x", [2, 3, 4, 5])] + [(n, [3]) for n in "sbmv"],
                     ["y", "running_mean", "running_var"], 15, training_mode=1, momentum=0.8)
    feeds = {"x": randn(rng, 2, 3, 4, 5) * 2 + 1} | {n: randn(rng, 3) for n in "sbm"}
    feeds["v"] = rng.random(3).astype(np.float32) + 0.5
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_normalizations_decline():
    model = one_node("LpNormalization", [("x", [3, 4])], ["y"], 22, p=3)
    assert_declines(model, "attribute", "p must be 1 or 2", "got 3")
    model = one_node("RMSNormalization", [("x", [3, 4]), ("s", [4])], ["y"], 23, stash_type=16)
    assert_declines(model, "attribute", "stash_type 1 (float32) or 11", "got 16")
    model = one_node("GroupNormalization", [("x", [2, 6, 3]), ("s", [6]), ("b", [6])], ["y"],
                     21, num_groups=4)
    assert_declines(model, "attribute", "must divide the 6 channels")
    model = one_node("InstanceNormalization", [("x", [2, 3, 4]), ("s", [3]), ("b", [3])], ["y"],
                     1)
    assert_declines(model, "shape", "must be 4-D")


# -- Dropout in training mode -----------------------------------------------------------------


def dropout_model(seed=3, mask=True):
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"] if mask else ["y"],
                            seed=seed)
    outputs = [("y", F, None)] + ([("mask", TensorProto.BOOL, None)] if mask else [])
    return make_model([node], [("x", F, [40, 50]), ("r", F, []), ("t", TensorProto.BOOL, [])],
                      outputs, opset=22)


def test_dropout_training_keeps_and_scales_by_its_mask(rng):
    x = randn(rng, 40, 50)
    feeds = {"x": x, "r": np.array(0.3, np.float32), "t": np.array(True)}
    y, mask = run_ep_host(dropout_model(), feeds)
    again, _ = run_ep_host(dropout_model(), feeds)
    np.testing.assert_allclose(y, np.where(mask, x / 0.7, 0), rtol=1e-6)
    np.testing.assert_array_equal(y, again)  # seeded: the same mask every run
    assert 0.6 < mask.mean() < 0.8


def test_dropout_training_off_or_ratio_zero_is_the_identity(rng):
    x = randn(rng, 40, 50)
    for ratio, training in ((0.5, False), (0.0, True)):
        feeds = {"x": x, "r": np.array(ratio, np.float32), "t": np.array(training)}
        y, mask = run_ep_host(dropout_model(), feeds)
        np.testing.assert_array_equal(y, x)
        assert mask.all()


def test_dropout_declines_a_constant_ratio_of_one():
    node = helper.make_node("Dropout", ["x", "r"], ["y"])
    model = make_model([node], [("x", F, [3])], [("y", F, None)], opset=22,
                       initializers=[numpy_helper.from_array(np.array(1, np.float32), "r")])
    assert_declines(model, "attribute", "[0, 1)", "got 1.0")


# -- ConvTranspose ----------------------------------------------------------------------------

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
    model = one_node("ConvTranspose", [("x", x_shape), ("w", w_shape), ("b", [m])], ["y"], opset,
                     **attrs)
    feeds = {"x": randn(rng, *x_shape), "w": randn(rng, *w_shape), "b": randn(rng, m)}
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_conv_transpose_1_takes_an_even_derived_padding(rng):
    model = one_node("ConvTranspose", [("x", [1, 2, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 10,
                     strides=[2, 3], output_shape=[9, 15])
    assert_matches_onnxruntime(model, {"x": randn(rng, 1, 2, 4, 5), "w": randn(rng, 2, 3, 3, 3)},
                               **TOL)


def test_conv_transpose_declines():
    # ConvTranspose-1's text puts an odd padding pixel on the other side from version 11's.
    model = one_node("ConvTranspose", [("x", [1, 2, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 10,
                     strides=[2, 3], output_shape=[8, 14])
    assert_declines(model, "attribute", "odd total padding")
    model = one_node("ConvTranspose", [("x", [1, 2, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 10,
                     strides=[2, 2], auto_pad="SAME_UPPER")
    assert_declines(model, "attribute", "ambiguous")
    model = one_node("ConvTranspose", [("x", [1, 3, 4, 5]), ("w", [2, 3, 3, 3])], ["y"], 22)
    assert_declines(model, "shape", "input channels (3)")


# -- ConvInteger, DeformConv, CausalConvWithState ---------------------------------------------


def test_conv_integer_matches_onnxruntime(rng):
    u8 = TensorProto.UINT8
    model = one_node("ConvInteger", [("x", [1, 4, 5, 5], u8), ("w", [4, 2, 2, 2], u8),
                                     ("xz", [], u8)], ["y"], 10, elem=TensorProto.INT32,
                     group=2, pads=[1, 0, 1, 2], strides=[1, 2])
    feeds = {"x": rng.integers(0, 256, (1, 4, 5, 5)).astype(np.uint8),
             "w": rng.integers(0, 256, (4, 2, 2, 2)).astype(np.uint8),
             "xz": np.array(128, np.uint8)}
    assert_matches_onnxruntime(model, feeds)


def test_conv_integer_per_channel_zero_points_equal_a_float_conv(rng):
    # onnxruntime has no per-channel w_zero_point; a float Conv of the shifted values is exact.
    i8 = TensorProto.INT8
    model = one_node("ConvInteger", [("x", [1, 2, 5, 5], i8), ("w", [3, 2, 3, 3], i8),
                                     ("xz", [], i8), ("wz", [3], i8)], ["y"], 10,
                     elem=TensorProto.INT32, pads=[1, 1, 1, 1])
    feeds = {"x": rng.integers(-128, 128, (1, 2, 5, 5)).astype(np.int8),
             "w": rng.integers(-128, 128, (3, 2, 3, 3)).astype(np.int8),
             "xz": np.array(3, np.int8), "wz": np.array([1, -2, 5], np.int8)}
    (y,) = run_ep_host(model, feeds)
    conv = one_node("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22,
                    elem=TensorProto.DOUBLE, pads=[1, 1, 1, 1])
    (want,) = run_ep_host(conv, {"x": feeds["x"].astype(np.float64) - 3,
                                 "w": feeds["w"].astype(np.float64)
                                 - feeds["wz"].reshape(3, 1, 1, 1)})
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, want.astype(np.int32))


@pytest.mark.parametrize("opset", [19, 22])
def test_deform_conv_matches_onnxruntime(rng, opset):
    model = one_node("DeformConv", [("x", [2, 4, 5, 6]), ("w", [6, 2, 3, 2]),
                                    ("o", [2, 24, 2, 5]), ("b", [6]), ("m", [2, 12, 2, 5])],
                     ["y"], opset, group=2, offset_group=2, pads=[1, 0, 0, 1], strides=[2, 1],
                     dilations=[1, 2])
    feeds = {"x": randn(rng, 2, 4, 5, 6), "w": randn(rng, 6, 2, 3, 2),
             "o": randn(rng, 2, 24, 2, 5) * 2, "b": randn(rng, 6), "m": randn(rng, 2, 12, 2, 5)}
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_deform_conv_with_zero_offsets_is_a_conv(rng):
    attrs = {"pads": [1, 1, 1, 1], "strides": [2, 1]}
    deform = one_node("DeformConv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3]),
                                     ("o", [1, 18, 3, 5])], ["y"], 22, **attrs)
    conv = one_node("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22, **attrs)
    feeds = {"x": randn(rng, 1, 2, 5, 5), "w": randn(rng, 3, 2, 3, 3)}
    (y,) = run_ep_host(deform, feeds | {"o": np.zeros((1, 18, 3, 5), np.float32)})
    np.testing.assert_allclose(y, run_ep_host(conv, feeds)[0], **TOL)


def test_deform_conv_declines_an_offset_off_the_output_grid():
    model = one_node("DeformConv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3]),
                                    ("o", [1, 18, 4, 4])], ["y"], 22)
    assert_declines(model, "shape", "output's spatial shape (3, 3)")


def causal_conv_model(length, past=True, activation="silu"):
    inputs = [("x", [2, 3, length]), ("w", [3, 1, 4]), ("b", [3])]
    inputs += [("past", [2, 3, 3])] if past else []
    return one_node("CausalConvWithState", inputs, ["y", "state"], 27, activation=activation)


def test_causal_conv_with_state_is_a_left_padded_depthwise_conv(rng):
    feeds = {"x": randn(rng, 2, 3, 7), "w": randn(rng, 3, 1, 4), "b": randn(rng, 3)}
    y, state = run_ep_host(causal_conv_model(7, past=False, activation="none"), feeds)
    conv = one_node("Conv", [("x", [2, 3, 7]), ("w", [3, 1, 4]), ("b", [3])], ["y"], 22,
                    group=3, pads=[3, 0])
    np.testing.assert_allclose(y, run_ep_host(conv, feeds)[0], **TOL)
    np.testing.assert_array_equal(state, feeds["x"][..., -3:])


def test_causal_conv_with_state_streams_in_chunks(rng):
    x = randn(rng, 2, 3, 7)
    params = {"w": randn(rng, 3, 1, 4), "b": randn(rng, 3)}
    past = randn(rng, 2, 3, 3)
    whole, final = run_ep_host(causal_conv_model(7), params | {"x": x, "past": past})
    first, state = run_ep_host(causal_conv_model(2), params | {"x": x[..., :2], "past": past})
    rest, state = run_ep_host(causal_conv_model(5), params | {"x": x[..., 2:], "past": state})
    np.testing.assert_allclose(np.concatenate([first, rest], axis=-1), whole, **TOL)
    np.testing.assert_array_equal(state, final)


# -- LpPool, GlobalLpPool ---------------------------------------------------------------------


@pytest.mark.parametrize("opset", [11, 18, 22])
@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "p": 3},
                                   {"kernel_shape": [2, 3], "p": 1, "strides": [2, 1],
                                    "pads": [1, 1, 0, 2]},
                                   {"kernel_shape": [3, 2], "p": 2, "auto_pad": "SAME_UPPER"}])
def test_lp_pool_matches_onnxruntime(rng, opset, attrs):
    model = one_node("LpPool", [("x", [1, 2, 6, 6])], ["y"], opset, **attrs)
    assert_matches_onnxruntime(model, {"x": randn(rng, 1, 2, 6, 6)}, **TOL)


def test_lp_pool_18_ceil_mode_and_dilations_match_onnxruntime(rng):
    model = one_node("LpPool", [("x", [1, 2, 7, 7])], ["y"], 18, kernel_shape=[2, 2], p=2,
                     ceil_mode=1, strides=[2, 2], dilations=[2, 1])
    assert_matches_onnxruntime(model, {"x": randn(rng, 1, 2, 7, 7)}, **TOL)


def test_lp_pool_declines():
    model = one_node("LpPool", [("x", [1, 2, 6, 6])], ["y"], 2, kernel_shape=[2, 2], p=2,
                     strides=[2, 2], auto_pad="SAME_UPPER")
    assert_declines(model, "attribute", "LpPool-2", "ambiguous")
    model = one_node("LpPool", [("x", [1, 2, 6, 6])], ["y"], 22, kernel_shape=[2, 2], p=0)
    assert_declines(model, "attribute", "p must be positive")


@pytest.mark.parametrize(("opset", "p"), [(1, 3.0), (2, 3), (22, 1)])
def test_global_lp_pool_is_the_norm_over_space(rng, opset, p):
    x = randn(rng, 2, 3, 4, 5)
    (y,) = run_ep_host(one_node("GlobalLpPool", [("x", [2, 3, 4, 5])], ["y"], opset, p=p),
                       {"x": x})
    want = (np.abs(x.astype(np.float64)) ** p).sum(axis=(2, 3), keepdims=True) ** (1 / p)
    np.testing.assert_allclose(y, want, **TOL)


# -- bfloat16 ---------------------------------------------------------------------------------


def test_bfloat16_conv_accumulates_in_float32_and_rounds_once(rng):
    bf16 = TensorProto.BFLOAT16
    x = randn(rng, 1, 2, 5, 5).astype(ml_dtypes.bfloat16)
    w = randn(rng, 3, 2, 3, 3).astype(ml_dtypes.bfloat16)
    model = one_node("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22, elem=bf16)
    (y,) = run_ep_host(model, {"x": x, "w": w})
    conv = one_node("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 22)
    (want,) = run_ep_host(conv, {"x": x.astype(np.float32), "w": w.astype(np.float32)})
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(y, want.astype(ml_dtypes.bfloat16))


def test_bfloat16_softmax_computes_in_bfloat16(rng):
    # Softmax's function body runs each op in the input type; no widening to float32.
    s = randn(rng, 3, 7).astype(ml_dtypes.bfloat16)
    model = one_node("Softmax", [("x", [3, 7])], ["y"], 13, elem=TensorProto.BFLOAT16)
    (y,) = run_ep_host(model, {"x": s})
    e = np.exp(s.astype(np.float64) - s.astype(np.float64).max(axis=1, keepdims=True))
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float64), e / e.sum(axis=1, keepdims=True),
                               rtol=2**-6, atol=2**-8)


def test_bfloat16_declines_before_the_version_that_allows_it():
    model = one_node("Conv", [("x", [1, 2, 5, 5]), ("w", [3, 2, 3, 3])], ["y"], 11,
                     elem=TensorProto.BFLOAT16)
    assert_declines(model, "dtype", "float16/float32/float64", "bfloat16")
