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


def test_the_cases_are_collected_once_and_read_back_from_the_cache_folder(tmp_path,
                                                                          monkeypatch):
    """The first collection writes the cases to ep-host's cache folder; a later process reads
    them from there (the same names, models and data) without collecting; a file cut short is
    collected again and rewritten."""
    import pickle

    import numpy as np

    every = conformance.all_cases()
    some = {n: every[n] for n in ("test_abs", "test_gather_elements_negative_indices",
                                  "test_sequence_insert_at_back")}
    monkeypatch.setenv("EP_HOST_CACHE_DIR", str(tmp_path))
    path = conformance.cases_cache_path()
    assert path.parent == tmp_path and not path.exists()
    collected = []

    def collect():
        collected.append(True)
        return some

    monkeypatch.setattr(conformance, "_collect_cases", collect)
    conformance.all_cases.cache_clear()
    try:
        assert conformance.all_cases() is some and collected == [True] and path.exists()
        conformance.all_cases.cache_clear()
        read = conformance.all_cases()  # as a new process would: from the file
        assert collected == [True] and read is not some and list(read) == list(some)
        for name, case in some.items():
            assert read[name].model.SerializeToString() == case.model.SerializeToString()
            (inputs, outputs), = case.data_sets
            (read_inputs, read_outputs), = read[name].data_sets
            for a, b in zip([*inputs, *outputs], [*read_inputs, *read_outputs], strict=True):
                if isinstance(a, list):  # a sequence case
                    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
                else:
                    assert np.array_equal(a, b) and a.dtype == b.dtype
        path.write_bytes(pickle.dumps(some)[:100])  # cut short
        conformance.all_cases.cache_clear()
        assert list(conformance.all_cases()) == list(some) and collected == [True, True]
        conformance.all_cases.cache_clear()
        assert list(conformance.all_cases()) == list(some) and collected == [True, True]
    finally:
        conformance.all_cases.cache_clear()  # the next caller reads the real cases again
