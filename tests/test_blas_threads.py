"""The session holds numpy's BLAS pool at its thread count while it runs, and restores it;
a model whose every value is known to be small leaves the pool alone."""

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import FunctionKernel, InferenceSession, hookimpl
from ep_host.threads import (
    POOLS,
    SINGLE_THREAD_VALUES,
    BlasThreads,
    blas_stays_single,
    default_threads,
)

threadpoolctl = pytest.importorskip("threadpoolctl")


def blas_threads():
    return [lib.get_num_threads()
            for lib in threadpoolctl.ThreadpoolController().select(user_api="blas")
            .lib_controllers]


BIG = [64, 128]  # 8192 values: OpenBLAS may thread a call on such operands


def add_relu(shape):
    """x, y -> Add -> Relu -> out, float32 of ``shape``."""
    return make_model(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["out"], name="relu")],
        [("x", TensorProto.FLOAT, shape), ("y", TensorProto.FLOAT, shape)],
        [("out", TensorProto.FLOAT, shape)],
    )


def feeds(shape, open_dims=3):
    rng = np.random.default_rng(0)
    shape = [d if isinstance(d, int) else open_dims for d in shape]
    return {"x": rng.random(shape, np.float32), "y": rng.random(shape, np.float32)}


def probing_session(host, threads, shape=BIG):
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
    session = InferenceSession(add_relu(shape).SerializeToString(), providers=["cpu"],
                               host=host, intra_op_num_threads=threads)
    return session, seen


@pytest.fixture
def two_blas_threads():
    if not blas_threads():
        pytest.skip("numpy's BLAS is not visible to threadpoolctl here")
    with threadpoolctl.threadpool_limits(limits=2, user_api="blas"):
        yield


def test_a_run_uses_the_sessions_thread_count_and_restores_the_pool(host, two_blas_threads):
    session, seen = probing_session(host, 1)
    session.run(None, feeds(BIG))
    assert seen and all(n == 1 for n in seen[0])
    assert all(n == 2 for n in blas_threads())


def test_zero_leaves_the_pool_alone(host, two_blas_threads):
    session, seen = probing_session(host, 0)
    session.run(None, feeds(BIG))
    assert all(n == 2 for n in seen[0])


@pytest.mark.parametrize("shape, limited", [([2, 3], False), ([64, 64], False), (BIG, True)])
def test_a_model_of_small_known_values_leaves_the_pool_alone(host, two_blas_threads, shape,
                                                             limited):
    """OpenBLAS runs calls on operands of at most 4096 values on one thread whatever its pool:
    setting and restoring the pool would cost each run microseconds for nothing."""
    session, seen = probing_session(host, 1, shape)
    session.run(None, feeds(shape))
    assert all(n == (1 if limited else 2) for n in seen[0])
    assert all(n == 2 for n in blas_threads())


@pytest.mark.parametrize("rows, limited", [(3, False), (SINGLE_THREAD_VALUES // 3 + 1, True)])
def test_a_dynamic_shape_is_held_once_a_value_is_big(host, two_blas_threads, rows, limited):
    """A value of unknown size may be large: the run holds the pool at the first step that may
    call BLAS with an input over 4096 values (here 3 x 3, then 1366 x 3), and gives it back at
    its end; a run of small values leaves it alone."""
    session, seen = probing_session(host, 1, ["n", 3])
    assert session._run.holds_blas
    for _ in range(2):  # held and given back each run
        seen.clear()
        session.run(None, feeds(["n", 3], rows))
        assert all(n == (1 if limited else 2) for n in seen[0])
        assert all(n == 2 for n in blas_threads())


def test_a_run_that_fails_after_holding_the_pool_gives_it_back(host, two_blas_threads):
    class Provider(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Relu":
                def broken(x):
                    raise RuntimeError("relu broke")
                return FunctionKernel(broken)
            return FunctionKernel(self.FUNCS[node.op_type])

    host.register(Provider("cpu"), name="cpu")
    session = InferenceSession(add_relu(["n", 64]).SerializeToString(), providers=["cpu"],
                               host=host, intra_op_num_threads=1)
    with pytest.raises(Exception, match="relu broke"):
        session.run(None, feeds(["n", 64], 128))  # 8192 values: held before the Add
    assert all(n == 2 for n in blas_threads())


def test_a_plan_of_several_functions_holds_the_pool_for_the_whole_run(host, two_blas_threads,
                                                                       monkeypatch):
    """The lazy hold lives in a plan of one function; a longer plan (a chain of functions)
    holds the pool from the run's start, whatever its values."""
    monkeypatch.setattr("ep_host.runloop.STEPS_PER_FUNCTION", 1)
    session, seen = probing_session(host, 1, ["n", 3])
    assert not session._run.holds_blas
    session.run(None, feeds(["n", 3]))
    assert all(n == 1 for n in seen[0])
    assert all(n == 2 for n in blas_threads())


def test_small_values_are_those_of_known_shape_and_at_most_4096_values():
    assert blas_stays_single([(1, 10), (SINGLE_THREAD_VALUES,), (), (64, 64)])
    assert not blas_stays_single([(1, 10), (SINGLE_THREAD_VALUES + 1,)])
    assert not blas_stays_single([(1, None)])
    assert not blas_stays_single([None])


def test_the_default_is_one_thread_on_small_machines(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert default_threads() == 1
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert default_threads() == 0


def test_a_negative_count_is_refused():
    with pytest.raises(ValueError, match="intra_op_num_threads"):
        BlasThreads(-1)


def test_a_plan_of_ops_the_cpu_ep_runs_without_blas_leaves_the_pool_alone_at_any_batch(
        monkeypatch):
    """A tree ensemble with an open batch: no kernel of ep-host's CPU
    EP in it calls BLAS, so no run limits the pool; a linear model's scores are a BLAS GEMM,
    whose threads an open batch may raise, so its runs hold the limit once a value is big."""
    ml = [("ai.onnx.ml", 3)]
    tree = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_values=[0.5, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], target_treeids=[0, 0],
        target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, -1.0])
    linear = helper.make_node("LinearRegressor", ["x"], ["y"], domain="ai.onnx.ml",
                              coefficients=[1.0, 2.0], intercepts=[0.5])
    small = np.array([[0.0, 1.0], [1.0, 1.0]], np.float32)
    big = np.tile(small, (SINGLE_THREAD_VALUES, 1))  # 8192 x 2
    for node, limited, want in ((tree, False, [[1.0], [-1.0]]),
                                (linear, True, [[2.5], [3.5]])):
        model = make_model([node], [("x", TensorProto.FLOAT, [None, 2])],
                           [("y", TensorProto.FLOAT, [None, 1])], domains=ml)
        held = []  # the calls that hold (+limit) and give back (-limit) the pool
        monkeypatch.setattr(POOLS, "enter", held.append)
        monkeypatch.setattr(POOLS, "exit", lambda limit, held=held: held.append(-limit))
        session = InferenceSession(model.SerializeToString(), providers=["cpu"],
                                   intra_op_num_threads=1)
        np.testing.assert_allclose(session.run(None, {"x": small})[0], want)
        assert held == []  # two rows: no run holds the pool
        np.testing.assert_allclose(session.run(None, {"x": big})[0], np.tile(want, (4096, 1)))
        assert held == ([1, -1] if limited else [])
