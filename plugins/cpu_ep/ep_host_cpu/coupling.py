"""SVMClassifier's class probabilities from its pairs' decision values compiled by numba, bound on
the CPU EP's namespace as ``xp.compiled_pairwise_coupling`` for the library's kernel
(``ep_host.kernels.svm``: ``platt_pairwise`` then ``pairwise_coupling``); numpy's passes
otherwise, and with ``EP_HOST_NUMBA=0``.

Platt's scaling first, each pair (i, j)'s decision value d to P(i | i or j) = 1 / (1 + exp(a d +
b)): ``a d + b`` comes from the library in float32 (numpy's product and sum, each rounded: a
compiled loop may fuse them into one multiply-add); here the sigmoid in float64 (one minus the
logistic of ``a d + b``, as the library computes it), rounded to float32 and kept within
[1e-7, 1 - 1e-7]; P(j | i or j) is one minus it in float32. Compiled here rather than run as
numpy's dozen calls, which on a few rows cost more than the coupling: the SVMClassifier kernel
of skl2onnx's SVC with probabilities (3 classes, 7 rows) took 51 us a call with them, 25
without.

The iterative method of Wu, Lin and Weng (2004) as onnxruntime runs it, in float32, one row at a
time: Q from the pairwise probabilities r (Q[t][t] the sum over j of r[j][t]^2 in j order,
Q[t][j] = -r[j][t] r[t][j]), p from 1/k, then at most 100 sweeps, each stopping where every
|(Qp)[t] - p'Qp| is under 0.005 / k, else updating p one class at a time. numpy's passes take
about 10 calls of a microsecond or more per sweep whatever the rows (skl2onnx's SVC with
probabilities, 3 classes, 7 rows: 272 us a run against onnxruntime's 25).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ep_host_cpu.jit import compiled, numba_wanted

FLOAT32 = np.dtype(np.float32)  # native float32: an array's dtype is this very object
INT64 = np.dtype(np.int64)
SWEEPS = 100


def pairwise_coupling(r, p):
    """``p[n]`` (float32 [rows, k]): the class probabilities of row n's pairwise ones ``r[n]``
    (float32 [rows, k, k], r[n][i][j] = P(i | i or j); the diagonal is not read)."""
    rows, k = r.shape[0], r.shape[1]
    one, two = np.float32(1), np.float32(2)
    eps = np.float32(0.005) / np.float32(k)
    q = np.empty((k, k), dtype=np.float32)
    qp = np.empty(k, dtype=np.float32)
    for n in range(rows):
        rn = r[n]
        for t in range(k):
            diagonal = np.float32(0)
            for j in range(k):
                if j != t:
                    diagonal += rn[j, t] * rn[j, t]
                    q[t, j] = -rn[j, t] * rn[t, j]
            q[t, t] = diagonal
        pn = p[n]
        for t in range(k):
            pn[t] = one / np.float32(k)
        for _ in range(SWEEPS):
            pqp = np.float32(0)
            for t in range(k):
                total = np.float32(0)
                for j in range(k):
                    total += q[t, j] * pn[j]
                qp[t] = total
                pqp += pn[t] * total
            worst = np.float32(0)
            for t in range(k):
                error = abs(qp[t] - pqp)
                if error > worst:
                    worst = error
            if worst < eps:
                break
            for t in range(k):
                diff = (pqp - qp[t]) / q[t, t]
                scale = one + diff
                pn[t] += diff
                pqp = (pqp + diff * (diff * q[t, t] + two * qp[t])) / scale / scale
                for j in range(k):
                    qp[j] = (qp[j] + diff * q[t, j]) / scale
                    pn[j] /= scale


def platt_coupling(fapb, pairs, r, p):
    """``p[n]`` (float32 [rows, k]): the class probabilities of row n's pairs by Platt's scaling,
    ``fapb[n]`` (float32 [rows, pairs]) holding each pair's ``a d + b`` and ``pairs`` (int64
    [pairs, 2]) its two classes, then the coupling; ``r`` (float32 [rows, k, k]) receives the
    pairwise probabilities. Returns 1 (computing nothing) when a pair names a class outside
    [0, k), else 0."""
    k = r.shape[1]
    for c in range(pairs.shape[0]):
        if not (0 <= pairs[c, 0] < k and 0 <= pairs[c, 1] < k):
            return 1
    low, high = np.float32(1e-7), np.float32(1 - 1e-7)
    for n in range(fapb.shape[0]):
        for c in range(pairs.shape[0]):
            v = np.float64(fapb[n, c])
            e = math.exp(-abs(v))
            logistic = 1.0 / (1.0 + e) if v >= 0 else e / (1.0 + e)
            w = np.float32(1.0 - logistic)
            if w < low:  # comparisons, not min/max: NaN stays NaN, as numpy's maximum keeps it
                w = low
            elif w > high:
                w = high
            i, j = pairs[c, 0], pairs[c, 1]
            r[n, i, j] = w
            r[n, j, i] = np.float32(1) - w
    pairwise_coupling(r, p)
    return 0


def signature(numba: Any) -> Any:
    f32, i64 = numba.types.float32, numba.types.int64
    return numba.types.int64(numba.types.Array(f32, 2, "C", readonly=True),
                             numba.types.Array(i64, 2, "C", readonly=True),
                             numba.types.Array(f32, 3, "C"), numba.types.Array(f32, 2, "C"))


class CompiledPairwiseCoupling:
    """``xp.compiled_pairwise_coupling``: :meth:`ready` says whether the compiled loop is used
    (numba installed and wanted; built, or read back, the first time it says yes); calling it
    gives the class probabilities of each pair's float32 ``a d + b`` [rows, pairs]."""

    def __init__(self) -> None:
        self._compiled: Any = None

    def ready(self) -> bool:
        if self._compiled is None:
            self._compiled = (compiled(platt_coupling, signature, (pairwise_coupling,))
                              if numba_wanted() else None) or False
        return bool(self._compiled)

    def __call__(self, fapb, pairs, k):
        """[rows, k] float32 probabilities of each pair's ``a d + b`` (float32 [rows, pairs],
        Platt's scaling of its decision value d, as the library computes it) and each pair's
        two classes (int64 [pairs, 2], each below ``k``)."""
        n_pairs = pairs.shape[0] if pairs.ndim == 2 else -1
        if (fapb.ndim != 2 or fapb.shape[1] != n_pairs or pairs.shape[1:] != (2,)
                or fapb.dtype is not FLOAT32 or pairs.dtype is not INT64
                or not fapb.flags.c_contiguous or not pairs.flags.c_contiguous):
            raise ValueError(f"pairwise coupling takes C-contiguous float32 a d + b [rows, "
                             f"pairs] and int64 pairs of classes [pairs, 2], got {fapb.dtype} "
                             f"{fapb.shape} and {pairs.dtype} {pairs.shape}")
        rows = fapb.shape[0]
        r = np.zeros((rows, k, k), FLOAT32)
        p = np.empty((rows, k), FLOAT32)
        if self._compiled(fapb, pairs, r, p):
            raise ValueError(f"pairwise coupling: a pair names a class outside [0, {k}): "
                             f"{pairs.tolist()}")
        return p
