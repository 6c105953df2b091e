"""The editable graph that graph-optimization passes rewrite: the main graph's protobuf nodes
with producer and consumer lookups, and the small node helpers the passes share.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import onnx
from onnx import (
    AttributeProto,
    NodeProto,
    TensorProto,
    TypeProto,
    ValueInfoProto,
    helper,
    numpy_helper,
)

from ep_host.graph import (
    DEFAULT_DOMAIN,
    ParsedType,
    node_proto,
    node_reads,
    normalize_domain,
    parse_type,
)
from ep_host.loading import INFERENCE_READ_ELEMENTS, INFERENCE_READ_TYPES, Model

MS_DOMAIN = "com.microsoft"
HOST_DOMAIN = "ai.ep_host"  # ops of ep-host's own, which fusions write (WeightedMedian)


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
        # types inference found after folding (``reinfer``), over those loading found
        self.learned: dict[str, ParsedType] = {}
        # an Identity's output -> the constant it passes on, which its readers read instead
        self.aliases: dict[str, str] = {}
        self.written = frozenset(self.names)  # the node names this rewrite started from
        self.index()

    def index(self) -> None:
        """The producers and readers of the loaded nodes, before any rewrite (which keeps them
        up to date itself: ``_link``, ``_unlink``)."""
        self.producer: dict[str, NodeProto] = {}
        self.consumers: dict[str, list[NodeProto]] = {}
        producer, consumers = self.producer, self.consumers
        for n in self.nodes:
            if n is None:
                continue
            view = self.views[id(n)]
            if view.has_subgraphs:
                self._link(n)
                continue
            # what _link reads of the protobuf, from the loaded view (ShuffleNet: 1.0 -> 0.2 ms)
            for v in view.outputs:
                if v is not None:
                    producer[v.name] = n
            for v in view.inputs:
                if v is not None and v._tensor is None:  # not a constant: see _link
                    consumers.setdefault(v.name, []).append(n)

    def _link(self, n: NodeProto) -> None:
        for name in n.output:
            if name:
                self.producer[name] = n
        # inputs and the outer names its bodies read; not constants: no pass asks who reads
        # one, and a weight torch's export shares has hundreds (DenseNet: 245 Identities of one)
        for name in self.reads(n):
            if not self.is_const(name):
                self.consumers.setdefault(name, []).append(n)

    def holds_graph(self, n: NodeProto) -> bool:
        """:func:`holds_graph`, a loaded node answered by its view (which read its attributes
        once): asking each node's attributes took a tenth of indexing ShuffleNet's graph."""
        view = self.views.get(id(n))  # the loaded protos live as long as the rewriter
        return view.has_subgraphs if view is not None else holds_graph(n)

    def reads(self, n: NodeProto) -> list[str]:
        """``node_reads(n)``: its inputs, and the outer names its bodies read."""
        return node_reads(n) if self.holds_graph(n) else [x for x in n.input if x]

    def _unlink(self, n: NodeProto) -> None:
        for name in n.output:
            if self.producer.get(name) is n:
                del self.producer[name]
        for name in set(self.reads(n)):
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
        name = self.aliases.get(name, name)
        if name in self.constants:
            return True
        view = self.values.get(name)
        return view is not None and view.is_constant

    def const(self, name: str) -> np.ndarray | None:
        name = self.aliases.get(name, name)
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

    def type_of(self, name: str) -> ParsedType | None:
        """``(kind, dtype, shape)`` of value ``name``: as ``reinfer`` learned it, else as
        loading inferred it; ``None`` for a value the loaded graph does not have."""
        name = self.aliases.get(name, name)
        learned = self.learned.get(name)
        if learned is not None:
            return learned
        view = self.values.get(name)
        return None if view is None else (view.kind, view.dtype, view.shape)

    def shape(self, name: str) -> tuple[Any, ...] | None:
        found = self.type_of(name)
        return None if found is None else found[2]

    def dtype(self, name: str) -> np.dtype | None:
        found = self.type_of(name)
        if found is None or found[1] is None or found[1].numpy is None:
            return None
        return np.dtype(found[1].numpy)

    def reinfer(self) -> None:
        """Infer again the types of the values whose shapes loading's inference left unknown,
        from the nodes that make them (and only those), now that folding made constants of what
        they read (ShuffleNet's channel split: Slice bounds computed through Div, which onnx's
        data propagation does not follow). Each type learned with a shape of numbers goes to
        ``learned``. A node holding a graph is left out: its outputs keep loading's types."""
        by_shape: dict[Any, bool] = {}  # shapes repeat: each is looked into once
        unknown_values = set()
        for name, view in self.values.items():
            if view.kind == "tensor" and view.dtype is not None:
                static = by_shape.get(view.shape)
                if static is None:
                    static = by_shape[view.shape] = _static(("tensor", view.dtype, view.shape))
                if static:
                    continue
            elif view.kind != "unknown":
                continue
            if name not in self.learned and name not in self.aliases and (
                    name not in self.constants):
                unknown_values.add(name)
        # Only the nodes that read what folding computed, or what such a node makes, and read
        # nothing else of unknown shape: the others would get what loading got (SSD-lite:
        # 1,200 nodes after NonZero and TopK, 8 of its 27 ms).
        changed = {name for name in self.constants if name not in self.initializers}
        changed.update(self.aliases)
        near: dict[int, NodeProto] = {}  # the live nodes downstream of those, by position
        pending = list(changed)
        while pending:
            for n in self.consumers.get(pending.pop(), ()):
                at = self.position.get(id(n))
                if at is not None and at not in near and not unknown_values.isdisjoint(n.output):
                    near[at] = n
                    pending.extend(n.output)
        unknown = []
        for at in sorted(near):
            n = near[at]
            if (changed.isdisjoint(n.input) or not unknown_values.isdisjoint(n.input)
                    or self.holds_graph(n)):
                continue
            unknown.append(n)
            if n.op_type not in DATA_SHAPED:
                changed.update(n.output)
                unknown_values.difference_update(n.output)  # known, it is hoped
        made = {o for n in unknown for o in n.output if o}
        read = dict.fromkeys(i for n in unknown for i in n.input if i and i not in made)
        model = self.model.proto
        probe = onnx.ModelProto(ir_version=model.ir_version)
        probe.opset_import.extend(model.opset_import)
        probe.functions.extend(model.functions)
        graph = probe.graph
        graph.node.extend(unknown)
        types: dict[tuple[int, Any], TypeProto] = {}  # one per dtype and shape: they repeat
        for name in read:
            known = self.type_of(name)
            data = self._shape_data(name, known)
            if data is not None:  # int32 or int64, little-endian as ONNX stores them
                graph.initializer.add(name=name, data_type=_int_code(data), dims=data.shape,
                                      raw_data=data.astype(data.dtype.newbyteorder("<"),
                                                           copy=False).tobytes())
                continue
            vi = graph.input.add()
            vi.name = name
            if tensor_typed(known):
                vi.type.CopyFrom(tensor_type_proto(known, types))
        graph.output.extend(ValueInfoProto(name=o) for o in made)
        try:
            inferred = onnx.shape_inference.infer_shapes(probe, check_type=False,
                                                         strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 (the types loading found stand)
            return
        parsed: dict[bytes, ParsedType] = {}
        for vi in (*inferred.graph.value_info, *inferred.graph.output):
            if vi.name not in made or vi.name in self.learned:
                continue
            key = vi.type.SerializeToString()
            found = parsed.get(key)
            if found is None:
                found = parsed[key] = parse_type(vi.type)
            if _static(found):
                self.learned[vi.name] = found

    def _shape_data(self, name: str, known: ParsedType | None) -> np.ndarray | None:
        """Constant ``name``'s data when ``reinfer`` hands it to inference, not only its type: a
        small integer tensor (a shape, Slice bounds, axes...)."""
        if name in self.constants:  # computed: its type may not be known, its data is
            array = self.constants[name]
        elif (tensor_typed(known) and known[1].code in INFERENCE_READ_TYPES
              and self.is_const(name) and _static(known)
              and math.prod(known[2]) <= INFERENCE_READ_ELEMENTS):
            array = self.const(name)
        else:
            return None
        if array is None or array.dtype not in (np.int64, np.int32):
            return None
        return array if array.size <= INFERENCE_READ_ELEMENTS else None


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

    def alias(self, node: NodeProto) -> bool:
        """Drop ``node``, an Identity of a constant, its readers to read the constant itself
        (``aliases``; the rebuilt graph's nodes are renamed) rather than a copy of it made a new
        initializer. ``False``, and nothing done, where a reader holds a graph, whose bodies
        may read the name too."""
        out = node.output[0]
        readers = self.consumers.get(out, [])
        if any(self.holds_graph(n) for n in readers):
            return False
        source = self.aliases.get(node.input[0], node.input[0])
        self.remove(node)
        self.aliases[out] = source
        return True

    def renamed(self, node: NodeProto) -> NodeProto:
        """``node`` reading each constant ``aliases`` names rather than the Identity's output:
        itself when it reads none, else an edited copy."""
        return inputs_renamed(node, self.aliases)

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


# ops whose outputs' shapes depend on their inputs' values, not only on their shapes
DATA_SHAPED = frozenset({"NonZero", "Unique", "Compress", "NonMaxSuppression"})


def holds_graph(node: NodeProto) -> bool:
    """Whether ``node`` has a graph attribute (a body that may read outer names)."""
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute)


def tensor_typed(found: ParsedType | None) -> bool:
    """Whether a value's ``(kind, dtype, shape)`` is a tensor's with a known dtype."""
    return found is not None and found[0] == "tensor" and found[1] is not None


def tensor_type_proto(found: ParsedType, made: dict[tuple[int, Any], TypeProto]) -> TypeProto:
    """The tensor type proto of ``found``, one per dtype and shape kept in ``made`` (they
    repeat; onnx.helper per value took 6 us each)."""
    key = (found[1].code, found[2])
    proto = made.get(key)
    if proto is None:
        proto = made[key] = helper.make_tensor_type_proto(*key)
    return proto


def _int_code(array: np.ndarray) -> int:
    """The ONNX type code of an int32 or int64 array."""
    return TensorProto.INT64 if array.dtype == np.int64 else TensorProto.INT32


def _static(found: ParsedType | None) -> bool:
    """Whether a type is a tensor's with a dtype and a shape of numbers (or not a tensor's,
    which inference has nothing to add to)."""
    if found is None:
        return False
    kind, dt, shape = found
    if kind != "tensor":
        return kind != "unknown"
    return dt is not None and shape is not None and all(type(d) is int for d in shape)


def rename_inputs(node: NodeProto, names: dict[str, str]) -> None:
    """Replace, in place, each input of ``node`` that ``names`` maps."""
    for i, name in enumerate(node.input):
        if name in names:
            node.input[i] = names[name]


def inputs_renamed(node: NodeProto, names: dict[str, str]) -> NodeProto:
    """``node`` reading the values ``names`` maps its inputs to: itself where it reads none of
    them, else an edited copy."""
    if not any(name in names for name in node.input):
        return node
    out = copy_node(node)
    rename_inputs(out, names)
    return out


def copy_node(node: NodeProto) -> NodeProto:
    """A copy of ``node`` that a pass may edit."""
    out = NodeProto()
    out.CopyFrom(node)
    return out


def node_domain(node: NodeProto) -> str:
    """``node``'s domain, ``""`` normalised to ``"ai.onnx"``."""
    return normalize_domain(node.domain)


def is_op(node: NodeProto | None, op_type: str, domain: str = DEFAULT_DOMAIN) -> bool:
    """Whether ``node`` is the op ``op_type`` of ``domain`` (default ai.onnx; ``False`` for
    ``None``)."""
    return node is not None and node.op_type == op_type and node_domain(node) == domain


Match = TypeVar("Match")


def matches(rw: Rewriter, op_type: str, match: Callable[[Rewriter, NodeProto], Match | None],
            domain: str = DEFAULT_DOMAIN) -> Iterator[Match]:
    """``match`` of each live node of ``op_type`` (of ``domain``), where it matches, as the walk
    reaches the node (lazily: a node an earlier rewrite removed is not tried)."""
    for node in rw.live():
        if is_op(node, op_type, domain):
            found = match(rw, node)
            if found is not None:
                yield found


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
