"""The capability walk: every node x every provider -> that provider's ``KernelMatch``.

Each provider is asked alone, so an exception or a malformed answer becomes that provider's
decline for that node (code ``fault``) and nothing else is lost. The whole table is the product.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ep_host.cost import Cost
from ep_host.discovery import Host, ProviderRecord, describe_exception
from ep_host.errors import ProviderError
from ep_host.graph import Model, NodeView
from ep_host.match import Decline, KernelMatch, ReasonCode
from ep_host.provider import ProviderContext


@dataclass
class CapabilityTable:
    """Every provider's answer for every node, in graph order and the user's provider order."""

    providers: list[str]
    nodes: list[NodeView]
    answers: dict[str, dict[str, KernelMatch]] = field(default_factory=dict)
    contexts: dict[str, ProviderContext] = field(default_factory=dict)

    def answer(self, node: str, provider: str) -> KernelMatch:
        return self.answers[node][provider]

    def claimants(self, node: str) -> list[str]:
        row = self.answers[node]
        return [p for p in self.providers if row[p].is_supported]


def provider_context(model: Model, record: ProviderRecord, options: Mapping[str, Any]) -> ProviderContext:
    return ProviderContext(
        provider=record.name,
        options=MappingProxyType(dict(options)),
        opset_imports=MappingProxyType(dict(model.opset_imports)),
        model_dir=model.base_dir,
    )


def check_answer(answer: Any) -> KernelMatch:
    """``answer`` if it is a valid ``KernelMatch``, else a ``fault`` decline that says why."""
    if not isinstance(answer, KernelMatch):
        shown = "None (no answer)" if answer is None else type(answer).__name__
        return KernelMatch.unsupported(
            f"provider returned {shown} instead of a KernelMatch", ReasonCode.FAULT
        )
    if answer.is_supported:
        cost = answer.cost
        if not isinstance(cost, Cost):
            return KernelMatch.unsupported(
                f"provider claimed the node with cost {type(cost).__name__}, not a Cost",
                ReasonCode.FAULT,
            )
        total = cost.total_us
        if not math.isfinite(total) or total < 0:
            return KernelMatch.unsupported(
                f"provider claimed the node with an invalid cost ({total} us)", ReasonCode.FAULT
            )
    elif not answer.reason:
        return KernelMatch.unsupported("provider declined without a reason", ReasonCode.FAULT)
    return answer


def ask(host: Host, record: ProviderRecord, node: NodeView, context: ProviderContext) -> KernelMatch:
    """One provider's answer for one node, its faults turned into declines."""
    if record.status != "available":
        return KernelMatch.unsupported(
            f"provider {record.status}: {record.fault}",
            ReasonCode.DEVICE if record.status == "unavailable" else ReasonCode.FAULT,
        )
    try:
        answers = record.callers["ep_host_supports_op"](node=node, context=context)
    except Decline as d:
        return KernelMatch.unsupported(d.reason, d.code)
    except Exception as exc:
        if host.strict:
            raise ProviderError(
                f"provider {record.name!r} raised in supports_op for node {node.name!r}"
            ) from exc
        return KernelMatch.unsupported(
            f"provider raised {describe_exception(exc)}", ReasonCode.FAULT
        )
    answer = check_answer(answers[0] if answers else None)
    if host.strict and answer.code == ReasonCode.FAULT:
        raise ProviderError(f"provider {record.name!r} on node {node.name!r}: {answer.reason}")
    return answer


def walk(
    host: Host,
    model: Model,
    providers: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
    nodes: Iterable[NodeView] | None = None,
) -> CapabilityTable:
    """Ask every provider in ``providers`` about every node of the model's main graph."""
    options = options or {}
    records = [host.records[p] for p in providers]
    nodes = list(model.graph.nodes if nodes is None else nodes)
    table = CapabilityTable(providers=list(providers), nodes=nodes)
    table.contexts = {r.name: provider_context(model, r, options.get(r.name, {})) for r in records}
    for node in nodes:
        table.answers[node.name] = {
            r.name: ask(host, r, node, table.contexts[r.name]) for r in records
        }
    return table
