"""The constant folds exported models are full of (an Identity of a weight, a Gather from a
shape, scalar arithmetic on dims), computed directly with numpy instead of by onnx's reference
evaluator, which builds a model per node (a fraction of a millisecond each: most of the folding
time of a MobileNet or ShuffleNet export). Anything outside the narrow cases below answers
``None`` and goes to the evaluator.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from onnx import NodeProto

from ep_host.rewriter import node_attribute

Inputs = Sequence[np.ndarray | None]


def _identity(node: NodeProto, inputs: Inputs, opset: int) -> np.ndarray | None:
    return inputs[0] if len(inputs) == 1 else None


def _binary(ufunc: Callable[..., np.ndarray], kinds: str) -> Callable[..., np.ndarray | None]:
    """An elementwise op with numpy's (ONNX's multidirectional) broadcasting, for two inputs
    of one dtype of the given kinds."""

    def fold(node: NodeProto, inputs: Inputs, opset: int) -> np.ndarray | None:
        if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
            return None
        a, b = inputs
        if a.dtype != b.dtype or a.dtype.kind not in kinds:
            return None
        with np.errstate(all="ignore"):  # integers wrap, floats reach inf/nan, as in ONNX
            return np.asarray(ufunc(a, b), dtype=a.dtype)

    return fold


def _divide(node: NodeProto, inputs: Inputs, opset: int) -> np.ndarray | None:
    """Floats as numpy divides them; integers only where every dividend is >= 0 and every
    divisor > 0 (dims and sizes), where ONNX's truncating division is numpy's floor division."""
    if len(inputs) == 2 and inputs[0] is not None and inputs[0].dtype.kind in "iu":
        a, b = inputs
        if b is None or a.dtype != b.dtype or (a.size and a.min() < 0) or (b.size and b.min() <= 0):
            return None
        return np.asarray(np.floor_divide(a, b), dtype=a.dtype)
    return _float_divide(node, inputs, opset)


def _sqrt(node: NodeProto, inputs: Inputs, opset: int) -> np.ndarray | None:
    x = inputs[0] if len(inputs) == 1 else None
    if x is None or x.dtype.kind != "f":
        return None
    with np.errstate(invalid="ignore"):  # a negative gives NaN, as in ONNX
        return np.sqrt(x)


def _gather(node: NodeProto, inputs: Inputs, opset: int) -> np.ndarray | None:
    if len(inputs) != 2 or inputs[0] is None or inputs[1] is None:
        return None
    data, indices = inputs
    if indices.dtype not in (np.int32, np.int64) or data.ndim == 0:
        return None
    axis = node_attribute(node, "axis", 0)
    if not -data.ndim <= axis < data.ndim:
        return None
    axis %= data.ndim
    n = data.shape[axis]
    if indices.size and (indices.min() < -n or indices.max() >= n):
        return None  # out of range: the evaluator's (and the run's) error, not a fold
    return np.take(data, np.where(indices < 0, indices + n, indices), axis=axis)


def _unsqueeze(node: NodeProto, inputs: Inputs, opset: int) -> np.ndarray | None:
    if not inputs or inputs[0] is None:
        return None
    if opset >= 13:
        if len(inputs) != 2 or inputs[1] is None or inputs[1].dtype != np.int64:
            return None
        axes = [int(a) for a in inputs[1].reshape(-1)]
    else:
        axes = list(node_attribute(node, "axes", None) or [])
        if opset < 11 and any(a < 0 for a in axes):
            return None  # negative axes came with opset 11
    rank = inputs[0].ndim + len(axes)
    if not axes or any(not -rank <= a < rank for a in axes):
        return None
    axes = [a % rank for a in axes]
    if len(set(axes)) != len(axes):
        return None
    return np.expand_dims(inputs[0], tuple(axes))


def _concat(node: NodeProto, inputs: Inputs, opset: int) -> np.ndarray | None:
    if not inputs or any(x is None for x in inputs):
        return None
    first = inputs[0]
    axis = node_attribute(node, "axis", None)
    if axis is None or first.ndim == 0 or not -first.ndim <= axis < first.ndim:
        return None
    axis %= first.ndim
    if any(x.dtype != first.dtype or x.ndim != first.ndim
           or x.shape[:axis] + x.shape[axis + 1:] != first.shape[:axis] + first.shape[axis + 1:]
           for x in inputs):
        return None
    return np.concatenate(inputs, axis=axis)


_float_divide = _binary(np.divide, "f")

DIRECT: dict[str, Callable[[NodeProto, Inputs, int], np.ndarray | None]] = {
    "Identity": _identity,
    "Add": _binary(np.add, "iuf"),
    "Sub": _binary(np.subtract, "iuf"),
    "Mul": _binary(np.multiply, "iuf"),
    "Div": _divide,
    "Sqrt": _sqrt,
    "Gather": _gather,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
}


def fold_directly(node: NodeProto, inputs: Inputs, opset: int) -> list[np.ndarray] | None:
    """The one output of ``node`` (default domain, of ai.onnx ``opset``) over constant
    ``inputs``, for the ops in :data:`DIRECT` and the cases each takes; else ``None``."""
    fold = DIRECT.get(node.op_type)
    if fold is None or len(node.output) != 1:
        return None
    result = fold(node, inputs, opset)
    return None if result is None else [np.asarray(result)]
