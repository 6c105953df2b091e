"""Run onnx's node conformance cases on a provider, each case isolated in a worker process.

Each case ends as ``pass``, ``declined`` (a provider declined a node; the reason says what is
missing), ``wrong`` (an output differs from the expected one) or ``error`` (anything else,
including a crash or a timeout of its worker). Workers are restarted after a crash or hang.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import re
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np

OUTCOMES = ("pass", "declined", "wrong", "error")
STARTUP_S = 300.0  # a fresh worker imports onnx and ep-host first


@dataclass
class CaseResult:
    name: str
    op: str
    outcome: str
    reason: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@cache
def all_cases() -> dict[str, Any]:
    """onnx's node cases by name: read from ep-host's cache folder, where the first collection
    for this onnx and numpy wrote them (collecting runs every case's generator: 10 s here;
    reading the 10 MB back 0.05 s)."""
    path = cases_cache_path()
    cases = _read_cases(path)
    if cases is None:
        cases = _collect_cases()
        _write_cases(path, cases)
    return cases


def cases_cache_path() -> Path:
    import onnx

    from ep_host.calibration import cache_dir

    ml = "ml" if onnx.ONNX_ML else "noml"  # whether onnx collects the ai.onnx.ml cases
    return cache_dir() / (f"conformance-cases-onnx{onnx.__version__}-numpy{np.__version__}-"
                          f"{ml}-py{sys.version_info[0]}.{sys.version_info[1]}.pickle")


def _collect_cases() -> dict[str, Any]:
    import warnings

    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's case generators warn on purpose (overflow...)
        with np.errstate(all="ignore"):
            return {c.name: c for c in collect_testcases()}


def _read_cases(path: Path) -> dict[str, Any] | None:
    """The cases a collection wrote to ``path``; ``None`` when absent or unreadable (then they
    are collected again and the file rewritten)."""
    try:
        with open(path, "rb") as f:
            cases = pickle.load(f)  # noqa: S301 (our own file, in the user's own cache folder)
    except Exception:  # noqa: BLE001 (absent, cut short, another version's classes)
        return None
    if not isinstance(cases, dict) or not cases or not all(
            getattr(c, "name", None) == n for n, c in cases.items()):
        return None
    return cases


def _write_cases(path: Path, cases: dict[str, Any]) -> None:
    """Write the cases for the next process; a folder that cannot be written is no error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            pickle.dump(cases, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, path)  # whole or not at all, for a process reading it meanwhile
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)


@cache
def _op_names() -> list[str]:
    import onnx

    names = {s.name for s in onnx.defs.get_all_schemas_with_history()}
    return sorted(names, key=len, reverse=True)


def op_of(case: Any) -> str:
    """The op a case tests: its single node's op, else the op its name starts with."""
    nodes = case.model.graph.node
    if len(nodes) == 1:
        return nodes[0].op_type
    stem = case.name.removeprefix("test_").replace("_", "").lower()
    for name in _op_names():
        if stem.startswith(name.lower()):
            return name
    return nodes[0].op_type if nodes else "?"


# ---------------------------------------------------------------------------------------------
# Comparing outputs
# ---------------------------------------------------------------------------------------------


def _comparable(a: np.ndarray) -> np.ndarray:
    """Types numpy cannot compare with a tolerance (ml_dtypes floats, 4-bit ints) as wider
    native ones; the values are exactly representable there."""
    if a.dtype.kind == "V" or a.dtype.type.__module__.startswith("ml_dtypes"):
        return a.astype(np.float32)
    return a


def mismatch(expected: Any, actual: Any, rtol: float, atol: float, where: str = "output") -> str:
    """Why ``actual`` differs from ``expected``, or ``""`` when they agree."""
    if isinstance(expected, list | tuple):
        if not isinstance(actual, list | tuple):
            return f"{where}: expected a sequence, got {type(actual).__name__}"
        if len(actual) != len(expected):
            return f"{where}: expected {len(expected)} elements, got {len(actual)}"
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            why = mismatch(e, a, rtol, atol, f"{where}[{i}]")
            if why:
                return why
        return ""
    if expected is None:
        return "" if actual is None else f"{where}: expected None (empty optional)"
    if actual is None:
        return f"{where}: expected a value, got None"
    expected = np.asarray(expected)
    if isinstance(actual, list | tuple):
        return f"{where}: expected a tensor, got a sequence"
    actual = np.asarray(actual)
    if actual.shape != expected.shape:
        return f"{where}: shape {actual.shape}, expected {expected.shape}"
    if expected.dtype == object or expected.dtype.kind in "US":
        if not np.array_equal(actual.astype(object), expected.astype(object)):
            return f"{where}: strings differ"
        return ""
    if actual.dtype != expected.dtype:
        return f"{where}: dtype {actual.dtype}, expected {expected.dtype}"
    if expected.dtype.name == "bfloat16":
        rtol = max(rtol, 2**-6)
    e, a = _comparable(expected), _comparable(actual)
    if e.dtype.kind in "biu":
        if not np.array_equal(a, e):
            bad = int(np.sum(a != e))
            return f"{where}: {bad} of {e.size} values differ"
        return ""
    if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
        with np.errstate(all="ignore"):
            diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
            diff = np.where(np.isnan(diff), np.inf, diff)
        return (f"{where}: max abs difference {float(np.max(diff)):.3g} "
                f"(rtol {rtol:g}, atol {atol:g})")
    return ""


# ---------------------------------------------------------------------------------------------
# One case
# ---------------------------------------------------------------------------------------------


def _declined_reason(message: str) -> str:
    lines = [line.strip() for line in message.splitlines()[1:] if line.strip()]
    return "; ".join(lines) or message


def run_case(case: Any, providers: Sequence[str]) -> CaseResult:
    """Run one case in this process."""
    from ep_host.backend import EpHostBackend, to_value
    from ep_host.errors import PlacementError

    op = op_of(case)
    start = time.perf_counter()
    try:
        with np.errstate(all="ignore"):
            rep = EpHostBackend.prepare(case.model, providers=list(providers))
            for inputs, expected in case.data_sets:
                outputs = rep.run(list(inputs))
                expected = [to_value(x) for x in expected]
                if len(outputs) != len(expected):
                    why = f"{len(outputs)} outputs, expected {len(expected)}"
                else:
                    why = ""
                    for i, (e, a) in enumerate(zip(expected, outputs, strict=True)):
                        why = mismatch(e, a, case.rtol, case.atol, f"output {i}")
                        if why:
                            break
                if why:
                    return CaseResult(case.name, op, "wrong", why, time.perf_counter() - start)
    except PlacementError as exc:
        return CaseResult(case.name, op, "declined", _declined_reason(str(exc)),
                          time.perf_counter() - start)
    except Exception as exc:
        text = str(exc).strip().splitlines()
        message = f"{type(exc).__name__}: {text[0] if text else ''}"
        if os.environ.get("EP_HOST_DEBUG"):
            message += "\n" + traceback.format_exc()
        return CaseResult(case.name, op, "error", message, time.perf_counter() - start)
    return CaseResult(case.name, op, "pass", "", time.perf_counter() - start)


# ---------------------------------------------------------------------------------------------
# Isolated workers
# ---------------------------------------------------------------------------------------------


def _worker(conn: Connection, providers: list[str]) -> None:
    """Run the cases the parent sends, each with its model and data (collecting the cases
    again here took 10 s of every worker's start, and of every restart after a crash)."""
    import ep_host.backend  # noqa: F401 (imported before the parent's clock starts a case)

    conn.send({"ready": True})
    while True:
        try:
            case = conn.recv()
        except EOFError:
            return
        if case is None:
            return
        conn.send(run_case(case, providers).to_dict())


class _Worker:
    def __init__(self, ctx: Any, providers: list[str]):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, providers), daemon=True)
        self.process.start()
        child.close()
        self.case: str | None = None
        self.started = 0.0
        self.ready = False

    def give(self, name: str) -> None:
        self.case = name
        self.started = time.monotonic()
        self.conn.send(all_cases()[name])

    def kill(self) -> None:
        self.process.kill()
        self.process.join(5)
        self.conn.close()


def select_cases(ops: Iterable[str] = (), pattern: str | None = None) -> list[str]:
    cases = all_cases()
    wanted = {o.lower() for o in ops}
    names = []
    for name, case in cases.items():
        if wanted and op_of(case).lower() not in wanted:
            continue
        if pattern and not re.search(pattern, name):
            continue
        names.append(name)
    return names


def run_cases(
    names: Sequence[str],
    providers: Sequence[str],
    *,
    jobs: int | None = None,
    timeout: float = 60.0,
    on_result: Callable[[CaseResult], None] | None = None,
) -> list[CaseResult]:
    """Run ``names`` in ``jobs`` worker processes; a case that crashes its worker or runs past
    ``timeout`` seconds is an ``error`` and the worker is replaced."""
    ctx = multiprocessing.get_context("spawn")
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(names) or 1))
    pending = list(reversed(names))
    results: list[CaseResult] = []
    cases = all_cases()
    workers = [_Worker(ctx, list(providers)) for _ in range(jobs)]

    def record(result: CaseResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    def feed(w: _Worker) -> None:
        if pending:
            w.give(pending.pop())
        else:
            w.case = None

    try:
        for w in workers:
            feed(w)
        while any(w.case is not None for w in workers):
            busy = [w for w in workers if w.case is not None]
            ready = wait([w.conn for w in busy], timeout=1.0)
            for i, w in enumerate(workers):
                if w.case is None:
                    continue
                name = w.case
                if w.conn in ready:
                    try:
                        data = w.conn.recv()
                    except (EOFError, OSError):
                        w.process.join(5)  # reap it, so its exit code is known
                        code = w.process.exitcode
                        w.kill()
                        record(CaseResult(name, op_of(cases[name]), "error",
                                          f"worker crashed (exit code {code})"))
                        workers[i] = w = _Worker(ctx, list(providers))
                        feed(w)
                        continue
                    if data.get("ready"):
                        w.ready = True
                        w.started = time.monotonic()  # the queued case starts now
                        continue
                    record(CaseResult(**data))
                    feed(w)
                elif time.monotonic() - w.started > (timeout if w.ready else STARTUP_S):
                    w.kill()
                    record(CaseResult(name, op_of(cases[name]), "error",
                                      f"timed out after {timeout:g} s"))
                    workers[i] = w = _Worker(ctx, list(providers))
                    feed(w)
    finally:
        for w in workers:
            try:
                w.conn.send(None)
            except (OSError, ValueError):
                pass
            w.process.join(2)
            if w.process.is_alive():
                w.kill()
    order = {n: i for i, n in enumerate(names)}
    results.sort(key=lambda r: order.get(r.name, 0))
    return results


def summarize(results: Sequence[CaseResult]) -> dict[str, Any]:
    by_outcome = Counter(r.outcome for r in results)
    by_op: dict[str, Counter] = {}
    for r in results:
        by_op.setdefault(r.op, Counter())[r.outcome] += 1
    return {
        "cases": len(results),
        "outcomes": {o: by_outcome.get(o, 0) for o in OUTCOMES},
        "by_op": {op: {o: c.get(o, 0) for o in OUTCOMES} for op, c in sorted(by_op.items())},
    }
