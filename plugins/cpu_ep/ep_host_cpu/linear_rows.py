"""LinearClassifier, LinearRegressor, Scaler and Normalizer (the ops of scikit-learn's linear
pipelines) on a few rows compiled by numba, bound on the CPU EP's namespace as
``xp.compiled_linear_scores``, ``xp.compiled_scaler`` and ``xp.compiled_normalizer`` for the
library's kernels (``ep_host.kernels.ml``); numpy's passes otherwise, and with
``EP_HOST_NUMBA=0``.

numpy's passes make about ten calls of 0.3-1 us each on one row (the product, the bias, two
casts, the transform's three or four, the label's look-up), where onnxruntime's whole kernel
takes 0.3 us; here one call does a row's product (float64, each column's features summed in
order), the bias, the rounding of the scores to float32, the label (the first highest score,
the first NaN as numpy's ``argmax``) and the post transform (NONE, SOFTMAX, LOGISTIC,
SOFTMAX_ZERO; sums in numpy's pairwise order, libm's ``exp`` as the library's short-row path
takes it). The scores equal numpy's but for the float64 sums' order, which can move a float32
rounding; the Scaler's and the Normalizer's values equal numpy's bit for bit."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ep_host_cpu.jit import compiled, numba_wanted

FLOAT32 = np.dtype(np.float32)  # native float32: an array's dtype is this very object
INT64 = np.dtype(np.int64)  # a dtype object: numpy reads a type into one on every call
# ``mode``: what the scores are for
REGRESSOR, CLASSIFIER, ONE_COLUMN = range(3)
# post transforms as numbered in ``ep_host.kernels.ml.TRANSFORM_NAMES``
NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO = range(4)
PAIRWISE_BLOCK = 128  # numpy's pairwise sum splits longer runs in two: not followed here
# Normalizer's norms as numbered in ``ep_host.kernels.ml.NORMS``
MAX, L1, L2 = range(3)
NO_LABEL = np.zeros(0, INT64)  # a regressor's labels: none written


def linear_rows(x, coef_t, bias, kind, mode, labels, label_out, out):
    """For each row r of ``x`` [rows, features]: scores = x[r] @ ``coef_t`` [features,
    columns] in float64, plus ``bias`` (when not empty), rounded to float32. ``mode`` REGRESSOR:
    ``out[r]`` the scores through post transform ``kind``; CLASSIFIER: also ``label_out[r]``,
    ``labels[first highest score]``; ONE_COLUMN (one score s): ``labels[1 if s > 0 else 0]``
    and ``out[r]`` = [1 - p, p] for p = s (NONE) or its logistic."""
    rows, features = x.shape
    columns = coef_t.shape[1]
    scores = np.empty(columns)
    with_bias = bias.shape[0] > 0
    for r in range(rows):
        for c in range(columns):
            scores[c] = 0.0
        for f in range(features):
            value = np.float64(x[r, f])
            for c in range(columns):
                scores[c] += value * coef_t[f, c]
        for c in range(columns):
            s = scores[c] + bias[c] if with_bias else scores[c]
            scores[c] = np.float64(np.float32(s))
        if mode == ONE_COLUMN:
            s = scores[0]
            label_out[r] = labels[1 if s > 0 else 0]
            p = logistic(s) if kind == LOGISTIC else s
            out[r, 0] = np.float32(1 - p)
            out[r, 1] = np.float32(p)
            continue
        if mode == CLASSIFIER:
            label_out[r] = labels[first_highest(scores)]
        transform_row(scores, kind)
        for c in range(columns):
            out[r, c] = np.float32(scores[c])


def first_highest(values):
    """numpy's ``argmax``: the first NaN, else the first of the highest values."""
    best = 0
    for c in range(1, values.shape[0]):
        top = values[best]
        if top != top:
            break
        v = values[c]
        if v > top or v != v:
            best = c
    return best


def logistic(v):
    e = math.exp(-abs(v))
    return 1 / (1 + e) if v >= 0 else e / (1 + e)


def transform_row(values, kind):
    """``values`` (float64) through post transform ``kind``, in place, as numpy's passes."""
    n = values.shape[0]
    if kind == LOGISTIC:
        for c in range(n):
            values[c] = logistic(values[c])
        return
    if kind != SOFTMAX and kind != SOFTMAX_ZERO:
        return
    top = values[0]
    for c in range(1, n):  # numpy's max: NaN once any value is
        v = values[c]
        if top == top and (v > top or v != v):
            top = v
    for c in range(n):
        v = values[c]
        values[c] = 0.0 if kind == SOFTMAX_ZERO and v == 0 else math.exp(v - top)
    total = pairwise_sum(values)
    for c in range(n):
        values[c] = values[c] / total


def pairwise_sum(a):
    """numpy's sum of up to PAIRWISE_BLOCK values: one by one below 8, else eight running
    sums added in pairs, then the rest one by one."""
    n = a.shape[0]
    if n < 8:
        s = -0.0
        for i in range(n):
            s += a[i]
        return s
    r0, r1, r2, r3 = a[0], a[1], a[2], a[3]
    r4, r5, r6, r7 = a[4], a[5], a[6], a[7]
    whole = n - n % 8
    for i in range(8, whole, 8):
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
    s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(whole, n):
        s += a[i]
    return s


def scale_rows(x, offset, scale, out):
    """``out`` = (``x`` - offset) * scale in float32, per feature (the last axis), an offset or
    scale of one value for every feature."""
    rows, features = x.shape
    one_offset = offset.shape[0] == 1
    one_scale = scale.shape[0] == 1
    for r in range(rows):
        for f in range(features):
            o = offset[0] if one_offset else offset[f]
            s = scale[0] if one_scale else scale[f]
            out[r, f] = (x[r, f] - o) * s


def normalize_rows(x, norm, out):
    """Each row of ``x`` in float64 divided by its ``norm`` (MAX: its largest value, NaN once
    any value is; L1: the sum of its magnitudes; L2: the square root of the sum of its squares;
    sums in numpy's pairwise order, of at most PAIRWISE_BLOCK values), 1 where that is 0, into
    float32 ``out``."""
    rows, columns = x.shape
    scratch = np.empty(columns)
    for r in range(rows):
        if norm == MAX:
            divisor = np.float64(x[r, 0])
            for c in range(1, columns):
                v = np.float64(x[r, c])
                if divisor == divisor and (v > divisor or v != v):
                    divisor = v
        else:
            for c in range(columns):
                v = np.float64(x[r, c])
                scratch[c] = abs(v) if norm == L1 else v * v
            divisor = pairwise_sum(scratch)
            if norm == L2:
                divisor = math.sqrt(divisor)
        if divisor == 0:
            divisor = 1.0
        for c in range(columns):
            out[r, c] = np.float32(np.float64(x[r, c]) / divisor)


def linear_signature(numba: Any) -> list[Any]:
    types = numba.types
    ints = types.Array(types.int64, 1, "C", readonly=True)
    return [types.void(types.Array(types.float32, 2, "C", readonly=True),
                       types.Array(types.float64, 2, "C", readonly=True),
                       types.Array(types.float64, 1, "C", readonly=True), types.int64,
                       types.int64, ints, types.Array(types.int64, 1, "C"),
                       types.Array(types.float32, 2, "C"))]


def normalize_signature(numba: Any) -> list[Any]:
    types = numba.types
    return [types.void(types.Array(types.float32, 2, "C", readonly=True), types.int64,
                       types.Array(types.float32, 2, "C"))]


def scale_signature(numba: Any) -> list[Any]:
    types = numba.types
    read1 = types.Array(types.float32, 1, "C", readonly=True)
    return [types.void(types.Array(types.float32, 2, "C", readonly=True), read1, read1,
                       types.Array(types.float32, 2, "C"))]


class CompiledLinearScores:
    """``xp.compiled_linear_scores``: :meth:`ready` says whether the compiled loop is used
    (numba installed and wanted; built, or read back, the first time it says yes); calling it
    scores a few rows of a LinearClassifier or LinearRegressor."""

    # rows x features x columns up to which it is asked: past it BLAS's product wins (and
    # runs on many threads). Measured here, one thread, the LinearClassifier kernel of 10
    # features and 3 classes, compiled / numpy's passes in us: 2.7 / 7.8 on one row, 3.9 / 11.3
    # on 16, 25 / 31 on 256, 96 / 92 on 1,024 (30,720), 403 / 338 on 4,096.
    MAX_WORK = 16_384
    KINDS = (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO)  # PROBIT takes numpy's passes

    def __init__(self) -> None:
        self._compiled: Any = None

    def ready(self) -> bool:
        if self._compiled is None:
            kernel = (compiled(linear_rows, linear_signature,
                               (first_highest, logistic, transform_row, pairwise_sum))
                      if numba_wanted() else None)
            # the tables are ours and ``__call__`` makes the rest: the built module's per-call
            # checks of its arrays are not needed
            self._compiled = getattr(kernel, "unchecked", kernel) or False
        return bool(self._compiled)

    def __call__(self, x, coef_t, bias, kind: int, mode: int, labels):
        """``(label, out)`` of float32 ``x`` [rows, features] (C-contiguous): int64 [rows]
        (empty for REGRESSOR) and float32 [rows, columns] ([rows, 2] for ONE_COLUMN). Call only
        after :meth:`ready` said yes, with float64 ``coef_t`` [features, columns] and ``bias``
        ([columns] or empty), int64 ``labels``, all C-contiguous; ``kind`` one of KINDS, and
        SOFTMAX and SOFTMAX_ZERO on at most PAIRWISE_BLOCK columns."""
        if x.ndim != 2 or x.dtype is not FLOAT32 or not x.flags.c_contiguous:
            raise ValueError(f"the linear scores take a C-contiguous float32 matrix, got "
                             f"{x.dtype} {x.shape}")
        rows = x.shape[0]
        label = NO_LABEL if mode == REGRESSOR else np.empty(rows, INT64)
        out = np.empty((rows, 2 if mode == ONE_COLUMN else coef_t.shape[1]), FLOAT32)
        self._compiled(x, coef_t, bias, kind, mode, labels, label, out)
        return label, out


class CompiledScaler:
    """``xp.compiled_scaler``: :meth:`ready` says whether the compiled loop is used (as
    :class:`CompiledLinearScores`'s); calling it scales a float32 array."""

    # elements up to which it is asked: no bound in practice, one pass wins at every size.
    # Measured here, the Scaler kernel on rows of 10 features, compiled / numpy's two passes in
    # us: 1.6 / 2.7 on one row, 2.7 / 5.3 on 256, 12 / 44 on 4,096, 171 / 683 on 65,536.
    MAX_SIZE = 1 << 62

    def __init__(self) -> None:
        self._compiled: Any = None

    def ready(self) -> bool:
        if self._compiled is None:
            kernel = compiled(scale_rows, scale_signature) if numba_wanted() else None
            self._compiled = getattr(kernel, "unchecked", kernel) or False
        return bool(self._compiled)

    def __call__(self, x, offset, scale):
        """(``x`` - ``offset``) * ``scale`` of float32 ``x`` [rows, features] (C-contiguous),
        float32 ``offset`` and ``scale`` of 1 or ``features`` values. Call only after
        :meth:`ready` said yes."""
        if x.ndim != 2 or x.dtype is not FLOAT32 or not x.flags.c_contiguous:
            raise ValueError(f"the Scaler takes a C-contiguous float32 matrix, got {x.dtype} "
                             f"{x.shape}")
        out = np.empty(x.shape, FLOAT32)
        self._compiled(x, offset, scale, out)
        return out


class CompiledNormalizer:
    """``xp.compiled_normalizer``: :meth:`ready` says whether the compiled loop is used (as
    :class:`CompiledLinearScores`'s); calling it normalizes the rows of a float32 matrix."""

    # values up to which it is asked: no bound in practice, one pass wins at every size.
    # Measured here, the Normalizer kernel on float32 rows of 3 values (L1), compiled / the
    # library's Python path (one row) or numpy's passes in us: 1.5 / 2.5 on one row, 1.6 / 7.4
    # on 16, 3.3 / 13 on 256, 29 / 93 on 4,096, 109 / 358 on 16,384.
    MAX_SIZE = 1 << 62

    def __init__(self) -> None:
        self._compiled: Any = None

    def ready(self) -> bool:
        if self._compiled is None:
            kernel = (compiled(normalize_rows, normalize_signature, (pairwise_sum,))
                      if numba_wanted() else None)
            self._compiled = getattr(kernel, "unchecked", kernel) or False
        return bool(self._compiled)

    def __call__(self, x, norm: int):
        """The rows of float32 ``x`` [rows, columns] (C-contiguous, 1 to PAIRWISE_BLOCK
        columns) normalized by ``norm`` (MAX, L1 or L2), float32. Call only after :meth:`ready`
        said yes."""
        if (x.ndim != 2 or x.dtype is not FLOAT32 or not x.flags.c_contiguous
                or not 0 < x.shape[1] <= PAIRWISE_BLOCK):
            raise ValueError(f"the Normalizer takes a C-contiguous float32 matrix of 1 to "
                             f"{PAIRWISE_BLOCK} columns, got {x.dtype} {x.shape}")
        out = np.empty(x.shape, FLOAT32)
        self._compiled(x, norm, out)
        return out
