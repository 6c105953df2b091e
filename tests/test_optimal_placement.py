"""Strategy ``optimal``: node costs plus implied copies, checked against brute force on random
DAGs small enough to enumerate, and never worse than ``greedy`` or ``priority``."""

import itertools
import random

import pytest
from hostkit import make_model, random_costs, random_dag
from onnx import TensorProto, helper

from ep_host import Cost, Device, KernelMatch, ProviderInfo, hookimpl
from ep_host.capability import walk
from ep_host.discovery import Host
from ep_host.loading import load_model
from ep_host.min_cut import PlacementObjective
from ep_host.placement import Placement, choose
from ep_host.transfers import implied_transfers

SIM0 = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=5.0)
SIM1 = Device(name="sim:1", kind="sim", link_gbps=4.0, link_latency_us=2.0)
CPU = Device()


class CostedProvider:
    """Claims the nodes in ``costs`` at their cost; ``host_inputs`` per node name."""

    def __init__(self, name, device, costs, host_inputs=None):
        self.name, self.device, self.costs = name, device, costs
        self.host_inputs = host_inputs or {}

    @hookimpl
    def ep_host_provider_info(self):
        return ProviderInfo(name=self.name, device=self.device)

    @hookimpl
    def ep_host_supports_op(self, node, context):
        cost = self.costs.get(node.name)
        if cost is None:
            return KernelMatch.unsupported(f"{self.name} declines {node.name}", code="op")
        return KernelMatch.supported(Cost(compute_us=cost),
                                     host_inputs=self.host_inputs.get(node.name, ()))


def random_model(rng, n_nodes):
    """hostkit's random DAG, its float32 tensors of one random size."""
    return random_dag(rng, n_nodes, [rng.choice([16, 256, 4096, 65536])])


def random_case(seed, devices, n_nodes, host_inputs=False):
    rng = random.Random(seed)
    model = load_model(random_model(rng, n_nodes))
    names = [n.name for n in model.graph.nodes]
    costs = random_costs(rng, names, len(devices), 100.0)
    host = Host(strict=False)
    providers = []
    for k, device in enumerate(devices):
        hin = {}
        if host_inputs and not device.is_host:
            hin = {n: (0,) for n in names if rng.random() < 0.3}
        p = CostedProvider(f"p{k}", device, costs[k], hin)
        host.register(p, name=p.name)
        providers.append(p.name)
    table = walk(host, model, providers)
    return table, dict(zip(providers, devices, strict=True))


def exact_total(table, devices, assign):
    nodes = [type("N", (), {"name": n.name, "provider": p, "cost_us":
                            table.answers[n.name][p].cost.total_us})()
             for n, p in zip(table.nodes, assign, strict=True)]
    placement = Placement("x", table.providers, nodes, table, devices)
    return sum(n.cost_us for n in nodes) + sum(t.cost_us for t in implied_transfers(placement))


def brute_force(table, devices):
    problem = PlacementObjective(table, devices, {})
    return min(problem.total_us(a) for a in itertools.product(*problem.options)), problem


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("devices", [(CPU, SIM0), (SIM0, CPU), (SIM0, SIM1)],
                         ids=["cpu+sim", "sim+cpu", "sim+sim"])
def test_two_devices_optimal_equals_brute_force(seed, devices):
    table, devs = random_case(seed, devices, 6 + seed % 5)
    best, problem = brute_force(table, devs)
    placement = choose(table, devs)
    assert placement.strategy == "optimal"
    assert placement.total_us == pytest.approx(best, abs=0.05)
    assert placement.total_us <= placement.comparison["greedy"] + 1e-6
    assert placement.total_us <= placement.comparison["priority"] + 1e-6


@pytest.mark.parametrize("seed", range(12))
def test_host_inputs_with_the_host_as_one_device_stay_exact(seed):
    table, devs = random_case(100 + seed, (CPU, SIM0), 6 + seed % 5, host_inputs=True)
    best, _ = brute_force(table, devs)
    assert choose(table, devs).total_us == pytest.approx(best, abs=0.05)


@pytest.mark.parametrize("seed", range(10))
def test_three_devices_within_one_percent_of_brute_force(seed):
    table, devs = random_case(200 + seed, (CPU, SIM0, SIM1), 6 + seed % 3)
    best, _ = brute_force(table, devs)
    placement = choose(table, devs)
    assert best - 1e-6 <= placement.total_us <= best * 1.01 + 0.05
    assert placement.total_us <= placement.comparison["greedy"] + 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_the_optimised_objective_is_what_implied_transfers_prices(seed):
    table, devs = random_case(300 + seed, (CPU, SIM0, SIM1), 8, host_inputs=True)
    problem = PlacementObjective(table, devs, {})
    rng = random.Random(seed)
    for _ in range(20):
        assign = [rng.choice(list(o)) for o in problem.options]
        names = [table.providers[p] for p in assign]
        assert problem.total_us(assign) == pytest.approx(exact_total(table, devs, names))
    placement = choose(table, devs)
    assert placement.comparison["optimal"] == pytest.approx(placement.total_us)


def test_optimal_avoids_copies_that_greedy_pays_for():
    # a chain: the sim device is 1 us cheaper per node, but each copy costs > 5 us
    table, devs = _chain_case(sim_cost=9.0, cpu_cost=10.0, n=3)
    greedy = choose(table, devs, strategy="greedy")
    optimal = choose(table, devs)
    assert {n.provider for n in greedy.nodes} == {"sim"}
    assert {n.provider for n in optimal.nodes} == {"cpu"} and not optimal.transfers
    assert optimal.total_us < greedy.total_us
    assert optimal.comparison == pytest.approx(
        {"optimal": 30.0, "greedy": greedy.total_us, "priority": 30.0})
    assert optimal.to_dict()["comparison"]["greedy"] == pytest.approx(greedy.total_us)


def test_optimal_moves_a_long_chain_when_the_savings_pay_for_the_copies():
    table, devs = _chain_case(sim_cost=1.0, cpu_cost=10.0, n=6)
    optimal = choose(table, devs)
    assert {n.provider for n in optimal.nodes} == {"sim"}
    assert [(t.tensor, t.destination) for t in optimal.transfers] == [("x", "sim:0"),
                                                                      ("v5", "cpu")]


def test_pins_and_sole_claimants_hold():
    table, devs = _chain_case(sim_cost=1.0, cpu_cost=10.0, n=6, sim_declines={"n2"})
    optimal = choose(table, devs, pins={"n4": "cpu"})
    where = {n.name: n.provider for n in optimal.nodes}
    assert where["n2"] == "cpu" and where["n4"] == "cpu" and optimal.by_node["n4"].pinned
    best, _ = brute_force_with_pins(table, devs, {"n4": "cpu"})
    assert optimal.total_us == pytest.approx(best, abs=0.05)


def test_ties_prefer_the_users_order():
    for order in (["cpu", "cpu2"], ["cpu2", "cpu"]):
        table, devs = _chain_case(sim_cost=10.0, cpu_cost=10.0, n=2, sim_device=CPU,
                                  order=order, sim_name="cpu2")
        assert {n.provider for n in choose(table, devs).nodes} == {order[0]}


def brute_force_with_pins(table, devices, pins):
    problem = PlacementObjective(table, devices, pins)
    return min(problem.total_us(a) for a in itertools.product(*problem.options)), problem


def _chain_case(sim_cost, cpu_cost, n, sim_declines=(), sim_device=SIM0, order=None,
                sim_name="sim"):
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"v{i - 1}"], [f"v{i}"], name=f"n{i}")
             for i in range(n)]
    model = load_model(make_model(nodes, [("x", TensorProto.FLOAT, [256])],
                                  [(f"v{n - 1}", TensorProto.FLOAT, [256])]))
    names = [f"n{i}" for i in range(n)]
    host = Host(strict=False)
    sim = CostedProvider(sim_name, sim_device,
                         {m: sim_cost for m in names if m not in set(sim_declines)})
    cpu = CostedProvider("cpu", CPU, dict.fromkeys(names, cpu_cost))
    for p in (sim, cpu):
        host.register(p, name=p.name)
    order = order or ["cpu", sim_name]
    devices = {"cpu": CPU, sim_name: sim_device}
    return walk(host, model, order), devices


# -- partition launches (providers that compile) ------------------------------------------------


class CompilingProvider(CostedProvider):
    """A CostedProvider that compiles partitions, each launch costing ``launch_us``."""

    def __init__(self, name, device, costs, launch_us):
        super().__init__(name, device, costs)
        self.launch_us = launch_us

    @hookimpl
    def ep_host_provider_info(self):
        return ProviderInfo(name=self.name, device=self.device,
                            partition_launch_us=self.launch_us)

    @hookimpl
    def ep_host_compile_partition(self, partition, context):
        raise NotImplementedError  # placement never compiles


def launch_case(seed, devices, n_nodes, launches):
    """``random_case`` with provider k compiling at ``launches[k]`` per partition (0: not)."""
    table, devs = random_case(seed, devices, n_nodes)
    rng = random.Random(seed)
    model = load_model(random_model(rng, n_nodes))
    host = Host(strict=False)
    for k, device in enumerate(devices):
        costs = {n: table.answers[n][f"p{k}"].cost.compute_us for n in table.answers
                 if table.answers[n][f"p{k}"].is_supported}
        cls = CompilingProvider if launches[k] else CostedProvider
        args = (launches[k],) if launches[k] else ()
        host.register(cls(f"p{k}", device, costs, *args), name=f"p{k}")
    return walk(host, model, list(devs)), devs


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("devices, launches", [((CPU, SIM0), (0, 40)), ((SIM0, CPU), (25, 0)),
                                               ((CPU, CPU), (30, 10)), ((SIM0, SIM1), (15, 60))],
                         ids=["cpu+compiling-sim", "compiling-sim+cpu", "two-compilers-on-host",
                              "two-compiling-devices"])
def test_two_providers_with_partition_launches_stay_exact(seed, devices, launches):
    table, devs = launch_case(400 + seed, devices, 6 + seed % 5, launches)
    assert table.partition_launch_us == {f"p{k}": float(v) for k, v in enumerate(launches) if v}
    best, _ = brute_force(table, devs)
    placement = choose(table, devs)
    assert placement.total_us == pytest.approx(best, abs=0.05)
    assert placement.total_us <= placement.comparison["greedy"] + 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_three_providers_with_launches_never_beat_brute_force_nor_lose_to_greedy(seed):
    table, devs = launch_case(500 + seed, (CPU, SIM0, SIM1), 7, (0, 20, 35))
    best, _ = brute_force(table, devs)
    placement = choose(table, devs)
    assert best - 1e-6 <= placement.total_us <= placement.comparison["greedy"] + 1e-6
    assert placement.total_us <= placement.comparison["priority"] + 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_the_launch_objective_is_what_the_placement_reports(seed):
    table, devs = launch_case(600 + seed, (CPU, SIM0, SIM1), 8, (10, 0, 30))
    problem = PlacementObjective(table, devs, {})
    rng = random.Random(seed)
    for _ in range(20):
        assign = [rng.choice(list(o)) for o in problem.options]
        names = [table.providers[p] for p in assign]
        nodes = [type("N", (), {"name": n.name, "provider": p, "cost_us":
                                table.answers[n.name][p].cost.total_us})()
                 for n, p in zip(table.nodes, names, strict=True)]
        placement = Placement("x", table.providers, nodes, table, devs)
        placement.transfers = implied_transfers(placement)
        assert problem.total_us(assign) == pytest.approx(placement.total_us)


def test_a_compiler_split_into_many_partitions_loses_to_one_runtime():
    """A chain the compiling provider could run cheaper node by node, but only in three
    partitions (it declines two nodes): with 30 us per launch, everything on the other
    provider is cheaper, and optimal says so where greedy does not."""
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(7)]
    model = load_model(make_model(nodes, [("v0", TensorProto.FLOAT, [4])],
                                  [("v7", TensorProto.FLOAT, [4])]))
    host = Host(strict=False)
    host.register(CompilingProvider("comp", CPU, {f"n{i}": 1.0 for i in (0, 1, 3, 4, 6)}, 30.0),
                  name="comp")
    host.register(CostedProvider("cpu", CPU, {f"n{i}": 5.0 for i in range(7)}), name="cpu")
    table = walk(host, model, ["comp", "cpu"])
    devs = {"comp": CPU, "cpu": CPU}
    greedy = choose(table, devs, strategy="greedy")
    assert [n.provider for n in greedy.nodes] == ["comp", "comp", "cpu", "comp", "comp", "cpu",
                                                  "comp"]
    assert greedy.launch_cost_us == pytest.approx(90.0)
    optimal = choose(table, devs)
    assert {n.provider for n in optimal.nodes} == {"cpu"}
    assert optimal.total_us == pytest.approx(35.0)
    assert greedy.total_us == pytest.approx(5 * 1.0 + 2 * 5.0 + 90.0)
    assert optimal.to_dict()["totals"]["partition_launch_us"] == 0.0
