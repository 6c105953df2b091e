"""The work a kernel does, for a provider's roofline: flops and bytes moved per node.

A spec's own ``flops``/``bytes`` estimate wins; otherwise one flop per output element and the
bytes of every input and output. The CPU and CUDA EPs price the same work at their own figures.
"""

from __future__ import annotations

from typing import Any

from ep_host import Cost, NodeView, element_count, family_factors
from ep_host.kernels.registry import KernelSpec


def output_elements(node: NodeView) -> int:
    """The elements of every output whose shape is known (counted by ``element_count``)."""
    return sum(element_count(v.shape) for v in node.outputs
               if v is not None and v.shape is not None)


def traffic_bytes(node: NodeView) -> int:
    """The bytes of every input and output (``ValueView.nbytes``, which counts as
    ``structural_input_bytes`` does and is computed once per value)."""
    total = 0
    for v in node.inputs:
        if v is not None:
            total += v.nbytes
    for v in node.outputs:
        if v is not None:
            total += v.nbytes
    return total


def work(spec: KernelSpec, node: NodeView) -> tuple[float, int]:
    """The node's flops and bytes moved, for the roofline."""
    flops = spec.flops(node) if spec.flops is not None else output_elements(node)
    nbytes = spec.bytes(node) if spec.bytes is not None else traffic_bytes(node)
    return flops, nbytes


def conv_kind(spec: KernelSpec, node: NodeView) -> str | None:
    """How a convolution's speed should be guessed: ``"grouped"`` (group > 1: depthwise and
    grouped convolutions, far from GEMM speed on CPUs), ``"pointwise"`` (a 1x1 window at stride
    1: one GEMM), ``"dense"`` (any other window); ``None`` for a node outside the ``conv``
    family. The cases a provider measures for each kind are ``timing.CONV_CASES``."""
    if spec.family != "conv":
        return None
    attrs = node.attributes
    if attrs.get("group", 1) != 1:
        return "grouped"
    w = node.inputs[1] if len(node.inputs) > 1 else None
    window = w.shape[2:] if w is not None and w.shape is not None else None
    strides = attrs.get("strides") or ()
    if window and all(d == 1 for d in window) and all(s == 1 for s in strides):
        return "pointwise"
    return "dense"


def calibrated_roofline(spec: KernelSpec, node: NodeView, provider: str, profile: Any) -> Cost:
    """The node's ``work`` as a roofline at ``profile``'s figures (``conv_gflops(conv_kind)``,
    ``bandwidth_gbps``: a ``timing.ConvSpeeds`` profile), scaled by the factors ``ep-host
    calibrate`` fitted for the spec's family on ``provider``."""
    flops, nbytes = work(spec, node)
    cost = Cost.roofline(flops=flops, bytes_moved=nbytes,
                         peak_gflops=profile.conv_gflops(conv_kind(spec, node)),
                         bandwidth_gbps=profile.bandwidth_gbps)
    factors = family_factors(provider).get(spec.family or "")
    return cost if factors is None else cost.scaled(factors.scale, factors.overhead_us)
