"""Copy pricing: the device copies a placement implies and what each one costs.

A tensor moves when its producer and a consumer run on different devices; graph inputs start on
the host, graph outputs end there, and constants are uploaded once per session, never per run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ep_host.provider import HOST, Device

if TYPE_CHECKING:
    from ep_host.placement import Placement


@dataclass(frozen=True)
class Transfer:
    """A tensor copied between devices because of where its producer and consumer run."""

    tensor: str
    source: str  # device name
    destination: str
    nbytes: int
    cost_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "from": self.source, "to": self.destination,
                "bytes": self.nbytes, "cost_us": self.cost_us}


def copy_cost_us(nbytes: int, source: Device, destination: Device) -> float:
    """Estimated time to move ``nbytes`` from ``source`` to ``destination``: through the host,
    so each side's link is paid (the host's own side costs nothing)."""
    return source.copy_cost_us(nbytes) + destination.copy_cost_us(nbytes)


def implied_transfers(placement: Placement) -> list[Transfer]:
    """The device copies a placement implies: each tensor is charged once per destination
    device; graph inputs start on the host, graph outputs end there, host inputs are priced.
    Constants cost nothing per run: a session uploads each to its devices once, at creation."""
    return [t for t, _, _ in copy_walk(placement)]


def copy_walk(placement: Placement) -> Iterator[tuple[Transfer, str | None, str | None]]:
    """The walk behind :func:`implied_transfers`, in node order: each copy with the node that
    produced the tensor (``None``: a graph input) and the node that first needs it on the
    destination (``None``: the graph's outputs)."""
    devices = placement.devices
    table = placement.table
    where = {n.name: n.provider for n in placement.nodes}
    if all(devices.get(p, HOST).name == HOST.name for p in set(where.values())):
        return  # every value starts, lives and ends on the host: nothing moves
    home: dict[str, tuple[Device, str]] = {}  # value -> (device, producing node)
    moved: set[tuple[str, str]] = set()

    def need(value: Any, dest: Device) -> tuple[Transfer, str | None] | None:
        if value is None or value.is_constant:
            return None
        src, producer = home.get(value.name, (HOST, None))
        if src.name == dest.name or (value.name, dest.name) in moved:
            return None
        moved.add((value.name, dest.name))
        nbytes = value.nbytes
        cost = copy_cost_us(nbytes, src, dest)
        return Transfer(value.name, src.name, dest.name, nbytes, cost), producer

    for node in table.nodes:
        provider = where[node.name]
        device = devices.get(provider, HOST)
        host_inputs = set(table.answers[node.name][provider].host_inputs)
        for i, value in enumerate(node.inputs):
            copy = need(value, HOST if i in host_inputs else device)
            if copy is not None:
                yield copy[0], copy[1], node.name
        for value in node.outputs:
            if value is not None:
                home[value.name] = (device, node.name)
    if table.nodes:
        for value in table.graph.outputs:
            copy = need(value, HOST)
            if copy is not None:
                yield copy[0], copy[1], None
