"""The CPU EP's hooks: claims exactly what its registry computes, priced by a roofline."""

from __future__ import annotations

import weakref
from typing import Any

from ep_host import (
    Cost,
    Factors,
    Kernel,
    KernelMatch,
    NodeView,
    ProviderContext,
    ProviderInfo,
    family_factors,
    hookimpl,
    known_signature,
)
from ep_host.kernels import REGISTRY, KernelSpec, check_node, conv_kind, work
from ep_host_cpu import __version__
from ep_host_cpu.allocator import keep_freed_memory
from ep_host_cpu.profile import MachineProfile, machine_profile
from ep_host_cpu.xp import numpy_xp

NAME = "CPU EP"


def roofline(flops: float, nbytes: int, profile: MachineProfile,
             conv: str | None = None) -> Cost:
    """Flops at the GFLOP/s measured for this kind of convolution (``conv_kind``), else at
    GEMM peak; bytes at the measured bandwidth; two dispatches."""
    return Cost.roofline(
        flops=flops,
        bytes_moved=nbytes,
        peak_gflops=profile.conv_gflops(conv),
        bandwidth_gbps=profile.bandwidth_gbps,
        launch_us=2 * profile.dispatch_us,  # the numpy call plus the kernel wrapper
    )


def calibrated(cost: Cost, factors: Factors | None) -> Cost:
    """``overhead + scale * total``: compute, memory and launch scale, the overhead adds."""
    if factors is None:
        return cost
    return cost.scaled(factors.scale, factors.overhead_us)


def node_factors(spec: KernelSpec, calibration: dict[str, Factors] | None) -> Factors | None:
    """The factors ``ep-host calibrate`` measured for the op family ``spec`` declares, if any."""
    if not calibration or spec.family is None:
        return None
    return calibration.get(spec.family)


class Claims:
    """The answer for a claimed node, shared by every node of the same work.

    A claim's ``Cost`` depends only on (flops, bytes, machine profile, the op family's
    calibrated factors) and its ``KernelMatch`` adds only the spec's host inputs; both are
    immutable, so nodes that repeat a size (most of a model's) share one instead of each
    building and validating its own. A new machine
    profile or calibration starts afresh; the table is cleared when it reaches ``limit`` entries.
    """

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self.profile: MachineProfile | None = None
        self.calibration: dict[str, Factors] | None = None
        self.answers: dict[tuple[Any, ...], KernelMatch] = {}

    def answer(self, spec: KernelSpec, node: NodeView) -> KernelMatch:
        profile = machine_profile()
        calibration = family_factors("cpu")
        if profile is not self.profile or calibration is not self.calibration:
            self.profile, self.calibration, self.answers = profile, calibration, {}
        flops, nbytes = work(spec, node)
        factors = node_factors(spec, calibration)
        conv = conv_kind(spec, node)
        key = (flops, nbytes, spec.host_inputs, factors, conv)
        answer = self.answers.get(key)
        if answer is None:
            cost = roofline(flops, nbytes, profile, conv)
            answer = KernelMatch.supported(calibrated(cost, factors),
                                           host_inputs=spec.host_inputs)
            if len(self.answers) >= self.limit:
                self.answers.clear()
            self.answers[key] = answer
        return answer


CLAIMS = Claims()


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    # this machine's figures, measured once (a second or more the first time: numba's first
    # compiles included) here rather than in the first supports_op, which has a time limit
    machine_profile()
    return ProviderInfo(name="cpu", version=__version__, description="numpy kernels on the host",
                        aliases=("CPUExecutionProvider",), applies_calibration=True,
                        answers_by_signature=True)


# per signature, the kernel spec its node passed its checks for in supports_op, with the answer
# it got (this EP answers by signature: its checks and its price read nothing else); per node,
# the spec of one that has no signature kept (a node holding a graph). Creating the kernel of
# such a node, or of another node of that signature, does not check again (a tree ensemble's
# checks walk every tree, a millisecond or more; a Conv's take 20 us), nor does a later
# session's walk ask again what a node of that signature costs
_CHECKED: weakref.WeakKeyDictionary[NodeView, KernelSpec] = weakref.WeakKeyDictionary()
# (spec, answer, the machine profile and calibration that priced it: a new one prices afresh)
_CHECKED_SIGNATURES: dict[tuple[Any, ...], tuple[KernelSpec, KernelMatch, Any, Any]] = {}
SIGNATURES_KEPT = 8192  # SSD-lite asks about 1,511


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    spec = REGISTRY.lookup(node, NAME)
    signature = known_signature(node)
    profile, calibration = machine_profile(), family_factors("cpu")
    if signature is not None:
        kept = _CHECKED_SIGNATURES.get(signature)
        if (kept is not None and kept[0] is spec and kept[2] is profile
                and kept[3] is calibration):
            return kept[1]
    check_node(spec, node, NAME)
    answer = CLAIMS.answer(spec, node)
    if signature is None:
        _CHECKED[node] = spec
        return answer
    if len(_CHECKED_SIGNATURES) >= SIGNATURES_KEPT:  # the oldest go (walks on threads too)
        _CHECKED_SIGNATURES.pop(next(iter(_CHECKED_SIGNATURES), None), None)
    _CHECKED_SIGNATURES[signature] = spec, answer, profile, calibration
    return answer


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    spec = REGISTRY.lookup(node, NAME)
    if _CHECKED.get(node) is not spec and _checked_signature(node) is not spec:
        check_node(spec, node, NAME)
    keep_freed_memory()  # once per process, when kernels are first made, not at import
    return spec.make(numpy_xp, node, context)


def _checked_signature(node: NodeView) -> KernelSpec | None:
    signature = known_signature(node)
    kept = None if signature is None else _CHECKED_SIGNATURES.get(signature)
    return None if kept is None else kept[0]
