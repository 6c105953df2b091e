"""Device graphs (CUDA graphs): a partition of consecutive steps on one device, recorded once
through its device's ``capture`` and replayed on every later run.

A provider opts in with the provider option ``enable_cuda_graph``. A partition is recorded only
when every kernel in it answers ``capture_support()`` with yes and every value it reads or
writes has a static shape; otherwise the partition runs step by step and the reason is kept.
The recording reads its inputs from fixed buffers (each run copies its inputs into them) and
keeps every value it computes alive, as a replay writes into the same memory again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ep_host.errors import describe_exception
from ep_host.kernel import Kernel
from ep_host.match import CaptureSupport
from ep_host.provider import Device

OPTION = "enable_cuda_graph"


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
        node = step.node
        if step.scope:
            return f"node {node.name!r} ({node.qualified_op}) runs subgraphs"
        try:
            support = step.kernel.capture_support()
        except Exception as exc:
            return (f"node {node.name!r} ({node.qualified_op}): capture_support raised "
                    f"{describe_exception(exc)}")
        if not isinstance(support, CaptureSupport) or not support.capturable:
            reason = support.reason if isinstance(support, CaptureSupport) else (
                f"capture_support returned {type(support).__name__}")
            return f"node {node.name!r} ({node.qualified_op}): {reason}"
        for value in (*node.inputs, *node.outputs):
            if value is not None and not value.is_static:
                return (f"node {node.name!r} ({node.qualified_op}): {value.name!r} has no "
                        f"static shape ({value.shape})")
    return ""


class PartitionNode:
    """What a recorded partition shows where a node would be: in traces and error messages."""

    def __init__(self, name: str, steps: Sequence[Any], outputs: Sequence[Any]):
        self.name = name
        self.op_type = "DeviceGraph"
        self.qualified_op = f"device graph of {len(steps)} nodes"
        self.outputs = list(outputs)
        self.inputs: list[Any] = []


class CapturedPartition(Kernel):
    """Runs ``steps`` once through ``device.capture`` on its first call, replays after.

    ``inputs``: the slots the partition reads from outside (in ``run``'s order);
    ``constants``: slot -> value for the constants it reads; ``outputs``: the slots later steps
    or the plan's outputs read. The fixed buffers are shared, so the kernel is not thread-safe
    and the host serialises its calls.
    """

    thread_safe = False

    def __init__(self, steps: Sequence[Any], device: Device, inputs: Sequence[int],
                 constants: dict[int, Any], outputs: Sequence[int]):
        self.steps = list(steps)
        self.device = device
        self.input_slots = list(inputs)
        self.constants = constants
        self.output_slots = list(outputs)
        self.buffers: list[Any] = []
        self.kept: dict[int, Any] = {}
        self.replay: Any = None

    def capture_support(self) -> CaptureSupport:
        return CaptureSupport.yes()

    def _record(self) -> dict[int, Any]:
        values = dict(self.constants)
        values.update(zip(self.input_slots, self.buffers, strict=True))
        for step in self.steps:
            args = [values[s] if s >= 0 else None for s in step.inputs]
            outs = step.kernel.run(*args)
            for s, out in zip(step.outputs, outs, strict=False):
                if s >= 0:
                    values[s] = out
        self.kept = values  # every value stays alive: a replay writes into the same memory
        return values

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
