"""The CUDA EP prices nodes by a roofline at its device's figures: GEMM-heavy nodes win on the
device, small ones pay the launch; figures are validated, measured once and cached."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
from cudakit import FIGURES, first_node, node_model, sim_host
from ep_host_cuda import figures as figures_module
from ep_host_cuda.figures import DeviceFigures, device_figures, device_key
from ep_host_cuda.provider import simulated

from ep_host import capability, load_model


def answers(model):
    table = capability.walk(sim_host(), load_model(model), ["cuda", "cpu"])
    return table.answers["node"]["cuda"], table.answers["node"]["cpu"]


def test_a_large_matmul_is_cheaper_on_the_device():
    model = node_model("MatMul", {"a": np.zeros((512, 1024), np.float32),
                                  "b": np.zeros((1024, 1024), np.float32)})
    cuda, cpu = answers(model)
    flops = 2 * 512 * 1024 * 1024
    assert cuda.cost.flops == flops
    assert cuda.cost.compute_us == pytest.approx(flops / (FIGURES.gemm_gflops * 1e3))
    assert cuda.cost.total_us < cpu.cost.total_us / 5


def test_a_tiny_node_is_dominated_by_the_launch():
    model = node_model("Add", {"a": np.zeros(4, np.float32), "b": np.zeros(4, np.float32)})
    cuda, cpu = answers(model)
    assert cuda.cost.launch_us == FIGURES.launch_us
    assert cuda.cost.launch_us > 100 * max(cuda.cost.compute_us, cuda.cost.memory_us)
    assert cpu.cost.total_us < cuda.cost.total_us


def test_memory_bound_nodes_use_the_bandwidth():
    n = 1 << 22
    model = node_model("Relu", {"x": np.zeros(n, np.float32)})
    cuda, _ = answers(model)
    assert cuda.cost.bytes_moved == 2 * 4 * n
    assert cuda.cost.memory_us == pytest.approx(8 * n / (FIGURES.bandwidth_gbps * 1e3))


def test_faster_figures_give_lower_costs():
    model = node_model("Conv", {"x": np.zeros((1, 64, 56, 56), np.float32)},
                       constants={"w": np.zeros((64, 64, 3, 3), np.float32)},
                       attrs={"pads": [1, 1, 1, 1]})
    node = first_node(model)
    slow = simulated(DeviceFigures(1_000.0, 200.0, 20.0, 8.0, 20.0)).cost(node)
    fast = simulated(FIGURES).cost(node)
    assert fast.total_us < slow.total_us
    assert fast.flops == slow.flops == 2 * 64 * 56 * 56 * 64 * 9


def test_views_launch_nothing():
    model = node_model("Transpose", {"x": np.zeros((64, 64), np.float32)}, attrs={"perm": [1, 0]})
    cuda, _ = answers(model)
    assert cuda.cost.launch_us == 0


def test_the_device_link_comes_from_the_figures():
    device = simulated(FIGURES).device
    assert (device.link_gbps, device.link_latency_us) == (FIGURES.link_gbps,
                                                          FIGURES.link_latency_us)
    assert not device.is_host
    assert device.copy_cost_us(20_000) == pytest.approx(10.0 + 20_000 / 20e3)


@pytest.mark.parametrize("field", ["gemm_gflops", "bandwidth_gbps", "link_gbps"])
def test_figures_must_be_positive(field):
    values = dict(gemm_gflops=1.0, bandwidth_gbps=1.0, launch_us=1.0, link_gbps=1.0,
                  link_latency_us=1.0)
    values[field] = 0.0
    with pytest.raises(ValueError, match=field):
        DeviceFigures(**values)


def fake_cupy(name=b"Fake GPU"):
    runtime = SimpleNamespace(getDeviceProperties=lambda i: {"name": name, "major": 9, "minor": 0},
                              runtimeGetVersion=lambda: 12040)
    return SimpleNamespace(cuda=SimpleNamespace(runtime=runtime), __version__="13.3.0")


def test_cached_figures_are_read_without_measuring(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    cupy = fake_cupy()
    stored = dict(gemm_gflops=5e4, bandwidth_gbps=4e3, launch_us=6.0, link_gbps=25.0,
                  link_latency_us=9.0)
    (tmp_path / f"cuda-figures-{device_key(cupy)}.json").write_text(json.dumps(stored))

    def no_measuring(_):
        raise AssertionError("measured although the cache holds the figures")

    monkeypatch.setattr(figures_module, "measure", no_measuring)
    got = device_figures(cupy)
    assert got.gemm_gflops == 5e4 and got.link_latency_us == 9.0
    assert got.source.endswith(".json")


def test_a_missing_cache_is_measured_once_and_written(tmp_path, monkeypatch):
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    calls = []

    def measured(_):
        calls.append(1)
        return DeviceFigures(1e4, 1e3, 5.0, 10.0, 8.0, source="measured")

    monkeypatch.setattr(figures_module, "measure", measured)
    cupy = fake_cupy(b"Another GPU")
    assert device_figures(cupy).source == "measured"
    assert device_figures(cupy).gemm_gflops == 1e4
    assert len(calls) == 1
    assert device_key(cupy) != device_key(fake_cupy())  # one cache entry per device model
