"""Resize's taps on float32: numba's one-pass loop and numpy's passes (``EP_HOST_NUMBA=0``),
against onnxruntime and against each other on tensors large enough for the compiled loop
(DeepLabV3's upsamplings, cubic, downsampling, antialias)."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_matches_onnxruntime, make_model, run_ep_host
from ep_host_cpu.resample import CompiledTaps
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

from ep_host.kernels import image


@pytest.fixture(params=["numba", "numpy"])
def path(request, monkeypatch):
    monkeypatch.setenv("EP_HOST_NUMBA", "1" if request.param == "numba" else "0")
    return request.param


def resize_model(shape, sizes=None, scales=None, **attrs):
    const = ("sizes", np.array(sizes, np.int64)) if sizes is not None else (
        "scales", np.array(scales, np.float32))
    inputs = ["x", "", "", "sizes"] if sizes is not None else ["x", "", "scales"]
    return make_model([helper.make_node("Resize", inputs, ["y"], **attrs)],
                      [("x", TensorProto.FLOAT, list(shape))], [("y", TensorProto.FLOAT, None)],
                      opset=19, initializers=[numpy_helper.from_array(const[1], const[0])])


CASES = [
    ((1, 8, 1, 1), {"sizes": [1, 8, 65, 65], "mode": "linear"}),  # DeepLabV3's pooled branch
    ((1, 3, 40, 40), {"sizes": [1, 3, 160, 160], "mode": "linear"}),  # its last upsampling
    ((2, 2, 30, 30), {"sizes": [2, 2, 100, 120], "mode": "cubic",
                      "coordinate_transformation_mode": "align_corners"}),
    ((1, 4, 200, 180), {"scales": [1, 1, 0.3, 0.375], "mode": "linear"}),
    ((1, 4, 200, 180), {"scales": [1, 1, 0.3, 0.375], "mode": "linear", "antialias": 1}),
    ((1, 2, 90, 100), {"scales": [1, 1, 1.7, 0.8], "mode": "cubic", "exclude_outside": 1}),
]


@pytest.mark.parametrize(("shape", "attrs"), CASES)
def test_resize_matches_onnxruntime_on_large_tensors(path, rng, shape, attrs):
    x = rng.standard_normal(shape).astype(np.float32)
    # onnxruntime places its cubic and downsampling taps in float32: up to 2e-5 away here
    # (numpy's passes as much); its linear upsampling agrees to a few ulps
    tight = attrs["mode"] == "linear" and "sizes" in attrs
    assert_matches_onnxruntime(resize_model(shape, **attrs), {"x": x}, rtol=1e-5,
                               atol=2e-6 if tight else 5e-5)


@pytest.mark.parametrize(("shape", "attrs"), CASES)
def test_the_compiled_taps_agree_with_numpy_passes(rng, monkeypatch, shape, attrs):
    x = rng.standard_normal(shape).astype(np.float32) * 10
    model = resize_model(shape, **attrs)
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    (numpy_passes,) = run_ep_host(model, {"x": x})
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    (compiled,) = run_ep_host(model, {"x": x})
    assert compiled.dtype == np.float32 and compiled.shape == numpy_passes.shape
    np.testing.assert_allclose(compiled, numpy_passes, rtol=2e-6, atol=2e-6)


def test_the_compiled_loop_runs_only_on_the_numba_path_for_uniform_float32_taps(
        path, rng, monkeypatch):
    calls = []
    original = CompiledTaps.__call__

    def counted(self, x, axis, index, weight):  # the real call, counted
        calls.append((axis, index.shape))
        return original(self, x, axis, index, weight)

    monkeypatch.setattr(CompiledTaps, "__call__", counted)
    x = rng.standard_normal((1, 3, 40, 40)).astype(np.float32)
    sizes = np.array([1, 3, 160, 160], np.int64)
    kwargs = {"coordinate_transformation_mode": "half_pixel", "cubic_coeff_a": -0.75,
              "exclude_outside": 0, "extrapolation_value": 0.0, "nearest_mode": "floor"}
    y = image.resize_11(numpy_xp, x, None, None, sizes, mode="linear", **kwargs)
    # the width (the gather along the last axis) first, on the smaller array
    assert calls == ([(3, (160, 2)), (2, (160, 2))] if path == "numba" else [])
    calls.clear()
    image.resize_11(numpy_xp, x.astype(np.float64), None, None, sizes, mode="linear", **kwargs)
    image.resize_11(numpy_xp, x, None, None, sizes, mode="nearest", **kwargs)
    image.resize_11(numpy_xp, x[:, :, :4, :4], None, None, np.array([1, 3, 8, 8], np.int64),
                    mode="linear", **kwargs)  # 192 values: numpy's passes
    assert calls == []
    assert y.shape == (1, 3, 160, 160) and y.dtype == np.float32
