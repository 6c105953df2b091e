"""GlobalAveragePool's means of short float32 planes compiled by numba, bound on the CPU EP's
namespace as ``xp.compiled_plane_means`` for the library's kernel; ``numpy.mean`` otherwise, and
with ``EP_HOST_NUMBA=0``.

The values equal ``numpy.mean``'s to the bit: the same summation in float32 as numpy's pairwise
sum takes a run of up to 128 values (eight interleaved partial sums; fewer than eight values
added one by one), then the sum divided by the count in float64 and rounded to float32, as numpy
divides a float32 sum by its integer count. Equal means matter: a GEMV against a ones vector
ran faster but rounded otherwise, and turned onnx's light SqueezeNet (a Softmax over means near
1e10) into another answer.

numpy pays a reduction's set-up per row: measured one thread, the squeeze-excite means of
MobileNetV3 and EfficientNet on 7 x 7 planes, 576 of them 20 us against 9-11 us compiled, 960
35 against 19 us; on 14 x 14 numpy was as fast or faster (240 planes 19 against 22 us), so only
planes of up to :data:`MAX_PLANE` values (one block of numpy's sum) are asked here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import LoopOnceCompiledInUse

# values a plane at most: numpy's pairwise block, summed in eight partial sums (longer runs it
# splits, and they go to numpy.mean)
MAX_PLANE = 128


def plane_means(x, y):
    """y[p] = the mean of x[p] (planes, n values, n <= :data:`MAX_PLANE`) as ``numpy.mean``
    computes it: numpy's one block of a pairwise sum (fewer than 8 values added one by one,
    else eight interleaved partial sums, combined in pairs, then the values past the last whole
    eight), added to 0 (numpy's identity: a sum of -0.0 is +0.0), then divided in float64."""
    planes, n = x.shape
    count = np.float64(n)
    zero = np.float32(0)
    whole = n - n % 8
    for p in range(planes):
        a = x[p]
        if n < 8:
            total = zero
            for i in range(n):
                total += a[i]
        else:
            r0 = a[0]
            r1 = a[1]
            r2 = a[2]
            r3 = a[3]
            r4 = a[4]
            r5 = a[5]
            r6 = a[6]
            r7 = a[7]
            for i in range(8, whole, 8):
                r0 += a[i]
                r1 += a[i + 1]
                r2 += a[i + 2]
                r3 += a[i + 3]
                r4 += a[i + 4]
                r5 += a[i + 5]
                r6 += a[i + 6]
                r7 += a[i + 7]
            total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
            for i in range(whole, n):
                total += a[i]
        y[p] = np.float32(np.float64(zero + total) / count)


def signature(numba: Any) -> list[Any]:
    f32 = numba.types.float32
    return [numba.types.void(numba.types.Array(f32, 2, "C", readonly=True),
                             numba.types.Array(f32, 1, "C"))]


class CompiledPlaneMeans(LoopOnceCompiledInUse):
    """``xp.compiled_plane_means``: :meth:`takes` says whether a GlobalAveragePool input goes to
    the compiled loop (float32, C-contiguous, planes of 1 to :data:`MAX_PLANE` values, a
    compiled kernel already in use); calling it returns the means, shaped (N, C, 1, ...)."""

    function = staticmethod(plane_means)
    signature = staticmethod(signature)

    def takes(self, x) -> bool:
        plane = x.size // max(x.shape[0] * x.shape[1], 1)
        return (x.dtype == np.float32 and 0 < plane <= MAX_PLANE and x.flags.c_contiguous
                and self.ready())

    def __call__(self, x):
        n, c = x.shape[:2]
        y = np.empty((n, c) + (1,) * (x.ndim - 2), dtype=np.float32)
        self._compiled(x.reshape(n * c, -1), y.reshape(n * c))
        return y
