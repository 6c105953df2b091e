"""Cost-model error of the CPU EP before and after ``ep-host calibrate``.

For each model (onnx's nine light models with random weights, and a BERT-like encoder) every
node's predicted time (the CPU EP's ``Cost.total_us``, the trace span's ``estimated_us``) is
compared with its measured time (the best of the traced runs' ``node`` spans); prints the median
and p90 of ``|log2(predicted / measured)|`` over all nodes, per model and overall, first
uncalibrated, then after calibrating into the same fresh cache directory. Each phase runs in its
own process so the CPU EP reads the profile afresh. BLAS runs on one thread.

    .venv/bin/python bench/calibration.py [--repeat 5] [--models resnet50,bert,...] [--json FILE]
"""

from __future__ import annotations

import os

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402

MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512", "bert")


def load(name: str):
    import onnx

    from ep_host.testing import models

    if name == "bert":
        model = models.bert_encoder(layers=2)
        return model, models.bert_inputs(model)
    model = models.with_random_weights(onnx.load(models.light_model_path(name)))
    return model, models.random_inputs(model)


def node_errors(name: str, repeat: int) -> list[dict]:
    """Per node: op, predicted and measured microseconds."""
    from ep_host import InferenceSession
    from ep_host.tracing import Tracer

    model, feeds = load(name)
    tracer = Tracer()
    session = InferenceSession(model.SerializeToString(), providers=["cpu"], trace=tracer)
    session.run(None, feeds)
    start = len(tracer.events)
    for _ in range(repeat):
        session.run(None, feeds)
    best: dict[str, dict] = {}
    for e in tracer.events[start:]:
        if e["cat"] != "node":
            continue
        row = best.setdefault(e["name"], {"op": e["args"]["op_type"],
                                          "predicted_us": e["args"]["estimated_us"],
                                          "measured_us": math.inf})
        row["measured_us"] = min(row["measured_us"], e["dur"])
    return list(best.values())


def summary(rows: list[dict]) -> dict[str, float]:
    err = np.array([abs(math.log2(max(r["predicted_us"], 1e-3) / max(r["measured_us"], 1e-3)))
                    for r in rows])
    return {"nodes": len(rows), "median": float(np.median(err)),
            "p90": float(np.percentile(err, 90))}


def phase(names: list[str], repeat: int) -> dict[str, list[dict]]:
    return {name: node_errors(name, repeat) for name in names}


def run_phase(names: list[str], repeat: int, env: dict[str, str]) -> dict[str, list[dict]]:
    result = subprocess.run([sys.executable, __file__, "--phase", "--models", ",".join(names),
                             "--repeat", str(repeat)], env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(result.stderr)
    return json.loads(result.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="traced runs per model")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--json", metavar="FILE", help="also write every node's numbers")
    parser.add_argument("--phase", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = [m for m in args.models.split(",") if m]
    if args.phase:
        json.dump(phase(names, args.repeat), sys.stdout)
        return
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, EP_HOST_CACHE_DIR=cache)
        before = run_phase(names, args.repeat, env)
        subprocess.run([sys.executable, "-m", "ep_host", "calibrate", "--providers", "cpu"],
                       env=env, check=True, stdout=subprocess.DEVNULL)
        after = run_phase(names, args.repeat, env)
    print(f"|log2(predicted / measured)| per node, CPU EP, best of {args.repeat} runs")
    print(f"{'model':<14} {'nodes':>6}  {'before: median':>14} {'p90':>6}  "
          f"{'after: median':>13} {'p90':>6}")
    for name in [*names, "all"]:
        b = summary(sum(before.values(), []) if name == "all" else before[name])
        a = summary(sum(after.values(), []) if name == "all" else after[name])
        print(f"{name:<14} {b['nodes']:>6}  {b['median']:>14.2f} {b['p90']:>6.2f}  "
              f"{a['median']:>13.2f} {a['p90']:>6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"before": before, "after": after}, f)


if __name__ == "__main__":
    main()
