"""A float32 LayerNormalization compiled by numba, bound on the CPU EP's namespace as
``xp.compiled_layer_norm`` for the library's LayerNormalization (stash type float32) with a
scale and bias of the normalized shape; numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``.
The same rows after the residual sum, ``xp.compiled_skip_layer_norm``, for com.microsoft's
SkipLayerNormalization (what ``skip_layer_norm_fusion`` makes of Add, Add, LayerNormalization).

Per row: the mean and the mean of squared deviations, each summed in eight float32 lanes (so
that the compiler vectorizes the sums without reordering them itself), then one pass writing
``(x - mean) * inv_std * scale + bias``. Measured one thread, against numpy's passes and
onnxruntime: (128, 768) 0.085 / 0.173 / 0.066 ms, (3136, 96) 0.27 / 0.62 / 0.27 ms. Results
differ from numpy's pairwise sums by an ulp or two of the mean and variance.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import CompiledLoop

LANES = 8


def layer_norm_rows(x, scale, bias, epsilon, y, mean_out, inv_std_out):
    """Each row of ``x`` (rows, cols) normalized into ``y``; its mean and 1 / std into
    ``mean_out`` and ``inv_std_out``."""
    lanes = np.zeros(LANES, dtype=np.float32)
    for r in range(x.shape[0]):
        mean_out[r], inv_std_out[r] = normalize_row(x[r], scale, bias, epsilon, y[r], lanes)


def skip_layer_norm_rows(x, skip, add, with_add, scale, bias, epsilon, y, sums, keep_sums,
                         mean_out, inv_std_out):
    """Each row of ``(x + add) + skip`` (``x + skip`` without ``with_add``: the order of the
    Adds that skip_layer_norm_fusion fuses) normalized into ``y``, the sum into ``sums``' row
    (its first row, a scratch one, without ``keep_sums``)."""
    lanes = np.zeros(LANES, dtype=np.float32)
    cols = x.shape[1]
    for r in range(x.shape[0]):
        xr, sr, kr = x[r], sums[r if keep_sums else 0], skip[r]
        if with_add:
            for c in range(cols):
                sr[c] = (xr[c] + add[c]) + kr[c]
        else:
            for c in range(cols):
                sr[c] = xr[c] + kr[c]
        mean_out[r], inv_std_out[r] = normalize_row(sr, scale, bias, epsilon, y[r], lanes)


def normalize_row(xr, scale, bias, epsilon, yr, lanes):
    """``yr`` = ``(xr - mean) * inv_std * scale + bias``; returns ``(mean, inv_std)``."""
    cols = xr.size
    inv_n = np.float32(1) / np.float32(cols)
    whole = cols - cols % LANES
    for k in range(LANES):
        lanes[k] = 0
    for c in range(0, whole, LANES):
        for k in range(LANES):
            lanes[k] += xr[c + k]
    total = np.float32(0)
    for k in range(LANES):
        total += lanes[k]
    for c in range(whole, cols):
        total += xr[c]
    mean = total * inv_n
    for k in range(LANES):
        lanes[k] = 0
    for c in range(0, whole, LANES):
        for k in range(LANES):
            d = xr[c + k] - mean
            lanes[k] += d * d
    squares = np.float32(0)
    for k in range(LANES):
        squares += lanes[k]
    for c in range(whole, cols):
        d = xr[c] - mean
        squares += d * d
    inv_std = np.float32(1) / np.sqrt(squares * inv_n + epsilon)
    for c in range(cols):
        yr[c] = (xr[c] - mean) * inv_std * scale[c] + bias[c]
    return mean, inv_std


def signature(numba: Any) -> list[Any]:
    f32 = numba.types.float32
    matrix, vector = numba.types.Array(f32, 2, "C"), numba.types.Array(f32, 1, "C")
    read = numba.types.Array(f32, 2, "C", readonly=True)
    read_vector = numba.types.Array(f32, 1, "C", readonly=True)
    return [numba.types.void(read, read_vector, read_vector, f32, matrix, vector, vector)]


def skip_signature(numba: Any) -> list[Any]:
    f32 = numba.types.float32
    matrix, vector = numba.types.Array(f32, 2, "C"), numba.types.Array(f32, 1, "C")
    read = numba.types.Array(f32, 2, "C", readonly=True)
    read_vector = numba.types.Array(f32, 1, "C", readonly=True)
    flag = numba.types.boolean
    return [numba.types.void(read, read, read_vector, flag, read_vector, read_vector, f32,
                             matrix, matrix, flag, vector, vector)]


class CompiledLayerNorm(CompiledLoop):
    """``xp.compiled_layer_norm``: :meth:`ready` says whether the compiled loop is used (numba
    installed and wanted; compiled, or read from numba's disk cache, the first time it says
    yes); calling it normalizes a float32 array over its last ``cols`` values per row."""

    MIN_SIZE = 4096  # values below which numpy's passes cost about the same

    function = staticmethod(layer_norm_rows)
    signature = staticmethod(signature)
    helpers = (normalize_row,)

    def __call__(self, x, cols: int, scale, bias, epsilon: float):
        """``(y, mean, inv_std)``: ``y`` of ``x``'s shape, the others one value per row."""
        rows = x.size // cols
        y = np.empty(x.shape, dtype=np.float32)
        mean = np.empty(rows, dtype=np.float32)
        inv_std = np.empty(rows, dtype=np.float32)
        bias = np.zeros(cols, dtype=np.float32) if bias is None else bias
        self._compiled(np.ascontiguousarray(x).reshape(rows, cols),
                       np.ascontiguousarray(scale, dtype=np.float32).reshape(cols),
                       np.ascontiguousarray(bias, dtype=np.float32).reshape(cols),
                       np.float32(epsilon), y.reshape(rows, cols), mean, inv_std)
        return y, mean, inv_std


class CompiledSkipLayerNorm(CompiledLoop):
    """``xp.compiled_skip_layer_norm``: com.microsoft's SkipLayerNormalization of float32 (a
    skip of the input's shape; gamma, beta and bias of its last dim) in one pass per row: the
    sum ``(x + bias) + skip`` then :class:`CompiledLayerNorm`'s row, so the values equal the
    unfused Adds' then the compiled LayerNormalization's to the bit. (1, 128, 768) with a bias,
    one thread, min of 30 on a loaded machine: 89 us (111 keeping the sum) against 124 for
    the two Adds then the compiled LayerNormalization (83 alone)."""

    MIN_SIZE = CompiledLayerNorm.MIN_SIZE

    function = staticmethod(skip_layer_norm_rows)
    signature = staticmethod(skip_signature)
    helpers = (normalize_row,)

    def __call__(self, x, skip, gamma, beta, bias, epsilon: float, keep_sum: bool):
        """``(y, mean, inv_std, sum)``: ``y`` (and ``sum``, ``None`` unless ``keep_sum``) of
        ``x``'s shape, the others one value per row."""
        cols = x.shape[-1]
        rows = x.size // cols
        y = np.empty(x.shape, dtype=np.float32)
        sums = np.empty(x.shape if keep_sum else (1, cols), dtype=np.float32)
        mean = np.empty(rows, dtype=np.float32)
        inv_std = np.empty(rows, dtype=np.float32)
        zeros = np.zeros(cols, dtype=np.float32) if beta is None or bias is None else None
        beta = zeros if beta is None else beta
        add = zeros if bias is None else bias
        self._compiled(np.ascontiguousarray(x).reshape(rows, cols),
                       np.ascontiguousarray(skip).reshape(rows, cols),
                       np.ascontiguousarray(add, dtype=np.float32).reshape(cols),
                       bias is not None,
                       np.ascontiguousarray(gamma, dtype=np.float32).reshape(cols),
                       np.ascontiguousarray(beta, dtype=np.float32).reshape(cols),
                       np.float32(epsilon), y.reshape(rows, cols), sums.reshape(-1, cols),
                       keep_sum, mean, inv_std)
        return y, mean, inv_std, (sums if keep_sum else None)
