"""The onnxruntime EP against the real onnxruntime: its claims and declines (with onnxruntime's
own words), per-node sessions and compiled partitions matching onnxruntime on whole models, a
mixed model shared with the example EP, and a partition that fails to compile."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from ep_host_onnxruntime import provider, runtime
from ep_host_onnxruntime.profile import runtime_profile
from onnx import TensorProto, helper, numpy_helper

import ep_host

EXAMPLES = Path(__file__).resolve().parents[2]
CNN_MODEL = EXAMPLES / "cnn.onnx"
CUSTOM_OP_MODEL = EXAMPLES / "custom_op.onnx"
F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17, domains=()):
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs],
        initializer=list(initializers))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in domains]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return model


def one_node_model(op_type, dtype, in_shape, out_shape, opset=17, domains=(), **attrs):
    domain = domains[0][0] if domains else ""
    return make_model([helper.make_node(op_type, ["x"], ["y"], name="node", domain=domain,
                                        **attrs)],
                      [("x", dtype, in_shape)], [("y", dtype, out_shape)], opset=opset,
                      domains=domains)


def answer(model):
    """The onnxruntime EP's answer for the model's first node, asked through its hook."""
    loaded = ep_host.load_model(model.SerializeToString())
    context = ep_host.ProviderContext(provider="onnxruntime", opset_imports=loaded.opset_imports)
    try:
        return provider.ep_host_supports_op(node=loaded.graph.nodes[0], context=context)
    except ep_host.Decline as decline:
        return ep_host.KernelMatch.unsupported(decline.reason, decline.code)


def ort_run(model, feed):
    source = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(source, providers=["CPUExecutionProvider"]).run(None, feed)


def assert_close_to_scale(ours, theirs):
    """Equal within 1e-4 of the reference's scale."""
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    scale = max(float(np.abs(theirs).max()), 1.0)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4 * scale)


@pytest.fixture(scope="module")
def host():
    example = pytest.importorskip("ep_host_example.provider")
    host = ep_host.Host(strict=False)
    host.register(provider, name="onnxruntime")
    host.register(example, name="example")
    return host


# -- provider info -------------------------------------------------------------------------------


def test_info_names_onnxruntime_and_its_version():
    info = provider.ep_host_provider_info()
    assert (info.name, info.available, info.device) == ("onnxruntime", True, ep_host.HOST)
    assert f"onnxruntime {ort.__version__}" in info.description


def test_unavailable_with_install_hint_when_onnxruntime_cannot_import(monkeypatch):
    runtime.onnxruntime.cache_clear()
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # makes ``import onnxruntime`` fail
    try:
        info = provider.ep_host_provider_info()
    finally:
        runtime.onnxruntime.cache_clear()
    assert not info.available
    assert info.reason.startswith("onnxruntime is not installed")
    assert "pip install ep-host-onnxruntime" in info.reason


# -- claims and declines -------------------------------------------------------------------------


def test_claims_relu_and_prices_the_measured_call_overhead_per_partition():
    from ep_host_onnxruntime.provider import ep_host_provider_info

    match = answer(one_node_model("Relu", F, [2, 3], [2, 3]))
    assert match.is_supported and match.cost.total_us > 0
    assert match.cost.launch_us == 0.0  # the call is paid once per partition, not per node
    info = ep_host_provider_info()
    assert info.partition_launch_us == pytest.approx(runtime_profile().call_overhead_us)
    assert info.partition_launch_us > 0


def test_calibrated_factors_of_the_op_family_scale_the_estimate(tmp_path, monkeypatch):
    model = one_node_model("Relu", F, [64, 64], [64, 64])
    raw = answer(model).cost.total_us
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    families = {"elementwise": {"overhead_us": 3.0, "scale": 2.5, "cases": 1}}
    ep_host.calibration.save_profile({"schema": ep_host.calibration.SCHEMA,
                                      "providers": {"onnxruntime": {"families": families}}})
    try:
        assert answer(model).cost.total_us == pytest.approx(3.0 + 2.5 * raw)
        # another provider's factors do not apply
        families["elementwise"]["scale"] = 1.0
        ep_host.calibration.save_profile({"schema": ep_host.calibration.SCHEMA,
                                          "providers": {"openvino": {"families": families}}})
        assert answer(model).cost.total_us == pytest.approx(raw)
    finally:
        ep_host.calibration.reload()


def test_a_depthwise_convolution_is_priced_at_its_measured_speed_not_gemm_peak():
    profile = runtime_profile()
    assert 0 < profile.grouped_conv_gflops
    w = numpy_helper.from_array(np.zeros((32, 1, 3, 3), np.float32), "w")
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"], group=32, pads=[1] * 4,
                                         kernel_shape=[3, 3])],
                       [("x", F, [1, 32, 28, 28])], [("y", F, [1, 32, 28, 28])], [w])
    cost = answer(model).cost
    assert cost.compute_us == pytest.approx(cost.flops / (profile.grouped_conv_gflops * 1e3))


def test_declines_an_op_onnxruntime_lacks_in_its_own_words():
    match = answer(one_node_model("ImageDecoder", TensorProto.UINT8, [100], [None, None, 3],
                                  opset=20))
    assert not match.is_supported
    assert match.code == "op"
    assert "NOT_IMPLEMENTED : Could not find an implementation for ImageDecoder(20)" in match.reason
    assert match.reason.startswith(f"ImageDecoder: onnxruntime {ort.__version__} cannot run it")


def test_declines_a_custom_op_onnxruntime_does_not_know():
    match = answer(one_node_model("FastSwish", F, [2], [2], domains=(("com.example", 1),)))
    assert (match.is_supported, match.code) == (False, "op")
    assert "com.example:FastSwish(-1) is not a registered function/op" in match.reason


def test_declines_a_type_onnxruntime_has_no_kernel_for_with_dtype_code():
    match = answer(one_node_model("Det", TensorProto.DOUBLE, [3, 3], [], opset=22))
    assert (match.is_supported, match.code) == (False, "dtype")
    assert "NOT_IMPLEMENTED : Could not find an implementation for Det(22)" in match.reason
    assert answer(one_node_model("Det", F, [3, 3], [], opset=22)).is_supported


def test_declines_a_type_the_schema_refuses_with_onnxruntimes_type_error():
    match = answer(one_node_model("Relu", TensorProto.UINT8, [2], [2]))
    assert (match.is_supported, match.code) == (False, "dtype")
    assert "INVALID_GRAPH" in match.reason and "tensor(uint8)" in match.reason


def test_declines_nodes_with_subgraphs_and_string_tensors():
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["b"])], "branch", [],
                               [helper.make_tensor_value_info("b", F, [2])])
    model = make_model([helper.make_node("If", ["c"], ["y"], then_branch=branch,
                                         else_branch=branch)],
                       [("c", TensorProto.BOOL, []), ("x", F, [2])], [("y", F, [2])])
    match = answer(model)
    assert (match.is_supported, match.code) == (False, "op")
    assert "subgraphs" in match.reason
    match = answer(one_node_model("Identity", TensorProto.STRING, [2], [2]))
    assert (match.is_supported, match.code) == (False, "dtype")
    assert "string" in match.reason


def test_one_probe_per_signature_and_constant_values_in_the_signature(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    shape_a = numpy_helper.from_array(np.array([3, 2], np.int64), "shape_a")
    shape_b = numpy_helper.from_array(np.array([6], np.int64), "shape_b")
    nodes = [helper.make_node("Reshape", ["x", "shape_a"], ["a"], name="r1"),
             helper.make_node("Reshape", ["x", "shape_a"], ["a2"], name="r2"),
             helper.make_node("Reshape", ["x", "shape_b"], ["b"], name="r3"),
             helper.make_node("Relu", ["a"], ["y1"], name="relu1"),
             helper.make_node("Relu", ["a2"], ["y2"], name="relu2")]
    model = make_model(nodes, [("x", F, [2, 3])],
                       [("y1", F, [3, 2]), ("y2", F, [3, 2]), ("b", F, [6])],
                       initializers=[shape_a, shape_b])
    loaded = ep_host.load_model(model.SerializeToString())
    context = ep_host.ProviderContext(provider="onnxruntime", opset_imports=loaded.opset_imports)
    verdicts = provider.Verdicts()
    original, provider.VERDICTS = provider.VERDICTS, verdicts
    try:
        for node in loaded.graph.nodes:
            assert provider.ep_host_supports_op(node=node, context=context).is_supported
    finally:
        provider.VERDICTS = original
    assert verdicts.probes == 3  # Reshape to [3, 2], Reshape to [6], Relu


def test_verdicts_are_kept_on_disk_for_the_next_process(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    relu = one_node_model("Relu", F, [2, 3], [2, 3])
    det = one_node_model("Det", TensorProto.INT32, [2, 2], [])  # onnxruntime has no int Det
    nodes = [ep_host.load_model(m.SerializeToString()).graph.nodes[0] for m in (relu, det)]
    first = provider.Verdicts()
    answers = [first.verdict(n) for n in nodes]
    assert first.probes == 2 and answers[0].supported and not answers[1].supported
    later = provider.Verdicts()  # as a new process has: nothing in memory
    assert [later.verdict(n) for n in nodes] == answers and later.probes == 0
    # another cache directory (or onnxruntime version) asks again
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path / "other"))
    elsewhere = provider.Verdicts()
    assert [elsewhere.verdict(n) for n in nodes] == answers and elsewhere.probes == 2


# -- per-node sessions ---------------------------------------------------------------------------


def test_small_models_match_onnxruntime(host):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    conv = make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "c"], ["y"], name="add")],
        [("x", F, [1, 3, 8, 8])], [("y", F, [1, 4, 8, 8])], initializers=[w])
    attention = make_model(
        [helper.make_node("MatMul", ["q", "k"], ["s"], name="scores"),
         helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
         helper.make_node("MatMul", ["p", "q"], ["y"], name="mix"),
         helper.make_node("ArgMax", ["y"], ["i"], name="argmax", axis=1)],
        [("q", F, [5, 5]), ("k", F, [5, 5])],
        [("y", F, [5, 5]), ("i", TensorProto.INT64, [5, 1])])
    feeds = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(np.float32)},
             {"q": rng.standard_normal((5, 5)).astype(np.float32),
              "k": rng.standard_normal((5, 5)).astype(np.float32)}]
    for model, feed in zip([conv, attention], feeds, strict=True):
        session = ep_host.InferenceSession(model.SerializeToString(),
                                           providers=["onnxruntime"], host=host)
        assert {p.provider for p in session.placement.by_node.values()} == {"onnxruntime"}
        for ours, theirs in zip(session.run(None, feed), ort_run(model, feed), strict=True):
            assert_close_to_scale(ours, theirs)


def test_cnn_matches_onnxruntime(host):
    session = ep_host.InferenceSession(str(CNN_MODEL), providers=["onnxruntime"], host=host)
    assert {p.provider for p in session.placement.by_node.values()} == {"onnxruntime"}
    feed = {"image": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    for ours, theirs in zip(session.run(None, feed), ort_run(str(CNN_MODEL), feed), strict=True):
        assert_close_to_scale(ours, theirs)


def test_custom_op_on_example_and_the_rest_on_onnxruntime(host):
    session = ep_host.InferenceSession(str(CUSTOM_OP_MODEL), providers=["onnxruntime", "example"],
                                       host=host)
    where = {name: p.provider for name, p in session.placement.by_node.items()}
    assert where == {"dense/MatMul": "onnxruntime", "act/FastSwish": "example",
                     "dense/Add": "onnxruntime", "out/Relu": "onnxruntime"}
    reason = session.placement.table.answer("act/FastSwish", "onnxruntime").reason
    assert "is not a registered function/op" in reason
    # the reference: onnxruntime with FastSwish written as x * Sigmoid(x)
    model = onnx.load(CUSTOM_OP_MODEL)
    nodes = list(model.graph.node)
    i = next(k for k, n in enumerate(nodes) if n.op_type == "FastSwish")
    x, y = nodes[i].input[0], nodes[i].output[0]
    nodes[i:i + 1] = [helper.make_node("Sigmoid", [x], ["gate"]),
                      helper.make_node("Mul", [x, "gate"], [y])]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.opset_import[1:]
    feed = {"x": np.random.default_rng(2).standard_normal((3, 32)).astype(np.float32) * 3}
    (ours,) = session.run(None, feed)
    (theirs,) = ort_run(model, feed)
    assert_close_to_scale(ours, theirs)


# -- compiled partitions -------------------------------------------------------------------------


def whole_graph_partition(loaded, name="p0"):
    graph = loaded.graph
    constants = list(dict.fromkeys(v for n in graph.nodes for v in n.inputs
                                   if v is not None and v.is_constant))
    return ep_host.PartitionView(name, "onnxruntime", graph.nodes, graph.inputs, graph.outputs,
                                 constants)


def test_partition_compiles_into_one_session_with_the_same_outputs():
    loaded = ep_host.load_model(str(CNN_MODEL))
    partition = whole_graph_partition(loaded)
    assert len(partition.nodes) > 3
    context = ep_host.ProviderContext(provider="onnxruntime",
                                      options={"intra_op_num_threads": 2})
    kernel = provider.ep_host_compile_partition(partition=partition, context=context)
    assert isinstance(kernel, ep_host.Kernel)
    assert kernel.session.get_session_options().intra_op_num_threads == 2
    x = np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)
    outputs = kernel.run(x)
    expected = ort_run(str(CNN_MODEL), {"image": x})
    assert len(outputs) == len(partition.outputs) == len(expected)
    for ours, theirs, value in zip(outputs, expected, partition.outputs, strict=True):
        assert ours.dtype == value.dtype.numpy
        assert_close_to_scale(ours, theirs)


def test_partition_keeps_the_boundary_order_given():
    model = make_model(
        [helper.make_node("Sub", ["a", "b"], ["d"], name="sub"),
         helper.make_node("Relu", ["d"], ["r"], name="relu"),
         helper.make_node("Cast", ["r"], ["y"], name="cast", to=TensorProto.INT32)],
        [("a", F, [4]), ("b", F, [4])], [("y", TensorProto.INT32, [4])])
    loaded = ep_host.load_model(model.SerializeToString())
    values = loaded.graph.values
    partition = ep_host.PartitionView("p1", "onnxruntime", loaded.graph.nodes,
                                      [values["b"], values["a"]], [values["y"], values["d"]], [])
    kernel = provider.ep_host_compile_partition(
        partition=partition, context=ep_host.ProviderContext(provider="onnxruntime"))
    a = np.array([3.5, -1, 2, 0], np.float32)
    b = np.array([1, 1, -2.5, 0], np.float32)
    y, d = kernel.run(b, a)
    np.testing.assert_array_equal(d, a - b)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, np.maximum(a - b, 0).astype(np.int32))


def test_partition_that_fails_to_compile_raises_with_onnxruntimes_message():
    loaded = ep_host.load_model(str(CUSTOM_OP_MODEL))
    partition = whole_graph_partition(loaded, name="with_fast_swish")
    with pytest.raises(ep_host.KernelError) as raised:
        provider.ep_host_compile_partition(
            partition=partition, context=ep_host.ProviderContext(provider="onnxruntime"))
    message = str(raised.value)
    assert message.startswith(f"onnxruntime {ort.__version__} could not compile partition "
                              "'with_fast_swish' (dense/MatMul, act/FastSwish")
    assert "com.example:FastSwish(-1) is not a registered function/op" in message


def test_the_probe_passes_weights_as_inputs_and_keeps_small_constants():
    probe = pytest.importorskip("ep_host_onnxruntime.probe")
    rng = np.random.default_rng(4)
    w = numpy_helper.from_array(rng.standard_normal((64, 8, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(np.zeros(64, np.float32), "b")
    model = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv")],
                       [("x", F, [1, 8, 6, 6])], [("y", F, [1, 64, 4, 4])],
                       initializers=[w, b])
    conv = ep_host.load_model(model.SerializeToString()).graph.nodes[0]
    probe_model = probe.probe_model(conv)
    assert [i.name for i in probe_model.graph.input] == ["x", "w"]
    assert [i.name for i in probe_model.graph.initializer] == ["b"]
    assert probe.probe(conv).supported
