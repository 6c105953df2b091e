"""The placement value (where every node runs, its cost, every provider's answer, the copies it
implies; JSON with a versioned schema) and :func:`choose`, which builds it from the capability
table with a strategy. Pins override the strategy; a node nobody claims is a PlacementError.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ep_host import strategies
from ep_host.capability import CapabilityTable
from ep_host.collector import paused_gc
from ep_host.errors import PlacementError, UnknownNodeError
from ep_host.graph import GraphView
from ep_host.match import KernelMatch
from ep_host.partitions import compiling_groups, launch_cost_us
from ep_host.provider import Device
from ep_host.transfers import Transfer, implied_transfers

SCHEMA = "ep-host/placement/v1"


@dataclass(slots=True)
class NodePlacement:
    name: str
    op_type: str
    domain: str
    provider: str
    cost_us: float
    pinned: bool = False


def find_node(table: CapabilityTable, name: str, model: str = "") -> tuple[str, str]:
    """The node of ``table`` that does the work of node ``name`` (a name of the model as
    written, or of the optimized model), and a note saying what became of it (``""`` when it is
    there as written). A name that matches nothing, or a node folded into a constant, raises
    :class:`UnknownNodeError`; the message lists close matches."""
    if name in table.answers:
        return name, ""
    loaded = getattr(table.graph, "model", None)
    label = model or (loaded.label if loaded is not None else "the model")
    if loaded is not None:
        from ep_host.optimize import resolve_node

        target, note = resolve_node(loaded, name)
        if target is None:
            raise UnknownNodeError(f"{label}: {note}")
        if target in table.answers:
            return target, note
    candidates = list(table.answers) + list(getattr(loaded, "merged", {}))
    close = [c for c in candidates if c.startswith(name)][:5]
    close += difflib.get_close_matches(name, candidates, n=5, cutoff=0.6)
    close = list(dict.fromkeys(close))[:6]
    hint = (f"; close matches: {', '.join(repr(c) for c in close)}" if close
            else f"; its nodes include {', '.join(repr(c) for c in candidates[:5])}"
            if candidates else "")
    raise UnknownNodeError(f"{label}: no node named {name!r}{hint}")


def source_nodes(table: CapabilityTable, name: str) -> list[str]:
    """The names, in the model as written, of the nodes whose work node ``name`` of ``table``
    does (a fused node: every node it fused; any other: itself)."""
    loaded = getattr(table.graph, "model", None)
    return list(loaded.sources.get(name, [name])) if loaded is not None else [name]


class NodesByName(dict):
    """Placed nodes by name (``Placement.by_node``); a name of the model as written finds the
    node doing its work after graph optimizations (``by_node["conv1/Conv"]`` is the node
    ``conv1/Conv::FusedConv``). An unknown name raises :class:`UnknownNodeError` (a
    ``KeyError``) listing close matches."""

    def __init__(self, nodes: Sequence[NodePlacement], table: CapabilityTable, model: str):
        super().__init__((n.name, n) for n in nodes)
        self.table, self.model = table, model

    def __missing__(self, name: str) -> NodePlacement:
        target, _ = find_node(self.table, name, self.model)
        if target not in self:
            body = self.table.expanded.get(target)
            what = (f"it runs as the {len(body)} nodes of its function body or the nodes it "
                    f"fused: {', '.join(body[:3])}{', ...' if len(body) > 3 else ''}"
                    if body else "it is not placed")
            raise UnknownNodeError(f"{self.model or 'the model'}: node {name!r} is not placed "
                                   f"itself: {what}")
        return dict.__getitem__(self, target)

    def get(self, name: Any, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: object) -> bool:
        return self.get(name) is not None


@dataclass
class Partition:
    """A maximal run of consecutive nodes (in execution order) on one provider."""

    provider: str
    nodes: list[str]
    cost_us: float


@dataclass
class CompiledPartition:
    """A group of connected nodes that a provider which compiles runs as one kernel."""

    provider: str
    nodes: list[str]
    cost_us: float  # its nodes' estimated time
    launch_us: float  # the provider's launch per partition

    def to_dict(self) -> dict[str, Any]:
        return {"provider": self.provider, "nodes": list(self.nodes), "cost_us": self.cost_us,
                "launch_us": self.launch_us}


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
    # each strategy's estimated total_us (``comparison``), worked out when first read: a
    # session that never reports it does not price every strategy
    compared: Callable[[], dict[str, float]] | None = field(default=None, repr=False,
                                                            compare=False)

    @cached_property
    def comparison(self) -> dict[str, float] | None:
        """Each registered strategy's estimated total_us, for a strategy that compares
        (``optimal``); else ``None``."""
        return None if self.compared is None else self.compared()

    @property
    def by_node(self) -> NodesByName:
        """Placed nodes by name; names of the model as written resolve (see
        :class:`NodesByName`)."""
        return NodesByName(self.nodes, self.table, self.model)

    def answers_for(self, name: str) -> dict[str, KernelMatch]:
        """Every provider's answer for node ``name`` (a name of the model as written resolves as
        in ``by_node``)."""
        target, _ = find_node(self.table, name, self.model)
        return dict(self.table.answers[target])

    def source_nodes(self, name: str) -> list[str]:
        """The names, in the model as written, of the nodes whose work node ``name`` does."""
        return source_nodes(self.table, name)

    @property
    def node_cost_us(self) -> float:
        return sum(n.cost_us for n in self.nodes)

    @property
    def transfer_cost_us(self) -> float:
        return sum(t.cost_us for t in self.transfers)

    @property
    def launch_cost_us(self) -> float:
        """What placement charges for the partitions of providers that compile them
        (``ProviderInfo.partition_launch_us``; see :func:`ep_host.partitions.launch_cost_us`)."""
        launch = self.table.partition_launch_us
        if not launch:
            return 0.0
        where = {n.name: n.provider for n in self.nodes}
        return launch_cost_us(self.table.nodes, [where[n.name] for n in self.table.nodes],
                              launch)

    @property
    def total_us(self) -> float:
        return self.node_cost_us + self.transfer_cost_us + self.launch_cost_us

    def compiled_partitions(self) -> list[CompiledPartition]:
        """The groups that providers which compile will get as one kernel each (as the session
        forms them), with their nodes' estimated time and the launch each one adds."""
        if not self.table.compiling:
            return []
        where = {n.name: n.provider for n in self.nodes}
        cost = {n.name: n.cost_us for n in self.nodes}
        nodes = [n for n in self.table.nodes
                 if not (n.outputs and all(v is None or v.is_constant for v in n.outputs))]
        launch = self.table.partition_launch_us
        return [CompiledPartition(g.provider, [n.name for n in g.nodes],
                                  sum(cost[n.name] for n in g.nodes), launch.get(g.provider, 0.0))
                for g in compiling_groups(nodes, where, self.table.compiling)]

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
                    "source_nodes": self.source_nodes(n.name),
                }
                for n in self.nodes
            ],
            "transfers": [t.to_dict() for t in self.transfers],
            "totals": {
                "providers": self.totals(),
                "node_cost_us": self.node_cost_us,
                "transfer_cost_us": self.transfer_cost_us,
                "partition_launch_us": self.launch_cost_us,
                "total_us": self.total_us,
            },
            "partitions": [
                {"provider": p.provider, "first": p.nodes[0], "last": p.nodes[-1],
                 "nodes": len(p.nodes), "cost_us": p.cost_us}
                for p in self.partitions()
            ],
            "compiled_partitions": [p.to_dict() for p in self.compiled_partitions()],
            "comparison": self.comparison,
        }


def unplaceable_message(table: CapabilityTable, names: Sequence[str], model: str) -> str:
    if not table.providers:  # one line, naming the nodes as written, not each function body's
        body = {b for inner in table.expanded.values() for b in inner}
        written = [n.name for n in table.all_nodes or table.nodes if n.name not in body]
        shown = ", ".join(written[:10]) + (", ..." if len(written) > 10 else "")
        return (f"{model}: no provider is loaded (see `ep-host providers`), so none of its "
                f"{len(written)} node(s) can be placed: {shown}")
    lines = [f"{model}: {len(names)} node(s) cannot be placed on any provider:"]
    by_name = {n.name: n for n in table.nodes}
    for name in names:
        node = by_name[name]
        lines.append(f"  {name} ({node.qualified_op}):")
        for p in table.providers:
            a = table.answers[name][p]
            lines.append(f"    {p}: {a.reason if not a.is_supported else 'claims it'}")
    return "\n".join(lines)


def choose(
    table: CapabilityTable,
    devices: Mapping[str, Device],
    *,
    strategy: str = strategies.DEFAULT,
    pins: Mapping[str, str] | None = None,
    model: str = "",
    graph: GraphView | None = None,
) -> Placement:
    """Place every node of ``table`` with a registered strategy (:mod:`ep_host.strategies`);
    raises :class:`PlacementError` for an unknown strategy, a bad pin, or unplaceable nodes
    (listing them all).

    With a strategy that compares (``optimal``), ``Placement.comparison`` holds the estimated
    totals of every registered strategy (with the same pins)."""
    chosen = strategies.get(strategy)
    pins = _resolved_pins(table, pins or {}, model)
    _check_pins(table, pins, model)
    with paused_gc():
        claims = _claims(table, pins, model)
        request = strategies.PlacementRequest(table, devices, pins, claims)
        nodes = [NodePlacement(node.name, node.op_type, node.domain, provider, claim[provider],
                               node.name in pins)
                 for node, provider, claim in zip(table.nodes, request.placed_by(chosen.name),
                                                  claims, strict=True)]
        placement = Placement(chosen.name, list(table.providers), nodes, table, dict(devices),
                              model=model,
                              compared=request.comparison if chosen.compares else None)
        placement.transfers = implied_transfers(placement)
    return placement


def _resolved_pins(table: CapabilityTable, pins: Mapping[str, str],
                   model: str) -> dict[str, str]:
    """``pins`` by the names of the nodes to place: a name of the model as written becomes the
    node doing its work; two pins of one node to different providers are an error."""
    resolved: dict[str, str] = {}
    named: dict[str, str] = {}
    for name, provider in pins.items():
        try:
            target, _ = find_node(table, name, model)
        except UnknownNodeError as exc:
            raise PlacementError(f"--pin {name}={provider}: {exc}") from None
        if resolved.get(target, provider) != provider:
            raise PlacementError(
                f"{model}: --pin {named[target]}={resolved[target]} and --pin {name}={provider} "
                f"name one node, {target!r}, after the graph optimizations "
                "(--no-optimize keeps them apart)")
        resolved[target], named[target] = provider, name
    return resolved


def _check_pins(table: CapabilityTable, pins: Mapping[str, str], model: str) -> None:
    """Every pin names a node of the model and a provider in use."""
    known = {n.name for n in table.nodes} if pins else set()
    for node_name, provider in pins.items():
        if node_name not in known:
            raise PlacementError(f"{model}: --pin names node {node_name!r}, which the model lacks")
        if provider not in table.providers:
            raise PlacementError(
                f"{model}: --pin {node_name}={provider}: provider {provider!r} is not in use "
                f"(providers: {', '.join(table.providers) or 'none'})"
            )


def _claims(table: CapabilityTable, pins: Mapping[str, str],
            model: str) -> list[dict[str, float]]:
    """Per node, the providers allowed to run it (its pin alone, when pinned) in the user's
    order, with their ``total_us``. A pin to a declining provider, or any node nobody claims,
    is a :class:`PlacementError`."""
    claims: list[dict[str, float]] = []
    unplaceable: list[str] = []
    answers = table.answers
    providers = table.providers
    by_row: dict[int, dict[str, float]] = {}
    totals: dict[int, float] = {}
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
            claims.append({pin: answer.cost.total_us})
            continue
        claim = by_row.get(id(row))
        if claim is None:  # nodes of one shared row (equal answers) share their claims
            claim = by_row[id(row)] = {}
            for p in providers:
                a = row[p]
                if a.is_supported:
                    total = totals.get(id(a))
                    if total is None:  # per claim object: providers share claims across nodes
                        total = totals[id(a)] = a.cost.total_us
                    claim[p] = total
        if not claim:
            unplaceable.append(name)
        claims.append(claim)
    if unplaceable:
        raise PlacementError(unplaceable_message(table, unplaceable, model))
    return claims
