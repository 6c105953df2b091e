"""The BLAS thread pool while a session runs (onnxruntime's ``intra_op_num_threads``).

numpy's BLAS starts one thread per core; on a small or shared machine two BLAS threads are
often slower than one, so sessions default to one thread there. The limit is set through
threadpoolctl when the first run starts and restored when the last concurrent run ends.
"""

from __future__ import annotations

import os
import threading
from typing import Any

SMALL_MACHINE_CPUS = 4


def default_threads() -> int:
    """1 on machines with at most ``SMALL_MACHINE_CPUS`` logical CPUs, else 0 (leave BLAS as
    it is)."""
    return 1 if (os.cpu_count() or 1) <= SMALL_MACHINE_CPUS else 0


class _Pools:
    """The process's BLAS libraries (found once, lazily) and who is limiting them now."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.libraries: list[Any] | None = None
        self.active: dict[int, int] = {}  # limit -> runs using it
        self.saved: list[int] = []  # each library's threads before the first run began
        self.current: list[int] = []  # and what they are now

    def _find(self) -> list[Any]:
        if self.libraries is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError:  # without threadpoolctl the pools stay as they are
                self.libraries = []
            else:
                self.libraries = list(
                    ThreadpoolController().select(user_api="blas").lib_controllers)
        return self.libraries

    def enter(self, limit: int) -> None:
        with self.lock:
            libraries = self._find()
            if not self.active:
                self.saved = [lib.get_num_threads() for lib in libraries]
                self.current = list(self.saved)
            self.active[limit] = self.active.get(limit, 0) + 1
            # concurrent runs asking for different limits get the largest of them
            self._set(max(self.active))

    def exit(self, limit: int) -> None:
        with self.lock:
            self.active[limit] -= 1
            if not self.active[limit]:
                del self.active[limit]
            if self.active:
                self._set(max(self.active))
            else:
                self._set(None)

    def _set(self, want: int | None) -> None:
        """Each library at ``want`` threads (``None``: at what it had before), calling it
        only where that changes something (a call costs microseconds, a run of a small model
        only tens)."""
        for i, lib in enumerate(self.libraries or []):
            n = self.saved[i] if want is None else want
            if self.current[i] != n:
                lib.set_num_threads(n)
                self.current[i] = n


POOLS = _Pools()


class BlasThreads:
    """A context manager holding the BLAS pools at ``threads`` (0: leave them alone)."""

    __slots__ = ("threads",)

    def __init__(self, threads: int):
        if threads < 0:
            raise ValueError(f"intra_op_num_threads must be >= 0, got {threads}")
        self.threads = threads

    def __enter__(self) -> BlasThreads:
        if self.threads:
            POOLS.enter(self.threads)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.threads:
            POOLS.exit(self.threads)
