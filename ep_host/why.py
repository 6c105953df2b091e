"""``ep-host why``: every provider's verdict for one node, and for a provider that claims the
node but lost it, the margin and where it comes from (its own cost, the copies it would force).

The margin is found by re-pricing the placement with that one node moved to that provider,
through :func:`ep_host.transfers.implied_transfers`, the objective ``optimal`` minimises.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ep_host.errors import HostError
from ep_host.placement import Placement, find_node
from ep_host.text import capped
from ep_host.transfers import Transfer, implied_transfers


@dataclass
class Copy:
    """A copy that moving the node adds (``+``) or saves (``-``)."""

    sign: str
    transfer: Transfer

    def to_dict(self) -> dict[str, Any]:
        return {"change": "added" if self.sign == "+" else "removed", **self.transfer.to_dict()}


@dataclass
class Verdict:
    provider: str
    outcome: str  # "chosen", "declined" or "lost"
    cost_us: float | None = None
    reason: str = ""
    code: str | None = None
    margin_us: float | None = None  # how much more the whole placement would cost
    own_us: float | None = None  # of which: this provider's cost minus the chosen one's
    copies_us: float | None = None  # of which: copies added minus copies saved
    copies: list[Copy] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"provider": self.provider, "outcome": self.outcome}
        if self.outcome == "declined":
            out.update(reason=self.reason, code=self.code)
            return out
        out["cost_us"] = self.cost_us
        if self.outcome == "lost":
            out.update(margin_us=self.margin_us, own_us=self.own_us, copies_us=self.copies_us,
                       copies=[c.to_dict() for c in self.copies])
        return out


def why(placement: Placement, node: str, provider: str | None = None) -> list[Verdict]:
    """Each provider's verdict for ``node`` (or only ``provider``'s); a name of the model as
    written means the node doing its work after graph optimizations."""
    table = placement.table
    node, _ = find_node(table, node, placement.model)
    providers = placement.providers
    if provider is not None:
        if provider not in providers:
            raise HostError(f"provider {provider!r} is not in use "
                            f"(providers: {', '.join(providers) or 'none'})")
        providers = [provider]
    chosen = placement.by_node.get(node)  # None for a node expanded into its function body
    row = table.answers[node]
    verdicts = []
    for p in providers:
        answer = row[p]
        if not answer.is_supported:
            verdicts.append(Verdict(p, "declined", reason=capped(answer.reason),
                                    code=str(answer.code)))
        elif chosen is not None and chosen.provider == p:
            verdicts.append(Verdict(p, "chosen", cost_us=answer.cost.total_us))
        else:
            verdicts.append(_lost(placement, node, p, answer.cost.total_us))
    return verdicts


def _lost(placement: Placement, node: str, provider: str, cost_us: float) -> Verdict:
    index = next(i for i, n in enumerate(placement.nodes) if n.name == node)
    current = placement.nodes[index]
    moved_nodes = list(placement.nodes)
    moved_nodes[index] = replace(current, provider=provider, cost_us=cost_us, pinned=False)
    moved = replace(placement, nodes=moved_nodes, transfers=[])
    def key(t: Transfer) -> tuple[Any, ...]:
        return t.tensor, t.source, t.destination, t.source_layout, t.destination_layout

    before = {key(t): t for t in placement.transfers}
    after = {key(t): t for t in implied_transfers(moved)}
    copies = [Copy("+", t) for k, t in after.items() if k not in before]
    copies += [Copy("-", t) for k, t in before.items() if k not in after]
    copies_us = sum(c.transfer.cost_us if c.sign == "+" else -c.transfer.cost_us
                    for c in copies)
    own = cost_us - current.cost_us
    return Verdict(provider, "lost", cost_us=cost_us, margin_us=own + copies_us, own_us=own,
                   copies_us=copies_us, copies=copies)


def why_dict(placement: Placement, node: str, verdicts: list[Verdict]) -> dict[str, Any]:
    chosen = placement.by_node.get(node)
    return {
        "model": placement.model,
        "strategy": placement.strategy,
        "node": node,
        "chosen": chosen.provider if chosen else None,
        "pinned": bool(chosen and chosen.pinned),
        "expanded_into": placement.table.expanded.get(node),
        "verdicts": [v.to_dict() for v in verdicts],
    }


def render_why(out: Any, placement: Placement, node: str, verdicts: list[Verdict]) -> None:
    from ep_host.report import fmt_bytes, fmt_us

    chosen = placement.by_node.get(node)
    op = next((n.qualified_op for n in placement.table.all_nodes or placement.table.nodes
               if n.name == node), "?")
    if chosen is None:
        body = placement.table.expanded.get(node, [])
        out.line(f"{node} ({op}): no provider claims it; it runs as its function body "
                 f"({len(body)} nodes)")
    else:
        pin = ", pinned" if chosen.pinned else ""
        out.line(f"{node} ({op}) runs on {chosen.provider} ({placement.strategy}{pin})")
    for v in verdicts:
        if v.outcome == "declined":
            out.line(f"  {v.provider}: declined [{v.code}]: {v.reason}")
        elif v.outcome == "chosen":
            out.line(f"  {v.provider}: chosen, {fmt_us(v.cost_us)}")
        else:
            if v.margin_us >= 0:
                head = f"claims it at {fmt_us(v.cost_us)} but lost by {fmt_us(v.margin_us)}"
            else:
                head = (f"claims it at {fmt_us(v.cost_us)} and would save "
                        f"{fmt_us(-v.margin_us)}, but {placement.strategy} chose otherwise")
            out.line(f"  {v.provider}: {head}: own cost {_signed(v.own_us)}, "
                     f"copies {_signed(v.copies_us)}")
            for c in v.copies:
                t = c.transfer
                verb = "would add" if c.sign == "+" else "would save"
                if t.converts and not t.moves:
                    out.line(f"    {verb} layout conversion of {t.tensor} {t.layouts} on "
                             f"{t.destination} ({fmt_bytes(t.nbytes)}, {fmt_us(t.cost_us)})")
                    continue
                converted = f", converted {t.layouts}" if t.converts else ""
                out.line(f"    {verb} copy of {t.tensor} {t.source} -> {t.destination}"
                         f"{converted} ({fmt_bytes(t.nbytes)}, {fmt_us(t.cost_us)})")


def _signed(us: float) -> str:
    from ep_host.report import fmt_us

    return ("+" if us >= 0 else "-") + fmt_us(abs(us))
