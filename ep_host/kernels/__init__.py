"""The provider-neutral kernel library: ONNX kernels written once against an array namespace
``xp``, one module per op family, registered in ``REGISTRY``. Each EP binds its own namespace
(numpy, CuPy, ...) and imports the same public names. Importing this fills ``REGISTRY``.
"""

from ep_host.kernels import (  # noqa: F401 (each module registers its kernels)
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
from ep_host.kernels.registry import (
    ALL,
    ALL_WITH_STRING,
    DEFAULT_DOMAIN,
    FLOATS,
    INTS,
    NUMERIC,
    REGISTRY,
    SIGNED,
    UNSIGNED,
    KernelSpec,
    Registry,
    RegistryKernel,
    check_node,
    kernel,
)
from ep_host.kernels.work import output_elements, traffic_bytes, work

__all__ = [
    "ALL",
    "ALL_WITH_STRING",
    "DEFAULT_DOMAIN",
    "FLOATS",
    "INTS",
    "NUMERIC",
    "REGISTRY",
    "SIGNED",
    "UNSIGNED",
    "KernelSpec",
    "Registry",
    "RegistryKernel",
    "check_node",
    "kernel",
    "output_elements",
    "traffic_bytes",
    "work",
]
