"""Reductions: axes as attribute or input, keepdims, noop_with_empty_axes, empty sets, dtypes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from ep_host.kernels import REGISTRY
from onnx import helper, numpy_helper

OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare",
       "ReduceL2"]
AXES_INPUT_SINCE = {op: 18 for op in OPS} | {"ReduceSum": 13}


def reduce_model(op, x, axes=None, *, opset, axes_input="const", **attrs):
    """``axes`` as an attribute before the op's input version; else as an initializer
    (``axes_input="const"``) or a graph input ("feed")."""
    inputs = [("x", helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))]
    inits, names = [], ["x"]
    if opset < AXES_INPUT_SINCE[op]:
        if axes is not None:
            attrs["axes"] = axes
    elif axes is not None:
        names.append("axes")
        if axes_input == "const":
            inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
        else:
            inputs.append(("axes", onnx.TensorProto.INT64, [len(axes)]))
    node = helper.make_node(op, names, ["out"], **attrs)
    return make_model([node], inputs, [("out", inputs[0][1], None)], opset=opset,
                      initializers=inits)


def test_every_version_in_onnx_is_registered():
    for op in OPS:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("opset", [11, 18])  # axes as attribute, then as input
@pytest.mark.parametrize("axes", [None, [1], [-1, 0], [0, 2]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_float_reductions_match_onnxruntime(op, opset, axes, keepdims, rng):
    x = rng.uniform(-2, 2, (2, 3, 4)).astype(np.float32)
    model = reduce_model(op, x, axes, opset=opset, keepdims=keepdims)
    (out,) = assert_matches_onnxruntime(model, {"x": x})
    assert out.dtype == np.float32


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("opset", [13, 18])
def test_integer_reductions_match_onnxruntime(op, dtype, opset):
    # means and L2 norms of integers truncate toward zero: -7 / 3 == -2, sqrt(3) == 1
    x = np.array([[1, 2, 4], [-1, -2, -4], [3, -5, 0], [1, 1, 1]], dtype)
    model = reduce_model(op, x, [1], opset=opset, keepdims=0)
    (out,) = assert_matches_onnxruntime(model, {"x": x})
    assert out.dtype == dtype


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("opset", [12, 13, 18, 20])
def test_max_min_take_8_bit_integers_from_version_12(op, dtype, opset, rng):
    x = rng.integers(0, 100, (3, 4)).astype(dtype)
    assert_matches_onnxruntime(reduce_model(op, x, [0], opset=opset), {"x": x})


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
def test_max_min_of_bools_from_version_20(op):
    x = np.array([[True, False], [False, False], [True, True]])
    (out,) = run_ep_host(reduce_model(op, x, [1], opset=20, keepdims=0), {"x": x})
    expected = x.any(axis=1) if op == "ReduceMax" else x.all(axis=1)
    assert out.dtype == np.bool_ and out.tolist() == expected.tolist()
    answer = cpu_answer(reduce_model(op, x, [1], opset=18))
    assert not answer.is_supported and answer.code == "dtype" and "got bool" in answer.reason


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("axes", [None, []])
def test_noop_with_empty_axes_keeps_the_non_reducing_steps(op, axes):
    # SumSquare still squares and L2 still takes the root of the square: |x|
    x = np.array([[1.5, -2.0, 3.0], [-0.5, 0.0, 4.0]], np.float32)
    model = reduce_model(op, x, axes, opset=18, noop_with_empty_axes=1)
    (out,) = assert_matches_onnxruntime(model, {"x": x})
    expected = {"ReduceSumSquare": x * x, "ReduceL2": np.abs(x)}.get(op, x)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("op", OPS)
def test_empty_axes_input_reduces_every_axis(op, rng):
    x = rng.uniform(0.5, 1.5, (2, 3)).astype(np.float32)
    (out,) = assert_matches_onnxruntime(reduce_model(op, x, [], opset=18, keepdims=0), {"x": x})
    assert out.shape == ()


@pytest.mark.parametrize("op", OPS)
def test_axes_fed_at_run_time(op, rng):
    x = rng.uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)
    model = reduce_model(op, x, [0, -1], opset=18, axes_input="feed")
    feeds = {"x": x, "axes": np.array([0, -1], np.int64)}
    (out,) = assert_matches_onnxruntime(model, feeds)
    assert out.shape == (1, 3, 1)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_reduction_over_an_empty_set(op, dtype):
    # Sum, SumSquare, L2 -> 0; Prod -> 1; Max -> -inf or the lowest int; Min -> +inf or highest
    x = np.zeros((0, 3), dtype)
    (out,) = assert_matches_onnxruntime(reduce_model(op, x, [0], opset=13), {"x": x})
    assert out.shape == (1, 3)


def test_reducing_only_non_empty_axes_of_an_empty_tensor():
    x = np.zeros((0, 3), np.float32)
    for op in OPS:
        (out,) = assert_matches_onnxruntime(reduce_model(op, x, [1], opset=13, keepdims=0),
                                            {"x": x})
        assert out.shape == (0,)


def test_float16_sums_accumulate_in_float32():
    x = np.full((4096,), 0.1, np.float16)
    (out,) = assert_matches_onnxruntime(reduce_model("ReduceSum", x, opset=11, keepdims=0),
                                        {"x": x})
    assert out.dtype == np.float16 and float(out) == 409.5


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceL2", "ReduceSumSquare", "ReduceProd"])
def test_float16_reductions(op, rng):
    x = rng.uniform(0.5, 1.0, (4, 64)).astype(np.float16)
    assert_matches_onnxruntime(reduce_model(op, x, [1], opset=13), {"x": x}, rtol=1e-3)


def test_max_propagates_nan():
    # numpy's (and the ONNX reference's) rule; onnxruntime's ReduceMax skips NaN
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0]], np.float32)
    (out,) = run_ep_host(reduce_model("ReduceMax", x, [1], opset=18, keepdims=0), {"x": x})
    assert np.isnan(out[0]) and out[1] == 3.0


def test_rank_0_input_reduces_to_itself():
    x = np.array(2.5, np.float32)
    for op in ("ReduceSum", "ReduceMax", "ReduceSumSquare"):
        (out,) = assert_matches_onnxruntime(reduce_model(op, x, opset=13), {"x": x})
        assert out.shape == ()


def test_out_of_range_axis_fails_at_run_time():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(Exception, match="out of range"):
        run_ep_host(reduce_model("ReduceSum", x, [2], opset=11), {"x": x})


@pytest.mark.parametrize(("op", "dtype", "opset"), [
    ("ReduceSum", np.int8, 13), ("ReduceMax", np.int8, 11), ("ReduceMean", np.bool_, 18),
    ("ReduceProd", np.uint16, 18),
])
def test_declines_types_the_version_lacks(op, dtype, opset):
    x = np.ones((2, 3), dtype)
    answer = cpu_answer(reduce_model(op, x, [0], opset=opset))
    assert not answer.is_supported
    assert answer.code == "dtype"
    assert f"got {np.dtype(dtype).name}" in answer.reason


def test_axes_input_is_host_resident():
    x = np.ones((2, 3), np.float32)
    assert cpu_answer(reduce_model("ReduceMean", x, [0], opset=18)).host_inputs == (1,)
