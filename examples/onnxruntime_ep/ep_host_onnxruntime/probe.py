"""Whether onnxruntime runs a node, asked of onnxruntime itself: a one-node session built with
graph optimizations off and one thread. Verdicts are cached per op signature (op, version,
input types and ranks, which inputs are constant and the values of small integer constants,
attributes), in memory and on disk per onnxruntime version, so a walk over a large graph builds
one probe session per distinct signature, once per machine.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ep_host import CacheDirStores, NodeView, PartitionView, ValueView
from ep_host_onnxruntime import runtime

# Constants onnxruntime reads as data (a Reshape's shape, Slice's starts): small integer
# tensors, whose values go into the signature. Larger or float constants count by type and rank.
SMALL_CONSTANT_ELEMENTS = 64
INTEGER_KINDS = "iub"
# The probe keeps constants up to this size as initializers and passes larger ones (weights) as
# graph inputs of the same type and shape, so that it never copies a model's weights.
PROBE_CONSTANT_ELEMENTS = 4096


@dataclass(frozen=True, slots=True)
class Verdict:
    """onnxruntime's answer for one signature: ``reason`` and ``code`` are empty when it can
    run nodes of that signature."""

    reason: str = ""
    code: str = ""

    @property
    def supported(self) -> bool:
        return not self.reason


SUPPORTED = Verdict()


def frozen(value: Any) -> Hashable:
    """An attribute or constant value as a hashable key part."""
    if isinstance(value, np.ndarray):
        return (value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, list | tuple):
        return tuple(frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, frozen(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def value_key(value: ValueView | None) -> Hashable:
    if value is None:
        return None
    dtype = value.dtype.name if value.dtype is not None else None
    if not value.is_constant:
        return (value.kind, dtype, value.rank)
    data = None
    if value.dtype is not None and value.shape is not None and all(
            isinstance(d, int) for d in value.shape):
        count = math.prod(value.shape)
        numpy_dtype = value.dtype.numpy
        if (count <= SMALL_CONSTANT_ELEMENTS and numpy_dtype is not None
                and numpy_dtype.kind in INTEGER_KINDS):
            data = frozen(value.value)
    return (value.kind, dtype, value.rank, "constant", data)


def signature(node: NodeView) -> Hashable:
    """What onnxruntime's answer for ``node`` depends on."""
    repeated = tuple(i for i, v in enumerate(node.inputs)
                     if v is not None and node.inputs.index(v) != i)
    return (
        node.domain, node.op_type, node.since_version, node.opset,
        tuple(value_key(v) for v in node.inputs),
        tuple(None if v is None else (v.kind, v.dtype.name if v.dtype else None, v.rank)
              for v in node.outputs),
        repeated,
        tuple(sorted((k, frozen(v)) for k, v in node.attributes.items())),
    )


def declined_before_probing(node: NodeView) -> Verdict | None:
    """What this package declines without asking onnxruntime: bodies, non-tensor values and
    strings (untested here)."""
    op = node.qualified_op
    if node.has_subgraphs:
        return Verdict(f"{op}: the onnxruntime EP does not take nodes with subgraphs (If, Loop, "
                       "Scan bodies); the host's control flow runs them", "op")
    for value in (*node.inputs, *node.outputs):
        if value is None or (value.kind == "unknown" and value in node.outputs):
            continue  # an output of unknown type: onnxruntime infers it, the probe tells
        if value.kind != "tensor":
            return Verdict(f"{op}: the onnxruntime EP takes tensors only, got {value.kind} "
                           f"value {value.name!r}", "dtype")
        if value.dtype is None:
            return Verdict(f"{op}: the type of {value.name!r} is unknown; declare it "
                           "(value_info) so onnxruntime can be asked about this node", "dtype")
        if value.dtype.name == "string":
            return Verdict(f"{op}: the onnxruntime EP does not claim string tensors "
                           f"({value.name!r}); leave the node to another provider", "dtype")
    return None


def classify(node: NodeView, error: BaseException) -> Verdict:
    """A decline from onnxruntime's error: its own words, with a code."""
    status, _ = runtime.status_and_message(error)
    message = runtime.trimmed(error)
    op = node.qualified_op
    if status == "NOT_IMPLEMENTED":
        known = runtime.has_kernel_for_version(node.domain, node.op_type, node.since_version)
        code = "dtype" if known else "op"
    elif "ShapeInferenceError" in message:
        code = "shape"
    elif "Type Error" in message or "TypeInferenceError" in message:
        code = "dtype"
    else:
        code = "op"
    return Verdict(f"{op}: onnxruntime {runtime.version()} cannot run it: {message}", code)


def is_small(value: ValueView) -> bool:
    shape = value.shape
    return shape is not None and all(isinstance(d, int) for d in shape) and math.prod(
        shape) <= PROBE_CONSTANT_ELEMENTS


def probe_model(node: NodeView) -> Any:
    """``node`` as a one-node model whose small constants are initializers and whose large
    ones (weights) are graph inputs."""
    values = list(dict.fromkeys(v for v in node.inputs if v is not None))
    constants = [v for v in values if v.is_constant and is_small(v)]
    inputs = [v for v in values if v not in constants]
    outputs = [v for v in node.outputs if v is not None]
    name = node.name or node.op_type
    return PartitionView(name, "onnxruntime", (node,), inputs, outputs, constants).to_model()


def probe(node: NodeView) -> Verdict:
    """Build the one-node session; its failure is the decline."""
    model = probe_model(node)
    try:
        runtime.session(model.SerializeToString(), threads=1, optimize=False)
    except Exception as error:  # onnxruntime raises its own Fail/InvalidGraph/NotImplemented...
        return classify(node, error)
    return SUPPORTED


PROBE_VERSION = 1  # bump when what a probe asks changes: verdicts stored before are not read


class Verdicts:
    """The verdict cache: one probe per signature, shared across models and sessions (cleared
    when it reaches ``limit`` entries), and kept on disk (per onnxruntime version) for the next
    process. ``probes`` counts the probe sessions this process built."""

    def __init__(self, limit: int = 16384):
        self.limit = limit
        self.known: dict[Hashable, Verdict] = {}
        self.lock = threading.Lock()
        self.probes = 0
        self.stores = CacheDirStores("onnxruntime-verdicts", runtime.version(),
                                     PROBE_VERSION)

    def verdict(self, node: NodeView) -> Verdict:
        early = declined_before_probing(node)
        if early is not None:
            return early
        key = signature(node)
        found = self.known.get(key)
        if found is not None:
            return found
        store = self.stores.current()
        stored = store.get(key)
        if stored is not None:
            found = Verdict(str(stored.get("reason", "")), str(stored.get("code", "")))
        else:
            found = probe(node)
            store.put(key, {"reason": found.reason, "code": found.code})
        with self.lock:
            self.probes += stored is None
            if len(self.known) >= self.limit:
                self.known.clear()
            self.known[key] = found
        return found
