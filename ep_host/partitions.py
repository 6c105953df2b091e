"""Partitions for providers that compile: the maximal connected groups of nodes placed on one
such provider that keep the graph acyclic, and the order in which groups and the other nodes
run once each group is one step.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ep_host.graph import GraphView, NodeView, ValueView
from ep_host.subgraph import PartitionView


@dataclass(frozen=True)
class Group:
    """Nodes that one provider compiles as one kernel, in execution order."""

    provider: str
    nodes: tuple[NodeView, ...]


def compiling_groups(nodes: Sequence[NodeView], where: Mapping[str, str],
                     compiling: Iterable[str]) -> list[Group]:
    """Group the nodes placed on a provider in ``compiling`` into connected groups, in order.

    A node joins the group of one of its producers on the same provider unless some path leaves
    that group and comes back to the node (which would make the graph cyclic once the group is
    one step): it checks that no other producer is reached from the group. Otherwise it starts a
    group of its own. Nodes with subgraphs stay alone.
    """
    compiling = set(compiling)
    group_of: dict[str, int] = {}  # node name -> group index
    members: list[list[NodeView]] = []
    owner: list[str] = []
    producer: dict[str, NodeView] = {}
    reach: dict[str, int] = {}  # node name -> bitset of the groups that reach it
    for node in nodes:
        parents = list(dict.fromkeys(
            producer[v.name] for v in node.inputs if v is not None and v.name in producer))
        seen = 0
        for p in parents:
            seen |= reach[p.name]
            if p.name in group_of:
                seen |= 1 << group_of[p.name]
        reach[node.name] = seen
        provider = where.get(node.name)
        if provider in compiling and not node.has_subgraphs:
            chosen = None
            for p in parents:
                g = group_of.get(p.name)
                if g is None or owner[g] != provider:
                    continue
                # joining g is safe when no producer outside g is reached from g
                if all(group_of.get(q.name) == g or not (reach[q.name] >> g) & 1
                       for q in parents):
                    chosen = g
                    break
            if chosen is None:
                chosen = len(members)
                members.append([])
                owner.append(provider)
            members[chosen].append(node)
            group_of[node.name] = chosen
        for v in node.outputs:
            if v is not None:
                producer[v.name] = node
    return [Group(owner[i], tuple(m)) for i, m in enumerate(members)]


def execution_order(nodes: Sequence[NodeView],
                    groups: Sequence[Group]) -> list[NodeView | Group]:
    """The nodes with each group as one unit, in an order where every unit comes after the
    units it reads from; ties keep the nodes' own order."""
    unit_of: dict[str, int] = {}
    units: list[NodeView | Group] = []
    first: list[int] = []
    index = {n.name: i for i, n in enumerate(nodes)}
    for group in groups:
        for n in group.nodes:
            unit_of[n.name] = len(units)
        units.append(group)
        first.append(min(index[n.name] for n in group.nodes))
    for n in nodes:
        if n.name not in unit_of:
            unit_of[n.name] = len(units)
            units.append(n)
            first.append(index[n.name])
    producer = {v.name: unit_of[n.name] for n in nodes for v in n.outputs if v is not None}
    after: list[set[int]] = [set() for _ in units]
    waiting = [0] * len(units)
    for n in nodes:
        u = unit_of[n.name]
        for v in n.inputs:
            p = producer.get(v.name) if v is not None else None
            if p is not None and p != u and u not in after[p]:
                after[p].add(u)
                waiting[u] += 1
    ready = [(first[u], u) for u in range(len(units)) if not waiting[u]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, u = heapq.heappop(ready)
        order.append(units[u])
        for v in after[u]:
            waiting[v] -= 1
            if not waiting[v]:
                heapq.heappush(ready, (first[v], v))
    if len(order) != len(units):
        raise AssertionError("partition grouping made the graph cyclic")  # by construction not
    return order


def readers(nodes: Sequence[NodeView], graph: GraphView) -> dict[str, set[str]]:
    """Value name -> the nodes that read it (bodies' outer names included); the graph's
    outputs are read by ``""``."""
    out: dict[str, set[str]] = {}
    for n in nodes:
        for v in n.inputs:
            if v is not None:
                out.setdefault(v.name, set()).add(n.name)
        for body in n.subgraphs.values() if n.has_subgraphs else ():
            for name in body.outer_names():
                out.setdefault(name, set()).add(n.name)
    for v in graph.outputs:
        out.setdefault(v.name, set()).add("")
    return out


def partition_view(group: Group, name: str, read_by: Mapping[str, set[str]]) -> PartitionView:
    """``group`` with its boundary: the non-constant values it reads from outside, the values
    read outside it (``read_by``: see :func:`readers`), and the constants its nodes read."""
    members = {n.name for n in group.nodes}
    inside = {v.name for n in group.nodes for v in n.outputs if v is not None}
    inputs: dict[str, ValueView] = {}
    constants: dict[str, ValueView] = {}
    for n in group.nodes:
        for v in n.inputs:
            if v is None or v.name in inside:
                continue
            (constants if v.is_constant else inputs).setdefault(v.name, v)
    outputs = [v for n in group.nodes for v in n.outputs
               if v is not None and read_by.get(v.name, set()) - members]
    return PartitionView(name, group.provider, group.nodes, list(inputs.values()), outputs,
                         list(constants.values()))


def entry_sources(nodes: Sequence[NodeView]) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """Where each node's non-constant inputs come from, for pricing partition launches: the
    (producer, consumer) index pairs between ``nodes``, each node's count of distinct sources,
    and whether it reads from outside ``nodes`` (a graph input, an outer value, or only
    constants: then it counts one outside source)."""
    producer = {v.name: i for i, n in enumerate(nodes) for v in n.outputs if v is not None}
    find = producer.get
    pairs: list[tuple[int, int]] = []
    count: list[int] = []
    outside: list[int] = []
    for i, n in enumerate(nodes):
        sources: dict[int, None] = {}  # in the order the inputs name them
        reads_outside = False
        for v in n.inputs:
            if v is None:
                continue
            p = find(v.name)
            if p is None:
                reads_outside = reads_outside or not v.is_constant
            elif p != i:
                sources[p] = None
        if not sources:
            reads_outside = True
        pairs.extend([(p, i) for p in sources])
        count.append(len(sources) + reads_outside)
        outside.append(int(reads_outside))
    return pairs, count, outside


def launch_cost_us(nodes: Sequence[NodeView], providers: Sequence[str],
                   launch_us: Mapping[str, float]) -> float:
    """The partition launches placement charges: a node on a provider with a launch cost ``L``
    pays ``L`` times the share of its sources (producers, the outside) on other providers. A
    chain pays ``L`` per partition exactly; a node fed both from its partition and from outside
    pays the outside share (more than the partitions need); a split the host makes to keep a
    group acyclic is not charged (less). Each term depends on two nodes, so a minimum cut
    optimises it exactly between two providers.
    """
    if not launch_us:
        return 0.0
    pairs, count, outside = entry_sources(nodes)
    total = 0.0
    for i, p in enumerate(providers):
        launch = launch_us.get(p, 0.0)
        if launch:
            total += launch * outside[i] / count[i]
    for src, dst in pairs:
        launch = launch_us.get(providers[dst], 0.0)
        if launch and providers[src] != providers[dst]:
            total += launch / count[dst]
    return total
