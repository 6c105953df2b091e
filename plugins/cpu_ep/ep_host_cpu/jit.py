"""numba for the CPU EP's compiled kernels: imported on first use (never at ``import ep_host`` or
``import ep_host_cpu``), compiled functions cached on disk under the user cache directory
(``NUMBA_CACHE_DIR`` wins when set), and ``EP_HOST_NUMBA=0`` keeping every kernel on its numpy
path.

Measured here (numba 0.68.1; a 2-core machine, quiet / under a load of 8): ``import numba``
0.19 / 0.55-0.85 s; compiling the grouped convolution for float32 the first time 2.6 / 6-6.8 s
(float64, compiled only when a float64 model asks, 4.7 s more under load); reading the float32
one back from the disk cache in a fresh process, numba's code generator starting with it,
0.47 / 0.9-1.3 s (float64 then 0.02 s). A process pays this once, when it first makes a Conv
that runs on the compiled loops (at session creation, see ``conv.prepare_conv``).

Kernels divide by numpy's rules (``error_model="numpy"``: x / 0 is inf, no exception): numba's
default checks every division for zero, which keeps a loop with a division from being
vectorized (the compiled Sigmoid ran 1.8 against 0.73 ns an element).
"""

from __future__ import annotations

import importlib.util
import os
import types
import warnings
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

NUMBA_SWITCH = "EP_HOST_NUMBA"
# numba's disk cache does not key compiled code by these options: a change of them needs a new
# ``CACHE_TAG`` (the cache's folder), or an old cache compiled under other options is read back
OPTIONS: dict[str, Any] = {"cache": True, "nogil": True, "error_model": "numpy",
                           "fastmath": {"contract"}}
CACHE_TAG = "numpy-errors"


def numba_wanted() -> bool:
    """Whether the compiled kernels are used: numba installed and not switched off by
    ``EP_HOST_NUMBA=0``. Finding the package does not import it."""
    if os.environ.get(NUMBA_SWITCH, "1").strip() in ("0", "false", "no", "off"):
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


def compiled(py_func: Any, signatures: Callable[[Any], list[Any]],
             helpers: tuple[Any, ...] = ()) -> Any:
    """``py_func`` compiled by numba for ``signatures(numba)`` (eagerly: read from the disk
    cache when an earlier process compiled it), one thread, floating-point contraction (FMA)
    allowed and no other fast-math, numpy's division rules (:data:`OPTIONS`); ``None``
    (numpy's path) when numba is not wanted, cannot be imported or cannot compile it, the last
    two with a warning. ``helpers``: functions that ``py_func`` and the helpers themselves call by
    name, compiled with it (each a loop the compiler vectorizes better on its own, or a scalar
    step two modules' loops share)."""
    if not numba_wanted():
        return None
    numba = numba_module()
    if numba is None:
        return None
    if helpers:  # each reads the others from its globals: copies of those with compiled ones
        spaces = [dict(f.__globals__) for f in (py_func, *helpers)]
        jitted = {h.__name__: numba.njit(**OPTIONS)(_with_globals(h, names))
                  for h, names in zip(helpers, spaces[1:], strict=True)}
        for names in spaces:  # numba reads a helper's globals when it compiles, after this
            names.update(jitted)
        py_func = _with_globals(py_func, spaces[0])
    try:
        return numba.njit(signatures(numba), **OPTIONS)(py_func)
    except Exception as exc:  # a numba that cannot compile it: numpy's path, said once
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        warnings.warn(f"CPU EP: numba cannot compile {py_func.__qualname__} "
                      f"({type(exc).__name__}: {first}); it runs on numpy",
                      RuntimeWarning, stacklevel=2)
        return None


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
