"""Rendering placements and capability tables: terminal tables (rich on a terminal, plain text
when piped) and JSON with a versioned schema (``ep-host/placement/v1``, see docs/)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, Any

from ep_host.capability import CapabilityTable
from ep_host.match import KernelMatch
from ep_host.placement import SCHEMA, Placement
from ep_host.text import REASON_LIMIT, capped, printable, shown

# Characters of one table cell: a reason of REASON_LIMIT plus its code and the cap's note.
CELL_LIMIT = REASON_LIMIT + 100


def fmt_us(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:.2f} s"
    if us >= 1e3:
        return f"{us / 1e3:.2f} ms"
    return f"{us:.2f} us"


def fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def verdict(answer: KernelMatch) -> str:
    if answer.is_supported:
        return fmt_us(answer.cost.total_us)
    return f"declined [{answer.code}]: {capped(answer.reason)}"


class Output:
    """Writes tables and lines: rich on a terminal, aligned plain text otherwise.

    Every cell and line is printed literally: control characters are shown as escapes
    (:func:`ep_host.text.printable`), cells are capped, and rich never reads markup in them.
    """

    def __init__(self, stream: IO[str] | None = None, rich: bool | None = None):
        self.stream = stream or sys.stdout
        self.rich = self.stream.isatty() if rich is None else rich
        self._console = None

    @property
    def console(self) -> Any:
        if self._console is None:
            from rich.console import Console

            self._console = Console(file=self.stream, highlight=False, markup=False,
                                    emoji=False)
        return self._console

    def line(self, text: str = "") -> None:
        text = printable(text)
        if self.rich:
            from rich.text import Text

            self.console.print(Text(text), soft_wrap=True)
        else:
            print(text, file=self.stream)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        rows = [[shown(c, CELL_LIMIT) for c in row] for row in rows]
        title, columns = printable(title), [printable(c) for c in columns]
        if self.rich:
            from rich.table import Table
            from rich.text import Text

            table = Table(title=Text(title), title_justify="left")
            for c in columns:
                table.add_column(Text(c), overflow="fold")
            for row in rows:
                table.add_row(*(Text(c) for c in row))
            self.console.print(table)
            return
        if title:
            print(title, file=self.stream)
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
                  for i, c in enumerate(columns)]
        widths[-1] = 0  # the last column is free text; do not pad it
        print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip(),
              file=self.stream)
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(),
                  file=self.stream)


# ---------------------------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------------------------


def explain_rows(
    table: CapabilityTable,
    placement: Placement | None,
    *,
    node: str | None = None,
    op: str | None = None,
    provider: str | None = None,
) -> list[tuple[Any, ...]]:
    chosen = {} if placement is None else {n.name: n.provider for n in placement.nodes}
    providers = [provider] if provider else table.providers
    rows = []
    for n in table.all_nodes or table.nodes:
        if node and n.name != node:
            continue
        if op and op not in (n.op_type, n.qualified_op) and not any(
                op in (o.op_type, f"{o.domain}::{o.op_type}")
                for o in n.graph.model.unfused.get(n.name, ())):  # a fused node made from op
            continue
        for i, p in enumerate(providers):
            answer = table.answers[n.name][p]
            mark = "*" if chosen.get(n.name) == p else ""
            rows.append((n.name if i == 0 else "", n.qualified_op if i == 0 else "",
                         f"{mark}{p}", verdict(answer)))
        if n.name in table.expanded:
            body = table.expanded[n.name]
            shown = ", ".join(body[:3]) + (", ..." if len(body) > 3 else "")
            what = ("kept as the nodes it fused" if n.name in n.graph.model.unfused
                    else "expanded into its function body")
            rows.append(("", "", "->", f"no provider claims it: {what} "
                         f"({len(body)} nodes: {shown})"))
    return rows


def render_explain(out: Output, table: CapabilityTable, placement: Placement | None,
                   optimizations: Mapping[str, int] | None = None, **filters: Any) -> None:
    rows = explain_rows(table, placement, **filters)
    out.table(
        "Every provider's answer for every node (* = chosen)",
        ["node", "op", "provider", "cost or reason"],
        rows,
    )
    if not rows:
        out.line("no node matches the filters")
    if placement is not None:
        render_compiled_partitions(out, placement)
    if optimizations:
        out.line(optimizations_line(optimizations))


def optimizations_line(optimizations: Mapping[str, int]) -> str:
    """``graph optimizations: conv_bn_folding (53 rewrites), ...`` for the passes that changed
    the graph."""
    done = ", ".join(f"{name} ({count} rewrite{'s' if count != 1 else ''})"
                     for name, count in optimizations.items())
    return f"graph optimizations: {done} (--no-optimize shows the model as written)"


def explain_dict(table: CapabilityTable, placement: Placement | None, model: str,
                 unplaceable: Sequence[str] = ()) -> dict[str, Any]:
    """The placement JSON; when placement failed, nodes have ``provider: null``. Reasons are
    capped at ``REASON_LIMIT`` characters (a provider's megabyte of text once per node would
    make the file unbounded)."""
    if placement is not None:
        data = placement.to_dict()
        data["unplaceable"] = []
        data["expanded"] = _expanded(table)
        for n in data["nodes"]:
            n["answers"] = {p: capped_answer(a) for p, a in n["answers"].items()}
        return data
    return {
        "schema": SCHEMA,
        "model": model,
        "strategy": None,
        "providers": [{"name": p, "device": None} for p in table.providers],
        "nodes": [
            {
                "name": n.name,
                "op_type": n.op_type,
                "domain": n.domain,
                "provider": None,
                "cost_us": None,
                "pinned": False,
                "answers": {p: capped_answer(table.answers[n.name][p].to_dict())
                            for p in table.providers},
            }
            for n in table.nodes
        ],
        "transfers": [],
        "totals": None,
        "partitions": [],
        "compiled_partitions": [],
        "unplaceable": list(unplaceable),
        "expanded": _expanded(table),
    }


def capped_answer(answer: dict[str, Any]) -> dict[str, Any]:
    """An answer's JSON with its reason capped at ``REASON_LIMIT`` characters."""
    if "reason" in answer:
        answer["reason"] = capped(answer["reason"])
    return answer


def _expanded(table: CapabilityTable) -> dict[str, Any]:
    """Nodes replaced by their function bodies: every provider's reason and the body's nodes."""
    by_name = {n.name: n for n in table.all_nodes}
    return {
        name: {
            "op_type": by_name[name].op_type,
            "domain": by_name[name].domain,
            "answers": {p: capped_answer(table.answers[name][p].to_dict())
                        for p in table.providers},
            "into": body,
        }
        for name, body in table.expanded.items()
    }


# ---------------------------------------------------------------------------------------------
# place
# ---------------------------------------------------------------------------------------------


def render_placement(out: Output, placement: Placement) -> None:
    totals = placement.totals()
    out.table(
        f"Placement of {placement.model} ({placement.strategy})",
        ["provider", "nodes", "estimated"],
        [(p, t["nodes"], fmt_us(t["cost_us"])) for p, t in totals.items()],
    )
    parts = placement.partitions()
    out.table(
        f"{len(parts)} partition(s)",
        ["#", "provider", "nodes", "estimated", "first .. last"],
        [(i, p.provider, len(p.nodes), fmt_us(p.cost_us),
          p.nodes[0] if len(p.nodes) == 1 else f"{p.nodes[0]} .. {p.nodes[-1]}")
         for i, p in enumerate(parts)],
    )
    render_compiled_partitions(out, placement)
    if placement.transfers:
        out.table(
            f"{len(placement.transfers)} device copies",
            ["tensor", "from", "to", "bytes", "estimated"],
            [(t.tensor, t.source, t.destination, fmt_bytes(t.nbytes), fmt_us(t.cost_us))
             for t in placement.transfers],
        )
    launches = placement.launch_cost_us
    out.line(
        f"total estimated: {fmt_us(placement.total_us)} "
        f"(nodes {fmt_us(placement.node_cost_us)}, copies {fmt_us(placement.transfer_cost_us)}"
        + (f", partition launches {fmt_us(launches)})" if launches else ")")
    )
    if placement.comparison:
        chosen = placement.strategy
        mine = placement.comparison[chosen]
        out.line("estimated totals by strategy: " + ", ".join(
            f"{s} {fmt_us(us)}" + (f" ({chosen} saves {fmt_us(us - mine)})"
                                   if s != chosen and us > mine else "")
            for s, us in placement.comparison.items()))


def render_compiled_partitions(out: Output, placement: Placement) -> None:
    """The groups providers that compile will run as one kernel each, when there are any."""
    parts = placement.compiled_partitions()
    if not parts:
        return
    out.table(
        f"{len(parts)} compiled partition(s)",
        ["#", "provider", "nodes", "estimated", "members"],
        [(i, p.provider, len(p.nodes),
          fmt_us(p.cost_us) + (f" + {fmt_us(p.launch_us)} launch" if p.launch_us else ""),
          ", ".join(p.nodes) if len(p.nodes) <= 4
          else f"{', '.join(p.nodes[:3])}, ... {p.nodes[-1]}")
         for i, p in enumerate(parts)],
    )


def write_json(data: Any, path: str) -> None:
    text = json.dumps(data, indent=2, default=str)
    if path == "-":
        sys.stdout.write(text + "\n")
        return
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
