"""The report's graph layout: grandalf's Sugiyama layout (what the report uses) against networkx's
layered layout (``topological_generations`` + ``multipartite_layout``), on onnx's light
ResNet-50 (edge crossings, edges through boxes) and on residual chains (layout time).

    .venv/bin/python bench/report_layout.py [--sizes 1000,5000,50000] [--grandalf-max 5000]
                                            [--report-nodes 50000]

The chains are ``n`` nodes in a line with a skip edge over every third node (a ResNet-like
block structure). grandalf is timed only up to ``--grandalf-max`` nodes: it grows about
quadratically. ``--report-nodes`` times ``write_report`` alone on a placed Add/Relu chain.
"""

from __future__ import annotations

import argparse
import itertools
import time
from typing import Any


def resnet_graph() -> tuple[Any, list[Any], list[Any]]:
    """ResNet-50 (light) placed on the CPU EP, as the report draws it with grandalf."""
    from ep_host import capability
    from ep_host.loading import load_model
    from ep_host.placement import choose
    from ep_host.report_graph import node_graph
    from ep_host.session import discover_host
    from ep_host.testing.models import light_model_path

    host = discover_host(["cpu"])
    table = capability.walk(host, load_model(light_model_path("resnet50")), ["cpu"])
    placement = choose(table, {"cpu": host.records["cpu"].info.device})
    return node_graph(table, placement), table, placement


def networkx_routes(graph: dict[str, Any]) -> list[list[tuple[float, float]]]:
    """The same boxes and edges laid out by networkx (nodes of a layer spread as it places
    them, scaled so that neighbours are 260 px apart; a layer every 70 px), edges straight."""
    import networkx as nx

    g = nx.DiGraph()
    g.add_nodes_from(range(len(graph["boxes"])))
    g.add_edges_from((link[0], link[1]) for link in graph["links"])
    for layer, members in enumerate(nx.topological_generations(g)):
        for m in members:
            g.nodes[m]["layer"] = layer
    pos = nx.multipartite_layout(g, subset_key="layer", align="horizontal")
    gaps = [abs(pos[u][0] - pos[v][0]) for u in g for v in g
            if u < v and g.nodes[u]["layer"] == g.nodes[v]["layer"]]
    scale = 260.0 / min(gaps) if gaps else 1.0
    boxes = graph["boxes"]
    for v in g:
        b = boxes[v]
        b[3] = float(pos[v][0] * scale) - b[5] / 2
        b[4] = g.nodes[v]["layer"] * 70.0 - b[6] / 2
    return [[(boxes[s][3] + boxes[s][5] / 2, boxes[s][4] + boxes[s][6]),
             (boxes[t][3] + boxes[t][5] / 2, boxes[t][4])] for s, t, *_ in graph["links"]]


def grandalf_routes(graph: dict[str, Any]) -> list[list[tuple[float, float]]]:
    return [list(zip(link[2][::2], link[2][1::2])) for link in graph["links"]]


def _cross(p, q, r, s) -> bool:
    def side(a, b, c):
        v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        return int(v > 1e-9) - int(v < -1e-9)
    return (side(p, q, r) * side(p, q, s) < 0) and (side(r, s, p) * side(r, s, q) < 0)


def crossings(routes: list[list[tuple[float, float]]]) -> int:
    """Pairs of edges whose drawn segments cross (edges that share an end are not counted)."""
    segments = [list(zip(r, r[1:])) for r in routes]
    count = 0
    for a, b in itertools.combinations(range(len(routes)), 2):
        if {routes[a][0], routes[a][-1]} & {routes[b][0], routes[b][-1]}:
            continue
        if any(_cross(p, q, r, s) for p, q in segments[a] for r, s in segments[b]):
            count += 1
    return count


def through_boxes(graph: dict[str, Any], routes: list[list[tuple[float, float]]]) -> int:
    """Edges drawn across the inside of a box they do not join."""
    count = 0
    for link, route in zip(graph["links"], routes):
        for i, b in enumerate(graph["boxes"]):
            if i in (link[0], link[1]):
                continue
            x, y, w, h = b[3:7]
            if any(x + 1 < px < x + w - 1 and y + 1 < py < y + h - 1
                   for (ax, ay), (bx, by) in zip(route, route[1:])
                   for px, py in ((ax + (bx - ax) * t / 20, ay + (by - ay) * t / 20)
                                  for t in range(21))):
                count += 1
                break
    return count


def residual_chain(n: int) -> tuple[list[int], list[tuple[int, int]]]:
    edges = [(i, i + 1) for i in range(n - 1)] + [(i, i + 3) for i in range(0, n - 3, 3)]
    return list(range(n)), edges


def time_layouts(n: int, with_grandalf: bool) -> dict[str, float]:
    import networkx as nx

    from ep_host.report_graph import Box, Link, _layout

    vertices, edges = residual_chain(n)
    out = {}
    t0 = time.perf_counter()
    g = nx.DiGraph(edges)
    for layer, members in enumerate(nx.topological_generations(g)):
        for m in members:
            g.nodes[m]["layer"] = layer
    nx.multipartite_layout(g, subset_key="layer", align="horizontal")
    out["networkx"] = time.perf_counter() - t0
    if with_grandalf:
        boxes = [Box("node", str(v), 120.0, 34.0, node=v) for v in vertices]
        links = [Link(a, b) for a, b in edges]
        t0 = time.perf_counter()
        _layout(boxes, links)
        out["grandalf"] = time.perf_counter() - t0
    return out


def time_write_report(n: int) -> float:
    import os
    import tempfile

    from bench.scale import chain
    from ep_host import capability
    from ep_host.loading import load_model
    from ep_host.placement import choose
    from ep_host.report_html import write_report
    from ep_host.session import discover_host

    host = discover_host(["cpu"])
    table = capability.walk(host, load_model(chain(n)), ["cpu"])
    placement = choose(table, {"cpu": host.records["cpu"].info.device})
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        write_report(os.path.join(tmp, "r.html"), table, placement, "chain")
        return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000,50000")
    parser.add_argument("--grandalf-max", type=int, default=5000)
    parser.add_argument("--report-nodes", type=int, default=50000)
    args = parser.parse_args()
    graph, _, _ = resnet_graph()
    print(f"ResNet-50 (light, optimized): {len(graph['boxes'])} boxes, "
          f"{len(graph['links'])} edges")
    routes = grandalf_routes(graph)
    print(f"  grandalf: {crossings(routes)} edge crossings, "
          f"{through_boxes(graph, routes)} edges through a box")
    routes = networkx_routes(graph)
    print(f"  networkx: {crossings(routes)} edge crossings, "
          f"{through_boxes(graph, routes)} edges through a box")
    for n in (int(s) for s in args.sizes.split(",")):
        times = time_layouts(n, n <= args.grandalf_max)
        print(f"residual chain of {n} nodes: " + ", ".join(
            f"{k} {v:.2f} s" for k, v in times.items()))
    if args.report_nodes:
        print(f"write_report on a {args.report_nodes}-node chain: "
              f"{time_write_report(args.report_nodes):.2f} s")


if __name__ == "__main__":
    main()
