"""A convolution's bias, residual (FusedConv's fourth input) and fused activation (Relu, Clip,
HardSigmoid, HardSwish) in one pass over its output, compiled by numba and bound on the CPU EP's
namespace as ``xp.conv_epilogue`` for the library's GEMM variants of Conv (1x1, im2col, shifted,
tapwise); numpy's passes otherwise, and with ``EP_HOST_NUMBA=0``. The depthwise and grouped
loops (:mod:`ep_host_cpu.grouped_conv`) apply the same activations with :func:`activate`.

numpy adds the bias in one pass and clamps in another; measured one thread on a 16 -> 96
channel 1x1 Conv at 112 x 112 with ReLU6: the two passes 0.29 ms, the compiled one 0.10 ms.

The pass saves a few percent of a convolution, and a first compiled kernel costs a process
its build (seconds, once per machine) or numba's JIT (about 130 MiB, see :mod:`ep_host_cpu.aot`):
it is used only once another compiled kernel is in use (a depthwise or grouped convolution, a
LayerNormalization), so that a model of plain convolutions runs without it. Its values equal
numpy's passes' (the same float32 add and clamp) and the CPU EP's own HardSigmoid and
HardSwish kernels' (the same float32 steps), so which path ran never shows in a result.
Measured one thread in MobileNetV3-small: a HardSwish in the pass instead of its own kernel
after the Conv, 3.5% less whole-model time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ep_host_cpu.jit import LoopOnceCompiledInUse

# The activations a Conv applies in its own pass, by the kind the library's Conv names
# (``(kind, p, q)``): a Clip (Relu, ReLU6: p, q the bounds), HardSigmoid (p alpha, q beta) and
# HardSwish (x times its HardSigmoid), as ``mode`` numbers for the compiled loops; 0: none.
MODES = {"clip": 1, "hard_sigmoid": 2, "hard_swish": 3}


def activation_mode(activation):
    """``(mode, p, q)`` for the compiled loops from ``activation`` (``None`` or ``(kind, p,
    q)``)."""
    if activation is None:
        return 0, 0.0, 0.0
    kind, p, q = activation
    return MODES[kind], p, q


def activate(y, shift, p, q, zero, one, mode):
    """y = the activation ``mode`` of y plus ``shift``, in place (see :data:`MODES`; 0 adds
    only): Clip's rule min(max(v, p), q) (a NaN stays NaN, all q where p > q), or HardSigmoid's
    max(0, min(1, p * v + q)), times v for HardSwish, as ``ep_host_cpu.hard_sigmoid`` computes
    them (a NaN stays NaN). ``shift``, ``zero`` and ``one`` in the array's type; a shift of
    -0.0 leaves every value as it is. One array read and written (two views of one memory
    would fail the compiler's overlap check and take its scalar loop)."""
    if mode == 0:
        for j in range(y.size):
            y[j] += shift
    elif mode == 1:
        for j in range(y.size):
            v = y[j] + shift
            v = p if v < p else v  # selects, not branches: vectorized
            y[j] = q if v > q else v
    elif mode == 2:
        for j in range(y.size):
            s = p * (y[j] + shift) + q
            s = zero if s < zero else s
            y[j] = one if s > one else s
    else:
        for j in range(y.size):
            v = y[j] + shift
            s = p * v + q
            s = zero if s < zero else s
            s = one if s > one else s
            y[j] = s * v


def bias_activate(y, bias, has_bias, z, has_z, p, q, mode):
    """y[b, o, i] = y[b, o, i] + bias[o] (with ``has_bias``), plus z[b, o, i] (with ``has_z``:
    a residual, as FusedConv's fourth input), then the activation ``mode`` with parameters
    ``p``, ``q`` (see :func:`activate`); y and z (n, m, size) float32, the float32 steps of an
    Add after the Conv. With a residual and a clamp (the Relu the fusion takes) one pass;
    other activations take a second pass while the row is in the cache (of each sum plus -0.0,
    which leaves it as it is)."""
    n, m = y.shape[:2]
    zero = np.float32(0)
    one = np.float32(1)
    keep = np.float32(-0.0)
    for b in range(n):
        for o in range(m):
            shift = bias[o] if has_bias else keep
            if has_z:
                row = y[b, o]
                extra = z[b, o]
                if mode == 1:
                    for j in range(row.size):
                        v = (row[j] + shift) + extra[j]
                        v = p if v < p else v  # selects, not branches: vectorized
                        row[j] = q if v > q else v
                    continue
                for j in range(row.size):
                    row[j] = (row[j] + shift) + extra[j]
                shift = keep
            activate(y[b, o], shift, p, q, zero, one, mode)


def signature(numba: Any) -> list[Any]:
    types = numba.types
    return [types.void(types.Array(types.float32, 3, "C"),
                       types.Array(types.float32, 1, "C", readonly=True), types.boolean,
                       types.Array(types.float32, 3, "C", readonly=True), types.boolean,
                       types.float32, types.float32, types.int64)]


FLOAT32 = np.dtype(np.float32)  # native float32: an array's dtype is this very object
NO_BIAS = np.zeros(1, dtype=np.float32)  # read by the loop only with ``has_bias``
NO_RESIDUAL = np.zeros((1, 1, 1), dtype=np.float32)  # read only with ``has_z``


class ConvEpilogue(LoopOnceCompiledInUse):
    """``xp.conv_epilogue``: :meth:`ready` says whether the compiled loop is used for a dtype
    (numba installed and wanted, float32; compiled, or read from numba's disk cache, the first
    time it says yes); calling it adds ``bias`` (or nothing) and ``residual`` (or nothing: an
    array of ``y``'s shape) to ``y`` (n, m, ...) in place and applies ``activation`` (``(kind,
    p, q)``, see :data:`MODES`) when given."""

    function = staticmethod(bias_activate)
    signature = staticmethod(signature)
    helpers = (activate,)

    def __init__(self) -> None:
        super().__init__()
        self._modes: dict[Any, tuple[Any, Any, int]] = {}  # activation -> (p, q, mode)

    def __call__(self, y, bias, activation=None, residual=None):
        n, m = y.shape[:2]
        has_bias = bias is not None
        if not has_bias:
            bias = NO_BIAS
        elif bias.dtype is not FLOAT32 or bias.ndim != 1 or not bias.flags.c_contiguous:
            bias = np.ascontiguousarray(bias, dtype=np.float32).reshape(-1)
        has_z = residual is not None
        z = NO_RESIDUAL if not has_z else np.ascontiguousarray(
            residual, dtype=np.float32).reshape(n, m, -1)
        found = self._modes.get(activation)
        if found is None:
            mode, p, q = activation_mode(activation)
            found = self._modes[activation] = (np.float32(p), np.float32(q), mode)
        if y.dtype is FLOAT32 and y.flags.c_contiguous:  # every array as compiled: no checks
            self._unchecked(y.reshape(n, m, -1), bias, has_bias, z, has_z, *found)
        else:  # the checked call says what is wrong
            self._compiled(y.reshape(n, m, -1), bias, has_bias, z, has_z, *found)
        return y

    @property
    def _unchecked(self) -> Any:
        """The compiled loop without the per-call checks of its arrays' types (a module built
        ahead of time checks only item sizes; numba's own dispatcher checks anyway)."""
        return getattr(self._compiled, "unchecked", self._compiled)
