"""skl2onnx's squared Euclidean distances (a Scan over C's rows of Sub and ReduceSumSquare, in
its KNeighbors exports) computed in one pass: the scan output and the handed-on state bit for bit
as the body's loop gives them, onnxruntime's within float32 rounding; a body of any other form
runs as written."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession

F = TensorProto.FLOAT


def distances_model(opset=17, keepdims=0, axis=1, reverse=False):
    """X [N, 4] -> Scan over C [L, 4]: state X handed on, scan output |X - c|^2 per row."""
    square = (helper.make_node("ReduceSumSquare", ["d", "axes"], ["r"], keepdims=keepdims)
              if opset >= 18 else
              helper.make_node("ReduceSumSquare", ["d"], ["r"], keepdims=keepdims, axes=[axis]))
    inits = [numpy_helper.from_array(np.array([axis], np.int64), "axes")] if opset >= 18 else []
    body = helper.make_graph(
        [helper.make_node("Identity", ["s"], ["s_out"]), helper.make_node("Sub", ["s", "c"], ["d"]),
         square, helper.make_node("Identity", ["r"], ["scan_out"])],
        "body", [helper.make_tensor_value_info("s", F, [None, 4]),
                 helper.make_tensor_value_info("c", F, [4])],
        [helper.make_tensor_value_info("s_out", F, [None, 4]),
         helper.make_tensor_value_info("scan_out", F, None)], initializer=inits)
    c = np.random.default_rng(7).standard_normal((300, 4)).astype(np.float32)
    scan = helper.make_node("Scan", ["x", "c"], ["x_out", "d2"], body=body, num_scan_inputs=1,
                            **({"scan_input_directions": [1]} if reverse else {}))
    graph = helper.make_graph([scan], "g", [helper.make_tensor_value_info("x", F, [None, 4])],
                              [helper.make_tensor_value_info("x_out", F, None),
                               helper.make_tensor_value_info("d2", F, None)],
                              initializer=[numpy_helper.from_array(c, "c")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model.SerializeToString()


def run_both(model, x):
    session = InferenceSession(model, providers=["cpu"])
    (scan,) = [s for s in session._plan.steps if s.op == "Scan"]
    took = scan.kernel.distances
    fast = session.run(None, {"x": x})
    scan.kernel.distances = False  # the body, row by row
    loop = session.run(None, {"x": x})
    return took, fast, loop


@pytest.mark.parametrize("opset", [17, 18])
@pytest.mark.parametrize("rows", [1, 7, 1000])
def test_one_pass_gives_the_body_loops_distances_bit_for_bit(opset, rows, monkeypatch):
    import ep_host.kernels.control_flow as control_flow

    monkeypatch.setattr(control_flow, "DISTANCE_CHUNK", 4096)  # 1000 rows: several chunks
    x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
    model = distances_model(opset)
    took, fast, loop = run_both(model, x)
    assert took
    np.testing.assert_array_equal(fast[0], x)
    assert fast[1].shape == (300, rows) and fast[1].dtype == np.float32
    np.testing.assert_array_equal(fast[1], loop[1])
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(
        None, {"x": x})[1]
    np.testing.assert_allclose(fast[1], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", [{"keepdims": 1}, {"axis": 0}, {"reverse": True}])
def test_another_body_runs_as_written(form):
    session = InferenceSession(distances_model(**form), providers=["cpu"])
    (scan,) = [s for s in session._plan.steps if s.op == "Scan"]
    assert scan.kernel.distances is False
