"""Prepacked constants shared between kernels and sessions (``share_prepacked=True``): a
process-wide container of the states kernels built from constant inputs, keyed by device,
packing key and the inputs' contents, and of the constants themselves, keyed by device and
contents; each kept only while a session that uses it lives.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_host.errors import KernelError
from ep_host.plugin_calls import provider_fault

if TYPE_CHECKING:
    from ep_host.graph import NodeView, ValueView
    from ep_host.kernel import Kernel


SHARED_CONSTANT_BYTES = 4096
"""Constants from this size on are shared by contents; smaller ones are not worth a look-up."""


class SharedState:
    """One shared state; the sessions that use it hold this, the container only a weak
    reference, so the state dies with the last session."""

    __slots__ = ("state", "__weakref__")

    def __init__(self, state: Any):
        self.state = state


def content_identity(array: Any) -> tuple[str, tuple[int, ...], str]:
    """A constant's identity by content: its dtype, shape and the SHA-256 of its bytes (two
    sessions of one file read equal bytes into different arrays)."""
    array = np.asarray(array)
    data = np.ascontiguousarray(array)
    if data.dtype.hasobject:  # strings: hash their text, in order
        digest = hashlib.sha256("\0".join(map(str, data.ravel())).encode("utf-8", "replace"))
    else:
        digest = hashlib.sha256(memoryview(data.reshape(-1).view(np.uint8)))
    return array.dtype.str, tuple(array.shape), digest.hexdigest()


class PrepackedContainer:
    """Shared states by key; :meth:`share` returns the state already held under a key, or
    holds the one offered."""

    def __init__(self) -> None:
        self._held: weakref.WeakValueDictionary[Hashable, SharedState] = (
            weakref.WeakValueDictionary())
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> SharedState | None:
        """The holder under ``key``, if a live session holds one."""
        return self._held.get(key)

    def share(self, key: Hashable, state: Any) -> tuple[SharedState, bool]:
        """The holder under ``key`` and ``True`` when another kernel offered it first; else a
        new holder of ``state`` and ``False``. Keep the holder as long as the state is used."""
        with self._lock:
            found = self._held.get(key)
            if found is not None:
                return found, True
            held = self._held[key] = SharedState(state)
            return held, False

    def __len__(self) -> int:
        return len(self._held)


SHARED_PREPACKED = PrepackedContainer()
"""The process's container, which every session with ``share_prepacked=True`` uses."""


@dataclass(frozen=True, slots=True)
class PrepackedUse:
    """A prepacked state a kernel offered: the node, its provider, the packing key, whether the
    kernel adopted a state another kernel had shared (``False``: it shared its own), and the
    holder that keeps the state alive in the process-wide container."""

    node: str
    provider: str
    key: str
    adopted: bool
    held: SharedState


def offer_prepacked(container: PrepackedContainer, kernel: Kernel, node: NodeView,
                    provider: str, device: str,
                    identity: Callable[[ValueView], tuple[str, tuple[int, ...], str]],
                    label: str) -> list[PrepackedUse]:
    """Offer each state ``kernel`` built from constants (``Kernel.prepacked``) to ``container``
    under (device, packing key, input indices, the inputs' ``identity``); where another kernel
    offered one first, ``kernel`` adopts it. A wrong offer or a failing call is the provider's
    fault: a :class:`KernelError` naming it and the node."""
    uses = []
    with provider_fault(label, provider, f"share the prepacked state of node {node.name!r}",
                        passes=(KernelError,)):
        for key, (indices, state) in dict(kernel.prepacked()).items():
            indices = tuple(indices)
            if not isinstance(key, str) or not indices or not all(
                    type(i) is int and 0 <= i < len(node.inputs) and node.inputs[i] is not None
                    and node.inputs[i].is_constant for i in indices):
                raise KernelError(
                    f"{label}: provider {provider!r} offered prepacked state {key!r} of node "
                    f"{node.name!r} built from inputs {list(indices)}: the key must be a "
                    "string and the inputs constant inputs of the node")
            contents = tuple(identity(node.inputs[i]) for i in indices)
            held, adopted = container.share((device, key, indices, contents), state)
            if adopted:
                kernel.adopt_prepacked(key, held.state)
            uses.append(PrepackedUse(node.name, provider, key, adopted, held))
    return uses
