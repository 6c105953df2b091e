"""On a GPU with CuPy: the CUDA EP's kernels give the CPU EP's outputs, models run split across
both, and a captured CUDA graph replays to the same result. Skipped without CuPy or a device."""

import numpy as np
import pytest
from ep_host_cuda.provider import cuda_status

USABLE, WHY_NOT = cuda_status()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not USABLE, reason=f"CUDA EP: {WHY_NOT}")]


@pytest.fixture(scope="module")
def gpu_host():
    from ep_host.discovery import Host

    host = Host.discover(["cpu", "cuda"], strict=True)
    assert host.records["cuda"].status == "available", host.records["cuda"].fault
    return host


@pytest.fixture(scope="module")
def cupy():
    return pytest.importorskip("cupy")


def _run(model, feeds, providers, host, **kwargs):
    from ep_host import InferenceSession

    session = InferenceSession(model.SerializeToString(), providers=providers, host=host, **kwargs)
    return session.run(None, feeds), session


def _cases():
    from test_kernels import CASES

    return CASES


@pytest.mark.parametrize("case", _cases(), ids=[c[0] for c in _cases()])
def test_gpu_kernel_matches_the_cpu_ep(case, gpu_host):
    from cudakit import node_model

    _, op, inputs, constants, attrs, extra = case
    model = node_model(op, inputs, constants=constants, attrs=attrs,
                       n_outputs=extra.get("n_outputs", 1), domain=extra.get("domain", ""),
                       opset=extra.get("opset", 17), input_names=extra.get("input_names"))
    expected, _ = _run(model, inputs, ["cpu"], gpu_host)
    got, session = _run(model, inputs, ["cuda", "cpu"], gpu_host, pins={"node": "cuda"})
    assert session.placement.by_node["node"].provider == "cuda"
    tol = max(extra.get("atol", 0.0), 1e-4)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g.astype(np.float64), e.astype(np.float64), atol=tol, rtol=tol)


def test_kernel_outputs_stay_on_the_device(gpu_host, cupy):
    from cudakit import first_node, node_model

    from ep_host.provider import ProviderContext

    model = node_model("Relu", {"x": np.zeros(4, np.float32)})
    plugin = gpu_host.records["cuda"].plugin
    kernel = plugin.ep_host_create_kernel(first_node(model), ProviderContext("cuda"))
    out = kernel.run(cupy.asarray(np.array([-1.0, 2.0, -3.0, 4.0], np.float32)))[0]
    assert isinstance(out, cupy.ndarray) and cupy.asnumpy(out).tolist() == [0, 2, 0, 4]


def test_a_bert_layer_on_cuda_and_cpu_matches_the_cpu_run(gpu_host):
    from ep_host.testing import models

    model = models.bert_encoder(layers=2, hidden=256, heads=4, seq=64)
    feeds = models.bert_inputs(model)
    expected, _ = _run(model, feeds, ["cpu"], gpu_host)
    got, session = _run(model, feeds, ["cuda", "cpu"], gpu_host)
    assert any(n.provider == "cuda" for n in session.placement.nodes)
    np.testing.assert_allclose(got[0], expected[0], atol=1e-3)


def test_a_captured_graph_replays_on_its_buffers(gpu_host, cupy):
    device = gpu_host.records["cuda"].info.device
    rng = np.random.default_rng(0)
    a = device.upload(rng.standard_normal((64, 64)).astype(np.float32))
    b = device.upload(rng.standard_normal((64, 64)).astype(np.float32))
    y = device.upload(np.zeros((64, 64), np.float32))

    def partition():
        cupy.matmul(a, b, out=y)
        cupy.maximum(y, 0, out=y)

    replay = device.capture(partition)
    fresh = rng.standard_normal((64, 64)).astype(np.float32)
    a[...] = device.upload(fresh)
    replay()
    device.synchronize()
    expected = np.maximum(fresh @ device.download(b), 0)
    np.testing.assert_allclose(device.download(y), expected, rtol=1e-4, atol=1e-4)


def test_the_figures_are_measured_and_cached(gpu_host, cupy):
    from ep_host_cuda.figures import device_figures

    figures = gpu_host.records["cuda"].plugin.figures
    assert figures.gemm_gflops > 100 and figures.bandwidth_gbps > 50
    assert 0 < figures.launch_us < 1000 and figures.link_gbps > 0.5
    again = device_figures(cupy)
    assert again.source.endswith(".json") and again.gemm_gflops == pytest.approx(
        figures.gemm_gflops)
