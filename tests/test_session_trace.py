"""Traced runs: Chrome trace events per node and per device copy, free when off."""

import json
import os
import subprocess
import sys
import time

import numpy as np
from hostkit import InlineProvider, add_relu_model

from ep_host import InferenceSession
from ep_host.tracing import Tracer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")

REQUIRED = {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}


def _check_trace_events(data):
    """The trace-event format's complete events and the metadata naming their process and
    threads: Perfetto's JSON importer reads these."""
    assert isinstance(data["traceEvents"], list)
    for e in data["traceEvents"]:
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "thread_sort_index")
            assert {"pid", "tid", "args"} <= set(e)
            continue
        assert REQUIRED <= set(e) and e["ph"] == "X"
        assert isinstance(e["ts"], float | int) and e["dur"] >= 0
        json.dumps(e["args"])


def _track_names(data):
    """``(pid, tid) -> thread name`` and ``pid -> process name`` from the metadata events."""
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in data["traceEvents"]
               if e["ph"] == "M" and e["name"] == "thread_name"}
    processes = {e["pid"]: e["args"]["name"] for e in data["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
    return threads, processes


def test_a_traced_run_has_a_span_per_node_with_its_provider(tmp_path, tensors):
    path = tmp_path / "trace.json"
    session = InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"], trace=path)
    session.run(None, {"x": tensors.x, "y": tensors.y})
    assert session.end_profiling() == os.fspath(path)
    data = json.loads(path.read_text())
    _check_trace_events(data)
    nodes = [e for e in data["traceEvents"] if e["cat"] == "node"]
    assert [e["name"] for e in nodes] == ["add", "relu"]
    args = nodes[0]["args"]
    assert (args["op_type"], args["provider"], args["device"]) == ("Add", "cpu", "cpu")
    assert args["bytes"] == 72 and args["flops"] == 6


def test_node_spans_cover_the_run(tensors):
    tracer = Tracer()
    session = InferenceSession(CNN, providers=["cpu"], trace=tracer)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    for _ in range(5):
        session.run(None, {"image": x})
    events = tracer.events
    runs = [e for e in events if e["cat"] == "session"]
    nodes = [e for e in events if e["cat"] == "node"]
    assert len(runs) == 5 and len(nodes) == 5 * len(session.placement.nodes)
    per_run = len(session.placement.nodes)
    for k, run in enumerate(runs):  # each run's node spans lie inside that run's span
        for e in nodes[k * per_run:(k + 1) * per_run]:
            assert run["ts"] <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + 1e-3
    assert sum(e["dur"] for e in nodes) <= sum(e["dur"] for e in runs)


def test_copies_are_spans_too(host, tensors):
    from test_session import SIM, SimProvider

    for p in (SimProvider("sim", ops=("Add",), cost_us=0.01, device=SIM),
              InlineProvider("cpu", cost_us=10.0)):
        host.register(p, name=p.name)
    tracer = Tracer()
    session = InferenceSession(add_relu_model().SerializeToString(),
                               providers=["sim", "cpu"], host=host,
                               trace=tracer)
    session.run(None, {"x": tensors.x, "y": tensors.y})
    copies = [e for e in tracer.events if e["cat"] == "copy"]
    assert [(e["args"]["source"], e["args"]["destination"]) for e in copies] == [
        ("cpu", "sim:0"), ("cpu", "sim:0"), ("sim:0", "cpu")]


def test_the_trace_names_its_process_and_puts_each_provider_on_its_own_track(
        tmp_path, host, tensors):
    from test_session import SIM, SimProvider

    for p in (SimProvider("sim", ops=("Add",), cost_us=0.01, device=SIM),
              InlineProvider("cpu", cost_us=10.0)):
        host.register(p, name=p.name)
    path = tmp_path / "trace.json"
    session = InferenceSession(add_relu_model().SerializeToString(),
                               providers=["sim", "cpu"], host=host, trace=path)
    session.run(None, {"x": tensors.x, "y": tensors.y})
    session.end_profiling()
    data = json.loads(path.read_text())
    _check_trace_events(data)
    threads, processes = _track_names(data)
    spans = [e for e in data["traceEvents"] if e["ph"] == "X"]
    # the process is named after the model: its graph's name ("test") when given as bytes
    assert {processes[e["pid"]] for e in spans} == {"ep-host: test"}
    track = {e["name"]: threads[e["pid"], e["tid"]] for e in spans}
    assert track["add"] == "sim" and track["relu"] == "cpu" and track["run"] == "session"
    assert {threads[e["pid"], e["tid"]] for e in spans if e["cat"] == "copy"} == {"copies"}
    # one track per name: sim, cpu, copies and session each have their own thread id
    assert len({(e["pid"], e["tid"]) for e in spans}) == 4 == len(set(threads.values()))


def test_runs_from_two_threads_keep_apart_on_a_provider_track(tensors):
    import threading

    tracer = Tracer()
    session = InferenceSession(add_relu_model().SerializeToString(),
                               providers=["cpu"], trace=tracer)
    worker = threading.Thread(target=session.run, args=(None, {"x": tensors.x, "y": tensors.y}))
    worker.start()
    worker.join()
    session.run(None, {"x": tensors.x, "y": tensors.y})
    threads, _ = _track_names({"traceEvents": tracer.trace_events()})
    node_tracks = {threads[e["pid"], e["tid"]] for e in tracer.events if e["cat"] == "node"}
    # spans of concurrent runs on one track would overlap without nesting, so each thread
    # gets its own track, named after the provider
    assert len(node_tracks) == 2 and all(t.startswith("cpu") for t in node_tracks)


def test_an_untraced_session_records_nothing(tensors):
    session = InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"])
    assert session.tracer is None and session.end_profiling() is None
    session.run(None, {"x": tensors.x, "y": tensors.y})


def test_cli_run_repeat_prints_latency_and_writes_a_trace(tmp_path):
    path = tmp_path / "t.json"
    result = subprocess.run(
        [sys.executable, "-m", "ep_host", "run", CNN, "--random-inputs", "--repeat", "5",
         "--per-op", "--trace", str(path), "--providers", "cpu"], capture_output=True, text=True,
        timeout=120)
    assert result.returncode == 0, result.stderr
    assert "median" in result.stdout and "p90" in result.stdout and "Conv" in result.stdout
    data = json.loads(path.read_text())
    _check_trace_events(data)
    assert sum(1 for e in data["traceEvents"] if e["cat"] == "session") == 6
    threads, processes = _track_names(data)
    assert set(processes.values()) == {"ep-host: cnn.onnx"}
    assert {"session", "cpu"} <= set(threads.values())


def test_tracer_timestamps_are_monotonic_within_a_run(tensors):
    tracer = Tracer()
    session = InferenceSession(add_relu_model().SerializeToString(),
                               providers=["cpu"], trace=tracer)
    session.run(None, {"x": tensors.x, "y": tensors.y})
    time.sleep(0.001)
    nodes = [e for e in tracer.events if e["cat"] == "node"]
    assert nodes[0]["ts"] + nodes[0]["dur"] <= nodes[1]["ts"] + 1e-6


def test_a_traced_bert_base_run_is_valid_trace_json_and_its_spans_cover_the_wall_time(
        tmp_path):
    from ep_host.testing import models

    model = models.bert_encoder()  # 12 layers, hidden 768, seq 128
    feeds = models.bert_inputs(model)
    path = tmp_path / "bert.json"
    session = InferenceSession(model.SerializeToString(), providers=["cpu"], trace=path)
    session.run(None, feeds)  # warm-up
    start = time.perf_counter()
    session.run(None, feeds)
    wall_us = (time.perf_counter() - start) * 1e6
    session.end_profiling()
    data = json.loads(path.read_text())
    _check_trace_events(data)
    runs = [e for e in data["traceEvents"] if e["cat"] == "session"]
    last = runs[-1]
    inside = [e for e in data["traceEvents"] if e["cat"] in ("node", "copy")
              and last["ts"] <= e["ts"] <= last["ts"] + last["dur"]]
    assert len(inside) == len(session.placement.nodes)
    spans = sum(e["dur"] for e in inside)
    assert 0.9 * wall_us <= spans <= wall_us


def _if_model():
    from onnx import TensorProto, helper

    def branch(op, name):
        return helper.make_graph(
            [helper.make_node(op, ["x"], [f"{name}_y"], name=f"{name}_node")], name, [],
            [helper.make_tensor_value_info(f"{name}_y", TensorProto.FLOAT, [2])])

    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("Neg", "then"),
                            else_branch=branch("Relu", "else"))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                      helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_body_nodes_are_traced_only_at_full_verbosity():
    feeds = {"c": np.array(True), "x": np.array([1.0, -2.0], np.float32)}
    names = {}
    for verbosity in (1, Tracer.FULL):
        tracer = Tracer(verbosity)
        session = InferenceSession(_if_model().SerializeToString(), providers=["cpu"], trace=tracer)
        (y,) = session.run(None, feeds)
        np.testing.assert_array_equal(y, [-1.0, 2.0])
        names[verbosity] = [e["name"] for e in tracer.events if e["cat"] == "node"]
    assert names[1] == ["if"]
    assert sorted(names[Tracer.FULL]) == ["if", "then_node"]
