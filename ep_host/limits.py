"""The tensor size limit while a session runs, for kernels that allocate from shape data.

A session with ``max_tensor_bytes`` (or ``EP_HOST_MAX_TENSOR_BYTES``) sets it for the thread
that runs; :func:`check_allocation` refuses, before numpy allocates, an output over it. The
run's time limit (``EP_HOST_RUN_TIMEOUT``) is read here too.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ep_host.errors import InputError, ResourceLimitError

MAX_TENSOR_BYTES: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "ep_host_max_tensor_bytes", default=None)
"""The limit of the run in progress in this context (``None``: none)."""

_INT64_MAX = 2**63 - 1


def check_allocation(shape: Sequence[Any], dtype: Any) -> None:
    """Raise :class:`ResourceLimitError` when an array of ``shape`` and ``dtype`` would exceed
    the running session's tensor size limit, or could not be indexed at all; call it before
    allocating an output whose size comes from input data (Expand, Tile, ConstantOfShape...)."""
    count = 1
    for d in shape:
        count *= max(int(d), 0)
    nbytes = count * np.dtype(dtype).itemsize
    limit = MAX_TENSOR_BYTES.get()
    if limit is not None and nbytes > limit:
        raise ResourceLimitError(
            f"its output would take {nbytes} bytes (shape {[int(d) for d in shape]}), over the "
            f"limit of {limit} "
            "(max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")
    if count > _INT64_MAX:
        raise ResourceLimitError(f"its output shape {[int(d) for d in shape]} has more elements "
                                 "than int64 counts")


def max_tensor_bytes_from_env() -> int | None:
    """``EP_HOST_MAX_TENSOR_BYTES`` (no limit when unset, empty or not positive)."""
    raw = os.environ.get("EP_HOST_MAX_TENSOR_BYTES", "").strip()
    try:
        value = int(raw) if raw else 0
    except ValueError as exc:
        raise ResourceLimitError(
            f"EP_HOST_MAX_TENSOR_BYTES={raw!r} is not a whole number of bytes") from exc
    return value if value > 0 else None


def run_timeout_from_env() -> float | None:
    """``EP_HOST_RUN_TIMEOUT``: seconds a run may take (no limit when unset, empty or 0)."""
    raw = os.environ.get("EP_HOST_RUN_TIMEOUT", "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError as exc:
        raise InputError(f"EP_HOST_RUN_TIMEOUT={raw!r} is not a number of seconds") from exc
    if value < 0 or value != value or value == float("inf"):
        raise InputError(f"EP_HOST_RUN_TIMEOUT={raw!r} must be a finite number of seconds >= 0")
    return value or None
