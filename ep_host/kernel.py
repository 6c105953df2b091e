"""The base class of the kernels providers create for nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ep_host.match import CaptureSupport

WORKSPACE_LIFETIMES = ("run", "session")


@dataclass(frozen=True, slots=True)
class Workspace:
    """Scratch memory a kernel asks the host for (see :meth:`Kernel.workspace`): ``nbytes``
    bytes, living for one run (``"run"``: its contents are garbage when ``run`` is called, and
    the host may hand the same memory to other kernels between calls) or for the session
    (``"session"``: one buffer of this kernel's own, kept from run to run; the host serialises
    the kernel's calls)."""

    nbytes: int
    lifetime: str = "run"


class Kernel:
    """One node's computation on one provider, created once per session.

    The host calls :meth:`prepare` once with the node's constant inputs (by input index, already
    on the kernel's device), then :meth:`run` for every execution with all inputs positionally
    (``None`` for an omitted optional input). ``run`` returns a sequence with one array per node
    output. Inputs are read-only: a kernel never writes into them.

    For a node with subgraphs (If, Loop, Scan...), ``run`` also gets ``scope=``: the current
    values of the outer-scope names its bodies read, to pass on to the compiled bodies
    (see ``ProviderContext.subgraphs``).

    Set ``thread_safe = False`` when ``run`` keeps per-call state; the host then serialises calls.
    Set ``uses_blas = False`` when ``run`` never calls numpy's BLAS (no matmul, dot, einsum,
    linalg): a plan of such kernels alone runs without the session holding the BLAS pool at
    its thread count, which costs microseconds a run.

    Two optional fast paths the host uses when present:

    - ``call``: for a one-output kernel, a callable ``call(*inputs)`` returning that output
      itself (what ``run(*inputs)[0]`` returns), saving a tuple per run.
    - ``inplace``: input indices whose buffer the kernel may reuse for its output. When such an
      input is dead after this node, has the output's dtype and static shape, and nothing else
      refers to its buffer, the host calls ``call(*inputs, out=that_input)``; the kernel writes
      its output there and returns it, as numpy's ufuncs do with ``out=``.
    """

    thread_safe: bool = True
    uses_blas: bool = True
    call: Any = None
    inplace: tuple[int, ...] = ()

    def prepare(self, constants: Mapping[int, Any]) -> None:
        """Receive constant inputs once (weights), e.g. to prepack them. Default: keep nothing."""

    def released(self) -> Sequence[int]:
        """The constant inputs (indices) whose data this kernel no longer reads once
        :meth:`prepare` returned: what it needs of them, it packed into memory of its own.
        Default: none.

        Asked after ``prepare`` (and after any :meth:`adopt_prepacked`). The host may then give
        such a constant's memory back to the system, as onnxruntime frees a prepacked weight:
        where the session loaded the model file itself, every node reading the constant is a
        kernel that released it, and nothing else (a graph output, a control-flow body, a
        session sharing constants) can see it. ``run`` then gets, in the constant's place, a
        read-only stand-in of its dtype and shape whose values are not the constant's (NaN
        for floats): read its dtype and shape only, and nothing of what ``prepare`` was given
        for that input.
        """
        return ()

    def run(self, *inputs: Any) -> Sequence[Any]:
        raise NotImplementedError(f"{type(self).__name__}.run")

    def capture_support(self) -> CaptureSupport:
        """Whether ``run`` can be recorded into a device graph. Default: no."""
        return CaptureSupport.no("{} does not declare capture support", type(self).__name__)

    # -- shared prepacked constants (optional) -------------------------------------------------

    def prepacked(self) -> Mapping[str, tuple[Sequence[int], Any]]:
        """The state :meth:`prepare` built from constant inputs, offered for sharing: packing
        key -> (the input indices it was built from, the state). Default: nothing to share.

        The packing key names everything besides those inputs' contents that the state depends
        on (op, attributes, layout, dtype: ``"Conv-11/group=1/f32"``); two kernels that give the
        same key for inputs of equal contents must build interchangeable states. In a session
        with ``share_prepacked=True`` the host asks after ``prepare``; when another kernel on
        the same device already shared a state under that key for equal inputs (same dtype,
        shape and bytes), it hands that state to :meth:`adopt_prepacked`, else it keeps this
        one for the next kernel. A shared state is used by several kernels, sessions and
        threads at once: never change what ``run`` reads from it.
        """
        return {}

    # -- workspaces (optional) -----------------------------------------------------------------

    def workspace(self, inputs: Sequence[tuple[Any, tuple[Any, ...] | None] | None]
                  ) -> Workspace | None:
        """The scratch memory ``run`` needs for inputs of these types, or ``None`` (default):
        none, or not known ahead (the kernel allocates what it needs itself).

        Asked once when the session is created, after :meth:`prepare`, with one ``(numpy
        dtype, shape)`` per input (``None`` for an omitted optional input; a shape holds ints
        for static dims and strings for symbolic ones, or is ``None`` when the rank is
        unknown). The host allocates the :class:`Workspace` once on the kernel's device (a
        one-dimensional ``uint8`` array of at least ``nbytes``: numpy on the host, the device's
        own array type elsewhere, through ``Device.empty``) and passes it to every call as
        ``run(*inputs, workspace=buffer)`` (``call`` too). A kernel must still compute right,
        allocating itself, when a call's inputs need more than the buffer holds (shapes the
        model did not state) or when it gets no ``workspace=`` at all.
        """
        return None

    def adopt_prepacked(self, key: str, state: Any) -> None:
        """Take ``state``, which a kernel offered under packing ``key`` (see :meth:`prepacked`)
        for inputs equal to this kernel's, in place of the one ``prepare`` built (drop that
        one, so its memory is freed). Called only for keys this kernel's ``prepacked`` gave."""


class FunctionKernel(Kernel):
    """A kernel around a plain function ``fn(*inputs) -> output or tuple of outputs``."""

    __slots__ = ("fn", "n_outputs", "name")

    def __init__(self, fn: Any, n_outputs: int = 1, name: str = ""):
        self.fn = fn
        self.n_outputs = n_outputs
        self.name = name or getattr(fn, "__name__", "kernel")

    def run(self, *inputs: Any) -> Sequence[Any]:
        out = self.fn(*inputs)
        return out if isinstance(out, tuple | list) else (out,)

    def __repr__(self) -> str:
        return f"FunctionKernel({self.name})"
