"""The exceptions ep-host raises where a user must act.

Every error names what is at fault (the model file, node, input or provider) in its message and
chains the original exception. Decisions (a provider declining a node) are values, not errors.
``describe_exception`` is the one-line form in which every fault is reported.
"""

from __future__ import annotations

from typing import Any


class HostError(Exception):
    """Base class of every error ep-host raises on purpose."""


class ModelLoadError(HostError):
    """The model file (or bytes) cannot be read or parsed."""


class ModelValidationError(HostError):
    """The model parses but is not a valid graph (dangling inputs, cycles, bad opsets)."""


class ProviderError(HostError):
    """A provider plugin misbehaved (raised with ``EP_HOST_STRICT=1`` or when nothing else can)."""


class UnknownNodeError(HostError, KeyError):
    """A node name that names no node of the model, as written or after graph optimizations;
    the message lists close matches. A ``KeyError`` too, as ``Placement.by_node[name]`` raises
    it."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PlacementError(HostError):
    """Some nodes cannot be placed on any available provider."""


class PluginBaseException(Exception):
    """Plugin code raised a ``BaseException`` that is not an ``Exception`` (``SystemExit``,
    ``GeneratorExit``, a ``KeyboardInterrupt`` the user did not send): carried as an ordinary
    exception so that it stays that provider's fault. ``original`` is what the plugin raised."""

    def __init__(self, original: BaseException):
        super().__init__(describe_exception(original))
        self.original = original


class InputError(HostError):
    """A run's inputs do not match the model's declared inputs."""


class KernelError(HostError):
    """A kernel could not be created or raised while running."""


class ProviderLostError(KernelError):
    """An isolated provider's worker process died or stopped answering: ``provider`` and the
    ``hook`` it was in are named in the message. The provider is failed from then on; a
    session places its nodes on other providers where it can (a ``KernelError`` too, so that a
    kernel it cannot create falls back to the next claimant)."""

    def __init__(self, message: str, provider: str = "", hook: str = ""):
        super().__init__(message)
        self.provider = provider
        self.hook = hook


def lost_provider(exc: BaseException | None) -> ProviderLostError | None:
    """The :class:`ProviderLostError` behind ``exc`` (itself or what caused it), if any."""
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, ProviderLostError):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


class ResourceLimitError(HostError):
    """A tensor or run would exceed a configured limit."""


class RunCancelledError(HostError):
    """A run was cancelled from another thread (``RunOptions.terminate``)."""


# What the stages that run native code may allocate per node of the model (measured on long
# chains, with a margin): checked against the address-space limit before the stage starts, since
# protobuf and onnx's shape inference can crash rather than raise when an allocation fails. The
# later stages allocate Python objects only, whose MemoryError is caught as it happens.
STAGE_BYTES_PER_NODE = {"loading": 2000, "shape inference": 1500, "optimization": 1000}


def address_space_left() -> int | None:
    """Bytes this process may still map under its address-space limit (``RLIMIT_AS``, as
    ``ulimit -v`` sets it); ``None`` when there is no limit or it cannot be read."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/status") as f:
            size = next(int(line.split()[1]) for line in f if line.startswith("VmSize:"))
    except (ImportError, OSError, StopIteration, ValueError):
        return None
    return soft - size * 1024


class memory_stage:
    """Re-raise a ``MemoryError`` raised inside as a :class:`ResourceLimitError` naming the
    stage (``"shape inference"``), the model and its size in nodes. Under an address-space
    limit, a stage that would need more than is left (``need`` bytes, else its
    ``STAGE_BYTES_PER_NODE`` times ``nodes``) is refused before it starts. A class rather than a
    generator: a session enters some twenty stages, and a generator's context manager costs
    several times as much."""

    __slots__ = ("stage", "model", "nodes")

    def __init__(self, stage: str, model: str, nodes: int | None = None,
                 need: int | None = None):
        self.stage, self.model, self.nodes = stage, model, nodes
        if need is None and nodes is not None:
            need = STAGE_BYTES_PER_NODE.get(stage, 0) * nodes
        left = address_space_left() if need else None
        if left is not None and need is not None and need > left:
            size = "" if nodes is None else f" ({nodes} nodes)"
            raise ResourceLimitError(
                f"{model}: would run out of memory during {stage} of the model{size}: it needs "
                f"about {need >> 20} MiB, the address-space limit leaves {max(left, 0) >> 20} "
                "MiB; give the process more memory or use a smaller model")

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: Any, tb: Any) -> None:
        if kind is not None and issubclass(kind, MemoryError):
            raise out_of_memory(exc, self.stage, self.model, self.nodes) from exc


def out_of_memory(exc: MemoryError, stage: str, model: str,
                  nodes: int | None = None) -> ResourceLimitError:
    """The error for ``exc`` raised during ``stage`` (what :func:`memory_stage` raises; a hot
    path catches ``MemoryError`` itself and raises this, without a context manager's cost)."""
    exc.__traceback__ = None  # its frames hold what the stage allocated: release them first
    size = "" if nodes is None else f" ({nodes} nodes)"
    return ResourceLimitError(
        f"{model}: ran out of memory during {stage} of the model{size}; give the process "
        "more memory or use a smaller model")


class NotSupportedError(HostError, NotImplementedError):
    """A feature of onnxruntime's API that ep-host does not offer (named in the message)."""


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: first line of the message"`` (just the type name when the message is empty).

    The form in which the host reports a fault it caught: a provider that failed to import or
    raised in a hook, a kernel that failed to build or to run.
    """
    if isinstance(exc, PluginBaseException):
        exc = exc.original
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text and text[0] else type(exc).__name__


def plugin_traceback(exc: BaseException) -> str:
    """The fault behind a strict-mode ``ProviderError``, for the terminal: a traceback of the
    plugin's own frames (ep-host's and pluggy's left out) and ``TypeName: message``."""
    import os
    import traceback

    import pluggy

    if isinstance(exc, PluginBaseException):
        exc = exc.original
    skipped = tuple(os.path.dirname(os.path.abspath(path)) + os.sep
                    for path in (__file__, pluggy.__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not os.path.abspath(f.filename).startswith(skipped)]
    lines = ["Traceback (the provider's frames, most recent call last):\n",
             *traceback.format_list(frames)] if frames else []
    lines.extend(traceback.format_exception_only(type(exc), exc))
    return "".join(lines)
