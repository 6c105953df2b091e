"""MaxPool with a 3 x 3 window at stride 2 (the stem and stage pools of ResNet, SqueezeNet,
ShuffleNet, DenseNet, GoogLeNet) or 1 (GoogLeNet's inception branches) on float32, each in one
pass compiled by numba, bound on the CPU EP's namespace as ``xp.compiled_max_pool_3x3s2`` and
``xp.compiled_max_pool_3x3s1``; numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

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

At stride 1 the same row loop ran 2-3x as long as onnxruntime's over rows of 7-28 floats (a
vector loop's remainder runs scalar); with one row and column of padding each side (the output
the input's size) the passes run instead over a block of planes laid out flat, each plane's
edge rows and each row's edge columns written again after (:func:`same_max_3x3`). One thread,
the loop alone: 192 x 28 x 28 0.053 ms, 480 x 14 x 14 0.044 ms, 832 x 7 x 7 0.030 ms against
the row loop's 0.11, 0.13, 0.09 ms; called from the kernel 0.067, 0.056, 0.041 ms against
numpy's passes' 0.19, 0.16, 0.12 ms and onnxruntime's 0.07-0.09, 0.056, 0.030-0.036 ms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop

SAME_BLOCK = 8192  # floats of planes pooled at a time by same_max_3x3 (its buffer: 32 KiB)


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


def max_pool_3x3s1(x, y, top, left):
    """y[p, i, j] = max of x[p, i - top + (0..2), j - left + (0..2)] over the taps inside x;
    ``x`` (planes, height, width), ``y`` (planes, out height, out width)."""
    planes, height, width = x.shape
    out_height = y.shape[1]
    out_width = y.shape[2]
    if (top == 1 and left == 1 and out_height == height and out_width == width and height > 1
            and width > 1):
        same_max_3x3(x, y)
        return
    row = np.full(max(out_width + 2, left + width), -np.inf, dtype=np.float32)
    inner = row[left:left + width]
    last = height - 1
    for p in range(planes):
        for i in range(out_height):
            start = i - top
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
                m = row[j]
                v = row[j + 1]
                m = v if (v > m or v != v) else m
                v = row[j + 2]
                m = v if (v > m or v != v) else m
                out[j] = m


def same_max_3x3(x, y):
    """:func:`max_pool_3x3s1` with one row and column of padding each side (y's shape x's, at
    least 2 x 2), over a block of planes at a time laid out flat: each pass one loop over the
    block with every index a view's own from 0 (an index less a constant, such as
    ``x[k - width]``, is checked for wrapping around and the loop is not vectorized), the
    first and last row of each plane, and the first and last column of each row, then
    written again without the neighbour across the edge."""
    planes, height, width = x.shape
    n = height * width
    block = max(1, min(planes, SAME_BLOCK // n))
    buf = np.empty(block * n, dtype=np.float32)
    for p0 in range(0, planes, block):
        q = min(block, planes - p0)
        total = q * n
        src = x[p0:p0 + q].reshape(total)
        dst = y[p0:p0 + q].reshape(total)
        above = src[:total - 2 * width]  # the rows' maximum, as if the planes were one
        centre = src[width:total - width]
        below = src[2 * width:]
        rows = buf[width:total - width]
        for k in range(total - 2 * width):
            m = above[k]
            v = centre[k]
            m = v if (v > m or v != v) else m
            v = below[k]
            rows[k] = v if (v > m or v != v) else m
        for p in range(q):  # each plane's first and last row: two rows each
            first = p * n
            lower = src[first + width:first + 2 * width]
            edge = buf[first:first + width]
            inside = src[first:first + width]
            for k in range(width):
                m = inside[k]
                v = lower[k]
                edge[k] = v if (v > m or v != v) else m
            first = first + n - width
            upper = src[first - width:first]
            edge = buf[first:first + width]
            inside = src[first:first + width]
            for k in range(width):
                m = upper[k]
                v = inside[k]
                edge[k] = v if (v > m or v != v) else m
        left = buf[:total - 2]  # then each three neighbouring columns', as if one row
        middle = buf[1:total - 1]
        right = buf[2:total]
        out = dst[1:total - 1]
        for k in range(total - 2):
            m = left[k]
            v = middle[k]
            m = v if (v > m or v != v) else m
            v = right[k]
            out[k] = v if (v > m or v != v) else m
        for first in range(0, total, width):  # each row's first and last column: two columns
            m = buf[first]
            v = buf[first + 1]
            dst[first] = v if (v > m or v != v) else m
            last = first + width - 1
            m = buf[last - 1]
            v = buf[last]
            dst[last] = v if (v > m or v != v) else m


def signature(numba: Any) -> list[Any]:
    types = numba.types
    return [types.void(types.Array(types.float32, 3, "C", readonly=True),
                       types.Array(types.float32, 3, "C"), types.int64, types.int64)]


class CompiledMaxPool(CompiledLoop):
    """A compiled MaxPool bound on the CPU EP's namespace: :meth:`ready` says whether the
    compiled loop is used (numba installed and wanted; compiled, or read from numba's disk
    cache, the first time it says yes); calling it pools a float32 (N, C, H, W) array into a
    new (N, C, out...) one, ``begin`` the (top, left) padding."""

    signature = staticmethod(signature)

    def __call__(self, x, out, begin):
        n, c, height, width = x.shape
        y = np.empty((n, c, out[0], out[1]), dtype=np.float32)
        if y.size:
            self._compiled(np.ascontiguousarray(x).reshape(n * c, height, width),
                           y.reshape(n * c, out[0], out[1]), int(begin[0]), int(begin[1]))
        return y


class CompiledMaxPool3x3s2(CompiledMaxPool):
    """``xp.compiled_max_pool_3x3s2``."""

    function = staticmethod(max_pool_3x3s2)


class CompiledMaxPool3x3s1(CompiledMaxPool):
    """``xp.compiled_max_pool_3x3s1``."""

    function = staticmethod(max_pool_3x3s1)
    helpers = (same_max_3x3,)
