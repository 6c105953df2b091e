"""What the CUDA EP computes: an allow-list of op families over the shared ``xp`` kernels of
:mod:`ep_host.kernels`, the
element types it takes for each, and the GPU-specific kernels that replace a shared one under
the same key.

Every shared kernel on the list was read for CuPy safety: only ``xp`` functions CuPy also has
(``CUPY_NAMES``), no numpy or scipy calls on data, no Python loop over elements, no host
synchronisation on device data, no object or string arrays. ``tests/test_cupy_safety.py``
re-reads them on every run.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ep_host import CaptureSupport, NodeView, deny, require
from ep_host.kernels import (
    ALL,
    FLOATS,
    NUMERIC,
    REGISTRY,
    KernelSpec,
    Registry,
    pad_spatial,
    strides_and_dilations,
    tap_slices,
    window_geometry,
)
from ep_host_cuda.xp import is_cupy

# What CuPy stores is the library's numeric types and bool: no bfloat16, float8, 4-bit or
# strings.
DEVICE_TYPES = ALL


@dataclass(frozen=True)
class Family:
    """How the CUDA EP takes one op: ``dtypes`` for the inputs that share the first input's
    type (intersected with what the shared kernel takes), ``hint`` appended to a dtype decline,
    ``launches`` the device calls one run makes (for the cost), and ``no_capture`` the reason
    when the kernel can never be recorded into a CUDA graph."""

    dtypes: frozenset[str]
    hint: str = ""
    launches: int = 1
    no_capture: str = ""


def _family(ops: str, dtypes: frozenset[str], **kwargs: Any) -> dict[tuple[str, str], Family]:
    family = Family(frozenset(dtypes), **kwargs)
    return {("ai.onnx", op): family for op in ops.split()}


MS = "com.microsoft"
FLOAT_MATH = "upcast float16 to float32 and back: 3 calls"

FAMILIES: dict[tuple[str, str], Family] = {
    # elementwise arithmetic and activations
    **_family("Add Sub Mul Div Abs Neg Max Min Clip PRelu", NUMERIC),
    **_family("Relu Sign", NUMERIC),
    **_family("Sum Mean", FLOATS, launches=2),
    **_family("Mod", FLOATS, hint="integer Mod tests its divisor on the host; it runs on cpu"),
    **_family("Pow Sqrt Exp Log Tanh Erf Reciprocal Floor Ceil Round Sin Cos Tan Asin Acos Atan "
              "Sinh Cosh Asinh Acosh Atanh Sigmoid LeakyRelu Elu Selu Celu HardSigmoid HardSwish "
              "Softplus Softsign ThresholdedRelu Mish Gelu Swish", FLOATS, launches=3),
    # comparisons and logic
    **_family("Equal Less LessOrEqual Greater GreaterOrEqual Where", DEVICE_TYPES),
    **_family("And Or Xor Not", frozenset({"bool"})),
    **_family("IsNaN IsInf", FLOATS),
    # matrix products (cuBLAS through CuPy)
    **_family("MatMul Gemm", FLOATS, launches=3,
              hint="cuBLAS multiplies floats; integer and quantized products run on cpu"),
    # convolution and pooling
    **_family("Conv", FLOATS, launches=4,
              hint="quantized convolutions (QLinearConv, ConvInteger) run on cpu"),
    **_family("MaxPool", FLOATS | {"int8", "uint8"}, launches=9),
    **_family("AveragePool", FLOATS, launches=12),
    **_family("GlobalAveragePool GlobalMaxPool", FLOATS, launches=2),
    **_family("LRN", FLOATS, launches=8),
    # normalization
    **_family("BatchNormalization", FLOATS, launches=8),
    **_family("LayerNormalization", FLOATS, launches=10),
    **_family("Softmax LogSoftmax", FLOATS, launches=5),
    **_family("Dropout", FLOATS),
    # reductions
    **_family("ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceSumSquare ReduceL1 "
              "ReduceL2 ReduceLogSum ReduceLogSumExp ArgMax ArgMin", NUMERIC, launches=2),
    # data movement and the Shape family
    **_family("Gather Concat Expand Tile Cast CastLike ConstantOfShape Range", DEVICE_TYPES),
    # views of their input (and Shape/Size, cached per shape): no device call
    **_family("Reshape Transpose Slice Split Squeeze Unsqueeze Flatten Identity Shape Size",
              DEVICE_TYPES, launches=0),
    # com.microsoft attention and its neighbours
    (MS, "MultiHeadAttention"): Family(frozenset({"float16", "float32"}), launches=12),
    (MS, "GroupQueryAttention"): Family(
        frozenset({"float16", "float32"}), launches=16,
        no_capture="reads seqlens_k and total_sequence_length on the host at run time"),
    (MS, "FusedConv"): Family(FLOATS, launches=5),
    (MS, "Gelu"): Family(frozenset({"float16", "float32"}), launches=3),
    (MS, "FastGelu"): Family(frozenset({"float16", "float32"}), launches=3),
    (MS, "BiasGelu"): Family(frozenset({"float16", "float32"}), launches=3),
    (MS, "SkipLayerNormalization"): Family(frozenset({"float16", "float32"}), launches=12),
}

# Kernels that copy host values to the device on every run (pageable memory), which a CUDA
# graph cannot record. (since_version None: every version.)
HOST_COPIES: dict[tuple[str, str, int | None], str] = {
    ("ai.onnx", "Clip", 1): "copies its min/max attributes to the device on every run",
    ("ai.onnx", "Clip", 6): "copies its min/max attributes to the device on every run",
}

# -- GPU-specific kernels, under the same keys as the shared ones -----------------------------

CUDA_KERNELS = Registry()
cuda_kernel = CUDA_KERNELS.kernel


def _cpu_spec(op_type: str, since_version: int, domain: str = "ai.onnx") -> KernelSpec:
    return REGISTRY.specs[(domain, op_type, since_version)]


def shared(op_type: str, since_version: int, domain: str = "ai.onnx") -> Callable[..., Any]:
    """The shared library's kernel function for a key, looked up when called (never copied)."""
    return _cpu_spec(op_type, since_version, domain).fn


def _shape_cached(xp: Any, shape: tuple[int, ...], cache: dict[Any, Any], key: Any,
                  value: Any) -> Any:
    out = cache.get((shape, key))
    if out is None:
        out = cache[(shape, key)] = xp.asarray(value, dtype=xp.int64)
    return out


# Shape and Size: the answer depends only on the input's shape, so each shape's device array is
# made once and handed out again (consumers never write into inputs). Once a shape has been
# seen no host->device copy runs, so a CUDA graph can record the kernel.


def _shape_bind(node: NodeView) -> dict[str, Any]:
    return {"cache": {}}


@cuda_kernel("Shape", 15, 19, 21, 23, 24, 25, dtypes=None, bind=_shape_bind,
             flops=lambda node: 0, bytes=lambda node: 0)
def shape(xp, data, *, start, end=None, cache=None):
    return _shape_cached(xp, data.shape, cache, (start, end), data.shape[start:end])


@cuda_kernel("Shape", 1, 13, dtypes=None, bind=_shape_bind, flops=lambda node: 0,
             bytes=lambda node: 0)
def shape_whole(xp, data, *, cache=None):
    return _shape_cached(xp, data.shape, cache, None, data.shape)


@cuda_kernel("Size", 1, 13, 19, 21, 23, 24, 25, dtypes=None, bind=_shape_bind,
             flops=lambda node: 0, bytes=lambda node: 0)
def size(xp, data, *, cache=None):
    return _shape_cached(xp, data.shape, cache, None, math.prod(data.shape))


def _depthwise(xp, x, w, b, *, auto_pad, dilations, pads, strides):
    """Conv with one filter per channel (group == C == M): one multiply-add per kernel tap over
    the whole tensor, instead of a batched GEMM whose inner dimension is the tap count."""
    dtype = x.dtype
    work = xp.float32 if dtype.itemsize < 4 else dtype
    x, w = x.astype(work, copy=False), w.astype(work, copy=False)
    n_spatial = x.ndim - 2
    kernel = tuple(w.shape[2:])
    strides, dilations = strides_and_dilations(n_spatial, strides, dilations)
    out, begin, end = window_geometry(x.shape[2:], kernel, strides, dilations, pads, auto_pad)
    padded = pad_spatial(xp, x, begin, end)
    weights = w.reshape((w.shape[0], -1))
    y = None
    for t, offsets in enumerate(itertools.product(*(range(k) for k in kernel))):
        term = padded[tap_slices(offsets, out, strides, dilations)] * weights[:, t].reshape(
            (-1,) + (1,) * n_spatial)
        y = term if y is None else xp.add(y, term, out=y)
    if b is not None:
        y += b.astype(work).reshape((-1,) + (1,) * n_spatial)
    return y.astype(dtype, copy=False)


def _conv_variant(version: int) -> Callable[..., Any]:
    def conv(xp, x, w, b=None, *, auto_pad, group, dilations=None, kernel_shape=None, pads=None,
             strides=None):
        if group > 1 and group == x.shape[1] == w.shape[0] and w.shape[1] == 1:
            return _depthwise(xp, x, w, b, auto_pad=auto_pad, dilations=dilations, pads=pads,
                              strides=strides)
        # 1x1 without padding is one GEMM in the shared kernel; the rest is im2col + GEMM
        return shared("Conv", version)(xp, x, w, b, auto_pad=auto_pad, group=group,
                                       dilations=dilations, kernel_shape=kernel_shape, pads=pads,
                                       strides=strides)

    conv.__name__ = f"conv_{version}"
    return conv


for _v in (1, 11, 22):
    _spec = _cpu_spec("Conv", _v)
    cuda_kernel("Conv", _v, dtypes=_spec.dtypes, check=_spec.check, flops=_spec.flops,
                family=_spec.family)(_conv_variant(_v))


# GELU as one fused kernel on CuPy; elsewhere (numpy bound) the shared formula.
_GELU_SOURCE = {
    "none": ("const float v = (float)x; "
             "y = (T)(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));"),
    "tanh": ("const float v = (float)x; "
             "y = (T)(0.5f * v * (1.0f + tanhf(0.79788456080286536f * "
             "(v + 0.044715f * v * v * v))));"),
}
_FUSED: dict[tuple[int, str], Any] = {}


def fused_gelu(xp: Any, approximate: str) -> Any:
    """A ``cupy.ElementwiseKernel`` computing GELU in float32 for float16/float32 input."""
    key = (id(xp), approximate)
    if key not in _FUSED:
        _FUSED[key] = xp.ElementwiseKernel("T x", "T y", _GELU_SOURCE[approximate],
                                           f"ep_host_gelu_{approximate}")
    return _FUSED[key]


def _gelu_20(xp, x, *, approximate):
    if is_cupy(xp) and x.dtype.name in ("float16", "float32"):
        return fused_gelu(xp, approximate)(x)
    return shared("Gelu", 20)(xp, x, approximate=approximate)


def _ms_gelu(xp, x):
    if is_cupy(xp) and x.dtype.name in ("float16", "float32"):
        return fused_gelu(xp, "none")(x)
    return shared("Gelu", 1, MS)(xp, x)


_spec = _cpu_spec("Gelu", 20)
cuda_kernel("Gelu", 20, dtypes=_spec.dtypes, check=_spec.check, family=_spec.family)(_gelu_20)
_spec = _cpu_spec("Gelu", 1, MS)
cuda_kernel("Gelu", 1, domain=MS, dtypes=_spec.dtypes, check=_spec.check,
            family=_spec.family)(_ms_gelu)
del _spec, _v


# -- checks the CUDA EP adds ------------------------------------------------------------------


def check_dropout(node: NodeView, provider: str) -> None:
    """Dropout in training mode draws a random mask; CuPy's generator is not numpy's, so only
    inference (training_mode absent or a constant false) is claimed."""
    mode = node.inputs[2] if len(node.inputs) > 2 else None
    if mode is None:
        return
    require(mode.is_constant and not bool(mode.value.reshape(-1)[0]),
            "Dropout: {} computes inference mode only (training_mode absent or a constant "
            "false), got {} training_mode {!r}; training runs on cpu", provider,
            "a constant true" if mode.is_constant else "a run-time", mode.name,
            code="attribute")


EXTRA_CHECKS: dict[tuple[str, str], Callable[[NodeView, str], None]] = {
    ("ai.onnx", "Dropout"): check_dropout,
}


def lookup(node: NodeView, provider: str) -> tuple[KernelSpec, Family]:
    """The spec and family for ``node``, or a Decline saying why the CUDA EP does not take it."""
    family = FAMILIES.get((node.domain, node.op_type))
    if family is None:
        elsewhere = REGISTRY.versions(node.domain, node.op_type)
        deny("{}: the {} has no kernel for this op{}", node.qualified_op, provider,
             "; it runs on cpu" if elsewhere else "", code="op")
    # the shared registry resolves the version (exact, or newest <= opset for com.microsoft)
    # and declines a miss; a GPU-specific kernel under the resolved key replaces the shared one
    spec = REGISTRY.lookup(node, provider)
    spec = CUDA_KERNELS.specs.get((spec.domain, spec.op_type, spec.since_version), spec)
    return spec, family


def capture_support(spec: KernelSpec, family: Family, node: NodeView) -> CaptureSupport:
    """Whether ``node``'s kernel can be recorded into a CUDA graph, and the precondition it
    fails when it cannot."""
    if family.no_capture:
        return CaptureSupport.no("{}: {}", node.op_type, family.no_capture)
    reason = HOST_COPIES.get((node.domain, node.op_type, spec.since_version))
    if reason:
        return CaptureSupport.no("{}: {}", node.op_type, reason)
    for i in spec.host_inputs:
        value = node.inputs[i] if i < len(node.inputs) else None
        if value is not None and not value.is_constant:
            return CaptureSupport.no("{}: needs host input {!r} at run time", node.op_type,
                                     value.name)
    if node.op_type == "MaxPool" and len(node.outputs) > 1 and node.outputs[1] is not None:
        return CaptureSupport.no("MaxPool: copies its tap table to the device on every run "
                                 "when it returns indices")
    return CaptureSupport.yes()
