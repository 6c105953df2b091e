"""numba for the CPU EP's compiled kernels: each built once ahead of time into an extension
module that later processes import without numba (:mod:`ep_host_cpu.aot`), else numba imported
on first use (never at ``import ep_host`` or ``import ep_host_cpu``) with compiled functions
cached on disk under the user cache directory (``NUMBA_CACHE_DIR`` wins when set), and
``EP_HOST_NUMBA=0`` keeping every kernel on its numpy path.

Measured here (numba 0.68.1; a 2-core machine, quiet / under a load of 8): ``import numba``
0.19 / 0.55-0.85 s; compiling the grouped convolution for float32 the first time 2.6 / 6-6.8 s
(float64, compiled only when a float64 model asks, 4.7 s more under load); reading the float32
one back from the disk cache in a fresh process, numba's code generator starting with it,
0.47 / 0.9-1.3 s (float64 then 0.02 s). A process pays this once, when it first makes a Conv
that runs on the compiled loops (at session creation, see ``conv.prepare_conv``); importing a
kernel built ahead of time takes 0.04 s and no numba.

Kernels divide by numpy's rules (``error_model="numpy"``: x / 0 is inf, no exception): numba's
default checks every division for zero, which keeps a loop with a division from being
vectorized (the compiled Sigmoid ran 1.8 against 0.73 ns an element).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
import warnings
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

NUMBA_SWITCH = "EP_HOST_NUMBA"
FLOAT32 = np.dtype(np.float32)
# numba's disk cache does not key compiled code by these options: a change of them needs a new
# ``CACHE_TAG`` (the cache's folder), or an old cache compiled under other options is read back
OPTIONS: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy",
                           "fastmath": {"contract"}}
CACHE_TAG = "numpy-errors"


def numba_wanted() -> bool:
    """Whether the compiled kernels are used: numba installed and not switched off by
    ``EP_HOST_NUMBA=0``. Finding the package does not import it.

    Kernels ask on every run (the switch may change between runs), so the variable is read
    from ``os.environ``'s own dict, as it keeps it, and each value it takes is judged once:
    ``os.environ.get`` of an unset variable took 0.86 us a call (two calls, 2 of a
    scikit-learn logistic regression's 28 us run), this 0.15."""
    data = getattr(os.environ, "_data", None)
    value = (data.get(_SWITCH_KEY) if type(data) is dict and _SWITCH_KEY is not None
             else os.environ.get(NUMBA_SWITCH))  # not CPython's POSIX environ: as it says
    found = _JUDGED.get(value)
    if found is None:
        found = _JUDGED[value] = _judged(value)
    return found


try:  # how ``os.environ`` keys its dict (bytes on POSIX)
    _SWITCH_KEY: Any = os.environ.encodekey(NUMBA_SWITCH)  # type: ignore[attr-defined]
except AttributeError:
    _SWITCH_KEY = None
_JUDGED: dict[Any, bool] = {}  # a value of the switch (None: unset) -> whether numba is used


def _judged(value: str | bytes | None) -> bool:
    """Whether the compiled kernels are used with the switch at ``value`` (``None``: unset)."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if value is not None and value.strip() in ("0", "false", "no", "off"):
        return False
    return _numba_installed()


@cache
def _numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None


def numba_cache_dir() -> str:
    """Where compiled kernels are kept: ``NUMBA_CACHE_DIR`` when set, else ``numba/CACHE_TAG``
    under the user's ep-host cache directory. Not under ``EP_HOST_CACHE_DIR``: numba keys what
    it keeps by the source file, its timestamp and the CPU, so one copy serves every cache
    directory (tests give each session a fresh one, and would otherwise compile every time)."""
    import platformdirs

    return os.environ.get("NUMBA_CACHE_DIR") or str(
        Path(platformdirs.user_cache_dir("ep-host")) / "numba" / CACHE_TAG)


@cache
def numba_module() -> Any:
    """numba, imported once with its on-disk cache in :func:`numba_cache_dir`; ``None`` when it
    cannot be imported."""
    if "NUMBA_CACHE_DIR" not in os.environ:
        os.environ["NUMBA_CACHE_DIR"] = numba_cache_dir()
    try:
        import numba
    except Exception as exc:  # absent, or broken (a numpy or llvmlite it does not support)
        warnings.warn(f"CPU EP: numba cannot be imported ({type(exc).__name__}: {exc}); "
                      "convolutions and Sigmoid run on numpy", RuntimeWarning, stacklevel=2)
        return None
    if not numba.config.CACHE_DIR:  # imported before us, without a cache directory
        numba.config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]
    return numba


def _with_globals(func: Any, names: dict[str, Any]) -> Any:
    """``func`` reading its globals from ``names``."""
    copy = types.FunctionType(func.__code__, names, func.__name__, func.__defaults__,
                              func.__closure__)
    copy.__qualname__, copy.__module__ = func.__qualname__, func.__module__
    return copy


def linked(numba: Any, py_func: Any, helpers: tuple[Any, ...], options: dict[str, Any]) -> Any:
    """``py_func`` reading each of ``helpers`` from its globals as one compiled with
    ``options`` (the helpers reading each other so too); ``py_func`` itself when none."""
    if not helpers:
        return py_func
    spaces = [dict(f.__globals__) for f in (py_func, *helpers)]
    jitted = {h.__name__: numba.njit(**options)(_with_globals(h, names))
              for h, names in zip(helpers, spaces[1:], strict=True)}
    for names in spaces:  # numba reads a helper's globals when it compiles, after this
        names.update(jitted)
    return _with_globals(py_func, spaces[0])


def _named(func: Any) -> tuple[str, str] | None:
    """``(module, name)`` that a fresh process imports ``func`` by, or ``None``."""
    module = sys.modules.get(func.__module__)
    if module is None or getattr(module, func.__name__, None) is not func:
        return None
    return func.__module__, func.__name__


_LOADED: list[str] = []  # kernels loaded in this process, built ahead of time or by the JIT


def compiled_in_use() -> bool:
    """Whether this process runs a compiled kernel already (loaded from its built module, or
    numba imported)."""
    return bool(_LOADED) or "numba" in sys.modules


def _spec(py_func: Any, signature: Callable[..., Any], helpers: tuple[Any, ...],
          args: tuple[str, ...], slp: bool = False) -> Any:
    """The kernel's :class:`ep_host_cpu.aot.KernelSpec`; ``None`` where it is not built ahead
    of time (switched off, or a function the child process cannot import by name)."""
    from ep_host_cpu import aot

    if not aot.aot_wanted():
        return None
    names = [_named(f) for f in (py_func, signature, *helpers)]
    if any(n is None for n in names):
        return None
    return aot.KernelSpec(names[0], tuple(names[2:]), names[1], args,  # type: ignore[arg-type]
                          slp)


def _ahead_of_time(py_func: Any, signature: Callable[..., Any], helpers: tuple[Any, ...],
                   args: tuple[str, ...], slp: bool = False) -> Any:
    """The kernel from its module built ahead of time (:mod:`ep_host_cpu.aot`), or ``None``."""
    from ep_host_cpu import aot

    spec = _spec(py_func, signature, helpers, args, slp)
    return None if spec is None else aot.load(spec, numba_cache_dir())


def built_ahead(py_func: Any, signature: Callable[..., Any], helpers: tuple[Any, ...] = ()
                ) -> bool:
    """Whether the kernel's module built ahead of time is on disk, so that compiling it costs
    only the module's import (no build, no numba)."""
    from ep_host_cpu import aot

    spec = _spec(py_func, signature, helpers, ())
    return spec is not None and aot.is_built(spec, numba_cache_dir())


def compiled(py_func: Any, signature: Callable[..., Any], helpers: tuple[Any, ...] = (),
             args: tuple[str, ...] = (), slp: bool = False) -> Any:
    """``py_func`` compiled by numba for ``signature(numba, *args)`` (one signature or a list of
    them; ``args`` strings), one thread, floating-point contraction (FMA) allowed and no other
    fast-math, numpy's division rules (:data:`OPTIONS`): imported from its module built ahead
    of time (:mod:`ep_host_cpu.aot`, built first when absent), else compiled in this process
    (eagerly: read from numba's disk cache when an earlier process compiled it); ``None``
    (numpy's path) when numba is not wanted, cannot be imported or cannot compile it, the last
    two with a warning. ``helpers``: functions that ``py_func`` and the helpers themselves call
    by name, compiled with it (each a loop the compiler vectorizes better on its own, or a
    scalar step two modules' loops share). ``slp``: compiled with LLVM's SLP vectorizer on,
    which numba leaves off by default (it turns a loop's runs of like scalar statements into
    vector ones); each kernel that asks for it is checked against a reference in the tests."""
    if not numba_wanted():
        return None
    kernel = _ahead_of_time(py_func, signature, helpers, args, slp)
    if kernel is not None:
        _LOADED.append(py_func.__qualname__)
        return kernel
    numba = numba_module()
    if numba is None:
        return None
    py_func = linked(numba, py_func, helpers, OPTIONS)
    try:
        found = signature(numba, *args)
        with slp_vectorizer(numba, slp):  # numba compiles here, eagerly, for ``found``
            kernel = numba.njit(found if isinstance(found, list) else [found],
                                **OPTIONS)(py_func)
    except Exception as exc:  # a numba that cannot compile it: numpy's path, said once
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        warnings.warn(f"CPU EP: numba cannot compile {py_func.__qualname__} "
                      f"({type(exc).__name__}: {first}); it runs on numpy",
                      RuntimeWarning, stacklevel=2)
        return None
    _LOADED.append(py_func.__qualname__)
    return kernel


@contextlib.contextmanager
def slp_vectorizer(numba: Any, on: bool) -> Iterator[None]:
    """numba's code generator with LLVM's SLP vectorizer on while in the block, when ``on``
    (its passes read ``numba.config.SLP_VECTORIZE`` each time they are made). numba's compiler
    lock is held meanwhile, so that a kernel another thread compiles does not get the switch."""
    if not on:
        yield
        return
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        before = numba.config.SLP_VECTORIZE
        numba.config.SLP_VECTORIZE = 1
        try:
            yield
        finally:
            numba.config.SLP_VECTORIZE = before


class CompiledLoop:
    """A loop bound on the CPU EP's namespace: :meth:`ready` says whether the compiled one is
    used (numba installed and wanted; compiled, or read from numba's disk cache, the first time
    it says yes). A subclass names ``function`` (a ``staticmethod``), ``signature(numba)`` and
    the ``helpers`` it calls, and calls ``self._compiled``."""

    function: Callable[..., Any]
    helpers: tuple[Any, ...] = ()

    def __init__(self) -> None:
        self._compiled: Any = None

    @staticmethod
    def signature(numba: Any) -> list[Any]:
        raise NotImplementedError

    def ready(self) -> bool:
        if not numba_wanted():
            return False
        if self._compiled is None:
            self._compiled = compiled(self.function, self.signature, self.helpers) or False
        return bool(self._compiled)

    _built: bool | None = None  # whether its module was on disk, asked once

    def at_hand(self) -> bool:
        """:meth:`ready` where that costs no build: the loop already compiled in this process,
        or its module built ahead of time on disk (imported now); ``False`` otherwise, without
        building it (seconds), which a small input does not repay."""
        if self._compiled is not None:
            return bool(self._compiled) and numba_wanted()
        if self._built is None:
            self._built = numba_wanted() and built_ahead(self.function, self.signature,
                                                         self.helpers)
        return self._built and self.ready()


class LoopOnceCompiledInUse(CompiledLoop):
    """A float32 loop whose saving pays neither a first kernel's build nor numba's memory: used
    only once another compiled kernel is in use (:func:`compiled_in_use`). :meth:`ready` takes
    the dtype it would run on."""

    def ready(self, dtype: Any = np.float32) -> bool:
        return (dtype is FLOAT32 or dtype is np.float32 or np.dtype(dtype) == FLOAT32) and (
            compiled_in_use() and super().ready())
