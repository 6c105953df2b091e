"""Graph optimizations before placement: passes that rewrite a loaded model's main graph.

Each pass is switchable by name and counts its rewrites; ``optimize`` returns a new
:class:`Model` whose ``optimizations`` name the passes that changed the graph. A fused node (a
new op standing for several) remembers the nodes it replaced in ``Model.unfused``: when no
provider claims it, the capability walk places those nodes instead, as it does a function body.

- ``constant_folding``: nodes whose inputs are all constants, and Shape/Size of a value whose
  shape is static, become initializers (computed by onnx's reference evaluator, the ONNX
  specification's own implementation).
- ``conv_bn_folding``: an inference-mode BatchNormalization after a Conv with constant weights
  is folded into the Conv's weights and bias.
- ``channel_affine_folding``: a Mul or Add by a per-channel constant after a Conv or an
  inference-mode BatchNormalization (a Caffe-style Scale layer) is folded into its weights and
  bias.
- ``conv_activation_fusion``: a Conv whose output only a Relu reads becomes one
  ``com.microsoft::FusedConv`` that applies the Relu to its own output in place.
- ``gelu_fusion``: the exact GELU written out as Div/Mul, Erf, Add, Mul, Mul becomes one
  ``com.microsoft::Gelu``.
- ``layer_norm_fusion``: LayerNormalization written out (ReduceMean, Sub, Pow or Mul,
  ReduceMean, Add, Sqrt, Div, Mul by a constant scale, optionally Add of a constant bias) over
  the last axis becomes one LayerNormalization (models of ai.onnx opset 17 on).
- ``matmul_add_fusion``: MatMul of a 2-D input by a constant 2-D matrix, then Add of a constant
  bias, becomes one Gemm.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np
import onnx
from onnx import AttributeProto, NodeProto, TensorProto, helper, numpy_helper

from ep_host.errors import HostError
from ep_host.graph import DEFAULT_DOMAIN, node_proto, node_reads, normalize_domain
from ep_host.loading import Model

MS_DOMAIN = "com.microsoft"
FOLD_MAX_ELEMENTS = 1 << 24  # a constant result bigger than this (64 MB of float32) stays a node
NOT_FOLDED = frozenset({
    # a different draw each run, or state the host must keep
    "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout", "Constant",
})
FOLDABLE_KINDS = "biuf"  # numpy kinds a folded tensor may have (no strings, no 8-bit floats)


class Rewriter:
    """The main graph as editable protobuf nodes, with the lookups passes need."""

    def __init__(self, model: Model):
        self.model = model
        self.values = model.graph.values
        self.nodes: list[NodeProto | None] = [
            _copy(node_proto(view)) for view in model.graph.nodes]
        self.views = {id(n): v for n, v in zip(self.nodes, model.graph.nodes, strict=True)}
        self.position = {id(n): i for i, n in enumerate(self.nodes)}
        self.initializers: dict[str, TensorProto] = {}  # new ones, by name
        self.constants: dict[str, np.ndarray] = {}  # values of the new ones
        self.unfused: dict[str, list[NodeProto]] = {}
        self.merged: dict[str, str | None] = {}  # a removed node -> the node that does its work
        self.outputs = {v.name for v in model.graph.outputs}
        self.names = {n.name for n in self.nodes if n is not None}
        self.index()

    def index(self) -> None:
        self.producer: dict[str, NodeProto] = {}
        self.consumers: dict[str, list[NodeProto]] = {}
        for n in self.nodes:
            if n is not None:
                self._link(n)

    def _link(self, n: NodeProto) -> None:
        for name in n.output:
            if name:
                self.producer[name] = n
        for name in node_reads(n):  # inputs and the outer names its bodies read
            self.consumers.setdefault(name, []).append(n)

    def _unlink(self, n: NodeProto) -> None:
        for name in n.output:
            if self.producer.get(name) is n:
                del self.producer[name]
        for name in set(node_reads(n)):
            users = self.consumers.get(name)
            if users is not None:
                users[:] = [u for u in users if u is not n]

    def live(self) -> Iterator[NodeProto]:
        """The nodes in graph order, as they are when the walk reaches each: a node an earlier
        rewrite removed is skipped, one it added is not visited."""
        for n in list(self.nodes):
            if n is not None and id(n) in self.position:
                yield n

    def is_const(self, name: str) -> bool:
        """Whether ``name`` is a constant, without reading its data."""
        if name in self.constants:
            return True
        view = self.values.get(name)
        return view is not None and view.is_constant

    def const(self, name: str) -> np.ndarray | None:
        if name in self.constants:
            return self.constants[name]
        view = self.values.get(name)
        if view is None or not view.is_constant:
            return None
        return view.value

    def only_consumer(self, name: str) -> NodeProto | None:
        """The one node reading ``name`` when nothing else (no graph output) does."""
        users = self.consumers.get(name, [])
        if len(users) != 1 or name in self.outputs:
            return None
        return users[0]

    def shape(self, name: str) -> tuple[Any, ...] | None:
        view = self.values.get(name)
        return None if view is None else view.shape

    def dtype(self, name: str) -> np.dtype | None:
        view = self.values.get(name)
        if view is None or view.dtype is None or view.dtype.numpy is None:
            return None
        return np.dtype(view.dtype.numpy)

    def add_constant(self, name: str, array: np.ndarray) -> None:
        self.constants[name] = array
        self.initializers[name] = numpy_helper.from_array(array, name)

    def fresh(self, base: str) -> str:
        """A name no node or value uses yet."""
        name, k = base, 1
        while name in self.names or name in self.values or name in self.initializers:
            k += 1
            name = f"{base}_{k}"
        self.names.add(name)
        return name

    def remove(self, node: NodeProto, into: str | None = None) -> None:
        """Drop ``node``; its work is now done by node ``into`` (``None``: a constant)."""
        self.nodes[self.position.pop(id(node))] = None
        self._unlink(node)
        if node.name:
            self.merged[node.name] = into

    def replace(self, old: NodeProto, new: NodeProto) -> None:
        i = self.position.pop(id(old))
        self._unlink(old)
        self.nodes[i] = new
        self.position[id(new)] = i
        self._link(new)
        self.views[id(new)] = self.views.get(id(old))
        if old.name and old.name != new.name:
            self.merged[old.name] = new.name

    def opset(self, node: NodeProto) -> int | None:
        view = self.views.get(id(node))
        return None if view is None else view.since_version


def _fuse(rw: Rewriter, nodes: Sequence[NodeProto], fused: NodeProto) -> None:
    """``fused`` does the work of ``nodes`` (the last writes its output): it takes the last's
    place, the others go, and the originals are kept to place instead if nobody claims it."""
    rw.unfused[fused.name] = [_copy(n) for n in nodes]
    rw.replace(nodes[-1], fused)
    for n in nodes[:-1]:
        rw.remove(n, into=fused.name)


def _copy(node: NodeProto) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    return out


def _domain(node: NodeProto) -> str:
    return normalize_domain(node.domain)


def _is(node: NodeProto | None, op_type: str) -> bool:
    return node is not None and node.op_type == op_type and _domain(node) == DEFAULT_DOMAIN


def _attr(node: NodeProto, name: str, default: Any = None) -> Any:
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


Match = TypeVar("Match")


def _matches(rw: Rewriter, op_type: str,
             match: Callable[[Rewriter, NodeProto], Match | None]) -> Iterator[Match]:
    """``match`` of each live node of ``op_type``, where it matches, as the walk reaches the
    node (lazily: a node an earlier rewrite removed is not tried)."""
    for node in rw.live():
        if _is(node, op_type):
            found = match(rw, node)
            if found is not None:
                yield found


def _scalar(rw: Rewriter, name: str) -> float | None:
    value = rw.const(name)
    if value is None or value.size != 1 or value.dtype.kind != "f":
        return None
    return float(value.reshape(()))


# -- constant folding --------------------------------------------------------------------------


def constant_folding(rw: Rewriter) -> int:
    folded = 0
    for node in rw.live():
        if _domain(node) != DEFAULT_DOMAIN or node.op_type in NOT_FOLDED:
            continue
        if any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for a in node.attribute):
            continue
        outputs = [o for o in node.output if o]
        if not outputs or any(o in rw.outputs for o in outputs):
            continue  # a graph output stays computed, as the model declares it
        results = _shape_of_static(rw, node)
        if results is None:
            if not all(rw.is_const(i) for i in node.input if i):
                continue
            inputs = [rw.const(i) if i else None for i in node.input]
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
    start, end = _attr(node, "start", 0), _attr(node, "end", rank)
    start = min(max(start + rank if start < 0 else start, 0), rank)
    end = min(max(end + rank if end < 0 else end, 0), rank)
    return [np.array(shape[start:end], dtype=np.int64)]


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
    probe = _copy(node)
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


# -- Conv + BatchNormalization ------------------------------------------------------------------


def conv_bn_folding(rw: Rewriter) -> int:
    folded = 0
    for bn in rw.live():
        if not _is(bn, "BatchNormalization") or not _inference_bn(rw, bn):
            continue
        conv = rw.producer.get(bn.input[0])
        if not _is(conv, "Conv") or rw.only_consumer(conv.output[0]) is not bn:
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
        factor = scale / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
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
    fused = _copy(node)
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
    if version >= 14 and _attr(bn, "training_mode", 0):
        return False
    return not (version < 9 and _attr(bn, "spatial", 1) != 1)


# -- per-channel Mul/Add into Conv or BatchNormalization ---------------------------------------


def channel_affine_folding(rw: Rewriter) -> int:
    folded = 0
    for node in rw.live():
        if not (_is(node, "Mul") or _is(node, "Add")) or len(node.input) != 2:
            continue
        for x in node.input:
            producer = rw.producer.get(x)
            other = _other(node, x)
            if (producer is None or other is None or rw.only_consumer(x) is not node
                    or not rw.is_const(other)):
                continue
            if _is(producer, "Conv"):
                done = _fold_into_conv(rw, producer, node, x, other)
            elif _is(producer, "BatchNormalization") and _inference_bn(rw, producer):
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


# -- Conv + Relu ---------------------------------------------------------------------------------


def conv_activation_fusion(rw: Rewriter) -> int:
    fused = 0
    for conv in rw.live():
        if not _is(conv, "Conv") or rw.dtype(conv.output[0]) not in (np.float32, np.float64):
            continue
        relu = rw.only_consumer(conv.output[0])
        if not _is(relu, "Relu"):
            continue
        name = rw.fresh(f"{conv.name}::FusedConv")
        node = helper.make_node("FusedConv", list(conv.input), [relu.output[0]], name=name,
                                domain=MS_DOMAIN, activation="Relu")
        node.attribute.extend(conv.attribute)
        _fuse(rw, [conv, relu], node)
        fused += 1
    return fused


# -- GELU -------------------------------------------------------------------------------------


SQRT2 = math.sqrt(2.0)


def gelu_fusion(rw: Rewriter) -> int:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` in its exported orders -> ``com.microsoft::Gelu``."""
    fused = 0
    for x, nodes, out in _matches(rw, "Erf", _match_gelu):
        name = rw.fresh(f"{nodes[-1].name}::Gelu")
        _fuse(rw, nodes, helper.make_node("Gelu", [x], [out], name=name, domain=MS_DOMAIN))
        fused += 1
    return fused


def _other(node: NodeProto, name: str) -> str | None:
    """The other input of a binary node that reads ``name`` once."""
    if len(node.input) != 2 or list(node.input).count(name) != 1:
        return None
    return node.input[1] if node.input[0] == name else node.input[0]


def _match_gelu(rw: Rewriter, erf: NodeProto) -> tuple[str, list[NodeProto], str] | None:
    scaled = rw.producer.get(erf.input[0])
    if scaled is None or rw.only_consumer(scaled.output[0]) is not erf:
        return None
    if _is(scaled, "Div") and _close(_scalar(rw, scaled.input[1]), SQRT2):
        x = scaled.input[0]
    elif _is(scaled, "Mul"):
        x = next((a for a in scaled.input
                  if _close(_scalar(rw, _other(scaled, a) or ""), 1 / SQRT2)), None)
        if x is None:
            return None
    else:
        return None
    plus = rw.only_consumer(erf.output[0])
    if not _is(plus, "Add") or not _close(_scalar(rw, _other(plus, erf.output[0]) or ""), 1.0):
        return None
    mul = rw.only_consumer(plus.output[0])
    if not _is(mul, "Mul"):
        return None
    partner = _other(mul, plus.output[0])
    if partner == x:  # (x * (1 + erf)) * 0.5
        half = rw.only_consumer(mul.output[0])
        if not _is(half, "Mul") or not _close(_scalar(rw, _other(half, mul.output[0]) or ""),
                                              0.5):
            return None
        return x, [scaled, erf, plus, mul, half], half.output[0]
    half = rw.producer.get(partner or "")
    if (_is(half, "Mul") and rw.only_consumer(half.output[0]) is mul and x in half.input
            and _close(_scalar(rw, _other(half, x) or ""), 0.5)):  # (0.5 * x) * (1 + erf)
        return x, [half, scaled, erf, plus, mul], mul.output[0]
    return None


def _close(value: float | None, target: float) -> bool:
    return value is not None and abs(value - target) <= 1e-6 * abs(target)


# -- LayerNormalization -----------------------------------------------------------------------


def layer_norm_fusion(rw: Rewriter) -> int:
    if rw.model.opset_imports.get(DEFAULT_DOMAIN, 0) < 17:
        return 0  # ai.onnx LayerNormalization exists from opset 17
    fused = 0
    for x, scale, bias, epsilon, nodes, out in _matches(rw, "ReduceMean", _match_layer_norm):
        name = rw.fresh(f"{nodes[-1].name}::LayerNormalization")
        inputs = [x, scale] + ([bias] if bias else [])
        _fuse(rw, nodes, helper.make_node("LayerNormalization", inputs, [out], name=name,
                                          axis=-1, epsilon=epsilon))
        fused += 1
    return fused


def _last_axis_mean(rw: Rewriter, node: NodeProto, x: str) -> bool:
    """``node`` is ReduceMean of ``x`` over its last axis, keeping dims."""
    if not _is(node, "ReduceMean") or node.input[0] != x or not _attr(node, "keepdims", 1):
        return False
    axes = _attr(node, "axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        value = rw.const(node.input[1])
        axes = None if value is None else [int(a) for a in value.reshape(-1)]
    shape = rw.shape(x)
    if axes is None or len(axes) != 1 or shape is None:
        return False
    return axes[0] in (-1, len(shape) - 1)


def _match_layer_norm(rw: Rewriter, mean: NodeProto) -> tuple[Any, ...] | None:
    x = mean.input[0]
    if not _last_axis_mean(rw, mean, x) or rw.dtype(x) not in (np.float32, np.float64):
        return None
    sub = rw.only_consumer(mean.output[0])
    if not _is(sub, "Sub") or list(sub.input) != [x, mean.output[0]]:
        return None
    users = list({id(u): u for u in rw.consumers.get(sub.output[0], [])}.values())
    if len(users) != 2 or sub.output[0] in rw.outputs:
        return None
    div = next((u for u in users if _is(u, "Div")), None)
    square = next((u for u in users if u is not div), None)
    if square is None or div is None or list(div.input)[0] != sub.output[0]:
        return None
    if _is(square, "Pow"):
        if not _close(_scalar(rw, square.input[1]), 2.0):
            return None
    elif not _is(square, "Mul") or list(square.input) != [sub.output[0], sub.output[0]]:
        return None
    var = rw.only_consumer(square.output[0])
    if var is None or not _last_axis_mean(rw, var, square.output[0]):
        return None
    add_eps = rw.only_consumer(var.output[0])
    if not _is(add_eps, "Add"):
        return None
    epsilon = _scalar(rw, _other(add_eps, var.output[0]) or "")
    sqrt = rw.only_consumer(add_eps.output[0])
    if epsilon is None or not _is(sqrt, "Sqrt") or rw.only_consumer(sqrt.output[0]) is not div:
        return None
    if list(div.input) != [sub.output[0], sqrt.output[0]]:
        return None
    mul = rw.only_consumer(div.output[0])
    hidden = rw.shape(x)[-1]
    if not _is(mul, "Mul"):
        return None
    scale = _other(mul, div.output[0])
    gamma = rw.const(scale or "")
    if gamma is None or gamma.shape != (hidden,) or gamma.dtype != rw.dtype(x):
        return None
    nodes = [mean, sub, square, var, add_eps, sqrt, div, mul]
    bias, out = "", mul.output[0]
    plus = rw.only_consumer(mul.output[0])
    if _is(plus, "Add"):
        candidate = _other(plus, mul.output[0])
        beta = rw.const(candidate or "")
        if beta is not None and beta.shape == (hidden,) and beta.dtype == gamma.dtype:
            bias, out = candidate, plus.output[0]
            nodes.append(plus)
    return x, scale, bias, epsilon, nodes, out


# -- MatMul + Add -------------------------------------------------------------------------------


def matmul_add_fusion(rw: Rewriter) -> int:
    fused = 0
    for mm in rw.live():
        if not _is(mm, "MatMul") or len(mm.input) != 2:
            continue
        a_shape = rw.shape(mm.input[0])
        add = rw.only_consumer(mm.output[0])
        if a_shape is None or len(a_shape) != 2 or not _is(add, "Add"):
            continue
        b = rw.const(mm.input[1])
        if b is None or b.ndim != 2:
            continue
        if b.dtype not in (np.float32, np.float64) or rw.dtype(mm.input[0]) != b.dtype:
            continue
        bias_name = _other(add, mm.output[0])
        bias = rw.const(bias_name or "")
        n = b.shape[1]
        if bias is None or bias.dtype != b.dtype or bias.shape not in ((n,), (1, n)):
            continue
        name = rw.fresh(f"{add.name}::Gemm")
        _fuse(rw, [mm, add], helper.make_node("Gemm", [mm.input[0], mm.input[1], bias_name],
                                              [add.output[0]], name=name))
        fused += 1
    return fused


PASSES: dict[str, Callable[[Rewriter], int]] = {
    "constant_folding": constant_folding,
    "conv_bn_folding": conv_bn_folding,
    "channel_affine_folding": channel_affine_folding,
    "conv_activation_fusion": conv_activation_fusion,
    "gelu_fusion": gelu_fusion,
    "layer_norm_fusion": layer_norm_fusion,
    "matmul_add_fusion": matmul_add_fusion,
}
DEFAULT_PASSES = tuple(PASSES)


def resolve_passes(passes: Iterable[str] | None = None,
                   disable: Iterable[str] = ()) -> list[str]:
    """The passes to run, in their fixed order: ``passes`` (default all) less ``disable``."""
    chosen = list(DEFAULT_PASSES if passes is None else passes)
    off = set(disable)
    unknown = [p for p in (*chosen, *off) if p not in PASSES]
    if unknown:
        raise HostError(f"unknown graph optimization(s) {', '.join(unknown)}; "
                        f"known: {', '.join(PASSES)}")
    return [p for p in PASSES if p in chosen and p not in off]


def optimize(model: Model, passes: Iterable[str] | None = None,
             disable: Iterable[str] = ()) -> Model:
    """``model`` rewritten by ``passes`` (default all but ``disable``), as a new model; the
    model itself when no pass changed anything. The new model's ``optimizations`` maps each
    pass that changed the graph to its rewrite count."""
    names = resolve_passes(passes, disable)
    if not names or not model.graph.nodes:
        return model
    rw = Rewriter(model)
    applied = {}
    for name in names:
        count = PASSES[name](rw)
        if count:
            applied[name] = count
    if not applied:
        return model
    return _rebuild(model, rw, applied)


def _copy_fields(src: Any, dst: Any, skip: frozenset[str]) -> None:
    """Copy every set field of protobuf message ``src`` into ``dst`` but those in ``skip``."""
    for field, value in src.ListFields():
        if field.name in skip:
            continue
        repeated = (field.is_repeated if hasattr(field, "is_repeated")  # protobuf 5 and on
                    else field.label == field.LABEL_REPEATED)
        if repeated:
            getattr(dst, field.name).extend(value)
        elif field.message_type is not None:
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def _rebuild(model: Model, rw: Rewriter, applied: dict[str, int]) -> Model:
    # the model's fields but its graph, and the graph's but its nodes and initializers: the
    # weights are copied once, only those still read
    proto = onnx.ModelProto()
    _copy_fields(model.proto, proto, frozenset({"graph"}))
    source = model.proto.graph
    graph = proto.graph
    _copy_fields(source, graph, frozenset({"node", "initializer"}))
    live = list(rw.live())
    graph.node.extend(live)
    read = {i for n in live for i in node_reads(n)} | {o.name for o in graph.output}
    for nodes in rw.unfused.values():
        read |= {i for n in nodes for i in node_reads(n)}
    was_initializer = {t.name for t in source.initializer}
    graph.initializer.extend(t for t in source.initializer if t.name in read)
    graph.initializer.extend(t for name, t in rw.initializers.items() if name in read)
    inputs = [vi for vi in graph.input if vi.name in read or vi.name not in was_initializer]
    del graph.input[:]
    graph.input.extend(inputs)
    produced = {o for n in live for o in n.output if o}
    value_info = [vi for vi in graph.value_info if vi.name in produced]
    # the types loading inferred, for every value that survives: onnx cannot infer through the
    # com.microsoft ops fusions make, and would lose every shape after them
    declared = {vi.name for vi in value_info} | {o.name for o in graph.output}
    for name in sorted(produced - declared):
        view = model.graph.values.get(name)
        if view is not None and view.kind == "tensor" and view.dtype is not None:
            value_info.append(helper.make_tensor_value_info(name, view.dtype.code, view.shape))
    del graph.value_info[:]
    graph.value_info.extend(value_info)
    if any(_domain(n) == MS_DOMAIN for n in live) and not any(
            normalize_domain(o.domain) == MS_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    out = Model(proto, path=model.path, base_dir=model.base_dir)
    out.warnings = [*model.warnings, *out.warnings]
    out.optimizations = applied
    out.unfused = rw.unfused
    out.merged = {**model.merged, **rw.merged}
    return out


def resolve_node(model: Model, name: str) -> tuple[str | None, str]:
    """The node of ``model`` doing the work of node ``name`` of the model as written, and a
    note saying what became of it (``""`` when the node is there as written); ``None`` when it
    was folded into a constant."""
    seen = [name]
    target: str | None = name
    while target is not None and target in model.merged:
        target = model.merged[target]
        if target in seen:
            break
        seen.append(target)
    if target == name:
        return name, ""
    if target is None:
        return None, (f"node {name!r} was folded into a constant by the graph optimizations "
                      "(--no-optimize shows the model as written)")
    return target, (f"node {name!r} is part of {target!r} after the graph optimizations "
                    "(--no-optimize shows the model as written)")


__all__ = ["DEFAULT_PASSES", "PASSES", "optimize", "resolve_node", "resolve_passes"]
