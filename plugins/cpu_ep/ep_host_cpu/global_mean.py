"""GlobalAveragePool's means of float32 planes compiled by numba, bound on the CPU EP's namespace
as ``xp.compiled_plane_means`` for the library's kernel; ``numpy.mean`` otherwise, and with
``EP_HOST_NUMBA=0``.

Planes of up to :data:`MAX_PLANE` values get ``numpy.mean``'s values to the bit: the same
summation in float32 as numpy's pairwise sum takes a run of up to 128 values (eight interleaved
partial sums; fewer than eight values added one by one), then the sum divided by the count in
float64 and rounded to float32, as numpy divides a float32 sum by its integer count. numpy pays
a reduction's set-up per row: measured one thread, the squeeze-excite means of MobileNetV3 and
EfficientNet on 7 x 7 planes, 576 of them 20 us against 9-11 us compiled, 960 35 against 19 us.

Longer planes are summed in :data:`LANES` interleaved partial sums (a loop LLVM vectorizes;
numpy's eight make one vector whose adds wait on each other), combined in halves, then the
values past the last whole run; not numpy's order, so not its last bits. Measured one thread
against ``numpy.mean``: 96 planes of 56 x 56 55 -> 25 us, 32 of 112 x 112 72 -> 31 us, 240 of 28
x 28 45 -> 18 us, 672 of 14 x 14 37 -> 23 us; 16 or 32 partial sums were not vectorized (1.5x
numpy's time), 128 lost on 14 x 14. Every plane is summed in the same order, so that equal
planes get equal means: onnx's light SqueezeNet (constant weights) ends in a Softmax over 1000
means near 1e10, where float32 values are 1024 apart, and its shipped output (all 1e-3) needs
every one of them equal (a GEMV against a ones vector, which treats the channels unevenly,
turned it into another answer).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import LoopOnceCompiledInUse

# values a plane at most for numpy's order: numpy's pairwise block, summed in eight partial sums
MAX_PLANE = 128
LANES = 64  # partial sums of a longer plane


def plane_means(x, y):
    """y[p] = the mean of x[p] (planes, n values): for n <= :data:`MAX_PLANE` as ``numpy.mean``
    computes it, numpy's one block of a pairwise sum (fewer than 8 values added one by one,
    else eight interleaved partial sums, combined in pairs, then the values past the last whole
    eight), added to 0 (numpy's identity: a sum of -0.0 is +0.0), then divided in float64;
    longer planes in :data:`LANES` partial sums (see the module's docstring)."""
    planes, n = x.shape
    count = np.float64(n)
    zero = np.float32(0)
    if n > MAX_PLANE:
        whole = n - n % LANES
        acc = np.empty(LANES, dtype=np.float32)
        for p in range(planes):
            a = x[p]
            for j in range(LANES):
                acc[j] = zero
            for i in range(0, whole, LANES):
                run = a[i:i + LANES]
                for j in range(LANES):
                    acc[j] += run[j]
            half = LANES
            while half > 1:
                half //= 2
                for j in range(half):
                    acc[j] += acc[j + half]
            total = acc[0]
            for i in range(whole, n):
                total += a[i]
            y[p] = np.float32(np.float64(total) / count)
        return
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
    the compiled loop (float32, C-contiguous, planes of at least one value, a compiled kernel
    already in use); calling it returns the means, shaped (N, C, 1, ...)."""

    function = staticmethod(plane_means)
    signature = staticmethod(signature)

    def takes(self, x) -> bool:
        plane = x.size // max(x.shape[0] * x.shape[1], 1)
        return (x.dtype == np.float32 and plane > 0 and x.flags.c_contiguous
                and self.ready())

    def __call__(self, x):
        n, c = x.shape[:2]
        y = np.empty((n, c) + (1,) * (x.ndim - 2), dtype=np.float32)
        self._compiled(x.reshape(n * c, -1), y.reshape(n * c))
        return y
