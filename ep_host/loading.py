"""Loading a model: parsing, structural validation, opset resolution and shape inference.

``load_model`` reads no external weight bytes; shape inference (with data propagation) runs on
a copy of the model that carries only small initializers. ``Model`` holds the loaded result.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto

from ep_host.errors import ModelLoadError, ModelValidationError, ResourceLimitError, memory_stage
from ep_host.graph import (
    CONSTANT_OP,
    DEFAULT_DOMAIN,
    GraphView,
    NodeRow,
    ParsedType,
    normalize_domain,
    parse_type,
    paused_gc,
    scan_nodes,
)
from ep_host.tensors import check_initializer, checked_element_count, readonly, tensor_to_array

# Initializers up to this size stay in the shape-inference copy, so data propagation can read
# shape-like constants (a Reshape's target); bigger ones become typed graph inputs there.
INFERENCE_KEEP_BYTES = 1024
MAX_PROTOBUF_BYTES = 2**31 - 1  # protobuf cannot parse a message larger than this
MAX_GRAPH_DEPTH = 32  # control-flow bodies nested in bodies, to this depth
PARSED_BYTES_PER_BYTE = 12  # a parsed graph's memory per byte of its protobuf, at most


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
        with memory_stage("loading", "<model bytes>", need=PARSED_BYTES_PER_BYTE * len(model)):
            proto = _parse(bytes(model), "<model bytes>")
    else:
        path = os.fspath(model)
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size > MAX_PROTOBUF_BYTES:
                    raise ModelLoadError(_too_big(path, size))
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
    except MemoryError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"{label}: not a valid ONNX protobuf: {exc}") from exc
    return proto


def _too_big(label: str, size: int) -> str:
    return (f"{label}: the model is {size} bytes, over protobuf's limit of {MAX_PROTOBUF_BYTES} "
            "(2 GiB); store its weights as external data")


TRIM_AFTER_NODES = 10_000


def return_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere
    nothing). onnx's shape inference frees a copy of the model in many small blocks, about
    1 KB per node, that would otherwise stay resident for the life of the process."""
    global _malloc_trim
    if _malloc_trim is None:
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None

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
        rows = scan_nodes(proto.graph)
        _validate_structure(proto.graph, self.label, self.opset_imports, self.functions, rows)
        with_graphs = [i for i, row in enumerate(rows) if row[6]]
        self.value_types = (self._infer_types(with_graphs) if infer_shapes
                            else self._declared_types(proto, with_graphs))
        if infer_shapes and len(rows) >= TRIM_AFTER_NODES:
            return_freed_memory()
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
                    parsed = cache[key] = parse_type(tp) if tp.WhichOneof("value") else None
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
        nodes = len(self.proto.graph.node)
        with memory_stage("shape inference", self.label, nodes):
            light = self._weightless_copy()
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
        small = [t.data_location != external and t.ByteSize() <= INFERENCE_KEEP_BYTES
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
        """The data of constant ``name`` (stored in ``tensor``), read once and kept read-only."""
        key = f"{id(tensor)}:{name}"
        array = self._constants.get(key)
        if array is None:
            try:
                array = readonly(tensor_to_array(tensor, self))
            except (ModelLoadError, ModelValidationError):
                raise
            except Exception as exc:
                raise ModelLoadError(
                    f"{self.label}: cannot read initializer {name!r}: {exc}"
                ) from exc
            self._constants[key] = array
        return array


# ---------------------------------------------------------------------------------------------
# Structural validation
# ---------------------------------------------------------------------------------------------


def _validate_structure(
    main: GraphProto, label: str, opsets: Mapping[str, int], functions: Mapping[Any, Any],
    rows: list[NodeRow] | None = None,
) -> None:
    """Faults the views would not see or would hide: bodies nested deeper than
    MAX_GRAPH_DEPTH, ops from a domain the model does not import, a value written twice, a
    graph output listed twice, initializers whose data does not fit their shape."""
    stack: list[tuple[GraphProto, int, list[NodeRow] | None]] = [(main, 0, rows)]
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
            check_initializer(t, label)
            defined[t.name] = "an initializer"
        checked_domains: set[str] = set()
        for i, (n, op_type, domain, name, _, outputs, has_graphs, has_attributes) in enumerate(
                g_rows if g_rows is not None else scan_nodes(g)):
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
            elif has_attributes and (normalize_domain(domain), op_type) == CONSTANT_OP:
                for a in n.attribute:  # their shapes become the constant values' shapes
                    if a.type == AttributeProto.TENSOR:
                        checked_element_count(a.t, label)
        seen: set[str] = set()
        for vi in g.output:
            if vi.name in seen:
                raise ModelValidationError(
                    f"{label}: graph {g.name!r} lists output {vi.name!r} twice")
            seen.add(vi.name)
