"""Model loading, and the read-only node and value views handed to providers.

Loading parses the protobuf without reading external weights, resolves every node's
``since_version`` from the model's opset imports, and infers shapes (with data propagation) on
a copy of the model that carries no weight bytes. Values read their data only when asked.
"""

from __future__ import annotations

import gc
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from functools import cache
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, TypeProto

from ep_host.dtypes import DType
from ep_host.dtypes import dtype as to_dtype
from ep_host.errors import ModelLoadError, ModelValidationError

DEFAULT_DOMAIN = "ai.onnx"
# Initializers up to this size stay in the shape-inference copy, so data propagation can read
# shape-like constants (a Reshape's target); bigger ones become typed graph inputs there.
_INFERENCE_KEEP_BYTES = 1024
MAX_PROTOBUF_BYTES = 2**31 - 1  # protobuf cannot parse a message larger than this
MAX_GRAPH_DEPTH = 32  # control-flow bodies nested in bodies, to this depth
_INT64_MAX = 2**63 - 1

Shape = tuple[int | str | None, ...]


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while many long-lived objects are built at once.

    Every collection scans all live objects, so building a large model's views (or its
    capability table) with it running costs a third more time; reference counting still frees
    what dies meanwhile (Mercurial's ``nogc`` does the same). Nested and threaded uses are safe:
    only the caller that paused it resumes it.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def normalize_domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain in ("", DEFAULT_DOMAIN) else domain


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------


class ValueView:
    """A tensor (or sequence, optional, map) flowing through the graph, read-only.

    ``kind`` is ``"tensor"``, ``"sequence"``, ``"optional"``, ``"map"`` or ``"unknown"``;
    ``dtype`` is the element type (of the innermost tensor for containers), ``None`` if unknown;
    ``shape`` holds ints for static dims and strings for symbolic ones (``None`` for an unnamed
    unknown dim), or is ``None`` when the rank is unknown. ``value`` reads a constant's data.
    """

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
        self._nbytes = (dtype, shape, n)
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


def _parse_type(tp: TypeProto) -> ParsedType:
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
        _, dt, _ = _parse_type(tp.sequence_type.elem_type)
        return "sequence", dt, None
    if which == "optional_type":
        kind, dt, shape = _parse_type(tp.optional_type.elem_type)
        return "optional", dt, shape
    if which == "map_type":
        return "map", None, None
    return "unknown", None, None


# ---------------------------------------------------------------------------------------------
# Nodes
# ---------------------------------------------------------------------------------------------


@cache
def _schema(domain: str, op_type: str, opset: int) -> onnx.defs.OpSchema | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "" if domain == DEFAULT_DOMAIN else domain)
    except onnx.defs.SchemaError:
        return None


@cache
def _since_version(domain: str, op_type: str, opset: int) -> int | None:
    schema = _schema(domain, op_type, opset)
    return None if schema is None else schema.since_version


_NO_ATTRIBUTES: Mapping[str, Any] = MappingProxyType({})


@cache
def _schema_defaults(domain: str, op_type: str, since_version: int) -> Mapping[str, Any]:
    schema = _schema(domain, op_type, since_version)
    if schema is None:
        return MappingProxyType({})
    out = {}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default.type != AttributeProto.UNDEFINED:
            out[name] = _attribute_value(default, None, None)
    return MappingProxyType(out)


def _attribute_value(attr: AttributeProto, model: Model | None, parent: GraphView | None) -> Any:
    t = attr.type
    if t == AttributeProto.FLOAT:
        return attr.f
    if t == AttributeProto.INT:
        return attr.i
    if t == AttributeProto.STRING:
        return attr.s.decode("utf-8", "replace")
    if t == AttributeProto.FLOATS:
        return tuple(attr.floats)
    if t == AttributeProto.INTS:
        return tuple(attr.ints)
    if t == AttributeProto.STRINGS:
        return tuple(s.decode("utf-8", "replace") for s in attr.strings)
    if t == AttributeProto.TENSOR:
        return _readonly(_tensor_to_array(attr.t, model))
    if t == AttributeProto.TENSORS:
        return tuple(_readonly(_tensor_to_array(x, model)) for x in attr.tensors)
    if t == AttributeProto.GRAPH:
        return GraphView(attr.g, model, parent) if model is not None else attr.g
    if t == AttributeProto.GRAPHS:
        return tuple(GraphView(g, model, parent) for g in attr.graphs)
    if t == AttributeProto.TYPE_PROTO:
        return _parse_type(attr.tp)
    if t == AttributeProto.SPARSE_TENSOR:
        return attr.sparse_tensor
    return None


class NodeView:
    """A node as a provider sees it: read-only, no protobuf.

    ``domain`` is ``"ai.onnx"`` for the default domain. ``since_version`` is the version of the
    op's schema that the model's opset resolves to (``None`` for an op no schema defines).
    ``attributes`` holds Python values with schema defaults filled in. ``inputs`` and
    ``outputs`` are :class:`ValueView` tuples; an omitted optional input is ``None``.
    """

    __slots__ = (
        "name", "op_type", "domain", "since_version", "index", "graph", "_proto", "_attributes",
        "inputs", "outputs", "opset", "_has_graphs", "_has_attributes",
    )

    def __init__(
        self, proto: NodeProto, name: str, index: int, graph: GraphView, row: _Row | None = None
    ):
        # ``row``: the node's fields as _scan_nodes read them, so the protobuf is read once
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
        values = graph.values
        get = values.__getitem__
        self.inputs = (tuple(map(get, inputs)) if "" not in inputs
                       else tuple([values[n] if n else None for n in inputs]))
        self.outputs = (tuple(map(get, outputs)) if "" not in outputs
                        else tuple([values[n] if n else None for n in outputs]))

    @property
    def attributes(self) -> Mapping[str, Any]:
        if self._attributes is None:
            if not self._has_attributes:  # the schema's defaults alone: share the cached mapping
                self._attributes = _NO_ATTRIBUTES if self.since_version is None else (
                    _schema_defaults(self.domain, self.op_type, self.since_version))
                return self._attributes
            out = {}
            if self.since_version is not None:
                out.update(_schema_defaults(self.domain, self.op_type, self.since_version))
            for attr in self._proto.attribute:
                if attr.ref_attr_name:
                    continue  # only inside function bodies, filled by expansion
                out[attr.name] = _attribute_value(attr, self.graph.model, self.graph)
            self._attributes = MappingProxyType(out)
        return self._attributes

    @property
    def subgraphs(self) -> dict[str, GraphView]:
        """The graph-valued attributes (If branches, Loop and Scan bodies)."""
        out = {}
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


# ---------------------------------------------------------------------------------------------
# Graphs
# ---------------------------------------------------------------------------------------------


class GraphView:
    """A graph (the model's main graph or a control-flow body): nodes in topological order,
    its inputs and outputs, and every value it names (outer-scope values included)."""

    def __init__(
        self,
        proto: GraphProto,
        model: Model,
        parent: GraphView | None = None,
        rows: list[_Row] | None = None,
        opset_imports: Mapping[str, int] | None = None,
    ):
        self.name = proto.name
        self.model = model
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
            values[name] = ValueView(  # dims[:] copies in C; tuple(t.dims) iterates in Python
                name, "tensor", _dtype_of(t.data_type), tuple(t.dims[:]), tensor=t, model=model
            )
        graph_inputs = [(vi, vi.name) for vi in proto.input]
        for vi, name in graph_inputs:
            if name not in init_names:
                values[name] = ValueView(name, *_parse_type(vi.type))
        if rows is None:
            rows = _scan_nodes(proto)
        for row in rows:
            if row[1] == "Constant" and not row[2] and row[0].attribute:
                self._add_constant_output(row[0])
        unknown = ("unknown", None, None)
        producer: dict[str, int] = {}  # the last node that writes each name
        for i, row in enumerate(rows):
            for out in row[5]:
                if out:
                    producer[out] = i
                    if out not in values:
                        kind, dt, shape = types.get(out, unknown)
                        values[out] = ValueView(out, kind, dt, shape)
        self.inputs = tuple(values[name] for _, name in graph_inputs if name not in init_names)
        self.initializer_inputs = tuple(name for _, name in graph_inputs if name in init_names)
        self.outputs = tuple(self._output_view(vi) for vi in proto.output)
        self.nodes = self._build_nodes(rows, producer)

    def _add_constant_output(self, n: NodeProto) -> None:
        attr = n.attribute[0]
        if attr.type == AttributeProto.TENSOR and n.output and n.output[0]:
            t = attr.t
            self.values[n.output[0]] = ValueView(
                n.output[0], "tensor", to_dtype(t.data_type), tuple(t.dims), tensor=t,
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
            kind, dt, shape = _parse_type(vi.type)
            view.kind, view.dtype, view.shape = kind, dt, shape
        return view

    def _build_nodes(self, rows: list[_Row], producer: dict[str, int]) -> tuple[NodeView, ...]:
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
            return tuple(NodeView(row[0], name, i, self, row)
                         for i, (row, name) in enumerate(zip(rows, names, strict=True)))
        return tuple(NodeView(rows[i][0], names[i], pos, self, rows[i])
                     for pos, i in enumerate(order))

    def _topological_order(
        self, rows: list[_Row], names: list[str], producer: dict[str, int]
    ) -> list[int] | None:
        """The execution order of ``rows``, or ``None`` when they are already in it."""
        values = self.values
        in_order = True
        for i, row in enumerate(rows):
            for name in _node_reads(row[0]) if row[6] else row[4]:
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

    def walk(self) -> Iterator[NodeView]:
        """Every node of this graph and of the bodies nested in it, depth first."""
        for node in self.nodes:
            yield node
            if node.has_subgraphs:
                for sub in node.subgraphs.values():
                    yield from sub.walk()

    def __repr__(self) -> str:
        return f"GraphView({self.name!r}, {len(self.nodes)} nodes)"


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


# A node's fields, read from the protobuf once: (proto, op_type, domain as written, name,
# inputs, outputs, whether an attribute holds a graph, whether it has attributes). Reading a
# protobuf field costs far more than a tuple index, and building views reads most of them
# several times.
_Row = tuple[NodeProto, str, str, str, list[str], list[str], bool, bool]
_GRAPH_ATTRIBUTES = (AttributeProto.GRAPH, AttributeProto.GRAPHS)


def _scan_node(n: NodeProto) -> _Row:
    has_graphs = False
    attributes = n.attribute
    if attributes:
        for a in attributes:
            if a.type in _GRAPH_ATTRIBUTES:
                has_graphs = True
                break
    return (n, n.op_type, n.domain, n.name, n.input[:], n.output[:], has_graphs,
            len(attributes) > 0)


def _scan_nodes(g: GraphProto) -> list[_Row]:
    return [_scan_node(n) for n in g.node]


def _row_reads(row: _Row) -> list[str]:
    return _node_reads(row[0]) if row[6] else [x for x in row[4] if x]


def _node_reads(n: NodeProto) -> list[str]:
    """Names a node reads: its inputs plus outer-scope names its subgraphs capture."""
    reads = [x for x in n.input if x]
    for attr in n.attribute:
        if attr.type == AttributeProto.GRAPH:
            reads.extend(_captured(attr.g))
        elif attr.type == AttributeProto.GRAPHS:
            for g in attr.graphs:
                reads.extend(_captured(g))
    return reads


def _captured(g: GraphProto) -> set[str]:
    local = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    for n in g.node:
        local.update(o for o in n.output if o)
    out = set()
    for n in g.node:
        out.update(x for x in _node_reads(n) if x not in local)
    out.update(vi.name for vi in g.output if vi.name not in local)
    return out


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


# ---------------------------------------------------------------------------------------------
# Tensors and external data
# ---------------------------------------------------------------------------------------------


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _tensor_to_array(
    t: TensorProto, model: Model | None, base_dir: str | None = None
) -> np.ndarray:
    label = model.label if model is not None else "<model>"
    if t.data_location == TensorProto.EXTERNAL:
        if model is None:
            raise ModelLoadError(f"tensor {t.name!r} has external data but no model folder")
        return model.read_external(t)
    count = _element_count(t, label)
    raw = t.HasField("raw_data")
    try:
        dt = to_dtype(t.data_type)
        fixed = dt.bits % 8 == 0 and dt.name != "string"
    except Exception:
        fixed = False
    if raw and not fixed:  # unknown, packed or string: to_array would not notice a bad length
        _check_raw_length(t, count, label)
    try:
        return onnx.numpy_helper.to_array(t)
    except Exception as exc:
        if raw:  # a fixed-width type fails there exactly when its length is wrong: say so
            _check_raw_length(t, count, label)
        raise ModelLoadError(
            f"{label}: cannot read tensor {t.name!r}: {type(exc).__name__}: {exc}") from exc


def _check_raw_length(t: TensorProto, count: int, label: str) -> None:
    """Refuse raw data whose length is not what ``count`` elements of the type take (reading
    ``len(t.raw_data)`` copies the payload, so only where it is needed)."""
    try:
        expected = to_dtype(t.data_type).storage_bytes(count)
    except Exception as exc:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} has unknown data type {t.data_type}") from exc
    got = len(t.raw_data)
    if got != expected:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} of shape {list(t.dims)} needs {expected} bytes of "
            f"raw data, it holds {got}")


def _element_count(t: TensorProto, label: str) -> int:
    """The element count ``t.dims`` declares, refused when negative or past int64."""
    n = 1
    for d in t.dims:
        if d < 0:
            raise ModelValidationError(
                f"{label}: tensor {t.name!r} has a negative dim in shape {list(t.dims)}")
        n *= d
    if n > _INT64_MAX:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} has shape {list(t.dims)}, whose element count "
            "overflows int64")
    return n


# The typed field holding each data type's values, and how many entries one element takes.
_TYPED_FIELDS = {
    TensorProto.FLOAT: ("float_data", 1), TensorProto.DOUBLE: ("double_data", 1),
    TensorProto.INT64: ("int64_data", 1), TensorProto.UINT64: ("uint64_data", 1),
    TensorProto.UINT32: ("uint64_data", 1), TensorProto.INT32: ("int32_data", 1),
    TensorProto.INT16: ("int32_data", 1), TensorProto.INT8: ("int32_data", 1),
    TensorProto.UINT16: ("int32_data", 1), TensorProto.UINT8: ("int32_data", 1),
    TensorProto.BOOL: ("int32_data", 1), TensorProto.FLOAT16: ("int32_data", 1),
    TensorProto.BFLOAT16: ("int32_data", 1), TensorProto.STRING: ("string_data", 1),
    TensorProto.COMPLEX64: ("float_data", 2), TensorProto.COMPLEX128: ("double_data", 2),
}


def _check_initializer(t: TensorProto, label: str) -> None:
    """Dims and, for typed (not raw, not external) data, the value count against the shape;
    raw data is checked when it is read (reading its length copies it)."""
    n = _element_count(t, label)
    if t.data_location == TensorProto.EXTERNAL or t.HasField("raw_data"):
        return
    typed = _TYPED_FIELDS.get(t.data_type)
    if typed is None:
        return
    got = len(getattr(t, typed[0]))
    if got != n * typed[1]:
        raise ModelValidationError(
            f"{label}: tensor {t.name!r} of shape {list(t.dims)} needs {n * typed[1]} values "
            f"in {typed[0]}, it holds {got}")


def _validate_structure(
    main: GraphProto, label: str, opsets: Mapping[str, int], functions: Mapping[Any, Any],
    rows: list[_Row] | None = None,
) -> None:
    """Faults the views would not see or would hide: bodies nested deeper than
    MAX_GRAPH_DEPTH, ops from a domain the model does not import, a value written twice, a
    graph output listed twice, initializers whose data does not fit their shape."""
    stack: list[tuple[GraphProto, int, list[_Row] | None]] = [(main, 0, rows)]
    while stack:
        g, depth, g_rows = stack.pop()
        if depth > MAX_GRAPH_DEPTH:
            raise ModelValidationError(
                f"{label}: control-flow bodies are nested deeper than {MAX_GRAPH_DEPTH} levels "
                f"(graph {g.name!r})")
        defined: dict[str, str] = {}
        for vi in g.input:
            defined[vi.name] = "a graph input"
        for t in g.initializer:
            _check_initializer(t, label)
            defined[t.name] = "an initializer"
        checked_domains: set[str] = set()
        for i, (n, op_type, domain, name, _, outputs, has_graphs, has_attributes) in enumerate(
                g_rows if g_rows is not None else _scan_nodes(g)):
            if domain not in checked_domains:
                if normalize_domain(domain) not in opsets and (
                        normalize_domain(domain), op_type) not in functions:
                    raise ModelValidationError(
                        f"{label}: node {name or f'{op_type}_{i}'!r} ({op_type}) is in domain "
                        f"{domain!r}, which the model does not import (no opset_import for it)")
                if (normalize_domain(domain), op_type) not in functions:
                    checked_domains.add(domain)
            for out in outputs:
                if out in defined:
                    if not out:
                        continue
                    raise ModelValidationError(
                        f"{label}: value {out!r} is written by node "
                        f"{name or f'{op_type}_{i}'!r} ({op_type}) and is also {defined[out]}; "
                        "every value has one producer")
                defined[out] = f"written by node {name or f'{op_type}_{i}'!r}"
            if has_graphs:
                for a in n.attribute:
                    if a.type == AttributeProto.GRAPH:
                        stack.append((a.g, depth + 1, None))
                    elif a.type == AttributeProto.GRAPHS:
                        stack.extend((sub, depth + 1, None) for sub in a.graphs)
            elif has_attributes and op_type == "Constant":
                for a in n.attribute:
                    if a.type == AttributeProto.TENSOR:
                        _element_count(a.t, label)
        seen: set[str] = set()
        for vi in g.output:
            if vi.name in seen:
                raise ModelValidationError(
                    f"{label}: graph {g.name!r} lists output {vi.name!r} twice")
            seen.add(vi.name)


def resolve_external_path(base_dir: str, location: str, label: str, tensor: str) -> str:
    """The file an external-data ``location`` names, refused unless it lies inside ``base_dir``."""
    if not location or os.path.isabs(location) or location.startswith(("/", "\\")):
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data at {location!r}: only paths relative "
            "to the model's folder are allowed"
        )
    base = os.path.realpath(base_dir)
    target = os.path.realpath(os.path.join(base, location))
    if os.path.commonpath([base, target]) != base:
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data at {location!r}, which resolves "
            f"outside the model's folder {base_dir!r}"
        )
    try:
        st = os.stat(target)
    except FileNotFoundError:
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data in {location!r}, which does not exist"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelLoadError(
            f"{label}: tensor {tensor!r} has external data in {location!r}, not a regular file"
        )
    return target


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


class Model:
    """A loaded model: its opsets, main :class:`GraphView` and the inferred value types."""

    def __init__(
        self,
        proto: ModelProto,
        *,
        path: str | None = None,
        base_dir: str | None = None,
        infer_shapes: bool = True,
    ):
        self.proto = proto
        self.path = path
        self.label = path or "<model bytes>"
        self.base_dir = base_dir if base_dir is not None else (
            os.path.dirname(os.path.abspath(path)) if path else None
        )
        self.warnings: list[str] = []
        # set by ep_host.optimize on the model it returns: pass -> rewrites, and each fused
        # node's original nodes (placed instead when no provider claims the fused node)
        self.optimizations: dict[str, int] = {}
        self.unfused: dict[str, list[NodeProto]] = {}
        self.merged: dict[str, str | None] = {}  # a node rewritten away -> who does its work
        self.opset_imports = {normalize_domain(o.domain): o.version for o in proto.opset_import}
        newest = onnx.defs.onnx_opset_version()
        opset = self.opset_imports.get(DEFAULT_DOMAIN, 0)
        if opset > newest:
            raise ModelValidationError(
                f"{self.label}: the model uses ai.onnx opset {opset}, newer than {newest}, "
                f"the newest this onnx {onnx.__version__} knows"
            )
        self.functions = {(normalize_domain(f.domain), f.name): f for f in proto.functions}
        self._constants: dict[str, np.ndarray] = {}
        rows = _scan_nodes(proto.graph)
        _validate_structure(proto.graph, self.label, self.opset_imports, self.functions, rows)
        with_graphs = [i for i, row in enumerate(rows) if row[6]]
        self.value_types = (self._infer_types(with_graphs) if infer_shapes
                            else self._declared_types(proto, with_graphs))
        self.graph = GraphView(proto.graph, self, rows=rows)

    # -- types ------------------------------------------------------------------------------

    @staticmethod
    def _declared_types(
        proto: ModelProto, with_graphs: list[int] | None = None
    ) -> dict[str, ParsedType]:
        """Every typed value of the model, bodies included. ``with_graphs``: the indices of the
        main graph's nodes that hold graphs, when known, so the others' attributes are not read."""
        types: dict[str, ParsedType] = {}
        cache: dict[bytes, ParsedType | None] = {}

        def visit(g: GraphProto, nodes: Any = None) -> None:
            for vi in (*g.input, *g.value_info, *g.output):
                tp = vi.type
                key = tp.SerializeToString()
                parsed = cache.get(key, cache)
                if parsed is cache:
                    parsed = cache[key] = _parse_type(tp) if tp.WhichOneof("value") else None
                if parsed is not None:
                    types[vi.name] = parsed
            for n in (g.node if nodes is None else nodes):
                for a in n.attribute:
                    if a.type == AttributeProto.GRAPH:
                        visit(a.g)
                    elif a.type == AttributeProto.GRAPHS:
                        for sub in a.graphs:
                            visit(sub)

        main = proto.graph
        if with_graphs is not None:
            visit(main, [main.node[i] for i in with_graphs])
        else:
            visit(main)
        return types

    def add_types(self, types: Mapping[str, ParsedType]) -> None:
        """Types of values that loading did not see (a function body's internals)."""
        for name, parsed in types.items():
            self.value_types.setdefault(name, parsed)

    def _infer_types(self, with_graphs: list[int] | None = None) -> dict[str, ParsedType]:
        light = self._weightless_copy()
        try:
            inferred = onnx.shape_inference.infer_shapes(
                light, check_type=False, strict_mode=False, data_prop=True
            )
        except Exception as exc:  # onnx raises several kinds; any of them means "no inference"
            self.warnings.append(f"shape inference failed, using declared types only: {exc}")
            inferred = light
        if len(inferred.graph.node) != len(self.proto.graph.node):
            with_graphs = None
        return self._declared_types(inferred, with_graphs)

    def _weightless_copy(self) -> ModelProto:
        """The model shape inference runs on: its nodes, types, opsets, functions and small
        initializers. The model itself when that is all it holds that inference reads (no big or
        external initializer, no sparse one), since inference never modifies its argument."""
        src = self.proto
        sg = src.graph
        initializers = list(sg.initializer)
        external = TensorProto.EXTERNAL
        small = [t.data_location != external and t.ByteSize() <= _INFERENCE_KEEP_BYTES
                 for t in initializers]
        if all(small) and not sg.sparse_initializer:
            return src
        # Built in place (``ModelProto(graph=g)`` would copy the graph a second time), with
        # bulk ``extend`` calls rather than one ``append`` per initializer.
        m = onnx.ModelProto(ir_version=src.ir_version)
        g = m.graph
        g.name = sg.name
        g.node.extend(sg.node)
        g.output.extend(sg.output)
        g.value_info.extend(sg.value_info)
        g.input.extend(sg.input)
        if all(small):
            g.initializer.extend(initializers)
        else:
            inputs = {vi.name for vi in sg.input}
            g.initializer.extend([t for t, keep in zip(initializers, small, strict=True) if keep])
            g.input.extend([
                onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                for t, keep in zip(initializers, small, strict=True)
                if not keep and t.name not in inputs
            ])
        m.opset_import.extend(src.opset_import)
        m.functions.extend(src.functions)
        return m

    # -- constants ----------------------------------------------------------------------------

    def constant_value(self, name: str, tensor: TensorProto) -> np.ndarray:
        key = f"{id(tensor)}:{name}"
        array = self._constants.get(key)
        if array is None:
            try:
                array = _readonly(_tensor_to_array(tensor, self))
            except (ModelLoadError, ModelValidationError):
                raise
            except Exception as exc:
                raise ModelLoadError(
                    f"{self.label}: cannot read initializer {name!r}: {exc}"
                ) from exc
            self._constants[key] = array
        return array

    def read_external(self, t: TensorProto) -> np.ndarray:
        info = {e.key: e.value for e in t.external_data}
        if self.base_dir is None:
            raise ModelLoadError(
                f"{self.label}: tensor {t.name!r} has external data, but the model was given as "
                "bytes without a base directory (pass base_dir=)"
            )
        path = resolve_external_path(self.base_dir, info.get("location", ""), self.label, t.name)
        offset = int(info.get("offset", 0) or 0)
        size = os.path.getsize(path)
        expected = to_dtype(t.data_type).storage_bytes(int(np.prod(t.dims, dtype=np.int64)))
        length = int(info["length"]) if info.get("length") else expected
        if offset < 0 or length < 0 or offset + length > size:
            raise ModelLoadError(
                f"{self.label}: tensor {t.name!r} reads bytes {offset}..{offset + length} of "
                f"{info.get('location')!r}, which has {size}"
            )
        with open(path, "rb") as f:
            f.seek(offset)
            raw = f.read(length)
        copy = TensorProto()
        copy.CopyFrom(t)
        del copy.external_data[:]
        copy.data_location = TensorProto.DEFAULT
        copy.raw_data = raw
        return onnx.numpy_helper.to_array(copy)


# ---------------------------------------------------------------------------------------------
# Function expansion
# ---------------------------------------------------------------------------------------------


def _function_proto(node: NodeView) -> onnx.FunctionProto | None:
    """The body of ``node``'s op: a model-local function, or the schema's (context-dependent)
    function for the model's opset; ``None`` when the op has none."""
    local = node.graph.model.functions.get((node.domain, node.op_type))
    if local is not None:
        return local
    if node.since_version is None or node.opset is None:
        return None
    schema = _schema(node.domain, node.op_type, node.opset)
    if schema is None:
        return None
    if schema.has_function:
        versions = [v for v in schema.function_opset_versions if v <= node.opset]
        if versions:
            data = schema.get_function_with_opset_version(max(versions))
            return onnx.FunctionProto.FromString(data) if data else None
    if schema.has_context_dependent_function:
        versions = [v for v in schema.context_dependent_function_opset_versions
                    if v <= node.opset]
        if not versions or any(v is not None and v.dtype is None for v in node.inputs):
            return None
        types = [onnx.helper.make_tensor_type_proto(v.dtype.code, None).SerializeToString()
                 if v is not None else onnx.TypeProto().SerializeToString()
                 for v in node.inputs]
        try:
            data = schema.get_context_dependent_function_with_opset_version(
                max(versions), node._proto.SerializeToString(), types)
        except Exception:  # onnx refuses contexts it cannot build a body for
            return None
        return onnx.FunctionProto.FromString(data) if data else None
    return None


def _rename_fields(fields: Iterable[Any], rename: dict[str, str], prefix: str) -> None:
    for field in fields:
        for k, name in enumerate(field):
            if name:
                field[k] = rename.setdefault(name, prefix + name)


def _rename_graph(g: GraphProto, rename: dict[str, str], prefix: str) -> None:
    """Rename every name in a body nested in a function, consistently with the function's own
    renaming, so the body's outer-scope reads find the expanded values."""
    for vi in (*g.input, *g.output, *g.value_info):
        vi.name = rename.setdefault(vi.name, prefix + vi.name)
    for t in g.initializer:
        t.name = rename.setdefault(t.name, prefix + t.name)
    for n in g.node:
        _rename_fields((n.input, n.output), rename, prefix)
        for attr in n.attribute:
            if attr.type == AttributeProto.GRAPH:
                _rename_graph(attr.g, rename, prefix)
            elif attr.type == AttributeProto.GRAPHS:
                for sub in attr.graphs:
                    _rename_graph(sub, rename, prefix)


def _caller_attribute(node: NodeView, name: str, ref: str) -> AttributeProto | None:
    for attr in node._proto.attribute:
        if attr.name == ref:
            copy = AttributeProto()
            copy.CopyFrom(attr)
            copy.name = name
            return copy
    value = node.attributes.get(ref)
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        value = onnx.numpy_helper.from_array(value)
    return onnx.helper.make_attribute(name, value)


def expand_function(node: NodeView) -> GraphView | None:
    """``node`` written out as its function body: a graph nested in the node's graph whose
    nodes read the node's inputs and write its outputs; internal values are prefixed with the
    node's name. ``None`` when the op has no function body."""
    if node.graph.parent is None and node.name in node.graph.model.unfused:
        return _unfused_body(node)
    fn = _function_proto(node)
    if fn is None:
        return None
    prefix = f"{node.name}::"
    rename = {formal: actual for formal, actual in zip(fn.input, node._proto.input, strict=False)}
    rename.update({f: "" for f in fn.input[len(node._proto.input):]})
    rename.update(zip(fn.output, node._proto.output, strict=False))
    defaults = {a.name: a for a in fn.attribute_proto}
    nodes = []
    for i, inner in enumerate(fn.node):
        copy = NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}{inner.name or f'{inner.op_type}_{i}'}"
        _rename_fields((copy.input, copy.output), rename, prefix)
        kept = []
        for attr in copy.attribute:
            if attr.type == AttributeProto.GRAPH:
                _rename_graph(attr.g, rename, prefix)
            elif attr.type == AttributeProto.GRAPHS:
                for g in attr.graphs:
                    _rename_graph(g, rename, prefix)
            if attr.ref_attr_name:
                value = _caller_attribute(node, attr.name, attr.ref_attr_name)
                if value is None and attr.ref_attr_name in defaults:
                    value = AttributeProto()
                    value.CopyFrom(defaults[attr.ref_attr_name])
                    value.name = attr.name
                if value is not None:
                    kept.append(value)
            else:
                kept.append(attr)
        del copy.attribute[:]
        copy.attribute.extend(kept)
        nodes.append(copy)
    opsets = {normalize_domain(o.domain): o.version for o in fn.opset_import}
    return _nested_body(node, nodes, f"{node.name} ({node.qualified_op} expanded)", opsets)


def _unfused_body(node: NodeView) -> GraphView:
    """A fused node's original nodes (``ep_host.optimize``), as a body nested in its graph."""
    return _nested_body(node, node.graph.model.unfused[node.name], f"{node.name} (unfused)")


def _nested_body(node: NodeView, nodes: Iterable[NodeProto], title: str,
                 opsets: Mapping[str, int] | None = None) -> GraphView:
    """``nodes`` in place of ``node``: a graph nested in the node's graph, its internal types
    inferred; ``opsets`` adds to (or overrides) the graph's own imports."""
    imports = {**node.graph.opset_imports, **(opsets or {})}
    graph = onnx.helper.make_graph(list(nodes), title, [], [])
    node.graph.model.add_types(_infer_body_types(node, graph, imports))
    return GraphView(graph, node.graph.model, parent=node.graph, opset_imports=imports)


def _infer_body_types(node: NodeView, graph: GraphProto, opsets: Mapping[str, int]
                      ) -> dict[str, ParsedType]:
    """Types of a body's internal values, by onnx shape inference on a model of the body."""
    inputs = []
    for v in node.inputs:
        if v is not None and v.dtype is not None and v.kind == "tensor":
            shape = None if v.shape is None else [d if d is not None else "?" for d in v.shape]
            inputs.append(onnx.helper.make_tensor_value_info(v.name, v.dtype.code, shape))
    probe = onnx.helper.make_graph(list(graph.node), "probe", inputs, [])
    for v in node.inputs:
        if v is not None and v.is_constant and v.nbytes <= _INFERENCE_KEEP_BYTES:
            probe.initializer.append(onnx.numpy_helper.from_array(np.asarray(v.value), v.name))
    model = onnx.helper.make_model(
        probe, opset_imports=[onnx.helper.make_opsetid("" if d == DEFAULT_DOMAIN else d, ver)
                              for d, ver in opsets.items()])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        return {}
    return {vi.name: _parse_type(vi.type) for vi in inferred.graph.value_info}


def load_model(
    model: str | os.PathLike[str] | bytes | ModelProto,
    *,
    base_dir: str | None = None,
    infer_shapes: bool = True,
) -> Model:
    """Load an ONNX model from a path, bytes or a ``ModelProto``, without reading external data.

    External data is read, when a value is asked for, only from inside the model's folder (or
    ``base_dir`` for bytes and protos). Raises :class:`ModelLoadError` naming the file and fault.
    """
    path = None
    if isinstance(model, ModelProto):
        proto = model
    elif isinstance(model, bytes | bytearray | memoryview):
        proto = _parse(bytes(model), "<model bytes>")
    else:
        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > MAX_PROTOBUF_BYTES:
                    raise ModelLoadError(_too_big(path, size))
                data = f.read()
        except OSError as exc:
            raise ModelLoadError(f"cannot read model {path!r}: {exc.strerror or exc}") from exc
        proto = _parse(data, path)
    label = path or "<model bytes>"
    if not proto.HasField("graph"):
        raise ModelLoadError(f"{label}: not an ONNX model (it has no graph)")
    if proto.ir_version <= 0:
        raise ModelLoadError(
            f"{label}: not an ONNX model (ir_version is {proto.ir_version}; a ModelProto has one "
            "from 1 on; is this another message, e.g. a bare graph or tensor?)")
    if proto.ir_version > onnx.IR_VERSION:
        raise ModelValidationError(
            f"{label}: the model has IR version {proto.ir_version}, newer than "
            f"{onnx.IR_VERSION}, the newest this onnx {onnx.__version__} supports")
    with paused_gc():
        try:
            return Model(proto, path=path, base_dir=base_dir, infer_shapes=infer_shapes)
        except (ModelLoadError, ModelValidationError):
            raise
        except (ValueError, TypeError, KeyError, IndexError, AttributeError,
                RecursionError) as exc:  # a field the views cannot read (a bad type code...)
            raise ModelValidationError(
                f"{label}: invalid model: {type(exc).__name__}: {exc}") from exc


def _parse(data: bytes, label: str) -> ModelProto:
    if not data:
        raise ModelLoadError(f"{label}: the file is empty")
    if len(data) > MAX_PROTOBUF_BYTES:
        raise ModelLoadError(_too_big(label, len(data)))
    proto = ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as exc:
        raise ModelLoadError(f"{label}: not a valid ONNX protobuf: {exc}") from exc
    return proto


def _too_big(label: str, size: int) -> str:
    return (f"{label}: the model is {size} bytes, over protobuf's limit of {MAX_PROTOBUF_BYTES} "
            "(2 GiB); store its weights as external data")
