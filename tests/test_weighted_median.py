"""weighted_median_fusion: skl2onnx's AdaBoostRegressor weighted median, ten nodes, becomes one
ai.ep_host::WeightedMedian that picks the same score; anything else is left as written."""

import numpy as np
import onnxruntime
import pytest
from hostkit import make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)
ML = "ai.onnx.ml"


def median_model(k=5, *, opset=17, sorted_=1, top=None, less_inputs=("cdf", "comp"),
                 select_last=0, graph_output=None, weights_input=False, cast_to=F, exclusive=0,
                 equal_weights=False):
    """scores [N, k] -> the weighted median as skl2onnx writes it -> [N, 1]: the score whose
    weight, summed over the scores in ascending order (ties by lower column), first reaches half
    of all the weights. ``top``: TopK's K (default k); ``graph_output``: an inner value also
    written out; ``weights_input``: the weights a graph input rather than a constant;
    ``equal_weights``: all 1, so that a running sum meets half the whole exactly."""
    weights = (np.ones(k, np.float32) if equal_weights
               else RNG.uniform(0.2, 2.0, k).astype(np.float32))
    nodes = [
        helper.make_node("Mul", ["scores", "negate"], ["negated"], name="negate"),
        helper.make_node("TopK", ["negated", "k_value"], ["sorted_values", "order"], name="topk",
                         sorted=sorted_),
        helper.make_node("ArrayFeatureExtractor", ["weights", "order"], ["picked"],
                         name="weights_at", domain=ML),
        helper.make_node("Reshape", ["picked", "rows_shape"], ["ordered"], name="reshape"),
        helper.make_node("CumSum", ["ordered", "axis"], ["cdf"], name="cumsum",
                         exclusive=exclusive),
        helper.make_node("ArrayFeatureExtractor", ["cdf", "last"], ["total"], name="total",
                         domain=ML),
        helper.make_node("Mul", ["total", "half"], ["comp"], name="half_total"),
        helper.make_node("Less", list(less_inputs), ["below"], name="less"),
        helper.make_node("Cast", ["below"], ["below_f"], name="cast", to=cast_to),
        helper.make_node("ArgMin", ["below_f"], ["at"], name="argmin", axis=1,
                         **({"select_last_index": 1} if select_last else {})),
        helper.make_node("GatherElements", ["order", "at"], ["estimator"], name="which", axis=1),
        helper.make_node("GatherElements", ["scores", "estimator"], ["y"], name="pick", axis=1),
    ]
    inits = [numpy_helper.from_array(np.float32(-1.0), "negate"),
             numpy_helper.from_array(np.array([k if top is None else top], np.int64), "k_value"),
             numpy_helper.from_array(np.array([-1, k], np.int64), "rows_shape"),
             numpy_helper.from_array(np.int64(1), "axis"),
             numpy_helper.from_array(np.int64(k - 1), "last"),
             numpy_helper.from_array(np.float32(0.5), "half")]
    inputs = [("scores", F, [None, k])]
    if weights_input:
        inputs.append(("weights", F, [k]))
    else:
        inits.append(numpy_helper.from_array(weights, "weights"))
    outputs = [("y", F, [None, 1])]
    if graph_output:
        outputs.append((graph_output, F, None))
    model = make_model(nodes, inputs, outputs, initializers=inits, domains=[(ML, 1)],
                       opset=opset)
    return model, weights


def written_median(scores, weights):
    """The weighted median the model describes, one row at a time in float32."""
    out = np.empty((len(scores), 1), np.float32)
    for r, row in enumerate(scores):
        order = sorted(range(len(row)), key=lambda j: (row[j], j))
        sums = np.cumsum(weights[order], dtype=np.float32)
        at = next((i for i, s in enumerate(sums) if not s < sums[-1] * np.float32(0.5)), 0)
        out[r, 0] = row[order[at]]
    return out


def sessions(model):
    data = model.SerializeToString()
    return (InferenceSession(data, providers=["cpu"]),
            InferenceSession(data, providers=["cpu"], optimizations=()))


@pytest.mark.parametrize("opset", [11, 17])
@pytest.mark.parametrize("k", [1, 4, 10])
@pytest.mark.parametrize(("cast_to", "equal_weights"), [(F, False), (F, True),
                                                      (TensorProto.INT8, False)])
def test_the_weighted_median_becomes_one_node_that_picks_the_same_score(opset, k, cast_to,
                                                                         equal_weights):
    model, weights = median_model(k, opset=opset, cast_to=cast_to, equal_weights=equal_weights)
    fused, written = sessions(model)
    assert fused._model.optimizations.get("weighted_median_fusion") == 1
    ops = [(n.domain, n.op_type) for n in fused._model.graph.nodes]
    assert ops == [("ai.onnx", "Mul"), ("ai.ep_host", "WeightedMedian")]
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    # few distinct values: many ties, which TopK orders by lower column
    for scores in (RNG.integers(0, 3, (40, k)).astype(np.float32),
                   RNG.standard_normal((7, k)).astype(np.float32)):
        got = fused.run(None, {"scores": scores})[0]
        np.testing.assert_array_equal(got, written.run(None, {"scores": scores})[0])
        np.testing.assert_array_equal(got, ort.run(None, {"scores": scores})[0])
        np.testing.assert_array_equal(got, written_median(scores, weights))


def test_no_rows_and_rows_holding_nan_pick_what_the_written_nodes_pick():
    model, _ = median_model(6)
    fused, written = sessions(model)
    scores = RNG.standard_normal((5, 6)).astype(np.float32)
    scores[1, 2] = scores[3, :] = np.nan
    scores[4, 0] = np.inf
    for feed in (scores, scores[:0]):
        got = fused.run(None, {"scores": feed})[0]
        np.testing.assert_array_equal(got, written.run(None, {"scores": feed})[0])
        assert got.shape == (len(feed), 1)


@pytest.mark.parametrize("change", [
    {"sorted_": 0}, {"top": 4}, {"less_inputs": ("comp", "cdf")}, {"select_last": 1},
    {"graph_output": "cdf"}, {"graph_output": "order"}, {"graph_output": "sorted_values"},
    {"weights_input": True}, {"exclusive": 1}],
    ids=["unsorted", "fewer_than_all", "less_swapped", "last_index", "sums_read",
         "order_read", "values_read", "weights_not_constant", "exclusive_sums"])
def test_anything_else_is_left_as_written(change):
    model, _ = median_model(5, **change)
    fused, _ = sessions(model)
    assert "weighted_median_fusion" not in fused._model.optimizations
    assert all(n.domain != "ai.ep_host" for n in fused._model.graph.nodes)


def test_a_provider_that_cannot_run_it_runs_the_nodes_it_replaced():
    model, weights = median_model(5)
    session = InferenceSession(model.SerializeToString(), providers=["onnxruntime"])
    table = session.placement.table
    (fused,) = table.expanded
    assert not table.answers[fused]["onnxruntime"].is_supported
    assert "ai.ep_host::WeightedMedian" in table.answers[fused]["onnxruntime"].reason
    assert "TopK" in [n.op_type for n in table.nodes]
    scores = RNG.standard_normal((9, 5)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"scores": scores})[0],
                                  written_median(scores, weights))
