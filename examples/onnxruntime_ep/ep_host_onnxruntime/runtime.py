"""onnxruntime as this package uses it: imported on first use, sessions built with the thread
count and optimization level a caller asks for, and its error messages trimmed to the line that
says what went wrong.
"""

from __future__ import annotations

import re
from functools import cache
from types import ModuleType
from typing import Any

INSTALL_HINT = "pip install ep-host-onnxruntime"
ORT_PROVIDER = "CPUExecutionProvider"
# "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find ..." -> status and message
_STATUS = re.compile(r"\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*(?P<status>[A-Z_]+)\s*:\s*(?P<text>.*)",
                     re.DOTALL)


@cache
def onnxruntime() -> ModuleType:
    """The ``onnxruntime`` module; raises ImportError when it is not installed."""
    import onnxruntime as ort

    return ort


def import_error() -> str | None:
    """Why onnxruntime cannot be used here, or ``None`` when it can."""
    try:
        onnxruntime()
    except ModuleNotFoundError:
        return f"onnxruntime is not installed: {INSTALL_HINT}"
    except ImportError as error:
        return (f"onnxruntime is installed but cannot be imported ({error}); reinstall it: "
                f"{INSTALL_HINT}")
    return None


def version() -> str:
    return onnxruntime().__version__


def session(model_bytes: bytes, threads: int, optimize: bool) -> Any:
    """An onnxruntime ``InferenceSession`` of ``model_bytes`` on its CPUExecutionProvider, with
    ``threads`` intra-op threads, one inter-op thread, and graph optimizations on or off."""
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 3  # errors only: its warnings would repeat for every probe
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(model_bytes, options, providers=[ORT_PROVIDER])


def status_and_message(error: BaseException) -> tuple[str, str]:
    """onnxruntime's status name (``NOT_IMPLEMENTED``, ``INVALID_GRAPH``, ``FAIL``, ...; the
    exception's type name when it has none) and the first line of its message."""
    text = str(error).strip()
    match = _STATUS.match(text)
    status, text = (match["status"], match["text"]) if match else (type(error).__name__, text)
    first = next((line.strip() for line in text.splitlines() if line.strip()), "").rstrip(". ")
    return status, first


def trimmed(error: BaseException, limit: int = 300) -> str:
    """``"STATUS : first line"`` of an onnxruntime error, cut to ``limit`` characters."""
    status, text = status_and_message(error)
    message = f"{status} : {text}" if text else status
    return message if len(message) <= limit else message[:limit - 3] + "..."


@cache
def kernel_versions() -> dict[tuple[str, str], tuple[tuple[int, int], ...]]:
    """``(domain, op_type) -> version ranges`` of the kernels onnxruntime's CPU provider
    registers, used only to tell "no such op" from "not for this type" in a decline's code."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as state

        defs = state.get_all_opkernel_def()
    except (ImportError, AttributeError, RuntimeError):
        return {}
    table: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for d in defs:
        if d.provider == ORT_PROVIDER:
            table.setdefault((d.domain or "ai.onnx", d.op_name), []).append(tuple(d.version_range))
    return {k: tuple(v) for k, v in table.items()}


def has_kernel_for_version(domain: str, op_type: str, version: int | None) -> bool:
    """Whether onnxruntime's CPU provider has some kernel for this op at this version (any
    type); ``False`` when it cannot say."""
    ranges = kernel_versions().get((domain, op_type), ())
    if version is None:
        return bool(ranges)
    return any(low <= version <= high for low, high in ranges)
