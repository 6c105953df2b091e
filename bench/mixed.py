"""Placed across EPs against each EP alone and each runtime natively, measured in one run.

Per model: ep-host with every installed EP (strategy optimal), ep-host with each EP alone,
onnxruntime natively and OpenVINO natively (the whole model compiled), one thread everywhere;
runs of all variants alternate, so load on the machine hits them alike. Prints median times, the
ratio of "all EPs" to the best native runtime and to the best single EP inside ep-host, the
chosen placement's estimated time against its measured one, and session creation (all EPs)
against onnxruntime's; then one markdown table and the geometric means.

    .venv/bin/python bench/mixed.py [--repeat 10] [--creation 3] [--models resnet50,bert,...]
                                    [--corpus] [--json FILE]
"""

from __future__ import annotations

import os

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import latency  # noqa: E402

from ep_host import InferenceSession, family_factors  # noqa: E402
from ep_host.discovery import Host  # noqa: E402

EPS = ("cpu", "onnxruntime", "openvino")


def native_sessions(data: bytes) -> dict[str, Callable[[], Callable[[dict], Any]]]:
    """Makers of onnxruntime's and OpenVINO's own sessions of the whole model (one thread);
    each returns the function that runs it."""
    import onnxruntime

    def ort() -> Callable[[dict], Any]:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(data, options,
                                               providers=["CPUExecutionProvider"])
        return lambda feeds: session.run(None, feeds)

    makers: dict[str, Callable[[], Callable[[dict], Any]]] = {"onnxruntime (native)": ort}
    try:
        import openvino
    except ImportError:
        return makers
    core = openvino.Core()

    def ov() -> Callable[[dict], Any]:
        compiled = core.compile_model(core.read_model(data, b""), "CPU",
                                      {"INFERENCE_NUM_THREADS": 1,
                                       "INFERENCE_PRECISION_HINT": "f32"})
        request = compiled.create_infer_request()
        return lambda feeds: request.infer(feeds)

    makers["openvino (native)"] = ov
    return makers


def estimates_only(make: Callable[[], InferenceSession]) -> Callable[[], InferenceSession]:
    """``make`` with the EPs' estimates alone (no stored node times: EP_HOST_NODE_TIMES=0)."""
    def made() -> InferenceSession:
        old = os.environ.get("EP_HOST_NODE_TIMES")
        os.environ["EP_HOST_NODE_TIMES"] = "0"
        try:
            return make()
        finally:
            if old is None:
                del os.environ["EP_HOST_NODE_TIMES"]
            else:
                os.environ["EP_HOST_NODE_TIMES"] = old
    return made


def ep_host_sessions(data: bytes, installed: list[str],
                     host: Host) -> dict[str, Callable[[], InferenceSession]]:
    """Makers of ep-host sessions: every installed EP (strategy optimal), then each EP alone."""
    def maker(providers: list[str]) -> Callable[[], InferenceSession]:
        return lambda: InferenceSession(data,
                                        providers=providers, host=host, intra_op_num_threads=1)

    makers = {"ep-host (all EPs)": maker(installed)}
    for ep in installed:
        makers[f"ep-host ({ep} alone)"] = maker([ep])
    return makers


def time_nodes(data: bytes, installed: list[str], host: Host) -> None:
    """``ep-host calibrate --model`` for this model: every node timed alone on each EP, stored
    for the sessions made after it."""
    import tempfile

    from ep_host.calibrate import calibrate_model

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        with open(path, "wb") as f:
            f.write(data)
        calibrate_model(path, installed, host=host)


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1e3


def creation_ms(makers: dict[str, Callable[[], Any]], repeat: int) -> dict[str, float]:
    """Median creation time of each maker, the makers alternating."""
    times: dict[str, list[float]] = {k: [] for k in makers}
    for _ in range(repeat):
        for label, make in makers.items():
            t0 = time.perf_counter()
            made = make()
            times[label].append(time.perf_counter() - t0)
            del made
            gc.collect()  # runtimes' sessions hold the model's weights until collected
    return {k: median_ms(v) for k, v in times.items()}


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


def measure_model(name: str, data: bytes, feeds: dict, installed: list[str], host: Host,
                  args: argparse.Namespace) -> dict[str, Any]:
    print(f"{name}:", flush=True)
    runners: dict[str, Callable[[dict], Any]] = {}
    row: dict[str, Any] = {"model": name}
    makers = {**ep_host_sessions(data, installed, host), **native_sessions(data)}
    if args.node_times:
        # the estimate-only placement first, then the one with this machine's node times
        makers = {"ep-host (all EPs, estimates)": estimates_only(makers["ep-host (all EPs)"]),
                  **makers}
    for label, make in makers.items():
        if label == "ep-host (all EPs)" and args.node_times:
            time_nodes(data, installed, host)
        try:
            made = make()
        except Exception as exc:  # a runtime that cannot take the model: say so, go on
            print(f"  {label}: cannot create: {str(exc).splitlines()[0][:160]}")
            continue
        if isinstance(made, InferenceSession):
            runners[label] = lambda f, s=made: s.run(None, f)
            if label == "ep-host (all EPs, estimates)":
                row["estimate_only_ms"] = made.placement.total_us / 1e3
            if label == "ep-host (all EPs)":
                placed: dict[str, int] = {}
                for n in made.placement.nodes:
                    placed[n.provider] = placed.get(n.provider, 0) + 1
                row["placement"] = placed
                row["partitions"] = len(made.placement.compiled_partitions())
                row["estimate_ms"] = made.placement.total_us / 1e3
        else:
            runners[label] = made
    if args.creation:
        wanted = ("ep-host (all EPs)", "onnxruntime (native)", "openvino (native)")
        timed = {k: makers[k] for k in wanted if k in runners}
        row["creation_ms"] = creation_ms(timed, args.creation)
    for run in runners.values():
        run(feeds)  # warm-up
    times: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(args.repeat):
        for label, run in runners.items():
            t0 = time.perf_counter()
            run(feeds)
            times[label].append(time.perf_counter() - t0)
    row["ms"] = {k: median_ms(v) for k, v in times.items()}
    if "placement" in row:
        print(f"  placement: {row['placement']}, {row['partitions']} compiled partitions, "
              f"estimated {row['estimate_ms']:.2f} ms")
    for label, ms in row["ms"].items():
        print(f"  {label:26s} {ms:9.3f} ms")
    for label, ms in row.get("creation_ms", {}).items():
        print(f"  creation {label:17s} {ms:9.1f} ms")
    mine = row["ms"].get("ep-host (all EPs)")
    native = [v for k, v in row["ms"].items() if "native" in k]
    single = [v for k, v in row["ms"].items() if "alone" in k]
    if mine is not None:
        if native:
            row["vs_best_native"] = mine / min(native)
        if single:
            row["vs_best_single_ep"] = mine / min(single)
        row["estimate_over_measured"] = row["estimate_ms"] / mine
        plain = row["ms"].get("ep-host (all EPs, estimates)")
        if plain is not None and "estimate_only_ms" in row:
            row["estimates_only_estimate_over_measured"] = row["estimate_only_ms"] / plain
            row["estimates_only_vs_best_native"] = plain / min(native) if native else math.nan
    creation = row.get("creation_ms", {})
    if "ep-host (all EPs)" in creation and "onnxruntime (native)" in creation:
        row["creation_vs_onnxruntime"] = (creation["ep-host (all EPs)"]
                                          / creation["onnxruntime (native)"])
    print("  all EPs / best native {:.2f}, / best single EP {:.2f}, estimate / measured {:.2f}, "
          "creation / onnxruntime's {:.2f}".format(
              *(row.get(k, math.nan) for k in ("vs_best_native", "vs_best_single_ep",
                                                "estimate_over_measured",
                                                "creation_vs_onnxruntime"))), flush=True)
    return row


def table(rows: list[dict[str, Any]], labels: list[str]) -> str:
    """The rows as a markdown table: each variant's median, then the ratios."""
    head = ["model", *labels, "all/best native", "all/best single", "est/meas", "create/ort"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        cells = [r["model"]] + [f"{r['ms'][k]:.2f}" if k in r["ms"] else "-" for k in labels]
        cells += [f"{r[k]:.2f}" if k in r else "-" for k in
                  ("vs_best_native", "vs_best_single_ep", "estimate_over_measured",
                   "creation_vs_onnxruntime")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def model_set(names: list[str] | None, corpus: bool) -> dict[str, tuple[Any, dict]]:
    out = {k: v for k, v in latency.model_set(names).items() if k != "add_chain"}
    if corpus:
        import corpus as real_models  # bench/corpus.py: real exports, built in their own venv

        out.update(real_models.load_corpus(names))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="timed runs of each variant")
    parser.add_argument("--creation", type=int, default=3,
                        help="timed session creations per variant (0: skip)")
    parser.add_argument("--models", help="comma-separated subset (light CNN names, bert, gpt2)")
    parser.add_argument("--corpus", action="store_true",
                        help="add the real exports of bench/corpus.py (built beforehand)")
    parser.add_argument("--node-times", action="store_true",
                        help="also time every node alone on each EP (ep-host calibrate --model; "
                        "stored under the cache directory) and measure the placement made with "
                        "those times as 'ep-host (all EPs)', the estimate-only one beside it")
    parser.add_argument("--json", help="write the numbers here")
    args = parser.parse_args()
    host = Host.discover()
    installed = [p for p in EPS if p in host.records and host.records[p].available]
    calibrated = [p for p in installed if family_factors(p)]
    print(f"EPs available: {', '.join(installed)}; calibrated (ep-host calibrate): "
          f"{', '.join(calibrated) or 'none'}")
    names = args.models.split(",") if args.models else None
    rows = []
    for name, (model, feeds) in model_set(names, args.corpus).items():
        data = model if isinstance(model, bytes) else model.SerializeToString()
        rows.append(measure_model(name, data, feeds, installed, host, args))
        gc.collect()
    labels = list(dict.fromkeys(k for r in rows for k in r["ms"]))
    print()
    print(table(rows, labels))
    print()
    for key in ("vs_best_native", "vs_best_single_ep", "estimate_over_measured",
                "creation_vs_onnxruntime", "estimates_only_vs_best_native",
                "estimates_only_estimate_over_measured"):
        vals = [r[key] for r in rows if key in r]
        if vals:
            print(f"{key.replace('_', ' ')}: geometric mean {geomean(vals):.2f}, "
                  f"min {min(vals):.2f}, max {max(vals):.2f} over {len(vals)} models")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
