"""Whether an array's memory is held by nothing but its holder, by reference counts calibrated
once per process (they differ between Python versions): the run loop hands such a dead value to
the next kernel to write its output into (``out=``), and a run hands such an output to its
caller without a copy (:func:`hand_out`)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def _baseline_refcount() -> int:
    """What ``sys.getrefcount`` says of an array held by one local variable only."""
    probe = np.empty(1)
    return sys.getrefcount(probe)


SOLE_OWNER = _baseline_refcount()


def _view_counts(value: Any) -> tuple[int, int]:
    """``sole_view``'s reference counts, statement for statement, for the calibration below."""
    base = value.base
    return sys.getrefcount(value), sys.getrefcount(base)


def _calibrate_view() -> tuple[int, int]:
    owner = np.empty(2)
    view = owner[:1]
    del owner
    return _view_counts(view)


SOLE_VIEW = _calibrate_view()


def sole_view(value: Any) -> bool:
    """Whether ``value`` is a C-contiguous view of an array that owns its memory, and nothing
    but the caller's one variable holds either: a kernel's reshaped result (an im2col GEMM's
    output seen in the node's shape), whose memory the next kernel may write into as well as
    that of an array made fresh."""
    base = value.base
    if not _owning(base) or not value.flags.c_contiguous:
        return False
    return (sys.getrefcount(value), sys.getrefcount(base)) == SOLE_VIEW


def _owning(base: Any) -> bool:
    """Whether a view's ``base`` is an array that owns its memory and may be written."""
    return base.__class__ is np.ndarray and base.flags.owndata and base.flags.writeable


def hand_out(outputs: list[Any]) -> list[Any]:
    """The run's outputs as the caller's own: an array that something else may still hold or
    write (a kernel's persistent buffer, a constant, an input, a view of any of them, another
    output) is copied; one made fresh by this run and held by nothing else is handed over."""
    return [_output(v) for v in outputs]


def _output(value: Any) -> Any:
    if value.__class__ is np.ndarray:
        base = value.base
        if base is None:
            if value.flags.owndata and value.flags.writeable and (
                    sys.getrefcount(value) <= _SOLE[0]):
                return value
        elif (_owning(base) and sys.getrefcount(value) <= _SOLE[0]
              and sys.getrefcount(base) <= _SOLE[1]):
            return value
        return value.copy()
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, list):
        if all(v.__class__ is dict for v in value):  # ZipMap's maps, handed over as they were
            return list(value)
        return [v.copy() if isinstance(v, np.ndarray) else _output(v) for v in value]
    return value


def _counts(value: Any) -> tuple[int, int]:
    """``_output``'s reference counts, statement for statement, for the calibration below."""
    base = value.base
    if base is None:
        return sys.getrefcount(value), 0
    return sys.getrefcount(value), sys.getrefcount(base)


def _calibrate() -> tuple[int, int]:
    """The reference counts ``_output`` sees for an array only the outputs list holds, and for
    the base of a view only that view holds (they differ between Python versions)."""
    def probe(outputs: list[Any]) -> list[tuple[int, int]]:
        return [_counts(v) for v in outputs]

    owner = np.empty(2)
    outputs = [owner[:1]]
    del owner
    (view_counts,) = probe(outputs)
    (own_counts,) = probe([np.empty(1)])
    return own_counts[0], view_counts[1]


_SOLE = _calibrate()
