"""Broken provider plugins: hangs, failing kernel creation, kernels that lie or write inputs."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hostkit import InlineProvider, add_relu_model, make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import HOST, FunctionKernel, InferenceSession, hookimpl
from ep_host.discovery import Host
from ep_host.errors import KernelError, ProviderError


def _x(tensors):
    return {"x": tensors.x, "y": tensors.y}


def test_a_supports_op_that_hangs_becomes_a_fault_decline(tensors):
    release = threading.Event()

    class Hangs(InlineProvider):
        @hookimpl
        def ep_host_supports_op(self, node, context):
            release.wait(30)
            return super().ep_host_supports_op(node, context)

    host = Host(strict=False, hook_timeout=0.2)
    host.register(Hangs("stuck"), "stuck")
    host.register(InlineProvider("cpu"), "cpu")
    start = time.monotonic()
    try:
        session = InferenceSession(add_relu_model(), providers=["stuck", "cpu"], host=host)
    finally:
        release.set()
    assert time.monotonic() - start < 5  # one timeout, then the provider is marked failed
    answers = session.placement.table.answers
    assert answers["add"]["stuck"].reason == "provider did not answer within 0.2 s"
    assert answers["add"]["stuck"].code == "fault"
    assert "did not answer within 0.2 s" in answers["relu"]["stuck"].reason
    assert host.records["stuck"].status == "failed"
    assert {n.provider for n in session.placement.nodes} == {"cpu"}
    out = session.run(None, _x(tensors))[0]
    np.testing.assert_allclose(out, np.maximum(tensors.x + tensors.y, 0))


def test_a_hang_in_strict_mode_is_a_provider_error():
    release = threading.Event()

    class Hangs(InlineProvider):
        @hookimpl
        def ep_host_supports_op(self, node, context):
            release.wait(30)

    host = Host(strict=True, hook_timeout=0.1)
    host.register(Hangs("stuck"), "stuck")
    try:
        with pytest.raises(ProviderError, match="'stuck'.*did not answer within 0.1 s"):
            InferenceSession(add_relu_model(), providers=["stuck"], host=host)
    finally:
        release.set()


def test_the_hook_time_limit_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("EP_HOST_HOOK_TIMEOUT", "2.5")
    assert Host().hook_timeout == 2.5
    monkeypatch.setenv("EP_HOST_HOOK_TIMEOUT", "0")
    assert Host().hook_timeout is None
    monkeypatch.delenv("EP_HOST_HOOK_TIMEOUT")
    assert Host().hook_timeout == 10.0


class CannotCreate(InlineProvider):
    """Claims like InlineProvider, but every kernel it makes fails."""

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        raise RuntimeError("out of device memory")


def test_a_raising_create_kernel_falls_back_to_the_next_claimant(host, tensors):
    host.register(CannotCreate("fast", cost_us=0.1), "fast")
    host.register(InlineProvider("cpu", cost_us=5.0), "cpu")
    session = InferenceSession(add_relu_model(), providers=["fast", "cpu"], host=host,
                               strategy="greedy")
    assert {n.provider for n in session.placement.nodes} == {"cpu"}
    assert any("out of device memory" in w and "runs on 'cpu' instead" in w
               for w in session.model.warnings)
    out = session.run(None, _x(tensors))[0]
    np.testing.assert_allclose(out, np.maximum(tensors.x + tensors.y, 0))


def test_when_every_claimant_fails_to_create_the_error_lists_them(host):
    class CannotCreate(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            raise RuntimeError(f"{self.name} is broken")

    host.register(CannotCreate("a"), "a")
    host.register(CannotCreate("b"), "b")
    with pytest.raises(KernelError, match="(?s)no provider that claims node 'add'.*"
                                          "'a'.*a is broken.*'b'.*b is broken"):
        InferenceSession(add_relu_model(), providers=["a", "b"], host=host)


@pytest.mark.parametrize("result, message", [
    (lambda x, y: (), "returned 0 output"),
    (lambda x, y: np.zeros((3, 2), np.float32), r"output 0 with shape \[3, 2\], expected \[2, 3\]"),
    (lambda x, y: (x + y).astype(np.float64), "output 0 with dtype float64, expected float32"),
    (lambda x, y: np.zeros((2, 3, 1), np.float32), r"shape \[2, 3, 1\]"),
], ids=["count", "shape", "dtype", "rank"])
def test_a_kernel_returning_the_wrong_count_shape_or_dtype_is_a_kernel_error(
        tensors, result, message):
    host = Host(strict=True)
    class Lies(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Add":
                return FunctionKernel(result)
            return super().ep_host_create_kernel(node, context)

    host.register(Lies("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    with pytest.raises(KernelError, match=f"node 'add'.*provider 'cpu'.*{message}"):
        session.run(None, _x(tensors))


def _writer_model():
    """x + w (w a constant) -> Relu."""
    return make_model(
        [helper.make_node("Add", ["x", "w"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["out"], name="relu")],
        [("x", TensorProto.FLOAT, [2, 3])], [("out", TensorProto.FLOAT, [2, 3])],
        initializers=[numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])


@pytest.mark.parametrize("victim", [0, 1], ids=["graph-input", "constant"])
def test_a_kernel_cannot_write_into_graph_inputs_or_constants(host, victim):
    class Writes(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Add":
                def add_in_place(*args):
                    np.add(args[0], args[1], out=args[victim])
                    return args[victim]
                return FunctionKernel(add_in_place)
            return super().ep_host_create_kernel(node, context)

    host.register(Writes("cpu"), "cpu")
    session = InferenceSession(_writer_model(), providers=["cpu"], host=host)
    x = np.full((2, 3), 2.0, np.float32)
    with pytest.raises(KernelError, match="node 'add'.*provider 'cpu'.*read-only"):
        session.run(None, {"x": x})
    np.testing.assert_array_equal(x, 2.0)
    w = session.model.graph.values["w"].value
    np.testing.assert_array_equal(w, 1.0)


def test_a_shape_differing_from_inference_is_an_error_by_default(host, tensors):
    class Lies(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Add":
                return FunctionKernel(lambda x, y: np.zeros((3, 2), np.float32))
            return super().ep_host_create_kernel(node, context)

    host.register(Lies("cpu"), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    with pytest.raises(KernelError, match=r"node 'add'.*shape \[3, 2\], expected \[2, 3\]"):
        session.run(None, _x(tensors))


def test_hook_worker_threads_end_with_their_calling_thread():
    host = Host(strict=False, hook_timeout=5.0)
    host.register(InlineProvider("cpu"), "cpu")

    def create():
        InferenceSession(add_relu_model(), providers=["cpu"], host=host)

    before = sum(t.name == "ep-host-hook" for t in threading.enumerate())
    for _ in range(5):
        t = threading.Thread(target=create)
        t.start()
        t.join()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if sum(t.name == "ep-host-hook" for t in threading.enumerate()) <= before:
            break
        time.sleep(0.05)
    assert sum(t.name == "ep-host-hook" for t in threading.enumerate()) <= before


def test_a_fallback_to_another_device_updates_the_placements_copies(host, tensors):
    """When a kernel moves to the next claimant on another device, the placement's copies are
    those of where the nodes now run, not of the plan that was chosen."""
    from ep_host import Device
    from ep_host.transfers import implied_transfers

    class NoRelu(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Relu":
                raise RuntimeError("no Relu kernel on this device")
            return FunctionKernel(self.FUNCS[node.op_type])

    copy = lambda a: np.array(a, copy=True)  # noqa: E731
    device = Device(name="sim:0", kind="sim", link_gbps=10.0, link_latency_us=5.0,
                    to_host=copy, from_host=copy)
    host.register(NoRelu("dev", cost_us=0.1, device=device), "dev")
    host.register(InlineProvider("cpu", cost_us=50.0), "cpu")
    session = InferenceSession(add_relu_model(), providers=["dev", "cpu"], host=host,
                               strategy="greedy")
    assert session.placement.by_node["relu"].provider == "cpu"
    copies = {(t.tensor, t.source, t.destination) for t in session.placement.transfers}
    assert ("s", "sim:0", "cpu") in copies  # Add's output now goes to the host Relu
    assert not any(t == "out" for t, _, _ in copies)  # Relu's output is already on the host
    assert session.placement.transfers == implied_transfers(session.placement)
    out = session.run(None, _x(tensors))[0]
    np.testing.assert_allclose(out, np.maximum(tensors.x + tensors.y, 0))


def test_a_fallback_makes_a_new_placement_and_leaves_the_chosen_one_as_it_was(host):
    """Building kernels never edits the placement it was given: a node that moves to the next
    claimant is in the plan's own placement value."""
    from ep_host.capability import walk
    from ep_host.loading import load_model
    from ep_host.placement import choose
    from ep_host.session import _Runtime

    host.register(CannotCreate("fast", cost_us=0.1), "fast")
    host.register(InlineProvider("cpu", cost_us=5.0), "cpu")
    model = load_model(add_relu_model())
    runtime = _Runtime(model, host, ["fast", "cpu"], {}, "greedy")
    chosen = choose(walk(host, model, ["fast", "cpu"]), {"fast": HOST, "cpu": HOST},
                    strategy="greedy")
    before = [(n.name, n.provider, n.cost_us) for n in chosen.nodes]
    plan, _ = runtime.plan(model.graph, chosen)
    assert [(n.name, n.provider, n.cost_us) for n in chosen.nodes] == before
    assert {n.provider for n in chosen.nodes} == {"fast"}
    assert {n.provider for n in plan.placement.nodes} == {"cpu"}
    assert plan.placement is not chosen
