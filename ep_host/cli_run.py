"""The ``ep-host run`` command: inputs from files or generated, repeated runs with latency
statistics and per-op totals, and the comparison with onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ep_host.cli import ProgressBar, load_model_and_host, pins_from, status


def _read_input(path: str) -> Any:
    import numpy as np

    from ep_host.errors import InputError

    try:
        if path.endswith(".pb"):
            import onnx
            from onnx import numpy_helper

            tensor = onnx.TensorProto()
            with open(path, "rb") as f:
                tensor.ParseFromString(f.read())
            return numpy_helper.to_array(tensor)
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read input file {path!r}: {exc}") from exc


def _generated_input(view: Any, rng: Any, dummy: bool) -> Any:
    import numpy as np

    from ep_host.errors import InputError

    if view.dtype is None or view.dtype.numpy is None or view.kind != "tensor":
        raise InputError(f"cannot generate input {view.name!r} of type {view.kind}({view.dtype})")
    shape = tuple(d if isinstance(d, int) else 1 for d in (view.shape or ()))
    dt = view.dtype.numpy
    if dummy:
        if view.dtype.name != "float32":
            raise InputError(f"--dummy-inputs makes float32 inputs only; {view.name!r} is "
                             f"{view.dtype.name}")
        n = int(np.prod(shape))
        return (np.arange(n).reshape(shape) / n).astype(np.float32)
    if dt.kind == "f":
        return rng.standard_normal(shape).astype(dt)
    if dt.kind in "iu":
        return rng.integers(0, 10, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    raise InputError(f"cannot generate input {view.name!r} of type {view.dtype.name}")


def cmd_run(args: argparse.Namespace) -> int:
    import numpy as np

    from ep_host.errors import InputError
    from ep_host.report import Output
    from ep_host.session import InferenceSession
    from ep_host.tracing import Tracer

    model, host = load_model_and_host(args)  # the session places the model itself, once
    tracer = (Tracer(Tracer.FULL if args.trace_bodies else 1)
              if (args.trace or args.per_op) else None)
    with status(f"placing {len(model.graph.nodes)} nodes and creating kernels"):
        session = InferenceSession(model, args.providers, host=host, strategy=args.strategy,
                                   pins=pins_from(args), exclude=args.exclude, trace=tracer,
                                   optimizations=(),  # _load optimized it already
                                   intra_op_num_threads=args.threads,
                                   device_graphs=args.device_graphs)
    for graph in session.device_graphs:
        state = "recorded" if graph.captured else f"not recorded: {graph.reason}"
        print(f"ep-host: device graph on {graph.provider} ({len(graph.nodes)} nodes): {state}",
              file=sys.stderr)
    feeds: dict[str, Any] = {}
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep:
            raise InputError(f"--input {item!r}: expected NAME=FILE")
        feeds[name] = _read_input(path)
    rng = np.random.default_rng(args.seed)
    for view in model.graph.inputs:
        if view.name in feeds:
            continue
        if not (args.random_inputs or args.dummy_inputs):
            raise InputError(f"input {view.name!r} is not given: pass --input "
                             f"{view.name}=FILE.npy, --random-inputs or --dummy-inputs")
        feeds[view.name] = _generated_input(view, rng, args.dummy_inputs)
    outputs = session.run(None, feeds)
    names = [o.name for o in session.get_outputs()]
    out = Output()
    rows = []
    for name, value in zip(names, outputs, strict=True):
        arr = np.asarray(value)
        stats = ""
        if arr.size and arr.dtype.kind in "fiub":
            mean = arr.astype(np.float64).mean()
            stats = f"min {arr.min():.6g} max {arr.max():.6g} mean {mean:.6g}"
        rows.append((name, arr.dtype, list(arr.shape), stats))
    out.table("Outputs", ["output", "dtype", "shape", "values"], rows)
    if args.repeat > 1:
        _repeat(out, session, feeds, args.repeat, tracer, args.per_op)
    if args.trace:
        tracer.write(args.trace)
        print(f"ep-host: trace written to {args.trace} (open it in https://ui.perfetto.dev)",
              file=sys.stderr)
    if args.output_dir:
        os.makedirs(args.output_dir, exist_ok=True)
        for name, value in zip(names, outputs, strict=True):
            safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
            np.save(os.path.join(args.output_dir, f"{safe}.npy"), np.asarray(value))
    if args.compare_onnxruntime:
        return _compare(out, model, feeds, names, outputs, args.rtol, args.atol)
    return 0


def _repeat(out: Any, session: Any, feeds: dict[str, Any], n: int, tracer: Any,
            per_op: bool) -> None:
    import time

    import numpy as np

    from ep_host.report import fmt_us

    start_event = len(tracer.events) if tracer is not None else 0
    times = []
    with ProgressBar(n, f"{n} runs") as bar:
        for _ in range(n):
            t0 = time.perf_counter()
            session.run(None, feeds)
            times.append((time.perf_counter() - t0) * 1e6)
            bar.advance("done")
    t = np.array(times)
    out.table(f"Latency over {n} runs (after one warm-up run)",
              ["median", "p90", "min", "max", "mean"],
              [[fmt_us(float(np.median(t))), fmt_us(float(np.percentile(t, 90))),
                fmt_us(float(t.min())), fmt_us(float(t.max())), fmt_us(float(t.mean()))]])
    if per_op and tracer is not None:
        totals: dict[tuple[str, str], list[float]] = {}
        for e in tracer.events[start_event:]:
            if e["cat"] != "node":
                continue
            key = (e["args"]["op_type"], e["args"]["provider"])
            entry = totals.setdefault(key, [0.0, 0])
            entry[0] += e["dur"]
            entry[1] += 1
        whole = sum(v[0] for v in totals.values()) or 1.0
        rows = sorted(totals.items(), key=lambda kv: -kv[1][0])
        out.table("Time per op type and provider (all runs)",
                  ["op", "provider", "calls", "total", "per call", "share"],
                  [(op, p, v[1], fmt_us(v[0]), fmt_us(v[0] / v[1]), f"{100 * v[0] / whole:.1f}%")
                   for (op, p), v in rows])


def _compare(out: Any, model: Any, feeds: dict[str, Any], names: list[str], ours: list[Any],
             rtol: float, atol: float) -> int:
    import numpy as np

    from ep_host.errors import HostError

    try:
        import onnxruntime
    except ImportError as exc:
        raise HostError("--compare-onnxruntime needs onnxruntime: pip install onnxruntime") from exc
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    source = model.path if model.path else model.proto.SerializeToString()
    try:
        ref = onnxruntime.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        theirs = ref.run(names, feeds)
    except Exception as exc:
        raise HostError(f"onnxruntime could not run {model.label}: {exc}") from exc
    rows, failed = [], 0
    for name, a, b in zip(names, ours, theirs, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            rows.append((name, "-", "-", f"MISMATCH: ep-host {a.dtype}{list(a.shape)}, "
                         f"onnxruntime {b.dtype}{list(b.shape)}"))
            failed += 1
            continue
        ok = np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.size else np.zeros(1)
        rel = diff / np.maximum(np.abs(b.astype(np.float64)), 1e-30) if a.size else diff
        rows.append((name, f"{diff.max():.3g}", f"{rel.max():.3g}", "ok" if ok else "MISMATCH"))
        failed += not ok
    out.table(f"Compared with onnxruntime {onnxruntime.__version__} (rtol {rtol}, atol {atol})",
              ["output", "max abs diff", "max rel diff", "verdict"], rows)
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# conformance
# ---------------------------------------------------------------------------------------------
