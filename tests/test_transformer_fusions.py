"""skip_layer_norm_fusion and bias_gelu_fusion on a tiny BERT-like block built with onnx.helper:
the residual Adds and LayerNormalization become one SkipLayerNormalization, the FFN's bias Add
and Gelu one BiasGelu, and the block computes what onnxruntime computes on the graph as written;
shapes, types and readers the fused ops cannot take are left as written."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from hostkit import make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession
from ep_host.loading import load_model
from ep_host.optimize import optimize

F = TensorProto.FLOAT
HIDDEN, FFN = 32, 64


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def const(name, array, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(array, dtype), name)


def block(rng, *, shape=(1, 16, HIDDEN), pre_norm=False, erf_gelu=False, ln_axis=-1,
          dtype=np.float32):
    """attention output projection (MatMul, bias Add, residual Add, LayerNormalization), then
    the FFN (MatMul, bias Add, Gelu, MatMul, bias Add, residual Add, LayerNormalization).
    ``pre_norm``: the residual sums are read again by a later Add (GPT-2's form)."""
    elem = F if dtype == np.float32 else TensorProto.DOUBLE
    x_shape = list(shape)

    def w(*dims):
        return (rng.standard_normal(dims) * 0.2).astype(dtype)

    inits = [const("w_o", w(HIDDEN, HIDDEN), dtype), const("b_o", w(HIDDEN), dtype),
             const("g1", 1 + w(HIDDEN), dtype), const("beta1", w(HIDDEN), dtype),
             const("w_1", w(HIDDEN, FFN), dtype), const("b_1", w(FFN), dtype),
             const("w_2", w(FFN, HIDDEN), dtype), const("b_2", w(HIDDEN), dtype),
             const("g2", 1 + w(HIDDEN), dtype), const("beta2", w(HIDDEN), dtype)]
    if erf_gelu:
        inits += [const("sqrt2", np.sqrt(2.0), dtype), const("one", 1.0, dtype),
                  const("half", 0.5, dtype)]
        gelu = [helper.make_node("Div", ["f1", "sqrt2"], ["gd"], name="gelu_div"),
                helper.make_node("Erf", ["gd"], ["ge"], name="gelu_erf"),
                helper.make_node("Add", ["ge", "one"], ["gp"], name="gelu_plus"),
                helper.make_node("Mul", ["f1", "gp"], ["gm"], name="gelu_mul"),
                helper.make_node("Mul", ["gm", "half"], ["act"], name="gelu_half")]
    else:
        gelu = [helper.make_node("Gelu", ["f1"], ["act"], name="gelu")]
    second = "h1" if pre_norm else "n1"
    nodes = [
        helper.make_node("MatMul", ["x", "w_o"], ["o"], name="out_proj"),
        helper.make_node("Add", ["b_o", "o"], ["ob"], name="out_bias"),
        helper.make_node("Add", ["ob", "x"], ["h1"], name="residual1"),
        helper.make_node("LayerNormalization", ["h1", "g1", "beta1"], ["n1"], name="norm1",
                         axis=ln_axis, epsilon=1e-5),
        helper.make_node("MatMul", ["n1", "w_1"], ["f0"], name="ffn_in"),
        helper.make_node("Add", ["f0", "b_1"], ["f1"], name="ffn_bias"),
        *gelu,
        helper.make_node("MatMul", ["act", "w_2"], ["f2"], name="ffn_out"),
        helper.make_node("Add", ["f2", "b_2"], ["fb"], name="ffn_out_bias"),
        helper.make_node("Add", [second, "fb"], ["h2"], name="residual2"),
        helper.make_node("LayerNormalization", ["h2", "g2", "beta2"], ["y"], name="norm2",
                         axis=ln_axis, epsilon=1e-5),
    ]
    outputs = [("y", elem, x_shape)]
    if pre_norm:  # the second sum read again, as the next block's residual would
        nodes.append(helper.make_node("Add", ["h2", "y"], ["z"], name="next_residual"))
        outputs.append(("z", elem, x_shape))
    inputs = [("x", elem, x_shape)]
    return make_model(nodes, inputs, outputs, opset=20, initializers=inits)


def run_both(model, feeds):
    """ep-host's outputs (optimized) and its session, and onnxruntime's on the graph as written
    (its own fusions off)."""
    data = model.SerializeToString()
    session = InferenceSession(data, providers=["cpu"])
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    theirs = onnxruntime.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return session, session.run(None, feeds), theirs.run(None, feeds)


def ops(session):
    return [n.op_type for n in session.placement.table.nodes]


@pytest.mark.parametrize("rows", [16, 256])  # numpy's passes, then the CPU EP's compiled ones
@pytest.mark.parametrize("erf_gelu", [False, True])
def test_a_bert_block_becomes_skip_layer_norms_and_a_bias_gelu(rng, rows, erf_gelu):
    model = block(rng, shape=(1, rows, HIDDEN), erf_gelu=erf_gelu)
    x = rng.standard_normal((1, rows, HIDDEN)).astype(np.float32)
    session, ours, theirs = run_both(model, {"x": x})
    assert session.model.optimizations["skip_layer_norm_fusion"] == 2
    assert session.model.optimizations["bias_gelu_fusion"] == 1
    assert ops(session) == ["MatMul", "SkipLayerNormalization", "MatMul", "BiasGelu", "MatMul",
                            "SkipLayerNormalization"]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-5)


def test_the_fused_block_equals_the_unfused_one_to_the_bit(rng):
    """The compiled SkipLayerNormalization sums ``(x + bias) + skip`` as the Adds do, then runs
    the compiled LayerNormalization's rows; BiasGelu rounds the sum before the compiled Gelu."""
    model = block(rng, shape=(2, 128, HIDDEN))
    x = rng.standard_normal((2, 128, HIDDEN)).astype(np.float32)
    data = model.SerializeToString()
    fused = InferenceSession(data, providers=["cpu"]).run(None, {"x": x})
    unfused = InferenceSession(data, providers=["cpu"], disable_optimizations=[
        "skip_layer_norm_fusion", "bias_gelu_fusion"]).run(None, {"x": x})
    np.testing.assert_array_equal(fused[0], unfused[0])


@pytest.mark.parametrize("rows", [16, 256])
def test_a_residual_sum_read_again_is_the_fused_ops_fourth_output(rng, rows):
    model = block(rng, shape=(1, rows, HIDDEN), pre_norm=True)
    x = rng.standard_normal((1, rows, HIDDEN)).astype(np.float32)
    session, ours, theirs = run_both(model, {"x": x})
    assert session.model.optimizations["skip_layer_norm_fusion"] == 2
    fused = [n for n in session.model.graph.nodes if n.op_type == "SkipLayerNormalization"]
    assert [[o.name if o else "" for o in n.outputs] for n in fused] == [
        ["n1", "", "", "h1"], ["y", "", "", "h2"]]
    for got, want in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def fused_ops(model):
    return optimize(load_model(model)).optimizations


def test_a_norm_over_more_than_the_last_axis_is_not_fused(rng):
    assert "skip_layer_norm_fusion" not in fused_ops(block(rng, ln_axis=1))


def test_float64_is_not_fused(rng):
    found = fused_ops(block(rng, dtype=np.float64))
    assert "skip_layer_norm_fusion" not in found and "bias_gelu_fusion" not in found


def test_a_residual_that_broadcasts_is_not_fused(rng):
    """skip of another shape than the input: the Add broadcasts, the fused op does not."""
    model = make_model(
        [helper.make_node("Add", ["x", "s"], ["h"], name="residual"),
         helper.make_node("LayerNormalization", ["h", "g"], ["y"], name="norm", axis=-1)],
        [("x", F, [1, 8, HIDDEN]), ("s", F, [1, 1, HIDDEN])], [("y", F, [1, 8, HIDDEN])],
        initializers=[const("g", np.ones(HIDDEN))])
    assert "skip_layer_norm_fusion" not in fused_ops(model)


def test_a_symbolic_dim_or_a_read_mean_is_not_fused(rng):
    nodes = [helper.make_node("Add", ["x", "s"], ["h"], name="residual"),
             helper.make_node("LayerNormalization", ["h", "g"], ["y"], name="norm", axis=-1)]
    symbolic = make_model(nodes, [("x", F, ["n", HIDDEN]), ("s", F, ["n", HIDDEN])],
                          [("y", F, ["n", HIDDEN])], initializers=[const("g", np.ones(HIDDEN))])
    assert "skip_layer_norm_fusion" not in fused_ops(symbolic)
    mean_read = make_model(
        [nodes[0], helper.make_node("LayerNormalization", ["h", "g"], ["y", "mean"],
                                    name="norm", axis=-1)],
        [("x", F, [8, HIDDEN]), ("s", F, [8, HIDDEN])], [("y", F, [8, HIDDEN]),
                                                       ("mean", F, [8, 1])],
        initializers=[const("g", np.ones(HIDDEN))])
    assert "skip_layer_norm_fusion" not in fused_ops(mean_read)


def test_a_bias_read_elsewhere_or_not_constant_stays_an_add(rng):
    """The bias Add whose sum another node reads stays; the residual and the norm still fuse,
    without a bias. A Gelu after an Add of two inputs is not a BiasGelu."""
    shape = [1, 8, HIDDEN]
    model = make_model(
        [helper.make_node("Add", ["x", "b"], ["xb"], name="bias"),
         helper.make_node("Add", ["xb", "s"], ["h"], name="residual"),
         helper.make_node("LayerNormalization", ["h", "g"], ["y"], name="norm", axis=-1),
         helper.make_node("Add", ["x", "s"], ["t"], name="two_inputs"),
         helper.make_node("Gelu", ["t"], ["u"], name="gelu")],
        [("x", F, shape), ("s", F, shape)], [("y", F, shape), ("xb", F, shape), ("u", F, shape)],
        opset=20, initializers=[const("g", np.ones(HIDDEN)), const("b", np.ones(HIDDEN))])
    optimized = optimize(load_model(model))
    assert optimized.optimizations == {"skip_layer_norm_fusion": 1}
    (fused,) = [n for n in optimized.graph.nodes if n.op_type == "SkipLayerNormalization"]
    assert [v.name for v in fused.inputs] == ["xb", "s", "g"]


def test_a_tanh_gelu_after_a_bias_is_not_a_bias_gelu(rng):
    shape = [1, 8, FFN]
    model = make_model(
        [helper.make_node("Add", ["x", "b"], ["t"], name="bias"),
         helper.make_node("Gelu", ["t"], ["u"], name="gelu", approximate="tanh")],
        [("x", F, shape)], [("u", F, shape)], opset=20,
        initializers=[const("b", np.ones(FFN))])
    assert "bias_gelu_fusion" not in fused_ops(model)
