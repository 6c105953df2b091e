"""Build the example models next to this script: a small CNN, a transformer encoder block as an
exporter writes it, and a model with a custom-domain op. Deterministic (fixed seed), opset 17.

Run: ``python examples/build_models.py``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8  # the IR version that shipped with opset 17 (onnx 1.12)
HERE = Path(__file__).resolve().parent
FLOAT = TensorProto.FLOAT


class GraphBuilder:
    """Collects nodes and initializers; every node gets a name, as exporters give them."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def weight(self, name: str, shape: tuple[int, ...], scale: float) -> str:
        data = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        self.initializers.append(numpy_helper.from_array(data, name))
        return name

    def const(self, name: str, value: np.ndarray) -> str:
        """A Constant node, the way exporters write small shape and scalar constants."""
        self.nodes.append(helper.make_node(
            "Constant", [], [name], name=f"{name}/Constant",
            value=numpy_helper.from_array(np.asarray(value), name),
        ))
        return name

    def op(self, op_type: str, inputs: list[str], name: str, domain: str = "", **attrs) -> str:
        self.nodes.append(
            helper.make_node(op_type, inputs, [f"{name}_out"], name=name, domain=domain, **attrs)
        )
        return f"{name}_out"

    def model(self, name, inputs, outputs, opsets=(("", OPSET),), value_info=()) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs,
                                  initializer=self.initializers, value_info=list(value_info))
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid(d, v) for d, v in opsets],
            producer_name="ep-host examples/build_models.py",
        )
        model.ir_version = IR_VERSION
        return model


def build_cnn() -> onnx.ModelProto:
    """image [1,3,32,32] -> (Conv, Relu, MaxPool) x2 -> Flatten -> Gemm -> Softmax [1,10]."""
    g = GraphBuilder(seed=0)
    x = "image"
    channels = 3
    for i, out_channels in enumerate((8, 16), start=1):
        fan_in = channels * 3 * 3
        w = g.weight(f"conv{i}.weight", (out_channels, channels, 3, 3), math.sqrt(2 / fan_in))
        b = g.weight(f"conv{i}.bias", (out_channels,), 0.05)
        x = g.op("Conv", [x, w, b], f"conv{i}/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
        x = g.op("Relu", [x], f"conv{i}/Relu")
        x = g.op("MaxPool", [x], f"conv{i}/MaxPool", kernel_shape=[2, 2], strides=[2, 2])
        channels = out_channels
    x = g.op("Flatten", [x], "flatten/Flatten", axis=1)
    features = channels * 8 * 8
    w = g.weight("fc.weight", (10, features), math.sqrt(1 / features))
    b = g.weight("fc.bias", (10,), 0.05)
    x = g.op("Gemm", [x, w, b], "fc/Gemm", transB=1)
    g.nodes.append(helper.make_node("Softmax", [x], ["probabilities"], name="softmax/Softmax",
                                    axis=-1))
    return g.model(
        "small_cnn",
        [helper.make_tensor_value_info("image", FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("probabilities", FLOAT, [1, 10])],
    )


D_MODEL, HEADS, D_FF = 64, 4, 256
HEAD_DIM = D_MODEL // HEADS


def build_transformer_block() -> onnx.ModelProto:
    """One post-norm encoder block, written the way torch.onnx exports it: the head split's
    target shape is computed at run time from Shape -> Gather -> Unsqueeze -> Concat."""
    g = GraphBuilder(seed=1)
    x = "tokens_embedded"
    scale = 0.05

    def linear(inp: str, name: str, n_in: int, n_out: int) -> str:
        w = g.weight(f"{name}.weight", (n_in, n_out), scale)
        b = g.weight(f"{name}.bias", (n_out,), scale)
        return g.op("Add", [g.op("MatMul", [inp, w], f"{name}/MatMul"), b], f"{name}/Add")

    # Runtime shape: batch and seq as 1-D tensors.
    shape = g.op("Shape", [x], "attn/Shape")
    zero = g.const("attn/const_0", np.array(0, np.int64))
    one = g.const("attn/const_1", np.array(1, np.int64))
    axes0 = g.const("attn/axes_0", np.array([0], np.int64))
    batch = g.op("Unsqueeze", [g.op("Gather", [shape, zero], "attn/Gather_batch", axis=0), axes0],
                 "attn/Unsqueeze_batch")
    seq = g.op("Unsqueeze", [g.op("Gather", [shape, one], "attn/Gather_seq", axis=0), axes0],
               "attn/Unsqueeze_seq")
    heads = g.const("attn/const_heads", np.array([HEADS], np.int64))
    head_dim = g.const("attn/const_head_dim", np.array([HEAD_DIM], np.int64))
    d_model = g.const("attn/const_d_model", np.array([D_MODEL], np.int64))
    split_shape = g.op("Concat", [batch, seq, heads, head_dim], "attn/Concat_split", axis=0)
    merge_shape = g.op("Concat", [batch, seq, d_model], "attn/Concat_merge", axis=0)

    def heads_of(name: str, perm: list[int]) -> str:
        proj = linear(x, f"attn/{name}_proj", D_MODEL, D_MODEL)
        split = g.op("Reshape", [proj, split_shape], f"attn/{name}_proj/Reshape")
        return g.op("Transpose", [split], f"attn/{name}_proj/Transpose", perm=perm)

    q = heads_of("q", [0, 2, 1, 3])  # [batch, heads, seq, head_dim]
    k = heads_of("k", [0, 2, 3, 1])  # [batch, heads, head_dim, seq]
    v = heads_of("v", [0, 2, 1, 3])
    scores = g.op("MatMul", [q, k], "attn/MatMul_scores")
    sqrt_d = g.const("attn/const_sqrt_d", np.array(math.sqrt(HEAD_DIM), np.float32))
    scores = g.op("Div", [scores, sqrt_d], "attn/Div_scale")
    probs = g.op("Softmax", [scores], "attn/Softmax", axis=-1)
    context = g.op("MatMul", [probs, v], "attn/MatMul_context")
    context = g.op("Transpose", [context], "attn/Transpose_merge", perm=[0, 2, 1, 3])
    context = g.op("Reshape", [context, merge_shape], "attn/Reshape_merge")
    attn = linear(context, "attn/out_proj", D_MODEL, D_MODEL)

    def layer_norm(inp: str, name: str) -> str:
        gamma = numpy_helper.from_array(np.ones(D_MODEL, np.float32), f"{name}.weight")
        beta = numpy_helper.from_array(np.zeros(D_MODEL, np.float32), f"{name}.bias")
        g.initializers.extend([gamma, beta])
        return g.op("LayerNormalization", [inp, gamma.name, beta.name],
                    f"{name}/LayerNormalization", axis=-1, epsilon=1e-5)

    h = layer_norm(g.op("Add", [x, attn], "residual1/Add"), "norm1")

    # Feed-forward with Gelu written out: x * 0.5 * (1 + erf(x / sqrt(2))).
    ff = linear(h, "ffn/fc1", D_MODEL, D_FF)
    sqrt2 = g.const("ffn/gelu/const_sqrt2", np.array(math.sqrt(2.0), np.float32))
    one_f = g.const("ffn/gelu/const_1", np.array(1.0, np.float32))
    half = g.const("ffn/gelu/const_0.5", np.array(0.5, np.float32))
    erf = g.op("Erf", [g.op("Div", [ff, sqrt2], "ffn/gelu/Div")], "ffn/gelu/Erf")
    gelu = g.op("Mul", [g.op("Mul", [ff, g.op("Add", [erf, one_f], "ffn/gelu/Add")],
                             "ffn/gelu/Mul"), half], "ffn/gelu/Mul_half")
    ff = linear(gelu, "ffn/fc2", D_FF, D_MODEL)
    out = layer_norm(g.op("Add", [h, ff], "residual2/Add"), "norm2")
    g.nodes.append(helper.make_node("Identity", [out], ["hidden_states"], name="output/Identity"))
    dims = ["batch", "seq", D_MODEL]
    return g.model(
        "transformer_encoder_block",
        [helper.make_tensor_value_info("tokens_embedded", FLOAT, dims)],
        [helper.make_tensor_value_info("hidden_states", FLOAT, dims)],
    )


CUSTOM_DOMAIN = "com.example"
CUSTOM_FEATURES = 32


def build_custom_op() -> onnx.ModelProto:
    """x [batch, 32] -> MatMul -> com.example::FastSwish (x * sigmoid(x)) -> Add -> Relu."""
    g = GraphBuilder(seed=2)
    w = g.weight("dense.weight", (CUSTOM_FEATURES, CUSTOM_FEATURES),
                 math.sqrt(1 / CUSTOM_FEATURES))
    b = g.weight("dense.bias", (CUSTOM_FEATURES,), 0.05)
    h = g.op("MatMul", ["x", w], "dense/MatMul")
    h = g.op("FastSwish", [h], "act/FastSwish", domain=CUSTOM_DOMAIN)
    h = g.op("Add", [h, b], "dense/Add")
    g.nodes.append(helper.make_node("Relu", [h], ["y"], name="out/Relu"))
    dims = ["batch", CUSTOM_FEATURES]
    return g.model(
        "custom_op",
        [helper.make_tensor_value_info("x", FLOAT, dims)],
        [helper.make_tensor_value_info("y", FLOAT, dims)],
        opsets=(("", OPSET), (CUSTOM_DOMAIN, 1)),
        # Shape inference knows no schema for FastSwish; declare its output, as exporters do.
        value_info=[helper.make_tensor_value_info("act/FastSwish_out", FLOAT, dims)],
    )


MODELS = {
    "cnn.onnx": build_cnn,
    "transformer_block.onnx": build_transformer_block,
    "custom_op.onnx": build_custom_op,
}


def main() -> None:
    for filename, build in MODELS.items():
        model = build()
        onnx.checker.check_model(model, full_check=True)
        path = HERE / filename
        onnx.save_model(model, path)
        print(f"wrote {path} ({len(model.graph.node)} nodes, {path.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
