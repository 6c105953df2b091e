"""Random generators on the CPU EP: declined by default, drawn from numpy when opted in."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import cpu_answer, make_model, run_ep_host
from onnx import TensorProto, helper

F, D = TensorProto.FLOAT, TensorProto.DOUBLE


@pytest.fixture
def opted_in(monkeypatch):
    monkeypatch.setenv("EP_HOST_CPU_RANDOM", "1")


def generator_model(op, opset=22, **attrs):
    node = helper.make_node(op, [], ["y"], **attrs)
    out = attrs.get("dtype", F)
    return make_model([node], [], [("y", out, None)], opset=opset)


def like_model(op, x_type=F, out=F, shape=(4, 5), opset=22, **attrs):
    node = helper.make_node(op, ["x"], ["y"], **attrs)
    return make_model([node], [("x", x_type, list(shape))], [("y", out, None)], opset=opset)


def test_declined_by_default(monkeypatch):
    monkeypatch.delenv("EP_HOST_CPU_RANDOM", raising=False)
    answer = cpu_answer(like_model("Bernoulli"))
    assert not answer.is_supported and answer.code == "op"
    assert "EP_HOST_CPU_RANDOM=1" in answer.reason


@pytest.mark.parametrize("opset", [1, 22])
def test_random_uniform_range_shape_and_type(opted_in, opset):
    model = generator_model("RandomUniform", opset=opset, shape=[200, 50], low=-2.0, high=3.0,
                            dtype=D)
    (y,) = run_ep_host(model, {})
    assert y.shape == (200, 50) and y.dtype == np.float64
    assert y.min() >= -2.0 and y.max() < 3.0 and abs(y.mean() - 0.5) < 0.1


def test_random_normal_moments(opted_in):
    (y,) = run_ep_host(generator_model("RandomNormal", shape=[20000], mean=3.0, scale=0.5), {})
    assert y.dtype == np.float32
    assert abs(y.mean() - 3.0) < 0.02 and abs(y.std() - 0.5) < 0.02


def test_seed_makes_a_run_repeatable(opted_in):
    model = generator_model("RandomNormal", shape=[8], seed=7.0)
    first, second = run_ep_host(model, {}), run_ep_host(model, {})
    np.testing.assert_array_equal(first[0], second[0])


def test_like_ops_copy_shape_and_type(opted_in):
    model = like_model("RandomUniformLike", x_type=D, out=D)
    (y,) = run_ep_host(model, {"x": np.zeros((4, 5))})
    assert y.shape == (4, 5) and y.dtype == np.float64
    model = like_model("RandomNormalLike", x_type=TensorProto.INT32, out=F, dtype=F)
    (y,) = run_ep_host(model, {"x": np.zeros((4, 5), np.int32)})
    assert y.dtype == np.float32


@pytest.mark.parametrize("opset", [15, 22])
def test_bernoulli_extremes_are_certain(opted_in, opset):
    model = like_model("Bernoulli", shape=(6,), out=TensorProto.INT32, opset=opset,
                       dtype=TensorProto.INT32)
    (y,) = run_ep_host(model, {"x": np.array([0, 1, 0, 1, 1, 0], np.float32)})
    assert y.dtype == np.int32 and y.tolist() == [0, 1, 0, 1, 1, 0]


def test_multinomial_samples_only_possible_classes(opted_in):
    model = like_model("Multinomial", shape=(2, 4), out=TensorProto.INT64, sample_size=500,
                       dtype=TensorProto.INT64)
    with np.errstate(divide="ignore"):
        logits = np.log(np.array([[0, 0.25, 0, 0.75], [1, 0, 0, 0]], np.float32))
    (y,) = run_ep_host(model, {"x": logits})
    assert y.shape == (2, 500) and y.dtype == np.int64
    assert set(y[0].tolist()) == {1, 3} and set(y[1].tolist()) == {0}
    assert 0.65 < (y[0] == 3).mean() < 0.85
