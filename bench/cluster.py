"""What a provider on another Ray node costs: ep-host's CPU EP in process against ``cpu@node2``.

Starts a local two-node Ray cluster (``ray.cluster_utils.Cluster``, one CPU each) unless
``--ray ADDRESS`` names one. Per run and per model node: chains of n Add nodes on node 2 (the
values between nodes stay in node 2's object store). Per MB moved: one Relu on node 2 on a
tensor of each size (input there, output back every run). Then a model split across the two
nodes (Add on node 1, a pinned Relu on node 2, Add on node 1): the placement's predicted cost
of the two network copies against what the trace measured (the copy spans: ``ray.put`` to
node 2's device and ``ray.get`` back; the fetch onto node 2 happens inside the remote node's
call, so the remote node's span minus the same node in process is shown too). Runs alternate
between sessions, one BLAS thread here.

    .venv/bin/python bench/cluster.py [--repeat 30] [--ray ADDRESS] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import onnx
import ray
from isolation import overheads
from onnx import TensorProto, helper
from threadpoolctl import threadpool_limits

from ep_host import InferenceSession
from ep_host.discovery import Host
from ep_host.tracing import Tracer
from ep_host.transfers import implied_transfers


def split_model(elements: int) -> onnx.ModelProto:
    """x, y -> Add -> Relu -> Add(y) -> out, float32 [elements]."""
    vi = helper.make_tensor_value_info
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "y"], ["out"], name="add2")], "split",
        [vi("x", TensorProto.FLOAT, [elements]), vi("y", TensorProto.FLOAT, [elements])],
        [vi("out", TensorProto.FLOAT, [elements])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def start_cluster(address: str | None) -> tuple[str, object]:
    if address:
        return address, None
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True,
                    head_node_args={"num_cpus": 1, "include_dashboard": False})
    nodes.add_node(num_cpus=1)
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False)
    return nodes.address, nodes


def per_node_and_mb(inside_host: Host, remote_host: Host, repeat: int, figures: dict) -> None:
    overheads(inside_host, remote_host, ["cpu@node2"], "remote", (1, 8, 32), repeat, figures)
    device = remote_host.records["cpu@node2"].info.device
    priced = 1e6 / (device.link_gbps * 1e3) * (1 << 20) / 1e6
    figures["priced_per_mb_us"] = priced
    print(f"placement prices {priced:.0f} us per MB (+ {device.link_latency_us:.0f} us per "
          "copy) from the link")


def split_across_nodes(inside_host: Host, split_host: Host, repeat: int, figures: dict) -> None:
    print("\na model split across nodes: Add on node 1, Relu pinned on node 2, Add on node 1")
    print(f"{'MB':>6} {'copies':>7} {'predicted us':>13} {'copy spans us':>14} "
          f"{'remote relu us':>15} {'in-process relu':>16} {'measured us':>12}")
    for mb in (0.0625, 1, 4):
        elements = int(mb * (1 << 20)) // 4
        model = split_model(elements).SerializeToString()
        tracer = Tracer()
        split = InferenceSession(model, providers=["cpu", "cpu@node2"], host=split_host,
                                 pins={"relu": "cpu@node2"}, trace=tracer)
        inside_tracer = Tracer()
        inside = InferenceSession(model, providers=["cpu"], host=inside_host,
                                  trace=inside_tracer)
        rng = np.random.default_rng(0)
        feed = {k: rng.standard_normal(elements).astype(np.float32) for k in ("x", "y")}
        np.testing.assert_array_equal(split.run(None, feed)[0], inside.run(None, feed)[0])
        copies = implied_transfers(split.placement)
        call_us = split.placement.devices["cpu@node2"].link_latency_us
        predicted = sum(c.cost_us for c in copies) + call_us  # the copies and the remote call
        runs = max(5, repeat // 2)
        for _ in range(runs):
            split.run(None, feed)
            inside.run(None, feed)
        copy_runs = [e["dur"] for e in tracer.events if e["cat"] == "copy"]
        per_run = [sum(copy_runs[i:i + len(copies)])
                   for i in range(len(copies), len(copy_runs), len(copies))]  # warm runs
        measured = statistics.median(per_run)
        remote_relu = statistics.median(e["dur"] for e in tracer.events
                                        if e["cat"] == "node" and e["name"] == "relu")
        local_relu = statistics.median(e["dur"] for e in inside_tracer.events
                                       if e["cat"] == "node" and e["name"] == "relu")
        network = measured + remote_relu - local_relu
        figures["split"].append({"mb": mb, "copies": len(copies), "predicted_us": predicted,
                                 "measured_copy_spans_us": measured,
                                 "remote_relu_span_us": remote_relu,
                                 "in_process_relu_span_us": local_relu,
                                 "measured_network_us": network})
        print(f"{mb:>6g} {len(copies):>7} {predicted:>13.0f} {measured:>14.0f} "
              f"{remote_relu:>15.0f} {local_relu:>16.0f} {network:>12.0f}")
    print("predicted: the placement's two copies plus the call to node 2 (the link latency "
          "it charges the remote node); measured: the copy spans (ray.put there, ray.get back) "
          "plus what the remote relu's span (the call, the fetch onto node 2) costs beyond "
          "the same relu in process")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--ray", metavar="ADDRESS", help="a running cluster (node2 is used)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args()
    threadpool_limits(1)
    start = time.perf_counter()
    address, nodes = start_cluster(args.ray)
    inside_host = Host.discover(["cpu"])
    remote_host = Host.discover(["cpu", "cpu@node2"], ray_address=address)
    started_s = time.perf_counter() - start
    device = remote_host.records["cpu@node2"].info.device
    print(f"cluster and worker on node 2 started in {started_s:.1f} s; link as measured: "
          f"{device.link_latency_us:.0f} us per call, {device.link_gbps:.2f} GB/s")
    figures: dict = {"start_s": started_s, "link_latency_us": device.link_latency_us,
                     "link_gbps": device.link_gbps, "chains": [], "sizes": [], "split": []}
    try:
        per_node_and_mb(inside_host, remote_host, args.repeat, figures)
        split_across_nodes(inside_host, remote_host, args.repeat, figures)
    finally:
        if nodes is not None:
            ray.shutdown()
            nodes.shutdown()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
