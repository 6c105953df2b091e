"""A Ray cluster of two nodes on this machine (``--ray``, ``ray_address=``): each node lists its
own providers, a provider of another node is its own device (``NAME@nodeK``) priced from the
measured link, and a model placed across both nodes runs and matches onnxruntime."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
import ray
from hostkit import make_model, write_distribution
from onnx import TensorProto, helper
from ray.cluster_utils import Cluster

from ep_host import InferenceSession
from ep_host.cluster import discover as cluster_nodes
from ep_host.discovery import Host
from ep_host.errors import HostError
from ep_host.tracing import Tracer
from ep_host.transfers import implied_transfers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# "accel" is installed on every node but available only where the node offers the Ray resource
# ep_accel (node 2 here): elsewhere it declines with that reason. It claims Relu almost free.
# "slow" is available everywhere: it claims Add almost free and Relu at option relu_us.
PROVIDERS = """
import numpy as np
from ep_host import Cost, FunctionKernel, KernelMatch, ProviderInfo, hookimpl

class Accel:
    @hookimpl
    def ep_host_provider_info(self):
        import ray
        here = ray.get_runtime_context().get_node_id()
        resources = next(n["Resources"] for n in ray.nodes() if n["NodeID"] == here)
        if "ep_accel" not in resources:
            return ProviderInfo(name="accel", available=False,
                                reason="this node offers no ep_accel resource")
        return ProviderInfo(name="accel")

    @hookimpl
    def ep_host_supports_op(self, node, context):
        if node.op_type != "Relu":
            return KernelMatch.unsupported("takes Relu only", "op")
        return KernelMatch.supported(Cost(compute_us=0.001))

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        return FunctionKernel(lambda x: np.maximum(x, 0))

class Slow:
    @hookimpl
    def ep_host_provider_info(self):
        return ProviderInfo(name="slow")

    @hookimpl
    def ep_host_supports_op(self, node, context):
        if node.op_type == "Add":
            return KernelMatch.supported(Cost(compute_us=0.001))
        if node.op_type == "Relu":
            return KernelMatch.supported(Cost(compute_us=float(context.options["relu_us"])))
        return KernelMatch.unsupported("takes Add and Relu only", "op")

    @hookimpl
    def ep_host_create_kernel(self, node, context):
        if node.op_type == "Add":
            return FunctionKernel(np.add)
        return FunctionKernel(lambda x: np.maximum(x, 0))

accel = Accel()
slow = Slow()
"""


def three_step_model(n=1024):
    """x, y -> Add -> Relu -> Add(y) -> out, float32 [n]."""
    return make_model(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["r"], name="relu"),
         helper.make_node("Add", ["r", "y"], ["out"], name="add2")],
        [("x", TensorProto.FLOAT, [n]), ("y", TensorProto.FLOAT, [n])],
        [("out", TensorProto.FLOAT, [n])],
    )


def feeds(n=1024):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal(n).astype(np.float32),
            "y": rng.standard_normal(n).astype(np.float32)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two Ray nodes on this machine (node 2 offers ep_accel) and the test providers' site on
    sys.path; the address to join. Ray is shut down at the end (other modules start their own)."""
    if ray.is_initialized():
        ray.shutdown()
    site = tmp_path_factory.mktemp("cluster_site")
    write_distribution(site, "ep-clustertest", {"accel": "clustertest:accel",
                                                "slow": "clustertest:slow"},
                       {"clustertest": PROVIDERS})
    sys.path.insert(0, str(site))
    nodes = Cluster(initialize_head=True,
                    head_node_args={"num_cpus": 1, "resources": {"ep_head": 1},
                                    "include_dashboard": False})
    nodes.add_node(num_cpus=1, resources={"ep_accel": 1})
    nodes.wait_for_nodes()
    ray.init(address=nodes.address, include_dashboard=False, log_to_driver=False)
    try:
        yield {"address": nodes.address, "site": str(site)}
    finally:
        ray.shutdown()
        nodes.shutdown()
        sys.path.remove(str(site))


def ep_host_cli(cluster, *args, timeout=240):
    paths = [cluster["site"], ROOT, *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    env.pop("EP_HOST_PROVIDERS", None)
    env.pop("RAY_ADDRESS", None)
    return subprocess.run([sys.executable, "-m", "ep_host", *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def test_providers_are_listed_per_node_and_declined_with_a_reason_where_missing(cluster):
    result = ep_host_cli(cluster, "providers", "--ray", cluster["address"], "--json")
    assert result.returncode == 0, result.stderr
    nodes = json.loads(result.stdout)
    assert sorted(n["node"] for n in nodes) == ["node1", "node2"]
    assert [n["driver"] for n in nodes] == [True, False]
    by_resource = {("ep_accel" in n["resources"]): n for n in nodes}
    accel = {True: None, False: None}
    for has, node in by_resource.items():
        accel[has] = next(p for p in node["providers"] if p["name"] == "accel")
    assert accel[True]["status"] == "available"
    assert accel[False]["status"] == "unavailable"
    assert accel[False]["fault"] == "this node offers no ep_accel resource"
    for node in nodes:  # every node lists its own CPU EP
        assert any(p["name"] == "cpu" and p["status"] == "available" for p in node["providers"])

    text = ep_host_cli(cluster, "providers", "--ray", cluster["address"])
    assert text.returncode == 0, text.stderr
    rows = [line.split() for line in text.stdout.splitlines()]
    has_accel = by_resource[True]["node"]
    shown = "accel" if by_resource[True]["driver"] else f"accel@{has_accel}"
    assert any(r[0] == has_accel and shown in r and r[-1] == "available" for r in rows), text
    lacks = [line for line in text.stdout.splitlines()
             if line.startswith(by_resource[False]["node"]) and " accel" in line]
    assert len(lacks) == 1 and "unavailable: this node offers no ep_accel resource" in lacks[0]


def test_a_provider_of_the_other_node_is_its_own_device_priced_from_the_link(cluster):
    host = Host.discover(["slow", "accel@node2", "cpu@node2"], ray_address=cluster["address"])
    assert [n.label for n in host.cluster] == ["node1", "node2"]
    other = host.cluster[1]
    accel, cpu2 = host.records["accel@node2"], host.records["cpu@node2"]
    assert accel.status == "available", accel.fault
    assert accel.node == "node2"
    device = accel.info.device
    assert device.node == other.node_id
    assert device.name == "ray@node2"
    assert cpu2.info.device.name == "ray@node2"  # one device per node: no copies between them
    assert device.link_gbps > 0 and device.link_latency_us > 0
    assert host.records["slow"].info.device.is_host
    # measured once: joining again finds the link as measured (kept in the cache directory)
    again = {n.label: n.link for n in cluster_nodes(cluster["address"], ["slow"])}
    assert again["node2"] == other.link
    assert (device.link_latency_us, device.link_gbps) == (other.link.latency_us,
                                                          other.link.gbps)
    assert again["node1"] is None  # the driver's own node: no link
    with pytest.raises(HostError, match="no provider nope@node2"):
        Host.discover(["slow", "nope@node2"], ray_address=cluster["address"])


def placed_across(cluster, relu_us, trace=None):
    return InferenceSession(three_step_model().SerializeToString(),
                            providers=["slow", "accel@node2"],
                            provider_options={"slow": {"relu_us": relu_us}},
                            ray_address=cluster["address"], trace=trace)


def test_the_optimal_strategy_splits_across_nodes_only_when_it_pays(cluster):
    # Relu costs slow 10 s on node 1: moving it to node 2 pays, whatever the link costs.
    tracer = Tracer()
    session = placed_across(cluster, 1e7, tracer)
    placement = session.placement
    where = {n.name: n.provider for n in placement.nodes}
    assert where == {"add": "slow", "relu": "accel@node2", "add2": "slow"}
    copies = implied_transfers(placement)
    assert [(c.tensor, c.source, c.destination) for c in copies] == [
        ("s", "cpu", "ray@node2"), ("r", "ray@node2", "cpu")]
    device = placement.devices["accel@node2"]
    for copy in copies:  # priced from the measured link, as a host-device copy
        assert copy.cost_us == pytest.approx(device.copy_cost_us(copy.nbytes))
        assert copy.cost_us > device.link_latency_us
    expected = onnxruntime.InferenceSession(three_step_model().SerializeToString(),
                                            providers=["CPUExecutionProvider"]).run(None, feeds())
    np.testing.assert_allclose(session.run(None, feeds())[0], expected[0], rtol=1e-6)
    # the trace has a process per node: node 2's spans lie in a process named for it
    pids = {e["name"]: e["pid"] for e in tracer.events if e["cat"] == "node"}
    assert pids["add"] == pids["add2"] == os.getpid() != pids["relu"]
    names = {e["pid"]: e["args"]["name"] for e in tracer.metadata_events()
             if e["name"] == "process_name"}
    assert names[pids["relu"]].endswith("@ node2")

    # Relu costs slow 1 us: the copies to node 2 cost more than that, so nothing moves.
    session = placed_across(cluster, 1.0)
    assert {n.provider for n in session.placement.nodes} == {"slow"}
    assert implied_transfers(session.placement) == []
    np.testing.assert_allclose(session.run(None, feeds())[0], expected[0], rtol=1e-6)


def test_commands_name_the_node_and_run_a_model_pinned_across_nodes(cluster, tmp_path):
    model = tmp_path / "three.onnx"
    model.write_bytes(three_step_model().SerializeToString())
    for key, value in feeds().items():
        np.save(tmp_path / f"{key}.npy", value)
    common = ["--ray", cluster["address"], "--providers", "cpu,accel@node2",
              "--pin", "relu=accel@node2"]
    place = ep_host_cli(cluster, "place", str(model), *common, "--json")
    assert place.returncode == 0, place.stderr
    data = json.loads(place.stdout[place.stdout.index("{"):])
    where = {n["name"]: n["provider"] for n in data["nodes"]}
    assert where == {"add": "cpu", "relu": "accel@node2", "add2": "cpu"}
    why = ep_host_cli(cluster, "why", str(model), "relu", *common)
    assert why.returncode == 0, why.stderr
    assert "accel@node2" in why.stdout
    run = ep_host_cli(cluster, "run", str(model), *common,
                      "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}",
                      "--output-dir", str(tmp_path / "out"))
    assert run.returncode == 0, run.stderr
    expected = onnxruntime.InferenceSession(model.read_bytes(),
                                            providers=["CPUExecutionProvider"]).run(None, feeds())
    np.testing.assert_allclose(np.load(tmp_path / "out" / "out.npy"), expected[0], rtol=1e-6)


@pytest.mark.parametrize("command", ["providers", "explain"])
def test_without_ray_the_ray_option_says_how_to_install_it(tmp_path, command):
    model = tmp_path / "three.onnx"
    model.write_bytes(three_step_model().SerializeToString())
    args = [command] + ([str(model)] if command == "explain" else []) + ["--ray", "auto"]
    code = ("import sys; sys.modules['ray'] = None; from ep_host.cli import main; "
            f"sys.exit(main({args!r}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 1, result.stderr
    assert "--ray auto: Ray is not installed" in result.stderr, result.stderr
    assert "pip install 'ep-host[ray]'" in result.stderr, result.stderr
