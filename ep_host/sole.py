"""Whether an array's memory is held by nothing but the caller's one variable, by reference
counts calibrated once per process (they differ between Python versions): the run loop hands
such a dead value to the next kernel to write its output into (``out=``)."""

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
    if (base.__class__ is not np.ndarray or base.base is not None or not base.flags.owndata
            or not base.flags.writeable or not value.flags.c_contiguous):
        return False
    return (sys.getrefcount(value), sys.getrefcount(base)) == SOLE_VIEW
