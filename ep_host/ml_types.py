"""Output types of ai.onnx.ml nodes that onnx's shape inference leaves untyped (it has no
inference for Scaler, Normalizer, Binarizer, Imputer, LinearRegressor, LinearClassifier or the
tree ensembles), worked out from the input's type and the node's attributes as the operator
specification states them.

A plan that knows every value's type and shape checks a kernel's output with one quick test,
and a run whose values are all known to be small skips the BLAS thread limit (2-3 us of a
scikit-learn export's 5-10 us run). Only rank-2 inputs ([N, features]) are typed here; other
shapes stay unknown and are checked at run time as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TensorProto,
    TypeProto,
    ValueInfoProto,
)

from ep_host.graph import ParsedType, made_static

ML_DOMAIN = "ai.onnx.ml"
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
STRING = TensorProto.STRING

# an output's type: (element type, or None for the input's own; its dims after N, or None
# for the input's dims after N)
OutputRule = tuple[int | None, tuple[int, ...] | None]


def _attribute(node: NodeProto, name: str) -> Any:
    for a in node.attribute:
        if a.name == name:
            if a.type == AttributeProto.INT:
                return a.i
            if a.type in (AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS):
                return list(a.ints or a.floats or a.strings)
            return None
    return None


def _labels(node: NodeProto) -> tuple[int, int] | None:
    """(the label's element type, the number of classes), from classlabels_ints/strings."""
    ints, strings = _attribute(node, "classlabels_int64s") or _attribute(
        node, "classlabels_ints"), _attribute(node, "classlabels_strings")
    if bool(ints) == bool(strings):
        return None
    return (INT64, len(ints)) if ints else (STRING, len(strings))


def _same(node: NodeProto) -> list[OutputRule] | None:
    return [(None, None)]


def _float_same(node: NodeProto) -> list[OutputRule] | None:
    return [(FLOAT, None)]


def _linear_regressor(node: NodeProto) -> list[OutputRule] | None:
    targets = _attribute(node, "targets")
    return [(FLOAT, (1 if targets is None else targets,))]


def _linear_classifier(node: NodeProto) -> list[OutputRule] | None:
    labels = _labels(node)
    intercepts = _attribute(node, "intercepts") or []
    if labels is None or not intercepts:
        return None
    label_type, classes = labels
    # one score column s for two classes gives both, [1 - s, s]
    columns = 2 if len(intercepts) == 1 and classes == 2 else len(intercepts)
    return [(label_type, ()), (FLOAT, (columns,))]


def _tree_regressor(node: NodeProto) -> list[OutputRule] | None:
    targets = _attribute(node, "n_targets")
    return None if not targets else [(FLOAT, (targets,))]


def _tree_classifier(node: NodeProto) -> list[OutputRule] | None:
    labels = _labels(node)
    if labels is None:
        return None
    label_type, classes = labels
    return [(label_type, ()), (FLOAT, (classes,))]


RULES: dict[str, Callable[[NodeProto], list[OutputRule] | None]] = {
    "Scaler": _float_same,
    "Normalizer": _float_same,
    "Binarizer": _same,
    "Imputer": _same,
    "LinearRegressor": _linear_regressor,
    "LinearClassifier": _linear_classifier,
    "TreeEnsembleRegressor": _tree_regressor,
    "TreeEnsembleClassifier": _tree_classifier,
}


TREE_OPS = ("TreeEnsembleRegressor", "TreeEnsembleClassifier")
TREE_TABLES = ("nodes_", "target_", "class_")
"""Prefixes of those ensembles' per-node and per-leaf attributes (``classlabels_*`` is not
one): neither onnx's shape inference nor :data:`RULES` read them."""


def without_tree_tables(nodes: Iterable[NodeProto]) -> list[NodeProto] | None:
    """``nodes`` with each tree ensemble's tables (:data:`TREE_TABLES`) left out of a copy of
    it, for shape inference to read; ``None`` when no node has them. onnx's inference
    serializes its model and reads it back: a scikit-learn GradientBoosting export's 1,500-node
    tables took 0.30 of its 0.31 ms (RandomForest 0.44 ms)."""
    light: list[NodeProto] = []
    found = False
    for node in nodes:
        if node.domain == ML_DOMAIN and node.op_type in TREE_OPS and any(
                a.name.startswith(TREE_TABLES) for a in node.attribute):
            found = True
            node = NodeProto(name=node.name, op_type=node.op_type, domain=node.domain,
                             input=node.input, output=node.output,
                             attribute=[a for a in node.attribute
                                        if not a.name.startswith(TREE_TABLES)])
        light.append(node)
    return light if found else None


def _tensor_type(elem: int, dims: Iterable[TensorProto | Any]) -> TypeProto:
    tp = TypeProto()
    tensor = tp.tensor_type
    tensor.elem_type = elem
    tensor.shape.SetInParent()
    for d in dims:
        tensor.shape.dim.add().CopyFrom(d)
    return tp


def _fixed(value: int) -> Any:
    d = TypeProto.Tensor().shape.dim.add()
    d.dim_value = value
    return d


def add_ml_types(graph: GraphProto) -> list[str]:
    """Add to ``graph``'s value_info the types of the untyped outputs of its ai.onnx.ml nodes
    that :data:`RULES` know, in node order (so that one node's typed output types the next);
    returns the names typed."""
    known: dict[str, TypeProto] = {}
    for vi in (*graph.input, *graph.value_info, *graph.output):
        tensor = vi.type.tensor_type if vi.type.WhichOneof("value") == "tensor_type" else None
        if tensor is not None and tensor.elem_type and tensor.HasField("shape"):
            known[vi.name] = vi.type
    # graph outputs declared without a shape: typed in place where the element type agrees
    unshaped = {vi.name: vi for vi in graph.output if vi.name not in known}
    for t in graph.initializer:
        known.setdefault(t.name, _tensor_type(t.data_type, (_fixed(d) for d in t.dims)))
    typed: list[str] = []
    for node in graph.node:
        rule = RULES.get(node.op_type) if node.domain == ML_DOMAIN else None
        if rule is None or not node.input or not node.output:
            continue
        x = known.get(node.input[0])
        if x is None or not x.tensor_type.HasField("shape") or len(x.tensor_type.shape.dim) != 2:
            continue
        outputs = rule(node)
        if outputs is None or len(outputs) < len(node.output):
            continue
        n, features = x.tensor_type.shape.dim
        for name, (elem, after) in zip(node.output, outputs, strict=False):
            if not name or name in known:
                continue
            dims = [n] + ([features] if after is None else [_fixed(d) for d in after])
            tp = _tensor_type(x.tensor_type.elem_type if elem is None else elem, dims)
            declared = unshaped.get(name)
            if declared is None:
                graph.value_info.append(ValueInfoProto(name=name, type=tp))
            elif declared.type.WhichOneof("value") in (None, "tensor_type") and \
                    declared.type.tensor_type.elem_type in (0, tp.tensor_type.elem_type):
                declared.type.CopyFrom(tp)
            else:
                continue  # declared otherwise: the run checks it
            known[name] = tp
            typed.append(name)
    return typed


def ml_typed_copy(graph: GraphProto, declared: Mapping[str, ParsedType]) -> ModelProto | None:
    """A model holding what typing ``graph`` reads (its nodes without tree tables, inputs,
    outputs, value infos and its initializers' types, not their data), its ai.onnx.ml outputs
    typed by :func:`add_ml_types`; ``None`` unless it has such nodes and ``declared`` already
    gives every value its other nodes make a static shape (else onnx's inference runs anyway,
    and these types are worked out again after it). Where the copy leaves every value declared,
    loading needs no onnx inference (which has none for the ops :data:`RULES` type)."""
    ml = [n.domain == ML_DOMAIN for n in graph.node]
    if not any(ml) or not made_static((n for n, is_ml in zip(graph.node, ml, strict=True)
                                       if not is_ml), declared):
        return None
    probe = ModelProto()
    light = probe.graph
    light.input.extend(graph.input)
    light.output.extend(graph.output)
    light.value_info.extend(graph.value_info)
    light.node.extend(without_tree_tables(graph.node) or graph.node)
    for t in graph.initializer:
        light.initializer.add(name=t.name, data_type=t.data_type, dims=t.dims)
    add_ml_types(light)
    return probe
