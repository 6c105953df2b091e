"""onnxruntime's Python API around a session: ``SessionOptions`` and its enums, ``ModelMetadata``,
onnxruntime's type strings, ``OrtValue``, ``IOBinding`` and the module-level provider queries,
so that ``import ep_host as ort`` runs common onnxruntime code.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_host.dtypes import dtype as to_dtype
from ep_host.dtypes import from_numpy
from ep_host.errors import InputError, NotSupportedError
from ep_host.provider import HOST, Device

if TYPE_CHECKING:
    from ep_host.discovery import Host
    from ep_host.session import InferenceSession


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's optimization levels (same values), mapped to ep-host's graph passes by
    :data:`LEVEL_PASSES`."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """onnxruntime's execution modes; ep-host runs a plan's steps in order either way."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


# onnxruntime's basic level: constant folding and the semantics-preserving Conv foldings;
# its extended and higher levels add the fusions (``None``: every pass of ep_host.optimize).
LEVEL_PASSES: dict[GraphOptimizationLevel, tuple[str, ...] | None] = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: (),
    GraphOptimizationLevel.ORT_ENABLE_BASIC: (
        "constant_folding", "conv_bn_folding", "channel_affine_folding"),
    GraphOptimizationLevel.ORT_ENABLE_EXTENDED: None,
    GraphOptimizationLevel.ORT_ENABLE_LAYOUT: None,
    GraphOptimizationLevel.ORT_ENABLE_ALL: None,
}


def _level(value: Any) -> GraphOptimizationLevel:
    try:
        return GraphOptimizationLevel(int(value))
    except (TypeError, ValueError) as exc:
        known = ", ".join(level.name for level in GraphOptimizationLevel)
        raise InputError(f"SessionOptions.graph_optimization_level: {value!r} is not one of "
                         f"{known}") from exc


class SessionOptions:
    """onnxruntime's ``SessionOptions``, the second argument of :class:`InferenceSession`.

    Used: ``intra_op_num_threads`` (0: ep-host's default), ``graph_optimization_level``
    (:data:`LEVEL_PASSES`), ``enable_profiling`` with ``profile_file_prefix`` (the trace is
    written by ``end_profiling()`` to ``<prefix>_<date>_<time>.json``).
    Accepted and without effect, as they change no result: ``inter_op_num_threads``,
    ``execution_mode`` and ``execution_order`` (steps run in order), ``log_severity_level``,
    ``log_verbosity_level``, ``logid``, the memory switches (``enable_cpu_mem_arena``,
    ``enable_mem_pattern``, ``enable_mem_reuse``), ``use_deterministic_compute`` (ep-host's
    kernels are deterministic), ``use_per_session_threads`` and session config entries.
    Refused with :class:`NotSupportedError` when the session is created or the method called:
    ``optimized_model_filepath``, custom-op libraries, added initializers and free-dimension
    overrides. Setting an attribute onnxruntime does not have raises ``AttributeError``, as
    onnxruntime's does.
    """

    __slots__ = (
        "intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level",
        "execution_mode", "execution_order", "enable_profiling", "profile_file_prefix",
        "log_severity_level", "log_verbosity_level", "logid", "enable_cpu_mem_arena",
        "enable_mem_pattern", "enable_mem_reuse", "use_deterministic_compute",
        "use_per_session_threads", "optimized_model_filepath", "_config",
    )

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.execution_order = 0
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.use_per_session_threads = True
        self.optimized_model_filepath = ""
        self._config: dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Kept and returned by ``get_session_config_entry``; ep-host reads no entry."""
        self._config[str(key)] = str(value)

    def get_session_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InputError(f"SessionOptions has no configuration entry {key!r}")
        return self._config[key]

    def _refuse(self, what: str) -> None:
        raise NotSupportedError(f"SessionOptions.{what} is not supported by ep-host")

    def add_free_dimension_override_by_name(self, name: str, value: int) -> None:
        self._refuse("add_free_dimension_override_by_name (give inputs of the size wanted)")

    def add_free_dimension_override_by_denotation(self, name: str, value: int) -> None:
        self._refuse("add_free_dimension_override_by_denotation")

    def register_custom_ops_library(self, path: str) -> None:
        self._refuse("register_custom_ops_library (custom ops come from providers' "
                     "ep_host_supports_op)")

    def add_initializer(self, name: str, value: Any) -> None:
        self._refuse("add_initializer")

    def add_external_initializers(self, names: Any, values: Any) -> None:
        self._refuse("add_external_initializers")

    def copy(self) -> SessionOptions:
        other = SessionOptions()
        for name in self.__slots__:
            setattr(other, name, getattr(self, name))
        other._config = dict(self._config)
        return other

    def passes(self) -> tuple[str, ...] | None:
        """The graph passes ``graph_optimization_level`` stands for (``None``: all)."""
        return LEVEL_PASSES[_level(self.graph_optimization_level)]

    def threads(self) -> int | None:
        """The session's ``intra_op_num_threads`` (``None`` for onnxruntime's 0: the default)."""
        value = int(self.intra_op_num_threads)
        if value < 0:
            raise InputError(f"SessionOptions.intra_op_num_threads must be >= 0, got {value}")
        return value or None

    def profile_path(self) -> str | None:
        """Where ``end_profiling`` writes the trace (``None`` when profiling is off)."""
        if not self.enable_profiling:
            return None
        now = time.time()
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now))
        return f"{self.profile_file_prefix}_{stamp}_{int(now * 1000) % 1000:03d}.json"

    def check(self) -> None:
        """Refuse, when a session is created, what ep-host cannot honour."""
        _level(self.graph_optimization_level)
        self.threads()
        if self.optimized_model_filepath:
            self._refuse(f"optimized_model_filepath ({self.optimized_model_filepath!r}); "
                         "ep-host does not write optimized models")


# ---------------------------------------------------------------------------------------------
# Metadata and type strings
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelMetadata:
    """onnxruntime's ``ModelMetadata``: what ``get_modelmeta()`` returns."""

    producer_name: str = ""
    graph_name: str = ""
    domain: str = ""
    description: str = ""
    graph_description: str = ""
    version: int = 0
    custom_metadata_map: dict[str, str] = field(default_factory=dict)


def model_metadata(proto: Any) -> ModelMetadata:
    """The metadata of a ``ModelProto``."""
    return ModelMetadata(
        producer_name=proto.producer_name, graph_name=proto.graph.name, domain=proto.domain,
        description=proto.doc_string, graph_description=proto.graph.doc_string,
        version=proto.model_version,
        custom_metadata_map={p.key: p.value for p in proto.metadata_props})


_ORT_ELEMENT_NAMES = {"float32": "float", "float64": "double"}


def element_type_name(code: int) -> str:
    """onnxruntime's name of an element type code: ``float``, ``double``, ``int64``..."""
    name = to_dtype(code).name
    return _ORT_ELEMENT_NAMES.get(name, name)


def type_string(tp: Any) -> str | None:
    """onnxruntime's string for a ``TypeProto``: ``tensor(float)``, ``seq(tensor(int64))``,
    ``map(string,tensor(float))``, ``optional(tensor(float))``; ``None`` for an empty one."""
    which = tp.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        kind = "tensor" if which == "tensor_type" else "sparse_tensor"
        elem = getattr(tp, which).elem_type
        return f"{kind}({element_type_name(elem)})" if elem else None
    if which == "sequence_type":
        inner = type_string(tp.sequence_type.elem_type)
        return None if inner is None else f"seq({inner})"
    if which == "optional_type":
        inner = type_string(tp.optional_type.elem_type)
        return None if inner is None else f"optional({inner})"
    if which == "map_type":
        inner = type_string(tp.map_type.value_type)
        key = element_type_name(tp.map_type.key_type)
        return None if inner is None else f"map({key},{inner})"
    return None


# ---------------------------------------------------------------------------------------------
# Providers
# ---------------------------------------------------------------------------------------------


class ProviderNames(list):
    """A list of ep-host provider names in which ``in`` also finds a provider by any of its
    aliases (``"CUDAExecutionProvider" in ort.get_available_providers()``)."""

    def __init__(self, names: Iterable[str], aliases: Mapping[str, str]):
        super().__init__(names)
        self.aliases = dict(aliases)

    def __contains__(self, name: object) -> bool:
        return list.__contains__(self, name) or list.__contains__(
            self, self.aliases.get(name, None) if isinstance(name, str) else None)


def alias_map(host: Host) -> dict[str, str]:
    """Every alias of a loaded provider -> that provider's name."""
    return {alias: r.name for r in host.records.values() if r.info is not None
            for alias in r.info.aliases}


def available_providers(host: Host) -> ProviderNames:
    """The available providers of ``host``, devices first then by name, as sessions order them
    by default."""
    records = sorted((r for r in host.records.values() if r.available),
                     key=lambda r: (r.info.device.is_host, r.name))
    return ProviderNames([r.name for r in records], alias_map(host))


def get_available_providers() -> ProviderNames:
    """onnxruntime's ``get_available_providers()``: the installed providers that can run here
    (ep-host names; ``in`` also accepts onnxruntime's, such as ``"CPUExecutionProvider"``)."""
    from ep_host.discovery import Host

    return available_providers(Host.discover())


def get_all_providers() -> ProviderNames:
    """Every installed provider, available or not."""
    from ep_host.discovery import Host

    host = Host.discover()
    return ProviderNames(sorted(host.records), alias_map(host))


def get_device() -> str:
    """onnxruntime's ``get_device()``: ``"GPU"`` when an available provider runs on a CUDA
    device, else ``"CPU"``."""
    from ep_host.discovery import Host

    host = Host.discover()
    kinds = {r.info.device.kind for r in host.records.values() if r.available}
    return "GPU" if "cuda" in kinds else "CPU"


def find_device(device_type: str, device_id: int, devices: Iterable[Device]) -> Device:
    """The device onnxruntime calls ``device_type`` number ``device_id`` among ``devices``
    (``"cpu"`` is always the host; ``"cuda", 0`` is the device named ``cuda:0``)."""
    kind = str(device_type).lower()
    if kind == "cpu":
        return HOST
    devices = list(devices)
    for device in devices:
        if device.name == f"{kind}:{device_id}" or (device.name == kind and device_id == 0):
            return device
    known = ", ".join(sorted({d.name for d in devices if not d.is_host})) or "none"
    raise InputError(f"no available provider runs on device {kind}:{device_id}; "
                     f"devices of available providers: cpu, {known}")


def _discovered_devices() -> list[Device]:
    from ep_host.discovery import Host

    host = Host.discover()
    return [r.info.device for r in host.records.values() if r.available]


# ---------------------------------------------------------------------------------------------
# OrtValue and IOBinding
# ---------------------------------------------------------------------------------------------


class OrtValue:
    """onnxruntime's ``OrtValue``: a tensor and the device it lives on.

    ``OrtValue(array, device)`` (ep-host's own form) wraps an array that is already on a
    provider's ``device``, such as a CuPy array for the CUDA EP; sessions hand it to that
    device's kernels without a copy through the host.
    """

    __slots__ = ("value", "device")

    def __init__(self, value: Any, device: Device = HOST):
        if device.is_host and not isinstance(value, np.ndarray):
            value = np.asarray(value)
        self.value = value
        self.device = device

    def __repr__(self) -> str:
        return f"OrtValue({self.data_type()}, shape={self.shape()}, device={self.device.name})"

    @staticmethod
    def ortvalue_from_numpy(array: Any, device_type: str = "cpu", device_id: int = 0
                            ) -> OrtValue:
        """``array`` on the device: the host keeps the array itself (as onnxruntime does), a
        provider's device gets a copy."""
        device = find_device(device_type, device_id,
                             () if str(device_type).lower() == "cpu" else _discovered_devices())
        host = np.ascontiguousarray(array)
        return OrtValue(host if device.is_host else device.upload(host), device)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Iterable[int], element_type: Any,
                                     device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """A zero-filled tensor of ``shape`` and ``element_type`` (a numpy type) on the device."""
        return OrtValue.ortvalue_from_numpy(np.zeros(tuple(shape), dtype=element_type),
                                            device_type, device_id)

    def numpy(self) -> np.ndarray:
        """The tensor on the host (a copy when it lives on a device)."""
        return self.value if self.device.is_host else np.asarray(self.device.download(self.value))

    def shape(self) -> list[int]:
        return [int(d) for d in self.value.shape]

    def data_type(self) -> str:
        return f"tensor({element_type_name(from_numpy(np.dtype(self.value.dtype)).code)})"

    def element_type(self) -> int:
        """The ONNX element type code (``1`` for float), as onnxruntime returns it."""
        return from_numpy(np.dtype(self.value.dtype)).code

    def device_name(self) -> str:
        """``"cpu"``, or the device's kind (``"cuda"``)."""
        return self.device.kind

    def is_tensor(self) -> bool:
        return True

    def has_value(self) -> bool:
        return True

    def tensor_size_in_bytes(self) -> int:
        return int(self.value.nbytes)

    def data_ptr(self) -> int:
        if self.device.is_host:
            return int(self.value.__array_interface__["data"][0])
        pointer = getattr(getattr(self.value, "data", None), "ptr", None)
        if pointer is None:
            raise NotSupportedError(f"data_ptr: arrays on {self.device.name} give no pointer")
        return int(pointer)

    def update_inplace(self, array: Any) -> None:
        """Copy ``array`` (a host array of the same shape and type) into this value."""
        source = np.asarray(array)
        if list(source.shape) != self.shape() or source.dtype != self.value.dtype:
            raise InputError(f"update_inplace: got {source.dtype} {list(source.shape)}, the "
                             f"value is {self.value.dtype} {self.shape()}")
        if self.device.is_host:
            np.copyto(self.value, source)
        else:
            self.value[...] = self.device.upload(source)


class IOBinding:
    """onnxruntime's ``IOBinding``: inputs and outputs bound to devices before a run
    (``session.io_binding()``, then ``session.run_with_iobinding(binding)``).

    Inputs bound as :class:`OrtValue` on a provider's device reach that device's kernels without
    a host copy; an output bound to a device (``bind_output(name, "cuda")``) stays there.
    Raw pointers (``bind_input(..., buffer_ptr)``, ``bind_output(..., buffer_ptr)``) are refused:
    ep-host cannot know who owns the memory; wrap the array in an :class:`OrtValue` instead.
    """

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict[str, OrtValue] = {}
        self._outputs: dict[str, Device | OrtValue] = {}
        self._results: list[OrtValue] = []

    def _check(self, name: str, declared: list[str], what: str) -> None:
        if name not in declared:
            raise InputError(f"{self._session.model.label}: cannot bind {what} {name!r}; the "
                             f"model's {what}s are {', '.join(map(repr, declared))}")

    def bind_cpu_input(self, name: str, array: Any) -> None:
        self.bind_ortvalue_input(name, OrtValue(np.asarray(array)))

    def bind_input(self, name: str, device_type: Any, device_id: int = 0,
                   element_type: Any = None, shape: Any = None, buffer_ptr: Any = None) -> None:
        """``bind_input(name, ortvalue)`` binds an :class:`OrtValue`; a raw ``buffer_ptr`` is
        refused (see the class)."""
        if isinstance(device_type, OrtValue):
            self.bind_ortvalue_input(name, device_type)
            return
        raise NotSupportedError(
            f"{self._session.model.label}: bind_input({name!r}, ...) with a raw buffer pointer is "
            "not supported; bind an OrtValue (bind_ortvalue_input) or a numpy array "
            "(bind_cpu_input)")

    def bind_ortvalue_input(self, name: str, value: OrtValue) -> None:
        self._check(name, [i.name for i in self._session.get_inputs()], "input")
        self._inputs[name] = value

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0,
                    element_type: Any = None, shape: Any = None, buffer_ptr: Any = None) -> None:
        """The output ``name`` is left on ``device_type`` (a raw ``buffer_ptr`` is refused)."""
        self._check(name, [o.name for o in self._session.get_outputs()], "output")
        if buffer_ptr is not None:
            raise NotSupportedError(
                f"{self._session.model.label}: bind_output({name!r}, ...) with a raw buffer "
                "pointer is not supported; bind an OrtValue (bind_ortvalue_output)")
        self._outputs[name] = find_device(device_type, device_id, self._session.devices())

    def bind_ortvalue_output(self, name: str, value: OrtValue) -> None:
        """The output ``name`` is written into ``value`` (same shape and type) by each run."""
        self._check(name, [o.name for o in self._session.get_outputs()], "output")
        self._outputs[name] = value

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()

    def synchronize_inputs(self) -> None:
        for value in self._inputs.values():
            if value.device.synchronize is not None:
                value.device.synchronize()

    def synchronize_outputs(self) -> None:
        for value in self._results:
            if value.device.synchronize is not None:
                value.device.synchronize()

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs, in the order they were bound."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [value.numpy() for value in self._results]

    @property
    def inputs(self) -> dict[str, OrtValue]:
        return dict(self._inputs)

    @property
    def outputs(self) -> dict[str, Device | OrtValue]:
        return dict(self._outputs)

    def set_results(self, results: list[OrtValue]) -> None:
        self._results = results
