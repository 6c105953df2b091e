"""ep-host's CPU EP against onnxruntime on every model of the corpus (bench/corpus.py).

Per model, each measurement in its own fresh process: whether the outputs agree (same random
inputs, a tolerance per dtype), run latency (median of interleaved runs after untimed warm-up
runs, one thread both sides), session creation and peak RSS of creating a session and one run
(each runtime alone in its own process). Prints a markdown table and geometric means.

Session creation is the median of interleaved creations, after one session of each runtime was
created and run: at least ``--creation`` of each, more while under CREATION_S seconds in all,
the order alternating; before each, untimed, a full ``gc.collect()`` (neither runtime pays for
the garbage the other left) and a creation of the same runtime (the caches warm again).

    .venv/bin/python bench/models.py [--only bert_base,gpt2] [--skip tv_vgg11] [--repeat 10]
                                     [--warmup 10] [--creation 5] [--out bench/.corpus]
                                     [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
DEFAULT_OUT = BENCH / ".corpus"
RUNTIMES = ("ep-host", "onnxruntime")
# the largest |difference| allowed, relative to the largest |expected| value of the output
RELATIVE_TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3, "float64": 1e-7}
WARMUP_S = 3.0  # the untimed runs of both runtimes stop after this many seconds
TIMED_S, MAX_RUNS = 2.0, 400  # more timed runs of a fast model, up to these
CREATION_S, MAX_CREATIONS = 3.0, 40  # more timed creations of a fast model, up to these
ONE_THREAD = {var: "1" for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                   "NUMBA_NUM_THREADS")}


# ---------------------------------------------------------------- the measuring children

def model_and_feeds(name: str, out: Path) -> tuple[str, dict]:
    sys.path.insert(0, str(BENCH))
    import corpus

    entry = corpus.read_index(out)[name]
    return str(out / entry["path"]), corpus.random_feeds(entry["inputs"])


def make_session(runtime: str, path: str):
    """A session of `runtime` on one thread; returns the function that runs it on feeds."""
    if runtime == "onnxruntime":
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        session = onnxruntime.InferenceSession(path, options,
                                               providers=["CPUExecutionProvider"])
    else:
        from ep_host import InferenceSession

        session = InferenceSession(path, providers=["cpu"], intra_op_num_threads=1)
    return lambda feeds: session.run(None, feeds)


def import_runtime(runtime: str) -> None:
    """What a user's process has loaded before it creates a session."""
    modules = ["onnxruntime"] if runtime == "onnxruntime" else ["onnx", "ep_host.session"]
    for module in modules:
        importlib.import_module(module)


def peak_rss_bytes() -> int:
    """This process's peak RSS: VmHWM (``ru_maxrss`` survives exec, so a child of a big parent
    would report the parent's), or ``ru_maxrss`` where /proc is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def measure_memory(runtime: str, name: str, out: Path) -> dict[str, Any]:
    """Peak RSS of this process after creating a session of `runtime` and running it once, and
    the peak before (after the imports and the feeds)."""
    path, feeds = model_and_feeds(name, out)
    import_runtime(runtime)
    before = peak_rss_bytes()
    started = time.perf_counter()
    run = make_session(runtime, path)
    created = time.perf_counter()
    run(feeds)
    return {"runtime": runtime, "rss_before": before, "rss_peak": peak_rss_bytes(),
            "first_creation_s": created - started, "first_run_s": time.perf_counter() - created}


def outputs_agree(expected: list, got: list) -> tuple[bool, str, float]:
    """Whether ep-host's outputs match onnxruntime's: same shapes and dtypes; floats within
    RELATIVE_TOLERANCE[dtype] of the output's largest magnitude, everything else exactly.
    Returns (agree, the first disagreement or "", the worst relative error of the floats)."""
    import numpy as np

    if len(expected) != len(got):
        return False, f"{len(got)} outputs, onnxruntime gives {len(expected)}", math.nan
    worst = 0.0
    for index, (want, have) in enumerate(zip(expected, got, strict=True)):
        want, have = np.asarray(want), np.asarray(have)
        where = f"output {index}"
        if want.shape != have.shape:
            return False, f"{where}: shape {have.shape}, onnxruntime gives {want.shape}", worst
        if want.dtype != have.dtype:
            return False, f"{where}: dtype {have.dtype}, onnxruntime gives {want.dtype}", worst
        tolerance = RELATIVE_TOLERANCE.get(want.dtype.name)
        if tolerance is None:
            if not np.array_equal(want, have):
                return False, f"{where}: {want.dtype} values differ", worst
            continue
        if want.size == 0:
            continue
        want64, have64 = want.astype(np.float64), have.astype(np.float64)
        if not np.array_equal(np.isnan(want64), np.isnan(have64)):
            return False, f"{where}: NaN in different places", worst
        finite = ~np.isnan(want64)
        scale = max(float(np.max(np.abs(want64[finite]), initial=0.0)), 1e-6)
        error = float(np.max(np.abs(want64[finite] - have64[finite]), initial=0.0)) / scale
        worst = max(worst, error)
        if error > tolerance:
            return False, f"{where}: relative error {error:.2e} > {tolerance:g}", worst
    return True, "", worst


def measure_creation(path: str, creations: int) -> dict[str, list[float]]:
    """Session creation times of both runtimes: at least ``creations`` each, more while under
    CREATION_S in all (up to MAX_CREATIONS), the order alternating (ep-host first, then
    onnxruntime first). Before each timed creation, untimed: a full collection (the other
    runtime's garbage is not charged to this one) and a creation of the same runtime, deleted
    (the collection empties the CPU caches: a small model's creation took 2-3x longer right
    after one)."""
    created: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    begun = time.perf_counter()
    i = 0
    while i < creations or (i < MAX_CREATIONS and time.perf_counter() - begun < CREATION_S):
        for runtime in RUNTIMES[::-1] if i % 2 else RUNTIMES:
            gc.collect()
            make_session(runtime, path)
            started = time.perf_counter()
            made = make_session(runtime, path)
            created[runtime].append(time.perf_counter() - started)
            del made
        i += 1
    gc.collect()
    return created


def measure_speed(name: str, out: Path, repeat: int, creations: int,
                  warmup: int = 10) -> dict[str, Any]:
    """Correctness, then creation and run latency of both runtimes, alternating."""
    path, feeds = model_and_feeds(name, out)
    result: dict[str, Any] = {}
    runs = {}
    for runtime in RUNTIMES:
        import_runtime(runtime)
        try:
            runs[runtime] = make_session(runtime, path)
            outputs = runs[runtime](feeds)
        except Exception as exc:  # a runtime that cannot take the model: say which and why
            result["error"] = f"{runtime}: {type(exc).__name__}: {first_line(exc)}"
            return result
        result.setdefault("outputs", {})[runtime] = outputs
    agree, why, worst = outputs_agree(result["outputs"]["onnxruntime"],
                                      result.pop("outputs")["ep-host"])
    result |= {"correct": agree, "mismatch": why, "rel_err": worst}
    created = measure_creation(path, creations) if creations else {}
    # untimed runs first: Python specializes a function's bytecode only after it ran a few
    # times (3.11's adaptive interpreter), so ep-host's first runs of a session are slower
    # (skl_logistic_regression: the median of 10 runs 2.9x onnxruntime right after creation,
    # 2.0x of 100); at most WARMUP_RUNS each or WARMUP_S in all
    started = time.perf_counter()
    for _ in range(warmup):
        if time.perf_counter() - started > WARMUP_S:
            break
        for runtime in RUNTIMES:
            runs[runtime](feeds)
    # at least ``repeat`` timed runs each, more while under TIMED_S in all (up to MAX_RUNS):
    # a model run in microseconds gets enough runs for a steady median
    times: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    begun = time.perf_counter()
    i = 0
    while i < repeat or (i < MAX_RUNS and time.perf_counter() - begun < TIMED_S):
        i += 1
        for runtime in RUNTIMES[::-1] if i % 2 else RUNTIMES:
            started = time.perf_counter()
            runs[runtime](feeds)
            times[runtime].append(time.perf_counter() - started)
    result["run_s"] = {r: statistics.median(v) for r, v in times.items()}
    if creations:
        result["creation_s"] = {r: statistics.median(v) for r, v in created.items()}
    return result


# ---------------------------------------------------------------- the parent

def first_line(exc: BaseException | str) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:200]


def child(args: list[str], timeout: int) -> dict[str, Any]:
    """Run this script's `args` in a fresh process (one thread for BLAS); its last stdout line
    is the JSON result. A crash, a kill (out of memory) or the time limit becomes an error."""
    env = os.environ | ONE_THREAD
    try:
        done = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout} s"}
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return json.loads(lines[-1])
    if done.returncode < 0:
        return {"error": f"killed by signal {-done.returncode}"
                + (" (out of memory?)" if done.returncode == -9 else "")}
    tail = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
    return {"error": f"crashed: {tail[:200]}"}


def measure_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    common = ["--out", str(args.out)]
    row: dict[str, Any] = {"model": name}
    speed = child(["_speed", name, "--repeat", str(args.repeat), "--creation",
                   str(args.creation), "--warmup", str(args.warmup), *common], args.timeout)
    row |= speed
    if "run_s" in speed:
        row["latency_ratio"] = speed["run_s"]["ep-host"] / speed["run_s"]["onnxruntime"]
    if "creation_s" in speed:
        row["creation_ratio"] = (speed["creation_s"]["ep-host"]
                                 / speed["creation_s"]["onnxruntime"])
    if args.memory:
        memory = {r: child(["_memory", name, "--runtime", r, *common], args.timeout)
                  for r in RUNTIMES}
        row["memory"] = memory
        if all("rss_peak" in m for m in memory.values()):
            row["memory_ratio"] = (memory["ep-host"]["rss_peak"]
                                   / memory["onnxruntime"]["rss_peak"])
            added = {r: m["rss_peak"] - m["rss_before"] for r, m in memory.items()}
            row["memory_added_ratio"] = added["ep-host"] / max(added["onnxruntime"], 1)
    return row


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else math.nan


RATIOS = ("latency_ratio", "creation_ratio", "memory_ratio", "memory_added_ratio")


def status(row: dict[str, Any]) -> str:
    if "error" in row:
        return row["error"]
    if row.get("correct"):
        return "match"
    return f"WRONG: {row.get('mismatch')}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ["model", "ep-host ms", "onnxruntime ms", "latency", "creation", "peak RSS MB "
            "(ep-host / ort)", "peak RSS", "added RSS", "outputs"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        run = row.get("run_s", {})
        memory = row.get("memory", {})
        peaks = [f"{memory[r]['rss_peak'] / 2**20:.0f}" if "rss_peak" in memory.get(r, {})
                 else memory.get(r, {}).get("error", "-") for r in RUNTIMES]
        cells = [row["model"]]
        cells += [f"{run[r] * 1e3:.2f}" if r in run else "-" for r in RUNTIMES]
        cells += [f"{row[k]:.2f}" if k in row else "-" for k in RATIOS[:2]]
        cells.append(" / ".join(peaks) if memory else "-")
        cells += [f"{row[k]:.2f}" if k in row else "-" for k in RATIOS[2:]]
        cells.append(status(row))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometric means of each ratio over the models that ran and matched."""
    good = [r for r in rows if r.get("correct")]
    result: dict[str, Any] = {"models": len(rows), "matched": len(good),
                              "wrong": sum(r.get("correct") is False for r in rows),
                              "failed": sum("error" in r for r in rows)}
    for key in RATIOS:
        values = [r[key] for r in good if key in r]
        if values:
            result[key] = {"geomean": geomean(values), "max": max(values), "n": len(values),
                           "worst": max(good, key=lambda r: r.get(key, 0))["model"]}
    return result


def chosen_models(args: argparse.Namespace) -> list[str]:
    sys.path.insert(0, str(BENCH))
    import corpus

    index = corpus.read_index(Path(args.out))
    if not index:
        raise SystemExit(f"no corpus in {args.out}: build it with bench/corpus.py build")
    only = set(args.only.split(",")) if args.only else None
    skip = set(args.skip.split(",")) if args.skip else set()
    unknown = ((only or set()) | skip) - set(index)
    if unknown:
        raise SystemExit(f"not in {Path(args.out) / corpus.INDEX}: {', '.join(sorted(unknown))}")
    return [n for n in index if (only is None or n in only) and n not in skip]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="?", default="report",
                        choices=["report", "_speed", "_memory"])
    parser.add_argument("name", nargs="?", help="the model (_speed and _memory only)")
    parser.add_argument("--only", help="comma-separated models to measure (default: all)")
    parser.add_argument("--skip", help="comma-separated models to leave out")
    parser.add_argument("--repeat", type=int, default=10,
                        help=f"timed runs of each runtime at least (more, up to {MAX_RUNS}, "
                             f"while under {TIMED_S:g} s in all)")
    parser.add_argument("--warmup", type=int, default=10,
                        help=f"untimed runs of each runtime before the timed ones (at most "
                             f"{WARMUP_S:g} s in all; 0: none)")
    # five: with three, one full run gave BERT-base, DistilBERT, ConvNeXt and DeepLabV3 2.1-2.8x
    # onnxruntime's creation where reruns of them gave 0.5-0.7x
    parser.add_argument("--creation", type=int, default=5,
                        help=f"timed session creations of each runtime at least (more, up to "
                             f"{MAX_CREATIONS}, while under {CREATION_S:g} s in all; 0: skip)")
    parser.add_argument("--no-memory", dest="memory", action="store_false",
                        help="skip the peak-RSS processes")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the corpus folder")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per child process")
    parser.add_argument("--runtime", choices=RUNTIMES, help=argparse.SUPPRESS)
    parser.add_argument("--json", help="write every row and the geometric means here")
    args = parser.parse_args()
    if args.command == "_speed":
        print(json.dumps(measure_speed(args.name, args.out, args.repeat, args.creation,
                                       args.warmup)))
        return
    if args.command == "_memory":
        print(json.dumps(measure_memory(args.runtime, args.name, args.out)))
        return
    rows = []
    for name in chosen_models(args):
        row = measure_model(name, args)
        rows.append(row)
        print(f"{name:34} latency {row.get('latency_ratio', math.nan):5.2f}  creation "
              f"{row.get('creation_ratio', math.nan):5.2f}  peak RSS "
              f"{row.get('memory_ratio', math.nan):5.2f}  {status(row)}", flush=True)
    print()
    print(table(rows))
    print()
    means = summary(rows)
    print(f"{means['matched']}/{means['models']} match onnxruntime, {means['wrong']} wrong, "
          f"{means['failed']} failed")
    for key in RATIOS:
        if key in means:
            m = means[key]
            print(f"{key.replace('_', ' ')}: geometric mean {m['geomean']:.2f}, max {m['max']:.2f} "
                  f"({m['worst']}) over {m['n']} models")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": means}, indent=1))


if __name__ == "__main__":
    main()
