"""AveragePool with a 3 x 3 window at stride 1 on float32 (Inception-v3's branches) in one pass
compiled by numba, bound on the CPU EP's namespace as ``xp.compiled_average_pool_3x3s1``;
numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

Per output row: the sum of its three input rows (a row of padding adds 0, as numpy's padded
buffer does) into a row buffer whose padding is 0, then of each three neighbouring columns,
times the inverse count that the pool's divisor rules give each position (the caller's, the
numpy path's own). The additions run in the numpy passes' order, ((r0 + r1) + r2) then
((c0 + c1) + c2), so the values equal theirs to the bit, signed zeros and NaN included.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop
from ep_host_cpu.max_pool import SAME_BLOCK


def average_pool_3x3s1(x, scale, y, top, left):
    """y[p, i, j] = sum of x[p, i - top + (0..2), j - left + (0..2)] (0 outside x) times
    scale[i, j]; ``x`` (planes, height, width), ``y`` (planes, out height, out width)."""
    planes, height, width = x.shape
    out_height = y.shape[1]
    out_width = y.shape[2]
    if (top == 1 and left == 1 and out_height == height and out_width == width and height > 1
            and width > 1):
        same_average_3x3(x, scale, y)
        return
    zero = np.float32(0.0)
    row = np.zeros(max(out_width + 2, left + width), dtype=np.float32)
    inner = row[left:left + width]
    last = height - 1
    for p in range(planes):
        for i in range(out_height):
            start = i - top
            out = y[p, i]
            ra = x[p, min(max(start, 0), last)]
            rb = x[p, min(max(start + 1, 0), last)]
            rc = x[p, min(max(start + 2, 0), last)]
            if start >= 0 and start + 2 <= last:  # the three rows inside
                for w in range(width):
                    inner[w] = (ra[w] + rb[w]) + rc[w]
            else:  # a row of padding adds 0 where it stands
                in_a = 0 <= start <= last
                in_b = 0 <= start + 1 <= last
                in_c = 0 <= start + 2 <= last
                for w in range(width):
                    va = ra[w] if in_a else zero
                    vb = rb[w] if in_b else zero
                    vc = rc[w] if in_c else zero
                    inner[w] = (va + vb) + vc
            factor = scale[i]
            for j in range(out_width):  # then each three neighbouring columns'
                out[j] = ((row[j] + row[j + 1]) + row[j + 2]) * factor[j]


def same_average_3x3(x, scale, y):
    """:func:`average_pool_3x3s1` with one row and column of padding each side (y's shape
    x's, at least 2 x 2), over a block of planes at a time laid out flat as
    ``ep_host_cpu.max_pool.same_max_3x3`` does (each index a view's own from 0, each plane's
    edge rows and each row's edge columns written again), ``scale`` repeated for each plane
    of the block."""
    planes, height, width = x.shape
    n = height * width
    block = max(1, min(planes, SAME_BLOCK // n))
    zero = np.float32(0.0)
    buf = np.empty(block * n, dtype=np.float32)
    factors = np.empty(block * n, dtype=np.float32)
    flat_scale = scale.reshape(n)
    for p in range(block):
        factors[p * n:(p + 1) * n] = flat_scale
    for p0 in range(0, planes, block):
        q = min(block, planes - p0)
        total = q * n
        src = x[p0:p0 + q].reshape(total)
        dst = y[p0:p0 + q].reshape(total)
        above = src[:total - 2 * width]  # the rows' sum, as if the planes were one
        centre = src[width:total - width]
        below = src[2 * width:]
        rows = buf[width:total - width]
        for k in range(total - 2 * width):
            rows[k] = (above[k] + centre[k]) + below[k]
        for p in range(q):  # each plane's first and last row: padding adds 0 where it stands
            first = p * n
            lower = src[first + width:first + 2 * width]
            edge = buf[first:first + width]
            inside = src[first:first + width]
            for k in range(width):
                edge[k] = (zero + inside[k]) + lower[k]
            first = first + n - width
            upper = src[first - width:first]
            edge = buf[first:first + width]
            inside = src[first:first + width]
            for k in range(width):
                edge[k] = (upper[k] + inside[k]) + zero
        left = buf[:total - 2]  # then each three neighbouring columns', as if one row
        middle = buf[1:total - 1]
        right = buf[2:total]
        factor = factors[1:total - 1]
        out = dst[1:total - 1]
        for k in range(total - 2):
            out[k] = ((left[k] + middle[k]) + right[k]) * factor[k]
        for first in range(0, total, width):  # each row's first and last column
            dst[first] = ((zero + buf[first]) + buf[first + 1]) * factors[first]
            last = first + width - 1
            dst[last] = ((buf[last - 1] + buf[last]) + zero) * factors[last]


def signature(numba: Any) -> list[Any]:
    types = numba.types
    return [types.void(types.Array(types.float32, 3, "C", readonly=True),
                       types.Array(types.float32, 2, "C", readonly=True),
                       types.Array(types.float32, 3, "C"), types.int64, types.int64)]


class CompiledAveragePool3x3s1(CompiledLoop):
    """``xp.compiled_average_pool_3x3s1``: :meth:`ready` says whether the compiled loop is used
    (numba installed and wanted; compiled, or read from numba's disk cache, the first time it
    says yes); calling it pools a float32 (N, C, H, W) array into a new (N, C, out...) one,
    ``begin`` the (top, left) padding, ``scale`` the float32 (out...) inverse counts."""

    function = staticmethod(average_pool_3x3s1)
    helpers = (same_average_3x3,)
    signature = staticmethod(signature)

    def __call__(self, x, scale, out, begin):
        n, c, height, width = x.shape
        y = np.empty((n, c, out[0], out[1]), dtype=np.float32)
        if y.size:
            self._compiled(np.ascontiguousarray(x).reshape(n * c, height, width),
                           np.ascontiguousarray(scale, dtype=np.float32),
                           y.reshape(n * c, out[0], out[1]), int(begin[0]), int(begin[1]))
        return y
