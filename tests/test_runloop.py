"""The compiled run loop: one generated function per plan, with the same checks as the step
loop, and dead buffers handed to kernels that can write into them."""

import numpy as np
import pytest
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper

from ep_host import InferenceSession, Kernel, KernelError, RunOptions, hookimpl

F = TensorProto.FLOAT
BIG = [256, 256]  # 256 KiB of float32: big enough to reuse a dead buffer


class Donatable(Kernel):
    """Neg through ``call``, recording what ``out`` it was given."""

    inplace = (0,)

    def __init__(self, seen):
        self.seen = seen
        self.call = self._call

    def _call(self, x, out=None):
        self.seen.append(out is not None and out is x)
        return np.negative(x, out=out) if out is not None else np.negative(x)

    def run(self, x):
        return (np.negative(x),)


class Provider(InlineProvider):
    def __init__(self, *args, seen=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.seen = [] if seen is None else seen

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        if node.op_type == "Neg":
            return Donatable(self.seen)
        return super().ep_host_create_kernel(node, context)


def chain(shape, extra_reader=False):
    nodes = [helper.make_node("Add", ["x", "x"], ["a"], name="add"),
             helper.make_node("Neg", ["a"], ["b"], name="neg1"),
             helper.make_node("Neg", ["b"], ["y"], name="neg2")]
    outputs = [("y", F, shape)]
    if extra_reader:
        nodes.append(helper.make_node("Relu", ["a"], ["z"], name="relu"))
        outputs.append(("z", F, shape))
    return make_model(nodes, [("x", F, shape)], outputs)


def session_on(host, model, seen):
    host.register(Provider("cpu", ops=("Add", "Neg", "Relu"), seen=seen), name="cpu")
    return InferenceSession(model.SerializeToString(), providers=["cpu"], host=host)


def test_a_dead_intermediate_is_written_in_place_and_the_result_is_right(host):
    seen = []
    session = session_on(host, chain(BIG), seen)
    x = np.random.default_rng(0).standard_normal(BIG).astype(np.float32)
    keep = x.copy()
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, 2 * keep)
    np.testing.assert_array_equal(x, keep)  # the graph input is never written
    assert seen == [True, True]


def test_a_value_read_later_is_not_donated(host):
    seen = []
    session = session_on(host, chain(BIG, extra_reader=True), seen)
    x = np.ones(BIG, np.float32)
    y, z = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, 2 * x)
    np.testing.assert_array_equal(z, 2 * x)
    assert seen[0] is False


def test_small_tensors_are_not_worth_donating(host):
    seen = []
    session = session_on(host, chain([2, 3]), seen)
    session.run(None, {"x": np.ones((2, 3), np.float32)})
    assert seen == [False, False]


class Viewing(Kernel):
    """x + x returned as a view: of a fresh flat array (``"fresh"``), of a buffer the kernel
    keeps (``"kept"``), or every other column of a fresh wider array (``"strided"``)."""

    def __init__(self, how):
        self.how = how
        self.kept = None

    def run(self, x, _):
        if self.how == "strided":
            wide = np.empty(x.shape[:-1] + (2 * x.shape[-1],), x.dtype)
            y = wide[..., ::2]
            np.add(x, x, out=y)
            return (y,)
        flat = np.add(x, x).reshape(-1)
        if self.how == "kept":
            self.kept = flat
        return (flat.reshape(x.shape),)


@pytest.mark.parametrize("how, donated", [("fresh", True), ("kept", False),
                                          ("strided", False)])
def test_a_view_is_donated_only_when_nothing_else_holds_its_memory(host, how, donated):
    """A reshaped view of a kernel's fresh result may be written in place, like an array that
    owns its memory; a view of memory the kernel keeps, or a strided one, may not."""
    seen = []
    viewing = Viewing(how)

    class P(Provider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            if node.op_type == "Add":
                return viewing
            return super().ep_host_create_kernel(node, context)

    host.register(P("cpu", ops=("Add", "Neg"), seen=seen), name="cpu")
    model = chain(BIG)
    session = InferenceSession(model.SerializeToString(), providers=["cpu"], host=host)
    x = np.random.default_rng(2).standard_normal(BIG).astype(np.float32)
    (y,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, 2 * x)
    assert seen[0] is donated
    if how == "kept":  # the kernel's own buffer still holds its result
        np.testing.assert_array_equal(viewing.kept.reshape(BIG), 2 * x)


def test_the_compiled_and_the_step_loop_agree(host):
    session = session_on(host, chain(BIG, extra_reader=True), [])
    x = np.random.default_rng(1).standard_normal(BIG).astype(np.float32)
    fast = session.run(None, {"x": x})
    slow = session.run(None, {"x": x}, RunOptions())  # run options take the step loop
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_failing_kernel_is_named(host):
    class Failing(InlineProvider):
        FUNCS = {**InlineProvider.FUNCS, "Relu": lambda x: np.sqrt("no")}

    host.register(Failing("cpu"), name="cpu")
    model = make_model([helper.make_node("Add", ["x", "x"], ["a"], name="add"),
                        helper.make_node("Relu", ["a"], ["y"], name="the_relu")],
                       [("x", F, [2])], [("y", F, [2])])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"], host=host)
    with pytest.raises(KernelError, match="node 'the_relu' .*failed on provider 'cpu'"):
        session.run(None, {"x": np.ones(2, np.float32)})


@pytest.mark.parametrize("returned", ["scalar", "tuple"])
def test_call_results_are_normalised(host, returned):
    class Scalar(Kernel):
        def __init__(self):
            self.call = (lambda x: np.float32(x.sum())) if returned == "scalar" else (
                lambda x: (x.sum(keepdims=False), None))

        def run(self, x):
            return (np.asarray(x.sum()),)

    class P(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            return Scalar()

    host.register(P("cpu", ops=("ReduceSum",)), name="cpu")
    model = make_model([helper.make_node("ReduceSum", ["x"], ["y"], name="sum", keepdims=0)],
                       [("x", F, [3])], [("y", F, [])])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"], host=host)
    (y,) = session.run(None, {"x": np.arange(3, dtype=np.float32)})
    assert isinstance(y, np.ndarray) and y.shape == () and float(y) == 3.0


def test_the_step_loop_also_hands_out_a_numpy_scalar_as_a_0d_array(host):
    """A kernel's run may return a numpy scalar (numpy does, for 0-d inputs): the compiled run
    and the step loop (run options, tracing) both hand the next node a 0-d array."""
    seen = []

    class ScalarRun(Kernel):
        def run(self, x):
            seen.append(type(x))
            return (np.negative(x),)  # a numpy float32 scalar for a 0-d x

    class P(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            return ScalarRun()

    host.register(P("cpu", ops=("Neg",)), name="cpu")
    model = make_model([helper.make_node("Neg", ["x"], ["a"], name="first"),
                        helper.make_node("Neg", ["a"], ["y"], name="second")],
                       [("x", F, [])], [("y", F, [])])
    session = InferenceSession(model.SerializeToString(), providers=["cpu"], host=host)
    x = np.array(2.0, np.float32)
    assert isinstance(np.negative(x), np.generic)
    for options in (None, RunOptions()):
        seen.clear()
        (y,) = session.run(None, {"x": x}, options)
        assert seen == [np.ndarray, np.ndarray]  # what "second" was given
        assert type(y) is np.ndarray and y.shape == () and float(y) == 2.0
