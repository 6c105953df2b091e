"""Shape, data-movement and indexing kernels: Reshape ... Constant, Pad, GatherElements, the
scatters, Tile, OneHot, Compress, NonZero, Unique, ReverseSequence, EyeLike, Trilu, BitCast,
and the movement ops on every element type the spec allows; against onnxruntime and the spec."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from onnx import TensorProto, helper, numpy_helper

import ep_host
from ep_host.kernels import REGISTRY
from ep_host.kernels.shape import _split

INT64_MAX, INT64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def tensor_type(array):
    return helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)


def one_node(op, inputs, feeds=None, consts=None, *, opset, out_type=None, n_out=1, **attrs):
    """A model of one ``op`` node; ``feeds`` are graph inputs, ``consts`` initializers, and the
    outputs have ``out_type`` (default: the first input's type)."""
    feeds, consts = feeds or {}, consts or {}
    arrays = {**feeds, **consts}
    outputs = [f"out{i}" for i in range(n_out)]
    node = helper.make_node(op, list(inputs), outputs, **attrs)
    if out_type is None:
        out_type = tensor_type(arrays[inputs[0]])
    return make_model(
        [node], [(n, tensor_type(a), list(a.shape)) for n, a in feeds.items()],
        [(o, out_type, None) for o in outputs], opset=opset,
        initializers=[numpy_helper.from_array(np.asarray(a), n) for n, a in consts.items()])


def check(op, inputs, feeds=None, consts=None, *, opset, **kw):
    return assert_matches_onnxruntime(one_node(op, inputs, feeds, consts, opset=opset, **kw),
                                      feeds or {})


def test_every_version_in_onnx_is_registered():
    ops = ["Reshape", "Transpose", "Shape", "Gather", "GatherND", "Slice", "Split", "Concat",
           "Unsqueeze", "Squeeze", "Expand", "Flatten", "Cast", "ConstantOfShape", "Range",
           "Constant", "Size"]
    for op in ops:
        expected = {s.since_version for s in onnx.defs.get_all_schemas_with_history()
                    if s.name == op and s.domain == ""}
        if op == "Split":
            expected.discard(1)  # its 'split' input of the data's type: left out
        assert REGISTRY.versions("ai.onnx", op) == sorted(expected), op


def test_split_1_is_declined_with_the_versions_it_has():
    x = np.ones((2, 4), np.float32)
    answer = cpu_answer(one_node("Split", ["x"], {"x": x}, opset=1, n_out=2, axis=1))
    assert not answer.is_supported and answer.code == "opset"
    assert "2, 11, 13, 18" in answer.reason


def test_light_model_versions_at_opset_9_are_claimed():
    x = np.ones((2, 3), np.float32)
    shape = {"s": np.array([3, 2], np.int64)}
    for model in (one_node("Reshape", ["x", "s"], {"x": x}, shape, opset=9),
                  one_node("Unsqueeze", ["x"], {"x": x}, opset=9, axes=[0]),
                  one_node("Concat", ["x", "x"], {"x": x}, opset=9, axis=0),
                  one_node("Transpose", ["x"], {"x": x}, opset=9),
                  one_node("ConstantOfShape", ["s"], consts=shape, opset=9,
                           out_type=TensorProto.FLOAT)):
        answer = cpu_answer(model)
        assert answer.is_supported, answer.reason


@pytest.mark.parametrize("opset", [5, 13, 14, 19, 21])
@pytest.mark.parametrize(("in_shape", "shape"), [
    ((2, 3, 4), [4, -1]), ((2, 3, 4), [0, -1]), ((2, 3, 4), [0, 0, 2, 2]), ((1, 1), []),
    ((2, 3, 4), [-1]), ((0, 3), [-1, 3]), ((2, 0, 3), [0, 3, -1]),
])
def test_reshape_copies_zeros_and_infers_minus_one(opset, in_shape, shape, rng):
    x = rng.standard_normal(in_shape).astype(np.float32)
    check("Reshape", ["x", "s"], {"x": x}, {"s": np.array(shape, np.int64)}, opset=opset)


def test_reshape_allowzero_honours_zero():
    x = np.zeros((0, 3), np.float32)
    consts = {"s": np.array([3, 0], np.int64)}
    (out,) = check("Reshape", ["x", "s"], {"x": x}, consts, opset=14, allowzero=1)
    assert out.shape == (3, 0)


def test_reshape_shape_fed_at_run_time_and_version_1(rng):
    x = rng.standard_normal((2, 6)).astype(np.float32)
    feeds = {"x": x, "s": np.array([3, -1], np.int64)}
    (out,) = check("Reshape", ["x", "s"], feeds, opset=14)
    assert out.shape == (3, 4)
    (out,) = check("Reshape", ["x"], {"x": x}, opset=1, shape=[0, 3, -1])
    assert out.shape == (2, 3, 2)


def test_reshape_moves_no_bytes_and_reads_its_shape_on_the_host():
    x = np.ones((2, 3), np.float32)
    answer = cpu_answer(one_node("Reshape", ["x", "s"], {"x": x}, {"s": np.array([-1])},
                                 opset=14))
    assert answer.is_supported and answer.host_inputs == (1,)
    assert answer.cost.bytes_moved == 0


@pytest.mark.parametrize(("shape", "allowzero", "prepared"), [
    ([4, -1], 0, (4, -1)), ([-1], 1, (-1,)), ([3, 0], 1, (3, 0)),
    ([0, -1], 0, None),  # a 0 copies the input's dim: read per run
    ([-1, -1], 0, None), ([2, -2], 0, None),  # refused by the run, with its error
])
def test_a_constant_reshape_shape_is_worked_out_once_where_the_run_takes_it_as_it_is(
        shape, allowzero, prepared):
    from ep_host.kernels.shape import _prepare_reshape

    got = _prepare_reshape(np, {1: np.array(shape, np.int64)}, allowzero=allowzero)
    assert got.get("dims") == prepared
    assert _prepare_reshape(np, {}, allowzero=0) == {}  # a shape fed at run time


def test_reshape_with_two_minus_ones_fails():
    x = np.ones((2, 3), np.float32)
    model = one_node("Reshape", ["x", "s"], {"x": x}, {"s": np.array([-1, -1])}, opset=14)
    with pytest.raises(ep_host.KernelError):
        run_ep_host(model, {"x": x})


@pytest.mark.parametrize("opset", [1, 9, 11, 13, 21])
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_flatten(opset, axis, rng):
    if axis < 0 and opset < 11:
        return
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    check("Flatten", ["x"], {"x": x}, opset=opset, axis=axis)


@pytest.mark.parametrize(("opset", "axes"), [(1, None), (11, [-1, 0]), (13, [0, 2]),
                                             (13, None), (21, [-3]), (13, [])])
def test_squeeze(opset, axes, rng):
    x = rng.standard_normal((1, 3, 1)).astype(np.float32)
    if opset < 13 or axes is None:
        attrs = {} if axes is None else {"axes": axes}
        check("Squeeze", ["x"], {"x": x}, opset=opset, **attrs)
    else:
        check("Squeeze", ["x", "a"], {"x": x}, {"a": np.array(axes, np.int64)}, opset=opset)


def test_squeeze_of_a_dim_other_than_1_fails():
    x = np.ones((1, 3), np.float32)
    model = one_node("Squeeze", ["x", "a"], {"x": x}, {"a": np.array([1])}, opset=13)
    with pytest.raises(ep_host.KernelError, match="cannot squeeze axis 1 of size 3"):
        run_ep_host(model, {"x": x})


@pytest.mark.parametrize(("opset", "axes"), [(1, [0, 4]), (11, [-1]), (13, [3, 0]),
                                             (21, [-1, 1]), (13, [0])])
def test_unsqueeze(opset, axes, rng):
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    if opset < 13:
        check("Unsqueeze", ["x"], {"x": x}, opset=opset, axes=axes)
    else:
        check("Unsqueeze", ["x", "a"], {"x": x}, {"a": np.array(axes, np.int64)}, opset=opset)


def test_unsqueeze_a_scalar_and_repeated_axes():
    x = np.array(3.0, np.float32)
    (out,) = check("Unsqueeze", ["x", "a"], {"x": x}, {"a": np.array([0, -1])}, opset=13)
    assert out.shape == (1, 1)
    model = one_node("Unsqueeze", ["x", "a"], {"x": x}, {"a": np.array([0, -2])}, opset=13)
    with pytest.raises(ep_host.KernelError, match="repeat"):
        run_ep_host(model, {"x": x})


@pytest.mark.parametrize("opset", [1, 13, 21])
@pytest.mark.parametrize("perm", [None, [1, 0, 2], [2, 0, 1]])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.bool_])
def test_transpose(opset, perm, dtype, rng):
    x = rng.integers(0, 2, (2, 3, 4)).astype(dtype)
    attrs = {} if perm is None else {"perm": perm}
    check("Transpose", ["x"], {"x": x}, opset=opset, **attrs)


def test_transpose_of_strings():
    x = np.array([["a", "b"], ["c", "d"]], dtype=object)
    (out,) = run_ep_host(one_node("Transpose", ["x"], {"x": x}, opset=13), {"x": x})
    assert out.tolist() == [["a", "c"], ["b", "d"]]


@pytest.mark.parametrize("attrs", [{}, {"start": 1}, {"start": -1}, {"end": -1},
                                   {"start": 1, "end": 2}, {"start": -10}, {"end": 10},
                                   {"start": 2, "end": 1}, {"start": 5}])
@pytest.mark.parametrize("opset", [15, 19, 21])
def test_shape_slices_and_clamps(attrs, opset):
    x = np.zeros((2, 3, 4), np.float32)
    (out,) = check("Shape", ["x"], {"x": x}, opset=opset, out_type=TensorProto.INT64, **attrs)
    assert out.dtype == np.int64
    assert out.tolist() == list(x.shape[attrs.get("start", 0):attrs.get("end")])


@pytest.mark.parametrize("opset", [1, 13])
def test_shape_before_version_15_and_of_a_scalar(opset):
    for x in (np.zeros((0, 5), np.uint8), np.array(1.0, np.float32)):
        check("Shape", ["x"], {"x": x}, opset=opset, out_type=TensorProto.INT64)


@pytest.mark.parametrize("opset", [1, 13, 19, 21])
@pytest.mark.parametrize("shape", [(2, 3), (), (0, 4)])
def test_size(opset, shape):
    x = np.zeros(shape, np.int32)
    (out,) = check("Size", ["x"], {"x": x}, opset=opset, out_type=TensorProto.INT64)
    assert out.shape == () and out.dtype == np.int64


def test_shape_and_size_move_no_bytes_and_take_any_type():
    node = helper.make_node("Shape", ["x"], ["out"])
    model = make_model([node], [("x", TensorProto.BFLOAT16, [2, 3])],
                       [("out", TensorProto.INT64, [2])], opset=19)
    answer = cpu_answer(model)
    assert answer.is_supported and answer.cost.bytes_moved == 0


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("indices", [
    np.array([0, 2], np.int64), np.array([[1, -1], [-3, 0]], np.int64), np.array(-2, np.int32),
    np.zeros((0,), np.int64),
])
def test_gather_with_negative_indices(opset, axis, indices, rng):
    if opset == 1 and (axis < 0 or (indices < 0).any()):
        return
    x = rng.standard_normal((3, 4, 3)).astype(np.float32)
    check("Gather", ["x", "i"], {"x": x, "i": indices}, opset=opset, axis=axis)


def test_gather_out_of_range_index_fails():
    x = np.ones((3, 2), np.float32)
    model = one_node("Gather", ["x", "i"], {"x": x}, {"i": np.array([3])}, opset=13)
    with pytest.raises(ep_host.KernelError):
        run_ep_host(model, {"x": x})


@pytest.mark.parametrize(("data_shape", "indices", "batch_dims"), [
    ((2, 2), [[0, 0], [1, 1]], 0),
    ((2, 2), [[1], [0]], 0),
    ((2, 2, 2), [[0, 1], [1, 0]], 0),
    ((2, 2, 2), [[[0, 1]], [[1, 0]]], 0),
    ((2, 2, 2), [[1], [0]], 1),
    ((2, 3, 4), [[[-1, 2]], [[0, -4]]], 1),
    ((2, 3, 4, 2), [[[1], [0], [3]], [[2], [-1], [-4]]], 2),
    ((3, 4), [[-1, -1], [2, 0]], 0),
])
@pytest.mark.parametrize("opset", [12, 13])
def test_gather_nd(data_shape, indices, batch_dims, opset):
    x = np.arange(np.prod(data_shape), dtype=np.float32).reshape(data_shape)
    feeds = {"x": x, "i": np.array(indices, np.int64)}
    check("GatherND", ["x", "i"], feeds, opset=opset, batch_dims=batch_dims)
    if batch_dims == 0:
        check("GatherND", ["x", "i"], feeds, opset=11)


SLICES = [  # starts, ends, axes, steps
    ([1, 0], [2, 3], [0, 1], [1, 2]),
    ([0, 1], [-1, 1000], None, None),
    ([-1], [INT64_MIN], [1], [-1]),
    ([0], [INT64_MAX], [-1], None),
    ([-100], [100], [0], [1]),
    ([10], [-100], [1], [-2]),
    ([3], [1], [2], [1]),
    ([2, -2], [0, -5], [-1, 0], [-1, -1]),
    ([1], [INT64_MAX], [1], [3]),
]


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), SLICES)
@pytest.mark.parametrize("opset", [10, 11, 13])
@pytest.mark.parametrize("index_type", [np.int64, np.int32])
def test_slice_clamps_per_the_spec(starts, ends, axes, steps, opset, index_type, rng):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    if index_type == np.int32:
        starts, ends = np.clip(starts, -2**31, 2**31 - 1), np.clip(ends, -2**31, 2**31 - 1)
    consts = {"s": np.array(starts, index_type), "e": np.array(ends, index_type)}
    names = ["x", "s", "e"]
    if axes is not None:
        consts["a"] = np.array(axes, index_type)
        names.append("a")
    if steps is not None:
        if axes is None:
            names.append("")
        consts["st"] = np.array(steps, index_type)
        names.append("st")
    check("Slice", names, {"x": x}, consts, opset=opset)


@pytest.mark.parametrize(("starts", "ends", "axes"), [
    ([1, 0], [2, 3], [0, 1]), ([0, 1], [-1, 1000], None), ([-100], [100], [0]), ([3], [1], [2]),
])
def test_slice_1_with_attributes(starts, ends, axes, rng):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    attrs = {"starts": starts, "ends": ends} | ({} if axes is None else {"axes": axes})
    check("Slice", ["x"], {"x": x}, opset=1, **attrs)


def test_slice_with_inputs_fed_at_run_time_on_an_empty_dim():
    x = np.zeros((0, 3), np.float32)
    feeds = {"x": x, "s": np.array([-1, 0]), "e": np.array([INT64_MIN, 2]),
             "a": np.array([0, 1]), "st": np.array([-1, 1])}
    (out,) = check("Slice", ["x", "s", "e", "a", "st"], feeds, opset=13)
    assert out.shape == (0, 2)


def test_slice_declares_its_index_inputs_host_resident():
    x = np.ones((2, 3), np.float32)
    consts = {"s": np.array([0]), "e": np.array([1])}
    answer = cpu_answer(one_node("Slice", ["x", "s", "e"], {"x": x}, consts, opset=13))
    assert answer.host_inputs == (1, 2, 3, 4)


@pytest.mark.parametrize(("opset", "split", "axis", "n_out"), [
    (2, None, 1, 3), (2, [1, 2], 0, 2), (11, [4, 0, 2], -1, 3), (13, None, -1, 2),
    (13, [2, 4], 1, 2), (18, [1, 5], 1, 2),
])
def test_split(opset, split, axis, n_out, rng):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    if split is None or opset < 13:
        attrs = {"axis": axis} | ({} if split is None else {"split": split})
        check("Split", ["x"], {"x": x}, opset=opset, n_out=n_out, **attrs)
    else:
        consts = {"sp": np.array(split, np.int64)}
        check("Split", ["x", "sp"], {"x": x}, consts, opset=opset, n_out=n_out, axis=axis)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_split_into_equal_parts_of_each_axis(axis, rng):
    x = rng.standard_normal((4, 6, 12)).astype(np.float32)
    consts = {"sp": np.array([2] * (x.shape[axis] // 2), np.int64)}
    check("Split", ["x", "sp"], {"x": x}, consts, opset=13, n_out=x.shape[axis] // 2, axis=axis)


def test_equal_parts_of_any_layout_are_what_numpy_cuts():
    """The equal parts come as the rows of one transposed view: for C, Fortran, strided and
    empty inputs they hold numpy's split's values in its shapes."""
    rng = np.random.default_rng(3)
    for shape in [(7, 30), (2, 3, 12), (12,), (4, 0, 6), (3, 6, 4, 2)]:
        base = rng.standard_normal(shape).astype(np.float32)
        for x in (base, np.asfortranarray(base), np.flip(base, axis=0)):
            for axis in range(-x.ndim, x.ndim):
                dim = x.shape[axis]
                for n in (k for k in (1, 2, 3, 6) if dim % k == 0):
                    got = _split(np, x, axis, [dim // n] * n, n)
                    want = np.split(x, n, axis=axis)
                    assert [g.shape for g in got] == [w.shape for w in want]
                    for g, w in zip(got, want, strict=True):
                        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(("length", "num_outputs", "sizes"), [
    (7, 3, [3, 3, 1]), (6, 4, [2, 2, 2, 0]), (6, 3, [2, 2, 2]), (1, 1, [1]),
])
def test_split_18_num_outputs_makes_the_last_part_smaller(length, num_outputs, sizes):
    x = np.arange(length, dtype=np.int64)
    outs = check("Split", ["x"], {"x": x}, opset=18, n_out=num_outputs, num_outputs=num_outputs)
    assert [len(o) for o in outs] == sizes


def test_split_18_num_outputs_that_leave_nothing_for_the_last_part_fail():
    x = np.arange(5, dtype=np.float32)
    with pytest.raises(ep_host.KernelError):
        run_ep_host(one_node("Split", ["x"], {"x": x}, opset=18, n_out=4, num_outputs=4),
                    {"x": x})


def test_split_18_declines_num_outputs_that_disagree_with_the_outputs():
    x = np.arange(6, dtype=np.float32)
    answer = cpu_answer(one_node("Split", ["x"], {"x": x}, opset=18, n_out=2, num_outputs=3))
    assert not answer.is_supported and answer.code == "attribute"
    assert "num_outputs is 3 but the node has 2 outputs" in answer.reason


def test_split_18_declines_neither_sizes_nor_num_outputs():
    x = np.arange(6, dtype=np.float32)
    answer = cpu_answer(one_node("Split", ["x"], {"x": x}, opset=18, n_out=2))
    assert not answer.is_supported and answer.code == "attribute"
    assert "'split' input or 'num_outputs'" in answer.reason


def test_split_into_unequal_parts_without_sizes_fails():
    x = np.arange(7, dtype=np.float32)
    with pytest.raises(ep_host.KernelError, match="equal parts"):
        run_ep_host(one_node("Split", ["x"], {"x": x}, opset=13, n_out=2), {"x": x})


@pytest.mark.parametrize("opset", [4, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_concat(opset, axis, dtype, rng):
    if axis < 0 and opset < 11:
        return
    shapes = {0: [(1, 3), (2, 3), (0, 3)], 1: [(2, 1), (2, 2), (2, 0)]}[axis % 2]
    feeds = {f"x{i}": rng.integers(0, 2, s).astype(dtype) for i, s in enumerate(shapes)}
    check("Concat", list(feeds), feeds, opset=opset, axis=axis)


def test_concat_1_defaults_to_axis_1(rng):
    feeds = {"a": rng.standard_normal((2, 1)).astype(np.float32),
             "b": rng.standard_normal((2, 3)).astype(np.float32)}
    (out,) = run_ep_host(one_node("Concat", ["a", "b"], feeds, opset=1), feeds)
    np.testing.assert_array_equal(out, np.concatenate([feeds["a"], feeds["b"]], axis=1))


def test_concat_of_strings():
    feeds = {"a": np.array(["x"], dtype=object), "b": np.array(["y", "z"], dtype=object)}
    (out,) = run_ep_host(one_node("Concat", ["a", "b"], feeds, opset=13, axis=0), feeds)
    assert out.tolist() == ["x", "y", "z"]


@pytest.mark.parametrize("opset", [8, 13])
@pytest.mark.parametrize(("in_shape", "shape"), [
    ((3, 1), [2, 1, 6]), ((3, 1), [3, 4]), ((2, 3), [1]), ((2, 3), [1, 1, 3]), ((1,), [0]),
    ((), [2, 2]),
])
def test_expand_broadcasts_both_ways(opset, in_shape, shape, rng):
    x = rng.standard_normal(in_shape).astype(np.float32)
    check("Expand", ["x", "s"], {"x": x}, {"s": np.array(shape, np.int64)}, opset=opset)


def test_expand_to_incompatible_shape_fails():
    x = np.ones((3,), np.float32)
    model = one_node("Expand", ["x", "s"], {"x": x}, {"s": np.array([4])}, opset=13)
    with pytest.raises(ep_host.KernelError, match="do not broadcast"):
        run_ep_host(model, {"x": x})


FLOAT_SOURCE = np.array([-2.7, -0.5, -0.0, 0.0, 0.4, 1.5, 2.7, 100.9], np.float32)


CASTS = [  # source, target
    (FLOAT_SOURCE, TensorProto.INT32), (FLOAT_SOURCE, TensorProto.INT8),
    (FLOAT_SOURCE, TensorProto.INT64), (FLOAT_SOURCE, TensorProto.INT16),
    (np.abs(FLOAT_SOURCE), TensorProto.UINT8), (np.abs(FLOAT_SOURCE), TensorProto.UINT32),
    (FLOAT_SOURCE, TensorProto.FLOAT16), (FLOAT_SOURCE, TensorProto.DOUBLE),
    (FLOAT_SOURCE, TensorProto.BOOL),
    (np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32), TensorProto.BOOL),
    (np.array([1e300, -1e300, 1.0 / 3, 5e-324], np.float64), TensorProto.FLOAT),
    (np.array([1e10, 65519.0, 65520.0, 1e-8], np.float64), TensorProto.FLOAT16),
    (np.array([200, -56, 300, -129, 2**40 + 7], np.int64), TensorProto.INT8),
    (np.array([200, -1, 70000], np.int64), TensorProto.UINT16),
    (np.array([65504, 65519, 65520, 2**53 + 1], np.int64), TensorProto.FLOAT16),
    (np.array([2**63 - 1, -(2**63), 12345678], np.int64), TensorProto.FLOAT),
    (np.array([0, 3, -1], np.int32), TensorProto.BOOL),
    (np.array([2**64 - 1, 0], np.uint64), TensorProto.DOUBLE),
    (np.array([True, False]), TensorProto.FLOAT), (np.array([True, False]), TensorProto.INT64),
    (np.array([True, False]), TensorProto.BOOL), (FLOAT_SOURCE, TensorProto.FLOAT),
    (np.array([1.5, -2.5, 60000], np.float16), TensorProto.INT32),
]


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")
@pytest.mark.parametrize(("source", "to"), CASTS)
@pytest.mark.parametrize("opset", [6, 13, 19, 21])
def test_cast_truncates_wraps_and_saturates_to_infinity(source, to, opset):
    (out,) = check("Cast", ["x"], {"x": source}, opset=opset, out_type=to, to=to)
    assert out.dtype == helper.tensor_dtype_to_np_dtype(to)


def test_cast_1_names_its_target():
    x = np.array([1.7, -1.7], np.float32)
    (out,) = run_ep_host(one_node("Cast", ["x"], {"x": x}, opset=1, out_type=TensorProto.INT32,
                                  to="INT32"), {"x": x})
    assert out.dtype == np.int32 and out.tolist() == [1, -1]


def test_cast_at_the_newest_versions():
    x = np.array([3.9, -3.9], np.float64)
    for opset in (23, 24, 25, onnx.defs.onnx_opset_version()):
        model = one_node("Cast", ["x"], {"x": x}, opset=opset, out_type=TensorProto.INT16,
                         to=TensorProto.INT16)
        assert run_ep_host(model, {"x": x})[0].tolist() == [3, -3]


@pytest.mark.parametrize("opset", [9, 20, 21])
@pytest.mark.parametrize("value", [None, np.array([7], np.int64), np.array([True]),
                                   np.array([1.5], np.float16), np.array([-2.0], np.float64)])
@pytest.mark.parametrize("shape", [[2, 3], [], [0, 4]])
def test_constant_of_shape(opset, value, shape):
    consts = {"s": np.array(shape, np.int64)}
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    out_type = TensorProto.FLOAT if value is None else tensor_type(value)
    (out,) = check("ConstantOfShape", ["s"], consts=consts, opset=opset, out_type=out_type,
                   **attrs)
    assert out.shape == tuple(shape)


def test_constant_of_shape_with_a_fed_shape():
    feeds = {"s": np.array([3, 1], np.int64)}
    (out,) = check("ConstantOfShape", ["s"], feeds, opset=9, out_type=TensorProto.INT32,
                   value=numpy_helper.from_array(np.array([4], np.int32)))
    assert out.tolist() == [[4], [4], [4]]


@pytest.mark.parametrize(("start", "limit", "delta"), [
    (3, 9, 3), (10, 4, -2), (0, 10, 1), (5, 5, 1), (5, 1, 1), (-7, 8, 4), (2, -9, -5),
])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int16, np.float32, np.float64])
def test_range_has_the_inputs_type(start, limit, delta, dtype):
    consts = {"a": np.array(start, dtype), "b": np.array(limit, dtype),
              "c": np.array(delta, dtype)}
    (out,) = check("Range", ["a", "b", "c"], consts=consts, opset=11)
    assert out.dtype == dtype


def test_range_of_fractional_steps_follows_the_spec_formula():
    # output[i] = start + i * delta in float32; onnxruntime accumulates delta instead
    start, limit, delta = np.float32(0.1), np.float32(100.0), np.float32(0.3)
    consts = {"a": np.array(start), "b": np.array(limit), "c": np.array(delta)}
    (out,) = run_ep_host(one_node("Range", ["a", "b", "c"], consts=consts, opset=11), {})
    expected = np.arange(333, dtype=np.float32) * delta + start
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, expected)


def test_range_27_computes_float16_in_float32():
    consts = {"a": np.array(1, np.float16), "b": np.array(5, np.float16),
              "c": np.array(0.5, np.float16)}
    (out,) = check("Range", ["a", "b", "c"], consts=consts, opset=27)
    assert out.dtype == np.float16 and out.tolist() == [1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5]
    answer = cpu_answer(one_node("Range", ["a", "b", "c"], consts=consts, opset=27,
                                 stash_type=TensorProto.FLOAT16))
    assert not answer.is_supported and answer.code == "attribute"
    assert "stash_type=10" in answer.reason
    assert cpu_answer(one_node("Range", ["a", "b", "c"], consts=consts, opset=11)).code == "dtype"


@pytest.mark.parametrize(("attrs", "expected"), [
    ({"value": numpy_helper.from_array(np.array([[1, 2]], np.int32))}, [[1, 2]]),
    ({"value_float": 1.5}, 1.5), ({"value_floats": [1.0, 2.5]}, [1.0, 2.5]),
    ({"value_int": -3}, -3), ({"value_ints": [4, 5]}, [4, 5]),
])
@pytest.mark.parametrize("opset", [12, 13, 19, 21])
def test_constant(attrs, expected, opset):
    node = helper.make_node("Constant", [], ["out"], **attrs)
    out_type = (TensorProto.INT32 if "value" in attrs else
                TensorProto.FLOAT if "value_float" in attrs or "value_floats" in attrs
                else TensorProto.INT64)
    model = make_model([node], [], [("out", out_type, None)], opset=opset)
    (out,) = assert_matches_onnxruntime(model, {})
    assert out.tolist() == expected
    assert cpu_answer(model).is_supported


def test_constant_9_value_and_strings():
    node = helper.make_node("Constant", [], ["out"],
                            value=numpy_helper.from_array(np.array([2.5, -1.0], np.float64)))
    model = make_model([node], [], [("out", TensorProto.DOUBLE, None)], opset=9)
    assert run_ep_host(model, {})[0].tolist() == [2.5, -1.0]
    node = helper.make_node("Constant", [], ["out"], value_strings=["ab", "c"])
    model = make_model([node], [], [("out", TensorProto.STRING, None)], opset=13)
    assert run_ep_host(model, {})[0].tolist() == ["ab", "c"]


def elem(array):
    return helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)


def indexing_model(op, feeds, consts=None, *, opset, out_type=None, n_out=1, inputs=None, **attrs):
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
    return assert_matches_onnxruntime(indexing_model(op, feeds, consts, opset=opset, **kw), feeds)


def ints(*values):
    return np.array(values, dtype=np.int64)


OPS = ["Pad", "GatherElements", "ScatterElements", "ScatterND", "Scatter", "TensorScatter", "Tile",
       "OneHot", "Compress", "NonZero", "Unique", "ReverseSequence", "EyeLike", "Trilu", "BitCast"]


@pytest.mark.parametrize("op", OPS)
def test_every_version_of_the_indexing_ops_is_registered(op):
    expected = {s.since_version for s in onnx.defs.get_all_schemas_with_history()
                if s.name == op and s.domain == ""}
    assert REGISTRY.versions("ai.onnx", op) == sorted(expected)


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
    (y,) = run_ep_host(indexing_model("Pad", {"x": x}, {"p": ints(1, 0, 0, 1)}, opset=19), {"x": x})
    assert y.tolist() == [["", "", ""], ["a", "b", ""]]


def test_wrap_before_version_19_is_declined():
    x = np.zeros((2, 2), np.float32)
    answer = cpu_answer(indexing_model("Pad", {"x": x}, {"p": ints(1, 1, 1, 1)}, opset=18,
                                       mode="wrap"))
    assert not answer.is_supported and answer.code == "attribute"
    assert "constant/reflect/edge" in answer.reason and "'wrap'" in answer.reason


def test_gather_elements_takes_negative_and_narrower_indices(rng):
    data = rng.standard_normal((3, 4)).astype(np.float32)
    matches_ort("GatherElements", {"d": data}, {"i": ints(-1, 0, 2, -3).reshape(2, 2)},
                opset=13, axis=0)


@pytest.mark.parametrize("rows", [2, 40])  # 8 indices (checked in Python) and 160 (numpy)
def test_gather_elements_checks_every_index_however_many(rng, rows):
    from ep_host_cpu.xp import numpy_xp as xp

    from ep_host.kernels import shape as shape_kernels

    data = rng.standard_normal((rows, 5)).astype(np.float32)
    index = rng.integers(-5, 5, (rows, 4)).astype(np.int64)
    for axis_index, axis in ((index, 1), (index % rows - rows, 0)):  # negatives on both axes
        position = np.where(axis_index < 0, axis_index + data.shape[axis], axis_index)
        i, j = np.indices(axis_index.shape)
        want = data[i, position] if axis == 1 else data[position, j]
        got = shape_kernels.gather_elements(xp, data, axis_index, axis=axis)
        np.testing.assert_array_equal(got, want)
    again = shape_kernels.gather_elements(xp, data, index, axis=1)  # the grid made once
    np.testing.assert_array_equal(again, shape_kernels.gather_elements(xp, data, index, axis=1))
    for bad in (5, -6):
        wrong = index.copy()
        wrong[-1, -1] = bad  # the last index alone is out of range
        with pytest.raises(IndexError, match=r"outside \[-5, 4\]"):
            shape_kernels.gather_elements(xp, data, wrong, axis=1)
    matches_ort("GatherElements", {"d": data}, {"i": index}, opset=13, axis=1)


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
    answer = cpu_answer(indexing_model("ScatterElements", {"d": data, "u": data},
                                       {"i": ints(0, 1, 1, 0).reshape(2, 2)}, opset=18,
                                       inputs=["d", "i", "u"], reduction="add"))
    assert not answer.is_supported and answer.code == "dtype" and "bool" in answer.reason
    x = np.zeros((2, 2), np.float32)
    answer = cpu_answer(indexing_model("ScatterND", {"d": x, "u": x[0]},
                                       {"i": ints(0, 1).reshape(2, 1)}, opset=16,
                                       inputs=["d", "i", "u"], reduction="max"))
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
    model = indexing_model("TensorScatter", {"p": past, "u": update}, {"w": write}, opset=24,
                           mode=mode, axis=-2)
    (y,) = run_ep_host(model, {"p": past, "u": update})
    expected = past.copy()
    for b in range(2):
        for c in range(3):
            for s in range(2):
                expected[b, c, (write[b] + s) % 5] = update[b, c, s]
    np.testing.assert_array_equal(y, expected)


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
    model = indexing_model("OneHot", {"i": indices}, {"d": np.array(3, np.int64),
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
    answer = cpu_answer(indexing_model("NonZero", {"x": np.array(1.0, np.float32)}, opset=13,
                                       out_type=TensorProto.INT64))
    assert not answer.is_supported and answer.code == "shape" and "rank >= 1" in answer.reason


@pytest.mark.parametrize("is_sorted", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, -1])
def test_unique_outputs_match_onnxruntime(is_sorted, axis):
    x = np.array([[2, 1, 2], [0, 1, 0], [2, 1, 2], [1, 1, 1]], np.float32)
    attrs = {"sorted": is_sorted} if axis is None else {"sorted": is_sorted, "axis": axis}
    model = indexing_model("Unique", {"x": x}, opset=11, n_out=4, **attrs)
    for i in (1, 2, 3):
        model.graph.output[i].type.tensor_type.elem_type = TensorProto.INT64
    assert_matches_onnxruntime(model, {"x": x})


def test_unique_of_bfloat16_keeps_its_type():
    x = np.array([2, 1, 1, 3, 4, 3], dtype=ml_dtypes.bfloat16)
    model = indexing_model("Unique", {"x": x}, opset=28, n_out=4, sorted=0)
    for i in (1, 2, 3):
        model.graph.output[i].type.tensor_type.elem_type = TensorProto.INT64
    y, first, inverse, counts = run_ep_host(model, {"x": x})
    assert y.dtype == x.dtype and y.astype(float).tolist() == [2, 1, 3, 4]
    assert first.tolist() == [0, 1, 3, 4] and inverse.tolist() == [0, 1, 1, 2, 3, 2]
    assert counts.tolist() == [1, 2, 2, 1]


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


def test_bit_cast_reinterprets_bits():
    x = np.array([1.0, -2.5, np.inf], np.float32)
    (y,) = run_ep_host(indexing_model("BitCast", {"x": x}, opset=26, to=TensorProto.INT32,
                                      out_type=TensorProto.INT32), {"x": x})
    np.testing.assert_array_equal(y, x.view(np.int32))
    x4 = np.array([-1, 7, -8], dtype=ml_dtypes.int4)
    (y4,) = run_ep_host(indexing_model("BitCast", {"x": x4}, opset=26, to=TensorProto.UINT4,
                                       out_type=TensorProto.UINT4), {"x": x4})
    assert y4.dtype == np.dtype(ml_dtypes.uint4) and y4.astype(int).tolist() == [15, 7, 8]


def test_bit_cast_between_widths_is_declined():
    x = np.zeros(3, np.float32)
    answer = cpu_answer(indexing_model("BitCast", {"x": x}, opset=26, to=TensorProto.INT64,
                                       out_type=TensorProto.INT64))
    assert not answer.is_supported and answer.code == "dtype"
    assert "float32 (32 bits)" in answer.reason and "int64 (64 bits)" in answer.reason


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
