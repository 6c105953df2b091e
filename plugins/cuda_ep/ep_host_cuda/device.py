"""The CUDA device as the host sees it: explicit copies to and from the host on the provider's
own stream, a synchronize, and CUDA-graph capture; plus a host-memory stand-in for tests.

CuPy does not import host arrays through DLPack, so every copy is an explicit
``cupy.asarray`` / ``cupy.asnumpy``. Only a copy to the host waits for the stream.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from ep_host import Device
from ep_host_cuda.figures import DeviceFigures


def cuda_device(cupy: ModuleType, stream: Any, figures: DeviceFigures, index: int = 0) -> Device:
    """Device ``cuda:<index>`` whose copies, synchronisation and graphs use ``stream`` (a
    non-default ``cupy.cuda.Stream``: the default stream cannot be captured)."""

    def from_host(array: Any) -> Any:
        with stream:
            return cupy.asarray(array)

    def empty(nbytes: int) -> Any:
        """Kernels' workspaces, from CuPy's memory pool (the device's allocator)."""
        with stream:
            return cupy.empty(nbytes, dtype=cupy.uint8)

    def to_host(array: Any) -> Any:
        return cupy.asnumpy(array, stream=stream)  # blocks until the copy is done

    def capture(fn: Callable[[], Any]) -> Callable[[], None]:
        """Run ``fn`` once (kernels compile, cuBLAS and the memory pool allocate), then record
        it into a CUDA graph and return a function that launches the graph on ``stream``.

        ``fn`` must work on fixed buffers that stay alive as long as the replay function: an
        array freed during the recording goes back to CuPy's pool, and a later replay would
        write into whatever the pool handed that memory to next."""
        with stream:
            kept = fn()
            stream.synchronize()
            stream.begin_capture()
            try:
                kept = fn()
            except BaseException:
                with contextlib.suppress(Exception):
                    stream.end_capture()  # the recording is invalid; leave the stream usable
                raise
            graph = stream.end_capture()

        def replay() -> None:
            graph.launch(stream=stream)

        replay.buffers = (fn, kept)  # type: ignore[attr-defined]  # kept alive with the graph
        return replay

    return Device(name=f"cuda:{index}", kind="cuda", link_gbps=figures.link_gbps,
                  link_latency_us=figures.link_latency_us, to_host=to_host, from_host=from_host,
                  synchronize=stream.synchronize, capture=capture, empty=empty)


def _host_copy(array: Any) -> Any:
    return np.array(array, copy=True)


def _host_capture(fn: Callable[[], Any]) -> Callable[[], Any]:
    fn()  # as on a GPU, the partition runs once before it is recorded
    return fn  # replaying a host "graph" runs the same calls on the same buffers


def simulated_device(figures: DeviceFigures, name: str = "sim:0") -> Device:
    """A device in host memory with ``figures``' link: every copy is a real copy, so a kernel
    that kept a reference across devices would be caught by tests, and placement prices the
    copies as it would for a GPU."""
    return Device(name=name, kind="sim", link_gbps=figures.link_gbps,
                  link_latency_us=figures.link_latency_us, to_host=_host_copy,
                  from_host=_host_copy, synchronize=lambda: None, capture=_host_capture)
