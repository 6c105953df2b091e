"""Node signatures: what a provider that answers by signature may read of a node, as one
hashable key, worked out once per node."""

from __future__ import annotations

import hashlib
import math
import weakref
from typing import TYPE_CHECKING, Any

from onnx import TensorProto

if TYPE_CHECKING:
    from ep_host.graph import NodeView

SIGNATURE_INDEX_ELEMENTS = 1024
SIGNATURE_OTHER_ELEMENTS = 16
"""Constant inputs are part of a node's signature by value when they are integer or boolean
tensors of up to 1024 elements (shapes, axes, pads, indices) or other tensors of up to 16
(scales, clip bounds, a pad value); bigger ones (weights, biases) by dtype and shape."""
_INDEX_TYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                          "uint64", "bool"})


_SIGNATURES: weakref.WeakKeyDictionary[NodeView, tuple[Any, ...]] = weakref.WeakKeyDictionary()
SIGNATURE_ATTRIBUTE_BYTES = 4096
"""A node's attributes are in its signature as their bytes up to this size; bigger ones (a
tree ensemble's, a support-vector machine's) as ``("blake2b", size, 32-byte digest)``, so a
signature stays small enough to keep and to look up, whatever the node holds."""


def node_signature(node: NodeView) -> tuple[Any, ...] | None:
    """What a provider that answers by signature (``ProviderInfo.answers_by_signature``) may
    read of ``node``: op, domain, versions, attributes, each input's and output's kind, dtype
    and shape, which inputs are constant and the values of small constants (see
    ``SIGNATURE_INDEX_ELEMENTS``). In-process only (attributes as protobuf bytes, symbolic
    dims allowed); ``ep_host.node_times.node_signature`` is the key kept on disk. ``None`` for a
    node with control-flow bodies (always asked on its own). Worked out once per node (kept
    while the node lives; see :func:`known_signature`)."""
    found = _SIGNATURES.get(node)
    if found is not None:
        return found
    if node._has_graphs:
        return None
    signature = _SIGNATURES[node] = _signature(node)
    return signature


def known_signature(node: NodeView) -> tuple[Any, ...] | None:
    """``node_signature(node)`` when it was worked out already (the capability walk works out
    every node's), else ``None``: a provider answering by signature may key what it found for
    one node by it, and find it again for the others of that signature without working it
    out."""
    return _SIGNATURES.get(node)


def _signature(node: NodeView) -> tuple[Any, ...]:
    attributes: bytes | tuple[str, int, bytes] = (
        b"".join([a.SerializeToString() for a in node._proto.attribute])
        if node._has_attributes else b"")
    if len(attributes) > SIGNATURE_ATTRIBUTE_BYTES:
        attributes = ("blake2b", len(attributes),
                      hashlib.blake2b(attributes, digest_size=32).digest())  # type: ignore[arg-type]
    inputs = []
    for v in node.inputs:
        if v is None:
            inputs.append(None)
        elif v._tensor is None:
            inputs.append((v.kind, None if v.dtype is None else v.dtype.name, v.shape))
        else:
            shape = v.shape
            limit = (SIGNATURE_INDEX_ELEMENTS if v.dtype is not None
                     and v.dtype.name in _INDEX_TYPES else SIGNATURE_OTHER_ELEMENTS)
            small = shape is not None and all(isinstance(d, int) for d in shape) and (
                math.prod(shape) <= limit)
            tensor = v._tensor
            if small and tensor.data_location == TensorProto.EXTERNAL:
                # by where its data lies: the walk reads no external file
                inputs.append((v.kind, None if v.dtype is None else v.dtype.name, shape,
                               "external", tuple((e.key, e.value) for e in tensor.external_data)))
                continue
            data = v.value if small else None
            if data is not None:  # strings by their text, numbers by their bytes
                data = (data.dtype.str, tuple(map(str, data.ravel())) if data.dtype.hasobject
                        else data.tobytes())
            inputs.append((v.kind, None if v.dtype is None else v.dtype.name, shape, "constant",
                           data))
    outputs = tuple(None if v is None else (v.kind, None if v.dtype is None else v.dtype.name,
                                            v.shape) for v in node.outputs)
    return (node.domain, node.op_type, node.opset, node.since_version, attributes,
            tuple(inputs), outputs)
