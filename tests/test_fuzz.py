"""Fuzzing: mutated models end in a result or a HostError, never another exception, a crash or
a hang. A short run in process by default; the long run (``-m slow``) runs chunks of cases in
subprocesses, so a crash is caught and pinned to its case.

Run by hand: ``python tests/test_fuzz.py START COUNT`` prints one JSON line per failing case and
a summary line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
CASE_SECONDS = 20  # a case running longer is a hang
MAX_INPUT_ELEMENTS = 1 << 20
MAX_TENSOR_BYTES = 256 << 20


# -- seed models --------------------------------------------------------------------------------


def _small_models() -> list[onnx.ModelProto]:
    f = TensorProto.FLOAT

    def model(nodes, inputs, outputs, inits=(), opset=17):
        g = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info(*i) for i in inputs],
                              [helper.make_tensor_value_info(*o) for o in outputs],
                              initializer=list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 10
        return m

    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4) / 7, "w")
    shape = numpy_helper.from_array(np.array([4, 3], np.int64), "shape")
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", f, [2, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", f, [2, 3])])
    return [
        model([helper.make_node("Add", ["x", "y"], ["s"], name="add"),
               helper.make_node("Relu", ["s"], ["out"], name="relu")],
              [("x", f, [2, 3]), ("y", f, [2, 3])], [("out", f, [2, 3])]),
        model([helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
               helper.make_node("Reshape", ["m", "shape"], ["r"], name="reshape"),
               helper.make_node("Softmax", ["r"], ["out"], name="softmax", axis=1)],
              [("x", f, ["n", 3])], [("out", f, None)], [w, shape]),
        model([helper.make_node("Conv", ["x", "k"], ["c"], name="conv", pads=[1, 1, 1, 1],
                                strides=[1, 1]),
               helper.make_node("MaxPool", ["c"], ["p"], name="pool", kernel_shape=[2, 2]),
               helper.make_node("Cast", ["p"], ["out"], name="cast", to=TensorProto.INT32)],
              [("x", f, [1, 2, 4, 4])], [("out", TensorProto.INT32, None)],
              [numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "k")]),
        model([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then,
                                else_branch=other)],
              [("x", f, [2, 3]), ("c", TensorProto.BOOL, [])], [("y", f, [2, 3])]),
        model([helper.make_node("Shape", ["x"], ["s"], name="shape"),
               helper.make_node("Gather", ["s", "i"], ["g"], name="gather", axis=0),
               helper.make_node("Expand", ["x", "s"], ["e"], name="expand"),
               helper.make_node("ReduceSum", ["e", "g"], ["out"], name="sum", keepdims=1)],
              [("x", f, ["a", "b"])], [("out", f, None)],
              [numpy_helper.from_array(np.array([0], np.int64), "i")], opset=18),
    ]


def seed_models() -> list[bytes]:
    seeds = [m.SerializeToString() for m in _small_models()]
    for name in ("cnn.onnx", "custom_op.onnx", "transformer_block.onnx"):
        path = ROOT / "examples" / name
        if path.exists():
            seeds.append(path.read_bytes())
    return seeds


# -- mutations ------------------------------------------------------------------------------------


def _mutate_bytes(rng: np.random.Generator, data: bytes) -> bytes:
    buf = bytearray(data)
    kind = rng.integers(3)
    if kind == 0:  # flip a few bytes
        for _ in range(int(rng.integers(1, 6))):
            buf[int(rng.integers(len(buf)))] = int(rng.integers(256))
    elif kind == 1:
        del buf[int(rng.integers(len(buf))):]
    else:
        at = int(rng.integers(len(buf) + 1))
        buf[at:at] = rng.integers(0, 256, int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
    return bytes(buf)


_OPS = ["Relu", "Add", "MatMul", "Reshape", "Concat", "Gather", "Transpose", "Slice", "Cast",
        "Conv", "Identity", "Frobnicate", "If", "Loop", "Split", "TopK", "Expand"]
_DIMS = [0, 1, 2, 3, -1, 7, 2**31, 2**40]


def _mutate_graph(rng: np.random.Generator, data: bytes) -> bytes:
    m = onnx.ModelProto.FromString(data)
    g = m.graph
    nodes = list(g.node)
    choice = int(rng.integers(8))
    if choice == 0 and nodes:
        del g.node[int(rng.integers(len(nodes)))]
    elif choice == 1 and nodes:
        n = g.node[int(rng.integers(len(nodes)))]
        if n.input:
            n.input[int(rng.integers(len(n.input)))] = "dangling_" + str(rng.integers(99))
    elif choice == 2:
        attrs = [a for n in g.node for a in n.attribute]
        if attrs:
            a = attrs[int(rng.integers(len(attrs)))]
            if rng.integers(2) == 0:  # change the value
                if a.type == AttributeProto.INT:
                    a.i = int(rng.choice([-5, -1, 0, 1, 3, 2**40]))
                elif a.type == AttributeProto.INTS:
                    a.ints[:] = [int(x) for x in rng.integers(-3, 5, int(rng.integers(0, 5)))]
                elif a.type == AttributeProto.FLOAT:
                    a.f = float(rng.choice([np.nan, np.inf, -1.0, 0.0]))
                else:
                    a.s = b"bogus"
            else:  # change the type
                a.type = int(rng.choice([AttributeProto.INT, AttributeProto.FLOAT,
                                         AttributeProto.STRING, AttributeProto.INTS,
                                         AttributeProto.TENSOR, AttributeProto.GRAPH]))
    elif choice == 3:
        infos = [vi for vi in (*g.input, *g.output) if vi.type.tensor_type.shape.dim]
        if infos:
            vi = infos[int(rng.integers(len(infos)))]
            dims = vi.type.tensor_type.shape.dim
            dims[int(rng.integers(len(dims)))].dim_value = int(rng.choice(_DIMS))
    elif choice == 4 and g.initializer:
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        if t.dims:
            t.dims[int(rng.integers(len(t.dims)))] = int(rng.choice(_DIMS))
    elif choice == 5 and nodes:
        n = g.node[int(rng.integers(len(nodes)))]
        if rng.integers(3) == 0:
            n.domain = str(rng.choice(["acme", "com.microsoft", "ai.onnx.ml", ""]))
        else:
            n.op_type = str(rng.choice(_OPS))
    elif choice == 6 and g.initializer:
        t = g.initializer[int(rng.integers(len(g.initializer)))]
        t.data_type = int(rng.choice([1, 2, 3, 6, 7, 9, 10, 11, 16, 0, 99]))
    else:
        m.opset_import[0].version = int(rng.choice([1, 6, 13, 30, 99]))
    return m.SerializeToString()


def fuzz_case(index: int, seeds: list[bytes]) -> bytes:
    rng = np.random.default_rng(index)
    data = seeds[index % len(seeds)]
    for _ in range(1 if rng.integers(3) else 2):
        try:
            data = (_mutate_bytes(rng, data) if rng.integers(4) == 0
                    else _mutate_graph(rng, data))
        except Exception:  # a byte-mutated model no longer parses: mutate its bytes again
            data = _mutate_bytes(rng, data)
    return data


# -- checking one case ----------------------------------------------------------------------------


class Hang(BaseException):
    pass


def _alarm(signum, frame):
    raise Hang()


def _feed(session, rng: np.random.Generator) -> dict | None:
    feed = {}
    for arg in session.get_inputs():
        if arg.dtype is None or arg.dtype.numpy is None or not arg.type.startswith("tensor"):
            return None
        shape = [d if isinstance(d, int) and 0 <= d <= 64 else 2 for d in (arg.shape or [])]
        if int(np.prod(shape, dtype=np.int64)) > MAX_INPUT_ELEMENTS:
            return None
        dt = np.dtype(arg.dtype.numpy)
        if dt.kind == "f":
            feed[arg.name] = rng.standard_normal(shape).astype(dt)
        elif dt.kind == "b":
            feed[arg.name] = rng.integers(0, 2, shape).astype(dt)
        elif dt.kind in "iu":
            feed[arg.name] = rng.integers(0, 3, shape).astype(dt)
        else:
            return None
    return feed


def check_case(index: int, data: bytes, host) -> str | None:
    """``None`` when the case ends in a result or a HostError, else what went wrong."""
    from ep_host import capability
    from ep_host.errors import HostError
    from ep_host.loading import load_model
    from ep_host.placement import choose
    from ep_host.session import InferenceSession

    stage = "load"
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, CASE_SECONDS)
    try:
        model = load_model(data)
        stage = "explain"
        table = capability.walk(host, model, ["cpu"])
        devices = {"cpu": host.records["cpu"].info.device}
        choose(table, devices, model=model.label)
        stage = "session"
        session = InferenceSession(model, providers=["cpu"], host=host,
                                   max_tensor_bytes=MAX_TENSOR_BYTES)
        feed = _feed(session, np.random.default_rng(index))
        if feed is not None:
            stage = "run"
            session.run(None, feed)
        return None
    except HostError:
        return None
    except Hang:
        return f"case {index}: hang in {stage} (over {CASE_SECONDS} s)"
    except Exception as exc:
        return f"case {index}: {stage} raised {type(exc).__name__}: {exc}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_cases(start: int, count: int, out=None) -> list[str]:
    from ep_host.discovery import Host

    host = Host.discover(["cpu"], strict=False)
    seeds = seed_models()
    failures = []
    for i in range(start, start + count):
        if out is not None:
            print(json.dumps({"start": i}), file=out, flush=True)
        problem = check_case(i, fuzz_case(i, seeds), host)
        if problem:
            failures.append(problem)
            if out is not None:
                print(json.dumps({"failure": problem}), file=out, flush=True)
    return failures


# -- tests ----------------------------------------------------------------------------------------


def test_the_seed_models_load_and_run_unmutated():
    from ep_host.discovery import Host
    host = Host.discover(["cpu"], strict=False)
    assert [check_case(0, s, host) for s in seed_models()] == [None] * len(seed_models())


def test_300_fuzzed_models_end_in_a_result_or_a_host_error():
    assert run_cases(0, 300) == []


def _run_chunk(start: int, count: int, timeout: float) -> tuple[list[str], int]:
    """Runs cases in a subprocess; returns failures and the next case to run (after a crash,
    the one after the crashing case)."""
    cmd = [sys.executable, __file__, str(start), str(count)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              cwd=ROOT, env={**os.environ, "EP_HOST_PROVIDERS": "cpu"})
        stdout, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as exc:
        stdout, rc = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (
            exc.stdout or ""), "timeout"
    failures, last = [], start - 1
    for line in stdout.splitlines():
        record = json.loads(line)
        if "start" in record:
            last = record["start"]
        elif "failure" in record:
            failures.append(record["failure"])
    if rc != 0:
        failures.append(f"case {last}: the process ended with {rc} (crash or hang)")
        return failures, last + 1
    return failures, start + count


def long_run(total: int, chunk: int = 500) -> tuple[list[str], float]:
    began = time.monotonic()
    failures: list[str] = []
    start = 0
    while start < total:
        found, start = _run_chunk(start, min(chunk, total - start), timeout=chunk * 2.0 + 60)
        failures.extend(found)
    return failures, time.monotonic() - began


@pytest.mark.slow
def test_10000_fuzzed_models_in_subprocesses_never_crash_hang_or_escape():
    failures, _ = long_run(10_000)
    assert failures == []


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "long":
        found, seconds = long_run(10_000)
        print(json.dumps({"failures": found, "seconds": round(seconds, 1)}))
    else:
        run_cases(int(sys.argv[1]), int(sys.argv[2]), out=sys.stdout)
