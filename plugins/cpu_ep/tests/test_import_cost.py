"""What loading the CPU EP imports: a session's process pays for scipy's special functions and
numpy's lazily imported submodules (f2py, testing, random, ma...) only when a kernel asks for
them, and the namespace still gives every numpy name."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from ep_host_cpu.erf import erf
from ep_host_cpu.xp import SHORTCUTS, numpy_xp

HEAVY = ("scipy.special", "numpy.f2py", "numpy.testing", "numpy.random", "numpy.ma")


def test_loading_the_cpu_ep_leaves_scipy_and_numpys_lazy_submodules_unimported():
    code = ("import sys, ep_host_cpu.provider; "
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    assert done.stdout.strip() == "[]"


def test_the_namespace_gives_every_public_numpy_name_and_only_those():
    for name in dir(np):
        if name.startswith("_"):
            continue
        if name in SHORTCUTS:  # its own function, under numpy's name (tests/test_namespace.py)
            assert getattr(numpy_xp, name) is not getattr(np, name), name
            assert getattr(numpy_xp, name).__name__ == getattr(np, name).__name__, name
        else:
            assert getattr(numpy_xp, name) is getattr(np, name), name
    assert numpy_xp.random.default_rng is np.random.default_rng
    assert not hasattr(numpy_xp, "__array_namespace_info__")
    assert not hasattr(numpy_xp, "no_such_function")


@pytest.mark.parametrize("dtype", [np.float64, np.float16])
def test_erf_of_other_types_comes_from_scipy(dtype):
    import scipy.special

    x = np.linspace(-3, 3, 101).astype(dtype)
    np.testing.assert_array_equal(erf(x), scipy.special.erf(x))
