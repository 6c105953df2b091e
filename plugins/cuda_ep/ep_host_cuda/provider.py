"""The CUDA EP's hooks. Until its kernels land, it reports whether CUDA is usable here and, when
it is not, why, in words a user can act on; every node is then declined with that reason."""

from __future__ import annotations

from functools import cache

from ep_host import (
    Device,
    Kernel,
    KernelMatch,
    NodeView,
    ProviderContext,
    ProviderInfo,
    ReasonCode,
    hookimpl,
)
from ep_host_cuda import __version__

INSTALL_HINT = "pip install 'ep-host-cuda[cuda12]' (or [cuda13] for CUDA 13 drivers)"


@cache
def cuda_status() -> tuple[bool, str]:
    """``(usable, reason)``: whether CuPy imports and sees a CUDA device, and if not, why."""
    try:
        import cupy
    except ImportError as exc:
        missing = exc.name or "cupy"
        return False, f"{missing} is not installed: {INSTALL_HINT}"
    except Exception as exc:  # a broken CuPy install raises more than ImportError
        return False, (f"cupy failed to import ({type(exc).__name__}: {exc}); "
                       f"reinstall: {INSTALL_HINT}")
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        text = str(exc)
        if "insufficient" in text.lower() or "driver" in text.lower():
            return False, f"the NVIDIA driver is too old or missing for this CuPy build: {text}"
        return False, f"no CUDA device visible: {text}"
    if count < 1:
        return False, "no CUDA device visible (CUDA_VISIBLE_DEVICES may hide them)"
    return True, ""


@cache
def provider_info() -> ProviderInfo:
    usable, reason = cuda_status()
    device = Device(name="cuda:0", kind="cuda", link_gbps=12.0, link_latency_us=10.0)
    return ProviderInfo(
        name="cuda", device=device, version=__version__, available=False,
        reason=reason if not usable else
        "the CUDA EP's kernels are not implemented yet in this version; use the cpu provider",
        description="CuPy kernels on an NVIDIA GPU",
    )


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    return provider_info()


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    info = provider_info()
    return KernelMatch.unsupported(f"{node.op_type}: CUDA EP unavailable: {info.reason}",
                                   ReasonCode.DEVICE)


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    raise RuntimeError(f"CUDA EP unavailable: {provider_info().reason}")
