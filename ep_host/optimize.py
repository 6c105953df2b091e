"""Graph optimizations before placement: passes that rewrite a loaded model's main graph.

This module is the pass table and the driver; the passes live in ``ep_host.folding``,
``ep_host.fusion`` and ``ep_host.simplify``, the editable graph they share in
``ep_host.rewriter``.
Each pass is switchable by name and counts its rewrites; ``optimize`` returns a new
:class:`Model` whose ``optimizations`` name the passes that changed the graph. A fused node (a
new op standing for several) remembers the nodes it replaced in ``Model.unfused``: when no
provider claims it, the capability walk places those nodes instead, as it does a function body.

- ``constant_lifting``: every ``Constant`` node becomes an initializer (its value in any of
  the attribute forms), so it is neither placed nor priced, as onnxruntime does.
- ``constant_folding``: nodes whose inputs are all constants, and Shape/Size of a value whose
  shape is static, become initializers (computed by onnx's reference evaluator, the ONNX
  specification's own implementation); an Identity of a constant is read through (its readers
  read the constant). Then the nodes whose shapes loading's inference could not find are
  inferred again from what folding computed (``Rewriter.reinfer``).
- ``conv_bn_folding``: an inference-mode BatchNormalization after a Conv with constant weights
  is folded into the Conv's weights and bias.
- ``channel_affine_folding``: a Mul or Add by a per-channel constant after a Conv or an
  inference-mode BatchNormalization (a Caffe-style Scale layer) is folded into its weights and
  bias.
- ``conv_activation_fusion``: a Conv whose output only a Relu, a Clip with both bounds
  constant, a HardSigmoid or a HardSwish reads becomes one ``com.microsoft::FusedConv`` that
  applies it to its own output; a Conv whose output only an Add with a value of its shape
  reads, then only a Relu the sum (a ResNet block's end), one that adds that value (its
  residual input Z) before the Relu.
- ``gelu_fusion``: the exact GELU written out as Div/Mul, Erf, Add, Mul, Mul becomes one
  ``com.microsoft::Gelu``; GPT-2's tanh GELU (Pow or Mul for the cube, Mul, Add, Mul, Tanh,
  Add, Mul, Mul) one ``com.microsoft::FastGelu``.
- ``sigmoid_fusion``: 1 / (1 + exp(-x)) written out (Neg or Mul by -1, Exp, Add of 1,
  Reciprocal or Div of 1 by it) becomes one Sigmoid.
- ``silu_fusion``: SiLU, ``x * sigmoid(x)`` as Sigmoid then Mul of its own input (float16 or
  float32), becomes one ``com.microsoft::QuickGelu`` with alpha 1.
- ``layer_norm_fusion``: LayerNormalization written out (ReduceMean, Sub, Pow or Mul,
  ReduceMean, Add, Sqrt, Div, Mul by a constant scale, optionally Add of a constant bias) over
  the last axis becomes one LayerNormalization (models of ai.onnx opset 17 on).
- ``skip_layer_norm_fusion``: a float32 LayerNormalization over the last axis of an Add of two
  values of its input's static shape (a residual), one of them possibly an Add of a constant
  bias (a MatMul's), becomes one ``com.microsoft::SkipLayerNormalization`` (bias as its fifth
  input; the residual sum as its fourth output where something else reads it), as onnxruntime
  fuses them.
- ``bias_gelu_fusion``: an Add of a constant float32 bias of the last dim read only by an erf
  Gelu becomes one ``com.microsoft::BiasGelu``.
- ``matmul_add_fusion``: MatMul of a 2-D input by a constant 2-D matrix, then Add of a constant
  bias, becomes one Gemm.
- ``product_features_fusion``: a Concat along axis 1 of column products of one 2-D value, each an
  ai.onnx.ml ArrayFeatureExtractor of constant columns then a ReduceProd over axis 1
  (scikit-learn's PolynomialFeatures as skl2onnx writes it), becomes one Gather and one
  ReduceProd per run of products of equally many columns.
- ``tree_ensemble_merging``: a Concat along axis 1 of ai.onnx.ml TreeEnsembleRegressors of one
  input that sum their trees without a post transform (skl2onnx's AdaBoostRegressor) becomes one
  TreeEnsembleRegressor per run, the forests' trees and targets numbered one after another.
- ``tree_classifier_merging``: ai.onnx.ml TreeEnsembleClassifiers of one input (three classes
  or more, votes on every leaf, no base values, no post transform) whose labels nothing reads
  (skl2onnx's AdaBoostClassifier) become one TreeEnsembleRegressor, a target per class of each,
  and a Split of its scores into theirs.
- ``samme_vote_batching``: skl2onnx's AdaBoostClassifier votes, estimator by estimator an ArgMax
  of its part of one Split (axis 1, equal parts), Equal to the class indices, Where and Mul by
  its weight, then a Sum of all, become a Reshape to [N, estimators, classes], ArgMax, Equal,
  Where, Mul by the weights and ReduceSum over the estimators.
- ``weighted_median_fusion``: skl2onnx's AdaBoostRegressor weighted median (TopK over all k
  columns, ArrayFeatureExtractor of constant weights at that order, Reshape, CumSum,
  ArrayFeatureExtractor of the last sum, Mul by a constant half, Less, Cast, ArgMin and two
  GatherElements) becomes one ``ai.ep_host::WeightedMedian``, an op of ep-host's own that the
  CPU EP runs.
- ``class_label_gather``: an ArgMax over axis 1 (kept), an ai.onnx.ml ArrayFeatureExtractor of
  a constant 1-D class list at those indices, a Reshape to [-1] and Casts that keep every
  class's value (skl2onnx's predicted label) become an ArgMax without the kept axis and a Gather
  of the class list, cast once at optimization.
- ``cast_elimination`` (last): a Cast writing a graph output in the element type its tensor
  input already has is dropped, the node writing its input (read by nothing else) writing that
  output instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import onnx
from onnx import TypeProto, helper

from ep_host.collector import paused_gc
from ep_host.errors import HostError
from ep_host.folding import (
    NOT_FOLDED,
    channel_affine_folding,
    constant_folding,
    constant_lifting,
    conv_bn_folding,
)
from ep_host.fusion import (
    bias_gelu_fusion,
    conv_activation_fusion,
    gelu_fusion,
    layer_norm_fusion,
    matmul_add_fusion,
    silu_fusion,
    skip_layer_norm_fusion,
    weighted_median_fusion,
)
from ep_host.graph import DEFAULT_DOMAIN, GraphView, node_reads, normalize_domain
from ep_host.loading import Model
from ep_host.rewriter import (
    HOST_DOMAIN,
    MS_DOMAIN,
    Rewriter,
    node_domain,
    rename_inputs,
    tensor_type_proto,
    tensor_typed,
)
from ep_host.simplify import (
    cast_elimination,
    class_label_gather,
    product_features_fusion,
    samme_vote_batching,
    sigmoid_fusion,
    tree_classifier_merging,
    tree_ensemble_merging,
)

PASSES: dict[str, Callable[[Rewriter], int]] = {
    "constant_lifting": constant_lifting,
    "constant_folding": constant_folding,
    "conv_bn_folding": conv_bn_folding,
    "channel_affine_folding": channel_affine_folding,
    "conv_activation_fusion": conv_activation_fusion,
    "gelu_fusion": gelu_fusion,
    "sigmoid_fusion": sigmoid_fusion,
    "silu_fusion": silu_fusion,
    "layer_norm_fusion": layer_norm_fusion,
    "skip_layer_norm_fusion": skip_layer_norm_fusion,
    "bias_gelu_fusion": bias_gelu_fusion,
    "matmul_add_fusion": matmul_add_fusion,
    "product_features_fusion": product_features_fusion,
    "tree_ensemble_merging": tree_ensemble_merging,
    "tree_classifier_merging": tree_classifier_merging,
    "samme_vote_batching": samme_vote_batching,
    "weighted_median_fusion": weighted_median_fusion,
    "class_label_gather": class_label_gather,
    "cast_elimination": cast_elimination,
}
DEFAULT_PASSES = tuple(PASSES)
# The ops a pass starts from (ai.onnx ones by name, others as ``domain::name``): it finds
# nothing in a graph that lacks one op of each group. Where a pass starts from an op an earlier
# pass adds (skip_layer_norm_fusion from the LayerNormalization layer_norm_fusion writes,
# bias_gelu_fusion from gelu_fusion's Gelu, silu_fusion from sigmoid_fusion's Sigmoid,
# samme_vote_batching from tree_classifier_merging's Split), its group names the ops that pass
# starts from too; the other passes remove nodes, copy a Conv or BatchNormalization, or add
# com.microsoft and ai.ep_host ops, Gemm, Gather, ReduceProd, TreeEnsembleRegressor and the
# six nodes of samme_vote_batching, in which no later pass finds its pattern. So the graph as
# loaded decides for all of them. constant_folding is decided by ``_may_fold``.
PASS_OPS: dict[str, tuple[frozenset[str], ...]] = {
    "constant_lifting": (frozenset({"Constant"}),),
    "conv_bn_folding": (frozenset({"BatchNormalization"}), frozenset({"Conv"})),
    "channel_affine_folding": (frozenset({"Mul", "Add"}),
                               frozenset({"Conv", "BatchNormalization"})),
    "conv_activation_fusion": (frozenset({"Conv"}),
                               frozenset({"Relu", "Clip", "HardSigmoid", "HardSwish"})),
    "gelu_fusion": (frozenset({"Erf", "Tanh"}), frozenset({"Add"}), frozenset({"Mul"})),
    "sigmoid_fusion": (frozenset({"Exp"}), frozenset({"Add"}),
                       frozenset({"Reciprocal", "Div"})),
    "silu_fusion": (frozenset({"Sigmoid", "Exp"}), frozenset({"Mul"})),
    "layer_norm_fusion": (frozenset({"ReduceMean"}), frozenset({"Sub"}), frozenset({"Div"})),
    "skip_layer_norm_fusion": (frozenset({"LayerNormalization", "ReduceMean"}),
                               frozenset({"Add"})),
    "bias_gelu_fusion": (frozenset({"Gelu", "Erf"}), frozenset({"Add"})),
    "matmul_add_fusion": (frozenset({"MatMul"}), frozenset({"Add"})),
    "product_features_fusion": (frozenset({"ai.onnx.ml::ArrayFeatureExtractor"}),
                                frozenset({"ReduceProd"}), frozenset({"Concat"})),
    "tree_ensemble_merging": (frozenset({"ai.onnx.ml::TreeEnsembleRegressor"}),
                              frozenset({"Concat"})),
    "tree_classifier_merging": (frozenset({"ai.onnx.ml::TreeEnsembleClassifier"}),),
    "samme_vote_batching": (frozenset({"Sum"}), frozenset({"ArgMax"}), frozenset({"Equal"}),
                            frozenset({"Where"}),
                            frozenset({"Split", "ai.onnx.ml::TreeEnsembleClassifier"})),
    "weighted_median_fusion": (frozenset({"TopK"}), frozenset({"CumSum"}),
                               frozenset({"ai.onnx.ml::ArrayFeatureExtractor"}),
                               frozenset({"GatherElements"})),
    "class_label_gather": (frozenset({"ArgMax"}), frozenset({"ai.onnx.ml::ArrayFeatureExtractor"}),
                           frozenset({"Reshape"})),
    "cast_elimination": (frozenset({"Cast"}),),
}
REINFER_AFTER = frozenset({"constant_lifting", "constant_folding"})


def resolve_passes(passes: Iterable[str] | None = None,
                   disable: Iterable[str] = ()) -> list[str]:
    """The passes to run, in their fixed order: ``passes`` (default all) less ``disable``."""
    chosen = list(DEFAULT_PASSES if passes is None else passes)
    off = set(disable)
    unknown = [p for p in (*chosen, *off) if p not in PASSES]
    if unknown:
        raise HostError(f"unknown graph optimization(s) {', '.join(unknown)}; "
                        f"known: {', '.join(PASSES)}")
    return [p for p in PASSES if p in chosen and p not in off]


def optimize(model: Model, passes: Iterable[str] | None = None,
             disable: Iterable[str] = (), *, in_place: bool = False) -> Model:
    """``model`` rewritten by ``passes`` (default all but ``disable``), as a new model; the
    model itself when no pass changed anything. The new model's ``optimizations`` maps each
    pass that changed the graph to its rewrite count.

    ``in_place``: the new model takes over ``model.proto`` and rewrites it, rather than a copy
    (a copy copies every weight it keeps); for a caller that loaded ``model`` itself and drops
    it, since ``model.proto`` is then the rewritten graph."""
    names = passes_that_may_apply(model.graph, resolve_passes(passes, disable))
    if not names:
        return model
    with paused_gc():  # many long-lived protobuf copies and views: see paused_gc
        rw = Rewriter(model)
        applied = {}
        reinfer_after = max((i for i, n in enumerate(names) if n in REINFER_AFTER), default=-1)
        for i, name in enumerate(names):
            count = PASSES[name](rw)
            if count:
                applied[name] = count
            if i == reinfer_after and model.shapes_inferred and applied:
                rw.reinfer()  # before the fusions: onnx cannot infer their com.microsoft nodes
        if not applied:
            return model
        return _rebuild(model, rw, applied, in_place)


def passes_that_may_apply(graph: GraphView, names: list[str]) -> list[str]:
    """Those of ``names`` that may change ``graph``, in order: a pass is left out when the
    graph lacks the ops it starts from (``PASS_OPS``), so a graph with nothing to rewrite is
    neither copied nor walked once per pass."""
    if not graph.nodes:
        return []
    ops = frozenset([node.op_type if node.domain == DEFAULT_DOMAIN
                     else f"{node.domain}::{node.op_type}" for node in graph.nodes])
    key = (ops, tuple(names))
    found = _MAY_APPLY.get(key)  # by the graph's ops, but constant_folding, asked per graph
    if found is None:
        if len(_MAY_APPLY) >= 256:
            _MAY_APPLY.clear()
        found = _MAY_APPLY[key] = [name for name in names if name == "constant_folding" or all(
            not group.isdisjoint(ops) for group in PASS_OPS[name])]
    return [name for name in found if name != "constant_folding" or _may_fold(graph, ops)]


_MAY_APPLY: dict[tuple[frozenset[str], tuple[str, ...]], list[str]] = {}


def _may_fold(graph: GraphView, ops: frozenset[str]) -> bool:
    """Whether constant_folding may find a node to fold: a Shape or Size, a node whose inputs
    are all constants, or a Constant node (constant_lifting may make constants of forms the
    loaded views do not show as constant)."""
    if not ops.isdisjoint(("Constant", "Shape", "Size")):
        return True
    return any(node.domain == DEFAULT_DOMAIN and node.op_type not in NOT_FOLDED
               and all(v is None or v.is_constant for v in node.inputs)
               for node in graph.nodes)


def _copy_fields(src: Any, dst: Any, skip: frozenset[str]) -> None:
    """Copy every set field of protobuf message ``src`` into ``dst`` but those in ``skip``."""
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        repeated = (field.is_repeated if hasattr(field, "is_repeated")  # protobuf 5 and on
                    else field.label == field.LABEL_REPEATED)
        if repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _rebuild(model: Model, rw: Rewriter, applied: dict[str, int], in_place: bool) -> Model:
    source = model.proto.graph
    if in_place:
        proto = model.proto
    else:
        # the model's fields but its graph, and the graph's but its nodes and initializers: the
        # weights are copied once, only those still read
        proto = onnx.ModelProto()
        _copy_fields(model.proto, proto, frozenset({"graph"}))
        _copy_fields(source, proto.graph, frozenset({"node", "initializer"}))
    graph = proto.graph
    live = list(rw.live())
    aliases = rw.aliases  # Identities of constants: their readers read the constants
    if aliases:
        rw.unfused = {name: [rw.renamed(n) for n in nodes] for name, nodes in rw.unfused.items()}
    was_initializer = {t.name for t in source.initializer}
    read = ({aliases.get(i, i) for n in live for i in rw.reads(n)}
            | {o.name for o in graph.output})
    for nodes in rw.unfused.values():
        read |= {i for n in nodes for i in node_reads(n)}
    if in_place:
        del graph.node[:]
        # the initializers still read moved to the front, in order, and the rest cut off:
        # sorting moves the messages, where copying them would copy their data
        graph.initializer.sort(key=lambda t: t.name not in read)
        kept = sum(1 for t in graph.initializer if t.name in read)
        del graph.initializer[kept:]
    else:
        graph.initializer.extend(t for t in source.initializer if t.name in read)
    graph.node.extend(live)  # copies: renamed here, the loaded nodes left as they are
    if aliases:
        for n in graph.node:
            rename_inputs(n, aliases)
    graph.initializer.extend(rw.new_initializers(read))
    inputs = [vi for vi in graph.input if vi.name in read or vi.name not in was_initializer]
    del graph.input[:]
    graph.input.extend(inputs)
    produced = {o for n in live for o in n.output if o}
    # a declared value info is kept only where inference found no tensor type to state instead
    value_info = [vi for vi in graph.value_info
                  if vi.name in produced and not tensor_typed(rw.type_of(vi.name))]
    declared = {vi.name for vi in value_info} | {o.name for o in graph.output}
    types: dict[tuple[int, Any], TypeProto] = {}  # one proto per dtype and shape
    for out in graph.output:  # typed as inference found it (or ``rw.reinfer`` learned it): a
        found = rw.type_of(out.name)  # declared type without a shape gets the inferred one
        if tensor_typed(found):
            out.type.CopyFrom(tensor_type_proto(found, types))
    del graph.value_info[:]
    graph.value_info.extend(value_info)
    # the types loading inferred, for every value that survives: onnx cannot infer through the
    # com.microsoft ops fusions make, and would lose every shape after them; one type proto per
    # dtype and shape (helper.make_tensor_value_info per value took 6 us each)
    for name in sorted(produced - declared):
        found = rw.type_of(name)
        if not tensor_typed(found):
            continue
        tp = tensor_type_proto(found, types)
        vi = graph.value_info.add()
        vi.name = name
        vi.type.CopyFrom(tp)
    imported = {normalize_domain(o.domain) for o in proto.opset_import}
    for domain in sorted({node_domain(n) for n in live} & {MS_DOMAIN, HOST_DOMAIN} - imported):
        proto.opset_import.append(helper.make_opsetid(domain, 1))
    # not inferred again: every surviving value is typed above (what folding made known,
    # ``rw.reinfer`` learned), the bodies' values as loading inferred them (SSD-lite: 3,500
    # nodes inferred again for an If's sake)
    body_types = ({name: parsed for name, parsed in model.value_types.items()
                   if name not in model.graph.values} if model.has_bodies else None)
    out = Model(proto, path=model.path, base_dir=model.base_dir, infer_shapes=False,
                held=model.held, rewritten=True, types=body_types)
    out.shapes_inferred = model.shapes_inferred
    out.adopt_constants(model, rw.computed(read))
    # the rewritten graph's unknown dims replace the written one's
    kept = [w for w in model.warnings if w != model.unknown_dims_warning]
    out.warnings = [*kept, *out.warnings]
    out.optimizations = applied
    out.unfused = rw.unfused
    out.merged = {**model.merged, **rw.merged}
    # worked out when first asked (``why``, a report), not at every session's creation
    out.sources = WrittenSources(
        [n.name for n in rw.live()], rw.written, rw.merged, out.merged,
        [n.name for n in model.graph.nodes], model.sources)
    return out


class WrittenSources(Mapping[str, list[str]]):
    """Each node of a rewritten model that is not simply itself of the model as written: the
    names, as written, of the nodes whose work it does (a fused node: every node it fused).
    Worked out on first use from the names a rewrite leaves (no graph or model kept)."""

    def __init__(self, live: list[str], written: frozenset[str], merged: dict[str, str | None],
                 all_merged: dict[str, str | None], order: list[str],
                 before: Mapping[str, list[str]]):
        self._args: tuple[Any, ...] | None = (live, written, merged, all_merged, order, before)
        self._found: dict[str, list[str]] = {}

    def _sources(self) -> dict[str, list[str]]:
        args = self._args
        if args is not None:  # made whole, then published: a second thread makes it again
            live, written, merged, all_merged, order, before = args
            found: dict[str, list[str]] = {}
            covers: dict[str, list[str]] = {name: [name] if name in written else []
                                            for name in live if name}
            for name in merged:
                target = _doer_in(all_merged, name)
                if target in covers and name not in covers[target]:
                    covers[target].append(name)
            at = {name: i for i, name in enumerate(order)}
            for target, names in covers.items():
                names.sort(key=lambda name: at.get(name, len(at)))
                was = [w for name in names for w in before.get(name, [name])]
                if was != [target]:
                    found[target] = list(dict.fromkeys(was))
            self._found = found
            self._args = None
        return self._found

    def __getitem__(self, name: str) -> list[str]:
        return self._sources()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sources())

    def __len__(self) -> int:
        return len(self._sources())


def resolve_node(model: Model, name: str) -> tuple[str | None, str]:
    """The node of ``model`` doing the work of node ``name`` of the model as written, and a
    note saying what became of it (``""`` when the node is there as written); ``None`` when it
    was folded into a constant."""
    target = _doer(model, name)
    if target == name:
        return name, ""
    if target is None:
        return None, (f"node {name!r} was folded into a constant by the graph optimizations "
                      "(--no-optimize shows the model as written)")
    return target, (f"node {name!r} is part of {target!r} after the graph optimizations "
                    "(--no-optimize shows the model as written)")


def _doer(model: Model, name: str) -> str | None:
    """The node of ``model`` doing the work of node ``name`` (:func:`resolve_node`'s first
    answer, without its note)."""
    return _doer_in(model.merged, name)


def _doer_in(merged: Mapping[str, str | None], name: str) -> str | None:
    seen = [name]
    target: str | None = name
    while target is not None and target in merged:
        target = merged[target]
        if target in seen:
            break
        seen.append(target)
    return target


def source_nodes(model: Model, name: str) -> list[str]:
    """The names, in the model as written, of the nodes whose work node ``name`` does."""
    return list(model.sources.get(name, [name]))


__all__ = ["DEFAULT_PASSES", "PASSES", "optimize", "passes_that_may_apply", "resolve_node",
           "resolve_passes", "source_nodes"]
