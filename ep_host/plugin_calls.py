"""What the host keeps around every call into plugin code.

A plugin's ``BaseException`` (``SystemExit``, ``GeneratorExit``, a ``KeyboardInterrupt`` the user
did not send) is that provider's fault; only a real SIGINT is the user's ^C. The marker names the
hook call in progress in memory a supervising parent reads if the process dies in plugin code.
"""

from __future__ import annotations

import mmap
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

MARKER_BYTES = 256  # byte 0: length of the record that follows (0: no plugin call running)


class SigintRecorder:
    """A SIGINT handler that behaves like Python's own (it raises ``KeyboardInterrupt``) and
    counts the signals that came, so a ``KeyboardInterrupt`` raised by plugin code can be told
    from the user's ^C."""

    def __init__(self) -> None:
        self.received = 0

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        self.received += 1
        raise KeyboardInterrupt


sigint = SigintRecorder()


def record_sigint() -> None:
    """Install :data:`sigint` as the SIGINT handler where Python's default one is installed and
    this is the main thread (a handler the application set is left alone)."""
    if threading.current_thread() is not threading.main_thread():
        return
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, sigint)
    except (ValueError, OSError):  # an embedded interpreter without signals
        return


def is_user_interrupt(exc: BaseException, since: int = 0) -> bool:
    """Whether ``exc``, raised while plugin code ran, is the user's ^C rather than the plugin's.

    A ``KeyboardInterrupt`` is the user's only on the main thread (signals arrive there) and,
    where :data:`sigint` is the installed handler, only if a SIGINT came after ``since`` (the
    handler's ``received`` count when the plugin call began). With another handler installed
    the host cannot tell, and a real ^C must never be swallowed: then it is the user's. Where
    SIGINT is ignored (a job started in the background), no ^C can arrive: it is the plugin's.
    """
    if not isinstance(exc, KeyboardInterrupt):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    try:
        handler = signal.getsignal(signal.SIGINT)
    except (ValueError, OSError):
        return True
    if handler is signal.SIG_IGN:  # ^C is ignored here (a background job): no user sent this
        return False
    return sigint.received > since if handler is sigint else True


class HookMarker:
    """The plugin call in progress (provider, hook, node), kept in shared memory.

    Writing it is one slice assignment and one byte; no system call. The record is
    ``provider NUL hook NUL node`` in UTF-8, cut to ``MARKER_BYTES - 1`` bytes. With ``path``
    (a file of ``MARKER_BYTES`` bytes) the memory is that file's, which another process on the
    machine reads: an isolated provider's worker writes it, the host reads it.
    """

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            self.memory = mmap.mmap(-1, MARKER_BYTES)  # anonymous, shared with forked children
        else:
            with open(path, "r+b") as f:
                self.memory = mmap.mmap(f.fileno(), MARKER_BYTES)

    def enter(self, head: bytes, node: str = "") -> None:
        try:
            record = head + node.encode()
        except UnicodeEncodeError:  # a lone surrogate
            record = head + node.encode("utf-8", "replace")
        n = len(record)
        if n >= MARKER_BYTES:
            n = MARKER_BYTES - 1
            record = record[:n]
        memory = self.memory
        memory[1:1 + n] = record
        memory[0] = n

    def leave(self) -> None:
        self.memory[0] = 0

    def read(self) -> tuple[str, str, str] | None:
        """``(provider, hook, node)`` of the call running now, or ``None``."""
        n = self.memory[0]
        if not n:
            return None
        parts = self.memory[1:1 + n].decode("utf-8", "replace").split("\0", 2)
        provider, hook, node = (parts + ["", "", ""])[:3]
        return provider, hook, node


def marker_head(provider: str, hook: str) -> bytes:
    """The start of a marker record for calls of ``hook`` on ``provider``; the node follows."""
    return f"{provider}\0{hook}\0".encode("utf-8", "replace")


marker: HookMarker | None = None
"""Set in a process a supervising parent watches (the ``ep-host`` command); ``None`` elsewhere,
and then no marker is written."""


@contextmanager
def marked(head: bytes, node: str = "") -> Iterator[None]:
    """The marker names this call while the block runs (for calls that are not hot)."""
    current = marker
    if current is None:
        yield
        return
    current.enter(head, node)
    try:
        yield
    finally:
        current.leave()


class provider_fault:
    """Whatever the block raises, SystemExit included but the user's Ctrl-C and ``passes``
    not, as a ``KernelError``: "``label``: provider ``provider`` failed to ``doing``: what it
    raised" (``doing`` names the node: "prepare the kernel for node 'conv1'"). A class rather
    than a generator: a plan enters two per node, and a generator's context manager costs
    several times as much."""

    __slots__ = ("label", "provider", "doing", "passes", "since")

    def __init__(self, label: str, provider: str, doing: str,
                 passes: tuple[type[BaseException], ...] = ()):
        self.label, self.provider, self.doing, self.passes = label, provider, doing, passes
        self.since = sigint.received

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: Any, tb: Any) -> None:
        if kind is None or issubclass(kind, self.passes) or is_user_interrupt(exc, self.since):
            return  # a kernel's SystemExit is its provider's fault too: only ^C passes
        from ep_host.errors import KernelError, describe_exception

        raise KernelError(f"{self.label}: provider {self.provider!r} failed to {self.doing}: "
                          f"{describe_exception(exc)}") from exc
