"""An SVM's decision values for a few rows compiled by numba, bound on the CPU EP's namespace as
``xp.compiled_svm_decisions`` for the library's SVMClassifier and SVMRegressor
(``ep_host.kernels.svm``); numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.

The same float64 steps as numpy's passes, one support vector at a time: the kernel value,
rounded to float32 as onnxruntime keeps it, times the vector's weight in each decision (pair of
classes, or the one regression value), plus the decision's bias, rounded to float32; then the
classifier's one-vs-one votes. numpy's passes cost about 15 calls of a microsecond or more
whatever the rows (skl2onnx's SVC of 354 vectors and 3 classes: 31 us a row, 12 of them the
kernel matrix), and its matrix products win only on many rows, so this is asked only up to
``MAX_WORK`` (rows x vectors x features).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ep_host_cpu.jit import compiled, numba_wanted

# kernel_type as numbered here (the order of ``ep_host.kernels.svm.KERNELS``)
LINEAR, POLY, RBF, SIGMOID = range(4)
FLOAT32 = np.dtype(np.float32)  # native float32: an array's dtype is this very object
FLOAT64, INT64 = np.dtype(np.float64), np.dtype(np.int64)  # numpy reads a type on every call
NO_WINNER = np.zeros(0, INT64)  # no votes: never written


def svm_decisions(x, vectors_t, weights_t, bias, kernel, gamma, coef0, degree, pair_classes,
                  labels, totals, scores, winner):
    """For each row r of ``x``: ``totals[r, d]`` = the sum over vectors v of
    float32(kernel(x[r], v)) * ``weights_t[d, v]``, plus ``bias[d]`` (float64), and
    ``scores[r, d]`` that rounded to float32; the vectors are the columns of ``vectors_t``
    [features, vectors]. With ``labels`` (one int64 per class; empty: no votes), ``winner[r]``:
    the label of the class with the most votes, the first on ties; decision d is the pair of
    classes ``pair_classes[d]``, a score above 0 votes for the first of them, any other for the
    second. ``kernel``: LINEAR, POLY, RBF or SIGMOID, with ``gamma``, ``coef0`` and
    ``degree``."""
    rows = x.shape[0]
    features, n_vectors = vectors_t.shape
    decisions = weights_t.shape[0]
    classes = labels.shape[0]
    values = np.empty(n_vectors)
    for r in range(rows):
        kernel_values(x[r], vectors_t, kernel, gamma, coef0, degree, values)
        for d in range(decisions):
            totals[r, d] = weighted_sum(values, weights_t[d]) + bias[d]
            scores[r, d] = np.float32(totals[r, d])
        if classes > 0:
            best, best_votes = 0, -1
            for c in range(classes):
                votes = 0
                for d in range(decisions):
                    if pair_classes[d, 0 if scores[r, d] > 0 else 1] == c:
                        votes += 1
                if votes > best_votes:
                    best, best_votes = c, votes
            winner[r] = labels[best]


def kernel_values(row, vectors_t, kernel, gamma, coef0, degree, values):
    """``values[v]``: the kernel of float32 ``row`` and vector v, in float64 (each vector's
    features summed in order), rounded to float32. Feature by feature across all vectors, a
    loop the compiler vectorizes."""
    features, n_vectors = vectors_t.shape
    for v in range(n_vectors):
        values[v] = 0.0
    for f in range(features):
        value = np.float64(row[f])
        if kernel == RBF:
            for v in range(n_vectors):
                diff = value - vectors_t[f, v]
                values[v] += diff * diff
        else:
            for v in range(n_vectors):
                values[v] += value * vectors_t[f, v]
    for v in range(n_vectors):
        s = values[v]
        if kernel == RBF:
            s = math.exp(s * -gamma)
        elif kernel == POLY:
            s = (gamma * s + coef0) ** degree
        elif kernel == SIGMOID:
            s = math.tanh(gamma * s + coef0)
        values[v] = np.float64(np.float32(s))


def weighted_sum(values, weights):
    """The sum of ``values * weights`` in four interleaved partial sums (the compiler keeps
    them in one vector register: 0.45 against 0.95 us for 3 x 354 values one by one)."""
    n = values.shape[0]
    whole = n - n % 4
    s0 = s1 = s2 = s3 = 0.0
    for v in range(0, whole, 4):
        s0 += values[v] * weights[v]
        s1 += values[v + 1] * weights[v + 1]
        s2 += values[v + 2] * weights[v + 2]
        s3 += values[v + 3] * weights[v + 3]
    s = (s0 + s1) + (s2 + s3)
    for v in range(whole, n):
        s += values[v] * weights[v]
    return s


def signature(numba: Any) -> list[Any]:
    types = numba.types
    read2 = types.Array(types.float64, 2, "C", readonly=True)
    return [types.void(types.Array(types.float32, 2, "C", readonly=True), read2, read2,
                       types.Array(types.float64, 1, "C", readonly=True), types.int64,
                       types.float64, types.float64, types.float64,
                       types.Array(types.int64, 2, "C", readonly=True),
                       types.Array(types.int64, 1, "C", readonly=True),
                       types.Array(types.float64, 2, "C"), types.Array(types.float32, 2, "C"),
                       types.Array(types.int64, 1, "C"))]


class CompiledSvmDecisions:
    """``xp.compiled_svm_decisions``: :meth:`ready` says whether the compiled loop is used
    (numba installed and wanted; built, or read back, the first time it says yes); calling it
    scores a few rows."""

    # rows x vectors x features up to which it is asked. Measured here (the whole
    # SVMClassifier kernel, compiled / numpy's passes with one BLAS thread, in us), skl2onnx's
    # RBF SVC of 354 vectors of 10 features and 3 classes: 7.9 / 30 on one row, 46 / 83 on 16,
    # 661 / 852 on 256, 10,433 / 15,276 on 4,096; labels and scores bit for bit the same.
    # Past about 1,000 such rows numpy's passes are kept: a BLAS of many threads runs them in
    # parallel, the compiled loop on one.
    MAX_WORK = 4_000_000

    def __init__(self) -> None:
        self._compiled: Any = None

    def ready(self) -> bool:
        if self._compiled is None:
            kernel = (compiled(svm_decisions, signature, (kernel_values, weighted_sum))
                      if numba_wanted() else None)
            # the tables are ours and ``__call__`` makes the rest: the built module's per-call
            # checks of eight arrays are not needed
            self._compiled = getattr(kernel, "unchecked", kernel) or False
        return bool(self._compiled)

    def __call__(self, x, vectors_t, weights_t, bias, kernel: int, gamma: float, coef0: float,
                 degree: float, pair_classes, labels):
        """``(totals, scores, winner)`` of float32 ``x`` [rows, features] (C-contiguous):
        float64 and float32 [rows, decisions] and, with ``labels`` (int64, one per class), the
        winning class's label, int64 [rows] (else empty). Call only after :meth:`ready` said
        yes, with float64 ``vectors_t`` [features, vectors] and ``weights_t`` [decisions,
        vectors], ``bias`` [decisions] and int64 ``pair_classes`` [decisions, 2], all
        C-contiguous."""
        if x.ndim != 2 or x.dtype is not FLOAT32 or not x.flags.c_contiguous:
            raise ValueError(f"the SVM decisions take a C-contiguous float32 matrix, got "
                             f"{x.dtype} {x.shape}")
        rows, decisions = x.shape[0], weights_t.shape[0]
        totals = np.empty((rows, decisions), FLOAT64)
        scores = np.empty((rows, decisions), FLOAT32)
        winner = np.empty(rows, INT64) if labels.shape[0] else NO_WINNER
        self._compiled(x, vectors_t, weights_t, bias, kernel, gamma, coef0, degree, pair_classes,
                       labels, totals, scores, winner)
        return totals, scores, winner
