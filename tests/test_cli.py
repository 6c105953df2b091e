"""The ep-host command: fast help, JSON for machines, plain text when piped."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CNN = os.path.join(ROOT, "examples", "cnn.onnx")
CUSTOM = os.path.join(ROOT, "examples", "custom_op.onnx")


def ep_host(*args, env=None):
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, env=full_env, timeout=300)


def test_help_does_not_import_onnx_or_plugins():
    code = ("import sys\nfrom ep_host.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('onnx', 'ep_host_cpu', 'ep_host_cuda', 'onnxruntime', 'rich')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "explain" in result.stdout and "EP_HOST_PROVIDERS" in result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_providers_json_lists_name_version_device_and_status():
    result = ep_host("providers", "--json")
    assert result.returncode == 0, result.stderr
    by_name = {p["name"]: p for p in json.loads(result.stdout)}
    assert by_name["cpu"]["status"] == "available" and by_name["cpu"]["device"] == "cpu"
    assert by_name["cpu"]["version"] and by_name["cpu"]["distribution"] == "ep-host-cpu"
    assert by_name["cuda"]["status"] in ("available", "unavailable")
    if by_name["cuda"]["status"] == "unavailable":
        assert by_name["cuda"]["fault"]


def test_explain_piped_is_plain_text_with_every_answer():
    result = ep_host("explain", CNN, "--providers", "cuda,cpu")
    assert result.returncode == 0, result.stderr
    assert "│" not in result.stdout and "\x1b[" not in result.stdout
    assert "*cpu" in result.stdout and "declined [device]" in result.stdout


def test_explain_filters_by_node_op_and_provider():
    # on the CPU EP alone: which installed EP wins a node depends on this machine's figures
    data = json.loads(ep_host("explain", CNN, "--json", "--providers", "cpu").stdout)
    first = data["nodes"][0]["name"]
    result = ep_host("explain", CNN, "--node", first, "--only-provider", "cpu", "--providers",
                     "cpu")
    lines = [line for line in result.stdout.splitlines()[2:] if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(first)
    result = ep_host("explain", CNN, "--op", "Conv", "--providers", "cpu")
    assert "Conv" in result.stdout and "Softmax" not in result.stdout


def test_explain_json_uses_the_versioned_schema():
    result = ep_host("explain", CNN, "--json", "--providers", "cpu")
    data = json.loads(result.stdout)
    assert data["schema"] == "ep-host/placement/v1"
    assert data["unplaceable"] == []
    assert all(n["provider"] == "cpu" for n in data["nodes"])


def test_place_prints_totals_and_writes_json(tmp_path):
    out = tmp_path / "placement.json"
    result = ep_host("place", CNN, "-o", str(out), "--strategy", "priority")
    assert result.returncode == 0, result.stderr
    assert "partition(s)" in result.stdout and "total estimated" in result.stdout
    data = json.loads(out.read_text())
    assert data["strategy"] == "priority" and data["totals"]["total_us"] > 0


def test_place_with_an_unknown_pin_fails_with_a_clear_error():
    result = ep_host("place", CNN, "--pin", "no_such_node=cpu")
    assert result.returncode == 1
    assert "no_such_node" in result.stderr and "Traceback" not in result.stderr


def test_unplaceable_nodes_exit_1_and_list_reasons():
    result = ep_host("explain", CUSTOM, "--providers", "cpu")
    assert result.returncode == 1
    assert "cannot be placed" in result.stderr and "FastSwish" in result.stderr


def test_run_with_random_inputs_matches_onnxruntime():
    result = ep_host("run", CNN, "--random-inputs", "--compare-onnxruntime")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok" in result.stdout and "MISMATCH" not in result.stdout


def test_run_reads_npy_inputs_and_saves_outputs(tmp_path):
    from ep_host import InferenceSession

    session = InferenceSession(CNN, providers=["cpu"])
    arg = session.get_inputs()[0]
    x = np.random.default_rng(3).standard_normal(arg.shape).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    result = ep_host("run", CNN, "--input", f"{arg.name}={tmp_path / 'x.npy'}",
                     "--output-dir", str(tmp_path / "out"), "--providers", "cpu")
    assert result.returncode == 0, result.stderr
    (expected,) = session.run(None, {arg.name: x})
    saved = list((tmp_path / "out").glob("*.npy"))
    assert len(saved) == 1
    np.testing.assert_allclose(np.load(saved[0]), expected)


def test_run_without_inputs_says_how_to_give_them():
    result = ep_host("run", CNN)
    assert result.returncode == 1
    assert "--random-inputs" in result.stderr


@pytest.mark.parametrize("args", [["explain", "missing.onnx"], ["run", "missing.onnx"]])
def test_a_missing_model_is_a_one_line_error(args):
    result = ep_host(*args)
    assert result.returncode == 1
    assert "missing.onnx" in result.stderr and "Traceback" not in result.stderr


def test_conformance_defaults_to_the_host_provider_and_takes_an_alias():
    """With no --providers, conformance tests the first available provider on the host (the CPU
    EP here); an onnxruntime name resolves through the provider's own aliases."""
    for extra in ((), ("--providers", "CPUExecutionProvider")):
        result = ep_host("conformance", "--op", "Abs", "--quiet", "--jobs", "1", *extra)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "cases on cpu: " in result.stdout and " 0 wrong" in result.stdout


def test_run_with_device_graphs_on_the_host_records_nothing_and_still_runs():
    for flag in ("--device-graphs", "--cuda-graph"):
        result = ep_host("run", CNN, "--random-inputs", "--providers", "cpu", flag)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "device graph" not in result.stderr
