"""Shape and data-movement ops: Reshape, Transpose, Shape, Size, Gather, GatherND, Slice, Split,
Concat, Squeeze, Unsqueeze, Expand, Flatten, Cast, ConstantOfShape, Range and Constant.

Shape-like inputs (a Reshape's shape, Slice's starts, axes...) are host inputs, read with plain
Python. Reshape, Squeeze, Unsqueeze, Flatten, Transpose, Slice and Split return views of their
input, never writing into it.
"""

from __future__ import annotations

import math

import numpy as np

from ep_host import deny, dtype, require
from ep_host_cpu.registry import ALL, ALL_WITH_STRING, FLOATS, kernel

MOVABLE = ALL_WITH_STRING | {"complex64", "complex128"}  # what data movement copies exactly
RANGE_11 = frozenset({"float32", "float64", "int16", "int32", "int64"})


def no_work(node):
    return 0


def _ints(values):
    return [int(v) for v in (values.reshape(-1).tolist() if hasattr(values, "reshape") else values)]


def _axis(axis, rank, what="axis"):
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def _product(dims):
    n = 1
    for d in dims:
        n *= d
    return n


def _element_type(array):
    try:
        return dtype(array.dtype).name
    except ValueError:
        return str(array.dtype)


# ---------------------------------------------------------------------------------------------
# Views: Reshape, Flatten, Squeeze, Unsqueeze, Transpose
# ---------------------------------------------------------------------------------------------


def _reshape(data, shape, allowzero):
    dims = _ints(shape)
    if not allowzero:  # 0 copies the input's dim at that position
        for i, d in enumerate(dims):
            if d == 0:
                if i >= data.ndim:
                    raise ValueError(f"shape {dims} copies dim {i} of an input of rank {data.ndim}")
                dims[i] = data.shape[i]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise ValueError(f"shape {dims} has more than one -1 or a dim below -1")
    return data.reshape(tuple(dims))


@kernel("Reshape", 14, 19, 21, 23, 24, 25, dtypes=MOVABLE, host_inputs=(1,), flops=no_work,
        bytes=no_work)
def reshape(xp, data, shape, *, allowzero):
    return _reshape(data, shape, allowzero)


@kernel("Reshape", 5, 13, dtypes=MOVABLE, host_inputs=(1,), flops=no_work, bytes=no_work)
def reshape_copying_zeros(xp, data, shape):
    return _reshape(data, shape, 0)


@kernel("Reshape", 1, dtypes=FLOATS, flops=no_work, bytes=no_work)
def reshape_attribute(xp, data, *, shape):
    return _reshape(data, shape, 0)


@kernel("Flatten", 9, 11, 13, 21, 23, 24, 25, dtypes=MOVABLE, flops=no_work, bytes=no_work)
@kernel("Flatten", 1, dtypes=FLOATS, flops=no_work, bytes=no_work)
def flatten(xp, x, *, axis):
    rank = x.ndim
    if not -rank <= axis <= rank:
        raise ValueError(f"axis {axis} is out of range [-{rank}, {rank}]")
    axis = axis + rank if axis < 0 else axis
    return x.reshape(_product(x.shape[:axis]), _product(x.shape[axis:]))


def _squeeze(data, axes):
    if axes is None or len(axes) == 0:
        return data.reshape(tuple(d for d in data.shape if d != 1))
    drop = {_axis(a, data.ndim) for a in _ints(axes)}
    for a in drop:
        if data.shape[a] != 1:
            raise ValueError(f"cannot squeeze axis {a} of size {data.shape[a]}")
    return data.reshape(tuple(d for i, d in enumerate(data.shape) if i not in drop))


@kernel("Squeeze", 13, 21, 23, 24, 25, dtypes=MOVABLE, host_inputs=(1,), flops=no_work,
        bytes=no_work)
def squeeze(xp, data, axes=None):
    return _squeeze(data, axes)


@kernel("Squeeze", 1, 11, dtypes=MOVABLE, flops=no_work, bytes=no_work)
def squeeze_axes_attribute(xp, data, *, axes=None):
    return _squeeze(data, axes)


def _unsqueeze(data, axes):
    values = _ints(axes)
    rank = data.ndim + len(values)
    inserted = sorted({_axis(a, rank) for a in values})
    if len(inserted) != len(values):
        raise ValueError(f"axes {values} repeat an axis")
    shape = list(data.shape)
    for a in inserted:
        shape.insert(a, 1)
    return data.reshape(tuple(shape))


@kernel("Unsqueeze", 13, 21, 23, 24, 25, dtypes=MOVABLE, host_inputs=(1,), flops=no_work,
        bytes=no_work)
def unsqueeze(xp, data, axes):
    return _unsqueeze(data, axes)


@kernel("Unsqueeze", 1, 11, dtypes=MOVABLE, flops=no_work, bytes=no_work)
def unsqueeze_axes_attribute(xp, data, *, axes):
    return _unsqueeze(data, axes)


@kernel("Transpose", 1, 13, 21, 23, 24, 25, dtypes=MOVABLE)
def transpose(xp, data, *, perm=None):
    return xp.transpose(data, None if perm is None else tuple(perm))


# ---------------------------------------------------------------------------------------------
# Shape and Size (any element type: only the shape is read)
# ---------------------------------------------------------------------------------------------


@kernel("Shape", 15, 19, 21, 23, 24, 25, dtypes=None, flops=no_work, bytes=no_work)
def shape(xp, data, *, start, end=None):
    # Python slicing adds the rank to negative bounds, then clamps them to [0, rank]: the spec
    return xp.asarray(data.shape[start:end], dtype=xp.int64)


@kernel("Shape", 1, 13, dtypes=None, flops=no_work, bytes=no_work)
def shape_whole(xp, data):
    return xp.asarray(data.shape, dtype=xp.int64)


@kernel("Size", 1, 13, 19, 21, 23, 24, 25, dtypes=None, flops=no_work, bytes=no_work)
def size(xp, data):
    return xp.asarray(_product(data.shape), dtype=xp.int64)


# ---------------------------------------------------------------------------------------------
# Indexing: Gather, GatherND, Slice
# ---------------------------------------------------------------------------------------------


@kernel("Gather", 1, 11, 13, dtypes=MOVABLE)
def gather(xp, data, indices, *, axis):
    return xp.take(data, indices, axis=_axis(axis, data.ndim))  # indices may be negative


@kernel("GatherND", 12, 13, dtypes=MOVABLE)
@kernel("GatherND", 11, dtypes=MOVABLE)
def gather_nd(xp, data, indices, *, batch_dims=0):
    b, k = batch_dims, indices.shape[-1]
    if tuple(indices.shape[:b]) != tuple(data.shape[:b]) or not 1 <= k <= data.ndim - b:
        raise ValueError(f"indices of shape {indices.shape} cannot index data of shape "
                         f"{data.shape} with batch_dims={b}")
    batches = _product(data.shape[:b])
    flat = data.reshape((batches,) + tuple(data.shape[b:]))
    index = indices.reshape(batches, _product(indices.shape[b:-1]), k)
    rows = xp.arange(batches).reshape(batches, 1)
    out = flat[(rows,) + tuple(index[..., j] for j in range(k))]  # negative indices wrap once
    return out.reshape(tuple(indices.shape[:-1]) + tuple(data.shape[b + k:]))


def _slice(data, starts, ends, axes, steps):
    starts, ends = _ints(starts), _ints(ends)
    axes = list(range(len(starts))) if axes is None else _ints(axes)
    steps = [1] * len(starts) if steps is None else _ints(steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError("starts, ends, axes and steps must have one length")
    index = [slice(None)] * data.ndim
    seen = set()
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        axis = _axis(axis, data.ndim)
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


@kernel("Slice", 10, 11, 13, dtypes=MOVABLE, host_inputs=(1, 2, 3, 4))
def slice_(xp, data, starts, ends, axes=None, steps=None):
    return _slice(data, starts, ends, axes, steps)


@kernel("Slice", 1, dtypes=MOVABLE)
def slice_attributes(xp, data, *, starts, ends, axes=None):
    return _slice(data, starts, ends, axes, None)


# ---------------------------------------------------------------------------------------------
# Split and Concat
# ---------------------------------------------------------------------------------------------


def _split(xp, data, axis, sizes, n_outputs):
    axis = _axis(axis, data.ndim)
    dim = data.shape[axis]
    if sizes is None:
        if dim % n_outputs:
            raise ValueError(f"dim {dim} does not split into {n_outputs} equal parts")
        sizes = [dim // n_outputs] * n_outputs
    sizes = _ints(sizes)
    if len(sizes) != n_outputs or sum(sizes) != dim or min(sizes, default=0) < 0:
        raise ValueError(f"split {sizes} does not cut dim {dim} into {n_outputs} parts")
    offsets, at = [], 0
    for s in sizes[:-1]:
        at += s
        offsets.append(at)
    return tuple(xp.split(data, offsets, axis=axis))


def _outputs(node):
    return {"n_outputs": len(node.outputs)}


def check_split_18(node):
    n = node.attributes.get("num_outputs")
    given = len(node.inputs) > 1 and node.inputs[1] is not None
    require((n is None) == given, "Split: version 18 takes the 'split' input or 'num_outputs', "
            "exactly one of them; got {}", "both" if given else "neither", code="attribute")
    require(n is None or n == len(node.outputs),
            "Split: num_outputs is {} but the node has {} outputs", n, len(node.outputs),
            code="attribute")


@kernel("Split", 18, dtypes=MOVABLE, host_inputs=(1,), bind=_outputs, check=check_split_18)
def split(xp, data, sizes=None, *, axis, num_outputs=None, n_outputs=None):
    if num_outputs is not None:  # parts of ceil(dim / n), the last one smaller
        dim = data.shape[_axis(axis, data.ndim)]
        chunk = -(-dim // num_outputs)
        sizes = [chunk] * (num_outputs - 1) + [dim - chunk * (num_outputs - 1)]
    return _split(xp, data, axis, sizes, n_outputs)


@kernel("Split", 13, dtypes=MOVABLE, host_inputs=(1,), bind=_outputs)
def split_13(xp, data, sizes=None, *, axis, n_outputs=None):
    return _split(xp, data, axis, sizes, n_outputs)


@kernel("Split", 2, 11, dtypes=MOVABLE, bind=_outputs)
def split_attribute(xp, data, *, axis, split=None, n_outputs=None):
    return _split(xp, data, axis, split, n_outputs)


@kernel("Concat", 4, 11, 13, dtypes=MOVABLE)
def concat(xp, *inputs, axis):
    return xp.concatenate(inputs, axis=_axis(axis, inputs[0].ndim))


@kernel("Concat", 1, dtypes=FLOATS)
def concat_1(xp, *inputs, axis=1):
    return xp.concatenate(inputs, axis=axis)


# ---------------------------------------------------------------------------------------------
# Expand
# ---------------------------------------------------------------------------------------------


def _broadcast_shape(a, b):
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(y if x == 1 else x)
    return tuple(out)


@kernel("Expand", 8, 13, dtypes=MOVABLE, host_inputs=(1,))
def expand(xp, data, shape):
    return xp.broadcast_to(data, _broadcast_shape(data.shape, _ints(shape))).copy()


# ---------------------------------------------------------------------------------------------
# Cast
# ---------------------------------------------------------------------------------------------


def _cast_target(to):
    """The element type ``to`` names: a TensorProto code, or (version 1) a name like "FLOAT"."""
    try:
        return dtype(to.lower() if isinstance(to, str) else to)
    except (ValueError, TypeError):
        return None


def check_cast(node):
    target = _cast_target(node.attributes.get("to"))
    require(target is not None and target.name in ALL,
            "Cast: CPU EP casts to {}; got to={!r} ({}): string, bfloat16, float8 and 4-bit "
            "targets are not computed", "/".join(sorted(ALL)), node.attributes.get("to"),
            "unknown" if target is None else target.name, code="dtype")


def _cast_bind(node):
    return {"numpy_dtype": _cast_target(node.attributes["to"]).numpy}


@kernel("Cast", 1, 6, 9, 13, 19, 21, 23, 24, 25, 28, dtypes=ALL, check=check_cast,
        bind=_cast_bind)
def cast(xp, x, *, to, numpy_dtype=None):
    """Floats truncate toward zero into integers (out of range: undefined, as the spec says);
    integers wrap; NaN and every non-zero value become True. ``saturate`` and ``round_mode``
    concern only float8 targets, which this kernel declines."""
    return x.astype(numpy_dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# Constants: ConstantOfShape, Range, Constant
# ---------------------------------------------------------------------------------------------


def check_constant_of_shape(node):
    value = node.attributes.get("value")
    if value is not None:
        require(_element_type(value) in ALL, "ConstantOfShape: CPU EP makes {} values, got {}",
                "/".join(sorted(ALL)), _element_type(value), code="dtype")
        require(value.size == 1, "ConstantOfShape: 'value' must hold one element, got {}",
                value.size, code="attribute")


@kernel("ConstantOfShape", 9, 20, 21, 23, 24, 25, dtypes={"int64"}, host_inputs=(0,),
        check=check_constant_of_shape)
def constant_of_shape(xp, shape, *, value=None):
    dims = tuple(_ints(shape))
    if value is None:
        return xp.zeros(dims, dtype=xp.float32)
    return xp.full(dims, value.reshape(-1)[0], dtype=value.dtype)


def check_range(node):
    x = node.inputs[0]
    if x is not None and x.dtype is not None and x.dtype.name == "float16":
        stash = node.attributes.get("stash_type")
        require(stash == 1, "Range: CPU EP computes float16 ranges in float32 (stash_type=1), "
                "got stash_type={}", stash, code="attribute")


@kernel("Range", 27, dtypes=RANGE_11 | {"float16"}, host_inputs=(0, 1, 2), check=check_range)
@kernel("Range", 11, dtypes=RANGE_11, host_inputs=(0, 1, 2))
def range_(xp, start, limit, delta, *, stash_type=1):
    """``start + i * delta`` computed in the inputs' type (float16: in float32), as the spec's
    pseudocode says; onnxruntime accumulates ``delta`` instead, which drifts for floats."""
    out_type = start.dtype
    if out_type.kind in "iu":
        s, d = int(start), int(delta)
        n = max(-((s - int(limit)) // d), 0)  # ceil((limit - start) / delta), exactly
        return (xp.arange(n, dtype=xp.int64) * d + s).astype(out_type)
    work = xp.float32 if out_type == xp.float16 else out_type
    s, lim, d = (float(v.astype(work)) for v in (start, limit, delta))
    n = max(math.ceil((lim - s) / d), 0)
    return (xp.arange(n, dtype=work) * d + s).astype(out_type, copy=False)


CONSTANT_TYPES = MOVABLE


def _constant_value(node):
    """The array a Constant node produces, built once from its attributes."""
    attrs = node.attributes
    if "sparse_value" in attrs:
        deny("Constant: CPU EP does not densify sparse_value; store the value as a dense "
             "'value' tensor", code="attribute")
    if "value" in attrs:
        value = attrs["value"]
        require(_element_type(value) in CONSTANT_TYPES, "Constant: CPU EP makes {} tensors, got {}",
                "/".join(sorted(CONSTANT_TYPES)), _element_type(value), code="dtype")
        return value
    for name, element in (("value_float", np.float32), ("value_floats", np.float32),
                          ("value_int", np.int64), ("value_ints", np.int64),
                          ("value_string", object), ("value_strings", object)):
        if name in attrs:
            return np.array(attrs[name], dtype=element)
    deny("Constant: the node sets none of value, sparse_value, value_*", code="attribute")


def check_constant(node):
    _constant_value(node)


@kernel("Constant", 1, 9, 11, 12, 13, 19, 21, 23, 24, 25, dtypes=None, check=check_constant,
        bind=lambda node: {"array": _constant_value(node)}, flops=no_work, bytes=no_work)
def constant(xp, *, array=None):
    return xp.asarray(array)
