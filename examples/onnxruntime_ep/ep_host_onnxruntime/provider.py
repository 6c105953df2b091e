"""The onnxruntime EP's hooks: it claims what onnxruntime's CPUExecutionProvider can build a
session for (asked of onnxruntime itself, per op signature), prices it by a roofline from this
machine's measured onnxruntime figures, and runs nodes or whole partitions in onnxruntime.
"""

from __future__ import annotations

from ep_host import (
    Cost,
    Decline,
    Kernel,
    KernelMatch,
    NodeView,
    PartitionView,
    ProviderContext,
    ProviderInfo,
    hookimpl,
)
from ep_host.kernels import REGISTRY, calibrated_roofline, output_elements, traffic_bytes
from ep_host_onnxruntime import __version__, runtime
from ep_host_onnxruntime.probe import Verdicts
from ep_host_onnxruntime.profile import RuntimeProfile, runtime_profile
from ep_host_onnxruntime.sessions import NodeSessionKernel, PartitionSessionKernel

NAME = "onnxruntime"
VERDICTS = Verdicts()


def estimate(node: NodeView, profile: RuntimeProfile) -> Cost:
    """A roofline at this machine's measured onnxruntime figures: the kernel library's flops,
    bytes and ``conv_kind`` where it has the op (scaled by the factors ``ep-host calibrate``
    fitted for its family), else one flop per output element and the bytes of its inputs and
    outputs. The call into onnxruntime is paid once per partition
    (``ProviderInfo.partition_launch_us``), not per node."""
    try:
        spec = REGISTRY.lookup(node, NAME)
    except Decline:
        return Cost.roofline(flops=output_elements(node), bytes_moved=traffic_bytes(node),
                             peak_gflops=profile.peak_gflops,
                             bandwidth_gbps=profile.bandwidth_gbps)
    return calibrated_roofline(spec, node, NAME, profile)


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    missing = runtime.import_error()
    if missing is not None:
        return ProviderInfo(name=NAME, version=__version__, available=False, reason=missing)
    return ProviderInfo(
        name=NAME, version=__version__, aliases=("ort",),
        partition_launch_us=runtime_profile().call_overhead_us, applies_calibration=True,
        answers_by_signature=True,
        description=f"onnxruntime {runtime.version()} CPUExecutionProvider: one session per "
                    "node, or one per compiled partition",
    )


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    verdict = VERDICTS.verdict(node)
    if not verdict.supported:
        return KernelMatch.unsupported(verdict.reason, code=verdict.code)
    return KernelMatch.supported(estimate(node, runtime_profile()))


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    return NodeSessionKernel(node, context)


@hookimpl
def ep_host_compile_partition(partition: PartitionView, context: ProviderContext) -> Kernel:
    return PartitionSessionKernel(partition, context)
