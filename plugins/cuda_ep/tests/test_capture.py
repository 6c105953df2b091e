"""Every CUDA EP kernel says whether a CUDA graph can record it, and if not, which
precondition it fails; the device offers synchronize and capture."""

import numpy as np
from cudakit import FIGURES, node_model, sim_host
from ep_host_cuda.provider import simulated
from onnx import TensorProto, helper

from ep_host import InferenceSession

MS = "com.microsoft"


def kernels(model, feeds=None):
    session = InferenceSession(model.SerializeToString(),
                               providers=["cuda", "cpu"], host=sim_host(),
                               pins={n.name: "cuda" for n in model.graph.node})
    if feeds is not None:
        session.run(None, feeds)
    return {s.node.name: s.kernel for s in session._steps if s.node is not None}


def test_static_kernels_can_be_captured():
    model = node_model("MatMul", {"a": np.zeros((2, 3), np.float32),
                                  "b": np.zeros((3, 4), np.float32)})
    support = kernels(model)["node"].capture_support()
    assert support.capturable and support.reason == ""


def test_a_constant_host_input_does_not_stop_capture():
    model = node_model("Reshape", {"x": np.zeros((2, 3), np.float32)},
                       constants={"shape": np.array([3, 2], np.int64)})
    assert kernels(model)["node"].capture_support().capturable


def test_a_run_time_host_input_does():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])  # Shape stays a node
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    found = kernels(model, {"x": np.ones((2, 3), np.float32)})
    reshape = found["reshape"].capture_support()
    assert not reshape.capturable and reshape.reason == "Reshape: needs host input 's' at run time"
    assert found["shape"].capture_support().capturable  # Shape's array is cached per shape


def test_group_query_attention_reads_its_lengths_on_the_host():
    inputs = {"q": np.zeros((1, 2, 8), np.float32), "k": np.zeros((1, 2, 4), np.float32),
              "v": np.zeros((1, 2, 4), np.float32)}
    model = node_model("GroupQueryAttention", inputs, domain=MS,
                       constants={"seqlens": np.array([1], np.int32),
                                  "total": np.array([2], np.int32)},
                       attrs={"num_heads": 2, "kv_num_heads": 1},
                       input_names=["q", "k", "v", "", "", "seqlens", "total"])
    support = kernels(model)["node"].capture_support()
    assert not support.capturable and "seqlens_k" in support.reason


def test_clip_with_attribute_bounds_copies_them_every_run():
    model = node_model("Clip", {"x": np.zeros(3, np.float32)}, attrs={"min": 0.0, "max": 1.0},
                       opset=6)
    support = kernels(model)["node"].capture_support()
    assert not support.capturable and "copies its min/max" in support.reason


def test_the_device_gives_synchronize_and_a_capture_that_replays():
    device = simulated(FIGURES).device
    assert device.synchronize() is None
    buffers = {"x": np.arange(3.0), "y": np.zeros(3)}
    calls = []

    def partition():
        calls.append(1)
        np.multiply(buffers["x"], 2, out=buffers["y"])

    replay = device.capture(partition)
    buffers["x"][:] = [5.0, 6.0, 7.0]
    replay()
    assert buffers["y"].tolist() == [10.0, 12.0, 14.0] and len(calls) == 2
