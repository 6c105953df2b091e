"""The ``ep-host run`` command: inputs from files or generated, repeated runs with latency
statistics and per-op totals, and the comparison with onnxruntime.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ep_host.cli import load_model_and_host, pins_from, say, status
from ep_host.cli_measure import ProgressBar
from ep_host.errors import describe_exception


def _read_input(name: str, path: str) -> Any:
    """The array in ``path`` (a .npy file, or a TensorProto .pb file) for ``--input NAME=PATH``."""
    import numpy as np

    from ep_host.errors import InputError

    label = f"--input {name}={path}"
    if path.endswith(".pb"):
        return _read_tensor_proto(path, label)
    try:
        value = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"{label}: cannot read the file: {describe_exception(exc)}") from exc
    if not isinstance(value, np.ndarray):
        value.close()
        raise InputError(f"{label}: the file holds several arrays (.npz); save one array "
                         "with numpy.save")
    return value


def _read_tensor_proto(path: str, label: str) -> Any:
    """A TensorProto file's array. External data must lie in that file's own folder (never the
    current directory): the model's path checks apply, with that folder as the base."""
    from google.protobuf.message import DecodeError
    from onnx import TensorProto, numpy_helper

    from ep_host.errors import InputError, ModelLoadError
    from ep_host.external_data import read_external_tensor

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InputError(f"{label}: cannot read the file: {describe_exception(exc)}") from exc
    tensor = TensorProto()
    try:
        tensor.ParseFromString(data)
    except DecodeError as exc:
        raise InputError(f"{label}: not a TensorProto file ({exc})") from None
    if tensor.data_type == TensorProto.UNDEFINED:
        raise InputError(f"{label}: not a TensorProto file (it has no element type; "
                         "a model or another message?)")
    try:
        if tensor.data_location == TensorProto.EXTERNAL or len(tensor.external_data):
            folder = os.path.dirname(os.path.abspath(path))
            try:
                return read_external_tensor(tensor, folder, label)
            except ModelLoadError as exc:  # the model's checks, worded for an input file
                raise InputError(str(exc).replace("the model's folder", "the input file's "
                                                  "folder")) from None
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError, KeyError, OverflowError, MemoryError) as exc:
        raise InputError(f"{label}: the TensorProto's data does not match its type and "
                         f"shape: {describe_exception(exc)}") from None


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

    from ep_host.errors import HostError, InputError
    from ep_host.report import Output
    from ep_host.session import InferenceSession, trace_process_label
    from ep_host.tracing import Tracer

    model, host = load_model_and_host(args)  # the session places the model itself, once
    printed = set(model.warnings)
    tracer = (Tracer(Tracer.FULL if args.trace_bodies else 1,
                     process_name=f"ep-host: {trace_process_label(model)}")
              if (args.trace or args.per_op) else None)
    with status(f"placing {len(model.graph.nodes)} nodes and creating kernels"):
        session = InferenceSession(model, providers=args.providers, host=host,
                                   strategy=args.strategy,
                                   pins=pins_from(args), exclude=args.exclude, trace=tracer,
                                   optimizations=(),  # _load optimized it already
                                   intra_op_num_threads=args.threads,
                                   device_graphs=args.device_graphs)
    for graph in session.device_graphs:
        state = "recorded" if graph.captured else f"not recorded: {graph.reason}"
        say(f"device graph on {graph.provider} ({len(graph.nodes)} nodes): {state}")
    feeds: dict[str, Any] = {}
    for item in args.input:
        name, sep, path = item.partition("=")
        if not sep:
            raise InputError(f"--input {item!r}: expected NAME=FILE")
        feeds[name] = _read_input(name, path)
    rng = np.random.default_rng(args.seed)
    for view in model.graph.inputs:
        if view.name in feeds:
            continue
        if not (args.random_inputs or args.dummy_inputs):
            raise InputError(f"input {view.name!r} is not given: pass --input "
                             f"{view.name}=FILE.npy, --random-inputs or --dummy-inputs")
        feeds[view.name] = _generated_input(view, rng, args.dummy_inputs)
    outputs = session.run(None, feeds)
    for warning in session.model.warnings:  # kernels that moved, providers lost in the run
        if warning not in printed:
            say(f"warning: {warning}")
    for record in host.records.values():  # isolated providers lost before any kernel ran
        lost = getattr(record.remote, "lost", None)
        if lost is not None and not any(str(lost) in w for w in session.model.warnings):
            say(f"warning: {lost}; its nodes were placed on other providers")
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
        try:
            tracer.write(args.trace)
        except OSError as exc:
            raise HostError(f"--trace {args.trace}: cannot write the trace: "
                            f"{describe_exception(exc)}") from None
        say(f"trace written to {args.trace} (open it in https://ui.perfetto.dev)")
    if args.output_dir:
        _save_outputs(args.output_dir, names, outputs)
    if args.compare_onnxruntime:
        return _compare(out, model, feeds, names, outputs, args.rtol, args.atol)
    return 0


def output_file_name(name: str, taken: set[str]) -> str:
    """``NAME.npy`` for an output, with every character but letters, digits, ``-``, ``_`` and
    ``.`` replaced by ``_``; a name that collides with one already taken gets ``_2``, ``_3``..."""
    safe = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in name)
    safe = safe.lstrip(".") or "_"
    candidate, n = safe, 1
    while f"{candidate}.npy".lower() in taken:
        n += 1
        candidate = f"{safe}_{n}"
    taken.add(f"{candidate}.npy".lower())
    return f"{candidate}.npy"


def _save_outputs(folder: str, names: list[str], outputs: list[Any]) -> None:
    """Each output as ``folder/NAME.npy`` (the folder is made when missing)."""
    import numpy as np

    from ep_host.errors import HostError

    try:
        os.makedirs(folder, exist_ok=True)
        taken: set[str] = set()
        for name, value in zip(names, outputs, strict=True):
            file_name = output_file_name(name, taken)
            if file_name != f"{name}.npy":
                say(f"output {name!r} saved as {file_name}")
            np.save(os.path.join(folder, file_name), np.asarray(value))
    except (OSError, ValueError) as exc:
        raise HostError(f"--output-dir {folder}: cannot save the outputs there: "
                        f"{describe_exception(exc)}") from None


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
    """Run onnxruntime's CPU provider in a child process and compare every output; a crash of
    onnxruntime (a signal) fails the comparison, named, after ep-host's own outputs."""
    import importlib.util

    import numpy as np

    from ep_host.errors import HostError

    if importlib.util.find_spec("onnxruntime") is None:
        raise HostError("--compare-onnxruntime needs onnxruntime: pip install onnxruntime")
    answer, failure = _onnxruntime_in_child(model, feeds, names)
    if answer is None:
        say(f"error: --compare-onnxruntime: {failure}; ep-host's outputs above are not compared")
        return 1
    version, theirs = answer
    rows, failed = [], 0
    for name, a, b in zip(names, ours, theirs, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape or a.dtype != b.dtype:
            rows.append((name, "-", "-", f"MISMATCH: ep-host {a.dtype}{list(a.shape)}, "
                         f"onnxruntime {b.dtype}{list(b.shape)}"))
            failed += 1
            continue
        if a.dtype.kind not in "biufc":
            ok = bool(np.array_equal(a, b))
            rows.append((name, "-", "-", "ok" if ok else "MISMATCH"))
            failed += not ok
            continue
        ok = np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64)) if a.size else np.zeros(1)
        rel = diff / np.maximum(np.abs(b.astype(np.float64)), 1e-30) if a.size else diff
        rows.append((name, f"{diff.max():.3g}", f"{rel.max():.3g}", "ok" if ok else "MISMATCH"))
        failed += not ok
    out.table(f"Compared with onnxruntime {version} (rtol {rtol}, atol {atol})",
              ["output", "max abs diff", "max rel diff", "verdict"], rows)
    return 1 if failed else 0


def _onnxruntime_in_child(model: Any, feeds: dict[str, Any],
                          names: list[str]) -> tuple[tuple[str, list[Any]] | None, str]:
    """``((version, outputs), "")`` from onnxruntime run in a spawned process on the model's
    file (the serialized model in a temporary folder when it has none), or ``(None, why)``."""
    import multiprocessing
    import signal
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ep-host-compare-") as folder:
        source = model.path
        if not source:
            source = os.path.join(folder, "model.onnx")
            with open(source, "wb") as f:
                f.write(model.proto.SerializeToString())
        context = multiprocessing.get_context("spawn")
        receiver, sender = context.Pipe(duplex=False)
        child = context.Process(target=onnxruntime_child, args=(source, feeds, names, sender),
                                name="ep-host onnxruntime comparison", daemon=True)
        child.start()
        sender.close()
        try:
            answer = receiver.recv()
        except EOFError:
            answer = None
        finally:
            receiver.close()
            child.join()
    if answer is None:
        code = child.exitcode
        if code is not None and code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            return None, f"onnxruntime crashed running {model.label} (killed by {sig})"
        return None, f"onnxruntime's process ended with exit code {code} and no result"
    if answer[0] != "ok":
        return None, f"onnxruntime could not run {model.label}: {answer[1]}"
    return (answer[1], answer[2]), ""


def onnxruntime_child(source: str, feeds: dict[str, Any], names: list[str], sender: Any) -> None:
    """In the child process: onnxruntime's CPU provider runs the model once; sends
    ``("ok", version, outputs)`` or ``("error", text)``."""
    import numpy as np

    try:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.log_severity_level = 3  # errors only: its own warnings are not ep-host's output
        session = onnxruntime.InferenceSession(source, options,
                                               providers=["CPUExecutionProvider"])
        outputs = [np.asarray(x) for x in session.run(names, feeds)]
        sender.send(("ok", onnxruntime.__version__, outputs))
    except Exception as exc:  # onnxruntime's errors have many types; the parent reports them
        sender.send(("error", str(exc).strip() or type(exc).__name__))
    finally:
        sender.close()


# ---------------------------------------------------------------------------------------------
# conformance
# ---------------------------------------------------------------------------------------------
