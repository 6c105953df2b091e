"""Shape and data-movement ops: Reshape, Transpose, Shape, Size, Gather, GatherND, Slice, Split,
Concat, Squeeze, Unsqueeze, Expand, Flatten, Cast, CastLike, ConstantOfShape, Range and Constant;
the indexing ops Pad, GatherElements, ScatterElements, Scatter, ScatterND, TensorScatter, Tile,
OneHot, Compress, NonZero, Unique, ReverseSequence, EyeLike, Trilu and BitCast. Data movement
carries every element type, ml_dtypes' (bfloat16, float8, 4- and 2-bit) included.

Shape-like inputs (a Reshape's shape, Slice's starts, axes...) are host inputs, read with plain
Python. Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Slice and Split return views of their
input, never writing into it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ep_host import check_allocation, deny, dtype, element_count, require
from ep_host.kernels.helpers import (
    along_axis,
    broadcast_shape,
    index_bounds,
    int_list,
    normalize_axis,
    pad_axes,
    zero_of,
)
from ep_host.kernels.registry import (
    ALL,
    ALL_WITH_STRING,
    EXOTIC,
    FLOATS,
    INTS,
    MOVABLE,
    NUMERIC,
    kernel,
)

RANGE_11 = frozenset({"float32", "float64", "int16", "int32", "int64"})


def no_work(node):
    return 0


def _element_type(array):
    try:
        return dtype(array.dtype).name
    except ValueError:
        return str(array.dtype)


# ---------------------------------------------------------------------------------------------
# Views: Reshape, Flatten, Squeeze, Unsqueeze, Transpose
# ---------------------------------------------------------------------------------------------


def _reshape(data, shape, allowzero, dims=None):
    """``dims``: the constant shape's dims when :func:`_prepare_reshape` found them valid and
    none copies an input dim (a tuple); then the shape input is not read again."""
    if dims is not None:
        return data.reshape(dims)
    dims = int_list(shape)
    if not allowzero:  # 0 copies the input's dim at that position
        for i, d in enumerate(dims):
            if d == 0:
                if i >= data.ndim:
                    raise ValueError(f"shape {dims} copies dim {i} of an input of rank {data.ndim}")
                dims[i] = data.shape[i]
    if _bad_dims(dims):
        raise ValueError(f"shape {dims} has more than one -1 or a dim below -1")
    return data.reshape(tuple(dims))


def _bad_dims(dims):
    """Whether a Reshape's ``dims`` have more than one -1 or a dim below -1."""
    return dims.count(-1) > 1 or any(d < -1 for d in dims)


def _prepare_reshape(xp, constants, *, allowzero=0, **_):
    """A constant shape's dims, once, where the run would take them as they are: at most one
    -1, none below it, and no 0 that copies an input dim (read per run: 1.5-3 us of a
    scikit-learn classifier's label Reshape)."""
    shape = constants.get(1)
    if shape is None:
        return {}
    dims = int_list(shape)
    if _bad_dims(dims) or (not allowzero and 0 in dims):
        return {}
    return {"dims": tuple(dims)}


@kernel("Reshape", 14, 19, 21, 23, 24, 25, dtypes=MOVABLE, host_inputs=(1,), flops=no_work,
        bytes=no_work, family="data_movement", prepare=_prepare_reshape)
def reshape(xp, data, shape, *, allowzero, dims=None):
    return _reshape(data, shape, allowzero, dims)


@kernel("Reshape", 5, 13, dtypes=MOVABLE, host_inputs=(1,), flops=no_work, bytes=no_work,
        family="data_movement", prepare=_prepare_reshape)
def reshape_copying_zeros(xp, data, shape, *, dims=None):
    return _reshape(data, shape, 0, dims)


@kernel("Reshape", 1, dtypes=FLOATS, flops=no_work, bytes=no_work, family="data_movement")
def reshape_attribute(xp, data, *, shape):
    return _reshape(data, shape, 0)


@kernel("Flatten", 9, 11, 13, 21, 23, 24, 25, dtypes=MOVABLE, flops=no_work, bytes=no_work,
        family="data_movement")
@kernel("Flatten", 1, dtypes=FLOATS, flops=no_work, bytes=no_work, family="data_movement")
def flatten(xp, x, *, axis):
    rank = x.ndim
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range [-{rank}, {rank}]")
    axis = axis + rank if axis < 0 else axis
    return x.reshape(element_count(x.shape[:axis]), element_count(x.shape[axis:]))


def _squeeze(data, axes):
    if axes is None or len(axes) == 0:
        return data.reshape(tuple(d for d in data.shape if d != 1))
    drop = {normalize_axis(a, data.ndim) for a in int_list(axes)}
    for a in drop:
        if data.shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {data.shape[a]}")
    return data.reshape(tuple(d for i, d in enumerate(data.shape) if i not in drop))


@kernel("Squeeze", 13, 21, 23, 24, 25, dtypes=MOVABLE, host_inputs=(1,), flops=no_work,
        bytes=no_work, family="data_movement")
def squeeze(xp, data, axes=None):
    return _squeeze(data, axes)


@kernel("Squeeze", 1, 11, dtypes=MOVABLE, flops=no_work, bytes=no_work, family="data_movement")
def squeeze_axes_attribute(xp, data, *, axes=None):
    return _squeeze(data, axes)


def _unsqueeze(data, axes):
    values = int_list(axes)
    rank = data.ndim + len(values)
    inserted = sorted({normalize_axis(a, rank) for a in values})
    if len(inserted) != len(values):
        raise ValueError(f"axes {values} repeat an axis")
    shape = list(data.shape)
    for a in inserted:
        shape.insert(a, 1)
    return data.reshape(tuple(shape))


@kernel("Unsqueeze", 13, 21, 23, 24, 25, dtypes=MOVABLE, host_inputs=(1,), flops=no_work,
        bytes=no_work, family="data_movement")
def unsqueeze(xp, data, axes):
    return _unsqueeze(data, axes)


@kernel("Unsqueeze", 1, 11, dtypes=MOVABLE, flops=no_work, bytes=no_work, family="data_movement")
def unsqueeze_axes_attribute(xp, data, *, axes):
    return _unsqueeze(data, axes)


@kernel("Transpose", 1, 13, 21, 23, 24, 25, dtypes=MOVABLE, family="data_movement")
def transpose(xp, data, *, perm=None):
    return xp.transpose(data, None if perm is None else tuple(perm))


# ---------------------------------------------------------------------------------------------
# Shape and Size (any element type: only the shape is read)
# ---------------------------------------------------------------------------------------------


@kernel("Shape", 15, 19, 21, 23, 24, 25, dtypes=None, flops=no_work, bytes=no_work,
        family="data_movement")
def shape(xp, data, *, start, end=None):
    # Python slicing adds the rank to negative bounds, then clamps them to [0, rank]: the spec
    return xp.asarray(data.shape[start:end], dtype=xp.int64)


@kernel("Shape", 1, 13, dtypes=None, flops=no_work, bytes=no_work, family="data_movement")
def shape_whole(xp, data):
    return xp.asarray(data.shape, dtype=xp.int64)


@kernel("Size", 1, 13, 19, 21, 23, 24, 25, dtypes=None, flops=no_work, bytes=no_work,
        family="data_movement")
def size(xp, data):
    return xp.asarray(element_count(data.shape), dtype=xp.int64)


# ---------------------------------------------------------------------------------------------
# Indexing: Gather, GatherND, Slice
# ---------------------------------------------------------------------------------------------


@kernel("Gather", 1, 11, 13, dtypes=MOVABLE, family="data_movement")
def gather(xp, data, indices, *, axis):
    return xp.take(data, indices, axis=normalize_axis(axis, data.ndim))  # indices may be negative


@kernel("GatherND", 12, 13, dtypes=MOVABLE, family="data_movement")
@kernel("GatherND", 11, dtypes=MOVABLE, family="data_movement")
def gather_nd(xp, data, indices, *, batch_dims=0):
    b, k = batch_dims, indices.shape[-1]
    if tuple(indices.shape[:b]) != tuple(data.shape[:b]) or not 1 <= k <= data.ndim - b:
        raise ValueError(f"indices of shape {indices.shape} cannot index data of shape "
                         f"{data.shape} with batch_dims={b}")
    batches = element_count(data.shape[:b])
    flat = data.reshape((batches,) + tuple(data.shape[b:]))
    index = indices.reshape(batches, element_count(indices.shape[b:-1]), k)
    rows = xp.arange(batches).reshape(batches, 1)
    out = flat[(rows,) + tuple(index[..., j] for j in range(k))]  # negative indices wrap once
    return out.reshape(tuple(indices.shape[:-1]) + tuple(data.shape[b + k:]))


def _slice(data, starts, ends, axes, steps):
    starts, ends = int_list(starts), int_list(ends)
    axes = list(range(len(starts))) if axes is None else int_list(axes)
    steps = [1] * len(starts) if steps is None else int_list(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("starts, ends, axes and steps must have one length")
    index = [slice(None)] * data.ndim
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = normalize_axis(axis, data.ndim)
        if axis in seen or step == 0:
            raise ValueError(f"axis {axis} repeats or has step 0")
        seen.add(axis)
        dim = data.shape[axis]
        start = start + dim if start < 0 else start
        end = end + dim if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), dim), min(max(end, 0), dim)
        else:
            start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
        index[axis] = slice(start, None if end < 0 else end, step)
    return data[tuple(index)]


@kernel("Slice", 10, 11, 13, dtypes=MOVABLE, host_inputs=(1, 2, 3, 4), family="data_movement")
def slice_(xp, data, starts, ends, axes=None, steps=None):
    return _slice(data, starts, ends, axes, steps)


@kernel("Slice", 1, dtypes=MOVABLE, family="data_movement")
def slice_attributes(xp, data, *, starts, ends, axes=None):
    return _slice(data, starts, ends, axes, None)


# ---------------------------------------------------------------------------------------------
# Split and Concat
# ---------------------------------------------------------------------------------------------


def _split(xp, data, axis, sizes, n_outputs):
    axis = normalize_axis(axis, data.ndim)
    dim = data.shape[axis]
    if sizes is None:
        if dim % n_outputs:
            raise ValueError(f"dim {dim} does not split into {n_outputs} equal parts")
        sizes = [dim // n_outputs] * n_outputs
    sizes = int_list(sizes)
    if len(sizes) != n_outputs or sum(sizes) != dim or min(sizes, default=0) < 0:
        raise ValueError(f"split {sizes} does not cut dim {dim} into {n_outputs} parts")
    # views, not xp.split: numpy's took 16 us to cut 7 x 30 into ten parts, a slice each 6.6,
    # equal parts as the rows of one transposed view 2.1
    if n_outputs > 1 and sizes.count(sizes[0]) == n_outputs:
        shape = data.shape
        parts = data.reshape(shape[:axis] + (n_outputs, sizes[0]) + shape[axis + 1:])
        return tuple(parts.transpose((axis, *range(axis), *range(axis + 1, data.ndim + 1))))
    before, out, at = (slice(None),) * axis, [], 0
    for s in sizes:
        out.append(data[(*before, slice(at, at + s))])
        at += s
    return tuple(out)


def _outputs(node):
    return {"n_outputs": len(node.outputs)}


def check_split_18(node, provider):
    n = node.attributes.get("num_outputs")
    given = len(node.inputs) > 1 and node.inputs[1] is not None
    require((n is None) == given, "Split: version 18 takes the 'split' input or 'num_outputs', "
            "exactly one of them; got {}", "both" if given else "neither", code="attribute")
    require(n is None or n == len(node.outputs),
            "Split: num_outputs is {} but the node has {} outputs", n, len(node.outputs),
            code="attribute")


@kernel("Split", 18, dtypes=MOVABLE, host_inputs=(1,), bind=_outputs, check=check_split_18,
        family="data_movement")
def split(xp, data, sizes=None, *, axis, num_outputs=None, n_outputs=None):
    if num_outputs is not None:  # parts of ceil(dim / n), the last one smaller
        dim = data.shape[normalize_axis(axis, data.ndim)]
        chunk = -(-dim // num_outputs)
        sizes = [chunk] * (num_outputs - 1) + [dim - chunk * (num_outputs - 1)]
    return _split(xp, data, axis, sizes, n_outputs)


@kernel("Split", 13, dtypes=MOVABLE, host_inputs=(1,), bind=_outputs, family="data_movement")
def split_13(xp, data, sizes=None, *, axis, n_outputs=None):
    return _split(xp, data, axis, sizes, n_outputs)


@kernel("Split", 2, 11, dtypes=MOVABLE, bind=_outputs, family="data_movement")
def split_attribute(xp, data, *, axis, split=None, n_outputs=None):
    return _split(xp, data, axis, split, n_outputs)


@kernel("Concat", 4, 11, 13, dtypes=MOVABLE, family="data_movement")
def concat(xp, *inputs, axis):
    return xp.concatenate(inputs, axis=normalize_axis(axis, inputs[0].ndim))


@kernel("Concat", 1, dtypes=FLOATS, family="data_movement")
def concat_1(xp, *inputs, axis=1):
    return xp.concatenate(inputs, axis=axis)


# ---------------------------------------------------------------------------------------------
# Expand
# ---------------------------------------------------------------------------------------------


def _broadcast_shape(a, b):
    out = broadcast_shape(a, b)
    if out is None:
        raise ValueError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
    return out


@kernel("Expand", 8, 13, dtypes=MOVABLE, host_inputs=(1,), family="data_movement")
def expand(xp, data, shape):
    out_shape = _broadcast_shape(data.shape, int_list(shape))
    check_allocation(out_shape, data.dtype)
    return xp.broadcast_to(data, out_shape).copy()


# ---------------------------------------------------------------------------------------------
# Cast and CastLike
# ---------------------------------------------------------------------------------------------

FLOAT8 = frozenset({"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"})
CAST_9 = ALL_WITH_STRING
CAST_13 = CAST_9 | {"bfloat16"}
CAST_19 = CAST_13 | FLOAT8
CAST_21 = CAST_19 | {"int4", "uint4"}
CAST_23 = CAST_21 | {"float4e2m1"}
CAST_24 = CAST_23 | {"float8e8m0"}
CAST_25 = CAST_24 | {"int2", "uint2"}
# the types each Cast (1..28) and CastLike (15..25) version computes; not Cast 28's float6 types
CAST_TYPES = {1: ALL, 6: ALL, 9: CAST_9, 13: CAST_13, 15: CAST_13, 19: CAST_19, 21: CAST_21,
              23: CAST_23, 24: CAST_24, 25: CAST_25, 28: CAST_25}
FLOAT8_MAX = {"float8e4m3fn": 448.0, "float8e4m3fnuz": 240.0, "float8e5m2": 57344.0,
              "float8e5m2fnuz": 57344.0}
NARROW_FLOATS = FLOAT8 | {"bfloat16", "float4e2m1", "float8e8m0"}
ML_FLOAT_NAMES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                            "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn"})
SPECIAL_STRINGS = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan}


def _cast_target(to):
    """The element type ``to`` names: a TensorProto code, or (version 1) a name like "FLOAT"."""
    try:
        return dtype(to.lower() if isinstance(to, str) else to)
    except (ValueError, TypeError):
        return None


def _check_target(node, provider, op, target, what):
    types = CAST_TYPES[node.since_version]
    require(target is not None and target.name in types and target.numpy is not None,
            "{}-{}: {} casts to {}; got {} ({})", op, node.since_version, provider,
            "/".join(sorted(types)), what, "unknown" if target is None else target.name,
            code="dtype")
    if target.name == "float8e8m0":
        mode = node.attributes["round_mode"]
        require(mode in ("up", "down", "nearest"), "{}: round_mode must be up, down or nearest, "
                "got {!r}", op, mode, code="attribute")


def check_cast(node, provider):
    to = node.attributes.get("to")
    _check_target(node, provider, "Cast", _cast_target(to), f"to={to!r}")


def _cast_bind(node):
    return {"target": _cast_target(node.attributes["to"])}


def _to_odd(xp, rounded, inexact, away, bits):
    """Round-to-odd from a round-to-nearest result: step back toward zero where rounding went
    away from it, then set the last bit of every inexact value. Rounding the result once more
    to a format at least two bits narrower equals rounding the exact value there directly."""
    zero = xp.zeros((), dtype=rounded.dtype)
    toward = xp.where(inexact & away, xp.nextafter(rounded, zero), rounded)
    return (toward.view(bits) | inexact.astype(bits)).view(rounded.dtype)


def _to_float8(xp, f, target, saturate, fnuz_inf_nan):
    """Saturating: out-of-range values and +-inf clip to +-max (+-inf to NaN in the FNUZ types
    before Cast 24); otherwise ml_dtypes overflows to NaN (E5M2: to +-inf)."""
    if saturate:
        top = FLOAT8_MAX[target.name]
        y = xp.clip(f, -top, top)
        if fnuz_inf_nan and target.name.endswith("fnuz"):
            y = xp.where(xp.isinf(f), xp.float32(math.nan), y)
        f = y
    return f.astype(target.numpy)


def _to_e8m0(xp, f, target, saturate, round_mode):
    """2 ** (code - 127) for codes 0..254, 255 is NaN. Rounds |x| by ``round_mode``; a zero,
    infinite or out-of-range x saturates to the nearest end, or is NaN without ``saturate``."""
    mantissa, exponent = xp.frexp(xp.abs(f).astype(xp.float64))  # |x| = m * 2 ** e, m in [.5, 1)
    code = exponent.astype(xp.int64) + 126
    if round_mode == "up":
        code = code + (mantissa != 0.5)
        code = xp.where(code < 0, 0, code)  # rounds up to the smallest value, 2 ** -127
    elif round_mode == "nearest":
        code = code + (mantissa >= 0.75)
    finite = xp.isfinite(f)
    low, high = (0, 254) if saturate else (255, 255)
    code = xp.where(code < 0, low, xp.where(code > 254, high, code))
    code = xp.where(f == 0, low, code)
    code = xp.where(finite, code, xp.where(xp.isnan(f), 255, high))
    return code.astype(xp.uint8).view(target.numpy)


def _format_number(v, kind):
    if kind == "b":
        return "1" if v else "0"
    if kind in "iu":
        return str(int(v))
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return f"{v:.8g}"


def _to_strings(xp, x):
    """Numbers as text: integers in decimal, floats as %.8g ("314.15926"), +-inf as "INF" and
    "-INF", NaN as "NaN", bool as "1"/"0"."""
    if x.dtype.kind in "OUS":
        return x.astype(object)
    kind = x.dtype.kind
    if kind == "V":  # ml_dtypes: floats read as float32, 2- and 4-bit integers as int8
        kind = "f" if x.dtype.name in ML_FLOAT_NAMES else "i"
        x = x.astype(xp.float32 if kind == "f" else xp.int8)
    text = [_format_number(v, kind) for v in x.reshape(-1).tolist()]
    return xp.array(text, dtype=object).reshape(x.shape)


def _parse_float(s):
    """A decimal string as (nearest float64, inexact, rounded away from zero)."""
    word = s.strip().lower()
    if word in SPECIAL_STRINGS:
        return SPECIAL_STRINGS[word], False, False
    value = float(s)
    try:
        exact = Fraction(s.strip())
    except ValueError:
        return value, False, False
    if math.isinf(value):
        return value, True, True
    return value, Fraction(value) != exact, abs(Fraction(value)) > abs(exact)


def _parse_int(s):
    try:
        return int(s)
    except ValueError:
        value = float(s)  # "2.7" -> 2: the spec leaves this undefined
        return int(value) if math.isfinite(value) else 0


def _from_strings(xp, x, target):
    """Strings as bool, float64 (to a narrower float: rounded to odd, so that the decimal value
    rounds once) or int64/uint64 (wrapping); "2.7" to an integer (undefined) truncates."""
    words = [s.decode() if isinstance(s, bytes) else str(s) for s in x.reshape(-1).tolist()]
    if target.name == "bool":
        return xp.array([_parse_float(s)[0] != 0 for s in words]).reshape(x.shape)
    if target.is_float:
        parsed = [_parse_float(s) for s in words]
        values = xp.array([p[0] for p in parsed], dtype=xp.float64).reshape(x.shape)
        if target.name == "float64":
            return values
        inexact = xp.array([p[1] for p in parsed], dtype=bool).reshape(x.shape)
        away = xp.array([p[2] for p in parsed], dtype=bool).reshape(x.shape)
        return _to_odd(xp, values, inexact, away, xp.uint64)
    values = [_parse_int(s) % (1 << 64) for s in words]
    if target.name == "uint64":
        return xp.array(values, dtype=xp.uint64).reshape(x.shape)
    signed = [v - (1 << 64) if v >= 1 << 63 else v for v in values]
    return xp.array(signed, dtype=xp.int64).reshape(x.shape)


def cast_to(xp, x, target, *, saturate=1, round_mode="up", fnuz_inf_nan=False):
    """``x`` as ``target`` (a DType) by the rules of the Cast specification."""
    name = target.name
    if name == "string":
        return _to_strings(xp, x)
    if x.dtype.kind in "OUS":
        x = _from_strings(xp, x, target)
    if x.dtype.kind == "V":  # ml_dtypes: exactly as float32, or (2-, 4-bit integers) as int8
        x = x.astype(xp.float32 if x.dtype.name in ML_FLOAT_NAMES else xp.int8)
    if name not in NARROW_FLOATS:
        return x.astype(target.numpy, copy=False)
    if x.dtype == xp.float16 or x.dtype.kind == "b":
        x = x.astype(xp.float32)  # exact; ml_dtypes rounds float32, float64 and integers once
    if name in ("bfloat16", "float4e2m1"):
        return x.astype(target.numpy)  # to nearest even; float4e2m1 saturates to +-6
    if x.dtype.kind in "iu":
        x = x.astype(xp.float64)  # exact below 2 ** 53; anything larger saturates anyway
    if name in FLOAT8:
        return _to_float8(xp, x, target, saturate, fnuz_inf_nan)
    return _to_e8m0(xp, x, target, saturate, round_mode)


@kernel("Cast", 25, 28, dtypes=CAST_25, check=check_cast, bind=_cast_bind, family="elementwise")
@kernel("Cast", 24, dtypes=CAST_24, check=check_cast, bind=_cast_bind, family="elementwise")
def cast(xp, x, *, to, saturate=1, round_mode="up", target=None):
    """Floats truncate toward zero into integers (out of range or NaN: undefined, as the spec
    says); integers wrap; NaN and every non-zero value become True. Float 8 targets follow the
    spec's saturate tables; float4e2m1 saturates to +-6."""
    return cast_to(xp, x, target, saturate=saturate, round_mode=round_mode,
                   fnuz_inf_nan=False)


@kernel("Cast", 19, dtypes=CAST_19, check=check_cast, bind=_cast_bind, family="elementwise")
@kernel("Cast", 21, dtypes=CAST_21, check=check_cast, bind=_cast_bind, family="elementwise")
@kernel("Cast", 23, dtypes=CAST_23, check=check_cast, bind=_cast_bind, family="elementwise")
def cast_19(xp, x, *, to, saturate=1, target=None):
    """As Cast 24, except that a saturating cast maps +-inf to NaN in the FNUZ float 8 types."""
    return cast_to(xp, x, target, saturate=saturate, fnuz_inf_nan=True)


@kernel("Cast", 9, dtypes=CAST_9, check=check_cast, bind=_cast_bind, family="elementwise")
@kernel("Cast", 13, dtypes=CAST_13, check=check_cast, bind=_cast_bind, family="elementwise")
@kernel("Cast", 1, 6, dtypes=ALL, check=check_cast, bind=_cast_bind, family="elementwise")
def cast_9(xp, x, *, to, target=None):
    return cast_to(xp, x, target)


def check_cast_like(node, provider):
    like = node.inputs[1]
    if like is not None and like.dtype is not None:
        _check_target(node, provider, "CastLike", like.dtype, f"target_type {like.name!r}")


@kernel("CastLike", 25, dtypes=CAST_25, check=check_cast_like, family="elementwise")
@kernel("CastLike", 24, dtypes=CAST_24, check=check_cast_like, family="elementwise")
def cast_like(xp, x, like, *, saturate, round_mode):
    return cast_to(xp, x, dtype(like.dtype), saturate=saturate, round_mode=round_mode)


@kernel("CastLike", 23, dtypes=CAST_23, check=check_cast_like, family="elementwise")
@kernel("CastLike", 21, dtypes=CAST_21, check=check_cast_like, family="elementwise")
@kernel("CastLike", 19, dtypes=CAST_19, check=check_cast_like, family="elementwise")
def cast_like_19(xp, x, like, *, saturate):
    return cast_to(xp, x, dtype(like.dtype), saturate=saturate, fnuz_inf_nan=True)


@kernel("CastLike", 15, dtypes=CAST_13, check=check_cast_like, family="elementwise")
def cast_like_15(xp, x, like):
    return cast_to(xp, x, dtype(like.dtype))


# ---------------------------------------------------------------------------------------------
# Constants: ConstantOfShape, Range, Constant
# ---------------------------------------------------------------------------------------------


def check_constant_of_shape(node, provider):
    value = node.attributes.get("value")
    if value is not None:
        require(_element_type(value) in ALL | EXOTIC, "ConstantOfShape: {} makes {} values, "
                "got {}", provider, "/".join(sorted(ALL | EXOTIC)), _element_type(value),
                code="dtype")
        require(value.size == 1, "ConstantOfShape: 'value' must hold one element, got {}",
                value.size, code="attribute")


@kernel("ConstantOfShape", 9, 20, 21, 23, 24, 25, dtypes={"int64"}, host_inputs=(0,),
        check=check_constant_of_shape, family="data_movement")
def constant_of_shape(xp, shape, *, value=None):
    dims = tuple(shape.reshape(-1).tolist())  # int64 (the kernel's type): Python ints
    check_allocation(dims, xp.float32 if value is None else value.dtype)
    if value is None:
        return xp.zeros(dims, dtype=xp.float32)
    out = xp.empty(dims, dtype=value.dtype)  # filled, not xp.full: 0.7 against 1.7 us
    out.fill(value.reshape(-1)[0])
    return out


def check_range(node, provider):
    x = node.inputs[0]
    if x is not None and x.dtype is not None and x.dtype.name in ("float16", "bfloat16"):
        stash = node.attributes.get("stash_type")
        require(stash == 1, "Range: {} computes {} ranges in float32 (stash_type=1), "
                "got stash_type={}", provider, x.dtype.name, stash, code="attribute")


@kernel("Range", 27, dtypes=RANGE_11 | {"float16", "bfloat16"}, host_inputs=(0, 1, 2),
        check=check_range, family="data_movement")
@kernel("Range", 11, dtypes=RANGE_11, host_inputs=(0, 1, 2), family="data_movement")
def range_(xp, start, limit, delta, *, stash_type=1):
    """``start + i * delta`` computed in the inputs' type (16-bit floats: in float32), as the spec's
    pseudocode says; onnxruntime accumulates ``delta`` instead, which drifts for floats.
    One-element 1-D inputs count as scalars (AffineGrid's function body passes those)."""
    start, limit, delta = (v.reshape(()) for v in (start, limit, delta))
    out_type = start.dtype
    if out_type.kind in "iu":
        s, d = int(start), int(delta)
        n = max(-((s - int(limit)) // d), 0)  # ceil((limit - start) / delta), exactly
        check_allocation((n,), xp.int64)
        return (xp.arange(n, dtype=xp.int64) * d + s).astype(out_type)
    work = xp.float32 if out_type.itemsize == 2 and out_type.kind not in "iu" else out_type
    s, lim, d = (float(v.astype(work)) for v in (start, limit, delta))
    n = max(math.ceil((lim - s) / d), 0)
    check_allocation((n,), work)
    return (xp.arange(n, dtype=work) * d + s).astype(out_type, copy=False)


CONSTANT_TYPES = MOVABLE


def check_constant(node, provider):
    attrs = node.attributes
    if "sparse_value" in attrs:
        deny("Constant: {} does not densify sparse_value; store the value as a dense "
             "'value' tensor", provider, code="attribute")
    if "value" in attrs:
        value = attrs["value"]
        require(_element_type(value) in CONSTANT_TYPES, "Constant: {} makes {} tensors, got {}",
                provider, "/".join(sorted(CONSTANT_TYPES)), _element_type(value), code="dtype")
        return
    _constant_value(node)


def _constant_value(node):
    """The array a Constant node produces, built once from its (checked) attributes."""
    attrs = node.attributes
    if "value" in attrs:
        return attrs["value"]
    for name, element in (("value_float", np.float32), ("value_floats", np.float32),
                          ("value_int", np.int64), ("value_ints", np.int64),
                          ("value_string", object), ("value_strings", object)):
        if name in attrs:
            return np.array(attrs[name], dtype=element)
    deny("Constant: the node sets none of value, sparse_value, value_*", code="attribute")


@kernel("Constant", 1, 9, 11, 12, 13, 19, 21, 23, 24, 25, dtypes=None, check=check_constant,
        bind=lambda node: {"array": _constant_value(node)}, flops=no_work, bytes=no_work)
def constant(xp, *, array=None):
    return xp.asarray(array)


# ---------------------------------------------------------------------------------------------
# Pad
# ---------------------------------------------------------------------------------------------


def _check_padded(data, pads, axes=None):
    """The size limit, checked on the padded shape before anything is allocated (pads that do
    not fit the axes are left to ``pad_axes`` to refuse)."""
    pads = int_list(pads)
    n = len(pads) // 2
    chosen = list(range(data.ndim)) if axes is None else [a % data.ndim if data.ndim else a
                                                          for a in int_list(axes)]
    if len(chosen) != n or any(not 0 <= a < data.ndim for a in chosen):
        return
    dims = list(data.shape)
    for i, a in enumerate(chosen):
        dims[a] += pads[i] + pads[i + n]
    check_allocation(dims, data.dtype)


def _check_pad(*modes):
    def check(node, provider):
        mode = node.attributes.get("mode", "constant")
        require(mode in modes, "Pad: version {} pads in {} mode, got mode={!r}",
                node.since_version, "/".join(modes), mode, code="attribute")
    return check


@kernel("Pad", 19, 21, 23, 24, 25, dtypes=MOVABLE, host_inputs=(1, 3),
        check=_check_pad("constant", "reflect", "edge", "wrap"), family="data_movement")
@kernel("Pad", 18, dtypes=MOVABLE, host_inputs=(1, 3),
        check=_check_pad("constant", "reflect", "edge"), family="data_movement")
def pad(xp, data, pads, constant_value=None, axes=None, *, mode):
    _check_padded(data, pads, axes)
    return pad_axes(xp, data, pads, constant_value, mode, axes)


@kernel("Pad", 11, 13, dtypes=MOVABLE, host_inputs=(1,),
        check=_check_pad("constant", "reflect", "edge"), family="data_movement")
def pad_11(xp, data, pads, constant_value=None, *, mode):
    _check_padded(data, pads)
    return pad_axes(xp, data, pads, constant_value, mode)


@kernel("Pad", 2, dtypes=FLOATS, check=_check_pad("constant", "reflect", "edge"),
        family="data_movement")
def pad_2(xp, data, *, pads, mode, value):
    _check_padded(data, pads)
    return pad_axes(xp, data, pads, value, mode)


@kernel("Pad", 1, dtypes=FLOATS, check=_check_pad("constant", "reflect", "edge"),
        family="data_movement")
def pad_1(xp, data, *, paddings, mode, value):
    _check_padded(data, paddings)
    return pad_axes(xp, data, paddings, value, mode)


# ---------------------------------------------------------------------------------------------
# Element indexing: GatherElements, ScatterElements, Scatter, ScatterND, TensorScatter
# ---------------------------------------------------------------------------------------------


def _in_range(xp, indices, dim):
    """``indices`` with negative values counted from the end; raises outside ``[-dim, dim)``."""
    idx = indices.astype(xp.int64, copy=False)
    if not idx.size:
        return idx
    low, high = index_bounds(xp, idx)
    if low < -dim or high >= dim:
        raise IndexError(f"an index lies outside [-{dim}, {dim - 1}]")
    return xp.where(idx < 0, idx + dim, idx) if low < 0 else idx


def _element_index(xp, indices, data, axis):
    """The index tuple that pairs each entry of ``indices`` (along ``axis``) with its own
    position along every other axis."""
    rank = indices.ndim
    if rank != data.ndim:
        raise ValueError(f"indices of rank {rank} for data of rank {data.ndim}")
    for d, n in enumerate(indices.shape):
        if d == axis:
            positions = _in_range(xp, indices, data.shape[axis])
        elif n > data.shape[d]:
            raise IndexError(f"indices dim {d} ({n}) exceeds the data's ({data.shape[d]})")
    return along_axis(xp, positions, axis)


@kernel("GatherElements", 11, 13, dtypes=MOVABLE, family="data_movement")
def gather_elements(xp, data, indices, *, axis):
    return data[_element_index(xp, indices, data, normalize_axis(axis, data.ndim))]


REDUCIBLE = FLOATS | INTS


def _scatter(xp, out, index, updates, reduction):
    if reduction == "none":
        out[index] = updates  # duplicates: undefined in the spec
    else:
        ufunc = {"add": xp.add, "mul": xp.multiply, "max": xp.maximum, "min": xp.minimum}
        ufunc[reduction].at(out, index, updates)  # in index order, duplicates accumulate
    return out


def _check_scatter(*reductions):
    def check(node, provider):
        reduction = node.attributes.get("reduction", "none")
        require(reduction in reductions, "{}: version {} reduces by {}, got reduction={!r}",
                node.op_type, node.since_version, "/".join(reductions), reduction,
                code="attribute")
        data = node.inputs[0].dtype
        require(reduction == "none" or data is None or data.name in REDUCIBLE,
                "{}: {} reduces {} data, got {} with reduction={!r}", node.op_type, provider,
                "/".join(sorted(REDUCIBLE)), data, reduction, code="dtype")
    return check


@kernel("ScatterElements", 18, dtypes=MOVABLE,
        check=_check_scatter("none", "add", "mul", "max", "min"), family="data_movement")
@kernel("ScatterElements", 16, dtypes=MOVABLE, check=_check_scatter("none", "add", "mul"),
        family="data_movement")
def scatter_elements(xp, data, indices, updates, *, axis, reduction):
    index = _element_index(xp, indices, data, normalize_axis(axis, data.ndim))
    return _scatter(xp, data.copy(), index, updates, reduction)


@kernel("ScatterElements", 11, 13, dtypes=MOVABLE, family="data_movement")
@kernel("Scatter", 9, 11, dtypes=MOVABLE)
def scatter_elements_11(xp, data, indices, updates, *, axis):
    index = _element_index(xp, indices, data, normalize_axis(axis, data.ndim))
    return _scatter(xp, data.copy(), index, updates, "none")


def _scatter_nd(xp, data, indices, updates, reduction):
    k = indices.shape[-1]
    if not 1 <= k <= data.ndim:
        raise ValueError(f"indices of shape {indices.shape} cannot index data of rank {data.ndim}")
    rows = element_count(indices.shape[:-1])
    flat = indices.reshape(rows, k)
    index = tuple(_in_range(xp, flat[:, j], data.shape[j]) for j in range(k))
    values = updates.reshape((rows,) + tuple(data.shape[k:]))
    return _scatter(xp, data.copy(), index, values, reduction)


@kernel("ScatterND", 18, dtypes=MOVABLE, check=_check_scatter("none", "add", "mul", "max", "min"),
        family="data_movement")
@kernel("ScatterND", 16, dtypes=MOVABLE, check=_check_scatter("none", "add", "mul"),
        family="data_movement")
def scatter_nd(xp, data, indices, updates, *, reduction):
    return _scatter_nd(xp, data, indices, updates, reduction)


@kernel("ScatterND", 11, 13, dtypes=MOVABLE, family="data_movement")
def scatter_nd_11(xp, data, indices, updates):
    return _scatter_nd(xp, data, indices, updates, "none")


def check_tensor_scatter(node, provider):
    mode = node.attributes.get("mode")
    require(mode in ("linear", "circular"), "TensorScatter: mode is linear or circular, got {!r}",
            mode, code="attribute")


@kernel("TensorScatter", 24, dtypes=MOVABLE, check=check_tensor_scatter)
def tensor_scatter(xp, past_cache, update, write_indices=None, *, mode, axis):
    axis = normalize_axis(axis, past_cache.ndim)
    if axis == 0:
        raise ValueError("TensorScatter's sequence axis cannot be the batch axis 0")
    batch, size, steps = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    start = (xp.zeros(batch, dtype=xp.int64) if write_indices is None
             else write_indices.astype(xp.int64).reshape(batch))
    at = start.reshape(batch, 1) + xp.arange(steps).reshape(1, steps)
    if mode == "circular":
        at = at % size
    elif at.size and (int(at.min()) < 0 or int(at.max()) >= size):
        raise IndexError(f"linear TensorScatter writes past the cache length {size}")
    out = past_cache.copy()
    view = xp.moveaxis(out, axis, 1)  # a view: writing it writes out
    view[xp.arange(batch).reshape(batch, 1), at] = xp.moveaxis(update, axis, 1)
    return out


# ---------------------------------------------------------------------------------------------
# Tile, OneHot, Compress, NonZero, Unique, ReverseSequence, EyeLike, Trilu, BitCast
# ---------------------------------------------------------------------------------------------


@kernel("Tile", 6, 13, dtypes=MOVABLE, host_inputs=(1,), family="data_movement")
def tile(xp, x, repeats):
    reps = int_list(repeats)
    if len(reps) != x.ndim or min(reps, default=0) < 0:
        raise ValueError(f"repeats {reps} must give a count >= 0 for each of {x.ndim} axes")
    check_allocation([d * r for d, r in zip(x.shape, reps, strict=True)], x.dtype)
    return xp.tile(x, tuple(reps))


@kernel("Tile", 1, dtypes=FLOATS, host_inputs=(1, 2), family="data_movement")
def tile_1(xp, x, tiles, axis):
    reps = [1] * x.ndim
    reps[normalize_axis(int_list(axis)[0], x.ndim)] = int_list(tiles)[0]
    check_allocation([d * r for d, r in zip(x.shape, reps, strict=True)], x.dtype)
    return xp.tile(x, tuple(reps))


def _one_hot(xp, indices, depth, values, axis, wrap):
    n = int(depth.reshape(-1)[0])
    if n < 1:
        raise ValueError(f"depth must be positive, got {n}")
    idx = indices.astype(xp.int64)  # floats truncate toward zero
    if wrap:
        idx = xp.where(idx < 0, idx + n, idx)
    rank = idx.ndim + 1
    axis = normalize_axis(axis, rank)
    classes = xp.arange(n).reshape((1,) * axis + (n,) + (1,) * (rank - axis - 1))
    flat = values.reshape(-1)
    off, on = flat[0:1].reshape(()), flat[1:2].reshape(())
    return xp.where(xp.expand_dims(idx, axis) == classes, on, off)


@kernel("OneHot", 11, 28, dtypes=NUMERIC, host_inputs=(1,))
def one_hot(xp, indices, depth, values, *, axis):
    return _one_hot(xp, indices, depth, values, axis, wrap=True)


@kernel("OneHot", 9, dtypes=NUMERIC, host_inputs=(1,))
def one_hot_9(xp, indices, depth, values, *, axis):
    return _one_hot(xp, indices, depth, values, axis, wrap=False)


@kernel("Compress", 9, 11, 28, dtypes=MOVABLE)
def compress(xp, x, condition, *, axis=None):
    keep = xp.nonzero(condition.reshape(-1))[0]
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = normalize_axis(axis, x.ndim)
    if keep.size and int(keep[-1]) >= x.shape[axis]:
        raise IndexError(f"condition selects entry {int(keep[-1])} of an axis of {x.shape[axis]}")
    return xp.take(x, keep, axis=axis)


def check_non_zero(node, provider):
    x = node.inputs[0]
    require(x.rank != 0, "NonZero: {} takes inputs of rank >= 1, got a scalar (the spec "
            "gives no index layout for rank 0)", provider, code="shape")


@kernel("NonZero", 9, 13, dtypes=MOVABLE, check=check_non_zero)
def non_zero(xp, x):
    if x.ndim == 0:
        raise ValueError("NonZero of a scalar has no index layout")
    return xp.stack(xp.nonzero(x)).astype(xp.int64).reshape(x.ndim, -1)


def _exactly_wider(x):
    """``x`` as a numpy-native type that holds its values exactly (float8, bfloat16, float4 as
    float32; 2- and 4-bit ints as int8), for functions that need native types."""
    if x.dtype.type.__module__.startswith("ml_dtypes"):
        return x.astype("float32" if dtype(x.dtype).is_float else "int8")
    return x


def check_unique(node, provider):
    x = node.inputs[0]
    require(node.attributes.get("axis") is None or x.dtype is None or x.dtype.name != "string",
            "Unique: {} finds unique string sub-tensors only without 'axis'", provider,
            code="dtype")


@kernel("Unique", 11, 28, dtypes=MOVABLE, check=check_unique)
def unique(xp, x, *, axis=None, sorted):
    wide = _exactly_wider(x)
    if axis is None:
        wide, axis = wide.reshape(-1), 0
    axis = normalize_axis(axis, wide.ndim)
    y, first, inverse, counts = xp.unique(wide, return_index=True, return_inverse=True,
                                          return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not sorted:  # in the order of first occurrence
        order = xp.argsort(first, kind="stable")
        rank = xp.empty_like(order)
        rank[order] = xp.arange(order.size)
        y, first, counts = xp.take(y, order, axis=axis), first[order], counts[order]
        inverse = rank[inverse]
    return (y.astype(x.dtype, copy=False), first.astype(xp.int64), inverse.astype(xp.int64),
            counts.astype(xp.int64))


@kernel("ReverseSequence", 10, 28, dtypes=MOVABLE)
def reverse_sequence(xp, x, sequence_lens, *, batch_axis, time_axis):
    if {batch_axis, time_axis} != {0, 1} or x.ndim < 2:
        raise ValueError(f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1")
    batch, steps = x.shape[batch_axis], x.shape[time_axis]
    lens = sequence_lens.astype(xp.int64).reshape(batch, 1)
    if batch and (int(lens.min()) < 0 or int(lens.max()) > steps):
        raise ValueError(f"sequence_lens must lie in [0, {steps}]")
    t = xp.arange(steps).reshape(1, steps)
    source = xp.where(t < lens, lens - 1 - t, t)  # (batch, time)
    if batch_axis == 1:
        source = source.T
    source = source.reshape(source.shape + (1,) * (x.ndim - 2))
    return xp.take_along_axis(x, xp.broadcast_to(source, x.shape), axis=time_axis)


EYE_TYPES = ALL | {"bfloat16"}


def _eye_type(node):
    code = node.attributes.get("dtype")
    return None if code is None else dtype(code)


def check_eye_like(node, provider):
    target = _eye_type(node)
    require(target is None or target.name in EYE_TYPES, "EyeLike: {} makes {} outputs, got "
            "dtype={}", provider, "/".join(sorted(EYE_TYPES)), target, code="dtype")
    rank = node.inputs[0].rank
    require(rank in (None, 2), "EyeLike: the input must be a matrix, got rank {}", rank,
            code="shape")


@kernel("EyeLike", 9, 22, dtypes=EYE_TYPES, check=check_eye_like,
        bind=lambda node: {"out_type": getattr(_eye_type(node), "numpy", None)},
        flops=no_work)
def eye_like(xp, x, *, k, out_type=None):
    if x.ndim != 2:
        raise ValueError(f"EyeLike takes a matrix, got rank {x.ndim}")
    return xp.eye(x.shape[0], x.shape[1], k=k, dtype=x.dtype if out_type is None else out_type)


@kernel("Trilu", 14, dtypes=MOVABLE, host_inputs=(1,), family="data_movement")
def trilu(xp, x, k=None, *, upper):
    k = 0 if k is None else int_list(k)[0]
    rows, cols = x.shape[-2:]
    above = xp.arange(cols).reshape(1, cols) - xp.arange(rows).reshape(rows, 1)
    keep = above >= k if upper else above <= k
    return xp.where(keep, x, zero_of(xp, x.dtype))


def check_bit_cast(node, provider):
    to = node.attributes.get("to")
    try:
        target = dtype(to)
    except (ValueError, TypeError):
        target = None
    source = node.inputs[0].dtype
    require(target is not None and target.name != "string" and target.numpy is not None,
            "BitCast: 'to' must name a non-string element type, got {!r}", to, code="attribute")
    require(source is None or source.bits == target.bits, "BitCast: {} ({} bits) cannot be "
            "reinterpreted as {} ({} bits)", source, getattr(source, "bits", "?"), target,
            target.bits, code="dtype")


@kernel("BitCast", 26, dtypes=MOVABLE - {"string"}, check=check_bit_cast,
        bind=lambda node: {"target": dtype(node.attributes["to"]).numpy}, flops=no_work)
def bit_cast(xp, x, *, to, target=None):
    """A bool target reads each byte as True when it is non-zero (other bytes than 0 and 1
    are no bool in numpy)."""
    if target == xp.bool_:
        return x.view(xp.uint8) != 0
    if x.dtype.itemsize == 1 and dtype(x.dtype).bits < 8:  # 2- and 4-bit types: one per byte
        return (x.view(xp.uint8) & ((1 << dtype(x.dtype).bits) - 1)).view(target)
    return x.view(target)
