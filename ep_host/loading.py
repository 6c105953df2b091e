"""Loading a model: parsing, structural validation, opset resolution and shape inference.

``load_model`` reads no external weight bytes; shape inference (with data propagation) runs on
a copy of the model that carries only small initializers. ``Model`` holds the loaded result.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from functools import cache
from types import MappingProxyType
from typing import Any, NamedTuple
from weakref import WeakSet

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

from ep_host.collector import paused_gc
from ep_host.dtypes import DType, dtype
from ep_host.errors import ModelLoadError, ModelValidationError, ResourceLimitError, memory_stage
from ep_host.graph import (
    CONSTANT_OP,
    DEFAULT_DOMAIN,
    GraphView,
    NodeRow,
    ParsedType,
    ValueView,
    made_static,
    normalize_domain,
    op_schema,
    parse_type,
    scan_nodes,
)
from ep_host.held_weights import (
    SPLIT_MIN_FILE_BYTES,
    HeldWeights,
    file_identity,
    read_split,
    remember_shared,
    return_freed_memory,
    split_shared,
)
from ep_host.ml_types import (
    ML_DOMAIN,
    typed_after_inference,
    typed_before_inference,
    types_without_inference,
    without_tree_tables,
)
from ep_host.prepacked import content_identity
from ep_host.tensors import (
    check_initializer,
    checked_element_count,
    raw_identity,
    readonly,
    tensor_to_array,
)

# Initializers up to this size stay in the shape-inference copy, so data propagation can read
# shape-like constants (a Reshape's target); bigger ones become typed graph inputs there.
INFERENCE_KEEP_BYTES = 1024
# external initializers read in for shape inference: small integer tensors (shapes, axes, bounds)
INFERENCE_READ_ELEMENTS = 1024
INFERENCE_READ_TYPES = frozenset({TensorProto.INT64, TensorProto.INT32})
MAX_PROTOBUF_BYTES = 2**31 - 1  # protobuf cannot parse a message larger than this
MAX_GRAPH_DEPTH = 32  # control-flow bodies nested in bodies, to this depth
PARSED_BYTES_PER_BYTE = 12  # a parsed graph's memory per byte of its protobuf, at most
NEWEST_OPSET = onnx.defs.onnx_opset_version()  # of ai.onnx in the installed onnx


def load_model(
    model: str | os.PathLike[str] | bytes | ModelProto,
    *,
    base_dir: str | None = None,
    infer_shapes: bool = True,
    share_weights: bool = False,
) -> Model:
    """Load an ONNX model from a path, bytes or a ``ModelProto``, without reading external data.

    External data is read, when a value is asked for, only from inside the model's folder (or
    ``base_dir`` for bytes and protos). ``share_weights``: a file's big weights are held once
    in the process for every model loaded from that file with it (sessions sharing prepacked
    constants). Raises :class:`ModelLoadError` naming the file and fault.
    """
    path = None
    held = None
    if isinstance(model, ModelProto):
        proto = model
    elif isinstance(model, bytes | bytearray | memoryview):
        with memory_stage("loading", "<model bytes>", need=PARSED_BYTES_PER_BYTE * len(model)):
            proto = _parse(bytes(model), "<model bytes>")
    else:
        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > MAX_PROTOBUF_BYTES:
                    raise ModelLoadError(_too_big(path, size))
                key = (file_identity(f) if share_weights and size >= SPLIT_MIN_FILE_BYTES
                       else None)
                split = split_shared(f, key) if key is not None else None
                if split is None and size >= SPLIT_MIN_FILE_BYTES:
                    with memory_stage("loading", path):  # big weights out of protobuf
                        split = read_split(f)
                    if split is not None and key is not None:
                        split = split[0], remember_shared(key, split[1])
                if split is not None:
                    data, held = split
                else:
                    f.seek(0)
                    with memory_stage("loading", path):
                        data = f.read()
        except OSError as exc:
            raise ModelLoadError(f"cannot read model {path!r}: {exc.strerror or exc}") from exc
        with memory_stage("loading", path, need=PARSED_BYTES_PER_BYTE * len(data)):
            proto = _parse(data, path)
            del data
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
    with paused_gc(), memory_stage("loading", label, len(proto.graph.node)):
        try:
            return Model(proto, path=path, base_dir=base_dir, infer_shapes=infer_shapes,
                         held=held)
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
    except MemoryError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"{label}: not a valid ONNX protobuf: {exc}") from exc
    return proto


def _too_big(label: str, size: int) -> str:
    return (f"{label}: the model is {size} bytes, over protobuf's limit of {MAX_PROTOBUF_BYTES} "
            "(2 GiB); store its weights as external data")


def _small_tensor(t: TensorProto) -> bool:
    """Whether ``t`` takes at most ``INFERENCE_KEEP_BYTES`` serialized. Its dims decide first
    when they already ask for more (raw data: the type's storage; typed fields: at least a byte
    an element), since ``ByteSize`` walks the whole payload, about 1 ms per megabyte."""
    count = math.prod(t.dims)  # no dim is negative: check_initializer refused those
    least = _storage_bytes(t.data_type, count) if t.HasField("raw_data") else count
    return least <= INFERENCE_KEEP_BYTES and t.ByteSize() <= INFERENCE_KEEP_BYTES


_STORED_TYPES: dict[int, DType | None] = {}

def _storage_bytes(code: int, count: int) -> int:
    """``dtype(code).storage_bytes(count)``, the type looked up once per code; 0 for a code no
    type has (the tensor is then measured)."""
    known = _STORED_TYPES.get(code, _STORED_TYPES)
    if known is _STORED_TYPES:
        try:
            known = _STORED_TYPES[code] = dtype(code)
        except ValueError:
            known = _STORED_TYPES[code] = None
    return 0 if known is None else known.storage_bytes(count)

TRIM_AFTER_NODES = 10_000
TYPED_CHECK_NODES = 64  # a graph this small is checked for declared types even without value infos


# -- The model --------------------------------------------------------------------------------


class Model:
    """A loaded model: its opsets, main :class:`GraphView` and the inferred value types."""

    def __init__(
        self,
        proto: ModelProto,
        *,
        path: str | None = None,
        base_dir: str | None = None,
        infer_shapes: bool = True,
        held: HeldWeights | None = None,
        rewritten: bool = False,  # ep_host.optimize's rewrite, validated as loaded
        types: Mapping[str, ParsedType] | None = None,  # of values the proto leaves untyped
    ):
        self.proto = proto
        # the main graph's big weights when they were kept out of ``proto`` (their initializers
        # hold empty raw data there): pass it on to a model made from a copy of ``proto``
        self.held = held
        self.path = path
        self.label = path or "<model bytes>"
        self.base_dir = base_dir if base_dir is not None else (
            os.path.dirname(os.path.abspath(path)) if path else None
        )
        self.warnings: list[str] = []
        self.shapes_inferred = infer_shapes  # by onnx's inference, else the types it declares
        # set by ep_host.optimize on the model it returns: pass -> rewrites, and each fused
        # node's original nodes (placed instead when no provider claims the fused node)
        self.optimizations: dict[str, int] = {}
        self.unfused: dict[str, list[NodeProto]] = {}
        self.merged: dict[str, str | None] = {}  # a node rewritten away -> who does its work
        self.sources: dict[str, list[str]] = {}  # a rewritten node -> the names it stands for
        self.opset_imports = _opset_imports(proto, self.label)
        opset = self.opset_imports.get(DEFAULT_DOMAIN, 0)
        if opset > NEWEST_OPSET:
            raise ModelValidationError(
                f"{self.label}: the model uses ai.onnx opset {opset}, newer than {NEWEST_OPSET}, "
                f"the newest this onnx {onnx.__version__} knows"
            )
        self.functions = {(normalize_domain(f.domain), f.name): f for f in proto.functions}
        self._constants: dict[str, np.ndarray] = {}
        self.graph_views: WeakSet[GraphView] = WeakSet()  # every view of a graph of this model
        rows = scan_nodes(proto.graph)
        with_graphs = [i for i, row in enumerate(rows) if row[6]]
        scans = [] if rewritten and not with_graphs else _validate_structure(  # bodies: again
            proto.graph, self.label, self.opset_imports, self.functions, rows, rewritten)
        self.has_bodies = bool(with_graphs)  # a main-graph node holds a graph (If, Loop, ...)
        self.value_types = (self._infer_types(with_graphs) if infer_shapes
                            else self._declared_types(proto, with_graphs))
        self.add_types(types or {})
        for scan, name, since_version in scans:
            _check_scan_lengths(scan, name, since_version, self.value_types, self.label)
        if infer_shapes and len(rows) >= TRIM_AFTER_NODES:
            return_freed_memory()
        self.graph = GraphView(proto.graph, self, rows=rows)
        self.unknown_dims_warning = self._unknown_dims_warning()
        if self.unknown_dims_warning is not None:
            self.warnings.append(self.unknown_dims_warning)

    # -- types ------------------------------------------------------------------------------

    @staticmethod
    def _declared_types(
        proto: ModelProto, with_graphs: list[int] | None = None
    ) -> dict[str, ParsedType]:
        """Every typed value of the model, bodies included. ``with_graphs``: the indices of the
        main graph's nodes that hold graphs, when known, so the others' attributes are not read."""
        types: dict[str, ParsedType] = {}
        cache: dict[bytes, ParsedType | None] = {}
        main = proto.graph
        # each graph before its bodies, in order (a stack: a recursive closure is a cycle)
        pending: list[tuple[GraphProto, Any]] = [
            (main, None if with_graphs is None else [main.node[i] for i in with_graphs])]
        while pending:
            g, nodes = pending.pop()
            for vi in (*g.input, *g.value_info, *g.output):
                tp = vi.type
                key = tp.SerializeToString()
                parsed = cache.get(key, cache)
                if parsed is cache:
                    parsed = cache[key] = parse_type(tp) if tp.WhichOneof("value") else None
                if parsed is not None:
                    types[vi.name] = parsed
            bodies: list[tuple[GraphProto, Any]] = []
            for n in (g.node if nodes is None else nodes):
                for a in n.attribute:
                    if a.type == AttributeProto.GRAPH:
                        bodies.append((a.g, None))
                    elif a.type == AttributeProto.GRAPHS:
                        bodies.extend((sub, None) for sub in a.graphs)
            pending.extend(reversed(bodies))
        return types

    def add_types(self, types: Mapping[str, ParsedType]) -> None:
        """Types of values that loading did not see (a function body's internals)."""
        for name, parsed in types.items():
            self.value_types.setdefault(name, parsed)

    def _infer_types(self, with_graphs: list[int] | None = None) -> dict[str, ParsedType]:
        graph = self.proto.graph
        if not with_graphs and not self.proto.functions and (
                len(graph.node) <= TYPED_CHECK_NODES
                or len(graph.value_info) + len(graph.output) >= len(graph.node)):
            declared = self._declared_types(self.proto, with_graphs)
            if made_static(graph.node, declared):  # onnx's inference could only agree
                return declared
            typed = types_without_inference(graph, declared)  # a scikit-learn export
            if typed is not None:
                return typed
        nodes = len(self.proto.graph.node)
        with memory_stage("shape inference", self.label, nodes):
            light = typed_before_inference(self._weightless_copy(), self.proto)
        try:
            with memory_stage("shape inference", self.label, nodes, need=0):  # checked above
                inferred = onnx.shape_inference.infer_shapes(
                    light, check_type=False, strict_mode=False, data_prop=True
                )
        except ResourceLimitError:
            raise
        except Exception as exc:  # onnx raises several kinds; any of them means "no inference"
            self.warnings.append(f"shape inference failed, using declared types only: {exc}")
            inferred = light
        else:
            inferred = typed_after_inference(inferred)
        if len(inferred.graph.node) != len(self.proto.graph.node):
            with_graphs = None
        return self._declared_types(inferred, with_graphs)

    def _weightless_copy(self) -> ModelProto:
        """The model shape inference runs on: its nodes (a tree ensemble's without its tables),
        types, opsets, functions and small initializers. The model itself when that is all it
        holds that inference reads (no big or external initializer, no sparse one, no tree
        tables), since inference never modifies its argument. A
        held initializer (:mod:`ep_host.held_weights`) counts as light, its raw data empty:
        inference reads its dims, and data of integer shape inputs only."""
        src = self.proto
        sg = src.graph
        initializers = list(sg.initializer)
        external = TensorProto.EXTERNAL
        held = self.held.spans if self.held is not None else {}
        small = [t.data_location != external and (t.name in held or _small_tensor(t))
                 for t in initializers]
        nodes = without_tree_tables(sg.node) if any(
            o.domain == ML_DOMAIN for o in src.opset_import) else None
        if all(small) and not sg.sparse_initializer and nodes is None:
            return src
        for i, t in enumerate(initializers):  # shape tensors stored outside: read them in
            if t.data_location == external and t.data_type in INFERENCE_READ_TYPES:
                loaded = self._small_external(t)
                if loaded is not None:
                    initializers[i], small[i] = loaded, True
        # Built in place (``ModelProto(graph=g)`` would copy the graph a second time), with
        # bulk ``extend`` calls rather than one ``append`` per initializer.
        m = onnx.ModelProto(ir_version=src.ir_version)
        g = m.graph
        g.name = sg.name
        g.node.extend(sg.node if nodes is None else nodes)
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
        inputs = {vi.name for vi in g.input}
        g.input.extend([  # sparse initializers: their dense types, no data
            onnx.helper.make_tensor_value_info(sp.values.name, sp.values.data_type, sp.dims)
            for sp in sg.sparse_initializer if sp.values.name not in inputs
        ])
        m.opset_import.extend(src.opset_import)
        m.functions.extend(src.functions)
        return m

    def _small_external(self, t: TensorProto) -> TensorProto | None:
        """External integer initializer ``t`` with its data in memory, when it has at most
        ``INFERENCE_READ_ELEMENTS`` elements (a Reshape target, Slice bounds...) and reads
        cleanly; ``None`` otherwise (a fault is reported where the data is used)."""
        if math.prod(t.dims) > INFERENCE_READ_ELEMENTS or min(t.dims, default=0) < 0:
            return None
        try:
            array = tensor_to_array(t, self)
        except (ModelLoadError, ModelValidationError):
            return None
        return onnx.numpy_helper.from_array(np.ascontiguousarray(array), t.name)

    def _unknown_dims_warning(self) -> str | None:
        """How many main-graph nodes read or write a tensor with a dim nobody knows (onnx's
        ``unk__`` names or none at all), which estimates count as 1."""
        unknown: list[str] = []
        nodes = self.graph.nodes
        by_shape: dict[Any, bool] = {}  # shapes repeat: each is looked into once
        for node in nodes:
            for value in (*node.inputs, *node.outputs):
                if value is None or value.kind != "tensor":
                    continue
                shape = value.shape
                found = by_shape.get(shape)
                if found is None:
                    found = by_shape[shape] = _has_unknown_dim(shape)
                if found:
                    unknown.append(node.name)
                    break
        if not unknown:
            return None
        shown = ", ".join(repr(n) for n in unknown[:3]) + (", ..." if len(unknown) > 3 else "")
        return (f"{len(unknown)} of {len(nodes)} nodes have unknown dims ({shown}); their "
                "estimates count each unknown dim as 1")

    # -- constants ----------------------------------------------------------------------------

    def constant_value(self, name: str, tensor: TensorProto) -> np.ndarray:
        """The data of constant ``name`` (stored in ``tensor``), read once and kept read-only."""
        key = f"{id(tensor)}:{name}"
        array = self._constants.get(key)
        if array is None or self.held is not None and name in self.held.released:
            try:  # (a released one is read from the file again, see ep_host.released)
                if (self.held is not None and name in self.held.spans
                        and len(tensor.raw_data) == 0):
                    array = readonly(self.held.array(name, tensor.data_type, list(tensor.dims)))
                else:
                    array = readonly(tensor_to_array(tensor, self))
            except (ModelLoadError, ModelValidationError, MemoryError):
                raise
            except Exception as exc:
                raise ModelLoadError(f"{self.label}: cannot read initializer {name!r}: "
                                     f"{exc}") from exc
            self._constants[key] = array
        return array

    def constant_identity(self, value: ValueView) -> tuple[str, tuple[int, ...], str]:
        """Constant ``value``'s content identity (``content_identity`` of its array), from its
        raw bytes where they are the array's: a constant another session shares is then never
        read into an array here."""
        found = raw_identity(value._tensor)
        return found if found is not None else content_identity(value.value)

    def adopt_constants(self, before: Model, computed: Mapping[str, np.ndarray]) -> None:
        """Constants of this rewritten model known already, not read again: the numeric arrays
        the rewrite ``computed`` (and wrote as tensors), and those the model ``before`` it read
        of the tensors this one keeps."""
        for name, value in self.graph.values.items():
            tensor, old = value._tensor, before.graph.values.get(name)
            key, array = f"{id(tensor)}:{name}", computed.get(name)
            if tensor is not None and type(array) is np.ndarray and array.dtype.kind in "biuf":
                self._constants[key] = readonly(np.array(array, copy=None, order="C"))
            elif tensor is not None and old is not None and old._tensor is tensor:
                if key in before._constants:  # both alive: one id is one tensor
                    self._constants[key] = before._constants[key]

    def hold_constant(self, value: ValueView, array: np.ndarray) -> None:
        """Keep ``array``, whose contents equal constant ``value``'s data (another session's
        copy, shared by ``share_prepacked``), in place of this model's own copy."""
        self._constants[f"{id(value._tensor)}:{value.name}"] = array

    def constants_read(self) -> list[tuple[str, Any]]:
        """(name, array) of each constant read (or computed by a rewrite) so far."""
        return [(key.partition(":")[2], array) for key, array in self._constants.items()]


def _has_unknown_dim(shape: tuple[Any, ...] | None) -> bool:
    """Whether a tensor's shape has a dim nobody knows: an unknown rank, a dim without value or
    name, or a name onnx's inference made up (``unk__0``) rather than one the model gave."""
    if shape is None:
        return True
    return any(d is None or (isinstance(d, str) and d.startswith("unk__")) for d in shape)


# -- Structural validation --------------------------------------------------------------------


def _opset_imports(proto: ModelProto, label: str) -> dict[str, int]:
    """Each imported domain's version. A domain imported twice (``""`` is ``"ai.onnx"``) is
    one import at one version (skl2onnx 1.20 may write ``""`` twice), refused at two."""
    opsets: dict[str, int] = {}
    for o in proto.opset_import:
        domain = normalize_domain(o.domain)
        if opsets.get(domain, o.version) != o.version:
            raise ModelValidationError(
                f"{label}: opset_import lists domain {domain!r} twice (versions "
                f"{opsets[domain]} and {o.version}); a model imports each domain once")
        opsets[domain] = o.version
    return opsets


def _validate_structure(
    main: GraphProto, label: str, opsets: Mapping[str, int], functions: Mapping[Any, Any],
    rows: list[NodeRow] | None = None, bodies_only: bool = False,
) -> list[tuple[NodeProto, str, int]]:
    """Faults the views would not see or would hide: bodies nested deeper than
    MAX_GRAPH_DEPTH, ops from a domain the model does not import, a node its op's schema does
    not allow (see :func:`_check_node`), a value written twice, a graph output listed twice,
    initializers whose data does not fit their shape. Returns the Scan nodes (node, name,
    schema version), whose input lengths are checked once shapes are known. ``bodies_only``:
    the main graph is the optimizer's rewrite of a validated one; only its nodes' bodies."""
    scans: list[tuple[NodeProto, str, int]] = []
    schemas: dict[tuple[str, str], SchemaRules | None] = {}
    passed: set[tuple[Any, ...]] = set()  # op, counts, attribute names and types found valid
    stack: list[tuple[GraphProto, int, list[NodeRow] | None]] = [(main, 0, rows)]
    while stack:
        g, depth, g_rows = stack.pop()
        if depth > MAX_GRAPH_DEPTH:
            raise ModelValidationError(
                f"{label}: control-flow bodies are nested deeper than {MAX_GRAPH_DEPTH} levels "
                f"(graph {g.name!r})")
        defined: dict[str, str | tuple[str]] = {}
        for vi in g.input:
            defined[vi.name] = "a graph input"
        for t in g.initializer:
            if not bodies_only or depth:
                check_initializer(t, label)
            defined[t.name] = "an initializer"
        for sp in g.sparse_initializer:
            defined[sp.values.name] = "a sparse initializer"
        checked_domains: set[str] = set()
        for i, (n, op_type, domain, name, inputs, outputs, has_graphs, has_attributes) in (
                enumerate(g_rows if g_rows is not None else scan_nodes(g))):
            if bodies_only and depth == 0 and not (has_graphs and op_type == "Scan"):
                stack.extend((b, 1, None) for a in (n.attribute if has_graphs else ()) for b in
                             ([a.g] if a.type == AttributeProto.GRAPH else a.graphs))
                continue
            key = (normalize_domain(domain), op_type)
            if domain not in checked_domains:
                if key[0] not in opsets and key not in functions:
                    raise ModelValidationError(
                        f"{label}: node {name or f'{op_type}_{i}'!r} ({op_type}) is in domain "
                        f"{domain!r}, which the model does not import (no opset_import for it)")
                if key not in functions:
                    checked_domains.add(domain)
            rules = schemas.get(key, schemas)
            if rules is schemas:
                rules = schemas[key] = (None if key in functions
                                        else schema_rules(key[0], op_type, opsets[key[0]]))
            node_label = name or f"{op_type}_{i}"
            if rules is not None:
                attrs = tuple([(a.name, a.type) for a in n.attribute]) if has_attributes else ()
                counts = (key, len(inputs), len(outputs), attrs)
                if counts not in passed:
                    _check_node(n, rules, node_label, inputs, outputs, has_attributes, label)
                    passed.add(counts)
                if has_graphs and key[0] == DEFAULT_DOMAIN:
                    _check_body_counts(n, rules, node_label, label)
                    if op_type == "Scan":
                        scans.append((n, node_label, rules.since_version))
            for out in outputs:
                if out in defined:
                    if not out:
                        continue
                    was = defined[out]  # a text, or (the node that wrote it first,)
                    was = was if isinstance(was, str) else f"written by node {was[0]!r}"
                    raise ModelValidationError(
                        f"{label}: value {out!r} is written by node {node_label!r} ({op_type}) "
                        f"and is also {was}; "
                        "every value has one producer")
                defined[out] = (node_label,)
            if has_graphs:
                for a in n.attribute:
                    if a.type == AttributeProto.GRAPH:
                        stack.append((a.g, depth + 1, None))
                    elif a.type == AttributeProto.GRAPHS:
                        stack.extend((sub, depth + 1, None) for sub in a.graphs)
            elif has_attributes and key == CONSTANT_OP:
                for a in n.attribute:  # their shapes become the constant values' shapes
                    if a.type == AttributeProto.TENSOR:
                        checked_element_count(a.t, label)
        seen: set[str] = set()
        for vi in g.output:
            if vi.name in seen:
                raise ModelValidationError(
                    f"{label}: graph {g.name!r} lists output {vi.name!r} twice")
            seen.add(vi.name)
    return scans


# -- What an op's schema allows ---------------------------------------------------------------


class SchemaRules(NamedTuple):
    """What one op schema allows a node: attributes (name -> type), counts of inputs and
    outputs. ``op`` names the schema as ``"ReduceSum-13"``."""

    op: str
    since_version: int
    attributes: Mapping[str, int]
    required: tuple[str, ...]
    inputs: tuple[int, int]
    outputs: tuple[int, int]


@cache
def schema_rules(domain: str, op_type: str, opset: int) -> SchemaRules | None:
    """The rules of the schema ``op_type`` resolves to at ``opset``; ``None`` when onnx has
    none (a custom op, or one onnx does not know: providers decline those)."""
    schema = op_schema(domain, op_type, opset)
    if schema is None:
        return None
    return SchemaRules(
        f"{op_type}-{schema.since_version}", schema.since_version,
        MappingProxyType({name: int(a.type) for name, a in schema.attributes.items()}),
        tuple(name for name, a in schema.attributes.items() if a.required),
        (schema.min_input, schema.max_input), (schema.min_output, schema.max_output))


def _count_rule(what: str, got: int, allowed: tuple[int, int]) -> str | None:
    low, high = allowed
    if low <= got <= high:
        return None
    takes = (f"{low}" if low == high else f"at least {low}" if high >= 2**31 - 1
             else f"{low} to {high}")
    return f"has {got} {what}; its schema takes {takes}"


def _check_node(n: NodeProto, rules: SchemaRules, node_label: str, inputs: list[str],
                outputs: list[str], has_attributes: bool, label: str) -> None:
    """Refuse a node whose input or output count, attribute names or attribute types its
    op's schema does not allow, or that lacks a required attribute."""
    where = f"{label}: node {node_label!r} ({rules.op})"
    fault = (_count_rule("inputs", len(inputs), rules.inputs)
             or _count_rule("outputs", len(outputs), rules.outputs))
    if fault:
        raise ModelValidationError(f"{where} {fault}")
    names: set[str] = set()
    if has_attributes:
        allowed = rules.attributes
        for a in n.attribute:
            expected = allowed.get(a.name)
            if expected is None:
                known = ", ".join(sorted(allowed)) or "none"
                raise ModelValidationError(
                    f"{where} has attribute {a.name!r}, which {rules.op}'s schema does not "
                    f"have (its attributes: {known})")
            if a.name in names:
                raise ModelValidationError(f"{where} sets attribute {a.name!r} twice")
            if a.type and a.type != expected:
                raise ModelValidationError(
                    f"{where}: attribute {a.name!r} is {_type_name(a.type)}; {rules.op} takes "
                    f"{_type_name(expected)}")
            names.add(a.name)
    for name in rules.required:
        if name not in names:
            raise ModelValidationError(
                f"{where} lacks attribute {name!r}, which {rules.op} requires")


def _type_name(code: int) -> str:
    try:
        return AttributeProto.AttributeType.Name(code)
    except ValueError:
        return f"type {code}"


def _check_body_counts(n: NodeProto, rules: SchemaRules, node_label: str, label: str) -> None:
    """If, Loop and Scan: their bodies' input and output counts against the node's."""
    op = rules.op.rsplit("-", 1)[0]
    where = f"{label}: node {node_label!r} ({rules.op})"
    graphs = {a.name: a.g for a in n.attribute if a.type == AttributeProto.GRAPH}
    outs = len(n.output)
    fault = None
    if op == "If" and "then_branch" in graphs and "else_branch" in graphs:
        then, other = len(graphs["then_branch"].output), len(graphs["else_branch"].output)
        if then != other:
            fault = (f"then_branch has {then} outputs and else_branch {other}; an If's "
                     "branches produce the same outputs")
        elif then != outs:
            fault = f"the node has {outs} outputs but its branches produce {then}; they must agree"
    elif op == "Loop" and "body" in graphs:
        body = graphs["body"]
        carried = len(n.input) - 2
        if len(body.input) != 2 + carried:
            fault = (f"body takes {len(body.input)} inputs; with {carried} carried values it "
                     f"takes {2 + carried} (iteration number, condition, carried values)")
        elif outs < carried:
            fault = f"the node has {outs} outputs, fewer than its {carried} carried values"
        elif len(body.output) != 1 + outs:
            fault = (f"body produces {len(body.output)} outputs; a Loop with {outs} outputs "
                     f"needs {1 + outs} (condition, carried values, scan outputs)")
    elif op == "Scan" and "body" in graphs:
        body = graphs["body"]
        fed = len(n.input) - (1 if rules.since_version == 8 else 0)  # Scan-8: sequence_lens
        scanned = next((a.i for a in n.attribute if a.name == "num_scan_inputs"), 0)
        if not 0 < scanned <= fed:
            fault = f"num_scan_inputs is {scanned}, with {fed} state and scan inputs"
        elif len(body.input) != fed:
            fault = f"body takes {len(body.input)} inputs; the node feeds it {fed}"
        elif len(body.output) != outs:
            fault = f"body produces {len(body.output)} outputs; the node has {outs}"
    if fault:
        raise ModelValidationError(f"{where}: {fault}")


def _check_scan_lengths(n: NodeProto, node_label: str, since_version: int,
                        types: Mapping[str, ParsedType], label: str) -> None:
    """Refuse a Scan whose scan inputs have different known lengths along their scan axes."""
    scanned = next((a.i for a in n.attribute if a.name == "num_scan_inputs"), 0)
    names = list(n.input[len(n.input) - scanned:])
    if since_version == 8:
        axes = [1] * len(names)  # Scan-8: batch first, then the sequence
    else:
        axes = next((list(a.ints) for a in n.attribute if a.name == "scan_input_axes"),
                    [0] * len(names))
    lengths = {}
    for name, axis in zip(names, axes, strict=False):
        shape = types.get(name, (None, None, None))[2]
        if shape is None or not -len(shape) <= axis < len(shape):
            continue
        dim = shape[axis]
        if isinstance(dim, int):
            lengths[name] = dim
    if len(set(lengths.values())) > 1:
        found = ", ".join(f"{name!r}: {length}" for name, length in lengths.items())
        raise ModelValidationError(
            f"{label}: node {node_label!r} (Scan-{since_version}) scans inputs of different "
            f"lengths along their scan axes ({found}); every scan input has the same length")
