"""OpenVINO itself, as this EP uses it: one ``Core`` per process, ONNX models read and compiled
for the CPU plugin at full float32 precision, OpenVINO's error text cut to the line that says
what went wrong, and the kernel that runs a compiled model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from ep_host import Kernel

DEVICE = "CPU"
INSTALL_HINT = "openvino is not installed: pip install ep-host-openvino"

# Lines of OpenVINO's exceptions that say where, not what.
_BOILERPLATE = ("Exception from", "Check '", "FrontEnd API failed", "Model wasn't fully converted",
                "Summary:", "To facilitate", "While validating", "Failed operations detailed log")


class CompileError(RuntimeError):
    """OpenVINO could not read or compile a model; the message names OpenVINO's own words."""


def openvino_module() -> Any:
    """The ``openvino`` module, imported on first use (``ImportError`` when it is missing)."""
    import openvino

    return openvino


def version() -> str | None:
    """OpenVINO's version, or ``None`` when it is not importable."""
    try:
        return str(openvino_module().__version__)
    except ImportError:
        return None


@cache
def core() -> Any:
    """The process's one ``openvino.Core``."""
    return openvino_module().Core()


def compile_config(threads: int) -> dict[str, Any]:
    """CPU plugin settings: ``threads`` inference threads, and float32 kept float32 (on CPUs with
    bf16 or fp16 units OpenVINO would otherwise lower float32 math to them by default)."""
    return {"INFERENCE_NUM_THREADS": max(1, threads), "INFERENCE_PRECISION_HINT": "f32"}


def read_model(model_bytes: bytes) -> Any:
    """An ONNX model (serialized) converted by OpenVINO's ONNX frontend."""
    return core().read_model(model_bytes, b"")


def compile_model(model: Any, threads: int) -> Any:
    """``model`` (an ``ov.Model`` or serialized ONNX) compiled for the CPU plugin."""
    if isinstance(model, bytes):
        model = read_model(model)
    return core().compile_model(model, DEVICE, compile_config(threads))


def trimmed_message(error: BaseException) -> str:
    """The line of an OpenVINO exception that says what went wrong ("No conversion rule found
    for operations: Det-17", "This operation does not support input with element type: string"),
    else its last informative line."""
    lines = [line.strip().removeprefix("-- ").strip() for line in str(error).splitlines()]
    lines = [line for line in lines if line]
    for marker in ("No conversion rule found", "not support", "Not supported", "not supported"):
        found = [line for line in lines if marker in line]
        if found:
            return found[-1]
    informative = [line for line in lines if not line.startswith(_BOILERPLATE)]
    return (informative or lines or [type(error).__name__])[-1]


def reason_code(message: str) -> str:
    """The ep-host reason code an OpenVINO message points at: dtype, shape, else op."""
    lowered = message.lower()
    if "element type" in lowered or "precision" in lowered or "data type" in lowered:
        return "dtype"
    if "shape" in lowered or "rank" in lowered or "dimension" in lowered:
        return "shape"
    return "op"


class CompiledModelKernel(Kernel):
    """Runs one OpenVINO compiled model: ``run`` takes the positional inputs the host passes,
    feeds those at ``feed_positions`` to the model's parameters in order, and returns the model's
    outputs as numpy arrays of ``output_dtypes``, with ``None`` at ``omitted_outputs`` (a node's
    optional outputs that nothing reads).

    OpenVINO's infer request keeps per-call state, so the kernel holds one request behind a lock
    and says it is not thread-safe (the host then serialises its calls).
    """

    thread_safe = False

    def __init__(self, compiled: Any, feed_positions: Sequence[int],
                 output_dtypes: Sequence[np.dtype | None], name: str,
                 omitted_outputs: Sequence[int] = ()):
        self.compiled = compiled
        self.omitted_outputs = tuple(omitted_outputs)
        self.request = compiled.create_infer_request()
        self.feed_positions = tuple(feed_positions)
        self.output_dtypes = tuple(output_dtypes)
        self.name = name
        self.lock = threading.Lock()
        self.tensor_type = openvino_module().Tensor

    def run(self, *inputs: Any) -> tuple[np.ndarray | None, ...]:
        feeds = [np.ascontiguousarray(inputs[i]) for i in self.feed_positions]
        count = len(self.output_dtypes)
        with self.lock:
            request = self.request
            try:
                # OpenVINO tensors over the host's arrays (no copy in), and ``infer()`` without
                # arguments: a third of the call overhead of ``infer(feeds)`` (27 against 84 us
                # for a one-element Relu, measured here)
                for position, array in enumerate(feeds):
                    request.set_input_tensor(position, self.tensor_type(array, shared_memory=True))
                request.infer()
                arrays = [np.array(request.get_output_tensor(k).data, copy=True)
                          for k in range(count)]
            except (RuntimeError, TypeError, ValueError):
                # a feed OpenVINO will not share as it is (a dtype it converts): its own path
                results = request.infer(feeds)
                arrays = [np.array(results[k], copy=True) for k in range(count)]
        out: list[np.ndarray | None] = [
            a if dt is None or a.dtype == dt else a.astype(dt)
            for a, dt in zip(arrays, self.output_dtypes, strict=True)]
        for index in self.omitted_outputs:
            out.insert(index, None)
        return tuple(out)

    def __repr__(self) -> str:
        return f"CompiledModelKernel({self.name})"
