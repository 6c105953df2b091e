"""An example execution provider that computes in NHWC (channels last), as most GPU and NPU EPs
prefer; the hooks live in ``provider``, the kernels in ``kernels``."""

__version__ = "0.1.0"
