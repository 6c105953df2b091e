"""SVMClassifier's class probabilities compiled by numba against numpy's passes: Platt's
pairwise probabilities bit for bit, the coupled probabilities within float32 roundings, each
row on its own as in its batch, bit for bit, and numpy's passes under EP_HOST_NUMBA=0."""

from __future__ import annotations

import numpy as np
import pytest
from ep_host_cpu.coupling import CompiledPairwiseCoupling

from ep_host.kernels.svm import pairwise_coupling, platt_pairwise


def problem(rng, rows, k):
    """Decision values [rows, pairs] spread well past where Platt's sigmoid saturates, Platt's
    a and b per pair, and the pairs (i, j), i < j, in libsvm's order."""
    pairs = [(i, j) for i in range(k) for j in range(i + 1, k)]
    scores = (rng.standard_normal((rows, len(pairs))) * 6).astype(np.float32)
    a = rng.uniform(-4, -0.5, len(pairs)).astype(np.float32)
    b = rng.uniform(-0.5, 0.5, len(pairs)).astype(np.float32)
    return scores, a, b, pairs


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_probabilities_as_numpy_computes_them(rng, k):
    compiled = CompiledPairwiseCoupling()
    assert compiled.ready()
    scores, a, b, pairs = problem(rng, 64, k)
    classes = np.array(pairs, np.int64).reshape(-1, 2)
    fapb = scores * a + b
    want_r = platt_pairwise(fapb, pairs, k)
    r, p = np.zeros((64, k, k), np.float32), np.empty((64, k), np.float32)
    assert compiled._compiled(fapb, classes, r, p) == 0
    np.testing.assert_array_equal(r, want_r)  # Platt's scaling, bit for bit
    assert ((r == np.float32(1e-7)) | (r == np.float32(1 - 1e-7))).any()  # the clamp was met
    got, want = compiled(fapb, classes, k), pairwise_coupling(want_r)
    np.testing.assert_array_equal(got, p)
    assert got.dtype == np.float32 and got.shape == (64, k)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got.sum(axis=1), 1, rtol=1e-5)
    for n in (0, 31, 63):  # a row alone as in its batch
        np.testing.assert_array_equal(compiled(fapb[n:n + 1].copy(), classes, k)[0], got[n])


def test_a_nan_decision_value_gives_nan_as_numpy_does(rng):
    compiled = CompiledPairwiseCoupling()
    assert compiled.ready()
    scores, a, b, pairs = problem(rng, 3, 3)
    scores[1, 2] = np.nan
    classes = np.array(pairs, np.int64)
    r, p = np.zeros((3, 3, 3), np.float32), np.empty((3, 3), np.float32)
    compiled._compiled(scores * a + b, classes, r, p)
    np.testing.assert_array_equal(r, platt_pairwise(scores * a + b, pairs, 3))  # NaN as numpy's
    assert np.isnan(r[1, 1, 2]) and np.isnan(r[1, 2, 1])


def test_numba_switched_off(monkeypatch, rng):
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    assert not CompiledPairwiseCoupling().ready()


def test_wrong_arrays_and_classes_are_refused(rng):
    compiled = CompiledPairwiseCoupling()
    assert compiled.ready()
    scores, a, b, pairs = problem(rng, 2, 3)
    classes, fapb = np.array(pairs, np.int64), scores * a + b
    with pytest.raises(ValueError, match="float32"):
        compiled(fapb.astype(np.float64), classes, 3)
    with pytest.raises(ValueError, match="float32"):
        compiled(fapb[:, :2], classes, 3)
    with pytest.raises(ValueError, match="outside"):
        compiled(fapb, classes, 2)  # pair (1, 2) names class 2 of two
