"""Prepacked constants shared between kernels and sessions (``share_prepacked=True``): a
process-wide container of the states kernels built from constant inputs, keyed by device,
packing key and the inputs' contents, and of the constants themselves, keyed by device and
contents; each kept only while a session that uses it lives.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from collections.abc import Hashable
from typing import Any

import numpy as np


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
