"""The CUDA EP's hooks. :class:`CudaProvider` is the provider, built with an array namespace, a
device and the device's figures; the module-level hooks (the entry point) delegate to one built
lazily with CuPy, or, where CuPy or a device is missing, say why and decline every node.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from typing import Any

from ep_host import (
    CaptureSupport,
    Cost,
    Device,
    Kernel,
    KernelMatch,
    NodeView,
    ProviderContext,
    ProviderInfo,
    ReasonCode,
    ValueView,
    deny,
    hookimpl,
)
from ep_host.kernels import KernelSpec, check_node, work
from ep_host_cuda import __version__
from ep_host_cuda.device import cuda_device, simulated_device
from ep_host_cuda.figures import UNMEASURED_LINK, DeviceFigures, device_figures
from ep_host_cuda.kernels import DEVICE_TYPES, EXTRA_CHECKS, Family, capture_support, lookup
from ep_host_cuda.xp import cupy_namespace, host_namespace

INSTALL_HINT = "pip install 'ep-host-cuda[cuda12]' (or [cuda13] for CUDA 13 drivers)"
NAME = "CUDA EP"

ALIASES = ("CUDAExecutionProvider",)  # onnxruntime's name for this provider
GRAPH_OPTION = "enable_cuda_graph"  # onnxruntime's provider option for CUDA graphs


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


# -- the cost model ---------------------------------------------------------------------------


def estimate(spec: KernelSpec, family: Family, node: NodeView, figures: DeviceFigures) -> Cost:
    """A roofline at the device's figures: the kernel's flops at the GEMM peak, its bytes at the
    memory bandwidth, plus one launch per device call the kernel makes."""
    flops, nbytes = work(spec, node)  # the same work the CPU EP prices
    return Cost.roofline(flops=flops, bytes_moved=nbytes, peak_gflops=figures.gemm_gflops,
                         bandwidth_gbps=figures.bandwidth_gbps,
                         launch_us=family.launches * figures.launch_us)


# -- the provider -----------------------------------------------------------------------------


class CudaKernel(Kernel):
    """A shared or GPU-specific kernel run on the provider's stream, with its capture answer."""

    def __init__(self, inner: Kernel, capture: CaptureSupport, stream: Any = None):
        self.inner = inner
        self.capture = capture
        self.stream = stream
        self.thread_safe = inner.thread_safe

    def prepare(self, constants: Any) -> None:
        self.inner.prepare(constants)

    def prepacked(self) -> Any:
        return self.inner.prepacked()

    def adopt_prepacked(self, key: str, state: Any) -> None:
        self.inner.adopt_prepacked(key, state)

    def workspace(self, inputs: Any) -> Any:
        return self.inner.workspace(inputs)

    def run(self, *inputs: Any, **kwargs: Any) -> Any:
        if self.stream is None:
            return self.inner.run(*inputs, **kwargs)
        with self.stream:
            return self.inner.run(*inputs, **kwargs)

    def capture_support(self) -> CaptureSupport:
        return self.capture

    def __repr__(self) -> str:
        return f"CudaKernel({self.inner!r})"


# the device types as a decline names them, joined once
DEVICE_TYPE_LIST = "/".join(sorted(DEVICE_TYPES))


def _device_value(node: NodeView, value: ValueView, role: str) -> None:
    if value.kind in ("sequence", "optional", "map"):
        deny("{}: {} takes tensors, got a {} for {} {!r}; sequences run on cpu", node.op_type,
             NAME, value.kind, role, value.name, code="dtype")
    dt = value.dtype
    if dt is not None and dt.name not in DEVICE_TYPES:
        deny("{}: {} keeps {} tensors on the device, got {} for {} {!r}; CuPy has no {} arrays, "
             "so this node runs on cpu", node.op_type, NAME, DEVICE_TYPE_LIST, dt.name, role,
             value.name, dt.name, code="dtype")


def _device_types(spec: KernelSpec, node: NodeView) -> None:
    """Every tensor that lives on the device must be one CuPy stores."""
    host = spec.host_inputs
    for i, value in enumerate(node.inputs):
        if value is not None and i not in host:
            _device_value(node, value, "input")
    for value in node.outputs:
        if value is not None:
            _device_value(node, value, "output")


@cache
def _narrowed(spec: KernelSpec, family: Family) -> KernelSpec:
    """``spec`` taking only the element types ``family`` allows (made once per pair)."""
    if spec.dtypes is None:
        return spec
    return replace(spec, dtypes=spec.dtypes & family.dtypes)


def _compute_types(spec: KernelSpec, family: Family, node: NodeView) -> None:
    first = node.inputs[0] if node.inputs else None
    if first is None or first.dtype is None or 0 in spec.host_inputs:
        return
    allowed = family.dtypes if spec.dtypes is None else _narrowed(spec, family).dtypes
    name = first.dtype.name
    if name not in allowed:
        hint = f"; {family.hint}" if family.hint else ""
        deny("{}: {} takes {} input, got {}{}", node.op_type, NAME, "/".join(sorted(allowed)),
             name, hint, code="dtype")


class CudaProvider:
    """The CUDA EP over an array namespace ``xp`` (CuPy, or numpy for tests), a ``device`` and
    its ``figures``. Kernels run on ``stream`` when one is given (CuPy: one non-default stream
    per provider, shared by its copies)."""

    def __init__(self, xp: Any, device: Device, figures: DeviceFigures, *, name: str = "cuda",
                 stream: Any = None, description: str = "CuPy kernels on an NVIDIA GPU"):
        self.xp = xp
        self.device = device
        self.figures = figures
        self.name = name
        self.stream = stream
        self.description = description

    def claim(self, node: NodeView) -> tuple[KernelSpec, Family]:
        """The spec and family that compute ``node``; raises Decline with the reason if none."""
        spec, family = lookup(node, NAME)
        _device_types(spec, node)
        _compute_types(spec, family, node)
        check_node(_narrowed(spec, family), node, NAME)
        extra = EXTRA_CHECKS.get((node.domain, node.op_type))
        if extra is not None:
            extra(node, NAME)
        return spec, family

    def cost(self, node: NodeView) -> Cost:
        spec, family = self.claim(node)
        return estimate(spec, family, node, self.figures)

    @hookimpl
    def ep_host_provider_info(self) -> ProviderInfo:
        return ProviderInfo(name=self.name, device=self.device, version=__version__,
                            description=self.description,
                            aliases=ALIASES if self.name == "cuda" else (),
                            device_graph_option=GRAPH_OPTION)

    @hookimpl
    def ep_host_supports_op(self, node: NodeView, context: ProviderContext) -> KernelMatch:
        spec, family = self.claim(node)
        return KernelMatch.supported(estimate(spec, family, node, self.figures),
                                     host_inputs=spec.host_inputs)

    @hookimpl
    def ep_host_create_kernel(self, node: NodeView, context: ProviderContext) -> Kernel:
        spec, family = self.claim(node)
        return CudaKernel(spec.make(self.xp, node, context), capture_support(spec, family, node),
                          self.stream)


def simulated(figures: DeviceFigures, *, name: str = "cuda", device: str = "sim:0"
              ) -> CudaProvider:
    """The CUDA EP on numpy (CuPy's names only) and a host-memory device with ``figures``: the
    same claims, kernels and costs as on a GPU, computed on the host. For tests."""
    return CudaProvider(host_namespace(), simulated_device(figures, device), figures, name=name,
                        description="the CUDA EP's kernels on numpy, in host memory (simulated)")


# -- the entry point: module-level hooks over a default provider --------------------------------


@cache
def default_provider() -> CudaProvider | None:
    """The provider on CuPy's current device, or ``None`` where CUDA is not usable."""
    usable, _ = cuda_status()
    if not usable:
        return None
    import cupy

    figures = device_figures(cupy)
    stream = cupy.cuda.Stream(non_blocking=True)
    index = cupy.cuda.runtime.getDevice()
    return CudaProvider(cupy_namespace(cupy), cuda_device(cupy, stream, figures, index), figures,
                        stream=stream)


@cache
def provider_info() -> ProviderInfo:
    usable, reason = cuda_status()
    if usable:
        try:
            provider = default_provider()
        except Exception as exc:  # measuring the device, making its stream
            provider, reason = None, (f"a CUDA device is visible but setting it up failed "
                                      f"({type(exc).__name__}: {exc}); check the driver with "
                                      "nvidia-smi")
        if provider is not None:
            return provider.ep_host_provider_info()
    device = Device(name="cuda:0", kind="cuda", **UNMEASURED_LINK)
    return ProviderInfo(name="cuda", device=device, version=__version__, available=False,
                        reason=reason or "CUDA is not usable here",
                        description="CuPy kernels on an NVIDIA GPU", aliases=ALIASES,
                        device_graph_option=GRAPH_OPTION)


def _unavailable(node: NodeView) -> KernelMatch:
    return KernelMatch.unsupported(f"{node.op_type}: CUDA EP unavailable: {provider_info().reason}",
                                   ReasonCode.DEVICE)


@hookimpl
def ep_host_provider_info() -> ProviderInfo:
    return provider_info()


@hookimpl
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    provider = default_provider() if provider_info().available else None
    if provider is None:
        return _unavailable(node)
    return provider.ep_host_supports_op(node, context)


@hookimpl
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    provider = default_provider() if provider_info().available else None
    if provider is None:
        raise RuntimeError(f"CUDA EP unavailable: {provider_info().reason}")
    return provider.ep_host_create_kernel(node, context)
