"""The CUDA EP's kernels, bound to numpy with CuPy's names only and run through a host "device"
(every copy a real copy), give the CPU EP's outputs, for each op family it claims."""

import math

import numpy as np
import pytest
from cudakit import compare_with_cpu, node_model
from onnx import numpy_helper

R = np.random.default_rng(7)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def f16(*shape):
    return R.standard_normal(shape).astype(np.float16)


MS = "com.microsoft"

# (id, op, inputs, constants, attrs, extra) -- extra: n_outputs, domain, opset, input_names, atol
CASES = [
    # elementwise and activations
    ("add_broadcast", "Add", {"a": f32(2, 3, 4), "b": f32(4)}, {}, {}, {}),
    ("sub_int64", "Sub", {"a": np.arange(6, dtype=np.int64), "b": np.full(6, 4, np.int64)}, {},
     {}, {}),
    ("div_int32_truncates", "Div", {"a": np.array([-7, 7, -8, 9], np.int32),
                                    "b": np.array([2, -2, 3, 4], np.int32)}, {}, {}, {}),
    ("relu_f16", "Relu", {"x": f16(3, 5)}, {}, {}, {}),
    ("sigmoid", "Sigmoid", {"x": f32(4, 4) * 10}, {}, {}, {}),
    ("erf_f16", "Erf", {"x": f16(64)}, {}, {}, {}),
    ("gelu_none", "Gelu", {"x": f32(2, 16)}, {}, {"approximate": "none"}, {"opset": 20}),
    ("gelu_tanh_f16", "Gelu", {"x": f16(2, 16)}, {}, {"approximate": "tanh"}, {"opset": 20}),
    ("clip_constants", "Clip", {"x": f32(10)}, {"lo": np.float32(-0.5), "hi": np.float32(0.5)},
     {}, {}),
    ("leaky_relu", "LeakyRelu", {"x": f32(8)}, {}, {"alpha": 0.2}, {}),
    ("pow", "Pow", {"x": np.abs(f32(6)), "y": f32(6)}, {}, {}, {}),
    ("sum_three", "Sum", {"a": f32(3), "b": f32(3), "c": f32(3)}, {}, {}, {}),
    ("where", "Where", {"c": R.random(6) > 0.5, "x": f32(6), "y": f32(6)}, {}, {}, {}),
    ("equal_int", "Equal", {"a": np.array([1, 2, 3], np.int64),
                            "b": np.array([1, 0, 3], np.int64)}, {}, {}, {}),
    # matrix products
    ("matmul_batched", "MatMul", {"a": f32(2, 5, 7), "b": f32(7, 3)}, {}, {}, {}),
    ("matmul_f16", "MatMul", {"a": f16(4, 8), "b": f16(8, 2)}, {}, {}, {"atol": 1e-2}),
    ("gemm_trans", "Gemm", {"a": f32(6, 4), "b": f32(5, 6)}, {"c": f32(5)},
     {"transA": 1, "transB": 1, "alpha": 0.5, "beta": 2.0}, {}),
    # convolution and pooling
    ("conv_3x3_pad_stride", "Conv", {"x": f32(2, 3, 9, 9)}, {"w": f32(4, 3, 3, 3), "b": f32(4)},
     {"pads": [1, 1, 1, 1], "strides": [2, 2]}, {"atol": 1e-4}),
    ("conv_1x1_gemm", "Conv", {"x": f32(1, 8, 5, 5)}, {"w": f32(6, 8, 1, 1)}, {}, {"atol": 1e-4}),
    ("conv_grouped", "Conv", {"x": f32(1, 4, 6, 6)}, {"w": f32(4, 2, 3, 3)}, {"group": 2},
     {"atol": 1e-4}),
    ("conv_depthwise", "Conv", {"x": f32(2, 5, 7, 7)}, {"w": f32(5, 1, 3, 3), "b": f32(5)},
     {"group": 5, "pads": [1, 1, 1, 1], "dilations": [1, 2], "auto_pad": "NOTSET"},
     {"atol": 1e-4}),
    ("conv_depthwise_same_f16", "Conv", {"x": f16(1, 3, 6, 6)}, {"w": f16(3, 1, 3, 3)},
     {"group": 3, "auto_pad": "SAME_UPPER", "strides": [2, 2]}, {"atol": 1e-2}),
    ("conv_f16", "Conv", {"x": f16(1, 3, 6, 6)}, {"w": f16(2, 3, 3, 3)}, {}, {"atol": 1e-2}),
    ("maxpool", "MaxPool", {"x": f32(1, 2, 7, 7)}, {},
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, {}),
    ("maxpool_indices", "MaxPool", {"x": f32(1, 2, 6, 6)}, {},
     {"kernel_shape": [2, 2], "strides": [2, 2]}, {"n_outputs": 2}),
    ("averagepool", "AveragePool", {"x": f32(1, 2, 7, 7)}, {},
     {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, {}),
    ("global_average_pool_f16", "GlobalAveragePool", {"x": f16(2, 3, 4, 4)}, {}, {},
     {"atol": 1e-3}),
    ("lrn", "LRN", {"x": f32(1, 6, 3, 3)}, {}, {"size": 3}, {}),
    # normalization
    ("batchnorm", "BatchNormalization", {"x": f32(2, 3, 4, 4)},
     {"s": f32(3), "b": f32(3), "m": f32(3), "v": np.abs(f32(3)) + 0.5}, {}, {}),
    ("layernorm_f16", "LayerNormalization", {"x": f16(2, 5, 8)}, {"g": f16(8), "b": f16(8)},
     {"axis": -1}, {"atol": 1e-2}),
    ("softmax", "Softmax", {"x": f32(3, 7) * 5}, {}, {"axis": -1}, {}),
    ("log_softmax_f16", "LogSoftmax", {"x": f16(3, 7)}, {}, {"axis": 1}, {"atol": 1e-2}),
    ("dropout_inference", "Dropout", {"x": f32(4, 4)}, {}, {}, {}),
    # reductions (axes as a host input from opset 18)
    ("reduce_mean_axes_input", "ReduceMean", {"x": f32(3, 4, 5)},
     {"axes": np.array([0, 2], np.int64)}, {"keepdims": 0}, {"opset": 18}),
    ("reduce_sum_int32", "ReduceSum", {"x": np.arange(24, dtype=np.int32).reshape(2, 3, 4)},
     {"axes": np.array([1], np.int64)}, {}, {}),
    ("reduce_max_attr", "ReduceMax", {"x": f32(3, 4)}, {}, {"axes": [1]}, {"opset": 13}),
    ("argmax", "ArgMax", {"x": f32(4, 6)}, {}, {"axis": 1}, {}),
    # data movement and the Shape family
    ("reshape", "Reshape", {"x": f32(2, 3, 4)}, {"shape": np.array([0, -1], np.int64)}, {}, {}),
    ("transpose", "Transpose", {"x": f32(2, 3, 4)}, {}, {"perm": [2, 0, 1]}, {}),
    ("slice", "Slice", {"x": f32(6, 5)}, {"st": np.array([1, -1], np.int64),
                                          "en": np.array([5, 0], np.int64),
                                          "ax": np.array([0, 1], np.int64),
                                          "sp": np.array([2, -1], np.int64)}, {}, {}),
    ("gather_negative", "Gather", {"x": f32(5, 3)}, {"i": np.array([[0, -1], [2, 4]], np.int64)},
     {"axis": 0}, {}),
    ("concat", "Concat", {"a": f32(2, 3), "b": f32(2, 1)}, {}, {"axis": 1}, {}),
    ("split", "Split", {"x": f32(6, 2)}, {"s": np.array([1, 5], np.int64)}, {"axis": 0},
     {"n_outputs": 2}),
    ("expand", "Expand", {"x": f32(3, 1)}, {"shape": np.array([2, 3, 4], np.int64)}, {}, {}),
    ("cast_to_f16", "Cast", {"x": f32(5) * 100}, {}, {"to": 10}, {}),
    ("cast_to_int", "Cast", {"x": f32(5) * 10}, {}, {"to": 6}, {}),
    ("shape_slice", "Shape", {"x": f32(2, 3, 4)}, {}, {"start": 1}, {}),
    ("size", "Size", {"x": f32(2, 3, 4)}, {}, {}, {}),
    ("squeeze", "Squeeze", {"x": f32(1, 3, 1)}, {"axes": np.array([0], np.int64)}, {}, {}),
    ("unsqueeze", "Unsqueeze", {"x": f32(3)}, {"axes": np.array([0, 2], np.int64)}, {}, {}),
    ("flatten", "Flatten", {"x": f32(2, 3, 4)}, {}, {"axis": 2}, {}),
    ("identity_bool", "Identity", {"x": R.random(4) > 0.5}, {}, {}, {}),
    ("constant_of_shape", "ConstantOfShape", {}, {"shape": np.array([2, 3], np.int64)},
     {"value": numpy_helper.from_array(np.array([1.5], np.float32))}, {}),
    ("range", "Range", {}, {"a": np.int64(2), "b": np.int64(11), "d": np.int64(3)}, {}, {}),
    ("tile", "Tile", {"x": f32(2, 3)}, {"r": np.array([2, 1], np.int64)}, {}, {}),
    # com.microsoft attention and activations
    ("ms_mha", "MultiHeadAttention", {"q": f32(2, 4, 8), "k": f32(2, 6, 8), "v": f32(2, 6, 8)},
     {}, {"num_heads": 2}, {"domain": MS, "atol": 1e-5}),
    ("ms_mha_f16_mask", "MultiHeadAttention",
     {"q": f16(1, 3, 8), "k": f16(1, 3, 8), "v": f16(1, 3, 8),
      "mask": np.array([[1, 1, 0]], np.int32)}, {}, {"num_heads": 2},
     {"domain": MS, "atol": 1e-2, "input_names": ["q", "k", "v", "", "mask"]}),
    ("ms_gelu_f16", "Gelu", {"x": f16(32)}, {}, {}, {"domain": MS, "atol": 1e-3}),
    ("ms_skip_layernorm", "SkipLayerNormalization", {"x": f32(2, 3, 8), "s": f32(2, 3, 8)},
     {"g": f32(8), "b": f32(8)}, {}, {"domain": MS}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_kernel_matches_the_cpu_ep(case):
    _, op, inputs, constants, attrs, extra = case
    model = node_model(op, inputs, constants=constants, attrs=attrs,
                       n_outputs=extra.get("n_outputs", 1), domain=extra.get("domain", ""),
                       opset=extra.get("opset", 17), input_names=extra.get("input_names"))
    atol = extra.get("atol", 1e-6)
    compare_with_cpu(model, inputs, atol=atol, rtol=atol)


def test_group_query_attention_with_host_sequence_lengths():
    batch, seq, heads, kv_heads, head = 2, 3, 4, 2, 4
    inputs = {"q": f32(batch, seq, heads * head), "k": f32(batch, seq, kv_heads * head),
              "v": f32(batch, seq, kv_heads * head)}
    constants = {"seqlens": np.array([seq - 1, seq - 2], np.int32),
                 "total": np.array([seq], np.int32)}
    model = node_model("GroupQueryAttention", inputs, constants=constants, domain=MS,
                       attrs={"num_heads": heads, "kv_num_heads": kv_heads}, n_outputs=3,
                       input_names=["q", "k", "v", "", "", "seqlens", "total"])
    session = compare_with_cpu(model, inputs, atol=1e-5)
    answer = session.placement.table.answers["node"]["cuda"]
    assert answer.host_inputs == (5, 6)  # seqlens_k and total_sequence_length stay on the host


def test_depthwise_conv_is_the_gpu_specific_kernel_and_agrees_with_the_reference():
    """The depthwise path is the CUDA EP's own code (not the CPU EP's batched GEMM): check it
    against a direct sum over taps as well."""
    from ep_host_cuda.kernels import CUDA_KERNELS, _depthwise
    from ep_host_cuda.xp import host_namespace

    assert ("ai.onnx", "Conv", 11) in CUDA_KERNELS.specs
    x, w = f32(1, 2, 5, 5), f32(2, 1, 3, 3)
    y = _depthwise(host_namespace(), x, w, None, auto_pad="NOTSET", dilations=None,
                   pads=[1, 1, 1, 1], strides=None)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros_like(y)
    for c in range(2):
        for i in range(5):
            for j in range(5):
                expected[0, c, i, j] = (padded[0, c, i:i + 3, j:j + 3] * w[c, 0]).sum()
    np.testing.assert_allclose(y, expected, atol=1e-5)


def test_shape_arrays_are_made_once_per_shape():
    from cudakit import first_node
    from ep_host_cuda.kernels import CUDA_KERNELS
    from ep_host_cuda.xp import host_namespace

    model = node_model("Shape", {"x": f32(2, 3)}, attrs={"start": 0})
    node = first_node(model)
    kernel = CUDA_KERNELS.specs[("ai.onnx", "Shape", 15)].make(host_namespace(), node)
    first = kernel.run(f32(2, 3))[0]
    assert kernel.run(f32(2, 3))[0] is first  # the cached device array, no new copy
    other = kernel.run(f32(4, 5))[0]
    assert other is not first and other.tolist() == [4, 5] and first.tolist() == [2, 3]


def test_half_precision_gelu_stays_half_and_close_to_float64():
    x = np.linspace(-4, 4, 33).astype(np.float16)
    model = node_model("Gelu", {"x": x}, attrs={"approximate": "none"}, opset=20)
    session = compare_with_cpu(model, {"x": x}, atol=1e-3)
    out = session.run(None, {"x": x})[0]
    exact = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)])
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float64), exact, atol=4e-3)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_com_microsoft_gelu_is_the_gpu_specific_kernel(dtype):
    """A com.microsoft node has no since_version: the CPU EP's registry resolves it (newest <=
    the domain's opset), and the CUDA EP's own kernel under that key replaces the shared one."""
    from cudakit import FIGURES, first_node, run_on
    from ep_host_cuda.kernels import CUDA_KERNELS
    from ep_host_cuda.provider import simulated

    from ep_host import ProviderContext
    from ep_host.kernels import REGISTRY

    x = np.linspace(-4, 4, 64).astype(dtype).reshape(4, 16)
    model = node_model("Gelu", {"x": x}, domain=MS)
    node = first_node(model)
    assert node.since_version is None
    kernel = simulated(FIGURES).ep_host_create_kernel(node, ProviderContext(provider="cuda"))
    assert kernel.inner.spec is CUDA_KERNELS.specs[(MS, "Gelu", 1)]
    assert kernel.inner.spec.fn is not REGISTRY.specs[(MS, "Gelu", 1)].fn
    (expected,), _ = run_on(model, {"x": x}, ["cpu"])
    got = kernel.run(x)[0]  # numpy bound: the shared formula, computed in float32
    assert got.dtype == expected.dtype == dtype
    atol = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got, expected, atol=atol, rtol=atol)
    compare_with_cpu(model, {"x": x}, atol=atol, rtol=atol)
