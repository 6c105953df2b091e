"""Classical machine learning ops of the ``ai.onnx.ml`` domain: LabelEncoder, CategoryMapper,
TreeEnsemble, TreeEnsembleRegressor, ArrayFeatureExtractor, Binarizer, Scaler, Imputer,
FeatureVectorizer, OneHotEncoder and LinearRegressor.

Look-ups run in plain Python over the flattened input (strings are numpy object arrays);
arithmetic uses ``xp``.
"""

from __future__ import annotations

import math

import ep_host
from ep_host import deny, require
from ep_host.kernels.helpers import as_text, object_array
from ep_host.kernels.registry import kernel

ML = "ai.onnx.ml"
NUMBERS = frozenset({"float32", "float64", "int64", "int32"})


def _input_type(node, i=0):
    v = node.inputs[i] if i < len(node.inputs) else None
    return None if v is None or v.dtype is None else v.dtype.name


# ---------------------------------------------------------------------------------------------
# LabelEncoder, CategoryMapper
# ---------------------------------------------------------------------------------------------


def _lookup(xp, x, keys, values, default, out_dtype, key_of):
    table = {}
    for k, v in zip(keys, values, strict=True):
        table[key_of(k)] = v  # a repeated key: the last one wins
    mapped = [table.get(key_of(k), default) for k in x.reshape(-1).tolist()]
    if out_dtype is object:
        return object_array(xp, [as_text(v) for v in mapped], x.shape)
    return xp.asarray(mapped, dtype=out_dtype).reshape(x.shape)


def _check_label_encoder_1(node, provider):
    t = _input_type(node)
    require(t in (None, "string", "int64"), "LabelEncoder: version 1 maps string <-> int64, got "
            "{} input", t, code="dtype")
    _require_unique(node, "classes_strings", node.attributes.get("classes_strings") or ())


def _require_unique(node, name, keys):
    """Before version 4 the spec does not say which of repeated keys wins (onnxruntime takes
    the first, onnx's reference the last)."""
    seen, repeated = set(), []
    for k in keys:
        k = "nan" if isinstance(k, float) and math.isnan(k) else k
        if k in seen:
            repeated.append(k)
        seen.add(k)
    require(not repeated, "{}-{}: {} repeats {}; the spec does not say which entry wins",
            node.op_type, node.since_version, name, repeated[:3], code="attribute")


@kernel("LabelEncoder", 1, domain=ML, dtypes={"string", "int64"}, check=_check_label_encoder_1)
def label_encoder_1(xp, x, *, default_int64, default_string, classes_strings=()):
    """String input maps to its index in classes_strings; int64 input maps to the class at
    that index."""
    classes = list(classes_strings)
    if x.dtype == object:
        index = {c: i for i, c in enumerate(classes)}
        out = [index.get(as_text(s), default_int64) for s in x.reshape(-1).tolist()]
        return xp.asarray(out, dtype=xp.int64).reshape(x.shape)
    out = [classes[i] if 0 <= i < len(classes) else default_string
           for i in x.reshape(-1).tolist()]
    return object_array(xp, out, x.shape)


_KEY_TYPES2 = {"keys_strings": "string", "keys_int64s": "int64", "keys_floats": "float32"}
_VALUE_TYPES2 = {"values_strings": "string", "values_int64s": "int64", "values_floats": "float32"}


def _one_of(node, names, what):
    given = [n for n in names if node.attributes.get(n) is not None]
    require(len(given) == 1, "LabelEncoder: exactly one of {} must be set, got {}", what,
            given or "none", code="attribute")
    return given[0]


def _tensor_type(array) -> str:
    return ep_host.dtype(array.dtype).name


def _label_encoder_types(node):
    keys = _one_of(node, [*_KEY_TYPES2, "keys_tensor"], "keys_*")
    values = _one_of(node, [*_VALUE_TYPES2, "values_tensor"], "values_*")
    attrs = node.attributes
    key_type = _KEY_TYPES2.get(keys) or _tensor_type(attrs["keys_tensor"])
    value_type = _VALUE_TYPES2.get(values) or _tensor_type(attrs["values_tensor"])
    return keys, values, key_type, value_type


def _check_label_encoder(node, provider):
    keys, values, key_type, value_type = _label_encoder_types(node)
    attrs = node.attributes
    n_keys, n_values = len(attrs[keys]), len(attrs[values])
    require(n_keys == n_values, "LabelEncoder: {} has {} entries, {} has {}", keys, n_keys,
            values, n_values, code="attribute")
    if node.since_version < 4:
        _require_unique(node, keys, attrs[keys])
    t = _input_type(node)
    require(t is None or t == key_type, "LabelEncoder: the input must have the keys' type {}, "
            "got {}", key_type, t, code="dtype")
    allowed = {"string", "int64", "float32", "int32", "int16", "float64"}
    if node.since_version < 4:
        allowed = {"string", "int64", "float32"}
    require(key_type in allowed and value_type in allowed, "LabelEncoder-{} maps {} keys and "
            "values, got {} -> {}", node.since_version, "/".join(sorted(allowed)), key_type,
            value_type, code="dtype")
    default = attrs.get("default_tensor")
    if default is not None:
        require(default.size == 1 and _tensor_type(default) == value_type,
                "LabelEncoder: default_tensor must hold one {} value, got {} of {}", value_type,
                default.size, _tensor_type(default), code="attribute")


def _numpy_type(name):
    return object if name == "string" else ep_host.dtype(name).numpy


def _label_encoder(xp, x, attrs, nan_matches_nan):
    keys = next(attrs[k] for k in (*_KEY_TYPES2, "keys_tensor") if attrs.get(k) is not None)
    values = next(attrs[k] for k in (*_VALUE_TYPES2, "values_tensor")
                  if attrs.get(k) is not None)
    value_names = [k for k in (*_VALUE_TYPES2, "values_tensor") if attrs.get(k) is not None]
    if value_names[0] == "values_tensor":
        value_type = _tensor_type(values)
        values = values.tolist()
    else:
        value_type = _VALUE_TYPES2[value_names[0]]
    keys = keys.tolist() if hasattr(keys, "tolist") else list(keys)
    if attrs.get("default_tensor") is not None:
        default = attrs["default_tensor"].reshape(-1).tolist()[0]
    elif value_type == "string":
        default = attrs["default_string"]
    elif value_type in ("float32", "float64"):
        default = attrs["default_float"]
    else:
        default = attrs["default_int64"]
    if x.dtype == object:
        key_of = as_text
    elif x.dtype.kind == "f":
        if nan_matches_nan:
            def key_of(v):
                return "nan" if math.isnan(v) else float(v) + 0.0
        else:
            width = x.dtype.type

            def key_of(v):
                return width(v).tobytes()
    else:
        key_of = int
    return _lookup(xp, x, keys, values, default, _numpy_type(value_type), key_of)


def _label_encoder_kernel(nan_matches_nan):
    def label_encoder(xp, x, *, default_float=None, default_int64=None, default_string=None,
                      default_tensor=None, keys_floats=None, keys_int64s=None, keys_strings=None,
                      keys_tensor=None, values_floats=None, values_int64s=None,
                      values_strings=None, values_tensor=None):
        attrs = {k: v for k, v in locals().items() if k not in ("xp", "x")}
        return _label_encoder(xp, x, attrs, nan_matches_nan)

    return label_encoder


# Version 2 compares float keys bit by bit; version 4 matches NaN with any NaN and 0 with -0.
kernel("LabelEncoder", 2, domain=ML, dtypes=None, check=_check_label_encoder)(
    _label_encoder_kernel(nan_matches_nan=False))
kernel("LabelEncoder", 4, domain=ML, dtypes=None, check=_check_label_encoder)(
    _label_encoder_kernel(nan_matches_nan=True))


def _check_category_mapper(node, provider):
    attrs = node.attributes
    ints, strings = attrs.get("cats_int64s") or (), attrs.get("cats_strings") or ()
    require(len(ints) == len(strings), "CategoryMapper: cats_int64s ({}) and cats_strings ({}) "
            "must have the same length", len(ints), len(strings), code="attribute")
    _require_unique(node, "cats_int64s", ints)
    _require_unique(node, "cats_strings", strings)


@kernel("CategoryMapper", 1, domain=ML, dtypes={"string", "int64"}, check=_check_category_mapper)
def category_mapper(xp, x, *, default_int64, default_string, cats_int64s=(), cats_strings=()):
    if x.dtype == object:
        return _lookup(xp, x, cats_strings, cats_int64s, default_int64, xp.int64, as_text)
    return _lookup(xp, x, cats_int64s, cats_strings, default_string, object, int)


# ---------------------------------------------------------------------------------------------
# TreeEnsemble
# ---------------------------------------------------------------------------------------------

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
TRANSFORMS = {0: "NONE", 1: "SOFTMAX", 2: "LOGISTIC"}
UNDEFINED_TRANSFORMS = ("SOFTMAX_ZERO and PROBIT are not defined by the spec (onnxruntime's "
                        "SOFTMAX_ZERO gives NaN for an all-zero row)")


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
    require(transform in TRANSFORMS, "TreeEnsemble: {} implements post_transform {}, got {}"
            "; {}", provider, ", ".join(f"{k} ({v})" for k, v in TRANSFORMS.items()), transform,
            UNDEFINED_TRANSFORMS, code="attribute")
    require("n_targets" in attrs, "TreeEnsemble: n_targets is required", code="attribute")
    x = _input_type(node)
    for name in ("nodes_splits", "leaf_weights"):
        t = _tensor_type(attrs[name])
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


def _transform(xp, scores, kind):
    if kind == 1:  # SOFTMAX
        e = xp.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if kind == 2:  # LOGISTIC
        e = xp.exp(-xp.abs(scores))
        return xp.where(scores >= 0, 1 / (1 + e), e / (1 + e))
    return scores


class _Trees:
    """Interior nodes as parallel arrays; each child is an interior index or a leaf index."""

    def __init__(self, xp, feature, modes, splits, true_id, true_leaf, false_id, false_leaf,
                 tracks, member_sets):
        self.feature = xp.asarray(feature, dtype=xp.int64)
        self.modes = xp.asarray(modes, dtype=xp.int64)
        self.splits = splits
        self.true_id = xp.asarray(true_id, dtype=xp.int64)
        self.true_leaf = xp.asarray(true_leaf, dtype=bool)
        self.false_id = xp.asarray(false_id, dtype=xp.int64)
        self.false_leaf = xp.asarray(false_leaf, dtype=bool)
        self.tracks = xp.asarray(tracks, dtype=bool)
        self.member_sets = member_sets  # interior index -> list of members

    def leaves(self, xp, x, root):
        """The leaf each row of ``x`` reaches from interior node ``root``."""
        rows = x.shape[0]
        row = xp.arange(rows)
        node = xp.full(rows, root, dtype=xp.int64)
        leaf = xp.full(rows, -1, dtype=xp.int64)
        for _ in range(len(self.feature) + 1):
            open_ = leaf < 0
            if not bool(open_.any()):
                return leaf
            value = x[row, self.feature[node]]
            split, mode = self.splits[node], self.modes[node]
            go_true = xp.select(
                [mode == LEQ, mode == LT, mode == GTE, mode == GT, mode == EQ, mode == NEQ],
                [value <= split, value < split, value >= split, value > split, value == split,
                 value != split], default=False)
            for k, members in self.member_sets.items():
                at = node == k
                if bool(at.any()):
                    go_true = xp.where(at, xp.isin(value, xp.asarray(members, dtype=x.dtype)),
                                       go_true)
            go_true = xp.where(xp.isnan(value), self.tracks[node], go_true)
            to_leaf = xp.where(go_true, self.true_leaf[node], self.false_leaf[node])
            nxt = xp.where(go_true, self.true_id[node], self.false_id[node])
            leaf = xp.where(open_ & to_leaf, nxt, leaf)
            node = xp.where(open_ & ~to_leaf, nxt, node)
        raise ValueError("a tree does not reach its leaves (it has a cycle)")


def _aggregate(xp, rows, n_targets, per_tree_votes, aggregate, n_trees):
    """Scores [rows, n_targets] from each tree's (votes [rows, n_targets], has [rows, n_targets])
    in float64; a target no tree votes for scores 0."""
    if aggregate == 2:
        scores = xp.full((rows, n_targets), xp.inf)
    elif aggregate == 3:
        scores = xp.full((rows, n_targets), -xp.inf)
    else:
        scores = xp.zeros((rows, n_targets), dtype=xp.float64)
    hit = xp.zeros((rows, n_targets), dtype=bool)
    for votes, has in per_tree_votes:
        if aggregate == 2:
            scores = xp.where(has, xp.minimum(scores, votes), scores)
        elif aggregate == 3:
            scores = xp.where(has, xp.maximum(scores, votes), scores)
        else:
            scores = scores + xp.where(has, votes, 0)
        hit |= has
    if aggregate == 0:
        scores = scores / max(n_trees, 1)
    return xp.where(hit, scores, 0)


def _leaf_votes(xp, n_leaves, n_targets, leaf_of_vote, target_of_vote, weight_of_vote,
                aggregate):
    """Per leaf and target: the leaf's vote (summed, or the min/max of several) and whether it
    has one."""
    fill = {2: xp.inf, 3: -xp.inf}.get(aggregate, 0.0)
    votes = xp.full((n_leaves, n_targets), fill, dtype=xp.float64)
    has = xp.zeros((n_leaves, n_targets), dtype=bool)
    for leaf, target, weight in zip(leaf_of_vote, target_of_vote, weight_of_vote, strict=True):
        if not 0 <= target < n_targets:
            raise ValueError(f"target id {target} is outside [0, {n_targets})")
        if aggregate == 2:
            votes[leaf, target] = min(votes[leaf, target], weight)
        elif aggregate == 3:
            votes[leaf, target] = max(votes[leaf, target], weight)
        else:
            votes[leaf, target] += weight
        has[leaf, target] = True
    return votes, has


@kernel("TreeEnsemble", 5, domain=ML, dtypes={"float32", "float64", "float16"},
        check=_check_tree_ensemble)
def tree_ensemble(xp, x, *, aggregate_function, leaf_targetids, leaf_weights, n_targets,
                  nodes_falseleafs, nodes_falsenodeids, nodes_featureids, nodes_modes,
                  nodes_splits, nodes_trueleafs, nodes_truenodeids, post_transform, tree_roots,
                  membership_values=None, nodes_hitrates=None,
                  nodes_missing_value_tracks_true=None):
    """Splits compare in the input's type; leaf weights sum in float64 and round once."""
    n_nodes = len(nodes_featureids)
    modes = [int(m) for m in xp.asarray(nodes_modes).reshape(-1).tolist()]
    members = [i for i, m in enumerate(modes) if m == MEMBER]
    trees = _Trees(
        xp, nodes_featureids, modes, xp.asarray(nodes_splits).reshape(-1).astype(x.dtype),
        nodes_truenodeids, nodes_trueleafs, nodes_falsenodeids, nodes_falseleafs,
        nodes_missing_value_tracks_true or [0] * n_nodes,
        dict(zip(members, _membership_sets(membership_values), strict=False)))
    weights = xp.asarray(leaf_weights).reshape(-1).astype(xp.float64).tolist()
    votes, has = _leaf_votes(xp, len(weights), n_targets, range(len(weights)),
                             list(leaf_targetids), weights, aggregate_function)
    per_tree = []
    for root in tree_roots:
        leaf = trees.leaves(xp, x, root)
        per_tree.append((votes[leaf], has[leaf]))
    scores = _aggregate(xp, x.shape[0], n_targets, per_tree, aggregate_function,
                        len(tree_roots))
    return _transform(xp, scores, post_transform).astype(x.dtype)


# -- TreeEnsembleRegressor: the older encoding (tree and node ids, LEAF nodes, target votes) --

BRANCH_MODES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
                "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ}
AGGREGATE_NAMES = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}
TRANSFORM_NAMES = {"NONE": 0, "SOFTMAX": 1, "LOGISTIC": 2}


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


def _check_tree_regressor(node, provider):
    attrs = node.attributes
    try:
        layout = _regressor_layout(attrs)
        weights = _either(attrs, "target_weights") or []
        votes = list(zip(attrs.get("target_treeids") or (), attrs.get("target_nodeids") or (),
                         strict=True))
        if len(votes) != len(weights) or len(attrs.get("target_ids") or ()) != len(weights):
            raise ValueError("target_treeids, target_nodeids, target_ids and target_weights "
                             "differ in length")
        for key in votes:
            if layout["position"].get(key) not in layout["leaf_of"]:
                raise ValueError(f"a target weight is on node {key[1]} of tree {key[0]}, "
                                 f"which is not a LEAF")
    except ValueError as exc:
        deny("TreeEnsembleRegressor: {}", exc, code="attribute")
    leaf_targets = {}
    for key, target in zip(votes, attrs.get("target_ids") or (), strict=True):
        leaf_targets.setdefault(layout["leaf_of"][layout["position"][key]], []).append(target)
    _require_votes(node, AGGREGATE_NAMES.get(attrs.get("aggregate_function", "SUM")),
                   _every_target_voted(layout["roots"], layout["true"], layout["false"],
                                       leaf_targets, attrs.get("n_targets") or 0))
    require(attrs.get("aggregate_function", "SUM") in AGGREGATE_NAMES,
            "TreeEnsembleRegressor: aggregate_function must be AVERAGE, SUM, MIN or MAX, got "
            "{!r}", attrs.get("aggregate_function"), code="attribute")
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "TreeEnsembleRegressor: {} implements "
            "post_transform NONE/SOFTMAX/LOGISTIC, got {!r}; {}", provider, transform,
            UNDEFINED_TRANSFORMS, code="attribute")
    base = _either(attrs, "base_values")
    n_targets = attrs.get("n_targets")
    require(n_targets is not None and n_targets >= 1, "TreeEnsembleRegressor: n_targets is "
            "required", code="attribute")
    require(not base or len(base) == n_targets, "TreeEnsembleRegressor: {} base_values for {} "
            "targets", len(base or ()), n_targets, code="attribute")


def _tree_regressor(xp, x, attrs):
    layout = _regressor_layout(attrs)
    aggregate = AGGREGATE_NAMES[attrs.get("aggregate_function") or "SUM"]
    n_targets = attrs["n_targets"]
    work = xp.float64 if x.dtype == xp.float64 else xp.float32
    x = x.astype(work)
    trees = _Trees(
        xp, layout["feature"], layout["modes"], xp.asarray(layout["values"]).astype(work),
        [c for c, _ in layout["true"]], [is_leaf for _, is_leaf in layout["true"]],
        [c for c, _ in layout["false"]], [is_leaf for _, is_leaf in layout["false"]],
        layout["tracks"], {})
    weights = _either(attrs, "target_weights") or []
    leaves = [layout["leaf_of"][layout["position"][key]]
              for key in zip(attrs.get("target_treeids") or (), attrs.get("target_nodeids") or (),
                             strict=True)]
    votes, has = _leaf_votes(xp, max(layout["n_leaves"], 1), n_targets, leaves,
                             list(attrs.get("target_ids") or ()), weights, aggregate)
    per_tree = []
    rows = x.shape[0]
    for root, is_leaf in layout["roots"]:
        leaf = xp.full(rows, root, dtype=xp.int64) if is_leaf else trees.leaves(xp, x, root)
        per_tree.append((votes[leaf], has[leaf]))
    scores = _aggregate(xp, rows, n_targets, per_tree, aggregate, len(layout["roots"]))
    base = _either(attrs, "base_values")
    if base:
        scores = scores + xp.asarray(base, dtype=xp.float64)
    kind = TRANSFORM_NAMES[attrs.get("post_transform") or "NONE"]
    return _transform(xp, scores, kind).astype(xp.float32)


@kernel("TreeEnsembleRegressor", 3, domain=ML, dtypes=NUMBERS, check=_check_tree_regressor)
def tree_ensemble_regressor(xp, x, *, aggregate_function, post_transform, base_values=None,
                            base_values_as_tensor=None, n_targets=None, nodes_falsenodeids=None,
                            nodes_featureids=None, nodes_hitrates=None,
                            nodes_hitrates_as_tensor=None, nodes_missing_value_tracks_true=None,
                            nodes_modes=None, nodes_nodeids=None, nodes_treeids=None,
                            nodes_truenodeids=None, nodes_values=None,
                            nodes_values_as_tensor=None, target_ids=None, target_nodeids=None,
                            target_treeids=None, target_weights=None,
                            target_weights_as_tensor=None):
    """Thresholds compare in float32 (float64 for float64 input); int inputs become float32;
    votes sum in float64; the output is float32."""
    return _tree_regressor(xp, x.reshape(x.shape[0], -1) if x.ndim != 2 else x, locals())


@kernel("TreeEnsembleRegressor", 1, domain=ML, dtypes=NUMBERS, check=_check_tree_regressor)
def tree_ensemble_regressor_1(xp, x, *, aggregate_function, post_transform, base_values=None,
                              n_targets=None, nodes_falsenodeids=None, nodes_featureids=None,
                              nodes_hitrates=None, nodes_missing_value_tracks_true=None,
                              nodes_modes=None, nodes_nodeids=None, nodes_treeids=None,
                              nodes_truenodeids=None, nodes_values=None, target_ids=None,
                              target_nodeids=None, target_treeids=None, target_weights=None):
    return _tree_regressor(xp, x.reshape(x.shape[0], -1) if x.ndim != 2 else x, locals())


# ---------------------------------------------------------------------------------------------
# Elementwise and feature ops
# ---------------------------------------------------------------------------------------------


@kernel("ArrayFeatureExtractor", 1, domain=ML, dtypes=NUMBERS | {"string"})
def array_feature_extractor(xp, x, y):
    index = y.reshape(-1).astype(xp.int64)
    if index.size and (int(index.min()) < 0 or int(index.max()) >= x.shape[-1]):
        raise IndexError(f"indices {index.tolist()} out of range for a last axis of "
                         f"{x.shape[-1]}")
    out = xp.take(x, index, axis=-1)
    return out.reshape(1, -1) if x.ndim == 1 else out


@kernel("Binarizer", 1, domain=ML, dtypes=NUMBERS)
def binarizer(xp, x, *, threshold):
    return (x > threshold).astype(x.dtype)


def _feature_params(values, features, what):
    if len(values) not in (1, features):
        raise ValueError(f"{what} needs 1 or {features} values, got {len(values)}")
    return values


@kernel("Scaler", 1, domain=ML, dtypes=NUMBERS)
def scaler(xp, x, *, offset=(), scale=()):
    features = x.shape[-1] if x.ndim else 1
    off = xp.asarray(_feature_params(offset or (0.0,), features, "offset"), dtype=xp.float32)
    sc = xp.asarray(_feature_params(scale or (1.0,), features, "scale"), dtype=xp.float32)
    return ((x.astype(xp.float32) - off) * sc).astype(xp.float32)


def _check_imputer(node, provider):
    attrs = node.attributes
    t = _input_type(node)
    floats, ints = attrs.get("imputed_value_floats"), attrs.get("imputed_value_int64s")
    require((floats is None) != (ints is None), "Imputer: exactly one of imputed_value_floats "
            "and imputed_value_int64s must be set", code="attribute")
    if t is not None:
        want_floats = t in ("float32", "float64")
        require(want_floats == (floats is not None), "Imputer: {} input takes imputed_value_{}",
                t, "floats" if want_floats else "int64s", code="attribute")


@kernel("Imputer", 1, domain=ML, dtypes=NUMBERS, check=_check_imputer)
def imputer(xp, x, *, replaced_value_float, replaced_value_int64, imputed_value_floats=None,
            imputed_value_int64s=None):
    """A NaN replaced_value_float replaces NaN inputs."""
    features = x.shape[-1] if x.ndim else 1
    if x.dtype.kind == "f":
        values = xp.asarray(_feature_params(imputed_value_floats, features, "imputed values"),
                            dtype=x.dtype)
        target = x.dtype.type(replaced_value_float)
        hit = xp.isnan(x) if math.isnan(replaced_value_float) else x == target
    else:
        values = xp.asarray(_feature_params(imputed_value_int64s, features, "imputed values"))
        hit = x == replaced_value_int64
    return xp.where(hit, values.astype(x.dtype), x)


@kernel("FeatureVectorizer", 1, domain=ML, dtypes=NUMBERS)
def feature_vectorizer(xp, *xs, inputdimensions=()):
    """Each input, as [N, C] (1-D as [1, C]), is cut or zero-padded to its inputdimensions
    width, then all are concatenated."""
    if len(inputdimensions) != len(xs):
        raise ValueError(f"inputdimensions has {len(inputdimensions)} entries for {len(xs)} "
                         f"inputs")
    parts = []
    for a, width in zip(xs, inputdimensions, strict=True):
        a = a.reshape(1, -1) if a.ndim == 1 else a.reshape(a.shape[0], -1)
        a = a.astype(xp.float32)
        if a.shape[1] >= width:
            parts.append(a[:, :width])
        else:
            pad = xp.zeros((a.shape[0], width - a.shape[1]), dtype=xp.float32)
            parts.append(xp.concatenate([a, pad], axis=1))
    return xp.concatenate(parts, axis=1)


def _check_one_hot(node, provider):
    attrs = node.attributes
    ints, strings = attrs.get("cats_int64s"), attrs.get("cats_strings")
    require((ints is None) != (strings is None), "OneHotEncoder: exactly one of cats_int64s and "
            "cats_strings must be set", code="attribute")
    t = _input_type(node)
    if t is not None:
        require((t == "string") == (strings is not None), "OneHotEncoder: {} input takes "
                "cats_{}", t, "strings" if t == "string" else "int64s", code="attribute")


@kernel("OneHotEncoder", 1, domain=ML, dtypes=NUMBERS | {"string"}, check=_check_one_hot)
def one_hot_encoder(xp, x, *, zeros, cats_int64s=None, cats_strings=None):
    """Numeric input is truncated to an integer before the look-up."""
    cats = list(cats_strings) if cats_strings is not None else list(cats_int64s)
    index = {}
    for i, c in enumerate(cats):
        index.setdefault(c, i)
    flat = x.reshape(-1).tolist()
    keys = [as_text(v) for v in flat] if x.dtype == object else [int(v) for v in flat]
    out = xp.zeros((len(keys), len(cats)), dtype=xp.float32)
    for i, k in enumerate(keys):
        j = index.get(k)
        if j is None:
            if not zeros:
                raise ValueError(f"OneHotEncoder: category {k!r} is not in the list")
            continue
        out[i, j] = 1.0
    return out.reshape(tuple(x.shape) + (len(cats),))


def _check_linear_regressor(node, provider):
    attrs = node.attributes
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "LinearRegressor: {} implements post_transform "
            "NONE/SOFTMAX/LOGISTIC, got {!r}; {}", provider, transform, UNDEFINED_TRANSFORMS,
            code="attribute")
    coefficients, targets = attrs.get("coefficients") or (), attrs.get("targets", 1)
    require(targets >= 1 and len(coefficients) % targets == 0,
            "LinearRegressor: {} coefficients do not split into {} targets", len(coefficients),
            targets, code="attribute")
    intercepts = attrs.get("intercepts")
    require(not intercepts or len(intercepts) == targets,
            "LinearRegressor: {} intercepts for {} targets", len(intercepts or ()), targets,
            code="attribute")


@kernel("LinearRegressor", 1, domain=ML, dtypes=NUMBERS, check=_check_linear_regressor)
def linear_regressor(xp, x, *, post_transform, targets, coefficients=(), intercepts=None):
    rows = x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)
    coef = xp.asarray(coefficients, dtype=xp.float32).reshape(targets, -1)
    if coef.shape[1] != rows.shape[1]:
        raise ValueError(f"{coef.shape[1]} coefficients per target for {rows.shape[1]} "
                         f"features")
    y = rows.astype(xp.float32) @ coef.T
    if intercepts:
        y = y + xp.asarray(intercepts, dtype=xp.float32)
    kind = TRANSFORM_NAMES[post_transform]
    return _transform(xp, y, kind).astype(xp.float32)
