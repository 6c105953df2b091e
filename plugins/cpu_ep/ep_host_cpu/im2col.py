"""im2col's columns of a 2-D convolution with a column stride of 2, copied by a loop compiled by
numba and bound on the CPU EP's namespace as ``xp.im2col_columns`` for the library's Conv (which
pads and copies by numpy otherwise, and with ``EP_HOST_NUMBA=0``).

numpy copies a stride-2 window view element by element, after a padded copy of the input; here
each input row is split into its even and odd columns in one vectorized pass and every kernel
tap's run of a column row is a contiguous copy from one of them, zeros where the window is in
the padding. Measured one thread against numpy's pad and copy: the first conv of the mobile
nets (3 x 224 x 224, 3x3, stride 2) 0.10 against 0.18 ms, 32 x 224 x 224 1.2 against 2.0 ms,
16 x 112 x 112 0.22 against 0.24 ms; slower on rows shorter than 56 outputs (128 x 28 x 28: 0.30
against 0.18 ms), which keep numpy's copy (:data:`ep_host.kernels.conv.COMPILED_COLUMNS_MIN_WIDTH`).

Like :mod:`ep_host_cpu.conv_epilogue` it is used only once another compiled kernel is in use
(its saving does not pay for a first kernel's build or numba's memory), and its columns equal
numpy's bit for bit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import LoopOnceCompiledInUse


def columns2d(x, cols, kh, kw, sh, sw, dh, dw, pt, pl):
    """cols[b, c, i, k, r, j] = x[b, c, r * sh + i * dh - pt, j * sw + k * dw - pl], 0 where
    that is outside x; x (n, C, H, W), cols (n, C, kh, kw, oh, ow), both C-contiguous."""
    n, c, h, width = x.shape
    oh, ow = cols.shape[4], cols.shape[5]
    half = (width + 1) // 2
    even = np.empty(half, dtype=x.dtype)
    odd = np.empty(half, dtype=x.dtype)
    pairs = width // 2
    for b in range(n):
        for ci in range(c):
            for i in range(kh):
                for r in range(oh):
                    ih = r * sh + i * dh - pt
                    if ih < 0 or ih >= h:  # a row of padding
                        for k in range(kw):
                            dst = cols[b, ci, i, k, r]
                            for j in range(ow):
                                dst[j] = 0
                        continue
                    src = x[b, ci, ih]
                    if sw == 2:  # the row's even and odd columns, one pass
                        e = even[:pairs]  # bounded slices: the pass is vectorized
                        o = odd[:pairs]
                        for t in range(pairs):
                            e[t] = src[2 * t]
                            o[t] = src[2 * t + 1]
                        if width % 2:
                            even[pairs] = src[width - 1]
                    for k in range(kw):
                        off = k * dw - pl
                        dst = cols[b, ci, i, k, r]
                        # the outputs j whose input column j * sw + off is inside the row
                        j0 = 0 if off >= 0 else min((sw - 1 - off) // sw, ow)
                        last = width - 1 - off
                        j1 = max(j0, 0 if last < 0 else min(last // sw + 1, ow))
                        for j in range(j0):
                            dst[j] = 0
                        for j in range(j1, ow):
                            dst[j] = 0
                        count = j1 - j0
                        out = dst[j0:j1]
                        if sw == 1:
                            seg = src[j0 + off:j0 + off + count]
                        elif sw == 2:
                            q = 2 * j0 + off  # the first input column read
                            seg = (even if q % 2 == 0 else odd)[q // 2:q // 2 + count]
                        else:
                            for t in range(count):
                                out[t] = src[(j0 + t) * sw + off]
                            continue
                        for t in range(count):
                            out[t] = seg[t]


def signature(numba: Any) -> list[Any]:
    types = numba.types
    index = types.int64
    return [types.void(types.Array(types.float32, 4, "C", readonly=True),
                       types.Array(types.float32, 6, "C"), index, index, index, index, index,
                       index, index, index)]


class ImageColumns(LoopOnceCompiledInUse):
    """``xp.im2col_columns``: :meth:`ready` says whether the compiled copy is used for a dtype
    (float32, numba installed and wanted, another compiled kernel already in use; built or
    compiled the first time it says yes); calling it fills ``cols``."""

    function = staticmethod(columns2d)
    signature = staticmethod(signature)

    def __call__(self, x, cols, kernel, strides, dilations, begin):
        """Fill ``cols`` (n, C, kh, kw, oh, ow) from ``x`` (n, C, H, W), both float32 and
        C-contiguous; ``begin``: the top and left padding (the rest is read as zeros)."""
        (kh, kw), (sh, sw), (dh, dw), (pt, pl) = kernel, strides, dilations, begin
        self._compiled(x, cols, kh, kw, sh, sw, dh, dw, pt, pl)
        return cols
