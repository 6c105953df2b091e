"""The ai.onnx.preview.training optimizers (Adagrad, Adam, Momentum) on the CPU EP, against the
spec's pseudo code (onnxruntime's CPU build has no such kernels)."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import cpu_answer, make_model, run_ep_host
from onnx import TensorProto, helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64
TRAINING = "ai.onnx.preview.training"


def optimizer_model(op, groups, n, **attrs):
    names = [f"{g}{i}" for g in groups for i in range(n)]
    outs = [f"{g}{i}_new" for g in groups if g != "G" for i in range(n)]
    node = helper.make_node(op, ["R", "T", *names], outs, domain=TRAINING, **attrs)
    inputs = [("R", F, []), ("T", I64, [])] + [(x, F, [3]) for x in names]
    return make_model([node], inputs, [(o, F, None) for o in outs],
                      domains=[(TRAINING, 1)])


@pytest.fixture
def state(rng):
    return {f"{g}{i}": rng.standard_normal(3).astype(np.float32) ** (2 if g == "H" else 1)
            for g in "XGVH" for i in range(2)}


@pytest.mark.parametrize("t", [0, 3])
def test_adagrad_updates_each_tensor(state, t):
    model = optimizer_model("Adagrad", "XGH", 2, decay_factor=0.1, epsilon=1e-5,
                            norm_coefficient=0.01)
    feeds = {k: v for k, v in state.items() if k[0] in "XGH"}
    out = run_ep_host(model, {"R": np.array(0.5, np.float32), "T": np.array(t), **feeds})
    for i in range(2):
        x, g, h = feeds[f"X{i}"], feeds[f"G{i}"], feeds[f"H{i}"]
        g = 0.01 * x + g
        h_new = h + g * g
        np.testing.assert_allclose(out[2 + i], h_new, rtol=1e-6)
        r = 0.5 / (1 + t * 0.1)
        np.testing.assert_allclose(out[i], x - r * g / (np.sqrt(h_new) + 1e-5), rtol=1e-5)


@pytest.mark.parametrize("t", [0, 4])
def test_adam_bias_correction_starts_after_step_0(state, t):
    model = optimizer_model("Adam", "XGVH", 2, alpha=0.9, beta=0.99, epsilon=1e-6,
                            norm_coefficient=0.0, norm_coefficient_post=0.1)
    out = run_ep_host(model, {"R": np.array(0.1, np.float32), "T": np.array(t), **state})
    for i in range(2):
        x, g, v, h = (state[f"{k}{i}"] for k in "XGVH")
        v_new, h_new = 0.9 * v + 0.1 * g, 0.99 * h + 0.01 * g * g
        r = 0.1 * np.sqrt(1 - 0.99 ** t) / (1 - 0.9 ** t) if t else 0.1
        x_new = 0.9 * (x - r * v_new / (np.sqrt(h_new) + 1e-6))
        for got, want in zip(out[i::2], (x_new, v_new, h_new), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum_modes(state, mode):
    model = optimizer_model("Momentum", "XGV", 2, alpha=0.9, beta=0.5, mode=mode,
                            norm_coefficient=0.0)
    feeds = {k: v for k, v in state.items() if k[0] in "XGV"}
    out = run_ep_host(model, {"R": np.array(0.1, np.float32), "T": np.array(2), **feeds})
    x, g, v = feeds["X1"], feeds["G1"], feeds["V1"]
    v_new = 0.9 * v + 0.5 * g
    step = g + 0.9 * v_new if mode == "nesterov" else v_new
    np.testing.assert_allclose(out[1], x - 0.1 * step, rtol=1e-6)
    np.testing.assert_allclose(out[3], v_new, rtol=1e-6)


def test_momentum_declines_an_unknown_mode():
    model = optimizer_model("Momentum", "XGV", 1, alpha=0.9, beta=0.5, mode="heavy",
                            norm_coefficient=0.0)
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"
