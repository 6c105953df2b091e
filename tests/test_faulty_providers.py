"""Broken providers installed beside the real ones: the model is still placed and explained."""

import json
import os
import subprocess
import sys

import pytest
from hostkit import write_distribution

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "examples", "cnn.onnx")

RAISES = """
from ep_host import ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="raises")

@hookimpl
def ep_host_supports_op(node, context):
    raise KeyError("no table entry for " + node.op_type)
"""

STRING = """
from ep_host import ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="stringy")

@hookimpl
def ep_host_supports_op(node, context):
    return "sure, I can run " + node.op_type
"""

NAN = """
from ep_host import Cost, KernelMatch, ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="nancost")

@hookimpl
def ep_host_supports_op(node, context):
    return KernelMatch.supported(Cost(compute_us=float("nan")))
"""


@pytest.fixture
def broken_site(tmp_path):
    write_distribution(tmp_path, "ep-import-fails", {"importfails": "importfails_mod"},
                       {"importfails_mod": "import a_module_that_does_not_exist\n"})
    write_distribution(tmp_path, "ep-raises", {"raises": "raises_mod"}, {"raises_mod": RAISES})
    write_distribution(tmp_path, "ep-stringy", {"stringy": "stringy_mod"}, {"stringy_mod": STRING})
    write_distribution(tmp_path, "ep-nancost", {"nancost": "nancost_mod"}, {"nancost_mod": NAN})
    return tmp_path


def _ep_host(site, *args):
    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop("EP_HOST_PROVIDERS", None)
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_explain_still_places_the_model_and_lists_every_fault(broken_site):
    result = _ep_host(broken_site, "explain", MODEL, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["unplaceable"] == []
    # every node on a working provider (which one depends on this machine's figures)
    assert {n["provider"] for n in data["nodes"]} <= {"cpu", "onnxruntime", "openvino"}
    first = data["nodes"][0]["answers"]
    assert first["raises"]["code"] == "fault"
    assert "provider raised KeyError" in first["raises"]["reason"]
    assert first["stringy"]["reason"] == "provider returned str instead of a KernelMatch"
    assert "Cost.compute_us must be finite" in first["nancost"]["reason"]
    assert first["importfails"]["code"] == "fault"
    assert "import failed: ModuleNotFoundError" in first["importfails"]["reason"]


def test_the_table_shows_each_fault_as_a_reason(broken_site):
    result = _ep_host(broken_site, "explain", MODEL)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "provider raised KeyError" in out
    assert "provider returned str instead of a KernelMatch" in out
    assert "must be finite" in out
    assert ("import failed: ModuleNotFoundError: No module named "
            "'a_module_that_does_not_exist'") in out


def test_providers_lists_the_broken_ones_with_their_faults(broken_site):
    result = _ep_host(broken_site, "providers", "--json")
    assert result.returncode == 0, result.stderr
    by_name = {p["name"]: p for p in json.loads(result.stdout)}
    assert by_name["importfails"]["status"] == "failed"
    assert by_name["importfails"]["distribution"] == "ep-import-fails"
    assert by_name["cpu"]["status"] == "available"
    assert by_name["raises"]["status"] == "available"  # it loads; it breaks per node


DEEP = """
from ep_host import ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name="deep")

def lookup(op_type):
    return {"Relu": 1}[op_type]

@hookimpl
def ep_host_supports_op(node, context):
    return lookup(node.op_type)
"""


def test_strict_mode_prints_the_exception_type_and_the_plugins_frames(tmp_path):
    write_distribution(tmp_path, "ep-deep", {"deep": "deep_mod"}, {"deep_mod": DEEP})
    env = dict(os.environ, EP_HOST_STRICT="1",
               PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]))
    env.pop("EP_HOST_PROVIDERS", None)
    result = subprocess.run([sys.executable, "-m", "ep_host", "explain", MODEL,
                             "--providers", "deep"], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == 1
    err = result.stderr
    assert "ep-host: error: provider 'deep' raised in supports_op for node " in err, err
    assert "Traceback (the provider's frames, most recent call last):" in err, err
    mod = os.path.join(str(tmp_path), "deep_mod.py")
    assert f'File "{mod}", line 13, in ep_host_supports_op' in err, err
    assert f'File "{mod}", line 9, in lookup' in err, err
    assert err.rstrip().endswith("KeyError: 'FusedConv'"), err
    # the host's and pluggy's own frames are left out
    assert "ep_host/capability.py" not in err and "pluggy" not in err, err
