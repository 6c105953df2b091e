"""The example EP's hooks: com.example::FastSwish, plus float32 Relu and Sigmoid, on the host.

It imports only what ``ep_host`` exports at its top level, as any third-party provider must.
Its cost figures are fixed and deliberately modest, so a general provider such as ``cpu`` wins
the standard ops and this one runs what nobody else can.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ep_host import (
    Cost,
    FunctionKernel,
    Kernel,
    KernelMatch,
    NodeView,
    ProviderContext,
    ProviderInfo,
    deny,
    hookimpl,
    require,
    structural_input_bytes,
)
from ep_host_example import __version__

NAME = "example"
CUSTOM_DOMAIN = "com.example"

# The cost model: a roofline from fixed figures instead of measured ones.
PEAK_GFLOPS = 1.0
BANDWIDTH_GBPS = 2.0
LAUNCH_US = 20.0


# ---------------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------------


def sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-|x|) never overflows; both branches equal 1 / (1 + exp(-x)).
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0)


class FastSwishKernel(Kernel):
    """com.example::FastSwish: ``x * sigmoid(x)``, elementwise."""

    def run(self, x: np.ndarray) -> tuple[np.ndarray]:
        return (x * sigmoid(x),)


@dataclass(frozen=True)
class Op:
    """One op this EP runs: the versions it implements, its work, how to build its kernel."""

    versions: tuple[int, ...]
    flops_per_element: int
    make_kernel: Callable[[], Kernel]


OPS = {
    (CUSTOM_DOMAIN, "FastSwish"): Op((1,), 4, FastSwishKernel),
    ("ai.onnx", "Relu"): Op((6, 13, 14), 1, lambda: FunctionKernel(relu, name="Relu")),
    ("ai.onnx", "Sigmoid"): Op((6, 13), 4, lambda: FunctionKernel(sigmoid, name="Sigmoid")),
}
CLAIMS = "com.example::FastSwish (version 1) and float32 Relu and Sigmoid"


# ---------------------------------------------------------------------------------------------
# Hooks
# ---------------------------------------------------------------------------------------------


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    return ProviderInfo(
        name=NAME, version=__version__, description=f"example third-party EP: {CLAIMS}",
        # a claim depends only on the op, dtypes and shapes: asked once per signature
        answers_by_signature=True,
    )


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    op = OPS.get((node.domain, node.op_type))
    if op is None:
        deny("{}: the example EP runs only {}; leave this node to another provider such as cpu",
             node.qualified_op, CLAIMS, code="op")
    version = op_version(node, context)
    require(version in op.versions,
            "{}: the model's opset resolves to version {}; the example EP implements {}",
            node.qualified_op, version, ", ".join(map(str, op.versions)), code="opset")
    if node.domain == CUSTOM_DOMAIN:
        require(len(node.inputs) == 1 and len(node.outputs) == 1,
                "{}: takes one input and one output, got {} and {}", node.qualified_op,
                len(node.inputs), len(node.outputs), code="op")
        require(not node.attributes, "{}: takes no attributes, got {}", node.qualified_op,
                ", ".join(node.attributes), code="attribute")
    x = node.inputs[0]
    require(x is not None and x.dtype is not None,
            "{}: the type of its input is unknown; declare it (value_info) so the example EP "
            "can check that it is float32", node.qualified_op, code="dtype")
    require(x.dtype.name == "float32",
            "{}: the example EP takes float32 input, got {} for {!r}; cast it to float32 or "
            "leave the node to another provider", node.qualified_op, x.dtype.name, x.name,
            code="dtype")
    return KernelMatch.supported(estimate(node, op.flops_per_element))


@hookimpl
def ep_host_infer_types(node: NodeView, context: ProviderContext) -> list[tuple] | None:
    """FastSwish keeps its input's type and shape; onnx's inference cannot know that."""
    if (node.domain, node.op_type) != (CUSTOM_DOMAIN, "FastSwish") or len(node.inputs) != 1:
        return None
    x = node.inputs[0]
    if x is None or x.dtype is None:
        return None
    return [(x.dtype, x.shape)]


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    return OPS[(node.domain, node.op_type)].make_kernel()


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------


def op_version(node: NodeView, context: ProviderContext) -> int | None:
    """The op's version: its schema's ``since_version``, or for the custom domain (which has
    no ONNX schema) the model's opset import for that domain."""
    if node.domain == CUSTOM_DOMAIN:
        return context.opset_imports.get(CUSTOM_DOMAIN)
    return node.since_version


def estimate(node: NodeView, flops_per_element: int) -> Cost:
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    shape = node.outputs[0].shape or ()
    elements = math.prod(d for d in shape if isinstance(d, int) and d >= 0)
    return Cost.roofline(
        flops=flops_per_element * elements,
        bytes_moved=structural_input_bytes([v.shape for v in values], [v.dtype for v in values]),
        peak_gflops=PEAK_GFLOPS,
        bandwidth_gbps=BANDWIDTH_GBPS,
        launch_us=LAUNCH_US,
    )
