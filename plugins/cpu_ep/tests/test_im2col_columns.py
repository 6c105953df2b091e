"""im2col's columns copied by numba's loop (``xp.im2col_columns``) for stride-2 2-D Convs with
wide rows: equal bit for bit to numpy's padded window copy, over strides, dilations and pads; a
Conv on it equal to numpy's path and onnxruntime at a real first-conv shape; and numba never
imported for it alone."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from cpukit import make_model, run_onnxruntime
from ep_host_cpu.im2col import ImageColumns
from ep_host_cpu.jit import numba_module
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper, numpy_helper

from ep_host.kernels import conv as conv_kernels
from ep_host.kernels.conv_geometry import pad_spatial, window_geometry

F = TensorProto.FLOAT


def numpy_columns(x, kernel, strides, dilations, pads):
    """The columns as numpy's im2col reads them: a window view of the zero-padded input."""
    out, begin, end = window_geometry(x.shape[2:], kernel, strides, dilations, pads, "NOTSET")
    padded = pad_spatial(np, x, begin, end)
    st = padded.strides
    view = np.lib.stride_tricks.as_strided(
        padded, shape=x.shape[:2] + tuple(kernel) + out,
        strides=st[:2] + tuple(a * d for a, d in zip(st[2:], dilations, strict=True))
        + tuple(a * s for a, s in zip(st[2:], strides, strict=True)))
    return np.array(view), out, begin


# x shape, kernel, strides, dilations, pads (top, left, bottom, right)
GEOMETRIES = [
    ((1, 3, 224, 224), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # the mobile nets' first conv
    ((2, 3, 17, 23), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # odd sizes
    ((1, 2, 20, 21), (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),  # resnet's 7x7
    ((1, 2, 12, 14), (3, 3), (2, 2), (1, 1), (0, 1, 2, 0)),  # the columns' phases swapped
    ((1, 2, 11, 13), (3, 2), (1, 2), (2, 3), (2, 1, 1, 2)),  # dilated
    ((1, 2, 9, 10), (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),  # stride 1
    ((1, 2, 13, 16), (3, 5), (3, 3), (1, 2), (1, 2, 1, 0)),  # stride 3
    ((1, 2, 5, 6), (3, 3), (2, 2), (1, 1), (4, 5, 3, 6)),  # pads past the kernel
    ((1, 1, 1, 1), (3, 3), (2, 2), (1, 1), (1, 1, 1, 1)),  # a 1x1 image
]


@pytest.mark.parametrize(("x_shape", "kernel", "strides", "dilations", "pads"), GEOMETRIES)
def test_compiled_columns_equal_numpys_window_copy(rng, x_shape, kernel, strides, dilations,
                                                   pads):
    assert numba_module() is not None
    columns = ImageColumns()
    assert columns.ready(np.float32)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    want, out, begin = numpy_columns(x, kernel, strides, dilations, pads)
    got = np.full(want.shape, np.nan, np.float32)  # every element written
    x.flags.writeable = False  # feeds may be read-only
    columns(x, got, kernel, strides, dilations, begin)
    np.testing.assert_array_equal(got, want)


def test_only_float32_and_only_once_numba_is_imported(monkeypatch):
    assert numba_module() is not None
    assert not ImageColumns().ready(np.float64)
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    assert not ImageColumns().ready(np.float32)


def first_conv(rng, m=16):
    w = (rng.standard_normal((m, 3, 3, 3)) * 0.3).astype(np.float32)
    b = rng.standard_normal(m).astype(np.float32)
    return w, b


def run_prepared(x, w, b, strides, pads):
    kw = {"auto_pad": "NOTSET", "group": 1, "strides": strides, "dilations": None, "pads": pads}
    kw.update(conv_kernels.prepare_conv(numpy_xp, {1: w, 2: b}, **kw))
    y = conv_kernels.conv(numpy_xp, x, w, b, **kw)
    return y, kw["packed"].plans[x.shape]


@pytest.mark.parametrize(("size", "compiled"), [(224, True), (96, False)])  # 112 / 48 outputs
def test_a_first_conv_equals_numpys_path_and_onnxruntime(rng, monkeypatch, size, compiled):
    assert numba_module() is not None
    w, b = first_conv(rng)
    x = rng.standard_normal((1, 3, size, size), dtype=np.float32)
    monkeypatch.setenv("EP_HOST_NUMBA", "1")
    got, plan = run_prepared(x, w, b, (2, 2), (1, 1, 1, 1))
    assert plan.variant == "im2col" and (plan.columns is not None) == compiled
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    numpys, plan = run_prepared(x, w, b, (2, 2), (1, 1, 1, 1))
    assert plan.variant == "im2col" and plan.columns is None
    np.testing.assert_array_equal(got, numpys)  # the same columns, the same GEMM
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1],
                            kernel_shape=[3, 3])
    model = make_model([node], [("x", F, list(x.shape))], [("y", F, None)],
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b")])
    (theirs,) = run_onnxruntime(model, {"x": x})
    np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)


def test_a_model_of_strided_convolutions_never_imports_numba(tmp_path):
    """The copy alone is not worth a first compiled kernel: a fresh process running a wide
    stride-2 Conv loads none (neither built ahead of time nor numba's JIT)."""
    from ep_host_cpu.profile import machine_profile

    machine_profile()  # measured once per machine (and cache folder), compiled kernels included
    w, b = first_conv(np.random.default_rng(0), 8)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=[2, 2], pads=[1, 1, 1, 1])
    model = make_model([node], [("x", F, [1, 3, 128, 128])], [("y", F, None)],
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b")])
    path = tmp_path / "conv.onnx"
    path.write_bytes(model.SerializeToString())
    code = ("import sys, numpy as np, ep_host; "
            f"s = ep_host.InferenceSession({str(path)!r}, providers=['cpu']); "
            "s.run(None, {'x': np.ones((1, 3, 128, 128), np.float32)}); "
            "from ep_host_cpu.jit import compiled_in_use; "
            "print('numba' in sys.modules or compiled_in_use())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300, check=True)
    assert out.stdout.strip() == "False"
