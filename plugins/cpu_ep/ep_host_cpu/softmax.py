"""A float32 Softmax over the last axis compiled by numba, bound on the CPU EP's namespace as
``xp.compiled_softmax``; numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

Per row: the maximum, then ``exp(x - max)`` by :mod:`ep_host_cpu.sigmoid`'s exponential (range
reduction, a degree-7 polynomial, ``2^k`` from its exponent bits: a form the compiler
vectorizes, where numba's ``expf`` is libm's scalar one), values below float32's smallest normal
number flushed to 0, then each divided by the row's sum. A NaN in a row makes the row NaN, as
numpy's passes do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop
from ep_host_cpu.sigmoid import TAIL, exp_of_nonpositive


def softmax_rows(x, y):
    """Each row of ``x`` (rows, cols) through softmax into ``y``."""
    rows, cols = x.shape
    bits = np.empty(cols, dtype=np.int32)
    poly = np.empty(cols, dtype=np.float32)
    for r in range(rows):
        top = row_max(x[r])
        shifted_exp(x[r], top, poly, bits)
        total = scaled(poly, bits.view(np.float32), y[r])
        divide(y[r], total)


def row_max(xr):
    """The row's maximum; NaN when the row holds one."""
    top = xr[0]
    nan = top != top
    for i in range(1, xr.size):
        v = xr[i]
        nan |= v != v
        top = v if v > top else top
    return np.float32(np.nan) if nan else top


def shifted_exp(xr, top, poly, bits):
    """exp(x - top) as poly * 2^k: ``poly`` the polynomial, ``bits`` the float32 2^k."""
    for i in range(xr.size):
        h = xr[i] - top  # <= 0, or NaN
        below = h < TAIL  # exp(h) under float32's smallest normal number: 0
        if below:  # k kept in range
            h = TAIL
        p, bits[i] = exp_of_nonpositive(h)
        poly[i] = np.float32(0) if below else p


def scaled(poly, scale, yr):
    """yr = poly * scale, 0 below float32's smallest normal number; returns the sum."""
    total = np.float32(0)
    tiny = np.float32(1.1754944e-38)
    for i in range(yr.size):
        e = poly[i] * scale[i]
        e = np.float32(0) if e < tiny else e  # a NaN keeps its value
        yr[i] = e
        total += e
    return total


def divide(yr, total):
    for i in range(yr.size):
        yr[i] = yr[i] / total


def signature(numba: Any) -> list[Any]:
    f32 = numba.types.float32
    return [numba.types.void(numba.types.Array(f32, 2, "C", readonly=True),
                             numba.types.Array(f32, 2, "C"))]


class CompiledSoftmax(CompiledLoop):
    """``xp.compiled_softmax``: :meth:`ready` says whether the compiled loop is used (numba
    installed and wanted; compiled, or read from numba's disk cache, the first time it says
    yes); calling it computes the softmax of a float32 array over its last axis."""

    MIN_SIZE = 4096  # values below which numpy's passes cost about the same

    function = staticmethod(softmax_rows)
    signature = staticmethod(signature)
    helpers = (row_max, shifted_exp, scaled, divide, exp_of_nonpositive)

    def __call__(self, x):
        cols = x.shape[-1]
        y = np.empty(x.shape, dtype=np.float32)
        self._compiled(np.ascontiguousarray(x).reshape(-1, cols), y.reshape(-1, cols))
        return y
