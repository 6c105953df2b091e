"""Helpers for the CPU EP's tests: build one-node models, run them on ep-host's CPU EP and on
onnxruntime, read the CPU EP's answer."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

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
    from ep_host import capability, load_model
    from ep_host.discovery import Host

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


def node_model(op, inputs, outputs, opset, elem=TensorProto.FLOAT, **attrs):
    """One ``op`` node; ``inputs``: (name, shape) pairs, or (name, shape, elem)."""
    node = helper.make_node(op, [i[0] for i in inputs], list(outputs), **attrs)
    graph_inputs = [(i[0], i[2] if len(i) > 2 else elem, i[1]) for i in inputs]
    return make_model([node], graph_inputs, [(o, elem, None) for o in outputs], opset=opset)


def feeds_model(op, feeds, *, opset, out_type=None, outputs=1, **attrs):
    """One ``op`` node whose inputs are the graph inputs ``feeds``, in order."""
    names = list(feeds)
    node = helper.make_node(op, names, [f"out{i}" for i in range(outputs)], **attrs)
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for n, a in feeds.items()]
    out_type = inputs[0][1] if out_type is None else out_type
    return make_model([node], inputs, [(f"out{i}", out_type, None) for i in range(outputs)],
                      opset=opset)


def model_of(op, feeds, consts=None, *, opset, out_types=None, **attrs):
    """One ``op`` node: ``feeds`` are graph inputs, ``consts`` initializers (in that order)."""
    consts = consts or {}
    node = helper.make_node(op, [*feeds, *consts], [f"out{i}" for i in
                                                   range(len(out_types or [None]))], **attrs)
    inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
              for n, a in feeds.items()]
    out_types = out_types or [inputs[0][1]]
    inits = [numpy_helper.from_array(a, n) for n, a in consts.items()]
    return make_model([node], inputs, [(f"out{i}", t, None) for i, t in enumerate(out_types)],
                      opset=opset, initializers=inits)


def randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def flops(model):
    """The registered kernel's flop estimate for the model's first node."""
    from ep_host.kernels import REGISTRY

    node = ep_host.load_model(model.SerializeToString()).graph.nodes[0]
    return REGISTRY.lookup(node).flops(node)


def assert_labels_equal_scores_close(compiled, passes, label):
    """A compiled ML kernel's outputs against numpy's passes: labels equal; scores equal but
    for the float64 sums' order, which can move a float32 rounding (and libm's exponential
    against numpy's, 1 ulp of float64)."""
    for a, b in zip(compiled, passes, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape, label
        if a.dtype.kind in "OiU":
            assert a.tolist() == b.tolist(), label
        else:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7, err_msg=label)
