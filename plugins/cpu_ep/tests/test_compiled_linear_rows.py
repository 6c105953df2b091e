"""LinearClassifier, LinearRegressor, Scaler and Normalizer on a few rows compiled by numba
against numpy's passes: the same labels (ties, NaN, both label kinds, one score column), scores
within a float32 rounding under every post transform, 1 row and many, one row as that row among
others bit for bit, the Scaler and the Normalizer bit for bit (NaN, infinities, negative zero,
short and long rows), both ways against onnxruntime; which inputs each is asked for, and numpy's
passes under EP_HOST_NUMBA=0."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_labels_equal_scores_close, run_ep_host
from ep_host_cpu.linear_rows import CompiledLinearScores, CompiledNormalizer, CompiledScaler
from ep_host_cpu.xp import numpy_xp
from onnx import TensorProto, helper
from test_ml_linear_svm import TYPES, F, assert_same, linear_classifier, model, rows

from ep_host.kernels.ml import LinearClassifierTables

ML = "ai.onnx.ml"
TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


def switch(monkeypatch, on):
    monkeypatch.setattr(CompiledLinearScores, "MAX_WORK", 10 ** 9 if on else 0)
    monkeypatch.setattr(CompiledScaler, "MAX_SIZE", 10 ** 9 if on else 0)
    monkeypatch.setattr(CompiledNormalizer, "MAX_SIZE", 10 ** 9 if on else 0)


def both_ways(monkeypatch, m, x):
    """The outputs of the compiled loops, then of numpy's passes."""
    switch(monkeypatch, True)
    compiled = run_ep_host(m, {"x": x})
    switch(monkeypatch, False)
    return compiled, run_ep_host(m, {"x": x})


def classifier_of(coefficients, intercepts, transform="NONE", strings=False):
    k = max(len(intercepts), 2)
    labels = ({"classlabels_strings": [f"c{i}" for i in range(k)]} if strings
              else {"classlabels_ints": [10 + 7 * i for i in range(k)]})
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML,
                            coefficients=list(coefficients), intercepts=list(intercepts),
                            post_transform=transform, **labels)
    outputs = [("label", TensorProto.STRING if strings else TensorProto.INT64, [None]),
               ("scores", TensorProto.FLOAT, [None, None])]
    return model([node], outputs)


def regressor(rng, targets, transform="NONE", intercepts=True, x_type=TensorProto.FLOAT):
    attrs = {"intercepts": rng.normal(size=targets).tolist()} if intercepts else {}
    node = helper.make_node("LinearRegressor", ["x"], ["y"], domain=ML,
                            coefficients=rng.normal(size=targets * F).tolist(), targets=targets,
                            post_transform=transform, **attrs)
    return model([node], [("y", TensorProto.FLOAT, [None, targets])], x_type)


def scaler(offset, scale, x_type=TensorProto.FLOAT):
    node = helper.make_node("Scaler", ["x"], ["y"], domain=ML, offset=offset, scale=scale)
    return model([node], [("y", TensorProto.FLOAT, [None, F])], x_type)


def normalizer(x_type=TensorProto.FLOAT, norm="L2"):
    node = helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm)
    return model([node], [("y", TensorProto.FLOAT, [None, F])], x_type)


def edge_rows(rng, n):
    """``n`` random rows, with NaN, infinities and zeros of both signs among them."""
    x = rows(rng, n)
    if n > 3:
        x[1, 2] = np.nan
        x[2, 0] = np.inf
        x[3] = -0.0
    return x


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("strings", [False, True])
def test_linear_classifier_as_numpy(rng, monkeypatch, transform, strings):
    assert numpy_xp.compiled_linear_scores.ready()
    m = linear_classifier(rng, 4, strings=strings, transform=transform)
    for n in (1, 3, 40):
        compiled, passes = both_ways(monkeypatch, m, edge_rows(rng, n))
        assert_labels_equal_scores_close(compiled, passes, f"{transform}, {n} rows")


@pytest.mark.parametrize("transform", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("strings", [False, True])
def test_one_score_column_as_numpy(rng, monkeypatch, transform, strings):
    m = linear_classifier(rng, 1, strings=strings, transform=transform)
    for n in (1, 40):
        x = edge_rows(rng, n)
        compiled, passes = both_ways(monkeypatch, m, x)
        assert_labels_equal_scores_close(compiled, passes, f"{transform}, {n} rows")


def test_ties_nan_and_negative_zero(monkeypatch):
    """Equal scores label the first class; a NaN score labels the first NaN, as numpy's
    argmax; a score of -0 is no positive score."""
    rows_ = np.array([[1, 2, 0, 0, 0], [0, 0, 0, 0, 0], [np.inf, 0, 0, 0, 0],
                      [np.nan, 0, 0, 0, 0]], np.float32)
    same = [1.0, 0, 0, 0, 0] * 2 + [0.5, 0, 0, 0, 0]  # classes 0 and 1 tie
    nan_second = [1.0, 0, 0, 0, 0, 0.0, 0, 0, 0, 0, -1.0, 0, 0, 0, 0]  # inf * 0 is NaN
    for transform in ("NONE", "SOFTMAX", "SOFTMAX_ZERO", "LOGISTIC"):
        for coefficients in (same, nan_second):
            m = classifier_of(coefficients, [0.0, 0.0, 0.0], transform)
            compiled, passes = both_ways(monkeypatch, m, rows_)
            assert_labels_equal_scores_close(compiled, passes, transform)
            np.testing.assert_array_equal(compiled[1], passes[1])
    label, _ = both_ways(monkeypatch, classifier_of(same, [0.0] * 3), rows_)[0]
    assert label.tolist() == [10, 10, 10, 10]
    label, _ = both_ways(monkeypatch, classifier_of(nan_second, [0.0] * 3), rows_)[0]
    assert label.tolist() == [10, 10, 17, 10]
    one = classifier_of([1.0, 0, 0, 0, 0], [-0.0])
    for label, scores in both_ways(monkeypatch, one, np.zeros((2, F), np.float32)):
        assert label.tolist() == [10, 10] and scores.tolist() == [[1, 0]] * 2


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize("targets,intercepts", [(1, True), (3, True), (3, False)])
def test_linear_regressor_as_numpy(rng, monkeypatch, transform, targets, intercepts):
    if transform == "PROBIT":
        transform = "NONE" if targets == 3 else transform  # PROBIT needs values in (0, 1)
    m = regressor(rng, targets, transform, intercepts)
    for n in (1, 3, 40):
        compiled, passes = both_ways(monkeypatch, m, edge_rows(rng, n))
        assert_labels_equal_scores_close(compiled, passes,
                                         f"{transform}, {targets} targets, {n} rows")


def test_one_row_is_the_batch_row_bit_for_bit(rng, monkeypatch):
    switch(monkeypatch, True)
    for transform in ("NONE", "SOFTMAX", "LOGISTIC"):
        for m in (linear_classifier(rng, 4, transform=transform),
                  regressor(rng, 3, transform)):
            batch = rows(rng, 20)
            together = run_ep_host(m, {"x": batch})
            for i in range(len(batch)):
                for a, b in zip(run_ep_host(m, {"x": batch[i:i + 1]}), together, strict=True):
                    np.testing.assert_array_equal(a[0], b[i])


@pytest.mark.parametrize("offset,scale", [([0.5], [2.0]), ([0.5] * F, [-1.5] * F),
                                          ([0.25], [1.5, -2, 3, 0.5, 1])])
def test_scaler_bit_for_bit(rng, monkeypatch, offset, scale):
    m = scaler(offset, scale)
    for n in (1, 40):
        x = edge_rows(rng, n)
        compiled, passes = both_ways(monkeypatch, m, x)
        np.testing.assert_array_equal(compiled[0], passes[0])
        assert (np.signbit(compiled[0]) == np.signbit(passes[0])).all()


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("columns", [1, 3, 8, 9, 17, 128, 129])
def test_normalizer_bit_for_bit(rng, monkeypatch, norm, columns):
    node = helper.make_node("Normalizer", ["x"], ["y"], domain=ML, norm=norm)
    m = model([node], [("y", TensorProto.FLOAT, [None, columns])], features=columns)
    for n in (1, 2, 40):
        x = (rng.normal(size=(n, columns)) * 10.0 ** rng.integers(-20, 20, size=(n, 1)))
        x = x.astype(np.float32)
        if n == 40:
            x[1, 0] = np.nan
            x[2, -1] = np.inf
            x[3] = -0.0
            x[4] = -np.abs(x[4]) - 1  # MAX divides by a negative maximum
            x[5, ::2] = -0.0
        compiled, passes = both_ways(monkeypatch, m, x)
        np.testing.assert_array_equal(compiled[0], passes[0], err_msg=f"{norm} {n} x {columns}")
        assert (np.signbit(compiled[0]) == np.signbit(passes[0])).all()


def test_other_input_types_as_float32(rng, monkeypatch):
    """Inputs of other types are read as float32 first: what float32 input gives."""
    for dtype in (np.float64, np.int64):
        x = rows(rng, 4, dtype)
        for make in (lambda t: scaler([0.5], [2.0], t), lambda t: regressor(rng, 2, x_type=t),
                     lambda t: linear_classifier(rng, 3, x_type=t), normalizer):
            state = rng.bit_generator.state
            m = make(TYPES[dtype])
            rng.bit_generator.state = state
            as_float32 = make(TensorProto.FLOAT)
            expected = run_ep_host(as_float32, {"x": x.astype(np.float32)})
            for compiled_first in both_ways(monkeypatch, m, x):
                assert_labels_equal_scores_close(compiled_first, expected, str(dtype))


@pytest.mark.parametrize("numpy_passes", [False, True])
def test_both_ways_match_onnxruntime(rng, monkeypatch, numpy_passes):
    switch(monkeypatch, not numpy_passes)
    for n in (1, 7):
        for transform in ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"):
            assert_same(linear_classifier(rng, 3, transform=transform), rows(rng, n))
            assert_same(regressor(rng, 2, transform if transform != "SOFTMAX_ZERO" else "NONE"),
                        rows(rng, n))
        assert_same(linear_classifier(rng, 1, transform="LOGISTIC"), rows(rng, n))
        assert_same(scaler([0.5, 1, 2, 3, 4], [2.0, 1, -1, 0.5, 3]), rows(rng, n))


def test_inputs_it_is_asked_for(rng):
    scores = numpy_xp.compiled_linear_scores
    tables = LinearClassifierTables({"coefficients": [1.0] * 3 * F, "intercepts": [0.0] * 3,
                                     "classlabels_ints": [1, 2, 3]})
    per_row = 3 * F
    few = np.zeros((scores.MAX_WORK // per_row, F), np.float32)
    many = np.zeros((scores.MAX_WORK // per_row + 1, F), np.float32)
    assert tables.compiled(numpy_xp, few) is scores
    assert tables.compiled(numpy_xp, many) is None
    assert tables.compiled(np, few) is None  # a namespace without it
    probit = LinearClassifierTables({"coefficients": [1.0] * 3 * F, "intercepts": [0.0] * 3,
                                     "classlabels_ints": [1, 2, 3], "post_transform": "PROBIT"})
    assert probit.compiled(numpy_xp, few[:1]) is None
    wide = LinearClassifierTables({"coefficients": [1.0] * 129, "intercepts": [0.0] * 129,
                                   "classlabels_ints": list(range(129)),
                                   "post_transform": "SOFTMAX"})
    assert wide.compiled(numpy_xp, np.zeros((1, 1), np.float32)) is None


def test_numba_switched_off(monkeypatch):
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    assert not CompiledLinearScores().ready()
    assert not CompiledScaler().ready()
    assert not CompiledNormalizer().ready()
