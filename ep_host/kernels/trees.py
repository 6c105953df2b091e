"""Tree ensembles of the ``ai.onnx.ml`` domain: TreeEnsemble, TreeEnsembleRegressor and
TreeEnsembleClassifier. Every tree is flattened into one node table, built once per kernel with
numpy; a big batch walks it one depth level per numpy step for all (row, tree) pairs, a small one
compares every node once and follows the chosen children.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ep_host import deny, require
from ep_host.kernels.helpers import two_columns
from ep_host.kernels.ml import (
    ML,
    NUMBERS,
    SHORT_SCORES,
    TRANSFORM_NAMES,
    given_array,
    input_type,
    logistic_row,
    tensor_type,
    transform_scores,
)
from ep_host.kernels.registry import kernel

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
AGGREGATES = {0: "AVERAGE", 1: "SUM", 2: "MIN", 3: "MAX"}
TRANSFORMS = {v: k for k, v in TRANSFORM_NAMES.items()}
PAIRS_PER_STEP = 1 << 16  # (row, tree) pairs walked per step: the working set stays in cache
SMALL_TABLE = 128
"""Node tables of at most this many nodes are laid out, walked for their leaves and their
votes summed in Python lists: a numpy call costs microseconds whatever its size, and numpy's
layout of a one-split tree took about half a millisecond of a session's creation (skl2onnx's
AdaBoostClassifier writes ten). Interleaved in one process, sessions of 43-91-node trees were
created 8-16% faster this way, a 150-node forest as fast, a 207-node one 7% slower."""


# ---------------------------------------------------------------------------------------------
# The flattened forest
# ---------------------------------------------------------------------------------------------


def aggregate_sums(aggregate):
    return aggregate in (0, 1)  # AVERAGE, SUM


def reached_leaves(roots, true_child, false_child, n_interior, size):
    """Every (tree, leaf) pair a tree reaches, sorted by tree, and the deepest tree's depth.
    Nodes are flat indices below ``size``: interior ``0..I-1``, then leaves; ``roots[t]`` is
    tree t's root. Raises ValueError when a tree never reaches its leaves (a cycle)."""
    roots = np.asarray(roots, np.intp)
    tree, node, depth = np.arange(len(roots), dtype=np.intp), roots, 0
    # no node is a child twice (no shared subtree, exporters write none): no pair repeats on a
    # level, so the pairs are sorted once at the end rather than made unique on every level
    children = np.concatenate([true_child[:n_interior], false_child[:n_interior]])
    shared = bool((np.bincount(children, minlength=size) > 1).any())
    while True:
        inner = node < n_interior
        if not inner.any():
            if not shared:
                pairs = np.sort(tree * size + node)
                tree, node = pairs // size, pairs % size
            return tree, node, depth
        depth += 1
        if depth > n_interior:
            raise ValueError("a tree does not reach its leaves (it has a cycle)")
        at, below = tree[inner], node[inner]
        pairs = np.concatenate([tree[~inner] * size + node[~inner], at * size + true_child[below],
                                at * size + false_child[below]])
        if shared:
            pairs = np.unique(pairs)  # two paths to one node (a shared subtree) walk it once
        tree, node = pairs // size, pairs % size


def _as_list(values):
    return values.reshape(-1).tolist() if isinstance(values, np.ndarray) else list(values)


def _small_always_voted(tree, leaf, has, n_targets):
    """:func:`always_voted` in Python lists: ``has[leaf][target]``."""
    every_leaf: dict[int, list[bool]] = {}  # per tree: the targets all its leaves vote for
    for t, at in zip(tree, leaf, strict=True):
        row = has[at]
        both = every_leaf.get(t)
        every_leaf[t] = row if both is None else [a and b for a, b in zip(both, row,
                                                                           strict=True)]
    return all(any(row[k] for row in every_leaf.values()) for k in range(n_targets))


def always_voted(tree, leaf, has):
    """Whether every row gets a vote for every target: for each target some tree votes for it
    at every leaf it can reach. ``tree``/``leaf``: the reached pairs, sorted by tree (leaves
    counted from 0); ``has[leaf, target]``: whether the leaf votes for the target."""
    if not len(tree):
        return has.shape[1] == 0
    starts = np.flatnonzero(np.concatenate([[True], tree[1:] != tree[:-1]]))
    every_leaf = np.logical_and.reduceat(has[leaf], starts, axis=0)
    return bool(every_leaf.any(axis=0).all())


class Forest:
    """Interior nodes ``0..I-1`` then leaves ``I..I+L-1`` in one table; a leaf's children are
    itself, so every pair can take ``depth`` steps. Children and roots are flat indices.
    ``votes`` holds (leaf, target, weight) arrays, leaves counted from 0."""

    def __init__(self, feature, modes, splits, true_child, false_child, tracks, member_sets,
                 roots, n_leaves, votes, n_targets, aggregate):
        n_interior = len(feature)
        self.n_interior, self.n_leaves, self.n_targets = n_interior, n_leaves, n_targets
        self.aggregate = aggregate
        size = n_interior + n_leaves
        self.member_sets = member_sets  # interior index -> list of member values
        # what the scores are divided by: the number of trees for AVERAGE, else 1 (exact)
        self.divisor = float(max(len(roots), 1)) if aggregate == 0 else 1.0
        self._tables = {}
        # per input dtype: (the base it was bound with, the provider's bound walk, the walk)
        self._bound: dict[Any, tuple[Any, Any, Any]] = {}
        small = size <= SMALL_TABLE
        if small:
            tree, leaf = self._small_table(feature, modes, splits, true_child, false_child,
                                           tracks, roots)
        else:
            tree, leaf = self._table_arrays(feature, modes, splits, true_child, false_child,
                                            tracks, roots)
        self.roots_row = self.roots[None, :]
        if small and aggregate_sums(aggregate):
            has = self._small_votes(*votes)
            self.always_voted = _small_always_voted(tree, [v - n_interior for v in leaf], has,
                                                    n_targets)
        else:
            self._votes(*votes)
            self.always_voted = always_voted(np.asarray(tree, np.intp),
                                             np.asarray(leaf, np.intp) - n_interior, self.has)

    def _small_table(self, feature, modes, splits, true_child, false_child, tracks, roots):
        """The node table of a small forest (SMALL_TABLE): the columns made as lists, one
        array each, and the reached leaves walked in them (:func:`_small_reached_leaves`)."""
        n_interior, n_leaves = self.n_interior, self.n_leaves
        leaves = list(range(n_interior, n_interior + n_leaves))
        feature, modes, splits, true_child, false_child, tracks, roots = (
            _as_list(v) for v in (feature, modes, splits, true_child, false_child, tracks,
                                  roots))
        true_child.extend(leaves)
        false_child.extend(leaves)
        self.feature = np.array([*feature, *[0] * n_leaves], np.intp)
        self.max_feature = max([0, *feature]) if n_interior else -1
        self.modes = np.array([*modes, *[LEQ] * n_leaves], np.int8)
        self.splits = np.array([*splits, *[math.nan] * n_leaves], np.float64)
        self.tracks = np.array([*tracks, *[False] * n_leaves], bool)
        self.true_child = np.array(true_child, np.intp)
        self.false_child = np.array(false_child, np.intp)
        self.roots = np.array(roots, np.intp)
        self.fast = (not self.member_sets and all(m <= GT for m in modes)  # LEQ, LT, GTE, GT
                     and not any(s != s for s in splits))  # no NaN threshold
        return self._small_reached_leaves(roots, true_child, false_child)

    def _small_reached_leaves(self, roots, true_child, false_child):
        """:func:`reached_leaves` in Python lists (a leaf its own children), a set of (tree,
        node) pairs a level: the trees and nodes of the pairs as lists; sets ``depth``."""
        n_interior = self.n_interior
        level = set(enumerate(roots))
        depth = 0
        while True:
            inner = [(t, v) for t, v in level if v < n_interior]
            if not inner:
                self.depth = depth
                pairs = sorted(level)
                return [t for t, _ in pairs], [v for _, v in pairs]
            depth += 1
            if depth > n_interior:
                raise ValueError("a tree does not reach its leaves (it has a cycle)")
            level.difference_update(inner)
            level.update([(t, true_child[v]) for t, v in inner])
            level.update([(t, false_child[v]) for t, v in inner])

    def _small_votes(self, leaf, target, weight):
        """:meth:`_votes` of a small forest that sums its votes, in Python lists (Python's
        float addition is float64's, in vote order as ``np.add.at``); returns ``has`` as
        lists."""
        leaf, target, weight = _as_list(leaf), _as_list(target), _as_list(weight)
        k = self.n_targets
        for t in target:
            if t < 0 or t >= k:
                raise ValueError(f"target id {t} is outside [0, {k})")
        rows = max(self.n_leaves, 1)
        weights = [[0.0] * k for _ in range(rows)]
        has = [[False] * k for _ in range(rows)]
        for at, t, w in zip(leaf, target, weight, strict=True):
            row = weights[at]
            row[t] = row[t] + w
            has[at][t] = True
        voted = [True in h for h in has]
        leaf_target = [h.index(True) if v else 0 for h, v in zip(has, voted, strict=True)]
        self.weights = np.array(weights, np.float64).reshape(rows, k)
        self.has = np.array(has, bool).reshape(rows, k)
        self.voted = np.array(voted, bool)
        self.single_vote = all(sum(h) <= 1 for h in has)  # one target at most per leaf
        self.leaf_target = np.array(leaf_target, np.intp)
        self.leaf_weight = np.array([w[t] if v else 0.0 for w, t, v in
                                     zip(weights, leaf_target, voted, strict=True)], np.float64)
        self.voted_targets = set(target)
        return has

    def _table_arrays(self, feature, modes, splits, true_child, false_child, tracks, roots):
        """The node table as numpy makes it, and the reached leaves (:func:`reached_leaves`)."""
        n_interior = self.n_interior
        size = n_interior + self.n_leaves
        self.feature = np.zeros(size, np.intp)
        self.feature[:n_interior] = np.asarray(feature, np.intp).reshape(-1)
        self.max_feature = int(self.feature.max(initial=0)) if n_interior else -1
        self.modes = np.full(size, LEQ, np.int8)
        self.modes[:n_interior] = np.asarray(modes, np.int8).reshape(-1)
        self.splits = np.full(size, np.nan)
        self.splits[:n_interior] = np.asarray(splits, np.float64).reshape(-1)
        self.tracks = np.zeros(size, bool)
        self.tracks[:n_interior] = np.asarray(tracks, bool).reshape(-1)
        self.true_child = np.arange(size, dtype=np.intp)
        self.false_child = np.arange(size, dtype=np.intp)
        self.true_child[:n_interior] = np.asarray(true_child, np.intp).reshape(-1)
        self.false_child[:n_interior] = np.asarray(false_child, np.intp).reshape(-1)
        self.roots = np.asarray(roots, np.intp).reshape(-1)
        tree, leaf, self.depth = reached_leaves(self.roots, self.true_child, self.false_child,
                                                n_interior, size)
        self.fast = (not self.member_sets and bool((self.modes <= GT).all())  # LEQ, LT, GTE, GT
                     and not bool(np.isnan(self.splits[:n_interior]).any()))
        return tree, leaf

    def _votes(self, leaf, target, weight):
        """Per leaf and target: the leaf's vote (summed in vote order, or the min/max of
        several) and whether it has one."""
        leaf = np.asarray(leaf, np.intp).reshape(-1)
        target = np.asarray(target, np.int64).reshape(-1)
        weight = np.asarray(weight, np.float64).reshape(-1)
        outside = (target < 0) | (target >= self.n_targets)
        if outside.any():
            raise ValueError(f"target id {int(target[outside][0])} is outside [0, "
                             f"{self.n_targets})")
        target = target.astype(np.intp)
        fill = {2: np.inf, 3: -np.inf}.get(self.aggregate, 0.0)
        weights = np.full((max(self.n_leaves, 1), self.n_targets), fill)
        combine = {2: np.minimum, 3: np.maximum}.get(self.aggregate, np.add)
        combine.at(weights, (leaf, target), weight)  # unbuffered: in vote order, like a loop
        has = np.zeros(weights.shape, bool)
        has[leaf, target] = True
        self.weights, self.has = weights, has
        self.voted = has.any(axis=1)
        # one vote at most per leaf: sums gather one weight per (row, tree), not a row of them
        self.single_vote = bool((has.sum(axis=1) <= 1).all()) and aggregate_sums(self.aggregate)
        self.leaf_target = has.argmax(axis=1)
        self.leaf_weight = np.where(self.voted, weights[np.arange(len(weights)),
                                                        self.leaf_target], 0.0)
        self.voted_targets = set(np.flatnonzero(has.any(axis=0)).tolist())  # any vote

    def _table(self, dtype):
        """The compare table for inputs of ``dtype``. Fast form: every node compares
        ``value <= threshold`` and takes ``children[2 * node + result]``; x < t becomes
        x <= (the float below t), and GT/GTE swap their children. ``nan_slot`` is the slot a
        NaN value takes (the true child when the node tracks missing values as true). A leaf
        compares with NaN and takes itself either way."""
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
        table = CompareTable(splits, np.where(swap, self.false_child, self.true_child),
                             np.where(swap, self.true_child, self.false_child),
                             self.tracks != swap, self.fast,
                             (self.modes == NEQ) & ~self.tracks)
        self._tables[dtype] = table
        return table

    def compares_every_node(self, rows):
        """Whether ``rows`` rows are faster to score by comparing every node once per row than
        by walking each (row, tree) pair level by level. The estimates are nanoseconds as
        measured with numpy here: a walk level costs 6 us in calls plus 20 ns a pair; comparing
        every node 4 us plus 3.5 ns a node and row (8 us more with several rows), then each
        level 0.4 us plus 10 ns a pair."""
        pairs = rows * len(self.roots)
        walk = self.depth * (6000 + 20 * pairs)
        every = (4000 + (8000 if rows > 1 else 0) + 3.5 * rows * len(self.feature)
                 + self.depth * (400 + 10 * pairs))
        return every < walk

    def leaves(self, xp, x):
        """The leaf (0..L-1) each row of ``x`` reaches in each tree: [rows, trees]. Raises
        ValueError when a NaN reaches a BRANCH_NEQ node that does not track missing values as
        true: the spec sends it to the false branch, onnxruntime and onnx's reference for
        TreeEnsemble to the true one (NaN differs from every threshold)."""
        rows = x.shape[0]
        table = self._table(x.dtype)
        has_nan = table.nan_matters and bool(xp.isnan(x).any())
        if self.compares_every_node(rows) and not (has_nan and table.unsure):
            return self._leaves_from_every_node(xp, x, table, has_nan)
        splits, children, nan_slot = (xp.asarray(a) for a in (table.splits, table.children,
                                                                table.nan_slot))
        feature = xp.asarray(self.feature)
        flat_x = x.reshape(-1)
        node = xp.empty((rows, len(self.roots)), dtype=xp.intp)
        node[...] = xp.asarray(self.roots)
        base = (xp.arange(rows, dtype=xp.intp) * x.shape[1])[:, None]
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
                missing = xp.isnan(value)
                if table.unsure and bool((missing & xp.asarray(table.nan_unsure).take(node))
                                         .any()):
                    raise ValueError("a NaN input reaches a BRANCH_NEQ node whose missing "
                                     "values do not track true: the spec sends it to the false "
                                     "branch, onnxruntime to the true one (NaN != threshold)")
                slot += xp.where(missing, nan_slot.take(node), go)
            else:
                slot += go
            node = children.take(slot)
        return node - self.n_interior

    def _leaves_from_every_node(self, xp, x, table, has_nan):
        """As :meth:`leaves` for a few rows: every node compares its feature once per row,
        giving each node's next node per row; each pair then takes one look-up a level."""
        rows, size = x.shape[0], len(self.feature)
        if rows == 1:
            values = x.reshape(-1).take(xp.asarray(self.feature))  # [nodes]
        else:
            values = x.take(xp.asarray(self.feature), axis=1)  # [rows, nodes]
        splits = xp.asarray(table.splits)
        if self.fast:
            go = values <= splits
        else:
            go = self._general_compare(xp, xp.arange(size, dtype=xp.intp)[None, :], values,
                                       splits)
        if has_nan:
            go = xp.where(xp.isnan(values), xp.asarray(table.nan_slot.astype(bool)), go)
        following = xp.where(go, xp.asarray(table.true_slot), xp.asarray(table.false_slot))
        if rows == 1:  # row 0's node k at k
            node = following.take(xp.asarray(self.roots))
            for _ in range(self.depth - 1):
                node = following.take(node)
            node -= self.n_interior
            return node.reshape(1, -1)
        # row r's node k at r * size + k
        offset = (xp.arange(rows, dtype=xp.intp) * size)[:, None]
        following += offset
        node = following.reshape(-1).take(xp.asarray(self.roots_row) + offset)
        following = following.reshape(-1)
        for _ in range(self.depth - 1):
            node = following.take(node)
        node -= offset
        node -= self.n_interior
        return node

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

    def _sum_single_votes(self, xp, leaf, rows):
        k = self.n_targets
        slot = xp.asarray(self.leaf_target).take(leaf)
        if rows > 1:
            slot += (xp.arange(rows, dtype=xp.intp) * k)[:, None]
        weight = xp.asarray(self.leaf_weight).take(leaf)
        scores = xp.bincount(slot.reshape(-1), weights=weight.reshape(-1),
                             minlength=rows * k).reshape(rows, k)
        if self.always_voted:
            return scores, None
        voted = xp.asarray(self.voted).take(leaf)
        return scores, xp.bincount(slot[voted], minlength=rows * k).reshape(rows, k) > 0

    def scores(self, xp, x, base=None):
        """Scores [rows, n_targets] in float64, and whether each got a vote (``None``: every
        row got one for every target); a target no tree votes for scores 0. ``base``: float64
        [n_targets] added to every row last, or ``None``."""
        rows = x.shape[0]
        if x.shape[1] <= self.max_feature:
            raise ValueError(f"a node reads feature {self.max_feature}, the input has "
                             f"{x.shape[1]}")
        bound = self._bound.get(x.dtype)
        if (bound is not None and bound[0] is base and x.ndim == 2 and x.flags.c_contiguous
                and rows * len(self.roots) <= bound[2].MAX_PAIRS):  # as _compiled_walk asks
            return bound[1](x)
        x = xp.ascontiguousarray(x)
        walk = self._compiled_walk(xp, x)
        if walk is not None:
            table = self._table(x.dtype)
            args = (table.splits, table.nodes(self.feature), self.roots, self.weights,
                    self.has, self.depth, self.n_interior, not self.always_voted,
                    self.divisor, base)
            if (hasattr(walk, "bind") and x.ndim == 2  # the next inputs of this type: at once
                    and (bound is None or bound[0] is not base)):
                self._bound[x.dtype] = (base, walk.bind(x.dtype, *args), walk)
            return walk(x, *args)
        step = max(1, PAIRS_PER_STEP // max(len(self.roots), 1))
        if rows <= step:
            scores, hit = self._chunk_scores(xp, x)
        else:
            parts = [self._chunk_scores(xp, x[start:start + step])
                     for start in range(0, rows, step)]
            scores = xp.concatenate([p[0] for p in parts])
            hit = None if self.always_voted else xp.concatenate([p[1] for p in parts])
        if self.aggregate == 0:
            scores /= self.divisor
        if hit is not None:
            scores = xp.where(hit, scores, 0.0)
        if base is not None:
            scores += xp.asarray(base)
        return scores, hit

    def _compiled_walk(self, xp, x):
        """A provider's ``xp.compiled_tree_walk`` (the CPU EP's, numba) where it takes ``x``:
        a few (row, tree) pairs, thresholds the fast table holds and votes that add up; else
        ``None``."""
        walk = getattr(xp, "compiled_tree_walk", None)
        if (walk is None or x.shape[0] * len(self.roots) > walk.MAX_PAIRS or not self.fast
                or not aggregate_sums(self.aggregate)):
            return None
        return walk if walk.ready(x.dtype) else None

    def _chunk_scores(self, xp, x):
        leaf = self.leaves(xp, x)
        if self.single_vote:
            return self._sum_single_votes(xp, leaf, x.shape[0])
        hit = None if self.always_voted else xp.asarray(self.has)[leaf].any(axis=1)
        if x.shape[0] == 1:  # [1, trees, targets] without the fancy index (same sums)
            votes = xp.asarray(self.weights).take(leaf[0], axis=0)[None]
        else:
            votes = xp.asarray(self.weights)[leaf]  # [rows, trees, targets]
        if self.aggregate == 2:
            return votes.min(axis=1), hit
        if self.aggregate == 3:
            return votes.max(axis=1), hit
        return votes.sum(axis=1), hit


class CompareTable:
    """A forest's nodes as compared for one input type: thresholds, the child each outcome
    takes (``children[2 * node + 1]``: where ``value <= threshold`` goes), the slot a NaN
    takes, and whether NaN inputs need that slot (they do not when every NaN compare already
    lands there). ``nan_unsure``: the nodes where the spec and onnxruntime send a NaN apart."""

    def __init__(self, splits, true_slot, false_slot, nan_slot, fast, nan_unsure):
        self.splits = splits
        self.true_slot = np.ascontiguousarray(true_slot, np.intp)
        self.false_slot = np.ascontiguousarray(false_slot, np.intp)
        self.children = np.empty(2 * len(splits), np.intp)
        self.children[1::2] = true_slot
        self.children[0::2] = false_slot
        self.nan_slot = np.asarray(nan_slot, np.intp)
        self.nan_matters = not fast or bool(self.nan_slot.any())
        self.nan_unsure = np.asarray(nan_unsure, bool)
        self.unsure = bool(self.nan_unsure.any())
        self._nodes = None

    def nodes(self, feature):
        """Per node, int64: the ``feature`` it reads, its false and true slot, and which of
        the two a NaN takes (``xp.compiled_tree_walk``'s table)."""
        if self._nodes is None:
            self._nodes = np.ascontiguousarray(np.stack(
                [feature, self.false_slot, self.true_slot, self.nan_slot], axis=1), np.int64)
        return self._nodes


# ---------------------------------------------------------------------------------------------
# TreeEnsemble (ai.onnx.ml 5): interior nodes and leaves in separate tables
# ---------------------------------------------------------------------------------------------


def _ids(values):
    return np.asarray(values, np.int64).reshape(-1)


def _flat_children(ids, is_leaf, n_interior):
    """(index, is_leaf) children as flat indices: interior nodes, then leaves."""
    return np.where(np.asarray(is_leaf, bool).reshape(-1), n_interior + _ids(ids), _ids(ids))


def remembered(build):
    """``build(first, *args)`` kept for the last node: a kernel's check and its bind ask for
    the same forest one after the other. ``first``, the node or its attribute mapping (each
    built once per node, never changed), is compared by identity, the other arguments by value;
    ``forget()`` lets go of it (a bind, once its kernel holds the forest)."""
    last = [None]

    def remembered_build(first, *args):
        held = last[0]
        if held is not None and held[0] is first and held[1] == args:
            return held[2]
        result = build(first, *args)
        last[0] = (first, args, result)
        return result

    remembered_build.forget = lambda: last.__setitem__(0, None)
    return remembered_build


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
        index = _ids(attrs[ids])
        limit = np.where(np.asarray(attrs[leafs], bool).reshape(-1), n_leaves, n)
        bad = index[(index < 0) | (index >= limit)]
        require(not bad.size, "TreeEnsemble: {} holds indices outside the nodes or leaves: {}",
                ids, bad[:3].tolist(), code="attribute")
    roots = _ids(attrs["tree_roots"])
    bad = roots[(roots < 0) | (roots >= n)]
    require(not bad.size, "TreeEnsemble: tree_roots outside the {} nodes: {}", n,
            bad[:3].tolist(), code="attribute")
    n_targets = attrs.get("n_targets", 0)
    targets = _ids(attrs["leaf_targetids"])
    bad = targets[(targets < 0) | (targets >= n_targets)]
    require(not bad.size, "TreeEnsemble: leaf_targetids {} outside [0, {})",
            sorted(set(bad.tolist()))[:3], n_targets, code="attribute")
    members = [i for i, m in enumerate(modes) if m == MEMBER]
    if members:
        sets = _membership_sets(attrs.get("membership_values"))
        require(len(sets) == len(members), "TreeEnsemble: membership_values holds {} sets for "
                "{} BRANCH_MEMBER nodes", len(sets), len(members), code="attribute")
    try:
        forest = _tree_ensemble_forest_of(attrs)
    except ValueError as exc:
        deny("TreeEnsemble: {}", exc, code="attribute")
    _require_votes(node, aggregate, forest.always_voted)


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


def _require_votes(node, aggregate, covered):
    require(aggregate not in (2, 3) or covered, "{}: with aggregate_function MIN or MAX some "
            "row may get no vote for a target, whose score the spec does not define (onnxruntime "
            "gives 0, onnx's reference the float maximum)", node.op_type, code="attribute")


@remembered
def _tree_ensemble_forest_of(attrs):
    modes = [int(m) for m in attrs["nodes_modes"].reshape(-1).tolist()]
    members = [i for i, m in enumerate(modes) if m == MEMBER]
    n = len(modes)
    weights = attrs["leaf_weights"].reshape(-1).astype(np.float64)
    return Forest(
        attrs["nodes_featureids"], modes, attrs["nodes_splits"].reshape(-1).astype(np.float64),
        _flat_children(attrs["nodes_truenodeids"], attrs["nodes_trueleafs"], n),
        _flat_children(attrs["nodes_falsenodeids"], attrs["nodes_falseleafs"], n),
        attrs.get("nodes_missing_value_tracks_true") or [0] * n,
        dict(zip(members, _membership_sets(attrs.get("membership_values")), strict=False)),
        _ids(attrs["tree_roots"]), len(weights),
        (np.arange(len(weights)), _ids(attrs["leaf_targetids"]), weights),
        attrs["n_targets"], attrs.get("aggregate_function", 1))


def _tree_ensemble_forest(node):
    forest = _tree_ensemble_forest_of(node.attributes)
    _tree_ensemble_forest_of.forget()
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
LEAF_CODE = -1
MODE_CODES = {**BRANCH_MODES, "LEAF": LEAF_CODE}
AGGREGATE_NAMES = {"AVERAGE": 0, "SUM": 1, "MIN": 2, "MAX": 3}


def _either(node, name):
    """``<name>_as_tensor`` where set, else ``<name>``, as float64, or None."""
    if not _pending(node, name):
        attrs = node.attributes
        values = attrs.get(name + "_as_tensor")  # a tensor, or a short list's tuple
        if values is None:
            values = attrs.get(name)
        return None if values is None else np.array(values, np.float64).reshape(-1)
    values = node.attribute_array(name + "_as_tensor")
    if values is None:
        values = node.attribute_array(name)
    return None if values is None else values.reshape(-1).astype(np.float64)


_MODE_BYTES = {name.encode(): code for name, code in MODE_CODES.items()}


def _mode_codes(node):
    """``nodes_modes`` as codes: -1 for LEAF, else the BRANCH_MODES code; raises ValueError
    naming the modes that are neither. Read from the protobuf's bytes, one C-level look-up per
    mode: made text first (``node.attributes``), a 1,500-node forest's modes took about
    twice as long."""
    modes = node.attribute_strings("nodes_modes") or ()
    try:
        return np.fromiter(map(_MODE_BYTES.__getitem__, modes), np.int8, len(modes))
    except KeyError:
        unknown = sorted({m.decode("utf-8", "replace") for m in modes if m not in _MODE_BYTES})
        raise ValueError(f"unknown node modes {unknown}") from None


class NodeIds:
    """Where each (tree id, node id) pair sits in the node table, looked up with numpy: both ids
    ranked among their distinct values, the pairs sorted by rank. A table laid out as exporters
    write it (each tree's nodes together, trees in ascending id, node ids 0, 1, ... in order)
    is looked up by arithmetic instead (``dense``: the trees' ids, first rows and node counts):
    on a 20-tree, 1,458-node forest the ranking took 0.4 of the session's 3.3 ms."""

    def __init__(self, tree_ids, node_ids):
        tree_ids, node_ids = _ids(tree_ids), _ids(node_ids)
        self.dense = _dense_ids(tree_ids, node_ids)
        if self.dense is not None:
            return
        self.trees, tree_rank = np.unique(tree_ids, return_inverse=True)
        self.nodes, node_rank = np.unique(node_ids, return_inverse=True)
        keys = tree_rank.reshape(-1) * len(self.nodes) + node_rank.reshape(-1)
        self.order = np.argsort(keys, kind="stable")
        self.keys = keys[self.order]

    def repeated(self):
        """The first position (in table order) whose pair an earlier node has, or None."""
        if self.dense is not None:
            return None  # every tree's node ids are 0, 1, ... once each
        later = self.order[1:][self.keys[1:] == self.keys[:-1]]
        return int(later.min()) if later.size else None

    def find(self, tree_ids, node_ids):
        """The table position of each pair, -1 where no node has it."""
        tree_ids, node_ids = _ids(tree_ids), _ids(node_ids)
        if self.dense is not None:
            trees, starts, counts = self.dense
            tree = np.minimum(np.searchsorted(trees, tree_ids), len(trees) - 1)
            found = (trees[tree] == tree_ids) & (node_ids >= 0) & (node_ids < counts[tree])
            return np.where(found, starts[tree] + node_ids, -1).astype(np.intp, copy=False)
        if not len(self.keys) or not len(tree_ids):
            return np.full(len(tree_ids), -1, np.intp)
        tree = np.searchsorted(self.trees, tree_ids)
        node = np.searchsorted(self.nodes, node_ids)
        tree_in = self.trees[np.minimum(tree, len(self.trees) - 1)] == tree_ids
        node_in = self.nodes[np.minimum(node, len(self.nodes) - 1)] == node_ids
        at = np.searchsorted(self.keys, tree * len(self.nodes) + node)
        at = np.minimum(at, len(self.keys) - 1)
        found = tree_in & node_in & (self.keys[at] == tree * len(self.nodes) + node)
        return np.where(found, self.order[at], -1)


def _dense_ids(tree_ids, node_ids):
    """``(tree ids, first rows, node counts)`` when the table holds each tree's nodes together,
    trees in ascending id, and each tree's node ids are 0, 1, ... in table order; else None."""
    n = len(tree_ids)
    if not n or bool((tree_ids[1:] < tree_ids[:-1]).any()):
        return None
    starts = np.flatnonzero(np.concatenate([[True], tree_ids[1:] != tree_ids[:-1]]))
    counts = np.diff(starts, append=n)
    if not np.array_equal(node_ids, np.arange(n) - np.repeat(starts, counts)):
        return None
    return tree_ids[starts], starts, counts


def _regressor_layout(node):
    """The node table as interior nodes and leaves (flat indices: interior nodes, then
    leaves), with each tree's root (ordered by tree id); raises ValueError for an inconsistent
    table. The tables are read as arrays (``NodeView.attribute_array``): as tuples, converting
    them took half of a 100-tree forest's check."""
    if len(_listed(node, "nodes_nodeids", array=True)) <= SMALL_TABLE:
        return _small_layout(node)
    tree_ids, node_ids, codes, values, tracks = _table_columns(node, given_array)
    n = len(node_ids)
    if tracks is None:
        tracks = np.zeros(n, np.int64)
    ids = NodeIds(tree_ids, node_ids)
    if (i := ids.repeated()) is not None:
        raise ValueError(f"tree {tree_ids[i]} repeats node id {node_ids[i]}")
    is_leaf = codes == LEAF_CODE
    interior = np.flatnonzero(~is_leaf)
    n_interior = len(interior)
    flat = np.empty(n, np.intp)
    flat[interior] = np.arange(n_interior)
    flat[is_leaf] = n_interior + np.arange(n - n_interior)

    def children(ids_name):
        child_ids = given_array(node, ids_name)[interior]
        found = ids.find(tree_ids[interior], child_ids)
        missing = np.flatnonzero(found < 0)
        if missing.size:
            k = int(missing[0])
            i = int(interior[k])
            raise ValueError(f"node {node_ids[i]} of tree {tree_ids[i]} points to a missing "
                             f"node {child_ids[k]}")
        return found

    true_, false_ = children("nodes_truenodeids"), children("nodes_falsenodeids")
    is_child = np.zeros(n, bool)
    is_child[true_] = True
    is_child[false_] = True
    roots = np.flatnonzero(~is_child)
    root_trees = tree_ids[roots]
    order = np.argsort(root_trees, kind="stable")
    twice = np.flatnonzero(root_trees[order][1:] == root_trees[order][:-1])
    if twice.size:  # the first root (in table order) of a tree that has one already
        i = int(roots[order][twice + 1].min())
        raise ValueError(f"tree {tree_ids[i]} has more than one root")
    return {
        "feature": given_array(node, "nodes_featureids")[interior],
        "modes": codes[interior], "values": values[interior], "true": flat[true_],
        "false": flat[false_], "tracks": tracks.astype(bool)[interior],
        "roots": flat[roots[order]], "ids": ids, "is_leaf": is_leaf, "flat": flat,
        "n_interior": n_interior, "n_leaves": n - n_interior,
    }


def _table_columns(node, read):
    """The node table's tree ids, node ids, mode codes (an array), values (float64) and
    missing-value tracks (``None`` where unset), the lists read by ``read(node, name)``;
    raises ValueError where one holds another number of entries than the node ids."""
    tree_ids, node_ids = read(node, "nodes_treeids"), read(node, "nodes_nodeids")
    codes = _mode_codes(node)
    n = len(node_ids)
    if len(codes) != n:
        raise ValueError(f"nodes_modes needs one entry per node ({n})")
    for name in ("nodes_treeids", "nodes_featureids", "nodes_truenodeids",
                 "nodes_falsenodeids"):
        if len(read(node, name)) != n:
            raise ValueError(f"{name} needs one entry per node ({n})")
    values = _either(node, "nodes_values")
    if values is None or len(values) != n:
        raise ValueError(f"nodes_values needs one entry per node ({n})")
    tracks = (read(node, "nodes_missing_value_tracks_true")
              if "nodes_missing_value_tracks_true" in node.attributes else None)
    if tracks is not None and len(tracks) != n:
        raise ValueError(f"nodes_missing_value_tracks_true needs one entry per node ({n})")
    return tree_ids, node_ids, codes, values, tracks


def _small_layout(node):
    """:func:`_regressor_layout` of a table of at most SMALL_TABLE nodes, in Python lists from
    ``node.attributes``: the same layout and errors; ``ids`` maps (tree id, node id) to the
    node's position."""
    tree_ids, node_ids, codes, values, tracks = _table_columns(node, _listed)
    n = len(node_ids)
    codes, values = codes.tolist(), values.tolist()
    tracks = [0] * n if tracks is None else tracks
    ids: dict[tuple[int, int], int] = {}
    for k, pair in enumerate(zip(tree_ids, node_ids, strict=True)):
        if ids.setdefault(pair, k) != k:
            raise ValueError(f"tree {pair[0]} repeats node id {pair[1]}")
    interior = [k for k in range(n) if codes[k] != LEAF_CODE]
    n_interior = len(interior)
    flat = [0] * n
    for i, k in enumerate(interior):
        flat[k] = i
    is_leaf = [code == LEAF_CODE for code in codes]
    for i, k in enumerate([k for k in range(n) if is_leaf[k]]):
        flat[k] = n_interior + i

    def children(ids_name):
        child_ids, found = _listed(node, ids_name), []
        for k in interior:
            at = ids.get((tree_ids[k], child_ids[k]))
            if at is None:
                raise ValueError(f"node {node_ids[k]} of tree {tree_ids[k]} points to a "
                                 f"missing node {child_ids[k]}")
            found.append(at)
        return found

    true_, false_ = children("nodes_truenodeids"), children("nodes_falsenodeids")
    is_child = {*true_, *false_}
    roots = sorted([k for k in range(n) if k not in is_child], key=tree_ids.__getitem__)
    first: dict[int, int] = {}
    later = [k for k in roots if first.setdefault(tree_ids[k], k) != k]
    if later:  # the first root (in table order) of a tree that has one already
        raise ValueError(f"tree {tree_ids[min(later)]} has more than one root")
    feature = _listed(node, "nodes_featureids")
    return {
        "feature": [feature[k] for k in interior], "modes": [codes[k] for k in interior],
        "values": [values[k] for k in interior], "true": [flat[k] for k in true_],
        "false": [flat[k] for k in false_], "tracks": [bool(tracks[k]) for k in interior],
        "roots": [flat[k] for k in roots], "ids": ids, "is_leaf": is_leaf, "flat": flat,
        "n_interior": n_interior, "n_leaves": n - n_interior,
    }


def _listed(node, name, array=False):
    """Attribute ``name`` of numbers as a tuple or list, empty where unset: the attributes'
    tuple of a short list (made with the mapping), the list of a long one's array (read as
    one with the mapping, its tuple made only when asked for), or that array itself where
    ``array``."""
    if _pending(node, name):
        return given_array(node, name) if array else given_array(node, name).tolist()
    return node.attributes.get(name) or ()


def _pending(node, name):
    """Whether attribute ``name`` is a long list whose tuple ``node.attributes`` has not made
    (its mapping's ``pending``, where it holds long lists)."""
    pending = getattr(node.attributes, "pending", None)
    return pending is not None and pending(name)


def _small_layout_votes(node, prefix, layout):
    """The votes of ``<prefix>_treeids/nodeids/ids/weights`` on a :func:`_small_layout`, as
    :func:`_layout_and_votes` finds them, in lists; raises its errors."""
    weights = _either(node, prefix + "_weights")
    weights = [] if weights is None else weights.tolist()
    tree_ids, node_ids, targets = (_listed(node, prefix + end) for end in ("_treeids",
                                                                           "_nodeids", "_ids"))
    if not len(tree_ids) == len(node_ids) == len(targets) == len(weights):
        raise ValueError(f"{prefix}_treeids, {prefix}_nodeids, {prefix}_ids and "
                         f"{prefix}_weights differ in length")
    ids, is_leaf, flat, n_interior = (layout["ids"], layout["is_leaf"], layout["flat"],
                                      layout["n_interior"])
    leaves = []
    for tree, at_node in zip(tree_ids, node_ids, strict=True):
        at = ids.get((tree, at_node))
        if at is None or not is_leaf[at]:
            raise ValueError(f"a {prefix} weight is on node {at_node} of tree {tree}, which "
                             f"is not a LEAF")
        leaves.append(flat[at] - n_interior)
    return leaves, list(targets), weights


@remembered
def _layout_and_votes(node, prefix):
    """The layout and the (leaf, target, weight) vote arrays of ``<prefix>_treeids/nodeids/
    ids/weights``, leaves counted from 0; raises ValueError for an inconsistent table."""
    layout = _regressor_layout(node)
    if isinstance(layout["ids"], dict):
        return layout, _small_layout_votes(node, prefix, layout)
    weights = _either(node, prefix + "_weights")
    if weights is None:
        weights = np.zeros(0)
    tree_ids = given_array(node, prefix + "_treeids")
    node_ids = given_array(node, prefix + "_nodeids")
    ids = given_array(node, prefix + "_ids")
    if not len(tree_ids) == len(node_ids) == len(ids) == len(weights):
        raise ValueError(f"{prefix}_treeids, {prefix}_nodeids, {prefix}_ids and "
                         f"{prefix}_weights differ in length")
    at = layout["ids"].find(tree_ids, node_ids)
    off = np.flatnonzero((at < 0) | ~layout["is_leaf"][at])
    if off.size:
        k = int(off[0])
        raise ValueError(f"a {prefix} weight is on node {node_ids[k]} of tree {tree_ids[k]}, "
                         f"which is not a LEAF")
    leaves = layout["flat"][at] - layout["n_interior"]
    return layout, (leaves, ids, weights)


@remembered
def _old_forest(node, prefix, n_targets, aggregate):
    layout, votes = _layout_and_votes(node, prefix)
    return Forest(layout["feature"], layout["modes"], layout["values"], layout["true"],
                  layout["false"], layout["tracks"], {}, layout["roots"],
                  max(layout["n_leaves"], 1), votes, n_targets, aggregate)


def _aggregate(attrs):
    return AGGREGATE_NAMES.get(attrs.get("aggregate_function") or "SUM")


def _outside(ids, n):
    """The distinct ids (an array or a list) outside [0, n), in order."""
    if isinstance(ids, np.ndarray):
        return sorted(set(ids[(ids < 0) | (ids >= n)].tolist()))
    return sorted({i for i in ids if i < 0 or i >= n})


def _check_tree_regressor(node, provider):
    attrs = node.attributes
    n_targets = attrs.get("n_targets")
    try:
        _, votes = _layout_and_votes(node, "target")
    except ValueError as exc:
        deny("TreeEnsembleRegressor: {}", exc, code="attribute")
    require(_aggregate(attrs) is not None, "TreeEnsembleRegressor: aggregate_function must be "
            "AVERAGE, SUM, MIN or MAX, got {!r}", attrs.get("aggregate_function"),
            code="attribute")
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "TreeEnsembleRegressor: post_transform must be one "
            "of {}, got {!r}", "/".join(TRANSFORM_NAMES), transform, code="attribute")
    base = _either(node, "base_values")
    require(n_targets is not None and n_targets >= 1, "TreeEnsembleRegressor: n_targets is "
            "required", code="attribute")
    given = 0 if base is None else len(base)
    require(not given or given == n_targets, "TreeEnsembleRegressor: {} base_values for {} "
            "targets", given, n_targets, code="attribute")
    bad = _outside(votes[1], n_targets)
    require(not bad, "TreeEnsembleRegressor: target_ids {} outside [0, {})", bad[:3], n_targets,
            code="attribute")
    try:
        forest = _old_forest(node, "target", n_targets, _aggregate(attrs))
    except ValueError as exc:
        deny("TreeEnsembleRegressor: {}", exc, code="attribute")
    _require_votes(node, _aggregate(attrs), forest.always_voted)


def _forget_old_forest():
    _old_forest.forget()
    _layout_and_votes.forget()


def _regressor_forest(node):
    attrs = node.attributes
    base = _either(node, "base_values")
    forest = _old_forest(node, "target", attrs["n_targets"], _aggregate(attrs))
    _forget_old_forest()
    return {"forest": forest, "base": base if base is not None and len(base) else None,
            "kind": TRANSFORM_NAMES[attrs.get("post_transform") or "NONE"]}


FLOAT32, FLOAT64 = np.dtype(np.float32), np.dtype(np.float64)  # native: an array's very dtype


def _compare_type(xp, x):
    """Old-encoding thresholds compare in float32, float64 for float64 input."""
    if x.dtype is FLOAT32 or x.dtype is FLOAT64:
        return x
    return x.astype(xp.float64 if x.dtype == xp.float64 else xp.float32, copy=False)


@kernel("TreeEnsembleRegressor", 3, domain=ML, dtypes=NUMBERS, check=_check_tree_regressor,
        bind=_regressor_forest)
def tree_ensemble_regressor(xp, x, *, aggregate_function, post_transform, forest=None,
                            base=None, kind=0):
    """Thresholds compare in float32 (float64 for float64 input); int inputs become float32;
    votes sum in float64; the output is float32. The tables, n_targets and base_values are
    read from the node by ``bind`` (as arrays), not passed as tuples."""
    scores, _ = forest.scores(xp, _compare_type(xp, x if x.ndim == 2 else _rows(x)), base)
    if kind == 0:
        return scores.astype(xp.float32)
    return transform_scores(xp, scores, kind).astype(xp.float32)


@kernel("TreeEnsembleRegressor", 1, domain=ML, dtypes=NUMBERS, check=_check_tree_regressor,
        bind=_regressor_forest)
def tree_ensemble_regressor_1(xp, x, *, aggregate_function, post_transform, forest=None,
                              base=None, kind=0):
    return tree_ensemble_regressor(xp, x, aggregate_function=aggregate_function,
                                   post_transform=post_transform, forest=forest, base=base,
                                   kind=kind)


def _class_labels(attrs):
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_int64s")
    return list(strings) if strings else list(ints or ())


def _check_tree_classifier(node, provider):
    attrs = node.attributes
    op = f"TreeEnsembleClassifier-{node.since_version}"
    strings, ints = attrs.get("classlabels_strings"), attrs.get("classlabels_int64s")
    require(bool(strings) != bool(ints), "{}: exactly one of classlabels_strings and "
            "classlabels_int64s must be set", op, code="attribute")
    n_classes = len(_class_labels(attrs))
    try:
        _, votes = _layout_and_votes(node, "class")
    except ValueError as exc:
        deny("{}: {}", op, exc, code="attribute")
    classes = votes[1]
    bad = _outside(classes, n_classes)
    require(not bad, "{}: class_ids {} outside the {} class labels", op, bad[:3], n_classes,
            code="attribute")
    transform = attrs.get("post_transform", "NONE")
    require(transform in TRANSFORM_NAMES, "{}: post_transform must be one of {}, got {!r}", op,
            "/".join(TRANSFORM_NAMES), transform, code="attribute")
    base = _either(node, "base_values")
    given = 0 if base is None else len(base)
    used = set(_as_list(classes))
    if n_classes == 2 and len(used) == 1:
        require(given <= 1 and used == {0}, "{}: two classes with votes for class {} only "
                "and {} base_values: the spec does not say how the second score is formed "
                "(onnxruntime's rules cover votes for class 0 with at most one base value)",
                op, sorted(used), given, code="attribute")
        require(transform in ("NONE", "LOGISTIC"), "{}: two classes with one score column "
                "take post_transform NONE or LOGISTIC (the second column is the complement), "
                "got {}", op, transform, code="attribute")
    else:
        require(n_classes >= 2, "{}: needs at least two class labels for one score per class, "
                "got {}", op, n_classes, code="attribute")
        require(not given or given == n_classes, "{}: {} base_values for {} classes", op,
                given, n_classes, code="attribute")
        require(n_classes > 2, "{}: two classes with votes for both: the spec does not "
                "define the label (onnxruntime labels these 1 or 0 by the second score's sign, "
                "whatever the class labels); exporters write one column of votes for class 0",
                op, code="attribute")
    try:
        _old_forest(node, "class", n_classes, 1)
    except ValueError as exc:  # a tree that never reaches its leaves
        deny("{}: {}", op, exc, code="attribute")


class ClassifierRule:
    """What turns a classifier's scores into labels, worked out once per kernel: the labels
    as an array, the base values, whether the weights mix signs (onnxruntime's rule for one
    score column), whether there is one score column (two classes, votes for class 0 only:
    ``voted_targets`` the classes with votes), the base values added to every column (else
    ``None``) and the post transform's number."""

    def __init__(self, node, voted_targets):
        attrs = node.attributes
        labels = _class_labels(attrs)
        self.labels = (np.asarray(labels, dtype=object) if isinstance(labels[0], str)
                       else np.asarray(labels, dtype=np.int64))
        self.n_classes = len(labels)
        base = _either(node, "base_values")
        self.base = np.zeros(0) if base is None else base
        weights = _either(node, "class_weights")
        weights = np.zeros(0) if weights is None else weights
        self.mixed_signs = bool((weights < 0).any())
        self.one_column = self.n_classes == 2 and voted_targets == {0}
        self.column_base = self.base if self.base.size and not self.one_column else None
        self.transform = TRANSFORM_NAMES[attrs.get("post_transform") or "NONE"]


def _classifier_forest(node):
    attrs = node.attributes
    forest = _old_forest(node, "class", len(_class_labels(attrs)), 1)
    _forget_old_forest()
    return {"forest": forest, "rule": ClassifierRule(node, forest.voted_targets)}


def _one_column_scores(xp, score, mixed_signs, transform):
    """Two classes, votes for class 0 only (a binary gradient-boosting export), onnxruntime's
    rule: the second class wins when the raw score is above 0.5, or above 0 when some weights
    are negative; the scores are [1 - p, p] for p the transformed score, or [-s, s] for mixed
    signs without a transform."""
    positive = score > 0 if mixed_signs else score > 0.5
    if transform == TRANSFORM_NAMES["LOGISTIC"]:
        score = transform_scores(xp, score[:, None], 2)[:, 0]
    elif mixed_signs:
        return positive, two_columns(xp, xp.negative(score), score)
    return positive, two_columns(xp, 1 - score, score)


def _few_one_column_scores(score, base, mixed_signs):
    """``_one_column_scores`` of LOGISTIC for a few rows, with ``base`` added: each row in
    Python floats (float64, as numpy's passes: the same values), labels' indices and the
    [rows, 2] float32 scores; ``None`` where a score is not finite."""
    values = [v + base for v in score.tolist()]
    if not math.isfinite(sum(values)):
        return None
    cut = 0.0 if mixed_signs else 0.5
    out = np.array([(1 - p, p) for p in logistic_row(values)], dtype=np.float32)
    return np.array([v > cut for v in values], dtype=np.intp), out.reshape(len(values), 2)


def _tree_classifier(xp, x, forest, rule):
    scores, has = forest.scores(xp, _compare_type(xp, x if x.ndim == 2 else _rows(x)),
                                rule.column_base)
    labels = xp.asarray(rule.labels) if rule.labels.dtype != object else rule.labels
    if (rule.one_column and rule.transform == TRANSFORM_NAMES["LOGISTIC"]
            and scores.__class__ is np.ndarray and scores.dtype == np.float64
            and scores.shape[0] < SHORT_SCORES):
        few = _few_one_column_scores(scores[:, 0], float(rule.base[0]) if rule.base.size
                                     else 0.0, rule.mixed_signs)
        if few is not None:
            return labels[few[0]], few[1]
    if rule.one_column:
        score = scores[:, 0] + (rule.base[0] if rule.base.size else 0.0)
        positive, out = _one_column_scores(xp, score, rule.mixed_signs, rule.transform)
        return labels[positive.astype(xp.intp)], out.astype(xp.float32)
    if rule.column_base is not None:
        has = None  # every class has a base value
    if has is None:
        winner = scores.argmax(axis=1)
    else:
        if rows_without := int((~has.any(axis=1)).sum()):
            raise ValueError(f"{rows_without} rows reach no vote for any class, so no label")
        winner = xp.where(has, scores, -xp.inf).argmax(axis=1)
    out = scores if rule.transform == 0 else transform_scores(xp, scores, rule.transform)
    return labels[winner], out.astype(xp.float32)


@kernel("TreeEnsembleClassifier", 3, domain=ML, dtypes=NUMBERS, check=_check_tree_classifier,
        bind=_classifier_forest)
def tree_ensemble_classifier(xp, x, *, post_transform, forest=None, rule=None):
    """The label is the class with the highest raw score among those that got a vote (the
    first on ties); scores are float32 after the post transform. The tables, class labels and
    base_values are read from the node by ``bind`` (as arrays), not passed as tuples."""
    return _tree_classifier(xp, x, forest, rule)


@kernel("TreeEnsembleClassifier", 1, domain=ML, dtypes=NUMBERS, check=_check_tree_classifier,
        bind=_classifier_forest)
def tree_ensemble_classifier_1(xp, x, *, post_transform, forest=None, rule=None):
    return _tree_classifier(xp, x, forest, rule)
