"""Reductions added for the full op set: ReduceL1, ReduceLogSum, ReduceLogSumExp, ArgMax/ArgMin,
Hardmax, TopK, CumSum/CumProd, the contractions Einsum and Det, and bfloat16 reductions."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from ep_host.kernels import REGISTRY
from onnx import TensorProto, helper, numpy_helper

BF16 = ml_dtypes.bfloat16


def model_of(op, feeds, consts=None, *, opset, out_types=None, **attrs):
    """One ``op`` node: ``feeds`` are graph inputs, ``consts`` initializers (in that order)."""
    consts = consts or {}
    node = helper.make_node(op, [*feeds, *consts], [f"out{i}" for i in
                                                   range(len(out_types or [None]))], **attrs)
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for n, a in feeds.items()]
    out_types = out_types or [inputs[0][1]]
    inits = [numpy_helper.from_array(a, n) for n, a in consts.items()]
    return make_model([node], inputs, [(f"out{i}", t, None) for i, t in enumerate(out_types)],
                      opset=opset, initializers=inits)


def test_every_version_in_onnx_is_registered():
    ops = ["ReduceL1", "ReduceLogSum", "ReduceLogSumExp", "ArgMax", "ArgMin", "Hardmax", "TopK",
           "CumSum", "CumProd", "Einsum", "Det"]
    for op in ops:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


# ---------------------------------------------------------------------------------------------
# ReduceL1, ReduceLogSum, ReduceLogSumExp
# ---------------------------------------------------------------------------------------------


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


def test_log_sum_exp_does_not_overflow():
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf], [np.inf, 1.0]], np.float32)
    axes = {"axes": np.array([1], np.int64)}
    (out,) = run_ep_host(model_of("ReduceLogSumExp", {"x": x}, axes, opset=18, keepdims=0),
                         {"x": x})
    np.testing.assert_allclose(out, [1000 + np.log(2), -np.inf, np.inf], rtol=1e-6)


def test_empty_sets_and_noop_axes():
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


# ---------------------------------------------------------------------------------------------
# ArgMax, ArgMin, Hardmax
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# TopK
# ---------------------------------------------------------------------------------------------

TOPK_OUT = [TensorProto.FLOAT, TensorProto.INT64]


@pytest.mark.parametrize(("largest", "axis", "k"), [(1, -1, 2), (0, -1, 3), (1, 0, 1), (0, 1, 0)])
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


def test_top_k_rejects_k_beyond_the_axis():
    x = np.ones((2, 3), np.float32)
    model = model_of("TopK", {"x": x}, {"k": np.array([4], np.int64)}, opset=11,
                     out_types=TOPK_OUT)
    with pytest.raises(Exception, match="K=4 is outside"):
        run_ep_host(model, {"x": x})


# ---------------------------------------------------------------------------------------------
# CumSum, CumProd
# ---------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------
# Einsum and Det
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("equation", "shapes"), [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij, bjk -> bik", [(2, 2, 3), (2, 3, 2)]),
    ("i,i", [(5,), (5,)]), ("ii->i", [(3, 3)]), ("...ij->...ji", [(2, 3, 4)]),
    ("ij", [(2, 3)]), ("ba", [(2, 3)]), ("Ab,bA->", [(2, 3), (3, 2)]),
])
def test_einsum_matches_onnxruntime(equation, shapes, rng):
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    assert_matches_onnxruntime(model_of("Einsum", feeds, opset=12, equation=equation), feeds,
                               rtol=1e-5, atol=1e-5)


def test_integer_and_bfloat16_einsum():
    a = np.array([[1, 2], [3, 4]], np.int64)
    (out,) = run_ep_host(model_of("Einsum", {"a": a, "b": a}, opset=12, equation="ij,jk->ik"),
                         {"a": a, "b": a})
    assert out.tolist() == [[7, 10], [15, 22]]
    b = a.astype(BF16)
    (out,) = run_ep_host(model_of("Einsum", {"a": b}, opset=28, equation="ij->i"), {"a": b})
    assert out.dtype == BF16 and out.astype(np.float32).tolist() == [3, 7]


def test_einsum_declines_an_equation_for_other_operands():
    a = np.ones((2, 2), np.float32)
    answer = cpu_answer(model_of("Einsum", {"a": a}, opset=12, equation="ij,jk->ik"))
    assert not answer.is_supported and answer.code == "attribute"
    assert "names 2 operands, the node has 1" in answer.reason


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4)])
def test_det_matches_onnxruntime(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    (out,) = assert_matches_onnxruntime(model_of("Det", {"x": x}, opset=11), {"x": x},
                                        rtol=1e-4, atol=1e-5)
    assert out.shape == shape[:-2]


def test_det_declines_non_square_matrices():
    x = np.ones((2, 3), np.float32)
    answer = cpu_answer(model_of("Det", {"x": x}, opset=22))
    assert not answer.is_supported and answer.code == "shape" and "square" in answer.reason


def test_bfloat16_matmul_accumulates_in_float32(rng):
    a = rng.standard_normal((4, 256)).astype(BF16)
    b = rng.standard_normal((256, 3)).astype(BF16)
    (out,) = run_ep_host(model_of("MatMul", {"a": a, "b": b}, opset=13), {"a": a, "b": b})
    expected = (a.astype(np.float32) @ b.astype(np.float32)).astype(BF16)
    assert out.dtype == BF16
    np.testing.assert_allclose(out.astype(np.float32), expected.astype(np.float32), rtol=2**-7,
                               atol=1e-2)
