"""The editable graph that graph-optimization passes rewrite: the main graph's protobuf nodes
with producer and consumer lookups, and the small node helpers the passes share.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper

from ep_host.graph import DEFAULT_DOMAIN, node_proto, node_reads, normalize_domain
from ep_host.loading import Model

MS_DOMAIN = "com.microsoft"


class Rewriter:
    """The main graph's nodes, with the lookups passes need. The nodes are the loaded model's
    own protobuf messages, which no pass edits: a pass replaces a node by an edited copy
    (:func:`copy_node`, :meth:`replace`), so nothing is copied up front (copying SSD-lite's
    3,500 nodes took 16 ms)."""

    def __init__(self, model: Model):
        self.model = model
        self.values = model.graph.values
        self.nodes: list[NodeProto | None] = [node_proto(view) for view in model.graph.nodes]
        self.views = {id(n): v for n, v in zip(self.nodes, model.graph.nodes, strict=True)}
        self.position = {id(n): i for i, n in enumerate(self.nodes)}
        self.initializers: dict[str, TensorProto] = {}  # new ones taken as written, by name
        # values of the new ones; those a pass computed become tensors only when the rewritten
        # graph still reads them (a conv's weights folded twice are written once)
        self.constants: dict[str, np.ndarray] = {}
        self.unfused: dict[str, list[NodeProto]] = {}
        self.merged: dict[str, str | None] = {}  # a removed node -> the node that does its work
        self.outputs = {v.name for v in model.graph.outputs}
        self.names = {n.name for n in self.nodes if n is not None}
        self.written = frozenset(self.names)  # the node names this rewrite started from
        self.index()

    def index(self) -> None:
        self.producer: dict[str, NodeProto] = {}
        self.consumers: dict[str, list[NodeProto]] = {}
        for n in self.nodes:
            if n is not None:
                self._link(n)

    def _link(self, n: NodeProto) -> None:
        for name in n.output:
            if name:
                self.producer[name] = n
        for name in node_reads(n):  # inputs and the outer names its bodies read
            self.consumers.setdefault(name, []).append(n)

    def _unlink(self, n: NodeProto) -> None:
        for name in n.output:
            if self.producer.get(name) is n:
                del self.producer[name]
        for name in set(node_reads(n)):
            users = self.consumers.get(name)
            if users is not None:
                users[:] = [u for u in users if u is not n]

    def live(self) -> Iterator[NodeProto]:
        """The nodes in graph order, as they are when the walk reaches each: a node an earlier
        rewrite removed is skipped, one it added is not visited."""
        for n in list(self.nodes):
            if n is not None and id(n) in self.position:
                yield n

    def is_const(self, name: str) -> bool:
        """Whether ``name`` is a constant, without reading its data."""
        if name in self.constants:
            return True
        view = self.values.get(name)
        return view is not None and view.is_constant

    def const(self, name: str) -> np.ndarray | None:
        if name in self.constants:
            return self.constants[name]
        view = self.values.get(name)
        if view is None or not view.is_constant:
            return None
        return view.value

    def only_consumer(self, name: str) -> NodeProto | None:
        """The one node reading ``name`` when nothing else (no graph output) does."""
        users = self.consumers.get(name, [])
        if len(users) != 1 or name in self.outputs:
            return None
        return users[0]

    def shape(self, name: str) -> tuple[Any, ...] | None:
        view = self.values.get(name)
        return None if view is None else view.shape

    def dtype(self, name: str) -> np.dtype | None:
        view = self.values.get(name)
        if view is None or view.dtype is None or view.dtype.numpy is None:
            return None
        return np.dtype(view.dtype.numpy)

    def add_constant(self, name: str, array: np.ndarray) -> None:
        self.constants[name] = array
        self.initializers.pop(name, None)

    def new_initializers(self, wanted: set[str]) -> list[TensorProto]:
        """The new initializers named in ``wanted``: those taken as written, then those
        computed, as tensors."""
        written = [t for name, t in self.initializers.items() if name in wanted]
        return written + [numpy_helper.from_array(array, name)
                          for name, array in self.constants.items()
                          if name in wanted and name not in self.initializers]

    def computed(self, wanted: set[str]) -> dict[str, np.ndarray]:
        """The arrays ``new_initializers`` writes as tensors, by name."""
        return {name: array for name, array in self.constants.items()
                if name in wanted and name not in self.initializers}

    def add_initializer(self, tensor: TensorProto) -> None:
        """A new initializer taken as written; its value is read now unless the graph already
        knows it as a constant (a ``Constant`` node's ``value``, read lazily)."""
        self.initializers[tensor.name] = tensor
        view = self.values.get(tensor.name)
        if view is None or not view.is_constant:
            self.constants[tensor.name] = numpy_helper.to_array(tensor)

    def fresh(self, base: str) -> str:
        """A name no node or value uses yet."""
        name, k = base, 1
        while (name in self.names or name in self.values or name in self.initializers
               or name in self.constants):
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def remove(self, node: NodeProto, into: str | None = None) -> None:
        """Drop ``node``; its work is now done by node ``into`` (``None``: a constant)."""
        self.nodes[self.position.pop(id(node))] = None
        self._unlink(node)
        if node.name:
            self.merged[node.name] = into

    def replace(self, old: NodeProto, new: NodeProto) -> None:
        i = self.position.pop(id(old))
        self._unlink(old)
        self.nodes[i] = new
        self.position[id(new)] = i
        self._link(new)
        self.views[id(new)] = self.views.get(id(old))
        if old.name and old.name != new.name:
            self.merged[old.name] = new.name

    def opset(self, node: NodeProto) -> int | None:
        view = self.views.get(id(node))
        return None if view is None else view.since_version


def copy_node(node: NodeProto) -> NodeProto:
    """A copy of ``node`` that a pass may edit."""
    out = NodeProto()
    out.CopyFrom(node)
    return out


def node_domain(node: NodeProto) -> str:
    """``node``'s domain, ``""`` normalised to ``"ai.onnx"``."""
    return normalize_domain(node.domain)


def is_op(node: NodeProto | None, op_type: str) -> bool:
    """Whether ``node`` is the ai.onnx op ``op_type`` (``False`` for ``None``)."""
    return node is not None and node.op_type == op_type and node_domain(node) == DEFAULT_DOMAIN


def node_attribute(node: NodeProto, name: str, default: Any = None) -> Any:
    """The Python value of ``node``'s attribute ``name`` as written, else ``default``."""
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def other_input(node: NodeProto, name: str) -> str | None:
    """The other input of a binary node that reads ``name`` once."""
    if len(node.input) != 2 or list(node.input).count(name) != 1:
        return None
    return node.input[1] if node.input[0] == name else node.input[0]
