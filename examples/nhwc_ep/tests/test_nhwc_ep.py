"""The NHWC EP: its kernels against onnx's reference through the author kit (each run converts
the graph's inputs and outputs at the boundary), and a real CNN placed across it and the CPU
EP, computing what the CPU EP computes alone, with its conversions counted and priced."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import ep_host
from ep_host.layouts import conversion_cost_us
from ep_host.testing.kit import layout_conversions
from ep_host.testing.models import light_model_path, random_inputs, with_random_weights

provider = pytest.importorskip("ep_host_nhwc.provider",
                               reason="install it: pip install -e examples/nhwc_ep")
cpu = pytest.importorskip("ep_host_cpu.provider",
                          reason="install it: pip install -e plugins/cpu_ep")

FAST = {"nhwc": {"gflops": 1000, "bandwidth_gbps": 100}}  # an accelerator's figures
RNG = np.random.default_rng(0)


def x(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "conv": ("Conv", {"x": x(2, 3, 9, 8), "w": x(4, 3, 3, 3), "b": x(4)},
             dict(pads=[1, 0, 2, 1], strides=[2, 1])),
    "conv-grouped-dilated": ("Conv", {"x": x(1, 4, 10, 10), "w": x(6, 2, 3, 3)},
                             dict(group=2, dilations=[2, 1])),
    "conv-same-upper": ("Conv", {"x": x(1, 2, 7, 6), "w": x(3, 2, 4, 3)},
                        dict(auto_pad="SAME_UPPER", strides=[2, 2])),
    "maxpool": ("MaxPool", {"x": x(2, 3, 9, 9)}, dict(kernel_shape=[3, 3], strides=[2, 2],
                                                        pads=[1, 1, 1, 1])),
    "averagepool": ("AveragePool", {"x": x(1, 3, 8, 7)}, dict(kernel_shape=[3, 2],
                                                              pads=[1, 0, 1, 1])),
    "averagepool-counting-pads": ("AveragePool", {"x": x(1, 3, 8, 7)},
                                  dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                       count_include_pad=1)),
    "globalaveragepool": ("GlobalAveragePool", {"x": x(2, 5, 4, 3)}, {}),
    "relu": ("Relu", {"x": x(1, 3, 4, 5)}, {}),
    "add-broadcast": ("Add", {"x": x(2, 3, 4, 5), "z": x(1, 3, 1, 5)}, {}),
    "concat-channels": ("Concat", {"x": x(1, 2, 3, 4), "z": x(1, 5, 3, 4)}, dict(axis=1)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_kernel_matches_onnx_reference_with_its_inputs_converted(
        case, one_node_model, assert_matches_reference, ep_session):
    op_type, feeds, attrs = CASES[case]
    weights = [n for n in feeds if n in ("w", "b")]
    model = one_node_model(op_type, feeds, initializers=weights, **attrs)
    graph_feeds = {n: v for n, v in feeds.items() if n not in weights}
    assert_matches_reference(model, graph_feeds, rtol=1e-5)
    session = ep_session(model)
    assert session.placement.by_node["node"].provider == "nhwc"
    # each graph input into NHWC, the output back: the kernel ran channels last
    assert layout_conversions(session) == [
        *((n, "NCHW->NHWC") for n in graph_feeds), ("y", "NHWC->NCHW")]


def test_declines_say_what_the_provider_takes():
    model = ep_host.load_model(onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], ceil_mode=1,
                               name="pool"),
         onnx.helper.make_node("Relu", ["v"], ["w"], name="relu3d")], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 2, 5, 5]),
         onnx.helper.make_tensor_value_info("v", onnx.TensorProto.FLOAT, [1, 2, 5])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None),
         onnx.helper.make_tensor_value_info("w", onnx.TensorProto.FLOAT, None)]),
        opset_imports=[onnx.helper.make_opsetid("", 17)]).SerializeToString())
    context = ep_host.ProviderContext(provider="nhwc", opset_imports=model.opset_imports)
    reasons = {}
    for node in model.graph.nodes:
        with pytest.raises(ep_host.Decline) as declined:
            provider.ep_host_supports_op(node=node, context=context)
        reasons[node.name] = (declined.value.reason, declined.value.code)
    assert reasons == {
        "pool": ("MaxPool: the NHWC EP implements ceil_mode=0 only", "attribute"),
        "relu3d": ("Relu: the NHWC EP takes 4-D tensors, got rank 3 for 'v'", "shape")}


def host_with_both():
    host = ep_host.Host(strict=True)
    host.register(provider, name="nhwc")
    host.register(cpu, name="cpu")
    return host


@pytest.mark.parametrize(("name", "optimizations"), [("squeezenet", ()), ("resnet50", None)])
def test_a_real_cnn_across_nhwc_and_cpu_computes_what_the_cpu_ep_does(name, optimizations):
    model = with_random_weights(onnx.load(light_model_path(name)))
    feeds = random_inputs(model)
    data = model.SerializeToString()
    alone = ep_host.InferenceSession(data, providers=["cpu"], optimizations=optimizations)
    expected = alone.run(None, feeds)
    both = ep_host.InferenceSession(data, providers=["nhwc", "cpu"], provider_options=FAST,
                                    host=host_with_both(), optimizations=optimizations)
    placement = both.placement
    on = {p: [n for n in placement.nodes if n.provider == p] for p in ("nhwc", "cpu")}
    assert on["nhwc"] and on["cpu"]
    assert any(n.op_type == "Conv" for n in on["nhwc"])
    conversions = [t for t in placement.transfers if t.converts]
    # into NHWC where the graph begins or a CPU node hands over, back where the CPU takes over
    assert conversions and {t.layouts for t in conversions} == {"NCHW->NHWC", "NHWC->NCHW"}
    assert all(not t.moves and t.cost_us == t.conversion_us == conversion_cost_us(t.nbytes)
               for t in conversions)
    assert placement.transfer_cost_us == pytest.approx(sum(t.cost_us for t in conversions))
    assert placement.total_us == pytest.approx(
        placement.node_cost_us + placement.transfer_cost_us + placement.launch_cost_us)
    steps = [s for s in both._plan.steps if s.kind == "layout"]
    assert sorted(s.output_names[0] for s in steps) == sorted(t.tensor for t in conversions)
    actual = both.run(None, feeds)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape and a.dtype == e.dtype
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5 * float(np.abs(e).max()))


def test_with_its_default_figures_the_cpu_ep_keeps_every_node():
    model = with_random_weights(onnx.load(light_model_path("squeezenet")))
    session = ep_host.InferenceSession(model.SerializeToString(), providers=["nhwc", "cpu"],
                                       host=host_with_both(), optimizations=())
    assert {n.provider for n in session.placement.nodes} == {"cpu"}
    assert not session.placement.transfers


def test_the_command_line_shows_and_traces_the_conversions(tmp_path, monkeypatch, capsys):
    from ep_host.cli import main

    model = with_random_weights(onnx.load(light_model_path("squeezenet")))
    path = tmp_path / "squeezenet.onnx"
    onnx.save(model, str(path))
    monkeypatch.setenv("EP_HOST_NHWC_GFLOPS", "1000")
    monkeypatch.setenv("EP_HOST_NHWC_BANDWIDTH_GBPS", "100")
    common = [str(path), "--providers", "nhwc,cpu", "--no-optimize"]
    assert main(["place", *common, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    converted = [t for t in data["transfers"] if "layout" in t]
    # which tensor goes over first hangs on the CPU EP's own figures, measured on this machine
    # (the input, data_0, where the first conv goes to nhwc; else that conv's output)
    assert converted and converted[0]["layout"] == {"from": "NCHW", "to": "NHWC",
                                                    "cost_us": converted[0]["cost_us"]}
    assert {t["layout"]["from"] for t in converted} <= {"NCHW", "NHWC"}
    trace = tmp_path / "trace.json"
    assert main(["run", *common, "--random-inputs", "--trace", str(trace)]) == 0
    events = json.loads(trace.read_text())["traceEvents"]
    spans = [e for e in events if e.get("cat") == "layout"]
    assert sorted(e["args"]["tensor"] for e in spans) == sorted(t["tensor"] for t in converted)
