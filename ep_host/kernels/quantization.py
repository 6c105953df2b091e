"""Linear quantization: QuantizeLinear and DequantizeLinear (per tensor, per axis, blocked),
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul and QLinearConv.

Integer arithmetic is exact (int64, or float64 holding integers); the types numpy lacks (float8,
4- and 2-bit) come from ``ml_dtypes``. A float target is written with one rounding (round to
nearest even), after clamping to its finite range when ``saturate`` asks for it.
"""

from __future__ import annotations

import ep_host
from ep_host import deny, element_count, require
from ep_host.kernels.conv import conv
from ep_host.kernels.conv_geometry import check_window_attributes
from ep_host.kernels.registry import kernel

INT_RANGES = {
    "uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767),
    "uint4": (0, 15), "int4": (-8, 7), "uint2": (0, 3), "int2": (-2, 1),
}
FLOAT8 = frozenset({"float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz"})
FLOAT4 = frozenset({"float4e2m1"})
FLOAT_MAX = {"float8e4m3fn": 448.0, "float8e4m3fnuz": 240.0, "float8e5m2": 57344.0,
             "float8e5m2fnuz": 57344.0, "float4e2m1": 6.0}
HIGH = frozenset({"float32", "float16", "bfloat16"})

# Quantized types per version (the schema's T2/T3 for QuantizeLinear, T1 for DequantizeLinear).
Q8 = frozenset({"uint8", "int8"})
Q19 = Q8 | FLOAT8
Q21 = Q19 | {"uint16", "int16", "uint4", "int4"}
Q23 = Q21 | FLOAT4
Q25 = Q23 | {"uint2", "int2"}


def _name(array) -> str:
    return ep_host.dtype(array.dtype).name


def _numpy_type(name: str):
    return ep_host.dtype(name).numpy


def _names(values) -> str:
    return "/".join(sorted(values))


# ---------------------------------------------------------------------------------------------
# Scales laid out against the input: per tensor, per axis, blocked
# ---------------------------------------------------------------------------------------------


def _broadcast_scale(xp, s, shape, axis, block_size):
    """``s`` (a scale or zero point) shaped to broadcast elementwise against ``shape``."""
    rank = len(shape)
    if s.ndim == 0 or (s.ndim == 1 and s.size == 1 and not block_size):
        return s.reshape(())
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    if block_size:
        if s.ndim != rank:
            raise ValueError(f"blocked quantization needs a scale of rank {rank}, got {s.shape}")
        want = tuple(-(-d // block_size) if i == axis else d for i, d in enumerate(shape))
        if tuple(s.shape) != want:
            raise ValueError(f"block_size {block_size} on axis {axis} of {tuple(shape)} needs a "
                             f"scale of shape {want}, got {tuple(s.shape)}")
        return xp.repeat(s, block_size, axis=axis)[
            tuple(slice(0, shape[axis]) if i == axis else slice(None) for i in range(rank))]
    if s.ndim != 1 or s.shape[0] != shape[axis]:
        raise ValueError(f"per-axis scale must be 1-D of length {shape[axis]} (axis {axis} of "
                         f"{tuple(shape)}), got {tuple(s.shape)}")
    return s.reshape((-1,) + (1,) * (rank - 1 - axis))


def _as_float(xp, a):
    """Quantized values as float64 (exact for every quantized type)."""
    return a.astype(xp.float64)


def _to_quantized(xp, v, target: str, saturate: bool):
    """Float values ``v`` written as ``target``: integers are rounded (ties to even) and clamped;
    floats are rounded once by the conversion, clamped first when saturating."""
    dtype = _numpy_type(target)
    if target in INT_RANGES:
        lo, hi = INT_RANGES[target]
        return xp.clip(xp.rint(v), lo, hi).astype(xp.int64).astype(dtype)
    if saturate or target in FLOAT4:
        v = xp.clip(v, -FLOAT_MAX[target], FLOAT_MAX[target])
    return v.astype(dtype)


# ---------------------------------------------------------------------------------------------
# QuantizeLinear
# ---------------------------------------------------------------------------------------------


def _quantize(xp, x, scale, zero_point, *, axis=1, block_size=0, saturate=1, output_dtype=0,
              precision=0, explicit_precision=False):
    """``x / scale`` rounded, plus the zero point, written as the target type. Before version 23
    the quotient is computed in float32 (float64 for int32 input), as onnxruntime and the
    reference do; from 23 on, in the ``precision`` attribute's type, else the scale's."""
    if zero_point is not None:
        target = _name(zero_point)
    elif output_dtype:
        target = ep_host.dtype(output_dtype).name
    else:
        target = "uint8"
    if precision:
        work = _numpy_type(ep_host.dtype(precision).name)
    elif explicit_precision:
        work = scale.dtype
    else:
        work = xp.float64 if x.dtype == xp.int32 else xp.float32
    s = _broadcast_scale(xp, scale, x.shape, axis, block_size).astype(work)
    q = x.astype(work) / s
    if target in INT_RANGES:  # round the quotient in its own precision, then add the zero point
        q = xp.rint(q)
    v = q.astype(xp.float64)
    if zero_point is not None:
        v = v + _as_float(xp, _broadcast_scale(xp, zero_point, x.shape, axis, block_size))
    return _to_quantized(xp, v, target, bool(saturate))


def _check_quantize(types: frozenset[str], scale_types: frozenset[str]):
    def check(node, provider):
        op, attrs = node.op_type, node.attributes
        x, scale = node.inputs[0], node.inputs[1]
        zp = node.inputs[2] if len(node.inputs) > 2 else None
        if scale is not None and scale.dtype is not None:
            require(scale.dtype.name in scale_types, "{}: {} takes a {} scale, got {}", op,
                    provider,
                    _names(scale_types), scale.dtype.name, code="dtype")
        output_dtype = attrs.get("output_dtype", 0)
        if zp is not None and zp.dtype is not None:
            target = zp.dtype.name
            require(not output_dtype or ep_host.dtype(output_dtype).name == target,
                    "{}: output_dtype ({}) must equal the zero point's type ({})", op,
                    ep_host.dtype(output_dtype).name if output_dtype else "", target,
                    code="attribute")
        else:
            target = ep_host.dtype(output_dtype).name if output_dtype else "uint8"
        require(target in types, "{}: {} quantizes to {} at since_version {}, got {}", op, provider,
                _names(types), node.since_version, target, code="dtype")
        precision = attrs.get("precision", 0)
        if scale is not None and scale.dtype is not None and scale.dtype.name not in HIGH:
            require(precision, "{}: a {} scale needs the precision attribute (the division's "
                    "type: {})", op, scale.dtype.name, _names(HIGH), code="attribute")
        if precision:
            name = ep_host.dtype(precision).name
            require(name in HIGH, "{}: {} divides in {} precision, got precision {}", op, provider,
                    _names(HIGH), name, code="attribute")
        _check_layout(node, x, scale, attrs)

    return check


def _check_layout(node, x, scale, attrs):
    """Static checks of the scale's granularity against the input."""
    block_size = attrs.get("block_size", 0)
    require(block_size >= 0, "{}: block_size must be >= 0, got {}", node.op_type, block_size,
            code="attribute")
    if x is None or x.shape is None or scale is None or scale.shape is None:
        return
    rank, srank = len(x.shape), len(scale.shape)
    if block_size:
        require(srank == rank, "{}: blocked quantization takes a scale of the input's rank {}, "
                "got shape {}", node.op_type, rank, scale.shape, code="shape")
    elif srank > 1:
        deny("{}: the scale must be a scalar or 1-D (per axis) without block_size, got shape {}",
             node.op_type, scale.shape, code="shape")
    per_tensor = srank == 0 or (srank == 1 and not block_size
                                and not (isinstance(scale.shape[0], int) and scale.shape[0] > 1))
    require(per_tensor or node.since_version > 10, "{}-10 quantizes per tensor: the scale must "
            "have one element, got shape {}", node.op_type, scale.shape, code="shape")
    if not per_tensor:
        axis = attrs.get("axis", 1)
        require(-rank <= axis < rank, "{}: axis {} is out of range for a rank-{} input",
                node.op_type, axis, rank, code="attribute")


X_TYPES = frozenset({"float32", "int32"})
X_TYPES19 = X_TYPES | {"float16", "bfloat16"}
SCALE10 = frozenset({"float32"})
SCALE24 = HIGH | {"float8e8m0"}


@kernel("QuantizeLinear", 10, dtypes=X_TYPES, check=_check_quantize(Q8, SCALE10))
def quantize_linear_10(xp, x, y_scale, y_zero_point=None):
    if y_scale.size != 1:
        raise ValueError(f"QuantizeLinear-10 is per tensor: y_scale must have one element, got "
                         f"shape {y_scale.shape}")
    return _quantize(xp, x, y_scale.reshape(()),
                     None if y_zero_point is None else y_zero_point.reshape(()))


@kernel("QuantizeLinear", 13, dtypes=X_TYPES, check=_check_quantize(Q8, SCALE10))
def quantize_linear_13(xp, x, y_scale, y_zero_point=None, *, axis):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis)


@kernel("QuantizeLinear", 19, dtypes=X_TYPES19,
        check=_check_quantize(Q19, frozenset({"float32", "float16", "bfloat16"})))
def quantize_linear_19(xp, x, y_scale, y_zero_point=None, *, axis, saturate):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis, saturate=saturate)


@kernel("QuantizeLinear", 21, dtypes=X_TYPES19, check=_check_quantize(Q21, HIGH))
def quantize_linear_21(xp, x, y_scale, y_zero_point=None, *, axis, block_size, output_dtype,
                       saturate):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis, block_size=block_size,
                     saturate=saturate, output_dtype=output_dtype)


@kernel("QuantizeLinear", 25, 28, dtypes=X_TYPES19, check=_check_quantize(Q25, SCALE24))
@kernel("QuantizeLinear", 24, dtypes=X_TYPES19, check=_check_quantize(Q23, SCALE24))
@kernel("QuantizeLinear", 23, dtypes=X_TYPES19, check=_check_quantize(Q23, HIGH))
def quantize_linear_23(xp, x, y_scale, y_zero_point=None, *, axis, block_size, output_dtype,
                       precision, saturate):
    return _quantize(xp, x, y_scale, y_zero_point, axis=axis, block_size=block_size,
                     saturate=saturate, output_dtype=output_dtype, precision=precision,
                     explicit_precision=True)


# ---------------------------------------------------------------------------------------------
# DequantizeLinear
# ---------------------------------------------------------------------------------------------


def _dequantize(xp, x, scale, zero_point, *, axis=1, block_size=0, output_dtype=0):
    """``(x - zero_point) * scale`` multiplied in float32 and rounded once to the output type,
    as onnxruntime and the reference do (a float16 product of float16 operands is exact in
    float32, so a float16 scale and output give the float16 product)."""
    out = _numpy_type(ep_host.dtype(output_dtype).name) if output_dtype else scale.dtype
    v = _as_float(xp, x)
    if zero_point is not None:
        v = v - _as_float(xp, _broadcast_scale(xp, zero_point, x.shape, axis, block_size))
    s = _broadcast_scale(xp, scale, x.shape, axis, block_size)
    return (v.astype(xp.float32) * s.astype(xp.float32)).astype(out)


def _check_dequantize(types: frozenset[str], scale_types: frozenset[str]):
    def check(node, provider):
        op, attrs = node.op_type, node.attributes
        x, scale = node.inputs[0], node.inputs[1]
        zp = node.inputs[2] if len(node.inputs) > 2 else None
        if x is not None and x.dtype is not None:
            require(x.dtype.name in types | {"int32"}, "{}: {} dequantizes {} at "
                    "since_version {}, got {}", op, provider, _names(types | {"int32"}),
                    node.since_version,
                    x.dtype.name, code="dtype")
            require(x.dtype.name != "int32" or zp is None,
                    "{}: an int32 input takes no zero point", op, code="dtype")
        if scale is not None and scale.dtype is not None:
            require(scale.dtype.name in scale_types, "{}: {} takes a {} scale, got {}", op,
                    provider,
                    _names(scale_types), scale.dtype.name, code="dtype")
            output_dtype = attrs.get("output_dtype", 0)
            out = ep_host.dtype(output_dtype).name if output_dtype else scale.dtype.name
            require(out in HIGH, "{}: {} writes {} output, got {} (set output_dtype)", op, provider,
                    _names(HIGH), out, code="dtype")
        _check_layout(node, x, scale, attrs)

    return check


@kernel("DequantizeLinear", 10, dtypes=None, check=_check_dequantize(Q8, SCALE10))
def dequantize_linear_10(xp, x, x_scale, x_zero_point=None):
    if x_scale.size != 1:
        raise ValueError(f"DequantizeLinear-10 is per tensor: x_scale must have one element, "
                         f"got shape {x_scale.shape}")
    return _dequantize(xp, x, x_scale.reshape(()),
                       None if x_zero_point is None else x_zero_point.reshape(()))


@kernel("DequantizeLinear", 13, dtypes=None, check=_check_dequantize(Q8, SCALE10))
def dequantize_linear_13(xp, x, x_scale, x_zero_point=None, *, axis):
    return _dequantize(xp, x, x_scale, x_zero_point, axis=axis)


@kernel("DequantizeLinear", 19, dtypes=None,
        check=_check_dequantize(Q19, frozenset({"float32", "float16", "bfloat16"})))
def dequantize_linear_19(xp, x, x_scale, x_zero_point=None, *, axis):
    return _dequantize(xp, x, x_scale, x_zero_point, axis=axis)


@kernel("DequantizeLinear", 21, dtypes=None, check=_check_dequantize(Q21, HIGH))
def dequantize_linear_21(xp, x, x_scale, x_zero_point=None, *, axis, block_size):
    return _dequantize(xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size)


@kernel("DequantizeLinear", 25, 28, dtypes=None, check=_check_dequantize(Q25, SCALE24))
@kernel("DequantizeLinear", 24, dtypes=None, check=_check_dequantize(Q23, SCALE24))
@kernel("DequantizeLinear", 23, dtypes=None, check=_check_dequantize(Q23, HIGH))
def dequantize_linear_23(xp, x, x_scale, x_zero_point=None, *, axis, block_size, output_dtype):
    return _dequantize(xp, x, x_scale, x_zero_point, axis=axis, block_size=block_size,
                       output_dtype=output_dtype)


# ---------------------------------------------------------------------------------------------
# DynamicQuantizeLinear
# ---------------------------------------------------------------------------------------------


@kernel("DynamicQuantizeLinear", 11, dtypes={"float32"})
def dynamic_quantize_linear(xp, x):
    """An all-zero (or empty) input has scale 0, where the spec's zero point is 0 / 0; this
    kernel then returns zero point 0 and all-zero output, as onnxruntime does."""
    lo = min(float(x.min()), 0.0) if x.size else 0.0
    hi = max(float(x.max()), 0.0) if x.size else 0.0
    scale = xp.float32(xp.float32(hi) - xp.float32(lo)) / xp.float32(255)
    if scale == 0:
        return (xp.zeros(x.shape, dtype=xp.uint8), xp.asarray(scale, dtype=xp.float32),
                xp.asarray(0, dtype=xp.uint8))
    zp = xp.rint(xp.clip(xp.float32(0) - xp.float32(lo) / scale, 0, 255))
    y = xp.clip(xp.rint(x / scale).astype(xp.float64) + float(zp), 0, 255).astype(xp.uint8)
    return y, xp.asarray(scale, dtype=xp.float32), xp.asarray(zp, dtype=xp.uint8)


# ---------------------------------------------------------------------------------------------
# MatMulInteger, QLinearMatMul
# ---------------------------------------------------------------------------------------------


def _row_param(p, a):
    """A parameter of ``a`` (the left matrix): scalar, per row ([M] or [..., M, 1])."""
    if p.ndim == 1 and p.size > 1 and a.ndim >= 2:
        if p.shape[0] != a.shape[-2]:
            raise ValueError(f"a per-row parameter of a {tuple(a.shape)} matrix has "
                             f"{a.shape[-2]} elements, got {p.shape[0]}")
        return p.reshape(-1, 1)
    return p.reshape(()) if p.size == 1 else p


def _col_param(p):
    """A parameter of ``b`` (the right matrix): scalar, per column ([N] or [..., 1, N])."""
    return p.reshape(()) if p.size == 1 else p


def _check_8bit(node, provider, indices, types, what):
    for i in indices:
        v = node.inputs[i] if i < len(node.inputs) else None
        if v is not None and v.dtype is not None:
            require(v.dtype.name in types, "{}: {} takes {} {}, got {} for input {!r}",
                    node.op_type, provider, _names(types), what, v.dtype.name, v.name, code="dtype")


def _check_matmul_integer(node, provider):
    _check_8bit(node, provider, (1, 3), Q8, "B and its zero point")


def _matmul_flops(node):
    a, b = node.inputs[0], node.inputs[1]
    y = node.outputs[0]
    k = a.shape[-1] if a is not None and a.shape and isinstance(a.shape[-1], int) else 1
    del b
    return 2 * element_count(y.shape if y is not None else None) * k


def _integer_matmul(xp, a, b):
    """Exact products of integer-valued matrices (1-D operands as numpy.matmul promotes them)."""
    return xp.matmul(a.astype(xp.int64), b.astype(xp.int64))


@kernel("MatMulInteger", 10, dtypes=Q8, check=_check_matmul_integer, flops=_matmul_flops,
        family="matmul")
def matmul_integer(xp, a, b, a_zero_point=None, b_zero_point=None):
    a = a.astype(xp.int64)
    b = b.astype(xp.int64)
    if a_zero_point is not None:
        a = a - _row_param(a_zero_point, a).astype(xp.int64)
    if b_zero_point is not None:
        b = b - _col_param(b_zero_point).astype(xp.int64)
    return _integer_matmul(xp, a, b).astype(xp.int32)  # accumulation wraps in 32 bits


def _check_qlinear_matmul(types, scale_types):
    def check(node, provider):
        _check_8bit(node, provider, (3, 5), types, "b and its zero point")
        _check_8bit(node, provider, (7,), types, "output zero point")
        _check_8bit(node, provider, (1, 4, 6), scale_types, "scales")

    return check


@kernel("QLinearMatMul", 10, dtypes=Q8, check=_check_qlinear_matmul(Q8, SCALE10),
        flops=_matmul_flops, family="matmul")
@kernel("QLinearMatMul", 21, dtypes=Q19, check=_check_qlinear_matmul(Q19, HIGH),
        flops=_matmul_flops, family="matmul")
def qlinear_matmul(xp, a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                   y_zero_point):
    """The product of the dequantized inputs, requantized: integer inputs multiply exactly
    (int64), float8 inputs in float64; the scales combine in float64."""
    av = _as_float(xp, a) - _as_float(xp, _row_param(a_zero_point, a))
    bv = _as_float(xp, b) - _as_float(xp, _col_param(b_zero_point))
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        acc = _integer_matmul(xp, av, bv).astype(xp.float64)
    else:
        acc = xp.matmul(av, bv)
    scale = (_as_float(xp, _row_param(a_scale, a)) * _as_float(xp, _col_param(b_scale))
             / _as_float(xp, _col_param(y_scale)))
    v = acc * scale
    target = _name(y_zero_point)
    if target in INT_RANGES:
        v = xp.rint(v)
    return _to_quantized(xp, v + _as_float(xp, _col_param(y_zero_point)), target, True)


# ---------------------------------------------------------------------------------------------
# QLinearConv
# ---------------------------------------------------------------------------------------------


def _check_qlinear_conv(node, provider):
    _check_8bit(node, provider, (3, 5), Q8, "w and its zero point")
    _check_8bit(node, provider, (7,), Q8, "output zero point")
    _check_8bit(node, provider, (1, 4, 6), SCALE10, "scales")
    attrs = node.attributes
    x, w = node.inputs[0], node.inputs[3]
    rank = None if x is None or x.shape is None else len(x.shape)
    require(rank is None or rank >= 3, "QLinearConv: {} takes input of rank >= 3 (N, C, "
            "D1...), got rank {}", provider, rank, code="shape")
    w_rank = None if w is None or w.shape is None else len(w.shape)
    n_spatial = rank - 2 if rank is not None else None if w_rank is None else w_rank - 2
    check_window_attributes(node, n_spatial, attrs.get("kernel_shape"))
    require(attrs["group"] >= 1, "QLinearConv: group must be >= 1, got {}", attrs["group"],
            code="attribute")


def _qlinear_conv_flops(node):
    w, y = node.inputs[3], node.outputs[0]
    per_output = element_count(w.shape[1:] if w is not None and w.shape is not None else None)
    return 2 * element_count(y.shape if y is not None else None) * per_output


@kernel("QLinearConv", 10, dtypes=Q8, check=_check_qlinear_conv, flops=_qlinear_conv_flops,
        family="conv")
def qlinear_conv(xp, x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point,
                 B=None, *, auto_pad, group, dilations=None, kernel_shape=None, pads=None,
                 strides=None):
    """Integer convolution in float64 (exact while a sum of products stays below 2**53),
    then the bias, the combined scale and rounding to nearest even."""
    m = w.shape[0]
    channel = (m,) + (1,) * (w.ndim - 1)
    xv = _as_float(xp, x) - float(x_zero_point.reshape(()))
    wv = _as_float(xp, w) - _as_float(xp, w_zero_point).reshape(
        channel if w_zero_point.size > 1 else ())
    acc = conv(xp, xv, wv, None, auto_pad=auto_pad, group=group, dilations=dilations,
               kernel_shape=kernel_shape, pads=pads, strides=strides)
    per_channel = (1, m) + (1,) * (x.ndim - 2)
    if B is not None:
        acc = acc + _as_float(xp, B).reshape(per_channel)
    ws = _as_float(xp, w_scale).reshape(per_channel if w_scale.size > 1 else ())
    scale = float(x_scale.reshape(())) * ws / float(y_scale.reshape(()))
    v = xp.rint(acc * scale) + float(y_zero_point.reshape(()))
    return _to_quantized(xp, v, _name(y_zero_point), True)

