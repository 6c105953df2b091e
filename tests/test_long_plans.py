"""Plans longer than one generated function run as a chain of them: values read across links
arrive, dead ones are freed, and failures and cancellations name the step of any link."""

import weakref

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import FunctionKernel, InferenceSession, KernelError, RunCancelledError, hookimpl
from ep_host.runloop import STEPS_PER_FUNCTION

F = TensorProto.FLOAT
LENGTH = 2 * STEPS_PER_FUNCTION + 500  # three links


def long_chain(length=LENGTH, shape=(2,)):
    """x -> Add(x, x) = a0 -> Relu -> ... -> a{length-2}; then y = Sub(last, x), and the graph
    also outputs a early value ``a3``, so x and a3 cross every link."""
    nodes = [helper.make_node("Add", ["x", "x"], ["a0"], name="n0")]
    for i in range(1, length - 1):
        op = "Add" if i % 2 else "Relu"
        inputs = [f"a{i - 1}", "x"] if op == "Add" else [f"a{i - 1}"]
        nodes.append(helper.make_node(op, inputs, [f"a{i}"], name=f"n{i}"))
    nodes.append(helper.make_node("Sub", [f"a{length - 2}", "x"], ["y"], name=f"n{length - 1}"))
    return make_model(nodes, [("x", F, list(shape))], [("y", F, list(shape)),
                                                        ("a3", F, list(shape))])


def expected(x, length=LENGTH):
    a = x + x
    values = [a]
    for i in range(1, length - 1):
        a = a + x if i % 2 else np.maximum(a, 0)
        values.append(a)
    return a - x, values[3]


def test_a_plan_longer_than_one_function_computes_every_value_across_links(host):
    host.register(InlineProvider("cpu", ops=("Add", "Relu", "Sub")), name="cpu")
    session = InferenceSession(long_chain().SerializeToString(), providers=["cpu"], host=host)
    x = np.array([1.5, -2.0], np.float32)
    y, a3 = session.run(None, {"x": x})
    want_y, want_a3 = expected(x)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(a3, want_a3)
    # and again: nothing of the first run stays behind in the links
    np.testing.assert_array_equal(session.run(["y"], {"x": -x})[0], expected(-x)[0])


class Watched(InlineProvider):
    """Records a weak reference to the output of node ``watch``; node ``check`` (run after the
    watched value's last reader) records whether that output is still alive."""

    def __init__(self, *args, watch, check, **kwargs):
        super().__init__(*args, **kwargs)
        self.watch, self.check = watch, check
        self.ref = None
        self.alive_at_check = None

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        fn = self.FUNCS[node.op_type]
        if node.name == self.watch:
            def watched(*inputs):
                out = fn(*inputs)
                self.ref = weakref.ref(out)
                return out
            return FunctionKernel(watched)
        if node.name == self.check:
            def checking(*inputs):
                self.alive_at_check = self.ref() is not None
                return fn(*inputs)
            return FunctionKernel(checking)
        return FunctionKernel(fn)


def test_a_value_dead_in_a_later_link_is_freed_there(host):
    # a{k} is read by node k+1 only (the next link when k ends the first); by node
    # STEPS_PER_FUNCTION + 10 nothing may still hold it
    k = STEPS_PER_FUNCTION - 1
    provider = Watched("cpu", ops=("Add", "Relu", "Sub"), watch=f"n{k}",
                       check=f"n{STEPS_PER_FUNCTION + 10}")
    host.register(provider, name="cpu")
    session = InferenceSession(long_chain().SerializeToString(), providers=["cpu"], host=host)
    session.run(None, {"x": np.ones(2, np.float32)})
    assert provider.alive_at_check is False


class FailsAt(InlineProvider):
    """Node ``fail`` raises; node ``cancel`` sets ``options.terminate``."""

    def __init__(self, *args, fail=None, cancel=None, options=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fail, self.cancel, self.options = fail, cancel, options

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        fn = self.FUNCS[node.op_type]
        if node.name == self.fail:
            def broken(*inputs):
                raise ValueError("the kernel broke")
            return FunctionKernel(broken)
        if node.name == self.cancel:
            def cancelling(*inputs):
                self.options.terminate = True
                return fn(*inputs)
            return FunctionKernel(cancelling)
        return FunctionKernel(fn)


@pytest.mark.parametrize("index", [5, STEPS_PER_FUNCTION + 3, LENGTH - 1])
def test_a_kernel_failing_in_any_link_is_named(host, index):
    host.register(FailsAt("cpu", ops=("Add", "Relu", "Sub"), fail=f"n{index}"), name="cpu")
    session = InferenceSession(long_chain().SerializeToString(), providers=["cpu"], host=host)
    with pytest.raises(KernelError, match=rf"node 'n{index}' .*provider 'cpu'.*the kernel broke"):
        session.run(None, {"x": np.ones(2, np.float32)})


def test_a_cancellation_in_a_later_link_names_the_next_step(host):
    from ep_host import RunOptions

    options = RunOptions()
    index = 2 * STEPS_PER_FUNCTION + 7
    host.register(FailsAt("cpu", ops=("Add", "Relu", "Sub"), cancel=f"n{index}",
                          options=options), name="cpu")
    session = InferenceSession(long_chain().SerializeToString(), providers=["cpu"], host=host)
    with pytest.raises(RunCancelledError, match=rf"before node 'n{index + 1}'"):
        session.run(None, {"x": np.ones(2, np.float32)}, options)
