"""The HTML report opens offline in headless Chromium: picture, table rows, no console output."""

import os
import re
import shutil
import subprocess
import time
from html.parser import HTMLParser

import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import Device
from ep_host.capability import walk
from ep_host.cli import main
from ep_host.loading import load_model
from ep_host.placement import choose
from ep_host.report_html import write_report
from ep_host.testing.models import light_model_path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")
SIM = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=5.0)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0"]


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.fail("Chromium is not installed: .ci/run installs it "
                    "(apt-get install -y chromium); the report test needs a real browser")
    return path


def open_in_chromium(path, tmp_path, timeout=120):
    """The DOM after load, the page's render status attributes, its console lines, wall time."""
    t0 = time.perf_counter()
    result = subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}", "--dump-dom",
         f"file://{path}"],
        capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    status = re.search(r'<p class="hint" id="render-status"([^>]*)>', dom)
    assert status, f"the page did not finish rendering; DOM tail: {dom[-1000:]}"
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', status.group(1)))
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return dom, attrs, console, wall


def check_page(dom, attrs, console):
    assert console == [], console
    assert '<div id="errors" role="alert"></div>' in dom
    assert re.search(r'<svg [^>]*aria-label="placed graph"', dom)
    assert int(attrs["boxes"]) >= 1 and int(attrs["rows"]) >= 1
    assert dom.count('<div class="row') == int(attrs["rows"])


def test_cnn_report_shows_picture_table_and_declines(tmp_path):
    out = tmp_path / "cnn.html"
    assert main(["report", CNN, "--providers", "cuda,cpu", "-o", str(out)]) == 0
    dom, attrs, console, _ = open_in_chromium(out, tmp_path)
    check_page(dom, attrs, console)
    svg = SvgItems(dom)
    assert attrs["mode"] == "nodes"
    assert len(svg.of("box", "node")) == int(re.search(r'id="summary">(\d+) nodes', dom).group(1))
    assert [o["data-provider"] for o in svg.of("partition")] == ["cpu"]
    assert "declined [" in dom and "\u2605" in dom  # cuda's reasons, cpu's chosen marks
    assert "http://" not in out.read_text().replace("http://www.w3.org/2000/svg", "")


class SvgItems(HTMLParser):
    """The picture's drawn items from a DOM dump: boxes, links and partition outlines, each
    with its attributes, its first shape's attributes and its texts."""

    KINDS = ("box", "link", "partition")

    def __init__(self, dom):
        super().__init__()
        self.items, self.stack = [], []
        self.feed(dom)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "g":
            item = None
            if attrs.get("class", "").split(" ")[0] in self.KINDS:
                item = {"kind": attrs["class"].split(" ")[0],
                        "classes": attrs["class"].split(" "), **attrs, "shape": None,
                        "shapes": [], "texts": [], "titles": []}
                self.items.append(item)
            self.stack.append(item)
        elif self.stack and self.stack[-1] is not None:
            if tag in ("rect", "path"):
                self.stack[-1]["shapes"].append(attrs)
                self.stack[-1]["shape"] = self.stack[-1]["shapes"][0]
        self.text_target = tag

    def handle_endtag(self, tag):
        if tag == "g" and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1] is not None and self.text_target in ("text", "title"):
            self.stack[-1][self.text_target + "s"].append(data)

    def of(self, kind, cls=None):
        return [i for i in self.items if i["kind"] == kind and (cls is None or cls in
                                                                 i["classes"])]


def bounds(shape):
    return tuple(float(shape[k]) for k in ("x", "y", "width", "height"))


def inside(inner, outer):
    x, y, w, h = inner
    ox, oy, ow, oh = outer
    return ox <= x and oy <= y and x + w <= ox + ow and y + h <= oy + oh


def two_provider_report(host, tmp_path, model, sim_ops=("Add",), **kwargs):
    for p in (InlineProvider("sim", ops=sim_ops, cost_us=1.0, device=SIM),
              InlineProvider("slow", ops=("Add", "Relu", "Mul"), cost_us=50.0)):
        host.register(p, name=p.name)
    table = walk(host, load_model(model), ["sim", "slow"])
    devices = {p: host.records[p].info.device for p in ("sim", "slow")}
    placement = choose(table, devices, model="m")
    out = tmp_path / "m.html"
    write_report(str(out), table, placement, "m", **kwargs)
    dom, attrs, console, _ = open_in_chromium(out, tmp_path)
    check_page(dom, attrs, console)
    return placement, SvgItems(dom), attrs


def add_relu_add_model():
    """x, y -> add -> relu -> add2(., x) -> out: placed sim, slow, sim."""
    return make_model(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "x"], ["out"], name="add2")],
        [("x", TensorProto.FLOAT, [2, 3]), ("y", TensorProto.FLOAT, [2, 3])],
        [("out", TensorProto.FLOAT, [2, 3])])


def test_every_node_is_a_box_coloured_by_its_provider(host, tmp_path):
    placement, svg, attrs = two_provider_report(host, tmp_path, add_relu_add_model())
    assert [n.provider for n in placement.nodes] == ["sim", "slow", "sim"]
    nodes = {i["data-node"]: i for i in svg.of("box", "node")}
    assert sorted(nodes) == ["0", "1", "2"] and attrs["nodes"] == "3"
    assert [nodes[k]["texts"] for k in "012"] == [["Add", "add"], ["Relu", "relu"],
                                                   ["Add", "add2"]]
    assert [nodes[k]["data-provider"] for k in "012"] == ["sim", "slow", "sim"]
    fills = [nodes[k]["shape"]["fill"] for k in "012"]
    assert fills[0] == fills[2] != fills[1]
    io = sorted(tuple(i["texts"]) for i in svg.of("box", "io"))
    assert io == [("graph input", "x"), ("graph input", "y"), ("graph output", "out")]


def test_device_copies_are_marked_edges_priced_where_providers_change(host, tmp_path):
    placement, svg, attrs = two_provider_report(host, tmp_path, add_relu_add_model())
    box = {i["data-box"]: i for i in svg.of("box")}

    def name(b):
        item = box[b]
        return item["texts"][1]

    links = {(name(i["data-source"]), name(i["data-target"])): i for i in svg.of("link")}
    copies = {k for k, i in links.items() if "copy" in i["classes"]}
    # inputs up to sim, s back to the host for relu, r up again, out back; x is on sim already
    assert copies == {("x", "add"), ("y", "add"), ("add", "relu"), ("relu", "add2"),
                      ("add2", "out")}
    assert set(links) - copies == {("x", "add2")}
    assert attrs["copies"] == "5" and attrs["links"] == "6"
    for key in copies:
        assert links[key]["shape"]["stroke-dasharray"] != "none"
        (label,) = links[key]["texts"]
        assert label.startswith("24 B, ") and label.endswith(" us"), label
    assert links[("x", "add2")]["shape"]["stroke-dasharray"] == "none"
    assert links[("x", "add2")]["texts"] == []
    priced = sum(t.cost_us for t in placement.transfers)
    shown = [float(links[k]["texts"][0].split(", ")[1].split(" ")[0]) for k in copies]
    assert sum(shown) == pytest.approx(priced, abs=0.01 * len(shown))


def test_partitions_are_outlined_around_their_nodes(host, tmp_path):
    model = make_model(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("Mul", ["s", "s"], ["m"], name="mul"),
         helper.make_node("Relu", ["m"], ["out"], name="relu")],
        [("x", TensorProto.FLOAT, [2, 3]), ("y", TensorProto.FLOAT, [2, 3])],
        [("out", TensorProto.FLOAT, [2, 3])])
    placement, svg, attrs = two_provider_report(host, tmp_path, model, sim_ops=("Add", "Mul"))
    assert [n.provider for n in placement.nodes] == ["sim", "sim", "slow"]
    outlines = svg.of("partition")
    assert attrs["outlines"] == "2"
    assert [(o["data-provider"], o["titles"][0].split("\n")[0]) for o in outlines] == [
        ("sim", "partition 0: sim, 2 nodes, 2.00 us"),
        ("slow", "partition 1: slow, 1 node, 50.00 us")]
    assert all(o["texts"][0].startswith("partition ") for o in outlines)
    nodes = {i["texts"][1]: bounds(i["shape"]) for i in svg.of("box", "node")}
    first, second = (bounds(o["shape"]) for o in outlines)
    assert inside(nodes["add"], first) and inside(nodes["mul"], first)
    assert not inside(nodes["relu"], first) and inside(nodes["relu"], second)


def ten_node_model(kind):
    """Ten nodes: a line of Relus, a ladder of Adds (each reads the two before it), or Add and
    Relu alternating."""
    if kind == "line":
        nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"n{i}")
                 for i in range(10)]
    elif kind == "ladder":
        nodes = [helper.make_node("Add", [f"t{i}", f"t{max(i - 1, 0)}"], [f"t{i + 1}"],
                                  name=f"n{i}") for i in range(10)]
    else:
        nodes = [helper.make_node("Add" if i % 2 == 0 else "Relu",
                                  [f"t{i}", "x"] if i % 2 == 0 else [f"t{i}"], [f"t{i + 1}"],
                                  name=f"n{i}") for i in range(10)]
    return make_model(nodes, [("t0", TensorProto.FLOAT, [4]), ("x", TensorProto.FLOAT, [4])],
                      [("t10", TensorProto.FLOAT, [4])])


@pytest.mark.parametrize(("kind", "mode", "providers", "texts"), [
    ("line", "chains", ["slow"] * 10, [["slow: 10 nodes, 500.00 us", "Relu x10"]]),
    ("ladder", "partitions", ["sim"] * 10, [["sim: 10 nodes, 10.00 us", "n0 .. n9"]]),
    ("alternating", "spans", ["sim", "slow"] * 5,
     [["3 nodes, 52.00 us", "n0 .. n2"], ["3 nodes, 101.00 us", "n3 .. n5"],
      ["3 nodes, 52.00 us", "n6 .. n8"], ["slow: 1 node, 50.00 us", "n9"]]),
])
def test_above_the_limit_groups_of_nodes_are_boxes(host, tmp_path, kind, mode, providers, texts):
    """With room for four boxes, ten nodes are drawn as chains on one provider if those fit,
    else partitions, else spans of consecutive nodes with a bar per provider's share."""
    for p in (InlineProvider("sim", ops=("Add",), cost_us=1.0),
              InlineProvider("slow", ops=("Add", "Relu"), cost_us=50.0)):
        host.register(p, name=p.name)
    table = walk(host, load_model(ten_node_model(kind)), ["sim", "slow"])
    placement = choose(table, {}, model="m")
    assert [n.provider for n in placement.nodes] == providers
    for limit in (10, 4):
        out = tmp_path / f"m{limit}.html"
        write_report(str(out), table, placement, "m", layout_limit=limit)
        dom, attrs, console, _ = open_in_chromium(out, tmp_path)
        check_page(dom, attrs, console)
        svg = SvgItems(dom)
        assert attrs["mode"] == ("nodes" if limit == 10 else mode)
        drawn = sorted(int(b["data-node"]) for b in svg.of("box", "node"))
        if limit == 10:  # the nodes in view, from the top
            assert len(drawn) >= 6 and drawn == list(range(len(drawn)))
        else:
            assert drawn == []
    groups = svg.of("box", "group")
    assert [g["texts"] for g in groups] == texts
    assert [len(g["shapes"]) for g in groups] == [1 if t[0][0] in "sl" else 3 for t in texts]
    if mode == "spans":  # the box and a bar per provider
        assert groups[0]["shapes"][0]["fill"] == "#fff"
        assert len({shape["fill"] for shape in groups[0]["shapes"][1:]}) == 2
    # a box's nodes, as a click lists them in the table (here by the page's link to it)
    last = int(groups[-1]["data-group"])
    listed, _, console, _ = open_in_chromium(f"{out}#group={last}", tmp_path)
    assert console == []
    members = range(int(groups[-1]["data-first"]), int(groups[-1]["data-last"]) + 1)
    assert f"{len(members)} of 10 nodes" in listed
    rows = re.findall(r'<div class="row[^"]*"[^>]*data-node="(\d+)"', listed)
    assert sorted(map(int, rows)) == list(members)
    links = {(int(k["data-source"]), int(k["data-target"])) for k in svg.of("link")}
    boxes = {int(b["data-box"]): b for b in svg.of("box")}
    group_boxes = [int(g["data-box"]) for g in groups]
    assert set(zip(group_boxes, group_boxes[1:], strict=False)) <= links  # each feeds the next
    assert {boxes[t]["texts"][1] for s, t in links if s == group_boxes[-1]} == {"t10"}


def test_resnet50_branches_sit_side_by_side(tmp_path):
    """On onnx's light ResNet-50, each block's two paths into its Sum are drawn beside each
    other, and no drawn edge runs through a box it does not join."""
    out = tmp_path / "resnet50.html"
    assert main(["report", light_model_path("resnet50"), "--providers", "cpu",
                 "-o", str(out)]) == 0
    dom, attrs, console, _ = open_in_chromium(out, tmp_path)
    check_page(dom, attrs, console)
    svg = SvgItems(dom)
    boxes = {i["data-box"]: i for i in svg.of("box")}
    links = svg.of("link")
    sums = [b for b in svg.of("box", "node") if b["texts"][0] == "Sum"]
    assert sums, "the first residual blocks are in view"
    skips = 0  # Sums fed by an edge that passes beside at least one box of the branch
    for s in sums:
        for link in (k for k in links if k["data-target"] == s["data-box"]):
            ys = [p[1] for p in path_points(link)]
            beside = [b for b in boxes.values() if b["data-box"] not in (
                link["data-source"], link["data-target"]) and min(ys) < bounds(b["shape"])[1]
                and bounds(b["shape"])[1] + bounds(b["shape"])[3] < max(ys)]
            skips += bool(beside)
    assert skips >= 1
    for link in links:
        points = path_points(link)
        for b in boxes.values():
            if b["data-box"] in (link["data-source"], link["data-target"]):
                continue
            for p, q in zip(points, points[1:], strict=False):
                assert not segment_hits(p, q, bounds(b["shape"])), (b["texts"], points)


def path_points(link):
    """The points of a drawn edge's path (a curve's control points included)."""
    numbers = [float(v) for v in re.findall(r"-?\d+(?:\.\d+)?", link["shape"]["d"])]
    return list(zip(numbers[::2], numbers[1::2], strict=False))


def segment_hits(p, q, rect, steps=40):
    """Whether the segment p-q passes through the rectangle's inside (sampled)."""
    x, y, w, h = rect
    for k in range(steps + 1):
        t = k / steps
        px, py = p[0] + (q[0] - p[0]) * t, p[1] + (q[1] - p[1]) * t
        if x + 1 < px < x + w - 1 and y + 1 < py < y + h - 1:
            return True
    return False


def add_chain(n):
    nodes = [helper.make_node("Add", [f"t{i}", "one"], [f"t{i + 1}"], name=f"add{i}")
             for i in range(n)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("t0", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(f"t{n}", TensorProto.FLOAT, [4])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [4], [1.0] * 4)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    return model


def test_a_50k_node_report_renders_lazily(tmp_path, capsys):
    """Above the layout limit the picture draws groups of nodes (here the one chain), each
    box naming its nodes' ops; the table renders only the rows in view."""
    model_path = tmp_path / "chain.onnx"
    model_path.write_bytes(add_chain(50_000).SerializeToString())
    out = tmp_path / "chain.html"
    t0 = time.perf_counter()
    assert main(["report", str(model_path), "--providers", "cpu", "-o", str(out)]) == 0
    written = time.perf_counter() - t0
    dom, attrs, console, wall = open_in_chromium(out, tmp_path)
    check_page(dom, attrs, console)
    assert "50000 of 50000 nodes" in dom
    assert int(attrs["rows"]) < 100  # only the rows in view exist
    svg = SvgItems(dom)
    assert attrs["mode"] == "chains"
    (group,) = svg.of("box", "group")
    assert group["texts"][0].startswith("cpu: 50000 nodes, ")
    assert group["texts"][1] == "Add x50000"
    assert len(svg.of("box", "io")) == 2 and len(svg.of("link")) == 2
    with capsys.disabled():
        print(f"\n50k-node report: {out.stat().st_size / 1e6:.1f} MB, `ep-host report` "
              f"{written:.2f} s, rendered in {float(attrs['ms']):.0f} ms (page clock), "
              f"Chromium wall time {wall:.2f} s")
