"""GEMMs by constant weights through oneMKL's packed copies (``ep_host_cpu.packed_gemm``):
MatMul and Gemm (transB, alpha, a constant C) against onnxruntime and numpy's path
(``EP_HOST_MKL=0``); the packed copy is what runs, made once with the session, from threads
too, for every product (one row, none) unless the model states one row, and a model file's
weights are freed once packed; Conv's weights are not packed."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from cpukit import make_model, run_ep_host, run_onnxruntime
from ep_host_cpu import packed_gemm
from ep_host_cpu.packed_gemm import PackedGemm, PackedMatrix
from onnx import TensorProto, helper, numpy_helper

import ep_host

F = TensorProto.FLOAT
if not packed_gemm._library_paths():
    pytest.skip("oneMKL is not installed (pip install 'ep-host-cpu[mkl]')",
                allow_module_level=True)


@pytest.fixture(autouse=True)
def mkl_on(monkeypatch):
    """oneMKL used whatever the CPU (by default only on Intel's)."""
    monkeypatch.setenv(packed_gemm.MKL_SWITCH, "1")


@pytest.fixture
def calls(monkeypatch):
    """How many GEMMs ran through a packed copy, and how many copies were made."""
    counted = {"times": 0, "packed": 0}
    times_left, init = PackedMatrix.times_left, PackedMatrix.__init__

    def count(name, f):
        def counting(self, *args, **kwargs):
            counted[name] += 1
            return f(self, *args, **kwargs)
        return counting

    monkeypatch.setattr(PackedMatrix, "times_left", count("times", times_left))
    monkeypatch.setattr(PackedMatrix, "__init__", count("packed", init))
    return counted


def matmul_model(rng):
    w = rng.standard_normal((96, 80)).astype(np.float32)
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, [2, 7, 96])],
                      [("y", F, None)], initializers=[numpy_helper.from_array(w, "w")]), \
        {"x": rng.standard_normal((2, 7, 96)).astype(np.float32)}


def gemm_model(rng):
    b = rng.standard_normal((50, 64)).astype(np.float32)  # transB: (N, K)
    c = rng.standard_normal(50).astype(np.float32)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    return make_model([node], [("a", F, [9, 64])], [("y", F, None)],
                      initializers=[numpy_helper.from_array(b, "b"),
                                    numpy_helper.from_array(c, "c")]), \
        {"a": rng.standard_normal((9, 64)).astype(np.float32)}


CASES = {
    "matmul": matmul_model,
    "gemm": gemm_model,
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_packed_gemms_match_onnxruntime_and_numpys_path(case, rng, calls, monkeypatch):
    model, feeds = CASES[case](rng)
    ours = run_ep_host(model, feeds)[0]
    assert calls["times"] > 0 and calls["packed"] > 0  # the packed copies ran
    np.testing.assert_allclose(ours, run_onnxruntime(model, feeds)[0], rtol=1e-4, atol=1e-4)
    monkeypatch.setenv(packed_gemm.MKL_SWITCH, "0")
    calls["times"] = 0
    plain = run_ep_host(model, feeds)[0]
    assert calls["times"] == 0
    np.testing.assert_allclose(ours, plain, rtol=1e-4, atol=1e-4)


def test_a_weight_is_packed_once_when_the_session_is_made_and_used_from_threads(rng, calls):
    model, feeds = matmul_model(rng)
    session = ep_host.InferenceSession(model.SerializeToString(), providers=["cpu"])
    assert calls["packed"] == 1 and calls["times"] == 0
    want = run_onnxruntime(model, feeds)[0]
    results, barrier = [], threading.Barrier(4)

    def run():
        barrier.wait()
        results.append(session.run(None, feeds)[0])

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    session.run(None, feeds)
    assert calls["packed"] == 1 and calls["times"] == 5
    for got in results:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_weights_of_a_model_file_are_freed_once_packed(rng, tmp_path, calls):
    """The packed copy takes every product, so the session gives the weights' memory back
    (``ep_host.released``): a MatMul's and a transB Gemm's, of 1.2 MB each."""
    w = rng.standard_normal((600, 500)).astype(np.float32)
    b = rng.standard_normal((400, 500)).astype(np.float32)  # transB: (N, K)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("Gemm", ["h", "b"], ["y"], transB=1, alpha=0.5)]
    model = make_model(nodes, [("x", F, [3, 600])], [("y", F, None)],
                       initializers=[numpy_helper.from_array(w, "w"),
                                     numpy_helper.from_array(b, "b")])
    path = tmp_path / "gemms.onnx"
    path.write_bytes(model.SerializeToString())
    session = ep_host.InferenceSession(str(path), providers=["cpu"])
    assert sorted(name for name, _ in session.released_weights) == ["b", "w"]
    x = rng.standard_normal((3, 600)).astype(np.float32)
    np.testing.assert_allclose(session.run(None, {"x": x})[0],
                               run_onnxruntime(model, {"x": x})[0], rtol=1e-4, atol=1e-3)
    assert calls["times"] == 2


def test_onemkl_is_used_by_default_on_intel_cpus_only(monkeypatch):
    monkeypatch.delenv(packed_gemm.MKL_SWITCH)
    assert packed_gemm.mkl_wanted() == packed_gemm._intel_cpu()
    monkeypatch.setenv(packed_gemm.MKL_SWITCH, "off")
    assert not packed_gemm.mkl_wanted() and PackedGemm().pack(np.ones((9, 9), np.float32)) is None


def test_what_is_not_packed(rng):
    packing = PackedGemm()
    assert packing.pack(np.ones((40, 30), np.float64)) is None  # float32 only
    assert packing.pack(np.ones((4, 4), np.float32)) is None  # too small to gain
    assert packing.pack(np.ones((40, 30, 2), np.float32)[:, :, 0]) is None  # strided
    w = rng.standard_normal((30, 40)).astype(np.float32)
    x = rng.standard_normal((5, 40)).astype(np.float32)
    np.testing.assert_allclose(packing.pack(w.T).times_left(x), x @ w.T, rtol=1e-5,
                               atol=1e-5)  # a transposed view is packed as it reads


@pytest.mark.parametrize("declared, fed, packed", [
    ([1, 96], (1, 96), False), ([96], (96,), False), ([0, 96], (0, 96), False),
    (["n", 96], (1, 96), True), (["n", 96], (0, 96), True), (["b", "n", 96], (2, 0, 96), True),
    (["n", 96], (5, 96), True)])
def test_a_product_stated_to_have_one_row_keeps_numpys_path(rng, calls, declared, fed,
                                                            packed):
    """A model's one-row product (a CNN's classifier) keeps numpy's GEMV and B unpacked; where
    the rows are not stated, B is packed and released, and every product, one row or none,
    takes the packed copy."""
    w = rng.standard_normal((96, 80)).astype(np.float32)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", F, declared)],
                       [("y", F, None)], initializers=[numpy_helper.from_array(w, "w")])
    feeds = {"x": rng.standard_normal(fed).astype(np.float32)}
    ours = run_ep_host(model, feeds)[0]
    want = run_onnxruntime(model, feeds)[0]
    assert ours.shape == want.shape == fed[:-1] + (80,)
    np.testing.assert_allclose(ours, want, rtol=1e-4, atol=1e-4)
    assert calls["packed"] == int(packed)
    assert calls["times"] == int(packed and 0 not in fed)


def test_a_convolution_is_left_to_numpy(rng, calls):
    """Conv's weights cost more packed than they gained (see the module's docstring)."""
    k = (rng.standard_normal((48, 40, 1, 1)) * 0.2).astype(np.float32)
    conv = make_model([helper.make_node("Conv", ["x", "k"], ["y"])], [("x", F, [2, 40, 9, 9])],
                      [("y", F, None)], initializers=[numpy_helper.from_array(k, "k")])
    feeds = {"x": rng.standard_normal((2, 40, 9, 9)).astype(np.float32)}
    np.testing.assert_allclose(run_ep_host(conv, feeds)[0], run_onnxruntime(conv, feeds)[0],
                               rtol=1e-4, atol=1e-4)
    assert calls == {"times": 0, "packed": 0}
