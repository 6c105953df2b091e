"""LinearClassifier, Normalizer, SVMClassifier and SVMRegressor on the CPU EP against
onnxruntime on random inputs, including the graphs skl2onnx writes for LogisticRegression, SVC
and SVR; and the declines where the spec and onnxruntime leave the answer open."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_declines, run_ep_host, run_onnxruntime
from ep_host_cpu.coupling import CompiledPairwiseCoupling
from onnx import TensorProto, helper

from ep_host.errors import KernelError

ML = "ai.onnx.ml"
F = 5
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE,
         np.int64: TensorProto.INT64, np.int32: TensorProto.INT32}


def model(nodes, outputs, x_type=TensorProto.FLOAT, features=F):
    graph = helper.make_graph(
        nodes, "ml", [helper.make_tensor_value_info("x", x_type, [None, features])],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid(ML, 1)])
    m.ir_version = 10
    return m


def classifier_outputs(strings):
    return [("label", TensorProto.STRING if strings else TensorProto.INT64, [None]),
            ("scores", TensorProto.FLOAT, [None, None])]


def labels(k, strings, attr="classlabels_ints"):
    if strings:
        return {"classlabels_strings": [f"c{i}" for i in range(k)]}
    return {attr: [10 + 7 * i for i in range(k)]}


def assert_same(m, x, rtol=1e-5, atol=1e-5):
    ours, theirs = run_ep_host(m, {"x": x}), run_onnxruntime(m, {"x": x})
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(b, list):  # a sequence of maps (ZipMap)
            assert len(a) == len(b)
            for da, db in zip(a, b, strict=True):
                assert list(da) == list(db)
                np.testing.assert_allclose(list(da.values()), list(db.values()), rtol, atol)
            continue
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, (a.shape, b.shape)
        if b.dtype == object:
            assert a.tolist() == b.tolist()
        else:
            assert a.dtype == b.dtype, (a.dtype, b.dtype)
            np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return ours


def rows(rng, n=300, dtype=np.float32):
    x = rng.normal(size=(n, F)) * 2
    return (np.round(x) if np.dtype(dtype).kind == "i" else x).astype(dtype)


# -- LinearClassifier ---------------------------------------------------------------------------


def linear_classifier(rng, k, strings=False, transform="NONE", x_type=TensorProto.FLOAT):
    node = helper.make_node(
        "LinearClassifier", ["x"], ["label", "scores"], domain=ML,
        coefficients=rng.normal(size=k * F).tolist(), intercepts=rng.normal(size=k).tolist(),
        post_transform=transform, **labels(max(k, 2), strings))
    return model([node], classifier_outputs(strings), x_type)


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("strings", [False, True])
def test_linear_classifier_multiclass(rng, transform, strings):
    assert_same(linear_classifier(rng, 4, strings, transform), rows(rng))


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_linear_classifier_input_types(rng, dtype):
    assert_same(linear_classifier(rng, 3, x_type=TYPES[dtype]), rows(rng, dtype=dtype))


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("strings", [False, True])
def test_linear_classifier_one_score_column(rng, transform, strings):
    label, scores = assert_same(linear_classifier(rng, 1, strings, transform), rows(rng))
    assert len(set(np.asarray(label).tolist())) == 2  # both classes occur


def test_linear_classifier_declines_one_column_softmax(rng):
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML,
                            coefficients=[1.0] * F, intercepts=[0.0], classlabels_ints=[0, 1],
                            post_transform="SOFTMAX")
    assert_declines(model([node], classifier_outputs(False)), "attribute", "one score column")


def test_linear_classifier_declines_label_count_mismatch(rng):
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML,
                            coefficients=[1.0] * 3 * F, intercepts=[0.0] * 3,
                            classlabels_ints=[0, 1])
    assert_declines(model([node], classifier_outputs(False)), "attribute", "2 class labels")


def logistic_regression(rng, k, strings=False):
    """skl2onnx's LogisticRegression: LinearClassifier (two rows, negated, for two classes)
    with LOGISTIC, then Normalizer L1 over the scores, then ZipMap."""
    coef = rng.normal(size=(1 if k == 2 else k, F))
    intercept = rng.normal(size=coef.shape[0])
    if k == 2:
        coef, intercept = np.concatenate([-coef, coef]), np.concatenate([-intercept, intercept])
    nodes = [
        helper.make_node("LinearClassifier", ["x"], ["label", "raw"], domain=ML,
                         coefficients=coef.ravel().tolist(), intercepts=intercept.tolist(),
                         post_transform="LOGISTIC", multi_class=0, **labels(k, strings)),
        helper.make_node("Normalizer", ["raw"], ["probabilities"], domain=ML, norm="L1"),
    ]
    return model(nodes, [classifier_outputs(strings)[0],
                         ("probabilities", TensorProto.FLOAT, [None, k])])


@pytest.mark.parametrize("k", [2, 3, 5])
def test_logistic_regression_as_skl2onnx_writes_it(rng, k):
    label, probabilities = assert_same(logistic_regression(rng, k), rows(rng))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, rtol=1e-5)


# -- Normalizer ---------------------------------------------------------------------------------


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32])
def test_normalizer(rng, norm, dtype):
    node = helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm)
    x = rows(rng, 50, dtype)
    x[3] = 0  # a zero row stays zero
    x[4] = -np.abs(x[4]) - 1  # MAX divides by a negative maximum
    out = assert_same(model([node], [("y", TensorProto.FLOAT, [None, F])], TYPES[dtype]), x)[0]
    assert not out[3].any()


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_one_row_equals_that_row_in_a_batch(rng, transform):
    """A single short row takes a Python-float path (LinearClassifier's transform, Normalizer);
    it must give what the numpy path gives for the same row among others, and onnxruntime's
    answer."""
    m = linear_classifier(rng, 4, transform=transform)
    m.graph.node.append(helper.make_node("Normalizer", ["scores"], ["normed"], domain=ML,
                                         norm="L1"))
    m.graph.output.append(helper.make_tensor_value_info("normed", TensorProto.FLOAT,
                                                        [None, None]))
    batch = rows(rng, 40)
    batch[5] = [0, 1e-30, -3, 2.5, 0]
    together = run_ep_host(m, {"x": batch})
    for i in range(len(batch)):
        one = assert_same(m, batch[i:i + 1])
        for a, b in zip(one, together, strict=True):
            # exact but for the exponential: numpy may take its own SIMD exp (1 ulp)
            np.testing.assert_allclose(a[0], b[i], rtol=1e-6 if transform != "NONE" else 0)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_one_row_is_the_batch_row_bit_for_bit(rng, norm):
    node = helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm)
    m = model([node], [("y", TensorProto.FLOAT, [None, F])])
    batch = (rows(rng, 60) * 10.0 ** rng.integers(-20, 20, size=(60, 1))).astype(np.float32)
    batch[7] = 0
    batch[8, 2] = np.inf  # infinities and NaN take the numpy path
    batch[9, 1] = np.nan
    together = run_ep_host(m, {"x": batch})[0]
    for i in range(len(batch)):
        np.testing.assert_array_equal(run_ep_host(m, {"x": batch[i:i + 1]})[0][0], together[i])


def test_normalizer_declines_unknown_norm():
    node = helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="L3")
    assert_declines(model([node], [("y", TensorProto.FLOAT, [None, F])]), "attribute", "L3")


# -- SVMClassifier ------------------------------------------------------------------------------


def svc(rng, k, kernel="RBF", probabilities=False, strings=False, transform="NONE",
        x_type=TensorProto.FLOAT, per_class=None):
    """An SVC as skl2onnx writes it: libsvm's dual coefficients [k - 1, vectors], one rho and
    (with probability=True) one prob_a/prob_b per class pair."""
    per_class = per_class or [int(n) for n in rng.integers(1, 5, size=k)]
    vectors = sum(per_class)
    pairs = k * (k - 1) // 2
    extra = {}
    if probabilities:
        extra = {"prob_a": (-rng.random(pairs) * 3 - 0.5).tolist(),
                 "prob_b": (rng.normal(size=pairs) * 0.3).tolist()}
    node = helper.make_node(
        "SVMClassifier", ["x"], ["label", "scores"], domain=ML, kernel_type=kernel,
        kernel_params=[0.2, 0.5, 3.0], vectors_per_class=per_class,
        support_vectors=(rng.normal(size=vectors * F)).tolist(),
        coefficients=rng.normal(size=(k - 1) * vectors).tolist(),
        rho=(rng.normal(size=pairs) * 0.3).tolist(), post_transform=transform,
        **labels(k, strings), **extra)
    return model([node], classifier_outputs(strings), x_type)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("k", [2, 3, 4])
def test_svc_votes_and_decision_values(rng, kernel, k):
    label, _ = assert_same(svc(rng, k, kernel), rows(rng))
    assert len(set(label.tolist())) > 1  # the test sees more than one winner


@pytest.mark.parametrize("kernel", ["LINEAR", "RBF", "POLY"])
@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("compiled", [True, False])
def test_svc_probabilities(rng, monkeypatch, kernel, k, compiled):
    """Platt's scaling and the coupling compiled (the CPU EP's namespace), and numpy's passes."""
    if not compiled:  # the namespace is made once per process: its loop made to say no
        monkeypatch.setattr(CompiledPairwiseCoupling, "ready", lambda self: False)
    _, scores = assert_same(svc(rng, k, kernel, probabilities=True), rows(rng))
    np.testing.assert_allclose(scores.sum(axis=1), 1, rtol=1e-4)


@pytest.mark.parametrize("transform", ["LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("probabilities", [False, True])
def test_svc_post_transforms(rng, transform, probabilities):
    assert_same(svc(rng, 3, probabilities=probabilities, transform=transform), rows(rng))


def test_svc_binary_logistic(rng):
    assert_same(svc(rng, 2, transform="LOGISTIC"), rows(rng))


@pytest.mark.parametrize("strings", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_svc_labels_and_input_types(rng, strings, dtype):
    assert_same(svc(rng, 3, "RBF", True, strings, x_type=TYPES[dtype]), rows(rng, dtype=dtype))


def test_svc_liblinear_mode(rng):
    """No support vectors: one linear row per class, rho[0] added to each."""
    node = helper.make_node("SVMClassifier", ["x"], ["label", "scores"], domain=ML,
                            coefficients=rng.normal(size=4 * F).tolist(), rho=[0.3],
                            kernel_params=[0.0, 0.0, 0.0], classlabels_ints=[1, 2, 3, 4])
    assert_same(model([node], classifier_outputs(False)), rows(rng))


def test_svc_declines_binary_softmax_without_probabilities(rng):
    assert_declines(svc(rng, 2, transform="SOFTMAX"), "attribute", "NONE or LOGISTIC")


def test_svc_declines_coefficients_that_do_not_fit(rng):
    node = helper.make_node("SVMClassifier", ["x"], ["label", "scores"], domain=ML,
                            vectors_per_class=[2, 2], support_vectors=[0.0] * 4 * F,
                            coefficients=[1.0] * 3, rho=[0.0], classlabels_ints=[0, 1])
    assert_declines(model([node], classifier_outputs(False)), "attribute", "coefficients")


# -- SVMRegressor -------------------------------------------------------------------------------


def svr(rng, kernel="RBF", n_supports=6, one_class=0, x_type=TensorProto.FLOAT,
        transform="NONE"):
    vectors = {"support_vectors": rng.normal(size=n_supports * F).tolist()} if n_supports else {}
    node = helper.make_node(
        "SVMRegressor", ["x"], ["y"], domain=ML, kernel_type=kernel,
        kernel_params=[0.1, 0.3, 2.0], n_supports=n_supports, **vectors,
        coefficients=rng.normal(size=n_supports or F).tolist(),
        rho=[0.0 if one_class else float(rng.normal())], one_class=one_class,
        post_transform=transform)
    return model([node], [("y", TensorProto.FLOAT, [None, 1])], x_type)


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svr(rng, kernel, one_class):
    y = assert_same(svr(rng, kernel, one_class=one_class), rows(rng))[0]
    assert y.shape == (300, 1) and len(np.unique(y)) > 1


@pytest.mark.parametrize("n_supports", [0, 6])
def test_svr_linear_mode_and_support_vectors(rng, n_supports):
    assert_same(svr(rng, n_supports=n_supports), rows(rng))


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_svr_other_input_types_read_as_float32(dtype):
    """onnxruntime takes float32 only; the others give what it gives for that input as float32."""
    x = rows(np.random.default_rng(1), dtype=dtype)
    ours = run_ep_host(svr(np.random.default_rng(2), x_type=TYPES[dtype]), {"x": x})[0]
    theirs = run_onnxruntime(svr(np.random.default_rng(2)), {"x": x.astype(np.float32)})[0]
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def test_svr_declines_post_transform_onnxruntime_ignores(rng):
    assert_declines(svr(rng, transform="LOGISTIC"), "attribute", "post_transform")


# -- ZipMap, DictVectorizer, CastMap: maps on the host ------------------------------------------


def zip_map_output(key_type):
    return helper.make_value_info("zipped", helper.make_sequence_type_proto(
        helper.make_map_type_proto(key_type, helper.make_tensor_type_proto(TensorProto.FLOAT,
                                                                           []))))


@pytest.mark.parametrize("strings", [False, True])
def test_logistic_regression_with_zip_map_end_to_end(rng, strings):
    """skl2onnx's whole LogisticRegression graph: label, then probabilities as dicts."""
    m = logistic_regression(rng, 3, strings)
    key = ({"classlabels_strings": ["c0", "c1", "c2"]} if strings
           else {"classlabels_int64s": [10, 17, 24]})
    m.graph.node.append(helper.make_node("ZipMap", ["probabilities"], ["zipped"], domain=ML,
                                         **key))
    m.graph.output.append(zip_map_output(TensorProto.STRING if strings else TensorProto.INT64))
    label, probabilities, zipped = assert_same(m, rows(rng, 20))
    assert len(zipped) == 20 and list(zipped[0].values()) == pytest.approx(probabilities[0])
    # each run hands out a list and maps of its own: changing one run's leaves the next alone
    from ep_host import InferenceSession

    session = InferenceSession(m.SerializeToString(), providers=["cpu"])
    x = rows(rng, 3)
    first = session.run(None, {"x": x})[2]
    expected = [dict(d) for d in first]
    first[0].clear()
    first.append("mine")
    second = session.run(None, {"x": x})[2]
    assert second is not first and second == expected


def test_zip_map_refuses_scores_that_do_not_fit_the_labels(rng):
    node = helper.make_node("ZipMap", ["x"], ["zipped"], domain=ML, classlabels_int64s=[1, 2])
    m = model([node], [], features=3)
    m.graph.output.append(zip_map_output(TensorProto.INT64))
    with pytest.raises(KernelError, match=r"ZipMap: takes \[N, 2\] scores"):
        run_ep_host(m, {"x": rows(rng, 4)[:, :3]})


def map_model(node, key_type, value_type, out_type):
    graph = helper.make_graph(
        [node], "maps", [helper.make_value_info("x", helper.make_map_type_proto(
            key_type, helper.make_tensor_type_proto(value_type, [])))],
        [helper.make_tensor_value_info("y", out_type, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid(ML, 1)])
    m.ir_version = 10
    return m


def assert_same_map(m, feed):
    ours, theirs = run_ep_host(m, {"x": feed})[0], run_onnxruntime(m, {"x": feed})[0]
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype, (ours, theirs)
    assert ours.tolist() == theirs.tolist()
    return ours


@pytest.mark.parametrize("vocabulary,key_type,feed", [
    ({"string_vocabulary": ["a", "b", "c", "d"]}, TensorProto.STRING,
     {"a": 1.5, "d": -2.25, "zz": 3.0}),
    ({"int64_vocabulary": [5, 1, 9]}, TensorProto.INT64, {1: 2.5, 9: 0.5, 4: 1.0}),
])
def test_dict_vectorizer(vocabulary, key_type, feed):
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, **vocabulary)
    out = assert_same_map(map_model(node, key_type, TensorProto.FLOAT, TensorProto.FLOAT), feed)
    assert out.shape == (1, len(next(iter(vocabulary.values()))))


def test_dict_vectorizer_empty_map_is_all_zeros():
    """onnxruntime refuses an empty map; the spec's answer is a row of zeros."""
    node = helper.make_node("DictVectorizer", ["x"], ["y"], domain=ML, int64_vocabulary=[5, 1])
    m = map_model(node, TensorProto.INT64, TensorProto.DOUBLE, TensorProto.DOUBLE)
    out = run_ep_host(m, {"x": {}})[0]
    assert out.dtype == np.float64 and out.tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize("cast,out_type", [("TO_FLOAT", TensorProto.FLOAT),
                                           ("TO_INT64", TensorProto.INT64),
                                           ("TO_STRING", TensorProto.STRING)])
@pytest.mark.parametrize("form", ["DENSE", "SPARSE"])
def test_cast_map(cast, out_type, form):
    if cast == "TO_STRING" and form == "SPARSE":
        node = helper.make_node("CastMap", ["x"], ["y"], domain=ML, cast_to=cast,
                                map_form=form, max_map=6)
        assert_declines(map_model(node, TensorProto.INT64, TensorProto.FLOAT, out_type),
                        "attribute", "SPARSE")
        return
    node = helper.make_node("CastMap", ["x"], ["y"], domain=ML, cast_to=cast, map_form=form,
                            max_map=6)
    m = map_model(node, TensorProto.INT64, TensorProto.FLOAT, out_type)
    assert_same_map(m, {3: 1.5, 0: -2.0, 1: 7.9, 5: -0.6})


def test_normalizer_nan_makes_its_row_nan():
    node = helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm="MAX")
    x = np.array([[np.nan, 1, 2, 3, 4], [1, 2, 3, 4, 5]], np.float32)
    out = run_ep_host(model([node], [("y", TensorProto.FLOAT, [None, F])]), {"x": x})[0]
    assert np.isnan(out[0]).all() and out[1].tolist() == pytest.approx(x[1] / 5)
