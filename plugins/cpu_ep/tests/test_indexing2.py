"""Indexing and data-movement kernels added for the whole op set: Pad, GatherElements, the
scatters, Tile, OneHot, Compress, NonZero, Unique, ReverseSequence, EyeLike, Trilu, BitCast, and
the movement ops on every element type the spec allows."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from ep_host.kernels import REGISTRY
from onnx import TensorProto, helper, numpy_helper


def elem(array):
    return helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)


def one_node(op, feeds, consts=None, *, opset, out_type=None, n_out=1, inputs=None, **attrs):
    """A one-node model: ``feeds`` become graph inputs, ``consts`` initializers, in that order
    unless ``inputs`` names them (use "" for an omitted optional input)."""
    consts = consts or {}
    names = list(feeds) + list(consts) if inputs is None else inputs
    outputs = [f"y{i}" for i in range(n_out)]
    first = {**feeds, **consts}[names[0]]
    out_type = elem(first) if out_type is None else out_type
    model = make_model(
        [helper.make_node(op, names, outputs, **attrs)],
        [(n, elem(a), list(a.shape)) for n, a in feeds.items()],
        [(o, out_type, None) for o in outputs], opset=opset,
        initializers=[numpy_helper.from_array(a, n) for n, a in consts.items()])
    if opset > 21:
        model.ir_version = 11
    return model


def matches_ort(op, feeds, consts=None, *, opset, **kw):
    return assert_matches_onnxruntime(one_node(op, feeds, consts, opset=opset, **kw), feeds)


def ints(*values):
    return np.array(values, dtype=np.int64)


OPS = ["Pad", "GatherElements", "ScatterElements", "ScatterND", "Scatter", "TensorScatter", "Tile",
       "OneHot", "Compress", "NonZero", "Unique", "ReverseSequence", "EyeLike", "Trilu", "BitCast"]


@pytest.mark.parametrize("op", OPS)
def test_every_version_in_onnx_is_registered(op):
    expected = {s.since_version for s in onnx.defs.get_all_schemas_with_history()
                if s.name == op and s.domain == ""}
    assert REGISTRY.versions("ai.onnx", op) == sorted(expected)


# --- Pad ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads", [[1, 2, 0, 2, 1, 3], [2, 3, 4, 2, 3, 4], [0, -1, 2, 1, 0, -2]])
def test_pad_modes_match_onnxruntime(rng, mode, pads):
    """Pads longer than the axis reflect and wrap repeatedly; negative pads crop first."""
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    matches_ort("Pad", {"x": x}, {"p": ints(*pads), "v": np.array(1.5, np.float32)}, opset=19,
                mode=mode)


def test_pad_with_axes_and_old_attribute_versions(rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    matches_ort("Pad", {"x": x}, {"p": ints(1, 2, 0, 1), "v": np.array(-1, np.float32),
                                  "a": ints(-1, 0)}, opset=19, mode="constant")
    matches_ort("Pad", {"x": x}, {"p": ints(1, 2, 0, 2, 1, 3)}, opset=11, mode="edge")
    matches_ort("Pad", {"x": x}, opset=2, mode="constant", pads=[1, 2, 0, 2, 1, 3], value=2.0)


def test_pad_fills_strings_with_the_empty_string():
    x = np.array([["a", "b"]], dtype=object)
    (y,) = run_ep_host(one_node("Pad", {"x": x}, {"p": ints(1, 0, 0, 1)}, opset=19), {"x": x})
    assert y.tolist() == [["", "", ""], ["a", "b", ""]]


def test_wrap_before_version_19_is_declined():
    x = np.zeros((2, 2), np.float32)
    answer = cpu_answer(one_node("Pad", {"x": x}, {"p": ints(1, 1, 1, 1)}, opset=18, mode="wrap"))
    assert not answer.is_supported and answer.code == "attribute"
    assert "constant/reflect/edge" in answer.reason and "'wrap'" in answer.reason


# --- GatherElements and the scatters ----------------------------------------------------------


def test_gather_elements_takes_negative_and_narrower_indices(rng):
    data = rng.standard_normal((3, 4)).astype(np.float32)
    matches_ort("GatherElements", {"d": data}, {"i": ints(-1, 0, 2, -3).reshape(2, 2)},
                opset=13, axis=0)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_reductions_accumulate_duplicates(rng, reduction):
    data = rng.standard_normal((3, 4)).astype(np.float32)
    repeats = reduction != "none"  # duplicates only where a reduction defines them
    index = ints(*((1, 1, -1, 0, 1, 0) if repeats else (1, 3, -4, 0, 2, 1))).reshape(2, 3)
    updates = rng.standard_normal((2, 3)).astype(np.float32)
    matches_ort("ScatterElements", {"d": data, "u": updates}, {"i": index}, opset=18,
                inputs=["d", "i", "u"], axis=1, reduction=reduction)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_reductions(rng, reduction):
    data = rng.standard_normal((4, 3, 2)).astype(np.float32)
    rows = (0, -1, 2, 0, 1, 2) if reduction != "none" else (0, 3, 2, 1)
    index = ints(*rows).reshape(-1, 2, 1)
    updates = rng.standard_normal(index.shape[:-1] + (3, 2)).astype(np.float32)
    matches_ort("ScatterND", {"d": data, "u": updates}, {"i": index}, opset=18,
                inputs=["d", "i", "u"], reduction=reduction)


def test_scatter_reductions_on_bool_are_declined_and_max_needs_version_18():
    data = np.zeros((2, 2), bool)
    answer = cpu_answer(one_node("ScatterElements", {"d": data, "u": data}, {"i": ints(0, 1, 1, 0)
                                 .reshape(2, 2)}, opset=18, inputs=["d", "i", "u"],
                                 reduction="add"))
    assert not answer.is_supported and answer.code == "dtype" and "bool" in answer.reason
    x = np.zeros((2, 2), np.float32)
    answer = cpu_answer(one_node("ScatterND", {"d": x, "u": x[0]}, {"i": ints(0, 1).reshape(2, 1)},
                                 opset=16, inputs=["d", "i", "u"], reduction="max"))
    assert not answer.is_supported and answer.code == "attribute"
    assert "none/add/mul" in answer.reason


def test_old_scatter_is_scatter_elements(rng):
    data = rng.standard_normal((3, 3)).astype(np.float32)
    updates = rng.standard_normal((2, 3)).astype(np.float32)
    matches_ort("Scatter", {"d": data, "u": updates}, {"i": ints(1, 0, 2, 0, 2, 1).reshape(2, 3)},
                opset=9, inputs=["d", "i", "u"])


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_follows_the_spec_pseudocode(rng, mode):
    past = rng.standard_normal((2, 3, 5, 4)).astype(np.float32)
    update = rng.standard_normal((2, 3, 2, 4)).astype(np.float32)
    write = ints(1, 4) if mode == "circular" else ints(1, 3)
    model = one_node("TensorScatter", {"p": past, "u": update}, {"w": write}, opset=24,
                     mode=mode, axis=-2)
    (y,) = run_ep_host(model, {"p": past, "u": update})
    expected = past.copy()
    for b in range(2):
        for c in range(3):
            for s in range(2):
                expected[b, c, (write[b] + s) % 5] = update[b, c, s]
    np.testing.assert_array_equal(y, expected)


# --- Tile, OneHot, Compress, NonZero ----------------------------------------------------------


def test_tile(rng):
    x = rng.standard_normal((2, 1, 3)).astype(np.float32)
    matches_ort("Tile", {"x": x}, {"r": ints(2, 3, 1)}, opset=13)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_wraps_negative_indices_and_ignores_out_of_range(axis):
    indices = np.array([[1, -1, 5], [0, -4, 2]], np.int64)
    values = np.array([-2, 7], np.float32)
    matches_ort("OneHot", {"i": indices}, {"d": np.array(4, np.int64), "v": values}, opset=11,
                out_type=TensorProto.FLOAT, axis=axis)


def test_one_hot_9_leaves_negative_indices_off():
    indices = ints(1, -1)
    model = one_node("OneHot", {"i": indices}, {"d": np.array(3, np.int64),
                     "v": np.array(["off", "on"], dtype=object)}, opset=9,
                     out_type=TensorProto.STRING)
    (y,) = run_ep_host(model, {"i": indices})
    assert y.tolist() == [["off", "on", "off"], ["off", "off", "off"]]


def test_compress_with_a_short_condition(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    matches_ort("Compress", {"x": x}, {"c": np.array([True, False, True])}, opset=11, axis=-1)
    matches_ort("Compress", {"x": x}, {"c": np.array([False, True, True, False, True])}, opset=11)


def test_non_zero_and_its_scalar_decline():
    x = np.array([[0, 3, 0], [2, 0, 1]], np.int32)
    matches_ort("NonZero", {"x": x}, opset=13, out_type=TensorProto.INT64)
    answer = cpu_answer(one_node("NonZero", {"x": np.array(1.0, np.float32)}, opset=13,
                                 out_type=TensorProto.INT64))
    assert not answer.is_supported and answer.code == "shape" and "rank >= 1" in answer.reason


# --- Unique -------------------------------------------------------------------------------------


@pytest.mark.parametrize("is_sorted", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_unique_outputs_match_onnxruntime(is_sorted, axis):
    x = np.array([[2, 1, 2], [0, 1, 0], [2, 1, 2], [1, 1, 1]], np.float32)
    attrs = {"sorted": is_sorted} if axis is None else {"sorted": is_sorted, "axis": axis}
    model = one_node("Unique", {"x": x}, opset=11, n_out=4, **attrs)
    for i in (1, 2, 3):
        model.graph.output[i].type.tensor_type.elem_type = TensorProto.INT64
    assert_matches_onnxruntime(model, {"x": x})


def test_unique_of_bfloat16_keeps_its_type():
    x = np.array([2, 1, 1, 3, 4, 3], dtype=ml_dtypes.bfloat16)
    model = one_node("Unique", {"x": x}, opset=28, n_out=4, sorted=0)
    for i in (1, 2, 3):
        model.graph.output[i].type.tensor_type.elem_type = TensorProto.INT64
    y, first, inverse, counts = run_ep_host(model, {"x": x})
    assert y.dtype == x.dtype and y.astype(float).tolist() == [2, 1, 3, 4]
    assert first.tolist() == [0, 1, 3, 4] and inverse.tolist() == [0, 1, 1, 2, 3, 2]
    assert counts.tolist() == [1, 2, 2, 1]


# --- ReverseSequence, EyeLike, Trilu -----------------------------------------------------------


@pytest.mark.parametrize("batch_axis", [0, 1])
def test_reverse_sequence(rng, batch_axis):
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    if batch_axis == 0:
        x = x.transpose(1, 0, 2).copy()
    matches_ort("ReverseSequence", {"x": x}, {"n": ints(4, 1, 0)}, opset=10,
                batch_axis=batch_axis, time_axis=1 - batch_axis)


def test_eye_like_with_offset_and_type():
    x = np.zeros((3, 5), np.int32)
    matches_ort("EyeLike", {"x": x}, opset=9, k=2, dtype=TensorProto.DOUBLE,
                out_type=TensorProto.DOUBLE)
    matches_ort("EyeLike", {"x": x}, opset=9, k=-1)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2, 0, 3])
def test_trilu(rng, upper, k):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    matches_ort("Trilu", {"x": x}, {"k": np.array(k, np.int64)}, opset=14, upper=upper)


# --- BitCast ------------------------------------------------------------------------------------


def test_bit_cast_reinterprets_bits():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    (y,) = run_ep_host(one_node("BitCast", {"x": x}, opset=26, to=TensorProto.INT32,
                                out_type=TensorProto.INT32), {"x": x})
    np.testing.assert_array_equal(y, x.view(np.int32))
    x4 = np.array([-1, 7, -8], dtype=ml_dtypes.int4)
    (y4,) = run_ep_host(one_node("BitCast", {"x": x4}, opset=26, to=TensorProto.UINT4,
                                 out_type=TensorProto.UINT4), {"x": x4})
    assert y4.dtype == np.dtype(ml_dtypes.uint4) and y4.astype(int).tolist() == [15, 7, 8]


def test_bit_cast_between_widths_is_declined():
    x = np.zeros(3, np.float32)
    answer = cpu_answer(one_node("BitCast", {"x": x}, opset=26, to=TensorProto.INT64,
                                 out_type=TensorProto.INT64))
    assert not answer.is_supported and answer.code == "dtype"
    assert "float32 (32 bits)" in answer.reason and "int64 (64 bits)" in answer.reason


# --- Movement ops on every element type ----------------------------------------------------------


@pytest.mark.parametrize("elem_type", [TensorProto.BFLOAT16, TensorProto.FLOAT8E4M3FN,
                                       TensorProto.FLOAT8E5M2FNUZ, TensorProto.INT4,
                                       TensorProto.UINT4, TensorProto.FLOAT4E2M1,
                                       TensorProto.FLOAT8E8M0, TensorProto.INT2,
                                       TensorProto.STRING])
def test_movement_ops_carry_every_element_type(elem_type):
    np_type = helper.tensor_dtype_to_np_dtype(elem_type)
    strings = elem_type == TensorProto.STRING
    x = (np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object) if strings
         else np.array([[0, 1, -1], [1, 0, -2]]).astype(np_type))
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Reshape", ["t", "shape"], ["r"]),
             helper.make_node("Concat", ["r", "r"], ["c"], axis=0),
             helper.make_node("Slice", ["c", "start", "end"], ["s"]),
             helper.make_node("Unsqueeze", ["s", "zero"], ["u"]),
             helper.make_node("Squeeze", ["u", "zero"], ["q"]),
             helper.make_node("Gather", ["q", "index"], ["g"], axis=0),
             helper.make_node("Expand", ["g", "wide"], ["e"]),
             helper.make_node("Pad", ["e", "pads"], ["p"], mode="edge"),
             helper.make_node("Flatten", ["p"], ["y"], axis=1)]
    consts = {"shape": ints(6), "start": ints(1), "end": ints(10), "zero": ints(0),
              "index": ints(0, 2, 4, 8).reshape(2, 2), "wide": ints(3, 2, 2),
              "pads": ints(0, 0, 1, 0, 0, 0)}
    model = make_model(nodes, [("x", elem_type, [2, 3])], [("y", elem_type, None)], opset=25,
                       initializers=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    model.ir_version = 11
    (y,) = run_ep_host(model, {"x": x})
    picked = np.concatenate([x.T.reshape(6)] * 2)[1:10][consts["index"]]
    expected = np.pad(np.broadcast_to(picked, (3, 2, 2)), ((0, 0), (0, 0), (1, 0)), mode="edge")
    expected = expected.reshape(3, 6)
    assert y.dtype == x.dtype and y.shape == expected.shape
    if strings:
        assert y.tolist() == expected.tolist()
    else:  # bit for bit (float8e8m0 has no zero: NaN there)
        np.testing.assert_array_equal(y.view(np.uint8), expected.view(np.uint8))
