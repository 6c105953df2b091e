"""Elementwise ops: arithmetic, activations, math functions and the variadic Sum/Max/Min/Mean.

Type sets follow each version's schema (less bfloat16, which numpy lacks). Versions 1 and 6 of
the binary ops broadcast only B onto A (``broadcast``/``axis``); ``consumed_inputs`` is a
legacy memory hint with no effect on results.
"""

from __future__ import annotations

import math

from ep_host import require
from ep_host_cpu.registry import FLOATS, NUMERIC, SIGNED, kernel

WIDE_INTS = frozenset({"int32", "int64", "uint32", "uint64"})
ARITH = FLOATS | WIDE_INTS  # Add/Sub/Mul/Div 6..13
SIGNED_NUMBERS = FLOATS | SIGNED  # Neg 6+, Relu 14
POW_BASE = FLOATS | {"int32", "int64"}


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


def _same_shapes(xs):
    if any(x.shape != xs[0].shape for x in xs):
        raise ValueError(f"inputs must share one shape, got {[x.shape for x in xs]}")


def _upcast(xp, x):
    """float16 computes in float32 so that a formula rounds once, as a float16 kernel should."""
    return x.astype(xp.float32) if x.dtype == xp.float16 else x


# ---------------------------------------------------------------------------------------------
# Binary arithmetic
# ---------------------------------------------------------------------------------------------


@kernel("Add", 14, dtypes=NUMERIC)
@kernel("Add", 7, 13, dtypes=ARITH)
def add(xp, a, b):
    return xp.add(a, b)


@kernel("Sub", 14, dtypes=NUMERIC)
@kernel("Sub", 7, 13, dtypes=ARITH)
def sub(xp, a, b):
    return xp.subtract(a, b)


@kernel("Mul", 14, dtypes=NUMERIC)
@kernel("Mul", 7, 13, dtypes=ARITH)
def mul(xp, a, b):
    return xp.multiply(a, b)


@kernel("Div", 14, dtypes=NUMERIC)
@kernel("Div", 7, 13, dtypes=ARITH)
def div(xp, a, b):
    if a.dtype.kind == "f":
        return xp.true_divide(a, b)
    q = xp.floor_divide(a, b)
    if a.dtype.kind == "u":
        return q
    # truncate toward zero: floor is one lower where the remainder is non-zero and signs differ
    return q + ((xp.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


@kernel("Add", 6, dtypes=ARITH)
@kernel("Add", 1, dtypes=FLOATS)
def add_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.add(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Sub", 6, dtypes=ARITH)
@kernel("Sub", 1, dtypes=FLOATS)
def sub_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.subtract(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Mul", 6, dtypes=ARITH)
@kernel("Mul", 1, dtypes=FLOATS)
def mul_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.multiply(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Div", 6, dtypes=ARITH)
@kernel("Div", 1, dtypes=FLOATS)
def div_legacy(xp, a, b, *, broadcast, axis=None):
    return div(xp, a, legacy_rhs(a, b, broadcast, axis))


# ---------------------------------------------------------------------------------------------
# Pow
# ---------------------------------------------------------------------------------------------


def check_pow(node):
    y = node.inputs[1]
    if y is not None and y.dtype is not None:
        require(y.dtype.name in NUMERIC, "Pow: CPU EP takes a {} exponent, got {}",
                "/".join(sorted(NUMERIC)), y.dtype.name, code="dtype")


def _int_power(xp, x, y):
    x64, y64 = x.astype(xp.int64), y.astype(xp.int64)
    negative = y64 < 0
    p = xp.power(x64, xp.where(negative, 0, y64))
    # x ** -k truncates to 0 unless |x| == 1; the sign of (-1) ** -k is that of (-1) ** k
    unit = xp.where((x64 == -1) & (y64 % 2 != 0), -1, 1)
    p = xp.where(negative, xp.where(xp.abs(x64) == 1, unit, 0), p)
    return p.astype(x.dtype)


@kernel("Pow", 12, 13, 15, dtypes=POW_BASE, check=check_pow)
def pow_(xp, x, y):
    """The result has the base's type: integer results truncate toward zero (2 ** -1 == 0,
    int 9 ** float 0.5 == 3); mixed types compute in float64, as C++ ``std::pow`` promotes."""
    if y.dtype == x.dtype and x.dtype.kind == "f":
        return xp.power(x, y)
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        return _int_power(xp, x, y)
    return xp.power(x.astype(xp.float64), y.astype(xp.float64)).astype(x.dtype)


@kernel("Pow", 7, dtypes=FLOATS)
def pow_same_type(xp, x, y):
    return xp.power(x, y)


@kernel("Pow", 1, dtypes=FLOATS)
def pow_legacy(xp, x, y, *, broadcast, axis=None):
    return xp.power(x, legacy_rhs(x, y, broadcast, axis))


# ---------------------------------------------------------------------------------------------
# Unary math
# ---------------------------------------------------------------------------------------------


@kernel("Sqrt", 1, 6, 13, dtypes=FLOATS)
def sqrt(xp, x):
    return xp.sqrt(x)


@kernel("Exp", 1, 6, 13, dtypes=FLOATS)
def exp(xp, x):
    return xp.exp(x)


@kernel("Log", 1, 6, 13, dtypes=FLOATS)
def log(xp, x):
    return xp.log(x)


@kernel("Tanh", 1, 6, 13, dtypes=FLOATS)
def tanh(xp, x):
    return xp.tanh(x)


@kernel("Erf", 9, 13, dtypes=FLOATS)
def erf(xp, x):
    return xp.erf(_upcast(xp, x)).astype(x.dtype, copy=False)


@kernel("Neg", 6, 13, dtypes=SIGNED_NUMBERS)
@kernel("Neg", 1, dtypes=FLOATS)
def neg(xp, x):
    return xp.negative(x)


@kernel("Abs", 6, 13, dtypes=NUMERIC)
@kernel("Abs", 1, dtypes=FLOATS)
def abs_(xp, x):
    return xp.abs(x)


@kernel("Reciprocal", 1, 6, 13, dtypes=FLOATS)
def reciprocal(xp, x):
    return xp.reciprocal(x)


@kernel("Floor", 1, 6, 13, dtypes=FLOATS)
def floor(xp, x):
    return xp.floor(x)


@kernel("Ceil", 1, 6, 13, dtypes=FLOATS)
def ceil(xp, x):
    return xp.ceil(x)


@kernel("Identity", 1, 13, dtypes=None, flops=lambda node: 0, bytes=lambda node: 0)
@kernel("Identity", 14, 16, 19, 21, 23, 24, 25, dtypes=None, containers=True,
        flops=lambda node: 0, bytes=lambda node: 0)
def identity(xp, x):
    return x


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


@kernel("Sigmoid", 1, 6, 13, dtypes=FLOATS)
def sigmoid(xp, x):
    y = _upcast(xp, x)
    e = xp.exp(-xp.abs(y))  # never overflows
    return xp.where(y >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype, copy=False)


@kernel("Relu", 14, dtypes=SIGNED_NUMBERS)
@kernel("Relu", 1, 6, 13, dtypes=FLOATS)
def relu(xp, x):
    return xp.maximum(x, xp.zeros((), dtype=x.dtype))


@kernel("LeakyRelu", 1, 6, 16, dtypes=FLOATS)
def leaky_relu(xp, x, *, alpha):
    y = _upcast(xp, x)
    return xp.where(y < 0, y * alpha, y).astype(x.dtype, copy=False)


def _clip_bound(xp, value, dtype):
    if dtype == xp.float16 and abs(value) >= 65520.0:  # rounds to infinity in float16
        value = math.copysign(math.inf, value)
    return xp.asarray(value, dtype=dtype)


@kernel("Clip", 12, 13, dtypes=NUMERIC)
@kernel("Clip", 11, dtypes=FLOATS)
def clip(xp, x, lo=None, hi=None):
    """Min(hi, Max(x, lo)): all values become ``hi`` where ``lo > hi``; NaN stays NaN."""
    if lo is not None:
        x = xp.maximum(x, lo)
    if hi is not None:
        x = xp.minimum(x, hi)
    return x


@kernel("Clip", 1, 6, dtypes=FLOATS)
def clip_attributes(xp, x, *, min=None, max=None):  # version 6 defaults to +-FLT_MAX
    if min is not None:
        x = xp.maximum(x, _clip_bound(xp, min, x.dtype))
    if max is not None:
        x = xp.minimum(x, _clip_bound(xp, max, x.dtype))
    return x


# ---------------------------------------------------------------------------------------------
# Variadic (versions before 8 take inputs of one shape; 8+ broadcast)
# ---------------------------------------------------------------------------------------------


def _fold(fn, xs):
    out = xs[0]
    for x in xs[1:]:
        out = fn(out, x)
    return out


@kernel("Sum", 8, 13, dtypes=FLOATS)
def sum_(xp, *xs):
    if len(xs) == 1:
        return xs[0]
    return _fold(xp.add, [_upcast(xp, x) for x in xs]).astype(xs[0].dtype, copy=False)


@kernel("Max", 12, 13, dtypes=NUMERIC)
@kernel("Max", 8, dtypes=FLOATS)
def max_(xp, *xs):
    return _fold(xp.maximum, xs)


@kernel("Min", 12, 13, dtypes=NUMERIC)
@kernel("Min", 8, dtypes=FLOATS)
def min_(xp, *xs):
    return _fold(xp.minimum, xs)


@kernel("Mean", 8, 13, dtypes=FLOATS)
def mean(xp, *xs):
    total = _fold(xp.add, [_upcast(xp, x) for x in xs])
    return xp.divide(total, len(xs)).astype(xs[0].dtype, copy=False)


@kernel("Sum", 1, 6, dtypes=FLOATS)
def sum_same_shape(xp, *xs):
    _same_shapes(xs)
    return sum_(xp, *xs)


@kernel("Max", 1, 6, dtypes=FLOATS)
def max_same_shape(xp, *xs):
    _same_shapes(xs)
    return max_(xp, *xs)


@kernel("Min", 1, 6, dtypes=FLOATS)
def min_same_shape(xp, *xs):
    _same_shapes(xs)
    return min_(xp, *xs)


@kernel("Mean", 1, 6, dtypes=FLOATS)
def mean_same_shape(xp, *xs):
    _same_shapes(xs)
    return mean(xp, *xs)
