"""What a provider says about itself (``ProviderInfo``), the device it runs on, and the
context the host hands to every hook call.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

CONTRACT_VERSION = "1.0"
"""The version of the EP contract this host speaks. A provider built for a newer major version
is reported unavailable, with that reason, instead of being called."""


def contract_major(version: str) -> int:
    return int(str(version).split(".", 1)[0])


@dataclass(frozen=True, slots=True)
class Device:
    """Where a provider's tensors live, and what moving them to and from the host costs.

    ``to_host`` and ``from_host`` convert one array; the host's own device returns its input.
    ``link_gbps`` and ``link_latency_us`` price a copy between this device and the host.

    For device graphs (CUDA graphs), a device may also give ``synchronize()``, which waits until
    the device's queued work is done, and ``capture(fn)``, which records ``fn()`` (a function
    that runs a partition on fixed buffers) once and returns a function that replays it. Both
    are ``None`` when the device has no such thing.

    ``empty``: a function ``empty(nbytes)`` returning an uninitialised one-dimensional
    ``uint8`` array of ``nbytes`` on the device, through the device's own allocator (kernels'
    workspaces); ``None`` on the host (numpy) or on a device that gives no workspaces.

    ``array_type``: the class (or tuple of classes) of the device's arrays, such as
    ``cupy.ndarray``; a kernel on the device whose output is not one fails the run. ``None``: the
    host refuses only what is no array on any device (a list, a generator...). Host arrays are
    always exactly ``numpy.ndarray``.

    ``node``: the Ray node id of a device on a cluster node (``ep_host.cluster``), else ``""``.
    """

    name: str = "cpu"
    kind: str = "cpu"
    link_gbps: float = 0.0
    link_latency_us: float = 0.0
    to_host: Any = None
    from_host: Any = None
    synchronize: Any = None
    capture: Any = None
    array_type: Any = None
    empty: Any = None
    node: str = ""

    @property
    def is_host(self) -> bool:
        return self.kind == "cpu"

    def allocate(self, nbytes: int) -> Any:
        """``nbytes`` of uninitialised memory on this device as a ``uint8`` array (a kernel's
        workspace), or ``None`` when the device gives none."""
        if self.empty is not None:
            return self.empty(nbytes)
        if not self.is_host:
            return None
        import numpy as np  # the host's arrays; the module stays free of array libraries

        return np.empty(nbytes, np.uint8)

    def copy_cost_us(self, nbytes: int) -> float:
        """Estimated time to move ``nbytes`` between this device and the host."""
        if self.is_host:
            return 0.0
        return self.link_latency_us + nbytes / (self.link_gbps * 1e3)

    def upload(self, array: Any) -> Any:
        return array if self.from_host is None else self.from_host(array)

    def download(self, array: Any) -> Any:
        return array if self.to_host is None else self.to_host(array)


HOST = Device()


@dataclass(frozen=True, slots=True)
class ProviderInfo:
    """A provider's description of itself, answered by ``ep_host_provider_info``.

    ``name`` should equal the entry-point name. ``available=False`` needs a ``reason`` a user
    can act on ("cupy is not installed: pip install ep-host-cuda[cuda12]"); the host then
    declines every node for this provider with that reason.

    ``partition_launch_us``: for a provider that compiles partitions
    (``ep_host_compile_partition``), the time each partition costs once per run whatever its
    size (a runtime call, a graph launch); placement charges it where a partition begins, so the
    optimal strategy prefers fewer, larger partitions for this provider.

    ``aliases``: other names users may give for this provider, such as onnxruntime's
    (``"CUDAExecutionProvider"``). ``device_graph_option``: the provider option that turns on
    device graphs for it under its runtime's own name (onnxruntime's ``"enable_cuda_graph"``);
    the host's ``enable_device_graph`` works for every provider whose device can capture.

    ``applies_calibration``: ``True`` when the provider's costs already include the factors
    ``ep-host calibrate`` fitted for it (its cost model reads ``ep_host.family_factors``, as the
    CPU EP's does). Otherwise the host applies them to every cost it answers: the factors of
    the op family calibration measured the node's op in, else those fitted over all its cases.

    ``answers_by_signature``: ``True`` when a claim from ``ep_host_supports_op`` depends only on
    the node's signature (``ep_host.signatures.node_signature``: op, domain, versions, attributes,
    the kind, dtype and shape of every input and output, which inputs are constant and the
    values of integer or boolean constants of up to 1024 elements and of other constants of up
    to 16), never on the node's or its values' names, its neighbours, or the values of bigger
    constants (weights, biases). The capability walk then asks for the
    first node of each signature and gives the same claim to the others (a long model of
    repeated layers is asked a few hundred times, not once per node); a decline is asked again
    for each node, so reasons may name the node's values.
    """

    name: str
    device: Device = HOST
    version: str = "0"
    contract_version: str = CONTRACT_VERSION
    available: bool = True
    reason: str = ""
    description: str = ""
    aliases: tuple[str, ...] = ()
    device_graph_option: str = ""
    partition_launch_us: float = 0.0
    applies_calibration: bool = False
    answers_by_signature: bool = False

    def __post_init__(self) -> None:
        if not self.available and not self.reason:
            raise ValueError(f"provider {self.name!r} is unavailable but gives no reason")
        if not 0.0 <= self.partition_launch_us < float("inf"):
            raise ValueError(f"provider {self.name!r}: partition_launch_us must be a finite "
                             f"number of microseconds >= 0, got {self.partition_launch_us!r}")


_TEXT_FIELDS = ("name", "version", "contract_version", "reason", "description",
                "device_graph_option")
_DEVICE_HOOKS = ("to_host", "from_host", "synchronize", "capture")


def checked_info(info: ProviderInfo) -> ProviderInfo:
    """A checked copy of what a provider's ``ep_host_provider_info`` answered.

    Only ``ProviderInfo`` and ``Device`` themselves are accepted (a subclass could answer
    differently each time it is read); text fields are ``str``; a device's link figures are
    finite numbers, ``link_gbps`` > 0 for a device that is not the host and
    ``link_latency_us`` >= 0. A violation raises ``TypeError`` or ``ValueError`` naming the
    field. Checking runs none of the provider's code; the copy cannot change afterwards.
    """
    if type(info) is not ProviderInfo:
        raise TypeError(f"it returned {type(info).__name__}, not ProviderInfo"
                        + (" (subclasses are not accepted)"
                           if issubclass(type(info), ProviderInfo) else ""))
    for name in _TEXT_FIELDS:
        if type(getattr(info, name)) is not str:
            raise TypeError(f"ProviderInfo.{name} is a {type(getattr(info, name)).__name__}, "
                            "not a str")
    for flag in ("available", "applies_calibration", "answers_by_signature"):
        if type(getattr(info, flag)) is not bool:
            raise TypeError(f"ProviderInfo.{flag} is a {type(getattr(info, flag)).__name__}, "
                            "not a bool")
    if type(info.aliases) is not tuple or any(type(a) is not str for a in info.aliases):
        raise TypeError("ProviderInfo.aliases must be a tuple of str")
    _check_figure("ProviderInfo.partition_launch_us", info.partition_launch_us, positive=False)
    device = info.device
    if type(device) is not Device:
        raise TypeError(f"ProviderInfo.device is a {type(device).__name__}, not a Device"
                        + (" (subclasses are not accepted)"
                           if issubclass(type(device), Device) else ""))
    if type(device.name) is not str or type(device.kind) is not str:
        raise TypeError("Device.name and Device.kind must be str")
    where = f"device {device.name!r} (kind {device.kind!r})"
    _check_figure(f"Device.link_gbps of {where}", device.link_gbps,
                  positive=device.kind != "cpu")
    _check_figure(f"Device.link_latency_us of {where}", device.link_latency_us, positive=False)
    for name in _DEVICE_HOOKS:
        hook = getattr(device, name)
        if hook is not None and not callable(hook):
            raise TypeError(f"Device.{name} of {where} is a {type(hook).__name__}, not a "
                            "function")
    return replace(info, device=replace(device))


def _check_figure(name: str, value: object, *, positive: bool) -> None:
    """``value`` must be a finite int or float, > 0 when ``positive`` else >= 0."""
    if type(value) not in (int, float):
        raise TypeError(f"{name} is a {type(value).__name__}, not a number")
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        need = "> 0 (a device that is not the host must say how fast copies to it are)" \
            if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {need}, got {value!r}")


@dataclass(frozen=True, slots=True)
class ProviderContext:
    """What the host tells a provider alongside each node.

    ``provider``: the name this provider is registered under. ``options``: the user's
    ``provider_options`` for it (read-only). ``opset_imports``: the model's domain -> version map.
    ``model_dir``: the model's folder, or ``None`` for a model given as bytes.
    ``subgraphs``: set only in ``ep_host_create_kernel``: ``subgraphs.compile(graph_view)`` places
    a control-flow body (If branch, Loop or Scan body) with the session's providers and returns
    an object whose ``run(inputs, scope)`` runs it; ``scope`` is the mapping of outer-scope values
    the host passes to ``Kernel.run`` of a node with subgraphs.
    ``intra_op_num_threads``: set in ``ep_host_create_kernel`` and ``ep_host_compile_partition``:
    the threads the session runs with (onnxruntime's session option; 0: the provider's default),
    for a runtime the provider hands kernels or partitions to.
    """

    provider: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    opset_imports: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    model_dir: str | None = None
    subgraphs: Any = None
    intra_op_num_threads: int = 0
