"""Estimated execution cost of a kernel, in microseconds, and the byte counts behind it.

``Cost`` is what a provider answers for a node it claims; placement compares ``total_us``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace

from ep_host.dtypes import DType
from ep_host.dtypes import dtype as to_dtype


def _check(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"Cost.{name} must be finite and >= 0, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Cost:
    """An estimated kernel time, split by where it goes. All times are in microseconds.

    ``compute_us`` (arithmetic at the device's peak) and ``memory_us`` (bytes at its bandwidth)
    overlap, as in a roofline; ``transfer_us`` (copies the kernel itself makes) and
    ``launch_us`` (per-call dispatch) add to whichever of the two is larger. ``bytes_moved`` is
    the memory traffic the estimate assumed and ``flops`` the arithmetic (both for reports and
    traces). Negative or non-finite values raise ``ValueError``.
    """

    compute_us: float = 0.0
    memory_us: float = 0.0
    transfer_us: float = 0.0
    launch_us: float = 0.0
    bytes_moved: int = 0
    flops: float = 0.0

    def __post_init__(self) -> None:
        for name in ("compute_us", "memory_us", "transfer_us", "launch_us", "flops"):
            object.__setattr__(self, name, _check(name, getattr(self, name)))
        moved = self.bytes_moved
        if isinstance(moved, float) and not math.isfinite(moved):
            raise ValueError(f"Cost.bytes_moved must be finite and >= 0, got {moved!r}")
        if int(moved) < 0:
            raise ValueError(f"Cost.bytes_moved must be >= 0, got {moved!r}")
        object.__setattr__(self, "bytes_moved", int(moved))

    @property
    def total_us(self) -> float:
        """The time placement compares: ``max(compute, memory) + transfer + launch``."""
        return max(self.compute_us, self.memory_us) + self.transfer_us + self.launch_us

    def with_launch_us(self, launch_us: float) -> Cost:
        return replace(self, launch_us=launch_us)

    def with_bytes_moved(self, bytes_moved: int) -> Cost:
        return replace(self, bytes_moved=bytes_moved)

    def with_transfer_us(self, transfer_us: float) -> Cost:
        return replace(self, transfer_us=transfer_us)

    def scaled(self, scale: float, overhead_us: float = 0.0) -> Cost:
        """This cost as calibration corrects it: compute, memory and launch times times
        ``scale``, plus ``overhead_us`` of launch; every other field as it is."""
        return replace(self, compute_us=self.compute_us * scale,
                       memory_us=self.memory_us * scale,
                       launch_us=self.launch_us * scale + overhead_us)

    def __add__(self, other: Cost) -> Cost:
        """Field by field (two kernels in sequence)."""
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(**{name: getattr(self, name) + getattr(other, name) for name in _FIELDS})

    @classmethod
    def roofline(
        cls,
        *,
        flops: float,
        bytes_moved: int,
        peak_gflops: float,
        bandwidth_gbps: float,
        launch_us: float = 0.0,
    ) -> Cost:
        """A roofline estimate: ``flops`` at ``peak_gflops`` and ``bytes_moved`` at
        ``bandwidth_gbps`` (GB/s), plus a per-call ``launch_us``."""
        return cls(
            compute_us=flops / (peak_gflops * 1e3),
            memory_us=bytes_moved / (bandwidth_gbps * 1e3),
            launch_us=launch_us,
            bytes_moved=bytes_moved,
            flops=flops,
        )

    def to_dict(self) -> dict[str, float]:
        return {**{name: getattr(self, name) for name in _FIELDS}, "total_us": self.total_us}


Cost.ZERO = Cost()  # type: ignore[attr-defined]
_FIELDS = tuple(f.name for f in fields(Cost))
_FLOAT_FIELDS = tuple(name for name in _FIELDS if name != "bytes_moved")
_SLOT = {name: getattr(Cost, name) for name in _FIELDS}  # slot descriptors: stores past frozen


def copy_checked(cost: Cost) -> Cost:
    """A fresh copy of a provider's ``cost``, each field checked again: what the host keeps is
    what it validated, whatever the provider does to its own object later. Only ``Cost``
    itself is accepted (a subclass could answer differently each time it is read); a field
    that is not what ``Cost()`` stores (a finite float >= 0, an int ``bytes_moved`` >= 0)
    raises ``ValueError`` naming it."""
    if type(cost) is not Cost:
        raise TypeError(f"cost is a {type(cost).__name__}, not a Cost (subclasses are not "
                        "accepted)")
    values = (cost.compute_us, cost.memory_us, cost.transfer_us, cost.launch_us,
              cost.bytes_moved, cost.flops)
    compute, memory, transfer, launch, moved, flops = values
    if not (type(compute) is float and type(memory) is float and type(transfer) is float
            and type(launch) is float and type(flops) is float and type(moved) is int
            and 0.0 <= compute < _INF and 0.0 <= memory < _INF and 0.0 <= transfer < _INF
            and 0.0 <= launch < _INF and 0.0 <= flops < _INF and moved >= 0):
        for name, value in zip(_FIELDS, values, strict=True):
            kind = int if name == "bytes_moved" else float
            if type(value) is not kind or not 0 <= value < _INF:
                raise ValueError(f"Cost.{name} must be a finite {kind.__name__} >= 0, "
                                 f"got {value!r}")
    copy = _new(Cost)
    for slot, value in zip(_SLOTS, values, strict=True):
        slot.__set__(copy, value)
    return copy


_INF = math.inf
_new = object.__new__
_SLOTS = tuple(_SLOT[name] for name in ("compute_us", "memory_us", "transfer_us", "launch_us",
                                          "bytes_moved", "flops"))


def element_count(shape: Iterable[int | str | None] | None) -> int:
    """Elements in a tensor of ``shape``: the one rule every estimate counts elements by.

    A 0 dim gives 0 (an empty tensor has no elements, so no work and no bytes); a symbolic or
    unknown dim (a ``str``, ``None`` or a negative int) counts as 1, and so does an unknown shape
    (``None``): an estimate made before the size is known prices one element per such dim rather
    than guessing, so a dynamic model is never priced as free nor as huge.
    """
    if shape is None:
        return 1
    count = 1
    for dim in shape:
        if isinstance(dim, int) and dim >= 0:
            count *= dim
    return count


def structural_input_bytes(
    shapes: Sequence[Sequence[int | str | None] | None],
    dtypes: Sequence[DType | str | int | None],
) -> int:
    """Bytes that tensors of these shapes and dtypes occupy, each at its dtype's storage size.

    Sub-byte types pack (int4, uint4, float4e2m1: ``ceil(n / 2)`` bytes); symbolic dims count as 1;
    an input whose shape or dtype is unknown (``None``) counts as 0.
    """
    if len(shapes) != len(dtypes):
        raise ValueError(f"{len(shapes)} shapes but {len(dtypes)} dtypes")
    total = 0
    for shape, dt in zip(shapes, dtypes, strict=True):
        if shape is None or dt is None:
            continue
        total += to_dtype(dt).storage_bytes(element_count(shape))
    return total
