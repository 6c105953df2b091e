"""Device graphs: a device partition recorded once and replayed, only when every kernel can
be recorded and every shape is static; the session says which partitions were recorded and why
the others were not."""

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import CaptureSupport, Device, FunctionKernel, InferenceSession, KernelError, hookimpl

F = TensorProto.FLOAT


class Recorder:
    """A host-memory device whose ``capture`` counts recordings; a replay reruns the calls."""

    def __init__(self):
        self.recordings = 0

    def capture(self, fn):
        self.recordings += 1
        fn()
        return fn

    def device(self):
        copy = lambda a: np.array(a, copy=True)  # noqa: E731
        return Device(name="sim:0", kind="sim", link_gbps=10.0, link_latency_us=5.0,
                      to_host=copy, from_host=copy, synchronize=lambda: None,
                      capture=self.capture)


class GraphKernel(FunctionKernel):
    def __init__(self, fn, support):
        super().__init__(fn)
        self.support = support

    def capture_support(self):
        return self.support


class DeviceProvider(InlineProvider):
    def __init__(self, name, refuse=(), **kwargs):
        super().__init__(name, **kwargs)
        self.refuse = set(refuse)

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        support = (CaptureSupport.no("{} keeps state between calls", node.op_type)
                   if node.op_type in self.refuse else CaptureSupport.yes())
        return GraphKernel(self.FUNCS[node.op_type], support)


def model(dim=4):
    return make_model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                       helper.make_node("Relu", ["a"], ["y"], name="relu")],
                      [("x", F, [dim])], [("y", F, [dim])])


def session(host, recorder, options, refuse=(), dim=4):
    host.register(DeviceProvider("dev", refuse=refuse, device=recorder.device()), name="dev")
    return InferenceSession(model(dim).SerializeToString(), providers=["dev"], host=host,
                            provider_options={"dev": options})


def test_a_partition_is_recorded_once_and_replayed_with_each_runs_inputs(host):
    recorder = Recorder()
    s = session(host, recorder, {"enable_device_graph": True})
    (report,) = s.device_graphs
    assert report.captured and report.nodes == ["add", "relu"] and report.reason == ""
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.standard_normal(4).astype(np.float32)
        (y,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(2 * x, 0))
    assert recorder.recordings == 1


def test_results_equal_an_unrecorded_run(host):
    x = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    recorded = session(host, Recorder(), {"enable_device_graph": True}).run(None, {"x": x})
    from ep_host.discovery import Host

    plain = session(Host(strict=False), Recorder(), {}).run(None, {"x": x})
    np.testing.assert_array_equal(recorded[0], plain[0])


def test_without_the_option_nothing_is_recorded(host):
    recorder = Recorder()
    s = session(host, recorder, {})
    s.run(None, {"x": np.ones(4, np.float32)})
    assert s.device_graphs == [] and recorder.recordings == 0


def test_a_kernel_that_cannot_be_recorded_keeps_the_partition_step_by_step(host):
    recorder = Recorder()
    s = session(host, recorder, {"enable_device_graph": True}, refuse=("Relu",))
    (report,) = s.device_graphs
    assert not report.captured
    assert report.reason == "node 'relu' (Relu): Relu keeps state between calls"
    (y,) = s.run(None, {"x": np.array([-1.0, 1.0, 2.0, -2.0], np.float32)})
    np.testing.assert_array_equal(y, [0.0, 2.0, 4.0, 0.0])
    assert recorder.recordings == 0


def test_a_dynamic_shape_is_named_as_the_reason(host):
    s = session(host, Recorder(), {"enable_device_graph": True}, dim="n")
    (report,) = s.device_graphs
    assert not report.captured and "has no static shape" in report.reason
    assert report.to_dict()["captured"] is False


@pytest.mark.parametrize("threads", [4])
def test_concurrent_runs_of_a_recorded_partition_stay_apart(host, threads):
    import threading

    s = session(host, Recorder(), {"enable_device_graph": True})
    inputs = [np.full(4, float(i), np.float32) for i in range(8)]
    failures = []

    def worker(k):
        for i in range(50):
            x = inputs[(k + i) % len(inputs)]
            (y,) = s.run(None, {"x": x})
            if not np.array_equal(y, np.maximum(2 * x, 0)):
                failures.append(k)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert failures == []


def test_a_traced_run_shows_a_recorded_partition_as_one_span(host):
    from ep_host.tracing import Tracer

    recorder = Recorder()
    host.register(DeviceProvider("dev", device=recorder.device()), name="dev")
    tracer = Tracer()
    s = InferenceSession(model().SerializeToString(), providers=["dev"], host=host,
                         provider_options={"dev": {"enable_device_graph": True}}, trace=tracer)
    x = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    for _ in range(2):
        (y,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(2 * x, 0))
    spans = [e for e in tracer.events if e["cat"] == "node"]
    assert [e["name"] for e in spans] == ["device graph 1 on dev"] * 2
    nodes = {n.name: n for n in s.placement.nodes}
    assert spans[0]["args"]["estimated_us"] == pytest.approx(
        nodes["add"].cost_us + nodes["relu"].cost_us)
    assert spans[0]["args"]["device"] == "sim:0"


def test_a_provider_may_name_the_option_as_its_runtime_does(host):
    recorder = Recorder()
    host.register(DeviceProvider("dev", device=recorder.device(),
                                 device_graph_option="enable_sim_graph"), name="dev")
    s = InferenceSession(model().SerializeToString(), providers=["dev"], host=host,
                         provider_options={"dev": {"enable_sim_graph": True}})
    (report,) = s.device_graphs
    assert report.captured
    s.run(None, {"x": np.ones(4, np.float32)})
    assert recorder.recordings == 1


def test_the_session_option_records_every_capturing_device_and_never_the_host(host):
    recorder = Recorder()
    host.register(DeviceProvider("dev", ops=("Add",), device=recorder.device()), name="dev")
    host.register(DeviceProvider("cpu", ops=("Relu",)), name="cpu")
    s = InferenceSession(model().SerializeToString(), providers=["dev", "cpu"], host=host,
                         device_graphs=True)
    assert [(r.provider, r.nodes, r.captured) for r in s.device_graphs] == [
        ("dev", ["add"], True)]
    x = np.array([-1.0, 2.0, -3.0, 4.0], np.float32)
    (y,) = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(2 * x, 0))


def test_a_recorded_partition_checks_what_its_kernels_return(host):
    """Recording runs the partition's steps through the same checks as any run: a kernel inside
    it that returns the wrong dtype is named, though the partition's own output is right."""
    recorder = Recorder()

    class WrongDtype(DeviceProvider):
        FUNCS = {**DeviceProvider.FUNCS, "Add": lambda a, b: (a + b).astype(np.float64),
                 "Relu": lambda a: np.maximum(a, 0).astype(np.float32)}

    host.register(WrongDtype("dev", device=recorder.device()), name="dev")
    s = InferenceSession(model().SerializeToString(), providers=["dev"], host=host,
                         provider_options={"dev": {"enable_device_graph": True}})
    with pytest.raises(KernelError, match="node 'add' .*returned output 0 with dtype float64"):
        s.run(None, {"x": np.ones(4, np.float32)})
