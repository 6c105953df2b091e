"""Normalizations for inference: BatchNormalization (estimated statistics), LayerNormalization,
Softmax, LogSoftmax, and Dropout (the identity outside training)."""

from __future__ import annotations

from ep_host import require
from ep_host_cpu.registry import FLOATS, kernel


def _extra_outputs(node):
    return [v.name for v in node.outputs[1:] if v is not None]


def _rank(node):
    x = node.inputs[0]
    return None if x is None or x.shape is None else len(x.shape)


# -- BatchNormalization -----------------------------------------------------------------------


def _check_batch_norm(node):
    attrs = node.attributes
    v = node.since_version
    if v < 7:
        require(attrs["is_test"] != 0,
                "BatchNormalization-{}: CPU EP computes test mode only (is_test=1, estimated "
                "statistics), got is_test=0 (batch statistics)", v, code="attribute")
    if v < 9:
        spatial = attrs["spatial"]
        allowed = (1,) if v < 7 else (0, 1)
        require(spatial in allowed, "BatchNormalization-{}: CPU EP takes spatial={}, got {}", v,
                " or ".join(map(str, allowed)), spatial, code="attribute")
    if v >= 14:
        require(attrs["training_mode"] == 0,
                "BatchNormalization-{}: CPU EP computes inference only (training_mode=0, "
                "estimated statistics), got training_mode={}", v, attrs["training_mode"],
                code="attribute")
    extra = _extra_outputs(node)
    require(not extra, "BatchNormalization-{}: CPU EP computes inference mode, whose only output "
            "is Y; got training outputs {}", v, extra, code="attribute")
    for value in node.inputs[1:]:
        if value is not None and value.dtype is not None:
            require(value.dtype.name in FLOATS, "BatchNormalization: CPU EP takes {} scale, bias "
                    "and statistics, got {} for input {!r}", "/".join(sorted(FLOATS)),
                    value.dtype.name, value.name, code="dtype")


def _batch_norm(xp, x, scale, b, mean, var, epsilon):
    dtype = x.dtype
    work = xp.result_type(x, scale, b, mean, var, xp.float32)
    factor = scale.astype(work) / xp.sqrt(var.astype(work) + epsilon)
    shift = b.astype(work) - mean.astype(work) * factor
    if factor.ndim == 1:  # per channel
        shape = (-1,) + (1,) * max(x.ndim - 2, 0)
        factor, shift = factor.reshape(shape), shift.reshape(shape)
    return (x.astype(work) * factor + shift).astype(dtype, copy=False)


@kernel("BatchNormalization", 1, 6, dtypes=FLOATS, check=_check_batch_norm)
def batch_norm_6(xp, x, scale, b, mean, var, *, epsilon, is_test, spatial):
    return _batch_norm(xp, x, scale, b, mean, var, epsilon)


@kernel("BatchNormalization", 7, dtypes=FLOATS, check=_check_batch_norm)
def batch_norm_7(xp, x, scale, b, mean, var, *, epsilon, spatial):
    return _batch_norm(xp, x, scale, b, mean, var, epsilon)


@kernel("BatchNormalization", 9, 14, 15, dtypes=FLOATS, check=_check_batch_norm)
def batch_norm(xp, x, scale, b, mean, var, *, epsilon, training_mode=0):
    return _batch_norm(xp, x, scale, b, mean, var, epsilon)


# -- LayerNormalization -----------------------------------------------------------------------


def _check_axis(node, axis):
    rank = _rank(node)
    if rank is not None:
        require(-rank <= axis < rank, "{}: axis must be in [{}, {}] for a rank-{} input, got {}",
                node.op_type, -rank, rank - 1, rank, axis, code="attribute")


def _check_layer_norm(node):
    stash = node.attributes["stash_type"]
    require(stash == 1, "LayerNormalization: CPU EP computes stash_type=1 (float32), got {}",
            stash, code="attribute")
    _check_axis(node, node.attributes["axis"])


@kernel("LayerNormalization", 17, dtypes=FLOATS, check=_check_layer_norm)
def layer_norm(xp, x, scale, b=None, *, axis, epsilon, stash_type):
    axes = tuple(range(axis % x.ndim, x.ndim))
    stashed = x.astype(xp.float32)
    mean = stashed.mean(axis=axes, keepdims=True)
    d = stashed - mean
    inv_std = 1 / xp.sqrt((d * d).mean(axis=axes, keepdims=True) + xp.float32(epsilon))
    y = (d * inv_std).astype(x.dtype) * scale
    if b is not None:
        y += b
    return y, mean, inv_std


# -- Softmax, LogSoftmax ----------------------------------------------------------------------


def _check_softmax(node):
    _check_axis(node, node.attributes["axis"])


def _softmax(xp, x, axis, log):
    dtype = x.dtype
    if dtype == xp.float16:
        x = x.astype(xp.float32)
    shifted = x - x.max(axis=axis, keepdims=True)
    e = xp.exp(shifted)
    total = e.sum(axis=axis, keepdims=True)
    y = shifted - xp.log(total) if log else e / total
    return y.astype(dtype, copy=False)


def _softmax_2d(xp, x, axis, log):
    """Versions before 13: coerce to 2-D at ``axis``, normalize each row, restore the shape."""
    axis %= max(x.ndim, 1)
    rows = cols = 1
    for i, d in enumerate(x.shape):
        if i < axis:
            rows *= d
        else:
            cols *= d
    return _softmax(xp, x.reshape(rows, cols), 1, log).reshape(x.shape)


@kernel("Softmax", 1, 11, dtypes=FLOATS, check=_check_softmax)
def softmax_2d(xp, x, *, axis):
    return _softmax_2d(xp, x, axis, log=False)


@kernel("Softmax", 13, dtypes=FLOATS, check=_check_softmax)
def softmax(xp, x, *, axis):
    return _softmax(xp, x, axis, log=False)


@kernel("LogSoftmax", 1, 11, dtypes=FLOATS, check=_check_softmax)
def log_softmax_2d(xp, x, *, axis):
    return _softmax_2d(xp, x, axis, log=True)


@kernel("LogSoftmax", 13, dtypes=FLOATS, check=_check_softmax)
def log_softmax(xp, x, *, axis):
    return _softmax(xp, x, axis, log=True)


# -- Dropout ----------------------------------------------------------------------------------


def _wants_mask(node):
    return {"with_mask": len(node.outputs) > 1 and node.outputs[1] is not None}


def _check_dropout_test_mode(node):
    is_test = node.attributes["is_test"]
    require(is_test != 0, "Dropout-{}: CPU EP computes test mode only (is_test=1, Y = X), got "
            "is_test=0 (random dropout)", node.since_version, code="attribute")


def _check_dropout_training_input(node):
    mode = node.inputs[2] if len(node.inputs) > 2 else None
    if mode is None:
        return
    require(mode.is_constant, "Dropout: CPU EP computes inference only: training_mode must be "
            "omitted or a constant False, got the computed value {!r}", mode.name,
            code="attribute")
    require(not mode.value.any(), "Dropout: CPU EP computes inference only: training_mode must "
            "be omitted or a constant False, got True ({!r})", mode.name, code="attribute")


def _identity(xp, data, with_mask, mask_dtype):
    y = xp.array(data, copy=True)
    return (y, xp.ones(data.shape, dtype=mask_dtype)) if with_mask else y


@kernel("Dropout", 1, 6, dtypes=FLOATS, check=_check_dropout_test_mode, bind=_wants_mask)
def dropout_6(xp, data, *, is_test, ratio, with_mask=False):
    return _identity(xp, data, with_mask, data.dtype)


@kernel("Dropout", 7, dtypes=FLOATS, bind=_wants_mask)
def dropout_7(xp, data, *, ratio, with_mask=False):
    """The spec leaves the inference mask open; it is all ones (nothing dropped), as from 12."""
    return _identity(xp, data, with_mask, data.dtype)


@kernel("Dropout", 10, dtypes=FLOATS, bind=_wants_mask)
def dropout_10(xp, data, *, ratio, with_mask=False):
    """The spec leaves the inference mask open; it is all true (nothing dropped), as from 12."""
    return _identity(xp, data, with_mask, bool)


@kernel("Dropout", 12, 13, 22, dtypes=FLOATS, check=_check_dropout_training_input,
        bind=_wants_mask)
def dropout(xp, data, ratio=None, training_mode=None, *, seed=None, with_mask=False):
    return _identity(xp, data, with_mask, bool)
