"""Layouts in placement: where a producer writes a layout its consumer does not read, the host
converts the tensor and prices the conversion like a device copy, in every strategy; the optimal
one includes conversions in its objective (checked against brute force over implied_transfers)."""

import itertools
import random

import pytest
from hostkit import make_model, random_costs, random_dag
from onnx import TensorProto, helper

from ep_host import Cost, Device, KernelMatch, ProviderInfo, hookimpl
from ep_host.capability import walk
from ep_host.discovery import Host
from ep_host.layouts import conversion_cost_us
from ep_host.loading import load_model
from ep_host.min_cut import PlacementObjective
from ep_host.placement import Placement, choose
from ep_host.transfers import implied_transfers

CPU = Device()
SIM0 = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=5.0)
SIM1 = Device(name="sim:1", kind="sim", link_gbps=4.0, link_latency_us=2.0)
SHAPE = [1, 8, 16, 16]
NBYTES = 4 * 8 * 16 * 16


class LayoutProvider:
    """Claims the nodes in ``costs`` at their cost, reading every input and writing every output
    in ``layout`` (``None``: the model's)."""

    def __init__(self, name, device, costs, layout=None):
        self.name, self.device, self.costs, self.layout = name, device, costs, layout

    @hookimpl
    def ep_host_provider_info(self):
        return ProviderInfo(name=self.name, device=self.device)

    @hookimpl
    def ep_host_supports_op(self, node, context):
        cost = self.costs.get(node.name)
        if cost is None:
            return KernelMatch.unsupported(f"{self.name} declines {node.name}")
        if self.layout is None:
            return KernelMatch.supported(Cost(compute_us=cost))
        return KernelMatch.supported(Cost(compute_us=cost),
                                     required_input_layouts=[self.layout] * len(node.inputs),
                                     output_layouts=[self.layout])


def random_case(seed, kinds, n_nodes):
    """``kinds``: (device, layout) per provider."""
    rng = random.Random(seed)
    model = load_model(random_dag(rng, n_nodes, SHAPE))
    names = [n.name for n in model.graph.nodes]
    costs = random_costs(rng, names, len(kinds), 200.0)
    host = Host(strict=False)
    devices = {}
    for k, (device, layout) in enumerate(kinds):
        provider = LayoutProvider(f"p{k}", device, costs[k], layout)
        host.register(provider, name=provider.name)
        devices[provider.name] = device
    return walk(host, model, list(devices)), devices


def priced(table, devices, names):
    """Node costs plus what implied_transfers charges, for a provider name per node."""
    nodes = [type("N", (), {"name": n.name, "provider": p,
                            "cost_us": table.answers[n.name][p].cost.total_us})()
             for n, p in zip(table.nodes, names, strict=True)]
    placement = Placement("x", table.providers, nodes, table, devices)
    return sum(n.cost_us for n in nodes) + sum(t.cost_us for t in implied_transfers(placement))


def brute_force(table, devices):
    claims = [table.claimants(n.name) for n in table.nodes]
    return min(priced(table, devices, names) for names in itertools.product(*claims))


TWO = {"cpu+nhwc-on-cpu": ((CPU, None), (CPU, "NHWC")),
       "nhwc-on-cpu+cpu": ((CPU, "NHWC"), (CPU, None)),
       "cpu+nhwc-on-sim": ((CPU, None), (SIM0, "NHWC"))}


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("kinds", list(TWO.values()), ids=list(TWO))
def test_two_providers_with_layouts_optimal_equals_brute_force(seed, kinds):
    table, devices = random_case(seed, kinds, 5 + seed % 4)
    placement = choose(table, devices)
    assert placement.total_us == pytest.approx(brute_force(table, devices), abs=0.05)
    assert placement.total_us <= placement.comparison["greedy"] + 1e-6
    assert placement.total_us <= placement.comparison["priority"] + 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_three_providers_with_layouts_never_beat_brute_force_nor_lose_to_greedy(seed):
    kinds = ((CPU, None), (CPU, "NHWC"), (SIM1, "NHWC"))
    table, devices = random_case(40 + seed, kinds, 5 + seed % 3)
    best = brute_force(table, devices)
    placement = choose(table, devices)
    assert best - 1e-6 <= placement.total_us <= best * 1.02 + 0.05
    assert placement.total_us <= placement.comparison["greedy"] + 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_the_objective_prices_conversions_as_implied_transfers_does(seed):
    kinds = ((CPU, None), (CPU, "NHWC"), (SIM0, "NHWC"), (SIM1, None))
    table, devices = random_case(80 + seed, kinds, 8)
    problem = PlacementObjective(table, devices, {})
    rng = random.Random(seed)
    for _ in range(20):
        assign = [rng.choice(list(o)) for o in problem.options]
        names = [table.providers[p] for p in assign]
        assert problem.total_us(assign) == pytest.approx(priced(table, devices, names))


def chain(nhwc_cost, cpu_cost, n):
    """x -> n0 -> ... -> n{n-1}: the NHWC provider on the CPU claims every node."""
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"v{i - 1}"], [f"v{i}"], name=f"n{i}")
             for i in range(n)]
    model = load_model(make_model(nodes, [("x", TensorProto.FLOAT, SHAPE)],
                                  [(f"v{n - 1}", TensorProto.FLOAT, SHAPE)]))
    names = [f"n{i}" for i in range(n)]
    host = Host(strict=False)
    for provider in (LayoutProvider("cpu", CPU, dict.fromkeys(names, cpu_cost)),
                     LayoutProvider("nhwc", CPU, dict.fromkeys(names, nhwc_cost), "NHWC")):
        host.register(provider, name=provider.name)
    return walk(host, model, ["cpu", "nhwc"]), {"cpu": CPU, "nhwc": CPU}


def test_greedy_pays_a_conversion_in_and_out_of_a_faster_nhwc_kernel():
    table, devices = chain(nhwc_cost=9.0, cpu_cost=10.0, n=1)
    greedy = choose(table, devices, strategy="greedy")
    assert [n.provider for n in greedy.nodes] == ["nhwc"]
    conversion = conversion_cost_us(NBYTES)
    assert [(t.tensor, t.source, t.destination, t.layouts, t.cost_us)
            for t in greedy.transfers] == [("x", "cpu", "cpu", "NCHW->NHWC", conversion),
                                           ("v0", "cpu", "cpu", "NHWC->NCHW", conversion)]
    assert greedy.total_us == pytest.approx(9.0 + 2 * conversion)
    optimal = choose(table, devices)
    assert [n.provider for n in optimal.nodes] == ["cpu"] and not optimal.transfers
    assert optimal.comparison["greedy"] == pytest.approx(greedy.total_us)


def test_optimal_takes_a_chain_in_nhwc_when_it_saves_more_than_two_conversions():
    conversion = conversion_cost_us(NBYTES)
    saving = conversion / 2  # per node: 6 nodes save 3 conversions, 2 are paid
    table, devices = chain(nhwc_cost=50.0 - saving, cpu_cost=50.0, n=6)
    optimal = choose(table, devices)
    assert {n.provider for n in optimal.nodes} == {"nhwc"}
    assert [t.tensor for t in optimal.transfers] == ["x", "v5"]
    assert optimal.total_us == pytest.approx(6 * (50.0 - saving) + 2 * conversion)
    short, devices = chain(nhwc_cost=50.0 - saving, cpu_cost=50.0, n=3)
    assert {n.provider for n in choose(short, devices).nodes} == {"cpu"}


def test_a_tensor_read_in_nhwc_by_two_consumers_is_converted_once():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"),
             helper.make_node("Relu", ["a"], ["b"], name="r1"),
             helper.make_node("Relu", ["a"], ["c"], name="r2")]
    model = load_model(make_model(nodes, [("x", TensorProto.FLOAT, SHAPE)],
                                  [("b", TensorProto.FLOAT, SHAPE),
                                   ("c", TensorProto.FLOAT, SHAPE)]))
    host = Host(strict=False)
    host.register(LayoutProvider("cpu", CPU, {"r0": 1.0}), name="cpu")
    host.register(LayoutProvider("nhwc", CPU, {"r1": 1.0, "r2": 1.0}, "NHWC"), name="nhwc")
    table = walk(host, model, ["cpu", "nhwc"])
    placement = choose(table, {"cpu": CPU, "nhwc": CPU})
    assert [(t.tensor, t.layouts) for t in placement.transfers] == [
        ("a", "NCHW->NHWC"), ("b", "NHWC->NCHW"), ("c", "NHWC->NCHW")]
    assert placement.to_dict()["transfers"][0]["layout"] == {
        "from": "NCHW", "to": "NHWC", "cost_us": conversion_cost_us(NBYTES)}
