"""ep-host's CPU execution provider: ONNX kernels written against an array namespace, bound to
numpy. The provider hooks live in :mod:`ep_host_cpu.provider`; kernels in
:mod:`ep_host_cpu.kernels`, one module per op family."""

__version__ = "0.1.0"
