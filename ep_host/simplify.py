"""Simplifying passes of the graph optimizations: a pattern of standard nodes becomes fewer
standard nodes, which every provider of those ops runs, so nothing is remembered to place instead.
skl2onnx writes an export's steps one small node at a time, and in a run of many small kernels
each node costs several times what it costs alone, so these take the many-node patterns it
writes: a sigmoid written out (one Sigmoid), PolynomialFeatures' column products (one Gather and
one ReduceProd), AdaBoostRegressor's sibling forests (one TreeEnsembleRegressor),
AdaBoostClassifier's (one TreeEnsembleRegressor and a Split) and its votes (six nodes for all
estimators), a classifier's label lookup (an ArgMax and a Gather) and Casts to the type a value
already has (dropped).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from onnx import NodeProto, helper, numpy_helper

from ep_host.graph import DEFAULT_DOMAIN
from ep_host.ml_types import ML_DOMAIN
from ep_host.rewriter import (
    Rewriter,
    copy_node,
    inputs_renamed,
    is_op,
    matches,
    node_attribute,
    other_input,
    tensor_typed,
)


def sigmoid_fusion(rw: Rewriter) -> int:
    """1 / (1 + exp(-x)) written out, a Neg (or a Mul by -1), Exp, Add of 1 and a Reciprocal (or
    a Div of 1 by the sum), each value read only by the next (skl2onnx's one-vs-rest scores),
    becomes one Sigmoid: one kernel for four, and no overflow where exp(-x) is infinite."""
    fused = 0
    for x, nodes in matches(rw, "Exp", _written_sigmoid):
        last = nodes[-1]
        sigmoid = helper.make_node("Sigmoid", [x], [last.output[0]],
                                   name=rw.fresh(f"{last.name}::Sigmoid"))
        rw.replace(last, sigmoid)
        for node in nodes[:-1]:
            rw.remove(node, into=sigmoid.name)
        fused += 1
    return fused


def _unit(rw: Rewriter, name: str | None, rank: int | None, value: float) -> bool:
    """Whether ``name`` is a constant ``value`` of one element that broadcasts against a value
    of ``rank`` without changing its shape."""
    c = rw.const(name) if name else None
    return (c is not None and c.size == 1 and (c.ndim == 0 or rank is not None and c.ndim <= rank)
            and float(c.reshape(())) == value)


def _written_sigmoid(rw: Rewriter, exp: NodeProto) -> tuple[str, list[NodeProto]] | None:
    """``(x, [negation, exp, add, reciprocal])`` where ``exp`` computes exp(-x) of a float x for
    1 / (1 + exp(-x)); else ``None``."""
    negated = exp.input[0]
    neg = rw.producer.get(negated)
    shape = rw.shape(negated)
    rank = None if shape is None else len(shape)
    if neg is None or rw.only_consumer(negated) is not exp:
        return None
    if is_op(neg, "Neg"):
        x = neg.input[0]
    elif is_op(neg, "Mul") and len(neg.input) == 2:
        x = next((a for a, b in (neg.input, neg.input[::-1]) if _unit(rw, b, rank, -1.0)), None)
    else:
        return None
    if x is None or rw.dtype(x) not in (np.float16, np.float32, np.float64):
        return None
    add = rw.only_consumer(exp.output[0])
    if not is_op(add, "Add") or not _unit(rw, other_input(add, exp.output[0]), rank, 1.0):
        return None
    last = rw.only_consumer(add.output[0])
    if not (is_op(last, "Reciprocal") or is_op(last, "Div") and list(last.input[1:]) == [
            add.output[0]] and _unit(rw, last.input[0], rank, 1.0)):
        return None
    return x, [neg, exp, add, last]  # type: ignore[list-item]


def product_features_fusion(rw: Rewriter) -> int:
    """skl2onnx's PolynomialFeatures: a Concat along axis 1 of products of a 2-D value's columns,
    each written as an ArrayFeatureExtractor of constant column indices then a ReduceProd over
    axis 1 (kept), two nodes per output column. Each run of at least two such inputs in a row
    that take the same value's columns, the same number each, becomes one Gather of all their
    columns [N, columns, count] and one ReduceProd over its last axis: the same products in the
    same order (a degree-2 export of 8 features: 88 nodes become 4)."""
    fused = 0
    for concat in rw.live():
        if not is_op(concat, "Concat") or node_attribute(concat, "axis") not in (1, -1):
            continue
        found = [_column_product(rw, concat, name) for name in concat.input]
        runs = _runs(found, lambda f: f[:2])
        if runs:
            _replace_runs(rw, concat, runs, [_fuse_products(rw, concat, found[i:j])
                                             for i, j in runs])
            fused += len(runs)
    return fused


def _runs(found: Sequence[Any], key: Callable[[Any], Any]) -> list[tuple[int, int]]:
    """``(start, end)`` of each run of at least two entries in a row of ``found`` that are not
    ``None`` and share ``key``."""
    runs, i = [], 0
    while i < len(found):
        j = i
        while j < len(found) and found[j] is not None and key(found[j]) == key(found[i]):
            j += 1
        if j - i >= 2:
            runs.append((i, j))
        i = max(j, i + 1)
    return runs


def _replace_runs(rw: Rewriter, concat: NodeProto, runs: list[tuple[int, int]],
                  names: list[str]) -> None:
    """``concat`` reading ``names[k]`` in place of the inputs of ``runs[k]``."""
    inputs = list(concat.input)
    for (i, j), name in reversed(list(zip(runs, names, strict=True))):  # later runs first
        inputs[i:j] = [name]
    new = copy_node(concat)
    del new.input[:]
    new.input.extend(inputs)
    rw.replace(concat, new)


def _column_product(rw: Rewriter, concat: NodeProto,
                    name: str) -> tuple[str, int, tuple[int, ...], NodeProto, NodeProto] | None:
    """``(source, count, columns, extractor, product)`` where ``name`` is a ReduceProd over axis
    1 (kept) of an ArrayFeatureExtractor of 2-D ``source``'s constant ``columns`` (none
    negative), each read only by the next; else ``None``."""
    prod = rw.producer.get(name)
    if not is_op(prod, "ReduceProd") or rw.only_consumer(name) is not concat:
        return None
    if node_attribute(prod, "keepdims", 1) != 1:
        return None
    axes = (node_attribute(prod, "axes") if len(prod.input) < 2
            else rw.const(prod.input[1]) if prod.input[1] else None)
    if axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] not in ([1], [-1]):
        return None
    afe = rw.producer.get(prod.input[0])
    if (not is_op(afe, "ArrayFeatureExtractor", ML_DOMAIN)
            or rw.only_consumer(afe.output[0]) is not prod):
        return None
    source, columns = afe.input[0], rw.const(afe.input[1])
    shape = rw.shape(source)
    if (columns is None or columns.dtype.kind not in "iu" or columns.ndim > 1 or not columns.size
            or columns.min() < 0 or shape is None or len(shape) != 2
            or rw.dtype(source) not in (np.float32, np.float64, np.int32, np.int64)):
        return None
    return source, columns.size, tuple(int(c) for c in columns.reshape(-1)), afe, prod


def _fuse_products(rw: Rewriter, concat: NodeProto, run: list[Any]) -> str:
    """One Gather and one ReduceProd for ``run`` (``_column_product``'s answers); the name of
    the [N, len(run)] products they write."""
    source, count = run[0][0], run[0][1]
    first = min((r[3] for r in run), key=lambda n: rw.position[id(n)])  # an extractor
    last = max((r[4] for r in run), key=lambda n: rw.position[id(n)])  # a product
    columns = rw.fresh(f"{concat.name}_columns")
    rw.add_constant(columns, np.array([r[2] for r in run], dtype=np.int64))
    gathered, products = rw.fresh(f"{concat.name}_gathered"), rw.fresh(f"{concat.name}_products")
    kind, dtype, (rows, _) = rw.type_of(source)  # type: ignore[misc]
    rw.learned[gathered] = (kind, dtype, (rows, len(run), count))
    rw.learned[products] = (kind, dtype, (rows, len(run)))
    gather = helper.make_node("Gather", [source, columns], [gathered], axis=1,
                              name=rw.fresh(f"{concat.name}::Gather"))
    if len(last.input) >= 2:  # ReduceProd 18 on: the axes as an input
        axes = rw.fresh(f"{concat.name}_axes")
        rw.add_constant(axes, np.array([2], dtype=np.int64))
        reduce = helper.make_node("ReduceProd", [gathered, axes], [products], keepdims=0,
                                  name=rw.fresh(f"{concat.name}::ReduceProd"))
    else:
        reduce = helper.make_node("ReduceProd", [gathered], [products], axes=[2], keepdims=0,
                                  name=rw.fresh(f"{concat.name}::ReduceProd"))
    rw.replace(first, gather)
    rw.replace(last, reduce)
    for _, _, _, afe, prod in run:
        for node in (afe, prod):
            if node is not first and node is not last:
                rw.remove(node, into=gather.name if node is afe else reduce.name)
    return products


# TreeEnsembleRegressor's attributes a merge concatenates (those of ai.onnx.ml 1 and 3 as lists;
# one holding tensors, the *_as_tensor forms, is not merged)
TREE_LISTS = ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
              "nodes_hitrates", "nodes_truenodeids", "nodes_falsenodeids",
              "nodes_missing_value_tracks_true", "target_treeids", "target_nodeids",
              "target_ids", "target_weights", "base_values")
TREE_SETTINGS = ("n_targets", "aggregate_function", "post_transform")


def tree_ensemble_merging(rw: Rewriter) -> int:
    """Sibling regression forests: a Concat along axis 1 of TreeEnsembleRegressors of the same
    input, each summing its trees (aggregate SUM) without a post transform and read only by the
    Concat (skl2onnx's AdaBoostRegressor, one per estimator), becomes one TreeEnsembleRegressor
    per run of them, each forest's targets and trees numbered after the ones before: every
    target sums the same trees' votes in the same order (10 estimators: 11 nodes become 1)."""
    merged = 0
    for concat in rw.live():
        if not is_op(concat, "Concat") or node_attribute(concat, "axis") not in (1, -1):
            continue
        found = [_summing_forest(rw, concat, name) for name in concat.input]
        runs = _runs(found, lambda f: (f[0].input[0], tuple(sorted(f[1]))))
        if not runs:
            continue
        merged += len(runs)
        if runs == [(0, len(found))]:  # the merged forest writes the Concat's output itself
            out = _merge_forests(rw, concat, [f[0] for f in found], [f[1] for f in found],
                                 concat.output[0])
            rw.remove(concat, into=rw.producer[out].name)
            continue
        _replace_runs(rw, concat, runs, [_merge_forests(rw, concat, [f[0] for f in found[i:j]],
                                                        [f[1] for f in found[i:j]])
                                         for i, j in runs])
    return merged


def _summing_forest(rw: Rewriter, concat: NodeProto,
                    name: str) -> tuple[NodeProto, dict[str, Any]] | None:
    """``(node, attributes)`` where ``name`` is the one output of a TreeEnsembleRegressor that
    sums its trees, with no post transform, attributes as lists, tree ids from 0, votes naming
    its own trees and targets and its n_targets base values (if any), read only by ``concat``;
    else ``None``."""
    node = rw.producer.get(name)
    if (not is_op(node, "TreeEnsembleRegressor", ML_DOMAIN) or len(node.input) != 1
            or rw.only_consumer(name) is not concat):
        return None
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if any(n not in TREE_LISTS and n not in TREE_SETTINGS for n in attrs):
        return None  # the *_as_tensor forms, or an attribute this merge does not know
    aggregate, transform = (attrs.get(k, b"") for k in ("aggregate_function", "post_transform"))
    targets, trees = attrs.get("n_targets"), attrs.get("nodes_treeids") or []
    if (aggregate not in (b"", b"SUM") or transform not in (b"", b"NONE")
            or not isinstance(targets, int) or targets < 1 or not trees or min(trees) < 0
            or len(attrs.get("base_values", [0] * targets)) != targets):
        return None
    return (node, attrs) if _votes_its_own(attrs, targets) else None


def _votes_its_own(lists: dict[str, Any], targets: int) -> bool:
    """Whether the votes of ``lists`` (a TreeEnsembleRegressor's, tree ids from 0) name only
    its own trees and ``targets`` targets: merged and renumbered, a stray id would name a
    neighbour's."""
    last = max(lists["nodes_treeids"])
    return (all(0 <= t <= last for t in lists.get("target_treeids") or [])
            and all(0 <= t < targets for t in lists.get("target_ids") or []))


def _merged_lists(forests: list[dict[str, Any]]) -> tuple[dict[str, list[Any]], int]:
    """The TreeEnsembleRegressor lists of ``forests`` (attributes naming the same lists) one
    after another, each forest's trees and targets numbered after the ones before; and the
    number of targets."""
    lists: dict[str, list[Any]] = {name: [] for name in forests[0] if name in TREE_LISTS}
    tree_base = target_base = 0
    for attrs in forests:
        for name, values in lists.items():
            given = list(attrs[name])
            if name in ("nodes_treeids", "target_treeids"):
                given = [t + tree_base for t in given]
            elif name == "target_ids":
                given = [t + target_base for t in given]
            values.extend(given)
        tree_base += max(attrs["nodes_treeids"]) + 1
        target_base += attrs["n_targets"]
    return lists, target_base


def _merge_forests(rw: Rewriter, concat: NodeProto, nodes: list[NodeProto],
                   forests: list[dict[str, Any]], out: str | None = None) -> str:
    """One TreeEnsembleRegressor doing the work of ``nodes`` (their ``forests``' attributes, all
    naming the same ones); the name of its [N, targets] output: ``out`` (typed already) when
    given, else a new value."""
    lists, target_base = _merged_lists(forests)
    last = max(nodes, key=lambda n: rw.position[id(n)])
    if out is None:
        out = rw.fresh(f"{concat.name}_forests")
        kind, dtype, shape = rw.type_of(nodes[0].output[0]) or (None, None, None)
        if dtype is not None:
            rw.learned[out] = (kind, dtype, (shape[0] if shape else None, target_base))
    merged = helper.make_node("TreeEnsembleRegressor", [nodes[0].input[0]], [out],
                              name=rw.fresh(f"{concat.name}::TreeEnsembleRegressor"),
                              domain=ML_DOMAIN, n_targets=target_base, **lists)
    rw.replace(last, merged)
    for node in nodes:
        if node is not last:
            rw.remove(node, into=merged.name)
    return out


# TreeEnsembleClassifier's vote lists, as TreeEnsembleRegressor names them
CLASS_VOTES = {"class_treeids": "target_treeids", "class_nodeids": "target_nodeids",
               "class_ids": "target_ids", "class_weights": "target_weights"}
CLASS_LABELS = ("classlabels_int64s", "classlabels_strings")


def tree_classifier_merging(rw: Rewriter) -> int:
    """Sibling classification forests: TreeEnsembleClassifiers of one input, each of at least
    three classes, with votes on every leaf, no base values and no post transform, whose labels
    nothing reads (skl2onnx's AdaBoostClassifier, one per estimator, reading their scores only),
    become one TreeEnsembleRegressor summing each forest's trees into targets of its own (one a
    class, numbered after the forests before) and a Split of its [N, classes] scores into the
    forests' score outputs: every score sums the same trees' votes in the same order, which the
    classifier's scores are with every leaf voting (10 estimators: 10 forests become 2 nodes)."""
    siblings: dict[str, list[NodeProto]] = {}
    for node in rw.live():
        if (is_op(node, "TreeEnsembleClassifier", ML_DOMAIN) and len(node.input) == 1
                and len(node.output) == 2 and node.output[1]
                and not rw.consumers.get(node.output[0]) and node.output[0] not in rw.outputs):
            siblings.setdefault(node.input[0], []).append(node)
    groups: dict[tuple[str, ...], list[tuple[NodeProto, dict[str, Any]]]] = {}
    for nodes in siblings.values():  # tables read only where a classifier has a sibling
        for node in nodes if len(nodes) > 1 else ():
            found = _voting_forest(node)
            if found is not None:  # by input and lists (one without hit rates: another group)
                groups.setdefault((node.input[0], *sorted(found[1])), []).append(found)
    merged = 0
    for found in groups.values():
        if len(found) < 2:
            continue
        nodes = [f[0] for f in found]
        first, second = nodes[0], nodes[1]  # in graph order: rw.live() walks it
        scores = [n.output[1] for n in nodes]
        after = rw.position[id(second)]
        if any(rw.position[id(reader)] <= after for name in scores
               for reader in rw.consumers.get(name, [])):
            continue  # a score read before the second forest, where the Split goes
        lists, width = _merged_lists([f[1] for f in found])
        out = rw.fresh(f"{first.name}_scores")
        kind, dtype, shape = rw.type_of(scores[0]) or (None, None, None)
        if dtype is not None:
            rw.learned[out] = (kind, dtype, (shape[0] if shape else None, width))
        forest = helper.make_node("TreeEnsembleRegressor", [first.input[0]], [out],
                                  name=rw.fresh(f"{first.name}::TreeEnsembleRegressor"),
                                  domain=ML_DOMAIN, n_targets=width, **lists)
        sizes = [f[1]["n_targets"] for f in found]
        name = rw.fresh(f"{first.name}::Split")
        if rw.model.opset_imports.get(DEFAULT_DOMAIN, 0) >= 13:  # sizes an input from 13 on
            split = rw.fresh(f"{first.name}_split")
            rw.add_constant(split, np.array(sizes, np.int64))
            cut = helper.make_node("Split", [out, split], scores, axis=1, name=name)
        else:
            cut = helper.make_node("Split", [out], scores, axis=1, split=sizes, name=name)
        rw.replace(first, forest)
        rw.replace(second, cut)
        rw.merged[second.name] = forest.name
        for node in nodes[2:]:
            rw.remove(node, into=forest.name)
        merged += 1
    return merged


def _voting_forest(node: NodeProto) -> tuple[NodeProto, dict[str, Any]] | None:
    """``(node, attributes)`` where the tables of ``node``, a TreeEnsembleClassifier whose
    label nothing reads, are as :func:`tree_classifier_merging` takes them, its attributes as a
    TreeEnsembleRegressor's lists (``n_targets``: its classes); else ``None``."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    if any(n not in TREE_LISTS and n not in CLASS_VOTES and n not in CLASS_LABELS
           and n != "post_transform" for n in attrs) or "base_values" in attrs:
        return None  # the *_as_tensor forms, base values, or an attribute this merge does not know
    classes = len(attrs.get("classlabels_int64s") or attrs.get("classlabels_strings") or [])
    trees, modes = attrs.get("nodes_treeids") or [], attrs.get("nodes_modes") or []
    if attrs.get("post_transform", b"NONE") != b"NONE" or classes < 3 or not trees or min(
            trees) < 0 or len(modes) != len(trees):
        return None
    lists = {CLASS_VOTES.get(k, k): v for k, v in attrs.items() if k in TREE_LISTS
             or k in CLASS_VOTES}
    if not _votes_its_own(lists, classes):
        return None
    # a leaf without votes: the classifier has no label for a row reaching it (and refuses
    # the run), where a regressor scores it 0
    voted = set(zip(lists.get("target_treeids") or [], lists.get("target_nodeids") or [],
                    strict=False))
    leaves = zip(trees, attrs.get("nodes_nodeids") or [], modes, strict=False)
    if any(mode == b"LEAF" and (t, n) not in voted for t, n, mode in leaves):
        return None
    lists["n_targets"] = classes
    return node, lists


def samme_vote_batching(rw: Rewriter) -> int:
    """skl2onnx's AdaBoostClassifier (SAMME) votes estimator by estimator: ArgMax of its scores
    over axis 1 (kept), Equal to the class indices, Where (one value there, another elsewhere),
    Mul by the estimator's weight, then one Sum of all the votes. Where the scores are the equal
    parts of one Split along axis 1 (tree_classifier_merging's) in the Sum's order, the 4m + 1
    nodes of m estimators become six: a Reshape of the Split's input to [N, m, C], ArgMax over
    axis 2, Equal, Where, Mul by the weights [m, 1] and ReduceSum over axis 1 (the CPU EP adds
    each class's votes in estimator order, as the Sum did). A ConstantOfShape of a part's Shape
    that only the Wheres read becomes a constant."""
    batched = 0
    for found in matches(rw, "Sum", _samme_votes):
        _batch_votes(rw, *found)
        batched += 1
    return batched


def _samme_vote(rw: Rewriter, name: str,
                total: NodeProto) -> tuple[list[NodeProto], np.ndarray, list[str]] | None:
    """``([argmax, equal, where, mul], weight, [classes, there, elsewhere])`` of the vote
    ``name`` that only ``total`` reads."""
    mul = rw.producer.get(name)
    if not is_op(mul, "Mul") or rw.only_consumer(name) is not total or len(mul.input) != 2:
        return None
    where = next((n for n in map(rw.producer.get, mul.input) if is_op(n, "Where")), None)
    weight = rw.const(other_input(mul, where.output[0]) or "") if where is not None else None
    if weight is None or weight.size != 1 or rw.only_consumer(where.output[0]) is not mul:
        return None
    equal = rw.producer.get(where.input[0])
    if not is_op(equal, "Equal") or rw.only_consumer(equal.output[0]) is not where:
        return None
    argmax = rw.producer.get(equal.input[0])
    if (not is_op(argmax, "ArgMax") or rw.only_consumer(argmax.output[0]) is not equal
            or node_attribute(argmax, "axis", 0) not in (1, -1)
            or node_attribute(argmax, "keepdims", 1) != 1
            or node_attribute(argmax, "select_last_index", 0)):
        return None
    return [argmax, equal, where, mul], weight, [equal.input[1], where.input[1], where.input[2]]


def _samme_votes(rw: Rewriter, total: NodeProto) -> tuple[Any, ...] | None:
    """``(total, nodes, weights [m, 1], split, the value where a vote is, classes C, [classes,
    there, elsewhere])`` of the m votes ``total`` sums, where they hold the pattern
    ``samme_vote_batching`` takes."""
    if len(total.input) < 2:
        return None
    found = [_samme_vote(rw, name, total) for name in total.input]
    votes = [v for v in found if v is not None]
    if len(votes) != len(found) or len({tuple(v[2]) for v in votes}) != 1:
        return None
    classes_name, there, elsewhere = votes[0][2]
    split = rw.producer.get(votes[0][0][0].input[0])
    if not is_op(split, "Split") or [v[0][0].input[0] for v in votes] != list(split.output):
        return None
    shape, dtype = rw.shape(split.input[0]), rw.dtype(votes[0][0][2].output[0])
    m = len(votes)
    if (shape is None or len(shape) != 2 or not isinstance(shape[1], int) or shape[1] % m
            or node_attribute(split, "axis", 0) not in (1, -1) or dtype is None):
        return None
    width = shape[1] // m
    if width < 2:  # numpy sums a last axis of votes pairwise, not in estimator order
        return None
    sizes = (node_attribute(split, "split") if len(split.input) < 2 or not split.input[1]
             else rw.const(split.input[1]))
    classes, outside = rw.const(classes_name), rw.const(elsewhere)
    if (sizes is not None and [int(s) for s in np.asarray(sizes).reshape(-1)] != [width] * m
            or node_attribute(split, "num_outputs", m) != m
            or classes is None or classes.dtype != np.int64 or classes.shape not in (
                (width,), (1, width)) or outside is None or outside.size != 1):
        return None
    inside = _broadcast_value(rw, there, split.output)
    weights = [v[1] for v in votes]
    # one value each, of rank 2 at most: each vote stays [N, C], as it broadcasts to [N, m, C]
    if inside is None or any(w.dtype != dtype or w.ndim > 2 for w in (*weights, inside, outside)):
        return None
    nodes = [n for v in votes for n in v[0]]
    return (total, nodes, np.array([w.reshape(()) for w in weights]).reshape(m, 1), split,
            inside, width, votes[0][2])


def _broadcast_value(rw: Rewriter, name: str, parts: Sequence[str]) -> np.ndarray | None:
    """The one value ``name`` holds: a constant of one element, or a ConstantOfShape of the
    Shape of one of ``parts`` (each vote's shape, so a scalar stands for it)."""
    value = rw.const(name)
    if value is not None:
        return value.reshape(()) if value.size == 1 else None
    fill = rw.producer.get(name)
    if not is_op(fill, "ConstantOfShape"):
        return None
    shape = rw.producer.get(fill.input[0])
    if (not is_op(shape, "Shape") or shape.input[0] not in parts
            or node_attribute(shape, "start", 0) != 0 or node_attribute(shape, "end") is not None):
        return None
    given = node_attribute(fill, "value")
    if given is None:
        return np.zeros((), np.float32)
    value = numpy_helper.to_array(given)
    return value.reshape(()) if value.size == 1 else None


def _batch_votes(rw: Rewriter, total: NodeProto, nodes: list[NodeProto], weights: np.ndarray,
                 split: NodeProto, inside: np.ndarray, width: int, names: list[str]) -> None:
    """The six nodes of ``samme_vote_batching`` in place of ``nodes`` (each vote's four) and
    ``total``; ``names``: the class indices, the value where a vote is and where it is not."""
    m, base = len(weights), total.name or total.output[0]
    classes, there, elsewhere = names
    rows = (rw.shape(split.input[0]) or (None,))[0]
    kind, dtype, _ = rw.type_of(total.output[0]) or (None, None, None)
    consts = {}
    for key, value in (("shape", np.array([0, m, width], np.int64)), ("weights", weights),
                       ("there", inside), ("axes", np.array([1], np.int64))):
        consts[key] = rw.fresh(f"{base}_{key}")
        rw.add_constant(consts[key], value)
    values = {key: rw.fresh(f"{base}_{key}") for key in ("votes", "best", "equal", "picked",
                                                          "weighted")}
    index = rw.type_of(nodes[0].output[0])
    mask = rw.type_of(nodes[1].output[0])
    for key, found in (("votes", (kind, dtype, (rows, m, width))),
                       ("best", index and (index[0], index[1], (rows, m, 1))),
                       ("equal", mask and (mask[0], mask[1], (rows, m, width))),
                       ("picked", (kind, dtype, (rows, m, width))),
                       ("weighted", (kind, dtype, (rows, m, width)))):
        if found and found[1] is not None:
            rw.learned[values[key]] = found
    made = [
        helper.make_node("Reshape", [split.input[0], consts["shape"]], [values["votes"]]),
        helper.make_node("ArgMax", [values["votes"]], [values["best"]], axis=2, keepdims=1),
        helper.make_node("Equal", [values["best"], classes], [values["equal"]]),
        helper.make_node("Where", [values["equal"], consts["there"], elsewhere],
                         [values["picked"]]),
        helper.make_node("Mul", [values["picked"], consts["weights"]], [values["weighted"]]),
    ]
    if rw.model.opset_imports.get(DEFAULT_DOMAIN, 0) >= 13:  # axes an input from 13 on
        reduce = helper.make_node("ReduceSum", [values["weighted"], consts["axes"]],
                                  [total.output[0]], keepdims=0)
    else:
        reduce = helper.make_node("ReduceSum", [values["weighted"]], [total.output[0]], axes=[1],
                                  keepdims=0)
    for node in (*made, reduce):
        node.name = rw.fresh(f"{base}::{node.op_type}")
    old = sorted(nodes, key=lambda n: rw.position[id(n)])
    fill = rw.producer.get(there)
    for node, new in zip(old, made, strict=False):
        rw.replace(node, new)
    rw.replace(total, reduce)
    for node in old[len(made):]:
        rw.remove(node, into=reduce.name)
    if fill is not None:
        _drop_unread(rw, fill, reduce.name)


def _drop_unread(rw: Rewriter, node: NodeProto, into: str) -> None:
    """Remove ``node`` where nothing reads its outputs, then so the writers of its inputs."""
    if id(node) not in rw.position or rw.holds_graph(node) or any(
            o and (rw.consumers.get(o) or o in rw.outputs) for o in node.output):
        return
    inputs = [i for i in node.input if i]
    rw.remove(node, into=into)
    for name in inputs:
        writer = rw.producer.get(name)
        if writer is not None:
            _drop_unread(rw, writer, into)


def class_label_gather(rw: Rewriter) -> int:
    """skl2onnx's predicted label: an ArgMax over axis 1 (kept) of [N, C] scores, an
    ArrayFeatureExtractor of the constant 1-D class list at those indices ([1, N]), a Reshape to
    [-1] and Casts before or after it (to int64, and in some exports to float and back) become
    an ArgMax without the kept axis and a Gather of the class list, cast here, at those [N]
    indices: the same labels, two kernels for four to six. Only casts that keep every class's
    value are taken (a class list that a Cast would round, wrap or make bool stays as written);
    every value between the ArgMax and the last node taken is read by the next node alone."""
    done = 0
    for argmax in rw.live():
        if (not is_op(argmax, "ArgMax") or node_attribute(argmax, "keepdims", 1) != 1
                or node_attribute(argmax, "axis", 0) not in (1, -1)):
            continue
        scores = rw.shape(argmax.input[0])
        if scores is None or len(scores) != 2:
            continue
        chain = _label_chain(rw, argmax)
        if chain is None:
            continue
        afe, rest, classes = chain
        found = rw.type_of(argmax.output[0])
        if not tensor_typed(found):
            continue
        index, constant = rw.fresh(f"{argmax.output[0]}_flat"), rw.fresh(f"{afe.name}_classes")
        rw.add_constant(constant, classes)
        rw.learned[index] = (found[0], found[1], (scores[0],))  # type: ignore[index]
        flat = copy_node(argmax)
        del flat.attribute[:]
        flat.attribute.extend(a for a in argmax.attribute if a.name != "keepdims")
        flat.attribute.append(helper.make_attribute("keepdims", 0))
        flat.output[0] = index
        gather = helper.make_node("Gather", [constant, index], [rest[-1].output[0]], axis=0,
                                  name=rw.fresh(f"{afe.name}::Gather"))
        rw.replace(argmax, flat)
        rw.replace(afe, gather)
        for node in rest:
            rw.remove(node, into=gather.name)
        done += 1
    return done


def _label_chain(rw: Rewriter, argmax: NodeProto,
                 ) -> tuple[NodeProto, list[NodeProto], np.ndarray] | None:
    """``(extractor, [the Reshape and Casts after it], the class list as the last Cast leaves
    it)`` for ``class_label_gather``, ending with the last Cast after the Reshape; ``None``
    where the pattern does not hold."""
    afe = rw.only_consumer(argmax.output[0])
    if (not is_op(afe, "ArrayFeatureExtractor", ML_DOMAIN)
            or list(afe.input[1:]) != [argmax.output[0]]):
        return None
    classes = rw.const(afe.input[0])
    if classes is None or classes.ndim != 1 or classes.dtype.kind not in "iuf":
        return None
    rest: list[NodeProto] = []
    reshaped = False
    value = afe.output[0]
    while True:
        node = rw.only_consumer(value)
        if node is None or len(node.output) != 1:
            break
        if is_op(node, "Reshape") and not reshaped and node.input[0] == value:
            shape = rw.const(node.input[1]) if len(node.input) > 1 else None
            if shape is None or shape.reshape(-1).tolist() != [-1]:
                break
            reshaped = True
        elif is_op(node, "Cast") and len(node.input) == 1:
            to = helper.tensor_dtype_to_np_dtype(node_attribute(node, "to"))
            if to.kind not in "iuf":
                break
            cast = classes.astype(to)
            if not np.array_equal(cast, classes):
                break
            classes = cast
        else:
            break
        rest.append(node)
        value = node.output[0]
    if not reshaped:
        return None
    return afe, rest, classes


def cast_elimination(rw: Rewriter) -> int:
    """A Cast to the element type its tensor input already has (skl2onnx casts the int64 label
    it outputs to int64 again, and an MLP's float input to float): read by nodes only, its
    readers read its input instead; writing a graph output, the node writing its input, read by
    nothing else, writes that output itself. Runs after the other passes."""
    removed = 0
    for cast in rw.live():
        if not is_op(cast, "Cast") or len(cast.input) != 1 or len(cast.output) != 1:
            continue
        source, out = cast.input[0], cast.output[0]
        given, made = rw.type_of(source), rw.type_of(out)
        if (not tensor_typed(given) or not tensor_typed(made)
                or given[1] != made[1]):  # type: ignore[index]
            continue
        if out not in rw.outputs:
            removed += _read_through(rw, cast)
            continue
        writer = rw.producer.get(source)
        if (writer is None or source in rw.outputs or rw.consumers.get(source) != [cast]
                or writer.name in rw.unfused or rw.holds_graph(writer)
                or source in rw.aliases.values()):
            continue
        new = copy_node(writer)
        new.output[list(new.output).index(source)] = out
        rw.remove(cast, into=writer.name)
        rw.replace(writer, new)
        removed += 1
    return removed


def _read_through(rw: Rewriter, cast: NodeProto) -> int:
    """``cast``'s readers reading its input instead, and so the nodes a reader's fusion replaced
    (placed where no provider claims the fused node): 1; 0 where a reader holds a graph, whose
    bodies may read the name too."""
    source, out = cast.input[0], cast.output[0]
    readers = list({id(n): n for n in rw.consumers.get(out, [])}.values())
    if not readers or any(rw.holds_graph(n) for n in readers):
        return 0
    rw.remove(cast, into=readers[0].name)
    names = {out: source}
    for reader in readers:
        rw.replace(reader, inputs_renamed(reader, names))
        originals = rw.unfused.get(reader.name)
        if originals:
            rw.unfused[reader.name] = [inputs_renamed(n, names) for n in originals]
    return 1
