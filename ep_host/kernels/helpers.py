"""Array and shape helpers that several kernel families share: axes, int lists, index grids
along an axis, zero fills, padding, broadcast shapes, the float32 upcast of narrow floats, and
object arrays of strings.
Each takes the array namespace ``xp`` where it makes arrays; none names an op."""

from __future__ import annotations

from typing import Any

import numpy as np

# ml_dtypes floats: numpy gives them kind "V", so ``dtype.kind == "f"`` misses them
ML_FLOATS = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
                       "float8_e5m2fnuz", "float8_e8m0fnu", "float4_e2m1fn"})


# -- element types ----------------------------------------------------------------------------


def is_float(dtype):
    """Whether ``dtype`` is a floating type, ml_dtypes' (bfloat16, float8...) included."""
    return dtype.kind == "f" or dtype.name in ML_FLOATS


def upcast(xp, x):
    """Floats narrower than float32 as float32 (exactly), so that a formula rounds once."""
    if x.dtype.itemsize < 4 and is_float(x.dtype):
        return x.astype(xp.float32)
    return x


def zero_of(xp, dtype):
    """The fill for "zero" of an element type: 0, False, or the empty string."""
    if dtype.kind == "O":
        return xp.asarray("", dtype=object)
    return xp.zeros((), dtype=dtype)


# -- axes and int lists -----------------------------------------------------------------------


def int_list(values):
    """Python ints from a host array (any shape, flattened) or a sequence."""
    return [int(v) for v in (values.reshape(-1).tolist() if hasattr(values, "reshape") else values)]


def normalize_axis(axis, rank, what="axis"):
    """``axis`` in ``[-rank, rank)`` as a non-negative axis; ``ValueError`` outside."""
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def two_columns(xp, first, second):
    """Two 1-D arrays as the columns of one [rows, 2] (``stack`` costs 7 us on a few rows, two
    assignments 1)."""
    out = xp.empty((first.shape[0], 2), dtype=xp.result_type(first, second))
    out[:, 0] = first
    out[:, 1] = second
    return out


def along_axis(xp, index, axis):
    """The index tuple that pairs each entry of ``index`` (a position along ``axis``) with its
    own position along every other axis: ``x[along_axis(xp, index, axis)]`` is
    ``take_along_axis`` without its checks (6 us of a small TopK). A numpy index's other axes
    take grids made once per shape and kept, read-only (4 us of a 7 x 1 GatherElements, looked
    up 0.5); a device array's are made each call by ``xp``, on the device it is on."""
    if index.__class__ is not np.ndarray:
        grids = _grids(xp, index.shape, axis)
    else:
        key = (index.shape, axis)
        grids = _GRIDS.get(key)
        if grids is None:
            grids = _grids(np, index.shape, axis)
            for grid in grids:
                if grid is not None:
                    grid.flags.writeable = False  # shared by every call of this shape
            if len(_GRIDS) >= GRIDS_KEPT:
                _GRIDS.pop(next(iter(_GRIDS)))
            _GRIDS[key] = grids
    return tuple(index if grid is None else grid for grid in grids)


def _grids(xp, shape, axis):
    """Each axis's positions shaped to broadcast along it (``None`` at ``axis``)."""
    rank = len(shape)
    return tuple(None if d == axis else xp.arange(n).reshape((1,) * d + (n,) + (1,) * (
        rank - d - 1)) for d, n in enumerate(shape))


GRIDS_KEPT = 256  # index shapes whose grids along_axis keeps
_GRIDS: dict[tuple[tuple[int, ...], int], tuple[Any, ...]] = {}

FEW_INDICES = 64  # index arrays up to this size have their bounds found in Python


def index_bounds(xp, index):
    """The smallest and largest entry of a non-empty integer ``index``: of a few, from a list
    (numpy's min and max cost a reduction's set-up each, 2-3 us of a small gather or a
    scikit-learn classifier's label lookup), else by ``xp``."""
    if index.size <= FEW_INDICES:
        values = index.ravel().tolist()
        return min(values), max(values)
    return int(xp.min(index)), int(xp.max(index))


# -- broadcasting -----------------------------------------------------------------------------


def broadcast_shape(a, b):
    """The shape numpy broadcasting gives ``a`` and ``b`` (``None`` if they do not broadcast);
    CuPy's namespace may lack ``broadcast_shapes``."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + tuple(a), (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            return None
        out.append(y if x == 1 else x)
    return tuple(out)


def legacy_rhs(a, b, broadcast, axis):
    """``b`` shaped to broadcast onto ``a`` as opset 1..6 binary ops define it.

    Without ``broadcast`` the shapes must be equal; with it, ``b`` has one element or its shape
    is a contiguous run of ``a``'s, starting at ``axis`` (by default, a suffix).
    """
    if not broadcast:
        if a.shape != b.shape:
            raise ValueError(f"shapes {a.shape} and {b.shape} differ and broadcast is 0")
        return b
    if b.size == 1:
        return b.reshape(())
    start = a.ndim - b.ndim if axis is None else axis
    if start < 0 or tuple(a.shape[start:start + b.ndim]) != tuple(b.shape):
        raise ValueError(f"shape {b.shape} is not a run of {a.shape} at axis {start}")
    return b.reshape(tuple(b.shape) + (1,) * (a.ndim - start - b.ndim))


# -- padding ----------------------------------------------------------------------------------


def _pad_source(xp, dim, before, after, mode):
    """For each output position along one axis, the input position it copies, and in constant
    mode whether that position lies inside the input."""
    j = xp.arange(-before, dim + after)
    if mode == "constant":
        return xp.clip(j, 0, dim - 1), (j >= 0) & (j < dim)
    if dim == 0:
        raise ValueError(f"{mode} padding cannot extend an empty axis")
    if mode == "edge":
        return xp.clip(j, 0, dim - 1), None
    if mode == "wrap":
        return j % dim, None
    period = max(2 * (dim - 1), 1)  # reflect: mirrored on the first and last values
    r = j % period
    return xp.where(r < dim, r, period - r), None


def pad_axes(xp, data, pads, value, mode, axes=None):
    """``data`` padded as the Pad op defines it: ``pads`` gives every begin, then every end, for
    ``axes`` (default: all); negative pads crop; ``mode`` is constant (``value``, or zero),
    edge, reflect or wrap. Always a new array."""
    rank = data.ndim
    axes = list(range(rank)) if axes is None else [normalize_axis(a, rank)
                                                   for a in int_list(axes)]
    pads = int_list(pads)
    if len(pads) != 2 * len(axes) or len(set(axes)) != len(axes):
        raise ValueError(f"pads {pads} do not give a begin and an end for each of axes {axes}")
    edges = {a: (pads[i], pads[i + len(axes)]) for i, a in enumerate(axes)}
    crop = [slice(None)] * rank  # negative pads crop first; the rest pads what is left
    for a, (before, after) in edges.items():
        keep = data.shape[a] - max(-before, 0) - max(-after, 0)
        if keep < 0:
            raise ValueError(f"pads {pads} crop more than the input shape {data.shape} holds")
        crop[a] = slice(max(-before, 0), max(-before, 0) + keep)
        edges[a] = (max(before, 0), max(after, 0))
    data = data[tuple(crop)]
    shape = tuple(d + sum(edges.get(a, (0, 0))) for a, d in enumerate(data.shape))
    fill = zero_of(xp, data.dtype) if value is None else xp.asarray(value, dtype=data.dtype)
    fill = fill.reshape(())
    if mode == "constant" and data.size == 0:
        return xp.full(shape, fill, dtype=data.dtype)
    out, inside = data, None
    for axis, (before, after) in edges.items():
        if before == 0 and after == 0:
            continue
        index, valid = _pad_source(xp, data.shape[axis], before, after, mode)
        out = xp.take(out, index, axis=axis)
        if valid is not None:
            valid = valid.reshape((1,) * axis + (-1,) + (1,) * (rank - axis - 1))
            inside = valid if inside is None else inside & valid
    if inside is not None:
        out = xp.where(inside, out, fill)
    return out if out is not data else data.copy()


# -- strings ----------------------------------------------------------------------------------


def as_text(s) -> str:
    """A string element as ``str``; ``bytes`` elements are read as UTF-8."""
    return s.decode("utf-8") if isinstance(s, bytes) else str(s)


def object_array(xp, values, shape):
    """An object array of ``shape`` holding ``values`` (strings, mostly) in order."""
    out = xp.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out.reshape(shape)
