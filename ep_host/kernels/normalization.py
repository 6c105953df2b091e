"""Normalizations: BatchNormalization (estimated or batch statistics), LayerNormalization,
RMSNormalization, GroupNormalization, InstanceNormalization, LpNormalization,
MeanVarianceNormalization, Softmax, LogSoftmax, Dropout (the identity outside training, a random
mask in training) and LRN (local response normalization across channels).

Normalizations of half-precision input compute in float32 (or the stash type) and round back
once; Softmax and LogSoftmax compute each step in the input's type, as their function bodies do."""

from __future__ import annotations

from ep_host import element_count, require
from ep_host.kernels.conv_geometry import input_rank, pad_spatial
from ep_host.kernels.registry import FLOATS, FLOATS_BF16, kernel

STASH_TYPES = {1: "float32", 11: "float64"}  # TensorProto codes a stash may name here


def _extra_outputs(node):
    return [v.name for v in node.outputs[1:] if v is not None]


def _rank(node):
    x = node.inputs[0]
    return None if x is None or x.shape is None else len(x.shape)


def _work(xp, x):
    """The type to compute ``x`` in: float64 stays, everything narrower widens to float32."""
    return xp.float64 if x.dtype == xp.float64 else xp.float32


def _stash(xp, stash_type):
    return xp.float64 if stash_type == 11 else xp.float32


def _check_stash(node, provider):
    stash = node.attributes["stash_type"]
    require(stash in STASH_TYPES, "{}: {} computes stash_type 1 (float32) or 11 (float64), "
            "got {}", node.op_type, provider, stash, code="attribute")


def _check_same_types(node, provider, names):
    """Inputs that the spec combines arithmetically must share X's element type."""
    x = node.inputs[0]
    for i in names:
        value = node.inputs[i] if len(node.inputs) > i else None
        if x is None or value is None or x.dtype is None or value.dtype is None:
            continue
        require(value.dtype == x.dtype, "{}: {} takes {!r} of X's type {}, got {}",
                node.op_type, provider, value.name, x.dtype.name, value.dtype.name, code="dtype")


def _channel_shape(x):
    return (1, -1) + (1,) * (x.ndim - 2)


# -- BatchNormalization -----------------------------------------------------------------------


def _check_batch_norm(node, provider):
    attrs = node.attributes
    v = node.since_version
    if v < 7:
        require(attrs["is_test"] != 0,
                "BatchNormalization-{}: {} computes test mode only (is_test=1, estimated "
                "statistics), got is_test=0 (batch statistics)", v, provider, code="attribute")
    if v < 9:
        spatial = attrs["spatial"]
        allowed = (1,) if v < 7 else (0, 1)
        require(spatial in allowed, "BatchNormalization-{}: {} takes spatial={}, got {}", v,
                provider,
                " or ".join(map(str, allowed)), spatial, code="attribute")
    extra = _extra_outputs(node)
    training = v >= 14 and attrs["training_mode"] != 0
    require(training or not extra, "BatchNormalization-{}: {} computes inference mode, whose "
            "only output is Y, and training mode (training_mode=1, from version 14); got "
            "training outputs {}", v, provider, extra, code="attribute")
    require(_rank(node) is None or _rank(node) >= 2, "BatchNormalization: input must have rank "
            ">= 2 (N, C, ...), got rank {}", _rank(node), code="shape")
    accepted = FLOATS_BF16 if v >= 14 else FLOATS
    for value in node.inputs[1:]:
        if value is not None and value.dtype is not None:
            require(value.dtype.name in accepted, "BatchNormalization: {} takes {} scale, "
                    "bias and statistics, got {} for input {!r}", provider,
                    "/".join(sorted(accepted)),
                    value.dtype.name, value.name, code="dtype")


def _bn_affine(xp, x_dtype, scale, b, mean, var, epsilon):
    """Inference BatchNormalization as ``x * factor + shift``, in the compute type."""
    work = xp.result_type(x_dtype, scale, b, mean, var, xp.float32)
    factor = scale.astype(work) / xp.sqrt(var.astype(work) + epsilon)
    shift = b.astype(work) - mean.astype(work) * factor
    return factor, shift


def _prepare_batch_norm(xp, constants, *, epsilon, **_):
    if not all(i in constants for i in (1, 2, 3, 4)):
        return {}
    scale, b, mean, var = (constants[i] for i in (1, 2, 3, 4))
    # x's type is unknown here; float32 statistics serve float32 and half inputs alike
    if scale.dtype != xp.float32 or any(v.dtype != scale.dtype for v in (b, mean, var)):
        return {}
    return {"affine": _bn_affine(xp, xp.float32, scale, b, mean, var, epsilon)}


def _batch_norm(xp, x, scale, b, mean, var, epsilon, affine=None, out=None):
    dtype = x.dtype
    if affine is None or x.dtype == xp.float64:
        affine = _bn_affine(xp, dtype, scale, b, mean, var, epsilon)
    factor, shift = affine
    if factor.ndim == 1:  # per channel
        shape = (-1,) + (1,) * max(x.ndim - 2, 0)
        factor, shift = factor.reshape(shape), shift.reshape(shape)
    if dtype != factor.dtype:  # half types widen into the one temporary
        y = x.astype(factor.dtype)
        y *= factor
    elif out is not None and out.shape == x.shape and out.dtype == dtype:
        y = xp.multiply(x, factor, out=out)
    else:
        y = xp.multiply(x, factor)
    y += shift
    return y.astype(dtype, copy=False)


@kernel("BatchNormalization", 1, 6, dtypes=FLOATS, check=_check_batch_norm,
        prepare=_prepare_batch_norm, inplace=(0,), family="normalization")
def batch_norm_6(xp, x, scale, b, mean, var, *, epsilon, is_test, spatial, affine=None,
                 out=None):
    return _batch_norm(xp, x, scale, b, mean, var, epsilon, affine, out)


@kernel("BatchNormalization", 7, dtypes=FLOATS, check=_check_batch_norm,
        prepare=_prepare_batch_norm, inplace=(0,), family="normalization")
def batch_norm_7(xp, x, scale, b, mean, var, *, epsilon, spatial, affine=None, out=None):
    return _batch_norm(xp, x, scale, b, mean, var, epsilon, affine, out)


@kernel("BatchNormalization", 9, dtypes=FLOATS, check=_check_batch_norm,
        prepare=_prepare_batch_norm, inplace=(0,), family="normalization")
def batch_norm_9(xp, x, scale, b, mean, var, *, epsilon, affine=None, out=None):
    return _batch_norm(xp, x, scale, b, mean, var, epsilon, affine, out)


def _outputs_wanted(node):
    return {"wanted": tuple(v is not None for v in node.outputs)}


@kernel("BatchNormalization", 14, 15, dtypes=FLOATS_BF16, check=_check_batch_norm,
        bind=_outputs_wanted, prepare=_prepare_batch_norm, inplace=(0,), family="normalization")
def batch_norm(xp, x, scale, b, mean, var, *, epsilon, momentum, training_mode, wanted=(True,),
               affine=None, out=None):
    if not training_mode:
        return _batch_norm(xp, x, scale, b, mean, var, epsilon, affine, out)
    work = _work(xp, x)  # the statistics in float (the spec's words for float16 input)
    xw = x.astype(work)
    axes = (0,) + tuple(range(2, x.ndim))
    current_mean = xw.mean(axis=axes)
    d = xw - current_mean.reshape(_channel_shape(x))
    current_var = (d * d).mean(axis=axes)
    shape = _channel_shape(x)
    inv = 1 / xp.sqrt(current_var + epsilon)
    y = d * inv.reshape(shape) * scale.astype(work).reshape(shape) + b.astype(work).reshape(shape)
    outs = [y.astype(x.dtype),
            (mean.astype(work) * momentum + current_mean * (1 - momentum)).astype(mean.dtype),
            (var.astype(work) * momentum + current_var * (1 - momentum)).astype(var.dtype)]
    return tuple(o if w else None for o, w in zip(outs, wanted, strict=False))


# -- LayerNormalization -----------------------------------------------------------------------


def _check_axis(node, axis):
    rank = _rank(node)
    if rank is not None:
        require(-rank <= axis < rank, "{}: axis must be in [{}, {}] for a rank-{} input, got {}",
                node.op_type, -rank, rank - 1, rank, axis, code="attribute")


def _check_layer_norm(node, provider):
    stash = node.attributes["stash_type"]
    require(stash == 1, "LayerNormalization: {} computes stash_type=1 (float32), got {}", provider,
            stash, code="attribute")
    _check_axis(node, node.attributes["axis"])


@kernel("LayerNormalization", 17, dtypes=FLOATS_BF16, check=_check_layer_norm,
        family="normalization")
def layer_norm(xp, x, scale, b=None, *, axis, epsilon, stash_type):
    axes = tuple(range(axis % x.ndim, x.ndim))
    done = _compiled_layer_norm(xp, x, scale, b, axes, epsilon)
    if done is not None:
        return done
    stashed = x.astype(xp.float32, copy=False)  # read only
    mean = stashed.mean(axis=axes, keepdims=True)
    d = stashed - mean
    square = xp.multiply(d, d)
    inv_std = 1 / xp.sqrt(square.mean(axis=axes, keepdims=True) + xp.float32(epsilon))
    d *= inv_std
    if x.dtype == xp.float32:
        y = d
    else:  # the spec rounds the normalized values to X's type, then scales
        y = d.astype(x.dtype)
    y *= scale
    if b is not None:
        y += b
    return y, mean, inv_std


def _compiled_layer_norm(xp, x, scale, b, axes, epsilon):
    """A provider's ``xp.compiled_layer_norm`` (the CPU EP's, numba) for float32 with a scale
    and bias of the normalized shape (or less, ones in front); ``None`` where it does not
    apply."""
    compiled = getattr(xp, "compiled_layer_norm", None)
    if compiled is None or x.dtype != xp.float32 or x.size < compiled.MIN_SIZE:
        return None
    normalized = x.shape[axes[0]:]
    cols = element_count(normalized)

    def fits(v):
        return v is None or (v.dtype == xp.float32 and v.size == cols
                             and tuple(v.shape) == normalized[len(normalized) - v.ndim:])

    if cols == 0 or not fits(scale) or not fits(b) or not compiled.ready():
        return None
    y, mean, inv_std = compiled(x, cols, scale, b, epsilon)
    kept = x.shape[:axes[0]] + (1,) * len(axes)
    return y, mean.reshape(kept), inv_std.reshape(kept)


# -- RMSNormalization -------------------------------------------------------------------------


def _check_rms_norm(node, provider):
    _check_stash(node, provider)
    _check_axis(node, node.attributes["axis"])
    _check_same_types(node, provider, (1,))


@kernel("RMSNormalization", 23, dtypes=FLOATS_BF16, check=_check_rms_norm, family="normalization")
def rms_norm(xp, x, scale, *, axis, epsilon, stash_type):
    axes = tuple(range(axis % x.ndim, x.ndim))
    stashed = x.astype(_stash(xp, stash_type))
    rms = xp.sqrt((stashed * stashed).mean(axis=axes, keepdims=True) + epsilon)
    return (stashed / rms).astype(x.dtype) * scale


# -- GroupNormalization, InstanceNormalization ------------------------------------------------


def _standardize(xp, x, axes, epsilon, work):
    """(x - mean) / sqrt(var + epsilon) over ``axes``, computed in ``work``."""
    xw = x.astype(work)
    d = xw - xw.mean(axis=axes, keepdims=True)
    return d / xp.sqrt((d * d).mean(axis=axes, keepdims=True) + epsilon)


def _check_group_norm(node, provider):
    v = node.since_version
    if v >= 21:
        _check_stash(node, provider)
    groups = node.attributes.get("num_groups")
    require(groups is not None and groups >= 1, "GroupNormalization: num_groups must be >= 1, "
            "got {}", groups, code="attribute")
    rank = _rank(node)
    require(rank is None or rank >= 2, "GroupNormalization: input must have rank >= 2 (N, C, "
            "...), got rank {}", rank, code="shape")
    x = node.inputs[0]
    c = x.shape[1] if x is not None and x.shape is not None and rank >= 2 else None
    if isinstance(c, int):
        require(c % groups == 0, "GroupNormalization: num_groups ({}) must divide the {} "
                "channels", groups, c, code="attribute")
    want = "num_groups" if v < 21 else "C"
    size = groups if v < 21 else c
    for value in node.inputs[1:3]:
        n = value.shape[0] if value is not None and value.shape is not None and \
            len(value.shape) == 1 else None
        require(n is None or size is None or not isinstance(size, int) or n == size,
                "GroupNormalization-{}: {!r} must hold one value per group of channels ({}={})"
                if v < 21 else "GroupNormalization-{}: {!r} must hold one value per channel "
                "({}={})", v, value.name, want, size, code="shape")
    _check_same_types(node, provider, (1, 2))


def _group_statistics(xp, x, num_groups, epsilon, work):
    n = x.shape[0]
    grouped = x.reshape(n, num_groups, -1)
    return _standardize(xp, grouped, -1, epsilon, work)


@kernel("GroupNormalization", 18, dtypes=FLOATS_BF16, check=_check_group_norm,
        family="normalization")
def group_norm_18(xp, x, scale, bias, *, epsilon, num_groups):
    work = _work(xp, x)
    normed = _group_statistics(xp, x, num_groups, epsilon, work)
    shape = (1, num_groups, 1)
    y = normed * scale.astype(work).reshape(shape) + bias.astype(work).reshape(shape)
    return y.reshape(x.shape).astype(x.dtype)


@kernel("GroupNormalization", 21, dtypes=FLOATS_BF16, check=_check_group_norm,
        family="normalization")
def group_norm(xp, x, scale, bias, *, epsilon, num_groups, stash_type):
    normed = _group_statistics(xp, x, num_groups, epsilon, _stash(xp, stash_type))
    normed = normed.reshape(x.shape).astype(x.dtype)  # stage two computes in X's type
    return normed * scale.reshape(_channel_shape(x)) + bias.reshape(_channel_shape(x))


def _check_instance_norm(node, provider):
    rank = _rank(node)
    if node.since_version < 6:
        require(rank is None or rank == 4, "InstanceNormalization-1: input must be 4-D (N, C, "
                "H, W), got rank {}", rank, code="shape")
    require(rank is None or rank >= 3, "InstanceNormalization: input must have rank >= 3 (N, C, "
            "D1, ...), got rank {}", rank, code="shape")
    _check_same_types(node, provider, (1, 2))


@kernel("InstanceNormalization", 1, 6, dtypes=FLOATS, check=_check_instance_norm,
        family="normalization")
@kernel("InstanceNormalization", 22, dtypes=FLOATS_BF16, check=_check_instance_norm,
        family="normalization")
def instance_norm(xp, x, scale, b, *, epsilon, consumed_inputs=None):
    work = _work(xp, x)
    normed = _standardize(xp, x, tuple(range(2, x.ndim)), epsilon, work)
    shape = _channel_shape(x)
    y = normed * scale.astype(work).reshape(shape) + b.astype(work).reshape(shape)
    return y.astype(x.dtype)


# -- LpNormalization, MeanVarianceNormalization -----------------------------------------------


def _check_lp_norm(node, provider):
    p = node.attributes["p"]
    require(p in (1, 2), "LpNormalization: p must be 1 or 2, got {}", p, code="attribute")
    _check_axis(node, node.attributes["axis"])


@kernel("LpNormalization", 1, dtypes=FLOATS, check=_check_lp_norm, family="normalization")
@kernel("LpNormalization", 22, dtypes=FLOATS_BF16, check=_check_lp_norm, family="normalization")
def lp_norm(xp, x, *, axis, p):
    xw = x.astype(_work(xp, x))
    if p == 1:
        norm = xp.abs(xw).sum(axis=axis, keepdims=True)
    else:
        norm = xp.sqrt((xw * xw).sum(axis=axis, keepdims=True))
    zero = norm == 0
    return xp.where(zero, 0, xw / xp.where(zero, 1, norm)).astype(x.dtype)


def _check_mvn(node, provider):
    rank = _rank(node)
    axes = node.attributes["axes"]
    require(rank is None or all(-rank <= a < rank for a in axes),
            "MeanVarianceNormalization: axes {} out of range for a rank-{} input", list(axes),
            rank, code="attribute")


@kernel("MeanVarianceNormalization", 9, dtypes=FLOATS, check=_check_mvn, family="normalization")
@kernel("MeanVarianceNormalization", 13, dtypes=FLOATS_BF16, check=_check_mvn,
        family="normalization")
def mean_variance_norm(xp, x, *, axes):
    """The schema's function body: (X - E[X]) / (sqrt(E[X^2] - E[X]^2) + 1e-9)."""
    axes = tuple(a % x.ndim for a in axes)
    xw = x.astype(_work(xp, x))
    mean = xw.mean(axis=axes, keepdims=True)
    variance = (xw * xw).mean(axis=axes, keepdims=True) - mean * mean
    return ((xw - mean) / (xp.sqrt(variance) + 1e-9)).astype(x.dtype)


# -- Softmax, LogSoftmax ----------------------------------------------------------------------


def _check_softmax(node, provider):
    _check_axis(node, node.attributes["axis"])


def _softmax(xp, x, axis, log):
    """Each step in X's own type, as the schema's function body (ReduceMax, Sub, Exp, ReduceSum,
    Div or Log and Sub) computes it; half types are not widened. A provider's
    ``xp.compiled_softmax`` (the CPU EP's, numba) takes float32 over the last axis: from
    ``MIN_SIZE`` values on (``ready``: built first where it is not), below that where it is
    ``at_hand`` (no build)."""
    compiled = getattr(xp, "compiled_softmax", None)
    if (not log and compiled is not None and x.dtype == xp.float32 and x.ndim
            and axis % x.ndim == x.ndim - 1 and x.shape[-1]
            and (compiled.ready() if x.size >= compiled.MIN_SIZE else compiled.at_hand())):
        return compiled(x)
    shifted = x - x.max(axis=axis, keepdims=True)
    if log:
        shifted -= xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        return shifted
    e = xp.exp(shifted, out=shifted)
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _softmax_2d(xp, x, axis, log):
    """Versions before 13: coerce to 2-D at ``axis``, normalize each row, restore the shape."""
    axis %= max(x.ndim, 1)
    rows, cols = element_count(x.shape[:axis]), element_count(x.shape[axis:])
    return _softmax(xp, x.reshape(rows, cols), 1, log).reshape(x.shape)


@kernel("Softmax", 1, 11, dtypes=FLOATS, check=_check_softmax, family="normalization")
def softmax_2d(xp, x, *, axis):
    return _softmax_2d(xp, x, axis, log=False)


@kernel("Softmax", 13, dtypes=FLOATS_BF16, check=_check_softmax, family="normalization")
def softmax(xp, x, *, axis):
    return _softmax(xp, x, axis, log=False)


@kernel("LogSoftmax", 1, 11, dtypes=FLOATS, check=_check_softmax, family="normalization")
def log_softmax_2d(xp, x, *, axis):
    return _softmax_2d(xp, x, axis, log=True)


@kernel("LogSoftmax", 13, dtypes=FLOATS_BF16, check=_check_softmax, family="normalization")
def log_softmax(xp, x, *, axis):
    return _softmax(xp, x, axis, log=True)


# -- Dropout ----------------------------------------------------------------------------------


def _wants_mask(node):
    return {"with_mask": len(node.outputs) > 1 and node.outputs[1] is not None}


def _check_dropout_test_mode(node, provider):
    is_test = node.attributes["is_test"]
    require(is_test != 0, "Dropout-{}: {} computes test mode only (is_test=1, Y = X), got "
            "is_test=0 (random dropout)", node.since_version, provider, code="attribute")


def _identity(xp, data, with_mask, mask_dtype):
    y = xp.array(data, copy=True)
    return (y, xp.ones(data.shape, dtype=mask_dtype)) if with_mask else y


@kernel("Dropout", 1, 6, dtypes=FLOATS, check=_check_dropout_test_mode, bind=_wants_mask,
        family="elementwise")
def dropout_6(xp, data, *, is_test, ratio, with_mask=False):
    return _identity(xp, data, with_mask, data.dtype)


@kernel("Dropout", 7, dtypes=FLOATS, bind=_wants_mask, family="elementwise")
def dropout_7(xp, data, *, ratio, with_mask=False):
    """The spec leaves the inference mask open; it is all ones (nothing dropped), as from 12."""
    return _identity(xp, data, with_mask, data.dtype)


@kernel("Dropout", 10, dtypes=FLOATS, bind=_wants_mask, family="elementwise")
def dropout_10(xp, data, *, ratio, with_mask=False):
    """The spec leaves the inference mask open; it is all true (nothing dropped), as from 12."""
    return _identity(xp, data, with_mask, bool)


def _check_dropout_ratio(node, provider):
    ratio = node.inputs[1] if len(node.inputs) > 1 else None
    if ratio is not None and ratio.is_constant:
        r = float(ratio.value.reshape(-1)[0]) if ratio.value.size else None
        require(r is not None and 0 <= r < 1, "Dropout: ratio must be in [0, 1), got {}", r,
                code="attribute")


@kernel("Dropout", 12, dtypes=FLOATS, host_inputs=(1, 2), check=_check_dropout_ratio,
        bind=_wants_mask, family="elementwise")
@kernel("Dropout", 13, 22, dtypes=FLOATS_BF16, host_inputs=(1, 2), check=_check_dropout_ratio,
        bind=_wants_mask, family="elementwise")
def dropout(xp, data, ratio=None, training_mode=None, *, seed=None, with_mask=False):
    """Training mode keeps each element where a uniform [0, 1) draw is >= ratio and scales it by
    1 / (1 - ratio). The spec leaves the generator open: with a seed the draws come from
    ``xp.random.RandomState(seed).uniform`` (the same mask on every run), else unseeded."""
    if training_mode is None or not bool(training_mode.reshape(-1)[0]):
        return _identity(xp, data, with_mask, bool)
    r = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
    if not 0 <= r < 1:
        raise ValueError(f"Dropout: ratio must be in [0, 1) in training mode, got {r}")
    rng = xp.random.RandomState(seed) if seed is not None else xp.random.RandomState()
    mask = rng.uniform(0, 1.0, data.shape) >= r
    y = (mask * data.astype(xp.float32 if data.dtype.itemsize < 4 else data.dtype) / (1 - r))
    y = y.astype(data.dtype)
    return (y, mask) if with_mask else y


# -- LRN --------------------------------------------------------------------------------------


def _check_lrn(node, provider):
    size = node.attributes["size"]
    require(size >= 1, "LRN: size must be >= 1, got {}", size, code="attribute")
    rank = input_rank(node)
    require(rank is None or rank >= 2, "LRN: {} takes input of rank >= 2 (N, C, ...), got "
            "rank {}", provider, rank, code="shape")


@kernel("LRN", 1, dtypes=FLOATS, check=_check_lrn, family="normalization")
@kernel("LRN", 13, dtypes=FLOATS_BF16, check=_check_lrn, family="normalization")
def lrn(xp, x, *, size, alpha, beta, bias):
    dtype = x.dtype
    if dtype.itemsize < 4:
        x = x.astype(xp.float32)
    channels = x.shape[1]
    before = (size - 1) // 2
    squares = pad_spatial(xp, xp.square(x), (before,) + (0,) * (x.ndim - 2),
                          (size - 1 - before,) + (0,) * (x.ndim - 2))
    total = squares[:, 0:channels].copy()
    for i in range(1, size):
        total += squares[:, i:i + channels]
    return (x / (bias + (alpha / size) * total) ** beta).astype(dtype, copy=False)
