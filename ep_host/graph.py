"""The read-only views handed to providers (values, nodes, graphs) and the topological order.

Views hold no protobuf in their public fields: types are parsed, attributes are Python values
with schema defaults filled in, and a constant reads its data only when asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from functools import cache
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, TypeProto

from ep_host.attribute_lists import (
    LONG_LIST,
    SHARED_ATTRIBUTES,
    LongListAttributes,
    attributes_key,
    captured_names,
    decoded,
    list_array,
    node_reads,
    share_attributes,
)
from ep_host.dtypes import DType
from ep_host.dtypes import dtype as to_dtype
from ep_host.errors import ModelValidationError
from ep_host.layouts import converted_shape, has_layouts, input_layout, output_layout
from ep_host.tensors import readonly, sparse_to_dense, tensor_to_array

if TYPE_CHECKING:
    from ep_host.loading import Model

DEFAULT_DOMAIN = "ai.onnx"

CONSTANT_OP = (DEFAULT_DOMAIN, "Constant")
"""The loader's one named op, as ``(domain, op_type)``: a ``Constant`` node's ``value`` tensor
becomes a constant value of its graph (``ValueView.is_constant``, read lazily like an
initializer), so providers see its data when they price and prepack its consumers. No schema
field says "the output is this attribute" (deterministic input-less ops such as SequenceEmpty
compute theirs), so the rule is written down here rather than derived from ``onnx.defs``.
"""

Shape = tuple[int | str | None, ...]


def normalize_domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain in ("", DEFAULT_DOMAIN) else domain


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


def _read_only(self: object, name: str, value: Any = None) -> None:
    raise AttributeError(f"{type(self).__name__} is read-only: {name!r} cannot be set or "
                         "deleted (views handed to providers never change)")


def _read_only_delete(self: object, name: str) -> None:
    _read_only(self, name)


class _ValueFields:
    """The slots of a :class:`ValueView` while the host builds it (stores are plain there);
    the finished object's class is ``ValueView``, which refuses every store."""

    __slots__ = ("name", "kind", "dtype", "shape", "_tensor", "_model", "_nbytes")

    def __init__(
        self,
        name: str,
        kind: str,
        dtype: DType | None,
        shape: Shape | None,
        tensor: TensorProto | None = None,
        model: Model | None = None,
    ):
        self.name = name
        self.kind = kind
        self.dtype = dtype
        self.shape = shape
        self._tensor = tensor
        self._model = model
        self._nbytes: tuple[DType | None, Shape | None, int] | None = None
        self.__class__ = ValueView  # from here on read-only


class ValueView(_ValueFields):
    """A tensor (or sequence, optional, map) flowing through the graph, read-only.

    ``kind`` is ``"tensor"``, ``"sequence"``, ``"optional"``, ``"map"`` or ``"unknown"``;
    ``dtype`` is the element type (of the innermost tensor for containers), ``None`` if unknown;
    ``shape`` holds ints for static dims and strings for symbolic ones (``None`` for an unnamed
    unknown dim), or is ``None`` when the rank is unknown. ``value`` reads a constant's data.
    Setting or deleting an attribute raises ``AttributeError``.
    """

    __slots__ = ()
    __setattr__ = _read_only
    __delattr__ = _read_only_delete

    def __new__(cls, *args: Any, **kwargs: Any) -> ValueView:
        return _ValueFields(*args, **kwargs)  # type: ignore[return-value]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # built by _ValueFields.__init__

    @property
    def is_constant(self) -> bool:
        return self._tensor is not None

    @property
    def rank(self) -> int | None:
        return None if self.shape is None else len(self.shape)

    @property
    def is_static(self) -> bool:
        return self.shape is not None and all(isinstance(d, int) for d in self.shape)

    @property
    def value(self) -> np.ndarray | None:
        """The constant's data as a read-only numpy array (read on first use), else ``None``."""
        if self._tensor is None:
            return None
        return self._model.constant_value(self.name, self._tensor)

    @property
    def nbytes(self) -> int:
        """Bytes this tensor occupies; symbolic dims count as 1, unknown type as 0."""
        dtype, shape = self.dtype, self.shape
        known = self._nbytes  # every consumer of a value asks; count it once per (dtype, shape)
        if known is not None and known[0] is dtype and known[1] is shape:
            return known[2]
        if dtype is None or shape is None:
            return 0
        n = 1
        for d in shape:
            if isinstance(d, int) and d >= 0:
                n *= d
        n = dtype.storage_bytes(n)
        object.__setattr__(self, "_nbytes", (dtype, shape, n))
        return n

    def __repr__(self) -> str:
        const = ", constant" if self.is_constant else ""
        return f"ValueView({self.name!r}, {self.dtype}, {self.shape}{const})"


_DTYPES: dict[int, DType] = {}


def _dtype_of(code: int) -> DType:
    """``to_dtype(code)`` for a TensorProto code, memoised (unknown codes raise as it does)."""
    dt = _DTYPES.get(code)
    if dt is None:
        dt = _DTYPES[code] = to_dtype(code)
    return dt


ParsedType = tuple[str, DType | None, Shape | None]


def made_static(nodes: Iterable[NodeProto], types: Mapping[str, ParsedType]) -> bool:
    """Whether ``types`` give every value ``nodes`` make as a tensor with an element type and a
    shape of numbers."""
    made = (types.get(name) for node in nodes for name in node.output if name)
    return all(t is not None and t[0] == "tensor" and t[1] is not None and t[2] is not None
               and all(type(d) is int for d in t[2]) for t in made)


def parse_type(tp: TypeProto) -> ParsedType:
    """``(kind, dtype, shape)`` of a value's declared type, as :class:`ValueView` holds them."""
    which = tp.WhichOneof("value")
    if which == "tensor_type" or which == "sparse_tensor_type":
        tt = getattr(tp, which)
        elem = tt.elem_type
        dt = _dtype_of(elem) if elem else None
        if not tt.HasField("shape"):
            return "tensor", dt, None
        dims: list[int | str | None] = []
        for d in tt.shape.dim:
            w = d.WhichOneof("value")
            dims.append(d.dim_value if w == "dim_value" else d.dim_param if w else None)
        return "tensor", dt, tuple(dims)
    if which == "sequence_type":
        _, dt, _ = parse_type(tp.sequence_type.elem_type)
        return "sequence", dt, None
    if which == "optional_type":
        kind, dt, shape = parse_type(tp.optional_type.elem_type)
        return "optional", dt, shape
    if which == "map_type":
        return "map", None, None
    return "unknown", None, None


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------


@cache
def op_schema(domain: str, op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    """The schema ``op_type`` of ``domain`` resolves to at ``opset``; ``None`` if none does."""
    try:
        return onnx.defs.get_schema(op_type, opset, "" if domain == DEFAULT_DOMAIN else domain)
    except onnx.defs.SchemaError:
        return None


@cache
def _since_version(domain: str, op_type: str, opset: int) -> int | None:
    schema = op_schema(domain, op_type, opset)
    return None if schema is None else schema.since_version


_NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})


@cache
def _schema_defaults(domain: str, op_type: str, since_version: int) -> Mapping[str, Any]:
    schema = op_schema(domain, op_type, since_version)
    if schema is None:
        return MappingProxyType({})
    out = {}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default.type != AttributeProto.UNDEFINED:
            out[name] = _attribute_value(default, None, None)
    return MappingProxyType(out)


_LIST_TYPES = (AttributeProto.INTS, AttributeProto.FLOATS)


def _attribute_value(attr: AttributeProto, model: Model | None, parent: GraphView | None) -> Any:
    t = attr.type
    if t == AttributeProto.FLOAT:
        return attr.f
    if t == AttributeProto.INT:
        return attr.i
    if t == AttributeProto.STRING:
        return attr.s.decode("utf-8", "replace")
    if t == AttributeProto.FLOATS:  # [:] copies in C; tuple() alone iterates in Python
        return tuple(attr.floats[:])
    if t == AttributeProto.INTS:
        return tuple(attr.ints[:])
    if t == AttributeProto.STRINGS:
        return decoded(attr.strings)
    if t == AttributeProto.TENSOR:
        return readonly(tensor_to_array(attr.t, model))
    if t == AttributeProto.TENSORS:
        return tuple(readonly(tensor_to_array(x, model)) for x in attr.tensors)
    if t == AttributeProto.GRAPH:
        return GraphView(attr.g, model, parent) if model is not None else attr.g
    if t == AttributeProto.GRAPHS:
        return tuple(GraphView(g, model, parent) for g in attr.graphs)
    if t == AttributeProto.TYPE_PROTO:
        return parse_type(attr.tp)
    if t == AttributeProto.SPARSE_TENSOR:
        return attr.sparse_tensor
    return None


class _NodeFields:
    """The slots of a :class:`NodeView` while the host builds it (stores are plain there);
    the finished object's class is ``NodeView``, which refuses every store."""

    __slots__ = (
        "name", "op_type", "domain", "since_version", "index", "graph", "_proto", "_attributes",
        "inputs", "outputs", "opset", "_has_graphs", "_has_attributes", "_arrays",
        "__weakref__",  # providers may remember what they worked out for a node
    )

    def __init__(
        self, proto: NodeProto, name: str, index: int, graph: GraphView, row: NodeRow | None = None
    ):
        # ``row``: the node's fields as scan_nodes read them, so the protobuf is read once
        _, op_type, domain, _, inputs, outputs, has_graphs, has_attributes = (
            row or _scan_node(proto))
        self._proto = proto
        self.name = name
        self.index = index
        self.graph = graph
        self.op_type = op_type
        self.domain = domain = normalize_domain(domain)
        self.opset = opset = graph.opset_imports.get(domain)
        self.since_version = None if opset is None else _since_version(domain, op_type, opset)
        self._attributes: Mapping[str, Any] | None = None
        self._has_graphs = has_graphs
        self._has_attributes = has_attributes
        self._arrays: dict[str, np.ndarray | None] | None = None
        values = graph.values
        get = values.__getitem__
        self.inputs = (tuple(map(get, inputs)) if "" not in inputs
                       else tuple([values[n] if n else None for n in inputs]))
        self.outputs = (tuple(map(get, outputs)) if "" not in outputs
                        else tuple([values[n] if n else None for n in outputs]))
        self.__class__ = NodeView  # from here on read-only


class NodeView(_NodeFields):
    """A node as a provider sees it: read-only, no protobuf.

    ``domain`` is ``"ai.onnx"`` for the default domain. ``since_version`` is the version of the
    op's schema that the model's opset resolves to (``None`` for an op no schema defines).
    ``attributes`` holds Python values with schema defaults filled in. ``inputs`` and
    ``outputs`` are :class:`ValueView` tuples; an omitted optional input is ``None``.
    Setting or deleting an attribute raises ``AttributeError``; ``attributes`` is a read-only
    mapping and ``inputs``/``outputs`` are tuples.
    """

    __slots__ = ()
    __setattr__ = _read_only
    __delattr__ = _read_only_delete

    def __new__(cls, *args: Any, **kwargs: Any) -> NodeView:
        return _NodeFields(*args, **kwargs)  # type: ignore[return-value]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass  # built by _NodeFields.__init__

    @property
    def attributes(self) -> Mapping[str, Any]:
        if self._attributes is None:
            if not self._has_attributes:  # the schema's defaults alone: share the cached mapping
                attributes = _NO_ATTRIBUTES if self.since_version is None else (
                    _schema_defaults(self.domain, self.op_type, self.since_version))
                object.__setattr__(self, "_attributes", attributes)
                return attributes
            key = attributes_key(self)  # nodes of equal plain attributes share one mapping
            shared = SHARED_ATTRIBUTES.get(key)
            if shared is not None:
                object.__setattr__(self, "_attributes", shared)
                return shared
            out = {}
            if self.since_version is not None:
                out.update(_schema_defaults(self.domain, self.op_type, self.since_version))
            makers = {}  # long lists: tuples when read (LongListAttributes)
            for attr in self._proto.attribute:
                if attr.ref_attr_name:
                    continue  # only inside function bodies, filled by expansion
                t = attr.type
                if t in _LIST_TYPES and len(attr.ints if t == AttributeProto.INTS
                                            else attr.floats) >= LONG_LIST:
                    # read now through numpy (a bad list declines here), which
                    # attribute_array keeps: its tuple 1.3-1.5x as fast as tuple()
                    found = self._read_array(attr)
                    makers[attr.name] = lambda found=found: tuple(found.tolist())
                elif t == AttributeProto.STRINGS and len(attr.strings) >= LONG_LIST:
                    makers[attr.name] = lambda attr=attr: decoded(attr.strings)
                else:
                    out[attr.name] = _attribute_value(attr, self.graph.model, self.graph)
                    continue
                out[attr.name] = LongListAttributes.later()
            attributes = (LongListAttributes(out, makers) if makers
                          else MappingProxyType(out))
            object.__setattr__(self, "_attributes", attributes)
            if not makers:
                share_attributes(key, attributes, self._proto.attribute)
        return self._attributes

    def _kept_arrays(self) -> dict[str, np.ndarray | None]:
        """The arrays ``attribute_array`` gave out, by attribute name."""
        if self._arrays is None:
            object.__setattr__(self, "_arrays", {})
        return self._arrays  # type: ignore[return-value]

    def _read_array(self, attr: AttributeProto) -> np.ndarray:
        """An INTS or FLOATS attribute's array, read once and kept for ``attribute_array``."""
        arrays = self._kept_arrays()
        found = arrays.get(attr.name)
        if found is None:
            found = arrays[attr.name] = list_array(attr)
        return found

    def attribute_array(self, name: str) -> np.ndarray | None:
        """Attribute ``name`` of numbers as a read-only numpy array (``int64`` for INTS,
        ``float32`` for FLOATS, a TENSOR's own type), read from the model without a Python
        object per number (a tree ensemble's tables hold thousands); equal to
        ``np.asarray(node.attributes[name])``, and ``None`` where ``attributes`` has no
        ``name``. The same array each time it is asked for."""
        arrays = self._arrays
        if arrays is not None and name in arrays:
            return arrays[name]
        for attr in self._proto.attribute:
            if attr.name == name and not attr.ref_attr_name:
                if attr.type in _LIST_TYPES:
                    return self._read_array(attr)
                break
        value = self.attributes.get(name)
        found = None if value is None else np.asarray(value)  # a TENSOR's own array, no copy
        if found is not None:
            found.flags.writeable = False
        self._kept_arrays()[name] = found
        return found

    def attribute_strings(self, name: str) -> tuple[bytes, ...] | None:
        """STRINGS attribute ``name`` as the model's bytes, not made text (a tree ensemble's
        thousands of node modes are looked up as bytes); ``None`` where the node has none."""
        for attr in self._proto.attribute:
            if attr.name == name and attr.type == AttributeProto.STRINGS:
                return None if attr.ref_attr_name else tuple(attr.strings)
        return None

    @property
    def subgraphs(self) -> dict[str, GraphView]:
        """The graph-valued attributes (If branches, Loop and Scan bodies)."""
        out: dict[str, GraphView] = {}
        if not self._has_graphs:  # a tree ensemble's tables are not made tuples to find none
            return out
        for k, v in self.attributes.items():
            if isinstance(v, GraphView):
                out[k] = v
            elif isinstance(v, tuple) and v and isinstance(v[0], GraphView):
                for i, g in enumerate(v):
                    out[f"{k}[{i}]"] = g
        return out

    @property
    def has_subgraphs(self) -> bool:
        return self._has_graphs

    @property
    def qualified_op(self) -> str:
        return self.op_type if self.domain == DEFAULT_DOMAIN else f"{self.domain}::{self.op_type}"

    def __repr__(self) -> str:
        return f"NodeView({self.name!r}, {self.qualified_op}, since_version={self.since_version})"


def laid_out(node: NodeView, answer: Any) -> NodeView:
    """``node`` as the kernel of a claim (``answer``, a ``KernelMatch``) sees it: each input and
    output the claim reads or writes in a layout not the model's has that layout's shape (an
    NHWC kernel sees NHWC shapes); ``node`` itself when there is none. A constant input so
    converted is shown as computed: its converted data comes to ``Kernel.prepare``."""
    if not answer.is_supported or not has_layouts(answer):
        return node

    def view(value: ValueView | None, layout: str | None) -> ValueView | None:
        if value is None or layout is None:
            return value
        return ValueView(value.name, value.kind, value.dtype,
                         converted_shape(value.shape, layout))

    copy = object.__new__(_NodeFields)
    for name in _NodeFields.__slots__[:-1]:  # all but __weakref__
        setattr(copy, name, getattr(node, name))
    copy.inputs = tuple(view(v, input_layout(answer, i)) for i, v in enumerate(node.inputs))
    copy.outputs = tuple(view(v, output_layout(answer, k)) for k, v in enumerate(node.outputs))
    copy.__class__ = NodeView
    return copy  # type: ignore[return-value]


def node_proto(node: NodeView) -> NodeProto:
    """The protobuf behind ``node``, for the host's own rewrites (function expansion, graph
    optimization). Providers never need it: everything they read is on the view."""
    return node._proto


# ---------------------------------------------------------------------------------------------
# Graphs
# ---------------------------------------------------------------------------------------------


class GraphView:
    """A graph (the model's main graph or a control-flow body): nodes in topological order,
    its inputs and outputs, and every value it names (outer-scope values included).
    Read-only once built: ``values`` is a read-only mapping and setting an attribute raises."""

    def __setattr__(self, name: str, value: Any) -> None:
        if not self.__dict__.get("_building"):
            _read_only(self, name)
        object.__setattr__(self, name, value)

    __delattr__ = _read_only_delete

    def __init__(
        self,
        proto: GraphProto,
        model: Model,
        parent: GraphView | None = None,
        rows: list[NodeRow] | None = None,
        opset_imports: Mapping[str, int] | None = None,
    ):
        object.__setattr__(self, "_building", True)
        self.name = proto.name
        self.model = model
        model.graph_views.add(self)  # for unlink_views
        self.parent = parent
        # a function body resolves its ops with the function's own opsets
        self.opset_imports = (opset_imports if opset_imports is not None
                              else parent.opset_imports if parent is not None
                              else model.opset_imports)
        self._proto = proto
        self.values: dict[str, ValueView] = {} if parent is None else _ScopedValues(parent.values)
        values = self.values
        types = model.value_types
        init_names = set()
        for t in proto.initializer:
            name = t.name
            init_names.add(name)
            values[name] = _ValueFields(  # dims[:] copies in C; tuple(t.dims) iterates in Python
                name, "tensor", _dtype_of(t.data_type), tuple(t.dims[:]), tensor=t, model=model
            )
        for sparse in proto.sparse_initializer:  # run densified
            t = sparse_to_dense(sparse, model)
            init_names.add(t.name)
            values[t.name] = ValueView(
                t.name, "tensor", _dtype_of(t.data_type), tuple(t.dims), tensor=t, model=model
            )
        graph_inputs = [(vi, vi.name) for vi in proto.input]
        for vi, name in graph_inputs:
            if name not in init_names:
                values[name] = _ValueFields(name, *parse_type(vi.type))
        if rows is None:
            rows = scan_nodes(proto)
        for row in rows:
            if row[7] and (normalize_domain(row[2]), row[1]) == CONSTANT_OP:
                self._add_constant_output(row[0])
        unknown = ("unknown", None, None)
        producer: dict[str, int] = {}  # the last node that writes each name
        for i, row in enumerate(rows):
            for out in row[5]:
                if out:
                    producer[out] = i
                    if out not in values:
                        kind, dt, shape = types.get(out, unknown)
                        values[out] = _ValueFields(out, kind, dt, shape)
        self.inputs = tuple(values[name] for _, name in graph_inputs if name not in init_names)
        self.initializer_inputs = tuple(name for _, name in graph_inputs if name in init_names)
        self.outputs = tuple(self._output_view(vi) for vi in proto.output)
        self.nodes = self._build_nodes(rows, producer)
        self.values = MappingProxyType(values)  # type: ignore[assignment]
        self._building = False

    def _add_constant_output(self, n: NodeProto) -> None:
        """A :data:`CONSTANT_OP` node's output as a constant value, when it is a tensor."""
        attr = n.attribute[0]
        if attr.type == AttributeProto.TENSOR and n.output and n.output[0]:
            t = attr.t
            self.values[n.output[0]] = _ValueFields(
                n.output[0], "tensor", _dtype_of(t.data_type), tuple(t.dims[:]), tensor=t,
                model=self.model,
            )

    def _output_view(self, vi: onnx.ValueInfoProto) -> ValueView:
        view = self.values.get(vi.name)
        if view is None:
            raise ModelValidationError(
                f"{self.model.label}: graph output {vi.name!r} is produced by no node, "
                "input or initializer"
            )
        if view.dtype is None and vi.type.WhichOneof("value"):
            kind, dt, shape = parse_type(vi.type)
            for field, known in (("kind", kind), ("dtype", dt), ("shape", shape)):
                object.__setattr__(view, field, known)  # the graph output's declared type
        return view

    def _build_nodes(self, rows: list[NodeRow], producer: dict[str, int]) -> tuple[NodeView, ...]:
        used: set[str] = set()
        names = []
        for i, row in enumerate(rows):
            name = row[3] or f"{row[1]}_{i}"
            if name in used:
                k = 1
                while f"{name}__{k}" in used:
                    k += 1
                name = f"{name}__{k}"
            used.add(name)
            names.append(name)
        order = self._topological_order(rows, names, producer)
        if order is None:
            return tuple(_NodeFields(row[0], name, i, self, row)
                         for i, (row, name) in enumerate(zip(rows, names, strict=True)))
        return tuple(_NodeFields(rows[i][0], names[i], pos, self, rows[i])
                     for pos, i in enumerate(order))

    def _topological_order(
        self, rows: list[NodeRow], names: list[str], producer: dict[str, int]
    ) -> list[int] | None:
        """The execution order of ``rows``, or ``None`` when they are already in it."""
        values = self.values
        in_order = True
        for i, row in enumerate(rows):
            for name in node_reads(row[0]) if row[6] else row[4]:
                if not name:
                    continue
                j = producer.get(name)
                if j is None:
                    if name not in values:
                        raise ModelValidationError(
                            f"{self.model.label}: node {names[i]!r} ({row[1]}) reads "
                            f"{name!r}, which no node, graph input or initializer provides"
                        )
                elif j >= i:
                    in_order = False
        if in_order:
            return None
        deps = [[j for name in _row_reads(row) if (j := producer.get(name)) is not None]
                for row in rows]
        return _kahn(deps, names, self.model.label)

    def outer_names(self) -> set[str]:
        """The outer-scope names this graph reads (values of the graphs it is nested in)."""
        return captured_names(self._proto)

    def walk(self) -> Iterator[NodeView]:
        """Every node of this graph and of the bodies nested in it, depth first."""
        for node in self.nodes:
            yield node
            if node.has_subgraphs:
                for sub in node.subgraphs.values():
                    yield from sub.walk()

    def __repr__(self) -> str:
        return f"GraphView({self.name!r}, {len(self.nodes)} nodes)"


def unlink_views(graphs: Iterable[GraphView]) -> None:
    """Empty each of ``graphs`` (a model's ``graph_views``): no nodes, values or model left, so
    the views, which refer to each other (a node to its graph, the graph to its nodes and
    model), are freed at once rather than at Python's next full cyclic collection. Only for a
    model whose owner drops it while nobody else holds a view of it."""
    for graph in list(graphs):
        empty = {"_building": False, "name": graph.name, "model": None, "parent": None,
                 "nodes": (), "inputs": (), "outputs": (), "values": _NO_VALUES}
        graph.__dict__.clear()
        graph.__dict__.update(empty)


_NO_VALUES: Mapping[str, ValueView] = MappingProxyType({})


class _ScopedValues(dict):
    """A body graph's values: its own, then the enclosing graphs' (outer scope)."""

    def __init__(self, outer: Mapping[str, ValueView]):
        super().__init__()
        self.outer = outer

    def __missing__(self, key: str) -> ValueView:
        return self.outer[key]

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self.outer

    def get(self, key, default=None):
        return self[key] if key in self else default


# ---------------------------------------------------------------------------------------------
# Node rows, reads and the topological order
# ---------------------------------------------------------------------------------------------


# A node's fields, read from the protobuf once (a field costs far more than a tuple index):
# (proto, op_type, domain as written, name, inputs, outputs, whether an attribute holds a
# graph, whether it has attributes).
NodeRow = tuple[NodeProto, str, str, str, list[str], list[str], bool, bool]
_GRAPH_ATTRIBUTES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
# The ops of onnx's domains with a graph attribute (a test holds this to onnx's schemas); any
# other op of them onnx knows is refused by validation if it has one, so is not looked into
GRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
_ONNX_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


def _scan_node(n: NodeProto) -> NodeRow:
    has_graphs = False
    attributes = n.attribute
    if attributes and (n.op_type in GRAPH_OPS or n.domain not in _ONNX_DOMAINS):
        for a in attributes:
            if a.type in _GRAPH_ATTRIBUTES:
                has_graphs = True
                break
    return (n, n.op_type, n.domain, n.name, n.input[:], n.output[:], has_graphs,
            len(attributes) > 0)


def scan_nodes(g: GraphProto) -> list[NodeRow]:
    """The rows of ``g``'s nodes, in the order the graph lists them."""
    return [_scan_node(n) for n in g.node]


def _row_reads(row: NodeRow) -> list[str]:
    return node_reads(row[0]) if row[6] else [x for x in row[4] if x]


def _kahn(deps: list[list[int]], names: list[str], label: str) -> list[int]:
    n = len(deps)
    users: list[list[int]] = [[] for _ in range(n)]
    indegree = [0] * n
    for i, ds in enumerate(deps):
        for j in set(ds):
            users[j].append(i)
            indegree[i] += 1
    ready = [i for i in range(n) if indegree[i] == 0]
    ready.reverse()
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for u in users[i]:
            indegree[u] -= 1
            if indegree[u] == 0:
                ready.append(u)
    if len(order) < n:
        stuck = sorted(set(range(n)) - set(order))
        shown = ", ".join(repr(names[i]) for i in stuck[:10])
        more = f" and {len(stuck) - 10} more" if len(stuck) > 10 else ""
        raise ModelValidationError(f"{label}: the graph has a cycle through nodes {shown}{more}")
    return order
