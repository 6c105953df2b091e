"""ep-host picks OpenBLAS's Haswell kernels on AMD Zen 4 (measured faster there for float32
GEMMs, see ep_host.blas_core), only while numpy has not loaded OpenBLAS and only when the user
did not choose: checked on made-up CPU descriptions and, in fresh interpreters, on this one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ep_host.blas_core import measured_core

ZEN4 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "flags\t\t: fpu sse2 avx2 fma avx512f avx512dq avx512bw\n\nprocessor\t: 1\n")


def test_only_amd_family_19h_with_avx512_gets_haswell_kernels():
    assert measured_core(ZEN4) == "Haswell"
    assert measured_core(ZEN4.replace(" avx512f", "")) is None  # Zen 3: no AVX-512
    assert measured_core(ZEN4.replace(": 25", ": 26")) is None  # Zen 5: not measured
    assert measured_core(ZEN4.replace("AuthenticAMD", "GenuineIntel")) is None
    assert measured_core("") is None
    assert measured_core("vendor_id : AuthenticAMD\ncpu family : unknown\n") is None


def test_the_first_processor_alone_decides():
    other = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t: avx512f\n\n"
    assert measured_core(other + ZEN4) is None


def run_python(code: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    done = subprocess.run([sys.executable, "-c", code], env={**base, **env}, capture_output=True,
                          text=True, timeout=120, check=True)
    return done.stdout.strip()


SHOW = "import os; print(os.environ.get('OPENBLAS_CORETYPE'))"


def test_importing_ep_host_first_sets_the_core_for_this_cpu_and_openblas_takes_it():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            want = measured_core(f.read(8192))
    except OSError:
        pytest.skip("no /proc/cpuinfo: the choice is made on Linux only")
    code = ("import ep_host, os, io, contextlib, numpy\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    numpy.show_runtime()\n"
            "print(os.environ.get('OPENBLAS_CORETYPE'), 'Haswell' in out.getvalue())")
    core, shown = run_python(code).split()
    assert core == str(want)
    if want is not None:
        assert shown == "True"  # numpy's OpenBLAS runs the kernels chosen


def test_numpy_loaded_first_or_a_users_choice_is_left_alone():
    assert run_python("import numpy, ep_host; " + SHOW) == "None"
    assert run_python("import ep_host; " + SHOW, OPENBLAS_CORETYPE="SkylakeX") == "SkylakeX"
