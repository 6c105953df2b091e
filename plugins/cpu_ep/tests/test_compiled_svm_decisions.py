"""An SVM's few-row decisions compiled by numba against numpy's passes (the same labels, scores
within a float32 rounding, every kernel type, with and without probabilities), one row as that
row among others bit for bit, and both ways against onnxruntime; which batches it is asked for,
and numpy's passes under EP_HOST_NUMBA=0."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_labels_equal_scores_close, run_ep_host
from ep_host_cpu.svm_decisions import CompiledSvmDecisions
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper
from test_ml_linear_svm import assert_same, rows, svc, svr

from ep_host.kernels.svm import ClassifierTables

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")


@pytest.fixture
def compiled_off(monkeypatch):
    """numpy's passes for every batch."""
    monkeypatch.setattr(CompiledSvmDecisions, "MAX_WORK", 0)


def tables_of(model):
    """The ClassifierTables of the model's one node."""
    return ClassifierTables({a.name: attribute_value(a) for a in model.graph.node[0].attribute})


def attribute_value(attribute):
    value = helper.get_attribute_value(attribute)
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value.decode() if isinstance(value, bytes) else value


class Namespace:
    """A provider's namespace with compiled decisions made afresh."""

    def __init__(self):
        self.compiled_svm_decisions = CompiledSvmDecisions()


def both_ways(monkeypatch, model, x):
    """The outputs of the compiled decisions, then of numpy's passes."""
    monkeypatch.setattr(CompiledSvmDecisions, "MAX_WORK", 10 ** 9)
    compiled = run_ep_host(model, {"x": x})
    monkeypatch.setattr(CompiledSvmDecisions, "MAX_WORK", 0)
    return compiled, run_ep_host(model, {"x": x})


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("k,probabilities", [(2, False), (3, False), (4, False), (3, True)])
def test_classifier_decisions_as_numpy(rng, monkeypatch, kernel, k, probabilities):
    assert numpy_xp.compiled_svm_decisions.ready()
    model = svc(rng, k, kernel, probabilities, strings=k == 4)
    for n in (1, 3, 40):
        compiled, passes = both_ways(monkeypatch, model, rows(rng, n))
        assert_labels_equal_scores_close(compiled, passes, f"{kernel}, {k} classes, {n} rows")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("one_class", [0, 1])
def test_regressor_decisions_as_numpy(rng, monkeypatch, kernel, one_class):
    model = svr(rng, kernel, one_class=one_class)
    for n in (1, 40):
        compiled, passes = both_ways(monkeypatch, model, rows(rng, n))
        assert_labels_equal_scores_close(compiled, passes,
                                         f"{kernel}, one_class={one_class}, {n} rows")


def test_one_row_is_the_batch_row_bit_for_bit(rng):
    model = svc(rng, 3, "RBF", per_class=[30, 20, 25])
    batch = rows(rng, 40)
    label, scores = run_ep_host(model, {"x": batch})
    for i in range(len(batch)):
        one_label, one_scores = run_ep_host(model, {"x": batch[i:i + 1]})
        assert one_label.tolist() == [label[i]]
        np.testing.assert_array_equal(one_scores[0], scores[i])


def test_ties_go_to_the_first_class(rng):
    """Three classes, each winning one pair: one vote each, the first class wins."""
    tables = ClassifierTables({"classlabels_ints": [5, 6, 7], "vectors_per_class": [1, 1, 1],
                               "support_vectors": [0.0] * 3, "coefficients": [1.0] * 6,
                               "rho": [0.0] * 3, "kernel_type": "LINEAR"})
    decide = numpy_xp.compiled_svm_decisions
    x = np.zeros((2, 1), np.float32)
    # decisions (0, 1), (0, 2), (1, 2) of the biases alone: 0, 2 and 1 win one each
    _, scores, winner = tables.support.decisions(
        decide, x, np.zeros((3, 3)), np.array([1.0, -1.0, 1.0]), tables.pair_classes,
        tables.label_codes)
    assert scores.tolist() == [[1, -1, 1]] * 2 and winner.tolist() == [5, 5]
    _, _, winner = tables.support.decisions(
        decide, x, np.zeros((3, 3)), np.array([-1.0, -1.0, 1.0]), tables.pair_classes,
        np.arange(3))
    assert winner.tolist() == [1, 1]  # 1 wins two pairs, 2 one


@pytest.mark.parametrize("numpy_passes", [False, True])
def test_both_ways_match_onnxruntime(rng, request, numpy_passes):
    if numpy_passes:
        request.getfixturevalue("compiled_off")
    for kernel in KERNELS:
        for n in (1, 7):
            assert_same(svc(rng, 3, kernel, probabilities=kernel == "RBF"), rows(rng, n))
            assert_same(svr(rng, kernel), rows(rng, n))
    assert_same(svc(rng, 3, x_type=TensorProto.DOUBLE), rows(rng, 5, np.float64))


def test_batches_it_is_asked_for(rng):
    model = svc(rng, 3, "RBF", per_class=[10, 10, 10])
    tables = tables_of(model)
    decide = numpy_xp.compiled_svm_decisions
    per_row = tables.support.vectors.size
    few = np.zeros((decide.MAX_WORK // per_row, 5), np.float32)
    many = np.zeros((decide.MAX_WORK // per_row + 1, 5), np.float32)
    assert tables.support.compiled(numpy_xp, few) is decide
    assert tables.support.compiled(numpy_xp, many) is None
    assert tables.support.compiled(np, few) is None  # a namespace without it


def test_numba_switched_off(monkeypatch, rng):
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    assert not CompiledSvmDecisions().ready()
    assert tables_of(svc(rng, 3, "RBF")).support.compiled(Namespace(), rows(rng, 1)) is None
