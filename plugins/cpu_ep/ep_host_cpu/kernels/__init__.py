"""The CPU EP's kernels, one module per op family; importing this fills ``REGISTRY``."""

from ep_host_cpu.kernels import (  # noqa: F401 (each module registers its kernels)
    attention,
    contrib,
    control_flow,
    conv,
    elementwise,
    image,
    logical,
    loss,
    math,
    ml,
    normalization,
    quantization,
    random,
    recurrent,
    reduce,
    sequence,
    shape,
    signal,
    text,
    training,
)
from ep_host_cpu.registry import REGISTRY

__all__ = ["REGISTRY"]
