"""Cancelling runs: ``RunOptions.terminate`` stops Loop and Scan between body runs, and a run
timeout abandons a kernel that never returns."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hostkit import InlineProvider, add_relu_model, make_model
from onnx import TensorProto, helper

from ep_host import FunctionKernel, InferenceSession, KernelError, hookimpl
from ep_host.errors import InputError, RunCancelledError
from ep_host.ort_api import RunOptions

HANG_GUARD_S = 60  # a run that is not cancelled would go on for hours: fail instead of hanging


def _loop_model(body_nodes, x_out):
    """x -> Loop(trip_count, cond=True) whose body maps (i, cond, x) -> (cond, x_out)."""
    body = helper.make_graph(
        body_nodes + [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info(x_out, TensorProto.FLOAT, [1])])
    loop = helper.make_node("Loop", ["n", "cond", "x"], ["y"], name="loop", body=body)
    return make_model([loop],
                      [("n", TensorProto.INT64, []), ("cond", TensorProto.BOOL, []),
                       ("x", TensorProto.FLOAT, [1])],
                      [("y", TensorProto.FLOAT, [1])])


def _run_in_thread(session, feeds, options):
    outcome: dict = {}

    def run():
        try:
            outcome["outputs"] = session.run(None, feeds, run_options=options)
        except BaseException as exc:
            outcome["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker, outcome


def _loop_feeds(n):
    return {"n": np.array(n, np.int64), "cond": np.array(True), "x": np.zeros(1, np.float32)}


@pytest.mark.parametrize("body_nodes, x_out", [
    ([helper.make_node("Add", ["x_in", "x_in"], ["x_out"], name="double")], "x_out"),
    ([], "x_in"),  # a body with no step of its own: the check at each body run stops it
], ids=["body-with-a-node", "body-without-nodes"])
def test_terminate_stops_a_loop_with_a_huge_trip_count(body_nodes, x_out):
    session = InferenceSession(_loop_model(body_nodes, x_out).SerializeToString(),
                               providers=["cpu"])
    np.testing.assert_array_equal(session.run(None, _loop_feeds(3))[0], [0.0])
    options = RunOptions()
    worker, outcome = _run_in_thread(session, _loop_feeds(10**15), options)
    worker.join(0.3)
    assert worker.is_alive()  # 10**15 iterations: still running
    options.terminate = True
    worker.join(HANG_GUARD_S)
    assert not worker.is_alive()
    assert isinstance(outcome.get("error"), RunCancelledError), outcome
    assert "cancelled (RunOptions.terminate)" in str(outcome["error"])


def test_terminate_stops_a_scan_over_a_long_sequence():
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"], name="acc")], "body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [1])])
    scan = helper.make_node("Scan", ["s", "xs"], ["total"], name="scan", body=body,
                            num_scan_inputs=1)
    model = make_model([scan], [("s", TensorProto.FLOAT, [1]), ("xs", TensorProto.FLOAT, ["t", 1])],
                       [("total", TensorProto.FLOAT, [1])])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    feeds = {"s": np.zeros(1, np.float32), "xs": np.ones((3, 1), np.float32)}
    np.testing.assert_array_equal(session.run(None, feeds)[0], [3.0])
    options = RunOptions()
    options.terminate = True
    with pytest.raises(RunCancelledError, match="cancelled"):
        session.run(None, {"s": feeds["s"], "xs": np.ones((10**6, 1), np.float32)},
                    run_options=options)


class Stuck(InlineProvider):
    """Its Add kernel waits for ``release`` (a kernel stuck in ``run``)."""

    def __init__(self, release, started):
        super().__init__("cpu")
        self.release = release
        self.started = started

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        if node.op_type == "Add":
            def stuck_add(x, y):
                self.started.set()
                self.release.wait(HANG_GUARD_S)
                return x + y
            return FunctionKernel(stuck_add)
        return super().ep_host_create_kernel(node, context)


def test_a_run_timeout_abandons_a_kernel_stuck_in_run(host, tensors):
    release, started = threading.Event(), threading.Event()
    host.register(Stuck(release, started), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    options = RunOptions()
    options.timeout_s = 0.2
    feeds = {"x": tensors.x, "y": tensors.y}
    try:
        with pytest.raises(RunCancelledError,
                           match=r"did not finish within 0.2 s.*abandoned while node 'add'"):
            session.run(None, feeds, run_options=options)
        assert started.is_set()
    finally:
        release.set()
    # the session still runs, with or without a time limit
    options.timeout_s = float(HANG_GUARD_S)
    out = session.run(None, feeds, run_options=options)[0]
    np.testing.assert_allclose(out, np.maximum(tensors.x + tensors.y, 0))
    np.testing.assert_allclose(session.run(None, feeds)[0], out)


def test_the_run_timeout_comes_from_the_environment(monkeypatch, host, tensors):
    monkeypatch.setenv("EP_HOST_RUN_TIMEOUT", "0.2")
    release, started = threading.Event(), threading.Event()
    host.register(Stuck(release, started), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    try:
        with pytest.raises(RunCancelledError, match="EP_HOST_RUN_TIMEOUT"):
            session.run(None, {"x": tensors.x, "y": tensors.y})
    finally:
        release.set()


@pytest.mark.parametrize("raw", ["soon", "-1", "nan"])
def test_a_bad_run_timeout_in_the_environment_is_refused(monkeypatch, raw):
    monkeypatch.setenv("EP_HOST_RUN_TIMEOUT", raw)
    with pytest.raises(InputError, match="EP_HOST_RUN_TIMEOUT"):
        InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"])


def test_under_a_timeout_results_and_errors_are_those_of_a_plain_run(host, tensors):
    class Fails(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Relu":
                def broken(x):
                    raise ValueError("relu is broken")
                return FunctionKernel(broken)
            return super().ep_host_create_kernel(node, context)

    options = RunOptions()
    options.timeout_s = float(HANG_GUARD_S)
    feeds = {"x": tensors.x, "y": tensors.y}
    good = InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"])
    np.testing.assert_allclose(good.run(None, feeds, run_options=options)[0],
                               np.maximum(tensors.x + tensors.y, 0))
    host.register(Fails("cpu"), "cpu")
    bad = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    with pytest.raises(KernelError, match="node 'relu'.*relu is broken"):
        bad.run(None, feeds, run_options=options)
