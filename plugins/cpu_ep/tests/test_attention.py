"""Attention, FlexAttention, LinearAttention, RotaryEmbedding and SwiGLU on the CPU EP."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_declines, assert_matches_onnxruntime, make_model, run_ep_host
from onnx import TensorProto, helper, numpy_helper

F = TensorProto.FLOAT
H = TensorProto.FLOAT16
I64 = TensorProto.INT64
TOL = {"rtol": 1e-4, "atol": 1e-5}
B, HQ, HKV, S, L, D, DV, P = 2, 4, 2, 3, 5, 8, 6, 2


def randn(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def attention_model(opset, inputs, outputs=("y",), elem=F, **attrs):
    """``inputs``: (name, elem, shape) or None for an omitted optional input."""
    node = helper.make_node("Attention", [i[0] if i else "" for i in inputs], list(outputs),
                            **attrs)
    return make_model([node], [i for i in inputs if i], [(o, elem, None) for o in outputs if o],
                      opset=opset)


def qkv(rng, elem=F, dtype=np.float32):
    inputs = [("q", elem, [B, HQ, S, D]), ("k", elem, [B, HKV, L, D]),
              ("v", elem, [B, HKV, L, DV])]
    feeds = {"q": randn(rng, B, HQ, S, D, dtype=dtype), "k": randn(rng, B, HKV, L, D, dtype=dtype),
             "v": randn(rng, B, HKV, L, DV, dtype=dtype)}
    return inputs, feeds


# -- Attention --------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [23, 24, 25])
@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1}, {"scale": 0.3, "softcap": 1.5}])
def test_attention_grouped_heads_match_onnxruntime(rng, opset, attrs):
    inputs, feeds = qkv(rng)
    assert_matches_onnxruntime(attention_model(opset, inputs, **attrs), feeds, **TOL)


@pytest.mark.parametrize("mode", [0, 1, 3])
def test_attention_cache_and_qk_outputs_match_onnxruntime(rng, mode):
    inputs, feeds = qkv(rng)
    inputs += [("m", F, [S, L + P]), ("pk", F, [B, HKV, P, D]), ("pv", F, [B, HKV, P, DV])]
    feeds |= {"m": randn(rng, S, L + P), "pk": randn(rng, B, HKV, P, D),
              "pv": randn(rng, B, HKV, P, DV)}
    model = attention_model(23, inputs, ("y", "present_k", "present_v", "qk"), is_causal=1,
                            softcap=2.0, qk_matmul_output_mode=mode)
    _, present_k, _, _ = assert_matches_onnxruntime(model, feeds, **TOL)
    np.testing.assert_array_equal(present_k[:, :, :P], feeds["pk"])


def test_attention_mode_2_output_carries_the_mask_and_the_causal_bias(rng):
    # onnxruntime writes the lowest float where the spec's bias is -inf; compare by hand.
    inputs, feeds = qkv(rng)
    inputs.append(("m", F, [S, L]))
    feeds["m"] = randn(rng, S, L)
    model = attention_model(23, inputs, ("y", "", "", "qk"), is_causal=1,
                            qk_matmul_output_mode=2)
    _, qk = run_ep_host(model, feeds)
    k = np.repeat(feeds["k"], HQ // HKV, axis=1)
    raw = feeds["q"] @ k.swapaxes(-1, -2) / np.sqrt(D) + feeds["m"]
    causal = np.tril(np.ones((S, L), bool))
    np.testing.assert_allclose(qk[..., causal], raw[..., causal], **TOL)
    assert np.isneginf(qk[..., ~causal]).all()


def test_attention_3d_bool_mask_matches_onnxruntime(rng):
    inputs = [("q", F, [B, S, HQ * D]), ("k", F, [B, L, HKV * D]), ("v", F, [B, L, HKV * DV]),
              ("m", TensorProto.BOOL, [B, 1, S, L])]
    mask = rng.random((B, 1, S, L)) > 0.3
    mask[..., 0] = True  # no fully masked row: onnxruntime fills those differently
    feeds = {"q": randn(rng, B, S, HQ * D), "k": randn(rng, B, L, HKV * D),
             "v": randn(rng, B, L, HKV * DV), "m": mask}
    model = attention_model(23, inputs, q_num_heads=HQ, kv_num_heads=HKV)
    (y,) = assert_matches_onnxruntime(model, feeds, **TOL)
    assert y.shape == (B, S, HQ * DV)


@pytest.mark.parametrize(("elem", "dtype", "tol"), [(H, np.float16, 3e-3),
                                                    (TensorProto.DOUBLE, np.float64, 1e-6)])
def test_attention_other_float_types(rng, elem, dtype, tol):
    inputs, feeds = qkv(rng, elem, dtype)
    (y,) = assert_matches_onnxruntime(attention_model(23, inputs, elem=elem, is_causal=1), feeds,
                                      rtol=tol, atol=tol)
    assert y.dtype == dtype


def test_attention_fully_masked_row_is_zero(rng):
    inputs, feeds = qkv(rng)
    inputs.append(("m", TensorProto.BOOL, [S, L]))
    feeds["m"] = np.ones((S, L), bool)
    feeds["m"][1] = False
    (y,) = run_ep_host(attention_model(23, inputs), feeds)
    assert np.all(y[:, :, 1] == 0) and np.isfinite(y).all() and np.any(y[:, :, 0] != 0)


@pytest.mark.parametrize("causal", [0, 1])
def test_attention_24_external_cache_matches_onnxruntime(rng, causal):
    inputs, feeds = qkv(rng)
    inputs += [None, None, None, ("n", I64, [B])]
    feeds["n"] = np.array([3, 5], np.int64)
    assert_matches_onnxruntime(attention_model(24, inputs, is_causal=causal), feeds, **TOL)


def test_attention_24_pads_a_short_mask_with_minus_infinity(rng):
    inputs, feeds = qkv(rng)
    short = randn(rng, S, 3)
    (padded,) = run_ep_host(attention_model(24, inputs + [("m", F, [S, 3])]), feeds | {"m": short})
    full = np.concatenate([short, np.full((S, L - 3), -np.inf, np.float32)], axis=1)
    (explicit,) = run_ep_host(attention_model(24, inputs + [("m", F, [S, L])]), feeds | {"m": full})
    np.testing.assert_array_equal(padded, explicit)


@pytest.mark.parametrize(("causal", "left", "right"), [(1, 2, -1), (0, 1, 2), (0, 0, 0)])
def test_attention_25_windows_match_onnxruntime(rng, causal, left, right):
    inputs, feeds = qkv(rng)
    inputs += [None, ("pk", F, [B, HKV, P, D]), ("pv", F, [B, HKV, P, DV])]
    feeds |= {"pk": randn(rng, B, HKV, P, D), "pv": randn(rng, B, HKV, P, DV)}
    model = attention_model(25, inputs, ("y", "present_k", "present_v"), is_causal=causal,
                            left_window_size=left, right_window_size=right)
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_attention_declines():
    base = [("q", F, [B, HQ, S, D]), ("k", F, [B, HKV, L, D]), ("v", F, [B, HKV, L, DV])]
    int_mask = attention_model(23, base + [("m", TensorProto.INT32, [S, L])])
    assert_declines(int_mask, "dtype", "bool or floating attn_mask", "int32")
    only_key = attention_model(23, base + [None, ("pk", F, [B, HKV, P, D])])
    assert_declines(only_key, "attribute", "past_key and past_value")
    cache_and_nonpad = attention_model(24, base + [None, ("pk", F, [B, HKV, P, D]),
                                                   ("pv", F, [B, HKV, P, DV]), ("n", I64, [B])])
    assert_declines(cache_and_nonpad, "attribute", "nonpad_kv_seqlen")
    flat = [("q", F, [B, S, 32]), ("k", F, [B, L, 16]), ("v", F, [B, L, 16])]
    assert_declines(attention_model(23, flat), "attribute", "q_num_heads")
    one_wide = attention_model(24, base + [("m", F, [S, 1])])
    assert_declines(one_wide, "shape", "ambiguous")
    uneven = [("q", F, [B, 3, S, D]), ("k", F, [B, 2, L, D]), ("v", F, [B, 2, L, DV])]
    assert_declines(attention_model(23, uneven), "shape", "multiple of kv_num_heads")


# -- FlexAttention ----------------------------------------------------------------------------


def flex_model(rng, score_mod=None, prob_mod=None, **attrs):
    if score_mod is not None:
        attrs["score_mod"] = score_mod
    if prob_mod is not None:
        attrs["prob_mod"] = prob_mod
    node = helper.make_node("FlexAttention", ["q", "k", "v"], ["y"], domain="ai.onnx.preview",
                            **attrs)
    inputs, feeds = qkv(rng)
    model = make_model([node], inputs, [("y", F, None)], opset=26,
                       domains=[("ai.onnx.preview", 1)])
    return model, feeds


def modifier(name, op, constant):
    scores = helper.make_tensor_value_info("s", F, None)
    out = helper.make_tensor_value_info("out", F, None)
    c = numpy_helper.from_array(np.asarray(constant, np.float32), "c")
    return helper.make_graph([helper.make_node(op, ["s", "c"], ["out"])], name, [scores], [out],
                             initializer=[c])


def test_flex_attention_without_modifiers_is_attention(rng):
    model, feeds = flex_model(rng, scale=0.25)
    (flex,) = run_ep_host(model, feeds)
    inputs, _ = qkv(rng)
    (plain,) = run_ep_host(attention_model(23, inputs, scale=0.25), feeds)
    np.testing.assert_allclose(flex, plain, **TOL)


def test_flex_attention_score_mod_masks_like_a_causal_attention(rng):
    causal = np.where(np.tril(np.ones((S, L), bool)), 0, -np.inf)
    model, feeds = flex_model(rng, score_mod=modifier("causal", "Add", causal))
    (flex,) = run_ep_host(model, feeds)
    inputs, _ = qkv(rng)
    (plain,) = run_ep_host(attention_model(23, inputs, is_causal=1), feeds)
    np.testing.assert_allclose(flex, plain, **TOL)


def test_flex_attention_prob_mod_scales_the_probabilities(rng):
    model, feeds = flex_model(rng)
    (plain,) = run_ep_host(model, feeds)
    model, _ = flex_model(rng, prob_mod=modifier("half", "Mul", 0.5))
    (halved,) = run_ep_host(model, feeds)
    np.testing.assert_allclose(halved, plain / 2, **TOL)


# -- LinearAttention --------------------------------------------------------------------------

T = 4


def linear_model(rule, hq=HQ, hkv=HKV, past=False, decay_width=None, beta_width=None, steps=T,
                 **attrs):
    names = ["q", "k", "v", "past" if past else "", "g" if decay_width else "",
             "b" if beta_width else ""]
    while not names[-1]:
        names.pop()
    node = helper.make_node("LinearAttention", names, ["y", "state"], update_rule=rule,
                            q_num_heads=hq, kv_num_heads=hkv, **attrs)
    widths = {"q": hq * D, "k": hkv * D, "v": hkv * DV, "g": decay_width, "b": beta_width}
    inputs = [(n, F, [B, hkv, D, DV] if n == "past" else [B, steps, widths[n]])
              for n in names if n]
    return make_model([node], inputs, [("y", F, None), ("state", F, None)], opset=27)


def linear_feeds(rng, hq=HQ, hkv=HKV, steps=T):
    return {"q": randn(rng, B, steps, hq * D), "k": randn(rng, B, steps, hkv * D) / 3,
            "v": randn(rng, B, steps, hkv * DV), "g": -rng.random((B, steps, hkv * D),
                                                                 np.float32),
            "b": rng.random((B, steps, hkv), np.float32)}


def test_linear_attention_linear_rule_is_causal_linear_attention(rng):
    f = linear_feeds(rng)
    y, state = run_ep_host(linear_model("linear"), {k: f[k] for k in "qkv"})
    q = f["q"].reshape(B, T, HQ, D)
    k = np.repeat(f["k"].reshape(B, T, HKV, D), HQ // HKV, axis=2)
    v = np.repeat(f["v"].reshape(B, T, HKV, DV), HQ // HKV, axis=2)
    scores = np.einsum("bthd,bshd->bhts", q, k) * np.tril(np.ones((T, T)))
    expected = np.einsum("bhts,bshd->bthd", scores, v) / np.sqrt(D)
    np.testing.assert_allclose(y, expected.reshape(B, T, -1), **TOL)
    np.testing.assert_allclose(
        state, np.einsum("bthk,bthv->bhkv", f["k"].reshape(B, T, HKV, D),
                         f["v"].reshape(B, T, HKV, DV)), **TOL)


@pytest.mark.parametrize(("rule", "decay", "beta"), [("gated", HKV * D, None),
                                                     ("gated", HKV, None),
                                                     ("delta", None, HKV),
                                                     ("gated_delta", HKV * D, 1)])
def test_linear_attention_prefill_equals_token_by_token_decode(rng, rule, decay, beta):
    f = linear_feeds(rng)
    f["g"] = f["g"][..., :decay] if decay else f["g"]
    f["b"] = f["b"][..., :beta] if beta else f["b"]
    names = [n for n, on in (("q", 1), ("k", 1), ("v", 1), ("g", decay), ("b", beta)) if on]
    y_all, state_all = run_ep_host(
        linear_model(rule, past=True, decay_width=decay, beta_width=beta),
        {n: f[n] for n in names} | {"past": np.zeros((B, HKV, D, DV), np.float32)})
    state = np.zeros((B, HKV, D, DV), np.float32)
    step = linear_model(rule, past=True, decay_width=decay, beta_width=beta, steps=1)
    for t in range(T):
        y_t, state = run_ep_host(step, {n: f[n][:, t:t + 1] for n in names} | {"past": state})
        np.testing.assert_allclose(y_t[:, 0], y_all[:, t], **TOL)
    np.testing.assert_allclose(state, state_all, **TOL)


@pytest.mark.parametrize("decay", [HKV * D, HKV])
def test_linear_attention_gated_delta_follows_its_recurrence(rng, decay):
    f = linear_feeds(rng)
    g, beta = f["g"][..., :decay], f["b"]
    past = randn(rng, B, HKV, D, DV) / 4
    model = linear_model("gated_delta", past=True, decay_width=decay, beta_width=HKV, scale=0.5)
    y, state = run_ep_host(model, {n: f[n] for n in "qkv"} | {"past": past, "g": g, "b": beta})
    q = f["q"].reshape(B, T, HQ, D)
    k, v = f["k"].reshape(B, T, HKV, D), f["v"].reshape(B, T, HKV, DV)
    g = g.reshape(B, T, HKV, -1)
    want = np.zeros((B, T, HQ, DV))
    for b in range(B):
        for h in range(HKV):
            s = past[b, h].astype(np.float64)
            for t in range(T):
                s = np.exp(g[b, t, h])[:, None] * s  # decay per key dimension or per head
                s = s + beta[b, t, h] * np.outer(k[b, t, h], v[b, t, h] - s.T @ k[b, t, h])
                for hq in range(h * HQ // HKV, (h + 1) * HQ // HKV):
                    want[b, t, hq] = 0.5 * q[b, t, hq] @ s
            np.testing.assert_allclose(state[b, h], s, **TOL)
    np.testing.assert_allclose(y, want.reshape(B, T, -1), **TOL)


def test_linear_attention_declines():
    assert_declines(linear_model("gated"), "attribute", "needs the decay input")
    assert_declines(linear_model("linear", hq=3, hkv=2), "attribute", "multiple of kv_num_heads")
    assert_declines(linear_model("delta", beta_width=3), "shape", "beta must have 2 or 1")


# -- RotaryEmbedding, SwiGLU ------------------------------------------------------------------


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize(("shape", "attrs", "half"), [([B, HQ, S, D], {}, D // 2),
                                                      ([B, S, HQ * D], {"num_heads": HQ}, D // 2),
                                                      ([B, HQ, S, D], {"rotary_embedding_dim": 4},
                                                       2)])
def test_rotary_embedding_matches_onnxruntime(rng, interleaved, shape, attrs, half):
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"],
                            interleaved=interleaved, **attrs)
    model = make_model([node], [("x", F, shape), ("cos", F, [10, half]), ("sin", F, [10, half]),
                                ("pos", I64, [B, S])], [("y", F, None)], opset=23)
    angles = rng.random((10, half)) * 6
    feeds = {"x": randn(rng, *shape), "cos": np.cos(angles).astype(np.float32),
             "sin": np.sin(angles).astype(np.float32),
             "pos": rng.integers(0, 10, (B, S)).astype(np.int64)}
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_rotary_embedding_declines_a_cache_of_the_wrong_width():
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"])
    model = make_model([node], [("x", F, [B, HQ, S, D]), ("cos", F, [B, S, 3]),
                                ("sin", F, [B, S, 3])], [("y", F, None)], opset=23)
    assert_declines(model, "shape", "'cos' must have 4")


def test_swiglu_is_swish_gate_times_value(rng):
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"], alpha=1.7)
    model = make_model([node], [("a", F, [3, 4]), ("b", F, [3, 4])], [("y", F, None)], opset=28)
    a, b = randn(rng, 3, 4) * 30, randn(rng, 3, 4)
    (y,) = run_ep_host(model, {"a": a, "b": b})
    np.testing.assert_allclose(y, a / (1 + np.exp(-1.7 * a.astype(np.float64))) * b, **TOL)


def test_swiglu_declines_broadcasting():
    node = helper.make_node("SwiGLU", ["a", "b"], ["y"])
    model = make_model([node], [("a", F, [3, 4]), ("b", F, [1, 4])], [("y", F, None)], opset=28)
    assert_declines(model, "shape", "same shape")
