"""ep-host conformance isolates cases: a provider that crashes or hangs on one case costs that
case alone, recorded as an error, and the run goes on."""

import json
import os
import subprocess
import sys

from hostkit import write_distribution

from ep_host import conformance

FLAKY = """
import os, time
from ep_host import ProviderInfo, hookimpl
from ep_host_cpu import provider as cpu

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="flaky")

@hookimpl
def ep_host_supports_op(node, context):
    if node.op_type == "Abs":
        os._exit(3)          # takes the whole worker process down
    if node.op_type == "Neg":
        time.sleep(3600)     # never answers
    return cpu.ep_host_supports_op(node, context)

@hookimpl
def ep_host_create_kernel(node, context):
    return cpu.ep_host_create_kernel(node, context)
"""


def test_a_crash_and_a_hang_are_errors_and_the_run_goes_on(tmp_path, monkeypatch):
    write_distribution(tmp_path, "ep-flaky", {"flaky": "flaky_mod"}, {"flaky_mod": FLAKY})
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned workers inherit sys.path
    names = ["test_abs", "test_neg", "test_relu", "test_sqrt"]
    results = {r.name: r for r in conformance.run_cases(names, ["flaky"], jobs=2, timeout=5)}
    assert set(results) == set(names)
    assert results["test_abs"].outcome == "error"
    assert "worker crashed (exit code 3)" in results["test_abs"].reason
    assert results["test_neg"].outcome == "error"
    assert "timed out after 5 s" in results["test_neg"].reason
    assert results["test_relu"].outcome == "pass" and results["test_sqrt"].outcome == "pass"


def test_the_command_lists_non_passes_and_writes_json(tmp_path):
    out = tmp_path / "c.json"
    result = subprocess.run(
        [sys.executable, "-m", "ep_host", "conformance", "--op", "Bernoulli", "--op", "Relu",
         "-o", str(out)], capture_output=True, text=True, timeout=300,
        env=dict(os.environ))
    assert result.returncode == 0, result.stderr  # declines are not failures
    assert "test_bernoulli" in result.stdout and "declined" in result.stdout
    data = json.loads(out.read_text())
    assert data["schema"] == "ep-host/conformance/v1"
    counts = data["summary"]["by_op"]
    assert counts["Relu"]["pass"] >= 1 and counts["Bernoulli"]["declined"] >= 1
    assert {c["outcome"] for c in data["cases"]} <= {"pass", "declined"}


def test_outputs_are_compared_by_shape_dtype_and_tolerance():
    import numpy as np

    a = np.array([1.0, 2.0], np.float32)
    assert conformance.mismatch(a, a + 1e-6, 1e-3, 1e-7) == ""
    assert "max abs difference" in conformance.mismatch(a, a + 1, 1e-3, 1e-7)
    assert "dtype" in conformance.mismatch(a, a.astype(np.float64), 1e-3, 1e-7)
    assert "shape" in conformance.mismatch(a, a[:1], 1e-3, 1e-7)
    assert conformance.mismatch([a, a], [a, a], 0, 0) == ""
    assert "expected a sequence" in conformance.mismatch([a], a, 0, 0)
    assert conformance.mismatch(None, None, 0, 0) == ""
