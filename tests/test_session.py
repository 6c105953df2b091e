"""InferenceSession: onnxruntime's API, kernels created once, inputs checked, devices copied."""

import weakref

import numpy as np
import pytest
from hostkit import InlineProvider, add_relu_model, make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import Device, FunctionKernel, InferenceSession, Kernel, hookimpl
from ep_host.errors import InputError, KernelError


def _session(host, model, *providers, **kwargs):
    for p in providers:
        host.register(p, name=p.name)
    return InferenceSession(model.SerializeToString(), providers=[p.name for p in providers],
                            host=host, **kwargs)


def test_run_computes_and_mirrors_onnxruntimes_api(host, tensors):
    session = _session(host, add_relu_model(), InlineProvider("cpu"))
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    np.testing.assert_array_equal(out, np.maximum(tensors.x + tensors.y, 0))
    assert [(i.name, i.type, i.shape) for i in session.get_inputs()] == [
        ("x", "tensor(float)", [2, 3]), ("y", "tensor(float)", [2, 3])]
    assert [o.name for o in session.get_outputs()] == ["out"]
    assert session.get_providers() == ["cpu"]
    assert session.run(["out"], {"x": tensors.x, "y": tensors.y})[0].shape == (2, 3)
    assert session.placement.by_node["relu"].provider == "cpu"


def test_each_kernel_is_created_once_across_runs(host, tensors):
    provider = InlineProvider("cpu")
    session = _session(host, add_relu_model(), provider)
    for _ in range(3):
        session.run(None, {"x": tensors.x, "y": tensors.y})
    assert provider.created == ["add", "relu"]


def test_constants_are_handed_over_once_and_read_only(host):
    received = []

    class Prepacks(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            class K(Kernel):
                def prepare(self, constants):
                    received.append({i: v.copy() for i, v in constants.items()})
                    assert not constants[1].flags.writeable
                    self.w = constants[1]

                def run(self, x, w):
                    assert w is self.w
                    return (x + w,)

            return K()

    weight = np.full((2, 3), 2.0, np.float32)
    model = make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                       [("x", TensorProto.FLOAT, [2, 3])], [("y", TensorProto.FLOAT, [2, 3])],
                       initializers=[numpy_helper.from_array(weight, "w")])
    session = _session(host, model, Prepacks("cpu", ops=("Add",)))
    for _ in range(2):
        (y,) = session.run(None, {"x": np.ones((2, 3), np.float32)})
        np.testing.assert_array_equal(y, 3.0)
    assert len(received) == 1 and list(received[0]) == [1]


def test_intermediates_are_freed_after_their_last_use(host, tensors):
    model = make_model(
        [helper.make_node("Add", ["x", "y"], ["a"], name="n1"),
         helper.make_node("Neg", ["a"], ["b"], name="n2"),
         helper.make_node("Relu", ["b"], ["out"], name="n3")],
        [("x", TensorProto.FLOAT, [2, 3]), ("y", TensorProto.FLOAT, [2, 3])],
        [("out", TensorProto.FLOAT, [2, 3])])
    made = {}
    alive_when_relu_ran = []

    class Watches(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            fn = self.FUNCS[node.op_type]

            def run(*args):
                if node.op_type == "Relu":
                    alive_when_relu_ran.append(made["n1"]() is not None)
                out = fn(*args)
                made[node.name] = weakref.ref(out)
                return out

            return FunctionKernel(run)

    session = _session(host, model, Watches("cpu", ops=("Add", "Neg", "Relu")))
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    assert alive_when_relu_ran == [False]  # "a" was dropped right after Neg, its last user
    assert made["n2"]() is None  # "b" too, once Relu had run
    np.testing.assert_array_equal(out, np.maximum(-(tensors.x + tensors.y), 0))


@pytest.mark.parametrize("feed, message", [
    ({"x": np.ones((2, 3), np.float32)}, "missing input(s) 'y'"),
    ({"x": np.ones((2, 3), np.float32), "y": np.ones((2, 3), np.float32), "z": 1},
     "unknown input(s) 'z'"),
    ({"x": np.ones((2, 3), np.float64), "y": np.ones((2, 3), np.float32)},
     "input 'x' must be float32, got float64"),
    ({"x": np.ones((6,), np.float32), "y": np.ones((2, 3), np.float32)},
     "input 'x' must have rank 2"),
    ({"x": np.ones((2, 4), np.float32), "y": np.ones((2, 3), np.float32)},
     "input 'x' dim 1 must be 3"),
    ({"x": None, "y": np.ones((2, 3), np.float32)}, "input 'x' is None"),
])
def test_bad_inputs_name_the_input_expected_and_actual(host, feed, message):
    session = _session(host, add_relu_model(), InlineProvider("cpu"))
    with pytest.raises(InputError) as info:
        session.run(None, feed)
    assert message in str(info.value)


def test_a_symbolic_dim_must_bind_to_one_value(host):
    model = make_model([helper.make_node("Add", ["x", "y"], ["out"], name="add")],
                       [("x", TensorProto.FLOAT, ["n", 3]), ("y", TensorProto.FLOAT, ["n", 3])],
                       [("out", TensorProto.FLOAT, ["n", 3])])
    session = _session(host, model, InlineProvider("cpu", ops=("Add",)))
    (out,) = session.run(None, {"x": np.ones((4, 3), np.float32), "y": np.ones((4, 3), np.float32)})
    assert out.shape == (4, 3)
    with pytest.raises(InputError, match="dim 'n' is 4 in input 'x' but 5 in input 'y'"):
        session.run(None, {"x": np.ones((4, 3), np.float32), "y": np.ones((5, 3), np.float32)})


def test_inputs_are_never_modified_and_big_endian_is_converted(host):
    x = np.arange(6, dtype=">f4").reshape(2, 3)
    y = np.ones((2, 3), np.float32)
    session = _session(host, add_relu_model(), InlineProvider("cpu"))
    (out,) = session.run(None, {"x": x, "y": y})
    np.testing.assert_array_equal(out, np.arange(6).reshape(2, 3) + 1)
    assert x.dtype == np.dtype(">f4") and y.flags.writeable


def test_plain_runs_take_one_function_and_give_what_the_full_path_gives(host, tensors):
    import types

    session = _session(host, add_relu_model(), InlineProvider("cpu"))
    feed = {"x": tensors.x, "y": tensors.y}
    assert session._fast is not None
    assert session._fast({"x": tensors.x}) is None  # not taken: the full path says what is wrong
    (fast,) = session.run(None, feed)
    (full,) = session.run(["out"], feed)  # named outputs take the full path
    (mapped,) = session.run(None, types.MappingProxyType(feed))  # so does a dict-like feed
    expected = np.maximum(tensors.x + tensors.y, 0)
    for out in (fast, full, mapped):
        np.testing.assert_array_equal(out, expected)
        assert out.flags.writeable and out.flags.owndata
    assert tensors.x.flags.writeable and tensors.y.flags.writeable


@pytest.mark.parametrize("batch", [None, "n"])
def test_an_open_batch_takes_the_plain_path_and_wrong_feeds_the_full_one(host, batch):
    """Inputs whose dims are numbers or open (a scikit-learn export's None batch, a name no
    other dim has) take the one-function path at any batch; a feed of another rank or a wrong
    numbered dim falls through to the full path, which says what is wrong."""
    model = make_model([helper.make_node("Relu", ["x"], ["out"], name="relu")],
                       [("x", TensorProto.FLOAT, [batch, 3])],
                       [("out", TensorProto.FLOAT, [batch, 3])])
    session = _session(host, model, InlineProvider("cpu", ops=("Relu",)))
    assert session._fast is not None
    for rows in (1, 4, 0):
        x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) - 2
        assert session._fast({"x": x}) is not None
        (out,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(out, np.maximum(x, 0))
    for wrong, words in ((np.ones((2, 4), np.float32), "dim 1 must be 3"),
                         (np.ones((2, 3, 1), np.float32), "must have rank 2")):
        assert session._fast({"x": wrong}) is None
        with pytest.raises(InputError, match=words):
            session.run(None, {"x": wrong})


def test_a_dim_name_two_inputs_share_keeps_the_full_check(host):
    model = make_model([helper.make_node("Add", ["x", "y"], ["out"], name="add")],
                       [("x", TensorProto.FLOAT, ["n", 3]), ("y", TensorProto.FLOAT, ["n", 3])],
                       [("out", TensorProto.FLOAT, ["n", 3])])
    session = _session(host, model, InlineProvider("cpu", ops=("Add",)))
    assert session._fast is None  # the full path binds "n" once for both


def test_a_kernel_that_raises_names_node_and_provider(host, tensors):
    class Breaks(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            def boom(*args):
                raise FloatingPointError("overflow")
            return FunctionKernel(boom)

    session = _session(host, add_relu_model(), Breaks("cpu"))
    expected = "node 'add' \\(Add\\) failed on provider 'cpu'.*overflow"
    with pytest.raises(KernelError, match=expected):
        session.run(None, {"x": tensors.x, "y": tensors.y})


def test_create_kernel_returning_garbage_is_a_kernel_error(host):
    class Garbage(InlineProvider):
        @hookimpl
        def ep_host_create_kernel(self, node, context):
            return "not a kernel"

    with pytest.raises(KernelError, match="returned str instead of a Kernel for node 'add'"):
        _session(host, add_relu_model(), Garbage("cpu"))


class OnDevice:
    """An array living on the simulated device; kernels there must unwrap it themselves."""

    def __init__(self, array):
        self.array = array


SIM = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=1.0,
             to_host=lambda d: d.array, from_host=OnDevice)


class SimProvider(InlineProvider):
    @hookimpl
    def ep_host_create_kernel(self, node, context):
        fn = self.FUNCS[node.op_type]

        def on_device(*args):
            assert all(isinstance(a, OnDevice) for a in args), "input not copied to the device"
            return OnDevice(fn(*(a.array for a in args)))

        return FunctionKernel(on_device)


def test_tensors_are_copied_between_devices_at_partition_boundaries(host, tensors):
    session = _session(host, add_relu_model(),
                       SimProvider("sim", ops=("Add",), cost_us=0.01, device=SIM),
                       InlineProvider("cpu", cost_us=10.0))
    assert session.placement.by_node["add"].provider == "sim"
    assert session.placement.by_node["relu"].provider == "cpu"
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    assert isinstance(out, np.ndarray)
    np.testing.assert_array_equal(out, np.maximum(tensors.x + tensors.y, 0))
    copies = [s.copy for s in session._steps if s.copy is not None]
    assert [(a.name, b.name) for a, b in copies] == [("cpu", "sim:0"), ("cpu", "sim:0"),
                                                     ("sim:0", "cpu")]


def test_outputs_on_a_device_come_back_to_the_host(host, tensors):
    session = _session(host, add_relu_model(), SimProvider("sim", device=SIM))
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    assert isinstance(out, np.ndarray)


def test_onnxruntime_provider_names_are_accepted(tensors):
    session = InferenceSession(add_relu_model().SerializeToString(),
                               providers=["CPUExecutionProvider"])
    assert session.get_providers() == ["cpu"]
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    np.testing.assert_allclose(out, np.maximum(tensors.x + tensors.y, 0))


def test_unknown_provider_names_are_an_error():
    with pytest.raises(KernelError, match="unknown provider.*nosuch"):
        InferenceSession(add_relu_model().SerializeToString(), providers=["nosuch"])


def test_constant_nodes_feed_their_consumers(host):
    import onnx

    value = onnx.numpy_helper.from_array(np.array([1.0, 2.0, 3.0], np.float32))
    model = make_model([helper.make_node("Constant", [], ["c"], value=value, name="const"),
                        helper.make_node("Add", ["x", "c"], ["y"], name="add")],
                       [("x", TensorProto.FLOAT, [3])], [("y", TensorProto.FLOAT, [3])])

    class WithConstant(InlineProvider):
        FUNCS = {**InlineProvider.FUNCS, "Constant": lambda: None}

    # as written: the graph optimizations would lift the Constant to an initializer
    session = _session(host, model, WithConstant("cpu", ops=("Add", "Constant")),
                       optimizations=())
    assert session.placement.by_node["const"].provider == "cpu"
    for _ in range(2):
        (y,) = session.run(None, {"x": np.ones(3, np.float32)})
        np.testing.assert_array_equal(y, [2.0, 3.0, 4.0])


def test_the_backend_picks_providers_by_device_kind_not_by_name(tensors):
    """onnx's backend API names devices ("CPU", "CUDA:0"); the providers come from each one's
    ``Device.kind``, device providers first, then the host's."""
    from ep_host.backend import EpHostBackend, device_providers
    from ep_host.discovery import Host

    host = Host(strict=False)
    link = {"link_gbps": 10.0, "link_latency_us": 5.0}  # a device must say what copies cost
    host.register(InlineProvider("gpu_b", device=Device(name="cuda:0", kind="cuda", **link)),
                  name="gpu_b")
    host.register(InlineProvider("host_a"), name="host_a")
    host.register(InlineProvider("npu", device=Device(name="npu:0", kind="npu", **link)),
                  name="npu")
    assert device_providers("CUDA:0", host) == ["gpu_b", "host_a"]
    assert device_providers("CPU", host) == ["host_a"]
    rep = EpHostBackend.prepare(add_relu_model(), "CUDA", host=host)
    assert rep.session.get_providers() == ["gpu_b", "host_a"]
    (out,) = rep.run([tensors.x, tensors.y])
    np.testing.assert_array_equal(out, np.maximum(tensors.x + tensors.y, 0))


def test_a_third_party_provider_gets_aliases_and_the_default_order_from_its_info(host, tensors):
    """Aliases and the default order (device providers first, host ones last) come from
    ``ProviderInfo`` and ``Device``, so any provider gets what the first-party ones get."""
    from ep_host.session import select_providers

    host.register(InlineProvider("alpha", aliases=("AlphaExecutionProvider",)), name="alpha")
    host.register(InlineProvider("zeta", device=SIM), name="zeta")
    assert select_providers(host, None) == ["zeta", "alpha"]
    session = InferenceSession(add_relu_model().SerializeToString(),
                               providers=["AlphaExecutionProvider"], host=host)
    assert session.get_providers() == ["alpha"]
    (out,) = session.run(None, {"x": tensors.x, "y": tensors.y})
    np.testing.assert_array_equal(out, np.maximum(tensors.x + tensors.y, 0))
