"""Resampling taps along one axis of a float32 array in one pass compiled by numba, bound on the
CPU EP's namespace as ``xp.compiled_taps`` for the library's Resize and Upsample (linear and
cubic modes); numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

Every output position along the axis is a weighted sum of a few input positions (the same
count for each). numpy's passes take each tap, scale it and add it into a new array (five
passes over the output, each a fresh allocation, for linear): DeepLabV3's last Resize (21
channels, 65 x 65 to 520 x 520) took 26 ms against onnxruntime's 9.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop


def taps_float32(x, index, weight, y):
    """y[o, i, :] = sum over k of x[o, index[i, k], :] * weight[i, k]: ``x`` (outer, size,
    inner), ``index`` and ``weight`` (out, taps), ``y`` (outer, out, inner)."""
    outer = x.shape[0]
    inner = x.shape[2]
    out, taps = index.shape
    if inner == 1:
        gather_rows(x[:, :, 0], index, weight, y[:, :, 0])
        return
    for o in range(outer):
        for i in range(out):
            yr = y[o, i]
            scale_row(x[o, index[i, 0]], weight[i, 0], yr)
            for k in range(1, taps):
                add_scaled_row(x[o, index[i, k]], weight[i, k], yr)


def gather_rows(x, index, weight, y):
    """The last axis resampled: y[o, i] = sum over k of x[o, index[i, k]] * weight[i, k]."""
    out, taps = index.shape
    for o in range(x.shape[0]):
        xr = x[o]
        yr = y[o]
        for i in range(out):
            acc = xr[index[i, 0]] * weight[i, 0]
            for k in range(1, taps):
                acc += xr[index[i, k]] * weight[i, k]
            yr[i] = acc


def scale_row(src, w, dst):
    for t in range(dst.size):
        dst[t] = src[t] * w


def add_scaled_row(src, w, dst):
    for t in range(dst.size):
        dst[t] += src[t] * w


def signature(numba: Any) -> list[Any]:
    types = numba.types
    f32 = types.Array(types.float32, 3, "C", readonly=True)
    return [types.void(f32, types.Array(types.int64, 2, "C", readonly=True),
                       types.Array(types.float32, 2, "C", readonly=True),
                       types.Array(types.float32, 3, "C"))]


class CompiledTaps(CompiledLoop):
    """``xp.compiled_taps``: :meth:`ready` says whether the compiled loop is used (numba
    installed and wanted; compiled, or read from numba's disk cache, the first time it says
    yes); calling it resamples a float32 array along ``axis`` by ``index`` and ``weight``
    (out, taps) into a new array."""

    MIN_SIZE = 16384  # output values below which numpy's passes cost about the same

    function = staticmethod(taps_float32)
    signature = staticmethod(signature)
    helpers = (gather_rows, scale_row, add_scaled_row)

    def __call__(self, x, axis, index, weight):
        shape = x.shape
        outer = int(np.prod(shape[:axis], dtype=np.int64))
        inner = int(np.prod(shape[axis + 1:], dtype=np.int64))
        out = index.shape[0]
        y = np.empty(shape[:axis] + (out,) + shape[axis + 1:], dtype=np.float32)
        self._compiled(np.ascontiguousarray(x).reshape(outer, shape[axis], inner),
                       np.ascontiguousarray(index, dtype=np.int64),
                       np.ascontiguousarray(weight, dtype=np.float32),
                       y.reshape(outer, out, inner))
        return y
