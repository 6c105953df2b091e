"""The array namespaces the CUDA EP binds: CuPy (plus ``erf`` from ``cupyx.scipy.special``) on a
GPU, and for tests without one, numpy cut down to the names CuPy also has.

Both are flat namespaces built on first use; importing this module imports neither CuPy nor
scipy.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace

import numpy as np

# The top-level names the shared kernels may use, each one numpy and CuPy both define with the
# same meaning (written from CuPy's documented API; checked against a real CuPy only by the GPU
# tests). A kernel that reaches for anything else fails under the host namespace with
# AttributeError, in the tests, before it can fail on a GPU.
CUPY_NAMES = frozenset("""
    abs absolute add all any arange arccos arccosh arcsin arcsinh arctan arctan2 arctanh argmax
    argmin argsort around array asarray ascontiguousarray atleast_1d bitwise_and bitwise_not
    bitwise_or bitwise_xor bool_ broadcast_arrays broadcast_to can_cast cbrt ceil clip
    concatenate copy copysign copyto cos cosh count_nonzero cumprod cumsum diagonal divide dot
    dtype e einsum empty empty_like equal exp exp2 expand_dims expm1 eye finfo fix flip float16
    float32
    float64 floor floor_divide fmax fmin fmod frexp full full_like greater greater_equal hypot
    identity iinfo inf int8 int16 int32 int64 invert isclose isfinite isinf isnan ldexp
    left_shift less less_equal linspace log log10 log1p log2 logaddexp logical_and logical_not
    logical_or logical_xor matmul max maximum mean min minimum mod moveaxis multiply nan ndarray
    negative newaxis nextafter not_equal ones ones_like outer pad pi power prod promote_types
    ravel reciprocal remainder repeat reshape result_type right_shift rint roll sign
    signbit sin sinh sort split sqrt square squeeze stack std subtract sum swapaxes take
    take_along_axis tan tanh tensordot tile transpose tril triu true_divide trunc uint8 uint16
    uint32 uint64 var where zeros zeros_like
""".split())


def _namespace(module: ModuleType, names: frozenset[str] | None) -> SimpleNamespace:
    keys = names if names is not None else (k for k in dir(module) if not k.startswith("_"))
    return SimpleNamespace(**{k: getattr(module, k) for k in keys if hasattr(module, k)})


def cupy_namespace(cupy: ModuleType | None = None) -> SimpleNamespace:
    """CuPy's namespace with ``erf``; ``cupy`` defaults to importing it (ImportError if absent)."""
    if cupy is None:
        import cupy
    from cupyx.scipy import special

    ns = _namespace(cupy, None)
    ns.erf = special.erf
    ns.__name__ = "cupy"
    return ns


def host_namespace() -> SimpleNamespace:
    """numpy restricted to :data:`CUPY_NAMES` (and ``lib.stride_tricks.as_strided``, ``erf``):
    the CUDA EP's kernels run on it as they would on CuPy, computing on the host."""
    from scipy.special import erf

    ns = _namespace(np, CUPY_NAMES)
    ns.lib = SimpleNamespace(stride_tricks=SimpleNamespace(
        as_strided=np.lib.stride_tricks.as_strided))
    ns.erf = erf
    ns.__name__ = "numpy (CuPy's names)"
    return ns


def is_cupy(xp: object) -> bool:
    """Whether ``xp`` is CuPy's namespace (it can compile fused elementwise kernels)."""
    return hasattr(xp, "ElementwiseKernel")
