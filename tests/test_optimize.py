"""Graph optimizations before placement: each pass rewrites what it should, the rewritten model
computes what the model as written computes, and a fused node nobody claims is placed as the
nodes it replaced."""

import math

import numpy as np
import onnx
import onnxruntime
import pytest
import scipy.special
from hostkit import InlineProvider, make_model
from onnx import TensorProto, helper, numpy_helper

from ep_host import InferenceSession
from ep_host.cli import main
from ep_host.errors import HostError
from ep_host.loading import load_model
from ep_host.optimize import DEFAULT_PASSES, PASSES, optimize, passes_that_may_apply

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array, np.float32), name)


def conv_bn_model(extra_reader=False):
    w = RNG.standard_normal((4, 3, 3, 3)) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], name="bn",
                              epsilon=1e-3),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    outputs = [("y", F, [1, 4, 8, 8])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["c"], ["z"], name="neg"))
        outputs.append(("z", F, [1, 4, 8, 8]))
    inits = [const("w", w), const("b", RNG.standard_normal(4)),
             const("s", RNG.uniform(0.5, 1.5, 4)), const("bb", RNG.standard_normal(4)),
             const("m", RNG.standard_normal(4)), const("v", RNG.uniform(0.5, 2, 4))]
    return make_model(nodes, [("x", F, [1, 3, 8, 8])], outputs, initializers=inits)


def gelu_nodes(x, out, order):
    c = {"sqrt2": "c_sqrt2", "one": "c_one", "half": "c_half", "inv": "c_inv"}
    if order == "half_first":  # (0.5 * x) * (1 + erf(x / sqrt2))
        return [helper.make_node("Mul", [x, c["half"]], ["h"], name="half"),
                helper.make_node("Div", [x, c["sqrt2"]], ["d"], name="div"),
                helper.make_node("Erf", ["d"], ["e"], name="erf"),
                helper.make_node("Add", ["e", c["one"]], ["p"], name="plus"),
                helper.make_node("Mul", ["h", "p"], [out], name="mul")]
    # (x * (1 + erf(x * 1/sqrt2))) * 0.5
    return [helper.make_node("Mul", [c["inv"], x], ["d"], name="scale"),
            helper.make_node("Erf", ["d"], ["e"], name="erf"),
            helper.make_node("Add", [c["one"], "e"], ["p"], name="plus"),
            helper.make_node("Mul", [x, "p"], ["q"], name="mul"),
            helper.make_node("Mul", ["q", c["half"]], [out], name="half")]


def gelu_model(order):
    inits = [const("c_sqrt2", math.sqrt(2)), const("c_one", 1.0), const("c_half", 0.5),
             const("c_inv", 1 / math.sqrt(2))]
    return make_model(gelu_nodes("x", "y", order), [("x", F, [2, 16])], [("y", F, [2, 16])],
                      initializers=inits)


def run_both(model, feeds, **kwargs):
    data = model.SerializeToString()
    optimized = InferenceSession(data, providers=["cpu"], **kwargs)
    written = InferenceSession(data, providers=["cpu"], optimizations=())
    return optimized, optimized.run(None, feeds), written.run(None, feeds)


def assert_matches_written_and_onnxruntime(model, feeds):
    """The optimized session's outputs equal the model's as written and onnxruntime's."""
    _, got, want = run_both(model, feeds)
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    for g, w, o in zip(got, want, ort.run(None, feeds), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(g, o, rtol=1e-5, atol=1e-5)


def test_conv_bn_folding_removes_the_batch_norm_and_keeps_the_result():
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    model = conv_bn_model()
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"conv_bn_folding": 1, "conv_activation_fusion": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["FusedConv"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got[0], ort.run(None, {"x": x})[0], rtol=1e-5, atol=1e-5)


def test_a_rewritten_model_reads_no_constant_again_and_holds_what_its_tensors_hold():
    model = conv_bn_model(extra_reader=False)
    model.graph.node.extend([  # and a scalar folded to a 0-d constant
        helper.make_node("Add", ["y", "k"], ["y2"], name="add_k"),
        helper.make_node("Mul", ["two", "three"], ["six"], name="six"),
        helper.make_node("Mul", ["y2", "six"], ["y3"], name="times_six")])
    model.graph.output[0].name = "y3"
    model.graph.initializer.extend([const("k", RNG.standard_normal((1, 4, 1, 1))),
                                    const("two", 2.0), const("three", 3.0)])
    loaded = load_model(model)
    kept = loaded.graph.values["k"].value  # read before the rewrite
    rewritten = optimize(loaded, in_place=True)
    assert rewritten is not loaded and "conv_bn_folding" in rewritten.optimizations
    held = {key.split(":", 1)[1] for key in rewritten._constants}  # before any is asked for
    assert "k" in held and len(held) >= 3  # the folded weight and bias, as computed
    assert rewritten.graph.values["k"].value is kept  # the same tensor: not read again
    constants = [v for v in rewritten.graph.values.values() if v.is_constant]
    assert {v.name for v in constants} >= {"k", "six"} and len(constants) >= 4
    assert rewritten.graph.values["six"].value.shape == ()
    for value in constants:  # the computed ones as their tensors would read back
        written = numpy_helper.to_array(value._tensor)
        assert value.value.shape == written.shape and value.value.dtype == written.dtype
        assert value.value.flags.c_contiguous
        np.testing.assert_array_equal(value.value, written)
        assert not value.value.flags.writeable


def test_a_conv_whose_output_is_read_elsewhere_is_not_folded():
    model = optimize(load_model(conv_bn_model(extra_reader=True)))
    assert "conv_bn_folding" not in model.optimizations


def test_constant_folding_folds_shape_arithmetic_of_a_static_tensor():
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "i"], ["g"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["g", "axes"], ["u"], name="unsq"),
             helper.make_node("Concat", ["u", "rest"], ["t"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"], name="reshape")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    model = make_model(nodes, [("x", F, [2, 3, 4])], [("y", F, [2, 12])], initializers=inits)
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"constant_folding": 4}
    assert [n.op_type for n in session.placement.table.nodes] == ["Reshape"]
    np.testing.assert_array_equal(got[0], want[0])


def channel_split_model():
    """ShuffleNet's channel split as torch exports it: the half of the channels a Slice keeps
    computed from the input's shape through Div, which onnx's data propagation does not
    follow, then a Conv and a Relu of the half."""
    w = RNG.standard_normal((4, 2, 3, 3)) * 0.3
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "one"], ["c"], name="gather", axis=0),
             helper.make_node("Div", ["c", "two"], ["half"], name="div"),
             helper.make_node("Unsqueeze", ["half", "axes"], ["end"], name="unsq"),
             helper.make_node("Slice", ["x", "zero", "end", "axes1"], ["left"], name="slice"),
             helper.make_node("Conv", ["left", "w"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv"], ["y"], name="relu")]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1], np.int64), "axes1"), const("w", w)]
    return make_model(nodes, [("x", F, [1, 4, 6, 6])], [("y", F, None)], initializers=inits)


def test_shapes_folding_makes_known_are_inferred_before_the_fusions():
    model = channel_split_model()
    written = load_model(model)
    assert written.graph.values["left"].shape != (1, 2, 6, 6)  # onnx's inference stops at Div
    optimized = optimize(written)
    assert [n.op_type for n in optimized.graph.nodes] == ["Slice", "FusedConv"]
    assert optimized.graph.values["left"].shape == (1, 2, 6, 6)
    assert optimized.graph.values["y"].shape == (1, 4, 6, 6)  # out of the fused node too
    assert_matches_written_and_onnxruntime(
        model, {"x": RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)})


def test_a_model_with_bodies_keeps_its_body_types_and_learns_folded_shapes():
    model = channel_split_model()
    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t1"], name="then_neg"),
                              helper.make_node("Relu", ["t1"], ["t"], name="then_relu")],
                             "then", [], [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"], name="else_abs")],
                              "else", [], [helper.make_tensor_value_info("e", F, None)])
    model.graph.node.append(helper.make_node("If", ["cond"], ["z"], name="if",
                                             then_branch=then, else_branch=other))
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    model.graph.output.append(helper.make_tensor_value_info("z", F, None))
    written = load_model(model)
    optimized = optimize(written)
    assert optimized.graph.values["left"].shape == (1, 2, 6, 6)  # learned after folding
    assert optimized.graph.values["y"].shape == (1, 4, 6, 6)
    body = {n.op_type: n for n in optimized.graph.nodes}["If"].subgraphs["then_branch"]
    assert body.values["t1"].shape == (1, 4, 6, 6)  # as loading inferred it
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    for cond in (True, False):
        assert_matches_written_and_onnxruntime(model, {"x": x, "cond": np.array(cond)})


def test_a_value_declared_without_a_shape_keeps_the_shape_inference_found():
    w = RNG.standard_normal((4, 3, 3, 3)) * 0.3
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["m"], name="neg"),
             helper.make_node("Abs", ["m"], ["y"], name="abs")]
    model = make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, None)],
                       initializers=[const("w", w)])
    model.graph.value_info.append(helper.make_tensor_value_info("m", F, None))
    written = load_model(model)
    assert written.graph.values["y"].shape == written.graph.values["m"].shape == (1, 4, 8, 8)
    optimized = optimize(written)
    assert optimized.optimizations == {"conv_activation_fusion": 1}
    for name in ("r", "m", "y"):
        assert optimized.graph.values[name].shape == (1, 4, 8, 8)


@pytest.mark.parametrize("op", ["Split", "Unique"])
def test_constant_folding_keeps_outputs_in_place_around_an_omitted_one(op):
    """A folded node whose middle output is omitted: each named output gets its own value."""
    c = np.array([3.0, 1.0, 3.0, 2.0, 1.0, 3.0], np.float32)
    if op == "Split":
        folded = helper.make_node("Split", ["c"], ["a", "", "b"], name="split", num_outputs=3)
        uses = ["a", "b"]
    else:
        folded = helper.make_node("Unique", ["c"], ["a", "", "", "b"], name="unique", sorted=1)
        uses = ["a", "b"]  # the unique values (float32) and their counts (int64)
    nodes = [folded, helper.make_node("Cast", [uses[1]], ["bf"], to=F, name="cast"),
             helper.make_node("Mul", ["x", uses[0]], ["p"], name="mul"),
             helper.make_node("ReduceSum", ["bf"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Mul", ["p", "s"], ["y"], name="scale")]
    width = 2 if op == "Split" else 3
    model = make_model(nodes, [("x", F, [width])], [("y", F, [width])], opset=18,
                       initializers=[numpy_helper.from_array(c, "c")])
    x = RNG.standard_normal(width).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations.get("constant_folding", 0) >= 1
    assert folded.name not in {n.name for n in session.placement.table.nodes}
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


@pytest.mark.parametrize("order", ["half_first", "half_last"])
def test_gelu_fusion_makes_one_node_that_computes_the_same(order):
    x = (RNG.standard_normal((2, 16)) * 3).astype(np.float32)
    session, got, want = run_both(gelu_model(order), {"x": x})
    assert session.model.optimizations == {"gelu_fusion": 1}
    assert [n.qualified_op for n in session.placement.table.nodes] == ["com.microsoft::Gelu"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


def tanh_gelu_model(cube, order, *, cube_factor=0.044715):
    """GPT-2's GELU as its exports write it: 0.5 x (1 + tanh(sqrt(2/pi) (x + c x^3)))."""
    if cube == "pow":
        cube_nodes = [helper.make_node("Pow", ["x", "c_three"], ["cube"])]
    else:
        cube_nodes = [helper.make_node("Mul", ["x", "x"], ["square"]),
                      helper.make_node("Mul", ["square", "x"], ["cube"])]
    body = [*cube_nodes,
            helper.make_node("Mul", ["cube", "c_cube"], ["term"]),
            helper.make_node("Add", ["x", "term"], ["inner"]),
            helper.make_node("Mul", ["c_scale", "inner"], ["scaled"]),
            helper.make_node("Tanh", ["scaled"], ["t"]),
            helper.make_node("Add", ["t", "c_one"], ["plus"])]
    if order == "half_first":
        body = [helper.make_node("Mul", ["x", "c_half"], ["half"]), *body,
                helper.make_node("Mul", ["half", "plus"], ["y"])]
    else:
        body += [helper.make_node("Mul", ["x", "plus"], ["xp"]),
                 helper.make_node("Mul", ["xp", "c_half"], ["y"])]
    inits = [const("c_three", 3.0), const("c_cube", cube_factor), const("c_one", 1.0),
             const("c_scale", math.sqrt(2 / math.pi)), const("c_half", 0.5)]
    return make_model(body, [("x", F, [2, 16])], [("y", F, [2, 16])], initializers=inits)


@pytest.mark.parametrize("cube", ["pow", "mul"])
@pytest.mark.parametrize("order", ["half_first", "half_last"])
def test_tanh_gelu_becomes_one_fast_gelu_that_computes_the_same(cube, order):
    x = (RNG.standard_normal((2, 16)) * 3).astype(np.float32)
    model = tanh_gelu_model(cube, order)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"gelu_fusion": 1}
    assert [n.qualified_op for n in session.placement.table.nodes] == [
        "com.microsoft::FastGelu"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got[0], ort.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_a_tanh_gelu_with_another_cube_factor_is_not_fused():
    model = optimize(load_model(tanh_gelu_model("pow", "half_first", cube_factor=0.05)))
    assert "gelu_fusion" not in model.optimizations


def test_a_fused_node_nobody_claims_runs_as_the_nodes_it_replaced(host):
    class Elementwise(InlineProvider):
        FUNCS = {"Div": np.divide, "Mul": np.multiply, "Add": np.add,
                 "Erf": lambda v: scipy.special.erf(v).astype(v.dtype)}

    host.register(Elementwise("plain", ops=("Div", "Mul", "Add", "Erf")), name="plain")
    x = RNG.standard_normal((2, 16)).astype(np.float32)
    session = InferenceSession(gelu_model("half_first").SerializeToString(), providers=["plain"],
                               host=host)
    table = session.placement.table
    (fused,) = table.expanded
    assert not table.answers[fused]["plain"].is_supported
    assert sorted(n.op_type for n in table.nodes) == ["Add", "Div", "Erf", "Mul", "Mul"]
    want = 0.5 * x * (1 + scipy.special.erf(x / math.sqrt(2)))
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-6, atol=1e-6)


def silu_model(mul_inputs, extra_reader=False):
    """Sigmoid of x read by a Mul of ``mul_inputs`` (names among x, s, g), optionally also by
    a Neg; g is a second graph input of x's shape."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
             helper.make_node("Mul", mul_inputs, ["y"], name="mul")]
    outputs = [("y", F, [2, 3, 5, 5])]
    if extra_reader:
        nodes.append(helper.make_node("Neg", ["s"], ["z"], name="neg"))
        outputs.append(("z", F, [2, 3, 5, 5]))
    return make_model(nodes, [("x", F, [2, 3, 5, 5]), ("g", F, [2, 3, 5, 5])], outputs)


@pytest.mark.parametrize("mul_inputs", [["x", "s"], ["s", "x"]])
def test_silu_becomes_one_quick_gelu_that_computes_the_same(mul_inputs):
    x = (RNG.standard_normal((2, 3, 5, 5)) * 4).astype(np.float32)
    model = silu_model(mul_inputs)
    session, got, want = run_both(model, {"x": x, "g": x})
    assert session.model.optimizations == {"silu_fusion": 1}
    assert [n.qualified_op for n in session.placement.table.nodes] == [
        "com.microsoft::QuickGelu"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got[0], ort.run(None, {"x": x, "g": x})[0], rtol=1e-5, atol=1e-6)


def written_sigmoid_model(negation="neg", last="reciprocal", *, minus=-1.0, one=1.0,
                          one_shape=(), also_read=None, then_times_x=False):
    """x [4, 3] -> 1 / (1 + exp(-x)) as separate nodes -> y (``then_times_x``: y * x, SiLU);
    ``also_read``: an inner value that is a graph output too."""
    negate = (helper.make_node("Neg", ["x"], ["n"], name="neg") if negation == "neg" else
              helper.make_node("Mul", ["x", "minus"] if negation == "mul" else ["minus", "x"],
                               ["n"], name="neg"))
    nodes = [negate, helper.make_node("Exp", ["n"], ["e"], name="exp"),
             helper.make_node("Add", ["e", "one"], ["d"], name="add"),
             helper.make_node("Reciprocal", ["d"], ["y"], name="inverse")
             if last == "reciprocal" else helper.make_node("Div", ["one", "d"], ["y"], name="div")]
    outputs = [("y", F, None)]  # [1, 4, 3] where a constant of rank 3 widens it
    if then_times_x:
        nodes.append(helper.make_node("Mul", ["y", "x"], ["z"], name="times"))
        outputs = [("z", F, [4, 3])]
    if also_read:
        outputs.append((also_read, F, None))
    inits = [numpy_helper.from_array(np.full(one_shape, one, np.float32), "one"),
             const("minus", minus)]
    return make_model(nodes, [("x", F, [4, 3])], outputs, initializers=inits)


@pytest.mark.parametrize("negation", ["neg", "mul", "mul first"])
@pytest.mark.parametrize("last", ["reciprocal", "div"])
def test_a_sigmoid_written_out_becomes_one_sigmoid(negation, last, recwarn):
    x = (RNG.standard_normal((4, 3)) * 60).astype(np.float32)  # exp(-x) overflows for some
    model = written_sigmoid_model(negation, last, one_shape=(1, 1) if last == "div" else ())
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert session.model.optimizations == {"sigmoid_fusion": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["Sigmoid"]
    got = session.run(None, {"x": x})[0]
    assert not [w for w in recwarn if "overflow" in str(w.message)]
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=1e-6,
                               atol=1e-30)
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, ort.run(None, {"x": x})[0], rtol=1e-6, atol=1e-30)


def test_a_sigmoid_written_out_times_its_input_becomes_one_quick_gelu():
    x = (RNG.standard_normal((4, 3)) * 4).astype(np.float32)
    session, got, want = run_both(written_sigmoid_model(then_times_x=True), {"x": x})
    assert session.model.optimizations == {"sigmoid_fusion": 1, "silu_fusion": 1}
    assert [n.qualified_op for n in session.placement.table.nodes] == [
        "com.microsoft::QuickGelu"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("change", [{"minus": -2.0}, {"one": 2.0}, {"one_shape": (1, 1, 1)},
                                    {"also_read": "e"}, {"also_read": "n"}],
                         ids=["times_minus_two", "plus_two", "one_widens", "exp_read",
                              "negation_read"])
def test_other_formulas_are_left_as_written(change):
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    model = written_sigmoid_model("mul", "div", **change)
    session, got, want = run_both(model, {"x": x})
    assert "sigmoid_fusion" not in session.model.optimizations
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(("mul_inputs", "extra_reader"), [
    (["g", "s"], False),  # a squeeze-excite's Mul: the sigmoid scales another tensor
    (["s", "s"], False),  # sigmoid squared
    (["x", "s"], True),  # the sigmoid is read by another node too
])
def test_a_sigmoid_times_anything_but_its_own_input_is_not_fused(mul_inputs, extra_reader):
    model = optimize(load_model(silu_model(mul_inputs, extra_reader)))
    assert "silu_fusion" not in model.optimizations


def test_matmul_add_becomes_gemm_for_two_d_inputs_only():
    def model(shape):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
                 helper.make_node("Add", ["m", "b"], ["y"], name="add")]
        inits = [const("w", RNG.standard_normal((8, 5))), const("b", RNG.standard_normal(5))]
        return make_model(nodes, [("x", F, shape)], [("y", F, [*shape[:-1], 5])],
                          initializers=inits)

    x = RNG.standard_normal((3, 8)).astype(np.float32)
    session, got, want = run_both(model([3, 8]), {"x": x})
    assert session.model.optimizations == {"matmul_add_fusion": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["Gemm"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)
    assert optimize(load_model(model([2, 3, 8]))).optimizations == {}


def test_each_pass_can_be_switched_off_and_unknown_names_are_refused():
    model = load_model(conv_bn_model())
    assert optimize(model, disable=["conv_bn_folding"]) is model
    assert optimize(model, passes=[]) is model
    with pytest.raises(HostError, match="unknown graph optimization.*known: constant_lifting"):
        optimize(model, passes=["fold_everything"])
    assert set(PASSES) == {"constant_lifting", "constant_folding", "conv_bn_folding",
                           "channel_affine_folding", "conv_activation_fusion", "gelu_fusion",
                           "sigmoid_fusion", "silu_fusion", "layer_norm_fusion",
                           "skip_layer_norm_fusion", "bias_gelu_fusion", "matmul_add_fusion",
                           "product_features_fusion", "tree_ensemble_merging",
                           "tree_classifier_merging",
                           "samme_vote_batching", "weighted_median_fusion",
                           "class_label_gather", "cast_elimination"}


def test_explain_names_the_passes_that_changed_the_graph(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(conv_bn_model().SerializeToString())
    assert main(["explain", str(path), "--providers", "cpu"]) == 0
    assert ("graph optimizations: conv_bn_folding (1 rewrite), conv_activation_fusion (1 rewrite)"
            in capsys.readouterr().out)
    assert main(["explain", str(path), "--providers", "cpu", "--no-optimize"]) == 0
    out = capsys.readouterr().out
    assert "graph optimizations" not in out and "BatchNormalization" in out


@pytest.mark.parametrize("opset,square", [(17, "Pow"), (18, "Mul")])
def test_layer_norm_written_out_becomes_one_layer_normalization(opset, square):
    def mean(inp, out, name):
        if opset >= 18:
            return helper.make_node("ReduceMean", [inp, "axes"], [out], name=name)
        return helper.make_node("ReduceMean", [inp], [out], name=name, axes=[-1])

    sq = (helper.make_node("Pow", ["d", "two"], ["p"], name="pow") if square == "Pow"
          else helper.make_node("Mul", ["d", "d"], ["p"], name="sq"))
    nodes = [mean("x", "m", "mean"), helper.make_node("Sub", ["x", "m"], ["d"], name="sub"), sq,
             mean("p", "v", "var"), helper.make_node("Add", ["v", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["s"], name="sqrt"),
             helper.make_node("Div", ["d", "s"], ["n"], name="div"),
             helper.make_node("Mul", ["n", "g"], ["gn"], name="scale"),
             helper.make_node("Add", ["gn", "b"], ["y"], name="shift")]
    inits = [const("two", 2.0), const("eps", 1e-5), const("g", RNG.uniform(0.5, 1.5, 16)),
             const("b", RNG.standard_normal(16)),
             numpy_helper.from_array(np.array([-1], np.int64), "axes")]
    model = make_model(nodes, [("x", F, [2, 5, 16])], [("y", F, [2, 5, 16])],
                       initializers=inits, opset=opset)
    x = (RNG.standard_normal((2, 5, 16)) * 2 + 1).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"layer_norm_fusion": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["LayerNormalization"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("producer", ["Conv", "BatchNormalization"])
def test_a_per_channel_scale_and_shift_fold_into_the_conv_or_batch_norm(producer):
    if producer == "Conv":
        first = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])
        inits = [const("w", RNG.standard_normal((4, 3, 3, 3)) * 0.3)]
    else:
        first = helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"], ["c"],
                                 name="bn")
        inits = [const(n, RNG.uniform(0.5, 1.5, 3)) for n in ("s", "bb", "m", "v")]
    channels = 4 if producer == "Conv" else 3
    nodes = [first, helper.make_node("Mul", ["c", "scale"], ["d"], name="mul"),
             helper.make_node("Add", ["shift", "d"], ["y"], name="add")]
    inits += [const("scale", RNG.uniform(0.5, 2, (channels, 1, 1))),
              const("shift", RNG.standard_normal((1, channels, 1, 1)))]
    model = make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, [1, channels, 8, 8])],
                       initializers=inits)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"channel_affine_folding": 2}
    assert [n.op_type for n in session.placement.table.nodes] == [producer]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-5)


def test_a_constant_that_varies_over_space_is_not_folded():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Mul", ["c", "scale"], ["y"], name="mul")]
    inits = [const("w", RNG.standard_normal((4, 3, 1, 1))),
             const("scale", RNG.standard_normal((4, 8, 8)))]
    model = make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, [1, 4, 8, 8])],
                       initializers=inits)
    assert optimize(load_model(model)).optimizations == {}


def test_conv_then_relu_becomes_one_fused_conv(tmp_path):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    inits = [const("w", RNG.standard_normal((4, 3, 3, 3))), const("b", RNG.standard_normal(4))]
    model = make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, [1, 4, 8, 8])],
                       initializers=inits)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"conv_activation_fusion": 1}
    assert [n.qualified_op for n in session.placement.table.nodes] == ["com.microsoft::FusedConv"]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("group", "w_shape"), [(1, (4, 3, 3, 3)), (3, (6, 1, 3, 3))])
@pytest.mark.parametrize(("bounds", "fused"), [
    ((0.0, 6.0), True), ((0.5, -0.5), True),  # min > max: every value is max
    ((-1.0, None), False),  # a missing bound: its default differs between Clip's versions
])
def test_conv_then_clip_with_both_bounds_becomes_one_fused_conv(group, w_shape, bounds, fused):
    names = ["c"] + [n if v is not None else "" for n, v in zip(["lo", "hi"], bounds,
                                                                 strict=True)]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1],
                              group=group),
             helper.make_node("Clip", names, ["y"], name="clip")]
    inits = [const("w", RNG.standard_normal(w_shape) * 3), const("b", RNG.standard_normal(6)
                                                                 [:w_shape[0]])]
    inits += [const(n, np.array(v)) for n, v in zip(["lo", "hi"], bounds, strict=True)
              if v is not None]
    model = make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, [1, w_shape[0], 8, 8])],
                       initializers=inits)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations.get("conv_activation_fusion", 0) == int(fused)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)
    lo = -np.inf if bounds[0] is None else bounds[0]
    hi = np.inf if bounds[1] is None else bounds[1]
    if lo > hi:
        assert (got[0] == np.float32(hi)).all()
    else:
        assert ((got[0] >= lo) & (got[0] <= hi)).all() and got[0].min() == lo


@pytest.mark.parametrize(("group", "w_shape"), [(1, (4, 3, 3, 3)), (1, (4, 3, 1, 1)),
                                              (3, (6, 1, 3, 3))])
@pytest.mark.parametrize(("op", "attrs", "params"), [
    ("HardSwish", {}, None),
    ("HardSigmoid", {}, [0.2, 0.5]),  # the schema's defaults, written out
    ("HardSigmoid", {"alpha": 0.25, "beta": 0.375}, [0.25, 0.375]),
])
def test_conv_then_hard_sigmoid_or_hard_swish_becomes_one_fused_conv(group, w_shape, op, attrs,
                                                                     params):
    """MobileNetV3's activations: the same values as the Conv and the activation run apart, on
    every Conv variant (GEMM, im2col, depthwise)."""
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv",
                              pads=[w_shape[2] // 2] * 4, group=group),
             helper.make_node(op, ["c"], ["y"], name="act", **attrs)]
    inits = [const("w", RNG.standard_normal(w_shape) * 3),
             const("b", RNG.standard_normal(w_shape[0]))]
    model = make_model(nodes, [("x", F, [1, 3, 8, 8])], [("y", F, [1, w_shape[0], 8, 8])],
                       initializers=inits, opset=14)
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"conv_activation_fusion": 1}
    (node,) = session.model.proto.graph.node
    assert (node.op_type, node.domain) == ("FusedConv", "com.microsoft")
    written = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert written["activation"] == op.encode()
    assert (list(written["activation_params"]) if params else None) == \
        (pytest.approx(params) if params else None)
    np.testing.assert_array_equal(got[0], want[0])
    (theirs,) = onnxruntime.InferenceSession(model.SerializeToString(),
                                             providers=["CPUExecutionProvider"]).run(None,
                                                                                     {"x": x})
    np.testing.assert_allclose(got[0], theirs, rtol=1e-5, atol=1e-5)


def test_why_and_explain_find_a_node_by_its_name_in_the_model_as_written(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(conv_bn_model().SerializeToString())
    assert main(["why", str(path), "bn", "--providers", "cpu"]) == 0
    captured = capsys.readouterr()
    assert "node 'bn' is part of 'conv::FusedConv' after the graph optimizations" in captured.err
    assert "conv::FusedConv (com.microsoft::FusedConv) runs on cpu" in captured.out
    assert main(["explain", str(path), "--providers", "cpu", "--op", "Conv"]) == 0
    assert "conv::FusedConv" in capsys.readouterr().out  # a node made from a Conv


def test_a_node_folded_into_a_constant_is_named_as_such(tmp_path, capsys):
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape")]
    model = make_model(nodes, [("x", F, [2, 3])], [("y", F, [2, 3])])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["why", str(path), "shape", "--providers", "cpu"]) == 1
    assert "node 'shape' was folded into a constant" in capsys.readouterr().err


def shared_weight_model():
    """torch's export of two convs with equal weights and a batch norm with equal parameters:
    one initializer each, read through Identities."""
    w = RNG.standard_normal((3, 3, 3, 3)) * 0.3
    nodes = [helper.make_node("Identity", ["w"], [f"w{i}"], name=f"id_w{i}") for i in range(2)]
    nodes += [helper.make_node("Identity", ["ones"], [f"p{i}"], name=f"id_p{i}")
              for i in range(3)]
    nodes += [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
              helper.make_node("BatchNormalization", ["c0", "p0", "zeros", "zeros", "p1"], ["n"],
                               name="bn"),
              helper.make_node("Conv", ["n", "w1", "p2"], ["y"], name="conv1", pads=[1, 1, 1, 1])]
    inits = [const("w", w), const("ones", np.ones(3)), const("zeros", np.zeros(3))]
    return make_model(nodes, [("x", F, [1, 3, 6, 6])], [("y", F, [1, 3, 6, 6])],
                      initializers=inits)


def test_an_identity_of_a_constant_is_read_through_not_copied():
    model = shared_weight_model()
    written = load_model(model)
    optimized = optimize(written)
    assert optimized.optimizations["constant_folding"] == 5
    nodes = optimized.graph.nodes
    assert [n.op_type for n in nodes] == ["Conv", "Conv"]  # the batch norm folded as well
    # the second conv reads the shared initializers themselves: no copy under a new name
    assert [v.name for v in nodes[1].inputs][1:] == ["w", "ones"]
    names = {t.name for t in optimized.proto.graph.initializer}
    assert not names & {"w0", "w1", "p0", "p1", "p2"}
    # the model as loaded still reads its Identities (a rewrite edits copies)
    assert [n.input[0] for n in written.proto.graph.node if n.op_type == "Conv"] == ["x", "n"]
    assert [n.input[1] for n in written.proto.graph.node if n.op_type == "Conv"] == ["w0", "w1"]
    assert_matches_written_and_onnxruntime(
        model, {"x": RNG.standard_normal((1, 3, 6, 6)).astype(np.float32)})


def test_an_identity_read_inside_a_body_is_folded_into_its_own_constant():
    then = helper.make_graph([helper.make_node("Add", ["x", "b"], ["t"], name="then_add")],
                             "then", [], [helper.make_tensor_value_info("t", F, [2])])
    other = helper.make_graph([helper.make_node("Sub", ["x", "b"], ["e"], name="else_sub")],
                              "else", [], [helper.make_tensor_value_info("e", F, [2])])
    nodes = [helper.make_node("Identity", ["c"], ["b"], name="id"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then,
                              else_branch=other)]
    model = make_model(nodes, [("x", F, [2]), ("cond", TensorProto.BOOL, [])],
                       [("y", F, [2])], initializers=[const("c", [1.0, 2.0])])
    optimized = optimize(load_model(model))
    assert [n.op_type for n in optimized.graph.nodes] == ["If"]
    assert "b" in {t.name for t in optimized.proto.graph.initializer}
    x = np.array([5.0, 7.0], np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        _, got, want = run_both(model, feeds)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[0], x + [1, 2] if cond else x - [1, 2])


def constant_forms_model(output_constant=False, sparse_form=True):
    """Each ``Constant`` attribute form feeding the op that reads it (``c_sparse`` a dense zero
    constant when not ``sparse_form``), and the string constant through an Identity."""
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([5.0, -1.0], np.float32), "v"),
        numpy_helper.from_array(np.array([1, 4], np.int64), "i"), [2, 3])
    nodes = [
        helper.make_node("Constant", [], ["t"], name="c_tensor",
                         value=numpy_helper.from_array(RNG.standard_normal((2, 3)).astype(
                             np.float32))),
        helper.make_node("Constant", [], ["f"], name="c_float", value_float=2.5),
        helper.make_node("Constant", [], ["fs"], name="c_floats", value_floats=[1.0, 2.0, 3.0]),
        helper.make_node("Constant", [], ["i"], name="c_int", value_int=3),
        helper.make_node("Constant", [], ["is"], name="c_ints", value_ints=[3, 2]),
        helper.make_node("Constant", [], ["sp"], name="c_sparse", sparse_value=sparse)
        if sparse_form else helper.make_node("Constant", [], ["sp"], name="c_sparse",
                                              value_float=0.0),
        helper.make_node("Constant", [], ["ss"], name="c_strings", value_strings=[b"a", b"bc"]),
        helper.make_node("Mul", ["x", "t"], ["m1"], name="mul_tensor"),
        helper.make_node("Mul", ["m1", "f"], ["m2"], name="mul_float"),
        helper.make_node("Add", ["m2", "fs"], ["m3"], name="add_floats"),
        helper.make_node("Add", ["m3", "sp"], ["m4"], name="add_sparse"),
        helper.make_node("Cast", ["i"], ["fi"], name="cast_int", to=F),
        helper.make_node("Mul", ["m4", "fi"], ["m5"], name="mul_int"),
        helper.make_node("Reshape", ["m5", "is"], ["y"], name="reshape"),
        helper.make_node("Identity", ["ss"], ["names"], name="names"),
    ]
    outputs = [("y", F, [3, 2]), ("names", TensorProto.STRING, [2])]
    if output_constant:
        nodes.append(helper.make_node("Constant", [], ["k"], name="c_out", value_ints=[7, 8]))
        outputs.append(("k", TensorProto.INT64, [2]))
    return make_model(nodes, [("x", F, [2, 3])], outputs)


CONSTANT_NODES = {"c_tensor", "c_float", "c_floats", "c_int", "c_ints", "c_sparse", "c_strings"}


@pytest.mark.parametrize("output_constant", [False, True], ids=["read", "graph_output"])
def test_constant_nodes_become_initializers_in_every_form(output_constant):
    model = constant_forms_model(output_constant)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    session = InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert session.model.optimizations["constant_lifting"] == len(CONSTANT_NODES) + output_constant
    assert not any(n.op_type == "Constant" for n in session.placement.table.nodes)
    got = session.run(None, {"x": x})
    reference = onnxruntime.InferenceSession(model.SerializeToString(),
                                             providers=["CPUExecutionProvider"])
    want = reference.run(None, {"x": x})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    assert [str(s) for s in got[1]] == [str(s) for s in want[1]] == ["a", "bc"]
    if output_constant:
        np.testing.assert_array_equal(got[2], np.array([7, 8], np.int64))
        assert got[2].dtype == want[2].dtype


def test_lifted_constants_compute_what_the_constant_nodes_compute():
    # the sparse form is left out: the CPU EP declines a sparse Constant node as written
    model = constant_forms_model(output_constant=True, sparse_form=False)
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations["constant_lifting"] == len(CONSTANT_NODES) + 1
    np.testing.assert_array_equal(got[0], want[0])
    assert list(got[1]) == list(want[1]) and list(got[2]) == list(want[2])


def test_explain_no_longer_lists_constant_nodes(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(constant_forms_model(sparse_form=False).SerializeToString())
    assert main(["explain", str(path), "--providers", "cpu", "--all"]) == 0
    out = capsys.readouterr().out
    assert "constant_lifting (7 rewrites)" in out
    assert not [name for name in CONSTANT_NODES if name in out]
    assert main(["explain", str(path), "--providers", "cpu", "--all", "--no-optimize"]) == 0
    out = capsys.readouterr().out
    assert [name for name in sorted(CONSTANT_NODES) if name not in out] == [], out


def test_in_place_rewrites_the_loaded_proto_and_keeps_the_weights_it_had():
    written = conv_bn_model()  # the batch norm folds away, with the weights only it read
    written.graph.node.append(helper.make_node("Add", ["y", "k"], ["z"], name="add_k"))
    written.graph.output.append(helper.make_tensor_value_info("z", F, [1, 4, 8, 8]))
    written.graph.initializer.extend([const("k", RNG.standard_normal(8)),
                                      const("unread", np.ones(3))])
    written.graph.input.append(helper.make_tensor_value_info("unread", F, [3]))  # IR 3 style
    copied = optimize(load_model(written))
    loaded = load_model(written.SerializeToString())
    original = {t.name: t for t in loaded.proto.graph.initializer}
    rewritten = optimize(loaded, in_place=True)
    assert rewritten.proto is loaded.proto
    kept = list(rewritten.proto.graph.initializer)
    # the same weights, in the same order, as the copying rebuild; the unread one dropped
    assert [t.name for t in kept] == [t.name for t in copied.proto.graph.initializer]
    assert not {"unread", "s", "bb", "m", "v"} & {t.name for t in kept}
    assert [i.name for i in rewritten.proto.graph.input] == ["x"]  # an unread weight's goes too
    # a weight the rewrite still reads is the very message loading parsed, not a copy
    assert [t for t in kept if t.name == "k"][0] is original["k"]
    assert [n.name for n in rewritten.graph.nodes] == [n.name for n in copied.graph.nodes]
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    want = onnxruntime.InferenceSession(written.SerializeToString(),
                                        providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = InferenceSession(rewritten, providers=["cpu"]).run(None, {"x": x})
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_without_in_place_the_model_as_loaded_is_left_as_it_was():
    written = conv_bn_model()
    loaded = load_model(written.SerializeToString())
    before = loaded.proto.SerializeToString()
    optimized = optimize(loaded)
    assert optimized.proto is not loaded.proto
    assert loaded.proto.SerializeToString() == before
    assert [n.op_type for n in loaded.graph.nodes] == ["Conv", "BatchNormalization", "Relu"]


def test_a_fusion_keeps_the_type_and_shape_of_every_value_that_survives():
    model = gelu_model("half_first")
    model.graph.node.append(helper.make_node("Neg", ["y"], ["untyped"], name="neg"))
    model.graph.output.append(helper.make_value_info("untyped", onnx.TypeProto()))
    written = load_model(model)
    fused = optimize(written)
    assert fused.optimizations == {"gelu_fusion": 1}
    assert [n.op_type for n in fused.graph.nodes] == ["Gelu", "Neg"]
    # an output the model declares without a type keeps the type inference gave it
    assert fused.graph.values["untyped"].shape == (2, 16)
    for name, value in fused.graph.values.items():
        before = written.graph.values[name]
        assert (value.kind, value.dtype, value.shape) == (before.kind, before.dtype, before.shape)
    assert fused.graph.values["y"].shape == (2, 16)


def add_chain_model(n):
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"a{i - 1}", f"c{i}"],
                              ["y" if i == n - 1 else f"a{i}"], name=f"add{i}") for i in range(n)]
    inits = [const(f"c{i}", RNG.standard_normal(4)) for i in range(n)]
    return make_model(nodes, [("x", F, [4])], [("y", F, [4])], initializers=inits)


def light_model(name):
    from ep_host.testing import models

    return models.with_random_weights(onnx.load(models.light_model_path(name)))


GATED_MODELS = {
    "conv_bn": lambda: conv_bn_model(), "conv_bn_read": lambda: conv_bn_model(True),
    "gelu": lambda: gelu_model("half_first"), "gelu_last": lambda: gelu_model("half_last"),
    "tanh_gelu_pow": lambda: tanh_gelu_model("pow", "half_first"),
    "tanh_gelu_mul": lambda: tanh_gelu_model("mul", "half_last"),
    "silu": lambda: silu_model(["x", "s"]), "constants": lambda: constant_forms_model(True),
    "add_chain": lambda: add_chain_model(5),
    "squeezenet": lambda: light_model("squeezenet"), "resnet50": lambda: light_model("resnet50"),
    "inception_v2": lambda: light_model("inception_v2"),
}


@pytest.mark.parametrize("name", sorted(GATED_MODELS))
def test_a_pass_is_left_out_only_where_it_would_find_nothing(name):
    """Every pass run in order on the whole graph, none left out: each that changes something
    is one passes_that_may_apply keeps, and optimize's result is the same."""
    from ep_host.rewriter import Rewriter

    model = load_model(GATED_MODELS[name]())
    kept = passes_that_may_apply(model.graph, list(DEFAULT_PASSES))
    rw = Rewriter(model)
    changed = {p: count for p in DEFAULT_PASSES if (count := PASSES[p](rw))}
    assert set(changed) <= set(kept)
    assert optimize(load_model(GATED_MODELS[name]())).optimizations == changed


def test_a_graph_with_none_of_the_ops_the_passes_start_from_is_returned_as_it_is():
    model = load_model(add_chain_model(50))
    assert passes_that_may_apply(model.graph, list(DEFAULT_PASSES)) == []
    assert optimize(model) is model
    folded = load_model(make_model(
        [helper.make_node("Neg", ["c"], ["n"], name="neg"),
         helper.make_node("Add", ["x", "n"], ["y"], name="add")],
        [("x", F, [4])], [("y", F, [4])], initializers=[const("c", RNG.standard_normal(4))]))
    assert passes_that_may_apply(folded.graph, list(DEFAULT_PASSES)) == ["constant_folding"]
    assert optimize(folded).optimizations == {"constant_folding": 1}


@pytest.mark.parametrize("name", sorted(GATED_MODELS))
def test_no_pass_edits_the_nodes_it_was_given(name):
    """The rewriter hands passes the loaded model's own node messages: every pass that rewrites
    one edits a copy, so the model a copying rewrite started from is left as it was."""
    loaded = load_model(GATED_MODELS[name]())
    before = [n.SerializeToString() for n in loaded.proto.graph.node]
    optimize(loaded)
    assert [n.SerializeToString() for n in loaded.proto.graph.node] == before


def test_the_rewriters_first_index_is_the_one_its_nodes_give():
    """The index built from the loaded views (producers; readers of values that are not
    constants) is the one reading each node's protobuf gives: a Constant's output, a value
    read twice by one node, an omitted output and a body reading an outer value."""
    from ep_host.rewriter import Rewriter

    then = helper.make_graph([helper.make_node("Add", ["m", "x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, [2])])
    nodes = [helper.make_node("Constant", [], ["k"], value=const("kv", [1.0, 2.0])),
             helper.make_node("Mul", ["x", "x"], ["m"]),
             helper.make_node("Add", ["m", "k"], ["a"]),
             helper.make_node("Dropout", ["a"], ["d", ""]),
             helper.make_node("ReduceSum", ["d"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    model = make_model(nodes, [("x", F, [2])], [("y", F, [2])],
                       initializers=[const("zero", 0.0)])
    rw = Rewriter(load_model(model))
    fast = dict(rw.producer), {k: [id(n) for n in v] for k, v in rw.consumers.items()}
    rw.producer, rw.consumers = {}, {}
    for n in rw.nodes:
        rw._link(n)
    assert fast[0].keys() == rw.producer.keys()
    assert all(fast[0][k] is rw.producer[k] for k in fast[0])
    assert fast[1] == {k: [id(n) for n in v] for k, v in rw.consumers.items()}
    assert len(fast[1]["x"]) == 4  # Mul twice, the If once per branch reading it
    assert "k" not in fast[1] and "zero" not in fast[1]  # constants: no readers kept


def column_products_model(opset, columns, *, middle=None, keepdims=1, also_read=None):
    """Concat along axis 1 of ReduceProd(ArrayFeatureExtractor(x, columns[i])) over axis 1, as
    skl2onnx writes PolynomialFeatures (axes as an input from opset 18, an attribute before);
    ``middle``: a position where x itself is concatenated between the products; ``also_read``:
    a product that the graph also outputs."""
    nodes, concat = [], []
    inits = [numpy_helper.from_array(np.array([1], np.int64), "axis")]
    for i, cols in enumerate(columns):
        inits.append(numpy_helper.from_array(np.array(cols, np.int64), f"c{i}"))
        nodes.append(helper.make_node("ArrayFeatureExtractor", ["x", f"c{i}"], [f"col{i}"],
                                      name=f"afe{i}", domain="ai.onnx.ml"))
        axes = {"inputs": [f"col{i}", "axis"]} if opset >= 18 else {
            "inputs": [f"col{i}"], "axes": [1]}
        nodes.append(helper.make_node("ReduceProd", axes.pop("inputs"), [f"p{i}"],
                                      name=f"prod{i}", keepdims=keepdims, **axes))
        concat.append(f"p{i}")
    if middle is not None:
        concat.insert(middle, "x")
    nodes.append(helper.make_node("Concat", concat, ["y"], axis=1, name="concat"))
    width = sum(1 for _ in columns) + (4 if middle is not None else 0)
    outputs = [("y", F, [None, width])]
    if also_read is not None:
        outputs.append((f"p{also_read}", F, [None, 1]))
    return make_model(nodes, [("x", F, [None, 4])], outputs, opset=opset, initializers=inits,
                      domains=[("ai.onnx.ml", 3)])


SQUARES = [[i, j] for i in range(4) for j in range(i, 4)]


@pytest.mark.parametrize("opset", [13, 18])
def test_column_products_become_one_gather_and_one_product_per_run(opset):
    columns = [[0], [1], [2], [3], *SQUARES, [0, 1, 2], [3, 3, 1]]
    model = column_products_model(opset, columns, middle=2)
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    # runs: [0], [1] | x | [2], [3] | ten pairs | two triples
    assert session.model.optimizations == {"product_features_fusion": 4}
    ops = [n.op_type for n in session.placement.table.nodes]
    assert ops.count("Gather") == 4 and ops.count("ReduceProd") == 4
    assert "ArrayFeatureExtractor" not in ops
    np.testing.assert_array_equal(got[0], want[0])  # the same products, bit for bit
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got[0], ort.run(None, {"x": x})[0], rtol=1e-6)
    np.testing.assert_array_equal(got[0][:, 2:6], x)
    np.testing.assert_array_equal(got[0][:, 8], x[:, 0] * x[:, 0])


def test_column_products_not_fused_where_the_pattern_is_not_exact():
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    also = column_products_model(18, SQUARES[:3], also_read=1)  # p1 is an output too
    session, got, want = run_both(also, {"x": x})
    assert session.model.optimizations == {}  # runs of one on either side of p1
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    dropped = column_products_model(18, SQUARES[:3], keepdims=0)  # [N] products: not these
    assert optimize(load_model(dropped)).optimizations == {}
    negative = column_products_model(18, [[0, -1], [1, 2]])
    assert optimize(load_model(negative)).optimizations == {}


def forest_node(name, x, out, trees, targets=1, **settings):
    """A TreeEnsembleRegressor of ``trees`` random stumps over 4 features, each voting for one
    of ``targets`` targets (tree t for target t % targets), with base values."""
    attrs = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids",
                             "nodes_modes", "nodes_values", "nodes_truenodeids",
                             "nodes_falsenodeids", "target_treeids", "target_nodeids",
                             "target_ids", "target_weights")}
    for t in range(trees):
        for node, mode, feature, value, true, false in (
                (0, "BRANCH_LEQ", int(RNG.integers(4)), float(RNG.standard_normal()), 1, 2),
                (1, "LEAF", 0, 0.0, 0, 0), (2, "LEAF", 0, 0.0, 0, 0)):
            for key, v in zip(("nodes_treeids", "nodes_nodeids", "nodes_modes",
                               "nodes_featureids", "nodes_values", "nodes_truenodeids",
                               "nodes_falsenodeids"), (t, node, mode, feature, value, true, false),
                              strict=True):
                attrs[key].append(v)
        for leaf in (1, 2):
            attrs["target_treeids"].append(t)
            attrs["target_nodeids"].append(leaf)
            attrs["target_ids"].append(t % targets)
            attrs["target_weights"].append(float(RNG.standard_normal()))
    base = [float(v) for v in RNG.standard_normal(targets)]
    return helper.make_node("TreeEnsembleRegressor", [x], [out], name=name,
                            domain="ai.onnx.ml", n_targets=targets, base_values=base,
                            **attrs, **settings)


def forests_model(forests, *, middle=False, output_one=False):
    """x [N, 4] -> each forest (trees, targets, settings) -> Concat along axis 1 -> y; with
    ``middle``, x itself between the first two forests; with ``output_one``, the first
    forest's output is a graph output too."""
    nodes, concat, width = [], [], 0
    for i, (trees, targets, settings) in enumerate(forests):
        nodes.append(forest_node(f"forest{i}", "x", f"f{i}", trees, targets, **settings))
        concat.append(f"f{i}")
        width += targets
    if middle:
        concat.insert(1, "x")
        width += 4
    nodes.append(helper.make_node("Concat", concat, ["y"], axis=1, name="concat"))
    outputs = [("y", F, [None, width])]
    if output_one:
        outputs.append(("f0", F, [None, forests[0][1]]))
    return make_model(nodes, [("x", F, [None, 4])], outputs, domains=[("ai.onnx.ml", 1)])


def assert_same_as_written_and_onnxruntime(model, x):
    session, got, want = run_both(model, {"x": x})
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    for g, w, o in zip(got, want, ort.run(None, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, w)  # every target sums the same votes, in order
        np.testing.assert_allclose(g, o, rtol=1e-6, atol=1e-6)
    return session


def test_sibling_forests_read_by_one_concat_become_one_forest():
    x = RNG.standard_normal((9, 4)).astype(np.float32)
    five = forests_model([(3, 1, {})] * 5)  # AdaBoostRegressor's shape: one target each
    session = assert_same_as_written_and_onnxruntime(five, x)
    assert session.model.optimizations == {"tree_ensemble_merging": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["TreeEnsembleRegressor"]
    mixed = forests_model([(4, 2, {}), (2, 1, {}), (5, 3, {})], middle=True)
    session = assert_same_as_written_and_onnxruntime(mixed, x)
    assert session.model.optimizations == {"tree_ensemble_merging": 1}  # the last two only
    assert [n.op_type for n in session.placement.table.nodes] == [
        "TreeEnsembleRegressor", "TreeEnsembleRegressor", "Concat"]


@pytest.mark.parametrize("settings", [{"aggregate_function": "AVERAGE"},
                                      {"post_transform": "LOGISTIC"}])
def test_forests_that_do_not_only_sum_or_are_read_elsewhere_are_not_merged(settings):
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    averaging = forests_model([(3, 1, settings), (2, 1, settings)])
    assert optimize(load_model(averaging)).optimizations == {}
    read = forests_model([(3, 1, {}), (2, 1, {})], output_one=True)
    session = assert_same_as_written_and_onnxruntime(read, x)
    assert session.model.optimizations == {}


def test_a_forest_voting_for_a_target_it_does_not_have_is_not_merged():
    stray = forests_model([(3, 1, {}), (2, 1, {})])
    forest = stray.graph.node[0]
    ids = next(a for a in forest.attribute if a.name == "target_ids")
    ids.ints[0] = 1  # target 1 of a one-target forest: the next forest's, once renumbered
    assert optimize(load_model(stray)).optimizations == {}


def classifier_node(name, x, label, scores, trees, classes=3, **extra):
    """A TreeEnsembleClassifier of ``trees`` random depth-2 trees over 4 features (tree ids
    2, 3, ...: not from 0), every leaf voting for every class (for class 0 of two)."""
    attrs = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids",
                             "nodes_modes", "nodes_values", "nodes_truenodeids",
                             "nodes_falsenodeids", "class_treeids", "class_nodeids",
                             "class_ids", "class_weights")}
    for t in range(2, trees + 2):
        for node, mode, true, false in ((0, "BRANCH_LEQ", 1, 2), (1, "BRANCH_LT", 3, 4),
                                        (2, "LEAF", 0, 0), (3, "LEAF", 0, 0), (4, "LEAF", 0, 0)):
            row = (t, node, mode, int(RNG.integers(4)), float(RNG.standard_normal()), true,
                   false)
            for key, v in zip(("nodes_treeids", "nodes_nodeids", "nodes_modes",
                               "nodes_featureids", "nodes_values", "nodes_truenodeids",
                               "nodes_falsenodeids"), row, strict=True):
                attrs[key].append(v)
            voting = range(classes) if classes > 2 else [0]  # two: one column, as exported
            for c in voting if mode == "LEAF" else ():
                for key, v in zip(("class_treeids", "class_nodeids", "class_ids",
                                   "class_weights"), (t, node, c, float(RNG.random())),
                                  strict=True):
                    attrs[key].append(v)
    attrs.update(extra)
    return helper.make_node("TreeEnsembleClassifier", [x], [label, scores], name=name,
                            domain="ai.onnx.ml", classlabels_int64s=list(range(classes)),
                            **{k: v for k, v in attrs.items() if v is not None})


def classifiers_model(count=3, opset=17, label_read=False, classes=3, **extra):
    """x [N, 4] -> ``count`` classifiers -> each one's scores: ArgMax (its output a graph
    output) and all of them a Sum (another); ``label_read``: the first one's label is a graph
    output as well; ``extra``: attributes of the last classifier."""
    nodes, outputs = [], []
    for i in range(count):
        nodes.append(classifier_node(f"forest{i}", "x", f"label{i}", f"scores{i}", 2 + i,
                                     classes, **(extra if i == count - 1 else {})))
    for i in range(count):
        nodes.append(helper.make_node("ArgMax", [f"scores{i}"], [f"best{i}"], axis=1,
                                      name=f"argmax{i}"))
        outputs.append((f"best{i}", TensorProto.INT64, [None, 1]))
    nodes.append(helper.make_node("Sum", [f"scores{i}" for i in range(count)], ["total"],
                                  name="sum"))
    outputs.append(("total", F, [None, classes]))
    if label_read:
        outputs.append(("label0", TensorProto.INT64, [None]))
    return make_model(nodes, [("x", F, [None, 4])], outputs,
                      domains=[("ai.onnx.ml", 1)], opset=opset)


@pytest.mark.parametrize("opset", [11, 17])  # Split's sizes an attribute, then an input
def test_sibling_classifiers_become_one_forest_and_a_split(opset, tmp_path, capsys):
    x = RNG.standard_normal((9, 4)).astype(np.float32)
    model = classifiers_model(4, opset)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"tree_classifier_merging": 1}
    assert [n.op_type for n in session.placement.table.nodes][:2] == [
        "TreeEnsembleRegressor", "Split"]
    assert "TreeEnsembleClassifier" not in [n.op_type for n in session.placement.table.nodes]
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    for g, w, o in zip(got, want, ort.run(None, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, w)  # every score sums the same votes, in order
        np.testing.assert_allclose(g, o, rtol=1e-6, atol=1e-6)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["why", str(path), "forest2", "--providers", "cpu"]) == 0
    assert "node 'forest2' is part of 'forest0::TreeEnsembleRegressor'" in (
        capsys.readouterr().err)


@pytest.mark.parametrize("kind", ["one", "label read", "two classes", "base values",
                                  "transform", "leaf without votes", "other lists"])
def test_classifiers_that_do_not_only_sum_votes_into_scores_are_not_merged(kind):
    extra = {"base_values": [0.1, 0.2, 0.3]} if kind == "base values" else {
        "post_transform": "SOFTMAX"} if kind == "transform" else {
        "nodes_hitrates": [1.0] * 15} if kind == "other lists" else {}
    model = classifiers_model(1 if kind == "one" else 2, label_read=kind == "label read",
                              classes=2 if kind == "two classes" else 3, **extra)
    if kind == "leaf without votes":
        forest = model.graph.node[1]
        nodeids = next(a for a in forest.attribute if a.name == "class_nodeids").ints
        keep = [i for i, n in enumerate(nodeids) if not (i < 6 and n == 2)]  # first leaf's
        for a in forest.attribute:
            if a.name.startswith("class_") and a.name != "classlabels_int64s":
                values = a.ints if a.ints else a.floats
                kept = [values[i] for i in keep]
                del values[:]
                values.extend(kept)
        # a row reaching that leaf has no label: the run is refused either way
        assert optimize(load_model(model)).optimizations == {}
        return
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert "tree_classifier_merging" not in session.model.optimizations
    assert "TreeEnsembleClassifier" in [n.op_type for n in session.placement.table.nodes]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def samme_model(count=4, classes=3, *, opset=17, change=None):
    """x [N, 4] -> ``count`` classifiers whose scores vote as skl2onnx's AdaBoostClassifier
    (SAMME) writes it: per estimator ArgMax (kept), Equal to the class indices [1, C], Where (a
    ConstantOfShape of 1 of the first scores' Shape there, -1/(C-1) elsewhere), Mul by its
    weight; a Sum of the votes and, from the same Shape, a ConstantOfShape of 0 (both graph
    outputs). ``change``: one way to leave the pattern."""
    nodes = [classifier_node(f"forest{i}", "x", f"label{i}", f"scores{i}", 2 + i, classes)
             for i in range(count)]
    nodes += [helper.make_node("Shape", ["scores0"], ["shape"], name="shape"),
              helper.make_node("ConstantOfShape", ["shape"], ["one"], name="ones",
                               value=numpy_helper.from_array(np.ones(1, np.float32))),
              helper.make_node("ConstantOfShape", ["shape"], ["zero"], name="zeros",
                               value=numpy_helper.from_array(np.zeros(1, np.float32)))]
    inits = [numpy_helper.from_array(np.arange(classes, dtype=np.int64)[None], "classes"),
             const("elsewhere", -1.0 / (classes - 1))]
    for i in range(count):
        select = {"select_last_index": 1} if change == "last index" and i == 1 else {}
        nodes += [helper.make_node("ArgMax", [f"scores{i}"], [f"best{i}"], axis=1,
                                   name=f"argmax{i}", **select),
                  helper.make_node("Equal", [f"best{i}", "classes"], [f"equal{i}"],
                                   name=f"equal{i}"),
                  helper.make_node("Where", [f"equal{i}", "one", "elsewhere"], [f"picked{i}"],
                                   name=f"where{i}"),
                  helper.make_node("Mul", [f"picked{i}", f"weight{i}"], [f"vote{i}"],
                                   name=f"mul{i}")]
        inits.append(const(f"weight{i}", RNG.uniform(0.2, 2.0)))
    votes = [f"vote{i}" for i in range(count)]
    if change == "other order":
        votes[0], votes[1] = votes[1], votes[0]
    nodes.append(helper.make_node("Sum", votes, ["total"], name="sum"))
    outputs = [("total", F, [None, classes]), ("zero", F, [None, classes])]
    if change == "vote read":
        outputs.append(("picked2", F, [None, classes]))
    inputs = [("x", F, [None, 4])]
    if change == "weight an input":
        inits = [t for t in inits if t.name != "weight0"]
        inputs.append(("weight0", F, []))
    return make_model(nodes, inputs, outputs, initializers=inits, domains=[("ai.onnx.ml", 1)],
                      opset=opset)


@pytest.mark.parametrize(("count", "classes", "opset"), [(2, 3, 11), (4, 3, 17), (12, 5, 17)])
def test_samme_votes_become_six_nodes_that_sum_in_estimator_order(count, classes, opset):
    x = RNG.standard_normal((300, 4)).astype(np.float32)
    model = samme_model(count, classes, opset=opset)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"tree_classifier_merging": 1,
                                           "samme_vote_batching": 1}
    ops = [n.op_type for n in session.model.graph.nodes]
    assert sorted(ops) == sorted(["TreeEnsembleRegressor", "Split", "Shape", "ConstantOfShape",
                                  "Reshape", "ArgMax", "Equal", "Where", "Mul", "ReduceSum"])
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
    for g, w, o in zip(got, want, ort.run(None, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, w)  # each class's votes added in estimator order
        np.testing.assert_allclose(g, o, rtol=1e-6, atol=1e-6)
    empty = {"x": x[:0]}
    assert session.run(None, empty)[0].shape == (0, classes)


@pytest.mark.parametrize("change", ["last index", "other order", "vote read",
                                    "weight an input", "separate forests"])
def test_votes_that_differ_from_samme_are_left_as_written(change):
    x = RNG.standard_normal((6, 4)).astype(np.float32)
    feeds = {"x": x}
    kwargs = {}
    if change == "separate forests":  # each estimator's scores its own forest's, no Split
        model = samme_model(3, 3)
        kwargs = {"disable_optimizations": ["tree_classifier_merging"]}
    else:
        model = samme_model(3, 3, change=change)
    if change == "weight an input":
        feeds["weight0"] = np.float32(0.7)
    session, got, want = run_both(model, feeds, **kwargs)
    assert "samme_vote_batching" not in session.model.optimizations
    assert "Sum" in [n.op_type for n in session.model.graph.nodes]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def argmax_cast_model(to=TensorProto.INT64, also_read=False, source_output=False):
    """x [N, 3] -> ArgMax -> a (int64) -> Cast(to) -> label, a graph output; ``also_read``: a
    Neg reads a too (its output another graph output); ``source_output``: a is one as well."""
    nodes = [helper.make_node("ArgMax", ["x"], ["a"], axis=1, keepdims=0, name="argmax"),
             helper.make_node("Cast", ["a"], ["label"], to=to, name="cast")]
    outputs = [("label", to, [None])]
    if also_read:
        nodes.append(helper.make_node("Neg", ["a"], ["n"], name="neg"))
        outputs.append(("n", TensorProto.INT64, [None]))
    if source_output:
        outputs.append(("a", TensorProto.INT64, [None]))
    return make_model(nodes, [("x", F, [None, 3])], outputs)


def test_a_cast_to_the_type_it_has_writing_a_graph_output_is_dropped(tmp_path, capsys):
    x = RNG.standard_normal((6, 3)).astype(np.float32)
    model = argmax_cast_model()
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"cast_elimination": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["ArgMax"]
    assert session.get_outputs()[0].name == "label" and got[0].dtype == np.int64
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[0], x.argmax(axis=1))
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["why", str(path), "cast", "--providers", "cpu"]) == 0
    assert "node 'cast' is part of 'argmax'" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["other type", "input read elsewhere", "input an output"])
def test_a_cast_that_changes_something_or_whose_input_is_read_elsewhere_stays(kind):
    model = argmax_cast_model(to=TensorProto.INT32 if kind == "other type" else TensorProto.INT64,
                              also_read=kind == "input read elsewhere",
                              source_output=kind == "input an output")
    assert_left_as_written(model, "cast_elimination", "Cast")


def assert_left_as_written(model, pass_name, op):
    """``pass_name`` did not change ``model`` (x [N, 3] float): ``op`` is still placed, and the
    outputs equal those of the model as written."""
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert pass_name not in session.model.optimizations
    assert op in [n.op_type for n in session.placement.table.nodes]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_a_cast_to_the_type_it_has_read_by_nodes_is_read_through(tmp_path, capsys):
    """x -> Cast(float) -> c, read by a Neg and a Relu: both read x."""
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=F, name="cast"),
             helper.make_node("Neg", ["c"], ["n"], name="neg"),
             helper.make_node("Relu", ["c"], ["r"], name="relu")]
    model = make_model(nodes, [("x", F, [None, 3])], [("n", F, [None, 3]), ("r", F, [None, 3])])
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"cast_elimination": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["Neg", "Relu"]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["why", str(path), "cast", "--providers", "cpu"]) == 0
    assert "node 'cast' is part of 'neg'" in capsys.readouterr().err


def test_a_fused_node_nobody_claims_reads_through_a_dropped_cast_too(host):
    """Cast(float) of x, then MatMul and Add (one Gemm): a provider without Gemm runs the
    MatMul and the Add, the MatMul reading x."""
    class Matrices(InlineProvider):
        FUNCS = {**InlineProvider.FUNCS, "MatMul": np.matmul}

    host.register(Matrices("plain", ops=("MatMul", "Add")), name="plain")
    nodes = [helper.make_node("Cast", ["x"], ["c"], to=F, name="cast"),
             helper.make_node("MatMul", ["c", "w"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["y"], name="add")]
    w, b = RNG.standard_normal((8, 5)), RNG.standard_normal(5)
    model = make_model(nodes, [("x", F, [3, 8])], [("y", F, [3, 5])],
                       initializers=[const("w", w), const("b", b)])
    session = InferenceSession(model.SerializeToString(), providers=["plain"], host=host)
    assert session.model.optimizations == {"matmul_add_fusion": 1, "cast_elimination": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["MatMul", "Add"]
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    want = x @ w.astype(np.float32) + b.astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0], want, rtol=1e-5, atol=1e-5)


def label_model(classes, before=(), after=(TensorProto.INT64,), *, reshape=(-1,),
                keepdims=1, read=None, **argmax):
    """skl2onnx's label: x [N, 3] -> ArgMax (axis 1) -> i -> ArrayFeatureExtractor(classes, i)
    -> Casts ``before`` -> Reshape(``reshape``) -> Casts ``after``, the last writing label;
    ``read``: a value of the chain before that also made a graph output."""
    nodes = [helper.make_node("ArgMax", ["x"], ["i"], axis=1, keepdims=keepdims, name="argmax",
                              **argmax),
             helper.make_node("ArrayFeatureExtractor", ["classes", "i"], ["c0"],
                              domain="ai.onnx.ml", name="afe")]
    value, k = "c0", 0
    for stage in (*[("Cast", to) for to in before], ("Reshape", None),
                  *[("Cast", to) for to in after]):
        k += 1
        if stage[0] == "Cast":
            nodes.append(helper.make_node("Cast", [value], [f"c{k}"], to=stage[1], name=f"cast{k}"))
        elif reshape is not None:
            nodes.append(helper.make_node("Reshape", [value, "shape"], [f"c{k}"], name="reshape"))
        else:
            k -= 1
            continue
        value = f"c{k}"
    nodes[-1].output[0] = "label"
    out_type = after[-1] if after else before[-1] if before else helper.np_dtype_to_tensor_dtype(
        np.asarray(classes).dtype)
    outputs = [("label", out_type, None)]
    if read is not None:
        outputs.append((read, helper.np_dtype_to_tensor_dtype(np.asarray(classes).dtype), None))
    inits = [numpy_helper.from_array(np.asarray(classes), "classes"),
             numpy_helper.from_array(np.array(reshape or (-1,), np.int64), "shape")]
    return make_model(nodes, [("x", F, [None, 3])], outputs, initializers=inits,
                      domains=[("ai.onnx.ml", 1)])


@pytest.mark.parametrize("classes, before, after", [
    (np.array([3, 7, 11], np.int32), (), (TensorProto.INT64, TensorProto.INT64)),  # Perceptron
    (np.array([0, 1, 2], np.int64), (TensorProto.FLOAT,), (TensorProto.INT64,)),  # GaussianNB
    (np.array([0.5, -2.0, 4.25], np.float32), (), ()),
])
def test_a_classifiers_label_lookup_becomes_an_argmax_and_a_gather(classes, before, after,
                                                                   tmp_path, capsys):
    x = RNG.standard_normal((9, 3)).astype(np.float32)
    x[4] = [1.0, 1.0, 0.5]  # a tie: the first index
    model = label_model(classes, before, after)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"class_label_gather": 1}
    assert [n.op_type for n in session.placement.table.nodes] == ["ArgMax", "Gather"]
    ort = onnxruntime.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w, o in zip(got, want, ort, strict=True):
        assert g.dtype == w.dtype == o.dtype and g.shape == w.shape == o.shape == (9,)
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(g, o)
    np.testing.assert_array_equal(got[0], classes[x.argmax(axis=1)])
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    assert main(["why", str(path), "reshape", "--providers", "cpu"]) == 0
    assert "node 'reshape' is part of 'afe::Gather'" in capsys.readouterr().err


def test_the_label_lookup_keeps_argmax_select_last_index():
    x = np.array([[1.0, 1.0, 0.5], [0.0, 2.0, 2.0], [3.0, 1.0, 3.0]], np.float32)
    model = label_model(np.array([10, 20, 30], np.int64), select_last_index=1)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"class_label_gather": 1}
    np.testing.assert_array_equal(got[0], [20, 30, 30])
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("kind", ["rounding cast", "wrapping cast"])
def test_a_cast_that_would_change_a_class_stays_after_the_gather(kind):
    classes = np.array([1, 2, 300], np.int64)
    after = (TensorProto.INT8, TensorProto.INT64)
    if kind == "rounding cast":
        classes, after = np.array([0.5, 1.0, 2.0], np.float32), (TensorProto.INT64,)
    model = label_model(classes, (), after)
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    session, got, want = run_both(model, {"x": x})
    assert session.model.optimizations == {"class_label_gather": 1}
    assert [n.op_type for n in session.placement.table.nodes] == [
        "ArgMax", "Gather", *["Cast"] * len(after)]
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("kind", ["bool cast", "no reshape", "other reshape",
                                  "argmax keepdims 0", "index read elsewhere",
                                  "labels read elsewhere"])
def test_a_label_lookup_that_differs_from_the_pattern_stays_as_written(kind):
    classes = np.array([1, 2, 300], np.int64)
    before, after, extra = (), (TensorProto.INT64,), {}
    if kind == "bool cast":
        before = (TensorProto.BOOL,)
    elif kind == "no reshape":
        extra["reshape"] = None
    elif kind == "other reshape":
        extra["reshape"] = (1, -1)
    elif kind == "argmax keepdims 0":
        extra["keepdims"] = 0
    elif kind == "index read elsewhere":
        extra["read"] = "i"
    else:
        extra["read"] = "c0"
    assert_left_as_written(label_model(classes, before, after, **extra), "class_label_gather",
                           "ArrayFeatureExtractor")


def test_the_skl2onnx_passes_run_only_where_their_ai_onnx_ml_ops_are():
    names = list(DEFAULT_PASSES)
    forests = passes_that_may_apply(load_model(forests_model([(3, 1, {})] * 2)).graph, names)
    products = passes_that_may_apply(load_model(column_products_model(18, SQUARES)).graph, names)
    assert "tree_ensemble_merging" in forests and "product_features_fusion" not in forests
    assert "product_features_fusion" in products and "tree_ensemble_merging" not in products
    concat = make_model([helper.make_node("Concat", ["x", "x"], ["y"], axis=1)],
                        [("x", F, [2, 3])], [("y", F, [2, 6])])
    assert passes_that_may_apply(load_model(concat).graph, names) == []
