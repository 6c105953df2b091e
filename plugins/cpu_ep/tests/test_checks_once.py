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
