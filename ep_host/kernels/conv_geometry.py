"""The window geometry that convolutions and pools share: output sizes and padding per spatial
axis, padded inputs, the strided slice each kernel tap reads, and the attribute checks built on
them. Public so that every EP's convolution variants compute the same windows."""

from __future__ import annotations

import itertools
import math

from ep_host import deny, require

AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def window_geometry(spatial, kernel_shape, strides, dilations, pads, auto_pad, ceil_mode=0,
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


def pad_spatial(xp, x, begin, end, value=0):
    if not any(begin) and not any(end):
        return x
    lead = x.ndim - len(begin)
    spatial = x.shape[lead:]
    buf = xp.full(x.shape[:lead] + tuple(s + b + e for s, b, e in zip(spatial, begin, end,
                                                                        strict=True)),
                  value, dtype=x.dtype)
    buf[(Ellipsis,) + tuple(slice(b, b + s) for b, s in zip(begin, spatial, strict=True))] = x
    return buf


def tap_slices(offsets, out, strides, dilations):
    """The strided slice of a padded input that kernel tap ``offsets`` reads for every output."""
    return (Ellipsis,) + tuple(
        slice(k * d, k * d + (o - 1) * s + 1, s)
        for k, o, s, d in zip(offsets, out, strides, dilations, strict=True)
    )


def strides_and_dilations(n, strides, dilations):
    return tuple(strides or (1,) * n), tuple(dilations or (1,) * n)


# -- checks shared by Conv and the pools ------------------------------------------------------


def check_window_attributes(node, n_spatial, kernel_shape):
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


def check_window_geometry(node, provider, kernel_shape, clamp_same):
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
        window_geometry(spatial, kernel_shape, attrs.get("strides"), attrs.get("dilations"),
                        attrs.get("pads"), attrs.get("auto_pad", "NOTSET"),
                        attrs.get("ceil_mode", 0), clamp_same)
    except ValueError as exc:
        deny("{}: {} cannot compute this window geometry: {}", node.op_type, provider, exc,
             code="attribute")


def input_rank(node):
    x = node.inputs[0]
    return None if x is None or x.shape is None else len(x.shape)


def tap_reach(size, k, out, s, d, b):
    """Along one spatial axis of input ``size``: the outputs ``[lo, hi)`` whose window puts tap
    ``k`` (stride ``s``, dilation ``d``, begin pad ``b``) inside the input, not in its padding,
    and the input index the first of them reads. ``lo == hi`` where the tap reads only padding
    (a wide dilation on a small input)."""
    start = k * d - b  # the input index output 0 reads
    lo = min(max(0, -(start // s)), out)  # the first o with o * s >= -start
    hi = max(min(out, (size - 1 - start) // s + 1), lo)
    return lo, hi, lo * s + start


def reached_count(spatial, kernel, out, strides, dilations, begin):
    """How many taps read some of the input, and how many (tap, output) pairs read it: what
    :func:`reached_taps` would list and the sum of its box sizes, found axis by axis (the taps
    are the product of the axes' taps) without listing them."""
    taps, read = 1, 1
    for size, k, o, s, d, b in zip(spatial, kernel, out, strides, dilations, begin, strict=True):
        spans = [hi - lo for lo, hi, _ in (tap_reach(size, t, o, s, d, b) for t in range(k))]
        taps *= sum(1 for n in spans if n)
        read *= sum(spans)
    return taps, read


def reached_taps(spatial, kernel, out, strides, dilations, begin):
    """Each kernel tap that reads some of the input, in the weight's tap order: ``(tap index,
    the output box it reaches as slices, the input it reads there as strided slices, the box's
    size)``. Taps that read only padding are left out."""
    axes = []
    for size, k, o, s, d, b in zip(spatial, kernel, out, strides, dilations, begin, strict=True):
        axes.append([tap_reach(size, t, o, s, d, b) for t in range(k)])
    found = []
    for index, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
        reach = [axes[a][t] for a, t in enumerate(tap)]
        if any(lo == hi for lo, hi, _ in reach):
            continue
        box = tuple(slice(lo, hi) for lo, hi, _ in reach)
        source = tuple(slice(i, i + (hi - lo - 1) * s + 1, s)
                       for (lo, hi, i), s in zip(reach, strides, strict=True))
        found.append((index, box, source, math.prod(hi - lo for lo, hi, _ in reach)))
    return found
