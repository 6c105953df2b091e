"""A node is checked once: supports_op checks it and creating its kernel does not check it
again, while a node whose kernel is asked for without supports_op is still checked (and
declined)."""

from __future__ import annotations

import pytest
from cpukit import make_model
from ep_host_cpu import provider
from onnx import TensorProto, helper

from ep_host.loading import load_model
from ep_host.match import Decline

F = TensorProto.FLOAT


def nodes(alpha_type=F):
    model = make_model(
        [helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.5, name="leaky"),
         helper.make_node("Relu", ["a"], ["y"], name="relu")],
        [("x", alpha_type, [4])], [("y", alpha_type, [4])])
    return load_model(model).graph.nodes


def test_a_node_supports_op_checked_is_not_checked_again(monkeypatch):
    leaky, _ = nodes()
    calls = []
    real = provider.check_node
    monkeypatch.setattr(provider, "check_node",
                        lambda spec, node, name: calls.append(node.name) or real(spec, node, name))
    assert provider.ep_host_supports_op(node=leaky, context=None).is_supported
    provider.ep_host_create_kernel(node=leaky, context=None)
    assert calls == ["leaky"]


def test_a_node_never_asked_is_checked_when_its_kernel_is_made():
    leaky, _ = nodes(TensorProto.INT64)  # LeakyRelu takes floats only
    with pytest.raises(Decline):
        provider.ep_host_create_kernel(node=leaky, context=None)
    with pytest.raises(Decline):  # and asking first does not make it pass
        provider.ep_host_supports_op(node=leaky, context=None)
    with pytest.raises(Decline):
        provider.ep_host_create_kernel(node=leaky, context=None)


def test_nodes_of_a_signature_checked_once_are_not_checked_again(monkeypatch):
    from ep_host import InferenceSession

    model = make_model(
        [helper.make_node("LeakyRelu", ["x"], ["a"], alpha=0.5, name="leaky1"),
         helper.make_node("LeakyRelu", ["a"], ["b"], alpha=0.5, name="leaky2"),
         helper.make_node("LeakyRelu", ["b"], ["c"], alpha=0.25, name="other_alpha"),
         helper.make_node("LeakyRelu", ["c"], ["y"], alpha=0.5, name="leaky3")],
        [("x", F, [4])], [("y", F, [4])])
    calls = []
    real = provider.check_node
    monkeypatch.setattr(provider, "check_node",
                        lambda spec, node, name: calls.append(node.name) or real(spec, node, name))
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    # the walk asked the first of each signature; the kernels were made without a check
    assert calls == ["leaky1", "other_alpha"]
    assert [(p.name, p.provider) for p in session.placement.nodes] == [
        ("leaky1", "cpu"), ("leaky2", "cpu"), ("other_alpha", "cpu"), ("leaky3", "cpu")]


def test_a_node_whose_signature_was_never_checked_is_checked():
    leaky, _ = nodes(TensorProto.INT64)
    from ep_host.signatures import known_signature, node_signature

    assert node_signature(leaky) is not None and known_signature(leaky) is not None
    with pytest.raises(Decline):  # known, but no supports_op passed it
        provider.ep_host_create_kernel(node=leaky, context=None)


def big_regressor(weight):
    """A 4-tree, depth-5 TreeEnsembleRegressor: its attributes take more than
    SIGNATURE_ATTRIBUTE_BYTES, and ``weight`` is its first leaf's vote."""
    rows = [(t, k, k % 3, 0.1 * k, "BRANCH_LEQ" if k < 31 else "LEAF",
             2 * k + 1 if k < 31 else 0, 2 * k + 2 if k < 31 else 0)
            for t in range(4) for k in range(63)]
    leaves = [r for r in rows if r[4] == "LEAF"]
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", name="trees",
        nodes_treeids=[r[0] for r in rows], nodes_nodeids=[r[1] for r in rows],
        nodes_featureids=[r[2] for r in rows], nodes_values=[r[3] for r in rows],
        nodes_modes=[r[4] for r in rows], nodes_truenodeids=[r[5] for r in rows],
        nodes_falsenodeids=[r[6] for r in rows],
        target_treeids=[r[0] for r in leaves], target_nodeids=[r[1] for r in leaves],
        target_ids=[0] * len(leaves),
        target_weights=[weight] + [0.01 * i for i in range(1, len(leaves))], n_targets=1)
    graph = helper.make_graph(
        [node], "trees", [helper.make_tensor_value_info("x", F, [None, 3])],
        [helper.make_tensor_value_info("y", F, [None, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ai.onnx.ml", 3)])


def test_a_node_with_big_attributes_is_checked_once_across_sessions(monkeypatch):
    """Attributes over SIGNATURE_ATTRIBUTE_BYTES stand in the signature as their digest, so a
    tree ensemble's signature is kept, and a later session of the same model does not walk its
    trees in a check again; another weight is another signature, checked and run on its own."""
    import numpy as np

    from ep_host import InferenceSession
    from ep_host.attribute_lists import SHARED_ATTRIBUTES, attributes_key
    from ep_host.signatures import SIGNATURE_ATTRIBUTE_BYTES, known_signature, node_signature

    model = big_regressor(5.0)
    node = load_model(model).graph.nodes[0]
    size = sum(len(a.SerializeToString()) for a in model.graph.node[0].attribute)
    assert size > SIGNATURE_ATTRIBUTE_BYTES
    signature = node_signature(node)
    assert signature[4][:2] == ("blake2b", size) and len(signature[4][2]) == 32
    assert known_signature(node) == signature  # kept, whatever the node's size

    calls = []
    real = provider.check_node
    monkeypatch.setattr(provider, "check_node",
                        lambda spec, node, name: calls.append(node.name) or real(spec, node, name))
    x = np.linspace(-3, 3, 30, dtype=np.float32).reshape(10, 3)
    first = InferenceSession(model.SerializeToString(), providers=["cpu"]).run(None, {"x": x})
    second = InferenceSession(model.SerializeToString(), providers=["cpu"]).run(None, {"x": x})
    assert calls == ["trees"]  # the second session found the first one's check by signature
    np.testing.assert_array_equal(first[0], second[0])

    other = big_regressor(-5.0)  # the same size, one weight apart: another digest
    other_node = load_model(other).graph.nodes[0]
    assert node_signature(other_node) != signature
    third = InferenceSession(other.SerializeToString(), providers=["cpu"]).run(None, {"x": x})
    assert calls == ["trees", "trees"]
    assert not np.array_equal(first[0], third[0])
    # a digest key is never shared as plain attributes between nodes
    assert attributes_key(node) not in SHARED_ATTRIBUTES
