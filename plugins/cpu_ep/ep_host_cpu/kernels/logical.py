"""Comparisons, boolean logic and Where; comparisons and logic produce bool tensors.

Version 1 of the binary ops broadcasts only B onto A (``broadcast``/``axis``), as the
arithmetic ops of that era do.
"""

from __future__ import annotations

from ep_host import require
from ep_host_cpu.kernels.elementwise import legacy_rhs
from ep_host_cpu.registry import ALL, ALL_WITH_STRING, FLOATS, NUMERIC, kernel

BOOL = frozenset({"bool"})
EQUAL_1 = frozenset({"bool", "int32", "int64"})  # Equal 1 and 7

# ---------------------------------------------------------------------------------------------
# Comparisons
# ---------------------------------------------------------------------------------------------


@kernel("Equal", 19, dtypes=ALL_WITH_STRING)
@kernel("Equal", 11, 13, dtypes=ALL)
@kernel("Equal", 7, dtypes=EQUAL_1)
def equal(xp, a, b):
    return xp.equal(a, b)


@kernel("Less", 9, 13, dtypes=NUMERIC)
@kernel("Less", 7, dtypes=FLOATS)
def less(xp, a, b):
    return xp.less(a, b)


@kernel("LessOrEqual", 12, 16, dtypes=NUMERIC)
def less_or_equal(xp, a, b):
    return xp.less_equal(a, b)


@kernel("Greater", 9, 13, dtypes=NUMERIC)
@kernel("Greater", 7, dtypes=FLOATS)
def greater(xp, a, b):
    return xp.greater(a, b)


@kernel("GreaterOrEqual", 12, 16, dtypes=NUMERIC)
def greater_or_equal(xp, a, b):
    return xp.greater_equal(a, b)


@kernel("Equal", 1, dtypes=EQUAL_1)
def equal_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.equal(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Less", 1, dtypes=FLOATS)
def less_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.less(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Greater", 1, dtypes=FLOATS)
def greater_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.greater(a, legacy_rhs(a, b, broadcast, axis))


# ---------------------------------------------------------------------------------------------
# Boolean logic
# ---------------------------------------------------------------------------------------------


@kernel("And", 7, dtypes=BOOL)
def and_(xp, a, b):
    return xp.logical_and(a, b)


@kernel("Or", 7, dtypes=BOOL)
def or_(xp, a, b):
    return xp.logical_or(a, b)


@kernel("Xor", 7, dtypes=BOOL)
def xor(xp, a, b):
    return xp.logical_xor(a, b)


@kernel("And", 1, dtypes=BOOL)
def and_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.logical_and(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Or", 1, dtypes=BOOL)
def or_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.logical_or(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Xor", 1, dtypes=BOOL)
def xor_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.logical_xor(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Not", 1, dtypes=BOOL)
def not_(xp, x):
    return xp.logical_not(x)


# ---------------------------------------------------------------------------------------------
# Where
# ---------------------------------------------------------------------------------------------

VALUES = ALL_WITH_STRING | {"complex64", "complex128"}


def check_where(node):
    for value in node.inputs[1:]:
        if value is not None and value.dtype is not None:
            require(value.dtype.name in VALUES, "Where: CPU EP takes {} values, got {} for {!r}",
                    "/".join(sorted(VALUES)), value.dtype.name, value.name, code="dtype")


@kernel("Where", 9, 16, dtypes=BOOL, check=check_where)
def where(xp, condition, x, y):
    return xp.where(condition, x, y)
