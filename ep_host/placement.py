"""Choosing a provider for every node from the capability table, and pricing the copies.

Strategies: ``priority`` (the first provider in the user's order that claims the node, as
onnxruntime places) and ``greedy`` (each node's cheapest ``total_us``). Ties break by the user's
provider order. Pins override both; a node nobody claims is a :class:`PlacementError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ep_host.capability import CapabilityTable
from ep_host.errors import PlacementError
from ep_host.graph import GraphView, paused_gc
from ep_host.match import KernelMatch
from ep_host.provider import HOST, Device

SCHEMA = "ep-host/placement/v1"
STRATEGIES = ("greedy", "priority")


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


@dataclass
class NodePlacement:
    name: str
    op_type: str
    domain: str
    provider: str
    cost_us: float
    pinned: bool = False


@dataclass
class Partition:
    """A maximal run of consecutive nodes (in execution order) on one provider."""

    provider: str
    nodes: list[str]
    cost_us: float


@dataclass
class Placement:
    """Where every node runs, why, and what it costs; keeps the whole capability table."""

    strategy: str
    providers: list[str]
    nodes: list[NodePlacement]
    table: CapabilityTable
    devices: dict[str, Device]
    transfers: list[Transfer] = field(default_factory=list)
    model: str = ""

    @property
    def by_node(self) -> dict[str, NodePlacement]:
        return {n.name: n for n in self.nodes}

    @property
    def node_cost_us(self) -> float:
        return sum(n.cost_us for n in self.nodes)

    @property
    def transfer_cost_us(self) -> float:
        return sum(t.cost_us for t in self.transfers)

    @property
    def total_us(self) -> float:
        return self.node_cost_us + self.transfer_cost_us

    def totals(self) -> dict[str, dict[str, float]]:
        out = {p: {"nodes": 0, "cost_us": 0.0} for p in self.providers}
        for n in self.nodes:
            out[n.provider]["nodes"] += 1
            out[n.provider]["cost_us"] += n.cost_us
        return out

    def partitions(self) -> list[Partition]:
        parts: list[Partition] = []
        for n in self.nodes:
            if parts and parts[-1].provider == n.provider:
                parts[-1].nodes.append(n.name)
                parts[-1].cost_us += n.cost_us
            else:
                parts.append(Partition(n.provider, [n.name], n.cost_us))
        return parts

    def to_dict(self) -> dict[str, Any]:
        answers = self.table.answers
        return {
            "schema": SCHEMA,
            "model": self.model,
            "strategy": self.strategy,
            "providers": [
                {"name": p, "device": self.devices[p].name if p in self.devices else None}
                for p in self.providers
            ],
            "nodes": [
                {
                    "name": n.name,
                    "op_type": n.op_type,
                    "domain": n.domain,
                    "provider": n.provider,
                    "cost_us": n.cost_us,
                    "pinned": n.pinned,
                    "answers": {p: answers[n.name][p].to_dict() for p in self.providers},
                }
                for n in self.nodes
            ],
            "transfers": [t.to_dict() for t in self.transfers],
            "totals": {
                "providers": self.totals(),
                "node_cost_us": self.node_cost_us,
                "transfer_cost_us": self.transfer_cost_us,
                "total_us": self.total_us,
            },
            "partitions": [
                {"provider": p.provider, "first": p.nodes[0], "last": p.nodes[-1],
                 "nodes": len(p.nodes), "cost_us": p.cost_us}
                for p in self.partitions()
            ],
        }


def unplaceable_message(table: CapabilityTable, names: Sequence[str], model: str) -> str:
    lines = [f"{model}: {len(names)} node(s) cannot be placed on any provider:"]
    by_name = {n.name: n for n in table.nodes}
    for name in names:
        node = by_name[name]
        lines.append(f"  {name} ({node.qualified_op}):")
        for p in table.providers:
            a = table.answers[name][p]
            lines.append(f"    {p}: {a.reason if not a.is_supported else 'claims it'}")
        if not table.providers:
            lines.append("    no provider is loaded (see `ep-host providers`)")
    return "\n".join(lines)


def choose(
    table: CapabilityTable,
    devices: Mapping[str, Device],
    *,
    strategy: str = "greedy",
    pins: Mapping[str, str] | None = None,
    model: str = "",
    graph: GraphView | None = None,
) -> Placement:
    """Place every node of ``table``; raises :class:`PlacementError` listing unplaceable nodes."""
    if strategy not in STRATEGIES:
        raise PlacementError(
            f"unknown placement strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
        )
    pins = dict(pins or {})
    known = {n.name for n in table.nodes} if pins else set()
    for node_name, provider in pins.items():
        if node_name not in known:
            raise PlacementError(f"{model}: --pin names node {node_name!r}, which the model lacks")
        if provider not in table.providers:
            raise PlacementError(
                f"{model}: --pin {node_name}={provider}: provider {provider!r} is not in use "
                f"(providers: {', '.join(table.providers) or 'none'})"
            )
    chosen: list[NodePlacement] = []
    unplaceable: list[str] = []
    answers = table.answers
    providers = table.providers
    with paused_gc():
        for node in table.nodes:
            name = node.name
            row = answers[name]
            pin = pins.get(name) if pins else None
            if pin is not None:
                answer = row[pin]
                if not answer.is_supported:
                    raise PlacementError(
                        f"{model}: node {name!r} is pinned to {pin!r}, which declines it: "
                        f"{answer.reason}"
                    )
                provider, cost = pin, answer.cost.total_us
            else:
                provider, cost = _pick(row, providers, strategy)
                if provider is None:
                    unplaceable.append(name)
                    continue
            chosen.append(NodePlacement(name, node.op_type, node.domain, provider, cost,
                                        pin is not None))
        if unplaceable:
            raise PlacementError(unplaceable_message(table, unplaceable, model))
        placement = Placement(strategy, list(providers), chosen, table, dict(devices), model=model)
        placement.transfers = implied_transfers(placement)
    return placement


def _pick(
    row: Mapping[str, KernelMatch], providers: Sequence[str], strategy: str
) -> tuple[str | None, float]:
    """The chosen provider and its ``total_us`` (``None`` when no provider claims the node)."""
    best = None
    best_cost = 0.0
    for p in providers:  # in the user's order, so the first of equal costs wins
        answer = row[p]
        if not answer.is_supported:
            continue
        cost = answer.cost.total_us
        if strategy == "priority":
            return p, cost
        if best is None or cost < best_cost:
            best, best_cost = p, cost
    return best, best_cost


def implied_transfers(placement: Placement) -> list[Transfer]:
    """The device copies a placement implies: each tensor is charged once per destination
    device; graph inputs start on the host, graph outputs end there, host inputs are priced."""
    devices = placement.devices
    table = placement.table
    where = {n.name: n.provider for n in placement.nodes}
    if all(devices.get(p, HOST).name == HOST.name for p in set(where.values())):
        return []  # every value starts, lives and ends on the host: nothing moves
    home: dict[str, Device] = {}
    moved: set[tuple[str, str]] = set()
    out: list[Transfer] = []

    def need(value: Any, dest: Device) -> None:
        if value is None:
            return
        src = home.get(value.name, HOST)
        if src.name == dest.name or (value.name, dest.name) in moved:
            return
        moved.add((value.name, dest.name))
        nbytes = value.nbytes
        cost = src.copy_cost_us(nbytes) + dest.copy_cost_us(nbytes)
        out.append(Transfer(value.name, src.name, dest.name, nbytes, cost))

    for node in table.nodes:
        provider = where[node.name]
        device = devices.get(provider, HOST)
        host_inputs = set(table.answers[node.name][provider].host_inputs)
        for i, value in enumerate(node.inputs):
            need(value, HOST if i in host_inputs else device)
        for value in node.outputs:
            if value is not None:
                home[value.name] = device
    if table.nodes:
        for value in table.graph.outputs:
            need(value, HOST)
    return out
