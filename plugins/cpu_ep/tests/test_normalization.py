"""BatchNormalization (estimated and training-mode statistics), LayerNormalization,
RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization,
MeanVarianceNormalization, Softmax, LogSoftmax, Dropout and LRN on the CPU EP."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from cpukit import (
    assert_declines,
    assert_matches_onnxruntime,
    make_model,
    node_model,
    randn,
    run_ep_host,
)
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}


def batch_norm_model(x_shape, param_shape, opset, outputs=("y",), **attrs):
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], list(outputs),
                            **attrs)
    inputs = [("x", F, x_shape)] + [(n, F, param_shape) for n in "sbmv"]
    return make_model([node], inputs, [(n, F, None) for n in outputs], opset=opset)


def batch_norm_feeds(rng, x_shape, param_shape):
    return {"x": rng.standard_normal(x_shape).astype(np.float32),
            "s": rng.standard_normal(param_shape).astype(np.float32),
            "b": rng.standard_normal(param_shape).astype(np.float32),
            "m": rng.standard_normal(param_shape).astype(np.float32),
            "v": rng.random(param_shape).astype(np.float32) + 0.1}


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
@pytest.mark.parametrize("x_shape", [[2, 3], [2, 3, 5], [2, 3, 4, 5], [1, 3, 2, 3, 2]])
def test_batch_norm_matches_onnxruntime(rng, opset, x_shape):
    model = batch_norm_model(x_shape, [3], opset, epsilon=1e-3)
    assert_matches_onnxruntime(model, batch_norm_feeds(rng, x_shape, [3]), **TOL)


def test_batch_norm_7_per_activation_statistics(rng):
    model = batch_norm_model([2, 3, 4, 5], [3, 4, 5], 7, spatial=0)
    assert_matches_onnxruntime(model, batch_norm_feeds(rng, [2, 3, 4, 5], [3, 4, 5]), **TOL)


@pytest.mark.parametrize("opset", [5, 6])
def test_batch_norm_before_7_in_test_mode(rng, opset):
    # onnxruntime has no BatchNormalization-1/6: compare with the spec's formula.
    attrs = {"is_test": 1, "epsilon": 1e-3} | ({"consumed_inputs": [0, 0, 0, 1, 1]}
                                              if opset < 6 else {})
    model = batch_norm_model([2, 3, 4], [3], opset, **attrs)
    f = batch_norm_feeds(rng, [2, 3, 4], [3])
    (y,) = run_ep_host(model, f)
    p = {k: f[k][:, None] for k in "sbmv"}
    np.testing.assert_allclose(y, (f["x"] - p["m"]) / np.sqrt(p["v"] + 1e-3) * p["s"] + p["b"],
                               **TOL)


def test_batch_norm_float64(rng):
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])
    d = TensorProto.DOUBLE
    model = make_model([node], [("x", d, [2, 3, 4])] + [(n, d, [3]) for n in "sbmv"],
                       [("y", d, None)], opset=15)
    feeds = {k: v.astype(np.float64) for k, v in batch_norm_feeds(rng, [2, 3, 4], [3]).items()}
    (y,) = assert_matches_onnxruntime(model, feeds, rtol=1e-10, atol=1e-10)
    assert y.dtype == np.float64


def test_batch_norm_declines_training_outputs():
    model = batch_norm_model([2, 3, 4], [3], 9, outputs=("y", "mean", "var"))
    assert_declines(model, "attribute", "only output is Y", "'mean'")


def test_batch_norm_6_declines_batch_statistics():
    model = batch_norm_model([2, 3, 4], [3], 6)
    assert_declines(model, "attribute", "is_test=1", "got is_test=0")


def test_batch_norm_6_declines_per_activation_statistics():
    model = batch_norm_model([2, 3, 4], [3], 6, is_test=1, spatial=0)
    assert_declines(model, "attribute", "spatial=1", "got 0")


@pytest.mark.parametrize(("axis", "bias"), [(-1, True), (1, True), (-2, False), (0, True)])
def test_layer_norm_all_outputs(rng, axis, bias):
    shape = [2, 3, 4]
    param = shape[axis:]
    names = ["x", "s", "b"] if bias else ["x", "s"]
    node = helper.make_node("LayerNormalization", names, ["y", "mean", "inv_std"], axis=axis,
                            epsilon=1e-3)
    inputs = [("x", F, shape), ("s", F, param)] + ([("b", F, param)] if bias else [])
    outputs = [("y", F, None), ("mean", F, None), ("inv_std", F, None)]
    model = make_model([node], inputs, outputs, opset=17)
    feeds = {"x": rng.standard_normal(shape).astype(np.float32) * 3 + 1,
             "s": rng.standard_normal(param).astype(np.float32),
             "b": rng.standard_normal(param).astype(np.float32)}
    _, mean, _ = assert_matches_onnxruntime(model, {k: feeds[k] for k in names}, **TOL)
    assert mean.shape == tuple(shape[:axis % 3]) + (1,) * (3 - axis % 3)


@pytest.mark.parametrize(("elem", "tol"), [(TensorProto.DOUBLE, 1e-5), (TensorProto.FLOAT16, 2e-3)])
def test_layer_norm_computes_in_float32(rng, elem, tol):
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    node = helper.make_node("LayerNormalization", ["x", "s", "b"], ["y", "mean", "inv_std"])
    inputs = [("x", elem, [2, 3, 8]), ("s", elem, [8]), ("b", elem, [8])]
    outputs = [("y", elem, None), ("mean", F, None), ("inv_std", F, None)]
    model = make_model([node], inputs, outputs, opset=17)
    feeds = {"x": rng.standard_normal([2, 3, 8]).astype(dtype),
             "s": rng.standard_normal([8]).astype(dtype),
             "b": rng.standard_normal([8]).astype(dtype)}
    y, mean, _ = assert_matches_onnxruntime(model, feeds, rtol=tol, atol=tol)
    assert y.dtype == dtype and mean.dtype == np.float32


def test_layer_norm_declines_a_bfloat16_stash():
    node = helper.make_node("LayerNormalization", ["x", "s"], ["y"], stash_type=16)
    model = make_model([node], [("x", F, [2, 4]), ("s", F, [4])], [("y", F, None)], opset=17)
    assert_declines(model, "attribute", "stash_type=1", "got 16")


def softmax_model(op, shape, opset, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return make_model([node], [("x", F, shape)], [("y", F, None)], opset=opset)


SOFTMAX_CASES = [(opset, {"axis": axis}) for opset in (9, 11, 13) for axis in (0, 1, 2, 3)]
SOFTMAX_CASES += [(opset, attrs) for opset in (9, 11, 13) for attrs in ({},)]
SOFTMAX_CASES += [(opset, {"axis": axis}) for opset in (11, 13) for axis in (-1, -3)]


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize(("opset", "attrs"), SOFTMAX_CASES)
def test_softmax_matches_onnxruntime(rng, op, opset, attrs):
    x = rng.standard_normal([2, 3, 4, 5]).astype(np.float32) * 4
    assert_matches_onnxruntime(softmax_model(op, [2, 3, 4, 5], opset, **attrs), {"x": x}, **TOL)


def test_softmax_before_13_normalizes_the_coerced_rows(rng):
    x = rng.standard_normal([2, 3, 4]).astype(np.float32)
    (old,) = run_ep_host(softmax_model("Softmax", [2, 3, 4], 11, axis=1), {"x": x})
    (new,) = run_ep_host(softmax_model("Softmax", [2, 3, 4], 13, axis=1), {"x": x})
    np.testing.assert_allclose(old.sum(axis=(1, 2)), 1, rtol=1e-5)
    np.testing.assert_allclose(new.sum(axis=1), 1, rtol=1e-5)
    assert not np.allclose(old, new)


@pytest.mark.parametrize("elem", [TensorProto.FLOAT16, TensorProto.DOUBLE])
def test_softmax_other_types(rng, elem):
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    x = rng.standard_normal([3, 7]).astype(dtype)
    for op in ("Softmax", "LogSoftmax"):
        node = helper.make_node(op, ["x"], ["y"])
        model = make_model([node], [("x", elem, [3, 7])], [("y", elem, None)], opset=13)
        assert_matches_onnxruntime(model, {"x": x}, rtol=2e-3, atol=2e-3)


def test_softmax_declines_an_axis_out_of_range():
    assert_declines(softmax_model("Softmax", [2, 3], 13, axis=2), "attribute", "[-2, 1]", "got 2")


def test_softmax_declines_integer_input():
    node = helper.make_node("LogSoftmax", ["x"], ["y"])
    model = make_model([node], [("x", TensorProto.INT32, [2, 3])],
                       [("y", TensorProto.INT32, None)], opset=13)
    assert_declines(model, "dtype", "float16/float32/float64", "int32")


def dropout_model(opset, inputs=("x",), mask=True, mask_elem=TensorProto.BOOL, initializers=(),
                  **attrs):
    outputs = ["y", "mask"] if mask else ["y"]
    node = helper.make_node("Dropout", list(inputs), outputs, **attrs)
    graph_inputs = [("x", F, [3, 4])] + [(n, TensorProto.BOOL, []) for n in inputs[1:]
                                         if n == "training" and not initializers]
    outs = [("y", F, None)] + ([("mask", mask_elem, None)] if mask else [])
    return make_model([node], graph_inputs, outs, opset=opset, initializers=initializers)


@pytest.mark.parametrize("opset", [12, 13, 22])
@pytest.mark.parametrize("training", [None, False])
def test_dropout_is_the_identity_with_an_all_true_mask(rng, opset, training):
    x = rng.standard_normal([3, 4]).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(0.3, np.float32), "ratio")]
    inputs = ["x", "ratio"]
    if training is not None:
        inits.append(numpy_helper.from_array(np.array(training), "training"))
        inputs.append("training")
    model = dropout_model(opset, inputs=inputs, initializers=inits)
    y, mask = assert_matches_onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == bool and mask.all()


@pytest.mark.parametrize("opset", [9, 10, 11])
def test_dropout_7_and_10_outputs_the_input(rng, opset):
    # onnxruntime fills the inference mask of Dropout-7/10 with zeros; the spec leaves it open
    # there, and from version 12 it is all ones (nothing dropped), which this EP returns.
    x = rng.standard_normal([3, 4]).astype(np.float32)
    mask_elem = F if opset < 10 else TensorProto.BOOL
    assert_matches_onnxruntime(dropout_model(opset, mask=False, ratio=0.4), {"x": x})
    y, mask = run_ep_host(dropout_model(opset, mask_elem=mask_elem, ratio=0.4), {"x": x})
    np.testing.assert_array_equal(y, x)
    assert mask.dtype == helper.tensor_dtype_to_np_dtype(mask_elem) and (mask == 1).all()


def test_dropout_6_in_test_mode(rng):
    x = rng.standard_normal([3, 4]).astype(np.float32)
    (y,) = run_ep_host(dropout_model(6, mask=False, is_test=1), {"x": x})
    np.testing.assert_array_equal(y, x)


def test_dropout_6_declines_training():
    assert_declines(dropout_model(6, mask=False), "attribute", "is_test=1", "got is_test=0")


@pytest.mark.parametrize(("axis", "elem", "dtype", "tol"), [(-1, F, np.float32, 1e-5),
                                                            (1, F, np.float32, 1e-5),
                                                            (-1, TensorProto.FLOAT16, np.float16,
                                                             2e-3)])
def test_rms_normalization_matches_onnxruntime(rng, axis, elem, dtype, tol):
    shape = [2, 3, 8]
    model = node_model("RMSNormalization", [("x", shape), ("s", shape[axis:])], ["y"], 23,
                       elem=elem, axis=axis, epsilon=1e-3)
    feeds = {"x": randn(rng, *shape, dtype=dtype), "s": randn(rng, *shape[axis:], dtype=dtype)}
    assert_matches_onnxruntime(model, feeds, rtol=tol, atol=tol)


@pytest.mark.parametrize(("opset", "params"), [(18, 2), (21, 6)])
def test_group_normalization_matches_onnxruntime(rng, opset, params):
    # Version 18 scales per group, version 21 per channel.
    model = node_model("GroupNormalization", [("x", [2, 6, 3, 4]), ("s", [params]),
                                            ("b", [params])], ["y"], opset, num_groups=2,
                       epsilon=1e-3)
    feeds = {"x": randn(rng, 2, 6, 3, 4), "s": randn(rng, params), "b": randn(rng, params)}
    assert_matches_onnxruntime(model, feeds, **TOL)


@pytest.mark.parametrize("opset", [6, 22])
def test_instance_normalization_matches_onnxruntime(rng, opset):
    model = node_model("InstanceNormalization", [("x", [2, 3, 4, 5, 2]), ("s", [3]), ("b", [3])],
                       ["y"], opset, epsilon=1e-3)
    feeds = {"x": randn(rng, 2, 3, 4, 5, 2), "s": randn(rng, 3), "b": randn(rng, 3)}
    assert_matches_onnxruntime(model, feeds, **TOL)


@pytest.mark.parametrize("opset", [1, 22])
@pytest.mark.parametrize(("axis", "p"), [(1, 1), (0, 2), (-1, 2)])
def test_lp_normalization_matches_onnxruntime_and_keeps_zero_vectors(rng, opset, axis, p):
    x = randn(rng, 3, 4)
    x[1], x[:, 2] = 0, 0
    (y,) = assert_matches_onnxruntime(node_model("LpNormalization", [("x", [3, 4])], ["y"], opset,
                                                 axis=axis, p=p), {"x": x}, **TOL)
    assert np.isfinite(y).all()


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("axes", [None, [1, 2]])
def test_mean_variance_normalization_matches_onnxruntime(rng, opset, axes):
    attrs = {} if axes is None else {"axes": axes}
    model = node_model("MeanVarianceNormalization", [("x", [2, 3, 4, 5])], ["y"], opset, **attrs)
    assert_matches_onnxruntime(model, {"x": randn(rng, 2, 3, 4, 5) * 3 + 1}, **TOL)


def test_batch_normalization_training_mode_matches_onnxruntime(rng):
    model = node_model("BatchNormalization", [("x", [2, 3, 4, 5])] + [(n, [3]) for n in "sbmv"],
                       ["y", "running_mean", "running_var"], 15, training_mode=1, momentum=0.8)
    feeds = {"x": randn(rng, 2, 3, 4, 5) * 2 + 1} | {n: randn(rng, 3) for n in "sbm"}
    feeds["v"] = rng.random(3).astype(np.float32) + 0.5
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_normalizations_decline():
    model = node_model("LpNormalization", [("x", [3, 4])], ["y"], 22, p=3)
    assert_declines(model, "attribute", "p must be 1 or 2", "got 3")
    model = node_model("RMSNormalization", [("x", [3, 4]), ("s", [4])], ["y"], 23, stash_type=16)
    assert_declines(model, "attribute", "stash_type 1 (float32) or 11", "got 16")
    model = node_model("GroupNormalization", [("x", [2, 6, 3]), ("s", [6]), ("b", [6])], ["y"],
                       21, num_groups=4)
    assert_declines(model, "attribute", "must divide the 6 channels")
    model = node_model("InstanceNormalization", [("x", [2, 3, 4]), ("s", [3]), ("b", [3])], ["y"],
                       1)
    assert_declines(model, "shape", "must be 4-D")


def training_dropout_model(seed=3, mask=True):
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"] if mask else ["y"],
                            seed=seed)
    outputs = [("y", F, None)] + ([("mask", TensorProto.BOOL, None)] if mask else [])
    return make_model([node], [("x", F, [40, 50]), ("r", F, []), ("t", TensorProto.BOOL, [])],
                      outputs, opset=22)


def test_dropout_training_keeps_and_scales_by_its_mask(rng):
    x = randn(rng, 40, 50)
    feeds = {"x": x, "r": np.array(0.3, np.float32), "t": np.array(True)}
    y, mask = run_ep_host(training_dropout_model(), feeds)
    again, _ = run_ep_host(training_dropout_model(), feeds)
    np.testing.assert_allclose(y, np.where(mask, x / 0.7, 0), rtol=1e-6)
    np.testing.assert_array_equal(y, again)  # seeded: the same mask every run
    assert 0.6 < mask.mean() < 0.8


def test_dropout_training_off_or_ratio_zero_is_the_identity(rng):
    x = randn(rng, 40, 50)
    for ratio, training in ((0.5, False), (0.0, True)):
        feeds = {"x": x, "r": np.array(ratio, np.float32), "t": np.array(training)}
        y, mask = run_ep_host(training_dropout_model(), feeds)
        np.testing.assert_array_equal(y, x)
        assert mask.all()


def test_dropout_declines_a_constant_ratio_of_one():
    node = helper.make_node("Dropout", ["x", "r"], ["y"])
    model = make_model([node], [("x", F, [3])], [("y", F, None)], opset=22,
                       initializers=[numpy_helper.from_array(np.array(1, np.float32), "r")])
    assert_declines(model, "attribute", "[0, 1)", "got 1.0")


def test_bfloat16_softmax_computes_in_bfloat16(rng):
    # Softmax's function body runs each op in the input type; no widening to float32.
    s = randn(rng, 3, 7).astype(ml_dtypes.bfloat16)
    model = node_model("Softmax", [("x", [3, 7])], ["y"], 13, elem=TensorProto.BFLOAT16)
    (y,) = run_ep_host(model, {"x": s})
    e = np.exp(s.astype(np.float64) - s.astype(np.float64).max(axis=1, keepdims=True))
    assert y.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(y.astype(np.float64), e / e.sum(axis=1, keepdims=True),
                               rtol=2**-6, atol=2**-8)


def lrn_model(opset, **attrs):
    node = helper.make_node("LRN", ["x"], ["y"], **attrs)
    return make_model([node], [("x", F, [2, 6, 4, 3])], [("y", F, None)], opset=opset)


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("attrs", [
    {"size": 5},
    {"size": 3, "alpha": 0.001, "beta": 0.5, "bias": 2.0},
    {"size": 1},
])
def test_lrn(rng, opset, attrs):
    x = rng.standard_normal([2, 6, 4, 3]).astype(np.float32) * 3
    assert_matches_onnxruntime(lrn_model(opset, **attrs), {"x": x}, **TOL)


@pytest.mark.parametrize("opset", [9, 13])
def test_lrn_even_size_sums_one_more_channel_after(rng, opset):
    # onnxruntime takes odd sizes only; the spec sums channels c - 1 ... c + 2 for size 4.
    x = rng.standard_normal([2, 6, 4, 3]).astype(np.float32) * 3
    (y,) = run_ep_host(lrn_model(opset, size=4, alpha=0.01, beta=0.75, bias=1.5), {"x": x})
    expected = np.empty_like(x)
    for c in range(6):
        window = x[:, max(0, c - 1):min(6, c + 3)]
        expected[:, c] = x[:, c] / (1.5 + 0.01 / 4 * (window**2).sum(axis=1)) ** 0.75
    np.testing.assert_allclose(y, expected, **TOL)


def test_lrn_declines_integer_input():
    node = helper.make_node("LRN", ["x"], ["y"], size=3)
    model = make_model([node], [("x", TensorProto.INT32, [1, 4, 3, 3])],
                       [("y", TensorProto.INT32, None)], opset=13)
    assert_declines(model, "dtype", "float16/float32/float64")
