"""Providers in worker processes (``--isolate``, ``isolate=``), on a real local Ray: a provider
that exits, segfaults or hangs in a hook is that provider's fault, named with the hook, and
the host goes on with the other providers."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import ray
from hostkit import add_relu_model, write_distribution

from ep_host import InferenceSession
from ep_host.discovery import Host, ProviderRecord
from ep_host.errors import HostError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAULTS = {
    "exit": "os._exit(7)",
    "segfault": "ctypes.string_at(0)",
    "hang": "time.sleep(3600)",
}

HOOK_NAMES = {"supports": "supports_op", "create": "create_kernel", "run": "run"}

# Claims Relu at almost no cost (so priority placement gives it Relu) and runs FAULT in HOOK.
PROVIDER = """
import ctypes, os, time
import numpy as np
from ep_host import Cost, FunctionKernel, KernelMatch, ProviderInfo, hookimpl

def fault(where):
    if where == {hook!r}:
        {fault}

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name={name!r})

@hookimpl
def ep_host_supports_op(node, context):
    if node.op_type != "Relu":
        return KernelMatch.unsupported("takes Relu only", "op")
    fault("supports")
    return KernelMatch.supported(Cost(compute_us=0.001))

@hookimpl
def ep_host_create_kernel(node, context):
    fault("create")
    def relu(x):
        fault("run")
        return np.maximum(x, 0)
    return FunctionKernel(relu)
"""


@pytest.fixture(scope="module")
def ray_cluster():
    """One local Ray for this module (isolated providers and the commands below join it)."""
    from ep_host.remote import start_ray

    started = not ray.is_initialized()
    start_ray()
    yield ray.get_runtime_context().gcs_address
    if started:
        ray.shutdown()


def provider_site(tmp_path, name, hook="", fault=""):
    """A folder with the distribution ``ep-<name>`` of a provider that runs ``fault`` in
    ``hook`` (``supports``, ``create`` or ``run``)."""
    source = PROVIDER.format(name=name, hook=hook, fault=FAULTS.get(fault, "pass"))
    write_distribution(tmp_path, f"ep-{name}", {name: f"{name}_mod"}, {f"{name}_mod": source})
    return tmp_path


def feeds():
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], np.float32)
    y = np.array([[0.5, -2.5, 1.0], [-4.0, 1.0, -7.0]], np.float32)
    return {"x": x, "y": y}


def in_process_outputs():
    return InferenceSession(add_relu_model().SerializeToString(), providers=["cpu"]).run(
        None, feeds())


def ep_host(site, address, *args, timeout=240):
    paths = [str(site), ROOT, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p),
               RAY_ADDRESS=address, EP_HOST_WORKER_TIMEOUT="3")
    env.pop("EP_HOST_PROVIDERS", None)
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


@pytest.mark.parametrize("hook", sorted(HOOK_NAMES))
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_provider_dying_or_hanging_in_a_hook_is_its_fault_and_the_run_goes_on(
        tmp_path, ray_cluster, hook, fault):
    name = f"{fault}_in_{hook}"
    site = provider_site(tmp_path, name, hook, fault)
    model = tmp_path / "add_relu.onnx"
    model.write_bytes(add_relu_model().SerializeToString())
    for key, value in feeds().items():
        np.save(tmp_path / f"{key}.npy", value)
    result = ep_host(site, ray_cluster, "run", str(model), "--providers", f"{name},cpu",
                     "--strategy", "priority", f"--isolate={name}",
                     "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
                     "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    err = result.stderr
    assert f"provider '{name}': " in err, err
    assert f"in hook {HOOK_NAMES[hook]} (node 'relu')" in err, err
    if fault == "hang":
        assert "did not answer within 3 s" in err, err
    else:
        assert "its worker process died" in err, err
    if fault == "segfault":
        assert "Segmentation fault" in err, err
    got = np.load(tmp_path / "out" / "out.npy")
    np.testing.assert_array_equal(got, in_process_outputs()[0])


def test_explain_names_the_fault_in_the_providers_column(tmp_path, ray_cluster):
    site = provider_site(tmp_path, "quits", "supports", "exit")
    model = tmp_path / "add_relu.onnx"
    model.write_bytes(add_relu_model().SerializeToString())
    result = ep_host(site, ray_cluster, "explain", str(model), "--providers", "quits,cpu",
                     "--isolate", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # nothing of Ray's on stdout
    assert data["unplaceable"] == []
    relu = next(n for n in data["nodes"] if n["name"] == "relu")
    assert relu["provider"] == "cpu"
    assert relu["answers"]["quits"]["code"] == "fault"
    assert relu["answers"]["quits"]["reason"] == (
        "its worker process died in hook supports_op (node 'relu')")


def test_an_isolated_provider_answers_and_runs_like_the_same_provider_in_process(
        tmp_path, ray_cluster, monkeypatch):
    provider_site(tmp_path, "fine")
    monkeypatch.syspath_prepend(str(tmp_path))
    model = add_relu_model().SerializeToString()
    inside = InferenceSession(model, providers=["fine", "cpu"], strategy="priority")
    isolated = InferenceSession(model, providers=["fine", "cpu"], strategy="priority",
                                isolate=["fine"])
    record = isolated._host.records["fine"]
    assert record.remote is not None and record.status == "available"
    assert isolated._host.records["cpu"].remote is None  # only the named one is isolated
    assert record.info.device.kind == "worker"
    assert record.info.device.link_gbps > 0 and record.info.device.link_latency_us > 0
    by_node = {n.name: n.provider for n in isolated.placement.nodes}
    assert by_node == {n.name: n.provider for n in inside.placement.nodes} == {
        "add": "cpu", "relu": "fine"}
    answers = isolated.placement.table.answers
    assert answers["add"]["fine"] == inside.placement.table.answers["add"]["fine"]  # decline
    claim = inside.placement.table.answers["relu"]["fine"]
    # the same claim, with the call into the worker charged as a launch
    assert answers["relu"]["fine"].cost == claim.cost.with_launch_us(
        claim.cost.launch_us + record.info.device.link_latency_us)
    for got, want in zip(isolated.run(None, feeds()), in_process_outputs(), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_provider_registered_by_module_path_runs_in_a_worker(tmp_path, ray_cluster,
                                                               monkeypatch):
    provider_site(tmp_path, "bymodule", "run", "exit")
    monkeypatch.syspath_prepend(str(tmp_path))
    host = Host.discover(["cpu"])
    record = host.register_isolated(ProviderRecord(name="bymodule"), "bymodule",
                                    module="bymodule_mod")
    assert record.status == "available", record.fault
    session = InferenceSession(add_relu_model().SerializeToString(),
                               providers=["bymodule", "cpu"], host=host, strategy="priority")
    assert {n.name: n.provider for n in session.placement.nodes}["relu"] == "bymodule"
    got = session.run(None, feeds())  # the worker dies in run: placed again, run again
    np.testing.assert_array_equal(got[0], in_process_outputs()[0])
    assert record.status == "failed"
    assert record.fault == "its worker process died in hook run (node 'relu')"
    assert {n.provider for n in session.placement.nodes} == {"cpu"}
    assert any("placed again without it" in w for w in session.model.warnings)


def test_a_provider_that_fails_to_import_in_its_worker_is_listed_with_the_fault(
        tmp_path, ray_cluster, monkeypatch):
    write_distribution(tmp_path, "ep-noimport", {"noimport": "noimport_mod"},
                       {"noimport_mod": "import a_module_that_does_not_exist\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    host = Host.discover(["noimport", "cpu"], isolate=True)
    record = host.records["noimport"]
    assert record.status == "failed"
    assert record.fault == ("in its worker: import failed: ModuleNotFoundError: No module named "
                            "'a_module_that_does_not_exist'")
    assert record.distribution == "ep-noimport"
    assert host.records["cpu"].remote is None  # ep-host's CPU EP stays in process


def test_isolating_a_name_that_is_no_provider_is_an_error(ray_cluster):
    with pytest.raises(HostError, match="--isolate: no provider entry point named nothere"):
        Host.discover(["cpu"], isolate=["nothere"])


def test_without_ray_isolate_says_how_to_install_it(tmp_path):
    model = tmp_path / "add_relu.onnx"
    model.write_bytes(add_relu_model().SerializeToString())
    code = ("import sys; sys.modules['ray'] = None; from ep_host.cli import main; "
            f"sys.exit(main(['explain', {str(model)!r}, '--isolate']))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1
    assert "pip install 'ep-host[ray]'" in result.stderr, result.stderr


def test_neither_import_ep_host_nor_help_imports_ray():
    code = ("import sys, contextlib, io; import ep_host; from ep_host.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
            "    main(['run', '--help'])\n"
            "print('ray' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.stdout.strip() == "False", result.stderr


COMPILER = """
import os
import numpy as np
from ep_host import Cost, FunctionKernel, KernelMatch, ProviderInfo, hookimpl

@hookimpl
def ep_host_provider_info():
    return ProviderInfo(name={name!r})

@hookimpl
def ep_host_supports_op(node, context):
    return KernelMatch.supported(Cost(compute_us=0.001))

@hookimpl
def ep_host_create_kernel(node, context):
    fn = {{"Add": np.add, "Relu": lambda x: np.maximum(x, 0)}}[node.op_type]
    return FunctionKernel(fn)

@hookimpl
def ep_host_compile_partition(partition, context):
    {fault}
    names = [n.op_type for n in partition.nodes]
    assert names == ["Add", "Relu"], names
    return FunctionKernel(lambda x, y: np.maximum(x + y, 0))
"""


@pytest.mark.parametrize("fault", ["", "os._exit(7)"], ids=["compiles", "exits"])
def test_an_isolated_provider_compiles_partitions_in_its_worker(tmp_path, ray_cluster,
                                                                monkeypatch, fault):
    name = "compiler_" + ("exits" if fault else "fine")
    source = COMPILER.format(name=name, fault=fault or "pass")
    write_distribution(tmp_path, f"ep-{name}", {name: f"{name}_mod"}, {f"{name}_mod": source})
    monkeypatch.syspath_prepend(str(tmp_path))
    session = InferenceSession(add_relu_model().SerializeToString(), providers=[name, "cpu"],
                               strategy="priority", isolate=True)
    record = session._host.records[name]
    assert "ep_host_compile_partition" in record.hooks
    np.testing.assert_array_equal(session.run(None, feeds())[0], in_process_outputs()[0])
    kinds = {(s.kind, s.provider) for s in session._plan.steps if s.copy is None}
    if fault:
        assert kinds == {("node", "cpu")}
        assert record.fault == ("its worker process died in hook compile_partition "
                                f"(partition '{name} partition 1')")
        assert any(f"provider {name!r}: its worker process died in hook compile_partition"
                   in w for w in session.model.warnings)
    else:
        assert kinds == {("partition", name)}
