"""Fusion passes of the graph optimizations: a group of nodes becomes one op (FusedConv, Gelu,
QuickGelu, LayerNormalization, SkipLayerNormalization, BiasGelu, Gemm, and ep-host's own
WeightedMedian) that remembers the nodes it replaced, so they can be placed instead when no
provider claims it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, helper

from ep_host.graph import DEFAULT_DOMAIN
from ep_host.ml_types import ML_DOMAIN
from ep_host.rewriter import (
    HOST_DOMAIN,
    MS_DOMAIN,
    Rewriter,
    copy_node,
    is_op,
    matches,
    node_attribute,
    other_input,
)


def _fuse(rw: Rewriter, nodes: Sequence[NodeProto], fused: NodeProto,
          at: NodeProto | None = None) -> None:
    """``fused`` does the work of ``nodes`` (in graph order): it takes the place of ``at``
    (default the last, which writes its output), the others go, and the originals are kept to
    place instead if nobody claims it."""
    at = nodes[-1] if at is None else at
    rw.unfused[fused.name] = [copy_node(n) for n in nodes]
    rw.replace(at, fused)
    for n in nodes:
        if n is not at:
            rw.remove(n, into=fused.name)


def _scalar(rw: Rewriter, name: str) -> float | None:
    value = rw.const(name)
    if value is None or value.size != 1 or value.dtype.kind != "f":
        return None
    return float(value.reshape(()))


def _close(value: float | None, target: float) -> bool:
    return value is not None and abs(value - target) <= 1e-6 * abs(target)


# -- Conv + Relu -----------------------------------------------------------------------------------


def conv_activation_fusion(rw: Rewriter) -> int:
    """A Conv read only by a Relu, a Clip with both bounds given as constants (MobileNet's
    ReLU6), a HardSigmoid or a HardSwish (MobileNetV3's) becomes a FusedConv with that
    activation (a HardSigmoid's alpha and beta its ``activation_params``, as onnxruntime's);
    a Conv read only by an Add of a value of its own shape and type, read only by a Relu (a
    ResNet block's end), becomes a FusedConv with that value as its residual input Z."""
    fused = 0
    for conv in rw.live():
        if not is_op(conv, "Conv") or rw.dtype(conv.output[0]) not in (np.float32, np.float64):
            continue
        act = rw.only_consumer(conv.output[0])
        residual = _residual_relu(rw, conv, act)
        if residual is not None:
            add, relu, z = residual
            name = rw.fresh(f"{conv.name}::FusedConv")
            inputs = list(conv.input) + [""] * (3 - len(conv.input)) + [z]
            _fuse(rw, [conv, add, relu], _fused_conv(name, inputs, relu.output[0], "Relu", None,
                                                     conv))
            fused += 1
            continue
        if is_op(act, "Relu"):
            params = None
        elif is_op(act, "Clip"):
            params = _clip_bounds(rw, act)
            if params is None:
                continue
        elif is_op(act, "HardSigmoid"):
            params = [float(node_attribute(act, "alpha", 0.2)),
                      float(node_attribute(act, "beta", 0.5))]
        elif is_op(act, "HardSwish"):
            params = None
        else:
            continue
        name = rw.fresh(f"{conv.name}::FusedConv")
        _fuse(rw, [conv, act], _fused_conv(name, conv.input, act.output[0], act.op_type, params,
                                           conv))
        fused += 1
    return fused


def _fused_conv(name: str, inputs: Sequence[str], output: str, activation: str,
                params: list[float] | None, conv: NodeProto) -> NodeProto:
    """The FusedConv node: ``conv``'s attributes, the activation's name and parameters (made
    directly: onnx.helper's make_node and make_attribute took 8 us of a fusion's 50)."""
    node = NodeProto(op_type="FusedConv", domain=MS_DOMAIN, name=name, input=inputs,
                     output=[output])
    node.attribute.add(name="activation", type=AttributeProto.STRING, s=activation.encode())
    if params is not None:
        node.attribute.add(name="activation_params", type=AttributeProto.FLOATS, floats=params)
    node.attribute.extend(conv.attribute)
    return node


def _residual_relu(rw: Rewriter, conv: NodeProto,
                   add: NodeProto | None) -> tuple[NodeProto, NodeProto, str] | None:
    """``(add, relu, z)`` where ``add`` adds ``z``, a value of the Conv output's static shape and
    type, to the Conv's output and only a Relu reads the sum; else ``None``."""
    if not is_op(add, "Add"):
        return None
    y = conv.output[0]
    z = other_input(add, y)
    relu = rw.only_consumer(add.output[0])
    if z is None or not z or not is_op(relu, "Relu"):
        return None
    shape = rw.shape(y)
    if shape is None or rw.shape(z) != shape or not all(isinstance(d, int) for d in shape):
        return None
    return (add, relu, z) if rw.dtype(z) == rw.dtype(y) else None


def _clip_bounds(rw: Rewriter, clip: NodeProto) -> list[float] | None:
    """A Clip's (min, max) when both are given: as scalar constant inputs (version 11 on) or as
    attributes (before); else None (a missing bound's default differs between versions)."""
    if len(clip.input) == 3 and all(clip.input[1:]):
        bounds = [_scalar(rw, name) for name in clip.input[1:]]
    else:
        bounds = [node_attribute(clip, "min"), node_attribute(clip, "max")]
    return None if any(b is None for b in bounds) else [float(b) for b in bounds]


# Not fused: an inference BatchNormalization read only by a Relu (DenseNet-121's 62 pre-activations,
# which no Conv before them absorbs) as a FusedConv of one 1x1 filter per channel, computed by one
# compiled multiply-add-clamp pass, into the input's own buffer where the host hands it over (as
# onnxruntime's NCHWc layout turns them into a Conv). Measured one thread on the Sapphire Rapids
# VM: the two nodes' share of a traced run went from 11.2 to 9.3 ms, but whole runs were no faster
# (114.8 against 113.6 ms, interleaved, 25 runs each): the passes are bound by memory that the
# Concat before them has just written, and the next Conv reads it again either way.


# -- GELU ------------------------------------------------------------------------------------------


SQRT2 = math.sqrt(2.0)


TANH_GELU_SCALE = math.sqrt(2.0 / math.pi)
TANH_GELU_CUBE = 0.044715


def gelu_fusion(rw: Rewriter) -> int:
    """``0.5 * x * (1 + erf(x / sqrt(2)))`` in its exported orders -> ``com.microsoft::Gelu``;
    GPT-2's ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))`` (the cube as Pow
    or as two Muls) -> ``com.microsoft::FastGelu``."""
    fused = 0
    for op, matcher, fused_op in (("Erf", _match_gelu, "Gelu"),
                                  ("Tanh", _match_tanh_gelu, "FastGelu")):
        for x, nodes, out in matches(rw, op, matcher):
            name = rw.fresh(f"{nodes[-1].name}::{fused_op}")
            _fuse(rw, nodes, helper.make_node(fused_op, [x], [out], name=name, domain=MS_DOMAIN))
            fused += 1
    return fused


def _only_read_by(rw: Rewriter, name: str, reader: NodeProto) -> NodeProto | None:
    """The producer of ``name`` when ``reader`` is its only consumer, else ``None``."""
    node = rw.producer.get(name)
    return node if node is not None and rw.only_consumer(name) is reader else None


def _scaled_by(rw: Rewriter, node: NodeProto | None, factor: float) -> str | None:
    """The other operand of ``node`` when it is a Mul by the scalar ``factor``, else ``None``."""
    if not is_op(node, "Mul"):
        return None
    return next((a for a in node.input
                 if _close(_scalar(rw, other_input(node, a) or ""), factor)), None)


def _cube_of(rw: Rewriter, name: str, reader: NodeProto) -> tuple[str, list[NodeProto]] | None:
    """``(x, nodes)`` when ``name`` is x ** 3 (a Pow by 3, or x * x * x in either order) read
    only by ``reader``."""
    node = _only_read_by(rw, name, reader)
    if is_op(node, "Pow") and _close(_scalar(rw, node.input[1]), 3.0):
        return node.input[0], [node]
    if not is_op(node, "Mul"):
        return None
    for square_name in node.input:
        square = _only_read_by(rw, square_name, node)
        x = other_input(node, square_name)
        if is_op(square, "Mul") and list(square.input) == [x, x]:
            return x, [square, node]
    return None


def _match_tanh_gelu(rw: Rewriter, tanh: NodeProto) -> tuple[str, list[NodeProto], str] | None:
    scaled = _only_read_by(rw, tanh.input[0], tanh)
    inner_name = _scaled_by(rw, scaled, TANH_GELU_SCALE)
    inner = _only_read_by(rw, inner_name or "", scaled)
    if not is_op(inner, "Add"):
        return None
    found = None
    for term_name in inner.input:
        term = _only_read_by(rw, term_name, inner)
        cube_name = _scaled_by(rw, term, TANH_GELU_CUBE)
        cube = _cube_of(rw, cube_name, term) if cube_name else None
        if cube is not None and cube[0] == other_input(inner, term_name):
            found = cube[0], [*cube[1], term]
    if found is None:
        return None
    x, head = found
    plus = rw.only_consumer(tanh.output[0])
    if not is_op(plus, "Add") or not _close(
            _scalar(rw, other_input(plus, tanh.output[0]) or ""), 1.0):
        return None
    mul = rw.only_consumer(plus.output[0])
    if not is_op(mul, "Mul"):
        return None
    body = [*head, inner, scaled, tanh, plus, mul]
    partner = other_input(mul, plus.output[0])
    if partner == x:  # (x * (1 + tanh)) * 0.5
        half = rw.only_consumer(mul.output[0])
        if _scaled_by(rw, half, 0.5) != mul.output[0]:
            return None
        return x, [*body, half], half.output[0]
    half = rw.producer.get(partner or "")
    if rw.only_consumer(partner or "") is mul and _scaled_by(rw, half, 0.5) == x:
        return x, [half, *body], mul.output[0]  # (0.5 * x) * (1 + tanh)
    return None


def _match_gelu(rw: Rewriter, erf: NodeProto) -> tuple[str, list[NodeProto], str] | None:
    scaled = rw.producer.get(erf.input[0])
    if scaled is None or rw.only_consumer(scaled.output[0]) is not erf:
        return None
    if is_op(scaled, "Div") and _close(_scalar(rw, scaled.input[1]), SQRT2):
        x = scaled.input[0]
    elif is_op(scaled, "Mul"):
        x = next((a for a in scaled.input
                  if _close(_scalar(rw, other_input(scaled, a) or ""), 1 / SQRT2)), None)
        if x is None:
            return None
    else:
        return None
    plus = rw.only_consumer(erf.output[0])
    if not is_op(plus, "Add") or not _close(
            _scalar(rw, other_input(plus, erf.output[0]) or ""), 1.0):
        return None
    mul = rw.only_consumer(plus.output[0])
    if not is_op(mul, "Mul"):
        return None
    partner = other_input(mul, plus.output[0])
    if partner == x:  # (x * (1 + erf)) * 0.5
        half = rw.only_consumer(mul.output[0])
        if not is_op(half, "Mul") or not _close(_scalar(rw, other_input(half, mul.output[0]) or ""),
                                              0.5):
            return None
        return x, [scaled, erf, plus, mul, half], half.output[0]
    half = rw.producer.get(partner or "")
    if (is_op(half, "Mul") and rw.only_consumer(half.output[0]) is mul and x in half.input
            and _close(_scalar(rw, other_input(half, x) or ""), 0.5)):  # (0.5 * x) * (1 + erf)
        return x, [half, scaled, erf, plus, mul], mul.output[0]
    return None


# -- SiLU ------------------------------------------------------------------------------------------


def silu_fusion(rw: Rewriter) -> int:
    """``x * sigmoid(x)`` (SiLU, Swish: a Sigmoid read only by a Mul of its own input) ->
    ``com.microsoft::QuickGelu`` with alpha 1, one pass instead of two."""
    fused = 0
    for sigmoid, mul in matches(rw, "Sigmoid", _match_silu):
        name = rw.fresh(f"{mul.name}::QuickGelu")
        _fuse(rw, [sigmoid, mul], helper.make_node("QuickGelu", [sigmoid.input[0]],
                                                   [mul.output[0]], name=name, domain=MS_DOMAIN,
                                                   alpha=1.0))
        fused += 1
    return fused


def _match_silu(rw: Rewriter, sigmoid: NodeProto) -> tuple[NodeProto, NodeProto] | None:
    x = sigmoid.input[0]
    if rw.dtype(x) not in (np.float16, np.float32):  # QuickGelu's types
        return None
    mul = rw.only_consumer(sigmoid.output[0])
    if not is_op(mul, "Mul") or other_input(mul, sigmoid.output[0]) != x:
        return None
    return sigmoid, mul


# -- LayerNormalization ----------------------------------------------------------------------------


def layer_norm_fusion(rw: Rewriter) -> int:
    if rw.model.opset_imports.get(DEFAULT_DOMAIN, 0) < 17:
        return 0  # ai.onnx LayerNormalization exists from opset 17
    fused = 0
    for x, scale, bias, epsilon, nodes, out in matches(rw, "ReduceMean", _match_layer_norm):
        name = rw.fresh(f"{nodes[-1].name}::LayerNormalization")
        inputs = [x, scale] + ([bias] if bias else [])
        _fuse(rw, nodes, helper.make_node("LayerNormalization", inputs, [out], name=name,
                                          axis=-1, epsilon=epsilon))
        fused += 1
    return fused


def _last_axis_mean(rw: Rewriter, node: NodeProto, x: str) -> bool:
    """``node`` is ReduceMean of ``x`` over its last axis, keeping dims."""
    if (not is_op(node, "ReduceMean") or node.input[0] != x
            or not node_attribute(node, "keepdims", 1)):
        return False
    axes = node_attribute(node, "axes")
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
    if not is_op(sub, "Sub") or list(sub.input) != [x, mean.output[0]]:
        return None
    users = list({id(u): u for u in rw.consumers.get(sub.output[0], [])}.values())
    if len(users) != 2 or sub.output[0] in rw.outputs:
        return None
    div = next((u for u in users if is_op(u, "Div")), None)
    square = next((u for u in users if u is not div), None)
    if square is None or div is None or list(div.input)[0] != sub.output[0]:
        return None
    if is_op(square, "Pow"):
        if not _close(_scalar(rw, square.input[1]), 2.0):
            return None
    elif not is_op(square, "Mul") or list(square.input) != [sub.output[0], sub.output[0]]:
        return None
    var = rw.only_consumer(square.output[0])
    if var is None or not _last_axis_mean(rw, var, square.output[0]):
        return None
    add_eps = rw.only_consumer(var.output[0])
    if not is_op(add_eps, "Add"):
        return None
    epsilon = _scalar(rw, other_input(add_eps, var.output[0]) or "")
    sqrt = rw.only_consumer(add_eps.output[0])
    if epsilon is None or not is_op(sqrt, "Sqrt") or rw.only_consumer(sqrt.output[0]) is not div:
        return None
    if list(div.input) != [sub.output[0], sqrt.output[0]]:
        return None
    mul = rw.only_consumer(div.output[0])
    hidden = rw.shape(x)[-1]
    if not is_op(mul, "Mul"):
        return None
    scale = other_input(mul, div.output[0])
    gamma = rw.const(scale or "")
    if gamma is None or gamma.shape != (hidden,) or gamma.dtype != rw.dtype(x):
        return None
    nodes = [mean, sub, square, var, add_eps, sqrt, div, mul]
    bias, out = "", mul.output[0]
    plus = rw.only_consumer(mul.output[0])
    if is_op(plus, "Add"):
        candidate = other_input(plus, mul.output[0])
        beta = rw.const(candidate or "")
        if beta is not None and beta.shape == (hidden,) and beta.dtype == gamma.dtype:
            bias, out = candidate, plus.output[0]
            nodes.append(plus)
    return x, scale, bias, epsilon, nodes, out


# -- Add, Add, LayerNormalization -> SkipLayerNormalization ---------------------------------------


def skip_layer_norm_fusion(rw: Rewriter) -> int:
    """A float32 LayerNormalization over the last axis (constant scale and bias of that dim,
    only its output read) of an Add of two values of its input's static shape (a residual)
    -> ``com.microsoft::SkipLayerNormalization``; where one of them is an Add of a constant
    bias of that dim read only there (a MatMul's bias), that Add too, as the op's bias. Where
    something else reads the residual sum (a pre-norm block's next residual), the op writes it
    as its fourth output."""
    fused = 0
    for adds, x, skip, bias, norm in matches(rw, "LayerNormalization", _match_skip_norm):
        residual = adds[-1]
        out_sum = residual.output[0]
        keep_sum = out_sum in rw.outputs or any(
            u is not norm for u in rw.consumers.get(out_sum, []))
        inputs = [x, skip, norm.input[1], norm.input[2] if len(norm.input) > 2 else ""]
        if bias:
            inputs.append(bias)
        while inputs[-1] == "":
            inputs.pop()
        outputs = [norm.output[0]] + (["", "", out_sum] if keep_sum else [])
        name = rw.fresh(f"{norm.name}::SkipLayerNormalization")
        node = helper.make_node("SkipLayerNormalization", inputs, outputs, name=name,
                                domain=MS_DOMAIN,
                                epsilon=float(node_attribute(norm, "epsilon", 1e-5)))
        # in the residual Add's place: a reader of the sum may come before the norm
        _fuse(rw, [*adds, norm], node, at=residual)
        fused += 1
    return fused


def _hidden_constant(rw: Rewriter, name: str, hidden: int) -> bool:
    value = rw.const(name) if name else None
    return value is not None and value.dtype == np.float32 and value.shape == (hidden,)


def _match_skip_norm(rw: Rewriter, norm: NodeProto) -> tuple[Any, ...] | None:
    x = norm.input[0]
    shape = rw.shape(x)
    if (rw.dtype(x) != np.float32 or shape is None or len(shape) not in (2, 3)
            or not all(isinstance(d, int) and d > 0 for d in shape)):
        return None
    if (node_attribute(norm, "axis", -1) not in (-1, len(shape) - 1)
            or node_attribute(norm, "stash_type", 1) != 1
            or any(o and (o in rw.outputs or rw.consumers.get(o)) for o in norm.output[1:])):
        return None
    hidden = shape[-1]
    if not _hidden_constant(rw, norm.input[1], hidden) or (
            len(norm.input) > 2 and norm.input[2]
            and not _hidden_constant(rw, norm.input[2], hidden)):
        return None
    residual = rw.producer.get(x)
    if not is_op(residual, "Add") or len(residual.input) != 2:
        return None
    a, b = residual.input
    if any(rw.shape(v) != shape or rw.dtype(v) != np.float32 for v in (a, b)):
        return None
    for term, skip in ((a, b), (b, a)):
        add = _only_read_by(rw, term, residual)
        if is_op(add, "Add") and term != skip:
            bias = next((v for v in add.input if _hidden_constant(rw, v, hidden)), None)
            t = other_input(add, bias) if bias else None
            if t and rw.shape(t) == shape and rw.dtype(t) == np.float32 and t != bias:
                return [add, residual], t, skip, bias, norm
    return [residual], a, b, "", norm


# -- Add + Gelu -> BiasGelu ------------------------------------------------------------------------


def bias_gelu_fusion(rw: Rewriter) -> int:
    """An Add of a constant float32 bias of its other input's last dim (static), read only by
    an erf Gelu (``com.microsoft::Gelu``, as gelu_fusion writes it, or ai.onnx Gelu with
    approximate none) -> ``com.microsoft::BiasGelu``."""
    fused = 0
    for node in rw.live():
        if not (is_op(node, "Gelu", MS_DOMAIN)
                or (is_op(node, "Gelu") and node_attribute(node, "approximate", "none")
                    in ("none", b"none"))):
            continue
        add = _only_read_by(rw, node.input[0], node)
        if not is_op(add, "Add") or len(add.input) != 2:
            continue
        x_name, bias_name = add.input
        if not rw.is_const(bias_name):
            x_name, bias_name = bias_name, x_name
        shape = rw.shape(x_name)
        if (shape is None or not shape or not all(isinstance(d, int) and d > 0 for d in shape)
                or rw.dtype(x_name) != np.float32 or rw.is_const(x_name)
                or not _hidden_constant(rw, bias_name, shape[-1])):
            continue
        name = rw.fresh(f"{node.name}::BiasGelu")
        _fuse(rw, [add, node], helper.make_node("BiasGelu", [x_name, bias_name],
                                                [node.output[0]], name=name, domain=MS_DOMAIN))
        fused += 1
    return fused


# -- MatMul + Add ----------------------------------------------------------------------------------


def matmul_add_fusion(rw: Rewriter) -> int:
    fused = 0
    for mm in rw.live():
        if not is_op(mm, "MatMul") or len(mm.input) != 2:
            continue
        a_shape = rw.shape(mm.input[0])
        add = rw.only_consumer(mm.output[0])
        if a_shape is None or len(a_shape) != 2 or not is_op(add, "Add"):
            continue
        b = rw.const(mm.input[1])
        if b is None or b.ndim != 2:
            continue
        if b.dtype not in (np.float32, np.float64) or rw.dtype(mm.input[0]) != b.dtype:
            continue
        bias_name = other_input(add, mm.output[0])
        bias = rw.const(bias_name or "")
        n = b.shape[1]
        if bias is None or bias.dtype != b.dtype or bias.shape not in ((n,), (1, n)):
            continue
        name = rw.fresh(f"{add.name}::Gemm")
        _fuse(rw, [mm, add], helper.make_node("Gemm", [mm.input[0], mm.input[1], bias_name],
                                              [add.output[0]], name=name))
        fused += 1
    return fused


# -- AdaBoostRegressor's weighted median -----------------------------------------------------------

# Cast types whose 1 and 0 keep Less's True above its False, for the ArgMin that reads them
ORDERED_CASTS = frozenset({TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16,
                           TensorProto.INT8, TensorProto.INT16, TensorProto.INT32,
                           TensorProto.INT64, TensorProto.UINT8, TensorProto.UINT16,
                           TensorProto.UINT32, TensorProto.UINT64})


def weighted_median_fusion(rw: Rewriter) -> int:
    """skl2onnx's AdaBoostRegressor picks its estimators' weighted median in ten nodes: TopK of
    the (negated) predictions [N, k] over all k columns, ArrayFeatureExtractor of the constant
    weights at the order, Reshape to [-1, k], CumSum over the columns, ArrayFeatureExtractor of
    the last sum, Mul by a constant half, Less(sums, that), Cast, ArgMin (kept) and two
    GatherElements (the order at that column, the prediction at that order). In a run of small
    kernels each costs several microseconds; they become one ep-host WeightedMedian, which does
    the same steps in the same types (an export of 10 estimators, 7 rows: 85 -> 43 us a run)."""
    fused = 0
    for nodes, inputs, k, largest in matches(rw, "TopK", _weighted_median):
        last = nodes[-1]
        name = rw.fresh(f"{last.name}::WeightedMedian")
        _fuse(rw, nodes, helper.make_node("WeightedMedian", inputs, [last.output[0]], name=name,
                                          domain=HOST_DOMAIN, k=k, largest=largest))
        fused += 1
    return fused


def _axis_1(node: NodeProto, name: str = "axis", default: int = -1) -> bool:
    return node_attribute(node, name, default) in (1, -1)


def _reader(rw: Rewriter, name: str, op_type: str, at: int = 0) -> NodeProto | None:
    """The one node reading ``name``, where it is the ai.onnx ``op_type`` reading it as input
    ``at``."""
    node = rw.only_consumer(name)
    if node is None or not is_op(node, op_type) or node.input[at:at + 1] != [name]:
        return None
    return node


def _one_int(rw: Rewriter, name: str) -> int | None:
    """The one integer constant ``name`` holds (a scalar or [1])."""
    value = rw.const(name)
    if value is None or value.size != 1 or value.ndim > 1 or value.dtype.kind not in "iu":
        return None
    return int(value.reshape(()))


def _weighted_median(rw: Rewriter, topk: NodeProto) -> tuple[list[NodeProto], list[str], int,
                                                               int] | None:
    """``(nodes in graph order, WeightedMedian's inputs, k, largest)`` of the weighted median
    that starts at ``topk``; ``None`` where anything differs from the pattern."""
    keys = topk.input[0]
    shape, dtype = rw.shape(keys), rw.dtype(keys)
    if shape is None or len(shape) != 2 or not isinstance(shape[1], int) or dtype not in (
            np.float32, np.float64) or not _axis_1(topk) or node_attribute(topk, "sorted", 1) != 1:
        return None
    k = (node_attribute(topk, "k") if (rw.opset(topk) or 1) < 10
         else _one_int(rw, topk.input[1]) if len(topk.input) > 1 else None)
    if k is None or k != shape[1] or k < 1 or len(topk.output) < 2:
        return None
    order = topk.output[1]
    if (topk.output[0] and (rw.consumers.get(topk.output[0]) or topk.output[0] in rw.outputs)
            or order in rw.outputs or len(rw.consumers.get(order, ())) != 2):
        return None
    extract = next((n for n in rw.consumers[order]
                    if is_op(n, "ArrayFeatureExtractor", ML_DOMAIN)), None)
    if extract is None or extract.input[1] != order:
        return None
    weights = rw.const(extract.input[0])
    reshape = _reader(rw, extract.output[0], "Reshape")
    target = rw.const(reshape.input[1]) if reshape is not None else None
    if (weights is None or weights.dtype != dtype or weights.shape != (k,) or target is None
            or [int(d) for d in target.reshape(-1)] != [-1, k]):
        return None
    cumsum = _reader(rw, reshape.output[0], "CumSum")
    axis = _one_int(rw, cumsum.input[1]) if cumsum is not None and len(cumsum.input) > 1 else 0
    if (axis not in (1, -1) or node_attribute(cumsum, "exclusive", 0)
            or node_attribute(cumsum, "reverse", 0)):
        return None
    sums = cumsum.output[0]
    readers = rw.consumers.get(sums, [])
    last = next((n for n in readers if is_op(n, "ArrayFeatureExtractor", ML_DOMAIN)), None)
    less = next((n for n in readers if is_op(n, "Less")), None)
    if (len(readers) != 2 or sums in rw.outputs or last is None or less is None
            or last.input[0] != sums or less.input[0] != sums):
        return None
    index = _one_int(rw, last.input[1]) if len(last.input) > 1 else None
    mul = _reader(rw, last.output[0], "Mul")
    half = other_input(mul, last.output[0]) if mul is not None and len(mul.input) == 2 else None
    half_value = rw.const(half) if half else None
    if (index != k - 1 or half_value is None or half_value.size != 1 or half_value.ndim > 2
            or half_value.dtype != dtype
            or _reader(rw, mul.output[0], "Less", at=1) is not less):
        return None
    cast = _reader(rw, less.output[0], "Cast")
    argmin = _reader(rw, cast.output[0], "ArgMin") if cast is not None else None
    if (argmin is None or node_attribute(cast, "to") not in ORDERED_CASTS
            or not _axis_1(argmin, default=0) or node_attribute(argmin, "keepdims", 1) != 1
            or node_attribute(argmin, "select_last_index", 0)):
        return None
    gather = _reader(rw, argmin.output[0], "GatherElements", at=1)
    if gather is None or gather.input[0] != order or not _axis_1(gather, default=0):
        return None
    pick = _reader(rw, gather.output[0], "GatherElements", at=1)
    if pick is None or not _axis_1(pick, default=0):
        return None
    scores = pick.input[0]
    found = rw.shape(scores)  # the same [N, k] as the keys: the kernel checks the rows
    if found is None or len(found) != 2 or found[1] != k or rw.dtype(scores) != dtype:
        return None
    nodes = [topk, extract, reshape, cumsum, last, mul, less, cast, argmin, gather, pick]
    nodes.sort(key=lambda n: rw.position[id(n)])
    if nodes[-1] is not pick:
        return None
    largest = int(node_attribute(topk, "largest", 1))
    return nodes, [keys, scores, extract.input[0], half], k, largest
