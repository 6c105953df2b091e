"""The capability walk: every node x every provider, faults turned into declines."""

import math

import pytest
from hostkit import InlineProvider, add_relu_model

from ep_host import Cost, KernelMatch, hookimpl, require
from ep_host.capability import walk
from ep_host.errors import ProviderError
from ep_host.loading import load_model


class Raises(InlineProvider):
    @hookimpl
    def ep_host_supports_op(self, node, context):
        raise ZeroDivisionError("division by zero in my cost model")


class ReturnsString(InlineProvider):
    @hookimpl
    def ep_host_supports_op(self, node, context):
        return "yes please"


class ReturnsNothing(InlineProvider):
    @hookimpl
    def ep_host_supports_op(self, node, context):
        return None


class NanCost(InlineProvider):
    @hookimpl
    def ep_host_supports_op(self, node, context):
        return KernelMatch.supported(Cost(compute_us=float("nan")))


class ForgedNanCost(InlineProvider):
    """Gets a NaN past Cost's own check, as a careless provider could."""

    @hookimpl
    def ep_host_supports_op(self, node, context):
        cost = Cost(compute_us=1.0)
        object.__setattr__(cost, "compute_us", math.nan)
        return KernelMatch.supported(cost)


class Requires(InlineProvider):
    @hookimpl
    def ep_host_supports_op(self, node, context):
        require(node.op_type == "Relu", "{}: only Relu here", node.op_type, code="op")
        return KernelMatch.supported(Cost(compute_us=0.5))


def _walk(host, *providers):
    for p in providers:
        host.register(p, name=p.name)
    return walk(host, load_model(add_relu_model()), [p.name for p in providers])


@pytest.mark.parametrize("provider, reason", [
    (Raises("bad"), "provider raised ZeroDivisionError: division by zero in my cost model"),
    (ReturnsString("bad"), "provider returned str instead of a KernelMatch"),
    (ReturnsNothing("bad"), "provider returned None (no answer) instead of a KernelMatch"),
    (NanCost("bad"), "provider raised ValueError: Cost.compute_us must be finite"),
    (ForgedNanCost("bad"), "provider claimed the node with an invalid cost: "
                           "Cost.compute_us must be a finite float >= 0, got nan"),
])
def test_faults_become_that_providers_decline_and_others_still_answer(host, provider, reason):
    good = InlineProvider("good")
    table = _walk(host, provider, good)
    for node in ("add", "relu"):
        answer = table.answers[node]["bad"]
        assert not answer.is_supported and answer.code == "fault"
        assert reason in answer.reason
        assert table.answers[node]["good"].is_supported


def test_require_inside_supports_op_declines_with_its_reason(host):
    table = _walk(host, Requires("picky"))
    assert table.answers["relu"]["picky"].is_supported
    add = table.answers["add"]["picky"]
    assert (add.is_supported, add.reason, add.code) == (False, "Add: only Relu here", "op")


def test_an_unavailable_provider_declines_with_its_reason_and_is_never_asked(host):
    gone = InlineProvider("gone", available=False, reason="no device visible")
    table = _walk(host, gone)
    answer = table.answers["add"]["gone"]
    assert answer.code == "device" and "no device visible" in answer.reason
    assert gone.asked == []


def test_strict_mode_reraises(host):
    host.strict = True
    with pytest.raises(ProviderError, match="'bad'"):
        _walk(host, Raises("bad"))


def test_the_whole_table_is_kept(host):
    table = _walk(host, InlineProvider("a", ops=("Add",)), InlineProvider("b"))
    assert [n.name for n in table.nodes] == ["add", "relu"]
    assert set(table.answers["relu"]) == {"a", "b"}
    assert table.claimants("relu") == ["b"]
    assert table.claimants("add") == ["a", "b"]
