"""The report's graph layout: grandalf's Sugiyama layout (what the report uses) against networkx's
layered layout (``topological_generations`` + ``multipartite_layout``), on onnx's light
ResNet-50 (edge crossings, edges through boxes) and on residual chains (layout time).

    .venv/bin/python bench/report_layout.py [--sizes 1000,5000,50000] [--grandalf-max 5000]
                                            [--report-nodes 50000] [--chromium PATH]

networkx is needed for the comparison only (the report does not use it). The chains are
``n`` nodes in a line with a skip edge over every third node (a ResNet-like
block structure). grandalf is timed only up to ``--grandalf-max`` nodes: it grows about
quadratically. ``--report-nodes`` times ``write_report`` alone on two placed models of that
size: an Add/Relu chain on the CPU EP (one chain box) and Add/Relu alternating between two
providers (no chain nor partition fits: spans), and the time headless Chromium takes to load
each report until its script has drawn the picture and the table.
"""

from __future__ import annotations

import argparse
import itertools
import shutil
import time
from typing import Any

from ep_host import hookimpl


def resnet_graph() -> tuple[Any, list[Any], list[Any]]:
    """ResNet-50 (light) placed on the CPU EP, as the report draws it with grandalf."""
    from ep_host import capability
    from ep_host.loading import load_model
    from ep_host.optimize import optimize
    from ep_host.placement import choose
    from ep_host.report_graph import node_graph
    from ep_host.session import discover_host
    from ep_host.testing.models import light_model_path

    host = discover_host(["cpu"])
    model = optimize(load_model(light_model_path("resnet50")))
    table = capability.walk(host, model, ["cpu"])
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
        b[2] = float(pos[v][0] * scale) - b[4] / 2
        b[3] = g.nodes[v]["layer"] * 70.0 - b[5] / 2
    return [[(boxes[s][2] + boxes[s][4] / 2, boxes[s][3] + boxes[s][5]),
             (boxes[t][2] + boxes[t][4] / 2, boxes[t][3])] for s, t, *_ in graph["links"]]


def grandalf_routes(graph: dict[str, Any]) -> list[list[tuple[float, float]]]:
    return [list(zip(link[2][::2], link[2][1::2], strict=False)) for link in graph["links"]]


def _cross(p, q, r, s) -> bool:
    def side(a, b, c):
        v = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
        return int(v > 1e-9) - int(v < -1e-9)
    return (side(p, q, r) * side(p, q, s) < 0) and (side(r, s, p) * side(r, s, q) < 0)


def crossings(routes: list[list[tuple[float, float]]]) -> int:
    """Pairs of edges whose drawn segments cross (edges that share an end are not counted)."""
    segments = [list(zip(r, r[1:], strict=False)) for r in routes]
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
    for link, route in zip(graph["links"], routes, strict=False):
        for i, b in enumerate(graph["boxes"]):
            if i in (link[0], link[1]):
                continue
            x, y, w, h = b[2:6]
            if any(x + 1 < px < x + w - 1 and y + 1 < py < y + h - 1
                   for (ax, ay), (bx, by) in zip(route, route[1:], strict=False)
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


class _Alternate:
    """A provider for the benchmark: claims ``op`` only, at 1 us, on the host."""

    def __init__(self, name: str, op: str):
        self.name, self.op = name, op

    @hookimpl
    def ep_host_provider_info(self) -> Any:
        from ep_host import ProviderInfo

        return ProviderInfo(name=self.name)

    @hookimpl
    def ep_host_supports_op(self, node: Any, context: Any) -> Any:
        from ep_host import Cost, KernelMatch

        if node.op_type != self.op:
            return KernelMatch.unsupported(f"{self.name} runs {self.op} only", code="op")
        return KernelMatch.supported(Cost(compute_us=1.0))


def placed_chain(n: int, alternate: bool) -> tuple[Any, Any]:
    from bench.scale import chain
    from ep_host import capability
    from ep_host.discovery import Host
    from ep_host.loading import load_model
    from ep_host.placement import choose
    from ep_host.session import discover_host

    if alternate:
        host = Host(strict=False)
        for name, op in (("adds", "Add"), ("relus", "Relu")):
            host.register(_Alternate(name, op), name=name)
        providers = ["adds", "relus"]
    else:
        host = discover_host(["cpu"])
        providers = ["cpu"]
    table = capability.walk(host, load_model(chain(n)), providers)
    devices = {p: host.records[p].info.device for p in providers}
    return table, choose(table, devices, strategy="greedy")


def time_report(n: int, alternate: bool, chromium: str | None) -> str:
    """Write the report of a placed ``n``-node chain and load it in Chromium; the times."""
    import os
    import re
    import subprocess
    import tempfile

    from ep_host.report_html import write_report

    table, placement = placed_chain(n, alternate)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.html")
        t0 = time.perf_counter()
        write_report(path, table, placement, "chain")
        line = f"write_report {time.perf_counter() - t0:.2f} s, " \
               f"{os.path.getsize(path) / 1e6:.1f} MB"
        if chromium:
            t0 = time.perf_counter()
            dom = subprocess.run(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 f"--user-data-dir={tmp}/profile", "--dump-dom", f"file://{path}"],
                capture_output=True, text=True, timeout=300).stdout
            wall = time.perf_counter() - t0
            status = re.search(r'id="render-status"[^>]*data-ms="([0-9.]+)"[^>]*'
                               r'data-mode="(\w+)"[^>]*data-boxes="(\d+)"', dom)
            line += (f", Chromium load to rendered {wall:.2f} s (page clock "
                     f"{float(status.group(1)):.0f} ms; {status.group(2)}, "
                     f"{status.group(3)} boxes drawn)" if status else ", did not render")
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,5000,50000")
    parser.add_argument("--grandalf-max", type=int, default=5000)
    parser.add_argument("--report-nodes", type=int, default=50000)
    parser.add_argument("--chromium", default=shutil.which("chromium"))
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
        for alternate in (False, True):
            kind = "alternating providers" if alternate else "one provider"
            print(f"{args.report_nodes}-node chain, {kind}: "
                  f"{time_report(args.report_nodes, alternate, args.chromium)}")


if __name__ == "__main__":
    main()
