"""Comparisons, boolean and bitwise logic, IsInf/IsNaN and Where; comparisons, logic and the
Is* tests produce bool tensors.

Version 1 of the binary ops broadcasts only B onto A (``broadcast``/``axis``), as the
arithmetic ops of that era do.
"""

from __future__ import annotations

from ep_host import require
from ep_host.kernels.helpers import legacy_rhs, upcast
from ep_host.kernels.registry import (
    ALL,
    ALL_WITH_STRING,
    BF16,
    FLOATS,
    INTS,
    NUMERIC,
    UNSIGNED,
    kernel,
)

BOOL = frozenset({"bool"})
EQUAL_1 = frozenset({"bool", "int32", "int64"})  # Equal 1 and 7
FLOAT8 = frozenset({"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"})

# ---------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------


@kernel("Equal", 19, dtypes=ALL_WITH_STRING | BF16, direct="equal", family="elementwise")
@kernel("Equal", 13, dtypes=ALL | BF16, direct="equal", family="elementwise")
@kernel("Equal", 11, dtypes=ALL, direct="equal", family="elementwise")
@kernel("Equal", 7, dtypes=EQUAL_1, direct="equal", family="elementwise")
def equal(xp, a, b):
    return xp.equal(a, b)


@kernel("Less", 13, dtypes=NUMERIC | BF16, direct="less", family="elementwise")
@kernel("Less", 9, dtypes=NUMERIC, direct="less", family="elementwise")
@kernel("Less", 7, dtypes=FLOATS, direct="less", family="elementwise")
def less(xp, a, b):
    return xp.less(a, b)


@kernel("LessOrEqual", 16, dtypes=NUMERIC | BF16, direct="less_equal", family="elementwise")
@kernel("LessOrEqual", 12, dtypes=NUMERIC, direct="less_equal", family="elementwise")
def less_or_equal(xp, a, b):
    return xp.less_equal(a, b)


@kernel("Greater", 13, dtypes=NUMERIC | BF16, direct="greater", family="elementwise")
@kernel("Greater", 9, dtypes=NUMERIC, direct="greater", family="elementwise")
@kernel("Greater", 7, dtypes=FLOATS, direct="greater", family="elementwise")
def greater(xp, a, b):
    return xp.greater(a, b)


@kernel("GreaterOrEqual", 16, dtypes=NUMERIC | BF16, direct="greater_equal", family="elementwise")
@kernel("GreaterOrEqual", 12, dtypes=NUMERIC, direct="greater_equal", family="elementwise")
def greater_or_equal(xp, a, b):
    return xp.greater_equal(a, b)


@kernel("Equal", 1, dtypes=EQUAL_1, family="elementwise")
def equal_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.equal(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Less", 1, dtypes=FLOATS, family="elementwise")
def less_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.less(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Greater", 1, dtypes=FLOATS, family="elementwise")
def greater_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.greater(a, legacy_rhs(a, b, broadcast, axis))


# ---------------------------------------------------------------------------------------------
# Boolean logic
# ---------------------------------------------------------------------------------------------


@kernel("And", 7, dtypes=BOOL, direct="logical_and", family="elementwise")
def and_(xp, a, b):
    return xp.logical_and(a, b)


@kernel("Or", 7, dtypes=BOOL, direct="logical_or", family="elementwise")
def or_(xp, a, b):
    return xp.logical_or(a, b)


@kernel("Xor", 7, dtypes=BOOL, direct="logical_xor", family="elementwise")
def xor(xp, a, b):
    return xp.logical_xor(a, b)


@kernel("And", 1, dtypes=BOOL, family="elementwise")
def and_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.logical_and(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Or", 1, dtypes=BOOL, family="elementwise")
def or_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.logical_or(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Xor", 1, dtypes=BOOL, family="elementwise")
def xor_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.logical_xor(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Not", 1, dtypes=BOOL, direct="logical_not", family="elementwise")
def not_(xp, x):
    return xp.logical_not(x)


# ---------------------------------------------------------------------------------------------
# Bitwise logic and shifts
# ---------------------------------------------------------------------------------------------


@kernel("BitwiseAnd", 18, dtypes=INTS, direct="bitwise_and")
def bitwise_and(xp, a, b):
    return xp.bitwise_and(a, b)


@kernel("BitwiseOr", 18, dtypes=INTS, direct="bitwise_or")
def bitwise_or(xp, a, b):
    return xp.bitwise_or(a, b)


@kernel("BitwiseXor", 18, dtypes=INTS)
def bitwise_xor(xp, a, b):
    return xp.bitwise_xor(a, b)


@kernel("BitwiseNot", 18, dtypes=INTS)
def bitwise_not(xp, x):
    return xp.invert(x)


def check_bit_shift(node, provider):
    direction = node.attributes["direction"]
    require(direction in ("LEFT", "RIGHT"), "BitShift: direction must be 'LEFT' or 'RIGHT', got "
            "{!r}", direction, code="attribute")


@kernel("BitShift", 28, dtypes=INTS, check=check_bit_shift, family="elementwise")
@kernel("BitShift", 11, dtypes=UNSIGNED, check=check_bit_shift, family="elementwise")
def bit_shift(xp, x, y, *, direction):
    """Right shifts of signed values are arithmetic. A shift by a negative amount or by the
    type's width or more leaves only the sign fill: -1 for a right shift of a negative X, else 0
    (version 11 leaves it unspecified; its unsigned types give 0 either way)."""
    bits = x.dtype.itemsize * 8
    valid = (y >= 0) & (y < bits)
    amount = xp.where(valid, y, 0).astype(x.dtype)
    if direction == "LEFT":
        shifted = xp.left_shift(x, amount)
        fill = xp.zeros((), dtype=x.dtype)
    else:
        shifted = xp.right_shift(x, amount)
        fill = xp.where(x < 0, -1, 0).astype(x.dtype) if x.dtype.kind == "i" else 0
    return xp.where(valid, shifted, fill).astype(x.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# IsInf and IsNaN (float8 E4M3 types have no infinity)
# ---------------------------------------------------------------------------------------------


@kernel("IsInf", 20, dtypes=FLOATS | BF16 | FLOAT8, family="elementwise")
@kernel("IsInf", 10, dtypes={"float32", "float64"}, family="elementwise")
def is_inf(xp, x, *, detect_negative, detect_positive):
    y = upcast(xp, x)
    out = xp.zeros(y.shape, dtype=bool)
    if detect_positive:
        out |= y == xp.inf
    if detect_negative:
        out |= y == -xp.inf
    return out


@kernel("IsNaN", 20, dtypes=FLOATS | BF16 | FLOAT8, family="elementwise")
@kernel("IsNaN", 13, dtypes=FLOATS | BF16, family="elementwise")
@kernel("IsNaN", 9, dtypes=FLOATS, family="elementwise")
def is_nan(xp, x):
    return xp.isnan(upcast(xp, x))


# ---------------------------------------------------------------------------------------------
# Where
# ---------------------------------------------------------------------------------------------

VALUES = ALL_WITH_STRING | {"complex64", "complex128"}  # Where 9; Where 16 adds bfloat16


def check_where(node, provider):
    allowed = VALUES | BF16 if node.since_version >= 16 else VALUES
    for value in node.inputs[1:]:
        if value is not None and value.dtype is not None:
            require(value.dtype.name in allowed, "Where: {} takes {} values, got {} for {!r}",
                    provider,
                    "/".join(sorted(allowed)), value.dtype.name, value.name, code="dtype")


@kernel("Where", 9, 16, dtypes=BOOL, check=check_where, family="elementwise")
def where(xp, condition, x, y):
    return xp.where(condition, x, y)
