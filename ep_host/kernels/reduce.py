"""Reductions over axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp), the index reductions
ArgMax, ArgMin, Hardmax and TopK, and the scans CumSum and CumProd.

Before ReduceSum 13 and the others' version 18, ``axes`` is an attribute (absent or empty:
every axis); from then on it is an optional host input, and ``noop_with_empty_axes`` makes an
absent or empty one a no-op. float16 and bfloat16 accumulate in float32. Integer means and L2
norms truncate toward zero, as onnxruntime computes them.
"""

from __future__ import annotations

from typing import Any

from ep_host import element_count, require
from ep_host.kernels.helpers import along_axis, is_float, normalize_axis, upcast
from ep_host.kernels.registry import BF16, FLOATS, FLOATS_BF16, NUMERIC, kernel

TYPES = FLOATS | {"int32", "int64", "uint32", "uint64"}
TYPES_12 = TYPES | {"int8", "uint8"}  # ReduceMax/ReduceMin 12+
TYPES_20 = TYPES_12 | {"bool"}  # ReduceMax/ReduceMin 20+


def _axes(values, rank):
    """Sorted non-negative axes from ``values`` (``None`` or empty: every axis), worked out
    once per values and rank (a kernel asks on every run: 1.5-2 us of a small reduction, such
    as each of the 44 ReduceProds of a scikit-learn PolynomialFeatures export)."""
    key = (None if values is None else tuple(values), rank)
    found = _RESOLVED.get(key)
    if found is None:
        found = _resolved(values, rank)  # raises for bad axes, each time asked
        if len(_RESOLVED) < RESOLVED_KEPT:
            _RESOLVED[key] = found
    return found


RESOLVED_KEPT = 4096
_RESOLVED: dict[tuple[Any, int], tuple[int, ...]] = {}


def _resolved(values, rank):
    if values is None or len(values) == 0:
        return tuple(range(rank))
    out = set()
    for a in values:
        out.add(normalize_axis(int(a), rank))
    if len(out) != len(values):
        raise ValueError(f"axes {list(values)} repeat an axis")
    return tuple(sorted(out))


def _count(shape, axes):
    return element_count(shape[a] for a in axes)


def _accumulator(xp, dtype):
    return xp.float32 if dtype.itemsize < 4 and is_float(dtype) else dtype


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
        elif is_float(x.dtype):
            fill = -xp.inf if largest else xp.inf
        else:
            info = xp.iinfo(x.dtype)
            fill = info.min if largest else info.max
        return xp.full(shape, fill, dtype=x.dtype)
    fn = xp.max if largest else xp.min
    return fn(upcast(xp, x), axis=axes, keepdims=bool(keepdims)).astype(x.dtype, copy=False)


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


def _l1(xp, x, axes, keepdims):
    return _sum(xp, xp.abs(x), axes, keepdims)


def _log_sum(xp, x, axes, keepdims):
    total = xp.sum(upcast(xp, x), axis=axes, keepdims=bool(keepdims))
    return xp.log(total).astype(x.dtype, copy=False)


# The longest axis numpy's logaddexp folds: measured on 8,000 rows of normal values scaled by 1
# to 1000 against float64, its float32 error at most 1.8 ulp up to 8 values (the max-shifted sum
# 2.2), 2.8 at 16 (1.15), 4.8 at 64 (0.9): each step rounds the running result.
LOGADDEXP_MAX = 8


def _log_sum_exp(xp, x, axes, keepdims):
    """log(sum(exp(x - m))) + m with m the finite maximum, so that nothing overflows (floats
    along one axis of at most ``LOGADDEXP_MAX`` values: numpy's logaddexp folded); an empty set
    yields -inf."""
    y = upcast(xp, x)
    if _count(x.shape, axes) == 0:
        return _log_sum(xp, xp.exp(y), axes, keepdims).astype(x.dtype, copy=False)
    if (len(axes) == 1 and y.dtype.kind == "f" and x.shape[axes[0]] <= LOGADDEXP_MAX
            and getattr(xp, "__name__", None) == "numpy"):
        # numpy's logaddexp folded along the axis: one call, not eight (gaussian_nb's 7 x 3:
        # 15.9 -> 3.7 us); each step max(a, b) + log1p(exp(-|a - b|)), stable as it goes
        return xp.logaddexp.reduce(y, axis=axes[0], keepdims=bool(keepdims)).astype(
            x.dtype, copy=False)
    m = xp.max(y, axis=axes, keepdims=True)
    if y.dtype.kind != "f":  # integers: exp makes float64
        m = xp.where(xp.isfinite(m), m, xp.zeros((), dtype=m.dtype))
        out = xp.log(xp.sum(xp.exp(y - m), axis=axes, keepdims=True)) + m
    else:  # the same passes in place, m checked rather than rebuilt: 20 -> 13 us for 7 x 3
        if not bool(xp.isfinite(m).all()):
            m = xp.where(xp.isfinite(m), m, xp.zeros((), dtype=m.dtype))
        out = y - m
        xp.exp(out, out=out)
        out = xp.sum(out, axis=axes, keepdims=True)
        xp.log(out, out=out)
        out += m
    if not keepdims:
        out = xp.squeeze(out, axis=axes)
    return out.astype(x.dtype, copy=False)


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


@kernel("ReduceSum", 1, 11, dtypes=TYPES, family="reduce")
def reduce_sum_axes_attribute(xp, data, *, keepdims, axes=None):
    return _sum(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceSum", 13, dtypes=TYPES | BF16, host_inputs=(1,), family="reduce")
def reduce_sum(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _sum, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMean", 13, dtypes=TYPES | BF16, family="reduce")
@kernel("ReduceMean", 1, 11, dtypes=TYPES, family="reduce")
def reduce_mean_axes_attribute(xp, data, *, keepdims, axes=None):
    return _mean(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceMean", 18, dtypes=TYPES | BF16, host_inputs=(1,), family="reduce")
def reduce_mean(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _mean, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMax", 13, dtypes=TYPES_12 | BF16, family="reduce")
@kernel("ReduceMax", 12, dtypes=TYPES_12, family="reduce")
@kernel("ReduceMax", 1, 11, dtypes=TYPES, family="reduce")
def reduce_max_axes_attribute(xp, data, *, keepdims, axes=None):
    return _max(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceMax", 20, dtypes=TYPES_20 | BF16, host_inputs=(1,), family="reduce")
@kernel("ReduceMax", 18, dtypes=TYPES_12 | BF16, host_inputs=(1,), family="reduce")
def reduce_max(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _max, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceMin", 13, dtypes=TYPES_12 | BF16, family="reduce")
@kernel("ReduceMin", 12, dtypes=TYPES_12, family="reduce")
@kernel("ReduceMin", 1, 11, dtypes=TYPES, family="reduce")
def reduce_min_axes_attribute(xp, data, *, keepdims, axes=None):
    return _min(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceMin", 20, dtypes=TYPES_20 | BF16, host_inputs=(1,), family="reduce")
@kernel("ReduceMin", 18, dtypes=TYPES_12 | BF16, host_inputs=(1,), family="reduce")
def reduce_min(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _min, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceProd", 13, dtypes=TYPES | BF16, family="reduce")
@kernel("ReduceProd", 1, 11, dtypes=TYPES, family="reduce")
def reduce_prod_axes_attribute(xp, data, *, keepdims, axes=None):
    return _prod(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceProd", 18, dtypes=TYPES | BF16, host_inputs=(1,), family="reduce")
def reduce_prod(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _prod, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceSumSquare", 13, dtypes=TYPES | BF16, family="reduce")
@kernel("ReduceSumSquare", 1, 11, dtypes=TYPES, family="reduce")
def reduce_sum_square_axes_attribute(xp, data, *, keepdims, axes=None):
    return _sum_square(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceSumSquare", 18, dtypes=TYPES | BF16, host_inputs=(1,), family="reduce")
def reduce_sum_square(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _sum_square, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceL2", 13, dtypes=TYPES | BF16, family="reduce")
@kernel("ReduceL2", 1, 11, dtypes=TYPES, family="reduce")
def reduce_l2_axes_attribute(xp, data, *, keepdims, axes=None):
    return _l2(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceL2", 18, dtypes=TYPES | BF16, host_inputs=(1,), family="reduce")
def reduce_l2(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _l2, data, axes, keepdims, noop_with_empty_axes)


def check_log_reduce(node, provider):
    x = node.inputs[0]
    require(x.dtype is None or x.dtype.is_float, "{}-{}: {} takes bfloat16/float16/float32/"
            "float64 input, got {}: the spec leaves the rounding of an integer logarithm open; "
            "cast to float first", node.op_type, node.since_version, provider, x.dtype,
            code="dtype")


@kernel("ReduceL1", 13, dtypes=TYPES | BF16, family="reduce")
@kernel("ReduceL1", 1, 11, dtypes=TYPES, family="reduce")
def reduce_l1_axes_attribute(xp, data, *, keepdims, axes=None):
    return _l1(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceL1", 18, dtypes=TYPES | BF16, host_inputs=(1,), family="reduce")
def reduce_l1(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _l1, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceLogSum", 13, dtypes=TYPES | BF16, check=check_log_reduce, family="reduce")
@kernel("ReduceLogSum", 1, 11, dtypes=TYPES, check=check_log_reduce, family="reduce")
def reduce_log_sum_axes_attribute(xp, data, *, keepdims, axes=None):
    return _log_sum(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceLogSum", 28, dtypes=FLOATS_BF16, host_inputs=(1,), family="reduce")
@kernel("ReduceLogSum", 18, dtypes=TYPES | BF16, host_inputs=(1,), check=check_log_reduce,
        family="reduce")
def reduce_log_sum(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _log_sum, data, axes, keepdims, noop_with_empty_axes)


@kernel("ReduceLogSumExp", 13, dtypes=TYPES | BF16, check=check_log_reduce, family="reduce")
@kernel("ReduceLogSumExp", 1, 11, dtypes=TYPES, check=check_log_reduce, family="reduce")
def reduce_log_sum_exp_axes_attribute(xp, data, *, keepdims, axes=None):
    return _log_sum_exp(xp, data, _axes(axes, data.ndim), keepdims)


@kernel("ReduceLogSumExp", 28, dtypes=FLOATS_BF16, host_inputs=(1,), family="reduce")
@kernel("ReduceLogSumExp", 18, dtypes=TYPES | BF16, host_inputs=(1,), check=check_log_reduce,
        family="reduce")
def reduce_log_sum_exp(xp, data, axes=None, *, keepdims, noop_with_empty_axes):
    return _reduce(xp, _log_sum_exp, data, axes, keepdims, noop_with_empty_axes)


# ---------------------------------------------------------------------------------------------
# Index reductions: ArgMax, ArgMin, Hardmax, TopK
# ---------------------------------------------------------------------------------------------


def _arg(xp, method, x, axis, keepdims, select_last_index):
    """The first (or last) index of the extreme along ``axis``; NaN counts as the extreme.
    ``method``: the array's ``"argmax"`` or ``"argmin"``, called as a method (numpy's
    function wraps it: 1 us of a scikit-learn classifier's label step)."""
    y = upcast(xp, x)
    if select_last_index:
        y = xp.flip(y, axis=axis)
        index = y.shape[axis] - 1 - getattr(y, method)(axis=axis, keepdims=bool(keepdims))
    else:  # keepdims in the call: expand_dims took 2-3 us of a small model's run
        index = getattr(y, method)(axis=axis, keepdims=bool(keepdims))
    return index.astype(xp.int64, copy=False)


@kernel("ArgMax", 13, dtypes=NUMERIC | BF16, family="reduce")
@kernel("ArgMax", 12, dtypes=NUMERIC, family="reduce")
def arg_max(xp, data, *, axis, keepdims, select_last_index):
    return _arg(xp, "argmax", data, axis, keepdims, select_last_index)


@kernel("ArgMax", 1, 11, dtypes=NUMERIC, family="reduce")
def arg_max_first(xp, data, *, axis, keepdims):
    return _arg(xp, "argmax", data, axis, keepdims, False)


@kernel("ArgMin", 13, dtypes=NUMERIC | BF16, family="reduce")
@kernel("ArgMin", 12, dtypes=NUMERIC, family="reduce")
def arg_min(xp, data, *, axis, keepdims, select_last_index):
    return _arg(xp, "argmin", data, axis, keepdims, select_last_index)


@kernel("ArgMin", 1, 11, dtypes=NUMERIC, family="reduce")
def arg_min_first(xp, data, *, axis, keepdims):
    return _arg(xp, "argmin", data, axis, keepdims, False)


def _one_hot_max(xp, x, axis):
    """1 at the first maximum along ``axis``, 0 elsewhere."""
    if x.size == 0:
        return xp.zeros(x.shape, dtype=x.dtype)
    first = xp.argmax(upcast(xp, x), axis=axis)
    positions = xp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - 1 - axis))
    return (positions == xp.expand_dims(first, axis)).astype(x.dtype)


@kernel("Hardmax", 13, dtypes=FLOATS_BF16, family="normalization")
def hardmax(xp, x, *, axis):
    return _one_hot_max(xp, x, axis % x.ndim)


@kernel("Hardmax", 1, 11, dtypes=FLOATS, family="normalization")
def hardmax_2d(xp, x, *, axis):
    """Versions before 13 flatten the input to 2-D at ``axis`` and take the maximum over each
    row of the trailing dimensions."""
    if x.size == 0:
        return xp.zeros(x.shape, dtype=x.dtype)
    axis %= x.ndim
    rows = element_count(x.shape[:axis])
    return _one_hot_max(xp, x.reshape(rows, -1), 1).reshape(x.shape)


def _top_one_int(xp, x, k, axis, largest):
    """The ``k`` largest (smallest) values along ``axis`` in order, ties by lower index; NaN
    counts as the largest value."""
    axis %= x.ndim
    index = _top_order(xp, x, k, axis, largest)
    return x[along_axis(xp, index, axis)], index


def _top_order(xp, x, k, axis, largest):
    """The int64 indices of :func:`_top_one_int`'s values along non-negative ``axis``."""
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ValueError(f"K={k} is outside [0, {n}] for axis {axis} of shape {x.shape}")
    keys = upcast(xp, x)
    before = (slice(None),) * axis  # slices, not flip and take (a few us each on small inputs)
    if largest:  # a stable ascending sort of the reversed axis, read backwards
        backwards = (*before, slice(None, None, -1))
        order = n - 1 - xp.argsort(keys[backwards], axis=axis, kind="stable")[backwards]
    else:
        order = xp.argsort(keys, axis=axis, kind="stable")
    if k < n:
        order = order[(*before, slice(0, k))]
    return order.astype(xp.int64, copy=False)  # argsort's own int64 (intp) as it is


def _one_int(values):
    """The one value of a K or axis input, as an int (``item``: a fifth of ``tolist``'s cost)."""
    if values.size != 1:
        raise ValueError(f"expected one value (K, axis), got {values.reshape(-1).tolist()}")
    return int(values.item())


@kernel("TopK", 24, dtypes=NUMERIC | BF16, host_inputs=(1,), family="reduce")
@kernel("TopK", 11, dtypes=NUMERIC, host_inputs=(1,), family="reduce")
def top_one_int(xp, x, k, *, axis, largest, sorted):
    """``sorted=0`` leaves the order unspecified; the values come sorted all the same."""
    return _top_one_int(xp, x, _one_int(k), axis, largest)


@kernel("TopK", 10, dtypes=FLOATS, host_inputs=(1,), family="reduce")
def top_k_10(xp, x, k, *, axis):
    return _top_one_int(xp, x, _one_int(k), axis, True)


@kernel("TopK", 1, dtypes=FLOATS, family="reduce")
def top_k_1(xp, x, *, axis, k):
    return _top_one_int(xp, x, k, axis, True)


# An ep-host op: the weighted median skl2onnx's AdaBoostRegressor writes in ten nodes
# ---------------------------------------------------------------------------------------------

HOST = "ai.ep_host"  # ops of ep-host's own, which its graph optimizations write


def _check_weighted_median(node, provider):
    keys, scores, weights = node.inputs[0], node.inputs[1], node.inputs[2]
    for what, value in (("keys", keys), ("scores", scores)):
        require(value.shape is not None and len(value.shape) == 2, "WeightedMedian: takes 2-D "
                "{}, got shape {}", what, value.shape, code="shape")
    require(weights.shape is not None and len(weights.shape) == 1, "WeightedMedian: takes 1-D "
            "weights, got shape {}", weights.shape, code="shape")
    require(node.attributes.get("k", 0) >= 1, "WeightedMedian: k must be at least 1, got {}",
            node.attributes.get("k"), code="attribute")


@kernel("WeightedMedian", 1, domain=HOST, dtypes={"float32", "float64"},
        check=_check_weighted_median)
def weighted_median(xp, keys, scores, weights, half, *, k, largest=1):
    """For each row of ``keys`` and ``scores`` [N, k]: the columns in TopK's order of the keys
    (``largest``, ties by lower index, NaN the largest), their ``weights`` summed in that order
    (CumSum), and the score [N, 1] of the first column where that sum is not below the whole
    sum times ``half`` (the first column if every sum is below it). What the nodes it replaces
    compute, step for step in the same types: TopK, ArrayFeatureExtractor of the weights,
    Reshape, CumSum, ArrayFeatureExtractor of the last sum, Mul, Less, Cast, ArgMin and two
    GatherElements."""
    if keys.ndim != 2 or scores.shape != keys.shape or weights.shape != (keys.shape[1],):
        raise ValueError(f"WeightedMedian: takes keys and scores of one shape [N, k] and k "
                         f"weights, got {keys.shape}, {scores.shape} and {weights.shape}")
    order = _top_order(xp, keys, k, 1, largest)
    sums = xp.cumsum(weights[order], axis=1, dtype=weights.dtype)
    below = sums < sums[:, k - 1:] * half
    rows = xp.arange(keys.shape[0])
    return scores[rows, order[rows, below.argmin(axis=1)]].reshape(-1, 1)


# ---------------------------------------------------------------------------------------------
# Scans: CumSum, CumProd
# ---------------------------------------------------------------------------------------------

SCAN_TYPES = frozenset({"float32", "float64", "int32", "int64", "uint32", "uint64"})


def _scan(xp, fn, x, axis, exclusive, reverse, identity):
    """Running ``fn`` along ``axis``: ``exclusive`` shifts in ``identity`` and drops the last
    element, ``reverse`` runs from the end. Narrow floats run in float32; integers wrap."""
    axis = normalize_axis(_one_int(axis), x.ndim)
    y = upcast(xp, x)
    if reverse:
        y = xp.flip(y, axis=axis)
    out = fn(y, axis=axis, dtype=y.dtype)
    if exclusive and x.shape[axis]:
        head = xp.full(x.shape[:axis] + (1,) + x.shape[axis + 1:], identity, dtype=y.dtype)
        body = xp.take(out, xp.arange(x.shape[axis] - 1), axis=axis)
        out = xp.concatenate([head, body], axis=axis)
    if reverse:
        out = xp.flip(out, axis=axis)
    return out.astype(x.dtype, copy=False)


@kernel("CumSum", 14, dtypes=SCAN_TYPES | {"float16", "bfloat16"}, host_inputs=(1,),
        family="reduce")
@kernel("CumSum", 11, dtypes=SCAN_TYPES, host_inputs=(1,), family="reduce")
def cum_sum(xp, x, axis, *, exclusive, reverse):
    return _scan(xp, xp.cumsum, x, axis, exclusive, reverse, 0)


@kernel("CumProd", 26, dtypes=SCAN_TYPES | {"float16", "bfloat16"}, host_inputs=(1,))
def cum_prod(xp, x, axis, *, exclusive, reverse):
    return _scan(xp, xp.cumprod, x, axis, exclusive, reverse, 1)
