"""`import ep_host as ort` runs common onnxruntime code: each snippet runs against onnxruntime and
against ep-host, and the two must agree."""

import json
import warnings

import numpy as np
import onnxruntime
import pytest
from hostkit import InlineProvider, add_relu_model, make_model
from onnx import TensorProto, helper, numpy_helper

import ep_host as ort
from ep_host import Device, FunctionKernel, hookimpl
from ep_host.errors import InputError, NotSupportedError

ORT_CPU = ["CPUExecutionProvider"]
X = np.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]], np.float32)
Y = np.full((2, 3), 0.5, np.float32)


def _relu_bytes():
    return add_relu_model().SerializeToString()


def _conv_relu_model():
    w = numpy_helper.from_array(np.arange(18, dtype=np.float32).reshape(2, 1, 3, 3) / 10, "w")
    one = numpy_helper.from_array(np.ones(1, np.float32), "one")
    return make_model(
        [helper.make_node("Add", ["one", "one"], ["two"], name="fold_me"),
         helper.make_node("Mul", ["x", "two"], ["x2"], name="scale"),
         helper.make_node("Conv", ["x2", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"], name="relu")],
        [("x", TensorProto.FLOAT, [1, 1, 4, 4])], [("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        initializers=[w, one])


# -- SessionOptions and the constructor ----------------------------------------------------------


@pytest.mark.parametrize("api", [onnxruntime, ort], ids=["onnxruntime", "ep_host"])
def test_sess_options_is_the_second_positional_argument(api):
    so = api.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = api.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = api.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.log_severity_level = 3
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = api.InferenceSession(_relu_bytes(), so, providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"x": X, "y": Y})
    np.testing.assert_array_equal(out, np.maximum(X + Y, 0))
    got = session.get_session_options()
    assert got.intra_op_num_threads == 1
    assert got.graph_optimization_level == api.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(AttributeError):
        so.no_such_option = 1


def test_the_old_positional_providers_still_work_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="second positional argument is sess_options"):
        session = ort.InferenceSession(_relu_bytes(), ["cpu"], {"cpu": {}})
    assert session.get_providers() == ["cpu"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ort.InferenceSession(_relu_bytes(), None, ["cpu"])
        ort.InferenceSession(_relu_bytes(), providers=["cpu"])
    with pytest.raises(InputError, match="sess_options must be an ep_host.SessionOptions"):
        ort.InferenceSession(_relu_bytes(), ["cpu"], ["cpu"])
    with pytest.raises(InputError, match="sess_options"):
        ort.InferenceSession(_relu_bytes(), "cpu")


def test_optimization_levels_choose_the_graph_passes():
    model = _conv_relu_model().SerializeToString()
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    applied = {}
    for level in ort.GraphOptimizationLevel:
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        session = ort.InferenceSession(model, so, providers=["cpu"])
        applied[level.name] = set(session.model.optimizations)
        so_ref = onnxruntime.SessionOptions()
        so_ref.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level.name)
        (want,) = onnxruntime.InferenceSession(model, so_ref, providers=ORT_CPU).run(None,
                                                                                     {"x": x})
        np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5)
    assert applied["ORT_DISABLE_ALL"] == set()
    assert "constant_folding" in applied["ORT_ENABLE_BASIC"]
    assert "conv_activation_fusion" not in applied["ORT_ENABLE_BASIC"]
    assert "conv_activation_fusion" in applied["ORT_ENABLE_EXTENDED"]
    assert applied["ORT_ENABLE_ALL"] == applied["ORT_ENABLE_EXTENDED"]
    so = ort.SessionOptions()
    so.graph_optimization_level = 7
    with pytest.raises(InputError, match="graph_optimization_level: 7"):
        ort.InferenceSession(model, so, providers=["cpu"])


@pytest.mark.parametrize("api", [onnxruntime, ort], ids=["onnxruntime", "ep_host"])
def test_enable_profiling_writes_a_trace_named_by_the_prefix(api, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    so = api.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = "myprofile"
    session = api.InferenceSession(_relu_bytes(), so, providers=["CPUExecutionProvider"])
    session.run(None, {"x": X, "y": Y})
    name = session.end_profiling()
    assert name.startswith("myprofile_") and name.endswith(".json")
    data = json.loads((tmp_path / name).read_text())
    events = data["traceEvents"] if isinstance(data, dict) else data
    assert any(e.get("name") == "relu" or e.get("args", {}).get("op_name") == "Relu"
               for e in events)


def test_unsupported_session_options_are_refused_by_name():
    so = ort.SessionOptions()
    with pytest.raises(NotSupportedError, match="register_custom_ops_library"):
        so.register_custom_ops_library("libcustom.so")
    with pytest.raises(NotSupportedError, match="add_free_dimension_override_by_name"):
        so.add_free_dimension_override_by_name("N", 1)
    so.optimized_model_filepath = "optimized.onnx"
    with pytest.raises(NotSupportedError, match="optimized_model_filepath"):
        ort.InferenceSession(_relu_bytes(), so, providers=["cpu"])


# -- providers -----------------------------------------------------------------------------------


def test_provider_tuples_give_options_and_onnxruntime_names_resolve(host):
    host.register(InlineProvider("cpu", aliases=("CPUExecutionProvider",)), name="cpu")
    host.register(InlineProvider("gpu", available=False, reason="no GPU here",
                                 aliases=("CUDAExecutionProvider",)), name="gpu")
    session = ort.InferenceSession(
        _relu_bytes(), providers=[("CUDAExecutionProvider", {"device_id": 0}),
                                  ("CPUExecutionProvider", {"threads": "1"})], host=host)
    assert session.get_providers() == ["cpu"]  # the unavailable one is not listed
    assert "CPUExecutionProvider" in session.get_providers()
    assert "CUDAExecutionProvider" not in session.get_providers()
    assert session.get_provider_options() == {"cpu": {"threads": "1"}}
    listed = ort.InferenceSession(_relu_bytes(), providers=["CPUExecutionProvider"],
                                  provider_options=[{"threads": "2"}], host=host)
    assert listed.get_provider_options() == {"cpu": {"threads": "2"}}
    (out,) = session.run(None, {"x": X, "y": Y})
    np.testing.assert_array_equal(out, np.maximum(X + Y, 0))


def test_get_available_providers_lists_only_available_ones():
    from ep_host.discovery import Host

    records = Host.discover().records
    names = ort.get_available_providers()
    assert names and set(names) == {n for n, r in records.items() if r.available}
    assert "cpu" in names and "CPUExecutionProvider" in names
    assert set(ort.get_all_providers()) == set(records)
    assert ort.get_device() in ("CPU", "GPU")
    session = ort.InferenceSession(_relu_bytes(), providers=names)
    np.testing.assert_array_equal(session.run(None, {"x": X, "y": Y})[0], np.maximum(X + Y, 0))


# -- metadata and type strings -------------------------------------------------------------------


def test_modelmeta_is_onnxruntimes_metadata_object():
    model = add_relu_model()
    model.producer_name, model.domain, model.doc_string = "maker", "ai.example", "what it does"
    model.model_version = 7
    model.graph.doc_string = "the graph"
    helper.set_model_props(model, {"author": "me", "license": "MIT"})
    data = model.SerializeToString()
    want = onnxruntime.InferenceSession(data, providers=ORT_CPU).get_modelmeta()
    got = ort.InferenceSession(data, providers=["cpu"]).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description",
                  "version", "custom_metadata_map"):
        assert getattr(got, field) == getattr(want, field), field


def _identity_session(api, value_info, out_info, op="Identity", domain="", opset=17, **attrs):
    model = helper.make_model(
        helper.make_graph([helper.make_node(op, [value_info.name], [out_info.name],
                                            domain=domain, **attrs)], "g", [value_info],
                          [out_info]),
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 3)])
    providers = ORT_CPU if api is onnxruntime else ["cpu"]
    return api.InferenceSession(model.SerializeToString(), providers=providers)


TENSOR_TYPES = [TensorProto.FLOAT, TensorProto.UINT8, TensorProto.INT8, TensorProto.UINT16,
                TensorProto.INT16, TensorProto.INT32, TensorProto.INT64, TensorProto.STRING,
                TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT32,
                TensorProto.UINT64, TensorProto.BFLOAT16]


@pytest.mark.parametrize("elem", TENSOR_TYPES, ids=TensorProto.DataType.Name)
def test_tensor_type_strings_are_onnxruntimes(elem):
    def types(api):
        s = _identity_session(api, helper.make_tensor_value_info("x", elem, ["N", 2]),
                              helper.make_tensor_value_info("y", elem, ["N", 2]))
        return [(a.name, a.type, a.shape) for a in (*s.get_inputs(), *s.get_outputs())]

    assert types(ort) == types(onnxruntime)


def test_sequence_map_and_optional_type_strings_are_onnxruntimes():
    seq = helper.make_tensor_sequence_value_info
    cases = [
        (seq("s", TensorProto.FLOAT, None), seq("t", TensorProto.FLOAT, None), {}),
        (helper.make_value_info("o", helper.make_optional_type_proto(
            helper.make_tensor_type_proto(TensorProto.INT64, [2]))),
         helper.make_value_info("p", helper.make_optional_type_proto(
             helper.make_tensor_type_proto(TensorProto.INT64, [2]))), {"opset": 18}),
    ]
    for inp, out, kwargs in cases:
        ours = _identity_session(ort, inp, out, **kwargs)
        theirs = _identity_session(onnxruntime, inp, out, **kwargs)
        for mine, want in zip((*ours.get_inputs(), *ours.get_outputs()),
                              (*theirs.get_inputs(), *theirs.get_outputs()), strict=True):
            assert mine.type == want.type, (mine, want)
    # no ep-host provider runs ZipMap: its map type's string is checked without a session
    from ep_host.ort_api import type_string

    zipped = helper.make_value_info("z", helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64,
                                   helper.make_tensor_type_proto(TensorProto.FLOAT, []))))
    theirs = _identity_session(onnxruntime,
                               helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2]),
                               zipped, op="ZipMap", domain="ai.onnx.ml", classlabels_int64s=[3, 4])
    assert type_string(zipped.type) == theirs.get_outputs()[0].type == (
        "seq(map(int64,tensor(float)))")


# -- OrtValue, IOBinding, run_with_ort_values ----------------------------------------------------


@pytest.mark.parametrize("api", [onnxruntime, ort], ids=["onnxruntime", "ep_host"])
def test_io_binding_on_the_cpu(api):
    session = api.InferenceSession(_relu_bytes(), providers=["CPUExecutionProvider"])
    x = api.OrtValue.ortvalue_from_numpy(X, "cpu", 0)
    assert (x.device_name(), x.shape(), x.data_type(), x.element_type()) == (
        "cpu", [2, 3], "tensor(float)", TensorProto.FLOAT)
    np.testing.assert_array_equal(x.numpy(), X)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_cpu_input("y", Y)
    binding.bind_output("out", "cpu")
    session.run_with_iobinding(binding)
    (value,) = binding.get_outputs()
    np.testing.assert_array_equal(value.numpy(), np.maximum(X + Y, 0))
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(X + Y, 0))
    target = api.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "cpu", 0)
    binding.bind_ortvalue_output("out", target)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(target.numpy(), np.maximum(X + Y, 0))
    y = api.OrtValue.ortvalue_from_numpy(Y)
    (out,) = session.run_with_ort_values(["out"], {"x": x, "y": y})
    np.testing.assert_array_equal(out.numpy(), np.maximum(X + Y, 0))


def test_io_binding_refuses_what_onnxruntime_refuses_and_raw_pointers():
    session = ort.InferenceSession(_relu_bytes(), providers=["cpu"])
    binding = session.io_binding()
    with pytest.raises(InputError, match="cannot bind input 'nosuch'"):
        binding.bind_cpu_input("nosuch", X)
    binding.bind_cpu_input("x", X)
    binding.bind_cpu_input("y", Y)
    with pytest.raises(InputError, match="at least one output"):
        session.run_with_iobinding(binding)
    with pytest.raises(NotSupportedError, match="raw buffer pointer"):
        binding.bind_input("x", "cpu", 0, np.float32, [2, 3], X.ctypes.data)
    binding.bind_ortvalue_output("out", ort.OrtValue.ortvalue_from_numpy(np.zeros(3, np.float32)))
    with pytest.raises(InputError, match="output 'out' is float32 \\[2, 3\\]"):
        session.run_with_iobinding(binding)
    wrong = ort.OrtValue.ortvalue_from_numpy(X.astype(np.float64))
    with pytest.raises(InputError, match="input 'x' must be float32"):
        session.run_with_ort_values(None, {"x": wrong, "y": ort.OrtValue.ortvalue_from_numpy(Y)})


class OnDevice:
    """An array on the counted device: kernels there unwrap it, nothing else can read it."""

    def __init__(self, array):
        self.array = array
        self.shape, self.dtype, self.ndim, self.nbytes = (array.shape, array.dtype, array.ndim,
                                                          array.nbytes)


class CountedDevice:
    def __init__(self):
        self.uploads = self.downloads = 0

    def from_host(self, array):
        self.uploads += 1
        return OnDevice(np.array(array))

    def to_host(self, value):
        self.downloads += 1
        return np.array(value.array)


class DeviceProvider(InlineProvider):
    @hookimpl
    def ep_host_create_kernel(self, node, context):
        fn = self.FUNCS[node.op_type]

        def on_device(*args):
            assert all(isinstance(a, OnDevice) for a in args), "a host array reached the device"
            return OnDevice(fn(*(a.array for a in args)))

        return FunctionKernel(on_device)


def _device_session(host, counted, host_ops=()):
    device = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=1.0,
                    to_host=counted.to_host, from_host=counted.from_host)
    device_ops = {"Add", "Relu"} - set(host_ops)
    host.register(DeviceProvider("dev", ops=device_ops, cost_us=0.01, device=device), name="dev")
    host.register(InlineProvider("cpu", ops=host_ops, cost_us=100.0), name="cpu")
    return ort.InferenceSession(_relu_bytes(), providers=["dev", "cpu"], host=host), device


def test_device_resident_inputs_and_outputs_skip_the_host(host):
    counted = CountedDevice()
    session, device = _device_session(host, counted)
    assert {n.provider for n in session.placement.nodes} == {"dev"}
    x, y = (ort.OrtValue(device.upload(a), device) for a in (X, Y))
    counted.uploads = 0
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_input("y", y)
    binding.bind_output("out", "sim", 0)
    session.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert (counted.uploads, counted.downloads) == (0, 0)
    assert out.device_name() == "sim" and isinstance(out.value, OnDevice)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], np.maximum(X + Y, 0))
    assert counted.downloads == 1
    (left,) = session.run_with_ort_values(None, {"x": x, "y": y})  # stays where computed
    assert isinstance(left.value, OnDevice) and counted.uploads == 0
    np.testing.assert_array_equal(session.run(None, {"x": X, "y": Y})[0], np.maximum(X + Y, 0))


def test_a_device_input_a_host_node_reads_is_copied_to_the_host_once(host):
    counted = CountedDevice()
    session, device = _device_session(host, counted, host_ops=("Relu",))
    assert session.placement.by_node["relu"].provider == "cpu"
    x, y = (ort.OrtValue(device.upload(a), device) for a in (X, Y))
    counted.uploads = 0
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_cpu_input("y", Y)
    binding.bind_output("out", "sim")
    session.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert counted.uploads == 2  # y to the device, then Relu's result back to it for the binding
    assert counted.downloads == 1  # Add's result to the host Relu
    np.testing.assert_array_equal(out.numpy(), np.maximum(X + Y, 0))


def test_run_options_fields_onnxruntime_users_set():
    session = ort.InferenceSession(_relu_bytes(), providers=["cpu"])
    for api in (onnxruntime, ort):
        options = api.RunOptions()
        options.log_severity_level = 3
        options.log_verbosity_level = 0
        options.logid = "request-1"
        options.terminate = False
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        assert options.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    options.run_tag = "request-1"
    np.testing.assert_array_equal(session.run(None, {"x": X, "y": Y}, options)[0],
                                  np.maximum(X + Y, 0))


def _cuda_usable():
    try:
        return "cuda" in ort.get_available_providers()
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda_usable(), reason="no available CUDA EP (cupy and a GPU)")
def test_cuda_io_binding_keeps_arrays_on_the_gpu():
    import cupy

    session = ort.InferenceSession(_relu_bytes(), providers=["CUDAExecutionProvider"])
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(X, "cuda", 0))
    binding.bind_ortvalue_input("y", ort.OrtValue.ortvalue_from_numpy(Y, "cuda", 0))
    binding.bind_output("out", "cuda")
    session.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert isinstance(out.value, cupy.ndarray) and out.device_name() == "cuda"
    np.testing.assert_array_equal(out.numpy(), np.maximum(X + Y, 0))
