"""On a machine without CuPy or a GPU, ``ep-host providers`` and ``ep-host explain`` show the
CUDA EP as unavailable, with the reason, for the provider and for every node."""

import json
import os
import subprocess
import sys

import pytest
from ep_host_cuda.provider import cuda_status

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")

pytestmark = pytest.mark.skipif(cuda_status()[0], reason="CUDA is usable on this machine")


def ep_host(*args):
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, timeout=300)


def test_providers_lists_cuda_unavailable_with_its_reason():
    result = ep_host("providers", "--json")
    assert result.returncode == 0, result.stderr
    cuda = {p["name"]: p for p in json.loads(result.stdout)}["cuda"]
    assert cuda["status"] == "unavailable"
    assert cuda["fault"] == cuda_status()[1]
    assert cuda["distribution"] == "ep-host-cuda"


def test_explain_gives_the_reason_for_every_node():
    result = ep_host("explain", CNN, "--providers", "cuda,cpu", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    reason = cuda_status()[1]
    assert data["nodes"]
    for node in data["nodes"]:
        assert node["provider"] == "cpu"
        answer = node["answers"]["cuda"]
        assert answer["supported"] is False and answer["code"] == "device"
        assert reason in answer["reason"]
