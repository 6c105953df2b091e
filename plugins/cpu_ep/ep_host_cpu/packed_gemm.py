"""float32 GEMMs by a constant weight through oneMKL's packed interface, bound on the CPU EP's
namespace as ``xp.packed_gemm`` for the library's MatMul and Gemm by a constant B (which keep
numpy's ``matmul`` where it is absent, switched off or declines a matrix).

A GEMM library copies each operand into its kernel's blocked layout on every call; for a
model's weight that copy is the same every run. oneMKL's ``cblas_sgemm_pack`` makes it once
(when the kernel is prepared) and ``cblas_sgemm_compute`` reads it thereafter; the kernel then
releases the weight (``Kernel.released``), and the host frees its memory where nothing else
reads it, as onnxruntime frees prepacked weights. Measured one
thread on the 2-vCPU Intel VM (Sapphire Rapids, AVX-512) the benchmarks run on, BERT-base's 72
weight GEMMs at 128 tokens, each weight read from memory as in a run: OpenBLAS (numpy's) 106
GFLOP/s, oneMKL unpacked 126, packed 162, onnxruntime's MLAS 154. The packed copy's pages come
to about the weight's size (plus 0-30%), though oneMKL asks for 7.6 MB more per matrix: the
buffer is an anonymous mapping, so the pages it never writes are never made. Small matrices
cost more (a 1,152 x 128 B 2.9 MB for its 0.6 MB), and so do oneMKL's kernels once loaded
(about 21 MB): Conv's weights are not packed. Packed for its 1x1, im2col and Winograd GEMMs
they took DenseNet-121's resident memory from 235 to 585 MB and its run from 1.91x
onnxruntime's to 2.17x (ResNet-18: 1.83x to 1.73x, 343 to 488 MB); without Winograd's 16
packs per weight the rest made no measurable difference.

Conv's GEMMs through oneMKL's generated kernels for each shape (``mkl_cblas_jit_create_sgemm``,
no packing) were tried too. Every GEMM of a run replayed alone, with its shapes and strides and
warm caches, took 18-37% less time than on OpenBLAS in each of 14 CNNs of the corpus (MobileNetV2
6.2 -> 4.6 ms, ResNet-50 34.7 -> 25.9), and plain ``cblas_sgemm`` was no faster than OpenBLAS.
In the models they were not faster: ``bench/models.py`` with and without them, one run each,
latency against onnxruntime ResNet-18 1.73 / 1.78, MobileNetV2 1.60 / 1.74, SqueezeNet 2.60 /
2.41, DenseNet-121 2.11 / 1.87; a per-node trace of MobileNetV2 gave 16.5 against 16.8 ms. The
operands come from memory there, and both wait on it. Not kept.

oneMKL comes from the ``mkl`` wheel (``pip install "ep-host-cpu[mkl]"``), loaded through
ctypes from the environment's ``lib`` folder, and is used on Intel CPUs (``EP_HOST_MKL=1``:
on any; ``EP_HOST_MKL=0``: numpy's path everywhere). On a 2-vCPU AMD EPYC VM (Zen 3, AVX2) it
made transformers slower: ``bench/models.py`` latency against onnxruntime with it and without,
BERT-base 1.25 / 1.13, DistilBERT 1.28 / 1.04, ViT-base 1.37 / 1.11.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import mmap
import os
import sys
import threading
from typing import Any

import numpy as np

from ep_host import blas_limit, find_blas_again

MKL_SWITCH = "EP_HOST_MKL"
_ROW_MAJOR, _NO_TRANS, _TRANS, _PACKED = 101, 111, 112, 151
_B_MATRIX = 162
MIN_VALUES = 64  # a smaller weight stays with numpy


def mkl_wanted() -> bool:
    """Whether oneMKL is to be used: ``EP_HOST_MKL=1`` (or yes/true/on) anywhere,
    ``EP_HOST_MKL=0`` (or no/false/off) nowhere; unset, on Intel CPUs only (it was measured
    there; on other CPUs oneMKL may take slower paths than OpenBLAS does)."""
    setting = os.environ.get(MKL_SWITCH, "").strip().lower()
    if setting in ("0", "false", "no", "off"):
        return False
    return setting in ("1", "true", "yes", "on") or _intel_cpu()


@functools.cache
def _intel_cpu() -> bool:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("vendor_id"):
                    return "GenuineIntel" in line
    except OSError:
        pass
    return False


def _library_paths() -> list[str]:
    """Where the ``mkl`` wheel puts its single dynamic library: the environment's ``lib``."""
    found: list[str] = []
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        found += sorted(glob.glob(os.path.join(prefix, "lib", "libmkl_rt.so*")))
    return found


def _load() -> Any:
    """oneMKL's runtime library with the packed-GEMM functions typed, or ``None``."""
    for path in _library_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        i, f, p, size = ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_size_t
        try:
            lib.cblas_sgemm_pack_get_size.restype = size
            lib.cblas_sgemm_pack_get_size.argtypes = [i, i, i, i]
            lib.cblas_sgemm_pack.restype = None
            lib.cblas_sgemm_pack.argtypes = [i, i, i, i, i, i, f, p, i, p]
            lib.cblas_sgemm_compute.restype = None
            lib.cblas_sgemm_compute.argtypes = [i, i, i, i, i, i, p, i, p, i, f, p, i]
            lib.MKL_Set_Num_Threads_Local.restype = i
            lib.MKL_Set_Num_Threads_Local.argtypes = [i]
        except AttributeError:  # a build without the packed interface
            continue
        return lib
    return None


_HERE = threading.local()  # the thread count this thread last gave oneMKL


def _threads_here(lib: Any) -> None:
    """oneMKL on this thread at the runs' BLAS thread count (``ep_host.threads``): its count is
    the calling thread's own, and a thread that never set one takes every core, so runs from
    several threads computed on different counts (and so summed in different orders: the last
    bit of some outputs differed from a lone run's)."""
    want = blas_limit()
    if getattr(_HERE, "threads", None) != want:
        lib.MKL_Set_Num_Threads_Local(want)  # 0: back to the process's count
        _HERE.threads = want


class PackedMatrix:
    """A 2-D float32 constant in oneMKL's packed layout, as the right operand (K x N) of
    ``C = A @ B``."""

    __slots__ = ("shape", "_buffer", "_at", "_lib")
    dtype = np.dtype(np.float32)

    def __init__(self, lib: Any, matrix: np.ndarray):
        rows, cols = matrix.shape
        if matrix.flags.c_contiguous:
            trans, ld = _NO_TRANS, cols
        else:  # a transposed view of a contiguous array (Gemm's transB)
            trans, ld = _TRANS, rows
        m, n, k = 1, cols, rows
        size = lib.cblas_sgemm_pack_get_size(_B_MATRIX, m, n, k)
        # an anonymous mapping: pages oneMKL asks for but does not write are never made
        self._buffer = mmap.mmap(-1, max(size, 1))
        self._at = ctypes.addressof(ctypes.c_char.from_buffer(self._buffer))  # held: no close
        lib.cblas_sgemm_pack(_ROW_MAJOR, _B_MATRIX, trans, m, n, k, 1.0, matrix.ctypes.data,
                             ld, self._at)
        self.shape, self._lib = (rows, cols), lib

    def times_left(self, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``x @ B`` for a packed B (K x N) and a C-contiguous float32 ``x`` (rows x K)."""
        k, n = self.shape
        m = x.shape[0]
        if out is None:
            out = np.empty((m, n), np.float32)
        _threads_here(self._lib)
        self._lib.cblas_sgemm_compute(_ROW_MAJOR, _NO_TRANS, _PACKED, m, n, k, x.ctypes.data, k,
                                      self._at, n, 0.0, out.ctypes.data, n)
        return out


class PackedGemm:
    """``xp.packed_gemm``: packs a constant float32 matrix for oneMKL, or answers ``None``
    (oneMKL absent, ``EP_HOST_MKL=0``, another type, a matrix too small to gain)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._lib: Any = None
        self._looked = False

    def library(self) -> Any:
        """oneMKL, loaded on first use (the BLAS pools are then found again, so that a
        session's ``intra_op_num_threads`` holds oneMKL's too), or ``None``."""
        if not mkl_wanted():
            return None
        if not self._looked:
            with self._lock:
                if not self._looked:
                    self._lib = _load()
                    self._looked = True
                    if self._lib is not None:
                        find_blas_again()
        return self._lib

    @staticmethod
    def _packable(matrix: np.ndarray) -> bool:
        return (matrix.dtype == np.float32 and matrix.ndim == 2 and matrix.size >= MIN_VALUES
                and (matrix.flags.c_contiguous or matrix.T.flags.c_contiguous))

    def pack(self, matrix: np.ndarray) -> PackedMatrix | None:
        """``matrix`` (2-D float32, C-contiguous or the transpose of a C-contiguous array)
        packed as a GEMM's right operand, or ``None``."""
        if not self._packable(matrix):
            return None
        lib = self.library()
        if lib is None:
            return None
        return PackedMatrix(lib, matrix)
