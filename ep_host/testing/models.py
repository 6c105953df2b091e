"""Models built with onnx.helper for tests and benchmarks: a BERT-style encoder, and the onnx
package's light CNN graphs with random weights in place of their constant fills."""

from __future__ import annotations

import math
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LIGHT_MODELS = ("bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
                "shufflenet", "squeezenet", "vgg19", "zfnet512")


def light_model_path(name: str) -> str:
    folder = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    return os.path.join(folder, f"light_{name}.onnx")


def light_expected_output(name: str) -> np.ndarray:
    tensor = onnx.TensorProto()
    with open(light_model_path(name)[: -len(".onnx")] + "_output_0.pb", "rb") as f:
        tensor.ParseFromString(f.read())
    return numpy_helper.to_array(tensor)


def dummy_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """onnx's backend runner's inputs for the light models: ``arange(N) / N`` in each shape."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                      for d in vi.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        feeds[vi.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """A copy whose ``ConstantOfShape`` weight fills become random initializers.

    Scales keep activations in range: He-style for 4-D conv and 2-D gemm weights, small
    positive values for batch-norm variances and scales.
    """
    rng = np.random.default_rng(seed)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    keep, new_inits = [], []
    replaced = set()
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            name = node.output[0]
            new_inits.append(numpy_helper.from_array(_random_weight(rng, name, shape), name))
            replaced.add(node.input[0])
        else:
            keep.append(node)
    del graph.node[:]
    graph.node.extend(keep)
    still_used = {i for n in keep for i in n.input}
    survivors = [t for t in graph.initializer if t.name not in replaced or t.name in still_used]
    bn = [n for n in keep if n.op_type == "BatchNormalization"]
    ranges = {n.input[1]: (0.3, 0.6) for n in bn}  # scales under 1 keep residual sums in range
    ranges.update({n.input[4]: (0.5, 1.5) for n in bn})  # variances must be positive
    survivors = [_uniform(t, rng, ranges[t.name]) if t.name in ranges else t for t in survivors]
    new_inits = [_uniform(t, rng, ranges[t.name]) if t.name in ranges else t for t in new_inits]
    del graph.initializer[:]
    graph.initializer.extend(survivors + new_inits)
    inputs = [vi for vi in graph.input if vi.name not in replaced or vi.name in still_used]
    del graph.input[:]
    graph.input.extend(inputs)
    model.ir_version = max(model.ir_version, 8)  # initializers need not be graph inputs
    outputs = {o.name for o in graph.output}
    for node in keep:  # expose the logits: a saturated softmax alone would hide differences
        if node.op_type == "Softmax" and node.input[0] not in outputs:
            graph.output.append(helper.make_empty_tensor_value_info(node.input[0]))
    return model


def random_inputs(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    """Random values for every graph input: images in [0, 1), weight-like inputs (some light
    models take batch-norm scales as inputs) scaled as :func:`with_random_weights` does."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, value in dummy_inputs(model).items():
        if value.ndim == 4 and value.shape[1] == 3:
            feeds[name] = rng.random(value.shape, dtype=np.float32)
        else:
            feeds[name] = _random_weight(rng, name, value.shape)
    return feeds


def _uniform(tensor: onnx.TensorProto, rng: np.random.Generator, bounds: tuple[float, float]
             ) -> onnx.TensorProto:
    """A batch-norm parameter drawn afresh: some light models ship negative variances and
    scales that blow activations up to 1e4."""
    values = rng.uniform(*bounds, tuple(tensor.dims)).astype(np.float32)
    return numpy_helper.from_array(values, tensor.name)


def _random_weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    lowered = name.lower()
    if len(shape) == 4:
        fan_in = shape[1] * shape[2] * shape[3]
        return (rng.standard_normal(shape) * math.sqrt(2.0 / fan_in)).astype(np.float32)
    if len(shape) == 2:
        return (rng.standard_normal(shape) * math.sqrt(1.0 / shape[1])).astype(np.float32)
    if any(k in lowered for k in ("var", "_s_", "scale", "bn_s")):
        return rng.uniform(0.5, 1.5, shape).astype(np.float32)
    return (rng.standard_normal(shape) * 0.1).astype(np.float32)


# ---------------------------------------------------------------------------------------------
# A BERT-style encoder, written out as an exporter writes it
# ---------------------------------------------------------------------------------------------


class _Builder:
    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def const(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, shape: tuple[int, ...], scale: float, prefix: str) -> str:
        return self.const((self.rng.standard_normal(shape) * scale).astype(np.float32), prefix)

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def linear(self, x: str, d_in: int, d_out: int, prefix: str) -> str:
        w = self.weight((d_in, d_out), 1.0 / math.sqrt(d_in), f"{prefix}_w")
        b = self.weight((d_out,), 0.02, f"{prefix}_b")
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str, hidden: int, prefix: str) -> str:
        scale = self.const((1 + 0.1 * self.rng.standard_normal(hidden)).astype(np.float32),
                           f"{prefix}_g")
        bias = self.weight((hidden,), 0.02, f"{prefix}_b")
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=1e-12)

    def gelu(self, x: str) -> str:
        scaled = self.op("Div", [x, self.const(np.array(math.sqrt(2.0), np.float32))])
        erf = self.op("Erf", [scaled])
        one_plus = self.op("Add", [erf, self.const(np.array(1.0, np.float32))])
        half = self.op("Mul", [x, self.const(np.array(0.5, np.float32))])
        return self.op("Mul", [half, one_plus])

    def split_heads(self, x: str, heads: int, head_dim: int) -> str:
        """[b, s, h*d] -> [b, h, s, d], the target shape computed from Shape at run time."""
        shape = self.op("Shape", [x])
        batch = self.op("Gather", [shape, self.const(np.array(0, np.int64))], axis=0)
        seq = self.op("Gather", [shape, self.const(np.array(1, np.int64))], axis=0)
        axes = self.const(np.array([0], np.int64))
        target = self.op("Concat", [self.op("Unsqueeze", [batch, axes]),
                                    self.op("Unsqueeze", [seq, axes]),
                                    self.const(np.array([heads, head_dim], np.int64))], axis=0)
        return self.op("Transpose", [self.op("Reshape", [x, target])], perm=[0, 2, 1, 3])


def bert_encoder(
    layers: int = 12, hidden: int = 768, heads: int = 12, seq: int = 128, batch: int = 1,
    intermediate: int | None = None, seed: int = 0,
) -> onnx.ModelProto:
    """A BERT-base-like encoder (opset 17): input ``hidden_states`` float32 [batch, seq, hidden]
    and an additive ``attention_mask`` float32 [batch, 1, 1, seq]; output ``last_hidden``."""
    intermediate = intermediate or 4 * hidden
    head_dim = hidden // heads
    b = _Builder(np.random.default_rng(seed))
    x = "hidden_states"
    inv_sqrt = b.const(np.array(math.sqrt(head_dim), np.float32))
    merged = b.const(np.array([batch, seq, hidden], np.int64))
    for layer in range(layers):
        p = f"l{layer}"
        q = b.split_heads(b.linear(x, hidden, hidden, f"{p}_q"), heads, head_dim)
        k = b.split_heads(b.linear(x, hidden, hidden, f"{p}_k"), heads, head_dim)
        v = b.split_heads(b.linear(x, hidden, hidden, f"{p}_v"), heads, head_dim)
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.op("Add", [b.op("Div", [b.op("MatMul", [q, kt]), inv_sqrt]), "attention_mask"])
        probs = b.op("Softmax", [scores], axis=-1)
        context = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = b.op("Reshape", [context, merged])
        attn = b.linear(context, hidden, hidden, f"{p}_o")
        x = b.layer_norm(b.op("Add", [attn, x]), hidden, f"{p}_ln1")
        ff = b.linear(b.gelu(b.linear(x, hidden, intermediate, f"{p}_ff1")), intermediate,
                      hidden, f"{p}_ff2")
        x = b.layer_norm(b.op("Add", [ff, x]), hidden, f"{p}_ln2")
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden"], name="output"))
    graph = helper.make_graph(
        b.nodes, "bert_encoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [batch, seq, hidden]),
         helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [batch, 1, 1, seq])],
        [helper.make_tensor_value_info("last_hidden", TensorProto.FLOAT, [batch, seq, hidden])],
        initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def bert_inputs(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    mask = np.zeros((dims[0], 1, 1, dims[1]), np.float32)
    mask[..., dims[1] - dims[1] // 8:] = -10000.0  # the last eighth is padding
    return {"hidden_states": rng.standard_normal(dims).astype(np.float32),
            "attention_mask": mask}


def gpt2_decoder(
    layers: int = 12, hidden: int = 768, heads: int = 12, seq: int = 128, batch: int = 1,
    seed: int = 2,
) -> onnx.ModelProto:
    """A GPT-2-like decoder (opset 17): pre-LayerNorm blocks, causal self-attention (the mask
    is a constant), the tanh-approximated GELU, a final LayerNorm; no embedding or LM head.
    Input ``hidden_states`` float32 [batch, seq, hidden]; output ``last_hidden``."""
    head_dim = hidden // heads
    b = _Builder(np.random.default_rng(seed))
    x = "hidden_states"
    inv_sqrt = b.const(np.array(math.sqrt(head_dim), np.float32))
    merged = b.const(np.array([batch, seq, hidden], np.int64))
    causal = b.const(np.triu(np.full((1, 1, seq, seq), -10000.0, np.float32), 1), "causal")
    for layer in range(layers):
        p = f"l{layer}"
        h = b.layer_norm(x, hidden, f"{p}_ln1")
        q = b.split_heads(b.linear(h, hidden, hidden, f"{p}_q"), heads, head_dim)
        k = b.split_heads(b.linear(h, hidden, hidden, f"{p}_k"), heads, head_dim)
        v = b.split_heads(b.linear(h, hidden, hidden, f"{p}_v"), heads, head_dim)
        kt = b.op("Transpose", [k], perm=[0, 1, 3, 2])
        scores = b.op("Add", [b.op("Div", [b.op("MatMul", [q, kt]), inv_sqrt]), causal])
        probs = b.op("Softmax", [scores], axis=-1)
        context = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = b.op("Reshape", [context, merged])
        x = b.op("Add", [x, b.linear(context, hidden, hidden, f"{p}_o")])
        h = b.layer_norm(x, hidden, f"{p}_ln2")
        ff = b.linear(_tanh_gelu(b, b.linear(h, hidden, 4 * hidden, f"{p}_fc")), 4 * hidden,
                      hidden, f"{p}_proj")
        x = b.op("Add", [x, ff])
    x = b.layer_norm(x, hidden, "ln_f")
    b.nodes.append(helper.make_node("Identity", [x], ["last_hidden"], name="output"))
    graph = helper.make_graph(
        b.nodes, "gpt2_decoder",
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, [batch, seq, hidden])],
        [helper.make_tensor_value_info("last_hidden", TensorProto.FLOAT, [batch, seq, hidden])],
        initializer=b.inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _tanh_gelu(b: _Builder, x: str) -> str:
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = b.op("Mul", [b.op("Mul", [x, x]), x])
    inner = b.op("Add", [x, b.op("Mul", [cube, b.const(np.array(0.044715, np.float32))])])
    t = b.op("Tanh", [b.op("Mul", [inner, b.const(np.array(math.sqrt(2 / math.pi),
                                                             np.float32))])])
    one_plus = b.op("Add", [t, b.const(np.array(1.0, np.float32))])
    return b.op("Mul", [b.op("Mul", [x, b.const(np.array(0.5, np.float32))]), one_plus])


def gpt2_inputs(model: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"hidden_states": rng.standard_normal(dims).astype(np.float32)}
