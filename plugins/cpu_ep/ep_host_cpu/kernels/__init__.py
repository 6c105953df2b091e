"""The CPU EP's kernels, one module per op family; importing this fills ``REGISTRY``."""

from ep_host_cpu.kernels import (  # noqa: F401 (each module registers its kernels)
    conv,
    elementwise,
    logical,
    math,
    normalization,
    reduce,
    shape,
)
from ep_host_cpu.registry import REGISTRY

__all__ = ["REGISTRY"]
