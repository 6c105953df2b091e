"""Real models placed across the CPU EP and the CUDA EP on a host "device": outputs match the
CPU-only run, the placement holds device copies, and the copies are traced."""

import os

import numpy as np
import onnx
from cudakit import FIGURES, sim_host
from ep_host_cuda.figures import DeviceFigures
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession
from ep_host.testing import models
from ep_host.tracing import Tracer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")


def both(model_bytes, feeds, figures=FIGURES, **kwargs):
    host = sim_host(figures)
    expected = InferenceSession(model_bytes, providers=["cpu"], host=host).run(None, feeds)
    session = InferenceSession(model_bytes, providers=["cuda", "cpu"], host=host, **kwargs)
    return expected, session.run(None, feeds), session


def on(session, provider):
    return [n for n in session.placement.nodes if n.provider == provider]


def test_the_example_cnn_moves_to_the_device_only_when_launches_are_cheap():
    """cnn.onnx is 32x32 with a few channels: with slow launches the CPU wins every node; with
    launches as cheap as a replayed CUDA graph's, the convolutions move to the device."""
    model = onnx.load(CNN)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    feeds = {model.graph.input[0].name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    slow = DeviceFigures(gemm_gflops=20_000.0, bandwidth_gbps=2_000.0, launch_us=500.0,
                         link_gbps=20.0, link_latency_us=10.0)
    _, _, session = both(model.SerializeToString(), feeds, slow)
    assert not on(session, "cuda") and not session.placement.transfers
    cheap = DeviceFigures(gemm_gflops=20_000.0, bandwidth_gbps=2_000.0, launch_us=0.05,
                          link_gbps=20.0, link_latency_us=1.0)
    expected, got, session = both(model.SerializeToString(), feeds, cheap)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-4)
    assert any(n.op_type in ("Conv", "FusedConv") for n in on(session, "cuda"))
    transfers = session.placement.transfers
    assert any(t.destination == "sim:0" for t in transfers)
    assert any(t.source == "sim:0" and t.destination == "cpu" for t in transfers)


def test_squeezenet_with_random_weights_matches_the_cpu_run():
    model = models.with_random_weights(onnx.load(models.light_model_path("squeezenet")))
    feeds = models.random_inputs(model)
    expected, got, session = both(model.SerializeToString(), feeds)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-4, rtol=1e-4)
    convs = [n for n in session.placement.nodes if n.op_type in ("Conv", "FusedConv")]
    assert sum(n.provider == "cuda" for n in convs) > len(convs) // 2
    assert session.placement.transfers


def test_a_bert_layer_matches_the_cpu_run_with_most_matmuls_on_the_device():
    model = models.bert_encoder(layers=1, hidden=256, heads=4, seq=128)
    feeds = models.bert_inputs(model)
    expected, got, session = both(model.SerializeToString(), feeds)
    np.testing.assert_allclose(got[0], expected[0], atol=1e-4)
    matmuls = [n for n in session.placement.nodes if n.op_type == "MatMul"]
    assert sum(n.provider == "cuda" for n in matmuls) > len(matmuls) // 2
    # Reshape's target shape is a host input: it reaches the Reshape on the host
    answers = session.placement.table.answers
    reshape = next(n for n in session.placement.nodes if n.op_type == "Reshape")
    assert answers[reshape.name]["cuda"].host_inputs == (1,)
    assert session.placement.transfers


def test_a_declined_node_between_device_nodes_copies_both_ways_and_traces_the_copies():
    """MatMul (device) -> TopK (declined: runs on cpu) -> MatMul, MatMul (device)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((256, 256)).astype(np.float32)
    w2 = rng.standard_normal((64, 1024)).astype(np.float32)
    w3 = rng.standard_normal((1024, 16)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="mm1"),
             helper.make_node("TopK", ["h", "k"], ["top", "idx"], name="topk", axis=-1),
             helper.make_node("MatMul", ["top", "w2"], ["h2"], name="mm2"),
             helper.make_node("MatMul", ["h2", "w3"], ["y"], name="mm3")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 16])],
        initializer=[numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2"),
                     numpy_helper.from_array(w3, "w3"),
                     numpy_helper.from_array(np.array([64], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    feeds = {"x": rng.standard_normal((256, 256)).astype(np.float32)}
    tracer = Tracer()
    expected, got, session = both(model.SerializeToString(), feeds, trace=tracer)
    # y's entries reach ~8,000 as sums of 1,024 products: float32 sums in another order (the
    # CPU EP's oneMKL against the simulated device's numpy) differ by ~1e-6 of that scale
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4,
                               atol=1e-5 * float(np.abs(expected[0]).max()))
    by_node = session.placement.by_node
    assert (by_node["mm1"].provider, by_node["topk"].provider, by_node["mm2"].provider) == (
        "cuda", "cpu", "cuda")
    answer = session.placement.table.answers["topk"]["cuda"]
    assert answer.code == "op" and "runs on cpu" in answer.reason
    moved = {(t.tensor, t.source, t.destination) for t in session.placement.transfers}
    assert ("h", "sim:0", "cpu") in moved and ("top", "cpu", "sim:0") in moved
    copies = [e for e in tracer.events if e["cat"] == "copy"]
    assert {(e["args"]["source"], e["args"]["destination"]) for e in copies} >= {
        ("sim:0", "cpu"), ("cpu", "sim:0")}
    nodes = [e for e in tracer.events if e["cat"] == "node" and e["args"]["provider"] == "cuda"]
    assert {e["args"]["device"] for e in nodes} == {"sim:0"}
