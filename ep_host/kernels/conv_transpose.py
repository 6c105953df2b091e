"""Transposed and deformable convolution: ConvTranspose (one GEMM, then a scatter-add per
kernel tap) and DeformConv (multilinear sampling at the offset taps, then one GEMM)."""

from __future__ import annotations

import itertools
import math

from ep_host import element_count, require
from ep_host.kernels.conv import conv_flops
from ep_host.kernels.conv_geometry import (
    check_window_attributes,
    check_window_geometry,
    input_rank,
    pad_spatial,
    strides_and_dilations,
    tap_slices,
    window_geometry,
)
from ep_host.kernels.registry import FLOATS, FLOATS_BF16, kernel

# -- ConvTranspose ----------------------------------------------------------------------------


def _transpose_pads(spatial, kernel, strides, dilations, output_padding, pads, auto_pad,
                    output_shape):
    """Per spatial axis: the full (unpadded) output size, begin and end pads. A negative pad
    extends the output with zeros on that side."""
    n = len(spatial)
    output_padding = output_padding or (0,) * n
    full = [s * (i - 1) + op + (k - 1) * d + 1 for i, k, s, d, op in
            zip(spatial, kernel, strides, dilations, output_padding, strict=True)]
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = output_shape or [i * s for i, s in zip(spatial, strides, strict=True)]
        begin, end = [], []
        for f, t in zip(full, target, strict=True):
            total = f - t
            b = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            begin.append(b)
            end.append(total - b)
        return full, begin, end
    if auto_pad == "VALID" or not pads:
        return full, [0] * n, [0] * n
    return full, list(pads[:n]), list(pads[n:])


def _check_conv_transpose(node, provider):
    attrs = node.attributes
    x, w = node.inputs[0], node.inputs[1]
    rank = input_rank(node)
    require(rank is None or rank >= 3, "ConvTranspose: {} takes input of rank >= 3 (N, C, "
            "D1...), got rank {}", provider, rank, code="shape")
    w_shape = w.shape if w is not None else None
    require(rank is None or w_shape is None or len(w_shape) == rank, "ConvTranspose: the "
            "weight's rank must equal the input's ({}), got {}", rank, w_shape, code="shape")
    n_spatial = rank - 2 if rank is not None else None if w_shape is None else len(w_shape) - 2
    kernel_shape = attrs.get("kernel_shape")
    check_window_attributes(node, n_spatial, kernel_shape)
    group = attrs["group"]
    require(group >= 1, "ConvTranspose: group must be >= 1, got {}", group, code="attribute")
    for name in ("output_padding", "output_shape"):
        value = attrs.get(name)
        require(value is None or n_spatial is None or len(value) == n_spatial,
                "ConvTranspose: {} needs one value per spatial axis ({}), got {}", name,
                n_spatial, value, code="attribute")
        require(value is None or all(v >= 0 for v in value), "ConvTranspose: {} must be >= 0, "
                "got {}", name, value, code="attribute")
    auto_pad = attrs.get("auto_pad", "NOTSET")
    derived = bool(attrs.get("output_shape")) or auto_pad in ("SAME_UPPER", "SAME_LOWER")
    if node.since_version < 11 and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        strides = attrs.get("strides")
        require(not strides or all(s == 1 for s in strides) or attrs.get("output_shape"),
                "ConvTranspose-1: SAME padding with strides {} is ambiguous (its text says the "
                "output matches the input, later versions input x stride); give output_shape",
                strides, code="attribute")
    if w_shape is None:
        return
    spatial = tuple(w_shape[2:])
    require(kernel_shape is None or not all(isinstance(k, int) for k in spatial)
            or tuple(kernel_shape) == spatial, "ConvTranspose: kernel_shape {} must equal the "
            "weight's spatial shape {}", kernel_shape, spatial, code="attribute")
    c = None if x is None or x.shape is None else x.shape[1]
    if isinstance(c, int) and isinstance(w_shape[0], int):
        require(c == w_shape[0], "ConvTranspose: input channels ({}) must equal the weight's "
                "first dimension ({})", c, w_shape[0], code="shape")
        require(c % group == 0, "ConvTranspose: input channels ({}) must be a multiple of group "
                "({})", c, group, code="attribute")
    x_spatial = None if x is None or x.shape is None else tuple(x.shape[2:])
    static = bool(x_spatial) and all(isinstance(d, int) for d in (*x_spatial, *spatial))
    # Version 1's text puts an odd padding pixel on the other side from version 11's.
    require(node.since_version >= 11 or not derived or static,
            "ConvTranspose-1: derived padding (auto_pad {} / output_shape) needs static shapes "
            "to rule out an odd total, whose side version 1's text and later versions place "
            "differently", auto_pad, code="shape")
    if static:
        n = len(spatial)
        full, begin, end = _transpose_pads(
            x_spatial, spatial, attrs.get("strides") or (1,) * n,
            attrs.get("dilations") or (1,) * n, attrs.get("output_padding"), attrs.get("pads"),
            auto_pad, attrs.get("output_shape"))
        sizes = [f - b - e for f, b, e in zip(full, begin, end, strict=True)]
        require(all(o >= 1 for o in sizes), "ConvTranspose: pads {} leave an empty output {}",
                attrs.get("pads"), sizes, code="attribute")
        odd = [b + e for b, e in zip(begin, end, strict=True) if (b + e) % 2]
        require(node.since_version >= 11 or not derived or not odd,
                "ConvTranspose-1: an odd total padding {} is ambiguous: version 1's text puts "
                "the extra pixel on the other side from version 11's; give explicit pads", odd,
                code="attribute")


def _conv_transpose_flops(node):
    x, w = node.inputs[0], node.inputs[1]
    if x is None or w is None or x.shape is None or w.shape is None:
        return 1.0
    return 2.0 * element_count(x.shape) * element_count(w.shape[1:])


@kernel("ConvTranspose", 1, 11, dtypes=FLOATS, check=_check_conv_transpose,
        flops=_conv_transpose_flops, family="conv")
@kernel("ConvTranspose", 22, dtypes=FLOATS_BF16, check=_check_conv_transpose,
        flops=_conv_transpose_flops, family="conv")
def conv_transpose(xp, x, w, b=None, *, auto_pad, group, dilations=None, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    dtype = x.dtype
    work = xp.float32 if dtype.itemsize < 4 else dtype
    x, w = x.astype(work), w.astype(work)
    n, c = x.shape[:2]
    spatial = x.shape[2:]
    kernel = tuple(w.shape[2:])
    m_group = w.shape[1]
    strides, dilations = strides_and_dilations(len(spatial), strides, dilations)
    full, begin, end = _transpose_pads(spatial, kernel, strides, dilations, output_padding, pads,
                                       auto_pad, output_shape)
    taps = math.prod(kernel)
    # cols[n, g, (m, tap), pixel] = sum over the group's input channels of w * x
    wt = w.reshape(group, c // group, m_group * taps).transpose(0, 2, 1)
    cols = xp.matmul(wt, x.reshape(n, group, c // group, -1))
    cols = cols.reshape((n, group * m_group) + kernel + tuple(spatial))
    canvas = xp.zeros((n, group * m_group) + tuple(full), dtype=work)
    for offsets in itertools.product(*(range(k) for k in kernel)):
        canvas[tap_slices(offsets, spatial, strides, dilations)] += cols[(slice(None),) * 2
                                                                          + offsets]
    lo = [max(0, -bg) for bg in begin]
    hi = [max(0, -e) for e in end]
    canvas = pad_spatial(xp, canvas, lo, hi)
    window = tuple(slice(bg + low, f - e + low)
                   for bg, e, f, low in zip(begin, end, full, lo, strict=True))
    y = canvas[(Ellipsis,) + window]
    if b is not None:
        y = y + b.astype(work).reshape((-1,) + (1,) * len(spatial))
    return y.astype(dtype, copy=False)


# -- DeformConv -------------------------------------------------------------------------------


def _check_deform_conv(node, provider):
    attrs = node.attributes
    x, w = node.inputs[:2]
    rank = input_rank(node)
    require(rank is None or rank >= 3, "DeformConv: input must have rank >= 3 (N, C, D1...), "
            "got rank {}", rank, code="shape")
    n_spatial = rank - 2 if rank is not None else None
    check_window_attributes(node, n_spatial, attrs.get("kernel_shape"))
    group, offset_group = attrs["group"], attrs["offset_group"]
    require(group >= 1 and offset_group >= 1, "DeformConv: group and offset_group must be >= 1, "
            "got {} and {}", group, offset_group, code="attribute")
    c = None if x is None or x.shape is None else x.shape[1]
    if isinstance(c, int):
        require(c % group == 0 and c % offset_group == 0, "DeformConv: channels ({}) must be a "
                "multiple of group ({}) and offset_group ({})", c, group, offset_group,
                code="attribute")
    if w is not None and w.shape is not None and n_spatial is not None:
        kernel = w.shape[2:]
        shape_attr = attrs.get("kernel_shape")
        require(shape_attr is None or not all(isinstance(k, int) for k in kernel)
                or tuple(shape_attr) == tuple(kernel), "DeformConv: kernel_shape {} must equal "
                "the weight's spatial shape {}", shape_attr, tuple(kernel), code="attribute")
        m = w.shape[0]
        require(not isinstance(m, int) or m % group == 0, "DeformConv: output channels ({}) "
                "must be a multiple of group ({})", m, group, code="attribute")
        if isinstance(c, int) and isinstance(w.shape[1], int):
            require(c == w.shape[1] * group, "DeformConv: input channels ({}) must equal weight "
                    "channels ({}) x group ({})", c, w.shape[1], group, code="shape")
        if all(isinstance(k, int) for k in kernel):
            taps = math.prod(kernel)
            want = {"offset": offset_group * taps * n_spatial, "mask": offset_group * taps}
            for i, name in ((2, "offset"), (4, "mask")):
                value = node.inputs[i] if len(node.inputs) > i else None
                have = None if value is None or value.shape is None else value.shape[1]
                require(not isinstance(have, int) or have == want[name], "DeformConv: {} needs "
                        "{} channels (offset_group x kernel taps{}), got {}", name, want[name],
                        " x spatial axes" if name == "offset" else "", have, code="shape")
            check_window_geometry(node, provider, kernel, clamp_same=True)
            _check_deform_output(node, kernel)


def _check_deform_output(node, kernel):
    """The offset (and mask) must cover exactly the output grid the attributes define."""
    x = node.inputs[0]
    if x is None or x.shape is None or not all(isinstance(d, int) for d in x.shape[2:]):
        return
    attrs = node.attributes
    try:
        out, _, _ = window_geometry(tuple(x.shape[2:]), kernel, attrs.get("strides"),
                                    attrs.get("dilations"), attrs.get("pads"), "NOTSET")
    except ValueError:
        return  # check_window_geometry has declined it
    for i in (2, 4):
        value = node.inputs[i] if len(node.inputs) > i else None
        if value is None or value.shape is None:
            continue
        grid = tuple(value.shape[2:])
        require(not all(isinstance(d, int) for d in grid) or grid == out,
                "DeformConv: {!r} must have the output's spatial shape {}, got {}", value.name,
                out, grid, code="shape")


def _deform_flops(node):
    return conv_flops(node) * 2


@kernel("DeformConv", 19, dtypes=FLOATS, check=_check_deform_conv, flops=_deform_flops)
@kernel("DeformConv", 22, dtypes=FLOATS_BF16, check=_check_deform_conv, flops=_deform_flops)
def deform_conv(xp, x, w, offset, b=None, mask=None, *, group, offset_group, dilations=None,
                kernel_shape=None, pads=None, strides=None):
    dtype = x.dtype
    work = xp.float32 if dtype.itemsize < 4 else dtype
    x, w, offset = x.astype(work), w.astype(work), offset.astype(work)
    n, c = x.shape[:2]
    spatial = tuple(x.shape[2:])
    ns = len(spatial)
    kernel = tuple(w.shape[2:])
    taps = math.prod(kernel)
    strides, dilations = strides_and_dilations(ns, strides, dilations)
    out, begin, _ = window_geometry(spatial, kernel, strides, dilations, pads, "NOTSET")
    if tuple(offset.shape[2:]) != out:
        raise ValueError(f"DeformConv: offset must have the output's spatial shape {out}, got "
                         f"{tuple(offset.shape[2:])}")
    pixels = math.prod(out)
    # base[i][tap, pixel]: where each tap of each output window reads, before its offset
    grid = xp.stack(xp.meshgrid(*(xp.arange(o) for o in out), indexing="ij")).reshape(ns, -1)
    tap = xp.asarray(list(itertools.product(*(range(k) for k in kernel)))).reshape(taps, ns).T
    base = [grid[i][None, :] * strides[i] - begin[i] + tap[i][:, None] * dilations[i]
            for i in range(ns)]
    shift = offset.reshape(n, offset_group, taps, ns, pixels)
    flat = x.reshape(n, offset_group, c // offset_group, -1)
    sampled = xp.zeros((n, offset_group, c // offset_group, taps * pixels), dtype=work)
    lows, fracs = [], []
    for i in range(ns):
        pos = base[i] + shift[:, :, :, i]  # (n, offset_group, taps, pixels)
        low = xp.floor(pos)
        lows.append(low.astype(xp.int64))
        fracs.append(pos - low)
    for corner in itertools.product((0, 1), repeat=ns):
        weight = xp.ones(shift.shape[:2] + (taps, pixels), dtype=work)
        index = xp.zeros(weight.shape, dtype=xp.int64)
        inside = xp.ones(weight.shape, dtype=bool)
        for i, up in enumerate(corner):
            at = lows[i] + up
            weight = weight * (fracs[i] if up else 1 - fracs[i])
            inside &= (at >= 0) & (at < spatial[i])
            index = index * spatial[i] + xp.clip(at, 0, spatial[i] - 1)
        index = index.reshape(n, offset_group, 1, -1)
        picked = xp.take_along_axis(flat, xp.broadcast_to(index, flat.shape[:3] + index.shape[3:]),
                                    axis=-1)
        sampled += picked * xp.where(inside, weight, 0).reshape(n, offset_group, 1, -1)
    sampled = sampled.reshape(n, offset_group, c // offset_group, taps, pixels)
    if mask is not None:
        sampled = sampled * mask.astype(work).reshape(n, offset_group, 1, taps, pixels)
    m = w.shape[0]
    cols = sampled.reshape(n, group, (c // group) * taps, pixels)
    y = xp.matmul(w.reshape(group, m // group, -1), cols).reshape((n, m) + tuple(out))
    if b is not None:
        y = y + b.astype(work).reshape((m,) + (1,) * ns)
    return y.astype(dtype, copy=False)


