"""Placement speed: ep-host's load, discovery, capability walk and greedy choice against
onnxruntime's session creation, on generated Add chains and transformer-like graphs.

Run: ``.venv/bin/python bench/placement.py [--sizes 1000,10000,50000] [--repeat 5] [--json FILE]``
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper, numpy_helper

import ep_host
from ep_host import capability, loading, placement
from ep_host.discovery import Host

PROVIDERS = ["cuda", "cpu"]
HIDDEN = 64
SEQ = 16
HEADS = 4
OPSET = 17
STAGES = ("parse", "shape_inference", "views", "discover", "walk", "choose")
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter  # --clock cpu: this process's CPU time, steadier on a busy machine


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, initializers) -> bytes:
    g = helper.make_graph(nodes, "bench", inputs, outputs, initializer=initializers)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = 9
    return m.SerializeToString()


def add_chain(n: int) -> bytes:
    """``x -> Add(x, c_0) -> ... -> Add(., c_{n-1})``, float32 [1, 64], one constant per node."""
    rng = np.random.default_rng(0)
    nodes, inits = [], []
    prev = "x"
    for i in range(n):
        c = rng.standard_normal((1, HIDDEN)).astype(np.float32)
        inits.append(numpy_helper.from_array(c, f"c{i}"))
        out = "y" if i == n - 1 else f"a{i}"
        nodes.append(helper.make_node("Add", [prev, f"c{i}"], [out], name=f"add{i}"))
        prev = out
    shape = [1, HIDDEN]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)


BLOCK_NODES = 20


def _block(b: int, x: str, out: str, rng: np.random.Generator) -> tuple[list, list]:
    """One transformer-like block of 20 nodes on ``x`` [1, SEQ, HIDDEN]."""
    p = f"b{b}_"
    head = HIDDEN // HEADS

    def w(name: str, *shape: int, scale: float = 0.1) -> str:
        inits.append(numpy_helper.from_array(
            (rng.standard_normal(shape) * scale).astype(np.float32), p + name))
        return p + name

    def c(name: str, value: Any, dtype: Any = np.float32) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), p + name))
        return p + name

    inits: list = []
    n = helper.make_node
    nodes = [
        n("MatMul", [x, w("w_in", HIDDEN, HIDDEN)], [p + "mm"], name=p + "mm"),
        n("Add", [p + "mm", w("b_in", HIDDEN)], [p + "h"], name=p + "bias"),
        n("Reshape", [p + "h", c("split", [1, SEQ, HEADS, head], np.int64)], [p + "r"],
          name=p + "split"),
        n("Transpose", [p + "r"], [p + "q"], perm=[0, 2, 1, 3], name=p + "q"),
        n("Transpose", [p + "r"], [p + "k"], perm=[0, 2, 3, 1], name=p + "k"),
        n("MatMul", [p + "q", p + "k"], [p + "s"], name=p + "scores"),
        n("Softmax", [p + "s"], [p + "p"], axis=-1, name=p + "softmax"),
        n("MatMul", [p + "p", p + "q"], [p + "o"], name=p + "attend"),
        n("Transpose", [p + "o"], [p + "ot"], perm=[0, 2, 1, 3], name=p + "merge_t"),
        n("Reshape", [p + "ot", c("merge", [1, SEQ, HIDDEN], np.int64)], [p + "om"],
          name=p + "merge"),
        n("Add", [x, p + "om"], [p + "res"], name=p + "residual"),
        n("LayerNormalization", [p + "res", w("gamma", HIDDEN), w("beta", HIDDEN)], [p + "ln"],
          axis=-1, epsilon=1e-5, name=p + "ln"),
        n("MatMul", [p + "ln", w("w_ff", HIDDEN, HIDDEN)], [p + "ff"], name=p + "ff"),
        n("Add", [p + "ff", w("b_ff", HIDDEN)], [p + "f"], name=p + "ff_bias"),
        n("Mul", [p + "f", c("rsqrt2", 1 / math.sqrt(2))], [p + "fs"], name=p + "gelu_scale"),
        n("Erf", [p + "fs"], [p + "e"], name=p + "gelu_erf"),
        n("Add", [p + "e", c("one", 1.0)], [p + "e1"], name=p + "gelu_add"),
        n("Mul", [p + "f", p + "e1"], [p + "g"], name=p + "gelu_mul"),
        n("Mul", [p + "g", c("half", 0.5)], [p + "gh"], name=p + "gelu_half"),
        n("Add", [p + "ln", p + "gh"], [out], name=p + "out"),
    ]
    assert len(nodes) == BLOCK_NODES
    return nodes, inits


def transformer(n: int) -> bytes:
    """Blocks of MatMul+Add, Reshape, Transpose, MatMul, Softmax, LayerNormalization, Add and an
    Erf GELU, static shapes [1, 16, 64], weights as initializers, until ``n`` nodes."""
    rng = np.random.default_rng(0)
    blocks = max(1, math.ceil(n / BLOCK_NODES))
    nodes, inits = [], []
    x = "x"
    for b in range(blocks):
        out = "y" if b == blocks - 1 else f"b{b}_y"
        more_nodes, more_inits = _block(b, x, out, rng)
        nodes += more_nodes
        inits += more_inits
        x = out
    shape = [1, SEQ, HIDDEN]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits)


MODELS: dict[str, Callable[[int], bytes]] = {"add_chain": add_chain, "transformer": transformer}


# ---------------------------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------------------------


class StageClock:
    """Splits ``load_model`` into parse, shape inference and view building by wrapping the two
    internal steps of ``ep_host.loading`` (views = the rest of ``load_model``)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._parse = loading._parse
        self._infer = loading.Model._infer_types

    def _timed(self, stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[stage] = self.seconds.get(stage, 0.0) + clock() - t0
        return wrapper

    def __enter__(self) -> StageClock:
        loading._parse = self._timed("parse", self._parse)
        loading.Model._infer_types = self._timed("shape_inference", self._infer)
        return self

    def __exit__(self, *exc: Any) -> None:
        loading._parse = self._parse
        loading.Model._infer_types = self._infer


def time_ep_host(data: bytes) -> dict[str, float]:
    """One full placement, every stage in seconds; ``total`` is their sum."""
    with StageClock() as stages:
        t0 = clock()
        model = ep_host.load_model(data)
        t1 = clock()
    host = Host.discover(PROVIDERS)
    t2 = clock()
    table = capability.walk(host, model, PROVIDERS)
    t3 = clock()
    devices = {p: (host.records[p].info.device if host.records[p].info else ep_host.HOST)
               for p in PROVIDERS}
    result = placement.choose(table, devices, strategy="greedy", model=model.label)
    t4 = clock()
    assert len(result.nodes) == len(model.graph.nodes)
    out = dict(stages.seconds)
    out["views"] = (t1 - t0) - out["parse"] - out["shape_inference"]
    out.update(discover=t2 - t1, walk=t3 - t2, choose=t4 - t3, total=t4 - t0)
    return out


def time_onnxruntime(data: bytes) -> float:
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = 1
    t0 = clock()
    session = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    elapsed = clock() - t0
    del session
    return elapsed


def measure(name: str, n: int, repeat: int) -> dict[str, Any]:
    data = MODELS[name](n)
    nodes = len(ep_host.load_model(data, infer_shapes=False).graph.nodes)
    time_ep_host(data)  # warm both once (imports, schema caches), untimed
    time_onnxruntime(data)
    runs: list[dict[str, float]] = []
    ort: list[float] = []
    for r in range(repeat):  # interleaved; the order alternates so neither always goes first
        for which in (("ep", "ort") if r % 2 == 0 else ("ort", "ep")):
            gc.collect()
            if which == "ep":
                runs.append(time_ep_host(data))
            else:
                ort.append(time_onnxruntime(data))
    ep_ms = statistics.median(r["total"] for r in runs) * 1e3
    ort_ms = statistics.median(ort) * 1e3
    return {
        "model": name,
        "nodes": nodes,
        "bytes": len(data),
        "ep_host_ms": ep_ms,
        "onnxruntime_ms": ort_ms,
        "ratio": ep_ms / ort_ms,
        "ep_host_us_per_node": ep_ms * 1e3 / nodes,
        "stages_ms": {s: statistics.median(r[s] for r in runs) * 1e3 for s in STAGES},
        "ep_host_runs_ms": [r["total"] * 1e3 for r in runs],
        "onnxruntime_runs_ms": [t * 1e3 for t in ort],
    }


def measure_onnx_ir(name: str, n: int, repeat: int) -> dict[str, Any] | None:
    """Loading with onnx-ir instead of protobuf views: ``ir.from_proto`` (parse + its node and
    value objects) against ep-host's ``load_model`` without and with shape inference, and
    onnx-ir's ``ShapeInferencePass`` (same options as ep-host) against ep-host's full load."""
    try:
        import onnx_ir as ir
        from onnx_ir.passes.common import ShapeInferencePass
    except ImportError:
        return None
    data = MODELS[name](n)

    def ir_load() -> Any:
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
        return ir.from_proto(proto)

    def ir_load_infer() -> Any:
        model = ir_load()
        ShapeInferencePass(check_type=False, strict_mode=False, data_prop=True)(model)
        return model

    cases = {
        "ep_host_views_ms": lambda: ep_host.load_model(data, infer_shapes=False),
        "onnx_ir_views_ms": ir_load,
        "ep_host_views_inferred_ms": lambda: ep_host.load_model(data),
        "onnx_ir_views_inferred_ms": ir_load_infer,
    }
    times: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(repeat):
        for key, fn in cases.items():
            gc.collect()
            t0 = clock()
            fn()
            times[key].append(clock() - t0)
    return {"model": name, "nodes": n, "onnx_ir": ir.__version__,
            **{k: statistics.median(v) * 1e3 for k, v in times.items()}}


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

TIMED = (
    "ep-host, timed per repeat (nothing reused across repeats): load_model(bytes) "
    "[parse, shape inference with data propagation, views] + a fresh Host.discover(['cpu', "
    "'cuda']) + capability.walk(providers=['cuda', 'cpu']) + placement.choose(strategy="
    "'greedy'). onnxruntime: InferenceSession(bytes, CPUExecutionProvider, "
    "graph_optimization_level=ORT_DISABLE_ALL, intra_op_num_threads=1). Untimed, once before "
    "all repeats: imports, the CPU machine profile, one warm-up run of each."
)


def print_table(rows: list[dict[str, Any]], repeat: int, clock_name: str) -> None:
    print(TIMED)
    what = "wall-clock" if clock_name == "wall" else "process CPU"
    print(f"Medians of {repeat} interleaved repeats, {what} time.\n")
    head = (f"{'model':<12} {'nodes':>7} {'ep-host ms':>11} {'onnxruntime ms':>15} "
            f"{'ratio':>6} {'us/node':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<12} {r['nodes']:>7} {r['ep_host_ms']:>11.1f} "
              f"{r['onnxruntime_ms']:>15.1f} {r['ratio']:>6.2f} {r['ep_host_us_per_node']:>8.2f}")
    print("\nep-host stages (median ms):")
    head = f"{'model':<12} {'nodes':>7} " + " ".join(f"{s:>15}" for s in STAGES)
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<12} {r['nodes']:>7} "
              + " ".join(f"{r['stages_ms'][s]:>15.1f}" for s in STAGES))


def print_onnx_ir(rows: list[dict[str, Any]], repeat: int) -> None:
    print(f"\nLoading with onnx-ir instead of protobuf views (median ms of {repeat}; onnx-ir has "
          "no since_version, schema defaults or provider views, so its times are lower bounds):")
    head = (f"{'model':<12} {'nodes':>7} {'ep-host load':>13} {'onnx-ir load':>13} "
            f"{'ep-host +shapes':>16} {'onnx-ir +shapes':>16}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:<12} {r['nodes']:>7} {r['ep_host_views_ms']:>13.1f} "
              f"{r['onnx_ir_views_ms']:>13.1f} {r['ep_host_views_inferred_ms']:>16.1f} "
              f"{r['onnx_ir_views_inferred_ms']:>16.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000,50000",
                        help="comma-separated node counts (default: 1000,10000,50000)")
    parser.add_argument("--repeat", type=int, default=5, help="timed repeats (default: 5)")
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated, from {', '.join(MODELS)}")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                        help="wall (default) or cpu: this process's CPU time, which other "
                             "processes on a busy machine disturb less")
    parser.add_argument("--onnx-ir", action="store_true",
                        help="also time loading with onnx-ir, at the largest size")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    models = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")

    from ep_host_cpu.profile import machine_profile

    profile = machine_profile()  # measured (or read from its cache) before any timing
    rows = []
    for n in sizes:
        for name in models:
            rows.append(measure(name, n, args.repeat))
            print(f"  {name} {rows[-1]['nodes']} nodes done", file=sys.stderr)
    print_table(rows, args.repeat, args.clock)
    ir_rows: list[dict[str, Any]] = []
    if args.onnx_ir:
        for name in models:
            row = measure_onnx_ir(name, max(sizes), args.repeat)
            if row is None:
                print("\nonnx-ir is not installed: pip install onnx-ir")
                break
            ir_rows.append(row)
        if ir_rows:
            print_onnx_ir(ir_rows, args.repeat)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({
                "schema": "ep-host/bench/placement/v1",
                "timed": TIMED,
                "repeat": args.repeat,
                "clock": args.clock,
                "python": platform.python_version(),
                "onnx": onnx.__version__,
                "onnxruntime": onnxruntime.__version__,
                "cpu_profile": {"peak_gflops": profile.peak_gflops,
                                "bandwidth_gbps": profile.bandwidth_gbps,
                                "dispatch_us": profile.dispatch_us},
                "rows": rows,
                "onnx_ir_rows": ir_rows,
            }, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
