"""A convolution's bias and fused clamp (Relu, Clip) in one pass over its output, compiled by
numba and bound on the CPU EP's namespace as ``xp.conv_epilogue`` for the library's GEMM
variants of Conv (1x1, im2col, shifted); numpy's passes otherwise, and with
``EP_HOST_NUMBA=0``.

numpy adds the bias in one pass and clamps in another; measured one thread on a 16 -> 96
channel 1x1 Conv at 112 x 112 with ReLU6: the two passes 0.29 ms, the compiled one 0.10 ms.

The pass saves a few percent of a convolution, and a first compiled kernel costs a process
its build (seconds, once per machine) or numba's JIT (about 130 MiB, see :mod:`ep_host_cpu.aot`):
it is used only once another compiled kernel is in use (a depthwise or grouped convolution, a
LayerNormalization), so that a model of plain convolutions runs without it. Its values equal
numpy's passes' (the same float32 add and clamp), so which path ran never shows in a result.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import LoopOnceCompiledInUse


def bias_clamp(y, bias, has_bias, lo, hi, clamp):
    """y[b, o, p] = y[b, o, p] + bias[o] (with ``has_bias``), then min(max(., lo), hi) with
    ``clamp`` (Clip's rule: a NaN stays NaN, all hi where lo > hi); y (n, m, size) float32."""
    n, m, size = y.shape
    for b in range(n):
        for o in range(m):
            row = y[b, o]
            shift = bias[o] if has_bias else np.float32(0)
            if not clamp:
                for p in range(size):
                    row[p] += shift
                continue
            for p in range(size):
                v = row[p] + shift
                v = lo if v < lo else v  # selects, not branches: vectorized
                row[p] = hi if v > hi else v


def signature(numba: Any) -> list[Any]:
    types = numba.types
    return [types.void(types.Array(types.float32, 3, "C"),
                       types.Array(types.float32, 1, "C", readonly=True), types.boolean,
                       types.float32, types.float32, types.boolean)]


NO_BIAS = np.zeros(1, dtype=np.float32)  # read by the loop only with ``has_bias``


class ConvEpilogue(LoopOnceCompiledInUse):
    """``xp.conv_epilogue``: :meth:`ready` says whether the compiled loop is used for a dtype
    (numba installed and wanted, float32; compiled, or read from numba's disk cache, the first
    time it says yes); calling it adds ``bias`` (or nothing) to ``y`` (n, m, ...) in place and
    clamps it to ``clamp`` (lo, hi) when given."""

    function = staticmethod(bias_clamp)
    signature = staticmethod(signature)

    def __call__(self, y, bias, clamp=None):
        n, m = y.shape[:2]
        has_bias = bias is not None
        if not has_bias:
            bias = NO_BIAS
        elif bias.dtype != np.float32 or bias.ndim != 1 or not bias.flags.c_contiguous:
            bias = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
        lo, hi = clamp if clamp is not None else (0.0, 0.0)
        self._compiled(y.reshape(n, m, -1), bias, has_bias, np.float32(lo), np.float32(hi),
                       clamp is not None)
        return y
