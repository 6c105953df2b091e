"""A node's long attribute lists made Python tuples only when one is read: the mapping
:attr:`~ep_host.graph.NodeView.attributes` gives a node holding some.

A tree ensemble's tables hold 3,000-22,000 numbers and strings in one node; as tuples they
took 150-580 us of a scikit-learn export's 1-2 ms session creation, where its kernel reads
them as arrays (``NodeView.attribute_array``) and the modes from the protobuf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

LONG_LIST = 64
"""INTS, FLOATS and STRINGS attributes at least this long are made tuples when read."""

_LATER = object()  # a value not made yet


class LongListAttributes(Mapping[str, Any]):
    """Read-only attributes by name, in the node's order; each long list is made a tuple (by
    its ``make``) the first time it is read, then kept. Equal to the dict of its items."""

    __slots__ = ("_values", "_makers")

    def __init__(self, values: dict[str, Any], makers: dict[str, Callable[[], tuple[Any, ...]]]):
        self._values = values  # the long lists' names hold _LATER until read
        self._makers = makers

    @staticmethod
    def later() -> Any:
        """The placeholder of a value made when read."""
        return _LATER

    def __getitem__(self, name: str) -> Any:
        found = self._values[name]
        if found is _LATER:
            found = self._values[name] = self._makers[name]()
        return found

    def get(self, name: str, default: Any = None) -> Any:
        found = self._values.get(name, default)
        if found is _LATER:
            found = self._values[name] = self._makers[name]()
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._values

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.items())!r})"


def decoded(strings: Any) -> tuple[str, ...]:
    """Each of ``strings`` (bytes) as text; many at once in one decode (a tree ensemble's node
    modes are thousands), one by one where one holds a NUL, the separator."""
    if len(strings) < 16:
        return tuple(s.decode("utf-8", "replace") for s in strings)
    joined = b"\0".join(strings)
    texts = joined.decode("utf-8", "replace").split("\0")
    if len(texts) != len(strings):  # a string with a NUL of its own
        return tuple(s.decode("utf-8", "replace") for s in strings)
    return tuple(texts)
