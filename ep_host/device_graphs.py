"""Device graphs (CUDA graphs and the like): a partition of consecutive steps on one device,
recorded once through its device's ``capture`` and replayed on every later run.

Any provider whose device can capture opts in with the provider option ``enable_device_graph``
(or the name its ``ProviderInfo.device_graph_option`` gives, such as onnxruntime's
``enable_cuda_graph``), or every such provider with the session's ``device_graphs=True``. A
partition is recorded only when every kernel in it answers ``capture_support()`` with yes and
every value it reads or writes has a static shape; otherwise it runs step by step and the reason
is kept. The recording reads its inputs from fixed buffers (each run copies its inputs into them)
and keeps every value it computes alive, as a replay writes into the same memory again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ep_host.errors import describe_exception
from ep_host.kernel import Kernel
from ep_host.match import CaptureSupport
from ep_host.plugin_calls import is_user_interrupt, sigint
from ep_host.provider import Device

OPTION = "enable_device_graph"


@dataclass
class PartitionCapture:
    """What the session did with one device partition: its provider, nodes, and whether it was
    recorded, with the reason when not."""

    provider: str
    device: str
    nodes: list[str] = field(default_factory=list)
    captured: bool = False
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "device": self.device, "nodes": list(self.nodes),
                "captured": self.captured, "reason": self.reason}


def why_not(steps: Sequence[Any], device: Device) -> str:
    """The first precondition the partition fails, or ``""`` when it can be recorded."""
    if device.capture is None:
        return f"device {device.name} cannot record graphs"
    for step in steps:
        where = f"{step.subject} ({step.op})"
        if step.scope:
            return f"{where} runs subgraphs"
        since = sigint.received
        try:
            support = step.kernel.capture_support()
        except BaseException as exc:  # a kernel's SystemExit is its provider's fault too
            if is_user_interrupt(exc, since):
                raise
            return f"{where}: capture_support raised {describe_exception(exc)}"
        if not isinstance(support, CaptureSupport) or not support.capturable:
            reason = support.reason if isinstance(support, CaptureSupport) else (
                f"capture_support returned {type(support).__name__}")
            return f"{where}: {reason}"
        for node in step.nodes:
            for value in (*node.inputs, *node.outputs):
                if value is not None and not value.is_static:
                    return f"{where}: {value.name!r} has no static shape ({value.shape})"
    return ""


class CapturedPartition(Kernel):
    """Runs a partition's steps once through ``device.capture`` on its first call, replays after.

    ``record(values)`` runs the steps (the plan's compiled function for them, with every check)
    and returns the values of the ``computed`` slots; ``inputs``: the slots the partition reads
    from outside (in ``run``'s order); ``outputs``: the slots later steps or the plan's outputs
    read. The fixed buffers are shared, so the kernel is not thread-safe and the host serialises
    its calls.
    """

    thread_safe = False

    def __init__(self, record: Callable[[Mapping[int, Any]], list[Any]], device: Device,
                 inputs: Sequence[int], computed: Sequence[int], outputs: Sequence[int]):
        self.record = record
        self.device = device
        self.input_slots = list(inputs)
        self.computed = list(computed)
        self.output_slots = list(outputs)
        self.buffers: list[Any] = []
        self.kept: dict[int, Any] = {}
        self.replay: Any = None

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.yes()

    def _record(self) -> None:
        values = dict(zip(self.input_slots, self.buffers, strict=True))
        # every value stays alive: a replay writes into the same memory
        self.kept = dict(zip(self.computed, self.record(values), strict=True))

    def run(self, *inputs: Any) -> Sequence[Any]:
        if self.replay is None:
            self.buffers = [x.copy() for x in inputs]
            self.replay = self.device.capture(self._record)
        else:
            for buffer, x in zip(self.buffers, inputs, strict=True):
                buffer[...] = x
            self.replay()
        # the next replay overwrites the recorded outputs: hand out copies
        return tuple(self.kept[s].copy() for s in self.output_slots)
