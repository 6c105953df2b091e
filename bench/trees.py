"""Tree ensembles on ep-host's CPU EP against onnxruntime: a random 100-tree, depth-8 ensemble
on 10k rows, as TreeEnsembleRegressor-3, TreeEnsembleClassifier-3 and TreeEnsemble-5.

One thread each (onnxruntime: intra_op_num_threads=1); runs alternate between the two and the
ratio of medians is printed per model.

    .venv/bin/python bench/trees.py [--trees 100] [--depth 8] [--rows 10000] [--repeat 10]
"""

from __future__ import annotations

import os

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ep_host import InferenceSession  # noqa: E402

ML = "ai.onnx.ml"


def random_trees(rng, trees, depth, features):
    """Complete trees in the old encoding: per node (tree, node id, feature, threshold, mode,
    true id, false id); leaves are the last level."""
    rows = []
    for t in range(trees):
        interior = 2 ** depth - 1
        for k in range(2 ** (depth + 1) - 1):
            if k < interior:
                rows.append((t, k, int(rng.integers(features)), float(rng.normal()),
                             "BRANCH_LEQ", 2 * k + 1, 2 * k + 2))
            else:
                rows.append((t, k, 0, 0.0, "LEAF", 0, 0))
    return rows


def _old_encoding(rows):
    return dict(nodes_treeids=[r[0] for r in rows], nodes_nodeids=[r[1] for r in rows],
                nodes_featureids=[r[2] for r in rows], nodes_values=[r[3] for r in rows],
                nodes_modes=[r[4] for r in rows], nodes_truenodeids=[r[5] for r in rows],
                nodes_falsenodeids=[r[6] for r in rows])


def _model(node, features, outputs, ml_opset):
    graph = helper.make_graph(
        [node], "trees", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, features])],
        outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, ml_opset)])
    model.ir_version = 10
    return model


def regressor(rng, trees, depth, features):
    rows = random_trees(rng, trees, depth, features)
    leaves = [r for r in rows if r[4] == "LEAF"]
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=1, **_old_encoding(rows),
        target_treeids=[r[0] for r in leaves], target_nodeids=[r[1] for r in leaves],
        target_ids=[0] * len(leaves), target_weights=rng.normal(size=len(leaves)).tolist())
    return _model(node, features, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                 [None, 1])], 3)


def classifier(rng, trees, depth, features, classes=3):
    rows = random_trees(rng, trees, depth, features)
    leaves = [r for r in rows if r[4] == "LEAF"]
    node = helper.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "scores"], domain=ML, **_old_encoding(rows),
        class_treeids=[r[0] for r in leaves], class_nodeids=[r[1] for r in leaves],
        class_ids=[r[0] % classes for r in leaves],
        class_weights=rng.random(len(leaves)).tolist(), classlabels_int64s=list(range(classes)),
        post_transform="SOFTMAX")
    return _model(node, features, [
        helper.make_tensor_value_info("label", TensorProto.INT64, [None]),
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, classes])], 3)


def tree_ensemble(rng, trees, depth, features):
    interior = 2 ** depth - 1
    n = trees * interior
    leaves_per_tree = 2 ** depth
    true_ids, false_ids, true_leaf, false_leaf = [], [], [], []
    for t in range(trees):
        for k in range(interior):
            for child, ids, leafs in ((2 * k + 1, true_ids, true_leaf),
                                      (2 * k + 2, false_ids, false_leaf)):
                if child < interior:
                    ids.append(t * interior + child)
                    leafs.append(0)
                else:
                    ids.append(t * leaves_per_tree + child - interior)
                    leafs.append(1)
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain=ML, n_targets=1, aggregate_function=1,
        post_transform=0, tree_roots=[t * interior for t in range(trees)],
        nodes_featureids=rng.integers(features, size=n).tolist(),
        nodes_splits=numpy_helper.from_array(rng.normal(size=n).astype(np.float32)),
        nodes_modes=numpy_helper.from_array(np.zeros(n, np.uint8)),
        nodes_truenodeids=true_ids, nodes_falsenodeids=false_ids, nodes_trueleafs=true_leaf,
        nodes_falseleafs=false_leaf, leaf_targetids=[0] * (trees * leaves_per_tree),
        leaf_weights=numpy_helper.from_array(
            rng.normal(size=trees * leaves_per_tree).astype(np.float32)))
    return _model(node, features, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                 [None, 1])], 5)


def _onnxruntime_session(model):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    return onnxruntime.InferenceSession(model.SerializeToString(), options,
                                        providers=["CPUExecutionProvider"])


def compare(name, model, x, repeat):
    ours = InferenceSession(model.SerializeToString(), providers=["cpu"])
    theirs = _onnxruntime_session(model)
    feed = {"x": x}
    a, b = ours.run(None, feed), theirs.run(None, feed)  # warm-up, and the check
    for got, want in zip(a, b, strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
    times = {"ep-host": [], "onnxruntime": []}
    for i in range(repeat):
        order = [("ep-host", ours), ("onnxruntime", theirs)]
        for label, session in order if i % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            session.run(None, feed)
            times[label].append(time.perf_counter() - start)
    ep, ort = (statistics.median(times[k]) * 1e3 for k in ("ep-host", "onnxruntime"))
    print(f"{name:28s} ep-host {ep:8.2f} ms   onnxruntime {ort:8.2f} ms   ratio {ep / ort:5.2f}")
    return ep / ort


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=100)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--features", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(args.rows, args.features)).astype(np.float32)
    shape = (args.trees, args.depth, args.features)
    print(f"{args.trees} trees, depth {args.depth}, {args.rows} rows x {args.features} features, "
          f"one thread each, median of {args.repeat}")
    ratios = [compare("TreeEnsembleRegressor-3", regressor(rng, *shape), x, args.repeat),
              compare("TreeEnsembleClassifier-3", classifier(rng, *shape), x, args.repeat),
              compare("TreeEnsemble-5", tree_ensemble(rng, *shape), x, args.repeat)]
    print(f"worst ratio {max(ratios):.2f}")


if __name__ == "__main__":
    main()
