"""The solver behind strategy ``optimal``: node costs plus the copies they imply, minimised by a
minimum s-t cut (exact for two devices) and alpha-expansion over such cuts for more devices.
It works on provider indices; :mod:`ep_host.strategies.optimal` turns its answer into names.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ep_host.layouts import conversion_cost_us, input_layout, output_layout
from ep_host.provider import HOST, Device

if TYPE_CHECKING:
    from ep_host.capability import CapabilityTable

_INF_CAP = 2**30  # scipy's maximum_flow computes in int32: leave room for residuals
_CAP_BUDGET = 2**29  # finite capacities are scaled so that all of them sum to at most this
_NS_PER_US = 1000.0  # the finest resolution: 1 ns


class PlacementObjective:
    """The objective :func:`ep_host.transfers.implied_transfers` prices, compiled for repeated
    evaluation.

    Locations are device names (index 0 is the host); providers on one device share a location.
    A tensor's place is a location and a layout: it is copied to each place its consumers read
    it at, once (a copy between locations, a conversion between layouts, or both).
    ``options[n]`` maps each provider index allowed for node ``n`` to its ``total_us``.
    """

    def __init__(self, table: CapabilityTable, devices: Mapping[str, Device],
                 pins: Mapping[str, str]):
        self.providers = list(table.providers)
        locs: dict[str, int] = {HOST.name: 0}
        self.loc_dev: list[Device] = [HOST]
        self.prov_loc: list[int] = []
        for p in self.providers:
            d = devices.get(p, HOST)
            if d.name not in locs:
                locs[d.name] = len(self.loc_dev)
                self.loc_dev.append(d)
            self.prov_loc.append(locs[d.name])
        index = {p: i for i, p in enumerate(self.providers)}
        answers = table.answers
        self.options: list[dict[int, float]] = []
        self.host_in: list[dict[int, frozenset[int]]] = []
        by_row: dict[int, tuple[dict[int, float], dict[int, frozenset[int]]]] = {}
        totals: dict[int, float] = {}  # per claim object: providers share claims across nodes
        for node in table.nodes:
            row = answers[node.name]
            pin = pins.get(node.name)
            known = by_row.get(id(row)) if pin is None else None
            if known is None:  # nodes of one shared row (equal answers) share their options
                names = [pin] if pin is not None else self.providers
                opts: dict[int, float] = {}
                hin: dict[int, frozenset[int]] = {}
                for p in names:
                    a = row[p]
                    if a.is_supported:
                        total = totals.get(id(a))
                        if total is None:
                            total = totals[id(a)] = a.cost.total_us
                        opts[index[p]] = total
                        if a.host_inputs:
                            hin[index[p]] = frozenset(a.host_inputs)
                known = (opts, hin)
                if pin is None:
                    by_row[id(row)] = known
            self.options.append(known[0])
            self.host_in.append(known[1])
        # a place is a (location, layout) pair, place = location * n_layouts + layout; layout
        # 0 is the model's, the others are those some claim reads or writes
        self.layout_providers = {index[p] for p in table.layout_providers}
        self.layout_names: list[str | None] = [None]
        lay: dict[str | None, int] = {None: 0}

        def layout_index(name: str | None) -> int:
            if name not in lay:
                lay[name] = len(self.layout_names)
                self.layout_names.append(name)
            return lay[name]

        vid: dict[str, int] = {}
        prod: list[int] = []
        nbytes: list[int] = []
        e_val: list[int] = []
        e_node: list[int] = []
        e_in: list[int] = []
        # edge -> {provider: the layout it reads}, tensor -> {provider: the layout it is
        # written in}, for the providers with layouts of their own
        e_lay: dict[int, dict[int, int]] = {}
        out_lay: dict[int, dict[int, int]] = {}
        laid_out = bool(self.layout_providers)
        for n, node in enumerate(table.nodes):
            row = answers[node.name]
            for i, v in enumerate(node.inputs):
                if v is not None and not v.is_constant:  # constants: uploaded once, not per run
                    k = vid.get(v.name)
                    if k is None:
                        k = vid[v.name] = len(prod)
                        prod.append(-1)
                        nbytes.append(v.nbytes)
                    if laid_out:
                        e_lay[len(e_val)] = {
                            p: layout_index(input_layout(row[self.providers[p]], i))
                            for p in self.options[n] if p in self.layout_providers}
                    e_val.append(k)
                    e_node.append(n)
                    e_in.append(i)
            for j, v in enumerate(node.outputs):
                if v is not None:
                    k = vid.get(v.name)
                    if k is None:
                        vid[v.name] = k = len(prod)
                        prod.append(n)
                        nbytes.append(v.nbytes)
                    else:
                        prod[k] = n
                    if laid_out:
                        out_lay[k] = {
                            p: layout_index(output_layout(row[self.providers[p]], j))
                            for p in self.options[n] if p in self.layout_providers}
        self.n_layouts = len(self.layout_names)
        self.n_places = len(self.loc_dev) * self.n_layouts
        outs = []
        if table.nodes:
            outs = [vid[v.name] for v in table.graph.outputs if v.name in vid]
        self._arrays(prod, nbytes, e_val, e_node, e_in, outs)
        self._layout_arrays(prod, e_lay, out_lay)
        self._launch_terms(table)

    def _launch_terms(self, table: CapabilityTable) -> None:
        """Partition launches (``ProviderInfo.partition_launch_us``) as
        :func:`ep_host.partitions.launch_cost_us` prices them: per node on a compiling provider,
        a share of the launch per source on another provider."""
        from ep_host.partitions import entry_sources

        self._launch = np.asarray([table.partition_launch_us.get(p, 0.0)
                                   for p in self.providers] or [0.0])
        # the groups moves choose between: a device's providers, but each compiling provider
        # and each provider with layouts of its own alone (its launches or conversions set it
        # apart from the others on its device)
        n_locs = len(self.loc_dev)
        self.prov_group = [n_locs + p if self._launch[p] or p in self.layout_providers else loc
                           for p, loc in enumerate(self.prov_loc)]
        self._entries = None
        if not self._launch.any():
            return
        pairs, count, outside = entry_sources(table.nodes)
        k = np.asarray(count, dtype=np.float64)
        src = np.asarray([p for p, _ in pairs], dtype=np.int64)
        dst = np.asarray([c for _, c in pairs], dtype=np.int64)
        self._entries = (np.asarray(outside) / k, src, dst, 1.0 / k[dst])

    def _arrays(self, prod: list[int], nbytes: list[int], e_val: list[int], e_node: list[int],
                e_in: list[int], outs: list[int]) -> None:
        """numpy forms of the problem: tensors (producer, bytes), consumer edges (tensor,
        node, input), where each edge reads on each provider, graph outputs."""
        n_nodes, n_prov = len(self.options), max(1, len(self.providers))
        cost = np.full((n_nodes, n_prov), np.nan)
        for n, opts in enumerate(self.options):
            for p, c in opts.items():
                cost[n, p] = c
        self._cost = cost
        self._e_val = np.asarray(e_val, dtype=np.int64)
        self._e_node = np.asarray(e_node, dtype=np.int64)
        prov_loc = np.asarray(self.prov_loc or [0], dtype=np.int64)
        need = np.tile(prov_loc, (len(e_val), 1))
        if any(self.host_in):
            for e, (c, i) in enumerate(zip(e_node, e_in, strict=True)):
                for p, hin in self.host_in[c].items():
                    if i in hin:
                        need[e, p] = 0
        self._need = need
        self._prov_loc = prov_loc
        self._prod = np.asarray(prod, dtype=np.int64)
        self._nb = np.asarray(nbytes, dtype=np.float64)
        self._outs = np.unique(np.asarray(outs, dtype=np.int64))
        self._lat = np.asarray([0.0 if d.is_host else d.link_latency_us for d in self.loc_dev])
        self._gbps = np.asarray([1.0 if d.is_host else d.link_gbps for d in self.loc_dev])
        self._host = np.asarray([d.is_host for d in self.loc_dev])

    def _layout_arrays(self, prod: list[int], e_lay: Mapping[int, Mapping[int, int]],
                       out_lay: Mapping[int, Mapping[int, int]]) -> None:
        """Places: ``_need`` becomes the place (location and layout) each edge reads on each
        provider; ``_out_place[tensor, provider]`` is where a tensor is written when its
        producer runs there (a graph input: the host, in the model's layout)."""
        n_lay = self.n_layouts
        if n_lay > 1:
            self._need = self._need * n_lay
        for e, row in e_lay.items():
            for p, layout in row.items():
                self._need[e, p] += layout
        n_prov = max(1, len(self.providers))
        out_place = np.tile(self._prov_loc * n_lay, (len(prod), 1)) if prod else np.zeros(
            (0, n_prov), dtype=np.int64)
        for k, row in out_lay.items():
            for p, layout in row.items():
                out_place[k, p] += layout
        out_place[self._prod < 0] = 0
        self._out_place = out_place
        self._vals = np.arange(len(prod))

    def source_places(self, assign: Any) -> Any:
        """Where each tensor is written under ``assign`` (a provider index per node)."""
        prod = self._prod
        return np.where(prod < 0, 0, self._out_place[self._vals, assign[np.maximum(prod, 0)]])

    def _place_us(self, src: Any, dst: Any, nb: Any) -> Any:
        """Moving tensors of ``nb`` bytes from place ``src`` to place ``dst``: the device copy
        (:meth:`_link_us` of both locations) plus a layout conversion where the layouts
        differ; nothing where the places are one."""
        n_lay = self.n_layouts
        src_loc, dst_loc = src // n_lay, dst // n_lay
        copy = np.where(src_loc == dst_loc, 0.0, self._link_us(src_loc, nb) + self._link_us(
            dst_loc, nb))
        if n_lay == 1:
            return copy
        return copy + np.where(src % n_lay == dst % n_lay, 0.0, conversion_cost_us(nb))

    def _link_us(self, loc: Any, nb: Any) -> Any:
        """:meth:`Device.copy_cost_us` over arrays: moving ``nb`` bytes over location ``loc``'s
        link to the host (free on the host itself)."""
        return np.where(self._host[loc], 0.0, self._lat[loc] + nb / (self._gbps[loc] * 1e3))

    def locations(self, n: int) -> dict[int, int]:
        """Node ``n``'s cheapest allowed provider per group (a location, or a compiling
        provider on its own; ties: the user's order)."""
        best: dict[int, int] = {}
        opts = self.options[n]
        for p, cost in opts.items():  # providers in the user's order
            loc = self.prov_group[p]
            if loc not in best or cost < opts[best[loc]]:
                best[loc] = p
        return best

    def total_us(self, assign: Sequence[int]) -> float:
        """Node costs plus copies of ``assign`` (a provider index per node), as
        ``implied_transfers`` prices them (up to the order floats are summed in)."""
        a = np.asarray(assign, dtype=np.int64)
        total = float(self._cost[np.arange(len(a)), a].sum())
        src = self.source_places(a)
        n_places = self.n_places
        dest = self._need[np.arange(len(self._e_val)), a[self._e_node]]
        keys = self.distinct_keys(self._e_val * n_places + dest, self._outs * n_places)
        val, dst = keys // n_places, keys % n_places
        moved = dst != src[val]
        val, dst = val[moved], dst[moved]
        copy = self._place_us(src[val], dst, self._nb[val])
        return total + float(copy.sum()) + self._launch_us(a)

    def key_marks(self, *keys: Any) -> Any:
        """A mark per (tensor, place) key, ``tensor * n_places + place``: set where ``keys``
        name it (sorting them, as ``np.unique`` does, costs more on long models)."""
        marks = np.zeros(len(self._prod) * self.n_places, dtype=bool)
        for k in keys:
            marks[k] = True
        return marks

    def distinct_keys(self, *keys: Any) -> Any:
        """``np.unique`` of the (tensor, place) keys in ``keys``, in increasing order."""
        return np.flatnonzero(self.key_marks(*keys))

    def _launch_us(self, a: Any) -> float:
        """The partition launches of assignment ``a``."""
        if self._entries is None:
            return 0.0
        outside, src, dst, share = self._entries
        launch = self._launch
        moved = a[src] != a[dst]
        return float((launch[a] * outside).sum() + (launch[a[dst]] * share * moved).sum())

    def move(self, lab0: Sequence[int], lab1: Sequence[int]) -> list[int]:
        """The best choice per node between ``lab0[n]`` and ``lab1[n]`` (provider indices, -1:
        not allowed), by one minimum s-t cut: 0 keeps ``lab0[n]``, 1 takes ``lab1[n]``.

        Each tensor's copy to each destination is a term ``g(producer) * OR(consumers that
        read it there)``; an OR of several consumers gets an auxiliary node. Exact when every
        term is submodular: always for two devices one of which is the host, and for any two
        when no claim puts an input on the host. A term that is not (a tensor some claims need
        on the host, for instance) is charged as if always paid, an upper bound; callers keep
        a move only if the exact total improves. Capacities are integers: microseconds times
        ``min(1000, 2**29 / sum of finite capacities)``, rounded, so each term is off by at
        most half a nanosecond on models whose capacities sum below ~0.5 s.
        """
        graph = _MoveGraph(self, lab0, lab1)
        always, literals = graph.split_copies()
        graph.charge_always_paid_copies(always)
        if literals is not None:
            graph.add_copy_terms(literals)
        graph.add_launch_terms()
        graph.add_terminal_edges()
        return graph.cut()


@dataclass
class _Literals:
    """The copies a move may or may not pay, grouped by (tensor, destination): each group is
    paid when any of its literals holds (a consumer that reads the tensor there on its side)."""

    keys: Any  # tensor * n_places + destination place, one per group
    inverse: Any  # each literal's group
    node: Any  # each literal's consumer
    count: Any  # literals per group
    has0: Any  # a group holds a literal of side 0 (the consumer keeps its label)
    has1: Any  # ... of side 1 (the consumer takes the new label)
    first: Any  # the first literal's consumer, per group
    producer: Any  # the tensor's producing node per group (-1: a graph input)
    price0: Any  # the copy's price with the producer on side 0
    price1: Any  # ... on side 1

    @property
    def size(self) -> int:
        return len(self.keys)

    @property
    def sign(self) -> Any:
        """The one side present in a group with a single side (1 when it holds side 1)."""
        return np.where(self.has1, 1, 0)


class _MoveGraph:
    """The s-t graph of one move of :meth:`PlacementObjective.move`. Node ``n`` is vertex ``n``:
    on the source side it keeps ``lab0[n]``, on the sink side it takes ``lab1[n]``; the source
    and sink come next, then one auxiliary vertex per OR of several consumers."""

    def __init__(self, objective: PlacementObjective, lab0: Sequence[int], lab1: Sequence[int]):
        self.objective = objective
        l0 = np.asarray(lab0, dtype=np.int64)
        l1 = np.asarray(lab1, dtype=np.int64)
        self.n_nodes = len(l0)
        self.source, self.sink = self.n_nodes, self.n_nodes + 1
        self.size = self.n_nodes + 2  # vertices so far
        self.label0 = np.where(l0 < 0, l1, l0)  # the label in effect on each side
        self.label1 = np.where(l1 < 0, l0, l1)
        nodes = np.arange(self.n_nodes)
        # each node's own cost on each side: the unary terms the copies add to
        self.unary0 = np.where(l0 < 0, math.inf, objective._cost[nodes, self.label0])
        self.unary1 = np.where(l1 < 0, math.inf, objective._cost[nodes, self.label1])
        self.rows: list[Any] = []
        self.cols: list[Any] = []
        self.caps: list[Any] = []

    def _edges(self, rows: Any, cols: Any, caps: Any) -> None:
        self.rows.append(rows)
        self.cols.append(cols)
        self.caps.append(caps)

    def split_copies(self) -> tuple[Any, _Literals | None]:
        """Each (tensor, destination) copy that a consumer may cause: ``always`` when some
        consumer reads the tensor there whatever its choice (and for the graph's outputs), else
        literals, one per consumer and side that reads it there."""
        obj = self.objective
        n_places = obj.n_places
        ev, ec = obj._e_val, obj._e_node
        edges = np.arange(len(ev))
        need0 = obj._need[edges, self.label0[ec]]
        need1 = obj._need[edges, self.label1[ec]]
        same = need0 == need1
        always_marks = obj.key_marks(ev[same] * n_places + need0[same], obj._outs * n_places)
        always = np.flatnonzero(always_marks)
        diff = ~same
        key = np.concatenate([ev[diff] * n_places + need0[diff],
                              ev[diff] * n_places + need1[diff]])
        node = np.concatenate([ec[diff], ec[diff]])
        sign = np.concatenate([np.zeros(diff.sum(), np.int64), np.ones(diff.sum(), np.int64)])
        keep = ~always_marks[key]
        key, node, sign = key[keep], node[keep], sign[keep]
        if not len(key):
            return always, None
        marks = obj.key_marks(key)  # np.unique(key, return_inverse=True), without sorting
        groups = np.flatnonzero(marks)
        inverse = (np.cumsum(marks) - 1)[key]
        n_groups = len(groups)
        count = np.bincount(inverse, minlength=n_groups)
        ones = np.bincount(inverse, weights=sign, minlength=n_groups)
        first = np.empty(n_groups, dtype=np.int64)
        first[inverse[::-1]] = node[::-1]
        producer, price0, price1 = self._copy_prices(groups)
        return always, _Literals(groups, inverse, node, count, has0=ones < count, has1=ones > 0,
                                 first=first, producer=producer, price0=price0, price1=price1)

    def _copy_prices(self, keys: Any) -> tuple[Any, Any, Any]:
        """For each (tensor, destination) key: the tensor's producer and the copy's price with
        the producer on side 0 and on side 1 (zero where the tensor is already there)."""
        obj = self.objective
        n_places = obj.n_places
        prod = obj._prod
        source0 = obj.source_places(self.label0)
        source1 = obj.source_places(self.label1)
        val, dst = keys // n_places, keys % n_places
        nb = obj._nb[val]

        def price(src: Any) -> Any:
            return obj._place_us(src, dst, nb)

        return prod[val], price(source0[val]), price(source1[val])

    def charge_always_paid_copies(self, always: Any) -> None:
        """A copy paid whatever the consumers choose depends only on its producer's side: a
        unary term on the producer (a graph input's copy is a constant and left out)."""
        producer, price0, price1 = self._copy_prices(always)
        ok = producer >= 0
        np.add.at(self.unary0, producer[ok], price0[ok])
        np.add.at(self.unary1, producer[ok], price1[ok])

    def add_copy_terms(self, lit: _Literals) -> None:
        """The copies that depend on consumers: ``min(price0, price1) * OR(literals)``, plus
        ``|price0 - price1| * [producer on the dearer side] * OR(literals)``."""
        self._add_or_term(lit, np.minimum(lit.price0, lit.price1),
                          conditioned=np.zeros(lit.size, dtype=bool),
                          side=np.zeros(lit.size, dtype=np.int64))
        self._add_or_term(lit, np.abs(lit.price0 - lit.price1),
                          conditioned=lit.producer >= 0,
                          side=(lit.price1 > lit.price0).astype(np.int64))

    def _add_or_term(self, lit: _Literals, weight: Any, conditioned: Any, side: Any) -> None:
        """``weight * [producer on side if conditioned] * OR(literals)`` for every group with a
        positive weight."""
        on = weight > 0
        on &= ~self._charge_unrepresentable(lit, weight, on, conditioned, side)
        single = on & (lit.count == 1)
        self._add_single_literal_terms(lit, weight, single, conditioned, side)
        self._add_multi_literal_terms(lit, weight, on & (lit.count > 1), conditioned, side)

    def _charge_unrepresentable(self, lit: _Literals, weight: Any, on: Any, conditioned: Any,
                                side: Any) -> Any:
        """Terms that are not submodular (a literal of the conditioning side, or mixed sides
        unconditioned) are charged as if always paid, on the producer; returns which."""
        bad = np.where(conditioned, np.where(side == 1, lit.has1, lit.has0),
                       lit.has0 & lit.has1) & on
        upper = bad & conditioned
        producer = lit.producer
        np.add.at(self.unary0, producer[upper & (side == 0)], weight[upper & (side == 0)])
        np.add.at(self.unary1, producer[upper & (side == 1)], weight[upper & (side == 1)])
        return bad

    def _add_single_literal_terms(self, lit: _Literals, weight: Any, single: Any,
                                  conditioned: Any, side: Any) -> None:
        """A group of one literal: a unary term on its consumer, or (conditioned) one edge
        between the producer and the consumer."""
        sign = lit.sign
        plain = single & ~conditioned
        np.add.at(self.unary1, lit.first[plain & (sign == 1)], weight[plain & (sign == 1)])
        np.add.at(self.unary0, lit.first[plain & (sign == 0)], weight[plain & (sign == 0)])
        pair = single & conditioned
        producer, consumer, on_side = lit.producer[pair], lit.first[pair], side[pair]
        self._edges(np.where(on_side == 0, producer, consumer),
                    np.where(on_side == 0, consumer, producer), weight[pair])

    def _add_multi_literal_terms(self, lit: _Literals, weight: Any, multi: Any,
                                 conditioned: Any, side: Any) -> None:
        """A group of several literals: an auxiliary vertex ``z`` for the OR. Sign 1 (or side
        0): head -> z (weight), z -> each consumer (inf); else z -> head, each consumer -> z."""
        ids = np.full(lit.size, -1, dtype=np.int64)
        ids[multi] = self.size + np.arange(multi.sum())
        self.size += int(multi.sum())
        gs = np.nonzero(multi)[0]
        sign = lit.sign[gs]
        cond = conditioned[gs]
        head = np.where(cond, lit.producer[gs], np.where(sign == 1, self.source, -1))
        forward = np.where(cond, side[gs] == 0, sign == 1)
        head = np.where(~cond & (sign == 0), self.sink, head)
        self._edges(np.where(forward, head, ids[gs]), np.where(forward, ids[gs], head),
                    weight[gs])
        in_multi = multi[lit.inverse]
        z = ids[lit.inverse[in_multi]]
        forward_by_group = np.zeros(lit.size, dtype=bool)
        forward_by_group[gs] = forward
        f = forward_by_group[lit.inverse[in_multi]]
        consumer = lit.node[in_multi]
        self._edges(np.where(f, z, consumer), np.where(f, consumer, z),
                    np.full(int(in_multi.sum()), math.inf))

    def add_launch_terms(self) -> None:
        """Partition launches: the outside share is unary; each (producer, consumer) share is a
        pairwise term ``E(producer's side, consumer's side)``, split into unary terms and one
        edge producer -> consumer of ``E01 + E10 - E00 - E11``. Where that is negative (not
        submodular) ``E10`` is raised until it is zero: an upper bound, as for copies."""
        obj = self.objective
        if obj._entries is None:
            return
        outside, src, dst, share = obj._entries
        launch = obj._launch
        self.unary0 += launch[self.label0] * outside
        self.unary1 += launch[self.label1] * outside

        def term(producer: Any, consumer: Any) -> Any:
            return launch[consumer] * share * (producer != consumer)

        p0, p1 = self.label0[src], self.label1[src]
        c0, c1 = self.label0[dst], self.label1[dst]
        e00, e01, e10, e11 = term(p0, c0), term(p0, c1), term(p1, c0), term(p1, c1)
        e10 = np.maximum(e10, e00 + e11 - e01)
        np.add.at(self.unary0, dst, e00)
        np.add.at(self.unary1, dst, e00 + e11 - e10)
        np.add.at(self.unary1, src, e10 - e00)
        pair = e01 + e10 - e00 - e11
        on = pair > 0
        self._edges(src[on], dst[on], pair[on])

    def add_terminal_edges(self) -> None:
        """The unary terms as edges from the source (paid on side 1) and to the sink (paid on
        side 0), each less the node's cheaper side."""
        nodes = np.arange(self.n_nodes)
        low = np.minimum(self.unary0, self.unary1)
        up = self.unary1 > low
        self._edges(np.full(int(up.sum()), self.source), nodes[up], (self.unary1 - low)[up])
        down = self.unary0 > low
        self._edges(nodes[down], np.full(int(down.sum()), self.sink), (self.unary0 - low)[down])

    def cut(self) -> list[int]:
        """The minimum cut, read back as each node's side (0: source, keeps ``lab0``)."""
        return min_cut_sides(self.n_nodes, self.size, np.concatenate(self.rows),
                             np.concatenate(self.cols), np.concatenate(self.caps))


def min_cut_sides(n_nodes: int, size: int, rows: Any, cols: Any, caps: Any) -> list[int]:
    """The side of vertices ``0 .. n_nodes - 1`` in a minimum cut between the source
    ``n_nodes`` and the sink ``n_nodes + 1`` of the graph with edges ``rows -> cols``: 0 when
    reachable from the source in the residual graph, else 1."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import breadth_first_order, maximum_flow

    graph = csr_matrix((_integer_capacities(caps), (np.asarray(rows, dtype=np.int32),
                                                    np.asarray(cols, dtype=np.int32))),
                       shape=(size, size))
    graph.sum_duplicates()  # in int64, then clipped: parallel infinite edges stay infinite
    graph.data = np.minimum(graph.data, _INF_CAP).astype(np.int32)
    source = n_nodes
    flow = maximum_flow(graph, source, n_nodes + 1, method="dinic").flow
    residual = (graph - flow).tocsr()
    residual.data = (residual.data > 0).astype(np.int8)
    residual.eliminate_zeros()
    reached = breadth_first_order(residual, source, directed=True, return_predecessors=False)
    side = np.ones(size, dtype=np.int8)
    side[reached] = 0
    return side[:n_nodes].tolist()


def _integer_capacities(caps: Any) -> Any:
    """Capacities in microseconds as the integers maximum_flow needs: scaled so the finite ones
    sum to at most ``_CAP_BUDGET`` (at most 1 ns resolution), infinite ones ``_INF_CAP``."""
    cap = np.asarray(caps, dtype=np.float64)
    finite = np.isfinite(cap)
    budget = float(cap[finite].sum())
    scale = _NS_PER_US if budget <= 0 else min(_NS_PER_US, _CAP_BUDGET / budget)
    ints = np.full(len(cap), _INF_CAP, dtype=np.int64)
    ints[finite] = np.rint(cap[finite] * scale)
    return ints


def optimal_assignment(problem: PlacementObjective, best: list[int], best_us: float,
                       greedy: list[int], priority: list[int]) -> tuple[list[int], float]:
    """Two devices (each compiling provider counting as one of its own): one exact cut. More:
    from ``greedy`` and from ``priority``, alpha-expansion
    and alpha-beta swap moves (each one cut) until no move improves the exact total. Never
    worse than ``best`` (the better of ``greedy`` and ``priority``) in ``problem.total_us``."""
    reps = [problem.locations(n) for n in range(len(greedy))]
    used = [loc for loc in dict.fromkeys(problem.prov_group) if any(loc in r for r in reps)]
    if len(used) < 2:
        return best, best_us
    # each used group's cheapest provider per node (-1: the group may not run it)
    choice = {loc: np.asarray([r.get(loc, -1) for r in reps], dtype=np.int64) for loc in used}
    if len(used) == 2:
        first, other = used
        lab1 = choice[first]  # the cut puts ties on the sink side: the user's first
        lab0 = choice[other]
        y = np.asarray(problem.move(lab0, lab1), dtype=bool)
        cut = np.where(y, lab1, lab0).tolist()
        us = problem.total_us(cut)
        return (cut, us) if us <= best_us + 1e-9 * max(1.0, best_us) else (best, best_us)
    greedy_arr = np.asarray(greedy, dtype=np.int64)
    starts = [greedy, priority] + [  # and each device taking every node it can
        np.where(choice[loc] >= 0, choice[loc], greedy_arr).tolist() for loc in used]
    cuts = _MoveCache(problem)  # searches that meet ask the same moves from there on
    for start in dict.fromkeys(map(tuple, starts)):  # each distinct start once
        found = _local_search(problem, choice, used, np.asarray(start, dtype=np.int64), cuts)
        us = cuts.total_us(found)
        if us < best_us:
            best, best_us = found, us
    return best, best_us


class _MoveCache:
    """:meth:`PlacementObjective.move` remembered by its labels and ``total_us`` by its
    assignment (128-bit digests of them): both are deterministic, and local searches from
    different starts that reach the same assignment ask the same moves and totals again. A
    digest collision (odds of 2**-128 a pair) would hand back another move's answer or total."""

    def __init__(self, problem: PlacementObjective):
        self.problem = problem
        self.known: dict[bytes, Any] = {}
        self.totals: dict[bytes, float] = {}

    def move(self, lab0: Any, lab1: Any) -> Any:
        key = _digest(lab0, lab1)
        y = self.known.get(key)
        if y is None:
            y = self.known[key] = np.asarray(self.problem.move(lab0, lab1), dtype=bool)
        return y

    def total_us(self, assign: Any) -> float:
        """``problem.total_us(assign)``, once per assignment: a move that changes nothing, and
        searches that meet, ask the same totals again."""
        key = _digest(assign)
        total = self.totals.get(key)
        if total is None:
            total = self.totals[key] = self.problem.total_us(assign)
        return total


def _digest(*labels: Any) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for lab in labels:
        digest.update(np.asarray(lab, dtype=np.int64).tobytes())
    return digest.digest()


def _local_search(problem: PlacementObjective, choice: dict[int, Any], used: list[int],
                  start: Any, cuts: _MoveCache) -> list[int]:
    """From ``start``, alpha-expansion and alpha-beta swap moves over the ``used`` locations
    until none improves the exact total (at most 32 rounds)."""
    current, current_us = start, cuts.total_us(start)
    group = np.asarray(problem.prov_group, dtype=np.int64)  # each provider's group
    moves = [(a, None) for a in used] + [
        (a, b) for i, a in enumerate(used) for b in used[i + 1:]]
    for _ in range(32):
        improved = False
        for alpha, beta in moves:
            where = group[current]
            if beta is None:  # expansion: any node may move to alpha
                lab0 = current
                lab1 = np.where(where == alpha, -1, choice[alpha])
            else:  # swap: nodes on alpha or beta choose between the two
                inside = (where == alpha) | (where == beta)
                lab0 = np.where(inside, choice[beta], current)
                lab1 = np.where(inside, choice[alpha], -1)
            if (lab1 < 0).all():
                continue
            y = cuts.move(lab0, lab1)
            moved = np.where(y & (lab1 >= 0), lab1, np.where(lab0 >= 0, lab0, current))
            us = cuts.total_us(moved)
            if us < current_us - 1e-9 * max(1.0, current_us):
                current, current_us, improved = moved, us, True
        if not improved:
            break
    return current.tolist()
