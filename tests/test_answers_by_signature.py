"""A provider that answers by signature (``ProviderInfo.answers_by_signature``) is asked once
per signature for its claims, and per node for its declines; the table is the one it would
have given answering every node."""

import numpy as np
from hostkit import InlineProvider
from onnx import TensorProto, helper, numpy_helper

from ep_host import Cost, InferenceSession, KernelMatch, hookimpl
from ep_host.capability import walk
from ep_host.discovery import Host
from ep_host.loading import load_model


class Counting(InlineProvider):
    """Claims Relu and Reshape at a cost that follows the shape; declines the rest naming the
    node's input, as reasons may."""

    @hookimpl
    def ep_host_supports_op(self, node, context):
        self.asked.append(node.name)
        if node.op_type not in ("Relu", "Reshape"):
            return KernelMatch.unsupported(f"{node.op_type} of {node.inputs[0].name!r}: no",
                                           code="op")
        return KernelMatch.supported(Cost(compute_us=float(node.inputs[0].nbytes)))


def chain_model(n=6):
    """``n`` Relu+Neg pairs on [1, 4], a Relu on [1, 8] after a Reshape by [1, 8], a Reshape by
    [8] (other constant values, same shapes) and one by [2, 4] from a second input."""
    nodes, last = [], "x"
    for i in range(n):
        nodes += [helper.make_node("Relu", [last], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Neg", [f"r{i}"], [f"n{i}"], name=f"neg{i}")]
        last = f"n{i}"
    nodes += [helper.make_node("Concat", [last, "x"], ["wide"], axis=1, name="concat"),
              helper.make_node("Reshape", ["wide", "s18"], ["w18"], name="reshape18"),
              helper.make_node("Reshape", ["wide", "s8"], ["w8"], name="reshape8"),
              helper.make_node("Relu", ["w18"], ["y"], name="relu_wide"),
              helper.make_node("Reshape", ["z", "s24"], ["z24"], name="reshape24")]
    inits = [numpy_helper.from_array(np.array(s, np.int64), name)
             for name, s in (("s18", [1, 8]), ("s8", [8]), ("s24", [2, 4]))]
    graph = helper.make_graph(
        nodes, "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None)
         for o in ("y", "w8", "z24")], initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def table_of(by_signature):
    host = Host(strict=False)
    provider = Counting("counting", answers_by_signature=by_signature)
    host.register(provider, name="counting")
    model = load_model(chain_model().SerializeToString())
    table = walk(host, model, ["counting"])
    return provider, {name: row["counting"] for name, row in table.answers.items()}


def test_claims_are_asked_once_per_signature_and_declines_per_node():
    provider, answers = table_of(True)
    asked = provider.asked
    assert asked.count("relu0") == 1 and not any(f"relu{i}" in asked for i in range(1, 6))
    assert all(f"neg{i}" in asked for i in range(6))  # declines: every node
    assert "relu_wide" in asked  # another shape: another signature
    # same input shapes, constant shapes of other values: each its own signature
    assert {"reshape18", "reshape8", "reshape24"} <= set(asked)
    assert answers["relu5"] is answers["relu0"]


def test_the_table_is_the_one_answering_every_node_gives():
    provider, by_signature = table_of(True)
    everyone, each = table_of(False)
    assert len(everyone.asked) == len(each) > len(provider.asked)
    assert by_signature.keys() == each.keys()
    for name, answer in each.items():
        got = by_signature[name]
        assert got.is_supported == answer.is_supported, name
        assert got.reason == answer.reason, name  # declines name their own node's input
        if answer.is_supported:
            assert got.cost.total_us == answer.cost.total_us, name


def test_a_session_of_a_signature_provider_runs_right():
    x = np.array([[1.0, -2.0, 3.0, -4.0]], np.float32)
    z = np.arange(8, dtype=np.float32).reshape(1, 8)
    session = InferenceSession(chain_model().SerializeToString(), providers=["cpu"])
    y, w8, z24 = session.run(None, {"x": x, "z": z})
    n = -np.maximum(x, 0)
    for _ in range(5):
        n = -np.maximum(n, 0)
    np.testing.assert_array_equal(y, np.maximum(np.concatenate([n, x], 1).reshape(1, 8), 0))
    np.testing.assert_array_equal(w8, np.concatenate([n, x], 1).reshape(8))
    np.testing.assert_array_equal(z24, z.reshape(2, 4))


def test_the_cpu_ep_prices_a_signature_once_per_calibration(monkeypatch):
    import ep_host_cpu.provider as cpu

    from ep_host import calibration
    from ep_host.discovery import shared_host

    checked = []

    def counting_check(spec, node, provider):
        checked.append(node.name)
        return check_node(spec, node, provider)

    check_node = cpu.check_node
    monkeypatch.setattr(cpu, "check_node", counting_check)
    monkeypatch.setattr(cpu, "_CHECKED_SIGNATURES", {})  # what earlier tests priced: forgotten
    host = shared_host()
    model_bytes = chain_model().SerializeToString()
    first = walk(host, load_model(model_bytes), ["cpu"]).answers
    asked = list(checked)
    assert "relu0" in asked and "relu_wide" in asked  # each signature checked once
    checked.clear()
    again = walk(host, load_model(model_bytes), ["cpu"]).answers  # another session's views
    assert checked == []  # nothing checked again: each signature's answer kept
    for name, row in first.items():
        assert again[name]["cpu"] == row["cpu"], name
    calibration.reload()  # a new calibration prices every signature afresh
    fresh = walk(host, load_model(model_bytes), ["cpu"]).answers
    assert sorted(checked) == sorted(asked)
    for name, row in first.items():
        assert fresh[name]["cpu"].cost.total_us == row["cpu"].cost.total_us, name
