"""Weights freed once their kernels packed them (``Kernel.released``), as onnxruntime frees a
prepacked weight: a GEMM kernel that packed its weight for its library reads only the packed
copy, and the original's pages go back to the system instead of staying beside it (BERT-base's
340 MB of MatMul weights). Each is freed as soon as its last reader is prepared, so the weights
and their packed copies are never all in memory at once.

The host frees a weight only where nothing can read it again by mistake: the session loaded the
model file itself (nobody else holds the model) and shares no constants with other sessions;
the weight lies in the model's held buffer (:mod:`ep_host.held_weights`) and no other constant
views its memory (a rewrite's folded ``Identity`` of it); it is no graph output and no
control-flow body captures it; and every node reading it is a step of its own whose kernel
released that input, reading the weight's own slot. Its slot then holds a stand-in of its dtype
and shape (NaN for floats, no memory), and a later read through the model (a plan made again
after an isolated provider was lost) reads the data from the file again.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_host.plugin_calls import provider_fault
from ep_host.provider import HOST

if TYPE_CHECKING:
    from ep_host.graph import GraphView, NodeView
    from ep_host.kernel import Kernel
    from ep_host.loading import Model


def stand_in(array: np.ndarray) -> np.ndarray:
    """A read-only array of ``array``'s dtype and shape that holds no memory: NaN for floats,
    zero otherwise."""
    fill = np.nan if array.dtype.kind in "fc" else 0
    return np.broadcast_to(np.full((), fill, array.dtype), array.shape)


class WeightFreeing:
    """The weights of one plan's graph that may be freed, and each one's readers not yet
    prepared; :meth:`prepared` after each kernel's ``prepare``."""

    def __init__(self, model: Model, graph: GraphView, nodes: Iterable[NodeView], label: str):
        self.model, self.label = model, label
        self.freed: list[tuple[str, int]] = []  # (name, bytes given back)
        self.left: dict[str, int] = {}  # weight -> readers not yet prepared
        held = model.held
        if held is None or held.origin is None:
            return
        left = dict.fromkeys(held.spans, 0)
        for node in nodes:
            for value in node.inputs:
                if value is not None and value.name in left:
                    left[value.name] += 1
            if node.has_subgraphs:
                for sub in node.subgraphs.values():
                    for name in sub.outer_names() & left.keys():
                        left[name] = -1  # a body reads it: never freed
        for value in graph.outputs:
            left.pop(value.name, None)
        self.left = {name: n for name, n in left.items() if n > 0}
        self._shared: set[str] | None = None  # found at the first weight to free

    def prepared(self, node: NodeView, kernel: Kernel, provider: str, in_slots: Sequence[int],
                 slots: Mapping[tuple[str, str, str | None], int],
                 constants: MutableMapping[int, Any]) -> None:
        """Count ``node``'s reads of weights that its prepared ``kernel`` released (through
        the weight's own host slot, among ``in_slots``); free each weight whose last reader
        this was, putting its stand-in in ``constants``."""
        with provider_fault(self.label, provider,
                            f"say which inputs the kernel for node {node.name!r} released"):
            released = {int(i) for i in kernel.released()}  # an index said twice counts once
        for i in sorted(released):
            value = node.inputs[i] if 0 <= i < len(node.inputs) else None
            if value is None or value.name not in self.left:
                continue
            s = slots.get((value.name, HOST.name, None))
            if s is None or in_slots[i] != s:
                continue
            self.left[value.name] -= 1
            if self.left[value.name] == 0:
                del self.left[value.name]
                self._free(value.name, s, constants)

    def _free(self, name: str, s: int, constants: MutableMapping[int, Any]) -> None:
        held = self.model.held
        if self._shared is None:
            self._shared = _shared_spans(held, self.model.constants_read())
        array, (offset, length) = constants.get(s), held.spans[name]
        if (name in self._shared or type(array) is not np.ndarray or array.nbytes != length
                or array.ctypes.data != held.buffer.ctypes.data + offset):
            return  # not the held data itself
        n = held.release(name)
        if n:
            constants[s] = stand_in(array)
            self.freed.append((name, n))


def _shared_spans(held: Any, arrays: Iterable[tuple[str, Any]]) -> set[str]:
    """The held tensors whose memory an array other than their own data views (a rewrite's
    ``Identity`` or ``Reshape`` of a weight, folded into a view of it, under another name)."""
    base = held.buffer.ctypes.data
    end = base + held.buffer.nbytes
    spans = sorted((offset, offset + length, name) for name, (offset, length) in held.spans.items())
    starts = [span[0] for span in spans]
    shared: set[str] = set()
    for name, array in arrays:
        if type(array) is not np.ndarray or array.size == 0:
            continue
        lo, hi = _byte_bounds(array)
        if hi <= base or lo >= end:
            continue
        lo, hi = lo - base, hi - base
        own = held.spans.get(name)
        if own is not None and (own[0], own[0] + own[1]) == (lo, hi):
            continue  # the tensor's own data
        k = max(bisect_right(starts, lo) - 1, 0)
        while k < len(spans) and spans[k][0] < hi:
            if spans[k][1] > lo:
                shared.add(spans[k][2])
            k += 1
    return shared


def _byte_bounds(array: np.ndarray) -> tuple[int, int]:
    """The first and one past the last byte address ``array`` reads (any strides)."""
    lo = hi = array.ctypes.data
    for n, stride in zip(array.shape, array.strides, strict=True):
        if stride < 0:
            lo += stride * (n - 1)
        else:
            hi += stride * (n - 1)
    return lo, hi + array.itemsize
