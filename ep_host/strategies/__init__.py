"""The placement strategies: one registry of (name, one-line description, place function) that
:func:`ep_host.placement.choose`, the CLI's ``--strategy`` and ``Placement.comparison`` read.
Each module of this package registers one strategy; the package imports them all on first use.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ep_host.errors import PlacementError

if TYPE_CHECKING:
    from ep_host.capability import CapabilityTable
    from ep_host.min_cut import PlacementObjective
    from ep_host.provider import Device

DEFAULT = "optimal"

PlaceFunction = Callable[["PlacementRequest"], list[str]]


@dataclass(frozen=True)
class Strategy:
    """A registered strategy. ``place`` returns the provider of every node, in the table's
    order, each one of the node's claims; with ``compares``, choosing it also fills
    ``Placement.comparison`` with every registered strategy's estimated total."""

    name: str
    description: str
    place: PlaceFunction
    compares: bool = False


_REGISTRY: dict[str, Strategy] = {}
_collected = False


def register(name: str, description: str, *,
             compares: bool = False) -> Callable[[PlaceFunction], PlaceFunction]:
    """Register the decorated function as strategy ``name``; ``description`` is one line, shown
    by ``ep-host place --help``. A name already registered is a ``ValueError``."""

    def decorate(place: PlaceFunction) -> PlaceFunction:
        if name in _REGISTRY:
            raise ValueError(f"placement strategy {name!r} is already registered")
        _REGISTRY[name] = Strategy(name, description, place, compares)
        return place

    return decorate


def unregister(name: str) -> None:
    """Remove strategy ``name`` (one a test or a plugin registered); unknown names are ignored."""
    _REGISTRY.pop(name, None)


def _collect() -> None:
    """Import every module of this package once: each registers its strategy."""
    global _collected
    if _collected:
        return
    _collected = True
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def registered() -> list[Strategy]:
    """Every registered strategy: the default first, then by name."""
    _collect()
    return sorted(_REGISTRY.values(), key=lambda s: (s.name != DEFAULT, s.name))


def names() -> list[str]:
    return [s.name for s in registered()]


def get(name: str) -> Strategy:
    """The strategy called ``name``; an unknown name is a :class:`PlacementError` listing the
    registered ones."""
    _collect()
    strategy = _REGISTRY.get(name)
    if strategy is None:
        raise PlacementError(
            f"unknown placement strategy {name!r}; choose one of {', '.join(names())}")
    return strategy


class PlacementRequest:
    """What a strategy places: the capability table, each provider's device, the pins, and
    ``claims``: per node (in the table's order) the providers allowed to run it, in the user's
    order, with their ``total_us`` (a pinned node: its pin alone). Every node has a claim.
    Read them only: nodes answered alike share one dict."""

    def __init__(self, table: CapabilityTable, devices: Mapping[str, Device],
                 pins: Mapping[str, str], claims: list[dict[str, float]]):
        self.table = table
        self.devices = devices
        self.pins = pins
        self.claims = claims
        self._placed: dict[str, list[str]] = {}
        self._totals: dict[str, float] = {}
        self._placing: set[str] = set()
        self._objective: PlacementObjective | None = None

    def placed_by(self, name: str) -> list[str]:
        """The provider per node that strategy ``name`` chooses, computed once per request."""
        placed = self._placed.get(name)
        if placed is not None:
            return placed
        strategy = get(name)
        if name in self._placing:
            raise PlacementError(f"placement strategy {name!r} depends on itself")
        self._placing.add(name)
        try:
            placed = list(strategy.place(self))
        finally:
            self._placing.discard(name)
        self._check(name, placed)
        self._placed[name] = placed
        return placed

    def _check(self, name: str, placed: Sequence[str]) -> None:
        """A strategy places every node, each on one of its claims."""
        if len(placed) != len(self.claims):
            raise PlacementError(f"placement strategy {name!r} placed {len(placed)} nodes of "
                                 f"{len(self.claims)}")
        if all(map(dict.__contains__, self.claims, placed)):
            return
        for node, provider, claim in zip(self.table.nodes, placed, self.claims, strict=True):
            if provider not in claim:
                raise PlacementError(
                    f"placement strategy {name!r} put node {node.name!r} on {provider!r}, "
                    f"which may not run it (allowed: {', '.join(claim)})")

    @property
    def objective(self) -> PlacementObjective:
        """Node costs plus implied copies, compiled for fast evaluation (built on first use)."""
        if self._objective is None:
            from ep_host.min_cut import PlacementObjective

            self._objective = PlacementObjective(self.table, self.devices, self.pins)
        return self._objective

    def total_us(self, providers: Sequence[str]) -> float:
        """The estimated total (node costs plus copies) of a provider per node."""
        objective = self.objective
        index = {p: i for i, p in enumerate(objective.providers)}
        return objective.total_us([index[p] for p in providers])

    def estimated_us(self, name: str) -> float:
        """The estimated total of strategy ``name``'s placement, computed once per request."""
        total = self._totals.get(name)
        if total is None:
            total = self._totals[name] = self.total_us(self.placed_by(name))
        return total

    def comparison(self) -> dict[str, float]:
        """Every registered strategy's estimated total, in the registry's order."""
        return {s.name: self.estimated_us(s.name) for s in registered()}
