"""Session creation at scale: time and peak memory per stage for an N-node Add/Relu chain.

The chain (x -> Add(., one) -> Relu -> Add -> ..., float32 [1]) is built with ``onnx.helper``
and saved in a child process; a second child loads it and runs every stage of
``InferenceSession`` in turn on the CPU EP, printing per stage its time and ns/node, the
process's peak RSS (VmHWM) after it, how much the stage raised that peak in bytes/node, and the
RSS left after it. ``--limit-mb`` runs the stages under an address-space limit (RLIMIT_AS).

    .venv/bin/python bench/scale.py [--nodes 10000,100000] [--limit-mb 4096] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

STAGES = ("load", "shape inference", "optimize", "capability walk", "placement", "plan",
          "first run")


def chain(n: int) -> Any:  # an onnx.ModelProto; onnx is imported in the child only
    """``n`` nodes alternating Add (of a one-element constant) and Relu, float32 [1]."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = [helper.make_node("Add" if i % 2 == 0 else "Relu",
                              [f"v{i}", "one"] if i % 2 == 0 else [f"v{i}"], [f"v{i + 1}"],
                              name=f"n{i}")
             for i in range(n)]
    graph = helper.make_graph(
        nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def memory_kb() -> tuple[int, int]:
    """(VmHWM, VmRSS) of this process in KiB."""
    found = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                found[key] = int(rest.split()[0])
    return found["VmHWM"], found["VmRSS"]


def measure(path: str, n: int, limit_mb: int | None) -> list[dict]:
    """Run the stages on the model at ``path`` in this process; one record per stage."""
    import numpy as np

    from ep_host import capability
    from ep_host.loading import Model, load_model
    from ep_host.optimize import optimize
    from ep_host.placement import choose
    from ep_host.session import _Runtime, discover_host, select_providers

    host = discover_host(["cpu"])
    providers = select_providers(host, ["cpu"])
    feeds = {"v0": np.zeros(1, np.float32)}
    if limit_mb:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_mb << 20, limit_mb << 20))
    records: list[dict] = []  # the first: this process before the model is read
    hwm0, rss0 = memory_kb()
    records.append({"stage": "imports", "seconds": 0.0, "ns_per_node": 0.0,
                    "peak_mb": hwm0 / 1024, "peak_bytes_per_node": 0.0, "rss_mb": rss0 / 1024})
    mark = [time.perf_counter(), hwm0]

    def done(stage: str, took: float | None = None) -> None:
        now = time.perf_counter()
        hwm, rss = memory_kb()
        seconds = now - mark[0] if took is None else took
        records.append({"stage": stage, "seconds": seconds, "ns_per_node": seconds * 1e9 / n,
                        "peak_mb": hwm / 1024, "peak_bytes_per_node": (hwm - mark[1]) * 1024 / n,
                        "rss_mb": rss / 1024})
        mark[0], mark[1] = time.perf_counter(), hwm

    # shape inference runs inside load_model: time it there, and its peak with it
    inference: dict = {}
    infer_types = Model._infer_types

    def timed_inference(self: Model, *args: Any) -> Any:
        start, (hwm_before, _) = time.perf_counter(), memory_kb()
        try:
            return infer_types(self, *args)
        finally:
            inference.update(seconds=time.perf_counter() - start, before=hwm_before,
                             after=memory_kb()[0])

    Model._infer_types = timed_inference
    model = load_model(path)
    Model._infer_types = infer_types
    load_seconds = time.perf_counter() - mark[0]
    hwm, rss = memory_kb()
    inf = inference["seconds"]
    records.append({"stage": "load", "seconds": load_seconds - inf,
                    "ns_per_node": (load_seconds - inf) * 1e9 / n,
                    "peak_mb": hwm / 1024,
                    "peak_bytes_per_node": ((hwm - hwm0) - (inference["after"]
                                                            - inference["before"])) * 1024 / n,
                    "rss_mb": rss / 1024})
    records.append({"stage": "shape inference", "seconds": inf, "ns_per_node": inf * 1e9 / n,
                    "peak_mb": inference["after"] / 1024,
                    "peak_bytes_per_node": (inference["after"] - inference["before"]) * 1024 / n,
                    "rss_mb": rss / 1024})
    mark[0], mark[1] = time.perf_counter(), hwm
    model = optimize(model)
    done("optimize")
    runtime = _Runtime(model, host, providers, {}, "optimal")
    table = capability.walk(host, model, providers, {}, nodes=model.graph.nodes)
    done("capability walk")
    placement = choose(table, {p: runtime.device(p) for p in providers}, strategy="optimal",
                       model=model.label)
    done("placement")
    plan, run = runtime.plan(model.graph, placement)
    del table, placement
    done("plan")
    out = run.run(feeds)
    done("first run")
    want = np.float32(max(0.0, 0.0 + (n + 1) // 2))
    if float(out[0][0]) != want:
        raise SystemExit(f"wrong result: {out[0]} (expected {want})")
    return records


def child(argv: list[str]) -> None:
    """``build PATH N`` or ``measure PATH N LIMIT_MB``: one step, in its own process."""
    if argv[0] == "build":
        import onnx

        onnx.save(chain(int(argv[2])), argv[1])
        return
    records = measure(argv[1], int(argv[2]), int(argv[3]) or None)
    print(json.dumps(records))


def run_size(n: int, limit_mb: int | None, folder: str) -> list[dict]:
    path = os.path.join(folder, f"chain_{n}.onnx")
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, __file__, "--child", "build", path, str(n)], check=True,
                   env=env)
    done = subprocess.run([sys.executable, __file__, "--child", "measure", path, str(n),
                           str(limit_mb or 0)], capture_output=True, text=True, env=env)
    os.unlink(path)
    if done.returncode != 0:
        raise SystemExit(f"{n} nodes: the measuring process failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="10000,100000",
                        help="comma-separated chain lengths (default 10000,100000)")
    parser.add_argument("--limit-mb", type=int, default=0,
                        help="address-space limit of the measuring process, MiB (0: none)")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for n in (int(x) for x in args.nodes.split(",")):
            records = run_size(n, args.limit_mb or None, folder)
            results[n] = records
            print(f"\n{n:,} nodes" + (f" (RLIMIT_AS {args.limit_mb} MiB)" if args.limit_mb
                                      else ""))
            print(f"{'stage':<16} {'seconds':>9} {'ns/node':>9} {'peak MB':>9} "
                  f"{'peak +B/node':>13} {'RSS MB':>8}")
            for r in records:
                print(f"{r['stage']:<16} {r['seconds']:>9.2f} {r['ns_per_node']:>9.0f} "
                      f"{r['peak_mb']:>9.0f} {r['peak_bytes_per_node']:>13.0f} "
                      f"{r['rss_mb']:>8.0f}")
            total = sum(r["seconds"] for r in records)
            print(f"{'total':<16} {total:>9.2f} {total * 1e9 / n:>9.0f} "
                  f"{records[-1]['peak_mb']:>9.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
