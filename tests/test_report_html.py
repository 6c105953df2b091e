"""The HTML report opens offline in headless Chromium: picture, table rows, no console output."""

import os
import re
import shutil
import subprocess
import time

import pytest
from hostkit import InlineProvider, add_relu_model
from onnx import TensorProto, helper

from ep_host import Device
from ep_host.capability import walk
from ep_host.cli import main
from ep_host.loading import load_model
from ep_host.placement import choose
from ep_host.report_html import copy_edges, write_report

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
    assert int(attrs["boxes"]) == 3  # inputs, every node on cpu in one partition, outputs
    assert "declined [" in dom and "\u2605" in dom  # cuda's reasons, cpu's chosen marks
    assert "http://" not in out.read_text().replace("http://www.w3.org/2000/svg", "")


def test_copies_are_edges_labelled_with_bytes(host, tmp_path):
    for p in (InlineProvider("sim", ops=("Add",), cost_us=1.0, device=SIM),
              InlineProvider("slow", cost_us=50.0)):
        host.register(p, name=p.name)
    table = walk(host, load_model(add_relu_model()), ["sim", "slow"])
    devices = {p: host.records[p].info.device for p in ("sim", "slow")}
    placement = choose(table, devices, model="add_relu")
    edges = copy_edges(placement)
    # x and y go up to the simulated device's partition 0, s comes back for relu (partition 1)
    assert {(e["from"], e["to"], e["count"], e["bytes"]) for e in edges} == {
        (-1, 0, 2, 48), (0, 1, 1, 24)}
    out = tmp_path / "sim.html"
    write_report(str(out), table, placement, "add_relu")
    dom, attrs, console, _ = open_in_chromium(out, tmp_path)
    check_page(dom, attrs, console)
    assert attrs["boxes"] == "4" and attrs["copies"] == "2"
    assert "48 B (2 tensors)" in dom and ">24 B<" in dom


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
    model_path = tmp_path / "chain.onnx"
    model_path.write_bytes(add_chain(50_000).SerializeToString())
    out = tmp_path / "chain.html"
    assert main(["report", str(model_path), "--providers", "cpu", "-o", str(out)]) == 0
    dom, attrs, console, wall = open_in_chromium(out, tmp_path)
    check_page(dom, attrs, console)
    assert "50000 of 50000 nodes" in dom
    assert int(attrs["rows"]) < 100  # only the rows in view exist
    with capsys.disabled():
        print(f"\n50k-node report: {out.stat().st_size / 1e6:.1f} MB, rendered in "
              f"{float(attrs['ms']):.0f} ms (page clock), Chromium wall time {wall:.2f} s")
