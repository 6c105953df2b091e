"""A Ray cluster: its nodes (the driver's is ``node1``), the providers installed on each (listed
by one actor pinned per node), and each other node's link, measured once. A provider on another
node is its own provider ``NAME@nodeK``: a worker proxy (``ep_host.remote``) pinned there.
"""
from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ep_host.errors import HostError
from ep_host.remote import LinkFigures, median_seconds
from ep_host.stored import CacheDirStores

CLUSTER_HINT = "a Ray cluster needs Ray: pip install 'ep-host[ray]'"
LIST_TIMEOUT_S = 120.0  # seconds one node may take to list its providers
LINK_SIZES = (1 << 20, 4 << 20, 16 << 20)  # bytes moved each way to measure a node's link
LINKS = CacheDirStores("ray-links")  # measured links by (driver's node, node): Ray node ids


@dataclass
class ClusterNode:
    """One alive node: its Ray id, the label ep-host names it by (``node1`` is the driver's),
    its address and resources, and the providers listed there (plain records)."""

    node_id: str
    label: str
    address: str
    resources: dict[str, float]
    is_driver: bool
    providers: list[dict[str, Any]] = field(default_factory=list)
    fault: str = ""
    link: LinkFigures | None = None  # from the driver's node (None: the driver's own)

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.label, "node_id": self.node_id, "address": self.address,
                "driver": self.is_driver, "resources": self.resources,
                "fault": self.fault or None,
                "link": None if self.link is None else {
                    "latency_us": self.link.latency_us, "gbps": self.link.gbps},
                "providers": self.providers}


def join(address: str) -> Any:
    """Ray, joined to the cluster at ``address`` (``auto``: the one running here); a Ray this
    process already runs is used as it is."""
    try:
        import ray
    except ImportError as exc:
        raise HostError(f"--ray {address}: Ray is not installed; {CLUSTER_HINT}") from exc
    if not ray.is_initialized():
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False,
                     logging_level=logging.ERROR, configure_logging=True)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise HostError(f"--ray {address}: cannot join the Ray cluster: {exc}") from exc
    return ray


def nodes(ray: Any) -> list[ClusterNode]:
    """The cluster's alive nodes, the driver's first (``node1``), the rest by address and id."""
    driver = ray.get_runtime_context().get_node_id()
    alive = [n for n in ray.nodes() if n.get("Alive")]
    alive.sort(key=lambda n: (n["NodeID"] != driver, n.get("NodeManagerAddress", ""),
                              n.get("NodeManagerPort", 0), n["NodeID"]))
    return [ClusterNode(node_id=n["NodeID"], label=f"node{i}",
                        address=n.get("NodeManagerAddress", ""),
                        resources=dict(n.get("Resources", {})), is_driver=n["NodeID"] == driver)
            for i, n in enumerate(alive, 1)]


class NodeLister:
    """The actor that lists one node's providers: entry points loaded in a host of its own."""

    def __init__(self, sys_path: Sequence[str]):
        for entry in sys_path:
            if entry not in sys.path:
                sys.path.append(entry)

    def providers(self, names: Sequence[str] | None) -> list[dict[str, Any]]:
        from ep_host.discovery import Host

        host = Host(hook_timeout=None)
        host.load_entry_points(None if names is None else list(names))
        return [listed(r) for r in host.providers()]

    def ping(self, value: Any = None) -> int:
        return 0 if value is None else int(getattr(value, "nbytes", 0))

    def make(self, nbytes: int) -> np.ndarray:
        return np.ones(nbytes, dtype=np.uint8)


def listed(record: Any) -> dict[str, Any]:
    """A provider's record as listed per node: the providers command's fields and its reason."""
    return record.to_dict()


def list_providers(ray: Any, cluster: list[ClusterNode],
                   names: Sequence[str] | None = None) -> list[ClusterNode]:
    """Each node's providers (``names``: only those), listed by an actor pinned to it (all
    nodes at once); a node whose listing fails or takes over ``LIST_TIMEOUT_S`` keeps the
    reason in ``fault``."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    lister = ray.remote(NodeLister)
    path = tuple(p for p in sys.path if p)
    actors, refs = [], []
    for node in cluster:
        strategy = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
        actor = lister.options(num_cpus=0, max_restarts=0,
                               scheduling_strategy=strategy).remote(path)
        actors.append(actor)
        refs.append(actor.providers.remote(names))
    for node, ref in zip(cluster, refs, strict=True):
        try:
            node.providers = ray.get(ref, timeout=LIST_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            node.fault = f"listing its providers took over {LIST_TIMEOUT_S:g} s"
        except ray.exceptions.RayError as exc:
            node.fault = f"listing its providers failed: {str(exc).splitlines()[0]}"
    driver = ray.get_runtime_context().get_node_id()
    for node, actor in zip(cluster, actors, strict=True):
        if not node.is_driver and not node.fault:
            node.link = known_link(ray, actor, driver, node.node_id)
        ray.kill(actor, no_restart=True)
    return cluster


def known_link(ray: Any, actor: Any, driver: str, node: str) -> LinkFigures:
    """The link from node ``driver`` to ``node``: as measured before (kept in the cache
    directory; Ray node ids are new each time a node starts), else measured now and kept."""
    store = LINKS.current()
    found = store.get((driver, node)) or {}
    try:
        latency, gbps = float(found["latency_us"]), float(found["gbps"])
        if 0 <= latency < float("inf") and 0 < gbps < float("inf"):
            return LinkFigures(latency_us=latency, gbps=gbps)
    except (TypeError, KeyError, ValueError):  # none kept, or a damaged record: measure again
        pass
    link = measure_link(ray, actor)
    store.put((driver, node), {"latency_us": link.latency_us, "gbps": link.gbps})
    return link


def measure_link(ray: Any, actor: Any) -> LinkFigures:
    """The link from here to ``actor``'s node: the latency of one copy is an empty call's
    round trip (the median of a few, as a copy there is fetched by a call); the bandwidth is
    the slope of a straight line through the median times of a tensor of each of
    ``LINK_SIZES`` sent there (``ray.put`` and a call) and one sent back."""
    ray.get(actor.ping.remote())  # warm: the first call pays for the worker's start
    empty = median_seconds(lambda: ray.get(actor.ping.remote()), 7)
    one_way = []
    for nbytes in LINK_SIZES:
        payload = np.ones(nbytes, dtype=np.uint8)
        there = median_seconds(lambda p=payload: ray.get(actor.ping.remote(ray.put(p))), 5)
        back = median_seconds(lambda n=nbytes: ray.get(actor.make.remote(n)), 5)
        one_way.append((there + back) / 2)
    per_byte = float(np.polyfit(np.asarray(LINK_SIZES, float), np.asarray(one_way), 1)[0])
    if per_byte <= 0:  # noise: the largest copy's average speed beyond an empty call
        per_byte = max(one_way[-1] - empty, 1e-6) / LINK_SIZES[-1]
    return LinkFigures(latency_us=empty * 1e6, gbps=1e-9 / per_byte)


def discover(address: str, names: Sequence[str] | None = None) -> list[ClusterNode]:
    """The cluster at ``address``: every alive node with the providers installed there
    (``names``: only those; ``NAME@nodeK`` counts as ``NAME``)."""
    ray = join(address)
    base = None if names is None else sorted({n.rpartition("@")[0] or n for n in names})
    return list_providers(ray, nodes(ray), base)


def remote_name(name: str, label: str) -> str:
    """The provider name of provider ``name`` on the node labelled ``label``."""
    return f"{name}@{label}"


def wanted_remote(names: Sequence[str] | None, cluster: list[ClusterNode]
                  ) -> list[tuple[ClusterNode, dict[str, Any]]]:
    """The (node, provider) pairs on other nodes than the driver's to register: every one when
    ``names`` is ``None``, else those named ``NAME@nodeK`` (one that no node lists is a
    :class:`HostError`)."""
    pairs = [(node, p) for node in cluster if not node.is_driver for p in node.providers]
    if names is None:
        return pairs
    by_name = {remote_name(p["name"], node.label): (node, p) for node, p in pairs}
    asked = [n for n in names if "@" in n]
    unknown = [n for n in asked if n not in by_name]
    if unknown:
        known = ", ".join(sorted(by_name)) or "none"
        raise HostError(f"--ray: no provider {', '.join(unknown)} on the cluster's other nodes; "
                        f"there: {known}")
    return [by_name[n] for n in asked]
