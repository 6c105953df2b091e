"""com.microsoft ops (and SimplifiedLayerNormalization) on the CPU EP, against onnxruntime's own
contrib kernels on one-node models with random weights; FusedConv against a Conv followed by
its activation."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from cpukit import assert_declines, cpu_answer, make_model, run_ep_host, run_onnxruntime
from onnx import TensorProto, helper, numpy_helper

MS = "com.microsoft"
F32, F16 = np.float32, np.float16
TOL = {F32: {"rtol": 0.0, "atol": 1e-4}, F16: {"rtol": 1e-3, "atol": 1e-3}}


def contrib_model(op, inputs, outputs=("y",), domain=MS, constants=(), **attrs):
    """A one-node model; ``inputs`` are (name, array or None), None leaving the slot empty."""
    node = helper.make_node(op, [n if a is not None else "" for n, a in inputs],
                            list(outputs), domain=domain, **attrs)
    graph_inputs = [(n, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape))
                    for n, a in inputs if a is not None and n not in constants]
    weights = [numpy_helper.from_array(a, n) for n, a in inputs
               if a is not None and n in constants]
    model = make_model([node], graph_inputs, [], initializers=weights, domains=[(MS, 1)])
    model.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in outputs if o)
    feeds = {n: a for n, a in inputs if a is not None and n not in constants}
    return model, feeds


def compare(op, inputs, outputs=("y",), dtype=F32, tol=None, rows=None, **kwargs):
    """Run on ep-host and onnxruntime; every output must agree in dtype, shape and values.

    ``rows``: per batch entry, how many leading rows of output 0 the op defines.
    """
    model, feeds = contrib_model(op, inputs, outputs, **kwargs)
    ours, theirs = run_ep_host(model, feeds), run_onnxruntime(model, feeds)
    assert len(ours) == len(theirs)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype, a.shape, b.shape)
        if i == 0 and rows is not None:
            a = np.concatenate([a[n, :r] for n, r in enumerate(rows)])
            b = np.concatenate([b[n, :r] for n, r in enumerate(rows)])
        np.testing.assert_allclose(a, b, **(tol or TOL[dtype]), err_msg=f"output {i}")
    return ours


@pytest.fixture
def rn(rng):
    def draw(*shape, dtype=F32, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(dtype)
    return draw


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("op, bias, attrs", [
    ("Gelu", False, {}), ("FastGelu", False, {}), ("FastGelu", True, {}),
    ("BiasGelu", True, {}), ("QuickGelu", False, {}), ("QuickGelu", False, {"alpha": -0.7}),
])
def test_activations(rn, dtype, op, bias, attrs):
    inputs = [("x", rn(2, 3, 8, dtype=dtype, scale=3.0))]
    if bias:
        inputs.append(("b", rn(8, dtype=dtype)))
    compare(op, inputs, dtype=dtype, **attrs)


LAYER_NORM_OUTPUTS = ("y", "mean", "inv_std_var", "input_skip_bias_sum")


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("x_shape, skip_shape, beta, bias", [
    ((2, 3, 16), (2, 3, 16), True, True),
    ((2, 3, 16), (1, 3, 16), False, False),
    ((2, 3, 16), (3, 16), False, True),
    ((3, 16), (3, 16), True, False),
])
def test_skip_layer_norm_all_outputs(rn, dtype, x_shape, skip_shape, beta, bias):
    inputs = [("x", rn(*x_shape, dtype=dtype)), ("skip", rn(*skip_shape, dtype=dtype)),
              ("gamma", rn(16, dtype=dtype)), ("beta", rn(16, dtype=dtype) if beta else None),
              ("bias", rn(16, dtype=dtype) if bias else None)]
    compare("SkipLayerNormalization", inputs, LAYER_NORM_OUTPUTS, dtype=dtype, epsilon=1e-5)
    del inputs[3]
    compare("SkipSimplifiedLayerNormalization", inputs, LAYER_NORM_OUTPUTS, dtype=dtype)


def test_skip_layer_norm_default_epsilon_and_omitted_outputs(rn):
    inputs = [("x", rn(2, 3, 16)), ("skip", rn(2, 3, 16)), ("gamma", rn(16)),
              ("beta", None), ("bias", rn(16))]
    compare("SkipLayerNormalization", inputs, ("y", "", "", "input_skip_bias_sum"))


@pytest.mark.parametrize("x_type, scale_type", [(F32, F32), (F16, F16), (F32, F16), (F16, F32)])
@pytest.mark.parametrize("axis, scale_shape", [(-1, (16,)), (1, (3, 16)), (-2, (3, 16))])
def test_simplified_layer_norm(rn, x_type, scale_type, axis, scale_shape):
    inputs = [("x", rn(2, 3, 16, dtype=x_type)), ("scale", rn(*scale_shape, dtype=scale_type))]
    compare("SimplifiedLayerNormalization", inputs, ("y", "inv_std_var"), domain="",
            dtype=F16 if F16 in (x_type, scale_type) else F32, axis=axis, epsilon=1e-3)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("trans_a, trans_b, batch_a, batch_b",
                         list(itertools.product([0, 1], repeat=4)))
def test_fused_matmul_orientations(rn, dtype, trans_a, trans_b, batch_a, batch_b):
    a, b = rn(2, 3, 4, 5, dtype=dtype), rn(2, 3, 5, 6, dtype=dtype)
    if trans_a:
        a = np.swapaxes(a, -1, -2)
    if batch_a:  # stored with the row axis first; transBatchA moves it back
        a = np.moveaxis(a, a.ndim - 2, 0)
    if trans_b:
        b = np.swapaxes(b, -1, -2)
    if batch_b:
        b = np.moveaxis(b, b.ndim - 2, 0)
    (y,) = compare("FusedMatMul", [("a", np.ascontiguousarray(a)), ("b", np.ascontiguousarray(b))],
                   dtype=dtype, alpha=0.5, transA=trans_a, transB=trans_b, transBatchA=batch_a,
                   transBatchB=batch_b)
    assert y.shape == (2, 3, 4, 6)


@pytest.mark.parametrize("a_shape, b_shape", [((4, 5), (5, 6)), ((3, 4, 5), (5, 6)),
                                              ((1, 4, 5), (3, 5, 6)), ((5,), (5, 6))])
def test_fused_matmul_broadcasts(rn, a_shape, b_shape):
    compare("FusedMatMul", [("a", rn(*a_shape)), ("b", rn(*b_shape))], alpha=2.0)


def pack(values, bits):
    """Pack unsigned ``bits``-wide ints along the last axis, low bits first."""
    per = 8 // bits
    pad = (-values.shape[-1]) % per
    v = np.concatenate([values, np.zeros((*values.shape[:-1], pad), values.dtype)], -1)
    v = v.reshape(*values.shape[:-1], -1, per).astype(np.uint8)
    return np.bitwise_or.reduce([v[..., i] << (bits * i) for i in range(per)]).astype(np.uint8)


def nbits_inputs(rng, k, n, block, bits, zero_points=None, g_idx=None, bias=False, dtype=F32,
                 a_shape=(3,)):
    blocks = -(-k // block)
    q = rng.integers(0, 1 << bits, size=(n, blocks, block))
    inputs = [("a", rng.standard_normal((*a_shape, k)).astype(dtype)), ("b", pack(q, bits)),
              ("scales", (rng.random((n, blocks)) * 0.1 + 0.01).astype(dtype))]
    if zero_points == "packed":
        inputs.append(("zp", pack(rng.integers(0, 1 << bits, size=(n, blocks)), bits)))
    elif zero_points == "float":
        inputs.append(("zp", (rng.random((n, blocks)) * (1 << bits)).astype(dtype)))
    else:
        inputs.append(("zp", None))
    inputs.append(("g_idx", g_idx))
    inputs.append(("bias", rng.standard_normal(n).astype(dtype) if bias else None))
    return inputs


@pytest.mark.parametrize("k, n, block, bits, zero_points, bias, dtype", [
    (64, 8, 32, 4, None, False, F32),
    (64, 8, 16, 4, "packed", True, F32),
    (70, 5, 32, 4, "packed", False, F32),  # K not a multiple of block_size
    (70, 5, 32, 4, "float", True, F32),
    (64, 8, 32, 8, "packed", False, F32),
    (70, 7, 16, 2, "packed", False, F32),
    (128, 16, 64, 4, "packed", True, F16),
    (96, 8, 32, 4, "float", False, F16),
])
def test_matmul_nbits(rng, k, n, block, bits, zero_points, bias, dtype):
    inputs = nbits_inputs(rng, k, n, block, bits, zero_points, bias=bias, dtype=dtype,
                          a_shape=(2, 3))
    compare("MatMulNBits", inputs, dtype=dtype, tol={"rtol": 0, "atol": 1e-2},
            constants=("b", "scales", "zp", "bias"), K=k, N=n, block_size=block, bits=bits)


@pytest.mark.parametrize("zero_points", [None, "float"])
def test_matmul_nbits_g_idx(rng, zero_points):
    g_idx = rng.permutation(np.arange(70) // 16).astype(np.int32)
    inputs = nbits_inputs(rng, 70, 8, 16, 4, zero_points, g_idx=g_idx)
    compare("MatMulNBits", inputs, tol={"rtol": 0, "atol": 1e-2}, K=70, N=8, block_size=16)


def caches(rng, positions, half, dtype=F32):
    angles = rng.random((positions, half)) * 6
    return np.cos(angles).astype(dtype), np.sin(angles).astype(dtype)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
@pytest.mark.parametrize("offset", [True, False])
def test_rotary_embedding(rng, rn, dtype, interleaved, layout, offset):
    x = rn(2, 5, 24, dtype=dtype) if layout == "bsd" else rn(2, 3, 5, 8, dtype=dtype)
    pos = np.array([3], np.int64) if offset else rng.integers(0, 16, (2, 5)).astype(np.int64)
    cos, sin = caches(rng, 16, 4, dtype)
    inputs = [("x", x), ("pos", pos), ("cos", cos), ("sin", sin)]
    compare("RotaryEmbedding", inputs, dtype=dtype, interleaved=interleaved)
    compare("RotaryEmbedding", inputs, dtype=dtype, interleaved=interleaved, num_heads=3)


@pytest.mark.parametrize("layout", ["bsd", "bnsh"])
def test_rotary_embedding_partial(rng, rn, layout):
    x = rn(2, 5, 24) if layout == "bsd" else rn(2, 3, 5, 8)
    cos, sin = caches(rng, 16, 2)
    pos = rng.integers(0, 16, (2, 5)).astype(np.int64)
    compare("RotaryEmbedding", [("x", x), ("pos", pos), ("cos", cos), ("sin", sin)],
            num_heads=3, rotary_embedding_dim=4)


B, S, L, NH, H = 2, 4, 6, 3, 8
D = NH * H
MHA_PRESENT = ("y", "present_key", "present_value")


def mha(inputs, outputs=("y",), dtype=F32, **attrs):
    names = ["q", "k", "v", "bias", "mask", "attn_bias", "past_key", "past_value"]
    padded = list(zip(names, inputs, strict=False))
    while padded and padded[-1][1] is None:
        padded.pop()
    return compare("MultiHeadAttention", padded, outputs, dtype=dtype, num_heads=NH, **attrs)


def test_mha_cross_attention_with_bias_and_scale(rn):
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D), rn(3 * D)])
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D)], scale=0.3)
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, NH * 5)])  # v head size 5


@pytest.mark.parametrize("mask", ["1d", "2d", "3d", "2d fully masked row"])
def test_mha_key_padding_mask(rng, rn, mask):
    if mask == "1d":
        m = np.array([3, 6], np.int32)
    elif mask == "3d":
        m = (rng.random((B, S, L)) > 0.3).astype(np.int32)
    else:
        m = (rng.random((B, L)) > 0.3).astype(np.int32)
        if mask == "2d fully masked row":
            m[0] = 0
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D), None, m])
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D), None, m], mask_filter_value=-5.0)


@pytest.mark.parametrize("shape", [(B, NH, S, L), (1, 1, S, L), (1, NH, S, L)])
def test_mha_attention_bias(rn, shape):
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D), None, None, rn(*shape)])


def test_mha_past_and_present(rng, rn):
    past = [rn(B, NH, 3, H), rn(B, NH, 3, H)]
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D), rn(3 * D), None, None, *past], MHA_PRESENT)
    mask = (rng.random((B, 3 + L)) > 0.3).astype(np.int32)
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D), rn(3 * D), mask, rn(B, NH, S, 3 + L), *past],
        MHA_PRESENT)
    mha([rn(B, S, D), rn(B, L, D), rn(B, L, D), rn(3 * D)], MHA_PRESENT)


def test_mha_unidirectional(rn):
    q = rn(B, S, D)
    mha([q, q, rn(B, S, D)], unidirectional=1)
    padding = np.array([[1, 1, 0, 0], [0, 0, 0, 1]], np.int32)  # rows fully masked too
    mha([q, q, rn(B, S, D), None, padding], unidirectional=1)
    past = [rn(B, NH, 3, H), rn(B, NH, 3, H)]
    mha([q, q, rn(B, S, D), None, None, None, *past], MHA_PRESENT, unidirectional=1)
    mha([q[:, :1], q[:, :1], rn(B, 1, D), None, None, None, *past], MHA_PRESENT,
        unidirectional=1)


def test_mha_key_value_in_bnsh(rng, rn):
    k, v = rn(B, NH, L, H), rn(B, NH, L, H)
    mha([rn(B, S, D), k, v], MHA_PRESENT)
    mha([rn(B, S, D), k, v, None, (rng.random((B, L)) > 0.3).astype(np.int32)])


def test_mha_float16(rn):
    past = [rn(B, NH, 3, H, dtype=F16), rn(B, NH, 3, H, dtype=F16)]
    mha([rn(B, S, D, dtype=F16), rn(B, L, D, dtype=F16), rn(B, L, D, dtype=F16),
         rn(3 * D, dtype=F16), None, None, *past], MHA_PRESENT, dtype=F16)


def test_mha_packed_qkv_and_kv_equal_the_unpacked_op(rn):
    # onnxruntime's CPU kernel has no packed layouts: compare with its unpacked answer.
    q, k, v, bias = rn(B, S, NH, H), rn(B, S, NH, H), rn(B, S, NH, H), rn(3 * D)
    model, feeds = contrib_model("MultiHeadAttention", [("q", q.reshape(B, S, D)),
                                 ("k", k.reshape(B, S, D)), ("v", v.reshape(B, S, D)),
                                 ("bias", bias)], num_heads=NH)
    (expected,) = run_onnxruntime(model, feeds)
    packed, _ = contrib_model("MultiHeadAttention", [("qkv", np.stack([q, k, v], axis=3)),
                              ("", None), ("", None), ("bias", bias)], num_heads=NH)
    (y,) = run_ep_host(packed, {"qkv": np.stack([q, k, v], axis=3), "bias": bias})
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-4)
    packed, _ = contrib_model("MultiHeadAttention", [("q", q.reshape(B, S, D)),
                              ("kv", np.stack([k, v], axis=3)), ("", None), ("bias", bias)],
                              num_heads=NH)
    (y,) = run_ep_host(packed, {"q": q.reshape(B, S, D), "kv": np.stack([k, v], axis=3),
                                "bias": bias})
    np.testing.assert_allclose(y, expected, rtol=0, atol=1e-4)


QH, KVH = 4, 2
GQA_OUTPUTS = ("y", "present_key", "present_value")


def gqa(q, k, v, past, seqlens, total, extra=(), dtype=F32, rows=None, **attrs):
    inputs = [("q", q), ("k", k), ("v", v), ("past_key", past and past[0]),
              ("past_value", past and past[1]), ("seqlens_k", np.asarray(seqlens, np.int32)),
              ("total_sequence_length", np.array(total, np.int32)), *extra]
    return compare("GroupQueryAttention", inputs, GQA_OUTPUTS, dtype=dtype, rows=rows,
                   num_heads=QH, kv_num_heads=KVH, **attrs)


def gqa_step(rn, seq, head=8, dtype=F32):
    return (rn(B, seq, QH * head, dtype=dtype), rn(B, seq, KVH * head, dtype=dtype),
            rn(B, seq, KVH * head, dtype=dtype))


def test_gqa_prompt_and_padded_prompt(rn):
    q, k, v = gqa_step(rn, 5)
    gqa(q, k, v, None, [4, 4], 5)
    gqa(q, k, v, None, [4, 2], 5, rows=[5, 3])  # entry 1 has 3 tokens and 2 padding rows
    gqa(np.concatenate([q, k, v], axis=-1), None, None, None, [4, 4], 5)  # packed QKV


def test_gqa_decode_ragged_and_static_buffer(rn):
    past = (rn(B, KVH, 7, 8), rn(B, KVH, 7, 8))
    q, k, v = gqa_step(rn, 1)
    gqa(q, k, v, past, [7, 4], 8)  # a growing cache; entry 1 is shorter
    gqa(q, k, v, past, [3, 5], 6)  # a static buffer longer than total_sequence_length
    gqa(np.concatenate([q, k, v], axis=-1), None, None, past, [7, 4], 8)


def test_gqa_second_prompt_chunk(rn):
    past = (rn(1, KVH, 7, 8), rn(1, KVH, 7, 8))
    q, k, v = (x[:1] for x in gqa_step(rn, 5))
    gqa(q, k, v, past, [11], 12)


@pytest.mark.parametrize("attrs", [{"local_window_size": 2}, {"softcap": 2.0}, {"scale": 0.7},
                                   {"softcap": 1.5, "scale": 0.5, "local_window_size": 3},
                                   {"causal": 0}, {"smooth_softmax": 1}])
def test_gqa_attributes(rn, attrs):
    q, k, v = gqa_step(rn, 5)
    gqa(3 * q, 3 * k, v, None, [4, 4], 5, **attrs)
    past = (3 * rn(B, KVH, 7, 8), rn(B, KVH, 7, 8))
    q, k, v = gqa_step(rn, 1)
    gqa(3 * q, 3 * k, v, past, [7, 5], 8, **attrs)


@pytest.mark.parametrize("dtype", [F32, F16])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("half", [8, 16])  # 8: rotate half of each 32-wide head
def test_gqa_rotary(rng, rn, dtype, interleaved, half):
    cos, sin = caches(rng, 32, half, dtype)
    extra = [("cos", cos), ("sin", sin)]
    attrs = {"do_rotary": 1, "rotary_interleaved": interleaved}
    q, k, v = gqa_step(rn, 5, head=32, dtype=dtype)
    gqa(q, k, v, None, [4, 3], 5, extra, dtype=dtype, rows=[5, 4], **attrs)
    past = (rn(B, KVH, 7, 32, dtype=dtype), rn(B, KVH, 7, 32, dtype=dtype))
    q, k, v = gqa_step(rn, 1, head=32, dtype=dtype)
    gqa(q, k, v, past, [7, 4], 8, extra, dtype=dtype, **attrs)
    gqa(np.concatenate([q, k, v], axis=-1), None, None, past, [7, 4], 8, extra, dtype=dtype,
        **attrs)


def test_gqa_attention_bias_and_head_sink(rn):
    none = [("cos", None), ("sin", None), ("position_ids", None)]
    q, k, v = gqa_step(rn, 5)
    gqa(q, k, v, None, [4, 4], 5, [*none, ("attn_bias", rn(B, QH, 5, 5))])
    gqa(q, k, v, None, [4, 4], 5, [*none, ("attn_bias", rn(1, 1, 5, 5))])
    gqa(q, k, v, None, [4, 4], 5, [*none, ("attn_bias", None), ("head_sink", rn(QH))])
    past = (rn(B, KVH, 7, 8), rn(B, KVH, 7, 8))
    q, k, v = gqa_step(rn, 1)
    gqa(q, k, v, past, [3, 4], 6, [*none, ("attn_bias", rn(B, 1, 1, 6)), ("head_sink", rn(QH))])


def test_gqa_float16(rn):
    q, k, v = gqa_step(rn, 5, dtype=F16)
    gqa(q, k, v, None, [4, 4], 5, dtype=F16)
    past = (rn(B, KVH, 7, 8, dtype=F16), rn(B, KVH, 7, 8, dtype=F16))
    q, k, v = gqa_step(rn, 1, dtype=F16)
    gqa(q, k, v, past, [7, 4], 8, dtype=F16)


def test_com_microsoft_resolves_by_the_models_opset(rn):
    model, _ = contrib_model("Gelu", [("x", rn(2, 3))])
    assert cpu_answer(model).is_supported
    model.opset_import[1].version = 0
    assert_declines(model, "opset", "no ONNX schema for opset 0 of domain com.microsoft",
                    "since_version 1")


@pytest.mark.parametrize("op, inputs, attrs, code, words", [
    ("Gelu", [("x", np.zeros(3))], {}, "dtype", ["float64"]),
    ("QuickGelu", [("x", np.zeros(3, F32))], {"beta": 1.0}, "attribute", ["beta"]),
    ("SimplifiedLayerNormalization", [("x", np.zeros((2, 3), F32)), ("s", np.zeros(3, F32))],
     {"stash_type": 0}, "attribute", ["stash_type=0"]),
    ("SkipLayerNormalization", [("x", np.zeros((1, 2, 3, 4), F32)),
     ("s", np.zeros((1, 2, 3, 4), F32)), ("g", np.zeros(4, F32))], {}, "shape", ["rank 2 or 3"]),
    ("FusedMatMul", [("a", np.zeros((3, 4, 5), F32)), ("b", np.zeros((5, 6), F32))],
     {"transBatchA": 1}, "shape", ["one rank >= 3"]),
    ("MatMulNBits", [("a", np.zeros((2, 32), F32)), ("b", np.zeros((4, 1, 16), np.uint8)),
     ("s", np.zeros((4, 1), F32))], {"K": 32, "N": 4, "block_size": 32, "weight_prepacked": 1},
     "attribute", ["weight_prepacked=1"]),
    ("MatMulNBits", [("a", np.zeros((2, 32), F32)), ("b", np.zeros((4, 1, 16), np.uint8)),
     ("s", np.zeros((4, 1), F32)), ("zp", np.zeros((4, 1), np.uint8)),
     ("g", np.zeros(32, np.int32))], {"K": 32, "N": 4, "block_size": 32}, "op", ["g_idx"]),
    ("MatMulNBits", [("a", np.zeros((2, 32), F32)), ("b", np.zeros((4, 1, 16), np.uint8)),
     ("s", np.zeros((4, 1), F32))], {"N": 4, "block_size": 32}, "attribute", ["'K'"]),
    ("RotaryEmbedding", [("x", np.zeros((1, 2, 8), F32)), ("p", np.zeros(1, np.int64)),
     ("c", np.zeros((4, 4), F32)), ("s", np.zeros((4, 4), F32))], {"scale": 2.0}, "attribute",
     ["scale=1.0"]),
    ("MultiHeadAttention", [("q", np.zeros((1, 4, 8), F32)), ("k", np.zeros((1, 6, 8), F32)),
     ("v", np.zeros((1, 6, 8), F32))], {"num_heads": 2, "unidirectional": 1}, "shape",
     ["as many new keys as queries"]),
    ("GroupQueryAttention", [("q", np.zeros((1, 1, 16), F32)), ("k", np.zeros((1, 1, 8), F32)),
     ("v", np.zeros((1, 1, 8), F32)), ("pk", None), ("pv", None),
     ("sl", np.zeros(1, np.int32)), ("t", np.ones((), np.int32)), ("c", None), ("s", None),
     ("pos", np.zeros((1, 1), np.int64))], {"num_heads": 2, "kv_num_heads": 1}, "op",
     ["position_ids"]),
    ("GroupQueryAttention", [("q", np.zeros((1, 1, 16), F32)), ("k", np.zeros((1, 1, 8), F32)),
     ("v", np.zeros((1, 1, 8), F32)), ("pk", None), ("pv", None),
     ("sl", np.zeros(1, np.int32)), ("t", np.ones((), np.int32))],
     {"num_heads": 2, "kv_num_heads": 1, "k_quant_type": "PER_TENSOR"}, "attribute",
     ["k_quant_type=NONE"]),
])
def test_declines_with_reason(op, inputs, attrs, code, words):
    model, _ = contrib_model(op, inputs, domain="" if op.startswith("Simplified") else MS,
                             **attrs)
    assert_declines(model, code, op, *words)


def test_mha_declines_the_qk_output():
    model, _ = contrib_model("MultiHeadAttention", [("q", np.zeros((1, 2, 8), F32)),
                             ("k", np.zeros((1, 2, 8), F32)), ("v", np.zeros((1, 2, 8), F32))],
                             ("y", "", "", "qk"), num_heads=2)
    assert_declines(model, "op", "qk output")


F = TensorProto.FLOAT
CONV_RNG = np.random.default_rng(0)
CONV_X = CONV_RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)
CONV_W = (CONV_RNG.standard_normal((4, 3, 3, 3)) * 0.5).astype(np.float32)
CONV_B = CONV_RNG.standard_normal(4).astype(np.float32)


def conv_reference():
    padded = np.pad(CONV_X, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, 4, 6, 6))
    for i in range(6):
        for j in range(6):
            out[0, :, i, j] = np.tensordot(CONV_W, padded[0, :, i:i + 3, j:j + 3], 3)
    return out + CONV_B.reshape(4, 1, 1)


ACTIVATIONS = {
    "Relu": ([], lambda y: np.maximum(y, 0)),
    "LeakyRelu": ([0.2], lambda y: np.where(y < 0, 0.2 * y, y)),
    "Sigmoid": ([], lambda y: 1 / (1 + np.exp(-y))),
    "Tanh": ([], np.tanh),
    "Clip": ([-0.5, 0.5], lambda y: np.clip(y, -0.5, 0.5)),
}


def fused_model(activation, params, with_weights_as_inputs=False):
    node = helper.make_node("FusedConv", ["x", "w", "b"], ["y"], domain="com.microsoft",
                            activation=activation, pads=[1, 1, 1, 1], group=1,
                            **({"activation_params": params} if params else {}))
    inputs = [("x", F, [1, 3, 6, 6])]
    inits = [numpy_helper.from_array(CONV_W, "w"), numpy_helper.from_array(CONV_B, "b")]
    if with_weights_as_inputs:
        inputs += [("w", F, [4, 3, 3, 3]), ("b", F, [4])]
        inits = []
    return make_model([node], inputs, [("y", F, [1, 4, 6, 6])], initializers=inits,
                      domains=[("com.microsoft", 1)])


@pytest.mark.parametrize("activation", list(ACTIVATIONS))
@pytest.mark.parametrize("constant_weights", [True, False])
def test_fused_conv_equals_conv_then_activation(activation, constant_weights):
    params, fn = ACTIVATIONS[activation]
    model = fused_model(activation, params, with_weights_as_inputs=not constant_weights)
    feeds = {"x": CONV_X} if constant_weights else {"x": CONV_X, "w": CONV_W, "b": CONV_B}
    (y,) = run_ep_host(model, feeds)
    np.testing.assert_allclose(y, fn(conv_reference()), rtol=1e-5, atol=1e-5)


def test_an_unknown_activation_is_declined_with_its_name():
    import ep_host

    model = fused_model("Softplus", [])
    with pytest.raises(ep_host.PlacementError, match="FusedConv: CPU EP applies activation"):
        ep_host.InferenceSession(model.SerializeToString(), providers=["cpu"])
