"""Depthwise and grouped 2-D convolution as loops compiled by numba, bound on the CPU EP's
namespace as ``xp.grouped_conv2d`` for the library's Conv (which keeps its numpy variants when
numba is absent or switched off, see :mod:`ep_host_cpu.jit`).

Each input channel is copied once into a zero-padded buffer split by stride phase (plane
``(py, px)`` holds the padded input's rows ``py, py + sh, ...`` and columns ``px, px + sw,
...``), so that every kernel tap reads one contiguous run of that buffer at a fixed offset, for
any stride, dilation and padding. An output channel is then a few long multiply-adds over its
flattened output grid (four taps per pass; a 3x3 kernel's nine in one pass on planes of at
least :data:`NINE_TAP_MIN_OUTPUT` pixels), computed on the phase planes' width and cut to the
output's. Measured one thread against onnxruntime's own kernels: 144 channels 56 x 56 3x3 0.34
against 0.31 ms (numpy: 1.6 ms), 96 channels 56 x 56 7x7 0.71 against 0.74 ms (numpy: 11 ms).
With stride 2 the copy costs most (144 channels 56 x 56 3x3: 0.17 of 0.24 ms): one pass writes
both column phases of a row, 1.3-1.9x as fast as a pass per phase (then 0.20 ms in all;
onnxruntime, whose blocked layout needs no copy: 0.07 ms).

On small planes the phase loop's many short passes per channel cost more than their work, so
a depthwise convolution with at most :data:`BLOCK_MAX_OUTPUT` output pixels takes a second loop
(:func:`block_conv2d`) on 16 channels at a time, side by side in one buffer, an output row of
all of them one long pass. Measured one thread, the kernel alone with HardSwish, phase against
block loop: 576 channels 7 x 7 5x5 111 -> 99 us, 288 14 x 14 5x5 stride 2 110 -> 79 us, 576
14 x 14 3x3 stride 2 135 -> 117 us, 960 7 x 7 3x3 126 -> 102 us, 768 7 x 7 7x7 381 -> 293 us;
from 14 x 14 outputs the block loop is slower (240 14 x 14 5x5 108 against 134 us, 144 56 x 56
3x3 315 against 763 us) and the phase loop stays. onnxruntime still runs the small ones 2-2.5x
faster (576 7 x 7 5x5: about 48 us): numba vectorizes a loop over 16 lanes only as part of a
long run (it cannot tell that the arrays do not overlap, and unrolls short loops into scalar
code), so the block loop keeps its sums in memory and moves each value in and out of the
channel-innermost layout one at a time (a third of its time at 7 x 7). For the kernel sizes of
:mod:`ep_host_cpu.lane_conv` (3x3, 5x5, 7x7) the small ones take its lane loops instead, which
keep the sums in registers (see :meth:`GroupedConv2d.geometry`); the block loop stays for
other sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_host_cpu.conv_epilogue import activate, activation_mode
from ep_host_cpu.jit import compiled, numba_wanted
from ep_host_cpu.lane_conv import LANE_KERNELS, lane_loop, lane_signature

VECTOR = 8  # float32 lanes of an AVX2 register: each pass computes whole multiples of it
BLOCK = 16  # channels side by side in :func:`block_conv2d`'s buffer
# Output planes of up to this many pixels take :func:`block_conv2d` (depthwise only): measured
# one thread, 7 x 7 outputs ran 1.2-2.5x faster on it, 14 x 14 ones 1.2-2x slower
BLOCK_MAX_OUTPUT = 64
# Output planes of at least this many pixels take a 3x3 kernel's nine taps in one pass over the
# first input channel (no pass setting the bias first, none adding the ninth tap alone):
# measured one thread, depthwise, the loop alone, against passes of four taps: 32 x 112 x 112
# 251-255 -> 198-200 us, 144 x 56 x 56 261-272 -> 235-239 us, 192 x 28 x 28 114-118 -> 103-107
# us; 14 x 14 planes ran slower (384 channels 80-84 against 85-88 us)
NINE_TAP_MIN_OUTPUT = 28 * 28


def _leading_types(numba: Any, dtype: Any) -> tuple[Any, ...]:
    """The types both loops start with at ``dtype`` (float32 or float64, or its name): x, w and
    bias read-only (a writable array passes too), y written, two int64 index arrays, all
    C-contiguous; then the value type itself."""
    types = numba.types
    t = numba.from_dtype(np.dtype(dtype))

    def array(ndim, item=t, readonly=True):
        return types.Array(item, ndim, "C", readonly=readonly)

    index = array(1, types.int64)
    return array(4), array(3), array(1), array(4, readonly=False), index, index, t


def signature(numba: Any, dtype: Any) -> Any:
    """The types :func:`phase_conv2d` is compiled for at ``dtype`` (see
    :func:`_leading_types`)."""
    *lead, t = _leading_types(numba, dtype)
    i64, index = numba.types.int64, lead[-1]
    return numba.types.void(*lead, index, index, index, i64, i64, i64, i64, t, t, i64)


def phase_conv2d(x, w, bias, y, offsets, row_base, col_first, col_count, col_dest, sw, wq,
                 length, group, ap, aq, mode):
    """y[b, o] = bias[o] + sum over the group's input channels and the taps of w[o, ci, t] times
    the input shifted by tap t, via the phase buffer (see the module's docstring and
    :class:`PhaseGeometry` for the arguments), then the activation ``mode`` with parameters
    ``ap``, ``aq`` (see :mod:`ep_host_cpu.conv_epilogue`'s ``MODES``)."""
    n, _, h, width = x.shape
    m, cg, taps = w.shape
    oh, ow = y.shape[2], y.shape[3]
    mg = m // group
    size = -(-oh * wq // VECTOR) * VECTOR  # whole vectors: no scalar remainder per pass
    buf = np.zeros((cg, length), dtype=x.dtype)  # the padding stays zero: rewritten alike
    grid = np.empty(size, dtype=x.dtype)
    units = np.array([0.0, 1.0, -0.0], dtype=x.dtype)  # in the arrays' type
    zero, one, keep = units[0], units[1], units[2]
    even = 0 if col_first[0] == 0 else 1  # stride 2: the phase of input columns 0, 2, ...
    nine = taps == 9 and oh * ow >= NINE_TAP_MIN_OUTPUT
    pairs = width // 2
    for b in range(n):
        for g in range(group):
            for ci in range(cg):  # explicit loops: a slice assignment checks for overlap
                dst = buf[ci]
                for ih in range(h):
                    src = x[b, g * cg + ci, ih]
                    base = row_base[ih]
                    if sw == 1:
                        seg = dst[base + col_dest[0]:]
                        for t in range(width):
                            seg[t] = src[t]
                        continue
                    if sw == 2:  # both phases in one pass over the row's column pairs
                        at0 = base + col_dest[even]
                        at1 = base + col_dest[1 - even]
                        seg0 = dst[at0:at0 + pairs]  # bounded slices: the pass is vectorized
                        seg1 = dst[at1:at1 + pairs]
                        for t in range(pairs):
                            seg0[t] = src[2 * t]
                            seg1[t] = src[2 * t + 1]
                        if width % 2:
                            dst[at0 + pairs] = src[width - 1]
                        continue
                    for px in range(sw):
                        seg = dst[base + col_dest[px]:]
                        part = src[col_first[px]:]
                        for t in range(col_count[px]):
                            seg[t] = part[t * sw]
            for mo in range(mg):
                o = g * mg + mo
                start = bias[o]
                first = 0  # the first input channel whose taps are still to add
                if nine:  # 3x3 on a large plane: all taps of the first channel in one pass
                    src = buf[0]
                    wt = w[o, 0]
                    a0 = src[offsets[0]:offsets[0] + size]
                    a1 = src[offsets[1]:offsets[1] + size]
                    a2 = src[offsets[2]:offsets[2] + size]
                    a3 = src[offsets[3]:offsets[3] + size]
                    a4 = src[offsets[4]:offsets[4] + size]
                    a5 = src[offsets[5]:offsets[5] + size]
                    a6 = src[offsets[6]:offsets[6] + size]
                    a7 = src[offsets[7]:offsets[7] + size]
                    a8 = src[offsets[8]:offsets[8] + size]
                    w0, w1, w2, w3, w4 = wt[0], wt[1], wt[2], wt[3], wt[4]
                    w5, w6, w7, w8 = wt[5], wt[6], wt[7], wt[8]
                    for p in range(size):
                        grid[p] = (start + w0 * a0[p] + w1 * a1[p] + w2 * a2[p] + w3 * a3[p]
                                   + w4 * a4[p] + w5 * a5[p] + w6 * a6[p] + w7 * a7[p]
                                   + w8 * a8[p])
                    first = 1
                else:
                    for p in range(size):
                        grid[p] = start
                for ci in range(first, cg):
                    src = buf[ci]
                    wt = w[o, ci]
                    t = 0
                    while t + 4 <= taps:
                        a0 = src[offsets[t]:offsets[t] + size]
                        a1 = src[offsets[t + 1]:offsets[t + 1] + size]
                        a2 = src[offsets[t + 2]:offsets[t + 2] + size]
                        a3 = src[offsets[t + 3]:offsets[t + 3] + size]
                        w0, w1, w2, w3 = wt[t], wt[t + 1], wt[t + 2], wt[t + 3]
                        for p in range(size):
                            grid[p] += w0 * a0[p] + w1 * a1[p] + w2 * a2[p] + w3 * a3[p]
                        t += 4
                    while t < taps:
                        a0 = src[offsets[t]:offsets[t] + size]
                        w0 = wt[t]
                        for p in range(size):
                            grid[p] += w0 * a0[p]
                        t += 1
                for r in range(oh):
                    out = y[b, o, r]
                    cells = grid[r * wq:]
                    if mode != 1:
                        for j in range(ow):
                            out[j] = cells[j]
                        continue
                    for j in range(ow):  # min(max(v, lo), hi): all hi where lo > hi
                        v = cells[j]
                        v = ap if v < ap else v  # selects, not branches: vectorized
                        out[j] = aq if v > aq else v
                if mode > 1:  # HardSigmoid, HardSwish: a pass over the channel's output
                    activate(y[b, o].reshape(oh * ow), keep, ap, aq, zero, one, mode)


@dataclass(frozen=True)
class PhaseGeometry:
    """One input shape's phase buffer, worked out once: each tap's offset into a channel's
    buffer (``offsets``); where input row ``ih`` starts in it (``row_base``); per column phase
    ``px``, the first input column of that phase, how many there are and where they go
    relative to their row (``col_first``, ``col_count``, ``col_dest``); the column stride, a
    phase plane's width and the buffer's length per channel."""

    offsets: Any
    row_base: Any
    col_first: Any
    col_count: Any
    col_dest: Any
    stride: int
    width: int
    length: int


def phase_geometry(x_shape, w_shape, strides, dilations, begin, end, out) -> PhaseGeometry:
    (h, width), (kh, kw), (sh, sw), (dh, dw) = x_shape[2:], w_shape[2:], strides, dilations
    hq = -(-(h + begin[0] + end[0]) // sh)
    wq = -(-(width + begin[1] + end[1]) // sw)
    plane = hq * wq
    offsets = [((i * dh) % sh * sw + (k * dw) % sw) * plane + (i * dh) // sh * wq + (k * dw) // sw
               for i in range(kh) for k in range(kw)]
    rows = [(ih + begin[0]) % sh * sw * plane + (ih + begin[0]) // sh * wq for ih in range(h)]
    first = [(px - begin[1]) % sw for px in range(sw)]
    count = [max(0, -(-(width - f) // sw)) for f in first]
    dest = [px * plane + (f + begin[1]) // sw for px, f in enumerate(first)]
    length = max(sh * sw * plane, max(offsets) + -(-out[0] * wq // VECTOR) * VECTOR)

    def int64s(values):
        return np.array(values, dtype=np.int64)

    return PhaseGeometry(int64s(offsets), int64s(rows), int64s(first), int64s(count),
                         int64s(dest), sw, wq, length)


def block_signature(numba: Any, dtype: Any) -> Any:
    """The types :func:`block_conv2d` is compiled for at ``dtype`` (see
    :func:`_leading_types`)."""
    *lead, t = _leading_types(numba, dtype)
    i64 = numba.types.int64
    return numba.types.void(*lead, i64, i64, i64, i64, t, t, i64)


def block_conv2d(x, w, bias, y, offsets, col_pos, row_step, rows, row_len, top, ap, aq, mode):
    """Depthwise y[b, c] = bias[c] + the taps of w[c, 0] over the input's channel c, then the
    activation ``mode`` (as :func:`phase_conv2d`), on :data:`BLOCK` channels at a time: they are
    copied side by side into a zero-padded buffer (:class:`BlockGeometry`), so that an output
    row of all of them is one run of ``ow * BLOCK`` values, computed by long multiply-adds over
    four taps per pass. A last block short of channels repeats its last one."""
    n, c, h, width = x.shape
    oh, ow = y.shape[2], y.shape[3]
    taps = w.shape[2]
    span = ow * BLOCK
    plane, out_plane = h * width, oh * ow
    xs = x.reshape(x.size)
    ys = y.reshape(y.size)
    buf = np.zeros(rows * row_len, dtype=x.dtype)  # the padding stays zero: rewritten alike
    weights = np.empty((taps, span), dtype=x.dtype)  # a tap's BLOCK weights, once per pixel
    start = np.empty(span, dtype=x.dtype)  # the bias, likewise
    acc = np.empty(span, dtype=x.dtype)
    sources = np.empty(BLOCK, dtype=np.int64)  # where each lane's channel starts in x and y
    targets = np.empty(BLOCK, dtype=np.int64)
    units = np.array([0.0, 1.0, -0.0], dtype=x.dtype)  # in the arrays' type
    zero, one, keep = units[0], units[1], units[2]
    for b in range(n):
        for c0 in range(0, c, BLOCK):
            lanes = min(BLOCK, c - c0)
            for lane in range(BLOCK):
                ch = min(c0 + lane, c - 1)
                start[lane] = bias[ch]
                for t in range(taps):
                    weights[t, lane] = w[ch, 0, t]
                sources[lane] = (b * c + ch) * plane
                targets[lane] = (b * c + ch) * out_plane
            for q in range(BLOCK, span):  # repeat the first BLOCK (a distance of BLOCK)
                start[q] = start[q - BLOCK]
            for t in range(taps):
                wt = weights[t]
                for q in range(BLOCK, span):
                    wt[q] = wt[q - BLOCK]
            for ih in range(h):
                dst = buf[(top + ih) * row_len:]
                for iw in range(width):
                    at = col_pos[iw]
                    p = ih * width + iw
                    for lane in range(BLOCK):
                        dst[at + lane] = xs[sources[lane] + p]
            for r in range(oh):
                base = r * row_step
                for q in range(span):
                    acc[q] = start[q]
                t = 0
                while t + 4 <= taps:
                    a0 = buf[base + offsets[t]:base + offsets[t] + span]
                    a1 = buf[base + offsets[t + 1]:base + offsets[t + 1] + span]
                    a2 = buf[base + offsets[t + 2]:base + offsets[t + 2] + span]
                    a3 = buf[base + offsets[t + 3]:base + offsets[t + 3] + span]
                    w0, w1, w2, w3 = weights[t], weights[t + 1], weights[t + 2], weights[t + 3]
                    for q in range(span):
                        acc[q] += w0[q] * a0[q] + w1[q] * a1[q] + w2[q] * a2[q] + w3[q] * a3[q]
                    t += 4
                while t < taps:
                    a0 = buf[base + offsets[t]:base + offsets[t] + span]
                    w0 = weights[t]
                    for q in range(span):
                        acc[q] += w0[q] * a0[q]
                    t += 1
                activate(acc, keep, ap, aq, zero, one, mode)
                for j in range(ow):
                    cell = acc[j * BLOCK:]
                    p = r * ow + j
                    for lane in range(lanes):
                        ys[targets[lane] + p] = cell[lane]


@dataclass(frozen=True)
class LaneGeometry:
    """One input shape's buffer for a loop of :mod:`ep_host_cpu.lane_conv`: the kernel size,
    strides, dilations, where the input's first row and column go (``top``, ``left``) and the
    padded size."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    top: int
    left: int
    rows: int
    cols: int


def padded_size(x_shape, w_shape, strides, dilations, begin, out) -> tuple[int, int]:
    """The rows and columns of a zero-padded input that hold the input (its first row and
    column at ``begin``) and every tap of every output."""
    (h, width), (kh, kw), (sh, sw), (dh, dw) = x_shape[2:], w_shape[2:], strides, dilations
    return (max(h + begin[0], (out[0] - 1) * sh + (kh - 1) * dh + 1),
            max(width + begin[1], (out[1] - 1) * sw + (kw - 1) * dw + 1))


def lane_geometry(x_shape, w_shape, strides, dilations, begin, out) -> LaneGeometry:
    rows, cols = padded_size(x_shape, w_shape, strides, dilations, begin, out)
    return LaneGeometry(tuple(w_shape[2:]), tuple(strides), tuple(dilations), begin[0],
                        begin[1], rows, cols)


@dataclass(frozen=True)
class BlockGeometry:
    """One input shape's buffer for :func:`block_conv2d`, worked out once: per padded row, the
    columns split by stride phase as in :class:`PhaseGeometry` (the phase of column ``k`` holds
    the padded columns ``k, k + sw, ...``), each column ``BLOCK`` values of a block's channels.
    ``offsets``: each tap's start relative to its output row's (``row_step`` apart);
    ``col_pos``: where input column ``iw`` goes in its row; ``rows`` of ``row_len`` values, the
    input's first row at ``top``."""

    offsets: Any
    col_pos: Any
    row_step: int
    rows: int
    row_len: int
    top: int


def block_geometry(x_shape, w_shape, strides, dilations, begin, out) -> BlockGeometry:
    width, (kh, kw), (sh, sw), (dh, dw) = x_shape[3], w_shape[2:], strides, dilations
    rows, cols = padded_size(x_shape, w_shape, strides, dilations, begin, out)
    wq = -(-cols // sw)
    row_len = sw * wq * BLOCK

    def column(padded):
        return (padded % sw * wq + padded // sw) * BLOCK

    offsets = [i * dh * row_len + column(k * dw) for i in range(kh) for k in range(kw)]
    col_pos = [column(begin[1] + iw) for iw in range(width)]
    return BlockGeometry(np.array(offsets, dtype=np.int64), np.array(col_pos, dtype=np.int64),
                         sh * row_len, rows, row_len, begin[0])


def _small_depthwise(x_shape, w_shape, out) -> bool:
    """A depthwise convolution (one input and one output channel per group) with at most
    :data:`BLOCK_MAX_OUTPUT` output pixels per channel."""
    return w_shape[1] == 1 and w_shape[0] == x_shape[1] and out[0] * out[1] <= BLOCK_MAX_OUTPUT


def conv_geometry(x_shape, w_shape, strides, dilations, begin, end,
                  out) -> PhaseGeometry | BlockGeometry:
    """The loop for this shape and its buffer's geometry: :func:`block_conv2d` for a depthwise
    convolution (one input and one output channel per group) with at most
    :data:`BLOCK_MAX_OUTPUT` output pixels per channel, else :func:`phase_conv2d`."""
    if _small_depthwise(x_shape, w_shape, out):
        return block_geometry(x_shape, w_shape, strides, dilations, begin, out)
    return phase_geometry(x_shape, w_shape, strides, dilations, begin, end, out)


_NAMES: dict[Any, str] = {}  # a dtype (or its name, or a numpy type) -> its name


def _name(dtype: Any) -> str:
    """``np.dtype(dtype).name``, looked up once per dtype (numpy builds the name in Python each
    time it is asked)."""
    name = _NAMES.get(dtype)
    if name is None:
        name = _NAMES[dtype] = np.dtype(dtype).name
    return name


class GroupedConv2d:
    """``xp.grouped_conv2d``: :meth:`ready` says at plan time whether the compiled loops are
    used for a dtype (numba installed and wanted, float32 or float64), :meth:`geometry` works out
    an input shape's buffer once, and calling it computes into a given output. The loops are
    compiled for a dtype, or read from numba's disk cache, the first time :meth:`ready` says yes
    for it."""

    DTYPES = ("float32", "float64")

    def __init__(self) -> None:
        # per dtype name: the (phase, block) loops, or False where either cannot be compiled
        self._loops: dict[str, Any] = {}
        # per (dtype name, kernel size): its lane loop, or False where it cannot be compiled
        self._lanes: dict[tuple[str, tuple[int, int]], Any] = {}

    def ready(self, dtype: Any) -> bool:
        name = _name(dtype)
        if name not in self.DTYPES or not numba_wanted():
            return False
        loops = self._loops.get(name)
        if loops is None:
            phase = compiled(phase_conv2d, signature, (activate,), args=(name,))
            block = compiled(block_conv2d, block_signature, (activate,), args=(name,))
            loops = self._loops[name] = (phase, block) if phase and block else False
        return bool(loops)

    def lanes_ready(self, dtype: Any, kernel: tuple[int, int]) -> bool:
        """Whether the lane loop for ``kernel`` runs at ``dtype``: one exists for that size, and
        it is compiled (or loaded) now, the first time a model has such a convolution."""
        name = _name(dtype)
        if kernel not in LANE_KERNELS or not self.ready(name):
            return False
        loop = self._lanes.get((name, kernel))
        if loop is None:
            loop = self._lanes[(name, kernel)] = compiled(
                lane_loop(kernel), lane_signature, (activate,), args=(name,), slp=True) or False
        return bool(loop)

    def geometry(self, x_shape, w_shape, strides, dilations, begin, end, out,
                 dtype: Any = None) -> PhaseGeometry | BlockGeometry | LaneGeometry:
        """The loop for this shape and its buffer's geometry, as :func:`conv_geometry` chooses,
        but where that is the block loop, the lane loop of the kernel size if it has one and it
        runs at ``dtype`` (the compute type). Measured one thread against the block loop, the
        Conv alone in a session: 576 channels 7 x 7 5x5 80-86 against 108 us, 960 7 x 7 3x3 88
        against 112, 768 7 x 7 7x7 167-170 against 217-220; on 14 x 14 outputs the lane loop
        did not beat the phase loop (240 channels 5x5: 116 against 108-114 us)."""
        if (dtype is not None and _small_depthwise(x_shape, w_shape, out)
                and self.lanes_ready(dtype, tuple(w_shape[2:]))):
            return lane_geometry(x_shape, w_shape, strides, dilations, begin, out)
        return conv_geometry(x_shape, w_shape, strides, dilations, begin, end, out)

    def __call__(self, x, w, bias, y, geometry: PhaseGeometry | BlockGeometry | LaneGeometry,
                 group: int, activation=None):
        """Convolve ``x`` (n, C, H, W) with ``w`` (M, C/group, taps) plus ``bias`` (M,) into
        ``y`` (n, M, oh, ow), all C-contiguous and of one float type, then apply
        ``activation`` (``(kind, p, q)`` as the library's Conv passes it, or None). Call only
        after :meth:`ready` said yes for that type (and, for a lane geometry, made with that
        type)."""
        mode, p, q = activation_mode(activation)
        g = geometry
        t = y.dtype
        if type(g) is LaneGeometry:
            loop = self._lanes[(t.name, g.kernel)]
            args = (*g.strides, *g.dilations, g.top, g.left, g.rows, g.cols, p, q, mode)
        elif type(g) is BlockGeometry:
            loop = self._loops[t.name][1]
            args = (g.offsets, g.col_pos, g.row_step, g.rows, g.row_len, g.top, p, q, mode)
        else:
            loop = self._loops[t.name][0]
            args = (g.offsets, g.row_base, g.col_first, g.col_count, g.col_dest, g.stride,
                    g.width, g.length, group, p, q, mode)
        if (x.dtype is t and w.dtype is t and bias.dtype is t and x.flags.c_contiguous
                and w.flags.c_contiguous and bias.flags.c_contiguous and y.flags.c_contiguous
                and y.flags.writeable and x.ndim == y.ndim == 4 and w.ndim == 3
                and bias.ndim == 1):  # as compiled (the geometry's arrays are ours): unchecked
            loop = getattr(loop, "unchecked", loop)
        loop(x, w, bias, y, *args)
        return y
