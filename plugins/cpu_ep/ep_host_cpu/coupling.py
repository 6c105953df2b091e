"""SVMClassifier's class probabilities from its pairwise ones compiled by numba, bound on the CPU
EP's namespace as ``xp.compiled_pairwise_coupling`` for the library's kernel
(``ep_host.kernels.svm.pairwise_coupling``); numpy's passes otherwise, and with
``EP_HOST_NUMBA=0``.

The iterative method of Wu, Lin and Weng (2004) as onnxruntime runs it, in float32, one row at a
time: Q from the pairwise probabilities r (Q[t][t] the sum over j of r[j][t]^2 in j order,
Q[t][j] = -r[j][t] r[t][j]), p from 1/k, then at most 100 sweeps, each stopping where every
|(Qp)[t] - p'Qp| is under 0.005 / k, else updating p one class at a time. numpy's passes take
about 10 calls of a microsecond or more per sweep whatever the rows (skl2onnx's SVC with
probabilities, 3 classes, 7 rows: 272 us a run against onnxruntime's 25).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import compiled, numba_wanted

FLOAT32 = np.dtype(np.float32)  # native float32: an array's dtype is this very object
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


def signature(numba: Any) -> Any:
    f32 = numba.types.float32
    return numba.types.void(numba.types.Array(f32, 3, "C", readonly=True),
                            numba.types.Array(f32, 2, "C"))


class CompiledPairwiseCoupling:
    """``xp.compiled_pairwise_coupling``: :meth:`ready` says whether the compiled loop is used
    (numba installed and wanted; built, or read back, the first time it says yes); calling it
    gives the probabilities of float32 pairwise ones [rows, k, k]."""

    def __init__(self) -> None:
        self._compiled: Any = None

    def ready(self) -> bool:
        if self._compiled is None:
            self._compiled = (compiled(pairwise_coupling, signature) if numba_wanted()
                              else None) or False
        return bool(self._compiled)

    def __call__(self, r):
        if r.ndim != 3 or r.dtype is not FLOAT32 or not r.flags.c_contiguous:
            raise ValueError(f"pairwise coupling takes C-contiguous float32 [rows, k, k], got "
                             f"{r.dtype} {r.shape}")
        p = np.empty(r.shape[:2], FLOAT32)
        self._compiled(r, p)
        return p
