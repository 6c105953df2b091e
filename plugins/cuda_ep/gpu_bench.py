"""The CUDA EP on real models against the CPU EP: outputs (max abs diff, must be <= 1e-3) and
latency (median of --repeat runs after warm-up) for the nine light CNNs with random weights, a
BERT-base-like encoder and a GPT-2-like decoder; the same encoder in torch eager on the GPU when
torch has CUDA; and one model with CUDA graphs on against an uncaptured run.

    python plugins/cuda_ep/gpu_bench.py [--repeat 20] [--models bert,resnet50] [--budget-s 170]
    python plugins/cuda_ep/gpu_bench.py --dry-run     # numpy bound in place of CuPy, small models

Exit status 1 when any model's outputs differ by more than the tolerance.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import onnx

from ep_host import InferenceSession
from ep_host.discovery import Host
from ep_host.testing import models

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = 1e-3


def say(*parts: Any) -> None:
    print(*parts, flush=True)


def gpt2_model(**sizes: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The GPT-2-like decoder bench/latency.py runs (``ep_host.testing.models.gpt2_decoder``)."""
    model = models.gpt2_decoder(**sizes)
    return model, models.gpt2_inputs(model)


def model_set(names: list[str] | None, dry_run: bool):
    """name -> (model, feeds), built lazily, in the order they run."""
    light = ["squeezenet"] if dry_run else list(models.LIGHT_MODELS)
    out = {}
    for name in light:
        if not names or name in names:
            out[name] = lambda n=name: _light(n)
    bert = dict(layers=1, hidden=128, heads=2, seq=32) if dry_run else {}
    if not names or "bert" in names:
        out["bert"] = lambda: _bert(**bert)
    if not names or "gpt2" in names:
        out["gpt2"] = lambda: gpt2_model(**(dict(layers=1, hidden=128, heads=2, seq=32)
                                            if dry_run else {}))
    return out


def _light(name):
    model = models.with_random_weights(onnx.load(models.light_model_path(name)))
    return model, models.random_inputs(model)


def _bert(**sizes):
    model = models.bert_encoder(**sizes)
    return model, models.bert_inputs(model)


def make_host(dry_run: bool) -> tuple[Host, Any]:
    """The CPU EP and the CUDA EP: CuPy's (the installed entry point), or numpy-bound."""
    if not dry_run:
        host = Host.discover(["cpu", "cuda"])
        record = host.records.get("cuda")
        if record is None or record.status != "available":
            say("CUDA EP not available:", record.fault if record else "not installed")
            sys.exit(2)
        return host, record.plugin
    import ep_host_cpu.provider as cpu_provider
    from ep_host_cuda.figures import DeviceFigures
    from ep_host_cuda.provider import simulated

    host = Host()
    host.register(cpu_provider, "cpu")
    plugin = simulated(DeviceFigures(gemm_gflops=20_000.0, bandwidth_gbps=2_000.0,
                                     launch_us=8.0, link_gbps=20.0, link_latency_us=10.0))
    host.register(plugin, "cuda")
    return host, plugin


def median_ms(fn, repeat: int, deadline: float) -> tuple[float, int]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        if time.perf_counter() > deadline and len(times) >= 3:
            break
    return statistics.median(times), len(times)


def max_diff(got, expected) -> float:
    return max(float(np.max(np.abs(g.astype(np.float64) - e.astype(np.float64))))
               if e.size else 0.0 for g, e in zip(got, expected, strict=True))


# -- torch eager: the same ONNX graph, node by node, as torch calls on the GPU -----------------


def torch_runner(model: onnx.ModelProto, feeds: dict[str, np.ndarray]):
    """The encoder's graph interpreted op by op with torch on CUDA (eager; same weights), or
    ``None`` with the reason where torch or its CUDA is missing."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "torch has no CUDA device"
    from onnx import numpy_helper

    dev = torch.device("cuda")
    weights = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()).to(dev)
               for t in model.graph.initializer}
    inputs = {k: torch.from_numpy(v).to(dev) for k, v in feeds.items()}
    nodes = list(model.graph.node)

    def attr(node, name, default=None):
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default

    def run():
        env = {**weights, **inputs}
        for node in nodes:
            x = [env[i] for i in node.input]
            op = node.op_type
            if op == "MatMul":
                y = torch.matmul(x[0], x[1])
            elif op in ("Add", "Sub", "Mul", "Div"):
                y = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul,
                     "Div": torch.div}[op](x[0], x[1])
            elif op == "Erf":
                y = torch.erf(x[0])
            elif op == "Softmax":
                y = torch.softmax(x[0], dim=attr(node, "axis", -1))
            elif op == "Transpose":
                y = x[0].permute(*attr(node, "perm"))
            elif op == "Reshape":
                y = x[0].reshape([int(d) for d in x[1].tolist()])
            elif op == "Shape":
                y = torch.tensor(list(x[0].shape), dtype=torch.int64)
            elif op == "Gather":
                y = x[0][x[1].to(x[0].device)]
            elif op == "Unsqueeze":
                y = x[0].reshape(1) if x[0].dim() == 0 else x[0].unsqueeze(0)
            elif op == "Concat":
                y = torch.cat([t.to("cpu").reshape(-1) for t in x])
            elif op == "LayerNormalization":
                y = torch.nn.functional.layer_norm(x[0], x[0].shape[-1:], x[1], x[2],
                                                   eps=attr(node, "epsilon", 1e-5))
            elif op == "Identity":
                y = x[0]
            else:
                raise NotImplementedError(op)
            env[node.output[0]] = y
        torch.cuda.synchronize()
        return env[model.graph.output[0].name].cpu().numpy()

    with torch.no_grad():
        run()
    return run, ""


# -- the report ---------------------------------------------------------------------------------


def bench_model(name, build, host, repeat, deadline, dry_run):
    t0 = time.perf_counter()
    model, feeds = build()
    data = model.SerializeToString()
    cpu = InferenceSession(data, providers=["cpu"], host=host)
    cuda = InferenceSession(data, providers=["cuda", "cpu"], host=host)
    expected = cpu.run(None, feeds)
    got = cuda.run(None, feeds)  # warm-up: kernels compile, the pool fills
    cuda.run(None, feeds)
    diff = max_diff(got, expected)
    on_device = sum(n.provider == "cuda" for n in cuda.placement.nodes)
    per_model = max(deadline - time.perf_counter(), 1.0) / 2
    t_cuda, n_cuda = median_ms(lambda: cuda.run(None, feeds), repeat,
                               time.perf_counter() + per_model)
    t_cpu, n_cpu = median_ms(lambda: cpu.run(None, feeds), repeat,
                             time.perf_counter() + per_model)
    status = "ok" if diff <= TOLERANCE else "MISMATCH"
    say(f"{name:14s} {status:8s} max|diff| {diff:9.2e}  cuda EP {t_cuda:9.2f} ms (n={n_cuda:2d})  "
        f"cpu EP {t_cpu:9.2f} ms (n={n_cpu:2d})  nodes on cuda {on_device}/"
        f"{len(cuda.placement.nodes)}  copies {len(cuda.placement.transfers)}  "
        f"[{time.perf_counter() - t0:.1f} s]")
    extra = {}
    if name == "bert":
        run, why = (None, "dry run") if dry_run else torch_runner(model, feeds)
        if run is None:
            say(f"{'bert (torch)':14s} skipped: {why}")
        else:
            torch_out = run()
            t_torch, n_torch = median_ms(run, repeat, time.perf_counter() + 20)
            torch_diff = max_diff([torch_out], expected[:1])
            say(f"{'bert (torch)':14s} max|diff| vs cpu EP {torch_diff:9.2e}"
                f"  torch eager {t_torch:9.2f} ms (n={n_torch:2d})  cuda EP {t_cuda:9.2f} ms")
        extra = {"model": model, "feeds": feeds}
    return diff <= TOLERANCE, extra


def cuda_graph_check(host, model, feeds) -> None:
    data = model.SerializeToString()
    plain = InferenceSession(data, providers=["cuda", "cpu"], host=host).run(None, feeds)
    try:
        session = InferenceSession(data, providers=["cuda", "cpu"], host=host,
                                   provider_options={"cuda": {"enable_cuda_graph": True}})
        first = session.run(None, feeds)
        second = session.run(None, feeds)  # a replay, where the session captured
    except Exception as exc:
        say(f"cuda graphs   not captured: the session raised {type(exc).__name__}: {exc}")
        return
    diff = max(max_diff(first, plain), max_diff(second, plain))
    graphs = session.device_graphs
    recorded = [g for g in graphs if g.captured]
    status = "ok" if diff <= TOLERANCE else "MISMATCH"
    say(f"cuda graphs   {status} max|diff| captured vs uncaptured {diff:.2e}; "
        f"{len(recorded)} of {len(graphs)} cuda partition(s) recorded")
    for g in graphs:
        if not g.captured:
            say(f"              not recorded ({len(g.nodes)} nodes): {g.reason}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--models", help="comma-separated subset (light model names, bert, gpt2)")
    parser.add_argument("--budget-s", type=float, default=170.0,
                        help="stop timing early (at least 3 runs each) to finish in about this")
    parser.add_argument("--dry-run", action="store_true",
                        help="bind numpy in place of CuPy (no GPU needed), small models")
    args = parser.parse_args()
    start = time.perf_counter()
    host, plugin = make_host(args.dry_run)
    figures = plugin.figures
    say(f"device {plugin.device.name}: GEMM {figures.gemm_gflops:.0f} GFLOP/s, memory "
        f"{figures.bandwidth_gbps:.0f} GB/s, launch {figures.launch_us:.1f} us, link "
        f"{figures.link_gbps:.1f} GB/s + {figures.link_latency_us:.1f} us ({figures.source})")
    names = args.models.split(",") if args.models else None
    todo = model_set(names, args.dry_run)
    ok, bert = True, {}
    for i, (name, build) in enumerate(todo.items()):
        left = args.budget_s - (time.perf_counter() - start)
        deadline = time.perf_counter() + max(left / (len(todo) - i + 1), 1.0)
        good, extra = bench_model(name, build, host, args.repeat, deadline, args.dry_run)
        ok &= good
        bert = extra or bert
    if bert:
        cuda_graph_check(host, bert["model"], bert["feeds"])
    say(f"{'all outputs within' if ok else 'SOME OUTPUTS DIFFER BY MORE THAN'} {TOLERANCE:g} of "
        f"the CPU EP; {time.perf_counter() - start:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
