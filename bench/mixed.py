"""Placed across EPs against each EP alone and each runtime natively, measured in one run.

Per model: ep-host with every installed EP (strategy optimal), ep-host with each EP alone,
onnxruntime natively and OpenVINO natively (the whole model compiled), one thread everywhere;
runs of all variants alternate, so load on the machine hits them alike. Prints median times, the
ratio of "all EPs" to the best native runtime and to the best single EP inside ep-host, and the
chosen placement's estimated time against its measured one.

    .venv/bin/python bench/mixed.py [--repeat 10] [--models resnet50,bert,...] [--json FILE]
"""

from __future__ import annotations

import os

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import latency  # noqa: E402

from ep_host import InferenceSession  # noqa: E402
from ep_host.discovery import Host  # noqa: E402

EPS = ("cpu", "onnxruntime", "openvino")


def native_runners(data: bytes) -> dict[str, Callable[[dict], Any]]:
    """onnxruntime's and OpenVINO's own sessions of the whole model, where installed."""
    out: dict[str, Callable[[dict], Any]] = {}
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    ort = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    out["onnxruntime (native)"] = lambda feeds: ort.run(None, feeds)
    try:
        import openvino
    except ImportError:
        return out
    core = openvino.Core()
    try:
        compiled = core.compile_model(core.read_model(data, b""), "CPU",
                                      {"INFERENCE_NUM_THREADS": 1})
    except Exception as exc:  # a model OpenVINO cannot convert whole
        print(f"  openvino (native): cannot compile: {str(exc).splitlines()[0][:120]}")
        return out
    request = compiled.create_infer_request()
    out["openvino (native)"] = lambda feeds: request.infer(feeds)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--models", help="comma-separated subset (light CNN names, bert, gpt2)")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    host = Host.discover()
    installed = [p for p in EPS if p in host.records and host.records[p].available]
    print(f"EPs available: {', '.join(installed)}")
    names = args.models.split(",") if args.models else None
    rows = []
    for name, (model, feeds) in latency.model_set(names).items():
        if name == "add_chain":
            continue
        data = model.SerializeToString()
        print(f"{name}:", flush=True)
        runners: dict[str, Callable[[dict], Any]] = {}
        estimate = None
        try:
            mixed = InferenceSession(data, installed, host=host)
            runners["ep-host (all EPs)"] = lambda f, s=mixed: s.run(None, f)
            estimate = mixed.placement.total_us
            placed = {}
            for n in mixed.placement.nodes:
                placed[n.provider] = placed.get(n.provider, 0) + 1
            print(f"  placement: {placed}, estimated {estimate / 1e3:.2f} ms")
        except Exception as exc:
            print(f"  ep-host (all EPs): {str(exc).splitlines()[0][:160]}")
        for ep in installed:
            try:
                alone = InferenceSession(data, [ep], host=host)
                runners[f"ep-host ({ep} alone)"] = lambda f, s=alone: s.run(None, f)
            except Exception as exc:
                print(f"  ep-host ({ep} alone): {str(exc).splitlines()[0][:160]}")
        runners.update(native_runners(data))
        for run in runners.values():
            run(feeds)  # warm-up
        times: dict[str, list[float]] = {k: [] for k in runners}
        for _ in range(args.repeat):
            for label, run in runners.items():
                t0 = time.perf_counter()
                run(feeds)
                times[label].append(time.perf_counter() - t0)
        medians = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        for label, ms in medians.items():
            print(f"  {label:26s} {ms:9.3f} ms")
        row: dict[str, Any] = {"model": name, "ms": medians}
        if "ep-host (all EPs)" in medians:
            mine = medians["ep-host (all EPs)"]
            native = [v for k, v in medians.items() if "native" in k]
            single = [v for k, v in medians.items() if "alone" in k]
            if native:
                row["vs_best_native"] = mine / min(native)
            if single:
                row["vs_best_single_ep"] = mine / min(single)
            if estimate:
                row["estimate_over_measured"] = estimate / 1e3 / mine
            print("  all EPs / best native {:.2f}, / best single EP {:.2f}, estimate / measured "
                  "{:.2f}".format(row.get("vs_best_native", math.nan),
                                  row.get("vs_best_single_ep", math.nan),
                                  row.get("estimate_over_measured", math.nan)))
        rows.append(row)
    for key in ("vs_best_native", "vs_best_single_ep"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            geo = math.exp(sum(map(math.log, vals)) / len(vals))
            print(f"geometric mean, all EPs {key.replace('_', ' ')}: {geo:.2f} "
                  f"over {len(vals)} models")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
