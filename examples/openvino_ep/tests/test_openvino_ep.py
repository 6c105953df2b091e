"""The OpenVINO EP against the real OpenVINO: what it claims and declines (with OpenVINO's words),
per-node sessions and compiled partitions matching onnxruntime, and a mixed model placed with
the example EP."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import openvino  # noqa: F401 (installed with the package: a missing one fails, never skips)
import pytest
from ep_host_openvino import provider
from onnx import TensorProto, helper, numpy_helper

import ep_host

EXAMPLES = Path(__file__).resolve().parents[2]
F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(
        nodes, "model",
        [helper.make_tensor_value_info(name, dtype, shape) for name, dtype, shape in inputs],
        [helper.make_tensor_value_info(name, dtype, shape) for name, dtype, shape in outputs],
        initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def one_node(op_type, dtype=F, n_inputs=1, shape=(2, 3), out_shape=None, **attrs):
    names = ["a", "b", "c"][:n_inputs]
    return make_model([helper.make_node(op_type, names, ["y"], name="node", **attrs)],
                      [(n, dtype, list(shape)) for n in names],
                      [("y", dtype, list(out_shape if out_shape is not None else shape))])


def answer(model):
    """The OpenVINO EP's answer for the model's first node, asked through its hook directly."""
    loaded = ep_host.load_model(model.SerializeToString())
    context = ep_host.ProviderContext(provider="openvino", opset_imports=loaded.opset_imports)
    try:
        return provider.ep_host_supports_op(node=loaded.graph.nodes[0], context=context)
    except ep_host.Decline as decline:
        return ep_host.KernelMatch.unsupported(decline.reason, decline.code)


@pytest.fixture(scope="module")
def host():
    import ep_host_example.provider as example

    host = ep_host.Host(strict=False)
    host.register(provider, name="openvino")
    host.register(example, name="example")
    return host


def ort_outputs(model, feed):
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return session.run(None, feed)


def assert_close_to_scale(ours, theirs):
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    scale = max(float(np.abs(theirs).max()), 1e-6)
    assert float(np.abs(ours.astype(np.float64) - theirs).max()) <= 1e-4 * scale


# -- who it is -----------------------------------------------------------------------------------


def test_provider_info_names_openvino_and_its_version():

    info = provider.ep_host_provider_info()
    assert (info.name, info.available, info.device) == ("openvino", True, ep_host.HOST)
    assert f"OpenVINO {openvino.__version__}" in info.description


def test_unavailable_without_openvino_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # makes ``import openvino`` fail
    info = provider.ep_host_provider_info()
    assert not info.available
    assert info.reason == "openvino is not installed: pip install ep-host-openvino"


# -- claims and declines -------------------------------------------------------------------------


def test_claims_float32_relu_and_prices_its_call_overhead_per_partition():
    match = answer(one_node("Relu"))
    assert match.is_supported and match.cost.total_us > 0
    assert match.cost.launch_us == 0.0
    assert provider.ep_host_provider_info().partition_launch_us > 0


def test_declines_det_in_openvinos_words():
    match = answer(one_node("Det", shape=(3, 3), out_shape=()))
    assert (match.is_supported, match.code) == (False, "op")
    assert match.reason == "Det: OpenVINO: No conversion rule found for operations: Det-17"


def test_declines_bool_add_with_openvinos_dtype_reason():
    match = answer(one_node("And", n_inputs=2, dtype=TensorProto.BOOL))
    assert match.is_supported  # bool logic is fine...
    match = answer(one_node("Add", n_inputs=2, dtype=TensorProto.BOOL))  # ...bool arithmetic not
    assert (match.is_supported, match.code) == (False, "dtype")
    assert "does not support inputs with element type: boolean" in match.reason


def test_declines_float64_that_openvino_would_compute_in_float32():
    match = answer(one_node("Add", n_inputs=2, dtype=TensorProto.DOUBLE))
    assert (match.is_supported, match.code) == (False, "dtype")
    assert "computes float64 in float32" in match.reason


def test_declines_int64_data_but_claims_int64_indices():
    match = answer(one_node("Add", n_inputs=2, dtype=TensorProto.INT64))
    assert (match.is_supported, match.code) == (False, "dtype")
    assert "keeps int64 in 32 bits" in match.reason
    gather = make_model([helper.make_node("Gather", ["x", "i"], ["y"], name="node")],
                        [("x", F, [5, 4]), ("i", TensorProto.INT64, [3])], [("y", F, [3, 4])])
    assert answer(gather).is_supported


def test_declines_small_integer_arithmetic_that_openvino_saturates():
    match = answer(one_node("Add", n_inputs=2, dtype=TensorProto.INT8))
    assert (match.is_supported, match.code) == (False, "dtype")
    assert "saturates int8" in match.reason


def test_declines_string_and_subgraphs_before_asking_openvino():
    match = answer(one_node("Identity", dtype=TensorProto.STRING))
    assert (match.is_supported, match.code) == (False, "dtype")
    branch = helper.make_graph([helper.make_node("Identity", ["a"], ["z"])], "branch", [],
                               [helper.make_tensor_value_info("z", F, [2, 3])])
    cond = make_model([helper.make_node("If", ["c"], ["y"], name="node",
                                        then_branch=branch, else_branch=branch)],
                      [("c", TensorProto.BOOL, []), ("a", F, [2, 3])], [("y", F, [2, 3])])
    match = answer(cond)
    assert (match.is_supported, match.code) == (False, "op")
    assert "has subgraphs" in match.reason


def test_verdicts_are_cached_per_signature():
    provider.VERDICTS.verdicts.clear()
    for shape in [(2, 3), (4, 5), (7, 1)]:
        assert answer(one_node("Tanh", shape=shape)).is_supported
    assert len(provider.VERDICTS.verdicts) == 1
    answer(one_node("Tanh", shape=(2, 3, 4)))  # another rank is another signature
    assert len(provider.VERDICTS.verdicts) == 2


def test_verdicts_are_kept_on_disk_for_the_next_process(tmp_path, monkeypatch):
    from ep_host_openvino import probe

    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    nodes = [ep_host.load_model(one_node(op).SerializeToString()).graph.nodes[0]
             for op in ("Tanh", "Det")]  # OpenVINO's ONNX frontend has no Det
    asked = []
    real_probe = probe.probe
    monkeypatch.setattr(probe, "probe", lambda node: asked.append(node.op_type)
                        or real_probe(node))
    first = probe.VerdictCache()
    answers = [first.verdict(n, 17) for n in nodes]
    assert asked == ["Tanh", "Det"]
    assert answers[0].supported and "Det" in answers[1].reason
    later = probe.VerdictCache()  # as a new process has: nothing in memory
    assert [later.verdict(n, 17) for n in nodes] == answers and asked == ["Tanh", "Det"]


# -- per-node sessions ---------------------------------------------------------------------------


def conv_block():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    return make_model(
        [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("Reshape", ["r", "shape"], ["flat"], name="reshape"),
         helper.make_node("Softmax", ["flat"], ["y"], name="softmax")],
        [("x", F, [1, 3, 6, 6])], [("y", F, [1, 144])], [w, shape])


def test_small_model_per_node_matches_onnxruntime(host):
    model = conv_block()
    session = ep_host.InferenceSession(model.SerializeToString(), providers=["openvino"], host=host)
    assert {p.provider for p in session.placement.by_node.values()} == {"openvino"}
    feed = {"x": np.random.default_rng(1).standard_normal((1, 3, 6, 6)).astype(np.float32)}
    (ours,) = session.run(None, feed)
    (theirs,) = ort_outputs(model, feed)
    assert_close_to_scale(ours, theirs)


def test_cnn_example_matches_onnxruntime(host):
    path = EXAMPLES / "cnn.onnx"
    session = ep_host.InferenceSession(str(path), providers=["openvino"], host=host)
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (spec,) = reference.get_inputs()
    shape = [d if isinstance(d, int) else 2 for d in spec.shape]
    feed = {spec.name: np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
    for ours, theirs in zip(session.run(None, feed), reference.run(None, feed), strict=True):
        assert_close_to_scale(ours, theirs)


def test_mixed_model_puts_the_custom_op_on_example_and_the_rest_on_openvino(host):
    path = EXAMPLES / "custom_op.onnx"
    session = ep_host.InferenceSession(str(path), providers=["openvino", "example"], host=host)
    where = {name: p.provider for name, p in session.placement.by_node.items()}
    assert where["act/FastSwish"] == "example"
    assert where["dense/MatMul"] == "openvino"
    swish = session.placement.table.answer("act/FastSwish", "openvino")
    assert "No conversion rule found for operations: com.example.FastSwish" in swish.reason
    # onnxruntime has no FastSwish: give it the same model with Sigmoid and Mul in its place.
    model = onnx.load(path)
    nodes = list(model.graph.node)
    i = next(k for k, n in enumerate(nodes) if n.op_type == "FastSwish")
    x, y = nodes[i].input[0], nodes[i].output[0]
    nodes[i:i + 1] = [helper.make_node("Sigmoid", [x], ["gate"]),
                      helper.make_node("Mul", [x, "gate"], [y])]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.opset_import[1:]
    feed = {"x": np.random.default_rng(3).standard_normal((3, 32)).astype(np.float32) * 3}
    (ours,) = session.run(None, feed)
    (theirs,) = ort_outputs(model, feed)
    assert_close_to_scale(ours, theirs)


# -- partitions ----------------------------------------------------------------------------------


def partition_of(model, names, inputs, outputs, threads=1):
    loaded = ep_host.load_model(model.SerializeToString())
    values = loaded.graph.values
    nodes = [n for n in loaded.graph.nodes if n.name in names]
    constants = list(dict.fromkeys(v for n in nodes for v in n.inputs
                                   if v is not None and v.is_constant))
    part = ep_host.PartitionView("part", "openvino", nodes, [values[n] for n in inputs],
                                 [values[n] for n in outputs], constants)
    context = ep_host.ProviderContext(provider="openvino", opset_imports=loaded.opset_imports,
                                      options={"intra_op_num_threads": threads})
    return part, context


def test_partition_compiles_into_one_kernel_with_the_boundary_in_order():
    model = conv_block()
    part, context = partition_of(model, {"conv", "relu", "reshape", "softmax"}, ["x"],
                                 ["y", "c"], threads=2)
    kernel = provider.ep_host_compile_partition(partition=part, context=context)
    assert isinstance(kernel, ep_host.Kernel) and not kernel.thread_safe
    x = np.random.default_rng(4).standard_normal((1, 3, 6, 6)).astype(np.float32)
    y, c = kernel.run(x)
    whole = onnx.ModelProto()
    whole.CopyFrom(model)
    whole.graph.output.append(helper.make_tensor_value_info("c", F, [1, 4, 6, 6]))
    ref_y, ref_c = ort_outputs(whole, {"x": x})
    assert_close_to_scale(y, ref_y)
    assert_close_to_scale(c, ref_c)


def test_partition_that_openvino_cannot_compile_raises_its_message():
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                        helper.make_node("Det", ["r"], ["y"], name="det")],
                       [("x", F, [3, 3])], [("y", F, [])])
    part, context = partition_of(model, {"relu", "det"}, ["x"], ["y"])
    with pytest.raises(RuntimeError, match=r"partition 'part' \(relu, det\): No conversion rule "
                                           r"found for operations: Det-17"):
        provider.ep_host_compile_partition(partition=part, context=context)


def test_onnx_light_squeezenet_is_claimed_whole_and_matches_onnxruntime(host, tmp_path):
    """onnx's light SqueezeNet (constant weights) ends in a Softmax over logits near 1e10, whose
    float32 spacing is 1024: which classes share the probability depends on the last bits of
    each logit (onnxruntime gave all 1000 classes 1e-3, OpenVINO 2026.4 on a Zen 4 CPU 992 of
    them 1/992 and 8 zero). So the logits are compared to scale, and the probabilities are the
    softmax of the provider's own logits."""
    model = onnx.load(str(Path(onnx.__file__).parent / "backend/test/data/light/"
                          "light_squeezenet.onnx"))
    logits = model.graph.node[-1].input[0]
    assert model.graph.node[-1].op_type == "Softmax"
    model.graph.output.append(helper.make_tensor_value_info(logits, TensorProto.FLOAT, None))
    path = tmp_path / "light_squeezenet_with_logits.onnx"
    onnx.save(model, str(path))
    session = ep_host.InferenceSession(str(path), providers=["openvino"], host=host)
    table = session.placement.table
    assert all(table.answer(name, "openvino").is_supported for name in session.placement.by_node)
    reference = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feed = {i.name: np.random.default_rng(5).standard_normal(i.shape).astype(np.float32)
            for i in reference.get_inputs()}
    (probabilities, ours), (_, theirs) = session.run(None, feed), reference.run(None, feed)
    assert float(np.abs(theirs).max()) > 1e9  # the model's scale, as described above
    assert_close_to_scale(ours, theirs)
    shifted = np.exp(ours.astype(np.float64) - ours.max(axis=1, keepdims=True))
    want = shifted / shifted.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, want.reshape(probabilities.shape), atol=1e-6)
