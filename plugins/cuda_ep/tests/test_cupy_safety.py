"""Every shared kernel the CUDA EP claims is written against ``xp`` with names CuPy has: no
numpy or scipy on data, no ``.item()``, no object arrays. Read from the source, so a CPU EP
change that would break the GPU fails here, on a machine without one."""

import ast
import inspect
import textwrap
import types

import pytest
from ep_host_cuda.kernels import CUDA_KERNELS, FAMILIES
from ep_host_cuda.xp import CUPY_NAMES

from ep_host.kernels import REGISTRY

ALLOWED_XP = CUPY_NAMES | {"erf", "lib", "ElementwiseKernel"}
HOST_MODULES = {"np", "numpy", "scipy", "ml_dtypes"}
# Findings on paths the CUDA EP never reaches, each with the decline that keeps it away.
UNREACHABLE = {
    "_to_strings makes object arrays": "Cast to string: string tensors are declined (dtype)",
    "dropout uses xp.random, not in CUPY_NAMES": "training-mode Dropout is declined (attribute)",
    "convolve uses xp.grouped_conv2d, not in CUPY_NAMES": "Conv's direct variant is chosen only "
    "where the namespace has grouped_conv2d (the CPU EP's numba loops)",
}


def _tree(fn):
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            node.decorator_list = []  # the registration runs on the host, at import
    return tree


def _functions(fn, seen):
    """``fn`` and, transitively, the kernel-module functions it names."""
    if fn in seen:
        return seen
    seen.add(fn)
    for node in ast.walk(_tree(fn)):
        if isinstance(node, ast.Name):
            target = fn.__globals__.get(node.id)
            if isinstance(target, types.FunctionType) and target.__module__.startswith(
                    ("ep_host.kernels", "ep_host_cuda.kernels")):
                _functions(target, seen)
    return seen


def problems(fn):
    found = []
    for f in _functions(fn, set()):
        for node in ast.walk(_tree(f)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id in HOST_MODULES:
                    found.append(f"{f.__name__} calls {node.value.id}.{node.attr}")
                if node.value.id == "xp" and node.attr not in ALLOWED_XP:
                    found.append(f"{f.__name__} uses xp.{node.attr}, not in CUPY_NAMES")
            if isinstance(node, ast.Attribute) and node.attr == "item":
                found.append(f"{f.__name__} calls .item() (a host sync)")
            if isinstance(node, ast.keyword) and node.arg == "dtype" and isinstance(
                    node.value, ast.Name) and node.value.id in ("object", "str"):
                found.append(f"{f.__name__} makes {node.value.id} arrays")
    return sorted(found)


def claimed_specs():
    out = {}
    for key, spec in REGISTRY.specs.items():
        if key[:2] in FAMILIES and key not in CUDA_KERNELS.specs:
            out[key] = spec
    out.update(CUDA_KERNELS.specs)
    return out


SPECS = claimed_specs()


@pytest.mark.parametrize("key", sorted(SPECS), ids=lambda k: f"{k[1]}-{k[2]}")
def test_claimed_kernel_is_cupy_safe(key):
    spec = SPECS[key]
    assert spec.kernel_class is None, "a kernel class is not read here: review it by hand"
    assert [p for p in problems(spec.fn) if p not in UNREACHABLE] == []


def test_every_family_has_a_kernel():
    families = {key[:2] for key in SPECS}
    assert families == set(FAMILIES)


def test_the_audit_catches_a_numpy_call():
    def bad(xp, x):
        import numpy as np
        return np.sort(x) + xp.fft(x)

    assert problems(bad) == ["bad calls np.sort", "bad uses xp.fft, not in CUPY_NAMES"]


def test_cuda_kernels_take_no_in_place_path():
    """The exemption above holds only while the CUDA EP's kernels never get ``out=``."""
    from ep_host_cuda.provider import CudaKernel

    from ep_host import FunctionKernel, Kernel

    inner = FunctionKernel(lambda x: x)
    inner.inplace = (0,)
    kernel = CudaKernel(inner, None)
    assert kernel.inplace == () and kernel.call is None and isinstance(kernel, Kernel)
