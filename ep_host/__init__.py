"""ep-host: a plugin host for ONNX execution providers.

Everything a provider needs is exported here. Importing this package loads no plugin and does
not import onnx; ``InferenceSession`` and ``Host`` load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ep_host.cost import Cost, element_count, structural_input_bytes
from ep_host.dtypes import DType, dtype
from ep_host.errors import (
    HostError,
    InputError,
    KernelError,
    ModelLoadError,
    ModelValidationError,
    NotSupportedError,
    PlacementError,
    ProviderError,
    ResourceLimitError,
    RunCancelledError,
)
from ep_host.hookspecs import hookimpl, hookspec
from ep_host.kernel import FunctionKernel, Kernel, Workspace
from ep_host.limits import check_allocation
from ep_host.match import (
    CaptureSupport,
    Decline,
    KernelMatch,
    KernelVariantSelection,
    ReasonCode,
    deny,
    require,
)
from ep_host.provider import CONTRACT_VERSION, HOST, Device, ProviderContext, ProviderInfo
from ep_host.tracing import record_kernel_variant

if TYPE_CHECKING:
    from ep_host.discovery import Host
    from ep_host.graph import GraphView, NodeView, ValueView
    from ep_host.ort_api import (
        ExecutionMode,
        GraphOptimizationLevel,
        IOBinding,
        ModelMetadata,
        OrtValue,
        RunOptions,
        SessionOptions,
        get_all_providers,
        get_available_providers,
        get_device,
    )
    from ep_host.session import InferenceSession, NodeArg
    from ep_host.signatures import known_signature
    from ep_host.stored import AnswerStore, CacheDirStores
    from ep_host.subgraph import PartitionView, node_model
    from ep_host.threads import blas_limit, find_blas_again

__version__ = "0.1.0"

_LAZY = {
    "InferenceSession": "ep_host.session",
    "RunOptions": "ep_host.ort_api",
    "NodeArg": "ep_host.session",
    # onnxruntime's API beside the session, so that `import ep_host as ort` runs its code
    "SessionOptions": "ep_host.ort_api",
    "GraphOptimizationLevel": "ep_host.ort_api",
    "ExecutionMode": "ep_host.ort_api",
    "ModelMetadata": "ep_host.ort_api",
    "OrtValue": "ep_host.ort_api",
    "IOBinding": "ep_host.ort_api",
    "get_available_providers": "ep_host.ort_api",
    "get_all_providers": "ep_host.ort_api",
    "get_device": "ep_host.ort_api",
    "Host": "ep_host.discovery",
    "NodeView": "ep_host.graph",
    "ValueView": "ep_host.graph",
    "GraphView": "ep_host.graph",
    # a node's signature, once the host worked it out (providers answering by signature)
    "known_signature": "ep_host.signatures",
    "load_model": "ep_host.loading",
    # answers a provider works out once (a runtime's verdicts), kept on disk between processes
    "AnswerStore": "ep_host.stored",
    "CacheDirStores": "ep_host.stored",
    # parts of a graph as a standalone model, for providers that hand them to a runtime
    "PartitionView": "ep_host.subgraph",
    "node_model": "ep_host.subgraph",
    # calibration factors and the cache directory, which EPs read when they price nodes
    "Factors": "ep_host.calibration",
    "cache_dir": "ep_host.calibration",
    "family_factors": "ep_host.calibration",
    # the BLAS thread count runs hold, for a provider that loads a BLAS library itself
    "blas_limit": "ep_host.threads",
    "find_blas_again": "ep_host.threads",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ep_host' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "AnswerStore", "CONTRACT_VERSION", "CacheDirStores", "HOST", "CaptureSupport", "Cost",
    "DType", "Decline", "Device", "ExecutionMode", "Factors", "FunctionKernel",
    "GraphOptimizationLevel",
    "GraphView", "Host", "HostError", "IOBinding", "InferenceSession", "InputError", "Kernel",
    "KernelError", "KernelMatch", "KernelVariantSelection", "ModelLoadError", "ModelMetadata",
    "ModelValidationError", "NodeArg", "NodeView", "NotSupportedError", "OrtValue",
    "PartitionView", "PlacementError", "ProviderContext", "ProviderError", "ProviderInfo",
    "ReasonCode", "ResourceLimitError", "RunCancelledError", "RunOptions", "SessionOptions",
    "ValueView", "Workspace", "blas_limit", "cache_dir", "deny", "dtype", "check_allocation",
    "element_count", "family_factors", "find_blas_again", "get_all_providers",
    "get_available_providers", "get_device", "hookimpl", "hookspec", "known_signature",
    "load_model", "node_model",
    "record_kernel_variant", "require", "structural_input_bytes",
]
