"""Memory layouts a kernel may require or produce (``"NHWC"``), the one table of names the host
knows, how a tensor's data and shape convert between them, and what a conversion costs.

A value without a layout (``None``) is in the model's own layout, channels first as ONNX defines
it; every graph input and output stays there, and the host converts where a kernel asks for more.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Layout:
    """A layout of rank ``rank`` tensors: ``order[i]`` is the axis of the model's layout stored
    as axis ``i`` (``"NHWC"``: ``(0, 2, 3, 1)``). ``is_model``: the model's own layout."""

    name: str
    rank: int
    order: tuple[int, ...]

    @property
    def is_model(self) -> bool:
        return self.order == tuple(range(self.rank))


LAYOUTS: dict[str, Layout] = {layout.name: layout for layout in (
    Layout("NCW", 3, (0, 1, 2)),
    Layout("NWC", 3, (0, 2, 1)),
    Layout("NCHW", 4, (0, 1, 2, 3)),
    Layout("NHWC", 4, (0, 2, 3, 1)),
    Layout("NCDHW", 5, (0, 1, 2, 3, 4)),
    Layout("NDHWC", 5, (0, 2, 3, 4, 1)),
)}
"""Every layout name the host knows. ``NCW``, ``NCHW`` and ``NCDHW`` are the model's layout (an
entry naming one is the same as ``None``); the others put channels last."""

KNOWN = ", ".join(LAYOUTS)

# What a layout conversion is priced at: a transpose reads and writes every byte once, with
# strided reads, on the consumer's device (device copies are priced from the link the same way).
CONVERSION_LATENCY_US = 2.0
CONVERSION_GBPS = 4.0


def conversion_cost_us(nbytes: int) -> float:
    """Estimated time to convert a tensor of ``nbytes`` between two layouts."""
    return CONVERSION_LATENCY_US + 2 * nbytes / (CONVERSION_GBPS * 1e3)


def canonical(name: str | None) -> str | None:
    """``name`` as placement compares it: ``None`` for the model's layout, else the name."""
    if name is None:
        return None
    layout = LAYOUTS[name]
    return None if layout.is_model else name


def shown(name: str | None, rank: int | None = None) -> str:
    """A layout as reports print it: the model's layout by its name at ``rank`` (``"NCHW"``)."""
    if name is not None:
        return name
    for layout in LAYOUTS.values():
        if layout.rank == rank and layout.is_model:
            return layout.name
    return "model"


def converted_shape(shape: Sequence[Any] | None, name: str | None) -> tuple[Any, ...] | None:
    """``shape`` (of the model's layout) as a tensor in layout ``name`` has it."""
    if shape is None or name is None:
        return None if shape is None else tuple(shape)
    return tuple(shape[axis] for axis in LAYOUTS[name].order)


def conversion_axes(source: str | None, destination: str | None, rank: int) -> tuple[int, ...]:
    """The axes ``transpose`` takes to turn data in layout ``source`` into layout
    ``destination`` (``None``: the model's layout of rank ``rank``)."""
    src = LAYOUTS[source].order if source is not None else tuple(range(rank))
    dst = LAYOUTS[destination].order if destination is not None else tuple(range(rank))
    position = {axis: i for i, axis in enumerate(src)}
    return tuple(position[axis] for axis in dst)


def layout_fault(field_name: str, index: int, name: Any, value: Any, what: str) -> str:
    """Why layout ``name``, named for ``what`` (``"input 'X'"``), is the provider's fault; ``""``
    when the host can honour it. ``value``: the node's value there (a ``ValueView`` or ``None``)."""
    if name is None:
        return ""
    where = f"{field_name}[{index}] {name!r} for {what}"
    layout = LAYOUTS.get(name)
    if layout is None:
        return f"{where}: not a layout the host knows ({KNOWN})"
    if value is None:
        return f"{where}: the node has no such value"
    if value.kind != "tensor" or value.rank is None:
        return f"{where}: its rank is not known, and {name} is for rank {layout.rank}"
    if value.rank != layout.rank:
        return f"{where}: it has rank {value.rank}, and {name} is for rank {layout.rank}"
    return ""


def check_match_layouts(required: Sequence[str | None] | None, produced: Sequence[str | None],
                        node: Any) -> str:
    """Why a claim's layouts are a fault of the provider for ``node`` (an unknown name, a rank
    it does not fit, more entries than the node has values); ``""`` when they are sound."""
    for field_name, layouts, values, kind in (
            ("required_input_layouts", required or (), node.inputs, "input"),
            ("output_layouts", produced, node.outputs, "output")):
        for i, name in enumerate(layouts):
            value = values[i] if i < len(values) else None
            what = f"{kind} {i}" if value is None else f"{kind} {value.name!r}"
            fault = layout_fault(field_name, i, name, value, what)
            if fault:
                return fault
    return ""


def has_layouts(match: Any) -> bool:
    """Whether a claim asks for or produces anything but the model's layout."""
    return any(canonical(name) is not None
               for name in (*(match.required_input_layouts or ()), *match.output_layouts))


def input_layout(match: Any, index: int) -> str | None:
    """The layout a claim needs input ``index`` in (``None``: the model's)."""
    required = match.required_input_layouts
    if required is None or index >= len(required):
        return None
    return canonical(required[index])


def output_layout(match: Any, index: int) -> str | None:
    """The layout a claim produces output ``index`` in (``None``: the model's)."""
    produced = match.output_layouts
    return canonical(produced[index]) if index < len(produced) else None
