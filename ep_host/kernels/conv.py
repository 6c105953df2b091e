"""Convolution: Conv (a variant by geometry: 1x1 GEMM, depthwise multiply-adds, stride-1 GEMMs
on shifted views, Winograd F(2x2, 3x3), a GEMM per tap that reads the input where most read
padding, im2col + GEMM; constant weights prepacked once),
ConvInteger and CausalConvWithState. Windows are strided views of a padded input."""

from __future__ import annotations

import itertools
import math
import threading

from ep_host import Workspace, element_count, record_kernel_variant, require
from ep_host.kernels.conv_geometry import (
    check_window_attributes,
    check_window_geometry,
    input_rank,
    pad_spatial,
    reached_count,
    reached_taps,
    strides_and_dilations,
    tap_slices,
    window_geometry,
)
from ep_host.kernels.registry import FLOATS, FLOATS_BF16, kernel

# -- Conv -------------------------------------------------------------------------------------


def check_conv(node, provider):
    attrs = node.attributes
    op = node.op_type
    x, w = node.inputs[0], node.inputs[1]
    rank = input_rank(node)
    require(rank is None or rank >= 3, "{}: {} takes input of rank >= 3 (N, C, D1...), got "
            "rank {}", op, provider, rank, code="shape")
    w_shape = w.shape if w is not None else None
    require(rank is None or w_shape is None or len(w_shape) == rank,
            "{}: the weight's rank must equal the input's ({}), got {}", op, rank, w_shape,
            code="shape")
    n_spatial = rank - 2 if rank is not None else None if w_shape is None else len(w_shape) - 2
    kernel_shape = attrs.get("kernel_shape")
    check_window_attributes(node, n_spatial, kernel_shape)
    group = attrs.get("group", 1)  # the schema default; FusedConv has no ONNX schema to fill it
    require(group >= 1, "{}: group must be >= 1, got {}", op, group, code="attribute")
    if w_shape is not None:
        spatial = tuple(w_shape[2:])
        require(kernel_shape is None or not all(isinstance(k, int) for k in spatial)
                or tuple(kernel_shape) == spatial,
                "{}: kernel_shape {} must equal the weight's spatial shape {}", op, kernel_shape,
                spatial, code="attribute")
        m = w_shape[0]
        require(not isinstance(m, int) or m % group == 0,
                "{}: output channels ({}) must be a multiple of group ({})", op, m, group,
                code="attribute")
        c = None if x is None or x.shape is None else x.shape[1]
        if isinstance(c, int) and isinstance(w_shape[1], int):
            require(c == w_shape[1] * group,
                    "{}: input channels ({}) must equal weight channels ({}) x group ({})", op, c,
                    w_shape[1], group, code="shape")
        check_window_geometry(node, provider, spatial, clamp_same=True)


def conv_flops(node):
    w = node.inputs[1]
    per_output = element_count(w.shape[1:]) if w is not None and w.shape is not None else 1
    y = node.outputs[0]
    return 2 * element_count(y.shape if y is not None else None) * per_output


def _conv_work_type(xp, dtype):
    """Half types accumulate in float32 and round once; other types compute as they are."""
    return xp.float32 if dtype.kind != "i" and dtype.itemsize < 4 else dtype


class ConvWeights:
    """A Conv weight in the layouts the variants read, contiguous and in the compute type:
    ``gemm`` (group, M/group, C/group x taps) for im2col and 1x1, ``taps`` (taps, group,
    M/group, C/group) for the shifted-view GEMMs; made on first use and kept: the depthwise
    weights per channel (:meth:`per_channel`) or spread over an output's elements
    (:meth:`spread`, per output shape) and the Winograd weights (:meth:`winograd`). ``plans``
    keeps the node's :class:`ConvPlan` per input shape."""

    __slots__ = ("gemm", "shape", "_tap_count", "_xp", "_taps", "_spread", "_winograd",
                 "_per_channel", "_zero_bias", "_same_rows", "plans")

    def __init__(self, xp, w, group):
        # the constant itself where it already is contiguous in the compute type: no copy
        w = w.astype(_conv_work_type(xp, w.dtype), copy=False)
        self.shape = w.shape
        m, cg = w.shape[:2]
        taps = math.prod(w.shape[2:])
        self.gemm = xp.ascontiguousarray(w.reshape(group, m // group, cg * taps))
        self._tap_count = taps
        self._xp = xp
        self._taps = None
        self._spread = {}
        self._winograd = None
        self._per_channel = None
        self._zero_bias = None
        self._same_rows = None
        self.plans = {}

    def direct(self):
        """The weight as (M, C/group, taps), contiguous: a view of ``gemm``."""
        return self.gemm.reshape(self.shape[0], self.shape[1], -1)

    def zero_bias(self, xp):
        """Zeros, one per output channel, for the kernels that always add a bias; kept."""
        if self._zero_bias is None:
            self._zero_bias = xp.zeros(self.shape[0], dtype=self.gemm.dtype)
        return self._zero_bias

    def same_rows(self):
        """Whether one group's output channels all have the same filter (a model of constant
        weights, as onnx's light test models are); asked once. Their GEMM computes one row and
        repeats it: BLAS kernels that sum some rows in another order (OpenBLAS's Haswell
        kernels, which it runs on AMD Zen 3) give such channels values a last bit apart, and
        light SqueezeNet's softmax of logits near 1e10 turns that into other outputs."""
        if self._same_rows is None:
            g = self.gemm
            self._same_rows = bool(g.shape[0] == 1 and g.shape[1] > 1
                                   and (g[0, 1] == g[0, 0]).all() and (g[0] == g[0, :1]).all())
        return self._same_rows

    @property
    def taps(self):
        """(taps, group, M/group, C/group), made on first use (only some variants read it)."""
        if self._taps is None:
            group, mg, k = self.gemm.shape
            n = self._tap_count
            self._taps = self._xp.ascontiguousarray(
                self.gemm.reshape(group, mg, k // n, n).transpose(3, 0, 1, 2))
        return self._taps

    def per_channel(self, xp):
        """Depthwise weights with one filter per channel as (1, C, 1, taps), kept."""
        if self._per_channel is None:
            taps, c = self.taps.shape[:2]
            self._per_channel = xp.ascontiguousarray(self.taps.reshape(taps, c).T.reshape(
                1, c, 1, taps))
        return self._per_channel

    def winograd(self, xp):
        """The weights in Winograd F(2x2, 3x3) form, (16, C, M): ``G g G^T`` per output and
        input channel, computed in float64 and kept on first use."""
        if self._winograd is None:
            m, k = self.gemm.shape[1:]
            g = xp.asarray(WINOGRAD_G, dtype=xp.float64)
            w = self.gemm.reshape(m, k // 9, 3, 3).astype(xp.float64)
            u = xp.einsum("ak,mckl,bl->abcm", g, w, g)
            self._winograd = xp.ascontiguousarray(u.reshape(16, k // 9, m).astype(
                self.gemm.dtype))
        return self._winograd

    def spread(self, xp, shape):
        """The depthwise weights (taps, C, k) broadcast to (taps, C, k) + ``shape`` and kept
        (a multiply by a whole array ran 2.5x as fast in numpy as one by a per-row scalar, on
        272 channels x 224 elements); ``None`` past SPREAD_BYTES."""
        found = self._spread.get(shape)
        if found is None:
            t, c, k = self.taps.shape[:3]
            if t * c * k * math.prod(shape) * self.taps.itemsize > SPREAD_BYTES:
                return None
            w = self.taps.reshape((t, c, k) + (1,) * len(shape))
            found = xp.ascontiguousarray(xp.broadcast_to(w, (t, c, k) + shape))
            if len(self._spread) < 4:  # a model runs a few input shapes; do not grow forever
                self._spread[shape] = found
        return found


SPREAD_BYTES = 8 << 20


def prepare_conv(xp, constants, *, group, **_):
    extra = {}
    w = constants.get(1)
    if w is not None and w.ndim >= 3:
        extra["packed"] = ConvWeights(xp, w, group)
        direct = getattr(xp, "grouped_conv2d", None)
        if direct is not None and _may_run_direct(w.shape, group):
            direct.ready(extra["packed"].gemm.dtype)  # compiled (or loaded) now, not in a run
    b = constants.get(2)
    if b is not None:
        extra["packed_bias"] = xp.ascontiguousarray(b.astype(_conv_work_type(xp, b.dtype)))
    return extra


# A stride-1 Conv can run as one GEMM per kernel tap on a shifted view of the flattened padded
# input, computing each output row at the padded width and dropping the extra columns after.
# Measured on 3x3 convs at 14..56 pixels: twice as fast as im2col with 32 output channels per
# group, 1.3x with 64, 5-15% slower from 96 up; and the im2col copy costs less beyond this much
# extra work (padded / output pixels per row). Remeasured one thread (OpenBLAS 0.3.31): with
# fewer than 8 input channels per group im2col wins by far (vgg11's first conv, 3 -> 64 at 224 x
# 224: 3.0 against 12.0 ms); with 8-24 and more than 16 outputs it was 1.1-1.6x faster too
# (squeezenet's 16 -> 64 at 55 x 55: 0.79 against 1.23 ms), but those keep this variant: the
# shipped output of onnx's light squeezenet (a softmax of logits near 1e10 from constant
# weights, equal only to the last bit) is reproduced with it and not with im2col.
SHIFTED_WASTE = 1.2
SHIFTED_MAX_OUT = 64
SHIFTED_NARROW_OUT = 16  # output channels per group: at most this many, any depth
SHIFTED_MIN_DEPTH = 8  # input channels per group: else only narrow outputs


# Winograd F(2x2, 3x3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks",
# 2015): a 2x2 output tile is A^T [(G g G^T) * (B^T d B)] A of its 4x4 input tile d, 16
# products instead of 36. Here: the input turned channels-last and transformed with adds and
# subtracts, 16 GEMMs (tiles x C) @ (C x M), and the output transform. 2.25x fewer multiplies
# than im2col, but the GEMMs only have C for their depth and the transforms cost a few passes
# over input and output. Measured one thread, against the variant it replaces: 0.6-0.8x the
# time from 32 channels in and out (e.g. 96 -> 128 at 28 x 28: 1.2 vs 1.9 ms), 1.3-1.4x with
# 8-24 channels; 1.0-1.15x for 32 <-> 128 at 56 x 56. Remeasured one thread (OpenBLAS 0.3.31)
# against im2col: 0.6-0.9x the time from 40 input channels (densenet's 128 -> 32 at 56 x 56: 2.5
# against 4.0 ms); with 32 input channels 1.05-1.25x up to 784 tiles (kept: see SHIFTED_* on
# the light squeezenet) and 1.25-1.65x on large images (resnet26d's 32 -> 64 at 112 x 112: 13.5
# against 8.2 ms), which go to the shifted views (10.0 ms there).
WINOGRAD_G = ((1.0, 0.0, 0.0), (0.5, 0.5, 0.5), (0.5, -0.5, 0.5), (0.0, 0.0, 1.0))
WINOGRAD_MIN_CHANNELS = 32  # input and output channels
WINOGRAD_DEEP_CHANNELS = 40  # input channels from which any number of tiles is worth it
WINOGRAD_SHALLOW_MAX_TILES = 1024  # tiles at most, below that depth
WINOGRAD_MIN_TILES = 16


def _winograd_tiles(c, m, group, kernel, out, strides, dilations):
    """The number of 2x2 output tiles where Winograd F(2x2, 3x3) is chosen, else 0."""
    tiles = math.prod(-(-o // 2) for o in out)
    fits = (group == 1 and tuple(kernel) == (3, 3) and all(s == 1 for s in strides)
            and all(d == 1 for d in dilations) and c >= WINOGRAD_MIN_CHANNELS
            and m >= WINOGRAD_MIN_CHANNELS and tiles >= WINOGRAD_MIN_TILES
            and (c >= WINOGRAD_DEEP_CHANNELS or tiles <= WINOGRAD_SHALLOW_MAX_TILES))
    return tiles if fits else 0


def winograd_buffers(n, c, m, out):
    """The shapes of the buffers :func:`_conv_winograd` computes in, in order: the padded
    input by column parity, its four row transforms, the transformed tiles, their products
    with the weights, the two row sums of the output transform and the output tiles."""
    th, tw = -(-out[0] // 2), -(-out[1] // 2)
    row = (n, th, 2, tw + 1, c)
    return ((n, 2 * th + 2, 2, tw + 1, c), row, row, row, row, (4, 4, n, th, tw, c),
            (16, n * th * tw, m), (4, n, th, tw, m), (4, n, th, tw, m), (n, th, 2, tw, 2, m))


def _conv_winograd(xp, x, u, bias, out, begin, workspace=None, transforms=None):
    """Winograd F(2x2, 3x3) on ``x`` (n, C, H, W) with transformed weights ``u`` (16, C, M);
    ``bias`` (M,) or None. Returns (n, M) + ``out``, contiguous. ``workspace``: the host's
    scratch memory for the buffers of :func:`winograd_buffers`, else they are allocated.
    ``transforms``: the provider's compiled input and output transforms (the CPU EP's
    ``xp.winograd_transforms``, the same values as the passes here), where ready."""
    n, c, h, w = x.shape
    m = u.shape[2]
    (oh, ow), (pt, pl) = out, begin
    th, tw = -(-oh // 2), -(-ow // 2)
    bufs = carve(workspace, winograd_buffers(n, c, m, out), x.dtype)
    if bufs is None:
        bufs = (xp.zeros(winograd_buffers(n, c, m, out)[0], dtype=x.dtype),) + (None,) * 9
    else:
        bufs[0].fill(0)
    # The padded input channels-last with its columns split by parity, so that every tile
    # view below has a long contiguous inner run: pad[n, row, p, j, c] = padded[n, c, row,
    # 2j + p]. Rows and columns past the input are zeros (padding and the last tile's tail).
    pad = bufs[0]
    rows = x.transpose(0, 2, 3, 1)
    for p in (0, 1):
        first = (pl - p + 1) // 2  # the first j with 2j + p inside the input
        src = 2 * first + p - pl
        count = len(range(src, w, 2))
        pad[:, pt:pt + h, p, first:first + count] = rows[:, :, src::2]
    if transforms is not None:
        return _winograd_compiled(xp, pad, u, bias, out, bufs, transforms)
    # B^T d B: rows (d0 - d2, d1 + d2, d2 - d1, d1 - d3), then the same over columns.
    r = [pad[:, a:a + 2 * th:2] for a in range(4)]
    rt = (xp.subtract(r[0], r[2], out=bufs[1]), xp.add(r[1], r[2], out=bufs[2]),
          xp.subtract(r[2], r[1], out=bufs[3]), xp.subtract(r[1], r[3], out=bufs[4]))
    v = bufs[5] if bufs[5] is not None else xp.empty((4, 4, n, th, tw, c), dtype=x.dtype)
    for a, t in enumerate(rt):
        d0, d1 = t[:, :, 0, :tw], t[:, :, 1, :tw]
        d2, d3 = t[:, :, 0, 1:], t[:, :, 1, 1:]
        xp.subtract(d0, d2, out=v[a, 0])
        xp.add(d1, d2, out=v[a, 1])
        xp.subtract(d2, d1, out=v[a, 2])
        xp.subtract(d1, d3, out=v[a, 3])
    prod = xp.matmul(v.reshape(16, n * th * tw, c), u, out=bufs[6])  # (16, tiles, M)
    if bias is not None:  # product (1, 1) reaches each of the four outputs with weight 1
        prod[5] += bias
    prod = prod.reshape(4, 4, n, th, tw, m)
    # A^T m A: rows (m0 + m1 + m2, m1 - m2 - m3), then the same over columns.
    s0 = xp.add(prod[0], prod[1], out=bufs[7])
    s0 += prod[2]
    s1 = xp.subtract(prod[1], prod[2], out=bufs[8])
    s1 -= prod[3]
    tiles = bufs[9] if bufs[9] is not None else xp.empty((n, th, 2, tw, 2, m), dtype=x.dtype)
    for p, s in enumerate((s0, s1)):  # tiles: (n, i, p, j, q, M)
        y0, y1 = tiles[:, :, p, :, 0], tiles[:, :, p, :, 1]
        xp.add(s[0], s[1], out=y0)
        y0 += s[2]
        xp.subtract(s[1], s[2], out=y1)
        y1 -= s[3]
    grid = tiles.reshape(n, 2 * th, 2 * tw, m)[:, :oh, :ow]
    return xp.ascontiguousarray(grid.transpose(0, 3, 1, 2))


def _winograd_compiled(xp, pad, u, bias, out, bufs, transforms):
    """:func:`_conv_winograd` past the padded input, with the provider's compiled transforms:
    the tiles, their products, the output tiles by output row and column parity, then each
    parity's outputs copied into place (cropped to ``out``)."""
    n, c, m = pad.shape[0], pad.shape[-1], u.shape[2]
    th, tw = (pad.shape[1] - 2) // 2, pad.shape[3] - 1
    shape = (16, n * th * tw, c)
    v = bufs[5].reshape(shape) if bufs[5] is not None else xp.empty(shape, dtype=pad.dtype)
    transforms.input(pad, v)
    prod = xp.matmul(v, u, out=bufs[6])  # (16, tiles, M)
    if bias is not None:  # product (1, 1) reaches each of the four outputs with weight 1
        prod[5] += bias
    shape = (n, th, 2, 2, tw, m)
    tiles = bufs[9].reshape(shape) if bufs[9] is not None else xp.empty(shape, dtype=pad.dtype)
    transforms.output(prod, tiles)
    y = xp.empty((n, m) + tuple(out), dtype=pad.dtype)
    for p in (0, 1):
        for r in (0, 1):
            part = y[:, :, p::2, r::2]
            part[...] = tiles[:, :, p, r].transpose(0, 3, 1, 2)[:, :, :part.shape[2],
                                                               :part.shape[3]]
    return y


SCRATCH_ALIGN = 64  # bytes: each buffer carved from a workspace starts on a cache line


def _aligned(nbytes):
    return -(-nbytes // SCRATCH_ALIGN) * SCRATCH_ALIGN


def carve(workspace, shapes, dtype):
    """Arrays of ``shapes`` and ``dtype`` one after the other in the host's workspace, or
    ``None`` when there is none or it is too small."""
    if workspace is None:
        return None
    sizes = [_aligned(math.prod(shape) * dtype.itemsize) for shape in shapes]
    if workspace.nbytes < sum(sizes):
        return None
    out, at = [], 0
    for shape, size in zip(shapes, sizes, strict=True):
        count = math.prod(shape)
        out.append(workspace[at:at + count * dtype.itemsize].view(dtype).reshape(shape))
        at += size
    return out


# Compiled direct loops (a provider's ``xp.grouped_conv2d``) against the numpy variants, one
# thread, 3x3: depthwise 4-40x faster (144 channels at 56 x 56: 0.31 against 1.5 ms; 7x7 at 56 x
# 56: 0.70 against 11 ms); 8 channels per group 1.6-1.8x, 16 per group 2x (128 at 28 x 28: 0.68
# against 1.4 ms); from 32 per group the GEMMs win (256 at 14 x 14: 0.79 against 0.66 ms).
DIRECT_MAX_GROUP_CHANNELS = 16


def _may_run_direct(w_shape, group):
    """Whether a weight of this shape is one the ``direct`` variant takes (where compiled)."""
    return (group > 1 and len(w_shape) == 4 and w_shape[1] <= DIRECT_MAX_GROUP_CHANNELS
            and math.prod(w_shape[2:]) > 1)


def _conv_variant(c, m, group, kernel, out, strides, dilations, begin, end, direct=False,
                  reached=None):
    """The variant for this geometry, with the reason template and its arguments; ``direct``:
    the provider's namespace has compiled loops for this weight (see :func:`_may_run_direct`);
    ``reached``: how many taps read the input and how many (tap, output) pairs they make
    (``reached_count``) where the geometry may take ``tapwise``, else ``None``."""
    if direct:
        return "direct", "group {} ({} input and {} output channels per group): direct loops " \
            "over {} taps, compiled", (group, c // group, m // group, math.prod(kernel))
    if reached is not None:
        window = math.prod(kernel) * math.prod(out)
        taps, read = reached
        reach = read / window
        skipped = (window - read) * (c // group) * m
        if reach <= TAPWISE_MAX_REACH and skipped >= taps * TAPWISE_CALL_MACS:
            return "tapwise", "{:.0%} of the window's multiplies read the input, the rest its " \
                "padding (dilations {}): one GEMM per tap over the outputs it reaches", (
                    reach, dilations)
    tiles = _winograd_tiles(c, m, group, kernel, out, strides, dilations)
    if tiles:
        return "winograd", "3x3, stride 1, {} input and {} output channels: Winograd " \
            "F(2x2, 3x3), 16 GEMMs over {} tiles with 2.25x fewer multiplies than im2col", (
                c, m, tiles)
    if all(k == 1 for k in kernel) and not any(begin) and not any(end):
        return "1x1", "1x1 kernel without padding: one GEMM per group on the input{}", (
            "" if all(s == 1 for s in strides) else f" subsampled by strides {strides}",)
    # With strides the tap views are strided and im2col's small per-channel GEMMs ran faster
    # (0.61 against 1.03 ms on 112 channels of 56 x 56, stride 2).
    if group == c and group > 1 and all(s == 1 for s in strides):
        return "depthwise", "group == channels ({}), stride 1: per-channel multiply-adds over " \
            "{} taps", (c, math.prod(kernel))
    mg, cg = m // group, c // group
    if all(s == 1 for s in strides) and (mg <= SHIFTED_NARROW_OUT or (
            cg >= SHIFTED_MIN_DEPTH and mg <= SHIFTED_MAX_OUT)):
        rows = [o + (k - 1) * d for o, k, d in zip(out[1:], kernel[1:], dilations[1:],
                                                   strict=True)]
        waste = math.prod(rows) / max(math.prod(out[1:]), 1)
        if waste <= SHIFTED_WASTE:
            return "shifted", "stride 1, {} input and {} output channels per group, padded " \
                "rows {:.2f}x the output's: one GEMM per tap on shifted views of the flat " \
                "padded input, no im2col", (cg, mg, waste)
    return "im2col", "strides {}, kernel {}: im2col copy and one GEMM per group", (strides,
                                                                                   kernel)


# A wide dilation on a small input puts most taps in the padding (DeepLabV3's atrous 3x3 convs,
# dilation 12, 24 and 36 on 33 x 33: 57%, 27% and 11% of the multiplies read the input; at 36
# only the centre tap does). One GEMM per tap over the box of outputs it reaches skips the rest,
# at the cost of a copy of each partial tap's input and an add into its box.
# Measured one thread against im2col: 960 -> 256 channels at 33 x 33, 54 -> 35 ms (dilation 12),
# 56 -> 15 (24), 65 -> 5.7 (36); 3x3 on 256 channels at 2 x 2 0.30 -> 0.09 ms, 512 at 1 x 1 0.18
# -> 0.05 ms; slower where a few skipped multiplies pay for many small GEMMs (64 channels at 6
# x 6, dilation 2: 0.082 -> 0.094 ms), hence a floor on what skipping saves per GEMM.
TAPWISE_MAX_REACH = 0.75
TAPWISE_MIN_DEPTH = 8  # input channels per group: the GEMMs' depth
TAPWISE_CALL_MACS = 1 << 17  # multiply-adds skipped per GEMM at least (a call's overhead)
# Spatial axes at most: the variant keeps a second copy of the weights in tap order, which a
# 3-D convolution's many taps make big (R3D-18's 512-channel 3x3x3 convs on one frame: 28 MB
# each, its peak RSS 373 -> 401 MB) for little time saved there.
TAPWISE_MAX_AXES = 2


def _conv_tapwise(xp, x, taps, plan):
    """One GEMM per reached tap (``plan.reached``, the taps whose box covers every output
    first): ``taps`` (taps, group, M/group, C/group) times the input the tap reads in its box,
    written or added into the output."""
    n = x.shape[0]
    _, group, mg, cg = taps.shape
    lead = (slice(None), slice(None))
    y = None
    for index, box, source, size in plan.reached:
        part = xp.matmul(taps[index], x[lead + source].reshape(n, group, cg, size))
        part = part.reshape((n, group * mg) + tuple(b.stop - b.start for b in box))
        if y is None:
            if size == math.prod(plan.out):
                y = part
                continue
            y = xp.zeros((n, group * mg) + tuple(plan.out), dtype=part.dtype)
        y[lead + box] += part
    return y


class FlatGeometry:
    """A stride-1 Conv's input zero-padded with its spatial axes flattened into one, so that each
    kernel tap reads a shifted view: the buffer's shape (n, c, flat + tail), where the input goes
    in it, each tap's offset (in the weight's tap order), the length of a view (the output's
    first axis times the padded size of the others), and how to cut the outputs computed on the
    padded row grid to the output's shape."""

    __slots__ = ("shape", "inner", "place", "offsets", "length", "steps", "grid", "crop")

    def __init__(self, x_shape, begin, end, kernel, out, dilations):
        n, c = x_shape[:2]
        full = tuple(s + b + e for s, b, e in zip(x_shape[2:], begin, end, strict=True))
        self.steps = tuple(math.prod(full[i + 1:]) for i in range(len(full)))
        self.offsets = tuple(
            sum(k * d * st for k, d, st in zip(tap, dilations, self.steps, strict=True))
            for tap in itertools.product(*(range(k) for k in kernel)))
        self.length = out[0] * self.steps[0]
        size = math.prod(full)
        self.shape = (n, c, max(size, self.offsets[-1] + self.length))
        self.inner = (slice(None), slice(None), slice(0, size)), (n, c) + full
        self.place = (Ellipsis,) + tuple(slice(b, b + s) for b, s in zip(begin, x_shape[2:],
                                                                          strict=True))
        self.grid = (out[0],) + full[1:]
        self.crop = (Ellipsis,) + tuple(slice(0, o) for o in out[1:])

    def fill(self, xp, x):
        """The padded buffer holding ``x``."""
        buf = xp.zeros(self.shape, dtype=x.dtype)
        index, shape = self.inner
        buf[index].reshape(shape)[self.place] = x
        return buf

    def cut(self, y, lead):
        """Outputs ``y`` computed on the padded row grid, cut to the output's spatial shape."""
        return y.reshape(lead + self.grid)[self.crop]


def _conv_shifted(xp, x, weights, group, flat):
    n = x.shape[0]
    _, g, mg, cg = weights.shape
    offsets, length = flat.offsets, flat.length
    src = flat.fill(xp, x).reshape(n, group, cg, -1)
    y = xp.matmul(weights[0], src[..., offsets[0]:offsets[0] + length])
    tmp = xp.empty_like(y)
    for t in range(1, len(offsets)):
        o = offsets[t]
        xp.matmul(weights[t], src[..., o:o + length], out=tmp)
        y += tmp
    return flat.cut(y, (n, g * mg))


def _conv_depthwise(xp, x, weights, plan):
    """group == C: output channel ``i * k + j`` is input channel ``i`` convolved with its
    ``j``-th filter. With stride 1 and one filter per channel, each tap reads the channel's flat
    padded input shifted by one offset, so the taps are one strided view (n, c, taps, length)
    and the conv is a batched (1 x taps) @ (taps x length) product per channel: one copy and
    one matmul (measured on shufflenet's 3x3 layers: 12% less whole-model time than a multiply
    and an add per tap over spread weights). Otherwise a multiply and an add per tap."""
    n, c = x.shape[:2]
    taps, _, k = weights.taps.shape[:3]
    kernel, out, strides, dilations = plan.kernel, plan.out, plan.strides, plan.dilations
    flat = plan.flat
    if flat is not None:  # one filter per channel, stride 1
        buf = flat.fill(xp, x)
        item = buf.strides[-1]
        view = xp.lib.stride_tricks.as_strided(
            buf, shape=(n, c) + kernel + (flat.length,),
            strides=buf.strides[:2] + tuple(d * st * item for d, st in zip(
                dilations, flat.steps, strict=True)) + (item,))
        cols = view.reshape(n, c, taps, flat.length)  # the copy: each row a contiguous run
        y = xp.matmul(weights.per_channel(xp), cols)
        return flat.cut(y.reshape(n, c, flat.length), (n, c))
    padded = pad_spatial(xp, x, plan.begin, plan.end)
    views = [padded[tap_slices(tap, out, strides, dilations)][:, :, None]
             for tap in itertools.product(*(range(kk) for kk in kernel))]
    w = weights.spread(xp, tuple(out))
    if w is None:
        w = weights.taps.reshape((taps, c, k) + (1,) * len(kernel))
    y = acc = xp.empty((n, c, k) + tuple(out), dtype=x.dtype)
    xp.multiply(views[0], w[0], out=acc)
    tmp = xp.empty(acc.shape, dtype=x.dtype)
    for t in range(1, taps):
        xp.multiply(views[t], w[t], out=tmp)
        acc += tmp
    return y.reshape((n, c * k) + tuple(out))


def _conv_im2col(xp, x, weights, group, kernel, out, strides, dilations, begin, end,
                 workspace=None, columns=None):
    """im2col's copy and one GEMM per group; ``columns``: the provider's compiled copy of the
    columns (``xp.im2col_columns``, see :class:`ConvPlan`), else numpy pads and copies."""
    n, c = x.shape[:2]
    into = scratch(workspace, (n, c) + tuple(kernel) + tuple(out), x.dtype)
    if columns is not None:
        cols = into if into is not None else xp.empty((n, c) + tuple(kernel) + tuple(out),
                                                      dtype=x.dtype)
        columns(xp.ascontiguousarray(x), cols, kernel, strides, dilations, begin)
        cols = cols.reshape(n, group, weights.shape[-1], math.prod(out))
        return xp.matmul(weights, cols)
    padded = pad_spatial(xp, x, begin, end)
    if strides[-1] > 1 and kernel[-1] >= STRIDED_COLUMNS_MIN_KERNEL:
        cols = _strided_columns(xp, padded, kernel, out, strides, dilations, into)
    else:
        st = padded.strides
        view = xp.lib.stride_tricks.as_strided(
            padded,
            shape=(n, c) + kernel + out,
            strides=st[:2]
            + tuple(a * d for a, d in zip(st[2:], dilations, strict=True))
            + tuple(a * s for a, s in zip(st[2:], strides, strict=True)),
        )
        if into is None:
            cols = view  # copied by the reshape below
        else:
            into[...] = view  # the im2col copy, into the host's workspace
            cols = into
    cols = cols.reshape(n, group, weights.shape[-1], math.prod(out))  # the im2col copy
    return xp.matmul(weights, cols)


def scratch(workspace, shape, dtype):
    """The first bytes of the host's workspace (a ``uint8`` array) as an array of ``shape`` and
    ``dtype``, or ``None`` when there is none or it is too small (shapes the model did not
    state): the caller then allocates."""
    bufs = carve(workspace, (shape,), dtype)
    return None if bufs is None else bufs[0]


def conv_workspace(xp, inputs, *, group=1, auto_pad="NOTSET", dilations=None, pads=None,
                   strides=None, **_):
    """The scratch memory a Conv of static input and weight shapes computes in on every run:
    Winograd's buffers, im2col's columns, or a strided 1x1's subsampled input; ``None`` for
    the other variants."""
    x, w = inputs[0], inputs[1]
    if x is None or w is None or x[0] is None or x[1] is None or w[1] is None:
        return None
    (x_dtype, x_shape), w_shape = x, w[1]
    if len(x_shape) < 3 or len(w_shape) != len(x_shape) or not all(
            isinstance(d, int) and d > 0 for d in (*x_shape, *w_shape)):
        return None
    work = _conv_work_type(xp, xp.dtype(x_dtype))
    try:
        plan = conv_plan(xp, tuple(x_shape), tuple(w_shape), group, auto_pad, dilations, pads,
                         strides, work)
    except (ValueError, ZeroDivisionError, IndexError):  # refused by the run, with its error
        return None
    n, c = x_shape[:2]
    item = xp.dtype(work).itemsize
    if plan.variant == "winograd":
        shapes = winograd_buffers(n, c, w_shape[0], plan.out)
        return Workspace(sum(_aligned(math.prod(shape) * item) for shape in shapes), "run")
    if plan.variant == "im2col":
        count = n * c * math.prod(plan.kernel) * math.prod(plan.out)
    elif plan.variant == "1x1" and any(s != 1 for s in plan.strides):
        count = n * c * math.prod(plan.out)
    else:
        return None
    return Workspace(count * item, "run")


# Split by phase, a strided last axis copies faster from a kernel this wide: measured one
# thread, 7x7 stride 2 on 3 x 224 x 224 0.37 against 0.60 ms; 3x3 stride 2 lost (0.31 against
# 0.21 ms on 256 x 28 x 28: the phase copy and a copy per tap cost more than they save).
STRIDED_COLUMNS_MIN_KERNEL = 5
# The provider's compiled copy of 2-D columns with a column stride of 2 (``xp.im2col_columns``)
# from rows of this many outputs: 1.1-1.9x as fast as numpy's pad and copy from 56, slower on
# shorter rows (see ep_host_cpu.im2col).
COMPILED_COLUMNS_MIN_WIDTH = 56


def _strided_columns(xp, padded, kernel, out, strides, dilations, into=None):
    """im2col's columns (n, c, *kernel, *out) when the last axis has a stride: that axis split
    by phase first (phase[..., q, j] = padded[..., s * j + q]), so that each tap along it copies
    contiguous runs instead of every s-th element. ``into``: where to write them, if given."""
    n, c = padded.shape[:2]
    s, d, k = strides[-1], dilations[-1], kernel[-1]
    width = padded.shape[-1]
    span = -(-width // s)
    phase = xp.empty(padded.shape[:-1] + (s, span), dtype=padded.dtype)
    for q in range(s):
        part = padded[..., q::s]
        phase[..., q, :part.shape[-1]] = part
    cols = into if into is not None else xp.empty((n, c) + tuple(kernel) + tuple(out),
                                                  dtype=padded.dtype)
    st = phase.strides
    lead = len(kernel) - 1
    for t in range(k):
        q, j0 = divmod(t * d, s)[::-1]
        src = phase[..., q, j0:]
        view = xp.lib.stride_tricks.as_strided(
            src, shape=(n, c) + tuple(kernel[:-1]) + tuple(out),
            strides=st[:2] + tuple(a * dd for a, dd in zip(st[2:2 + lead], dilations[:-1],
                                                           strict=True))
            + tuple(a * ss for a, ss in zip(st[2:2 + lead], strides[:-1], strict=True))
            + (st[-1],))
        cols[(slice(None), slice(None)) + (slice(None),) * lead + (t,)] = view
    return cols


@kernel("Conv", 1, 11, dtypes=FLOATS, check=check_conv, flops=conv_flops,
        prepare=prepare_conv, family="conv", workspace=conv_workspace)
@kernel("Conv", 22, dtypes=FLOATS_BF16, check=check_conv, flops=conv_flops,
        prepare=prepare_conv, family="conv", workspace=conv_workspace)
def conv(xp, x, w, b=None, *, auto_pad, group, dilations=None, kernel_shape=None, pads=None,
         strides=None, packed=None, packed_bias=None, workspace=None):
    """Variants by geometry (recorded on the trace span): ``direct`` (depthwise and grouped,
    where the provider's namespace compiles them), ``1x1``, ``depthwise``, ``shifted`` (stride
    1: a GEMM per tap on shifted views), ``winograd`` (3x3, stride 1, 32+ channels),
    ``tapwise`` (a GEMM per tap over the outputs it reaches, where most taps read padding) and
    ``im2col``; ``packed``/``packed_bias`` are the constant weight and bias prepared once (see
    :class:`ConvWeights`), which also keep the :class:`ConvPlan` per input shape;
    ``workspace``: the host's scratch memory for im2col's columns (:func:`conv_workspace`)."""
    return convolve(xp, x, w, b, auto_pad=auto_pad, group=group, dilations=dilations,
                    pads=pads, strides=strides, packed=packed, packed_bias=packed_bias,
                    workspace=workspace)[0]


def convolve(xp, x, w, b=None, *, auto_pad, group, dilations, pads, strides, packed, packed_bias,
             activation=None, workspace=None, residual=None):
    """:func:`conv`'s work, plus ``residual`` (an array of the output's shape, FusedConv's Z)
    where given, and whether ``activation``, a fused activation as ``(kind, p, q)`` (``"clip"``
    with bounds p, q; ``"hard_sigmoid"`` or ``"hard_swish"`` with alpha p and beta q), was
    applied too: ``(y, activated)``. The ``direct`` variant applies it in the same pass (when
    there is no residual), the GEMM variants where the provider's ``xp.conv_epilogue`` adds
    their bias and residual; otherwise the caller applies its activation to ``y``, a fresh
    array. The residual is added after the bias, as an Add after the Conv would."""
    dtype = x.dtype
    work = _conv_work_type(xp, dtype)
    x = x.astype(work, copy=False)
    weights = packed if packed is not None else ConvWeights(xp, w, group)
    if b is not None:
        b = packed_bias if packed_bias is not None else b.astype(work, copy=False)
    plan = weights.plans.get(x.shape)  # the weights are one node's: its attributes are fixed
    if plan is None:
        plan = conv_plan(xp, x.shape, w.shape, group, auto_pad, dilations, pads, strides, work)
        if len(weights.plans) < 8:  # a model runs a few input shapes; do not grow forever
            weights.plans[x.shape] = plan
    variant, out = plan.variant, plan.out
    record_kernel_variant(variant, plan.reason, *plan.args)
    if residual is not None:
        if residual.shape != x.shape[:1] + (w.shape[0],) + out:
            raise ValueError(f"the residual has shape {tuple(residual.shape)}, the output "
                             f"{x.shape[:1] + (w.shape[0],) + out}")
        residual = residual.astype(work, copy=False)
    if variant == "winograd":  # its output transform adds the bias
        y = _conv_winograd(xp, x, weights.winograd(xp), b, out, plan.begin, workspace,
                           plan.transforms)
        if plan.epilogue is not None and residual is not None and y.flags.c_contiguous:
            plan.epilogue(y, None, activation, residual)
            return y.astype(dtype, copy=False), activation is not None
        if residual is not None:
            y += residual
        return y.astype(dtype, copy=False), False
    n, c = x.shape[:2]
    m = w.shape[0]
    if variant == "direct":
        y = xp.empty((n, m) + out, dtype=work)
        bias = b if b is not None else weights.zero_bias(xp)
        in_loop = activation if residual is None else None
        xp.grouped_conv2d(xp.ascontiguousarray(x), weights.direct(), bias, y, plan.direct,
                          group, in_loop)
        if residual is not None:
            y += residual
        return y.astype(dtype, copy=False), in_loop is not None
    if variant == "1x1":
        picked = x if plan.picked is None else x[plan.picked]
        into = None if picked.flags.c_contiguous else scratch(workspace, picked.shape,
                                                                 picked.dtype)
        if into is not None:  # a strided 1x1's subsample, copied into the host's workspace
            into[...] = picked
            picked = into
        # the output made here and written through a view: it owns its memory, so the host may
        # hand it to the next kernel to write into (an in-place SiLU, Add; a view it may not)
        y = xp.empty((n, m) + out, dtype=xp.result_type(weights.gemm.dtype, picked.dtype))
        columns = picked.reshape(n, group, c // group, math.prod(out))
        rows = y.reshape(n, group, m // group, math.prod(out))
        if weights.same_rows():
            rows[...] = xp.matmul(weights.gemm[:, :1], columns)
        else:
            xp.matmul(weights.gemm, columns, out=rows)
    elif variant == "depthwise":
        y = _conv_depthwise(xp, x, weights, plan)
    elif variant == "shifted":
        y = _conv_shifted(xp, x, weights.taps, group, plan.flat)
    elif variant == "tapwise":
        y = _conv_tapwise(xp, x, weights.taps, plan)
    else:
        y = _conv_im2col(xp, x, weights.gemm, group, plan.kernel, out, plan.strides,
                         plan.dilations, plan.begin, plan.end, workspace, plan.columns)
    if y.shape != (n, m) + out:
        y = y.reshape((n, m) + out)
    epilogue = plan.epilogue
    if epilogue is not None and (b is not None or activation is not None
                                 or residual is not None) and y.flags.c_contiguous:
        epilogue(y, b, activation, residual)
        return y.astype(dtype, copy=False), activation is not None
    if b is not None:
        bias = b.reshape(plan.bias_shape)
        if y.flags.c_contiguous:  # our own buffer
            y += bias
        else:  # a cropped grid: adding the bias makes it contiguous in the same pass
            y = y + bias
    if residual is not None:
        if y.flags.c_contiguous:
            y += residual
        else:
            y = y + residual
    elif not y.flags.c_contiguous and work == dtype:
        y = xp.ascontiguousarray(y)
    return y.astype(dtype, copy=False), False


PLANS_KEPT = 512
_PLANS: dict[tuple, tuple[object, ConvPlan]] = {}  # key -> (the provider's namespace, plan)
_PLANS_LOCK = threading.Lock()


def conv_plan(xp, x_shape, w_shape, group, auto_pad, dilations, pads, strides, work) -> ConvPlan:
    """The :class:`ConvPlan` of these shapes and attributes, made once per process while the
    provider's compiled loops it asked about answer as they did: a plan depends on nothing
    else, and models repeat a conv's geometry (DenseNet-121: 66 for 120 convs,
    ShuffleNet: 16 for 56), each plan 30-45 us to make. The oldest go past ``PLANS_KEPT``."""
    key = (id(xp), tuple(x_shape), tuple(w_shape), group, auto_pad,
           None if dilations is None else tuple(dilations), None if pads is None else tuple(pads),
           None if strides is None else tuple(strides), work)  # a dtype (or numpy type)
    found = _PLANS.get(key)
    # held with the plan, ``xp`` keeps its id from being reused
    if found is not None and found[0] is xp and found[1].still_holds(work):
        return found[1]
    plan = ConvPlan(xp, x_shape, w_shape, group, auto_pad, dilations, pads, strides, work)
    with _PLANS_LOCK:  # sessions create kernels and run in threads
        if len(_PLANS) >= PLANS_KEPT:
            del _PLANS[next(iter(_PLANS))]
        _PLANS[key] = (xp, plan)
    return plan


class ConvPlan:
    """A Conv's work for one input shape, worked out once and kept on its prepared weights (a
    Python-level cost of about 50 us per call otherwise): output size and padding, the variant
    and its reason, the flat padded geometry the stride-1 variants read, the ``direct``
    variant's buffer geometry (from the provider's ``xp.grouped_conv2d.geometry``), a strided
    1x1's subsample (``picked``, ``None`` without strides), the provider's bias and activation
    pass for the GEMM variants (``epilogue``: its ``xp.conv_epilogue`` where that is ready for
    the compute type when the plan is made, else ``None``; asking on every run cost 2 us) and
    its compiled copy of im2col's columns (``columns``: ``xp.im2col_columns`` for 2-D, a column
    stride of 2 and rows of :data:`COMPILED_COLUMNS_MIN_WIDTH` outputs, where ready);
    ``reached``: for ``tapwise``, the taps that read the input (``reached_taps``), those that
    reach every output first; ``transforms``: for ``winograd``, the provider's compiled input
    and output transforms (``xp.winograd_transforms``), where ready."""

    __slots__ = ("kernel", "strides", "dilations", "out", "begin", "end", "variant", "reason",
                 "args", "flat", "direct", "picked", "bias_shape", "epilogue", "columns",
                 "reached", "transforms", "asked")

    def __init__(self, xp, x_shape, w_shape, group, auto_pad, dilations, pads, strides, work):
        self.asked: list[tuple[object, bool]] = []  # (compiled loop, whether ready) as asked
        n_spatial = len(x_shape) - 2
        self.kernel = kernel = tuple(w_shape[2:])
        self.strides, self.dilations = strides_and_dilations(n_spatial, strides, dilations)
        self.out, self.begin, self.end = window_geometry(x_shape[2:], kernel, self.strides,
                                                         self.dilations, pads, auto_pad)
        c, m = x_shape[1], w_shape[0]
        loops = getattr(xp, "grouped_conv2d", None)
        compiled = (loops is not None and _may_run_direct(w_shape, group)
                    and self._ready(loops, work))
        # without padding every tap reads the input
        may_skip = (not compiled and n_spatial <= TAPWISE_MAX_AXES
                    and c // group >= TAPWISE_MIN_DEPTH and (any(self.begin) or any(self.end)))
        # counted first, listed only for tapwise (listing took 19 us of a 3x3's 45 us plan)
        counted = reached_count(x_shape[2:], kernel, self.out, self.strides, self.dilations,
                                self.begin) if may_skip else None
        self.variant, self.reason, self.args = _conv_variant(
            c, m, group, kernel, self.out, self.strides, self.dilations, self.begin, self.end,
            compiled, counted)
        whole = math.prod(self.out)  # the taps that reach every output go first
        self.reached = sorted(
            reached_taps(x_shape[2:], kernel, self.out, self.strides, self.dilations,
                         self.begin), key=lambda r: r[3] != whole) \
            if self.variant == "tapwise" else None
        one_filter = self.variant == "depthwise" and w_shape[0] == c and all(
            s == 1 for s in self.strides)
        self.flat = FlatGeometry(x_shape, self.begin, self.end, kernel, self.out,
                                 self.dilations) if self.variant == "shifted" or one_filter \
            else None
        self.direct = loops.geometry(x_shape, w_shape, self.strides, self.dilations,
                                      self.begin, self.end, self.out, dtype=work) \
            if self.variant == "direct" else None
        self.picked = None if all(s == 1 for s in self.strides) else tap_slices(
            (0,) * n_spatial, self.out, self.strides, self.dilations)
        self.bias_shape = (m,) + (1,) * n_spatial
        epilogue = getattr(xp, "conv_epilogue", None)  # the provider's one pass (the CPU EP's)
        self.epilogue = epilogue if epilogue is not None and self.variant != "direct" \
            and self._ready(epilogue, work) else None  # Winograd's only with a residual
        transforms = getattr(xp, "winograd_transforms", None)
        self.transforms = transforms if transforms is not None and self.variant == "winograd" \
            and self._ready(transforms, work) else None
        columns = getattr(xp, "im2col_columns", None)
        self.columns = columns if columns is not None and self.variant == "im2col" and (
            n_spatial == 2 and self.strides[1] == 2
            and self.out[1] >= COMPILED_COLUMNS_MIN_WIDTH) and self._ready(columns, work) \
            else None


    def _ready(self, loop, work) -> bool:
        ready = bool(loop.ready(work))
        self.asked.append((loop, ready))
        return ready

    def still_holds(self, work) -> bool:
        """Whether each compiled loop the plan asked about answers as it did (one is not used
        where numba is switched off since, ``EP_HOST_NUMBA=0``)."""
        return all(bool(loop.ready(work)) is ready for loop, ready in self.asked)


# -- ConvInteger ------------------------------------------------------------------------------


def _check_conv_integer(node, provider):
    check_conv(node, provider)
    x_zp = node.inputs[2] if len(node.inputs) > 2 else None
    w_zp = node.inputs[3] if len(node.inputs) > 3 else None
    require(x_zp is None or x_zp.shape is None or len(x_zp.shape) == 0 or
            (len(x_zp.shape) == 1 and x_zp.shape[0] == 1),
            "ConvInteger: x_zero_point must be a scalar (per-tensor), got shape {}",
            x_zp and x_zp.shape, code="shape")
    require(w_zp is None or w_zp.shape is None or len(w_zp.shape) <= 1,
            "ConvInteger: w_zero_point must be a scalar or one value per output channel, got "
            "shape {}", w_zp and w_zp.shape, code="shape")
    for value in (x_zp, w_zp):
        if value is not None and value.dtype is not None:
            main = node.inputs[2 if value is x_zp else 1]
            require(main is None or main.dtype is None or value.dtype == main.dtype,
                    "ConvInteger: {!r} must have its tensor's type {}, got {}", value.name,
                    main.dtype, value.dtype, code="dtype")


@kernel("ConvInteger", 10, dtypes={"int8", "uint8"}, check=_check_conv_integer,
        flops=conv_flops, family="conv")
def conv_integer(xp, x, w, x_zero_point=None, w_zero_point=None, *, auto_pad, group,
                 dilations=None, kernel_shape=None, pads=None, strides=None):
    """Convolves (x - x_zero_point) with (w - w_zero_point), so padding contributes 0; sums in
    int64 and wraps to int32, as a 32-bit accumulator would."""
    xi = x.astype(xp.int64)
    wi = w.astype(xp.int64)
    if x_zero_point is not None:
        xi = xi - x_zero_point.astype(xp.int64).reshape(())
    if w_zero_point is not None:
        wz = w_zero_point.astype(xp.int64)
        wi = wi - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.size > 1 else wz.reshape(()))
    y = conv(xp, xi, wi, None, auto_pad=auto_pad, group=group, dilations=dilations,
             kernel_shape=kernel_shape, pads=pads, strides=strides)
    return y.astype(xp.int32)


# -- CausalConvWithState ----------------------------------------------------------------------

ACTIVATIONS = ("none", "silu", "swish")


def _check_causal_conv(node, provider):
    activation = node.attributes["activation"]
    require(activation in ACTIVATIONS, "CausalConvWithState: activation must be one of {}, got "
            "{!r}", "/".join(ACTIVATIONS), activation, code="attribute")
    x, w = node.inputs[:2]
    for value, want in ((x, 3), (w, 3)):
        rank = None if value is None or value.shape is None else len(value.shape)
        require(rank in (None, want), "CausalConvWithState: {!r} must be rank {}, got {}",
                value.name, want, rank, code="shape")
    if w is not None and w.shape is not None and len(w.shape) == 3:
        require(w.shape[1] in (1, None) or not isinstance(w.shape[1], int),
                "CausalConvWithState: the weight is depthwise (channels, 1, k), got {}",
                w.shape, code="shape")


@kernel("CausalConvWithState", 27, dtypes=FLOATS_BF16 - {"float64"}, check=_check_causal_conv)
def causal_conv_with_state(xp, x, weight, bias=None, past_state=None, *, activation):
    dtype = x.dtype
    b, c, length = x.shape
    k = weight.shape[-1]
    if past_state is None:
        past_state = xp.zeros((b, c, k - 1), dtype=dtype)
    sequence = xp.concatenate([past_state.astype(dtype, copy=False), x], axis=-1)
    seq = sequence.astype(xp.float32)
    w = weight.astype(xp.float32).reshape(c, k)
    y = xp.zeros((b, c, length), dtype=xp.float32)
    for j in range(k):
        y += w[:, j][None, :, None] * seq[..., j:j + length]
    if bias is not None:
        y += bias.astype(xp.float32)[None, :, None]
    if activation != "none":
        e = xp.exp(-xp.abs(y))
        y = y * xp.where(y >= 0, 1 / (1 + e), e / (1 + e))
    return y.astype(dtype), sequence[..., length:]
