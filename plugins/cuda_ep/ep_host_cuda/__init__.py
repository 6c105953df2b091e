"""ep-host's CUDA execution provider on CuPy. CuPy is imported only when the provider is asked
whether it can run, never at import time."""

__version__ = "0.1.0"
