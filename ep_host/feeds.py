"""Checking a run's feeds against the model's inputs: names, dtypes, ranks, dims (symbolic dims
bound consistently), the tensor size limit; arrays made read-only, C-ordered host arrays.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ep_host.errors import InputError, ResourceLimitError
from ep_host.loading import Model
from ep_host.provider import Device
from ep_host.runloop import CURRENT_RUN, PlanRun, read_only
from ep_host.threads import BlasThreads


def _plain_inputs(inputs: Sequence[Any]) -> tuple[tuple[str, Any, tuple[Any, ...]], ...] | None:
    """(name, numpy dtype, shape) of each input when every one is a tensor of known dtype and
    rank whose dims are numbers, or open (unnamed, or a name no other dim has: a
    scikit-learn export's batch); feeds of such arrays need no other check. Else ``None``."""
    out = []
    names: list[str] = []
    for v in inputs:
        if v.kind != "tensor" or v.dtype is None or v.dtype.numpy is None or v.shape is None:
            return None
        names.extend(d for d in v.shape if isinstance(d, str) and d)
        out.append((v.name, v.dtype.numpy, tuple(v.shape)))
    return tuple(out) if len(names) == len(set(names)) else None


def fits(shape: tuple[int, ...], want: tuple[Any, ...]) -> bool:
    """Whether an array's ``shape`` has the rank and the numbered dims of ``want``."""
    if shape == want:
        return True
    if len(shape) != len(want):
        return False
    return all(w == g or not isinstance(w, int) for w, g in zip(want, shape, strict=True))


class FeedChecker:
    """The checks of one session's feeds; inputs that are all plain tensors (known dtype and
    rank, dims numbers or open: ``_plain_inputs``) take a short path when the feeds are exactly
    such arrays."""

    def __init__(self, model: Model, max_tensor_bytes: int | None):
        self.model = model
        self.max_tensor_bytes = max_tensor_bytes
        self.plain = _plain_inputs(model.graph.inputs)

    def check(self, feed: Mapping[str, Any],
              on_device: Mapping[str, Device] | None = None) -> dict[str, Any]:
        """The feeds checked against the model's inputs and made read-only host arrays; those
        named in ``on_device`` are arrays on that device, checked and passed as they are."""
        if not on_device and self.max_tensor_bytes is None:
            fast = self.plain
            if fast is not None and len(feed) == len(fast):
                out = {}
                for name, dtype, shape in fast:  # what the checks below would let through
                    array = feed.get(name)
                    if (array.__class__ is not np.ndarray or array.dtype != dtype
                            or not fits(array.shape, shape) or not array.flags.c_contiguous):
                        break
                    out[name] = read_only(array)
                else:
                    return out
        on_device = on_device or {}
        label = self.model.label
        declared = {v.name: v for v in self.model.graph.inputs}
        unknown = [n for n in feed if n not in declared]
        if unknown:
            initializers = set(self.model.graph.initializer_inputs)
            hint = [n for n in unknown if n in initializers]
            extra = (f" ({', '.join(hint)} is an initializer and cannot be fed)" if hint else "")
            raise InputError(
                f"{label}: unknown input(s) {', '.join(map(repr, unknown))}{extra}; "
                f"the model's inputs are {', '.join(map(repr, declared))}"
            )
        missing = [n for n in declared if n not in feed]
        if missing:
            raise InputError(f"{label}: missing input(s) {', '.join(map(repr, missing))}")
        bound: dict[str, tuple[int, str]] = {}
        out = {}
        for name, view in declared.items():
            array = feed[name]
            if view.kind in ("sequence", "optional", "map"):
                out[name] = array
                continue
            if array is None:
                raise InputError(f"{label}: input {name!r} is None")
            device = on_device.get(name)
            if device is None:
                if not isinstance(array, np.ndarray):
                    array = np.asarray(array)
                if not array.dtype.isnative:
                    array = array.astype(array.dtype.newbyteorder("="))
                if not array.flags.c_contiguous:
                    array = np.ascontiguousarray(array)  # kernels may assume C order
            limit = self.max_tensor_bytes
            if limit is not None and array.nbytes > limit:
                raise ResourceLimitError(
                    f"{label}: input {name!r} takes {array.nbytes} bytes, over the limit of "
                    f"{limit} (max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")
            expected = view.dtype.numpy if view.dtype is not None else None
            if expected is not None and array.dtype != expected:
                raise InputError(
                    f"{label}: input {name!r} must be {view.dtype.name}, got {array.dtype} "
                    "(ep-host does not cast inputs)"
                )
            if view.shape is not None:
                if array.ndim != len(view.shape):
                    raise InputError(
                        f"{label}: input {name!r} must have rank {len(view.shape)} "
                        f"(shape {list(view.shape)}), got shape {list(array.shape)}"
                    )
                for axis, (want, got) in enumerate(zip(view.shape, array.shape, strict=True)):
                    if isinstance(want, int) and want != got:
                        raise InputError(
                            f"{label}: input {name!r} dim {axis} must be {want} "
                            f"(shape {list(view.shape)}), got shape {list(array.shape)}"
                        )
                    if isinstance(want, str) and want:
                        prev = bound.setdefault(want, (got, name))
                        if prev[0] != got:
                            raise InputError(
                                f"{label}: dim {want!r} is {prev[0]} in input {prev[1]!r} "
                                f"but {got} in input {name!r}"
                            )
            out[name] = read_only(array) if device is None else array
        return out


def plain_runner(checker: FeedChecker, runner: PlanRun, threads: BlasThreads,
                 hand_out: Callable[[list[Any]], list[Any]],
                 ) -> Callable[[Any], list[Any] | None] | None:
    """A plain run's whole path in one function, for feeds that take the short check: each
    made read-only and handed to the plan's compiled function (under ``threads`` when it
    limits the pool), its outputs through ``hand_out``. The function returns ``None``, having
    run nothing, for feeds the short check does not take (the full path then checks them and
    says what is wrong) and inside a cancellable run. ``None`` where no run can take it: inputs
    not all plain (``_plain_inputs``), a size limit, a plan with arenas or outer values.

    The layers a run otherwise passes through (the checker, the plan's runner, the thread
    limit) cost a small model's run several microseconds (the corpus's one-row scikit-learn
    exports, 15-25 us in all, measured interleaved with onnxruntime's runs)."""
    plan = runner.plan
    if (checker.plain is None or checker.max_tensor_bytes is not None or plan.outer_slots
            or plan.arenas):
        return None
    inputs = tuple((name, plan.input_slots[name], dtype, shape)
                   for name, dtype, shape in checker.plain)
    count = len(inputs)
    compiled = runner.plain
    limited = threads if threads.threads else None
    in_run = CURRENT_RUN.get
    nd = np.ndarray

    def run(feed: Any) -> list[Any] | None:
        if feed.__class__ is not dict or len(feed) != count or in_run() is not None:
            return None
        values = {}
        for name, slot, dtype, shape in inputs:
            array = feed.get(name)
            if (array.__class__ is not nd or array.dtype != dtype
                    or (array.shape != shape and not fits(array.shape, shape))
                    or not array.flags.c_contiguous):
                return None
            values[slot] = read_only(array)
        if limited is None:
            return hand_out(compiled(values))
        with limited:
            outputs = compiled(values)
        return hand_out(outputs)

    return run
