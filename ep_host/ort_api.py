"""onnxruntime's Python API around a session: ``SessionOptions`` and its enums, ``ModelMetadata``,
onnxruntime's type strings, ``OrtValue``, ``IOBinding`` and the module-level provider queries,
so that ``import ep_host as ort`` runs common onnxruntime code.
"""

from __future__ import annotations

import enum
import time
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_host.dtypes import dtype as to_dtype
from ep_host.dtypes import from_numpy
from ep_host.errors import InputError, NotSupportedError
from ep_host.plan import Plan, Step, release_points
from ep_host.provider import HOST, Device

if TYPE_CHECKING:
    from ep_host.discovery import Host
    from ep_host.graph import ValueView
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
    ep-host's own: ``share_prepacked`` (what ``InferenceSession(share_prepacked=...)`` sets when
    not given; onnxruntime shares prepacked weights through a ``PrepackedWeightsContainer``).
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
        "use_per_session_threads", "optimized_model_filepath", "share_prepacked", "_config",
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
        self.share_prepacked = False
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


@dataclass(frozen=True)
class NodeArg:
    """An input or output as ``get_inputs()`` lists it (onnxruntime's ``NodeArg``)."""

    name: str
    type: str
    shape: list[int | str | None] | None
    dtype: Any = None


_KIND_PREFIX = {"sequence": "seq", "optional": "optional", "map": "map"}


def node_arg(view: ValueView, declared: Any = None) -> NodeArg:
    """``view`` as onnxruntime lists it; ``declared``: its ``TypeProto`` in the model, whose
    nested types (``seq(tensor(float))``) the view does not keep."""
    kind = view.kind
    text = type_string(declared) if declared is not None else None
    if text is None:
        elem = view.dtype.code if view.dtype is not None else 0
        inner = f"tensor({element_type_name(elem)})" if elem else "tensor(unknown)"
        text = inner if kind in ("tensor", "unknown") else f"{_KIND_PREFIX[kind]}({inner})"
    shape = [] if kind in ("sequence", "map") else (
        None if view.shape is None else list(view.shape))
    return NodeArg(view.name, text, shape, view.dtype)


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


def gather_provider_options(host: Host, providers: Any,
                            provider_options: Any) -> dict[str, dict[str, Any]]:
    """Each provider's options by its name: from ``(name, options)`` pairs in ``providers``,
    then ``provider_options`` (a dict keyed by name or alias, or a list parallel to
    ``providers``)."""
    aliases = alias_map(host)

    def resolve(names: Iterable[str]) -> list[str]:
        return [n if n in host.records else aliases.get(n, n) for n in names]

    resolved = resolve(p[0] if isinstance(p, tuple) else p for p in providers or ())
    options: dict[str, dict[str, Any]] = {}
    for entry, name in zip(providers or (), resolved, strict=False):
        if isinstance(entry, tuple):
            options.setdefault(name, {}).update(entry[1])
    if isinstance(provider_options, Mapping):
        keys = resolve(provider_options)
        for key, name in zip(provider_options, keys, strict=True):
            options.setdefault(name, {}).update(provider_options[key])
    elif provider_options is not None:
        if len(provider_options) != len(resolved):
            raise InputError(f"provider_options has {len(provider_options)} entries for "
                             f"{len(resolved)} providers; give one dict per provider")
        for name, entry in zip(resolved, provider_options, strict=True):
            options.setdefault(name, {}).update(entry)
    return options


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


# ---------------------------------------------------------------------------------------------
# The constructor's arguments, and plans for bound devices
# ---------------------------------------------------------------------------------------------


def _is_provider_list(value: Any) -> bool:
    """Whether ``value`` reads as a ``providers`` list: names or ``(name, options)`` pairs."""
    return isinstance(value, list | tuple) and all(
        isinstance(p, str) or (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                               and isinstance(p[1], Mapping)) for p in value)


def _is_options_list(value: Any) -> bool:
    return isinstance(value, Mapping) or (
        isinstance(value, list | tuple) and all(isinstance(o, Mapping) for o in value))


def session_arguments(sess_options: Any, providers: Any, provider_options: Any
                      ) -> tuple[SessionOptions | None, Any, Any]:
    """``(sess_options, providers, provider_options)`` from onnxruntime's positional order,
    accepting ep-host's old order ``(model, providers, provider_options)`` with a
    DeprecationWarning where it cannot be mistaken for the new one."""
    if sess_options is None or isinstance(sess_options, SessionOptions):
        return sess_options, providers, provider_options
    if _is_provider_list(sess_options) and (providers is None or (
            provider_options is None and _is_options_list(providers))):
        warnings.warn(
            "InferenceSession(model, providers) is deprecated: the second positional argument "
            "is sess_options, as in onnxruntime; pass providers=[...]",
            DeprecationWarning, stacklevel=3)
        return None, sess_options, provider_options if providers is None else providers
    raise InputError(
        f"InferenceSession: sess_options must be an ep_host.SessionOptions, got "
        f"{type(sess_options).__name__} {sess_options!r:.80}; pass providers=[...] by keyword")


def device_plan(plan: Plan, inputs: Mapping[str, Device], outputs: Mapping[str, Device | None]
                ) -> tuple[Plan, dict[str, Device]]:
    """``plan`` changed so that each input in ``inputs`` arrives on its device and each output
    in ``outputs`` is left on its device (``None``: where the provider that computed it left
    it), with the device the outputs end on. An input's upload to its own device disappears
    (and a copy to the host is added only when a host step reads it); an output's download
    disappears when the output is wanted on the device that computed it."""
    steps = list(plan.steps)
    n_slots = plan.n_slots
    input_slots = dict(plan.input_slots)
    output_slots = dict(plan.output_slots)

    def read(slot: int, besides: str = "") -> bool:
        """Whether a step, or an output other than ``besides``, reads ``slot``."""
        return any(s == slot for n, s in output_slots.items() if n != besides) or any(
            slot in step.inputs or any(slot == s for _, s in step.scope) for step in steps)

    head = []
    for name, device in inputs.items():
        host_slot = plan.input_slots[name]
        upload = next((step for step in steps if step.copy is not None
                       and step.inputs == (host_slot,) and step.copy[1].name == device.name),
                      None)
        if upload is not None:
            steps.remove(upload)
            device_slot = upload.outputs[0]
        else:
            device_slot, n_slots = n_slots, n_slots + 1
        input_slots[name] = device_slot
        if read(host_slot):
            head.append(Step(f"copy {name}", "copy", "copy", (), None, None, (device_slot,),
                             (host_slot,), copy=(device, HOST)))
    steps[:0] = head
    where: dict[str, Device] = {}
    for name, want in outputs.items():
        host_slot = plan.output_slots[name]
        fetch = next((step for step in steps if step.copy is not None
                      and step.outputs == (host_slot,) and step.copy[1].is_host), None)
        source = HOST if fetch is None else fetch.copy[0]  # type: ignore[index]
        target = source if want is None else want
        where[name] = target
        if target.is_host:
            continue
        if fetch is not None and source.name == target.name:
            output_slots[name] = fetch.inputs[0]
            if not read(host_slot, besides=name):  # else a host step still reads it
                steps.remove(fetch)
        else:
            output_slots[name], n_slots = n_slots, n_slots + 1
            steps.append(Step(f"copy {name}", "copy", "copy", (), None, None, (host_slot,),
                              (output_slots[name],), copy=(HOST, target)))
    if not head and input_slots == dict(plan.input_slots) and output_slots == dict(
            plan.output_slots):
        return plan, where
    keep = frozenset({*plan.constants, *input_slots.values(), *output_slots.values(),
                      *plan.outer_slots.values(), *plan.arenas})
    return replace(plan, steps=tuple(steps), releases=release_points(steps, keep),
                   n_slots=n_slots, input_slots=MappingProxyType(input_slots),
                   output_slots=MappingProxyType(output_slots), keep=keep), where


def write_into(label: str, name: str, target: OrtValue, result: OrtValue) -> None:
    """An output bound with ``bind_ortvalue_output``: the run's value copied into ``target``."""
    value = result.value
    if list(value.shape) != target.shape() or value.dtype != target.value.dtype:
        raise InputError(f"{label}: output {name!r} is {value.dtype} {list(value.shape)}, but the "
                         f"OrtValue bound to it is {target.value.dtype} {target.shape()}")
    if target.device.is_host:
        np.copyto(target.value, result.numpy())
    elif result.device.name == target.device.name:
        target.value[...] = value
    else:
        target.value[...] = target.device.upload(result.numpy())


class RunOptions:
    """onnxruntime's ``RunOptions``: set ``terminate = True``, from any thread, to cancel the
    runs given these options; each stops before its next step (and a Loop or Scan before its
    body's next step) with :class:`RunCancelledError`.

    ``timeout_s``: abandon the run with :class:`RunCancelledError` when it has not finished
    after this many seconds (default: ``EP_HOST_RUN_TIMEOUT``, else none). The run then goes on
    a worker thread that the caller stops waiting for; Python cannot interrupt a step that is
    running, so a kernel stuck in C code (a BLAS call, a runtime it wraps) or in a loop that
    never returns keeps its thread and CPU until it does, and the abandoned run stops at its next
    step. A kernel that is not thread-safe holds its lock that long, so later runs wait for it
    (give them a timeout too).

    Accepted, changing no result: ``log_severity_level``, ``log_verbosity_level``, ``logid``,
    ``run_tag``, ``only_execute_path_to_fetches`` and run config entries.
    """

    def __init__(self) -> None:
        self.terminate = False
        self.run_tag = ""
        self.logid = ""
        self.log_severity_level = 2
        self.log_verbosity_level = 0
        self.only_execute_path_to_fetches = False
        self.timeout_s: float | None = None
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        if key not in self._config:
            raise InputError(f"RunOptions has no configuration entry {key!r}")
        return self._config[key]
