"""Helpers for the CUDA EP's tests: one-node models, a host with the CPU EP beside the CUDA EP
bound to numpy (a host "device"), and runs on both to compare."""

from __future__ import annotations

import ep_host_cpu.provider as cpu_provider
import numpy as np
import onnx
from ep_host_cuda.figures import DeviceFigures
from ep_host_cuda.provider import simulated
from onnx import helper, numpy_helper

from ep_host import InferenceSession, load_model
from ep_host.discovery import Host

# A data-centre GPU's order of magnitude; the tests' verdicts do not hinge on the exact values.
FIGURES = DeviceFigures(gemm_gflops=20_000.0, bandwidth_gbps=2_000.0, launch_us=8.0,
                        link_gbps=20.0, link_latency_us=10.0)


def sim_host(figures: DeviceFigures = FIGURES, cuda: bool = True) -> Host:
    """The real CPU EP and the CUDA EP on numpy, registered on a strict host of their own."""
    host = Host(strict=True)
    host.register(cpu_provider, "cpu")
    if cuda:
        host.register(simulated(figures), "cuda")
    return host


def node_model(op: str, inputs: dict[str, np.ndarray], *, attrs=None, constants=None,
               n_outputs: int = 1, domain: str = "", opset: int = 17, name: str = "node",
               input_names: list[str] | None = None) -> onnx.ModelProto:
    """One ``op`` node: ``inputs`` become graph inputs, ``constants`` initializers; the node
    reads them in ``input_names`` order (default: inputs then constants; "" omits one)."""
    constants = constants or {}
    order = input_names if input_names is not None else [*inputs, *constants]
    outputs = [f"out{i}" for i in range(n_outputs)]
    node = helper.make_node(op, order, outputs, name=name, domain=domain, **(attrs or {}))
    graph = helper.make_graph(
        [node], "one_node",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in constants.items()])
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 9
    return model


def first_node(model: onnx.ModelProto):
    return load_model(model).graph.nodes[0]


def run_on(model, feeds, providers, host=None, **kwargs):
    session = InferenceSession(model.SerializeToString(),
                               providers=providers, host=host or sim_host(),
                               **kwargs)
    return session.run(None, feeds), session


def compare_with_cpu(model, feeds, *, atol=1e-5, rtol=1e-5, pin: str = "node"):
    """Run ``model`` with node ``pin`` pinned to the CUDA EP and on the CPU EP alone; assert
    the outputs agree and return the CUDA session."""
    host = sim_host()
    expected, _ = run_on(model, feeds, ["cpu"], host)
    got, session = run_on(model, feeds, ["cuda", "cpu"], host, pins={pin: "cuda"})
    assert session.placement.by_node[pin].provider == "cuda"
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), atol=atol,
                                   rtol=rtol)
    return session
