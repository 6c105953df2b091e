"""Which OpenBLAS kernels numpy's GEMMs run on, where ep-host measured a better choice than
OpenBLAS's own: read by OpenBLAS once, when numpy first loads it, so only a process that imports
ep-host before numpy (``ep-host`` commands, a script whose first import is ``ep_host``) gets it.

On AMD Zen 4 (family 19h with AVX-512) OpenBLAS picks its SkylakeX kernels; its Haswell ones
ran float32 GEMMs 4-17% faster there (one thread, BERT's and ResNet's shapes: 128 x 768 x 3072
88-91 against 102-106 GFLOPS, 64 x 576 x 3136 81-85 against 95-96), float64 GEMMs and
matrix-vector products alike. Whole models on the CPU EP, one thread: GPT-2 386 -> 348 ms,
BERT-base 277 -> 255 ms, ResNet-50 94 -> 88 ms, MobileNetV2 12.1 -> 11.6 ms. Other CPUs keep
OpenBLAS's choice; so does a process that sets ``OPENBLAS_CORETYPE`` itself (any value) or
imported numpy first.
"""

from __future__ import annotations

import os
import sys

CORETYPE = "OPENBLAS_CORETYPE"
ZEN4_FAMILY = 0x19  # Zen 3 and Zen 4; only Zen 4 has AVX-512


def measured_core(cpuinfo: str) -> str | None:
    """The OpenBLAS core type ep-host prefers for the CPU ``/proc/cpuinfo`` describes (its first
    processor's lines), or ``None`` to keep OpenBLAS's choice."""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor only
            continue
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    try:
        family = int(fields.get("cpu family", ""))
    except ValueError:
        return None
    flags = fields.get("flags", "").split()
    if fields.get("vendor_id") == "AuthenticAMD" and family == ZEN4_FAMILY and "avx512f" in flags:
        return "Haswell"
    return None


def prefer_measured_core() -> None:
    """Set ``OPENBLAS_CORETYPE`` to :func:`measured_core`'s choice, when numpy has not loaded
    OpenBLAS yet and the variable is unset (Linux only: the CPU is read from /proc)."""
    if "numpy" in sys.modules or CORETYPE in os.environ or not sys.platform.startswith("linux"):
        return
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            head = f.read(8192)  # the first processor's lines
    except OSError:
        return
    core = measured_core(head)
    if core is not None:
        os.environ[CORETYPE] = core


prefer_measured_core()  # on import: the package imports this module before anything loads numpy
