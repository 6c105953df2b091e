"""Tree ensembles on the CPU EP against onnxruntime: random forests in every branch mode, the
classifiers' labels and score columns, NaN inputs, empty batches."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import cpu_answer, run_ep_host, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

ML = "ai.onnx.ml"
F = 4


def random_rows(rng, trees, depth, modes=("BRANCH_LEQ",), tracks=False):
    """Complete trees in the old encoding: (tree, node, feature, threshold, mode, true, false,
    tracks)."""
    rows = []
    interior = 2 ** depth - 1
    for t in range(trees):
        for k in range(2 ** (depth + 1) - 1):
            if k < interior:
                rows.append((t, k, int(rng.integers(F)), float(rng.normal()),
                             str(rng.choice(modes)), 2 * k + 1, 2 * k + 2,
                             int(tracks and rng.integers(2))))
            else:
                rows.append((t, k, 0, 0.0, "LEAF", 0, 0, 0))
    return rows


def node_attrs(rows, version):
    attrs = dict(nodes_treeids=[r[0] for r in rows], nodes_nodeids=[r[1] for r in rows],
                 nodes_featureids=[r[2] for r in rows], nodes_modes=[r[4] for r in rows],
                 nodes_truenodeids=[r[5] for r in rows], nodes_falsenodeids=[r[6] for r in rows],
                 nodes_missing_value_tracks_true=[r[7] for r in rows])
    values = [r[3] for r in rows]
    if version == 3:
        attrs["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(values, np.float32), "v")
    else:
        attrs["nodes_values"] = values
    return attrs


def ml_model(node, outputs, version, x_type=TensorProto.FLOAT):
    graph = helper.make_graph(
        [node], "trees", [helper.make_tensor_value_info("x", x_type, [None, F])], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, version)])
    model.ir_version = 10
    return model


def classifier(rng, classes, used, version=3, strings=False, transform="NONE", base=(),
               signs="positive", modes=("BRANCH_LEQ",), tracks=False, trees=4, depth=4):
    rows = random_rows(rng, trees, depth, modes, tracks)
    leaves = [r for r in rows if r[4] == "LEAF"]
    votes = [(r[0], r[1], c) for r in leaves for c in used]
    weights = rng.random(len(votes)) - (0.5 if signs == "mixed" else 0.0)
    labels = ({"classlabels_strings": [f"class{i}" for i in range(classes)]} if strings
              else {"classlabels_int64s": [7 + 3 * i for i in range(classes)]})
    extra = {"base_values": list(base)} if base else {}
    node = helper.make_node(
        "TreeEnsembleClassifier", ["x"], ["label", "scores"], domain=ML,
        **node_attrs(rows, version), class_treeids=[v[0] for v in votes],
        class_nodeids=[v[1] for v in votes], class_ids=[v[2] for v in votes],
        class_weights=weights.tolist(), post_transform=transform, **labels, **extra)
    label_type = TensorProto.STRING if strings else TensorProto.INT64
    return ml_model(node, [helper.make_tensor_value_info("label", label_type, [None]),
                           helper.make_tensor_value_info("scores", TensorProto.FLOAT,
                                                         [None, None])], version)


def regressor(rng, version=3, targets=2, aggregate="SUM", transform="NONE",
              modes=("BRANCH_LEQ",), tracks=False, trees=6, depth=5, x_type=TensorProto.FLOAT):
    rows = random_rows(rng, trees, depth, modes, tracks)
    leaves = [r for r in rows if r[4] == "LEAF"]
    votes = [(r[0], r[1], k) for r in leaves for k in range(targets)]
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, **node_attrs(rows, version),
        target_treeids=[v[0] for v in votes], target_nodeids=[v[1] for v in votes],
        target_ids=[v[2] for v in votes], target_weights=rng.normal(size=len(votes)).tolist(),
        n_targets=targets, aggregate_function=aggregate, post_transform=transform,
        base_values=rng.normal(size=targets).tolist())
    return ml_model(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         [None, targets])], version, x_type)


def inputs(rng, rows=200, nan=False, dtype=np.float32):
    x = rng.normal(size=(rows, F)).astype(dtype)
    if nan:
        x[rng.random(x.shape) < 0.2] = np.nan
    return x


def assert_same(model, x, rtol=1e-5, atol=1e-6):
    ours, theirs = run_ep_host(model, {"x": x}), run_onnxruntime(model, {"x": x})
    for a, b in zip(ours, theirs, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
        if a.dtype == object:
            assert a.tolist() == b.tolist()
        else:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return ours


# -- TreeEnsembleRegressor: the vectorised walk ------------------------------------------------


@pytest.mark.parametrize("modes", [("BRANCH_LEQ",), ("BRANCH_LT",), ("BRANCH_GTE", "BRANCH_GT"),
                                   ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT"),
                                   ("BRANCH_EQ", "BRANCH_NEQ", "BRANCH_LEQ")])
@pytest.mark.parametrize("version", [1, 3])
def test_regressor_every_branch_mode(rng, modes, version):
    model = regressor(rng, version, modes=modes)
    assert_same(model, inputs(rng))


@pytest.mark.parametrize("modes", [("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT"), ()])
def test_regressor_thresholds_hit_exactly_in_every_mode(rng, modes):
    modes = modes + ("BRANCH_EQ", "BRANCH_NEQ")
    model = regressor(rng, 1, modes=modes)
    thresholds = np.array([a for a in model.graph.node[0].attribute
                           if a.name == "nodes_values"][0].floats, np.float32)
    x = rng.choice(thresholds, size=(300, F)).astype(np.float32)
    assert_same(model, x)


@pytest.mark.parametrize("modes", [("BRANCH_LEQ",), ("BRANCH_GT", "BRANCH_LT")])
def test_regressor_nan_inputs_follow_missing_value_tracks_true(rng, modes):
    model = regressor(rng, 3, modes=modes, tracks=True)
    assert_same(model, inputs(rng, nan=True))


@pytest.mark.parametrize("aggregate", ["AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_regressor_aggregates_and_transforms(rng, aggregate, transform):
    assert_same(regressor(rng, 3, targets=3, aggregate=aggregate, transform=transform),
                inputs(rng))


def test_regressor_double_and_int_inputs(rng):
    assert_same(regressor(rng, 1, x_type=TensorProto.DOUBLE), inputs(rng, dtype=np.float64))
    x = rng.integers(-2, 3, size=(50, F)).astype(np.int64)
    ints = regressor(np.random.default_rng(5), 1, x_type=TensorProto.INT64)
    floats = regressor(np.random.default_rng(5), 1)  # onnxruntime has no int64 kernel
    (ours,) = run_ep_host(ints, {"x": x})
    (theirs,) = run_onnxruntime(floats, {"x": x.astype(np.float32)})
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_regressor_empty_batch(rng):
    (y,) = run_ep_host(regressor(rng, 3), {"x": np.zeros((0, F), np.float32)})
    assert y.shape == (0, 2) and y.dtype == np.float32


def test_regressor_many_rows_cross_the_walk_chunks(rng):
    # 6 trees: 65536 // 6 rows per step, so 30000 rows take three steps
    assert_same(regressor(rng, 3), inputs(rng, rows=30_000, nan=True))


# -- TreeEnsembleClassifier --------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 3])
@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO"])
def test_classifier_multiclass(rng, version, strings, transform):
    model = classifier(rng, 3, [0, 1, 2], version, strings, transform, base=(0.1, -0.2, 0.3))
    label, scores = assert_same(model, inputs(rng))
    assert len(set(np.asarray(label).tolist())) > 1  # the labels vary over the rows


def test_classifier_class_without_votes_never_wins(rng):
    model = classifier(rng, 4, [1, 2, 3], signs="mixed")
    label, scores = assert_same(model, inputs(rng))
    assert 7 not in label.tolist() and (scores[:, 0] == 0).all()


@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_classifier_binary_one_column_like_a_random_forest(rng, signs):
    label, scores = assert_same(classifier(rng, 2, [0], signs=signs, trees=1), inputs(rng))
    assert set(label.tolist()) == {7, 10}
    if signs == "positive":
        np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("rows", [200, 7])  # 7: the logistic one score at a time in Python
@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_classifier_binary_logistic_like_gradient_boosting(rng, signs, rows):
    model = classifier(rng, 2, [0], transform="LOGISTIC", base=(-0.3,), signs=signs,
                       strings=True, tracks=True)
    label, scores = assert_same(model, inputs(rng, rows=rows, nan=True))
    np.testing.assert_allclose(scores.sum(axis=1), 1.0, rtol=1e-6)


@pytest.mark.parametrize("rows", [1, 7, 31])
@pytest.mark.parametrize("signs", ["positive", "mixed"])
def test_a_few_rows_of_binary_logistic_scores_equal_numpys_passes(rng, signs, rows, monkeypatch):
    """Under SHORT_SCORES rows the one-column LOGISTIC scores and labels are worked out in
    Python floats: the same labels and float32 scores, to the bit, as numpy's passes."""
    model = classifier(rng, 2, [0], transform="LOGISTIC", base=(-0.3,), signs=signs, trees=6)
    x = inputs(rng, rows=rows) * 3
    few = run_ep_host(model, {"x": x})
    monkeypatch.setattr("ep_host.kernels.trees.SHORT_SCORES", 0)
    passes = run_ep_host(model, {"x": x})
    for a, b in zip(few, passes, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def test_classifier_declines_two_classes_both_voted(rng):
    answer = cpu_answer(classifier(rng, 2, [0, 1]))
    assert not answer.is_supported and answer.code == "attribute"
    assert "votes for both" in answer.reason


@pytest.mark.parametrize("transform", ["SOFTMAX", "PROBIT", "SOFTMAX_ZERO"])
def test_classifier_declines_one_column_transforms_without_a_second_score(rng, transform):
    answer = cpu_answer(classifier(rng, 2, [0], transform=transform))
    assert not answer.is_supported and "NONE or LOGISTIC" in answer.reason


def test_classifier_probit_is_the_exact_normal_quantile(rng):
    plain = classifier(np.random.default_rng(0), 3, [0, 1, 2], trees=1)
    model = classifier(np.random.default_rng(0), 3, [0, 1, 2], trees=1, transform="PROBIT")
    x = inputs(rng)
    _, raw = run_ep_host(plain, {"x": x})
    _, probit = run_ep_host(model, {"x": x})
    from scipy.stats import norm

    assert ((raw > 0) & (raw < 1)).all()  # one tree, weights in [0, 1): all quantiles finite
    np.testing.assert_allclose(probit, norm.ppf(raw.astype(np.float64)), rtol=1e-5, atol=1e-6)
    _, theirs = run_onnxruntime(model, {"x": x})  # onnxruntime approximates the quantile
    np.testing.assert_allclose(probit, theirs, rtol=5e-3, atol=5e-3)


def test_classifier_empty_batch(rng):
    label, scores = run_ep_host(classifier(rng, 3, [0, 1, 2]), {"x": np.zeros((0, F),
                                                                             np.float32)})
    assert label.shape == (0,) and scores.shape == (0, 3)


# -- a few rows: every node compared once per row ----------------------------------------------


def forest_of(model):
    """The kernel's flattened forest, to check which way a batch is scored."""
    from ep_host import load_model
    from ep_host.kernels import trees

    node = load_model(model.SerializeToString()).graph.nodes[0]
    bind = (trees._classifier_forest if node.op_type == "TreeEnsembleClassifier"
            else trees._regressor_forest)
    return bind(node)["forest"]


@pytest.mark.parametrize("modes", [("BRANCH_LEQ",), ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE",
                                                     "BRANCH_GT"), ("BRANCH_EQ", "BRANCH_LEQ")])
@pytest.mark.parametrize("rows", [1, 2, 3])
def test_regressor_few_rows_with_nan_like_onnxruntime(rng, modes, rows):
    model = regressor(rng, 3, modes=modes, tracks=True, trees=20, depth=5)
    assert forest_of(model).compares_every_node(rows)
    for _ in range(5):
        assert_same(model, inputs(rng, rows=rows, nan=True))


@pytest.mark.parametrize("rows", [1, 2, 3])
def test_regressor_few_rows_every_mode_like_onnxruntime(rng, rows):
    modes = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
    model = regressor(rng, 3, modes=modes, trees=20, depth=5)
    assert forest_of(model).compares_every_node(rows)
    for _ in range(5):
        assert_same(model, inputs(rng, rows=rows))


def test_regressor_few_rows_hit_thresholds_exactly(rng):
    modes = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
    model = regressor(rng, 1, modes=modes, trees=20)
    assert forest_of(model).compares_every_node(1)
    thresholds = np.array([a for a in model.graph.node[0].attribute
                           if a.name == "nodes_values"][0].floats, np.float32)
    for _ in range(20):
        assert_same(model, rng.choice(thresholds, size=(1, F)).astype(np.float32))


@pytest.mark.parametrize("aggregate", ["AVERAGE", "MIN", "MAX"])
def test_regressor_few_rows_aggregates(rng, aggregate):
    model = regressor(rng, 3, targets=3, aggregate=aggregate, trees=20)
    assert forest_of(model).compares_every_node(2)
    assert_same(model, inputs(rng, rows=2))


@pytest.mark.parametrize("rows", [1, 2])
def test_classifier_few_rows(rng, rows):
    model = classifier(rng, 3, [0, 1, 2], transform="SOFTMAX", trees=20, tracks=True)
    assert forest_of(model).compares_every_node(rows)
    for _ in range(5):
        label, _ = assert_same(model, inputs(rng, rows=rows, nan=True))
        assert label.shape == (rows,)


def test_one_row_of_a_big_forest_walks_the_trees(rng):
    # 100 trees of depth 8: comparing 51,100 nodes costs more than 800 steps of a walk
    model = regressor(rng, 3, targets=1, trees=100, depth=8)
    assert not forest_of(model).compares_every_node(1)
    assert_same(model, inputs(rng, rows=1, nan=True))


# -- tables the walk cannot take ---------------------------------------------------------------


def test_a_tree_with_a_cycle_declines(rng):
    # node 1 of tree 0 is its own true child: no walk from the root ends
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 1, 0], nodes_values=[0.0, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF"], nodes_truenodeids=[1, 1, 0],
        nodes_falsenodeids=[2, 2, 0], target_treeids=[0], target_nodeids=[2], target_ids=[0],
        target_weights=[1.0], n_targets=1)
    answer = cpu_answer(ml_model(node, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [None, 1])], 3))
    assert not answer.is_supported and answer.code == "attribute"
    assert "does not reach its leaves" in answer.reason



@pytest.mark.parametrize("modes, named", [
    (["BRANCH_LEQ", "BRANCH_LE", "LEAF"], "['BRANCH_LE']"),
    (["BRANCH_LEQ", "LEAF", "leaf"], "['leaf']"),  # the names are case-sensitive
    (["BRANCH_LEQ", "LEAF"], "nodes_modes needs one entry per node (3)")])
def test_a_node_mode_outside_the_spec_declines_naming_it(modes, named):
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_values=[0.0, 0.0, 0.0],
        nodes_modes=modes, nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        target_treeids=[0], target_nodeids=[2], target_ids=[0], target_weights=[1.0],
        n_targets=1)
    answer = cpu_answer(ml_model(node, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [None, 1])], 3))
    assert not answer.is_supported and answer.code == "attribute"
    assert named in answer.reason, answer.reason

def neq_stump(tracks):
    """One tree: x0 != 0.5 ? leaf 1 (weight 1) : leaf 2 (weight 2)."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, nodes_treeids=[0, 0, 0],
        nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_values=[0.5, 0.0, 0.0],
        nodes_modes=["BRANCH_NEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0],
        nodes_falsenodeids=[2, 0, 0], nodes_missing_value_tracks_true=[tracks, 0, 0],
        target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
        target_weights=[1.0, 2.0], n_targets=1)
    return ml_model(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])], 3)


@pytest.mark.parametrize("rows", [1, 300])
def test_nan_at_a_neq_node_not_tracking_true_is_refused(rows):
    # the spec sends the NaN to the false branch (2), onnxruntime to the true one (1)
    model = neq_stump(tracks=0)
    x = np.zeros((rows, F), np.float32)
    assert_same(model, x + 0.5)
    assert_same(model, x)
    x[-1, 0] = np.nan
    with pytest.raises(Exception, match="BRANCH_NEQ.*spec sends it to the false branch"):
        run_ep_host(model, {"x": x})


def test_nan_at_a_neq_node_tracking_true_takes_the_true_branch():
    x = np.array([[np.nan, 0, 0, 0], [0.5, 0, 0, 0]], np.float32)
    (y,) = assert_same(neq_stump(tracks=1), x)
    assert y.tolist() == [[1.0], [2.0]]


def test_two_ensembles_in_one_model_keep_their_own_trees(rng):
    # each node's check and kernel build their forest from that node's attributes
    first, second = regressor(rng, 3, targets=1), regressor(rng, 3, targets=1)
    nodes = [first.graph.node[0], second.graph.node[0]]
    nodes[1].output[0] = "y2"
    graph = helper.make_graph(
        nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, F])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, 1])
         for name in ("y", "y2")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid(ML, 3)])
    model.ir_version = 10
    y, y2 = assert_same(model, inputs(rng, rows=50))
    assert not np.allclose(y, y2)


@pytest.mark.parametrize("kind", ["classifier", "regressor", "regressor_every_mode_nan"])
def test_one_row_scores_equal_that_row_in_a_batch_bit_for_bit(rng, kind):
    """One row takes its own path (flat look-ups, votes gathered per tree); a batch of rows the
    general one. The same row must score the same either way, to the bit."""
    if kind == "classifier":
        model = classifier(rng, 3, [0, 1, 2], transform="SOFTMAX", trees=20, depth=6)
    elif kind == "regressor":
        model = regressor(rng, 3, targets=3, trees=20, depth=6)
    else:
        modes = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ")
        model = regressor(rng, 3, modes=modes, tracks=True, trees=20, depth=5)
    x = inputs(rng, rows=40, nan=kind.endswith("nan"))
    together = run_ep_host(model, {"x": x})
    for i in range(len(x)):
        alone = run_ep_host(model, {"x": x[i:i + 1]})
        for a, b in zip(alone, together, strict=True):
            np.testing.assert_array_equal(np.asarray(a)[0], np.asarray(b)[i])


# -- node tables in any order ------------------------------------------------------------------


@pytest.mark.parametrize("sparse_ids", [False, True])
def test_a_shuffled_table_scores_like_the_ordered_one(rng, sparse_ids):
    # exporters write each tree's nodes together with ids 0, 1, ... (looked up by arithmetic);
    # here the rows are shuffled and the trees get ids 9, 2, 5 (the ranked lookup); with
    # ``sparse_ids`` node ids go up in tens, which the spec does not allow (onnxruntime refuses
    # them) and ep-host reads all the same
    model = regressor(rng, trees=3, depth=4)
    x = inputs(rng, nan=True)
    (ordered,) = assert_same(model, x)
    attrs = {a.name: a for a in model.graph.node[0].attribute}
    n = len(attrs["nodes_nodeids"].ints)
    order = rng.permutation(n)
    new_tree = {0: 9, 1: 2, 2: 5}
    for name in ("nodes_treeids", "target_treeids"):
        attrs[name].ints[:] = [new_tree[t] for t in attrs[name].ints]
    if sparse_ids:
        for name in ("nodes_nodeids", "nodes_truenodeids", "nodes_falsenodeids",
                     "target_nodeids"):
            attrs[name].ints[:] = [10 * i + 3 for i in attrs[name].ints]
    for name, attr in attrs.items():
        if name.startswith("nodes_"):
            for field in ("ints", "floats", "strings"):
                values = list(getattr(attr, field))
                if len(values) == n:
                    getattr(attr, field)[:] = [values[i] for i in order]
            if attr.HasField("t"):  # nodes_values_as_tensor
                attr.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(attr.t)[order],
                                                        attr.t.name))
    (shuffled,) = run_ep_host(model, {"x": x})
    np.testing.assert_allclose(shuffled, ordered, rtol=1e-6)


@pytest.mark.parametrize("shuffled", [False, True])
def test_a_child_outside_the_table_declines(rng, shuffled):
    model = regressor(rng, trees=2, depth=2)
    attrs = {a.name: a for a in model.graph.node[0].attribute}
    if shuffled:  # tree ids descending: the ranked lookup
        attrs["nodes_treeids"].ints[:] = [1 - t for t in attrs["nodes_treeids"].ints]
        attrs["target_treeids"].ints[:] = [1 - t for t in attrs["target_treeids"].ints]
    attrs["nodes_truenodeids"].ints[0] = 7  # tree 0 (or 1) has nodes 0..6: 7 is past its end
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
    assert "points to a missing node 7" in answer.reason


def test_a_repeated_node_id_declines(rng):
    model = regressor(rng, trees=2, depth=2)
    attrs = {a.name: a for a in model.graph.node[0].attribute}
    attrs["nodes_nodeids"].ints[3] = 2  # tree 0 lists node 2 twice
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
    assert "repeats node id 2" in answer.reason


def test_a_leaf_two_branches_share_is_reached_from_both():
    # node 0: x0 <= 0 ? node 1 : leaf 2; node 1: x1 <= 0 ? leaf 2 : leaf 3 (leaf 2 has two parents)
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain=ML, nodes_treeids=[0, 0, 0, 0],
        nodes_nodeids=[0, 1, 2, 3], nodes_featureids=[0, 1, 0, 0],
        nodes_values=[0.0, 0.0, 0.0, 0.0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 2, 0, 0],
        nodes_falsenodeids=[2, 3, 0, 0], target_treeids=[0, 0], target_nodeids=[2, 3],
        target_ids=[0, 0], target_weights=[1.0, 5.0], n_targets=1)
    model = ml_model(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])], 3)
    x = np.array([[-1, -1, 0, 0], [-1, 1, 0, 0], [1, -1, 0, 0], [1, 1, 0, 0]], np.float32)
    (y,) = run_ep_host(model, {"x": x})
    np.testing.assert_array_equal(y, np.array([[1], [5], [1], [1]], np.float32))


# -- small tables: laid out in Python lists, as numpy lays out big ones --------------------------


def random_table(rng):
    """An old-encoding regressor table of 1-4 random binary trees, ids shuffled or in order, and
    now and then a fault: a repeated id, a missing child, a second root, a cycle, a shared
    subtree, a vote off a leaf or outside the targets, vote lists of unequal length."""
    rows, votes = [], []
    tree_ids = rng.choice(50, size=int(rng.integers(1, 5)), replace=False).tolist()
    for t in tree_ids:
        children = {0: None}
        for _ in range(int(rng.integers(0, 12))):  # split a random leaf
            leaves = [k for k, c in children.items() if c is None]
            k = int(rng.choice(leaves))
            children[k] = (len(children), len(children) + 1)
            children[len(children)] = None
            children[len(children)] = None
        ids = rng.permutation(len(children)).tolist() if rng.random() < 0.3 else list(
            range(len(children)))
        for k, c in children.items():
            if c is None:
                rows.append([t, ids[k], 0, 0.0, "LEAF", 0, 0, 0])
                for _ in range(int(rng.integers(0, 3))):
                    votes.append([t, ids[k], int(rng.integers(2)), float(rng.normal())])
            else:
                rows.append([t, ids[k], int(rng.integers(F)), float(rng.normal()),
                             str(rng.choice(["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GT"])),
                             ids[c[0]], ids[c[1]], int(rng.integers(2))])
    if rng.random() < 0.3:
        rows = [rows[i] for i in rng.permutation(len(rows))]
    fault = rng.integers(16)  # 9 to 15: none
    interior = [r for r in rows if r[4] != "LEAF"]
    if fault == 0:
        rows.append(list(rows[int(rng.integers(len(rows)))]))  # a repeated (tree, node) id
    elif fault == 1 and interior:
        interior[0][5] = 99  # a missing child
    elif fault == 2:
        rows.append([rows[0][0], 77, 0, 0.0, "LEAF", 0, 0, 0])  # a second root
    elif fault == 3 and interior:  # a cycle: a node its own true child, that leaf gone
        node = interior[-1]
        leaf = next((r for r in rows if r[:2] == [node[0], node[5]] and r[4] == "LEAF"), None)
        if leaf is not None:
            rows.remove(leaf)
            votes = [v for v in votes if v[:2] != leaf[:2]]
            node[5] = node[1]
    elif fault == 4 and len(interior) > 1 and interior[0][0] == interior[1][0]:
        interior[1][6] = interior[0][6]  # a shared subtree (or a cycle)
    elif fault == 5 and interior and votes:
        votes[0][:2] = interior[0][:2]  # a vote on an interior node
    elif fault == 6 and votes:
        votes[-1][2] = 5  # a target outside [0, 2)
    elif fault == 7 and votes:
        votes[0][1] = 55  # a vote on a missing node
    attrs = node_attrs(rows, 1)
    attrs.update(target_treeids=[v[0] for v in votes], target_nodeids=[v[1] for v in votes],
                 target_ids=[v[2] for v in votes], target_weights=[v[3] for v in votes])
    if fault == 8 and votes:
        attrs["target_ids"] = attrs["target_ids"][:-1]
    aggregate = str(rng.choice(["SUM", "AVERAGE", "MIN", "MAX"]))
    node = helper.make_node("TreeEnsembleRegressor", ["x"], ["y"], domain=ML, n_targets=2,
                            aggregate_function=aggregate,
                            **{k: v for k, v in attrs.items() if len(v)})  # none: unset
    return ml_model(node, [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 2])], 1)


def forest_or_fault(model):
    try:
        forest = forest_of(model)
    except ValueError as exc:
        return str(exc)
    fields = {k: v for k, v in vars(forest).items() if not k.startswith("_")}
    return {k: (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v
            for k, v in fields.items()}  # arrays bit for bit (NaN included)


def test_small_tables_are_laid_out_as_numpy_lays_out_big_ones(monkeypatch):
    """The Python-list layout of small tables (trees.SMALL_TABLE) gives every field of the
    forest numpy's layout gives, and the same error for a faulty table."""
    from ep_host.kernels import trees

    rng = np.random.default_rng(5)
    faults = set()
    for _ in range(300):
        model = random_table(rng)
        small = forest_or_fault(model)
        with monkeypatch.context() as m:
            m.setattr(trees, "SMALL_TABLE", 0)
            big = forest_or_fault(model)
        assert small == big
        if isinstance(small, str):
            faults.add(small.split(" ")[-1])
    assert len(faults) >= 5  # the faults made were met: not only well-formed tables compared
