"""The CPU EP's compiled kernels built ahead of time: numba's ``pycc`` compiles a kernel once, in
a child process, into an extension module kept under numba's cache folder
(:func:`ep_host_cpu.jit.numba_cache_dir`, ``aot/``); every later process imports that module
without importing numba or starting LLVM. ``EP_HOST_NUMBA_AOT=0`` keeps numba's JIT in the
process.

Measured here (numba 0.68.1, RSS by mapping in /proc/self/smaps): ``import numba`` adds 64 MiB
(36 MiB of llvmlite's library text, 21 MiB anonymous, the rest scipy's and other libraries it
loads), and the first kernel read back from numba's disk cache 65 MiB more (33 MiB more of
llvmlite's text, 25 MiB anonymous: LLVM's heap); the first built kernel imported instead adds
8 MiB, the next 1 MiB. Building one costs a numba import, LLVM's compile and a C compile of
numba's runtime in the child (7-10 s here, once per kernel, CPU and source).

The module is keyed by the sources of the kernel's package, numba's, llvmlite's, numpy's and
Python's versions and this CPU (its ``/proc/cpuinfo`` flags); it is compiled for this CPU with
the options of :data:`ep_host_cpu.jit.OPTIONS` (the JIT's: the same code, the same results). A
build that fails (no C compiler, a numba without ``pycc`` or setuptools) is remembered for a day
by a marker file next to where the module would be, and the kernel is compiled by the JIT in
the process instead.
Calls go through :class:`AheadKernel`, which checks each array against the compiled types
(numba's dispatcher did; the module only checks item sizes).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

AOT_SWITCH = "EP_HOST_NUMBA_AOT"
BUILD_TIMEOUT_S = 900  # a build under heavy load; past this the JIT takes over
RETRY_AFTER_S = 86400  # a failed build is tried again a day later (a C compiler installed since)
ENTRY = "kernel"  # the name the module exports


@dataclass(frozen=True)
class KernelSpec:
    """What a child process needs to rebuild a kernel: ``(module, name)`` pairs of the
    function, its helpers and its signature function (called as ``signature(numba, *args)``;
    ``args`` strings)."""

    function: tuple[str, str]
    helpers: tuple[tuple[str, str], ...]
    signature: tuple[str, str]
    args: tuple[str, ...] = ()
    slp: bool = False  # compiled with LLVM's SLP vectorizer on (see ``jit.compiled``)

    def as_json(self) -> str:
        return json.dumps({"function": self.function, "helpers": self.helpers,
                           "signature": self.signature, "args": self.args, "slp": self.slp})

    @classmethod
    def from_json(cls, text: str) -> KernelSpec:
        d = json.loads(text)
        return cls(tuple(d["function"]), tuple(tuple(h) for h in d["helpers"]),
                   tuple(d["signature"]), tuple(d["args"]), d["slp"])


def aot_wanted() -> bool:
    """Whether kernels are built ahead of time: not switched off by ``EP_HOST_NUMBA_AOT=0``."""
    return os.environ.get(AOT_SWITCH, "1").strip() not in ("0", "false", "no", "off")


def _sources(module_names: set[str]) -> list[Path]:
    """Every Python file of the packages the modules are in: a kernel reads constants and
    helpers from its package's other modules too (numba's own disk cache misses a change
    there, as it watches only the function's file)."""
    files: set[Path] = set()
    for name in module_names:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            files.update(Path(spec.origin).parent.glob("*.py"))
    return sorted(files)


def _cpu_identity() -> str:
    """This CPU's model and flags (Linux), else what :mod:`platform` says."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return f"{platform.machine()} {platform.processor()}"
    keep = [line for line in text.splitlines()
            if line.split(":")[0].strip() in ("model name", "flags", "Features", "cpu model")]
    return "\n".join(sorted(set(keep)))


def _version(package: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "absent"


def kernel_key(spec: KernelSpec) -> str:
    """A digest of everything the built module depends on."""
    from ep_host_cpu import jit

    digest = hashlib.sha256()
    modules = {spec.function[0], spec.signature[0], *(m for m, _ in spec.helpers),
               jit.__name__, __name__}
    for path in _sources(modules):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for part in (spec.as_json(), repr(sorted(jit.OPTIONS.items())), jit.CACHE_TAG,
                 _version("numba"), _version("llvmlite"), np.__version__, sys.version,
                 str(importlib.machinery.EXTENSION_SUFFIXES), _cpu_identity()):
        digest.update(part.encode() + b"\0")
    return digest.hexdigest()[:20]


class AheadKernel:
    """A kernel imported from its built module, called like numba's dispatcher: each array
    argument must have the compiled dtype, dimensions, C order and (when written) be writable,
    else :class:`TypeError` (the module itself checks only item sizes)."""

    def __init__(self, function: Any, arrays: list[dict[str, Any] | None], name: str) -> None:
        self._function = function
        self._read = tuple((i, np.dtype(a["dtype"]), a["ndim"])
                           for i, a in enumerate(arrays) if a is not None and not a["writable"])
        self._written = tuple((i, np.dtype(a["dtype"]), a["ndim"])
                              for i, a in enumerate(arrays) if a is not None and a["writable"])
        self._count = len(arrays)
        self.__name__ = name

    def __call__(self, *args: Any) -> Any:
        if len(args) != self._count:
            raise TypeError(f"{self.__name__} takes {self._count} arguments, got {len(args)}")
        nd = np.ndarray
        for i, dtype, ndim in self._read:
            a = args[i]
            if (a.__class__ is not nd or a.dtype != dtype or a.ndim != ndim
                    or not a.flags.c_contiguous):
                self._refuse(i, a, dtype, ndim, False)
        for i, dtype, ndim in self._written:
            a = args[i]
            if (a.__class__ is not nd or a.dtype != dtype or a.ndim != ndim
                    or not (flags := a.flags).c_contiguous or not flags.writeable):
                self._refuse(i, a, dtype, ndim, True)
        return self._function(*args)

    @property
    def unchecked(self) -> Any:
        """The module's function itself, for a caller that makes every array argument of the
        compiled type, dimensions and order (it checks only item sizes)."""
        return self._function

    def _refuse(self, i: int, a: Any, dtype: np.dtype, ndim: int, writable: bool) -> None:
        raise TypeError(f"{self.__name__}: argument {i} must be a C-contiguous "
                        f"{'writable ' if writable else ''}{dtype} array of {ndim} "
                        f"dimensions, got {_describe(a)}")


def _describe(a: Any) -> str:
    if not isinstance(a, np.ndarray):
        return type(a).__name__
    order = "C" if a.flags.c_contiguous else "strided"
    return f"{order} {a.dtype} of shape {a.shape}"


def is_built(spec: KernelSpec, folder: str | Path) -> bool:
    """Whether ``spec``'s module is built under ``folder``/aot: :func:`load` then only imports
    it (about 15 ms here), where a build costs seconds."""
    stem = "-".join((".".join(spec.function), *spec.args))
    home = Path(folder) / "aot"
    if not any(home.glob(f"{stem}-*")):  # none built from any source: no key to work out
        return False  # (hashing the sources and reading the versions: 10-35 ms a process)
    return (home / f"{stem}-{kernel_key(spec)}").is_dir()


def load(spec: KernelSpec, folder: str | Path) -> AheadKernel | None:
    """The kernel ``spec`` from its module under ``folder``/aot, built first when absent;
    ``None`` (the JIT's turn) when it cannot be built or imported, said once per kernel."""
    key = kernel_key(spec)
    name = f"ep_host_kernel_{key}"
    home = Path(folder) / "aot"
    label = ".".join(spec.function)
    stem = "-".join((label, *spec.args))
    built = home / f"{stem}-{key}"
    failed = home / f"{stem}-{key}.failed"
    if not built.is_dir():
        if _recent(failed):
            return None
        reason = _build(spec, name, home, built)
        if reason is not None:
            _give_up(failed, f"{label} cannot be built ahead of time ({reason})")
            return None
        _remove_older(home, stem, built)
    try:
        arrays = json.loads((built / "arrays.json").read_text())
        path = next(built.glob(f"{name}.*"))
        loader = importlib.machinery.ExtensionFileLoader(name, str(path))
        module = importlib.util.module_from_spec(
            importlib.machinery.ModuleSpec(name, loader, origin=str(path)))
        loader.exec_module(module)
        return AheadKernel(getattr(module, ENTRY), arrays, label)
    except Exception as exc:  # damaged, or not loadable here: removed, and the JIT for a day
        shutil.rmtree(built, ignore_errors=True)
        _give_up(failed, f"the built {label} cannot be imported ({type(exc).__name__}: {exc})")
        return None


def _give_up(marker: Path, why: str) -> None:
    """Warn that the JIT compiles the kernel, and leave ``marker`` saying why."""
    try:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(why)
    except OSError:
        pass
    warnings.warn(f"CPU EP: {why}; numba compiles it in this process (about 130 MiB more)",
                  RuntimeWarning, stacklevel=4)


def _recent(marker: Path) -> bool:
    """Whether ``marker`` was written less than :data:`RETRY_AFTER_S` ago."""
    try:
        return marker.stat().st_mtime > time.time() - RETRY_AFTER_S
    except OSError:
        return False


def _remove_older(home: Path, stem: str, built: Path) -> None:
    """Remove the kernel's modules built from other sources or versions (a process that
    imported one keeps its copy: the file goes when the last one ends)."""
    for old in home.glob(f"{stem}-*"):
        if old != built and len(old.name) - len(stem) == 21 + (old.suffix == ".failed") * 7:
            if old.is_dir():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink(missing_ok=True)


def _build(spec: KernelSpec, name: str, home: Path, built: Path) -> str | None:
    """Build the module in a child process into a fresh folder, then move it to ``built``
    (one rename: a process never sees half a module; when two build it, the first kept wins).
    ``None`` when done, else why not."""
    if not _c_compiler():
        return "no C compiler on PATH (CC, Python's own, cc or gcc)"
    try:
        home.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{built.name}-", dir=home))
    except OSError as exc:
        return f"cannot write to {home}: {exc}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        done = subprocess.run([sys.executable, "-m", __name__, spec.as_json(), name, str(work)],
                              env=env, capture_output=True, text=True,
                              timeout=BUILD_TIMEOUT_S, check=False)
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
            return f"the build exited with {done.returncode}: {tail}"
        try:
            work.rename(built)
        except OSError:
            if not built.is_dir():
                raise
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _c_compiler() -> bool:
    names = [os.environ.get("CC", ""), sysconfig.get_config_var("CC") or "", "cc", "gcc"]
    return any(shutil.which(n.split()[0]) for n in names if n.strip())


def _array_types(numba: Any, signature: Any) -> list[dict[str, Any] | None]:
    out: list[dict[str, Any] | None] = []
    for t in signature.args:
        if isinstance(t, numba.types.Array):
            if t.layout != "C":
                raise TypeError(f"only C-contiguous arrays are built ahead of time, not {t}")
            out.append({"dtype": np.dtype(str(t.dtype)).str, "ndim": t.ndim,
                        "writable": t.mutable})
        else:
            out.append(None)
    return out


def _build_here(spec: KernelSpec, name: str, work: Path) -> None:
    """The child's side: compile ``spec`` with numba's ``pycc`` into ``work``."""
    import importlib

    warnings.simplefilter("ignore")  # pycc's pending deprecation
    import numba
    from numba.core import codegen, compiler, cpu
    from numba.pycc import CC
    from numba.pycc import compiler as pycc_compiler

    from ep_host_cpu import jit

    def attr(pair: tuple[str, str]) -> Any:
        return getattr(importlib.import_module(pair[0]), pair[1])

    options = {k: v for k, v in jit.OPTIONS.items() if k != "cache"}

    class KernelFlags(compiler.Flags):
        """pycc's flags with the JIT's options (numpy's division, contraction, no GIL)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            cpu.CPUTargetOptions.parse_as_flags(self, dict(options))

    pycc_compiler.Flags = KernelFlags  # type: ignore[misc]
    # pycc compiles for a CPU model's features; the JIT for this CPU's own (a virtual machine
    # may hide some of its model's): the same here
    codegen.AOTCPUCodegen._customize_tm_features = (  # type: ignore[method-assign]
        lambda self: self._get_host_cpu_features())
    signature = attr(spec.signature)(numba, *spec.args)
    signature = signature[0] if isinstance(signature, list) else signature
    function = jit.linked(numba, attr(spec.function), tuple(attr(h) for h in spec.helpers),
                          options)
    cc = CC(name)
    cc.output_dir = str(work)
    cc.target_cpu = "host"
    cc.export(ENTRY, signature)(function)
    with jit.slp_vectorizer(numba, spec.slp):
        cc.compile()
    (work / "arrays.json").write_text(json.dumps(_array_types(numba, signature)))


if __name__ == "__main__":
    _build_here(KernelSpec.from_json(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
