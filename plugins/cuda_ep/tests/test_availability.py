"""Where CUDA is not usable, the CUDA EP says why, in words a user can act on, and declines every
node; where it is, the provider is available."""

import sys
from types import SimpleNamespace

import pytest
from ep_host_cuda import provider
from onnx import TensorProto, helper

from ep_host import capability, load_model
from ep_host.discovery import Host

CACHED = (provider.cuda_status, provider.provider_info, provider.default_provider)


@pytest.fixture(autouse=True)
def _fresh_status():
    for cached in CACHED:
        cached.cache_clear()
    yield
    for cached in CACHED:
        cached.cache_clear()


def _fake_cupy(monkeypatch, get_count):
    runtime = SimpleNamespace(getDeviceCount=get_count)
    monkeypatch.setitem(sys.modules, "cupy", SimpleNamespace(cuda=SimpleNamespace(runtime=runtime)))


def test_without_cupy_the_reason_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # makes `import cupy` raise ImportError
    usable, reason = provider.cuda_status()
    assert not usable
    assert "cupy is not installed" in reason and "pip install 'ep-host-cuda[cuda12]'" in reason


def test_without_a_device_the_reason_says_so(monkeypatch):
    def no_device():
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected")

    _fake_cupy(monkeypatch, no_device)
    usable, reason = provider.cuda_status()
    assert not usable and reason.startswith("no CUDA device visible")


def test_an_old_driver_is_named(monkeypatch):
    def old_driver():
        raise RuntimeError("cudaErrorInsufficientDriver: CUDA driver version is insufficient")

    _fake_cupy(monkeypatch, old_driver)
    usable, reason = provider.cuda_status()
    assert not usable and "driver is too old" in reason


def test_zero_devices_mentions_cuda_visible_devices(monkeypatch):
    _fake_cupy(monkeypatch, lambda: 0)
    usable, reason = provider.cuda_status()
    assert not usable and "CUDA_VISIBLE_DEVICES" in reason


def test_unavailable_provider_declines_every_node_with_its_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    host = Host.discover(["cuda"])
    record = host.records["cuda"]
    assert record.status == "unavailable" and "cupy is not installed" in record.fault
    model = helper.make_model(
        helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)])
    answer = capability.walk(host, load_model(model), ["cuda"]).answers["relu"]["cuda"]
    assert not answer.is_supported and answer.code == "device"
    assert "cupy is not installed" in answer.reason
    # asked directly (bypassing the host's short cut), the provider declines the same way
    node = load_model(model).graph.nodes[0]
    direct = provider.ep_host_supports_op(node, None)
    assert direct.code == "device" and "cupy is not installed" in direct.reason


def test_the_device_is_a_cuda_device():
    info = provider.ep_host_provider_info()
    assert info.device.kind == "cuda" and not info.device.is_host
    assert info.device.copy_cost_us(12_000) > 0


def test_a_usable_device_makes_the_provider_available(monkeypatch):
    """cuda_status usable -> provider_info comes from the default provider (built here from a
    stand-in, since building the real one needs CuPy and a GPU)."""
    from ep_host_cuda.figures import DeviceFigures

    stand_in = provider.simulated(DeviceFigures(1e4, 1e3, 5.0, 10.0, 8.0))
    monkeypatch.setattr(provider, "cuda_status", lambda: (True, ""))
    monkeypatch.setattr(provider, "default_provider", lambda: stand_in)
    info = provider.provider_info()
    assert info.available and info.name == "cuda" and info.device is stand_in.device


def test_a_device_that_fails_to_set_up_is_unavailable_with_the_error(monkeypatch):
    def broken():
        raise RuntimeError("cudaErrorLaunchFailure: unspecified launch failure")

    monkeypatch.setattr(provider, "cuda_status", lambda: (True, ""))
    monkeypatch.setattr(provider, "default_provider", broken)
    info = provider.provider_info()
    assert not info.available and "setting it up failed" in info.reason
    assert "unspecified launch failure" in info.reason
