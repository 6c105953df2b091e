"""The CPU EP's hooks: claims exactly what its registry computes, priced by a roofline."""

from __future__ import annotations

from ep_host import (
    Cost,
    Kernel,
    KernelMatch,
    NodeView,
    ProviderContext,
    ProviderInfo,
    hookimpl,
    structural_input_bytes,
)
from ep_host_cpu import __version__
from ep_host_cpu.kernels import REGISTRY
from ep_host_cpu.profile import machine_profile
from ep_host_cpu.registry import KernelSpec, check_node
from ep_host_cpu.xp import numpy_xp

NAME = "CPU EP"


def output_elements(node: NodeView) -> int:
    total = 0
    for v in node.outputs:
        if v is not None and v.shape is not None:
            n = 1
            for d in v.shape:
                n *= d if isinstance(d, int) and d >= 0 else 1
            total += n
    return total


def traffic_bytes(node: NodeView) -> int:
    values = [v for v in (*node.inputs, *node.outputs) if v is not None]
    return structural_input_bytes([v.shape for v in values], [v.dtype for v in values])


def estimate(spec: KernelSpec, node: NodeView) -> Cost:
    profile = machine_profile()
    flops = spec.flops(node) if spec.flops is not None else output_elements(node)
    nbytes = spec.bytes(node) if spec.bytes is not None else traffic_bytes(node)
    return Cost.roofline(
        flops=flops,
        bytes_moved=nbytes,
        peak_gflops=profile.peak_gflops,
        bandwidth_gbps=profile.bandwidth_gbps,
        launch_us=2 * profile.dispatch_us,  # the numpy call plus the kernel wrapper
    )


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    return ProviderInfo(name="cpu", version=__version__, description="numpy kernels on the host")


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    spec = REGISTRY.lookup(node, NAME)
    check_node(spec, node, NAME)
    return KernelMatch.supported(estimate(spec, node), host_inputs=spec.host_inputs)


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    spec = REGISTRY.lookup(node, NAME)
    check_node(spec, node, NAME)
    return spec.make(numpy_xp, node)
