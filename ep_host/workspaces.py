"""Kernels' workspaces: what a kernel asks for (``Kernel.workspace``), checked, and the memory
allocated for it on the kernel's device."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ep_host.errors import KernelError, ResourceLimitError, describe_exception
from ep_host.kernel import WORKSPACE_LIFETIMES, Kernel, Workspace
from ep_host.plugin_calls import is_user_interrupt, provider_fault, sigint

if TYPE_CHECKING:
    from ep_host.graph import NodeView
    from ep_host.provider import Device


def asked_workspace(kernel: Kernel, node: NodeView, provider: str, label: str,
                    limit: int | None) -> Workspace | None:
    """The :class:`Workspace` ``kernel`` asks for, given its node's input types, or ``None``.
    A failing call or a request that is no valid ``Workspace`` is the provider's fault (a
    :class:`KernelError` naming it and the node); one over ``limit`` bytes is refused."""
    if type(kernel).workspace is Kernel.workspace:
        return None
    meta = tuple(None if v is None else (None if v.dtype is None else v.dtype.numpy, v.shape)
                 for v in node.inputs)
    with provider_fault(label, provider, f"state the workspace of node {node.name!r}"):
        asked = kernel.workspace(meta)
    if asked is None:
        return None
    if not isinstance(asked, Workspace) or type(asked.nbytes) is not int or (
            asked.nbytes < 0 or asked.lifetime not in WORKSPACE_LIFETIMES):
        raise KernelError(
            f"{label}: provider {provider!r} asked for workspace {asked!r} for node "
            f"{node.name!r}; expected a Workspace of nbytes >= 0 and lifetime "
            f"{' or '.join(map(repr, WORKSPACE_LIFETIMES))}")
    if limit is not None and asked.nbytes > limit:
        raise ResourceLimitError(
            f"{label}: provider {provider!r} asked for a workspace of {asked.nbytes} bytes for "
            f"node {node.name!r}, over the limit of {limit} "
            "(max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")
    return asked


def allocate_workspace(device: Device, nbytes: int, node: NodeView, label: str) -> Any:
    """``nbytes`` on ``device`` for ``node``'s kernel; the device's failure names it."""
    since = sigint.received
    try:
        return device.allocate(nbytes)
    except BaseException as exc:  # the device's allocator is provider code
        if is_user_interrupt(exc, since) or isinstance(exc, MemoryError):
            raise
        raise KernelError(
            f"{label}: device {device.name} failed to allocate a workspace of {nbytes} bytes "
            f"for node {node.name!r}: {describe_exception(exc)}") from exc
