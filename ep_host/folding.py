"""Folding passes of the graph optimizations: Constant nodes lifted to initializers, constant
folding (the common cases directly, the rest by onnx's reference evaluator) and folding
BatchNormalization, per-channel Mul and per-channel Add into the Conv or BatchNormalization
before them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, TensorProto, helper, numpy_helper

from ep_host.fold_direct import fold_directly
from ep_host.graph import DEFAULT_DOMAIN
from ep_host.rewriter import (
    Rewriter,
    copy_node,
    is_op,
    node_attribute,
    node_domain,
    other_input,
)

FOLD_MAX_ELEMENTS = 1 << 24  # a constant result bigger than this (64 MB of float32) stays a node
NOT_FOLDED = frozenset({
    # a different draw each run, or state the host must keep
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout", "Constant",
})
FOLDABLE_KINDS = "biuf"  # numpy kinds a folded tensor may have (no strings, no 8-bit floats)


# -- Constant nodes --------------------------------------------------------------------------------


def constant_lifting(rw: Rewriter) -> int:
    """Every ``Constant`` node of the main graph becomes an initializer of the same name, in
    each of its attribute forms (``value``, ``sparse_value`` made dense, ``value_float(s)``,
    ``value_int(s)``, ``value_string(s)``), so it is neither placed nor priced."""
    lifted = 0
    for node in rw.live():
        if node_domain(node) != DEFAULT_DOMAIN or node.op_type != "Constant":
            continue
        if len(node.attribute) != 1 or len(node.output) != 1 or not node.output[0]:
            continue  # not a valid Constant: left for the providers to refuse by name
        tensor = _constant_tensor(node.attribute[0], node.output[0])
        if tensor is None:
            continue
        rw.add_initializer(tensor)
        rw.remove(node)
        lifted += 1
    return lifted


def _constant_tensor(attr: AttributeProto, name: str) -> TensorProto | None:
    """A Constant's value as a ``TensorProto`` named ``name``; ``None`` for an unknown form."""
    if attr.name == "value" and attr.type == AttributeProto.TENSOR:
        tensor = TensorProto()
        tensor.CopyFrom(attr.t)
        tensor.name = name
        return tensor
    if attr.name == "sparse_value" and attr.type == AttributeProto.SPARSE_TENSOR:
        return _dense(attr.sparse_tensor, name)
    forms = {
        "value_float": (TensorProto.FLOAT, AttributeProto.FLOAT, (), lambda a: [a.f]),
        "value_floats": (TensorProto.FLOAT, AttributeProto.FLOATS, None, lambda a: a.floats),
        "value_int": (TensorProto.INT64, AttributeProto.INT, (), lambda a: [a.i]),
        "value_ints": (TensorProto.INT64, AttributeProto.INTS, None, lambda a: a.ints),
        "value_string": (TensorProto.STRING, AttributeProto.STRING, (), lambda a: [a.s]),
        "value_strings": (TensorProto.STRING, AttributeProto.STRINGS, None, lambda a: a.strings),
    }
    form = forms.get(attr.name)
    if form is None or attr.type != form[1]:
        return None
    elem_type, _, dims, read = form
    values = list(read(attr))
    return helper.make_tensor(name, elem_type, [len(values)] if dims is None else dims, values)


def _dense(sparse: onnx.SparseTensorProto, name: str) -> TensorProto | None:
    """A sparse tensor as its dense ``TensorProto``: zeros but at its indices, which are either
    linear ``[NNZ]`` or coordinates ``[NNZ, rank]``; ``None`` when they do not fit its dims."""
    shape = tuple(sparse.dims)
    values = numpy_helper.to_array(sparse.values).reshape(-1)
    indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    dense = np.zeros(math.prod(shape), dtype=values.dtype)
    if indices.ndim == 2 and shape and indices.shape == (values.size, len(shape)):
        if ((indices < 0) | (indices >= np.array(shape))).any():
            return None
        linear = np.ravel_multi_index(tuple(indices.T), shape) if values.size else indices[:, 0]
    elif indices.ndim == 1 and indices.size == values.size:
        if ((indices < 0) | (indices >= dense.size)).any():
            return None
        linear = indices
    else:
        return None
    dense[linear] = values
    tensor = numpy_helper.from_array(dense.reshape(shape), name)
    if tensor.data_type != sparse.values.data_type:
        return None  # a type numpy cannot hold as written (bfloat16, float8...): keep the node
    return tensor


# -- constant folding ------------------------------------------------------------------------------


def constant_folding(rw: Rewriter) -> int:
    folded = 0
    for node in rw.live():
        if node_domain(node) != DEFAULT_DOMAIN or node.op_type in NOT_FOLDED:
            continue
        if node.op_type not in ("Shape", "Size") and not all(
                rw.is_const(i) for i in node.input if i):
            continue  # neither a shape read nor all-constant inputs: nothing to fold
        if rw.holds_graph(node):
            continue
        outputs = [o for o in node.output if o]
        if not outputs or any(o in rw.outputs for o in outputs):
            continue  # a graph output stays computed, as the model declares it
        if node.op_type == "Identity" and len(outputs) == 1 and rw.alias(node):
            folded += 1
            continue
        results = _shape_of_static(rw, node)
        if results is None:
            if not all(rw.is_const(i) for i in node.input if i):
                continue
            inputs = [rw.const(i) if i else None for i in node.input]
            results = _direct(rw, node, inputs)
            if results is None:
                results = _evaluate(rw, node, inputs)
            if results is None:
                continue
        for name, value in zip(node.output, results, strict=False):
            if name:
                rw.add_constant(name, value)
        rw.remove(node)
        folded += 1
    return folded


def _shape_of_static(rw: Rewriter, node: NodeProto) -> list[np.ndarray] | None:
    """Shape and Size of a value whose shape is static, computed from the shape alone."""
    if node.op_type not in ("Shape", "Size") or not node.input:
        return None
    shape = rw.shape(node.input[0])
    if shape is None or not all(isinstance(d, int) for d in shape):
        return None
    if node.op_type == "Size":
        return [np.array(math.prod(shape), dtype=np.int64)]
    rank = len(shape)
    start, end = node_attribute(node, "start", 0), node_attribute(node, "end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(shape[start:end], dtype=np.int64)]


def _direct(rw: Rewriter, node: NodeProto,
            inputs: Sequence[np.ndarray | None]) -> list[np.ndarray] | None:
    """The node's output computed directly (``ep_host.fold_direct``), under the checks the
    evaluator's results pass; ``None`` where that does not apply."""
    if any(v is not None and v.dtype.kind not in FOLDABLE_KINDS for v in inputs):
        return None
    opset = rw.model.opset_imports.get(DEFAULT_DOMAIN, 1)
    results = fold_directly(node, inputs, opset)
    if results is None:
        return None
    value = results[0]
    if value.dtype != rw.dtype(node.output[0]) or value.size > FOLD_MAX_ELEMENTS:
        return None
    return results


def _evaluate(rw: Rewriter, node: NodeProto,
              inputs: Sequence[np.ndarray | None]) -> list[np.ndarray | None] | None:
    """The node's outputs by onnx's reference evaluator, or ``None`` when folding it would be
    unsafe (a type the result cannot hold, too big, or the evaluator fails)."""
    from onnx.reference import ReferenceEvaluator  # slow to import: on first use

    if any(v is not None and v.dtype.kind not in FOLDABLE_KINDS for v in inputs):
        return None
    wanted = {o: rw.dtype(o) for o in node.output if o}
    if any(d is None or d.kind not in FOLDABLE_KINDS for d in wanted.values()):
        return None
    names = [f"in{i}" if name else "" for i, name in enumerate(node.input)]
    probe = copy_node(node)
    del probe.input[:]
    probe.input.extend(names)
    outs = [f"out{i}" for i in range(len(node.output))]
    del probe.output[:]
    probe.output.extend(outs)
    graph = helper.make_graph(
        [probe], "fold",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for n, v in zip(names, inputs, strict=True) if n],
        [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    opset = rw.model.opset_imports.get(DEFAULT_DOMAIN, onnx.defs.onnx_opset_version())
    probe_model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        results = ReferenceEvaluator(probe_model).run(
            None, {n: v for n, v in zip(names, inputs, strict=True) if n})
    except Exception:  # the evaluator cannot run it here: leave the node to the providers
        return None
    out: list[np.ndarray | None] = []  # by output position; None where the output is omitted
    for name, value in zip(node.output, results, strict=False):
        if not name:
            out.append(None)
            continue
        value = np.asarray(value)
        if value.dtype != wanted[name] or value.size > FOLD_MAX_ELEMENTS:
            return None
        out.append(value)
    if len(out) < len(node.output):
        return None  # the evaluator gave fewer outputs than the node names
    return out


# -- Conv + BatchNormalization ---------------------------------------------------------------------


def conv_bn_folding(rw: Rewriter) -> int:
    folded = 0
    for bn in rw.live():
        if not is_op(bn, "BatchNormalization") or not _inference_bn(rw, bn):
            continue
        conv = rw.producer.get(bn.input[0])
        if not is_op(conv, "Conv") or rw.only_consumer(conv.output[0]) is not bn:
            continue
        w = rw.const(conv.input[1])
        b = rw.const(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
        stats = [rw.const(name) for name in bn.input[1:5]]
        if w is None or w.dtype not in (np.float32, np.float64) or any(s is None for s in stats):
            continue
        if len(conv.input) > 2 and conv.input[2] and b is None:
            continue
        scale, bias, mean, var = (s.astype(np.float64).reshape(-1) for s in stats)
        m = w.shape[0]
        if any(s.size != m for s in (scale, bias, mean, var)):
            continue
        factor = scale / np.sqrt(var + float(node_attribute(bn, "epsilon", 1e-5)))
        w_new = (w.astype(np.float64) * factor.reshape((m,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        b_old = np.zeros(m) if b is None else b.astype(np.float64).reshape(-1)
        b_new = ((b_old - mean) * factor + bias).astype(w.dtype)
        w_name = rw.fresh(f"{conv.name}::bn_folded_W")
        b_name = rw.fresh(f"{conv.name}::bn_folded_B")
        rw.add_constant(w_name, w_new)
        rw.add_constant(b_name, b_new)
        _absorb(rw, conv, bn, [conv.input[0], w_name, b_name])
        folded += 1
    return folded


def _absorb(rw: Rewriter, node: NodeProto, after: NodeProto, inputs: Sequence[str]) -> None:
    """``node``, reading ``inputs`` instead, writes what ``after`` wrote; ``after`` goes."""
    fused = copy_node(node)
    del fused.input[:]
    fused.input.extend(inputs)
    del fused.output[:]
    fused.output.append(after.output[0])
    rw.replace(node, fused)
    rw.remove(after, into=fused.name)


def _inference_bn(rw: Rewriter, bn: NodeProto) -> bool:
    version = rw.opset(bn)
    if version is None or version < 7 or len(bn.input) < 5:
        return False
    if any(o for o in bn.output[1:]):
        return False  # training outputs
    if version >= 14 and node_attribute(bn, "training_mode", 0):
        return False
    return not (version < 9 and node_attribute(bn, "spatial", 1) != 1)


# -- per-channel Mul/Add into Conv or BatchNormalization -------------------------------------------


def channel_affine_folding(rw: Rewriter) -> int:
    folded = 0
    for node in rw.live():
        if not (is_op(node, "Mul") or is_op(node, "Add")) or len(node.input) != 2:
            continue
        for x in node.input:
            producer = rw.producer.get(x)
            if producer is None or producer.op_type not in ("Conv", "BatchNormalization"):
                continue  # the cheap test first: most Mul and Add follow neither
            other = other_input(node, x)
            if other is None or rw.only_consumer(x) is not node or not rw.is_const(other):
                continue
            if is_op(producer, "Conv"):
                done = _fold_into_conv(rw, producer, node, x, other)
            elif is_op(producer, "BatchNormalization") and _inference_bn(rw, producer):
                done = _fold_into_bn(rw, producer, node, x, other)
            else:
                continue
            if done:
                folded += 1
                break
    return folded


def _per_channel(rw: Rewriter, x: str, name: str) -> np.ndarray | None:
    """The constant ``name`` as one value per channel of ``x`` (N, C, ...), when it broadcasts
    only along the channel axis; else ``None``."""
    shape, dtype = rw.shape(x), rw.dtype(x)
    value = rw.const(name)
    if (shape is None or len(shape) < 2 or not isinstance(shape[1], int) or value is None
            or value.dtype != dtype or dtype not in (np.float32, np.float64)
            or value.ndim > len(shape)):
        return None
    full = (1,) * (len(shape) - value.ndim) + value.shape
    if any(d != 1 for i, d in enumerate(full) if i != 1) or full[1] not in (1, shape[1]):
        return None
    return np.broadcast_to(value.reshape(-1), (shape[1],)).astype(np.float64)


def _fold_into_conv(rw: Rewriter, conv: NodeProto, op: NodeProto, x: str, other: str) -> bool:
    vec = _per_channel(rw, x, other)
    w = rw.const(conv.input[1])
    has_bias = len(conv.input) > 2 and bool(conv.input[2])
    b = rw.const(conv.input[2]) if has_bias else None
    if vec is None or w is None or (has_bias and b is None) or w.shape[0] != vec.size:
        return False
    bias = np.zeros(w.shape[0]) if b is None else b.astype(np.float64).reshape(-1)
    if op.op_type == "Mul":
        w_new = w.astype(np.float64) * vec.reshape((-1,) + (1,) * (w.ndim - 1))
        w_name = rw.fresh(f"{conv.name}::scaled_W")
        rw.add_constant(w_name, w_new.astype(w.dtype))
        bias = bias * vec
    else:
        w_name = conv.input[1]
        bias = bias + vec
    b_name = rw.fresh(f"{conv.name}::shifted_B")
    rw.add_constant(b_name, bias.astype(w.dtype))
    _absorb(rw, conv, op, [conv.input[0], w_name, b_name])
    return True


def _fold_into_bn(rw: Rewriter, bn: NodeProto, op: NodeProto, x: str, other: str) -> bool:
    vec = _per_channel(rw, x, other)
    scale, bias = rw.const(bn.input[1]), rw.const(bn.input[2])
    if vec is None or scale is None or bias is None or scale.size != vec.size:
        return False
    s64, b64 = scale.astype(np.float64).reshape(-1), bias.astype(np.float64).reshape(-1)
    if op.op_type == "Mul":
        s64, b64 = s64 * vec, b64 * vec
    else:
        b64 = b64 + vec
    s_name = rw.fresh(f"{bn.name}::scale")
    b_name = rw.fresh(f"{bn.name}::bias")
    rw.add_constant(s_name, s64.astype(scale.dtype).reshape(scale.shape))
    rw.add_constant(b_name, b64.astype(bias.dtype).reshape(bias.shape))
    _absorb(rw, bn, op, [bn.input[0], s_name, b_name, *bn.input[3:]])
    return True
