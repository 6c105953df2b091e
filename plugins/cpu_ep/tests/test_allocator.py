"""The CPU EP asks glibc to keep freed memory in the heap (see ep_host_cpu.allocator)."""

from __future__ import annotations

import sys

import pytest
from ep_host_cpu import allocator


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_making_a_kernel_sets_the_thresholds(monkeypatch):
    import numpy as np
    from cpukit import make_model, run_ep_host
    from onnx import TensorProto, helper

    monkeypatch.setattr(allocator, "_done", False)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       [("x", TensorProto.FLOAT, [2])], [("y", TensorProto.FLOAT, [2])])
    run_ep_host(model, {"x": np.ones(2, np.float32)})  # the CPU EP creates its kernel
    assert allocator._done
    assert allocator.keep_freed_memory()  # once per process; asking again changes nothing


def test_the_environment_can_opt_out(monkeypatch):
    monkeypatch.setattr(allocator, "_done", False)
    monkeypatch.setenv("EP_HOST_CPU_KEEP_MEMORY", "0")
    assert allocator.keep_freed_memory() is False
    assert allocator._done is False
