"""SVMClassifier's pairwise coupling compiled by numba against numpy's passes: the same
probabilities within float32 roundings, each row on its own as in its batch, bit for bit, and
numpy's passes under EP_HOST_NUMBA=0."""

from __future__ import annotations

import numpy as np
import pytest
from ep_host_cpu.coupling import CompiledPairwiseCoupling

from ep_host.kernels.svm import pairwise_coupling


def pairwise(rng, rows, k):
    """r [rows, k, k]: r[i, j] = P(i | i or j), r[j, i] = 1 - r[i, j], clipped as the kernel
    clips them."""
    r = np.zeros((rows, k, k), np.float32)
    for i in range(k):
        for j in range(i + 1, k):
            p = np.clip(rng.uniform(size=rows), 1e-7, 1 - 1e-7).astype(np.float32)
            r[:, i, j], r[:, j, i] = p, 1 - p
    return r


@pytest.mark.parametrize("k", [2, 3, 5, 10])
def test_probabilities_as_numpy_computes_them(rng, k):
    compiled = CompiledPairwiseCoupling()
    assert compiled.ready()
    r = pairwise(rng, 64, k)
    got, want = compiled(r), pairwise_coupling(r)
    assert got.dtype == np.float32 and got.shape == (64, k)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(got.sum(axis=1), 1, rtol=1e-5)
    for n in (0, 31, 63):  # a row alone as in its batch
        np.testing.assert_array_equal(compiled(r[n:n + 1].copy())[0], got[n])


def test_numba_switched_off(monkeypatch, rng):
    monkeypatch.setenv("EP_HOST_NUMBA", "0")
    assert not CompiledPairwiseCoupling().ready()


def test_a_wrong_array_is_refused(rng):
    compiled = CompiledPairwiseCoupling()
    assert compiled.ready()
    with pytest.raises(ValueError, match="float32"):
        compiled(pairwise(rng, 2, 3).astype(np.float64))
