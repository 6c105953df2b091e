"""Winograd F(2x2, 3x3)'s input and output transforms compiled by numba, bound on the CPU EP's
namespace as ``xp.winograd_transforms`` for the library's Conv (``ep_host.kernels.conv``'s
``winograd`` variant); numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

Both transforms are sums and differences of the tiles' values with weights 0 and +-1, so each
output is a few additions whose order decides its rounding; the loops add in numpy's order
(rows first, then columns) and give its values to the bit. Each pass is one output row of
tiles: its inputs are contiguous runs of the channels-last buffers (the padded input split by
column parity, the products by tile), so that every loop is one store stream and a few load
streams over a long run, which the compiler vectorizes (sixteen stores per loop body were left
scalar and ran slower than numpy's passes).

Measured one thread, the input transform alone against numpy's passes: 64 channels at 56 x
56 0.79 -> 0.19 ms, 128 at 28 x 28 0.28 -> 0.09 ms, 256 at 14 x 14 0.17 -> 0.04 ms, 512 at 7 x 7
0.08 -> 0.02 ms.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import compiled, numba_wanted

# B^T's rows (input transform): output a = d[FIRST[a]] + SIGN[a] * d[SECOND[a]]
FIRST = np.array([0, 1, 2, 1], dtype=np.int64)
SECOND = np.array([2, 2, 1, 3], dtype=np.int64)
SIGN = np.array([-1.0, 1.0, -1.0, -1.0], dtype=np.float32)


def combine4(out, a, b, c, d, s, t):
    """out = (a + s * b) + t * (c + s * d), s and t +-1: products that are exact, so each
    multiply-add rounds as the plain add or subtract does."""
    for k in range(out.size):
        out[k] = (a[k] + s * b[k]) + t * (c[k] + s * d[k])


def combine3(out, a, b, c, s):
    """out = (a + s * b) + s * c, s +-1 (see :func:`combine4`)."""
    for k in range(out.size):
        out[k] = (a[k] + s * b[k]) + s * c[k]


def winograd_input(pad, v, first, second, sign):
    """v[4a + q, tile] = B^T d B of each tile d (4 x 4 x C): the padded input ``pad`` (n,
    rows, 2, tw + 1, C) split by column parity (column 2j + p at [.., p, j, :]), ``v`` (16,
    n * th * tw, C); rows transformed first, then columns, as numpy's passes."""
    n, rows, _, span, c = pad.shape
    th, tw = (rows - 2) // 2, span - 1
    run = tw * c
    flat_v = v.reshape(16, v.shape[1] * c)
    for b in range(n):
        for i in range(th):
            at = (b * th + i) * run
            for a in range(4):
                upper = pad[b, 2 * i + first[a]].reshape(2 * span * c)
                lower = pad[b, 2 * i + second[a]].reshape(2 * span * c)
                for q in range(4):
                    one = (first[q] % 2 * span + first[q] // 2) * c
                    two = (second[q] % 2 * span + second[q] // 2) * c
                    combine4(flat_v[4 * a + q, at:at + run], upper[one:one + run],
                             lower[one:one + run], upper[two:two + run], lower[two:two + run],
                             sign[a], sign[q])


def winograd_output(prod, tiles):
    """The output tiles of A^T m A: ``prod`` (16, n * th * tw, M), the products of each tile
    (row a, column q at 4a + q), into ``tiles`` (n, th, 2, 2, tw, M): output row p, column r of
    tile (i, j) at [b, i, p, r, j, :]. Rows first, (m0 + m1) + m2 and (m1 - m2) - m3, then the
    same over columns, as numpy's passes."""
    n, th, _, _, tw, m = tiles.shape
    run = tw * m
    flat = prod.reshape(16, prod.shape[1] * m)
    sums = np.empty((4, run), dtype=prod.dtype)  # one output row's row sums, by column q
    plus, minus = np.float32(1.0), np.float32(-1.0)
    for b in range(n):
        for i in range(th):
            at = (b * th + i) * run
            for p in range(2):  # rows p, p + 1, p + 2 of the products
                s = plus if p == 0 else minus
                for q in range(4):
                    combine3(sums[q], flat[4 * p + q, at:at + run],
                             flat[4 * p + 4 + q, at:at + run], flat[4 * p + 8 + q, at:at + run],
                             s)
                row = tiles[b, i, p]
                combine3(row[0].reshape(run), sums[0], sums[1], sums[2], plus)
                combine3(row[1].reshape(run), sums[1], sums[2], sums[3], minus)


def _signatures(numba: Any) -> tuple[Any, Any]:
    types = numba.types
    f32 = types.float32

    def array(ndim, readonly=False):
        return types.Array(f32, ndim, "C", readonly=readonly)

    index = types.Array(types.int64, 1, "C", readonly=True)
    return (types.void(array(5, True), array(3), index, index, types.Array(f32, 1, "C",
                                                                           readonly=True)),
            types.void(array(3, True), array(6)))


def input_signature(numba: Any) -> Any:
    return _signatures(numba)[0]


def output_signature(numba: Any) -> Any:
    return _signatures(numba)[1]


class WinogradTransforms:
    """``xp.winograd_transforms``: :meth:`ready` says whether the compiled transforms are used
    for a dtype (numba installed and wanted, float32; compiled, or read from numba's disk
    cache, the first time it says yes); :meth:`input` and :meth:`output` run them on the
    buffers of the library's Winograd variant."""

    def __init__(self) -> None:
        self._loops: Any = None  # (input, output), or False where either cannot be compiled

    def ready(self, dtype: Any) -> bool:
        if np.dtype(dtype) != np.float32 or not numba_wanted():
            return False
        if self._loops is None:
            first = compiled(winograd_input, input_signature, (combine4,))
            second = compiled(winograd_output, output_signature, (combine3,))
            self._loops = (first, second) if first and second else False
        return bool(self._loops)

    def input(self, pad, v):
        """``v`` (16, tiles, C) from ``pad`` (n, rows, 2, tw + 1, C); call after :meth:`ready`
        said yes."""
        self._loops[0](pad, v, FIRST, SECOND, SIGN)

    def output(self, prod, tiles):
        """``tiles`` (n, th, 2, 2, tw, M) from ``prod`` (16, tiles, M)."""
        self._loops[1](prod, tiles)
