"""com.microsoft ops that transformer exports use, as onnxruntime's contrib schemas define them
(plus SimplifiedLayerNormalization, which onnxruntime registers in the default domain).

onnx has no schemas for these ops, so the host fills no attribute defaults: each kernel's keyword
defaults are onnxruntime's documented ones. float16 is widened to float32 once and each output
rounded once; every other element type declines.
"""

from __future__ import annotations

import math

from ep_host import require
from ep_host.kernels.conv import check_conv, conv_flops, conv_workspace, convolve, prepare_conv
from ep_host.kernels.elementwise import fits, gelu_of, hard_sigmoid, hard_swish
from ep_host.kernels.registry import kernel

MS = "com.microsoft"
HALF_FLOATS = frozenset({"float16", "float32"})
TANH_GELU_A = math.sqrt(2.0 / math.pi)
TANH_GELU_B = 0.044715 * TANH_GELU_A


def _wide(xp, x):
    return x.astype(xp.float32) if x.dtype == xp.float16 else x


def _input(node, i):
    return node.inputs[i] if i < len(node.inputs) else None


def _dims(value):
    """Static dims (symbolic or unknown count as 1), or ``None`` for an unknown rank."""
    if value is None or value.shape is None:
        return None
    return tuple(d if isinstance(d, int) and d >= 0 else 1 for d in value.shape)


def _require_types(node, provider, indices, allowed, what):
    for i in indices:
        value = _input(node, i)
        if value is not None and value.dtype is not None:
            require(value.dtype.name in allowed, "{}: {} takes {} {}, got {} for input {!r}",
                    node.op_type, provider, "/".join(sorted(allowed)), what, value.dtype.name,
                    value.name,
                    code="dtype")


def _same_type(node, provider, indices):
    """Inputs ``indices`` share the first one's float16/float32 type."""
    _require_types(node, provider, indices[:1], HALF_FLOATS, "input")
    first = _input(node, indices[0])
    for i in indices[1:]:
        value = _input(node, i)
        if value is not None and value.dtype is not None and first.dtype is not None:
            require(value.dtype == first.dtype, "{}: input {!r} must have {}'s type {}, got {}",
                    node.op_type, value.name, first.name, first.dtype.name, value.dtype.name,
                    code="dtype")


def _rank_in(node, provider, i, ranks, what):
    value = _input(node, i)
    if value is not None and value.shape is not None:
        require(len(value.shape) in ranks, "{}: {} takes a {} {} of rank {}, got rank {}",
                node.op_type, provider, what, value.name, " or ".join(map(str, ranks)),
                len(value.shape),
                code="shape")


def _known_attributes(node, provider, *names):
    """Decline attributes this kernel does not know: it would ignore what they ask for."""
    unknown = sorted(set(node.attributes) - set(names))
    require(not unknown, "{}: {} does not know attribute(s) {}; it knows {}", node.op_type,
            provider,
            ", ".join(unknown), ", ".join(names) or "none", code="attribute")


def _outputs(node):
    return {"n_outputs": len(node.outputs)}


def _sigmoid(xp, z):
    e = xp.exp(-xp.abs(z))
    return xp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


# -- Activations --------------------------------------------------------------------------------


def _with_bias(xp, x, bias):
    w = _wide(xp, x)
    if bias is None:
        return w
    if tuple(bias.shape) != (x.shape[-1],):
        raise ValueError(f"bias shape {tuple(bias.shape)} must be ({x.shape[-1]},)")
    return w + _wide(xp, bias)


def _check_activation(node, provider, *attributes):
    _known_attributes(node, provider, *attributes)
    _rank_in(node, provider, 1, (1,), "bias")


@kernel("Gelu", 1, domain=MS, dtypes=HALF_FLOATS, check=_check_activation)
def gelu(xp, x):
    return gelu_of(xp, _wide(xp, x), "none").astype(x.dtype, copy=False)


@kernel("BiasGelu", 1, domain=MS, dtypes=HALF_FLOATS, check=_check_activation)
def bias_gelu(xp, a, b):
    """A provider's ``xp.bias_gelu_float32`` (the CPU EP's, numba) takes float32 in one pass."""
    compiled = getattr(xp, "bias_gelu_float32", None)
    y = None if compiled is None else compiled(a, b)
    if y is not None:
        return y
    return gelu_of(xp, _with_bias(xp, a, b), "none").astype(a.dtype)


@kernel("FastGelu", 1, domain=MS, dtypes=HALF_FLOATS, check=_check_activation)
def fast_gelu(xp, x, bias=None):
    """A provider's ``xp.fast_gelu_float32`` (the CPU EP's, numba) takes large float32 inputs:
    one pass, ``w sigmoid(2z)`` for ``0.5 w (1 + tanh(z))``, without the cancellation of ``1 +
    tanh(z)`` for w below about -3."""
    compiled = getattr(xp, "fast_gelu_float32", None)
    if compiled is not None and compiled.takes(x, bias):
        return compiled(x, bias)
    w = _with_bias(xp, x, bias)
    inner = w * (TANH_GELU_A + TANH_GELU_B * w * w)
    return (0.5 * w * (1.0 + xp.tanh(inner))).astype(x.dtype)


@kernel("QuickGelu", 1, domain=MS, dtypes=HALF_FLOATS, inplace=(0,),
        check=lambda node, provider: _check_activation(node, provider, "alpha"))
def quick_gelu(xp, x, *, alpha=1.702, out=None):
    """With alpha 1 (SiLU, as ``silu_fusion`` writes it) a provider's ``xp.compiled_sigmoid``
    takes large float32 tensors: one pass, the same float32 steps as Sigmoid then Mul."""
    compiled = getattr(xp, "compiled_sigmoid", None)
    if (alpha == 1.0 and compiled is not None and x.dtype == xp.float32
            and x.size >= compiled.MIN_SIZE and compiled.ready()):
        return compiled(x, out if fits(out, x.shape, x.dtype) else None, times_x=True)
    w = _wide(xp, x)
    return (w * _sigmoid(xp, alpha * w if alpha != 1.0 else w)).astype(x.dtype, copy=False)


# -- Normalizations -----------------------------------------------------------------------------


def _check_skip_norm(node, provider):
    _known_attributes(node, provider, "epsilon")
    _same_type(node, provider, list(range(len(node.inputs))))
    _rank_in(node, provider, 0, (2, 3), "input")
    for i in range(2, len(node.inputs)):
        _rank_in(node, provider, i, (1,), "gamma/beta/bias")


def _hidden_vector(xp, v, hidden, what):
    if tuple(v.shape) != (hidden,):
        raise ValueError(f"{what} shape {tuple(v.shape)} must be ({hidden},)")
    return _wide(xp, v)


def _skip_sum(xp, x, skip, bias):
    """``(x + bias) + skip``: the order of the Adds ``skip_layer_norm_fusion`` fuses (a
    MatMul's bias, then the residual), so the fused values equal the unfused graph's."""
    allowed = {tuple(x.shape), tuple(x.shape[-2:])} | (
        {(1, *x.shape[1:])} if x.ndim == 3 else set())
    if tuple(skip.shape) not in allowed:
        raise ValueError(f"skip shape {tuple(skip.shape)} must be one of {sorted(allowed)}")
    s = _wide(xp, x)
    if bias is not None:
        s = s + _hidden_vector(xp, bias, x.shape[-1], "bias")
    return s + _wide(xp, skip)


def _compiled_skip_norm(xp, x, skip, gamma, beta, bias, epsilon, n_outputs):
    """A provider's ``xp.compiled_skip_layer_norm`` (the CPU EP's, numba) for float32 with a
    skip of x's shape and vectors of its last dim; ``None`` where it does not apply."""
    compiled = getattr(xp, "compiled_skip_layer_norm", None)
    if (compiled is None or x.dtype != xp.float32 or x.size < compiled.MIN_SIZE
            or skip.dtype != xp.float32 or tuple(skip.shape) != tuple(x.shape)):
        return None
    hidden = (x.shape[-1],)
    if not all(v is None or (v.dtype == xp.float32 and tuple(v.shape) == hidden)
               for v in (gamma, beta, bias)) or not compiled.ready():
        return None
    y, mean, inv_std, s = compiled(x, skip, gamma, beta, bias, epsilon, n_outputs > 3)
    kept = x.shape[:-1] + (1,)
    return (y, mean.reshape(kept), inv_std.reshape(kept), s)[:n_outputs]


@kernel("SkipLayerNormalization", 1, domain=MS, dtypes=HALF_FLOATS, check=_check_skip_norm,
        bind=_outputs)
def skip_layer_norm(xp, x, skip, gamma, beta=None, bias=None, *, epsilon=1e-12, n_outputs=1):
    done = _compiled_skip_norm(xp, x, skip, gamma, beta, bias, epsilon, n_outputs)
    if done is not None:
        return done
    s = _skip_sum(xp, x, skip, bias)
    mean = xp.mean(s, axis=-1, keepdims=True)
    centred = s - mean
    inv_std = 1.0 / xp.sqrt(xp.mean(centred * centred, axis=-1, keepdims=True) + epsilon)
    y = centred * inv_std * _hidden_vector(xp, gamma, x.shape[-1], "gamma")
    if beta is not None:
        y = y + _hidden_vector(xp, beta, x.shape[-1], "beta")
    return (y.astype(x.dtype), mean, inv_std, s.astype(x.dtype))[:n_outputs]


@kernel("SkipSimplifiedLayerNormalization", 1, domain=MS, dtypes=HALF_FLOATS,
        check=_check_skip_norm, bind=_outputs)
def skip_simplified_layer_norm(xp, x, skip, gamma, bias=None, *, epsilon=1e-12, n_outputs=1):
    s = _skip_sum(xp, x, skip, bias)
    inv_std = 1.0 / xp.sqrt(xp.mean(s * s, axis=-1, keepdims=True) + epsilon)
    y = s * inv_std * _hidden_vector(xp, gamma, x.shape[-1], "gamma")
    mean = xp.zeros_like(inv_std)  # onnxruntime computes no mean for the RMS form: zeros
    return (y.astype(x.dtype), mean, inv_std, s.astype(x.dtype))[:n_outputs]


def _check_simplified_norm(node, provider):
    _known_attributes(node, provider, "axis", "epsilon", "stash_type")
    _require_types(node, provider, (0, 1), HALF_FLOATS, "X and scale")
    stash = node.attributes.get("stash_type", 1)
    require(stash == 1, "SimplifiedLayerNormalization: {} stashes float32 "
            "(stash_type=1), got stash_type={}", provider, stash, code="attribute")
    x = _input(node, 0)
    axis = node.attributes.get("axis", -1)
    if x.shape is not None:
        r = len(x.shape)
        require(-r <= axis < r, "SimplifiedLayerNormalization: axis must be in [{}, {}), got {}",
                -r, r, axis, code="attribute")


@kernel("SimplifiedLayerNormalization", 1, dtypes=None, check=_check_simplified_norm,
        bind=_outputs)
def simplified_layer_norm(xp, x, scale, *, axis=-1, epsilon=1e-5, stash_type=1, n_outputs=1):
    axis %= x.ndim
    normalized = tuple(x.shape[axis:])
    if scale.size != math.prod(normalized):
        raise ValueError(f"scale has {scale.size} elements, the normalized dims {normalized} "
                         f"{math.prod(normalized)}")
    w = _wide(xp, x)
    inv_std = 1.0 / xp.sqrt(xp.mean(w * w, axis=tuple(range(axis, x.ndim)), keepdims=True)
                            + epsilon)
    y = w * inv_std * _wide(xp, scale).reshape(normalized)
    return (y.astype(scale.dtype), inv_std)[:n_outputs]


# -- Matrix products ----------------------------------------------------------------------------

FUSED_MATMUL_ATTRIBUTES = ("alpha", "transA", "transB", "transBatchA", "transBatchB")


def _check_fused_matmul(node, provider):
    _known_attributes(node, provider, *FUSED_MATMUL_ATTRIBUTES)
    attrs = node.attributes
    ranks = [None if v is None or v.shape is None else len(v.shape) for v in node.inputs[:2]]
    for rank, side in zip(ranks, "AB", strict=True):
        if attrs.get(f"trans{side}", 0) and rank is not None:
            require(rank >= 2, "FusedMatMul: trans{} needs {} of rank >= 2, got rank {}", side,
                    side, rank, code="shape")
    if (attrs.get("transBatchA", 0) or attrs.get("transBatchB", 0)) and None not in ranks:
        require(ranks[0] == ranks[1] and ranks[0] >= 3, "FusedMatMul: transBatchA/B need A and "
                "B of one rank >= 3, got ranks {} and {}", *ranks, code="shape")


def _oriented_dims(dims, trans, trans_batch):
    if trans_batch and len(dims) >= 3:
        dims = (*dims[1:-1], dims[0], dims[-1])
    if trans and len(dims) >= 2:
        dims = (*dims[:-2], dims[-1], dims[-2])
    return dims


def _fused_matmul_flops(node):
    a, b = _dims(_input(node, 0)), _dims(_input(node, 1))
    if a is None or b is None:
        return 0
    attrs = node.attributes
    a = _oriented_dims(a, attrs.get("transA", 0), attrs.get("transBatchA", 0))
    b = _oriented_dims(b, attrs.get("transB", 0), attrs.get("transBatchB", 0))
    m, k, n = (a[-2] if len(a) >= 2 else 1), a[-1], (b[-1] if len(b) >= 2 else 1)
    batch = max(math.prod(a[:-2]), math.prod(b[:-2]))
    return 2 * batch * m * k * n


def _orient(xp, x, trans, trans_batch):
    if trans_batch:  # (d0, d1 ... d[r-2], d[r-1]) -> (d1 ... d[r-2], d0, d[r-1])
        x = xp.moveaxis(x, 0, x.ndim - 2)
    if trans:
        x = xp.swapaxes(x, -1, -2)
    return x


@kernel("FusedMatMul", 1, domain=MS, dtypes=HALF_FLOATS, check=_check_fused_matmul,
        flops=_fused_matmul_flops)
def fused_matmul(xp, a, b, *, alpha=1.0, transA=0, transB=0, transBatchA=0, transBatchB=0):
    y = xp.matmul(_orient(xp, _wide(xp, a), transA, transBatchA),
                  _orient(xp, _wide(xp, b), transB, transBatchB))
    return (y * xp.float32(alpha)).astype(a.dtype)


def _check_matmul_nbits(node, provider):
    _known_attributes(node, provider, "K", "N", "bits", "block_size", "accuracy_level",
                      "weight_prepacked")
    attrs = node.attributes
    for name in ("K", "N", "block_size"):
        require(attrs.get(name, 0) > 0, "MatMulNBits: attribute {} (> 0) is required, got {}",
                name, attrs.get(name), code="attribute")
    bits, block = attrs.get("bits", 4), attrs["block_size"]
    require(bits in (2, 4, 8), "MatMulNBits: {} takes bits 2, 4 or 8, got {}", provider, bits,
            code="attribute")
    require(block >= 16 and block & (block - 1) == 0, "MatMulNBits: block_size must be a power "
            "of two >= 16, got {}", block, code="attribute")
    prepacked = attrs.get("weight_prepacked", 0)
    require(prepacked == 0, "MatMulNBits: {} reads the plain (N, k_blocks, blob) layout "
            "(weight_prepacked=0), got weight_prepacked={} (a CUDA layout)", provider, prepacked,
            code="attribute")
    _same_type(node, provider, [i for i in (0, 2, 5) if _input(node, i) is not None])
    _require_types(node, provider, (1,), {"uint8"}, "packed B")
    _require_types(node, provider, (4,), {"int32"}, "g_idx")
    zp = _input(node, 3)
    if zp is not None and zp.dtype is not None and zp.dtype.name != "uint8":
        _same_type(node, provider, [0, 3])
    elif zp is not None:
        require(_input(node, 4) is None, "MatMulNBits: {} takes g_idx only with float "
                "zero_points or none; packed uint8 zero_points with g_idx are not supported",
                provider,
                code="op")


def _matmul_nbits_flops(node):
    a = _dims(_input(node, 0))
    return 2 * (math.prod(a) if a else 1) * node.attributes.get("N", 1)


def _unpack(xp, packed, bits):
    """Unsigned ``bits``-wide values packed low bits first into each byte of ``packed``."""
    shifts = xp.arange(0, 8, bits, dtype=xp.uint8)
    values = (packed[..., None] >> shifts) & xp.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)


def _sized(x, size, what):
    if x.size != size:
        raise ValueError(f"{what} has {x.size} elements, expected {size}")
    return x


@kernel("MatMulNBits", 1, domain=MS, dtypes=None, check=_check_matmul_nbits,
        flops=_matmul_nbits_flops)
def matmul_nbits(xp, a, b, scales, zero_points=None, g_idx=None, bias=None, *, K, N, block_size,
                 bits=4, accuracy_level=0, weight_prepacked=0):
    """accuracy_level only lets onnxruntime compute less exactly; this computes in float32."""
    if a.shape[-1] != K:
        raise ValueError(f"A's last dim {a.shape[-1]} must be K={K}")
    n_blocks = -(-K // block_size)
    blob = block_size * bits // 8
    if b.size == 0:  # an omitted projection: zeros, or the bias
        y = xp.zeros((*a.shape[:-1], N), dtype=xp.float32)
    else:
        if tuple(b.shape) != (N, n_blocks, blob):
            raise ValueError(f"B shape {tuple(b.shape)} must be ({N}, {n_blocks}, {blob})")
        q = _unpack(xp, b.reshape(N, -1), bits)[:, :K].astype(xp.float32)
        s = _wide(xp, _sized(scales, N * n_blocks, "scales")).reshape(N, n_blocks)
        if zero_points is None:
            zp = xp.float32(1 << (bits - 1))
        elif zero_points.dtype == xp.uint8:
            packed = _sized(zero_points, N * -(-n_blocks * bits // 8), "packed zero_points")
            zp = _unpack(xp, packed.reshape(N, -1), bits)[:, :n_blocks].astype(xp.float32)
        else:
            zp = _wide(xp, _sized(zero_points, N * n_blocks, "zero_points")).reshape(N, n_blocks)
        if g_idx is None:
            group = xp.arange(K) // block_size
        else:
            group = _sized(g_idx, K, "g_idx").reshape(K).astype(xp.int64)
            if int(group.min()) < 0 or int(group.max()) >= n_blocks:
                raise ValueError(f"g_idx values must be block indices in [0, {n_blocks})")
        if zero_points is not None:
            zp = zp[:, group]
        w = (q - zp) * s[:, group]
        y = xp.matmul(_wide(xp, a), w.T)
    if bias is not None:
        y = y + _wide(xp, _sized(bias, N, "bias"))
    return y.astype(a.dtype)


# -- Rotary embedding ---------------------------------------------------------------------------


def _rotate(xp, x, cos, sin, interleaved):
    """Rotate the first ``2 * cos.shape[-1]`` features of ``x`` (..., head); the rest pass."""
    half = cos.shape[-1]
    rot = 2 * half
    if interleaved:
        x1, x2 = x[..., 0:rot:2], x[..., 1:rot:2]
    else:
        x1, x2 = x[..., :half], x[..., half:rot]
    r1 = x1 * cos - x2 * sin
    r2 = x2 * cos + x1 * sin
    if interleaved:
        rotated = xp.stack([r1, r2], axis=-1).reshape(*x.shape[:-1], rot)
    else:
        rotated = xp.concatenate([r1, r2], axis=-1)
    return xp.concatenate([rotated, x[..., rot:]], axis=-1) if rot < x.shape[-1] else rotated


def _positions(xp, pos, rows):
    if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= rows):
        raise ValueError(f"positions must lie in [0, {rows}) of the cos/sin caches, got "
                         f"[{int(pos.min())}, {int(pos.max())}]")
    return pos


def _check_rotary(node, provider):
    _known_attributes(node, provider, "interleaved", "num_heads", "rotary_embedding_dim",
                      "is_packed_batching", "scale")
    attrs = node.attributes
    _same_type(node, provider, [0, 2, 3])
    _require_types(node, provider, (1,), {"int64"}, "position_ids")
    _rank_in(node, provider, 0, (3, 4), "input")
    packed = attrs.get("is_packed_batching", 0)
    require(packed == 0, "RotaryEmbedding: {} takes padded batches (is_packed_batching=0), "
            "got is_packed_batching={}", provider, packed, code="attribute")
    scale = attrs.get("scale", 1.0)
    require(scale == 1.0, "RotaryEmbedding: {} takes scale=1.0 (onnxruntime's CPU kernel "
            "ignores it), got {}", provider, scale, code="attribute")
    x = _input(node, 0)
    if attrs.get("rotary_embedding_dim", 0) > 0 and x.shape is not None and len(x.shape) == 3:
        require(attrs.get("num_heads", 0) > 0, "RotaryEmbedding: rotary_embedding_dim on a 3-D "
                "input needs num_heads > 0", code="attribute")


@kernel("RotaryEmbedding", 1, domain=MS, dtypes=None, check=_check_rotary)
def rotary_embedding(xp, x, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0, is_packed_batching=0, scale=1.0):
    if x.ndim == 4:  # (batch, heads, seq, head)
        batch, _, seq, head = x.shape
        v = x
    else:
        batch, seq, hidden = x.shape
        head = hidden // num_heads if num_heads > 0 else 2 * cos_cache.shape[1]
        if hidden % head:
            raise ValueError(f"hidden size {hidden} is not a multiple of head size {head}")
        v = x.reshape(batch, seq, hidden // head, head).transpose(0, 2, 1, 3)
    rot = rotary_embedding_dim or head
    if cos_cache.shape[1] * 2 != rot or rot > head or sin_cache.shape != cos_cache.shape:
        raise ValueError(f"cos/sin caches {tuple(cos_cache.shape)} {tuple(sin_cache.shape)} "
                         f"must be (max positions, {rot // 2}), half the rotary dim {rot} (<= "
                         f"head size {head})")
    if position_ids.size == 1:  # an offset: positions offset .. offset + seq - 1
        pos = xp.broadcast_to(position_ids.reshape(()) + xp.arange(seq), (batch, seq))
    elif tuple(position_ids.shape) == (batch, seq):
        pos = position_ids
    else:
        raise ValueError(f"position_ids shape {tuple(position_ids.shape)} must be (1,) or "
                         f"({batch}, {seq})")
    pos = _positions(xp, pos, cos_cache.shape[0])
    cos = _wide(xp, cos_cache)[pos][:, None]  # (batch, 1, seq, rot / 2)
    sin = _wide(xp, sin_cache)[pos][:, None]
    out = _rotate(xp, _wide(xp, v), cos, sin, interleaved).astype(x.dtype)
    if x.ndim == 3:
        out = out.transpose(0, 2, 1, 3).reshape(x.shape)
    return out


# -- Attention ----------------------------------------------------------------------------------


def _softmax(xp, scores):
    scores = scores - xp.max(scores, axis=-1, keepdims=True)
    e = xp.exp(scores)
    return e / xp.sum(e, axis=-1, keepdims=True)


def _heads(x, num_heads):
    """(batch, seq, heads * head) -> (batch, heads, seq, head)."""
    batch, seq, hidden = x.shape
    if hidden % num_heads:
        raise ValueError(f"hidden size {hidden} is not a multiple of num_heads={num_heads}")
    return x.reshape(batch, seq, num_heads, hidden // num_heads).transpose(0, 2, 1, 3)


def _merge_heads(x):
    batch, heads, seq, head = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, seq, heads * head)


def _static(value, i):
    """Dim ``i`` of ``value`` when it is known and static, else ``None``."""
    if value is None or value.shape is None or len(value.shape) <= i:
        return None
    d = value.shape[i]
    return d if isinstance(d, int) and d >= 0 else None


def _attention_flops(node, keys):
    """Two products of (queries x heads x head size) by ``keys`` keys: Q K' and P V."""
    q = _dims(_input(node, 0))
    return 0 if q is None else 4 * math.prod(q) * max(keys, 1)


def _mha_flops(node):
    key = _input(node, 1)
    if key is None:  # packed QKV
        keys = _static(_input(node, 0), 1)
    else:
        keys = _static(key, 2 if key.rank == 4 else 1)
    return _attention_flops(node, (keys or 1) + (_static(_input(node, 6), 2) or 0))


def _check_mha(node, provider):
    _known_attributes(node, provider, "num_heads", "scale", "mask_filter_value", "unidirectional")
    attrs = node.attributes
    require(attrs.get("num_heads", 0) > 0, "MultiHeadAttention: attribute num_heads (> 0) is "
            "required", code="attribute")
    _same_type(node, provider, [i for i in (0, 1, 2, 3, 5, 6, 7) if _input(node, i) is not None])
    _require_types(node, provider, (4,), {"int32"}, "key_padding_mask")
    for i, name in ((8, "past_sequence_length"), (9, "cache_indirection")):
        require(_input(node, i) is None, "MultiHeadAttention: {} keeps past and present in "
                "separate buffers; input {} (decoder buffer sharing) is not supported", provider,
                name,
                code="op")
    qk = node.outputs[3] if len(node.outputs) > 3 else None
    require(qk is None, "MultiHeadAttention: {} does not produce the qk output", provider,
            code="op")
    query, key, value = _input(node, 0), _input(node, 1), _input(node, 2)
    _rank_in(node, provider, 0, (3, 5), "query")
    _rank_in(node, provider, 1, (3, 4, 5), "key")
    _rank_in(node, provider, 2, (3, 4), "value")
    _rank_in(node, provider, 4, (1, 2, 3), "key_padding_mask")
    _rank_in(node, provider, 5, (4,), "attention_bias")
    require((_input(node, 6) is None) == (_input(node, 7) is None), "MultiHeadAttention: "
            "past_key and past_value come together", code="shape")
    if query.rank == 5:
        require(key is None and value is None, "MultiHeadAttention: a packed QKV query "
                "(B, S, N, 3, H) takes no key or value", code="shape")
        return
    require(key is not None, "MultiHeadAttention: a (B, S, D) query needs a key", code="shape")
    require((key.rank == 5) == (value is None), "MultiHeadAttention: value is required unless "
            "key is packed KV (B, L, N, 2, H)", code="shape")
    if key.rank == 4:
        require(value.rank == 4 and _input(node, 3) is None and _input(node, 6) is None,
                "MultiHeadAttention: key/value given as (B, N, L, H) take no bias and no past",
                code="shape")
    if attrs.get("unidirectional", 0):
        seq = _static(query, 1)
        keys = _static(key, 2 if key.rank == 4 else 1)
        require(seq is None or keys is None or seq == 1 or seq == keys, "MultiHeadAttention: "
                "unidirectional=1 needs as many new keys as queries, got {} and {}", keys, seq,
                code="shape")


def _mha_kv(xp, query, key, value, bias, num_heads):
    """Q, K, V as (batch, heads, seq, head) float32, with the projection bias added."""
    if query.ndim == 5:  # packed (batch, seq, heads, 3, head)
        parts = _wide(xp, query).transpose(3, 0, 2, 1, 4)
        q, k, v = parts[0], parts[1], parts[2]
        if bias is not None:
            b = _wide(xp, bias).reshape(3, num_heads, 1, -1)
            q, k, v = q + b[0], k + b[1], v + b[2]
        return q, k, v, False
    q = _wide(xp, query)
    d = q.shape[-1]
    if bias is not None:
        q = q + _wide(xp, bias)[:d]
    q = _heads(q, num_heads)
    if key.ndim == 5:  # packed (batch, kv_seq, heads, 2, head)
        parts = _wide(xp, key).transpose(3, 0, 2, 1, 4)
        k, v = parts[0], parts[1]
        if bias is not None:
            b = _wide(xp, bias)
            k = k + b[d:2 * d].reshape(num_heads, 1, -1)
            v = v + b[2 * d:].reshape(num_heads, 1, -1)
        return q, k, v, False
    if key.ndim == 4:  # already (batch, heads, kv_seq, head)
        return q, _wide(xp, key), _wide(xp, value), True
    k, v = _wide(xp, key), _wide(xp, value)
    if bias is not None:
        b = _wide(xp, bias)
        k, v = k + b[d:2 * d], v + b[2 * d:]
    return q, _heads(k, num_heads), _heads(v, num_heads), False


def _padding_mask(xp, mask, batch, seq, total):
    """Where key positions are padding, as (batch, 1, seq or 1, total) booleans."""
    if mask.ndim == 1:
        if mask.shape[0] != batch:
            raise ValueError(f"1-D key_padding_mask must have batch size {batch} entries, got "
                             f"{mask.shape[0]} (the (3B+2) form is not supported)")
        pad = xp.arange(total)[None, :] >= mask[:, None]
        return pad[:, None, None, :]
    if mask.ndim == 2:
        if mask.shape != (batch, total):
            raise ValueError(f"2-D key_padding_mask must be ({batch}, {total}), got {mask.shape}")
        return (mask == 0)[:, None, None, :]
    if mask.shape != (batch, seq, total):
        raise ValueError(f"3-D key_padding_mask must be ({batch}, {seq}, {total}), got "
                         f"{mask.shape}")
    return (mask == 0)[:, None]


@kernel("MultiHeadAttention", 1, domain=MS, dtypes=None, check=_check_mha, flops=_mha_flops,
        bind=_outputs)
def multi_head_attention(xp, query, key=None, value=None, bias=None, key_padding_mask=None,
                         attention_bias=None, past_key=None, past_value=None,
                         past_sequence_length=None, cache_indirection=None, *, num_heads,
                         scale=0.0, mask_filter_value=-10000.0, unidirectional=0, n_outputs=1):
    q, k, v, bnsh = _mha_kv(xp, query, key, value, bias, num_heads)
    past = 0
    if past_key is not None and past_value is not None and not bnsh:
        past = past_key.shape[2]
        k = xp.concatenate([_wide(xp, past_key), k], axis=2)
        v = xp.concatenate([_wide(xp, past_value), v], axis=2)
    batch, _, seq, head = q.shape
    total = k.shape[2]
    alpha = scale if scale != 0.0 else 1.0 / math.sqrt(head)
    scores = xp.matmul(q, xp.swapaxes(k, -1, -2)) * xp.float32(alpha)
    if attention_bias is not None:
        scores = scores + _wide(xp, attention_bias)
    if key_padding_mask is not None:  # padding adds mask_filter_value, as onnxruntime does
        masked = _padding_mask(xp, key_padding_mask, batch, seq, total)
        scores = scores + xp.where(masked, xp.float32(mask_filter_value), xp.float32(0))
    if unidirectional and seq > 1:  # query s sits at position past + s and sees no later key
        if total - past != seq:
            raise ValueError(f"unidirectional attention needs as many keys as queries, got "
                             f"{total - past} keys for {seq} queries")
        later = xp.arange(total)[None, :] > past + xp.arange(seq)[:, None]
        scores = xp.where(later, -xp.inf, scores)
    out = _merge_heads(xp.matmul(_softmax(xp, scores), v)).astype(query.dtype)
    return (out, k.astype(query.dtype), v.astype(query.dtype))[:n_outputs]


GQA_ATTRIBUTES = (
    "num_heads", "kv_num_heads", "scale", "softcap", "local_window_size", "do_rotary",
    "rotary_interleaved", "causal", "smooth_softmax", "qk_output", "sliding_window_cache",
    "k_quant_type", "v_quant_type", "kv_cache_bit_width", "qk_norm_epsilon", "q_norm_epsilon",
    "k_norm_epsilon",
)
GQA_UNSUPPORTED_INPUTS = {9: "position_ids", 12: "k_scale", 13: "v_scale",
                          14: "q_norm_weight", 15: "k_norm_weight", 16: "query_seqlens"}


def _check_gqa(node, provider):
    _known_attributes(node, provider, *GQA_ATTRIBUTES)
    attrs = node.attributes
    heads, kv_heads = attrs.get("num_heads", 0), attrs.get("kv_num_heads", 0)
    require(heads > 0 and kv_heads > 0 and heads % kv_heads == 0, "GroupQueryAttention: "
            "num_heads and kv_num_heads must be > 0 with num_heads a multiple of kv_num_heads, "
            "got {} and {}", heads, kv_heads, code="attribute")
    present = [i for i in (0, 1, 2, 3, 4, 7, 8, 10, 11) if _input(node, i) is not None]
    _same_type(node, provider, present)
    _require_types(node, provider, (5, 6), {"int32"}, "seqlens_k/total_sequence_length")
    for i, name in GQA_UNSUPPORTED_INPUTS.items():
        require(_input(node, i) is None, "GroupQueryAttention: {} does not take input {}", provider,
                name, code="op")
    require(len(node.outputs) <= 3 or node.outputs[3] is None, "GroupQueryAttention: {} "
            "does not produce output_qk", provider, code="op")
    _rank_in(node, provider, 0, (3,), "query")
    _rank_in(node, provider, 1, (3,), "key")
    _rank_in(node, provider, 2, (3,), "value")
    _rank_in(node, provider, 3, (4,), "past_key")
    _rank_in(node, provider, 4, (4,), "past_value")
    _rank_in(node, provider, 10, (4,), "attention_bias")
    require((_input(node, 1) is None) == (_input(node, 2) is None), "GroupQueryAttention: key "
            "and value come together (or neither, with packed QKV)", code="shape")
    require((_input(node, 3) is None) == (_input(node, 4) is None), "GroupQueryAttention: "
            "past_key and past_value come together", code="shape")
    for name, default, allowed in (("causal", 1, (0, 1)), ("smooth_softmax", -1, (-1, 0, 1)),
                                   ("qk_output", 0, (0,)), ("sliding_window_cache", 0, (0,)),
                                   ("do_rotary", 0, (0, 1)), ("rotary_interleaved", 0, (0, 1))):
        got = attrs.get(name, default)
        require(got in allowed, "GroupQueryAttention: {} takes {} in {}, got {}", provider, name,
                allowed, got, code="attribute")
    for name in ("k_quant_type", "v_quant_type"):
        got = attrs.get(name, "NONE")
        require(got == "NONE", "GroupQueryAttention: {} keeps a float KV cache ({}=NONE), "
                "got {}", provider, name, got, code="attribute")
    if not attrs.get("causal", 1):
        require(attrs.get("local_window_size", -1) == -1, "GroupQueryAttention: causal=0 takes "
                "no local_window_size, got {}", attrs.get("local_window_size"), code="attribute")
    if attrs.get("do_rotary", 0):
        require(_input(node, 7) is not None and _input(node, 8) is not None,
                "GroupQueryAttention: do_rotary=1 needs cos_cache and sin_cache", code="shape")
    softcap = attrs.get("softcap", 0.0)
    require(softcap >= 0.0, "GroupQueryAttention: softcap must be >= 0, got {}", softcap,
            code="attribute")


def _gqa_flops(node):
    new = _static(_input(node, 0), 1) or 1
    return _attention_flops(node, new + (_static(_input(node, 3), 2) or 0))


@kernel("GroupQueryAttention", 1, domain=MS, dtypes=None, check=_check_gqa, host_inputs=(5, 6),
        flops=_gqa_flops, bind=_outputs)
def group_query_attention(xp, query, key=None, value=None, past_key=None, past_value=None,
                          seqlens_k=None, total_sequence_length=None, cos_cache=None,
                          sin_cache=None, position_ids=None, attention_bias=None, head_sink=None,
                          *, num_heads, kv_num_heads, scale=0.0, softcap=0.0,
                          local_window_size=-1, do_rotary=0, rotary_interleaved=0, causal=1,
                          smooth_softmax=-1, n_outputs=1):
    batch, seq, width = query.shape
    if key is None:  # packed (batch, seq, (heads + 2 * kv_heads) * head)
        if width % (num_heads + 2 * kv_num_heads):
            raise ValueError(f"packed QKV width {width} is not a multiple of num_heads + 2 * "
                             f"kv_num_heads = {num_heads + 2 * kv_num_heads}")
        head = width // (num_heads + 2 * kv_num_heads)
        qkv = _wide(xp, query)
        q = qkv[..., :num_heads * head]
        k = qkv[..., num_heads * head:(num_heads + kv_num_heads) * head]
        v = qkv[..., (num_heads + kv_num_heads) * head:]
    else:
        q, k, v = _wide(xp, query), _wide(xp, key), _wide(xp, value)
    q, k, v = _heads(q, num_heads), _heads(k, kv_num_heads), _heads(v, kv_num_heads)
    head = q.shape[-1]
    lengths = [int(n) + 1 for n in seqlens_k.reshape(-1).tolist()]  # T per batch entry
    total_max = int(total_sequence_length.reshape(-1)[0])
    past_len = 0 if past_key is None else past_key.shape[2]
    capacity = max(total_max, past_len)
    news = [min(seq, t) for t in lengths]  # the valid new rows per entry
    pasts = [t - n for t, n in zip(lengths, news, strict=True)]
    if any(p > past_len for p in pasts) or max(lengths) > capacity:
        raise ValueError(f"seqlens_k {seqlens_k.tolist()} do not fit past length {past_len} "
                         f"and total_sequence_length {total_max}")
    if do_rotary:
        pos = _positions(xp, xp.asarray(pasts)[:, None] + xp.arange(seq)[None, :],
                         cos_cache.shape[0])
        cos = _wide(xp, cos_cache)[pos][:, None]
        sin = _wide(xp, sin_cache)[pos][:, None]
        q = _rotate(xp, q, cos, sin, rotary_interleaved)
        k = _rotate(xp, k, cos, sin, rotary_interleaved)
        if query.dtype == xp.float16:  # onnxruntime stores the rotated Q and K as float16
            q = q.astype(xp.float16).astype(xp.float32)
            k = k.astype(xp.float16).astype(xp.float32)
    present_k = xp.zeros((batch, kv_num_heads, capacity, head), dtype=xp.float32)
    present_v = xp.zeros_like(present_k)
    for b, p in enumerate(pasts):
        if p:
            present_k[b, :, :p] = _wide(xp, past_key[b, :, :p])
            present_v[b, :, :p] = _wide(xp, past_value[b, :, :p])
        end = min(p + seq, capacity)  # padding rows too, as onnxruntime writes them
        present_k[b, :, p:end] = k[b, :, :end - p]
        present_v[b, :, p:end] = v[b, :, :end - p]
    group = num_heads // kv_num_heads
    keys = xp.repeat(present_k, group, axis=1)
    values = xp.repeat(present_v, group, axis=1)
    alpha = scale if scale != 0.0 else 1.0 / math.sqrt(head)
    scores = xp.matmul(q, xp.swapaxes(keys, -1, -2)) * xp.float32(alpha)
    if softcap > 0.0:
        scores = softcap * xp.tanh(scores / softcap)
    if attention_bias is not None:  # (batch or 1, heads or 1, seq, total_sequence_length)
        bias = _wide(xp, attention_bias)
        scores[..., :bias.shape[-1]] += bias
    key_pos = xp.arange(capacity)[None, None, None, :]
    if causal:
        position = xp.asarray(pasts)[:, None, None, None] + xp.arange(seq)[None, None, :, None]
        allowed = key_pos <= position
        if local_window_size > 0:  # the last local_window_size keys up to the query's own
            allowed = allowed & (key_pos > position - local_window_size)
    else:
        allowed = key_pos < xp.asarray(lengths)[:, None, None, None]
    scores = xp.where(allowed, scores, -xp.inf)
    if head_sink is not None or smooth_softmax == 1:  # one more logit in each denominator
        sink = (xp.zeros((num_heads,), dtype=xp.float32) if head_sink is None
                else _wide(xp, head_sink))
        sink = xp.broadcast_to(sink[None, :, None, None], (*scores.shape[:3], 1))
        probs = _softmax(xp, xp.concatenate([scores, sink], axis=-1))[..., :-1]
    else:
        probs = _softmax(xp, scores)
    out = _merge_heads(xp.matmul(probs, values)).astype(query.dtype)
    dtype = query.dtype
    return (out, present_k.astype(dtype), present_v.astype(dtype))[:n_outputs]


# -- FusedConv: Conv with its activation applied in place -------------------------------------

FUSED_ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Clip", "HardSigmoid", "HardSwish")
HARD_SIGMOID_DEFAULTS = (0.2, 0.5)  # alpha, beta: HardSigmoid's, and onnxruntime's FusedConv's
HARD_SWISH = (1 / 6, 0.5)


def _check_fused_conv(node, provider):
    check_conv(node, provider)
    attrs = node.attributes
    activation = attrs.get("activation")
    require(activation in FUSED_ACTIVATIONS, "FusedConv: {} applies activation {}, got {!r}",
            provider,
            "/".join(FUSED_ACTIVATIONS), activation, code="attribute")
    params = list(attrs.get("activation_params") or ())
    wanted = {"LeakyRelu": (0, 1), "Clip": (2,), "HardSigmoid": (0, 2)}.get(activation, (0,))
    require(len(params) in wanted, "FusedConv: activation {} takes {} activation_params, got {}",
            activation, " or ".join(map(str, wanted)), len(params), code="attribute")
    z, y = (node.inputs[3] if len(node.inputs) > 3 else None), node.outputs[0]
    require(z is None or z.shape is None or y is None or y.shape is None
            or tuple(z.shape) == tuple(y.shape), "FusedConv: the residual (Z) {} has shape {}, "
            "the output {}: {} adds it without broadcasting", None if z is None else z.name,
            None if z is None else z.shape, None if y is None else y.shape, provider,
            code="shape")


def _prepare_fused_conv(xp, constants, *, group=1, **_):  # group: the schema-less default
    return prepare_conv(xp, constants, group=group)


@kernel("FusedConv", 1, domain=MS, dtypes=HALF_FLOATS | {"float64"}, check=_check_fused_conv,
        flops=conv_flops, prepare=_prepare_fused_conv, family="conv", workspace=conv_workspace)
def fused_conv(xp, x, w, b=None, z=None, *, activation, activation_params=None,
               auto_pad="NOTSET", group=1, dilations=None, kernel_shape=None, pads=None,
               strides=None, packed=None, packed_bias=None, workspace=None):
    """``z``: a residual of the output's shape, added after the bias and before the
    activation (onnxruntime's ``Y = activation(conv(X, W) + B + Z)``)."""
    params = list(activation_params or ())
    if z is not None and z.dtype != x.dtype:
        raise ValueError(f"the residual (Z) is {z.dtype}, the input {x.dtype}")
    y, activated = convolve(xp, x, w, b, auto_pad=auto_pad, group=group, dilations=dilations,
                            pads=pads, strides=strides, packed=packed, packed_bias=packed_bias,
                            activation=_in_pass(activation, params, x.dtype),
                            workspace=workspace, residual=z)
    if activated:
        return y
    if activation == "HardSigmoid":
        alpha, beta = params or HARD_SIGMOID_DEFAULTS
        return hard_sigmoid(xp, y, alpha=alpha, beta=beta, out=y)
    if activation == "HardSwish":
        return hard_swish(xp, y, out=y)
    if activation == "Relu":
        xp.maximum(y, 0, out=y)
    elif activation == "LeakyRelu":
        alpha = params[0] if params else 0.01
        xp.multiply(y, xp.where(y < 0, y.dtype.type(alpha), y.dtype.type(1)), out=y)
    elif activation == "Sigmoid":
        xp.negative(y, out=y)
        xp.exp(y, out=y)
        y += 1
        xp.reciprocal(y, out=y)
    elif activation == "Tanh":
        xp.tanh(y, out=y)
    else:  # Clip
        xp.clip(y, y.dtype.type(params[0]), y.dtype.type(params[1]), out=y)
    return y


def _in_pass(activation, params, dtype):
    """The activation as the convolution's own pass may apply it (``(kind, p, q)``, see
    :func:`ep_host.kernels.conv.convolve`), or ``None`` to apply it after. HardSigmoid and
    HardSwish only on float32, where the pass computes what their own kernels do (the CPU EP's
    ``xp.compiled_hard_sigmoid``)."""
    if activation == "Relu":
        return "clip", 0.0, math.inf
    if activation == "Clip":
        return ("clip", *params)
    if dtype.char != "f":  # float32 (a dtype's name is worked out in Python each time)
        return None
    if activation == "HardSigmoid":
        return ("hard_sigmoid", *(params or HARD_SIGMOID_DEFAULTS))
    if activation == "HardSwish":
        return ("hard_swish", *HARD_SWISH)
    return None
