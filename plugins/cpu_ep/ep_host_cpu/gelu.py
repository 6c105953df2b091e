"""The erf Gelu of float32, ``0.5 x (1 + erf(x / sqrt 2))``, bound on the CPU EP's namespace as
``xp.gelu_float32``: one pass compiled by numba on large arrays, :func:`ep_host_cpu.erf.
gelu_float32`'s numpy passes on small ones, and with ``EP_HOST_NUMBA=0`` or without numba.

The compiled pass computes in float64 and rounds once: ``gelu(x) = x Phi(x)``, with ``t = |x| /
sqrt 2`` and ``e = Phi(-|x|) = erfc(t) / 2 = u exp(-t^2 + P(u))``, ``u = 1 / (1 + 0.4 t)``, ``P``
a polynomial of degree 10 (a Chebyshev least-squares fit in float64 of ``log(erfcx(t) / (2u))``
on t in [0, 10.5], its error below 2.2e-8), then ``Phi = e`` for x < 0 and ``1 - e`` above. So
x < 0, where ``1 + erf`` cancels, keeps its relative accuracy down to float32's smallest normal
results (x near -13.2). The exponential is written out as in :mod:`ep_host_cpu.sigmoid` (numba
calls libm's scalar ``exp``): ``k`` the nearest integer to ``a / ln 2``, ``r = a - k ln 2`` (ln 2
in two parts), the Taylor polynomial of degree 7 in ``r`` (error below 5e-9), ``2^k`` from its
exponent bits in a scratch buffer. Below x = -14.8 the result, smaller than float32's smallest
subnormal number, is -0.0. NaN stays NaN, +inf gives +inf and -inf -0.0.
Measured against float64 Gelu (``x erfc(-x / sqrt 2) / 2``) where the result is a normal float32:
at most 0.85 float32 ulp (4M values in [-10, 10], 2M in [-15, -9], 4M random bit patterns);
numpy's passes are 33M ulps off there (0 below x = -6.4) and 2.6 ulps above x = -0.5. One thread,
onnxruntime's com.microsoft Gelu interleaved: 3.2M values 10.1 ms (numpy's passes 18.9,
onnxruntime 4.3), 393k values 1.24 ms (2.2, 0.46). Compiling takes 1.4 s, reading it back from
numba's disk cache 0.4 s. A float32 version (the exponential split as two float32s) ran 1.7x
faster but was up to 5.3 ulps off (u's rounding, the polynomial's float32 evaluation).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ep_host_cpu.erf import gelu_float32 as numpy_gelu_float32
from ep_host_cpu.jit import CompiledLoop

CHUNK = 2048  # elements per pass: the scratch buffers stay in the L1 cache
SQRT_HALF = 1 / math.sqrt(2)
T_MAX = 10.5  # t's clamp, the end of P's fit: erfc(10.5) / 2 is 7e-50
NEGATIVE_CUT = -14.8  # below, |gelu| < 1e-44 (the smallest float32 subnormal is 1.4e-45): -0.0
LOG2E = 1.4426950408889634
LN2_HIGH = 0.6931471803691238  # ln 2 = LN2_HIGH + LN2_LOW, the first with 21 trailing zero bits
LN2_LOW = 1.9082149292705877e-10
TAYLOR = tuple(1 / math.factorial(n) for n in range(7, 1, -1))  # 1/7! ... 1/2!
U_SLOPE = 0.4  # u = 1 / (1 + U_SLOPE t)
P = (0.2104157169882432, -1.1920901743681365, 2.731995715723555, -3.2142291319170653,
     2.1831542962597545, -1.1299572350547977, 0.37065872257077886, 0.09929848974848322,
     0.4301930579608179, 0.999187798135472, -2.1817744155369265)  # highest degree first


def gelu_chunks(x, y):
    """y = gelu(x) of the flat float32 ``x`` (see the module's docstring), a chunk at a time
    through two loops, each compiled on its own."""
    scaled = np.empty(CHUNK, dtype=np.float64)
    bits = np.empty(CHUNK, dtype=np.int64)
    size = x.size
    for start in range(0, size, CHUNK):
        m = min(CHUNK, size - start)
        xs = x[start:start + m]
        tail_parts(xs, scaled[:m], bits[:m])
        gelu_of_parts(xs, scaled[:m], bits[:m].view(np.float64), y[start:start + m])


def bias_gelu_rows(x, bias, y):
    """y = gelu(x + bias) of the float32 rows ``x`` (rows, cols), ``bias`` (cols,): each sum
    rounded to float32 first, as an Add then Gelu compute it."""
    chunk = min(CHUNK, x.shape[1])
    biased = np.empty(chunk, dtype=np.float32)
    scaled = np.empty(chunk, dtype=np.float64)
    bits = np.empty(chunk, dtype=np.int64)
    cols = x.shape[1]
    for r in range(x.shape[0]):
        for start in range(0, cols, chunk):
            m = min(chunk, cols - start)
            add_rows(x[r, start:start + m], bias[start:start + m], biased[:m])
            tail_parts(biased[:m], scaled[:m], bits[:m])
            gelu_of_parts(biased[:m], scaled[:m], bits[:m].view(np.float64),
                          y[r, start:start + m])


def add_rows(a, b, out):
    for i in range(a.size):
        out[i] = a[i] + b[i]


def tail_parts(x, scaled, bits):
    """Phi(-|x|) as ``scaled * 2^k``: ``scaled`` is u times the exponential's polynomial,
    ``bits`` the float64 2^k."""
    one = 1.0
    for i in range(x.size):
        t = abs(np.float64(x[i])) * SQRT_HALF
        if t > T_MAX:  # also +-inf; a NaN passes
            t = T_MAX
        u = one / (one + U_SLOPE * t)
        u2 = u * u  # both polynomials by Estrin's scheme: short chains of dependent steps
        u4 = u2 * u2
        p = ((P[9] * u + P[10]) + u2 * (P[7] * u + P[8])
             + u4 * ((P[5] * u + P[6]) + u2 * (P[3] * u + P[4])
                     + u4 * ((P[1] * u + P[2]) + u2 * P[0])))
        a = p - t * t  # in [-111, -ln 2]
        k = np.int32(a * LOG2E - 0.5)  # a < 0: truncation rounds to nearest
        n = np.float64(k)
        r = a - n * LN2_HIGH - n * LN2_LOW
        r2 = r * r
        q = ((r + one) + r2 * (TAYLOR[4] * r + TAYLOR[5])
             + r2 * r2 * ((TAYLOR[2] * r + TAYLOR[3]) + r2 * (TAYLOR[0] * r + TAYLOR[1])))
        scaled[i] = q * u
        bits[i] = (np.int64(k) + np.int64(1023)) << np.int64(52)  # 2^k, k in [-161, 0]


def gelu_of_parts(x, scaled, scale, y):
    """y = x Phi(x) from :func:`tail_parts`'s ``scaled`` and ``scale`` (its bits)."""
    for i in range(x.size):
        v = np.float64(x[i])
        e = scaled[i] * scale[i]
        phi = e if v < 0 else 1.0 - e
        value = v * phi
        if v < NEGATIVE_CUT:
            value = -0.0
        y[i] = np.float32(value)


def signature(numba: Any) -> list[Any]:
    return [numba.types.void(numba.types.Array(numba.types.float32, 1, "C", readonly=True),
                             numba.types.Array(numba.types.float32, 1, "C"))]


def bias_signature(numba: Any) -> list[Any]:
    f32 = numba.types.float32
    return [numba.types.void(numba.types.Array(f32, 2, "C", readonly=True),
                             numba.types.Array(f32, 1, "C", readonly=True),
                             numba.types.Array(f32, 2, "C"))]


class BiasGeluFloat32(CompiledLoop):
    """``xp.bias_gelu_float32``: com.microsoft's BiasGelu of float32, ``gelu(x + bias)`` with a
    bias of x's last dim, into a new array: :func:`bias_gelu_rows` (the same values as the Add
    then :class:`GeluFloat32`'s pass); ``None`` where it does not apply (small, or not ready).
    (1, 128, 3072), one thread, min of 30 on a loaded machine: 0.76 ms against 0.84 for the
    Add then the compiled Gelu (0.68 alone)."""

    MIN_SIZE = 16384

    function = staticmethod(bias_gelu_rows)
    signature = staticmethod(bias_signature)
    helpers = (add_rows, tail_parts, gelu_of_parts)

    def __call__(self, x: np.ndarray, bias: np.ndarray) -> np.ndarray | None:
        cols = x.shape[-1] if x.ndim else 0
        if (x.size < self.MIN_SIZE or not cols or x.dtype != np.float32
                or bias.dtype != np.float32 or bias.shape != (cols,) or not self.ready()):
            return None
        y = np.empty(x.shape, dtype=np.float32)
        self._compiled(np.ascontiguousarray(x).reshape(-1, cols), np.ascontiguousarray(bias),
                       y.reshape(-1, cols))
        return y


class GeluFloat32(CompiledLoop):
    """``xp.gelu_float32``: the erf Gelu of a float32 array, into a new array; compiled (or read
    from numba's disk cache) when the first large one comes, numpy's passes otherwise."""

    MIN_SIZE = 16384  # below, numpy's passes cost about the same and nothing is compiled

    function = staticmethod(gelu_chunks)
    signature = staticmethod(signature)
    helpers = (tail_parts, gelu_of_parts)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.size < self.MIN_SIZE or not self.ready():
            return numpy_gelu_float32(x)
        flat = np.ascontiguousarray(x).reshape(-1)
        y = np.empty(x.shape, dtype=np.float32)
        self._compiled(flat, y.reshape(-1))
        return y
