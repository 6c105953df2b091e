"""Compiled kernels built ahead of time (``ep_host_cpu.aot``): a fresh process loads them
without numba or LLVM and computes what numba's JIT computes, bit for bit; their arrays are
checked as numba's dispatcher checks them; without a C compiler the JIT runs them, said once a
day."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from ep_host_cpu import aot
from ep_host_cpu.hard_sigmoid import (
    CompiledHardSigmoid,
    hard_sigmoid_float32,
    hard_sigmoid_in_place,
    hard_sigmoid_into,
    signature,
)
from ep_host_cpu.jit import compiled, numba_module

LOAD_AND_RUN = """
import sys, numpy as np
from ep_host_cpu.sigmoid import CompiledSigmoid
from ep_host_cpu.grouped_conv import GroupedConv2d
rng = np.random.default_rng(3)
x = (rng.standard_normal(50_000) * 40).astype(np.float32)
x[:4] = [np.nan, np.inf, -np.inf, -100.0]
sigmoid = CompiledSigmoid()
assert sigmoid.ready()
conv = GroupedConv2d()
assert conv.ready(np.float32)
images = rng.standard_normal((1, 8, 13, 11)).astype(np.float32)
w = rng.standard_normal((8, 1, 3, 3)).astype(np.float32)
bias = rng.standard_normal(8).astype(np.float32)
y = np.empty((1, 8, 7, 6), dtype=np.float32)
g = conv.geometry(images.shape, w.shape, (2, 2), (1, 1), (1, 1), (1, 1), y.shape[2:])
conv(images, w.reshape(8, 1, 9), bias, y, g, 8, ("clip", 0.0, 6.0))  # the blocked loop
large = rng.standard_normal((1, 8, 20, 20)).astype(np.float32)
z = np.empty((1, 8, 20, 20), dtype=np.float32)
g = conv.geometry(large.shape, w.shape, (1, 1), (1, 1), (1, 1), (1, 1), z.shape[2:])
conv(large, w.reshape(8, 1, 9), bias, z, g, 8, ("hard_swish", 1 / 6, 0.5))  # the phase loop
np.savez(sys.argv[1], sigmoid=sigmoid(x, times_x=True), conv=y, phase_conv=z)
print("imported:" + ",".join(sorted(m for m in ("numba", "llvmlite") if m in sys.modules)))
"""


HELPERS = (hard_sigmoid_in_place, hard_sigmoid_into)


def run_fresh(tmp_path, name, ahead):
    env = dict(os.environ, EP_HOST_NUMBA="1", EP_HOST_NUMBA_AOT="1" if ahead else "0",
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = tmp_path / f"{name}.npz"
    done = subprocess.run([sys.executable, "-c", LOAD_AND_RUN, str(out)], env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1], np.load(out)


def test_a_fresh_process_runs_the_built_kernels_without_numba_and_as_the_jit_does(tmp_path):
    imported, ahead = run_fresh(tmp_path, "ahead", ahead=True)
    assert imported == "imported:"  # neither numba nor llvmlite: about 130 MiB not spent
    imported, jit = run_fresh(tmp_path, "jit", ahead=False)
    assert imported == "imported:llvmlite,numba"
    for name in ("sigmoid", "conv", "phase_conv"):
        assert np.array_equal(ahead[name].view(np.int32), jit[name].view(np.int32)), name


def test_a_built_kernel_refuses_arrays_of_another_type_order_or_size():
    loop = CompiledHardSigmoid()
    assert loop.ready()
    kernel = loop._compiled
    assert isinstance(kernel, aot.AheadKernel)
    x = np.linspace(-4, 4, 64, dtype=np.float32)
    y = np.empty_like(x)
    kernel(x, y, np.float32(0.2), np.float32(0.5), False, False)
    np.testing.assert_allclose(y, np.clip(0.2 * x + 0.5, 0, 1), rtol=1e-6)
    readonly = y.copy()
    readonly.flags.writeable = False
    wrong = [(x.view(np.int32), y), (x[::2], y[:32]), (x, readonly), (x.reshape(8, 8), y),
             (x.astype(np.float64), y)]
    for a, b in wrong:  # each reads or writes memory as another type without the check
        with pytest.raises(TypeError, match="hard_sigmoid_float32: argument"):
            kernel(a, b, np.float32(0.2), np.float32(0.5), False, False)
    with pytest.raises(TypeError, match="takes 6 arguments"):
        kernel(x, y)


def test_without_a_c_compiler_the_jit_compiles_the_kernel_and_says_so_once_a_day(
        tmp_path, monkeypatch):
    assert numba_module() is not None  # numba's own disk cache stays where it was
    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(aot.sysconfig, "get_config_var", lambda name: None)
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.warns(RuntimeWarning, match="cannot be built ahead of time .no C compiler"):
        kernel = compiled(hard_sigmoid_float32, signature, HELPERS)
    assert kernel is not None and not isinstance(kernel, aot.AheadKernel)
    assert len(list((tmp_path / "cache" / "aot").glob("*.failed"))) == 1
    x = np.linspace(-4, 4, 64, dtype=np.float32)
    y = np.empty_like(x)
    kernel(x, y, np.float32(0.2), np.float32(0.5), True, False)
    np.testing.assert_allclose(y, np.clip(0.2 * x + 0.5, 0, 1) * x, rtol=1e-6)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        again = compiled(hard_sigmoid_float32, signature, HELPERS)
    assert again is not None and not isinstance(again, aot.AheadKernel)
    assert not [w for w in said if "ahead of time" in str(w.message)]  # the marker was read
    (marker,) = (tmp_path / "cache" / "aot").glob("*.failed")
    day_ago = marker.stat().st_mtime - aot.RETRY_AFTER_S - 1
    os.utime(marker, (day_ago, day_ago))
    with pytest.warns(RuntimeWarning, match="cannot be built ahead of time"):  # tried again
        compiled(hard_sigmoid_float32, signature, HELPERS)


def test_switched_off_the_kernel_comes_from_the_jit(monkeypatch):
    assert numba_module() is not None
    monkeypatch.setenv("EP_HOST_NUMBA_AOT", "0")
    kernel = compiled(hard_sigmoid_float32, signature, HELPERS)
    assert kernel is not None and not isinstance(kernel, aot.AheadKernel)
    monkeypatch.setenv("EP_HOST_NUMBA_AOT", "1")
    assert isinstance(compiled(hard_sigmoid_float32, signature, HELPERS), aot.AheadKernel)


def test_a_kernels_key_follows_every_module_of_its_package(tmp_path, monkeypatch):
    """A constant read from a sibling module is compiled into the kernel: changing that module
    must give the kernel another module (numba's own cache watches only the function's file)."""
    package = tmp_path / "kernel_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "limits.py").write_text("TOP = 1.0\n")
    (package / "loop.py").write_text("from kernel_pkg.limits import TOP\n\n\n"
                                     "def clip(x):\n    return min(x, TOP)\n\n\n"
                                     "def signature(numba):\n"
                                     "    return numba.float64(numba.float64)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = aot.KernelSpec(("kernel_pkg.loop", "clip"), (), ("kernel_pkg.loop", "signature"))
    first = aot.kernel_key(spec)
    assert aot.kernel_key(spec) == first
    (package / "limits.py").write_text("TOP = 2.0\n")
    assert aot.kernel_key(spec) != first
    assert aot.kernel_key(aot.KernelSpec(spec.function, (), spec.signature, ("float32",))) \
        != aot.kernel_key(spec)


def test_a_damaged_module_is_removed_and_the_jit_compiles_the_kernel(tmp_path, monkeypatch):
    from ep_host_cpu.jit import numba_cache_dir

    assert CompiledHardSigmoid().ready()  # built (or found) in the usual folder
    spec = aot.KernelSpec(("ep_host_cpu.hard_sigmoid", "hard_sigmoid_float32"),
                          tuple(("ep_host_cpu.hard_sigmoid", h.__name__) for h in HELPERS),
                          ("ep_host_cpu.hard_sigmoid", "signature"))
    folder = f"ep_host_cpu.hard_sigmoid.hard_sigmoid_float32-{aot.kernel_key(spec)}"
    cache = tmp_path / "cache"
    copy = cache / "aot" / folder
    shutil.copytree(Path(numba_cache_dir()) / "aot" / folder, copy)
    (library,) = copy.glob("ep_host_kernel_*")
    library.write_bytes(b"not a shared library")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(cache))
    with pytest.warns(RuntimeWarning, match="built .*hard_sigmoid_float32 cannot be imported"):
        kernel = compiled(hard_sigmoid_float32, signature, HELPERS)
    assert kernel is not None and not isinstance(kernel, aot.AheadKernel)
    assert not copy.exists()
    assert (cache / "aot" / f"{folder}.failed").exists()
