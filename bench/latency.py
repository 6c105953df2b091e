"""Run latency of ep-host's CPU EP against onnxruntime's CPU provider, measured in one run.

Both sides use one thread (onnxruntime: intra_op_num_threads=1, graph optimizations on;
numpy's BLAS: OPENBLAS_NUM_THREADS=1 etc., set before numpy loads). Runs alternate between the
two, so load on the machine hits both alike; the ratio of medians is printed per model, with
the geometric mean over the models.

    .venv/bin/python bench/latency.py [--repeat 20] [--models resnet50,bert,...] [--corpus]
                                      [--json FILE]

``--corpus`` adds the real exports of bench/corpus.py (built beforehand); with ``--models`` only
the named ones of both sets run.
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

import numpy as np  # noqa: E402
import onnx  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from ep_host import InferenceSession  # noqa: E402
from ep_host.testing import models  # noqa: E402


def add_chain(n: int = 10_000) -> onnx.ModelProto:
    nodes = [helper.make_node("Add", [f"v{i}", "one"], [f"v{i + 1}"]) for i in range(n)]
    graph = helper.make_graph(
        nodes, "add_chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info(f"v{n}", TensorProto.FLOAT, [1])],
        initializer=[numpy_helper.from_array(np.ones(1, np.float32), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def model_set(names: list[str] | None,
              corpus: bool = False) -> dict[str, tuple[onnx.ModelProto, dict]]:
    out: dict[str, tuple[onnx.ModelProto, dict]] = {}
    for name in models.LIGHT_MODELS:
        if names and name not in names:
            continue
        m = models.with_random_weights(onnx.load(models.light_model_path(name)))
        out[name] = (m, models.random_inputs(m))
    if not names or "bert" in names:
        m = models.bert_encoder()
        out["bert"] = (m, models.bert_inputs(m))
    if not names or "gpt2" in names:
        m = models.gpt2_decoder()
        out["gpt2"] = (m, models.gpt2_inputs(m))
    if not names or "add_chain" in names:
        out["add_chain"] = (add_chain(), {"v0": np.zeros(1, np.float32)})
    if corpus:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import corpus as real_models  # bench/corpus.py: real exports, built in their own venv

        out.update(real_models.load_corpus(names))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--models", help="comma-separated subset")
    parser.add_argument("--corpus", action="store_true",
                        help="add the real exports of bench/corpus.py (built beforehand)")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    rows = []
    names = args.models.split(",") if args.models else None
    for name, (model, feeds) in model_set(names, args.corpus).items():
        data = model.SerializeToString()
        ours = InferenceSession(data, providers=["cpu"], intra_op_num_threads=1)
        theirs = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
        ours.run(None, feeds)
        theirs.run(None, feeds)
        t_ours, t_theirs = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            ours.run(None, feeds)
            t1 = time.perf_counter()
            theirs.run(None, feeds)
            t2 = time.perf_counter()
            t_ours.append(t1 - t0)
            t_theirs.append(t2 - t1)
        a, b = statistics.median(t_ours) * 1e3, statistics.median(t_theirs) * 1e3
        rows.append({"model": name, "nodes": len(model.graph.node), "ep_host_ms": a,
                     "onnxruntime_ms": b, "ratio": a / b})
        print(f"{name:14s} {len(model.graph.node):6d} nodes  ep-host {a:9.3f} ms  "
              f"onnxruntime {b:9.3f} ms  ratio {a / b:6.2f}", flush=True)
    real = [r for r in rows if r["model"] != "add_chain"]
    if real:
        geo = math.exp(sum(math.log(r["ratio"]) for r in real) / len(real))
        print(f"geometric mean ratio over {len(real)} models: {geo:.2f}")
    chain = [r for r in rows if r["model"] == "add_chain"]
    if chain:
        r = chain[0]
        print(f"per-node overhead (Add chain): ep-host {r['ep_host_ms'] * 1e3 / r['nodes']:.2f} us,"
              f" onnxruntime {r['onnxruntime_ms'] * 1e3 / r['nodes']:.2f} us, "
              f"ratio {r['ratio']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
