"""Helpers for the CPU EP's tests: build one-node models, run them on ep-host's CPU EP and on
onnxruntime, read the CPU EP's answer."""

from __future__ import annotations

import numpy as np
from onnx import helper

import ep_host


def make_model(nodes, inputs, outputs, opset=17, initializers=(), domains=()):
    """A model from nodes and (name, elem_type, shape) triples for inputs and outputs."""
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers),
    )
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = min(model.ir_version, 10)
    return model


def run_ep_host(model, feeds, providers=("cpu",)):
    session = ep_host.InferenceSession(model.SerializeToString(), providers=list(providers))
    return session.run(None, feeds)


def run_onnxruntime(model, feeds):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), options, providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)


def assert_matches_onnxruntime(model, feeds, rtol=1e-5, atol=1e-6):
    """Run ``model`` on both and compare every output (dtype, shape and values)."""
    ours = run_ep_host(model, feeds)
    theirs = run_onnxruntime(model, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        assert a.shape == b.shape, (a.shape, b.shape)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    return ours


def cpu_answer(model, node_index=0):
    """The CPU EP's KernelMatch for one node of ``model``."""
    from ep_host import capability
    from ep_host.discovery import Host
    from ep_host import load_model

    host = Host.discover(["cpu"])
    loaded = load_model(model.SerializeToString())
    table = capability.walk(host, loaded, ["cpu"])
    node = loaded.graph.nodes[node_index]
    return table.answers[node.name]["cpu"]




def assert_declines(model, code, *words):
    """The CPU EP declines the model's first node with ``code`` and a reason naming ``words``."""
    answer = cpu_answer(model)
    assert not answer.is_supported
    assert answer.code == code, answer.reason
    for word in words:
        assert word in answer.reason, answer.reason
