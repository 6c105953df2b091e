"""Workspaces: a kernel states the scratch memory it needs (``Kernel.workspace``); the host
allocates it once on the kernel's device and passes it to every call as ``workspace=``. Per-run
workspaces share one arena per device, sized to the largest, and each concurrent run takes its
own; a session workspace is the kernel's own and its calls are serialised; a wrong request is
its provider's fault, named."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import (
    InferenceSession,
    Kernel,
    KernelError,
    ResourceLimitError,
    Workspace,
    hookimpl,
)
from ep_host import runloop as runloop_module


class Scratch(Kernel):
    """y = x + 1, computed through its workspace (x copied in, then 1 added there)."""

    def __init__(self, request, log, via_call=True):
        self.request = request
        self.log = log
        self.seen_meta = None
        if via_call:
            self.call = self.compute

    def workspace(self, inputs):
        self.seen_meta = inputs
        return self.request(inputs) if callable(self.request) else self.request

    def compute(self, x, workspace=None):
        self.log.append(workspace)
        if workspace is None:
            return x + 1
        tmp = workspace[:x.nbytes].view(x.dtype).reshape(x.shape)
        np.copyto(tmp, x)
        tmp += 1
        return tmp.copy()

    def run(self, x, workspace=None):
        return (self.compute(x, workspace=workspace),)


class ScratchProvider(InlineProvider):
    def __init__(self, request, via_call=True):
        super().__init__("scratch", ops=("Relu",))
        self.request = request
        self.via_call = via_call
        self.log = []
        self.kernels = []

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        kernel = Scratch(self.request, self.log, self.via_call)
        self.kernels.append(kernel)
        return kernel


def chain(n, shape=(2, 3)):
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"v{i}"], [f"v{i + 1}"],
                              name=f"r{i}") for i in range(n)]
    return make_model(nodes, [("x", TensorProto.FLOAT, list(shape))],
                      [(f"v{n}", TensorProto.FLOAT, list(shape))])


def start(host, provider, model, **kwargs):
    host.register(provider, "scratch")
    return InferenceSession(model, providers=["scratch"], host=host, **kwargs)


@pytest.mark.parametrize("via_call", [True, False])
def test_every_call_gets_its_workspace(host, via_call):
    provider = ScratchProvider(Workspace(24), via_call=via_call)
    session = start(host, provider, chain(2))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + 2)
    assert len(provider.log) == 2 and all(isinstance(w, np.ndarray) for w in provider.log)
    assert provider.log[0].dtype == np.uint8 and provider.log[0].nbytes == 24
    kernel = provider.kernels[0]
    assert kernel.seen_meta == ((np.dtype(np.float32), (2, 3)),)


def test_run_workspaces_share_one_arena_sized_to_the_largest(host):
    sizes = iter([24, 100, 40])
    provider = ScratchProvider(lambda inputs: Workspace(next(sizes)))
    session = start(host, provider, chain(3))
    x = np.ones((2, 3), np.float32)
    session.run(None, {"x": x})
    session.run(None, {"x": x})
    first, second = provider.log[:3], provider.log[3:]
    assert [w.nbytes for w in first] == [24, 100, 40]
    bases = {id(w.base) for w in first + second}
    assert len(bases) == 1 and first[0].base.nbytes == 100  # one arena, kept between runs


def test_concurrent_runs_take_arenas_of_their_own(host):
    inside = threading.Barrier(2, timeout=10)

    class Waits(Scratch):
        def compute(self, x, workspace=None):
            self.log.append(workspace)
            inside.wait()  # both runs are inside the kernel at once
            return x + 1

    provider = ScratchProvider(Workspace(24))
    provider.ep_host_create_kernel = hookimpl(
        lambda node, context: Waits(Workspace(24), provider.log))
    session = start(host, provider, chain(1))
    x = np.ones((2, 3), np.float32)
    threads = [threading.Thread(target=session.run, args=(None, {"x": x})) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(provider.log) == 2
    assert not np.shares_memory(provider.log[0], provider.log[1])


def test_a_session_workspace_is_the_kernels_own_and_kept(host):
    provider = ScratchProvider(Workspace(24, "session"))
    session = start(host, provider, chain(2))
    x = np.ones((2, 3), np.float32)
    session.run(None, {"x": x})
    session.run(None, {"x": x})
    a, b, a_again, b_again = provider.log
    assert a is a_again and b is b_again and not np.shares_memory(a, b)
    assert all(step.lock is not None for step in session._plan.steps)  # calls serialised


def test_no_workspace_when_none_is_asked(host):
    provider = ScratchProvider(None)
    session = start(host, provider, chain(1))
    session.run(None, {"x": np.ones((2, 3), np.float32)})
    assert provider.log == [None]
    assert session._plan.arenas == {}


def test_a_long_plan_carries_the_arena_through_every_link(host, monkeypatch):
    monkeypatch.setattr(runloop_module, "STEPS_PER_FUNCTION", 2)
    provider = ScratchProvider(Workspace(24))
    session = start(host, provider, chain(5))
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], x + 5)
    assert len(provider.log) == 5 and all(w is not None for w in provider.log)
    assert len({id(w.base) for w in provider.log}) == 1


@pytest.mark.parametrize("asked", [24, Workspace(-1), Workspace(8, "forever"),
                                   Workspace(8.0)])
def test_a_wrong_request_is_the_providers_fault(host, asked):
    with pytest.raises(KernelError, match=r"provider 'scratch' asked for workspace .* for node "
                                          r"'r0'; expected a Workspace of nbytes >= 0"):
        start(host, ScratchProvider(asked), chain(1))


def test_a_kernel_that_fails_to_state_its_workspace_names_provider_and_node(host):
    def fails(inputs):
        raise RuntimeError("cannot tell")

    with pytest.raises(KernelError, match=r"provider 'scratch' failed to state the workspace "
                                          r"of node 'r0': RuntimeError: cannot tell"):
        start(host, ScratchProvider(fails), chain(1))


def test_a_workspace_over_the_size_limit_is_refused_before_any_run(host):
    with pytest.raises(ResourceLimitError, match=r"workspace of 4096 bytes for node 'r0', "
                                                 r"over the limit of 1000"):
        start(host, ScratchProvider(Workspace(4096)), chain(1), max_tensor_bytes=1000)
