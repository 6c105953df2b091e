"""MaxPool with a 3 x 3 window and stride 2 on float32 (the stem and stage pools of ResNet,
SqueezeNet, ShuffleNet, DenseNet, GoogLeNet) in one pass compiled by numba, bound on the CPU
EP's namespace as ``xp.compiled_max_pool_3x3s2``; numpy's passes otherwise, and with
``EP_HOST_NUMBA=0``.

Per output row: the maximum of its three input rows into a row buffer whose padding is -inf,
then of each three neighbouring columns at stride 2. The loops know the window and the stride
(a loop over a stride given at run time ran 3-4x slower, and slower than numpy's passes);
measured one thread on SqueezeNet's 64 x 111 x 111: 0.23-0.45 ms against numpy's 0.5-1.1 ms
and onnxruntime's 0.25-0.45 ms. Both passes are written in the loop itself: as helper
functions called per output row (numba compiles a call, not an inlined loop) the same kernel
took 1.27-1.42x as long (interleaved, one thread: 128 x 55 x 55 0.23 against 0.17 ms, 256 x 27
x 27 0.14 against 0.10 ms; the same values to the bit). A NaN wins as in ``numpy.maximum``: the
values equal numpy's passes' (of a tie between -0 and +0, numpy's own vector and scalar loops
keep different ones).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop


def max_pool_3x3s2(x, y, top, left):
    """y[p, i, j] = max of x[p, 2i - top + (0..2), 2j - left + (0..2)] over the taps inside x;
    ``x`` (planes, height, width), ``y`` (planes, out height, out width)."""
    planes, height, width = x.shape
    out_height = y.shape[1]
    out_width = y.shape[2]
    row = np.full(max(2 * out_width + 1, left + width), -np.inf, dtype=np.float32)
    inner = row[left:left + width]
    last = height - 1
    for p in range(planes):
        for i in range(out_height):
            start = 2 * i - top
            out = y[p, i]
            if start > last or start + 2 < 0:  # a window of padding only (never asked)
                out[:] = -np.inf
                continue
            a = min(max(start, 0), last)  # a row outside repeats one inside: the same max
            b = min(max(start + 1, 0), last)
            c = min(max(start + 2, 0), last)
            ra = x[p, a]
            rb = x[p, b]
            rc = x[p, c]
            for w in range(width):  # the rows' maximum
                m = ra[w]
                v = rb[w]
                m = v if (v > m or v != v) else m
                v = rc[w]
                m = v if (v > m or v != v) else m
                inner[w] = m
            for j in range(out_width):  # then each three neighbouring columns'
                m = row[2 * j]
                v = row[2 * j + 1]
                m = v if (v > m or v != v) else m
                v = row[2 * j + 2]
                m = v if (v > m or v != v) else m
                out[j] = m


def signature(numba: Any) -> list[Any]:
    types = numba.types
    return [types.void(types.Array(types.float32, 3, "C", readonly=True),
                       types.Array(types.float32, 3, "C"), types.int64, types.int64)]


class CompiledMaxPool3x3s2(CompiledLoop):
    """``xp.compiled_max_pool_3x3s2``: :meth:`ready` says whether the compiled loop is used
    (numba installed and wanted; compiled, or read from numba's disk cache, the first time it
    says yes); calling it pools a float32 (N, C, H, W) array into a new (N, C, out...) one,
    ``begin`` the (top, left) padding."""

    function = staticmethod(max_pool_3x3s2)
    signature = staticmethod(signature)

    def __call__(self, x, out, begin):
        n, c, height, width = x.shape
        y = np.empty((n, c, out[0], out[1]), dtype=np.float32)
        if y.size:
            self._compiled(np.ascontiguousarray(x).reshape(n * c, height, width),
                           y.reshape(n * c, out[0], out[1]), int(begin[0]), int(begin[1]))
        return y
