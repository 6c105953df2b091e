"""DFT, STFT, the window generators and MelWeightMatrix on the CPU EP."""

from __future__ import annotations

import numpy as np
import pytest
from cpukit import assert_matches_onnxruntime, cpu_answer, make_model, run_ep_host
from onnx import TensorProto, helper, numpy_helper

F, D, I64 = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64
TOL = {"rtol": 1e-4, "atol": 1e-4}


def const(name, value, dtype=np.int64):
    return numpy_helper.from_array(np.asarray(value, dtype=dtype), name)


def dft_model(shape, opset, length=None, axis=None, elem=F, **attrs):
    names, inits = ["x"], []
    if length is not None:
        names.append("n")
        inits.append(const("n", length))
    if opset >= 20 and axis is not None:
        names += [""] * (2 - len(names)) + ["axis"]
        inits.append(const("axis", axis))
    elif axis is not None:
        attrs["axis"] = axis
    node = helper.make_node("DFT", names, ["y"], **attrs)
    return make_model([node], [("x", elem, shape)], [("y", elem, None)], opset=opset,
                      initializers=inits)


@pytest.mark.parametrize("opset", [17, 20])
@pytest.mark.parametrize("last", [1, 2])
@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("length", [None, 5, 12])
def test_dft_full_spectrum(rng, opset, last, inverse, length):
    model = dft_model([2, 8, 3, last], opset, length=length, axis=1, inverse=inverse)
    x = rng.standard_normal([2, 8, 3, last]).astype(np.float32)
    assert_matches_onnxruntime(model, {"x": x}, **TOL)


@pytest.mark.parametrize("axis", [1, 2, -2, -3])
def test_dft_onesided_forward_on_each_axis(rng, axis):
    model = dft_model([2, 6, 7, 1], 20, axis=axis, onesided=1)
    x = rng.standard_normal([2, 6, 7, 1]).astype(np.float32)
    assert_matches_onnxruntime(model, {"x": x}, **TOL)


@pytest.mark.parametrize("length", [None, 10, 11])
def test_dft_onesided_inverse_returns_real_signal(rng, length):
    x = np.fft.rfft(rng.standard_normal([3, 10]), axis=1)
    packed = np.stack([x.real, x.imag], axis=-1).astype(np.float64)
    model = dft_model([3, 6, 2], 20, length=length, axis=1, elem=D, inverse=1, onesided=1)
    (y,) = run_ep_host(model, {"x": packed})
    n = length or 10
    np.testing.assert_allclose(y[..., 0], np.fft.irfft(x, n=n, axis=1), rtol=1e-12, atol=1e-12)


def test_dft_declines_complex_input_to_onesided_forward():
    answer = cpu_answer(dft_model([2, 6, 2], 20, axis=1, onesided=1))
    assert not answer.is_supported and answer.code == "shape"
    assert "takes real input" in answer.reason


def stft_model(signal_shape, step, window=None, length=None, **attrs):
    names, inits = ["signal", "step"], [const("step", step)]
    inputs = [("signal", F, signal_shape)]
    if window is not None:
        names.append("window")
        inputs.append(("window", F, [window]))
    if length is not None:
        names += [""] * (3 - len(names)) + ["length"]
        inits.append(const("length", length))
    node = helper.make_node("STFT", names, ["y"], **attrs)
    return make_model([node], inputs, [("y", F, None)], opset=17, initializers=inits)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft_with_window(rng, onesided):
    model = stft_model([2, 64, 1], 8, window=16, onesided=onesided)
    feeds = {"signal": rng.standard_normal([2, 64, 1]).astype(np.float32),
             "window": np.hanning(16).astype(np.float32)}
    assert_matches_onnxruntime(model, feeds, **TOL)


def test_stft_complex_signal_with_frame_length(rng):
    model = stft_model([1, 40, 2], 5, length=10, onesided=0)
    feeds = {"signal": rng.standard_normal([1, 40, 2]).astype(np.float32)}
    (y,) = run_ep_host(model, feeds)
    z = feeds["signal"][0, :, 0] + 1j * feeds["signal"][0, :, 1]
    frames = np.stack([np.fft.fft(z[i * 5:i * 5 + 10]) for i in range(7)])
    np.testing.assert_allclose(y[0], np.stack([frames.real, frames.imag], -1), **TOL)


def test_stft_declines_onesided_complex_signal():
    answer = cpu_answer(stft_model([1, 40, 2], 5, length=10))
    assert not answer.is_supported and answer.code == "attribute"


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
@pytest.mark.parametrize("out", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_windows(op, periodic, out):
    node = helper.make_node(op, ["n"], ["y"], periodic=periodic, output_datatype=out)
    model = make_model([node], [("n", I64, [])], [("y", out, None)], opset=17)
    assert_matches_onnxruntime(model, {"n": np.array(13, np.int64)}, rtol=1e-6, atol=1e-7)


def test_window_declines_string_output():
    node = helper.make_node("HannWindow", ["n"], ["y"], output_datatype=TensorProto.STRING)
    model = make_model([node], [("n", I64, [])], [("y", TensorProto.STRING, None)], opset=17)
    answer = cpu_answer(model)
    assert not answer.is_supported and answer.code == "attribute"


@pytest.mark.parametrize("bins, n_fft, rate, low, high", [
    (8, 16, 8192, 0.0, 4096.0), (10, 64, 16000, 20.0, 7000.0), (5, 128, 8000, 300.0, 3000.0),
])
def test_mel_weight_matrix(bins, n_fft, rate, low, high):
    names = ["bins", "n_fft", "rate", "low", "high"]
    node = helper.make_node("MelWeightMatrix", names, ["y"])
    inputs = [(n, I64, []) for n in names[:3]] + [(n, F, []) for n in names[3:]]
    model = make_model([node], inputs, [("y", F, None)], opset=17)
    feeds = {"bins": np.array(bins), "n_fft": np.array(n_fft), "rate": np.array(rate),
             "low": np.array(low, np.float32), "high": np.array(high, np.float32)}
    assert_matches_onnxruntime(model, feeds, rtol=1e-6, atol=1e-7)
