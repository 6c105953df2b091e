"""Rendering placements and capability tables: terminal tables (rich on a terminal, plain text
when piped) and JSON with a versioned schema (``ep-host/placement/v1``, see docs/)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, Any

from ep_host.capability import CapabilityTable
from ep_host.match import KernelMatch
from ep_host.placement import SCHEMA, Placement, source_nodes
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
        return fmt_us(answer.cost.total_us) + layouts_note(answer)
    return f"declined [{answer.code}]: {capped(answer.reason)}"


def layouts_note(answer: KernelMatch) -> str:
    """`` (in NHWC, out NHWC)`` for a claim that reads or writes a layout not the model's."""
    required, produced = answer.required_input_layouts or (), answer.output_layouts
    if not any(name is not None for name in (*required, *produced)):
        return ""

    def names(layouts: Any) -> str:
        return ",".join(name or "model" for name in layouts)

    parts = ([f"in {names(required)}"] if required else []) + (
        [f"out {names(produced)}"] if produced else [])
    return f" ({'; '.join(parts)})"


FORMATS = ("rich", "plain", "markdown")

# What markdown reads as syntax anywhere in a line or a table cell (``|`` ends a cell), and what it
# reads as a block (a heading, a list, a rule) at the start of one: each is written escaped.
_MARKDOWN_INLINE = set("\\`*_[]<>|~&")
_MARKDOWN_BLOCK_START = re.compile(r"^(\s*)(\d+(?=[.)])|[#+\-=>])")


def markdown_literal(text: str, line: bool = True) -> str:
    """``text`` as GitHub markdown that renders as exactly ``text``: every character markdown
    could read as syntax backslash-escaped; with ``line`` (a line, not a table cell) also a
    block's mark at its start (a list's ``1.`` as ``1\\.``)."""
    text = "".join("\\" + ch if ch in _MARKDOWN_INLINE else ch for ch in text)
    start = _MARKDOWN_BLOCK_START.match(text) if line else None
    if start:
        mark = start.group(2)
        escaped = mark + "\\" if mark[0].isdigit() else "\\" + mark
        text = start.group(1) + escaped + text[start.end():]
    return text


class Output:
    """Writes tables and lines: rich on a terminal, aligned plain text otherwise, or GitHub
    markdown (``format="markdown"``; ``"rich"`` and ``"plain"`` force the others).

    Every cell and line is printed literally: control characters are shown as escapes
    (:func:`ep_host.text.printable`), cells are capped, rich never reads markup in them, and in
    markdown every character markdown would read as syntax is escaped.
    """

    def __init__(self, stream: IO[str] | None = None, rich: bool | None = None,
                 format: str | None = None):
        self.stream = stream or sys.stdout
        if format is not None and format not in FORMATS:
            raise ValueError(f"format {format!r}: expected one of {', '.join(FORMATS)}")
        self.markdown = format == "markdown"
        if format in ("rich", "plain"):
            rich = format == "rich"
        self.rich = not self.markdown and (self.stream.isatty() if rich is None else rich)
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
        if self.markdown:  # a paragraph each, so that lines do not run together
            if text.strip():
                print(markdown_literal(text) + "\n", file=self.stream)
            return
        if self.rich:
            from rich.text import Text

            self.console.print(Text(text), soft_wrap=True)
        else:
            print(text, file=self.stream)

    def table(self, title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
        rows = [[shown(c, CELL_LIMIT) for c in row] for row in rows]
        title, columns = printable(title), [printable(c) for c in columns]
        if self.markdown:
            self._markdown_table(title, columns, rows)
            return
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

    def _markdown_table(self, title: str, columns: Sequence[str],
                        rows: Sequence[Sequence[str]]) -> None:
        def row_line(cells: Sequence[str]) -> str:
            return "| " + " | ".join(markdown_literal(c, line=False) for c in cells) + " |"

        if title:
            print(markdown_literal(title) + "\n", file=self.stream)
        print(row_line(columns), file=self.stream)
        print("|" + "|".join(" --- " for _ in columns) + "|", file=self.stream)
        for row in rows:
            print(row_line(row), file=self.stream)
        print(file=self.stream)


# ---------------------------------------------------------------------------------------------
# explain
# ---------------------------------------------------------------------------------------------


@dataclass
class ExplainView:
    """What ``explain`` prints: the rows of the table, and the providers taken out of it
    because they decline every listed node for one reason (an unavailable provider)."""

    rows: list[tuple[Any, ...]]
    uniform: dict[str, KernelMatch]  # provider -> the one decline it gives every listed node
    listed: int  # how many nodes the view covers


def _unclaimed_bodies(table: CapabilityTable) -> set[str]:
    """The nodes of function bodies (and fused nodes kept as written) that no provider claims
    one of: nobody expanded them for a reason worth a row each."""
    hidden: set[str] = set()
    for body in table.expanded.values():
        if not any(table.claimants(name) for name in body if name in table.answers):
            hidden.update(body)
    return hidden


def _listed_nodes(table: CapabilityTable, node: str | None, op: str | None,
                  every: bool) -> list[Any]:
    hidden = set() if every or node else _unclaimed_bodies(table)
    listed = []
    for n in table.all_nodes or table.nodes:
        if node and n.name != node:
            continue
        if n.name in hidden:
            continue
        if op and op not in (n.op_type, n.qualified_op) and not any(
                op in (o.op_type, f"{o.domain}::{o.op_type}")
                for o in n.graph.model.unfused.get(n.name, ())):  # a fused node made from op
            continue
        listed.append(n)
    return listed


def _uniform_declines(table: CapabilityTable, listed: Sequence[Any],
                      providers: Sequence[str]) -> dict[str, KernelMatch]:
    """The providers that decline every one of ``listed`` (two or more) with one code and one
    reason, and that decline."""
    if len(listed) < 2:
        return {}
    uniform = {}
    for p in providers:
        first = table.answers[listed[0].name][p]
        if first.is_supported:
            continue
        key = (first.code, first.reason)
        if all(not (a := table.answers[n.name][p]).is_supported and (a.code, a.reason) == key
               for n in listed[1:]):
            uniform[p] = first
    return uniform


def explain_view(
    table: CapabilityTable,
    placement: Placement | None,
    *,
    node: str | None = None,
    op: str | None = None,
    provider: str | None = None,
    every: bool = False,
) -> ExplainView:
    """The rows ``explain`` prints. Unless ``every``: a provider that declines every listed node
    for one reason is left out of the rows (``uniform``), a decline repeated word for word is
    shown once with a count, and the nodes of a function body nobody claims are not listed."""
    chosen = {} if placement is None else {n.name: n.provider for n in placement.nodes}
    providers = [provider] if provider else list(table.providers)
    listed = _listed_nodes(table, node, op, every)
    uniform = {} if every else _uniform_declines(table, listed, providers)
    shown_providers = [p for p in providers if p not in uniform]
    repeats: dict[tuple[str, str, str], int] = {}
    if not every:
        for n in listed:
            for p in shown_providers:
                answer = table.answers[n.name][p]
                if not answer.is_supported:
                    key = (p, str(answer.code), answer.reason)
                    repeats[key] = repeats.get(key, 0) + 1
    done: set[tuple[str, str, str]] = set()
    rows: list[tuple[Any, ...]] = []
    for n in listed:
        cells = []
        for p in shown_providers:
            answer = table.answers[n.name][p]
            mark = "*" if chosen.get(n.name) == p else ""
            text = verdict(answer)
            if not every and not answer.is_supported:
                key = (p, str(answer.code), answer.reason)
                if key in done:
                    continue
                done.add(key)
                more = repeats[key] - 1
                if more:
                    text += f" (the same for {more} more node{'s' if more != 1 else ''})"
            cells.append((f"{mark}{p}", text))
        if n.name in table.expanded:
            body = table.expanded[n.name]
            what = ("kept as the nodes it fused" if n.name in n.graph.model.unfused
                    else "expanded into its function body")
            if not every and not node and not any(
                    table.claimants(b) for b in body if b in table.answers):
                cells.append(("->", f"no provider claims it: {what}: "
                              f"{len(body)} nodes, none claimed"))
            else:
                names = ", ".join(body[:3]) + (", ..." if len(body) > 3 else "")
                cells.append(("->", f"no provider claims it: {what} "
                              f"({len(body)} nodes: {names})"))
        if not cells:
            cells.append(("", "every answer is a decline shown above" if providers
                          else "no provider is loaded"))
        for i, (who, text) in enumerate(cells):
            rows.append((n.name if i == 0 else "", n.qualified_op if i == 0 else "", who, text))
    return ExplainView(rows, uniform, len(listed))


def explain_rows(
    table: CapabilityTable,
    placement: Placement | None,
    *,
    node: str | None = None,
    op: str | None = None,
    provider: str | None = None,
) -> list[tuple[Any, ...]]:
    """Every provider's answer for every node, one row each (``explain --all``)."""
    return explain_view(table, placement, node=node, op=op, provider=provider, every=True).rows


def explain_summary(table: CapabilityTable, placement: Placement | None) -> dict[str, Any]:
    """Per provider, over the nodes to place: how many it claims of the total, how many it was
    chosen for, its declines counted by reason code, and its compiled partitions."""
    total = len(table.nodes)
    chosen: dict[str, int] = {}
    if placement is not None:
        for n in placement.nodes:
            chosen[n.provider] = chosen.get(n.provider, 0) + 1
    compiled: dict[str, list[int]] = {}
    if placement is not None:
        for part in placement.compiled_partitions():
            count = compiled.setdefault(part.provider, [0, 0])
            count[0] += 1
            count[1] += len(part.nodes)
    out = {}
    for p in table.providers:
        claimed = 0
        declined: dict[str, int] = {}
        for n in table.nodes:
            answer = table.answers[n.name][p]
            if answer.is_supported:
                claimed += 1
            else:
                declined[str(answer.code)] = declined.get(str(answer.code), 0) + 1
        parts, members = compiled.get(p, (0, 0))
        out[p] = {"nodes": total, "claimed": claimed,
                  "chosen": chosen.get(p, 0) if placement is not None else None,
                  "declined": dict(sorted(declined.items(), key=lambda kv: -kv[1])),
                  "compiled_partitions": parts, "compiled_nodes": members}
    return {"nodes": total, "providers": out}


def _share(part: int, whole: int, what: str = "") -> str:
    """``3/6 nodes (50.0%)``"""
    what = f" {what}" if what else ""
    return f"{part}/{whole}{what} ({100.0 * part / whole:.1f}%)" if whole else f"{part}/0{what}"


def render_summary(out: Output, summary: Mapping[str, Any]) -> None:
    """``explain``'s closing table: one row per provider."""
    rows = []
    for p, s in summary["providers"].items():
        declines = ", ".join(f"{code} {count}" for code, count in s["declined"].items())
        parts = (f"{s['compiled_partitions']} partition(s) with a total of "
                 f"{_share(s['compiled_nodes'], s['nodes'], 'nodes')}"
                 if s["compiled_partitions"] else "-")
        rows.append((p, _share(s["claimed"], s["nodes"]),
                     "-" if s["chosen"] is None else s["chosen"], declines or "-", parts))
    if rows:
        out.table(f"Summary per provider ({summary['nodes']} nodes to place)",
                  ["provider", "claims", "chosen", "declines by code", "compiled"], rows)


def render_explain(out: Output, table: CapabilityTable, placement: Placement | None,
                   optimizations: Mapping[str, int] | None = None, *, every: bool = False,
                   **filters: Any) -> None:
    view = explain_view(table, placement, every=every, **filters)
    if not table.providers:
        out.line("no provider is loaded (see `ep-host providers`)")
    for p, answer in view.uniform.items():
        out.line(f"{p}: every listed node ({view.listed}) {verdict(answer)}")
    hint = "" if every else "; --all shows every answer"
    out.table(
        f"Every provider's answer for every node (* = chosen{hint})",
        ["node", "op", "provider", "cost or reason"],
        view.rows,
    )
    if not view.rows:
        out.line("no node matches the filters")
    if placement is not None:
        render_compiled_partitions(out, placement)
        render_conversions(out, placement)
    if not filters.get("node"):
        render_summary(out, explain_summary(table, placement))
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
        data["summary"] = explain_summary(table, placement)
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
                "source_nodes": source_nodes(table, n.name),
            }
            for n in table.nodes
        ],
        "transfers": [],
        "totals": None,
        "partitions": [],
        "compiled_partitions": [],
        "unplaceable": list(unplaceable),
        "expanded": _expanded(table),
        "summary": explain_summary(table, None),
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
    conversions = [t for t in placement.transfers if t.converts]
    if conversions:
        copies = sum(1 for t in placement.transfers if t.moves)
        out.table(
            f"{copies} device copies, {len(conversions)} layout conversions",
            ["tensor", "from", "to", "layout", "bytes", "estimated"],
            [(t.tensor, t.source, t.destination, t.layouts or "-", fmt_bytes(t.nbytes),
              fmt_us(t.cost_us)) for t in placement.transfers],
        )
    elif placement.transfers:
        out.table(
            f"{len(placement.transfers)} device copies",
            ["tensor", "from", "to", "bytes", "estimated"],
            [(t.tensor, t.source, t.destination, fmt_bytes(t.nbytes), fmt_us(t.cost_us))
             for t in placement.transfers],
        )
    launches = placement.launch_cost_us
    converting = sum(t.conversion_us for t in conversions)
    out.line(
        f"total estimated: {fmt_us(placement.total_us)} "
        f"(nodes {fmt_us(placement.node_cost_us)}, copies {fmt_us(placement.transfer_cost_us)}"
        + (f" of which layout conversions {fmt_us(converting)}" if conversions else "")
        + (f", partition launches {fmt_us(launches)})" if launches else ")")
    )
    if placement.comparison:
        chosen = placement.strategy
        mine = placement.comparison[chosen]
        out.line("estimated totals by strategy: " + ", ".join(
            f"{s} {fmt_us(us)}" + (f" ({chosen} saves {fmt_us(us - mine)})"
                                   if s != chosen and us > mine else "")
            for s, us in placement.comparison.items()))


def render_conversions(out: Output, placement: Placement) -> None:
    """The layout conversions the placement implies, when there are any: each tensor converted
    on the device of the node that reads it, priced like a device copy."""
    conversions = [t for t in placement.transfers if t.converts]
    if not conversions:
        return
    out.table(
        f"{len(conversions)} layout conversion(s), estimated "
        f"{fmt_us(sum(t.conversion_us for t in conversions))}",
        ["tensor", "layout", "on", "bytes", "estimated"],
        [(t.tensor, t.layouts, t.destination, fmt_bytes(t.nbytes), fmt_us(t.conversion_us))
         for t in conversions],
    )


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
