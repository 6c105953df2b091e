"""Choosing providers: greedy, priority, pins, unplaceable nodes, implied copies, JSON."""

import json

import pytest
from hostkit import InlineProvider, add_relu_model

from ep_host import Device
from ep_host.capability import walk
from ep_host.errors import PlacementError
from ep_host.loading import load_model
from ep_host.placement import choose

SIM = Device(name="sim:0", kind="sim", link_gbps=1.0, link_latency_us=5.0)


def _place(host, providers, order=None, **kwargs):
    for p in providers:
        host.register(p, name=p.name)
    order = order or [p.name for p in providers]
    table = walk(host, load_model(add_relu_model()), order)
    devices = {p.name: host.records[p.name].info.device for p in providers}
    return choose(table, devices, model="m", **kwargs)


def test_greedy_takes_each_nodes_cheapest_provider(host):
    placement = _place(host, [InlineProvider("slow", cost_us=5.0),
                              InlineProvider("fast", ops=("Add",), cost_us=1.0)])
    assert {n.name: n.provider for n in placement.nodes} == {"add": "fast", "relu": "slow"}


def test_priority_takes_the_first_claimant_in_the_users_order(host):
    placement = _place(host, [InlineProvider("slow", cost_us=5.0),
                              InlineProvider("fast", cost_us=1.0)], strategy="priority")
    assert {n.provider for n in placement.nodes} == {"slow"}


def test_ties_break_by_the_users_order(host):
    providers = [InlineProvider("zeta"), InlineProvider("alpha")]
    placement = _place(host, providers, order=["zeta", "alpha"])
    assert {n.provider for n in placement.nodes} == {"zeta"}


def test_pins_override_the_strategy(host):
    placement = _place(host, [InlineProvider("slow", cost_us=5.0),
                              InlineProvider("fast", cost_us=1.0)], pins={"relu": "slow"})
    assert placement.by_node["relu"].provider == "slow" and placement.by_node["relu"].pinned
    assert placement.by_node["add"].provider == "fast"


def test_a_pin_to_a_declining_provider_says_why(host):
    with pytest.raises(PlacementError, match="'relu' is pinned to 'adder'.*only runs Add"):
        _place(host, [InlineProvider("adder", ops=("Add",)), InlineProvider("all")],
               pins={"relu": "adder"})


def test_a_pin_to_an_unknown_node_or_provider_is_an_error(host):
    with pytest.raises(PlacementError, match="'nope'"):
        _place(host, [InlineProvider("a")], pins={"nope": "a"})


def test_unplaceable_nodes_are_all_listed_with_every_providers_reason(host):
    with pytest.raises(PlacementError) as info:
        _place(host, [InlineProvider("negs", ops=("Neg",)), InlineProvider("muls", ops=("Mul",))])
    text = str(info.value)
    assert "2 node(s) cannot be placed" in text
    for node in ("add (Add)", "relu (Relu)"):
        assert node in text
    assert "negs: Add: negs only runs Neg" in text and "muls: Relu: muls only runs Mul" in text


def test_copies_between_devices_are_priced_once_per_destination(host):
    placement = _place(host, [InlineProvider("dev", ops=("Add",), cost_us=0.1, device=SIM),
                              InlineProvider("cpu", cost_us=1.0)], strategy="greedy")
    assert placement.by_node["add"].provider == "dev"
    moved = {(t.tensor, t.source, t.destination): t for t in placement.transfers}
    assert set(moved) == {("x", "cpu", "sim:0"), ("y", "cpu", "sim:0"), ("s", "sim:0", "cpu")}
    x = moved[("x", "cpu", "sim:0")]
    assert x.nbytes == 24 and x.cost_us == pytest.approx(5.0 + 24 / 1e3)
    assert placement.total_us == pytest.approx(placement.node_cost_us + 3 * (5.0 + 0.024))


def test_json_has_the_versioned_schema_and_every_answer(host):
    placement = _place(host, [InlineProvider("a", ops=("Add",)), InlineProvider("b")])
    data = json.loads(json.dumps(placement.to_dict()))
    assert data["schema"] == "ep-host/placement/v1"
    assert [p["name"] for p in data["providers"]] == ["a", "b"]
    relu = data["nodes"][1]
    assert relu["provider"] == "b"
    assert relu["answers"]["a"] == {"supported": False, "reason": "Relu: a only runs Add",
                                    "code": "op"}
    assert relu["answers"]["b"]["cost"]["total_us"] == 1.0
    assert data["totals"]["providers"]["a"]["nodes"] == 1
    assert [p["provider"] for p in data["partitions"]] == ["a", "b"]


def test_unknown_strategy_is_an_error(host):
    with pytest.raises(PlacementError, match="greedy"):
        _place(host, [InlineProvider("a")], strategy="random")


@pytest.mark.parametrize("strategy", ["greedy", "optimal"])
def test_constants_are_not_priced_as_per_run_copies(host, strategy):
    import numpy as np
    from hostkit import make_model
    from onnx import TensorProto, helper, numpy_helper

    model = make_model([helper.make_node("Add", ["x", "w"], ["y"], name="add")],
                       [("x", TensorProto.FLOAT, [1000])], [("y", TensorProto.FLOAT, [1000])],
                       initializers=[numpy_helper.from_array(np.ones(1000, np.float32), "w")])
    for p in (InlineProvider("dev", ops=("Add",), cost_us=0.1, device=SIM),
              InlineProvider("cpu", cost_us=50.0)):
        host.register(p, name=p.name)
    table = walk(host, load_model(model), ["dev", "cpu"])
    placement = choose(table, {"dev": SIM, "cpu": host.records["cpu"].info.device},
                       strategy=strategy, model="m")
    # the session uploads "w" to the device once, at creation; each run moves only x and y
    assert placement.by_node["add"].provider == "dev"
    assert {t.tensor for t in placement.transfers} == {"x", "y"}
