"""Depthwise 2-D convolution of small planes on 16 channels at a time, each output pixel's 16
sums in scalar variables, compiled by numba with LLVM's SLP vectorizer on: the loops
``xp.grouped_conv2d`` runs for a depthwise convolution of a kernel size in :data:`LANE_KERNELS`
with a small output (see :mod:`ep_host_cpu.grouped_conv`, which chooses).

The 16 channels of a block are copied side by side into a zero-padded buffer (channel
innermost), so that a kernel tap of an output pixel reads 16 contiguous values, one per channel,
and multiplies them by the tap's 16 weights, also contiguous. numba's default code generator
keeps that scalar: its loop vectorizer vectorizes loops, not the 16 like statements of one
iteration (and turned the tap loop into gathers), and numba leaves LLVM's SLP vectorizer, which
packs such statements into vector instructions, off by default. Compiled with it on
(``jit.compiled(..., slp=True)``), each tap is one or two vector multiply-adds.

The taps are written out, not looped over: the loop's source is generated here for each kernel
size and compiled from this file's name (numba's disk cache keys it by this file), so that every
tap's offset is a constant and no loop over the taps stands between one pixel's sums and the
next's (which the CPU then overlaps, as we read the timings). Measured one thread on 576
channels 7 x 7 5x5: the multiply-adds alone (a prototype without the copies in and out) 44 us
looping over the taps, 30 us with the taps written out; the whole loop 75-85 us, of which the
copies into the channel-innermost buffer and back out take about 45 (onnxruntime's whole Conv,
on its blocked layout: 31-35 us). A 7x7 kernel's 49 taps written out took LLVM 46-50 s to
compile (3x3: 5-7 s, 5x5: 14-22 s), a first session's wait: from :data:`WRITTEN_OUT_TAPS` on the
loop runs over the kernel's rows, each row's taps written out, as fast (see there).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.conv_epilogue import activate

LANES = 16  # channels side by side: a float32 AVX-512 register, two AVX2 ones


def lane_signature(numba: Any, dtype: Any) -> Any:
    """The types a lane loop is compiled for at ``dtype`` (float32 or float64, or its name): x,
    w and bias read-only (a writable array passes too), y written, all C-contiguous; eight
    int64 (strides, dilations, where the input's first row and column go in the buffer and the
    buffer's rows and columns), p and q in the value type, the activation mode."""
    types = numba.types
    t = numba.from_dtype(np.dtype(dtype))

    def array(ndim, readonly=True):
        return types.Array(t, ndim, "C", readonly=readonly)

    i64 = types.int64
    return types.void(array(4), array(3), array(1), array(4, readonly=False), *([i64] * 8),
                      t, t, i64)


# Kernels of up to this many taps have every tap written out; larger ones loop over the
# kernel's rows, each row's taps written out. Measured one thread, float32, 768 channels 7 x 7
# with a 7x7 kernel: compiling the written-out loop took 46-50 s, the row loop 5-6 s; runs of
# 100 alternating, median (min) 204 (190) against 198 (187) us, the same sums to the bit
WRITTEN_OUT_TAPS = 25


def _source(kh: int, kw: int) -> str:
    """The loop for a ``kh`` x ``kw`` kernel, as Python source (see the module's docstring).

    Indices that are sums of run-time values are unsigned (numba wraps a negative signed index
    around, and the test for it keeps LLVM from seeing 16 contiguous loads); a block short of
    channels repeats its last one, and only its real channels are copied out."""
    lanes = range(LANES)
    taps = [(i, k) for i in range(kh) for k in range(kw)]
    looped = len(taps) > WRITTEN_OUT_TAPS
    if looped:  # a kernel row's step in the buffer, and each tap's offset from its row's first
        offsets = [f"    orow = np.uint64(dh * cols * {LANES})",
                   *(f"    o{k} = np.uint64({k} * dw * {LANES})" for k in range(kw))]
    else:  # each tap's offset from its pixel's first input, in the buffer
        offsets = [f"    o{t} = np.uint64(({i} * dh * cols + {k} * dw) * {LANES})"
                   for t, (i, k) in enumerate(taps)]
    sums = ", ".join(f"s{v}" for v in lanes)
    firsts = ", ".join(f"f{v}" for v in lanes)  # where each lane's channel starts
    lines = [
        f"def lane_conv2d_{kh}x{kw}(x, w, bias, y, sh, sw, dh, dw, top, left, rows, cols, p, q,"
        " mode):",
        "    n, c, h, width = x.shape",
        "    oh, ow = y.shape[2], y.shape[3]",
        "    plane, out_plane = h * width, oh * ow",
        "    xs = x.reshape(x.size)",
        "    ws = w.reshape(w.size)",
        "    ys = y.reshape(y.size)",
        f"    buf = np.zeros(rows * cols * {LANES}, dtype=x.dtype)  # the padding stays zero",
        f"    wb = np.empty({len(taps) * LANES}, dtype=x.dtype)",
        f"    bb = np.empty({LANES}, dtype=x.dtype)",
        f"    starts = np.empty({LANES}, dtype=np.int64)",
        f"    out = np.empty(out_plane * {LANES}, dtype=x.dtype)",
        "    units = np.array([0.0, 1.0, -0.0], dtype=x.dtype)",
        "    zero, one, keep = units[0], units[1], units[2]",
        *offsets,
        *(f"    u{v} = np.uint64({v})" for v in lanes),
        "    for b in range(n):",
        f"        for c0 in range(0, c, {LANES}):",
        f"            for lane in range({LANES}):",
        "                ch = min(c0 + lane, c - 1)",
        "                bb[lane] = bias[ch]",
        f"                for t in range({len(taps)}):",
        f"                    wb[t * {LANES} + lane] = ws[ch * {len(taps)} + t]",
        "                starts[lane] = (b * c + ch) * plane",
        # each input pixel's 16 channels, one contiguous run of the buffer
        f"            {firsts} = {', '.join(f'starts[{v}]' for v in lanes)}",
        "            for ih in range(h):",
        "                for iw in range(width):",
        f"                    at = np.uint64(((top + ih) * cols + left + iw) * {LANES})",
        "                    e = ih * width + iw",
        *(f"                    buf[at + u{v}] = xs[f{v} + e]" for v in lanes),
        "            for r in range(oh):",
        "                for j in range(ow):",
        f"                    at = np.uint64((r * sh * cols + j * sw) * {LANES})",
        f"                    {sums} = {', '.join(f'bb[{v}]' for v in lanes)}",
    ]
    if looped:
        lines += [f"                    for i in range({kh}):",
                  "                        ai = at + np.uint64(i) * orow",
                  f"                        wi = i * {kw * LANES}"]
        for k in range(kw):
            lines.append(f"                        a = ai + o{k}")
            lines.extend(f"                        s{v} += buf[a + u{v}] * wb[wi + {k * LANES + v}]"
                         for v in lanes)
    else:
        for t in range(len(taps)):
            lines.append(f"                    a = at + o{t}")
            lines.extend(f"                    s{v} += buf[a + u{v}] * wb[{t * LANES + v}]"
                         for v in lanes)
    lines += [
        f"                    at = np.uint64((r * ow + j) * {LANES})",
        *(f"                    out[at + u{v}] = s{v}" for v in lanes),
        "            activate(out, keep, p, q, zero, one, mode)",
        f"            if c - c0 < {LANES}:  # a short block: its channels one by one",
        "                for lane in range(c - c0):",
        "                    dst = (b * c + c0 + lane) * out_plane",
        "                    for at in range(out_plane):",
        f"                        ys[dst + at] = out[at * {LANES} + lane]",
        "                continue",
        f"            {firsts} = {', '.join(f'(b * c + c0 + {v}) * out_plane' for v in lanes)}",
        "            for e in range(out_plane):",
        f"                at = np.uint64(e * {LANES})",
        *(f"                ys[f{v} + e] = out[at + u{v}]" for v in lanes),
    ]
    return "\n".join(lines) + "\n"


def _defined(kh: int, kw: int) -> Any:
    """The loop for ``kh`` x ``kw``, defined from its generated source under this file's name
    (numba's disk cache is keyed by the file a function says it comes from)."""
    names: dict[str, Any] = {"np": np, "activate": activate}
    exec(compile(_source(kh, kw), __file__, "exec"), names)  # noqa: S102 (our own source)
    loop = names[f"lane_conv2d_{kh}x{kw}"]
    loop.__module__ = __name__
    return loop


# the kernel sizes with a lane loop, each generated the first time it is asked for (generating
# and compiling the three sources took 34 ms, which every process making the CPU EP paid)
LANE_KERNELS = frozenset({(3, 3), (5, 5), (7, 7)})
_NAMES = {f"lane_conv2d_{kh}x{kw}": (kh, kw) for kh, kw in LANE_KERNELS}


def lane_loop(kernel: tuple[int, int]) -> Any:
    """The lane loop for ``kernel`` (one of :data:`LANE_KERNELS`), as Python."""
    return __getattr__("lane_conv2d_{}x{}".format(*kernel))


def __getattr__(name: str) -> Any:
    """``lane_conv2d_3x3`` and its siblings as module attributes, generated on first access,
    so that a process building one ahead of time imports it by name."""
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = globals().get(name)
    if found is None:
        found = globals()[name] = _defined(*_NAMES[name])
    return found
