"""Transformer blocks: Attention (scaled dot-product attention with grouped heads, masks, a KV
cache, softcap and sliding windows), FlexAttention (score and probability modifier subgraphs),
LinearAttention (the recurrent linear-attention family), RotaryEmbedding and SwiGLU.

Half-precision inputs are computed in float32 and rounded once at the end."""

from __future__ import annotations

import math
from typing import Any

from ep_host import Kernel, NodeView, ProviderContext, element_count, require
from ep_host import dtype as onnx_dtype
from ep_host.kernels.registry import FLOATS_BF16, kernel


def _work(xp, *arrays):
    """float64 when any input is float64, else float32 (half types widen to float32)."""
    return xp.float64 if any(a is not None and a.dtype == xp.float64 for a in arrays) \
        else xp.float32


def _rank(value):
    return None if value is None or value.shape is None else len(value.shape)


def _dim(value, axis):
    if value is None or value.shape is None or not -len(value.shape) <= axis < len(value.shape):
        return None
    d = value.shape[axis]
    return d if isinstance(d, int) else None


def _outputs_wanted(node):
    return {"wanted": tuple(v is not None for v in node.outputs)}


def _input(node, i):
    return node.inputs[i] if len(node.inputs) > i else None


def _sigmoid(xp, x):
    e = xp.exp(-xp.abs(x))  # never overflows
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


# -- Attention --------------------------------------------------------------------------------

SOFTMAX_PRECISIONS = {1: "float32", 10: "float16", 11: "float64", 16: "bfloat16"}


def _check_attention(node, provider):
    v = node.since_version
    attrs = node.attributes
    q, k, val = node.inputs[:3]
    ranks = {_rank(x) for x in (q, k, val)} - {None}
    require(ranks <= {3, 4} and len(ranks) <= 1,
            "Attention: Q, K and V must all be 3-D (batch, sequence, hidden) or all 4-D (batch, "
            "heads, sequence, head_size), got ranks {}", [_rank(x) for x in (q, k, val)],
            code="shape")
    rank = ranks.pop() if ranks else None
    if rank == 3:
        for name in ("q_num_heads", "kv_num_heads"):
            require(attrs.get(name, 0) > 0, "Attention: 3-D inputs need a positive {} "
                    "attribute, got {}", name, attrs.get(name), code="attribute")
        for x, name in ((q, "q_num_heads"), (k, "kv_num_heads"), (val, "kv_num_heads")):
            hidden = _dim(x, -1)
            require(hidden is None or hidden % attrs[name] == 0,
                    "Attention: hidden size {} of {!r} is not a multiple of {}={}", hidden,
                    x.name, name, attrs[name], code="shape")
    if rank == 4:
        hq, hkv = _dim(q, 1), _dim(k, 1)
    else:
        hq, hkv = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    require(hq is None or hkv is None or (hkv > 0 and hq % hkv == 0),
            "Attention: q_num_heads ({}) must be a multiple of kv_num_heads ({})", hq, hkv,
            code="shape")
    mask = _input(node, 3)
    if mask is not None and mask.dtype is not None:
        require(mask.dtype.name == "bool" or mask.dtype.is_float,
                "Attention: {} takes a bool or floating attn_mask (the two kinds the spec "
                "defines), got {}", provider, mask.dtype.name, code="dtype")
    past_key, past_value = _input(node, 4), _input(node, 5)
    require((past_key is None) == (past_value is None),
            "Attention: past_key and past_value must be given together, got only {!r}",
            (past_key or past_value).name if (past_key or past_value) else "", code="attribute")
    nonpad = _input(node, 6)
    if nonpad is not None:
        require(past_key is None, "Attention: nonpad_kv_seqlen (an external KV cache) cannot "
                "be combined with past_key/past_value", code="attribute")
    mode = attrs["qk_matmul_output_mode"]
    require(mode in (0, 1, 2, 3), "Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got "
            "{}", mode, code="attribute")
    precision = attrs.get("softmax_precision")
    require(precision is None or precision in SOFTMAX_PRECISIONS,
            "Attention: softmax_precision must be one of {} (FLOAT, FLOAT16, DOUBLE, BFLOAT16), "
            "got {}", sorted(SOFTMAX_PRECISIONS), precision, code="attribute")
    for name in ("left_window_size", "right_window_size"):
        size = attrs.get(name, -1)
        require(size >= -1, "Attention: {} must be -1 (unbounded) or >= 0, got {}", name, size,
                code="attribute")
    if mask is not None:
        require(_rank(mask) is None or 1 <= _rank(mask) <= 4, "Attention: attn_mask must "
                "broadcast to (batch, heads, q_sequence, total_sequence), got rank {}",
                _rank(mask), code="shape")
        last, total = _dim(mask, -1), _total_length(node, rank)
        if v < 24:
            require(last is None or total is None or last in (1, total),
                    "Attention-{}: attn_mask's last dimension must be 1 or the total sequence "
                    "length {}, got {}", v, total, last, code="shape")
        else:
            # A last mask dim of 1 could be broadcast or padded with -inf: the spec allows both.
            require(last != 1 or total in (None, 1),
                    "Attention-{}: an attn_mask whose last dimension is 1 is ambiguous with {} "
                    "keys (broadcast, or padded with -inf as shorter masks are); give the full "
                    "length", v, total, code="shape")
            require(last is None or total is None or last <= total,
                    "Attention-{}: attn_mask's last dimension ({}) exceeds the total sequence "
                    "length {}", v, last, total, code="shape")


def _total_length(node, rank):
    k, past = node.inputs[1], _input(node, 4)
    kv = _dim(k, 2 if rank == 4 else 1) if rank else None
    if past is None:
        return kv
    p = _dim(past, 2)
    return None if kv is None or p is None else kv + p


def _attention_flops(node):
    q, k, val = node.inputs[:3]
    y = node.outputs[0]
    if any(x is None or x.shape is None for x in (q, k, val, y)):
        return 1.0
    n_y = element_count(y.shape)
    n_q = element_count(q.shape)
    total = _total_length(node, len(q.shape)) or 1
    return 2.0 * (n_q + n_y) * total


def _heads_first(x, heads):
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(0, 2, 1, 3)


def _softmax_guarded(xp, s):
    """Softmax over the last axis; a row whose every score is -inf becomes zeros."""
    top = s.max(axis=-1, keepdims=True)
    dead = top == -xp.inf
    e = xp.exp(s - xp.where(dead, 0, top))
    total = e.sum(axis=-1, keepdims=True)
    return e / xp.where(dead, 1, total)


def _pad_last(xp, x, length, value):
    short = length - x.shape[-1]
    if short <= 0:
        return x
    widths = [(0, 0)] * (x.ndim - 1) + [(0, short)]
    return xp.pad(x, widths, mode="constant", constant_values=value)


def _attention(xp, q, k, v, attn_mask, past_key, past_value, nonpad, version, attrs, wanted):
    dtype = q.dtype
    three_d = q.ndim == 3
    if three_d:
        q = _heads_first(q, attrs["q_num_heads"])
        k = _heads_first(k, attrs["kv_num_heads"])
        v = _heads_first(v, attrs["kv_num_heads"])
    past = 0
    if past_key is not None:
        past = past_key.shape[2]
        k = xp.concatenate([past_key, k.astype(past_key.dtype, copy=False)], axis=2)
        v = xp.concatenate([past_value, v.astype(past_value.dtype, copy=False)], axis=2)
    present_k, present_v = k, v
    work = _work(xp, q, k, v)
    batch, hq, sq, head = q.shape
    hkv, total = k.shape[1], k.shape[2]
    scale = attrs.get("scale")
    if scale is None:
        scale = 1 / math.sqrt(head)
    root = xp.sqrt(xp.asarray(scale, dtype=work))
    qw = q.astype(work) * root
    kw = k.astype(work) * root
    vw = v.astype(work)
    if hq != hkv:
        kw = xp.repeat(kw, hq // hkv, axis=1)
        vw = xp.repeat(vw, hq // hkv, axis=1)
    scores = xp.matmul(qw, xp.swapaxes(kw, -1, -2))
    mode = attrs["qk_matmul_output_mode"]
    qk_out = scores if mode == 0 else None
    softcap = attrs["softcap"]
    if softcap > 0:
        scores = softcap * xp.tanh(scores / softcap)
    if mode == 1:
        qk_out = scores
    bias = None
    if attn_mask is not None:
        mask = attn_mask
        if version >= 24:
            mask = _pad_last(xp, mask, total, False if mask.dtype == xp.bool_ else -xp.inf)
        if mask.dtype == xp.bool_:
            bias = xp.where(mask, 0, -xp.inf).astype(work)
        else:
            bias = mask.astype(work)
    # The allowed set: causal frontier, padding of an external cache and sliding windows.
    offset = xp.asarray(past)
    if nonpad is not None and version >= 24:
        offset = nonpad.reshape(-1, 1, 1, 1) - sq
    row = xp.arange(sq).reshape(-1, 1) + offset  # absolute query position
    col = xp.arange(total)
    allowed = None

    def both(a, b):
        return b if a is None else a & b

    if attrs["is_causal"]:
        allowed = both(allowed, col <= row)
    if nonpad is not None:
        allowed = both(allowed, col < nonpad.reshape(-1, 1, 1, 1))
    left, right = attrs.get("left_window_size", -1), attrs.get("right_window_size", -1)
    if left >= 0:
        allowed = both(allowed, col >= row - left)
    if right >= 0:
        allowed = both(allowed, col <= row + right)
    if allowed is not None:
        structural = xp.where(allowed, 0, -xp.inf).astype(work)
        bias = structural if bias is None else bias + structural
    if bias is not None:
        scores = scores + bias
    if mode == 2:
        qk_out = scores
    precision = attrs.get("softmax_precision")
    if precision is None:
        probs = _softmax_guarded(xp, scores)
    else:
        target = onnx_dtype(precision).numpy
        if target.itemsize < 4:  # round to the half type before and after, compute in float32
            probs = _softmax_guarded(xp, scores.astype(target).astype(xp.float32))
            probs = probs.astype(target).astype(work)
        else:
            probs = _softmax_guarded(xp, scores.astype(target)).astype(work)
    if mode == 3:
        qk_out = probs
    y = xp.matmul(probs, vw).astype(dtype)
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(batch, sq, -1)
    results = [y, present_k, present_v,
               None if qk_out is None else qk_out.astype(dtype)]
    return tuple(r if want else None for r, want in zip(results, wanted, strict=False))


@kernel("Attention", 23, dtypes=FLOATS_BF16, check=_check_attention, flops=_attention_flops,
        bind=_outputs_wanted)
def attention_23(xp, q, k, v, attn_mask=None, past_key=None, past_value=None, *, is_causal,
                 qk_matmul_output_mode, softcap, kv_num_heads=None, q_num_heads=None,
                 scale=None, softmax_precision=None, wanted=(True,)):
    attrs = dict(is_causal=is_causal, qk_matmul_output_mode=qk_matmul_output_mode,
                 softcap=softcap, kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
                 scale=scale, softmax_precision=softmax_precision)
    return _attention(xp, q, k, v, attn_mask, past_key, past_value, None, 23, attrs, wanted)


@kernel("Attention", 24, dtypes=FLOATS_BF16, check=_check_attention, flops=_attention_flops,
        bind=_outputs_wanted)
def attention_24(xp, q, k, v, attn_mask=None, past_key=None, past_value=None,
                 nonpad_kv_seqlen=None, *, is_causal, qk_matmul_output_mode, softcap,
                 kv_num_heads=None, q_num_heads=None, scale=None, softmax_precision=None,
                 wanted=(True,)):
    attrs = dict(is_causal=is_causal, qk_matmul_output_mode=qk_matmul_output_mode,
                 softcap=softcap, kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
                 scale=scale, softmax_precision=softmax_precision)
    return _attention(xp, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, 24,
                      attrs, wanted)


@kernel("Attention", 25, dtypes=FLOATS_BF16, check=_check_attention, flops=_attention_flops,
        bind=_outputs_wanted)
def attention_25(xp, q, k, v, attn_mask=None, past_key=None, past_value=None,
                 nonpad_kv_seqlen=None, *, is_causal, qk_matmul_output_mode, softcap,
                 left_window_size, right_window_size, kv_num_heads=None, q_num_heads=None,
                 scale=None, softmax_precision=None, wanted=(True,)):
    attrs = dict(is_causal=is_causal, qk_matmul_output_mode=qk_matmul_output_mode,
                 softcap=softcap, kv_num_heads=kv_num_heads, q_num_heads=q_num_heads,
                 scale=scale, softmax_precision=softmax_precision,
                 left_window_size=left_window_size, right_window_size=right_window_size)
    return _attention(xp, q, k, v, attn_mask, past_key, past_value, nonpad_kv_seqlen, 25,
                      attrs, wanted)


# -- FlexAttention (ai.onnx.preview) ----------------------------------------------------------


def _check_flex(node, provider):
    q, k, val = node.inputs[:3]
    ranks = [_rank(x) for x in (q, k, val)]
    require(all(r in (None, 4) for r in ranks), "FlexAttention: Q, K and V must be rank 4, got "
            "ranks {}", ranks, code="shape")
    hq, hkv = _dim(q, 1), _dim(k, 1)
    require(hq is None or hkv is None or (hkv > 0 and hq % hkv == 0),
            "FlexAttention: q_num_heads ({}) must be a multiple of kv_num_heads ({})", hq, hkv,
            code="shape")
    precision = node.attributes.get("softmax_precision")
    require(precision is None or precision in SOFTMAX_PRECISIONS,
            "FlexAttention: softmax_precision must be one of {}, got {}",
            sorted(SOFTMAX_PRECISIONS), precision, code="attribute")
    for name, graph in node.subgraphs.items():
        require(len(graph.inputs) == 1 and len(graph.outputs) == 1,
                "FlexAttention: {} must take one input and give one output, got {} and {}",
                name, len(graph.inputs), len(graph.outputs), code="attribute")


class FlexAttentionKernel(Kernel):
    """Scores -> score_mod -> Softmax -> prob_mod -> @ V; the modifiers run as compiled bodies.
    A row that score_mod masks entirely yields NaN, as Softmax over all -inf does."""

    def __init__(self, xp: Any, node: NodeView, context: ProviderContext, *,
                 scale: float | None = None, softmax_precision: int | None = None, **_: Any):
        require(context is not None and context.subgraphs is not None,
                "FlexAttention: needs the host to compile its modifier subgraphs", code="fault")
        self.xp = xp
        self.scale = scale
        self.precision = softmax_precision
        self.bodies = {name: context.subgraphs.compile(g) for name, g in node.subgraphs.items()}

    def _modify(self, name: str, x: Any, scope: Any) -> Any:
        body = self.bodies.get(name)
        return x if body is None else self.xp.asarray(body.run([x], scope)[0])

    def run(self, q: Any, k: Any, v: Any, scope: Any = None) -> list[Any]:
        xp = self.xp
        dtype = q.dtype
        work = _work(xp, q, k, v)
        if self.precision is not None:
            softmax_type = onnx_dtype(self.precision).numpy
        else:
            softmax_type = xp.dtype(xp.float64 if dtype == xp.float64 else xp.float32)
        hq, hkv = q.shape[1], k.shape[1]
        kw, vw = k.astype(work), v.astype(work)
        if hq != hkv:
            kw = xp.repeat(kw, hq // hkv, axis=1)
            vw = xp.repeat(vw, hq // hkv, axis=1)
        scale = self.scale if self.scale is not None else 1 / math.sqrt(q.shape[-1])
        scores = (xp.matmul(q.astype(work), xp.swapaxes(kw, -1, -2)) * scale).astype(softmax_type)
        scores = self._modify("score_mod", scores, scope)
        s = scores.astype(xp.float64 if softmax_type == xp.float64 else xp.float32)
        e = xp.exp(s - s.max(axis=-1, keepdims=True))
        probs = (e / e.sum(axis=-1, keepdims=True)).astype(softmax_type)
        probs = self._modify("prob_mod", probs, scope)
        return [xp.matmul(probs.astype(work), vw).astype(dtype)]


@kernel("FlexAttention", 1, domain="ai.onnx.preview", dtypes=FLOATS_BF16, check=_check_flex,
        flops=_attention_flops, kernel_class=FlexAttentionKernel, subgraphs=True)
def flex_attention(xp, q, k, v, *, scale=None, softmax_precision=None, score_mod=None,
                   prob_mod=None):
    raise NotImplementedError  # FlexAttentionKernel runs it


# -- LinearAttention --------------------------------------------------------------------------

UPDATE_RULES = ("linear", "gated", "delta", "gated_delta")


def _check_linear_attention(node, provider):
    attrs = node.attributes
    rule = attrs["update_rule"]
    require(rule in UPDATE_RULES, "LinearAttention: update_rule must be one of {}, got {!r}",
            "/".join(UPDATE_RULES), rule, code="attribute")
    hq, hkv = attrs.get("q_num_heads"), attrs.get("kv_num_heads")
    require(hq is not None and hkv is not None and hq > 0 and hkv > 0 and hq % hkv == 0,
            "LinearAttention: q_num_heads ({}) must be a positive multiple of kv_num_heads "
            "({})", hq, hkv, code="attribute")
    q, k, val = node.inputs[:3]
    require(all(_rank(x) in (None, 3) for x in (q, k, val)),
            "LinearAttention: query, key and value must be 3-D (B, T, heads * size), got ranks "
            "{}", [_rank(x) for x in (q, k, val)], code="shape")
    for x, heads in ((q, hq), (k, hkv), (val, hkv)):
        hidden = _dim(x, -1)
        require(hidden is None or hidden % heads == 0, "LinearAttention: hidden size {} of {!r} "
                "is not a multiple of its head count {}", hidden, x.name, heads, code="shape")
    dq, dk = _dim(q, -1), _dim(k, -1)
    require(dq is None or dk is None or dq // hq == dk // hkv,
            "LinearAttention: query and key head sizes differ ({} and {})", dq and dq // hq,
            dk and dk // hkv, code="shape")
    decay, beta = _input(node, 4), _input(node, 5)
    if rule in ("gated", "gated_delta"):
        require(decay is not None, "LinearAttention: update_rule {!r} needs the decay input",
                rule, code="attribute")
    if rule in ("delta", "gated_delta"):
        require(beta is not None, "LinearAttention: update_rule {!r} needs the beta input",
                rule, code="attribute")
    dk = dk // hkv if dk is not None else None
    sizes = {"decay": (hkv, hkv * dk if dk else None), "beta": (hkv, 1)}
    for name, value in (("decay", decay), ("beta", beta)):
        last = _dim(value, -1)
        require(last is None or last in sizes[name], "LinearAttention: {} must have {} entries "
                "in its last dimension, got {}", name, " or ".join(
                    str(s) for s in sizes[name] if s is not None), last, code="shape")
    state = _input(node, 3)
    for value in (state, node.outputs[1] if len(node.outputs) > 1 else None):
        if value is not None and value.dtype is not None:
            require(value.dtype.name in FLOATS_BF16 - {"float64"}, "LinearAttention: state "
                    "must be float16/float32/bfloat16, got {}", value.dtype.name, code="dtype")


def _state_dtype(node):
    out = node.outputs[1] if len(node.outputs) > 1 else None
    if out is not None and out.dtype is not None and out.dtype.numpy is not None:
        return {"state_dtype": out.dtype.numpy}
    return {}


def _per_head(x, b, t, heads):
    """(B, T, heads * d) -> (B, heads, T, d); a (B, T, 1) gate broadcasts over the heads."""
    if x.shape[-1] == 1 and heads > 1:
        x = x.repeat(heads, axis=-1)
    return x.reshape(b, t, heads, -1).transpose(0, 2, 1, 3)


@kernel("LinearAttention", 27, dtypes=FLOATS_BF16 - {"float64"}, check=_check_linear_attention,
        bind=_state_dtype)
def linear_attention(xp, query, key, value, past_state=None, decay=None, beta=None, *,
                     chunk_size, kv_num_heads, q_num_heads, scale, update_rule,
                     state_dtype=None):
    dtype = query.dtype
    b, t, _ = query.shape
    work = xp.float32
    q = _per_head(query.astype(work), b, t, q_num_heads)
    k = _per_head(key.astype(work), b, t, kv_num_heads)
    v = _per_head(value.astype(work), b, t, kv_num_heads)
    dk, dv = k.shape[-1], v.shape[-1]
    if scale == 0:
        scale = 1 / math.sqrt(query.shape[-1] / q_num_heads)
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    g = _per_head(decay.astype(work), b, t, kv_num_heads) if gated else None
    rate = _per_head(beta.astype(work), b, t, kv_num_heads) if delta else None
    if past_state is None:
        state = xp.zeros((b, kv_num_heads, dk, dv), dtype=work)
    else:
        state = past_state.astype(work)
    group = q_num_heads // kv_num_heads
    out = xp.empty((b, q_num_heads, t, dv), dtype=work)
    for i in range(t):
        kt, vt = k[:, :, i], v[:, :, i]  # (B, H, dk), (B, H, dv)
        if gated:
            state = xp.exp(g[:, :, i])[..., None] * state  # per head or per key dimension
        if delta:
            recalled = xp.einsum("bhkv,bhk->bhv", state, kt)
            update = rate[:, :, i] * (vt - recalled)  # rate: (B, H, 1)
        else:
            update = vt
        state = state + kt[..., :, None] * update[..., None, :]
        shared = xp.repeat(state, group, axis=1) if group > 1 else state
        out[:, :, i] = scale * xp.einsum("bhk,bhkv->bhv", q[:, :, i], shared)
    y = out.transpose(0, 2, 1, 3).reshape(b, t, q_num_heads * dv).astype(dtype)
    if state_dtype is None:
        state_dtype = dtype if past_state is None else past_state.dtype
    return y, state.astype(state_dtype)


# -- RotaryEmbedding --------------------------------------------------------------------------


def _check_rotary(node, provider):
    attrs = node.attributes
    x = node.inputs[0]
    rank = _rank(x)
    require(rank in (None, 3, 4), "RotaryEmbedding: input must be 3-D (B, S, hidden) or 4-D "
            "(B, heads, S, head_size), got rank {}", rank, code="shape")
    heads = attrs.get("num_heads")
    if rank == 3:
        require(heads is not None and heads > 0, "RotaryEmbedding: a 3-D input needs a "
                "positive num_heads attribute, got {}", heads, code="attribute")
    hidden = _dim(x, -1)
    head = hidden if rank == 4 else (hidden // heads if hidden and heads else None)
    require(rank != 3 or hidden is None or hidden % heads == 0, "RotaryEmbedding: hidden size "
            "{} is not a multiple of num_heads {}", hidden, heads, code="shape")
    rot = attrs["rotary_embedding_dim"]
    require(rot >= 0 and rot % 2 == 0, "RotaryEmbedding: rotary_embedding_dim must be even and "
            ">= 0, got {}", rot, code="attribute")
    rot = rot or head
    require(head is None or rot is None or (rot <= head and rot % 2 == 0),
            "RotaryEmbedding: the rotated size {} must be even and at most the head size {}",
            rot, head, code="shape")
    cos, sin = node.inputs[1], node.inputs[2]
    for cache in (cos, sin):
        half = _dim(cache, -1)
        require(rot is None or half is None or half * 2 == rot, "RotaryEmbedding: {!r} must "
                "have {} (= rotated size / 2) entries in its last dimension, got {}", cache.name,
                rot and rot // 2, half, code="shape")
    want = 2 if _input(node, 3) is not None else 3
    for cache in (cos, sin):
        require(_rank(cache) in (None, want), "RotaryEmbedding: {!r} must be {}-D {}, got rank "
                "{}", cache.name, want, "with position_ids" if want == 2 else
                "(B, S, size / 2) without position_ids", _rank(cache), code="shape")


@kernel("RotaryEmbedding", 23, dtypes=FLOATS_BF16 - {"float64"}, check=_check_rotary)
def rotary_embedding(xp, x, cos_cache, sin_cache, position_ids=None, *, interleaved,
                     rotary_embedding_dim, num_heads=None):
    dtype = x.dtype
    shape = x.shape
    if x.ndim == 3:
        b, s, hidden = shape
        x = x.reshape(b, s, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)
    work = x.astype(xp.float32)
    rot = rotary_embedding_dim or work.shape[-1]
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    cos = cos_cache.astype(xp.float32)[:, None]  # (B, 1, S, rot / 2)
    sin = sin_cache.astype(xp.float32)[:, None]
    part = work[..., :rot]
    if interleaved:
        x1, x2 = part[..., 0::2], part[..., 1::2]
    else:
        x1, x2 = part[..., :rot // 2], part[..., rot // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        turned = xp.stack([real, imag], axis=-1).reshape(part.shape)
    else:
        turned = xp.concatenate([real, imag], axis=-1)
    y = xp.concatenate([turned, work[..., rot:]], axis=-1).astype(dtype)
    if len(shape) == 3:
        y = y.transpose(0, 2, 1, 3).reshape(shape)
    return y


# -- SwiGLU -----------------------------------------------------------------------------------


def _check_swiglu(node, provider):
    a, b = node.inputs[:2]
    if a is not None and b is not None and a.shape is not None and b.shape is not None:
        known = all(isinstance(d, int) for d in (*a.shape, *b.shape))
        require(not known or tuple(a.shape) == tuple(b.shape), "SwiGLU: A and B must have the "
                "same shape (no broadcasting), got {} and {}", a.shape, b.shape, code="shape")


@kernel("SwiGLU", 28, dtypes=FLOATS_BF16, check=_check_swiglu)
def swiglu(xp, a, b, *, alpha):
    if a.shape != b.shape:
        raise ValueError(f"SwiGLU: A and B must have the same shape, got {a.shape} and {b.shape}")
    work = _work(xp, a, b)
    aw = a.astype(work)
    return (aw * _sigmoid(xp, alpha * aw) * b.astype(work)).astype(a.dtype)
