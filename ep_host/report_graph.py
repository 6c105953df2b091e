"""The node graph the HTML report draws: boxes (nodes, or groups of nodes above a size limit),
the edges between them with device copies marked and priced, and an outline around each
partition, laid out by grandalf's Sugiyama layering so parallel branches sit side by side.
"""

from __future__ import annotations

import graphlib
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ep_host.capability import CapabilityTable
from ep_host.partitions import compiling_groups
from ep_host.placement import Placement
from ep_host.transfers import copy_walk

# grandalf's layering grows about quadratically with the boxes plus the bends of long edges;
# past this many nodes the graph is drawn collapsed (a box per chain, partition or span)
LAYOUT_LIMIT = 1000
MAX_COPY_TENSORS = 5
NODE_H = 34
GROUP_H = 44
X_SPACE = 24
Y_SPACE = 60  # room for a copy's label between two partitions' outlines
MARGIN = 40
OUTLINE_PAD = 10


@dataclass
class Box:
    """One drawn box: a node, a graph input or output, or a group of nodes."""

    kind: str  # "node", "input", "output", "group"
    label: str
    width: float
    height: float
    node: int = -1  # index into the placement's nodes (kind "node"), or into the groups
    x: float = 0.0  # the box's centre
    y: float = 0.0


@dataclass
class Link:
    """An edge between two boxes: the tensors on it and, if any moves, the copies it prices."""

    source: int
    target: int
    tensors: list[str] = field(default_factory=list)
    points: list[tuple[float, float]] = field(default_factory=list)
    copy_bytes: int = 0
    copy_us: float = 0.0
    copies: int = 0
    copied: list[str] = field(default_factory=list)
    devices: set[str] = field(default_factory=set)
    conversions: int = 0  # of the copies, those that convert a layout (NCHW->NHWC)
    layouts: set[str] = field(default_factory=set)


def _text_width(text: str) -> float:
    return min(240.0, max(90.0, 7.0 * len(text) + 16.0))


def node_graph(table: CapabilityTable, placement: Placement | None,
               limit: int = LAYOUT_LIMIT) -> dict[str, Any]:
    """The laid-out graph for the report's JSON: boxes, links, partition outlines, its size.

    Up to ``limit`` nodes each node is a box. Above it, the first of these groupings that
    gives at most ``limit`` boxes and ``2 * limit`` bends of edges that skip layers: each chain
    of nodes on one provider (each feeding only the next) is one box; each run of consecutive
    nodes on one provider (the placement's partitions) is one box; each span of consecutive
    nodes in execution order is one box, halving their number until the bends fit. The page
    lists a group's nodes on a click.
    """
    nodes = table.nodes
    where = {n.name: n.provider for n in placement.nodes} if placement is not None else {}
    index = {n.name: i for i, n in enumerate(nodes)}
    outputs = [v.name for v in table.graph.outputs if v is not None] if table.graph else []
    for grouping in _groupings(nodes, where, outputs, limit):
        mode, groups = grouping
        drawn = _Drawn(nodes, groups, outputs)
        if drawn.bends() <= 2 * limit:
            break
    boxes, links, box_of_node = drawn.boxes, drawn.links, drawn.box_of_node
    internal = {"copies": 0, "bytes": 0, "cost_us": 0.0}
    if placement is not None:
        for t, made_by, needed_by in copy_walk(placement):
            target = (drawn.outputs[t.tensor] if needed_by is None
                      else box_of_node[index[needed_by]])
            source = (drawn.input_box(t.tensor, target) if made_by is None
                      else box_of_node[index[made_by]])
            if source == target:  # inside one group of mixed providers
                internal["copies"] += 1
                internal["bytes"] += t.nbytes
                internal["cost_us"] += t.cost_us
                continue
            link = _link(links, source, target)
            link.copies += 1
            link.copy_bytes += t.nbytes
            link.copy_us += t.cost_us
            link.devices.add(f"{t.source} -> {t.destination}")
            if t.converts:
                link.conversions += 1
                link.layouts.add(t.layouts)
            if len(link.copied) < MAX_COPY_TENSORS:
                link.copied.append(t.tensor)
    edges = list(links.values())
    width, height = _layout(boxes, edges)
    # a group box is on one provider or shows each one's share; partitions are outlined when
    # each node is a box (finding them costs a bit set per node over the groups before it)
    outlines = _outlines(nodes, placement, boxes, box_of_node) if mode == "nodes" else []
    return {
        "mode": mode,
        "limit": limit,
        "width": round(width, 1),
        "height": round(height, 1),
        # kind, node or group index, x (left), y (top), width, height, label
        "boxes": [[b.kind, b.node, round(b.x - b.width / 2, 1), round(b.y - b.height / 2, 1),
                   round(b.width, 1), round(b.height, 1),
                   b.label if b.kind in ("input", "output") else ""] for b in boxes],
        "groups": groups or [],
        # source, target, flat points, tensors, copies, bytes, cost, copied tensors, devices,
        # layout conversions among the copies, their layout changes
        "links": [[e.source, e.target, [round(c, 1) for p in e.points for c in p],
                   e.tensors[:MAX_COPY_TENSORS], len(e.tensors), e.copies, e.copy_bytes,
                   e.copy_us, e.copied, sorted(e.devices), e.conversions, sorted(e.layouts)]
                  for e in edges],
        "outlines": outlines,
        "internal_copies": internal,
    }


class _Drawn:
    """The boxes and links of one grouping (``None``: a box per node). A graph input read by
    more than ``SHARED_INPUT_READERS`` boxes gets a box beside each reader, as its edges would
    otherwise cross the whole drawing."""

    SHARED_INPUT_READERS = 2

    def __init__(self, nodes: Sequence[Any], groups: list[list[int]] | None,
                 outputs: Sequence[str]):
        self.boxes: list[Box] = []
        if groups is None:
            for i, n in enumerate(nodes):
                self.boxes.append(Box("node", n.name,
                                      _text_width(max(n.op_type, n.name, key=len)), NODE_H,
                                      node=i))
            self.box_of_node = list(range(len(nodes)))
        else:
            self.box_of_node = [0] * len(nodes)
            for g, members in enumerate(groups):
                for i in members:
                    self.box_of_node[i] = len(self.boxes)
                self.boxes.append(Box("group", "", 210.0, GROUP_H, node=g))
        self.links: dict[tuple[int, int], Link] = {}
        producer: dict[str, int] = {}
        reads: list[tuple[str, int]] = []  # graph inputs, with the box that reads them
        for i, n in enumerate(nodes):
            target = self.box_of_node[i]
            for value in n.inputs:
                if value is None or value.is_constant:
                    continue
                if value.name not in producer:
                    reads.append((value.name, target))
                    continue
                source = self.box_of_node[producer[value.name]]
                if source != target:
                    _link(self.links, source, target).tensors.append(value.name)
            for value in n.outputs:
                if value is not None:
                    producer[value.name] = i
        readers: dict[str, list[int]] = {}
        for name, target in reads:
            if target not in readers.setdefault(name, []):
                readers[name].append(target)
        self.inputs: dict[tuple[str, int | None], int] = {}
        for name, targets in readers.items():
            shared = len(targets) <= self.SHARED_INPUT_READERS
            for target in targets:
                key = (name, None if shared else target)
                if key not in self.inputs:
                    self.inputs[key] = len(self.boxes)
                    self.boxes.append(Box("input", name, _io_width(name), NODE_H))
                _link(self.links, self.inputs[key], target).tensors.append(name)
        self.outputs: dict[str, int] = {}
        for name in outputs:
            if name in producer and name not in self.outputs:
                self.outputs[name] = len(self.boxes)
                self.boxes.append(Box("output", name, _io_width(name), NODE_H))
                _link(self.links, self.box_of_node[producer[name]],
                      self.outputs[name]).tensors.append(name)

    def input_box(self, name: str, reader: int) -> int:
        return self.inputs.get((name, None), self.inputs.get((name, reader), -1))

    def bends(self) -> int:
        """How many layers the edges skip in all (each skip is a bend grandalf routes)."""
        after: dict[int, set[int]] = {i: set() for i in range(len(self.boxes))}
        for source, target in self.links:
            after[target].add(source)
        layer = [0] * len(self.boxes)
        for box in graphlib.TopologicalSorter(after).static_order():
            for source in after[box]:
                layer[box] = max(layer[box], layer[source] + 1)
        return sum(layer[t] - layer[s] - 1 for s, t in self.links)


def _io_width(name: str) -> float:
    return _text_width(max(name, "graph output", key=len))


def _link(links: dict[tuple[int, int], Link], source: int, target: int) -> Link:
    link = links.get((source, target))
    if link is None:
        link = links[(source, target)] = Link(source, target)
    return link


def _groupings(nodes: Sequence[Any], where: Mapping[str, str], outputs: Sequence[str],
               limit: int) -> Iterator[tuple[str, list[list[int]] | None]]:
    """The ways to draw the nodes, finest first, each with at most ``limit`` boxes (node
    indices per box, in execution order; ``None``: a box per node)."""
    if len(nodes) <= limit:
        yield "nodes", None
    chains = _chains(nodes, where, outputs)
    if len(chains) <= limit:
        yield "chains", chains
    runs: list[list[int]] = []
    for i, n in enumerate(nodes):
        if runs and where.get(n.name) == where.get(nodes[runs[-1][-1]].name):
            runs[-1].append(i)
        else:
            runs.append([i])
            if len(runs) > limit:
                break
    else:
        yield "partitions", runs
    count = limit
    while True:
        size = math.ceil(len(nodes) / count)
        yield "spans", [list(range(s, min(s + size, len(nodes))))
                        for s in range(0, len(nodes), size)]
        if count == 1:
            return
        count //= 2


def _chains(nodes: Sequence[Any], where: Mapping[str, str],
            outputs: Sequence[str]) -> list[list[int]]:
    """Chains of nodes on one provider in which each node feeds only the next and the next
    reads only it (contracting them keeps the graph acyclic), in order of their first node."""
    producer: dict[str, int] = {}
    producers: list[set[int]] = [set() for _ in nodes]
    readers: list[set[int]] = [set() for _ in nodes]
    for i, n in enumerate(nodes):
        for value in n.inputs:
            if value is not None and value.name in producer:
                producers[i].add(producer[value.name])
                readers[producer[value.name]].add(i)
        for value in n.outputs:
            if value is not None:
                producer[value.name] = i
    graph_outputs = set(outputs)
    chain_of: list[int] = [-1] * len(nodes)
    chains: list[list[int]] = []
    for i, n in enumerate(nodes):
        (p,) = producers[i] if len(producers[i]) == 1 else (None,)
        if (p is not None and len(readers[p]) == 1 and where.get(nodes[p].name) ==
                where.get(n.name) and not any(v is not None and v.name in graph_outputs
                                              for v in nodes[p].outputs)):
            chain_of[i] = chain_of[p]
            chains[chain_of[i]].append(i)
        else:
            chain_of[i] = len(chains)
            chains.append([i])
    return chains


def _outlines(nodes: Sequence[Any], placement: Placement | None, boxes: Sequence[Box],
              box_of_node: Sequence[int]) -> list[list[Any]]:
    """A rectangle around each partition's boxes: the connected groups of nodes on one provider
    (those a compiling provider runs as one kernel), as provider, first node, node count,
    estimated time and bounds."""
    if placement is None:
        return []
    where = {n.name: n.provider for n in placement.nodes}
    cost = {n.name: n.cost_us for n in placement.nodes}
    index = {n.name: i for i, n in enumerate(nodes)}
    out = []
    for group in compiling_groups(nodes, where, set(where.values())):
        members = [index[n.name] for n in group.nodes]
        drawn = [boxes[box_of_node[i]] for i in members]
        left = min(b.x - b.width / 2 for b in drawn) - OUTLINE_PAD
        top = min(b.y - b.height / 2 for b in drawn) - OUTLINE_PAD - 12
        right = max(b.x + b.width / 2 for b in drawn) + OUTLINE_PAD
        bottom = max(b.y + b.height / 2 for b in drawn) + OUTLINE_PAD
        out.append([group.provider, members[0], len(members),
                    sum(cost[n.name] for n in group.nodes), round(left, 1), round(top, 1),
                    round(right - left, 1), round(bottom - top, 1)])
    return out


class _View:
    """What grandalf reads and writes on a vertex or an edge: size, position, route."""

    def __init__(self, width: float = 0.0, height: float = 0.0):
        self.w = width
        self.h = height
        self.xy = (0.0, 0.0)
        self.path: list[tuple[float, float]] = []

    def setpath(self, points: list[tuple[float, float]]) -> None:
        self.path = points


def _layout(boxes: list[Box], links: list[Link]) -> tuple[float, float]:
    """Place the boxes top to bottom with grandalf's Sugiyama layout, each connected part
    beside the last; set every box's centre and every link's route. Returns the drawing's
    width and height."""
    # grandalf walks paths recursively, a frame per box on the path
    depth = sys.getrecursionlimit()
    sys.setrecursionlimit(max(depth, 4 * len(boxes) + 1000))
    try:
        return _place(boxes, links)
    finally:
        sys.setrecursionlimit(depth)


def _place(boxes: list[Box], links: list[Link]) -> tuple[float, float]:
    from grandalf.graphs import Edge, Graph, Vertex
    from grandalf.layouts import SugiyamaLayout

    vertices = []
    for i, b in enumerate(boxes):
        v = Vertex(i)
        v.view = _View(b.width, b.height)
        vertices.append(v)
    edges = []
    for link in links:
        e = Edge(vertices[link.source], vertices[link.target], data=link)
        e.view = _View()
        edges.append(e)
    graph = Graph(vertices, edges)
    left = float(MARGIN)
    height = 0.0
    for part in graph.C:
        if len(part.sV) == 1:
            (v,) = part.sV
            v.view.xy = (v.view.w / 2, v.view.h / 2)
        else:
            layout = SugiyamaLayout(part)
            layout.xspace = X_SPACE
            layout.yspace = Y_SPACE
            layout.init_all()
            layout.draw(2)
        xs = [v.view.xy[0] - v.view.w / 2 for v in part.sV]
        ys = [v.view.xy[1] - v.view.h / 2 for v in part.sV]
        dx = left - min(xs)
        dy = MARGIN - min(ys)
        right = 0.0
        for v in part.sV:
            b = boxes[v.data]
            b.x = v.view.xy[0] + dx
            b.y = v.view.xy[1] + dy
            right = max(right, b.x + b.width / 2)
            height = max(height, b.y + b.height / 2)
        for e in part.sE:
            route = [(x + dx, y + dy) for x, y in (e.view.path or [e.v[0].view.xy,
                                                                   e.v[1].view.xy])]
            source, target = boxes[e.v[0].data], boxes[e.v[1].data]
            route[0] = (source.x, source.y + source.height / 2)
            route[-1] = (target.x, target.y - target.height / 2)
            e.data.points = route
        left = right + 3 * X_SPACE
    return left - 2 * X_SPACE + MARGIN, height + MARGIN
