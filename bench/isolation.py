"""What isolation costs: the same provider (ep-host's CPU EP) in process and in a Ray worker.

Per run and per node: chains of n Add nodes (every node a kernel call in the worker; the
values between nodes stay in the worker's object store). Per MB moved: one Relu on a tensor of
each size (the input goes to the worker and the output comes back every run). Also the
capability walk (one round trip for all nodes) and the link figures measured at start, which
placement prices copies to the worker with. Runs alternate between the two sessions, so load
on the machine hits both alike; one BLAS thread each (the worker's: its own default).

    .venv/bin/python bench/isolation.py [--repeat 30] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from threadpoolctl import threadpool_limits

from ep_host import InferenceSession
from ep_host.capability import walk
from ep_host.discovery import Host
from ep_host.loading import load_model


def add_chain(n: int, size: int = 16) -> onnx.ModelProto:
    nodes = [helper.make_node("Add", [f"v{i}", "one"], [f"v{i + 1}"], name=f"add{i}")
             for i in range(n)]
    graph = helper.make_graph(
        nodes, "add_chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [size])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [size])],
        initializer=[numpy_helper.from_array(np.ones(size, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def relu(elements: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")], "relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [elements])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [elements])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def interleaved(inside: InferenceSession, isolated: InferenceSession, feed: dict,
                repeat: int) -> tuple[float, float]:
    """Median microseconds per run of each session, runs alternating."""
    a, b = [], []
    for session in (inside, isolated):  # warm-up
        session.run(None, feed)
    for _ in range(repeat):
        for session, times in ((inside, a), (isolated, b)):
            start = time.perf_counter()
            session.run(None, feed)
            times.append(time.perf_counter() - start)
    return statistics.median(a) * 1e6, statistics.median(b) * 1e6


def slope(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares ``(intercept, slope)`` of ys over xs."""
    k, c = np.polyfit(np.asarray(xs, float), np.asarray(ys, float), 1)
    return float(c), float(k)


def overheads(inside_host: Host, other_host: Host, providers: list[str], label: str,
              chain_sizes: tuple[int, ...], repeat: int, figures: dict) -> None:
    """The CPU EP in process (``inside_host``) against ``providers`` on ``other_host`` (isolated
    or on another node), runs alternating: Add chains of ``chain_sizes`` nodes (overhead per run
    and per node) and one Relu on 0.0625 to 16 MB (overhead per MB moved, there and back).
    Fills ``figures["chains"]``, ``["sizes"]`` and the fitted overheads; prints a table each."""
    key = f"{label}_us"
    print("\nper node: chains of Add on 16 floats (median us per run)")
    print(f"{'nodes':>6} {'in process':>11} {label:>10} {'overhead':>10} {'ratio':>7}")
    for n in chain_sizes:
        model = add_chain(n).SerializeToString()
        inside = InferenceSession(model, providers=["cpu"], host=inside_host)
        other = InferenceSession(model, providers=providers, host=other_host)
        feed = {"v0": np.zeros(16, np.float32)}
        np.testing.assert_array_equal(other.run(None, feed)[0], inside.run(None, feed)[0])
        a, b = interleaved(inside, other, feed, repeat)
        figures["chains"].append({"nodes": n, "in_process_us": a, key: b})
        print(f"{n:>6} {a:>11.0f} {b:>10.0f} {b - a:>10.0f} {b / a:>7.1f}")
    base, per_node = slope([c["nodes"] for c in figures["chains"]],
                           [c[key] - c["in_process_us"] for c in figures["chains"]])
    figures["overhead_per_run_us"], figures["overhead_per_node_us"] = base, per_node
    print(f"{label} overhead: {base:.0f} us per run + {per_node:.0f} us per node")

    print("\nper MB moved: one Relu, input there and output back (median us per run)")
    print(f"{'MB':>6} {'in process':>11} {label:>10} {'overhead':>10}")
    for mb in (0.0625, 1, 4, 16):
        elements = int(mb * (1 << 20)) // 4
        model = relu(elements).SerializeToString()
        inside = InferenceSession(model, providers=["cpu"], host=inside_host)
        other = InferenceSession(model, providers=providers, host=other_host)
        feed = {"x": np.random.default_rng(0).standard_normal(elements).astype(np.float32)}
        np.testing.assert_array_equal(other.run(None, feed)[0], inside.run(None, feed)[0])
        a, b = interleaved(inside, other, feed, max(5, repeat // 2))
        figures["sizes"].append({"mb": mb, "in_process_us": a, key: b})
        print(f"{mb:>6g} {a:>11.0f} {b:>10.0f} {b - a:>10.0f}")
    moved = [2 * s["mb"] for s in figures["sizes"]]  # there and back
    fixed, per_mb = slope(moved, [s[key] - s["in_process_us"] for s in figures["sizes"]])
    figures["overhead_per_mb_us"] = per_mb
    print(f"{label} overhead: {fixed:.0f} us + {per_mb:.0f} us per MB moved "
          f"({1e6 / per_mb / 1e3 if per_mb > 0 else float('inf'):.2f} GB/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    threadpool_limits(1)

    inside_host = Host.discover(["cpu"])
    start = time.perf_counter()
    isolated_host = Host.discover(["cpu"], isolate=["cpu"])
    started_s = time.perf_counter() - start
    device = isolated_host.records["cpu"].info.device
    print(f"worker started in {started_s:.2f} s (Ray included); link as measured: "
          f"{device.link_latency_us:.0f} us per call, {device.link_gbps:.2f} GB/s")

    figures: dict = {"start_s": started_s, "link_latency_us": device.link_latency_us,
                     "link_gbps": device.link_gbps, "chains": [], "sizes": [], "walks": []}
    overheads(inside_host, isolated_host, ["cpu"], "isolated", (1, 8, 32, 128), args.repeat,
              figures)
    print(f"placement prices {1e6 / (device.link_gbps * 1e3) * (1 << 20) / 1e6:.0f} us per MB "
          "from the link figures")

    print("\nthe capability walk (every node's answer; one call to the worker per graph)")
    print(f"{'nodes':>6} {'in process ms':>14} {'isolated ms':>12}")
    walk(isolated_host, load_model(add_chain(4).SerializeToString()), ["cpu"], measured=False)
    walk(inside_host, load_model(add_chain(4).SerializeToString()), ["cpu"], measured=False)
    for n in (32, 512):
        times = {}
        for label, host in (("in", inside_host), ("iso", isolated_host)):
            model = load_model(add_chain(n).SerializeToString())  # a new graph: sent once
            start = time.perf_counter()
            walk(host, model, ["cpu"], measured=False)
            times[label] = (time.perf_counter() - start) * 1e3
        figures["walks"].append({"nodes": n, "in_process_ms": times["in"],
                                 "isolated_ms": times["iso"]})
        print(f"{n:>6} {times['in']:>14.1f} {times['iso']:>12.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
