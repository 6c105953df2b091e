"""Fuzzing ep-host: mutated real models end in a result or an ep-host error (``HostError``),
never in a crash, a hang or another exception.

Seeds: small inline models, ``examples/*.onnx``, two of onnx's light CNNs with small random
weights, small BERT and GPT-2 blocks from ``ep_host.testing.models`` and a few of onnx's node
test cases. Each case mutates a seed's bytes (bit flips, truncation, splices) or its structure
(a node dropped or duplicated, an input renamed, a dtype, attribute, dim, opset or domain
changed), then loads it, places it, creates a CPU session and runs it on random feeds. Cases
run in worker processes: a worker that dies is a crash, one past the time limit a hang.

    .venv/bin/python bench/fuzz.py [--cases 10000] [--seed 0] [--workers 2] [--timeout 60]

prints the count of each outcome and every failure; it exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import multiprocessing
import os
import sys
import time
import warnings
from multiprocessing.connection import wait

import numpy as np
import onnx
from onnx import AttributeProto, TensorProto, helper, numpy_helper

CASE_SECONDS = 60.0  # a case running longer is a hang
MAX_INPUT_ELEMENTS = 1 << 20
MAX_TENSOR_BYTES = 256 << 20
FAILURES = ("crash", "hang", "foreign")  # outcomes that are bugs
# onnx's node test cases used as seeds: importing a module of onnx.backend.test.case.node
# registers its cases, so only these modules are imported, not all 1,800 cases collected
NODE_CASES = {"if_": "test_if", "loop": "test_loop11", "scan": "test_scan9_sum",
              "gather": "test_gather_0", "transpose": "test_transpose_default",
              "softmax": "test_softmax_axis_0",
              "conv": "test_conv_with_strides_padding", "lstm": "test_lstm_defaults",
              "einsum": "test_einsum_batch_matmul", "topk": "test_top_k"}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
    shape = numpy_helper.from_array(np.array([-1, 2], np.int64), "shape")
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
              [("x", f, [1, "b"])], [("out", f, None)],
              [numpy_helper.from_array(np.array([0], np.int64), "i")], opset=18),
    ]


def seed_models() -> list[bytes]:
    """The models every case mutates one of, in a fixed order."""
    from ep_host.testing import models

    seeds = [m.SerializeToString() for m in _small_models()]
    for name in ("cnn.onnx", "custom_op.onnx", "transformer_block.onnx"):
        with open(os.path.join(ROOT, "examples", name), "rb") as f:
            seeds.append(f.read())
    for name in ("squeezenet", "shufflenet"):
        light = onnx.load(models.light_model_path(name))
        seeds.append(models.with_random_weights(light, seed=0).SerializeToString())
    seeds.append(models.bert_encoder(layers=1, hidden=32, heads=2, seq=8).SerializeToString())
    seeds.append(models.gpt2_decoder(layers=1, hidden=32, heads=2, seq=8).SerializeToString())
    seeds.extend(_node_case_models())
    return seeds


@functools.cache
def _node_case_models() -> tuple[bytes, ...]:
    import importlib

    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # onnx's case generators warn on purpose
        for module in NODE_CASES:
            importlib.import_module(f"{node_cases.__name__}.{module}")
    wanted = set(NODE_CASES.values())
    return tuple(c.model.SerializeToString() for c in node_cases._NodeTestCases
                 if c.name in wanted)


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
        "Conv", "Identity", "Frobnicate", "If", "Loop", "Scan", "Split", "TopK", "Expand"]
_DIMS = [0, 1, 2, 3, -1, 7, 2**31, 2**40, 2**62]
_DTYPES = [1, 2, 3, 6, 7, 9, 10, 11, 16, 8, 0, 99]
_DOMAINS = ["", "ai.onnx", "ai.onnx.ml", "com.microsoft", "acme"]


def _pick(rng: np.random.Generator, items):
    return items[int(rng.integers(len(items)))]


def _mutate_attribute(rng: np.random.Generator, a: AttributeProto) -> None:
    if rng.integers(2) == 0:  # change the value
        if a.type == AttributeProto.INT:
            a.i = int(_pick(rng, [-5, -1, 0, 1, 3, 2**40, -(2**63)]))
        elif a.type == AttributeProto.INTS:
            a.ints[:] = [int(x) for x in rng.integers(-3, 5, int(rng.integers(0, 5)))]
        elif a.type == AttributeProto.FLOAT:
            a.f = float(_pick(rng, [np.nan, np.inf, -1.0, 0.0, 1e30]))
        elif a.type == AttributeProto.TENSOR:
            a.t.data_type = int(_pick(rng, _DTYPES))
        else:
            a.s = b"bogus"
    elif rng.integers(2) == 0:  # change the type
        a.type = int(_pick(rng, [AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                                 AttributeProto.INTS, AttributeProto.TENSOR,
                                 AttributeProto.GRAPH]))
    else:  # rename it
        a.name = str(_pick(rng, ["axis", "axes", "alpha", "to", "perm", "bogus"]))


def _mutate_graph(rng: np.random.Generator, data: bytes) -> bytes:
    m = onnx.ModelProto.FromString(data)
    g = m.graph
    nodes = g.node
    choice = int(rng.integers(12))
    if choice == 0 and nodes:  # drop a node
        del nodes[int(rng.integers(len(nodes)))]
    elif choice == 1 and nodes:  # duplicate a node
        n = nodes[int(rng.integers(len(nodes)))]
        nodes.insert(int(rng.integers(len(nodes) + 1)), n)
    elif choice == 2 and nodes:  # an input renamed: to another value, or to nothing known
        n = nodes[int(rng.integers(len(nodes)))]
        if n.input:
            names = [o for k in nodes for o in k.output] + [vi.name for vi in g.input]
            n.input[int(rng.integers(len(n.input)))] = (
                _pick(rng, names) if names and rng.integers(2) else f"dangling_{rng.integers(9)}")
    elif choice == 3:
        attrs = [a for n in nodes for a in n.attribute]
        if attrs:
            _mutate_attribute(rng, _pick(rng, attrs))
    elif choice == 4:  # a dim of a declared input or output
        infos = [vi for vi in (*g.input, *g.output) if vi.type.tensor_type.shape.dim]
        if infos:
            dims = _pick(rng, infos).type.tensor_type.shape.dim
            dims[int(rng.integers(len(dims)))].dim_value = int(_pick(rng, _DIMS))
    elif choice == 5 and g.initializer:  # a dim of an initializer
        t = _pick(rng, g.initializer)
        if t.dims:
            t.dims[int(rng.integers(len(t.dims)))] = int(_pick(rng, _DIMS))
    elif choice == 6 and nodes:  # an op's name or domain
        n = nodes[int(rng.integers(len(nodes)))]
        if rng.integers(3) == 0:
            n.domain = str(_pick(rng, _DOMAINS))
        else:
            n.op_type = str(_pick(rng, _OPS))
    elif choice == 7 and g.initializer:  # an initializer's dtype
        _pick(rng, g.initializer).data_type = int(_pick(rng, _DTYPES))
    elif choice == 8:  # a declared dtype
        infos = [vi for vi in (*g.input, *g.output, *g.value_info)
                 if vi.type.HasField("tensor_type")]
        if infos:
            _pick(rng, infos).type.tensor_type.elem_type = int(_pick(rng, _DTYPES))
    elif choice == 9 and m.opset_import:  # an opset import's domain
        op = m.opset_import[int(rng.integers(len(m.opset_import)))]
        op.domain = str(_pick(rng, _DOMAINS))
    elif choice == 10 and g.initializer:  # an initializer's bytes cut short
        t = _pick(rng, g.initializer)
        if t.raw_data:
            t.raw_data = t.raw_data[: int(rng.integers(len(t.raw_data)))]
    elif m.opset_import:  # an opset version
        m.opset_import[int(rng.integers(len(m.opset_import)))].version = int(
            _pick(rng, [1, 6, 7, 11, 13, 17, 30, 99, -1]))
    return m.SerializeToString()


def fuzz_case(seed: int, index: int, seeds: list[bytes]) -> bytes:
    """Case ``index`` of run ``seed``: one seed model with one or two mutations."""
    rng = np.random.default_rng([seed, index])
    data = seeds[int(rng.integers(len(seeds)))]
    for _ in range(1 if rng.integers(3) else 2):
        try:
            data = (_mutate_bytes(rng, data) if rng.integers(4) == 0
                    else _mutate_graph(rng, data))
        except Exception:  # a byte-mutated model no longer parses: mutate its bytes again
            data = _mutate_bytes(rng, data)
    return data


# -- one case -------------------------------------------------------------------------------------


def _feed(session, rng: np.random.Generator) -> dict | None:
    feed = {}
    for arg in session.get_inputs():
        if arg.dtype is None or arg.dtype.numpy is None or not arg.type.startswith("tensor"):
            return None
        shape = [d if isinstance(d, int) and 0 <= d <= 256 else 2 for d in (arg.shape or [])]
        if int(np.prod(shape, dtype=np.float64)) > MAX_INPUT_ELEMENTS:
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


def check_case(index: int, data: bytes, host) -> tuple[str, str]:
    """``(outcome, detail)``: outcome ``"result"``, the ep-host error's class name, or
    ``"foreign"`` (another exception escaped: a bug) with the stage and message."""
    from ep_host import capability
    from ep_host.errors import HostError
    from ep_host.loading import load_model
    from ep_host.placement import choose
    from ep_host.session import InferenceSession

    stage = "load"
    try:
        model = load_model(data)
        stage = "place"
        table = capability.walk(host, model, ["cpu"])
        choose(table, {"cpu": host.records["cpu"].info.device}, model=model.label)
        stage = "session"
        session = InferenceSession(model, providers=["cpu"], host=host,
                                   max_tensor_bytes=MAX_TENSOR_BYTES)
        feed = _feed(session, np.random.default_rng(index))
        if feed is not None:
            stage = "run"
            session.run(None, feed)
        return "result", ""
    except HostError as exc:
        return type(exc).__name__, ""
    except Exception as exc:
        return "foreign", f"{stage} raised {type(exc).__name__}: {str(exc)[:300]}"


# -- workers --------------------------------------------------------------------------------------


def _worker(conn, seed: int) -> None:
    from ep_host.discovery import Host

    warnings.simplefilter("ignore")  # numpy's warnings on mutated values are not outcomes

    host = Host.discover(["cpu"], strict=False)
    seeds = seed_models()
    conn.send("ready")
    while True:
        index = conn.recv()
        if index is None:
            return
        conn.send((index, *check_case(index, fuzz_case(seed, index, seeds), host)))


class _Worker:
    def __init__(self, ctx, seed: int):
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker, args=(child, seed), daemon=True)
        self.process.start()
        child.close()
        self.case: int | None = None
        self.since = time.monotonic()
        self.ready = False

    def give(self, index: int) -> None:
        self.conn.send(index)
        self.case, self.since = index, time.monotonic()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.conn.close()


def run_fuzz(cases: int, seed: int = 0, workers: int = 2, case_seconds: float = CASE_SECONDS,
             start: int = 0, progress=None) -> tuple[collections.Counter, list[dict]]:
    """Runs cases ``start .. start+cases`` of run ``seed`` in ``workers`` processes; returns the
    count of each outcome and the failures (crash, hang, foreign), each with its case."""
    os.environ.setdefault("EP_HOST_PROVIDERS", "cpu")
    ctx = multiprocessing.get_context("spawn")
    todo = collections.deque(range(start, start + cases))
    counts: collections.Counter = collections.Counter()
    failures: list[dict] = []
    pool = [_Worker(ctx, seed) for _ in range(min(workers, cases))]
    startup = case_seconds + 240.0  # a fresh worker imports ep_host and builds the seeds

    def fail(w: _Worker, outcome: str, detail: str) -> None:
        counts[outcome] += 1
        failures.append({"case": w.case, "outcome": outcome, "detail": detail})

    try:
        while pool:
            busy = {w.conn: w for w in pool}
            for conn in wait(list(busy), timeout=1.0):
                w = busy[conn]
                try:
                    message = conn.recv()
                except EOFError:  # the worker died: in a case (a crash) or starting
                    code = w.process.exitcode if w.process.join(5) is None else None
                    fail(w, "crash", f"the worker ended with exit code {code}")
                    pool[pool.index(w)] = _Worker(ctx, seed)
                    w.stop()
                    continue
                if message != "ready":
                    index, outcome, detail = message
                    counts[outcome] += 1
                    if outcome in FAILURES:
                        failures.append({"case": index, "outcome": outcome, "detail": detail})
                    if progress is not None:
                        progress(sum(counts.values()))
                w.ready = True
                w.case = None
                if todo:
                    w.give(todo.popleft())
                else:
                    w.conn.send(None)
                    pool.remove(w)
                    w.stop()
            now = time.monotonic()
            for i, w in enumerate(pool):
                limit = case_seconds if w.ready else startup
                if now - w.since > limit:
                    fail(w, "hang", f"no answer within {limit:.0f} s")
                    w.stop()
                    pool[i] = _Worker(ctx, seed)
    finally:
        for w in pool:
            w.stop()
    return counts, failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=CASE_SECONDS, help="seconds per case")
    parser.add_argument("--json", help="write the counts and failures to this file")
    args = parser.parse_args(argv)
    began = time.monotonic()

    def progress(done: int) -> None:
        if done % 500 == 0:
            print(f"{done} cases, {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)

    counts, failures = run_fuzz(args.cases, args.seed, args.workers, args.timeout, args.start,
                                progress)
    seconds = time.monotonic() - began
    print(f"{sum(counts.values())} cases, seed {args.seed}, {seconds:.0f} s")
    for outcome, count in counts.most_common():
        print(f"  {outcome:24} {count}")
    for failure in failures:
        print(f"FAIL case {failure['case']}: {failure['outcome']}: {failure['detail']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": args.seed, "cases": args.cases, "seconds": round(seconds, 1),
                       "counts": dict(counts), "failures": failures}, f, indent=1)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
