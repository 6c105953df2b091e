"""This machine's CPU figures for the roofline: peak GFLOP/s, memory GB/s, per-call dispatch,
and the GFLOP/s this EP's own convolution kernels reach per ``conv_kind``.

Measured once per machine (about 1 s) and cached as JSON under the user cache directory
(``EP_HOST_CACHE_DIR`` overrides it), keyed by host, CPU, numpy version and whether numba's
compiled kernels are used (``ep_host_cpu.jit``).
"""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from functools import cache

import numpy as np

from ep_host import ProviderContext, cache_dir, load_model
from ep_host.kernels import REGISTRY, ConvCase, ConvSpeeds, best_seconds, cached_figures
from ep_host_cpu.jit import numba_wanted
from ep_host_cpu.xp import numpy_xp

PROFILE_VERSION = 3  # 3: depthwise and grouped convolutions compiled by numba


@dataclass(frozen=True)
class MachineProfile(ConvSpeeds):
    peak_gflops: float
    bandwidth_gbps: float
    dispatch_us: float
    source: str = "measured"


def _machine_key() -> str:
    raw = "|".join([platform.node(), platform.machine(), platform.processor(), str(os.cpu_count()),
                    np.__version__, str(PROFILE_VERSION), f"numba={numba_wanted()}"])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def measure() -> MachineProfile:
    """Time a float32 GEMM, a large copy and a one-element add on this machine."""
    rng = np.random.default_rng(0)
    n = 256
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    a @ b
    gemm_s = best_seconds(lambda: a @ b, 7)
    src = np.ones(4 * 1024 * 1024, dtype=np.float32)  # 16 MiB, past the caches
    dst = np.empty_like(src)
    np.copyto(dst, src)
    copy_s = best_seconds(lambda: np.copyto(dst, src), 5)
    x = np.ones(1, np.float32)
    reps = 2000

    def adds() -> None:
        for _ in range(reps):
            np.add(x, x)

    dispatch_s = best_seconds(adds, 3) / reps
    return MachineProfile(
        peak_gflops=2 * n**3 / gemm_s / 1e9,
        bandwidth_gbps=2 * src.nbytes / copy_s / 1e9,
        dispatch_us=dispatch_s * 1e6,
        **ConvSpeeds.measured(time_conv),
    )


def time_conv(case: ConvCase) -> float:
    """The best time of this EP's Conv kernel (the library's, weights prepared as in a
    session) on ``case``."""
    node = load_model(case.model_bytes()).graph.nodes[0]
    kernel = REGISTRY.lookup(node, "CPU EP").make(numpy_xp, node, ProviderContext("cpu"))
    x, w = np.random.default_rng(1).random(case.x_shape, dtype=np.float32), case.weight()
    kernel.prepare({1: w})  # as the host does for a constant weight
    kernel.run(x, w)
    return best_seconds(lambda: kernel.run(x, w), 3)


@cache
def machine_profile() -> MachineProfile:
    """The cached profile, measuring and storing it the first time."""
    return cached_figures(cache_dir() / f"cpu-profile-{_machine_key()}.json", MachineProfile,
                          measure)
