"""This machine's figures for onnxruntime on one thread: the per-call overhead of a tiny
session run, GEMM GFLOP/s, memory GB/s, and GFLOP/s per kind of convolution (``conv_kind``).
Measured once per machine (well under a second) and cached as JSON under
``ep_host.cache_dir()``, keyed by host, CPU and onnxruntime version.
"""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from functools import cache

import numpy as np

from ep_host import cache_dir
from ep_host.kernels import ConvCase, ConvSpeeds, best_seconds, cached_figures
from ep_host_onnxruntime import runtime

PROFILE_VERSION = 2
GEMM_SIZE = 256
COPY_ELEMENTS = 4 * 1024 * 1024  # 16 MiB of float32, past the caches


@dataclass(frozen=True)
class RuntimeProfile(ConvSpeeds):
    call_overhead_us: float
    peak_gflops: float
    bandwidth_gbps: float
    source: str = "measured"


def _machine_key() -> str:
    raw = "|".join([platform.node(), platform.machine(), platform.processor(),
                    str(os.cpu_count()), runtime.version(), str(PROFILE_VERSION)])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _one_op_session(op_type: str, shapes: dict[str, list[int]], out_shape: list[int]):
    from onnx import TensorProto, helper

    names = list(shapes)
    graph = helper.make_graph(
        [helper.make_node(op_type, names, ["y"])], "profile",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return runtime.session(model.SerializeToString(), threads=1, optimize=True)


def measure() -> RuntimeProfile:
    """Time a one-element Add, a 256^3 MatMul, a 16 MiB Relu and ``CONV_CASES`` in onnxruntime
    sessions."""
    rng = np.random.default_rng(0)
    tiny = _one_op_session("Add", {"a": [1], "b": [1]}, [1])
    one = np.ones(1, np.float32)
    feed = {"a": one, "b": one}
    reps = 200

    def tiny_runs() -> None:
        for _ in range(reps):
            tiny.run(None, feed)

    tiny_runs()
    overhead_s = best_seconds(tiny_runs, 3) / reps
    n = GEMM_SIZE
    gemm = _one_op_session("MatMul", {"a": [n, n], "b": [n, n]}, [n, n])
    gemm_feed = {"a": rng.random((n, n), dtype=np.float32),
                 "b": rng.random((n, n), dtype=np.float32)}
    gemm.run(None, gemm_feed)
    gemm_s = max(best_seconds(lambda: gemm.run(None, gemm_feed), 5) - overhead_s, 1e-9)
    copy = _one_op_session("Relu", {"x": [COPY_ELEMENTS]}, [COPY_ELEMENTS])
    copy_feed = {"x": np.ones(COPY_ELEMENTS, np.float32)}
    copy.run(None, copy_feed)
    copy_s = max(best_seconds(lambda: copy.run(None, copy_feed), 5) - overhead_s, 1e-9)

    def time_conv(case: ConvCase) -> float:
        conv = runtime.session(case.model_bytes(), threads=1, optimize=True)
        feed = {"x": rng.random(case.x_shape, dtype=np.float32)}
        conv.run(None, feed)
        return max(best_seconds(lambda: conv.run(None, feed), 3) - overhead_s, 1e-9)

    return RuntimeProfile(
        call_overhead_us=overhead_s * 1e6,
        peak_gflops=2 * n**3 / gemm_s / 1e9,
        bandwidth_gbps=2 * 4 * COPY_ELEMENTS / copy_s / 1e9,
        **ConvSpeeds.measured(time_conv),
    )


@cache
def runtime_profile() -> RuntimeProfile:
    """The cached profile, measuring and storing it the first time."""
    return cached_figures(cache_dir() / f"onnxruntime-profile-{_machine_key()}.json",
                          RuntimeProfile, measure)
