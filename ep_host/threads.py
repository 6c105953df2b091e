"""The BLAS thread pool while a session runs (onnxruntime's ``intra_op_num_threads``).

numpy's BLAS starts one thread per core; on a small or shared machine two BLAS threads are
often slower than one, so sessions default to one thread there. The limit is set through
threadpoolctl when the first run holds it and restored when the last concurrent run gives it
back. A plan of one function holds it only from its first BLAS-calling step with a value over
``SINGLE_THREAD_VALUES`` values (``runloop.CompiledSteps``'s ``blas_limit``); a longer one for
its whole run.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
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
        # each library's (read its threads now, set them)
        self.calls: list[tuple[Callable[[], int], Callable[[int], Any]]] = []
        self.active: dict[int, int] = {}  # limit -> runs using it
        self.saved: list[int] = []  # each library's threads before the first run began
        self.current: list[int] = []  # and what they are now
        self.modules = -1  # how many modules were imported when the libraries were found

    def _find(self) -> None:
        self.modules = -1
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # without threadpoolctl the pools stay as they are
            self.libraries = []
        else:
            self.libraries = list(
                ThreadpoolController().select(user_api="blas").lib_controllers)
        self.calls = [_calls(lib) for lib in self.libraries]
        self.modules = len(sys.modules)

    def enter(self, limit: int) -> None:
        with self.lock:
            active = self.active
            # found again between runs once something was imported since: a library loaded
            # later (scipy's BLAS, another wheel's) would otherwise keep its own pool
            if self.libraries is None or (not active and len(sys.modules) != self.modules):
                self._find()
            if not active:
                calls = self.calls
                if len(calls) == 1:  # numpy's one BLAS (the common case), read and set here
                    read, write = calls[0]
                    n = read()
                    self.saved = [n]
                    if n != limit:
                        write(limit)
                    self.current = [limit]
                    active[limit] = 1
                    return
                saved = self.saved = [read() for read, _ in calls]
                self.current = saved.copy()
                active[limit] = 1
                for n in saved:  # pools already at the limit (the common case): nothing to set
                    if n != limit:
                        self._set(limit)
                        break
                return
            active[limit] = active.get(limit, 0) + 1
            # concurrent runs asking for different limits get the largest of them
            self._set(max(active))

    def exit(self, limit: int) -> None:
        with self.lock:
            active = self.active
            count = active[limit]
            if count == 1:
                del active[limit]
            else:
                active[limit] = count - 1
            if active:
                self._set(max(active))
            elif self.current != self.saved:  # the last run: the pools as they were
                calls = self.calls
                if len(calls) == 1:
                    calls[0][1](self.saved[0])
                    self.current = [self.saved[0]]
                else:
                    self._set(None)

    def _set(self, want: int | None) -> None:
        """Each library at ``want`` threads (``None``: at what it had before), calling it
        only where that changes something (a call costs microseconds, a run of a small model
        only tens)."""
        current = self.current
        for i, (_, write) in enumerate(self.calls):
            n = self.saved[i] if want is None else want
            if current[i] != n:
                write(n)
                current[i] = n


def _calls(lib: Any) -> tuple[Callable[[], int], Callable[[int], Any]]:
    """How to read and set ``lib``'s threads: its threadpoolctl methods, or for OpenBLAS outside
    OpenMP its own C functions, which threadpoolctl exposes (a third of the time, paid twice a
    run; the lock above already keeps this process's runs from fighting over the pool)."""
    symbol = getattr(lib, "_get_symbol", None)
    if (getattr(lib, "internal_api", None) == "openblas" and callable(symbol)
            and getattr(lib, "threading_layer", None) != "openmp"):
        try:
            read, write = symbol("openblas_get_num_threads"), symbol("openblas_set_num_threads")
        except Exception:  # a threadpoolctl without them: the public methods below
            read = write = None
        if read is not None and write is not None:
            return read, write
    return lib.get_num_threads, lib.set_num_threads


POOLS = _Pools()


def blas_limit() -> int:
    """The thread count the runs going on hold the BLAS pools at (0: none holds them)."""
    active = POOLS.active
    return max(active, default=0)


def find_blas_again() -> None:
    """Have the BLAS libraries found again before the next run that starts with none going:
    for a provider that loads one itself (the CPU EP's oneMKL, through ctypes), which no
    import shows."""
    POOLS.modules = -1


HELD = "blas pools held"
"""The key of a run's values under which a run that holds the BLAS pools lazily keeps its limit
(see ``runloop.CompiledSteps``'s ``blas_limit``)."""


def run_holder(limit: int) -> Callable[[dict[Any, Any]], None]:
    """Hold the BLAS pools at ``limit`` for the run whose values are handed in."""
    enter = POOLS.enter

    def hold(values: dict[Any, Any]) -> None:
        enter(limit)
        values[HELD] = limit

    return hold


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


# OpenBLAS runs a GEMM on one thread while M*N*K <= 65536 * 4 and a GEMV while M*N < 2304 * 4
# (its interface/gemm.c and gemv.c, GEMM_MULTITHREAD_THRESHOLD 4); no operand or result over
# 4096 values keeps both there: M*N*K = sqrt(MK * KN * MN) <= 4096 ** 1.5 = 262144
SINGLE_THREAD_VALUES = 4096


def blas_stays_single(shapes: Iterable[Sequence[Any] | None]) -> bool:
    """Whether every value of a run is known to be small enough that OpenBLAS runs its calls
    on one thread whatever its pool holds: then limiting the pool is a cost without use
    (reading and setting it twice a run takes microseconds, a small model's run only tens).
    ``shapes``: every value's shape, ``None`` or a ``None`` dim where unknown."""
    for shape in shapes:
        if shape is None:
            return False
        count = 1
        for d in shape:
            if not isinstance(d, int):
                return False
            count *= d
        if count > SINGLE_THREAD_VALUES:
            return False
    return True

