"""The array namespace the CPU EP binds: numpy, plus the few functions numpy lacks (``erf``).

Some of numpy's functions are Python wrappers that cost more than the small arrays of a
scikit-learn export take to compute (numpy 2.4, one thread, a 7 x 10 float32 array; the
wrapper against what it calls): ``np.max`` 7.3 against 2.6 us (7 x 2, axis 1), ``np.sum``
with a dtype 4.1 against 1.9, ``np.prod`` 3.8 against 1.6, ``np.argmax`` 3.0 against 0.7,
``np.argsort`` 2.1 against 0.7, ``np.take`` 1.5 against 0.4, ``np.expand_dims`` 2.8 against
0.2, ``np.flip`` 2.4 against 0.2. For an ndarray this namespace calls what they call (the
ufunc's ``reduce``, the array's own method, a reshape or a slice) with the arguments numpy
would pass; anything else (a list, a subclass, ``initial=``, ``where=``, a tuple of axes
where the shortcut takes one) takes numpy's function.

A flat namespace (not a proxy), so ``xp.add`` costs one attribute lookup, as ``numpy.add`` does;
numpy's submodules that it imports only when first asked (``random``, ``f2py``, ``ma``,
``testing``...: 15 MiB and 99 modules together) are looked up in numpy when first asked here too.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from ep_host_cpu.average_pool import CompiledAveragePool3x3s1
from ep_host_cpu.conv_epilogue import ConvEpilogue
from ep_host_cpu.coupling import CompiledPairwiseCoupling
from ep_host_cpu.erf import erf
from ep_host_cpu.fast_gelu import CompiledFastGelu
from ep_host_cpu.gelu import BiasGeluFloat32, GeluFloat32
from ep_host_cpu.global_mean import CompiledPlaneMeans
from ep_host_cpu.grouped_conv import GroupedConv2d
from ep_host_cpu.hard_sigmoid import CompiledHardSigmoid
from ep_host_cpu.im2col import ImageColumns
from ep_host_cpu.layer_norm import CompiledLayerNorm, CompiledSkipLayerNorm
from ep_host_cpu.linear_rows import CompiledLinearScores, CompiledNormalizer, CompiledScaler
from ep_host_cpu.max_pool import CompiledMaxPool3x3s1, CompiledMaxPool3x3s2
from ep_host_cpu.packed_gemm import PackedGemm
from ep_host_cpu.resample import CompiledTaps
from ep_host_cpu.sigmoid import CompiledSigmoid
from ep_host_cpu.softmax import CompiledSoftmax
from ep_host_cpu.svm_decisions import CompiledSvmDecisions
from ep_host_cpu.tree_walk import CompiledTreeWalk
from ep_host_cpu.winograd import WinogradTransforms


def _reduction(reduce: Any, fallback: Any) -> Any:
    """``fallback`` (``np.sum``, ``np.prod``) through ``reduce`` (its ufunc's) for an ndarray."""

    def reduction(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
                  keepdims: bool = False, **more: Any) -> Any:
        if a.__class__ is np.ndarray and not more:
            return reduce(a, axis, dtype, out, keepdims)
        return fallback(a, axis=axis, dtype=dtype, out=out, keepdims=keepdims, **more)

    reduction.__name__ = reduction.__qualname__ = fallback.__name__
    reduction.__doc__ = fallback.__doc__
    return reduction


def _extreme(reduce: Any, fallback: Any) -> Any:
    """``fallback`` (``np.max``, ``np.min``: no dtype) through ``reduce`` for an ndarray."""

    def extreme(a: Any, axis: Any = None, out: Any = None, keepdims: bool = False,
                **more: Any) -> Any:
        if a.__class__ is np.ndarray and not more:
            return reduce(a, axis, None, out, keepdims)
        return fallback(a, axis=axis, out=out, keepdims=keepdims, **more)

    extreme.__name__ = extreme.__qualname__ = fallback.__name__
    extreme.__doc__ = fallback.__doc__
    return extreme


def _method(name: str, fallback: Any) -> Any:
    """``fallback`` (``np.argmax``, ``np.take``...) as the ndarray method it wraps, for an
    ndarray; the arguments as numpy's function takes them."""
    method = getattr(np.ndarray, name)

    def call(a: Any, *args: Any, **kwargs: Any) -> Any:
        if a.__class__ is np.ndarray:
            return method(a, *args, **kwargs)
        return fallback(a, *args, **kwargs)

    call.__name__ = call.__qualname__ = fallback.__name__
    call.__doc__ = fallback.__doc__
    return call


def _argsort(a: Any, axis: Any = -1, kind: Any = None, order: Any = None, **more: Any) -> Any:
    if a.__class__ is np.ndarray and not more:
        return a.argsort(axis, kind, order)
    return np.argsort(a, axis, kind, order, **more)


def _expand_dims(a: Any, axis: Any) -> Any:
    if a.__class__ is np.ndarray and axis.__class__ is int and -a.ndim - 1 <= axis <= a.ndim:
        at = axis % (a.ndim + 1)
        return a.reshape(a.shape[:at] + (1,) + a.shape[at:])
    return np.expand_dims(a, axis)


def _flip(a: Any, axis: Any = None) -> Any:
    if a.__class__ is np.ndarray and axis.__class__ is int and -a.ndim <= axis < a.ndim:
        return a[(slice(None),) * (axis % a.ndim) + (slice(None, None, -1),)]
    return np.flip(a, axis)


for _shortcut in (_argsort, _expand_dims, _flip):  # under numpy's name, with its help
    _shortcut.__name__ = _shortcut.__qualname__ = _shortcut.__name__.lstrip("_")
    _shortcut.__doc__ = getattr(np, _shortcut.__name__).__doc__

METHODS = ("argmax", "argmin", "take", "squeeze", "cumsum", "cumprod")
# numpy's functions this namespace replaces by its shortcuts (see the module's docstring)
SHORTCUTS = frozenset({"sum", "prod", "max", "min", "amax", "amin", "argsort", "expand_dims",
                       "flip", *METHODS})


class NumpyNamespace(SimpleNamespace):
    """numpy's loaded names as attributes; the others (its lazily imported submodules) from
    numpy itself when asked."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(np, name)


def numpy_namespace() -> SimpleNamespace:
    ns = NumpyNamespace(**{k: v for k, v in vars(np).items() if not k.startswith("_")})
    ns.sum = _reduction(np.add.reduce, np.sum)
    ns.prod = _reduction(np.multiply.reduce, np.prod)
    ns.max, ns.amax = _extreme(np.maximum.reduce, np.max), _extreme(np.maximum.reduce, np.amax)
    ns.min, ns.amin = _extreme(np.minimum.reduce, np.min), _extreme(np.minimum.reduce, np.amin)
    for name in METHODS:
        setattr(ns, name, _method(name, getattr(np, name)))
    ns.argsort, ns.expand_dims, ns.flip = _argsort, _expand_dims, _flip
    ns.erf = erf  # float32 by a fast fit (ep_host_cpu.erf), other types by scipy
    ns.gelu_float32 = GeluFloat32()  # the erf Gelu of float32: numba's pass on large arrays
    ns.bias_gelu_float32 = BiasGeluFloat32()  # the same after a bias, for BiasGelu
    ns.fast_gelu_float32 = CompiledFastGelu()  # numba's one pass for FastGelu (tanh form)
    ns.grouped_conv2d = GroupedConv2d()  # numba's loops, compiled when a Conv first asks
    ns.conv_epilogue = ConvEpilogue()  # numba's bias and clamp pass after a Conv's GEMMs
    ns.im2col_columns = ImageColumns()  # numba's copy of a stride-2 Conv's im2col columns
    ns.winograd_transforms = WinogradTransforms()  # numba's, for Conv's Winograd variant
    ns.compiled_layer_norm = CompiledLayerNorm()  # numba's, for float32 LayerNormalization
    ns.compiled_skip_layer_norm = CompiledSkipLayerNorm()  # numba's, SkipLayerNormalization
    ns.compiled_softmax = CompiledSoftmax()  # numba's, for float32 Softmax over the last axis
    ns.compiled_sigmoid = CompiledSigmoid()  # numba's, compiled when a large Sigmoid first runs
    ns.compiled_hard_sigmoid = CompiledHardSigmoid()  # numba's, for HardSigmoid and HardSwish
    ns.compiled_max_pool_3x3s2 = CompiledMaxPool3x3s2()  # numba's, for MaxPool 3x3 stride 2
    ns.compiled_max_pool_3x3s1 = CompiledMaxPool3x3s1()  # numba's, for MaxPool 3x3 stride 1
    ns.compiled_average_pool_3x3s1 = CompiledAveragePool3x3s1()  # numba's, AveragePool 3x3 s1
    ns.compiled_plane_means = CompiledPlaneMeans()  # numba's, for GlobalAveragePool's short planes
    ns.compiled_taps = CompiledTaps()  # numba's, for Resize's linear and cubic taps (float32)
    ns.compiled_tree_walk = CompiledTreeWalk()  # numba's, for a few rows of a tree ensemble
    ns.compiled_svm_decisions = CompiledSvmDecisions()  # numba's, for a few rows of an SVM
    ns.compiled_pairwise_coupling = CompiledPairwiseCoupling()  # numba's, SVM probabilities
    ns.compiled_linear_scores = CompiledLinearScores()  # numba's, for a few rows of a linear model
    ns.compiled_scaler = CompiledScaler()  # numba's one pass, for a float32 Scaler
    ns.compiled_normalizer = CompiledNormalizer()  # numba's one pass, for a float32 Normalizer
    ns.packed_gemm = PackedGemm()  # oneMKL's packed GEMM for constant weights, where installed
    ns.__name__ = "numpy"
    return ns


numpy_xp = numpy_namespace()
