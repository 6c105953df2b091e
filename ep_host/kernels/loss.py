"""Losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (reductions none, sum and mean,
class weights, ignore_index, and the log-probability output). Half-precision inputs are computed
in float32 and rounded once."""

from __future__ import annotations

from ep_host import require
from ep_host.kernels.registry import FLOATS, FLOATS_BF16, kernel

REDUCTIONS = ("none", "sum", "mean")


def _check_loss(node, provider):
    op = node.op_type
    reduction = node.attributes["reduction"]
    require(reduction in REDUCTIONS, "{}: reduction must be one of {}, got {!r}", op,
            "/".join(REDUCTIONS), reduction, code="attribute")
    scores, target = node.inputs[:2]
    weight = node.inputs[2] if len(node.inputs) > 2 else None
    rank = None if scores is None or scores.shape is None else len(scores.shape)
    require(rank is None or rank >= 2, "{}: input must have rank >= 2 (N, C, d1...), got rank "
            "{}", op, rank, code="shape")
    t_rank = None if target is None or target.shape is None else len(target.shape)
    require(rank is None or t_rank is None or t_rank == rank - 1, "{}: the target must have rank "
            "{} (the input's without C), got {}", op, rank and rank - 1, t_rank, code="shape")
    if target is not None and target.dtype is not None:
        require(target.dtype.name in ("int32", "int64"), "{}: targets must be int32 or int64, "
                "got {}", op, target.dtype.name, code="dtype")
    if weight is not None and weight.shape is not None:
        c = scores.shape[1] if rank else None
        require(len(weight.shape) == 1 and (not isinstance(c, int) or
                                            not isinstance(weight.shape[0], int)
                                            or weight.shape[0] == c),
                "{}: weight must be 1-D with one value per class ({}), got shape {}", op, c,
                weight.shape, code="shape")


def _work(xp, x):
    return xp.float64 if x.dtype == xp.float64 else xp.float32


def _nll(xp, log_prob, target, weight, reduction, ignore_index):
    """The loss of ``log_prob`` (N, C, d...) in its own (working) type."""
    classes = log_prob.shape[1]
    target = target.astype(xp.int64)
    if ignore_index is None:
        ignored = xp.zeros(target.shape, dtype=bool)
    else:
        ignored = target == ignore_index
    if bool(xp.any(((target < 0) | (target >= classes)) & ~ignored)):
        raise ValueError(f"target values must lie in [0, {classes}) or equal ignore_index "
                         f"({ignore_index})")
    safe = xp.where(ignored, 0, target)
    picked = xp.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
    if weight is None:
        w = xp.where(ignored, 0, 1).astype(log_prob.dtype)
    else:
        w = xp.where(ignored, 0, weight.astype(log_prob.dtype)[safe])
    loss = -picked * w
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


@kernel("NegativeLogLikelihoodLoss", 12, 13, dtypes=FLOATS, check=_check_loss)
@kernel("NegativeLogLikelihoodLoss", 22, dtypes=FLOATS_BF16, check=_check_loss)
def negative_log_likelihood_loss(xp, x, target, weight=None, *, reduction, ignore_index=None):
    loss = _nll(xp, x.astype(_work(xp, x)), target, weight, reduction, ignore_index)
    return xp.asarray(loss).astype(x.dtype)


def _wants_log_prob(node):
    return {"with_log_prob": len(node.outputs) > 1 and node.outputs[1] is not None}


@kernel("SoftmaxCrossEntropyLoss", 12, dtypes=FLOATS, check=_check_loss, bind=_wants_log_prob)
@kernel("SoftmaxCrossEntropyLoss", 13, dtypes=FLOATS_BF16, check=_check_loss,
        bind=_wants_log_prob)
def softmax_cross_entropy_loss(xp, scores, labels, weights=None, *, reduction, ignore_index=None,
                               with_log_prob=False):
    s = scores.astype(_work(xp, scores))
    shifted = s - s.max(axis=1, keepdims=True)
    log_prob = shifted - xp.log(xp.exp(shifted).sum(axis=1, keepdims=True))
    loss = xp.asarray(_nll(xp, log_prob, labels, weights, reduction, ignore_index))
    loss = loss.astype(scores.dtype)
    return (loss, log_prob.astype(scores.dtype)) if with_log_prob else loss
