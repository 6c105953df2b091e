"""What a provider says about itself (``ProviderInfo``), the device it runs on, and the
context the host hands to every hook call.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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

    ``array_type``: the class (or tuple of classes) of the device's arrays, such as
    ``cupy.ndarray``; a kernel on the device whose output is not one fails the run. ``None``: the
    host refuses only what is no array on any device (a list, a generator...). Host arrays are
    always exactly ``numpy.ndarray``.
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

    @property
    def is_host(self) -> bool:
        return self.kind == "cpu"

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

    def __post_init__(self) -> None:
        if not self.available and not self.reason:
            raise ValueError(f"provider {self.name!r} is unavailable but gives no reason")
        if not 0.0 <= self.partition_launch_us < float("inf"):
            raise ValueError(f"provider {self.name!r}: partition_launch_us must be a finite "
                             f"number of microseconds >= 0, got {self.partition_launch_us!r}")


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
