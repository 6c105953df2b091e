"""Placement strategies: estimated totals of every registered strategy (``optimal``, ``greedy``,
``priority``, ...) on a simulated two-device setup, and the time ``optimal`` adds to placement
at 50k nodes.

The second device is simulated: provider ``sim`` asks the CPU provider about each node and
claims what it claims, Conv/MatMul/Gemm at 1/8 of the CPU's estimate, every other op at the
CPU's estimate plus a 5 us launch; its link to the host is 12 GB/s plus 10 us per copy. The
provider order is ``sim,cpu,example`` (a GPU first, as onnxruntime users list it; the
example EP runs custom_op.onnx's FastSwish on the host).

Run: ``.venv/bin/python bench/placement_strategies.py [--sizes 50000] [--repeat 3] [--json F]``
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import statistics
import sys
import time
from typing import Any

from ep_host import Device, KernelMatch, ProviderInfo, hookimpl, strategies
from ep_host.capability import walk
from ep_host.discovery import Host
from ep_host.loading import load_model
from ep_host.placement import choose
from ep_host.testing.models import LIGHT_MODELS, light_model_path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIM = Device(name="sim:0", kind="sim", link_gbps=12.0, link_latency_us=10.0)
FAST_OPS = {"Conv", "MatMul", "Gemm"}
ORDER = ["sim", "cpu", "example"]  # example: custom_op.onnx's FastSwish, on the host


class SimProvider:
    """Claims what the CPU provider claims, on the simulated device, at the costs above."""

    def __init__(self, host: Host):
        self.host = host

    @hookimpl
    def ep_host_provider_info(self):
        return ProviderInfo(name="sim", device=SIM, description="simulated accelerator")

    @hookimpl
    def ep_host_supports_op(self, node, context):
        answer = self.host.call("cpu", "ep_host_supports_op", node=node, context=context)
        if answer is None or not answer.is_supported:
            reason = answer.reason if answer is not None else "the CPU provider gave no answer"
            return KernelMatch.unsupported(f"sim mirrors cpu: {reason}",
                                           answer.code if answer is not None else "op")
        cost = answer.cost
        if node.op_type in FAST_OPS:
            cost = type(cost)(compute_us=cost.compute_us / 8, memory_us=cost.memory_us / 8,
                              launch_us=cost.launch_us, bytes_moved=cost.bytes_moved,
                              flops=cost.flops)
        else:
            cost = cost.with_launch_us(cost.launch_us + 5.0)
        return KernelMatch.supported(cost, host_inputs=answer.host_inputs)


def make_host() -> Host:
    host = Host.discover(["cpu", "example"])
    host.register(SimProvider(host), name="sim")
    return host


def devices(host: Host) -> dict[str, Device]:
    return {p: host.records[p].info.device for p in ORDER}


def models() -> list[tuple[str, str]]:
    found = [(os.path.basename(p), p) for p in sorted(glob.glob(os.path.join(ROOT, "examples",
                                                                           "*.onnx")))]
    return found + [(name, light_model_path(name)) for name in LIGHT_MODELS]


def compare(host: Host) -> list[dict[str, Any]]:
    rows = []
    for name, path in models():
        model = load_model(path)
        table = walk(host, model, ORDER)
        placed = choose(table, devices(host), model=name)
        totals = dict(placed.comparison)
        on_sim = sum(n.provider == "sim" for n in placed.nodes)
        rows.append({"model": name, "nodes": len(table.nodes), "on_sim": on_sim,
                     "copies": len(placed.transfers), **totals})
    return rows


def print_compare(rows: list[dict[str, Any]]) -> None:
    """One column per registered strategy (the registry's order), then optimal's saving
    against each of the others."""
    names = strategies.names()
    others = [n for n in names if n != "optimal"]
    print("Estimated totals, simulated two devices "
          "(sim: 12 GB/s + 10 us link; order sim,cpu,example)")
    print(f"{'model':<24} {'nodes':>6} {'on sim':>6} {'copies':>6} "
          + " ".join(f"{n + ' us':>12}" for n in names) + " "
          + " ".join(f"{'vs ' + n:>11}" for n in others))
    for r in rows:
        print(f"{r['model']:<24} {r['nodes']:>6} {r['on_sim']:>6} {r['copies']:>6} "
              + " ".join(f"{r[n]:>12.1f}" for n in names) + " "
              + " ".join(f"{_saving(r['optimal'], r[n]):>11}" for n in others))


def _saving(opt: float, other: float) -> str:
    return f"-{100 * (1 - opt / other):.1f}%" if other > 0 else "n/a"


def timing(host: Host, sizes: list[int], repeat: int) -> list[dict[str, Any]]:
    spec = importlib.util.spec_from_file_location("bench_placement", os.path.join(HERE,
                                                                               "placement.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    rows = []
    for kind in ("transformer", "add_chain"):
        for n in sizes:
            data = getattr(gen, kind)(n)
            t0 = time.perf_counter()
            model = load_model(data)
            table = walk(host, model, ORDER)
            prep = time.perf_counter() - t0
            devs = devices(host)
            result: dict[str, Any] = {"model": kind, "nodes": len(table.nodes), "load_walk_s": prep}
            for strategy in ("greedy", "optimal"):
                times = []
                for _ in range(repeat):
                    t0 = time.perf_counter()
                    choose(table, devs, strategy=strategy)
                    times.append(time.perf_counter() - t0)
                result[f"{strategy}_s"] = statistics.median(times)
            added = result["optimal_s"] - result["greedy_s"]
            result["added_s"] = added
            result["added_vs_placement"] = added / (prep + result["greedy_s"])
            rows.append(result)
    return rows


def print_timing(rows: list[dict[str, Any]]) -> None:
    print()
    print("Time optimal adds (median of repeats; placement = load + walk + greedy choose)")
    print(f"{'model':<12} {'nodes':>7} {'load+walk s':>12} {'greedy s':>9} {'optimal s':>10} "
          f"{'added s':>8} {'added/placement':>16}")
    for r in rows:
        print(f"{r['model']:<12} {r['nodes']:>7} {r['load_walk_s']:>12.3f} {r['greedy_s']:>9.3f} "
              f"{r['optimal_s']:>10.3f} {r['added_s']:>8.3f} "
              f"{100 * r['added_vs_placement']:>15.1f}%")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="50000", help="node counts for the timing (default "
                        "50000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed repeats (default 3)")
    parser.add_argument("--no-timing", action="store_true", help="only the estimated totals")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args(argv)
    host = make_host()
    rows = compare(host)
    print_compare(rows)
    times = []
    if not args.no_timing:
        times = timing(host, [int(s) for s in args.sizes.split(",")], args.repeat)
        print_timing(times)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"totals": rows, "timing": times}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
