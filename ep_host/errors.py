"""The exceptions ep-host raises where a user must act.

Every error names what is at fault (the model file, node, input or provider) in its message and
chains the original exception. Decisions (a provider declining a node) are values, not errors.
``describe_exception`` is the one-line form in which every fault is reported.
"""

from __future__ import annotations


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


class InputError(HostError):
    """A run's inputs do not match the model's declared inputs."""


class KernelError(HostError):
    """A kernel could not be created or raised while running."""


class ResourceLimitError(HostError):
    """A tensor or run would exceed a configured limit."""


class RunCancelledError(HostError):
    """A run was cancelled from another thread (``RunOptions.terminate``)."""


def describe_exception(exc: BaseException) -> str:
    """``"TypeName: first line of the message"`` (just the type name when the message is empty).

    The form in which the host reports a fault it caught: a provider that failed to import or
    raised in a hook, a kernel that failed to build or to run.
    """
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text and text[0] else type(exc).__name__
