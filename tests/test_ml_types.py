"""Output types of ai.onnx.ml nodes that onnx's inference leaves untyped, worked out from their
input and attributes (``ep_host.ml_types``): each rule's type and shape are those the CPU EP's
kernel and onnxruntime give, a rank-1 input is left alone, and a standard op reading a typed
output is typed too."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from hostkit import make_model
from onnx import TensorProto, helper

from ep_host import InferenceSession
from ep_host.loading import load_model

F = TensorProto.FLOAT
ML = ("ai.onnx.ml", 3)


def ml_node(op, outputs, **attrs):
    return helper.make_node(op, ["x"], outputs, domain="ai.onnx.ml", **attrs)


TREE = {"nodes_treeids": [0, 0, 0], "nodes_nodeids": [0, 1, 2], "nodes_featureids": [1, 0, 0],
        "nodes_values": [0.5, 0.0, 0.0], "nodes_modes": ["BRANCH_LEQ", "LEAF", "LEAF"],
        "nodes_truenodeids": [1, 0, 0], "nodes_falsenodeids": [2, 0, 0]}

# (node, the outputs' (element type, shape after N))
CASES = {
    "Scaler": (ml_node("Scaler", ["y"], offset=[0.5], scale=[2.0]), [(F, (4,))]),
    "Normalizer": (ml_node("Normalizer", ["y"], norm="L2"), [(F, (4,))]),
    "Binarizer": (ml_node("Binarizer", ["y"], threshold=0.1), [(F, (4,))]),
    "LinearRegressor": (ml_node("LinearRegressor", ["y"], coefficients=[0.1] * 8, targets=2,
                                intercepts=[1.0, 2.0]), [(F, (2,))]),
    "LinearClassifier 3": (ml_node("LinearClassifier", ["label", "scores"],
                                   coefficients=[0.1, -0.2, 0.3, 0.4] * 3,
                                   intercepts=[0.0, 1.0, -1.0], classlabels_ints=[7, 8, 9],
                                   post_transform="SOFTMAX"),
                           [(TensorProto.INT64, ()), (F, (3,))]),
    "LinearClassifier 1 column": (ml_node("LinearClassifier", ["label", "scores"],
                                          coefficients=[0.1, -0.2, 0.3, 0.4], intercepts=[0.5],
                                          classlabels_strings=["no", "yes"],
                                          post_transform="LOGISTIC"),
                                  [(TensorProto.STRING, ()), (F, (2,))]),
    "TreeEnsembleRegressor": (ml_node("TreeEnsembleRegressor", ["y"], n_targets=1,
                                      target_treeids=[0, 0], target_nodeids=[1, 2],
                                      target_ids=[0, 0], target_weights=[1.0, -1.0], **TREE),
                              [(F, (1,))]),
    "TreeEnsembleClassifier": (ml_node("TreeEnsembleClassifier", ["label", "probs"],
                                       classlabels_int64s=[0, 1, 2],
                                       class_treeids=[0, 0, 0, 0], class_nodeids=[1, 1, 2, 2],
                                       class_ids=[0, 1, 1, 2],
                                       class_weights=[0.6, 0.4, 0.3, 0.7], **TREE),
                               [(TensorProto.INT64, ()), (F, (3,))]),
}


@pytest.mark.parametrize("case", CASES)
def test_each_rule_types_its_outputs_as_the_kernel_and_onnxruntime_give_them(case):
    node, want = CASES[case]
    model = make_model([node], [("x", F, ["N", 4])],
                       [(name, elem, None) for name, (elem, _) in zip(node.output, want,
                                                                     strict=True)],
                       domains=[ML])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    (view,) = session.model.graph.nodes
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    theirs = onnxruntime.InferenceSession(model.SerializeToString(), options,
                                          providers=["CPUExecutionProvider"]).run(None, {"x": x})
    ours = session.run(None, {"x": x})
    for out, (elem, after), mine, other in zip(view.outputs, want, ours, theirs, strict=True):
        assert out.dtype.code == elem
        assert out.shape == ("N", *after)
        assert np.asarray(mine).shape == np.asarray(other).shape == (5, *after)


def test_a_rank_one_input_is_left_untyped():
    node = ml_node("Scaler", ["y"], offset=[0.5], scale=[2.0])
    model = make_model([node], [("x", F, [4])], [("y", F, None)], domains=[ML])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert session.model.graph.nodes[0].outputs[0].shape is None
    assert session.run(None, {"x": np.ones(4, np.float32)})[0].shape == (4,)


def test_a_standard_op_reading_a_typed_output_is_typed_too():
    nodes = [ml_node("Scaler", ["s"], offset=[0.5], scale=[2.0]),
             helper.make_node("Relu", ["s"], ["y"])]
    model = make_model(nodes, [("x", F, [2, 4])], [("y", F, None)], domains=[ML])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    relu = session.model.graph.nodes[1]
    assert relu.outputs[0].shape == (2, 4) and relu.outputs[0].dtype.code == F
    x = np.arange(8, dtype=np.float32).reshape(2, 4) - 4
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.maximum((x - 0.5) * 2, 0))


def test_shape_inference_reads_tree_ensembles_without_their_tables():
    """The copy that onnx's shape inference reads leaves out the per-node and per-leaf tables
    (it serializes the model): the classifier's labels and the regressor's n_targets stay, the
    model's own nodes keep everything, and a model without such tables is not copied."""
    from ep_host.ml_types import without_tree_tables

    regressor, classifier = CASES["TreeEnsembleRegressor"][0], CASES["TreeEnsembleClassifier"][0]
    scaler = CASES["Scaler"][0]
    before = [n.SerializeToString() for n in (regressor, classifier, scaler)]
    light = without_tree_tables([regressor, classifier, scaler])
    assert [n.SerializeToString() for n in (regressor, classifier, scaler)] == before
    assert [a.name for a in light[0].attribute] == ["n_targets"]
    assert [a.name for a in light[1].attribute] == ["classlabels_int64s"]
    assert light[2] is scaler
    assert (light[1].input, light[1].output) == (classifier.input, classifier.output)
    assert without_tree_tables([scaler]) is None


def test_a_standard_op_reading_a_tree_ensembles_output_is_typed_and_right():
    node = CASES["TreeEnsembleRegressor"][0]
    model = make_model([node, helper.make_node("Neg", ["y"], ["z"])], [("x", F, [3, 4])],
                       [("z", F, None)], domains=[ML])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    neg = session.model.graph.nodes[1]
    assert neg.outputs[0].shape == (3, 1) and neg.outputs[0].dtype.code == F
    x = np.array([[0.0, 0.2, 0, 0], [0.0, 0.9, 0, 0], [0.0, 0.5, 0, 0]], np.float32)
    # x[:, 1] <= 0.5 reaches leaf 1 (weight 1), else leaf 2 (weight -1)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], [[-1.0], [1.0], [-1.0]])


def _ml_case_models():
    from onnx.backend.test.case.node import collect_testcases

    for case in collect_testcases():
        if any(n.domain == "ai.onnx.ml" for n in case.model.graph.node):
            yield case.name, case.model
    # each rule's node with a batch of 2, a named batch and an unnamed one (scikit-learn's
    # None), its outputs declared without a shape: these skip onnx's inference. At
    # ai.onnx.ml 1 onnx infers no shape for the tree ensembles, at 3 it does.
    for batch in (2, "N", None):
        for name, (node, want) in CASES.items():
            outputs = [(o, elem, None) for o, (elem, _) in zip(node.output, want, strict=True)]
            for version in (1, 3):
                yield f"{name} {batch} {version}", make_model(
                    [node], [("x", F, [batch, 4])], outputs, domains=[("ai.onnx.ml", version)])
    # a logistic regression's export: scores typed by the rules, read by a Normalizer; its
    # outputs declared as the rules type them, or with a dim left open (onnx fills it in)
    classifier, _ = CASES["LinearClassifier 3"]
    normalizer = helper.make_node("Normalizer", ["scores"], ["p"], domain="ai.onnx.ml", norm="L1")
    for batch, classes in ((2, 3), ("N", 3), (None, 3), ("N", None), ("N", "C")):
        yield f"pipeline {batch} {classes}", make_model(
            [classifier, normalizer], [("x", F, [batch, 4])],
            [("label", TensorProto.INT64, [batch]), ("p", F, [batch, classes])], domains=[ML])


def counted(calls):
    import onnx

    infer = onnx.shape_inference.infer_shapes

    def call(*args, **kwargs):
        calls.append(args)
        return infer(*args, **kwargs)
    return call


def test_types_found_without_onnx_inference_are_those_inference_finds(monkeypatch):
    """Where every value is declared or typed by the rules, loading skips onnx's inference;
    the types are then those of loading with it (the skip made impossible), for every model of
    onnx's ai.onnx.ml node cases and each rule here, with static and symbolic batches."""
    import onnx

    import ep_host.loading as loading

    calls = []
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted(calls))

    def load_all():
        types, inferred = {}, set()
        for name, model in _ml_case_models():
            before = len(calls)
            types[name] = load_model(model).value_types
            if len(calls) > before:
                inferred.add(name)
        return types, inferred

    skipped, ran = load_all()
    assert len(skipped) > 6 * len(CASES)
    # each rule's model, whatever its batch, and the pipeline declared as the rules type it
    # skip inference; where a declared dim is left open, inference runs
    assert not ran & {f"{case} {batch} {version}" for case in CASES
                      for batch in (2, "N", None) for version in (1, 3)}
    assert not ran & {"pipeline 2 3", "pipeline N 3", "pipeline None 3"}
    assert {"pipeline N None", "pipeline N C"} <= ran
    monkeypatch.setattr(loading, "made_static", lambda graph, types: False)
    monkeypatch.setattr(loading, "types_without_inference", lambda graph, types: None)
    inferred, ran = load_all()
    assert len(ran) == len(inferred)
    assert skipped == {name: open_dims(types) for name, types in inferred.items()}


def open_dims(types):
    """``types`` with each dim name onnx's inference makes up for an open dim (``unk__0``) left
    open, as loading counts it (``_has_unknown_dim``) and as the rules leave it."""
    return {name: (kind, dt, shape if shape is None else tuple(
        None if isinstance(d, str) and d.startswith("unk__") else d for d in shape))
        for name, (kind, dt, shape) in types.items()}


def test_a_pipeline_of_ml_nodes_loads_without_onnx_inference(monkeypatch):
    import onnx

    def refuse(*args, **kwargs):
        raise RuntimeError("inference ran")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", refuse)
    nodes = [ml_node("Scaler", ["s"], offset=[0.5], scale=[2.0]),
             helper.make_node("LinearRegressor", ["s"], ["y"], domain="ai.onnx.ml",
                              coefficients=[0.1] * 4, intercepts=[1.0])]
    loaded = load_model(make_model(nodes, [("x", F, [3, 4])], [("y", F, [3, 1])], domains=[ML]))
    assert loaded.warnings == []
    assert loaded.value_types["s"][2] == (3, 4) and loaded.value_types["y"][2] == (3, 1)


@pytest.mark.parametrize("case", ["LinearClassifier 3", "TreeEnsembleClassifier"])
@pytest.mark.parametrize("version", [1, 3])
def test_a_classifier_whose_label_a_standard_op_reads_is_inferred_once(case, version,
                                                                       monkeypatch):
    """The classifier reads the graph input, so its outputs are typed before onnx's inference,
    which then types the Cast reading its label in the same pass (it ran twice)."""
    import onnx

    calls = []
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", counted(calls))
    node, want = CASES[case]
    nodes = [node, helper.make_node("Cast", [node.output[0]], ["wide"], to=TensorProto.FLOAT),
             helper.make_node("Neg", [node.output[1]], ["negated"])]
    model = make_model(nodes, [("x", F, ["N", 4])], [("wide", F, None), ("negated", F, None)],
                       domains=[("ai.onnx.ml", version)])
    types = load_model(model).value_types
    assert len(calls) == 1
    assert types["wide"][2] == ("N",) and types["negated"][2] == ("N", want[1][1][0])
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    got = InferenceSession(model.SerializeToString(), providers=["cpu"]).run(None, {"x": x})
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, o in zip(got, ort, strict=True):
        np.testing.assert_allclose(g, o, rtol=1e-6, atol=1e-6)
