"""Shape inference on models whose small integer tensors (Reshape targets...) are external data,
and the warning when estimates rest on dims nobody knows."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ep_host.cli import main
from ep_host.loading import load_model

F = TensorProto.FLOAT


def _reshape_model(shape_from_input=False):
    """x [2, 3, 4] -> Reshape to [4, 6] -> MatMul by w [6, 5] -> y (no declared shape)."""
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((6, 5)).astype(
        np.float32), "w")
    inits = [w]
    inputs = [helper.make_tensor_value_info("x", F, [2, 3, 4])]
    if shape_from_input:
        inputs.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    else:
        inits.append(numpy_helper.from_array(np.array([4, 6], np.int64), "shape"))
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("MatMul", ["r", "w"], ["y"], name="matmul")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)],
                              initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _save_external(model, folder):
    """Every initializer, the Reshape target included, in ``data.bin`` beside the model."""
    path = folder / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="data.bin", size_threshold=0)
    stored = onnx.load_model(str(path), load_external_data=False)
    assert all(t.data_location == TensorProto.EXTERNAL for t in stored.graph.initializer)
    return path


def test_a_reshape_target_stored_as_external_data_still_infers(tmp_path):
    model = load_model(str(_save_external(_reshape_model(), tmp_path)))
    assert model.graph.values["r"].shape == (4, 6)
    assert model.graph.values["y"].shape == (4, 5)
    assert not [w for w in model.warnings if "unknown dims" in w]


def test_estimates_on_unknown_dims_say_so(tmp_path, capsys):
    model = load_model(_reshape_model(shape_from_input=True).SerializeToString())
    first, second = model.graph.values["y"].shape
    assert second == 5 and not isinstance(first, int)  # onnx names it "unk__0"
    (warning,) = [w for w in model.warnings if "unknown dims" in w]
    assert "2 of 2 nodes" in warning and "reshape" in warning and "matmul" in warning
    path = tmp_path / "m.onnx"
    path.write_bytes(_reshape_model(shape_from_input=True).SerializeToString())
    assert main(["explain", str(path), "--providers", "cpu"]) == 0
    assert "2 of 2 nodes" in capsys.readouterr().err


def test_a_big_external_integer_tensor_is_not_read_for_inference(tmp_path):
    # 2048 int64 indices: past the 1024 elements kept, so inference leaves them unread
    indices = numpy_helper.from_array(np.zeros(2048, np.int64), "idx")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "idx"], ["y"], name="gather")], "g",
        [helper.make_tensor_value_info("x", F, [4, 3])],
        [helper.make_tensor_value_info("y", F, None)], initializer=[indices])
    path = _save_external(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path)
    (tmp_path / "data.bin").unlink()  # reading it would fail: nothing reads it while loading
    model = load_model(str(path))
    assert model.graph.values["y"].shape == (2048, 3)
