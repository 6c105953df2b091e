"""Tree ensembles of the ``ai.onnx.ml`` domain: TreeEnsemble, TreeEnsembleRegressor and
TreeEnsembleClassifier. Every tree is flattened into one node table, built once per kernel, and
all (row, tree) pairs walk it together, one depth level per numpy step.
"""

from __future__ import annotations

import math

import numpy as np

from ep_host import deny, require
from ep_host.kernels.ml import (
    ML,
    NUMBERS,
    TRANSFORM_NAMES,
    input_type,
    tensor_type,
    transform_scores,
)
from ep_host.kernels.registry import kernel

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
TRANSFORMS = {v: k for k, v in TRANSFORM_NAMES.items()}
PAIRS_PER_STEP = 1 << 16  # (row, tree) pairs walked per step: the working set stays in cache


# ---------------------------------------------------------------------------------------------
# The flattened forest
# ---------------------------------------------------------------------------------------------


def aggregate_sums(aggregate):
    return aggregate in (0, 1)  # AVERAGE, SUM


class Forest:
    """Interior nodes ``0..I-1`` then leaves ``I..I+L-1`` in one table; a leaf's children are
    itself, so every pair can take ``depth`` steps. Children are ``(index, is_leaf)`` pairs."""

    def __init__(self, feature, modes, splits, true_child, false_child, tracks, member_sets,
                 roots, n_leaves, votes, n_targets, aggregate):
        n_interior = len(feature)
        self.n_interior, self.n_leaves, self.n_targets = n_interior, n_leaves, n_targets
        self.aggregate = aggregate
        size = n_interior + n_leaves

        def flat(child):
            index, is_leaf = child
            return n_interior + index if is_leaf else index

        self.feature = np.zeros(size, np.intp)
        self.feature[:n_interior] = np.asarray(feature, np.intp).reshape(-1)
        self.modes = np.full(size, LEQ, np.int8)
        self.modes[:n_interior] = np.asarray(modes, np.int8).reshape(-1)
        self.splits = np.full(size, np.nan)
        self.splits[:n_interior] = np.asarray(splits, np.float64).reshape(-1)
        self.tracks = np.zeros(size, bool)
        self.tracks[:n_interior] = np.asarray(tracks, bool).reshape(-1)
        self.true_child = np.arange(size, dtype=np.intp)
        self.false_child = np.arange(size, dtype=np.intp)
        self.true_child[:n_interior] = [flat(c) for c in true_child]
        self.false_child[:n_interior] = [flat(c) for c in false_child]
        self.member_sets = member_sets  # interior index -> list of member values
        self.roots = np.asarray([flat(r) for r in roots], np.intp)
        self.depth = self._depth()
        self.fast = (not member_sets and bool(np.isin(self.modes, (LEQ, LT, GTE, GT)).all())
                     and not bool(np.isnan(self.splits[:n_interior]).any()))
        self._tables = {}
        self._votes(votes)

    def _depth(self):
        frontier, depth = np.unique(self.roots), 0
        frontier = frontier[frontier < self.n_interior]
        while frontier.size:
            depth += 1
            if depth > self.n_interior:
                raise ValueError("a tree does not reach its leaves (it has a cycle)")
            frontier = np.unique(np.concatenate([self.true_child[frontier],
                                                 self.false_child[frontier]]))
            frontier = frontier[frontier < self.n_interior]
        return depth

    def _votes(self, votes):
        """Per leaf and target: the leaf's vote (summed, or the min/max of several) and whether
        it has one. ``votes`` holds (leaf, target, weight) triples."""
        fill = {2: np.inf, 3: -np.inf}.get(self.aggregate, 0.0)
        weights = np.full((max(self.n_leaves, 1), self.n_targets), fill)
        has = np.zeros(weights.shape, bool)
        votes = list(votes)
        for leaf, target, weight in votes:
            if not 0 <= target < self.n_targets:
                raise ValueError(f"target id {target} is outside [0, {self.n_targets})")
            if self.aggregate == 2:
                weights[leaf, target] = min(weights[leaf, target], weight)
            elif self.aggregate == 3:
                weights[leaf, target] = max(weights[leaf, target], weight)
            else:
                weights[leaf, target] += weight
            has[leaf, target] = True
        self.weights, self.has = weights, has
        # one vote at most per leaf: sums gather one weight per (row, tree), not a row of them
        self.single_vote = bool((has.sum(axis=1) <= 1).all()) and aggregate_sums(self.aggregate)
        self.leaf_target = has.argmax(axis=1)
        self.leaf_weight = np.where(has.any(axis=1), weights[np.arange(len(weights)),
                                                             self.leaf_target], 0.0)
        self.always_voted = self._always_voted()
        self.voted_targets = {target for _, target, _ in votes}  # the targets with any vote

    def _always_voted(self):
        """Whether every row gets a vote for every target: some tree votes for it at every
        leaf it can reach."""
        always = np.zeros(self.n_targets, bool)
        for root in self.roots.tolist():
            frontier = np.asarray([root])
            while (frontier < self.n_interior).any():
                frontier = np.unique(np.concatenate([self.true_child[frontier],
                                                     self.false_child[frontier]]))
            always |= self.has[frontier - self.n_interior].all(axis=0)
        return bool(always.all())

    def _table(self, dtype):
        """The compare table for inputs of ``dtype``. Fast form: every node compares
        ``value <= threshold`` and takes ``children[2 * node + result]``; x < t becomes
        x <= (the float below t), and GT/GTE swap their children. ``nan_slot`` is the slot a
        NaN value takes (the true child when the node tracks missing values as true)."""
        table = self._tables.get(dtype)
        if table is not None:
            return table
        size = len(self.feature)
        splits = self.splits.astype(dtype)
        modes = self.modes
        swap = np.zeros(size, bool)
        if self.fast:
            below = (modes == LT) | (modes == GTE)
            lowered = np.nextafter(splits, np.asarray(-np.inf, dtype))
            lowered[np.isneginf(splits)] = np.nan  # x < -inf never holds; x <= NaN neither
            splits = np.where(below, lowered, splits)
            swap = (modes == GT) | (modes == GTE)
        children = np.empty(2 * size, np.intp)
        children[1::2] = np.where(swap, self.false_child, self.true_child)
        children[0::2] = np.where(swap, self.true_child, self.false_child)
        nan_slot = (self.tracks != swap).astype(np.intp)
        table = (splits, children, nan_slot)
        self._tables[dtype] = table
        return table

    def leaves(self, xp, x, start, stop):
        """The leaf (0..L-1) each row of ``x[start:stop]`` reaches in each tree:
        [rows, trees]."""
        splits, children, nan_slot = (xp.asarray(a) for a in self._table(x.dtype))
        feature = xp.asarray(self.feature)
        rows, width = stop - start, x.shape[1]
        flat_x = x.reshape(-1)
        node = xp.empty((rows, len(self.roots)), dtype=xp.intp)
        node[...] = xp.asarray(self.roots)
        base = (xp.arange(start, stop, dtype=xp.intp) * width)[:, None]
        has_nan = bool(xp.isnan(x[start:stop]).any())
        for _ in range(self.depth):
            at = feature.take(node)
            at += base
            value = flat_x.take(at)
            threshold = splits.take(node)
            if self.fast:
                go = value <= threshold
            else:
                go = self._general_compare(xp, node, value, threshold)
            slot = node * 2
            if has_nan:
                slot += xp.where(xp.isnan(value), nan_slot.take(node), go)
            else:
                slot += go
            node = children.take(slot)
        return node - self.n_interior

    def _general_compare(self, xp, node, value, threshold):
        mode = xp.asarray(self.modes).take(node)
        go = xp.select(
            [mode == LEQ, mode == LT, mode == GTE, mode == GT, mode == EQ, mode == NEQ],
            [value <= threshold, value < threshold, value >= threshold, value > threshold,
             value == threshold, value != threshold], default=False)
        for k, members in self.member_sets.items():
            at = node == k
            if bool(at.any()):
                go = xp.where(at, xp.isin(value, xp.asarray(members, dtype=value.dtype)), go)
        return go

    def _sum_single_votes(self, xp, leaf, scores, hit):
        rows, k = scores.shape
        slot = xp.asarray(self.leaf_target).take(leaf)
        slot += (xp.arange(rows, dtype=xp.intp) * k)[:, None]
        weight = xp.asarray(self.leaf_weight).take(leaf)
        scores[...] = xp.bincount(slot.reshape(-1), weights=weight.reshape(-1),
                                  minlength=rows * k).reshape(rows, k)
        if self.always_voted:
            hit[...] = True
        else:
            voted = xp.asarray(self.has.any(axis=1)).take(leaf)
            hit[...] = xp.bincount(slot[voted], minlength=rows * k).reshape(rows, k) > 0

    def scores(self, xp, x):
        """Scores [rows, n_targets] in float64, and whether each got a vote; a target no
        tree votes for scores 0."""
        rows = x.shape[0]
        if x.shape[1] <= int(self.feature.max(initial=0)) and self.n_interior:
            raise ValueError(f"a node reads feature {int(self.feature.max())}, the input has "
                             f"{x.shape[1]}")
        x = xp.ascontiguousarray(x)
        scores = xp.zeros((rows, self.n_targets), dtype=xp.float64)
        hit = xp.zeros((rows, self.n_targets), dtype=bool)
        weights, has = xp.asarray(self.weights), xp.asarray(self.has)
        step = max(1, PAIRS_PER_STEP // max(len(self.roots), 1))
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            leaf = self.leaves(xp, x, start, stop)
            if self.single_vote:
                self._sum_single_votes(xp, leaf, scores[start:stop], hit[start:stop])
                continue
            hit[start:stop] = True if self.always_voted else has[leaf].any(axis=1)
            votes = weights[leaf]  # [rows, trees, targets]
            if self.aggregate == 2:
                scores[start:stop] = votes.min(axis=1)
            elif self.aggregate == 3:
                scores[start:stop] = votes.max(axis=1)
            else:
                scores[start:stop] = votes.sum(axis=1)
        if self.aggregate == 0:
            scores /= max(len(self.roots), 1)
        if self.always_voted:
            return scores, hit
        return xp.where(hit, scores, 0.0), hit


# ---------------------------------------------------------------------------------------------
# TreeEnsemble (ai.onnx.ml 5): interior nodes and leaves in separate tables
# ---------------------------------------------------------------------------------------------


def _check_tree_ensemble(node, provider):
    attrs = node.attributes
    n = len(attrs["nodes_featureids"])
    for name in ("nodes_truenodeids", "nodes_falsenodeids", "nodes_trueleafs",
                 "nodes_falseleafs", "nodes_modes", "nodes_splits"):
        size = len(attrs[name]) if name in attrs else -1
        require(size == n, "TreeEnsemble: {} needs one entry per node ({}), got {}", name, n,
                size, code="attribute")
    tracks = attrs.get("nodes_missing_value_tracks_true")
    require(tracks is None or len(tracks) == n, "TreeEnsemble: nodes_missing_value_tracks_true "
            "needs one entry per node ({})", n, code="attribute")
    require(len(attrs["leaf_weights"]) == len(attrs["leaf_targetids"]),
            "TreeEnsemble: leaf_weights and leaf_targetids differ in length", code="attribute")
    modes = [int(m) for m in attrs["nodes_modes"].reshape(-1).tolist()]
    require(all(0 <= m <= MEMBER for m in modes), "TreeEnsemble: nodes_modes must be 0..6, got "
            "{}", sorted(set(modes)), code="attribute")
    aggregate = attrs.get("aggregate_function", 1)
    require(aggregate in AGGREGATES, "TreeEnsemble: aggregate_function must be 0..3, got {}",
            aggregate, code="attribute")
    transform = attrs.get("post_transform", 0)
    require(transform in TRANSFORMS, "TreeEnsemble: post_transform must be 0..4, got {}",
            transform, code="attribute")
    require("n_targets" in attrs, "TreeEnsemble: n_targets is required", code="attribute")
    x = input_type(node)
    for name in ("nodes_splits", "leaf_weights"):
        t = tensor_type(attrs[name])
        require(x is None or t == x, "TreeEnsemble: {} must have the input's type {}, got {}",
                name, x, t, code="dtype")
    n_leaves = len(attrs["leaf_weights"])
    for ids, leafs in (("nodes_truenodeids", "nodes_trueleafs"),
                       ("nodes_falsenodeids", "nodes_falseleafs")):
        bad = [i for i, is_leaf in zip(attrs[ids], attrs[leafs], strict=True)
               if not 0 <= i < (n_leaves if is_leaf else n)]
        require(not bad, "TreeEnsemble: {} holds indices outside the nodes or leaves: {}", ids,
                bad[:3], code="attribute")
    bad = [r for r in attrs["tree_roots"] if not 0 <= r < n]
    require(not bad, "TreeEnsemble: tree_roots outside the {} nodes: {}", n, bad[:3],
            code="attribute")
    true_ = list(zip(attrs["nodes_truenodeids"], attrs["nodes_trueleafs"], strict=True))
    false_ = list(zip(attrs["nodes_falsenodeids"], attrs["nodes_falseleafs"], strict=True))
    leaf_targets = {k: (t,) for k, t in enumerate(attrs["leaf_targetids"])}
    _require_votes(node, aggregate, _every_target_voted(
        [(r, False) for r in attrs["tree_roots"]], true_, false_, leaf_targets,
        attrs.get("n_targets", 0)))
    members = [i for i, m in enumerate(modes) if m == MEMBER]
    if members:
        sets = _membership_sets(attrs.get("membership_values"))
        require(len(sets) == len(members), "TreeEnsemble: membership_values holds {} sets for "
                "{} BRANCH_MEMBER nodes", len(sets), len(members), code="attribute")


def _membership_sets(values):
    if values is None:
        return []
    sets, current = [], []
    for v in values.reshape(-1).tolist():
        if math.isnan(v):
            sets.append(current)
            current = []
        else:
            current.append(v)
    if current:
        sets.append(current)
    return sets


def _every_target_voted(roots, true_children, false_children, leaf_targets, n_targets):
    """Whether every row gets a vote for every target: for each target, some tree votes for
    it at every leaf it can reach. Roots and children are (index, is_leaf) pairs."""
    always = set()
    for root in roots:
        stack, seen, leaves = [root], set(), []
        while stack:
            index, is_leaf = stack.pop()
            if is_leaf:
                leaves.append(index)
            elif index not in seen:
                seen.add(index)
                stack += [true_children[index], false_children[index]]
        if leaves:
            always |= set.intersection(*(set(leaf_targets.get(k, ())) for k in leaves))
    return always >= set(range(n_targets))


def _require_votes(node, aggregate, covered):
    require(aggregate not in (2, 3) or covered, "{}: with aggregate_function MIN or MAX some "
            "row may get no vote for a target, whose score the spec does not define (onnxruntime "
            "gives 0, onnx's reference the float maximum)", node.op_type, code="attribute")



def _tree_ensemble_forest(node):
    attrs = node.attributes
    modes = [int(m) for m in attrs["nodes_modes"].reshape(-1).tolist()]
    members = [i for i, m in enumerate(modes) if m == MEMBER]
    n = len(modes)
    weights = attrs["leaf_weights"].reshape(-1).astype(np.float64).tolist()
    forest = Forest(
        attrs["nodes_featureids"], modes, attrs["nodes_splits"].reshape(-1).astype(np.float64),
        list(zip(attrs["nodes_truenodeids"], attrs["nodes_trueleafs"], strict=True)),
        list(zip(attrs["nodes_falsenodeids"], attrs["nodes_falseleafs"], strict=True)),
        attrs.get("nodes_missing_value_tracks_true") or [0] * n,
        dict(zip(members, _membership_sets(attrs.get("membership_values")), strict=False)),
        [(r, False) for r in attrs["tree_roots"]], len(weights),
        list(zip(range(len(weights)), attrs["leaf_targetids"], weights, strict=True)),
        attrs["n_targets"], attrs.get("aggregate_function", 1))
    return {"forest": forest}


def _rows(x):
    return x.reshape(x.shape[0], -1) if x.ndim != 2 else x


@kernel("TreeEnsemble", 5, domain=ML, dtypes={"float32", "float64", "float16"},
        check=_check_tree_ensemble, bind=_tree_ensemble_forest)
def tree_ensemble(xp, x, *, aggregate_function, leaf_targetids, leaf_weights, n_targets,
                  nodes_falseleafs, nodes_falsenodeids, nodes_featureids, nodes_modes,
                  nodes_splits, nodes_trueleafs, nodes_truenodeids, post_transform, tree_roots,
                  membership_values=None, nodes_hitrates=None,
                  nodes_missing_value_tracks_true=None, forest=None):
    """Splits compare in the input's type; leaf weights sum in float64 and round once."""
    scores, _ = forest.scores(xp, _rows(x))
    return transform_scores(xp, scores, post_transform).astype(x.dtype)


# ---------------------------------------------------------------------------------------------
# TreeEnsembleRegressor and TreeEnsembleClassifier: tree and node ids, LEAF nodes, votes
# ---------------------------------------------------------------------------------------------

BRANCH_MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
                "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ}
AGGREGATE_NAMES = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}


def _either(attrs, name):
    tensor = attrs.get(name + "_as_tensor")
    if tensor is not None:
        return [float(v) for v in tensor.reshape(-1).tolist()]
    values = attrs.get(name)
    return None if values is None else list(values)


def _regressor_layout(attrs):
    """The node table as interior nodes and leaves, with each tree's root and each vote's leaf;
    raises ValueError for an inconsistent table."""
    tree_ids, node_ids = list(attrs["nodes_treeids"]), list(attrs["nodes_nodeids"])
    modes = list(attrs["nodes_modes"])
    n = len(node_ids)
    for name in ("nodes_treeids", "nodes_featureids", "nodes_modes", "nodes_truenodeids",
                 "nodes_falsenodeids"):
        if len(attrs.get(name) or ()) != n:
            raise ValueError(f"{name} needs one entry per node ({n})")
    values = _either(attrs, "nodes_values")
    if values is None or len(values) != n:
        raise ValueError(f"nodes_values needs one entry per node ({n})")
    tracks = attrs.get("nodes_missing_value_tracks_true") or [0] * n
    if len(tracks) != n:
        raise ValueError(f"nodes_missing_value_tracks_true needs one entry per node ({n})")
    unknown = sorted({m for m in modes if m != "LEAF" and m not in BRANCH_MODES})
    if unknown:
        raise ValueError(f"unknown node modes {unknown}")
    position = {}
    for i, key in enumerate(zip(tree_ids, node_ids, strict=True)):
        if key in position:
            raise ValueError(f"tree {key[0]} repeats node id {key[1]}")
        position[key] = i
    interior = [i for i in range(n) if modes[i] != "LEAF"]
    leaves = [i for i in range(n) if modes[i] == "LEAF"]
    interior_of = {i: k for k, i in enumerate(interior)}
    leaf_of = {i: k for k, i in enumerate(leaves)}
    children = set()

    def child(i, ids_name):
        key = (tree_ids[i], attrs[ids_name][i])
        if key not in position:
            raise ValueError(f"node {node_ids[i]} of tree {tree_ids[i]} points to a missing "
                             f"node {key[1]}")
        j = position[key]
        children.add(j)
        return (leaf_of[j], True) if j in leaf_of else (interior_of[j], False)

    true_ = [child(i, "nodes_truenodeids") for i in interior]
    false_ = [child(i, "nodes_falsenodeids") for i in interior]
    roots = {}
    for i in range(n):
        if i not in children:
            if tree_ids[i] in roots:
                raise ValueError(f"tree {tree_ids[i]} has more than one root")
            roots[tree_ids[i]] = i
    return {
        "feature": [attrs["nodes_featureids"][i] for i in interior],
        "modes": [BRANCH_MODES[modes[i]] for i in interior],
        "values": [values[i] for i in interior],
        "true": true_, "false": false_, "tracks": [tracks[i] for i in interior],
        "roots": [(leaf_of[i], True) if i in leaf_of else (interior_of[i], False)
                  for _, i in sorted(roots.items())],
        "position": position, "leaf_of": leaf_of, "n_leaves": len(leaves),
    }



def _layout_and_votes(attrs, prefix):
    """The layout and the (leaf, target, weight) votes of ``<prefix>_treeids/nodeids/ids/
    weights``; raises ValueError for an inconsistent table."""
    layout = _regressor_layout(attrs)
    weights = _either(attrs, prefix + "_weights") or []
    keys = list(zip(attrs.get(prefix + "_treeids") or (), attrs.get(prefix + "_nodeids") or (),
                    strict=True))
    ids = list(attrs.get(prefix + "_ids") or ())
    if len(keys) != len(weights) or len(ids) != len(weights):
        raise ValueError(f"{prefix}_treeids, {prefix}_nodeids, {prefix}_ids and "
                         f"{prefix}_weights differ in length")
    for key in keys:
        if layout["position"].get(key) not in layout["leaf_of"]:
            raise ValueError(f"a {prefix} weight is on node {key[1]} of tree {key[0]}, which "
                             f"is not a LEAF")
    leaves = [layout["leaf_of"][layout["position"][key]] for key in keys]
    return layout, list(zip(leaves, ids, weights, strict=True))


def _old_forest(layout, votes, n_targets, aggregate):
    return Forest(layout["feature"], layout["modes"], layout["values"], layout["true"],
                  layout["false"], layout["tracks"], {}, layout["roots"],
                  max(layout["n_leaves"], 1), votes, n_targets, aggregate)


def _check_tree_regressor(node, provider):
    attrs = node.attributes
    try:
        layout, votes = _layout_and_votes(attrs, "target")
    except ValueError as exc:
        deny("TreeEnsembleRegressor: {}", exc, code="attribute")
    leaf_targets = {}
    for leaf, target, _ in votes:
        leaf_targets.setdefault(leaf, []).append(target)
    _require_votes(node, AGGREGATE_NAMES.get(attrs.get("aggregate_function", "SUM")),
                   _every_target_voted(layout["roots"], layout["true"], layout["false"],
                                       leaf_targets, attrs.get("n_targets") or 0))
    require(attrs.get("aggregate_function", "SUM") in AGGREGATE_NAMES,
            "TreeEnsembleRegressor: aggregate_function must be AVERAGE, SUM, MIN or MAX, got "
            "{!r}", attrs.get("aggregate_function"), code="attribute")
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "TreeEnsembleRegressor: post_transform must be one "
            "of {}, got {!r}", "/".join(TRANSFORM_NAMES), transform, code="attribute")
    base = _either(attrs, "base_values")
    n_targets = attrs.get("n_targets")
    require(n_targets is not None and n_targets >= 1, "TreeEnsembleRegressor: n_targets is "
            "required", code="attribute")
    require(not base or len(base) == n_targets, "TreeEnsembleRegressor: {} base_values for {} "
            "targets", len(base or ()), n_targets, code="attribute")
    bad = sorted({t for _, t, _ in votes if not 0 <= t < n_targets})
    require(not bad, "TreeEnsembleRegressor: target_ids {} outside [0, {})", bad[:3], n_targets,
            code="attribute")


def _regressor_forest(node):
    attrs = node.attributes
    layout, votes = _layout_and_votes(attrs, "target")
    aggregate = AGGREGATE_NAMES[attrs.get("aggregate_function") or "SUM"]
    return {"forest": _old_forest(layout, votes, attrs["n_targets"], aggregate)}


def _compare_type(xp, x):
    """Old-encoding thresholds compare in float32, float64 for float64 input."""
    return x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32, copy=False)


@kernel("TreeEnsembleRegressor", 3, domain=ML, dtypes=NUMBERS, check=_check_tree_regressor,
        bind=_regressor_forest)
def tree_ensemble_regressor(xp, x, *, aggregate_function, post_transform, base_values=None,
                            base_values_as_tensor=None, n_targets=None, nodes_falsenodeids=None,
                            nodes_featureids=None, nodes_hitrates=None,
                            nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None,
                            nodes_modes=None, nodes_nodeids=None, nodes_treeids=None,
                            nodes_truenodeids=None, nodes_values=None,
                            nodes_values_as_tensor=None, target_ids=None, target_nodeids=None,
                            target_treeids=None, target_weights=None,
                            target_weights_as_tensor=None, forest=None):
    """Thresholds compare in float32 (float64 for float64 input); int inputs become float32;
    votes sum in float64; the output is float32."""
    scores, _ = forest.scores(xp, _compare_type(xp, _rows(x)))
    base = _either({"base_values": base_values, "base_values_as_tensor": base_values_as_tensor},
                   "base_values")
    if base:
        scores = scores + xp.asarray(base, dtype=xp.float64)
    return transform_scores(xp, scores, TRANSFORM_NAMES[post_transform]).astype(xp.float32)


@kernel("TreeEnsembleRegressor", 1, domain=ML, dtypes=NUMBERS, check=_check_tree_regressor,
        bind=_regressor_forest)
def tree_ensemble_regressor_1(xp, x, *, aggregate_function, post_transform, base_values=None,
                              n_targets=None, nodes_falsenodeids=None, nodes_featureids=None,
                              nodes_hitrates=None, nodes_missing_value_tracks_true=None,
                              nodes_modes=None, nodes_nodeids=None, nodes_treeids=None,
                              nodes_truenodeids=None, nodes_values=None, target_ids=None,
                              target_nodeids=None, target_treeids=None, target_weights=None,
                              forest=None):
    return tree_ensemble_regressor(xp, x, aggregate_function=aggregate_function,
                                   post_transform=post_transform, base_values=base_values,
                                   forest=forest)


def _class_labels(attrs):
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_int64s")
    return list(strings) if strings else list(ints or ())


def _check_tree_classifier(node, provider):
    attrs = node.attributes
    op = f"TreeEnsembleClassifier-{node.since_version}"
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_int64s")
    require(bool(strings) != bool(ints), "{}: exactly one of classlabels_strings and "
            "classlabels_int64s must be set", op, code="attribute")
    try:
        layout, votes = _layout_and_votes(attrs, "class")
    except ValueError as exc:
        deny("{}: {}", op, exc, code="attribute")
    n_classes = len(_class_labels(attrs))
    bad = sorted({c for _, c, _ in votes if not 0 <= c < n_classes})
    require(not bad, "{}: class_ids {} outside the {} class labels", op, bad[:3], n_classes,
            code="attribute")
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "{}: post_transform must be one of {}, got {!r}", op,
            "/".join(TRANSFORM_NAMES), transform, code="attribute")
    base = _either(attrs, "base_values") or []
    used = {c for _, c, _ in votes}
    if n_classes == 2 and len(used) == 1:
        require(len(base) <= 1 and used == {0}, "{}: two classes with votes for class {} only "
                "and {} base_values: the spec does not say how the second score is formed "
                "(onnxruntime's rules cover votes for class 0 with at most one base value)",
                op, sorted(used), len(base), code="attribute")
        require(transform in ("NONE", "LOGISTIC"), "{}: two classes with one score column "
                "take post_transform NONE or LOGISTIC (the second column is the complement), "
                "got {}", op, transform, code="attribute")
    else:
        require(n_classes >= 2, "{}: needs at least two class labels for one score per class, "
                "got {}", op, n_classes, code="attribute")
        require(not base or len(base) == n_classes, "{}: {} base_values for {} classes", op,
                len(base), n_classes, code="attribute")
        require(n_classes > 2, "{}: two classes with votes for both: the spec does not "
                "define the label (onnxruntime labels these 1 or 0 by the second score's sign, "
                "whatever the class labels); exporters write one column of votes for class 0",
                op, code="attribute")


def _classifier_forest(node):
    attrs = node.attributes
    layout, votes = _layout_and_votes(attrs, "class")
    return {"forest": _old_forest(layout, votes, len(_class_labels(attrs)), 1)}


def _one_column_scores(xp, score, mixed_signs, transform):
    """Two classes, votes for class 0 only (a binary gradient-boosting export), onnxruntime's
    rule: the second class wins when the raw score is above 0.5, or above 0 when some weights
    are negative; the scores are [1 - p, p] for p the transformed score, or [-s, s] for mixed
    signs without a transform."""
    positive = score > 0 if mixed_signs else score > 0.5
    if transform == "LOGISTIC":
        p = transform_scores(xp, score[:, None], 2)[:, 0]
        return positive, xp.stack([1 - p, p], axis=1)
    if mixed_signs:
        return positive, xp.stack([-score, score], axis=1)
    return positive, xp.stack([1 - score, score], axis=1)


def _tree_classifier(xp, x, forest, labels, base, transform, mixed_signs):
    scores, has = forest.scores(xp, _compare_type(xp, _rows(x)))
    labels_array = (xp.asarray(labels, dtype=object) if isinstance(labels[0], str)
                    else xp.asarray(labels, dtype=xp.int64))
    if len(labels) == 2 and forest.voted_targets == {0}:
        score = scores[:, 0] + (base[0] if base else 0.0)
        positive, out = _one_column_scores(xp, score, mixed_signs, transform)
        return labels_array[positive.astype(xp.intp)], out.astype(xp.float32)
    if base:
        scores = scores + xp.asarray(base, dtype=xp.float64)
        has = xp.ones_like(has)
    if rows_without := int((~has.any(axis=1)).sum()):
        raise ValueError(f"{rows_without} rows reach no vote for any class, so no label")
    winner = xp.where(has, scores, -xp.inf).argmax(axis=1)
    out = transform_scores(xp, scores, TRANSFORM_NAMES[transform])
    return labels_array[winner], out.astype(xp.float32)


@kernel("TreeEnsembleClassifier", 3, domain=ML, dtypes=NUMBERS, check=_check_tree_classifier,
        bind=_classifier_forest)
def tree_ensemble_classifier(xp, x, *, post_transform, base_values=None,
                             base_values_as_tensor=None, class_ids=None, class_nodeids=None,
                             class_treeids=None, class_weights=None,
                             class_weights_as_tensor=None, classlabels_int64s=None,
                             classlabels_strings=None, nodes_falsenodeids=None,
                             nodes_featureids=None, nodes_hitrates=None,
                             nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None,
                             nodes_modes=None, nodes_nodeids=None, nodes_treeids=None,
                             nodes_truenodeids=None, nodes_values=None,
                             nodes_values_as_tensor=None, forest=None):
    """The label is the class with the highest raw score among those that got a vote (the
    first on ties); scores are float32 after the post transform."""
    attrs = {"base_values": base_values, "base_values_as_tensor": base_values_as_tensor,
             "class_weights": class_weights, "class_weights_as_tensor": class_weights_as_tensor}
    weights = _either(attrs, "class_weights") or []
    return _tree_classifier(xp, x, forest, _class_labels(
        {"classlabels_strings": classlabels_strings, "classlabels_int64s": classlabels_int64s}),
        _either(attrs, "base_values") or [], post_transform, any(w < 0 for w in weights))


@kernel("TreeEnsembleClassifier", 1, domain=ML, dtypes=NUMBERS, check=_check_tree_classifier,
        bind=_classifier_forest)
def tree_ensemble_classifier_1(xp, x, *, post_transform, base_values=None, class_ids=None,
                               class_nodeids=None, class_treeids=None, class_weights=None,
                               classlabels_int64s=None, classlabels_strings=None,
                               nodes_falsenodeids=None, nodes_featureids=None,
                               nodes_hitrates=None, nodes_missing_value_tracks_true=None,
                               nodes_modes=None, nodes_nodeids=None, nodes_treeids=None,
                               nodes_truenodeids=None, nodes_values=None, forest=None):
    return tree_ensemble_classifier(
        xp, x, post_transform=post_transform, base_values=base_values,
        class_weights=class_weights, classlabels_int64s=classlabels_int64s,
        classlabels_strings=classlabels_strings, forest=forest)
