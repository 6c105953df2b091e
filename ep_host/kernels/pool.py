"""Pooling: MaxPool and AveragePool (one pass per spatial axis), LpPool and the global pools.
Windows are strided views of an input padded so that every window lies inside it; no Python loop
runs over pixels."""

from __future__ import annotations

import itertools
import math

from ep_host import element_count, require
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

# -- MaxPool, AveragePool ---------------------------------------------------------------------


def _check_pool(node, provider, padding_windows_have_values=False):
    attrs = node.attributes
    rank = input_rank(node)
    op = node.op_type
    require(rank is None or rank >= 3, "{}: {} takes input of rank >= 3 (N, C, D1...), got "
            "rank {}", op, provider, rank, code="shape")
    kernel_shape = attrs["kernel_shape"]
    n_spatial = len(kernel_shape)
    require(rank is None or rank - 2 == n_spatial,
            "{}: kernel_shape {} needs one value per spatial axis of the rank-{} input", op,
            kernel_shape, rank, code="attribute")
    check_window_attributes(node, n_spatial, kernel_shape)
    pads = attrs.get("pads")
    if (pads is not None and attrs.get("auto_pad", "NOTSET") == "NOTSET"
            and not padding_windows_have_values):
        dilations = attrs.get("dilations") or (1,) * n_spatial
        extents = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations, strict=True)]
        require(all(p < e for p, e in zip(pads, extents + extents, strict=True)),
                "{}: {} takes pads smaller than the kernel extent {} (a window made only of "
                "padding has no value), got pads {}", op, provider, extents, pads, code="attribute")
    require(attrs.get("storage_order", 0) in (0, 1),
            "{}: storage_order must be 0 (row major) or 1 (column major), got {}", op,
            attrs.get("storage_order"), code="attribute")
    check_window_geometry(node, provider, kernel_shape, clamp_same=False)


def _pool_flops(node):
    y = node.outputs[0]
    window = math.prod(node.attributes["kernel_shape"])
    return element_count(y.shape if y is not None else None) * window


def _wants_second_output(node):
    return {"with_indices": len(node.outputs) > 1 and node.outputs[1] is not None}


def _pool_input(xp, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, fill):
    """The input padded with ``fill`` so that every output window lies inside it; the output
    size and the begin and end pads that the attributes define."""
    out, begin, end = window_geometry(x.shape[2:], kernel_shape, strides, dilations, pads,
                                      auto_pad, ceil_mode, clamp_same=False)
    return _padded(xp, x, kernel_shape, strides, dilations, out, begin, end, fill), out, begin, end


def _padded(xp, x, kernel_shape, strides, dilations, out, begin, end, fill):
    reach = [max(e, (o - 1) * s + (k - 1) * d + 1 - n - b)
             for o, s, k, d, n, b, e in zip(out, strides, kernel_shape, dilations, x.shape[2:],
                                            begin, end, strict=True)]
    return pad_spatial(xp, x, begin, reach, fill)


def _lowest(xp, dtype):
    if dtype.kind in "iu":
        return xp.iinfo(dtype).min
    return -xp.inf


@kernel("MaxPool", 1, 8, 10, 11, dtypes=FLOATS, check=_check_pool, flops=_pool_flops,
        bind=_wants_second_output, family="pool")
@kernel("MaxPool", 12, dtypes=FLOATS | {"int8", "uint8"}, check=_check_pool,
        flops=_pool_flops, bind=_wants_second_output, family="pool")
@kernel("MaxPool", 22, dtypes=FLOATS_BF16 | {"int8", "uint8"}, check=_check_pool,
        flops=_pool_flops, bind=_wants_second_output, family="pool")
def max_pool(xp, x, *, auto_pad, kernel_shape, ceil_mode=0, dilations=None, pads=None,
             storage_order=0, strides=None, with_indices=False):
    strides, dilations = strides_and_dilations(len(kernel_shape), strides, dilations)
    if not with_indices:
        compiled = _compiled_3x3(xp, "max_pool", x, kernel_shape, strides, dilations)
        if compiled is not None:
            out, begin, _ = window_geometry(x.shape[2:], kernel_shape, strides, dilations, pads,
                                            auto_pad, ceil_mode, clamp_same=False)
            return compiled(x, out, begin)
    padded, out, begin, _ = _pool_input(xp, x, kernel_shape, strides, dilations, pads, auto_pad,
                                        ceil_mode, _lowest(xp, x.dtype))
    if not with_indices:
        return _separable(xp, xp.maximum, padded, kernel_shape, out, strides, dilations)
    taps = list(itertools.product(*(range(k) for k in kernel_shape)))
    y = padded[tap_slices(taps[0], out, strides, dilations)].copy()
    best = xp.zeros(y.shape, dtype=xp.int64)
    for t, offsets in enumerate(taps[1:], start=1):
        v = padded[tap_slices(offsets, out, strides, dilations)]
        better = v > y
        y = xp.where(better, v, y)
        best = xp.where(better, t, best)
    return y, _flat_indices(xp, x.shape, best, kernel_shape, out, strides, dilations, begin,
                            storage_order)


def _compiled_3x3(xp, pool, x, kernel_shape, strides, dilations):
    """A provider's ``xp.compiled_<pool>_3x3s1`` or ``_3x3s2`` (the CPU EP's, numba) where it
    takes ``x``: float32 (N, C, H, W), not empty, a 3 x 3 window at that stride without
    dilation; else ``None``."""
    if (x.dtype != xp.float32 or x.ndim != 4 or x.size == 0 or tuple(kernel_shape) != (3, 3)
            or tuple(dilations) != (1, 1) or tuple(strides) not in ((1, 1), (2, 2))):
        return None
    compiled = getattr(xp, f"compiled_{pool}_3x3s{strides[0]}", None)
    return compiled if compiled is not None and compiled.ready() else None


def _separable(xp, combine, padded, kernel_shape, out, strides, dilations, scale=None):
    """A window reduction (max or sum) as one pass per spatial axis, outermost first: k - 1
    ``combine`` calls per axis instead of one per window tap; a new array, multiplied by
    ``scale`` (broadcast over the output's spatial axes) when one is given."""
    if len(kernel_shape) == 2:
        return _separable_2d(xp, combine, padded, kernel_shape, out, strides, dilations, scale)
    y = _separable_nd(xp, combine, padded, kernel_shape, out, strides, dilations)
    if scale is not None:
        y *= scale
    return y


def _separable_2d(xp, combine, padded, kernel_shape, out, strides, dilations, scale):
    """2-D windows with every pass one call over the whole padded buffer laid out flat: the
    rows pass combines the buffer with itself shifted by whole rows, the columns pass the result
    with itself shifted by single elements, both at every position (stride 1); the output's
    rows and columns are picked in the copy (or the scaling) that makes the result. A window's
    taps never leave the buffer for a picked position, as the padding covers every window;
    the other positions mix rows and channels and are dropped. numpy ran a shifted add 3x as
    fast on one flat run as on 192 rows of one (838 floats). Measured one thread, against
    slicing each axis by the stride: AveragePool 3x3 on 192 x 28 x 28 0.21 against 0.32 ms,
    MaxPool 3x3 stride 2 on 576 x 14 x 14 0.17 against 0.20 ms."""
    (kh, kw), (oh, ow), (sh, sw), (dh, dw) = kernel_shape, out, strides, dilations
    padded = xp.ascontiguousarray(padded)
    n, c, height, width = padded.shape
    size = padded.size

    def shifted(src, step, k):
        if k == 1:
            return src
        dst = xp.empty_like(src)
        reach = src.size - (k - 1) * step
        dst[reach:] = 0  # positions no window reaches: defined, for the next pass to read
        part = dst[:reach]
        combine(src[:reach], src[step:step + reach], out=part)
        for j in range(2, k):
            combine(part, src[j * step:j * step + reach], out=part)
        return dst

    if sh == 1:  # every row; the output's are the first oh
        rows, kept = shifted(padded.reshape(size), dh * width, kh), height
    else:  # strided rows: only the output's rows (whole rows, so each a contiguous run)
        taps = [padded[:, :, j * dh:j * dh + (oh - 1) * sh + 1:sh] for j in range(kh)]
        rows, kept = taps[0].copy() if kh == 1 else combine(taps[0], taps[1]), oh
        for t in taps[2:]:
            combine(rows, t, out=rows)
    grid = shifted(rows.reshape(rows.size), dw, kw)
    picked = grid.reshape(n, c, kept, width)[:, :, :oh, :(ow - 1) * sw + 1:sw]
    if scale is not None:
        return xp.multiply(picked, scale)
    return picked.copy() if kh == kw == 1 else xp.ascontiguousarray(picked)


def _separable_nd(xp, combine, padded, kernel_shape, out, strides, dilations):
    y = padded
    n_spatial = len(kernel_shape)
    for i, (k, o, s, d) in enumerate(zip(kernel_shape, out, strides, dilations, strict=True)):
        lead = (slice(None),) * (y.ndim - n_spatial + i)

        def tap(j, src=y, lead=lead, o=o, s=s, d=d):
            return src[lead + (slice(j * d, j * d + (o - 1) * s + 1, s),)]

        if k == 1:
            y = tap(0)
            continue
        acc = combine(tap(0), tap(1))
        for j in range(2, k):
            combine(acc, tap(j), out=acc)
        y = acc
    return y.copy() if y is padded or y.base is not None else y


def _flat_indices(xp, shape, best, kernel_shape, out, strides, dilations, begin, storage_order):
    """Indices into the flattened unpadded input, of the taps ``best`` picked per output."""
    n_spatial = len(kernel_shape)
    spatial = shape[2:]
    n, c = shape[:2]
    taps = xp.asarray(list(itertools.product(*(range(k) for k in kernel_shape))), dtype=xp.int64)
    tap_of = taps[best]  # (..., n_spatial): kernel offsets of the chosen tap
    index = xp.zeros(best.shape, dtype=xp.int64)
    order = range(n_spatial) if storage_order == 0 else reversed(range(n_spatial))
    for i in order:
        pos = xp.arange(out[i], dtype=xp.int64) * strides[i] - begin[i]
        pos = pos.reshape((-1,) + (1,) * (n_spatial - 1 - i))
        index = index * spatial[i] + pos + tap_of[..., i] * dilations[i]
    base = xp.arange(n * c, dtype=xp.int64).reshape((n, c) + (1,) * n_spatial)
    return base * math.prod(spatial) + index


def _window_counts(xp, out, stride, kernel, dilation, lo, hi):
    """How many taps of each output's window fall in [lo, hi) along one axis."""
    start = xp.arange(out) * stride
    taps = start[:, None] + xp.arange(kernel)[None, :] * dilation
    return ((taps >= lo) & (taps < hi)).sum(axis=1)


def _average_pool(xp, x, auto_pad, kernel_shape, ceil_mode, count_include_pad, dilations, pads,
                  strides):
    dtype = x.dtype
    if dtype.itemsize < 4:
        x = x.astype(xp.float32)
    n_spatial = len(kernel_shape)
    strides, dilations = strides_and_dilations(n_spatial, strides, dilations)
    spatial = x.shape[2:]
    out, begin, end = window_geometry(spatial, kernel_shape, strides, dilations, pads, auto_pad,
                                      ceil_mode, clamp_same=False)
    key = (id(xp), x.dtype.str, spatial, tuple(kernel_shape), out, strides, dilations, begin,
           end, bool(count_include_pad))
    scale = _INVERSE_COUNTS.get(key)
    if scale is None:
        scale = _inverse_counts(xp, x.dtype, spatial, kernel_shape, out, strides, dilations,
                                begin, end, count_include_pad)
        if len(_INVERSE_COUNTS) < 256:
            _INVERSE_COUNTS[key] = scale
    compiled = _compiled_3x3(xp, "average_pool", x, kernel_shape, strides, dilations)
    if compiled is not None:
        return compiled(x, scale, out, begin).astype(dtype, copy=False)
    padded = _padded(xp, x, kernel_shape, strides, dilations, out, begin, end, 0)
    total = _separable(xp, xp.add, padded, kernel_shape, out, strides, dilations, scale=scale)
    return total.astype(dtype, copy=False)


_INVERSE_COUNTS: dict = {}  # per array namespace and geometry; read only


def _inverse_counts(xp, dtype, spatial, kernel_shape, out, strides, dilations, begin, end,
                    count_include_pad):
    """1 / the number of taps averaged at each output position, over the spatial axes."""
    count = None
    n_spatial = len(kernel_shape)
    for i in range(n_spatial):
        lo, hi = (0, begin[i] + end[i] + spatial[i]) if count_include_pad else (
            begin[i], begin[i] + spatial[i])
        axis = _window_counts(xp, out[i], strides[i], kernel_shape[i], dilations[i], lo,
                              hi).astype(dtype)
        axis = axis.reshape((-1,) + (1,) * (n_spatial - 1 - i))
        count = axis if count is None else count * axis
    return 1 / count


@kernel("AveragePool", 1, dtypes=FLOATS, check=_check_pool, flops=_pool_flops, family="pool")
def average_pool_1(xp, x, *, auto_pad, kernel_shape, pads=None, strides=None):
    return _average_pool(xp, x, auto_pad, kernel_shape, 0, 0, None, pads, strides)


@kernel("AveragePool", 7, 10, 11, 19, dtypes=FLOATS, check=_check_pool, flops=_pool_flops,
        family="pool")
@kernel("AveragePool", 22, dtypes=FLOATS_BF16, check=_check_pool, flops=_pool_flops, family="pool")
def average_pool(xp, x, *, auto_pad, kernel_shape, ceil_mode=0, count_include_pad=0,
                 dilations=None, pads=None, strides=None):
    return _average_pool(xp, x, auto_pad, kernel_shape, ceil_mode, count_include_pad, dilations,
                         pads, strides)


# -- global pools -----------------------------------------------------------------------------


def _check_global(node, provider):
    rank = input_rank(node)
    require(rank is None or rank >= 3, "{}: {} takes input of rank >= 3 (N, C, D1...), got "
            "rank {}", node.op_type, provider, rank, code="shape")


@kernel("GlobalAveragePool", 1, dtypes=FLOATS, check=_check_global, family="pool")
@kernel("GlobalAveragePool", 22, dtypes=FLOATS_BF16, check=_check_global, family="pool")
def global_average_pool(xp, x):
    """numpy's mean (pairwise sums). A BLAS GEMV with a ones vector ran 3-7x faster but rounds
    otherwise: means an ulp away from numpy's in a few channels turned squeezenet's answer on
    onnx's shipped inputs (a Softmax over means near 1e10) into another one
    (tests/test_light_models.py). float32 and float64 are reduced in place, without a copy of
    the input (EfficientNet-B0's 17 squeeze-excite means took 2.0 ms with one, 5.6x
    onnxruntime's). A provider's ``xp.compiled_plane_means`` (the CPU EP's, numba: the same
    values to the bit on planes of up to 128 values, longer ones summed in another order but
    the same order for every plane) takes the float32 inputs it asks for."""
    compiled = getattr(xp, "compiled_plane_means", None)
    if compiled is not None and compiled.takes(x):
        return compiled(x)
    axes = tuple(range(2, x.ndim))
    if x.dtype.itemsize >= 4:
        return xp.mean(x, axis=axes, keepdims=True)
    return xp.mean(x.astype(xp.float32), axis=axes, keepdims=True).astype(x.dtype)


@kernel("GlobalMaxPool", 1, dtypes=FLOATS, check=_check_global, family="pool")
@kernel("GlobalMaxPool", 22, dtypes=FLOATS_BF16, check=_check_global, family="pool")
def global_max_pool(xp, x):
    return xp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


# -- LpPool, GlobalLpPool ---------------------------------------------------------------------


def _check_lp_pool(node, provider):
    _check_pool(node, provider, padding_windows_have_values=True)  # padding counts as 0 in the norm
    attrs = node.attributes
    p = attrs["p"]
    require(p > 0, "{}: p must be positive, got {}", node.op_type, p, code="attribute")
    strides = attrs.get("strides")
    if node.since_version < 11 and attrs["auto_pad"] in ("SAME_UPPER", "SAME_LOWER"):
        require(not strides or all(s == 1 for s in strides),
                "LpPool-{}: SAME padding with strides {} is ambiguous (its text says the output "
                "matches the input, version 11 ceil(input / stride)); give explicit pads",
                node.since_version, strides, code="attribute")


def _lp(xp, total, p):
    return xp.sqrt(total) if p == 2 else total ** (1.0 / p)


def _powered(xp, v, p):
    return v * v if p == 2 else xp.abs(v) ** p


def _lp_pool(xp, x, auto_pad, kernel_shape, p, ceil_mode, dilations, pads, strides):
    dtype = x.dtype
    if dtype.itemsize < 4:
        x = x.astype(xp.float32)
    strides, dilations = strides_and_dilations(len(kernel_shape), strides, dilations)
    padded, out, _, _ = _pool_input(xp, x, kernel_shape, strides, dilations, pads, auto_pad,
                                    ceil_mode, 0)
    total = None
    for offsets in itertools.product(*(range(k) for k in kernel_shape)):
        v = _powered(xp, padded[tap_slices(offsets, out, strides, dilations)], p)
        total = v if total is None else xp.add(total, v, out=total)
    return _lp(xp, total, p).astype(dtype, copy=False)


@kernel("LpPool", 1, 2, 11, dtypes=FLOATS, check=_check_lp_pool, flops=_pool_flops, family="pool")
def lp_pool_11(xp, x, *, auto_pad, kernel_shape, p, pads=None, strides=None):
    return _lp_pool(xp, x, auto_pad, kernel_shape, p, 0, None, pads, strides)


@kernel("LpPool", 18, dtypes=FLOATS, check=_check_lp_pool, flops=_pool_flops, family="pool")
@kernel("LpPool", 22, dtypes=FLOATS_BF16, check=_check_lp_pool, flops=_pool_flops, family="pool")
def lp_pool(xp, x, *, auto_pad, kernel_shape, p, ceil_mode, dilations=None, pads=None,
            strides=None):
    return _lp_pool(xp, x, auto_pad, kernel_shape, p, ceil_mode, dilations, pads, strides)


def _check_global_lp(node, provider):
    _check_global(node, provider)
    p = node.attributes["p"]
    require(p > 0, "GlobalLpPool: p must be positive, got {}", p, code="attribute")


@kernel("GlobalLpPool", 1, 2, dtypes=FLOATS, check=_check_global_lp, family="pool")
@kernel("GlobalLpPool", 22, dtypes=FLOATS_BF16, check=_check_global_lp, family="pool")
def global_lp_pool(xp, x, *, p):
    work = x.astype(xp.float32) if x.dtype.itemsize < 4 else x
    total = _powered(xp, work, p).sum(axis=tuple(range(2, x.ndim)), keepdims=True)
    return _lp(xp, total, p).astype(x.dtype, copy=False)


