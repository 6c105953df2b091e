"""The EP author kit's pytest plugin, run as an EP author runs it: a pytest process with
``--ep-host-provider NAME`` on a test file that uses the fixtures, and ``--ep-host-conformance``."""

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from ep_host.testing.kit import custom_op_model, one_node_model, output_mismatch

ROOT = Path(__file__).resolve().parent.parent
pytest.importorskip("ep_host_example", reason="install it: pip install -e examples/third_party_ep")

# ``no:ep_host`` keeps the installed entry point from loading the plugin a second time.
PLUGIN = ["-p", "no:ep_host", "-p", "ep_host.testing.pytest_plugin", "-p", "no:cacheprovider"]

AUTHOR_TESTS = '''
import numpy as np

def test_relu_matches_onnx_reference(one_node_model, assert_matches_reference):
    assert_matches_reference(one_node_model("Relu", {"x": (np.float32, [3, 4])}))

def test_swish_matches_its_formula(custom_op_model, assert_matches_reference, ep_session):
    model = custom_op_model("com.example", "FastSwish", {"x": (np.float32, [3, 4])})
    assert_matches_reference(model, reference=lambda x: x / (1 + np.exp(-x)))
    assert ep_session(model).get_providers() == ["example"]

def test_swish_against_a_wrong_formula(custom_op_model, assert_matches_reference):
    model = custom_op_model("com.example", "FastSwish", {"x": (np.float32, [3, 4])})
    assert_matches_reference(model, reference=lambda x: x * np.tanh(x))
'''


def run_pytest(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "pytest", *PLUGIN, "-rA", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)


def test_the_entry_point_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["entry-points"]["pytest11"] == {
        "ep_host": "ep_host.testing.pytest_plugin"}


def test_fixtures_on_the_provider_under_test(tmp_path):
    (tmp_path / "test_mine.py").write_text(AUTHOR_TESTS)
    done = run_pytest(tmp_path, "--ep-host-provider", "example", "test_mine.py")
    out = done.stdout
    assert "PASSED test_mine.py::test_relu_matches_onnx_reference" in out, out
    assert "PASSED test_mine.py::test_swish_matches_its_formula" in out, out
    assert "FAILED test_mine.py::test_swish_against_a_wrong_formula" in out, out
    assert "provider 'example' differs from the reference: output 'y'" in out, out
    assert done.returncode == 1


def test_no_provider_is_a_usage_error(tmp_path):
    (tmp_path / "test_mine.py").write_text(AUTHOR_TESTS)
    done = run_pytest(tmp_path, "test_mine.py::test_relu_matches_onnx_reference")
    assert "no provider under test: pass --ep-host-provider NAME" in done.stdout + done.stderr
    assert done.returncode != 0


def test_conformance_cases_as_items(tmp_path):
    done = run_pytest(tmp_path, "--ep-host-provider", "example", "--ep-host-conformance",
                      "--ep-host-op", "Relu", "--ep-host-op", "Selu", "--ep-host-jobs", "1")
    out = done.stdout
    assert "PASSED ::conformance::test_relu\n" in out, out
    # Selu (expanded into its body: nobody claims Selu) and Relu's expanded case are not the
    # example EP's: they are reported declined, with the EP's reason
    assert "declined by example: Selu_0::Constant_0 (Constant):; example: Constant: the " in out
    assert "Exp: the example EP runs only com.example::FastSwish" in out, out
    assert "ep-host conformance on example: 8 cases: 1 pass, 7 declined, 0 wrong, 0 error" in out
    assert done.returncode == 0


def test_one_node_model_infers_standard_outputs_and_leaves_custom_ones_undeclared():
    relu = one_node_model("Relu", {"x": np.zeros((2, 3), np.float16)})
    assert relu.graph.output[0].type.tensor_type.elem_type == 10  # float16, inferred
    assert [d.dim_value for d in relu.graph.output[0].type.tensor_type.shape.dim] == [2, 3]
    swish = custom_op_model("com.example", "FastSwish", {"x": (np.float32, [2])}, version=3)
    assert not swish.graph.output[0].HasField("type")
    assert {(o.domain, o.version) for o in swish.opset_import} == {("", 17), ("com.example", 3)}


def test_output_mismatch_is_relative_to_the_output_scale():
    expected = np.array([1000.0, 0.0, -2.0], np.float32)
    assert output_mismatch("y", expected, expected + np.float32(0.005), None, 0.0) == ""
    why = output_mismatch("y", expected, expected + np.float32([0, 0.02, 0]), None, 0.0)
    assert why.startswith("output 'y': max abs difference 0.02 at (1,)")
    assert output_mismatch("y", expected, expected.astype(np.float64), None, 0.0) == (
        "output 'y': dtype float64, expected float32")
    nan = np.array([np.nan, 1.0], np.float32)
    assert output_mismatch("y", nan, nan.copy(), None, 0.0) == ""
    assert "NaN or infinity" in output_mismatch("y", nan, np.ones(2, np.float32), None, 0.0)
    assert "1 of 2 values differ" in output_mismatch("y", np.array([1, 2]), np.array([1, 3]),
                                                     None, 0.0)
