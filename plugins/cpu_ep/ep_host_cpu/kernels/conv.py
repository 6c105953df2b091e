"""Convolution and pooling: Conv (im2col + one GEMM per group), MaxPool, AveragePool, the global
pools and LRN. Windows are strided views of a padded input; no Python loop runs over pixels."""

from __future__ import annotations

import itertools
import math

from ep_host import deny, require
from ep_host_cpu.registry import FLOATS, kernel

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def _elements(shape) -> int:
    n = 1
    for d in shape or ():
        n *= d if isinstance(d, int) and d >= 0 else 1
    return n


def _geometry(spatial, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode=0,
              clamp_same=True):
    """Per spatial axis: output size, begin pad and end pad (explicit or SAME; never the ceil
    overhang). A ceil-mode window that would start in the end padding is dropped, as the spec
    states from version 22 on and as onnxruntime does for every version. SAME padding that
    would be negative (stride > kernel extent) is 0 with ``clamp_same`` (Conv, as onnxruntime
    and the reference do), else an error (the pools' readings disagree there)."""
    n = len(spatial)
    strides = strides or (1,) * n
    dilations = dilations or (1,) * n
    pads = pads or (0,) * (2 * n)
    out, begin, end = [], [], []
    axes = zip(spatial, kernel_shape, strides, dilations, strict=True)
    for i, (size, k, s, d) in enumerate(axes):
        extent = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-size // s)
            total = (o - 1) * s + extent - size
            if total < 0 and not clamp_same:
                raise ValueError(
                    f"{auto_pad} on spatial axis {i} (size {size}, stride {s}, kernel extent "
                    f"{extent}) needs negative padding ({total}), which is undefined for pools"
                )
            total = max(total, 0)
            b = total // 2 if auto_pad == "SAME_UPPER" else (total + 1) // 2
            e = total - b
        elif auto_pad == "VALID":
            o, b, e = (size - extent) // s + 1, 0, 0
        else:
            b, e = pads[i], pads[i + n]
            span = size + b + e - extent
            o = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (o - 1) * s >= size + b:
                o -= 1
        if o < 1:
            raise ValueError(
                f"spatial axis {i}: input size {size} with pads ({b}, {e}) is smaller than the "
                f"kernel extent {extent}"
            )
        out.append(o)
        begin.append(b)
        end.append(e)
    return tuple(out), tuple(begin), tuple(end)


def _pad(xp, x, begin, end, value=0):
    if not any(begin) and not any(end):
        return x
    widths = [(0, 0)] * (x.ndim - len(begin)) + list(zip(begin, end, strict=True))
    return xp.pad(x, widths, mode="constant", constant_values=value)


def _tap_slices(offsets, out, strides, dilations):
    """The strided slice of a padded input that kernel tap ``offsets`` reads for every output."""
    return (Ellipsis,) + tuple(
        slice(k * d, k * d + (o - 1) * s + 1, s)
        for k, o, s, d in zip(offsets, out, strides, dilations, strict=True)
    )


def _attrs(n, strides, dilations):
    return tuple(strides or (1,) * n), tuple(dilations or (1,) * n)


# -- checks shared by Conv and the pools ------------------------------------------------------


def _check_window_attributes(node, n_spatial, kernel_shape):
    op, attrs = node.op_type, node.attributes
    auto_pad = attrs.get("auto_pad", "NOTSET")
    require(auto_pad in AUTO_PADS, "{}: auto_pad must be one of {}, got {!r}", op,
            "/".join(AUTO_PADS), auto_pad, code="attribute")
    for name in ("strides", "dilations"):
        value = attrs.get(name)
        require(value is None or n_spatial is None or len(value) == n_spatial,
                "{}: {} needs one value per spatial axis ({}), got {}", op, name, n_spatial, value,
                code="attribute")
        require(value is None or all(v >= 1 for v in value),
                "{}: {} must all be >= 1, got {}", op, name, value, code="attribute")
    pads = attrs.get("pads")
    if pads is not None:
        require(n_spatial is None or len(pads) == 2 * n_spatial,
                "{}: pads needs begin and end values for each of the {} spatial axes, got {}", op,
                n_spatial, pads, code="attribute")
        require(all(p >= 0 for p in pads), "{}: pads must be >= 0, got {}", op, pads,
                code="attribute")
    require(kernel_shape is None or all(isinstance(k, int) and k >= 1 for k in kernel_shape),
            "{}: kernel_shape must be positive, got {}", op, kernel_shape, code="attribute")


def _check_geometry(node, kernel_shape, clamp_same):
    """With static spatial dims, decline the geometries the kernel would refuse at run time."""
    x = node.inputs[0]
    if x is None or x.shape is None or kernel_shape is None:
        return
    spatial = tuple(x.shape[2:])
    if not all(isinstance(d, int) for d in (*spatial, *kernel_shape)):
        return
    if len(spatial) != len(kernel_shape):
        return
    attrs = node.attributes
    try:
        _geometry(spatial, kernel_shape, attrs.get("strides"), attrs.get("dilations"),
                  attrs.get("pads"), attrs.get("auto_pad", "NOTSET"), attrs.get("ceil_mode", 0),
                  clamp_same)
    except ValueError as exc:
        deny("{}: CPU EP cannot compute this window geometry: {}", node.op_type, exc,
             code="attribute")


def _input_rank(node):
    x = node.inputs[0]
    return None if x is None or x.shape is None else len(x.shape)


# -- Conv -------------------------------------------------------------------------------------


def _check_conv(node):
    attrs = node.attributes
    x, w = node.inputs[0], node.inputs[1]
    rank = _input_rank(node)
    require(rank is None or rank >= 3, "Conv: CPU EP takes input of rank >= 3 (N, C, D1...), got "
            "rank {}", rank, code="shape")
    w_shape = w.shape if w is not None else None
    require(rank is None or w_shape is None or len(w_shape) == rank,
            "Conv: the weight's rank must equal the input's ({}), got {}", rank, w_shape,
            code="shape")
    n_spatial = rank - 2 if rank is not None else None if w_shape is None else len(w_shape) - 2
    kernel_shape = attrs.get("kernel_shape")
    _check_window_attributes(node, n_spatial, kernel_shape)
    group = attrs["group"]
    require(group >= 1, "Conv: group must be >= 1, got {}", group, code="attribute")
    if w_shape is not None:
        spatial = tuple(w_shape[2:])
        require(kernel_shape is None or not all(isinstance(k, int) for k in spatial)
                or tuple(kernel_shape) == spatial,
                "Conv: kernel_shape {} must equal the weight's spatial shape {}", kernel_shape,
                spatial, code="attribute")
        m = w_shape[0]
        require(not isinstance(m, int) or m % group == 0,
                "Conv: output channels ({}) must be a multiple of group ({})", m, group,
                code="attribute")
        c = None if x is None or x.shape is None else x.shape[1]
        if isinstance(c, int) and isinstance(w_shape[1], int):
            require(c == w_shape[1] * group,
                    "Conv: input channels ({}) must equal weight channels ({}) x group ({})", c,
                    w_shape[1], group, code="shape")
        _check_geometry(node, spatial, clamp_same=True)


def _conv_flops(node):
    w = node.inputs[1]
    per_output = _elements(w.shape[1:]) if w is not None and w.shape is not None else 1
    y = node.outputs[0]
    return 2 * _elements(y.shape if y is not None else None) * per_output


@kernel("Conv", 1, 11, 22, dtypes=FLOATS, check=_check_conv, flops=_conv_flops)
def conv(xp, x, w, b=None, *, auto_pad, group, dilations=None, kernel_shape=None, pads=None,
         strides=None):
    dtype = x.dtype
    if dtype == xp.float16:  # accumulate in float32, round once
        x, w = x.astype(xp.float32), w.astype(xp.float32)
        b = None if b is None else b.astype(xp.float32)
    n_spatial = x.ndim - 2
    kernel = tuple(w.shape[2:])
    strides, dilations = _attrs(n_spatial, strides, dilations)
    out, begin, end = _geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
    n, c = x.shape[:2]
    m = w.shape[0]
    per_group = (c // group) * math.prod(kernel)
    if all(k == 1 for k in kernel) and not any(begin) and not any(end):
        picked = x[_tap_slices((0,) * n_spatial, out, strides, dilations)]
        cols = picked.reshape(n, group, per_group, math.prod(out))
    else:
        padded = _pad(xp, x, begin, end)
        st = padded.strides
        view = xp.lib.stride_tricks.as_strided(
            padded,
            shape=(n, c) + kernel + out,
            strides=st[:2]
            + tuple(a * d for a, d in zip(st[2:], dilations, strict=True))
            + tuple(a * s for a, s in zip(st[2:], strides, strict=True)),
        )
        cols = view.reshape(n, group, per_group, math.prod(out))  # the im2col copy
    y = xp.matmul(w.reshape(group, m // group, per_group), cols).reshape((n, m) + out)
    if b is not None:
        y += b.reshape((m,) + (1,) * n_spatial)
    return y.astype(dtype, copy=False)


# -- MaxPool, AveragePool ---------------------------------------------------------------------


def _check_pool(node):
    attrs = node.attributes
    rank = _input_rank(node)
    op = node.op_type
    require(rank is None or rank >= 3, "{}: CPU EP takes input of rank >= 3 (N, C, D1...), got "
            "rank {}", op, rank, code="shape")
    kernel_shape = attrs["kernel_shape"]
    n_spatial = len(kernel_shape)
    require(rank is None or rank - 2 == n_spatial,
            "{}: kernel_shape {} needs one value per spatial axis of the rank-{} input", op,
            kernel_shape, rank, code="attribute")
    _check_window_attributes(node, n_spatial, kernel_shape)
    pads = attrs.get("pads")
    if pads is not None and attrs.get("auto_pad", "NOTSET") == "NOTSET":
        dilations = attrs.get("dilations") or (1,) * n_spatial
        extents = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations, strict=True)]
        require(all(p < e for p, e in zip(pads, extents + extents, strict=True)),
                "{}: CPU EP takes pads smaller than the kernel extent {} (a window made only of "
                "padding has no value), got pads {}", op, extents, pads, code="attribute")
    require(attrs.get("storage_order", 0) in (0, 1),
            "{}: storage_order must be 0 (row major) or 1 (column major), got {}", op,
            attrs.get("storage_order"), code="attribute")
    _check_geometry(node, kernel_shape, clamp_same=False)


def _pool_flops(node):
    y = node.outputs[0]
    window = math.prod(node.attributes["kernel_shape"])
    return _elements(y.shape if y is not None else None) * window


def _wants_second_output(node):
    return {"with_indices": len(node.outputs) > 1 and node.outputs[1] is not None}


def _pool_input(xp, x, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode, fill):
    """The input padded with ``fill`` so that every output window lies inside it; the output
    size and the begin and end pads that the attributes define."""
    spatial = x.shape[2:]
    out, begin, end = _geometry(spatial, kernel_shape, strides, dilations, pads, auto_pad,
                                ceil_mode, clamp_same=False)
    reach = [max(e, (o - 1) * s + (k - 1) * d + 1 - n - b)
             for o, s, k, d, n, b, e in zip(out, strides, kernel_shape, dilations, spatial, begin,
                                            end, strict=True)]
    return _pad(xp, x, begin, reach, fill), out, begin, end


def _lowest(xp, dtype):
    if dtype.kind in "iu":
        return xp.iinfo(dtype).min
    return -xp.inf


@kernel("MaxPool", 1, 8, 10, 11, dtypes=FLOATS, check=_check_pool, flops=_pool_flops,
        bind=_wants_second_output)
@kernel("MaxPool", 12, 22, dtypes=FLOATS | {"int8", "uint8"}, check=_check_pool,
        flops=_pool_flops, bind=_wants_second_output)
def max_pool(xp, x, *, auto_pad, kernel_shape, ceil_mode=0, dilations=None, pads=None,
             storage_order=0, strides=None, with_indices=False):
    strides, dilations = _attrs(len(kernel_shape), strides, dilations)
    padded, out, begin, _ = _pool_input(xp, x, kernel_shape, strides, dilations, pads, auto_pad,
                                        ceil_mode, _lowest(xp, x.dtype))
    taps = list(itertools.product(*(range(k) for k in kernel_shape)))
    y = padded[_tap_slices(taps[0], out, strides, dilations)].copy()
    if not with_indices:
        for offsets in taps[1:]:
            xp.maximum(y, padded[_tap_slices(offsets, out, strides, dilations)], out=y)
        return y
    best = xp.zeros(y.shape, dtype=xp.int64)
    for t, offsets in enumerate(taps[1:], start=1):
        v = padded[_tap_slices(offsets, out, strides, dilations)]
        better = v > y
        y = xp.where(better, v, y)
        best = xp.where(better, t, best)
    return y, _flat_indices(xp, x.shape, best, kernel_shape, out, strides, dilations, begin,
                            storage_order)


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
    if dtype == xp.float16:
        x = x.astype(xp.float32)
    n_spatial = len(kernel_shape)
    strides, dilations = _attrs(n_spatial, strides, dilations)
    spatial = x.shape[2:]
    padded, out, begin, end = _pool_input(xp, x, kernel_shape, strides, dilations, pads, auto_pad,
                                          ceil_mode, 0)
    total = None
    for offsets in itertools.product(*(range(k) for k in kernel_shape)):
        v = padded[_tap_slices(offsets, out, strides, dilations)]
        total = v.copy() if total is None else xp.add(total, v, out=total)
    count = None
    for i in range(n_spatial):
        lo, hi = (0, begin[i] + end[i] + spatial[i]) if count_include_pad else (
            begin[i], begin[i] + spatial[i])
        axis = _window_counts(xp, out[i], strides[i], kernel_shape[i], dilations[i], lo,
                              hi).astype(x.dtype)
        axis = axis.reshape((-1,) + (1,) * (n_spatial - 1 - i))
        count = axis if count is None else count * axis
    return (total / count).astype(dtype, copy=False)


@kernel("AveragePool", 1, dtypes=FLOATS, check=_check_pool, flops=_pool_flops)
def average_pool_1(xp, x, *, auto_pad, kernel_shape, pads=None, strides=None):
    return _average_pool(xp, x, auto_pad, kernel_shape, 0, 0, None, pads, strides)


@kernel("AveragePool", 7, 10, 11, 19, 22, dtypes=FLOATS, check=_check_pool, flops=_pool_flops)
def average_pool(xp, x, *, auto_pad, kernel_shape, ceil_mode=0, count_include_pad=0,
                 dilations=None, pads=None, strides=None):
    return _average_pool(xp, x, auto_pad, kernel_shape, ceil_mode, count_include_pad, dilations,
                         pads, strides)


# -- global pools and LRN ---------------------------------------------------------------------


def _check_global(node):
    rank = _input_rank(node)
    require(rank is None or rank >= 3, "{}: CPU EP takes input of rank >= 3 (N, C, D1...), got "
            "rank {}", node.op_type, rank, code="shape")


@kernel("GlobalAveragePool", 1, 22, dtypes=FLOATS, check=_check_global)
def global_average_pool(xp, x):
    return xp.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)


@kernel("GlobalMaxPool", 1, 22, dtypes=FLOATS, check=_check_global)
def global_max_pool(xp, x):
    return xp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)


def _check_lrn(node):
    size = node.attributes["size"]
    require(size >= 1, "LRN: size must be >= 1, got {}", size, code="attribute")
    rank = _input_rank(node)
    require(rank is None or rank >= 2, "LRN: CPU EP takes input of rank >= 2 (N, C, ...), got "
            "rank {}", rank, code="shape")


@kernel("LRN", 1, 13, dtypes=FLOATS, check=_check_lrn)
def lrn(xp, x, *, size, alpha, beta, bias):
    dtype = x.dtype
    if dtype == xp.float16:
        x = x.astype(xp.float32)
    channels = x.shape[1]
    before = (size - 1) // 2
    squares = _pad(xp, xp.square(x), (before,) + (0,) * (x.ndim - 2),
                   (size - 1 - before,) + (0,) * (x.ndim - 2))
    total = squares[:, 0:channels].copy()
    for i in range(1, size):
        total += squares[:, i:i + channels]
    return (x / (bias + (alpha / size) * total) ** beta).astype(dtype, copy=False)
