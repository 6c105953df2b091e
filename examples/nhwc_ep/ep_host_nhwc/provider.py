"""The NHWC EP's hooks: float32 Conv, pools and a few layout-agnostic ops on 4-D tensors, each
claimed with every activation in NHWC (weights and biases in the model's layout).

It imports only what ``ep_host`` exports at its top level, as any third-party provider must.
Its cost figures are modest unless the provider options ``gflops`` and ``bandwidth_gbps`` (or,
for the command line, ``EP_HOST_NHWC_GFLOPS`` and ``EP_HOST_NHWC_BANDWIDTH_GBPS``) say otherwise
(an accelerator's figures), so by default the CPU EP keeps every node.
"""

from __future__ import annotations

import math
import os

from ep_host import (
    Cost,
    Kernel,
    KernelMatch,
    NodeView,
    ProviderContext,
    ProviderInfo,
    deny,
    hookimpl,
    require,
)
from ep_host_nhwc import __version__
from ep_host_nhwc.kernels import (
    AveragePoolNHWC,
    ConcatNHWC,
    ConvNHWC,
    GlobalAveragePoolNHWC,
    MaxPoolNHWC,
    ReluNHWC,
    SumNHWC,
)

NAME = "nhwc"
LAYOUT = "NHWC"
AXIS_IN_NHWC = (0, 3, 1, 2)  # where each axis of the model's NCHW layout is in NHWC
OPS = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "Relu", "Add", "Sum", "Concat")
CLAIMS = "float32 " + ", ".join(OPS) + " on 4-D tensors"
WINDOWED = ("Conv", "MaxPool", "AveragePool")

PEAK_GFLOPS = 1.0
BANDWIDTH_GBPS = 2.0
LAUNCH_US = 50.0


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    return ProviderInfo(name=NAME, version=__version__,
                        description=f"example NHWC EP: {CLAIMS}, computed channels last",
                        answers_by_signature=True)


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    require(node.domain == "ai.onnx" and node.op_type in OPS,
            "{}: the NHWC EP runs only {}", node.qualified_op, CLAIMS, code="op")
    x = node.inputs[0]
    require(x is not None and x.dtype is not None and x.dtype.name == "float32",
            "{}: the NHWC EP takes float32 input, got {}", node.qualified_op,
            "an unknown type" if x is None or x.dtype is None else x.dtype.name, code="dtype")
    require(x.rank == 4 and node.outputs[0] is not None and node.outputs[0].rank == 4,
            "{}: the NHWC EP takes 4-D tensors, got rank {} for {!r}", node.qualified_op,
            x.rank, x.name, code="shape")
    if node.op_type in WINDOWED:
        window_checks(node)
    if node.op_type in ("Add", "Sum", "Concat"):
        require(all(v is not None and v.rank == 4 for v in node.inputs),
                "{}: the NHWC EP needs every input 4-D (NHWC broadcasting), got ranks {}",
                node.qualified_op, [None if v is None else v.rank for v in node.inputs],
                code="shape")
        layouts = [LAYOUT] * len(node.inputs)
    elif node.op_type == "Conv":
        layouts = [LAYOUT]  # the weight and bias stay in the model's layout
    else:
        layouts = [LAYOUT]
    return KernelMatch.supported(estimate(node, context), required_input_layouts=layouts,
                                 output_layouts=[LAYOUT])


def window_checks(node: NodeView) -> None:
    attributes = node.attributes
    if node.op_type == "Conv":
        weight = node.inputs[1]
        require(weight is not None and weight.rank == 4,
                "Conv: the NHWC EP needs a 4-D weight, got {}", None if weight is None
                else weight.rank, code="shape")
    require(len(node.outputs) == 1 or all(v is None for v in node.outputs[1:]),
            "{}: the NHWC EP computes no Indices output", node.qualified_op, code="op")
    require(not attributes.get("ceil_mode"), "{}: the NHWC EP implements ceil_mode=0 only",
            node.qualified_op, code="attribute")
    require(attributes.get("auto_pad", "NOTSET") in ("NOTSET", "VALID", "SAME_UPPER",
                                                      "SAME_LOWER"),
            "{}: unknown auto_pad {!r}", node.qualified_op, attributes.get("auto_pad"),
            code="attribute")
    if node.op_type == "AveragePool":
        require(not attributes.get("dilations") or set(attributes["dilations"]) == {1},
                "AveragePool: the NHWC EP implements no dilations", code="attribute")
    if node.op_type == "Conv":
        x = node.inputs[0]
        channels = x.shape[1]
        require(isinstance(channels, int), "Conv: the NHWC EP needs a static channel count",
                code="shape")
        require(channels % int(attributes.get("group", 1)) == 0,
                "Conv: {} channels do not split into {} groups", channels,
                attributes.get("group", 1), code="attribute")


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    # the host hands this kernel NHWC shapes: [N, H, W, C]
    x = node.inputs[0]
    spatial = x.shape[1:3]
    op = node.op_type
    attributes = node.attributes
    if op == "Conv":
        kernel = attributes.get("kernel_shape") or node.inputs[1].shape[2:]
        return ConvNHWC(attributes, kernel, spatial)
    if op == "MaxPool":
        return MaxPoolNHWC(attributes, spatial)
    if op == "AveragePool":
        return AveragePoolNHWC(attributes, spatial)
    if op == "GlobalAveragePool":
        return GlobalAveragePoolNHWC()
    if op == "Relu":
        return ReluNHWC()
    if op in ("Add", "Sum"):
        return SumNHWC()
    if op == "Concat":
        return ConcatNHWC(AXIS_IN_NHWC[attributes["axis"] % 4])
    deny("{}: not an op of the NHWC EP", op)


def estimate(node: NodeView, context: ProviderContext) -> Cost:
    """A roofline at the provider options' figures (modest ones by default)."""
    out = node.outputs[0]
    elements = math.prod(d for d in out.shape if isinstance(d, int) and d > 0)
    if node.op_type == "Conv":
        weight = node.inputs[1].shape
        per_output = math.prod(d for d in weight[1:] if isinstance(d, int) and d > 0)
        flops = 2 * elements * per_output
    elif node.op_type in ("MaxPool", "AveragePool"):
        flops = elements * math.prod(node.attributes["kernel_shape"])
    else:
        flops = elements * max(1, len(node.inputs))
    nbytes = sum(v.nbytes for v in (*node.inputs, *node.outputs) if v is not None)
    return Cost.roofline(flops=flops, bytes_moved=nbytes,
                         peak_gflops=figure(context, "gflops", PEAK_GFLOPS),
                         bandwidth_gbps=figure(context, "bandwidth_gbps", BANDWIDTH_GBPS),
                         launch_us=LAUNCH_US)


def figure(context: ProviderContext, name: str, default: float) -> float:
    """A cost figure: the provider option ``name``, else ``EP_HOST_NHWC_<NAME>``, else
    ``default``."""
    value = context.options.get(name) or os.environ.get(f"EP_HOST_NHWC_{name.upper()}")
    return default if value is None else float(value)
