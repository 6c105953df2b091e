"""This machine's figures for OpenVINO's roofline: per-call overhead of a tiny compiled model, GEMM
GFLOP/s, memory GB/s and GFLOP/s per kind of convolution (``conv_kind``) of the CPU plugin on one
thread. Measured once per machine and OpenVINO
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
from ep_host.kernels import ConvCase, ConvSpeeds, best_seconds, cached_figures
from ep_host_openvino.runtime import CompiledModelKernel, compile_model, version

PROFILE_VERSION = 3


@dataclass(frozen=True)
class OpenVinoProfile(ConvSpeeds):
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


def _kernel(op_type: str, inputs: dict[str, list[int]], output: list[int]) -> CompiledModelKernel:
    """A one-op model compiled on one thread, run the way the EP runs partitions."""
    compiled = compile_model(_one_op_model(op_type, inputs, output), 1)
    return CompiledModelKernel(compiled, range(len(inputs)), [None], op_type)


def measure() -> OpenVinoProfile:
    """Time a 256x256 float32 MatMul, a 16 MiB Relu and a one-element Relu through the kernel
    that runs the EP's partitions, so the call overhead is the one partitions pay, and
    ``CONV_CASES`` the same way."""
    rng = np.random.default_rng(0)
    n = 256
    gemm = _kernel("MatMul", {"a": [n, n], "b": [n, n]}, [n, n])
    a, b = (rng.random((n, n), dtype=np.float32) for _ in range(2))
    gemm.run(a, b)
    gemm_s = best_seconds(lambda: gemm.run(a, b), 7)

    count = 4 * 1024 * 1024  # 16 MiB, past the caches
    stream = _kernel("Relu", {"x": [count]}, [count])
    big = np.ones(count, np.float32)
    stream.run(big)
    stream_s = best_seconds(lambda: stream.run(big), 5)

    tiny = _kernel("Relu", {"x": [1]}, [1])
    one = np.ones(1, np.float32)
    reps = 200

    def calls() -> None:
        for _ in range(reps):
            tiny.run(one)

    call_s = best_seconds(calls, 3) / reps

    def time_conv(case: ConvCase) -> float:
        conv = CompiledModelKernel(compile_model(case.model_bytes(), 1), [0], [None], "Conv")
        x = rng.random(case.x_shape, dtype=np.float32)
        conv.run(x)
        return max(best_seconds(lambda: conv.run(x), 3) - call_s, 1e-9)

    return OpenVinoProfile(
        peak_gflops=2 * n**3 / max(gemm_s - call_s, 1e-9) / 1e9,
        # read, write, and the copy out of OpenVINO's output tensor
        bandwidth_gbps=3 * big.nbytes / max(stream_s - call_s, 1e-9) / 1e9,
        call_overhead_us=call_s * 1e6,
        **ConvSpeeds.measured(time_conv),
    )


@cache
def openvino_profile() -> OpenVinoProfile:
    """The cached profile, measuring and storing it the first time."""
    return cached_figures(cache_dir() / f"openvino-profile-{_machine_key()}.json",
                          OpenVinoProfile, measure)
