"""What the CUDA EP declines, with a reason that says what it takes and where the node runs
instead, and a code for counting."""

import numpy as np
import pytest
from cudakit import FIGURES, first_node, node_model, sim_host
from ep_host_cuda.provider import simulated
from onnx import TensorProto, helper

from ep_host import Decline, capability, load_model


def cuda_answer(model):
    """The CUDA EP's answer for the model's node, through the host's capability walk."""
    host = sim_host()
    table = capability.walk(host, load_model(model), ["cuda", "cpu"])
    return table.answers["node"]["cuda"], table.answers["node"]["cpu"]


def test_int8_conv_names_the_types_and_the_quantized_ops():
    model = node_model("Conv", {"x": np.zeros((1, 1, 3, 3), np.int8)},
                       constants={"w": np.zeros((1, 1, 1, 1), np.int8)})
    answer, _ = cuda_answer(model)
    assert not answer.is_supported and answer.code == "dtype"
    assert answer.reason.startswith("Conv: CUDA EP takes float16/float32/float64 input, got int8")
    assert "QLinearConv" in answer.reason


def test_integer_matmul_runs_on_cpu_with_the_reason():
    model = node_model("MatMul", {"a": np.zeros((2, 2), np.int32), "b": np.zeros((2, 2), np.int32)})
    answer, cpu = cuda_answer(model)
    assert answer.code == "dtype" and "got int32" in answer.reason and "cuBLAS" in answer.reason
    assert cpu.is_supported


def test_bfloat16_has_no_cupy_array():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["y"], name="node")], "g",
        [helper.make_tensor_value_info(n, TensorProto.BFLOAT16, [2]) for n in "ab"],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    answer, cpu = cuda_answer(model)
    assert answer.code == "dtype" and "CuPy has no bfloat16 arrays" in answer.reason
    assert cpu.is_supported


def test_an_op_outside_the_allow_list_says_it_runs_on_cpu():
    model = node_model("TopK", {"x": np.zeros((5,), np.float32)},
                       constants={"k": np.array([2], np.int64)}, n_outputs=2)
    answer, cpu = cuda_answer(model)
    assert answer.code == "op"
    assert answer.reason == "TopK: the CUDA EP has no kernel for this op; it runs on cpu"
    assert cpu.is_supported


def test_an_op_no_provider_knows_is_declined_without_a_cpu_hint():
    node = helper.make_node("Frobnicate", ["x"], ["y"], name="node", domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2])],
                              [helper.make_tensor_value_info("y", 1, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.example", 1)])
    provider = simulated(FIGURES)
    with pytest.raises(Decline) as info:
        provider.ep_host_supports_op(first_node(model), None)
    assert info.value.code == "op" and "runs on cpu" not in info.value.reason


def test_training_mode_dropout_is_an_attribute_decline():
    model = node_model("Dropout", {"x": np.zeros((4,), np.float32)},
                       constants={"r": np.array(0.5, np.float32), "t": np.array(True)})
    answer, cpu = cuda_answer(model)
    assert answer.code == "attribute" and "inference mode only" in answer.reason
    assert cpu.is_supported


def test_shared_checks_speak_for_the_cuda_ep():
    """The CPU EP's attribute checks decide for the shared kernels; the reason names the EP
    that declined."""
    model = node_model("LayerNormalization", {"x": np.zeros((2, 4), np.float32)},
                       constants={"g": np.ones(4, np.float32)}, attrs={"stash_type": 11})
    answer, _ = cuda_answer(model)
    assert answer.code == "attribute" and "stash_type" in answer.reason
    assert "CUDA EP" in answer.reason and "CPU EP" not in answer.reason


def test_a_since_version_without_a_kernel_is_an_opset_decline():
    """The exact schema version is looked up, never the highest one below it."""
    model = node_model("Softmax", {"x": np.zeros((2, 3), np.float32)}, attrs={"axis": 1})
    node = first_node(model)
    # views are read-only; forced here: no Softmax schema has 12, a version nobody implements
    object.__setattr__(node, "since_version", 12)
    with pytest.raises(Decline) as info:
        simulated(FIGURES).ep_host_supports_op(node, None)
    assert info.value.code == "opset"
    assert info.value.reason.endswith("since_version 12; CUDA EP has 1, 11, 13")


def test_sequences_stay_on_cpu():
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    graph = helper.make_graph(
        [helper.make_node("SequenceEmpty", [], ["s"], name="empty", dtype=TensorProto.FLOAT),
         helper.make_node("Identity", ["s"], ["y"], name="node")], "g", [], [
            helper.make_tensor_sequence_value_info("y", TensorProto.FLOAT, None)],
        value_info=[seq])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    answer, cpu = cuda_answer(model)
    assert answer.code == "dtype" and "sequence" in answer.reason and cpu.is_supported
