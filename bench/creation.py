"""Session creation against onnxruntime's, and where ep-host's time goes, measured in one run.

Per model (from a path): ``ep_host.InferenceSession(path)`` with the default providers and with
the CPU EP alone, and ``onnxruntime.InferenceSession(path)`` (CPUExecutionProvider, one thread,
its default graph optimizations), alternating, the order flipping each repeat, after one untimed
warm-up of each (imports, plugin loading, the runtimes' verdicts cached on disk). Prints the
median of each and ep-host's ratio to onnxruntime, then ep-host's median time per phase:
``load`` (parse, validation, shape inference, views), ``discover`` (providers), ``optimize``
(graph passes, the rebuilt model), ``walk`` (the capability walk), ``place`` (the strategy),
``plan`` (kernels created, partitions compiled), ``other`` (the rest of the constructor).

``--place N,...`` times instead what ``ep-host place`` does (load, discover, optimize, walk,
choose with the default strategy; no plan) on bench/placement.py's generated models of N nodes
against onnxruntime's whole session creation, with ``us/node`` to show how it grows.

    .venv/bin/python bench/creation.py [--models bert_base,tv_resnet50,light] [--repeat 5]
                                       [--providers all,cpu] [--place 10000,25000,50000]
                                       [--clock wall|cpu] [--json FILE]
"""

from __future__ import annotations

import os

for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import gc  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

PHASES = ("load", "discover", "optimize", "walk", "place", "plan", "other")
DEFAULT_MODELS = "bert_base,tv_resnet50,tv_mobilenet_v2,light"


def clock_of(name: str) -> Callable[[], float]:
    return time.process_time if name == "cpu" else time.perf_counter


@contextlib.contextmanager
def phase_clock(clock: Callable[[], float]) -> Iterator[dict[str, float]]:
    """Time spent in each phase function the session calls (ep_host.session's module globals
    wrapped for the duration); ``other`` is filled in by the caller."""
    import ep_host.session as session
    from ep_host import capability

    spent = dict.fromkeys(PHASES, 0.0)
    wrapped = {(session, "load_model"): "load", (session, "discover_host"): "discover",
               (session, "optimize"): "optimize", (capability, "walk"): "walk",
               (session, "choose"): "place", (session, "build_plan"): "plan"}
    originals = {key: getattr(*key) for key in wrapped}

    def timed(fn: Callable[..., Any], phase: str) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            t0 = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[phase] += clock() - t0
        return call

    for (module, attr), phase in wrapped.items():
        setattr(module, attr, timed(originals[(module, attr)], phase))
    try:
        yield spent
    finally:
        for (module, attr), fn in originals.items():
            setattr(module, attr, fn)


def makers(path: str, variants: list[str]) -> dict[str, Callable[[], Any]]:
    import onnxruntime

    from ep_host import InferenceSession

    def ort() -> Any:
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    out: dict[str, Callable[[], Any]] = {}
    for variant in variants:
        providers = None if variant == "all" else variant.split("+")
        out[f"ep-host ({variant})"] = lambda p=providers: InferenceSession(path, providers=p)
    out["onnxruntime"] = ort
    return out


def measure_creation(name: str, path: str, variants: list[str], repeat: int,
                     clock: Callable[[], float]) -> dict[str, Any]:
    made = makers(path, variants)
    times: dict[str, list[float]] = {k: [] for k in made}
    phases: dict[str, list[dict[str, float]]] = {k: [] for k in made if k != "onnxruntime"}
    for make in made.values():  # warm-up: imports, plugins, verdicts cached on disk
        make()
        gc.collect()
    for r in range(repeat):
        order = list(made) if r % 2 == 0 else list(reversed(made))
        for label in order:
            with phase_clock(clock) as spent:
                t0 = clock()
                session = made[label]()
                took = clock() - t0
            del session
            gc.collect()  # sessions hold the model's weights until collected
            times[label].append(took)
            if label in phases:
                spent["other"] = max(0.0, took - sum(spent.values()))
                phases[label].append(dict(spent))
    row: dict[str, Any] = {"model": name,
                           "ms": {k: statistics.median(v) * 1e3 for k, v in times.items()}}
    row["ratio"] = {k: row["ms"][k] / row["ms"]["onnxruntime"] for k in phases}
    row["phases_ms"] = {k: {p: statistics.median(s[p] for s in v) * 1e3 for p in PHASES}
                        for k, v in phases.items()}
    return row


def model_paths(names: list[str]) -> dict[str, str]:
    """name -> path: corpus models (bench/corpus.py), ``light`` for onnx's nine light models
    (random weights written to a temporary folder), or a path to an .onnx file."""
    out: dict[str, str] = {}
    corpus = [n for n in names if n != "light" and not n.endswith(".onnx")]
    if corpus:
        from corpus import DEFAULT_OUT, read_index

        index = read_index(Path(DEFAULT_OUT))
        for n in corpus:
            if n not in index:
                raise SystemExit(f"{n}: not in the corpus at {DEFAULT_OUT} (bench/corpus.py)")
            out[n] = str(Path(DEFAULT_OUT) / index[n]["path"])
    for n in names:
        if n.endswith(".onnx"):
            out[Path(n).stem] = n
    if "light" in names:
        import onnx

        from ep_host.testing import models

        folder = tempfile.mkdtemp(prefix="ep-host-creation-")
        for light in models.LIGHT_MODELS:
            proto = models.with_random_weights(onnx.load(models.light_model_path(light)))
            out[light] = os.path.join(folder, f"{light}.onnx")
            onnx.save(proto, out[light])
    return out


def place_once(path: str, clock: Callable[[], float]) -> dict[str, float]:
    """What ``ep-host place`` does before printing, by phase (default providers, strategy)."""
    from ep_host import capability
    from ep_host.declared_types import declare_output_types
    from ep_host.discovery import Host
    from ep_host.loading import load_model
    from ep_host.optimize import optimize
    from ep_host.placement import choose
    from ep_host.session import select_providers

    spent: dict[str, float] = {}
    t0 = clock()
    model = load_model(path)
    t1 = clock()
    host = Host.discover(None)
    providers = select_providers(host, None)
    model = declare_output_types(host, model, providers)
    t2 = clock()
    model = optimize(model, in_place=True)
    t3 = clock()
    table = capability.walk(host, model, providers)
    t4 = clock()
    devices = {p: host.records[p].info.device for p in providers
               if host.records[p].info is not None}
    choose(table, devices, model=model.label)
    t5 = clock()
    spent.update(load=t1 - t0, discover=t2 - t1, optimize=t3 - t2, walk=t4 - t3,
                 place=t5 - t4, total=t5 - t0, nodes=len(model.graph.nodes))
    return spent


def measure_place(sizes: list[int], repeat: int, clock: Callable[[], float]) -> list[dict]:
    import placement  # bench/placement.py: the generated models

    rows = []
    folder = tempfile.mkdtemp(prefix="ep-host-place-")
    warm = os.path.join(folder, "warm-up.onnx")
    with open(warm, "wb") as f:  # imports and plugin loading, untimed
        f.write(placement.add_chain(100))
    place_once(warm, clock)
    makers(warm, [])["onnxruntime"]()
    for kind in ("add_chain", "transformer"):
        for n in sizes:
            path = os.path.join(folder, f"{kind}_{n}.onnx")
            with open(path, "wb") as f:
                f.write(getattr(placement, kind)(n))
            ort = makers(path, [])["onnxruntime"]
            ours, theirs = [], []
            for r in range(repeat):
                for side in (("ep", "ort") if r % 2 == 0 else ("ort", "ep")):
                    if side == "ep":
                        ours.append(place_once(path, clock))
                    else:
                        t0 = clock()
                        session = ort()
                        theirs.append(clock() - t0)
                        del session
                    gc.collect()
            nodes = ours[0]["nodes"]
            row = {"model": kind, "nodes": nodes,
                   "phases_ms": {p: statistics.median(o[p] for o in ours) * 1e3
                                 for p in ("load", "discover", "optimize", "walk", "place",
                                           "total")},
                   "onnxruntime_ms": statistics.median(theirs) * 1e3}
            row["ratio"] = row["phases_ms"]["total"] / row["onnxruntime_ms"]
            row["us_per_node"] = row["phases_ms"]["total"] * 1e3 / nodes
            rows.append(row)
            print(f"{kind:12s} {nodes:7d} nodes  ep-host place {row['phases_ms']['total']:9.1f} ms"
                  f"  onnxruntime {row['onnxruntime_ms']:9.1f} ms  ratio {row['ratio']:.2f}  "
                  f"{row['us_per_node']:.1f} us/node  "
                  + " ".join(f"{p}={row['phases_ms'][p]:.0f}" for p in
                             ("load", "discover", "optimize", "walk", "place")), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help="corpus names, 'light', or .onnx paths, comma-separated")
    parser.add_argument("--providers", default="all,cpu",
                        help="ep-host variants: 'all' (the default providers) or provider "
                             "names joined by '+', comma-separated")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--place", default="", help="node counts: time `ep-host place` instead")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall-clock time, or this process's CPU time (onnxruntime runs "
                             "in it with one thread), which other processes disturb less")
    parser.add_argument("--json", help="write every row to this file")
    args = parser.parse_args()
    clock = clock_of(args.clock)
    if args.place:
        rows = measure_place([int(n) for n in args.place.split(",")], args.repeat, clock)
    else:
        rows = []
        variants = args.providers.split(",")
        for name, path in model_paths(args.models.split(",")).items():
            row = measure_creation(name, path, variants, args.repeat, clock)
            rows.append(row)
            shown = "  ".join(f"{k} {v:8.2f} ms" for k, v in row["ms"].items())
            ratios = "  ".join(f"{k} {v:.2f}" for k, v in row["ratio"].items())
            print(f"{name:24s} {shown}  ratio: {ratios}", flush=True)
            for label, spent in row["phases_ms"].items():
                print(f"    {label:18s} " + " ".join(f"{p}={spent[p]:.2g}" for p in PHASES),
                      flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
