"""Choosing a provider for every node from the capability table, and pricing the copies.

Strategies: ``optimal`` (the default: node costs plus the device copies they imply, minimised
by a minimum s-t cut, exact for two devices, alpha-expansion over that cut for more),
``priority`` (the first provider in the user's order that claims the node, as onnxruntime
places) and ``greedy`` (each node's cheapest ``total_us``). Ties break by the user's provider
order. Pins override all three; a node nobody claims is a :class:`PlacementError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ep_host.capability import CapabilityTable
from ep_host.errors import PlacementError
from ep_host.graph import GraphView, paused_gc
from ep_host.match import KernelMatch
from ep_host.provider import HOST, Device

SCHEMA = "ep-host/placement/v1"
STRATEGIES = ("optimal", "greedy", "priority")


@dataclass(frozen=True)
class Transfer:
    """A tensor copied between devices because of where its producer and consumer run."""

    tensor: str
    source: str  # device name
    destination: str
    nbytes: int
    cost_us: float

    def to_dict(self) -> dict[str, Any]:
        return {"tensor": self.tensor, "from": self.source, "to": self.destination,
                "bytes": self.nbytes, "cost_us": self.cost_us}


@dataclass
class NodePlacement:
    name: str
    op_type: str
    domain: str
    provider: str
    cost_us: float
    pinned: bool = False


@dataclass
class Partition:
    """A maximal run of consecutive nodes (in execution order) on one provider."""

    provider: str
    nodes: list[str]
    cost_us: float


@dataclass
class Placement:
    """Where every node runs, why, and what it costs; keeps the whole capability table."""

    strategy: str
    providers: list[str]
    nodes: list[NodePlacement]
    table: CapabilityTable
    devices: dict[str, Device]
    transfers: list[Transfer] = field(default_factory=list)
    model: str = ""
    comparison: dict[str, float] | None = None  # strategy -> estimated total_us (optimal only)

    @property
    def by_node(self) -> dict[str, NodePlacement]:
        return {n.name: n for n in self.nodes}

    @property
    def node_cost_us(self) -> float:
        return sum(n.cost_us for n in self.nodes)

    @property
    def transfer_cost_us(self) -> float:
        return sum(t.cost_us for t in self.transfers)

    @property
    def total_us(self) -> float:
        return self.node_cost_us + self.transfer_cost_us

    def totals(self) -> dict[str, dict[str, float]]:
        out = {p: {"nodes": 0, "cost_us": 0.0} for p in self.providers}
        for n in self.nodes:
            out[n.provider]["nodes"] += 1
            out[n.provider]["cost_us"] += n.cost_us
        return out

    def partitions(self) -> list[Partition]:
        parts: list[Partition] = []
        for n in self.nodes:
            if parts and parts[-1].provider == n.provider:
                parts[-1].nodes.append(n.name)
                parts[-1].cost_us += n.cost_us
            else:
                parts.append(Partition(n.provider, [n.name], n.cost_us))
        return parts

    def to_dict(self) -> dict[str, Any]:
        answers = self.table.answers
        return {
            "schema": SCHEMA,
            "model": self.model,
            "strategy": self.strategy,
            "providers": [
                {"name": p, "device": self.devices[p].name if p in self.devices else None}
                for p in self.providers
            ],
            "nodes": [
                {
                    "name": n.name,
                    "op_type": n.op_type,
                    "domain": n.domain,
                    "provider": n.provider,
                    "cost_us": n.cost_us,
                    "pinned": n.pinned,
                    "answers": {p: answers[n.name][p].to_dict() for p in self.providers},
                }
                for n in self.nodes
            ],
            "transfers": [t.to_dict() for t in self.transfers],
            "totals": {
                "providers": self.totals(),
                "node_cost_us": self.node_cost_us,
                "transfer_cost_us": self.transfer_cost_us,
                "total_us": self.total_us,
            },
            "partitions": [
                {"provider": p.provider, "first": p.nodes[0], "last": p.nodes[-1],
                 "nodes": len(p.nodes), "cost_us": p.cost_us}
                for p in self.partitions()
            ],
            "comparison": self.comparison,
        }


def unplaceable_message(table: CapabilityTable, names: Sequence[str], model: str) -> str:
    lines = [f"{model}: {len(names)} node(s) cannot be placed on any provider:"]
    by_name = {n.name: n for n in table.nodes}
    for name in names:
        node = by_name[name]
        lines.append(f"  {name} ({node.qualified_op}):")
        for p in table.providers:
            a = table.answers[name][p]
            lines.append(f"    {p}: {a.reason if not a.is_supported else 'claims it'}")
        if not table.providers:
            lines.append("    no provider is loaded (see `ep-host providers`)")
    return "\n".join(lines)


def choose(
    table: CapabilityTable,
    devices: Mapping[str, Device],
    *,
    strategy: str = "optimal",
    pins: Mapping[str, str] | None = None,
    model: str = "",
    graph: GraphView | None = None,
) -> Placement:
    """Place every node of ``table``; raises :class:`PlacementError` listing unplaceable nodes.

    With ``optimal``, ``Placement.comparison`` holds the estimated totals of ``optimal``,
    ``greedy`` and ``priority`` (with the same pins)."""
    if strategy not in STRATEGIES:
        raise PlacementError(
            f"unknown placement strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}"
        )
    pins = dict(pins or {})
    known = {n.name for n in table.nodes} if pins else set()
    for node_name, provider in pins.items():
        if node_name not in known:
            raise PlacementError(f"{model}: --pin names node {node_name!r}, which the model lacks")
        if provider not in table.providers:
            raise PlacementError(
                f"{model}: --pin {node_name}={provider}: provider {provider!r} is not in use "
                f"(providers: {', '.join(table.providers) or 'none'})"
            )
    chosen: list[NodePlacement] = []
    unplaceable: list[str] = []
    answers = table.answers
    providers = table.providers
    with paused_gc():
        for node in table.nodes:
            name = node.name
            row = answers[name]
            pin = pins.get(name) if pins else None
            if pin is not None:
                answer = row[pin]
                if not answer.is_supported:
                    raise PlacementError(
                        f"{model}: node {name!r} is pinned to {pin!r}, which declines it: "
                        f"{answer.reason}"
                    )
                provider, cost = pin, answer.cost.total_us
            else:
                provider, cost = _pick(row, providers,
                                       "greedy" if strategy == "optimal" else strategy)
                if provider is None:
                    unplaceable.append(name)
                    continue
            chosen.append(NodePlacement(name, node.op_type, node.domain, provider, cost,
                                        pin is not None))
        if unplaceable:
            raise PlacementError(unplaceable_message(table, unplaceable, model))
        comparison = None
        if strategy == "optimal":
            comparison = _place_optimally(table, devices, pins, chosen)
        placement = Placement(strategy, list(providers), chosen, table, dict(devices), model=model,
                              comparison=comparison)
        placement.transfers = implied_transfers(placement)
    return placement


def _place_optimally(table: CapabilityTable, devices: Mapping[str, Device],
                     pins: Mapping[str, str], chosen: list[NodePlacement]) -> dict[str, float]:
    """Rewrites ``chosen`` (the greedy placement) to the optimal one; returns the estimated
    totals of the three strategies."""
    problem = _Problem(table, devices, pins)
    index = {p: i for i, p in enumerate(problem.providers)}
    greedy = [index[n.provider] for n in chosen]
    priority = [next(iter(opts)) for opts in problem.options]  # the first claimant in order
    greedy_us = problem.total_us(greedy)
    priority_us = problem.total_us(priority)
    best, best_us = (greedy, greedy_us) if greedy_us <= priority_us else (priority, priority_us)
    if len({problem.prov_loc[p] for opts in problem.options for p in opts}) >= 2:
        best, best_us = _optimal(problem, best, best_us, greedy, priority)
    for n, p in zip(chosen, best, strict=True):
        if index[n.provider] != p:
            n.provider = problem.providers[p]
            n.cost_us = table.answers[n.name][n.provider].cost.total_us
    return {"optimal": best_us, "greedy": greedy_us, "priority": priority_us}


def _pick(
    row: Mapping[str, KernelMatch], providers: Sequence[str], strategy: str
) -> tuple[str | None, float]:
    """The chosen provider and its ``total_us`` (``None`` when no provider claims the node)."""
    best = None
    best_cost = 0.0
    for p in providers:  # in the user's order, so the first of equal costs wins
        answer = row[p]
        if not answer.is_supported:
            continue
        cost = answer.cost.total_us
        if strategy == "priority":
            return p, cost
        if best is None or cost < best_cost:
            best, best_cost = p, cost
    return best, best_cost


def implied_transfers(placement: Placement) -> list[Transfer]:
    """The device copies a placement implies: each tensor is charged once per destination
    device; graph inputs start on the host, graph outputs end there, host inputs are priced.
    Constants cost nothing per run: a session uploads each to its devices once, at creation."""
    return [t for t, _, _ in copy_walk(placement)]


def copy_walk(placement: Placement) -> Iterator[tuple[Transfer, str | None, str | None]]:
    """The walk behind :func:`implied_transfers`, in node order: each copy with the node that
    produced the tensor (``None``: a graph input) and the node that first needs it on the
    destination (``None``: the graph's outputs)."""
    devices = placement.devices
    table = placement.table
    where = {n.name: n.provider for n in placement.nodes}
    if all(devices.get(p, HOST).name == HOST.name for p in set(where.values())):
        return  # every value starts, lives and ends on the host: nothing moves
    home: dict[str, tuple[Device, str]] = {}  # value -> (device, producing node)
    moved: set[tuple[str, str]] = set()

    def need(value: Any, dest: Device) -> tuple[Transfer, str | None] | None:
        if value is None or value.is_constant:
            return None
        src, producer = home.get(value.name, (HOST, None))
        if src.name == dest.name or (value.name, dest.name) in moved:
            return None
        moved.add((value.name, dest.name))
        nbytes = value.nbytes
        cost = src.copy_cost_us(nbytes) + dest.copy_cost_us(nbytes)
        return Transfer(value.name, src.name, dest.name, nbytes, cost), producer

    for node in table.nodes:
        provider = where[node.name]
        device = devices.get(provider, HOST)
        host_inputs = set(table.answers[node.name][provider].host_inputs)
        for i, value in enumerate(node.inputs):
            copy = need(value, HOST if i in host_inputs else device)
            if copy is not None:
                yield copy[0], copy[1], node.name
        for value in node.outputs:
            if value is not None:
                home[value.name] = (device, node.name)
    if table.nodes:
        for value in table.graph.outputs:
            copy = need(value, HOST)
            if copy is not None:
                yield copy[0], copy[1], None


# ---------------------------------------------------------------------------------------------
# optimal: node costs plus the copies they imply, by minimum cut
# ---------------------------------------------------------------------------------------------

_INF_CAP = 2**30  # scipy's maximum_flow computes in int32: leave room for residuals
_CAP_BUDGET = 2**29  # finite capacities are scaled so that all of them sum to at most this
_NS_PER_US = 1000.0  # the finest resolution: 1 ns


class _Problem:
    """The objective ``implied_transfers`` prices, compiled for repeated evaluation.

    Locations are device names (index 0 is the host); providers on one device share a location.
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
        for node in table.nodes:
            row = answers[node.name]
            pin = pins.get(node.name)
            names = [pin] if pin is not None else self.providers
            opts: dict[int, float] = {}
            hin: dict[int, frozenset[int]] = {}
            for p in names:
                a = row[p]
                if a.is_supported:
                    opts[index[p]] = a.cost.total_us
                    if a.host_inputs:
                        hin[index[p]] = frozenset(a.host_inputs)
            self.options.append(opts)
            self.host_in.append(hin)
        vid: dict[str, int] = {}
        prod: list[int] = []
        nbytes: list[int] = []
        e_val: list[int] = []
        e_node: list[int] = []
        e_in: list[int] = []
        for n, node in enumerate(table.nodes):
            for i, v in enumerate(node.inputs):
                if v is not None and not v.is_constant:  # constants: uploaded once, not per run
                    k = vid.get(v.name)
                    if k is None:
                        k = vid[v.name] = len(prod)
                        prod.append(-1)
                        nbytes.append(v.nbytes)
                    e_val.append(k)
                    e_node.append(n)
                    e_in.append(i)
            for v in node.outputs:
                if v is not None:
                    k = vid.get(v.name)
                    if k is None:
                        vid[v.name] = len(prod)
                        prod.append(n)
                        nbytes.append(v.nbytes)
                    else:
                        prod[k] = n
        outs = []
        if table.nodes:
            outs = [vid[v.name] for v in table.graph.outputs if v.name in vid]
        self._arrays(prod, nbytes, e_val, e_node, e_in, outs)

    def _arrays(self, prod: list[int], nbytes: list[int], e_val: list[int], e_node: list[int],
                e_in: list[int], outs: list[int]) -> None:
        """numpy forms of the problem: tensors (producer, bytes), consumer edges (tensor,
        node, input), where each edge reads on each provider, graph outputs."""
        import numpy as np

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

    def locations(self, n: int) -> dict[int, int]:
        """Node ``n``'s cheapest allowed provider per location (ties: the user's order)."""
        best: dict[int, int] = {}
        opts = self.options[n]
        for p, cost in opts.items():  # providers in the user's order
            loc = self.prov_loc[p]
            if loc not in best or cost < opts[best[loc]]:
                best[loc] = p
        return best

    def total_us(self, assign: Sequence[int]) -> float:
        """Node costs plus copies of ``assign`` (a provider index per node), as
        ``implied_transfers`` prices them (up to the order floats are summed in)."""
        import numpy as np

        a = np.asarray(assign, dtype=np.int64)
        total = float(self._cost[np.arange(len(a)), a].sum())
        prod = self._prod
        src = np.where(prod < 0, 0, self._prov_loc[a[np.maximum(prod, 0)]])
        n_locs = len(self.loc_dev)
        dest = self._need[np.arange(len(self._e_val)), a[self._e_node]]
        keys = np.unique(np.concatenate([self._e_val * n_locs + dest, self._outs * n_locs]))
        val, dst = keys // n_locs, keys % n_locs
        moved = dst != src[val]
        val, dst = val[moved], dst[moved]
        s = src[val]
        nb = self._nb[val]
        lat, gbps, host = self._lat, self._gbps, self._host
        copy = (np.where(host[s], 0.0, lat[s] + nb / (gbps[s] * 1e3))
                + np.where(host[dst], 0.0, lat[dst] + nb / (gbps[dst] * 1e3)))
        return total + float(copy.sum())

    def move(self, lab0: Sequence[int], lab1: Sequence[int]) -> list[int]:
        """The best choice per node between ``lab0[n]`` and ``lab1[n]`` (provider indices, -1:
        not allowed), by one minimum s-t cut.

        Each tensor's copy to each destination is a term ``g(producer) * OR(consumers that
        read it there)``; an OR of several consumers gets an auxiliary node. Exact when every
        term is submodular: always for two devices one of which is the host, and for any two
        when no claim puts an input on the host. A term that is not (a tensor some claims need
        on the host, for instance) is charged as if always paid, an upper bound; callers keep
        a move only if the exact total improves. Capacities are integers: microseconds times
        ``min(1000, 2**29 / sum of finite capacities)``, rounded, so each term is off by at
        most half a nanosecond on models whose capacities sum below ~0.5 s.
        """
        import numpy as np

        inf = math.inf
        l0 = np.asarray(lab0, dtype=np.int64)
        l1 = np.asarray(lab1, dtype=np.int64)
        n_nodes = len(l0)
        s, t = n_nodes, n_nodes + 1
        a = np.where(l0 < 0, l1, l0)  # the label in effect on each side
        b = np.where(l1 < 0, l0, l1)
        rng = np.arange(n_nodes)
        c0 = np.where(l0 < 0, inf, self._cost[rng, a])
        c1 = np.where(l1 < 0, inf, self._cost[rng, b])
        prod = self._prod
        has_p = prod >= 0
        pp = np.maximum(prod, 0)
        src0 = np.where(has_p, self._prov_loc[a[pp]], 0)
        src1 = np.where(has_p, self._prov_loc[b[pp]], 0)
        n_locs = len(self.loc_dev)
        e_rng = np.arange(len(self._e_val))
        ev, ec = self._e_val, self._e_node
        n0 = self._need[e_rng, a[ec]]
        n1 = self._need[e_rng, b[ec]]
        same = n0 == n1
        # "always" destinations: some consumer reads the tensor there whatever its choice
        always = np.unique(np.concatenate([ev[same] * n_locs + n0[same], self._outs * n_locs]))
        diff = ~same
        lit_key = np.concatenate([ev[diff] * n_locs + n0[diff], ev[diff] * n_locs + n1[diff]])
        lit_node = np.concatenate([ec[diff], ec[diff]])
        lit_sign = np.concatenate([np.zeros(diff.sum(), np.int64), np.ones(diff.sum(), np.int64)])
        keep = ~np.isin(lit_key, always)
        lit_key, lit_node, lit_sign = lit_key[keep], lit_node[keep], lit_sign[keep]
        lat, gbps, host = self._lat, self._gbps, self._host

        def gain(key: Any) -> tuple[Any, Any, Any, Any]:
            val, dst = key // n_locs, key % n_locs
            nb = self._nb[val]
            dcopy = np.where(host[dst], 0.0, lat[dst] + nb / (gbps[dst] * 1e3))

            def w(src: Any) -> Any:
                scopy = np.where(host[src], 0.0, lat[src] + nb / (gbps[src] * 1e3))
                return np.where(src == dst, 0.0, scopy + dcopy)

            return val, dst, w(src0[val]), w(src1[val])

        # always-paid terms: unary on the producer
        val, _, g0, g1 = gain(always)
        p_of = prod[val]
        ok = p_of >= 0
        np.add.at(c0, p_of[ok], g0[ok])
        np.add.at(c1, p_of[ok], g1[ok])
        rows: list[Any] = []
        cols: list[Any] = []
        caps: list[Any] = []
        if len(lit_key):
            groups, inv = np.unique(lit_key, return_inverse=True)
            n_groups = len(groups)
            count = np.bincount(inv, minlength=n_groups)
            ones = np.bincount(inv, weights=lit_sign, minlength=n_groups)
            has1 = ones > 0
            has0 = ones < count
            first = np.empty(n_groups, dtype=np.int64)
            first[inv[::-1]] = lit_node[::-1]
            val, _, g0, g1 = gain(groups)
            p_of = prod[val]
            nxt = n_nodes + 2

            def term(w: Any, cond: Any, side: Any) -> None:
                """``w * [y_p == side if cond] * OR(lits)`` for every group where ``w > 0``."""
                nonlocal nxt
                on = w > 0
                # not submodular (a literal of the conditioning side, or mixed signs
                # unconditioned): charged as if always paid
                bad = np.where(cond, np.where(side == 1, has1, has0), has0 & has1) & on
                upper = bad & cond
                np.add.at(c0, p_of[upper & (side == 0)], w[upper & (side == 0)])
                np.add.at(c1, p_of[upper & (side == 1)], w[upper & (side == 1)])
                on &= ~bad
                sign = np.where(has1, 1, 0)  # the one sign present
                single = on & (count == 1)
                plain = single & ~cond
                np.add.at(c1, first[plain & (sign == 1)], w[plain & (sign == 1)])
                np.add.at(c0, first[plain & (sign == 0)], w[plain & (sign == 0)])
                pair = single & cond
                pf, pc, pw = p_of[pair], first[pair], w[pair]
                ps = side[pair] if np.ndim(side) else np.full(len(pf), side)
                rows.append(np.where(ps == 0, pf, pc))
                cols.append(np.where(ps == 0, pc, pf))
                caps.append(pw)
                multi = on & (count > 1)
                ids = np.full(n_groups, -1, dtype=np.int64)
                ids[multi] = nxt + np.arange(multi.sum())
                nxt += int(multi.sum())
                gs = np.nonzero(multi)[0]
                head = np.where(cond[gs], p_of[gs], np.where(sign[gs] == 1, s, -1))
                sd = (side[gs] if np.ndim(side) else np.full(len(gs), side))
                # sign 1 (or side 0): head -> z (w), z -> c (inf); else z -> head (w), c -> z
                forward = np.where(cond[gs], sd == 0, sign[gs] == 1)
                head = np.where(~cond[gs] & (sign[gs] == 0), t, head)
                rows.append(np.where(forward, head, ids[gs]))
                cols.append(np.where(forward, ids[gs], head))
                caps.append(w[gs])
                lm = multi[inv]
                z = ids[inv[lm]]
                forward_by_group = np.zeros(n_groups, dtype=bool)
                forward_by_group[gs] = forward
                f = forward_by_group[inv[lm]]
                rows.append(np.where(f, z, lit_node[lm]))
                cols.append(np.where(f, lit_node[lm], z))
                caps.append(np.full(int(lm.sum()), inf))

            low = np.minimum(g0, g1)
            term(low, np.zeros(n_groups, dtype=bool), 0)
            delta = np.abs(g0 - g1)
            term(delta, np.ones(n_groups, dtype=bool) & (p_of >= 0), (g1 > g0).astype(np.int64))
            size = nxt
        else:
            size = n_nodes + 2
        low = np.minimum(c0, c1)
        up = c1 > low
        rows.append(np.full(int(up.sum()), s))
        cols.append(rng[up])
        caps.append((c1 - low)[up])
        down = c0 > low
        rows.append(rng[down])
        cols.append(np.full(int(down.sum()), t))
        caps.append((c0 - low)[down])
        return self._cut(n_nodes, size, np.concatenate(rows), np.concatenate(cols),
                         np.concatenate(caps))

    @staticmethod
    def _cut(n_nodes: int, size: int, rows: Any, cols: Any, caps: Any) -> list[int]:
        import numpy as np
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import breadth_first_order, maximum_flow

        cap = np.asarray(caps, dtype=np.float64)
        finite = np.isfinite(cap)
        budget = float(cap[finite].sum())
        scale = _NS_PER_US if budget <= 0 else min(_NS_PER_US, _CAP_BUDGET / budget)
        ints = np.full(len(cap), _INF_CAP, dtype=np.int64)
        ints[finite] = np.rint(cap[finite] * scale)
        graph = csr_matrix((ints, (np.asarray(rows, dtype=np.int32),
                                   np.asarray(cols, dtype=np.int32))), shape=(size, size))
        graph.sum_duplicates()  # in int64, then clipped: parallel infinite edges stay infinite
        graph.data = np.minimum(graph.data, _INF_CAP).astype(np.int32)
        s = n_nodes
        flow = maximum_flow(graph, s, n_nodes + 1, method="dinic").flow
        residual = (graph - flow).tocsr()
        residual.data = (residual.data > 0).astype(np.int8)
        residual.eliminate_zeros()
        reached = breadth_first_order(residual, s, directed=True, return_predecessors=False)
        side = np.ones(size, dtype=np.int8)
        side[reached] = 0
        return side[:n_nodes].tolist()


def _optimal(problem: _Problem, best: list[int], best_us: float, greedy: list[int],
             priority: list[int]) -> tuple[list[int], float]:
    """Two devices: one exact cut. More: from ``greedy`` and from ``priority``, alpha-expansion
    and alpha-beta swap moves (each one cut) until no move improves the exact total. Never
    worse than ``greedy`` or ``priority`` in ``problem.total_us``."""
    reps = [problem.locations(n) for n in range(len(greedy))]
    used = [loc for loc in dict.fromkeys(problem.prov_loc) if any(loc in r for r in reps)]
    if len(used) < 2:
        return best, best_us
    if len(used) == 2:
        first, other = used
        lab1 = [r.get(first, -1) for r in reps]  # the cut puts ties on the sink side: user's first
        lab0 = [r.get(other, -1) for r in reps]
        y = problem.move(lab0, lab1)
        cut = [lab1[n] if y[n] else lab0[n] for n in range(len(y))]
        us = problem.total_us(cut)
        return (cut, us) if us <= best_us + 1e-9 * max(1.0, best_us) else (best, best_us)
    starts = [greedy, priority] + [  # and each device taking every node it can
        [r.get(loc, g) for r, g in zip(reps, greedy, strict=True)] for loc in used]
    for start in starts:
        found = _local_search(problem, reps, used, start)
        us = problem.total_us(found)
        if us < best_us:
            best, best_us = found, us
    return best, best_us


def _local_search(problem: _Problem, reps: list[dict[int, int]], used: list[int],
                  start: list[int]) -> list[int]:
    current, current_us = list(start), problem.total_us(start)
    prov_loc = problem.prov_loc
    moves = [(a, None) for a in used] + [
        (a, b) for i, a in enumerate(used) for b in used[i + 1:]]
    for _ in range(32):
        improved = False
        for alpha, beta in moves:
            if beta is None:  # expansion: any node may move to alpha
                lab0 = current
                lab1 = [-1 if prov_loc[current[n]] == alpha else r.get(alpha, -1)
                        for n, r in enumerate(reps)]
            else:  # swap: nodes on alpha or beta choose between the two
                lab0, lab1 = [], []
                for n, r in enumerate(reps):
                    if prov_loc[current[n]] in (alpha, beta):
                        a, b = r.get(beta, -1), r.get(alpha, -1)
                    else:
                        a, b = current[n], -1
                    lab0.append(a)
                    lab1.append(b)
            if all(x < 0 for x in lab1):
                continue
            y = problem.move(lab0, lab1)
            moved = [lab1[n] if y[n] and lab1[n] >= 0 else lab0[n] if lab0[n] >= 0
                     else current[n] for n in range(len(y))]
            us = problem.total_us(moved)
            if us < current_us - 1e-9 * max(1.0, current_us):
                current, current_us, improved = moved, us, True
        if not improved:
            break
    return current
