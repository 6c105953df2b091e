"""RNN, GRU and LSTM on the CPU EP, against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import (
    assert_matches_onnxruntime,
    cpu_answer,
    make_model,
    run_ep_host,
    run_onnxruntime,
)
from onnx import TensorProto, helper

F = TensorProto.FLOAT
TOL = {"rtol": 1e-4, "atol": 1e-5}
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent_model(op, seq, batch, inp, hidden, *, direction="forward", layout=0,
                    with_lens=False, with_initial=False, peepholes=False, opset=14,
                    elem=F, **attrs):
    dirs = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    x_shape = [batch, seq, inp] if layout else [seq, batch, inp]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    names = ["x", "w", "r", "b", "lens" if with_lens else ""]
    inputs = [("x", elem, x_shape), ("w", elem, [dirs, g * hidden, inp]),
              ("r", elem, [dirs, g * hidden, hidden]), ("b", elem, [dirs, 2 * g * hidden])]
    if with_lens:
        inputs.append(("lens", TensorProto.INT32, [batch]))
    if with_initial:
        names.append("h0")
        inputs.append(("h0", elem, state))
        if op == "LSTM":
            names.append("c0")
            inputs.append(("c0", elem, state))
    if peepholes:
        names += [""] * (7 - len(names)) + ["p"]
        inputs.append(("p", elem, [dirs, 3 * hidden]))
    outputs = ["y", "yh"] + (["yc"] if op == "LSTM" else [])
    node = helper.make_node(op, names, outputs, direction=direction, hidden_size=hidden,
                            **({"layout": layout} if opset >= 14 else {}), **attrs)
    return make_model([node], inputs, [(o, elem, None) for o in outputs], opset=opset)


def feeds_for(model, rng, lens=None, dtype=np.float32):
    feeds = {}
    for vi in model.graph.input:
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "lens":
            feeds["lens"] = np.asarray(lens, dtype=np.int32)
        else:
            feeds[vi.name] = (rng.standard_normal(shape) * 0.7).astype(dtype)
    return feeds


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_directions_lengths_and_initial_states(rng, op, direction):
    model = recurrent_model(op, 5, 3, 4, 6, direction=direction, with_lens=True,
                            with_initial=True)
    assert_matches_onnxruntime(model, feeds_for(model, rng, lens=[5, 2, 3]), **TOL)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_batch_major_layout_transposes_sequence_major(rng, op):
    # onnxruntime has no layout=1: compare with onnxruntime's layout-0 answer, transposed.
    kw = {"direction": "bidirectional", "with_lens": True, "with_initial": True}
    batch_major = recurrent_model(op, 4, 3, 2, 5, layout=1, **kw)
    seq_major = recurrent_model(op, 4, 3, 2, 5, layout=0, **kw)
    feeds = feeds_for(seq_major, rng, lens=[4, 1, 3])
    swapped = {k: np.swapaxes(v, 0, 1) if k in ("x", "h0", "c0") else v
               for k, v in feeds.items()}
    ours = run_ep_host(batch_major, swapped)
    theirs = run_onnxruntime(seq_major, feeds)
    np.testing.assert_allclose(ours[0], np.transpose(theirs[0], (2, 0, 1, 3)), **TOL)
    for a, b in zip(ours[1:], theirs[1:], strict=True):
        np.testing.assert_allclose(a, np.swapaxes(b, 0, 1), **TOL)


def test_lstm_peepholes_clip_and_input_forget(rng):
    model = recurrent_model("LSTM", 4, 2, 3, 5, direction="bidirectional", with_initial=True,
                            peepholes=True, clip=0.6, input_forget=1)
    assert_matches_onnxruntime(model, feeds_for(model, rng), **TOL)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset_and_clip(rng, linear_before_reset):
    model = recurrent_model("GRU", 4, 2, 3, 5, direction="bidirectional", with_initial=True,
                            linear_before_reset=linear_before_reset, clip=0.8)
    assert_matches_onnxruntime(model, feeds_for(model, rng), **TOL)


@pytest.mark.parametrize("activations, alpha, beta", [
    (["LeakyRelu", "HardSigmoid", "Tanh"], [0.1, 0.3], [0.4]),
    (["Sigmoid", "ScaledTanh", "Elu"], [0.9, 0.5], [1.2]),
    (["Affine", "Softsign", "ThresholdedRelu"], [0.5, 0.2], [0.1]),
])
def test_lstm_activations_consume_alphas_in_order(rng, activations, alpha, beta):
    model = recurrent_model("LSTM", 3, 2, 3, 4, activations=activations,
                            activation_alpha=alpha, activation_beta=beta)
    assert_matches_onnxruntime(model, feeds_for(model, rng), **TOL)


def test_rnn_relu_bidirectional(rng):
    model = recurrent_model("RNN", 3, 2, 3, 4, direction="bidirectional",
                            activations=["Relu", "Tanh"])
    assert_matches_onnxruntime(model, feeds_for(model, rng), **TOL)


def test_opset_7_float64(rng):
    # onnxruntime's GRU has no float64: compare with its float32 answer.
    wide = recurrent_model("GRU", 3, 2, 3, 4, opset=7, elem=TensorProto.DOUBLE)
    narrow = recurrent_model("GRU", 3, 2, 3, 4, opset=7)
    feeds = feeds_for(narrow, rng)
    ours = run_ep_host(wide, {k: v.astype(np.float64) for k, v in feeds.items()})
    assert ours[0].dtype == np.float64
    for a, b in zip(ours, run_onnxruntime(narrow, feeds), strict=True):
        np.testing.assert_allclose(a, b, **TOL)


def test_declines_wrong_activation_count():
    model = recurrent_model("GRU", 3, 2, 3, 4, direction="bidirectional",
                            activations=["Sigmoid", "Tanh"])
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
    assert "4 activations are needed" in answer.reason


def test_declines_version_1():
    model = recurrent_model("RNN", 3, 2, 3, 4, opset=6)
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "opset"
    assert "since_version 1" in answer.reason
