"""What a kernel returns is checked: an array of its device's type, the declared dtype and the
inferred static shape, else a KernelError naming node, provider and output."""

from __future__ import annotations

import numpy as np
import pytest
from hostkit import InlineProvider, add_relu_model, make_model
from onnx import TensorProto, helper

from ep_host import (
    Device,
    FunctionKernel,
    Host,
    InferenceSession,
    Kernel,
    KernelError,
    ResourceLimitError,
    hookimpl,
)


class Returns(Kernel):
    """A kernel whose ``run`` returns ``outputs(x, y)`` as its sequence of outputs."""

    def __init__(self, outputs):
        self.outputs = outputs

    def run(self, *inputs):
        return self.outputs(*inputs)


class CallReturns(Kernel):
    """A one-output kernel answering through ``call``."""

    def __init__(self, fn):
        self.call = fn

    def run(self, *inputs):
        return (self.call(*inputs),)


class Lies(InlineProvider):
    """Its Add kernel is ``kernel``; Relu is honest."""

    def __init__(self, kernel, **kwargs):
        super().__init__("cpu", **kwargs)
        self.kernel = kernel

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        if node.op_type == "Add":
            return self.kernel
        return super().ep_host_create_kernel(node, context)


def _run(host, kernel, model=None, feeds=None, **kwargs):
    host.register(Lies(kernel, **kwargs), "cpu")
    session = InferenceSession(model or add_relu_model(), providers=["cpu"], host=host)
    x = np.ones((2, 3), np.float32)
    return session.run(None, feeds or {"x": x, "y": x})


@pytest.mark.parametrize("kernel, message", [
    (Returns(lambda x, y: ([[2.0] * 3] * 2,)), "type list, expected numpy.ndarray"),
    (Returns(lambda x, y: ((v for v in (x + y)),)), "type generator, expected numpy.ndarray"),
    (Returns(lambda x, y: (np.ones((), np.float32),)), r"shape \[\], expected \[2, 3\]"),
    (Returns(lambda x, y: (np.zeros((3, 2), np.float32),)), r"shape \[3, 2\], expected \[2, 3\]"),
    (Returns(lambda x, y: ((x + y).astype(np.float64),)), "dtype float64, expected float32"),
    (Returns(lambda x, y: (np.ma.masked_array(x + y),)),
     "type numpy.ma.*MaskedArray, expected numpy.ndarray"),
    (CallReturns(lambda x, y: [[2.0] * 3] * 2), "type list, expected numpy.ndarray"),
    (CallReturns(lambda x, y: np.zeros((), np.float32)), r"shape \[\], expected \[2, 3\]"),
], ids=["list", "generator", "0-d", "transposed", "float64", "subclass", "call-list", "call-0-d"])
def test_an_output_that_is_not_the_declared_array_fails_the_run(host, kernel, message):
    with pytest.raises(KernelError,
                       match=f"node 'add'.*provider 'cpu'.*output 0 with {message}.*value 's'"):
        _run(host, kernel)


def test_the_shape_mismatch_fails_every_run_not_only_the_first(host):
    host.register(Lies(Returns(lambda x, y: (np.zeros((3, 2), np.float32),))), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    x = np.ones((2, 3), np.float32)
    for _ in range(2):
        with pytest.raises(KernelError, match="node 'add'"):
            session.run(None, {"x": x, "y": x})


def test_a_numpy_scalar_is_still_taken_as_a_0_d_array(host):
    model = make_model([helper.make_node("Add", ["x", "y"], ["s"], name="add"),
                        helper.make_node("Relu", ["s"], ["out"], name="relu")],
                       [("x", TensorProto.FLOAT, []), ("y", TensorProto.FLOAT, [])],
                       [("out", TensorProto.FLOAT, [])])
    kernel = Returns(lambda x, y: (np.float32(x + y),))
    x = np.array(-2.5, np.float32)
    (out,) = _run(host, kernel, model, {"x": x, "y": np.array(4.0, np.float32)})
    assert out.__class__ is np.ndarray and out.shape == () and out == 1.5


def test_symbolic_dims_take_any_size_but_the_rank_is_checked(host):
    model = make_model([helper.make_node("Add", ["x", "y"], ["s"], name="add"),
                        helper.make_node("Relu", ["s"], ["out"], name="relu")],
                       [("x", TensorProto.FLOAT, ["n", 3]), ("y", TensorProto.FLOAT, ["n", 3])],
                       [("out", TensorProto.FLOAT, ["n", 3])])
    x = np.ones((5, 3), np.float32)
    (out,) = _run(host, Returns(lambda a, b: (a + b,)), model, {"x": x, "y": x})
    np.testing.assert_array_equal(out, 2.0)
    with pytest.raises(KernelError, match=r"node 'add'.*shape \[15\], expected \['\?', 3\]"):
        _run(Host(strict=False), Returns(lambda a, b: ((a + b).reshape(-1),)), model,
             {"x": x, "y": x})


class OnDevice:
    def __init__(self, array):
        self.array = array


def _device_session(host, to_host, returns, array_type=None):
    device = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=1.0,
                    to_host=to_host, from_host=OnDevice, array_type=array_type)

    class OnSim(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            return FunctionKernel(lambda x, y: returns(x.array + y.array))

    host.register(OnSim("sim", ops=("Add",), device=device), "sim")
    host.register(InlineProvider("cpu", ops=("Relu",)), "cpu")
    session = InferenceSession(add_relu_model(), providers=["sim", "cpu"], host=host)
    assert session.placement.by_node["add"].provider == "sim"
    return session


def test_a_device_whose_to_host_returns_a_list_fails_the_copy(host, tensors):
    session = _device_session(host, lambda d: d.array.tolist(), OnDevice)
    with pytest.raises(KernelError, match="device 'sim:0' returned type list, expected "
                                          "numpy.ndarray.*copy s.*to_host"):
        session.run(None, {"x": tensors.x, "y": tensors.y})


def test_a_device_kernel_must_return_the_devices_array_type(host, tensors):
    session = _device_session(host, lambda d: d.array, lambda a: a, array_type=OnDevice)
    with pytest.raises(KernelError, match="node 'add'.*provider 'sim'.*output 0 with type "
                                          "numpy.ndarray, expected .*OnDevice"):
        session.run(None, {"x": tensors.x, "y": tensors.y})


def test_on_a_device_that_names_no_array_type_a_list_is_still_refused(host, tensors):
    session = _device_session(host, lambda d: d.array, lambda a: ([a.tolist()],))
    with pytest.raises(KernelError, match="node 'add'.*provider 'sim'.*output 0 with type "
                                          "list, expected an array"):
        session.run(None, {"x": tensors.x, "y": tensors.y})


def test_honest_device_kernels_still_run(host, tensors):
    session = _device_session(host, lambda d: d.array, OnDevice, array_type=OnDevice)
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    np.testing.assert_allclose(out, np.maximum(tensors.x + tensors.y, 0))


# -- aliasing: what the caller gets is the caller's, what the caller gives is never written ----

class Persistent(Kernel):
    """Relu into one buffer it keeps across runs; ``view``: returns a view of that buffer."""

    def __init__(self, view=False):
        self.buffer = None
        self.view = view

    def run(self, s):
        if self.buffer is None:
            self.buffer = np.empty_like(s)
        np.maximum(s, 0, out=self.buffer)
        return (self.buffer[:] if self.view else self.buffer,)


class Keeps(InlineProvider):
    def __init__(self, kernels, **kwargs):
        super().__init__("cpu", **kwargs)
        self.kernels = kernels

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        if node.op_type in self.kernels:
            return self.kernels[node.op_type]
        return super().ep_host_create_kernel(node, context)


@pytest.mark.parametrize("view", [False, True], ids=["buffer", "view-of-buffer"])
def test_a_kernels_persistent_buffer_does_not_change_an_earlier_result(host, view):
    host.register(Keeps({"Relu": Persistent(view)}), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    ones = np.ones((2, 3), np.float32)
    (first,) = session.run(None, {"x": ones, "y": ones})
    (second,) = session.run(None, {"x": 3 * ones, "y": ones})
    np.testing.assert_array_equal(first, 2.0)
    np.testing.assert_array_equal(second, 4.0)
    first[...] = -1  # the caller owns it: writing it changes nothing of the session's
    (third,) = session.run(None, {"x": ones, "y": ones})
    np.testing.assert_array_equal(third, 2.0)
    np.testing.assert_array_equal(second, 4.0)


def test_two_outputs_of_one_value_are_two_arrays(host):
    model = make_model([helper.make_node("Add", ["x", "y"], ["s"], name="add"),
                        helper.make_node("Relu", ["s"], ["out"], name="relu")],
                       [("x", TensorProto.FLOAT, [2, 3]), ("y", TensorProto.FLOAT, [2, 3])],
                       [("out", TensorProto.FLOAT, [2, 3])])
    host.register(InlineProvider("cpu"), "cpu")
    session = InferenceSession(model, providers=["cpu"], host=host)
    ones = np.ones((2, 3), np.float32)
    a, b = session.run(["out", "out"], {"x": ones, "y": ones})
    a[...] = 0
    np.testing.assert_array_equal(b, 2.0)


def _flips_and_writes(*args):
    """A hostile kernel: makes each input writeable and writes into it."""
    for a in args:
        a.flags.writeable = True
        a[...] = 99
    return args[0] + args[1]


def test_a_kernel_cannot_make_the_callers_input_writeable(host):
    host.register(Keeps({"Add": FunctionKernel(_flips_and_writes)}), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    x = np.ones((2, 3), np.float32)
    y = np.full((2, 3), 2.0, np.float32)
    with pytest.raises(KernelError, match="node 'add'.*provider 'cpu'.*WRITEABLE"):
        session.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(x, 1.0)
    np.testing.assert_array_equal(y, 2.0)


def test_a_kernel_cannot_make_an_input_writeable_through_its_base(host):
    def through_base(x, y):
        x.base.flags.writeable = True
        x.base[...] = 99
        return x + y

    host.register(Keeps({"Add": FunctionKernel(through_base)}), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    x = np.ones((2, 3), np.float32)
    with pytest.raises(KernelError, match="node 'add'.*provider 'cpu'"):
        session.run(None, {"x": x, "y": x})
    np.testing.assert_array_equal(x, 1.0)


def test_a_kernel_cannot_change_a_constant_for_the_next_run(host):
    from onnx import numpy_helper

    model = make_model([helper.make_node("Add", ["x", "w"], ["s"], name="add"),
                        helper.make_node("Relu", ["s"], ["out"], name="relu")],
                       [("x", TensorProto.FLOAT, [2, 3])], [("out", TensorProto.FLOAT, [2, 3])],
                       initializers=[numpy_helper.from_array(np.ones((2, 3), np.float32), "w")])
    calls = []

    def sometimes_hostile(x, w):
        calls.append(1)
        if len(calls) == 1:  # make the array at the root of w's views writeable, write it
            root = w
            while isinstance(root.base, np.ndarray):
                root = root.base
            root.flags.writeable = True
            root[...] = 99
        return x + w

    host.register(Keeps({"Add": FunctionKernel(sometimes_hostile)}), "cpu")
    session = InferenceSession(model, providers=["cpu"], host=host)
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(KernelError, match="node 'add'"):
        session.run(None, {"x": x})
    (out,) = session.run(None, {"x": x})
    np.testing.assert_array_equal(out, 1.0)
    np.testing.assert_array_equal(x, 0.0)


# -- sizes: ops that allocate from shape data check the limit before allocating ----------------

TIB4 = [2**20, 2**20]  # float32: 4 TiB


def _one_node(op, inputs, attrs=None, out_type=TensorProto.FLOAT):
    names = [n for n, _, _ in inputs]
    return make_model([helper.make_node(op, names, ["y"], name="big", **(attrs or {}))],
                      inputs, [("y", out_type, None)])


SIZE_CASES = {
    "Expand": (_one_node("Expand", [("x", TensorProto.FLOAT, [1]),
                                    ("shape", TensorProto.INT64, [2])]),
               {"x": np.ones(1, np.float32), "shape": np.array(TIB4, np.int64)}),
    "ConstantOfShape": (_one_node("ConstantOfShape", [("shape", TensorProto.INT64, [2])]),
                        {"shape": np.array(TIB4, np.int64)}),
    "Tile": (_one_node("Tile", [("x", TensorProto.FLOAT, [1, 1]),
                                ("repeats", TensorProto.INT64, [2])]),
             {"x": np.ones((1, 1), np.float32), "repeats": np.array(TIB4, np.int64)}),
    "Range": (_one_node("Range", [("start", TensorProto.INT64, []),
                                  ("limit", TensorProto.INT64, []),
                                  ("delta", TensorProto.INT64, [])], out_type=TensorProto.INT64),
              {"start": np.array(0, np.int64), "limit": np.array(2**39, np.int64),
               "delta": np.array(1, np.int64)}),
    "Pad": (_one_node("Pad", [("x", TensorProto.FLOAT, [1, 1]),
                              ("pads", TensorProto.INT64, [4])]),
            {"x": np.ones((1, 1), np.float32),
             "pads": np.array([0, 0, 2**20 - 1, 2**20 - 1], np.int64)}),
}


@pytest.mark.parametrize("op", sorted(SIZE_CASES))
def test_a_4_tib_output_from_shape_data_is_refused_before_allocating(monkeypatch, op):
    monkeypatch.setenv("EP_HOST_MAX_TENSOR_BYTES", str(2**20))
    model, feeds = SIZE_CASES[op]
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    with pytest.raises(ResourceLimitError, match=f"node 'big' \\({op}\\) on provider 'cpu': "
                                                 "its output would take 4398046511104 bytes.*"
                                                 "over the limit of 1048576"):
        session.run(None, feeds)


def test_without_a_limit_running_out_of_memory_is_a_resource_limit_error(monkeypatch):
    monkeypatch.delenv("EP_HOST_MAX_TENSOR_BYTES", raising=False)
    model, _ = SIZE_CASES["Expand"]
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    shape = [2**24, 2**26]  # 4 PiB of float32: more than any address space maps
    with pytest.raises(ResourceLimitError, match=r"node 'big' \(Expand\) on provider 'cpu' "
                                                 r"ran out of memory during a run of the model "
                                                 r"\(requested 4503599627370496 "
                                                 r"bytes for shape \[16777216, 67108864\]"):
        session.run(None, {"x": np.ones(1, np.float32), "shape": np.array(shape, np.int64)})


def test_a_kernel_out_of_memory_is_named_with_its_node(host, tensors):
    def greedy(x, y):
        raise MemoryError("no memory left for the workspace")

    host.register(Lies(FunctionKernel(greedy)), "cpu")
    session = InferenceSession(add_relu_model(), providers=["cpu"], host=host)
    with pytest.raises(ResourceLimitError, match="node 'add' \\(Add\\) on provider 'cpu' ran out "
                                                 "of memory during a run of the model: "
                                                 "MemoryError: no memory left"):
        session.run(None, {"x": tensors.x, "y": tensors.y})


def test_under_the_limit_the_same_ops_still_compute(monkeypatch):
    monkeypatch.setenv("EP_HOST_MAX_TENSOR_BYTES", str(2**20))
    model, _ = SIZE_CASES["Expand"]
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    (y,) = session.run(None, {"x": np.full(1, 3.0, np.float32),
                              "shape": np.array([4, 5], np.int64)})
    np.testing.assert_array_equal(y, np.full((4, 5), 3.0, np.float32))
