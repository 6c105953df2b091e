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


def track_of(category: str, args: dict[str, Any]) -> str:
    """The trace track a span belongs on: device copies on ``copies``, a node or partition on
    its provider's track, anything else (a session's runs) on its category's."""
    if category == "copy":
        return "copies"
    provider = args.get("provider")
    return str(provider) if provider is not None else category


class Tracer:
    """Collects spans and writes them as Chrome trace events (open in Perfetto).

    ``verbosity``: 1 (default) records a span per run, per node of the model's graph and per
    device copy; ``FULL`` (2) also records the nodes that control-flow kernels run inside their
    bodies (each Loop iteration's, each If branch's), which can be many.

    Each span lies on a named track (a trace "thread"): one per provider, ``copies`` for device
    copies and ``session`` for runs, see :func:`track_of`; the same track used from a second
    thread becomes a track of its own (``cpu (thread 2)``), as concurrent runs' spans overlap.
    The written trace names the process ``process_name`` and each track. ``processes``: device
    name -> process name; spans on such a device (a cluster node's) lie in that process.
    """

    FULL = 2

    def __init__(self, verbosity: int = 1, process_name: str = "ep-host") -> None:
        self.verbosity = verbosity
        self.process_name = process_name
        self._events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self._pid = os.getpid()
        # (track, thread ident) -> (tid, the track's shown name, pid); tids start at 1
        self._tracks: dict[tuple[str, int], tuple[int, str, int]] = {}
        self.processes: dict[str, str] = {}

    def _pid_of(self, args: dict[str, Any]) -> int:
        """The trace process of a span: the device's node's, else this process's."""
        name = self.processes.get(args.get("device")) if self.processes else None
        return self._pid if name is None else self._node_pid(name)

    def _node_pid(self, name: str) -> int:
        return self._pid + 1 + sorted(set(self.processes.values())).index(name)

    def _track_id(self, track: str, pid: int) -> int:
        key = (track, threading.get_ident())
        found = self._tracks.get(key)
        if found is not None:
            return found[0]
        with self._lock:
            found = self._tracks.get(key)
            if found is None:
                same = sum(1 for name, _ in self._tracks if name == track)
                shown = track if same == 0 else f"{track} (thread {same + 1})"
                found = self._tracks[key] = (len(self._tracks) + 1, shown, pid)
        return found[0]

    @contextmanager
    def span(self, name: str, category: str = "node", **args: Any) -> Iterator[Span]:
        span = Span(name, category, args)
        pid = self._pid_of(args)
        tid = self._track_id(track_of(category, args), pid)
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
                "pid": pid,
                "tid": tid,
                "args": span.args,
            }
            with self._lock:
                self._events.append(event)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The recorded spans (complete events, ``"ph": "X"``) in the order they ended."""
        with self._lock:
            return list(self._events)

    def metadata_events(self) -> list[dict[str, Any]]:
        """The metadata events (``"ph": "M"``) naming the process and every track so far, each
        track sorted by its first use."""
        with self._lock:
            tracks = sorted(self._tracks.values())

        def meta(name: str, tid: int, args: dict[str, Any], pid: int) -> dict[str, Any]:
            return {"name": name, "cat": "__metadata", "ph": "M", "pid": pid, "tid": tid,
                    "args": args}

        events = [meta("process_name", 0, {"name": self.process_name}, self._pid)]
        for node in sorted(set(self.processes.values())):
            events.append(meta("process_name", 0, {"name": f"{self.process_name} @ {node}"},
                               self._node_pid(node)))
        for tid, shown, pid in tracks:
            events.append(meta("thread_name", tid, {"name": shown}, pid))
            events.append(meta("thread_sort_index", tid, {"sort_index": tid}, pid))
        return events

    def trace_events(self) -> list[dict[str, Any]]:
        """Everything a trace file holds: the metadata events, then the spans."""
        return self.metadata_events() + self.events

    def write(self, path: str | os.PathLike[str]) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": self.trace_events(), "displayTimeUnit": "ms"}, f,
                      default=str)
