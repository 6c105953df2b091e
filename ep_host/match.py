"""A provider's answer for a node (``KernelMatch``) and the decisions that carry their reason.

A decline is a value with an actionable reason and a short machine-readable code. Inside
``supports_op`` a provider may call :func:`require` or :func:`deny`; the host turns the
:class:`Decline` they raise into ``KernelMatch.unsupported``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ep_host.cost import Cost, copy_checked


class ReasonCode(StrEnum):
    """Why a provider declined a node, as a short class for filtering and counting."""

    DTYPE = "dtype"  # an input or output type the provider does not compute
    SHAPE = "shape"  # a rank, dim or dynamic shape it cannot handle
    ATTRIBUTE = "attribute"  # an attribute value it does not implement
    OPSET = "opset"  # the op exists, but not at the version the model's opset resolves to
    OP = "op"  # the op (domain, type) is not implemented at all
    DEVICE = "device"  # the provider or its device is not available
    FAULT = "fault"  # the provider misbehaved: raised, returned garbage, an invalid cost


_CODES = {code.value: code for code in ReasonCode}


def reason_code(code: ReasonCode | str) -> ReasonCode:
    """``ReasonCode(code)``, by a dict look-up first (the enum's call costs a microsecond, and
    every decline names a code)."""
    found = _CODES.get(code) if type(code) is str or type(code) is ReasonCode else None
    return found if found is not None else ReasonCode(code)


def _format(template: str, args: tuple[Any, ...]) -> str:
    if not args:
        return template
    try:
        return template.format(*args)
    except (IndexError, KeyError, ValueError):
        return template + " " + " ".join(map(str, args))


class Decline(Exception):  # noqa: N818 (it is a decision, not an error)
    """Raised inside ``supports_op`` to decline a node; the reason is formatted when read."""

    def __init__(self, template: str, *args: Any, code: ReasonCode | str = ReasonCode.OP):
        super().__init__(template)
        self.template = template
        self.args_ = args
        self.code = reason_code(code)

    @property
    def reason(self) -> str:
        return _format(self.template, self.args_)

    def __str__(self) -> str:
        return self.reason


def require(condition: Any, template: str, *args: Any, code: ReasonCode | str = "op") -> None:
    """Decline unless ``condition`` holds. ``template.format(*args)`` runs only on failure."""
    if not condition:
        raise Decline(template, *args, code=code)


def deny(template: str, *args: Any, code: ReasonCode | str = "op") -> None:
    """Always decline with this reason."""
    raise Decline(template, *args, code=code)


@dataclass(frozen=True, slots=True)
class KernelMatch:
    """A provider's answer for one node: supported at a cost, or unsupported with a reason.

    Build with :meth:`supported` or :meth:`unsupported`, not the constructor.
    ``required_input_layouts`` (one entry per input) and ``output_layouts`` (one per output) name
    the memory layout the kernel reads or writes, from :data:`ep_host.layouts.LAYOUTS`
    (``"NHWC"``); ``None``, a missing entry or a layout of the model's own (``"NCHW"``) mean the
    model's layout. The host converts between layouts where producer and consumer differ and
    prices each conversion like a device copy. ``host_inputs`` are input indices whose values must
    be on the host (a Reshape's shape), so placement can price the copies.
    """

    is_supported: bool
    cost: Cost | None = None
    reason: str = ""
    code: ReasonCode | None = None
    required_input_layouts: tuple[str | None, ...] | None = None
    output_layouts: tuple[str | None, ...] = ()
    host_inputs: tuple[int, ...] = ()

    @classmethod
    def supported(
        cls,
        cost: Cost,
        required_input_layouts: Sequence[str | None] | None = None,
        output_layouts: Sequence[str | None] = (),
        host_inputs: Sequence[int] = (),
    ) -> KernelMatch:
        if not isinstance(cost, Cost):
            raise TypeError(f"KernelMatch.supported needs a Cost, got {type(cost).__name__}")
        return cls(
            True,
            cost=cost,
            required_input_layouts=None
            if required_input_layouts is None
            else tuple(required_input_layouts),
            output_layouts=tuple(output_layouts),
            host_inputs=tuple(int(i) for i in host_inputs),
        )

    @classmethod
    def unsupported(cls, reason: str, code: ReasonCode | str = ReasonCode.OP) -> KernelMatch:
        if not reason:
            raise ValueError("an unsupported KernelMatch needs a reason")
        return cls(False, reason=str(reason), code=reason_code(code))

    def copy_checked(self, input_count: int) -> KernelMatch:
        """A fresh copy of this answer, checked, for a node whose op takes at most
        ``input_count`` inputs (optional ones the node omits included): what
        the host keeps is what it validated, whatever the provider does to its own object
        later. Only ``KernelMatch`` itself is accepted; ``host_inputs`` must be distinct input
        indices in range; layouts are strings or ``None``. A violation raises ``ValueError``
        (or ``TypeError``) whose message completes "claimed the node with ..." (or "declined
        with ...")."""
        if type(self) is not KernelMatch:
            raise TypeError(f"the answer is a {type(self).__name__}, not a KernelMatch "
                            "(subclasses are not accepted)")
        supported = self.is_supported
        if supported is False:
            reason, code = self.reason, self.code
            if type(reason) is not str or not reason:
                raise ValueError(f"reason {_shown(reason)}, which must be a non-empty str")
            if type(code) is not ReasonCode:
                raise ValueError(f"code {_shown(code)}, which must be a ReasonCode")
            return _new_match(False, None, reason, code, None, (), ())
        if supported is not True:
            raise ValueError(f"is_supported {_shown(supported)}, which must be True or False")
        try:
            cost = copy_checked(self.cost)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"an invalid cost: {exc}") from exc
        host_inputs = self.host_inputs
        if host_inputs:
            if type(host_inputs) is not tuple or any(
                    type(i) is not int or not 0 <= i < input_count for i in host_inputs):
                raise ValueError(f"host_inputs {_shown(host_inputs)}, which must be input indices "
                                 f"of the node's op (ints in range(0, {input_count}))")
            if len(set(host_inputs)) != len(host_inputs):
                raise ValueError(f"host_inputs {_shown(host_inputs)}, which lists an input twice")
        required, outputs = self.required_input_layouts, self.output_layouts
        if required is not None:
            _check_layouts("required_input_layouts", required)
        if outputs:
            _check_layouts("output_layouts", outputs)
        return _new_match(True, cost, "", None, required, outputs, host_inputs)

    def to_dict(self) -> dict[str, Any]:
        if self.is_supported:
            out: dict[str, Any] = {"supported": True, "cost": self.cost.to_dict()}
            if self.host_inputs:
                out["host_inputs"] = list(self.host_inputs)
            if self.required_input_layouts or self.output_layouts:
                out["layouts"] = {"inputs": list(self.required_input_layouts or ()),
                                  "outputs": list(self.output_layouts)}
            return out
        return {"supported": False, "reason": self.reason, "code": str(self.code)}


_MATCH_SLOTS = tuple(getattr(KernelMatch, name) for name in (
    "is_supported", "cost", "reason", "code", "required_input_layouts", "output_layouts",
    "host_inputs"))
# each slot's setter, called directly (a loop over the slots costs twice as much)
(_set_supported, _set_cost, _set_reason, _set_code, _set_required, _set_outputs,
 _set_host_inputs) = (slot.__set__ for slot in _MATCH_SLOTS)
_new_object = object.__new__


def _new_match(is_supported: bool, cost: Cost | None, reason: str, code: ReasonCode | None,
               required: tuple[str | None, ...] | None, outputs: tuple[str | None, ...],
               host_inputs: tuple[int, ...]) -> KernelMatch:
    match = _new_object(KernelMatch)
    _set_supported(match, is_supported)
    _set_cost(match, cost)
    _set_reason(match, reason)
    _set_code(match, code)
    _set_required(match, required)
    _set_outputs(match, outputs)
    _set_host_inputs(match, host_inputs)
    return match


def new_decline(reason: str, code: ReasonCode) -> KernelMatch:
    """``KernelMatch.unsupported(reason, code)`` for a non-empty ``str`` reason and a
    ``ReasonCode``, which the caller has checked: the capability walk's many declines."""
    return _new_match(False, None, reason, code, None, (), ())


_PLAIN = (str, int, float, bool, type(None))


def _shown(value: Any) -> str:
    """``repr`` of a plain value (or a tuple of them), else its type's name: showing a
    provider's own object must not run its code."""
    kind = type(value)
    if kind in _PLAIN or kind is ReasonCode or (
            kind is tuple and all(type(v) in _PLAIN for v in value)):
        text = repr(value)
        return text if len(text) <= 200 else text[:197] + "..."
    return f"a {kind.__name__}"


def _check_layouts(field_name: str, layouts: Any) -> None:
    if type(layouts) is not tuple or any(
            layout is not None and type(layout) is not str for layout in layouts):
        raise ValueError(f"{field_name} {_shown(layouts)}, which must be a tuple of str or None")


@dataclass(frozen=True, slots=True)
class CaptureSupport:
    """Whether a kernel can be recorded into a device graph (a CUDA graph), and if not, why."""

    capturable: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> CaptureSupport:
        return cls(True)

    @classmethod
    def no(cls, template: str, *args: Any) -> CaptureSupport:
        return cls(False, _format(template, args))


@dataclass(frozen=True, slots=True)
class KernelVariantSelection:
    """The implementation a kernel chose for a call (``"im2col_gemm"``) and why.

    ``stage`` names a sub-decision (``"pack"``); it is recorded as ``kernel_variant.<stage>``
    beside, never over, the primary choice. The reason is formatted only when read.
    """

    variant: str
    template: str = ""
    args: tuple[Any, ...] = ()
    stage: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def reason(self) -> str:
        return _format(self.template, self.args)

    @property
    def key(self) -> str:
        return "kernel_variant" if self.stage is None else f"kernel_variant.{self.stage}"
