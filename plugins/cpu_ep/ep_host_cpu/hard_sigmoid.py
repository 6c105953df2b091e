"""HardSigmoid and HardSwish on float32 in one pass compiled by numba, bound on the CPU EP's
namespace as ``xp.compiled_hard_sigmoid`` for the library's kernels (MobileNetV3's activations);
numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

numpy needs four passes and as many temporaries (a scale, a shift, a clip, and HardSwish's
product); measured one thread on 1 x 16 x 112 x 112: 129 us against 31 us compiled. Into the
input's own buffer when the executor donates it (a loop that reads and writes one array: with
two arrays that are one, the compiler's overlap check picks its scalar loop).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop


def hard_sigmoid_float32(x, y, alpha, beta, times_x, in_place):
    """y = max(0, min(1, alpha * x + beta)), times x when ``times_x`` (HardSwish); a NaN stays
    NaN; x and y flat float32. ``in_place``: ``y`` is ``x`` (and ``x`` is not read)."""
    if in_place:
        hard_sigmoid_in_place(y, alpha, beta, times_x)
    else:
        hard_sigmoid_into(x, y, alpha, beta, times_x)


def hard_sigmoid_in_place(y, alpha, beta, times_x):
    zero = np.float32(0)
    one = np.float32(1)
    for i in range(y.size):
        v = y[i]
        s = alpha * v + beta
        s = zero if s < zero else s
        s = one if s > one else s
        if times_x:
            s = s * v
        y[i] = s


def hard_sigmoid_into(x, y, alpha, beta, times_x):
    zero = np.float32(0)
    one = np.float32(1)
    for i in range(x.size):
        v = x[i]
        s = alpha * v + beta
        s = zero if s < zero else s  # comparisons with a NaN are false: it passes
        s = one if s > one else s
        if times_x:
            s = s * v
        y[i] = s


def signature(numba: Any) -> list[Any]:
    types = numba.types
    return [types.void(types.Array(types.float32, 1, "C", readonly=True),
                       types.Array(types.float32, 1, "C"), types.float32, types.float32,
                       types.boolean, types.boolean)]


class CompiledHardSigmoid(CompiledLoop):
    """``xp.compiled_hard_sigmoid``: :meth:`ready` says whether the compiled loop is used (numba
    installed and wanted; compiled, or read from numba's disk cache, the first time it says
    yes); calling it computes a float32 array's HardSigmoid (HardSwish with ``times_x``) into
    ``out`` (a C-contiguous float32 array of ``x``'s shape, ``x`` itself included) or a new
    array."""

    function = staticmethod(hard_sigmoid_float32)
    signature = staticmethod(signature)
    helpers = (hard_sigmoid_in_place, hard_sigmoid_into)

    def __call__(self, x, alpha, beta, times_x=False, out=None):
        flat = np.ascontiguousarray(x).reshape(-1)
        same = out is not None and out.flags.c_contiguous and (
            out is x or out.ctypes.data == flat.ctypes.data)  # ctypes: 1.4 us a call
        if not same and (out is None or not out.flags.c_contiguous
                         or np.may_share_memory(out, flat)):
            out = np.empty(x.shape, dtype=np.float32)
        self._compiled(flat, out.reshape(-1), np.float32(alpha), np.float32(beta), times_x, same)
        return out
