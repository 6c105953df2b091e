"""Parts of a graph as providers that compile see them: a partition (a connected group of nodes
placed on one provider, with its boundary inputs, outputs and constants) and the standalone ONNX
model of such a part, or of one node, that a runtime can load.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ep_host.graph import DEFAULT_DOMAIN, NodeView, ValueView, node_proto

if TYPE_CHECKING:
    import onnx


class PartitionView:
    """A connected group of nodes placed on one provider, read-only, handed to
    ``ep_host_compile_partition``.

    ``nodes``: the members in execution order. ``inputs``: the values the group reads from
    outside that are not constants, in the order ``Kernel.run`` receives them. ``outputs``: the
    values it computes that something outside reads (later nodes, the graph's outputs), in the
    order ``Kernel.run`` must return them. ``constants``: the constant values its nodes read
    (weights; each ``ValueView.value`` loads one). :meth:`to_model` writes the group as an ONNX
    model for a runtime to load.
    """

    __slots__ = ("name", "provider", "nodes", "inputs", "outputs", "constants")

    def __init__(self, name: str, provider: str, nodes: Sequence[NodeView],
                 inputs: Sequence[ValueView], outputs: Sequence[ValueView],
                 constants: Sequence[ValueView]):
        self.name = name
        self.provider = provider
        self.nodes = tuple(nodes)
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.constants = tuple(constants)

    def to_model(self) -> onnx.ModelProto:
        """The group as a standalone ONNX model: ``inputs`` as graph inputs, ``constants`` as
        initializers, ``outputs`` as graph outputs, the model's opsets and local functions."""
        return subgraph_model(self.nodes, self.inputs, self.outputs, self.constants, self.name)

    def __repr__(self) -> str:
        return (f"PartitionView({self.name!r} on {self.provider!r}, "
                f"{len(self.nodes)} nodes, {len(self.inputs)} in, {len(self.outputs)} out)")


def node_model(node: NodeView) -> onnx.ModelProto:
    """``node`` alone as an ONNX model: its non-constant inputs as graph inputs, its constant
    inputs as initializers, its outputs as graph outputs (typed as far as loading inferred)."""
    values = [v for v in node.inputs if v is not None]
    inputs = list(dict.fromkeys(v for v in values if not v.is_constant))
    constants = list(dict.fromkeys(v for v in values if v.is_constant))
    outputs = [v for v in node.outputs if v is not None]
    return subgraph_model((node,), inputs, outputs, constants, node.name or node.op_type)


def _value_info(value: ValueView) -> Any:
    from onnx import TypeProto, helper

    if value.kind == "tensor" and value.dtype is not None:
        shape = None if value.shape is None else [
            d if isinstance(d, int) else (d or None) for d in value.shape]
        return helper.make_tensor_value_info(value.name, value.dtype.code, shape)
    return helper.make_value_info(value.name, TypeProto())


def _outer_constants(nodes: Iterable[NodeView]) -> list[ValueView]:
    """Constants the bodies of ``nodes`` read from the enclosing graph."""
    out = []
    for node in nodes:
        for body in node.subgraphs.values():
            for name in sorted(body.outer_names()):
                value = node.graph.values.get(name)
                if value is not None and value.is_constant:
                    out.append(value)
    return out


def subgraph_model(nodes: Sequence[NodeView], inputs: Sequence[ValueView],
                   outputs: Sequence[ValueView], constants: Sequence[ValueView],
                   name: str) -> onnx.ModelProto:
    """``nodes`` (of one graph, in execution order) as a standalone ONNX model."""
    from onnx import helper, numpy_helper

    graph = nodes[0].graph
    constants = list(dict.fromkeys([*constants, *_outer_constants(nodes)]))
    boundary = {v.name for v in (*inputs, *outputs, *constants)}
    inner = [v for node in nodes for v in node.outputs
             if v is not None and v.name not in boundary]
    body = helper.make_graph(
        [node_proto(n) for n in nodes], name,
        [_value_info(v) for v in inputs], [_value_info(v) for v in outputs],
        initializer=[numpy_helper.from_array(v.value, v.name) for v in constants],
        value_info=[_value_info(v) for v in inner if v.kind == "tensor" and v.dtype is not None])
    opsets = [helper.make_opsetid("" if domain == DEFAULT_DOMAIN else domain, version)
              for domain, version in graph.opset_imports.items()]
    model = helper.make_model(body, opset_imports=opsets)
    source = graph.model.proto if graph.model is not None else None
    model.ir_version = source.ir_version if source is not None and source.ir_version else 8
    if source is not None:
        used = {(n.domain, n.op_type) for n in nodes}
        model.functions.extend(f for f in source.functions
                               if (DEFAULT_DOMAIN if not f.domain else f.domain, f.name) in used)
    return model
