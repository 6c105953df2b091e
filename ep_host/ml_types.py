"""Output types of ai.onnx.ml nodes that onnx's shape inference leaves untyped (onnx 1.23 has
none for Scaler, Normalizer, Imputer or LinearRegressor, nor for the tree ensembles but at
ai.onnx.ml 3 and 4), worked out from the input's type and the node's attributes as the
operator specification states them; and, for a graph these types complete, the types loading
takes without running onnx's inference at all (a scikit-learn export).

A plan that knows every value's type and shape checks a kernel's output with one quick test,
and a run whose values are all known to be small skips the BLAS thread limit (2-3 us of a
scikit-learn export's 5-10 us run). Only rank-2 inputs ([N, features]) are typed here; other
shapes stay unknown and are checked at run time as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import onnx
from onnx import (
    AttributeProto,
    GraphProto,
    ModelProto,
    NodeProto,
    TensorProto,
    TypeProto,
    ValueInfoProto,
)

from ep_host.dtypes import dtype
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


def types_without_inference(graph: GraphProto,
                            declared: Mapping[str, ParsedType]) -> dict[str, ParsedType] | None:
    """Every value type of ``graph`` where onnx's shape inference could only agree, with the
    outputs of its ai.onnx.ml nodes typed by :data:`RULES` as :func:`add_ml_types` types them
    after inference; ``None`` where inference may tell more (loading then runs it). ``declared``:
    the types the graph states (no bodies, no functions).

    Two graphs qualify. One whose every value then has a static shape, its other nodes'
    included (a scikit-learn export with a fixed batch). And one made only of ops :data:`RULES`
    knows, whatever their dims (a batch dim ``N``, or an open one as scikit-learn exports
    write it): where onnx infers a shape for them (LinearClassifier, Binarizer, the tree
    ensembles of ai.onnx.ml 3 and 4) it is the rule's, an open batch dim given a made-up name
    (``unk__0``) that loading counts as open; so each undeclared output takes its rule's type,
    and each declared with a shape must equal it (inference would fill in a dim the
    declaration leaves open)."""
    ml = [n.domain == ML_DOMAIN for n in graph.node]
    if not any(ml):
        return None
    only_rules = all(ml) and all(n.op_type in RULES for n in graph.node)
    if not only_rules and not made_static(
            (n for n, is_ml in zip(graph.node, ml, strict=True) if not is_ml), declared):
        return None
    ruled = _rule_types(graph, declared)
    types = dict(declared)
    agrees = True
    for node in graph.node:
        if node.domain != ML_DOMAIN:
            continue
        for name in node.output:
            if not name:
                continue
            rule, stated = ruled.get(name), declared.get(name)
            if stated is None or (stated[0] == "tensor" and stated[2] is None and (
                    rule is None or stated[1] in (None, rule[1]))):
                if rule is None:
                    agrees = False
                else:
                    types[name] = rule  # undeclared, or declared without a shape
            elif stated != rule:
                agrees = False  # the declaration stands; inference may have filled it in
    if made_static(graph.node, types) or (only_rules and agrees):
        return types
    return None


def _rule_types(graph: GraphProto, declared: Mapping[str, ParsedType]) -> dict[str, ParsedType]:
    """The type :data:`RULES` give each output of ``graph``'s ai.onnx.ml nodes, in node order:
    a node's first input typed as declared with a shape (an initializer by its dims), else as
    an earlier node's rule typed it; rank-2 inputs only, as :func:`add_ml_types`."""
    ruled: dict[str, ParsedType] = {}
    initializers: dict[str, Any] | None = None
    for node in graph.node:
        rule = RULES.get(node.op_type) if node.domain == ML_DOMAIN else None
        if rule is None or not node.input or not node.output:
            continue
        name = node.input[0]
        x = declared.get(name)
        if x is None or x[0] != "tensor" or x[1] is None or x[2] is None:
            if initializers is None:
                initializers = {t.name: t for t in graph.initializer}
            t = initializers.get(name)
            x = ("tensor", dtype(t.data_type), tuple(t.dims)) if t is not None else ruled.get(name)
        if x is None or x[2] is None or len(x[2]) != 2:
            continue
        outputs = rule(node)
        if outputs is None or len(outputs) < len(node.output):
            continue
        n, features = x[2]
        for out, (elem, after) in zip(node.output, outputs, strict=False):
            if out:
                ruled[out] = ("tensor", x[1] if elem is None else dtype(elem),
                              (n, *((features,) if after is None else after)))
    return ruled


def typed_before_inference(light: ModelProto, model: ModelProto) -> ModelProto:
    """``light``, the model onnx's shape inference will read (a copy where it is ``model``
    itself), with the outputs of the ai.onnx.ml nodes that read a graph input typed first
    (:func:`add_ml_types`), so that inference types their ai.onnx readers in the same pass: a
    classifier whose label a Cast reads was inferred twice (0.15-0.5 ms of a scikit-learn
    export's creation)."""
    graph = light.graph
    inputs = {vi.name for vi in graph.input}
    if not any(n.domain == ML_DOMAIN and n.op_type in RULES and n.input
               and n.input[0] in inputs for n in graph.node):
        return light
    if light is model:
        light = ModelProto()
        light.CopyFrom(model)
    add_ml_types(light.graph)
    return light


def typed_after_inference(inferred: ModelProto) -> ModelProto:
    """``inferred`` with the ai.onnx.ml outputs its inference left untyped typed
    (:func:`add_ml_types`), inferred again where a node of another domain reads one."""
    graph = inferred.graph
    if not any(n.domain == ML_DOMAIN for n in graph.node):
        return inferred
    typed = set(add_ml_types(graph))
    if not any(n.domain != ML_DOMAIN and typed.intersection(n.input) for n in graph.node):
        return inferred
    try:
        return onnx.shape_inference.infer_shapes(inferred, check_type=False,
                                                 strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 (the types found so far stand)
        return inferred
