"""A CUDA device's figures for the roofline: GEMM peak, memory bandwidth, per-call launch time and
the host link's bandwidth and latency.

Measured once per device with CuPy (about a second) and cached as JSON beside the CPU EP's
profile (``EP_HOST_CACHE_DIR`` overrides the folder), keyed by the device's name, its compute
capability, the CUDA runtime and CuPy's version. Tests build :class:`DeviceFigures` directly.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ep_host import cache_dir
from ep_host.kernels import best_seconds, cached_figures

FIGURES_VERSION = 1


@dataclass(frozen=True)
class DeviceFigures:
    """``gemm_gflops``: float32 GEMM throughput; ``bandwidth_gbps``: device memory GB/s (read +
    write); ``launch_us``: one small CuPy call, Python dispatch included; ``link_gbps`` and
    ``link_latency_us``: a host<->device copy. ``source`` says where the numbers came from."""

    gemm_gflops: float
    bandwidth_gbps: float
    launch_us: float
    link_gbps: float
    link_latency_us: float
    source: str = "given"

    def __post_init__(self) -> None:
        for name in ("gemm_gflops", "bandwidth_gbps", "link_gbps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"DeviceFigures.{name} must be > 0, got {getattr(self, name)!r}")
        for name in ("launch_us", "link_latency_us"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"DeviceFigures.{name} must be >= 0, got {getattr(self, name)!r}")


# What a provider that has measured nothing (no CuPy, no device) says about its link: PCIe 4
# x16 in practice. Only used to describe an unavailable device; never to place nodes.
UNMEASURED_LINK = {"link_gbps": 12.0, "link_latency_us": 10.0}


def device_key(cupy: ModuleType, device: int = 0) -> str:
    props = cupy.cuda.runtime.getDeviceProperties(device)
    name = props.get("name", b"")
    name = name.decode() if isinstance(name, bytes) else str(name)
    raw = "|".join([name, str(props.get("major")), str(props.get("minor")),
                    str(cupy.cuda.runtime.runtimeGetVersion()), cupy.__version__,
                    str(FIGURES_VERSION)])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _device_seconds(cupy: ModuleType, fn: Any, repeat: int) -> float:
    """The fastest of ``repeat`` runs of ``fn`` on the current stream, timed by CUDA events."""
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(repeat):
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return best


def measure(cupy: ModuleType) -> DeviceFigures:
    """Time a 4096^3 float32 GEMM, a 256 MiB device copy, 2000 one-element adds and 64 MiB
    copies each way between host and device."""
    import numpy as np

    n = 4096
    a = cupy.random.random((n, n), dtype=cupy.float32)
    b = cupy.random.random((n, n), dtype=cupy.float32)
    a @ b  # cuBLAS handle and workspace
    gemm_s = _device_seconds(cupy, lambda: a @ b, 5)
    a = b = None  # free the device memory before the next measurement
    src = cupy.ones(64 * 1024 * 1024, dtype=cupy.float32)
    dst = cupy.empty_like(src)
    cupy.copyto(dst, src)
    copy_s = _device_seconds(cupy, lambda: cupy.copyto(dst, src), 5)
    moved = 2 * src.nbytes
    src = dst = None
    x = cupy.ones(1, dtype=cupy.float32)
    cupy.add(x, x)
    reps = 2000

    def adds() -> None:
        for _ in range(reps):
            cupy.add(x, x)
        cupy.cuda.get_current_stream().synchronize()

    launch_s = best_seconds(adds, 3) / reps
    host = np.ones(16 * 1024 * 1024, dtype=np.float32)
    dev = cupy.asarray(host)
    stream = cupy.cuda.get_current_stream()

    def upload() -> None:
        cupy.asarray(host)
        stream.synchronize()

    h2d_s = best_seconds(upload, 3)
    d2h_s = best_seconds(lambda: cupy.asnumpy(dev), 3)
    tiny = np.ones(1, dtype=np.float32)
    latency_s = best_seconds(lambda: cupy.asnumpy(cupy.asarray(tiny)), 50) / 2
    return DeviceFigures(
        gemm_gflops=2 * n**3 / gemm_s / 1e9,
        bandwidth_gbps=moved / copy_s / 1e9,
        launch_us=launch_s * 1e6,
        link_gbps=2 * host.nbytes / (h2d_s + d2h_s) / 1e9,
        link_latency_us=latency_s * 1e6,
        source="measured",
    )


def device_figures(cupy: ModuleType) -> DeviceFigures:
    """The cached figures of the current device, measuring and storing them the first time."""
    return cached_figures(cache_dir() / f"cuda-figures-{device_key(cupy)}.json",
                          DeviceFigures, lambda: measure(cupy))
