"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on the CPU EP."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_declines, assert_matches_onnxruntime, make_model, run_ep_host
from onnx import TensorProto, helper

F = TensorProto.FLOAT
TOL = {"rtol": 1e-5, "atol": 1e-5}


def loss_model(op, shape, opset, weight=True, log_prob=False, elem=F,
               target_elem=TensorProto.INT64, **attrs):
    inputs = [("x", elem, shape), ("t", target_elem, [shape[0], *shape[2:]])]
    if weight:
        inputs.append(("w", elem, [shape[1]]))
    outputs = ["loss", "log_prob"] if log_prob else ["loss"]
    node = helper.make_node(op, [n for n, _, _ in inputs], outputs, **attrs)
    return make_model([node], inputs, [(o, elem, None) for o in outputs], opset=opset)


def loss_feeds(rng, shape, ignore=None, dtype=np.float32, target_dtype=np.int64):
    target = rng.integers(0, shape[1], [shape[0], *shape[2:]]).astype(target_dtype)
    if ignore is not None:
        target.reshape(-1)[::3] = ignore
    return {"x": rng.standard_normal(shape).astype(dtype), "t": target,
            "w": rng.random(shape[1]).astype(dtype) + 0.5}


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("weight", [True, False])
@pytest.mark.parametrize(("shape", "ignore"), [([4, 5], None), ([3, 5, 2, 3], 2),
                                               ([3, 5, 4], -1)])
def test_nll_loss_matches_onnxruntime(rng, reduction, weight, shape, ignore):
    attrs = {"reduction": reduction} | ({} if ignore is None else {"ignore_index": ignore})
    model = loss_model("NegativeLogLikelihoodLoss", shape, 22, weight=weight, **attrs)
    feeds = loss_feeds(rng, shape, ignore)
    if not weight:
        del feeds["w"]
    assert_matches_onnxruntime(model, feeds, **TOL)


@pytest.mark.parametrize("opset", [12, 13])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_softmax_cross_entropy_matches_onnxruntime(rng, opset, reduction):
    shape = [3, 5, 4]
    model = loss_model("SoftmaxCrossEntropyLoss", shape, opset, log_prob=True,
                       target_elem=TensorProto.INT32, reduction=reduction, ignore_index=1)
    feeds = loss_feeds(rng, shape, ignore=1, target_dtype=np.int32)
    _, log_prob = assert_matches_onnxruntime(model, feeds, **TOL)
    np.testing.assert_allclose(np.exp(log_prob).sum(axis=1), 1, rtol=1e-5)


@pytest.mark.parametrize(("elem", "dtype", "tol"), [(TensorProto.FLOAT16, np.float16, 3e-3),
                                                    (TensorProto.DOUBLE, np.float64, 1e-10)])
def test_losses_in_other_float_types(rng, elem, dtype, tol):
    model = loss_model("SoftmaxCrossEntropyLoss", [6, 4], 13, log_prob=True, elem=elem)
    loss, log_prob = assert_matches_onnxruntime(model, loss_feeds(rng, [6, 4], dtype=dtype),
                                                rtol=tol, atol=tol)
    assert loss.dtype == dtype and log_prob.dtype == dtype


def test_mean_divides_by_the_weights_of_the_counted_targets():
    x = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4]], np.float32))
    feeds = {"x": x, "t": np.array([0, 1, 2]), "w": np.array([1, 2, 3], np.float32)}
    model = loss_model("NegativeLogLikelihoodLoss", [3, 3], 22, ignore_index=2)
    (loss,) = run_ep_host(model, feeds)
    np.testing.assert_allclose(loss, -(np.log(0.5) + 2 * np.log(0.8)) / 3, rtol=1e-6)


def test_a_target_out_of_range_raises_instead_of_wrapping(rng):
    feeds = loss_feeds(rng, [3, 4])
    feeds["t"][1] = -1
    with pytest.raises(Exception, match=r"\[0, 4\)"):
        run_ep_host(loss_model("NegativeLogLikelihoodLoss", [3, 4], 22), feeds)


def test_losses_decline():
    model = loss_model("NegativeLogLikelihoodLoss", [3, 4], 22, reduction="max")
    assert_declines(model, "attribute", "none/sum/mean", "'max'")
    node = helper.make_node("SoftmaxCrossEntropyLoss", ["x", "t", "w"], ["loss"])
    model = make_model([node], [("x", F, [3, 4]), ("t", TensorProto.INT64, [3]), ("w", F, [5])],
                       [("loss", F, None)], opset=13)
    assert_declines(model, "shape", "one value per class (4)")
    node = helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["loss"])
    model = make_model([node], [("x", F, [3, 4, 2]), ("t", TensorProto.INT64, [3])],
                       [("loss", F, None)], opset=22)
    assert_declines(model, "shape", "rank 2")
