"""The EP contract: every hook an execution provider can implement.

A provider is a module or object with ``@hookimpl``-decorated functions named after these
specs, registered by an entry point in the group ``ep_host.providers``. Hook implementations
may take any subset of a spec's parameters, in any order, and must not give them defaults.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from ep_host.graph import NodeView
    from ep_host.kernel import Kernel
    from ep_host.match import KernelMatch
    from ep_host.provider import ProviderContext, ProviderInfo
    from ep_host.subgraph import PartitionView

hookspec = pluggy.HookspecMarker("ep_host")
hookimpl = pluggy.HookimplMarker("ep_host")


# ---------------------------------------------------------------------------------------------
# Who the provider is
# ---------------------------------------------------------------------------------------------


@hookspec
def ep_host_provider_info() -> ProviderInfo:
    """Describe this provider: its name, device, version and whether it can run here.

    Called once when the host loads the provider, before any node is asked about.

    :return: a :class:`ep_host.ProviderInfo`. When the provider cannot run on this machine (a
        library is missing, no device is visible), return ``available=False`` with a reason
        that says what to do; the host then declines every node for it with that reason,
        code ``device``, and never calls its other hooks.

    Raising, or returning anything but a ``ProviderInfo``, marks the provider as failed: it is
    listed by ``ep-host providers`` with the error, and every other provider goes on.

    Example::

        @hookimpl
        def ep_host_provider_info():
            return ProviderInfo(name="mine", version="1.2.0")
    """


# ---------------------------------------------------------------------------------------------
# What the provider can run
# ---------------------------------------------------------------------------------------------


@hookspec
def ep_host_supports_op(node: NodeView, context: ProviderContext) -> KernelMatch:
    """Say whether this provider computes ``node``, and at what estimated cost.

    Called once per node per provider during the capability walk, for each provider alone:
    the answer keeps the provider's identity and never affects another provider's answer.

    :param node: a read-only view of the node: ``name``, ``op_type``, ``domain`` (``""`` is
        given as ``"ai.onnx"``), ``since_version`` (the schema version the model's opset
        resolves to), ``attributes`` (Python values with schema defaults filled in; tensors as
        numpy arrays; subgraphs as graph views), ``inputs`` and ``outputs`` (value views with
        ``name``, ``dtype``, ``shape``, ``is_constant`` and a lazily read ``value``; an omitted
        optional input is ``None``).
    :param context: a :class:`ep_host.ProviderContext`: the provider's registered name, the
        user's options for it, the model's opset imports and folder.
    :return: ``KernelMatch.supported(cost, ...)`` to claim the node, with a
        :class:`ep_host.Cost` in microseconds and the indices of inputs that must be on the
        host; or ``KernelMatch.unsupported(reason, code=...)`` with a reason that says what
        the provider accepts and what would make it claim the node.

    Calling :func:`ep_host.require` or :func:`ep_host.deny` inside the hook declines with that
    reason. Raising any other exception, returning something that is not a ``KernelMatch``
    (``None`` included), or a cost that is negative or not finite is recorded as this
    provider's decline for the node with code ``fault``, naming the fault; other providers'
    answers are unaffected. ``EP_HOST_STRICT=1`` re-raises instead.

    Claim only what you compute right: a wrong answer is worse than a decline.

    Layouts: a kernel that computes in another memory layout than the model's (channels last)
    says so in its claim: ``required_input_layouts`` (one entry per input) and
    ``output_layouts`` (one per output) name layouts of :data:`ep_host.layouts.LAYOUTS`
    (``"NHWC"``, ``"NWC"``, ``"NDHWC"``, and the model's own ``"NCHW"``, ``"NCW"``,
    ``"NCDHW"``); ``None`` or a missing entry is the model's layout. Where a producer writes a
    layout its consumer does not read, the host converts the tensor on the consumer's device
    and prices the conversion like a device copy (``ep_host.layouts.conversion_cost_us``), so
    placement weighs it; graph inputs and outputs stay in the model's layout. The node the
    provider sees here has the model's shapes. A name the host does not know, a layout of
    another rank than the value's, or an entry for a value the node lacks is this provider's
    fault for the node, naming the input or output. ``Cost.transfer_us`` is for copies or
    conversions the kernel makes itself; the host's conversions are priced apart.

    Example::

        @hookimpl
        def ep_host_supports_op(node, context):
            require(node.op_type == "Relu", "only Relu, got {}", node.op_type)
            return KernelMatch.supported(Cost(compute_us=1.0))

        # a Conv computed channels last: X in NHWC, weight and bias as the model has them
        return KernelMatch.supported(cost, required_input_layouts=["NHWC"],
                                     output_layouts=["NHWC"])
    """


@hookspec
def ep_host_infer_types(node: NodeView, context: ProviderContext) -> list[tuple] | None:
    """Declare the types and shapes of a custom op's outputs (optional).

    onnx's shape inference knows only the ops it has schemas for: a custom-domain node's outputs,
    and every value computed from them, are left without a type, so no provider can check the
    dtypes downstream. When loading leaves a main-graph node of a domain other than onnx's with an
    output of unknown type, the host asks each provider in use that implements this hook, in the
    user's order, before the capability walk; the first answer that is not ``None`` is declared
    in the model (as ``value_info``) and shape inference runs again from it, so the nodes that
    read those outputs see their types. Declared types never replace types the model states.

    :param node: the node's read-only view, as ``ep_host_supports_op`` gets it; its inputs'
        types are known where the model or an earlier declaration gives them.
    :param context: the :class:`ep_host.ProviderContext` of the provider.
    :return: one ``(dtype, shape)`` per node output, in order: ``dtype`` an
        :class:`ep_host.DType`, an element type name (``"float32"``) or a numpy dtype; ``shape``
        a tuple of ints (static dims), strings (symbolic dims) and ``None`` (unknown dims), or
        ``None`` for an unknown rank. Return ``None`` for nodes this provider does not know.

    Raising, or returning anything else (the wrong number of pairs, an unknown dtype), is this
    provider's fault: the host adds a warning to the model that names the provider and the node
    and asks the next provider; ``EP_HOST_STRICT=1`` raises a ``ProviderError`` instead.

    Example::

        @hookimpl
        def ep_host_infer_types(node, context):
            if (node.domain, node.op_type) != ("com.mine", "Swish"):
                return None
            x = node.inputs[0]
            return [(x.dtype, x.shape)]
    """


# ---------------------------------------------------------------------------------------------
# Running it
# ---------------------------------------------------------------------------------------------


@hookspec
def ep_host_create_kernel(node: NodeView, context: ProviderContext) -> Kernel:
    """Create the kernel that runs ``node`` on this provider.

    Called once per placed node at session creation, only for nodes this provider claimed
    in ``ep_host_supports_op``.

    :param node: the view ``ep_host_supports_op`` saw; constant inputs' values are readable
        through ``node.inputs[i].value`` if the kernel wants them now. Where the claim named
        layouts, each such input and output has its layout's shape (an NHWC kernel sees
        ``[N, H, W, C]``) and ``run`` gets, and must return, arrays in those layouts; a constant
        input in a layout not the model's comes converted to ``prepare``.
    :param context: the same :class:`ep_host.ProviderContext` as in ``ep_host_supports_op``.
    :return: an :class:`ep_host.Kernel`. The host then calls ``kernel.prepare(constants)``
        once with the node's constant inputs and ``kernel.run(*inputs)`` on every run; ``run``
        returns one array per node output, on this provider's device.

    Two optional kernel methods, asked once after ``prepare``:

    - **Shared prepacked constants.** ``kernel.prepacked()`` returns ``{packing_key:
      (input_indices, state)}``: the state ``prepare`` built from those constant inputs, and a
      key naming everything else it depends on (op, attributes, layout, dtype). In a session
      with ``share_prepacked=True`` (or ``SessionOptions.share_prepacked``), the host keys it by
      device, packing key and the inputs' contents (dtype, shape, SHA-256 of the bytes), so two
      sessions of one file, or two nodes reading equal weights, match; the first state offered
      is kept in a process-wide container while a session uses it, and every later kernel gets
      it through ``kernel.adopt_prepacked(packing_key, state)`` and drops its own. The same
      container shares constants of 4 KiB and more by contents. A shared state must never be
      written by ``run``; a key that leaves out something the state depends on is a wrong
      answer. ``session.prepacked`` lists what each kernel offered and adopted.
    - **Workspaces.** ``kernel.workspace(inputs)`` gets one ``(numpy dtype, shape)`` per input
      (``None`` for an omitted one) and returns an :class:`ep_host.Workspace` (``nbytes``,
      ``lifetime="run"`` or ``"session"``) or ``None``. The host allocates it once on the
      kernel's device (``Device.empty``; numpy on the host) and calls ``run(*inputs,
      workspace=buffer)`` (and ``call``) with a ``uint8`` array of at least ``nbytes``: per-run
      workspaces of a device share one arena sized to the largest, one per concurrent run,
      holding garbage; a session workspace is the kernel's own, kept between runs, and its
      calls are serialised. The kernel must never return the workspace or a view of it, and
      must still compute right without one (it then allocates itself).

    Raising, or returning something that is not a ``Kernel``, fails session creation with an
    error that names the node and this provider. So do raising in ``prepacked``,
    ``adopt_prepacked`` or ``workspace``, offering a state built from an input that is not
    constant, and asking for anything but a ``Workspace`` of ``nbytes >= 0`` (one over the
    session's ``max_tensor_bytes`` is a ``ResourceLimitError``).

    Example::

        @hookimpl
        def ep_host_create_kernel(node, context):
            return FunctionKernel(numpy.negative)
    """


@hookspec
def ep_host_compile_partition(partition: PartitionView, context: ProviderContext) -> Kernel:
    """Compile a group of nodes placed on this provider into one kernel (optional).

    For providers that compile subgraphs (onnxruntime's ``Compile``, OpenVINO's
    ``compile_model``, TensorRT). After placement, the host hands each maximal connected group
    of nodes placed on a provider that implements this hook, in execution order; a group never
    makes the graph cyclic (where a path leaves a group and comes back, the host splits it).
    ``ep_host_supports_op`` stays the source of every node's answer and reason: explain, why
    and placement are per node for compiling providers too. A provider without this hook gets
    ``ep_host_create_kernel`` per node.

    :param partition: a :class:`ep_host.PartitionView`: ``nodes`` (read-only node views, in
        execution order), ``inputs`` (the non-constant values it reads from outside, in the order
        ``run`` receives them), ``outputs`` (the values read outside it, in the order ``run``
        returns them), ``constants`` (the weights its nodes read) and ``to_model()``, the group
        as a standalone ONNX model.
    :param context: the :class:`ep_host.ProviderContext` of the provider.
    :return: an :class:`ep_host.Kernel` whose ``run(*inputs)`` returns one array per entry of
        ``partition.outputs``; the host runs it as one step (one trace span listing the nodes).
        ``prepare`` is called with no constants: the kernel reads the weights it needs from
        ``partition.constants`` when it compiles.

    Raising, or returning something that is not a ``Kernel``, never fails the session: the host
    warns (naming the provider, the group's nodes and the error) and creates the group's nodes
    one by one with ``ep_host_create_kernel`` on this provider, or on the next claimant that
    can. ``EP_HOST_STRICT=1`` raises instead.

    Example::

        @hookimpl
        def ep_host_compile_partition(partition, context):
            session = my_runtime.compile(partition.to_model().SerializeToString())
            return FunctionKernel(session.run, n_outputs=len(partition.outputs))
    """
