"""Copy pricing: the device copies and layout conversions a placement implies, and their cost.

A tensor moves when its producer and a consumer run on different devices, and is converted when
the consumer needs it in another layout (on the consumer's device); graph inputs start on the host
in the model's layout, graph outputs end there, and constants are uploaded once per session.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ep_host.layouts import conversion_cost_us, input_layout, output_layout, shown
from ep_host.provider import HOST, Device

if TYPE_CHECKING:
    from ep_host.placement import Placement


@dataclass(frozen=True)
class Transfer:
    """A tensor copied between devices because of where its producer and consumer run, or
    converted to the layout its consumer needs (``source_layout`` -> ``destination_layout``,
    ``None`` being the model's layout), or both; ``cost_us`` is the whole, of which
    ``conversion_us`` is the conversion's share."""

    tensor: str
    source: str  # device name
    destination: str
    nbytes: int
    cost_us: float
    source_layout: str | None = None
    destination_layout: str | None = None
    conversion_us: float = 0.0
    rank: int | None = None  # the tensor's rank, to name the model's layout

    @property
    def moves(self) -> bool:
        """Whether the tensor changes device."""
        return self.source != self.destination

    @property
    def converts(self) -> bool:
        """Whether the tensor changes layout."""
        return self.source_layout != self.destination_layout

    @property
    def layouts(self) -> str:
        """``"NCHW->NHWC"`` for a conversion, else ``""``."""
        if not self.converts:
            return ""
        rank = self.rank
        return f"{shown(self.source_layout, rank)}->{shown(self.destination_layout, rank)}"

    def to_dict(self) -> dict[str, Any]:
        out = {"tensor": self.tensor, "from": self.source, "to": self.destination,
               "bytes": self.nbytes, "cost_us": self.cost_us}
        if self.converts:
            out["layout"] = {"from": shown(self.source_layout, self.rank),
                             "to": shown(self.destination_layout, self.rank),
                             "cost_us": self.conversion_us}
        return out


def copy_cost_us(nbytes: int, source: Device, destination: Device) -> float:
    """Estimated time to move ``nbytes`` from ``source`` to ``destination``: through the host,
    so each side's link is paid (the host's own side costs nothing)."""
    return source.copy_cost_us(nbytes) + destination.copy_cost_us(nbytes)


def implied_transfers(placement: Placement) -> list[Transfer]:
    """The device copies and layout conversions a placement implies: each tensor is charged once
    per destination device and layout; graph inputs start on the host in the model's layout,
    graph outputs end there, host inputs are priced.
    Constants cost nothing per run: a session uploads each to its devices once, at creation."""
    return [t for t, _, _ in copy_walk(placement)]


def copy_walk(placement: Placement) -> Iterator[tuple[Transfer, str | None, str | None]]:
    """The walk behind :func:`implied_transfers`, in node order: each copy with the node that
    produced the tensor (``None``: a graph input) and the node that first needs it on the
    destination (``None``: the graph's outputs)."""
    devices = placement.devices
    table = placement.table
    where = {n.name: n.provider for n in placement.nodes}
    laid_out = table.layout_providers
    layouts = bool(laid_out) and not laid_out.isdisjoint(where.values())
    if not layouts and all(devices.get(p, HOST).name == HOST.name for p in set(where.values())):
        return  # every value starts, lives and ends on the host: nothing moves
    # value -> (device, layout, producing node)
    home: dict[str, tuple[Device, str | None, str | None]] = {}
    moved: set[tuple[str, str, str | None]] = set()

    def need(value: Any, dest: Device,
             layout: str | None) -> tuple[Transfer, str | None] | None:
        if value is None or value.is_constant:
            return None
        src, src_layout, producer = home.get(value.name, (HOST, None, None))
        if (src.name == dest.name and src_layout == layout) or (
                (value.name, dest.name, layout) in moved):
            return None
        moved.add((value.name, dest.name, layout))
        nbytes = value.nbytes
        converting = conversion_cost_us(nbytes) if src_layout != layout else 0.0
        cost = (copy_cost_us(nbytes, src, dest) if src.name != dest.name else 0.0) + converting
        return Transfer(value.name, src.name, dest.name, nbytes, cost, src_layout, layout,
                        converting, value.rank), producer

    for node in table.nodes:
        provider = where[node.name]
        device = devices.get(provider, HOST)
        answer = table.answers[node.name][provider]
        host_inputs = set(answer.host_inputs)
        for i, value in enumerate(node.inputs):
            copy = need(value, HOST if i in host_inputs else device,
                        input_layout(answer, i) if layouts else None)
            if copy is not None:
                yield copy[0], copy[1], node.name
        for k, value in enumerate(node.outputs):
            if value is not None:
                home[value.name] = (device, output_layout(answer, k) if layouts else None,
                                    node.name)
    if table.nodes:
        for value in table.graph.outputs:
            copy = need(value, HOST, None)
            if copy is not None:
                yield copy[0], copy[1], None
