"""The tensor size limit while a session runs, for kernels that allocate from shape data.

A session with ``max_tensor_bytes`` (or ``EP_HOST_MAX_TENSOR_BYTES``) sets it for the thread
that runs; :func:`check_allocation` refuses, before numpy allocates, an output over it.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterable
from typing import Any

import numpy as np

from ep_host.errors import ResourceLimitError

MAX_TENSOR_BYTES: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "ep_host_max_tensor_bytes", default=None)
"""The limit of the run in progress in this context (``None``: none)."""

_INT64_MAX = 2**63 - 1


def check_allocation(shape: Iterable[Any], dtype: Any) -> None:
    """Raise :class:`ResourceLimitError` when an array of ``shape`` and ``dtype`` would exceed
    the running session's tensor size limit, or could not be indexed at all; call it before
    allocating an output whose size comes from input data (Expand, Tile, ConstantOfShape...)."""
    dims = [int(d) for d in shape]
    count = 1
    for d in dims:
        count *= max(d, 0)
    nbytes = count * np.dtype(dtype).itemsize
    limit = MAX_TENSOR_BYTES.get()
    if limit is not None and nbytes > limit:
        raise ResourceLimitError(
            f"its output would take {nbytes} bytes (shape {dims}), over the limit of {limit} "
            "(max_tensor_bytes / EP_HOST_MAX_TENSOR_BYTES)")
    if count > _INT64_MAX:
        raise ResourceLimitError(f"its output shape {dims} has more elements than int64 counts")
