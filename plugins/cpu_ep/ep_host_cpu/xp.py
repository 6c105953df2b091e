"""The array namespace the CPU EP binds: numpy, plus the few functions numpy lacks (``erf``).

A flat namespace (not a proxy), so ``xp.add`` costs one attribute lookup, as ``numpy.add`` does;
numpy's submodules that it imports only when first asked (``random``, ``f2py``, ``ma``,
``testing``...: 15 MiB and 99 modules together) are looked up in numpy when first asked here too.
"""

from __future__ import annotations

from types import SimpleNamespace

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


class NumpyNamespace(SimpleNamespace):
    """numpy's loaded names as attributes; the others (its lazily imported submodules) from
    numpy itself when asked."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(np, name)


def numpy_namespace() -> SimpleNamespace:
    ns = NumpyNamespace(**{k: v for k, v in vars(np).items() if not k.startswith("_")})
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
