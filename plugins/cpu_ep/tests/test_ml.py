"""ai.onnx.ml ops on the CPU EP, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import cpu_answer, make_model, run_ep_host, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

F, D, I64, S = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.STRING
ML = "ai.onnx.ml"


def ml_model(op, inputs, outputs, version=1, opset=17, input_names=None, **attrs):
    node = helper.make_node(op, input_names or [n for n, _, _ in inputs],
                            [n for n, _, _ in outputs], domain=ML, **attrs)
    return make_model([node], inputs, outputs, opset=opset, domains=[(ML, version)])


def assert_same(model, feeds, rtol=1e-6, atol=1e-6):
    ours, theirs = run_ep_host(model, feeds), run_onnxruntime(model, feeds)
    for a, b in zip(ours, theirs, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        if b.dtype == object:
            assert a.tolist() == b.tolist()
        else:
            assert a.dtype == b.dtype, (a.dtype, b.dtype)
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return ours


# -- LabelEncoder, CategoryMapper -------------------------------------------------------------


def test_label_encoder_2_floats_to_strings():
    model = ml_model("LabelEncoder", [("x", F, [6])], [("y", S, [6])], version=2,
                     keys_floats=[0.5, 1.0, -2.0], values_strings=["a", "b", "c"],
                     default_string="?")
    x = np.array([0.5, 1.0, 3.0, -2.0, 0.5, 7.0], np.float32)
    (y,) = assert_same(model, {"x": x})
    assert y.tolist() == ["a", "b", "?", "c", "a", "?"]


def test_label_encoder_4_last_repeated_key_wins():
    # the spec's rule from version 4 on (onnxruntime keeps the first)
    model = ml_model("LabelEncoder", [("x", I64, [3])], [("y", I64, [3])], version=4,
                     keys_int64s=[1, 2, 1], values_int64s=[10, 20, 30])
    (y,) = run_ep_host(model, {"x": np.array([1, 2, 3], np.int64)})
    assert y.tolist() == [30, 20, -1]


def test_label_encoder_2_declines_repeated_keys():
    model = ml_model("LabelEncoder", [("x", I64, [3])], [("y", I64, [3])], version=2,
                     keys_int64s=[1, 2, 1], values_int64s=[10, 20, 30])
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
    assert "repeats [1]" in answer.reason


def test_label_encoder_4_tensor_keys_and_int64_values():
    keys = numpy_helper.from_array(np.array([10, 20, 30], np.int64), "k")
    values = numpy_helper.from_array(np.array([1.5, 2.5, 3.5], np.float32), "v")
    model = ml_model("LabelEncoder", [("x", I64, [2, 3])], [("y", F, [2, 3])], version=4,
                     keys_tensor=keys, values_tensor=values, default_float=-7.0)
    assert_same(model, {"x": np.array([[10, 11, 30], [20, 20, 0]], np.int64)})


def test_label_encoder_4_nan_key_matches_any_nan():
    model = ml_model("LabelEncoder", [("x", F, [3])], [("y", I64, [3])], version=4,
                     keys_floats=[float("nan"), 1.0], values_int64s=[7, 8])
    nan_payload = np.array([0x7FC00001], np.uint32).view(np.float32)[0]
    (y,) = run_ep_host(model, {"x": np.array([np.nan, nan_payload, 1.0], np.float32)})
    assert y.tolist() == [7, 7, 8]


def test_label_encoder_declines_key_type_mismatch():
    model = ml_model("LabelEncoder", [("x", I64, [3])], [("y", I64, [3])], version=2,
                     keys_strings=["a"], values_int64s=[1])
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "dtype"
    assert "keys' type string" in answer.reason


def test_label_encoder_1_both_directions():
    to_int = ml_model("LabelEncoder", [("x", S, [3])], [("y", I64, [3])],
                      classes_strings=["a", "b", "c"], default_int64=-5)
    assert_same(to_int, {"x": np.array(["b", "a", "z"], dtype=object)})
    to_str = ml_model("LabelEncoder", [("x", I64, [3])], [("y", S, [3])],
                      classes_strings=["a", "b"], default_string="none")
    assert_same(to_str, {"x": np.array([1, 0, 9], np.int64)})


def test_category_mapper_both_directions():
    attrs = {"cats_int64s": [1, 2, 3], "cats_strings": ["x", "y", "z"]}
    to_int = ml_model("CategoryMapper", [("x", S, [4])], [("y", I64, [4])], default_int64=-1,
                      **attrs)
    assert_same(to_int, {"x": np.array(["z", "q", "x", "y"], dtype=object)})
    to_str = ml_model("CategoryMapper", [("x", I64, [4])], [("y", S, [4])],
                      default_string="?", **attrs)
    assert_same(to_str, {"x": np.array([3, 9, 1, 2], np.int64)})


# -- TreeEnsemble -----------------------------------------------------------------------------


def tree_model(x_type, aggregate=1, transform=0, tracks=None, targets=(0, 1, 0, 1, 0, 1)):
    np_type = np.float32 if x_type == F else np.float64

    def t(name, values, dtype):
        return numpy_helper.from_array(np.asarray(values, dtype=dtype), name)

    attrs = {
        "n_targets": max(targets) + 1, "tree_roots": [0, 3], "aggregate_function": aggregate,
        "post_transform": transform,
        # tree 0: node0 x0 <= 0.5 ? node1 : node2; node1 x1 < 1 ? leaf0 : leaf1;
        #         node2 x0 in {2, 3} ? leaf2 : leaf3.  tree 1: node3 x1 > -1 ? leaf4 : leaf5
        "nodes_featureids": [0, 1, 0, 1],
        "nodes_modes": t("modes", [0, 1, 6, 3], np.uint8),
        "nodes_splits": t("splits", [0.5, 1.0, 0.0, -1.0], np_type),
        "nodes_truenodeids": [1, 0, 2, 4], "nodes_trueleafs": [0, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 3, 5], "nodes_falseleafs": [0, 1, 1, 1],
        "membership_values": t("members", [2.0, 3.0, np.nan], np_type),
        "leaf_targetids": list(targets),
        "leaf_weights": t("weights", [1.0, 2.0, 3.0, 4.0, 0.5, -0.25], np_type),
    }
    if tracks is not None:
        attrs["nodes_missing_value_tracks_true"] = tracks
    return ml_model("TreeEnsemble", [("x", x_type, [None, 2])], [("y", x_type, None)],
                    version=5, opset=21, **attrs)


TREE_X = np.array([[0.0, 0.0], [0.0, 2.0], [2.0, -3.0], [5.0, 0.0], [np.nan, 1.0],
                   [3.0, np.nan]])


@pytest.mark.parametrize("aggregate", [0, 1])
def test_tree_ensemble_sum_and_average(aggregate):
    model = tree_model(F, aggregate, tracks=[1, 0, 0, 1])
    assert_same(model, {"x": TREE_X.astype(np.float32)}, rtol=1e-6)


@pytest.mark.parametrize("aggregate", [2, 3])
def test_tree_ensemble_min_and_max(aggregate):
    model = tree_model(F, aggregate, tracks=[1, 0, 0, 1], targets=[0] * 6)
    assert_same(model, {"x": TREE_X.astype(np.float32)}, rtol=1e-6)


@pytest.mark.parametrize("aggregate", [1, 3])
def test_tree_ensemble_one_row_at_a_time(aggregate):
    # one row compares every node once (membership and NaN included) instead of walking
    from ep_host import load_model
    from ep_host.kernels.trees import _tree_ensemble_forest

    model = tree_model(F, aggregate, tracks=[1, 0, 0, 1], targets=[0] * 6)
    forest = _tree_ensemble_forest(load_model(model.SerializeToString()).graph.nodes[0])
    assert forest["forest"].compares_every_node(1)
    for row in TREE_X.astype(np.float32):
        assert_same(model, {"x": row[None, :]}, rtol=1e-6)


@pytest.mark.parametrize("tracks", [None, [1, 0, 0, 1]])
def test_a_small_tree_ensembles_forest_is_numpys(tracks, monkeypatch):
    # a table under trees.SMALL_TABLE is laid out in Python lists: every field as numpy's
    from ep_host import load_model
    from ep_host.kernels import trees

    node = load_model(tree_model(F, tracks=tracks).SerializeToString()).graph.nodes[0]

    def fields():
        forest = trees._tree_ensemble_forest(node)["forest"]
        return {k: (v.dtype.str, v.shape, v.tobytes()) if isinstance(v, np.ndarray) else v
                for k, v in vars(forest).items() if not k.startswith("_")}

    small = fields()
    monkeypatch.setattr(trees, "SMALL_TABLE", 0)
    assert small == fields() and small["member_sets"] == {2: [2.0, 3.0]}


def test_tree_ensemble_declines_min_when_a_target_may_get_no_vote():
    answer = cpu_answer(tree_model(F, aggregate=2))
    assert not answer.is_supported and answer.code == "attribute"
    assert "no vote" in answer.reason


def _softmax(s):
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("transform, fn", [(1, _softmax), (2, lambda s: 1 / (1 + np.exp(-s)))])
def test_tree_ensemble_post_transforms(transform, fn):
    # onnxruntime reads post_transform 1 as LOGISTIC and 2 as SOFTMAX (its own enum order);
    # the spec's order is NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT.
    x = TREE_X.astype(np.float32)
    (raw,) = run_onnxruntime(tree_model(F), {"x": x})
    (y,) = run_ep_host(tree_model(F, transform=transform), {"x": x})
    np.testing.assert_allclose(y, fn(raw.astype(np.float64)), rtol=1e-6, atol=1e-7)


def test_tree_ensemble_float64():
    (y,) = assert_same(tree_model(D), {"x": TREE_X}, rtol=1e-12)
    assert y.dtype == np.float64


def test_tree_ensemble_softmax_zero_keeps_zeros_at_zero():
    x = TREE_X.astype(np.float32)
    (raw,) = run_onnxruntime(tree_model(F), {"x": x})
    (y,) = run_ep_host(tree_model(F, transform=3), {"x": x})
    raw = raw.astype(np.float64)
    e = np.where(raw != 0, np.exp(raw - raw.max(axis=1, keepdims=True)), 0)
    np.testing.assert_allclose(y, e / e.sum(axis=1, keepdims=True), rtol=1e-6, atol=1e-7)


def test_tree_ensemble_probit_is_the_normal_quantile():
    x = TREE_X.astype(np.float32)
    (raw,) = run_ep_host(tree_model(F), {"x": x})
    (y,) = run_ep_host(tree_model(F, transform=4), {"x": x})
    from scipy.stats import norm

    inside = (raw > 0) & (raw < 1)
    np.testing.assert_allclose(y[inside], norm.ppf(raw[inside].astype(np.float64)), rtol=1e-5)
    assert np.isnan(y[(raw < 0) | (raw > 1)]).all()


# -- elementwise and feature ops --------------------------------------------------------------


@pytest.mark.parametrize("shape", [[3, 5], [2, 3, 5], [5]])
def test_array_feature_extractor(rng, shape):
    out = shape[:-1] + [2] if len(shape) > 1 else [1, 2]
    model = ml_model("ArrayFeatureExtractor", [("x", F, shape), ("i", I64, [2])],
                     [("y", F, out)])
    x = rng.standard_normal(shape).astype(np.float32)
    assert_same(model, {"x": x, "i": np.array([4, 1], np.int64)})


@pytest.mark.parametrize("count", [2, 64, 65])  # fed indices: bounds from a list up to 64
@pytest.mark.parametrize("bad", [None, 5, -1])
def test_array_feature_extractor_fed_indices_are_checked(rng, count, bad):
    model = ml_model("ArrayFeatureExtractor", [("x", F, [3, 5]), ("i", I64, [count])],
                     [("y", F, [3, count])])
    x = rng.standard_normal((3, 5)).astype(np.float32)
    i = rng.integers(0, 5, count).astype(np.int64)
    if bad is None:
        (y,) = run_ep_host(model, {"x": x, "i": i})
        np.testing.assert_array_equal(y, x[:, i])
        return
    i[count // 2] = bad
    with pytest.raises(Exception, match="out of range for a last axis of 5"):
        run_ep_host(model, {"x": x, "i": i})


@pytest.mark.parametrize("indices, fits", [([4, 1], True), ([0, 5], False), ([-1], False),
                                            ([2], True), ([1, 2, 3], True), ([3, 4, 5], False)])
def test_array_feature_extractor_constant_indices(rng, indices, fits):
    # constant indices are checked once when the kernel is made, against each run's input; an
    # ascending run of them is read as a slice
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    model = make_model([node], [("x", F, [3, 5])], [("y", F, [3, len(indices)])],
                       initializers=[numpy_helper.from_array(np.array(indices, np.int64), "i")],
                       domains=[(ML, 1)])
    x = rng.standard_normal((3, 5)).astype(np.float32)
    if fits:
        (y,) = assert_same(model, {"x": x})
        np.testing.assert_array_equal(y, x[:, indices])
    else:
        with pytest.raises(Exception, match="out of range for a last axis of 5"):
            run_ep_host(model, {"x": x})


@pytest.mark.parametrize("elem, x", [(F, np.arange(5, dtype=np.float32)),
                                     (S, np.array(list("abcde"), dtype=object))])
def test_array_feature_extractor_constant_run_of_one_row(elem, x):
    node = helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain=ML)
    model = make_model([node], [("x", elem, [5])], [("y", elem, [1, 2])],
                       initializers=[numpy_helper.from_array(np.array([2, 3], np.int64), "i")],
                       domains=[(ML, 1)])
    (y,) = assert_same(model, {"x": x})
    assert y.shape == (1, 2) and y.tolist() == [x[2:4].tolist()]


def test_binarizer():
    model = ml_model("Binarizer", [("x", F, [5])], [("y", F, [5])], threshold=1.0)
    assert_same(model, {"x": np.array([-1, 0, 1, 1.5, 3], np.float32)})
    # NaN is not greater than the threshold (onnxruntime refuses NaN input)
    assert run_ep_host(model, {"x": np.full(5, np.nan, np.float32)})[0].tolist() == [0.0] * 5
    model = ml_model("Binarizer", [("x", I64, [4])], [("y", I64, [4])], threshold=1.5)
    (y,) = run_ep_host(model, {"x": np.array([-1, 1, 2, 3], np.int64)})  # onnxruntime: no int64
    assert y.dtype == np.int64 and y.tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("elem, dtype", [(D, np.float64), (F, np.float32), (I64, np.int64)])
def test_scaler(rng, elem, dtype):
    model = ml_model("Scaler", [("x", elem, [4, 3])], [("y", F, [4, 3])],
                     offset=[0.5, -1.0, 2.0], scale=[2.0, 0.5, 3.0])
    x = (rng.standard_normal([4, 3]) * 10).astype(dtype)
    (y,) = assert_same(model, {"x": x})
    assert y.dtype == np.float32 and not np.shares_memory(y, x)


@pytest.mark.parametrize("elem, dtype, attrs", [
    (F, np.float32, {"imputed_value_floats": [9.0], "replaced_value_float": float("nan")}),
    (F, np.float32, {"imputed_value_floats": [1.0, 2.0, 3.0], "replaced_value_float": 0.0}),
    (I64, np.int64, {"imputed_value_int64s": [7, 8, 9], "replaced_value_int64": -1}),
])
def test_imputer(elem, dtype, attrs):
    model = ml_model("Imputer", [("x", elem, [2, 3])], [("y", elem, [2, 3])], **attrs)
    x = np.array([[0, -1, 5], [np.nan if dtype == np.float32 else 0, 0, -1]]).astype(dtype)
    assert_same(model, {"x": x})


def test_one_hot_encoder_strings_and_numbers():
    model = ml_model("OneHotEncoder", [("x", S, [2, 2])], [("y", F, [2, 2, 3])],
                     cats_strings=["a", "b", "c"])
    assert_same(model, {"x": np.array([["a", "c"], ["q", "b"]], dtype=object)})
    model = ml_model("OneHotEncoder", [("x", D, [3])], [("y", F, [3, 3])],
                     cats_int64s=[4, 1, 2])
    assert_same(model, {"x": np.array([1.7, 4.0, 3.0])})


def test_feature_vectorizer(rng):
    model = ml_model("FeatureVectorizer", [("a", F, [2, 3]), ("b", F, [2, 2])],
                     [("y", F, [2, 5])], inputdimensions=[3, 2])
    assert_same(model, {"a": rng.standard_normal([2, 3]).astype(np.float32),
                        "b": rng.standard_normal([2, 2]).astype(np.float32)})


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC"])
def test_linear_regressor(rng, transform):
    model = ml_model("LinearRegressor", [("x", F, [4, 3])], [("y", F, [4, 2])], targets=2,
                     coefficients=[0.5, -1.0, 2.0, 1.5, 0.0, -0.5], intercepts=[0.1, -0.2],
                     post_transform=transform)
    assert_same(model, {"x": rng.standard_normal([4, 3]).astype(np.float32)}, rtol=1e-5)


# -- TreeEnsembleRegressor --------------------------------------------------------------------


def regressor_model(x_type, version=3, aggregate="SUM", transform="NONE", as_tensor=False):
    # tree 0: n0 x0 <= 0.5 ? n1 : n2; n1 x1 < 1 ? L3 : L4; n2 LEAF.  tree 1: a single LEAF.
    # tree 2: n0 x1 > -1 ? L1 : L2 (NaN goes true)
    values = [0.5, 1.0, 0.0, 0.0, 0.0, 0.0, -1.0, 0.0, 0.0]
    weights = [1.0, 2.0, 3.0, 4.0, 0.5, -0.25, 7.0, 1.5]
    attrs = {
        "n_targets": 2, "aggregate_function": aggregate, "post_transform": transform,
        "nodes_treeids": [0, 0, 0, 0, 0, 1, 2, 2, 2],
        "nodes_nodeids": [0, 1, 2, 3, 4, 0, 0, 1, 2],
        "nodes_featureids": [0, 1, 0, 0, 0, 0, 1, 0, 0],
        "nodes_modes": ["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "LEAF", "LEAF", "BRANCH_GT",
                        "LEAF", "LEAF"],
        "nodes_truenodeids": [1, 3, 0, 0, 0, 0, 1, 0, 0],
        "nodes_falsenodeids": [2, 4, 0, 0, 0, 0, 2, 0, 0],
        "nodes_missing_value_tracks_true": [0, 1, 0, 0, 0, 0, 1, 0, 0],
        "target_treeids": [0, 0, 0, 0, 1, 2, 2, 2],
        "target_nodeids": [2, 3, 4, 4, 0, 1, 2, 2],
        "target_ids": [0, 1, 0, 1, 1, 0, 1, 0],
        "base_values": [0.25, -0.5],
    }
    if as_tensor:
        attrs["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(values), "v")
        attrs["target_weights_as_tensor"] = numpy_helper.from_array(np.array(weights), "w")
    else:
        attrs["nodes_values"], attrs["target_weights"] = values, weights
    return ml_model("TreeEnsembleRegressor", [("x", x_type, [None, 2])], [("y", F, None)],
                    version=version, opset=17, **attrs)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_tree_ensemble_regressor(aggregate, transform):
    model = regressor_model(F, aggregate=aggregate, transform=transform)
    assert_same(model, {"x": TREE_X.astype(np.float32)}, rtol=1e-5)


@pytest.mark.parametrize("version", [1, 3])
def test_tree_ensemble_regressor_versions_and_input_types(version):
    model = regressor_model(F, version=version)
    (expected,) = assert_same(model, {"x": TREE_X.astype(np.float32)}, rtol=1e-6)
    # onnxruntime has no int64 TreeEnsembleRegressor: ints compare as float32
    model = regressor_model(I64, version=version)
    (y,) = run_ep_host(model, {"x": np.array([[0, 0], [3, 5], [-3, -5]], np.int64)})
    (want,) = run_ep_host(regressor_model(F, version=version),
                          {"x": np.array([[0, 0], [3, 5], [-3, -5]], np.float32)})
    np.testing.assert_array_equal(y, want)


def test_tree_ensemble_regressor_double_thresholds_as_tensors():
    assert_same(regressor_model(D, as_tensor=True), {"x": TREE_X}, rtol=1e-6)


def test_tree_ensemble_regressor_declines_a_vote_on_a_branch():
    model = regressor_model(F)
    attr = next(a for a in model.graph.node[0].attribute if a.name == "target_nodeids")
    attr.ints[0] = 1
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
    assert "not a LEAF" in answer.reason
