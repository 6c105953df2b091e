"""Layouts in the contract and in execution: a claim names the layout of each input and output;
the host converts where producer and consumer differ, hands kernels their layouts' shapes,
keeps graph inputs and outputs in the model's layout, and traces each conversion. A layout name
it does not know, or one that does not fit the value, is the provider's fault, named."""

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import Cost, Device, FunctionKernel, InferenceSession, KernelMatch, hookimpl
from ep_host.errors import ProviderError
from ep_host.layouts import LAYOUTS, conversion_axes, converted_shape
from ep_host.tracing import Tracer

SHAPE = [2, 3, 4, 5]  # N, C, H, W


class NHWCProvider(InlineProvider):
    """Claims Relu and Add with every input and output in NHWC, recording the shapes its kernels
    are created with and the arrays they receive."""

    def __init__(self, name="nhwc", layouts=None, **kwargs):
        super().__init__(name, ops=("Relu", "Add"), cost_us=0.5, **kwargs)
        self.layouts = layouts
        self.seen_shapes = {}
        self.received = {}

    @hookimpl
    def ep_host_supports_op(self, node, context):
        if node.op_type not in self.ops:
            return KernelMatch.unsupported(f"{self.name} runs only Relu and Add")
        required = self.layouts or ["NHWC"] * len(node.inputs)
        return KernelMatch.supported(Cost(compute_us=self.cost_us),
                                     required_input_layouts=required, output_layouts=["NHWC"])

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        self.seen_shapes[node.name] = ([v.shape for v in node.inputs],
                                       [v.shape for v in node.outputs])
        func = self.FUNCS[node.op_type]

        def kernel(*arrays, _name=node.name):
            self.received[_name] = [a.shape for a in arrays]
            return func(*arrays)

        return FunctionKernel(kernel)


def relu_add_model(initializers=()):
    """x -> Relu (r) ; r + y -> Add (s) ; s -> Neg -> out, and s is an output too."""
    y_is_constant = bool(initializers)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "y"], ["s"], name="add"),
             helper.make_node("Neg", ["s"], ["out"], name="neg")]
    inputs = [("x", TensorProto.FLOAT, SHAPE)]
    if not y_is_constant:
        inputs.append(("y", TensorProto.FLOAT, SHAPE))
    return make_model(nodes, inputs, [("out", TensorProto.FLOAT, SHAPE),
                                      ("s", TensorProto.FLOAT, SHAPE)],
                      initializers=initializers)


def feeds(with_y=True):
    rng = np.random.default_rng(1)
    out = {"x": rng.standard_normal(SHAPE).astype(np.float32)}
    if with_y:
        out["y"] = rng.standard_normal(SHAPE).astype(np.float32)
    return out


def test_the_known_layouts_convert_data_and_shapes_consistently():
    rng = np.random.default_rng(0)
    for layout in LAYOUTS.values():
        x = rng.standard_normal(tuple(range(2, 2 + layout.rank)))
        laid = np.transpose(x, conversion_axes(None, layout.name, layout.rank))
        assert laid.shape == converted_shape(x.shape, layout.name)
        back = np.transpose(laid, conversion_axes(layout.name, None, layout.rank))
        np.testing.assert_array_equal(back, x)
    assert converted_shape([1, 3, 8, 6], "NHWC") == (1, 8, 6, 3)
    assert converted_shape(["N", 3, 4, 5, 6], "NDHWC") == ("N", 4, 5, 6, 3)


def test_a_placement_across_nhwc_and_cpu_runs_right_with_nhwc_shapes(host):
    nhwc, cpu = NHWCProvider(), InlineProvider("cpu", ops=("Relu", "Add", "Neg"))
    host.register(nhwc, name="nhwc")
    host.register(cpu, name="cpu")
    tracer = Tracer()
    session = InferenceSession(relu_add_model().SerializeToString(), providers=["nhwc", "cpu"],
                               host=host, trace=tracer, strategy="greedy")
    where = {n.name: n.provider for n in session.placement.nodes}
    assert where == {"relu": "nhwc", "add": "nhwc", "neg": "cpu"}
    # x and y in, s out to Neg and to the graph's output: each converted once
    assert sorted((t.tensor, t.layouts) for t in session.placement.transfers) == [
        ("s", "NHWC->NCHW"), ("x", "NCHW->NHWC"), ("y", "NCHW->NHWC")]
    data = feeds()
    out, s = session.run(None, data)
    expected_s = np.maximum(data["x"], 0) + data["y"]
    np.testing.assert_allclose(s, expected_s)
    np.testing.assert_allclose(out, -expected_s)
    nhwc_shape = (2, 4, 5, 3)
    assert nhwc.seen_shapes["relu"] == ([nhwc_shape], [nhwc_shape])
    assert nhwc.received == {"relu": [nhwc_shape], "add": [nhwc_shape, nhwc_shape]}
    spans = [e for e in tracer.events if e["cat"] == "layout"]
    assert sorted(e["args"]["tensor"] for e in spans) == ["s", "x", "y"]
    assert {e["args"]["layouts"] for e in spans} == {"NCHW->NHWC", "NHWC->NCHW"}
    assert all(e["args"]["estimated_us"] > 0 for e in spans)


def test_a_constant_input_wanted_in_nhwc_is_converted_once_at_creation(host):
    y = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)
    nhwc = NHWCProvider()
    host.register(nhwc, name="nhwc")
    host.register(InlineProvider("cpu", ops=("Neg",)), name="cpu")
    model = relu_add_model([numpy_helper.from_array(y, "y")])
    session = InferenceSession(model.SerializeToString(), providers=["nhwc", "cpu"], host=host,
                               strategy="greedy")
    assert [(n.name, n.provider) for n in session.placement.nodes] == [
        ("relu", "nhwc"), ("add", "nhwc"), ("neg", "cpu")]
    assert [t.tensor for t in session.placement.transfers if t.tensor == "y"] == []
    data = feeds(with_y=False)
    out, s = session.run(None, data)
    np.testing.assert_allclose(s, np.maximum(data["x"], 0) + y)
    assert not any(step.kind == "layout" and step.output_names == ("y",)
                   for step in session._plan.steps)


def test_a_kernel_that_reads_the_models_layout_for_one_input_gets_it(host):
    nhwc = NHWCProvider(layouts=["NHWC", None])  # Add: r in NHWC, y as the model has it
    host.register(nhwc, name="nhwc")
    host.register(InlineProvider("cpu", ops=("Neg", "Relu")), name="cpu")
    InferenceSession(relu_add_model().SerializeToString(), providers=["nhwc", "cpu"],
                     host=host, pins={"add": "nhwc", "relu": "cpu"})
    assert nhwc.seen_shapes["add"] == ([(2, 4, 5, 3), tuple(SHAPE)], [(2, 4, 5, 3)])


@pytest.mark.parametrize(("layouts", "fault"), [
    (["NCHWX"], "required_input_layouts[0] 'NCHWX' for input 'x': not a layout the host knows"),
    (["NWC"], "required_input_layouts[0] 'NWC' for input 'x': it has rank 4, and NWC is for "
              "rank 3"),
    (["NHWC", "NHWC"], "required_input_layouts[1] 'NHWC' for input 1: the node has no such "
                       "value"),
])
def test_a_layout_the_host_cannot_honour_is_the_providers_fault(host, layouts, fault):
    host.register(NHWCProvider(layouts=layouts), name="nhwc")
    host.register(InlineProvider("cpu", ops=("Relu", "Add", "Neg")), name="cpu")
    session = InferenceSession(relu_add_model().SerializeToString(), providers=["nhwc", "cpu"],
                               host=host)
    answer = session.placement.table.answers["relu"]["nhwc"]
    assert not answer.is_supported and answer.code == "fault"
    assert answer.reason.startswith(f"provider claimed the node with {fault}")
    assert session.placement.by_node["relu"].provider == "cpu"


def test_in_strict_mode_an_unknown_layout_names_provider_and_node(monkeypatch):
    from ep_host.discovery import Host

    strict = Host(strict=True)
    strict.register(NHWCProvider(layouts=["NCHWX"]), name="nhwc")
    with pytest.raises(ProviderError, match=r"provider 'nhwc' on node 'relu': .*'NCHWX' for "
                                            r"input 'x'"):
        InferenceSession(relu_add_model().SerializeToString(), providers=["nhwc"], host=strict)


class DeviceArray(np.ndarray):
    """An array on the simulated device (numpy underneath, so transposing works as on a GPU's
    array type)."""


SIM = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=1.0,
             to_host=lambda d: np.array(d), from_host=lambda a: np.array(a).view(DeviceArray),
             array_type=DeviceArray)


class SimNHWCProvider(NHWCProvider):
    @hookimpl
    def ep_host_create_kernel(self, node, context):
        def relu(x):
            assert isinstance(x, DeviceArray) and x.shape == (2, 4, 5, 3)
            return np.maximum(x, 0)

        return FunctionKernel(relu)


def test_a_conversion_runs_on_the_consumers_device_after_the_copy(host):
    host.register(SimNHWCProvider(device=SIM), name="nhwc")
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu")],
                       [("x", TensorProto.FLOAT, SHAPE)], [("r", TensorProto.FLOAT, SHAPE)])
    session = InferenceSession(model.SerializeToString(), providers=["nhwc"], host=host)
    assert [(t.tensor, t.source, t.destination, t.layouts) for t in session.placement.transfers
            ] == [("x", "cpu", "sim:0", "NCHW->NHWC"), ("r", "sim:0", "cpu", "NHWC->NCHW")]
    assert [step.name for step in session._plan.steps] == [
        "copy x", "layout x NCHW->NHWC", "relu", "copy r", "layout r NHWC->NCHW"]
    x = feeds()["x"]
    (r,) = session.run(None, {"x": x})
    assert type(r) is np.ndarray
    np.testing.assert_array_equal(r, np.maximum(x, 0))


def test_a_kernel_computing_in_nhwc_is_timed_on_nhwc_inputs(host):
    from ep_host import node_times
    from ep_host.capability import walk
    from ep_host.loading import load_model

    nhwc = NHWCProvider()
    host.register(nhwc, name="nhwc")
    table = walk(host, load_model(relu_add_model().SerializeToString()), ["nhwc"],
                 measured=False)
    results = node_times.measure(host, table)
    assert {r.node: r.skipped for r in results} == {"relu": "", "add": ""}
    assert nhwc.received["relu"] == [(2, 4, 5, 3)]


def test_the_author_guide_names_every_layout_the_host_knows():
    from pathlib import Path

    guide = (Path(__file__).resolve().parent.parent / "docs" / "ep-author-guide.md").read_text()
    section = guide[guide.index("#### Layouts"):guide.index("### ep_host_create_kernel")]
    assert all(f"`{name}`" in section for name in LAYOUTS)
