"""Image and layout kernels: Resize, Upsample, GridSample, AffineGrid, RoiAlign,
NonMaxSuppression, MaxUnpool, Col2Im, CenterCropPad, DepthToSpace and SpaceToDepth."""

from __future__ import annotations

import tracemalloc

import numpy as np
import onnx
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from onnx import TensorProto, helper, numpy_helper

import ep_host
from ep_host.kernels import REGISTRY


def elem(array):
    return helper.np_dtype_to_tensor_dtype(np.asarray(array).dtype)


def one_node(op, feeds, consts=None, *, opset, out_type=None, inputs=None, **attrs):
    """A one-node model: ``feeds`` become graph inputs, ``consts`` initializers, in that order
    unless ``inputs`` names them (use "" for an omitted optional input)."""
    consts = consts or {}
    names = list(feeds) + list(consts) if inputs is None else inputs
    first = {**feeds, **consts}[names[0]]
    return make_model(
        [helper.make_node(op, names, ["y"], **attrs)],
        [(n, elem(a), list(a.shape)) for n, a in feeds.items()],
        [("y", elem(first) if out_type is None else out_type, None)], opset=opset,
        initializers=[numpy_helper.from_array(a, n) for n, a in consts.items()])


def matches_ort(op, feeds, consts=None, *, opset, rtol=1e-5, **kw):
    return assert_matches_onnxruntime(one_node(op, feeds, consts, opset=opset, **kw), feeds,
                                      rtol=rtol, atol=1e-5)


def ints(*values):
    return np.array(values, dtype=np.int64)


def floats(*values):
    return np.array(values, dtype=np.float32)


OPS = ["Resize", "Upsample", "GridSample", "AffineGrid", "RoiAlign", "NonMaxSuppression",
       "MaxUnpool", "Col2Im", "CenterCropPad", "DepthToSpace", "SpaceToDepth"]


@pytest.mark.parametrize("op", OPS)
def test_every_version_in_onnx_is_registered(op):
    expected = {s.since_version for s in onnx.defs.get_all_schemas_with_history()
                if s.name == op and s.domain == ""}
    assert REGISTRY.versions("ai.onnx", op) == sorted(expected)


# --- Resize -------------------------------------------------------------------------------------

TRANSFORMS = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
              "tf_crop_and_resize"]


@pytest.mark.parametrize("opset", [11, 13, 19])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("transform", TRANSFORMS)
def test_resize_to_sizes_matches_onnxruntime(rng, opset, mode, transform):
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    consts = {"roi": floats(0, 0, 0.1, 0.2, 1, 1, 0.8, 0.9), "scales": floats(),
              "sizes": ints(1, 2, 3, 11)}
    extra = {"nearest_mode": "ceil"} if mode == "nearest" else {"cubic_coeff_a": -0.5}
    matches_ort("Resize", {"x": x}, consts, opset=opset, mode=mode,
                coordinate_transformation_mode=transform, **extra)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("antialias", [0, 1])
def test_resize_by_scales_with_antialias_and_exclude_outside(rng, mode, antialias):
    x = rng.standard_normal((1, 1, 8, 9)).astype(np.float32)
    consts = {"roi": floats(), "scales": floats(1, 1, 0.55, 1.6)}
    matches_ort("Resize", {"x": x}, consts, opset=19, mode=mode, antialias=antialias,
                exclude_outside=int(mode == "cubic"))


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keeps_the_aspect_ratio_over_axes(rng, policy):
    x = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    matches_ort("Resize", {"x": x}, {"sizes": ints(9, 7)}, opset=18, inputs=["x", "", "", "sizes"],
                mode="linear", axes=[3, 2], keep_aspect_ratio_policy=policy)


def test_resize_nearest_moves_any_element_type():
    x = np.array([[[["a", "b"], ["c", "d"]]]], dtype=object)
    model = one_node("Resize", {"x": x}, {"scales": floats(1, 1, 1, 2)}, opset=19,
                     inputs=["x", "", "scales"], mode="nearest")
    (y,) = run_ep_host(model, {"x": x})
    assert y.tolist() == [[[["a", "a", "b", "b"], ["c", "c", "d", "d"]]]]


def test_resize_declines_what_it_does_not_compute():
    x = np.zeros((1, 1, 4, 4), np.int32)
    answer = cpu_answer(one_node("Resize", {"x": x}, {"sizes": ints(1, 1, 8, 8)}, opset=19,
                                 inputs=["x", "", "", "sizes"], mode="linear"))
    assert not answer.is_supported and answer.code == "dtype" and "int32" in answer.reason
    f = x.astype(np.float32)
    answer = cpu_answer(one_node("Resize", {"x": f}, {"sizes": ints(1, 1, 8, 8)}, opset=13,
                                 inputs=["x", "", "", "sizes"],
                                 coordinate_transformation_mode="tf_half_pixel_for_nn"))
    assert not answer.is_supported and answer.code == "attribute"
    assert "tf_half_pixel_for_nn" in answer.reason


def test_resize_declines_a_fractional_crop_length():
    """tf_crop_and_resize divides by the resized length; 4 * 0.5 * 1.5 = 3 is whole, while
    4 * 0.5 * 1.3 = 2.6 could mean 2.6 or 2."""
    x = np.zeros((1, 1, 4, 4), np.float32)
    roi = floats(0, 0, 0.25, 0.25, 1, 1, 0.75, 0.75)
    for scale, claimed in ((1.5, True), (1.3, False)):
        model = one_node("Resize", {"x": x}, {"roi": roi, "scales": floats(1, 1, scale, scale)},
                         opset=19, mode="linear",
                         coordinate_transformation_mode="tf_crop_and_resize")
        answer = cpu_answer(model)
        assert answer.is_supported == claimed
        if not claimed:
            assert answer.code == "attribute" and "2.6" in answer.reason


@pytest.mark.parametrize("mode", ["nearest", "linear"])
@pytest.mark.parametrize("scales", [[1, 1, 2, 3], [1, 1, 1.5, 2.5]])
def test_upsample_and_resize_10_match_onnxruntime(rng, mode, scales):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    s = np.array(scales, np.float32)
    matches_ort("Upsample", {"x": x}, {"s": s}, opset=9, mode=mode)
    matches_ort("Resize", {"x": x}, {"s": s}, opset=10, mode=mode)
    matches_ort("Upsample", {"x": x}, opset=7, mode=mode, scales=[float(v) for v in scales])


def test_upsample_refuses_to_downsample():
    x = np.zeros((1, 1, 4, 4), np.float32)
    answer = cpu_answer(one_node("Resize", {"x": x}, {"s": floats(1, 1, 0.5, 1)}, opset=10))
    assert not answer.is_supported and answer.code == "attribute"
    assert "scales >= 1, got [1.0, 1.0, 0.5, 1.0]" in answer.reason
    model = one_node("Upsample", {"x": x, "s": floats(1, 1, 0.5, 1)}, opset=9)
    with pytest.raises(ep_host.KernelError, match="must be >= 1"):  # scales known only then
        run_ep_host(model, {"x": x, "s": floats(1, 1, 0.5, 1)})


# --- GridSample and AffineGrid -------------------------------------------------------------------


@pytest.mark.parametrize("opset, mode", [(16, "bilinear"), (16, "nearest"), (16, "bicubic"),
                                         (20, "linear"), (20, "cubic")])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_matches_onnxruntime(rng, opset, mode, padding, align):
    x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 7, 2)).astype(np.float32)
    matches_ort("GridSample", {"x": x, "grid": grid}, opset=opset, mode=mode,
                padding_mode=padding, align_corners=align)


@pytest.mark.parametrize("padding", ["zeros", "reflection"])
def test_volumetric_grid_sample(rng, padding):
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (1, 2, 3, 4, 3)).astype(np.float32)
    matches_ort("GridSample", {"x": x, "grid": grid}, opset=20, mode="linear",
                padding_mode=padding)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
def test_grid_sample_zero_padding_is_zero_next_to_infinity(mode):
    x = np.ones((1, 1, 3, 3), np.float32)
    x[0, 0, 0, 0] = np.inf
    grid = floats(-3, -3, -1.2, -1.2, 0, 0).reshape(1, 1, 3, 2)
    (y,) = matches_ort("GridSample", {"x": x, "grid": grid}, opset=20, mode=mode)
    assert y[0, 0, 0, 0] == 0


def test_grid_sample_interpolates_only_floats():
    answer = cpu_answer(one_node("GridSample", {"x": np.zeros((1, 1, 2, 2), np.int64),
                                                "grid": np.zeros((1, 1, 1, 2), np.float32)},
                                 opset=20, mode="linear"))
    assert not answer.is_supported and answer.code == "dtype" and "int64" in answer.reason


@pytest.mark.parametrize("size", [[2, 3, 4, 5], [2, 3, 2, 4, 5]])
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(rng, size, align):
    r = len(size) - 2
    theta = rng.standard_normal((2, r, r + 1)).astype(np.float32)
    matches_ort("AffineGrid", {"theta": theta}, {"size": ints(*size)}, opset=20,
                align_corners=align)


def test_affine_grid_declines_an_aligned_axis_of_one():
    theta = np.zeros((1, 2, 3), np.float32)
    answer = cpu_answer(one_node("AffineGrid", {"theta": theta}, {"size": ints(1, 1, 1, 4)},
                                 opset=20, align_corners=1))
    assert not answer.is_supported and answer.code == "shape" and "size 1" in answer.reason


# --- RoiAlign and NonMaxSuppression -------------------------------------------------------------


@pytest.mark.parametrize("opset, transform", [(10, None), (16, "half_pixel"),
                                              (16, "output_half_pixel")])
@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("ratio", [0, 2])
def test_roi_align_matches_onnxruntime(rng, opset, transform, mode, ratio):
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = floats(0, 0, 9, 9, 1.2, 2.5, 7.7, 5.1, -2, -1, 13, 11, 3, 3, 3.5, 3.2).reshape(4, 4)
    extra = {} if transform is None else {"coordinate_transformation_mode": transform}
    matches_ort("RoiAlign", {"x": x, "rois": rois}, {"b": ints(0, 1, 1, 0)}, opset=opset,
                mode=mode, output_height=3, output_width=4, sampling_ratio=ratio,
                spatial_scale=0.8, **extra)


@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_of_many_small_rois_on_a_big_map_matches_onnxruntime(rng, mode):
    """Each roi reads only its window of the map; rois inside, across the edge and outside."""
    x = rng.standard_normal((2, 8, 40, 50)).astype(np.float32)
    corner = rng.uniform(-5, 48, (64, 2))
    rois = np.concatenate([corner, corner + rng.uniform(0.5, 15, (64, 2))], axis=1)
    batches = rng.integers(0, 2, 64).astype(np.int64)
    matches_ort("RoiAlign", {"x": x, "rois": rois.astype(np.float32)}, {"b": batches},
                opset=16, mode=mode, output_height=7, output_width=7, sampling_ratio=0,
                spatial_scale=0.9, coordinate_transformation_mode="half_pixel")


@pytest.mark.parametrize("center_point_box", [0, 1])
@pytest.mark.parametrize("iou, least", [(0.3, 0.2), (0.6, None), (0.0, None)])
def test_non_max_suppression_matches_onnxruntime(rng, center_point_box, iou, least):
    boxes = rng.uniform(0, 10, (2, 12, 4)).astype(np.float32)
    scores = rng.uniform(0, 1, (2, 3, 12)).astype(np.float32)
    consts = {"m": ints(4), "iou": floats(iou)}
    if least is not None:
        consts["least"] = floats(least)
    matches_ort("NonMaxSuppression", {"boxes": boxes, "scores": scores}, consts, opset=11,
                out_type=TensorProto.INT64, center_point_box=center_point_box)


def test_non_max_suppression_of_many_overlapping_boxes_matches_onnxruntime(rng):
    corner = rng.uniform(0, 100, (1, 1500, 2)).astype(np.float32)
    size = rng.uniform(5, 20, (1, 1500, 2)).astype(np.float32)
    boxes = np.concatenate([corner, corner + size], axis=2)
    scores = rng.uniform(0, 1, (1, 2, 1500)).astype(np.float32)
    matches_ort("NonMaxSuppression", {"boxes": boxes, "scores": scores},
                {"m": ints(2**62), "iou": floats(0.4), "least": floats(0.1)}, opset=11,
                out_type=TensorProto.INT64)


@pytest.mark.parametrize("iou, least", [(0.5, None), (0.0, 0.2), (0.9, 0.6)])
def test_non_max_suppression_of_boxes_grouped_apart_matches_onnxruntime(rng, iou, least):
    """torchvision's batched NMS offsets each class's boxes apart along x and y: 60 groups of
    200 boxes, with some boxes touching the next group's edge."""
    groups, per = 60, 200
    corner = rng.uniform(0, 80, (groups, per, 2))
    size = rng.uniform(2, 30, (groups, per, 2))
    corner[:, :5] = 100 - size[:, :5]  # right/bottom edges exactly on the group's border
    offset = (np.arange(groups) * 100.0)[:, None, None]
    boxes = np.concatenate([corner + offset, corner + size + offset], axis=2)
    boxes = boxes.reshape(1, groups * per, 4).astype(np.float32)
    scores = rng.uniform(0, 1, (1, 1, groups * per)).astype(np.float32)
    scores[0, 0, ::7] = 0.5  # ties
    consts = {"m": ints(2**62), "iou": floats(iou)}
    if least is not None:
        consts["least"] = floats(least)
    matches_ort("NonMaxSuppression", {"boxes": boxes, "scores": scores}, consts, opset=11,
                out_type=TensorProto.INT64)


def test_non_max_suppression_memory_stays_linear_in_the_boxes():
    """SSD-lite's export suppresses 27,000 boxes in one call: a pairwise IoU matrix of them is
    5.8 GB. Here 4,000 disjoint boxes (every one kept, the most work) stay within a few MB."""
    from ep_host.kernels.image import non_max_suppression

    n = 4000
    corner = np.arange(n, dtype=np.float32) * 2
    boxes = np.stack([corner, corner, corner + 1, corner + 1], axis=1)[None]
    scores = np.linspace(1, 0, n, dtype=np.float32)[None, None]
    tracemalloc.start()
    try:
        selected = non_max_suppression(np, boxes, scores, ints(n), floats(0.5), None,
                                       center_point_box=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert selected[:, 2].tolist() == list(range(n))
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MB for {n} boxes"


def test_non_max_suppression_keeps_a_score_equal_to_the_threshold():
    """The spec removes boxes with scores *less than* score_threshold."""
    boxes = floats(0, 0, 1, 1, 5, 5, 6, 6, 9, 9, 10, 10).reshape(1, 3, 4)
    scores = floats(0.5, 0.25, 0.75).reshape(1, 1, 3)
    model = one_node("NonMaxSuppression", {"boxes": boxes, "scores": scores},
                     {"m": ints(5), "iou": floats(0.5), "least": floats(0.5)}, opset=11,
                     out_type=TensorProto.INT64)
    (y,) = run_ep_host(model, {"boxes": boxes, "scores": scores})
    assert y.tolist() == [[0, 0, 2], [0, 0, 0]]


# --- MaxUnpool, Col2Im, CenterCropPad, DepthToSpace, SpaceToDepth ------------------------------


def test_max_unpool_matches_onnxruntime(rng):
    x = rng.standard_normal((1, 2, 2, 3)).astype(np.float32)
    index = ints(0, 3, 4, 10, 12, 14, 15, 17, 19, 25, 27, 29).reshape(1, 2, 2, 3)
    matches_ort("MaxUnpool", {"x": x}, {"i": index}, opset=11, kernel_shape=[2, 2],
                strides=[2, 2], pads=[0, 0, 1, 1])


def test_max_unpool_output_shape_one_larger_adds_a_zero_row_at_the_end():
    x = floats(5, 6, 7, 8).reshape(1, 1, 2, 2)
    index = ints(5, 7, 13, 15).reshape(1, 1, 2, 2)
    for shape, ok in (([1, 1, 5, 5], True), ([1, 1, 6, 6], False)):
        model = one_node("MaxUnpool", {"x": x}, {"i": index, "shape": ints(*shape)}, opset=22,
                         kernel_shape=[2, 2], strides=[2, 2])
        if not ok:
            with pytest.raises(ep_host.KernelError, match="more than one row"):
                run_ep_host(model, {"x": x})
            continue
        (y,) = run_ep_host(model, {"x": x})
        expected = np.zeros((1, 1, 5, 5), np.float32)
        expected[0, 0, 1, 1], expected[0, 0, 1, 3] = 5, 6
        expected[0, 0, 3, 1], expected[0, 0, 3, 3] = 7, 8
        np.testing.assert_array_equal(y, expected)


def test_col2im_matches_onnxruntime(rng):
    x = rng.standard_normal((2, 2 * 6, 9)).astype(np.float32)
    matches_ort("Col2Im", {"x": x}, {"image": ints(5, 6), "block": ints(2, 3)}, opset=18,
                strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2])


def test_center_crop_pad(rng):
    x = rng.standard_normal((5, 6, 3)).astype(np.float32)
    matches_ort("CenterCropPad", {"x": x}, {"s": ints(8, 3, 3)}, opset=18)
    matches_ort("CenterCropPad", {"x": x}, {"s": ints(2, 9)}, opset=18, axes=[0, -2])


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(rng, mode):
    x = rng.standard_normal((2, 8, 3, 2)).astype(np.float32)
    matches_ort("DepthToSpace", {"x": x}, opset=13, blocksize=2, mode=mode)
    nodes = [helper.make_node("DepthToSpace", ["x"], ["s"], blocksize=2, mode=mode),
             helper.make_node("SpaceToDepth", ["s"], ["y"], blocksize=2, mode=mode)]
    model = make_model(nodes, [("x", TensorProto.FLOAT, list(x.shape))],
                       [("y", TensorProto.FLOAT, None)], opset=28)
    model.ir_version = 11
    (y,) = run_ep_host(model, {"x": x})
    np.testing.assert_array_equal(y, x)


def test_space_to_depth_matches_onnxruntime(rng):
    x = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    matches_ort("SpaceToDepth", {"x": x}, opset=13, blocksize=2)
