"""Trace spans in the Chrome trace-event format, and the kernel-variant records inside them.

Recording is free when no span is active: :func:`record_kernel_variant` checks one context
variable and returns, so a kernel's reason is formatted only while someone is tracing.
"""

from __future__ import annotations

import contextvars
import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ep_host.match import KernelVariantSelection

_active_span: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "ep_host_active_span", default=None
)


class Span:
    """One traced interval: a name, a category and its arguments."""

    __slots__ = ("name", "category", "args", "start_us", "duration_us")

    def __init__(self, name: str, category: str, args: dict[str, Any]):
        self.name = name
        self.category = category
        self.args = args
        self.start_us = 0.0
        self.duration_us = 0.0

    def record(self, selection: KernelVariantSelection) -> None:
        """Store a variant under its key: ``kernel_variant`` for the primary choice,
        ``kernel_variant.<stage>`` for a staged one, so neither overwrites the other."""
        self.args[selection.key] = selection.variant
        self.args[selection.key + ".reason"] = selection.reason


def active_span() -> Span | None:
    return _active_span.get()


def record_kernel_variant(
    variant: str | KernelVariantSelection, template: str = "", *args: Any, stage: str | None = None
) -> None:
    """Record the variant a kernel chose on the active span; does nothing when none is active.

    ``template.format(*args)`` runs only when a span is active.
    """
    span = _active_span.get()
    if span is None:
        return
    if not isinstance(variant, KernelVariantSelection):
        variant = KernelVariantSelection(variant, template, args, stage)
    span.record(variant)


class Tracer:
    """Collects spans and writes them as Chrome trace events (open in Perfetto).

    ``verbosity``: 1 (default) records a span per run, per node of the model's graph and per
    device copy; ``FULL`` (2) also records the nodes that control-flow kernels run inside their
    bodies (each Loop iteration's, each If branch's), which can be many.
    """

    FULL = 2

    def __init__(self, verbosity: int = 1) -> None:
        self.verbosity = verbosity
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()

    @contextmanager
    def span(self, name: str, category: str = "node", **args: Any) -> Iterator[Span]:
        span = Span(name, category, args)
        token = _active_span.set(span)
        span.start_us = (time.perf_counter() - self._t0) * 1e6
        try:
            yield span
        finally:
            span.duration_us = (time.perf_counter() - self._t0) * 1e6 - span.start_us
            _active_span.reset(token)
            event = {
                "name": span.name,
                "cat": span.category,
                "ph": "X",
                "ts": span.start_us,
                "dur": span.duration_us,
                "pid": os.getpid(),
                "tid": threading.get_ident(),
                "args": span.args,
            }
            with self._lock:
                self._events.append(event)

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def write(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": self.events, "displayTimeUnit": "ms"}, f, default=str)
