"""The OpenVINO EP's hooks: claims what OpenVINO itself computed in a probe, prices it with a
measured roofline, runs single nodes and compiles partitions with OpenVINO's CPU plugin.

It imports only what ``ep_host`` exports at its top level and the kernel library, as any
third-party provider must.
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
    deny,
    hookimpl,
    node_model,
)
from ep_host.kernels import REGISTRY, calibrated_roofline, traffic_bytes
from ep_host_openvino import __version__
from ep_host_openvino.probe import VerdictCache
from ep_host_openvino.profile import OpenVinoProfile, openvino_profile
from ep_host_openvino.runtime import (
    INSTALL_HINT,
    CompiledModelKernel,
    CompileError,
    compile_model,
    trimmed_message,
    version,
)

NAME = "openvino"
VERDICTS = VerdictCache()


def threads(context: ProviderContext) -> int:
    """The CPU plugin's inference threads: the provider option ``intra_op_num_threads``, else the
    session's thread count (``ProviderContext.intra_op_num_threads``, where the host sets it),
    else 1."""
    if "intra_op_num_threads" in context.options:
        return int(context.options["intra_op_num_threads"])
    return int(getattr(context, "intra_op_num_threads", 0) or 1)


def estimate(node: NodeView, profile: OpenVinoProfile) -> Cost:
    """A roofline: the kernel library's flops, bytes and ``conv_kind`` where it has the op
    (scaled by the factors ``ep-host calibrate`` fitted for its family), else the bytes of the
    node's inputs and outputs. OpenVINO's per-call overhead is paid once per partition
    (``ProviderInfo.partition_launch_us``), not per node."""
    try:
        spec = REGISTRY.lookup(node, NAME)
    except Decline:
        return Cost.roofline(flops=0, bytes_moved=traffic_bytes(node),
                             peak_gflops=profile.peak_gflops,
                             bandwidth_gbps=profile.bandwidth_gbps)
    return calibrated_roofline(spec, node, NAME, profile)


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    runtime_version = version()
    if runtime_version is None:
        return ProviderInfo(name=NAME, version=__version__, available=False, reason=INSTALL_HINT)
    return ProviderInfo(name=NAME, version=__version__,
                        description=f"OpenVINO {runtime_version}, CPU plugin, compiles partitions",
                        aliases=("OpenVINOExecutionProvider",),
                        partition_launch_us=openvino_profile().call_overhead_us,
                        applies_calibration=True, answers_by_signature=True)


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    verdict = VERDICTS.verdict(node, context.opset_imports.get(node.domain))
    if not verdict.supported:
        deny("{}", verdict.reason, code=verdict.code)
    return KernelMatch.supported(estimate(node, openvino_profile()))


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    model = node_model(node)
    feed_names = [i.name for i in model.graph.input]
    positions = {}
    for index, value in enumerate(node.inputs):
        if value is not None and not value.is_constant:
            positions.setdefault(value.name, index)
    outputs = [v for v in node.outputs if v is not None]
    try:
        compiled = compile_model(model.SerializeToString(), threads(context))
    except Exception as error:  # OpenVINO raises RuntimeError and its own types alike
        raise CompileError(f"OpenVINO could not compile {node.qualified_op} {node.name!r}: "
                           f"{trimmed_message(error)}") from error
    return CompiledModelKernel(compiled, [positions[name] for name in feed_names],
                               [v.dtype.numpy if v.dtype else None for v in outputs],
                               name=f"{node.qualified_op} {node.name}",
                               omitted_outputs=[i for i, v in enumerate(node.outputs) if v is None])


@hookimpl
def ep_host_compile_partition(partition: PartitionView, context: ProviderContext) -> Kernel:
    try:
        compiled = compile_model(partition.to_model().SerializeToString(), threads(context))
    except Exception as error:  # OpenVINO raises RuntimeError and its own types alike
        members = ", ".join(n.name or n.op_type for n in partition.nodes)
        raise CompileError(f"OpenVINO could not compile partition {partition.name!r} "
                           f"({members}): {trimmed_message(error)}") from error
    return CompiledModelKernel(compiled, range(len(partition.inputs)),
                               [v.dtype.numpy if v.dtype else None for v in partition.outputs],
                               name=f"partition {partition.name}")
