"""A float32 logistic sigmoid compiled by numba, bound on the CPU EP's namespace as
``xp.compiled_sigmoid`` for the library's Sigmoid on large float32 tensors, and for SiLU
(``x * sigmoid(x)``, EfficientNet's activation, fused to ``com.microsoft::QuickGelu`` with
alpha 1) in the same pass; numpy's exp-based passes otherwise, and with ``EP_HOST_NUMBA=0``.

numba calls libm's scalar ``expf`` (3.7 ns an element here, against numpy's vectorized exp at
1.3 ns), so the exponential is written out in a form the compiler vectorizes:
``exp(-|x|) = exp(h)^2`` with ``h = -|x| / 2`` clamped to [TAIL / 2, 0], ``exp(h) = 2^k *
p(r)``, ``k`` the nearest integer to ``h / ln 2``, ``r = h - k ln
2`` (ln 2 in two parts) and ``p`` the Taylor polynomial of degree 7 (its error below 3e-8 on
|r| <= ln 2 / 2); ``2^k`` is built from its exponent bits in a scratch buffer. Then
``sigmoid(x) = 1 / (1 + e)`` for x >= 0 and ``e / (1 + e)`` below. Below ``TAIL`` (-87.34)
the result, smaller than float32's smallest normal number, is 0, as under flush-to-zero:
computing with subnormal numbers ran 7x slower (random-weight exports are full of large
activations), and the error is below 1.2e-38. Measured on 2,000,001 values in [-110, 110]
against float64: at most 2.9e-7 relative error (about 2.5 float32 ulps) elsewhere; NaN stays
NaN, +-inf give 1 and 0. 1.2M values: 0.68 ms (2.6 ms before numpy's division rules, see
:mod:`ep_host_cpu.jit`), against 8.6 ms for numpy's passes and 0.5 ms
for onnxruntime's.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop

CHUNK = 2048  # elements per pass: the scratch buffers stay in the L1 cache
LOG2E = np.float32(1.4426950408889634)
LN2_HIGH = np.float32(0.693145751953125)  # ln 2 = LN2_HIGH + LN2_LOW, the first exact in float32
LN2_LOW = np.float32(1.428606765330187e-06)
TAYLOR = tuple(np.float32(1 / f) for f in (5040, 720, 120, 24, 6, 2))
TAIL = np.float32(-87.33654)  # log of float32's smallest normal number, 1.1754944e-38
HALF_TAIL = np.float32(-43.66827)


def sigmoid_float32(x, y, times_x):
    """y = 1 / (1 + exp(-x)) elementwise (see the module's docstring), times x when
    ``times_x`` (the float32 sigmoid, then the product rounded, as Sigmoid then Mul compute it);
    x and y flat float32. Two loops over each chunk, each compiled on its own (1.2M values:
    0.56 against 0.74 ns a value as one function)."""
    bits = np.empty(CHUNK, dtype=np.int32)
    poly = np.empty(CHUNK, dtype=np.float32)
    size = x.size
    for start in range(0, size, CHUNK):
        m = min(CHUNK, size - start)
        xs = x[start:start + m]
        exp_parts(xs, poly[:m], bits[:m])
        sigmoid_of_parts(xs, poly[:m], bits[:m].view(np.float32), times_x)
        copy(poly[:m], y[start:start + m])


def exp_of_nonpositive(h):
    """exp(h) for h in [TAIL, 0] (or NaN) as (p, bits): the polynomial and the int32 bits of
    the float32 2^k it is to be multiplied by. Shared by the compiled loops that take an
    exponential (listed among their helpers)."""
    k = np.int32(h * LOG2E - np.float32(0.5))  # h <= 0: truncation rounds to nearest
    n = np.float32(k)
    r = h - n * LN2_HIGH - n * LN2_LOW
    p = TAYLOR[0]
    p = p * r + TAYLOR[1]
    p = p * r + TAYLOR[2]
    p = p * r + TAYLOR[3]
    p = p * r + TAYLOR[4]
    p = p * r + TAYLOR[5]
    p = p * r + np.float32(1)
    p = p * r + np.float32(1)
    return p, (k + np.int32(127)) << np.int32(23)  # 2^k, k in [-126, 0]


def exp_parts(x, poly, bits):
    """exp(-|x| / 2) as poly * 2^k: ``poly`` the polynomial, ``bits`` the float32 2^k."""
    for i in range(x.size):
        h = np.float32(-0.5) * abs(x[i])
        if h < HALF_TAIL:  # also -inf; a NaN passes
            h = HALF_TAIL
        poly[i], bits[i] = exp_of_nonpositive(h)


def sigmoid_of_parts(x, poly, scale, times_x):
    """sigmoid(x) (times x) from :func:`exp_parts`'s ``poly`` and ``scale`` (its bits), into
    ``poly``: the loop reads and writes the same array, so the compiler's vector loop runs
    even when the caller's ``y`` is ``x`` (an in-place Sigmoid). Written into ``y`` directly,
    an overlap check chose the scalar loop there: 2.5x as slow (EfficientNet's SiLU after
    its depthwise convolutions, 94,080 values: 155 against 62 us)."""
    one = np.float32(1)
    for i in range(x.size):
        s = poly[i] * scale[i]
        e = s * s
        v = x[i]
        value = (e if v < 0 else one) / (one + e)
        if v < TAIL:  # a NaN keeps its value
            value = np.float32(0)
        if times_x:
            value = value * v
        poly[i] = value


def copy(src, dst):
    for i in range(src.size):
        dst[i] = src[i]


def signature(numba: Any) -> list[Any]:
    array = numba.types.Array(numba.types.float32, 1, "C")
    return [numba.types.void(numba.types.Array(numba.types.float32, 1, "C", readonly=True),
                             array, numba.types.boolean)]


class CompiledSigmoid(CompiledLoop):
    """``xp.compiled_sigmoid``: :meth:`ready` says whether the compiled loop is used (numba
    installed and wanted; compiled, or read from numba's disk cache, the first time it says
    yes); calling it computes a float32 array's sigmoid (``x * sigmoid(x)`` with ``times_x``)
    into ``out`` or a new array."""

    MIN_SIZE = 16384  # below, used only where it is at hand (``at_hand``: nothing built)

    function = staticmethod(sigmoid_float32)
    signature = staticmethod(signature)
    helpers = (exp_parts, sigmoid_of_parts, copy, exp_of_nonpositive)

    def __call__(self, x, out=None, times_x=False):
        flat = np.ascontiguousarray(x).reshape(-1)
        y = np.empty(x.shape, dtype=np.float32) if out is None or not out.flags.c_contiguous \
            else out
        self._compiled(flat, y.reshape(-1), times_x)
        return y
