"""The session holds numpy's BLAS pool at its thread count while it runs, and restores it."""

import numpy as np
import pytest
from hostkit import InlineProvider, add_relu_model

from ep_host import FunctionKernel, InferenceSession, hookimpl
from ep_host.threads import BlasThreads, default_threads

threadpoolctl = pytest.importorskip("threadpoolctl")


def blas_threads():
    return [lib.get_num_threads()
            for lib in threadpoolctl.ThreadpoolController().select(user_api="blas")
            .lib_controllers]


def probing_session(host, threads):
    seen = []

    class Provider(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Relu":
                def relu(x):
                    seen.append(blas_threads())
                    return np.maximum(x, 0)
                return FunctionKernel(relu)
            return FunctionKernel(self.FUNCS[node.op_type])

    host.register(Provider("cpu"), name="cpu")
    session = InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"], host=host,
                               intra_op_num_threads=threads)
    return session, seen


@pytest.fixture
def two_blas_threads():
    if not blas_threads():
        pytest.skip("numpy's BLAS is not visible to threadpoolctl here")
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        yield


def test_a_run_uses_the_sessions_thread_count_and_restores_the_pool(host, tensors,
                                                                      two_blas_threads):
    session, seen = probing_session(host, 1)
    session.run(None, {"x": tensors.x, "y": tensors.y})
    assert seen and all(n == 1 for n in seen[0])
    assert all(n == 2 for n in blas_threads())


def test_zero_leaves_the_pool_alone(host, tensors, two_blas_threads):
    session, seen = probing_session(host, 0)
    session.run(None, {"x": tensors.x, "y": tensors.y})
    assert all(n == 2 for n in seen[0])


def test_the_default_is_one_thread_on_small_machines(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_threads() == 1
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert default_threads() == 0


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="intra_op_num_threads"):
        BlasThreads(-1)
