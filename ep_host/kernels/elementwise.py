"""Elementwise ops: arithmetic, Mod, activations, math functions, rounding and the variadic
Sum/Max/Min/Mean.

Type sets follow each version's schema. Formulas on float16 and bfloat16 compute in float32 and
round once to the input type. Versions 1 and 6 of the binary ops broadcast only B onto A
(``broadcast``/``axis``); ``consumed_inputs`` is a legacy memory hint with no effect on results.
"""

from __future__ import annotations

import math

from ep_host import require
from ep_host.kernels.helpers import broadcast_shape, is_float, legacy_rhs, upcast
from ep_host.kernels.registry import (
    BF16,
    FLOATS,
    FLOATS_BF16,
    INTS,
    NUMERIC,
    NUMERIC_BF16,
    SIGNED,
    kernel,
)

WIDE_INTS = frozenset({"int32", "int64", "uint32", "uint64"})
ARITH = FLOATS | WIDE_INTS  # Add/Sub/Mul/Div 6..13
SIGNED_NUMBERS = FLOATS | SIGNED  # Neg 6+, Relu 14
POW_BASE = FLOATS | {"int32", "int64"}
PRELU_9 = FLOATS | WIDE_INTS
def _unary(xp, fn, x):
    return fn(upcast(xp, x)).astype(x.dtype, copy=False)


def fits(out, shape, dtype):
    """Whether a donated buffer ``out`` can hold a result of ``shape`` and ``dtype``."""
    return (out is not None and shape is not None and out.dtype == dtype
            and tuple(out.shape) == tuple(shape))


def _unary_ufunc(xp, fn, x, out):
    """``fn`` (a ufunc) of ``x``; into ``out`` when it fits and no widening is needed."""
    if x.dtype.itemsize >= 4 and fits(out, x.shape, x.dtype):
        return fn(x, out=out)
    return _unary(xp, fn, x)


def _same_shapes(xs):
    if any(x.shape != xs[0].shape for x in xs):
        raise ValueError(f"inputs must share one shape, got {[x.shape for x in xs]}")


# ---------------------------------------------------------------------------------------------
# Binary arithmetic
# ---------------------------------------------------------------------------------------------


@kernel("Add", 14, dtypes=NUMERIC_BF16, direct="add", inplace=(0, 1), family="elementwise")
@kernel("Add", 13, dtypes=ARITH | BF16, direct="add", inplace=(0, 1), family="elementwise")
@kernel("Add", 7, dtypes=ARITH, direct="add", inplace=(0, 1), family="elementwise")
def add(xp, a, b):
    return xp.add(a, b)


@kernel("Sub", 14, dtypes=NUMERIC_BF16, direct="subtract", inplace=(0, 1), family="elementwise")
@kernel("Sub", 13, dtypes=ARITH | BF16, direct="subtract", inplace=(0, 1), family="elementwise")
@kernel("Sub", 7, dtypes=ARITH, direct="subtract", inplace=(0, 1), family="elementwise")
def sub(xp, a, b):
    return xp.subtract(a, b)


@kernel("Mul", 14, dtypes=NUMERIC_BF16, direct="multiply", inplace=(0, 1), family="elementwise")
@kernel("Mul", 13, dtypes=ARITH | BF16, direct="multiply", inplace=(0, 1), family="elementwise")
@kernel("Mul", 7, dtypes=ARITH, direct="multiply", inplace=(0, 1), family="elementwise")
def mul(xp, a, b):
    return xp.multiply(a, b)


@kernel("Div", 14, dtypes=NUMERIC_BF16, inplace=(0, 1), family="elementwise")
@kernel("Div", 13, dtypes=ARITH | BF16, inplace=(0, 1), family="elementwise")
@kernel("Div", 7, dtypes=ARITH, inplace=(0, 1), family="elementwise")
def div(xp, a, b, *, out=None):
    if is_float(a.dtype):
        if (out is not None and a.dtype == b.dtype
                and fits(out, broadcast_shape(a.shape, b.shape), a.dtype)):
            return xp.true_divide(a, b, out=out)
        return xp.true_divide(a, b)
    q = xp.floor_divide(a, b)
    if a.dtype.kind == "u":
        return q
    # truncate toward zero: floor is one lower where the remainder is non-zero and signs differ
    return q + ((xp.remainder(a, b) != 0) & ((a < 0) != (b < 0)))


@kernel("Add", 6, dtypes=ARITH, family="elementwise")
@kernel("Add", 1, dtypes=FLOATS, family="elementwise")
def add_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.add(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Sub", 6, dtypes=ARITH, family="elementwise")
@kernel("Sub", 1, dtypes=FLOATS, family="elementwise")
def sub_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.subtract(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Mul", 6, dtypes=ARITH, family="elementwise")
@kernel("Mul", 1, dtypes=FLOATS, family="elementwise")
def mul_legacy(xp, a, b, *, broadcast, axis=None):
    return xp.multiply(a, legacy_rhs(a, b, broadcast, axis))


@kernel("Div", 6, dtypes=ARITH, family="elementwise")
@kernel("Div", 1, dtypes=FLOATS, family="elementwise")
def div_legacy(xp, a, b, *, broadcast, axis=None):
    return div(xp, a, legacy_rhs(a, b, broadcast, axis))


# ---------------------------------------------------------------------------------------------
# Mod
# ---------------------------------------------------------------------------------------------


def check_mod(node, provider):
    x = node.inputs[0]
    if node.since_version < 28 and x.dtype is not None and x.dtype.is_float:
        require(node.attributes["fmod"] == 1, "Mod-{}: floating-point inputs need fmod=1, got "
                "fmod=0 (Mod 28 defines a floored float modulo)", node.since_version,
                code="attribute")


@kernel("Mod", 13, 28, dtypes=NUMERIC_BF16, check=check_mod, family="elementwise")
@kernel("Mod", 10, dtypes=NUMERIC, check=check_mod, family="elementwise")
def mod(xp, a, b, *, fmod):
    """fmod=1: ``a - trunc(a / b) * b`` (C fmod); fmod=0: ``a - floor(a / b) * b``, the sign of
    ``b`` (Python's ``%``). Both are exact for floats; an integer divisor of 0 yields 0."""
    fn = xp.fmod if fmod else xp.remainder
    if a.dtype.kind in "iu":
        with_zero = b == 0
        if with_zero.any():
            return xp.where(with_zero, 0, fn(a, xp.where(with_zero, 1, b))).astype(a.dtype)
        return fn(a, b)
    return fn(upcast(xp, a), upcast(xp, b)).astype(a.dtype, copy=False)


# ---------------------------------------------------------------------------------------------
# Pow
# ---------------------------------------------------------------------------------------------

POW_EXPONENT = NUMERIC  # Pow 12 and 13; Pow 15 adds bfloat16


def check_pow(node, provider):
    y = node.inputs[1]
    allowed = POW_EXPONENT | BF16 if node.since_version >= 15 else POW_EXPONENT
    if y is not None and y.dtype is not None:
        require(y.dtype.name in allowed, "Pow: {} takes a {} exponent, got {}", provider,
                "/".join(sorted(allowed)), y.dtype.name, code="dtype")


def _int_power(xp, x, y):
    x64, y64 = x.astype(xp.int64), y.astype(xp.int64)
    negative = y64 < 0
    p = xp.power(x64, xp.where(negative, 0, y64))
    # x ** -k truncates to 0 unless |x| == 1; the sign of (-1) ** -k is that of (-1) ** k
    unit = xp.where((x64 == -1) & (y64 % 2 != 0), -1, 1)
    p = xp.where(negative, xp.where(xp.abs(x64) == 1, unit, 0), p)
    return p.astype(x.dtype)


@kernel("Pow", 13, 15, dtypes=POW_BASE | BF16, check=check_pow, family="transcendental")
@kernel("Pow", 12, dtypes=POW_BASE, check=check_pow, family="transcendental")
def pow_(xp, x, y):
    """The result has the base's type: integer results truncate toward zero (2 ** -1 == 0,
    int 9 ** float 0.5 == 3); mixed types compute in float64, as C++ ``std::pow`` promotes."""
    if y.dtype == x.dtype and is_float(x.dtype):
        return _unary(xp, lambda v: xp.power(v, upcast(xp, y)), x)
    if x.dtype.kind in "iu" and y.dtype.kind in "iu":
        return _int_power(xp, x, y)
    return xp.power(x.astype(xp.float64), y.astype(xp.float64)).astype(x.dtype)


@kernel("Pow", 7, dtypes=FLOATS, family="transcendental")
def pow_same_type(xp, x, y):
    return xp.power(x, y)


@kernel("Pow", 1, dtypes=FLOATS, family="transcendental")
def pow_legacy(xp, x, y, *, broadcast, axis=None):
    return xp.power(x, legacy_rhs(x, y, broadcast, axis))


# ---------------------------------------------------------------------------------------------
# Unary math
# ---------------------------------------------------------------------------------------------


@kernel("Sqrt", 13, dtypes=FLOATS_BF16, inplace=(0,), family="transcendental")
@kernel("Sqrt", 1, 6, dtypes=FLOATS, inplace=(0,), family="transcendental")
def sqrt(xp, x, *, out=None):
    return _unary_ufunc(xp, xp.sqrt, x, out)


@kernel("Exp", 13, dtypes=FLOATS_BF16, inplace=(0,), family="transcendental")
@kernel("Exp", 1, 6, dtypes=FLOATS, inplace=(0,), family="transcendental")
def exp(xp, x, *, out=None):
    return _unary_ufunc(xp, xp.exp, x, out)


@kernel("Log", 13, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Log", 1, 6, dtypes=FLOATS, family="transcendental")
def log(xp, x):
    return _unary(xp, xp.log, x)


@kernel("Tanh", 13, dtypes=FLOATS_BF16, inplace=(0,), family="transcendental")
@kernel("Tanh", 1, 6, dtypes=FLOATS, inplace=(0,), family="transcendental")
def tanh(xp, x, *, out=None):
    return _unary_ufunc(xp, xp.tanh, x, out)


@kernel("Erf", 13, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Erf", 9, dtypes=FLOATS, family="transcendental")
def erf(xp, x):
    return _unary(xp, xp.erf, x)


@kernel("Neg", 13, dtypes=SIGNED_NUMBERS | BF16, direct="negative", inplace=(0,),
        family="elementwise")
@kernel("Neg", 6, dtypes=SIGNED_NUMBERS, direct="negative", inplace=(0,), family="elementwise")
@kernel("Neg", 1, dtypes=FLOATS, direct="negative", inplace=(0,), family="elementwise")
def neg(xp, x):
    return xp.negative(x)


@kernel("Abs", 13, dtypes=NUMERIC_BF16, direct="abs", inplace=(0,), family="elementwise")
@kernel("Abs", 6, dtypes=NUMERIC, direct="abs", inplace=(0,), family="elementwise")
@kernel("Abs", 1, dtypes=FLOATS, direct="abs", inplace=(0,), family="elementwise")
def abs_(xp, x):
    return xp.abs(x)


@kernel("Reciprocal", 13, dtypes=FLOATS_BF16, family="elementwise")
@kernel("Reciprocal", 1, 6, dtypes=FLOATS, family="elementwise")
def reciprocal(xp, x):
    return _unary(xp, xp.reciprocal, x)


@kernel("Floor", 13, dtypes=FLOATS_BF16, family="elementwise")
@kernel("Floor", 1, 6, dtypes=FLOATS, family="elementwise")
def floor(xp, x):
    return _unary(xp, xp.floor, x)


@kernel("Ceil", 13, dtypes=FLOATS_BF16, family="elementwise")
@kernel("Ceil", 1, 6, dtypes=FLOATS, family="elementwise")
def ceil(xp, x):
    return _unary(xp, xp.ceil, x)


@kernel("Round", 22, dtypes=FLOATS_BF16, family="elementwise")
@kernel("Round", 11, dtypes=FLOATS, family="elementwise")
def round_(xp, x):
    """Halves round to even; integral values, +-0, NaN and infinities pass unchanged."""
    return _unary(xp, xp.rint, x)


@kernel("Sign", 13, dtypes=NUMERIC_BF16, family="elementwise")
@kernel("Sign", 9, dtypes=NUMERIC, family="elementwise")
def sign(xp, x):
    return _unary(xp, xp.sign, x)


@kernel("Identity", 1, 13, dtypes=None, flops=lambda node: 0, bytes=lambda node: 0,
        family="data_movement")
@kernel("Identity", 14, 16, 19, 21, 23, 24, 25, dtypes=None, containers=True,
        flops=lambda node: 0, bytes=lambda node: 0, family="data_movement")
def identity(xp, x):
    return x


# Trigonometric and hyperbolic functions: version 22 adds bfloat16.


@kernel("Sin", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Sin", 7, dtypes=FLOATS, family="transcendental")
def sin(xp, x):
    return _unary(xp, xp.sin, x)


@kernel("Cos", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Cos", 7, dtypes=FLOATS, family="transcendental")
def cos(xp, x):
    return _unary(xp, xp.cos, x)


@kernel("Tan", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Tan", 7, dtypes=FLOATS, family="transcendental")
def tan(xp, x):
    return _unary(xp, xp.tan, x)


@kernel("Asin", 22, dtypes=FLOATS_BF16)
@kernel("Asin", 7, dtypes=FLOATS)
def asin(xp, x):
    return _unary(xp, xp.arcsin, x)


@kernel("Acos", 22, dtypes=FLOATS_BF16)
@kernel("Acos", 7, dtypes=FLOATS)
def acos(xp, x):
    return _unary(xp, xp.arccos, x)


@kernel("Atan", 22, dtypes=FLOATS_BF16)
@kernel("Atan", 7, dtypes=FLOATS)
def atan(xp, x):
    return _unary(xp, xp.arctan, x)


@kernel("Sinh", 22, dtypes=FLOATS_BF16)
@kernel("Sinh", 9, dtypes=FLOATS)
def sinh(xp, x):
    return _unary(xp, xp.sinh, x)


@kernel("Cosh", 22, dtypes=FLOATS_BF16)
@kernel("Cosh", 9, dtypes=FLOATS)
def cosh(xp, x):
    return _unary(xp, xp.cosh, x)


@kernel("Asinh", 22, dtypes=FLOATS_BF16)
@kernel("Asinh", 9, dtypes=FLOATS)
def asinh(xp, x):
    return _unary(xp, xp.arcsinh, x)


@kernel("Acosh", 22, dtypes=FLOATS_BF16)
@kernel("Acosh", 9, dtypes=FLOATS)
def acosh(xp, x):
    return _unary(xp, xp.arccosh, x)


@kernel("Atanh", 22, dtypes=FLOATS_BF16)
@kernel("Atanh", 9, dtypes=FLOATS)
def atanh(xp, x):
    return _unary(xp, xp.arctanh, x)


# ---------------------------------------------------------------------------------------------
# Activations
# ---------------------------------------------------------------------------------------------


def _sigmoid(xp, y, out=None):
    """exp(min(y, 0)) / (1 + exp(-|y|)): 1 / (1 + e^-y) for y >= 0 and e^y / (1 + e^y) below,
    never overflowing and exact in both tails; plain passes and one temporary (a copy under a
    mask, as this did before, ran 3-5x slower than the whole, on 1.2M float32 values).
    ``out`` (which may be ``y`` itself) receives the result."""
    num = xp.minimum(y, 0)  # before ``out`` may overwrite y
    xp.exp(num, out=num)
    e = xp.abs(y, out=out) if out is not None else xp.abs(y)
    xp.negative(e, out=e)
    xp.exp(e, out=e)
    e += 1
    return xp.divide(num, e, out=e)


def _softplus(xp, y):
    return xp.logaddexp(xp.zeros((), dtype=y.dtype), y)  # ln(1 + e^y) without overflow


@kernel("Sigmoid", 13, dtypes=FLOATS_BF16, inplace=(0,), family="transcendental")
@kernel("Sigmoid", 1, 6, dtypes=FLOATS, inplace=(0,), family="transcendental")
def sigmoid(xp, x, *, out=None):
    """A provider's ``xp.compiled_sigmoid`` (the CPU EP's, numba) takes float32 tensors: from
    ``MIN_SIZE`` values on (``ready``: built first where it is not), below that where it is
    ``at_hand`` (no build; numpy's seven passes cost 7 x 3 values 6.5 us)."""
    compiled = getattr(xp, "compiled_sigmoid", None)
    if (compiled is not None and x.dtype == xp.float32
            and (compiled.ready() if x.size >= compiled.MIN_SIZE else compiled.at_hand())):
        return compiled(x, out if fits(out, x.shape, x.dtype) else None)
    if x.dtype.itemsize >= 4 and fits(out, x.shape, x.dtype):
        return _sigmoid(xp, x, out)
    return _unary(xp, lambda y: _sigmoid(xp, y), x)


@kernel("Relu", 14, dtypes=SIGNED_NUMBERS | BF16, inplace=(0,), family="elementwise")
@kernel("Relu", 13, dtypes=FLOATS_BF16, inplace=(0,), family="elementwise")
@kernel("Relu", 1, 6, dtypes=FLOATS, inplace=(0,), family="elementwise")
def relu(xp, x, *, out=None):
    zero = xp.zeros((), dtype=x.dtype)
    return xp.maximum(x, zero, out=out) if fits(out, x.shape, x.dtype) else xp.maximum(x, zero)


@kernel("LeakyRelu", 16, dtypes=FLOATS_BF16, inplace=(0,), family="elementwise")
@kernel("LeakyRelu", 1, 6, dtypes=FLOATS, inplace=(0,), family="elementwise")
def leaky_relu(xp, x, *, alpha, out=None):
    if x.dtype.itemsize < 4:
        return _unary(xp, lambda y: xp.where(y < 0, y * alpha, y), x)
    negative = x < 0  # before ``out`` (which may be x) is written
    scaled = xp.multiply(x, alpha)
    if fits(out, x.shape, x.dtype):
        if out is not x:
            xp.copyto(out, x)
        xp.copyto(out, scaled, where=negative)
        return out
    xp.copyto(scaled, x, where=~negative)
    return scaled


@kernel("Elu", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Elu", 1, 6, dtypes=FLOATS, family="transcendental")
def elu(xp, x, *, alpha):
    return _unary(xp, lambda y: xp.where(y < 0, alpha * xp.expm1(y), y), x)


@kernel("Selu", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Selu", 1, 6, dtypes=FLOATS, family="transcendental")
def selu(xp, x, *, alpha, gamma):
    return _unary(xp, lambda y: gamma * xp.where(y > 0, y, alpha * xp.expm1(y)), x)


@kernel("Celu", 28, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Celu", 12, dtypes={"float32"}, family="transcendental")
def celu(xp, x, *, alpha):
    return _unary(xp, lambda y: xp.where(y > 0, y, alpha * xp.expm1(y / alpha)), x)


@kernel("HardSigmoid", 22, dtypes=FLOATS_BF16, inplace=(0,), family="transcendental")
@kernel("HardSigmoid", 1, 6, dtypes=FLOATS, inplace=(0,), family="transcendental")
def hard_sigmoid(xp, x, *, alpha, beta, out=None):
    """A provider's ``xp.compiled_hard_sigmoid`` (the CPU EP's, numba) takes float32, into a
    donated ``out`` (the input's own buffer: a memory-bound pass ran twice as fast in place
    on a million values)."""
    compiled = _compiled_hard_sigmoid(xp, x)
    if compiled is not None:
        return compiled(x, alpha, beta, out=out if fits(out, x.shape, x.dtype) else None)
    return _unary(xp, lambda y: xp.clip(alpha * y + beta, 0, 1), x)


@kernel("HardSwish", 22, dtypes=FLOATS_BF16, inplace=(0,), family="transcendental")
@kernel("HardSwish", 14, dtypes=FLOATS, inplace=(0,), family="transcendental")
def hard_swish(xp, x, *, out=None):
    """x * HardSigmoid(x) with alpha 1/6 and beta 0.5; see :func:`hard_sigmoid`."""
    compiled = _compiled_hard_sigmoid(xp, x)
    if compiled is not None:
        return compiled(x, 1 / 6, 0.5, times_x=True,
                        out=out if fits(out, x.shape, x.dtype) else None)
    return _unary(xp, lambda y: y * xp.clip(y / 6 + 0.5, 0, 1), x)


def _compiled_hard_sigmoid(xp, x):
    """The provider's ``xp.compiled_hard_sigmoid`` where it has one ready for ``x``, else
    ``None`` (the CUDA EP has none)."""
    compiled = getattr(xp, "compiled_hard_sigmoid", None)
    return compiled if compiled is not None and x.dtype == xp.float32 and compiled.ready() \
        else None


@kernel("Softplus", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Softplus", 1, dtypes=FLOATS, family="transcendental")
def softplus(xp, x):
    return _unary(xp, lambda y: _softplus(xp, y), x)


@kernel("Softsign", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Softsign", 1, dtypes=FLOATS, family="transcendental")
def softsign(xp, x):
    return _unary(xp, lambda y: y / (1 + xp.abs(y)), x)


@kernel("ThresholdedRelu", 22, dtypes=FLOATS_BF16, family="elementwise")
@kernel("ThresholdedRelu", 10, dtypes=FLOATS, family="elementwise")
def thresholded_relu(xp, x, *, alpha):
    return xp.where(upcast(xp, x) > alpha, x, xp.zeros((), dtype=x.dtype))


@kernel("Mish", 22, dtypes=FLOATS_BF16, family="transcendental")
@kernel("Mish", 18, dtypes=FLOATS, family="transcendental")
def mish(xp, x):
    return _unary(xp, lambda y: y * xp.tanh(_softplus(xp, y)), x)


def gelu_of(xp, y, approximate):
    """0.5 y (1 + erf(y / sqrt 2)), or with tanh; in place on its own one temporary (the
    namespace's ``gelu_float32``, where it has one, computes the erf form of float32 in one
    pass over the array)."""
    fused = getattr(xp, "gelu_float32", None)
    if approximate != "tanh" and fused is not None and y.dtype == xp.float32 and y.size:
        return fused(y)
    if approximate == "tanh":
        t = xp.multiply(y, y)
        t *= 0.044715
        t += 1
        t *= y
        t *= math.sqrt(2 / math.pi)
        xp.tanh(t, out=t)
    else:
        t = xp.erf(y * (1 / math.sqrt(2)))
    t += 1
    t *= y
    t *= 0.5
    return t


def check_gelu(node, provider):
    approximate = node.attributes["approximate"]
    require(approximate in ("none", "tanh"), "Gelu: approximate must be 'none' or 'tanh', got "
            "{!r}", approximate, code="attribute")


@kernel("Gelu", 20, dtypes=FLOATS_BF16, check=check_gelu, family="transcendental")
def gelu(xp, x, *, approximate):
    return _unary(xp, lambda y: gelu_of(xp, y, approximate), x)


@kernel("Swish", 24, dtypes=FLOATS_BF16)
def swish(xp, x, *, alpha):
    return _unary(xp, lambda y: y * _sigmoid(xp, alpha * y), x)


def check_shrink(node, provider):
    x = node.inputs[0]
    if x.dtype is not None and x.dtype.name in INTS:
        attrs = node.attributes
        for name in ("lambd", "bias"):
            require(float(attrs[name]).is_integer(), "Shrink: {} shrinks integers only by "
                    "whole lambd and bias, got {}={}", provider, name, attrs[name],
                    code="attribute")


@kernel("Shrink", 9, dtypes=NUMERIC, check=check_shrink)
def shrink(xp, x, *, lambd, bias):
    if x.dtype.kind in "iu":  # whole lambd and bias (see check_shrink): integers wrap
        b = xp.asarray(int(bias)).astype(x.dtype)
        zero = xp.zeros((), dtype=x.dtype)
        return xp.where(x < -int(lambd), x + b, xp.where(x > int(lambd), x - b, zero))
    y = upcast(xp, x)
    out = xp.where(y < -lambd, y + bias, xp.where(y > lambd, y - bias, 0))
    return out.astype(x.dtype, copy=False)


def _unidirectional(x, slope):
    pairs = zip(slope.shape[::-1], x.shape[::-1], strict=False)
    if slope.ndim > x.ndim or any(d not in (1, e) for d, e in pairs):
        raise ValueError(f"slope of shape {slope.shape} does not broadcast to X {x.shape}")


def check_prelu_legacy(node, provider):
    x, slope = node.inputs[0], node.inputs[1]
    shape = None if slope.shape is None else tuple(slope.shape)
    ok = shape is not None and (all(d == 1 for d in shape) or shape == tuple(x.shape or ()))
    require(ok, "PRelu-{}: {} takes a slope of one element or of X's shape, got {} for X {}; "
            "use PRelu 7+ (numpy broadcasting)", node.since_version, provider, shape, x.shape,
            code="shape")


@kernel("PRelu", 16, dtypes=PRELU_9 | BF16, family="elementwise")
@kernel("PRelu", 9, dtypes=PRELU_9, family="elementwise")
@kernel("PRelu", 7, dtypes=FLOATS, family="elementwise")
def prelu(xp, x, slope):
    _unidirectional(x, slope)
    y, s = upcast(xp, x), upcast(xp, slope)
    return xp.where(y < 0, y * s, y).astype(x.dtype, copy=False)


@kernel("PRelu", 1, 6, dtypes=FLOATS, check=check_prelu_legacy, family="elementwise")
def prelu_legacy(xp, x, slope):
    return prelu(xp, x, slope.reshape(()) if slope.size == 1 else slope)


def _clip_bound(xp, value, dtype):
    if dtype == xp.float16 and abs(value) >= 65520.0:  # rounds to infinity in float16
        value = math.copysign(math.inf, value)
    return xp.asarray(value, dtype=dtype)


@kernel("Clip", 13, dtypes=NUMERIC_BF16, inplace=(0,), family="elementwise")
@kernel("Clip", 12, dtypes=NUMERIC, inplace=(0,), family="elementwise")
@kernel("Clip", 11, dtypes=FLOATS, inplace=(0,), family="elementwise")
def clip(xp, x, lo=None, hi=None, *, out=None):
    """Min(hi, Max(x, lo)): all values become ``hi`` where ``lo > hi``; NaN stays NaN."""
    if out is not None and not (fits(out, x.shape, x.dtype) and all(
            v is None or (v.dtype == x.dtype and v.size == 1 and v.ndim <= x.ndim)
            for v in (lo, hi))):
        out = None
    if lo is not None:
        x = xp.maximum(x, lo) if out is None else xp.maximum(x, lo, out=out)
    if hi is not None:
        x = xp.minimum(x, hi) if out is None else xp.minimum(x, hi, out=out)
    return x


@kernel("Clip", 1, 6, dtypes=FLOATS, family="elementwise")
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


def _two_alike(node):
    """``"add"`` for a Sum of two inputs of one type of 4 bytes or more (what :func:`sum_`
    computes with ``xp.add`` alone), else ``None``."""
    inputs = node.inputs
    if len(inputs) != 2 or any(v is None or v.dtype is None for v in inputs):
        return None
    a, b = (v.dtype for v in inputs)
    return "add" if a == b and a.name in ("float32", "float64") else None


@kernel("Sum", 13, dtypes=FLOATS_BF16, family="elementwise", direct_when=_two_alike)
@kernel("Sum", 8, dtypes=FLOATS, family="elementwise", direct_when=_two_alike)
def sum_(xp, *xs):
    if len(xs) == 2:  # the common case, without the fold's lists (a third of a tiny sum)
        x, y = xs
        if x.dtype == y.dtype and x.dtype.itemsize >= 4:
            return xp.add(x, y)
    elif len(xs) == 1:
        return xs[0]
    else:  # many of one shape and wide type (AdaBoost's estimators): into the first sum
        first = xs[0]
        if first.dtype.itemsize >= 4 and all(
                x.dtype == first.dtype and x.shape == first.shape for x in xs):
            out = first + xs[1]
            for x in xs[2:]:
                out += x
            return out
    return _fold(xp.add, [upcast(xp, x) for x in xs]).astype(xs[0].dtype, copy=False)


@kernel("Max", 13, dtypes=NUMERIC_BF16, family="elementwise")
@kernel("Max", 12, dtypes=NUMERIC, family="elementwise")
@kernel("Max", 8, dtypes=FLOATS, family="elementwise")
def max_(xp, *xs):
    return _fold(xp.maximum, xs)


@kernel("Min", 13, dtypes=NUMERIC_BF16, family="elementwise")
@kernel("Min", 12, dtypes=NUMERIC, family="elementwise")
@kernel("Min", 8, dtypes=FLOATS, family="elementwise")
def min_(xp, *xs):
    return _fold(xp.minimum, xs)


@kernel("Mean", 13, dtypes=FLOATS_BF16, family="elementwise")
@kernel("Mean", 8, dtypes=FLOATS, family="elementwise")
def mean(xp, *xs):
    total = _fold(xp.add, [upcast(xp, x) for x in xs])
    return xp.divide(total, len(xs)).astype(xs[0].dtype, copy=False)


@kernel("Sum", 1, 6, dtypes=FLOATS, family="elementwise")
def sum_same_shape(xp, *xs):
    _same_shapes(xs)
    return sum_(xp, *xs)


@kernel("Max", 1, 6, dtypes=FLOATS, family="elementwise")
def max_same_shape(xp, *xs):
    _same_shapes(xs)
    return max_(xp, *xs)


@kernel("Min", 1, 6, dtypes=FLOATS, family="elementwise")
def min_same_shape(xp, *xs):
    _same_shapes(xs)
    return min_(xp, *xs)


@kernel("Mean", 1, 6, dtypes=FLOATS, family="elementwise")
def mean_same_shape(xp, *xs):
    _same_shapes(xs)
    return mean(xp, *xs)
