"""``ep-host why``: a declined provider's reason, a claimed-but-lost provider's margin with the
copies its choice would force, named."""

import io
import json
import os
import subprocess
import sys

import pytest
from hostkit import make_model
from onnx import TensorProto, helper
from test_optimal_placement import CPU, SIM0, CostedProvider

from ep_host.capability import walk
from ep_host.discovery import Host
from ep_host.errors import HostError
from ep_host.loading import load_model
from ep_host.placement import choose
from ep_host.report import Output
from ep_host.why import render_why, why, why_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _placement(**kwargs):
    """x -> n0 -> n1 -> n2 -> out, float32 [256]; sim is 1 us cheaper per node than cpu but a
    copy costs 5 us + 1.024 us; "negs" declines everything."""
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"v{i - 1}"],
                              ["out" if i == 2 else f"v{i}"], name=f"n{i}") for i in range(3)]
    model = load_model(make_model(nodes, [("x", TensorProto.FLOAT, [256])],
                                  [("out", TensorProto.FLOAT, [256])]))
    host = Host(strict=False)
    providers = [CostedProvider("cpu", CPU, {f"n{i}": 10.0 for i in range(3)}),
                 CostedProvider("sim", SIM0, {f"n{i}": 9.0 for i in range(3)}),
                 CostedProvider("negs", CPU, {})]
    for p in providers:
        host.register(p, name=p.name)
    table = walk(host, model, [p.name for p in providers])
    return choose(table, {p.name: p.device for p in providers}, model="chain", **kwargs)


def test_a_declining_provider_gives_its_reason_and_code():
    verdicts = {v.provider: v for v in why(_placement(), "n1")}
    assert verdicts["negs"].outcome == "declined"
    assert verdicts["negs"].reason == "negs declines n1" and verdicts["negs"].code == "op"
    assert verdicts["cpu"].outcome == "chosen" and verdicts["cpu"].cost_us == 10.0


def test_a_provider_that_claims_but_loses_shows_its_margin_and_the_copies():
    placement = _placement()
    (sim,) = why(placement, "n1", provider="sim")
    copy = 5.0 + 1024 / 1e3  # 256 float32 over 1 GB/s plus 5 us, each way
    assert sim.outcome == "lost" and sim.cost_us == 9.0
    assert sim.own_us == pytest.approx(-1.0)
    assert sim.copies_us == pytest.approx(2 * copy)
    assert sim.margin_us == pytest.approx(2 * copy - 1.0)
    assert {(c.sign, c.transfer.tensor, c.transfer.source, c.transfer.destination)
            for c in sim.copies} == {("+", "v0", "cpu", "sim:0"), ("+", "v1", "sim:0", "cpu")}
    text = io.StringIO()
    render_why(Output(text, rich=False), placement, "n1", why(placement, "n1"))
    lines = text.getvalue()
    assert "n1 (Relu) runs on cpu (optimal)" in lines
    assert f"sim: claims it at 9.00 us but lost by {2 * copy - 1.0:.2f} us" in lines
    assert "would add copy of v0 cpu -> sim:0 (1.0 KiB, 6.02 us)" in lines
    assert "negs: declined [op]: negs declines n1" in lines


def test_the_margin_can_also_count_copies_a_move_would_save():
    placement = _placement(strategy="greedy")  # everything on sim: x in, out back
    (cpu,) = why(placement, "n0", provider="cpu")
    assert cpu.outcome == "lost" and cpu.own_us == pytest.approx(1.0)
    changes = {(c.sign, c.transfer.tensor) for c in cpu.copies}
    assert changes == {("-", "x"), ("+", "v0")}
    assert cpu.margin_us == pytest.approx(1.0)  # one copy saved, one added, same size
    data = json.loads(json.dumps(why_dict(placement, "n0", [cpu])))
    assert data["chosen"] == "sim" and data["verdicts"][0]["outcome"] == "lost"
    assert {c["change"] for c in data["verdicts"][0]["copies"]} == {"added", "removed"}


def test_unknown_node_or_provider_is_an_error():
    placement = _placement()
    with pytest.raises(HostError, match="no node named 'nope'"):
        why(placement, "nope")
    with pytest.raises(HostError, match="'gpu' is not in use"):
        why(placement, "n0", provider="gpu")


def test_cli_why_json_on_the_example_cnn():
    result = subprocess.run(
        [sys.executable, "-m", "ep_host", "why", os.path.join(ROOT, "examples", "cnn.onnx"),
         "conv1/Relu", "--providers", "cpu,example", "--json", "--no-optimize"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    verdicts = {v["provider"]: v for v in data["verdicts"]}
    assert data["chosen"] == "cpu" and verdicts["cpu"]["outcome"] == "chosen"
    assert verdicts["example"]["outcome"] == "lost"
    assert verdicts["example"]["margin_us"] == pytest.approx(
        verdicts["example"]["cost_us"] - verdicts["cpu"]["cost_us"])  # same device: no copies
    conv = subprocess.run(
        [sys.executable, "-m", "ep_host", "why", os.path.join(ROOT, "examples", "cnn.onnx"),
         "conv1/Conv", "--providers", "cpu,example", "--only-provider", "example", "--no-optimize"],
        capture_output=True, text=True, timeout=300)
    assert conv.returncode == 0, conv.stderr
    assert "example: declined [op]: Conv: the example EP runs only" in conv.stdout
