"""A node's long attribute lists made Python tuples only when one is read: the mapping
:attr:`~ep_host.graph.NodeView.attributes` gives a node holding some; and the one mapping that
nodes of equal plain attributes share; the outer names a node's graph attributes read.

A tree ensemble's tables hold 3,000-22,000 numbers and strings in one node; as tuples they
took 150-580 us of a scikit-learn export's 1-2 ms session creation, where its kernel reads
them as arrays (``NodeView.attribute_array``) and the modes from the protobuf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import AttributeProto, GraphProto, NodeProto

from ep_host.signatures import known_signature

if TYPE_CHECKING:
    from ep_host.graph import NodeView

LONG_LIST = 64
"""INTS, FLOATS and STRINGS attributes at least this long are made tuples when read."""

_LATER = object()  # a value not made yet


class LongListAttributes(Mapping[str, Any]):
    """Read-only attributes by name, in the node's order; each long list is made a tuple (by
    its ``make``) the first time it is read, then kept. Equal to the dict of its items."""

    __slots__ = ("_values", "_makers")

    def __init__(self, values: dict[str, Any], makers: dict[str, Callable[[], tuple[Any, ...]]]):
        self._values = values  # the long lists' names hold _LATER until read
        self._makers = makers

    @staticmethod
    def later() -> Any:
        """The placeholder of a value made when read."""
        return _LATER

    def __getitem__(self, name: str) -> Any:
        found = self._values[name]
        if found is _LATER:
            found = self._values[name] = self._makers[name]()
        return found

    def get(self, name: str, default: Any = None) -> Any:
        found = self._values.get(name, default)
        if found is _LATER:
            found = self._values[name] = self._makers[name]()
        return found

    def pending(self, name: str) -> bool:
        """Whether ``name`` is a long list whose tuple is not made yet (reading it makes it)."""
        return self._values.get(name) is _LATER

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


def decoded(strings: Any) -> tuple[str, ...]:
    """Each of ``strings`` (bytes) as text; many at once in one decode (a tree ensemble's node
    modes are thousands), one by one where one holds a NUL, the separator."""
    if len(strings) < 16:
        return tuple(s.decode("utf-8", "replace") for s in strings)
    joined = b"\0".join(strings)
    texts = joined.decode("utf-8", "replace").split("\0")
    if len(texts) != len(strings):  # a string with a NUL of its own
        return tuple(s.decode("utf-8", "replace") for s in strings)
    return tuple(texts)


# The attributes mapping of plain values (numbers, strings, their short lists) by op and the
# attributes' bytes: the same for every node that has them, in any model of the process (a
# tensor or a graph is read per model, a long list lazily per node). ShuffleNet's 149 nodes
# read theirs in 0.7 ms, SSD-lite's 2,351 in 6.8 (2.6-4.7 us a node).
AttributesKey = tuple[str, str, "int | None", "bytes | tuple[str, int, bytes]"]
SHARED_ATTRIBUTES: dict[AttributesKey, Mapping[str, Any]] = {}
SHARED_ATTRIBUTES_KEPT = 4096
SHARED_ATTRIBUTE_BYTES = 1024
_PLAIN_TYPES = frozenset({AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                          AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS})


def attributes_key(node: NodeView) -> AttributesKey:
    """``node``'s op and its attributes' bytes: the signature's, where the capability walk
    worked it out (big attributes there stand as their digest), else serialized here."""
    found = known_signature(node)
    encoded = (found[4] if found is not None
               else b"".join([a.SerializeToString() for a in node._proto.attribute]))
    return node.domain, node.op_type, node.since_version, encoded


def share_attributes(key: AttributesKey, attributes: Mapping[str, Any],
                     protos: Sequence[AttributeProto]) -> None:
    """Keep ``attributes`` for the nodes of ``key`` where they are all plain (checked here, on
    a miss only: a node finding its mapping does not look at its protobuf again)."""
    if isinstance(key[3], bytes) and len(key[3]) <= SHARED_ATTRIBUTE_BYTES and all(
            a.type in _PLAIN_TYPES and not a.ref_attr_name for a in protos):
        if len(SHARED_ATTRIBUTES) >= SHARED_ATTRIBUTES_KEPT:  # the oldest go (sessions made
            SHARED_ATTRIBUTES.pop(next(iter(SHARED_ATTRIBUTES), None), None)  # on threads too)
        SHARED_ATTRIBUTES[key] = attributes


def list_array(attr: AttributeProto) -> np.ndarray:
    """An INTS or FLOATS attribute's numbers as a read-only array (int64, float32)."""
    found = (np.array(attr.ints, dtype=np.int64) if attr.type == AttributeProto.INTS
             else np.array(attr.floats, dtype=np.float32))
    found.flags.writeable = False
    return found


def node_reads(n: NodeProto) -> list[str]:
    """Names a node reads: its inputs plus outer-scope names its subgraphs capture."""
    reads = [x for x in n.input if x]
    for attr in n.attribute:
        if attr.type == AttributeProto.GRAPH:
            reads.extend(captured_names(attr.g))
        elif attr.type == AttributeProto.GRAPHS:
            for g in attr.graphs:
                reads.extend(captured_names(g))
    return reads


def captured_names(g: GraphProto) -> set[str]:
    """The outer-scope names ``g`` reads (``GraphView.outer_names``)."""
    local = ({vi.name for vi in g.input} | {t.name for t in g.initializer}
             | {sp.values.name for sp in g.sparse_initializer})
    for n in g.node:
        local.update(o for o in n.output if o)
    out = set()
    for n in g.node:
        out.update(x for x in node_reads(n) if x not in local)
    out.update(vi.name for vi in g.output if vi.name not in local)
    return out
