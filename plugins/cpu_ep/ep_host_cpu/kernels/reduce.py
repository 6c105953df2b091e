"""Reductions over axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceSumSquare and ReduceL2.

Before ReduceSum 13 and the others' version 18, ``axes`` is an attribute (absent or empty:
every axis); from then on it is an optional host input, and ``noop_with_empty_axes`` makes an
absent or empty one a no-op. float16 accumulates in float32. Integer means and L2 norms
truncate toward zero, as onnxruntime computes them.
"""

from __future__ import annotations

from ep_host_cpu.registry import FLOATS, kernel

TYPES = FLOATS | {"int32", "int64", "uint32", "uint64"}
TYPES_12 = TYPES | {"int8", "uint8"}  # ReduceMax/ReduceMin 12+
TYPES_20 = TYPES_12 | {"bool"}  # ReduceMax/ReduceMin 20+


def _axes(values, rank):
    """Sorted non-negative axes from ``values`` (``None`` or empty: every axis)."""
    if values is None or len(values) == 0:
        return tuple(range(rank))
    out = set()
    for a in (int(v) for v in values):
        if not -rank <= a < rank:
            raise ValueError(f"axis {a} is out of range for rank {rank}")
        out.add(a % rank)
    if len(out) != len(values):
        raise ValueError(f"axes {list(values)} repeat an axis")
    return tuple(sorted(out))


def _count(shape, axes):
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def _accumulator(xp, dtype):
    return xp.float32 if dtype == xp.float16 else dtype


def _truncating_divide(xp, total, n):
    q = xp.floor_divide(total, n)
    return q + ((q * n != total) & (total < 0))


# ---------------------------------------------------------------------------------------------
# The reductions, on resolved axes
# ---------------------------------------------------------------------------------------------


def _sum(xp, x, axes, keepdims):
    return xp.sum(x, axis=axes, dtype=_accumulator(xp, x.dtype), keepdims=bool(keepdims)).astype(
        x.dtype, copy=False)


def _mean(xp, x, axes, keepdims):
    n = max(_count(x.shape, axes), 1)  # an empty set yields 0, as onnxruntime does
    if x.dtype.kind in "iu":
        wide = xp.int64 if x.dtype.kind == "i" else xp.uint64
        total = xp.sum(x, axis=axes, dtype=wide, keepdims=bool(keepdims))
        return _truncating_divide(xp, total, n).astype(x.dtype)
    total = xp.sum(x, axis=axes, dtype=_accumulator(xp, x.dtype), keepdims=bool(keepdims))
    return (total / n).astype(x.dtype, copy=False)


def _extreme(xp, x, axes, keepdims, largest):
    if _count(x.shape, axes) == 0:
        # an empty set yields -inf (the type's lowest value) for Max, +inf (highest) for Min
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape)
                      if keepdims or i not in axes)
        if x.dtype.kind == "b":
            fill = not largest
        elif x.dtype.kind == "f":
            fill = -xp.inf if largest else xp.inf
        else:
            info = xp.iinfo(x.dtype)
            fill = info.min if largest else info.max
        return xp.full(shape, fill, dtype=x.dtype)
    fn = xp.max if largest else xp.min
    return fn(x, axis=axes, keepdims=bool(keepdims))


def _max(xp, x, axes, keepdims):
    return _extreme(xp, x, axes, keepdims, True)


def _min(xp, x, axes, keepdims):
    return _extreme(xp, x, axes, keepdims, False)


def _prod(xp, x, axes, keepdims):
    return xp.prod(x, axis=axes, dtype=_accumulator(xp, x.dtype), keepdims=bool(keepdims)).astype(
        x.dtype, copy=False)


def _sum_square(xp, x, axes, keepdims):
    y = x.astype(_accumulator(xp, x.dtype), copy=False)
    return _sum(xp, y * y, axes, keepdims).astype(x.dtype, copy=False)


def _l2(xp, x, axes, keepdims):
    if x.dtype.kind in "iu":
        wide = x.astype(xp.int64 if x.dtype.kind == "i" else xp.uint64)
        total = xp.sum(wide * wide, axis=axes, keepdims=bool(keepdims))
        return xp.sqrt(total.astype(xp.float64)).astype(x.dtype)
    y = x.astype(_accumulator(xp, x.dtype), copy=False)
    return xp.sqrt(_sum(xp, y * y, axes, keepdims)).astype(x.dtype, copy=False)


def _reduce(xp, fn, data, axes, keepdims, noop_with_empty_axes):
    """``fn`` over the axes an ``axes`` input names; with none and ``noop_with_empty_axes``,
    over no axis at all (SumSquare still squares, L2 still takes the root of the square)."""
    values = None if axes is None else axes.reshape(-1).tolist()
    if not values and noop_with_empty_axes:
        return fn(xp, data, (), True)
    return fn(xp, data, _axes(values, data.ndim), keepdims)


# ---------------------------------------------------------------------------------------------
# Kernels: axes as an attribute, then as an input
# ---------------------------------------------------------------------------------------------


@kernel("ReduceSum", 1, 11, dtypes=TYPES)
def reduce_sum_axes_attribute(xp, data, *, keepdims, axes=None):
    return _sum(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceSum", 13, dtypes=TYPES, host_inputs=(1,))
def reduce_sum(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _sum, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMean", 1, 11, 13, dtypes=TYPES)
def reduce_mean_axes_attribute(xp, data, *, keepdims, axes=None):
    return _mean(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceMean", 18, dtypes=TYPES, host_inputs=(1,))
def reduce_mean(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _mean, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMax", 12, 13, dtypes=TYPES_12)
@kernel("ReduceMax", 1, 11, dtypes=TYPES)
def reduce_max_axes_attribute(xp, data, *, keepdims, axes=None):
    return _max(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceMax", 20, dtypes=TYPES_20, host_inputs=(1,))
@kernel("ReduceMax", 18, dtypes=TYPES_12, host_inputs=(1,))
def reduce_max(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _max, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMin", 12, 13, dtypes=TYPES_12)
@kernel("ReduceMin", 1, 11, dtypes=TYPES)
def reduce_min_axes_attribute(xp, data, *, keepdims, axes=None):
    return _min(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceMin", 20, dtypes=TYPES_20, host_inputs=(1,))
@kernel("ReduceMin", 18, dtypes=TYPES_12, host_inputs=(1,))
def reduce_min(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _min, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceProd", 1, 11, 13, dtypes=TYPES)
def reduce_prod_axes_attribute(xp, data, *, keepdims, axes=None):
    return _prod(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceProd", 18, dtypes=TYPES, host_inputs=(1,))
def reduce_prod(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _prod, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceSumSquare", 1, 11, 13, dtypes=TYPES)
def reduce_sum_square_axes_attribute(xp, data, *, keepdims, axes=None):
    return _sum_square(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceSumSquare", 18, dtypes=TYPES, host_inputs=(1,))
def reduce_sum_square(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _sum_square, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceL2", 1, 11, 13, dtypes=TYPES)
def reduce_l2_axes_attribute(xp, data, *, keepdims, axes=None):
    return _l2(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceL2", 18, dtypes=TYPES, host_inputs=(1,))
def reduce_l2(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _l2, data, axes, keepdims, noop_with_empty_axes)
