"""Elementwise ops: arithmetic, activations, math functions."""

from __future__ import annotations

from ep_host_cpu.registry import FLOATS, NUMERIC, kernel


@kernel("Add", 7, 13, 14)
def add(xp, a, b):
    return xp.add(a, b)


@kernel("Sub", 7, 13, 14)
def sub(xp, a, b):
    return xp.subtract(a, b)


@kernel("Mul", 7, 13, 14)
def mul(xp, a, b):
    return xp.multiply(a, b)


@kernel("Relu", 6, 13, 14, dtypes=FLOATS | {"int8", "int16", "int32", "int64"})
def relu(xp, x):
    return xp.maximum(x, xp.zeros((), dtype=x.dtype))


@kernel("Sum", 6, 8, 13, dtypes=FLOATS)
def sum_(xp, *xs):
    out = xs[0]
    for x in xs[1:]:
        out = xp.add(out, x)
    return out if len(xs) > 1 else xp.array(out, copy=True)


_ = NUMERIC
