"""A float32 Softmax over the last axis compiled by numba, bound on the CPU EP's namespace as
``xp.compiled_softmax``; numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

Per row: the maximum, then ``exp(x - max)`` by :mod:`ep_host_cpu.sigmoid`'s exponential (range
reduction, a degree-7 polynomial, ``2^k`` from its exponent bits: a form the compiler
vectorizes, where numba's ``expf`` is libm's scalar one), values below float32's smallest normal
number flushed to 0, then each multiplied by the reciprocal of the row's sum. A NaN in a row
makes the row NaN, as numpy's passes do.

The row's sum is kept in ``LANES`` partial sums, added up at the row's end: one running sum
is a chain of dependent additions the compiler may not reorder (no fast-math here), 0.73 ns a
value against 0.33; the sum is then multiplied by once as its reciprocal, not divided by per
value. MobileViT's 4 x 4 x 256 x 256 attention, one thread: 1.92 -> 1.28 ms (onnxruntime 0.52);
the values within 4e-7 of onnxruntime's (1e-6 before: the partial sums round less). The
maximum taken over integer keys (:func:`row_max`): the kernel alone on the same shape, on
another machine (AMD Zen 4), 1.21 -> 0.80 ms, the same values to the bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop
from ep_host_cpu.sigmoid import TAIL, exp_of_nonpositive

LANES = 16  # partial sums per row: two vectors of 8 float32


def softmax_rows(x, y):
    """Each row of ``x`` (rows, cols) through softmax into ``y``."""
    rows, cols = x.shape
    bits = np.empty(cols, dtype=np.int32)
    poly = np.empty(cols, dtype=np.float32)
    lanes = np.empty(LANES, dtype=np.float32)
    cell = np.empty(1, dtype=np.int32)
    for r in range(rows):
        top = row_max(x[r], cell)
        shifted_exp(x[r], top, poly, bits)
        total = scaled(poly, bits.view(np.float32), y[r], lanes)
        divide(y[r], total)


def row_max(xr, cell):
    """The row's maximum, or a NaN when the row holds one of positive sign (one of negative
    sign is passed over: it makes the row NaN through the sum all the same). The maximum of
    integer keys that order as the floats do (a negative float's bits with all but the sign
    flipped), which the compiler vectorizes: a running float ``max`` is a chain of dependent
    comparisons (MobileViT's 4,096 rows of 256, one thread: 0.48 against 0.11 ms for this pass;
    partial maxima in a scratch array ran 1.6x slower than one running ``max``). ``cell``: a
    one-value int32 scratch array, to read the key back as a float without an allocation."""
    keys = xr.view(np.int32)
    top = np.int32(-2147483648)
    low = np.int32(0x7FFFFFFF)
    for i in range(keys.size):
        v = keys[i]
        k = v ^ ((v >> np.int32(31)) & low)
        top = k if k > top else top
    cell[0] = top ^ ((top >> np.int32(31)) & low)
    return cell.view(np.float32)[0]


def shifted_exp(xr, top, poly, bits):
    """exp(x - top) as poly * 2^k: ``poly`` the polynomial, ``bits`` the float32 2^k."""
    for i in range(xr.size):
        h = xr[i] - top  # <= 0, or NaN
        below = h < TAIL  # exp(h) under float32's smallest normal number: 0
        if below:  # k kept in range
            h = TAIL
        p, bits[i] = exp_of_nonpositive(h)
        poly[i] = np.float32(0) if below else p


def scaled(poly, scale, yr, lanes):
    """yr = poly * scale, 0 below float32's smallest normal number; returns the sum."""
    n = yr.size
    whole = n - n % LANES
    tiny = np.float32(1.1754944e-38)
    for i in range(n):
        e = poly[i] * scale[i]
        yr[i] = np.float32(0) if e < tiny else e  # a NaN keeps its value
    for j in range(LANES):
        lanes[j] = np.float32(0)
    for i in range(0, whole, LANES):
        for j in range(LANES):
            lanes[j] += yr[i + j]
    total = np.float32(0)
    for j in range(LANES):
        total += lanes[j]
    for i in range(whole, n):
        total += yr[i]
    return total


def divide(yr, total):
    inverse = np.float32(1) / total
    for i in range(yr.size):
        yr[i] = yr[i] * inverse


def signature(numba: Any) -> list[Any]:
    f32 = numba.types.float32
    return [numba.types.void(numba.types.Array(f32, 2, "C", readonly=True),
                             numba.types.Array(f32, 2, "C"))]


class CompiledSoftmax(CompiledLoop):
    """``xp.compiled_softmax``: :meth:`ready` says whether the compiled loop is used (numba
    installed and wanted; compiled, or read from numba's disk cache, the first time it says
    yes); calling it computes the softmax of a float32 array over its last axis."""

    # values below which the loop is used only where it is at hand (``at_hand``: no build):
    # numpy's five passes cost an MLP's 7 x 3 probabilities 54 -> 47 us a run (interleaved)
    MIN_SIZE = 4096

    function = staticmethod(softmax_rows)
    signature = staticmethod(signature)
    helpers = (row_max, shifted_exp, scaled, divide, exp_of_nonpositive)

    def __call__(self, x):
        cols = x.shape[-1]
        y = np.empty(x.shape, dtype=np.float32)
        self._compiled(np.ascontiguousarray(x).reshape(-1, cols), y.reshape(-1, cols))
        return y
