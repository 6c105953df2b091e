"""This machine's figures for OpenVINO's roofline: per-call overhead of a tiny compiled model, GEMM
GFLOP/s and memory GB/s of the CPU plugin on one thread. Measured once per machine and OpenVINO
version (about half a second) and cached as JSON under ``ep_host.cache_dir()``.
"""

from __future__ import annotations

import hashlib
import os
import platform
from dataclasses import dataclass
from functools import cache

import numpy as np

from ep_host import cache_dir
from ep_host.kernels import best_seconds, cached_figures
from ep_host_openvino.runtime import compile_model, version

PROFILE_VERSION = 1


@dataclass(frozen=True)
class OpenVinoProfile:
    peak_gflops: float
    bandwidth_gbps: float
    call_overhead_us: float
    source: str = "measured"


def _machine_key() -> str:
    raw = "|".join([platform.node(), platform.machine(), platform.processor(), str(os.cpu_count()),
                    str(version()), str(PROFILE_VERSION)])
    return hashlib.sha256(raw.encode()).hexdigest()[:16]


def _one_op_model(op_type: str, inputs: dict[str, list[int]], output: list[int]) -> bytes:
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node(op_type, list(inputs), ["y"])], op_type,
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)
         for name, shape in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def measure() -> OpenVinoProfile:
    """Time a 256x256 float32 MatMul, a 16 MiB Relu and a one-element Relu in OpenVINO."""
    rng = np.random.default_rng(0)
    n = 256
    gemm = compile_model(_one_op_model("MatMul", {"a": [n, n], "b": [n, n]}, [n, n]), 1)
    gemm_request = gemm.create_infer_request()
    a, b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    gemm_request.infer([a, b])
    gemm_s = best_seconds(lambda: gemm_request.infer([a, b]), 7)

    count = 4 * 1024 * 1024  # 16 MiB, past the caches
    stream = compile_model(_one_op_model("Relu", {"x": [count]}, [count]), 1)
    stream_request = stream.create_infer_request()
    big = np.ones(count, np.float32)
    stream_request.infer([big])
    stream_s = best_seconds(lambda: stream_request.infer([big]), 5)

    tiny = compile_model(_one_op_model("Relu", {"x": [1]}, [1]), 1)
    tiny_request = tiny.create_infer_request()
    one = np.ones(1, np.float32)
    reps = 200

    def calls() -> None:
        for _ in range(reps):
            tiny_request.infer([one])

    call_s = best_seconds(calls, 3) / reps
    return OpenVinoProfile(
        peak_gflops=2 * n**3 / gemm_s / 1e9,
        bandwidth_gbps=2 * big.nbytes / stream_s / 1e9,
        call_overhead_us=call_s * 1e6,
    )


@cache
def openvino_profile() -> OpenVinoProfile:
    """The cached profile, measuring and storing it the first time."""
    return cached_figures(cache_dir() / f"openvino-profile-{_machine_key()}.json",
                          OpenVinoProfile, measure)
