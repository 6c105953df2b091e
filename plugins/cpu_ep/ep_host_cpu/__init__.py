"""ep-host's CPU execution provider: the kernel library :mod:`ep_host.kernels` bound to numpy.
The provider hooks and the roofline pricing live in :mod:`ep_host_cpu.provider`."""

__version__ = "0.1.0"
