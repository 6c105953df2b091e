"""The capability walk: every node x every provider -> that provider's ``KernelMatch``.

Each provider is asked alone, so an exception or a malformed answer becomes that provider's
decline for that node (code ``fault``) and nothing else is lost. The whole table is the product.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from ep_host import node_times, plugin_calls
from ep_host.calibration import ProviderCalibration, provider_calibration
from ep_host.collector import paused_gc
from ep_host.cost import Cost
from ep_host.discovery import OWN_DISTRIBUTIONS, Host, ProviderRecord
from ep_host.errors import HostError, ProviderError, describe_exception
from ep_host.functions import expand_function
from ep_host.graph import NodeView, op_schema
from ep_host.layouts import check_match_layouts, has_layouts
from ep_host.loading import Model
from ep_host.match import Decline, KernelMatch, ReasonCode, new_decline
from ep_host.plugin_calls import is_user_interrupt, sigint
from ep_host.provider import ProviderContext
from ep_host.signatures import node_signature

MAX_EXPANSION_DEPTH = 8  # function bodies that call functions, to this depth


@dataclass
class CapabilityTable:
    """Every provider's answer for every node, in graph order and the user's provider order.

    ``nodes`` are the nodes to place and run. A node that no provider claims but that has a
    function body is replaced there by the body's nodes; ``expanded`` maps its name to them
    and ``all_nodes`` lists both, so reports show the declined op and its expansion.
    """

    providers: list[str]
    nodes: list[NodeView]
    answers: dict[str, Mapping[str, KernelMatch]] = field(default_factory=dict)
    contexts: dict[str, ProviderContext] = field(default_factory=dict)
    expanded: dict[str, list[str]] = field(default_factory=dict)
    all_nodes: list[NodeView] = field(default_factory=list)
    graph: Any = None  # the GraphView walked
    # providers that compile partitions (ep_host_compile_partition), and the launch each
    # charges per partition (ProviderInfo.partition_launch_us) where it is not zero
    compiling: list[str] = field(default_factory=list)
    partition_launch_us: dict[str, float] = field(default_factory=dict)

    def answer(self, node: str, provider: str) -> KernelMatch:
        return self.answers[node][provider]

    def claimants(self, node: str) -> list[str]:
        row = self.answers[node]
        return [p for p in self.providers if row[p].is_supported]

    # bumped by whoever changes ``answers`` after the walk (``node_times.apply``), so the
    # answers' summaries below are worked out again
    revision: int = 0
    _layouts_seen: tuple[int, int, int, frozenset[str]] | None = field(default=None,
                                                                       repr=False)

    @property
    def layout_providers(self) -> frozenset[str]:
        """The providers that claim some node of ``nodes`` in a layout not the model's."""
        key = (self.revision, len(self.nodes), len(self.answers))
        if self._layouts_seen is not None and self._layouts_seen[:3] == key:
            return self._layouts_seen[3]
        found = self._layout_providers()
        self._layouts_seen = (*key, found)
        return found

    def _layout_providers(self) -> frozenset[str]:
        found = set()
        rows = {id(row): row for row in map(self.answers.get, (n.name for n in self.nodes))
                if row is not None}
        seen: set[int] = set()  # answers shared by many rows are looked at once
        for row in rows.values():
            for provider, answer in row.items():
                if provider in found or id(answer) in seen:
                    continue
                seen.add(id(answer))
                if answer.is_supported and has_layouts(answer):
                    found.add(provider)
        return frozenset(found)


def provider_context(
    model: Model, record: ProviderRecord, options: Mapping[str, Any]
) -> ProviderContext:
    return ProviderContext(
        provider=record.name,
        options=MappingProxyType(dict(options)),
        opset_imports=MappingProxyType(dict(model.opset_imports)),
        model_dir=model.base_dir,
    )


def check_answer(answer: Any, node: NodeView | None = None) -> KernelMatch:
    """A checked copy of ``answer`` if it is a valid ``KernelMatch`` for ``node``, else a
    ``fault`` decline that says why (a subclass, an invalid cost, bad ``host_inputs``).

    Only exact types are looked into, so checking runs none of the provider's code."""
    kind = type(answer)
    if kind is not KernelMatch:
        if issubclass(kind, KernelMatch):
            reason = (f"provider returned a {kind.__name__}, a subclass of KernelMatch; only "
                      "KernelMatch itself is accepted")
        else:
            shown = "None (no answer)" if answer is None else kind.__name__
            reason = f"provider returned {shown} instead of a KernelMatch"
        return KernelMatch.unsupported(reason, ReasonCode.FAULT)
    cost_kind = type(answer.cost)
    if answer.is_supported is True and cost_kind is not Cost:
        return KernelMatch.unsupported(
            f"provider claimed the node with cost {cost_kind.__name__}, not a Cost"
            + (" (subclasses are not accepted)" if issubclass(cost_kind, Cost) else ""),
            ReasonCode.FAULT)
    if answer.is_supported is False and type(answer.reason) is str and not answer.reason:
        return KernelMatch.unsupported("provider declined without a reason", ReasonCode.FAULT)
    try:
        checked = answer.copy_checked(input_limit(node) if answer.host_inputs else 0)
    except (TypeError, ValueError) as exc:
        claimed = "claimed the node" if answer.is_supported is True else "declined"
        return KernelMatch.unsupported(f"provider {claimed} with {exc}", ReasonCode.FAULT)
    if node is not None and checked.is_supported and (
            checked.required_input_layouts or checked.output_layouts):
        fault = check_match_layouts(checked.required_input_layouts, checked.output_layouts, node)
        if fault:
            return KernelMatch.unsupported(f"provider claimed the node with {fault}",
                                           ReasonCode.FAULT)
    return checked


def input_limit(node: NodeView | None) -> int:
    """How many inputs ``node``'s op may have: the inputs it has, or more where its schema
    allows optional ones the node omits (a provider may name those in ``host_inputs``)."""
    if node is None:
        return 1 << 31
    count = len(node.inputs)
    if node.opset is None:
        return count
    schema = op_schema(node.domain, node.op_type, node.opset)
    return count if schema is None else max(count, schema.max_input)


def declined(decline: Decline) -> KernelMatch:
    """The decline a provider raised; formatting its reason runs the provider's arguments'
    ``__format__``, so a failure there is that provider's fault too."""
    since = sigint.received
    try:
        reason, code = decline.reason, decline.code
        if type(reason) is str and reason and type(code) is ReasonCode:
            return new_decline(reason, code)  # what unsupported() makes, without its checks
        return KernelMatch.unsupported(reason, code)
    except BaseException as exc:
        if is_user_interrupt(exc, since):
            raise
        return KernelMatch.unsupported(
            f"provider declined with a reason that cannot be formatted: "
            f"{describe_exception(exc)}", ReasonCode.FAULT)


def unavailable_answer(record: ProviderRecord) -> KernelMatch:
    """The decline every node gets from a provider that is not available."""
    return KernelMatch.unsupported(
        f"provider {record.status}: {record.fault}",
        ReasonCode.DEVICE if record.status == "unavailable" else ReasonCode.FAULT,
    )


def ask(
    host: Host,
    record: ProviderRecord,
    node: NodeView,
    context: ProviderContext,
    checked: dict[int, tuple[KernelMatch, KernelMatch]] | None = None,
    caller: Callable[..., list[Any]] | None = None,
) -> KernelMatch:
    """One provider's answer for one node, its faults turned into declines.

    ``checked`` (by ``id``) holds claims already validated: a provider that returns the same
    immutable ``KernelMatch`` for many nodes has it checked once. ``caller``: what calls the
    hook (``Host.batch_caller``; default the record's pluggy caller). Under the command's
    supervising parent the call is marked; the caller clears the marker after its batch."""
    if record.status != "available":
        return unavailable_answer(record)
    since = sigint.received
    marker = plugin_calls.marker  # set under the ep-host command's supervising parent
    if marker is not None:  # left by the caller once per batch: the next call overwrites it
        marker.enter(record.marker_heads["ep_host_supports_op"], node.name)
    try:
        answers = (caller or record.callers["ep_host_supports_op"])(node=node, context=context)
    except Decline as d:
        return declined(d)
    except MemoryError:  # the host is out of memory, not the provider at fault
        raise
    except BaseException as exc:  # SystemExit and the like too: the provider's fault
        if is_user_interrupt(exc, since):
            raise
        if host.strict:
            raise ProviderError(
                f"provider {record.name!r} raised in supports_op for node {node.name!r}"
            ) from exc
        return KernelMatch.unsupported(
            f"provider raised {describe_exception(exc)}", ReasonCode.FAULT
        )
    raw = answers[0] if answers else None
    # ``checked`` maps an answer's id to (that answer, the checked copy the host keeps); the
    # answer is held there, so its id names that one object. host_inputs depend on the node's
    # input count and layouts on its ranks, so answers naming either are checked per node.
    if checked is not None:
        known = checked.get(id(raw))
        if known is not None and known[0] is raw:
            return known[1]
    answer = check_answer(raw, node)
    if host.strict and answer.code == ReasonCode.FAULT:
        raise ProviderError(f"provider {record.name!r} on node {node.name!r}: {answer.reason}")
    if (checked is not None and raw is not None and answer.code is not ReasonCode.FAULT
            and not raw.host_inputs and not answer.required_input_layouts
            and not answer.output_layouts):
        checked[id(raw)] = (raw, answer)
    return answer


def provider_answers(
    host: Host,
    record: ProviderRecord,
    nodes: Sequence[NodeView],
    context: ProviderContext,
    checked: dict[int, tuple[KernelMatch, KernelMatch]],
) -> list[KernelMatch]:
    """One provider's answers for ``nodes``, in order (an isolated provider's in one call).

    With a per-call limit (``host.hook_timeout``) a provider (but ep-host's own CPU EP,
    ``discovery.OWN_DISTRIBUTIONS``) is asked on a worker thread that
    walks the whole batch, watched from here: a call that makes no progress for the limit is a
    hang. That node gets a ``fault`` decline, the provider is marked failed, the rest of the batch
    declines at once, and the stuck thread is abandoned (Python cannot interrupt it).
    """
    if record.remote is not None and record.status == "available":
        # an isolated provider: one call to its worker, which watches its own time limit
        answers = record.remote.batch_answers(nodes, context)
        if host.strict:
            for node, answer in zip(nodes, answers, strict=True):
                if answer.code == ReasonCode.FAULT:
                    raise ProviderError(f"provider {record.name!r} on node {node.name!r}: "
                                        f"{answer.reason}")
        return answers
    seconds = host.hook_timeout
    if record.status != "available":
        return [unavailable_answer(record)] * len(nodes)
    caller = host.batch_caller(record, "ep_host_supports_op")
    if seconds is None or record.distribution in OWN_DISTRIBUTIONS:
        try:
            return [ask(host, record, n, context, checked, caller) for n in nodes]
        finally:
            if plugin_calls.marker is not None:
                plugin_calls.marker.leave()
    results: list[KernelMatch] = []
    failure: list[BaseException] = []
    done = threading.Event()
    abandoned = threading.Event()

    def work() -> None:
        try:
            for n in nodes:
                if abandoned.is_set():  # a call stuck past the limit: ask nothing more
                    break
                results.append(ask(host, record, n, context, checked, caller))
        except BaseException as exc:  # strict mode's ProviderError: re-raised by the caller
            failure.append(exc)
        finally:
            if plugin_calls.marker is not None and not abandoned.is_set():
                plugin_calls.marker.leave()
            done.set()

    threading.Thread(target=work, name="ep-host-hook", daemon=True).start()
    progress, since = 0, time.monotonic()
    while not done.wait(min(seconds, 0.05)):
        if len(results) != progress:
            progress, since = len(results), time.monotonic()
        elif time.monotonic() - since > seconds:
            break
    if failure:
        raise failure[0]
    if done.is_set():
        return results
    abandoned.set()
    if plugin_calls.marker is not None:
        plugin_calls.marker.leave()  # the stuck call is no longer the one that runs
    answered = list(results[:progress])
    stuck = nodes[len(answered)]
    reason = f"provider did not answer within {seconds:g} s"
    if host.strict:
        raise ProviderError(f"provider {record.name!r}: supports_op for node {stuck.name!r}: "
                            f"{reason}")
    record.status = "failed"
    record.fault = f"supports_op for node {stuck.name!r}: {reason}"
    answered.append(KernelMatch.unsupported(reason, ReasonCode.FAULT))
    rest = unavailable_answer(record)
    answered.extend(rest for _ in nodes[len(answered):])
    return answered


def answers_by_signature(
    host: Host,
    record: ProviderRecord,
    nodes: Sequence[NodeView],
    context: ProviderContext,
    checked: dict[int, tuple[KernelMatch, KernelMatch]],
    signatures: Sequence[int | None],
    claims: dict[int, KernelMatch],
) -> list[KernelMatch]:
    """The answers of a provider that answers by signature (``ProviderInfo.
    answers_by_signature``): the first node of each signature not claimed before is asked;
    where that gave a claim, every node of the signature gets it (kept in ``claims``), and the
    nodes of signatures it declined are asked one by one. ``signatures``: each node's
    signature as a number (``None``: a node asked on its own)."""
    leads: dict[Any, int] = {}
    for k, sig in enumerate(signatures):
        if sig is None or (sig not in claims and sig not in leads):
            leads[sig if sig is not None else ("node", k)] = k
    first = list(leads.values())
    got = dict(zip(first, provider_answers(host, record, [nodes[k] for k in first], context,
                                           checked), strict=True))
    for sig, k in leads.items():
        if got[k].is_supported and signatures[k] is not None:
            claims[sig] = got[k]
    # each node's claim by its signature, its own answer where it was asked, and None where it
    # is still to be asked (a signature its lead declined, a node asked on its own)
    out: list[KernelMatch | None] = [None if sig is None else claims.get(sig)
                                     for sig in signatures]
    for k, answer in got.items():
        out[k] = answer
    rest = [k for k, answer in enumerate(out) if answer is None]
    if rest:
        for k, answer in zip(rest, provider_answers(host, record, [nodes[k] for k in rest],
                                                    context, checked), strict=True):
            out[k] = answer
    return out  # type: ignore[return-value]


def _claimed(answers: Iterable[KernelMatch]) -> bool:
    """Whether some answer of ``answers`` claims the node."""
    for answer in answers:
        if answer.is_supported:
            return True
    return False


class HostCalibration:
    """The calibration the host applies to a provider that does not apply it itself
    (``ProviderInfo.applies_calibration``): each claim's cost scaled by the factors for its
    node's op. A claim shared by many nodes stays shared (one scaled copy per claim and op)."""

    def __init__(self, stored: ProviderCalibration):
        self.stored = stored
        self.scaled: dict[tuple[int, str], tuple[KernelMatch, KernelMatch]] = {}

    def apply(self, nodes: Sequence[NodeView], answers: list[KernelMatch]) -> list[KernelMatch]:
        out = []
        for node, answer in zip(nodes, answers, strict=True):
            factors = self.stored.for_op(node.qualified_op) if answer.is_supported else None
            if factors is None or answer.cost is None:
                out.append(answer)
                continue
            key = (id(answer), node.qualified_op)
            kept = self.scaled.get(key)
            if kept is None or kept[0] is not answer:
                scaled = replace(answer, cost=answer.cost.scaled(factors.scale,
                                                                  factors.overhead_us))
                kept = self.scaled[key] = (answer, scaled)
            out.append(kept[1])
        return out


def walk(
    host: Host,
    model: Model,
    providers: Sequence[str],
    options: Mapping[str, Mapping[str, Any]] | None = None,
    nodes: Iterable[NodeView] | None = None,
    expand: bool = True,
    measured: bool = True,
) -> CapabilityTable:
    """Ask every provider in ``providers`` about every node of the model's main graph (or
    ``nodes``); with ``expand``, nodes nobody claims are expanded into their function bodies.
    With ``measured``, a node time measured on this machine (``ep-host calibrate --model``)
    replaces the provider's estimate."""
    options = options or {}
    records = [host.records[p] for p in providers]
    nodes = list(model.graph.nodes if nodes is None else nodes)
    table = CapabilityTable(providers=list(providers), nodes=nodes)
    table.contexts = {r.name: provider_context(model, r, options.get(r.name, {})) for r in records}
    table.compiling = [r.name for r in records if r.status == "available" and r.info is not None
                       and "ep_host_compile_partition" in r.hooks]
    table.partition_launch_us = {p: float(host.records[p].info.partition_launch_us)
                                 for p in table.compiling
                                 if host.records[p].info.partition_launch_us > 0}
    # An unavailable provider declines every node alike: one (immutable) answer serves them all.
    fixed = {r.name: unavailable_answer(r) for r in records if r.status != "available"}
    asked = [(r.name, r, table.contexts[r.name], {}) for r in records]
    # per provider answering by signature: its claim for each signature seen
    claims = {r.name: {} for r in records if r.info is not None and r.remote is None
              and r.info.answers_by_signature}
    numbering: dict[tuple[Any, ...], int] = {}
    declines: dict[str, dict[tuple[str, Any], KernelMatch]] = {
        r.name: {} for r in records if r.status == "available"}
    answers = table.answers
    rows: dict[tuple[int, ...], Mapping[str, KernelMatch]] = {}  # holds the answers it names

    calibrations = {r.name: HostCalibration(c) for r in records if r.info is not None
                    and not r.info.applies_calibration
                    and (c := provider_calibration(r.name)) is not None}

    def answered(batch: Sequence[NodeView], depth: int) -> Iterator[
            tuple[NodeView, tuple[KernelMatch, ...], int]]:
        """Each node of ``batch`` with its row of answers, the batch asked as one."""
        columns = {}
        # each signature hashed once, here: later look-ups are by its number
        signatures = ([None if (sig := node_signature(n)) is None
                       else numbering.setdefault(sig, len(numbering)) for n in batch]
                      if claims else [])
        for name, r, context, checked in asked:
            if name in fixed or r.status != "available":
                columns[name] = [fixed.get(name) or unavailable_answer(r)] * len(batch)
            elif name in claims:
                columns[name] = answers_by_signature(host, r, batch, context, checked,
                                                     signatures, claims[name])
            else:
                columns[name] = provider_answers(host, r, batch, context, checked)
            if name in calibrations and name not in fixed and r.status == "available":
                columns[name] = calibrations[name].apply(batch, columns[name])
            if name in declines:  # equal declines as one object: rows of equal answers shared
                same = declines[name]
                columns[name] = [a if a.is_supported else same.setdefault((a.reason, a.code), a)
                                 for a in columns[name]]
        answered_rows = (zip(*(columns[name] for name in names), strict=True) if names
                         else [()] * len(batch))
        for node, row in zip(batch, answered_rows, strict=True):
            yield node, row, depth

    names = [name for name, *_ in asked]
    table.graph = nodes[0].graph if nodes else model.graph
    table.nodes = []
    # the nodes in order, an expanded node's body in its place: a stack of batches being
    # answered (a recursive closure would be a reference cycle left for the collector)
    batches = [answered(nodes, 0)]
    with paused_gc():
        while batches:
            for node, answers_of_node, depth in batches[-1]:
                # nodes answered with the very same objects (a provider's shared claim) share
                # one read-only row: a dict per node is ~200 bytes of a long model
                key = tuple(map(id, answers_of_node))
                row = rows.get(key)
                if row is None:
                    row = rows[key] = MappingProxyType(dict(zip(names, answers_of_node,
                                                                strict=True)))
                answers[node.name] = row
                table.all_nodes.append(node)
                if expand and depth < MAX_EXPANSION_DEPTH and not _claimed(answers_of_node):
                    try:
                        body = expand_function(node)
                    except HostError:  # a body onnx cannot instantiate here: keep the decline
                        body = None
                    if body is not None and body.nodes:
                        table.expanded[node.name] = [n.name for n in body.nodes]
                        batches.append(answered(list(body.nodes), depth + 1))
                        break
                table.nodes.append(node)
            else:
                batches.pop()
    if measured:
        node_times.apply(host, table, table.nodes)
    return table
