"""Image and layout ops: Resize, Upsample, GridSample, AffineGrid, RoiAlign, NonMaxSuppression,
MaxUnpool, Col2Im, CenterCropPad, DepthToSpace and SpaceToDepth.

Resampling is separable: each resized axis becomes a few taps (input positions and weights per
output position), applied one axis after another in float32 (float64 for float64 data).
"""

from __future__ import annotations

import itertools
import math

from ep_host import require
from ep_host.kernels.helpers import int_list, normalize_axis, pad_axes, zero_of
from ep_host.kernels.registry import EXOTIC, FLOATS, MOVABLE, NUMERIC, kernel

REAL = FLOATS | {"bfloat16"}  # interpolated in float32 (float64 for float64) and cast back
NEAREST_TYPES = MOVABLE - EXOTIC | {"bfloat16"}


def _work_type(xp, array):
    return xp.float64 if array.dtype == xp.float64 else xp.float32


def _data_type(node):
    x = node.inputs[0]
    return None if x is None or x.dtype is None else x.dtype.name


# ---------------------------------------------------------------------------------------------
# DepthToSpace, SpaceToDepth, CenterCropPad
# ---------------------------------------------------------------------------------------------


def _nchw(x):
    if x.ndim != 4:
        raise ValueError(f"expected a 4-D (N, C, H, W) input, got rank {x.ndim}")
    return x.shape


def _check_layout_mode(node, provider):
    mode = node.attributes.get("mode", "DCR")
    require(mode in ("DCR", "CRD"), "{}: mode is DCR or CRD, got {!r}", node.op_type, mode,
            code="attribute")


@kernel("DepthToSpace", 11, 13, 28, dtypes=MOVABLE, check=_check_layout_mode,
        family="data_movement")
def depth_to_space(xp, x, *, blocksize, mode):
    n, c, h, w = _nchw(x)
    b = blocksize
    if c % (b * b):
        raise ValueError(f"{c} channels do not split into blocks of {b}x{b}")
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@kernel("DepthToSpace", 1, dtypes=MOVABLE, family="data_movement")
def depth_to_space_1(xp, x, *, blocksize):
    return depth_to_space(xp, x, blocksize=blocksize, mode="DCR")


@kernel("SpaceToDepth", 28, dtypes=MOVABLE, check=_check_layout_mode, family="data_movement")
def space_to_depth(xp, x, *, blocksize, mode):
    n, c, h, w = _nchw(x)
    b = blocksize
    if h % b or w % b:
        raise ValueError(f"spatial dims {h}x{w} do not split into blocks of {b}x{b}")
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 3, 5, 1, 2, 4) if mode == "DCR" else y.transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@kernel("SpaceToDepth", 1, 13, dtypes=MOVABLE, family="data_movement")
def space_to_depth_1(xp, x, *, blocksize):
    return space_to_depth(xp, x, blocksize=blocksize, mode="DCR")


@kernel("CenterCropPad", 18, dtypes=MOVABLE, host_inputs=(1,))
def center_crop_pad(xp, x, shape, *, axes=None):
    axes = list(range(x.ndim)) if axes is None else [normalize_axis(a, x.ndim) for a in axes]
    target = int_list(shape)
    if len(target) != len(axes):
        raise ValueError(f"shape {target} does not give a size for each of axes {axes}")
    before, after = [], []
    for a, t in zip(axes, target, strict=True):
        grow = t - x.shape[a]  # crops start rounded down; pads put the odd pixel at the end
        first = grow // 2 if grow >= 0 else -(-grow // 2)
        before.append(first)
        after.append(grow - first)
    return pad_axes(xp, x, before + after, None, "constant", axes)


# ---------------------------------------------------------------------------------------------
# Resize and Upsample
# ---------------------------------------------------------------------------------------------


def _cubic(s, a):
    s = abs(s)
    if s <= 1:
        return ((a + 2) * s - (a + 3)) * s * s + 1
    if s < 2:
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a
    return 0.0


def _linear(s):
    return max(0.0, 1.0 - abs(s))


def _original(x, size, out, length, scale, mode, roi):
    """Where output position ``x`` samples the input axis (the coordinate transformation).
    ``out`` is the output length, ``length`` the resized length before rounding down (they
    differ when the scales give a fractional one, which align_corners and tf_crop_and_resize
    then divide by)."""
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / length)
        return offset + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else 0.0
    if mode == "align_corners":
        return x * (size - 1) / (length - 1) if out > 1 else 0.0
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    start, end = roi  # tf_crop_and_resize
    if out > 1:
        return start * (size - 1) + x * (end - start) * (size - 1) / (length - 1)
    return 0.5 * (start + end) * (size - 1)


def _nearest(x, mode):
    if mode == "round_prefer_floor":
        return math.ceil(x - 0.5)
    if mode == "round_prefer_ceil":
        return math.floor(x + 0.5)
    return math.floor(x) if mode == "floor" else math.ceil(x)


def _taps(size, out, length, scale, roi, how):
    """Per output position: the input positions it reads, their weights, and whether it lies
    outside the input (tf_crop_and_resize extrapolates there)."""
    rows, outside = [], []
    for i in range(out):
        x = _original(i, size, out, length, scale, how["transform"], roi)
        outside.append(how["transform"] == "tf_crop_and_resize" and not 0 <= x <= size - 1)
        mode = how["mode"]
        if mode == "nearest":
            rows.append([(min(max(_nearest(x, how["nearest_mode"]), 0), size - 1), 1.0)])
            continue
        if how["antialias"] and scale < 1:  # the filter stretched by 1 / scale
            reach = (1.0 if mode == "linear" else 2.0) / scale
            lo, hi = math.floor(x - reach), math.ceil(x + reach)
            taps = [(j, (_linear((j - x) * scale) if mode == "linear"
                         else _cubic((j - x) * scale, how["a"]))) for j in range(lo, hi + 1)]
        else:
            base = math.floor(x)
            t = x - base
            if mode == "linear":
                taps = [(base, 1 - t), (base + 1, t)]
            else:
                a = how["a"]
                taps = [(base - 1, _cubic(t + 1, a)), (base, _cubic(t, a)),
                        (base + 1, _cubic(1 - t, a)), (base + 2, _cubic(2 - t, a))]
        if how["exclude_outside"]:
            taps = [(j, w) for j, w in taps if 0 <= j < size]
        else:  # positions outside repeat the edge
            taps = [(min(max(j, 0), size - 1), w) for j, w in taps]
        total = sum(w for _, w in taps)
        if how["antialias"] or how["exclude_outside"]:
            taps = [(j, w / total) for j, w in taps] if total else [(0, 0.0)]
        rows.append(taps)
    return rows, outside


_TAPS: dict = {}  # per geometry and mode; read only


def _cached_taps(size, out, length, scale, roi, how):
    """:func:`_taps` and its :func:`_tap_table`, computed once per geometry and mode (a Python
    loop per output position: 1 ms for 520 positions, every run)."""
    key = (size, out, length, scale, tuple(roi), tuple(sorted(how.items())))
    taps = _TAPS.get(key)
    if taps is None:
        rows, outside = _taps(size, out, length, scale, roi, how)
        taps = rows, outside, _tap_table(rows)
        if len(_TAPS) < 256:
            _TAPS[key] = taps
    return taps


def _tap_table(rows):
    """The taps as (index, weight, uniform) lists: ``width`` columns, rows with fewer taps
    padded by index 0 and weight 0; ``uniform`` when every row has ``width`` taps."""
    width = max(len(r) for r in rows)
    index = [[r[k][0] if k < len(r) else 0 for k in range(width)] for r in rows]
    weight = [[r[k][1] if k < len(r) else 0.0 for k in range(width)] for r in rows]
    return index, weight, all(len(r) == width for r in rows)


def _apply_taps(xp, x, axis, rows, table, work):
    index, weight, uniform = table
    index = xp.asarray(index, dtype=xp.int64)
    shape = (1,) * axis + (len(rows),) + (1,) * (x.ndim - axis - 1)
    if work is None:  # nearest: a pure gather, any element type
        return xp.take(x, index[:, 0], axis=axis)
    weight = xp.asarray(weight, dtype=work)
    compiled = getattr(xp, "compiled_taps", None)
    if (compiled is not None and uniform and work == xp.float32
            and x.size // max(x.shape[axis], 1) * len(rows) >= compiled.MIN_SIZE
            and compiled.ready()):
        return compiled(x, axis, index, weight)
    out = None
    for k in range(index.shape[1]):
        term = xp.take(x, index[:, k], axis=axis) * weight[:, k].reshape(shape)
        if any(k >= len(r) for r in rows):  # rows with fewer taps: no 0 * inf there
            present = xp.asarray([k < len(r) for r in rows]).reshape(shape)
            term = xp.where(present, term, 0)
        out = term if out is None else out + term
    return out


def _resize_shape(x, roi, scales, sizes, axes, policy, transform):
    """The output length, scale and roi (start, end) of each resized axis."""
    rank = x.ndim
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank) for a in axes]
    given_scales = scales is not None and scales.size > 0
    given_sizes = sizes is not None and sizes.size > 0
    if given_scales == given_sizes:
        raise ValueError("Resize takes exactly one of 'scales' and 'sizes'")
    bounds = [(0.0, 1.0)] * len(axes)
    if transform == "tf_crop_and_resize":
        values = [float(v) for v in roi.reshape(-1).tolist()]
        if len(values) != 2 * len(axes):
            raise ValueError(f"roi has {len(values)} values for {len(axes)} axes")
        bounds = list(zip(values[:len(axes)], values[len(axes):], strict=True))
    plan = {}
    if given_scales:
        factors = [float(v) for v in scales.reshape(-1).tolist()]
        if len(factors) != len(axes) or min(factors) <= 0:
            raise ValueError(f"scales {factors} must be positive, one per axis of {axes}")
        for a, s, (start, end) in zip(axes, factors, bounds, strict=True):
            length = x.shape[a] * (end - start) * s
            plan[a] = (math.floor(length), length, s, (start, end))
        return plan
    targets = int_list(sizes)
    if len(targets) != len(axes):
        raise ValueError(f"sizes {targets} must give one length per axis of {axes}")
    if policy == "stretch":
        for a, n, r in zip(axes, targets, bounds, strict=True):
            plan[a] = (n, n, n / x.shape[a], r)
        return plan
    ratios = [n / x.shape[a] for a, n in zip(axes, targets, strict=True)]
    s = min(ratios) if policy == "not_larger" else max(ratios)
    for a, r in zip(axes, bounds, strict=True):
        n = math.floor(s * x.shape[a] + 0.5)
        plan[a] = (n, n, s, r)
    return plan


def _axis_order(shape, plan):
    """The resized axes, those that shrink most first, and of those that grow as much, the
    innermost first: each pass then writes as few values as it can, and the passes along the
    last axis (a gather per value, where the others move whole rows) write the fewest.
    DeepLabV3's 21 x 65 x 65 to 21 x 520 x 520 along the width first: 3.4-6.4 against 23-28 ms
    (the CPU EP's compiled taps, one thread)."""
    return sorted(plan, key=lambda a: (plan[a][0] / max(shape[a], 1), -a))


def _resize(xp, x, plan, how, extrapolation_value=0.0):
    work = None if how["mode"] == "nearest" else _work_type(xp, x)
    y = x if work is None else x.astype(work)
    outside = None
    for axis in _axis_order(x.shape, plan):
        out, length, scale, roi = plan[axis]
        size = x.shape[axis]
        if out == size and scale == 1 and how["transform"] != "tf_crop_and_resize":
            continue  # every transform maps an unresized axis onto itself
        if size == 0 or out < 0:
            raise ValueError(f"cannot resize an axis of {size} to {out}")
        rows, out_of_range, table = _cached_taps(size, out, length, scale, roi, how)
        y = _apply_taps(xp, y, axis, rows, table, work) if out else xp.take(y, [], axis=axis)
        if any(out_of_range):
            mask = xp.asarray(out_of_range).reshape((1,) * axis + (out,)
                                                      + (1,) * (x.ndim - axis - 1))
            outside = mask if outside is None else outside | mask
    if outside is not None:
        y = xp.where(outside, xp.asarray(extrapolation_value, dtype=y.dtype), y)
    return y.astype(x.dtype, copy=False)


TRANSFORMS_13 = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                 "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _check_resize(transforms, policies=("stretch",)):
    def check(node, provider):
        attrs = node.attributes
        mode = attrs.get("mode")
        require(mode in ("nearest", "linear", "cubic"), "Resize: mode is nearest, linear or "
                "cubic, got {!r}", mode, code="attribute")
        transform = attrs.get("coordinate_transformation_mode")
        require(transform in transforms, "Resize: version {} transforms coordinates by {}, got "
                "{!r}", node.since_version, "/".join(transforms), transform, code="attribute")
        require(mode != "nearest" or attrs.get("nearest_mode") in NEAREST_MODES,
                "Resize: nearest_mode is one of {}, got {!r}", "/".join(NEAREST_MODES),
                attrs.get("nearest_mode"), code="attribute")
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        require(policy in policies, "Resize: keep_aspect_ratio_policy is one of {}, got {!r}",
                "/".join(policies), policy, code="attribute")
        kind = _data_type(node)
        allowed = NEAREST_TYPES if mode == "nearest" else REAL
        require(kind is None or kind in allowed, "Resize: {} resizes {} data in {} mode, got "
                "{}", provider, "/".join(sorted(allowed)), mode, kind, code="dtype")
        _check_scaled_lengths(node, provider, transform)
    return check


def _check_scaled_lengths(node, provider, transform):
    """tf_crop_and_resize divides by the resized length and pytorch_half_pixel compares it with
    1; when 'scales' make that length fractional the spec does not say whether the fraction or
    the output length is meant, so such nodes are declined."""
    if transform not in ("tf_crop_and_resize", "pytorch_half_pixel") or len(node.inputs) < 3:
        return
    x, roi, scales = node.inputs[:3]
    sizes = node.inputs[3] if len(node.inputs) > 3 else None
    factors = scales.value if scales is not None and scales.is_constant else None
    if scales is None or (factors is not None and factors.size == 0):
        return
    if factors is None and sizes is not None:
        return  # 'sizes' given: 'scales' must be empty
    bounds = roi.value if roi is not None and roi.is_constant else None
    require(factors is not None and x.is_static and
            (transform != "tf_crop_and_resize" or bounds is not None),
            "Resize: with {} and 'scales', {} needs constant scales{}, and a static input "
            "shape to check the resized lengths are whole; give 'sizes' instead", transform,
            provider,
            " and roi" if transform == "tf_crop_and_resize" else "", code="shape")
    axes = node.attributes.get("axes") or range(x.rank)
    factors = [float(f) for f in factors.reshape(-1).tolist()]
    spans = [1.0] * len(factors)
    if transform == "tf_crop_and_resize":
        b = [float(v) for v in bounds.reshape(-1).tolist()]
        spans = [e - s for s, e in zip(b[:len(factors)], b[len(factors):], strict=False)]
    for a, f, span in zip(axes, factors, spans, strict=False):
        length = x.shape[a] * span * f
        whole = length == math.floor(length) or (
            transform == "pytorch_half_pixel" and math.floor(length) != 1)
        require(whole, "Resize: with {} the scales make axis {} {:.6g} long; the spec does not say "
                "whether that fraction or its floor is meant; give 'sizes' instead", transform,
                a, length, code="attribute")


def _how(mode, transform, nearest_mode="round_prefer_floor", cubic_coeff_a=-0.75,
         exclude_outside=0, antialias=0):
    return {"mode": mode, "transform": transform, "nearest_mode": nearest_mode,
            "a": cubic_coeff_a, "exclude_outside": exclude_outside, "antialias": antialias}


@kernel("Resize", 19, dtypes=None, host_inputs=(1, 2, 3),
        check=_check_resize(TRANSFORMS_13 + ("half_pixel_symmetric",),
                            ("stretch", "not_larger", "not_smaller")), family="data_movement")
@kernel("Resize", 18, dtypes=None, host_inputs=(1, 2, 3),
        check=_check_resize(TRANSFORMS_13, ("stretch", "not_larger", "not_smaller")),
        family="data_movement")
def resize(xp, x, roi=None, scales=None, sizes=None, *, antialias, axes=None,
           coordinate_transformation_mode, cubic_coeff_a, exclude_outside, extrapolation_value,
           keep_aspect_ratio_policy, mode, nearest_mode):
    plan = _resize_shape(x, roi, scales, sizes, axes, keep_aspect_ratio_policy,
                         coordinate_transformation_mode)
    how = _how(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
               exclude_outside, antialias)
    return _resize(xp, x, plan, how, extrapolation_value)


@kernel("Resize", 13, dtypes=None, host_inputs=(1, 2, 3), check=_check_resize(TRANSFORMS_13),
        family="data_movement")
@kernel("Resize", 11, dtypes=None, host_inputs=(1, 2, 3),
        check=_check_resize(TRANSFORMS_13 + ("tf_half_pixel_for_nn",)), family="data_movement")
def resize_11(xp, x, roi=None, scales=None, sizes=None, *, coordinate_transformation_mode,
              cubic_coeff_a, exclude_outside, extrapolation_value, mode, nearest_mode):
    plan = _resize_shape(x, roi, scales, sizes, None, "stretch", coordinate_transformation_mode)
    how = _how(mode, coordinate_transformation_mode, nearest_mode, cubic_coeff_a,
               exclude_outside)
    return _resize(xp, x, plan, how, extrapolation_value)


def _check_upsample(node, provider):
    mode = node.attributes.get("mode")
    require(mode in ("nearest", "linear", "bilinear"), "{}: mode is nearest or linear, got {!r}",
            node.op_type, mode, code="attribute")
    kind = _data_type(node)
    allowed = NEAREST_TYPES if mode == "nearest" else REAL
    require(kind is None or kind in allowed, "{}: {} resizes {} data in {} mode, got {}",
            node.op_type, provider, "/".join(sorted(allowed)), mode, kind, code="dtype")
    attrs = node.attributes
    if "scales" in attrs:
        factors = list(attrs["scales"])
    elif "height_scale" in attrs:
        factors = [attrs["height_scale"], attrs.get("width_scale", 1.0)]
    else:
        scales = node.inputs[1] if len(node.inputs) > 1 else None
        factors = (scales.value.reshape(-1).tolist()
                   if scales is not None and scales.is_constant else [])
    require(min(factors, default=1) >= 1, "{}: version {} maps output positions to input ones by "
            "a rule the spec leaves unstated; {} follows onnxruntime's, which is settled only "
            "for scales >= 1, got {}", node.op_type, node.since_version, provider, factors,
            code="attribute")


def _upsample(xp, x, factors, mode):
    """Resize before opset 11 (and Upsample): output position i samples input i / scale
    (asymmetric), nearest taking the floor. The spec leaves the mapping unstated; this is the
    one onnxruntime and Caffe2 use, and for downsampling they disagree, so scales must be >= 1."""
    factors = [float(f) for f in factors]
    if len(factors) != x.ndim or min(factors, default=1) < 1:
        raise ValueError(f"scales {factors} must be >= 1, one per axis of rank {x.ndim}")
    plan = {a: (math.floor(x.shape[a] * s), x.shape[a] * s, s, (0.0, 1.0))
            for a, s in enumerate(factors)}
    how = _how("nearest" if mode == "nearest" else "linear", "asymmetric", "floor")
    return _resize(xp, x, plan, how)


@kernel("Resize", 10, dtypes=None, host_inputs=(1,), check=_check_upsample, family="data_movement")
@kernel("Upsample", 9, 10, dtypes=None, host_inputs=(1,), check=_check_upsample)
def upsample(xp, x, scales, *, mode):
    return _upsample(xp, x, scales.reshape(-1).tolist(), mode)


@kernel("Upsample", 7, dtypes=None, check=_check_upsample)
def upsample_7(xp, x, *, mode, scales):
    return _upsample(xp, x, scales, mode)


@kernel("Upsample", 1, dtypes=None, check=_check_upsample)
def upsample_1(xp, x, *, mode, height_scale, width_scale):
    if x.ndim != 4:
        raise ValueError(f"Upsample-1 takes 4-D input, got rank {x.ndim}")
    return _upsample(xp, x, [1.0, 1.0, height_scale, width_scale], mode)


# ---------------------------------------------------------------------------------------------
# GridSample and AffineGrid
# ---------------------------------------------------------------------------------------------


def _reflect(xp, x, lo, hi):
    """``x`` mirrored at ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    if span <= 0:
        return xp.zeros_like(x)
    d = xp.abs(x - lo) % (2 * span)
    return lo + xp.where(d > span, 2 * span - d, d)


def _grid_cubic(xp, t, a=-0.75):
    t = xp.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return xp.where(t <= 1, near, xp.where(t < 2, far, 0.0))


def _grid_taps(xp, coord, size, mode, padding, align):
    """(index, weight, valid) arrays for one spatial axis, one triple per tap."""
    if align:
        x = (coord + 1) / 2 * (size - 1)
        lo, hi = 0.0, size - 1.0
    else:
        x = ((coord + 1) * size - 1) / 2
        lo, hi = -0.5, size - 0.5
    if mode != "cubic":
        if padding == "border":
            x = xp.clip(x, 0, size - 1)
        elif padding == "reflection":
            x = xp.clip(_reflect(xp, x, lo, hi), 0, size - 1)
    if mode == "nearest":
        offsets, base = [(0, None)], xp.rint(x)  # halfway: the even index
    else:
        base = xp.floor(x)
        t = x - base
        if mode == "linear":
            offsets = [(0, 1 - t), (1, t)]
        else:
            offsets = [(k, _grid_cubic(xp, t - k)) for k in (-1, 0, 1, 2)]
    taps = []
    for k, w in offsets:
        j = base + k
        if padding == "border":
            j = xp.clip(j, 0, size - 1)
        elif padding == "reflection":
            j = xp.clip(_reflect(xp, j, lo, hi), 0, size - 1)
            j = xp.rint(j) if mode == "nearest" else j
        valid = (j >= 0) & (j <= size - 1)
        taps.append((xp.clip(j, 0, size - 1).astype(xp.int64), w, valid))
    return taps


def _check_grid_sample(modes):
    def check(node, provider):
        attrs = node.attributes
        mode = attrs.get("mode")
        require(mode in modes, "GridSample: version {} interpolates by {}, got {!r}",
                node.since_version, "/".join(modes), mode, code="attribute")
        padding = attrs.get("padding_mode")
        require(padding in ("zeros", "border", "reflection"), "GridSample: padding_mode is "
                "zeros, border or reflection, got {!r}", padding, code="attribute")
        kind = _data_type(node)
        allowed = NUMERIC | {"bool", "bfloat16"} if mode == "nearest" else REAL
        require(kind is None or kind in allowed, "GridSample: {} samples {} data in {} mode, "
                "got {}", provider, "/".join(sorted(allowed)), mode, kind, code="dtype")
        grid = node.inputs[1].dtype
        require(grid is None or grid.name in REAL, "GridSample: the grid is {}, got {}",
                "/".join(sorted(REAL)), grid, code="dtype")
    return check


def _grid_sample(xp, x, grid, mode, padding, align):
    r = x.ndim - 2
    if grid.shape[-1] != r or grid.shape[0] != x.shape[0]:
        raise ValueError(f"grid of shape {grid.shape} for input of shape {x.shape}")
    work = _work_type(xp, x) if x.dtype.kind == "f" or mode != "nearest" else None
    g = grid.astype(xp.float64)
    batch = x.shape[0]
    moved = xp.moveaxis(x, 1, -1)  # (N, D1..Dr, C): gathering keeps C last
    n = xp.arange(batch).reshape((batch,) + (1,) * r)
    per_axis = [_grid_taps(xp, g[..., r - 1 - i], x.shape[2 + i], mode, padding, align)
                for i in range(r)]  # the grid lists coordinates innermost axis first
    out = None
    for combo in itertools.product(*per_axis):
        values = moved[(n,) + tuple(j for j, _, _ in combo)]
        valid = combo[0][2]
        for _, _, v in combo[1:]:
            valid = valid & v
        if work is None:  # nearest on non-float data: select, never multiply
            term = xp.where(valid[..., None], values, zero_of(xp, x.dtype))
        else:
            weight = xp.ones(valid.shape, dtype=xp.float64)
            for _, w, _ in combo:
                if w is not None:
                    weight = weight * w
            term = values.astype(work) * weight[..., None].astype(work)
            term = xp.where(valid[..., None], term, 0)  # outside: zero, even next to inf
        out = term if out is None else out + term
    return xp.moveaxis(out, -1, 1).astype(x.dtype, copy=False)


@kernel("GridSample", 20, 22, dtypes=None, check=_check_grid_sample(("linear", "nearest",
                                                                      "cubic")))
def grid_sample(xp, x, grid, *, align_corners, mode, padding_mode):
    return _grid_sample(xp, x, grid, mode, padding_mode, align_corners)


@kernel("GridSample", 16, dtypes=None,
        check=_check_grid_sample(("bilinear", "nearest", "bicubic")))
def grid_sample_16(xp, x, grid, *, align_corners, mode, padding_mode):
    if x.ndim != 4:
        raise ValueError(f"GridSample-16 takes 4-D input, got rank {x.ndim}")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    return _grid_sample(xp, x, grid, mode, padding_mode, align_corners)


def _grid_line(xp, n, align):
    i = xp.arange(n, dtype=xp.float64)
    return -1 + 2 * i / (n - 1) if align else (2 * i + 1) / n - 1


SINGLE_ALIGNED = ("AffineGrid: with align_corners=1 an axis of size 1 has no agreed position "
                  "(the spec's function body gives -1 for a depth and NaN for a height or width, "
                  "onnxruntime +1, PyTorch 0); {} declines it")


def check_affine_grid(node, provider):
    size = node.inputs[1]
    if node.attributes.get("align_corners") and size.is_constant:
        require(1 not in int_list(size.value)[2:], SINGLE_ALIGNED, provider, code="shape")


@kernel("AffineGrid", 20, dtypes=REAL, host_inputs=(1,), check=check_affine_grid)
def affine_grid(xp, theta, size, *, align_corners):
    dims = int_list(size)[2:]  # (D,) H, W
    r = len(dims)
    if r not in (2, 3) or theta.shape[1:] != (r, r + 1):
        raise ValueError(f"theta of shape {theta.shape} for size {int_list(size)}")
    if align_corners and 1 in dims:
        raise ValueError(SINGLE_ALIGNED.format("this kernel"))
    lines = [_grid_line(xp, n, align_corners) for n in dims]
    mesh = xp.meshgrid(*lines, indexing="ij")  # per spatial axis, outermost first
    points = xp.stack([*reversed(mesh), xp.ones(tuple(dims))], axis=-1)  # (x, y[, z], 1)
    t = theta.astype(xp.float64)
    out = xp.einsum("...k,njk->n...j", points, t)
    return out.astype(theta.dtype)


# ---------------------------------------------------------------------------------------------
# RoiAlign
# ---------------------------------------------------------------------------------------------


def _roi_samples(xp, start, bin_size, bins, grid, size, work):
    """Sample positions along one axis of a roi: for each (bin, sample) the two neighbouring
    input rows and their bilinear weights (zero for samples outside the input)."""
    k = xp.arange(bins, dtype=work).reshape(bins, 1)
    s = xp.arange(grid, dtype=work).reshape(1, grid)
    y = (start + k * bin_size) + (s + 0.5) * bin_size / work(grid)
    outside = (y < -1) | (y > size)
    y = xp.maximum(y, 0)
    low = xp.floor(y).astype(xp.int64)
    edge = low >= size - 1
    low = xp.where(edge, size - 1, low)
    high = xp.where(edge, size - 1, low + 1)
    y = xp.where(edge, low.astype(work), y)
    frac = y - low.astype(work)
    keep = (~outside).astype(work)
    return low, high, (1 - frac) * keep, frac * keep


def check_roi_align(node, provider):
    mode = node.attributes.get("mode")
    require(mode in ("avg", "max"), "RoiAlign: mode is avg or max, got {!r}", mode,
            code="attribute")
    transform = node.attributes.get("coordinate_transformation_mode", "output_half_pixel")
    require(transform in ("half_pixel", "output_half_pixel"), "RoiAlign: "
            "coordinate_transformation_mode is half_pixel or output_half_pixel, got {!r}",
            transform, code="attribute")


def _roi_align(xp, x, rois, batch_indices, mode, height, width, ratio, scale, half_pixel):
    work = _work_type(xp, x)  # also the precision of the roi geometry, as onnxruntime's
    data = x.astype(work)
    channels = x.shape[1]
    boxes = rois.astype(work).tolist()
    batches = [int(b) for b in batch_indices.reshape(-1).tolist()]
    out = xp.zeros((len(boxes), channels, height, width), dtype=work)
    shift, scale = work(0.5 if half_pixel else 0.0), work(scale)
    for r, (box, b) in enumerate(zip(boxes, batches, strict=True)):
        x1, y1, x2, y2 = (work(v) * scale - shift for v in box)
        roi_h, roi_w = y2 - y1, x2 - x1
        if not half_pixel:  # the legacy behaviour: rois at least one pixel wide
            roi_h, roi_w = max(roi_h, work(1)), max(roi_w, work(1))
        bin_h, bin_w = roi_h / work(height), roi_w / work(width)
        grid_h = ratio if ratio > 0 else math.ceil(roi_h / work(height))
        grid_w = ratio if ratio > 0 else math.ceil(roi_w / work(width))
        ys = _roi_samples(xp, y1, bin_h, height, grid_h, x.shape[2], work)
        xs = _roi_samples(xp, x1, bin_w, width, grid_w, x.shape[3], work)
        image = data[b]
        if mode == "avg":  # separable: weights per row times weights per column
            rows = xp.zeros((height, x.shape[2]), dtype=work)
            cols = xp.zeros((width, x.shape[3]), dtype=work)
            for at, idx, w in ((rows, ys[0], ys[2]), (rows, ys[1], ys[3]),
                               (cols, xs[0], xs[2]), (cols, xs[1], xs[3])):
                bins = xp.broadcast_to(xp.arange(at.shape[0]).reshape(-1, 1), idx.shape)
                xp.add.at(at, (bins, idx), w.astype(work))
            count = max(grid_h * grid_w, 1)
            # only the rows and columns the samples touch: the roi's window of the image
            y0, y1 = int(min(ys[0].min(), ys[1].min())), int(max(ys[0].max(), ys[1].max())) + 1
            x0, x1 = int(min(xs[0].min(), xs[1].min())), int(max(xs[0].max(), xs[1].max())) + 1
            window = xp.matmul(rows[:, y0:y1], image[:, y0:y1, x0:x1])  # (C, height, x1 - x0)
            out[r] = xp.matmul(window, cols[:, x0:x1].T) / count
        else:  # the largest weighted corner over all samples of each bin
            best = None
            for yi, wy in ((ys[0], ys[2]), (ys[1], ys[3])):
                for xi, wx in ((xs[0], xs[2]), (xs[1], xs[3])):
                    v = image[:, yi[:, :, None, None], xi[None, None, :, :]]
                    v = v * (wy[:, :, None, None] * wx[None, None, :, :]).astype(work)
                    best = v if best is None else xp.maximum(best, v)
            out[r] = best.max(axis=(2, 4))
    return out.astype(x.dtype, copy=False)


@kernel("RoiAlign", 16, 22, dtypes=REAL, check=check_roi_align)
def roi_align(xp, x, rois, batch_indices, *, coordinate_transformation_mode, mode,
              output_height, output_width, sampling_ratio, spatial_scale):
    return _roi_align(xp, x, rois, batch_indices, mode, output_height, output_width,
                      sampling_ratio, spatial_scale, coordinate_transformation_mode == "half_pixel")


@kernel("RoiAlign", 10, dtypes=FLOATS, check=check_roi_align)
def roi_align_10(xp, x, rois, batch_indices, *, mode, output_height, output_width,
                 sampling_ratio, spatial_scale):
    return _roi_align(xp, x, rois, batch_indices, mode, output_height, output_width,
                      sampling_ratio, spatial_scale, False)


# ---------------------------------------------------------------------------------------------
# NonMaxSuppression
# ---------------------------------------------------------------------------------------------


def _corners(xp, boxes, center_point_box):
    b = boxes.astype(xp.float64)
    if center_point_box:
        cx, cy, w, h = (b[..., i] for i in range(4))
        return cy - h / 2, cx - w / 2, cy + h / 2, cx + w / 2
    y1, x1, y2, x2 = (b[..., i] for i in range(4))
    return xp.minimum(y1, y2), xp.minimum(x1, x2), xp.maximum(y1, y2), xp.maximum(x1, x2)


SMALL_GROUP = 512  # boxes whose pairwise IoU matrix is computed at once


def _greedy_keep(xp, corners, order, overlap: float, limit: int) -> list[int]:
    """The boxes of `order` (best first) that greedy suppression keeps. Boxes whose x ranges
    do not meet never suppress each other (their IoU is 0, and 0 <= a threshold >= 0), so the
    boxes split into groups along x (a detector's batched NMS offsets each class apart) and
    each group is suppressed alone, a small group through its whole IoU matrix at once."""
    top, left, bottom, right = corners
    if not overlap >= 0 or order.shape[0] <= 1:
        return _greedy_keep_rows(xp, corners, order, overlap, limit)
    by_left = xp.argsort(left[order], kind="stable")
    reach = xp.maximum.accumulate(right[order][by_left])
    starts = xp.nonzero(left[order][by_left][1:] >= reach[:-1])[0] + 1
    groups = xp.split(by_left, starts.tolist())
    if max(len(g) for g in groups) > SMALL_GROUP:
        return _greedy_keep_rows(xp, corners, order, overlap, limit)
    kept_positions: list[int] = []
    for positions in groups:
        positions = xp.sort(positions)  # best first within the group
        if len(positions) == 1:
            kept_positions.append(int(positions[0]))
            continue
        boxes = order[positions]
        t, le, b, r = top[boxes], left[boxes], bottom[boxes], right[boxes]
        area = (b - t) * (r - le)
        h = xp.clip(xp.minimum(b[:, None], b[None]) - xp.maximum(t[:, None], t[None]), 0, None)
        w = xp.clip(xp.minimum(r[:, None], r[None]) - xp.maximum(le[:, None], le[None]), 0,
                    None)
        inter = h * w
        union = area[:, None] + area[None] - inter
        ok = (area[:, None] > 0) & (area[None] > 0) & (union > 0)
        suppresses = ~(xp.where(ok, inter / xp.where(ok, union, 1.0), 0.0) <= overlap)
        suppressed = xp.zeros(len(positions), dtype=bool)
        count = 0
        for i in range(len(positions)):
            if suppressed[i]:
                continue
            kept_positions.append(int(positions[i]))
            count += 1
            if count == limit:
                break
            suppressed |= suppresses[i]
    kept_positions.sort()  # back to the order of `order`: best first
    return [int(order[p]) for p in kept_positions[:limit]]


def _greedy_keep_rows(xp, corners, order, overlap: float, limit: int) -> list[int]:
    """The boxes of `order` (best first) that greedy suppression keeps: each box in turn, unless
    a box kept before it overlaps it with an intersection over union above `overlap` (a box with
    no area overlaps nothing). Works on one kept box against the remaining candidates at a time,
    so memory stays linear in the boxes (a pairwise matrix of 27,000 boxes is 5.8 GB)."""
    top, left, bottom, right = corners
    area = (bottom - top) * (right - left)
    alive = order
    kept: list[int] = []
    while alive.shape[0] and len(kept) < limit:
        i, rest = int(alive[0]), alive[1:]
        kept.append(i)
        h = xp.clip(xp.minimum(bottom[i], bottom[rest]) - xp.maximum(top[i], top[rest]), 0, None)
        w = xp.clip(xp.minimum(right[i], right[rest]) - xp.maximum(left[i], left[rest]), 0, None)
        inter = h * w
        union = area[i] + area[rest] - inter
        ok = (area[i] > 0) & (area[rest] > 0) & (union > 0)
        iou = xp.where(ok, inter / xp.where(ok, union, 1.0), 0.0)
        alive = rest[iou <= overlap]
    return kept


@kernel("NonMaxSuppression", 10, 11, dtypes={"float32"}, host_inputs=(2, 3, 4))
def non_max_suppression(xp, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
                        score_threshold=None, *, center_point_box):
    limit = 0 if max_output_boxes_per_class is None else int_list(max_output_boxes_per_class)[0]
    overlap = 0.0 if iou_threshold is None else float(iou_threshold.reshape(-1)[0])
    least = None if score_threshold is None else float(score_threshold.reshape(-1)[0])
    selected = []
    for b in range(boxes.shape[0] if limit > 0 else 0):
        corners = _corners(xp, boxes[b], center_point_box)
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = xp.argsort(-s, kind="stable")  # best first; ties: the first box
            if least is not None:
                order = order[~(s[order] < least)]  # scores below the threshold are removed
            kept = _greedy_keep(xp, corners, order, overlap, limit)
            selected.extend([b, c, i] for i in kept)
    return xp.asarray(selected, dtype=xp.int64).reshape(len(selected), 3)


# ---------------------------------------------------------------------------------------------
# MaxUnpool and Col2Im
# ---------------------------------------------------------------------------------------------


@kernel("MaxUnpool", 9, 11, dtypes=FLOATS, host_inputs=(2,))
@kernel("MaxUnpool", 22, dtypes=REAL, host_inputs=(2,))
def max_unpool(xp, x, indices, output_shape=None, *, kernel_shape, pads=None, strides=None):
    """The indices address the unpooled shape that kernel_shape, strides and pads give; an
    ``output_shape`` one larger along an axis adds a zero row at its end (as onnx's expected
    outputs do). Where larger auto-generated pads go is unspecified: those are refused."""
    r = len(kernel_shape)
    ignored = output_shape is not None and output_shape.size
    pads = [0] * 2 * r if ignored or not pads else list(pads)
    strides = list(strides or [1] * r)
    shape = tuple(x.shape[:2]) + tuple(
        (x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + r] + kernel_shape[i]
        for i in range(r))
    out = xp.zeros(math.prod(shape), dtype=x.dtype)
    flat = indices.reshape(-1).astype(xp.int64)
    if flat.size and (int(flat.min()) < 0 or int(flat.max()) >= out.size):
        raise IndexError(f"an index lies outside an output of shape {shape}")
    out[flat] = x.reshape(-1)
    out = out.reshape(shape)
    if ignored:
        extra = [t - d for t, d in zip(int_list(output_shape), shape, strict=True)]
        if extra[:2] != [0, 0] or not all(e in (0, 1) for e in extra):
            raise ValueError(f"output_shape {int_list(output_shape)} differs from the unpooled "
                             f"shape {shape} by more than one row per axis")
        out = pad_axes(xp, out, [0] * len(extra) + extra, None, "constant")
    return out


COL2IM_TYPES = NUMERIC | {"bfloat16"}


@kernel("Col2Im", 18, dtypes=COL2IM_TYPES, host_inputs=(1, 2), family="conv")
def col2im(xp, x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image, block = int_list(image_shape), int_list(block_shape)
    r = len(image)
    dilations = list(dilations or [1] * r)
    pads = list(pads or [0] * 2 * r)
    strides = list(strides or [1] * r)
    padded = [image[i] + pads[i] + pads[i + r] for i in range(r)]
    counts = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(r)]
    n, cols = x.shape[0], x.shape[2]
    if cols != math.prod(counts) or x.shape[1] % math.prod(block):
        raise ValueError(f"input of shape {x.shape} does not hold blocks {block} of an image "
                         f"{image} ({counts} blocks)")
    c = x.shape[1] // math.prod(block)
    work = xp.float32 if x.dtype.name == "bfloat16" else x.dtype
    blocks = x.astype(work).reshape((n, c) + tuple(block) + tuple(counts))
    out = xp.zeros((n, c) + tuple(padded), dtype=work)
    for offset in itertools.product(*(range(k) for k in block)):
        window = tuple(slice(o * d, o * d + s * (m - 1) + 1, s)
                       for o, d, s, m in zip(offset, dilations, strides, counts, strict=True))
        out[(slice(None), slice(None)) + window] += blocks[(slice(None), slice(None)) + offset]
    crop = tuple(slice(pads[i], pads[i] + image[i]) for i in range(r))
    return out[(slice(None), slice(None)) + crop].astype(x.dtype)

