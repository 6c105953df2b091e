"""FastGelu of float32 (com.microsoft, the tanh form of Gelu: ``0.5 w (1 + tanh(z))``, ``z = w
(A + B w^2)``, ``w`` the input plus the optional bias) in one pass compiled by numba, bound on
the CPU EP's namespace as ``xp.fast_gelu_float32``; the library's numpy passes otherwise, and
with ``EP_HOST_NUMBA=0``.

``1 + tanh(z) = 2 sigmoid(2z)``, so the pass computes ``w sigmoid(2z)`` with the sigmoid of
:mod:`ep_host_cpu.sigmoid` (its exponential written out so the loop vectorizes: numba calls
libm's scalar ``tanhf`` and ``expf``), ``z`` in float32 as the numpy passes compute it. The
numpy passes form ``1 + tanh(z)``, which cancels for w below about -3 (w = -5: 35% off, in a
value near -2e-7); this form keeps its relative accuracy there. Below ``2z = TAIL`` the
sigmoid is 0, as in :mod:`ep_host_cpu.sigmoid`, and the result -0.0. NaN stays NaN, +inf gives
+inf, -inf NaN (0 times -inf, as the numpy passes give). Measured against float64 over 2M
values in [-12, 12] (tests/test_compiled_fast_gelu.py): within 4e-7 relative plus 2e-7 per
unit of |2z|, the rounding of z to float32 the numpy passes and onnxruntime share (w = -10:
1.2e-5). One thread, GPT-2's 12 FastGelus (128 x 3072 values each): 8.5 -> 5.4 ms a run
(onnxruntime 3.0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host.kernels.contrib import TANH_GELU_A, TANH_GELU_B
from ep_host_cpu.jit import CompiledLoop
from ep_host_cpu.sigmoid import CHUNK, HALF_TAIL, TAIL, copy, exp_of_nonpositive

A, B = np.float32(TANH_GELU_A), np.float32(TANH_GELU_B)  # the library's, in float32


def fast_gelu_float32(x, bias, y):
    """y = FastGelu(x + bias) of the flat float32 ``x`` and ``y``, a row of ``bias.size``
    values at a time (an empty ``bias``: none, the whole array one row), a chunk of the row at a
    time through two loops, each compiled on its own."""
    w = np.empty(CHUNK, dtype=np.float32)
    twice = np.empty(CHUNK, dtype=np.float32)
    poly = np.empty(CHUNK, dtype=np.float32)
    bits = np.empty(CHUNK, dtype=np.int32)
    width = bias.size if bias.size else x.size
    for row in range(0, x.size, max(width, 1)):
        for start in range(0, width, CHUNK):
            m = min(CHUNK, width - start)
            at = row + start
            gelu_parts(x[at:at + m], bias[start:start + m] if bias.size else bias, w[:m],
                       twice[:m], poly[:m], bits[:m])
            gelu_of_parts(w[:m], twice[:m], poly[:m], bits[:m].view(np.float32))
            copy(poly[:m], y[at:at + m])


def gelu_parts(x, bias, w, twice, poly, bits):
    """w = x + bias (x alone for an empty bias), twice = 2z, and exp(-|z|) as poly * 2^k
    (``bits`` the float32 2^k)."""
    biased = bias.size > 0
    for i in range(x.size):
        v = x[i] + bias[i] if biased else x[i]
        w[i] = v
        z = v * (A + B * v * v)
        twice[i] = np.float32(2) * z
        h = -abs(z)
        if h < HALF_TAIL:  # also -inf; a NaN passes
            h = HALF_TAIL
        poly[i], bits[i] = exp_of_nonpositive(h)


def gelu_of_parts(w, twice, poly, scale):
    """w sigmoid(2z) from :func:`gelu_parts`'s arrays, into ``poly`` (one array read and
    written: see :func:`ep_host_cpu.sigmoid.sigmoid_of_parts`)."""
    one = np.float32(1)
    for i in range(w.size):
        s = poly[i] * scale[i]
        e = s * s  # exp(-|2z|)
        t = twice[i]
        value = (e if t < 0 else one) / (one + e)
        if t < TAIL:  # a NaN keeps its value
            value = np.float32(0)
        poly[i] = value * w[i]


def signature(numba: Any) -> list[Any]:
    array = numba.types.Array(numba.types.float32, 1, "C")
    readonly = numba.types.Array(numba.types.float32, 1, "C", readonly=True)
    return [numba.types.void(readonly, readonly, array)]


class CompiledFastGelu(CompiledLoop):
    """``xp.fast_gelu_float32``: :meth:`takes` says whether a FastGelu's inputs go to the
    compiled pass (float32, at least ``MIN_SIZE`` values, a bias of the last axis' length or
    none; compiled, or read from numba's disk cache, the first time it says yes); calling it
    returns a new array."""

    MIN_SIZE = 16384  # below, numpy's passes cost about the same and nothing is compiled

    function = staticmethod(fast_gelu_float32)
    signature = staticmethod(signature)
    helpers = (gelu_parts, gelu_of_parts, copy, exp_of_nonpositive)

    def takes(self, x, bias) -> bool:
        return (x.dtype == np.float32 and x.size >= self.MIN_SIZE and x.ndim >= 1
                and (bias is None or (bias.dtype == np.float32 and bias.ndim == 1
                                      and bias.size == x.shape[-1] and bias.size > 0))
                and self.ready())

    def __call__(self, x, bias=None):
        flat = np.ascontiguousarray(x).reshape(-1)
        b = np.empty(0, np.float32) if bias is None else np.ascontiguousarray(bias)
        y = np.empty(x.shape, dtype=np.float32)
        self._compiled(flat, b, y.reshape(-1))
        return y
