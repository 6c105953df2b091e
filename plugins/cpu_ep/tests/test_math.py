"""MatMul, Gemm, Einsum and Det on the CPU EP, against onnxruntime (or the spec's formula where
it has none)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import (
    assert_declines,
    assert_matches_onnxruntime,
    cpu_answer,
    flops,
    make_model,
    model_of,
    run_ep_host,
)
from onnx import TensorProto, helper

from ep_host import KernelError
from ep_host.kernels import REGISTRY

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}


def matmul_model(a_shape, b_shape, opset, elem=F):
    node = helper.make_node("MatMul", ["a", "b"], ["y"])
    return make_model([node], [("a", elem, a_shape), ("b", elem, b_shape)], [("y", elem, None)],
                      opset=opset)


def gemm_model(a_shape, b_shape, c_shape, opset, elem=F, **attrs):
    names = ["a", "b"] + ([] if c_shape is None else ["c"])
    inputs = [("a", elem, a_shape), ("b", elem, b_shape)]
    if c_shape is not None:
        inputs.append(("c", elem, c_shape))
    node = helper.make_node("Gemm", names, ["y"], **attrs)
    return make_model([node], inputs, [("y", elem, None)], opset=opset)


MATMUL_SHAPES = [
    ([3, 4], [4, 5]),
    ([2, 1, 3, 4], [5, 4, 2]),  # batch broadcasting
    ([4], [4, 5]),
    ([3, 4], [4]),
    ([4], [4]),
    ([2, 3, 4], [4]),
    ([6], [2, 6, 3]),
]


@pytest.mark.parametrize("opset", [1, 9, 13])
@pytest.mark.parametrize(("a_shape", "b_shape"), MATMUL_SHAPES)
def test_matmul_matches_onnxruntime(rng, opset, a_shape, b_shape):
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32),
             "b": rng.standard_normal(b_shape).astype(np.float32)}
    assert_matches_onnxruntime(matmul_model(a_shape, b_shape, opset), feeds, **TOL)


@pytest.mark.parametrize("elem", [TensorProto.INT32, TensorProto.INT64, TensorProto.UINT32,
                                  TensorProto.UINT64, TensorProto.DOUBLE, TensorProto.FLOAT16])
def test_matmul_other_types(rng, elem):
    dtype = helper.tensor_dtype_to_np_dtype(elem)
    feeds = {"a": rng.integers(0, 9, [2, 3, 4]).astype(dtype),
             "b": rng.integers(0, 9, [4, 5]).astype(dtype)}
    (y,) = assert_matches_onnxruntime(matmul_model([2, 3, 4], [4, 5], 13, elem), feeds)
    assert y.dtype == dtype


GEMM_CASES = [
    ([3, 4], [4, 5], [3, 5], {}),
    ([4, 3], [4, 5], [5], {"transA": 1, "alpha": 0.5, "beta": 2.0}),
    ([3, 4], [5, 4], [1, 5], {"transB": 1, "beta": -1.5}),
    ([4, 3], [5, 4], [3, 1], {"transA": 1, "transB": 1, "alpha": 2.0}),
    ([3, 4], [4, 5], [], {"alpha": 1.5, "beta": 0.0}),
    ([1, 4], [6, 4], [6], {"transB": 1}),  # the light models' classifier layout
]


@pytest.mark.parametrize("opset", [7, 9, 11, 13])
@pytest.mark.parametrize(("a_shape", "b_shape", "c_shape", "attrs"), GEMM_CASES)
def test_gemm_matches_onnxruntime(rng, opset, a_shape, b_shape, c_shape, attrs):
    feeds = {"a": rng.standard_normal(a_shape).astype(np.float32),
             "b": rng.standard_normal(b_shape).astype(np.float32),
             "c": rng.standard_normal(c_shape).astype(np.float32)}
    model = gemm_model(a_shape, b_shape, c_shape, opset, **attrs)
    assert_matches_onnxruntime(model, feeds, **TOL)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("attrs", [{}, {"transA": 1, "transB": 1, "alpha": 3.0}])
def test_gemm_without_c(rng, opset, attrs):
    feeds = {"a": rng.standard_normal([4, 4]).astype(np.float32),
             "b": rng.standard_normal([4, 4]).astype(np.float32)}
    assert_matches_onnxruntime(gemm_model([4, 4], [4, 4], None, opset, **attrs), feeds, **TOL)


def test_gemm_float64(rng):
    feeds = {"a": rng.standard_normal([3, 4]), "b": rng.standard_normal([5, 4]),
             "c": rng.standard_normal([5])}
    model = gemm_model([3, 4], [5, 4], [5], 13, elem=TensorProto.DOUBLE, transB=1, alpha=0.25)
    assert_matches_onnxruntime(model, feeds, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("opset", [1, 6])
@pytest.mark.parametrize(("c_shape", "broadcast"), [([3, 5], 0), ([5], 1), ([1, 5], 1), ([], 1)])
def test_gemm_before_7_broadcasts_c_only_when_asked(rng, opset, c_shape, broadcast):
    # onnxruntime has no Gemm-1/6: compare with the spec's formula.
    a = rng.standard_normal([4, 3]).astype(np.float32)
    b = rng.standard_normal([4, 5]).astype(np.float32)
    c = rng.standard_normal(c_shape).astype(np.float32)
    model = gemm_model([4, 3], [4, 5], c_shape, opset, transA=1, alpha=0.5, beta=2.0,
                       broadcast=broadcast)
    (y,) = run_ep_host(model, {"a": a, "b": b, "c": c})
    np.testing.assert_allclose(y, 0.5 * a.T @ b + 2.0 * c, **TOL)


def test_gemm_before_7_refuses_at_run_time_a_c_to_broadcast_without_broadcast_1(rng):
    model = gemm_model([3, 4], [4, 5], ["n"], 6)
    feeds = {"a": rng.standard_normal([3, 4]).astype(np.float32),
             "b": rng.standard_normal([4, 5]).astype(np.float32),
             "c": rng.standard_normal([5]).astype(np.float32)}
    with pytest.raises(KernelError, match="broadcast=0 needs C of shape"):
        run_ep_host(model, feeds)


def test_integer_gemm_with_whole_alpha_and_beta(rng):
    # onnxruntime has no integer Gemm: compare with exact integer arithmetic.
    a = rng.integers(-9, 9, [3, 4]).astype(np.int64)
    b = rng.integers(-9, 9, [5, 4]).astype(np.int64)
    c = rng.integers(-9, 9, [5]).astype(np.int64)
    model = gemm_model([3, 4], [5, 4], [5], 13, elem=TensorProto.INT64, transB=1, alpha=2.0,
                       beta=-3.0)
    (y,) = run_ep_host(model, {"a": a, "b": b, "c": c})
    assert y.dtype == np.int64
    np.testing.assert_array_equal(y, 2 * a @ b.T - 3 * c)


def test_flops():
    assert flops(matmul_model([2, 3, 4], [4, 5], 13)) == 2 * 2 * 3 * 5 * 4
    assert flops(gemm_model([4, 3], [5, 4], [5], 13, transA=1, transB=1)) == 2 * 3 * 5 * 4


def test_matmul_declines_int8():
    model = matmul_model([2, 3], [3, 4], 13, elem=TensorProto.INT8)
    assert_declines(model, "dtype", "int32/int64/uint32/uint64", "int8")


def test_matmul_1_declines_integers():
    model = matmul_model([2, 3], [3, 4], 1, elem=TensorProto.INT32)
    assert_declines(model, "dtype", "float16/float32/float64", "int32")


def test_gemm_declines_integer_input_with_a_fractional_alpha():
    model = gemm_model([3, 4], [4, 5], None, 13, elem=TensorProto.INT32, alpha=0.5)
    assert_declines(model, "attribute", "whole alpha and beta", "alpha=0.5")


def test_gemm_declines_a_3d_operand():
    model = gemm_model([2, 3, 4], [4, 5], None, 13)
    assert_declines(model, "shape", "2-D A", "(2, 3, 4)")


def test_gemm_before_7_declines_a_c_to_broadcast_without_broadcast_1():
    model = gemm_model([3, 4], [4, 5], [5], 6)
    assert_declines(model, "shape", "(M, N) = (3, 5)", "set broadcast=1")


def test_every_version_of_einsum_and_det_is_registered():
    for op in ["Einsum", "Det"]:
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op and s.domain == ""})
        assert REGISTRY.versions("ai.onnx", op) == expected, op


BF16 = ml_dtypes.bfloat16


@pytest.mark.parametrize(("equation", "shapes"), [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij, bjk -> bik", [(2, 2, 3), (2, 3, 2)]),
    ("i,i", [(5,), (5,)]), ("ii->i", [(3, 3)]), ("...ij->...ji", [(2, 3, 4)]),
    ("ij", [(2, 3)]), ("ba", [(2, 3)]), ("Ab,bA->", [(2, 3), (3, 2)]),
    # through one batched matmul (ep_host.kernels.math._einsum_matmul)
    ("B G H I D, B G H J D -> B G H I J", [(1, 4, 2, 7, 8), (1, 4, 2, 5, 8)]),
    ("bhij,bhjd->bhid", [(2, 3, 5, 6), (2, 3, 6, 4)]),
    ("bid,jd->bji", [(2, 3, 4), (5, 4)]), ("ik,kj->ji", [(3, 4), (4, 2)]),
    ("abc,cd->", [(2, 3, 4), (4, 5)]), ("ijk,jl->li", [(2, 3, 4), (3, 5)]),
    ("i,j->ij", [(3,), (4,)]), ("bij,bij->bi", [(2, 3, 4), (2, 3, 4)]),
])
def test_einsum_matches_onnxruntime(equation, shapes, rng):
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    assert_matches_onnxruntime(model_of("Einsum", feeds, opset=12, equation=equation), feeds,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("equation", "shapes"), [
    ("bhid,bhjd->bhij", [(1, 2, 3, 4), (1, 2, 5, 4)]), ("ijk,jl->li", [(2, 3, 4), (3, 5)]),
    ("abc,cd->", [(2, 3, 4), (4, 5)]), ("i,j->ji", [(3,), (4,)]),
    ("xbz,zy->yxb", [(2, 0, 3), (3, 4)]),
])
def test_einsum_by_matmul_equals_numpy_einsum(equation, shapes, rng):
    from ep_host.kernels.math import _einsum_matmul

    a, b = (rng.standard_normal(s) for s in shapes)
    got = _einsum_matmul(np, equation, a, b)
    assert got is not None and got.flags.c_contiguous
    np.testing.assert_allclose(got, np.einsum(equation, a, b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("equation", ["...ij,...jk->...ik", "ii,ij->j", "ij,jk", "ij,jk,kl->il"])
def test_einsum_by_matmul_leaves_what_it_does_not_take_to_numpy(equation):
    from ep_host.kernels.math import _einsum_matmul

    x = np.ones((3, 3))
    assert _einsum_matmul(np, equation, x, x) is None


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
