"""Run-time inputs, resource limits and cancellation, compared with onnxruntime."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest
from hostkit import InlineProvider, add_relu_model, make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import FunctionKernel, InferenceSession, hookimpl
from ep_host.errors import HostError, ResourceLimitError, RunCancelledError
from ep_host.ort_api import RunOptions


def _cpu(model, **kwargs):
    return InferenceSession(model.SerializeToString(), providers=["cpu"], **kwargs)


def _ort(model, feed):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def _add_relu_dynamic():
    return make_model(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["out"], name="relu")],
        [("x", TensorProto.FLOAT, ["n", 3]), ("y", TensorProto.FLOAT, ["n", 3])],
        [("out", TensorProto.FLOAT, ["n", 3])])


def test_non_contiguous_inputs_give_the_right_answer():
    model = _add_relu_dynamic()
    base = np.arange(24, dtype=np.float32).reshape(4, 6) - 10
    feed = {"x": base[:, ::2], "y": base.T[:3].T[::1, :][:, ::-1]}
    assert not feed["x"].flags.c_contiguous and not feed["y"].flags.c_contiguous
    np.testing.assert_array_equal(_cpu(model).run(None, feed)[0], _ort(model, feed)[0])


def test_nan_and_inf_pass_through_like_onnxruntime():
    model = _add_relu_dynamic()
    x = np.array([[np.nan, np.inf, -np.inf], [1, -1, np.nan]], np.float32)
    feed = {"x": x, "y": np.zeros_like(x)}
    np.testing.assert_array_equal(_cpu(model).run(None, feed)[0], _ort(model, feed)[0])


def test_zero_size_dims_work():
    model = _add_relu_dynamic()
    feed = {"x": np.zeros((0, 3), np.float32), "y": np.zeros((0, 3), np.float32)}
    out = _cpu(model).run(None, feed)[0]
    assert out.shape == (0, 3) == _ort(model, feed)[0].shape


def test_outputs_never_alias_inputs_or_constants():
    w = np.arange(3, dtype=np.float32)
    model = make_model(
        [helper.make_node("Identity", ["x"], ["a"], name="id"),
         helper.make_node("Identity", ["w"], ["b"], name="idw")],
        [("x", TensorProto.FLOAT, [3])],
        [("a", TensorProto.FLOAT, [3]), ("b", TensorProto.FLOAT, [3])],
        initializers=[numpy_helper.from_array(w, "w")])
    session = _cpu(model)
    x = np.ones(3, np.float32)
    a, b = session.run(None, {"x": x})
    assert not np.shares_memory(a, x)
    a[:] = 7
    b[:] = 7
    np.testing.assert_array_equal(x, 1)
    np.testing.assert_array_equal(session.run(None, {"x": x})[1], w)


def _expand_model(shape):
    """Expand a scalar to a shape given as a constant: the output size is known at plan time."""
    return make_model(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
        [("x", TensorProto.FLOAT, [1])], [("y", TensorProto.FLOAT, None)],
        initializers=[numpy_helper.from_array(np.array(shape, np.int64), "shape")])


def test_a_static_output_over_the_limit_fails_before_allocation():
    with pytest.raises(ResourceLimitError,
                       match="output 'y' of node 'expand' would take 40000 bytes.*limit of 1000"):
        _cpu(_expand_model([100, 100]), max_tensor_bytes=1000)


def test_a_static_shape_overflowing_int64_fails_before_allocation():
    with pytest.raises(ResourceLimitError, match="node 'expand'.*overflows int64"):
        _cpu(_expand_model([2**40, 2**40]))


def test_a_run_time_output_over_the_limit_fails_and_the_session_keeps_working():
    model = make_model(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand")],
        [("x", TensorProto.FLOAT, [1]), ("shape", TensorProto.INT64, [2])],
        [("y", TensorProto.FLOAT, None)])
    session = _cpu(model, max_tensor_bytes=1000)
    x = np.ones(1, np.float32)
    with pytest.raises(ResourceLimitError,
                       match="node 'expand'.*takes? 40000 bytes.*limit of 1000"):
        session.run(None, {"x": x, "shape": np.array([100, 100], np.int64)})
    out = session.run(None, {"x": x, "shape": np.array([10, 10], np.int64)})[0]
    assert out.shape == (10, 10)


def test_the_limit_comes_from_the_environment_and_covers_inputs(monkeypatch):
    monkeypatch.setenv("EP_HOST_MAX_TENSOR_BYTES", "16")
    session = _cpu(_add_relu_dynamic())
    small = np.ones((1, 3), np.float32)
    assert session.run(None, {"x": small, "y": small})[0].shape == (1, 3)
    big = np.ones((4, 3), np.float32)
    with pytest.raises(ResourceLimitError, match="input 'x' takes 48 bytes.*limit of 16"):
        session.run(None, {"x": big, "y": big})


def test_a_run_can_be_cancelled_from_another_thread(host, tensors):
    started = threading.Event()
    go_on = threading.Event()

    class Slow(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Add":
                def slow_add(x, y):
                    started.set()
                    go_on.wait(10)
                    return x + y
                return FunctionKernel(slow_add)
            return super().ep_host_create_kernel(node, context)

    host.register(Slow("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    options = RunOptions()
    errors: list[BaseException] = []

    def run():
        try:
            session.run(None, {"x": tensors.x, "y": tensors.y}, run_options=options)
        except HostError as exc:
            errors.append(exc)

    worker = threading.Thread(target=run)
    worker.start()
    assert started.wait(10)
    options.terminate = True
    go_on.set()
    worker.join(10)
    assert len(errors) == 1 and isinstance(errors[0], RunCancelledError)
    assert "cancelled" in str(errors[0]) and "'relu'" in str(errors[0])
    out = session.run(None, {"x": tensors.x, "y": tensors.y}, run_options=RunOptions())[0]
    np.testing.assert_allclose(out, np.maximum(tensors.x + tensors.y, 0))


def test_onnxruntime_run_options_cancel_too():
    options = ort.RunOptions()
    options.terminate = True
    x = np.ones((2, 3), np.float32)
    with pytest.raises(RunCancelledError):
        _cpu(add_relu_model()).run(None, {"x": x, "y": x}, run_options=options)


def test_eight_threads_mixing_failing_and_passing_runs_stay_apart():
    model = make_model(
        [helper.make_node("Expand", ["x", "shape"], ["y"], name="expand"),
         helper.make_node("Relu", ["y"], ["out"], name="relu")],
        [("x", TensorProto.FLOAT, [1]), ("shape", TensorProto.INT64, [2])],
        [("out", TensorProto.FLOAT, None)])
    session = _cpu(model, max_tensor_bytes=4000)
    errors: list[str] = []
    wrong: list[int] = []

    def work(k):
        for i in range(60):
            x = np.array([k - 3.5 + i], np.float32)
            kind = (k + i) % 3
            try:
                if kind == 0:
                    session.run(None, {"x": x, "shape": np.array([100, 100], np.int64)})
                elif kind == 1:
                    session.run(None, {"x": x.astype(np.float64), "shape": np.ones(2, np.int64)})
                else:
                    out = session.run(None, {"x": x, "shape": np.array([k + 1, 3], np.int64)})[0]
                    if out.shape != (k + 1, 3) or not np.all(out == max(x[0], 0)):
                        wrong.append(k)
                    continue
                wrong.append(k)  # a failing run returned
            except HostError as exc:
                errors.append(type(exc).__name__)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert wrong == []
    assert sorted(set(errors)) == ["InputError", "ResourceLimitError"]
    assert len(errors) == sum(1 for k in range(8) for i in range(60) if (k + i) % 3 != 2)
