"""Function expansion: an op that has a function body (model-local or from its schema), or a
node that ``ep_host.optimize`` fused, written out as a graph nested in the node's graph, so the
nodes of the body can be placed when no provider claims the op itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto

from ep_host.graph import (
    DEFAULT_DOMAIN,
    GraphView,
    NodeView,
    ParsedType,
    node_proto,
    normalize_domain,
    op_schema,
    parse_type,
)
from ep_host.loading import INFERENCE_KEEP_BYTES


def _function_proto(node: NodeView) -> onnx.FunctionProto | None:
    """The body of ``node``'s op: a model-local function, or the schema's (context-dependent)
    function for the model's opset; ``None`` when the op has none."""
    local = node.graph.model.functions.get((node.domain, node.op_type))
    if local is not None:
        return local
    if node.since_version is None or node.opset is None:
        return None
    schema = op_schema(node.domain, node.op_type, node.opset)
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
                max(versions), node_proto(node).SerializeToString(), types)
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
    for attr in node_proto(node).attribute:
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
    proto = node_proto(node)
    rename = {formal: actual for formal, actual in zip(fn.input, proto.input, strict=False)}
    rename.update({f: "" for f in fn.input[len(proto.input):]})
    rename.update(zip(fn.output, proto.output, strict=False))
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
        if v is not None and v.is_constant and v.nbytes <= INFERENCE_KEEP_BYTES:
            probe.initializer.append(onnx.numpy_helper.from_array(np.asarray(v.value), v.name))
    model = onnx.helper.make_model(
        probe, opset_imports=[onnx.helper.make_opsetid("" if d == DEFAULT_DOMAIN else d, ver)
                              for d, ver in opsets.items()])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception:
        return {}
    return {vi.name: parse_type(vi.type) for vi in inferred.graph.value_info}
