"""Reductions: axes as attribute or input, keepdims, noop_with_empty_axes, empty sets, dtypes;
ArgMax/ArgMin, Hardmax, TopK, CumSum/CumProd and bfloat16 reductions."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, model_of, run_ep_host
from onnx import TensorProto, helper, numpy_helper

from ep_host.kernels import REGISTRY

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


@pytest.mark.parametrize("value", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_log_sum_exp_where_a_row_holds_an_infinity_or_nan(value, keepdims, rng):
    # the maximum is subtracted only where it is finite: a row of -inf sums to -inf, not NaN
    x = rng.standard_normal((4, 3)).astype(np.float32) * 40
    x[1, 2], x[3, :] = value, -np.inf
    node = helper.make_node("ReduceLogSumExp", ["x"], ["out"], axes=[1], keepdims=keepdims)
    model = make_model([node], [("x", TensorProto.FLOAT, [4, 3])],
                       [("out", TensorProto.FLOAT, None)], opset=13)
    (out,) = run_ep_host(model, {"x": x})
    with np.errstate(all="ignore"):
        m = x.max(axis=1, keepdims=True)
        m = np.where(np.isfinite(m), m, np.float32(0))
        want = np.log(np.exp(x - m).sum(axis=1, keepdims=True)) + m
    np.testing.assert_allclose(out, want if keepdims else want[:, 0], rtol=1e-6)
    row = out[1] if keepdims == 0 else out[1, 0]
    assert np.all(out[3] == -np.inf) and (
        np.isnan(row) if np.isnan(value) else row == np.inf if value > 0 else np.isfinite(row))


@pytest.mark.parametrize("length", [1, 2, 3, 8, 9, 64])
@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_log_sum_exp_is_within_two_ulp_of_the_exact_value(length, scale, rng):
    """Up to eight values along the axis numpy's logaddexp is folded, past that the maximum is
    subtracted and the exponentials summed; either way within 2 float32 ulp of float64's value
    (and close to onnxruntime's), the ulp of the row's largest magnitude: the sum's rounding
    error is absolute at that scale, a result near 0 is not known to its own ulp."""
    x = (rng.standard_normal((500, length)) * scale).astype(np.float32)
    model = model_of("ReduceLogSumExp", {"x": x}, {"axes": np.array([1], np.int64)}, opset=18,
                     keepdims=1)
    (out,) = assert_matches_onnxruntime(model, {"x": x})
    wide = x.astype(np.float64)
    top = wide.max(axis=1, keepdims=True)
    exact = np.log(np.exp(wide - top).sum(axis=1, keepdims=True)) + top
    scale = np.maximum(np.abs(exact), np.abs(wide).max(axis=1, keepdims=True))
    ulp = np.spacing(scale.astype(np.float32)).astype(np.float64)
    assert (np.abs(out - exact) <= 2 * ulp).all()


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


def test_every_version_of_the_arg_top_k_and_cumulative_ops_is_registered():
    for op in ["ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "ArgMax", "ArgMin", "Hardmax",
               "TopK", "CumSum", "CumProd"]:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize("op", ["ReduceL1", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize(("axes", "keepdims"), [(None, 1), ([1], 0), ([-1, 0], 1)])
def test_reductions_match_onnxruntime(op, opset, axes, keepdims, rng):
    x = rng.uniform(0.5, 3, (2, 3, 4)).astype(np.float32)
    if opset < 18:
        attrs = {} if axes is None else {"axes": axes}
        model = model_of(op, {"x": x}, opset=opset, keepdims=keepdims, **attrs)
    else:
        consts = {} if axes is None else {"axes": np.array(axes, np.int64)}
        model = model_of(op, {"x": x}, consts, opset=opset, keepdims=keepdims)
    assert_matches_onnxruntime(model, {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning")
def test_log_sum_exp_does_not_overflow():  # a row of -inf sums to log(0) = -inf on purpose
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf], [np.inf, 1.0]], np.float32)
    axes = {"axes": np.array([1], np.int64)}
    (out,) = run_ep_host(model_of("ReduceLogSumExp", {"x": x}, axes, opset=18, keepdims=0),
                         {"x": x})
    np.testing.assert_allclose(out, [1000 + np.log(2), -np.inf, np.inf], rtol=1e-6)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log:RuntimeWarning",
                            "ignore:invalid value encountered in log:RuntimeWarning")
def test_empty_sets_and_noop_axes():  # log(0) = -inf and log(-4) = nan on purpose
    x = np.zeros((2, 0, 3), np.float32)
    axes = {"axes": np.array([1], np.int64)}
    for op, value in (("ReduceLogSum", -np.inf), ("ReduceLogSumExp", -np.inf), ("ReduceL1", 0)):
        (out,) = run_ep_host(model_of(op, {"x": x}, axes, opset=18), {"x": x})
        assert out.shape == (2, 1, 3) and (out == value).all(), op
    y = np.array([[1.0, 2.0], [np.e, -4.0]], np.float32)
    noop = {"axes": np.array([], np.int64)}
    (log,) = run_ep_host(model_of("ReduceLogSum", {"x": y}, noop, opset=18,
                                  noop_with_empty_axes=1), {"x": y})
    np.testing.assert_allclose(log, [[0, np.log(2)], [1, np.nan]], rtol=1e-6)  # per element
    (l1,) = run_ep_host(model_of("ReduceL1", {"x": y}, noop, opset=18, noop_with_empty_axes=1),
                        {"x": y})
    np.testing.assert_array_equal(l1, np.abs(y))


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_l1_matches_onnxruntime(dtype):
    x = np.array([[1, -2, 5], [3, 0, -7]], dtype)
    assert_matches_onnxruntime(model_of("ReduceL1", {"x": x}, opset=13, axes=[1]), {"x": x})
    u = np.array([[1, 2, 2**31]], np.uint32)
    (out,) = run_ep_host(model_of("ReduceL1", {"x": u}, opset=13, keepdims=0), {"x": u})
    assert out.dtype == np.uint32 and out.tolist() == 2**31 + 3


@pytest.mark.parametrize("op", ["ReduceLogSum", "ReduceLogSumExp"])
def test_log_reductions_decline_integers(op):
    x = np.ones((2, 2), np.int32)
    answer = cpu_answer(model_of(op, {"x": x}, opset=13))
    assert not answer.is_supported and answer.code == "dtype"
    assert "got int32" in answer.reason and "cast to float first" in answer.reason
    answer = cpu_answer(model_of(op, {"x": x}, opset=28))  # not in the schema at all
    assert not answer.is_supported and answer.code == "dtype"


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2",
                                "ReduceLogSumExp"])
def test_bfloat16_reductions_accumulate_in_float32(op, rng):
    x = rng.uniform(0.5, 2, (4, 64)).astype(BF16)
    axes = {"axes": np.array([1], np.int64)}
    (out,) = run_ep_host(model_of(op, {"x": x}, axes, opset=18), {"x": x})
    wide = x.astype(np.float32)
    expected = {"ReduceSum": wide.sum(1, keepdims=True), "ReduceMean": wide.mean(1, keepdims=True),
                "ReduceMax": wide.max(1, keepdims=True),
                "ReduceL2": np.sqrt((wide * wide).sum(1, keepdims=True)),
                "ReduceLogSumExp": np.log(np.exp(wide).sum(1, keepdims=True))}[op]
    assert out.dtype == BF16
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(BF16).astype(np.float32),
                               rtol=2**-8)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize(("axis", "keepdims", "last"), [(0, 1, 0), (1, 0, 1), (-1, 1, 1)])
def test_arg_reductions_match_onnxruntime(op, opset, axis, keepdims, last):
    x = np.array([[[2, 1, 2], [0, 3, 3]], [[5, 5, 1], [0, 0, 0]]], np.float32)
    attrs = {"axis": axis, "keepdims": keepdims}
    if opset >= 12:
        attrs["select_last_index"] = last
    model = model_of(op, {"x": x}, opset=opset, out_types=[TensorProto.INT64], **attrs)
    assert_matches_onnxruntime(model, {"x": x})


def test_arg_max_on_integers_and_bfloat16():
    x = np.array([[3, 9, 9], [-1, -1, -5]], np.int8)
    (out,) = run_ep_host(model_of("ArgMax", {"x": x}, opset=13, out_types=[TensorProto.INT64],
                                  axis=1, select_last_index=1), {"x": x})
    assert out.tolist() == [[2], [1]]
    b = np.array([1.5, 2.5, 2.5, 0.0], BF16)
    (out,) = run_ep_host(model_of("ArgMin", {"x": b}, opset=13, out_types=[TensorProto.INT64],
                                  keepdims=0), {"x": b})
    assert out.tolist() == 3


@pytest.mark.parametrize(("opset", "axis"), [(11, 1), (11, 0), (13, -1), (13, 1), (11, -1)])
def test_hardmax_matches_onnxruntime(opset, axis):
    x = np.array([[[1, 3, 3], [0, 2, 1]], [[4, 4, 0], [7, 1, 7]]], np.float32)
    assert_matches_onnxruntime(model_of("Hardmax", {"x": x}, opset=opset, axis=axis), {"x": x})


TOPK_OUT = [TensorProto.FLOAT, TensorProto.INT64]


@pytest.mark.parametrize(("largest", "axis", "k"), [(1, -1, 2), (0, -1, 3), (1, 0, 1), (0, 1, 0),
                                                   (1, -1, 4), (0, 0, 3)])  # K: the whole axis
def test_top_k_matches_onnxruntime(largest, axis, k):
    x = np.array([[3, 1, 3, 2], [0, 5, 5, 5], [2, 2, 2, 2]], np.float32)  # ties: lower index
    model = model_of("TopK", {"x": x}, {"k": np.array([k], np.int64)}, opset=11,
                     out_types=TOPK_OUT, axis=axis, largest=largest)
    values, indices = assert_matches_onnxruntime(model, {"x": x})
    assert indices.dtype == np.int64


def test_top_k_on_unsigned_integers_and_version_1():
    x = np.array([[2, 2**63 + 5, 7, 2**63 + 5]], np.uint64)
    model = model_of("TopK", {"x": x}, {"k": np.array([3], np.int64)}, opset=11,
                     out_types=[TensorProto.UINT64, TensorProto.INT64])
    values, indices = run_ep_host(model, {"x": x})
    assert values.tolist() == [[2**63 + 5, 2**63 + 5, 7]] and indices.tolist() == [[1, 3, 2]]
    y = np.array([1.0, 4.0, 2.0], np.float32)
    values, indices = run_ep_host(model_of("TopK", {"x": y}, opset=1, out_types=TOPK_OUT, k=2),
                                  {"x": y})
    assert values.tolist() == [4.0, 2.0] and indices.tolist() == [1, 2]


def test_top_k_rejects_a_k_of_two_values():
    x = np.ones((2, 3), np.float32)
    model = model_of("TopK", {"x": x, "k": np.array([1, 2], np.int64)}, opset=11,
                     out_types=TOPK_OUT)
    with pytest.raises(Exception, match=r"expected one value \(K, axis\), got \[1, 2\]"):
        run_ep_host(model, {"x": x, "k": np.array([1, 2], np.int64)})


def test_top_k_rejects_k_beyond_the_axis():
    x = np.ones((2, 3), np.float32)
    model = model_of("TopK", {"x": x}, {"k": np.array([4], np.int64)}, opset=11,
                     out_types=TOPK_OUT)
    with pytest.raises(Exception, match="K=4 is outside"):
        run_ep_host(model, {"x": x})


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("axis", [0, -1])
def test_cum_sum_matches_onnxruntime(dtype, exclusive, reverse, axis):
    x = np.arange(1, 13).reshape(3, 4).astype(dtype)
    model = model_of("CumSum", {"x": x}, {"axis": np.array(axis, np.int32)}, opset=14,
                     exclusive=exclusive, reverse=reverse)
    assert_matches_onnxruntime(model, {"x": x})


@pytest.mark.parametrize(("exclusive", "reverse", "expected"), [
    (0, 0, [1, 2, 6, 24]), (1, 0, [1, 1, 2, 6]), (0, 1, [24, 24, 12, 4]), (1, 1, [24, 12, 4, 1]),
])
def test_cum_prod(exclusive, reverse, expected):
    x = np.array([1, 2, 3, 4], np.int64)
    model = model_of("CumProd", {"x": x}, {"axis": np.array([0], np.int64)}, opset=26,
                     exclusive=exclusive, reverse=reverse)
    (out,) = run_ep_host(model, {"x": x})
    assert out.tolist() == expected


def test_float16_cum_sum_runs_in_float32():
    x = np.full(3000, 1.0, np.float16)  # a float16 running sum would stall at 2048
    (out,) = run_ep_host(model_of("CumSum", {"x": x}, {"axis": np.array(0)}, opset=14),
                         {"x": x})
    assert out.dtype == np.float16 and float(out[-1]) == 3000.0
